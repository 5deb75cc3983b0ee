"""bench/plots.py (make plots): every panel leaves headroom above its
highest line, and the prefill panel labels the same-run sgemm line with its
value, so the machine's limit is never drawn on the frame's edge
(issue 33). Needs matplotlib (Debian's python3-matplotlib; make plots
installs it); skipped without it."""
import importlib.util
import os

import pytest

pytest.importorskip("matplotlib")


def load_plots():
    path = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "plots.py")
    spec = importlib.util.spec_from_file_location("libattn_bench_plots", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # draws nothing: main() runs only as a script
    return mod


def test_prefill_panel_headroom_and_sgemm_label():
    plots = load_plots()
    import matplotlib.pyplot as plt
    rows = [dict(peer="libattn", op="forward", Sq=s, causal=c, gflops=150.0 + s / 100 - 20 * c, sgemm_gflops=g)
            for s in (512, 1024, 2048) for c in (0, 1) for g in (190.0, 200.0, 210.0)]
    rows += [dict(peer="onnxruntime", op="forward", Sq=s, causal=0, gflops=120.0) for s in (512, 1024, 2048)]
    fig, ax = plt.subplots()
    plots.draw_prefill(ax, rows)
    plots.headroom(ax)
    top = max(max(l.get_ydata()) for l in ax.get_lines())
    assert top == pytest.approx(200.0)  # the sgemm line (median of the runs) is the highest
    assert ax.get_ylim()[0] == 0 and ax.get_ylim()[1] >= 1.2 * top
    labels = [t.get_text() for t in ax.texts]
    assert any("sgemm 200 GFLOP/s" in t for t in labels), labels
    plt.close(fig)


def test_prefill_panel_bf16_line():
    """where the runs carry oneDNN's bf16 matmul (attn bench --json), the panel draws and labels it; none without"""
    plots = load_plots()
    import matplotlib.pyplot as plt
    rows = [dict(peer="libattn", op="forward", Sq=s, causal=0, gflops=300.0, sgemm_gflops=310.0,
                 bf16_gemm_gflops=2700.0 + s / 1024) for s in (512, 1024, 2048)]
    fig, ax = plt.subplots()
    plots.draw_prefill(ax, rows)
    plots.headroom(ax)
    labels = [t.get_text() for t in ax.texts]
    assert any("bf16 matmul 2701 GFLOP/s" in t for t in labels), labels
    assert ax.get_ylim()[1] >= 1.2 * 2701
    plt.close(fig)
    fig, ax = plt.subplots()
    plots.draw_prefill(ax, [dict(r, bf16_gemm_gflops=None) for r in rows])
    assert not any("bf16" in t.get_text() for t in ax.texts)
    plt.close(fig)
