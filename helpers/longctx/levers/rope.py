"""YaRN position rescaling: the exact transformers 5.24 `rope_parameters` for a model trained on `trained` positions
and asked to handle `wanted` positions, with the inconsistent settings refused."""

import numpy as np

from longctx import guide
from longctx.errors import LongctxError, check_positive_int

DEFAULT_BETA_FAST, DEFAULT_BETA_SLOW = 32.0, 1.0  # transformers 5.24's YaRN defaults (the YaRN paper's)
# Qwen3's native context, as its model cards and TRL's example say (32,768 natively, longer with YaRN); the configs'
# own max_position_embeddings says 40,960, room for an answer after a long prompt, not the trained length
QWEN3_TRAINED_LENGTH = guide.EXAMPLE_ROPE_PARAMETERS["original_max_position_embeddings"]


def rope_theta(cfg) -> float:
    theta = (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta", getattr(cfg, "rope_theta", None))
    if theta is None:
        raise LongctxError(f"{type(cfg).__name__} has no rope_theta: is it a RoPE model?")
    return float(theta)


def yarn_parameters(
    trained: int, wanted: int, theta: float, factor: float | None = None, *, beta_fast=None, beta_slow=None
) -> dict:
    """transformers' YaRN `rope_parameters` with factor = wanted / trained (given explicitly, it must agree);
    `beta_fast` / `beta_slow` (transformers' defaults 32 / 1 when left out) are added only when given."""
    trained = check_positive_int("trained length", trained)
    if wanted <= trained:
        raise LongctxError(
            f"The wanted length ({wanted:,}) is not above the trained length ({trained:,}): YaRN "
            "rescales positions beyond the trained range; inside it, use the model as it is."
        )
    computed = wanted / trained
    if factor is not None and abs(factor - computed) > 1e-9 * computed:
        raise LongctxError(
            f"YaRN factor {factor:g} does not match the lengths: {wanted:,} / {trained:,} = "
            f"{computed:g}. Use factor={computed:g}, or change the wanted or trained length."
        )
    params = {"rope_type": "yarn", "rope_theta": float(theta), "factor": computed, "original_max_position_embeddings": trained}
    params |= {k: float(v) for k, v in (("beta_fast", beta_fast), ("beta_slow", beta_slow)) if v is not None}
    fast, slow = params.get("beta_fast", DEFAULT_BETA_FAST), params.get("beta_slow", DEFAULT_BETA_SLOW)
    if not fast > slow > 0:
        raise LongctxError(
            f"YaRN needs beta_fast ({fast:g}) above beta_slow ({slow:g}) above 0: pairs turning more than beta_fast "
            "times inside the trained range are left alone, those turning fewer than beta_slow times are interpolated."
        )
    return params


def with_yarn(cfg, trained: int, wanted: int, *, factor=None, theta=None, beta_fast=None, beta_slow=None):
    """A copy of `cfg` with YaRN set (and max_position_embeddings raised to `wanted`). `theta`, when given, must be
    the model's own: the rescaling is defined relative to the frequencies it was trained with."""
    import copy

    own = rope_theta(cfg)
    if theta is not None and float(theta) != own:
        raise LongctxError(f"rope_theta {theta:g} is not the model's own: YaRN keeps the trained base, use rope_theta={own:g}.")
    new = copy.deepcopy(cfg)
    new.rope_parameters = yarn_parameters(trained, wanted, own, factor, beta_fast=beta_fast, beta_slow=beta_slow)
    new.max_position_embeddings = wanted
    return new


def model_init_kwargs(cfg) -> dict:
    """What SFTTrainer passes to `from_pretrained` (SFTConfig.model_init_kwargs) so that the model it loads
    from a hub id or folder gets `cfg`'s rotary settings: YaRN's parameters and the longer position range."""
    return {"rope_parameters": dict(cfg.rope_parameters), "max_position_embeddings": int(cfg.max_position_embeddings)}


def _inv_freq(cfg) -> np.ndarray:
    """Each rotary pair's angular frequency (radians per position), fastest pair first."""
    d = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
    return rope_theta(cfg) ** (-np.arange(0, d, 2) / d)


def turns(cfg, trained: int) -> np.ndarray:
    """Full turns each rotary pair makes over `trained` positions, fastest pair first."""
    return trained * _inv_freq(cfg) / (2 * np.pi)


def pair_scaling(cfg, trained: int, wanted: int, **betas) -> np.ndarray:
    """YaRN's frequency of each rotary pair over its own, from transformers' own YaRN function: 1 = left alone,
    1/factor = fully interpolated, between = the ramp (lesson 02's "Look inside" reads it off the rotary modules)."""
    import torch
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    inv_freq, _ = ROPE_INIT_FUNCTIONS["yarn"](with_yarn(cfg, trained, wanted, **betas), torch.device("cpu"))
    return inv_freq.double().numpy() / _inv_freq(cfg)


def split(scaling: np.ndarray, factor: float) -> dict:
    """Shares of rotary pairs YaRN leaves alone, ramps, and fully interpolates."""
    kept, interpolated = float(np.mean(scaling > 1 - 1e-6)), float(np.mean(scaling < 1 / factor + 1e-6))
    return {"kept": kept, "ramp": 1 - kept - interpolated, "interpolated": interpolated}


def matched_beta_fast(cfg, trained: int, reference, reference_trained: int) -> float:
    """The beta_fast at which YaRN leaves alone the share of `cfg`'s rotary pairs its default leaves for `reference`."""
    target = split(pair_scaling(reference, reference_trained, 2 * reference_trained), 2)["kept"]
    best = min(
        range(int(DEFAULT_BETA_FAST), int(DEFAULT_BETA_SLOW), -1),  # beta_slow stays at its default
        key=lambda b: abs(split(pair_scaling(cfg, trained, 2 * trained, beta_fast=b), 2)["kept"] - target),
    )
    return float(best)
