"""Bad input raises ValueError (shapes, arguments) or TypeError (dtypes) with
the library's message; nothing crashes the interpreter."""
import os

import numpy as np
import pytest

import libattn


def f32(*shape):
    return np.ones(shape, np.float32)


@pytest.mark.parametrize("q,k,v,exc", [
    (None, f32(1, 1, 2, 4), f32(1, 1, 2, 4), TypeError),
    (f32(1, 1, 2, 4), None, f32(1, 1, 2, 4), TypeError),
    ("abc", f32(1, 1, 2, 4), f32(1, 1, 2, 4), TypeError),
    (np.ones((1, 1, 2, 4)), np.ones((1, 1, 2, 4)), np.ones((1, 1, 2, 4)), TypeError),  # float64
    (np.ones((1, 1, 2, 4), np.int32), f32(1, 1, 2, 4), f32(1, 1, 2, 4), TypeError),
    (f32(1, 1, 2, 4).astype(np.float16), f32(1, 1, 2, 4), f32(1, 1, 2, 4), TypeError),  # mixed
    (f32(1, 2, 4), f32(1, 2, 4), f32(1, 2, 4), ValueError),  # 3-D
    (f32(1, 1, 2, 4), f32(1, 1, 2, 5), f32(1, 1, 2, 4), ValueError),  # D differs
    (f32(1, 3, 2, 4), f32(1, 2, 2, 4), f32(1, 2, 2, 4), ValueError),  # H % Hkv != 0
    (f32(1, 1, 2, 4), f32(1, 1, 3, 4), f32(1, 1, 2, 4), ValueError),  # Sk differs
    (f32(1, 1, 2, 0), f32(1, 1, 2, 0), f32(1, 1, 2, 0), ValueError),  # D = 0
])
def test_sdpa_bad_inputs(q, k, v, exc):
    with pytest.raises(exc):
        libattn.sdpa(q, k, v)


def test_empty_batch_or_queries_give_empty_outputs():
    assert libattn.sdpa(f32(0, 1, 2, 4), f32(0, 1, 2, 4), f32(0, 1, 2, 4)).shape == (0, 1, 2, 4)
    assert libattn.sdpa(f32(1, 1, 0, 4), f32(1, 1, 2, 4), f32(1, 1, 2, 4)).shape == (1, 1, 0, 4)


def test_bad_options():
    q = f32(1, 2, 3, 4)
    for kw in (dict(causal="diagonal"), dict(window=3), dict(impl="gpu"), dict(key_mask=np.zeros((1, 2), bool)),
               dict(alibi_slopes=f32(3)), dict(seqlens_k=np.array([1, 2])), dict(seqlens_k=np.array([9])),
               dict(qkv_dtype="float8")):
        with pytest.raises(ValueError):
            libattn.sdpa(q, q, q, **kw)
    with pytest.raises(TypeError):
        libattn.sdpa(q, q, q, key_mask=np.zeros((1, 3), np.float32))
    with pytest.raises(TypeError):
        libattn.sdpa(q, q, q, qkv_dtype="bfloat16")  # needs uint16 bits


def test_message_is_the_librarys():
    with pytest.raises(ValueError, match="sdpa: "):
        libattn.sdpa(f32(1, 3, 2, 4), f32(1, 2, 2, 4), f32(1, 2, 2, 4))


def test_layer_errors():
    with pytest.raises(ValueError):
        libattn.Layer("transformer", {})
    with pytest.raises(ValueError, match="W_query"):  # the C library names the missing tensor
        libattn.Layer("sa_v1", {"W_key": f32(3, 2), "W_value": f32(3, 2)})
    layer = libattn.Layer("sa_v1", {"W_query": f32(3, 2), "W_key": f32(3, 2), "W_value": f32(3, 2)})
    with pytest.raises(ValueError):
        layer(f32(6, 4))  # width 4, weights expect 3
    with pytest.raises(TypeError):
        layer(None)
    with pytest.raises(TypeError):
        layer(np.ones((6, 3)))  # float64
    with pytest.raises(ValueError):
        layer(f32(0, 3))
    with pytest.raises(ValueError):
        layer(f32(6, 3), train=True)  # no seed
    assert layer(f32(6, 3)).shape == (6, 2)
    with pytest.raises(TypeError):
        libattn.Layer("sa_v1", {"W_query": np.array(["a"]), "W_key": f32(3, 2), "W_value": f32(3, 2)})
    with pytest.raises(TypeError):
        libattn.KVCache(1, 1, 8, 4, dtype="f64")
    with pytest.raises(ValueError):
        libattn.KVCache(1, 1, 8, 20, dtype="q8_0")  # head size not a multiple of 32


def test_unusable_isa_is_an_error_not_a_fallback():
    # ATTN_ISA is read once per process: a child process with an unusable setting
    import subprocess
    import sys
    code = ("import numpy as np, libattn\n"
            "q = np.ones((1, 1, 4, 8), np.float32)\n"
            "try:\n"
            "    libattn.sdpa(q, q, q)\n"
            "except libattn.LibattnError as e:\n"
            "    print('refused:', e)\n")
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(libattn.__file__)))
    # avx512 where this CPU lacks it (unsupported), else a name no build knows (invalid)
    with open("/proc/cpuinfo") as f:
        flags = set(next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), []))
    isa = "fastest" if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags else "avx512"
    env = dict(os.environ, ATTN_ISA=isa,
               PYTHONPATH=os.pathsep.join(p for p in (pkg, os.environ.get("PYTHONPATH")) if p))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert "refused:" in r.stdout and "ATTN_ISA=%s cannot be honoured" % isa in r.stdout, r.stdout + r.stderr


def test_release_cached_memory():
    q = np.random.default_rng(0).standard_normal((1, 2, 64, 16)).astype(np.float32)
    a = libattn.sdpa(q, q, q)
    libattn.release_cached_memory()
    b = libattn.sdpa(q, q, q)
    assert np.array_equal(a, b)
