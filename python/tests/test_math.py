"""Math modes from Python (docs/SEMANTICS.md, "Math modes"): math= on
sdpa, KVCache.attend and Layer, the PyTorch drop-in's choice by dtype and
set_math, and bad values. The arithmetic itself is checked path by path
in C (tests/test_math.c); here: the option reaches the library and does
what it says."""
import numpy as np
import pytest

import libattn

def differs(a, b, kv_dtype):
    """a mode that rounds changes the answer; a table without product kernels for kv_dtype runs it as strict"""
    return (not np.array_equal(a, b)) if libattn.math_rounds(kv_dtype) else np.array_equal(a, b)


def rng_qkv(B=2, H=4, Hkv=2, Sq=9, Sk=70, D=32, seed=0):
    r = np.random.default_rng(seed)
    return (r.standard_normal((B, H, Sq, D)).astype(np.float32), r.standard_normal((B, Hkv, Sk, D)).astype(np.float32),
            r.standard_normal((B, Hkv, Sk, D)).astype(np.float32))


def reference(q, k, v):
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    H, Hkv = q.shape[1], k.shape[1]
    k, v = np.repeat(k, H // Hkv, 1), np.repeat(v, H // Hkv, 1)
    s = np.einsum("bhid,bhjd->bhij", q, k) / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("impl", ["ref", "fast"])
def test_sdpa_modes(impl):
    q, k, v = (x.astype(np.float16) for x in rng_qkv())
    want = reference(q, k, v)
    strict = libattn.sdpa(q, k, v, impl=impl)
    data = libattn.sdpa(q, k, v, impl=impl, math="data")
    assert differs(strict, data, "f16")  # P is rounded to float16 where the table rounds
    assert np.abs(data - want).max() < 2e-3 and np.abs(strict - want).max() < 1e-5
    q32, k32, v32 = rng_qkv()
    np.testing.assert_array_equal(libattn.sdpa(q32, k32, v32, impl=impl, math="data"),
                                  libattn.sdpa(q32, k32, v32, impl=impl))  # float32 data: data is strict
    bf = libattn.sdpa(q32, k32, v32, impl=impl, math="bf16")
    assert np.abs(bf - reference(q32, k32, v32)).max() < 2e-2
    assert differs(bf, libattn.sdpa(q32, k32, v32, impl=impl), "f32")
    with pytest.raises(ValueError, match="math"):
        libattn.sdpa(q32, k32, v32, math="fp8")


@pytest.mark.parametrize("impl", ["ref", "fast"])
def test_backward_modes(impl):
    """the backward takes the mode: dO, P and dS rounded where the table rounds"""
    q, k, v = (x.astype(np.float16) for x in rng_qkv(Sq=20))
    dout = np.random.default_rng(1).standard_normal((2, 4, 20, 32)).astype(np.float32)
    strict = libattn.sdpa_backward(q, k, v, dout, impl=impl)
    data = libattn.sdpa_backward(q, k, v, dout, impl=impl, math="data")
    for s, d in zip(strict, data):
        assert differs(s, d, "f16")
        assert np.abs(s - d).max() < 5e-3 * max(1.0, np.abs(s).max())
    q32, k32, v32 = rng_qkv(Sq=20)
    for s, d in zip(libattn.sdpa_backward(q32, k32, v32, dout, impl=impl),
                    libattn.sdpa_backward(q32, k32, v32, dout, impl=impl, math="data")):
        np.testing.assert_array_equal(s, d)  # float32 data: data is strict
    for s, d in zip(libattn.sdpa_backward(q32, k32, v32, dout, impl=impl),
                    libattn.sdpa_backward(q32, k32, v32, dout, impl=impl, math="bf16")):
        assert differs(s, d, "f32") and np.abs(s - d).max() < 5e-2 * max(1.0, np.abs(s).max())


@pytest.mark.parametrize("dtype", ["f16", "bf16", "q8_0"])
def test_cache_modes(dtype):
    q, k, v = rng_qkv(Sq=1, Sk=96, D=64)
    cache = libattn.KVCache(2, 2, 128, 64, dtype=dtype)
    cache.append(k, v)
    strict, data = cache.attend(q), cache.attend(q, math="data")
    assert differs(strict, data, dtype)
    assert np.abs(data - strict).max() < 2e-2


def test_layer_modes():
    r = np.random.default_rng(3)
    sd = {"W_query.weight": r.standard_normal((8, 6)).astype(np.float32),
          "W_key.weight": r.standard_normal((8, 6)).astype(np.float32),
          "W_value.weight": r.standard_normal((8, 6)).astype(np.float32)}
    x = r.standard_normal((2, 5, 6)).astype(np.float32)
    strict = libattn.Layer("sa_v2", sd)(x)
    np.testing.assert_array_equal(libattn.Layer("sa_v2", sd, math="data")(x), strict)
    bf = libattn.Layer("sa_v2", sd, math="bf16")(x)
    assert np.abs(bf - strict).max() < 5e-2 and differs(bf, strict, "f32")
    with pytest.raises(ValueError):
        libattn.Layer("sa_v2", sd, math="int4")


def test_math_products_named():
    assert libattn.math_products() and libattn.math_rounds("q8_0") in (True, False)
    with pytest.raises(ValueError):
        libattn.math_rounds("fp8")


def test_torch_drop_in_modes():
    torch = pytest.importorskip("torch")
    import libattn.torch as lat
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 4, 33, 64, generator=g).to(torch.bfloat16) for _ in range(3))
    as_np = lambda t: t.view(torch.int16).numpy().view(np.uint16)
    to_bf = lambda a: torch.from_numpy(a).to(torch.bfloat16)
    want_data = to_bf(libattn.sdpa(as_np(q), as_np(k), as_np(v), qkv_dtype="bfloat16", math="data"))
    want_strict = to_bf(libattn.sdpa(as_np(q), as_np(k), as_np(v), qkv_dtype="bfloat16"))
    assert torch.equal(want_data, want_strict) != libattn.math_rounds("bf16")  # apart where the table rounds
    assert torch.equal(lat.scaled_dot_product_attention(q, k, v), want_data)  # bf16 tensors: data, as PyTorch
    prev = lat.set_math("strict")
    try:
        assert torch.equal(lat.scaled_dot_product_attention(q, k, v), want_strict)
    finally:
        lat.set_math(prev)
    assert torch.equal(lat.sdpa(q, k, v, math="strict"), want_strict)
    q32, k32, v32 = (t.float() for t in (q, k, v))  # float32: strict by default
    assert torch.equal(lat.scaled_dot_product_attention(q32, k32, v32),
                       torch.from_numpy(libattn.sdpa(q32.numpy(), k32.numpy(), v32.numpy())))
    out = lat.scaled_dot_product_attention(q, k, v, dropout_p=0.5)  # 16-bit with dropout: strict, runs
    assert out.shape == q.shape
    with pytest.raises(ValueError):
        lat.set_math("fp8")
