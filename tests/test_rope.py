import numpy as np
import pytest
import torch
from conftest import refused
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from longctx import guide, models
from longctx.levers import rope


def test_yarn_parameters_use_transformers_keys():
    assert rope.yarn_parameters(32768, 1048576, 1e6) == guide.EXAMPLE_ROPE_PARAMETERS  # TRL's example, key for key


@pytest.mark.parametrize(
    "args,kwargs,named",  # what the refusal names
    [
        ((32768, 1048576, 1e6), dict(factor=16.0), "factor"),  # a factor that does not match the lengths
        ((32768, 32768, 1e6), {}, "32,768"),  # the wanted length is not above the trained one
        ((32768, 16384, 1e6), {}, "16,384"),
        ((128, 1536, 100.0), dict(beta_fast=1.0), "beta_fast"),  # equal to the default beta_slow
        ((128, 1536, 100.0), dict(beta_fast=4.0, beta_slow=8.0), "beta_fast"),
        ((128, 1536, 100.0), dict(beta_fast=-1.0), "beta_fast"),
        ((128, 1536, 100.0), dict(beta_fast=4.0, beta_slow=0.0), "beta_fast"),
    ],
)
def test_yarn_refusals(args, kwargs, named):
    with refused(named):
        rope.yarn_parameters(*args, **kwargs)


def test_yarn_refuses_another_rope_theta():
    cfg = models.config("qwen3-8b")
    with refused("rope_theta"):
        rope.with_yarn(cfg, 32768, 1048576, theta=10000.0)
    new = rope.with_yarn(cfg, 32768, 1048576)
    assert new.rope_parameters["factor"] == 32.0 and new.max_position_embeddings == 1048576
    assert cfg.rope_parameters["rope_type"] == "default"  # the original is left alone


def test_yarn_betas_use_transformers_keys():
    params = rope.yarn_parameters(128, 1536, 100.0, beta_fast=4)
    assert params["beta_fast"] == 4.0 and "beta_slow" not in params
    cfg = rope.with_yarn(
        models.config("small", rope_parameters={"rope_type": "default", "rope_theta": 100.0}), 128, 1536, beta_fast=4
    )
    with_beta, _ = ROPE_INIT_FUNCTIONS["yarn"](cfg, torch.device("cpu"))
    cfg.rope_parameters.pop("beta_fast")
    default, _ = ROPE_INIT_FUNCTIONS["yarn"](cfg, torch.device("cpu"))
    assert not torch.equal(with_beta, default)  # transformers reads the key


@pytest.mark.parametrize(
    "spec,trained,wanted,betas",
    [
        ("qwen3-4b", 40960, 163840, {}),
        ("small", 128, 1536, {"beta_fast": 4.0}),
    ],
)
def test_pair_scaling_follows_the_turns(spec, trained, wanted, betas):
    """Pairs left alone turn more than beta_fast times inside the trained range; fully interpolated ones
    fewer than beta_slow times (the YaRN paper's rule, as transformers computes it)."""
    overrides = {} if spec.startswith("qwen") else {"rope_parameters": {"rope_type": "default", "rope_theta": 100.0}}
    cfg = models.config(spec, **overrides)
    scaling, turns = rope.pair_scaling(cfg, trained, wanted, **betas), rope.turns(cfg, trained)
    factor = wanted / trained
    kept, interpolated = scaling > 1 - 1e-6, scaling < 1 / factor + 1e-6
    assert kept.any() and interpolated.any()
    assert (turns[kept] > betas.get("beta_fast", rope.DEFAULT_BETA_FAST)).all() and (turns[interpolated] < 1).all()
    assert np.all(np.diff(scaling) <= 1e-6)  # slower pairs are squeezed more (fp32 noise allowed)
    s = rope.split(scaling, factor)
    assert s["kept"] == kept.mean() and s["ramp"] + s["kept"] + s["interpolated"] == pytest.approx(1.0)


def test_matched_beta_fast_keeps_the_reference_share():
    qwen = models.config("qwen3-4b")
    mini = models.config("small", rope_parameters={"rope_type": "default", "rope_theta": 100.0})
    target = rope.split(rope.pair_scaling(qwen, 40960, 163840), 4)["kept"]
    assert target == pytest.approx(25 / 64)  # Qwen3-4B: 25 of its 64 pairs turn more than 32 times in 40,960
    beta = rope.matched_beta_fast(mini, 128, qwen, 40960)
    assert beta < rope.DEFAULT_BETA_FAST  # no pair of the miniature turns 32 times in 128 positions
    got = rope.split(rope.pair_scaling(mini, 128, 1536, beta_fast=beta), 12)["kept"]
    for other in (beta - 1, beta + 1):  # its neighbours match the reference no better
        if other > 1:
            alt = rope.split(rope.pair_scaling(mini, 128, 1536, beta_fast=other), 12)["kept"]
            assert abs(got - target) <= abs(alt - target)


def test_transformers_yarn_defaults_are_ours():
    """rope.DEFAULT_BETA_* name transformers' defaults; this fails if transformers changes them."""
    cfg = models.config("qwen3-4b")
    explicit = rope.pair_scaling(cfg, 40960, 163840, beta_fast=rope.DEFAULT_BETA_FAST, beta_slow=rope.DEFAULT_BETA_SLOW)
    np.testing.assert_array_equal(rope.pair_scaling(cfg, 40960, 163840), explicit)
