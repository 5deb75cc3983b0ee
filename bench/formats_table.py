#!/usr/bin/env python3
"""The decode formats table of docs/PERFORMANCE.md from the JSON lines of
`attn bench --decode --formats ... --json` runs.

    python3 bench/formats_table.py [--own] SAMPLE.jsonl [SAMPLE.jsonl ...]

Each file is one sample (one sitting: several runs of the same command at
one commit). Within a sample a cell is the median over its runs; the table
gives the median of the samples' medians and, in parentheses, their range
(one sample: the range of its runs). Columns: the step's time relative to
bf16's in the same run, and the step's GB/s over the read bandwidth
measured beside it (--own: over the read of the cache's own storage, the
very bytes the step reads; records that have it), at each rows-a-kv-head
(R) and thread count present.
Below the table: in how many samples each format meets its step target at
four rows (4-bit 0.35x bf16's step, 8-bit 0.6x; each sample's median to two
decimals, as the table prints it)."""
import json
import os
import statistics as st
import sys

ORDER = ["bfloat16", "float16", "fp8_e5m2", "fp8_e4m3", "int8", "q8_0", "int4", "q4_0"]
NAME = {"bfloat16": "bf16", "float16": "f16", "fp8_e5m2": "fp8 e5m2", "fp8_e4m3": "fp8 e4m3"}
TARGET = {"int4": 0.35, "q4_0": 0.35, "int8": 0.6, "q8_0": 0.6, "fp8_e5m2": 0.6, "fp8_e4m3": 0.6}


def sample(path, read):
    """(format, R, threads, key) -> the runs' values in one file (key "bytes": the step's bytes read)"""
    runs = {}
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            if r.get("op") != "decode-formats" or read not in r:
                continue
            cell = (r["kv_dtype"], r["H"] // r["Hkv"], r["threads"])
            for key in ("step_to_bf16", read, "bytes"):
                runs.setdefault(cell + (key,), []).append(r[key])
    return runs


def main(args):
    paths = [a for a in args if a != "--own"]
    read = "ratio_to_own_read" if "--own" in args else "ratio_to_read"
    if not paths:
        sys.exit(__doc__)
    samples = [sample(p, read) for p in paths]
    cells = {}
    for s in samples:
        for key, v in s.items():
            cells.setdefault(key, []).append(v)
    cols = sorted({(k[1], k[2]) for k in cells}, key=lambda c: (c[1], c[0]))

    def fmt(key):
        v = cells.get(key)
        if not v:
            return ""
        meds = [st.median(x) for x in v] if len(samples) > 1 else v[0]
        m = st.median(meds)
        lo, hi = min(meds), max(meds)
        return "%.2f" % m if "%.2f" % lo == "%.2f" % hi else "%.2f (%.2f-%.2f)" % (m, lo, hi)

    head = ["format", "bytes / bf16"]
    for R, th in cols:
        where = "R = %d, %d thread%s" % (R, th, "" if th == 1 else "s")
        head += [where + ": step / bf16", "of its own read" if read == "ratio_to_own_read" else "of the read"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for t in ORDER:
        if not any(k[0] == t for k in cells):
            continue
        ref = next(k for k in cells if k[0] == t and k[3] == "bytes")  # a step's bytes, against bf16's in its cell
        row = [NAME.get(t, t), "%.2f" % (cells[ref][0][0] / cells[("bfloat16",) + ref[1:]][0][0])]
        for R, th in cols:
            row += [fmt((t, R, th, "step_to_bf16")), fmt((t, R, th, read))]
        print("| " + " | ".join(row) + " |")
    print()
    print("%d sample%s (%s)." % (len(paths), "" if len(paths) == 1 else "s", ", ".join(os.path.basename(p) for p in paths)))
    for th in sorted({c[1] for c in cols if c[0] == 4}):
        met = []
        for t in ORDER:
            meds = [st.median(v) for v in cells.get((t, 4, th, "step_to_bf16"), [])]
            if t in TARGET and meds:
                met.append("%s %d of %d" % (NAME.get(t, t), sum(round(m, 2) <= TARGET[t] for m in meds), len(meds)))
        print("Four rows, %d thread%s, samples at or under the step target: %s." %
              (th, "" if th == 1 else "s", ", ".join(met)))


if __name__ == "__main__":
    main(sys.argv[1:])
