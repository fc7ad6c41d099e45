"""The GPU validation command: on one card (an 80 GB H100/A100 or a 141 GB H200), in about 9 minutes,

  (a) one real training step measured twice, by the tracker (MemTracker) and by the CUDA caching
      allocator (`max_memory_allocated`), and their ratio;
  (b) `longctx estimate` against the allocator's peak for Qwen3-0.6B and Qwen3-4B (where the estimate
      fits the card) at two lengths each, chunked and plain loss, with and without activation offload;
  (c) a memory snapshot (`torch.cuda.memory._snapshot`, for pytorch.org/memory_viz) written and loaded back;
  (d) notebooks 00, 01 and 03 at their `gpu` size, on a full-shape Qwen3-0.6B with random weights saved
      here in hub format (no hub needed: random values measure memory as well as trained ones).

It writes gpu_check.json and gpu_check.md into --out (default build/gpu_check/). An out-of-memory step
is a recorded result. The fake-tensor estimates run in CPU processes while the GPU measures.

    python benchmarks/gpu_check.py [--out DIR] [--skip-notebooks]
    python benchmarks/gpu_check.py --dry-run      # any machine, no GPU: builds every step, checks every input
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pickle
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from tqdm.auto import tqdm

from longctx import LongctxError, data, harness, models, versions
from longctx.memory.estimate import DEFAULT_DTYPE, DTYPES, build_step, check_levers, estimate
from longctx.memory.profile import GIB
from longctx.paths import build_dir

# (model, tokens, loss, offload): every real step and its estimate
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
HEADROOM = 0.95  # a case whose estimate passes this share of the card is skipped, not run into OOM


def _estimate_peak(case) -> float:
    model, n, loss, off = case
    return estimate(model, n, loss=loss, offload=off).peak_gib


def real_step(case, snapshot: Path | None = None) -> dict:
    """One forward/loss/backward/AdamW step on the GPU, in bf16, with checkpointing (the estimate's step)."""
    import torch

    from longctx.memory.cuda import measure_cuda

    model, n, loss, off = case
    net = optimizer = step = None
    torch.set_default_dtype(DTYPES[DEFAULT_DTYPE])
    try:
        with torch.device("cuda"):  # with offload, checkpointing is turned on below, once, by transformers' own path
            net, optimizer, step = build_step(models.config(model), n, loss=loss, checkpointing=not off)
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


def check_inputs(out: Path) -> dict:
    """What a dry run checks: every case's levers, every notebook's parameters at the gpu size with the
    local model, the model folder's config and tokenizer loading back the way the notebooks load them."""
    from transformers import AutoConfig

    folder = local_model(out, build_weights=False)
    assert AutoConfig.from_pretrained(folder).num_hidden_layers == 28
    assert data.tokenizer_for(str(folder)).eos_token_id is not None
    for model, n, loss, off in CASES:
        check_levers(models.config(model), n, loss=loss, checkpointing=True, offload=off, dtype=DEFAULT_DTYPE, batch=1)
    for nb, overrides in NOTEBOOKS.items():
        path = harness.resolve(nb)
        # the folder holds a config only here; the real run saves the weights into it before any notebook
        harness.check_parameters(
            path, {**harness.size_params(path, "gpu"), **overrides, "MODEL": str(folder)}, "gpu", weights=False
        )
    return {"model_folder": str(folder), "cases": len(CASES), "notebooks": list(NOTEBOOKS)}


def dry_run(out: Path) -> dict:
    """Every step the GPU run would take, built and run on fake tensors at a short length (no GPU, no
    memory), and every input checked."""
    report = {"checked": check_inputs(out), "built": []}
    for model, _, loss, off in tqdm(sorted({(m, 0, lo, o) for m, _, lo, o in CASES}), desc="dry run: steps"):
        peak = estimate(model, 1024, loss=loss, offload=off).peak_gib
        report["built"].append({"model": model, "loss": loss, "offload": off, "fake_peak_gib_at_1024": peak})
    return report


def run(out: Path, skip_notebooks: bool) -> dict:
    import torch

    if not torch.cuda.is_available():
        raise LongctxError("gpu_check needs a CUDA GPU; on this machine run it with --dry-run.")
    capacity = torch.cuda.get_device_properties(0).total_memory / GIB
    report = {"gpu": torch.cuda.get_device_name(), "capacity_gib": capacity, "checked": check_inputs(out)}
    workers = max(1, min(8, (os.cpu_count() or 2) - 2))
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:  # CPU estimates beside GPU work
        futures = {case: pool.submit(_estimate_peak, case) for case in CASES}
        snap = out / "memory_snapshot.pickle"
        tracker = real_step(TRACKER_CASE, snapshot=snap)  # (a) and (c)
        loaded = pickle.loads(snap.read_bytes())
        report["tracker_vs_allocator"] = {"case": TRACKER_CASE, **tracker}
        report["snapshot"] = {
            "path": str(snap),
            "bytes": snap.stat().st_size,
            "segments": len(loaded.get("segments", [])),
            "loads": bool(loaded.get("segments")),
        }
        rows = []
        for case in tqdm(CASES, desc="real steps"):  # (b)
            start = time.perf_counter()
            estimated = futures[case].result()
            row = {"model": case[0], "seq_len": case[1], "loss": case[2], "offload": case[3], "estimated_peak_gib": estimated}
            if estimated > HEADROOM * capacity:
                row["skipped"] = f"estimate {estimated:.1f} GiB is over {HEADROOM:.0%} of the card's {capacity:.1f} GiB"
            else:
                row.update(real_step(case))
                if "allocator_peak_gib" in row:
                    row["estimate_over_allocator"] = estimated / row["allocator_peak_gib"]
            row["seconds"] = time.perf_counter() - start
            print(json.dumps(row), flush=True)
            rows.append(row)
        report["estimates"] = rows
    report["notebooks"] = {} if skip_notebooks else run_notebooks(out)
    return report


def run_notebooks(out: Path) -> dict:
    """(d): 00, 01, 03 at the gpu size on the local full-shape model; a failure is recorded with its error."""
    try:
        import papermill  # noqa: F401
    except ImportError:
        return {"skipped": "papermill is not installed here (carry the wheels listed in gpu_check.sh)"}
    folder = local_model(out, build_weights=True)
    results = {}
    for nb, overrides in NOTEBOOKS.items():
        start = time.perf_counter()
        try:
            r = harness.run(nb, "gpu", {**overrides, "MODEL": str(folder)}, out=out / nb, progress=False)
            res = r.results["results"]
            results[nb] = {"status": "ok", "seconds": r.seconds, **{k: res.get(k) for k in KEY_RESULTS[nb]}}
        except Exception as exc:  # recorded, the next notebook still runs
            results[nb] = {
                "status": "error",
                "error": f"{type(exc).__name__}: {exc}"[:2000],
                "seconds": time.perf_counter() - start,
            }
        print(nb, json.dumps(results[nb]), flush=True)
    return results


KEY_RESULTS = {  # what the report quotes from each notebook's results.json
    "00_memory_primer": (
        "model_dtype",
        "model_device",
        "full_exact",
        "lora_exact",
        "step_peak_mib",
        "best_checkpoint_weight_diff",
    ),
    "01_chunked_loss": (
        "model_dtype",
        "measured_device",
        "measured_peak_plain_mib",
        "measured_peak_chunked_mib",
        "measured_chunked_over_plain",
        "loss_abs_diff",
    ),
    "03_activation_offload": (
        "model_dtype",
        "measured_device",
        "cpu_peak_plain_mib",
        "cpu_peak_offload_mib",
        "cpu_loss_abs_diff",
        "seconds_per_step_no_offload",
        "seconds_per_step_offload",
    ),
}


def markdown(report: dict) -> str:
    v = report["versions"]
    lines = [
        f"# GPU check — {report.get('gpu', 'dry run')}",
        "",
        f"{report['date']}; torch {v['torch']}, transformers {v['transformers']}, trl {v['trl']}, "
        f"accelerate {v['accelerate']}; {report['seconds']:.0f} s. Command: `{report['command']}`",
        "",
    ]
    if report.get("dry_run"):
        lines += [
            "Dry run (no GPU): every step built on fake tensors at 1,024 tokens, every input checked.",
            "",
            "| model | loss | offload | fake peak at 1,024 tokens (GiB) |",
            "| --- | --- | --- | --- |",
        ]
        lines += [f"| {b['model']} | {b['loss']} | {b['offload']} | {b['fake_peak_gib_at_1024']:.2f} |" for b in report["built"]]
        return "\n".join(lines) + "\n"
    t = report["tracker_vs_allocator"]
    lines += [
        f"**(a) tracker vs allocator** ({' '.join(map(str, t['case']))}): "
        + (
            f"tracker {t['tracker_peak_gib']:.2f} GiB, allocator {t['allocator_peak_gib']:.2f} GiB, "
            f"ratio {t['tracker_over_allocator']:.3f}"
            if "oom" not in t
            else f"OOM: {t['oom']}"
        ),
        "",
        f"**(c) memory snapshot**: {report['snapshot']['bytes']:,} bytes, {report['snapshot']['segments']} "
        f"segments, loads: {report['snapshot']['loads']}",
        "",
        "**(b) estimate vs allocator**",
        "",
        "| model | tokens | loss | offload | estimate (GiB) | allocator (GiB) | estimate / allocator |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in report["estimates"]:
        measured = f"{r['allocator_peak_gib']:.2f}" if "allocator_peak_gib" in r else "OOM" if "oom" in r else "skipped"
        ratio = f"{r['estimate_over_allocator']:.3f}" if "estimate_over_allocator" in r else "—"
        lines.append(
            f"| {r['model']} | {r['seq_len']:,} | {r['loss']} | {r['offload']} | "
            f"{r['estimated_peak_gib']:.2f} | {measured} | {ratio} |"
        )
    lines += ["", "**(d) notebooks at the gpu size** (full-shape random-weight Qwen3-0.6B)", ""]
    for nb, r in report["notebooks"].items():
        lines.append(f"- `{nb}`: {json.dumps(r)}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="folder for gpu_check.json / .md (default build/gpu_check/)")
    ap.add_argument("--dry-run", action="store_true", help="no GPU: build every step on fake tensors, check inputs")
    ap.add_argument("--skip-notebooks", action="store_true", help="leave out (d)")
    args = ap.parse_args(argv)
    out = Path(args.out or build_dir() / "gpu_check")
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    try:
        report = dry_run(out) if args.dry_run else run(out, args.skip_notebooks)
    except LongctxError as exc:
        print(f"gpu_check: error: {exc}", file=sys.stderr)
        return 2
    except Exception:
        traceback.print_exc()
        return 1
    given = argv if argv is not None else sys.argv[1:]
    report.update(
        dry_run=args.dry_run,
        versions=versions(),
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        seconds=time.perf_counter() - start,
        command=" ".join(["python benchmarks/gpu_check.py", *given]),
    )
    (out / "gpu_check.json").write_text(json.dumps(report, indent=2, default=str))
    (out / "gpu_check.md").write_text(markdown(report))
    print(markdown(report))
    print(f"→ {out / 'gpu_check.json'}, {out / 'gpu_check.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
