"""Optimizer state and weights in host memory, as DeepSpeed 0.19.8's ZeRO-3 runs them on one GPU (ALST's one-GPU recipe,
arXiv:2506.13996: `offload_optimizer: {device: cpu}` and `offload_param: {device: cpu}`), read from its
runtime/zero/stage3.py:
- optimizer offload: AdamW's two moments and the fp32 master weights live on the host, with an fp32 gradient buffer
  for them and a gradient slot per parameter in the training dtype (`grad_partitions_flat_buffer`): 18 bytes a
  parameter. The device keeps the weights and one reduce bucket (`reduce_bucket_size` elements, the whole run). When a
  parameter's gradient is made (DeepSpeed moves them as buckets fill; here one tensor at a time) it is copied into its
  host slot, that slot comes back to the device and is cast to fp32 there (`partition_grads`,
  `_offload_grad_partition_at_boundary`), and the fp32 copy goes into the host's gradient. The update runs on the host
  (DeepSpeed's CPU Adam) and the new weights are copied back. Off the device: the gradients and the moments.
- parameter offload (with it): the decoder layers' weights live on the host too (20 bytes a parameter). A layer's
  weights come to the device when its modules run (forward, and the recomputation in backward), leave after the
  layer's forward, and in backward each once its gradient is made. The embedding, the final norm and the head stay
  on the device here (TRL's fused head reads the head outside its module's forward); DeepSpeed would fetch them too.
DeepSpeed's own `estimate_zero3_model_states_mem_needs` counts 16 and 18 host bytes a parameter (no gradient slots),
times a 1.5 buffer factor. Where DeepSpeed frees a weight by pointing `param.data` at an empty tensor, this resizes
the weight's storage to 0 (as FSDP does), which torch's MemTracker follows; the bytes are the same."""

import torch

from longctx.errors import LongctxError


class HostState:
    """Install on `model` before any tracker; `step()` is the optimizer's. `host`: the host's device (`meta` on fake
    tensors)."""

    def __init__(self, model, host, *, params: bool, lr: float, bucket: int | None = None) -> None:
        from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

        self.device_params = [p for p in model.parameters() if p.requires_grad]
        # copies even where host and device are one memory (a CPU run): the device's copies are freed below
        self.masters = [torch.nn.Parameter(p.detach().to(host, torch.float32, copy=True)) for p in self.device_params]
        for master in self.masters:
            master.grad = torch.zeros_like(master)  # the fp32 gradient buffer, allocated once
        self.slots = [torch.zeros_like(p, device=host) for p in self.device_params]
        first = self.device_params[0]
        size = DeepSpeedZeroConfig().reduce_bucket_size if bucket is None else bucket
        self.bucket = torch.empty(size, dtype=first.dtype, device=first.device)
        self.optimizers = [torch.optim.AdamW([m], lr=lr, foreach=False) for m in self.masters]
        self.kept = {}  # device weight → its host copy in the training dtype, for those that leave the device
        for p, master, slot in zip(self.device_params, self.masters, self.slots):
            p.register_post_accumulate_grad_hook(self._grad_to_host(master, slot))
        if params and not (model.training and model.is_gradient_checkpointing):
            raise LongctxError(
                "Parameter offload fetches a layer's weights again for its recomputation: put the model in training "
                "mode (model.train()) with checkpointing on (model.activation_checkpointing_enable())."
            )
        if params:
            for layer in model.model.layers:
                mine = [p for p in layer.parameters() if p.requires_grad]
                for p in mine:
                    self.kept[p] = p.detach().to(host, copy=True)
                    storage = p.untyped_storage()  # weights mapped from a file, or sharing one storage: give it its own
                    if not storage.resizable() or storage.nbytes() != p.numel() * p.element_size():
                        p.data = torch.empty_like(p)
                    _free(p)
                # fetched by the modules that own them: transformers checkpoints a layer's `forward`, so the layer's own
                # hooks stay outside the recomputation, its modules' run inside it
                for module in layer.modules():
                    if own := [p for p in module.parameters(recurse=False) if p in self.kept]:
                        module.register_forward_pre_hook(lambda module, args, own=own: self._fetch(own))
                layer.register_forward_hook(lambda module, args, out, mine=mine: _free(*mine))

    def tracked(self) -> list:
        """What a memory tracker must be told of: the host's tensors, the bucket ("other" on the device), and the
        optimizers (their state)."""
        host = [*self.masters, *(m.grad for m in self.masters), *self.slots, *self.kept.values()]
        return [*host, self.bucket, *self.optimizers]

    def step(self) -> None:
        for p, master, optimizer in zip(self.device_params, self.masters, self.optimizers):
            grad = master.grad
            optimizer.step()
            master.grad = grad  # the buffer stays allocated for the next step (zero_grad does not free it)
            with torch.no_grad():  # the updated weight to where the step reads it
                self.kept.get(p, p).copy_(master)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for master in self.masters:
            master.grad.zero_()

    def _grad_to_host(self, master, slot):
        @torch.no_grad()
        def hook(p) -> None:
            if getattr(p, "ds_grad_is_ready", True) is False:  # DeepSpeed's TiledMLP: more shards to add, as ZeRO waits
                return
            slot.copy_(p.grad)  # into its host slot, in the training dtype
            p.grad = None
            master.grad.copy_(slot.to(p.device).to(torch.float32))  # back, cast on the device, into the fp32 buffer
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
