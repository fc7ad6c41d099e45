"""What each lever costs in time, from the time model (longctx/memory/timing.py), for the README's table of levers:
one reference step (the guide's Qwen3-4B profile: 98,304 tokens, bf16, on an H100) with and without each lever.
tests/test_timing.py holds the README's numbers to what this prints.

    .venv/bin/python scripts/lever_costs.py
"""

from longctx.memory import timing
from longctx.memory.estimate import estimate

MODEL, TOKENS, CARD = "qwen3-4b", 98304, "H100-80GB"
BASE = dict(loss="chunked", checkpointing=True)  # the guide's profile: chunked loss, checkpointing


def seconds(**levers) -> dict:
    return timing.step_time(estimate(MODEL, TOKENS, **{**BASE, **levers}), CARD)


def costs() -> dict[str, str]:
    """Each lever's cost as the README's table states it: the step's time with the lever on over the same step without."""
    base = seconds()
    t = base["seconds"]

    def pct(on: float, off: float) -> str:
        change = on / off - 1
        return f"{change:+.1%}" if abs(change) < 0.05 else f"{change:+.0%}"

    plain, no_ckpt = seconds(loss="plain")["seconds"], seconds(checkpointing=False)["seconds"]
    offload, tiled = seconds(offload=True)["seconds"], seconds(tiled_mlp=True)["seconds"]
    recompute, cp4 = base["breakdown_seconds"]["recomputation"] / t, seconds(cp_size=4)
    exposed = cp4["breakdown_seconds"]["communication"] / cp4["seconds"]
    eager = seconds(attn_implementation="eager")["seconds"] / t
    fa2 = seconds(attn_implementation="flash_attention_2")["seconds"] / t  # SDPA on Hopper: cuDNN's kernel
    host = seconds(offload_optimizer=True, offload_params=True)["seconds"]
    return {
        "chunked loss": f"{pct(t, plain)} step time: the head's second pass costs what moving the full logits did",
        "checkpointing": f"one extra forward per step: {pct(t, no_ckpt)} step time",
        "offload": f"host memory, link traffic: {pct(offload, t)} step time (copies on the compute stream)",
        "context parallelism": f"`N` GPUs: {t / cp4['seconds']:.1f}× faster on 4 (communication exposed: {exposed:.2%} of it)",
        "tiled MLP": f"one more MLP forward per layer: {pct(tiled, t)} step time",
        "attention kernel": f"nothing in memory; in time its rate: FlashAttention-2 {fa2:.2f}× SDPA's cuDNN kernel, eager's "
        f"`L × L` scores {eager:.1f}×",
        "host state": f"every weight over the link each step, the optimizer step on the host: {pct(host, t)} step time",
        "fewer checkpointed layers": f"the activations of the layers left out; every other layer: −{recompute / 2:.0%} step time",
    }


def main() -> None:
    print(f"{MODEL}, {TOKENS:,} tokens, {CARD}, the time model (fitted: {timing.EFFICIENCY['hopper'].fitted_to}):")
    for lever, cost in costs().items():
        print(f"  {lever:26s} {cost}")


if __name__ == "__main__":
    main()
