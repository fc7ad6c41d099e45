"""Execute lesson notebooks headless through papermill at a named size: `notebooks/params/<notebook>/<size>.yaml`
(ci: the tests, seconds; cpu: the lesson on a laptop; gpu: full size; rehearsal: the gpu size with only the hardware
swapped, so its code paths run on a CPU). Parameters and the machine are checked once, before a kernel starts."""

import ast
import contextlib
import json
import math
import os
import shutil
import sys
import time
import warnings
from collections import namedtuple
from pathlib import Path
from unittest import mock

import nbformat
import psutil
import yaml
from filelock import FileLock, Timeout

from longctx import children, files, quiet
from longctx.errors import LongctxError, check_choice
from longctx.lengths import MAX_TOKENS
from longctx.levers.base_model import manifest
from longctx.models import PRESETS, check_spec
from longctx.paths import CORPUS, MINIATURES, build_dir, data_dir, miniature, notebooks_dir, user_path
from longctx.run import needs, schema

SIZES = ("ci", "cpu", "gpu", "rehearsal")
REHEARSAL = "rehearsal"  # = gpu.yaml, then rehearsal.yaml on top ("{data}" in its strings = the data folder)
MAX_TILES = 1024  # fused-head tiles of one CPU step (_check_tiles)
# a CPU step this many times the size's tokens is refused without --timeout: each step at least that many times
# longer, against a limit of needs.LIMIT_FACTOR × the size's minutes
RAISED_UNTIMED = needs.LIMIT_FACTOR**2
RUN_FREE_BYTES = 64 * 2**20  # free space a run needs at --out: the largest, 03 at cpu, writes 34 MiB
RUN_FREE_FILES = 256  # and room for files (inodes): the most, 04's, is 45
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
    return {p.stem: p for p in sorted(notebooks_dir().glob("[0-9][0-9]_*.ipynb"))}


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
    if size != REHEARSAL:
        return _size_file(notebook, size)
    rehearsal = _size_file(notebook, REHEARSAL)
    for key, raw in rehearsal.items():
        if isinstance(raw, str) and "{data}" in raw:
            rehearsal[key] = path = raw.format(data=data_dir())
            if not Path(path).exists():
                fix = f"`longctx pretrain --out {path}` builds it" if "yarn-base" in raw else "`longctx data` builds it"
                raise LongctxError(
                    f"The rehearsal size reads {key}={path}, which is not there (the data folder is {data_dir()}; "
                    f"LONGCTX_DATA moves it). {fix}, or unset LONGCTX_DATA to use the repository's data/."
                )
    return {**_size_file(notebook, "gpu"), **rehearsal}


def _size_file(notebook: Path, size: str) -> dict:
    path = notebooks_dir() / "params" / notebook.stem / f"{size}.yaml"
    if not path.exists() and not (have := ", ".join(sizes(notebook))):  # a notebook run by its path: its stem's sizes
        raise LongctxError(f"{notebook.name} has no sizes: name a copy like the lesson it copies (e.g. 01_chunked_loss.ipynb).")
    if not path.exists():
        raise LongctxError(f"No size {size!r} for {notebook.stem}. Available sizes: {have} ({path.parent}/).")
    try:
        values = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise LongctxError(f"{path} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(values, dict):
        raise LongctxError(f"{path} must map parameter names to values (NAME: value), not {type(values).__name__}.")
    return values


def declared_parameters(notebook: Path) -> dict:
    """The names and default values of the notebook's `parameters` cell."""
    if notebook.exists() and not notebook.is_file():  # a FIFO would block the read for ever; a folder cannot be read
        raise LongctxError(f"{notebook} is not a regular file: give the notebook file itself.")
    try:
        nb = nbformat.read(notebook, as_version=4)
        nbformat.validate(nb)
    except Exception as exc:  # not JSON, not a notebook: nbformat's own error types vary
        why = (str(exc) or " ").splitlines()[0]
        raise LongctxError(f"{notebook} is not a readable notebook ({type(exc).__name__}: {why}).") from None
    cells = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise LongctxError(f"{notebook.name} must have exactly one cell tagged 'parameters' (found {len(cells)}).")
    try:
        assigns = [n for n in ast.parse(cells[0].source).body if isinstance(n, ast.Assign) and len(n.targets) == 1]
        return {n.targets[0].id: ast.literal_eval(n.value) for n in assigns if isinstance(n.targets[0], ast.Name)}
    except (SyntaxError, ValueError) as exc:
        why = f"must assign plain literals (NAME = 4096), one a line: {type(exc).__name__}: {str(exc).splitlines()[0]}"
        raise LongctxError(f"{notebook.name}: its parameters cell {why}") from None


def parse_overrides(pairs: list[str]) -> dict:
    """`key=value` strings → values read the way a person reads them (see `parse_value`)."""
    out = {}
    for pair in pairs:
        key, eq, raw = (part.strip() for part in pair.partition("="))
        if not (eq and key):
            raise LongctxError(f"Parameter override {pair!r} is not of the form KEY=VALUE.")
        if not raw:
            raise LongctxError(f"Parameter override {pair!r} has no value after '=' (quote an empty string: {key}='').")
        if key in out:
            raise LongctxError(f"{key} is given twice with -p; keep one.")
        out[key] = parse_value(raw)
    return out


def parse_value(raw: str):
    """A decimal is a decimal ("064" is 64, "1e-3" a float), only true/false are booleans, null/None is
    None, [a, b] is a list of such values, quotes keep a string; anything else stays the string it is
    (YAML 1.1 would read 064 as octal 52, 1:04 as 64, yes as True and a date as a date)."""
    text, lower = raw.strip(), raw.strip().lower()
    digits = text.lstrip("+-").lstrip("0")  # ("064" is 64: leading zeros are no size)
    if len(digits) > 30 and digits.isdigit():  # no parameter counts that high (float() would say inf)
        raise LongctxError(f"Cannot read {text[:20]}… ({len(digits)} digits) as a number: no parameter takes one that large.")
    for number in (int, float) if "_" not in text else ():  # Python's own reading of a decimal ("1_000" stays text)
        with contextlib.suppress(ValueError):
            return number(text)
    if lower in ("true", "false", "null", "none", "~"):
        return {"true": True, "false": False}.get(lower)
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if text[:1] == "[" and text[-1:] == "]":
        return [parse_value(item) for item in split_top_level(text[1:-1])] if text[1:-1].strip() else []
    if text[:1] in "[]{}":
        raise LongctxError(f"Cannot read {raw!r}: a value is a number, text, true/false, null or a list [a, b, c].")
    return text


def split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside brackets or quotes: "1,[2,3],'a,b'" → ["1", "[2,3]", "'a,b'"]."""
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote or ch in "'\"":  # a quote opens, or closes the one open
            quote = "" if ch == quote else quote or ch
        elif ch in "[{(]})":
            depth += 1 if ch in "[{(" else -1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return parts + [text[start:]]


def _absolute(value):
    """A relative path that exists here, made absolute (the kernel runs in the output folder); names the library
    gives a meaning (a preset, "base", the corpus) stay names, whatever the current folder holds."""
    if not isinstance(value, str) or value in PRESETS or value in (*MINIATURES, CORPUS) or Path(value).is_absolute():
        return value
    path = user_path(value, "The path", resolve=True)
    return str(path) if path.exists() else value


def check_parameters(notebook: Path, values: dict, size: str | None = None, *, weights: bool = True) -> None:
    """The one check of a run's parameters: the notebook's schema (a CPU `size` also bounds its processes; `weights`:
    see schema.check), then the models and the text source they name."""
    from longctx.data import check_dataset

    merged = {**declared_parameters(notebook), **values}
    on_cpu = size is None or needs.of(notebook.stem, size).accelerator == "none"
    schema.check(notebook.stem, merged, on_cpu=on_cpu, weights=weights)
    if isinstance(values.get("DATASET"), str):  # a script-only or unknown text source
        check_dataset(values["DATASET"], splits=("train", "test"))  # 02 trains on one and scores the other
    for key in needs.MODEL_PARAMETERS:
        if isinstance(values.get(key), str):
            check_spec(values[key], allow_base=notebook.stem == "02_yarn")
    if notebook.stem == "02_yarn":  # the committed miniatures it names
        for key in ("MODEL", "PROBE_MODEL"):
            if merged.get(key) in MINIATURES:
                manifest(miniature(merged[key]))


# what a run leaves: the notebook's stem and size, its folder and executed copy, its results.json and its seconds
RunResult = namedtuple("RunResult", "notebook size out executed results seconds")


def checked_run(notebook: Path, size: str, overrides: dict | None = None, timeout: float | None = None) -> dict:
    """The size's values with `overrides`, checked against the notebook and this machine (`timeout`: the minutes
    --timeout gives the run, if any)."""
    params = {**size_params(notebook, size), **(overrides or {})}
    check_parameters(notebook, params, size)
    needs.check(notebook.stem, size, params)
    _check_raised_length(notebook.stem, size, params, timed=timeout is not None)
    return params


def _cpu_step(step: dict, name: str, values: dict) -> tuple[int, int, str, dict]:
    """(length, batch, model, config changes) of the real CPU step that `x-cpu-step` describes for the parameter `name`:
    its length is `length`'s value (default `name`'s; a list: its longest); `batch` names the batch's parameter, or a
    list of them multiplied (micro-batch × accumulation); `trained` makes the length that many times the model's
    trained length (a miniature's manifest, else the parameter named); `preset_config` maps config fields to
    parameters, applied as the lessons apply them: to a preset, when not 0. (`checkpointing`: false for a step without;
    `tiles`: the parameters of its fused loss head's tile, rows then vocabulary columns: _check_tiles.)"""
    given = values[step.get("length", name)]
    length, model = max(given) if isinstance(given, list) else given, values[step["model"]]
    if trained := step.get("trained"):
        length *= manifest(miniature(model))["trained_length"] if model in MINIATURES else values[trained]
    changes = {field: values[p] for field, p in step.get("preset_config", {}).items() if values[p] and model in PRESETS}
    return length, math.prod(values.get(b, 1) for b in _names(step.get("batch"))), model, changes


def _names(given) -> list:
    return given if isinstance(given, list) else [given] if given else []


def _check_raised_length(notebook: str, size: str, params: dict, timed: bool = False) -> None:
    """Each length the notebook's schema marks as a real CPU step's (`x-cpu-step`), made longer or larger than the
    size's own, or run on another model or config, is first estimated: the step the lessons start from (the plain loss,
    checkpointing on) must fit this machine's available memory, or the kernel would be killed minutes in. Its time is not
    priced on a CPU: the run is told the limit it keeps."""
    if needs.of(notebook, size).gpus:
        return
    from longctx import models
    from longctx.memory.estimate import estimate

    path, said = resolve(notebook), set()  # several lengths of one changed model: said once
    own, values = {**declared_parameters(path), **size_params(path, size)}, {**declared_parameters(path), **params}
    for name, prop in schema.schema(notebook)["properties"].items():
        if not (step := prop.get("x-cpu-step")):
            continue
        (was, was_batch, *was_model), (length, batch, *model) = (_cpu_step(step, name, v) for v in (own, values))
        if tiles := step.get("tiles"):
            _check_tiles(notebook, length * batch, model[0], {t: values[t] for t in tiles})
        if length * batch <= was * was_batch and model == was_model:
            continue
        named = (step.get("length", name), *_names(step.get("batch")), step.get("trained"),
                 *step.get("preset_config", {}).values(), step["model"])  # fmt: skip
        changed = [n for n in dict.fromkeys(named) if n and own.get(n) != values.get(n)]
        raised = ", ".join(f"{n}={values[n]:,}" if type(values[n]) is int else f"{n}={values[n]}" for n in changed or [name])
        need = None
        if length * batch > MAX_TOKENS:  # past what the estimator takes, and far past any CPU's memory
            raise LongctxError(
                f"{notebook}: {raised} is more than this machine can step: {batch:,} × {length:,} tokens a step is past "
                f"the {MAX_TOKENS:,} longctx estimates at all. Use shorter lengths, a smaller batch, or a GPU size."
            )
        with contextlib.suppress(LongctxError):  # a model the estimator does not take is the kernel's to load
            spec, changes = model
            spec = str(miniature(spec)) if spec in MINIATURES else spec
            cfg = models.config(spec, **changes) if changes else spec
            kept = step.get("checkpointing", True)  # (a lesson's step without checkpointing says so)
            dtype = values.get("DTYPE", "fp32")
            need = estimate(cfg, length, batch=batch, loss="plain", checkpointing=kept, dtype=dtype, device="cpu")
        if need and need.peak_bytes > (free := psutil.virtual_memory().available):
            how = "on" if kept else "off"
            flags = "--device cpu --loss plain" + ("" if kept else " --no-checkpointing")
            raise LongctxError(
                f"{notebook}: {raised} is more than this machine can step: the plain-loss step (checkpointing {how}) on "
                f"{batch:,} × {length:,} tokens needs {need.peak_gib:.1f} GiB ({need.peak_phase}; `longctx estimate {flags}`), "
                f"and {free / 2**30:.1f} GiB is available. Use shorter lengths, a smaller batch or model, or a GPU size."
            )
        if (ratio := length * batch / (was * was_batch)) > RAISED_UNTIMED and not timed:
            limit = needs.of(notebook, size).limit_minutes
            raise LongctxError(
                f"{notebook}: {raised} is {ratio:.3g}× the {size} size's tokens a step: far past what its {limit:g}-minute "
                f"limit holds (a CPU's time is not estimated). Give it the time with --timeout MINUTES, or use a longer "
                "size (`longctx list`)."
            )
        more = f"is {ratio:.3g}× the {size} size's tokens a step" if ratio > 1 else f"is another model than the {size} size's"
        if (told := f"{notebook}: {raised} {more}") not in said:
            said.add(told)
            print(f"{told}; it may run past the size's time limit (`longctx list` shows it; --timeout MINUTES gives it "
                  "more).", file=sys.stderr)  # fmt: skip


def _check_tiles(notebook: str, tokens: int, spec: str, tile: dict) -> None:
    """A step's fused loss head cut into at most MAX_TILES tiles (`x-cpu-step`'s `tiles`: its rows' and vocabulary
    columns' parameters): each tile is one turn of TRL's Python loop (trl/kernels/chunked_logprob.py), and under the
    lessons' memory tracker thousands of them make one CPU step take minutes."""
    from longctx import models

    (rows_name, rows), (cols_name, cols) = tile.items()
    try:
        vocab = models.config(str(miniature(spec)) if spec in MINIATURES else spec).get_text_config().vocab_size
    except LongctxError:  # a model the estimator does not take is the kernel's to load
        return
    row_tiles, col_tiles = -(-tokens // rows), -(-vocab // cols)
    if (count := row_tiles * col_tiles) <= MAX_TILES:
        return
    fixes = []  # one parameter raised, the other kept; else both
    if row_tiles <= MAX_TILES:
        fixes.append(f"{cols_name} to at least {-(-vocab // (MAX_TILES // row_tiles)):,}")
    if col_tiles <= MAX_TILES:
        fixes.append(f"{rows_name} to at least {-(-tokens // (MAX_TILES // col_tiles)):,}")
    side = math.isqrt(MAX_TILES)
    both = f"{rows_name} to at least {-(-tokens // side):,} and {cols_name} to {-(-vocab // side):,}"
    fix = "raise " + (" or ".join(fixes) or both)
    raise LongctxError(
        f"{notebook}: {rows_name}={rows:,} and {cols_name}={cols:,} cut a {tokens:,}-token step's loss over {spec}'s "
        f"{vocab:,}-word vocabulary into {count:,} tiles; each is a turn of TRL's Python loop, and at most {MAX_TILES:,} "
        f"keep a CPU step within the size's time: {fix}."
    )


def check_timeout(minutes) -> float | None:
    """A run's time limit in minutes (`--timeout`): a positive number, or None for the size's own limit."""
    if minutes is not None and (isinstance(minutes, bool) or not isinstance(minutes, (int, float)) or not 0 < minutes < 1e6):
        raise LongctxError(f"--timeout must be a positive number of minutes (below a million), got {minutes!r}.")
    return minutes


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
    check_timeout(timeout)
    notebook = resolve(name)
    checked = checked_run(notebook, size, overrides, timeout)
    params = {k: _absolute(v) if k in needs.PATH_PARAMETERS else v for k, v in checked.items()}
    limit, limit_how = time_limit(notebook.stem, size, timeout)
    check_built()  # every size reads the corpus, and a notebook never downloads it nor builds its caches again
    target = user_path(out or build_dir() / notebook.stem, "--out", resolve=True, room=files.OUT_ROOM)
    files.check_room(target, RUN_FREE_BYTES, RUN_FREE_FILES, "a run writes its executed notebook, figures and trainer files")
    if target == notebook.resolve().parent:  # its executed copy would take the notebook's own name
        raise LongctxError(f"{notebook} is inside the output folder {target}, where its executed copy goes; give --out another.")
    if target.is_dir() and (other := next((p.name for p in target.glob("*.ipynb") if p.name != notebook.name), None)):
        # a run replaces its own results and figures: in another notebook's folder it would leave a mix of the two
        raise LongctxError(f"{target} holds another notebook's run ({other}); give {notebook.stem} an --out of its own.")
    files.check_kinds(target, {"results.json": False, ".lock": False, notebook.name: False, "figures": True}, "run")
    out = files.claim_folder(target, "run")
    try:  # one run at a time in a folder: filelock's OS lock, released even when its holder is killed
        with FileLock(out / ".lock", timeout=0):
            return _run_claimed(notebook, size, params, out, progress, limit, limit_how)
    except Timeout:
        raise LongctxError(f"Another run is writing into {out}; wait for it to end, or give this one another --out.") from None


def _run_claimed(notebook: Path, size: str, params: dict, out: Path, progress: bool, limit: float, limit_how: str) -> RunResult:
    """`run`'s work once the folder is its own and locked."""
    import papermill as pm
    from nbclient.exceptions import DeadKernelError

    results_path, executed = out / "results.json", out / notebook.name
    for old in (results_path, executed):  # a failed run must not leave an older run's output looking fresh
        old.unlink(missing_ok=True)
    shutil.rmtree(out / "figures", ignore_errors=True)  # nor an earlier run's figures beside its own
    start = time.perf_counter()
    failed = None  # a cell's error or the kernel's death: raised once the executed notebook is in place
    # a failed write leaves nothing half-written; the kernel's memory cgroup pins an OOM kill on it, not on the machine;
    # a run stopped before its executed notebook is in place (Ctrl-C, SIGTERM, a dead kernel) leaves no results.json
    with (
        _dropped_unless_done(results_path),
        files.atomic(executed) as writing,
        warnings.catch_warnings(),
        children.OwnMemory() as memory,
    ):
        warnings.filterwarnings("ignore", "The specified file")  # papermill's word on the temporary name's suffix
        try:
            with mock.patch.dict(os.environ, LONGCTX_OUT=str(out), LONGCTX_SIZE=size):  # the kernel's session reads them
                _execute(notebook, writing, params, out, progress, limit, limit_how)
        except pm.PapermillExecutionError as exc:
            why = f"{notebook.stem} failed in cell {exc.exec_count} ({exc.ename}: {exc.evalue})"
            failed = NotebookFailed(f"{why}. The executed notebook is at {executed}.", exc.ename, exc.evalue)
        except DeadKernelError as exc:  # killed from outside, or it exited
            killed = memory.oom_killed()  # a result, like any out-of-memory error (a sweep keeps it)
            why = {
                True: "the operating system's out-of-memory killer stopped the kernel (its own memory cgroup counted the "
                "kill); lower the lengths or batch with -p.",
                False: f"the kernel died ({exc}) and its memory cgroup counted no out-of-memory kill: something ended it "
                "(a cell that exits the process, a signal). Run the notebook in JupyterLab to see the cell, or run it again.",
                None: f"the kernel died ({exc}). Whether memory ran out cannot be told here: Linux let longctx make no memory "
                "cgroup for the kernel (that takes root or a delegated cgroup), and the machine-wide OOM count could be "
                "anyone's. Run it again, or in JupyterLab to see the cell.",
            }[killed]
            failed = NotebookFailed(f"{notebook.stem}: {why}", OOM_KILLED if killed else "DeadKernelError", str(exc))
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
    return RunResult(notebook.stem, size, out, executed, json.loads(results_path.read_text()), time.perf_counter() - start)


@contextlib.contextmanager
def _dropped_unless_done(path: Path):
    """Remove `path` when the block raises (KeyboardInterrupt included)."""
    try:
        yield
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def _execute(notebook: Path, writing: Path, params: dict, out: Path, progress: bool, limit: float, limit_how: str) -> None:
    """papermill's run of `notebook` into `writing`, stopped with every process it started after `limit` minutes:
    then NotebookFailed(TIMED_OUT), naming the cell that was running and what each process was doing."""
    import papermill as pm
    from nbclient.exceptions import CellTimeoutError

    running = {"count": 0, "line": ""}  # the code cell running, numbered as papermill's errors number cells

    def on_cell_start(cell, cell_index):  # nbclient's hook, before each cell (a markdown one too)
        if cell.cell_type == "code" and cell.source.strip():
            running.update(count=running["count"] + 1, line=cell.source.strip().splitlines()[0][:80])

    # nbclient's per-cell timeout is a backstop a minute past the limit: the deadline kills the whole process tree first
    limits = dict(execution_timeout=int(limit * 60) + 60, on_cell_start=on_cell_start)
    with children.Deadline(limit * 60) as deadline:
        try:
            pm.execute_notebook(str(notebook), str(writing), params, cwd=str(out), progress_bar=progress, **_PAPERMILL, **limits)
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
    check_timeout(timeout)
    chosen = [resolve(n) for n in names] if names else list(notebooks().values())
    for nb in chosen:  # every size file and the machine checked before the first notebook spends minutes
        checked_run(nb, size, timeout=timeout)
    results = []
    for nb in chosen:
        print(f"== {nb.stem} ({size})", flush=True)
        results.append(r := run(nb.stem, size, progress=progress, timeout=timeout))
        print(f"   {r.seconds:.0f} s → {r.out}", flush=True)
    return results
