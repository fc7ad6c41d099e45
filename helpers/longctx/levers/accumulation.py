"""Gradient accumulation, checked on real Trainer runs: k micro-batches of b give the gradient of one batch of k·b,
provided each micro-batch's loss is divided by k (or, as transformers does, every token's loss by the number of
tokens in the whole accumulated batch)."""

from dataclasses import dataclass

import torch
from transformers import TrainerCallback

from longctx.models import to_device
from longctx.train import TrainConfig, make_trainer


@dataclass
class AccumulationCheck:
    batch: int
    micro_batch: int
    steps: int
    max_abs_diff: float  # one batch vs accumulated micro-batches (Trainer runs)
    grad_norm_batch: float
    grad_norm_accumulated: float
    grad_norm_undivided: float  # a hand-written loop that forgets the division
    undivided_ratio: float


def _captured_grads(model_fn, dataset, cfg: TrainConfig, processing_class) -> dict[str, torch.Tensor]:
    """Run one optimizer step through a real SFTTrainer and keep the gradients the optimizer would see."""
    grads: dict[str, torch.Tensor] = {}
    model = model_fn()

    class Capture(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            grads.update({n: p.grad.detach().cpu().clone() for n, p in model.named_parameters() if p.grad is not None})

    make_trainer(model, dataset, cfg, processing_class=processing_class, callbacks=[Capture()]).train()
    return grads


def _undivided_grads(model_fn, dataset, micro_batch: int, steps: int, seed: int) -> dict[str, torch.Tensor]:
    """The classic hand-written mistake: sum each micro-batch's mean loss's gradient, never divide. Same samples as
    the Trainer's seeded RandomSampler draws first, on the device the trainers used, so all three gradients come
    from one kind of kernel. Lesson 00's "Look inside" shows the same loop on a one-layer model."""
    model = to_device(model_fn())
    model.train()
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed))[: micro_batch * steps]
    ids = torch.tensor(dataset["input_ids"])[order].to(next(model.parameters()).device)
    for chunk in ids.split(micro_batch):
        model(input_ids=chunk, labels=chunk).loss.backward()  # missing: / steps
    return {n: p.grad.detach().cpu().clone() for n, p in model.named_parameters() if p.grad is not None}


def _norm(grads: dict[str, torch.Tensor]) -> float:
    return float(sum((g.double() ** 2).sum() for g in grads.values()) ** 0.5)


def check_accumulation(
    model_fn, dataset, *, micro_batch: int = 8, steps: int = 4, output_dir: str, processing_class=None, seed: int = 0
) -> AccumulationCheck:
    """Gradient of one batch of micro_batch·steps vs `steps` accumulated micro-batches, both through SFTTrainer (one
    optimizer step each, clipping off so the raw gradients are compared), and the same accumulation written by hand
    without dividing by `steps`."""
    common = dict(max_steps=1, max_grad_norm=0.0, seed=seed, logging_steps=1, extra={"disable_tqdm": True})
    runs = {"batch": dict(per_device_train_batch_size=micro_batch * steps)}
    runs["accumulated"] = dict(per_device_train_batch_size=micro_batch, gradient_accumulation_steps=steps)
    big, acc = (
        _captured_grads(model_fn, dataset, TrainConfig(output_dir=f"{output_dir}/{name}", **kw, **common), processing_class)
        for name, kw in runs.items()
    )
    diff = max(float((big[n] - acc[n]).abs().max()) for n in big)
    norms = [_norm(g) for g in (big, acc, _undivided_grads(model_fn, dataset, micro_batch, steps, seed))]
    return AccumulationCheck(micro_batch * steps, micro_batch, steps, diff, *norms, undivided_ratio=norms[2] / norms[0])
