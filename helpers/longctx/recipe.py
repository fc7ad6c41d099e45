"""What a reader copies into their own training script. A lesson writes its recipe ("In your own script") as literal
code in its markdown and records the config objects it built and ran (`ran`); tests/test_notebooks.py reads the written
calls (`written`) and holds them to what ran (`drift`), so a recipe cannot say other than the run."""

import ast
import re
from pathlib import Path

# The arguments that switch each lever on: a run that changes one of them must have its recipe say so (`drift`).
_CP = ("parallelism_config", "fsdp", "fsdp_config", "activation_checkpointing", "max_length", "pad_to_multiple_of")
_OFFLOAD = ("activation_checkpointing", "activation_checkpointing_kwargs")
LEVERS = {
    "accumulation": ("per_device_train_batch_size", "gradient_accumulation_steps"),
    "lora": ("r", "lora_alpha", "target_modules"),
    "checkpointing": ("activation_checkpointing",),
    "chunked loss": ("loss_type",),
    "yarn": ("model_init_kwargs", "max_length"),
    "offload": _OFFLOAD,
    "context parallelism": _CP,
    "sequence parallelism": ("parallelism_config", "deepspeed", "max_length"),
    "padding": ("max_length", "pad_to_multiple_of", "torch_compile", "activation_checkpointing"),
    "static cache": ("cache_implementation", "max_completion_length", "num_generations"),
}


# A lesson's recipe ("In your own script") is literal code in its markdown; the keys that say where and how long a
# run is, which differ between a lesson's miniature and the recipe's full size, are not compared with what ran.
SIZES = (
    "output_dir", "max_length", "max_completion_length", "max_steps", "bf16", "use_cpu", "pad_to_multiple_of",
    "cp_size", "sp_size",
)  # fmt: skip


def ran(config) -> dict:
    """What a config object (an SFTConfig, a GRPOConfig, a ParallelismConfig, a LoraConfig) ran with, as JSON: every
    argument of its class ("values"; a nested config as {its class name: what it ran with}) and the names of those that
    differ from the class's defaults ("changed")."""
    import dataclasses

    reference = _built_without_arguments(config)
    values, changed = {}, []
    for f in (f for f in dataclasses.fields(config) if f.init):
        value = getattr(config, f.name)
        if reference is not None:  # what the class resolves a default to (trl's None → True for checkpointing)
            default = getattr(reference, f.name)
        else:
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        values[f.name] = {type(value).__name__: ran(value)} if dataclasses.is_dataclass(value) else _json(value)
        if value != default:
            changed.append(f.name)
    return {"values": values, "changed": changed}


def _built_without_arguments(config):
    """The same class built with no argument but where the machine or the folder decide (a trainer config on a CPU
    must say so), or None where it cannot be built bare."""
    where = {k: getattr(config, k) for k in ("output_dir", "use_cpu", "bf16") if hasattr(config, k)}
    try:
        return type(config)(**where)
    except Exception:  # a config with required arguments: the dataclass's declared defaults stand in
        return None


def _json(value):
    import enum

    if isinstance(value, enum.Enum):  # transformers' strategies: str enums
        return value.value
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_json(v) for v in value]
    if isinstance(value, (set, frozenset)):  # peft keeps target_modules as a set: recorded sorted
        return sorted(_json(v) for v in value)
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    return repr(value)


def written(markdown: str) -> dict[str, dict]:
    """The constructor calls a lesson's markdown writes in its ```python blocks, by class name: {"SFTConfig": its
    keyword arguments}, read as literals (a nested call as {its name: its arguments}; a name assigned above as its
    value; anything else as its source)."""
    found, names = {}, {}
    for block in re.findall(r"```python\n(.*?)```", markdown, re.S):
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                names[node.targets[0].id] = node.value
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id[:1].isupper():
                args = {k.arg: _literal_of(_resolved(k.value, names)) for k in node.keywords if k.arg}
                found.setdefault(node.func.id, args)
    return found


def _literal_of(node):
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return {node.func.id: {k.arg: _literal_of(k.value) for k in node.keywords if k.arg}}
    try:
        return ast.literal_eval(node)
    except ValueError:
        return ast.unparse(node)


def drift(written_call: dict, ran_call: dict) -> list[str]:
    """The arguments a written recipe gives otherwise than the run did (SIZES aside, at any depth; `ran_call` is
    ran()'s record), and the lever arguments the run changed from their defaults that the recipe leaves out: [] when
    the recipe says what ran."""
    problems, values = [], ran_call["values"]
    for key, value in written_call.items():
        if key in SIZES or key == "model_init_kwargs" and values.get(key) is None:  # (a lesson that built its model
            continue  # itself handed the trainer no loading arguments: recipe.steps holds the recipe's dtype to its card)
        called = isinstance(value, dict) and len(value) == 1 and next(iter(value))[:1].isupper()  # {"Class": args}
        if called and isinstance(values.get(key), dict) and value.keys() == values[key].keys():
            name = next(iter(value))
            problems += [f"{key}.{p}" for p in drift(value[name], values[key][name])]
        elif isinstance(value, dict) and isinstance(values.get(key), dict):  # a plain dict: the keys written
            problems += [f"{key}.{p}" for p in drift(value, {"values": values[key], "changed": []})]
        elif values.get(key, "(no such argument)") != value:
            problems.append(f"{key}: written {value!r}, ran {values.get(key, '(no such argument)')!r}")
    levers = {k for lever in LEVERS.values() for k in lever} - set(SIZES)
    left_out = sorted(levers & set(ran_call["changed"]) - set(written_call))
    return problems + [f"{key}: ran {values[key]!r}, not written" for key in left_out]


# "# fits: 8 × H100-80GB, launched with scripts/context_parallel_8gpu.yaml" (or "# does not fit: ..."): the card a
# recipe block's step is held to (tests/test_recipes.py), and the accelerate config it is launched with, if any
FITS = re.compile(r"#\s*(fits|does not fit):\s*(\d+)\s*×\s*([\w.-]+)(?:,\s*launched with\s*(\S+))?")
_DTYPES = {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16", "torch.bfloat16": "bf16", "torch.float32": "fp32"}


def steps(markdown: str, root: Path) -> list[dict]:
    """The training steps a lesson's "In your own script" writes, as `memory.estimate.estimate` takes them: one per
    `SFTTrainer(...)` its python blocks build (names assigned in one block are read in the next), held to the card its
    block's FITS comment names."""
    import yaml

    names, found = {}, []
    for block in re.findall(r"```python\n(.*?)```", markdown, re.S):
        tree = ast.parse(block)
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                names[node.targets[0].id] = node.value
        tiled = "tile_mlp(" in block
        claims = FITS.findall(block)
        trainers = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "SFTTrainer"]
        for call in trainers:
            if len(claims) != 1:
                raise ValueError(f"a block building SFTTrainer names one card (`# fits: N × CARD`): {block[:80]!r}")
            verdict, gpus, card, launch = claims[0]
            kw = {k.arg: k.value for k in call.keywords}
            config = _literal_of(_resolved(kw["args"], names))["SFTConfig"]
            config = {k: _resolved_literal(v, names) for k, v in config.items()}
            launched = yaml.safe_load((root / launch).read_text()) if launch else {}
            found.append(_step(config, _resolved(kw["model"], names), kw.get("peft_config"), names, tiled, launched)
                         | {"fits": verdict == "fits", "gpus": int(gpus), "card": card, "line": claims[0]})  # fmt: skip
    return found


def _resolved(node, names):
    """A name's assigned expression (followed through the blocks), or the expression itself."""
    while isinstance(node, ast.Name) and node.id in names:
        node = names[node.id]
    return node


def _resolved_literal(value, names):
    """A literal read off a recipe; a name written in its place (a dictionary assigned above) read as its value."""
    if isinstance(value, str) and value.isidentifier() and value in names:
        return _literal_of(names[value])
    return value


def _step(config: dict, model, peft, names: dict, tiled: bool, launched: dict) -> dict:
    """(model id, length, estimate's keywords) of one trainer of a recipe (see `steps`)."""
    init = config.get("model_init_kwargs") or {}
    if isinstance(model, ast.Call):  # AutoModelForCausalLM.from_pretrained("<id>", dtype=..., attn_implementation=...)
        given = {k.arg: _literal_of(k.value) for k in model.keywords}
        model_id, dtype = model.args[0].value, _DTYPES[given.get("dtype", "bfloat16")]
        attn = given.get("attn_implementation", "sdpa")
    else:
        model_id, dtype, attn = model.value, _DTYPES[init.get("dtype", "float32")], init.get("attn_implementation", "sdpa")
    parallel = next(iter((config.get("parallelism_config") or {}).values()), {})
    cp = parallel.get("cp_size", launched.get("parallelism_config", {}).get("parallelism_config_cp_size", 1))
    zero = (config.get("deepspeed") or {}).get("zero_optimization", {})
    host = zero.get("offload_optimizer", {}).get("device") == "cpu"  # (the host's fp32 masters: estimate's HostState)
    sharded = bool(config.get("fsdp") or config.get("deepspeed")) or launched.get("distributed_type") == "FSDP"
    masters = sharded and config.get("bf16", True) and not host  # FSDP2's upcast, DeepSpeed's bf16: 16 bytes a parameter
    kwargs = dict(
        dtype="bf16" if masters else dtype,
        mixed_precision=masters,
        batch=config.get("per_device_train_batch_size", 8),
        checkpointing=config.get("activation_checkpointing", True),
        offload=bool((config.get("activation_checkpointing_kwargs") or {}).get("offload")),
        attn_implementation=attn,
        cp_size=cp,
        sp_size=parallel.get("sp_size", 1),
        tiled_mlp=tiled,
        offload_optimizer=host,
        offload_params=zero.get("offload_param", {}).get("device") == "cpu",
        fused_norm=bool(config.get("use_liger_kernel")),
        lora=_literal_of(_resolved(peft, names))["LoraConfig"]["r"] if peft is not None else 0,
    )
    return {"model": model_id, "seq_len": config["max_length"], "kwargs": kwargs}
