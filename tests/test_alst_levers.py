"""ALST's one-GPU levers in the estimator (arXiv:2506.13996; its recipe: snowflakedb/ArcticTraining,
projects/sequence-parallelism/run-h100-sp1-llama-8b.yml): DeepSpeed ZeRO's optimizer and parameter offload
(longctx.levers.host_state) and Liger-Kernel's fused RMSNorm (longctx.levers.fused_norm)."""

import pytest
import torch
from conftest import refused
from transformers import LlamaConfig
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

from longctx import models
from longctx.guide import ALST_ONE_GPU, ALST_ONE_NODE
from longctx.levers.fused_norm import FusedRMSNorm, fuse_norms
from longctx.levers.host_state import HostState
from longctx.memory import cards, timing
from longctx.memory.costs import COL
from longctx.memory.estimate import estimate, reach
from longctx.units import GIB


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_fused_norm_computes_what_transformers_norm_does(dtype):
    torch.manual_seed(0)
    norm = Qwen3RMSNorm(48).to(dtype)
    norm.weight.data.uniform_(0.5, 1.5)
    x = torch.randn(2, 600, 48, dtype=dtype)  # rows over several tiles, the last one shorter
    grad_out = torch.randn_like(x)
    ours = [t.detach().clone().requires_grad_() for t in (x, norm.weight)]
    theirs = [t.detach().clone().requires_grad_() for t in (x, norm.weight)]
    y_ours = FusedRMSNorm.apply(ours[0], ours[1], norm.variance_epsilon)
    norm.weight = theirs[1] = torch.nn.Parameter(theirs[1].detach())
    y_theirs = norm(theirs[0])
    (y_ours * grad_out).sum().backward()
    (y_theirs * grad_out).sum().backward()
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(y_ours, y_theirs, **tol)
    torch.testing.assert_close(ours[0].grad, theirs[0].grad, **tol)
    torch.testing.assert_close(ours[1].grad, theirs[1].grad, **(tol if dtype == torch.float32 else dict(rtol=0.05, atol=0.5)))


def test_the_fused_norm_keeps_what_ligers_kernel_keeps():
    """Saved for backward: the input (not a copy), the weight and one fp32 number per row; the input's gradient is
    written over the incoming one."""
    x = torch.randn(300, 32, dtype=torch.bfloat16, requires_grad=True)
    w = torch.ones(32, dtype=torch.bfloat16, requires_grad=True)
    seen = []

    def pack(t):
        seen.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = FusedRMSNorm.apply(x, w, 1e-6)
    assert [(t.shape, t.dtype) for t in seen] == [(x.shape, x.dtype), (w.shape, w.dtype), ((300,), torch.float32)]
    assert seen[0].untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    grad = torch.randn_like(y)
    (dx,) = torch.autograd.grad(y, x, grad)
    assert dx.untyped_storage().data_ptr() == grad.untyped_storage().data_ptr()


def test_fuse_norms_routes_every_llama_style_norm_and_refuses_a_model_without_one(tmp_path):
    model = models.load("tiny", seed=0)
    layers = model.config.num_hidden_layers
    assert fuse_norms(model) == layers * 4 + 1  # input, post-attention, query and key norms per layer; the final one
    config = dict(model_type="gpt_neox", hidden_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=1000,
                  intermediate_size=128)  # fmt: skip
    (tmp_path / "config.json").write_text(__import__("json").dumps(config))
    with refused("--fused-norm"):
        estimate(str(tmp_path / "config.json"), 256, fused_norm=True)


def test_the_fused_norm_lever_matches_a_real_cpu_step():
    """The fake-tensor estimate against the same step run for real on the CPU (the real pass computes in tiles of
    TILE_ROWS rows, which the fake one does not allocate: a few KiB here)."""
    for fused in (False, True):
        fake = estimate("tiny", 512, loss="plain", dtype="fp32", device="cpu", fused_norm=fused)
        real = estimate("tiny", 512, loss="plain", dtype="fp32", fake=False, fused_norm=fused)
        assert fake.peak_bytes == pytest.approx(real.peak_bytes, rel=0.02), fused
        assert fake.meta["fused_norm"] is fused


def _layer_params(cfg) -> int:
    """One decoder layer's weights, from Qwen3's code: four attention projections, three MLP ones, four norms."""
    h, inter, heads, kv, d = (cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads, cfg.num_key_value_heads,
                              cfg.head_dim)  # fmt: skip
    return h * heads * d * 2 + h * kv * d * 2 + 3 * h * inter + 2 * h + 2 * d


@pytest.mark.parametrize("params", [False, True])
def test_the_host_holds_what_deepspeeds_zero3_allocates(params):
    """DeepSpeed 0.19.8's ZeRO-3 with optimizer offload keeps on the host an fp32 master, two fp32 moments, an fp32
    gradient buffer and a gradient slot in the training dtype: 18 bytes a parameter, 2 more with the weights there
    too (the decoder layers' here). Its `estimate_zero3_model_states_mem_needs` (buffer factor 1) counts 16 and 18:
    the slots are the difference. The device keeps the weights (one layer's with parameter offload, and the embedding
    and head) and one reduce bucket."""
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs

    cfg = models.config("small")
    p = estimate("small", 1024, offload_optimizer=True, offload_params=params)
    total, layers = p.meta["params"], cfg.num_hidden_layers * _layer_params(cfg)
    counted, _, _ = estimate_zero3_model_states_mem_needs(
        total, 1, cpu_offload=True, cpu_offload_params=params, additional_buffer_factor=1
    )
    first_optimizer_row = p.phases.index("optimizer")
    assert counted == (18 if params else 16) * total
    assert p.host_bytes[first_optimizer_row] == pytest.approx(18 * total + (2 * layers if params else 0), abs=4096)
    state = p.max_by_category()
    assert state["optimizer"] < 4096  # AdamW's step counters only; its moments are on the host
    assert state["other"] == 2 * DeepSpeedZeroConfig().reduce_bucket_size  # the reduce bucket, bf16
    held = 2 * (total - layers) + (2 * _layer_params(cfg) if params else 2 * layers)  # bf16 weights on the device
    assert state["parameters"] == pytest.approx(held, abs=4096)


def test_an_offloaded_optimizer_steps_on_the_host_at_cpu_adams_rate():
    p = estimate("qwen3-0.6b", 8192, offload=True, offload_optimizer=True, offload_params=True)
    t = timing.step_time(p, "H100-80GB")
    assert t["breakdown_seconds"]["host"] == pytest.approx(p.meta["params"] / timing.HOST_ADAM)  # the weights stay there
    plain = timing.step_time(estimate("qwen3-0.6b", 8192, offload=True), "H100-80GB")
    assert plain["breakdown_seconds"]["host"] == 0
    # the weights cross the host link twice per layer (forward, recomputation), the gradients once, in fp32
    # the layers' weights cross the host link twice (forward, recomputation), the others come back updated; a gradient
    # goes to its host slot, comes back, and leaves again in fp32 (bf16: 2 bytes, fp32: 4)
    cfg = models.config("qwen3-0.6b")
    extra = t["bytes"]["host_copies"] - plain["bytes"]["host_copies"]
    total, layers = p.meta["params"], cfg.num_hidden_layers * _layer_params(cfg)
    assert extra == 2 * 2 * layers + (2 + 2 + 4) * total + 2 * (total - layers)


def test_alsts_one_gpu_recipe_fits_an_h100_at_500k_where_the_guides_levers_do_not():
    """Llama-3.1-8B at ALST's 500,000 tokens on one H100: the guide's levers and TiledMLP do not fit; with the
    optimizer and weights on the host they do, and the fused norm takes its backward's fp32 temporaries off."""
    cfg, capacity, n = LlamaConfig(**models.LLAMA_3_1_8B), cards.capacity("H100-80GB")[0], ALST_ONE_GPU.value
    base = dict(offload=True, tiled_mlp=True)
    guide = estimate(cfg, n, **base)
    host = estimate(cfg, n, **base, offload_optimizer=True, offload_params=True)
    alst = estimate(cfg, n, **base, offload_optimizer=True, offload_params=True, fused_norm=True)
    assert guide.peak_gib > capacity >= host.peak_gib > alst.peak_gib
    state = ("parameters", "gradients", "optimizer")
    assert sum(host.peak_breakdown[k] for k in state) < 0.1 * sum(guide.peak_breakdown[k] for k in state)
    assert alst.peak_breakdown["temporaries"] < host.peak_breakdown["temporaries"]
    assert host.host_peak_bytes / GIB > 200  # a node's RAM must hold the state and the offloaded inputs


@pytest.mark.exhaustive
@pytest.mark.slow
def test_with_the_state_on_the_host_the_reach_on_one_h100_is_within_10_percent_of_alsts():
    """The issue's bar: ALST's one-GPU recipe without the fused norm reaches within 10% of its 500K on the estimator
    (with the fused norm it goes past: lesson 07 traces why ALST's run stops at 500K)."""

    levers = dict(offload=True, tiled_mlp=True, offload_optimizer=True, offload_params=True)
    found = reach(LlamaConfig(**models.LLAMA_3_1_8B), cards.capacity("H100-80GB")[0], multiple=8192, **levers)
    assert abs(found["seq_len"] / ALST_ONE_GPU.value - 1) < 0.1


def test_ulysses_shards_the_state_and_splits_attentions_work_over_the_ranks():
    """Ulysses over 4 ranks (memory/ulysses.py; the state sharded by FSDP2 as ZeRO-3 does): a rank holds a quarter of
    the weights, gradients and AdamW state, a quarter of the sequence's saved inputs, and runs a quarter of the
    attention FLOPs of the whole step (all the tokens, a quarter of the heads)."""
    one = estimate("qwen3-0.6b", 16384, offload=True)
    four = estimate("qwen3-0.6b", 16384, offload=True, sp_size=4)
    assert four.meta["tokens_per_rank"] == 16384 // 4 and four.band_bytes == one.band_bytes // 4
    assert four.meta["fixed_gib"] == pytest.approx(one.meta["fixed_gib"] / 4, rel=0.01)
    assert four.host_peak_bytes == pytest.approx(one.host_peak_bytes / 4, rel=1e-6)  # the offloaded layer inputs
    attention = [p.costs[:, COL["attention_flops"]].sum() for p in (one, four)]
    assert attention[1] == pytest.approx(attention[0] / 4, rel=1e-6)
    assert timing.step_time(four, "H100-80GB")["gpus"] == 4


def test_alsts_node_point_fits_eight_h100s_with_ulysses_and_its_levers():
    """Llama-3.1-8B at ALST's 3.7M tokens over 8 H100s with Ulysses SP, offload, the tiled MLP and the fused norm: a
    rank fits; without the fused norm it does not."""

    cfg, capacity = LlamaConfig(**models.LLAMA_3_1_8B), cards.capacity("H100-80GB")[0]
    n = ALST_ONE_NODE.value // 8 * 8
    levers = dict(offload=True, tiled_mlp=True, sp_size=8)
    assert estimate(cfg, n, **levers, fused_norm=True).peak_gib <= capacity < estimate(cfg, n, **levers).peak_gib


def test_parameter_offload_refuses_a_model_that_would_not_recompute():
    """Without checkpointing in training mode, backward would read weights already sent back to the host."""
    model = models.load("tiny", seed=0)
    with refused("checkpointing"):
        HostState(model.eval(), "cpu", params=True, lr=1e-3, bucket=1)
