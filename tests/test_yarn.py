import numpy as np
import pytest
import torch
from conftest import refused

from longctx import curves, data, pretrain
from longctx.levers import yarn
from longctx.paths import data_dir


@pytest.fixture(scope="module")
def base():
    return pretrain.load_base()


@pytest.fixture(scope="module")
def windows():
    return data.long_sequences(160, 3, split="validation", seed=3)


def test_per_token_loss_matches_cross_entropy_of_the_logits(base, windows):
    """The fused head's per-token log-probs give the same losses as materialised logits."""
    ids = torch.tensor(windows["input_ids"])
    curve = yarn.per_token_loss(base, windows, batch=2, progress=False)
    per_window = yarn.window_losses(base, windows, batch=2, progress=False)
    from transformers import AutoModelForCausalLM

    plain = AutoModelForCausalLM.from_pretrained(pretrain.checkpoint_dir(), dtype=torch.float32).eval()
    with torch.no_grad():
        logits = plain(input_ids=ids).logits[:, :-1].double()
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
    assert curve.shape == (159,) and per_window.shape == (3,)
    np.testing.assert_allclose(curve, nll.mean(0).numpy(), atol=1e-4)
    np.testing.assert_allclose(per_window, nll.mean(1).numpy(), atol=1e-4)


def test_unigram_entropy():
    assert curves.unigram_entropy([0, 1, 2, 3] * 5) == pytest.approx(np.log(4))
    assert curves.unigram_entropy([7] * 9) == 0.0


def test_stretches_rise_and_smooth():
    curve = np.r_[np.full(24, 9.0), np.full(26, 4.0), np.full(150, 5.0)]  # positions 25..49: the range's 2nd half
    assert curves.stretches(curve, trained=50) == {"in_range": 4.0, "last": 5.0}
    assert curves.rise(curve, trained=50) == pytest.approx(1.0)
    assert np.allclose(curves.smooth(np.full(10, 3.0), 4), 3.0)  # edges average what they have


def test_yarn_model_takes_the_settings(base):
    trained = pretrain.trained_length()
    model = pretrain.load_base(wanted=4 * trained, beta_fast=4)
    params = model.config.rope_parameters
    assert params["rope_type"] == "yarn" and params["factor"] == 4.0 and params["beta_fast"] == 4.0
    assert params["original_max_position_embeddings"] == trained and model.config.max_position_embeddings == 4 * trained
    with refused("factor"):
        pretrain.load_base(wanted=4 * trained, factor=8.0)


def test_pretrain_takes_only_its_options_and_a_missing_base_model_names_the_command(tmp_path):
    with refused("stepz", kind=TypeError):
        pretrain.pretrain(tmp_path / "new", stepz=1)
    with refused("longctx pretrain"):
        pretrain.load_base(tmp_path)
    assert not (tmp_path / "new").exists()


def test_text_windows_pick_the_split_and_each_model_reads_through_its_own_tokenizer():
    held = yarn.text_windows(64, 2, dataset="corpus", seed=5)
    assert held["input_ids"] == data.long_sequences(64, 2, "validation", seed=5)["input_ids"]
    train = yarn.text_windows(64, 2, dataset="corpus", held_out=False, seed=5)
    assert train["input_ids"] == data.long_sequences(64, 2, "train", seed=5)["input_ids"]
    assert yarn.tokenizer_for("base").name_or_path == data.tokenizer().name_or_path
    own = yarn.tokenizer_for(str(data_dir() / "yarn-base"))  # a model folder in hub format brings its own
    assert own.name_or_path == str(data_dir() / "yarn-base")


def test_the_onset_is_where_the_smoothed_curve_leaves_its_in_range_level():
    curve = np.concatenate([np.full(100, 4.0), np.full(50, 4.0), np.linspace(4.0, 6.0, 100)])
    at = curves.onset(curve, trained=100, window=4)
    assert 150 < at < 170 and curve[at] > 4.25 - 0.05  # the ramp crosses 4.25 a little after 150
    assert curves.onset(np.full(300, 4.0), trained=100, window=4) is None
