"""The `rehearsal` size: every notebook through the `gpu` size's code paths on the CPU — a hub-format
model folder loaded with from_pretrained, its own tokenizer, bf16 weights, text through `datasets` from a
local parquet copy — with only the hardware and the lengths swapped. What it cannot rehearse (the CUDA
allocator, NCCL, Triton kernels, the hub) is listed in the README."""

import pytest

from longctx.memory.estimate import DEFAULT_DTYPE
from longctx.paths import data_dir


@pytest.fixture
def rehearse(executed):
    return lambda name: executed(name, "rehearsal")


def test_00_memory_primer(rehearse):
    r = rehearse("00_memory_primer")
    res = r.results["results"]
    assert r.results["params"]["MODEL"] == str(data_dir() / "yarn-base")
    assert res["full"]["dtype"] == DEFAULT_DTYPE
    # pure bf16: the calculator (weights, gradients, AdamW moments in bf16) still matches to the byte, 8 B a weight
    assert res["full"]["exact"] and res["lora"]["exact"]
    full = res["full"]["measured"]
    assert full["parameters"] == full["gradients"] and full["optimizer"] < 2.01 * full["parameters"]
    assert res["bf16_param_ratio"] == 0.5
    # trl loads the model folder by name in fp32 unless model_init_kwargs asks for bf16
    assert res["trl_load_dtype"] == {"trl's default": "float32", "model_init_kwargs": "bfloat16"}
    assert res["overfit"]["best_checkpoint_weight_diff"] == 0.0


def test_01_chunked_loss(rehearse):
    res = rehearse("01_chunked_loss").results["results"]
    assert res["model_dtype"] == DEFAULT_DTYPE
    plain, chunked = res["measured"]["plain"], res["measured"]["chunked"]
    assert chunked["peak_bytes"] < plain["peak_bytes"] and abs(plain["loss_value"] - chunked["loss_value"]) <= 1e-5
    assert res["estimate_over_measured"] == pytest.approx(1.0, abs=0.02)


def test_02_yarn(rehearse):
    res = rehearse("02_yarn").results["results"]
    assert res["model_dtype"] == DEFAULT_DTYPE
    assert res["dataset"] == str(data_dir() / "corpus-parquet")
    # the trainer's first logged loss (the model loaded by SFTTrainer from its folder, in bf16 through
    # model_init_kwargs) is the untouched model's loss on the batch, scored again window by window
    ft = res["fine_tune"]
    for name in ("plain", "yarn"):
        assert ft["first_loss"][name] == pytest.approx(ft["window_loss"][name], abs=1e-3), name
    # the probe through the hub path: the retrieval miniature as a model folder, fine-tuned in bf16 by SFTTrainer
    assert set(res["probe"]["models"]) == {"plain", "YaRN, untrained", "YaRN, fine-tuned"}
    from longctx.levers import base_model

    assert res["probe"]["trained_length"] == base_model.trained_length(base_model.retrieval_dir())
    assert len(res["probe"]["ft_losses"]) >= 1


def test_03_activation_offload(rehearse):
    r = rehearse("03_activation_offload")
    res = r.results["results"]
    assert r.results["params"]["DTYPE"] == DEFAULT_DTYPE
    assert res["cpu"]["loss_abs_diff"] == 0.0 and res["cpu"]["grad_max_abs_diff"] == 0.0
    assert res["cpu"]["host_bytes"] == res["cpu"]["host_bytes_formula"]


def test_04_context_parallelism(rehearse):
    r = rehearse("04_context_parallelism")
    res = r.results["results"]
    assert r.results["params"]["DTYPE"] == DEFAULT_DTYPE
    # bf16 on two ranks: the same loss to bf16 rounding, each rank about half the activations
    assert res["cp"]["2"]["loss_abs_diff"] < 0.01
    assert res["cp"]["2"]["activations_ratio"] < 0.7


def test_05_trainium_padding(rehearse):
    res = rehearse("05_trainium_padding").results["results"]
    assert res["prediction_exact"] and res["census_matches_seen"]


def test_06_one_million_tokens(rehearse):
    res = rehearse("06_one_million_tokens").results["results"]
    assert res["first_peak_gib"] > 0 and res["second_peak_gib"] > 0


def test_07_tiled_mlp(rehearse):
    r = rehearse("07_tiled_mlp")
    res = r.results["results"]
    assert r.results["params"]["DTYPE"] == DEFAULT_DTYPE and r.results["params"]["MODEL"] == str(data_dir() / "yarn-base")
    # bf16, the hub-format model: tiling leaves the loss and lowers or keeps the peak
    m = res["measured"]
    assert m["loss_abs_diff"] < 1e-2 and min(t["peak_bytes"] for t in m["tiled"].values()) <= m["untiled"]["peak_bytes"]


def test_08_packing(rehearse):
    res = rehearse("08_packing").results["results"]
    # bf16 weights from a model folder: packed documents still score as they do alone, to bf16 rounding (one step
    # of bf16 near a loss of 8 nats is 2**-8 * 8 = 0.03), and a leak is ten times more than that
    assert max(row["largest_gap"] for row in res["in_rows"].values()) < 0.1
    assert res["look_inside"]["leaked"] > 10 * res["look_inside"]["packed"]
