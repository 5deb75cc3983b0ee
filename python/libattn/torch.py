"""libattn for PyTorch: a differentiable sdpa on CPU tensors.

    import libattn.torch as lat
    out = lat.sdpa(q, k, v, causal="top-left")     # q, k, v (B, H, S, D), requires_grad ok
    out.sum().backward()                           # libattn's fused backward

Same arguments as libattn.sdpa (masks and slopes may be tensors or arrays).

    lat.scaled_dot_product_attention(query, key, value, attn_mask=None,
        dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False)

is PyTorch 2.x's function with its signature and semantics on CPU tensors,
and lat.patch() installs it as torch.nn.functional.scaled_dot_product_attention
(lat.unpatch() restores the original), so unmodified model code runs on
libattn. dropout_p > 0 drops attention weights with libattn's own stream,
seeded by one draw from torch's generator per call: reproducible under
torch.manual_seed, not the same keep decisions as PyTorch's kernels.
float32, float16 and bfloat16 tensors are read as they are (no copy when the
last dimension is contiguous); the computation accumulates in float32, the
output and the gradients come back in the inputs' dtype.

Math modes follow PyTorch: float16 and bfloat16 tensors run in math="data"
(products of the 16-bit operands, P rounded to the tensors' type, float32
accumulation), float32 tensors in math="strict"; with dropout_p > 0 the
16-bit default is strict (a mode that rounds P refuses dropout). sdpa's
math= argument, or set_math("strict" | "data" | "bf16" | None) for every
call (scaled_dot_product_attention included; None: by dtype), forces one.
The backward runs in the forward's mode (dO, P and dS rounded too).
"""
import numpy as np
import torch

import libattn as _lat

__all__ = ["sdpa", "scaled_dot_product_attention", "patch", "unpatch", "set_math", "paged_attention", "paged_append"]

_math = None  # set_math: None = by dtype


def set_math(mode):
    """The math mode of every later call that does not name one: "strict",
    "data", "bf16", or None (the default: data for float16 / bfloat16
    tensors, strict for float32, strict with dropout). Returns the previous."""
    global _math
    if mode is not None and mode not in ("strict", "data", "bf16"):
        raise ValueError("math must be 'strict', 'data', 'bf16' or None, got %r" % (mode,))
    prev, _math = _math, mode
    return prev


def _math_for(q, math, dropout_p):
    m = math if math is not None else _math
    if m is not None:
        return m
    return "data" if q.dtype in (torch.float16, torch.bfloat16) and dropout_p == 0.0 else "strict"


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
    """q, k, v and an optional float bias (added to the scores) in; the
    gradients of all four out (dbias in the bias's shape)."""

    @staticmethod
    def forward(ctx, q, k, v, bias, opts):
        arrs = [_np(q, "q"), _np(k, "k"), _np(v, "v")]
        dts = {q.dtype, k.dtype, v.dtype}
        if len(dts) != 1:
            raise TypeError("q, k and v must have one dtype, got %s" % ", ".join(sorted(str(d) for d in dts)))
        qkv = "bfloat16" if q.dtype == torch.bfloat16 else None
        if bias is not None:
            opts = dict(opts, attn_bias=bias.detach().to(torch.float32).numpy())
        out = _lat.sdpa(*arrs, qkv_dtype=qkv, **opts)
        ctx.save_for_backward(q, k, v)
        ctx.opts, ctx.qkv, ctx.bias_dtype = opts, qkv, None if bias is None else bias.dtype
        return torch.from_numpy(out).to(q.dtype)

    @staticmethod
    def backward(ctx, gout):
        q, k, v = ctx.saved_tensors
        g = gout.detach().to(torch.float32).numpy()
        res = _lat.sdpa_backward(_np(q, "q"), _np(k, "k"), _np(v, "v"), g, qkv_dtype=ctx.qkv, **ctx.opts)
        grads = [torch.from_numpy(a).to(t.dtype) for a, t in zip(res[:3], (q, k, v))]
        need = ctx.needs_input_grad
        db = torch.from_numpy(res[-1]).to(ctx.bias_dtype) if ctx.bias_dtype is not None and need[3] else None
        return (grads[0] if need[0] else None, grads[1] if need[1] else None, grads[2] if need[2] else None, db,
                None)


def sdpa(q, k, v, *, causal="none", scale=None, key_mask=None, seqlens_k=None, window=(-1, -1), softcap=0.0,
         alibi_slopes=None, impl="auto", sinks=None, attention_chunk=0, attn_mask=None, attn_bias=None,
         dropout_p=0.0, dropout_seed=None, math=None):
    """libattn.sdpa on torch tensors, differentiable in q, k and v (and a
    float attn_bias). dropout_p > 0 without dropout_seed draws the seed
    from torch's generator. math: None (set_math's, else by dtype), or
    "strict", "data", "bf16"."""
    if dropout_p > 0.0 and dropout_seed is None:
        dropout_seed = int(torch.randint(0, 2**62, (1,), dtype=torch.int64).item())
    opts = dict(causal=causal, scale=scale, key_mask=_opt(key_mask), seqlens_k=_opt(seqlens_k),
                window=tuple(window), softcap=float(softcap), alibi_slopes=_opt(alibi_slopes), impl=impl,
                attention_chunk=int(attention_chunk), attn_mask=_opt(attn_mask), dropout_p=float(dropout_p),
                dropout_seed=dropout_seed, math=_math_for(q, math, float(dropout_p)))
    if sinks is not None:
        opts["sinks"] = _opt(sinks)
    bias = attn_bias if isinstance(attn_bias, torch.Tensor) or attn_bias is None else torch.as_tensor(attn_bias)
    return _SDPA.apply(q, k, v, bias, opts)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """torch.nn.functional.scaled_dot_product_attention (PyTorch 2.x) on libattn.

    query (N..., Hq, L, E), key (N..., Hkv, S, E), value (N..., Hkv, S, Ev),
    any number of leading dims N... (none: 3-D (Hq, L, E); 2-D (L, E) is
    one head); dim -3 is the one enable_gqa groups; attn_mask bool (True = takes part) or
    float (added to the scores), broadcastable to (N..., Hq, L, S); is_causal:
    the top-left causal mask (an error together with attn_mask); scale:
    default 1/sqrt(E); enable_gqa: Hq a multiple of Hkv. Returns
    (N..., Hq, L, Ev) in query's dtype, differentiable in query, key, value
    and a float attn_mask. dropout_p: inverted dropout on the attention
    weights (libattn's stream, seeded from torch's generator).
    """
    if is_causal and attn_mask is not None:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True")
    if query.dim() < 2 or key.dim() != query.dim() or value.dim() != query.dim():
        raise RuntimeError("query, key and value must have the same number of dims (at least 2), got %d, %d, %d" %
                           (query.dim(), key.dim(), value.dim()))
    # dim -3 is the heads' (the one enable_gqa groups), every dim before it a
    # batch dim: (N..., H, L, E) folds to (B, H, L, E); 2-D (L, E) is one head
    lead = tuple(query.shape[:-3])
    Hq, Hkv = (query.shape[-3], key.shape[-3]) if query.dim() >= 3 else (1, 1)
    if tuple(key.shape[:-3]) != lead or tuple(value.shape[:-3]) != lead or value.shape[-3:-1] != key.shape[-3:-1]:
        raise RuntimeError("key %s and value %s must have query's %s leading dims and the same heads and length" %
                           (tuple(key.shape), tuple(value.shape), tuple(query.shape)))
    if Hq != Hkv and not enable_gqa:
        raise RuntimeError("query has %d heads and key %d: pass enable_gqa=True for grouped-query attention" %
                           (Hq, Hkv))
    if Hq % Hkv:
        raise RuntimeError("the query heads (%d) must be a multiple of the key/value heads (%d)" % (Hq, Hkv))
    B = int(np.prod(lead)) if lead else 1
    L, S = query.shape[-2], key.shape[-2]
    q4 = query.reshape(B, Hq, L, query.shape[-1])
    k4 = key.reshape(B, Hkv, S, key.shape[-1])
    v4 = value.reshape(B, Hkv, S, value.shape[-1])
    mask = bias = None
    if attn_mask is not None:
        m = _fold_mask(attn_mask if isinstance(attn_mask, torch.Tensor) else torch.as_tensor(attn_mask),
                       tuple(query.shape[:-2]) + (L, S), lead, B)
        if m.dtype == torch.bool:
            mask = m.numpy()
        else:
            bias = m  # a float mask is a bias, differentiable (the gradient sums back over broadcast dims)
    out = sdpa(q4, k4, v4, causal="top-left" if is_causal else "none", scale=scale, attn_mask=mask, attn_bias=bias,
               dropout_p=float(dropout_p))
    return out.reshape(tuple(query.shape[:-1]) + (value.shape[-1],))


def _fold_mask(m, full, lead, B):
    """attn_mask m, broadcastable to full = (N..., Hq, L, S), as a 4-D tensor
    broadcastable to (B, Hq, L, S), B = prod(N...): a view where the batch
    dims are all 1 or all full-size; an expanded copy otherwise."""
    try:
        ok = tuple(torch.broadcast_shapes(tuple(m.shape), full)) == full
    except RuntimeError:
        ok = False
    if not ok:
        raise RuntimeError("attn_mask of shape %s does not broadcast to (N..., Hq, L, S) = %s" %
                           (tuple(m.shape), full))
    m = m.reshape((1,) * (len(full) - m.dim()) + tuple(m.shape))  # the rank of full
    tail = (1,) * (3 - len(full[len(lead):])) + tuple(m.shape[len(lead):])  # (Hq|1, L|1, S|1)
    ml = tuple(m.shape[:len(lead)])
    if all(x == 1 for x in ml):
        return m.reshape((1,) + tail)
    if ml == lead:
        return m.reshape((B,) + tail)
    return m.expand(full).reshape((B,) + tuple(full[len(lead):]))


_original = None


def patch():
    """Install scaled_dot_product_attention as torch.nn.functional's (any torch
    version: 1.13 has none, so code written for 2.x runs)."""
    global _original
    import torch.nn.functional as F
    if _original is None:
        _original = getattr(F, "scaled_dot_product_attention", False)
    F.scaled_dot_product_attention = scaled_dot_product_attention


def unpatch():
    """Restore torch.nn.functional's own function (or its absence)."""
    global _original
    import torch.nn.functional as F
    if _original is None:
        return
    if _original is False:
        del F.scaled_dot_product_attention
    else:
        F.scaled_dot_product_attention = _original
    _original = None


def _pages(t, name):
    """page tensors in place as numpy views: float32 / float16, bfloat16 as its
    bits (kv_dtype 'bf16'), uint8 (q8_0 blocks); the kv_dtype they imply"""
    if t is None:
        return None, None
    if isinstance(t, torch.Tensor) and t.dtype == torch.uint8:
        if t.device.type != "cpu":
            raise ValueError("%s: libattn runs on the CPU; got a tensor on %s" % (name, t.device))
        return t.detach().numpy(), "q8_0"
    return _np(t, name), "bf16" if t.dtype == torch.bfloat16 else None


def _scale_np(sc, name):
    """a scale argument as numpy: a float, or a tensor's memory in place (int8 / int4 pairs are written by append)"""
    if isinstance(sc, torch.Tensor):
        if sc.device.type != "cpu" or sc.dtype != torch.float32:
            raise ValueError("%s: a float32 CPU tensor, got %s on %s" % (name, sc.dtype, sc.device))
        return sc.detach().numpy()
    return sc


def paged_attention(q, k_pages, v_pages, kv_indptr, kv_indices, kv_last_page_len, *, qo_indptr=None, layout="NHD",
                    kv_dtype=None, v_dtype=None, k_scale=None, v_scale=None, causal="bottom-right", scale=None,
                    window=(-1, -1), softcap=0.0, sinks=None, alibi_slopes=None, math="strict", return_lse=False,
                    v_head_dim=None):
    """libattn.paged_attention on torch tensors (CPU; forward only): the page
    tensors are read in place (bfloat16 pages as their bits; uint8 pages as
    q8_0 blocks unless kv_dtype names another uint8 format: fp8_e4m3,
    fp8_e5m2, int8, int4, q4_0, with k_scale / v_scale as there); q is used
    as float32; returns float32 tensors."""
    kp, kind = _pages(k_pages, "k_pages")
    vp, _ = _pages(v_pages, "v_pages")
    qa = q.detach().to(torch.float32).contiguous().numpy()
    idx = [x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x
           for x in (kv_indptr, kv_indices, kv_last_page_len, qo_indptr)]
    r = _lat.paged_attention(qa, kp, vp, idx[0], idx[1], idx[2], qo_indptr=idx[3], layout=layout,
                             kv_dtype=kv_dtype if kv_dtype is not None else kind, v_dtype=v_dtype,
                             k_scale=_scale_np(k_scale, "k_scale"), v_scale=_scale_np(v_scale, "v_scale"),
                             causal=causal, scale=scale,
                             window=window, softcap=softcap, sinks=_opt(sinks), alibi_slopes=_opt(alibi_slopes),
                             math=math, return_lse=return_lse, v_head_dim=v_head_dim)
    if return_lse:
        return torch.from_numpy(r[0]), torch.from_numpy(r[1])
    return torch.from_numpy(r)


def paged_append(k, v, k_pages, v_pages, slot_mapping, *, layout="NHD", kv_dtype=None, v_dtype=None, k_scale=None,
                 v_scale=None):
    """libattn.paged_append on torch tensors: the rows (float) written into the
    page tensors in place (vLLM's reshape_and_cache, negative slots skipped)."""
    kp, kind = _pages(k_pages, "k_pages")
    vp, _ = _pages(v_pages, "v_pages")
    for a, name in ((kp, "k_pages"), (vp, "v_pages")):
        if a is not None and not a.flags.writeable:
            raise ValueError("%s must be writable" % name)
    ka = k.detach().to(torch.float32).contiguous().numpy()
    va = None if v is None else v.detach().to(torch.float32).contiguous().numpy()
    sm = slot_mapping.detach().cpu().numpy() if isinstance(slot_mapping, torch.Tensor) else slot_mapping
    _lat.paged_append(ka, va, kp, vp, sm, layout=layout, kv_dtype=kv_dtype if kv_dtype is not None else kind,
                      v_dtype=v_dtype, k_scale=_scale_np(k_scale, "k_scale"), v_scale=_scale_np(v_scale, "v_scale"))

