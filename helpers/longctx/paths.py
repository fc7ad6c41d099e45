"""Where things live: the repository root, data/ and build/ (overridable by environment variables)."""

import json
import os
import re
from pathlib import Path

from longctx.errors import LongctxError

REPO = Path(__file__).resolve().parents[2]
CORPUS = "corpus"  # the shipped text: its name as a dataset (data.long_sequences), its folder under data/


def _folder(variable: str, default: Path) -> Path:
    """The folder an environment variable names (an empty one counts as unset). Never created here: the command that
    writes into it creates it, so a command refused before its work leaves no empty folder behind."""
    folder = user_path(os.environ.get(variable) or default, variable)
    if folder.exists() and not folder.is_dir():
        raise LongctxError(f"{variable} names {folder}, which is not a folder; unset it or name a folder.")
    return folder


def user_path(text, what: str = "The path") -> Path:
    """A path as the user typed it, `~` expanded, refused with the fix when it is empty or holds a control character
    (a line break pasted by mistake). Whatever else the file system makes of it is its own error (tools/cli.py)."""
    text = os.fspath(text)
    if not text.strip():
        raise LongctxError(f"{what} is empty: name a folder or a file.")
    if control := sorted({c for c in text if ord(c) < 32 or ord(c) == 127}):
        raise LongctxError(f"{what} {text!r} holds {', '.join(map(repr, control))}: a line break or other control "
                           "character, most often pasted by mistake; type the name without it.")  # fmt: skip
    return Path(os.path.expanduser(text))


def data_dir() -> Path:
    """Fetched and built artefacts (corpus, tokenizer, checkpoints). LONGCTX_DATA overrides."""
    return _folder("LONGCTX_DATA", REPO / "data")


# the lessons' own models, by the name a notebook's MODEL gives them: their folders under data/
MINIATURES = {"base": "yarn-base", "retrieval": "retrieval-base"}


def miniature(name: str) -> Path:
    return data_dir() / MINIATURES[name]


def build_dir() -> Path:
    """Executed notebooks, results and figures. LONGCTX_BUILD overrides."""
    return _folder("LONGCTX_BUILD", REPO / "build")


def notebooks_dir() -> Path:
    """The lessons and their params/ folder. LONGCTX_NOTEBOOKS names another such folder (the tests' synthetic lesson,
    a course of your own)."""
    folder = _folder("LONGCTX_NOTEBOOKS", REPO / "notebooks")
    if not folder.is_dir():  # read, never written: it must be there
        raise LongctxError(f"LONGCTX_NOTEBOOKS names {folder}, which is not there; unset it or name a folder of lessons.")
    return folder


def schema_file(notebook: str) -> Path:
    """Where a lesson declares its parameters (run/schema.py checks them; a session records them)."""
    return notebooks_dir() / "params" / notebook / "schema.yaml"


def slug(value) -> str:
    """A file-name-safe form of any value (a hub id, a path, a list): runs of other characters become "_"."""
    text = json.dumps(value) if not isinstance(value, str) else value
    return re.sub(r"[^A-Za-z0-9.+-]+", "_", text).strip("_") or "_"
