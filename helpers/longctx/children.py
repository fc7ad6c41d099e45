"""Child processes that never outlive the process that started them: a launched torchrun and its ranks, a
sweep's pool workers and their kernels."""

from __future__ import annotations

import os
import signal
from pathlib import Path


def stop_with_parent() -> None:
    """Called in a child before it runs (preexec_fn, a pool's initializer): Linux sends it SIGTERM when its
    parent dies, even by SIGKILL. Elsewhere a no-op."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children, grandchildren, ...), read from /proc: torchrun gives each rank a
    process group of its own, so killing torchrun's group alone misses them."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else []:
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state letter
    found, frontier = [], [pid]
    while frontier:
        children = [p for p, ppid in parents.items() if ppid in frontier]
        found += children
        frontier = children
    return found


def stop_tree(proc) -> None:
    """End a started process, its process group and every process below it; then reap it."""
    if proc.poll() is None:
        below = descendants(proc.pid)
        for kill in (lambda: os.killpg(proc.pid, signal.SIGKILL), *(lambda p=p: os.kill(p, signal.SIGKILL) for p in below)):
            try:
                kill()
            except (ProcessLookupError, PermissionError):
                pass
    proc.wait()
