"""Execute lesson notebooks headless through papermill, at a named size, with checked parameters.

Each notebook has one cell tagged `parameters`; `notebooks/params/<notebook>/<size>.yaml` holds the
values for a size (ci: the tests, seconds; cpu: the lesson on a laptop, minutes; gpu: full size;
rehearsal: the gpu size's values with only the hardware swapped — a local hub-format model, a local
parquet dataset, short lengths — so its code paths run on a CPU). Every override is checked against the
notebook's own parameter cell, and the machine against the size's needs (notebooks/params/needs.yaml),
before a kernel starts.
"""

from __future__ import annotations

import ast
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from longctx import children, files, quiet
from longctx.errors import LongctxError, check_choice
from longctx.models import PRESETS, check_spec
from longctx.paths import build_dir, data_dir, notebooks_dir, user_path
from longctx.run import needs
from longctx.run.needs import MODEL_PARAMETERS, PATH_PARAMETERS

SIZES = ("ci", "cpu", "gpu", "rehearsal")
REHEARSAL = "rehearsal"  # = gpu.yaml, then rehearsal.yaml on top ("{data}" in its strings = the data folder)


OOM_KILLED = "OutOfMemoryKill"  # NotebookFailed.ename of a kernel the OS's out-of-memory killer stopped


class NotebookFailed(LongctxError):
    """A cell raised: `ename`/`evalue` are the exception's type name and message (a sweep records an
    out-of-memory failure as a result)."""

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
        if not given.is_file():
            raise LongctxError(f"No notebook at {given}.")
        declared_parameters(given)  # a file that is no notebook is told so, before its sizes are looked up
        return given.resolve()
    if len(given.parts) > 1:  # a path without the suffix: not a repository notebook's name
        raise LongctxError(
            f"{name} is a path but not a notebook file: give the file itself ({name}.ipynb), or a "
            "notebook's name (01, chunked_loss, 01_chunked_loss)."
        )
    found = notebooks()
    stem = Path(name).stem
    if stem in found:
        return found[stem]
    matches = [p for s, p in found.items() if s.split("_", 1)[0] == stem or s.split("_", 1)[1] == stem]
    if len(matches) == 1:
        return matches[0]
    raise LongctxError(f"Unknown notebook {name!r}. Available: {', '.join(found) or '(none)'}.")


def sizes(notebook: Path) -> list[str]:
    folder = notebooks_dir() / "params" / notebook.stem
    return sorted(p.stem for p in folder.glob("*.yaml") if p.stem in SIZES)  # beside them: schema.yaml


def size_params(notebook: Path, size: str) -> dict:
    if size == REHEARSAL:
        rehearsal = {
            k: v.format(data=data_dir()) if isinstance(v, str) else v for k, v in _size_file(notebook, REHEARSAL).items()
        }
        for key, raw in _size_file(notebook, REHEARSAL).items():
            if isinstance(raw, str) and "{data}" in raw and not Path(rehearsal[key]).exists():
                fix = (
                    f"`longctx pretrain --out {rehearsal[key]}` builds a base model there"
                    if "yarn-base" in raw
                    else "`longctx data` builds it"
                )
                raise LongctxError(
                    f"The rehearsal size reads {key}={rehearsal[key]}, which is not there (the data folder "
                    f"is {data_dir()}; LONGCTX_DATA moves it). {fix[0].upper() + fix[1:]}, or unset "
                    "LONGCTX_DATA to use the repository's data/."
                )
        return {**_size_file(notebook, "gpu"), **rehearsal}
    return _size_file(notebook, size)


def _size_file(notebook: Path, size: str) -> dict:
    path = notebooks_dir() / "params" / notebook.stem / f"{size}.yaml"
    if not path.exists():
        if not sizes(notebook):
            raise LongctxError(
                f"{notebook.name} has no sizes: a notebook run by its path takes them from the "
                f"repository's notebooks/params/<stem>/, so name a copy like the lesson it copies "
                f"(e.g. 01_chunked_loss.ipynb)."
            )
        raise LongctxError(
            f"No size {size!r} for {notebook.stem}. Available sizes: {', '.join(sizes(notebook))} "
            f"(files in notebooks/params/{notebook.stem}/)."
        )
    try:
        values = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise LongctxError(f"{path} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(values, dict):
        raise LongctxError(f"{path} must map parameter names to values (NAME: value), not {type(values).__name__}.")
    return values


def declared_parameters(notebook: Path) -> dict:
    """The names and default values of the notebook's `parameters` cell."""
    import nbformat

    try:
        nb = nbformat.read(notebook, as_version=4)
        nbformat.validate(nb)
    except Exception as exc:  # not JSON, not a notebook: nbformat's own error types vary
        raise LongctxError(
            f"{notebook} is not a readable notebook ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})."
        ) from None
    cells = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise LongctxError(f"{notebook.name} must have exactly one cell tagged 'parameters' (found {len(cells)}).")
    declared = {}
    try:
        for node in ast.parse(cells[0].source).body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                declared[node.targets[0].id] = ast.literal_eval(node.value)
    except (SyntaxError, ValueError) as exc:
        raise LongctxError(
            f"{notebook.name}: its parameters cell must assign plain literals (NAME = 4096, a string, "
            f"a list), one per line: {type(exc).__name__}: {str(exc).splitlines()[0]}"
        ) from None
    return declared


def parse_overrides(pairs: list[str]) -> dict:
    """`key=value` strings → values read the way a person reads them (see `parse_value`)."""
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise LongctxError(f"Parameter override {pair!r} is not of the form KEY=VALUE.")
        key, raw = pair.split("=", 1)
        if not key.strip():
            raise LongctxError(f"Parameter override {pair!r} has no name before '='.")
        if not raw.strip():
            raise LongctxError(f"Parameter override {pair!r} has no value after '=' (quote an empty string: {key}='').")
        if key.strip() in out:
            raise LongctxError(f"{key.strip()} is given twice with -p; keep one.")
        out[key.strip()] = parse_value(raw)
    return out


_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?|[+-]?(inf|nan)", re.IGNORECASE)


def parse_value(raw: str):
    """A decimal is a decimal ("064" is 64, "1e-3" a float), only true/false are booleans, null/None is
    None, [a, b] is a list of such values, quotes keep a string; anything else stays the string it is
    (YAML 1.1 would read 064 as octal 52, 1:04 as 64, yes as True and a date as a date)."""
    text = raw.strip()
    if _INT.fullmatch(text):
        if len(text) > 30:  # no parameter counts that high; Python itself refuses past 4300 digits
            raise LongctxError(f"Cannot read {text[:20]}… ({len(text)} digits) as a number: no parameter takes one that large.")
        return int(text, 10)
    if _FLOAT.fullmatch(text):
        return float(text)
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if text.lower() in ("null", "none", "~"):
        return None
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1]
        return [parse_value(item) for item in split_top_level(inner)] if inner.strip() else []
    if text[:1] in "[]{}":
        raise LongctxError(f"Cannot read {raw!r}: a value is a number, text, true/false, null or a list [a, b, c].")
    return text


def split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside brackets or quotes: "1,[2,3],'a,b'" → ["1", "[2,3]", "'a,b'"]."""
    parts, depth, quote, current = [], 0, "", ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == "," and depth == 0 and not quote:
            parts.append(current)
            current = ""
        else:
            current += ch
    return parts + [current]


def _absolute(value):
    """A relative path that exists here, made absolute: the kernel runs in the output folder. Names the
    library gives a meaning (a preset, "base", the corpus) keep it, whatever the current folder holds."""
    from longctx.data import CORPUS

    if not isinstance(value, str) or value in PRESETS or value in ("base", CORPUS) or Path(value).is_absolute():
        return value
    path = user_path(value, "The path", resolve=True)
    return str(path) if path.exists() else value


def check_parameters(notebook: Path, values: dict, size: str | None = None, *, weights: bool = True) -> None:
    """Names, types, ranges and relations of `values` against the notebook's schema (at `size`: a CPU size also
    bounds the processes and the memory a run takes; `weights`: see schema.check), then the models and the text
    source they name."""
    from longctx.run import schema

    declared = declared_parameters(notebook)
    on_cpu = size is None or needs.of(notebook.stem, size).accelerator == "none"
    schema.check(notebook.stem, {**declared, **values}, on_cpu=on_cpu, weights=weights)
    if isinstance(values.get("DATASET"), str):  # a script-only or unknown text source, before any kernel starts
        from longctx.data import check_dataset

        check_dataset(values["DATASET"], splits=("train", "test"))  # 02 trains on one and scores the other
    for key in MODEL_PARAMETERS:
        if isinstance(values.get(key), str):
            check_spec(values[key], allow_base=notebook.stem == "02_yarn" and key == "MODEL")
    if notebook.stem == "02_yarn" and {**declared, **values}.get("MODEL") == "base":  # the committed base model
        from longctx.levers.base_model import manifest

        manifest()


def _without_progress_widgets(path: Path) -> None:
    """Drop the progress bars' widget outputs from an executed notebook: live in JupyterLab, saved they are a
    bar frozen at 0% (a widget's state is not saved with it)."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if "application/vnd.jupyter.widget-view+json" not in o.get("data", {})]
    nb.metadata.pop("widgets", None)
    nbformat.write(nb, path)


def _is_json(path: Path) -> bool:
    try:
        json.loads(path.read_bytes())
        return True
    except (OSError, ValueError):
        return False


@dataclass
class RunResult:
    notebook: str
    size: str
    out: Path
    executed: Path
    results: dict
    seconds: float


def run(
    name: str,
    size: str = "cpu",
    overrides: dict | None = None,
    *,
    out: Path | None = None,
    progress: bool = True,
    kernel: str | None = None,
) -> RunResult:
    """Execute one notebook at `size` (+ overrides) into `out` (default build/<notebook>/)."""
    import papermill as pm
    from nbclient.exceptions import DeadKernelError

    check_choice("size", size, SIZES)
    notebook = resolve(name)
    params = size_params(notebook, size)
    params.update(overrides or {})
    check_parameters(notebook, params, size)
    params = {k: _absolute(v) if k in PATH_PARAMETERS else v for k, v in params.items()}
    needs.check(notebook.stem, size, params)
    from longctx.data import require_corpus

    require_corpus()  # every size reads the corpus; a notebook never downloads it
    target = user_path(out or build_dir() / notebook.stem, "--out", resolve=True, room=files.OUT_ROOM)
    default = (build_dir() / notebook.stem).resolve()
    if target == default and target.exists():  # build/<notebook>/ from before folders were claimed: ours only
        known = {"results.json", notebook.name, "figures", "run", "runs", "ft", "timed", "interactive"}
        foreign = sorted(
            p.name
            for p in target.iterdir()
            if p.name not in known and not p.name.startswith(".") and not p.name.startswith(notebook.stem)
        )
        if foreign:
            raise LongctxError(
                f"{target} holds files a run does not write ({', '.join(foreign[:5])}); move them "
                "out of build/ (the run's own output folder), or give --out another folder."
            )
    if target == notebook.resolve().parent:  # its executed copy would take the notebook's own name
        raise LongctxError(
            f"{notebook} is inside the output folder {target}; give --out another folder (the run "
            "writes an executed copy of the notebook under the same name)."
        )
    out = files.claim_folder(target, "run", default=build_dir() / notebook.stem)
    results_path = out / "results.json"
    executed = out / notebook.name
    for old in (results_path, executed):  # a failed run must not leave an older run's output looking fresh
        old.unlink(missing_ok=True)
    env_before = {k: os.environ.get(k) for k in ("LONGCTX_OUT", "LONGCTX_SIZE")}
    os.environ.update(LONGCTX_OUT=str(out), LONGCTX_SIZE=size)  # the kernel's session reads them
    start = time.perf_counter()
    writing = executed.with_name(f".{executed.stem}.tmp{os.getpid()}.ipynb")  # renamed into place once whole
    kills_before = children.oom_kills()
    whole = False  # papermill wrote the executed notebook to the end (also when a cell failed)
    try:
        pm.execute_notebook(
            str(notebook),
            str(writing),
            parameters=params,
            cwd=str(out),
            progress_bar=progress,
            kernel_name=kernel,
            log_output=False,
            request_save_on_cell_execute=False,
            extra_arguments=quiet.KERNEL_ARGUMENTS,
        )
        whole = True
    except pm.PapermillExecutionError as exc:
        whole = True
        raise NotebookFailed(
            f"{notebook.stem} failed in cell {exc.exec_count} ({exc.ename}: {exc.evalue}). "
            f"The executed notebook is at {executed}.",
            exc.ename,
            exc.evalue,
        ) from None
    except DeadKernelError as exc:  # killed from outside, or it exited
        whole = _is_json(writing)  # papermill may or may not have written it out after the death
        if children.oom_kills() > kills_before:  # a result, like any out-of-memory error (a sweep keeps it)
            raise NotebookFailed(
                f"{notebook.stem}: the operating system's out-of-memory killer stopped the kernel; lower the "
                "lengths or batch with -p.",
                OOM_KILLED,
                str(exc),
            ) from None
        raise NotebookFailed(
            f"{notebook.stem}: the kernel died ({exc}) and the operating system recorded no out-of-memory kill: "
            "something ended it (a cell that exits the process, a signal). Run the notebook in JupyterLab to "
            "see the cell, or run the command again.",
            "DeadKernelError",
            str(exc),
        ) from None
    except OSError as exc:
        raise files.write_error(exc, writing) from None
    finally:
        for k, v in env_before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        try:
            if whole and writing.exists():
                _without_progress_widgets(writing)
                os.replace(writing, executed)
        except OSError as exc:
            raise files.write_error(exc, executed) from None
        finally:
            writing.unlink(missing_ok=True)  # a write that failed half-way (a full disk, a size limit) leaves nothing
    seconds = time.perf_counter() - start
    if not results_path.exists():
        raise LongctxError(f"{notebook.stem} ran but wrote no results.json (its last cell must call session.save()).")
    return RunResult(notebook.stem, size, out, executed, json.loads(results_path.read_text()), seconds)


def run_all(size: str = "cpu", names: list[str] | None = None, progress: bool = True) -> list[RunResult]:
    """The main job: every notebook at `size`, each into build/<notebook>/."""
    chosen = [resolve(n) for n in names] if names else list(notebooks().values())
    for nb in chosen:  # check every size file and the machine before spending minutes on the first notebook
        check_parameters(nb, size_params(nb, size), size)
        needs.check(nb.stem, size, size_params(nb, size))
    results = []
    for nb in chosen:
        print(f"== {nb.stem} ({size})", flush=True)
        r = run(nb.stem, size, progress=progress)
        print(f"   {r.seconds:.0f} s → {r.out}", flush=True)
        results.append(r)
    return results
