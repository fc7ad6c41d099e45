"""YaRN position rescaling: the exact transformers 5.24 `rope_parameters` for a model trained on
`trained` positions and asked to handle `wanted` positions, with the inconsistent settings refused."""

from __future__ import annotations

from .errors import LongctxError


def rope_theta(cfg) -> float:
    params = getattr(cfg, "rope_parameters", None) or {}
    theta = params.get("rope_theta", getattr(cfg, "rope_theta", None))
    if theta is None:
        raise LongctxError(f"{type(cfg).__name__} has no rope_theta: is it a RoPE model?")
    return float(theta)


def yarn_parameters(trained: int, wanted: int, theta: float, factor: float | None = None) -> dict:
    """`{"rope_type": "yarn", "rope_theta", "factor", "original_max_position_embeddings"}` with
    factor = wanted / trained (given explicitly, it must agree)."""
    from .data import check_positive_int

    check_positive_int("trained length", trained)
    check_positive_int("wanted length", wanted)
    if wanted <= trained:
        raise LongctxError(f"The wanted length ({wanted:,}) is not above the trained length ({trained:,}): YaRN "
                           "rescales positions beyond the trained range; inside it, use the model as it is.")
    computed = wanted / trained
    if factor is not None and abs(factor - computed) > 1e-9 * computed:
        raise LongctxError(f"YaRN factor {factor:g} does not match the lengths: {wanted:,} / {trained:,} = "
                           f"{computed:g}. Use factor={computed:g}, or change the wanted or trained length.")
    return {"rope_type": "yarn", "rope_theta": float(theta), "factor": float(computed),
            "original_max_position_embeddings": int(trained)}


def with_yarn(cfg, trained: int, wanted: int, *, factor: float | None = None, theta: float | None = None):
    """A copy of `cfg` with YaRN set (and max_position_embeddings raised to `wanted`). `theta`, when
    given, must be the model's own: the rescaling is defined relative to the frequencies it was trained with."""
    import copy

    own = rope_theta(cfg)
    if theta is not None and float(theta) != own:
        raise LongctxError(f"rope_theta {theta:g} is not the model's own ({own:g}); YaRN must carry the trained "
                           f"base frequency: use rope_theta={own:g}.")
    new = copy.deepcopy(cfg)
    new.rope_parameters = yarn_parameters(trained, wanted, own, factor)
    new.max_position_embeddings = wanted
    return new
