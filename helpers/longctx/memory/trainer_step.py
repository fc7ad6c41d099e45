"""Measure one real Trainer step: the trainer's own `training_step` (forward, loss, backward) and its
optimizer's `step`, on a batch from the trainer's own dataloader."""

from __future__ import annotations

from .measure import measure
from .profile import MemoryProfile


def first_batch(trainer):
    """The first training batch exactly as the trainer would feed it (collated, on its device)."""
    batch = next(iter(trainer.get_train_dataloader()))
    return trainer._prepare_inputs(batch)


def trainer_step_profile(trainer, batch=None) -> MemoryProfile:
    """MemoryProfile of one optimizer step of `trainer` (the optimizer is created as train() would)."""
    model = trainer.model
    trainer.create_optimizer()
    optimizer = trainer.optimizer
    batch = batch if batch is not None else first_batch(trainer)
    model.train()
    if trainer.args.activation_checkpointing:  # Trainer.train() turns it on; a lone measured step must too
        kwargs = dict(trainer.args.activation_checkpointing_kwargs or {})
        model.activation_checkpointing_enable(
            activation_checkpointing_kwargs={k: v for k, v in kwargs.items() if k not in ("every_n_layers", "offload")}
            or None, every_n_layers=kwargs.get("every_n_layers", 1), offload=kwargs.get("offload", False))
    # train() sets this before its first training_step; one measured step does not go through train()
    trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps

    losses = []

    def step():
        losses.append(float(trainer.training_step(model, batch)))
        optimizer.step()

    profile = measure(step, model=model, optimizer=optimizer)
    trainable = [p for p in model.parameters() if p.requires_grad]
    profile.meta.update(
        trainable_params=sum(p.numel() for p in trainable), trainable_tensors=len(trainable),
        total_params=sum(p.numel() for p in model.parameters()),
        tokens=int(batch["input_ids"].numel()), loss=losses[0],
    )
    return profile
