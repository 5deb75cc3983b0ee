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
    with pytest.raises(ValueError):  # E_INVALID: the caller's arrays
        libattn.paged_attention(q, kp, vp, indptr, bad, last)
    with pytest.raises(ValueError):  # E_INVALID: the caller's arrays
        libattn.paged_attention(q, kp, vp, np.array([0, 3, 2], np.int32), indices, last)
    with pytest.raises(ValueError):  # E_INVALID: the caller's arrays
        libattn.paged_attention(q, kp, vp, indptr, indices, np.array([0, 3], np.int32))
    with pytest.raises(ValueError):
        libattn.paged_attention(q, kp, vp, indptr, indices, last, layout="NDH")
    with pytest.raises(ValueError):
        libattn.paged_attention(q, kp, vp, indptr, indices, last, kv_dtype="fp8_e4m3")
    before = kp.copy()
    with pytest.raises(ValueError):  # E_INVALID: the caller's arrays
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
