"""Attention sinks and chunked local attention (issue 23) against float64
numpy math written from their definitions (docs/SEMANTICS.md), on both
paths, through the KV cache, and the bad values that are refused."""
import numpy as np
import pytest

import libattn


def reference(q, k, v, causal, sinks=None, chunk=0, scale=None):
    """float64 out, lse, and the softmax weights with the sink's share."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    B, H, Sq, D = q.shape
    Hkv, Sk = k.shape[1], k.shape[2]
    scale = 1 / np.sqrt(D) if scale is None else scale
    k = np.repeat(k, H // Hkv, axis=1)
    v = np.repeat(v, H // Hkv, axis=1)
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale
    off = 0 if causal == "top-left" else Sk - Sq  # "now": bottom-right unless top-left causal (as windows)
    now = np.arange(Sq)[:, None] + off
    j = np.arange(Sk)[None, :]
    vis = np.ones((Sq, Sk), bool)
    if causal != "none":
        vis &= j <= now
    if chunk:
        vis &= np.floor_divide(now, chunk) == np.floor_divide(j, chunk)
    s = np.where(vis, s, -np.inf)
    sk = np.full((1, H, 1, 1), -np.inf) if sinks is None else sinks.astype(np.float64)[None, :, None, None]
    m = np.maximum(s.max(-1, keepdims=True), sk)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    z = e.sum(-1, keepdims=True) + np.exp(sk - m)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(z > 0, e / z, 0.0)
        lse = np.where(z[..., 0] > 0, (m + np.log(z))[..., 0], -np.inf)
        psink = np.where(z > 0, np.exp(sk - m) / z, 0.0)[..., 0]
    return p @ v, lse, p, psink


def make(B=2, H=4, Hkv=2, Sq=37, Sk=90, D=16, seed=0):
    r = np.random.default_rng(seed)
    q = r.standard_normal((B, H, Sq, D)).astype(np.float32)
    k = r.standard_normal((B, Hkv, Sk, D)).astype(np.float32)
    v = r.standard_normal((B, Hkv, Sk, D)).astype(np.float32)
    return q, k, v


@pytest.mark.parametrize("impl", ["ref", "fast"])
@pytest.mark.parametrize("Sq", [1, 5, 37])
@pytest.mark.parametrize("causal", ["none", "top-left", "bottom-right"])
def test_sinks_forward_backward(impl, Sq, causal):
    q, k, v = make(Sq=Sq)
    sinks = np.array([-2.0, 0.0, 1.5, 4.0], np.float32)
    out, lse = libattn.sdpa(q, k, v, causal=causal, sinks=sinks, impl=impl, return_lse=True)
    ro, rl, p, psink = reference(q, k, v, causal, sinks)
    np.testing.assert_allclose(out, ro, rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(lse, rl, rtol=2e-5, atol=2e-5)
    # dsinks = -sum over rows of psink * (dout . out)
    dout = np.random.default_rng(1).standard_normal(out.shape).astype(np.float32)
    dq, dk, dv, dsinks = libattn.sdpa_backward(q, k, v, dout, causal=causal, sinks=sinks, impl=impl)
    want = -(psink * (dout.astype(np.float64) * ro).sum(-1)).sum(axis=(0, 2))
    np.testing.assert_allclose(dsinks, want, rtol=1e-4, atol=1e-4)
    # dv = P^T dout with the sink-normalized P
    want_dv = np.einsum("bhij,bhid->bhjd", p, dout.astype(np.float64))
    want_dv = want_dv.reshape(2, 2, 2, *want_dv.shape[2:]).sum(axis=2)
    np.testing.assert_allclose(dv, want_dv, rtol=2e-4, atol=2e-5)


def test_sink_row_without_keys():
    """A row that sees no key gives out 0 and lse = its sink."""
    q, k, v = make(Sq=6, Sk=3)
    sinks = np.array([0.5, -1.0, 2.0, 3.0], np.float32)
    for impl in ("ref", "fast"):
        out, lse = libattn.sdpa(q, k, v, causal="bottom-right", sinks=sinks, impl=impl, return_lse=True)
        # bottom-right with Sq > Sk: rows 0..2 see nothing
        assert np.all(out[:, :, :3] == 0)
        np.testing.assert_array_equal(lse[:, :, :3], np.broadcast_to(sinks[None, :, None], (2, 4, 3)))


@pytest.mark.parametrize("impl", ["ref", "fast"])
@pytest.mark.parametrize("Sq", [1, 9, 37])
@pytest.mark.parametrize("chunk", [1, 7, 32])
def test_chunks(impl, Sq, chunk):
    q, k, v = make(Sq=Sq)
    for causal in ("none", "top-left", "bottom-right"):
        out = libattn.sdpa(q, k, v, causal=causal, attention_chunk=chunk, impl=impl)
        ro = reference(q, k, v, causal, chunk=chunk)[0]
        np.testing.assert_allclose(out, ro, rtol=2e-4, atol=2e-5, err_msg=causal)


@pytest.mark.parametrize("dtype", ["f32", "f16", "q8_0"])
@pytest.mark.parametrize("page_size", [0, 16])
def test_cache_sinks_and_chunks(dtype, page_size):
    """The cache's attend (decode) against sdpa on the values it stores."""
    q, k, v = make(Sq=3, Sk=100, D=32)
    sinks = np.array([1.0, -1.0, 0.25, 2.0], np.float32)
    cache = libattn.KVCache(2, 2, 128, 32, dtype=dtype, page_size=page_size)
    cache.append(k, v)
    got = cache.attend(q, sinks=sinks, attention_chunk=16)
    if dtype == "f16":  # the cache stores f16-rounded rows
        k, v = k.astype(np.float16).astype(np.float32), v.astype(np.float16).astype(np.float32)
    want = libattn.sdpa(q, k, v, causal="bottom-right", sinks=sinks, attention_chunk=16, impl="ref")
    tol = 2e-5 if dtype != "q8_0" else 3e-2  # q8_0: the stored values differ by up to max|x| / 254
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_bad_values():
    q, k, v = make(Sq=4, Sk=8)
    with pytest.raises((ValueError, libattn.LibattnError)):
        libattn.sdpa(q, k, v, sinks=np.array([0, np.nan, 0, 0], np.float32))
    with pytest.raises((ValueError, libattn.LibattnError)):
        libattn.sdpa(q, k, v, sinks=np.array([0, np.inf, 0, 0], np.float32))
    with pytest.raises(ValueError):
        libattn.sdpa(q, k, v, sinks=np.zeros(3, np.float32))
    with pytest.raises((ValueError, libattn.LibattnError)):
        libattn.sdpa(q, k, v, attention_chunk=-1)


def dense_reference(q, k, v, mask=None, bias=None, causal="none"):
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    B, H, Sq, D = q.shape
    Sk = k.shape[2]
    k = np.repeat(k, H // k.shape[1], axis=1)
    v = np.repeat(v, H // v.shape[1], axis=1)
    s = np.einsum("bhid,bhjd->bhij", q, k) / np.sqrt(D)
    vis = np.ones((B, H, Sq, Sk), bool)
    if causal == "top-left":
        vis &= np.tril(np.ones((Sq, Sk), bool))
    if mask is not None:
        vis &= np.broadcast_to(mask, vis.shape)
    if bias is not None:
        s = s + np.broadcast_to(bias.astype(np.float64), s.shape)
    s = np.where(vis, s, -np.inf)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    e = np.exp(s - m)
    z = e.sum(-1, keepdims=True)
    p = np.where(z > 0, e / np.where(z > 0, z, 1), 0)
    return p @ v


@pytest.mark.parametrize("impl", ["ref", "fast"])
@pytest.mark.parametrize("Sq", [1, 6, 40])
@pytest.mark.parametrize("shape", [(None, None, "Sq", "Sk"), ("B", 1, "Sq", "Sk"), ("Sk",), (1, "H", 1, "Sk")])
def test_dense_mask_and_bias(impl, Sq, shape):
    q, k, v = make(Sq=Sq, Sk=70)
    B, H, Sk = 2, 4, 70
    dims = {"B": B, "H": H, "Sq": Sq, "Sk": Sk, None: 1, 1: 1}
    shp = tuple(dims[t] for t in shape)
    r = np.random.default_rng(3)
    mask = r.random(shp) < 0.8
    bias = r.standard_normal(shp).astype(np.float32)
    bias[r.random(shp) < 0.05] = -np.inf
    for causal in ("none", "top-left"):
        got = libattn.sdpa(q, k, v, attn_mask=mask, attn_bias=bias, causal=causal, impl=impl)
        np.testing.assert_allclose(got, dense_reference(q, k, v, mask, bias, causal), rtol=2e-4, atol=2e-5)
    with pytest.raises(ValueError):
        libattn.sdpa(q, k, v, attn_mask=np.ones((3, Sk), bool))
    with pytest.raises(ValueError):
        libattn.sdpa(q, k, v, attn_mask=np.ones((Sq, Sk), np.float32))


def test_tree_mask_over_cache():
    """Speculative decoding: 5 draft tokens appended to a 60-token cache,
    verified in one call with a tree mask over their positions."""
    q, k, v = make(Sq=5, Sk=65, D=32)
    cache = libattn.KVCache(2, 2, 80, 32)
    cache.append(k, v)
    tree = np.zeros((5, 65), bool)
    tree[:, :60] = True  # every draft sees the prompt
    parent = [-1, 0, 0, 1, 2]  # draft i sees itself and its ancestors
    for i in range(5):
        j = i
        while j >= 0:
            tree[i, 60 + j] = True
            j = parent[j]
    got = cache.attend(q, attn_mask=tree, causal="none")
    want = dense_reference(q, k, v, tree[None, None])
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("page_size", [0, 16])
@pytest.mark.parametrize("Sq", [4, 20])
def test_cache_mask_of_capacity_width(page_size, Sq):
    """A serving loop's one mask buffer of the cache's capacity width
    (B, 1, Sq, capacity), over sequences of different lengths: positions at
    or past a sequence's length never take part (the buffer holds True and
    huge biases there), the longest length's width gives the same answer,
    and any other width is refused."""
    B, H, Hkv, D, cap = 3, 4, 2, 16, 100
    lens = [37, 60, 12]
    r = np.random.default_rng(11)
    k = r.standard_normal((B, Hkv, 60, D)).astype(np.float32)
    v = r.standard_normal((B, Hkv, 60, D)).astype(np.float32)
    q = r.standard_normal((B, H, Sq, D)).astype(np.float32)
    cache = libattn.KVCache(B, Hkv, cap, D, page_size=page_size)
    cache.append(k, v, n=lens)
    mask = r.random((B, 1, Sq, cap)) < 0.7
    bias = r.standard_normal((B, 1, Sq, cap)).astype(np.float32)
    for b, n in enumerate(lens):  # past the length: would dominate if read
        mask[b, :, :, n:] = True
        bias[b, :, :, n:] = 50.0
    mask[0, 0, 1, :lens[0]] = False  # a row that sees no key: zeros
    got = cache.attend(q, attn_mask=mask, attn_bias=bias, causal="none")
    L = max(lens)
    narrow = cache.attend(q, attn_mask=mask[..., :L].copy(), attn_bias=bias[..., :L].copy(), causal="none")
    for b, n in enumerate(lens):
        want = dense_reference(q[b:b + 1], k[b:b + 1, :, :n], v[b:b + 1, :, :n], mask[b:b + 1, :, :, :n],
                               bias[b:b + 1, :, :, :n])
        np.testing.assert_allclose(got[b:b + 1], want, rtol=2e-4, atol=2e-5)
    assert not got[0, :, 1].any()
    np.testing.assert_array_equal(narrow, got)
    for width in (cap + 1, L + 1, cap - 1):
        with pytest.raises(ValueError, match="does not broadcast"):
            cache.attend(q, attn_mask=np.ones((B, 1, Sq, width), bool))


@pytest.mark.parametrize("impl", ["ref", "fast"])
@pytest.mark.parametrize("shape", [(2, 4, 6, 70), (6, 70), (2, 1, 1, 70)])
def test_dbias(impl, shape):
    """dbias by central differences of sum(out * dout), in the bias's shape."""
    q, k, v = make(Sq=6, Sk=70)
    r = np.random.default_rng(5)
    bias = r.standard_normal(shape).astype(np.float32)
    dout = r.standard_normal((2, 4, 6, 16)).astype(np.float32)
    _, _, _, db = libattn.sdpa_backward(q, k, v, dout, attn_bias=bias, impl=impl)
    assert db.shape == bias.shape

    def loss(b):
        o = dense_reference(q, k, v, None, b)
        return float((o * dout).sum())

    flat = bias.reshape(-1).astype(np.float64)
    for idx in r.choice(flat.size, 6, replace=False):
        e = np.zeros_like(flat)
        e[idx] = 1e-4
        fd = (loss((flat + e).reshape(shape)) - loss((flat - e).reshape(shape))) / 2e-4
        assert abs(db.reshape(-1)[idx] - fd) < 1e-3 * (1 + abs(fd)), (idx, db.reshape(-1)[idx], fd)


@pytest.mark.parametrize("causal", ["none", "top-left", "bottom-right"])
@pytest.mark.parametrize("impl", ["ref", "fast"])
def test_varlen(causal, impl):
    """Packed sequences give, sequence by sequence, the padded call's answer."""
    r = np.random.default_rng(9)
    lq, lk = [5, 0, 17, 1, 30], [9, 4, 17, 0, 41]
    if causal == "top-left":
        lk = [max(a, b) for a, b in zip(lq, lk)]
    cq, ck = np.concatenate([[0], np.cumsum(lq)]), np.concatenate([[0], np.cumsum(lk)])
    H, Hkv, D = 4, 2, 16
    q = r.standard_normal((cq[-1], H, D)).astype(np.float32)
    k = r.standard_normal((ck[-1], Hkv, D)).astype(np.float32)
    v = r.standard_normal((ck[-1], Hkv, D)).astype(np.float32)
    dout = r.standard_normal((cq[-1], H, D)).astype(np.float32)
    out, lse = libattn.sdpa_varlen(q, k, v, cq, ck, causal=causal, impl=impl, return_lse=True)
    dq, dk, dv = libattn.sdpa_varlen_backward(q, k, v, dout, cq, ck, causal=causal, impl=impl)
    for s in range(5):
        a, b, c, e = cq[s], cq[s + 1], ck[s], ck[s + 1]
        if b == a:
            continue
        qs, ks, vs = (x.transpose(1, 0, 2)[None] for x in (q[a:b], k[c:e], v[c:e]))
        o1, l1 = libattn.sdpa(qs, ks, vs, causal=causal, impl="ref", return_lse=True)
        np.testing.assert_allclose(out[a:b], o1[0].transpose(1, 0, 2), rtol=2e-4, atol=2e-5)
        np.testing.assert_allclose(lse[:, a:b], l1[0], rtol=2e-4, atol=2e-5)
        g1 = libattn.sdpa_backward(qs, ks, vs, dout[a:b].transpose(1, 0, 2)[None], causal=causal, impl="ref")
        np.testing.assert_allclose(dq[a:b], g1[0][0].transpose(1, 0, 2), rtol=1e-3, atol=1e-4)
        np.testing.assert_allclose(dk[c:e], g1[1][0].transpose(1, 0, 2), rtol=1e-3, atol=1e-4)
        np.testing.assert_allclose(dv[c:e], g1[2][0].transpose(1, 0, 2), rtol=1e-3, atol=1e-4)
    with pytest.raises((ValueError, libattn.LibattnError)):
        libattn.sdpa_varlen(q, k, v, cq + 1, ck)  # not starting at 0
