"""Ulysses sequence parallelism on fake tensors (DeepSpeed's `UlyssesSPAttentionHF`, ALST's multi-GPU lever): each of
`sp` ranks holds 1/sp of the sequence everywhere but inside attention, where an all-to-all hands it the whole sequence
for 1/sp of the heads (KV heads replicated when there are fewer than ranks, as DeepSpeed 0.19.8 does) and another
all-to-all gives the output back."""

import torch

from longctx.memory import costs

NAME = "longctx_ulysses"


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, shape, sp):
        ctx.shape, ctx.sp = x.shape, sp
        out = x.new_empty(shape)
        costs.charge(all_to_all=out.numel() * out.element_size() * (sp - 1) // sp)
        return out

    @staticmethod
    def backward(ctx, grad):
        back = grad.new_empty(ctx.shape)
        costs.charge(all_to_all=back.numel() * back.element_size() * (ctx.sp - 1) // ctx.sp)
        return back, None, None


def register(sp: int, base: str) -> str:
    """Register the attention implementation `base` run the Ulysses way over `sp` ranks; returns its name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    inner = ALL_ATTENTION_FUNCTIONS[base]

    def attention(module, query, key, value, attention_mask, **kwargs):
        batch, _, tokens, _ = query.shape  # (batch, heads, this rank's tokens, head_dim)

        def whole(t):  # this rank's heads over the whole sequence
            return _AllToAll.apply(t, (batch, max(t.shape[1] // sp, 1), tokens * sp, t.shape[3]), sp)

        out, _ = inner(module, whole(query), whole(key), whole(value), None, **{**kwargs, "is_causal": True})
        # (batch, whole sequence, heads / sp, head_dim) → (batch, this rank's tokens, heads, head_dim)
        return _AllToAll.apply(out, (batch, tokens, out.shape[2] * sp, out.shape[3]), sp), None

    AttentionInterface.register(NAME, attention)
    AttentionMaskInterface.register(NAME, flash_attention_mask)  # the whole sequence is causal: no mask is built
    return NAME
