"""Every workaround for upstream behaviour (torch, transformers, trl, accelerate) lives here.

Each entry names the version it was written against and the upstream behaviour it works around, and
tests/test_compat.py holds a test that fails when upstream changes that behaviour (so the workaround
can be dropped or revised when a pin moves). Nothing here is applied at import time: callers opt in.
"""

from __future__ import annotations

import contextlib

import torch
from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType


class FrozenParamsMemTracker(MemTracker):
    """torch 2.13.0: `MemTracker._track_module_params_and_buffers` calls `param.register_hook` on every
    parameter, and `register_hook` raises "cannot register a hook on a tensor that doesn't require
    gradient" for frozen ones, so a LoRA/peft model cannot be tracked at all. This override installs the
    gradient hooks only on trainable parameters (frozen ones never get a gradient to track).
    Test: test_compat.py::test_memtracker_still_rejects_frozen_params.
    """

    def _track_module_params_and_buffers(self, module: torch.nn.Module, install_grad_hooks: bool = True):
        param_mem, buffer_mem = super()._track_module_params_and_buffers(module, install_grad_hooks=False)
        if install_grad_hooks:
            for param in module.parameters():
                if param.requires_grad and self._param_to_grad_hook_handles.get(param) is None:
                    hook = self._grad_hook_for()
                    self._param_to_grad_hook_handles[param] = (
                        param.register_hook(hook),
                        param.register_post_accumulate_grad_hook(lambda p, hook=hook: hook(p.grad)),
                    )
        return param_mem, buffer_mem

    def _grad_hook_for(self):
        def hook(grad: torch.Tensor) -> None:
            self._update_and_maybe_create_winfos(grad, _MemRefType.GRAD)

        return hook


@contextlib.contextmanager
def fake_tensor_training():
    """Patches needed to run a transformers training step under FakeTensorMode (the estimator).

    transformers 5.24.0: `masking_utils.find_packed_sequence_indices` treats fake tensors as "tracing"
    (`is_tracing`) and then always returns a packed-sequence index tensor, which makes the SDPA mask
    builder materialise an L×L mask that a real (eager) step never builds: +28 GiB at 96k tokens.
    Under this context it returns None, what eager returns for one unpacked sequence per row.
    Test: test_compat.py::test_packed_sequence_check_still_fires_on_fake_tensors.
    """
    from transformers import masking_utils

    original = masking_utils.find_packed_sequence_indices
    masking_utils.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        masking_utils.find_packed_sequence_indices = original


@contextlib.contextmanager
def fused_head_tiles(tokens: int | None = None, vocab: int | None = None):
    """Set the tile of TRL's chunked (fused) LM head for the duration of the context.

    trl 1.16.0 exposes no argument for it: the tile is `[TOKEN_CHUNK_SIZE, _CHUNKED_LOGPROB_CHUNK_SIZE]`
    (4096 × 32768), two module globals (`trl.kernels.chunked_logprob.TOKEN_CHUNK_SIZE`,
    `trl.trainer.utils._CHUNKED_LOGPROB_CHUNK_SIZE`) read at call time. On a CPU miniature a 4096-token
    tile covers the whole sequence, so the lesson shrinks it to show what chunking buys.
    Test: test_compat.py::test_fused_head_tile_globals_still_exist.
    """
    from trl.kernels import chunked_logprob
    from trl.trainer import utils as trl_utils

    before = chunked_logprob.TOKEN_CHUNK_SIZE, trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE
    chunked_logprob.TOKEN_CHUNK_SIZE = tokens or before[0]
    trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE = vocab or before[1]
    try:
        yield
    finally:
        chunked_logprob.TOKEN_CHUNK_SIZE, trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE = before


def register_cpu_ring_attention() -> bool:
    """torch 2.13.0: context parallelism's ring attention (torch.distributed.tensor.experimental.
    _context_parallel._attention) has DTensor handlers only for the CUDA SDPA kernels (flash, efficient,
    cuDNN). On a CPU, SDPA dispatches to `aten._scaled_dot_product_flash_attention_for_cpu` (and its
    `_backward`), which then fails with "... does not have a sharding strategy registered". This registers
    those two ops, routed to torch's own `_templated_ring_attention` / `_templated_ring_attention_backward`
    (the same ring, load balancing and merging the CUDA path uses). Idempotent; returns True when it
    registered anything.
    Test: test_compat.py::test_cp_ring_attention_still_lacks_the_cpu_kernels.
    """
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.experimental._context_parallel import _attention as cp

    aten = torch.ops.aten
    fwd = aten._scaled_dot_product_flash_attention_for_cpu.default
    bwd = aten._scaled_dot_product_flash_attention_for_cpu_backward.default
    if fwd in cp.custom_ops:
        return False

    def local(x):
        return x.to_local() if isinstance(x, DTensor) else x

    def handler(op_call, args, kwargs):
        ref = next(a for a in args if isinstance(a, DTensor))
        mesh, placements = ref.device_mesh, ref.placements
        args, kwargs = [local(a) for a in args], {k: local(v) for k, v in kwargs.items()}
        if kwargs.get("attn_mask") is not None:
            raise NotImplementedError("context parallelism supports causal attention without a mask only")
        kwargs.pop("attn_mask", None)
        if op_call is fwd:
            query, key, value, *rest = args
            dropout_p = rest[0] if rest else kwargs.pop("dropout_p", 0.0)
            is_causal = rest[1] if len(rest) > 1 else kwargs.pop("is_causal", False)
            outs = cp._templated_ring_attention(
                mesh.get_group(), 2, fwd, query, key, value, is_causal=is_causal, dropout_p=dropout_p, **kwargs
            )
        else:
            grad_out, query, key, value, out, logsumexp, dropout_p, is_causal = args[:8]
            outs = cp._templated_ring_attention_backward(
                mesh.get_group(),
                2,
                bwd,
                grad_out=grad_out,
                grad_out_name="grad_out",
                query=query,
                key=key,
                value=value,
                out=out,
                logsumexp=logsumexp,
                is_causal=is_causal,
                dropout_p=dropout_p,
                **kwargs,
            )
        return tuple(DTensor.from_local(t, mesh, placements, run_check=False) if isinstance(t, torch.Tensor) else t for t in outs)

    handler.__qualname__ = "register_cpu_ring_attention.handler"
    cp.custom_ops[fwd] = handler
    cp.custom_ops[bwd] = handler
    return True


def accelerate_fsdp_on_cpu() -> None:
    """accelerate 1.15.0: `AcceleratorState.__init__` switches a multi-process run to FSDP (needed by
    `ParallelismConfig(cp_size>1)`) only for GPU-like distributed types; a torchrun launch on CPUs stays
    `MULTI_CPU`, and `ParallelismConfig` then refuses it ("only compatible DistributedType.FSDP ...").
    This wraps the constructor: a MULTI_CPU state given an FSDP plugin or a context-parallel config
    becomes FSDP, in AcceleratorState and in PartialState's shared state, as it would on GPUs.
    Idempotent. Test: test_compat.py::test_accelerate_still_keeps_multi_cpu_out_of_fsdp.
    """
    from accelerate.state import AcceleratorState, PartialState
    from accelerate.utils import DistributedType

    if getattr(AcceleratorState.__init__, "_longctx_patched", False):
        return
    original = AcceleratorState.__init__

    def __init__(self, *args, fsdp_plugin=None, parallelism_config=None, **kwargs):
        original(self, *args, fsdp_plugin=fsdp_plugin, parallelism_config=parallelism_config, **kwargs)
        cp_enabled = parallelism_config is not None and parallelism_config.cp_enabled
        if self.distributed_type == DistributedType.MULTI_CPU and (fsdp_plugin is not None or cp_enabled):
            self.distributed_type = DistributedType.FSDP
            self.fsdp_plugin = fsdp_plugin
            PartialState._shared_state["distributed_type"] = DistributedType.FSDP

    __init__._longctx_patched = True
    __init__._longctx_original = original
    AcceleratorState.__init__ = __init__


@contextlib.contextmanager
def before_deepspeed_step(callback):
    """accelerate 1.15.0: `DeepSpeedEngineWrapper.backward` runs `engine.backward(loss)` and then, at once,
    `engine.step()` (which zeroes the gradients), so no Trainer callback ever sees DeepSpeed's gradients
    (`deepspeed.utils.safe_get_full_grad` only answers between the two). Under this context,
    `callback()` runs between them: that is how the Ulysses run's gradients are compared with one process.
    Test: test_compat.py::test_accelerate_deepspeed_backward_still_steps_at_once.
    """
    from accelerate.utils.deepspeed import DeepSpeedEngineWrapper

    original = DeepSpeedEngineWrapper.backward

    def backward(self, loss, sync_gradients=True, **kwargs):
        self.engine.set_gradient_accumulation_boundary(is_boundary=sync_gradients)
        self.engine.backward(loss, **kwargs)
        if sync_gradients:
            callback()
            self.engine.step()

    DeepSpeedEngineWrapper.backward = backward
    try:
        yield
    finally:
        DeepSpeedEngineWrapper.backward = original


@contextlib.contextmanager
def gpu_dispatch(stand_ins, *, attention: bool = True):
    """Take the GPU's side of every device-dependent branch of a training step traced on fake CPU tensors
    (a CPU-only torch aborts autograd on fake CUDA tensors, so the estimator cannot trace on those).

    trl 1.16.0, `trl.kernels.chunked_logprob` (TRL's fused LM head): `_use_triton(device)` is True on
    CUDA, where each tile is folded by the Triton kernels `_forward_kernel[grid]` / `_backward_kernel[grid]`
    (in place, no temporaries; the backward sizes its grid with `triton.cdiv`), and `_addmm_fp32`
    accumulates bf16 products straight into fp32 (`torch.addmm(..., out_dtype=torch.float32)`) when
    `acc.device.type == "cuda"`. On a CPU tensor both take the torch fallback: whole-tile fp32 temporaries
    and fp32 copies of both operands. Under this context the module's names are swapped for the GPU
    branch, with the Triton launches replaced by `stand_ins.TritonLaunch` (longctx.memory.gpu_kernels) (allocates nothing, as the
    kernels do). The module's tile loops (`for ... in range(...)` over row tiles of 4096 and over vocabulary
    tiles) run their first two iterations and their last: every later iteration allocates and frees exactly
    what the second does (its conversions replace the previous one's, the kernels write in place), so the
    peak and each category's maximum are the full loop's, and a 1M-token head traces 3 row tiles, not 256
    (`tile_range`; the CPU path keeps every iteration). Left as on the CPU: `trl.trainer.utils._use_triton`,
    which on a GPU makes the head score
    only the labelled rows (`hidden_states[mask]`): fake tensors cannot size a boolean-mask index, and with
    every position labelled (the estimate's step) the rows it copies are the rows the CPU path views.

    torch 2.13.0, `F.scaled_dot_product_attention`: on CPU tensors it dispatches to the CPU kernels; under
    this context (with `attention`) it goes through `gpu_kernels.sdpa_as_cuda`, the flash or
    memory-efficient kernel a CUDA GPU picks. Context parallelism keeps torch's CPU ring (attention=False).
    Test: test_compat.py::test_trl_fused_head_still_branches_on_the_device.
    """
    import types

    import trl.trainer.utils  # noqa: F401  imported first, so its own `_use_triton` binds the original
    from trl.kernels import chunked_logprob as kernel

    gpu_kernels = stand_ins

    def addmm_fp32(acc, a, b):
        # CUDA's `addmm(..., out_dtype=float32, out=acc)` accumulates in place and allocates nothing, so on
        # fake tensors there is nothing to record; calling it would also fail on torch 2.11, which has no
        # fake kernel for `aten::addmm.dtype_out` (2.13 decomposes it).
        if a.dtype not in (torch.float16, torch.bfloat16):
            acc.addmm_(a.float(), b.float())

    swaps = [
        (kernel, "_use_triton", lambda device: True),
        (kernel, "_forward_kernel", gpu_kernels.TritonLaunch()),
        (kernel, "_backward_kernel", gpu_kernels.TritonLaunch()),
        (kernel, "triton", types.SimpleNamespace(cdiv=lambda a, b: -(-a // b))),
        (kernel, "_addmm_fp32", addmm_fp32),
        (kernel, "range", tile_range),
    ]  # a module global shadows the builtin for that module alone
    if attention:
        swaps.append(
            (
                torch.nn.functional,
                "scaled_dot_product_attention",
                gpu_kernels.sdpa_as_cuda(torch.nn.functional.scaled_dot_product_attention),
            )
        )
    missing = object()
    before = [(owner, name, getattr(owner, name, missing)) for owner, name, _ in swaps]
    for owner, name, value in swaps:
        setattr(owner, name, value)
    try:
        yield
    finally:
        for owner, name, value in before:
            if value is missing:
                delattr(owner, name)
            else:
                setattr(owner, name, value)


def tile_range(*args):
    """`range` for TRL's tile loops under `gpu_dispatch`: the first two iterations and the last (see there)."""
    full = range(*args)
    return full if len(full) <= 3 else (full[0], full[1], full[-1])


# the name the stand-in is registered under: transformers treats any name holding "flash" as the flash-attn
# package and tries to import it
FLASH_ATTENTION_2 = "longctx_fa2_stand_in"


def register_flash_attention_2(stand_ins) -> str:
    """transformers 5.24.0 accepts `attn_implementation="flash_attention_2"` only with the flash-attn
    package installed (CUDA only). For an estimate, this registers the FlashAttention-2 stand-in
    (`gpu_kernels.flash_attention_2`) under its own name, with the flash mask function (no (seq × seq)
    mask is built, as on the real path), through transformers' public `AttentionInterface` /
    `AttentionMaskInterface`. Idempotent; returns the name to pass as `attn_implementation`.
    Test: test_compat.py::test_flash_attention_2_still_needs_the_package.
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

    AttentionInterface.register(FLASH_ATTENTION_2, stand_ins.flash_attention_2)
    AttentionMaskInterface.register(FLASH_ATTENTION_2, flash_attention_mask)
    return FLASH_ATTENTION_2
