import json

import pytest

from longctx import LongctxError
from longctx.cli import main, parse_length
from longctx.memory.estimate import estimate


@pytest.mark.parametrize("loss", ["chunked", "plain"])
@pytest.mark.parametrize("checkpointing", [True, False])
def test_estimate_matches_the_real_step_on_a_tiny_model(loss, checkpointing):
    fake = estimate("tiny", 256, loss=loss, checkpointing=checkpointing, dtype="fp32")
    real = estimate("tiny", 256, loss=loss, checkpointing=checkpointing, dtype="fp32", fake=False)
    assert fake.peak_bytes == pytest.approx(real.peak_bytes, rel=0.02)
    for category in ("parameters", "gradients", "optimizer", "activations", "temporaries"):
        assert fake.max_by_category()[category] == pytest.approx(real.max_by_category()[category], rel=0.02)


def test_offload_moves_saved_inputs_to_host():
    plain = estimate("small", 512)
    off = estimate("small", 512, offload=True)
    layers = plain.meta["saved_layer_tensors"]
    assert layers >= 4 and off.meta["saved_layer_tensors"] < layers
    assert off.host_peak_bytes >= 4 * off.band_bytes  # the 4 layers' inputs (at least) live on the host
    assert off.peak_bytes < plain.peak_bytes


@pytest.mark.parametrize("kwargs,fragment", [
    (dict(seq_len=0), "seq_len must be a positive integer"),
    (dict(seq_len=1.5), "seq_len must be a positive integer"),
    (dict(seq_len=64, offload=True, checkpointing=False), "needs gradient checkpointing"),
    (dict(seq_len=64, loss="fused"), "Unknown loss"),
    (dict(seq_len=64, dtype="int8"), "Unknown dtype"),
    (dict(seq_len=64, offload=True, fake=False), "no separate host memory"),
])
def test_bad_estimates_are_refused(kwargs, fragment):
    with pytest.raises(LongctxError, match=fragment):
        estimate("tiny", **kwargs)


def test_cli_estimate_json(capsys, tmp_path):
    from longctx import models

    models.config("tiny").save_pretrained(tmp_path)
    assert main(["estimate", "--model", str(tmp_path / "config.json"), "--seq-len", "1k", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("peak_gib", "fixed_gib", "per_layer_saved_gib", "saved_layer_tensors", "device_peak_gib", "host_gib",
                "versions"):
        assert key in out
    # one saved input per decoder layer plus two after the last layer (Qwen3-4B: 36 + 2 = 38, the guide's bands)
    assert out["seq_len"] == 1024
    assert out["saved_layer_tensors"] == models.PRESETS["tiny"].config["num_hidden_layers"] + 2


def test_lengths_parse():
    assert parse_length("96k") == 98304 and parse_length("1M") == 1048576 and parse_length("512") == 512
    for bad in ("0", "-5", "lots", "1.5k"):
        with pytest.raises(LongctxError):
            parse_length(bad)


def test_cuda_measurement_without_cuda_is_refused():
    import torch

    from longctx.memory.measure import measure

    if torch.cuda.is_available():
        pytest.skip("checks the refusal on a machine without CUDA")
    with pytest.raises(LongctxError, match="no CUDA device"):
        measure(lambda: None, model=torch.nn.Linear(2, 2), device="cuda")


def test_reach_finds_the_longest_fitting_length():
    from longctx.memory.estimate import reach

    capacity = estimate("tiny", 70 * 1024).peak_gib  # a capacity that some length near 70k just fills
    r = reach("tiny", capacity)
    assert r["peak_gib"] <= capacity
    assert estimate("tiny", r["seq_len"] + 1024).peak_gib > capacity  # one multiple more does not fit
    with pytest.raises(LongctxError, match="over the"):
        reach("tiny", 1e-6)


def test_an_encoder_or_a_broken_config_is_refused_before_building(tmp_path):
    from transformers import BertConfig, T5Config

    from longctx import models

    with pytest.raises(LongctxError, match="'bert' is not a decoder-only language model"):
        estimate(BertConfig(), 128)
    with pytest.raises(LongctxError, match="'t5' is not a decoder-only"):
        estimate(T5Config(), 128)
    broken = models.config("tiny")
    broken.num_hidden_layers = -2
    with pytest.raises(LongctxError, match="num_hidden_layers must be a positive integer"):
        estimate(broken, 128)
