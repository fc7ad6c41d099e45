"""Execute lesson notebooks headless through papermill at a named size: `notebooks/params/<notebook>/<size>.yaml`
(needs.SIZES: ci, the gpu size's code paths on a CPU in seconds, for the tests; cpu, the lesson on a laptop; gpu, full
size). Parameters and the machine are checked once, before a kernel starts."""

import ast
import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import tempfile
import time
import warnings
from collections import namedtuple
from pathlib import Path

import nbformat
import psutil
import yaml
from filelock import FileLock, Timeout

from longctx import children, files, quiet
from longctx.errors import LongctxError, check_choice
from longctx.models import PRESETS
from longctx.paths import CORPUS, MINIATURES, REPO, build_dir, data_dir, miniature, notebooks_dir, user_path
from longctx.pretrain import manifest
from longctx.run import needs, schema

SIZES = needs.SIZES
OOM_KILLED = "OutOfMemoryKill"  # NotebookFailed.ename of a kernel the OS's out-of-memory killer stopped
TIMED_OUT = "TimedOut"  # NotebookFailed.ename of a run stopped at its time limit (needs.LIMIT_FACTOR, --timeout)
_WIDGET = "application/vnd.jupyter.widget-view+json"  # a progress bar's output: saved stateless, a bar frozen at 0%
# the executed notebook saved once, at the end; the kernel's own log quieted (quiet.py)
_PAPERMILL = {"log_output": False, "request_save_on_cell_execute": False, "extra_arguments": quiet.KERNEL_ARGUMENTS}


class NotebookFailed(LongctxError):
    """A cell raised (or the kernel died): `ename`/`evalue` name the exception; a sweep records out-of-memory as a result."""

    def __init__(self, message: str, ename: str = "", evalue: str = "") -> None:
        super().__init__(message)
        self.ename, self.evalue = ename, evalue


def notebooks() -> dict[str, Path]:
    """The lesson notebooks by name (file stem), in order."""
    if not (found := {p.stem: p for p in sorted(notebooks_dir().glob("[0-9][0-9]_*.ipynb"))}):
        raise LongctxError(f"{notebooks_dir()} holds no lessons (NN_name.ipynb): unset LONGCTX_NOTEBOOKS or name their folder.")
    return found


def resolve(name: str) -> Path:
    """A notebook from its stem ('01_chunked_loss'), its number ('01'), its title ('chunked_loss') or its
    path (that very file is run; its sizes are the repository's notebook of the same stem)."""
    given = Path(name)
    if given.suffix == ".ipynb":
        declared_parameters(given)  # a missing file, or one that is no notebook, is told so before its sizes are looked up
        return given.resolve()
    if len(given.parts) > 1:  # a path without the suffix: not a repository notebook's name
        raise LongctxError(f"{name} is a path but not a notebook file: give the file itself ({name}.ipynb) or a notebook's name.")
    found = notebooks()
    if len(matches := [p for s, p in found.items() if name == s or name in s.split("_", 1)]) == 1:  # stem, number or title
        return matches[0]
    raise LongctxError(f"Unknown notebook {name!r}. Available: {', '.join(found) or '(none)'}.")


def sizes(notebook: Path) -> list[str]:  # the size files in notebooks/params/<stem>/ (beside them: schema.yaml)
    return sorted(p.stem for p in (notebooks_dir() / "params" / notebook.stem).glob("*.yaml") if p.stem in SIZES)


def size_params(notebook: Path, size: str) -> dict:
    """The values a size gives (beyond the notebook's own defaults)."""
    if size != "ci":
        return _size_file(notebook, size)
    ci = _size_file(notebook, "ci")
    for key, raw in ci.items():
        if isinstance(raw, str) and "{data}" in raw:
            ci[key] = path = raw.format(data=data_dir())
            if not Path(path).exists():
                fix = f"`longctx pretrain --out {path}` builds it" if "yarn-base" in raw else "`longctx data` builds it"
                raise LongctxError(
                    f"The ci size reads {key}={path}, which is not there (the data folder is {data_dir()}; "
                    f"LONGCTX_DATA moves it). {fix}, or unset LONGCTX_DATA to use the repository's data/."
                )
    return {**_size_file(notebook, "gpu"), **ci}


def _size_file(notebook: Path, size: str) -> dict:
    path = notebooks_dir() / "params" / notebook.stem / f"{size}.yaml"
    if not path.exists() and not (have := ", ".join(sizes(notebook))):  # a notebook run by its path: its stem's sizes
        raise LongctxError(f"{notebook.name} has no sizes: name a copy like the lesson it copies (e.g. 01_chunked_loss.ipynb).")
    if not path.exists():
        raise LongctxError(f"No size {size!r} for {notebook.stem}. Available sizes: {have} ({path.parent}/).")
    return yaml.safe_load(path.read_text()) or {}  # a repository file (its schema test reads every one)


def declared_parameters(notebook: Path) -> dict:
    """The names and default values of the notebook's `parameters` cell (papermill's own reading of it)."""
    from papermill.inspection import inspect_notebook

    try:
        found = inspect_notebook(str(notebook))
        return {name: ast.literal_eval(p["default"]) for name, p in found.items()}
    except (ValueError, SyntaxError) as exc:  # a default that is no literal (2**7), or no notebook at all
        raise LongctxError(f"{notebook}: its parameters cell must assign literals (NAME = 4096): {_brief_error(exc)}") from None
    except Exception as exc:  # not JSON, not a notebook: nbformat's and papermill's own error types
        raise LongctxError(f"{notebook} is not a readable notebook ({type(exc).__name__}: {_brief_error(exc)}).") from None


def _brief_error(exc: Exception) -> str:
    return (str(exc) or type(exc).__name__).splitlines()[0][:160]


def parse_overrides(pairs: list[str]) -> dict:
    """`KEY=VALUE` strings → values read as papermill's `-p` reads them (True/False/None, a whole number, a decimal,
    else text), a list in brackets as a YAML list whose items are each read the same way (null too): [128, 256]."""
    out = {}
    for pair in pairs:
        key, eq, raw = (part.strip() for part in pair.partition("="))
        if not (eq and key):
            raise LongctxError(f"Parameter override {pair!r} is not of the form KEY=VALUE.")
        if key in out:
            raise LongctxError(f"{key} is given twice with -p; keep one.")
        out[key] = parse_value(raw)
    return out


def parse_value(raw: str):
    """One value as `-p` reads it (parse_overrides)."""
    from papermill.cli import _resolve_type

    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":  # quoted: text, whatever it holds (-p 'SEED="7"')
        return raw[1:-1]
    if raw.startswith("["):  # YAML for the brackets only: its 1.1 scalars (0256 octal, 1:00 base 60, yes) are not ours
        try:
            items = yaml.load(raw, Loader=yaml.BaseLoader)  # every scalar kept as the text typed
        except yaml.YAMLError as exc:
            raise LongctxError(f"Cannot read {raw!r} as a list [a, b, c]: {str(exc).splitlines()[0]}") from None
        return _items(items)
    return _resolve_type(raw)


def _items(value):
    if isinstance(value, list):
        return [_items(v) for v in value]
    return None if value in ("null", "~") else parse_value(value) if isinstance(value, str) else value  # YAML's null too


def _absolute(value):
    """A relative path that exists here, made absolute (the kernel runs in a folder of its own); names the library
    gives a meaning (a preset, "base", the corpus) stay names, whatever the current folder holds."""
    if not isinstance(value, str) or value in PRESETS or value in (*MINIATURES, CORPUS) or Path(value).is_absolute():
        return value
    path = user_path(value, "The path").resolve()
    return str(path) if path.exists() else value


def check_parameters(
    notebook: Path, values: dict, size: str | None = None, *, weights: bool = True, on_cpu: bool | None = None
) -> None:  # fmt: skip
    """The one check of a run's parameters: the notebook's schema (a CPU `size` also bounds its processes; `weights`:
    see schema.check), then the models and the text source they name."""
    from longctx.data import check_dataset

    merged = {**declared_parameters(notebook), **values}
    if on_cpu is None:
        on_cpu = size is None or needs.of(notebook.stem, size).accelerator == "none"
    schema.check(notebook.stem, merged, on_cpu=on_cpu, weights=weights)
    if isinstance(values.get("DATASET"), str):  # a script-only or unknown text source
        check_dataset(values["DATASET"], splits=("train", "test"))  # 02 trains on one and scores the other


def check_lesson(name: str, params: dict) -> None:
    """The check a lesson's first cell makes (notebook.start) when `longctx run` did not check these values: a run
    through papermill or nbconvert, a kernel in JupyterLab."""
    notebook = resolve(name)
    on_cpu = needs.machine().accelerator == "none"
    check_parameters(notebook, params, "cpu" if on_cpu else None, on_cpu=on_cpu)
    needs.check_hub(notebook.stem, params)
    if on_cpu:
        _check_raised_length(notebook.stem, "cpu", params)


# what a run leaves: the notebook's stem and size, its folder and executed copy, its results.json and its seconds
RunResult = namedtuple("RunResult", "notebook size out executed results seconds")


def checked_run(notebook: Path, size: str, overrides: dict | None = None) -> dict:
    """The size's values with `overrides`, checked against the notebook and this machine."""
    params = {**size_params(notebook, size), **(overrides or {})}
    check_parameters(notebook, params, size)
    needs.check(notebook.stem, size, params)
    _check_raised_length(notebook.stem, size, params)
    return params


def _cpu_step(step: dict, name: str, values: dict) -> tuple[int, int, str, dict]:
    """(length, batch, model, config changes) of the real CPU step that `x-cpu-step` describes for the parameter `name`:
    its length is `length`'s value (default `name`'s; a list: its longest); `batch` names the batch's parameter, or a
    list of them multiplied (micro-batch × accumulation); `trained` makes the length that many times the model's
    trained length (a miniature's manifest, else the parameter named); `preset_config` maps config fields to
    parameters, applied as the lessons apply them: to a preset, when not 0. (`checkpointing`: false for a step without.)"""
    given = values[step.get("length", name)]
    length, model = max(given) if isinstance(given, list) else given, values[step["model"]]
    if trained := step.get("trained"):
        length *= manifest(miniature(model))["trained_length"] if model in MINIATURES else values[trained]
    changes = {field: values[p] for field, p in step.get("preset_config", {}).items() if values[p] and model in PRESETS}
    batch = step.get("batch") or []
    return length, math.prod(values.get(b, 1) for b in (batch if isinstance(batch, list) else [batch])), model, changes


MAX_TILES = 1024  # fused-head tiles of one CPU step (_check_tiles)


def _check_tiles(notebook: str, tokens: int, spec: str, tile: dict) -> None:
    """A CPU step's fused loss head cut into at most MAX_TILES tiles (`x-cpu-step`'s `tiles`: its rows' and vocabulary
    columns' parameters): each tile is one turn of TRL's Python loop (trl/kernels/chunked_logprob.py), and thousands
    of them make one CPU step take minutes."""
    from longctx import models

    (rows_name, rows), (cols_name, cols) = tile.items()
    try:
        vocab = models.config(str(miniature(spec)) if spec in MINIATURES else spec).get_text_config().vocab_size
    except LongctxError:  # a model the estimator does not take is the kernel's to load
        return
    row_tiles, col_tiles = -(-tokens // rows), -(-vocab // cols)
    if (count := row_tiles * col_tiles) <= MAX_TILES:
        return
    fix = f"raise {rows_name} or {cols_name}"
    raise LongctxError(
        f"{notebook}: {rows_name}={rows:,} and {cols_name}={cols:,} cut a {tokens:,}-token step's loss over {spec}'s "
        f"{vocab:,}-word vocabulary into {count:,} tiles; each is a turn of TRL's Python loop, and at most {MAX_TILES:,} "
        f"keep a CPU step within the size's time: {fix}."
    )


def _check_raised_length(notebook: str, size: str, params: dict) -> None:
    """Each length the notebook's schema marks as a real CPU step's (`x-cpu-step`), made longer or larger than the
    size's own, or run on another model or config, is first estimated: the step the lessons start from (the plain loss,
    checkpointing on) must fit this machine's available memory, or the kernel would be killed minutes in."""
    if needs.of(notebook, size).gpus:
        return
    from longctx import models
    from longctx.memory.estimate import estimate

    path = resolve(notebook)
    own, values = {**declared_parameters(path), **size_params(path, size)}, {**declared_parameters(path), **params}
    for name, prop in schema.schema(notebook)["properties"].items():
        if not (step := prop.get("x-cpu-step")):
            continue
        (was, was_batch, *was_model), (length, batch, *model) = (_cpu_step(step, name, v) for v in (own, values))
        if tiles := step.get("tiles"):
            _check_tiles(notebook, length * batch, model[0], {t: values[t] for t in tiles})
        if length * batch <= was * was_batch and model == was_model:
            continue
        batch_names = step.get("batch") if isinstance(step.get("batch"), list) else [step.get("batch")]
        named = (step.get("length", name), *batch_names, step.get("trained"), *step.get("preset_config", {}).values(),
                 step["model"])  # fmt: skip
        raised = ", ".join(f"{n}={values[n]}" for n in dict.fromkeys(named) if n and own.get(n) != values.get(n)) or name
        spec, changes = model
        spec = str(miniature(spec)) if spec in MINIATURES else spec
        kept = step.get("checkpointing", True)  # (a lesson's step without checkpointing says so)
        try:
            cfg = models.config(spec, **changes) if changes else spec
            need = estimate(cfg, length, batch=batch, loss="plain", checkpointing=kept, dtype=values.get("DTYPE", "fp32"),
                            device="cpu")  # fmt: skip
        except LongctxError as exc:
            if "tokens per step" not in str(exc):  # a model the estimator does not take is the kernel's to load
                continue
            raise LongctxError(f"{notebook}: {raised} asks for more than this machine can step: {exc}") from None
        if need.peak_bytes > (free := psutil.virtual_memory().available):
            how, flags = ("on", "") if kept else ("off", " --no-checkpointing")
            raise LongctxError(
                f"{notebook}: {raised} is more than this machine can step: the plain-loss step (checkpointing "
                f"{how}) on {batch:,} × {length:,} tokens of {spec} needs {need.peak_gib:.1f} GiB ({need.peak_phase}; "
                f"`longctx estimate --device cpu --loss plain{flags}`), and {free / 2**30:.1f} GiB is available. Use "
                "shorter lengths, a smaller batch or model, or a GPU size."
            )


def time_limit(notebook: str, size: str, minutes: float | None = None) -> tuple[float, str]:
    """(minutes, where they come from): `minutes` when given, else the size's declared minutes with the margin."""
    if minutes is not None:
        return minutes, "--timeout"
    declared = needs.of(notebook, size)
    how = f"{needs.LIMIT_FACTOR} × the {declared.minutes:g} min notebooks/params/needs.yaml declares, + {needs.LIMIT_SLACK}"
    return declared.limit_minutes, how


def run(
    name: str, size: str = "cpu", overrides: dict | None = None, *, out: Path | None = None, progress=True,
    timeout: float | None = None,
) -> RunResult:  # fmt: skip
    """Execute one notebook at `size` (+ overrides) into `out` (default build/<notebook>/), stopped with everything it
    started after `timeout` minutes (default: time_limit's)."""
    from longctx.data import check_built

    check_choice("size", size, SIZES)
    notebook = resolve(name)
    checked = checked_run(notebook, size, overrides)
    params = {k: _absolute(v) if k in needs.PATH_PARAMETERS else v for k, v in checked.items()}
    limit, limit_how = time_limit(notebook.stem, size, timeout)
    check_built()  # every size reads the corpus, and a notebook never downloads it nor builds its caches again
    target = user_path(build_dir() / notebook.stem if out is None else out, "--out").absolute()
    if target == notebook.resolve().parent:  # its executed copy would take the notebook's own name
        raise LongctxError(f"{notebook} is inside the output folder {target}, where its executed copy goes; give --out another.")
    if target.is_dir() and (other := next((p.name for p in target.glob("*.ipynb") if p.name != notebook.name), None)):
        # a run replaces its own results and figures: in another notebook's folder it would leave a mix of the two
        raise LongctxError(f"{target} holds another notebook's run ({other}); give {notebook.stem} an --out of its own.")
    own = {"results.json": False, ".lock": False, notebook.name: False, f"{notebook.stem}.failed.ipynb": False, "figures": True}
    out = files.claim(target, "run", own)
    try:  # one run at a time in a folder: filelock's OS lock, released even when its holder is killed
        with FileLock(out / ".lock", timeout=0):
            return _run_claimed(notebook, size, params, out, progress, limit, limit_how)
    except Timeout:
        raise LongctxError(f"Another run is writing into {out}; wait for it to end, or give this one another --out.") from None


def _run_claimed(notebook: Path, size: str, params: dict, out: Path, progress: bool, limit: float, limit_how: str) -> RunResult:
    """`run`'s work once the folder is its own and locked."""
    import papermill as pm
    from nbclient.exceptions import DeadKernelError

    results_path, executed, failed_copy = out / "results.json", out / notebook.name, out / f"{notebook.stem}.failed.ipynb"
    start = time.perf_counter()
    failed = None  # a cell's error or the kernel's death: raised once the executed notebook is in place
    mark = checked_mark(notebook.stem, {**declared_parameters(notebook), **params})  # what the kernel will hold
    kernel = {"LONGCTX_OUT": str(out), "LONGCTX_SIZE": size, "LONGCTX_CHECKED": mark, "LONGCTX_EDITED": lesson_edited(notebook)}
    kernel |= {v: str(Path(os.environ[v]).absolute()) for v in ("LONGCTX_DATA", "LONGCTX_BUILD", "LONGCTX_NOTEBOOKS")
               if os.environ.get(v)}  # the kernel starts elsewhere: a relative folder would be another  # fmt: skip
    # the last run's outputs are set aside, and put back unless this run finishes (a cell's error, Ctrl-C, SIGTERM, a
    # dead kernel); the kernel starts in an empty folder of its own, so that nothing a user or another run left in the
    # output folder is imported as a module
    earlier = Path(tempfile.mkdtemp(dir=out, prefix=".earlier-"))
    try:
        for name in (results_path.name, executed.name, failed_copy.name, "figures"):
            if (out / name).exists() or (out / name).is_symlink():
                os.replace(out / name, earlier / name)
        with (
            files.atomic(executed) as writing,
            warnings.catch_warnings(),
            tempfile.TemporaryDirectory(prefix="longctx-kernel-") as cwd,
        ):
            warnings.filterwarnings("ignore", "The specified file")  # papermill's word on the temporary name's suffix
            started, oom_kills = [], _oom_kills()
            try:
                _execute(notebook, writing, params, Path(cwd), _kernel_class(kernel, started), progress, limit, limit_how)
            except pm.PapermillExecutionError as exc:
                why = f"{notebook.stem} failed in cell {exc.exec_count} ({exc.ename}: {exc.evalue})"
                failed = NotebookFailed(f"{why}. The executed notebook is at {failed_copy}.", exc.ename, exc.evalue)
            except DeadKernelError as exc:  # killed from outside, or it exited
                ename, why = _death(started[0] if started else None, oom_kills)
                failed = NotebookFailed(f"{notebook.stem}: {why}", ename, str(exc))
                if files.json_object(writing) is None:  # papermill may or may not have written it whole after the death
                    raise failed from None
            nb = nbformat.read(writing, as_version=4)
            for cell in (c for c in nb.cells if c.cell_type == "code"):  # without progress bars' widgets (_WIDGET)
                cell.outputs = [o for o in cell.outputs if _WIDGET not in o.get("data", {})]
            nb.metadata.pop("widgets", None)
            nbformat.write(nb, writing)
        if failed:
            raise failed
        if not results_path.exists():
            raise LongctxError(f"{notebook.stem} ran but wrote no results.json (its last cell must call session.save()).")
    except BaseException:  # this run's partial outputs go and the last run's come back; its notebook stays beside them
        if executed.exists():
            os.replace(executed, failed_copy)
        for path in (results_path, executed, out / "figures"):
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink(missing_ok=True)
        for kept in earlier.iterdir():
            if not (out / kept.name).exists():
                os.replace(kept, out / kept.name)
        shutil.rmtree(earlier, ignore_errors=True)
        raise
    # finished: what a user put in the last run's figures/ (files its results.json does not list) is carried over
    listed = set((files.json_object(earlier / results_path.name) or {}).get("figures", []))
    for mine in (earlier / "figures").iterdir() if (earlier / "figures").is_dir() else ():
        if mine.name not in listed and not (out / "figures" / mine.name).exists():
            (out / "figures").mkdir(exist_ok=True)
            os.replace(mine, out / "figures" / mine.name)
    shutil.rmtree(earlier, ignore_errors=True)
    return RunResult(notebook.stem, size, out, executed, json.loads(results_path.read_text()), time.perf_counter() - start)


def lesson_edited(notebook: Path) -> str:
    """Whether the lesson run differs from the lesson as committed ("true"/"false"; "" where that cannot be told: no git
    checkout, or a course of one's own): its cells' types and text against git's committed copy."""
    committed = notebooks_dir() / f"{notebook.stem}.ipynb"
    with contextlib.suppress(ValueError, OSError, subprocess.SubprocessError):
        shown = subprocess.run(["git", "-C", str(REPO), "show", f"HEAD:{committed.relative_to(REPO)}"], capture_output=True,
                               timeout=30)  # fmt: skip
        if shown.returncode == 0:
            cells = [[(c.cell_type, c.source) for c in nb.cells] for nb in (nbformat.reads(shown.stdout.decode(), 4),
                                                                                nbformat.read(notebook, 4))]  # fmt: skip
            return "true" if cells[0] != cells[1] else "false"
    return ""


def checked_mark(notebook: str, params: dict) -> str:
    """What the harness tells a kernel whose parameters it checked: the lesson's first cell checks them again only when
    they differ (a cell edited, a JupyterLab kernel reused)."""
    import hashlib

    text = json.dumps({"notebook": notebook, "params": params}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _kernel_class(env: dict, started: list):
    """A kernel manager whose kernel gets `env` on top of this process's environment (this process's own is left
    alone), and keeps the kernel's process in `started`, so that its exit status can be read after a death."""
    from jupyter_client.manager import AsyncKernelManager

    class Kernel(AsyncKernelManager):
        async def start_kernel(self, **kw):
            kw["env"] = {**os.environ, **(kw.get("env") or {}), **env}
            await super().start_kernel(**kw)
            started.append(getattr(self.provisioner, "process", None))

    return Kernel


def _oom_kills() -> int:
    """Linux's count of out-of-memory kills on this machine (/proc/vmstat), or -1 where it is not kept."""
    with contextlib.suppress(OSError, StopIteration, ValueError):
        return int(next(line.split()[1] for line in Path("/proc/vmstat").open() if line.startswith("oom_kill ")))
    return -1


def _death(process, oom_kills: int) -> tuple[str, str]:
    """(ename, what to say) of a kernel that died: by which signal or with which status, and whether memory ran out
    (killed by SIGKILL while Linux's out-of-memory killer acted)."""
    code = process.poll() if process is not None else None
    if code is not None and code < 0:
        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else f"signal {-code}"
        if name == "SIGKILL" and -1 < oom_kills < _oom_kills():
            return OOM_KILLED, (
                "the kernel was killed (SIGKILL) while Linux's out-of-memory killer acted (/proc/vmstat's oom_kill rose): "
                "memory ran out. Lower the lengths or batch with -p."
            )
        return "DeadKernelError", f"the kernel was stopped by {name} (from outside the lesson). Run it again."
    status = f"exited with status {code}" if code is not None else "died"
    return "DeadKernelError", (
        f"the kernel {status} in the middle of a cell (a cell that ends the process, or a library that aborted). Run the "
        "notebook in JupyterLab to see the cell."
    )


def _execute(
    notebook: Path, writing: Path, params: dict, cwd: Path, kernel, progress: bool, limit: float, limit_how: str
) -> None:  # fmt: skip
    """papermill's run of `notebook` into `writing` (the kernel in `cwd`, started by the manager class `kernel`), stopped
    with every process it started after `limit` minutes: then NotebookFailed(TIMED_OUT), naming the cell that was running
    and what each process was doing."""
    import papermill as pm
    from nbclient.exceptions import CellTimeoutError

    running = {"count": 0, "line": ""}  # the code cell running, numbered as papermill's errors number cells

    def on_cell_start(cell, cell_index):  # nbclient's hook, before each cell (a markdown one too)
        if cell.cell_type == "code" and cell.source.strip():
            running.update(count=running["count"] + 1, line=cell.source.strip().splitlines()[0][:80])

    # nbclient's per-cell timeout is a backstop a minute past the limit: the deadline kills the whole process tree first
    limits = dict(execution_timeout=int(limit * 60) + 60, on_cell_start=on_cell_start, kernel_manager_class=kernel)
    with children.Deadline(limit * 60) as deadline:
        try:
            pm.execute_notebook(str(notebook), str(writing), params, cwd=str(cwd), progress_bar=progress, **_PAPERMILL, **limits)
            if deadline.fired:  # it ended past its limit all the same: a run is kept only inside it
                raise CellTimeoutError("past the limit")
        except Exception as exc:
            if not (deadline.fired or isinstance(exc, CellTimeoutError)):
                raise
            ran = f" in cell {running['count']} (`{running['line']}`)" if running["count"] else " while its kernel started"
            what = f": {', '.join(deadline.seen)}" if deadline.seen else ""
            stuck = " A stopped process waits for a SIGCONT that never came." if "(stopped)" in what else ""
            raise NotebookFailed(
                f"{notebook.stem} timed out{ran}: it ran past its limit of {limit:g} min ({limit_how}) and was stopped "
                f"with every process it had started{what}.{stuck} If it is slow rather than stuck, give it more time "
                "with --timeout MINUTES.",
                TIMED_OUT,
                f"after {limit:g} min",
            ) from None


def run_all(size: str = "cpu", names: list[str] | None = None, progress: bool = True, timeout=None) -> list[RunResult]:
    """The main job: every notebook at `size`, each into build/<notebook>/ (`timeout`: minutes each, see run)."""
    chosen = [resolve(n) for n in names] if names else list(notebooks().values())
    for nb in chosen:  # every size file and the machine checked before the first notebook spends minutes
        checked_run(nb, size)
    results = []
    for nb in chosen:
        print(f"== {nb.stem} ({size})", flush=True)
        results.append(r := run(nb.stem, size, progress=progress, timeout=timeout))
        print(f"   {r.seconds:.0f} s → {r.out}", flush=True)
    return results
