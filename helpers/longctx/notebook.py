"""What every lesson notebook does at its start and end: its parameters checked, versions, an output folder,
results.json. A lesson calls `session = longctx.notebook.start("00_memory_primer", params)` after its parameters,
records what it claims with `session.record(...)` and ends with `session.save()`."""

import contextlib
import json
import math
import os
import platform
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import yaml

from longctx import files, quiet, versions
from longctx.errors import LongctxError
from longctx.files import atomic
from longctx.paths import build_dir, schema_file


def jsonable(value):
    """`value` with numpy scalars and arrays, tuples and paths turned into what JSON holds; an infinite or NaN number
    (a seconds figure over a link of speed 0, say) becomes null, which JSON has, not `Infinity`, which it has not."""
    import numpy as np

    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (np.generic, np.ndarray)):
        return jsonable(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return str(value) if isinstance(value, Path) else value


def write_json_atomic(path: Path, payload: dict) -> None:
    """Write to a temporary file and rename: a reader never sees half a file."""
    with atomic(path) as tmp:
        tmp.write_text(json.dumps(jsonable(payload), indent=2, sort_keys=True, allow_nan=False))


@dataclass
class Session:
    notebook: str
    params: dict
    out: Path
    results: dict = field(default_factory=dict)
    started: float = field(default_factory=time.time)

    def record(self, **values) -> None:
        """Keep scalars (or small dicts/lists of them) for results.json; nothing is shown (the lesson prints it)."""
        self.results.update(jsonable(values))

    def save_figure(self, fig, name: str) -> None:
        """`name`.png and .svg of `fig` in this run's figures/ folder, which `longctx figures` and the site collect."""
        from longctx import plots

        plots.save_figure(fig, name, self.out / "figures")

    def save(self) -> None:
        payload = {
            "notebook": self.notebook,
            "params": self.params,
            "versions": versions(),
            "python": platform.python_version(),
            "seconds": time.time() - self.started,
            "results": self.results,
            # the size the harness ran it at (opened in JupyterLab: "interactive", the cell's own values)
            "size": os.environ.get("LONGCTX_SIZE") or "interactive",
            # whether the lesson run differs from the one committed (`longctx run` tells; null: not told)
            "lesson_edited": {"true": True, "false": False}.get(os.environ.get("LONGCTX_EDITED", "")),
            "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            # this run's figures: a later run in the folder replaces these and keeps any other file there
            "figures": sorted(p.name for p in (self.out / "figures").glob("*")),
        }
        write_json_atomic(self.out / "results.json", payload)


def start(notebook: str, params: dict) -> Session:
    """Check the parameters (unless `longctx run` checked these very values), print versions and device, pick the
    output folder, and return the session that collects results."""
    from longctx.run import harness

    quiet.for_lessons()
    # a first cell run again in JupyterLab sees the later cells' UPPER_CASE names too: those are set aside; papermill's
    # overrides are checked whatever their names (its -p with a typo, a name a later cell assigns: it only warns)
    if (declared := schema_file(notebook)).is_file():  # the template has none yet
        names = set(yaml.safe_load(declared.read_text())["properties"])
        params = {k: v for k, v in params.items() if k not in _assigned(harness.resolve(notebook)) - names} | _injected()
        if missing := sorted(names - set(params)):  # this cell run before the parameters cell, or a name deleted
            raise LongctxError(f"{missing[0]} is not set: run the parameters cell first (it assigns {', '.join(sorted(names))}).")
        if os.environ.get("LONGCTX_CHECKED") != harness.checked_mark(notebook, params):
            harness.check_lesson(notebook, params)
    if named := os.environ.get("LONGCTX_OUT"):  # the harness's folder, claimed by it (the one write rule, here too)
        out = files.claim(named, "run")
    else:  # a run of its own, never another's folder: the time it started and this process
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        out = build_dir() / "interactive" / notebook / f"{stamp}-{os.getpid()}"
        out.mkdir(parents=True, exist_ok=True)
    v = versions()
    print(" | ".join(f"{k} {v[k]}" for k in ("torch", "transformers", "trl", "accelerate", "device")))
    return Session(notebook, dict(params), out)


def _injected() -> dict:
    """What papermill's injected cell (its source starts "# Parameters") set in this kernel, from IPython's history of
    the cells run; nothing outside IPython."""
    with contextlib.suppress(ImportError, AttributeError):
        from IPython import get_ipython

        space = get_ipython().user_ns
        return {k: space[k] for k in _names(c for c in space.get("In", []) if c.startswith("# Parameters")) if k in space}
    return {}


def _assigned(path: Path) -> set[str]:
    """The names the lesson's own code cells assign or import."""
    import nbformat

    return _names(cell.source for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code")


def _names(sources) -> set[str]:
    """The names code assigns or imports (IPython's %magic and !shell lines aside)."""
    import ast

    names = set()
    for source in sources:
        code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
        with contextlib.suppress(SyntaxError):
            for n in ast.walk(ast.parse(code)):
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                    names.add(n.id)
                elif isinstance(n, (ast.Import, ast.ImportFrom)):
                    names |= {(a.asname or a.name).split(".")[0] for a in n.names}
    return names


def parameters(namespace: dict) -> dict:
    """The notebook's parameters: its UPPER_CASE names (after papermill injected any overrides), whatever their values'
    types (the schema refuses a numpy integer or a Path); `start` sets aside the ones its later cells assign."""
    return {k: v for k, v in namespace.items() if k.isupper() and not k.startswith("_")}
