"""Each workaround in longctx.compat has a test here that fails when upstream changes what it patches."""

import pytest
import torch
from torch.distributed._tools.mem_tracker import MemTracker

from longctx.compat import FrozenParamsMemTracker


def _half_frozen():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    model[0].weight.requires_grad_(False)
    return model


def test_memtracker_still_rejects_frozen_params():
    """torch 2.13.0: MemTracker registers grad hooks on frozen params and raises. When this test fails,
    upstream fixed it: drop FrozenParamsMemTracker and use MemTracker directly."""
    model = _half_frozen()
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        with MemTracker():
            model(torch.randn(2, 4)).sum().backward()


def test_frozen_params_tracker_counts_only_trainable_gradients():
    model = _half_frozen()
    tracker = FrozenParamsMemTracker()
    tracker.track_external(model)
    with tracker:
        model(torch.randn(2, 4)).sum().backward()
    snap = tracker.get_tracker_snapshot()[torch.device("cpu")]
    grads = {k.value: v for k, v in snap.items() if hasattr(k, "value")}["Gradient"]
    trainable = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    assert grads == trainable
