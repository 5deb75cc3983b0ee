"""Dropout on the attention weights in libattn.sdpa / sdpa_backward (and,
when torch is installed, in the scaled_dot_product_attention drop-in)
against float64 numpy math: out = (dropout(softmax(s)) v, the keep
decisions read one by one from the library's attn_dropout_keep."""
import ctypes

import numpy as np
import pytest

import libattn
from libattn import _capi

lib = libattn.lib


def keep_mask(p, seed, shape):
    """The keep decisions of one dropout call over a tensor of this shape."""
    n = int(np.prod(shape))
    gen, drop = _capi.Generator(), _capi.Dropout()
    lib.attn_generator_seed(ctypes.byref(gen), seed)
    assert lib.attn_dropout_begin(ctypes.byref(gen), p, n, ctypes.byref(drop)) == 0
    keep = np.array([lib.attn_dropout_keep(ctypes.byref(drop), i) for i in range(n)], bool).reshape(shape)
    lib.attn_dropout_end(ctypes.byref(drop))
    return keep


def reference(q, k, v, dout, p, keep, causal):
    """float64 out and (dq, dk, dv) with the weights dropped by keep (scale 1/(1-p))."""
    q, k, v, dout = (x.astype(np.float64) for x in (q, k, v, dout))
    H, Hkv, Sq, Sk, D = q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3]
    G = H // Hkv
    kr, vr = np.repeat(k, G, axis=1), np.repeat(v, G, axis=1)
    sc = 1 / np.sqrt(D)
    s = np.einsum("bhid,bhjd->bhij", q, kr) * sc
    if causal:
        s = np.where(np.tri(Sq, Sk, 0, bool), s, -np.inf)
    a = np.exp(s - s.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    m = keep / (1 - p)
    ad = a * m
    out = ad @ vr
    dvr = np.einsum("bhij,bhid->bhjd", ad, dout)
    da = np.einsum("bhid,bhjd->bhij", dout, vr) * m
    ds = a * (da - (da * a).sum(-1, keepdims=True))
    dq = np.einsum("bhij,bhjd->bhid", ds, kr) * sc
    dkr = np.einsum("bhij,bhid->bhjd", ds, q) * sc
    fold = lambda x: x.reshape(x.shape[0], Hkv, G, *x.shape[2:]).sum(2)  # noqa: E731
    return out, dq, fold(dkr), fold(dvr)


@pytest.mark.parametrize("impl", ["ref", "fast"])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_dropout(impl, causal):
    rng = np.random.default_rng(3)
    B, H, Hkv, Sq, Sk, D = 2, 4, 2, 9, 13, 16
    q = rng.standard_normal((B, H, Sq, D), np.float32)
    k = rng.standard_normal((B, Hkv, Sk, D), np.float32)
    v = rng.standard_normal((B, Hkv, Sk, D), np.float32)
    go = rng.standard_normal((B, H, Sq, D), np.float32)
    p, seed = 0.3, 1234
    opts = dict(causal="top-left" if causal else "none", impl=impl, dropout_p=p, dropout_seed=seed)
    out = libattn.sdpa(q, k, v, **opts)
    grads = libattn.sdpa_backward(q, k, v, go, **opts)
    keep = keep_mask(p, seed, (B, H, Sq, Sk))
    assert 0.55 < keep.mean() < 0.85  # about 1 - p kept
    ref = reference(q, k, v, go, p, keep, causal)
    np.testing.assert_allclose(out, ref[0], rtol=2e-4, atol=2e-5)
    for got, want in zip(grads, ref[1:]):
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=5e-5)
    other = libattn.sdpa(q, k, v, **dict(opts, dropout_seed=seed + 1))
    assert not np.allclose(other, out)  # another seed, other keep decisions


def test_dropout_bad_values():
    q = np.zeros((1, 1, 3, 4), np.float32)
    with pytest.raises(ValueError):
        libattn.sdpa(q, q, q, dropout_p=0.1)  # no seed: the backward could not match
    with pytest.raises(ValueError):
        libattn.sdpa(q, q, q, dropout_p=1.5, dropout_seed=1)
    np.testing.assert_array_equal(libattn.sdpa(q + 1, q, q + 2, dropout_p=1.0, dropout_seed=1), 0.0)


def test_torch_drop_in_dropout():
    torch = pytest.importorskip("torch")
    import libattn.torch as lat
    rng = np.random.default_rng(4)
    B, H, S, D, p = 1, 2, 7, 8, 0.25
    q, k, v, go = (rng.standard_normal((B, H, S, D), np.float32) for _ in range(4))
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    torch.manual_seed(5)
    out = lat.scaled_dot_product_attention(tq, tk, tv, dropout_p=p, is_causal=True)
    out.backward(torch.tensor(go))
    torch.manual_seed(5)  # the drop-in's seed is one draw from torch's generator
    seed = int(torch.randint(0, 2**62, (1,), dtype=torch.int64).item())
    ref = reference(q, k, v, go, p, keep_mask(p, seed, (B, H, S, S)), True)
    np.testing.assert_allclose(out.detach().numpy(), ref[0], rtol=2e-4, atol=2e-5)
    for t, want in zip((tq, tk, tv), ref[1:]):
        np.testing.assert_allclose(t.grad.numpy(), want, rtol=2e-4, atol=5e-5)
    torch.manual_seed(5)
    again = lat.scaled_dot_product_attention(tq, tk, tv, dropout_p=p, is_causal=True)
    assert torch.equal(again, out)  # reproducible under torch.manual_seed
