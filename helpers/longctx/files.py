"""Output folders that belong to the user, and writes that never leave half a file. A command writes a folder that is
new, empty, or one it wrote before (its marker, MARKER); one with files and no marker is the user's, refused unless `force`."""

import contextlib
import errno
import json
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

from longctx.errors import LongctxError
from longctx.paths import user_path
from longctx.units import MIB

# bytes kept free in an output folder's name: the temporary siblings add ".", ".tmp-" and a host/PID suffix
OUT_ROOM = 64
MARKER = ".longctx-{}.json"  # a command's marker in a folder it wrote; it holds MARK
MARK = '["*"]'  # a hand-made file of that name holding anything else is no marker
BUILT = ".longctx-{}-files.json"  # the files a command's last build of a whole folder wrote (swap_in)


def mark_claimed(folder: Path, command: str) -> None:
    with atomic(folder / MARKER.format(command)) as tmp:  # replaces whatever has the name, never writes through a link
        tmp.write_text(MARK)


def _look(out: Path, command: str) -> tuple[list[str], bool]:
    """The names in `out` besides the command's marker, and whether the marker is one the command wrote (a FIFO, a
    link or another file of that name is none, is never read, and counts as the user's)."""
    marker, marked = out / MARKER.format(command), False
    with contextlib.suppress(OSError):
        marked = marker.is_file() and not marker.is_symlink() and marker.read_text() == MARK
    return (sorted(p.name for p in out.iterdir() if p != marker or not marked) if out.exists() else []), marked


def claimed(folder: Path, command: str) -> bool:
    """Whether `command` wrote `folder` (its marker is there)."""
    return _look(folder, command)[1]


def _json(path: Path):
    """JSON read from a regular file (never opened otherwise, so a FIFO cannot hang), or None."""
    with contextlib.suppress(OSError, ValueError, RecursionError):  # (nested past what the reader follows)
        return json.loads(path.read_text()) if path.is_file() else None


def json_object(path: Path) -> dict | None:
    """A JSON object read from a regular file, or None."""
    value = _json(path)
    return value if isinstance(value, dict) else None


def _shown(names) -> str:
    return ", ".join(names[:5]) + (", …" if len(names) > 5 else "")


@contextlib.contextmanager
def atomic(path: Path):
    """A temporary sibling of `path` to write, which replaces `path` when the block ends without error: a failed
    or interrupted write leaves nothing half-written in place."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, path)
    except OSError as exc:
        raise write_error(exc, path) from None
    finally:
        with contextlib.suppress(OSError):  # on a read-only place the temporary was never made: the error above says so
            tmp.unlink(missing_ok=True)


def _writable(out: str | Path) -> Path:
    out = user_path(out, "--out", resolve=True, room=OUT_ROOM)
    if out.exists() and not out.is_dir():
        what = "a file" if out.is_file() else "not a folder (a FIFO, a device or a socket)"
        raise LongctxError(f"{out} is {what}; choose a folder for the output.")
    parent = out if out.exists() else next((p for p in out.parents if p.exists()), Path("/"))
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):  # EROFS too, even for root
        raise LongctxError(f"{parent} is not a writable folder; choose another output folder.")
    return out


def check_out(
    out: str | Path, command: str, *, writes: set[str], folders: set[str] = frozenset(), force=False, replace_own=True
) -> Path:
    """Refuse, before any work, an `out` that cannot be written or holds files `command` did not write (every file
    but `writes` (and the sub`folders` it writes) with its marker, every file without). `force` keeps them beside
    the command's, but still refuses a user's file named as one of `writes`, unless `replace_own=False` (a model),
    where `force` asks to replace it."""
    out = _writable(out)
    present, marked = _look(out, command)
    if wrong := [name for name in sorted(folders) if (out / name).is_symlink() or (out / name).is_file()]:
        raise LongctxError(f"{out / wrong[0]} should be a folder that `longctx {command}` writes; move it away.")
    foreign = [name for name in present if not (marked and name in writes | folders)]
    if present and not replace_own and not force:
        raise LongctxError(
            f"{out} is not empty ({_shown(present)}). Choose a new folder, or pass --force to replace the files "
            f"`longctx {command}` writes there ({_shown(sorted(writes))}); nothing else is touched."
        )
    _check_targets(out, writes)
    if foreign and replace_own and not force:
        raise LongctxError(
            f"{out} holds files `longctx {command}` did not write ({_shown(foreign)}). Choose an empty or new "
            "folder, or pass --force to add this command's files beside them."
        )
    if replace_own and (clash := sorted(set(foreign) & writes)):
        raise LongctxError(
            f"{out} holds files of yours with the names `longctx {command}` writes ({_shown(clash)}); --force "
            "keeps your files, so it cannot write there. Choose another folder."
        )
    return out


def check_room(out: Path, need_bytes: int, need_files: int, writes: str) -> None:
    """Refuse, before any work, an `out` whose disk lacks the space or the room for files (inodes) that `writes` takes:
    the command would stop part-way, on a full disk or on one with no inodes left and megabytes free."""
    where = next(p for p in [out, *out.parents] if p.exists())
    free, room = shutil.disk_usage(where).free, os.statvfs(where)
    if free < need_bytes or room.f_files and room.f_favail < need_files:
        has = f"{free / MIB:.1f} MiB free" if free < need_bytes else f"room for {room.f_favail} new files (inodes)"
        raise LongctxError(
            f"{where} has {has}; {writes} there (up to {need_bytes / MIB:.0f} MiB in {need_files} files). Free space, "
            "or give --out another disk. Nothing was started."
        )


def check_kinds(out: Path, kinds: dict[str, bool], command: str) -> None:
    """Refuse, before any work, a name in `out` that `command` writes as a regular file (False) or a folder (True)
    standing there as something else: the write would fail half-way, in a raw error. (A link there is claim_folder's
    to refuse.)"""
    for name, folder in kinds.items():
        path = out / name
        if path.exists() and not path.is_symlink() and not (path.is_dir() if folder else path.is_file()):
            raise LongctxError(
                f"{path} should be a {'folder' if folder else 'file'} that `longctx {command}` writes; move it away (or "
                "give --out another folder). Nothing was started."
            )


def claim_folder(out: str | Path, command: str, *, write: bool = True) -> Path:
    """A whole folder for a command that writes what it likes inside (a run, a sweep, the site): new, empty, or one
    it wrote before (its marker), the default folder too. `write` creates and marks it."""
    out = _writable(out)
    present, marked = _look(out, command)
    if present and not marked:
        raise LongctxError(
            f"{out} holds files `longctx {command}` did not write ({_shown(present)}). Give --out a new or empty "
            "folder (or one this command wrote before); nothing in it was touched."
        )
    if links := [name for name in present if (out / name).is_symlink()]:  # it would write through one
        raise LongctxError(
            f"{out / links[0]} is a symbolic link: the command would write through it. Remove it (or give --out "
            f"a new folder); nothing in {out} was touched."
        )
    if write:
        try:
            out.mkdir(parents=True, exist_ok=True)
            mark_claimed(out, command)
        except OSError as exc:
            raise write_error(exc, out) from None
    return out


def staging(out: Path) -> tempfile.TemporaryDirectory:
    """A fresh temporary folder beside `out` (same file system, so the final moves are renames)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    return tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.tmp-")


def _entries(root: Path) -> list[str]:
    """Every file, link and empty folder under `root`, relative, links to folders included and never followed."""
    found = []
    for folder, subfolders, names in os.walk(root):
        links = [d for d in subfolders if os.path.islink(os.path.join(folder, d))]
        found += [os.path.relpath(os.path.join(folder, name), root) for name in names + links]
        found += [os.path.relpath(folder, root)] if folder != str(root) and not names and not subfolders else []
    return sorted(found)


def swap_in(new: Path, out: Path, command: str) -> None:
    """Put the folder `new`, built beside `out`, in place of `out` whole: `out` is never written into (a link in it
    is never followed, a killed build never mixes two), it keeps its mode, and the files in it that the last build
    did not write (the user's) move into the new one before the swap: a clash, or a file that cannot move, leaves
    `out` as it was."""
    if os.path.ismount(out):
        raise LongctxError(f"{out} is a mount point, which cannot be swapped for a new folder: give a folder inside it.")
    own = {MARKER.format(command), BUILT.format(command)}
    built = [name for name in _entries(new) if name not in own]
    carried, mode = [], None
    if out.exists():
        mode = stat.S_IMODE(out.stat().st_mode)
        raw = None if (out / BUILT.format(command)).is_symlink() else _json(out / BUILT.format(command))
        # a folder built before this record: everything not rebuilt is kept
        last = {str(n) for n in raw} if isinstance(raw, list) else set(built)
        carried = [name for name in _entries(out) if name not in last | own]
        made = set(built) | {str(Path(name).parent) for name in built}
        if clash := [name for name in carried if name in made or any(str(p) in built for p in Path(name).parents)]:
            raise LongctxError(
                f"{out / clash[0]} is yours, and the new build writes {clash[0]} (or a folder of that name). Move it "
                f"out of {out} (or give --out another folder); nothing was changed."
            )
    (new / BUILT.format(command)).write_text(json.dumps(built))
    mark_claimed(new, command)
    if mode is not None:
        os.chmod(new, mode)
    aside, moved = out.with_name(f".{out.name}.old-{os.getpid()}"), []
    try:
        for name in carried:  # the user's files and folders, moved (a link as a link) into the new build first
            (new / name).parent.mkdir(parents=True, exist_ok=True)
            os.replace(out / name, new / name)
            moved.append(name)
        if out.exists():
            os.replace(out, aside)
    except OSError as exc:
        for name in reversed(moved):  # put back what moved: `out` is as it was
            os.replace(new / name, out / name)
        shutil.rmtree(new, ignore_errors=True)
        raise LongctxError(
            f"{exc.filename or out} could not be moved ({exc.strerror}): it may be immutable (`lsattr`) or in use. "
            f"Nothing was changed in {out}; free it, or give --out another folder."
        ) from None
    os.replace(new, out)
    left = []
    shutil.rmtree(aside, onerror=lambda function, path, exc: left.append(path))
    if left and aside.exists():  # (an immutable file of the last build's, say): said, not left unseen
        print(f"note: the last build could not be removed whole ({left[0]}); what is left of it is in {aside}.", file=sys.stderr)


def _check_targets(out: Path, names) -> None:
    """A folder or a link where a command writes a file is refused (a rename would fail on it, or write through it)."""
    for name in sorted(names):
        target = out / name
        if target.is_symlink() or (target.exists() and not target.is_file()):
            raise LongctxError(
                f"{target} is a {'symbolic link' if target.is_symlink() else 'folder'} where longctx "
                "writes a file; move it away (or choose another folder). Nothing was written."
            )


def place(tmp: Path, out: Path, command: str) -> None:
    """Move every file of `tmp` into `out` and mark it; every target is checked before the first move."""
    out.mkdir(parents=True, exist_ok=True)
    names = sorted(p.name for p in Path(tmp).iterdir() if p.is_file())
    _check_targets(out, names)
    for name in names:
        os.replace(Path(tmp) / name, out / name)
    mark_claimed(out, command)


def write_error(exc: OSError, path: Path) -> LongctxError:
    """The error a failed write turns into: a full disk or a read-only place named, with what to do."""
    if exc.errno == errno.ENOSPC:
        where = next((p for p in [path, *path.parents] if p.exists()), Path("/"))
        free, room = shutil.disk_usage(where).free / MIB, os.statvfs(where)
        full = "has room for no more files (its inodes are used up)" if room.f_files and not room.f_favail else "is full"
        return LongctxError(
            f"The disk {full} while writing {path} ({free:.0f} MiB free there). Free space, or point "
            f"the output elsewhere (--out, LONGCTX_BUILD, LONGCTX_DATA); {path.name} was not left half-written."
        )
    if exc.errno == errno.EFBIG:
        return LongctxError(
            f"The file-size limit stopped writing {path} (`ulimit -f`); raise it, or write less (fewer lengths, "
            f"smaller figures); {path.name} was not left half-written."
        )
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        where = "--out, LONGCTX_BUILD, LONGCTX_DATA"
        return LongctxError(f"Cannot write {path}: {exc.strerror}. Choose a writable folder ({where}).")
    why = exc.strerror or str(exc)  # a place that takes no folder (/proc), a name too long, a link loop, ...
    return LongctxError(
        f"Could not write {path}: {why}. Choose an ordinary writable folder (--out, LONGCTX_BUILD, LONGCTX_DATA)."
    )
