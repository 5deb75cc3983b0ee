"""FlexAttention's gallery on libattn: mods written exactly as for PyTorch.

The patterns of PyTorch's FlexAttention examples (causal, sliding window,
document mask over packed sequences, prefix-LM, ALiBi, softcap, a relative
bias from a captured table) as score_mod / mask_mod functions on numpy
index arrays, run through libattn.flex_attention with block masks, and
checked against softmax(score_mod(q k^T / sqrt(D)) masked) v in float64
numpy. With PyTorch installed, the same mods in torch run through
libattn.torch.flex_attention and its gradients are checked too.

Run: make examples (or, from the repository after make:
PYTHONPATH=python python3 examples/flex_gallery.py)."""
import sys

import numpy as np

import libattn

B, H, D = 2, 4, 32
S = 256 if "--quick" in sys.argv else 1024
rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((B, H, S, D)).astype(np.float32) for _ in range(3))
docs = np.repeat(np.arange(4), S // 4)               # 4 packed sequences
slopes = np.exp2(-8.0 * (np.arange(H) + 1) / H)      # ALiBi
table = rng.standard_normal((H, 2 * S)).astype(np.float32)


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def sliding_window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < 128)


def document(b, h, q_idx, kv_idx):
    return docs[q_idx] == docs[kv_idx]


def prefix(b, h, q_idx, kv_idx):
    return kv_idx < 64


def alibi(score, b, h, q_idx, kv_idx):
    return score + slopes[h] * (kv_idx - q_idx)


def softcap(score, b, h, q_idx, kv_idx):
    return 20.0 * np.tanh(score / 20.0)


def rel_bias(score, b, h, q_idx, kv_idx):
    return score + table[h, q_idx - kv_idx + S]


GALLERY = [("causal", None, causal), ("sliding window 128", None, sliding_window),
           ("document mask", None, libattn.and_masks(document, causal)),
           ("prefix-LM", None, libattn.or_masks(prefix, causal)), ("ALiBi", alibi, causal),
           ("softcap", softcap, None), ("relative bias (captured table)", rel_bias, causal)]


def oracle(score_mod, mask_mod):
    s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(D)
    idx = (np.arange(B)[:, None, None, None], np.arange(H)[None, :, None, None],
           np.arange(S)[None, None, :, None], np.arange(S)[None, None, None, :])
    if score_mod is not None:
        s = score_mod(s, *idx)
    if mask_mod is not None:
        s = np.where(mask_mod(*idx), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)


worst = 0.0
for name, score_mod, mask_mod in GALLERY:
    bm = libattn.create_block_mask(mask_mod, None, None, S, S) if mask_mod else None
    out = libattn.flex_attention(q, k, v, score_mod=score_mod, block_mask=bm)
    err = float(np.abs(out - oracle(score_mod, mask_mod)).max())
    worst = max(worst, err)
    print("%-32s max |libattn - float64| %.2e%s" % (name, err, "  (%s)" % bm if bm else ""))

try:
    import torch
    import libattn.torch as lat
except ImportError:
    torch = None
if torch is not None:  # the same mods in torch code, differentiable (the table too)
    tq, tk, tv = (torch.from_numpy(x).requires_grad_() for x in (q, k, v))
    ttable = torch.from_numpy(table).requires_grad_()

    def t_rel_bias(score, b, h, q_idx, kv_idx):
        return score + ttable[h, q_idx - kv_idx + S]

    bm = lat.create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, S, S)
    out = lat.flex_attention(tq, tk, tv, score_mod=t_rel_bias, block_mask=bm)
    out.sum().backward()
    q64, k64, v64, t64 = (x.detach().double().requires_grad_() for x in (tq, tk, tv, ttable))
    i = torch.arange(S)
    s = q64 @ k64.transpose(-1, -2) / D ** 0.5 + t64[:, i[:, None] - i[None, :] + S]
    ref = torch.softmax(s.masked_fill(i[:, None] < i[None, :], float("-inf")), -1) @ v64
    ref.sum().backward()
    gerr = max(float((a.grad.double() - b.grad).abs().max()) for a, b in ((tq, q64), (tk, k64), (tv, v64),
                                                                         (ttable, t64)))
    print("%-32s max |grad - float64| %.2e (q, k, v and the table)" % ("torch autograd", gerr))
    worst = max(worst, gerr / 10)
print("check: the gallery equals float64 FlexAttention (worst %.2e, tolerance 1e-04): %s" %
      (worst, "ok" if worst < 1e-4 else "FAILED"))
sys.exit(0 if worst < 1e-4 else 1)
