/* Outputs and gradients are bitwise identical for 1 and 2 threads (OpenMP and
 * OpenBLAS) and across repeated runs, for every layer in train mode (dropout
 * on), and for the fused SDPA with 1, 2 and 3 threads; and NaN inputs
 * propagate without crashing. */
#include "testutil.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static uint32_t lcg = 99u;
static float frand(void) { return tu_frand(&lcg); }

typedef struct result {
    float *out, *dx, *dy, *grads;
    size_t nout, nx, ny, ng;
} result;

static void set_threads(int n) {
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

/* One forward + backward of a kind on fixed data (large enough that every
 * path is multi-threaded: several heads, S above one tile). */
static result run(attn_layer_kind kind, int threads) {
    set_threads(threads);
    result r;
    memset(&r, 0, sizeof r);
    int64_t B = 2, S = 130, C = 32, H = 4, Sk = kind == ATTN_LAYER_CROSS ? 97 : S;
    attn_layer_config c;
    int single = kind == ATTN_LAYER_SIMPLE || kind == ATTN_LAYER_SA_V1 || kind == ATTN_LAYER_SA_V2 ||
                 kind == ATTN_LAYER_CAUSAL || kind == ATTN_LAYER_SINGLE_HEAD;
    attn_layer_config_default(&c, kind, C, kind == ATTN_LAYER_MHA_WRAPPER ? 8 : C, single ? 1 : H);
    c.context_length = 200;
    c.dropout = 0.2, c.out_dropout = 0.1;
    attn_layer *l = NULL;
    attn_generator g;
    attn_generator_seed(&g, 7);
    if (attn_layer_create(&c, &l) != ATTN_OK) return r;
    attn_layer_init(l, &g);
    int64_t W = attn_layer_out_width(l);
    r.nout = (size_t)(B * S * W), r.nx = (size_t)(B * S * C),
    r.ny = kind == ATTN_LAYER_CROSS ? (size_t)(B * Sk * C) : 0;
    lcg = 99u;
    float *x = malloc(r.nx * 4), *y = r.ny ? malloc(r.ny * 4) : NULL, *go = malloc(r.nout * 4);
    for (size_t i = 0; i < r.nx; i++) x[i] = frand();
    for (size_t i = 0; i < r.ny; i++) y[i] = frand();
    for (size_t i = 0; i < r.nout; i++) go[i] = frand();
    uint8_t *mask = NULL;
    if (kind == ATTN_LAYER_BIDIRECTIONAL || kind == ATTN_LAYER_CAUSAL_MHA || kind == ATTN_LAYER_CROSS) {
        mask = calloc((size_t)(B * Sk), 1);
        for (int64_t j = 0; j < 9; j++) mask[Sk + j] = 1; /* left padding in batch 1 */
    }
    r.out = malloc(r.nout * 4), r.dx = malloc(r.nx * 4), r.dy = r.ny ? malloc(r.ny * 4) : NULL;
    attn_generator_seed(&g, 11);
    attn_forward_args a = {x, B, S, y, Sk, mask, 1, &g, ATTN_IMPL_AUTO, r.out, ATTN_MATH_STRICT};
    CHECK_OK(attn_layer_forward(l, &a));
    attn_layer_zero_grad(l);
    attn_backward_args ba = {go, r.dx, r.dy};
    CHECK_OK(attn_layer_backward(l, &ba));
    for (int i = 0; i < attn_layer_tensor_count(l); i++) {
        attn_tensor_info t;
        attn_layer_tensor(l, i, &t);
        if (t.is_buffer) continue;
        size_t n = (size_t)t.shape[0] * (size_t)(t.ndim > 1 ? t.shape[1] : 1);
        r.grads = realloc(r.grads, (r.ng + n) * 4);
        memcpy(r.grads + r.ng, t.grad, n * 4);
        r.ng += n;
    }
    attn_layer_free(l);
    free(x), free(y), free(go), free(mask);
    return r;
}

static void free_result(result *r) { free(r->out), free(r->dx), free(r->dy), free(r->grads); }

static void nan_policy(void) {
    /* a NaN in one token of x: its output rows (and those attending to it)
     * become NaN; nothing crashes; other batch rows stay finite */
    attn_layer_config c;
    attn_layer_config_default(&c, ATTN_LAYER_FUSED_MHA, 8, 8, 2);
    attn_layer *l;
    CHECK_OK(attn_layer_create(&c, &l));
    attn_generator g;
    attn_generator_seed(&g, 1);
    attn_layer_init(l, &g);
    float x[2 * 5 * 8], out[2 * 5 * 8];
    for (int i = 0; i < 80; i++) x[i] = frand();
    x[3] = NAN; /* batch 0, token 0 */
    for (int impl = ATTN_IMPL_REF; impl <= ATTN_IMPL_FAST; impl++) {
        attn_forward_args a = {x, 2, 5, NULL, 0, NULL, 0, NULL, (attn_impl)impl, out, ATTN_MATH_STRICT};
        CHECK_OK(attn_layer_forward(l, &a));
        int nan0 = 0, nan1 = 0;
        for (int i = 0; i < 40; i++) nan0 += isnan(out[i]);
        for (int i = 40; i < 80; i++) nan1 += isnan(out[i]);
        CHECK(nan0 > 0, "impl %d: NaN input propagates to its batch row", impl);
        CHECK(nan1 == 0, "impl %d: the other batch row stays finite", impl);
    }
    attn_layer_free(l);
}

/* The fused SDPA with 1, 2 and 3 threads on shapes where the forward's work
 * split changes with the thread count (whole kv heads per item when B * Hkv
 * >= 8 per thread, query blocks of pre-packed heads otherwise): the same
 * bits, strict and in BF16 mode (its products through oneDNN where it runs
 * bf16: the last shape's small products are ones its AMX matmul would split
 * in two along the reduction when made under two threads). */
static void sdpa_thread_counts(attn_math math) {
    static const int64_t shapes[][6] = {{1, 6, 3, 157, 157, 24}, {2, 4, 2, 96, 96, 24},   {1, 8, 8, 130, 130, 24},
                                        {3, 4, 4, 61, 61, 24},   {1, 2, 1, 200, 200, 24}, {4, 6, 6, 40, 40, 24},
                                        {3, 12, 3, 5, 47, 80}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int64_t B = shapes[si][0], H = shapes[si][1], Hkv = shapes[si][2], Sq = shapes[si][3], S = shapes[si][4];
        int64_t D = shapes[si][5];
        size_t nq = (size_t)(B * H * Sq * D), nk = (size_t)(B * Hkv * S * D);
        uint32_t seed = 5u + (uint32_t)si;
        float *q = tu_rand_array(nq, &seed, 2.0f), *k = tu_rand_array(nk, &seed, 2.0f);
        float *v = tu_rand_array(nk, &seed, 1.0f), *go = tu_rand_array(nq, &seed, 1.0f);
        float *res[3][5];
        for (int t = 0; t < 3; t++) {
            set_threads(t + 1);
            attn_sdpa_desc d;
            attn_sdpa_desc_init(&d, B, H, Sq, S, D, D);
            d.Hkv = Hkv, d.impl = ATTN_IMPL_FAST, d.causal = si % 2 ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
            d.math = math;
            float *o = malloc(nq * 4), *lse = malloc((size_t)(B * H * Sq) * 4);
            float *dq = malloc(nq * 4), *dk = malloc(nk * 4), *dv = malloc(nk * 4);
            attn_view Q = {q, H * Sq * D, Sq * D, D}, K = {k, Hkv * S * D, S * D, D}, V = {v, Hkv * S * D, S * D, D};
            attn_view O = {o, H * Sq * D, Sq * D, D}, GO = {go, H * Sq * D, Sq * D, D};
            attn_view DQ = {dq, H * Sq * D, Sq * D, D}, DK = {dk, Hkv * S * D, S * D, D},
                      DV = {dv, Hkv * S * D, S * D, D};
            CHECK_OK(attn_sdpa_forward(&d, Q, K, V, O, lse));
            CHECK_OK(attn_sdpa_backward(&d, Q, K, V, O, GO, lse, DQ, DK, DV));
            res[t][0] = o, res[t][1] = lse, res[t][2] = dq, res[t][3] = dk, res[t][4] = dv;
        }
        size_t n[5] = {nq, (size_t)(B * H * Sq), nq, nk, nk};
        static const char *what[5] = {"out", "lse", "dq", "dk", "dv"};
        for (int t = 1; t < 3; t++)
            for (int w = 0; w < 5; w++) {
                char label[128];
                snprintf(label, sizeof label, "sdpa math %d B=%d H=%d Hkv=%d Sq=%d %s, 1 vs %d threads", (int)math,
                         (int)B, (int)H, (int)Hkv, (int)Sq, what[w], t + 1);
                tu_equal(label, res[t][w], res[0][w], n[w]);
            }
        for (int t = 0; t < 3; t++)
            for (int w = 0; w < 5; w++) free(res[t][w]);
        free(q), free(k), free(v), free(go);
    }
}

int main(int argc, char **argv) {
    tu_init(argc, argv);
    sdpa_thread_counts(ATTN_MATH_STRICT);
    sdpa_thread_counts(ATTN_MATH_BF16);
    for (int k = 0; k < ATTN_LAYER_KIND_COUNT; k++) {
        result a = run((attn_layer_kind)k, 1), b = run((attn_layer_kind)k, 2), c = run((attn_layer_kind)k, 2);
        char label[96];
        const char *name = attn_layer_kind_name((attn_layer_kind)k);
        snprintf(label, sizeof label, "%s out, 1 vs 2 threads", name);
        tu_equal(label, a.out, b.out, a.nout);
        snprintf(label, sizeof label, "%s dx, 1 vs 2 threads", name);
        tu_equal(label, a.dx, b.dx, a.nx);
        if (a.ny) {
            snprintf(label, sizeof label, "%s dy, 1 vs 2 threads", name);
            tu_equal(label, a.dy, b.dy, a.ny);
        }
        snprintf(label, sizeof label, "%s parameter grads, 1 vs 2 threads", name);
        CHECK(a.ng == b.ng, "%s: gradient count", name);
        tu_equal(label, a.grads, b.grads, a.ng);
        snprintf(label, sizeof label, "%s out, run to run", name);
        tu_equal(label, b.out, c.out, b.nout);
        snprintf(label, sizeof label, "%s parameter grads, run to run", name);
        tu_equal(label, b.grads, c.grads, b.ng);
        free_result(&a), free_result(&b), free_result(&c);
    }
    set_threads(2);
    nan_policy();
    return tu_finish("test_determinism");
}
