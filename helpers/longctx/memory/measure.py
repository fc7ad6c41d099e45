"""Measure the memory of one real training step on the CPU with torch's own tracker.

`torch.distributed._tools.mem_tracker.MemTracker` follows every tensor storage created inside its
context and files it under parameter, buffer, gradient, activation, temporary or optimizer state. We
add a timeline: after each operator the live bytes per category are recorded with the step's phase.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from ..compat import FrozenParamsMemTracker
from ..errors import LongctxError
from .profile import CATEGORIES, PHASES, MemoryProfile

_TRACKER_NAMES = {
    "Parameter": "parameters", "Buffer": "buffers", "Gradient": "gradients", "Optstate": "optimizer",
    "Activation": "activations", "Temp": "temporaries", "Other": "other",
}


class _TimelineTracker(FrozenParamsMemTracker):
    """MemTracker that also keeps the live bytes per category after every operator."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[int]] = []
        self.phases: list[str] = []

    def _phase(self) -> str:
        # One step runs forward → backward → optimizer; recomputation inside backward stays "backward".
        now = "optimizer" if self._in_opt else "backward" if self._mod_tracker.is_bw else "forward"
        last = self.phases[-1] if self.phases else "forward"
        return max(now, last, key=PHASES.index)

    def record(self) -> None:
        snap = self._curr_mem_snap.get(torch.device("cpu"), {})
        by_name = {_TRACKER_NAMES[k.value]: v for k, v in snap.items() if hasattr(k, "value")}
        self.rows.append([by_name.get(c, 0) for c in CATEGORIES])
        self.phases.append(self._phase())

    def _update_peak_stats(self, peak_state) -> None:  # called by MemTracker after every operator
        super()._update_peak_stats(peak_state)
        self.record()


def measure(step: Callable[[], object], *, model: torch.nn.Module, optimizer=None, device: str | None = None
            ) -> MemoryProfile:
    """Run `step()` (forward, loss, backward, optimizer step) once and return its MemoryProfile.

    `model` and `optimizer` exist before the step; they are registered so that their tensors are
    attributed to parameters, buffers and optimizer state rather than "other".
    """
    device = device or next(model.parameters()).device.type
    if device == "cuda":
        from .cuda import measure_cuda

        return measure_cuda(step, model=model, optimizer=optimizer)
    if device != "cpu":
        raise LongctxError(f"measure() supports 'cpu' and 'cuda' devices, not {device!r}.")
    tracker = _TimelineTracker()
    tracker.track_external(model, optimizer)
    with tracker:
        tracker.record()
        step()
        tracker.record()
    timeline = np.asarray(tracker.rows, dtype=np.int64)
    totals = timeline.sum(axis=1)
    i = int(totals.argmax())
    return MemoryProfile(
        device="cpu", source="memtracker", timeline=timeline, phases=tracker.phases,
        peak_bytes=int(totals[i]), peak_phase=tracker.phases[i],
        peak_breakdown=dict(zip(CATEGORIES, (int(x) for x in timeline[i]))),
    )
