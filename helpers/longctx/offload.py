"""Activation offload: keep each checkpointed layer's saved input in host memory between forward and backward.

With gradient checkpointing a decoder layer keeps only its input for the backward pass (the rest is
recomputed). transformers implements offload as torch's `save_on_cpu` around each layer's
`checkpoint`: the input is saved through the outer hooks and copied to host memory, so the device copy
dies as soon as the next layer no longer needs it. The same structure is used here three ways:

- on an accelerator: transformers' own path (`activation_checkpointing_kwargs={"offload": True}`);
- on the CPU, where device and host are the same memory, a `HostPool`: the saved inputs are copied into
  memory that torch's tracker does not see (NumPy buffers), counted apart, and copied back in backward.
  No RAM is saved on a CPU; what it measures is *residency*: which saved tensors would leave the device;
- under fake tensors (the estimator), with the `meta` device standing in for the host.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

from longctx.errors import LongctxError

MODES = (False, True, "host-pool")


def offloading_checkpoint(function, *args, pack, unpack, **kwargs):
    """`checkpoint(function, *args)` inside saved-tensor hooks, exactly as transformers wraps it with
    `save_on_cpu`: what the hooks see is the layer's input, saved for the recomputation."""
    from torch.utils.checkpoint import checkpoint

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        return checkpoint(function, *args, **kwargs)


def install(model, pack, unpack) -> None:
    """Turn on checkpointing with offloading hooks on a transformers model (replaces its checkpoint function)."""
    if not model.supports_gradient_checkpointing:
        raise LongctxError(f"{type(model).__name__} does not support gradient checkpointing, so there is nothing to offload.")
    model.activation_checkpointing_enable()  # the usual set-up (input grads, use_reentrant=False) first
    fn = functools.partial(offloading_checkpoint, pack=pack, unpack=unpack, use_reentrant=False)
    model._set_gradient_checkpointing(enable=True, gradient_checkpointing_func=fn)


@dataclass
class HostPool:
    """Separately accounted host memory for saved activations on a CPU (see the module docstring).

    `to_host_bytes` / `to_device_bytes` count the copies a real device would make over its host link
    (device→host in forward, host→device in backward); `bytes` is what the pool holds now. The mechanism, a
    pair of saved-tensor hooks, is rebuilt in a few lines in lesson 03's "Look inside"."""

    bytes: int = 0
    peak_bytes: int = 0
    tensors: int = 0
    peak_tensors: int = 0
    to_host_bytes: int = 0
    to_device_bytes: int = 0

    def pack(self, t: torch.Tensor):
        if t.numel() == 0:  # checkpoint's empty marker tensor: nothing to move
            return t
        # Through NumPy: a copy torch's MemTracker cannot see, i.e. memory that is not the device's.
        host = t.detach().contiguous().view(-1).view(torch.uint8).numpy().copy()
        self.bytes += host.nbytes
        self.peak_bytes = max(self.peak_bytes, self.bytes)
        self.tensors += 1
        self.peak_tensors = max(self.peak_tensors, self.tensors)
        self.to_host_bytes += host.nbytes
        return _Packed(host, t.dtype, tuple(t.shape))

    def unpack(self, packed):
        if isinstance(packed, torch.Tensor):
            return packed
        t = torch.from_numpy(packed.host).view(packed.dtype).view(packed.shape).clone()  # the copy back to device
        self.to_device_bytes += packed.host.nbytes
        self.bytes -= packed.host.nbytes
        self.tensors -= 1
        return t

    def install(self, model) -> None:
        install(model, self.pack, self.unpack)

    def summary(self) -> dict:
        return {
            "host_peak_bytes": self.peak_bytes,
            "host_peak_tensors": self.peak_tensors,
            "to_host_bytes": self.to_host_bytes,
            "to_device_bytes": self.to_device_bytes,
        }


@dataclass(frozen=True)
class _Packed:
    host: np.ndarray
    dtype: torch.dtype
    shape: tuple


def mode_for(device: str):
    """The offload setting that works on `device`: transformers' own path on an accelerator, the
    separately accounted pool on the CPU."""
    return "host-pool" if device == "cpu" else True


def host_bytes_per_step(layers: int, seq_len: int, hidden: int, dtype_bytes: int, batch: int = 1) -> int:
    """What offload moves to the host in one step: one saved input per layer, `batch × seq × hidden`."""
    return layers * batch * seq_len * hidden * dtype_bytes


def check_offload(offload, *, checkpointing: bool, device: str) -> None:
    """Refuse offload settings that cannot work, before a model is built."""
    if offload not in MODES:
        raise LongctxError(f"offload must be one of {MODES}, got {offload!r}.")
    if offload and not checkpointing:
        raise LongctxError(
            "Activation offload moves the tensors that gradient checkpointing saves; turn "
            "gradient_checkpointing on, or offload off."
        )
    if offload is True and device == "cpu":
        raise LongctxError(
            "offload=True asks for the saved activations to move from the accelerator to host memory, but this "
            "run is on the CPU, where device and host are the same memory (upstream's save_on_cpu would raise "
            "'pin_memory=True requires a CUDA or other accelerator backend'). Run on a GPU, or use "
            "offload='host-pool' to measure which tensors would leave the device (no memory is saved on a CPU)."
        )
    if offload == "host-pool" and device != "cpu":
        raise LongctxError(
            "offload='host-pool' is the CPU stand-in; on an accelerator use offload=True (transformers' save_on_cpu path)."
        )
