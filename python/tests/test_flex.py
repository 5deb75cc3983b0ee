"""Programmable attention (libattn.flex_attention, create_block_mask and the
helpers; libattn.torch's with autograd) against a float64 oracle written
from FlexAttention's definition: scores = scale q k^T, then score_mod,
then pairs the mask hides to -inf, softmax (a row that keeps nothing gives
zeros), times v. The FlexAttention gallery's patterns, GQA, block sizes,
math modes, the block mask's fields, and the refusals."""
import math

import numpy as np
import pytest

import libattn

S_DOC = 4  # documents of the packed-sequence pattern


def oracle(q, k, v, score_mod=None, mask_mod=None, scale=None):
    """float64 FlexAttention from its definition; out and the natural-log lse."""
    q, k, v = (np.asarray(t, np.float64) for t in (q, k, v))
    B, H, Sq, D = q.shape
    G = H // k.shape[1]
    k, v = np.repeat(k, G, 1), np.repeat(v, G, 1)
    Sk = k.shape[2]
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * (1.0 / math.sqrt(D) if scale is None else scale)
    b = np.arange(B)[:, None, None, None]
    h = np.arange(H)[None, :, None, None]
    qi = np.arange(Sq)[None, None, :, None]
    ki = np.arange(Sk)[None, None, None, :]
    if score_mod is not None:
        s = np.broadcast_to(score_mod(s, b, h, qi, ki), s.shape).astype(np.float64)
    if mask_mod is not None:
        s = np.where(np.broadcast_to(mask_mod(b, h, qi, ki), s.shape), s, -np.inf)
    m = s.max(-1, keepdims=True)
    dead = ~np.isfinite(m)
    p = np.where(dead, 0.0, np.exp(s - np.where(dead, 0.0, m)))
    l = p.sum(-1, keepdims=True)
    out = np.where(dead, 0.0, p / np.where(dead, 1.0, l)) @ v
    lse = np.where(dead, -np.inf, m + np.log(np.where(dead, 1.0, l)))[..., 0]
    return out, lse


# ---- the gallery (numpy mods; the oracle evaluates them on whole grids) ----

def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def sliding_window(window):
    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx <= window)
    return mask_mod


def document(doc_ids):
    def mask_mod(b, h, q_idx, kv_idx):
        return doc_ids[q_idx] == doc_ids[kv_idx]
    return mask_mod


def prefix_lm(prefix):
    def prefix_mask(b, h, q_idx, kv_idx):
        return kv_idx <= prefix
    return libattn.or_masks(prefix_mask, causal)


def alibi(H):
    slopes = np.exp2(-8.0 * (np.arange(H) + 1) / H)

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)
    return score_mod


def softcap(cap):
    def score_mod(score, b, h, q_idx, kv_idx):
        return cap * np.tanh(score / cap)
    return score_mod


def relative(score, b, h, q_idx, kv_idx):
    return score + (q_idx - kv_idx) * 0.01


def captured_table(H, S, seed=5):
    table = np.random.default_rng(seed).standard_normal((H, 2 * S)).astype(np.float32)

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + table[h, q_idx - kv_idx + S]
    return score_mod


PATTERNS = ["causal", "sliding_window", "document", "prefix_lm", "alibi", "softcap", "relative", "captured",
            "alibi+causal", "softcap+document"]


def pattern(name, H, S):
    doc = (np.arange(S) * S_DOC) // S
    return {"causal": (None, causal), "sliding_window": (None, sliding_window(17)),
            "document": (None, document(doc)), "prefix_lm": (None, prefix_lm(S // 5)),
            "alibi": (alibi(H), None), "softcap": (softcap(4.0), None), "relative": (relative, None),
            "captured": (captured_table(H, S), None), "alibi+causal": (alibi(H), causal),
            "softcap+document": (softcap(4.0), document(doc))}[name]


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("name", PATTERNS)
@pytest.mark.parametrize("shape", [(1, 2, 2, 64, 16), (2, 4, 2, 130, 32), (1, 8, 1, 300, 64), (2, 2, 2, 9, 8)])
def test_gallery(name, shape):
    B, H, Hkv, S, D = shape
    q, k, v = rand(B, H, S, D, seed=1), rand(B, Hkv, S, D, seed=2), rand(B, Hkv, S, D, seed=3)
    score_mod, mask_mod = pattern(name, H, S)
    for bs in (128, (16, 64), 7):
        bm = libattn.create_block_mask(mask_mod, None, None, S, S, BLOCK_SIZE=bs) if mask_mod else None
        out, lse = libattn.flex_attention(q, k, v, score_mod=score_mod, block_mask=bm, enable_gqa=Hkv != H,
                                          return_lse=True)
        ref, rlse = oracle(q, k, v, score_mod, mask_mod)
        np.testing.assert_allclose(out, ref, rtol=2e-4, atol=2e-5, err_msg="%s %s %s" % (name, shape, bs))
        np.testing.assert_allclose(lse, rlse, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("impl", ["ref", "fast"])
def test_decode_shapes(impl):
    """a few query rows (decode) against many keys, Sq != Sk"""
    q, k, v = rand(2, 4, 3, 32, seed=4), rand(2, 2, 200, 32, seed=5), rand(2, 2, 200, 32, seed=6)

    def late(b, h, q_idx, kv_idx):  # each row sees a window ending at 197 + q_idx
        return (kv_idx <= 197 + q_idx) & (kv_idx > 150 + q_idx - 20 * b)
    bm = libattn.create_block_mask(late, 2, None, 3, 200, BLOCK_SIZE=(1, 16))
    out = libattn.flex_attention(q, k, v, score_mod=relative, block_mask=bm, enable_gqa=True, impl=impl)
    ref, _ = oracle(q, k, v, relative, late)
    np.testing.assert_allclose(out, ref, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("math_mode", ["data", "bf16"])
def test_math_modes(math_mode):
    q, k, v = rand(1, 2, 100, 32, seed=7), rand(1, 2, 100, 32, seed=8), rand(1, 2, 100, 32, seed=9)
    bm = libattn.create_block_mask(causal, None, None, 100, 100, BLOCK_SIZE=32)
    out = libattn.flex_attention(q, k, v, score_mod=softcap(4.0), block_mask=bm, math=math_mode)
    ref, _ = oracle(q, k, v, softcap(4.0), causal)
    tol = 2e-4 if math_mode == "data" else 3e-2  # data on float32 is strict; bf16 rounds the operands
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)


def test_block_mask_fields():
    bm = libattn.create_block_mask(causal, None, 2, 200, 250, BLOCK_SIZE=(32, 64))
    assert bm.shape == (1, 2, 200, 250) and bm.BLOCK_SIZE == (32, 64) and bm.seq_lengths == (200, 250)
    nq, nkv = 7, 4
    assert bm.kv_num_blocks.shape == (1, 2, nq) and bm.kv_indices.shape == (1, 2, nq, nkv)
    for i in range(nq):
        r0, r1 = 32 * i, min(32 * i + 31, 199)
        full = [j for j in range(nkv) if 64 * j + 63 <= r0 and 32 * i + 31 < 200]
        part = [j for j in range(nkv) if 64 * j <= r1 and j not in full]
        assert list(bm.full_kv_indices[0, 1, i, :bm.full_kv_num_blocks[0, 1, i]]) == full
        assert list(bm.kv_indices[0, 1, i, :bm.kv_num_blocks[0, 1, i]]) == part
    for j in range(nkv):  # the transposed lists: the query blocks that see key block j
        seen = [i for i in range(nq) if j in list(bm.kv_indices[0, 1, i, :bm.kv_num_blocks[0, 1, i]])]
        assert list(bm.q_indices[0, 1, j, :bm.q_num_blocks[0, 1, j]]) == seen
        seen = [i for i in range(nq) if j in list(bm.full_kv_indices[0, 1, i, :bm.full_kv_num_blocks[0, 1, i]])]
        assert list(bm.full_q_indices[0, 1, j, :bm.full_q_num_blocks[0, 1, j]]) == seen
    dense = bm.to_dense()
    assert dense.shape == (1, 2, nq, nkv) and dense[0, 0, 0, 1] == 0 and dense[0, 0, 6, 3] == 1
    assert 0 < bm.sparsity() < 100 and "BlockMask" in repr(bm)
    again = libattn.BlockMask.from_kv_blocks(bm.kv_num_blocks, bm.kv_indices, bm.full_kv_num_blocks,
                                             bm.full_kv_indices, BLOCK_SIZE=(32, 64), mask_mod=causal,
                                             seq_lengths=(200, 250))
    assert (again.to_dense() == dense).all()
    q, k, v = rand(1, 2, 200, 16, seed=1), rand(1, 2, 250, 16, seed=2), rand(1, 2, 250, 16, seed=3)
    np.testing.assert_array_equal(libattn.flex_attention(q, k, v, block_mask=again),
                                  libattn.flex_attention(q, k, v, block_mask=bm))


def test_arrays_without_mask_mod():
    """partial blocks without a mask_mod: every pair of them takes part; unlisted blocks: none"""
    num = np.array([[[1, 2]]], np.int32)
    idx = np.array([[[[0, 0], [1, 0]]]], np.int32)
    bm = libattn.BlockMask.from_kv_blocks(num, idx, BLOCK_SIZE=8, seq_lengths=(16, 16))
    q, k, v = rand(1, 1, 16, 8, seed=1), rand(1, 1, 16, 8, seed=2), rand(1, 1, 16, 8, seed=3)
    keep = np.zeros((16, 16), bool)
    keep[:8, :8] = True
    keep[8:, :] = True
    ref, _ = oracle(q, k, v, None, lambda b, h, i, j: keep[i, j])
    np.testing.assert_allclose(libattn.flex_attention(q, k, v, block_mask=bm), ref, rtol=2e-4, atol=2e-5)


def test_helpers():
    m = libattn.create_mask(libattn.and_masks(causal, sliding_window(3)), None, 2, 6, 6)
    assert m.shape == (1, 2, 6, 6) and m.dtype == bool
    i = np.arange(6)
    np.testing.assert_array_equal(m[0, 1], (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] <= 3))
    assert libattn.create_mask(libattn.noop_mask, 2, 1, 3, 4).all()
    o = libattn.create_mask(libattn.or_masks(causal, lambda b, h, q, k: k == 5), 1, 1, 6, 6)[0, 0]
    assert o[0, 5] and o[3, 2] and not o[0, 1]
    with pytest.raises(ValueError):
        libattn.and_masks()


def test_nan_rule_and_dead_rows():
    q, k, v = rand(1, 1, 20, 8, seed=1), rand(1, 1, 20, 8, seed=2), rand(1, 1, 20, 8, seed=3)

    def nan_at(score, b, h, q_idx, kv_idx):
        return np.where((q_idx == 3) & (kv_idx == 2), np.nan, score)

    def no_row0(b, h, q_idx, kv_idx):
        return q_idx != 0
    out = libattn.flex_attention(q, k, v, score_mod=nan_at)
    assert np.isnan(out[0, 0, 3]).all() and np.isfinite(np.delete(out[0, 0], 3, 0)).all()
    bm = libattn.create_block_mask(libattn.and_masks(no_row0, causal), None, None, 20, 20, BLOCK_SIZE=4)
    out, lse = libattn.flex_attention(q, k, v, score_mod=nan_at, block_mask=bm, return_lse=True)
    assert (out[0, 0, 0] == 0).all() and lse[0, 0, 0] == -np.inf  # row 0 keeps nothing: zeros
    assert np.isnan(out[0, 0, 3]).all()  # (3, 2) is kept: the NaN rule
    bm2 = libattn.create_block_mask(lambda b, h, qi, ki: ki != 2, None, None, 20, 20, BLOCK_SIZE=4)
    out2 = libattn.flex_attention(q, k, v, score_mod=nan_at, block_mask=bm2)
    assert np.isfinite(out2).all()  # a NaN on a hidden pair does nothing


def test_errors():
    q, k, v = rand(1, 2, 16, 8), rand(1, 1, 16, 8), rand(1, 1, 16, 8)
    with pytest.raises(ValueError, match="enable_gqa"):
        libattn.flex_attention(q, k, v)
    bm = libattn.create_block_mask(causal, None, None, 32, 16)
    with pytest.raises(ValueError, match="q_len = 32"):
        libattn.flex_attention(q, k, v, block_mask=bm, enable_gqa=True)
    with pytest.raises(TypeError, match="BlockMask"):
        libattn.flex_attention(q, k, v, block_mask=np.ones((2, 2)), enable_gqa=True)

    def boom(score, b, h, q_idx, kv_idx):
        raise KeyError("inside the mod")
    with pytest.raises(KeyError, match="inside the mod"):
        libattn.flex_attention(q, k, v, score_mod=boom, enable_gqa=True)
    with pytest.raises(ZeroDivisionError):
        libattn.create_block_mask(lambda b, h, qi, ki: (1 // 0) > ki, None, None, 16, 16)
    with pytest.raises(ValueError, match=r"kv_indices\[0\]\[0\] = 3 is not a key block"):
        libattn.BlockMask.from_kv_blocks(np.array([[[1]]]), np.array([[[[3]]]]), BLOCK_SIZE=16,
                                         seq_lengths=(16, 16))
    with pytest.raises(ValueError, match="q_block = 0"):
        libattn.create_block_mask(causal, None, None, 16, 16, BLOCK_SIZE=0)
    with pytest.raises(NotImplementedError):  # the numpy API has no backward: libattn.torch's has
        from libattn._flex import _Numpy
        _Numpy.score(relative, np.zeros((1, 1), np.float32), (0, 0, 0, 0), True)


# ---- PyTorch: mods written for torch.nn.attention.flex_attention, autograd ----

def test_torch_autograd():
    torch = pytest.importorskip("torch")
    import libattn.torch as lat
    torch.manual_seed(0)
    B, H, Hkv, S, D = 2, 4, 2, 150, 16
    q = torch.randn(B, H, S, D, requires_grad=True)
    k = torch.randn(B, Hkv, S, D, requires_grad=True)
    v = torch.randn(B, Hkv, S, D, requires_grad=True)
    table = torch.randn(H, 2 * S, requires_grad=True)
    doc = torch.arange(S) * 3 // S

    def rel_bias(score, b, h, q_idx, kv_idx):  # a captured tensor, indexed by index tensors
        return score + table[h, q_idx - kv_idx + S]

    def soft(score, b, h, q_idx, kv_idx):
        return 4.0 * torch.tanh(score / 4.0) + torch.exp2(-(q_idx - kv_idx).abs().float() / 64)

    def doc_causal(b, h, q_idx, kv_idx):
        return torch.where(doc[q_idx] == doc[kv_idx], q_idx >= kv_idx, torch.zeros((), dtype=torch.bool))

    for score_mod in (rel_bias, soft):
        bm = lat.create_block_mask(doc_causal, None, None, S, S, BLOCK_SIZE=32)
        assert isinstance(bm.kv_indices, torch.Tensor) and bm.to_dense().shape == (1, 1, 5, 5)
        out = lat.flex_attention(q, k, v, score_mod=score_mod, block_mask=bm, enable_gqa=True)
        go = torch.randn_like(out)
        for t in (q, k, v, table):
            t.grad = None
        (out * go).sum().backward()
        got = [t.grad.clone() if t.grad is not None else torch.zeros_like(t) for t in (q, k, v, table)]
        qd, kd, vd, td = (t.detach().double().requires_grad_() for t in (q, k, v, table))
        G = H // Hkv
        s = (qd @ kd.repeat_interleave(G, 1).transpose(-1, -2)) / math.sqrt(D)
        i = torch.arange(S)
        if score_mod is rel_bias:
            s = s + td[:, i[:, None] - i[None, :] + S][None]
        else:
            s = 4.0 * torch.tanh(s / 4.0) + torch.exp2(-(i[:, None] - i[None, :]).abs().double() / 64)
        keep = (doc[:, None] == doc[None, :]) & (i[:, None] >= i[None, :])
        ref = torch.softmax(s.masked_fill(~keep, float("-inf")), -1) @ vd.repeat_interleave(G, 1)
        (ref * go.double()).sum().backward()
        assert (out.double() - ref).abs().max() < 1e-4
        for name, a, b in zip(("q", "k", "v", "table"), got, (qd.grad, kd.grad, vd.grad, td.grad)):
            b = torch.zeros_like(a, dtype=torch.float64) if b is None else b
            assert (a.double() - b).abs().max() < 2e-4 * (1 + b.abs().max()), name
        if score_mod is soft:
            assert (got[3] == 0).all()  # soft captures nothing


def test_torch_helpers_and_errors():
    torch = pytest.importorskip("torch")
    import libattn.torch as lat
    m = lat.create_mask(lat.and_masks(lambda b, h, q, k: q >= k, lat.noop_mask), 1, 1, 5, 5)
    assert m.dtype == torch.bool and (m[0, 0] == torch.ones(5, 5, dtype=torch.bool).tril()).all()
    q = torch.randn(1, 2, 8, 4, requires_grad=True)

    def scaled(score, b, h, q_idx, kv_idx):
        return score * 2
    out, lse = lat.flex_attention(q, q, q, score_mod=scaled, return_lse=True)
    ref, rlse = oracle(q.detach().numpy(), q.detach().numpy(), q.detach().numpy(), lambda s, *a: s * 2)
    np.testing.assert_allclose(out.detach().numpy(), ref, rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(lse.numpy(), rlse, rtol=1e-5, atol=1e-4)
    with pytest.raises(ValueError, match="enable_gqa"):
        lat.flex_attention(q, q[:, :1], q[:, :1])


def test_stored_partial_blocks():
    """create_block_mask keeps its partial blocks' pairs: attention calls the Python mask_mod no more"""
    calls = [0]

    def counted(b, h, q_idx, kv_idx):
        calls[0] += 1
        return q_idx >= kv_idx
    q, k, v = rand(1, 2, 100, 16, seed=1), rand(1, 2, 100, 16, seed=2), rand(1, 2, 100, 16, seed=3)
    bm = libattn.create_block_mask(counted, None, None, 100, 100, BLOCK_SIZE=16)
    made = calls[0]
    out = libattn.flex_attention(q, k, v, block_mask=bm)
    assert calls[0] == made  # no call while attending
    np.testing.assert_array_equal(out, libattn.sdpa(q, k, v, causal="top-left"))
    old = libattn._flex.STORED_BYTES
    libattn._flex.STORED_BYTES = 0  # nothing stored: the mod decides each partial pair at attention time
    try:
        bm2 = libattn.create_block_mask(counted, None, None, 100, 100, BLOCK_SIZE=16)
        made = calls[0]
        np.testing.assert_array_equal(libattn.flex_attention(q, k, v, block_mask=bm2), out)
        assert calls[0] > made
    finally:
        libattn._flex.STORED_BYTES = old
