"""Programmable attention on numpy arrays: FlexAttention's flex_attention,
create_block_mask, BlockMask, and_masks, or_masks, noop_mask, create_mask
(torch.nn.attention.flex_attention's signatures and semantics).

The mods are Python functions written as for PyTorch:

    score_mod(score, b, h, q_idx, kv_idx) -> new score
    mask_mod(b, h, q_idx, kv_idx) -> True where the pair takes part

libattn calls them on tiles: b and h are integer scalars, q_idx a column
(rows, 1) and kv_idx a row (1, cols) of int64 indices, score the tile's
(rows, cols) float32 scores, so that elementwise code broadcasts to the
tile, as FlexAttention's vmap evaluates it. A mod may be called any number
of times, on tiles of any size and in any order: no side effects. The
arrays' module (numpy here, torch in libattn.torch) comes from `backend`.
"""
import ctypes

import numpy as np

from . import _capi
from ._capi import lib

__all__ = ["flex_attention", "create_block_mask", "BlockMask", "and_masks", "or_masks", "noop_mask",
           "create_mask"]


def noop_mask(b, h, q_idx, kv_idx):
    """Every pair takes part."""
    return np.bool_(True)


def _combine(mask_mods, op, name):
    if not mask_mods:
        raise ValueError("%s needs at least one mask_mod" % name)

    def mask_mod(b, h, q_idx, kv_idx):
        out = mask_mods[0](b, h, q_idx, kv_idx)
        for m in mask_mods[1:]:
            out = op(out, m(b, h, q_idx, kv_idx))
        return out
    return mask_mod


def and_masks(*mask_mods):
    """A mask_mod keeping a pair where every one of mask_mods does."""
    return _combine(mask_mods, lambda x, y: x & y, "and_masks")


def or_masks(*mask_mods):
    """A mask_mod keeping a pair where any one of mask_mods does."""
    return _combine(mask_mods, lambda x, y: x | y, "or_masks")


class _Numpy:
    """How the mods see a tile: numpy arrays."""

    @staticmethod
    def index(t):
        return (np.int64(t.b), np.int64(t.h), np.arange(t.i0, t.i0 + t.rows, dtype=np.int64)[:, None],
                np.arange(t.j0, t.j0 + t.cols, dtype=np.int64)[None, :])

    @staticmethod
    def keep(r, shape):
        return np.broadcast_to(np.asarray(r, dtype=bool), shape)

    @staticmethod
    def score(mod, s, idx, want_grad):
        new = np.broadcast_to(np.asarray(mod(s.copy(), *idx), dtype=np.float32), s.shape)
        if want_grad:
            raise NotImplementedError("the derivative of a numpy score_mod (libattn.torch.flex_attention has it)")
        return new, None


def _tile_view(ptr, t, ld, ctype):
    """The (rows, cols) tile at ptr with row stride ld, as a writable array."""
    n = (t.rows - 1) * ld + t.cols
    base = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctype)), shape=(n,))
    return np.lib.stride_tricks.as_strided(base, (t.rows, t.cols), (ld * base.itemsize, base.itemsize))


class _Callbacks:
    """The C callbacks around a score_mod and a mask_mod (either may be None);
    the first exception a mod raises is kept and raised after the call."""

    def __init__(self, score_mod, mask_mod, backend=_Numpy):
        self.error = None
        self.backend = backend
        self.score_mod, self.mask_mod = score_mod, mask_mod
        self.c_score = _capi.SCORE_MOD_FN(self._score) if score_mod is not None else None
        self.c_mask = _capi.MASK_MOD_FN(self._mask) if mask_mod is not None else None

    def _mask(self, ctx, tp, keep, ld):
        t = tp.contents
        out = _tile_view(keep, t, ld, ctypes.c_uint8)
        try:
            if self.error is None:
                out[...] = self.backend.keep(self.mask_mod(*self.backend.index(t)), out.shape)
                return
        except BaseException as e:  # noqa: B036 (kept and raised by the caller)
            self.error = e
        out[...] = 0

    def _score(self, ctx, tp, s, ld, ds):
        t = tp.contents
        sv = _tile_view(s, t, ld, ctypes.c_float)
        try:
            if self.error is None:
                new, g = self.backend.score(self.score_mod, sv, self.backend.index(t), bool(ds))
                sv[...] = new
                if ds:
                    _tile_view(ds, t, ld, ctypes.c_float)[...] = g
                return
        except BaseException as e:  # noqa: B036
            self.error = e
        sv[...] = np.nan
        if ds:
            _tile_view(ds, t, ld, ctypes.c_float)[...] = 0.0

    def raise_if_failed(self):
        if self.error is not None:
            e, self.error = self.error, None
            raise e

    def attach(self, d, block_mask):
        """Point descriptor d at the callbacks (and the block mask's mask_mod)."""
        if self.c_score is not None:
            d.score_mod = ctypes.cast(self.c_score, ctypes.c_void_p)
            d.score_mod_grad = 1
        if self.c_mask is not None:
            d.mask_mod = ctypes.cast(self.c_mask, ctypes.c_void_p)
        if block_mask is not None:
            d.block_mask = block_mask._handle


def _block_size(BLOCK_SIZE):
    if isinstance(BLOCK_SIZE, (tuple, list)):
        if len(BLOCK_SIZE) != 2:
            raise ValueError("BLOCK_SIZE must be an int or a pair (Q_BLOCK, KV_BLOCK), got %r" % (BLOCK_SIZE,))
        return int(BLOCK_SIZE[0]), int(BLOCK_SIZE[1])
    return int(BLOCK_SIZE), int(BLOCK_SIZE)


class BlockMask:
    """FlexAttention's BlockMask: per (batch row, head, query block) the key
    blocks that are partially visible (kv_num_blocks, kv_indices: mask_mod
    decides each pair) and fully visible (full_kv_num_blocks,
    full_kv_indices: every pair takes part); every other block is skipped.
    B or H of 1 broadcast. BLOCK_SIZE = (Q_BLOCK, KV_BLOCK), seq_lengths =
    (Q_LEN, KV_LEN), mask_mod the function partial blocks evaluate (None:
    every pair of a partial block takes part). q_num_blocks, q_indices and
    the full_q_ pair: the same lists per key block (the query blocks that
    see it). Made by create_block_mask or BlockMask.from_kv_blocks; the
    arrays are int32 numpy arrays."""

    def __init__(self, handle, mask_mod, callbacks=None):
        self._handle = ctypes.c_void_p(handle)
        self.mask_mod = mask_mod
        self._cb = callbacks  # the C mask_mod's wrapper, when the mask was built from it
        a = _capi.BlockMaskArrays()
        lib.attn_block_mask_arrays_get(self._handle, ctypes.byref(a))
        self.B, self.H = a.B, a.H
        self.seq_lengths = (a.q_len, a.kv_len)
        self.BLOCK_SIZE = (a.q_block, a.kv_block)
        nq, nkv = -(-a.q_len // a.q_block), -(-a.kv_len // a.kv_block)

        def arr(p, shape):
            n = int(np.prod(shape))
            if n == 0:
                return np.zeros(shape, np.int32)
            return np.ctypeslib.as_array(p, shape=(n,)).reshape(shape).copy()
        self.kv_num_blocks = arr(a.kv_num_blocks, (a.B, a.H, nq))
        self.kv_indices = arr(a.kv_indices, (a.B, a.H, nq, nkv))
        self.full_kv_num_blocks = arr(a.full_kv_num_blocks, (a.B, a.H, nq))
        self.full_kv_indices = arr(a.full_kv_indices, (a.B, a.H, nq, nkv))
        # the transposed lists (FlexAttention's q_* fields: per key block, the query blocks that see it)
        st = self._states()
        self.q_num_blocks, self.q_indices = self._transpose(st == 1)
        self.full_q_num_blocks, self.full_q_indices = self._transpose(st == 2)

    def _states(self):
        """(B, H, nq, nkv) int8 from the lists: 0 skipped, 1 partial, 2 full."""
        idx = np.asarray(self.kv_indices)
        st = np.zeros(idx.shape, np.int8)
        for num, ind, v in ((self.kv_num_blocks, idx, 1), (self.full_kv_num_blocks, self.full_kv_indices, 2)):
            ind = np.asarray(ind)
            b, h, i, t = np.nonzero(np.arange(ind.shape[-1]) < np.asarray(num)[..., None])
            st[b, h, i, ind[b, h, i, t]] = v
        return st

    @staticmethod
    def _transpose(kept):
        """Per key block of kept (B, H, nq, nkv) the query blocks that keep it: counts, ascending lists."""
        kt = np.swapaxes(kept, 2, 3)
        qnum = kt.sum(-1).astype(np.int32)
        order = np.argsort(~kt, axis=-1, kind="stable").astype(np.int32)  # kept ones first, ascending
        return qnum, np.where(np.arange(kt.shape[-1]) < qnum[..., None], order, 0).astype(np.int32)

    @classmethod
    def from_kv_blocks(cls, kv_num_blocks, kv_indices, full_kv_num_blocks=None, full_kv_indices=None,
                       BLOCK_SIZE=128, mask_mod=None, seq_lengths=None):
        """A block mask from FlexAttention's arrays: kv_num_blocks (B, H, nq),
        kv_indices (B, H, nq, nkv) and optionally the full blocks' pair.
        seq_lengths (Q_LEN, KV_LEN): default nq Q_BLOCK and nkv KV_BLOCK."""
        qb, kb = _block_size(BLOCK_SIZE)
        num = np.ascontiguousarray(np.asarray(kv_num_blocks), dtype=np.int32)
        idx = np.ascontiguousarray(np.asarray(kv_indices), dtype=np.int32)
        if num.ndim != 3 or idx.ndim != 4 or idx.shape[:3] != num.shape:
            raise ValueError("kv_num_blocks must be (B, H, nq) and kv_indices (B, H, nq, nkv), got %s and %s" %
                             (num.shape, idx.shape))
        if (full_kv_num_blocks is None) != (full_kv_indices is None):
            raise ValueError("full_kv_num_blocks and full_kv_indices: both or neither")
        fnum = fidx = None
        if full_kv_num_blocks is not None:
            fnum = np.ascontiguousarray(np.asarray(full_kv_num_blocks), dtype=np.int32)
            fidx = np.ascontiguousarray(np.asarray(full_kv_indices), dtype=np.int32)
            if fnum.shape != num.shape or fidx.shape != idx.shape:
                raise ValueError("full_kv_num_blocks %s and full_kv_indices %s must have the shapes of "
                                 "kv_num_blocks %s and kv_indices %s" % (fnum.shape, fidx.shape, num.shape,
                                                                         idx.shape))
        B, H, nq, nkv = idx.shape
        q_len, kv_len = seq_lengths if seq_lengths is not None else (nq * qb, nkv * kb)
        p32 = ctypes.POINTER(ctypes.c_int32)
        a = _capi.BlockMaskArrays(B, H, int(q_len), int(kv_len), qb, kb, num.ctypes.data_as(p32),
                                  idx.ctypes.data_as(p32), None if fnum is None else fnum.ctypes.data_as(p32),
                                  None if fidx is None else fidx.ctypes.data_as(p32))
        if -(-int(q_len) // qb) != nq or -(-int(kv_len) // kb) != nkv:
            raise ValueError("seq_lengths %s in blocks of %s make %d x %d blocks; the arrays have %d x %d" %
                             ((q_len, kv_len), (qb, kb), -(-int(q_len) // qb), -(-int(kv_len) // kb), nq, nkv))
        h = ctypes.c_void_p()
        from . import _check
        _check(lib.attn_block_mask_create(ctypes.byref(a), ctypes.byref(h)), "BlockMask.from_kv_blocks")
        return cls(h.value, mask_mod)

    @property
    def shape(self):
        return (self.B, self.H) + tuple(self.seq_lengths)

    def to_dense(self):
        """(B, H, nq, nkv) int32: 1 where a block is partial or full, 0 where skipped."""
        return (self._states() > 0).astype(np.int32)

    def sparsity(self):
        """Percent of blocks skipped."""
        st = self._states()
        return 100.0 * (1.0 - (st > 0).mean()) if st.size else 0.0

    def __repr__(self):
        return "BlockMask(shape=%s, BLOCK_SIZE=%s, sparsity=%.2f%%, mask_mod=%s)" % (
            self.shape, self.BLOCK_SIZE, self.sparsity(), getattr(self.mask_mod, "__name__", self.mask_mod))

    def __del__(self):
        h = getattr(self, "_handle", None)
        if h is not None and h.value:
            lib.attn_block_mask_free(h)
            self._handle = None


# create_block_mask keeps the partial blocks' keep bytes when they fit in
# this many bytes: flex_attention then reads them instead of calling the
# Python mask_mod tile by tile (the same pairs)
STORED_BYTES = 256 << 20


def _create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, BLOCK_SIZE, backend, cls=BlockMask):
    qb, kb = _block_size(BLOCK_SIZE)
    B = 1 if B is None else int(B)
    H = 1 if H is None else int(H)
    cb = _Callbacks(None, mask_mod, backend)
    h = ctypes.c_void_p()
    st = lib.attn_block_mask_from_mod_stored(cb.c_mask, None, B, H, int(Q_LEN), int(KV_LEN), qb, kb, STORED_BYTES,
                                             ctypes.byref(h))
    cb.raise_if_failed()
    from . import _check
    _check(st, "create_block_mask")
    return cls(h.value, mask_mod, cb)


def create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, device=None, BLOCK_SIZE=128, _compile=False):
    """FlexAttention's create_block_mask: mask_mod evaluated over (B, H,
    Q_LEN, KV_LEN) in blocks of BLOCK_SIZE (an int or (Q_BLOCK, KV_BLOCK));
    B or H None: one mask for every batch row or head. A block is full when
    every pair keeps (pairs past the lengths count as not kept), skipped when
    none does, else partial; the partial blocks' pairs are stored with the
    mask (up to STORED_BYTES, 256 MiB) so that attention calls no Python per
    tile. device and _compile are accepted and ignored."""
    return _create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, BLOCK_SIZE, _Numpy)


def create_mask(mod_fn, B, H, Q_LEN, KV_LEN, device=None):
    """The dense (B or 1, H or 1, Q_LEN, KV_LEN) bool mask of a mask_mod."""
    B = 1 if B is None else int(B)
    H = 1 if H is None else int(H)
    b = np.arange(B, dtype=np.int64)[:, None, None, None]
    h = np.arange(H, dtype=np.int64)[None, :, None, None]
    q = np.arange(Q_LEN, dtype=np.int64)[None, None, :, None]
    kv = np.arange(KV_LEN, dtype=np.int64)[None, None, None, :]
    return np.broadcast_to(np.asarray(mod_fn(b, h, q, kv), dtype=bool), (B, H, Q_LEN, KV_LEN)).copy()


def flex_call(query, key, value, score_mod, block_mask, scale, enable_gqa, backend, math="strict", impl="auto"):
    """The descriptor of a flex_attention call and its callbacks (the
    arrays: float32, (B, H, S, D) as for sdpa)."""
    from . import _Call
    if query.ndim != 4 or key.ndim != 4 or value.ndim != 4:
        raise ValueError("query, key and value must be (B, H, S, D), got %s, %s, %s" %
                         (query.shape, key.shape, value.shape))
    if query.shape[1] != key.shape[1] and not enable_gqa:
        raise ValueError("query has %d heads and key %d: pass enable_gqa=True for grouped-query attention" %
                         (query.shape[1], key.shape[1]))
    if block_mask is not None and not isinstance(block_mask, BlockMask):
        raise TypeError("block_mask must be a BlockMask (create_block_mask), got %s" % type(block_mask).__name__)
    c = _Call(query, key, value, "none", scale, None, None, (-1, -1), 0.0, None, impl, None, math=math)
    mm = block_mask.mask_mod if block_mask is not None else None
    if mm is not None and lib.attn_block_mask_stored(block_mask._handle):
        mm = None  # the mask holds its partial blocks' bytes: no Python call per tile
    cb = _Callbacks(score_mod, mm, backend)
    cb.attach(c.desc, block_mask)
    c.kept.append((cb, block_mask))
    return c, cb


def flex_forward(c, cb, return_lse):
    """Run flex_call's descriptor: out (B, H, Sq, Dv) and lse (B, H, Sq) or
    None, float32; a mod's exception, then the library's status, raised."""
    from . import _check, _view, _fptr
    B, H, Sq, Sk, D, Dv = c.shape
    out = np.empty((B, H, Sq, Dv), np.float32)
    lse = np.empty((B, H, Sq), np.float32) if return_lse else None
    st = lib.attn_sdpa_forward(ctypes.byref(c.desc), _view(c.q), _view(c.k), _view(c.v), _view(out), _fptr(lse))
    cb.raise_if_failed()
    _check(st, "flex_attention")
    return out, lse


def flex_attention(query, key, value, score_mod=None, block_mask=None, scale=None, enable_gqa=False,
                   return_lse=False, kernel_options=None, *, math="strict", impl="auto"):
    """FlexAttention on numpy arrays: softmax(score_mod(scale q k^T)) v over
    the pairs block_mask keeps (its full blocks, its partial blocks where
    its mask_mod says so). query (B, H, Sq, D), key (B, Hkv, Sk, D), value
    (B, Hkv, Sk, Dv) float32; Hkv < H needs enable_gqa=True. scale: default
    1 / sqrt(D). Rows that keep no key give zeros (lse -inf). Returns out
    (B, H, Sq, Dv) float32, and the natural-log lse (B, H, Sq) if
    return_lse. kernel_options is accepted and ignored; math and impl as
    libattn.sdpa's."""
    out, lse = flex_forward(*flex_call(query, key, value, score_mod, block_mask, scale, enable_gqa, _Numpy, math, impl),
                            return_lse)
    return (out, lse) if return_lse else out
