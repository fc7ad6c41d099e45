"""Parameter sweeps: each point of a grid run by the harness in a temporary folder renamed into place when it finished
(`point.json` with its key: Sweep.key), so a sweep resumes and leaves no half result."""

import ast
import contextlib
import csv
import difflib
import hashlib
import importlib.util
import itertools
import json
import os
import platform
import shutil
import signal
import socket
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import nbformat
import psutil
from filelock import FileLock, Timeout
from tqdm.auto import tqdm

from longctx import children, data, files
from longctx.errors import LongctxError, check_choice
from longctx.notebook import jsonable, write_json_atomic
from longctx.paths import MINIATURES, REPO, build_dir, data_dir, miniature, slug, user_path
from longctx.run import harness, needs

EXECUTORS = ("local", "slurm", "slurm-local", "slurm-debug")
# the libraries a point's result can depend on: 00's LoRA (peft), the data path, 04's DeepSpeed, the notebook runner
LIBRARIES = ("torch", "transformers", "trl", "accelerate", "peft", "datasets", "tokenizers", "numpy", "deepspeed", "papermill")
OWN = {"points": True, "source": True, "submitit": True, ".lock": False, "sweep.csv": False, "slurm.json": False}
OOM_NAMES = ("OutOfMemoryError", "MemoryError", harness.OOM_KILLED)
FINISHED = ("ok", "oom", "timed out")  # a point's outcomes that are results (the others are retried)
# torch's CUDA allocator says "out of memory"; its CPU allocator "DefaultCPUAllocator: can't allocate memory"
OOM_WORDS = ("out of memory", "can't allocate memory")


def parse_grid(items: list[str]) -> dict[str, list]:
    """`["SEQ_LEN=256,512", "PADS=[64,128],[128,256]"]` → {"SEQ_LEN": [256, 512], "PADS": [[64, 128], [128, 256]]}: the
    values read as one list, each as `-p` reads a value (a list in brackets is one value)."""
    grid: dict[str, list] = {}
    for item in items:
        key, _, raw = (part.strip() for part in item.partition("="))
        try:
            values = harness.parse_value(f"[{raw}]")
        except LongctxError:
            values = None
        if not key or not values or key in grid or len({json.dumps(v) for v in values}) < len(values):
            raise LongctxError(f"--grid {item!r}: write KEY=V1,V2,... once per key, each value once.")
        grid[key] = values
    return grid


@dataclass
class Sweep:
    notebook: str  # the notebook's stem
    size: str
    grid: dict[str, list]
    fixed: dict = field(default_factory=dict)  # overrides shared by every point
    out: Path | None = None
    # where the points run, part of their key: this machine's accelerators (read without a CUDA context), or
    # for --executor slurm the partition and GPUs asked for; a point is not reused on other hardware
    machine: str | None = None
    timeout: float | None = None  # minutes per point (None: the size's limit, harness.time_limit)

    def __post_init__(self) -> None:
        path = harness.resolve(self.notebook)
        self.notebook, self.path = path.stem, path  # the very file given (a copy runs as itself)
        self.limit = harness.time_limit(self.notebook, self.size, self.timeout)[0]
        if not self.grid:
            raise LongctxError("The grid is empty: give at least one --grid KEY=V1,V2.")
        if both := sorted(set(self.grid) & set(self.fixed)):
            raise LongctxError(f"{', '.join(both)} given both as a fixed -p value and as a --grid key; keep one.")
        self._base = harness.size_params(path, self.size)  # an unknown size refused
        self._defaults = harness.declared_parameters(path)
        points = self.points()  # every point's names, types and ranges, before anything runs (a large grid: counted)
        for point in tqdm(points, desc=f"checking {len(points):,} points", disable=len(points) < 100, leave=False):
            harness.check_parameters(path, {**self._base, **self.fixed, **point}, self.size)
        default = build_dir() / "sweeps" / f"{self.notebook}-{self.size}"
        self.out = files.claim(default if self.out is None else self.out, "sweep", OWN, write=False)
        # one notebook at one size a folder: its table would be rewritten with this sweep's points only
        held = [p.name for p in self.out.glob("source/*/*.ipynb") if p.name != path.name]
        sizes = {_read_record(p.parent).get("size") for p in self.out.glob("points/*/point.json")} - {self.size, None}
        held += [f"size {s}" for s in sorted(sizes)]
        if held:
            raise LongctxError(f"{self.out} holds another sweep ({held[0]}); give this one an --out of its own.")

        code = sorted(Path(__file__).parents[1].rglob("*.py")) + sorted((REPO / "scripts").glob("*"))  # the scripts it launches
        self._versions = {name: _version(name) for name in LIBRARIES} | {
            "python": platform.python_version(),
            "longctx_source": hashlib.sha256(b"".join(p.read_bytes() for p in code if p.is_file())).hexdigest()[:16],
        }
        self._notebook = path.read_bytes()  # what the points run (see _snapshot)
        self._source = hashlib.sha256(self._notebook).hexdigest()  # an edited notebook is another experiment
        # `longctx data` records the SHA-256 of every file it writes in data/manifest.json, rewritten on a rebuild;
        # the sizes and times of those files catch an edit by hand. No data file is read.
        manifest = data_dir() / "manifest.json"
        raw = manifest.read_bytes() if manifest.is_file() else b"{}"  # damaged, its hash still names this state
        self._data = [hashlib.sha256(raw).hexdigest(), _stats(data_dir(), files.json_object(manifest) or {})]

    def points(self) -> list[dict]:
        return [dict(zip(self.grid, values)) for values in itertools.product(*self.grid.values())]

    def params(self, point: dict) -> dict:
        """Every parameter the point runs with: the notebook's defaults, the size's, the fixed ones, the grid's."""
        return {**self._defaults, **self._base, **self.fixed, **point}

    def key(self, point: dict) -> str:
        """What determines the point's result — the notebook's source, its parameters after overrides, the library
        versions, the machine, the files it reads — hashed: a finished point is reused only under the same key."""
        if self.machine is None:
            here = needs.machine()
            self.machine = f"{here.accelerator} {list(here.memory_bytes)}"
        identity = [self.notebook, self.size, self.params(point), self._versions, self._source, self._inputs(point), self.machine]
        return hashlib.sha256(json.dumps(identity, sort_keys=True, default=repr).encode()).hexdigest()[:12]

    def _inputs(self, point: dict) -> dict:
        """The identity of the local files a point reads: model folders and datasets its parameters name (the
        base model for "base"), and data/. Replaced weights or edited data make a new experiment."""
        named = {k: v for k, v in self.params(point).items() if k in needs.PATH_PARAMETERS and isinstance(v, str)}
        paths = {k: miniature(v) if v in MINIATURES else user_path(v, k) for k, v in named.items()}
        found = {k: _stats(p, p.rglob("*")) if p.is_dir() else _stats(p.parent, [p.name]) for k, p in paths.items() if p.exists()}
        return found | {"data": self._data}

    def folder(self, point: dict) -> Path:
        # readable grid values, then the key: two points never share a folder, a changed setting gets a new one
        name = "__".join(f"{k}-{slug(v)}" for k, v in point.items())[:120]
        return self.out / "points" / f"{name}__{self.key(point)}"

    def pending(self) -> list[dict]:
        return [p for p in self.points() if not is_done(self.folder(p), self.key(p), self.limit)]


def _version(dist: str) -> str:
    with contextlib.suppress(metadata.PackageNotFoundError):
        return metadata.version(dist)
    return "absent"


def _stats(root: Path, names) -> list:
    """Each file's name under `root`, size and modification time (hidden ones aside: a hub cache's locks);
    no file is read, so a model of gigabytes costs nothing, and replacing or editing a file changes it."""
    paths = sorted(root / name for name in names)
    visible = [p for p in paths if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)]
    return [(str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns) for p in visible]


def is_done(folder: Path, key: str | None = None, limit: float | None = None) -> bool:
    """The point in `folder` finished (ok, out of memory, or timed out under a limit at least `limit` minutes), under
    `key` when one is given."""
    record = _read_record(folder)
    if record.get("status") == "timed out" and limit is not None and not record.get("limit_minutes", 0) >= limit:
        return False  # a longer limit was asked for: run it again
    return record.get("status") in FINISHED and (key is None or record.get("key") == key)


def _read_record(folder: Path) -> dict:
    """A point's record; one absent, damaged or not a regular file (a FIFO would block) reads as not finished."""
    return files.json_object(folder / "point.json") or {"status": "missing"}


def slurm_task(*call) -> dict:
    """run_point as a task of the sweep's SLURM array (what the sweep submits: a task is never guessed from the
    environment, which a shell inside a job shares)."""
    stopped: list[int] = []
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda signum, frame: stopped.append(signum))
    task, job = os.environ.get("SLURM_ARRAY_TASK_ID"), os.environ.get("SLURM_JOB_ID", "?")  # no task: a plain job
    job = f"{os.environ.get('SLURM_ARRAY_JOB_ID', job)}_{task}" if task else job
    try:
        return run_point(*call, slurm=(job, stopped))
    except LongctxError as exc:  # refused on its node before a kernel (the node's memory, GPUs): recorded with why
        notebook, size, params, folder, _, key, timeout = call
        record = {"notebook": notebook, "size": size, "params": params, "key": key, "slurm_job": job}
        record |= {"status": "refused", "error": str(exc), "limit_minutes": timeout}
        (tmp := _temporary(Path(folder))).mkdir(parents=True, exist_ok=True)
        return _place(tmp, Path(folder), record)


def run_point(
    notebook: str, size: str, params: dict, folder: str, runner=None, key: str | None = None, timeout=None, slurm=None
) -> dict:  # fmt: skip
    """Execute one point into `folder` atomically, stopped after `timeout` minutes, and return its record (also written
    as point.json)."""
    folder = Path(folder)
    if is_done(folder, key, timeout):
        return _read_record(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        with FileLock(folder.with_name(f".{folder.name}.lock"), timeout=0):
            return _run_point(notebook, size, params, folder, runner, key, timeout, slurm)
    except Timeout:
        return {"status": "running elsewhere"}


def _run_point(notebook, size, params, folder: Path, runner, key, timeout, slurm) -> dict:
    tmp = _temporary(folder)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    record = {"notebook": notebook, "size": size, "params": params, "key": key}
    if slurm:
        record["slurm_job"] = slurm[0]  # where its log is
    try:
        result = (runner or harness.run)(notebook, size, params, out=tmp, progress=False, timeout=timeout)
        record.update(status="ok", seconds=result.seconds, results=result.results.get("results", {}))
    except harness.NotebookFailed as exc:
        oom = exc.ename in OOM_NAMES or any(words in exc.evalue.lower() for words in OOM_WORDS)
        died = exc.ename == "DeadKernelError"  # killed, not for memory; retried by the next run, like an error
        status = "timed out" if exc.ename == harness.TIMED_OUT else "oom" if oom else "died" if died else "error"
        error = f"{exc.ename}: {exc.evalue}"
        if slurm and slurm[1] and status == "died":  # sacct says which of SLURM's reasons, when the sweep is watching
            status, error = "cancelled", f"stopped by SLURM's SIGTERM; {error}"
        record.update(status=status, error=error, limit_minutes=timeout)
    except BaseException:  # a refusal, Ctrl-C: no record, and no temporary left beside the points
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return _place(tmp, folder, record)


def _temporary(folder: Path) -> Path:
    """The point's temporary sibling. Host and PID in the name: only the process that made it, or a later run on the
    same host once that process has gone, may remove it: two sweeps on one folder leave each other alone."""
    return folder.with_name(f".{folder.name}.tmp-{socket.gethostname()}-{os.getpid()}")


def _place(tmp: Path, folder: Path, record: dict) -> dict:
    """Write the record into `tmp` and rename it into place, replacing an earlier failed attempt. The point is the
    sweep's: without the run's marker, `longctx run --out` refuses its folder."""
    write_json_atomic(tmp / "point.json", record)
    (tmp / files.MARKER.format("run")).unlink(missing_ok=True)
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)
    return record


def run(sweep: Sweep, *, executor="local", jobs=1, slurm: dict | None = None, metric: str | None = None, progress=True) -> Path:
    """Run the pending points of `sweep`, then write the table (and the plot of `metric`); returns the CSV path."""
    check_choice("executor", executor, EXECUTORS)
    _check_recorded(metric, sweep)
    slurm = {k: v for k, v in (slurm or {}).items() if v is not None}
    flags = ", ".join(f"--{k.replace('_', '-')}" for k in slurm)
    if slurm and executor == "local":
        raise LongctxError(f"SLURM options ({flags}) need --executor slurm.")
    if executor != "slurm" and (cannot := [k for k in slurm if k not in ("time", "mem", "cpus_per_task")]):
        raise LongctxError(f"--executor {executor} rehearses on this machine and cannot honour --{cannot[0].replace('_', '-')}; "
                           "leave it out of the rehearsal, or submit to the cluster with --executor slurm.")  # fmt: skip
    if jobs != 1 and executor != "local":
        raise LongctxError(f"--jobs applies to --executor local; with {executor} the executor runs the points.")
    if executor != "local" and importlib.util.find_spec("submitit") is None:
        raise LongctxError("The SLURM executors need submitit: pip install 'longctx[slurm]' (or pip install submitit).")
    if executor == "slurm" and shutil.which("sbatch") is None:
        raise LongctxError("--executor slurm submits with SLURM's sbatch, which is not on this machine's PATH: run from the "
                           "cluster's login node, or use --executor local (or slurm-local to rehearse).")  # fmt: skip
    if executor == "slurm" and sweep.machine is None:
        sweep.machine = f"slurm partition={slurm.get('partition')} gpus={slurm.get('gpus', 0)}"
    if "time" in slurm:  # a point stops at the shorter of the two limits, and is recorded as timed out under it
        sweep.limit = min(sweep.limit, slurm["time"])
    data.check_built()  # before the folder is claimed: a refused sweep leaves nothing behind
    if executor != "slurm":  # the points run on this machine: check it now, each step's memory too, as a run would
        pending = sweep.pending()  # (a SLURM node checks its own; submitit's processes would only log a refusal)
        for point in tqdm(pending, desc="checking this machine for each point", disable=len(pending) < 100, leave=False):
            harness.checked_run(sweep.path, sweep.size, {**sweep.fixed, **point})
    files.claim(sweep.out, "sweep", OWN)
    try:  # one sweep at a time on a folder: filelock's OS lock, released even when its holder is killed
        with FileLock(sweep.out / ".lock", timeout=0):
            return _run_locked(sweep, executor, jobs, slurm, metric, progress)
    except Timeout:
        raise LongctxError(
            f"Another sweep is running on {sweep.out}; wait for it (its finished points will be reused), or give "
            "this one another --out."
        ) from None


def _run_locked(sweep: Sweep, executor: str, jobs: int, slurm: dict, metric: str | None, progress: bool) -> Path:
    from longctx.tools import slurm as cluster

    cluster.still_running(sweep.out)  # the live tasks of an array this folder submitted would write the same points
    (sweep.out / "points").mkdir(parents=True, exist_ok=True)
    for stale in (sweep.out / "points").glob(".*.tmp-*"):  # left by an interrupted run on this host (a live one is kept)
        host, _, pid = stale.name.rpartition(".tmp-")[2].rpartition("-")
        if host == socket.gethostname() and pid.isdigit() and not psutil.pid_exists(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    todo = sweep.pending()
    if done := len(sweep.points()) - len(todo):
        print(f"{done} of {len(sweep.points())} points already done; running {len(todo)}", flush=True)
    source = _snapshot(sweep)  # every point runs this copy, whatever happens to the notebook meanwhile
    calls = [(str(source), sweep.size, {**sweep.fixed, **p}, str(sweep.folder(p)), None, sweep.key(p), sweep.limit) for p in todo]
    _check_metric(metric, sweep)  # a typo is caught by the points already done, by the first one below, or at the end
    bar = {"desc": f"sweep {sweep.notebook}", "disable": not progress}
    if executor == "local" and jobs == 1:
        for call in tqdm(calls, **bar):
            _check_metric(metric, sweep, [run_point(*call)])
    elif executor == "local":
        # Ctrl-C stops the workers and their kernels at once; their points leave only temporaries
        children.pool_map(_run_call, calls, jobs, tqdm(total=len(calls), **bar))
    elif executor == "slurm":
        if calls:  # (every point done: only the table is written again)
            _on_the_cluster(sweep, slurm, calls, bar)
    else:  # submitit's rehearsal on this machine, as many points at once as it has cores
        import submitit
        from submitit.core.utils import UncompletedJobError

        ex = submitit.AutoExecutor(folder=str(sweep.out / "submitit" / "%j"), cluster=executor.removeprefix("slurm-"))
        ex.update_parameters(timeout_min=slurm.get("time", 60), name=f"longctx-{sweep.notebook}")
        if executor == "slurm-local":  # a terminal's Ctrl-C reaches its controllers too: they ignore it (each printed a
            ex.update_parameters(local_setup=["trap '' INT"])  # traceback) and longctx kills them (cli._interrupt)
        with tqdm(total=len(calls), **bar) as progress:
            for start in range(0, len(calls), os.cpu_count() or 1):
                for job in ex.map_array(run_point, *zip(*calls[start : start + (os.cpu_count() or 1)])):
                    with contextlib.suppress(UncompletedJobError):  # killed: no record, so the point is run again
                        job.result()
                    progress.update()
    _check_metric(metric, sweep)
    return write_table(sweep, metric)


def _on_the_cluster(sweep: Sweep, options: dict, calls: list[tuple], bar: dict) -> None:
    """One SLURM job array, a task per point; its tasks watched until they end; Ctrl-C cancels it."""
    import submitit

    from longctx.tools import slurm

    logs = sweep.out / "submitit"
    ex = submitit.AutoExecutor(folder=str(logs / "%j"), cluster="slurm")
    ex.update_parameters(**slurm.parameters(options, f"longctx-{sweep.notebook}"))
    folders = [Path(call[3]) for call in calls]
    before = {folder: _stamp(folder) for folder in folders}  # an earlier attempt's record is not this one's
    array = slurm.submit(ex, slurm_task, calls, sweep.out)
    tqdm.write(
        f"SLURM job array {array}: {len(calls)} task(s), one per point (`squeue -j {array}`, `sacct -j {array}`); "
        f"their logs in {logs}/{array}{'_<task>' if len(calls) > 1 else ''}/, each point's notebook and record in "
        f"{sweep.out / 'points'}/",
    )
    try:
        with tqdm(total=len(calls), **bar) as progress:
            ended = slurm.wait(array, folders, lambda f: _new_status(f, before[f]), progress)
    except KeyboardInterrupt:
        tqdm.write(f"longctx: {slurm.cancel(array)}; finished points are kept.")
        raise
    for task, (state, reason) in ended.items():
        # no record of its own, or a kernel killed by SLURM's signal at its time limit or scancel: SLURM's account
        notebook, size, params, _, _, key, _ = calls[task]
        own = _new_status(folders[task], before[folders[task]]) or "missing"
        stopped = own in ("died", "cancelled") and state != "COMPLETED"  # its kernel ended by SLURM's signal
        if not (own == "missing" or stopped) or is_done(folders[task], key):
            continue
        job = f"{array}_{task}" if len(calls) > 1 else array
        record = {"notebook": notebook, "size": size, "params": params, "key": key, "slurm_job": job}
        record |= slurm.ended_record(state, reason, array, task, logs) | {"limit_minutes": sweep.limit}
        (tmp := _temporary(folders[task])).mkdir(parents=True, exist_ok=True)
        _place(tmp, folders[task], record)


def _stamp(folder: Path) -> tuple | None:
    """Which point.json is in `folder` (a new one replaces the folder: another inode), without reading it."""
    with contextlib.suppress(OSError):
        found = (folder / "point.json").stat()
        return found.st_ino, found.st_mtime_ns
    return None


def _new_status(folder: Path, before: tuple | None) -> str | None:
    """The status of the point's record if it is not the one stamped `before` (no clocks compared: a node's may differ)."""
    return _read_record(folder).get("status") if (now := _stamp(folder)) and now != before else None


def _snapshot(sweep: Sweep) -> Path:
    """The notebook as the sweep's keys saw it, written once into the sweep folder (by its hash)."""
    copy = sweep.out / "source" / sweep._source[:12] / sweep.path.name
    if not copy.is_file() or copy.read_bytes() != sweep._notebook:  # absent or edited
        copy.parent.mkdir(parents=True, exist_ok=True)
        with files.atomic(copy) as tmp:
            tmp.write_bytes(sweep._notebook)
    return copy


def _recorded(notebook: bytes) -> set[str] | None:
    """The names a notebook's `session.record(...)` calls give its results, read from its code: keywords, and the keys
    of a dict written out in it and passed as `**values`; None when it passes names it computes."""
    names, dicts = set(), {}  # dicts: a name assigned a dict literal → its keys (None: not all written out)
    for cell in nbformat.reads(notebook.decode(), as_version=4).cells:
        code = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))
        with contextlib.suppress(SyntaxError):  # a cell that does not parse records nothing
            for node in ast.walk(ast.parse(code)) if cell.cell_type == "code" else ():
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
                    keys = [getattr(k, "value", None) for k in node.value.keys]  # None: a key computed, or **more
                    keys = keys if all(isinstance(k, str) for k in keys) else None
                    dicts.update({t.id: keys for t in node.targets if isinstance(t, ast.Name)})
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "record":
                    for k in node.keywords:
                        given = [k.arg] if k.arg else dicts.get(getattr(k.value, "id", None))
                        if given is None:
                            return None
                        names.update(given)
    return names


def _check_recorded(metric: str | None, sweep: Sweep) -> None:
    """Refuse, before any point runs, a metric the notebook never records (read from its code)."""
    if metric is not None and not metric.strip():  # it would silently mean no plot
        raise LongctxError("--metric is empty: name a result to plot (a column of sweep.csv), or leave --metric out.")
    if metric and "" in metric.split("."):  # the table's columns are name.key.key: never an empty part
        raise LongctxError(f"--metric {metric!r} has an empty part between dots: name a column of sweep.csv (name.key).")
    names = _recorded(sweep._notebook) if metric else None
    if names is not None and metric.split(".")[0] not in names:
        close = difflib.get_close_matches(metric.split(".")[0], names, n=1)
        raise LongctxError(
            f"{sweep.notebook} records no result {metric!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
            + f": its results are {', '.join(sorted(names))} (nested ones as name.key, the columns of sweep.csv)."
        )  # fmt: skip
    if names is not None and "." in metric:  # said at the start, since a wrong rest can only be refused then
        top, rest = metric.split(".", 1)
        print(f"--metric {metric!r}: {sweep.notebook} records {top!r}, whose keys it makes as it runs, so {rest!r} is "
              "checked when the first point finishes (the points done are kept).", file=sys.stderr)  # fmt: skip


def _check_metric(metric: str | None, sweep: Sweep, records: list[dict] | None = None) -> None:
    """Refuse a metric that a finished point (of `records`, default the sweep's) did not report as a number."""
    records = [_read_record(sweep.folder(p)) for p in sweep.points()] if records is None else records
    done = [_scalars(r.get("results", {})) for r in records if r.get("status") == "ok"]
    # a number to plot: a text or true/false result would draw an empty plot
    known = sorted(k for k, v in done[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)) if done else []
    if metric and done and metric not in known:
        what = f"is {type(done[0][metric]).__name__}, not a number to plot" if metric in done[0] else "was not reported"
        raise LongctxError(
            f"The result {metric!r} {what}: the finished point reported the numbers {', '.join(known)}. The points "
            "done so far are kept; re-run with one of those names."
        )


def _run_call(call):
    return run_point(*call)


def _scalars(value, prefix: str = "") -> dict:
    """Every scalar of nested dicts, named by its path ("a.b")."""
    if isinstance(value, dict):
        return {name: v for k, item in value.items() for name, v in _scalars(item, f"{prefix}.{k}" if prefix else str(k)).items()}
    return {prefix: value} if isinstance(value, (int, float, str, bool)) or value is None else {}


def table(sweep: Sweep) -> list[dict]:
    """One row per point, in grid order: grid values, status, and every scalar result."""
    records = [(point, _read_record(sweep.folder(point))) for point in sweep.points()]
    said = ("status", "reason", "seconds")  # why a point failed, in its own words or SLURM's
    return [
        {**p, **dict(zip(said, (r.get("status"), r.get("error", ""), r.get("seconds")))), **_scalars(r.get("results", {}))}
        for p, r in records
    ]


def write_table(sweep: Sweep, metric: str | None = None) -> Path:
    """sweep.csv, and with `metric` its plot against the first grid key: one line per combination of the other keys,
    failed points (out of memory included) marked on the x axis."""
    rows, path = table(sweep), sweep.out / "sweep.csv"
    with files.atomic(path) as tmp, tmp.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for row in rows for k in row)))
        writer.writeheader()
        writer.writerows({k: json.dumps(jsonable(v)) if isinstance(v, (list, dict)) else v for k, v in r.items()} for r in rows)
    if not metric:
        return path
    from longctx import plots

    first, others = list(sweep.grid)[0], list(sweep.grid)[1:]
    values, ax = list(sweep.grid[first]), plots.axes()
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        at = float
    else:  # lists, text, flags: one tick each, in the grid's order
        at = values.index
        ax.set_xticks(range(len(values)), [json.dumps(jsonable(v)) for v in values], fontsize=7)
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in others), []).append(r)
    for key, members in groups.items():
        ok = [r for r in members if r["status"] == "ok" and isinstance(r.get(metric), (int, float))]
        label = ", ".join(f"{k}={v}" for k, v in zip(others, key)) or metric
        ax.plot([at(r[first]) for r in ok], [r[metric] for r in ok], "o-", ms=4, label=label)
        for r in members:
            if r["status"] != "ok":
                ax.annotate(
                    r["status"], (at(r[first]), 0), xycoords=("data", "axes fraction"), fontsize=7, rotation=90, va="bottom"
                )
    ax.set(xlabel=first, ylabel=metric, title=f"{sweep.notebook} ({sweep.size}) sweep")
    ax.legend(fontsize=7)
    plots.save_figure(ax.figure, f"sweep_{slug(metric)}", sweep.out)
    return path
