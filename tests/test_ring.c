/* Ring attention (libattn_mpi) against the single-process result. Run under
 * mpirun with any number of ranks: every rank builds the same random
 * problems, computes the whole problem alone (attn_sdpa_forward/backward),
 * then runs the ring on its shard and compares its rows: out, lse, dq, dk,
 * dv. Cases: no mask, causal top-left and bottom-right (Sq != Sk), GQA,
 * padding masks, key lengths, windows, softcap, ALiBi, bf16 inputs, lengths
 * not divisible by the ranks (and shorter than 2 x ranks), both layouts.
 * Tolerance: rtol 1e-4, atol 1e-5 forward; 2e-4, 2e-5 backward (the merge
 * order differs from one online softmax: float32 rounding only). Also: bad
 * calls fail on every rank with the same status. */
#include "attn_mpi.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int rank, nranks;

/* rows of a (B, Hh, S, W) array (es-byte elements) that a shard holds, gathered into (B, Hh, n, W) */
static void *take(const void *all, int64_t es, int64_t B, int64_t Hh, int64_t S, int64_t W, const int64_t st[2],
                  const int64_t ln[2]) {
    int64_t n = ln[0] + ln[1];
    char *out = malloc((size_t)(B * Hh * n * W * es) + 1);
    for (int64_t bh = 0; bh < B * Hh; bh++)
        for (int p = 0, at = 0; p < 2; p++)
            for (int64_t i = 0; i < ln[p]; i++, at++)
                memcpy(out + (size_t)((bh * n + at) * W * es),
                       (const char *)all + (size_t)((bh * S + st[p] + i) * W * es), (size_t)(W * es));
    return out;
}

static attn_view v4(void *data, int64_t Hh, int64_t S, int64_t W) {
    attn_view v = {data, Hh * S * W, S * W, W};
    return v;
}

static void run_case(uint32_t *s, int cid) {
    int64_t B = tu_irand(s, 1, 2), Hkv = tu_irand(s, 1, 2), H = Hkv * tu_irand(s, 1, 2);
    int64_t Sq = tu_irand(s, 1, 80), Sk = tu_irand(s, 0, 3) == 0 ? Sq : tu_irand(s, 1, 90);
    int64_t D = 8 * tu_irand(s, 1, 3), Dv = tu_irand(s, 1, 24);
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, B, H, Sq, Sk, D, Dv);
    d.Hkv = Hkv;
    d.causal = (attn_causal)tu_irand(s, 0, 2);
    attn_ring_layout layout = (attn_ring_layout)tu_irand(s, 0, 1);
    int64_t *seqlens = NULL;
    uint8_t *mask = NULL;
    float *slopes = NULL;
    if (tu_irand(s, 0, 3) == 0) {
        seqlens = malloc((size_t)B * sizeof *seqlens);
        for (int64_t b = 0; b < B; b++) seqlens[b] = tu_irand(s, 0, (int)Sk);
        d.seqlens_k = seqlens;
    }
    if (tu_irand(s, 0, 2) == 0) {
        mask = malloc((size_t)(B * Sk) + 1);
        for (int64_t i = 0; i < B * Sk; i++) mask[i] = tu_irand(s, 0, 4) == 0;
        d.key_mask = mask, d.key_mask_stride_b = Sk, d.key_mask_polarity = ATTN_MASK_TRUE_MEANS_MASKED;
    }
    if (tu_irand(s, 0, 4) == 0) d.window = 1, d.window_left = tu_irand(s, -1, 12), d.window_right = tu_irand(s, -1, 3);
    if (tu_irand(s, 0, 4) == 0) d.softcap = 5.0f;
    if (tu_irand(s, 0, 4) == 0) {
        slopes = malloc((size_t)H * sizeof *slopes);
        for (int64_t h = 0; h < H; h++) slopes[h] = 0.1f * (float)(h + 1);
        d.alibi_slopes = slopes;
    }
    size_t nq = (size_t)(B * H * Sq * D), nk = (size_t)(B * Hkv * Sk * D), nv = (size_t)(B * Hkv * Sk * Dv);
    size_t no = (size_t)(B * H * Sq * Dv), nl = (size_t)(B * H * Sq);
    float *q = tu_rand_array(nq, s, 1.5f), *k = tu_rand_array(nk, s, 1.5f), *v = tu_rand_array(nv, s, 1.0f),
          *dout = tu_rand_array(no, s, 1.0f);
    int bf16 = tu_irand(s, 0, 4) == 0;
    int64_t es = bf16 ? 2 : 4;
    void *Q = q, *K = k, *V = v;
    if (bf16) {
        d.qkv_dtype = ATTN_DTYPE_BF16;
        uint16_t *q16 = malloc(nq * 2 + 2), *k16 = malloc(nk * 2 + 2), *v16 = malloc(nv * 2 + 2);
        for (size_t i = 0; i < nq; i++) q16[i] = tu_bf16(q[i]);
        for (size_t i = 0; i < nk; i++) k16[i] = tu_bf16(k[i]);
        for (size_t i = 0; i < nv; i++) v16[i] = tu_bf16(v[i]);
        Q = q16, K = k16, V = v16;
    }
    /* the whole problem, alone */
    float *out = calloc(no + 1, 4), *lse = calloc(nl + 1, 4), *dq = calloc(nq + 1, 4), *dk = calloc(nk + 1, 4),
          *dv = calloc(nv + 1, 4);
    attn_view none = {0};
    CHECK_OK(attn_sdpa_forward(&d, v4(Q, H, Sq, D), v4(K, Hkv, Sk, D), v4(V, Hkv, Sk, Dv), v4(out, H, Sq, Dv), lse));
    CHECK_OK(attn_sdpa_backward(&d, v4(Q, H, Sq, D), v4(K, Hkv, Sk, D), v4(V, Hkv, Sk, Dv), none, v4(dout, H, Sq, Dv),
                                NULL, v4(dq, H, Sq, D), v4(dk, Hkv, Sk, D), v4(dv, Hkv, Sk, Dv)));
    /* this rank's shard through the ring */
    int64_t qs[2], ql[2], ks[2], kl[2];
    int64_t mq = attn_ring_shard(Sq, nranks, rank, layout, qs, ql),
            mk = attn_ring_shard(Sk, nranks, rank, layout, ks, kl);
    void *lq = take(Q, es, B, H, Sq, D, qs, ql), *lk = take(K, es, B, Hkv, Sk, D, ks, kl);
    void *lv = take(V, es, B, Hkv, Sk, Dv, ks, kl), *ldo = take(dout, 4, B, H, Sq, Dv, qs, ql);
    float *want_o = take(out, 4, B, H, Sq, Dv, qs, ql), *want_l = take(lse, 4, B, H, Sq, 1, qs, ql);
    float *want_dq = take(dq, 4, B, H, Sq, D, qs, ql), *want_dk = take(dk, 4, B, Hkv, Sk, D, ks, kl);
    float *want_dv = take(dv, 4, B, Hkv, Sk, Dv, ks, kl);
    size_t lo_n = (size_t)(B * H * mq * Dv), ll_n = (size_t)(B * H * mq);
    float *got_o = calloc(lo_n + 1, 4), *got_l = calloc(ll_n + 1, 4), *got_dq = calloc((size_t)(B * H * mq * D) + 1, 4);
    float *got_dk = calloc((size_t)(B * Hkv * mk * D) + 1, 4), *got_dv = calloc((size_t)(B * Hkv * mk * Dv) + 1, 4);
    attn_ring_timing tm;
    attn_status st = attn_ring_forward(MPI_COMM_WORLD, &d, layout, v4(lq, H, mq, D), v4(lk, Hkv, mk, D),
                                       v4(lv, Hkv, mk, Dv), v4(got_o, H, mq, Dv), got_l, &tm);
    CHECK(st == ATTN_OK, "case %d rank %d: ring forward: %s", cid, rank, attn_status_string(st));
    CHECK(tm.steps == nranks, "case %d: %d steps", cid, tm.steps);
    char label[128];
    snprintf(label, sizeof label, "case %d rank %d/%d %s: out", cid, rank, nranks, layout ? "zigzag" : "contiguous");
    tu_allclose(label, got_o, want_o, lo_n, 1e-4, 1e-5);
    snprintf(label, sizeof label, "case %d rank %d: lse", cid, rank);
    tu_allclose(label, got_l, want_l, ll_n, 1e-4, 1e-5);
    st = attn_ring_backward(MPI_COMM_WORLD, &d, layout, v4(lq, H, mq, D), v4(lk, Hkv, mk, D), v4(lv, Hkv, mk, Dv),
                            v4(ldo, H, mq, Dv), v4(got_dq, H, mq, D), v4(got_dk, Hkv, mk, D), v4(got_dv, Hkv, mk, Dv),
                            &tm);
    CHECK(st == ATTN_OK, "case %d rank %d: ring backward: %s", cid, rank, attn_status_string(st));
    snprintf(label, sizeof label, "case %d rank %d: dq", cid, rank);
    tu_allclose(label, got_dq, want_dq, (size_t)(B * H * mq * D), 2e-4, 2e-5);
    snprintf(label, sizeof label, "case %d rank %d: dk", cid, rank);
    tu_allclose(label, got_dk, want_dk, (size_t)(B * Hkv * mk * D), 2e-4, 2e-5);
    snprintf(label, sizeof label, "case %d rank %d: dv", cid, rank);
    tu_allclose(label, got_dv, want_dv, (size_t)(B * Hkv * mk * Dv), 2e-4, 2e-5);
    free(lq), free(lk), free(lv), free(ldo), free(want_o), free(want_l), free(want_dq), free(want_dk), free(want_dv);
    free(got_o), free(got_l), free(got_dq), free(got_dk), free(got_dv);
    free(out), free(lse), free(dq), free(dk), free(dv), free(q), free(k), free(v), free(dout);
    if (bf16) free(Q), free(K), free(V);
    free(seqlens), free(mask), free(slopes);
}

/* bad calls: every rank gets the same error, nobody hangs */
static void refused(void) {
    float x[64] = {0};
    attn_view w = {x, 16, 16, 4};
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, 1, 2 * nranks, 2 * nranks, 4, 4);
    float big[1024] = {0};
    attn_view b = {big, 64, 64, 4};
    attn_sdpa_desc e = d;
    e.Sq += rank; /* ranks disagree on the problem */
    if (nranks > 1)
        CHECK(attn_ring_forward(MPI_COMM_WORLD, &e, ATTN_RING_CONTIGUOUS, b, b, b, b, NULL, NULL) == ATTN_E_INVALID,
              "ranks disagreeing on the problem");
    e = d;
    CHECK(attn_ring_forward(MPI_COMM_WORLD, &e, (attn_ring_layout)7, b, b, b, b, NULL, NULL) == ATTN_E_INVALID,
          "bad layout");
    attn_view nul = {NULL, 0, 0, 0};
    /* one rank passes no output: all fail */
    CHECK(attn_ring_forward(MPI_COMM_WORLD, &d, ATTN_RING_CONTIGUOUS, b, b, b, rank == 0 ? nul : w, NULL, NULL) ==
              ATTN_E_INVALID,
          "a missing output on one rank");
    attn_generator g;
    attn_generator_seed(&g, 1);
    attn_dropout dr;
    CHECK_OK(attn_dropout_begin(&g, 0.5, 16, &dr));
    e = d;
    e.dropout = &dr;
    CHECK(attn_ring_forward(MPI_COMM_WORLD, &e, ATTN_RING_ZIGZAG, b, b, b, b, NULL, NULL) == ATTN_E_UNSUPPORTED,
          "dropout");
    attn_dropout_end(&dr);
    int64_t st[2], ln[2];
    CHECK(attn_ring_shard(10, 4, 1, ATTN_RING_ZIGZAG, st, ln) == 2 && st[0] == 1 && ln[0] == 1 && st[1] == 7 &&
              ln[1] == 1,
          "zigzag shard of 10 rows, rank 1 of 4: chunks 1 and 6 of 8, [1,2) and [7,8)");
    CHECK(attn_ring_shard(10, 4, 3, ATTN_RING_CONTIGUOUS, st, ln) == 3 && st[0] == 7 && ln[1] == 0,
          "contiguous shard of 10 rows, rank 3 of 4: [7,10)");
    CHECK(attn_ring_shard(10, 4, 4, ATTN_RING_ZIGZAG, st, ln) == -1, "rank out of range");
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    tu_init(argc, argv);
    uint32_t s = 777;
    int ncases = argc > 2 ? atoi(argv[2]) : 40;
    for (int c = 0; c < ncases; c++) run_case(&s, c);
    refused();
    int mine = tu_failures, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    char name[64];
    snprintf(name, sizeof name, "test_ring rank %d/%d", rank, nranks);
    int rc = tu_finish(name);
    MPI_Finalize();
    return all ? 1 : rc;
}
