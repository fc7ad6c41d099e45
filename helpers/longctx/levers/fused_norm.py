"""A fused RMSNorm with the memory of Liger-Kernel's (`LigerRMSNormFunction`, linkedin/Liger-Kernel,
src/liger_kernel/ops/rms_norm.py), the norm ALST's recipe loads through `AutoLigerKernelForCausalLM`. transformers'
RMSNorm is five operators, and its backward keeps several fp32 `tokens × hidden` tensors alive at once; Liger's kernel
is one pass each way:
- forward: the output (the input's dtype) and one fp32 inverse RMS per row, kept with the input for backward;
- backward: the input's gradient written over the incoming one (its `in_place=True` default) and an fp32 partial
  weight gradient per streaming multiprocessor, summed at the end.
Liger's kernels are Triton, GPU only. On fake tensors this function allocates exactly those tensors (no values); on real
tensors it computes the same result row tile by row tile, so a CPU step checks it (outputs, gradients, and a peak that
differs only by one tile's temporaries)."""

import torch
from torch._subclasses.fake_tensor import is_fake

SMS = 132  # H100's streaming multiprocessors: the rows of Liger's partial weight gradient
TILE_ROWS = 256  # rows a real (CPU) pass computes at a time


class FusedRMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        rows = x.contiguous().view(-1, x.shape[-1])  # Liger's `ensure_contiguous`
        out = torch.empty_like(rows)
        rstd = torch.empty(rows.shape[0], dtype=torch.float32, device=x.device)
        if not is_fake(x):
            for part in torch.arange(rows.shape[0]).split(TILE_ROWS):
                r = rows[part].float()
                rstd[part] = torch.rsqrt(r.pow(2).mean(-1) + eps)
                out[part] = weight * (r * rstd[part, None]).to(x.dtype)
        ctx.save_for_backward(rows, weight, rstd)
        return out.view(x.shape)

    @staticmethod
    def backward(ctx, grad):
        rows, weight, rstd = ctx.saved_tensors
        # the input's gradient is written over the incoming one, made contiguous first (an expanded gradient, as
        # `.sum()` gives, would alias its rows), as Liger does
        grad_rows = grad.contiguous().view(-1, grad.shape[-1])
        partial = torch.empty(SMS, rows.shape[1], dtype=torch.float32, device=rows.device)
        if not is_fake(grad):
            partial.zero_()
            for i, part in enumerate(torch.arange(rows.shape[0]).split(TILE_ROWS)):
                x, dy, r = rows[part].float(), grad_rows[part].float(), rstd[part, None]
                partial[i % SMS] += (dy * x * r).sum(0)
                wdy = dy * weight.float()
                grad_rows[part] = (r * (wdy - r * r * (wdy * x).mean(-1, keepdim=True) * x)).to(grad.dtype)
        return grad_rows.view(grad.shape), partial.sum(0).to(weight.dtype), None


def fuse_norms(model) -> int:
    """Route every Llama-style RMSNorm of `model` (a `weight` and a `variance_epsilon`: Llama, Qwen, Mistral, ... ,
    including Qwen3's per-head query and key norms, as Liger's patch replaces the class) through FusedRMSNorm."""
    norms = [m for m in model.modules() if type(m).__name__.endswith("RMSNorm") and hasattr(m, "variance_epsilon")]
    for norm in norms:
        norm.forward = lambda x, norm=norm: FusedRMSNorm.apply(x, norm.weight, norm.variance_epsilon)
    return len(norms)
