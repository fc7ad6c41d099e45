"""What an attention kernel achieves on a card: the share of the card's dense bf16 peak its forward and its backward
pass reach, from the kernels' published benchmarks (head dim 128, 16k tokens, the causal forward where both are given),
never fitted to a training step; and which kernel each `attn_implementation` runs on a card."""

from dataclasses import dataclass

from longctx.memory import costs

FA3_PAPER = "FlashAttention-3 (Shah et al. 2024, arXiv:2407.08608), H100 SXM5, bf16, head dim 128, 16k tokens"
FA2_PAPER = "FlashAttention-2 (Dao 2023, arXiv:2307.08691), A100 SXM4, head dim 128, causal, 16k tokens"
H100_PEAK, A100_PEAK = 989.4, 312.0  # the papers' TFLOPs/s over the dense bf16 peaks of memory/cards.py


@dataclass(frozen=True)
class Rate:
    kernel: str
    forward: float  # share of the dense bf16 peak
    backward: float
    source: str


def _h100(kernel: str, forward: float, backward: float) -> Rate:
    figures = "(Fig. 5d, causal), {} backward (Fig. 6b, the only backward figure: no causal mask)"
    source = f"{FA3_PAPER}: {forward:g} TFLOPs/s forward " + figures.format(f"{backward:g}")
    return Rate(kernel, forward / H100_PEAK, backward / H100_PEAK, source)


def _a100(kernel: str, both: float, figure: str) -> Rate:
    source = f"{FA2_PAPER}: {both:g} TFLOPs/s forward and backward together ({figure}; no separate figures)"
    return Rate(kernel, both / A100_PEAK, both / A100_PEAK, source)


FA2_H100 = _h100("FlashAttention-2", 335, 322)
RATES = {  # (kernel, architecture) → Rate
    ("flash", "hopper"): FA2_H100,
    ("cudnn", "hopper"): _h100("cuDNN attention", 539, 516),
    ("flash3", "hopper"): _h100("FlashAttention-3", 616, 561),
    ("flash", "ampere"): _a100("FlashAttention-2", 189, "Fig. 4d"),
    ("efficient", "ampere"): _a100("memory-efficient (xformers' cutlass kernel)", 92, "Fig. 4d"),
}
# No H100 figure for the memory-efficient kernel: its A100 share of FlashAttention-2's, applied to Hopper's FA2
_SLOWER = RATES["efficient", "ampere"].forward / RATES["flash", "ampere"].forward
RATES["efficient", "hopper"] = Rate(
    "memory-efficient (assumed)", FA2_H100.forward * _SLOWER, FA2_H100.backward * _SLOWER,
    f"no H100 figure published: its A100 share of FlashAttention-2's ({_SLOWER:.2f}, {FA2_PAPER}, Fig. 4d) times "
    "FlashAttention-2's H100 rates",
)  # fmt: skip
ASSUMED = {"ada": "ampere"}  # no figures for Ada cards: Ampere's shares, said so
SDPA_BACKENDS = ("cudnn", "flash")  # what `sdpa` without a mask may run on CUDA (the efficient kernel takes masks)


def sdpa_backend(architecture: str) -> str:
    """The backend torch's SDPA picks without a mask on a card of this architecture (see the module's note)."""
    return "cudnn" if architecture == "hopper" else "flash"


def rate(kernel_code: int, architecture: str, *, sdpa: str | None = None, linear: float = 0.0) -> Rate:
    """The rate of the kernel that ran a traced attention row (costs' `kernel` code) on an architecture."""
    if kernel_code == costs.EAGER:
        return Rate("eager (cuBLAS batched products)", linear, linear, "the linear layers' efficiency (memory/timing.py)")
    arch = architecture if (("flash", architecture) in RATES) else ASSUMED.get(architecture, architecture)
    name = {costs.SDPA: sdpa or sdpa_backend(architecture), costs.SDPA_EFFICIENT: "efficient", costs.FLASH_ATTN: "flash"}
    kernel = name.get(kernel_code, "flash")
    found = RATES.get((kernel, arch)) or RATES["flash", arch]  # no cuDNN or FA3 figure for an older card: FA2's
    if arch != architecture:
        return Rate(f"{found.kernel} (assumed: {arch}'s rates)", found.forward, found.backward, found.source)
    return found
