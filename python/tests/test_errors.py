"""Refusals name the argument, the value given and what was expected: the
package's own checks and the library's line (attn_last_error) carried by
the exception, for the common mistakes."""
import numpy as np
import pytest

import libattn


def test_gqa_heads_shape_dtype():
    q, k = np.zeros((1, 6, 4, 8), np.float32), np.zeros((1, 4, 4, 8), np.float32)
    with pytest.raises(ValueError, match=r"Hkv = 4 kv heads: the 6 query heads must be a multiple of it"):
        libattn.sdpa(q, k, k)
    with pytest.raises(ValueError, match=r"q: expected 4 dimensions, got shape \(6, 4, 8\)"):
        libattn.sdpa(q[0], k, k)
    with pytest.raises(TypeError, match=r"q: dtype float64 is not supported"):
        libattn.sdpa(q.astype(np.float64), k, k)
    with pytest.raises(ValueError, match=r"k must be \(B=1, Hkv, Sk, D=8\), got \(1, 4, 4, 4\)"):
        libattn.sdpa(q, k[..., :4], k)
    with pytest.raises(ValueError, match=r"softcap = nan"):
        libattn.sdpa(k, k, k, softcap=float("nan"))


def test_pages():
    q = np.zeros((1, 1, 32), np.float32)
    strided = np.zeros((4, 2, 1, 64), np.float32)[..., ::2]
    with pytest.raises(ValueError, match=r"k_pages: the last dimension must be contiguous \(strides \(512, 256, 256, "
                                         r"8\) bytes for 4-byte items\)"):
        libattn.paged_attention(q, strided, strided, [0, 1], [0], [1])
    kp8 = np.zeros((4, 2, 1, 32), np.uint8)
    with pytest.raises(ValueError, match=r"k_scale\[0\] = -1: a finite scale > 0 expected"):
        libattn.paged_attention(q, kp8, kp8, [0, 1], [0], [1], kv_dtype="fp8_e4m3", k_scale=-1.0)
    pages = np.zeros((4, 2, 1, 32), np.float32)
    with pytest.raises(ValueError, match=r"kv_last_page_len\[0\] = 3: 1 .. page_size expected"):
        libattn.paged_attention(q, pages, pages, [0, 1], [0], [3])


def test_cache():
    with pytest.raises(ValueError, match=r"head_dim = 40: q4_0 rows hold whole blocks of 32 values"):
        libattn.KVCache(1, 1, 8, 40, dtype="q4_0")
    with pytest.raises(TypeError, match=r"dtype must be one of .*q4_0, got 'q5_0'"):
        libattn.KVCache(1, 1, 8, 40, dtype="q5_0")
    c = libattn.KVCache(1, 2, 8, 32)
    with pytest.raises(ValueError, match=r"n\[0\] = 9 tokens after 0: past the capacity of 8"):
        c.append(np.zeros((1, 2, 9, 32), np.float32), np.zeros((1, 2, 9, 32), np.float32))
    with pytest.raises(ValueError, match=r"kv_dtype must be one of"):
        libattn.math_rounds("q5_0")
    assert libattn.math_rounds("int8") in (True, False)


def test_success_says_nothing_more():
    """a refusal's line belongs to that call: the next success clears it"""
    k = np.zeros((1, 1, 4, 8), np.float32)
    with pytest.raises(ValueError):
        libattn.sdpa(k, k, k, softcap=float("nan"))
    libattn.sdpa(k, k, k)
    assert libattn.lib.attn_last_error() == b""
