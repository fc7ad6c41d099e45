import json
from types import SimpleNamespace

import ipywidgets
import nbformat
import numpy as np
import pytest
import torch
import transformers
from conftest import refused, small_config
from jupyter_client.session import Session
from nbclient.client import NotebookClient
from nbclient.output_widget import OutputWidget
from torch._subclasses.fake_tensor import FakeTensorMode
from transformers import (
    BertConfig,
    DeepseekV2Config,
    Gemma2Config,
    Gemma3TextConfig,
    LlamaConfig,
    Qwen3MoeConfig,
    T5Config,
)

from longctx import LongctxError, models
from longctx.lengths import MAX_TOKENS, parse_length
from longctx.memory import estimate as est
from longctx.memory import gpu_kernels, repeat, timing
from longctx.memory.estimate import estimate
from longctx.memory.explore import explore
from longctx.memory.measure import measure
from longctx.models import LLAMA_3_2_1B
from longctx.tools.cli import main


@pytest.mark.parametrize("loss", ["chunked", "plain"])
@pytest.mark.parametrize("checkpointing", [True, False])
def test_estimate_matches_the_real_step_on_a_tiny_model(loss, checkpointing):
    fake = estimate("tiny", 256, loss=loss, checkpointing=checkpointing, dtype="fp32", device="cpu")
    real = estimate("tiny", 256, loss=loss, checkpointing=checkpointing, dtype="fp32", fake=False)
    assert fake.peak_bytes == pytest.approx(real.peak_bytes, rel=0.02)
    for category in ("parameters", "gradients", "optimizer", "activations", "temporaries"):
        assert fake.max_by_category()[category] == pytest.approx(real.max_by_category()[category], rel=0.02)


@pytest.mark.parametrize(
    "kwargs,named",  # the parameter the refusal names
    [
        (dict(seq_len=0), "seq_len"),
        (dict(seq_len=1.5), "seq_len"),
        (dict(seq_len=64, offload=True, checkpointing=False), "checkpointing"),
        (dict(seq_len=64, loss="fused"), "loss"),
        (dict(seq_len=64, dtype="int8"), "dtype"),
        (dict(seq_len=64, offload=True, fake=False, device="cpu"), "fake"),
        (dict(seq_len=64, fake=False, device="cuda"), "device"),
        (dict(seq_len=64, device="tpu"), "device"),
        (dict(seq_len=64, optim="adam8bit"), "optim"),
        (dict(seq_len=64, attn_implementation="flex"), "attn_implementation"),
        (dict(seq_len=64, attn_implementation="flash_attention_2", device="cpu"), "device"),
        (dict(seq_len=64, attn_implementation="flash_attention_2", cp_size=2), "attn_implementation"),
        (dict(seq_len=1024, cp_size=3), "cp_size"),  # context parallelism over a power of two of GPUs
        (dict(seq_len=1024, cp_size=2, fake=False), "fake"),
        (dict(seq_len=1024, mixed_precision=True), "mixed_precision"),  # FSDP2's: with CP or SP
        (dict(seq_len=1024, cp_size=128), "cp_size"),
        (dict(seq_len=256, offload_params=True), "offload_optimizer"),  # DeepSpeed offloads both
        (dict(seq_len=256, offload_optimizer=True, offload_params=True, checkpointing=False), "checkpointing"),
        (dict(seq_len=256, offload_optimizer=True, fake=False, device="cpu"), "fake"),
        (dict(seq_len=1024, sp_size=3), "sp_size"),
        (dict(seq_len=1024, sp_size=2, attn_implementation="eager"), "sdpa"),  # Ulysses needs a fused kernel
        (dict(seq_len=1024, sp_size=2, cp_size=2), "cp_size"),
        (dict(seq_len=1024, sp_size=16), "sp_size"),  # must divide the heads
    ],
)
def test_bad_estimates_are_refused(kwargs, named):
    with refused(named):
        estimate("tiny", **kwargs)


def test_cli_estimate_json(capsys, tmp_path):
    models.config("tiny").save_pretrained(tmp_path)
    assert main(["estimate", "--model", str(tmp_path / "config.json"), "--seq-len", "1k", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("peak_gib", "fixed_gib", "per_layer_saved_gib", "saved_layer_tensors", "device_peak_gib", "host_gib", "versions"):
        assert key in out
    # one checkpointed input per decoder layer, and two more tensors of that size after the last layer
    # (Qwen3-4B: 36 + 2 = 38, the bands of the guide's profile)
    assert out["seq_len"] == 1024
    layers = models.PRESETS["tiny"].config["num_hidden_layers"]
    assert out["saved_layer_tensors"] == layers and out["hidden_sized_tensors"] == layers + 2


def test_lengths_parse():
    assert parse_length("96k") == 98304 and parse_length("1M") == 1048576 and parse_length("512") == 512
    assert parse_length(" 96k ") == 98304
    for bad in ("0", "-5", "lots", "1.5k"):
        with pytest.raises(LongctxError):
            parse_length(bad)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_cuda_measurement_without_cuda_is_refused():
    with refused("cuda"):
        measure(lambda: None, model=torch.nn.Linear(2, 2), device="cuda")


def test_reach_finds_the_longest_fitting_length_and_walks_over_a_flat_peak(monkeypatch):
    """On a stand-in peak (the real estimator's reach is held by the calculator's committed table: test_calculator)."""

    calls = []

    def peak(model, n, **levers):  # flat up to 200k tokens (the optimizer's peak on a small model), then growing
        calls.append(n)
        return SimpleNamespace(peak_gib=10.0 + max(0, n - 200 * 1024) / 1024)

    monkeypatch.setattr(est, "estimate", peak)
    r = est.reach("tiny", 20.0)
    assert r["seq_len"] == 210 * 1024 and r["peak_gib"] == 20.0 and peak("tiny", r["seq_len"] + 1024).peak_gib > 20.0
    with pytest.raises(LongctxError) as err:
        est.reach("tiny", 1e-6)
    assert "1e-06 GiB" in str(err.value)  # the capacity it was given
    # seeded with other lengths (one far past the answer, one just short of it) it lands on the same multiple
    seeds = {n: peak("tiny", n).peak_gib for n in (r["seq_len"] - 5 * 1024, 400 * 1024)}
    again = est.reach("tiny", 20.0, known=seeds)
    assert again["seq_len"] == r["seq_len"] and len(seeds) == 2 + again["estimates"] > 2  # what it estimated, kept
    # flat all the way: no reach to report, said in words rather than a ZeroDivisionError
    monkeypatch.setattr(est, "estimate", lambda model, n, **levers: SimpleNamespace(peak_gib=10.0))
    with pytest.raises(LongctxError) as err:
        est.reach("tiny", 20.0)
    assert f"{MAX_TOKENS:,}" in str(err.value)


def test_an_encoder_or_a_broken_config_is_refused_before_building(tmp_path):
    for config in (BertConfig(), T5Config()):
        with refused(config.model_type):
            estimate(config, 128)
    with refused("m/config.json"):  # a path, never a hub id: not there
        estimate("m/config.json", 128)
    for name, value in (("num_hidden_layers", -2), ("head_dim", 0), ("intermediate_size", -1), ("num_key_value_heads", 3)):
        with refused(name):
            estimate(models.config("tiny", **{name: value}), 128)
    moe = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
               moe_intermediate_size=32, num_experts=4, num_experts_per_tok=8, vocab_size=256)  # fmt: skip
    with pytest.raises(LongctxError):  # more experts a token than the model has: transformers' own error, named
        estimate(Qwen3MoeConfig(**moe), 128)


def _optimizer_peak(profile) -> int:
    return max(int(row.sum()) for row, phase in zip(profile.timeline, profile.phases) if phase == "optimizer")


def test_the_gpu_step_drops_the_cpu_head_temporaries_and_the_for_loop_optimizer_scratch():
    cpu, gpu = estimate("small", 2048, device="cpu"), estimate("small", 2048)
    assert gpu.meta["device"] == "cuda" and gpu.meta["optim"] == "fused"
    # TRL's CPU fallback folds each 4096 × 32768 tile through fp32 copies; the Triton kernels allocate nothing
    assert gpu.peak_bytes < 0.6 * cpu.peak_bytes
    assert gpu.max_by_category()["parameters"] == cpu.max_by_category()["parameters"]
    # single-tensor AdamW makes per-parameter temporaries at the step; fused AdamW updates in place
    loop, fused = estimate("small", 2048, optim="for-loop"), estimate("small", 2048, optim="fused")
    assert _optimizer_peak(loop) > _optimizer_peak(fused)


def test_checkpointed_layer_inputs_are_counted_by_identity_not_by_size():
    # other activations of a layer input's byte size exist too (the size census counts 6 here)
    cfg = LlamaConfig(
        hidden_size=128, intermediate_size=256, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, vocab_size=512
    )
    p = estimate(cfg, 512, dtype="fp32", device="cpu")
    assert p.meta["saved_layer_tensors"] == 3 < p.meta["hidden_sized_tensors"]
    assert estimate(cfg, 512, dtype="fp32", device="cpu", offload=True).meta["saved_layer_tensors"] == 0


def test_the_estimate_dtype_wins_over_a_dtype_the_config_names():
    named = models.config("tiny")
    named.dtype = "bfloat16"  # as most hub configs say
    fp32 = estimate(named, 256, dtype="fp32", device="cpu")
    assert fp32.meta["fixed_gib"] == estimate(models.config("tiny"), 256, dtype="fp32", device="cpu").meta["fixed_gib"]
    assert fp32.meta["saved_layer_tensors"] == models.PRESETS["tiny"].config["num_hidden_layers"]


def _llama_params(c) -> int:
    h, kv = c.hidden_size, c.num_key_value_heads * c.head_dim
    per_layer = 2 * h * h + 2 * h * kv + 3 * h * c.intermediate_size + 2 * h  # q, o; k, v; gate, up, down; 2 norms
    return c.num_hidden_layers * per_layer + c.vocab_size * h + h  # tied head: the embedding counts once; final norm


def _adamw_steps(c) -> int:
    """AdamW's step counters: one fp32 scalar per parameter tensor (9 per layer, the embedding, the final norm)."""
    return 4 * (9 * c.num_hidden_layers + 2)


def _llama_backward_peak_bytes(c, s: int) -> int:
    """A Llama-family step's peak by hand, from the model's code, for the default levers (bf16, chunked loss,
    checkpointing, fused AdamW, flash attention): the last decoder layer, recomputed, in its MLP's backward.
    Each term is a tensor the code keeps alive at that moment (names as in transformers' LlamaDecoderLayer)."""
    h, inter, layers, vocab = c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.vocab_size
    heads, d = c.num_attention_heads, c.head_dim
    kv = c.num_key_value_heads * d
    params = _llama_params(c)
    bf16, fp32 = 2, 4
    fixed = 3 * params * bf16 + _adamw_steps(c)  # weights; AdamW's exp_avg and exp_avg_sq in the weights' dtype
    grads = h * inter * bf16 + h * bf16  # down_proj's weight (its backward just ran) and the final norm's
    saved_inputs = layers * s * h * bf16  # checkpointing: each layer's input
    recomputed = (
        6 * s * h * bf16  # both norms' normalised input and output, RoPE'd q, attention output
        + 2 * s * h * fp32  # both norms' fp32 copy of their input (kept for the variance's backward)
        + 2 * s * kv * bf16  # RoPE'd k and v, kept by the attention kernel
        + s * heads * fp32  # the attention's log-sum-exp
        + 3 * s * inter * bf16
    )  # gate_proj and up_proj outputs, SiLU(gate)
    rotary = 2 * s * d * bf16  # cos and sin, built once per step
    backward = (
        s * h * bf16  # the gradient arriving at the layer's output
        + 3 * s * inter * bf16  # the gradient of down_proj's input, and the two it splits into
        + vocab * h * bf16
    )  # the tied head's weight gradient, held until the embedding's backward
    return fixed + grads + saved_inputs + recomputed + rotary + backward


@pytest.mark.slow
def test_a_held_out_family_on_the_gpu_path_matches_a_formula_written_from_its_code():
    """Llama-3.2-1B's shapes (not a preset): the CUDA-path estimate within 3% of the hand count at two lengths."""

    cfg = LlamaConfig(**LLAMA_3_2_1B)
    for s in (32768, 65536):
        p = estimate(cfg, s)
        assert p.meta["device"] == "cuda" and p.peak_phase == "backward"
        formula = _llama_backward_peak_bytes(cfg, s)
        assert abs(p.peak_bytes / formula - 1) < 0.03, (s, p.peak_bytes, formula)
        assert p.meta["params"] == _llama_params(cfg)
        assert p.meta["fixed_gib"] * 2**30 == 6 * _llama_params(cfg) + _adamw_steps(cfg)  # weights + AdamW, exactly


def _deepseek_v2():
    # MLA: queries and keys 24 wide (16 without rotary + 8 rotary), values 16
    return DeepseekV2Config(
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        vocab_size=1000,
        q_lora_rank=None,
        kv_lora_rank=32,
        qk_nope_head_dim=16,
        qk_rope_head_dim=8,
        v_head_dim=16,
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_shared_experts=1,
        first_k_dense_replace=1,
    )


def test_mla_models_whose_values_are_narrower_than_their_queries_are_estimated_on_the_gpu_path():
    with FakeTensorMode():
        q, v = torch.empty(1, 4, 256, 24, dtype=torch.bfloat16), torch.empty(1, 4, 256, 16, dtype=torch.bfloat16)
        assert gpu_kernels.flash_attention(q, q, v).shape == (1, 4, 256, 16)  # the output is as wide as the values
        sdpa = gpu_kernels.sdpa_as_cuda(torch.nn.functional.scaled_dot_product_attention)
        assert sdpa(q, q, v, is_causal=True).shape == (1, 4, 256, 16)  # flash refuses them: the efficient kernel
    for attn in ("sdpa", "flash_attention_2"):
        assert estimate(_deepseek_v2(), 256, attn_implementation=attn).peak_bytes > 0


def test_a_family_transformers_runs_on_other_kernels_only_is_told_which():
    gemma2 = Gemma2Config(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16
    )
    with refused("--attn") as err:
        estimate(gemma2, 256)
    assert "config.json" not in str(err.value)  # the config is fine
    assert estimate(gemma2, 256, attn_implementation="flash_attention_2").peak_bytes > 0


def _qwen3_moe(layers: int = 6):
    return Qwen3MoeConfig(
        hidden_size=256, intermediate_size=512, moe_intermediate_size=128, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=2, head_dim=64, num_experts=8, num_experts_per_tok=2, vocab_size=4096,
    )  # fmt: skip


def _llama_3_2_1b():
    return LlamaConfig(**LLAMA_3_2_1B)


FAST_CASES = {
    "tiny-preset-deep": ("deep", 2048, {}),
    "qwen3-0.6b": ("qwen3-0.6b", 4096, {}),
    "qwen3-4b-plain-no-checkpointing": ("qwen3-4b", 32768, dict(loss="plain", checkpointing=False)),
    "qwen3-4b-offload": ("qwen3-4b", 131072, dict(offload=True)),
    "qwen3-4b-cpu-kernels-fp32-for-loop": ("qwen3-4b", 8192, dict(device="cpu", dtype="fp32", optim="for-loop")),
    "qwen3-8b-flash-attention-1m": ("qwen3-8b", 1048576, dict(attn_implementation="flash_attention_2")),
    "held-out-dense-llama-3.2-1b": (_llama_3_2_1b, 65536, {}),
    "held-out-moe-qwen3-moe": (_qwen3_moe, 16384, dict(optim="foreach")),
    "qwen3-0.6b-cp4-offload": ("qwen3-0.6b", 32768, dict(offload=True, cp_size=4)),
    "deep-cp2-mixed-precision": ("deep", 4096, dict(cp_size=2, mixed_precision=True)),
    # 9 shards of 123 tokens per rank, the last of 116: shards 3-7 written from 1 and 2
    "deep-cp2-tiled-mlp-uneven-shards": ("deep", 2200, dict(cp_size=2, tiled_mlp=True)),
    "qwen3-0.6b-tiled-mlp-offload": ("qwen3-0.6b", 8192, dict(tiled_mlp=True, offload=True)),
    # ALST's eight-GPU levers: Ulysses (its all-to-alls around the attention), FSDP2 for ZeRO-3, fused norms
    "qwen3-0.6b-ulysses-sp4-tiled-fused": ("qwen3-0.6b", 32768, dict(sp_size=4, offload=True, tiled_mlp=True, fused_norm=True)),
    # ALST's one-GPU levers: optimizer and weights on the host (one AdamW per tensor), fused norms
    "qwen3-0.6b-alst-one-gpu": (
        "qwen3-0.6b",
        8192,
        dict(tiled_mlp=True, offload=True, offload_optimizer=True, offload_params=True, fused_norm=True),
    ),
}


# `make test` holds three cases, a preset, a full-size model and a held-out family; `make test-all` every one
QUICK_CASES = ("tiny-preset-deep", "qwen3-0.6b", "held-out-moe-qwen3-moe")


@pytest.mark.slow
@pytest.mark.parametrize("case", [c if c in QUICK_CASES else pytest.param(c, marks=pytest.mark.exhaustive) for c in FAST_CASES])
def test_the_fast_estimate_is_the_full_trace_to_the_byte(case):
    """Traced at 3 and 4 layers and extended, a tiled MLP's middle shards too (memory/repeat.py), vs every layer and
    shard traced: the same timeline and costs, row by row, to the byte — or, where AdamW's foreach kernels group an MoE's expert
    tensors, within 0.1% of the peak (a few bytes in a few optimizer rows)."""
    model, seq_len, levers = FAST_CASES[case]
    model = model() if callable(model) else model
    fast, exact = estimate(model, seq_len, **levers), estimate(model, seq_len, exact=True, **levers)
    assert fast.meta["method"].startswith("layers 3 and 4") and exact.meta["method"] == "traced"
    assert ("middle shards extended" in fast.meta["method"]) is levers.get("tiled_mlp", False)
    assert fast.phases == exact.phases and fast.peak_phase == exact.peak_phase
    np.testing.assert_array_equal(fast.bands, exact.bands)
    for a, b in ((fast.timeline, exact.timeline), (fast.host_bytes, exact.host_bytes)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-3 * exact.peak_bytes)
    assert fast.peak_bytes == pytest.approx(exact.peak_bytes, rel=1e-3)
    for key in ("params", "fixed_gib", "saved_layer_tensors", "hidden_sized_tensors", "attention_mask_gib"):
        assert fast.meta[key] == exact.meta[key], key
    # and costs what every layer traced costs (the time model's input): operator by operator, to the FLOP and byte
    np.testing.assert_array_equal(fast.costs.sum(axis=0), exact.costs.sum(axis=0))
    if levers.get("device", "cuda") == "cuda":  # a GPU's step is priced
        assert timing.step_time(fast)["seconds"] == pytest.approx(timing.step_time(exact)["seconds"], rel=1e-9)


def test_layers_that_differ_are_traced_whole():
    sizes = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, vocab_size=1000)
    sliding = Gemma3TextConfig(**sizes, num_hidden_layers=6, head_dim=16, sliding_window=64)  # 5 sliding layers, 1 full
    assert not repeat.identical_layers(sliding) and repeat.identical_layers(_qwen3_moe())
    assert estimate(sliding, 256, attn_implementation="eager").meta["method"] == "traced"


@pytest.mark.exhaustive
def test_explore_redraws_the_estimate_when_a_control_changes():
    box = explore("deep", 4096, models=())
    first = box.state
    assert first["peak_gib"] == pytest.approx(estimate("deep", 4096).peak_gib) and first["host_gib"] == 0
    assert first["seconds"]["H100-80GB"] == pytest.approx(timing.step_time(estimate("deep", 4096))["seconds"])
    offload = next(c for row in box.children[:2] for c in row.children if c.description == "offload")
    offload.value = True
    assert box.state["offload"] and box.state["host_gib"] > 0 and box.state["peak_gib"] < first["peak_gib"]
    assert f"{box.state['peak_gib']:.1f} GiB per GPU" in box.figure.axes[0].get_title()  # the figure of this setting
    checkpointing = next(c for row in box.children[:2] for c in row.children if c.description == "checkpointing")
    checkpointing.value = False  # offload without checkpointing: the refusal is shown, not raised
    assert "needs gradient checkpointing" in box.state["error"] and box.figure is None
    box.close_all()  # closed here, not by the interpreter's exit (where ipykernel's comm manager is gone)


def test_the_explorer_holds_no_output_widget_which_nbclient_answers_over_the_shell_channel():
    """nbclient 0.11 stands in for a front end's Output widget and sends its state back over the shell channel while it
    waits there for the cell's reply; a headless run of lesson 06 then waited on a reply until its time limit
    (jupyter/nbclient#312, open). The explorer draws into a display instead. When this test's first half fails, nbclient
    no longer answers that way."""

    registry = NotebookClient(nbformat.v4.new_notebook()).widget_registry
    assert registry == {"@jupyter-widgets/output": {"OutputModel": OutputWidget}}  # the one widget it stands in for
    sent = []
    client = SimpleNamespace(session=Session(), shell_channel=SimpleNamespace(send=sent.append))
    stand_in = OutputWidget("comm", {"outputs": []}, client, SimpleNamespace())
    printed = Session().msg("stream", content={"name": "stdout", "text": "x"})
    stand_in.output([], printed, None, 0)
    assert [m["msg_type"] for m in sent] == ["comm_msg"]  # every output of the widget, sent back on the shell channel
    box = explore("deep", 4096, models=())
    found, todo = [], [box]
    while todo:
        found.append(widget := todo.pop())
        todo += getattr(widget, "children", ())
    assert not [w for w in found if isinstance(w, ipywidgets.Output)] and box.state["peak_gib"] > 0
    box.close_all()


def test_the_mask_note_gives_the_cost_the_trace_measured(tmp_path, capsys):
    small_config(tmp_path, "Mistral", intermediate_size=64, vocab_size=256, sliding_window=256)
    assert main(["estimate", "--model", str(tmp_path / "config.json"), "--seq-len", "2k"]) == 0
    out = capsys.readouterr().out
    masked = estimate(str(tmp_path / "config.json"), 2048)
    flash = estimate(str(tmp_path / "config.json"), 2048, attn_implementation="flash_attention_2")
    assert masked.meta["sliding_window"] == 256 and flash.peak_bytes < masked.peak_bytes
    assert masked.meta["attention_mask_gib"] * 2**30 == 2048 * 2048 and flash.meta["attention_mask_gib"] == 0  # one bool mask
    assert f"masks of {masked.meta['attention_mask_gib']:.2f} GiB" in out
    assert f"peaks at {flash.peak_gib:.2f} GiB, {masked.peak_gib - flash.peak_gib:.2f} GiB less" in out


def test_the_tiled_mlp_lever_matches_a_real_step_and_takes_the_mlp_off_the_peak():
    """ALST's TiledMLP (DeepSpeed's function, longctx.levers.tiled_mlp) on a tiny model whose MLP sets the peak: the fake-tensor
    estimate and the real CPU step agree with and without it, and tiling lowers the peak."""
    wide = models.config("tiny", intermediate_size=8192)  # 128 × hidden: the MLP's activations dwarf the plain logits
    peaks = {}
    for tiled in (False, True):
        fake = estimate(wide, 512, loss="plain", dtype="fp32", device="cpu", tiled_mlp=tiled)
        real = estimate(wide, 512, loss="plain", dtype="fp32", fake=False, tiled_mlp=tiled)
        assert fake.peak_bytes == pytest.approx(real.peak_bytes, rel=0.02), tiled
        assert fake.meta["tiled_mlp"] is tiled
        peaks[tiled] = real.peak_bytes
    assert peaks[True] < 0.7 * peaks[False]


@pytest.mark.parametrize(
    "config,fragment",
    [
        (dict(model_type="gpt2", n_embd=64, n_layer=2, n_head=4, vocab_size=1000), "no decoder layers at .model.layers"),
        (
            dict(
                model_type="qwen3_moe",
                hidden_size=64,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,
                head_dim=16,
                intermediate_size=128,
                moe_intermediate_size=32,
                num_experts=4,
                num_experts_per_tok=2,
                vocab_size=1000,
            ),
            "--tiled-mlp",
        ),
    ],
    ids=["no-decoder-layers", "mixture-of-experts"],
)
def test_the_tiled_mlp_is_refused_where_there_is_no_dense_mlp_to_tile(tmp_path, config, fragment):
    (tmp_path / "config.json").write_text(json.dumps(config))
    with refused(fragment):
        estimate(str(tmp_path / "config.json"), 1024, tiled_mlp=True)


def test_json_on_stdout_is_only_json_when_a_library_prints_there(capsys):
    """DeepSpeed (imported for the tiled MLP) prints its accelerator guess to stdout; --json must stay parseable."""
    assert main(["estimate", "--model", "tiny", "--seq-len", "1k", "--tiled-mlp", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tiled_mlp"] is True


def _published(name: str):
    """transformers' default configs of these classes are the published models' (their docstrings name them):
    Qwen1.5-MoE-A2.7B, Llama-4-Scout-17B-16E's text model, gpt-oss-120b; Granite's with the attention dropout (0.1)
    of IBM's published granite-3 configs."""
    return {
        "qwen2-moe": lambda: transformers.Qwen2MoeConfig(),
        "llama-4-text": lambda: transformers.Llama4TextConfig(),
        "granite": lambda: transformers.GraniteConfig(attention_dropout=0.1),
        "granite-moe": lambda: transformers.GraniteMoeConfig(attention_dropout=0.1),
        "gpt-oss": lambda: transformers.GptOssConfig(),
    }[name]()


@pytest.mark.parametrize(
    "name,levers,outcome",
    [
        ("qwen2-moe", {}, None),  # transformers sets sliding_window to 0 ("none"): an estimate, not "fix config.json"
        ("llama-4-text", {}, "base_model_prefix 'language_model' names no attribute"),
        pytest.param("llama-4-text", dict(loss="plain"), None, marks=pytest.mark.exhaustive),
        ("granite", dict(cp_size=2), "attention_dropout is 0.1: torch's context parallelism"),
        ("granite-moe", dict(cp_size=2), "attention_dropout is 0.1: torch's context parallelism"),
        ("gpt-oss", {}, "another one: --attn eager "),
        ("gpt-oss", dict(attn_implementation="flash_attention_2"), "FlashAttention-2, not among them"),
        pytest.param("gpt-oss", dict(attn_implementation="eager"), None, marks=pytest.mark.exhaustive),
    ],
)
def test_published_families_are_estimated_or_refused_by_cause(name, levers, outcome):
    if outcome is None:
        assert estimate(_published(name), 1024, **levers).peak_gib > 0
        return
    with refused(outcome) as err:
        estimate(_published(name), 1024, **levers)
    assert "flash_attention_2" not in str(err.value)  # never advised where transformers would not run it


def test_the_trainers_bf16_autocast_keeps_fp32_layernorm_inputs(tmp_path):
    """A Trainer with bf16=True runs the forward under CUDA's autocast (accelerate's prepare_model): a LayerNorm
    family keeps, per layer, each norm's input in fp32 and a bf16 copy of the norm's fp32 output for each of q, k
    and v: 8 × hidden bytes per token more than the same bf16 step without autocast, besides the norms' per-token
    statistics in fp32 (StarCoder2's published layout, at a small width, every layer kept: no checkpointing)."""
    config = dict(model_type="starcoder2", hidden_size=256, intermediate_size=1024, num_attention_heads=4)
    config |= dict(num_key_value_heads=2, vocab_size=1024, bos_token_id=0, eos_token_id=0)
    tokens, extra = 4096, {}
    for layers in (3, 4):
        (path := tmp_path / f"{layers}.json").write_text(json.dumps({**config, "num_hidden_layers": layers}))
        on, off = (estimate(str(path), tokens, checkpointing=False, exact=True, autocast=a) for a in (None, False))
        assert on.meta["autocast"] and not off.meta["autocast"]
        extra[layers] = on.peak_bytes - off.peak_bytes
    assert extra[4] - extra[3] == pytest.approx(8 * config["hidden_size"] * tokens, rel=0.01)
    # Phi-3.5-MoE: the LayerNorm's fp32 output makes the MoE's, so the residual stream is fp32 from the first layer
    # on, and each checkpointed layer keeps its input in fp32: 2 × hidden bytes per token more per layer
    config = dict(model_type="phimoe", hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2)
    config |= dict(vocab_size=1024, bos_token_id=0, eos_token_id=0, num_local_experts=4, num_experts_per_tok=2)
    for layers in (3, 4):
        (path := tmp_path / f"moe{layers}.json").write_text(json.dumps({**config, "num_hidden_layers": layers}))
        on, off = (estimate(str(path), tokens, exact=True, autocast=a) for a in (None, False))
        extra[layers] = on.peak_bytes - off.peak_bytes
    assert extra[4] - extra[3] == 2 * config["hidden_size"] * tokens
    # RMSNorm families cast to fp32 themselves: autocast changes no tensor they keep
    assert estimate("tiny", tokens).peak_bytes == estimate("tiny", tokens, autocast=False).peak_bytes
    # FSDP2 (CP) and DeepSpeed (the optimizer's offload) keep the precision themselves: no autocast there
    assert not estimate("tiny", tokens, cp_size=2).meta["autocast"]
    with refused("autocast"):
        estimate("tiny", tokens, cp_size=2, autocast=True)
