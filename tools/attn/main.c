/* attn: the libattn command-line tool. */
#include "cli.h"
#include "core/flash_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "usage: attn <command> [options]\n"
               "\n"
               "commands:\n"
               "  demo                 walk through the seed notebooks (every printed tensor)\n"
               "  run MODULE --weights W.safetensors --input I.safetensors --output O.safetensors\n"
               "       [--heads N] [--dropout P] [--out-dropout P] [--context-length N]\n"
               "       [--train --seed N] [--torch-flavor mkl|nomkl] [--impl auto|ref|fast]\n"
               "       [--threads N] [--grad] [--incremental N]\n"
               "                       run one layer on tensors from safetensors files\n"
               "  sdpa --input I.safetensors --output O.safetensors [--causal none|top-left|bottom-right]\n"
               "       [--scale S] [--window-left L] [--window-right R] [--softcap C] [--grad]\n"
               "       [--impl auto|ref|fast] [--threads N]\n"
               "                       the core attention: q, k, v (GQA when k has fewer heads),\n"
               "                       optional key_mask, seqlens_k, alibi_slopes; writes out, lse\n"
               "                       (and dq, dk, dv with --grad)\n"
               "  mpirun -np N attn sdpa --ring [--ring-layout contiguous|zigzag] [the sdpa options]\n"
               "                       the same as ring attention over N MPI ranks (builds with MPI)\n"
               "  heatmap MODULE --weights W.safetensors --input I.safetensors --output MAP.svg|MAP.png\n"
               "       [--head H] [--batch B] [--tokens \"Your,journey,...\"] [--key-tokens ...] [--vmax auto|X]\n"
               "       [the layer options of run] [--train --seed N]\n"
               "                       one head's attention weights as a picture (SVG cells carry\n"
               "                       data-q, data-k, data-w)\n"
               "  train [--steps N] [--seed N] [--save W.safetensors] [--threads N]\n"
               "                       train a small attention model to reverse sequences;\n"
               "                       the last line is 'accuracy X' on held-out sequences\n"
               "  bench [--batch B] [--heads H] [--kv-heads H2] [--seq S] [--kv-seq S2] [--head-dim D]\n"
               "        [--causal] [--backward] [--dtype f32|f16|bf16] [--math strict|data|bf16]\n"
               "        [--impl fast|ref|auto] [--threads N] [--json] [--min-time SEC] [--blas-env clear|keep]\n"
               "                       time the core SDPA next to OpenBLAS sgemm (GFLOP/s)\n"
               "  bench --decode [--batch B] [--heads Hq] [--kv-heads Hkv] [--head-dim D] --kv-seq T\n"
               "        [--kv-dtype T] [--page-size P] [--caller-pages] [--formats] [--mla] [--cascade] [--json]\n"
               "                       one new token per sequence against a KV cache of T tokens\n"
               "  bench --flex [--heads H] [--seq S] [--head-dim D] [--json]\n"
               "                       programmable attention (mask_mod, score_mod, block masks) against the\n"
               "                       dense forward and the built-in rules they reproduce\n"
               "                       (GB/s of K and V next to the same-run read bandwidth)\n"
               "  bench --pass           the block products' softmax pass alone (core cycles a score)\n"
               "  mpirun -np N attn bench --ring --heads H --head-dim D --seq S [--causal] [--backward]\n"
               "                       ring attention: per-step compute, message time, overlap\n"
               "  version              print the library version\n"
               "\n"
               "modules: simple sa_v1 sa_v2 causal mha_wrapper mha gpt_mha single_head\n"
               "         fused_mha bidirectional causal_mha cross\n"
               "see README.md and docs/CLI.md\n");
}

/* why ATTN_ISA cannot be honoured (attn_kernel_status() != ATTN_OK) */
static const char *isa_problem(void) {
    const char *isa = getenv("ATTN_ISA");
    if (attn_kernel_status() == ATTN_E_INVALID)
        return "unknown kernel set (use auto, avx512, avx512-256, avx2, their -vnni forms, avx512-simde or generic)";
    if (isa && !strcmp(isa, "avx512-simde"))
        return "this build has no SIMDe-emulated table (built without libsimde-dev) or this CPU lacks AVX2";
    if (isa && strstr(isa, "-vnni")) return "this CPU (or its OS) lacks its VNNI (AVX-VNNI, AVX512-VNNI) or base set";
    if (isa && !strncmp(isa, "avx512", 6)) return "this CPU (or its OS) lacks AVX-512 F/BW/DQ/VL";
    return "this CPU (or build) lacks AVX2, FMA or F16C (it runs generic)";
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    int computes = !strcmp(cmd, "demo") || !strcmp(cmd, "run") || !strcmp(cmd, "train") || !strcmp(cmd, "bench") ||
                   !strcmp(cmd, "sdpa") || !strcmp(cmd, "heatmap");
    if (computes && attn_kernel_status() != ATTN_OK) {
        cli_error("ATTN_ISA=%s: %s", getenv("ATTN_ISA"), isa_problem());
        return EXIT_USAGE;
    }
    if (strcmp(cmd, "demo") == 0) return cmd_demo(argc - 1, argv + 1);
    if (strcmp(cmd, "run") == 0) return cmd_run(argc - 1, argv + 1);
    if (strcmp(cmd, "train") == 0) return cmd_train(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0) return cmd_bench(argc - 1, argv + 1);
    if (strcmp(cmd, "sdpa") == 0) return cmd_sdpa(argc - 1, argv + 1);
    if (strcmp(cmd, "heatmap") == 0) return cmd_heatmap(argc - 1, argv + 1);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("attn %s (kernels: %s)\nmath data/bf16: %s\n", attn_version(), attn_kernel_name(), attn_math_products());
        char impls[512];
        attn_flash_mm_impls(impls, sizeof impls);
        if (*impls) printf("oneDNN's products (bf16 operands, D = 128): %s\n", impls);
        if (attn_kernel_status() != ATTN_OK) printf("ATTN_ISA=%s: %s\n", getenv("ATTN_ISA"), isa_problem());
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        usage(stdout);
        return 0;
    }
    cli_error("unknown command '%s' (try 'attn help')", cmd);
    return EXIT_USAGE;
}
