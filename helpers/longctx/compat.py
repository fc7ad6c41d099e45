"""Every workaround for upstream behaviour (torch, transformers, trl, accelerate) lives here.

Each entry names the version it was written against and the upstream behaviour it works around, and
tests/test_compat.py holds a test that fails when upstream changes that behaviour (so the workaround
can be dropped or revised when a pin moves). Nothing here is applied at import time: callers opt in.
"""

from __future__ import annotations

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
