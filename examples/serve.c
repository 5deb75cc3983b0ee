/* Serving a toy decoder from a paged KV cache.
 *
 * A 2-layer decoder with grouped-query attention (4 query heads sharing 2
 * key/value heads), random weights, greedy decoding. A queue of prompts of
 * different lengths is served by SLOTS sequence slots: each prompt is
 * prefilled into its slot's pages (the fused kernel over the prompt, its
 * keys and values appended to the cache), then all busy slots advance one
 * token per batched decode step (flash-decoding straight from the pages).
 * A finished sequence's pages go back to the pool and the next prompt takes
 * the slot. At the end, prompt 0's tokens and logits are checked against the
 * same model run without a cache (every step recomputes the whole prefix).
 *
 * Build and run: make examples (or: cc serve.c $(pkg-config --cflags --libs attn) -lm)
 * usage: serve [--quick] */
#include <attn.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { VOCAB = 96, C = 64, HQ = 4, HKV = 2, D = 16, LAYERS = 2, CTX = 128, SLOTS = 4, PAGE = 16 };

typedef struct layer_w {
    float *wq, *wk, *wv, *wo, *w1, *w2; /* (C, HQ D), (C, HKV D) x 2, (HQ D, C), (C, 4C), (4C, C) */
} layer_w;

typedef struct model {
    float *emb, *pos; /* (VOCAB, C) token embeddings (also the output head), (CTX, C) positions */
    layer_w l[LAYERS];
} model;

static unsigned rng = 12345u;
static float frand(void) { /* uniform in [-0.5, 0.5) */
    rng = rng * 1664525u + 1013904223u;
    return (float)(rng >> 8) / 16777216.0f - 0.5f;
}

static float *weights(int rows, int cols) {
    float *w = malloc((size_t)rows * cols * sizeof *w), s = 2.0f / sqrtf((float)rows);
    for (int i = 0; w && i < rows * cols; i++) w[i] = s * frand();
    return w;
}

/* y (n, cols) = x (n, rows) W (rows, cols), or += with acc */
static void matmul(const float *x, const float *w, float *y, int n, int rows, int cols, int acc) {
    for (int i = 0; i < n; i++)
        for (int c = 0; c < cols; c++) {
            float s = acc ? y[i * cols + c] : 0.0f;
            for (int k = 0; k < rows; k++) s += x[i * rows + k] * w[k * cols + c];
            y[i * cols + c] = s;
        }
}

static void rmsnorm(const float *x, float *y, int n) { /* n rows of C */
    for (int i = 0; i < n; i++) {
        double ss = 0;
        for (int c = 0; c < C; c++) ss += (double)x[i * C + c] * x[i * C + c];
        float r = 1.0f / sqrtf((float)(ss / C) + 1e-5f);
        for (int c = 0; c < C; c++) y[i * C + c] = x[i * C + c] * r;
    }
}

/* x (n, C) += relu(rmsnorm(x) W1) W2 */
static void mlp(const layer_w *l, float *x, int n) {
    float *xn = malloc((size_t)n * C * sizeof *xn), *h = malloc((size_t)n * 4 * C * sizeof *h);
    rmsnorm(x, xn, n);
    matmul(xn, l->w1, h, n, C, 4 * C, 0);
    for (int i = 0; i < n * 4 * C; i++) h[i] = h[i] > 0 ? h[i] : 0;
    matmul(h, l->w2, x, n, 4 * C, C, 1);
    free(xn), free(h);
}

static int argmax_logits(const model *m, const float *x, float *logits) { /* logits = rmsnorm(x) emb^T */
    float xn[C];
    rmsnorm(x, xn, 1);
    int best = 0;
    for (int t = 0; t < VOCAB; t++) {
        float s = 0;
        for (int c = 0; c < C; c++) s += xn[c] * m->emb[t * C + c];
        logits[t] = s;
        if (s > logits[best]) best = t;
    }
    return best;
}

/* rows (n, HQ D) or (n, HKV D) as a (1, H, n, D) view */
static attn_view heads(float *p, int h, int n) { return (attn_view){p, (int64_t)n * h * D, D, (int64_t)h * D}; }

typedef struct slot {
    int prompt, len, generated; /* prompt -1: idle */
    int tokens[CTX];
} slot;

/* The n tokens of a prompt through the model, the fused kernel (causal) over
 * every position: the last position's logits, and its argmax returned. With
 * cache, a prefill: each layer's keys and values are also appended to slot
 * s of that layer's cache. Without, the cache-less reference run. */
static int forward_prompt(const model *m, const int *tokens, int n, attn_kv_cache **cache, int s, float *logits) {
    float *x = malloc((size_t)n * C * 4), *xn = malloc((size_t)n * C * 4), *q = malloc((size_t)n * HQ * D * 4);
    float *k = malloc((size_t)n * HKV * D * 4), *v = malloc((size_t)n * HKV * D * 4),
          *o = malloc((size_t)n * HQ * D * 4);
    for (int i = 0; i < n; i++)
        for (int c = 0; c < C; c++) x[i * C + c] = m->emb[tokens[i] * C + c] + m->pos[i * C + c];
    int64_t cnt[SLOTS] = {0};
    cnt[s] = n;
    for (int L = 0; L < LAYERS; L++) {
        const layer_w *l = &m->l[L];
        rmsnorm(x, xn, n);
        matmul(xn, l->wq, q, n, C, HQ * D, 0), matmul(xn, l->wk, k, n, C, HKV * D, 0);
        matmul(xn, l->wv, v, n, C, HKV * D, 0);
        attn_view kv = heads(k, HKV, n), vv = heads(v, HKV, n);
        attn_sdpa_desc d;
        attn_sdpa_desc_init(&d, 1, HQ, n, n, D, D);
        d.Hkv = HKV, d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        if (attn_sdpa_forward(&d, heads(q, HQ, n), kv, vv, heads(o, HQ, n), NULL)) return -1;
        kv.stride_b = vv.stride_b = 0; /* every slot's rows point here; only slot s takes any (cnt) */
        if (cache && attn_kv_cache_append(cache[L], cnt, kv, vv)) return -1;
        matmul(o, l->wo, x, n, HQ * D, C, 1);
        mlp(l, x, n);
    }
    int t = argmax_logits(m, x + (size_t)(n - 1) * C, logits);
    free(x), free(xn), free(q), free(k), free(v), free(o);
    return t;
}

/* One decode step for every busy slot: the new token's keys and values
 * appended (n[b] = 1), Sq = 1 attention over each slot's pages */
static int decode_step(const model *m, attn_kv_cache **cache, slot *sl, float logits[SLOTS][VOCAB], int *next) {
    float x[SLOTS * C], xn[SLOTS * C], q[SLOTS * HQ * D], k[SLOTS * HKV * D], v[SLOTS * HKV * D], o[SLOTS * HQ * D];
    int64_t cnt[SLOTS];
    for (int b = 0; b < SLOTS; b++) {
        cnt[b] = sl[b].prompt >= 0;
        int t = sl[b].prompt >= 0 ? sl[b].tokens[sl[b].len - 1] : 0, p = sl[b].prompt >= 0 ? sl[b].len - 1 : 0;
        for (int c = 0; c < C; c++) x[b * C + c] = m->emb[t * C + c] + m->pos[p * C + c];
    }
    attn_view qv = {q, HQ * D, D, HQ * D}, ov = {o, HQ * D, D, HQ * D}; /* (SLOTS, H, 1, D) */
    attn_view kv = {k, HKV * D, D, HKV * D}, vv = {v, HKV * D, D, HKV * D};
    for (int L = 0; L < LAYERS; L++) {
        const layer_w *l = &m->l[L];
        rmsnorm(x, xn, SLOTS);
        matmul(xn, l->wq, q, SLOTS, C, HQ * D, 0), matmul(xn, l->wk, k, SLOTS, C, HKV * D, 0);
        matmul(xn, l->wv, v, SLOTS, C, HKV * D, 0);
        attn_sdpa_desc d;
        attn_sdpa_desc_init(&d, SLOTS, HQ, 1, 0, D, D);
        d.causal = ATTN_CAUSAL_BOTTOM_RIGHT; /* an idle slot holds no token: its row sees none (zeros) */
        if (attn_kv_cache_append(cache[L], cnt, kv, vv) || attn_kv_cache_attend(cache[L], &d, qv, ov, NULL)) return 1;
        matmul(o, l->wo, x, SLOTS, HQ * D, C, 1);
        mlp(l, x, SLOTS);
    }
    for (int b = 0; b < SLOTS; b++) next[b] = argmax_logits(m, x + b * C, logits[b]);
    return 0;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    int quick = argc > 1 && !strcmp(argv[1], "--quick");
    int nprompts = quick ? 6 : 16, ngen = quick ? 8 : 48;
    model m;
    m.emb = weights(VOCAB, C), m.pos = weights(CTX, C);
    for (int L = 0; L < LAYERS; L++) {
        layer_w *l = &m.l[L];
        l->wq = weights(C, HQ * D), l->wk = weights(C, HKV * D), l->wv = weights(C, HKV * D);
        l->wo = weights(HQ * D, C), l->w1 = weights(C, 4 * C), l->w2 = weights(4 * C, C);
    }
    /* one paged cache per layer, a pool of pages that holds the slots' work at once */
    attn_kv_cache *cache[LAYERS];
    int64_t pool = SLOTS * (CTX / PAGE);
    for (int L = 0; L < LAYERS; L++) {
        attn_kv_cache_config cfg = {.batch = SLOTS,
                                    .kv_heads = HKV,
                                    .capacity = CTX,
                                    .head_dim = D,
                                    .v_head_dim = D,
                                    .dtype = ATTN_DTYPE_F32,
                                    .page_size = PAGE,
                                    .num_pages = pool};
        if (attn_kv_cache_create(&cfg, &cache[L]) != ATTN_OK) return 1;
    }
    int prompts[16][40], plen[16];
    for (int p = 0; p < nprompts; p++) {
        plen[p] = 5 + ((p + 2) * 7) % 31; /* 5 .. 35 tokens (prompt 0: 19, past decode's Sq <= 16) */
        for (int i = 0; i < plen[p]; i++) prompts[p][i] = (int)((frand() + 0.5f) * VOCAB) % VOCAB;
    }
    slot sl[SLOTS];
    static float logits[SLOTS][VOCAB], first_logits[VOCAB], seq0_logits[64][VOCAB];
    int next[SLOTS], queue = 0, done = 0, generated = 0, steps = 0, seq0[64 + 40], seq0_len = 0;
    for (int b = 0; b < SLOTS; b++) sl[b].prompt = -1;
    double t0 = now();
    while (done < nprompts) {
        for (int b = 0; b < SLOTS; b++) /* idle slots take the next prompts */
            if (sl[b].prompt < 0 && queue < nprompts) {
                int p = queue++;
                sl[b].prompt = p, sl[b].len = plen[p], sl[b].generated = 1;
                memcpy(sl[b].tokens, prompts[p], (size_t)plen[p] * sizeof(int));
                int t = forward_prompt(&m, prompts[p], plen[p], cache, b, first_logits);
                if (t < 0) return 1;
                sl[b].tokens[sl[b].len++] = t;
                if (p == 0) memcpy(seq0_logits[0], first_logits, sizeof first_logits);
            }
        if (decode_step(&m, cache, sl, logits, next)) return 1;
        steps++;
        for (int b = 0; b < SLOTS; b++) {
            if (sl[b].prompt < 0) continue;
            if (sl[b].prompt == 0) memcpy(seq0_logits[sl[b].generated], logits[b], sizeof logits[b]);
            sl[b].tokens[sl[b].len++] = next[b], sl[b].generated++, generated++;
            if (sl[b].generated == ngen) { /* finished: its pages go back to the pool */
                if (sl[b].prompt == 0)
                    memcpy(seq0, sl[b].tokens, (size_t)sl[b].len * sizeof(int)), seq0_len = sl[b].len;
                for (int L = 0; L < LAYERS; L++) attn_kv_cache_reset(cache[L], b);
                sl[b].prompt = -1, done++;
            }
        }
    }
    double dt = now() - t0;
    printf(
        "served %d prompts (5-35 tokens) in %d slots, %d tokens generated in %d batched decode steps: %.0f tokens/s\n",
        nprompts, SLOTS, generated + nprompts, steps, (generated + nprompts) / dt);
    printf("pages free after serving: %lld of %lld per layer\n", (long long)attn_kv_cache_free_pages(cache[0]),
           (long long)pool);
    /* prompt 0 again, without a cache: the same tokens, the same logits */
    int ok = attn_kv_cache_free_pages(cache[0]) == pool, same = 1;
    double worst = 0;
    for (int g = 0; g < ngen; g++) {
        float ref[VOCAB];
        int n = plen[0] + g, t = forward_prompt(&m, seq0, n, NULL, 0, ref);
        same &= t == seq0[n];
        for (int i = 0; i < VOCAB; i++) worst = fmax(worst, fabs(ref[i] - seq0_logits[g][i]));
    }
    ok &= same && worst < 1e-3 && seq0_len == plen[0] + ngen;
    printf("check: prompt 0 without the cache: %d tokens %s, max |logit difference| %.2e (tolerance 1e-03): %s\n", ngen,
           same ? "equal" : "DIFFER", worst, ok ? "ok" : "FAILED");
    for (int L = 0; L < LAYERS; L++) {
        attn_kv_cache_free(cache[L]);
        layer_w *l = &m.l[L];
        free(l->wq), free(l->wk), free(l->wv), free(l->wo), free(l->w1), free(l->w2);
    }
    free(m.emb), free(m.pos);
    return !ok;
}
