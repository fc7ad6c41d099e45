"""Every workaround for upstream behaviour (torch, transformers, trl, accelerate) lives here.

Each entry names the version it was written against and the upstream behaviour it works around, and
tests/test_compat.py holds a test that fails when upstream changes that behaviour (so the workaround
can be dropped or revised when a pin moves). Nothing here is applied at import time: callers opt in.
"""

from __future__ import annotations

import contextlib

import torch
from torch.distributed._tools.mem_tracker import MemTracker, _MemRefType


class FrozenParamsMemTracker(MemTracker):
    """torch 2.13.0: `MemTracker._track_module_params_and_buffers` calls `param.register_hook` on every
    parameter, and `register_hook` raises "cannot register a hook on a tensor that doesn't require
    gradient" for frozen ones, so a LoRA/peft model cannot be tracked at all. This override installs the
    gradient hooks only on trainable parameters (frozen ones never get a gradient to track).
    Test: test_compat.py::test_memtracker_still_rejects_frozen_params.
    """

    def _track_module_params_and_buffers(self, module: torch.nn.Module, install_grad_hooks: bool = True):
        param_mem, buffer_mem = super()._track_module_params_and_buffers(module, install_grad_hooks=False)
        if install_grad_hooks:
            for param in module.parameters():
                if param.requires_grad and self._param_to_grad_hook_handles.get(param) is None:
                    hook = self._grad_hook_for()
                    self._param_to_grad_hook_handles[param] = (
                        param.register_hook(hook),
                        param.register_post_accumulate_grad_hook(lambda p, hook=hook: hook(p.grad)),
                    )
        return param_mem, buffer_mem

    def _grad_hook_for(self):
        def hook(grad: torch.Tensor) -> None:
            self._update_and_maybe_create_winfos(grad, _MemRefType.GRAD)

        return hook


@contextlib.contextmanager
def fake_tensor_training():
    """Patches needed to run a transformers training step under FakeTensorMode (the estimator).

    transformers 5.24.0: `masking_utils.find_packed_sequence_indices` treats fake tensors as "tracing"
    (`is_tracing`) and then always returns a packed-sequence index tensor, which makes the SDPA mask
    builder materialise an L×L mask that a real (eager) step never builds: +28 GiB at 96k tokens.
    Under this context it returns None, what eager returns for one unpacked sequence per row.
    Test: test_compat.py::test_packed_sequence_check_still_fires_on_fake_tensors.
    """
    from transformers import masking_utils

    original = masking_utils.find_packed_sequence_indices
    masking_utils.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        masking_utils.find_packed_sequence_indices = original


@contextlib.contextmanager
def fused_head_tiles(tokens: int | None = None, vocab: int | None = None):
    """Set the tile of TRL's chunked (fused) LM head for the duration of the context.

    trl 1.16.0 exposes no argument for it: the tile is `[TOKEN_CHUNK_SIZE, _CHUNKED_LOGPROB_CHUNK_SIZE]`
    (4096 × 32768), two module globals (`trl.kernels.chunked_logprob.TOKEN_CHUNK_SIZE`,
    `trl.trainer.utils._CHUNKED_LOGPROB_CHUNK_SIZE`) read at call time. On a CPU miniature a 4096-token
    tile covers the whole sequence, so the lesson shrinks it to show what chunking buys.
    Test: test_compat.py::test_fused_head_tile_globals_still_exist.
    """
    from trl.kernels import chunked_logprob
    from trl.trainer import utils as trl_utils

    before = chunked_logprob.TOKEN_CHUNK_SIZE, trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE
    chunked_logprob.TOKEN_CHUNK_SIZE = tokens or before[0]
    trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE = vocab or before[1]
    try:
        yield
    finally:
        chunked_logprob.TOKEN_CHUNK_SIZE, trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE = before
