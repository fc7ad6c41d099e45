"""Gradient accumulation, checked on real Trainer runs: k micro-batches of b give the gradient of one batch of k·b,
provided each micro-batch's loss is divided by k (or, as transformers does, every token's loss by the number of
tokens in the whole accumulated batch)."""

from dataclasses import dataclass

import torch
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback

from longctx.models import to_device


@dataclass
class AccumulationCheck:
    batch: int
    micro_batch: int
    steps: int
    max_abs_diff: float  # one batch vs accumulated micro-batches (Trainer runs)
    largest: float  # the largest gradient entry of the one batch: the rounding of its dtype is relative to it
    grad_norm_batch: float
    grad_norm_accumulated: float
    grad_norm_undivided: float  # a hand-written loop that forgets the division
    undivided_ratio: float


def gradients(trainer) -> dict[str, torch.Tensor]:
    """Train `trainer` for its steps and keep the gradients its optimizer saw at the last one (on the CPU)."""
    grads: dict[str, torch.Tensor] = {}
    model = trainer.model

    class Capture(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            grads.update({n: p.grad.detach().cpu().clone() for n, p in model.named_parameters() if p.grad is not None})

    trainer.add_callback(Capture())
    trainer.remove_callback(PrinterCallback)  # the log stays in trainer.state.log_history
    trainer.train()
    return grads


def undivided_gradients(model_fn, dataset, micro_batch: int, steps: int, seed: int) -> dict[str, torch.Tensor]:
    """The classic hand-written mistake: sum each micro-batch's mean loss's gradient, never divide."""
    model = to_device(model_fn())
    model.train()
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed))[: micro_batch * steps]
    ids = torch.tensor(dataset["input_ids"])[order].to(next(model.parameters()).device)
    for chunk in ids.split(micro_batch):
        model(input_ids=chunk, labels=chunk).loss.backward()  # missing: / steps
    return {n: p.grad.detach().cpu().clone() for n, p in model.named_parameters() if p.grad is not None}


def _norm(grads: dict[str, torch.Tensor]) -> float:
    return float(sum((g.double() ** 2).sum() for g in grads.values()) ** 0.5)


def compare(batch: dict, accumulated: dict, undivided: dict, *, micro_batch: int, steps: int) -> AccumulationCheck:
    """The three gradients side by side: one batch of micro_batch·steps, `steps` micro-batches accumulated by the
    trainer, the same accumulated by hand without the division."""
    diff = max(float((batch[n] - accumulated[n]).abs().max()) for n in batch)
    largest = max(float(g.abs().max()) for g in batch.values())
    norms = [_norm(g) for g in (batch, accumulated, undivided)]
    return AccumulationCheck(micro_batch * steps, micro_batch, steps, diff, largest, *norms, undivided_ratio=norms[2] / norms[0])
