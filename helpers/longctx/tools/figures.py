"""`longctx figures`: regenerate every figure the guide shows by running the notebooks that draw them,
collect them (PNG and SVG) into one folder, and write an index page naming, for each figure, the
notebook, size, parameters and library versions it came from."""

from __future__ import annotations

import shutil
from pathlib import Path

from longctx import files
from longctx.errors import LongctxError
from longctx.paths import build_dir

# The guide's figure names and the notebook that draws each one.
GUIDE_FIGURES = {
    **dict.fromkeys(["long_context_profile_plain", "long_context_profile_chunked", "long_context_scaling"], "01_chunked_loss"),
    **dict.fromkeys(["long_context_rope_pertoken_plain", "long_context_rope_pertoken"], "02_yarn"),
    **dict.fromkeys(["profile_layers_plain", "profile_layers_offload", "long_context_offload"], "03_activation_offload"),
    "long_context_cp_scaling": "04_context_parallelism",
}


def regenerate(size="cpu", out: str | Path | None = None, *, runs: dict | None = None, progress=True, force=False) -> Path:
    """Run each notebook that draws a guide figure at `size` (or reuse `runs`: notebook → RunResult), copy the
    figures into `out` (default build/figures/<size>/) and write index.md there. A folder holding files this
    command did not write is refused before a notebook runs (`force`: keep them, add the figures beside them)."""
    from longctx.run import harness, needs

    writes = {"index.md", *(f"{name}.{ext}" for name in GUIDE_FIGURES for ext in ("png", "svg"))}
    out = files.check_out(out or build_dir() / "figures" / size, "figures", writes=writes, force=force)
    notebooks = sorted(set(GUIDE_FIGURES.values()))
    runs = dict(runs or {})
    for nb in notebooks:  # every notebook's parameters and needs before the first one runs
        params = harness.size_params(harness.resolve(nb), size)
        harness.check_parameters(harness.resolve(nb), params, size)
        needs.check(nb, size, params)
    for nb in notebooks:
        if nb not in runs:
            print(f"== {nb} ({size})", flush=True)
            runs[nb] = harness.run(nb, size, out=build_dir() / "figures-runs" / size / nb, progress=progress)
    with files.staging(out) as tmp:
        lines = [f"# Guide figures ({size} size)\n\nEach from the run named under it (`longctx figures --size {size}`).\n"]
        for name, nb in GUIDE_FIGURES.items():
            for ext in ("png", "svg"):
                source = runs[nb].out / "figures" / f"{name}.{ext}"
                if not source.exists():
                    raise LongctxError(f"{nb} ran but did not write {name}.{ext} (expected in {source.parent}).")
                shutil.copyfile(source, Path(tmp) / source.name)
            versions = ", ".join(f"{k} {v}" for k, v in sorted(runs[nb].results.get("versions", {}).items()))
            params = ", ".join(f"{k}={v!r}" for k, v in sorted(runs[nb].results.get("params", {}).items()))
            lines.append(
                f"## {name}\n\n![{name}]({name}.png)\n\n- notebook `{nb}`, size `{size}`; [SVG]({name}.svg)\n"
                f"- versions: {versions}\n- parameters: {params}\n"
            )
        (Path(tmp) / "index.md").write_text("\n".join(lines))
        files.place(Path(tmp), out, "figures")
    return out
