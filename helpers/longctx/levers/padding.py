"""Padding for compiled accelerators: TRL's `pad_to_multiple_of` on a device, the batch shapes a trainer's own
dataloader will produce (known before anything compiles), and which of TRL's trainers offer the option."""

import itertools
import math
from dataclasses import dataclass, fields, is_dataclass

from longctx.errors import LongctxError


def check_padding(pad_to_multiple_of, max_length: int | None, device_type: str = "cpu"):
    """The padding multiple on `device_type` ("auto": 128 on Neuron, else None, as trl 1.16's SFTConfig.__post_init__),
    refusing a max_length that is not a multiple of it: truncated sequences would be padded past it, an unplanned shape."""
    pad = pad_to_multiple_of
    if pad == "auto":  # (the lesson's schema holds it to null, "auto" or a positive whole number: x-pad)
        pad = 128 if device_type == "neuron" else None
    if pad and max_length and max_length % pad:
        lower, upper = max_length // pad * pad, -(-max_length // pad) * pad
        raise LongctxError(
            f"max_length={max_length} is not a multiple of pad_to_multiple_of={pad}: use "
            f"max_length={lower or upper} or {upper}, or another padding multiple."
        )
    return pad


@dataclass
class Census:
    shapes: list[tuple[int, ...]]  # the input_ids shape of every batch, in order

    @property
    def distinct(self) -> list[tuple[int, ...]]:
        return sorted(set(self.shapes))

    @property
    def tokens(self) -> int:  # positions fed to the model, padding included
        return sum(math.prod(s) for s in self.shapes)


def shape_census(trainer, steps: int) -> Census:
    """The input shapes of the first `steps` batches of `trainer`'s own dataloader (its collator, its padding, its
    order, epoch after epoch): what the compiled model will be fed."""
    loader = trainer.get_train_dataloader()
    if not len(loader):
        raise LongctxError("the trainer's dataloader is empty.")
    batches = itertools.islice(itertools.chain.from_iterable(itertools.repeat(loader)), steps)
    return Census([tuple(batch["input_ids"].shape) for batch in batches])


def trainers_with_padding_option() -> list[str]:
    """TRL config classes that expose `pad_to_multiple_of` (read from trl itself, not typed in)."""
    import trl

    names = []
    for name in dir(trl):
        try:
            cls = getattr(trl, name) if name.endswith("Config") and not name.startswith("_") else None
        except Exception:  # lazy imports of optional extras
            continue
        if is_dataclass(cls) and any(f.name == "pad_to_multiple_of" for f in fields(cls)):
            names.append(name.removesuffix("Config"))
    return sorted(names)
