/* The fused path against the reference on odd shapes: every mask kind, both
 * causal alignments, Sq != Sk, padding in both polarities, dropout in both
 * streams, negative scales, fully-masked rows, any D; forward (output and
 * log-sum-exp) and backward (with and without the saved lse). Also: results
 * are bitwise identical for 1 and 2 threads. Runs under whichever kernels
 * the CPU selects; ctest runs it a second time with ATTN_ISA=generic. */
#include "testutil.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static uint32_t lcg = 4242u;
static float frand(void) { return tu_frand(&lcg); }
static int irand(int lo, int hi) { return tu_irand(&lcg, lo, hi); }

typedef struct cas {
    int B, H, Sq, Sk, D, Dv, causal, mask, polarity_keep, drop, nomkl;
    float scale;
} cas;

static attn_view bhsd(float *p, int H, int S, int D) {
    attn_view v = {p, (int64_t)H * S * D, (int64_t)S * D, D};
    return v;
}

static void run_case(const cas *c, int idx) {
    size_t nq = (size_t)c->B * c->H * c->Sq * c->D, nk = (size_t)c->B * c->H * c->Sk * c->D;
    size_t nv = (size_t)c->B * c->H * c->Sk * c->Dv, no = (size_t)c->B * c->H * c->Sq * c->Dv;
    size_t nl = (size_t)c->B * c->H * c->Sq;
    float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nv * 4), *go = malloc(no * 4);
    float *o1 = malloc(no * 4), *o2 = malloc(no * 4), *l1 = malloc(nl * 4), *l2 = malloc(nl * 4);
    float *dq1 = malloc(nq * 4), *dk1 = malloc(nk * 4), *dv1 = malloc(nv * 4);
    float *dq2 = malloc(nq * 4), *dk2 = malloc(nk * 4), *dv2 = malloc(nv * 4);
    float *dq3 = malloc(nq * 4), *dk3 = malloc(nk * 4), *dv3 = malloc(nv * 4);
    uint8_t *mask = malloc((size_t)c->B * c->Sk);
    for (size_t i = 0; i < nq; i++) q[i] = frand() * 2.0f;
    for (size_t i = 0; i < nk; i++) k[i] = frand() * 2.0f;
    for (size_t i = 0; i < nv; i++) v[i] = frand();
    for (size_t i = 0; i < no; i++) go[i] = frand();
    for (int b = 0; b < c->B; b++)
        for (int j = 0; j < c->Sk; j++) {
            /* batch 0: right padding; batch 1: left padding; others random */
            int masked = b == 0 ? j >= c->Sk - c->Sk / 3 : b == 1 ? j < c->Sk / 2 : irand(0, 3) == 0;
            mask[b * c->Sk + j] = (uint8_t)(c->polarity_keep ? !masked : masked);
        }
    attn_generator g;
    attn_generator_seed(&g, (uint64_t)idx);
    attn_generator_set_flavor(&g, c->nomkl ? ATTN_TORCH_NOMKL : ATTN_TORCH_MKL);
    attn_dropout drop;
    memset(&drop, 0, sizeof drop);
    if (c->drop) CHECK_OK(attn_dropout_begin(&g, 0.25, (uint64_t)nl * c->Sk, &drop));
    attn_sdpa_desc d = {.B = c->B,
                        .H = c->H,
                        .Sq = c->Sq,
                        .Sk = c->Sk,
                        .D = c->D,
                        .Dv = c->Dv,
                        .scale = c->scale,
                        .causal = (attn_causal)c->causal,
                        .key_mask = c->mask ? mask : NULL,
                        .key_mask_stride_b = c->Sk,
                        .key_mask_polarity = c->polarity_keep ? ATTN_MASK_TRUE_MEANS_KEEP : ATTN_MASK_TRUE_MEANS_MASKED,
                        .dropout = c->drop ? &drop : NULL,
                        .impl = ATTN_IMPL_REF};
    attn_view vq = bhsd(q, c->H, c->Sq, c->D), vk = bhsd(k, c->H, c->Sk, c->D), vv = bhsd(v, c->H, c->Sk, c->Dv);
    attn_view vo1 = bhsd(o1, c->H, c->Sq, c->Dv), vo2 = bhsd(o2, c->H, c->Sq, c->Dv), vg = bhsd(go, c->H, c->Sq, c->Dv);
    CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, vo1, l1));
    CHECK_OK(attn_sdpa_backward(&d, vq, vk, vv, vo1, vg, NULL, bhsd(dq1, c->H, c->Sq, c->D),
                                bhsd(dk1, c->H, c->Sk, c->D), bhsd(dv1, c->H, c->Sk, c->Dv)));
    d.impl = ATTN_IMPL_FAST;
    CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, vo2, l2));
    CHECK_OK(attn_sdpa_backward(&d, vq, vk, vv, vo2, vg, l2, bhsd(dq2, c->H, c->Sq, c->D), bhsd(dk2, c->H, c->Sk, c->D),
                                bhsd(dv2, c->H, c->Sk, c->Dv)));
    CHECK_OK(attn_sdpa_backward(&d, vq, vk, vv, vo2, vg, NULL, bhsd(dq3, c->H, c->Sq, c->D),
                                bhsd(dk3, c->H, c->Sk, c->D), bhsd(dv3, c->H, c->Sk, c->Dv)));
    char label[200];
    int n =
        snprintf(label, sizeof label,
                 "case %d B%d H%d Sq%d Sk%d D%d Dv%d causal%d mask%d keep%d drop%d nomkl%d scale%g", idx, c->B, c->H,
                 c->Sq, c->Sk, c->D, c->Dv, c->causal, c->mask, c->polarity_keep, c->drop, c->nomkl, (double)c->scale);
    (void)n;
    char l2b[240];
    snprintf(l2b, sizeof l2b, "%s out", label);
    tu_allclose(l2b, o2, o1, no, 1e-4, 2e-6);
    snprintf(l2b, sizeof l2b, "%s lse", label);
    tu_allclose(l2b, l2, l1, nl, 1e-5, 1e-5);
    snprintf(l2b, sizeof l2b, "%s dq", label);
    tu_allclose(l2b, dq2, dq1, nq, 1e-3, 2e-5);
    snprintf(l2b, sizeof l2b, "%s dk", label);
    tu_allclose(l2b, dk2, dk1, nk, 1e-3, 2e-5);
    snprintf(l2b, sizeof l2b, "%s dv", label);
    tu_allclose(l2b, dv2, dv1, nv, 1e-3, 2e-5);
    snprintf(l2b, sizeof l2b, "%s dq (lse recomputed)", label);
    tu_allclose(l2b, dq3, dq2, nq, 1e-5, 1e-6);
    for (size_t i = 0; i < no; i++)
        if (isnan(o2[i])) {
            CHECK(0, "%s: NaN in the fused output", label);
            break;
        }
    /* bitwise identical for 1 and 2 threads */
    int nt = omp_get_max_threads();
    omp_set_num_threads(1);
    CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, vo1, l1));
    CHECK_OK(attn_sdpa_backward(&d, vq, vk, vv, vo1, vg, l1, bhsd(dq1, c->H, c->Sq, c->D), bhsd(dk1, c->H, c->Sk, c->D),
                                bhsd(dv1, c->H, c->Sk, c->Dv)));
    omp_set_num_threads(nt > 1 ? nt : 2);
    snprintf(l2b, sizeof l2b, "%s out 1 vs 2 threads", label);
    tu_equal(l2b, o1, o2, no);
    snprintf(l2b, sizeof l2b, "%s dq 1 vs 2 threads", label);
    tu_equal(l2b, dq1, dq2, nq);
    snprintf(l2b, sizeof l2b, "%s dk 1 vs 2 threads", label);
    tu_equal(l2b, dk1, dk2, nk);
    omp_set_num_threads(nt);
    attn_dropout_end(&drop);
    free(q), free(k), free(v), free(go), free(o1), free(o2), free(l1), free(l2), free(mask);
    free(dq1), free(dk1), free(dv1), free(dq2), free(dk2), free(dv2), free(dq3), free(dk3), free(dv3);
}

int main(int argc, char **argv) {
    tu_init(argc, argv);
    static const int S_odd[] = {1, 2, 7, 47, 48, 49, 63, 65, 96, 97, 129, 200};
    static const int D_odd[] = {1, 3, 8, 16, 33, 63, 64, 80, 96, 100, 128};
    int idx = 0;
    /* systematic: every mask kind x alignment on odd shapes */
    for (int causal = 0; causal < 3; causal++)
        for (int mask = 0; mask < 2; mask++)
            for (int t = 0; t < 6; t++) {
                cas c = {irand(1, 3),
                         irand(1, 3),
                         S_odd[irand(0, 11)],
                         S_odd[irand(0, 11)],
                         D_odd[irand(0, 10)],
                         0,
                         causal,
                         mask,
                         irand(0, 1),
                         t % 3 == 0,
                         t % 2,
                         0.0f};
                c.Dv = irand(0, 1) ? c.D : D_odd[irand(0, 10)];
                if (t == 5) c.Sk = c.Sq; /* square */
                c.scale = (t == 4 ? -0.7f : 1.0f) / sqrtf((float)c.D);
                run_case(&c, idx++);
            }
    /* the benchmark shape family, small */
    cas big = {1, 2, 257, 257, 64, 64, 1, 0, 0, 0, 0, 0.125f};
    run_case(&big, idx++);
    big.D = big.Dv = 128, big.causal = 0;
    run_case(&big, idx++);
    cas br = {2, 2, 300, 100, 64, 64, 2, 1, 0, 1, 0, 0.125f}; /* Sq > Sk bottom-right: leading rows see nothing */
    run_case(&br, idx++);
    return tu_finish("test_flash");
}
