"""Every workaround for upstream behaviour (torch, transformers, trl, accelerate), each opted into by its callers
(nothing is applied at import). Each names the version and the upstream behaviour it works around, and
tests/test_compat.py holds a test that fails when upstream changes it, so it can be dropped when a pin moves."""

import contextlib
import types
import warnings
from unittest import mock

import torch
from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.experimental._context_parallel import _attention as cp


@contextlib.contextmanager
def _patched(*swaps):
    """Set each (owner, name, value) for the duration, then put the original back (or remove what was not there)."""
    with contextlib.ExitStack() as stack:
        for owner, name, value in swaps:
            stack.enter_context(mock.patch.object(owner, name, value, create=True))
        yield


class ReleasingMemTracker(MemTracker):
    """torch 2.13.0 (2.11.0 too, seen on an H200): ModTracker hangs a multi-grad hook on every module's inputs and
    outputs and never removes it; the hook's closure holds the grad_fn it hangs on, a cycle through C++ that Python's
    collector cannot see, so each tracked step's graph, and with it the parameters and gradients, outlives the model
    (benchmarks/results/gpu_check-h200-2026-12-04/1-first-try). This removes those hooks when tracking ends.
    Test: test_compat.py::test_modtracker_still_keeps_the_graph_alive."""

    def _swaps(self) -> list:  # what is patched while tracking
        from torch.distributed._tools import mod_tracker

        self._hooks, register = [], mod_tracker.register_multi_grad_hook

        def kept(*args, **kwargs):
            self._hooks.append(handle := register(*args, **kwargs))
            return handle

        return [(mod_tracker, "register_multi_grad_hook", kept)]

    def __enter__(self):
        self._unpatch = _patched(*self._swaps())
        self._unpatch.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        super().__exit__(*exc)
        self._unpatch.__exit__(None, None, None)
        for handle in self._hooks:
            handle.remove()


class FrozenParamsMemTracker(ReleasingMemTracker):
    """torch 2.13.0: `MemTracker` registers a gradient hook on every parameter, which raises for a frozen one,
    so a LoRA/peft model cannot be tracked. This installs the hooks on trainable parameters only.
    Test: test_compat.py::test_memtracker_still_rejects_frozen_params."""

    def _track_module_params_and_buffers(self, module: torch.nn.Module, install_grad_hooks: bool = True):
        def hook(grad: torch.Tensor) -> None:  # (a hook that returns a value replaces the gradient)
            self._update_and_maybe_create_winfos(grad, _MemRefType.GRAD)

        memory = super()._track_module_params_and_buffers(module, install_grad_hooks=False)
        for param in module.parameters():
            if install_grad_hooks and param.requires_grad and self._param_to_grad_hook_handles.get(param) is None:
                # (a gradient already moved to the host, longctx.levers.host_state, has left: nothing to file)
                after = param.register_post_accumulate_grad_hook(lambda p: None if p.grad is None else hook(p.grad))
                self._param_to_grad_hook_handles[param] = (param.register_hook(hook), after)
        return memory


class FakeStepMemTracker(FrozenParamsMemTracker):
    """torch 2.13.0: DTensor's sharding propagation, the first time it meets an op on some shapes, builds fake arguments
    (`ShardingPropagator._propagate_tensor_meta_non_cached`) in the active fake mode, which MemTracker cannot tell from
    the step's own ops when the step runs under that mode: the first CP trace at a length counts them, a later one does
    not. This runs them unrecorded, as it does a fake tensor's device query (it runs nothing; how often it is asked
    depends on caches). Test: test_compat.py::test_memtracker_still_tracks_dtensor_shape_propagation."""

    _propagating = False

    def _swaps(self) -> list:
        from torch.distributed.tensor._sharding_prop import ShardingPropagator

        original = ShardingPropagator._propagate_tensor_meta_non_cached

        def propagate(propagator, op_schema):
            with _patched((self, "_propagating", True)):
                return original(propagator, op_schema)

        return [*super()._swaps(), (ShardingPropagator, "_propagate_tensor_meta_non_cached", propagate)]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self._propagating or func is torch.ops.prim.device.default:
            return func(*args, **(kwargs or {}))
        return super().__torch_dispatch__(func, types, args, kwargs)


def fake_tensor_training():
    """transformers 5.24.0: `masking_utils.find_packed_sequence_indices` takes fake tensors for tracing and returns
    a packed-sequence index, so the SDPA mask builder materialises an L×L mask eager never builds (+28 GiB at 96k
    tokens). Under this context it returns None, as eager does for one unpacked sequence per row.
    Test: test_compat.py::test_packed_sequence_check_still_fires_on_fake_tensors."""
    from transformers import masking_utils

    return _patched((masking_utils, "find_packed_sequence_indices", lambda position_ids: None))


def fused_head_tiles(tokens: int | None = None, vocab: int | None = None):
    """trl 1.16.0 has no argument for the tile of its fused LM head: two module globals read at call time
    (4096 × 32768). Set for the context, so a CPU miniature (whose sequence fits one tile) shows what chunking buys.
    Test: test_compat.py::test_fused_head_tile_globals_still_exist."""
    from trl.kernels import chunked_logprob
    from trl.trainer import utils as trl_utils

    return _patched(
        (chunked_logprob, "TOKEN_CHUNK_SIZE", tokens or chunked_logprob.TOKEN_CHUNK_SIZE),
        (trl_utils, "_CHUNKED_LOGPROB_CHUNK_SIZE", vocab or trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE),
    )


def register_cpu_ring_attention() -> None:
    """torch 2.13.0: context parallelism's ring attention has DTensor handlers for the CUDA SDPA kernels only; on a
    CPU, `aten._scaled_dot_product_flash_attention_for_cpu` (and its backward) fails with "... does not have a
    sharding strategy registered". This routes both to torch's own `_templated_ring_attention(_backward)`, the
    ring the CUDA path uses. Idempotent. Test: test_compat.py::test_cp_ring_attention_still_lacks_the_cpu_kernels."""
    aten = torch.ops.aten
    fwd = aten._scaled_dot_product_flash_attention_for_cpu.default
    bwd = aten._scaled_dot_product_flash_attention_for_cpu_backward.default
    if fwd in cp.custom_ops:
        return

    def local(x):
        return x.to_local() if isinstance(x, DTensor) else x

    def handler(op_call, args, kwargs):
        ref = next(a for a in args if isinstance(a, DTensor))
        mesh, placements = ref.device_mesh, ref.placements
        args, kwargs = [local(a) for a in args], {k: local(v) for k, v in kwargs.items()}
        if kwargs.pop("attn_mask", None) is not None:
            raise NotImplementedError("context parallelism supports causal attention without a mask only")
        if op_call is fwd:
            ring, names, more = cp._templated_ring_attention, ("query", "key", "value", "dropout_p", "is_causal"), {}
        else:
            ring, more = cp._templated_ring_attention_backward, {"grad_out_name": "grad_out"}
            names = ("grad_out", "query", "key", "value", "out", "logsumexp", "dropout_p", "is_causal")
        outs = ring(mesh.get_group(), 2, op_call, **dict(zip(names, args)), **more, **kwargs)
        return tuple(DTensor.from_local(t, mesh, placements, run_check=False) if isinstance(t, torch.Tensor) else t for t in outs)

    cp.custom_ops[fwd] = cp.custom_ops[bwd] = handler


def accelerate_fsdp_on_cpu() -> None:
    """accelerate 1.15.0: `AcceleratorState.__init__` switches a multi-process run to FSDP (which
    `ParallelismConfig(cp_size>1)` needs) only for GPU-like types; a torchrun launch on CPUs stays `MULTI_CPU` and
    is refused. This wraps the constructor so such a state becomes FSDP, as on GPUs. Idempotent.
    Test: test_compat.py::test_accelerate_still_keeps_multi_cpu_out_of_fsdp."""
    from accelerate.state import AcceleratorState, PartialState
    from accelerate.utils import DistributedType

    original = AcceleratorState.__init__
    if getattr(original, "_longctx_patched", False):
        return

    def __init__(self, *args, fsdp_plugin=None, parallelism_config=None, **kwargs):
        original(self, *args, fsdp_plugin=fsdp_plugin, parallelism_config=parallelism_config, **kwargs)
        cp_enabled = parallelism_config is not None and parallelism_config.cp_enabled
        if self.distributed_type == DistributedType.MULTI_CPU and (fsdp_plugin is not None or cp_enabled):
            self.distributed_type = DistributedType.FSDP
            self.fsdp_plugin = fsdp_plugin
            PartialState._shared_state["distributed_type"] = DistributedType.FSDP

    __init__._longctx_patched, __init__._longctx_original = True, original
    AcceleratorState.__init__ = __init__


def before_deepspeed_step(callback):
    """accelerate 1.15.0: `DeepSpeedEngineWrapper.backward` runs `engine.backward(loss)` and at once `engine.step()`
    (which zeroes the gradients), so no callback sees DeepSpeed's gradients. Under this context `callback()` runs
    between the two: how the Ulysses run's gradients are compared with one process's.
    Test: test_compat.py::test_accelerate_deepspeed_backward_still_steps_at_once."""
    from accelerate.utils.deepspeed import DeepSpeedEngineWrapper

    def backward(self, loss, sync_gradients=True, **kwargs):
        self.engine.set_gradient_accumulation_boundary(is_boundary=sync_gradients)
        self.engine.backward(loss, **kwargs)
        if sync_gradients:
            callback()
            self.engine.step()

    return _patched((DeepSpeedEngineWrapper, "backward", backward))


def gpu_dispatch(stand_ins, *, attention: bool = True):
    """Take the GPU's side of each device-dependent branch of a step traced on fake CPU tensors (a CPU-only torch
    aborts autograd on fake CUDA tensors). trl 1.16.0's fused head (`trl.kernels.chunked_logprob`) folds each tile in
    place with Triton kernels and an fp32 `_addmm_fp32` on CUDA, with whole-tile fp32 temporaries on a CPU: here the
    CUDA branch runs, with `stand_ins.TritonLaunch` (allocating nothing, as the kernels) and the tile loops cut to
    their first two iterations and their last (`tile_range`, the second counted for the skipped ones by
    `stand_ins.repeated`; the fp32 products charged as FLOPs through `stand_ins.charge`). `trl.trainer.utils.
    _use_triton` stays the CPU's (fake tensors cannot size its mask index; with every position labelled the rows are
    the same). torch 2.13.0: with
    `attention`, SDPA runs the kernel a CUDA GPU picks (`stand_ins.sdpa_as_cuda`); CP keeps the CPU ring.
    Test: test_compat.py::test_trl_fused_head_still_branches_on_the_device."""
    import trl.trainer.utils  # noqa: F401  imported first, so its own `_use_triton` binds the original
    from trl.kernels import chunked_logprob as kernel

    def addmm_fp32(acc, a, b):
        # CUDA's out_dtype addmm writes into acc and allocates nothing; torch 2.11 has no fake kernel for it either
        if a.dtype not in (torch.float16, torch.bfloat16):
            acc.addmm_(a.float(), b.float())
        else:
            stand_ins.charge(linear=2 * a.shape[0] * a.shape[1] * b.shape[1])  # the FLOPs of the product it stands for

    swaps = [
        (kernel, "_use_triton", lambda device: True),
        (kernel, "_forward_kernel", stand_ins.TritonLaunch()),
        (kernel, "_backward_kernel", stand_ins.TritonLaunch()),
        (kernel, "triton", types.SimpleNamespace(cdiv=lambda a, b: -(-a // b))),
        (kernel, "_addmm_fp32", addmm_fp32),
        (kernel, "range", lambda *a: tile_range(*a, repeated=stand_ins.repeated)),  # a module global shadows the builtin
    ]
    if attention:
        sdpa = stand_ins.sdpa_as_cuda(torch.nn.functional.scaled_dot_product_attention)
        swaps.append((torch.nn.functional, "scaled_dot_product_attention", sdpa))
    return _patched(*swaps)


def tile_range(*args, repeated=None):
    """`range` for TRL's tile loops under `gpu_dispatch`: the first two iterations and the last (each later one
    allocates what the second does, and computes as much: under `repeated(n)` the second counts n times)."""
    full = range(*args)
    if len(full) <= 3:
        yield from full
        return
    yield full[0]
    with repeated(len(full) - 2) if repeated else contextlib.nullcontext():  # the loop's body runs while this waits
        yield full[1]
    yield full[-1]


# transformers treats any attention name holding "flash" as the flash-attn package: the stand-in's own name
FLASH_ATTENTION_2 = "longctx_fa2_stand_in"


def register_flash_attention_2(stand_ins) -> str:
    """transformers 5.24.0 accepts `attn_implementation="flash_attention_2"` only with the flash-attn package (CUDA
    only). This registers `stand_ins.flash_attention_2`, with the flash mask function (no seq × seq mask), through
    the public `AttentionInterface` / `AttentionMaskInterface`; returns the name to pass as `attn_implementation`.
    Test: test_compat.py::test_flash_attention_2_still_needs_the_package."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

    AttentionInterface.register(FLASH_ATTENTION_2, stand_ins.flash_attention_2)
    AttentionMaskInterface.register(FLASH_ATTENTION_2, flash_attention_mask)
    return FLASH_ATTENTION_2


def deepspeed_without_shm_build() -> None:
    """deepspeed 0.19.8: on a CPU, `TorchBackend.__init__` (deepspeed/comm/torch.py, `build_shm_op`) JIT-compiles a
    shared-memory all-reduce into torch's per-user extension folder (~/.cache/torch_extensions, shared by every venv)
    behind a lock file that torch waits on without a time limit (`torch.utils.file_baton.FileBaton.wait`): a build
    killed midway leaves the lock, and every later Ulysses run on the machine hangs. The op only speeds up CPU
    all-reduces; without it DeepSpeed calls torch.distributed's gloo collectives. This marks it incompatible in
    DeepSpeed's own table (`deepspeed.ops.__compatible_ops__`, which `build_shm_op` reads before building), so
    nothing is built, loaded or locked. Test: test_compat.py::test_deepspeed_still_builds_its_shm_op_on_cpu."""
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def cuda_autocast_policy() -> dict[str, list[str]]:
    """torch 2.13.0's CUDA autocast policy as its header states it (torch/include/ATen/autocast_mode.h, the lists CUDA
    registers: AT_FORALL_LOWER_PRECISION_FP, AT_FORALL_FP32, AT_FORALL_FP32_SET_OPT_DTYPE, AT_FORALL_PROMOTE): policy →
    aten ops as "name" or "name.overload"."""
    import re
    from pathlib import Path

    header = (Path(torch.__file__).parent / "include" / "ATen" / "autocast_mode.h").read_text()
    lists = {"lower_precision": "LOWER_PRECISION_FP", "fp32": "FP32", "fp32_set_opt_dtype": "FP32_SET_OPT_DTYPE"}
    lists["promote"] = "PROMOTE"
    policy = {}
    for name, macro in lists.items():
        body = re.search(rf"#define AT_FORALL_{macro}\(_\)((?:[^\n]*\\\n)*[^\n]*)", header)[1]
        entries = re.findall(r"_\((\w+)(?:,\s*(\w+))?\)", body)
        policy[name] = [f"{op}.{overload}" if overload else op for op, overload in entries]
    return policy


@contextlib.contextmanager
def cuda_autocast_policy_on_cpu():
    """torch 2.13.0: a step traced on fake CPU tensors for a CUDA GPU cannot run CUDA's autocast (a CPU-only torch
    dispatches no CUDA), and the CPU's own autocast has another policy: on it layer_norm, softmax, sum and pow stay in
    bf16, where CUDA runs them in fp32 (a Trainer with bf16=True runs its forward under CUDA's). For the block, each op
    of CUDA's lists (cuda_autocast_policy) gets a kernel at the AutocastCPU key that casts as CUDA's does: so
    torch.autocast("cpu", dtype) in it, a checkpointed layer's recomputation included, is CUDA's. Lower precision
    casts floating inputs to the autocast dtype; fp32 to fp32; fp32_set_opt_dtype asks fp32 out of a lower-precision
    input unless a dtype is given; promote casts to the widest (like CUDA's, never an fp64 tensor).
    Test: test_compat.py::test_the_cuda_autocast_policy_holds."""
    from torch.utils._pytree import tree_flatten, tree_map

    keys = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)

    def kernel(op, policy):
        dtype_at = next((i for i, a in enumerate(op._schema.arguments) if a.name == "dtype"), None)

        def cast(*args, **kwargs):
            low = torch.get_autocast_dtype("cpu")
            eligible = (torch.float32, low)
            floats = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor) and t.dtype in eligible]
            to = {"lower_precision": low, "fp32": torch.float32}.get(policy)
            if policy == "promote" and floats:
                to = torch.float32 if any(t.dtype == torch.float32 for t in floats) else low
            given = kwargs.get("dtype", args[dtype_at] if dtype_at is not None and dtype_at < len(args) else None)
            if policy == "fp32_set_opt_dtype" and given is None and any(t.dtype == low for t in floats):
                kwargs = {**kwargs, "dtype": torch.float32}
            if to is not None:
                args, kwargs = tree_map(
                    lambda t: t.to(to) if isinstance(t, torch.Tensor) and t.dtype in eligible else t, (args, kwargs)
                )
            with torch._C._ExcludeDispatchKeyGuard(keys):
                return op(*args, **kwargs)

        return cast

    library = torch.library.Library("aten", "IMPL")
    try:
        with warnings.catch_warnings():  # torch's word that the CPU's kernel is overridden, which is the point
            warnings.filterwarnings("ignore", "Warning only once for all operators")
            for policy, ops in cuda_autocast_policy().items():
                for name in ops:
                    base, _, overload = name.partition(".")
                    packet = getattr(torch.ops.aten, base, None)
                    if packet is None or (overload or "default") not in packet.overloads():
                        continue  # named in the header, not built into this torch (e.g. _thnn_fused_lstm_cell)
                    library.impl(name, kernel(getattr(packet, overload or "default"), policy), "AutocastCPU")
        yield
    finally:
        library._destroy()


@contextlib.contextmanager
def lora_adapters_where_made():
    """peft 0.21.2 moves each new LoRA adapter onto its base layer's device and dtype (`LoraModel._replace_module` and
    `BaseTunerLayer._move_adapter_to_device_of_base_layer`, both through `Module.to`), which torch 2.13 cannot do to
    fake tensors: `_apply(): Couldn't swap Linear.weight`. The estimator makes the adapters where they belong (the fake
    device, in fp32, as peft's `autocast_adapter_dtype` keeps them on a bf16 base), so while they are made the moves are
    skipped and the new module is only set in its parent's place. Test: test_compat.py::test_peft_cannot_move_a_fake_adapter."""
    from peft.tuners.lora.model import LoraModel
    from peft.tuners.tuners_utils import BaseTunerLayer

    def replace(self, parent, child_name, new_module, child):
        setattr(parent, child_name, new_module)

    stay = (
        (BaseTunerLayer, "_move_adapter_to_device_of_base_layer", lambda self, *a, **k: None),
        (LoraModel, "_replace_module", replace),
    )
    with _patched(*stay):
        yield
