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

__all__ = ["sdpa", "scaled_dot_product_attention", "patch", "unpatch", "set_math", "paged_attention", "paged_append",
           "flex_attention", "create_block_mask", "create_mask", "BlockMask", "and_masks", "or_masks", "noop_mask"]

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



# ---- programmable attention (torch.nn.attention.flex_attention) ----------------

class _TorchTiles:
    """How the mods see a tile from PyTorch: b, h 0-d int64 tensors, q_idx
    (rows, 1) and kv_idx (1, cols) int64 tensors, score a (rows, cols)
    float32 tensor; the backward's derivative d new / d score by autograd."""

    @staticmethod
    def index(t):
        return (torch.tensor(t.b), torch.tensor(t.h), torch.arange(t.i0, t.i0 + t.rows)[:, None],
                torch.arange(t.j0, t.j0 + t.cols)[None, :])

    @staticmethod
    def keep(r, shape):
        return torch.as_tensor(r).to(torch.bool).expand(shape).numpy()

    @staticmethod
    def score(mod, s, idx, want_grad):
        st = torch.from_numpy(np.array(s, dtype=np.float32))
        if not want_grad:
            with torch.no_grad():
                new = torch.as_tensor(mod(st, *idx)).to(torch.float32).expand(st.shape)
            return new.numpy(), None
        with torch.enable_grad():
            st.requires_grad_(True)
            new = torch.as_tensor(mod(st, *idx)).to(torch.float32).expand(st.shape)
            g = torch.autograd.grad(new.sum(), st, allow_unused=True)[0] if new.requires_grad else None
        g = torch.zeros_like(st) if g is None else g
        return new.detach().numpy(), g.detach().numpy()


def _captured(score_mod):
    """Tensors that require grad and score_mod's result depends on (the
    leaves of its graph on a 1 x 1 tile other than the score)."""
    if score_mod is None:
        return []
    s = torch.zeros((1, 1), requires_grad=True)
    with torch.enable_grad():
        new = torch.as_tensor(score_mod(s, torch.tensor(0), torch.tensor(0), torch.zeros((1, 1), dtype=torch.int64),
                                        torch.zeros((1, 1), dtype=torch.int64)))
    out, seen, alive, stack = [], set(), [], [new.grad_fn] if new.grad_fn is not None else []
    while stack:
        fn = stack.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        alive.append(fn)  # the nodes' Python wrappers are made on access: kept, their ids stay theirs
        var = getattr(fn, "variable", None)
        if var is not None and var is not s and var.requires_grad:
            out.append(var)
        stack.extend(f for f, _ in fn.next_functions)
    return out


def _keep_rows(block_mask, states, b, h, i0, i1, Sk):
    """(i1 - i0, Sk) bool: which keys rows i0 .. i1 - 1 of (b, h) keep under
    block_mask (states: its _states())."""
    keep = torch.ones((i1 - i0, Sk), dtype=torch.bool)
    if block_mask is None:
        return keep
    qb, kb = block_mask.BLOCK_SIZE
    bb, hh = (0 if block_mask.B == 1 else b), (0 if block_mask.H == 1 else h)
    for qi in range(i0 // qb, (i1 - 1) // qb + 1):
        r0, r1 = max(qi * qb, i0), min((qi + 1) * qb, i1)
        state = states[bb, hh, qi]  # 0 empty, 1 partial, 2 full
        for kj in range(-(-Sk // kb)):
            c0, c1 = kj * kb, min((kj + 1) * kb, Sk)
            if state[kj] == 0:
                keep[r0 - i0:r1 - i0, c0:c1] = False
            elif state[kj] == 1 and block_mask.mask_mod is not None:
                m = block_mask.mask_mod(torch.tensor(b), torch.tensor(h), torch.arange(r0, r1)[:, None],
                                        torch.arange(c0, c1)[None, :])
                keep[r0 - i0:r1 - i0, c0:c1] = torch.as_tensor(m).to(torch.bool).expand(r1 - r0, c1 - c0)
    return keep


def _captured_grads(q, k, v, dout, lse, score_mod, block_mask, scale, captured, rows=128):
    """d loss / d captured: sum over the kept pairs of dT * d score_mod / d
    captured, dT = P (dP - rowsum(P dP)) recomputed a block of query rows at
    a time in PyTorch (the library's backward gives q, k and v)."""
    B, H, Sq, _ = q.shape
    Hkv, Sk = k.shape[1], k.shape[2]
    grads = [torch.zeros_like(c) for c in captured]
    qi_all, ki = torch.arange(Sq), torch.arange(Sk)[None, :]
    states = block_mask._states() if block_mask is not None else None
    for b in range(B):
        for h in range(H):
            hk = h // (H // Hkv)
            for i0 in range(0, Sq, rows):
                i1 = min(i0 + rows, Sq)
                keep = _keep_rows(block_mask, states, b, h, i0, i1, Sk)
                if not keep.any():
                    continue
                s = (q[b, h, i0:i1] @ k[b, hk].T) * scale
                with torch.enable_grad():
                    new = torch.as_tensor(score_mod(s, torch.tensor(b), torch.tensor(h), qi_all[i0:i1, None], ki))
                    new = new.expand(s.shape)
                    t = torch.where(keep, new, torch.full_like(s, -float("inf")))
                    lr = lse[b, h, i0:i1, None]
                    p = torch.where(torch.isfinite(lr), torch.exp(t.detach() - lr), torch.zeros_like(s))
                    dp = dout[b, h, i0:i1] @ v[b, hk].T
                    dt = p * (dp - (p * dp).sum(-1, keepdim=True))
                    gs = torch.autograd.grad(t, captured, grad_outputs=dt, allow_unused=True)
                for a, g in zip(grads, gs):
                    if g is not None:
                        a += g
    return grads


class _Flex(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, opts, *captured):
        score_mod, block_mask, scale, enable_gqa, math = opts
        qn, kn, vn = (t.detach().to(torch.float32).contiguous().numpy() for t in (q, k, v))
        c, cb = _lat._flex.flex_call(qn, kn, vn, score_mod, block_mask, scale, enable_gqa, _TorchTiles, math)
        out, lse = _lat._flex.flex_forward(c, cb, True)
        o, l = torch.from_numpy(out), torch.from_numpy(lse)
        ctx.save_for_backward(q, k, v, l)
        ctx.opts, ctx.scale = opts, c.desc.scale
        ctx.mark_non_differentiable(l)
        return o.to(q.dtype), l

    @staticmethod
    def backward(ctx, gout, glse):
        q, k, v, lse = ctx.saved_tensors
        score_mod, block_mask, scale, enable_gqa, math = ctx.opts
        qn, kn, vn = (t.detach().to(torch.float32).contiguous().numpy() for t in (q, k, v))
        go = gout.detach().to(torch.float32).contiguous()
        c, cb = _lat._flex.flex_call(qn, kn, vn, score_mod, block_mask, scale, enable_gqa, _TorchTiles, math)
        dq, dk, dv = np.empty_like(qn), np.empty_like(kn), np.empty_like(vn)
        st = _lat.lib.attn_sdpa_backward(_lat.ctypes.byref(c.desc), _lat._view(c.q), _lat._view(c.k),
                                         _lat._view(c.v), _lat._capi.View(), _lat._view(go.numpy()), None,
                                         _lat._view(dq), _lat._view(dk), _lat._view(dv))
        cb.raise_if_failed()
        _lat._check(st, "flex_attention backward")
        captured = [t for t in ctx.needs_input_grad[4:]]
        caps = ()
        if any(captured):
            tensors = _captured(score_mod)
            gs = _captured_grads(q.detach().float(), k.detach().float(), v.detach().float(), go, lse, score_mod,
                                 block_mask, ctx.scale, tensors)
            caps = tuple(gs)
        need = ctx.needs_input_grad
        return ((torch.from_numpy(dq).to(q.dtype) if need[0] else None,
                 torch.from_numpy(dk).to(k.dtype) if need[1] else None,
                 torch.from_numpy(dv).to(v.dtype) if need[2] else None, None) + caps)


def flex_attention(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                   return_lse=False, kernel_options=None, *, math="strict"):
    """torch.nn.attention.flex_attention.flex_attention on libattn (CPU
    tensors): mods written for PyTorch (torch functions on index tensors,
    captured tensors) run unchanged. Differentiable in query, key, value and
    in tensors score_mod captures that require grad. Computes in float32
    (other dtypes are converted; the output comes back in query's dtype).
    The lse (natural log) is not differentiable."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor):
            raise TypeError("%s: expected a torch.Tensor, got %s" % (name, type(t).__name__))
        if t.device.type != "cpu":
            raise ValueError("%s: libattn runs on the CPU; got a tensor on %s" % (name, t.device))
    captured = _captured(score_mod) if torch.is_grad_enabled() else []
    out, lse = _Flex.apply(query, key, value, (score_mod, block_mask, scale, enable_gqa, math), *captured)
    return (out, lse) if return_lse else out


_BM_FIELDS = ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices", "q_num_blocks", "q_indices",
              "full_q_num_blocks", "full_q_indices")


class _TorchBlockMask(_lat.BlockMask):
    """libattn.BlockMask whose arrays are int32 tensors (BlockMask's fields)."""

    def __init__(self, handle, mask_mod, callbacks=None):
        super().__init__(handle, mask_mod, callbacks)
        for f in _BM_FIELDS:
            setattr(self, f, torch.from_numpy(getattr(self, f)))

    def to_dense(self):
        return torch.from_numpy(super().to_dense())


def create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, device="cpu", BLOCK_SIZE=128, _compile=False):
    """torch.nn.attention.flex_attention.create_block_mask on libattn: the
    mask_mod (torch code on index tensors) evaluated block by block."""
    return _lat._flex._create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, BLOCK_SIZE, _TorchTiles, _TorchBlockMask)


def create_mask(mod_fn, B, H, Q_LEN, KV_LEN, device="cpu"):
    """The dense (B or 1, H or 1, Q_LEN, KV_LEN) bool mask of a mask_mod (torch code)."""
    B = 1 if B is None else int(B)
    H = 1 if H is None else int(H)
    b = torch.arange(B)[:, None, None, None]
    h = torch.arange(H)[None, :, None, None]
    q = torch.arange(Q_LEN)[None, None, :, None]
    kv = torch.arange(KV_LEN)[None, None, None, :]
    return torch.as_tensor(mod_fn(b, h, q, kv)).to(torch.bool).expand(B, H, Q_LEN, KV_LEN).clone()


def noop_mask(b, h, q_idx, kv_idx):
    """Every pair takes part."""
    return torch.ones((), dtype=torch.bool)


and_masks, or_masks = _lat.and_masks, _lat.or_masks
BlockMask = _TorchBlockMask
