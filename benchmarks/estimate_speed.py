"""How fast the estimator is, and what the fast path costs in accuracy, measured in one run on this machine.

For each case: the fast estimate (3 and 4 layers traced, extended to the model's depth; memory/repeat.py), the full
trace (`exact=True`), the speed-up, and the largest difference between the two timelines relative to the peak; then
`longctx plan --model qwen3-8b --seq-len 1M --gpus 8` in a fresh process (imports included, as a user runs it).
A context-parallel step and a tiled MLP take the fast path too.
Targets (issue 30): a single estimate ≤ 3 s, the plan ≤ 15 s, every difference ≤ 0.1%.

Run on an idle machine: .venv/bin/python benchmarks/estimate_speed.py
"""

import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from longctx.memory.estimate import estimate

CASES = [
    ("qwen3-4b", 8192, {}),
    ("qwen3-4b", 131072, {}),
    ("qwen3-4b", 1048576, {}),
    ("qwen3-4b", 1048576, dict(offload=True)),
    ("qwen3-8b", 1048576, dict(cp_size=8, mixed_precision=True, offload=True)),
    ("qwen3-4b", 262144, dict(offload=True, tiled_mlp=True)),
]


def timed(**kwargs):
    start = time.perf_counter()
    profile = estimate(**kwargs)
    return profile, time.perf_counter() - start


def main() -> None:
    estimate("tiny", 256)  # the imports and first-call set-up, paid once per process
    print(f"{'case':44s} {'fast s':>7s} {'exact s':>8s} {'speed-up':>8s} {'max diff':>9s} {'peak diff':>9s}  peak GiB  method")
    for model, seq_len, levers in CASES:
        fast, t_fast = timed(model=model, seq_len=seq_len, **levers)
        exact, t_exact = timed(model=model, seq_len=seq_len, exact=True, **levers)
        # the largest difference of any row relative to the peak (n/a: the two timelines have different lengths)
        same_shape = fast.timeline.shape == exact.timeline.shape
        diff = f"{np.abs(fast.timeline - exact.timeline).max() / exact.peak_bytes:9.1e}" if same_shape else f"{'n/a':>9s}"
        peak_diff = abs(fast.peak_bytes / exact.peak_bytes - 1)
        name = f"{model} {seq_len:,}" + "".join(f" {k}={v}" for k, v in levers.items())
        print(
            f"{name:44s} {t_fast:7.2f} {t_exact:8.2f} {t_exact / t_fast:7.1f}× {diff} {peak_diff:9.1e}  {fast.peak_gib:8.2f}  "
            f"{fast.meta['method']}",
            flush=True,
        )
    cli = Path(sys.executable).with_name("longctx")
    start = time.perf_counter()
    subprocess.run([str(cli), "plan", "--model", "qwen3-8b", "--seq-len", "1M", "--gpus", "8"], check=True, capture_output=True)
    print(f"longctx plan --model qwen3-8b --seq-len 1M --gpus 8: {time.perf_counter() - start:.1f} s (a fresh process)")


if __name__ == "__main__":
    main()
