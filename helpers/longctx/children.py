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
    """Every process below `pid` (children, grandchildren, ...): torchrun gives each rank a process group of its
    own, so killing torchrun's group alone misses them."""
    import psutil

    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


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


def _pool_worker() -> None:
    stop_with_parent()  # a worker ends when the process that started it does (and its children with it)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the parent, which stops the workers itself


def pool_map(fn, calls: list, workers: int, bar=None) -> list:
    """`fn(call)` for each call on `workers` spawned processes, the results in the order of `calls`. Interrupted
    (Ctrl-C) or failing, the calls not started are cancelled and the workers killed with everything below them,
    so it returns at once instead of waiting for the running calls."""
    import contextlib
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=_pool_worker)
    try:
        futures = {pool.submit(fn, call): i for i, call in enumerate(calls)}
        results: list = [None] * len(calls)
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            if bar is not None:
                bar.update()
    except BaseException:
        pids = list(getattr(pool, "_processes", None) or {})  # the pool's worker PIDs (CPython's attribute)
        with contextlib.suppress(ValueError):  # (only the main thread may set a handler)
            signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # the pool's pipes to killed workers fail quietly
        for pid in [q for w in pids for q in descendants(w)] + pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        pool.shutdown(wait=True, cancel_futures=True)  # returns at once: the pool sees its workers gone
        raise
    finally:
        if bar is not None:
            bar.close()
    pool.shutdown()
    return results


def oom_kills() -> int:
    """How many processes the kernel's out-of-memory killer has stopped so far, summed over the counters
    Linux keeps: this process's memory cgroup (v2 memory.events, v1 memory.oom_control) and the machine's
    (/proc/vmstat). A rise across a child's death says the OOM killer took it; 0 where none is readable."""
    files = [Path("/proc/vmstat")]
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, rel = line.split(":", 2)
            if controllers == "":
                files.append(Path("/sys/fs/cgroup") / rel.lstrip("/") / "memory.events")
            elif "memory" in controllers.split(","):
                files.append(Path("/sys/fs/cgroup/memory") / rel.lstrip("/") / "memory.oom_control")
    except (OSError, ValueError):
        pass
    total = 0
    for f in files:
        try:
            total += sum(int(line.split()[1]) for line in f.read_text().splitlines() if line.startswith("oom_kill "))
        except (OSError, ValueError, IndexError):
            pass
    return total
