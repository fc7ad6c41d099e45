"""Drive real TRL trainers from a small config object, with CPU defaults that work. Traps of the installed versions,
handled here once: SFTConfig defaults to bf16 (refused on a CPU), its learning rate (2e-5) is too low for a model
trained from scratch, gradient checkpointing is on by default, and pinned memory warns without an accelerator. trl
1.16's loss is its chunked ("fused") LM head; `loss="plain"` is the guide's baseline: the model's own forward with
`labels=`, which materialises the full sequence × vocabulary logits."""

import math
import time
from dataclasses import asdict, dataclass, field
from functools import lru_cache

import torch

from longctx import device, quiet
from longctx.errors import LongctxError, check_choice, check_positive_int
from longctx.offload import HostPool, check_offload
from longctx.recipe import Call

LOSSES = ("chunked", "plain")
# TrainConfig fields passed to SFTConfig under their own name, and the SFTConfig settings every run shares
_SAME = (
    "output_dir max_steps per_device_train_batch_size gradient_accumulation_steps learning_rate lr_scheduler_type "
    "warmup_steps max_grad_norm seed max_length logging_steps eval_steps load_best_model_at_end"
).split()
_FIXED = dict(report_to="none", dataloader_pin_memory=False, disable_tqdm=False, save_only_model=True, save_strategy="no")


def on_this_machine(target: str | None = None) -> dict:
    """The SFTConfig settings that depend on where a lesson runs, kept apart from the recipe a reader copies: on a CPU
    `use_cpu=True` and fp32 (trl's configs default to bf16, which a CPU refuses), on a GPU bf16; and the lessons' own
    quiet (no reporting service, no progress bar, no pinned memory where there is no GPU)."""
    target = target or device()
    here = {"bf16": target == "cuda" and _cuda_bf16(), "use_cpu": target == "cpu"}
    return here | {"report_to": "none", "disable_tqdm": True, "dataloader_pin_memory": target != "cpu"}


@dataclass
class TrainConfig:
    output_dir: str
    max_steps: int = 10
    per_device_train_batch_size: int = 1
    gradient_accumulation_steps: int = 1
    learning_rate: float = 1e-3
    lr_scheduler_type: str = "constant"
    warmup_steps: int = 0
    max_grad_norm: float = 1.0
    seed: int = 0
    loss: str = "chunked"  # "chunked": TRL's fused LM head; "plain": model(labels=...) with full logits
    gradient_checkpointing: bool = False
    # activation offload: True = transformers' save_on_cpu (accelerators); "host-pool" = the CPU stand-in
    # that moves the saved layer inputs into separately accounted memory (longctx.offload.HostPool)
    offload: bool | str = False
    bf16: bool | None = None  # None: on where the device supports it
    max_length: int | None = None
    eval_steps: int | None = None  # set: evaluation every eval_steps
    load_best_model_at_end: bool = False
    logging_steps: int = 1
    extra: dict = field(default_factory=dict)  # any further SFTConfig field (a recipe.Call is built first)
    for_device: str | None = None  # the device the config is for ("cuda", "cpu"); None: this machine's

    def __post_init__(self) -> None:
        check_choice("loss", self.loss, LOSSES)
        for name in ("per_device_train_batch_size", "gradient_accumulation_steps", "logging_steps"):
            check_positive_int(name, getattr(self, name))
        check_offload(self.offload, checkpointing=self.gradient_checkpointing, device=self.for_device or device())
        if self.load_best_model_at_end and not self.eval_steps:
            raise LongctxError("load_best_model_at_end needs eval_steps (evaluation every N steps).")

    def sft_call(self):
        """The trl.SFTConfig this object stands for, as a recipe.Call: built by `sft_config`, printed by the lessons."""
        from trl import SFTConfig

        target = self.for_device or device()
        bf16 = self.bf16 if self.bf16 is not None else target == "cuda" and (self.for_device is not None or _cuda_bf16())
        kwargs = {name: getattr(self, name) for name in _SAME} | _FIXED
        kwargs.update(bf16=bf16, use_cpu=target == "cpu", data_seed=self.seed)
        kwargs["per_device_eval_batch_size"] = self.per_device_train_batch_size
        # transformers 5.24 renamed gradient_checkpointing (deprecated) to activation_checkpointing
        offload = {"offload": True} if self.offload is True else None
        kwargs.update(activation_checkpointing=self.gradient_checkpointing, activation_checkpointing_kwargs=offload)
        if self.eval_steps:
            kwargs.update(eval_strategy="steps", metric_for_best_model="eval_loss", greater_is_better=False)
        if self.load_best_model_at_end:  # a checkpoint at each evaluation
            kwargs.update(save_strategy="steps", save_steps=self.eval_steps)
        if self.loss == "chunked":  # trl 1.16's default loss: its fused head, the cross-entropy a tile at a time
            kwargs["loss_type"] = "nll"  # (the plain loss is the trainer subclass's, not an SFTConfig setting)
        return Call(SFTConfig, {**kwargs, **self.extra})

    def sft_config(self):
        """The trl.SFTConfig this object stands for, built on this machine."""
        call = self.sft_call()
        if call.kwargs["bf16"] and not _cuda_bf16():
            raise LongctxError("bf16=True needs a GPU with bf16 support; on the CPU use bf16=False (fp32).")
        return call.build()


def _cuda_bf16() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


@dataclass
class TrainResult:
    losses: list[float]  # training loss per logged step
    steps: list[int]
    eval_steps: list[int]
    eval_losses: list[float]
    seconds: float
    seconds_per_step: float  # whole train() time (set-up, first-step warm-up included) / steps
    best_checkpoint: str | None
    best_eval_loss: float | None
    config: dict  # the TrainConfig's fields
    step_seconds: list[float] = field(default_factory=list)  # each optimizer step alone (run_sft's timer)
    # TRL's count of the tokens trained on so far (attention-mask tokens of every process), per logged step
    num_tokens: list[int] = field(default_factory=list)

    @property
    def steady_seconds_per_step(self) -> float | None:
        """Mean time of the steps after the first (which pays for warm-up: allocator growth, kernels)."""
        later = self.step_seconds[1:]
        return sum(later) / len(later) if later else None


def make_trainer(model, train_dataset, cfg: TrainConfig, *, callbacks=None, **kwargs):
    """A real trl.SFTTrainer (or the plain-loss subclass) for `model` and pre-tokenized datasets (`kwargs`:
    eval_dataset, processing_class)."""
    from trl import SFTTrainer

    callbacks = [*(callbacks or []), _own_callback(cfg.offload)]
    cls = plain_loss_trainer_class() if cfg.loss == "plain" else SFTTrainer
    trainer = cls(model=model, args=cfg.sft_config(), train_dataset=train_dataset, callbacks=callbacks, **kwargs)
    quiet.no_log_printing(trainer)  # the log stays in trainer.state.log_history
    return trainer


def host_pool(trainer):
    """The offload.HostPool of a trainer built here with offload="host-pool" (None otherwise: a trainer built in a
    lesson, or without it), held by the trainer's own callback, which installs it when training starts."""
    own = next((cb for cb in trainer.callback_handler.callbacks if hasattr(cb, "host_pool")), None)
    return own.host_pool if own is not None else None


def step_timer():
    """A TrainerCallback that times each optimizer step alone (waiting for the GPU to finish its work): `.seconds`, and
    `.steady()` the mean of the steps after the first, which pays for warm-up (allocator growth, kernel choices)."""
    from transformers import TrainerCallback

    def now():
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
        return time.perf_counter()

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.seconds, self.start = [], None

        def on_step_begin(self, args, state, control, **kwargs):
            self.start = now()

        def on_step_end(self, args, state, control, **kwargs):
            self.seconds.append(now() - self.start)

        def steady(self) -> float | None:
            return sum(self.seconds[1:]) / len(self.seconds[1:]) if len(self.seconds) > 1 else None

    return StepTimer()


def _own_callback(offload):
    """The callback every trainer made here carries: the step timer, and the HostPool of offload="host-pool", whose
    hooks it swaps in at on_train_begin (Trainer.train() enables checkpointing just before)."""
    timer = step_timer()
    pool = HostPool() if offload == "host-pool" else None

    def on_train_begin(args, state, control, model=None, **kwargs):
        if pool is not None:
            pool.install(model)

    timer.host_pool, timer.on_train_begin = pool, on_train_begin
    return timer


def run_sft(model, train_dataset, cfg: TrainConfig, *, callbacks=None, **kwargs) -> TrainResult:
    """Build the trainer (make_trainer's keywords), train, and return losses, the eval curve, timings and paths."""
    trainer = make_trainer(model, train_dataset, cfg, callbacks=callbacks, **kwargs)
    start = time.perf_counter()
    out = trainer.train()
    own = next(cb for cb in trainer.callback_handler.callbacks if hasattr(cb, "host_pool"))
    return result_of(trainer, time.perf_counter() - start, out.global_step, cfg, step_seconds=own.seconds)


def result_of(trainer, seconds: float, global_step: int, cfg: TrainConfig | None = None, step_seconds=()) -> TrainResult:
    """The curves and timings of a finished `trainer.train()`, from the trainer's log (`cfg`: the TrainConfig it was
    built from, when a helper built it)."""
    history = trainer.state.log_history
    train_rows = [r for r in history if "loss" in r and "eval_loss" not in r]
    eval_rows, best = [r for r in history if "eval_loss" in r], trainer.state.best_metric
    return TrainResult(
        losses=[float(r["loss"]) for r in train_rows],
        steps=[int(r["step"]) for r in train_rows],
        eval_steps=[int(r["step"]) for r in eval_rows],
        eval_losses=[float(r["eval_loss"]) for r in eval_rows],
        seconds=seconds,
        seconds_per_step=seconds / max(global_step, 1),
        best_checkpoint=trainer.state.best_model_checkpoint,
        best_eval_loss=None if best is None or math.isnan(best) else float(best),
        config=asdict(cfg) if cfg is not None else {},
        step_seconds=list(step_seconds),
        num_tokens=[int(r["num_tokens"]) for r in train_rows if "num_tokens" in r],
    )


@lru_cache(maxsize=None)
def plain_loss_trainer_class():
    """SFTTrainer subclass for loss='plain' (built lazily: importing trl is slow)."""
    from trl import SFTTrainer

    class PlainLossSFTTrainer(SFTTrainer):
        """SFTTrainer whose loss is the model's own: full logits, then cross-entropy (the guide's baseline)."""

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            inputs = {k: v for k, v in inputs.items() if k != "fused_lm_head"} | {"use_cache": False}
            kwargs = {"num_items_in_batch": num_items_in_batch} if num_items_in_batch is not None else {}
            outputs = model(**inputs, **kwargs)
            loss = outputs.loss
            if self.args.average_tokens_across_devices and num_items_in_batch is not None:
                loss = loss * self.accelerator.num_processes
            return (loss, outputs) if return_outputs else loss

    return PlainLossSFTTrainer
