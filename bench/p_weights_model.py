"""A model of decode's integer P V over q4_0 and q8_0 values under the math
modes (docs/SEMANTICS.md, "The math modes on integer caches"): how far the
weights' rounding moves the error, for the weights the library uses and for
the cheaper ones it does not.

Each key's weight P_j d_j (P unnormalized, d_j the key's block scale) is
rounded per query row, block of 32 columns and 64 keys against the group's
largest |weight|: to 16-bit integers (the library: q = nearbyint(w 32767 / a)),
to bf16 (an earlier form), or to 8-bit integers (q = nearbyint(w 127 / a):
VPDPBUSD would take four keys a lane, half the products of the 16-bit
weights). The rest is the library's arithmetic in float64: q quantized per
32-value block as q8_0, Q K^T exact on the stored values, P unnormalized
against the row's maximum. Cases as tests/test_math.c draws them (q and k
uniform in [-1.5, 1.5), v in [-1, 1), stored as the format, D 64, 200 keys;
four query rows). The error of a case: the largest |out - ref| over its
rows and columns, ref float64 attention over the stored values. The
yardstick is the same arithmetic with P unrounded (float weights): the math
modes' rule allows a path twice its error (test_math).

One JSON line per value format and weight form: the errors' median and
largest, and per case the error over the yardstick's (median, largest, and
the cases past 2).
usage: python3 bench/p_weights_model.py [--cases N] [--seed S]
(numpy; not run by make)"""
import argparse
import json

import numpy as np


def f16(x):
    return np.float64(np.float16(x))


def store(x, fmt):
    """x's rows stored as q4_0 or q8_0 (ggml's rounding): the codes less their offset, and the block scales"""
    b = x.reshape(-1, 32)
    if fmt == "q4_0":  # d = the value of largest magnitude / -8; codes floor(x / d + 8.5) in 0..15
        mx = b[np.arange(len(b)), np.argmax(np.abs(b), axis=1)]
        d = mx / -8.0
        inv = np.divide(1.0, d, out=np.zeros_like(d), where=d != 0)
        return np.clip(np.floor(b * inv[:, None] + 8.5), 0, 15) - 8, f16(d)
    d = np.abs(b).max(axis=1) / 127  # q8_0: d = max |x| / 127, codes round(x / d)
    return np.round(np.divide(b, d[:, None], out=np.zeros_like(b), where=d[:, None] != 0)), f16(d)


def rounded(w, form):
    """the weights w (rows x keys) as P V multiplies them"""
    if form == "float":
        return w
    if form == "bf16":  # nearest even on float32's bits
        bits = np.float32(w).view(np.uint32).astype(np.uint64)
        r = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
        return r.astype(np.uint32).view(np.float32).astype(np.float64)
    top = {"int16": 32767, "int8": 127}[form]
    a = np.abs(w).max(axis=1, keepdims=True)
    a = np.where(a > 0, a, 1)
    return np.round(w * top / a) * (a / top)


def case_error(rng, fmt, form, R=4, D=64, T=200):
    q = rng.uniform(-1.5, 1.5, (R, D))
    kc, kd = store(rng.uniform(-1.5, 1.5, (T, D)), fmt)
    vc, vd = store(rng.uniform(-1.0, 1.0, (T, D)), fmt)
    K = (kc * kd[:, None]).reshape(T, D)
    V = (vc * vd[:, None]).reshape(T, D)
    scale = 1 / np.sqrt(D)
    s = q @ K.T * scale
    p = np.exp(s - s.max(axis=1, keepdims=True))
    ref = p / p.sum(axis=1, keepdims=True) @ V
    qc, qd = store(q, "q8_0")  # the query as q8_0 blocks
    S = np.float32((qc * qd[:, None]).reshape(R, D) @ K.T * scale)
    P = np.exp(np.float64(S - S.max(axis=1, keepdims=True)))
    O = np.zeros((R, D))
    vcb, vdb = vc.reshape(T, D // 32, 32), vd.reshape(T, D // 32)
    for j0 in range(0, T, 64):  # the weights' groups: 64 keys, a block of 32 columns, a row
        j1 = min(T, j0 + 64)
        for b in range(D // 32):
            O[:, 32 * b:32 * b + 32] += rounded(P[:, j0:j1] * vdb[None, j0:j1, b], form) @ vcb[j0:j1, b]
    return np.abs(O / P.sum(axis=1, keepdims=True) - ref).max()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--seed", type=int, default=5)
    a = ap.parse_args()
    for fmt in ("q4_0", "q8_0"):
        errs = {}
        for form in ("float", "int16", "bf16", "int8"):
            rng = np.random.default_rng(a.seed)  # the same cases for every form
            errs[form] = np.array([case_error(rng, fmt, form) for _ in range(a.cases)])
        for form in ("int16", "bf16", "int8"):
            e, r = errs[form], errs[form] / errs["float"]
            print(json.dumps({"op": "p-weights-model", "v_format": fmt, "weights": form, "cases": a.cases,
                              "seed": a.seed, "err_median": float("%.3g" % np.median(e)),
                              "err_max": float("%.3g" % e.max()),
                              "yardstick_err_max": float("%.3g" % errs["float"].max()),
                              "ratio_median": round(float(np.median(r)), 2), "ratio_max": round(float(r.max()), 2),
                              "cases_over_2": int((r > 2).sum())}))


if __name__ == "__main__":
    main()
