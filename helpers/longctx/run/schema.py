"""Each notebook's parameters checked once, before a kernel starts, against notebooks/params/<notebook>/schema.yaml: a
JSON Schema of names, types and ranges validated by jsonschema, plus the relations it cannot state (`x-relations`)."""

import contextlib
import math
import os
from functools import lru_cache

import yaml
from jsonschema import Draft202012Validator, ValidationError, validators

from longctx.errors import LongctxError, is_power_of_two
from longctx.lengths import parse_length
from longctx.levers.rope import DEFAULT_BETA_SLOW
from longctx.memory.cards import capacity
from longctx.models import (
    PRESETS,
    cached_config,
    cached_weights,
    check_fetchable,
    check_spec,
    check_tokenizer,
    check_weights,
    has_weights,
    is_local_config,
)
from longctx.paths import MINIATURES, miniature, schema_file, user_path
from longctx.pretrain import manifest

# a whole number is an int, never 2.0 or True (JSON Schema's own "integer" takes both); a number is never nan or inf
_TYPES = Draft202012Validator.TYPE_CHECKER.redefine("integer", lambda _, v: type(v) is int)
_TYPES = _TYPES.redefine("number", lambda _, v: _num(v) and (type(v) is int or math.isfinite(v)))
_WORDS = dict(integer="a whole number", number="a finite number", string="text", array="a list", boolean="true or false")
MAX_ITEMS = 32  # values in a list parameter: eight times the most any size gives one (a sweep varies more)
_SAY = {  # jsonschema's findings in the words of a person fixing a -p value
    "minimum": lambda arg: {0: "must not be negative", 1: "must be positive"}.get(arg, f"must be at least {arg}"),
    "exclusiveMinimum": lambda arg: "must be positive" if arg == 0 else f"must be above {arg}",
    "maximum": lambda arg: f"must be at most {arg:,}",
    "enum": lambda arg: f"must be one of {', '.join(map(str, arg))}",
    "minItems": lambda arg: "must not be empty",
    "maxItems": lambda arg: f"must hold at most {arg} values (each is a point measured or drawn, one after another)",
    "uniqueItems": lambda arg: "must not repeat a value (each is a point measured or drawn)",
    "contains": lambda arg: f"must contain {arg['const']!r}",
}


def schema(notebook: str) -> dict:
    return _schema(schema_file(notebook))


@lru_cache(maxsize=None)
def _schema(path) -> dict:
    notebook = path.parent.name
    if not path.is_file():
        raise LongctxError(f"{notebook} has no parameter schema ({path}); a lesson declares its parameters there.")
    declared = yaml.safe_load(path.read_text())
    for spec in declared.get("properties", {}).values():  # every list, unless its schema says otherwise
        if spec.get("type") == "array":
            spec.setdefault("maxItems", MAX_ITEMS)
        if "length" not in spec.get("x-cpu-step", {"length": None}):  # the length a step trains (not its batch): a
            # token's target is the next token, so at least 2
            length = spec.get("items", spec)
            length["minimum"] = max(length.get("minimum", 2), 2)
    return declared


def _card(value, context):
    try:
        if isinstance(value, str):  # another type is reported as such
            capacity(value)
    except LongctxError as exc:
        return f"is not a card: {str(exc).rstrip('.')}"


def _weights(value, context):
    """A model a lesson trains: a preset, one of the lessons' own miniatures where the schema says `x-weights:
    miniatures`, or weights and a tokenizer loadable as the lesson loads them (a local folder's, or a cached hub id's
    snapshot; a hub id not cached is the hub's, checked by needs)."""
    if not isinstance(value, str) or value in PRESETS:
        return None
    if value in MINIATURES:
        if context["arg"] != "miniatures":
            return f"is one of lesson 02's own models ({', '.join(MINIATURES)}): give a preset, a model folder or a hub id"
        manifest(miniature(value))  # the committed miniature, whole
        return None
    check_spec(value)
    if not context["weights"]:
        return None
    if cached := cached_config(value):
        check_fetchable({value: "weights"}, "Loading its weights")  # a cache holding pickled weights only: refused here
        folder = cached.parent if cached_weights(value) else None
    elif (path := user_path(value, "The model")).is_dir() or is_local_config(path):
        if not has_weights(path):
            return (
                "has no weights to load (only safetensors files are loaded: a pickled pytorch_model.bin can run code; a "
                "config.json alone is for estimates): give a model folder with its safetensors files, a hub id, or a preset"
            )
        folder = path
    else:
        return None  # a hub id not cached
    try:
        check_weights(folder) if folder else None
        check_tokenizer(folder) if folder else None
    except LongctxError as exc:
        return f"cannot be used: {str(exc).rstrip('.')}"


def _config(value, context):
    """A local config.json (or model folder), or a hub id's cached one, for the estimate: refused as the estimate would
    refuse it, before the kernel gets to the cell that estimates (a preset is known good; a hub id not cached is the
    hub's, checked by needs)."""
    if not isinstance(value, str) or value in PRESETS:
        return None
    check_spec(value)
    if is_local_config(path := user_path(value, "The model")) or cached_config(value):
        from longctx.memory.estimate import check_model
        from longctx.models import config

        try:
            check_model(config(str(path) if is_local_config(path) else value))
        except LongctxError as exc:
            return f"is no model the estimate takes: {str(exc).rstrip('.')}"


def _processes(value, context):
    cores = os.cpu_count() or 1
    big = [v for v in value if isinstance(v, int) and v > 2 * cores] if context["on_cpu"] else []
    return f"asks for {max(big)} processes on {cores} CPU cores (at most {2 * cores} here)" if big else None


def _dtype(value, context):
    # fp16 weights train with no loss scaling in the CPU sizes' steps: a ci run of lesson 00 reached NaN losses
    return (
        "trains on a CPU in pure fp16 with no loss scaling, and its losses turn NaN: use bf16 or fp32 here"
        if (context["on_cpu"] and value == "fp16")
        else None
    )


KEYWORDS = {
    "x-card": _card,
    "x-config": _config,
    "x-dtype": _dtype,
    "x-weights": _weights,
    "x-processes": _processes,
    "x-pad": lambda v, _: None
    if v in (None, "auto") or type(v) is int and v > 0
    else 'must be null, "auto" or a positive whole number',
    "x-beta-fast": lambda v, _: None  # YaRN's beta_fast, beta_slow kept at transformers' default
    if v is None or not _num(v) or v > DEFAULT_BETA_SLOW
    else f"must be above beta_slow ({DEFAULT_BETA_SLOW:g}, transformers' default, which the lesson keeps)",
    "x-power-of-two": lambda v, _: None if is_power_of_two(v) else "must be a power of two (1, 2, 4, 8, ...)",
    "x-cpu-step": lambda v, _: None,  # a length of a real CPU step, its model and batch: run.harness._cpu_step reads it
}


def _relations(params, relations):
    """Each relation names its parameter first; the first one broken is reported."""
    for rel in relations or ():  # an empty `x-relations:` reads as null
        [(kind, (name, *other))] = rel.items()  # one relation: its kind, its parameter, and what it relates that to
        value, why = params.get(name), None
        largest = max([v for v in value if _num(v)] or [0]) if isinstance(value, list) else value  # a list: its largest
        if kind in ("at_most", "below") and _num(largest) and _num(limit := params.get(other[0])):
            if largest > limit or kind == "below" and largest == limit:
                named, most = f"{other[0]} ({limit})", "at most" if kind == "at_most" else "below"
                where = "over" if largest > limit else "not below"
                why = f"must be {most} {named}" if largest is value else f"has {largest}, {where} {named}"
        elif kind == "cp_multiple_of":  # context parallelism over N ranks cuts the sequence into 2·N chunks
            given = params.get(other[0])
            step = 2 * max([r for r in (given if isinstance(given, list) else [given]) if _num(r) and r > 0] or [1])
            named = f"the largest of {other[0]}" if isinstance(given, list) else other[0]
            bad = [v for v in (value if isinstance(value, list) else [value]) if _num(v) and v % step]
            why = f"must be a multiple of 2 × {named} = {step}" if bad else None
            why = f"has {bad[0]}, which {why}" if why and isinstance(value, list) else why
        elif kind == "times_at_most" and all(_num(params.get(n)) for n in (name, *other)):
            if value * params[other[0]] > params[other[1]]:
                why = f"× {other[0]}={params[other[0]]!r} must be at most {other[1]} ({params[other[1]]})"
        elif kind == "divides" and _num(params.get(other[0])):  # e.g. a pad_to_multiple_of that max_length is a multiple of
            bad = [
                v for v in (value if isinstance(value, list) else [value]) if type(v) is int and v > 0 and params[other[0]] % v
            ]
            why = f"has {bad[0]}, which does not divide {other[0]} ({params[other[0]]})" if bad else None
        elif kind == "cp_plan" and _num(value) and _num(params.get(other[1])) and isinstance(params.get(other[0]), str):
            why = _cp_plan(params[other[0]], params[other[1]], value)
        elif kind == "needed_unless" and not value and params.get(other[0], other[1]) not in other[1:]:  # (both given)
            why = f"must be set when {other[0]} is not " + " or ".join(map(repr, other[1:]))
        if why:
            yield ValidationError(f"{name}={_brief(value)} {why}")


def _cp_plan(model: str, tokens: int, cp_size: int) -> str | None:
    """What shapes.check_plan says of a context-parallel plan of `model` (one whose config is here: a preset, a local
    one, a cached hub one; another is the hub's, checked by needs)."""
    from longctx.models import config
    from longctx.shapes import check_plan

    if not (model in PRESETS or is_local_config(user_path(model, "The model")) or cached_config(model)):
        return None
    try:
        check_plan(config(model), tokens, cp_size=cp_size)
    except LongctxError as exc:
        return f"cannot split {model}'s {tokens:,} tokens: {str(exc).rstrip('.')}"
    return None


def _num(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check(notebook: str, params: dict, *, on_cpu: bool = True, weights: bool = True) -> None:
    """Refuse, naming the fix, a parameter the notebook does not have, or a value outside its type, range or
    relations."""
    declared = schema(notebook)
    if unknown := [name for name in params if name not in declared["properties"]]:
        raise LongctxError(f"{notebook} has no parameter {unknown[0]!r}. Its parameters: {', '.join(declared['properties'])}.")
    context = {"on_cpu": on_cpu, "weights": weights}

    def keyword(check):  # a jsonschema keyword from `check(value, context) -> why or None`
        def judged(value, arg):
            try:
                return check(value, {**context, "arg": arg})  # (arg: the keyword's value in the schema)
            except OSError as exc:  # the file system's answer about a path given (too long, unreadable, ...)
                return f"cannot be read as a path: {exc.strerror or exc}"
            except LongctxError as exc:  # a library check's refusal (an empty path, say), said of this parameter
                return f"is refused: {str(exc).rstrip('.')}"

        return lambda validator, arg, value, _: [ValidationError(why)] if (why := judged(value, arg)) else []

    keywords = {k: keyword(f) for k, f in KEYWORDS.items()}
    keywords["x-relations"] = lambda validator, rels, params, _: _relations(params, rels)
    validator = validators.extend(Draft202012Validator, keywords, type_checker=_TYPES)(declared)
    order = list(declared["properties"])  # per parameter in its order, the innermost finding first; relations last
    found = validator.iter_errors(params)
    error = min(found, key=lambda e: (order.index(e.path[0]), -len(e.path)) if e.path else (len(order), 0), default=None)
    if error is None:
        return
    if not error.path:  # x-relations: the message names its parameter
        raise LongctxError(f"{notebook}: {error.message}.")
    name, *inner = error.path
    kind, arg, bad = error.validator, error.validator_value, error.instance
    if kind == "type":
        wanted = arg if isinstance(arg, str) else next(t for t in arg if t != "null")
        why = f"must be {_WORDS[wanted]}, not {type(bad).__name__} {bad!r}"
        why += f" (quote it to pass it as text: -p '{name}=\"{bad}\"')" if wanted == "string" else ""
        if wanted == "array" and (isinstance(bad, str) or _num(bad)):
            listed = bad if isinstance(bad, str) and bad.startswith("[") else f"[{bad}]"
            why += (f" (longctx run: -p '{name}={listed}'; papermill's -p passes a list as text: give it with -y "
                    f"'{name}: {listed}')")  # fmt: skip
        with contextlib.suppress(LongctxError):  # a length such as 1M or 96k, written out
            why += f" (write {bad} as -p {name}={parse_length(bad)})" if wanted == "integer" and isinstance(bad, str) else ""
    else:  # the x- keywords say it themselves
        why = _SAY[kind](arg) if kind in _SAY else error.message
    said = f"has {_brief(bad)}, which {why}." if inner else f"{why}."
    raise LongctxError(f"{notebook}: {name}={_brief(params[name])} {said}")


def _brief(value) -> str:
    """A value as the error shows it: its repr, cut (a list of thousands of values is not printed whole)."""
    text = repr(value)
    if len(text) <= 120:
        return text
    return text[:100] + (f"… ({len(value):,} values)" if isinstance(value, list) else "…")
