"""`longctx plan`: add the long-context levers one at a time and estimate each step's per-GPU peak and its time."""

import threading

from tqdm.auto import tqdm

from longctx import children, models
from longctx.errors import LongctxError, is_power_of_two
from longctx.memory import cards, timing
from longctx.memory.estimate import check_levers, estimate
from longctx.shapes import MAX_CP, check_plan
from longctx.units import GIB


def check(cfg, seq_len: int, gpus: int, gpu_memory_gib: float, attn: str = "sdpa", mixed_precision=False) -> float:
    """Refuse, before minutes of estimates, what only the plan knows (its GPUs), then what its largest CP step and its
    estimates would refuse; return the GPU memory in GiB (cards.capacity: a positive number, or a card's name)."""
    if isinstance(gpus, int) and gpus > MAX_CP:  # before the power-of-two advice, which would be as far out
        raise LongctxError(f"--gpus {gpus}: longctx models CP over at most {MAX_CP} GPUs; use --gpus {MAX_CP} or fewer.")
    if not is_power_of_two(gpus):
        lower = 1 << max(gpus.bit_length() - 1, 0) if isinstance(gpus, int) else 1
        raise LongctxError(
            f"gpus (--gpus) {gpus!r}: the plan splits the sequence over a power of two of GPUs (the CP meshes "
            f"it models); use --gpus {lower} (or {lower * 2})."
        )
    gib, _ = cards.capacity(gpu_memory_gib)
    if mixed_precision and gpus == 1:
        raise LongctxError("mixed precision applies to the plan's CP steps (FSDP2), and one GPU has none: --gpus 2 or more.")
    if gpus > 1:
        check_plan(cfg, seq_len, cp_size=gpus)  # the largest CP step: length multiple, attention kinds
    check_levers(cfg, seq_len, loss="plain", checkpointing=False, offload=False, dtype="bf16", batch=1, device="cuda",
                 attn_implementation=attn)  # the plan prices GPU steps  # fmt: skip
    return gib


def _estimate(args):
    """One step's peak and time; where SDPA runs on one GPU, also its time with FlashAttention-2's kernel (SDPA's flash
    backend, or the flash-attn package: the same kernel, the same FLOPs), the other choice a script has there."""
    model, seq_len, kwargs, card, sdpa = args
    profile = estimate(model, seq_len, **kwargs)
    time = timing.step_time(profile, card, sdpa=sdpa)
    sdpa_alone = kwargs.get("attn_implementation", "sdpa") == "sdpa" and kwargs.get("cp_size", 1) == 1
    flash = timing.step_time(profile, card, sdpa="flash")["seconds"] if sdpa_alone else None
    return {"per_gpu_peak_gib": profile.peak_gib, "estimate_seconds": profile.meta["wall_seconds"], "step_seconds":
            time["seconds"], "tokens_per_second": time["tokens_per_second"], "flash_attention_2_seconds": flash,
            "attention": timing.kernel_names(time)}  # fmt: skip


def ladder(
    gpus: int, *, mixed_precision=False, attn_implementation="sdpa", tiled_mlp=False, host_state=False, exact=False
) -> list:
    """The plan's steps, cheapest first: (the levers on, `estimate`'s keyword arguments), one step per added lever."""
    one_gpu = dict(attn_implementation=attn_implementation, exact=exact)
    offload = dict(one_gpu, loss="chunked", checkpointing=True, offload=True)
    steps = [
        (["plain loss"], dict(one_gpu, loss="plain", checkpointing=False)),
        (["chunked loss"], dict(one_gpu, loss="chunked", checkpointing=False)),
        (["chunked loss", "checkpointing"], dict(one_gpu, loss="chunked", checkpointing=True)),
        (["chunked loss", "checkpointing", "offload"], offload),
    ]
    if tiled_mlp:
        steps.append((steps[3][0] + ["tiled MLP"], dict(offload, tiled_mlp=True)))
    if gpus > 1 and attn_implementation != "sdpa":  # torch's CP runs SDPA only: switching to it is a step of its own
        steps.append((steps[-1][0] + ["SDPA attention"], dict(steps[-1][1], attn_implementation="sdpa")))
    cp = dict(steps[-1][1], mixed_precision=mixed_precision)
    before_cp = steps[-1][0]
    if host_state:
        host = (("optimizer on host", "offload_optimizer"), ("weights on host", "offload_params"), ("fused norm", "fused_norm"))
        for label, lever in host:
            steps.append((steps[-1][0] + [label], dict(steps[-1][1], **{lever: True})))
    return steps + [(before_cp + [f"context parallel ×{2**k}"], dict(cp, cp_size=2**k)) for k in range(1, gpus.bit_length())]


def plan(
    model,
    seq_len: int,
    *,
    gpus: int,
    gpu_memory_gib: float,
    mixed_precision: bool = False,
    attn_implementation: str = "sdpa",
    tiled_mlp: bool = False,
    host_state: bool = False,
    exact: bool = False,
    workers: int = 2,
    progress: bool = True,
    sdpa_backend: str | None = None,
) -> dict:
    """Every step's per-GPU peak and whether it fits `gpu_memory_gib`; `cheapest` is the first that fits. `model` is a
    preset name or a config.json path (any family transformers knows)."""
    gib = check(models.config(model), seq_len, gpus, gpu_memory_gib, attn_implementation, mixed_precision)
    card = cards.card(gpu_memory_gib).name if cards.card(gpu_memory_gib) else cards.DEFAULT
    steps = ladder(
        gpus, mixed_precision=mixed_precision, attn_implementation=attn_implementation, tiled_mlp=tiled_mlp,
        host_state=host_state, exact=exact,
    )  # fmt: skip
    # forked workers start with this process's imports (3 s each when spawned); fake tensors run no kernels, but only
    # a process of one thread forks safely (a Jupyter kernel has several: its output streams), so check before tqdm's
    start = "fork" if threading.active_count() == 1 else "spawn"
    bar = tqdm(total=len(steps), desc="plan: estimates", disable=not progress)
    # the longest estimates (the most CP ranks) first, so that no worker is left alone with one at the end
    order = sorted(range(len(steps)), key=lambda i: -steps[i][1].get("cp_size", 1))
    done = children.pool_map(
        _estimate, [(model, seq_len, steps[i][1], card, sdpa_backend) for i in order], workers, bar, start=start
    )
    results = [done[order.index(i)] for i in range(len(steps))]
    rows = [{"levers": levers, "gpus": kw.get("cp_size", 1), **r, "fits": r["per_gpu_peak_gib"] <= gib}
            for (levers, kw), r in zip(steps, results)]  # fmt: skip
    fitting = [r for r in rows if r["fits"]]
    return {
        "model": model,
        "seq_len": seq_len,
        "gpus": gpus,
        "gpu_memory_gib": gib,
        "mixed_precision": mixed_precision,
        "attn_implementation": attn_implementation,
        "tiled_mlp": tiled_mlp,
        "host_state": host_state,
        "steps": rows,
        "cheapest": fitting[0] if fitting else None,
        "fastest": min(fitting, key=lambda r: r["step_seconds"]) if fitting else None,
        "time_card": card,
        "not_counted": cards.unmodelled(gpus),
    }


def table(result: dict) -> str:
    """The plan as lines of text: one per step, then the cheapest step that fits (what `longctx plan` prints)."""
    gpus, gib, cheapest = result["gpus"], result["gpu_memory_gib"], result["cheapest"]
    lines = [f"{result['model']} at {result['seq_len']:,} tokens, up to {gpus} GPU(s) of {gib:g} GiB "
             f"(times on {result.get('time_card', cards.DEFAULT)}):"]  # fmt: skip
    kernels_seen = dict.fromkeys(step.get("attention") for step in result["steps"] if step.get("attention"))
    for step in result["steps"]:
        verdict = "fits" if step["fits"] else "over"
        time = f"{step['step_seconds']:9.1f} s/step" if "step_seconds" in step else ""
        if step.get("flash_attention_2_seconds") and step["flash_attention_2_seconds"] != step["step_seconds"]:
            time += f" (FlashAttention-2: {step['flash_attention_2_seconds']:.1f} s)"
        lines.append(f"  {step['per_gpu_peak_gib']:9.1f} GiB per GPU  {verdict:4s} {time}  {' + '.join(step['levers'])}")
    lines += [f"  attention priced as {kernel}" for kernel in kernels_seen]
    lines.append(
        f"cheapest that fits: {' + '.join(cheapest['levers'])} ({cheapest['per_gpu_peak_gib']:.1f} GiB per GPU)"
        if cheapest
        else f"nothing fits on {gpus} GPU(s) of {gib:g} GiB: more GPUs or memory"
    )
    if fastest := result.get("fastest"):
        lines.append(f"fastest that fits: {' + '.join(fastest['levers'])} ({fastest['step_seconds']:.1f} s per step on "
                     f"{fastest['gpus']} GPU(s), {fastest['tokens_per_second']:,.0f} tokens/s)")  # fmt: skip
        fitting = sorted((r for r in result["steps"] if r["fits"]), key=lambda r: r["step_seconds"])
        runs = "; ".join(
            f"{short_label(r['levers'])} {r['step_seconds']:.1f} s ({r['step_seconds'] * r['gpus']:.0f})" for r in fitting
        )
        lines.append(f"  fitting, fastest first (and GPU-seconds per step): {runs}")
    if result.get("host_state"):
        lines.append(f"  the optimizer's step on the host priced at {timing.HOST_ADAM_SOURCE}")
    if result.get("capacity"):
        lines.append(f"capacity: {result['capacity']}")
    return "\n".join(lines + [f"  not counted: {term}" for term in result.get("not_counted", [])])


def naive_saved_inputs_gib(cfg, seq_len: int, dtype_bytes: int = 2) -> float:
    """The guide's "naive" per-GPU figure: one saved `seq × hidden` input per layer (checkpointing), on one GPU."""
    return cfg.num_hidden_layers * seq_len * cfg.hidden_size * dtype_bytes / GIB


def short_label(levers: list[str]) -> str:
    """'chunked loss + checkpointing + offload + context parallel ×8' → '+CP×8' (the lever a step adds)."""
    last = levers[-1]
    short = {"plain loss": "no levers", "chunked loss": "chunked", "checkpointing": "+ckpt", "offload": "+offload"}
    short["tiled MLP"] = "+tiled"
    return short.get(last, "+CP" + last.split()[-1] if last.startswith("context parallel") else last)
