"""ctypes mirror of include/attn.h and the loading of libattn.so.

Which library is loaded, in order:
  1. the path in the environment variable LIBATTN_LIBRARY;
  2. the library `make install` recorded in _config.py next to this file;
  3. build/libattn.so of the source tree this package sits in (python/ in the repo);
  4. SONAME (libattn.so.0.MINOR) through the dynamic linker's search path.
The struct layouts are checked against the loaded library (attn_abi_size).
"""
import ctypes
import os

# the soname of the library this package's ctypes layouts describe
# (docs/API.md, "Versions and the ABI"; test_version checks it)
SONAME = "libattn.so.0.3"

c_i64 = ctypes.c_int64
c_int = ctypes.c_int
c_float = ctypes.c_float
c_void_p = ctypes.c_void_p
c_float_p = ctypes.POINTER(ctypes.c_float)
c_u8_p = ctypes.POINTER(ctypes.c_uint8)

# status codes (pinned in attn.h)
OK, E_INVALID, E_SHAPE, E_NOMEM, E_OVERFLOW, E_IO, E_FORMAT, E_NOT_FOUND, E_DTYPE, E_CONTEXT, E_UNSUPPORTED, \
    E_BUFFER, E_STATE, E_COMM = range(14)
DTYPE = {"f32": 1, "f16": 2, "bf16": 3, "f64": 4, "bool": 5, "u8": 6, "i64": 7, "i32": 8, "q8_0": 9,
         "fp8_e4m3": 10, "fp8_e5m2": 11, "int8": 12, "int4": 13, "q4_0": 14}
CAUSAL = {"none": 0, "top-left": 1, "bottom-right": 2}
MASK_TRUE_MEANS_MASKED = 1
IMPL = {"auto": 0, "ref": 1, "fast": 2}
FLAVOR = {"mkl": 0, "nomkl": 1}


class View(ctypes.Structure):
    _fields_ = [("data", c_void_p), ("stride_b", c_i64), ("stride_h", c_i64), ("stride_s", c_i64)]


class Dropout(ctypes.Structure):
    _fields_ = [("p", ctypes.c_double), ("scale", c_float), ("flavor", ctypes.c_uint32),
                ("mcg_seed", ctypes.c_uint32), ("keep", c_u8_p), ("n", ctypes.c_uint64)]


MATH = {"strict": 0, "data": 1, "bf16": 2}  # attn_math


class SdpaDesc(ctypes.Structure):
    _fields_ = [("B", c_i64), ("H", c_i64), ("Sq", c_i64), ("Sk", c_i64), ("D", c_i64), ("Dv", c_i64),
                ("scale", c_float), ("causal", c_int), ("key_mask", c_u8_p), ("key_mask_stride_b", c_i64),
                ("key_mask_polarity", c_int), ("dropout", ctypes.POINTER(Dropout)), ("impl", c_int),
                ("Hkv", c_i64), ("seqlens_k", c_void_p), ("seqlens_k_dtype", c_int), ("window", c_int),
                ("window_left", c_i64), ("window_right", c_i64), ("softcap", c_float),
                ("alibi_slopes", c_float_p), ("qkv_dtype", c_int), ("q_start", c_i64), ("k_start", c_i64),
                ("Sq_total", c_i64), ("Sk_total", c_i64), ("attention_chunk", c_i64), ("sinks", c_float_p),
                ("dsinks", c_float_p), ("attn_mask", c_u8_p), ("attn_mask_strides", c_i64 * 4),
                ("attn_bias", c_float_p), ("attn_bias_strides", c_i64 * 4), ("dbias", c_float_p),
                ("cu_seqlens_q", ctypes.POINTER(ctypes.c_int32)), ("cu_seqlens_k", ctypes.POINTER(ctypes.c_int32)),
                ("nseq", c_i64), ("math", c_int), ("score_mod", c_void_p), ("score_mod_ctx", c_void_p),
                ("score_mod_grad", c_int), ("mask_mod", c_void_p), ("mask_mod_ctx", c_void_p),
                ("block_mask", c_void_p)]


class Tile(ctypes.Structure):
    _fields_ = [("b", c_i64), ("h", c_i64), ("i0", c_i64), ("j0", c_i64), ("rows", c_i64), ("cols", c_i64)]


# attn_score_mod_fn, attn_mask_mod_fn
SCORE_MOD_FN = ctypes.CFUNCTYPE(None, c_void_p, ctypes.POINTER(Tile), c_float_p, c_i64, c_float_p)
MASK_MOD_FN = ctypes.CFUNCTYPE(None, c_void_p, ctypes.POINTER(Tile), c_u8_p, c_i64)


class BlockMaskArrays(ctypes.Structure):
    _fields_ = [("B", c_i64), ("H", c_i64), ("q_len", c_i64), ("kv_len", c_i64), ("q_block", c_i64),
                ("kv_block", c_i64), ("kv_num_blocks", ctypes.POINTER(ctypes.c_int32)),
                ("kv_indices", ctypes.POINTER(ctypes.c_int32)),
                ("full_kv_num_blocks", ctypes.POINTER(ctypes.c_int32)),
                ("full_kv_indices", ctypes.POINTER(ctypes.c_int32))]


class Generator(ctypes.Structure):
    _fields_ = [("mt", ctypes.c_uint32 * 624), ("index", ctypes.c_uint32), ("flavor", ctypes.c_uint32)]


class KVCacheConfig(ctypes.Structure):
    _fields_ = [("batch", c_i64), ("kv_heads", c_i64), ("capacity", c_i64), ("head_dim", c_i64),
                ("v_head_dim", c_i64), ("dtype", c_int), ("page_size", c_i64), ("num_pages", c_i64),
                ("v_dtype", c_int), ("k_scale", c_float_p), ("v_scale", c_float_p), ("k_scale_len", c_i64),
                ("v_scale_len", c_i64)]


class LayerConfig(ctypes.Structure):
    _fields_ = [("kind", c_int), ("d_in", c_i64), ("d_out", c_i64), ("num_heads", c_i64),
                ("context_length", c_i64), ("qkv_bias", c_int), ("out_bias", c_int), ("dropout", ctypes.c_double),
                ("out_dropout", ctypes.c_double), ("causal_align", c_int)]


class TensorInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("ndim", c_int), ("shape", c_i64 * 8), ("is_buffer", c_int),
                ("data", c_float_p), ("grad", c_float_p)]


class ForwardArgs(ctypes.Structure):
    _fields_ = [("x", c_float_p), ("B", c_i64), ("S", c_i64), ("y", c_float_p), ("Sk", c_i64), ("mask", c_u8_p),
                ("train", c_int), ("gen", ctypes.POINTER(Generator)), ("impl", c_int), ("out", c_float_p),
                ("math", c_int)]


class BackwardArgs(ctypes.Structure):
    _fields_ = [("dout", c_float_p), ("dx", c_float_p), ("dy", c_float_p)]


class PagedKV(ctypes.Structure):
    _fields_ = [("dtype", c_int), ("layout", c_int), ("num_pages", c_i64), ("page_size", c_i64), ("Hkv", c_i64),
                ("D", c_i64), ("Dv", c_i64), ("k_pages", c_void_p), ("v_pages", c_void_p), ("k_strides", c_i64 * 3),
                ("v_strides", c_i64 * 3), ("kv_indptr", ctypes.POINTER(ctypes.c_int32)),
                ("kv_indices", ctypes.POINTER(ctypes.c_int32)), ("kv_last_page_len", ctypes.POINTER(ctypes.c_int32)),
                ("v_dtype", c_int), ("k_scale", c_float_p), ("v_scale", c_float_p), ("k_scale_len", c_i64),
                ("v_scale_len", c_i64), ("k_params", c_float_p), ("v_params", c_float_p), ("kp_strides", c_i64 * 3),
                ("vp_strides", c_i64 * 3)]


LAYOUT = {"NHD": 0, "HND": 1}  # attn_kv_layout

_STRUCTS = {"attn_view": View, "attn_paged_kv": PagedKV, "attn_sdpa_desc": SdpaDesc, "attn_generator": Generator, "attn_dropout": Dropout,
            "attn_kv_cache_config": KVCacheConfig, "attn_layer_config": LayerConfig,
            "attn_tensor_info": TensorInfo, "attn_forward_args": ForwardArgs, "attn_backward_args": BackwardArgs,
            "attn_tile": Tile, "attn_block_mask_arrays": BlockMaskArrays}

# name: (restype, argtypes)
_P = c_void_p
_FUNCS = {
    "attn_version": (ctypes.c_char_p, []),
    "attn_block_mask_create": (c_int, [ctypes.POINTER(BlockMaskArrays), ctypes.POINTER(_P)]),
    "attn_block_mask_from_mod": (c_int, [MASK_MOD_FN, c_void_p, c_i64, c_i64, c_i64, c_i64, c_i64, c_i64,
                                         ctypes.POINTER(_P)]),
    "attn_block_mask_from_mod_stored": (c_int, [MASK_MOD_FN, c_void_p, c_i64, c_i64, c_i64, c_i64, c_i64, c_i64,
                                                ctypes.c_size_t, ctypes.POINTER(_P)]),
    "attn_block_mask_stored": (c_int, [_P]),
    "attn_block_mask_free": (None, [_P]),
    "attn_block_mask_arrays_get": (c_int, [_P, ctypes.POINTER(BlockMaskArrays)]),
    "attn_math_products": (ctypes.c_char_p, []),
    "attn_math_rounds": (c_int, [c_int]),
    "attn_abi_size": (ctypes.c_size_t, [ctypes.c_char_p]),
    "attn_status_string": (ctypes.c_char_p, [c_int]),
    "attn_last_error": (ctypes.c_char_p, []),
    "attn_kernel_name": (ctypes.c_char_p, []),
    "attn_kernel_status": (c_int, []),
    "attn_release_cached_memory": (None, []),
    "attn_default_scale": (c_float, [c_i64]),
    "attn_sdpa_desc_init": (None, [ctypes.POINTER(SdpaDesc), c_i64, c_i64, c_i64, c_i64, c_i64, c_i64]),
    "attn_sdpa_forward": (c_int, [ctypes.POINTER(SdpaDesc), View, View, View, View, c_float_p]),
    "attn_sdpa_backward": (c_int, [ctypes.POINTER(SdpaDesc), View, View, View, View, View, c_float_p, View, View,
                                   View]),
    "attn_sdpa_weights": (c_int, [ctypes.POINTER(SdpaDesc), View, View, c_float_p, c_float_p]),
    "attn_generator_seed": (None, [ctypes.POINTER(Generator), ctypes.c_uint64]),
    "attn_generator_set_flavor": (None, [ctypes.POINTER(Generator), c_int]),
    "attn_dropout_begin": (c_int, [ctypes.POINTER(Generator), ctypes.c_double, ctypes.c_uint64,
                                   ctypes.POINTER(Dropout)]),
    "attn_dropout_keep": (c_int, [ctypes.POINTER(Dropout), ctypes.c_uint64]),
    "attn_dropout_end": (None, [ctypes.POINTER(Dropout)]),
    "attn_kv_cache_create": (c_int, [ctypes.POINTER(KVCacheConfig), ctypes.POINTER(_P)]),
    "attn_kv_cache_free": (None, [_P]),
    "attn_kv_cache_len": (c_i64, [_P, c_i64]),
    "attn_kv_cache_append": (c_int, [_P, ctypes.POINTER(c_i64), View, View]),
    "attn_kv_cache_reset": (c_int, [_P, c_i64]),
    "attn_kv_cache_trim": (c_int, [_P, c_i64, c_i64]),
    "attn_kv_cache_fork": (c_int, [_P, c_i64, c_i64]),
    "attn_kv_cache_attend": (c_int, [_P, ctypes.POINTER(SdpaDesc), View, View, c_float_p]),
    "attn_paged_attention": (c_int, [ctypes.POINTER(SdpaDesc), View, ctypes.POINTER(PagedKV),
                                     ctypes.POINTER(ctypes.c_int32), View, c_float_p]),
    "attn_paged_append": (c_int, [ctypes.POINTER(PagedKV), c_i64, c_float_p, c_float_p, ctypes.POINTER(c_i64)]),
    "attn_merge_states": (c_int, [c_i64, c_i64, c_float_p, c_float_p, c_float_p, c_float_p, c_float_p, c_float_p]),
    "attn_st_open_memory": (c_int, [c_void_p, ctypes.c_size_t, ctypes.POINTER(_P)]),
    "attn_st_close": (None, [_P]),
    "attn_layer_kind_parse": (c_int, [ctypes.c_char_p, ctypes.POINTER(c_int)]),
    "attn_layer_config_default": (None, [ctypes.POINTER(LayerConfig), c_int, c_i64, c_i64, c_i64]),
    "attn_layer_create": (c_int, [ctypes.POINTER(LayerConfig), ctypes.POINTER(_P)]),
    "attn_layer_load_ex": (c_int, [ctypes.POINTER(LayerConfig), _P, ctypes.POINTER(_P), ctypes.c_char_p,
                                   ctypes.c_size_t]),
    "attn_layer_free": (None, [_P]),
    "attn_layer_get_config": (ctypes.POINTER(LayerConfig), [_P]),
    "attn_layer_init": (c_int, [_P, ctypes.POINTER(Generator)]),
    "attn_layer_tensor_count": (c_int, [_P]),
    "attn_layer_tensor": (c_int, [_P, c_int, ctypes.POINTER(TensorInfo)]),
    "attn_layer_out_width": (c_i64, [_P]),
    "attn_layer_attention_heads": (c_i64, [_P]),
    "attn_layer_forward": (c_int, [_P, ctypes.POINTER(ForwardArgs)]),
    "attn_layer_backward": (c_int, [_P, ctypes.POINTER(BackwardArgs)]),
    "attn_layer_zero_grad": (None, [_P]),
    "attn_layer_attention_weights": (c_int, [_P, ctypes.POINTER(ForwardArgs), c_float_p, c_float_p]),
    "attn_layer_forward_incremental": (c_int, [_P, _P, ctypes.POINTER(ForwardArgs)]),
    "attn_layer_kv_shape": (c_int, [_P, ctypes.POINTER(c_i64), ctypes.POINTER(c_i64)]),
}


def _candidates():
    env = os.environ.get("LIBATTN_LIBRARY")
    if env:
        return [env]  # an explicit choice: nothing else is tried
    here = os.path.dirname(os.path.abspath(__file__))
    beside = os.path.join(here, "libattn.so")
    if os.path.exists(beside):
        return [beside]  # installed by pip: the library that came with this package, nothing else
    out = []
    try:
        from . import _config  # written by `make install`
        out.append(_config.LIBRARY)
    except ImportError:
        pass
    out.append(os.path.join(here, "..", "..", "build", "libattn.so"))
    out.append(SONAME)
    return out


def _load():
    errors = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            errors.append("%s: no such file" % path)
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append(str(e))
            continue
        for name, (res, args) in _FUNCS.items():
            try:
                fn = getattr(lib, name)
            except AttributeError:
                raise ImportError("libattn: %s has no %s (an older library?)" % (path, name))
            fn.restype, fn.argtypes = res, args
        for cname, cls in _STRUCTS.items():
            want = lib.attn_abi_size(cname.encode())
            if want != ctypes.sizeof(cls):
                raise ImportError("libattn: %s is %d bytes in %s but %d in this package: library and package "
                                  "versions differ" % (cname, want, path, ctypes.sizeof(cls)))
        return lib, path
    raise ImportError("libattn: cannot load the C library (build it with `make`, or set LIBATTN_LIBRARY): "
                      + "; ".join(errors))


lib, library_path = _load()
