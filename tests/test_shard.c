/* A KV cache split into shards (attn.h, attn_kv_cache_attend_at; issue 36's
 * building block, one process): the keys of B sequences of different
 * lengths dealt to n shards by contiguous ranges and round-robin by pages
 * (pages of 16 and 64 tokens; shards contiguous and paged caches; f32, f16,
 * q8_0, int8 storage), each shard attended with its global positions, the
 * shares merged with attn_merge_states in shard order (the sinks merged in
 * last): equal within float32 rounding to attention over the whole cache,
 * for decode of 1 and 5 query rows with GQA, windows, softcap, ALiBi,
 * chunks, a padding mask, a dense tree mask over global keys and sinks; 1
 * and 2 threads bitwise; a shard without keys gives zeros and lse -inf; bad
 * positions get a status. */
#include "testutil.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

enum { B = 3, HKV = 2, H = 4, D = 32, CAP = 300 };
static uint32_t lcg = 36u;

typedef struct layout {
    int n, rr;    /* shards; round-robin by pages (else contiguous ranges) */
    int64_t page; /* round-robin page, or the contiguous range length */
} layout;

/* the shard holding global position g, and its local index there */
static int owner(const layout *L, int64_t g, int64_t *local) {
    if (!L->rr) {
        *local = g % L->page;
        return (int)(g / L->page);
    }
    int64_t p = g / L->page;
    *local = p / L->n * L->page + g % L->page;
    return (int)(p % L->n);
}

static attn_kv_positions positions(const layout *L, int r, const int64_t *glen) {
    attn_kv_positions p = {glen, L->page, L->rr ? L->n * L->page : L->page * L->n, L->rr ? r * L->page : r * L->page};
    if (!L->rr) p.stride = L->page; /* one range: block >= its length */
    return p;
}

/* one configuration: the whole cache against the merged shards */
static void run(attn_dtype dt, const layout *L, int cache_page, int64_t Sq, int variant) {
    static const int64_t glen[B] = {257, 40, 130};
    attn_kv_cache_config cfg = {.batch = B, .kv_heads = HKV, .capacity = CAP, .head_dim = D, .dtype = dt};
    attn_kv_cache *whole = NULL, *sh[4] = {NULL};
    CHECK_OK(attn_kv_cache_create(&cfg, &whole));
    attn_kv_cache_config sc = cfg;
    sc.page_size = cache_page;
    for (int r = 0; r < L->n; r++) CHECK_OK(attn_kv_cache_create(&sc, &sh[r]));
    /* the rows, token by token, to the whole cache and to their shard */
    float k[B * HKV * D], v[B * HKV * D];
    attn_view vk = {k, HKV * D, D, D}, vv = {v, HKV * D, D, D};
    for (int64_t t = 0; t < CAP; t++) {
        int64_t n[B], ns[4][B];
        memset(ns, 0, sizeof ns);
        for (int i = 0; i < B * HKV * D; i++) k[i] = 2.0f * tu_frand(&lcg), v[i] = tu_frand(&lcg);
        for (int b = 0; b < B; b++) {
            n[b] = t < glen[b];
            int64_t loc;
            if (n[b]) ns[owner(L, t, &loc)][b] = 1;
        }
        CHECK_OK(attn_kv_cache_append(whole, n, vk, vv));
        for (int r = 0; r < L->n; r++) CHECK_OK(attn_kv_cache_append(sh[r], ns[r], vk, vv));
    }
    size_t nq = (size_t)B * H * Sq * D, nl = (size_t)B * H * Sq;
    float *q = tu_rand_array(nq, &lcg, 1.0f), *want = malloc(nq * 4), *lw = malloc(nl * 4);
    float *acc = malloc(nq * 4), *la = malloc(nl * 4), *part = malloc(nq * 4), *lp = malloc(nl * 4);
    float *again = malloc(nq * 4);
    float slopes[H] = {0.5f, 0.25f, 0.125f, 0.0625f}, sinks[H] = {1.0f, -0.5f, 0.0f, 2.0f};
    uint8_t *tree = malloc((size_t)Sq * CAP), kmask[B * CAP];
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, B, H, Sq, 0, D, D);
    d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    if (variant == 1) d.window = 1, d.window_left = 70, d.window_right = -1, d.softcap = 15.0f;
    if (variant == 2) d.alibi_slopes = slopes, d.attention_chunk = 48;
    if (variant == 3) { /* a padding mask and a tree mask over global keys */
        for (int i = 0; i < B * CAP; i++) kmask[i] = tu_irand(&lcg, 0, 9) != 0;
        for (int64_t i = 0; i < Sq * CAP; i++) tree[i] = tu_irand(&lcg, 0, 3) != 0;
        d.key_mask = kmask, d.key_mask_stride_b = CAP, d.key_mask_polarity = ATTN_MASK_TRUE_MEANS_KEEP;
        d.attn_mask = tree, d.attn_mask_strides[2] = CAP, d.attn_mask_strides[3] = 1;
    }
    attn_view vq = {q, H * Sq * D, Sq * D, D}, vo = {want, H * Sq * D, Sq * D, D};
    attn_sdpa_desc dw = d;
    if (variant == 4) dw.sinks = sinks;
    CHECK_OK(attn_kv_cache_attend(whole, &dw, vq, vo, lw));
    for (int rep = 0; rep < 2; rep++) {
        omp_set_num_threads(rep ? 1 : 2);
        for (int r = 0; r < L->n; r++) {
            attn_kv_positions p = positions(L, r, glen);
            attn_view po = {r ? part : acc, H * Sq * D, Sq * D, D};
            CHECK_OK(attn_kv_cache_attend_at(sh[r], &d, &p, vq, po, r ? lp : la));
            if (r) CHECK_OK(attn_merge_states((int64_t)nl, D, acc, la, part, lp, acc, la));
        }
        if (variant == 4) { /* the sinks: a state of no value merged last */
            memset(part, 0, nq * 4);
            for (size_t i = 0; i < nl; i++) lp[i] = sinks[(i / Sq) % H];
            CHECK_OK(attn_merge_states((int64_t)nl, D, acc, la, part, lp, acc, la));
        }
        if (rep) {
            CHECK(!memcmp(acc, again, nq * 4), "1 and 2 threads bitwise");
        } else {
            memcpy(again, acc, nq * 4);
        }
    }
    omp_set_num_threads(2);
    char what[128];
    snprintf(what, sizeof what, "type %d, %d shards %s of %lld, cache pages %d, Sq %lld, variant %d", (int)dt, L->n,
             L->rr ? "round-robin" : "ranges", (long long)L->page, cache_page, (long long)Sq, variant);
    CHECK(tu_allclose(what, acc, want, nq, 2e-5, 2e-6), "%s: the merged shards", what);
    CHECK(tu_allclose(what, la, lw, nl, 2e-6, 2e-6), "%s: lse", what);
    free(q), free(want), free(lw), free(acc), free(la), free(part), free(lp), free(again), free(tree);
    attn_kv_cache_free(whole);
    for (int r = 0; r < L->n; r++) attn_kv_cache_free(sh[r]);
}

static void refused(void) {
    attn_kv_cache_config cfg = {.batch = 1, .kv_heads = 1, .capacity = 8, .head_dim = 8};
    attn_kv_cache *c = NULL;
    CHECK_OK(attn_kv_cache_create(&cfg, &c));
    float rows[4 * 8] = {0}, q[8] = {0}, out[8];
    int64_t n[1] = {4}, glen[1] = {10};
    CHECK_OK(attn_kv_cache_append(c, n, (attn_view){rows, 32, 8, 8}, (attn_view){rows, 32, 8, 8}));
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, 1, 1, 0, 8, 8);
    attn_view vq = {q, 8, 8, 8}, vo = {out, 8, 8, 8};
    attn_kv_positions ok = {glen, 2, 4, 2}; /* keys at 2, 3, 6, 7 of 10 */
    CHECK_OK(attn_kv_cache_attend_at(c, &d, &ok, vq, vo, NULL));
    attn_kv_positions past = {glen, 2, 8, 2}; /* the last key at 10: past the length */
    CHECK(attn_kv_cache_attend_at(c, &d, &past, vq, vo, NULL) == ATTN_E_INVALID, "a key past its sequence");
    attn_kv_positions bad = {glen, 4, 2, 0};
    CHECK(attn_kv_cache_attend_at(c, &d, &bad, vq, vo, NULL) == ATTN_E_INVALID, "stride < block");
    CHECK(attn_kv_cache_attend_at(c, &d, NULL, vq, vo, NULL) == ATTN_E_INVALID, "no positions");
    d.Sq = 17;
    CHECK(attn_kv_cache_attend_at(c, &d, &ok, vq, vo, NULL) == ATTN_E_UNSUPPORTED, "more rows than decode's");
    d.Sq = 1, d.impl = ATTN_IMPL_REF;
    CHECK(attn_kv_cache_attend_at(c, &d, &ok, vq, vo, NULL) == ATTN_E_UNSUPPORTED, "the reference path");
    /* a shard whose keys are all hidden: zeros and -inf */
    d.impl = ATTN_IMPL_FAST, d.window = 1, d.window_left = 1, d.window_right = -1, d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    float lse = 0;
    for (int i = 0; i < 8; i++) out[i] = 7.0f;
    attn_kv_positions early = {glen, 4, 4, 0}; /* keys 0 .. 3 of 10; the row sees 8 and 9 */
    CHECK_OK(attn_kv_cache_attend_at(c, &d, &early, vq, vo, &lse));
    CHECK(out[0] == 0.0f && out[7] == 0.0f && lse == -INFINITY, "no visible key here: zeros, lse -inf");
    attn_kv_cache_free(c);
}

int main(int argc, char **argv) {
    tu_init(argc, argv);
    omp_set_num_threads(2);
    static const attn_dtype types[4] = {ATTN_DTYPE_F32, ATTN_DTYPE_F16, ATTN_DTYPE_Q8_0, ATTN_DTYPE_KV_INT8};
    for (int t = 0; t < 4; t++)
        for (int v = 0; v < 5; v++) {
            layout rr2 = {2, 1, 16}, rr3 = {3, 1, 64}, ranges = {3, 0, 100};
            run(types[t], &rr2, (t + v) % 2 ? 16 : 0, v % 2 ? 5 : 1, v);
            run(types[t], &rr3, 64, 1 + (v * 3) % 16, v);
            run(types[t], &ranges, v % 2 ? 0 : 20, v % 2 ? 1 : 4, v);
        }
    refused();
    return tu_finish("test_shard");
}
