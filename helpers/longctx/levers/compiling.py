"""Compilation as a compiled accelerator sees it: one graph per input shape, each one paid for once.

AWS Trainium's Neuron compiler builds a graph for every input shape it meets (about a minute each).
On a CPU, torch.compile with dynamic shapes turned off behaves the same way and stands in for it:
- `CompileCounter` counts and times every compile through dynamo's own callbacks (forward graphs are
  "DYNAMO" events, backward graphs "LAZY_BACKWARD", compiled on first use);
- `compile_settings` turns automatic dynamic shapes off (as the guide does on Neuron), raises dynamo's
  recompile limit so that no shape silently falls back to eager (which would make the unpadded run
  look cheap), and gives each timed run a fresh inductor cache (a warm cache hides compile time);
- `padding.shape_census` reads a trainer's own dataloader and lists the batch shapes it will produce, so
  the number of compiles is known before anything compiles: `CompileStructure.predict` multiplies the
  shapes by the graphs each shape costs (`compile_structure`, measured once by a probe run on two shapes).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field

from longctx import device, quiet
from longctx.errors import LongctxError
from longctx.levers.padding import Census, check_padding, padded_trainer, shape_census
from longctx.recipe import Call


@dataclass
class CompileEvent:
    trigger: str  # "DYNAMO" (a forward graph) or "LAZY_BACKWARD" (its backward graph)
    compile_id: str  # dynamo's "frame/recompile" id
    seconds: float


@dataclass
class CompileCounter:
    """Counts and times compiles while active (`with CompileCounter() as counter: ...`)."""

    events: list[CompileEvent] = field(default_factory=list)
    _started: dict = field(default_factory=dict)

    def _start(self, args) -> None:
        self._started[(args.callback_trigger, args.compile_id)] = time.perf_counter()

    def _end(self, args) -> None:
        began = self._started.pop((args.callback_trigger, args.compile_id), None)
        seconds = time.perf_counter() - began if began is not None else 0.0
        self.events.append(CompileEvent(args.callback_trigger.name, str(args.compile_id), seconds))

    def __enter__(self) -> CompileCounter:
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
        return sum(e.seconds for e in self.events)

    def by_trigger(self) -> dict[str, int]:
        return dict(Counter(e.trigger for e in self.events))

    def summary(self) -> dict:
        return {"compiles": self.count, "compile_seconds": self.seconds, "by_trigger": self.by_trigger()}


AUTOMATIC_DYNAMIC_SHAPES = False  # as on Neuron: a new shape is a new static graph, never a dynamic one


def dynamo_snippet() -> str:
    """The dynamo setting the lesson compiles under, as the lines a reader adds before training."""
    return f"import torch\n\ntorch._dynamo.config.automatic_dynamic_shapes = {AUTOMATIC_DYNAMIC_SHAPES}"


@contextlib.contextmanager
def compile_settings(
    *, recompile_limit: int = 512, automatic_dynamic_shapes: bool = AUTOMATIC_DYNAMIC_SHAPES, fresh_cache: bool = True
):
    """Dynamo set as on Neuron (no automatic dynamic shapes), a recompile limit high enough that every
    shape really compiles, and a fresh, empty inductor cache; compiled graphs held in memory are
    dropped on entry and exit."""
    import torch

    with contextlib.ExitStack() as stack:
        stack.enter_context(
            torch._dynamo.config.patch(
                automatic_dynamic_shapes=automatic_dynamic_shapes,
                recompile_limit=recompile_limit,
                accumulated_recompile_limit=max(recompile_limit * 8, 4096),
            )
        )
        if fresh_cache:
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="inductor-cache-"))
            before = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = folder
            stack.callback(_restore_env, "TORCHINDUCTOR_CACHE_DIR", before)
        _reset_compilers()
        stack.callback(_reset_compilers)
        yield


def _reset_compilers() -> None:
    """Forget every compiled graph, on disk (the fresh cache folder) and in memory: a shape compiled by an
    earlier run in this process must cost the next run a full compile again."""
    import torch
    from torch._inductor.utils import clear_inductor_caches

    torch._dynamo.reset()
    clear_inductor_caches()


def _restore_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


@dataclass
class CompileStructure:
    """How many compiles one new shape costs (per_shape) and how many happen once (once)."""

    per_shape: int
    once: int

    def predict(self, census: Census) -> int:
        return self.once + self.per_shape * len(census.distinct)


def compile_structure(probe: CompiledRun) -> CompileStructure:
    """From a probe run of two steps on two different shapes: the second step's compiles are what any new
    shape costs; what the first step compiled beyond that happens once."""
    if len(probe.step_compiles) != 2 or len(probe.census.distinct) != 2:
        raise LongctxError(
            f"The probe must run 2 steps on 2 different batch shapes; it ran {len(probe.step_compiles)} "
            f"steps on {len(probe.census.distinct)} shape(s). Change SEED (or MIN_LEN) so that its two "
            "batches differ in length."
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
        return {
            "pad_to_multiple_of": self.pad_to_multiple_of,
            "shapes": len(self.census.distinct),
            "padded_tokens": self.census.tokens,
            "seconds": self.seconds,
            **self.counter.summary(),
            "step_compiles": self.step_compiles,
        }


def compiled_sft(
    model,
    dataset,
    *,
    pad_to_multiple_of,
    steps: int,
    backend: str = "inductor",
    batch_size: int = 4,
    max_length: int | None = None,
    output_dir: str,
    processing_class=None,
    seed: int = 0,
) -> CompiledRun:
    """A real SFTTrainer run with `torch_compile=True` on `backend`, under `compile_settings()`: the shape
    census of its dataloader first, then training with every compile counted and timed."""
    from transformers import TrainerCallback

    pad = check_padding(pad_to_multiple_of, max_length)
    trainer = padded_trainer(
        model,
        dataset,
        pad_to_multiple_of=pad,
        steps=steps,
        backend=backend,
        batch_size=batch_size,
        max_length=max_length,
        output_dir=output_dir,
        processing_class=processing_class,
        seed=seed,
    )
    census = shape_census(trainer, steps)
    seen: list[tuple[int, ...]] = []
    collate = trainer.data_collator

    def recording_collator(rows):
        batch = collate(rows)
        seen.append(tuple(batch["input_ids"].shape))
        return batch

    trainer.data_collator = recording_collator
    step_compiles: list[int] = []

    with compile_settings(), CompileCounter() as counter:

        class PerStep(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                step_compiles.append(counter.count - sum(step_compiles))

        trainer.add_callback(PerStep())
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
    return CompiledRun(pad, census, seen[:steps], counter, seconds, step_compiles)


def grpo_generation(
    model,
    prompts: list[str],
    *,
    cache_implementation: str | None,
    steps: int = 2,
    max_completion_length: int = 16,
    backend: str = "aot_eager",
    output_dir: str,
    processing_class=None,
    seed: int = 0,
) -> dict:
    """A real GRPOTrainer run (generation with Transformers, as on Neuron where vLLM does not run) with
    the model's forward compiled, so every new decoding shape is a compile: with the default dynamic KV
    cache each generated token changes the cache's length; a static cache keeps the shapes fixed."""
    import torch
    from datasets import Dataset
    from trl import GRPOTrainer

    def reward_len(completions, **kwargs):  # the guide's toy reward: completions near a target length
        return [-abs(4 * max_completion_length - len(c)) / 100 for c in completions]

    args = grpo_call(
        cache_implementation=cache_implementation,
        steps=steps,
        max_completion_length=max_completion_length,
        output_dir=output_dir,
        seed=seed,
    ).build()
    if backend:  # on Neuron (backend None) the device compiles every shape by itself
        model.forward = torch.compile(model.forward, backend=backend)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward_len,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": list(prompts)}),
        processing_class=processing_class,
    )
    quiet.no_log_printing(trainer)
    with compile_settings(), CompileCounter() as counter:
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
    return {
        "cache_implementation": cache_implementation or "dynamic",
        "steps": steps,
        "seconds": seconds,
        "seconds_per_step": seconds / steps,
        **counter.summary(),
    }


def grpo_call(
    *,
    cache_implementation: str | None,
    steps: int,
    max_completion_length: int,
    output_dir: str,
    seed: int = 0,
    for_device: str | None = None,
):
    """The GRPOConfig of `grpo_generation`, as a recipe.Call (what lesson 05 prints)."""
    from trl import GRPOConfig

    return Call(
        GRPOConfig,
        dict(
            output_dir=output_dir,
            per_device_train_batch_size=4,
            num_generations=4,
            max_completion_length=max_completion_length,
            cache_implementation=cache_implementation,
            max_steps=steps,
            learning_rate=1e-5,
            use_cpu=(for_device or device()) == "cpu",
            bf16=False,
            report_to="none",
            logging_steps=1,
            disable_tqdm=True,
            dataloader_pin_memory=False,
            seed=seed,
            save_strategy="no",
            activation_checkpointing=True,
        ),
    )  # GRPOConfig's own default, under transformers 5.24's name for it
