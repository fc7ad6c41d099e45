"""Measure the memory of one real training step on the CPU with torch's own tracker.

`torch.distributed._tools.mem_tracker.MemTracker` follows every tensor storage created inside its
context and files it under parameter, buffer, gradient, activation, temporary or optimizer state. We
add a timeline (the live bytes per category after each operator, with the step's phase) and a census
of the activations alive when the forward pass ends. The estimator runs the same tracker under
FakeTensorMode, so measured and estimated profiles are built by the same code.
"""

from __future__ import annotations

import pickle
import weakref
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch.distributed._tools.mem_tracker import _MemRefType

from longctx.compat import FrozenParamsMemTracker
from longctx.errors import LongctxError
from longctx.memory.profile import MemoryProfile
from longctx.units import CATEGORIES, GIB, PHASES

_TRACKER_NAMES = {
    "Parameter": "parameters",
    "Buffer": "buffers",
    "Gradient": "gradients",
    "Optstate": "optimizer",
    "Activation": "activations",
    "Temp": "temporaries",
    "Other": "other",
}


def tensor_device(spec) -> torch.device:
    """The device as a tensor on it reports it: "cpu:0" → cpu, "cuda" → cuda:<current>, "cuda:1" → cuda:1.

    `torch.device("cuda") == torch.device("cuda", 0)` is False, and a CPU tensor's device carries no
    index, so a profile keyed by the spelling the user typed would read nothing."""
    device = torch.device(spec)
    if device.type in ("cpu", "meta"):
        return torch.device(device.type)
    here = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    if here is None or here.type != device.type:
        raise LongctxError(
            f"{str(device)!r} was asked for but there is no {device.type.upper()} device here; measure "
            "on 'cpu', or estimate the full size with longctx.memory.estimate."
        )
    return torch.device(device.type, torch.accelerator.current_device_index()) if device.index is None else device


class TimelineTracker(FrozenParamsMemTracker):
    """MemTracker that keeps the live bytes per category on `device` after every operator, the bytes on
    `host` (offloaded tensors), and the sizes of the activations alive at the end of the forward pass.

    MemTracker's own per-module peak bookkeeping scans every module after every operator; we skip it
    (we read the whole-step timeline instead), which makes a 36-layer fake step minutes faster.
    """

    def __init__(
        self, device: str = "cpu", host: str | None = None, band_bytes: int = 0, host_counter: Callable[[], int] | None = None
    ) -> None:
        super().__init__()
        # host bytes come from tensors on the `host` device, or from `host_counter()` (a CPU HostPool)
        self.host_counter = host_counter
        # Activations of exactly `band_bytes` (one decoder layer's saved input) are counted as they come
        # and go, so a profile can draw one band per saved layer input.
        self.band_bytes, self._bands = band_bytes, 0
        self.band_rows: list[int] = []
        # MemTracker files bytes under the device of each tensor: "cpu" for CPU tensors, "cuda:0" (never a
        # bare "cuda") for GPU ones, so the key must be spelled that way or every lookup finds nothing
        self.device, self.host = tensor_device(device), tensor_device(host) if host else None
        self.rows: list[list[int]] = []
        self.host_rows: list[int] = []
        self.phases: list[str] = []
        self.forward_end_activations: Counter = Counter()  # storage bytes → how many
        self._layer_inputs: list = []  # weak references to the storages decoder layers took as input
        self.layer_inputs_at_forward_end = 0
        self.layer_rows: list[int] | None = None  # with label_layers(): the decoder layer running at each row (-1: none)

    def watch_layer_inputs(self, layers) -> None:
        """Count, at the end of the forward pass, the decoder layers' own inputs still alive on the device
        (what checkpointing keeps per layer), told apart from other tensors of the same size."""

        def hook(module, args, kwargs):
            hidden = args[0] if args else kwargs.get("hidden_states")
            if isinstance(hidden, torch.Tensor) and not self._mod_tracker.is_bw:
                self._layer_inputs.append(weakref.ref(hidden.untyped_storage()))

        for layer in layers:
            layer.register_forward_pre_hook(hook, with_kwargs=True)

    def label_layers(self) -> None:
        """Also record, for every row, which decoder layer (`…layers.<i>`) was running: the fast estimate reads
        the timeline layer by layer."""
        self.layer_rows = []

    def _layer(self) -> int:
        # In backward a layer's hooks may fire before the layer above has left: the lower one is running.
        running = [
            int(i)
            for head, _, i in (n.rpartition(".") for n in self._mod_tracker.parents)
            if i.isdigit() and head.endswith("layers")
        ]
        return min(running, default=-1)

    def _live_layer_inputs(self) -> int:
        live = set()  # storage addresses: a layer input seen twice (recorded again) counts once
        for ref in self._layer_inputs:
            storage = ref()
            winfo, _ = self._WINFO.get(storage, (None, None)) if storage is not None else (None, None)
            if winfo is not None and winfo.reftype == _MemRefType.ACT and winfo.device == self.device:
                live.add(storage._cdata)
        return len(live)

    def _update_snap(self, u_type, winfo, old_mem_consumed=None, old_reftype=None) -> None:
        super()._update_snap(u_type, winfo, old_mem_consumed, old_reftype)
        if not self.band_bytes or winfo.mem_consumed != self.band_bytes or winfo.device != self.device:
            return
        is_act, was_act = winfo.reftype == _MemRefType.ACT, old_reftype == _MemRefType.ACT
        name = u_type.name
        if name == "ADD" and is_act:
            self._bands += 1
        elif name == "DEL" and is_act:
            self._bands -= 1
        elif name == "REF" and is_act != was_act:
            self._bands += 1 if is_act else -1

    def _phase(self) -> str:
        # One step runs forward → backward → optimizer; recomputation inside backward stays "backward".
        now = "optimizer" if self._in_opt else "backward" if self._mod_tracker.is_bw else "forward"
        last = self.phases[-1] if self.phases else "forward"
        return max(now, last, key=PHASES.index)

    def _live_activations(self) -> Counter:
        sizes = Counter()
        for winfo, _ in list(self._WINFO.values()):
            if winfo.reftype == _MemRefType.ACT and winfo.device == self.device and winfo.mem_consumed > 0:
                sizes[winfo.mem_consumed] += 1
        return sizes

    def record(self) -> None:
        phase = self._phase()
        if phase != "forward" and self.phases and self.phases[-1] == "forward":
            self.forward_end_activations = self._live_activations()
            self.layer_inputs_at_forward_end = self._live_layer_inputs()
        snap = self._curr_mem_snap.get(self.device, {})
        by_name = {_TRACKER_NAMES[k.value]: v for k, v in snap.items() if hasattr(k, "value")}
        self.rows.append([by_name.get(c, 0) for c in CATEGORIES])
        host = self._curr_mem_snap.get(self.host, {}) if self.host else {}
        self.host_rows.append(
            sum(v for k, v in host.items() if hasattr(k, "value")) + (self.host_counter() if self.host_counter else 0)
        )
        self.phases.append(phase)
        self.band_rows.append(self._bands)
        if self.layer_rows is not None:
            self.layer_rows.append(self._layer())

    def _update_peak_stats(self, peak_state) -> None:  # MemTracker calls this after every operator
        self.record()

    def profile(self, source: str) -> MemoryProfile:
        return profile_of(self.device.type, source, self.rows, self.phases, self.host_rows, self.band_rows, self.band_bytes)


def profile_of(device: str, source: str, rows, phases, host, bands, band_bytes: int) -> MemoryProfile:
    """A MemoryProfile from a timeline (one row of bytes per category per event) and its phases."""
    timeline = np.asarray(rows, dtype=np.int64)
    totals = timeline.sum(axis=1)
    i = int(totals.argmax())
    return MemoryProfile(
        device=device,
        source=source,
        timeline=timeline,
        phases=list(phases),
        peak_bytes=int(totals[i]),
        peak_phase=phases[i],
        peak_breakdown=dict(zip(CATEGORIES, (int(x) for x in timeline[i]))),
        host_bytes=np.asarray(host, dtype=np.int64),
        band_bytes=band_bytes,
        bands=np.asarray(bands, dtype=np.int64),
    )


def measure(
    step: Callable[[], object],
    *,
    model: torch.nn.Module,
    optimizer=None,
    device: str | None = None,
    band_bytes: int = 0,
    host_pool=None,
) -> MemoryProfile:
    """Run `step()` (forward, loss, backward, optimizer step) once and return its MemoryProfile.

    `model` and `optimizer` exist before the step; they are registered so that their tensors are
    attributed to parameters, buffers and optimizer state rather than "other". `band_bytes` (one
    layer's saved input) turns on the per-layer band count; `host_pool` (an offload.HostPool) is read
    for the host bytes of a CPU run with offload.
    """
    device = tensor_device(device or next(model.parameters()).device)
    if device.type == "cuda":
        return measure_cuda(step, model=model, optimizer=optimizer, band_bytes=band_bytes, device=device)
    if device.type != "cpu":
        raise LongctxError(f"measure() supports the 'cpu' and 'cuda' devices, not {str(device)!r}.")
    tracker = TimelineTracker(device, band_bytes=band_bytes, host_counter=(lambda: host_pool.bytes) if host_pool else None)
    tracker.track_external(model, optimizer)
    with tracker:
        tracker.record()
        step()
        tracker.record()
    return tracker.profile("memtracker")


def measure_cuda(
    step, *, model, optimizer=None, snapshot: str | Path | None = None, band_bytes: int = 0, device: str | torch.device = "cuda"
) -> MemoryProfile:
    """Run `step()` once on the GPU: MemTracker's categories and timeline (as on the CPU) next to the
    caching allocator's `max_memory_allocated`; `snapshot` saves `_record_memory_history`'s pickle."""
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
