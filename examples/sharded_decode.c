/* A KV cache sharded over MPI ranks: one long prompt served across machines.
 *
 * A small decoder (one attention layer with GQA and random weights: token
 * embedding plus a position signal, q / k / v projections, attention,
 * output projection, logits against the embedding) reads a prompt of S
 * tokens and then generates N tokens greedily, its KV cache spread over the
 * ranks (round-robin by pages of 64 tokens):
 *   - prefill: each rank projects only its ring shard of the prompt, ring
 *     attention computes the prompt's attention, and every K/V row moves to
 *     the rank that keeps it (attn_shard_prefill): the whole prompt is
 *     never gathered anywhere;
 *   - decode: every rank projects the new token, the rank that owns its
 *     position keeps its K/V (attn_kv_shard_append), and each step's
 *     attention is exact tree attention over the shards (attn_shard_decode:
 *     one all-gather of (out, lse), merged in rank order).
 * Every rank also runs the same decoder in one process over a whole cache
 * (the oracle). The last line says whether the N tokens agree and the
 * largest logit difference:
 *   sharded decode: N tokens equal to one process, max |logit diff| X
 * (or "... differ from one process ..." and exit status 1).
 *
 * Build and run: make examples (mpirun -np 2); usage: sharded_decode [--quick] */
#include <attn_mpi.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { VOCAB = 97, C = 64, H = 4, HKV = 2, HD = 16, PAGE = 64 };

typedef struct model {
    float emb[VOCAB * C], wq[C * H * HD], wk[C * HKV * HD], wv[C * HKV * HD], wo[H * HD * C];
} model;

static float frand(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) / 16777216.0f * 2.0f - 1.0f;
}

/* y (m) = x (n) W (n x m) */
static void matvec(const float *x, const float *w, int n, int m, float *y) {
    for (int j = 0; j < m; j++) y[j] = 0.0f;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++) y[j] += x[i] * w[i * m + j];
}

/* token tok at position p: its input vector and q (H, HD), k, v (HKV, HD) rows */
static void project(const model *M, int tok, int64_t p, float *x, float *q, float *k, float *v) {
    for (int c = 0; c < C; c++) x[c] = M->emb[tok * C + c] + 0.3f * sinf((float)p * powf(0.7f, (float)c));
    matvec(x, M->wq, C, H * HD, q), matvec(x, M->wk, C, HKV * HD, k), matvec(x, M->wv, C, HKV * HD, v);
}

/* logits of the next token from x and the attention output a (H x HD); the argmax */
static int next_token(const model *M, const float *x, const float *a, float *logits) {
    float y[C];
    matvec(a, M->wo, H * HD, C, y);
    for (int c = 0; c < C; c++) y[c] += x[c];
    int best = 0;
    for (int t = 0; t < VOCAB; t++) {
        logits[t] = 0.0f;
        for (int c = 0; c < C; c++) logits[t] += y[c] * M->emb[t * C + c];
        if (logits[t] > logits[best]) best = t;
    }
    return best;
}

static int fail(const char *what, attn_status st) {
    fprintf(stderr, "sharded_decode: %s: %s\n", what, attn_status_string(st));
    MPI_Abort(MPI_COMM_WORLD, 2);
    return 2;
}

/* the prompt through one process: K/V of every token in a whole cache, the
 * first generated token's logits */
static int oracle_prefill(const model *M, const int *prompt, int64_t S, attn_kv_cache *cache, float *logits) {
    float x[C], q[H * HD], k[HKV * HD], v[HKV * HD], a[H * HD];
    int64_t one[1] = {1};
    for (int64_t p = 0; p < S; p++) {
        project(M, prompt[p], p, x, q, k, v);
        attn_status st =
            attn_kv_cache_append(cache, one, (attn_view){k, HKV * HD, HD, HD}, (attn_view){v, HKV * HD, HD, HD});
        if (st) return fail("one-process append", st);
    }
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, H, 1, 0, HD, HD);
    d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    attn_status st =
        attn_kv_cache_attend(cache, &d, (attn_view){q, H * HD, HD, HD}, (attn_view){a, H * HD, HD, HD}, NULL);
    if (st) return fail("one-process attend", st);
    return next_token(M, x, a, logits);
}

/* the prompt through the shards: this rank's ring rows projected, ring
 * attention, rows to their owners; the first token from the rank holding
 * the prompt's last row, broadcast */
static int sharded_prefill(const model *M, const int *prompt, int64_t S, attn_kv_shard *sh, int rank, int n,
                           float *logits) {
    int64_t st0[2], ln[2], m = attn_ring_shard(S, n, rank, ATTN_RING_ZIGZAG, st0, ln);
    float *q = malloc((size_t)(H * (m + 1) * HD) * 4), *k = malloc((size_t)(HKV * (m + 1) * HD) * 4);
    float *v = malloc((size_t)(HKV * (m + 1) * HD) * 4), *o = malloc((size_t)(H * (m + 1) * HD) * 4);
    float x[C], qr[H * HD], kr[HKV * HD], vr[HKV * HD], xl[C];
    int last_here = 0;
    if (!q || !k || !v || !o) return fail("prefill buffers", ATTN_E_NOMEM);
    for (int p = 0, at = 0; p < 2; p++) /* rows (h, at) of (H, m, HD) */
        for (int64_t i = st0[p]; i < st0[p] + ln[p]; i++, at++) {
            project(M, prompt[i], i, x, qr, kr, vr);
            for (int h = 0; h < H; h++) memcpy(q + ((int64_t)h * m + at) * HD, qr + h * HD, HD * 4);
            for (int h = 0; h < HKV; h++) {
                memcpy(k + ((int64_t)h * m + at) * HD, kr + h * HD, HD * 4);
                memcpy(v + ((int64_t)h * m + at) * HD, vr + h * HD, HD * 4);
            }
            if (i == S - 1) last_here = at + 1, memcpy(xl, x, sizeof xl);
        }
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, H, S, S, HD, HD);
    d.Hkv = HKV, d.causal = ATTN_CAUSAL_TOP_LEFT;
    attn_view vq = {q, H * m * HD, m * HD, HD}, vk = {k, HKV * m * HD, m * HD, HD}, vv = {v, HKV * m * HD, m * HD, HD};
    attn_status st =
        attn_shard_prefill(sh, &d, ATTN_RING_ZIGZAG, vq, vk, vv, (attn_view){o, H * m * HD, m * HD, HD}, NULL, NULL);
    if (st) return fail("sharded prefill", st);
    int tok = 0, owner = 0, flag = last_here ? rank : -1;
    if (last_here) {
        float a[H * HD];
        for (int h = 0; h < H; h++) memcpy(a + h * HD, o + ((int64_t)h * m + last_here - 1) * HD, HD * 4);
        tok = next_token(M, xl, a, logits);
    }
    MPI_Allreduce(&flag, &owner, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Bcast(&tok, 1, MPI_INT, owner, MPI_COMM_WORLD);
    MPI_Bcast(logits, VOCAB, MPI_FLOAT, owner, MPI_COMM_WORLD);
    free(q), free(k), free(v), free(o);
    return tok;
}

/* one decode step of token tok at position p: both ways; the two next tokens */
static void step(const model *M, int tok, int64_t p, attn_kv_cache *whole, attn_kv_shard *sh, int *t1, int *t2,
                 float *l1, float *l2) {
    float x[C], q[H * HD], k[HKV * HD], v[HKV * HD], a1[H * HD], a2[H * HD];
    project(M, tok, p, x, q, k, v);
    int64_t one[1] = {1};
    attn_view vk = {k, HKV * HD, HD, HD}, vv = {v, HKV * HD, HD, HD};
    attn_status st = attn_kv_cache_append(whole, one, vk, vv);
    if (!st) st = attn_kv_shard_append(sh, one, vk, vv);
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, H, 1, 0, HD, HD);
    d.Hkv = HKV, d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    attn_view vq = {q, H * HD, HD, HD};
    if (!st) st = attn_kv_cache_attend(whole, &d, vq, (attn_view){a1, H * HD, HD, HD}, NULL);
    if (!st) st = attn_shard_decode(sh, &d, vq, (attn_view){a2, H * HD, HD, HD}, NULL, NULL);
    if (st) fail("decode step", st);
    *t1 = next_token(M, x, a1, l1), *t2 = next_token(M, x, a2, l2);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n, quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    int64_t S = quick ? 700 : 16384, N = quick ? 6 : 32;
    uint32_t seed = 36;
    model *M = malloc(sizeof *M);
    int *prompt = malloc((size_t)S * sizeof *prompt);
    if (!M || !prompt) return fail("model", ATTN_E_NOMEM);
    float *w = (float *)(void *)M;
    for (size_t i = 0; i < sizeof *M / sizeof(float); i++) w[i] = 0.25f * frand(&seed);
    for (int64_t i = 0; i < S; i++) prompt[i] = (int)((frand(&seed) + 1.0f) * 0.5f * (VOCAB - 1));
    attn_kv_cache_config cfg = {.batch = 1, .kv_heads = HKV, .capacity = S + N, .head_dim = HD, .page_size = PAGE};
    attn_kv_cache *whole = NULL;
    attn_kv_shard *sh = NULL;
    attn_status st = attn_kv_cache_create(&cfg, &whole);
    if (st) return fail("one-process cache", st);
    if ((st = attn_kv_shard_create(MPI_COMM_WORLD, &cfg, ATTN_SHARD_ROUND_ROBIN, PAGE, &sh))) return fail("shards", st);
    float l1[VOCAB], l2[VOCAB];
    int t1 = oracle_prefill(M, prompt, S, whole, l1), t2 = sharded_prefill(M, prompt, S, sh, rank, n, l2);
    double diff = 0.0;
    int64_t same = 0;
    for (int64_t s = 0; s < N; s++) {
        for (int t = 0; t < VOCAB; t++) diff = fmax(diff, fabs((double)l1[t] - l2[t]));
        if (t1 != t2) break;
        same++;
        step(M, t1, S + s, whole, sh, &t1, &t2, l1, l2);
    }
    const attn_kv_cache *loc = attn_kv_shard_local(sh);
    if (rank == 0)
        printf("prompt of %lld tokens over %d ranks (round-robin pages of %d; rank 0 keeps %lld), %lld generated\n",
               (long long)S, n, PAGE, (long long)attn_kv_cache_len(loc, 0), (long long)N);
    double all = 0.0;
    MPI_Allreduce(&diff, &all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    int ok = same == N && all < 1e-3;
    if (rank == 0)
        printf("sharded decode: %lld tokens %s one process, max |logit diff| %.3g\n", (long long)N,
               ok ? "equal to" : "differ from", all);
    attn_kv_shard_free(sh), attn_kv_cache_free(whole);
    free(M), free(prompt);
    MPI_Finalize();
    return ok ? 0 : 1;
}
