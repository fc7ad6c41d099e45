"""A memory profile's reading of its own timeline."""

import numpy as np
import torch
from conftest import refused
from trl import SFTConfig, SFTTrainer

from longctx import data, models, train
from longctx.memory.estimate import estimate
from longctx.memory.measure import TimelineTracker
from longctx.memory.profile import META_KEYS, MemoryProfile
from longctx.memory.trainer_step import measure_step
from longctx.units import CATEGORIES


def test_a_profile_names_the_row_where_a_phase_ends():
    timeline = np.arange(3 * len(CATEGORIES)).reshape(3, len(CATEGORIES))
    prof = MemoryProfile("cpu", "test", timeline, ["forward", "forward", "backward"], 0, "forward", {})
    assert prof.last_row("forward") == 1 and prof.last_row("optimizer") is None
    assert prof.end_of("forward") == dict(zip(CATEGORIES, timeline[1].tolist())) and prof.end_of("optimizer") == {}


def test_meta_keys_are_declared_per_producer_and_each_producer_writes_its_own(tmp_path):
    prof = MemoryProfile("cpu", "test", np.zeros((1, len(CATEGORIES))), ["forward"], 0, "forward", {})
    with refused("loss_value", kind=KeyError):
        prof.note("estimate", loss_value=1.0)  # a real step's loss value is not an estimate's loss kind
    assert set(estimate("tiny", 64, dtype="fp32", device="cpu").meta) == set(META_KEYS["estimate"])
    args = SFTConfig(output_dir=str(tmp_path), per_device_train_batch_size=1, **train.on_this_machine())
    dataset, tok = data.long_sequences(64, 2), data.tokenizer()
    trainer = SFTTrainer(model=models.load("tiny"), args=args, train_dataset=dataset, processing_class=tok)
    step = measure_step(trainer)
    pool_keys = {"host_peak_bytes", "host_peak_tensors", "to_host_bytes", "to_device_bytes"}  # only with offload
    assert set(step.meta) == set(META_KEYS["trainer_step"]) - pool_keys and isinstance(step.meta["loss_value"], float)


def test_a_gradient_counts_as_one_from_the_operator_that_makes_it():
    """torch's MemTracker files a weight's gradient as a temporary until autograd accumulates it into .grad; the
    timeline counts it as a gradient from the row it is made in, so no temporary stands for it meanwhile."""

    model = torch.nn.Linear(512, 512, bias=False)
    tracker = TimelineTracker("cpu")
    tracker.track_external(model)
    with tracker:
        tracker.record()
        model(torch.randn(4, 512)).sum().backward()
        tracker.record()
    rows = np.array(tracker.rows)
    assert rows[:, CATEGORIES.index("gradients")].max() == model.weight.numel() * 4
    assert rows[:, CATEGORIES.index("temporaries")].max() < model.weight.numel() * 4  # (it was the gradient's 1 MiB)
