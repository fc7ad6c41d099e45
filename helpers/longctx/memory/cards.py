"""GPU cards as a capacity: what the driver reports for each card, where a public record shows it, and the memory an
estimate does not model, named next to every "fits / does not fit"."""

import math
from dataclasses import dataclass

from longctx.errors import LongctxError
from longctx.units import GIB, MIB

# Between nodes, per GPU and direction: one 400 Gb/s link per GPU, NVIDIA DGX H100's eight ConnectX-7 ports ("up to
# 400 Gb/s InfiniBand/Ethernet", the DGX BasePOD reference architecture), as AWS p5's 3,200 Gb/s EFA per 8 GPUs
FABRIC_GB_S = 400 / 8

# nvidia-smi's totals as a cloud provider listed them for its fleet (January 2025)
_NVIDIA_SMI_TOTALS = "nvidia-smi totals listed in github.com/modal-labs/modal-client/pull/2797"


@dataclass(frozen=True)
class Card:
    name: str
    sold_gb: int  # the size it is sold as, in decimal GB (the vendor's datasheet)
    reported_mib: float | None  # the driver's total (nvidia-smi, MiB), where a record shows it
    source: str
    # what a step's time is made of (memory/timing.py), from the vendor's datasheet (`specs`): dense bf16 tensor FLOPs
    # (the datasheets' headline figures are with 2:4 sparsity, twice these), memory bandwidth, and per direction the
    # host link (PCIe) and the link to another GPU of the node (NVLink, or PCIe where the card has none)
    bf16_tflops: float = 0.0
    memory_gb_s: float = 0.0
    host_gb_s: float = 0.0
    gpu_gb_s: float = 0.0
    architecture: str = ""  # the kernels' efficiencies are per architecture (timing.EFFICIENCY, kernels.RATES)
    specs: str = ""
    # a node: how many GPUs share NVLink, and what each has to another node (per direction)
    node_gpus: int = 8
    fabric_gb_s: float = FABRIC_GB_S

    @property
    def capacity_gib(self) -> float:
        """The memory a step can count on at most: the driver's total, else the datasheet's size."""
        return self.reported_mib * MIB / GIB if self.reported_mib else self.sold_gb * 1e9 / GIB

    def describe(self) -> str:
        if self.reported_mib:
            return f"{self.name}: {self.capacity_gib:.2f} GiB reported by the driver ({self.source})"
        return (
            f"{self.name}: {self.capacity_gib:.2f} GiB, the datasheet's {self.sold_gb} GB (the driver's total for "
            "this card is not on record here; it is smaller: measure it with benchmarks/gpu_check.py)"
        )


# torch.cuda.get_device_properties(0).total_memory on the H200 of benchmarks/results/gpu_check-h200-2026-12-04
# (tests/test_cards.py reads it back from that report)
_OURS = "torch's total_memory on longctx's H200, benchmarks/results/gpu_check-h200-2026-12-04"
_H100 = "NVIDIA H100 Tensor Core GPU datasheet, SXM5: 1,979 TFLOPS bf16 sparse, 3.35 TB/s, NVLink 900 GB/s, PCIe Gen5 128 GB/s"
_H200 = "NVIDIA H200 Tensor Core GPU datasheet, SXM: 1,979 TFLOPS bf16 sparse, 4.8 TB/s, NVLink 900 GB/s, PCIe Gen5 128 GB/s"
_A100 = "NVIDIA A100 Tensor Core GPU datasheet, SXM: 624 TFLOPS bf16 sparse, NVLink 600 GB/s, PCIe Gen4 64 GB/s; {} GB/s"
_L40S = "NVIDIA L40S datasheet: 362.05 TFLOPS bf16 (733 with sparsity), 864 GB/s, PCIe Gen4 x16 64 GB/s, no NVLink"
_ADA = "NVIDIA Ada Lovelace GPU architecture whitepaper: RTX 4090, 165.2 TFLOPS bf16 (fp32 accumulation), 1,008 GB/s, PCIe Gen4"
CARDS = {
    c.name: c
    for c in (
        Card("H100-80GB", 80, 81559, _NVIDIA_SMI_TOTALS, 989.4, 3350, 64, 450, "hopper", _H100),
        Card("A100-80GB", 80, 81920, _NVIDIA_SMI_TOTALS, 312, 2039, 32, 300, "ampere", _A100.format("2,039")),
        Card("A100-40GB", 40, 40960, _NVIDIA_SMI_TOTALS, 312, 1555, 32, 300, "ampere", _A100.format("1,555")),
        Card("L40S", 48, 46068, _NVIDIA_SMI_TOTALS, 362.05, 864, 32, 32, "ada", _L40S),
        Card("H200", 141, 143155.9375, _OURS, 989.4, 4800, 64, 450, "hopper", _H200),
        Card("RTX-4090", 24, None, "NVIDIA GeForce RTX 4090 specifications (24 GB GDDR6X)", 165.2, 1008, 32, 32, "ada", _ADA),
    )
}
DEFAULT = "H100-80GB"  # the guide's card: a step's time is priced on it unless another card is named

# What a real step holds on the card that the fake-tensor estimate does not trace, each a labelled term.
UNMODELLED = {
    "CUDA context": "the driver's and the kernels' own memory outside torch's allocator, taken when CUDA starts "
    "(total - free after torch.cuda.init(), with nothing allocated)",
    "allocator rounding": "the caching allocator rounds each block up and keeps freed blocks cached "
    "(torch.cuda.memory_reserved() - memory_allocated() at the peak: {:.0%} to {:.0%} of the peak on longctx's H200, "
    "without PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)",
    "NCCL buffers": "the communicator's buffers for the ring's exchanges, with context parallelism only "
    "(NCCL_BUFFSIZE per channel and peer)",
}


# The allocator's reserved peak over its allocated peak, lowest and highest, over the 11 steps of
# benchmarks/results/gpu_check-h200-2026-12-04 (no expandable_segments; tests/test_cards.py recomputes them)
RESERVED_OVER_ALLOCATED = (1.0304, 1.2621)
UNMODELLED["allocator rounding"] = UNMODELLED["allocator rounding"].format(*(r - 1 for r in RESERVED_OVER_ALLOCATED))


MAX_GIB = 2**20  # a card's memory given as a number: a mebibyte of GiB is past any device (and past float noise)


def card(gpu) -> Card | None:
    """The card named `gpu` (as people type it: any case), or None for a number or an unknown name."""
    return {k.upper(): c for k, c in CARDS.items()}.get(gpu.upper() if isinstance(gpu, str) else None)


def capacity(gpu: str | float | int) -> tuple[float, str]:
    """(GiB, how it was found) for a card name from CARDS or a number of GiB."""
    if named := card(gpu):
        return named.capacity_gib, named.describe()
    try:
        gib = float(gpu)
    except (TypeError, ValueError):
        raise LongctxError(f"Unknown GPU {gpu!r}; use one of {', '.join(CARDS)}, or a number of GiB.") from None
    if not (math.isfinite(gib) and 0 < gib <= MAX_GIB):
        raise LongctxError(
            f"GPU memory must be a positive number of GiB up to {MAX_GIB:,} or a card ({', '.join(CARDS)}), got {gpu!r}."
        )
    return gib, f"{gib:g} GiB as given"


def unmodelled(cp_size: int = 1) -> list[str]:
    """The labelled terms a fit verdict leaves out (NCCL's only when the step communicates)."""
    return [f"{name}: {why}" for name, why in UNMODELLED.items() if name != "NCCL buffers" or cp_size > 1]


def about(gpu, cp_size: int = 1) -> str:
    """What a lesson prints once about its card: the capacity and where it comes from, then what no estimate counts."""
    return "\n".join([capacity(gpu)[1], "not counted by any estimate:", *(f"  {term}" for term in unmodelled(cp_size))])


def verdict(peak_gib: float, gpu: str | float | int, cp_size: int = 1) -> str:
    """'fits'/'does not fit' on a card, the room left, and the terms it does not count."""
    gib, how = capacity(gpu)
    room = gib - peak_gib
    low, high = (peak_gib * (r - 1) for r in RESERVED_OVER_ALLOCATED)
    cache = f" (the allocator's cache may want {low:.1f}–{high:.1f} GiB more, as measured on an H200)"
    head = f"fits {how}, with {room:.2f} GiB left{cache}" if room >= 0 else f"does not fit {how}: {-room:.2f} GiB over"
    return head + "; not counted: " + "; ".join(unmodelled(cp_size))
