"""libattn.sdpa / sdpa_backward / attention_weights against the PyTorch
goldens of tests/golden (sdpa_*.safetensors, float64 references)."""
import os

import numpy as np
import pytest

import libattn
from conftest import GOLDEN

RTOL, ATOL = 2e-4, 2e-5


def cases():
    out = []
    for line in open(os.path.join(GOLDEN, "sdpa_manifest.txt")):
        if line.startswith("#") or not line.strip():
            continue
        parts = line.split()
        name = parts[0].split("=")[1]
        opts, i = {}, 1
        while i < len(parts):
            opts[parts[i][2:]] = parts[i + 1]
            i += 2
        out.append((name, opts))
    return out


def kwargs(t, opts):
    kw = dict(causal=opts.get("causal", "none"))
    if "scale" in opts:
        kw["scale"] = float(opts["scale"])
    if "window-left" in opts:
        kw["window"] = (int(opts["window-left"]), int(opts["window-right"]))
    if "softcap" in opts:
        kw["softcap"] = float(opts["softcap"])
    for name in ("key_mask", "seqlens_k", "alibi_slopes"):
        if name in t:
            kw[name] = t[name]
    if t["q"].dtype == np.uint16:
        kw["qkv_dtype"] = "bfloat16"
    return kw


@pytest.mark.parametrize("name,opts", cases())
@pytest.mark.parametrize("impl", ["auto", "ref"])
def test_golden(name, opts, impl):
    t = libattn.load_safetensors(os.path.join(GOLDEN, name + ".safetensors"))
    kw = kwargs(t, opts)
    out, lse = libattn.sdpa(t["q"], t["k"], t["v"], return_lse=True, impl=impl, **kw)
    np.testing.assert_allclose(out, t["out"], rtol=RTOL, atol=ATOL)
    finite = np.isfinite(t["lse"])
    np.testing.assert_allclose(lse[finite], t["lse"][finite], rtol=RTOL, atol=ATOL)
    assert np.all(np.isneginf(lse[~finite]))
    dq, dk, dv = libattn.sdpa_backward(t["q"], t["k"], t["v"], t["grad_out"], impl=impl, **kw)
    for got, want in ((dq, t["dq"]), (dk, t["dk"]), (dv, t["dv"])):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_strided_views_match_contiguous():
    # a (B, S, H, D) buffer, as projections produce it, viewed as (B, H, S, D)
    buf = rand(2, 9, 4, 16)
    q = buf.transpose(0, 2, 1, 3)
    assert not q.flags.c_contiguous and q.strides[-1] == 4
    k, v = rand(2, 4, 9, 16, seed=1), rand(2, 4, 9, 16, seed=2)
    a = libattn.sdpa(q, k, v, causal="top-left")
    b = libattn.sdpa(np.ascontiguousarray(q), k, v, causal="top-left")
    np.testing.assert_array_equal(a, b)


def test_noncontiguous_last_dim_is_copied():
    q = rand(1, 2, 5, 16)[..., ::2]  # stride 2 in the last dimension
    out = libattn.sdpa(q, q, q)
    np.testing.assert_array_equal(out, libattn.sdpa(np.ascontiguousarray(q), np.ascontiguousarray(q),
                                                    np.ascontiguousarray(q)))


def test_attention_weights_rows():
    q, k = rand(2, 3, 7, 8), rand(2, 3, 7, 8, seed=1)
    mask = np.zeros((2, 7), bool)
    mask[1, :] = True  # sequence 1 sees nothing
    w, s = libattn.attention_weights(q, k, causal="top-left", key_mask=mask, return_scores=True)
    assert w.shape == (2, 3, 7, 7)
    np.testing.assert_allclose(w[0].sum(-1), 1.0, rtol=1e-5)
    assert np.all(w[1] == 0.0) and not np.isnan(w).any()
    assert np.all(np.isneginf(s[0][:, np.triu_indices(7, 1)[0], np.triu_indices(7, 1)[1]]))
    out = libattn.sdpa(q, k, k, causal="top-left", key_mask=mask)
    np.testing.assert_allclose(out[0], w[0] @ k[0], rtol=1e-5, atol=1e-6)
    assert np.all(out[1] == 0.0)


def test_float16_inputs_equal_float32_of_rounded_values():
    q, k, v = (rand(1, 2, 6, 8, seed=i).astype(np.float16) for i in range(3))
    a = libattn.sdpa(q, k, v)
    b = libattn.sdpa(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32))
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_kv_cache_matches_sdpa():
    B, Hq, Hkv, T, D = 2, 4, 2, 37, 16
    k, v = rand(B, Hkv, T, D, seed=1), rand(B, Hkv, T, D, seed=2)
    q = rand(B, Hq, 1, D, seed=3)
    for dtype, tol in (("f32", 1e-5), ("f16", 2e-3)):
        cache = libattn.KVCache(B, Hkv, 64, D, dtype=dtype, page_size=16)
        cache.append(k[:, :, :30], v[:, :, :30])
        cache.append(k[:, :, 30:], v[:, :, 30:])
        assert len(cache) == T and cache.length(1) == T
        got = cache.attend(q)
        want = libattn.sdpa(q, k, v, causal="bottom-right")
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
        cache.trim(0, 10)
        assert cache.length(0) == 10
        cache.close()
