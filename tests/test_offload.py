import pytest
import torch
from conftest import refused
from transformers import TrainerCallback
from trl import SFTConfig, SFTTrainer

from longctx import data, models, train
from longctx.levers import offload


def _step(model, ids):
    out = model(input_ids=ids, labels=ids, use_cache=False)
    out.loss.backward()
    return out.loss.item(), torch.cat([p.grad.flatten() for p in model.parameters()])


def test_host_pool_moves_every_layer_input_and_changes_nothing():
    cfg = models.config("tiny")
    ids = torch.randint(0, cfg.vocab_size, (1, 96), generator=torch.Generator().manual_seed(0))
    ref = models.load("tiny", seed=0)
    ref.train()
    ref.activation_checkpointing_enable()
    pooled, pool = models.load("tiny", seed=0), offload.HostPool()
    pooled.train()
    pool.install(pooled)
    (loss_a, grads_a), (loss_b, grads_b) = _step(ref, ids), _step(pooled, ids)
    assert loss_a == loss_b
    assert torch.equal(grads_a, grads_b)
    expected = offload.host_bytes_per_step(cfg.num_hidden_layers, 96, cfg.hidden_size, 4)
    assert pool.to_host_bytes == pool.to_device_bytes == pool.peak_bytes == expected
    assert pool.peak_tensors == cfg.num_hidden_layers and pool.bytes == 0 and pool.tensors == 0


def test_host_pool_through_a_real_trainers_training(tmp_path):
    pool = offload.HostPool()

    class Install(TrainerCallback):  # Trainer.train() enables checkpointing just before this: the pool takes over
        def on_train_begin(self, args, state, control, model=None, **kwargs):
            pool.install(model)

    args = SFTConfig(output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=1, activation_checkpointing=True,
                     **train.on_this_machine())  # fmt: skip
    trainer = SFTTrainer(model=models.load("tiny"), args=args, train_dataset=data.long_sequences(64, 4, seed=0),
                         processing_class=data.tokenizer(), callbacks=[Install()])  # fmt: skip
    trainer.train()
    cfg = models.config("tiny")
    assert pool.to_host_bytes == 2 * offload.host_bytes_per_step(cfg.num_hidden_layers, 64, cfg.hidden_size, 4)


def test_offload_refusals():
    for checkpointing, named in ((False, "checkpointing"), (True, "HostPool")):
        with refused(named):
            offload.check_offload(True, checkpointing=checkpointing, device="cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="upstream's CPU behaviour")
def test_upstream_offload_still_crashes_on_cpu():
    """transformers 5.24 + torch 2.13: activation_checkpointing_enable(offload=True) on a machine with no
    accelerator uses save_on_cpu(pin_memory=True), which raises in the forward. Our driver refuses
    offload=True on the CPU for that reason; when this test fails, upstream changed and the refusal can
    be revisited."""
    model = models.load("tiny")
    model.train()
    model.activation_checkpointing_enable(offload=True)
    ids = torch.zeros(1, 8, dtype=torch.long)
    with refused("pin_memory", kind=RuntimeError):
        model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
