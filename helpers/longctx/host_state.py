"""Optimizer state and weights in host memory, the way DeepSpeed's ZeRO offload runs on one GPU (ALST's one-GPU recipe,
arXiv:2506.13996: ZeRO-3 with `offload_optimizer: {device: cpu}` and `offload_param: {device: cpu}`):
- optimizer offload: AdamW's two moments and the fp32 master weights live on the host; each gradient leaves the device
  as soon as it is accumulated (DeepSpeed moves them in buckets of `reduce_bucket_size` elements, here one tensor at a
  time) into an fp32 gradient on the host; the update runs there (DeepSpeed's CPU Adam) and the new weights are copied
  back. The device keeps the weights: 16 bytes a parameter leave it (2 gradient + 12 AdamW in bf16 training).
- parameter offload (with it): the decoder layers' weights live on the host too. A layer's weights come to the device
  when the layer runs (forward, and its recomputation in backward) and leave after its forward, and in backward each
  once its gradient is made. The
  embedding, the final norm and the head stay (DeepSpeed would fetch them too: they are read by TRL's fused head,
  outside their modules' forward, so the estimate keeps them, at most a few GiB).
Host memory per parameter: 16 bytes (fp32 master, two moments, fp32 gradient), 18 with the weights (DeepSpeed's own
`estimate_zero3_model_states_mem_needs` counts the same, times a 1.5 buffer factor). The device's copies are freed by
resizing their storage to 0, as FSDP and DeepSpeed do, which torch's MemTracker follows."""

import torch


class HostState:
    """Install on `model` before any tracker; `step()` is the optimizer's. `host`: the host's device (`meta` on fake
    tensors). `params`: also keep the decoder layers' weights on the host. Each tensor gets its own AdamW, stepped and
    copied back in turn, as DeepSpeed's CPU Adam goes through its sub-groups (and as the estimate's layers repeat)."""

    def __init__(self, model, host, *, params: bool, lr: float) -> None:
        self.device_params = [p for p in model.parameters() if p.requires_grad]
        # copies even where host and device are one memory (a CPU run): the device's copies are freed below
        self.masters = [torch.nn.Parameter(p.detach().to(host, torch.float32, copy=True)) for p in self.device_params]
        self.optimizers = [torch.optim.AdamW([m], lr=lr, foreach=False) for m in self.masters]
        self.kept = {}  # device weight → its host copy in the training dtype, for those that leave the device
        for p, master in zip(self.device_params, self.masters):
            p.register_post_accumulate_grad_hook(self._grad_to_host(master))
        if params:
            for layer in model.model.layers:
                mine = [p for p in layer.parameters() if p.requires_grad]
                for p in mine:
                    self.kept[p] = p.detach().to(host, copy=True)
                    _free(p)
                # fetched by the modules that own them: transformers checkpoints a layer's `forward`, so the layer's own
                # hooks stay outside the recomputation, its modules' run inside it
                for module in layer.modules():
                    if own := [p for p in module.parameters(recurse=False) if p in self.kept]:
                        module.register_forward_pre_hook(lambda module, args, own=own: self._fetch(own))
                layer.register_forward_hook(lambda module, args, out, mine=mine: _free(*mine))

    def tracked(self) -> list:
        """What a memory tracker must be told of: the host's tensors, and the optimizers (their state)."""
        return [*self.masters, *self.kept.values(), *self.optimizers]

    def step(self) -> None:
        for p, master, optimizer in zip(self.device_params, self.masters, self.optimizers):
            optimizer.step()
            with torch.no_grad():  # the updated weight to where the step reads it
                self.kept.get(p, p).copy_(master)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for master in self.masters:
            master.grad = None

    def _grad_to_host(self, master):
        def hook(p) -> None:
            if getattr(p, "ds_grad_is_ready", True) is False:  # DeepSpeed's TiledMLP: more shards to add, as ZeRO waits
                return
            grad = p.grad.to(master.device, torch.float32)
            master.grad = grad if master.grad is None else master.grad.add_(grad)
            p.grad = None
            if p in self.kept:  # its gradient is made: the weight is not needed again this step
                _free(p)

        return hook

    def _fetch(self, params) -> None:
        with torch.no_grad():
            for p in params:
                if p.untyped_storage().size() == 0:
                    p.untyped_storage().resize_(p.numel() * p.element_size())
                    p.copy_(self.kept[p])


def _free(*params) -> None:
    for p in params:
        p.untyped_storage().resize_(0)
