"""Measure one real Trainer step: the trainer's own `training_step` (forward, loss, backward) and its
optimizer's `step`, on a batch from the trainer's own dataloader."""

from longctx.compat import fused_head_tiles
from longctx.memory.measure import measure
from longctx.train import TrainConfig, host_pool, make_trainer


def sft_step_profile(model, dataset, *, output_dir: str, processing_class=None, batch_size=1, tiles=(None, None), **how):
    """MemoryProfile of one real SFTTrainer optimizer step of `model` on `dataset`, with TrainConfig's `loss`,
    `gradient_checkpointing` (here on by default) and `offload` from `how`, its fused-head tile set to `tiles` = (rows,
    vocabulary columns; None keeps TRL's), set up as train() sets up its first step: the optimizer created,
    checkpointing (or the CPU offload stand-in) on."""
    how = {"gradient_checkpointing": True, "max_steps": 1, "extra": {"disable_tqdm": True}, **how}
    cfg = TrainConfig(output_dir=output_dir, per_device_train_batch_size=batch_size, **how)
    trainer = make_trainer(model, dataset, cfg, processing_class=processing_class)
    batch, pool = first_step(trainer)
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


def first_step(trainer):
    """Set `trainer` up as train() sets up its first step: the optimizer created, the model in training mode,
    checkpointing (or the CPU offload stand-in) on. Returns the first training batch exactly as the trainer would feed
    it (collated, on its device) and the host pool (None without offload="host-pool")."""
    model, pool = trainer.model, host_pool(trainer)
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
