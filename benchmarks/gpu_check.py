"""Prepared GPU check (one H200 or any 80 GB+ card, under 8 minutes): real CUDA peaks for Qwen3-4B with
random weights next to the estimator's numbers, written to one JSON.

    python benchmarks/gpu_check.py --out gpu_check.json [--lengths 8192,32768,65536]

For each length and setting it runs one real step (bf16, AdamW, checkpointing; chunked or plain loss;
offload on or off) under `longctx.memory.measure` (MemTracker + the CUDA allocator's peak), then the
fake-tensor estimate of the same step. An out-of-memory step is recorded, not raised.
"""

import argparse
import json
import time

import torch

from longctx import versions
from longctx.memory.estimate import DTYPES, build_step, estimate
from longctx.memory.measure import measure
from longctx import models

SETTINGS = [("chunked", False), ("plain", False), ("chunked", True)]


def real_step(model: str, seq_len: int, loss: str, offload: bool) -> dict:
    cfg = models.config(model)
    torch.set_default_dtype(DTYPES["bf16"])
    try:
        with torch.device("cuda"):
            net, optimizer, step = build_step(cfg, seq_len, loss=loss, checkpointing=True, offload=False)
        if offload:  # the real transformers path: save_on_cpu around each checkpointed layer
            net.activation_checkpointing_enable(offload=True)
        profile = measure(step, model=net, optimizer=optimizer, device="cuda")
        return {"measured_peak_gib": profile.meta["allocator_peak_gib"], "tracker_peak_gib": profile.peak_gib}
    except torch.cuda.OutOfMemoryError as exc:
        return {"oom": str(exc).splitlines()[0]}
    finally:
        torch.set_default_dtype(torch.float32)
        torch.cuda.empty_cache()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="qwen3-4b")
    parser.add_argument("--lengths", default="8192,32768,65536,98304")
    parser.add_argument("--out", default="gpu_check.json")
    args = parser.parse_args()
    rows = []
    for seq_len in (int(x) for x in args.lengths.split(",")):
        for loss, offload in SETTINGS:
            start = time.perf_counter()
            row = {"seq_len": seq_len, "loss": loss, "offload": offload, **real_step(args.model, seq_len, loss, offload)}
            row["estimated_peak_gib"] = estimate(args.model, seq_len, loss=loss, offload=offload).peak_gib
            if "measured_peak_gib" in row:
                row["estimate_over_measured"] = row["estimated_peak_gib"] / row["measured_peak_gib"]
            row["seconds"] = time.perf_counter() - start
            print(json.dumps(row), flush=True)
            rows.append(row)
    with open(args.out, "w") as f:
        json.dump({"model": args.model, "versions": versions(), "gpu": torch.cuda.get_device_name(), "rows": rows},
                  f, indent=2)


if __name__ == "__main__":
    main()
