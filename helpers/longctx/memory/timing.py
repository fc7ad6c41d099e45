"""A training step's time on a card, from what each operator of its traced step costs (memory/costs.py): the same
fake-tensor trace as the memory estimate, priced with the card's datasheet figures (memory/cards.py).

How compute, copies and communication combine, as the installed libraries run them:
- The kernels run on one stream, one after another. A matrix product takes its FLOPs at the card's dense bf16 peak
  times an efficiency (EFFICIENCY: one for the linear layers' products, one for attention's kernels); any other
  operator takes the bytes it reads and writes at the card's memory bandwidth.
- Activation offload's copies (transformers 5.24 wraps each checkpointed layer in torch's `save_on_cpu`, whose pack
  and unpack copy on the current stream) run on that same stream: each takes its bytes at the host link's speed, and
  the kernels after it wait. They are never hidden.
- Context parallelism's exchanges (torch's ring attention: one all-gather of the keys and values, or a ring of
  sends) are issued, then waited for (`wait_tensor`) before the kernel that needs them: the kernels issued between
  the two run meanwhile, and only what outlasts them is added.
- FSDP2's all-gathers and reduce-scatters run on streams of their own, the next layer's weights gathered while one
  computes: they are hidden but for the first all-gather of each pass and whatever outlasts the pass's compute.
Every figure is per rank; under context parallelism every rank does the same work (the load-balanced ring), so one
rank's time is the step's."""

from dataclasses import dataclass

import numpy as np

from longctx.errors import LongctxError
from longctx.memory import cards
from longctx.memory.costs import COL, COMM_NAMES, CP_GATHER, CP_RING, FSDP_GATHER, FSDP_REDUCE, OTHER_COLLECTIVE, WAIT


@dataclass(frozen=True)
class Efficiency:
    """The share of a card's dense bf16 peak its kernels reach, by kind, and the one step each was fitted to."""

    linear: float
    attention: float
    fitted_to: str


# Fitted jointly (scripts/fit_step_time.py solves the two equations; tests/test_timing.py holds these to its answer):
# `attention` to the guide's Qwen3-8B step at 1,049,000 tokens on 8 H100s (380 s), `linear` to our H200's Qwen3-0.6B
# step at 32,768 tokens (1.63 s, benchmarks/results/gpu_check-h200-2026-12-04). Everything else is a prediction.
EFFICIENCY = {
    "hopper": Efficiency(
        linear=0.5426,
        attention=0.5176,
        fitted_to="attention: the guide's 380 s step (Qwen3-8B, 1,049,000 tokens, CP over 8 H100s, offload); linear: "
        "longctx's H200 step of Qwen3-0.6B at 32,768 tokens (1.63 s)",
    )
}
ASSUMED = {"ampere": "hopper", "ada": "hopper"}  # no step measured on these: Hopper's efficiencies, said so
PARTS = ("linear", "attention", "recomputation", "other", "optimizer", "copies", "communication")


def efficiency(card: cards.Card) -> tuple[Efficiency, bool]:
    """The card's efficiencies and whether they were fitted on its architecture (False: assumed from another)."""
    fitted = card.architecture in EFFICIENCY
    return EFFICIENCY[card.architecture if fitted else ASSUMED[card.architecture]], fitted


def step_time(profile, gpu: str = cards.DEFAULT, eff: Efficiency | None = None) -> dict:
    """Seconds per step of an estimated `profile` on the card `gpu` (a name from cards.CARDS), with tokens per second,
    MFU, the breakdown into PARTS (they add up to the step) and the FLOPs and bytes behind it."""
    card = cards.card(gpu)
    if card is None:
        raise LongctxError(f"A step's time needs a card's speeds: name one of {', '.join(cards.CARDS)} (got {gpu!r}).")
    if profile.costs is None or profile.meta.get("device") != "cuda":
        raise LongctxError("A step's time is priced from an estimate of the GPU's step (estimate(..., device='cuda')).")
    eff, fitted = (eff, True) if eff is not None else efficiency(card)
    c, phases = profile.costs.astype(np.float64), np.asarray(profile.phases)
    peak = card.bf16_tflops * 1e12
    linear, attention = c[:, COL["linear_flops"]] / (peak * eff.linear), c[:, COL["attention_flops"]] / (peak * eff.attention)
    memory = c[:, COL["memory_bytes"]] / (card.memory_gb_s * 1e9)
    copies = c[:, COL["host_bytes"]] / (card.host_gb_s * 1e9)
    link = c[:, COL["comm_bytes"]] / (card.gpu_gb_s * 1e9)
    kind, recompute, optimizer = c[:, COL["comm"]].astype(int), c[:, COL["recompute"]] > 0, phases == "optimizer"
    stream = linear + attention + memory + copies  # one stream, in trace order
    ring = _waited(np.cumsum(stream), kind, link, c[:, COL["attention_flops"]] > 0)
    fsdp = _fsdp_exposed(stream, phases, kind, link)
    parts = {
        "linear": linear[~recompute].sum(),
        "attention": attention[~recompute].sum(),
        "recomputation": (linear + attention + memory)[recompute].sum(),
        "other": memory[~recompute & ~optimizer].sum(),
        "optimizer": memory[optimizer].sum(),
        "copies": copies.sum(),
        "communication": ring + fsdp,
    }
    seconds = sum(parts.values())
    tokens, gpus = profile.meta["seq_len"] * profile.meta["batch"], profile.meta["cp_size"] * profile.meta.get("sp_size", 1)
    flops = {
        phase: {k: float(c[rows, COL[f"{k}_flops"]].sum()) for k in ("linear", "attention")}
        for phase, rows in (
            ("forward", (phases == "forward") & ~recompute),
            ("backward", (phases == "backward") & ~recompute),
            ("recomputation", recompute),
            ("optimizer", optimizer),
        )
    }
    model_flops = sum(sum(v.values()) for p, v in flops.items() if p != "recomputation")  # one rank's
    comm = {name: float(c[kind == code, COL["comm_bytes"]].sum()) for code, name in COMM_NAMES.items()}
    return {
        "gpu": card.name,
        "seconds": float(seconds),
        "tokens_per_second": tokens / seconds,
        "mfu": model_flops / (seconds * peak),  # model FLOPs (no recomputation) over the rank's peak
        "hfu": (model_flops + sum(flops["recomputation"].values())) / (seconds * peak),  # with it: what the card ran
        "breakdown_seconds": {k: float(v) for k, v in parts.items()},
        "flops": flops,
        "bytes": {
            "memory": float(c[:, COL["memory_bytes"]].sum()),
            "host_copies": float(c[:, COL["host_bytes"]].sum()),
            "communication": comm,
            "communication_exposed_seconds": {"context parallel": float(ring), "fsdp": float(fsdp)},
        },
        "gpus": gpus,
        # an offloaded optimizer's step runs on the host's CPU (DeepSpeed's CPU Adam): no host speed is modelled
        "host_step_priced": not c[:, COL["host_memory_bytes"]].any(),
        "efficiency": {"linear": eff.linear, "attention": eff.attention, "fitted": fitted, "fitted_to": eff.fitted_to},
    }


def _waited(clock: np.ndarray, kind: np.ndarray, link: np.ndarray, attention: np.ndarray) -> float:
    """Seconds the stream waits on exchanges issued and later waited for: each runs on the link from its issue (once
    the one before it is done), and a wait holds the stream until everything issued has arrived. torch's ring
    (torch/distributed/tensor/experimental/_context_parallel/_attention.py) waits for a block after computing the
    current one, forward and backward; under fake tensors a functional collective is waited at once (its
    `_are_we_tracing`), so each wait is taken where the eager ring takes it: after the attention kernel that follows."""
    kernels = np.flatnonzero(attention)
    events = []
    for row in np.flatnonzero(np.isin(kind, (CP_GATHER, CP_RING, OTHER_COLLECTIVE, WAIT))):
        at = row
        if kind[row] == WAIT and (later := kernels[kernels > row]).size:
            at = later[0]
        events.append((at, kind[row] == WAIT, row))
    delay, free = 0.0, 0.0
    for at, waits, row in sorted(events):
        now = clock[at] + delay
        if waits:
            delay += max(0.0, free - now)
        else:
            free = max(free, now) + link[row]
    return delay


def _fsdp_exposed(stream: np.ndarray, phases: np.ndarray, kind: np.ndarray, link: np.ndarray) -> float:
    """FSDP2's collectives per pass: what outlasts the pass's compute, plus its first all-gather (nothing to hide it)."""
    exposed = 0.0
    for phase in ("forward", "backward"):
        rows = phases == phase
        fsdp = rows & np.isin(kind, (FSDP_GATHER, FSDP_REDUCE))
        gathers = np.flatnonzero(rows & (kind == FSDP_GATHER))
        first = link[gathers[0]] if len(gathers) else 0.0
        exposed += first + max(0.0, link[fsdp].sum() - first - stream[rows].sum())
    return float(exposed)


def priced_on(gpu) -> str:
    """The card a step is priced on: `gpu` when it names one (cards.CARDS), else the guide's (a number of GiB has no
    speeds)."""
    return cards.card(gpu).name if cards.card(gpu) else cards.DEFAULT


def attention_overtakes(profile) -> int:
    """The sequence length at which the step's attention FLOPs equal its linear layers': attention's grow with the
    square of the length and the products' with the length, so from one step's two counts, length × linear ÷ attention."""
    c = profile.costs
    linear, attention = (float(c[:, COL[k]].sum()) for k in ("linear_flops", "attention_flops"))
    return round(profile.meta["seq_len"] * linear / attention)


def describe(time: dict) -> str:
    """One line: '12.3 s per step on H100-80GB, 10,650 tokens/s, MFU 41%: attention 60%, ...'."""
    shares = {k: v / time["seconds"] for k, v in time["breakdown_seconds"].items()}
    parts = ", ".join(f"{k} {share:.0%}" for k, share in shares.items() if share >= 0.005)
    assumed = "" if time["efficiency"]["fitted"] else " (efficiencies assumed from Hopper: no step measured on this card)"
    host = "" if time["host_step_priced"] else "; plus the optimizer's step on the host's CPU, not priced"
    return (f"{time['seconds']:,.1f} s per step on {time['gpu']}{assumed}, {time['tokens_per_second']:,.0f} tokens/s, "
            f"MFU {time['mfu']:.0%}: {parts}{host}")  # fmt: skip
