#!/usr/bin/env python3
"""Golden files for the core attention's inference features (needs python3-torch).

    python3 tests/golden/gen_sdpa_golden.py [OUTDIR]     (default: tests/golden)

Writes sdpa_N.safetensors (q, k, v, grad_out, optional key_mask, seqlens_k,
alibi_slopes; expected out, lse, dq, dk, dv) and sdpa_manifest.txt (one case
per line with the options `attn sdpa` takes). PyTorch computes the expected
tensors in float64 from the float32 inputs, with the semantics written out as
masks (attn.h, docs/SEMANTICS.md):
  - GQA: k, v repeated with repeat_interleave over the head axis (PyTorch's
    enable_gqa convention: query head h reads kv head h // (Hq // Hkv));
  - keys j >= seqlens_k[b] do not exist; off = 0 for top-left causal, else
    Sk_b - Sq; causal: j <= i + off; window: i + off - L <= j <= i + off + R;
  - s = scale * q.k, then softcap * tanh(s / softcap), then
    - slope_h * |i + off - j|; masked scores -inf;
  - a row with no visible key: out 0, lse -inf, zero gradients.
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_golden import save_st  # noqa: E402  (the repo's safetensors writer)

torch.set_num_threads(1)


def visible(B, Sq, Sk, causal, window, seqlens, key_mask):
    vis = torch.zeros(B, 1, Sq, Sk, dtype=torch.bool)
    offs = []
    for b in range(B):
        skb = int(seqlens[b]) if seqlens is not None else Sk
        off = 0 if causal == "top-left" else skb - Sq
        offs.append(off)
        for i in range(Sq):
            for j in range(Sk):
                ok = j < skb
                if causal != "none" and j > i + off:
                    ok = False
                if window is not None:
                    L, R = window
                    if L >= 0 and j < i + off - L:
                        ok = False
                    if R >= 0 and j > i + off + R:
                        ok = False
                if key_mask is not None and bool(key_mask[b, j]):
                    ok = False
                vis[b, 0, i, j] = ok
    return vis, offs


def reference(q, k, v, scale, causal, window, softcap, slopes, seqlens, key_mask):
    B, H, Sq, D = q.shape
    Hkv, Sk = k.shape[1], k.shape[2]
    G = H // Hkv
    kk = k.repeat_interleave(G, dim=1)
    vv = v.repeat_interleave(G, dim=1)
    s = (q @ kk.transpose(-1, -2)) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    vis, offs = visible(B, Sq, Sk, causal, window, seqlens, key_mask)
    if slopes is not None:
        bias = torch.zeros(B, H, Sq, Sk, dtype=s.dtype)
        for b in range(B):
            i = torch.arange(Sq, dtype=s.dtype).view(Sq, 1)
            j = torch.arange(Sk, dtype=s.dtype).view(1, Sk)
            dist = (i + offs[b] - j).abs()
            bias[b] = -slopes.to(s.dtype).view(H, 1, 1) * dist
        s = s + bias
    s = s.masked_fill(~vis, float("-inf"))
    dead = (~vis).all(dim=-1, keepdim=True).expand(B, H, Sq, 1)
    p = torch.softmax(s.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)
    lse = torch.logsumexp(s.masked_fill(dead, 0.0), dim=-1).masked_fill(dead[..., 0], float("-inf"))
    return p @ vv, lse


CASES = [
    # (B, Hq, Hkv, Sq, Sk, D, Dv, causal, window, softcap, alibi, seqlens, key_mask, scale[, input dtype])
    (2, 4, 4, 9, 9, 16, 16, "none", None, 0.0, False, False, False, None),
    (2, 4, 2, 9, 9, 16, 16, "none", None, 0.0, False, False, False, None),        # GQA
    (2, 4, 1, 7, 12, 16, 16, "bottom-right", None, 0.0, False, False, False, None),  # MQA
    (3, 2, 2, 5, 17, 8, 12, "bottom-right", None, 0.0, False, True, False, None),   # seqlens, Dv != D
    (2, 2, 2, 13, 13, 16, 16, "top-left", (4, 0), 0.0, False, False, False, None),  # sliding window
    (2, 2, 2, 11, 11, 16, 16, "none", (3, 2), 0.0, False, False, False, None),      # two-sided window
    (2, 2, 2, 10, 10, 16, 16, "top-left", None, 5.0, False, False, False, None),    # softcap
    (2, 4, 4, 10, 14, 16, 16, "bottom-right", None, 0.0, True, False, False, None),  # ALiBi
    (2, 2, 2, 8, 8, 16, 16, "none", None, 0.0, False, False, True, None),           # padding mask
    (2, 8, 2, 6, 30, 24, 24, "bottom-right", (7, -1), 20.0, True, True, True, 0.3),  # everything at once
    (1, 4, 2, 20, 3, 8, 8, "top-left", (1, 0), 0.0, False, False, False, None),     # rows that see nothing
    (2, 6, 3, 1, 40, 32, 32, "bottom-right", None, 0.0, False, True, False, None),  # decode, ragged cache
    (2, 4, 2, 4, 65, 20, 28, "bottom-right", (16, 0), 8.0, True, True, False, None),  # decode + features
    (1, 2, 1, 33, 50, 64, 64, "top-left", None, 0.0, True, False, True, -0.2),      # negative scale
    # 16-bit inputs (stored F16/BF16; PyTorch upcasts them to float64 for the expected values)
    (2, 4, 2, 17, 17, 32, 32, "top-left", None, 0.0, False, False, False, None, torch.float16),
    (2, 4, 1, 3, 70, 64, 64, "bottom-right", (32, 0), 0.0, True, True, False, None, torch.bfloat16),  # decode
    (1, 8, 4, 40, 40, 16, 16, "none", None, 10.0, False, False, True, None, torch.bfloat16),
]


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    g = torch.Generator().manual_seed(20261122)
    lines = ["# generated by gen_sdpa_golden.py with torch %s (float64 from float32 inputs)" % torch.__version__]
    for n, case in enumerate(CASES):
        B, H, Hkv, Sq, Sk, D, Dv, causal, window, softcap, alibi, sl, km, scale = case[:14]
        in_dtype = case[14] if len(case) > 14 else torch.float32
        q = torch.randn(B, H, Sq, D, generator=g).to(in_dtype)
        k = torch.randn(B, Hkv, Sk, D, generator=g).to(in_dtype)
        v = torch.randn(B, Hkv, Sk, Dv, generator=g).to(in_dtype)
        go = torch.randn(B, H, Sq, Dv, generator=g)
        tensors = {"q": q, "k": k, "v": v, "grad_out": go}
        seqlens = key_mask = slopes = None
        if sl:
            seqlens = torch.tensor([Sk] + [int(x) for x in torch.randint(0, Sk + 1, (B - 1,), generator=g)],
                                   dtype=torch.int64)
            tensors["seqlens_k"] = seqlens
        if km:
            key_mask = torch.rand(B, Sk, generator=g) < 0.25
            tensors["key_mask"] = key_mask
        if alibi:
            slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)], dtype=torch.float32)
            tensors["alibi_slopes"] = slopes
        sc = scale if scale is not None else 1.0 / math.sqrt(D)
        q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
        out, lse = reference(q64, k64, v64, sc, causal, window, softcap, slopes, seqlens, key_mask)
        out.backward(go.double())
        tensors.update({"out": out.detach().float(), "lse": lse.detach().float(), "dq": q64.grad.float(),
                        "dk": k64.grad.float(), "dv": v64.grad.float()})
        name = "sdpa_%d" % n
        save_st(os.path.join(outdir, name + ".safetensors"), tensors)
        opts = "--causal %s" % causal
        if scale is not None:
            opts += " --scale %r" % scale
        if window is not None:
            opts += " --window-left %d --window-right %d" % window
        if softcap > 0:
            opts += " --softcap %r" % softcap
        lines.append("case=%s %s" % (name, opts))
    with open(os.path.join(outdir, "sdpa_manifest.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %d sdpa cases to %s" % (len(CASES), outdir))


if __name__ == "__main__":
    main()
