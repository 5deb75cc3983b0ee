"""make plots: docs/img/{prefill,decode,ring}.png from the current results
files bench/results/<host kind>/{prefill,decode,ring}.jsonl (bench/sweep.sh,
bench/ring_scaling.sh append to them), one panel per host kind, each point
the median of its rounds, captioned with host, dates and command.
usage: python3 bench/plots.py [RESULTS_DIR] [IMG_DIR]"""
import collections
import glob
import json
import os
import statistics
import sys
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
results = os.path.join(here, "results")
img = os.path.join(here, "..", "docs", "img")


def load(name):
    """{host kind: rows} of every results/<kind>/<name>.jsonl"""
    out = {}
    for path in sorted(glob.glob(os.path.join(results, "*", name + ".jsonl"))):
        rows = [json.loads(l) for l in open(path) if l.strip()]
        if rows:
            out[os.path.basename(os.path.dirname(path))] = rows
    return out


def caption(kind, rows):
    cpu = collections.Counter(r.get("cpu_model_name", "?") for r in rows).most_common(1)[0][0]
    dates = sorted(r.get("date", "")[:10] for r in rows if r.get("date"))
    span = dates[0] if dates and dates[0] == dates[-1] else "%s .. %s" % (dates[0], dates[-1]) if dates else "?"
    return "%s (%s), %s" % (kind, cpu, span)


def median_by(rows, key, val):
    acc = collections.defaultdict(list)
    for r in rows:
        v = val(r)
        if v is not None:
            acc[key(r)].append(v)
    return {k: statistics.median(v) for k, v in acc.items()}


def panels(data, title, draw, path, command):
    kinds = sorted(data)
    if not kinds:
        print("plots: no results for %s" % os.path.basename(path))
        return
    fig, axes = plt.subplots(1, len(kinds), figsize=(7.2 * len(kinds), 5.2), squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        draw(ax, data[kind])
        headroom(ax)
        ax.set_title(caption(kind, data[kind]), fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    wrapped = "\n".join(textwrap.wrap(command, 110 * len(kinds)))
    fig.suptitle("%s\n%s" % (title, wrapped), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print("plots: wrote %s" % path)


def headroom(ax):
    """y from 0 to 1.25 x the highest line: a same-run limit drawn on the
    frame's top edge can hardly be seen, and the legend needs the room."""
    top = max((max(l.get_ydata()) for l in ax.get_lines() if len(l.get_ydata())), default=1.0)
    ax.set_ylim(bottom=0, top=1.25 * top)


def draw_prefill(ax, rows):
    fwd = [r for r in rows if r.get("op", "forward") == "forward"]
    for peer, style in (("libattn", "-o"), ("onnxruntime", "--s"), ("ggml", ":^")):
        for causal in (False, True):
            pts = median_by([r for r in fwd if r.get("peer") == peer and bool(r.get("causal")) == causal],
                            lambda r: r.get("Sq", r.get("S")), lambda r: r.get("gflops"))
            if pts:
                xs = sorted(pts)
                ax.plot(xs, [pts[x] for x in xs], style, label="%s%s" % (peer, " causal" if causal else ""))
    sg = median_by([r for r in fwd if r.get("peer") == "libattn"], lambda r: r.get("Sq"),
                   lambda r: r.get("sgemm_gflops") or None)
    if sg:
        level = statistics.median(sg.values())
        ax.axhline(level, color="k", lw=1, label="sgemm, same runs (unrestricted)")
        ax.annotate("sgemm %.0f GFLOP/s (same runs)" % level, xy=(0.01, level), xycoords=("axes fraction", "data"),
                    xytext=(0, 3), textcoords="offset points", fontsize=7)
    bf = median_by([r for r in fwd if r.get("peer") == "libattn"], lambda r: r.get("Sq"),
                   lambda r: r.get("bf16_gemm_gflops") or None)
    if bf:  # oneDNN's bf16 matmul, where the host has one (attn bench --json)
        level = statistics.median(bf.values())
        ax.axhline(level, color="k", lw=1, ls="--", label="oneDNN bf16 matmul, same runs")
        ax.annotate("bf16 matmul %.0f GFLOP/s (same runs)" % level, xy=(0.01, level),
                    xycoords=("axes fraction", "data"), xytext=(0, 3), textcoords="offset points", fontsize=7)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length S (H = 8, D = 64, B = 1)")
    ax.set_ylabel("GFLOP/s")


def draw_decode(ax, rows):
    for dt, style in (("f32", "-o"), ("f16", "-s"), ("bf16", "-^"), ("q8_0", "-v")):
        pts = median_by([r for r in rows if r.get("kv_dtype") == dt and r.get("peer", "libattn") == "libattn"],
                        lambda r: r["T"], lambda r: r.get("gbps"))
        if pts:
            xs = sorted(pts)
            ax.plot(xs, [pts[x] for x in xs], style, label="libattn %s cache" % dt)
    # the read of the f32 cache's bytes (smaller caches' reads come partly from the caches: higher)
    rd = median_by([r for r in rows if r.get("kv_dtype") == "f32"], lambda r: r["T"], lambda r: r.get("read_gbps"))
    if rd:
        xs = sorted(rd)
        ax.plot(xs, [rd[x] for x in xs], "k-", lw=1, label="read bandwidth of the f32 cache's bytes, same runs")
    for peer in sorted({r.get("peer") for r in rows} - {"libattn", None}):
        for dt, style in (("f32", ":o"), ("f16", ":s"), ("bf16", ":^"), ("q8_0", ":v")):
            pts = median_by([r for r in rows if r.get("peer") == peer and r.get("kv_dtype") == dt], lambda r: r["T"],
                            lambda r: r.get("gbps"))
            if pts:
                xs = sorted(pts)
                ax.plot(xs, [pts[x] for x in xs], style, mfc="none", label="%s %s cache" % (peer, dt))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("cached tokens T (Hq = 32, Hkv = 8, D = 128, one query)")
    ax.set_ylabel("GB/s of K and V read")


def draw_ring(ax, rows):
    for op in ("ring_forward", "ring_backward"):
        for causal in (0, 1):
            pts = median_by([r for r in rows if r["op"] == op and r["causal"] == causal], lambda r: r["S"],
                            lambda r: r.get("gflops"))
            if pts:
                xs = sorted(pts)
                ax.plot(xs, [pts[x] for x in xs], "-o" if causal else "--s",
                        label="%s %s, %d ranks" % (op.split("_")[1], "causal (zigzag)" if causal else "non-causal",
                                                  rows[0].get("ranks", 2)))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length S (D = 128, one thread per rank)")
    ax.set_ylabel("GFLOP/s, all ranks")


def with_ggml(prefill):
    """ggml's flash attention (bench/ggml/compare.sh's rows at the sweep's H = 8, D = 64) as one more peer"""
    for kind, rows in load("ggml-compare").items():
        prefill.setdefault(kind, []).extend(
            dict(r, peer="ggml", op="forward", Sq=r["S"], gflops=r["ggml_gflops"]) for r in rows
            if r.get("H") == 8 and r.get("D") == 64)
    return prefill


def with_ggml_decode(decode):
    """ggml's decode (bench/ggml/decode.sh's rows) as one more peer: its bytes per second"""
    for kind, rows in load("ggml-decode").items():
        decode.setdefault(kind, []).extend(dict(r, peer="ggml", gbps=r["ggml_gbps"]) for r in rows
                                           if r.get("Hq") == 32 and r.get("Hkv") == 8 and r.get("D") == 128)
    return decode


def main():
    global results, img
    results = sys.argv[1] if len(sys.argv) > 1 else results
    img = sys.argv[2] if len(sys.argv) > 2 else img
    os.makedirs(img, exist_ok=True)
    panels(with_ggml(load("prefill")), "Prefill: libattn, ONNX Runtime, ggml and the machine's sgemm", draw_prefill,
           os.path.join(img, "prefill.png"), "bench/sweep.sh prefill (attn bench --heads 8 --head-dim 64 --seq S "
           "[--causal] --blas-env clear; node bench/ort/ort_bench.js); ggml: SHAPES=... bench/ggml/compare.sh")
    panels(with_ggml_decode(load("decode")), "Decode from a KV cache: bytes read per second against the read bandwidth", draw_decode,
           os.path.join(img, "decode.png"), "bench/sweep.sh decode (attn bench --decode --heads 32 --kv-heads 8 "
           "--head-dim 128 --kv-seq T --kv-dtype DT); ggml: bench/ggml/decode.sh")
    panels(load("ring"), "Ring attention over MPI ranks on one machine", draw_ring, os.path.join(img, "ring.png"),
           "bench/ring_scaling.sh (mpirun -np 2 attn bench --ring --head-dim 128 ...)")


if __name__ == "__main__":
    main()
