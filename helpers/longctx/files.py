"""Output folders that belong to the user: a command writes into a fresh temporary sibling and then moves
only its own files into place, replacing nothing else. A folder that holds files the command did not write
(by the list it keeps there, `.longctx-<command>.json`) is refused before any work, unless `force`."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from pathlib import Path

from longctx.errors import LongctxError
from longctx.paths import user_path
from longctx.units import MIB

# bytes kept free in an output folder's name: the temporary siblings add ".", ".tmp-" and a host/PID suffix
OUT_ROOM = 64


CLAIM = ["*"]  # the marker of a folder a command claimed whole (claim_folder)


def _ledger(out: Path, command: str) -> Path:
    return out / f".longctx-{command}.json"


def mark_claimed(folder: Path, command: str, files: list[str] | None = None) -> None:
    """Write the marker that says `command` owns all of `folder` (as claim_folder does), or, with `files`,
    the files it wrote there (a folder it replaces whole: see claimed_files)."""
    _ledger(folder, command).write_text(json.dumps(CLAIM if files is None else files))


def claimed_files(folder: Path, command: str) -> set[str] | None:
    """The files `command` listed in its marker when it last wrote `folder`; None without a list."""
    marker = _ledger(folder, command)
    try:
        names = json.loads(marker.read_text()) if marker.is_file() else CLAIM
    except (OSError, ValueError):
        names = CLAIM
    return None if names == CLAIM else set(names)


@contextlib.contextmanager
def atomic(path: Path):
    """A temporary sibling of `path` to write; it replaces `path` when the block ends without error. A failed
    or interrupted write leaves nothing half-written in place; a full disk or a read-only place is named."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, path)
    except OSError as exc:
        raise write_error(exc, path) from None
    finally:
        tmp.unlink(missing_ok=True)


def _ledger_names(ledger: Path) -> set[str]:
    """The names a command recorded as its own in a folder; a damaged ledger is refused, never trusted."""
    if not ledger.exists():
        return set()
    try:
        names = json.loads(ledger.read_text()) if ledger.is_file() else None
    except (OSError, ValueError):
        names = None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise LongctxError(
            f"{ledger} is damaged (it should list the files longctx wrote there); remove it, and the "
            "folder will be treated as holding your files."
        )
    return set(names)


def _writable(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise LongctxError(f"{out} is a file, not a folder; choose a folder for the output.")
    parent = out if out.exists() else next((p for p in out.parents if p.exists()), Path("/"))
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK) or _read_only(parent):
        raise LongctxError(f"{parent} is not a writable folder; choose another output folder.")


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def check_out(out: str | Path, command: str, *, writes: set[str], force: bool = False, replace_own: bool = True) -> Path:
    """Refuse, before any expensive work, an `out` that cannot be written or that holds files `command` did
    not write there (by its ledger). `writes`: the names the command will write. With `force` the other
    files are kept beside the command's, and a name of `writes` already held by a file the command did not
    write is still refused — unless `replace_own=False`, where `force` is the explicit ask to replace
    those files (a model folder)."""
    out = user_path(out, "--out", resolve=True, room=OUT_ROOM)
    _writable(out)
    ledger = _ledger(out, command)
    present = sorted(p.name for p in out.iterdir() if p.name != ledger.name) if out.exists() else []
    ours = _ledger_names(ledger)
    foreign = [name for name in present if name not in ours]
    shown = lambda names: ", ".join(names[:5]) + (", …" if len(names) > 5 else "")  # noqa: E731
    if present and not replace_own and not force:
        raise LongctxError(
            f"{out} is not empty ({shown(present)}). Choose a new folder, or pass --force to replace "
            f"the files `longctx {command}` writes there ({shown(sorted(writes))}); nothing else is "
            "touched."
        )
    _check_targets(out, writes)
    if foreign and replace_own:
        clash = sorted(set(foreign) & writes)
        if not force:
            raise LongctxError(
                f"{out} holds files `longctx {command}` did not write ({shown(foreign)}). Choose an "
                "empty or new folder, or pass --force to add this command's files beside them."
            )
        if clash:
            raise LongctxError(
                f"{out} holds files of yours with the names `longctx {command}` writes "
                f"({shown(clash)}); --force keeps your files, so it cannot write there. Choose "
                "another folder."
            )
    return out


def claim_folder(out: str | Path, command: str, *, default: Path | None = None, write: bool = True) -> Path:
    """A whole folder for a command that writes what it likes inside (a notebook run, a sweep): new, empty,
    the command's default, or one it claimed before; anything else is refused. With `write`, claims it
    (a marker file) and creates it."""
    out = user_path(out, "--out", resolve=True, room=OUT_ROOM)
    _writable(out)
    marker = _ledger(out, command)
    mine = default is not None and out == user_path(default, resolve=True)  # callers check its contents
    if marker.exists() or marker.is_symlink():
        _check_marker(marker, out, command)
    if out.exists() and any(out.iterdir()) and not marker.exists() and not mine:
        names = sorted(p.name for p in out.iterdir())
        raise LongctxError(
            f"{out} holds files `longctx {command}` did not write ({', '.join(names[:5])}"
            f"{', …' if len(names) > 5 else ''}). Give --out a new or empty folder (or one this command "
            "wrote before); nothing in it was touched."
        )
    if not write:
        return out
    try:
        out.mkdir(parents=True, exist_ok=True)
        if not marker.exists():
            mark_claimed(out, command)
    except OSError as exc:
        raise write_error(exc, out) from None
    return out


def _check_marker(marker: Path, out: Path, command: str) -> None:
    """A claimed folder is reused only as its claim left it: the marker as written, no symbolic link anywhere
    inside (a run writes into figures/, runs/, … and would write through one into someone's files), and, where
    the marker lists the files (a folder replaced whole), no file it does not list."""
    try:
        listed = json.loads(marker.read_text()) if marker.is_file() and not marker.is_symlink() else None
        intact = listed == CLAIM or (isinstance(listed, list) and all(isinstance(n, str) for n in listed))
    except (OSError, ValueError):
        intact = False
    if not intact:
        raise LongctxError(
            f"{marker} is not the marker longctx writes when it claims a folder; remove it if the "
            f"folder is yours to reuse, or give --out a new folder. Nothing in {out} was touched."
        )
    listed = claimed_files(out, command)
    yours = []
    for root, dirs, files in os.walk(out):
        links = [name for name in dirs + files if (Path(root) / name).is_symlink()]
        if links:
            raise LongctxError(
                f"{Path(root) / links[0]} is a symbolic link: a run would write through it. Remove it "
                f"(or give --out a new folder); nothing in {out} was touched."
            )
        yours += [str((Path(root) / f).relative_to(out)) for f in files if listed is not None and f != marker.name]
    yours = sorted(set(yours) - (listed or set()))
    if yours:
        raise LongctxError(
            f"{out} holds files `longctx {command}` did not write ({', '.join(yours[:5])}{', …' if len(yours) > 5 else ''}), "
            "and it replaces the folder whole. Move them out, or give --out another folder; nothing was touched."
        )


def staging(out: Path) -> tempfile.TemporaryDirectory:
    """A fresh temporary folder beside `out` (same file system, so the final moves are renames)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    return tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.tmp-")


def _check_targets(out: Path, names) -> None:
    """Each name a command writes is free or a regular file: a folder or a link there is refused (a rename
    would fail on it half-way, or write through it)."""
    for name in sorted(names):
        target = out / name
        if target.is_symlink() or (target.exists() and not target.is_file()):
            raise LongctxError(
                f"{target} is a {'symbolic link' if target.is_symlink() else 'folder'} where longctx "
                "writes a file; move it away (or choose another folder). Nothing was written."
            )


def place(tmp: Path, out: Path, command: str) -> list[str]:
    """Move every file of `tmp` into `out`, replacing only files of the same names, and record them. Every
    target is checked before the first move, so the files land all together or not at all."""
    out.mkdir(parents=True, exist_ok=True)
    names = sorted(p.name for p in Path(tmp).iterdir() if p.is_file())
    _check_targets(out, names)
    for name in names:
        os.replace(Path(tmp) / name, out / name)
    ledger = _ledger(out, command)
    previous = _ledger_names(ledger)
    with atomic(ledger) as tmp_ledger:
        tmp_ledger.write_text(json.dumps(sorted(previous | set(names))))
    return names


def write_error(exc: OSError, path: Path) -> LongctxError:
    """The error a failed write turns into: a full disk or a read-only place named, with what to do."""
    path = Path(path)
    if exc.errno == errno.ENOSPC:
        where = next((p for p in [path, *path.parents] if p.exists()), Path("/"))
        free = shutil.disk_usage(where).free / MIB
        return LongctxError(
            f"The disk is full while writing {path} ({free:.0f} MiB free there). Free space, or point "
            "the output elsewhere (--out, LONGCTX_BUILD); nothing half-written was left in place."
        )
    if exc.errno == errno.EFBIG:
        return LongctxError(
            f"The file-size limit stopped writing {path} (`ulimit -f`); raise it, or write less (fewer lengths, "
            "smaller figures); nothing half-written was left in place."
        )
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return LongctxError(f"Cannot write {path}: {exc.strerror}. Choose a writable folder (--out, LONGCTX_BUILD).")
    return LongctxError(f"Could not write {path}: {exc}.")
