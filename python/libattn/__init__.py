"""libattn from Python: the attention layers of libattn on numpy arrays.

    import numpy as np, libattn
    q = k = v = np.random.rand(1, 2, 6, 4).astype(np.float32)   # (B, H, S, D)
    out = libattn.sdpa(q, k, v, causal="top-left")

Everything runs in the C library (build/libattn.so, see _capi.py for how it
is found); this package only describes arrays to it. Errors raise ValueError
(shapes, arguments), TypeError (dtypes), MemoryError, or LibattnError for the
rest, with the library's message. `libattn.torch` adds a differentiable
`sdpa` for PyTorch tensors.
"""
import ctypes
import os

import numpy as np

from . import _capi
from ._capi import lib
from .safetensors import load_safetensors, save_safetensors, safetensors_bytes

__all__ = ["sdpa", "sdpa_backward", "attention_weights", "Layer", "KVCache", "LibattnError", "version",
           "math_products", "math_rounds", "kernel_name", "release_cached_memory", "load_safetensors",
           "save_safetensors", "LAYER_KINDS", "KV_DTYPES", "paged_attention", "paged_append", "merge_states",
           "flex_attention", "create_block_mask", "BlockMask", "and_masks", "or_masks", "noop_mask", "create_mask"]

LAYER_KINDS = ("simple", "sa_v1", "sa_v2", "causal", "mha_wrapper", "mha", "gpt_mha", "single_head", "fused_mha",
               "bidirectional", "causal_mha", "cross")


class LibattnError(RuntimeError):
    """A libattn status other than the argument, shape, dtype and memory errors."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def version():
    return lib.attn_version().decode()


# the storage types of a KV cache and of pages
KV_DTYPES = ("f32", "f16", "bf16", "q8_0", "fp8_e4m3", "fp8_e5m2", "int8", "int4", "q4_0")


def kernel_name():
    """The SIMD kernels the fused path runs on this CPU ("avx2" or "generic")."""
    return lib.attn_kernel_name().decode()


def math_products():
    """How those kernels carry the products of math='data' and math='bf16'."""
    return lib.attn_math_products().decode()


def math_rounds(kv_dtype):
    """True when those kernels compute math='data' / 'bf16' rounded products
    for K and V stored as kv_dtype (one of KV_DTYPES: 'f32', 'f16', 'bf16',
    'q8_0', 'fp8_e4m3', 'fp8_e5m2', 'int8', 'int4', 'q4_0'; for 'f32' only
    math='bf16' rounds, 'data' leaves it as it is; over the fp8 types both
    modes round q and P to bf16);
    False: the modes run as 'strict' for that type."""
    if kv_dtype not in KV_DTYPES:
        raise ValueError("kv_dtype must be one of %s, got %r" % (", ".join(repr(t) for t in KV_DTYPES), kv_dtype))
    return bool(lib.attn_math_rounds(_capi.DTYPE[kv_dtype]))


def release_cached_memory():
    """Return the fused kernels' cached scratch buffers to the system (they are
    kept for the next call, up to ATTN_CACHE_MB megabytes; docs/API.md)."""
    lib.attn_release_cached_memory()


def _check(st, what, detail=None):
    if st == _capi.OK:
        return
    ks = lib.attn_kernel_status()
    if ks != _capi.OK and st == ks:  # ATTN_ISA asks for kernels this CPU or build cannot run
        raise LibattnError(st, "%s: ATTN_ISA=%s cannot be honoured: %s (kernels here: %s)" % (
            what, os.environ.get("ATTN_ISA"), lib.attn_status_string(st).decode(), kernel_name()))
    msg = "%s: %s" % (what, lib.attn_status_string(st).decode())
    said = lib.attn_last_error().decode()  # the library's own line: the argument, its value, what it expected
    if said:
        msg += ": " + said
    if detail:
        msg += " (%s)" % detail
    if st in (_capi.E_SHAPE, _capi.E_INVALID, _capi.E_CONTEXT, _capi.E_OVERFLOW, _capi.E_NOT_FOUND,
              _capi.E_FORMAT, _capi.E_BUFFER):  # the caller's arrays, options or state_dict
        raise ValueError(msg)
    if st == _capi.E_IO:
        raise OSError(msg)
    if st == _capi.E_DTYPE:
        raise TypeError(msg)
    if st == _capi.E_NOMEM:
        raise MemoryError(msg)
    raise LibattnError(st, msg)


# ---- arrays ------------------------------------------------------------------

def _array(x, name, ndims, dtypes=(np.float32,), allow_none=False):
    """x as an ndarray of one of `dtypes` with ndim in `ndims`, or None."""
    if x is None:
        if allow_none:
            return None
        raise TypeError("%s: expected an array, got None" % name)
    if not isinstance(x, np.ndarray):
        if hasattr(x, "__array__") or isinstance(x, (list, tuple)):
            x = np.asarray(x)
        else:
            raise TypeError("%s: expected an array, got %s" % (name, type(x).__name__))
    if x.dtype not in [np.dtype(d) for d in dtypes]:
        raise TypeError("%s: dtype %s is not supported here (use %s)" %
                        (name, x.dtype, " or ".join(np.dtype(d).name for d in dtypes)))
    if x.ndim not in ndims:
        raise ValueError("%s: expected %s dimensions, got shape %s" %
                         (name, " or ".join(str(n) for n in ndims), x.shape))
    return x


def _strided(a):
    """a, or a copy, whose last dimension is contiguous and whose strides are
    whole, non-negative elements: what an attn_view can describe."""
    it = a.itemsize
    ok = a.ndim == 0 or (a.shape[-1] <= 1 or a.strides[-1] == it)
    ok = ok and all(s >= 0 and s % it == 0 for s in a.strides) and a.flags.aligned
    return a if ok else np.ascontiguousarray(a)


def _view(a):
    """attn_view of a 4-D array (B, H, S, D), its last dimension contiguous."""
    it = a.itemsize
    return _capi.View(a.ctypes.data, a.strides[0] // it, a.strides[1] // it, a.strides[2] // it)


def _fptr(a):
    return None if a is None else a.ctypes.data_as(_capi.c_float_p)


def _u8ptr(a):
    return None if a is None else a.ctypes.data_as(_capi.c_u8_p)


def _qkv_dtype(arrays, qkv_dtype):
    dts = {a.dtype for a in arrays}
    if len(dts) != 1:
        raise TypeError("q, k and v must have one dtype, got %s" % ", ".join(sorted(str(d) for d in dts)))
    dt = dts.pop()
    if qkv_dtype == "bfloat16":
        if dt != np.uint16:
            raise TypeError("qkv_dtype='bfloat16' takes the raw bfloat16 bits as uint16 arrays, got %s" % dt)
        return _capi.DTYPE["bf16"]
    if qkv_dtype is not None:
        raise ValueError("qkv_dtype must be None or 'bfloat16', got %r" % (qkv_dtype,))
    if dt == np.float32:
        return _capi.DTYPE["f32"]
    if dt == np.float16:
        return _capi.DTYPE["f16"]
    raise TypeError("q, k, v: dtype %s is not supported (float32, float16, or uint16 bits with "
                    "qkv_dtype='bfloat16')" % dt)


def _causal(c):
    if c is True:
        return _capi.CAUSAL["top-left"]  # PyTorch's is_causal
    if c is False or c is None:
        return _capi.CAUSAL["none"]
    if c not in _capi.CAUSAL:
        raise ValueError("causal must be 'none', 'top-left' or 'bottom-right', got %r" % (c,))
    return _capi.CAUSAL[c]


def _dense(d, x, name, shape4, kept):
    """A dense mask (bool) or bias (float32) broadcast to shape4 = (B, H, Sq, Sk)
    through zero strides, as PyTorch broadcasts attn_mask. shape4 may also be
    a list of such shapes, tried in order (a KV cache takes the longest
    sequence's width and the capacity's)."""
    mask = name == "attn_mask"
    shapes = shape4 if isinstance(shape4, list) else [shape4]
    a = np.asarray(x)
    if mask and a.dtype != np.bool_:
        raise ValueError("attn_mask must be bool (True = takes part); a float mask is attn_bias")
    a = np.ascontiguousarray(a, dtype=np.uint8 if mask else np.float32)
    if a.ndim > 4:
        raise ValueError("%s must have at most 4 dims, got %d" % (name, a.ndim))
    for shape in shapes:
        try:
            a = np.broadcast_to(a, shape)
            break
        except ValueError:
            pass
    else:
        want = " or ".join(str(tuple(t)) for t in shapes)
        raise ValueError("%s of shape %s does not broadcast to (B, H, Sq, Sk) = %s" % (name, np.shape(x), want))
    kept.append(a)
    setattr(d, name, a.ctypes.data_as(_capi.c_u8_p if mask else ctypes.POINTER(ctypes.c_float)))
    strides = getattr(d, name + "_strides")
    for t in range(4):
        strides[t] = a.strides[t] // a.itemsize


def _options(d, B, H, Sk, causal, scale, key_mask, seqlens_k, window, softcap, alibi_slopes, sinks=None,
             attention_chunk=0, attn_mask=None, attn_bias=None, shape4=None, math="strict"):
    """The shared options of a descriptor (sdpa, attention_weights, KVCache.attend).
    Sk: the key_mask's width (None: any width, e.g. a cache's capacity).
    Returns the arrays d points into (keep them alive during the call)."""
    kept = []
    if math not in _capi.MATH:
        raise ValueError("math must be 'strict', 'data' or 'bf16', got %r" % (math,))
    d.math = _capi.MATH[math]
    d.causal = _causal(causal)
    if scale is not None:
        d.scale = float(scale)
    if key_mask is not None:
        m = _array(key_mask, "key_mask", (2,), (np.bool_, np.uint8))
        if m.shape[0] != B or (Sk is not None and m.shape[1] != Sk):
            want = "(%d, %s)" % (B, Sk if Sk is not None else "T")
            raise ValueError("key_mask must be (B, Sk) = %s, got %s" % (want, m.shape))
        m = np.ascontiguousarray(m.astype(np.uint8, copy=False))
        kept.append(m)
        d.key_mask, d.key_mask_stride_b, d.key_mask_polarity = _u8ptr(m), m.shape[1], _capi.MASK_TRUE_MEANS_MASKED
    if seqlens_k is not None:
        sl = _array(seqlens_k, "seqlens_k", (1,), (np.int32, np.int64))
        if sl.shape != (B,):
            raise ValueError("seqlens_k must be (B,) = (%d,), got %s" % (B, sl.shape))
        sl = np.ascontiguousarray(sl)
        kept.append(sl)
        d.seqlens_k = sl.ctypes.data
        d.seqlens_k_dtype = _capi.DTYPE["i32"] if sl.dtype == np.int32 else _capi.DTYPE["i64"]
    try:
        left, right = (int(w) for w in window)
    except (TypeError, ValueError):
        raise ValueError("window must be a pair (left, right) of ints, -1 = unbounded; got %r" % (window,))
    if left >= 0 or right >= 0:
        d.window, d.window_left, d.window_right = 1, left, right
    d.softcap = float(softcap)
    for name, x in (("alibi_slopes", alibi_slopes), ("sinks", sinks)):  # per-head vectors
        if x is None:
            continue
        a = _array(x, name, (1,))
        if a.shape != (H,):
            raise ValueError("%s must be (H,) = (%d,), got %s" % (name, H, a.shape))
        a = np.ascontiguousarray(a)
        kept.append(a)
        setattr(d, name, _fptr(a))
    d.attention_chunk = int(attention_chunk)
    for name, x in (("attn_mask", attn_mask), ("attn_bias", attn_bias)):
        if x is not None:
            _dense(d, x, name, shape4, kept)
    return kept


class _Call:
    """A filled attn_sdpa_desc and the arrays it points into (kept alive)."""

    def __init__(self, q, k, v, causal, scale, key_mask, seqlens_k, window, softcap, alibi_slopes, impl,
                 qkv_dtype, with_v=True, sinks=None, attention_chunk=0, attn_mask=None, attn_bias=None, cu=None,
                 dropout_p=0.0, dropout_seed=None, math="strict"):
        self.q = _strided(_array(q, "q", (4,), (np.float32, np.float16, np.uint16)))
        self.k = _strided(_array(k, "k", (4,), (np.float32, np.float16, np.uint16)))
        self.v = _strided(_array(v, "v", (4,), (np.float32, np.float16, np.uint16))) if with_v else None
        arrays = [self.q, self.k] + ([self.v] if with_v else [])
        dt = _qkv_dtype(arrays, qkv_dtype)
        B, H, Sq, D = self.q.shape
        Bk, Hkv, Sk, Dk = self.k.shape
        Dv = self.v.shape[3] if with_v else D
        if Bk != B or Dk != D:
            raise ValueError("k must be (B=%d, Hkv, Sk, D=%d), got %s" % (B, D, self.k.shape))
        if with_v and self.v.shape[:3] != self.k.shape[:3]:
            raise ValueError("v must be (B, Hkv, Sk, Dv) = %s + (Dv,), got %s" % (self.k.shape[:3], self.v.shape))
        d = _capi.SdpaDesc()
        lib.attn_sdpa_desc_init(ctypes.byref(d), B, H, Sq, Sk, D, Dv)
        d.Hkv = Hkv
        d.qkv_dtype = dt
        if impl not in _capi.IMPL:
            raise ValueError("impl must be 'auto', 'ref' or 'fast', got %r" % (impl,))
        d.impl = _capi.IMPL[impl]
        self.kept = _options(d, B, H, Sk, causal, scale, key_mask, seqlens_k, window, softcap, alibi_slopes, sinks,
                             attention_chunk, attn_mask, attn_bias, (B, H, Sq, Sk), math)
        if cu is not None:  # packed sequences: (nseq + 1) int32 offsets of the queries and the keys
            cq, ck = (np.ascontiguousarray(np.asarray(x), dtype=np.int32) for x in cu)
            if cq.ndim != 1 or cq.shape != ck.shape or cq.size < 2:
                raise ValueError("cu_seqlens_q and cu_seqlens_k must be (nseq + 1,) each, got %s and %s" %
                                 (cq.shape, ck.shape))
            self.kept += [cq, ck]
            d.cu_seqlens_q = cq.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
            d.cu_seqlens_k = ck.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
            d.nseq = cq.size - 1
        self.drop = self._dropout(d, dropout_p, dropout_seed, B * H * Sq * Sk)
        self.desc, self.shape = d, (B, H, Sq, Sk, D, Dv)

    @staticmethod
    def _dropout(d, p, seed, n):
        """Inverted dropout on the attention weights from libattn's generator
        seeded with seed (torch.manual_seed's rule, the MKL build's stream:
        keep decisions regenerated, never stored), into d."""
        p = float(p)
        if not 0.0 <= p <= 1.0:
            raise ValueError("dropout_p must be in [0, 1], got %r" % (p,))
        if p == 0.0:
            return None
        if seed is None:
            raise ValueError("dropout_p > 0 needs dropout_seed=N (pass the same N to the backward)")
        gen, drop = _capi.Generator(), _capi.Dropout()
        lib.attn_generator_seed(ctypes.byref(gen), int(seed))
        _check(lib.attn_dropout_begin(ctypes.byref(gen), p, n, ctypes.byref(drop)), "dropout")
        d.dropout = ctypes.pointer(drop)
        return drop

    def __del__(self):
        if getattr(self, "drop", None) is not None:
            lib.attn_dropout_end(ctypes.byref(self.drop))
            self.drop = None


def sdpa(q, k, v, *, causal="none", scale=None, key_mask=None, seqlens_k=None, window=(-1, -1), softcap=0.0,
         alibi_slopes=None, return_lse=False, impl="auto", qkv_dtype=None, sinks=None, attention_chunk=0,
         attn_mask=None, attn_bias=None, dropout_p=0.0, dropout_seed=None, math="strict"):
    """Scaled dot-product attention, out = softmax(mask(scale * q k^T)) v.

    q (B, H, Sq, D), k (B, Hkv, Sk, D), v (B, Hkv, Sk, Dv) with H a multiple
    of Hkv (grouped-query attention), float32 or float16 (or bfloat16 bits as
    uint16 with qkv_dtype='bfloat16'), any strides with a contiguous last
    dimension (a (B, S, H, D) buffer transposed to (B, H, S, D) is used in
    place; other layouts are copied). causal: 'none', 'top-left' (PyTorch's
    is_causal) or 'bottom-right' (FlashAttention, KV caches). key_mask (B, Sk)
    bool, True = masked. seqlens_k (B,) int: keys that exist per sequence.
    window (left, right): sliding window, -1 = unbounded. softcap > 0: Gemma
    2's tanh capping. alibi_slopes (H,). sinks (H,): attention sinks, one
    logit per head in every row's softmax denominator, with no value.
    attention_chunk C > 0: a query sees only keys in its own chunk of C
    positions (Llama 4). attn_mask (bool, True = takes part) and attn_bias
    (float, added to the scores; -inf hides the key): any shape that
    broadcasts to (B, H, Sq, Sk), as PyTorch's attn_mask. Rows that see no
    key give zeros. dropout_p > 0: inverted dropout on the attention
    weights (out = (dropout(P) v, the softmax normalized before it, as
    torch), keep decisions drawn from libattn's generator seeded with
    dropout_seed (give sdpa_backward the same p and seed). math: the
    products' arithmetic, 'strict' (float32 products of the stored values),
    'data' (operands in the data's 16-bit type, float32 accumulation) or
    'bf16' (float32 data rounded to bf16 too); docs/SEMANTICS.md.
    Returns out (B, H, Sq, Dv) float32, and lse (B, H, Sq) if return_lse.
    """
    c = _Call(q, k, v, causal, scale, key_mask, seqlens_k, window, softcap, alibi_slopes, impl, qkv_dtype,
              sinks=sinks, attention_chunk=attention_chunk, attn_mask=attn_mask, attn_bias=attn_bias,
              dropout_p=dropout_p, dropout_seed=dropout_seed, math=math)
    B, H, Sq, Sk, D, Dv = c.shape
    out = np.empty((B, H, Sq, Dv), np.float32)
    lse = np.empty((B, H, Sq), np.float32) if return_lse else None
    _check(lib.attn_sdpa_forward(ctypes.byref(c.desc), _view(c.q), _view(c.k), _view(c.v), _view(out), _fptr(lse)),
           "sdpa")
    return (out, lse) if return_lse else out


def sdpa_backward(q, k, v, dout, *, causal="none", scale=None, key_mask=None, seqlens_k=None, window=(-1, -1),
                  softcap=0.0, alibi_slopes=None, impl="auto", qkv_dtype=None, sinks=None, attention_chunk=0,
                  attn_mask=None, attn_bias=None, dropout_p=0.0, dropout_seed=None, math="strict"):
    """Gradients (dq, dk, dv), float32, of sum(sdpa(q, k, v, ...) * dout);
    then dsinks (H,) when sinks are given and dbias (attn_bias's shape) when
    attn_bias is given, in that order. With dropout, the forward's
    dropout_p and dropout_seed (the same keep decisions). math as sdpa's:
    a mode rounds the backward's operands too (dO, P and dS to the data's
    type, where the kernels round; docs/SEMANTICS.md)."""
    c = _Call(q, k, v, causal, scale, key_mask, seqlens_k, window, softcap, alibi_slopes, impl, qkv_dtype,
              sinks=sinks, attention_chunk=attention_chunk, attn_mask=attn_mask, attn_bias=attn_bias,
              dropout_p=dropout_p, dropout_seed=dropout_seed, math=math)
    B, H, Sq, Sk, D, Dv = c.shape
    go = _strided(_array(dout, "dout", (4,)))
    if go.shape != (B, H, Sq, Dv):
        raise ValueError("dout must be (B, H, Sq, Dv) = %s, got %s" % ((B, H, Sq, Dv), go.shape))
    dq = np.empty((B, H, Sq, D), np.float32)
    dk = np.empty(c.k.shape, np.float32)
    dv = np.empty(c.v.shape, np.float32)
    dsinks = np.empty((H,), np.float32) if sinks is not None else None
    if dsinks is not None:
        c.desc.dsinks = _fptr(dsinks)
    dbias = None
    if attn_bias is not None:  # the bias's own shape (4-D, size-1 dims broadcast), compact as _dense read it
        shape = np.shape(attn_bias)
        dbias = np.empty((1,) * (4 - len(shape)) + tuple(shape), np.float32)
        c.desc.dbias = _fptr(dbias)
    empty = _capi.View()
    _check(lib.attn_sdpa_backward(ctypes.byref(c.desc), _view(c.q), _view(c.k), _view(c.v), empty, _view(go), None,
                                  _view(dq), _view(dk), _view(dv)), "sdpa backward")
    extra = tuple(x for x in (dsinks, None if dbias is None else dbias.reshape(np.shape(attn_bias)))
                  if x is not None)
    return (dq, dk, dv) + extra


def _packed(x, name):
    """A (T, H, D) array as the (1, H, T, D) view the library reads (no copy)."""
    a = _array(x, name, (3,), (np.float32, np.float16, np.uint16))
    return a[None].transpose(0, 2, 1, 3)


def sdpa_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, *, causal="none", scale=None, window=(-1, -1), softcap=0.0,
                sinks=None, attention_chunk=0, return_lse=False, impl="auto", qkv_dtype=None):
    """Packed variable-length batches (FlashAttention's varlen): q (Tq, H, D),
    k (Tk, Hkv, D), v (Tk, Hkv, Dv) hold the sequences back to back;
    sequence s is query rows cu_seqlens_q[s]:cu_seqlens_q[s+1] against keys
    cu_seqlens_k[s]:cu_seqlens_k[s+1], its own problem (causal alignment,
    window and chunks per sequence). Returns out (Tq, H, Dv) (and lse (H, Tq))."""
    c = _Call(_packed(q, "q"), _packed(k, "k"), _packed(v, "v"), causal, scale, None, None, window, softcap, None,
              impl, qkv_dtype, sinks=sinks, attention_chunk=attention_chunk, cu=(cu_seqlens_q, cu_seqlens_k))
    B, H, Sq, Sk, D, Dv = c.shape
    out = np.empty((Sq, H, Dv), np.float32)
    lse = np.empty((H, Sq), np.float32) if return_lse else None
    _check(lib.attn_sdpa_forward(ctypes.byref(c.desc), _view(c.q), _view(c.k), _view(c.v),
                                 _view(out[None].transpose(0, 2, 1, 3)), _fptr(lse)), "sdpa_varlen")
    return (out, lse) if return_lse else out


def sdpa_varlen_backward(q, k, v, dout, cu_seqlens_q, cu_seqlens_k, *, causal="none", scale=None, window=(-1, -1),
                         softcap=0.0, sinks=None, attention_chunk=0, impl="auto", qkv_dtype=None):
    """Gradients (dq, dk, dv) of sum(sdpa_varlen(...) * dout) in the packed
    layouts (plus dsinks with sinks)."""
    c = _Call(_packed(q, "q"), _packed(k, "k"), _packed(v, "v"), causal, scale, None, None, window, softcap, None,
              impl, qkv_dtype, sinks=sinks, attention_chunk=attention_chunk, cu=(cu_seqlens_q, cu_seqlens_k))
    B, H, Sq, Sk, D, Dv = c.shape
    go = _array(dout, "dout", (3,))
    if go.shape != (Sq, H, Dv):
        raise ValueError("dout must be (Tq, H, Dv) = %s, got %s" % ((Sq, H, Dv), go.shape))
    go = np.ascontiguousarray(go)[None].transpose(0, 2, 1, 3)
    Hkv = c.k.shape[1]
    dq, dk, dv = (np.empty(shape, np.float32) for shape in ((Sq, H, D), (Sk, Hkv, D), (Sk, Hkv, Dv)))
    dsinks = np.empty((H,), np.float32) if sinks is not None else None
    if dsinks is not None:
        c.desc.dsinks = _fptr(dsinks)
    t = lambda a: _view(a[None].transpose(0, 2, 1, 3))  # noqa: E731
    _check(lib.attn_sdpa_backward(ctypes.byref(c.desc), _view(c.q), _view(c.k), _view(c.v), _capi.View(), _view(go),
                                  None, t(dq), t(dk), t(dv)), "sdpa_varlen backward")
    return (dq, dk, dv) if dsinks is None else (dq, dk, dv, dsinks)


def attention_weights(q, k, *, causal="none", scale=None, key_mask=None, seqlens_k=None, window=(-1, -1),
                      softcap=0.0, alibi_slopes=None, qkv_dtype=None, return_scores=False, sinks=None,
                      attention_chunk=0, attn_mask=None, attn_bias=None):
    """The attention matrix softmax(mask(scale * q k^T)), (B, H, Sq, Sk), for
    pictures (e.g. matplotlib's imshow(w[0, 0])). Same arguments as sdpa.
    With return_scores also the scores, -inf where a key is not visible."""
    c = _Call(q, k, None, causal, scale, key_mask, seqlens_k, window, softcap, alibi_slopes, "ref", qkv_dtype,
              with_v=False, sinks=sinks, attention_chunk=attention_chunk, attn_mask=attn_mask, attn_bias=attn_bias)
    B, H, Sq, Sk, D, Dv = c.shape
    w = np.empty((B, H, Sq, Sk), np.float32)
    s = np.empty((B, H, Sq, Sk), np.float32) if return_scores else None
    _check(lib.attn_sdpa_weights(ctypes.byref(c.desc), _view(c.q), _view(c.k), _fptr(s), _fptr(w)),
           "attention_weights")
    return (w, s) if return_scores else w


# ---- caller-owned pages (serving engines) -----------------------------------

_PAGE_TYPES = {  # kv_dtype: (array dtype, attn_dtype name, (values, array elements) per block of a row)
    "f32": (np.float32, "f32", (1, 1)), "float32": (np.float32, "f32", (1, 1)), "f16": (np.float16, "f16", (1, 1)),
    "float16": (np.float16, "f16", (1, 1)), "bf16": (np.uint16, "bf16", (1, 1)),
    "bfloat16": (np.uint16, "bf16", (1, 1)), "q8_0": (np.uint8, "q8_0", (32, 34)),
    "fp8_e4m3": (np.uint8, "fp8_e4m3", (1, 1)), "fp8_e5m2": (np.uint8, "fp8_e5m2", (1, 1)),
    "int8": (np.uint8, "int8", (1, 1)), "int4": (np.uint8, "int4", (2, 1)), "q4_0": (np.uint8, "q4_0", (32, 18)),
}
_SCALED = ("fp8_e4m3", "fp8_e5m2")  # a float scale per tensor or kv head
_ROWPAR = ("int8", "int4")  # (scale, zero) per token and kv head


def _page_kind(pages, kv_dtype, name):
    """the attn_dtype name of a page array"""
    if kv_dtype is None:
        kind = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16"}.get(pages.dtype)
        if kind is None:
            raise TypeError("%s: dtype %s needs kv_dtype ('bf16' for uint16 bits; for uint8: 'q8_0', 'fp8_e4m3', "
                            "'fp8_e5m2', 'int8', 'int4', 'q4_0')" % (name, pages.dtype))
        return kind
    if kv_dtype not in _PAGE_TYPES:
        raise ValueError("kv_dtype %r is not a page type (f32, f16, bf16, q8_0, fp8_e4m3, fp8_e5m2, int8, int4, "
                         "q4_0)" % (kv_dtype,))
    want, kind, _ = _PAGE_TYPES[kv_dtype]
    if pages.dtype != np.dtype(want):
        raise TypeError("%s: kv_dtype=%r takes %s arrays, got %s" % (name, kv_dtype, np.dtype(want).name, pages.dtype))
    return kind


def _elems(n, kind, what):
    """a count of array elements of a row's last dim as row values (q8_0: 34 bytes per 32, int4: 2 per byte)"""
    per, size = _PAGE_TYPES[kind][2]
    if n % size:
        raise ValueError("%s pages: %s must be whole %d-byte blocks, got %d" % (kind, what, size, n))
    return n // size * per


def _scale(sc, kind, Hkv, name, layout, pshape, kept, writable):
    """(pointer, length, pair strides) of a page array's scale: fp8's float or
    (1,) / (Hkv,) array; int8 / int4's float32 (scale, zero) pairs shaped as
    the pages with a last dimension of 2"""
    if kind in _SCALED:
        if sc is None:
            return None, 0, None
        a = np.ascontiguousarray(np.atleast_1d(np.asarray(sc, np.float32)))
        if a.ndim != 1 or a.shape[0] not in (1, Hkv):
            raise ValueError("%s: fp8 takes one scale or one per kv head (%d), got shape %s" % (name, Hkv, a.shape))
        kept.append(a)
        return a.ctypes.data_as(_capi.c_float_p), a.shape[0], None
    if kind in _ROWPAR:
        if sc is None:
            raise ValueError("%s pages need %s: their (scale, zero) float32 pairs, shape %s + (2,)" %
                             (kind, name, pshape))
        a = _array(sc, name, (4,), (np.float32,))
        if a.shape != tuple(pshape) + (2,) or a.strides[-1] != 4 or any(x % 8 for x in a.strides[:3]):
            raise ValueError("%s must be float32 %s with contiguous pairs, got %s" % (name, tuple(pshape) + (2,),
                                                                                     a.shape))
        if writable and not a.flags.writeable:
            raise ValueError("%s must be writable" % name)
        kept.append(a)
        s = [x // 8 for x in a.strides[:3]]
        nhd = layout == "NHD"
        return a.ctypes.data_as(_capi.c_float_p), 0, (s[0], s[1 if nhd else 2], s[2 if nhd else 1])
    if sc is not None:
        raise ValueError("%s belongs to the fp8 and int8 / int4 formats, not to %s pages" % (name, kind))
    return None, 0, None


def _paged_kv(k_pages, v_pages, kv_indptr, kv_indices, kv_last_page_len, layout, kv_dtype, v_dtype, k_scale,
              v_scale, kept, writable=False, v_head_dim=None):
    """An attn_paged_kv over the page arrays in place (no copy); v_pages None:
    MLA's latent rows (V = the first v_head_dim values of each K row)."""
    if layout not in _capi.LAYOUT:
        raise ValueError("layout must be 'NHD' or 'HND', got %r" % (layout,))
    kp = _array(k_pages, "k_pages", (4,), (np.float32, np.float16, np.uint16, np.uint8))
    mla = v_pages is None
    if mla and v_head_dim is None:
        raise ValueError("v_pages=None (MLA: V within the K rows) needs v_head_dim")
    if not mla and v_head_dim is not None:
        raise ValueError("v_head_dim is MLA's (v_pages=None); with v_pages, Dv is their last dimension")
    vp = kp if mla else _array(v_pages, "v_pages", (4,), (np.float32, np.float16, np.uint16, np.uint8))
    kind = _page_kind(kp, kv_dtype, "k_pages")
    vkind = _page_kind(vp, v_dtype if v_dtype is not None else kv_dtype, "v_pages")
    if mla and vkind != kind:
        raise ValueError("MLA (v_pages=None): V is in the K rows, of K's type")
    for name, a in (("k_pages", kp), ("v_pages", vp)):
        if a.strides[-1] != a.itemsize or any(st % a.itemsize for st in a.strides):
            raise ValueError("%s: the last dimension must be contiguous (strides %s bytes for %d-byte items)" %
                             (name, a.strides, a.itemsize))
        if writable and not a.flags.writeable:
            raise ValueError("%s must be writable" % name)
    nhd = layout == "NHD"
    P, ps, Hkv = kp.shape[0], kp.shape[1 if nhd else 2], kp.shape[2 if nhd else 1]
    D = _elems(kp.shape[3], kind, "the last dimension")
    Dv = int(v_head_dim) if mla else _elems(vp.shape[3], vkind, "the last dimension")
    if vp.shape[:3] != kp.shape[:3]:
        raise ValueError("k_pages %s and v_pages %s differ in (pages, tokens, heads)" % (kp.shape, vp.shape))
    kv = _capi.PagedKV()
    kv.dtype, kv.layout, kv.v_dtype = _capi.DTYPE[kind], _capi.LAYOUT[layout], _capi.DTYPE[vkind]
    kv.num_pages, kv.page_size, kv.Hkv, kv.D, kv.Dv = P, ps, Hkv, D, Dv
    kv.k_pages, kv.v_pages = kp.ctypes.data, None if mla else vp.ctypes.data
    for a, st, ak in ((kp, kv.k_strides, kind),) if mla else ((kp, kv.k_strides, kind), (vp, kv.v_strides, vkind)):
        s = [x // a.itemsize for x in a.strides]
        page, tok, head = s[0], s[1 if nhd else 2], s[2 if nhd else 1]
        for t, x in enumerate((page, tok, head)):
            st[t] = _elems(x, ak, "a stride")
    kv.k_scale, kv.k_scale_len, kps = _scale(k_scale, kind, Hkv, "k_scale", layout, kp.shape[:3], kept, writable)
    if kps:
        kv.k_params, kv.kp_strides[:] = kv.k_scale, kps
        kv.k_scale, kv.k_scale_len = None, 0
    if not mla:
        kv.v_scale, kv.v_scale_len, vps = _scale(v_scale, vkind, Hkv, "v_scale", layout, vp.shape[:3], kept,
                                                 writable)
        if vps:
            kv.v_params, kv.vp_strides[:] = kv.v_scale, vps
            kv.v_scale, kv.v_scale_len = None, 0
    elif v_scale is not None:
        raise ValueError("MLA (v_pages=None): V is read with K's scale; v_scale must be None")
    ip = np.ascontiguousarray(_array(kv_indptr, "kv_indptr", (1,), (np.int32, np.int64)), dtype=np.int32)
    ind = np.ascontiguousarray(_array(kv_indices, "kv_indices", (1,), (np.int32, np.int64)), dtype=np.int32)
    last = np.ascontiguousarray(_array(kv_last_page_len, "kv_last_page_len", (1,), (np.int32, np.int64)),
                                dtype=np.int32)
    B = ip.shape[0] - 1
    if B < 0 or last.shape != (B,):
        raise ValueError("kv_indptr (B + 1,) and kv_last_page_len (B,) disagree: %s, %s" % (ip.shape, last.shape))
    p32 = ctypes.POINTER(ctypes.c_int32)
    kv.kv_indptr, kv.kv_indices, kv.kv_last_page_len = (ip.ctypes.data_as(p32), ind.ctypes.data_as(p32),
                                                        last.ctypes.data_as(p32))
    kept += [kp, vp, ip, ind, last]
    return kv, B


def paged_attention(q, k_pages, v_pages, kv_indptr, kv_indices, kv_last_page_len, *, qo_indptr=None, layout="NHD",
                    kv_dtype=None, v_dtype=None, k_scale=None, v_scale=None, causal="bottom-right", scale=None,
                    window=(-1, -1), softcap=0.0, sinks=None, alibi_slopes=None, math="strict", return_lse=False,
                    v_head_dim=None):
    """Attention over pages the caller owns, in FlashInfer's conventions (no copy).

    Sequence b's keys are the pages kv_indices[kv_indptr[b]:kv_indptr[b+1]], all
    full except the last, which holds kv_last_page_len[b] tokens (0 for a
    sequence without pages). k_pages / v_pages: (P, page_size, Hkv, D) for
    layout 'NHD', (P, Hkv, page_size, D) for 'HND'; float32, float16, uint16
    bits with kv_dtype='bf16', or uint8 with kv_dtype 'q8_0' (34 bytes per
    32 values), 'fp8_e4m3' / 'fp8_e5m2' (one byte a value; k_scale /
    v_scale: one float or one per kv head, the value read is fp8 * scale),
    'int8' / 'int4' (LMDeploy: one byte / half a byte a value; k_scale /
    v_scale: float32 (scale, zero) pairs shaped as the pages' first three
    dimensions + (2,), x = q * scale + zero), 'q4_0' (18 bytes per 32
    values); v_dtype: V's type when it differs; any strides with a
    contiguous last dimension. q:
    float32 (B, Hq, D), one row per sequence (decode), or packed (Tq, Hq, D)
    with qo_indptr (B + 1,) (prefill, chunked prefill). Returns out of q's
    leading shape with Dv, and with return_lse the lse, natural log, (B, Hq)
    or (Tq, Hq). causal 'bottom-right' (the default: the rows are each
    sequence's last tokens), 'none'; window, softcap, sinks, alibi_slopes and
    math as sdpa's. MLA (DeepSeek's latent cache): v_pages=None and
    v_head_dim=Dv, one latent head of D values per token (e.g. 576), K = the
    row, V = its first Dv (e.g. 512); give the MLA softmax scale."""
    kept = []
    kv, B = _paged_kv(k_pages, v_pages, kv_indptr, kv_indices, kv_last_page_len, layout, kv_dtype, v_dtype, k_scale,
                      v_scale, kept, v_head_dim=v_head_dim)
    qa = _array(q, "q", (3,))
    if qa.strides[-1] != qa.itemsize:
        qa = np.ascontiguousarray(qa)
    rows, H, D = qa.shape
    if D != kv.D:
        raise ValueError("q's head size %d differs from the pages' %d" % (D, kv.D))
    it = qa.itemsize
    if qo_indptr is None:
        if rows != B:
            raise ValueError("q must be (B, Hq, D) with B = %d sequences, got %s" % (B, qa.shape))
        Sq, vq = 1, _capi.View(qa.ctypes.data, qa.strides[0] // it, qa.strides[1] // it, 0)
        out = np.empty((B, H, kv.Dv), np.float32)
        vo = _capi.View(out.ctypes.data, H * kv.Dv, kv.Dv, 0)
        qo = None
    else:
        qo = np.ascontiguousarray(_array(qo_indptr, "qo_indptr", (1,), (np.int32, np.int64)), dtype=np.int32)
        if qo.shape != (B + 1,):
            raise ValueError("qo_indptr must be (B + 1,) = (%d,), got %s" % (B + 1, qo.shape))
        kept.append(qo)
        Sq, vq = rows, _capi.View(qa.ctypes.data, 0, qa.strides[1] // it, qa.strides[0] // it)
        out = np.empty((rows, H, kv.Dv), np.float32)
        vo = _capi.View(out.ctypes.data, 0, kv.Dv, H * kv.Dv)
    d = _capi.SdpaDesc()
    lib.attn_sdpa_desc_init(ctypes.byref(d), B, H, Sq, 0, kv.D, kv.Dv)
    d.Hkv = kv.Hkv
    kept += _options(d, B, H, None, causal, scale, None, None, window, softcap, alibi_slopes, sinks, 0, None, None,
                     None, math)
    lse = np.empty((B, H) if qo is None else (rows, H), np.float32) if return_lse else None
    qop = None if qo is None else qo.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
    _check(lib.attn_paged_attention(ctypes.byref(d), vq, ctypes.byref(kv), qop, vo, _fptr(lse)), "paged attention")
    return (out, lse) if return_lse else out


def paged_append(k, v, k_pages, v_pages, slot_mapping, *, layout="NHD", kv_dtype=None, v_dtype=None, k_scale=None,
                 v_scale=None):
    """Write rows k (T, Hkv, D) and v (T, Hkv, Dv), float32, into the pages in
    place: row t goes to slot slot_mapping[t] = page * page_size + offset
    (vLLM's reshape_and_cache), a negative slot skips the row. Rounds to
    nearest even (fp8: x / scale, saturating at the largest finite value;
    q8_0, q4_0: quantized per block; int8 / int4: per row, writing its
    (scale, zero) pair into k_scale / v_scale). A slot past the pages raises
    and nothing is written. v_pages=None (MLA's latent rows): only k is
    written (v may be None)."""
    kept = []
    ind = np.zeros(1, np.int32)
    kv, _ = _paged_kv(k_pages, v_pages, np.zeros(1, np.int32), ind, np.zeros(0, np.int32), layout, kv_dtype, v_dtype,
                      k_scale, v_scale, kept, writable=True, v_head_dim=1 if v_pages is None else None)
    ka = np.ascontiguousarray(_array(k, "k", (3,)))
    T = ka.shape[0]
    mla = v_pages is None  # the K rows only
    va = np.zeros((T, kv.Hkv, 1), np.float32) if mla else np.ascontiguousarray(_array(v, "v", (3,)))
    if ka.shape != (T, kv.Hkv, kv.D) or va.shape != (T, kv.Hkv, kv.Dv):
        raise ValueError("k, v must be (T, Hkv, D) = (%d, %d, %d) and (T, Hkv, Dv); got %s, %s" %
                         (T, kv.Hkv, kv.D, ka.shape, va.shape))
    sm = np.ascontiguousarray(_array(slot_mapping, "slot_mapping", (1,), (np.int32, np.int64)), dtype=np.int64)
    if sm.shape != (T,):
        raise ValueError("slot_mapping must be (T,) = (%d,), got %s" % (T, sm.shape))
    _check(lib.attn_paged_append(ctypes.byref(kv), T, _fptr(ka), None if mla else _fptr(va),
                                 sm.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))), "paged append")


def merge_states(out_a, lse_a, out_b, lse_b):
    """Merge two attention states over disjoint key sets (cascade attention,
    context parallelism): out (..., Dv) and lse (...), natural log. Returns
    (out, lse) with lse = log(e^lse_a + e^lse_b) and out the lse-weighted
    mean; a state with lse -inf is empty."""
    oa, ob = (np.ascontiguousarray(_array(x, n, range(1, 9))) for x, n in ((out_a, "out_a"), (out_b, "out_b")))
    la, lb = (np.ascontiguousarray(_array(x, n, range(0, 8))) for x, n in ((lse_a, "lse_a"), (lse_b, "lse_b")))
    if oa.shape != ob.shape or la.shape != lb.shape or oa.shape[:-1] != la.shape:
        raise ValueError("out_a, out_b (..., Dv) and lse_a, lse_b (...) must agree: %s %s %s %s" %
                         (oa.shape, ob.shape, la.shape, lb.shape))
    out, lse = np.empty_like(oa), np.empty_like(la)
    _check(lib.attn_merge_states(la.size, oa.shape[-1], _fptr(oa), _fptr(la), _fptr(ob), _fptr(lb), _fptr(out),
                                 _fptr(lse)), "merge_states")
    return out, lse


# ---- layers --------------------------------------------------------------------

def _numpy_state(sd):
    """state_dict values as float32 numpy arrays (tensors, arrays or lists)."""
    out = {}
    for name, t in (sd or {}).items():
        if hasattr(t, "detach"):  # a torch tensor
            t = t.detach().cpu().float().numpy()
        a = np.asarray(t)
        if a.dtype == np.bool_:
            a = a.astype(np.float32)
        if a.dtype.kind not in "fiu":
            raise TypeError("state_dict[%r]: dtype %s is not a number type" % (name, a.dtype))
        out[name] = np.ascontiguousarray(a, dtype=np.float32)
    return out


class _Owned:
    """Owns a C handle (self._h), freed by close() or when collected."""
    _h = None

    def close(self):
        if self._h:
            self._free(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Layer(_Owned):
    """One of the seed layers (LAYER_KINDS, named as the CLI names them) with
    the weights of a PyTorch state_dict (tensors or numpy arrays).

        layer = libattn.Layer("mha", model.state_dict(), heads=2)
        out = layer(x)                       # x (S, C) or (B, S, C), float32

    Config names as in `attn run`: heads, context_length, dropout,
    out_dropout (defaults to dropout), torch_flavor ('mkl' or 'nomkl': which
    PyTorch build's dropout stream train=True reproduces), impl, math
    ('strict'; the layers' activations are float32, so 'data' is strict
    and 'bf16' rounds the attention products' operands to bf16).
    """

    _free = staticmethod(lambda h: lib.attn_layer_free(h))

    def __init__(self, kind, state_dict=None, *, heads=None, context_length=None, dropout=0.0, out_dropout=None,
                 torch_flavor="mkl", impl="auto", math="strict"):
        if kind not in LAYER_KINDS:
            raise ValueError("unknown layer kind %r (one of %s)" % (kind, ", ".join(LAYER_KINDS)))
        if torch_flavor not in _capi.FLAVOR:
            raise ValueError("torch_flavor must be 'mkl' or 'nomkl', got %r" % (torch_flavor,))
        if impl not in _capi.IMPL:
            raise ValueError("impl must be 'auto', 'ref' or 'fast', got %r" % (impl,))
        if math not in _capi.MATH:
            raise ValueError("math must be 'strict', 'data' or 'bf16', got %r" % (math,))
        self.kind, self._flavor, self._impl, self._math = kind, torch_flavor, impl, math
        self._h = None
        k = ctypes.c_int()
        _check(lib.attn_layer_kind_parse(kind.encode(), ctypes.byref(k)), "layer kind")
        cfg = _capi.LayerConfig()
        lib.attn_layer_config_default(ctypes.byref(cfg), k.value, 1, 1, int(heads) if heads else 1)
        cfg.dropout = float(dropout)
        cfg.out_dropout = float(dropout if out_dropout is None else out_dropout)
        if not 0.0 <= cfg.dropout <= 1.0 or not 0.0 <= cfg.out_dropout <= 1.0:
            raise ValueError("dropout probabilities must be in [0, 1]")
        if context_length is not None:
            cfg.context_length = int(context_length)
        self._cfg = cfg
        if kind == "simple":
            if state_dict:
                raise ValueError("the simple layer has no weights")
            self._simple_width = None  # created at the first call, for the input's width
            return
        blob = safetensors_bytes(_numpy_state(state_dict))
        buf = ctypes.create_string_buffer(blob, len(blob))
        f = ctypes.c_void_p()
        _check(lib.attn_st_open_memory(buf, len(blob), ctypes.byref(f)), "state_dict")
        h = ctypes.c_void_p()
        detail = ctypes.create_string_buffer(256)
        try:
            st = lib.attn_layer_load_ex(ctypes.byref(cfg), f, ctypes.byref(h), detail, 256)
        finally:
            lib.attn_st_close(f)
        _check(st, "%s weights" % kind, detail.value.decode(errors="replace") or None)
        self._h = h
        if heads and lib.attn_layer_get_config(h).contents.num_heads != int(heads):
            n = lib.attn_layer_get_config(h).contents.num_heads
            self.close()
            raise ValueError("heads=%d disagrees with the %d heads in the state_dict" % (int(heads), n))

    def _handle(self, C):
        if self.kind == "simple" and self._simple_width != C:
            self.close()
            cfg = _capi.LayerConfig()
            lib.attn_layer_config_default(ctypes.byref(cfg), 0, C, C, 1)
            h = ctypes.c_void_p()
            _check(lib.attn_layer_create(ctypes.byref(cfg), ctypes.byref(h)), "simple layer")
            self._h, self._simple_width = h, C
        if not self._h:
            raise ValueError("the layer is closed")
        return self._h

    @property
    def num_heads(self):
        return int(lib.attn_layer_get_config(self._h).contents.num_heads) if self._h else 1

    def state_dict(self):
        """Parameters and persistent buffers as numpy arrays (copies), in state_dict order."""
        out = {}
        h = self._h
        for i in range(lib.attn_layer_tensor_count(h) if h else 0):
            ti = _capi.TensorInfo()
            _check(lib.attn_layer_tensor(h, i, ctypes.byref(ti)), "tensor")
            shape = tuple(ti.shape[j] for j in range(ti.ndim))
            n = int(np.prod(shape)) if shape else 1
            out[ti.name.decode()] = np.ctypeslib.as_array(ti.data, shape=(n,)).reshape(shape).copy()
        return out

    def _args(self, x, y, mask, train, seed):
        x = np.ascontiguousarray(_array(x, "x", (2, 3)))
        B, S, C = (1,) + x.shape if x.ndim == 2 else x.shape
        if 0 in (B, S, C):
            raise ValueError("x must have no empty dimension, got shape %s" % (x.shape,))
        if self.kind != "simple" and self._h:
            d_in = lib.attn_layer_get_config(self._h).contents.d_in
            if C != d_in:  # the C forward trusts the width: check it here
                raise ValueError("x has width %d but the %s weights expect %d" % (C, self.kind, d_in))
        Sk = S
        if self.kind == "cross":
            y = np.ascontiguousarray(_array(y, "y", (x.ndim,)))
            if y.shape[-1] != C or (x.ndim == 3 and y.shape[0] != B):
                raise ValueError("y must be (%sSk, %d), got %s" % ("B, " if x.ndim == 3 else "", C, y.shape))
            Sk = y.shape[-2]
            if Sk == 0:
                raise ValueError("y must have no empty dimension")
        elif y is not None:
            raise ValueError("only the cross layer takes y")
        m = None
        if mask is not None:
            m = _array(mask, "mask", (1, 2), (np.bool_, np.uint8))
            m = np.ascontiguousarray(m.reshape(1, -1) if m.ndim == 1 else m).astype(np.uint8, copy=False)
            if m.shape != (B, Sk):
                raise ValueError("mask must be (B, Sk) = (%d, %d) (True = masked), got %s" % (B, Sk, m.shape))
        gen = None
        if train:
            if seed is None:
                raise ValueError("train=True needs seed=N (the torch.manual_seed in force before forward)")
            gen = _capi.Generator()
            lib.attn_generator_seed(ctypes.byref(gen), int(seed))
            lib.attn_generator_set_flavor(ctypes.byref(gen), _capi.FLAVOR[self._flavor])
        a = _capi.ForwardArgs(_fptr(x), B, S, _fptr(y), Sk if y is not None else 0, _u8ptr(m), int(bool(train)),
                              ctypes.pointer(gen) if gen is not None else None, _capi.IMPL[self._impl], None,
                              _capi.MATH[self._math])
        return a, (x, y, m, gen), B, S, Sk, C

    def __call__(self, x, y=None, mask=None, *, train=False, seed=None):
        """The layer's forward: out (S, W) or (B, S, W) float32 like x."""
        a, keep, B, S, Sk, C = self._args(x, y, mask, train, seed)
        h = self._handle(C)
        W = lib.attn_layer_out_width(h)
        out = np.empty((B, S, W), np.float32)
        a.out = _fptr(out)
        _check(lib.attn_layer_forward(h, ctypes.byref(a)), "%s forward" % self.kind)
        return out[0] if keep[0].ndim == 2 else out

    forward = __call__

    def attention_weights(self, x, y=None, mask=None, *, train=False, seed=None, return_scores=False):
        """Every head's attention weights (B, heads, S, Sk), what the seeds print
        as attn_weights; with train=True those after the attention dropout."""
        a, keep, B, S, Sk, C = self._args(x, y, mask, train, seed)
        h = self._handle(C)
        H = lib.attn_layer_attention_heads(h)
        w = np.empty((B, H, S, Sk), np.float32)
        s = np.empty((B, H, S, Sk), np.float32) if return_scores else None
        _check(lib.attn_layer_attention_weights(h, ctypes.byref(a), _fptr(s), _fptr(w)),
               "%s attention weights" % self.kind)
        return (w, s) if return_scores else w

    def kv_cache(self, batch, capacity, *, dtype="f32", page_size=0):
        """A KV cache shaped for this (causal) layer's incremental forward."""
        hk, hd = _capi.c_i64(), _capi.c_i64()
        _check(lib.attn_layer_kv_shape(self._handle(1) if self.kind == "simple" else self._h, ctypes.byref(hk),
                                       ctypes.byref(hd)), "%s has no KV cache (causal kinds only)" % self.kind)
        return KVCache(batch, hk.value, capacity, hd.value, dtype=dtype, page_size=page_size)

    def forward_incremental(self, cache, x, mask=None):
        """Feed the next tokens x (B, S, C) of every sequence through cache
        (see kv_cache): out (B, S, W), as the full forward gives them.
        mask (B, L) bool, True = masked (causal_mha): the padding of every
        position the cache holds after this call (L at least each sequence's
        new length), e.g. the growing attention mask of padded batches."""
        x = np.ascontiguousarray(_array(x, "x", (3,)))
        B, S, C = x.shape
        h = self._handle(C)
        if C != lib.attn_layer_get_config(h).contents.d_in:
            raise ValueError("x has width %d but the %s weights expect %d" %
                             (C, self.kind, lib.attn_layer_get_config(h).contents.d_in))
        W = lib.attn_layer_out_width(h)
        out = np.empty((B, S, W), np.float32)
        m = None if mask is None else np.ascontiguousarray(_array(mask, "mask", (2,), (np.bool_, np.uint8)),
                                                           dtype=np.uint8)
        if m is not None and m.shape[0] != B:
            raise ValueError("mask must be (B, L) with B = %d, got %s" % (B, m.shape))
        a = _capi.ForwardArgs(_fptr(x), B, S, None, 0 if m is None else m.shape[1], None if m is None else _u8ptr(m),
                              0, None, _capi.IMPL[self._impl], _fptr(out), _capi.MATH[self._math])
        _check(lib.attn_layer_forward_incremental(h, cache._handle(), ctypes.byref(a)), "incremental forward")
        return out


class KVCache(_Owned):
    """Keys and values of `batch` sequences for incremental decoding:
    contiguous, or paged when page_size > 0. dtype 'f32', 'f16', 'bf16',
    'q8_0', 'fp8_e4m3', 'fp8_e5m2' (with k_scale / v_scale: one float or one
    per kv head; 1 when None), 'int8', 'int4' (a (scale, zero) per token and
    kv head, kept by the cache) or 'q4_0' (storage; attention always
    accumulates in float32); v_dtype, V's storage when it differs from K's
    (llama.cpp's -ctk / -ctv)."""

    _free = staticmethod(lambda h: lib.attn_kv_cache_free(h))

    def __init__(self, batch, kv_heads, capacity, head_dim, v_head_dim=None, *, dtype="f32", page_size=0,
                 num_pages=0, v_dtype=None, k_scale=None, v_scale=None):
        for name, t in (("dtype", dtype), ("v_dtype", v_dtype if v_dtype is not None else dtype)):
            if t not in KV_DTYPES:
                raise TypeError("KV cache %s must be one of %s, got %r" % (name, ", ".join(KV_DTYPES), t))
        cfg = _capi.KVCacheConfig(int(batch), int(kv_heads), int(capacity), int(head_dim),
                                  int(v_head_dim or head_dim), _capi.DTYPE[dtype], int(page_size), int(num_pages),
                                  _capi.DTYPE[v_dtype if v_dtype is not None else dtype])
        scales = []  # copied by the cache at create
        for name, sc, t in (("k_scale", k_scale, dtype), ("v_scale", v_scale, v_dtype or dtype)):
            if sc is None:
                continue
            if t not in _SCALED:
                raise ValueError("%s belongs to the fp8 types, not %r" % (name, t))
            a = np.ascontiguousarray(np.atleast_1d(np.asarray(sc, np.float32)))
            scales.append(a)
            setattr(cfg, name, a.ctypes.data_as(_capi.c_float_p))
            setattr(cfg, name + "_len", a.shape[0] if a.ndim == 1 else -1)
        h = ctypes.c_void_p()
        _check(lib.attn_kv_cache_create(ctypes.byref(cfg), ctypes.byref(h)), "KV cache")
        self._h, self.batch, self.kv_heads, self.capacity = h, int(batch), int(kv_heads), int(capacity)
        self.head_dim, self.v_head_dim = int(head_dim), int(v_head_dim or head_dim)

    def _handle(self):
        if not self._h:
            raise ValueError("the KV cache is closed")
        return self._h

    def __len__(self):
        return int(lib.attn_kv_cache_len(self._handle(), 0))

    def length(self, b):
        n = lib.attn_kv_cache_len(self._handle(), int(b))
        if n < 0:
            raise ValueError("sequence %r out of range" % (b,))
        return int(n)

    def append(self, k, v, n=None):
        """Append k (B, Hkv, T, D) and v (B, Hkv, T, Dv): n[b] (default T) rows
        of each sequence b. All or nothing."""
        k = _strided(_array(k, "k", (4,)))
        v = _strided(_array(v, "v", (4,)))
        nn = np.full(self.batch, k.shape[2], np.int64) if n is None else np.ascontiguousarray(n, dtype=np.int64)
        if nn.shape != (self.batch,):
            raise ValueError("n must have one count per sequence (%d)" % self.batch)
        if k.shape[:2] != (self.batch, self.kv_heads) or k.shape[3] != self.head_dim or \
                v.shape[:3] != k.shape[:3] or v.shape[3] != self.v_head_dim or (nn > k.shape[2]).any():
            raise ValueError("k, v must be (B=%d, Hkv=%d, T, D=%d / Dv=%d) with n <= T, got %s and %s" %
                             (self.batch, self.kv_heads, self.head_dim, self.v_head_dim, k.shape, v.shape))
        _check(lib.attn_kv_cache_append(self._handle(), nn.ctypes.data_as(ctypes.POINTER(_capi.c_i64)), _view(k),
                                        _view(v)), "KV cache append")

    def reset(self, b=-1):
        _check(lib.attn_kv_cache_reset(self._handle(), int(b)), "KV cache reset")

    def fork(self, src, dst):
        """Sequence dst becomes a copy of sequence src (its own tokens dropped
        first): a paged cache shares src's pages (copied on the first append
        into a shared, partly filled page), a contiguous one copies the rows."""
        _check(lib.attn_kv_cache_fork(self._handle(), int(src), int(dst)), "KV cache fork")

    def trim(self, b, length):
        _check(lib.attn_kv_cache_trim(self._handle(), int(b), int(length)), "KV cache trim")

    def attend(self, q, *, causal="bottom-right", scale=None, key_mask=None, window=(-1, -1), softcap=0.0,
               alibi_slopes=None, return_lse=False, sinks=None, attention_chunk=0, attn_mask=None, attn_bias=None,
               math="strict"):
        """Attention of q (B, H, Sq, D), float32, over each sequence's cached
        tokens: out (B, H, Sq, Dv) (and lse). attn_mask / attn_bias broadcast
        to (B, H, Sq, W), key j = cache position j (a tree mask of draft
        tokens: True = takes part), where W is the capacity (one buffer a
        serving loop reuses every step) or L, the longest sequence's length;
        positions at or past a sequence's length never take part, whatever
        the mask holds there. math: as sdpa's ('data': q rounded to the
        cache's type, int8 blocks for a q8_0 cache; P to V's type)."""
        q = _strided(_array(q, "q", (4,)))
        B, H, Sq, D = q.shape
        d = _capi.SdpaDesc()
        lib.attn_sdpa_desc_init(ctypes.byref(d), B, H, Sq, 0, D, self.v_head_dim)
        # keep: the arrays d points into, alive during the call
        keep = _options(d, B, H, None, causal, scale, key_mask, None, window, softcap, alibi_slopes, sinks,
                        attention_chunk, attn_mask, attn_bias,
                        [(B, H, Sq, max(self.length(b) for b in range(self.batch))),
                         (B, H, Sq, self.capacity)], math)
        out = np.empty((B, H, Sq, self.v_head_dim), np.float32)
        lse = np.empty((B, H, Sq), np.float32) if return_lse else None
        _check(lib.attn_kv_cache_attend(self._handle(), ctypes.byref(d), _view(q), _view(out), _fptr(lse)),
               "KV cache attend")
        return (out, lse) if return_lse else out


from ._flex import (flex_attention, create_block_mask, BlockMask, and_masks, or_masks, noop_mask,  # noqa: E402
                    create_mask)
