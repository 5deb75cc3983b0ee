/* Programmable attention in C: FlexAttention's patterns as tile callbacks.
 *
 * A mask_mod says which pairs take part, a score_mod rewrites the scores;
 * both are called on tiles (b, h, first row i0, first key j0, rows, cols),
 * so each is a plain loop. A block mask made from the mask_mod skips the
 * blocks no pair of which takes part and calls the mask_mod only on the
 * blocks that are partly visible.
 *
 * Patterns: a document mask over packed sequences, a causal sliding window,
 * prefix-LM, ALiBi and a softcap as score_mods, a relative-position bias
 * from a table (a captured tensor), trained: the forward and the backward
 * (dq, dk, dv) against a float64 oracle written here from the definitions.
 * Ends with a check line.
 *
 * Build and run: make examples (or: cc flex.c $(pkg-config --cflags --libs attn) -lm)
 * usage: flex [--quick] */
#include <attn.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { H = 4, D = 32 };

typedef struct pattern {
    const char *name;
    int64_t doc_len, window, prefix; /* mask_mods' parameters (0: unused) */
    int causal, alibi, softcap, table;
} pattern;

typedef struct ctx {
    const pattern *p;
    const float *slopes, *bias; /* ALiBi slopes (H), relative bias table (H, 2 S) */
    int64_t S;
} ctx;

/* ---- the rules, once for the callbacks and the oracle ---- */
static int keep_pair(const ctx *c, int64_t i, int64_t j) {
    const pattern *p = c->p;
    int k = 1;
    if (p->doc_len) k &= i / p->doc_len == j / p->doc_len;
    if (p->causal) k &= j <= i || (p->prefix && j < p->prefix);
    if (p->window) k &= i - j < p->window;
    return k;
}

static double score_of(const ctx *c, int64_t h, int64_t i, int64_t j, double s, double *ds) {
    const pattern *p = c->p;
    *ds = 1.0;
    if (p->alibi) s -= c->slopes[h] * fabs((double)(i - j));
    if (p->table) s += c->bias[h * 2 * c->S + (i - j + c->S)];
    if (p->softcap) {
        double t = tanh(s / 20.0);
        *ds = 1.0 - t * t;
        s = 20.0 * t;
    }
    return s;
}

/* ---- the callbacks ---- */
static void mask_mod(void *p, const attn_tile *t, uint8_t *keep, int64_t ld) {
    for (int64_t r = 0; r < t->rows; r++)
        for (int64_t c = 0; c < t->cols; c++) keep[r * ld + c] = (uint8_t)keep_pair(p, t->i0 + r, t->j0 + c);
}

static void score_mod(void *p, const attn_tile *t, float *s, int64_t ld, float *ds) {
    for (int64_t r = 0; r < t->rows; r++)
        for (int64_t c = 0; c < t->cols; c++) {
            double g, x = score_of(p, t->h, t->i0 + r, t->j0 + c, s[r * ld + c], &g);
            s[r * ld + c] = (float)x;
            if (ds) ds[r * ld + c] = (float)g;
        }
}

/* ---- float64 oracle: out and the gradients of sum(out * go) ---- */
static void oracle(const ctx *c, const float *q, const float *k, const float *v, const float *go, double *out,
                   double *dq, double *dk, double *dv) {
    int64_t S = c->S;
    double scale = 1.0 / sqrt((double)D), *s = malloc((size_t)S * 8), *g = malloc((size_t)S * 8);
    double *dp = malloc((size_t)S * 8);
    memset(dq, 0, (size_t)(H * S * D) * 8), memset(dk, 0, (size_t)(H * S * D) * 8), memset(dv, 0, (size_t)(H * S * D) * 8);
    for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < S; i++) {
            const float *qi = q + (h * S + i) * D, *gi = go + (h * S + i) * D;
            double m = -INFINITY, l = 0.0, di = 0.0;
            for (int64_t j = 0; j < S; j++) {
                double dot = 0.0;
                for (int64_t e = 0; e < D; e++) dot += (double)qi[e] * k[(h * S + j) * D + e];
                s[j] = keep_pair(c, i, j) ? score_of(c, h, i, j, scale * dot, &g[j]) : -INFINITY;
                m = s[j] > m ? s[j] : m;
            }
            for (int64_t j = 0; j < S; j++) s[j] = m == -INFINITY ? 0.0 : exp(s[j] - m), l += s[j];
            double *o = out + (h * S + i) * D;
            for (int64_t e = 0; e < D; e++) o[e] = 0.0;
            for (int64_t j = 0; j < S; j++) {
                s[j] = l > 0 ? s[j] / l : 0.0, dp[j] = 0.0;
                for (int64_t e = 0; e < D; e++) {
                    o[e] += s[j] * v[(h * S + j) * D + e];
                    dp[j] += (double)gi[e] * v[(h * S + j) * D + e];
                    dv[(h * S + j) * D + e] += s[j] * gi[e];
                }
                di += s[j] * dp[j];
            }
            for (int64_t j = 0; j < S; j++) {
                double dsc = s[j] == 0.0 ? 0.0 : s[j] * (dp[j] - di) * g[j] * scale;
                for (int64_t e = 0; e < D; e++) {
                    dq[(h * S + i) * D + e] += dsc * k[(h * S + j) * D + e];
                    dk[(h * S + j) * D + e] += dsc * qi[e];
                }
            }
        }
    free(s), free(g), free(dp);
}

static double maxdiff(const float *a, const double *b, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(a[i] - b[i]));
    return m;
}

int main(int argc, char **argv) {
    int64_t S = argc > 1 && !strcmp(argv[1], "--quick") ? 192 : 512;
    const pattern pats[] = {
        {"causal", 0, 0, 0, 1, 0, 0, 0},
        {"document mask (4 packed sequences)", S / 4, 0, 0, 0, 0, 0, 0},
        {"causal sliding window 64", 0, 64, 0, 1, 0, 0, 0},
        {"prefix-LM (a prefix of 40)", 0, 0, 40, 1, 0, 0, 0},
        {"ALiBi score_mod", 0, 0, 0, 1, 1, 0, 0},
        {"softcap score_mod", 0, 0, 0, 0, 0, 1, 0},
        {"relative bias from a table", 0, 0, 0, 1, 0, 0, 1},
        {"document mask + ALiBi + softcap", S / 3, 0, 0, 1, 1, 1, 0},
    };
    size_t n = (size_t)(H * S * D);
    float *q = malloc(n * 4), *k = malloc(n * 4), *v = malloc(n * 4), *go = malloc(n * 4), *out = malloc(n * 4);
    float *g = malloc(3 * n * 4), *bias = malloc((size_t)(H * 2 * S) * 4), slopes[H];
    double *ro = malloc(n * 8), *rg = malloc(3 * n * 8), worst = 0.0;
    uint32_t st = 1u;
    for (size_t i = 0; i < n; i++) {
        st = st * 1664525u + 1013904223u, q[i] = (float)(st >> 8) / 8388608.0f - 1.0f;
        st = st * 1664525u + 1013904223u, k[i] = (float)(st >> 8) / 8388608.0f - 1.0f;
        st = st * 1664525u + 1013904223u, v[i] = (float)(st >> 8) / 8388608.0f - 1.0f;
        st = st * 1664525u + 1013904223u, go[i] = (float)(st >> 8) / 8388608.0f - 1.0f;
    }
    for (int64_t i = 0; i < H * 2 * S; i++) bias[i] = 0.5f * sinf((float)i * 0.37f);
    for (int h = 0; h < H; h++) slopes[h] = exp2f(-8.0f * (float)(h + 1) / H);
    attn_view vq = {q, H * S * D, S * D, D}, vk = {k, H * S * D, S * D, D}, vv = {v, H * S * D, S * D, D};
    attn_view vo = {out, H * S * D, S * D, D}, vg = {go, H * S * D, S * D, D};
    attn_view gq = {g, H * S * D, S * D, D}, gk = {g + n, H * S * D, S * D, D}, gv = {g + 2 * n, H * S * D, S * D, D};
    for (size_t t = 0; t < sizeof pats / sizeof pats[0]; t++) {
        ctx c = {&pats[t], slopes, bias, S};
        int masks = pats[t].doc_len || pats[t].causal || pats[t].window;
        int scores = pats[t].alibi || pats[t].softcap || pats[t].table;
        attn_block_mask *bm = NULL;
        if (masks && attn_block_mask_from_mod(mask_mod, &c, 1, 1, S, S, 64, 64, &bm) != ATTN_OK) {
            printf("%s: %s\n", pats[t].name, attn_last_error());
            return 1;
        }
        attn_sdpa_desc d;
        attn_sdpa_desc_init(&d, 1, H, S, S, D, D);
        if (masks) d.mask_mod = mask_mod, d.mask_mod_ctx = &c, d.block_mask = bm;
        if (scores) d.score_mod = score_mod, d.score_mod_ctx = &c, d.score_mod_grad = 1;
        if (attn_sdpa_forward(&d, vq, vk, vv, vo, NULL) != ATTN_OK ||
            attn_sdpa_backward(&d, vq, vk, vv, vo, vg, NULL, gq, gk, gv) != ATTN_OK) {
            printf("%s: %s\n", pats[t].name, attn_last_error());
            return 1;
        }
        oracle(&c, q, k, v, go, ro, rg, rg + n, rg + 2 * n);
        double eo = maxdiff(out, ro, n), eg = maxdiff(g, rg, 3 * n);
        int empty = 0, total = 0;
        for (int64_t qb = 0; bm && qb < (S + 63) / 64; qb++)
            for (int64_t kb = 0; kb < (S + 63) / 64; kb++) empty += attn_block_mask_block(bm, 0, 0, qb, kb) == 0, total++;
        printf("%-36s out %.2e  grads %.2e  blocks skipped %d of %d\n", pats[t].name, eo, eg, empty, total);
        worst = fmax(worst, fmax(eo, eg / 10.0));
        attn_block_mask_free(bm);
    }
    printf("check: every pattern equals the float64 oracle, forward and backward (worst %.2e): %s\n", worst,
           worst < 1e-4 ? "ok" : "FAILED");
    free(q), free(k), free(v), free(go), free(out), free(g), free(bias), free(ro), free(rg);
    return worst < 1e-4 ? 0 : 1;
}
