import pytest
import torch

from longctx import LongctxError, data, models, train


def test_plain_and_chunked_losses_agree(tmp_path):
    ds = data.long_sequences(64, 8, seed=0)
    losses = {}
    for loss in train.LOSSES:
        cfg = train.TrainConfig(
            output_dir=str(tmp_path / loss), max_steps=3, per_device_train_batch_size=2, loss=loss, extra={"disable_tqdm": True}
        )
        losses[loss] = train.run_sft(models.load("tiny"), ds, cfg, processing_class=data.tokenizer()).losses
    assert len(losses["plain"]) == 3
    assert max(abs(a - b) for a, b in zip(losses["plain"], losses["chunked"])) < 1e-4


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal")
def test_bf16_on_cpu_is_refused_with_the_fix():
    with pytest.raises(LongctxError, match="bf16=False"):
        train.TrainConfig(output_dir="x", bf16=True).sft_config()


@pytest.mark.parametrize(
    "kwargs,fragment",
    [
        (dict(loss="fused"), "Unknown loss"),
        (dict(load_best_model_at_end=True), "needs eval_steps"),
        (dict(gradient_accumulation_steps=0), "positive integer"),
    ],
    ids=["unknown-loss", "best-model-without-evaluation", "no-accumulation-steps"],
)
def test_bad_config(kwargs, fragment):
    with pytest.raises(LongctxError, match=fragment):
        train.TrainConfig(output_dir="x", **kwargs)
