"""libattn for PyTorch: a differentiable sdpa on CPU tensors.

    import libattn.torch as lat
    out = lat.sdpa(q, k, v, causal="top-left")     # q, k, v (B, H, S, D), requires_grad ok
    out.sum().backward()                           # libattn's fused backward

Same arguments as libattn.sdpa (masks and slopes may be tensors or arrays).
float32, float16 and bfloat16 tensors are read as they are (no copy when the
last dimension is contiguous); the computation accumulates in float32, the
output and the gradients come back in the inputs' dtype.
"""
import numpy as np
import torch

import libattn as _lat

__all__ = ["sdpa"]


def _np(t, name):
    """A CPU tensor as a numpy view (bfloat16 as its uint16 bits)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError("%s: expected a torch.Tensor, got %s" % (name, type(t).__name__))
    if t.device.type != "cpu":
        raise ValueError("%s: libattn runs on the CPU; got a tensor on %s" % (name, t.device))
    t = t.detach()
    if t.dtype == torch.bfloat16:
        try:
            return t.view(torch.int16).numpy().view(np.uint16)
        except RuntimeError:
            return t.contiguous().view(torch.int16).numpy().view(np.uint16)
    if t.dtype not in (torch.float32, torch.float16):
        raise TypeError("%s: dtype %s is not supported (float32, float16, bfloat16)" % (name, t.dtype))
    return t.numpy()


def _opt(x):
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x


class _SDPA(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, opts):
        arrs = [_np(q, "q"), _np(k, "k"), _np(v, "v")]
        dts = {q.dtype, k.dtype, v.dtype}
        if len(dts) != 1:
            raise TypeError("q, k and v must have one dtype, got %s" % ", ".join(sorted(str(d) for d in dts)))
        qkv = "bfloat16" if q.dtype == torch.bfloat16 else None
        out = _lat.sdpa(*arrs, qkv_dtype=qkv, **opts)
        ctx.save_for_backward(q, k, v)
        ctx.opts, ctx.qkv = opts, qkv
        return torch.from_numpy(out).to(q.dtype)

    @staticmethod
    def backward(ctx, gout):
        q, k, v = ctx.saved_tensors
        g = gout.detach().to(torch.float32).numpy()
        dq, dk, dv = _lat.sdpa_backward(_np(q, "q"), _np(k, "k"), _np(v, "v"), g, qkv_dtype=ctx.qkv, **ctx.opts)
        grads = [torch.from_numpy(a).to(t.dtype) for a, t in ((dq, q), (dk, k), (dv, v))]
        return (grads[0] if ctx.needs_input_grad[0] else None, grads[1] if ctx.needs_input_grad[1] else None,
                grads[2] if ctx.needs_input_grad[2] else None, None)


def sdpa(q, k, v, *, causal="none", scale=None, key_mask=None, seqlens_k=None, window=(-1, -1), softcap=0.0,
         alibi_slopes=None, impl="auto"):
    """libattn.sdpa on torch tensors, differentiable in q, k and v."""
    opts = dict(causal=causal, scale=scale, key_mask=_opt(key_mask), seqlens_k=_opt(seqlens_k),
                window=tuple(window), softcap=float(softcap), alibi_slopes=_opt(alibi_slopes), impl=impl)
    return _SDPA.apply(q, k, v, opts)
