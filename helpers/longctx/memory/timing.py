"""A training step's time on a card, from what each operator of its traced step costs (memory/costs.py): the same
fake-tensor trace as the memory estimate, priced with the card's datasheet figures (memory/cards.py).

How compute, copies and communication combine, as the installed libraries run them:
- The kernels run on one stream, one after another. A linear layer's product takes its FLOPs at the card's dense bf16
  peak times the linear efficiency (EFFICIENCY, fitted to one measured step); an attention kernel its forward and
  backward FLOPs at the rates its kernel's published benchmarks give (memory/kernels.py: FlashAttention-2, cuDNN,
  the memory-efficient kernel, each named beside the time); any other operator takes the bytes it reads and writes
  at the card's memory bandwidth.
- Activation offload's copies (transformers 5.24 wraps each checkpointed layer in torch's `save_on_cpu`, whose pack
  and unpack copy on the current stream) run on that same stream: each takes its bytes at the host link's speed, and
  the kernels after it wait. They are never hidden.
- Context parallelism's exchanges (torch's ring attention: one all-gather of the keys and values, or a ring of
  sends) are issued, then waited for (`wait_tensor`) before the kernel that needs them: the kernels issued between
  the two run meanwhile, and only what outlasts them is added.
- FSDP2's all-gathers and reduce-scatters run on streams of their own, the next layer's weights gathered while one
  computes: they are hidden but for the first all-gather of each pass and whatever outlasts the pass's compute.
- Ulysses' all-to-alls (DeepSpeed's, before and after each attention) are waited for at once: exposed in full.
- Data-parallel replicas of the step (`replicas`: HSDP's `dp_replicate_size` in accelerate's ParallelismConfig, or
  DDP for a one-GPU step) all-reduce each rank's gradients, in bf16 (accelerate 1.15's FSDP2 mixed precision reduces
  in the compute dtype), during backward on the gradients' stream: hidden but for what outlasts backward's compute.
- Every collective runs at the NVLink speed within a node of `card.node_gpus`, at the fabric between nodes
  (`card.fabric_gb_s` per GPU) once the group spans more: a ring or an all-to-all is as slow as its slowest hop.
- An optimizer offloaded to the host (DeepSpeed's CPU Adam) steps after backward, not beside it (DeepSpeed 0.19.8's
  `stage3.step`): every rank of a node at once on the node's CPUs, at DeepSpeed's published CPU Adam throughput
  (HOST_ADAM), then the new weights go back to the GPU over the host link unless they live on the host too.
- A distributed step pays a fixed cost besides (`Efficiency.fixed`: what a step of several ranks spends that no
  operator of the trace accounts for, its collectives' set-up and the ranks waiting on each other), fitted to one
  measured step, named there.
Every figure is per rank; under context parallelism every rank does the same work (the load-balanced ring), so one
rank's time is the step's."""

from dataclasses import dataclass

import numpy as np

from longctx.errors import LongctxError
from longctx.memory import cards, kernels
from longctx.memory.costs import ALL_TO_ALL, COL, COMM_NAMES, CP_GATHER, CP_RING, FSDP_GATHER, FSDP_REDUCE, OTHER_COLLECTIVE, WAIT


@dataclass(frozen=True)
class Efficiency:
    """The share of a card's dense bf16 peak the linear layers' products reach, the fixed seconds of a distributed
    step, and the measured step each was fitted to (attention's rates are the kernels' own: memory/kernels.py)."""

    linear: float
    fixed: float
    fitted_to: str


# Fitted by scripts/step_times.py (tests/test_timing.py holds these to its answer), each to one measured step:
# `linear` to our H200's Qwen3-0.6B step at 32,768 tokens (benchmarks/results/gpu_check-h200-2026-12-04), `fixed` to
# the guide's shortest distributed step, Qwen3-8B at 131,072 tokens over 8 H100s. Everything else is a prediction.
EFFICIENCY = {
    "hopper": Efficiency(
        linear=0.4924,
        fixed=0.912,
        fitted_to="linear: longctx's H200 step of Qwen3-0.6B at 32,768 tokens (1.63 s); fixed: the guide's 9.5 s step "
        "(Qwen3-8B, 131,072 tokens, CP over 8 H100s, offload)",
    )
}
ASSUMED = {"ampere": "hopper", "ada": "hopper"}  # no step measured on these: Hopper's linear efficiency, said so
# DeepSpeed's CPU Adam, parameters a second on one host: "reduces the optimizer time from 56 seconds to 8.2 seconds
# to an 11.6B parameter GPT2 model" (github.com/deepspeedai/DeepSpeed/pull/735; the host's CPU is not named)
HOST_ADAM = 11.6e9 / 8.2
HOST_ADAM_SOURCE = "DeepSpeed's CPU Adam: 11.6B parameters in 8.2 s (deepspeedai/DeepSpeed pull request 735)"


def step_time(
    profile, gpu: str = cards.DEFAULT, eff: Efficiency | None = None, sdpa: str | None = None, replicas: int = 1
) -> dict:
    """Seconds per step of an estimated `profile` on the card `gpu` (a name from cards.CARDS), with tokens per second,
    MFU, the breakdown into parts (they add up to the step), the FLOPs and bytes behind it and the attention kernel
    priced."""
    card = cards.card(gpu)
    if card is None:
        raise LongctxError(f"A step's time needs a card's speeds: name one of {', '.join(cards.CARDS)} (got {gpu!r}).")
    if profile.costs is None or profile.meta.get("device") != "cuda":
        raise LongctxError("A step's time is priced from an estimate of the GPU's step (estimate(..., device='cuda')).")
    fitted = eff is not None or card.architecture in EFFICIENCY  # False: another architecture's, said so
    eff = eff or EFFICIENCY[ASSUMED.get(card.architecture, card.architecture)]
    c, phases = profile.costs.astype(np.float64), np.asarray(profile.phases)
    peak = card.bf16_tflops * 1e12
    linear = c[:, COL["linear_flops"]] / (peak * eff.linear)
    attention, used = np.zeros(len(c)), {}
    for code in np.unique(c[:, COL["kernel"]]).astype(int):
        if code:
            rows, r = c[:, COL["kernel"]] == code, kernels.rate(code, card.architecture, sdpa=sdpa, linear=eff.linear)
            attention[rows] = c[rows, COL["attention_flops"]] / (peak * r.forward)
            attention[rows] += c[rows, COL["attention_backward_flops"]] / (peak * r.backward)
            used[r.kernel] = r
    memory = c[:, COL["memory_bytes"]] / (card.memory_gb_s * 1e9)
    copies = c[:, COL["host_bytes"]] / (card.host_gb_s * 1e9)
    gpus = profile.meta["cp_size"] * profile.meta.get("sp_size", 1)
    link = c[:, COL["comm_bytes"]] / ((card.gpu_gb_s if gpus <= card.node_gpus else card.fabric_gb_s) * 1e9)
    # a ring all-reduce sends 2 (r - 1) / r of the rank's gradients; across nodes once the replicas span more than one
    replica_bytes = 2 * (replicas - 1) / replicas * profile.meta["params"] / gpus * 2 if replicas > 1 else 0.0
    replica_link = replica_bytes / ((card.gpu_gb_s if gpus * replicas <= card.node_gpus else card.fabric_gb_s) * 1e9)
    kind, recompute, optimizer = c[:, COL["comm"]].astype(int), c[:, COL["recompute"]] > 0, phases == "optimizer"
    stream = linear + attention + memory + copies  # one stream, in trace order
    both = {
        "linear": c[:, COL["linear_flops"]],
        "attention": c[:, COL["attention_flops"]] + c[:, COL["attention_backward_flops"]],
    }
    has_attention = both["attention"] > 0
    ring = _waited(np.cumsum(stream), kind, link, has_attention)
    fsdp = _fsdp_exposed(stream, phases, kind, link, replica_link)
    parts = {
        "linear": linear[~recompute].sum(),
        "attention": attention[~recompute].sum(),
        "recomputation": (linear + attention + memory)[recompute].sum(),
        "other": memory[~recompute & ~optimizer].sum(),
        "optimizer": memory[optimizer].sum(),
        "copies": copies.sum(),
        "communication": ring + fsdp + link[kind == ALL_TO_ALL].sum(),
        "host": _host_step(profile.meta, card, gpus),
        "fixed": eff.fixed if gpus * replicas > 1 else 0.0,
    }
    seconds = sum(parts.values())
    tokens = profile.meta["seq_len"] * profile.meta["batch"] * replicas  # every replica's sequences
    flops = {
        phase: {k: float(v[rows].sum()) for k, v in both.items()}
        for phase, rows in (
            ("forward", (phases == "forward") & ~recompute),
            ("backward", (phases == "backward") & ~recompute),
            ("recomputation", recompute),
            ("optimizer", optimizer),
        )
    }
    model_flops = sum(sum(v.values()) for p, v in flops.items() if p != "recomputation")  # one rank's
    comm = {name: float(c[kind == code, COL["comm_bytes"]].sum()) for code, name in COMM_NAMES.items()}
    comm["replicas' all-reduce"] = replica_bytes
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
        "replicas": replicas,
        "attention_kernels": {
            name: {"forward": r.forward, "backward": r.backward, "source": r.source} for name, r in used.items()
        },
        "efficiency": {"linear": eff.linear, "fixed": eff.fixed, "fitted": fitted, "fitted_to": eff.fitted_to},
    }


def _host_step(meta: dict, card: cards.Card, gpus: int) -> float:
    """Seconds of an offloaded optimizer's step: the node's share of the parameters through CPU Adam (every rank of the
    node at once, on its CPUs), then this rank's new bf16 weights back to the GPU unless the weights live on the host."""
    if not meta.get("offload_optimizer"):
        return 0.0
    params = meta["params"]
    on_node = params * min(gpus, card.node_gpus) / gpus  # ZeRO shards the state over every rank
    back = 0.0 if meta.get("offload_params") else params / gpus * 2 / (card.host_gb_s * 1e9)
    return on_node / HOST_ADAM + back


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


def _fsdp_exposed(stream: np.ndarray, phases: np.ndarray, kind: np.ndarray, link: np.ndarray, replicas: float) -> float:
    """FSDP2's collectives per pass: what outlasts the pass's compute, plus its first all-gather (nothing to hide it);
    the replicas' all-reduce (`replicas` seconds) shares backward's gradient stream."""
    exposed = 0.0
    for phase in ("forward", "backward"):
        rows = phases == phase
        fsdp = rows & np.isin(kind, (FSDP_GATHER, FSDP_REDUCE))
        gathers = np.flatnonzero(rows & (kind == FSDP_GATHER))
        first = link[gathers[0]] if len(gathers) else 0.0
        grads = replicas if phase == "backward" else 0.0
        exposed += first + max(0.0, link[fsdp].sum() + grads - first - stream[rows].sum())
    return float(exposed)


def priced_on(gpu) -> str:
    """The card a step is priced on: `gpu` when it names one (cards.CARDS), else the guide's (a number of GiB has no
    speeds)."""
    return cards.card(gpu).name if cards.card(gpu) else cards.DEFAULT


def attention_overtakes(profile) -> int:
    """The sequence length at which the step's attention FLOPs equal its linear layers': attention's grow with the
    square of the length and the products' with the length, so from one step's two counts, length × linear ÷ attention."""
    c = profile.costs
    linear = float(c[:, COL["linear_flops"]].sum())
    attention = float(c[:, COL["attention_flops"]].sum() + c[:, COL["attention_backward_flops"]].sum())
    return round(profile.meta["seq_len"] * linear / attention)


def kernel_names(time: dict) -> str:
    """'cuDNN attention at 54%/52% of peak (forward/backward)': the attention kernels a time was priced with."""
    return ", ".join(f"{name} at {r['forward']:.0%}/{r['backward']:.0%} of peak (forward/backward)"
                     for name, r in time["attention_kernels"].items()) or "no attention"  # fmt: skip


def describe(time: dict) -> str:
    """One line: '12.3 s per step on H100-80GB, 10,650 tokens/s, MFU 41%: attention 60%, ...; attention priced as ...'."""
    shares = {k: v / time["seconds"] for k, v in time["breakdown_seconds"].items()}
    parts = ", ".join(f"{k} {share:.0%}" for k, share in shares.items() if share >= 0.005)
    assumed = "" if time["efficiency"]["fitted"] else " (linear efficiency assumed from Hopper: no step measured on this card)"
    copies = f" ({time['replicas']} data-parallel replicas)" if time.get("replicas", 1) > 1 else ""
    return (f"{time['seconds']:,.1f} s per step on {time['gpu']}{copies}{assumed}, {time['tokens_per_second']:,.0f} tokens/s, "
            f"MFU {time['mfu']:.0%}: {parts}; attention priced as {kernel_names(time)}")  # fmt: skip
