"""Benchmark of the memory tools, measured in one run on this machine (ratios, not limits):

  * estimator wall time for Qwen3-4B at 98,304 tokens (target: under 60 s on 2 cores);
  * MemTracker overhead: a tracked CPU training step's time over the same step untracked (target ≤ 1.2×);
  * estimate / measured peak on the same small step, for each loss and checkpointing setting.

Run: .venv/bin/python benchmarks/memory_tools.py
"""

import time

import torch

from longctx import models
from longctx.memory.estimate import build_step, estimate
from longctx.memory.measure import TimelineTracker


def tracker_overhead(model="small", seq_len=2048, repeats=5) -> float:
    cfg = models.config(model)
    net, optimizer, step = build_step(cfg, seq_len, loss="chunked", checkpointing=True)
    step()  # warm-up

    def timed(tracked: bool) -> float:
        best = float("inf")
        for _ in range(repeats):
            optimizer.zero_grad(set_to_none=True)
            start = time.perf_counter()
            if tracked:
                tracker = TimelineTracker("cpu")
                tracker.track_external(net, optimizer)
                with tracker:
                    step()
            else:
                step()
            best = min(best, time.perf_counter() - start)
        return best

    plain, tracked = timed(False), timed(True)
    return tracked / plain


def main() -> None:
    torch.manual_seed(0)
    start = time.perf_counter()
    p = estimate("qwen3-4b", 98304)
    print(
        f"estimator, qwen3-4b at 98,304 tokens: {time.perf_counter() - start:.1f} s wall "
        f"(peak {p.peak_gib:.2f} GiB; target < 60 s)"
    )
    # The tracker's cost is per operator: large operators (notebook 01's step) hide it, tiny ones do not.
    for model in ("tiny-qwen-vocab", "small"):
        print(f"MemTracker overhead, '{model}' CPU step at 2,048 tokens: {tracker_overhead(model):.2f}× (target ≤ 1.2×)")
    for loss in ("chunked", "plain"):
        for ckpt in (True, False):
            fake = estimate("small", 1024, loss=loss, checkpointing=ckpt, dtype="fp32")
            real = estimate("small", 1024, loss=loss, checkpointing=ckpt, dtype="fp32", fake=False)
            print(
                f"estimate/measured peak, small, 1,024 tokens, {loss:7s} loss, checkpointing {ckpt!s:5s}: "
                f"{fake.peak_bytes / real.peak_bytes:.4f}"
            )


if __name__ == "__main__":
    main()
