"""Caller-owned pages from Python (issue 35): paged_attention over numpy
page arrays in FlashInfer's CSR convention (NHD and HND, float32, float16,
bf16 bits, q8_0 blocks), rows written with paged_append through vLLM's
slot_mapping, decode and packed prefill (qo_indptr), against sdpa on each
sequence's rows; merge_states; bad input raises. The arithmetic is checked
in C (tests/test_paged.c); here: the conventions reach the library."""
import numpy as np
import pytest

import libattn


def bf16_bits(x):
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_value(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def make_pages(lens, ps, Hkv, D, layout, kind, seed=0):
    """pages (shuffled table), rows appended with paged_append; the rows as stored per sequence"""
    r = np.random.default_rng(seed)
    npages = [(n + ps - 1) // ps for n in lens]
    P = sum(npages) + 2
    dt = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}[kind]
    shape = (P, ps, Hkv, D) if layout == "NHD" else (P, Hkv, ps, D)
    fill = 0xFFFF if kind == "bf16" else np.nan  # NaN (bits): never read
    kp, vp = np.full(shape, fill, dt), np.full(shape, fill, dt)
    perm = r.permutation(P).astype(np.int32)
    indptr = np.concatenate([[0], np.cumsum(npages)]).astype(np.int32)
    indices = perm[:indptr[-1]]
    last = np.array([n - (k - 1) * ps if k else 0 for n, k in zip(lens, npages)], np.int32)
    ks, vs, slots = [], [], []
    stored_k, stored_v = [], []
    for b, n in enumerate(lens):
        k = r.standard_normal((n, Hkv, D)).astype(np.float32)
        v = r.standard_normal((n, Hkv, D)).astype(np.float32)
        ks.append(k), vs.append(v)
        slots += [int(indices[indptr[b] + j // ps]) * ps + j % ps for j in range(n)]
        if kind == "f16":
            k, v = k.astype(np.float16).astype(np.float32), v.astype(np.float16).astype(np.float32)
        if kind == "bf16":
            k, v = bf16_value(bf16_bits(k)), bf16_value(bf16_bits(v))
        stored_k.append(k.transpose(1, 0, 2)), stored_v.append(v.transpose(1, 0, 2))  # (Hkv, n, D)
    kv_dtype = "bf16" if kind == "bf16" else None
    libattn.paged_append(np.concatenate(ks + [np.zeros((0, Hkv, D), np.float32)]),
                         np.concatenate(vs + [np.zeros((0, Hkv, D), np.float32)]), kp, vp,
                         np.array(slots, np.int64), layout=layout, kv_dtype=kv_dtype)
    return kp, vp, indptr, indices, last, stored_k, stored_v, kv_dtype


@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("kind", ["f32", "f16", "bf16"])
def test_decode_and_prefill(layout, kind):
    lens, ps, Hkv, H, D = [37, 0, 70, 5], 16, 2, 4, 32
    kp, vp, indptr, indices, last, sk, sv, kvd = make_pages(lens, ps, Hkv, D, layout, kind)
    r = np.random.default_rng(1)
    q = r.standard_normal((len(lens), H, D)).astype(np.float32)
    out, lse = libattn.paged_attention(q, kp, vp, indptr, indices, last, layout=layout, kv_dtype=kvd,
                                       return_lse=True)
    assert out.shape == (len(lens), H, D) and lse.shape == (len(lens), H)
    for b, n in enumerate(lens):
        if n == 0:
            assert np.all(out[b] == 0) and np.all(lse[b] == -np.inf)
            continue
        want, wl = libattn.sdpa(q[b][None, :, None, :], sk[b][None], sv[b][None], return_lse=True)
        np.testing.assert_allclose(out[b], want[0, :, 0], rtol=2e-5, atol=2e-6)
        np.testing.assert_allclose(lse[b], wl[0, :, 0], rtol=2e-5, atol=2e-6)
    # packed prefill: 3, 1, 0, 5 rows per sequence, bottom-right causal
    nqs = [3, 1, 0, 5]
    qo = np.concatenate([[0], np.cumsum(nqs)]).astype(np.int32)
    qp = r.standard_normal((qo[-1], H, D)).astype(np.float32)
    out, lse = libattn.paged_attention(qp, kp, vp, indptr, indices, last, qo_indptr=qo, layout=layout,
                                       kv_dtype=kvd, return_lse=True)
    assert out.shape == (qo[-1], H, D) and lse.shape == (qo[-1], H)
    for b, n in enumerate(nqs):
        if n == 0:
            continue
        qb = qp[qo[b]:qo[b + 1]].transpose(1, 0, 2)[None]  # (1, H, n, D)
        want, wl = libattn.sdpa(qb, sk[b][None], sv[b][None], causal="bottom-right", return_lse=True)
        np.testing.assert_allclose(out[qo[b]:qo[b + 1]], want[0].transpose(1, 0, 2), rtol=2e-5, atol=2e-6)
        np.testing.assert_allclose(lse[qo[b]:qo[b + 1]], wl[0].T, rtol=2e-5, atol=2e-6)


def test_q8_0_pages_and_options():
    """q8_0 blocks as uint8 pages (34 bytes per 32 values); window, softcap, sinks, math reach the library"""
    lens, ps, Hkv, H, D = [40, 9], 8, 1, 2, 64
    P = 10
    kp = np.zeros((P, ps, Hkv, D // 32 * 34), np.uint8)
    vp = np.zeros_like(kp)
    r = np.random.default_rng(2)
    indptr = np.array([0, 5, 7], np.int32)
    indices = np.array([3, 1, 4, 0, 9, 2, 8], np.int32)
    last = np.array([8, 1], np.int32)
    slots = [int(indices[indptr[b] + j // ps]) * ps + j % ps for b, n in enumerate(lens) for j in range(n)]
    k = r.standard_normal((sum(lens), Hkv, D)).astype(np.float32)
    libattn.paged_append(k, k, kp, vp, np.array(slots), kv_dtype="q8_0")
    q = r.standard_normal((2, H, D)).astype(np.float32)
    base = libattn.paged_attention(q, kp, vp, indptr, indices, last, kv_dtype="q8_0")
    assert np.isfinite(base).all()
    for kw in (dict(window=(4, -1)), dict(softcap=5.0), dict(sinks=np.array([0.5, 2.0], np.float32)),
               dict(math="data"), dict(causal="none", scale=0.3)):
        other = libattn.paged_attention(q, kp, vp, indptr, indices, last, kv_dtype="q8_0", **kw)
        assert other.shape == base.shape and not np.array_equal(other, base), kw


@pytest.mark.parametrize("kind", ["f32", "bf16"])
def test_mla(kind):
    """MLA: v_pages=None, one latent head of 576 values, V = the first 512; Hq = 16"""
    r = np.random.default_rng(4)
    lens, ps, D, Dv, H = [70, 3], 16, 576, 512, 16
    npages = [(n + ps - 1) // ps for n in lens]
    P = sum(npages)
    dt = np.uint16 if kind == "bf16" else np.float32
    kp = np.zeros((P, ps, 1, D), dt)
    indptr = np.concatenate([[0], np.cumsum(npages)]).astype(np.int32)
    indices = np.arange(P, dtype=np.int32)[::-1].copy()
    last = np.array([n - (k - 1) * ps for n, k in zip(lens, npages)], np.int32)
    rows = [r.standard_normal((n, 1, D)).astype(np.float32) for n in lens]
    slots = [int(indices[indptr[b] + j // ps]) * ps + j % ps for b, n in enumerate(lens) for j in range(n)]
    kvd = "bf16" if kind == "bf16" else None
    libattn.paged_append(np.concatenate(rows), None, kp, None, np.array(slots), kv_dtype=kvd)
    q = r.standard_normal((2, H, D)).astype(np.float32)
    out = libattn.paged_attention(q, kp, None, indptr, indices, last, kv_dtype=kvd, v_head_dim=Dv, scale=0.07)
    assert out.shape == (2, H, Dv)
    for b in range(2):
        k = rows[b][:, 0]
        if kind == "bf16":
            k = bf16_value(bf16_bits(k))
        want = libattn.sdpa(q[b][None, :, None, :], k[None, None], k[None, None, :, :Dv], scale=0.07)
        np.testing.assert_allclose(out[b], want[0, :, 0], rtol=2e-5, atol=2e-6)
    with pytest.raises(ValueError):
        libattn.paged_attention(q, kp, None, indptr, indices, last, kv_dtype=kvd)  # no v_head_dim


def test_merge_states():
    r = np.random.default_rng(3)
    q, k, v = (r.standard_normal(s).astype(np.float32) for s in ((1, 4, 2, 32), (1, 4, 90, 32), (1, 4, 90, 32)))
    whole, lw = libattn.sdpa(q, k, v, return_lse=True)
    a, la = libattn.sdpa(q, k[:, :, :40], v[:, :, :40], return_lse=True)
    b, lb = libattn.sdpa(q, k[:, :, 40:], v[:, :, 40:], return_lse=True)
    out, lse = libattn.merge_states(a, la, b, lb)
    np.testing.assert_allclose(out, whole, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lse, lw, rtol=1e-6, atol=1e-6)
    empty = np.full_like(la, -np.inf)
    out, lse = libattn.merge_states(a, la, np.full_like(a, np.nan), empty)
    np.testing.assert_array_equal(out, a)
    with pytest.raises(ValueError):
        libattn.merge_states(a, la, b[..., :16], lb)


def test_bad_input():
    kp, vp, indptr, indices, last, _, _, _ = make_pages([10, 3], 4, 1, 32, "NHD", "f32")
    q = np.zeros((2, 1, 32), np.float32)
    bad = indices.copy()
    bad[0] = 99
    # E_INVALID: the caller's arrays; the message names the entry and its value (attn_last_error)
    with pytest.raises(ValueError, match=r"kv_indices\[0\] = 99 is not a page of the pool \(num_pages = %d\)"
                       % kp.shape[0]):
        libattn.paged_attention(q, kp, vp, indptr, bad, last)
    with pytest.raises(ValueError, match=r"kv_indptr\[2\] = 2 is below kv_indptr\[1\] = 3"):
        libattn.paged_attention(q, kp, vp, np.array([0, 3, 2], np.int32), indices, last)
    with pytest.raises(ValueError):  # E_INVALID: the caller's arrays
        libattn.paged_attention(q, kp, vp, indptr, indices, np.array([0, 3], np.int32))
    with pytest.raises(ValueError):
        libattn.paged_attention(q, kp, vp, indptr, indices, last, layout="NDH")
    with pytest.raises(TypeError):
        libattn.paged_attention(q, kp, vp, indptr, indices, last, kv_dtype="fp8_e4m3")  # fp8 pages are uint8
    before = kp.copy()
    with pytest.raises(ValueError, match=r"slot_mapping\[0\] = %d is past the pool's %d slots"
                       % (kp.shape[0] * 4, kp.shape[0] * 4)):
        libattn.paged_append(np.ones((1, 1, 32), np.float32), np.ones((1, 1, 32), np.float32), kp, vp,
                             np.array([kp.shape[0] * 4]))
    np.testing.assert_array_equal(kp, before)  # nothing written


@pytest.mark.parametrize("page_size", [0, 4])
def test_cache_fork(page_size):
    """KVCache.fork: dst shares src's tokens; appends after the fork stay each sequence's own"""
    r = np.random.default_rng(5)
    c = libattn.KVCache(3, 1, 64, 16, page_size=page_size)
    k = r.standard_normal((3, 1, 10, 16)).astype(np.float32)
    c.append(k, k, n=[10, 0, 0])
    c.fork(0, 2)
    assert c.length(2) == 10
    q = r.standard_normal((3, 1, 1, 16)).astype(np.float32)
    q[2] = q[0]  # the same query: the same answer over the same tokens
    out = c.attend(q)
    np.testing.assert_array_equal(out[0], out[2])
    extra = r.standard_normal((3, 1, 3, 16)).astype(np.float32)
    c.append(extra, extra, n=[0, 0, 3])  # into the shared, partly filled last page: copied first
    assert c.length(0) == 10 and c.length(2) == 13
    out2 = c.attend(q)
    np.testing.assert_array_equal(out2[0], out[0])  # src does not see dst's new tokens
    kv2 = np.concatenate([k[0:1], extra[2:3]], 2)
    want = libattn.sdpa(q[2:3], kv2, kv2, causal="bottom-right")
    np.testing.assert_allclose(out2[2], want[0], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError):
        c.fork(0, 5)



def test_k_and_v_of_different_types():
    """v_dtype: K and V stored in different types, in pages and in the cache (llama.cpp's -ctk / -ctv)"""
    r = np.random.default_rng(6)
    P, ps, Hkv, D, H = 4, 8, 1, 32, 2
    kp = np.zeros((P, ps, Hkv, D), np.float16)
    vp = np.zeros((P, ps, Hkv, D), np.float32)
    k = r.standard_normal((20, Hkv, D)).astype(np.float32)
    v = r.standard_normal((20, Hkv, D)).astype(np.float32)
    libattn.paged_append(k, v, kp, vp, np.arange(20), v_dtype="f32")
    q = r.standard_normal((1, H, D)).astype(np.float32)
    out = libattn.paged_attention(q, kp, vp, np.array([0, 3]), np.array([0, 1, 2]), np.array([4]), v_dtype="f32")
    kk = k.astype(np.float16).astype(np.float32)
    want = libattn.sdpa(q[:, :, None, :], kk.transpose(1, 0, 2)[None], v.transpose(1, 0, 2)[None])
    np.testing.assert_allclose(out, want[:, :, 0], rtol=2e-5, atol=2e-6)
    c = libattn.KVCache(1, Hkv, 32, D, dtype="f16", v_dtype="f32")
    c.append(k.transpose(1, 0, 2)[None], v.transpose(1, 0, 2)[None])
    np.testing.assert_allclose(c.attend(q[:, :, None, :])[:, :, 0], want[:, :, 0], rtol=2e-5, atol=2e-6)
    with pytest.raises(TypeError):
        libattn.KVCache(1, 1, 8, 32, v_dtype="f64")


# ---- the serving formats: decoded here in numpy from their definitions ----

def e4m3_value(c):
    c = c.astype(np.int64)
    s, e, m = c >> 7, (c >> 3) & 15, c & 7
    v = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7))
    v = np.where((e == 15) & (m == 7), np.nan, v)
    return np.where(s == 1, -v, v)


def e5m2_value(c):
    return (c.astype(np.uint16) << 8).view(np.float16).astype(np.float64)


def decode_rows(kind, pages, scale, layout):
    """(P, ps, Hkv, D) float64 values of a page array (HND pages are returned in NHD order)"""
    a = pages if layout == "NHD" else pages.transpose(0, 2, 1, 3)
    par = None if kind not in ("int8", "int4") else (scale if layout == "NHD" else scale.transpose(0, 2, 1, 3))
    if kind == "fp8_e4m3":
        return e4m3_value(a) * np.broadcast_to(np.asarray(scale, np.float64), (a.shape[2],))[:, None]
    if kind == "fp8_e5m2":
        return e5m2_value(a) * np.broadcast_to(np.asarray(scale, np.float64), (a.shape[2],))[:, None]
    if kind in ("int8", "int4"):
        q = a.astype(np.float64) if kind == "int8" else np.concatenate([a & 15, a >> 4], axis=-1).astype(np.float64)
        return q * par[..., :1].astype(np.float64) + par[..., 1:].astype(np.float64)
    if kind in ("q8_0", "q4_0"):
        nb = 34 if kind == "q8_0" else 18
        blk = a.reshape(a.shape[:3] + (-1, nb))
        d = np.ascontiguousarray(blk[..., :2]).view(np.float16).astype(np.float64)  # (..., nblocks, 1)
        if kind == "q8_0":
            q = blk[..., 2:].view(np.int8).astype(np.float64)
        else:
            qs = blk[..., 2:]
            q = np.concatenate([qs & 15, qs >> 4], axis=-1).astype(np.float64) - 8
        return (q * d).reshape(a.shape[:3] + (-1,))
    raise AssertionError(kind)


FORMAT_BYTES = {"fp8_e4m3": lambda D: D, "fp8_e5m2": lambda D: D, "int8": lambda D: D, "int4": lambda D: D // 2,
                "q8_0": lambda D: D // 32 * 34, "q4_0": lambda D: D // 32 * 18}


@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("kind,vkind", [("fp8_e4m3", "fp8_e4m3"), ("fp8_e5m2", "int8"), ("int8", "int8"),
                                        ("int4", "int4"), ("q4_0", "q4_0"), ("int4", "fp8_e4m3"),
                                        ("q8_0", "q4_0")])
def test_formats(layout, kind, vkind):
    """every format written by paged_append and read by paged_attention equals float64
    attention over the pages decoded here from the formats' definitions"""
    lens, ps, Hkv, H, D = [37, 0, 70], 16, 2, 4, 64
    r = np.random.default_rng(7)
    npages = [(n + ps - 1) // ps for n in lens]
    P = sum(npages) + 1
    shape = lambda nbytes: (P, ps, Hkv, nbytes) if layout == "NHD" else (P, Hkv, ps, nbytes)
    kp, vp = np.zeros(shape(FORMAT_BYTES[kind](D)), np.uint8), np.zeros(shape(FORMAT_BYTES[vkind](D)), np.uint8)
    scales = {"fp8_e4m3": np.array([0.01, 0.02], np.float32), "fp8_e5m2": 0.05}
    def scale_for(k):
        return np.full(shape(2), np.nan, np.float32) if k in ("int8", "int4") else scales.get(k)
    ksc, vsc = scale_for(kind), scale_for(vkind)
    if vkind == "fp8_e4m3":
        vsc = 0.004
    indptr = np.concatenate([[0], np.cumsum(npages)]).astype(np.int32)
    indices = r.permutation(P).astype(np.int32)[:indptr[-1]]
    last = np.array([n - (k - 1) * ps if k else 0 for n, k in zip(lens, npages)], np.int32)
    T = sum(lens)
    k, v = r.standard_normal((T, Hkv, D)).astype(np.float32), r.standard_normal((T, Hkv, D)).astype(np.float32)
    slots = np.array([int(indices[indptr[b] + j // ps]) * ps + j % ps for b, n in enumerate(lens) for j in range(n)])
    libattn.paged_append(k, v, kp, vp, slots, layout=layout, kv_dtype=kind, v_dtype=vkind, k_scale=ksc, v_scale=vsc)
    K, V = decode_rows(kind, kp, ksc, layout), decode_rows(vkind, vp, vsc, layout)  # (P, ps, Hkv, D)
    q = r.standard_normal((len(lens), H, D)).astype(np.float32)
    out, lse = libattn.paged_attention(q, kp, vp, indptr, indices, last, layout=layout, kv_dtype=kind, v_dtype=vkind,
                                       k_scale=ksc, v_scale=vsc, return_lse=True)
    at = 0
    for b, n in enumerate(lens):
        if n == 0:
            assert np.all(out[b] == 0) and np.all(lse[b] == -np.inf)
            continue
        pages = indices[indptr[b]:indptr[b + 1]]
        Kb = K[pages].reshape(-1, Hkv, D)[:n]  # (n, Hkv, D)
        Vb = V[pages].reshape(-1, Hkv, D)[:n]
        # the stored values are close to the rows given (the formats' bounds are test_formats.c's)
        rel = {"fp8_e4m3": 2.0 ** -4, "fp8_e5m2": 2.0 ** -3}.get(kind, 0.0)
        assert np.all(np.abs(Kb - k[at:at + n]) <= rel * np.abs(k[at:at + n]) + (0.6 if "4" in kind else 0.15))
        at += n
        for h in range(H):
            s = Kb[:, h // (H // Hkv)] @ q[b, h].astype(np.float64) / np.sqrt(D)
            w = np.exp(s - s.max())
            np.testing.assert_allclose(out[b, h], w @ Vb[:, h // (H // Hkv)] / w.sum(), rtol=1e-4, atol=2e-5)
            np.testing.assert_allclose(lse[b, h], s.max() + np.log(w.sum()), rtol=1e-5, atol=1e-5)


def test_format_cache():
    """KVCache in the formats: fp8 with per-head scales, int8 / int4 with their own pairs, q4_0;
    a paged cache forks and reads back what a contiguous one does"""
    r = np.random.default_rng(3)
    k, v = r.standard_normal((2, 2, 40, 64)).astype(np.float32), r.standard_normal((2, 2, 40, 64)).astype(np.float32)
    q = r.standard_normal((2, 4, 1, 64)).astype(np.float32)
    for dt, kw in (("fp8_e4m3", dict(k_scale=[0.01, 0.02], v_scale=0.01)), ("fp8_e5m2", {}), ("int8", {}),
                   ("int4", {}), ("q4_0", {})):
        a = libattn.KVCache(2, 2, 64, 64, dtype=dt, **kw)
        p = libattn.KVCache(2, 2, 64, 64, dtype=dt, page_size=16, **kw)
        a.append(k, v)
        p.append(k, v)
        oa, op = a.attend(q), p.attend(q)
        want = libattn.sdpa(q, k, v, causal="bottom-right")
        tol = 0.15 if dt in ("int4", "q4_0", "fp8_e5m2") else 0.03  # e5m2: 2 mantissa bits
        assert np.max(np.abs(oa - want)) < tol, dt
        np.testing.assert_allclose(op, oa, rtol=1e-5, atol=1e-6)
        p.fork(0, 1)  # sequence 1 becomes sequence 0: the same query gives sequence 0's answer
        q2 = q.copy()
        q2[1] = q[0]
        np.testing.assert_allclose(p.attend(q2)[1], oa[0], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError):
        libattn.KVCache(1, 1, 8, 32, dtype="int8", k_scale=0.5)  # a scale of the fp8 types only
    with pytest.raises((ValueError, libattn.LibattnError)):
        libattn.KVCache(1, 2, 8, 32, dtype="fp8_e4m3", k_scale=[1.0, -1.0])  # not > 0


def test_format_errors():
    kp = np.zeros((2, 4, 1, 32), np.uint8)
    ind, ip, last = np.array([0], np.int32), np.array([0, 1], np.int32), np.array([2], np.int32)
    q = np.zeros((1, 1, 32), np.float32)
    with pytest.raises(ValueError, match="pairs"):
        libattn.paged_attention(q, kp, kp, ip, ind, last, kv_dtype="int8")  # no (scale, zero) pairs
    with pytest.raises(ValueError, match="scale"):
        libattn.paged_attention(q, kp, kp, ip, ind, last, kv_dtype="fp8_e4m3", k_scale=[1.0, 2.0, 3.0])
    with pytest.raises((ValueError, libattn.LibattnError)):
        libattn.paged_attention(q, kp, kp, ip, ind, last, kv_dtype="fp8_e4m3", k_scale=0.0)
    with pytest.raises(ValueError, match="blocks"):
        libattn.paged_attention(q, kp[..., :30], kp[..., :30], ip, ind, last, kv_dtype="q4_0")
    with pytest.raises(ValueError, match="k_scale"):
        libattn.paged_attention(q, kp.view(np.float32), kp.view(np.float32), ip, ind, last, k_scale=1.0)
