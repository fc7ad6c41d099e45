"""MemoryProfile: what one training step kept alive, by category, over time."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

GIB = 2**30  # every byte count in longctx is shown in binary units: GiB and MiB
MIB = 2**20
# The categories every profile reports, in stacking order (bottom first).
CATEGORIES = ("parameters", "buffers", "gradients", "optimizer", "activations", "temporaries", "other")
PHASES = ("forward", "backward", "optimizer")


@dataclass
class MemoryProfile:
    """A step's memory: a timeline of live bytes per category, its peak, and where the peak sits.

    `timeline` has one row per recorded event and one column per entry of CATEGORIES; `phases` names
    the phase of each row; `host_bytes` the bytes held in host memory (activation offload).
    """

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
    meta: dict = field(default_factory=dict)

    @property
    def peak_gib(self) -> float:
        return self.peak_bytes / GIB

    def at_end(self) -> dict[str, int]:
        """The bytes per category after the last recorded event."""
        return dict(zip(CATEGORIES, (int(x) for x in self.timeline[-1]))) if len(self.timeline) else {}

    def last_row(self, phase: str) -> int | None:
        """The timeline row of `phase`'s last event (None when the profile has no such phase)."""
        rows = [i for i, p in enumerate(self.phases) if p == phase]
        return rows[-1] if rows else None

    def end_of(self, phase: str) -> dict[str, int]:
        """The bytes per category at the last event of `phase` (e.g. what forward left for backward)."""
        row = self.last_row(phase)
        return dict(zip(CATEGORIES, (int(x) for x in self.timeline[row]))) if row is not None else {}

    def max_by_category(self) -> dict[str, int]:
        return dict(zip(CATEGORIES, (int(x) for x in self.timeline.max(axis=0)))) if len(self.timeline) else {}

    @property
    def host_peak_bytes(self) -> int:
        return int(self.host_bytes.max()) if self.host_bytes is not None and len(self.host_bytes) else 0

    def summary(self) -> dict:
        """The scalars a notebook records in results.json."""
        return {
            "device": self.device, "source": self.source, "peak_gib": self.peak_gib, "peak_bytes": self.peak_bytes,
            "peak_phase": self.peak_phase, "host_gib": self.host_peak_bytes / GIB,
            "peak_breakdown_gib": {k: v / GIB for k, v in self.peak_breakdown.items()},
            "max_by_category_gib": {k: v / GIB for k, v in self.max_by_category().items()},
            **self.meta,
        }
