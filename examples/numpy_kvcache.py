"""Incremental decoding on numpy arrays with libattn.KVCache (f16 storage).

One attention layer with grouped-query attention (8 query heads, 2 key/value
heads) over a batch of 3 sequences: the prompt's keys and values go into a
float16 cache in one append, then 24 tokens are decoded one at a time (each
step appends the new token's key and value and attends over the cache). The
check: every step's output equals softmax(q k^T / sqrt(D)) v in float64
numpy over the whole sequence so far, with the keys and values rounded to
float16 as the cache stores them.

Run: make examples (or, from the repository after make:
PYTHONPATH=python python3 examples/numpy_kvcache.py)."""
import sys

import numpy as np

import libattn

B, H, HKV, D, PROMPT = 3, 8, 2, 64, 40
STEPS = 6 if "--quick" in sys.argv else 24

rng = np.random.default_rng(0)
total = PROMPT + STEPS
# the layer's projections of every token, made up front (a model would compute them step by step)
q_all = rng.standard_normal((B, H, total, D), np.float32)
k_all = rng.standard_normal((B, HKV, total, D), np.float32)
v_all = rng.standard_normal((B, HKV, total, D), np.float32)

cache = libattn.KVCache(B, HKV, capacity=total, head_dim=D, dtype="f16")
cache.append(k_all[:, :, :PROMPT], v_all[:, :, :PROMPT])  # the prompts
worst = 0.0
for t in range(PROMPT, total):
    cache.append(k_all[:, :, t:t + 1], v_all[:, :, t:t + 1])  # the new token's key and value
    out = cache.attend(q_all[:, :, t:t + 1])  # (B, H, 1, D): the new token's attention
    # reference: softmax(q k^T / sqrt(D)) v in float64 numpy over all keys so far,
    # rounded to float16 as the cache stores them (each kv head serves H / HKV query heads)
    k16 = np.repeat(k_all[:, :, :t + 1].astype(np.float16).astype(np.float64), H // HKV, axis=1)
    v16 = np.repeat(v_all[:, :, :t + 1].astype(np.float16).astype(np.float64), H // HKV, axis=1)
    s = q_all[:, :, t:t + 1].astype(np.float64) @ k16.transpose(0, 1, 3, 2) / np.sqrt(D)
    w = np.exp(s - s.max(-1, keepdims=True))
    ref = (w / w.sum(-1, keepdims=True)) @ v16
    worst = max(worst, float(np.abs(out - ref).max()))

print("decoded %d tokens for %d sequences from an f16 cache of %d tokens (kernels: %s)"
      % (STEPS, B, len(cache), libattn.kernel_name()))
ok = worst < 1e-4
print("check: max |cache - float64 attention| = %.2e (tolerance 1e-04): %s" % (worst, "ok" if ok else "FAILED"))
sys.exit(0 if ok else 1)
