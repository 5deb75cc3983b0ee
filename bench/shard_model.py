#!/usr/bin/env python3
"""Sharded KV cache decode: cost model (docs/RING.md, "Sharded KV cache").

Per layer and decode step on n machines, a cache of T tokens per sequence
(Hkv kv heads of D values, b bytes each), B sequences, H query heads, Sq rows:
  local  L = 2 B T Hkv D b / (n M)              each machine reads its shard (memory-bound decode)
  agree  A = ceil(log2 n) alpha                 one small all-reduce (the problem and the statuses)
  gather G = ceil(log2 n) alpha + (n - 1) m / W one all-gather of every rank's (out, lse), m = 4 B H Sq (D + 1)
  step   S = L + A + G (+ the merge, n m / 4 multiply-adds: negligible)
A fixed-order tree (reduce in rank order up a binary tree, then broadcast;
not implemented) would cost 2 ceil(log2 n) (alpha + m / W) + A instead of G.
M: a machine's read bandwidth, W: the link, alpha: a message's latency.
usage: shard_model.py [MEM_GBS] [T] [Hkv] [D] [H] [BYTES]"""
import math
import sys

M = float(sys.argv[1]) * 1e9 if len(sys.argv) > 1 else 200e9
T = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 20
Hkv, D, H, b = (int(x) for x in (sys.argv[3:7] + ["8", "128", "64", "2"][len(sys.argv[3:7]):]))
B, Sq, LAYERS = 1, 1, 80

m = 4 * B * H * Sq * (D + 1)
print(f"# layer: {2 * B * T * Hkv * D * b / 1e9:.2f} GB of K/V; a rank's (out, lse): {m} bytes; memory {M / 1e9:.0f} GB/s")
print("| machines | link | local ms | collectives ms (all-gather) | share | tree ms | share | per token, 80 layers |")
print("|---|---|---|---|---|---|---|---|")
for n in (2, 8, 16, 32, 64):
    L = 2 * B * T * Hkv * D * b / n / M
    for gbits, alpha in ((25, 10e-6), (100, 5e-6)):
        W = gbits / 8 * 1e9
        lg = math.ceil(math.log2(n))
        A = lg * alpha
        G = lg * alpha + (n - 1) * m / W
        tree = 2 * lg * (alpha + m / W)
        print(f"| {n} | {gbits} Gb/s | {L * 1e3:.3f} | {(A + G) * 1e3:.3f} | {(A + G) / (L + A + G) * 100:.1f}% | "
              f"{(A + tree) * 1e3:.3f} | {(A + tree) / (L + A + tree) * 100:.1f}% | {(L + A + G) * LAYERS * 1e3:.0f} ms |")
