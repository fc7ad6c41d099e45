"""Tiled MLP (ALST: Bekman et al. 2025, arXiv:2506.13996): each decoder layer's MLP computed over shards of the
sequence, with only the layer's input kept for backward, where each shard is recomputed and back-propagated in turn."""

import math
import types


def default_shards(seq_len: int, hidden_size: int) -> int:
    """ALST's choice: one shard per `hidden_size` tokens, so a shard's intermediate is about a hidden state's size."""
    return max(1, math.ceil(seq_len / hidden_size))


def tile_mlp(model, shards: int | None = None) -> int:
    """Patch every decoder layer's `mlp` of `model` to run tiled, in `shards` shards (None: `default_shards` of each
    call's length). Returns how many MLPs were patched."""
    import torch
    from deepspeed.runtime.sequence_parallel.ulysses_sp import TiledMLP

    def compute(module, part):
        # TiledMLP's forward runs under no_grad on views of an input that requires grad: such a view has no grad_fn,
        # which torch's module tracker (MemTracker, the profiles' tracker) cannot hook; detached, it is the same values
        return type(module).forward(module, part if torch.is_grad_enabled() else part.detach())

    def forward(mlp, x):
        n = shards or default_shards(x.shape[-2], x.shape[-1])
        return TiledMLP.apply(compute, mlp, x, n, list(mlp.parameters()))

    layers = model.model.layers
    for layer in layers:
        layer.mlp.forward = types.MethodType(forward, layer.mlp)
    return len(layers)
