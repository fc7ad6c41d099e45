"""What the time model adds to an estimate, measured in one run on this machine: each case's fast estimate with every
operator's costs counted (memory/costs.py, as `estimate` always does) against the same estimate with the counting
replaced by a constant, then the pricing on a card (timing.step_time). The fastest of three runs of each.
Target (issue 42): the time model adds at most 0.5 s to an estimate.

    .venv/bin/python benchmarks/time_model_overhead.py
"""

import time
from unittest import mock

from longctx.memory import costs, timing
from longctx.memory.estimate import estimate

CASES = [
    ("qwen3-4b", 98304, {}),
    ("qwen3-8b", 1049008, dict(cp_size=8, offload=True)),
    ("qwen3-4b", 262144, dict(offload=True, tiled_mlp=True)),
]


def fastest(call, runs: int = 3):
    best, out = float("inf"), None
    for _ in range(runs):
        start = time.perf_counter()
        out = call()
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> None:
    estimate("tiny", 256)  # imports and first-call set-up, paid once per process
    zero = [0] * len(costs.COLUMNS)
    print(f"{'case':40s} {'with costs':>10s} {'without':>8s} {'added':>7s} {'pricing':>8s}  ratio")
    for model, seq_len, levers in CASES:
        with_costs, profile = fastest(lambda: estimate(model, seq_len, **levers))
        with mock.patch.object(costs, "of_op", lambda *a, **k: list(zero)):
            without, _ = fastest(lambda: estimate(model, seq_len, **levers))
        pricing, _ = fastest(lambda: timing.step_time(profile))
        added = with_costs - without + pricing
        name = f"{model} {seq_len:,}" + "".join(f" {k}={v}" for k, v in levers.items())
        ratio = with_costs / without
        print(f"{name:40s} {with_costs:9.2f}s {without:7.2f}s {added:6.2f}s {pricing:7.3f}s  {ratio:.2f}×", flush=True)


if __name__ == "__main__":
    main()
