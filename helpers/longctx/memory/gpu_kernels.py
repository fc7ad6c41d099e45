"""Fake stand-ins for the GPU kernels a CUDA training step runs, for the estimator. A CPU-only torch cannot run autograd
on fake *CUDA* tensors (the engine asks for a CUDA stream), so the estimator traces on fake CPU tensors and
`compat.gpu_dispatch()` routes the device-dependent calls here."""

import torch
from torch._subclasses.fake_tensor import FakeTensor

from longctx.errors import LongctxError
from longctx.memory import costs
from longctx.memory.costs import charge, repeated  # noqa: F401  (compat.gpu_dispatch charges through its stand-ins)


class FlashAttention(torch.autograd.Function):
    """FlashAttention-2 as its C++ entry points allocate (flash-attention's `csrc/flash_attn/flash_api.cpp`, vendored by
    PyTorch for SDPA's flash kernel), with q/k/v in SDPA's (batch, heads, seq, head_dim) layout. forward (`mha_fwd`):
    the output in (batch, seq, heads, head_dim) memory and the fp32 softmax log-sum-exp (batch, heads, seq); it saves q,
    k, v, out and the log-sum-exp. backward (`mha_bwd`): dq, dk, dv like their inputs, plus scratch alive while the
    kernel runs: `softmax_d` fp32 (batch, heads, seq rounded to 128), `dq_accum` fp32 (batch, seq rounded to 128, heads,
    head_dim rounded to 32), and with grouped K/V heads `dk_expanded`/`dv_expanded` at the query's head count."""

    @staticmethod
    def forward(ctx, q, k, v, causal=True, kernel=costs.SDPA):
        if not all(isinstance(t, FakeTensor) for t in (q, k, v)):
            raise LongctxError("The GPU kernel stand-ins allocate without computing: they run under FakeTensorMode only.")
        ctx.causal, ctx.kernel = causal, kernel
        flops = costs.causal_attention_flops(q.shape, k.shape, backward=False, causal=causal)
        costs.charge(attention=flops, kernel=kernel)
        b, h, s, d = q.shape
        # the value's head size sets the output's (MLA: DeepSeek-V2's values are 128 wide, its queries 192); SDPA's
        # layout without a copy to make it contiguous
        out = q.new_empty((b, s, h, v.shape[-1])).transpose(1, 2)
        ctx.save_for_backward(q, k, v, out, q.new_empty((b, h, s), dtype=torch.float32))
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, _out, _lse = ctx.saved_tensors
        flops = costs.causal_attention_flops(q.shape, k.shape, backward=True, causal=ctx.causal)
        costs.charge(attention=flops, backward=True, kernel=ctx.kernel)
        b, h, s, d = q.shape
        rows, width = -(-s // 128) * 128, -(-d // 32) * 32 if d <= 192 else 256  # rounded up
        scratch = [q.new_empty((b, h, rows), dtype=torch.float32), q.new_empty((b, rows, h, width), dtype=torch.float32)]
        if k.shape[1] != h:
            scratch += [k.new_empty((b, k.shape[2], h, d)), v.new_empty((b, v.shape[2], h, v.shape[3]))]
        grads = (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v))
        del scratch  # freed when the kernel returns, after the gradients exist
        return (*grads, None, None)


flash_attention = FlashAttention.apply  # the FlashAttention-2 stand-in, in and out in SDPA's (batch, heads, seq, head_dim)


def sdpa_as_cuda(original):
    """`F.scaled_dot_product_attention` as PyTorch dispatches it on an H100-class GPU in bf16/fp16: no mask and equal
    head sizes ≤ 256 → the flash kernel (grouped K/V heads natively); a mask, or values narrower than the queries (MLA,
    which flash refuses: torch's check_head_dim_size_flash) → the memory-efficient kernel, which takes the mask as an
    additive bias in the query's dtype (a boolean mask is converted first, one more (seq × seq) copy; its own workspace
    is not modelled) and no grouped heads (transformers expanded them already when it passes a mask)."""

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        half = query.dtype in (torch.float16, torch.bfloat16) and query.shape[-1] <= 256
        same_heads = value.shape[-1] == query.shape[-1]
        if half and attn_mask is None and same_heads:
            return flash_attention(query, key, value, is_causal)
        if half and key.shape[1] == query.shape[1]:  # (here a mask, or MLA's narrower values)
            bias = attn_mask
            if attn_mask is not None and attn_mask.dtype == torch.bool:  # aten's convert_boolean_attn_mask, first
                bias = torch.zeros(attn_mask.shape, dtype=query.dtype).masked_fill_(~attn_mask, float("-inf"))
            efficient = torch.ops.aten._scaled_dot_product_efficient_attention
            return efficient(query, key, value, bias, True, dropout_p, is_causal, scale=scale)[0]
        kw = dict(attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
        return original(query, key, value, **kw)

    return sdpa


def flash_attention_2(module, query, key, value, attention_mask, **kwargs):
    """transformers' attention function for `attn_implementation="flash_attention_2"`: the flash-attn package's kernel
    (the allocations above; dropout, scaling, a sliding window or a softcap change what it computes, not what it
    allocates), in transformers' flash layout (batch, seq, heads, head_dim)."""
    causal = kwargs.get("is_causal", getattr(module, "is_causal", True))  # transformers' decoder attention is causal
    return flash_attention(query, key, value, causal, costs.FLASH_ATTN).transpose(1, 2), None


class TritonLaunch:
    """A Triton kernel launch `kernel[grid](...)`: TRL's chunked log-prob kernels fold a tile into
    buffers that already exist and allocate nothing, so the stand-in does nothing."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None
