/* libattn next to ggml's CPU flash attention (ggml_flash_attn_ext, the kernel
 * llama.cpp runs), same data, same thread count, alternating rounds in one
 * process. Built by bench/ggml/compare.sh against a ggml checkout the user
 * provides (nothing is downloaded). Not part of `make test`.
 * usage: ggml_bench H S D CAUSAL THREADS ROUNDS   (B = 1, f32 q/k/v, scale 1/sqrt(D))
 * Prints the max |difference| of the two outputs, then one JSON line per round. */
#define _POSIX_C_SOURCE 200809L
#include "attn.h"
#include "bench_util.h"
#include "ggml-cpu.h"
#include "ggml.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* libattn's forward on the same tensors, for median_seconds */
typedef struct attn_run {
    const attn_sdpa_desc *d;
    attn_view q, k, v, o;
} attn_run;
static void attn_run_call(void *p) {
    const attn_run *a = p;
    attn_sdpa_forward(a->d, a->q, a->k, a->v, a->o, NULL);
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: ggml_bench H S D CAUSAL THREADS ROUNDS\n");
        return 2;
    }
    int H = atoi(argv[1]), S = atoi(argv[2]), D = atoi(argv[3]), causal = atoi(argv[4]);
    int threads = atoi(argv[5]), rounds = atoi(argv[6]);
    if (H < 1 || S < 1 || D < 1 || threads < 1 || rounds < 1) return 2;
    size_t n = (size_t)H * S * D, ctx_bytes = 4 * n * sizeof(float) + (size_t)S * S * 2 + (64u << 20);
    struct ggml_init_params ip = {ctx_bytes, NULL, false};
    struct ggml_context *ctx = ggml_init(ip);
    if (!ctx) return 1;
    /* ggml's [D, S, H] with D fastest is libattn's (H, S, D) row-major (B = 1) */
    struct ggml_tensor *q = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, S, H);
    struct ggml_tensor *k = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, S, H);
    struct ggml_tensor *v = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, S, H);
    struct ggml_tensor *mask = NULL;
    uint32_t x = 12345u;
    float *qd = q->data, *kd = k->data, *vd = v->data;
    for (size_t i = 0; i < n; i++) {
        qd[i] = lcg_next(&x), kd[i] = lcg_next(&x), vd[i] = lcg_next(&x);
    }
    if (causal) { /* additive mask [S_kv, S_q], f16: 0 where visible, -inf above the diagonal */
        mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, S, S);
        ggml_fp16_t *m = mask->data, zero = ggml_fp32_to_fp16(0.0f), ninf = ggml_fp32_to_fp16(-INFINITY);
        for (int i = 0; i < S; i++)
            for (int j = 0; j < S; j++) m[(size_t)i * S + j] = j <= i ? zero : ninf;
    }
    float scale = 1.0f / sqrtf((float)D);
    struct ggml_tensor *out = ggml_flash_attn_ext(ctx, q, k, v, mask, scale, 0.0f, 0.0f);
    ggml_flash_attn_ext_set_prec(out, GGML_PREC_F32);
    struct ggml_cgraph *gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, out);

    float *mine = malloc(n * sizeof(float));
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, H, S, S, D, D);
    d.causal = causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
    attn_view Q = {qd, (int64_t)n, (int64_t)S * D, D}, K = {kd, (int64_t)n, (int64_t)S * D, D};
    attn_view V = {vd, (int64_t)n, (int64_t)S * D, D}, O = {mine, (int64_t)n, (int64_t)S * D, D};
    if (ggml_graph_compute_with_ctx(ctx, gf, threads) != GGML_STATUS_SUCCESS ||
        attn_sdpa_forward(&d, Q, K, V, O, NULL) != ATTN_OK) {
        fprintf(stderr, "ggml_bench: a forward failed\n");
        return 1;
    }
    /* ggml's result is [D, H, S] (D fastest): element (h, i, c) at (i * H + h) * D + c */
    const float *res = out->data;
    double err = 0.0;
    for (int h = 0; h < H; h++)
        for (int i = 0; i < S; i++)
            for (int c = 0; c < D; c++) {
                double e = fabs((double)mine[((size_t)h * S + i) * D + c] - res[((size_t)i * H + h) * D + c]);
                err = e > err ? e : err;
            }
    fprintf(stderr, "check: ggml vs libattn (%s), max |diff| %.2e\n", causal ? "causal" : "non-causal", err);
    if (!(err < 1e-4)) return 1;
    double flops = 4.0 * H * (double)S * S * D * (causal ? 0.5 : 1.0);
    ggml_run gr = {ctx, gf, threads};
    attn_run ar = {&d, Q, K, V, O};
    for (int r = 0; r < rounds; r++) {
        double tg = median_seconds(ggml_run_graph, &gr), ta = median_seconds(attn_run_call, &ar);
        printf("{\"H\": %d, \"S\": %d, \"D\": %d, \"causal\": %s, \"threads\": %d, \"round\": %d, "
               "\"ggml_gflops\": %.2f, \"libattn_gflops\": %.2f, \"libattn_kernels\": \"%s\"}\n",
               H, S, D, causal ? "true" : "false", threads, r + 1, flops / tg * 1e-9, flops / ta * 1e-9,
               attn_kernel_name());
        fflush(stdout);
    }
    free(mine);
    ggml_free(ctx);
    return 0;
}
