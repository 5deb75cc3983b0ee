/* The math modes' block products through oneDNN (core/flash_mm.c): the
 * structure that makes them fast, counted, and their answers.
 * ctest runs this under ATTN_PRODUCTS=onednn (float32 matmuls on the
 * rounded operands where oneDNN has no bf16: the same calls and reorders
 * as on an AMX host) and plain (auto: where the host has AMX or
 * AVX512-BF16, the products must run on it).
 *   - K and V are reordered once per kv head and key block (a GQA group and
 *     every query block share them), never per query block; each tile is
 *     two products (S = Q K^T, O += P V); hidden blocks cost nothing
 *     (causal: no call past the diagonal's block)
 *   - the answer is the mode's reference's (float64 over the same rounded
 *     operands) within the rounding of P, and equal bit for bit for 1 and 2
 *     threads
 *   - under ATTN_PRODUCTS=auto on an AMX or AVX512-BF16 host
 *     every product runs on that engine (oneDNN's implementation names),
 *     and never elsewhere. */
#include "testutil.h"
#include "core/flash_int.h"
#include "kernels/mm.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static uint32_t seed = 41u;

/* the provider's calls for one forward: (packs, runs) counted from the definition */
static void expect_fwd(int64_t B, int64_t H, int64_t Hkv, int64_t Sq, int64_t Sk, int causal, int64_t *packs,
                       int64_t *runs) {
    int64_t nkb = (Sk + MM_BC - 1) / MM_BC, nqb = (Sq + MM_BR - 1) / MM_BR, off = causal == 2 ? Sk - Sq : 0;
    *packs = 2 * B * Hkv * nkb, *runs = 0;
    for (int64_t qb = 0; qb < nqb; qb++) { /* causal 1: top-left, 2: bottom-right */
        int64_t last = qb * MM_BR + (Sq - qb * MM_BR < MM_BR ? Sq - qb * MM_BR : MM_BR) - 1 + off;
        int64_t vis = causal ? (last + 1 < Sk ? last + 1 : Sk) : Sk;
        *runs += 2 * B * H * ((vis + MM_BC - 1) / MM_BC);
    }
}

/* one forward of bf16 q, k, v in DATA mode: out (B, H, Sq, D) */
static attn_status fwd(int64_t B, int64_t H, int64_t Hkv, int64_t Sq, int64_t Sk, int64_t D, int causal, attn_impl impl,
                       const uint16_t *q, const uint16_t *k, const uint16_t *v, float *out) {
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, B, H, Sq, Sk, D, D);
    d.Hkv = Hkv, d.math = ATTN_MATH_DATA, d.qkv_dtype = ATTN_DTYPE_BF16, d.impl = impl;
    d.causal = causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
    attn_view vq = {(float *)(void *)q, H * Sq * D, Sq * D, D}, vk = {(float *)(void *)k, Hkv * Sk * D, Sk * D, D};
    attn_view vv = {(float *)(void *)v, Hkv * Sk * D, Sk * D, D}, vo = {out, H * Sq * D, Sq * D, D};
    return attn_sdpa_forward(&d, vq, vk, vv, vo, NULL);
}

static uint16_t *bf16_rand(size_t n) {
    uint16_t *x = malloc(n * 2);
    for (size_t i = 0; i < n; i++) x[i] = tu_bf16(tu_frand(&seed));
    return x;
}

/* the backward's: K^T, V^T, K packed per kv head and key tile, Q and dO per query block; five products a
 * visible tile */
static void expect_bwd(int64_t B, int64_t H, int64_t Hkv, int64_t Sq, int64_t Sk, int causal, int64_t *packs,
                       int64_t *runs) {
    int64_t nkt = (Sk + MMB_BC - 1) / MMB_BC, nqb = (Sq + MMB_BR - 1) / MMB_BR;
    *packs = 3 * B * Hkv * nkt + 2 * B * H * nqb, *runs = 0;
    for (int64_t qb = 0; qb < nqb; qb++) {
        int64_t last = qb * MMB_BR + (Sq - qb * MMB_BR < MMB_BR ? Sq - qb * MMB_BR : MMB_BR) - 1;
        int64_t vis = causal ? (last + 1 < Sk ? last + 1 : Sk) : Sk;
        *runs += 5 * B * H * ((vis + MMB_BC - 1) / MMB_BC);
    }
}

/* the backward of fwd's problem: dq, dk, dv */
static attn_status bwd(int64_t B, int64_t H, int64_t Hkv, int64_t Sq, int64_t Sk, int64_t D, int causal, attn_impl impl,
                       const uint16_t *q, const uint16_t *k, const uint16_t *v, const float *dout, float *dq, float *dk,
                       float *dv) {
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, B, H, Sq, Sk, D, D);
    d.Hkv = Hkv, d.math = ATTN_MATH_DATA, d.qkv_dtype = ATTN_DTYPE_BF16, d.impl = impl;
    d.causal = causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
    attn_view vq = {(float *)(void *)q, H * Sq * D, Sq * D, D}, vk = {(float *)(void *)k, Hkv * Sk * D, Sk * D, D};
    attn_view vv = {(float *)(void *)v, Hkv * Sk * D, Sk * D, D}, vgo = {(float *)dout, H * Sq * D, Sq * D, D};
    attn_view gq = {dq, H * Sq * D, Sq * D, D}, gk = {dk, Hkv * Sk * D, Sk * D, D}, gv = {dv, Hkv * Sk * D, Sk * D, D};
    attn_view none = {NULL, 0, 0, 0};
    return attn_sdpa_backward(&d, vq, vk, vv, none, vgo, NULL, gq, gk, gv);
}

static void backward_case(int64_t B, int64_t H, int64_t Hkv, int64_t Sq, int64_t Sk, int64_t D, int causal, int on) {
    size_t nq = (size_t)(B * H * Sq * D), nk = (size_t)(B * Hkv * Sk * D);
    uint16_t *q = bf16_rand(nq), *k = bf16_rand(nk), *v = bf16_rand(nk);
    float *go = tu_rand_array(nq, &seed, 1.0f), *g1 = calloc(nq + 2 * nk, 4), *g2 = calloc(nq + 2 * nk, 4);
    float *gr = calloc(nq + 2 * nk, 4);
    attn_mm_counts c0, c1;
    omp_set_num_threads(1);
    attn_mm_counts_get(&c0);
    CHECK_OK(bwd(B, H, Hkv, Sq, Sk, D, causal, ATTN_IMPL_FAST, q, k, v, go, g1, g1 + nq, g1 + nq + nk));
    attn_mm_counts_get(&c1);
    int64_t packs, runs;
    expect_bwd(B, H, Hkv, Sq, Sk, causal, &packs, &runs);
    if (on)
        CHECK(c1.packs - c0.packs == packs && c1.runs - c0.runs == runs,
              "backward B=%lld H=%lld Hkv=%lld Sq=%lld Sk=%lld causal %d: %lld reorders, %lld products (want %lld, "
              "%lld)",
              (long long)B, (long long)H, (long long)Hkv, (long long)Sq, (long long)Sk, causal,
              (long long)(c1.packs - c0.packs), (long long)(c1.runs - c0.runs), (long long)packs, (long long)runs);
    else
        CHECK(c1.packs == c0.packs && c1.runs == c0.runs, "backward not through oneDNN: no call");
    omp_set_num_threads(2);
    CHECK_OK(bwd(B, H, Hkv, Sq, Sk, D, causal, ATTN_IMPL_FAST, q, k, v, go, g2, g2 + nq, g2 + nq + nk));
    tu_equal("backward, 1 and 2 threads", g1, g2, nq + 2 * nk);
    CHECK_OK(bwd(B, H, Hkv, Sq, Sk, D, causal, ATTN_IMPL_REF, q, k, v, go, gr, gr + nq, gr + nq + nk));
    tu_allclose("backward dq, the mode's reference", g1, gr, nq, 2e-2, 1e-2);
    tu_allclose("backward dk, dv, the mode's reference", g1 + nq, gr + nq, 2 * nk, 2e-2, 1e-2);
    free(q), free(k), free(v), free(go), free(g1), free(g2), free(gr);
}

static void forward_case(int64_t B, int64_t H, int64_t Hkv, int64_t Sq, int64_t Sk, int64_t D, int causal, int on) {
    size_t nq = (size_t)(B * H * Sq * D), nk = (size_t)(B * Hkv * Sk * D);
    uint16_t *q = bf16_rand(nq), *k = bf16_rand(nk), *v = bf16_rand(nk);
    float *o1 = calloc(nq, 4), *o2 = calloc(nq, 4), *ref = calloc(nq, 4);
    attn_mm_counts c0, c1;
    omp_set_num_threads(1);
    attn_mm_counts_get(&c0);
    CHECK_OK(fwd(B, H, Hkv, Sq, Sk, D, causal, ATTN_IMPL_FAST, q, k, v, o1));
    attn_mm_counts_get(&c1);
    int64_t packs, runs;
    expect_fwd(B, H, Hkv, Sq, Sk, causal, &packs, &runs);
    if (on) {
        CHECK(c1.packs - c0.packs == packs && c1.runs - c0.runs == runs,
              "B=%lld H=%lld Hkv=%lld Sq=%lld Sk=%lld causal %d: %lld reorders, %lld products (want %lld, %lld)",
              (long long)B, (long long)H, (long long)Hkv, (long long)Sq, (long long)Sk, causal,
              (long long)(c1.packs - c0.packs), (long long)(c1.runs - c0.runs), (long long)packs, (long long)runs);
    } else {
        CHECK(c1.packs == c0.packs && c1.runs == c0.runs, "products not through oneDNN: no call (%lld, %lld)",
              (long long)(c1.packs - c0.packs), (long long)(c1.runs - c0.runs));
    }
    omp_set_num_threads(2);
    CHECK_OK(fwd(B, H, Hkv, Sq, Sk, D, causal, ATTN_IMPL_FAST, q, k, v, o2));
    tu_equal("1 and 2 threads", o1, o2, nq);
    CHECK_OK(fwd(B, H, Hkv, Sq, Sk, D, causal, ATTN_IMPL_REF, q, k, v, ref));
    /* the mode's oracle rounds P against the row's final max, the tiles against running maxima: P's bf16
     * rounding (2^-9 relative) apart at most */
    tu_allclose("the mode's reference", o1, ref, nq, 1e-2, 4e-3);
    free(q), free(k), free(v), free(o1), free(o2), free(ref);
}

/* Decode with many rows a kv head (R = G Sq >= 32): the block products, oneDNN's where the mode's 16-bit
 * operands go there (two products a block of 256 keys), the kernels' tiles otherwise; against the mode's
 * reference, 1 and 2 threads equal, and caller pages (of 16 tokens) equal to the tensors' answer bit for bit */
static void decode_case(int64_t H, int64_t Hkv, int64_t Sq, int64_t Sk, int64_t D, int64_t Dv, int on) {
    size_t nq = (size_t)(H * Sq * D), nk = (size_t)(Hkv * Sk * D), nv = (size_t)(Hkv * Sk * Dv),
           no = (size_t)(H * Sq * Dv);
    uint16_t *q = bf16_rand(nq), *k = bf16_rand(nk), *v = bf16_rand(nv);
    float *qf = malloc(nq * 4), *o1 = calloc(no, 4), *o2 = calloc(no, 4), *o3 = calloc(no, 4), *ref = calloc(no, 4);
    for (size_t i = 0; i < nq; i++) { /* float32 queries (the pages' entry takes float32 q) of bf16 values */
        uint32_t u = (uint32_t)q[i] << 16;
        memcpy(&qf[i], &u, 4);
    }
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, H, Sq, Sk, D, Dv);
    d.Hkv = Hkv, d.math = ATTN_MATH_DATA, d.qkv_dtype = ATTN_DTYPE_BF16, d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    attn_view vq = {(float *)(void *)q, H * Sq * D, Sq * D, D}, vk = {(float *)(void *)k, Hkv * Sk * D, Sk * D, D};
    attn_view vv = {(float *)(void *)v, Hkv * Sk * Dv, Sk * Dv, Dv}, vo = {o1, H * Sq * Dv, Sq * Dv, Dv};
    attn_mm_counts c0, c1;
    omp_set_num_threads(1);
    attn_mm_counts_get(&c0);
    CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, vo, NULL));
    attn_mm_counts_get(&c1);
    int64_t nsplit = (Sk + 1023) / 1024, blocks = 0; /* decode's splits of 1024 keys, blocks of 256 */
    for (int64_t s = 0; s < nsplit; s++) blocks += ((Sk - s * 1024 < 1024 ? Sk - s * 1024 : 1024) + 255) / 256;
    if (on)
        CHECK(c1.runs - c0.runs == 2 * Hkv * blocks && c1.packs == c0.packs,
              "decode R=%lld: %lld products, %lld reorders (want %lld, 0)", (long long)(H / Hkv * Sq),
              (long long)(c1.runs - c0.runs), (long long)(c1.packs - c0.packs), (long long)(2 * Hkv * blocks));
    omp_set_num_threads(2);
    vo.data = o2;
    CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, vo, NULL));
    tu_equal("decode, 1 and 2 threads", o1, o2, no);
    /* the same rows in caller pages of 16 tokens (HND), appended through a slot mapping */
    int64_t ps = 16, np = (Sk + ps - 1) / ps;
    float *kf = malloc((size_t)(Sk * Hkv * D) * 4), *vf = malloc((size_t)(Sk * Hkv * Dv) * 4);
    int64_t *slots = malloc((size_t)Sk * 8);
    for (int64_t t = 0; t < Sk; t++) {
        slots[t] = t;
        for (int64_t hk = 0; hk < Hkv; hk++) {
            for (int64_t c = 0; c < D; c++) {
                uint32_t u = (uint32_t)k[(hk * Sk + t) * D + c] << 16;
                memcpy(&kf[(t * Hkv + hk) * D + c], &u, 4);
            }
            for (int64_t c = 0; c < Dv; c++) {
                uint32_t u = (uint32_t)v[(hk * Sk + t) * Dv + c] << 16;
                memcpy(&vf[(t * Hkv + hk) * Dv + c], &u, 4);
            }
        }
    }
    void *kp = calloc((size_t)(np * ps * Hkv * D), 2), *vp = calloc((size_t)(np * ps * Hkv * Dv), 2);
    int32_t *ind = malloc((size_t)np * 4), ip[2] = {0, (int32_t)np}, last = (int32_t)(Sk - (np - 1) * ps);
    for (int64_t i = 0; i < np; i++) ind[i] = (int32_t)(np - 1 - i); /* pages in reverse order */
    attn_paged_kv kv = {.dtype = ATTN_DTYPE_BF16,
                        .layout = ATTN_KV_HND,
                        .num_pages = np,
                        .page_size = ps,
                        .Hkv = Hkv,
                        .D = D,
                        .Dv = Dv,
                        .k_pages = kp,
                        .v_pages = vp,
                        .kv_indptr = ip,
                        .kv_indices = ind,
                        .kv_last_page_len = &last};
    for (int64_t t = 0; t < Sk; t++) slots[t] = (int64_t)ind[t / ps] * ps + t % ps;
    CHECK_OK(attn_paged_append(&kv, Sk, kf, vf, slots));
    attn_sdpa_desc e;
    attn_sdpa_desc_init(&e, 1, H, Sq, 0, D, Dv);
    e.Hkv = Hkv, e.math = ATTN_MATH_DATA, e.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    attn_view vqf = {qf, H * Sq * D, Sq * D, D}, vo3 = {o3, H * Sq * Dv, Sq * Dv, Dv};
    CHECK_OK(attn_paged_attention(&e, vqf, &kv, NULL, vo3, NULL));
    tu_equal("decode, caller pages and tensors", o1, o3, no);
    d.impl = ATTN_IMPL_REF, vo.data = ref;
    CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, vo, NULL));
    tu_allclose("decode, the mode's reference", o1, ref, no, 1e-2, 4e-3);
    free(q), free(k), free(v), free(qf), free(o1), free(o2), free(o3), free(ref), free(kf), free(vf), free(slots);
    free(kp), free(vp), free(ind);
}

/* Chunked prefill over caller pages: a chunk of Sq new rows after Sk - Sq cached keys (bottom-right) on the
 * forward's products (the pages gathered once as bf16, K and V packed once per key block) */
static void chunk_case(int64_t H, int64_t Hkv, int64_t Sq, int64_t Sk, int64_t D, int on) {
    int64_t ps = 32, np = (Sk + ps - 1) / ps;
    size_t nq = (size_t)(H * Sq * D), nr = (size_t)(Sk * Hkv * D);
    float *q = tu_rand_array(nq, &seed, 1.0f), *rows = tu_rand_array(nr, &seed, 1.0f);
    float *o1 = calloc(nq, 4), *o2 = calloc(nq, 4);
    void *kp = calloc((size_t)(np * ps * Hkv * D), 2), *vp = calloc((size_t)(np * ps * Hkv * D), 2);
    int64_t *slots = malloc((size_t)Sk * 8);
    int32_t *ind = malloc((size_t)np * 4), ip[2] = {0, (int32_t)np}, qo[2] = {0, (int32_t)Sq};
    int32_t last = (int32_t)(Sk - (np - 1) * ps);
    for (int64_t i = 0; i < np; i++) ind[i] = (int32_t)i;
    for (int64_t t = 0; t < Sk; t++) slots[t] = t;
    attn_paged_kv kv = {.dtype = ATTN_DTYPE_BF16,
                        .layout = ATTN_KV_NHD,
                        .num_pages = np,
                        .page_size = ps,
                        .Hkv = Hkv,
                        .D = D,
                        .Dv = D,
                        .k_pages = kp,
                        .v_pages = vp,
                        .kv_indptr = ip,
                        .kv_indices = ind,
                        .kv_last_page_len = &last};
    CHECK_OK(attn_paged_append(&kv, Sk, rows, rows, slots));
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, H, Sq, 0, D, D);
    d.Hkv = Hkv, d.math = ATTN_MATH_DATA, d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    attn_view vq = {q, H * Sq * D, D, H * D}, vo = {o1, H * Sq * D, D, H * D}; /* packed rows, token-major */
    attn_mm_counts c0, c1;
    omp_set_num_threads(2);
    attn_mm_counts_get(&c0);
    CHECK_OK(attn_paged_attention(&d, vq, &kv, qo, vo, NULL));
    attn_mm_counts_get(&c1);
    int64_t packs, runs;
    expect_fwd(1, H, Hkv, Sq, Sk, 2, &packs, &runs);
    if (on)
        CHECK(c1.packs - c0.packs == packs && c1.runs - c0.runs == runs,
              "chunked prefill Sq=%lld Sk=%lld: %lld reorders, %lld products (want %lld, %lld)", (long long)Sq,
              (long long)Sk, (long long)(c1.packs - c0.packs), (long long)(c1.runs - c0.runs), (long long)packs,
              (long long)runs);
    d.impl = ATTN_IMPL_REF, vo.data = o2;
    CHECK_OK(attn_paged_attention(&d, vq, &kv, qo, vo, NULL));
    tu_allclose("chunked prefill, the mode's reference", o1, o2, nq, 1e-2, 4e-3);
    free(q), free(rows), free(o1), free(o2), free(kp), free(vp), free(slots), free(ind);
}

/* The packing read in place: K and V rows already of the operand type (here float32 views with float32
 * operands, ATTN_PRODUCTS=onednn; bf16 views with bf16 operands on an AMX host) are reordered straight from
 * the view (strided rows); the packed bytes equal those packed from a contiguous copy, the tail block (past
 * Sk) from zero-padded rows, forward and backward */
static void pack_case(void) {
    attn_mm *m = attn_mm_thread();
    if (!m || attn_mm_type(ATTN_DTYPE_BF16) != ATTN_DTYPE_F32) return; /* float32 operands through oneDNN only */
    int64_t Sk = 600, D = 64, ld = D + 3;
    float *kv = tu_rand_array((size_t)(Sk * ld), &seed, 1.0f), *tmp = malloc((size_t)(256 * 2 * (D + 16)) * 4 + 4096);
    float *rows = calloc((size_t)(256 * D), 4);
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, 1, 1, Sk, D, D);
    attn_view k = {kv, Sk * ld, Sk * ld, ld};
    fwd_call c = {.d = &d, .kt = attn_kernels(), .DvP = D, .mt = ATTN_DTYPE_F32};
    CHECK(attn_fwd_mm_plan(&c), "float32 products through oneDNN");
    c.SkP = (Sk + c.bc - 1) / c.bc * c.bc;
    size_t head = attn_fwd_mm_head_bytes(&c), bad = 0;
    char *got = calloc(1, head), *want = malloc(head);
    CHECK_OK(attn_fwd_mm_pack(&c, k, k, 0, 0, got, tmp));
    for (int64_t j0 = 0; j0 < c.SkP; j0 += c.bc) { /* the reference: each block's rows copied, zeros past Sk */
        memset(rows, 0, (size_t)(256 * D) * 4);
        for (int64_t j = 0; j < c.bc && j0 + j < Sk; j++) memcpy(rows + j * D, kv + (j0 + j) * ld, (size_t)D * 4);
        char *blk = want + (size_t)(j0 / c.bc) * (c.kbytes + c.vbytes);
        memset(blk, 0, c.kbytes + c.vbytes);
        CHECK_OK(attn_mm_pack(m, &c.qk, rows, 1, D, blk));
        CHECK_OK(attn_mm_pack(m, &c.pv, rows, D, 1, blk + c.kbytes));
    }
    for (size_t i = 0; i < head; i++) bad += got[i] != want[i];
    CHECK(bad == 0, "forward: %zu packed bytes differ between the view read in place and its rows copied", bad);
    attn_bwd_mm_plan p;
    CHECK(attn_bwd_mm_plan_make(&p, ATTN_DTYPE_F32, D, D), "the backward's float32 products through oneDNN");
    int64_t nkt = (Sk + p.bc - 1) / p.bc;
    char *g2 = calloc((size_t)nkt, p.tile), *w2 = calloc((size_t)nkt, p.tile);
    CHECK_OK(attn_bwd_mm_pack_keys(&p, attn_kernels(), &d, k, k, 0, 0, nkt, g2, tmp));
    for (int64_t t = 0; t < nkt; t++) {
        memset(rows, 0, (size_t)(256 * D) * 4);
        for (int64_t j = 0; j < p.bc && t * p.bc + j < Sk; j++)
            memcpy(rows + j * D, kv + (t * p.bc + j) * ld, (size_t)D * 4);
        char *tile = w2 + (size_t)t * p.tile;
        memset(tile, 0, p.tile);
        CHECK_OK(attn_mm_pack(m, &p.s, rows, 1, D, tile));
        CHECK_OK(attn_mm_pack(m, &p.dp, rows, 1, D, tile + p.ks));
        CHECK_OK(attn_mm_pack(m, &p.dq, rows, D, 1, tile + p.ks + p.vs));
    }
    bad = 0;
    for (size_t i = 0; i < (size_t)nkt * p.tile; i++) bad += g2[i] != w2[i];
    CHECK(bad == 0, "backward: %zu packed bytes differ between the view read in place and its rows copied", bad);
    free(kv), free(tmp), free(rows), free(got), free(want), free(g2), free(w2);
}

/* auto where oneDNN multiplies bf16 on the matrix engine: the
 * representative shapes' products run on it (AMX on an AMX host, the
 * AVX512-BF16 kernels on an AVX512-BF16 host) */
static void amx_check(void) {
    attn_mm *m = attn_mm_thread();
    const char *e = getenv("ATTN_PRODUCTS");
    if (!m || attn_mm_type(ATTN_DTYPE_BF16) != ATTN_DTYPE_BF16 || (e && *e && strcmp(e, "auto"))) {
        printf("products: auto takes no bf16 products here (AMX or AVX512-BF16); engine check not run\n");
        return;
    }
    const char *d = attn_mm_describe(), *want = d && strstr(d, "(AMX") ? "amx" : "avx512_core_bf16";
    printf("products: auto's products on %s\n", want);
    for (int64_t D = 64; D <= 128; D += 64) {
        attn_mm_shape qk = {ATTN_DTYPE_BF16, MM_BR, MM_BC, D, D, 1, 0, 0, 0};
        attn_mm_shape pv = {ATTN_DTYPE_BF16, MM_BR, D, MM_BC, MM_BC, 1, 0, 0, 1};
        size_t n;
        CHECK_OK(attn_mm_prepare(m, &qk, &n));
        CHECK_OK(attn_mm_prepare(m, &pv, &n));
        const char *a = attn_mm_impl(m, &qk), *b = attn_mm_impl(m, &pv);
        CHECK(a && strstr(a, want) && b && strstr(b, want), "D=%lld: Q K^T on %s, P V on %s (want %s)", (long long)D,
              a ? a : "none", b ? b : "none", want);
    }
    attn_mm_counts c;
    attn_mm_counts_get(&c);
    CHECK(c.non_amx == 0, "%lld primitives refused (off %s)", (long long)c.non_amx, want);
}

int main(int argc, char **argv) {
    tu_init(argc, argv);
    /* through oneDNN: a bf16 operand type in the mode (bf16 or its float32 carriers) */
    int on = attn_mm_type(ATTN_DTYPE_BF16) != ATTN_DTYPE_Q8_0;
    printf("products: %s\n", on ? "through oneDNN" : "the kernels'");
    forward_case(1, 4, 2, 300, 600, 64, 0, on);  /* GQA, partial blocks */
    forward_case(2, 2, 2, 513, 513, 32, 1, on);  /* causal: nothing past the diagonal's block */
    forward_case(1, 3, 1, 100, 1100, 80, 0, on); /* one query block, odd D */
    backward_case(1, 4, 2, 200, 300, 64, 0, on); /* GQA: the group's blocks add into one kv head's partials */
    backward_case(2, 2, 1, 300, 300, 40, 1, on); /* causal; D not a multiple of 16 */
    decode_case(32, 8, 16, 1500, 64, 64, on);    /* a group of 4 x 16 speculative rows; two splits */
    decode_case(128, 1, 1, 700, 72, 64, on);     /* MLA-like: 128 heads over one kv head, Dv < D */
    chunk_case(4, 2, 200, 900, 64, on);          /* 200 new rows after 700 cached keys */
    pack_case();
    amx_check();
    return tu_finish("test_products");
}
