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
    named = os.environ.get(variable)
    path = user_path(named or default, variable)
    if path.is_symlink() and not path.exists() or path.exists() and not path.is_dir():
        what = "a symbolic link that leads nowhere (dangling, or a loop)" if path.is_symlink() else "not a folder"
        said = f"{variable}={named}" if named else f"{path} (the default; {variable} moves it)"
        raise LongctxError(f"{said} is {what}: point {variable} at a folder, or move that away.")
    return path


def user_path(text, what: str = "The path", *, resolve: bool = False, room: int = 0) -> Path:
    """A path as the user typed it, `~` expanded (with `resolve`, made absolute through its links), refused with
    the fix when it cannot name a file here (`room`: bytes a temporary sibling adds to the name)."""
    text = os.fspath(text)
    if not text.strip():
        raise LongctxError(f"{what} is empty: name a folder or a file.")
    if control := sorted({c for c in text if ord(c) < 32 or ord(c) == 127}):
        raise LongctxError(
            f"{what} {text!r} holds {', '.join(map(repr, control))}: a line break or other control character, "
            "most often pasted by mistake; type the name without it."
        )
    try:
        path = Path(text).expanduser()
    except RuntimeError:  # ~name of a user this machine does not have
        raise LongctxError(
            f"{what} {text!r} starts with {text.split('/')[0]!r}, but this machine has no such user; "
            "write the folder out in full."
        ) from None
    limit = 255 - room
    if any(len(os.fsencode(part)) > limit for part in path.parts) or len(os.fsencode(str(path))) > 4095 - room:
        raise LongctxError(
            f"{what} {text[:40]!r}… ({len(text)} characters) is too long to name a file or a folder "
            f"here (at most {limit} bytes a name, {4095 - room} a path); shorten it."
        )
    if resolve:
        try:
            path = path.resolve()
        except (RuntimeError, OSError) as exc:  # Python 3.11 raises RuntimeError for a loop of links
            raise LongctxError(
                f"{what} {text!r} cannot be followed ({exc}): a loop of symbolic links? Give another path."
            ) from None
        if Path(text).expanduser().is_symlink() and not path.exists():  # a write would create the link's target
            raise LongctxError(
                f"{what} {text!r} is a symbolic link to {os.readlink(Path(text).expanduser())!r}, which does not exist; "
                "give the folder itself (or remove the link)."
            )
    return path


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
    return REPO / "notebooks"


def schema_file(notebook: str) -> Path:
    """Where a lesson declares its parameters (run/schema.py checks them; a session records them)."""
    return notebooks_dir() / "params" / notebook / "schema.yaml"


def slug(value) -> str:
    """A file-name-safe form of any value (a hub id, a path, a list): runs of other characters become "_"."""
    text = json.dumps(value) if not isinstance(value, str) else value
    return re.sub(r"[^A-Za-z0-9.+-]+", "_", text).strip("_") or "_"
