"""Child processes that never outlive their parent: a launched torchrun and its ranks, a pool's workers and kernels."""

import contextlib
import ctypes
import multiprocessing
import os
import signal
import threading
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import psutil


def stop_with_parent() -> None:
    """In a child before it runs (preexec_fn, a pool's initializer): Linux sends it SIGTERM when its parent dies."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def kill_trees(pids) -> None:
    """Kill each process and every one below it, all listed before the first kill (torchrun's ranks have process
    groups of their own: killing a group misses them)."""
    procs = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            procs += [root := psutil.Process(pid), *root.children(recursive=True)]
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()


class Deadline:
    """A time limit on the processes a block starts: after `seconds`, every process started below this one since the
    block began (a notebook's kernel and everything it started) is killed, and what each was doing is kept in `seen`."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.fired, self.seen = seconds, False, []

    def __enter__(self) -> "Deadline":
        self._before, self._done = {p.pid for p in psutil.Process().children()}, threading.Event()
        self._arm(self.seconds)
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._timer.cancel()

    def _arm(self, seconds: float) -> None:
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        if self._done.is_set():
            return
        started = [p for p in psutil.Process().children() if p.pid not in self._before]
        for proc in started:
            with contextlib.suppress(psutil.Error):
                for one in [proc, *proc.children(recursive=True)]:
                    self.seen.append(f"{_command(one)} ({one.status()})")
        self.fired = True  # before the kill: whoever sees the kernel die can tell why
        kill_trees([p.pid for p in started])
        self._arm(0.25)  # past the limit, a process started later (a kernel still starting) is stopped too


def _command(proc) -> str:
    """A process's program, short: `python -m longctx.run.cp_worker` → `longctx.run.cp_worker`."""
    cmd = proc.cmdline() or [proc.name()]
    program = cmd[cmd.index("-m") + 1] if "-m" in cmd[:-1] else Path(cmd[0]).name
    return "the kernel" if program == "ipykernel_launcher" else program


def stop_tree(proc) -> None:
    """End a started process and every process below it; then reap it (unreaped until then, its PID is not reused)."""
    kill_trees([proc.pid])
    proc.wait()


def _pool_worker() -> None:
    stop_with_parent()  # a worker ends when the process that started it does (and its children with it)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the parent, which stops the workers itself
    signal.signal(signal.SIGTERM, _end_worker)


def _end_worker(signum, frame) -> None:
    """A pool worker stopped (its parent gone, or a `kill`): its kernel and everything below go with it."""
    kill_trees([p.pid for p in psutil.Process().children()])
    os._exit(128 + signum)


def pool_map(fn, calls: list, workers: int, bar, start: str = "spawn") -> list:
    """`fn(call)` for each call on `workers` processes, in order, counted on `bar` (a tqdm). Interrupted or failing, it
    returns at once: the calls not started cancelled, the workers killed with everything below them."""
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(start), initializer=_pool_worker)
    results: list = [None] * len(calls)
    with bar:
        try:
            # the workers start ignoring Ctrl-C (inherited through exec, from their first instruction: Python's own
            # start-up comes before _pool_worker); a Ctrl-C in the milliseconds they take to start is not seen
            before = None
            with contextlib.suppress(ValueError):  # (only the main thread may set a handler)
                before = signal.signal(signal.SIGINT, signal.SIG_IGN)
            try:
                futures = {pool.submit(fn, call): i for i, call in enumerate(calls)}
            finally:
                if before is not None:
                    signal.signal(signal.SIGINT, before)
            for future in as_completed(futures):
                results[futures[future]] = future.result()
                bar.update()
        except BaseException:
            with contextlib.suppress(ValueError):  # (only the main thread may set a handler)
                signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # the pool's pipes to killed workers fail quietly
            kill_trees(list(getattr(pool, "_processes", None) or {}))  # the pool's worker PIDs (CPython's attribute)
            pool.shutdown(wait=True, cancel_futures=True)  # returns at once: the pool sees its workers gone
            raise
    pool.shutdown()
    return results


@contextlib.contextmanager
def time_limit(seconds: float, what: str):
    """End this process after `seconds` (SIGALRM, in the main thread: a command's own work, such as an estimate that a
    model family's per-token fallback in transformers would make run for hours), naming what ran past its limit, with
    the CLI's status for a refusal (2). It ends the process rather than raising: an exception raised from the alarm
    inside a Python callback of torch's C++ code (a fake tensor's dispatch) has aborted the interpreter."""

    def stop(signum, frame):
        kill_trees([p.pid for p in psutil.Process().children()])  # a plan's workers too
        said = f"longctx: error: {what} ran past its limit of {seconds / 60:g} min and was stopped; raise --timeout.\n"
        os.write(2, said.encode())
        os._exit(2)

    before = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)
