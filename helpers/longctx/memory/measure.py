"""Measure the memory of one real training step with torch's own tracker: `torch.distributed._tools.mem_tracker.
MemTracker` files every tensor storage created inside its context under parameter, buffer, gradient, activation,
temporary or optimizer state."""

import weakref
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import numpy as np
import torch
from torch.distributed._tools.mem_tracker import _MemRefType

from longctx.compat import FakeStepMemTracker
from longctx.errors import LongctxError
from longctx.memory import costs
from longctx.memory.profile import MemoryProfile
from longctx.units import CATEGORIES, GIB, PHASES

_TRACKER_NAMES = dict(zip(("Parameter", "Buffer", "Gradient", "Optstate", "Activation", "Temp", "Other"), CATEGORIES))


def tensor_device(spec) -> torch.device:
    """The device as a tensor on it reports it: "cpu:0" → cpu, "cuda" → cuda:<current>, "cuda:1" → cuda:1.
    (`torch.device("cuda") == torch.device("cuda", 0)` is False: a profile keyed by the user's spelling reads nothing.)"""
    try:
        return torch.empty(0, device=spec).device
    except (RuntimeError, AssertionError):  # no such device here (torch built without CUDA asserts)
        raise LongctxError(
            f"{str(spec)!r} was asked for but there is no such device here; measure on 'cpu', or estimate the full size "
            "with longctx.memory.estimate."
        ) from None


class TimelineTracker(FakeStepMemTracker):
    """MemTracker that keeps the live bytes per category on `device` after every operator, the bytes on `host`
    (offloaded tensors, plus `host_counter()`: a CPU HostPool), and the sizes of the activations alive at the end of the
    forward pass."""

    def __init__(
        self, device="cpu", host=None, band_bytes: int = 0, host_counter: Callable[[], int] | None = None, costs: bool = False
    ) -> None:
        super().__init__()
        self.cost_rows: list | None = [] if costs else None  # with `costs`: each row's memory/costs.COLUMNS
        self.device, self.host = tensor_device(device), tensor_device(host) if host else None
        self.host_counter = host_counter or (lambda: 0)
        # activations of exactly `band_bytes` (one decoder layer's saved input) are counted as they come and go, so a
        # profile can draw one band per saved layer input
        self.band_bytes, self._bands, self.band_rows = band_bytes, 0, []
        self.rows, self.host_rows, self.phases = [], [], []
        self.forward_end_activations: Counter = Counter()  # storage bytes → how many
        self._layer_inputs, self.layer_inputs_at_forward_end = [], 0  # weak references to the layers' input storages
        self.layer_rows: list[int] | None = None  # with label_layers(): the decoder layer running at each row (-1: none)
        self._born: dict[int, int] = {}  # a tracked storage's record (its _WeakRefInfo's id) → the row it first counts in

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
        """Also record which decoder layer (`…layers.<i>`) runs at each row: the fast estimate reads them."""
        self.layer_rows = []

    def _layer(self) -> int:
        # In backward a layer's hooks may fire before the layer above has left: the lower one is running.
        names = (n.rpartition(".") for n in self._mod_tracker.parents)
        return min((int(i) for head, _, i in names if i.isdigit() and head.endswith("layers")), default=-1)

    def filing_as_activations(self):
        """A context in which new tensors are filed as activations, as in forward or in a module recomputed in backward."""
        return mock.patch.object(self, "_in_ac", True)

    def _activation_here(self, winfo) -> bool:
        return winfo is not None and winfo.reftype == _MemRefType.ACT and winfo.device == self.device

    def _live_layer_inputs(self) -> int:
        storages = [s for s in (ref() for ref in self._layer_inputs) if s is not None]
        # by storage address: a layer input seen twice (recorded again) counts once
        return len({s._cdata for s in storages if self._activation_here(self._WINFO.get(s, (None, None))[0])})

    def _update_snap(self, u_type, winfo, old_mem_consumed=None, old_reftype=None) -> None:
        super()._update_snap(u_type, winfo, old_mem_consumed, old_reftype)
        here = winfo.device == self.device
        if u_type.name == "ADD" and here:
            self._born[id(winfo)] = len(self.rows)
        elif u_type.name == "DEL":
            self._born.pop(id(winfo), None)
        elif u_type.name == "REF" and here and old_reftype == _MemRefType.TEMP and winfo.reftype == _MemRefType.GRAD:
            # MemTracker files a gradient as one only when autograd hands it to .grad (its hook), some operators
            # after the one that made it: it is counted as a gradient from that operator on
            temp, grad = CATEGORIES.index("temporaries"), CATEGORIES.index("gradients")
            for row in self.rows[self._born.get(id(winfo), len(self.rows)) :]:
                row[temp], row[grad] = row[temp] - winfo.mem_consumed, row[grad] + winfo.mem_consumed
        if self.band_bytes and winfo.mem_consumed == self.band_bytes and winfo.device == self.device:
            is_act, was_act = winfo.reftype == _MemRefType.ACT, old_reftype == _MemRefType.ACT
            self._bands += {"ADD": is_act, "DEL": -is_act, "REF": is_act - was_act}.get(u_type.name, 0)

    def _phase(self) -> str:
        # One step runs forward → backward → optimizer; recomputation inside backward stays "backward".
        now = "optimizer" if self._in_opt else "backward" if self._mod_tracker.is_bw else "forward"
        return max(now, self.phases[-1] if self.phases else "forward", key=PHASES.index)

    def record(self) -> None:
        phase = self._phase()
        if phase != "forward" and self.phases and self.phases[-1] == "forward":
            live = [w for w, _ in list(self._WINFO.values()) if self._activation_here(w) and w.mem_consumed > 0]
            self.forward_end_activations = Counter(w.mem_consumed for w in live)
            self.layer_inputs_at_forward_end = self._live_layer_inputs()
        snap = self._curr_mem_snap.get(self.device, {})
        by_name = {_TRACKER_NAMES[k.value]: v for k, v in snap.items() if hasattr(k, "value")}
        self.rows.append([by_name.get(c, 0) for c in CATEGORIES])
        host = self._curr_mem_snap.get(self.host, {}) if self.host else {}
        self.host_rows.append(sum(v for k, v in host.items() if hasattr(k, "value")) + self.host_counter())
        self.phases.append(phase)
        self.band_rows.append(self._bands)
        if self.cost_rows is not None:  # a recorded event costs nothing; an operator's row is filled in by dispatch
            self.cost_rows.append([0] * len(costs.COLUMNS))
        if self.layer_rows is not None:
            self.layer_rows.append(self._layer())

    def _update_peak_stats(self, peak_state) -> None:  # MemTracker calls this after every operator
        self.record()

    def __enter__(self):
        costs.reset()
        return super().__enter__()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        rows = len(self.rows)
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if self.cost_rows is not None and len(self.rows) == rows + 1:  # the operator got a row: what it costs
            again = self._in_ac and self._mod_tracker.is_bw  # a checkpointed layer's forward, recomputed in backward
            self.cost_rows[-1] = costs.of_op(func, args, kwargs or {}, out, attention_module=self._in_attention, recompute=again)
        return out

    def _in_attention(self) -> bool:
        return any(p.rpartition(".")[2] in ("self_attn", "attention", "attn") for p in self._mod_tracker.parents)

    def run(self, step, model, optimizer) -> "TimelineTracker":
        """Track `step()` with `model` and `optimizer` (made before it) registered, so their tensors are filed under
        parameters, buffers and optimizer state rather than "other"."""
        self.track_external(model, optimizer)
        with self:
            self.record()
            step()
            self.record()
        return self

    def profile(self, source: str) -> MemoryProfile:
        return profile_of(self.device.type, source, self.rows, self.phases, self.host_rows, self.band_rows, self.band_bytes)


def profile_of(device: str, source: str, rows, phases, host, bands, band_bytes: int) -> MemoryProfile:
    """A MemoryProfile from a timeline (one row of bytes per category per event) and its phases."""
    timeline = np.asarray(rows, dtype=np.int64)
    i = int(timeline.sum(axis=1).argmax())
    peak = dict(zip(CATEGORIES, map(int, timeline[i])))
    host, bands = np.asarray(host, dtype=np.int64), np.asarray(bands, dtype=np.int64)
    return MemoryProfile(device, source, timeline, list(phases), sum(peak.values()), phases[i], peak, host, band_bytes, bands)


def measure(step, *, model, optimizer=None, device=None, band_bytes: int = 0, host_pool=None) -> MemoryProfile:
    """Run `step()` (forward, loss, backward, optimizer step) once and return its MemoryProfile."""
    device = tensor_device(device or next(model.parameters()).device)
    if device.type == "cuda":
        return measure_cuda(step, model=model, optimizer=optimizer, band_bytes=band_bytes, device=device)
    if device.type != "cpu":
        raise LongctxError(f"measure() supports the 'cpu' and 'cuda' devices, not {str(device)!r}.")
    tracker = TimelineTracker(device, band_bytes=band_bytes, host_counter=(lambda: host_pool.bytes) if host_pool else None)
    return tracker.run(step, model, optimizer).profile("memtracker")


def measure_cuda(
    step, *, model, optimizer=None, snapshot: str | Path | None = None, band_bytes: int = 0, device: str | torch.device = "cuda"
) -> MemoryProfile:
    """Run `step()` once on the GPU: MemTracker's categories and timeline (as on the CPU) next to the
    caching allocator's `max_memory_allocated`; `snapshot` saves `_record_memory_history`'s pickle."""
    device = tensor_device(device)  # refuses a machine without CUDA
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    baseline = torch.cuda.memory_allocated(device)
    if snapshot:
        # python stacks only: symbolising C++ frames can take minutes when the snapshot is taken
        torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")
    tracker = TimelineTracker(device, host="cpu", band_bytes=band_bytes)  # offloaded tensors land on "cpu"
    try:
        tracker.run(step, model, optimizer)
        torch.cuda.synchronize(device)
    finally:
        if snapshot:
            torch.cuda.memory._dump_snapshot(str(snapshot))  # pickle.dump(_snapshot()) into the file
            torch.cuda.memory._record_memory_history(enabled=None)
    profile, peak = tracker.profile("memtracker+cuda-allocator"), torch.cuda.max_memory_allocated(device)
    profile.note("cuda_allocator", allocator_peak_bytes=peak, allocator_baseline_bytes=baseline, allocator_peak_gib=peak / GIB)
    ratio, saved = (profile.peak_bytes / peak if peak else None), (str(snapshot) if snapshot else None)
    profile.note("cuda_allocator", tracker_over_allocator=ratio, snapshot=saved)
    return profile
