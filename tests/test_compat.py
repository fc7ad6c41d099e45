"""Each workaround in longctx.compat has a test here that fails when upstream changes what it patches."""

import dataclasses
import gc
import inspect
import sys
import types
import weakref

import pytest
import torch
from accelerate.state import AcceleratorState
from accelerate.utils.deepspeed import DeepSpeedEngineWrapper
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.autograd.graph import save_on_cpu
from torch.distributed._tools.mem_tracker import MemTracker
from torch.distributed.tensor import DTensor, Shard
from torch.distributed.tensor.experimental._context_parallel import _attention as cp
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import AutoModelForCausalLM, TrainingArguments, masking_utils
from transformers.utils.generic import is_flash_attention_requested
from trl import SFTConfig
from trl.kernels import chunked_logprob
from trl.kernels import chunked_logprob as kernel
from trl.models.activation_offloading import OffloadActivations
from trl.trainer import utils as trl_utils

from longctx import LongctxError, compat, models
from longctx.compat import FakeStepMemTracker, FrozenParamsMemTracker, fused_head_tiles, gpu_dispatch
from longctx.memory import gpu_kernels
from longctx.memory.estimate import _fake_mesh, estimate
from longctx.memory.measure import TimelineTracker


def _half_frozen():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    model[0].weight.requires_grad_(False)
    return model


def test_memtracker_still_rejects_frozen_params():
    """torch 2.13.0: MemTracker registers grad hooks on frozen params and raises. When this test fails,
    upstream fixed it: drop FrozenParamsMemTracker and use MemTracker directly."""
    model = _half_frozen()
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        with MemTracker():
            model(torch.randn(2, 4)).sum().backward()


def test_frozen_params_tracker_counts_only_trainable_gradients():
    model = _half_frozen()
    tracker = FrozenParamsMemTracker()
    tracker.track_external(model)
    with tracker:
        model(torch.randn(2, 4)).sum().backward()
    snap = tracker.get_tracker_snapshot()[torch.device("cpu")]
    grads = {k.value: v for k, v in snap.items() if hasattr(k, "value")}["Gradient"]
    trainable = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    assert grads == trainable


@pytest.mark.parametrize("tracker", ["upstream", "measure's"])
def test_modtracker_still_keeps_the_graph_alive(tracker):
    """torch 2.13.0: a step tracked by MemTracker keeps every parameter of the model alive after the model is gone
    (ModTracker's multi-grad hooks). When the upstream case fails, upstream removes them: drop
    compat.ReleasingMemTracker."""

    net = AutoModelForCausalLM.from_config(models.config("tiny"))
    params = [weakref.ref(p) for p in net.parameters()]
    ids = torch.randint(0, net.config.vocab_size, (1, 16))
    with MemTracker() if tracker == "upstream" else TimelineTracker():
        net(input_ids=ids, labels=ids).loss.backward()
    del net
    gc.collect()
    assert any(p() is not None for p in params) is (tracker == "upstream")


def test_packed_sequence_check_still_fires_on_fake_tensors():
    """transformers 5.24.0 returns a packed-sequence index for fake tensors even for one plain sequence.
    When this fails, upstream returns None there too: drop compat.fake_tensor_training's patch."""
    with FakeTensorMode():
        position_ids = torch.arange(16).unsqueeze(0)
        assert masking_utils.find_packed_sequence_indices(position_ids) is not None
    assert masking_utils.find_packed_sequence_indices(torch.arange(16).unsqueeze(0)) is None


def test_fused_head_tile_globals_still_exist():
    """trl 1.16.0 sizes the fused head's tile by two module globals (4096 × 32768). When this fails, the
    knob moved: update compat.fused_head_tiles."""

    assert (chunked_logprob.TOKEN_CHUNK_SIZE, trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE) == (4096, 32768)
    with fused_head_tiles(256, 1024):
        assert (chunked_logprob.TOKEN_CHUNK_SIZE, trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE) == (256, 1024)
    assert chunked_logprob.TOKEN_CHUNK_SIZE == 4096


def test_cp_ring_attention_still_lacks_the_cpu_kernels():
    """torch 2.13: the ring-attention handler table covers CUDA SDPA kernels only. When torch adds the CPU
    flash kernel itself, compat.register_cpu_ring_attention can go."""
    cpu_fwd = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    assert torch.ops.aten._scaled_dot_product_flash_attention.default in cp.custom_ops
    registered_by_us = getattr(cp.custom_ops.get(cpu_fwd), "__qualname__", "") == "register_cpu_ring_attention.<locals>.handler"
    assert cpu_fwd not in cp.custom_ops or registered_by_us


def test_accelerate_still_keeps_multi_cpu_out_of_fsdp():
    """accelerate 1.15: the switch to FSDP for a context-parallel run lists GPU-like types only. When
    MULTI_CPU joins that list, compat.accelerate_fsdp_on_cpu can go."""

    init = AcceleratorState.__init__
    init = getattr(init, "_longctx_original", init)  # the upstream constructor, patched or not
    source = inspect.getsource(init)
    switch = source[source.index("DistributedType.MULTI_GPU,") : source.index("self.distributed_type = DistributedType.FSDP")]
    assert "MULTI_NEURON" in switch and "MULTI_CPU" not in switch


def test_accelerate_deepspeed_backward_still_steps_at_once():
    """accelerate 1.15: DeepSpeedEngineWrapper.backward = set boundary, engine.backward, engine.step.
    compat.before_deepspeed_step re-implements exactly that with a callback in between; if upstream
    changes the method, the copy must be revisited."""

    code = [
        line.strip()
        for line in inspect.getsource(DeepSpeedEngineWrapper.backward).splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    assert code[1:] == [
        "self.engine.set_gradient_accumulation_boundary(is_boundary=sync_gradients)",
        "self.engine.backward(loss, **kwargs)",
        "if sync_gradients:",
        "self.engine.step()",
    ]


def test_deepspeed_still_builds_its_shm_op_on_cpu(monkeypatch):
    """deepspeed 0.19.8 on a CPU: `build_shm_op` JIT-compiles the shared-memory op (behind torch's unbounded lock)
    whenever its table of compatible ops lists it. When it stops doing so, compat.deepspeed_without_shm_build can go;
    with it in place, nothing is built."""
    pytest.importorskip("deepspeed")
    import importlib

    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator

    from longctx import compat

    ds_torch = importlib.import_module("deepspeed.comm.torch")  # (deepspeed.comm's `torch` is torch itself)
    builder = type(get_accelerator().create_op_builder("ShareMemCommBuilder"))
    built = []
    monkeypatch.setattr(builder, "jit_load", lambda self, verbose=True: built.append(self.NAME) or "op")
    table = deepspeed.ops.__compatible_ops__
    monkeypatch.setitem(table, "deepspeed_shm_comm", table["deepspeed_shm_comm"])  # put back after the test
    assert table["deepspeed_shm_comm"] is True
    assert ds_torch.build_shm_op() == "op" and built == ["deepspeed_shm_comm"]
    compat.deepspeed_without_shm_build()
    assert ds_torch.build_shm_op() is None and built == ["deepspeed_shm_comm"]


def test_trl_fused_head_still_branches_on_the_device():
    forward, backward = (
        inspect.getsource(f) for f in (kernel.ChunkedLogProbFunction.forward, kernel.ChunkedLogProbFunction.backward)
    )
    assert "_forward_kernel[(n,)] if _use_triton(device) else _forward_tile" in forward
    assert "triton.cdiv" in backward and "if _use_triton(hidden.device)" in backward
    assert 'acc.device.type == "cuda"' in inspect.getsource(kernel._addmm_fp32)
    assert not kernel._use_triton(torch.device("cpu"))  # here: the torch fallback, with its fp32 temporaries
    # gpu_dispatch's tile_range relies on the loops being plain `range` loops of the module
    assert "for token_start in range(0, N, TOKEN_CHUNK_SIZE):" in forward and "in range(0, vocab, chunk_size):" in backward


def test_the_head_traced_on_three_row_tiles_has_the_full_loops_memory(monkeypatch):
    seq = 4 * 4096 + 512  # five row tiles: the middle two are left out
    kwargs = dict(checkpointing=True, mixed_precision=False)
    short = estimate("tiny-qwen-vocab", seq, **kwargs)
    monkeypatch.setattr(compat, "tile_range", lambda *a, repeated=None: range(*a))  # every iteration
    full = estimate("tiny-qwen-vocab", seq, **kwargs)
    assert short.peak_bytes == full.peak_bytes and short.max_by_category() == full.max_by_category()
    assert len(short.timeline) < len(full.timeline)
    monkeypatch.undo()
    assert list(compat.tile_range(0, 20, 4)) == [0, 4, 16] and list(compat.tile_range(0, 10, 4)) == [0, 4, 8]


def test_gpu_dispatch_swaps_the_head_and_attention_and_puts_them_back():
    before = (kernel._use_triton, kernel._addmm_fp32, torch.nn.functional.scaled_dot_product_attention)
    from longctx.memory import gpu_kernels

    with gpu_dispatch(gpu_kernels):
        assert kernel._use_triton(torch.device("cpu"))
        assert torch.nn.functional.scaled_dot_product_attention is not before[2]
    assert (kernel._use_triton, kernel._addmm_fp32, torch.nn.functional.scaled_dot_product_attention) == before
    assert not hasattr(kernel, "triton")  # not importable here: the stand-in for triton.cdiv is removed again


def test_flash_attention_2_still_needs_the_package():
    import importlib.util

    # any name holding "flash" is taken for the flash-attn package, hence the stand-in's own name
    assert is_flash_attention_requested(requested_attention_implementation="my_flash_thing")
    assert not is_flash_attention_requested(requested_attention_implementation=compat.FLASH_ATTENTION_2)
    if importlib.util.find_spec("flash_attn") is None:
        with pytest.raises((ImportError, ValueError)):
            AutoModelForCausalLM.from_config(models.config("tiny"), attn_implementation="flash_attention_2")
    from longctx.memory import gpu_kernels

    name = compat.register_flash_attention_2(gpu_kernels)
    assert AutoModelForCausalLM.from_config(models.config("tiny"), attn_implementation=name).config._attn_implementation == name


def test_the_flash_stand_in_allocates_what_flash_attention_2_allocates():
    b, h, hk, s, d = 1, 8, 2, 1000, 64  # grouped K/V heads, a length that is not a multiple of 128
    with pytest.raises(LongctxError, match="FakeTensorMode only"):
        gpu_kernels.flash_attention(*(torch.zeros(b, n, s, d) for n in (h, hk, hk)))
    with FakeTensorMode():
        q = torch.randn(b, h, s, d, dtype=torch.bfloat16, requires_grad=True)
        k, v = (torch.randn(b, hk, s, d, dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
        tracker = TimelineTracker("cpu")
        with tracker:
            out = gpu_kernels.flash_attention(q, k, v)
            assert out.shape == q.shape and out.transpose(1, 2).is_contiguous()  # (b, s, h, d) memory
            out.sum().backward()
        peak = tracker.profile("fake-tensors").peak_breakdown
    # flash_api.cpp mha_bwd: softmax_d and dq_accum (fp32, rows rounded to 128), dk/dv expanded to 8 heads, and
    # the gradients themselves
    scratch = b * h * 1024 * 4 + b * 1024 * h * d * 4 + 2 * b * s * h * d * 2
    grads = (b * h * s * d + 2 * b * hk * s * d) * 2
    assert peak["temporaries"] == scratch + grads


def test_cuda_sdpa_picks_flash_without_a_mask_and_the_efficient_kernel_with_one():
    sdpa = gpu_kernels.sdpa_as_cuda(torch.nn.functional.scaled_dot_product_attention)
    with FakeTensorMode():
        q = torch.randn(1, 4, 256, 64, dtype=torch.bfloat16, requires_grad=True)
        assert type(sdpa(q, q, q, is_causal=True).grad_fn).__name__ == "FlashAttentionBackward"  # the stand-in
        mask = torch.ones(1, 1, 256, 256, dtype=torch.bool)
        assert "EfficientAttention" in type(sdpa(q, q, q, attn_mask=mask).grad_fn).__name__
        # fp32: no flash kernel on a GPU either; the call is left to the original (here the CPU's kernel)
        assert type(sdpa(q.float(), q.float(), q.float()).grad_fn).__name__ != "FlashAttentionBackward"


def test_what_the_lessons_say_about_the_installed_libraries_still_holds():
    """Statements in the notebooks' prose about trl 1.16 / transformers 5.24 / torch 2.13, checked against the
    installed sources: when one fails, the notebook named in the message needs its text updated."""

    # 01: the fused head is the default loss and tiles 4096 rows on every device; chunked_nll is an alias
    assert SFTConfig.__dataclass_fields__["loss_type"].default == "nll"
    assert chunked_logprob.TOKEN_CHUNK_SIZE == 4096
    assert '"chunked_nll"`: deprecated alias of `"nll"`' in SFTConfig.__doc__
    # 03: the guide's gradient_checkpointing_kwargs is a deprecated alias; save_on_cpu copies on the current
    # stream; TRL's own activation_offloading uses a second stream
    fields = {f.name for f in dataclasses.fields(TrainingArguments)}
    assert {"activation_checkpointing_kwargs", "gradient_checkpointing_kwargs"} <= fields
    assert "`gradient_checkpointing*` are deprecated aliases" in inspect.getsource(TrainingArguments.__post_init__)
    source = inspect.getsource(save_on_cpu)
    assert "non_blocking" in source and "Stream" not in source
    assert "activation_offloading" in {f.name for f in dataclasses.fields(SFTConfig)}
    assert "self.s1 = self.device_module.Stream()" in inspect.getsource(OffloadActivations.__init__)


def test_no_out_dtype_addmm_reaches_the_dispatcher_in_an_estimate():
    """torch 2.11 registers no fake kernel for `aten::addmm.dtype_out` (2.13 decomposes it): the GPU path's
    fp32 accumulation must allocate nothing and call nothing on fake tensors, as the CUDA kernel it stands
    for writes in place."""

    class Ops(TorchDispatchMode):
        seen: list = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen.append((func, dict(kwargs or {})))
            return func(*args, **(kwargs or {}))

    ops = Ops()
    with ops:
        profile = estimate("tiny", 1024, loss="chunked", dtype="bf16", device="cuda")
    assert profile.peak_bytes > 0
    names = {str(func) for func, _ in ops.seen}
    assert any("mm" in n for n in names), "the recorder saw no matrix product: it did not watch the step"
    assert not [f for f, kw in ops.seen if "out_dtype" in kw or "dtype_out" in str(f)]


def test_memtracker_still_tracks_dtensor_shape_propagation():
    """torch 2.13.0: under a FakeTensorMode the step runs in, MemTracker tracks the fake arguments DTensor's sharding
    propagation builds the first time it meets an operator's shapes. When the first half fails, upstream skips them:
    drop compat.FakeStepMemTracker."""

    def tracked_ops(tracker_class, shape) -> list:
        seen = []

        class Seen(tracker_class):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                self.func = func
                return super().__torch_dispatch__(func, types, args, kwargs)

            def _update_peak_stats(self, peak_state):  # MemTracker calls it after each operator it tracked
                seen.append(self.func)
                super()._update_peak_stats(peak_state)

        with _fake_mesh(2) as mesh, FakeTensorMode():
            x = DTensor.from_local(torch.empty(shape), mesh, [Shard(0)], run_check=False)
            with Seen():
                x.detach()  # a view: nothing to allocate but what propagation makes
        return seen

    assert torch.ops.aten.empty_strided.default in tracked_ops(MemTracker, (7, 13))  # shapes no other test uses
    assert torch.ops.aten.empty_strided.default not in tracked_ops(FakeStepMemTracker, (7, 17))


def test_the_cuda_autocast_policy_holds(monkeypatch):
    """compat.cuda_autocast_on_cpu gives fake CPU tensors CUDA's autocast. Checked with torch's own CUDA autocast test
    lists (torch/testing/_internal/autocast_test_lists.py: the dtype each op must give under CUDA's autocast), run
    on the CPU under the emulation; and the CPU's own policy, which it replaces for the block, still differs (when it
    stops differing, CPU autocast alone would do)."""

    monkeypatch.setitem(sys.modules, "expecttest", sys.modules.get("expecttest") or types.SimpleNamespace(TestCase=object))
    from torch.testing._internal.autocast_test_lists import AutocastTestLists

    lists = AutocastTestLists(torch.device("cpu"))
    half, checked, wrong = torch.float16, 0, []
    cases = [(half, lists.torch_fp16, torch), (torch.float32, lists.torch_fp32, torch), (half, lists.nn_fp16, torch._C._nn)]
    cases += [(torch.float32, lists.torch_need_autocast_promote, torch), (torch.float32, lists.nn_fp32, torch._C._nn)]
    cases += [(half, lists.methods_fp16, None), (torch.float32, lists.methods_fp32, None)]
    with compat.cuda_autocast_policy_on_cpu(), torch.autocast("cpu", dtype=half):
        for wanted, entries, module in cases:
            for name, args, *_ in entries:
                # CUDA's own kernels (no CPU implementation), and einsum's entry (2-D operands for a 4-index equation)
                if name.startswith("cudnn") or isinstance(args, str):
                    continue
                out = getattr(module, name)(*args) if module else getattr(args[0], name)(*args[1:])
                out = out[0] if isinstance(out, tuple) else out
                checked += 1
                wrong += [(name, out.dtype)] if out.dtype != wanted else []
    assert checked > 80 and wrong == []
    x = torch.randn(4, 8, dtype=torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # the block is over: the CPU's own policy is back
        assert torch.nn.functional.layer_norm(x, (8,)).dtype == torch.bfloat16
        assert x.softmax(-1).dtype == torch.bfloat16


def test_peft_cannot_move_a_fake_adapter():
    """peft 0.21.2 on torch 2.13: adding LoRA to a model of fake tensors fails moving the new adapter onto its base
    layer's device. When the upstream case passes, drop compat.lora_adapters_where_made."""
    from peft import LoraConfig, inject_adapter_in_model

    lora = LoraConfig(r=4, target_modules=["q_proj"])
    with FakeTensorMode():
        net = AutoModelForCausalLM.from_config(models.config("tiny"), dtype=torch.bfloat16)
        with pytest.raises(RuntimeError):  # peft cannot move a fake adapter
            inject_adapter_in_model(lora, net)
        net = AutoModelForCausalLM.from_config(models.config("tiny"), dtype=torch.bfloat16)
        with compat.lora_adapters_where_made():
            inject_adapter_in_model(lora, net)
    adapters = {p.dtype for name, p in net.named_parameters() if "lora_" in name}
    assert adapters == {torch.float32}  # made in the default dtype, where peft's autocast keeps them
