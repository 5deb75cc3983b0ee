"""libattn.torch.sdpa against PyTorch's own math, forward and autograd
(skipped when torch is not installed; the goldens cover the numbers)."""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import libattn.torch as lat  # noqa: E402


def reference(q, k, v, causal="none", key_mask=None, scale=None):
    """softmax(mask(scale q k^T)) v in float64 with PyTorch ops (GQA by repeat)."""
    q, k, v = (t.double() for t in (q, k, v))
    G = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(G, 1), v.repeat_interleave(G, 1)
    s = (q @ k.transpose(-2, -1)) * (scale if scale is not None else 1.0 / math.sqrt(q.shape[-1]))
    Sq, Sk = s.shape[-2:]
    hide = torch.zeros(Sq, Sk, dtype=torch.bool)
    if causal == "top-left":
        hide = torch.ones(Sq, Sk, dtype=torch.bool).triu(1)
    elif causal == "bottom-right":
        hide = torch.ones(Sq, Sk, dtype=torch.bool).triu(Sk - Sq + 1)
    hide = hide[None, None]
    if key_mask is not None:
        hide = hide | key_mask[:, None, None, :]
    s = s.masked_fill(hide, float("-inf"))
    dead = hide.all(-1, keepdim=True)
    p = torch.softmax(s.masked_fill(dead, 0.0), -1).masked_fill(dead, 0.0)
    return p @ v


@pytest.mark.parametrize("causal", ["none", "top-left", "bottom-right"])
@pytest.mark.parametrize("gqa", [1, 2])
def test_forward_backward(causal, gqa):
    g = torch.Generator().manual_seed(7)
    B, H, Sq, Sk, D = 2, 4, 9, 13, 16
    q = torch.randn(B, H, Sq, D, generator=g, requires_grad=True)
    k = torch.randn(B, H // gqa, Sk, D, generator=g, requires_grad=True)
    v = torch.randn(B, H // gqa, Sk, D, generator=g, requires_grad=True)
    mask = torch.rand(B, Sk, generator=g) < 0.2
    go = torch.randn(B, H, Sq, D, generator=g)
    out = lat.sdpa(q, k, v, causal=causal, key_mask=mask)
    assert out.dtype == torch.float32 and out.requires_grad
    out.backward(go)
    got = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    ref = reference(q, k, v, causal, mask)
    ref.backward(go.double())
    torch.testing.assert_close(out, ref.float(), rtol=2e-4, atol=2e-5)
    for a, t in zip(got, (q, k, v)):
        torch.testing.assert_close(a, t.grad.float(), rtol=2e-4, atol=2e-5)


def test_bshd_view_without_copy_and_half_types():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 11, 4, 32, generator=g)  # (B, S, H, D) as projections give it
    q = x.transpose(1, 2)  # (B, H, S, D) view
    out = lat.sdpa(q, q, q, causal="top-left")
    torch.testing.assert_close(out, reference(q, q, q, "top-left").float(), rtol=2e-4, atol=2e-5)
    for dt in (torch.float16, torch.bfloat16):
        qh = q.to(dt).requires_grad_()
        o = lat.sdpa(qh, qh, qh)
        assert o.dtype == dt
        o.float().sum().backward()
        assert qh.grad.dtype == dt and torch.isfinite(qh.grad.float()).all()
        want = reference(qh.detach().float(), qh.detach().float(), qh.detach().float()).float()
        torch.testing.assert_close(o.float(), want, rtol=1e-2, atol=1e-2)


def test_module_swap_gradients_and_training():
    """A PyTorch attention module whose softmax(QK^T)V is libattn's: the
    parameters get PyTorch's gradients, and training lowers the loss."""

    class Attn(torch.nn.Module):
        def __init__(self, d, h, use_libattn):
            super().__init__()
            self.h, self.use = h, use_libattn
            self.qkv, self.o = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)

        def forward(self, x):
            B, S, C = x.shape
            q, k, v = self.qkv(x).view(B, S, 3, self.h, C // self.h).permute(2, 0, 3, 1, 4)
            y = lat.sdpa(q, k, v, causal="top-left") if self.use else reference(q, k, v, "top-left").float()
            return self.o(y.transpose(1, 2).reshape(B, S, C))

    torch.manual_seed(0)
    m, ref = Attn(16, 2, True), Attn(16, 2, False)
    ref.load_state_dict(m.state_dict())
    x = torch.randn(4, 10, 16)
    target = torch.roll(x, 1, dims=1)  # copy the previous token: learnable by causal attention
    for mod in (m, ref):
        torch.nn.functional.mse_loss(mod(x), target).backward()
    for (name, a), b in zip(m.named_parameters(), ref.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-3, atol=1e-5, msg=name)
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    losses = []
    for _ in range(40):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(m(x), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0], losses


def test_errors():
    q = torch.zeros(1, 1, 2, 4)
    with pytest.raises(TypeError):
        lat.sdpa(q.double(), q.double(), q.double())
    with pytest.raises(TypeError):
        lat.sdpa(np.zeros((1, 1, 2, 4), np.float32), q, q)
    with pytest.raises(ValueError):
        lat.sdpa(q, torch.zeros(1, 1, 2, 5), q)


# ---- scaled_dot_product_attention: PyTorch 2.x's function, checked against
# float64 math written from its documentation (Debian's torch 1.13 has none)

def sdpa_doc(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """PyTorch 2.x's documented reference implementation, in float64."""
    q, k, v = q.double(), k.double(), v.double()
    L, S = q.size(-2), k.size(-2)
    scale_factor = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    attn_bias = torch.zeros(L, S, dtype=torch.float64)
    if is_causal:
        attn_bias.masked_fill_(torch.ones(L, S, dtype=torch.bool).tril(0).logical_not(), float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            attn_bias = attn_bias.masked_fill(attn_mask.logical_not(), float("-inf"))
        else:
            attn_bias = attn_bias + attn_mask.double()
    if enable_gqa:
        k = k.repeat_interleave(q.size(-3) // k.size(-3), -3)
        v = v.repeat_interleave(q.size(-3) // v.size(-3), -3)
    w = q @ k.transpose(-2, -1) * scale_factor + attn_bias
    dead = torch.isneginf(w).all(-1, keepdim=True)  # _safe_softmax (PyTorch 2.5): rows with no key give 0
    w = torch.softmax(w.masked_fill(dead, 0.0), -1).masked_fill(dead, 0.0)
    return w @ v


@pytest.mark.parametrize("shape", [(2, 4, 9, 13, 16), (3, 7, 8), (2, 3, 2, 5, 6, 8)])
@pytest.mark.parametrize("mask", ["none", "bool2d", "bool4d", "float", "causal"])
def test_scaled_dot_product_attention(shape, mask):
    g = torch.Generator().manual_seed(11)
    if len(shape) == 3:  # (N, L, E) with S = L
        N, L, E = shape
        qs, ks = (N, L, E), (N, L + 2, E)
    else:
        *lead, L, S, E = shape
        qs, ks = tuple(lead) + (L, E), tuple(lead) + (S, E)
    q = torch.randn(qs, generator=g, requires_grad=True)
    k = torch.randn(ks, generator=g, requires_grad=True)
    v = torch.randn(ks[:-1] + (E + 3,), generator=g, requires_grad=True)
    Lq, Sk = q.shape[-2], k.shape[-2]
    kw = {}
    if mask == "bool2d":
        kw["attn_mask"] = torch.rand(Lq, Sk, generator=g) < 0.7
    elif mask == "bool4d" and q.dim() >= 3:
        kw["attn_mask"] = torch.rand(q.shape[:-1] + (Sk,), generator=g) < 0.7
    elif mask == "float":
        kw["attn_mask"] = torch.randn(Lq, Sk, generator=g).masked_fill(torch.rand(Lq, Sk, generator=g) < 0.1,
                                                                       float("-inf"))
    elif mask == "causal":
        kw["is_causal"] = True
    out = lat.scaled_dot_product_attention(q, k, v, scale=0.3, **kw)
    want = sdpa_doc(q, k, v, scale=0.3, **kw)
    torch.testing.assert_close(out.double(), want, rtol=2e-4, atol=2e-5)
    gout = torch.randn(out.shape, generator=g)
    gq, gk, gv = torch.autograd.grad(out, (q, k, v), gout)
    wq, wk, wv = torch.autograd.grad(want, (q, k, v), gout.double())
    for a, b in ((gq, wq), (gk, wk), (gv, wv)):
        torch.testing.assert_close(a.double(), b.double(), rtol=1e-3, atol=1e-4)


def mask_shapes(full, rng):
    """Shapes broadcastable to full: every trailing rank, each dim its own
    size or 1 (all own, all 1, and two random mixes per rank)."""
    out = set()
    for r in range(0, len(full) + 1):
        tail = full[len(full) - r:]
        out.add(tail)
        out.add((1,) * r)
        for _ in range(2):
            out.add(tuple(n if rng.random() < 0.5 else 1 for n in tail))
    return sorted(out)


@pytest.mark.parametrize("lead", [None, (), (3,), (2, 2)])  # None: 2-D (L, E); (): 3-D (H, L, E)
@pytest.mark.parametrize("gqa", [False, True])
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_sdpa_every_rank_gqa_and_mask(lead, gqa, kind):
    """Every rank PyTorch accepts, with and without enable_gqa (3-D (4, L, E)
    query heads over a (1, S, E) key included), masks of every broadcastable
    shape, forward and backward (the float mask's gradient too)."""
    if lead is None and gqa:
        pytest.skip("a 2-D input has no head dim to group")
    g = torch.Generator().manual_seed(5)
    rng = np.random.default_rng(len(lead or ()) * 2 + gqa)
    Hq, Hkv, L, S, E = 4, (1 if gqa else 4), 7, 9, 8
    qs, ks = ((L, E), (S, E)) if lead is None else (lead + (Hq, L, E), lead + (Hkv, S, E))
    full = (L, S) if lead is None else lead + (Hq, L, S)
    for mshape in mask_shapes(full, rng):
        q = torch.randn(qs, generator=g, requires_grad=True)
        k = torch.randn(ks, generator=g, requires_grad=True)
        v = torch.randn(ks[:-1] + (E + 2,), generator=g, requires_grad=True)
        if kind == "bool":
            m = torch.rand(mshape, generator=g) < 0.8
        else:
            m = torch.randn(mshape, generator=g).requires_grad_()
        out = lat.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=gqa)
        want = sdpa_doc(q, k, v, attn_mask=m, enable_gqa=gqa)
        assert out.shape == want.shape, (mshape, out.shape, want.shape)
        torch.testing.assert_close(out.double(), want, rtol=2e-4, atol=2e-5, msg=lambda t: "%s: %s" % (mshape, t))
        gout = torch.randn(out.shape, generator=g)
        wrt = (q, k, v) + ((m,) if kind == "float" else ())
        got = torch.autograd.grad(out, wrt, gout)
        ref = torch.autograd.grad(want, wrt, gout.double())
        for a, b in zip(got, ref):
            assert a.shape == b.shape
            torch.testing.assert_close(a.double(), b.double(), rtol=1e-3, atol=1e-4,
                                       msg=lambda t: "%s grad: %s" % (mshape, t))
    q = torch.randn(qs, generator=g)
    bad = full[:-1] + (S + 1,)
    with pytest.raises(RuntimeError, match="does not broadcast"):
        lat.scaled_dot_product_attention(q, torch.randn(ks, generator=g), torch.randn(ks, generator=g),
                                         attn_mask=torch.ones(bad, dtype=torch.bool), enable_gqa=gqa)


def test_sdpa_issue_shapes():
    """The failing case of issue 33: q (4, 135, 16), k, v (1, 135, 16) with
    enable_gqa, with and without a 2-D float mask."""
    g = torch.Generator().manual_seed(33)
    q = torch.randn(4, 135, 16, generator=g)
    k, v = torch.randn(1, 135, 16, generator=g), torch.randn(1, 135, 16, generator=g)
    m = torch.randn(135, 135, generator=g)
    for kw in ({}, {"attn_mask": m}):
        out = lat.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kw)
        torch.testing.assert_close(out.double(), sdpa_doc(q, k, v, enable_gqa=True, **kw), rtol=2e-4, atol=2e-5)
    with pytest.raises(RuntimeError, match="leading dims"):
        lat.scaled_dot_product_attention(torch.randn(2, 4, 5, 8), torch.randn(3, 4, 5, 8), torch.randn(3, 4, 5, 8))


def test_sdpa_gqa_and_errors():
    g = torch.Generator().manual_seed(2)
    q, k, v = torch.randn(2, 8, 5, 16, generator=g), torch.randn(2, 2, 7, 16, generator=g), torch.randn(2, 2, 7, 16,
                                                                                                            generator=g)
    out = lat.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    torch.testing.assert_close(out.double(), sdpa_doc(q, k, v, enable_gqa=True), rtol=2e-4, atol=2e-5)
    with pytest.raises(RuntimeError):
        lat.scaled_dot_product_attention(q, k, v)  # heads differ without enable_gqa
    with pytest.raises(RuntimeError):
        lat.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(5, 5, dtype=torch.bool), is_causal=True)


def test_patch():
    import torch.nn.functional as F
    had = hasattr(F, "scaled_dot_product_attention")
    lat.patch()
    try:
        assert F.scaled_dot_product_attention is lat.scaled_dot_product_attention
        q = torch.randn(1, 2, 4, 8)
        torch.testing.assert_close(F.scaled_dot_product_attention(q, q, q, is_causal=True).double(),
                                   sdpa_doc(q, q, q, is_causal=True), rtol=2e-4, atol=2e-5)
    finally:
        lat.unpatch()
    assert hasattr(F, "scaled_dot_product_attention") == had


@pytest.mark.parametrize("mshape", [(9, 13), (2, 1, 9, 13), (1, 4, 1, 13)])
def test_float_mask_gradient(mshape):
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 4, 9, 16, generator=g, requires_grad=True)
    k = torch.randn(2, 4, 13, 16, generator=g, requires_grad=True)
    v = torch.randn(2, 4, 13, 16, generator=g, requires_grad=True)
    m = torch.randn(mshape, generator=g, requires_grad=True)
    out = lat.scaled_dot_product_attention(q, k, v, attn_mask=m)
    want = sdpa_doc(q, k, v, attn_mask=m)
    gout = torch.randn(out.shape, generator=g)
    got = torch.autograd.grad(out, (q, k, v, m), gout)
    ref = torch.autograd.grad(want, (q, k, v, m), gout.double())
    for a, b in zip(got, ref):
        torch.testing.assert_close(a.double(), b.double(), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_paged_attention_on_tensors(dtype):
    """the drop-in's paged_attention / paged_append: page tensors in place, vLLM's slots, FlashInfer's table"""
    g = torch.Generator().manual_seed(0)
    P, ps, Hkv, D, H = 6, 4, 2, 16, 4
    kp = torch.zeros(P, ps, Hkv, D, dtype=dtype)
    vp = torch.zeros(P, ps, Hkv, D, dtype=dtype)
    lens = [7, 3]
    indptr = torch.tensor([0, 2, 3], dtype=torch.int32)
    indices = torch.tensor([4, 1, 5], dtype=torch.int32)
    last = torch.tensor([3, 3], dtype=torch.int32)
    k = torch.randn(sum(lens), Hkv, D, generator=g)
    v = torch.randn(sum(lens), Hkv, D, generator=g)
    slots = torch.tensor([4 * ps + j if j < ps else 1 * ps + j - ps for j in range(7)] + [5 * ps + j for j in range(3)])
    lat.paged_append(k, v, kp, vp, slots)
    assert kp.abs().sum() > 0  # written in place
    q = torch.randn(2, H, D, generator=g)
    out = lat.paged_attention(q, kp, vp, indptr, indices, last)
    assert out.shape == (2, H, D) and out.dtype == torch.float32
    kk, vv = k.to(dtype).float(), v.to(dtype).float()
    for b, (s0, n) in enumerate(((0, 7), (7, 3))):
        kb = kk[s0:s0 + n].repeat_interleave(H // Hkv, 1).permute(1, 0, 2)  # (H, n, D)
        vb = vv[s0:s0 + n].repeat_interleave(H // Hkv, 1).permute(1, 0, 2)
        w = torch.softmax((q[b][:, None, :] * kb).sum(-1) / math.sqrt(D), -1)
        want = (w[:, :, None] * vb).sum(1)
        assert torch.allclose(out[b], want, rtol=1e-4, atol=1e-5), (b, (out[b] - want).abs().max())



def test_paged_formats_on_tensors():
    """uint8 page tensors in the serving formats: fp8 with per-head scales (a tensor), int8 with its (scale, zero)
    pairs in a float32 tensor written in place by paged_append"""
    g = torch.Generator().manual_seed(1)
    P, ps, Hkv, D, H = 3, 4, 2, 32, 4
    k = torch.randn(10, Hkv, D, generator=g)
    v = torch.randn(10, Hkv, D, generator=g)
    slots = torch.arange(10)
    kp, vp = torch.zeros(P, ps, Hkv, D, dtype=torch.uint8), torch.zeros(P, ps, Hkv, D, dtype=torch.uint8)
    ksc = torch.tensor([0.01, 0.02])
    vpar = torch.full((P, ps, Hkv, 2), float("nan"))
    lat.paged_append(k, v, kp, vp, slots, kv_dtype="fp8_e4m3", v_dtype="int8", k_scale=ksc, v_scale=vpar)
    assert not torch.isnan(vpar[:2]).any() and torch.isnan(vpar[2, 2:]).all()  # pairs written where rows went
    q = torch.randn(1, H, D, generator=g)
    ip, ind, last = torch.tensor([0, 3], dtype=torch.int32), torch.tensor([0, 1, 2], dtype=torch.int32), \
        torch.tensor([2], dtype=torch.int32)
    out = lat.paged_attention(q, kp, vp, ip, ind, last, kv_dtype="fp8_e4m3", v_dtype="int8", k_scale=ksc,
                              v_scale=vpar)
    kb, vb = k.repeat_interleave(H // Hkv, 1).permute(1, 0, 2), v.repeat_interleave(H // Hkv, 1).permute(1, 0, 2)
    w = torch.softmax((q[0][:, None, :] * kb).sum(-1) / math.sqrt(D), -1)
    want = (w[:, :, None] * vb).sum(1)
    assert (out[0] - want).abs().max() < 0.05  # fp8 keys (3 mantissa bits), int8 values
