"""Activation offload: each checkpointed layer's saved input waits in host memory between forward and backward.
transformers wraps each layer's `checkpoint` in torch's `save_on_cpu`, whose saved-tensor hooks move the input the
recomputation needs off the device."""

from dataclasses import dataclass

import torch
from torch.utils.checkpoint import checkpoint

from longctx.errors import LongctxError


def install(model, pack, unpack) -> None:
    """Turn on checkpointing on a transformers model with `pack` / `unpack` as saved-tensor hooks around each layer's
    `checkpoint`, exactly where transformers puts `save_on_cpu`: what the hooks see is the layer's input."""

    def offloading_checkpoint(function, *args, **kwargs):
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            return checkpoint(function, *args, **{"use_reentrant": False, **kwargs})

    model.activation_checkpointing_enable()  # the usual set-up first (input grads; refuses a model without checkpointing)
    model._set_gradient_checkpointing(enable=True, gradient_checkpointing_func=offloading_checkpoint)


@dataclass
class HostPool:
    """Separately accounted host memory for saved activations on a CPU (rebuilt in a few lines in lesson 03's "Look
    inside"): `bytes` is what it holds now; `to_host_bytes` / `to_device_bytes` count a real device's copies."""

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
        self.tensors += 1
        self.to_host_bytes += host.nbytes
        self.peak_bytes, self.peak_tensors = max(self.peak_bytes, self.bytes), max(self.peak_tensors, self.tensors)
        return host, t.dtype, tuple(t.shape)

    def unpack(self, packed):
        if isinstance(packed, torch.Tensor):
            return packed
        host, dtype, shape = packed
        self.to_device_bytes += host.nbytes
        self.bytes -= host.nbytes
        self.tensors -= 1
        return torch.from_numpy(host).view(dtype).view(shape).clone()  # the copy back to the device

    def install(self, model) -> None:
        install(model, self.pack, self.unpack)

    def summary(self) -> dict:
        return {
            "host_peak_bytes": self.peak_bytes,
            "host_peak_tensors": self.peak_tensors,
            "to_host_bytes": self.to_host_bytes,
            "to_device_bytes": self.to_device_bytes,
        }


def pinned_bytes(profile) -> tuple[int, int]:
    """(bytes an offloaded step holds in host memory, bytes torch's pinned-memory allocator reserves for them): its
    CachingHostAllocator rounds every block up to a power of two, and transformers' offload moves one block per
    checkpointed layer input."""
    import math

    inputs = profile.host_peak_bytes // profile.band_bytes
    if inputs * profile.band_bytes != profile.host_peak_bytes:
        raise LongctxError("The profile's host bytes are not whole layer inputs: pinned_bytes reads transformers' offload.")
    return profile.host_peak_bytes, inputs * 2 ** math.ceil(math.log2(profile.band_bytes))


def host_bytes_per_step(layers: int, seq_len: int, hidden: int, dtype_bytes: int, batch: int = 1) -> int:
    """What offload moves to the host in one step: one saved input per layer, `batch × seq × hidden`."""
    return layers * batch * seq_len * hidden * dtype_bytes


def check_offload(offload: bool, *, checkpointing: bool, device: str) -> None:
    """Refuse offload settings that cannot work, before a model is built."""
    if offload and not checkpointing:
        raise LongctxError("Activation offload moves the tensors checkpointing saves: turn gradient_checkpointing on.")
    if offload and device == "cpu":
        raise LongctxError(
            "offload=True moves saved activations from an accelerator to host memory; on the CPU they are the same memory "
            "(upstream's save_on_cpu raises 'pin_memory=True requires a CUDA or other accelerator backend'). Run on a "
            "GPU; on the CPU, offload.HostPool measures which tensors would leave the device."
        )
