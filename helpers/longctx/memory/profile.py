"""MemoryProfile: what one training step kept alive, by category, over time."""

from dataclasses import dataclass, field

import numpy as np

from longctx.units import CATEGORIES, GIB

# What each producer records in MemoryProfile.meta, in one place: a key means one thing whoever made the profile
# (note() refuses a key its producer has not declared). trainer_step's last four come from offload.HostPool.summary.
META_KEYS = {
    "estimate": (
        "model seq_len batch loss checkpointing offload dtype cp_size tokens_per_rank mixed_precision device optim "
        "attn_implementation tiled_mlp cp_comm offload_optimizer offload_params fused_norm sp_size lora layers params fixed_gib "
        "per_layer_saved_gib saved_layer_tensors hidden_sized_tensors sliding_window attention_mask_gib autocast device_peak_gib "
        "method wall_seconds"
    ).split(),
    "trainer_step": (
        "trainable_params trainable_tensors total_params tokens loss_value host_peak_bytes host_peak_tensors to_host_bytes "
        "to_device_bytes"
    ).split(),
    "cuda_allocator": "allocator_peak_bytes allocator_baseline_bytes allocator_peak_gib tracker_over_allocator snapshot".split(),
}


def _by_category(row) -> dict[str, int]:
    return dict(zip(CATEGORIES, map(int, row)))


@dataclass
class MemoryProfile:
    """A step's memory: `timeline` has one row per recorded event and one column per entry of CATEGORIES, `phases`
    the phase of each row, `host_bytes` the bytes held in host memory (activation offload)."""

    device: str
    source: str  # "memtracker", "cuda-allocator" or "fake-tensors"
    timeline: np.ndarray
    phases: list[str]
    peak_bytes: int
    peak_phase: str
    peak_breakdown: dict[str, int]
    host_bytes: np.ndarray | None = None  # bytes offloaded to host memory, per timeline row
    band_bytes: int = 0  # size of one decoder layer's saved input
    bands: np.ndarray | None = None  # how many such saved inputs are alive, per timeline row
    meta: dict = field(default_factory=dict)  # written through note(); its keys are declared in META_KEYS
    costs: np.ndarray | None = None  # an estimate's: per timeline row, what the operator costs (memory/costs.COLUMNS)

    def note(self, producer: str, **values) -> None:
        """Record `values` in meta under the keys `producer` declared in META_KEYS."""
        if undeclared := sorted(set(values) - set(META_KEYS[producer])):
            raise KeyError(f"{producer} records undeclared meta keys {undeclared}; declare them in META_KEYS")
        self.meta.update(values)

    @property
    def peak_gib(self) -> float:
        return self.peak_bytes / GIB

    @property
    def host_peak_bytes(self) -> int:
        return int(self.host_bytes.max()) if self.host_bytes is not None and len(self.host_bytes) else 0

    def at_end(self) -> dict[str, int]:
        """The bytes per category after the last recorded event."""
        return _by_category(self.timeline[-1]) if len(self.timeline) else {}

    def last_row(self, phase: str) -> int | None:
        """The timeline row of `phase`'s last event (None when the profile has no such phase)."""
        return max((i for i, p in enumerate(self.phases) if p == phase), default=None)

    def end_of(self, phase: str) -> dict[str, int]:
        """The bytes per category at the last event of `phase` (e.g. what forward left for backward)."""
        return {} if (row := self.last_row(phase)) is None else _by_category(self.timeline[row])

    def max_by_category(self) -> dict[str, int]:
        return _by_category(self.timeline.max(axis=0)) if len(self.timeline) else {}

    def describe(self, unit: int = GIB) -> str:
        """One line a lesson prints: 'peak 12.3 MiB (backward), loss 4.123456, host 1.0 MiB'."""
        name = "GiB" if unit == GIB else "MiB"
        loss = f", loss {self.meta['loss_value']:.6f}" if "loss_value" in self.meta else ""
        host = f", host {self.host_peak_bytes / unit:.1f} {name}" if self.host_peak_bytes else ""
        return f"peak {self.peak_bytes / unit:.1f} {name} ({self.peak_phase}){loss}{host}"

    def anatomy(self) -> dict:
        """What the peak is made of, in GiB: how far into the backward pass it comes (0: its start, 1: its end), the
        fixed part (weights, buffers, optimizer state), the gradients made so far, the `band_bytes` tensors alive
        (checkpointed layer inputs and their like: `seq_tensors` of them) and what else the step holds there (the
        layer being recomputed: its activations and the temporaries its backward makes)."""
        row = int(self.timeline.sum(axis=1).argmax())
        forward, backward = self.last_row("forward"), self.last_row("backward")
        at = {k: v / GIB for k, v in self.peak_breakdown.items()}
        seq = int(self.bands[row]) if self.bands is not None and len(self.bands) else 0
        into = (row - forward) / (backward - forward) if forward is not None and backward not in (None, forward) else 0.0
        return {
            "row": row,
            "into_backward": into,
            "fixed_gib": at["parameters"] + at["buffers"] + at["optimizer"],
            "gradients_gib": at["gradients"],
            "seq_tensors": seq,
            "seq_tensors_gib": seq * self.band_bytes / GIB,
            "layer_own_gib": at["activations"] + at["temporaries"] - seq * self.band_bytes / GIB,
        }

    def summary(self) -> dict:
        """The scalars a notebook records in results.json."""
        return {
            "device": self.device,
            "source": self.source,
            "peak_gib": self.peak_gib,
            "peak_bytes": self.peak_bytes,
            "peak_phase": self.peak_phase,
            "host_gib": self.host_peak_bytes / GIB,
            "peak_breakdown_gib": {k: v / GIB for k, v in self.peak_breakdown.items()},
            "max_by_category_gib": {k: v / GIB for k, v in self.max_by_category().items()},
            **self.meta,
        }
