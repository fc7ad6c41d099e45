"""Measure one real Trainer step: the trainer's own `training_step` (forward, loss, backward) and its
optimizer's `step`, on a batch from the trainer's own dataloader. A lesson builds the trainer in plain sight
(`SFTConfig(...)`, `SFTTrainer(...)`) and hands it here."""

from longctx.compat import fused_head_tiles
from longctx.memory.measure import measure


def measure_step(trainer, *, tiles=(None, None), host_pool=None):
    """MemoryProfile of one real optimizer step of `trainer` (a transformers Trainer: SFTTrainer, GRPOTrainer, ...), set
    up as train() sets up its first step: the optimizer created, checkpointing as its arguments ask."""
    batch, pool = first_step(trainer, host_pool)
    model, losses = trainer.model, []

    def step():
        losses.append(float(trainer.training_step(model, batch)))
        trainer.optimizer.step()

    tokens = int(batch["input_ids"].numel())
    band = tokens * model.config.get_text_config().hidden_size * next(model.parameters()).element_size()
    with fused_head_tiles(*tiles):
        profile = measure(step, model=model, optimizer=trainer.optimizer, band_bytes=band, host_pool=pool)
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


def first_step(trainer, pool=None):
    """Set `trainer` up as train() sets up its first step: the optimizer created, the model in training mode,
    checkpointing (or the CPU offload stand-in `pool`) on."""
    model = trainer.model
    batch = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
    trainer.create_optimizer()
    model.train()
    if pool is not None:
        pool.install(model)
    elif trainer.args.activation_checkpointing:  # as Trainer.train() turns it on, every_n_layers and offload popped
        ckpt = dict(trainer.args.activation_checkpointing_kwargs or {})
        every, offload = ckpt.pop("every_n_layers", 1), ckpt.pop("offload", False)
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=ckpt or None, every_n_layers=every, offload=offload)
    trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps  # train() sets it too
    return batch, pool
