"""The one write rule. A command writes into a folder that is new, empty, or carries its marker (a folder it wrote
before); it replaces only the names it writes, through a temporary sibling renamed into place, so that nothing is ever
left half-written."""

import contextlib
import json
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

from longctx.errors import LongctxError
from longctx.paths import user_path

MARKER = ".longctx-{}.json"  # a command's marker in a folder it wrote; it holds MARK
MARK = '["*"]'  # a hand-made file of that name holding anything else is no marker
BUILT = ".longctx-{}-files.json"  # the files a command's last build of a whole folder wrote (swap_in)


def json_object(path: Path) -> dict | None:
    """A JSON object read from a regular file (a FIFO is never opened: it would block), or None."""
    with contextlib.suppress(OSError, ValueError, RecursionError):
        value = json.loads(path.read_text()) if path.is_file() else None
        return value if isinstance(value, dict) else None


def claimed(folder: Path, command: str) -> bool:
    """Whether `command` wrote `folder` (its marker is there, a regular file holding MARK)."""
    marker = folder / MARKER.format(command)
    with contextlib.suppress(OSError):
        return marker.is_file() and not marker.is_symlink() and marker.read_text() == MARK
    return False


def mark_claimed(folder: Path, command: str) -> None:
    with atomic(folder / MARKER.format(command)) as tmp:  # replaces whatever has the name, never writes through a link
        tmp.write_text(MARK)


def _shown(names) -> str:
    return ", ".join(names[:5]) + (", …" if len(names) > 5 else "")


def claim(out, command: str, own: dict[str, bool] | None = None, *, force=None, replace=True, write=True) -> Path:
    """The folder `out` for `command`, refused before any work unless it is new, empty, or carries the command's
    marker (or `force`, for a command that has --force: None where it has none)."""
    out, own = user_path(out, "--out").absolute(), own or {}  # ("" is not the current folder)
    if (out.exists() or out.is_symlink()) and not out.is_dir():  # (a link to nothing too)
        raise LongctxError(f"{out} is not a folder; give --out a folder.")
    marked = claimed(out, command)
    present = sorted(p.name for p in out.iterdir() if p.name != MARKER.format(command)) if out.exists() else []
    if present and not force and (not marked or not replace):
        fix = ", or pass --force to keep them and add this command's files" if force is not None else ""
        raise LongctxError(
            f"{out} holds files `longctx {command}` did not write ({_shown(present)}). Give --out a new or empty folder"
            f"{' (or one this command wrote before)' if replace else ''}{fix}; nothing in it was touched."
        )
    for name in present:
        path, kind = out / name, own.get(name)
        why = (
            "a link" if path.is_symlink() and (marked or kind is not None)
            else "of another kind" if kind is not None and path.is_dir() != kind
            else "yours" if kind is False and not marked and replace
            else None
        )  # fmt: skip
        if why:
            raise LongctxError(f"{path} is {why}, where `longctx {command}` writes a {'folder' if kind else 'file'} of its "
                               "own: move it away, or give --out another folder. Nothing was written.")  # fmt: skip
    if write:
        out.mkdir(parents=True, exist_ok=True)
        mark_claimed(out, command)
    return out


@contextlib.contextmanager
def atomic(path: Path):
    """A temporary sibling of `path` to write, which replaces `path` when the block ends without error: a failed
    or interrupted write leaves nothing half-written in place."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def staging(out: Path) -> tempfile.TemporaryDirectory:
    """A fresh temporary folder beside `out` (same file system, so the final moves are renames)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    return tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.tmp-")


def place(tmp: Path, out: Path, command: str) -> None:
    """Move every file of `tmp` into `out` (claimed before) and mark it."""
    out.mkdir(parents=True, exist_ok=True)
    for name in sorted(p.name for p in Path(tmp).iterdir() if p.is_file()):
        os.replace(Path(tmp) / name, out / name)
    mark_claimed(out, command)


def _entries(root: Path) -> list[str]:
    """Every file, link and empty folder under `root`, relative, links to folders included and never followed."""
    found = []
    for folder, subfolders, names in os.walk(root):
        links = [d for d in subfolders if os.path.islink(os.path.join(folder, d))]
        found += [os.path.relpath(os.path.join(folder, name), root) for name in names + links]
        found += [os.path.relpath(folder, root)] if folder != str(root) and not names and not subfolders else []
    return sorted(found)


def swap_in(new: Path, out: Path, command: str) -> None:
    """Put the folder `new`, built beside `out`, in place of `out` whole (a killed build never mixes two): the files in
    `out` that the last build did not write (the user's) move into the new one first; a clash leaves `out` as it was."""
    own = {MARKER.format(command), BUILT.format(command)}
    built = [name for name in _entries(new) if name not in own]
    carried, mode = [], None
    if out.exists():
        mode = stat.S_IMODE(out.stat().st_mode)
        raw = json.loads((out / BUILT.format(command)).read_text()) if (out / BUILT.format(command)).is_file() else None
        last = {str(n) for n in raw} if isinstance(raw, list) else set(built)  # (before this record: all kept)
        carried = [name for name in _entries(out) if name not in last | own]
        made = set(built) | {str(Path(name).parent) for name in built}
        if clash := [name for name in carried if name in made or any(str(p) in built for p in Path(name).parents)]:
            raise LongctxError(f"{out / clash[0]} is yours, and the new build writes {clash[0]} (or a folder of that name). "
                               f"Move it out of {out} (or give --out another folder); nothing was changed.")  # fmt: skip
    (new / BUILT.format(command)).write_text(json.dumps(built))
    mark_claimed(new, command)
    if mode is not None:
        os.chmod(new, mode)
    for name in carried:  # the user's files and folders, moved (a link as a link) into the new build first
        (new / name).parent.mkdir(parents=True, exist_ok=True)
        os.replace(out / name, new / name)
    aside = out.with_name(f".{out.name}.old-{os.getpid()}")
    if out.exists():
        os.replace(out, aside)
    os.replace(new, out)
    shutil.rmtree(aside, ignore_errors=True)
    if aside.exists():  # (a file of the last build that cannot be removed): said, not left unseen
        print(f"note: the last build could not be removed whole; what is left of it is in {aside}.", file=sys.stderr)
