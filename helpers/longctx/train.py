"""What every trainer a lesson builds shares: the settings that depend on where it runs (kept out of the recipe a reader
copies), a step timer, and the curves of a finished run."""

import math
import time
from dataclasses import dataclass

import torch

from longctx import device

LOSSES = ("chunked", "plain")


def on_this_machine(target: str | None = None) -> dict:
    """The SFTConfig settings that depend on where a lesson runs, kept apart from the recipe a reader copies: on a CPU
    `use_cpu=True` and fp32 (trl's configs default to bf16, which a CPU refuses), on a GPU bf16; and the lessons' own
    quiet (no reporting service, no progress bar, no pinned memory where there is no GPU)."""
    target = target or device()
    bf16 = target == "cuda" and torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return {"bf16": bf16, "use_cpu": target == "cpu", "report_to": "none", "disable_tqdm": True,
            "dataloader_pin_memory": target != "cpu"}  # fmt: skip


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
    num_tokens: list[int]  # TRL's count of the tokens trained on so far (every process's), per logged step


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


def result_of(trainer, seconds: float, global_step: int) -> TrainResult:
    """The curves and timings of a finished `trainer.train()`, from the trainer's log."""
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
        num_tokens=[int(r["num_tokens"]) for r in train_rows if "num_tokens" in r],
    )
