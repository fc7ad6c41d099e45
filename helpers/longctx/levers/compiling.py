"""Compilation as a compiled accelerator sees it: AWS Trainium's Neuron compiler builds a graph for every input shape
it meets (about a minute each); on a CPU, torch.compile with automatic dynamic shapes off does the same and stands in.
`padding.shape_census` lists the shapes a trainer will be fed: `CompileStructure.predict` counts compiles in advance."""

import contextlib
import time
from collections import Counter
from dataclasses import dataclass

from longctx import quiet
from longctx.errors import LongctxError
from longctx.levers.padding import Census, shape_census

AUTOMATIC_DYNAMIC_SHAPES = False  # as on Neuron: a new shape is a new static graph, never a dynamic one
# dynamo's default limit (8) sends later shapes to eager, which would make the unpadded run look cheap
RECOMPILE_LIMIT = 512


class CompileCounter:
    """Counts and times compiles while active (`with CompileCounter() as counter: ...`): one (trigger, seconds) event
    per compile, trigger "DYNAMO" for a forward graph, "LAZY_BACKWARD" for its backward graph."""

    def __init__(self) -> None:
        self.events: list[tuple[str, float]] = []
        self._started: dict = {}

    def _start(self, args) -> None:
        self._started[(args.callback_trigger, args.compile_id)] = time.perf_counter()

    def _end(self, args) -> None:
        began = self._started.pop((args.callback_trigger, args.compile_id), time.perf_counter())
        self.events.append((args.callback_trigger.name, time.perf_counter() - began))

    def __enter__(self) -> "CompileCounter":
        from torch._dynamo import callback

        callback.on_compile_start(self._start)
        callback.on_compile_end(self._end)
        return self

    def __exit__(self, *exc) -> None:
        from torch._dynamo.callback import callback_handler

        callback_handler.remove_start_callback(self._start)
        callback_handler.remove_end_callback(self._end)

    @property
    def count(self) -> int:
        return len(self.events)

    @property
    def seconds(self) -> float:
        return sum(seconds for _, seconds in self.events)

    def by_trigger(self) -> dict[str, int]:
        return dict(Counter(trigger for trigger, _ in self.events))

    def summary(self) -> dict:
        return {"compiles": self.count, "compile_seconds": self.seconds, "by_trigger": self.by_trigger()}


@contextlib.contextmanager
def compile_settings(*, fresh_cache: bool = True):
    """Dynamo as on Neuron (no automatic dynamic shapes, every shape really compiled) and a fresh, empty inductor cache
    (a warm one hides compile time); graphs compiled earlier in this process are forgotten on entry and exit, so a
    shape an earlier run compiled costs the next run a full compile again."""
    import torch
    from torch._inductor import utils

    def forget():
        torch._dynamo.reset()
        utils.clear_caches()

    limits = dict(recompile_limit=RECOMPILE_LIMIT, accumulated_recompile_limit=8 * RECOMPILE_LIMIT)
    with torch._dynamo.config.patch(automatic_dynamic_shapes=AUTOMATIC_DYNAMIC_SHAPES, **limits):
        with utils.fresh_cache() if fresh_cache else contextlib.nullcontext():
            forget()
            try:
                yield
            finally:
                forget()


@dataclass
class CompileStructure:
    """How many compiles one new shape costs (per_shape) and how many happen once (once)."""

    per_shape: int
    once: int

    def predict(self, census: Census) -> int:
        return self.once + self.per_shape * len(census.distinct)


def compile_structure(probe: "CompiledRun") -> CompileStructure:
    """From a probe of two steps on two shapes: the second step's compiles are what any new shape costs; what the
    first step compiled beyond that happens once."""
    if len(probe.step_compiles) != 2 or len(probe.census.distinct) != 2:
        raise LongctxError(
            f"The probe must run 2 steps on 2 different batch shapes; it ran {len(probe.step_compiles)} steps on "
            f"{len(probe.census.distinct)} shape(s). Change SEED (or MIN_LEN) so that its two batches differ in length."
        )
    first, second = probe.step_compiles
    return CompileStructure(per_shape=second, once=first - second)


@dataclass
class CompiledRun:
    pad_to_multiple_of: int | None
    census: Census  # predicted from the dataloader before training
    seen: list[tuple[int, ...]]  # the shapes the collator actually produced during training
    counter: CompileCounter
    seconds: float  # wall time of trainer.train(), compiles included
    step_compiles: list[int]  # compiles during each optimizer step

    def summary(self) -> dict:
        run = dict(pad_to_multiple_of=self.pad_to_multiple_of, shapes=len(self.census.distinct), padded_tokens=self.census.tokens)
        return run | {"seconds": self.seconds, **self.counter.summary(), "step_compiles": self.step_compiles}


def train_counted(trainer, counter: CompileCounter | None = None) -> tuple[CompileCounter, float]:
    """Train `trainer` (a compiled SFTTrainer, a GRPOTrainer generating through a compiled forward) under
    `compile_settings()`, every compile counted and timed: the counter and the seconds train() took."""
    counter = counter or CompileCounter()
    quiet.no_log_printing(trainer)  # the log stays in trainer.state.log_history
    with compile_settings(), counter:
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
    return counter, seconds


def compiled_run(trainer) -> CompiledRun:
    """A compiled SFTTrainer (`torch_compile=True`) trained for its `max_steps`: the shape census of its dataloader
    first, then training through `train_counted`, with the shapes its collator produced and the compiles of each step."""
    from transformers import TrainerCallback

    if not trainer.args.torch_compile:
        raise LongctxError("compiled_run counts compiles: build the trainer with SFTConfig(torch_compile=True).")
    steps, collate, counter = trainer.args.max_steps, trainer.data_collator, CompileCounter()
    census, seen, step_compiles = shape_census(trainer, steps), [], []

    def recording_collator(rows):
        batch = collate(rows)
        seen.append(tuple(batch["input_ids"].shape))
        return batch

    class PerStep(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            step_compiles.append(counter.count - sum(step_compiles))

    trainer.data_collator = recording_collator
    trainer.add_callback(PerStep())
    _, seconds = train_counted(trainer, counter)  # the counter PerStep reads
    return CompiledRun(trainer.args.pad_to_multiple_of, census, seen[:steps], counter, seconds, step_compiles)
