"""`longctx plan`: add the long-context levers one at a time and estimate each step's per-GPU peak.

The levers in order of cost: the chunked loss (free), gradient checkpointing (recomputes the forward
pass), activation offload (host traffic), then context parallelism over 2, 4, ... GPUs (more GPUs).
The first step that fits is the cheapest combination. Every step is a fake-tensor estimate
(`longctx.memory.estimate`): per rank under CP, with FSDP2 sharding and the ring's buffers.
"""

from __future__ import annotations

import math

from longctx import children, models
from longctx.errors import LongctxError, check_positive_int
from longctx.shapes import check_plan
from longctx.units import GIB


def steps_for(gpus: int) -> list[tuple[list[str], dict]]:
    """(levers, estimate keyword arguments) for each step, cheapest first."""
    base = [
        (["plain loss"], dict(loss="plain", checkpointing=False)),
        (["chunked loss"], dict(loss="chunked", checkpointing=False)),
        (["chunked loss", "checkpointing"], dict(loss="chunked", checkpointing=True)),
        (["chunked loss", "checkpointing", "offload"], dict(loss="chunked", checkpointing=True, offload=True)),
    ]
    cp, n = [], 2
    while n <= gpus:
        cp.append((base[-1][0] + [f"context parallel ×{n}"], dict(base[-1][1], cp_size=n)))
        n *= 2
    return base + cp


def check(cfg, seq_len: int, gpus: int, gpu_memory_gib: float, attn: str = "sdpa") -> None:
    check_positive_int("seq_len", seq_len)
    check_positive_int("gpus", gpus)
    if gpus & (gpus - 1):
        lower = 1 << (gpus.bit_length() - 1)
        raise LongctxError(
            f"gpus (--gpus) {gpus}: the plan splits the sequence over a power of two of GPUs (the CP meshes "
            f"it models); use --gpus {lower} (or {lower * 2})."
        )
    if not (isinstance(gpu_memory_gib, (int, float)) and math.isfinite(gpu_memory_gib) and gpu_memory_gib > 0):
        raise LongctxError(f"gpu_memory_gib (--gpu) must be a positive number of GiB, got {gpu_memory_gib!r}.")
    if gpus > 1:
        check_plan(cfg, seq_len, cp_size=gpus)  # the largest CP step: length multiple, attention kinds
    from longctx.memory.estimate import check_levers

    check_levers(  # the model, the length, the attention
        cfg, seq_len, loss="plain", checkpointing=False, offload=False, dtype="bf16", batch=1, attn_implementation=attn
    )


def _estimate(args):
    model, seq_len, kwargs = args
    from longctx.memory.estimate import estimate

    profile = estimate(model, seq_len, **kwargs)
    return profile.peak_gib, profile.meta["wall_seconds"]


def plan(
    model,
    seq_len: int,
    *,
    gpus: int,
    gpu_memory_gib: float,
    mixed_precision: bool = False,
    attn_implementation: str = "sdpa",
    exact: bool = False,
    workers: int = 2,
    progress: bool = True,
) -> dict:
    """Every step's per-GPU peak and whether it fits `gpu_memory_gib`; `cheapest` is the first that fits.
    `model` is a preset name or a config.json path (any family transformers knows). `mixed_precision`
    applies to the CP steps (FSDP2 with fp32 master weights, as accelerate's `mixed_precision: bf16`);
    `attn_implementation` to the one-GPU steps (torch's context parallelism runs SDPA only)."""
    from tqdm.auto import tqdm

    from longctx.memory import cards

    cfg = models.config(model)
    check(cfg, seq_len, gpus, gpu_memory_gib, attn_implementation)
    steps = steps_for(gpus)
    calls = []
    for _, kw in steps:
        cp = kw.get("cp_size", 1) > 1
        calls.append(
            (
                model,
                seq_len,
                dict(
                    kw,
                    mixed_precision=mixed_precision and cp,
                    attn_implementation="sdpa" if cp else attn_implementation,
                    exact=exact,
                ),
            )
        )
    results = children.pool_map(_estimate, calls, workers, tqdm(total=len(calls), desc="plan: estimates", disable=not progress))
    rows = [
        {
            "levers": levers,
            "per_gpu_peak_gib": peak,
            "fits": peak <= gpu_memory_gib,
            "estimate_seconds": secs,
            "gpus": kw.get("cp_size", 1),
        }
        for (levers, kw), (peak, secs) in zip(steps, results)
    ]
    cheapest = next((r for r in rows if r["fits"]), None)
    return {
        "model": model,
        "seq_len": seq_len,
        "gpus": gpus,
        "gpu_memory_gib": gpu_memory_gib,
        "mixed_precision": mixed_precision,
        "attn_implementation": attn_implementation,
        "steps": rows,
        "cheapest": cheapest,
        "not_counted": cards.unmodelled(max(r["gpus"] for r in rows)),
    }


def table(result: dict) -> str:
    """The plan as lines of text: one per step, then the cheapest step that fits (what `longctx plan` prints)."""
    lines = [
        f"{result['model']} at {result['seq_len']:,} tokens, up to {result['gpus']} GPU(s) of {result['gpu_memory_gib']:g} GiB:"
    ]
    for step in result["steps"]:
        lines.append(
            f"  {step['per_gpu_peak_gib']:9.1f} GiB per GPU  {'fits' if step['fits'] else 'over':4s}  "
            f"{' + '.join(step['levers'])}"
        )
    cheapest = result["cheapest"]
    lines.append(
        f"cheapest that fits: {' + '.join(cheapest['levers'])} ({cheapest['per_gpu_peak_gib']:.1f} GiB per GPU)"
        if cheapest
        else f"nothing fits on {result['gpus']} GPU(s) of {result['gpu_memory_gib']:g} GiB: more GPUs or memory"
    )
    if result.get("capacity"):
        lines.append(f"capacity: {result['capacity']}")
    lines += [f"  not counted: {term}" for term in result.get("not_counted", [])]
    return "\n".join(lines)


def naive_saved_inputs_gib(cfg, seq_len: int, dtype_bytes: int = 2) -> float:
    """The guide's "naive" per-GPU figure: one saved `seq × hidden` input per layer (checkpointing), on one GPU."""
    return cfg.num_hidden_layers * seq_len * cfg.hidden_size * dtype_bytes / GIB


def short_label(levers: list[str]) -> str:
    """'chunked loss + checkpointing + offload + context parallel ×8' → '+CP×8' (the lever a step adds)."""
    last = levers[-1]
    short = {"plain loss": "naive", "chunked loss": "chunked", "checkpointing": "+ckpt", "offload": "+offload"}
    return short.get(last, "+CP" + last.split()[-1] if last.startswith("context parallel") else last)
