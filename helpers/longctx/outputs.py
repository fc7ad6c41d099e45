"""Output folders that belong to the user: a command writes into a fresh temporary sibling and then moves
only its own files into place, replacing nothing else. A folder that holds files the command did not write
(by the list it keeps there, `.longctx-<command>.json`) is refused before any work, unless `force`."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from pathlib import Path

from .errors import LongctxError


def _ledger(out: Path, command: str) -> Path:
    return out / f".longctx-{command}.json"


def check_out(out: str | Path, command: str, *, force: bool = False, replace_own: bool = True) -> Path:
    """Refuse, before any expensive work, an `out` that cannot be written or that holds files `command` did
    not write there. `replace_own=False` also refuses a folder holding the command's own earlier output
    (a committed model, say) unless `force`."""
    out = Path(out).expanduser().resolve()
    if out.exists() and not out.is_dir():
        raise LongctxError(f"{out} is a file, not a folder; choose a folder for the output.")
    parent = out if out.exists() else next((p for p in out.parents if p.exists()), Path("/"))
    if not os.access(parent, os.W_OK | os.X_OK):
        raise LongctxError(f"{parent} is not writable; choose another output folder.")
    present = sorted(p.name for p in out.iterdir() if p.name != _ledger(out, command).name) if out.exists() else []
    if present and not force:
        shown = ", ".join(present[:5]) + (", …" if len(present) > 5 else "")
        if not replace_own:
            raise LongctxError(f"{out} is not empty ({shown}). Choose a new folder, or pass --force to replace the "
                               f"files `longctx {command}` writes there (nothing else is touched).")
        ours = set(json.loads(_ledger(out, command).read_text())) if _ledger(out, command).exists() else set()
        foreign = [name for name in present if name not in ours]
        if foreign:
            raise LongctxError(f"{out} holds files `longctx {command}` did not write ({', '.join(foreign[:5])}"
                               f"{', …' if len(foreign) > 5 else ''}). Choose an empty or new folder, or pass --force "
                               f"to add this command's files beside them (nothing else is touched).")
    return out


def staging(out: Path) -> tempfile.TemporaryDirectory:
    """A fresh temporary folder beside `out` (same file system, so the final moves are renames)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    return tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.tmp-")


def place(tmp: Path, out: Path, command: str) -> list[str]:
    """Move every file of `tmp` into `out`, replacing only files of the same names, and record them."""
    out.mkdir(parents=True, exist_ok=True)
    names = sorted(p.name for p in Path(tmp).iterdir() if p.is_file())
    for name in names:
        os.replace(Path(tmp) / name, out / name)
    ledger = _ledger(out, command)
    previous = set(json.loads(ledger.read_text())) if ledger.exists() else set()
    tmp_ledger = ledger.with_name(ledger.name + ".tmp")
    tmp_ledger.write_text(json.dumps(sorted(previous | set(names))))
    os.replace(tmp_ledger, ledger)
    return names


def write_error(exc: OSError, path: Path) -> LongctxError:
    """The error a failed write turns into: a full disk or a read-only place named, with what to do."""
    path = Path(path)
    if exc.errno == errno.ENOSPC:
        where = next((p for p in [path, *path.parents] if p.exists()), Path("/"))
        free = shutil.disk_usage(where).free / 2**20
        return LongctxError(f"The disk is full while writing {path} ({free:.0f} MiB free there). Free space, or point "
                            "the output elsewhere (--out, LONGCTX_BUILD); nothing half-written was left in place.")
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return LongctxError(f"Cannot write {path}: {exc.strerror}. Choose a writable folder (--out, LONGCTX_BUILD).")
    return LongctxError(f"Could not write {path}: {exc}.")
