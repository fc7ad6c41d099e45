"""What a reader copies into their own training script. A `Call` is a constructor call kept as data (a class and its
keyword arguments): the helpers build their TRL, accelerate and peft configs from one (`Call.build`) and the lessons
print the same one as source (`snippet`), so the snippet cannot drift from what ran; tests/test_recipe.py runs each."""

import importlib
import json
from dataclasses import dataclass, field
from importlib.metadata import version

from longctx.errors import LongctxError, check_choice

_CP = ("parallelism_config", "fsdp", "fsdp_config", "activation_checkpointing", "max_length", "pad_to_multiple_of")
_OFFLOAD = ("activation_checkpointing", "activation_checkpointing_kwargs")
# The arguments that switch each lever on, in the order a snippet shows them.
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
    "one million tokens": ("loss_type", *_OFFLOAD, "bf16", "max_length", "pad_to_multiple_of"),
}
ALWAYS = ("per_device_train_batch_size",)  # shown with every lever: transformers' default of 8 is a trap at long context
WIDTH = 100  # a snippet's lines stay within this many characters where a value allows


@dataclass(frozen=True)
class Call:
    target: type
    kwargs: dict = field(default_factory=dict)

    def build(self):
        """The object itself: nested calls built first, as the printed source builds them."""
        return self.target(**_each_call(self.kwargs, Call.build))

    def source(self, indent: int = 0) -> str:
        """`Target(k=v, ...)`, one argument per line when long."""
        parts = [f"{n}={_literal(v, indent + 4)}" for n, v in self.kwargs.items()]
        one_line = f"{self.target.__name__}({', '.join(parts)})"
        if indent + len(one_line) <= WIDTH and "\n" not in one_line:
            return one_line
        inner = "".join(f"{' ' * (indent + 4)}{p},\n" for p in parts)
        return f"{self.target.__name__}(\n{inner}{' ' * indent})"

    def targets(self) -> list[type]:
        """Every class the call builds, itself first."""
        found = [self.target]
        _each_call(self.kwargs, lambda inner: found.extend(inner.targets()))
        return list(dict.fromkeys(found))


def _each_call(value, do):
    """`value` with each Call in it (in dicts, lists and tuples too) replaced by `do(call)`."""
    if isinstance(value, Call):
        return do(value)
    if isinstance(value, dict):
        return {k: _each_call(v, do) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_each_call(v, do) for v in value)
    return value


def _literal(value, indent: int) -> str:
    if isinstance(value, Call):
        return value.source(indent=indent)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    if isinstance(value, dict):
        items = [f"{_literal(k, indent)}: {_literal(v, indent + 4)}" for k, v in value.items()]
        text = "{" + ", ".join(items) + "}"
        if indent + len(text) <= WIDTH - 20 or not items:
            return text
        return "{\n" + "".join(f"{' ' * (indent + 4)}{i},\n" for i in items) + " " * indent + "}"
    if isinstance(value, (list, tuple)):
        text = ", ".join(_literal(v, indent) for v in value)
        return f"[{text}]" if isinstance(value, list) else f"({text}{',' if len(value) == 1 else ''})"
    raise LongctxError(f"A {type(value).__name__} cannot be printed as a snippet value: {value!r}.")


def import_line(cls: type) -> str:
    """`from <package> import Name`, from the shortest public module that exports the class."""
    parts = cls.__module__.split(".")
    for module in (".".join(parts[:n]) for n in range(1, len(parts) + 1)):
        try:
            if getattr(importlib.import_module(module), cls.__name__, None) is cls:
                return f"from {module} import {cls.__name__}"
        except ImportError:
            continue
    return f"from {cls.__module__} import {cls.__name__}"


def snippet(call: Call, lever: str | tuple[str, ...], *, name: str = "args") -> str:
    """Copy-pasteable source that builds `call`'s class with the arguments of `lever` (see LEVERS; a tuple
    of levers shows all of theirs)."""
    levers = (lever,) if isinstance(lever, str) else tuple(lever)
    for one in levers:
        check_choice("lever", one, LEVERS)
    wanted = list(dict.fromkeys(n for one in levers for n in LEVERS[one]))
    if all(call.kwargs.get(n) is None for n in wanted):
        raise LongctxError(
            f"This {call.target.__name__} call sets none of {' + '.join(levers)}'s arguments ({', '.join(wanted)})."
        )
    shown = Call(call.target, {n: call.kwargs[n] for n in dict.fromkeys([*ALWAYS, *wanted]) if call.kwargs.get(n) is not None})
    imports = sorted({import_line(t) for t in shown.targets()})
    return "\n".join(imports) + f"\n\n{name} = {shown.source()}"


def show(call: Call, lever: str | tuple[str, ...], *, name: str = "args", after: str = "") -> None:
    """Print the snippet under a comment naming the installed versions of the libraries it uses."""
    packages = [t.__module__.split(".")[0] for t in call.targets()]
    packages = [p for p in dict.fromkeys([*packages, "transformers"]) if p != "builtins"]
    title, trl = lever if isinstance(lever, str) else " + ".join(lever), call.target.__module__.startswith("trl.")
    print(
        f"# {title}: printed from the lesson's own config ({', '.join(f'{p} {version(p)}' for p in packages)})\n"
        + ("# (trl's configs turn bf16 on by default: on a machine without a GPU add bf16=False)\n" if trl else "")
        + snippet(call, lever, name=name)
        + (f"\n\n{after}" if after else "")
    )


# A lesson's recipe ("In your own script") is literal code in its markdown; the keys that say where and how long a
# run is, which differ between a lesson's miniature and the recipe's full size, are not compared with what ran.
SIZES = ("output_dir", "max_length", "max_steps", "bf16", "use_cpu", "pad_to_multiple_of", "cp_size", "sp_size")


def ran(config) -> dict:
    """What a config object (an SFTConfig, a GRPOConfig, a ParallelismConfig, a LoraConfig) ran with, as JSON: every
    argument of its class ("values"; a nested config as {its class name: what it ran with}) and the names of those that
    differ from the class's defaults ("changed")."""
    import dataclasses

    values, changed = {}, []
    for f in (f for f in dataclasses.fields(config) if f.init):
        value = getattr(config, f.name)
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        values[f.name] = {type(value).__name__: ran(value)} if dataclasses.is_dataclass(value) else _json(value)
        if value != default:
            changed.append(f.name)
    return {"values": values, "changed": changed}


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
    keyword arguments}, read as literals (a nested call as {its name: its arguments}; anything else as its source)."""
    import ast
    import re

    found = {}
    for block in re.findall(r"```python\n(.*?)```", markdown, re.S):
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id[:1].isupper():
                found.setdefault(node.func.id, {k.arg: _literal_of(k.value) for k in node.keywords if k.arg})
    return found


def _literal_of(node):
    import ast

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
        if key in SIZES:
            continue
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
