"""The CUDA side of `measure`: the same tracker, plus the allocator's own numbers and, on request, a
memory snapshot for pytorch.org/memory_viz."""

from __future__ import annotations

import pickle
from pathlib import Path

import torch

from ..errors import LongctxError
from .profile import GIB, MemoryProfile


def measure_cuda(
    step, *, model, optimizer=None, snapshot: str | Path | None = None, band_bytes: int = 0, device: str | torch.device = "cuda"
) -> MemoryProfile:
    """Run `step()` once on the GPU: MemTracker's categories and timeline (as on the CPU) next to the
    caching allocator's `max_memory_allocated`; `snapshot` saves `_record_memory_history`'s pickle."""
    from .measure import TimelineTracker, tensor_device

    if not torch.cuda.is_available():
        raise LongctxError(
            "measure(device='cuda') was asked but there is no CUDA device here; "
            "measure on 'cpu', or estimate the full size with longctx.memory.estimate."
        )
    device = tensor_device(device)
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    baseline = torch.cuda.memory_allocated(device)
    if snapshot:
        # python stacks only: symbolising C++ frames can take minutes when the snapshot is taken
        torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")
    tracker = TimelineTracker(device, host="cpu", band_bytes=band_bytes)  # offloaded tensors land on "cpu"
    tracker.track_external(model, optimizer)
    try:
        with tracker:
            tracker.record()
            step()
            tracker.record()
        torch.cuda.synchronize(device)
    finally:
        if snapshot:
            Path(snapshot).write_bytes(pickle.dumps(torch.cuda.memory._snapshot()))
            torch.cuda.memory._record_memory_history(enabled=None)
    profile = tracker.profile("memtracker+cuda-allocator")
    peak = torch.cuda.max_memory_allocated(device)
    profile.note(
        "cuda_allocator",
        allocator_peak_bytes=peak,
        allocator_baseline_bytes=baseline,
        allocator_peak_gib=peak / GIB,
        tracker_over_allocator=profile.peak_bytes / peak if peak else None,
        snapshot=str(snapshot) if snapshot else None,
    )
    return profile
