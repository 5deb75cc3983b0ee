/* The sharded KV cache (libattn_mpi: attn_kv_shard_*, attn_shard_decode,
 * attn_shard_prefill; issue 36) under mpirun with any number of ranks:
 * every rank builds the same random sequences, keeps a whole single-process
 * cache of them as the oracle, and feeds the sharded cache the same
 * appends. Decode (1 to 16 query rows: GQA, windows + softcap, ALiBi +
 * chunks, a padding mask and a tree mask over global keys, sinks) equals
 * the single process within float32 rounding, is the same bits on every
 * rank and on a repeated call; every row lands on the rank the policy
 * names (ranges, round-robin by pages; contiguous and paged local caches;
 * f32, bf16, int8 storage). Prefill: ring attention on each rank's prompt
 * shard equals the whole prompt's attention and leaves each K/V row on its
 * owner; decode after it equals the single process. Faults: a problem that
 * differs between ranks, different append counts, a rank out of pages:
 * the same status on every rank, no hang, the cache unchanged. */
#include "attn_mpi.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int rank, nranks;
enum { B = 2, HKV = 2, H = 4, D = 32, CAP = 400 };

/* the same bits on every rank? */
static int same_bits(const float *x, size_t n) {
    uint64_t h = 1469598103934665603ull, lo, hi;
    const unsigned char *p = (const unsigned char *)x;
    for (size_t i = 0; i < n * 4; i++) h = (h ^ p[i]) * 1099511628211ull;
    MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    return lo == hi;
}

/* the decode options of variant v (masks over global keys of CAP columns) */
static void options(attn_sdpa_desc *d, int v, float *slopes, float *sinks, uint8_t *kmask, uint8_t *tree, int64_t Sq,
                    uint32_t *s) {
    d->causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    if (v == 1) d->window = 1, d->window_left = 90, d->window_right = -1, d->softcap = 12.0f;
    if (v == 2) d->alibi_slopes = slopes, d->attention_chunk = 64;
    if (v == 3) {
        for (int i = 0; i < B * CAP; i++) kmask[i] = tu_irand(s, 0, 7) != 0;
        for (int64_t i = 0; i < Sq * CAP; i++) tree[i] = tu_irand(s, 0, 3) != 0;
        d->key_mask = kmask, d->key_mask_stride_b = CAP, d->key_mask_polarity = ATTN_MASK_TRUE_MEANS_KEEP;
        d->attn_mask = tree, d->attn_mask_strides[2] = CAP, d->attn_mask_strides[3] = 1;
    }
    if (v == 4) d->sinks = sinks;
}

/* rows appended in steps of 1..40 tokens to both caches; then decodes */
static void decode_case(attn_dtype dt, attn_shard_policy pol, int64_t block, int64_t page, uint32_t seed) {
    uint32_t s = seed;
    attn_kv_cache_config cfg = {.batch = B, .kv_heads = HKV, .capacity = CAP, .head_dim = D, .dtype = dt};
    attn_kv_cache *whole = NULL;
    attn_kv_shard *sh = NULL;
    CHECK_OK(attn_kv_cache_create(&cfg, &whole));
    attn_kv_cache_config sc = cfg;
    sc.page_size = page;
    CHECK_OK(attn_kv_shard_create(MPI_COMM_WORLD, &sc, pol, block, &sh));
    if (!whole || !sh) return;
    int64_t len[B] = {0, 0}, target[B] = {CAP - tu_irand(&s, 0, 30), tu_irand(&s, 50, 200)};
    float *k = malloc((size_t)B * HKV * 40 * D * 4), *v = malloc((size_t)B * HKV * 40 * D * 4);
    while (len[0] < target[0] || len[1] < target[1]) {
        int64_t n[B];
        for (int b = 0; b < B; b++) {
            n[b] = tu_irand(&s, 0, 40);
            if (n[b] > target[b] - len[b]) n[b] = target[b] - len[b];
        }
        for (int i = 0; i < B * HKV * 40 * D; i++) k[i] = 2.0f * tu_frand(&s), v[i] = tu_frand(&s);
        attn_view vk = {k, HKV * 40 * D, 40 * D, D}, vv = {v, HKV * 40 * D, 40 * D, D};
        CHECK_OK(attn_kv_cache_append(whole, n, vk, vv));
        CHECK_OK(attn_kv_shard_append(sh, n, vk, vv));
        for (int b = 0; b < B; b++) len[b] += n[b];
    }
    for (int b = 0; b < B; b++) CHECK(attn_kv_shard_len(sh, b) == len[b], "global length of %d", b);
    /* every position of this rank's shard holds the row the whole cache holds there */
    const attn_kv_cache *loc = attn_kv_shard_local(sh);
    int64_t held = 0, bad = 0;
    for (int b = 0; b < B; b++)
        for (int64_t g = 0, j = 0; g < len[b]; g++) {
            if (attn_kv_shard_owner(sh, g) != rank) continue;
            float a[D], c[D];
            attn_kv_cache_read(whole, b, 1, g, a, NULL);
            attn_kv_cache_read(loc, b, 1, j++, c, NULL);
            bad += memcmp(a, c, sizeof a) != 0, held++;
        }
    int64_t all = 0;
    MPI_Allreduce(&held, &all, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    CHECK(!bad && all == len[0] + len[1], "rows on their owners (%lld wrong; %lld of %lld held)", (long long)bad,
          (long long)all, (long long)(len[0] + len[1]));
    float slopes[H] = {0.5f, 0.25f, 0.125f, 0.0625f}, sinks[H] = {1.0f, -0.5f, 0.0f, 2.0f};
    uint8_t kmask[B * CAP], *tree = malloc(16 * CAP);
    for (int var = 0; var < 5; var++) {
        int64_t Sq = var == 3 ? 16 : 1 + var;
        size_t nq = (size_t)B * H * Sq * D, nl = (size_t)B * H * Sq;
        float *q = tu_rand_array(nq, &s, 1.0f), *want = malloc(nq * 4), *lw = malloc(nl * 4);
        float *got = malloc(nq * 4), *lg = malloc(nl * 4), *again = malloc(nq * 4);
        attn_sdpa_desc d;
        attn_sdpa_desc_init(&d, B, H, Sq, 0, D, D);
        d.Hkv = HKV;
        options(&d, var, slopes, sinks, kmask, tree, Sq, &s);
        attn_view vq = {q, H * Sq * D, Sq * D, D};
        CHECK_OK(attn_kv_cache_attend(whole, &d, vq, (attn_view){want, H * Sq * D, Sq * D, D}, lw));
        attn_ring_timing tm;
        CHECK_OK(attn_shard_decode(sh, &d, vq, (attn_view){got, H * Sq * D, Sq * D, D}, lg, &tm));
        CHECK_OK(attn_shard_decode(sh, &d, vq, (attn_view){again, H * Sq * D, Sq * D, D}, NULL, NULL));
        char what[128];
        snprintf(what, sizeof what, "type %d policy %d block %lld page %lld variant %d Sq %lld", (int)dt, (int)pol,
                 (long long)block, (long long)page, var, (long long)Sq);
        CHECK(tu_allclose(what, got, want, nq, 2e-5, 2e-6), "%s: equal to one process", what);
        CHECK(tu_allclose(what, lg, lw, nl, 2e-6, 2e-6), "%s: lse", what);
        CHECK(!memcmp(got, again, nq * 4), "%s: the same bits on a repeated call", what);
        CHECK(same_bits(got, nq) && same_bits(lg, nl), "%s: the same bits on every rank", what);
        CHECK(tm.bytes_sent == (int64_t)(nq + nl) * 4 * (nranks - 1), "%s: messages of (out, lse) only", what);
        free(q), free(want), free(lw), free(got), free(lg), free(again);
    }
    /* a fork (shared pages where the local caches are paged): sequence 1 becomes sequence 0, then both grow
     * apart; each equal to the whole cache fed the same operations */
    CHECK_OK(attn_kv_cache_fork(whole, 0, 1));
    CHECK_OK(attn_kv_shard_fork(sh, 0, 1));
    CHECK(attn_kv_shard_len(sh, 1) == len[0], "a fork copies the global length");
    int64_t two[B] = {3, 5};
    for (int i = 0; i < B * HKV * 40 * D; i++) k[i] = tu_frand(&s), v[i] = tu_frand(&s);
    attn_view vk = {k, HKV * 40 * D, 40 * D, D}, vv = {v, HKV * 40 * D, 40 * D, D};
    int64_t room[B] = {CAP - len[0] < 3 ? CAP - len[0] : 3, CAP - len[0] < 5 ? CAP - len[0] : 5};
    memcpy(two, room, sizeof two);
    CHECK_OK(attn_kv_cache_append(whole, two, vk, vv));
    CHECK_OK(attn_kv_shard_append(sh, two, vk, vv));
    {
        float q[B * H * D], o1[B * H * D], o2[B * H * D];
        for (int i = 0; i < B * H * D; i++) q[i] = tu_frand(&s);
        attn_sdpa_desc d;
        attn_sdpa_desc_init(&d, B, H, 1, 0, D, D);
        d.Hkv = HKV, d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        attn_view vq = {q, H * D, D, D};
        CHECK_OK(attn_kv_cache_attend(whole, &d, vq, (attn_view){o1, H * D, D, D}, NULL));
        CHECK_OK(attn_shard_decode(sh, &d, vq, (attn_view){o2, H * D, D, D}, NULL, NULL));
        CHECK(tu_allclose("after a fork", o2, o1, (size_t)B * H * D, 2e-5, 2e-6),
              "forked sequences decode as one process");
    }
    CHECK(attn_kv_shard_fork(sh, rank == 0 ? 0 : 1, 1) == (nranks == 1 ? ATTN_OK : ATTN_E_INVALID),
          "forks that differ between ranks");
    free(k), free(v), free(tree);
    attn_kv_cache_free(whole);
    attn_kv_shard_free(sh);
}

/* prefill one prompt per sequence by ring attention into the shards */
static void prefill_case(attn_shard_policy pol, int64_t block, attn_ring_layout layout, int causal) {
    uint32_t s = 99;
    int64_t S = 301;
    size_t nk = (size_t)B * HKV * S * D, nq = (size_t)B * H * S * D;
    float *q = tu_rand_array(nq, &s, 1.0f), *k = tu_rand_array(nk, &s, 2.0f), *v = tu_rand_array(nk, &s, 1.0f);
    float *want = malloc(nq * 4), *lw = malloc((size_t)B * H * S * 4);
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, B, H, S, S, D, D);
    d.Hkv = HKV, d.causal = causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
    attn_view vq = {q, H * S * D, S * D, D}, vk = {k, HKV * S * D, S * D, D}, vv = {v, HKV * S * D, S * D, D};
    CHECK_OK(attn_sdpa_forward(&d, vq, vk, vv, (attn_view){want, H * S * D, S * D, D}, lw));
    /* this rank's ring shard of q, k, v */
    int64_t st[2], ln[2], n = attn_ring_shard(S, nranks, rank, layout, st, ln);
    float *qs = malloc((size_t)B * H * (n + 1) * D * 4), *ks = malloc((size_t)B * HKV * (n + 1) * D * 4);
    float *vs = malloc((size_t)B * HKV * (n + 1) * D * 4), *os = malloc((size_t)B * H * (n + 1) * D * 4);
    float *ls = malloc((size_t)B * H * (n + 1) * 4);
    for (int64_t bh = 0; bh < B * H; bh++)
        for (int p = 0, at = 0; p < 2; p++)
            for (int64_t i = 0; i < ln[p]; i++, at++) {
                memcpy(qs + (bh * n + at) * D, q + (bh * S + st[p] + i) * D, D * 4);
                if (bh < B * HKV) {
                    memcpy(ks + (bh * n + at) * D, k + (bh * S + st[p] + i) * D, D * 4);
                    memcpy(vs + (bh * n + at) * D, v + (bh * S + st[p] + i) * D, D * 4);
                }
            }
    attn_kv_cache_config cfg = {.batch = B, .kv_heads = HKV, .capacity = CAP, .head_dim = D, .page_size = 16};
    attn_kv_shard *sh = NULL;
    CHECK_OK(attn_kv_shard_create(MPI_COMM_WORLD, &cfg, pol, block, &sh));
    attn_view sq = {qs, H * n * D, n * D, D}, sk = {ks, HKV * n * D, n * D, D}, sv = {vs, HKV * n * D, n * D, D};
    CHECK_OK(attn_shard_prefill(sh, &d, layout, sq, sk, sv, (attn_view){os, H * n * D, n * D, D}, ls, NULL));
    int bad = 0;
    for (int64_t bh = 0; bh < B * H; bh++)
        for (int p = 0, at = 0; p < 2; p++)
            for (int64_t i = 0; i < ln[p]; i++, at++)
                bad += !tu_allclose("prefill rows", os + (bh * n + at) * D, want + (bh * S + st[p] + i) * D, D, 1e-4,
                                    1e-5);
    CHECK(!bad, "prefill (policy %d, layout %d, causal %d): this rank's rows = the whole prompt's", (int)pol,
          (int)layout, causal);
    /* each row on its owner */
    const attn_kv_cache *loc = attn_kv_shard_local(sh);
    int64_t wrong = 0;
    for (int b = 0; b < B; b++)
        for (int64_t g = 0, j = 0; g < S; g++) {
            if (attn_kv_shard_owner(sh, g) != rank) continue;
            float a[D];
            attn_kv_cache_read(loc, b, 1, j++, a, NULL);
            wrong += memcmp(a, k + (((size_t)b * HKV + 1) * S + g) * D, sizeof a) != 0;
        }
    CHECK(!wrong && attn_kv_shard_len(sh, 1) == S, "prefill: every K row on its owner (%lld wrong)", (long long)wrong);
    /* decode after the prompt: one process over the same keys */
    attn_sdpa_desc dd;
    attn_sdpa_desc_init(&dd, B, H, 1, 0, D, D);
    dd.Hkv = HKV, dd.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    float q1[B * H * D], o1[B * H * D], o2[B * H * D];
    for (int i = 0; i < B * H * D; i++) q1[i] = tu_frand(&s);
    attn_sdpa_desc dw = dd;
    dw.Sk = S;
    attn_view vq1 = {q1, H * D, D, D};
    CHECK_OK(attn_sdpa_forward(&dw, vq1, vk, vv, (attn_view){o1, H * D, D, D}, NULL));
    CHECK_OK(attn_shard_decode(sh, &dd, vq1, (attn_view){o2, H * D, D, D}, NULL, NULL));
    CHECK(tu_allclose("decode after prefill", o2, o1, (size_t)B * H * D, 2e-5, 2e-6), "decode after the prefill");
    /* a second prefill into the filled sequences is refused everywhere */
    CHECK(attn_shard_prefill(sh, &d, layout, sq, sk, sv, (attn_view){os, H * n * D, n * D, D}, ls, NULL) ==
              ATTN_E_INVALID,
          "prefill into sequences that are not empty");
    attn_kv_shard_free(sh);
    free(q), free(k), free(v), free(want), free(lw), free(qs), free(ks), free(vs), free(os), free(ls);
}

/* faults: the same status on every rank, nothing changed, no hang */
static void faults(void) {
    attn_kv_cache_config cfg = {.batch = B, .kv_heads = HKV, .capacity = CAP, .head_dim = D};
    attn_kv_shard *sh = NULL;
    CHECK_OK(attn_kv_shard_create(MPI_COMM_WORLD, &cfg, ATTN_SHARD_ROUND_ROBIN, 16, &sh));
    float k[B * HKV * 8 * D] = {0}, q[B * H * D] = {0}, out[B * H * D];
    attn_view vk = {k, HKV * 8 * D, 8 * D, D}, vq = {q, H * D, D, D}, vo = {out, H * D, D, D};
    int64_t n[B] = {8, 3};
    CHECK_OK(attn_kv_shard_append(sh, n, vk, vk));
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, B, H, 1, 0, D, D);
    d.Hkv = HKV;
    if (rank == 0) d.window = 1, d.window_left = 4; /* rank 0 alone asks for a window */
    attn_status st = attn_shard_decode(sh, &d, vq, vo, NULL, NULL);
    CHECK(nranks == 1 ? st == ATTN_OK : st == ATTN_E_INVALID, "options that differ between ranks: %d", (int)st);
    int64_t m[B] = {rank == 0 ? 2 : 1, 1};
    st = attn_kv_shard_append(sh, m, vk, vk);
    CHECK(nranks == 1 ? st == ATTN_OK : st == ATTN_E_INVALID, "append counts that differ between ranks: %d", (int)st);
    if (nranks > 1) CHECK(attn_kv_shard_len(sh, 0) == 8, "a refused append changes nothing");
    int64_t big[B] = {CAP, 0};
    CHECK(attn_kv_shard_append(sh, big, vk, vk) == ATTN_E_CONTEXT, "past the capacity, on every rank");
    attn_kv_shard_free(sh);
    /* rank 0's pool runs out while the others have room: every rank fails, nothing changes */
    attn_kv_cache_config pc = cfg;
    pc.page_size = 16, pc.num_pages = 2;
    CHECK_OK(attn_kv_shard_create(MPI_COMM_WORLD, &pc, ATTN_SHARD_RANGES, CAP, &sh)); /* rank 0 holds everything */
    int64_t lens0[B] = {attn_kv_cache_len(attn_kv_shard_local(sh), 0), 0};
    int64_t fill[B] = {8, 8};
    for (int i = 0; i < 2; i++) CHECK_OK(attn_kv_shard_append(sh, fill, vk, vk)); /* 16 + 16 tokens: 2 pages */
    CHECK(attn_kv_shard_append(sh, fill, vk, vk) == ATTN_E_NOMEM, "a rank out of pages fails the step everywhere");
    CHECK(attn_kv_shard_len(sh, 0) == 16 && attn_kv_shard_len(sh, 1) == 16, "the failed step changed nothing");
    CHECK(attn_kv_cache_len(attn_kv_shard_local(sh), 0) == (rank == 0 ? 16 : lens0[0]), "local lengths unchanged");
    attn_kv_shard_free(sh);
    attn_kv_cache_config bad = cfg;
    bad.capacity = rank == 0 ? CAP : CAP + 1;
    st = attn_kv_shard_create(MPI_COMM_WORLD, &bad, ATTN_SHARD_ROUND_ROBIN, 16, &sh);
    CHECK(nranks == 1 ? st == ATTN_OK : st == ATTN_E_INVALID, "configurations that differ between ranks: %d", (int)st);
    attn_kv_shard_free(sh);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    tu_init(argc, argv);
    decode_case(ATTN_DTYPE_F32, ATTN_SHARD_ROUND_ROBIN, 16, 0, 1);
    decode_case(ATTN_DTYPE_BF16, ATTN_SHARD_ROUND_ROBIN, 64, 64, 2);
    decode_case(ATTN_DTYPE_KV_INT8, ATTN_SHARD_RANGES, 0, 16, 3);
    decode_case(ATTN_DTYPE_F32, ATTN_SHARD_RANGES, CAP / nranks + 7, 0, 4);
    prefill_case(ATTN_SHARD_ROUND_ROBIN, 32, ATTN_RING_ZIGZAG, 1);
    prefill_case(ATTN_SHARD_RANGES, 0, ATTN_RING_CONTIGUOUS, 1);
    prefill_case(ATTN_SHARD_RANGES, 0, ATTN_RING_ZIGZAG, 0);
    faults();
    int mine = tu_failures, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    char name[64];
    snprintf(name, sizeof name, "test_shard_mpi rank %d/%d", rank, nranks);
    int rc = tu_finish(name);
    MPI_Finalize();
    return all ? 1 : rc;
}
