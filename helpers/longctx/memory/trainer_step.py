"""Measure one real Trainer step: the trainer's own `training_step` (forward, loss, backward) and its
optimizer's `step`, on a batch from the trainer's own dataloader."""

from __future__ import annotations

from longctx.memory.measure import measure
from longctx.memory.profile import MemoryProfile


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
    from longctx.train import host_pool

    pool = host_pool(trainer)
    if pool is not None:  # the CPU offload stand-in (TrainConfig(offload="host-pool"))
        pool.install(model)
    elif trainer.args.activation_checkpointing:  # Trainer.train() turns it on; a lone measured step must too
        kwargs = dict(trainer.args.activation_checkpointing_kwargs or {})
        model.activation_checkpointing_enable(
            activation_checkpointing_kwargs={k: v for k, v in kwargs.items() if k not in ("every_n_layers", "offload")} or None,
            every_n_layers=kwargs.get("every_n_layers", 1),
            offload=kwargs.get("offload", False),
        )
    # train() sets this before its first training_step; one measured step does not go through train()
    trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps

    losses = []

    def step():
        losses.append(float(trainer.training_step(model, batch)))
        optimizer.step()

    tokens = int(batch["input_ids"].numel())
    band = tokens * model.config.get_text_config().hidden_size * next(model.parameters()).element_size()
    profile = measure(step, model=model, optimizer=optimizer, band_bytes=band, host_pool=pool)
    trainable = [p for p in model.parameters() if p.requires_grad]
    profile.note(
        "trainer_step",
        trainable_params=sum(p.numel() for p in trainable),
        trainable_tensors=len(trainable),
        total_params=sum(p.numel() for p in model.parameters()),
        tokens=tokens,
        loss_value=losses[0],
        **(pool.summary() if pool is not None else {}),
    )
    return profile


def sft_step_profile(
    model,
    dataset,
    *,
    loss: str = "chunked",
    output_dir: str,
    processing_class=None,
    gradient_checkpointing: bool = True,
    offload=False,
    batch_size: int = 1,
    tiles=(None, None),
) -> MemoryProfile:
    """One real SFTTrainer step of `model` on `dataset` with the given loss and offload mode (see
    TrainConfig.offload), its fused-head tile set to `tiles` = (rows, vocabulary columns); None keeps
    TRL's default."""
    from longctx.compat import fused_head_tiles
    from longctx.train import TrainConfig, make_trainer

    cfg = TrainConfig(
        output_dir=output_dir,
        max_steps=1,
        loss=loss,
        per_device_train_batch_size=batch_size,
        gradient_checkpointing=gradient_checkpointing,
        offload=offload,
        extra={"disable_tqdm": True},
    )
    trainer = make_trainer(model, dataset, cfg, processing_class=processing_class)
    with fused_head_tiles(*tiles):
        return trainer_step_profile(trainer)
