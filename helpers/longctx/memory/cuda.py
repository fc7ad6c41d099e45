"""The CUDA side of `measure`: the same tracker, plus the allocator's own numbers and, on request, a
memory snapshot for pytorch.org/memory_viz."""

from __future__ import annotations

import pickle
from pathlib import Path

import torch

from ..errors import LongctxError
from .profile import MemoryProfile


def measure_cuda(step, *, model, optimizer=None, snapshot: str | Path | None = None, band_bytes: int = 0
                 ) -> MemoryProfile:
    """Run `step()` once on the GPU: MemTracker's categories and timeline (as on the CPU) next to the
    caching allocator's `max_memory_allocated`; `snapshot` saves `_record_memory_history`'s pickle."""
    from .measure import TimelineTracker

    if not torch.cuda.is_available():
        raise LongctxError("measure(device='cuda') was asked but there is no CUDA device here; "
                           "measure on 'cpu', or estimate the full size with longctx.memory.estimate.")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    baseline = torch.cuda.memory_allocated()
    if snapshot:
        torch.cuda.memory._record_memory_history(max_entries=1_000_000)
    tracker = TimelineTracker("cuda", host="cpu", band_bytes=band_bytes)  # offloaded tensors land on "cpu"
    tracker.track_external(model, optimizer)
    try:
        with tracker:
            tracker.record()
            step()
            tracker.record()
        torch.cuda.synchronize()
    finally:
        if snapshot:
            Path(snapshot).write_bytes(pickle.dumps(torch.cuda.memory._snapshot()))
            torch.cuda.memory._record_memory_history(enabled=None)
    profile = tracker.profile("memtracker+cuda-allocator")
    profile.meta.update(allocator_peak_bytes=torch.cuda.max_memory_allocated(), allocator_baseline_bytes=baseline,
                        allocator_peak_gib=torch.cuda.max_memory_allocated() / 2**30,
                        snapshot=str(snapshot) if snapshot else None)
    return profile
