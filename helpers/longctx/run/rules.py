"""Ranges and relations of the notebooks' parameters (notebooks/params/rules.yaml), checked before a
kernel starts, so that `LINK_GB_PER_S=0` or `RANKS=[2]` is refused in a second rather than failing deep
inside a notebook after minutes of work."""

from __future__ import annotations

import math
import os
from functools import lru_cache

import yaml

from longctx.errors import SEED_LIMIT, LongctxError, is_power_of_two
from longctx.paths import notebooks_dir


@lru_cache(maxsize=None)
def table() -> dict:
    return yaml.safe_load((notebooks_dir() / "params" / "rules.yaml").read_text()) or {}


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _local_model(value: str) -> bool:
    """Whether a model name is a local model: a config.json, or a folder holding one."""
    from longctx.models import is_local_config
    from longctx.paths import user_path

    try:
        return is_local_config(user_path(value, "The model"))
    except LongctxError:
        return False


def _fails(rule, value, params: dict, on_cpu: bool = True) -> str | None:
    """Why `value` breaks `rule` (None when it does not)."""
    if isinstance(rule, list):
        return next((why for r in rule if (why := _fails(r, value, params, on_cpu))), None)
    if rule in ("positive", "non_negative") or isinstance(rule, dict) and ("min" in rule or "max" in rule):
        if not _number(value):
            return "must be a number"
    if rule == "positive":
        return None if value > 0 else "must be positive"
    if rule == "non_negative":
        return None if value >= 0 else "must not be negative"
    if rule == "power_of_two":
        return None if is_power_of_two(value) else "must be a power of two (1, 2, 4, 8, ...)"
    if rule == "seed":
        ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value < SEED_LIMIT
        return None if ok else f"must be a whole number from 0 to {SEED_LIMIT - 1:,} (numpy and transformers' set_seed)"
    if rule == "estimable":  # a length the fake-tensor estimator takes
        from longctx.lengths import MAX_TOKENS

        ok = isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_TOKENS
        return None if ok else f"must be a whole number of tokens from 1 to {MAX_TOKENS:,} (what the estimator takes)"
    if rule == "card":  # a GPU the estimates are held against
        from longctx.memory.cards import capacity

        try:
            capacity(value)
        except LongctxError as exc:
            return f"is not a card: {str(exc).rstrip('.')}"
        return None
    if rule == "weights":  # a model the lesson loads with its weights and trains
        from longctx.models import PRESETS, has_weights

        # names that are no model at all are refused afterwards, with the list of what is (models.check_spec)
        if not isinstance(value, str) or value in (*PRESETS, "base") or not _local_model(value) or has_weights(value):
            return None
        return (
            "has no weights to load (a config.json describes a model for estimates only; only safetensors files are "
            "loaded, a pickled pytorch_model.bin can run code): give a model folder with its .safetensors files, a hub "
            "id, or a preset"
        )
    if rule == "integer":
        return None if isinstance(value, int) and not isinstance(value, bool) else "must be a whole number"
    if rule == "pad":  # pad_to_multiple_of: None, "auto" or a positive whole number
        ok = value is None or value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value > 0)
        return None if ok else 'must be null, "auto" or a positive whole number'
    if rule == "nonempty":
        return None if value else "must not be empty"
    if rule == "processes":
        cores = os.cpu_count() or 1
        if not on_cpu or not isinstance(value, list):  # on GPUs: one per GPU, checked against the size's needs
            return None
        big = [v for v in value if _number(v) and v > 2 * cores]
        return f"asks for {max(big)} processes on {cores} CPU cores (at most {2 * cores} here)" if big else None
    if isinstance(rule, dict) and len(rule) == 1:
        ((kind, arg),) = rule.items()
        if kind == "min":
            return None if value >= arg else f"must be at least {arg}"
        if kind == "max":
            return None if value <= arg else f"must be at most {arg:,}"
        if kind == "at_most":
            other = params.get(arg)
            return None if not (_number(value) and _number(other)) or value <= other else f"must be at most {arg} ({other})"
        if kind == "each":
            bad = [(v, why) for v in (value if isinstance(value, list) else []) if (why := _fails(arg, v, params, on_cpu))]
            return f"has {bad[0][0]!r}, which {bad[0][1]}" if bad else None
        if kind == "optional":  # null allowed (the notebook's default), any other value follows the rule
            return None if value is None else _fails(arg, value, params, on_cpu)
        if kind == "one_of":
            return None if value in arg else f"must be one of {', '.join(map(str, arg))}"
        if kind == "cp_multiple_of":  # context parallelism over N ranks cuts the sequence into 2·N chunks
            given = params.get(arg)
            ranks = [r for r in (given if isinstance(given, list) else [given]) if _number(r)]
            step = 2 * max(ranks) if ranks else 2
            named = f"the largest of {arg}" if isinstance(given, list) else arg
            return None if not _number(value) or value % step == 0 else f"must be a multiple of 2 × {named} = {step}"
        if kind == "needed_unless":  # needed, except when another parameter has the given value
            ((other, exempt),) = arg.items()
            if params.get(other) == exempt or value:
                return None
            return f"must be set when {other} is not {exempt!r}"
        if kind == "fits_ram":  # a real step on this machine's CPU: its estimate against the free memory
            return _step_too_big(value, arg, params) if on_cpu else None
        if kind == "contains":  # 1 in [True] is True in Python; a flag is not a count
            found = isinstance(value, list) and any(v == arg and type(v) is type(arg) for v in value)
            return None if found else f"must contain {arg!r}"
    raise LongctxError(f"rules.yaml: unknown rule {rule!r}")


@lru_cache(maxsize=64)
def _step_gib(model: str, dtype: str, seq_len: int, batch: int, loss: str, checkpointing: bool) -> float:
    from longctx.memory.estimate import estimate

    return estimate(model, seq_len, batch=batch, dtype=dtype, device="cpu", loss=loss, checkpointing=checkpointing).peak_gib


def _step_floor_gib(model: str, dtype: str, tokens: int, loss: str, checkpointing: bool) -> float:
    """Less than any training step of `tokens` needs, from the config alone: each layer's saved (tokens × hidden)
    input, without checkpointing also its MLP's (tokens × intermediate) activation (with it, the one layer being
    computed still makes one), and with the plain loss the (tokens × vocabulary) logits."""
    from longctx.models import config, torch_dtype
    from longctx.units import GIB

    text = config(model).get_text_config()
    inter = getattr(text, "intermediate_size", 0)
    inter = inter if isinstance(inter, int) else 0
    per_layer = text.hidden_size + (0 if checkpointing else inter)
    per_token = text.num_hidden_layers * per_layer + (inter if checkpointing else 0) + (text.vocab_size if loss == "plain" else 0)
    return tokens * per_token * torch_dtype(dtype).itemsize / GIB


# Below an eighth of the free memory the config's floor clears a step at once: where a floor reaches gigabytes, a
# step's estimate was 6.6 times it (tiny and tiny-qwen-vocab, chunked, at 2M and 16M tokens). Above it the step is
# estimated, as far as an estimate takes seconds: its cost grows with the tokens (45 s at 2M, 5 minutes at 16M).
CLEAR_SHARE = 1 / 8
ESTIMATE_TOKENS = 262_144


def _step_too_big(seq_len, arg: dict, params: dict) -> str | None:
    """Why one training step of `seq_len` tokens would not fit this machine's free memory (None when it
    would, or when the model's config is not at hand without a download). The config's floor is instant; the
    estimate (seconds) runs only when the floor comes within CLEAR_SHARE of the free memory."""
    import psutil

    from longctx.models import PRESETS
    from longctx.units import GIB

    model, dtype = params.get(arg["model"]), params.get(arg.get("dtype", "fp32"), arg.get("dtype", "fp32"))
    if (
        not isinstance(seq_len, int)
        or isinstance(seq_len, bool)
        or not isinstance(model, str)
        or not (model in PRESETS or _local_model(model))
    ):
        return None
    batches = [params.get(b, b) for b in arg.get("batch", [1])]
    batch = max(b for b in batches if isinstance(b, int) and not isinstance(b, bool))
    loss, checkpointing = arg.get("loss", "chunked"), arg.get("checkpointing", True)
    free = psutil.virtual_memory().available / GIB
    floor = _step_floor_gib(model, dtype, seq_len * batch, loss, checkpointing)
    if floor <= free * CLEAR_SHARE:
        return None
    why = f"for one training step of {model} at batch {batch}, more than the {free:.1f} GiB this machine has free; lower it"
    if floor > free:
        return f"needs at least {floor:.1f} GiB (what each layer must keep{' and the logits' if loss == 'plain' else ''}) {why}"
    if seq_len * batch > ESTIMATE_TOKENS:
        return (
            f"is too long a CPU step to clear before the run: one step of {model} at batch {batch} needs at least "
            f"{floor:.1f} GiB, too close to the {free:.1f} GiB free to pass unchecked, and estimating it would take "
            f"minutes; lower it to at most {ESTIMATE_TOKENS // batch:,} tokens, or run where more memory is free"
        )
    try:
        need = _step_gib(model, dtype, seq_len, batch, loss, checkpointing)
    except LongctxError as exc:
        return f"is more than a step can take: {str(exc).rstrip('.')}"
    return None if need <= free else f"needs about {need:.1f} GiB (estimate) {why}"


def check(notebook: str, params: dict, on_cpu: bool = True, weights: bool = True) -> None:
    """Refuse parameter values outside their declared ranges or relations; every float must be finite.
    `on_cpu`: the run's processes share this machine's CPU cores. `weights=False` leaves out the check that a
    model folder holds weights (a dry run checks a folder whose weights the real run writes first)."""
    for name, value in params.items():
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, float) and not math.isfinite(v):
                raise LongctxError(f"{notebook}: {name} must be a finite number, got {value!r}.")
    for name, rule in table().get(notebook, {}).items():
        if rule == "weights" and not weights:
            continue
        if name in params and (why := _fails(rule, params[name], params, on_cpu)):
            raise LongctxError(f"{notebook}: {name}={params[name]!r} {why}.")
