"""The GPU validation command, in two phases, each sized for one command of a borrowed GPU machine (at most
10 minutes a command; the lease is 15 minutes in all, its start and transfers included):

  measure     (a) one real training step measured twice, by the tracker (MemTracker) and by the CUDA caching
              allocator (`max_memory_allocated`); (c) a memory snapshot of that step (python stacks only, so no
              C++ symbolisation), loaded back; (b) `longctx estimate` against the allocator's peak for
              Qwen3-0.6B and Qwen3-4B at two lengths each, chunked and plain loss, with and without offload
              (a case whose estimate passes 95% of the card is skipped, not run into OOM).
  notebooks   (d) notebooks 00, 01 and 03 at their `gpu` size, trimmed to fit, on a full-shape Qwen3-0.6B with
              random weights saved here in hub format (random values measure memory as well as trained ones).
  time        (e) the estimate's own step timed on the GPU (one warm-up, then the median of TIMED runs, each
              synchronised) for Qwen3-0.6B and Qwen3-4B at two lengths, plain and chunked loss, offload and the
              tiled MLP, beside the time model's prediction for this card (longctx/memory/timing.py).
  dry-run     any machine, no GPU: every step built on fake tensors at 1,024 tokens, every input checked.

Each phase has a budget in seconds (--budget): a case that would start with too little of it left is
recorded as skipped. gpu_check.json and gpu_check.md are rewritten in --out (default build/gpu_check/)
after every case, so a run stopped at its limit keeps what it measured; any exception is recorded with its
case and the next case runs. With --report-to (default: $OUT where it is set) only the report files — the
two reports and each notebook's results.json, at most 8 files — are copied there; the model, the snapshot
and the executed notebooks stay under --out.

    python benchmarks/gpu_check.py measure   [--budget 330] [--out DIR] [--report-to DIR]
    python benchmarks/gpu_check.py notebooks [--budget 450] [--out DIR] [--report-to DIR]
    python benchmarks/gpu_check.py time      [--budget 420] [--out DIR] [--report-to DIR]
    python benchmarks/gpu_check.py dry-run   [--out DIR]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pickle
import shutil
import subprocess
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from longctx import LongctxError, data, models, versions
from longctx.files import atomic
from longctx.memory import cards, timing
from longctx.memory.estimate import DEFAULT_DTYPE, DTYPES, build_step, check_levers, estimate
from longctx.paths import build_dir
from longctx.run import harness
from longctx.units import GIB

# (model, tokens, loss, offload): every real step and its estimate, in the order they run (short ones first)
CASES = [
    (model, n, loss, off)
    for model, lengths in (("qwen3-0.6b", (8192, 32768)), ("qwen3-4b", (32768, 98304)))
    for n in lengths
    for loss, off in (("chunked", False), ("plain", False), ("chunked", True))
]
TRACKER_CASE = ("qwen3-0.6b", 8192, "chunked", False)  # (a) and (c)
NOTEBOOKS = {  # (d): the gpu size with the model built here; estimate-only knobs trimmed to fit the time
    "00_memory_primer": {"OVERFIT_STEPS": 100, "EVAL_EVERY": 25},
    "01_chunked_loss": {"FULL_LENGTHS": [98304], "PLAIN_LENGTHS": [32768], "FIND_REACH": False},
    "03_activation_offload": {"CPU_LENGTHS": [8192, 32768], "FULL_LENGTHS": [32768, 98304], "FIND_REACH": False},
}
# (e): (model, tokens, the estimate's levers); each timed where its estimate fits the card
TIME_CASES = [
    (model, n, levers)
    for model, lengths in (("qwen3-0.6b", (8192, 32768)), ("qwen3-4b", (16384, 32768)))
    for n in lengths
    for levers in ({"loss": "plain"}, {}, {"offload": True}, {"tiled_mlp": True})
]
TIMED = 3  # timed runs of each step after its warm-up
HEADROOM = 0.95  # a case whose estimate passes this share of the card is skipped, not run into OOM
BUDGETS = {"measure": 330, "notebooks": 450, "time": 420, "dry-run": 600}  # seconds; each well under a 10-minute command
MIN_LEFT = {"measure": 25, "notebooks": 60, "time": 30}  # a case does not start with less of the budget left
NOTEBOOK_CAP = 170  # seconds one notebook may take before it is stopped and recorded as timed out
REPORT = ("gpu_check.json", "gpu_check.md")


class Report:
    """The report of one phase, merged into gpu_check.json beside the other phase's, rewritten whole after
    every case and copied (with the notebooks' results) to `report_to`."""

    def __init__(self, out: Path, phase: str, report_to: Path | None, command: str) -> None:
        self.out, self.phase, self.report_to = out, phase, report_to
        path = out / REPORT[0]
        try:
            self.data = json.loads(path.read_text()) if path.exists() else {}
        except ValueError:
            self.data = {}
        self.data.update(versions=versions(), date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
        self.section = self.data[phase] = {"command": command, "finished": False}
        self.start = time.perf_counter()

    def save(self) -> None:
        self.section["seconds"] = round(time.perf_counter() - self.start, 1)
        with atomic(self.out / REPORT[0]) as tmp:
            tmp.write_text(json.dumps(self.data, indent=2, default=str))
        with atomic(self.out / REPORT[1]) as tmp:
            tmp.write_text(markdown(self.data))
        if self.report_to:
            self.report_to.mkdir(parents=True, exist_ok=True)
            files = [self.out / name for name in REPORT]
            files += [self.out / nb / "results.json" for nb in NOTEBOOKS if (self.out / nb / "results.json").exists()]
            for f in files:
                name = f.name if f.parent == self.out else f"{f.parent.name}.results.json"
                with atomic(self.report_to / name) as tmp:
                    shutil.copyfile(f, tmp)


def _estimate_peak(case) -> float:
    model, n, loss, off = case
    return estimate(model, n, loss=loss, offload=off).peak_gib


def real_step(case, snapshot: Path | None = None) -> dict:
    """One forward/loss/backward/AdamW step on the GPU, in bf16, with checkpointing (the estimate's step)."""
    import torch

    from longctx.memory.measure import measure_cuda

    model, n, loss, off = case
    net = optimizer = step = None
    torch.set_default_dtype(DTYPES[DEFAULT_DTYPE])
    try:
        with torch.device("cuda"):  # with offload, checkpointing is turned on below, once, by transformers' own path
            # under autocast, as a Trainer with bf16=True runs the forward on one GPU (and the estimate traces it)
            net, optimizer, step = build_step(models.config(model), n, loss=loss, checkpointing=not off, autocast=True)
        if off:  # save_on_cpu (pinned host memory) around each checkpointed layer
            net.activation_checkpointing_enable(offload=True)
        profile = measure_cuda(step, model=net, optimizer=optimizer, snapshot=snapshot)
        return {
            "allocator_peak_gib": profile.meta["allocator_peak_gib"],
            "tracker_peak_gib": profile.peak_gib,
            "tracker_over_allocator": profile.meta["tracker_over_allocator"],
            "reserved_peak_gib": torch.cuda.max_memory_reserved() / GIB,
        }
    except torch.cuda.OutOfMemoryError as exc:
        return {"oom": str(exc).splitlines()[0]}
    finally:
        torch.set_default_dtype(torch.float32)
        net = optimizer = step = None  # noqa: F841  (the next case starts from an empty card)
        gc.collect()
        torch.cuda.empty_cache()


def timed_step(case) -> dict:
    """The estimate's step on the GPU (bf16, checkpointing as in `estimate`), its median time over TIMED runs."""
    import statistics

    import torch

    model, n, levers = case
    net = optimizer = step = None
    torch.set_default_dtype(DTYPES[DEFAULT_DTYPE])
    try:
        off = levers.get("offload", False)
        with torch.device("cuda"):  # with offload, transformers' own save_on_cpu path, turned on below
            kwargs = {k: v for k, v in levers.items() if k != "offload"}
            net, optimizer, step = build_step(models.config(model), n, checkpointing=not off, autocast=True, **kwargs)
        if off:
            net.activation_checkpointing_enable(offload=True)
        seconds = []
        for _ in range(TIMED + 1):  # the first run pays for the allocator's growth and kernel selection
            torch.cuda.synchronize()
            start = time.perf_counter()
            step()
            optimizer.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            seconds.append(time.perf_counter() - start)
        return {"measured_seconds": statistics.median(seconds[1:]), "runs": [round(s, 4) for s in seconds]}
    except torch.cuda.OutOfMemoryError as exc:
        return {"oom": str(exc).splitlines()[0]}
    finally:
        torch.set_default_dtype(torch.float32)
        net = optimizer = step = None  # noqa: F841
        gc.collect()
        torch.cuda.empty_cache()


def _predicted(case_and_card) -> tuple[float, float]:
    (model, n, levers), card = case_and_card
    profile = estimate(model, n, **levers)
    return profile.peak_gib, timing.step_time(profile, card)["seconds"]


def card_of(device_name: str) -> str | None:
    """The longctx card of a CUDA device name ("NVIDIA H100 80GB HBM3" → "H100-80GB"), None when not in the table."""
    name = device_name.upper()
    return next((c for c in cards.CARDS if c.split("-")[0] in name and (c.partition("-")[2] in name.replace(" ", ""))), None)


def time_steps(report: Report, budget: float) -> None:
    """(e): each TIME_CASE timed on this GPU beside the time model's prediction for this card."""
    import torch

    sec = report.section
    capacity, name = torch.cuda.get_device_properties(0).total_memory / GIB, torch.cuda.get_device_name()
    card = card_of(name)
    sec.update(gpu=name, card=card, capacity_gib=capacity, steps=[])
    if card is None:
        raise LongctxError(f"{name} is not in longctx's card table (memory/cards.py): add its datasheet figures first.")
    pool = ProcessPoolExecutor(max(1, (os.cpu_count() or 2) - 2), mp_context=get_context("spawn"))
    futures = {i: pool.submit(_predicted, (case, card)) for i, case in enumerate(TIME_CASES)}
    try:
        for i, case in enumerate(TIME_CASES):
            row = {"model": case[0], "seq_len": case[1], "levers": case[2]}
            try:
                if _left(report, budget) < MIN_LEFT["time"]:
                    row["skipped"] = f"budget: {_left(report, budget):.0f} s of {budget:.0f} left"
                else:
                    row["estimated_peak_gib"], row["predicted_seconds"] = futures[i].result(timeout=max(1, _left(report, budget)))
                    if row["estimated_peak_gib"] > HEADROOM * capacity:
                        row["skipped"] = f"estimate {row['estimated_peak_gib']:.1f} GiB is over {HEADROOM:.0%} of the card"
                    else:
                        row.update(timed_step(case))
                        if "measured_seconds" in row:
                            row["predicted_over_measured"] = row["predicted_seconds"] / row["measured_seconds"]
            except Exception as exc:  # a kernel that fails here (DeepSpeed's tiled MLP absent): recorded, the next runs
                row.update(_error(exc))
            print(json.dumps({k: v for k, v in row.items() if k != "where"}), flush=True)
            sec["steps"].append(row)
            report.save()
    finally:
        running = list((pool._processes or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for proc in running:
            proc.kill()


def _error(exc: BaseException) -> dict:
    return {"error": f"{type(exc).__name__}: {exc}"[:2000], "where": traceback.format_exc(limit=-3)[-2000:]}


def local_model(out: Path, *, build_weights: bool) -> Path:
    """Qwen3-0.6B at full shape with random weights, saved in hub format with the corpus tokenizer (its
    4,096 ids are valid rows of the 151,936-row embedding), for the notebooks' MODEL."""
    folder = out / "qwen3-0.6b-random"
    if build_weights and not (folder / "model.safetensors").exists():
        models.load("qwen3-0.6b", dtype=DEFAULT_DTYPE).save_pretrained(folder)
    elif not build_weights:
        models.config("qwen3-0.6b").save_pretrained(folder)
    data.tokenizer().save_pretrained(folder)
    return folder


def image_versions() -> dict:
    """The versions of the packages gpu_wheels.py left to the machine's image (.whl/manifest.json), and any
    that does not meet what the carried wheels require of it."""
    from importlib import metadata

    from packaging.specifiers import SpecifierSet

    manifest = Path(__file__).resolve().parents[1] / ".whl" / "manifest.json"
    if not manifest.exists():
        return {}
    found, unmet = {}, []
    for name, entry in json.loads(manifest.read_text())["from_image"].items():
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
        wanted = SpecifierSet(",".join(entry["requirements"]))
        if found[name] is None or not wanted.contains(found[name], prereleases=True):
            unmet.append(f"{name} {found[name]} (wanted {wanted or 'any'})")
    if unmet:
        print("gpu_check: the image lacks what the carried wheels need: " + "; ".join(unmet), file=sys.stderr)
    return {"versions": found, "unmet": unmet}


def check_inputs(out: Path) -> dict:
    """Every case's levers, every notebook's parameters at the gpu size with the local model, the model
    folder's config and tokenizer loading back the way the notebooks load them."""
    from transformers import AutoConfig

    folder = local_model(out, build_weights=False)
    assert AutoConfig.from_pretrained(folder, trust_remote_code=False).num_hidden_layers == 28
    assert data.tokenizer_for(str(folder)).eos_token_id is not None
    for model, n, loss, off in CASES:
        check_levers(models.config(model), n, loss=loss, checkpointing=True, offload=off, dtype=DEFAULT_DTYPE, batch=1)
    for nb, overrides in NOTEBOOKS.items():
        path = harness.resolve(nb)
        # the folder holds a config only here; the real run saves the weights into it before any notebook
        harness.check_parameters(
            path, {**harness.size_params(path, "gpu"), **overrides, "MODEL": str(folder)}, "gpu", weights=False
        )
    return {"model_folder": str(folder), "cases": len(CASES), "notebooks": list(NOTEBOOKS), "image": image_versions()}


def dry_run(report: Report) -> None:
    """Every step the GPU run would take, built and run on fake tensors at a short length (no GPU, no
    memory), and every input checked."""
    report.section["built"] = built = []
    for model, loss, off in sorted({(m, lo, o) for m, _, lo, o in CASES}):
        peak = estimate(model, 1024, loss=loss, offload=off).peak_gib
        built.append({"model": model, "loss": loss, "offload": off, "fake_peak_gib_at_1024": peak})
        report.save()
    report.section["timed"] = [  # (e)'s cases priced at 1,024 tokens on the H100, as the GPU phase will on its card
        {"model": m, "levers": lv, "predicted_seconds_at_1024": _predicted(((m, 1024, lv), cards.DEFAULT))[1]}
        for m, lv in {(m, json.dumps(lv, sort_keys=True)): (m, lv) for m, _, lv in TIME_CASES}.values()
    ]
    report.save()


def _left(report: Report, budget: float) -> float:
    return budget - (time.perf_counter() - report.start)


def measure(report: Report, budget: float) -> None:
    import torch

    capacity = torch.cuda.get_device_properties(0).total_memory / GIB
    sec = report.section
    sec.update(gpu=torch.cuda.get_device_name(), capacity_gib=capacity, estimates=[])
    report.data["gpu"] = sec["gpu"]
    workers = max(1, min(len(CASES), (os.cpu_count() or 2) - 2))
    pool = ProcessPoolExecutor(workers, mp_context=get_context("spawn"))  # CPU estimates beside the GPU's work
    futures = {case: pool.submit(_estimate_peak, case) for case in CASES}
    try:
        snap = report.out / "memory_snapshot.pickle"
        try:
            tracker = real_step(TRACKER_CASE, snapshot=snap)  # (a) and (c)
            loaded = pickle.loads(snap.read_bytes())
            sec["snapshot"] = {
                "path": str(snap),
                "bytes": snap.stat().st_size,
                "segments": len(loaded.get("segments", [])),
                "loads": bool(loaded.get("segments")),
            }
        except Exception as exc:  # recorded; (b) still runs
            tracker = _error(exc)
        sec["tracker_vs_allocator"] = {"case": TRACKER_CASE, **tracker}
        report.save()
        for case in CASES:  # (b)
            row = {"model": case[0], "seq_len": case[1], "loss": case[2], "offload": case[3]}
            start = time.perf_counter()
            try:
                if _left(report, budget) < MIN_LEFT["measure"]:
                    row["skipped"] = f"budget: {_left(report, budget):.0f} s of {budget:.0f} left"
                else:
                    row["estimated_peak_gib"] = estimated = futures[case].result(timeout=max(1, _left(report, budget)))
                    if estimated > HEADROOM * capacity:
                        row["skipped"] = f"estimate {estimated:.1f} GiB is over {HEADROOM:.0%} of the card's {capacity:.1f} GiB"
                    else:
                        row.update(real_step(case))
                        if "allocator_peak_gib" in row:
                            row["estimate_over_allocator"] = estimated / row["allocator_peak_gib"]
            except Exception as exc:  # a Triton compile error, an estimate that failed: recorded, the next case runs
                row.update(_error(exc))
            row["seconds"] = round(time.perf_counter() - start, 1)
            print(json.dumps({k: v for k, v in row.items() if k != "where"}), flush=True)
            sec["estimates"].append(row)
            report.save()
    finally:
        running = list((pool._processes or {}).values())  # shutdown() forgets them
        pool.shutdown(wait=False, cancel_futures=True)
        for proc in running:  # an estimate still running is not waited for
            proc.kill()


def notebooks(report: Report, budget: float, only=tuple(NOTEBOOKS)) -> None:
    """(d): 00, 01, 03 at the gpu size on the local full-shape model, each through `longctx run` in its own
    process group with a time cap; a failure or a time-out is recorded and the next notebook runs."""
    sec = report.section
    sec["notebooks"] = results = {}
    folder = local_model(report.out, build_weights=True)
    report.save()
    for nb, overrides in NOTEBOOKS.items():
        if nb not in only:
            continue
        left = _left(report, budget)
        if left < MIN_LEFT["notebooks"]:
            results[nb] = {"status": "skipped", "reason": f"budget: {left:.0f} s of {budget:.0f} left"}
            report.save()
            continue
        params = [f"{k}={json.dumps(v)}" for k, v in {**overrides, "MODEL": str(folder)}.items()]
        command = [sys.executable, "-m", "longctx", "run", nb, "--size", "gpu", "--quiet", "--out", str(report.out / nb)]
        command += [arg for p in params for arg in ("-p", p)]
        start = time.perf_counter()
        cap = min(NOTEBOOK_CAP, left - 10)
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            output, _ = proc.communicate(timeout=cap)
            status = "ok" if proc.returncode == 0 else "error"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            output, _ = proc.communicate()
            status = f"timed out after {cap:.0f} s"
        row = results[nb] = {"status": status, "seconds": round(time.perf_counter() - start, 1)}
        if status != "ok":
            row["output"] = output[-2000:]
        res = report.out / nb / "results.json"
        if status == "ok" and res.exists():
            quoted = json.loads(res.read_text()).get("results", {})
            row.update({k: _dotted(quoted, k) for k in KEY_RESULTS[nb]})
        print(nb, json.dumps({k: v for k, v in row.items() if k != "output"}), flush=True)
        report.save()


def _dotted(results: dict, key: str):
    """results["a"]["b"] for "a.b" (None where absent)."""
    for part in key.split("."):
        results = results.get(part) if isinstance(results, dict) else None
    return results


KEY_RESULTS = {  # what the report quotes from each notebook's results.json ("a.b": a nested value)
    "00_memory_primer": (
        "full.dtype",
        "full.device",
        "full.exact",
        "lora.exact",
        "full.peak_mib",
        "trl_load_dtype",
        "overfit.best_checkpoint_weight_diff",
    ),
    "01_chunked_loss": (
        "model_dtype",
        "measured.plain.device",
        "measured.plain.peak_gib",
        "measured.chunked.peak_gib",
        "measured.plain.loss_value",
        "measured.chunked.loss_value",
    ),
    "03_activation_offload": (
        "measured.plain.device",
        "measured.plain.peak_gib",
        "measured.offload.peak_gib",
        "cpu.loss_abs_diff",
        "measured_seconds.False",
        "measured_seconds.True",
    ),
}


def _gib(row: dict, key: str) -> str:
    return f"{row[key]:.2f}" if isinstance(row.get(key), (int, float)) else "—"


def markdown(report: dict) -> str:
    v = report["versions"]
    lines = [
        f"# GPU check — {report.get('gpu', 'no GPU')}",
        "",
        f"{report['date']}; torch {v['torch']}, transformers {v['transformers']}, trl {v['trl']}, accelerate {v['accelerate']}.",
        "",
    ]
    for phase in ("dry-run", "measure", "notebooks", "time"):
        sec = report.get(phase)
        if not sec:
            continue
        state = "finished" if sec.get("finished") else "NOT finished (stopped, or still running)"
        lines += [f"## {phase} — {state}, {sec.get('seconds', 0):.0f} s", "", f"`{sec['command']}`", ""]
        if sec.get("error"):
            lines += [f"**phase error**: {sec['error']}", ""]
        if phase == "dry-run" and "built" in sec:
            lines += ["| model | loss | offload | fake peak at 1,024 tokens (GiB) |", "| --- | --- | --- | --- |"]
            lines += [f"| {b['model']} | {b['loss']} | {b['offload']} | {b['fake_peak_gib_at_1024']:.2f} |" for b in sec["built"]]
        if phase == "measure":
            t = sec.get("tracker_vs_allocator", {})
            if "allocator_peak_gib" in t:
                verdict = (
                    f"tracker {t['tracker_peak_gib']:.2f} GiB, allocator {t['allocator_peak_gib']:.2f} GiB, "
                    f"ratio {t['tracker_over_allocator']:.3f}"
                )
            else:
                verdict = t.get("oom") or t.get("error") or "not run"
            snap = sec.get("snapshot", {})
            lines += [
                f"**(a) tracker vs allocator** ({' '.join(map(str, t.get('case', ())))}): {verdict}",
                "",
                f"**(c) memory snapshot**: {snap.get('bytes', 0):,} bytes, {snap.get('segments', 0)} segments, "
                f"loads: {snap.get('loads', False)}",
                "",
                "**(b) estimate vs allocator**",
                "",
                "| model | tokens | loss | offload | estimate (GiB) | allocator (GiB) | estimate / allocator | note |",
                "| --- | --- | --- | --- | --- | --- | --- | --- |",
            ]
            for r in sec.get("estimates", []):
                ratio = f"{r['estimate_over_allocator']:.3f}" if "estimate_over_allocator" in r else "—"
                note = r.get("skipped") or r.get("oom") or r.get("error") or ""
                lines.append(
                    f"| {r['model']} | {r['seq_len']:,} | {r['loss']} | {r['offload']} | {_gib(r, 'estimated_peak_gib')} | "
                    f"{_gib(r, 'allocator_peak_gib')} | {ratio} | {note[:120]} |"
                )
        if phase == "time":
            lines += [
                f"**(e) step time, predicted (the time model on {sec.get('card')}) and measured**",
                "",
                "| model | tokens | levers | predicted (s) | measured (s) | predicted / measured | note |",
                "| --- | --- | --- | --- | --- | --- | --- |",
            ]
            for r in sec.get("steps", []):
                ratio = f"{r['predicted_over_measured']:.2f}" if "predicted_over_measured" in r else "—"
                note = r.get("skipped") or r.get("oom") or r.get("error") or ""
                lines.append(
                    f"| {r['model']} | {r['seq_len']:,} | {r['levers'] or 'chunked'} | {_gib(r, 'predicted_seconds')} | "
                    f"{_gib(r, 'measured_seconds')} | {ratio} | {note[:120]} |"
                )
        if phase == "notebooks":
            lines += ["**(d) notebooks at the gpu size** (full-shape random-weight Qwen3-0.6B)", ""]
            lines += [
                f"- `{nb}`: {json.dumps({k: v for k, v in r.items() if k != 'output'})}"
                for nb, r in sec.get("notebooks", {}).items()
            ]
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("phase", choices=sorted(BUDGETS), help="measure: (a)(b)(c); notebooks: (d); time: (e); dry-run: no GPU")
    ap.add_argument("--out", default=None, help="folder for the reports and everything heavy (default build/gpu_check/)")
    ap.add_argument("--budget", type=float, default=None, help="seconds this phase may take (default: see BUDGETS)")
    ap.add_argument("--only", nargs="+", choices=list(NOTEBOOKS), default=list(NOTEBOOKS), help="notebooks: run these")
    ap.add_argument("--report-to", default=os.environ.get("OUT"), help="copy only the report files here (default $OUT)")
    args = ap.parse_args(argv)
    out = Path(args.out or build_dir() / "gpu_check").resolve()
    out.mkdir(parents=True, exist_ok=True)
    report_to = Path(args.report_to).resolve() if args.report_to else None
    if report_to == out:
        report_to = None
    if args.phase != "dry-run":
        import torch

        if not torch.cuda.is_available():
            print("gpu_check: error: this phase needs a CUDA GPU; on this machine run `gpu_check.py dry-run`.", file=sys.stderr)
            return 2
    given = argv if argv is not None else sys.argv[1:]
    report = Report(out, args.phase, report_to, " ".join(["python benchmarks/gpu_check.py", *given]))
    budget = args.budget or BUDGETS[args.phase]
    try:
        report.section["checked"] = check_inputs(out)
        report.save()
        if args.phase == "dry-run":
            dry_run(report)
        else:
            phases = {"measure": measure, "time": time_steps}
            phases[args.phase](report, budget) if args.phase in phases else notebooks(report, budget, args.only)
        report.section["finished"] = True
    except LongctxError as exc:
        print(f"gpu_check: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # recorded in the report; what was measured before it stays
        report.section.update(_error(exc))
        traceback.print_exc()
    finally:
        report.save()
    print(markdown(report.data))
    print(f"→ {out / REPORT[0]}, {out / REPORT[1]}" + (f" (copied to {report_to})" if report_to else ""))
    return 0 if report.section["finished"] else 1


if __name__ == "__main__":
    sys.exit(main())
