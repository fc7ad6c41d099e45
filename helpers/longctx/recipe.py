"""What a reader copies into their own training script, printed from the objects the lessons run.

A `Call` is a constructor call kept as data: a class and its keyword arguments. The helpers build their
TRL, accelerate and peft configs from one (`Call.build`), and the lessons print the same one as Python
source (`snippet`), so the snippet cannot drift from what ran. `tests/test_recipe.py` executes every
lever's snippet and compares the object it makes with the helper's.
"""

from __future__ import annotations

import enum
import importlib
import json
from dataclasses import dataclass, field

from longctx.errors import LongctxError

# The arguments that switch each lever on, in the order a snippet shows them.
LEVERS = {
    "accumulation": ("per_device_train_batch_size", "gradient_accumulation_steps"),
    "lora": ("r", "lora_alpha", "target_modules"),
    "checkpointing": ("activation_checkpointing",),
    "chunked loss": ("loss_type",),
    "yarn": ("model_init_kwargs", "max_length"),
    "offload": ("activation_checkpointing", "activation_checkpointing_kwargs"),
    "context parallelism": (
        "parallelism_config",
        "fsdp",
        "fsdp_config",
        "activation_checkpointing",
        "max_length",
        "pad_to_multiple_of",
    ),
    "sequence parallelism": ("parallelism_config", "deepspeed", "max_length"),
    "padding": ("max_length", "pad_to_multiple_of", "torch_compile"),
    "static cache": ("cache_implementation", "max_completion_length"),
    "one million tokens": (
        "loss_type",
        "activation_checkpointing",
        "activation_checkpointing_kwargs",
        "bf16",
        "max_length",
        "pad_to_multiple_of",
    ),
}
WIDTH = 100  # a snippet's lines stay within this many characters where a value allows


@dataclass(frozen=True)
class Call:
    target: type
    kwargs: dict = field(default_factory=dict)

    def build(self):
        """The object itself: nested calls built first, as the printed source builds them."""
        return self.target(**{k: _built(v) for k, v in self.kwargs.items()})

    def source(self, names=None, indent: int = 0) -> str:
        """`Target(k=v, ...)` for `names` (all arguments when None), one argument per line when long."""
        names = list(self.kwargs) if names is None else list(names)
        missing = [n for n in names if n not in self.kwargs]
        if missing:
            raise LongctxError(
                f"{self.target.__name__} call has no argument {missing[0]!r}; it has {', '.join(self.kwargs) or 'none'}."
            )
        parts = [f"{n}={_literal(self.kwargs[n], indent + 4)}" for n in names]
        one_line = f"{self.target.__name__}({', '.join(parts)})"
        if indent + len(one_line) <= WIDTH and "\n" not in one_line:
            return one_line
        inner = "".join(f"{' ' * (indent + 4)}{p},\n" for p in parts)
        return f"{self.target.__name__}(\n{inner}{' ' * indent})"

    def targets(self) -> list[type]:
        """Every class the call builds, itself first."""
        found = [self.target]
        for value in self.kwargs.values():
            for inner in _calls_in(value):
                found += [t for t in inner.targets() if t not in found]
        return found


def _built(value):
    if isinstance(value, Call):
        return value.build()
    if isinstance(value, dict):
        return {k: _built(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_built(v) for v in value)
    return value


def _calls_in(value):
    if isinstance(value, Call):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _calls_in(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _calls_in(v)


def _literal(value, indent: int) -> str:
    if isinstance(value, Call):
        return value.source(indent=indent)
    if isinstance(value, enum.Enum):
        return _literal(value.value, indent)
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
    for n in range(1, len(parts) + 1):
        module = ".".join(parts[:n])
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
    wanted = []
    for one in levers:
        if one not in LEVERS:
            raise LongctxError(f"Unknown lever {one!r}; use one of {', '.join(LEVERS)}.")
        wanted += [n for n in LEVERS[one] if n not in wanted]
    names = [n for n in wanted if n in call.kwargs and call.kwargs[n] is not None]
    if not names:
        raise LongctxError(
            f"This {call.target.__name__} call sets none of {' + '.join(levers)}'s arguments ({', '.join(wanted)})."
        )
    shown = Call(call.target, {n: call.kwargs[n] for n in names})
    imports = sorted({import_line(t) for t in shown.targets()})
    return "\n".join(imports) + f"\n\n{name} = {shown.source()}"


def show(call: Call, lever: str | tuple[str, ...], *, name: str = "args", after: str = "") -> None:
    """Print the snippet under a comment naming the installed versions of the libraries it uses."""
    from importlib.metadata import version

    packages = [t.__module__.split(".")[0] for t in call.targets()]
    packages = [p for p in dict.fromkeys([*packages, "transformers"]) if p != "builtins"]
    title = lever if isinstance(lever, str) else " + ".join(lever)
    note = (
        "# (trl's configs turn bf16 on by default: on a machine without a GPU add bf16=False)\n"
        if call.target.__module__.startswith("trl.")
        else ""
    )
    print(
        f"# {title}: printed from the lesson's own config ({', '.join(f'{p} {version(p)}' for p in packages)})\n"
        + note
        + snippet(call, lever, name=name)
        + (f"\n\n{after}" if after else "")
    )
