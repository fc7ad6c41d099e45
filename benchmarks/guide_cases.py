"""The estimator on the guide's measured cases, GPU step (device="cuda") beside CPU step (device="cpu").

The guide is the TRL documentation page "Training Beyond 1M Tokens"
(huggingface.co/docs/trl/en/long_context_training); its numbers are peaks measured on 80 GB GPUs, in GB as
the page prints them. Each row prints our estimate for both kernel sets and its ratio to the guide's number;
the reach rows give the longest length (a multiple of 1,024) whose estimated peak fits 80 GiB. The held-out row
is a step whose peak is where the kernel sets differ (the loss head).

Run: .venv/bin/python benchmarks/guide_cases.py   (about 10 minutes on 2 cores)
"""

import time

from longctx import guide
from longctx.memory.estimate import estimate, reach
from longctx.models import LLAMA_3_2_1B

CASES = [  # label, model, tokens, levers, the guide's peak (GB)
    ("Qwen3-4B 96k, chunked + ckpt", "qwen3-4b", 98304, {}, guide.QWEN3_4B_96K.value),
    ("+ offload", "qwen3-4b", 98304, {"offload": True}, guide.QWEN3_4B_96K_OFFLOAD.value),
    ("Qwen3-4B 1M, CP4 + offload", "qwen3-4b", 1048576, {"cp_size": 4, "offload": True}, guide.QWEN3_4B_1M_CP4.value),
    (
        "Qwen3-8B 1M, CP8 + offload, mixed prec.",
        "qwen3-8b",
        1048576,
        {"cp_size": 8, "offload": True, "mixed_precision": True},
        guide.QWEN3_8B_1M_CP8.value,
    ),
]
REACH = [("reach, chunked", {}, guide.REACH_CHUNKED.value), ("reach, offload", {"offload": True}, guide.REACH_OFFLOAD.value)]


def _llama_3_2_1b():
    from transformers import LlamaConfig

    return LlamaConfig(**LLAMA_3_2_1B)


# Where the two kernel sets part: a peak at the loss head (short sequence, large vocabulary: the CPU's fp32 tile
# temporaries); no guide number, the CPU's step beside the GPU's
HELD_OUT = [("Llama-3.2-1B shapes, 8k (head)", _llama_3_2_1b, 8192)]


def main() -> None:
    print(f"{'case':38s} {'guide':>7s} {'cuda':>8s} {'ratio':>6s} {'cpu':>8s} {'ratio':>6s}  seconds")
    for label, model, n, levers, reported in CASES:
        start = time.perf_counter()
        gpu, cpu = (estimate(model, n, device=d, **levers).peak_gib for d in ("cuda", "cpu"))
        print(
            f"{label:38s} {reported:7.1f} {gpu:8.2f} {gpu / reported:6.3f} {cpu:8.2f} {cpu / reported:6.3f}  "
            f"{time.perf_counter() - start:.0f}",
            flush=True,
        )
    for label, levers, reported in REACH:
        start = time.perf_counter()
        gpu, cpu = (reach("qwen3-4b", 80.0, device=d, **levers)["seq_len"] for d in ("cuda", "cpu"))
        print(
            f"{label:38s} {reported:7,d} {gpu:8,d} {gpu / reported:6.3f} {cpu:8,d} {cpu / reported:6.3f}  "
            f"{time.perf_counter() - start:.0f}",
            flush=True,
        )

    print(f"\n{'held out':38s} {'':7s} {'cuda':>8s} {'phase':>9s} {'cpu':>8s} {'phase':>9s}  cuda/cpu")
    for label, model, n in HELD_OUT:
        gpu, cpu = (estimate(model(), n, device=d) for d in ("cuda", "cpu"))
        print(
            f"{label:38s} {'':7s} {gpu.peak_gib:8.2f} {gpu.peak_phase:>9s} {cpu.peak_gib:8.2f} {cpu.peak_phase:>9s}  "
            f"{gpu.peak_gib / cpu.peak_gib:.3f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
