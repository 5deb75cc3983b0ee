#!/usr/bin/env python3
"""Ring attention scaling model (docs/PERFORMANCE.md, "Ring attention").

Per step of the zigzag causal forward on N ranks (S tokens, H query heads,
Hkv kv heads, head size D, chunks of c = S / 2N rows):
  compute  C = 2 * 4 H c^2 D / (R * k(c))      two visible c x c chunk pairs per step
  message  M = 2 Hkv (S / N) D b / W            K and V of one shard, b bytes per element
  overhead o = p * (2 Hkv (S/N) D b)            packing and merging, measured per byte
  step     T = max(C, M) + o                    the transfer runs while the blocks compute
  efficiency E = C / T                          (1 when every message hides behind compute)
The backward runs two rings (statistics: the K/V message; gradients: K/V plus
fp32 dK/dV) with about twice the compute per step: E_bwd = 2C / (max(2C/2, M) +
max(2C/2, 2M) + 3o) in the same terms. R is the per-rank fused-kernel rate,
k(c) its efficiency on c x c blocks relative to long sequences, both measured
with `attn bench` (bench/results/ring-*.jsonl); W the link bandwidth.
usage: ring_model.py [R_GFLOPS] [LINK_GBITS]"""
import sys

R = float(sys.argv[1]) if len(sys.argv) > 1 else 120.0   # GFLOP/s per rank, fused forward
W = (float(sys.argv[2]) if len(sys.argv) > 2 else 25.0) / 8 * 1e9  # bytes/s
P = 0.24e-3 / 1e6          # s per byte of a shard: packing + merge, measured (8 ms per 33.5 MB step)


def k(c):  # fused forward efficiency on c x c blocks relative to long sequences (measured, 1 thread)
    return 0.91 if c <= 1024 else 0.97 if c <= 2048 else 1.0


def model(S, N, H, Hkv, D, b):
    c = S / (2 * N)
    C = 2 * 4 * H * c * c * D / (R * 1e9 * k(c))
    nbytes = 2 * Hkv * (S / N) * D * b
    M, o = nbytes / W, P * nbytes
    Tf = max(C, M) + o
    Tb = max(C, M) + max(C, 2 * M) + 3 * o
    return C, M, o, C * k(c) / Tf, 2 * C * k(c) / Tb


print("R = %.0f GFLOP/s per rank, link %.1f Gb/s" % (R, W * 8 / 1e9))
print("| ranks | S | H/Hkv | K/V | compute/step | message/step | efficiency fwd | efficiency bwd |")
print("|---|---|---|---|---|---|---|---|")
for (H, Hkv, b, name) in ((32, 32, 4, "f32"), (32, 8, 2, "bf16")):
    for N in (8, 64, 512):
        S = 1 << 20
        C, M, o, Ef, Eb = model(S, N, H, Hkv, 128, b)
        print("| %d | 1M | %d/%d | %s | %.3g s | %.3g ms | %.1f%% | %.1f%% |" % (N, H, Hkv, name, C, M * 1e3,
                                                                              100 * Ef, 100 * Eb))
