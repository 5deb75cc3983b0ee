/* libattn's decode next to ggml's CPU flash attention (ggml_flash_attn_ext,
 * what llama.cpp runs for a new token) on the same keys and values: one
 * query per head (Hq heads over Hkv kv heads) against T cached tokens stored
 * as f32, f16, q8_0 or q4_0 in each library's own format, same thread count,
 * alternating rounds in one process. Built by bench/ggml/decode.sh against
 * a ggml checkout the user provides. Not part of `make test`.
 * usage: ggml_decode HQ HKV T D KV(f32|f16|q8_0|q4_0) THREADS ROUNDS [MATH(strict|data)]
 * Prints the max |difference| of the two outputs, then one JSON line per
 * round: GB/s of K and V as each stores them. */
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

static void fill(float *p, size_t n, uint32_t x) {
    for (size_t i = 0; i < n; i++) p[i] = lcg_next(&x);
}

/* libattn's decode from its cache, for median_seconds */
typedef struct attn_run {
    const attn_kv_cache *cache;
    const attn_sdpa_desc *d;
    attn_view q, o;
} attn_run;
static void attn_run_call(void *p) {
    const attn_run *a = p;
    attn_kv_cache_attend(a->cache, a->d, a->q, a->o, NULL);
}

int main(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: ggml_decode HQ HKV T D KV(f32|f16|q8_0|q4_0) THREADS ROUNDS [MATH(strict|data)]\n");
        return 2;
    }
    int Hq = atoi(argv[1]), Hkv = atoi(argv[2]), T = atoi(argv[3]), D = atoi(argv[4]);
    const char *kvn = argv[5];
    int threads = atoi(argv[6]), rounds = atoi(argv[7]);
    int q4 = !strcmp(kvn, "q4_0"), data = argc > 8 && !strcmp(argv[8], "data");
    enum ggml_type gt = !strcmp(kvn, "f16")    ? GGML_TYPE_F16
                        : !strcmp(kvn, "q8_0") ? GGML_TYPE_Q8_0
                        : q4                   ? GGML_TYPE_Q4_0
                                               : GGML_TYPE_F32;
    attn_dtype at = !strcmp(kvn, "f16")    ? ATTN_DTYPE_F16
                    : !strcmp(kvn, "q8_0") ? ATTN_DTYPE_Q8_0
                    : q4                   ? ATTN_DTYPE_Q4_0
                                           : ATTN_DTYPE_F32;
    if (Hq < 1 || Hkv < 1 || Hq % Hkv || T < 1 || D < 1 || threads < 1 || rounds < 1) return 2;
    size_t nkv = (size_t)Hkv * T * D, rowb = ggml_row_size(gt, D);
    float *k32 = malloc(nkv * sizeof(float)), *v32 = malloc(nkv * sizeof(float));
    fill(k32, nkv, 5), fill(v32, nkv, 6);
    size_t ctx_bytes = 2 * (size_t)Hkv * T * rowb + 4 * (size_t)Hq * D * sizeof(float) + (64u << 20);
    struct ggml_init_params ip = {ctx_bytes, NULL, false};
    struct ggml_context *ctx = ggml_init(ip);
    if (!ctx || !k32 || !v32) return 1;
    /* ggml's [D, T, Hkv] (D fastest) is (Hkv, T, D) row-major; q [D, 1, Hq] */
    struct ggml_tensor *q = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, 1, Hq);
    struct ggml_tensor *k = ggml_new_tensor_3d(ctx, gt, D, T, Hkv), *v = ggml_new_tensor_3d(ctx, gt, D, T, Hkv);
    fill(q->data, (size_t)Hq * D, 4);
    if (gt == GGML_TYPE_F32) {
        memcpy(k->data, k32, nkv * sizeof(float)), memcpy(v->data, v32, nkv * sizeof(float));
    } else if (gt == GGML_TYPE_F16) {
        ggml_fp32_to_fp16_row(k32, k->data, (int64_t)nkv), ggml_fp32_to_fp16_row(v32, v->data, (int64_t)nkv);
    } else {
        ggml_quantize_chunk(gt, k32, k->data, 0, (int64_t)Hkv * T, D, NULL);
        ggml_quantize_chunk(gt, v32, v->data, 0, (int64_t)Hkv * T, D, NULL);
    }
    float scale = 1.0f / sqrtf((float)D);
    struct ggml_tensor *out = ggml_flash_attn_ext(ctx, q, k, v, NULL, scale, 0.0f, 0.0f);
    ggml_flash_attn_ext_set_prec(out, GGML_PREC_F32);
    struct ggml_cgraph *gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, out);

    /* libattn: a KV cache of the same storage type holding the same T tokens */
    attn_kv_cache_config cfg = {
        .batch = 1, .kv_heads = Hkv, .capacity = T, .head_dim = D, .v_head_dim = D, .dtype = at};
    attn_kv_cache *cache = NULL;
    int64_t n1 = T;
    attn_view K = {k32, (int64_t)nkv, (int64_t)T * D, D}, V = {v32, (int64_t)nkv, (int64_t)T * D, D};
    float *mine = malloc((size_t)Hq * D * sizeof(float));
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, Hq, 1, 0, D, D);
    d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    if (data) d.math = ATTN_MATH_DATA; /* q rounded as ggml rounds it (q8_0 blocks for q8_0 / q4_0 keys) */
    attn_view Q = {q->data, (int64_t)Hq * D, D, D}, O = {mine, (int64_t)Hq * D, D, D};
    if (attn_kv_cache_create(&cfg, &cache) != ATTN_OK || attn_kv_cache_append(cache, &n1, K, V) != ATTN_OK ||
        ggml_graph_compute_with_ctx(ctx, gf, threads) != GGML_STATUS_SUCCESS ||
        attn_kv_cache_attend(cache, &d, Q, O, NULL) != ATTN_OK) {
        fprintf(stderr, "ggml_decode: a call failed\n");
        return 1;
    }
    const float *res = out->data; /* [D, Hq, 1]: head h at h * D */
    double err = 0.0;
    for (size_t i = 0; i < (size_t)Hq * D; i++) err = fmax(err, fabs((double)mine[i] - res[i]));
    fprintf(stderr, "check: ggml vs libattn decode (%s cache), max |diff| %.2e\n", kvn, err);
    /* ggml rounds q to the keys' type for its dot products (f16, q8_0): a looser check there */
    if (!(err < (gt == GGML_TYPE_Q8_0 || q4 ? 2e-2 : gt == GGML_TYPE_F16 ? 2e-3 : 1e-4))) return 1;
    double bytes_g = 2.0 * Hkv * T * (double)rowb;
    double bytes_a = 2.0 * Hkv * T *
                     (at == ATTN_DTYPE_F32   ? 4.0 * D
                      : at == ATTN_DTYPE_F16 ? 2.0 * D
                      : q4                   ? 18.0 * D / 32
                                             : 34.0 * D / 32);
    ggml_run gr = {ctx, gf, threads};
    attn_run ar = {cache, &d, Q, O};
    for (int r = 0; r < rounds; r++) {
        double tg = median_seconds(ggml_run_graph, &gr), ta = median_seconds(attn_run_call, &ar);
        printf("{\"op\": \"decode\", \"Hq\": %d, \"Hkv\": %d, \"T\": %d, \"D\": %d, \"kv_dtype\": \"%s\", "
               "\"threads\": %d, \"round\": %d, \"ggml_ms\": %.4f, \"libattn_ms\": %.4f, \"ggml_gbps\": %.2f, "
               "\"libattn_gbps\": %.2f, \"libattn_kernels\": \"%s\", \"math\": \"%s\"}\n",
               Hq, Hkv, T, D, kvn, threads, r + 1, tg * 1e3, ta * 1e3, bytes_g / tg * 1e-9, bytes_a / ta * 1e-9,
               attn_kernel_name(), data ? "data" : "strict");
        fflush(stdout);
    }
    attn_kv_cache_free(cache);
    free(mine), free(k32), free(v32);
    ggml_free(ctx);
    return 0;
}
