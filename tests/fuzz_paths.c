/* fuzz_paths: a differential fuzzer over every SDPA path (docs/TESTING.md).
 *
 * Each case draws a random problem from (seed, case number) alone: batch,
 * GQA/MQA heads, lengths at and around the tile edges (0, 1, 47..49, 63..65,
 * 127..129), odd head sizes up to 256, the causal modes, windows, softcap,
 * ALiBi, seqlens_k, key masks, dropout, f32/f16/bf16 inputs; then injects
 * special values (NaN, +-inf, +-1e30, subnormals, all-equal logits, logits
 * near 1e3 that peak the softmax) at random places, runs every path that
 * accepts the problem, and checks:
 *   - NaN/inf positions against a float64 oracle of PyTorch 2.5's math
 *     (softmax with _safe_softmax: a row whose visible scores are all -inf
 *     gives 0; a NaN or +inf among them makes the row NaN). The oracle runs
 *     twice: "full" (dense, as PyTorch: hidden keys as -inf entries, zero
 *     weights multiplied through) and "lean" (only visible keys and nonzero
 *     weights). A path must be non-finite where lean is, and may be only
 *     where full is (docs/SEMANTICS.md: hidden entries and exact zero
 *     weights may or may not carry NaN).
 *   - values against the reference path (ATTN_IMPL_REF) within the
 *     precision rule (scaled by the problem's magnitudes);
 *   - bitwise equality of the fused forward, decode and backward on 1 and 2
 *     threads;
 *   - on a third of the cases, a math mode (DATA on 16-bit inputs, BF16 on
 *     float32 ones): the fused forward and decode against the reference in
 *     the same mode (mode_paths); on a third of each storage type's cases,
 *     the KV cache in DATA mode (cache_mode: the int8 Q K^T of the integer
 *     formats, their P V in 16-bit integers, the
 *     fp8 and 16-bit rounded products).
 * Paths: the reference, the fused forward (flash) and backward, decode
 * (Sq <= 16 through the default entry), the KV cache's attend for every
 * storage type, contiguous and paged, and attention over caller-owned pages
 * (every storage type, NHD and HND, page sizes 1 .. 70, any query count),
 * against the reference on the values stored.
 *
 * usage: fuzz_paths [--seconds N] [--seed S|random] [--cases N] [--case C] [-v]
 * --seed random draws a fresh seed (the clock and the process id) and prints
 * it first; a failing case prints the command that runs it alone. */
#include "base/half.h"
#include "base/sem.h"
#include "base/storage.h"
#include "kernels/kernels.h"
#include "testutil.h"

#include <math.h>
#include <unistd.h>
#include <omp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- random numbers: splitmix64 seeded by (seed, case) ------------------ */
static uint64_t rs;
static uint64_t rnext(void) {
    uint64_t z = (rs += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static int64_t rint_(int64_t lo, int64_t hi) { return lo + (int64_t)(rnext() % (uint64_t)(hi - lo + 1)); }
static double runi(void) { return (double)(rnext() >> 11) * 0x1p-53; }
static int rchance(double p) { return runi() < p; }
static int64_t rpick(const int64_t *v, int n) { return v[rint_(0, n - 1)]; }

/* ---- a problem ------------------------------------------------------------ */
typedef struct prob {
    int64_t B, H, Hkv, Sq, Sk, D, Dv;
    attn_sdpa_desc d;
    attn_dtype dt;
    float *q, *k, *v, *dout; /* float32 values as the library reads them (16-bit: rounded) */
    uint16_t *q16, *k16, *v16;
    float *go, *gd[3]; /* the paths' outputs (out; dq, dk, dv) before they are copied to the caller's buffers */
    uint8_t *mask;
    int64_t *seqlens;
    float *slopes, *sinks, *dsinks, *dbias;
    int32_t cuq[8], cuk[8]; /* packed sequences (varlen) */
    int64_t nseq, nbias;    /* nbias: elements of the dense bias (and of dbias) */
    uint8_t *dmask;
    attn_dropout drop;
    int has_drop, nonfinite; /* nonfinite: a NaN or inf was injected */
    struct fz_flex {         /* programmable rules (score_mod, mask_mod, block mask), drawn */
        int score,
            mask; /* score: 1 x + a (i - j), 2 c tanh(x / c), 3 a x; mask: 1 documents, 2 j <= i + m, 3 j % m != r */
        double a;
        int64_t m, r, Sq, Sk;
    } fx;
    attn_block_mask *bm;
    char what[256]; /* the specials injected, for the report */
} prob;

static size_t nq(const prob *p) { return (size_t)(p->B * p->H * p->Sq * p->D); }
static size_t nk(const prob *p) { return (size_t)(p->B * p->Hkv * p->Sk * p->D); }
static size_t nv(const prob *p) { return (size_t)(p->B * p->Hkv * p->Sk * p->Dv); }
static size_t no(const prob *p) { return (size_t)(p->B * p->H * p->Sq * p->Dv); }

static float round_dt(attn_dtype dt, float x, uint16_t *bits) {
    if (dt == ATTN_DTYPE_F16) return attn_f16_to_f32(*bits = attn_f32_to_f16(x));
    if (dt == ATTN_DTYPE_BF16) return attn_bf16_to_f32(*bits = attn_f32_to_bf16(x));
    return x;
}

static const float specials[] = {NAN, INFINITY, -INFINITY, 1e30f, -1e30f, 1e-40f, -3e-39f};
static const char *special_name[] = {"nan", "+inf", "-inf", "1e30", "-1e30", "subnormal", "-subnormal"};

static void inject(prob *p) {
    int n = (int)rint_(1, 3);
    for (int t = 0; t < n; t++) {
        int which = (int)rint_(0, 2), s = (int)rint_(0, 6);
        float *a = which == 0 ? p->q : which == 1 ? p->k : p->v;
        size_t len = which == 0 ? nq(p) : which == 1 ? nk(p) : nv(p);
        if (!len) continue;
        size_t at = (size_t)rint_(0, (int64_t)len - 1);
        a[at] = specials[s];
        p->nonfinite |= s < 3;
        size_t w = strlen(p->what);
        snprintf(p->what + w, sizeof p->what - w, " %s[%zu]=%s",
                 which == 0   ? "q"
                 : which == 1 ? "k"
                              : "v",
                 at, special_name[s]);
    }
}

/* the drawn mods in double (the oracle) and as tile callbacks (float32) */
static double fz_score_d(const struct fz_flex *f, double x, int64_t i, int64_t j, double *g) {
    *g = 1.0;
    if (f->score == 1) return x + f->a * (double)(i - j);
    if (f->score == 3) return *g = f->a, f->a * x;
    double c = 3.0 + 10.0 * f->a, t = tanh(x / c);
    *g = 1.0 - t * t;
    return c * t;
}

static int fz_keep(const struct fz_flex *f, int64_t i, int64_t j) {
    if (f->mask == 1) return i * f->m / (f->Sq ? f->Sq : 1) == j * f->m / (f->Sk ? f->Sk : 1);
    if (f->mask == 2) return j <= i + f->m;
    return j % f->m != f->r;
}

static void fz_score_fn(void *ctx, const attn_tile *t, float *s, int64_t ld, float *ds) {
    const struct fz_flex *f = ctx;
    for (int64_t r = 0; r < t->rows; r++)
        for (int64_t c = 0; c < t->cols; c++) {
            int64_t i = t->i0 + r, j = t->j0 + c;
            float x = s[r * ld + c], y, g = 1.0f;
            if (f->score == 1) {
                y = x + (float)f->a * (float)(i - j);
            } else if (f->score == 3) {
                y = (float)f->a * x, g = (float)f->a;
            } else {
                float cc = (float)(3.0 + 10.0 * f->a), th = tanhf(x / cc);
                y = cc * th, g = 1.0f - th * th;
            }
            s[r * ld + c] = y;
            if (ds) ds[r * ld + c] = g;
        }
}

static void fz_mask_fn(void *ctx, const attn_tile *t, uint8_t *keep, int64_t ld) {
    for (int64_t r = 0; r < t->rows; r++)
        for (int64_t c = 0; c < t->cols; c++) keep[r * ld + c] = (uint8_t)fz_keep(ctx, t->i0 + r, t->j0 + c);
}

/* does the drawn block mask and mask_mod let (b, h, i, j) take part? */
static int fz_flex_keep(const prob *p, int64_t b, int64_t h, int64_t i, int64_t j) {
    int st = 1;
    if (p->bm) {
        attn_block_mask_arrays a;
        attn_block_mask_arrays_get(p->bm, &a);
        st = attn_block_mask_block(p->bm, a.B == 1 ? 0 : b, a.H == 1 ? 0 : h, i / a.q_block, j / a.kv_block);
    }
    return st == 2 || (st == 1 && (!p->fx.mask || fz_keep(&p->fx, i, j)));
}

/* programmable rules on a sixth of the cases: a score_mod and / or a mask_mod, a block mask from the
 * mod or random arrays */
static void draw_flex(prob *p) {
    attn_sdpa_desc *d = &p->d;
    struct fz_flex *f = &p->fx;
    f->Sq = p->Sq, f->Sk = p->Sk, f->a = runi();
    f->score = rchance(0.6) ? (int)rint_(1, 3) : 0;
    f->mask = rchance(0.7) ? (int)rint_(1, 3) : 0;
    f->m = f->mask == 1 ? rint_(1, 4) : f->mask == 2 ? rint_(-5, 20) : rint_(2, 7);
    f->r = rint_(0, f->m > 0 ? f->m - 1 : 0);
    if (f->score == 3) f->a = 0.5 + 1.5 * f->a;
    if (f->score) d->score_mod = fz_score_fn, d->score_mod_ctx = f, d->score_mod_grad = 1;
    if (f->mask) d->mask_mod = fz_mask_fn, d->mask_mod_ctx = f;
    int kind = rint_(0, 2);
    int64_t qb = rchance(0.5) ? rint_(1, 40) : rpick((const int64_t[]){16, 64, 128}, 3);
    int64_t kb = rchance(0.5) ? rint_(1, 40) : rpick((const int64_t[]){16, 64, 128}, 3);
    int64_t mB = rchance(0.5) ? 1 : p->B, mH = rchance(0.5) ? 1 : p->H;
    if (kind == 1 && f->mask && rchance(0.5)) {
        attn_block_mask_from_mod(fz_mask_fn, f, mB, mH, p->Sq, p->Sk, qb, kb, &p->bm);
    } else if (kind == 1 && f->mask) { /* the partial blocks' bytes stored: the call gives no mask_mod */
        attn_block_mask_from_mod_stored(fz_mask_fn, f, mB, mH, p->Sq, p->Sk, qb, kb, 1 << 24, &p->bm);
        if (attn_block_mask_stored(p->bm)) d->mask_mod = NULL;
    }
    if (kind == 2) { /* random states: empty, partial, full */
        int64_t nq = (p->Sq + qb - 1) / qb, nk = (p->Sk + kb - 1) / kb, rows = mB * mH * nq;
        int32_t *num = calloc((size_t)rows + 1, 4), *idx = calloc((size_t)(rows * nk) + 1, 4);
        int32_t *fnum = calloc((size_t)rows + 1, 4), *fidx = calloc((size_t)(rows * nk) + 1, 4);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t k = 0; k < nk; k++) {
                int64_t st = rint_(0, 3);
                if (st == 1) idx[r * nk + num[r]++] = (int32_t)k;
                if (st >= 2) fidx[r * nk + fnum[r]++] = (int32_t)k;
            }
        attn_block_mask_arrays a = {mB, mH, p->Sq, p->Sk, qb, kb, num, idx, fnum, fidx};
        attn_block_mask_create(&a, &p->bm);
        free(num), free(idx), free(fnum), free(fidx);
    }
    d->block_mask = p->bm;
    char w[96];
    snprintf(w, sizeof w, " flex(score %d, mask %d m %lld, blocks %d %lldx%lld of %lldx%lld)", f->score, f->mask,
             (long long)f->m, p->bm ? kind : 0, (long long)mB, (long long)mH, (long long)qb, (long long)kb);
    strcat(p->what, w);
}

/* n zeroed bytes that end where a page the process may not read begins, from mapping i of the process's
 * (grown when n exceeds it; reused by the next case: one case is drawn at a time, and a mapping a call cost the
 * fuzzer a fifth of its cases a second here) */
enum { GSLOTS = 11 }; /* q, k, v, dO, their 16-bit copies, out, dq, dk, dv */
static void *gplace(int i, size_t n) {
    static unsigned char *m[GSLOTS];
    static size_t cap[GSLOTS];
    if (!m[i] || n > cap[i]) {
        tu_guard_free(m[i]);
        cap[i] = n > 2 * cap[i] ? n : 2 * cap[i];
        cap[i] = cap[i] < 4096 ? 4096 : cap[i];
        m[i] = tu_guard_alloc(cap[i]);
        if (!m[i]) return cap[i] = 0, NULL;
    }
    return memset(m[i] + cap[i] - n, 0, n);
}

static void draw(prob *p, uint64_t seed, uint64_t cas) {
    static const int64_t lens[] = {0, 1, 2, 5, 16, 17, 47, 48, 49, 63, 64, 65, 127, 128, 129, 200};
    static const int64_t dims[] = {1, 3, 8, 16, 17, 32, 40, 64, 80, 96, 128, 160, 256};
    memset(p, 0, sizeof *p);
    rs = seed * 0x100000001b3ull ^ (cas + 1) * 0x9e3779b97f4a7c15ull;
    int varlen = rchance(0.1); /* packed sequences: B = 1, no key lengths, padding mask or ALiBi */
    p->B = varlen ? 1 : rint_(1, 3);
    p->Hkv = rint_(1, 3);
    p->H = p->Hkv * rpick((const int64_t[]){1, 1, 2, 4, 8, 32}, 6); /* 32: MLA-like groups (decode's block products) */
    p->Sq = rchance(0.3) ? rint_(1, 16) : rpick(lens, 16);
    p->Sk = rchance(0.2) ? rint_(1, 90) : rpick(lens, 16);
    p->D = rchance(0.3) ? rint_(1, 24) : rpick(dims, 13);
    p->Dv = rchance(0.7) ? p->D : rpick(dims, 13);
    /* keep a case small: the oracle is O(B H Sq Sk D) in double */
    while (p->B * p->H * p->Sq * p->Sk * (p->D + p->Dv) > 3000000) p->Sq = p->Sq / 2, p->Sk = p->Sk * 3 / 4;
    attn_sdpa_desc *d = &p->d;
    attn_sdpa_desc_init(d, p->B, p->H, p->Sq, p->Sk, p->D, p->Dv);
    d->Hkv = p->Hkv == p->H && rchance(0.5) ? 0 : p->Hkv;
    d->causal = (attn_causal)rint_(0, 2);
    if (rchance(0.2)) d->scale = (float)(rchance(0.5) ? -1.0 : 1.0) * (float)(0.05 + runi());
    if (rchance(0.2)) {
        d->window = 1;
        d->window_left = rchance(0.8) ? rint_(0, 40) : -1;
        d->window_right = rchance(0.6) ? rint_(0, 40) : -1;
    }
    if (rchance(0.15)) d->softcap = (float)(2.0 + 40.0 * runi());
    if (rchance(0.12)) d->attention_chunk = rint_(1, 70);
    for (int which = 0; which < 2; which++) /* dense mask, dense bias, each broadcast over random dims */
        if (rchance(0.12)) {
            int64_t shp[4] = {p->B, p->H, p->Sq, p->Sk}, n = 1,
                    *st = which ? d->attn_bias_strides : d->attn_mask_strides;
            for (int t = 3; t >= 0; t--) {
                int bc = rchance(0.4);
                st[t] = bc ? 0 : n, n *= bc ? 1 : shp[t];
            }
            if (which) {
                p->dbias = malloc((size_t)(n + 1) * sizeof(float));
                for (int64_t i = 0; i < n; i++) p->dbias[i] = rchance(0.05) ? -INFINITY : (float)(4 * runi() - 2);
                d->attn_bias = p->dbias, p->nbias = n;
            } else {
                p->dmask = malloc((size_t)(n + 1));
                for (int64_t i = 0; i < n; i++) p->dmask[i] = (uint8_t)(rchance(0.8) ? 1 + rint_(0, 3) : 0);
                d->attn_mask = p->dmask;
            }
        }
    if (rchance(0.12)) { /* sinks from negligible to dominant */
        p->sinks = malloc((size_t)p->H * sizeof(float)), p->dsinks = malloc((size_t)p->H * sizeof(float));
        for (int64_t h = 0; h < p->H; h++)
            p->sinks[h] = (float)(rchance(0.2) ? 60.0 * runi() - 30.0 : 6.0 * runi() - 3.0);
        d->sinks = p->sinks;
    }
    if (!varlen && rchance(0.15)) {
        p->slopes = malloc((size_t)p->H * sizeof(float));
        for (int64_t h = 0; h < p->H; h++) p->slopes[h] = (float)(0.5 * runi());
        d->alibi_slopes = p->slopes;
    }
    if (!varlen && rchance(0.2)) {
        p->seqlens = malloc((size_t)p->B * sizeof(int64_t));
        for (int64_t b = 0; b < p->B; b++) p->seqlens[b] = rint_(0, p->Sk);
        d->seqlens_k = p->seqlens, d->seqlens_k_dtype = ATTN_DTYPE_I64;
    }
    if (varlen) { /* random offsets: sequences of any length, empty ones too */
        p->nseq = rint_(1, 5);
        for (int t = 0; t < 2; t++) {
            int32_t *cu = t ? p->cuk : p->cuq;
            int64_t total = t ? p->Sk : p->Sq;
            cu[0] = 0, cu[p->nseq] = (int32_t)total;
            for (int64_t s = 1; s < p->nseq; s++) cu[s] = (int32_t)rint_(0, total);
            for (int64_t a = 1; a < p->nseq; a++) /* sort */
                for (int64_t b2 = a; b2 > 0 && cu[b2 - 1] > cu[b2]; b2--) {
                    int32_t x = cu[b2];
                    cu[b2] = cu[b2 - 1], cu[b2 - 1] = x;
                }
        }
        d->cu_seqlens_q = p->cuq, d->cu_seqlens_k = p->cuk, d->nseq = p->nseq;
        strcat(p->what, " varlen");
    }
    if (!varlen && rchance(0.2) && p->Sk) {
        p->mask = malloc((size_t)(p->B * p->Sk));
        for (int64_t i = 0; i < p->B * p->Sk; i++) p->mask[i] = (uint8_t)rchance(0.3);
        d->key_mask = p->mask, d->key_mask_stride_b = p->Sk;
        d->key_mask_polarity = (attn_mask_polarity)rint_(1, 2);
    }
    p->dt = rchance(0.6) ? ATTN_DTYPE_F32 : rchance(0.5) ? ATTN_DTYPE_F16 : ATTN_DTYPE_BF16;
    d->qkv_dtype = p->dt;
    /* each ends where a page the process may not read begins: a read past the caller's tensors faults */
    size_t a = nq(p), b = nk(p), c = nv(p);
    p->q = gplace(0, a * 4), p->k = gplace(1, b * 4), p->v = gplace(2, c * 4), p->dout = gplace(3, no(p) * 4);
    p->q16 = gplace(4, a * 2), p->k16 = gplace(5, b * 2), p->v16 = gplace(6, c * 2);
    p->go = gplace(7, no(p) * 4); /* and the outputs (forward, backward): a write past them faults */
    p->gd[0] = gplace(8, a * 4), p->gd[1] = gplace(9, b * 4), p->gd[2] = gplace(10, c * 4);
    double qa = rchance(0.1) ? 0.0 : 1.0; /* 0: all-equal logits */
    for (size_t i = 0; i < nq(p); i++) p->q[i] = (float)(qa * (2 * runi() - 1));
    for (size_t i = 0; i < nk(p); i++) p->k[i] = (float)(2 * runi() - 1);
    for (size_t i = 0; i < nv(p); i++) p->v[i] = (float)(2 * runi() - 1);
    for (size_t i = 0; i < no(p); i++) p->dout[i] = (float)(2 * runi() - 1);
    if (rchance(0.1)) { /* logits near 1e3: a peaked softmax */
        double f = 3e3 / (fabs(d->scale) * sqrt((double)p->D));
        for (size_t i = 0; i < nq(p); i++) p->q[i] = (float)(p->q[i] * f);
        strcat(p->what, " peaked");
    }
    int injected = rchance(0.5);
    if (injected) inject(p);
    for (size_t i = 0; i < nq(p); i++) p->q[i] = round_dt(p->dt, p->q[i], &p->q16[i]);
    for (size_t i = 0; i < nk(p); i++) p->k[i] = round_dt(p->dt, p->k[i], &p->k16[i]);
    for (size_t i = 0; i < nv(p); i++) p->v[i] = round_dt(p->dt, p->v[i], &p->v16[i]);
    for (size_t i = 0; i < nq(p); i++) p->nonfinite |= !isfinite(p->q[i]); /* 1e30 is inf in f16 */
    for (size_t i = 0; i < nk(p); i++) p->nonfinite |= !isfinite(p->k[i]);
    for (size_t i = 0; i < nv(p); i++) p->nonfinite |= !isfinite(p->v[i]);
    if (rchance(1.0 / 6)) draw_flex(p);
    /* dropout cases have no float64 oracle (the keep mask is the library's): no
     * special values there, whose NaN may come or not through hidden entries */
    if (rchance(0.1) && !injected) {
        attn_generator g;
        attn_generator_seed(&g, rnext());
        attn_generator_set_flavor(&g, rchance(0.5) ? ATTN_TORCH_MKL : ATTN_TORCH_NOMKL);
        if (attn_dropout_begin(&g, 0.1 + 0.5 * runi(), (uint64_t)(p->B * p->H * p->Sq * p->Sk), &p->drop) == ATTN_OK)
            d->dropout = &p->drop, p->has_drop = 1;
    }
}

static void prob_free(prob *p) {
    free(p->mask), free(p->seqlens), free(p->slopes), free(p->sinks), free(p->dsinks), free(p->dmask), free(p->dbias);
    if (p->has_drop) attn_dropout_end(&p->drop);
    attn_block_mask_free(p->bm);
}

/* views of the problem's tensors (16-bit ones point at the bits) */
static attn_view view(const prob *p, float *f, uint16_t *h, int64_t heads, int64_t S, int64_t n) {
    attn_view w = {p->dt == ATTN_DTYPE_F32 ? f : (float *)(void *)h, heads * S * n, S * n, n};
    return w;
}
static attn_view fview(float *f, int64_t heads, int64_t S, int64_t n) {
    attn_view w = {f, heads * S * n, S * n, n};
    return w;
}

/* ---- the float64 oracle: PyTorch 2.5's math ------------------------------- */
typedef struct oracle {
    double *out, *dq, *dk, *dv; /* lean values */
    uint8_t *nf_lean_o, *nf_full_o, *nf_lean_q, *nf_full_q, *nf_lean_k, *nf_full_k, *nf_lean_v, *nf_full_v;
    double smax; /* the largest finite |score| seen, before a softcap too (its rounding error is the raw score's) */
} oracle;

static int nonfin(double x) { return !isfinite(x); }
static int any_set(const uint8_t *f, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (f[i]) return 1;
    return 0;
}
/* a gradient element with the sum of its terms' magnitudes m: beyond float32's
 * range the lean pass claims nothing and the full pass allows anything */
static int gnonfin(double x, double m, int full) {
    if (isfinite(m) && m < 1e37) return nonfin(x);
    return full ? 1 : nonfin(x) && !isfinite(m) ? 1 : 0;
}

/* one pass: full = 1 is PyTorch's dense computation, 0 the lean one */
/* The oracle's score of query i and key j (batch b, head h) as the softmax
 * sees it, float32's rounding of the dot and the scale included; *vis: the
 * pair takes part (lean: not where float32's sum order decides); *g: d
 * score / d raw score (the softcap's); *smax grows to the largest finite
 * |score| seen, before a softcap too (its rounding error is the raw
 * score's) and after bias/ALiBi. */
static double oracle_score(const prob *p, int full, int64_t b, int64_t h, int64_t i, int64_t j, int *vis, double *g,
                           double *smax) {
    const attn_sdpa_desc *d = &p->d;
    int64_t D = p->D, hk = h / (p->H / p->Hkv), off = attn_sem_off(d, b);
    const float *qi = p->q + ((b * p->H + h) * p->Sq + i) * D, *kj = p->k + ((b * p->Hkv + hk) * p->Sk + j) * D;
    int unsure = 0;
    *vis = attn_sem_visible(d, b, h, i, j);
    double acc = 0;
    for (int64_t c = 0; c < D; c++) {
        double t = (double)qi[c] * kj[c];
        acc += t;
        /* a term near float32's range: whether a float32 sum overflows (or
         * gives inf - inf) depends on its order: any answer is PyTorch's */
        unsure |= fabs(t) * (double)(D + 1) * 2.0 > 3.4e38;
    }
    /* float32's score: the dot rounded (overflow to inf), then scaled */
    float sf = (float)acc;
    double x = (double)(float)(sf * d->scale);
    if (unsure) {
        if (!full)
            *vis = 0; /* lean: no claim; full: may be NaN */
        else
            x = NAN;
    }
    if (*vis && isfinite(x) && fabs(x) > *smax) *smax = fabs(x);
    *g = 1.0;
    if (d->softcap > 0) {
        double t = tanh(x / d->softcap);
        x = d->softcap * t;
        *g = 1.0 - t * t;
    }
    if (d->alibi_slopes) x += attn_sem_alibi(d->alibi_slopes[h], i, off, j);
    if (d->attn_bias) x += (double)attn_sem_bias(d, b, h, i, j);
    if (p->fx.score) { /* score_mod after the built-ins */
        double gm;
        x = fz_score_d(&p->fx, x, i, j, &gm);
        *g *= gm;
    }
    if (*vis && (p->fx.mask || p->bm) && !fz_flex_keep(p, b, h, i, j)) *vis = 0, x = -INFINITY; /* hidden after it */
    if (!*vis) x = full && isnan(x) ? NAN : -INFINITY; /* full: an additive mask keeps NaN */
    if (*vis && isfinite(x) && fabs(x) > *smax) *smax = fabs(x);
    return x;
}

/* the oracle's visibility: the built-in rule and the drawn block mask / mask_mod */
static int oracle_visible(const prob *p, int64_t b, int64_t h, int64_t i, int64_t j) {
    return attn_sem_visible(&p->d, b, h, i, j) && (!(p->fx.mask || p->bm) || fz_flex_keep(p, b, h, i, j));
}

static void oracle_pass(const prob *p, int full, oracle *o, uint8_t *nfo, uint8_t *nfq, uint8_t *nfk, uint8_t *nfv,
                        int values) {
    const attn_sdpa_desc *d = &p->d;
    int64_t G = p->H / p->Hkv, Sk = p->Sk, D = p->D, Dv = p->Dv;
    double *s = malloc((size_t)(Sk + 1) * sizeof(double)), *P = malloc((size_t)(Sk + 1) * sizeof(double));
    double *dP = malloc((size_t)(Sk + 1) * sizeof(double)), *g = malloc((size_t)(Sk + 1) * sizeof(double));
    double *dqa = calloc((size_t)(D + 1), sizeof(double)), *dqm = calloc((size_t)(D + 1), sizeof(double));
    double *dk = calloc(nk(p) + 1, sizeof(double)), *dv = calloc(nv(p) + 1, sizeof(double));
    /* the sums of |terms|: past float32's range, whether float32 overflows (inf, or
     * inf - inf = NaN) depends on the order of the sum, so either answer is PyTorch's */
    double *dkm = calloc(nk(p) + 1, sizeof(double)), *dvm = calloc(nv(p) + 1, sizeof(double));
    for (int64_t b = 0; b < p->B; b++)
        for (int64_t h = 0; h < p->H; h++) {
            int64_t hk = h / G;
            for (int64_t i = 0; i < p->Sq; i++) {
                const float *qi = p->q + ((b * p->H + h) * p->Sq + i) * D;
                const float *doi = p->dout + ((b * p->H + h) * p->Sq + i) * Dv;
                double m = -INFINITY;
                int mnan = 0;
                for (int64_t j = 0; j < Sk; j++) {
                    int vis;
                    double x = oracle_score(p, full, b, h, i, j, &vis, &g[j], &o->smax);
                    s[j] = x;
                    if (vis || full) {
                        if (isnan(x))
                            mnan = 1;
                        else if (x > m)
                            m = x;
                    }
                }
                if (mnan) m = NAN;
                /* a sink: one more finite logit of the softmax, without a value */
                double sk = d->sinks ? (double)d->sinks[h] : -INFINITY;
                if (!mnan && sk > m) m = sk;
                /* P over the row; _safe_softmax: all -inf (no NaN) -> 0 */
                int dead = !mnan && m == -INFINITY;
                double l = d->sinks && !mnan ? exp(sk - m) : 0;
                for (int64_t j = 0; j < Sk; j++) {
                    int vis = oracle_visible(p, b, h, i, j);
                    P[j] = dead || (!vis && !full) ? 0.0 : exp(s[j] - m); /* exp(-inf - finite) = 0 */
                    if (!full && !vis) P[j] = 0.0;
                    l += P[j];
                }
                for (int64_t j = 0; j < Sk; j++)
                    P[j] = dead || (!full && !oracle_visible(p, b, h, i, j)) ? 0.0 : P[j] / l;
                double *orow = o->out + ((b * p->H + h) * p->Sq + i) * Dv;
                uint8_t *nrow = nfo + ((b * p->H + h) * p->Sq + i) * Dv;
                for (int64_t c = 0; c < Dv; c++) {
                    double acc = 0;
                    for (int64_t j = 0; j < Sk; j++) {
                        if (!full && (P[j] == 0.0 || dead)) continue;
                        acc += P[j] * p->v[((b * p->Hkv + hk) * Sk + j) * Dv + c];
                    }
                    if (dead && !full) acc = 0.0;
                    nrow[c] = nonfin(acc);
                    if (values) orow[c] = acc;
                }
                /* backward: dP = dO v^T, Di = sum P dP, dS = P (dP - Di) g scale */
                double Di = 0;
                for (int64_t j = 0; j < Sk; j++) {
                    double acc = 0;
                    if (full || P[j] != 0.0)
                        for (int64_t c = 0; c < Dv; c++)
                            acc += (double)doi[c] * p->v[((b * p->Hkv + hk) * Sk + j) * Dv + c];
                    dP[j] = acc;
                    if (full || P[j] != 0.0) Di += P[j] * acc;
                }
                for (int64_t c = 0; c < D; c++) dqa[c] = 0, dqm[c] = 0;
                for (int64_t j = 0; j < Sk; j++) {
                    if (!full && P[j] == 0.0) continue;
                    double ds = P[j] * (dP[j] - Di) * g[j] * d->scale;
                    const float *kj = p->k + ((b * p->Hkv + hk) * Sk + j) * D;
                    double *dkj = dk + ((b * p->Hkv + hk) * Sk + j) * D, *dvj = dv + ((b * p->Hkv + hk) * Sk + j) * Dv;
                    double *dkmj = dkm + ((b * p->Hkv + hk) * Sk + j) * D,
                           *dvmj = dvm + ((b * p->Hkv + hk) * Sk + j) * Dv;
                    double dsm = fabs(P[j]) * (fabs(dP[j]) + fabs(Di)) * fabs(g[j] * d->scale);
                    for (int64_t c = 0; c < D; c++) {
                        dqa[c] += ds * kj[c], dkj[c] += ds * qi[c];
                        dqm[c] += dsm * fabs(kj[c]), dkmj[c] += dsm * fabs(qi[c]);
                    }
                    for (int64_t c = 0; c < Dv; c++) dvj[c] += P[j] * doi[c], dvmj[c] += fabs(P[j] * doi[c]);
                }
                for (int64_t c = 0; c < D; c++) {
                    size_t at = (size_t)(((b * p->H + h) * p->Sq + i) * D + c);
                    nfq[at] = gnonfin(dqa[c], dqm[c], full);
                    if (values) o->dq[at] = dqa[c];
                }
            }
        }
    for (size_t i = 0; i < nk(p); i++) nfk[i] = gnonfin(dk[i], dkm[i], full);
    for (size_t i = 0; i < nv(p); i++) nfv[i] = gnonfin(dv[i], dvm[i], full);
    if (values) memcpy(o->dk, dk, nk(p) * sizeof(double)), memcpy(o->dv, dv, nv(p) * sizeof(double));
    free(s), free(P), free(dP), free(g), free(dqa), free(dqm), free(dk), free(dv), free(dkm), free(dvm);
}

static void oracle_run(const prob *p, oracle *o) {
    memset(o, 0, sizeof *o);
    o->out = calloc(no(p) + 1, sizeof(double)), o->dq = calloc(nq(p) + 1, sizeof(double));
    o->dk = calloc(nk(p) + 1, sizeof(double)), o->dv = calloc(nv(p) + 1, sizeof(double));
    o->nf_lean_o = calloc(no(p) + 1, 1), o->nf_full_o = calloc(no(p) + 1, 1);
    o->nf_lean_q = calloc(nq(p) + 1, 1), o->nf_full_q = calloc(nq(p) + 1, 1);
    o->nf_lean_k = calloc(nk(p) + 1, 1), o->nf_full_k = calloc(nk(p) + 1, 1);
    o->nf_lean_v = calloc(nv(p) + 1, 1), o->nf_full_v = calloc(nv(p) + 1, 1);
    oracle_pass(p, 1, o, o->nf_full_o, o->nf_full_q, o->nf_full_k, o->nf_full_v, 0);
    oracle_pass(p, 0, o, o->nf_lean_o, o->nf_lean_q, o->nf_lean_k, o->nf_lean_v, 1);
}

static void oracle_free(oracle *o) {
    free(o->out), free(o->dq), free(o->dk), free(o->dv);
    free(o->nf_lean_o), free(o->nf_full_o), free(o->nf_lean_q), free(o->nf_full_q);
    free(o->nf_lean_k), free(o->nf_full_k), free(o->nf_lean_v), free(o->nf_full_v);
}

/* ---- checks ----------------------------------------------------------------- */
static int verbose, failures, failed_cases;
static uint64_t cur_seed, cur_case;

static int report(const prob *p, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int report(const prob *p, const char *path, const char *fmt, ...) {
    va_list ap;
    char msg[512];
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const attn_sdpa_desc *d = &p->d;
    printf("FAIL %s: %s\n  case: B=%lld H=%lld Hkv=%lld Sq=%lld Sk=%lld D=%lld Dv=%lld causal=%d window=%d(%lld,%lld) "
           "softcap=%g alibi=%d seqlens=%d mask=%d dropout=%d dtype=%d scale=%g chunk=%lld sinks=%d dense mask "
           "%lld,%lld,%lld,%lld bias %lld,%lld,%lld,%lld;%s\n  reproduce: "
           "fuzz_paths --seed "
           "%llu --case %llu -v\n",
           path, msg, (long long)p->B, (long long)p->H, (long long)p->Hkv, (long long)p->Sq, (long long)p->Sk,
           (long long)p->D, (long long)p->Dv, (int)d->causal, d->window, (long long)d->window_left,
           (long long)d->window_right, (double)d->softcap, d->alibi_slopes != NULL, d->seqlens_k != NULL,
           d->key_mask != NULL, p->has_drop, (int)p->dt, (double)d->scale, (long long)d->attention_chunk,
           d->sinks != NULL, d->attn_mask ? (long long)d->attn_mask_strides[0] : -1LL,
           (long long)d->attn_mask_strides[1], (long long)d->attn_mask_strides[2], (long long)d->attn_mask_strides[3],
           d->attn_bias ? (long long)d->attn_bias_strides[0] : -1LL, (long long)d->attn_bias_strides[1],
           (long long)d->attn_bias_strides[2], (long long)d->attn_bias_strides[3], p->what,
           (unsigned long long)cur_seed, (unsigned long long)cur_case);
    failures++;
    return 1;
}

/* a path's tensor x (n floats) against the oracle's non-finite positions
 * (lean: must; full: may) */
static int check_nonfinite(const prob *p, const char *path, const char *name, const float *x, size_t n,
                           const uint8_t *lean, const uint8_t *full) {
    for (size_t i = 0; i < n; i++) {
        int nf = !isfinite(x[i]);
        if (lean[i] && !nf)
            return report(p, path, "%s[%zu] = %g is finite; PyTorch's math gives NaN/inf there", name, i, (double)x[i]);
        if (nf && !full[i])
            return report(p, path, "%s[%zu] = %g; PyTorch's math gives a finite value there", name, i, (double)x[i]);
    }
    return 0;
}

/* a path's tensor against the reference's where both are finite (non-finite
 * positions are the oracle's to judge; without the oracle they must agree),
 * within atol + rtol |ref|: atol is `ulps` float32 ulps of `base`, the
 * magnitude the tensor's terms are made of, times (1 + the largest |score|):
 * a score's rounding error grows with its size and exp carries it on */
static int check_close(const prob *p, const char *path, const char *name, const float *x, const float *ref, size_t n,
                       double rtol, double base, double smax, int strict_nf) {
    double atol = 64 * 0x1p-24 * base * (1.0 + smax) + 1e-35;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i]) || !isfinite(ref[i])) {
            int same = (isnan(x[i]) && isnan(ref[i])) || x[i] == ref[i];
            if (strict_nf && !same)
                return report(p, path, "%s[%zu] = %g, reference %g", name, i, (double)x[i], (double)ref[i]);
            continue;
        }
        if (fabs((double)x[i] - ref[i]) > atol + rtol * fabs(ref[i]))
            return report(p, path, "%s[%zu] = %.9g, reference %.9g (tolerance %.3g)", name, i, (double)x[i],
                          (double)ref[i], atol + rtol * fabs(ref[i]));
    }
    return 0;
}

static double maxabs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i]) && fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

static int bitwise(const prob *p, const char *path, const char *name, const float *a, const float *b, size_t n) {
    if (n && memcmp(a, b, n * sizeof(float))) return report(p, path, "%s differs between 1 and 2 threads", name);
    return 0;
}

/* ---- the paths ---------------------------------------------------------------- */
/* The fused and reference paths write their outputs into the case's guarded buffers (zeroed first; a write past
 * them faults), copied to the caller's after */
static attn_status forward(const prob *p, attn_impl impl, int threads, float *out, float *lse) {
    attn_sdpa_desc d = p->d;
    d.impl = impl;
    omp_set_num_threads(threads);
    float *o = p->go ? p->go : out;
    if (p->go) memset(p->go, 0, no(p) * 4);
    attn_status s =
        attn_sdpa_forward(&d, view(p, p->q, p->q16, p->H, p->Sq, p->D), view(p, p->k, p->k16, p->Hkv, p->Sk, p->D),
                          view(p, p->v, p->v16, p->Hkv, p->Sk, p->Dv), fview(o, p->H, p->Sq, p->Dv), lse);
    if (p->go) memcpy(out, p->go, no(p) * 4);
    return s;
}

static attn_status backward(const prob *p, attn_impl impl, int threads, float *g) {
    attn_sdpa_desc d = p->d;
    d.impl = impl;
    omp_set_num_threads(threads);
    float *dq = g, *dk = g + nq(p), *dv = dk + nk(p);
    if (d.sinks) d.dsinks = dv + nv(p);
    if (d.attn_bias) { /* after the dsinks slot, poisoned: every element must be written */
        d.dbias = dv + nv(p) + p->H;
        for (int64_t i = 0; i < p->nbias; i++) d.dbias[i] = NAN;
    }
    size_t n[3] = {nq(p), nk(p), nv(p)};
    float *dst[3] = {dq, dk, dv}, *to[3];
    for (int i = 0; i < 3; i++) {
        to[i] = p->gd[i] ? p->gd[i] : dst[i];
        if (p->gd[i]) memset(p->gd[i], 0, n[i] * 4);
    }
    attn_view empty = {NULL, 0, 0, 0};
    attn_status s = attn_sdpa_backward(
        &d, view(p, p->q, p->q16, p->H, p->Sq, p->D), view(p, p->k, p->k16, p->Hkv, p->Sk, p->D),
        view(p, p->v, p->v16, p->Hkv, p->Sk, p->Dv), empty, fview(p->dout, p->H, p->Sq, p->Dv), NULL,
        fview(to[0], p->H, p->Sq, p->D), fview(to[1], p->Hkv, p->Sk, p->D), fview(to[2], p->Hkv, p->Sk, p->Dv));
    for (int i = 0; i < 3; i++)
        if (p->gd[i]) memcpy(dst[i], p->gd[i], n[i] * 4);
    return s;
}

/* the storage types the KV cache path draws in turn (run_case's sts) */
#define CACHE_TYPES 9

/* The KV cache of any stored type in DATA mode (a third of the cases):
 * decode on 1 and 2 threads bitwise, against the cache's reference path in
 * the same mode (both round q alike; P to the cache's type where the table
 * rounds it, the 16-bit P of int8 / int4 / q4_0 / q8_0 V: 3 units of
 * that precision), and, when the stored values are finite, finite exactly
 * where the reference is. */
static void cache_mode(const prob *p, attn_kv_cache *c, attn_dtype st, const char *path, double vmax, double smax,
                       int stored_nf) {
    attn_sdpa_desc d = p->d;
    d.seqlens_k = NULL, d.math = ATTN_MATH_DATA;
    float *a = calloc(no(p) + 1, 4), *b = calloc(no(p) + 1, 4), *r = calloc(no(p) + 1, 4);
    attn_view vq = fview(p->q, p->H, p->Sq, p->D);
    omp_set_num_threads(1);
    attn_status s1 = attn_kv_cache_attend(c, &d, vq, fview(a, p->H, p->Sq, p->Dv), NULL);
    omp_set_num_threads(2);
    attn_status s2 = attn_kv_cache_attend(c, &d, vq, fview(b, p->H, p->Sq, p->Dv), NULL);
    d.impl = ATTN_IMPL_REF;
    attn_status s3 = attn_kv_cache_attend(c, &d, vq, fview(r, p->H, p->Sq, p->Dv), NULL);
    char where[96];
    snprintf(where, sizeof where, "%s, math data", path);
    if (s1 != s2 || s1 != s3) {
        report(p, where, "statuses differ: attend %d / %d, reference %d", s1, s2, s3);
    } else if (s1 == ATTN_OK && !bitwise(p, where, "out", a, b, no(p))) {
        int fp8 = st == ATTN_DTYPE_FP8_E4M3 || st == ATTN_DTYPE_FP8_E5M2; /* q and P bf16 */
        double u = st == ATTN_DTYPE_F16           ? 0x1p-11
                   : st == ATTN_DTYPE_BF16 || fp8 ? 0x1p-8
                   : st == ATTN_DTYPE_F32         ? 0.0
                                                  : 0x1p-15; /* the 16-bit P of integer V */
        check_close(p, where, "out", a, r, no(p), 2e-4 + 3 * u, vmax * (1.0 + 3 * u / (64 * 0x1p-24)), smax, 0);
        for (size_t i = 0; i < no(p) && !stored_nf; i++)
            if (!isfinite(a[i]) != !isfinite(r[i])) {
                report(p, where, "out[%zu] = %g, reference %g", i, (double)a[i], (double)r[i]);
                break;
            }
    }
    free(a), free(b), free(r);
}

/* the KV cache's attend, storage type st and page size ps, against the
 * reference on the values the cache stores */
static void cache_path(const prob *p, attn_dtype st, int64_t ps, double smax) {
    if (p->has_drop || p->d.key_mask || p->nseq || p->dt != ATTN_DTYPE_F32 || p->d.causal == ATTN_CAUSAL_TOP_LEFT)
        return;
    if (p->D % attn_storage_of(st)->block || p->Dv % attn_storage_of(st)->block) return;
    attn_kv_cache_config cfg = {.batch = p->B,
                                .kv_heads = p->Hkv,
                                .capacity = p->Sk ? p->Sk : 1,
                                .head_dim = p->D,
                                .v_head_dim = p->Dv,
                                .dtype = st,
                                .page_size = ps};
    attn_kv_cache *c = NULL;
    if (attn_kv_cache_create(&cfg, &c) != ATTN_OK) return;
    int64_t n[3];
    for (int64_t b = 0; b < p->B; b++) n[b] = p->seqlens ? p->seqlens[b] : p->Sk;
    char path[64];
    snprintf(path, sizeof path, "kv cache %s%s",
             st == ATTN_DTYPE_F32    ? "f32"
             : st == ATTN_DTYPE_F16  ? "f16"
             : st == ATTN_DTYPE_BF16 ? "bf16"
             : st == ATTN_DTYPE_Q8_0 ? "q8_0"
                                     : attn_storage_of(st)->name,
             ps ? " paged" : "");
    if (attn_kv_cache_append(c, n, fview(p->k, p->Hkv, p->Sk, p->D), fview(p->v, p->Hkv, p->Sk, p->Dv)) != ATTN_OK) {
        report(p, path, "append failed");
        attn_kv_cache_free(c);
        return;
    }
    /* the stored values, as float32, in (B, Hkv, Sk, .) */
    float *k2 = calloc(nk(p) + 1, 4), *v2 = calloc(nv(p) + 1, 4);
    float *o1 = calloc(no(p) + 1, 4), *o2 = calloc(no(p) + 1, 4), *o3 = calloc(no(p) + 1, 4);
    for (int64_t b = 0; b < p->B; b++)
        for (int64_t hk = 0; hk < p->Hkv; hk++)
            for (int64_t j = 0; j < n[b]; j++)
                attn_kv_cache_read(c, b, hk, j, k2 + ((b * p->Hkv + hk) * p->Sk + j) * p->D,
                                   v2 + ((b * p->Hkv + hk) * p->Sk + j) * p->Dv);
    attn_sdpa_desc d = p->d;
    d.seqlens_k = NULL;
    d.causal = p->d.causal;
    int64_t Sk = 0;
    for (int64_t b = 0; b < p->B; b++) Sk = n[b] > Sk ? n[b] : Sk;
    omp_set_num_threads(1);
    attn_status s1 = attn_kv_cache_attend(c, &d, fview(p->q, p->H, p->Sq, p->D), fview(o1, p->H, p->Sq, p->Dv), NULL);
    omp_set_num_threads(2);
    attn_status s2 = attn_kv_cache_attend(c, &d, fview(p->q, p->H, p->Sq, p->D), fview(o2, p->H, p->Sq, p->Dv), NULL);
    attn_sdpa_desc r = p->d;
    r.impl = ATTN_IMPL_REF, r.qkv_dtype = ATTN_DTYPE_F32, r.Sk = Sk, r.seqlens_k = n,
    r.seqlens_k_dtype = ATTN_DTYPE_I64;
    attn_view rk = {k2, p->Hkv * p->Sk * p->D, p->Sk * p->D, p->D},
              rv = {v2, p->Hkv * p->Sk * p->Dv, p->Sk * p->Dv, p->Dv};
    attn_status s3 = attn_sdpa_forward(&r, fview(p->q, p->H, p->Sq, p->D), rk, rv, fview(o3, p->H, p->Sq, p->Dv), NULL);
    if (s1 != s2 || s1 != s3)
        report(p, path, "statuses differ: attend %d / %d, reference %d", s1, s2, s3);
    else if (s1 == ATTN_OK && !bitwise(p, path, "out", o1, o2, no(p))) {
        /* a 16-bit or q8_0 cache may store 1e30 as inf: non-finite stored values are the
         * main paths' to judge (zero weights may or may not carry them) */
        int stored_nf = 0;
        for (size_t i = 0; i < nk(p); i++) stored_nf |= !isfinite(k2[i]);
        for (size_t i = 0; i < nv(p); i++) stored_nf |= !isfinite(v2[i]);
        check_close(p, path, "out", o1, o3, no(p), 2e-4, maxabs(v2, nv(p)), smax, !stored_nf);
        if (st != ATTN_DTYPE_F32 && (cur_case / CACHE_TYPES) % 3 == 2)
            cache_mode(p, c, st, path, maxabs(v2, nv(p)), smax, stored_nf);
        if (stored_nf) { /* the rule on the values the cache holds */
            prob p2 = *p;
            p2.k = k2, p2.v = v2, p2.d.seqlens_k = n, p2.d.seqlens_k_dtype = ATTN_DTYPE_I64;
            oracle o;
            oracle_run(&p2, &o);
            check_nonfinite(&p2, path, "out", o1, no(p), o.nf_lean_o, o.nf_full_o);
            check_nonfinite(&p2, "reference over the cache's values", "out", o3, no(p), o.nf_lean_o, o.nf_full_o);
            oracle_free(&o);
        }
    }
    free(k2), free(v2), free(o1), free(o2), free(o3);
    attn_kv_cache_free(c);
}

/* Caller-owned pages (attn_paged_attention): every sequence's rows written
 * with attn_paged_append into pages of a shuffled table (layout NHD or HND,
 * any page size), against the reference on the stored values; 1 and 2
 * threads bitwise. Queries of any count: decode (Sq <= 16) and the gathered
 * long-query path. */
/* x (a row of n) as stored and read back with fp8's scale */
static void stored_row(attn_dtype t, float *x, int64_t n, float scale) {
    unsigned char *buf = malloc(attn_storage_bytes(t, n) + 1);
    float par[2] = {scale, 0.0f};
    attn_st_store_row(t, x, n, buf, par);
    attn_st_load_row(t, buf, n, par, x);
    free(buf);
}

static void pages_path(const prob *p, attn_dtype st, attn_dtype vt, int64_t ps, attn_kv_layout layout, double smax) {
    if (p->has_drop || p->d.key_mask || p->nseq || p->dt != ATTN_DTYPE_F32 || p->d.causal == ATTN_CAUSAL_TOP_LEFT)
        return;
    if (p->D % attn_storage_of(st)->block || p->Dv % attn_storage_of(vt)->block) return;
    int64_t n[3], npages = 0, B = p->B, H = p->Hkv;
    for (int64_t b = 0; b < B; b++) n[b] = p->seqlens ? p->seqlens[b] : p->Sk, npages += (n[b] + ps - 1) / ps;
    int64_t total = npages + 1;
    size_t kb = attn_storage_bytes(st, p->D), vb = attn_storage_bytes(vt, p->Dv);
    attn_paged_kv kv = {.dtype = st,
                        .layout = layout,
                        .num_pages = total,
                        .page_size = ps,
                        .Hkv = H,
                        .D = p->D,
                        .Dv = p->Dv,
                        .v_dtype = vt};
    kv.k_pages = malloc((size_t)(total * ps * H) * kb + 1), kv.v_pages = malloc((size_t)(total * ps * H) * vb + 1);
    /* the formats' fp8 scales (K's per kv head or per tensor, V's per tensor) and int pairs */
    float ksc[16], vsc[1] = {0.25f + (float)(cur_case % 7) * 0.125f};
    for (int64_t h = 0; h < H && h < 16; h++) ksc[h] = 0.02f * (float)(1 + (h + cur_case) % 5);
    kv.k_scale = ksc, kv.k_scale_len = H <= 16 && cur_case % 2 ? H : 1, kv.v_scale = vsc, kv.v_scale_len = 1;
    kv.k_params = malloc((size_t)(total * ps * H) * 8 + 8), kv.v_params = malloc((size_t)(total * ps * H) * 8 + 8);
    int32_t *ind = malloc((size_t)(npages + 1) * 4), ip[4], last[3];
    int64_t T = 0;
    for (int64_t b = 0; b < B; b++) T += n[b];
    float *kr = malloc((size_t)(T * H * p->D + 1) * 4), *vr = malloc((size_t)(T * H * p->Dv + 1) * 4);
    int64_t *slots = malloc((size_t)(T + 1) * sizeof *slots);
    float *k2 = calloc(nk(p) + 1, 4), *v2 = calloc(nv(p) + 1, 4), *o1 = calloc(no(p) + 1, 4);
    float *o2 = calloc(no(p) + 1, 4), *o3 = calloc(no(p) + 1, 4);
    char path[64];
    static const char *tn[] = {"?", "f32",  "f16",  "bf16", "?",    "?",    "?",   "?",
                               "?", "q8_0", "e4m3", "e5m2", "int8", "int4", "q4_0"};
    snprintf(path, sizeof path, "caller pages K %s V %s %s page %lld", tn[st], tn[vt],
             layout == ATTN_KV_NHD ? "NHD" : "HND", (long long)ps);
    memset(kv.k_pages, 0xff, (size_t)(total * ps * H) * kb), memset(kv.v_pages, 0xff, (size_t)(total * ps * H) * vb);
    for (int64_t i = 0; i < npages; i++) ind[i] = (int32_t)(npages - i); /* pages 1 .. npages, backwards */
    ip[0] = 0;
    int64_t t = 0;
    for (int64_t b = 0; b < B; b++) {
        int64_t np = (n[b] + ps - 1) / ps;
        ip[b + 1] = ip[b] + (int32_t)np, last[b] = np ? (int32_t)(n[b] - (np - 1) * ps) : 0;
        for (int64_t j = 0; j < n[b]; j++, t++) {
            slots[t] = (int64_t)ind[ip[b] + j / ps] * ps + j % ps;
            for (int64_t hk = 0; hk < H; hk++) {
                memcpy(kr + (t * H + hk) * p->D, p->k + ((b * H + hk) * p->Sk + j) * p->D, (size_t)p->D * 4);
                memcpy(vr + (t * H + hk) * p->Dv, p->v + ((b * H + hk) * p->Sk + j) * p->Dv, (size_t)p->Dv * 4);
                memcpy(k2 + ((b * H + hk) * p->Sk + j) * p->D, kr + (t * H + hk) * p->D, (size_t)p->D * 4);
                memcpy(v2 + ((b * H + hk) * p->Sk + j) * p->Dv, vr + (t * H + hk) * p->Dv, (size_t)p->Dv * 4);
                stored_row(st, k2 + ((b * H + hk) * p->Sk + j) * p->D, p->D, ksc[kv.k_scale_len > 1 ? hk : 0]);
                stored_row(vt, v2 + ((b * H + hk) * p->Sk + j) * p->Dv, p->Dv, vsc[0]);
            }
        }
    }
    kv.kv_indptr = ip, kv.kv_indices = ind, kv.kv_last_page_len = last;
    attn_status sa = attn_paged_append(&kv, T, kr, vr, slots);
    attn_sdpa_desc d = p->d;
    d.seqlens_k = NULL;
    omp_set_num_threads(1);
    attn_status s1 =
        attn_paged_attention(&d, fview(p->q, p->H, p->Sq, p->D), &kv, NULL, fview(o1, p->H, p->Sq, p->Dv), NULL);
    omp_set_num_threads(2);
    attn_status s2 =
        attn_paged_attention(&d, fview(p->q, p->H, p->Sq, p->D), &kv, NULL, fview(o2, p->H, p->Sq, p->Dv), NULL);
    int64_t Sk = 0;
    for (int64_t b = 0; b < B; b++) Sk = n[b] > Sk ? n[b] : Sk;
    attn_sdpa_desc r = p->d;
    r.impl = ATTN_IMPL_REF, r.qkv_dtype = ATTN_DTYPE_F32, r.Sk = Sk, r.seqlens_k = n,
    r.seqlens_k_dtype = ATTN_DTYPE_I64;
    attn_view rk = {k2, H * p->Sk * p->D, p->Sk * p->D, p->D}, rv = {v2, H * p->Sk * p->Dv, p->Sk * p->Dv, p->Dv};
    attn_status s3 = attn_sdpa_forward(&r, fview(p->q, p->H, p->Sq, p->D), rk, rv, fview(o3, p->H, p->Sq, p->Dv), NULL);
    if (sa || s1 != s2 || s1 != s3) {
        report(p, path, "statuses differ: append %d, attend %d / %d, reference %d", sa, s1, s2, s3);
    } else if (s1 == ATTN_OK && !bitwise(p, path, "out", o1, o2, no(p))) {
        int stored_nf = 0; /* non-finite stored values: the main paths' to judge, as for the cache */
        for (size_t i = 0; i < nk(p); i++) stored_nf |= !isfinite(k2[i]);
        for (size_t i = 0; i < nv(p); i++) stored_nf |= !isfinite(v2[i]);
        if (!stored_nf) check_close(p, path, "out", o1, o3, no(p), 2e-4, maxabs(v2, nv(p)), smax, 1);
    }
    free(kv.k_pages), free(kv.v_pages), free(ind), free(kr), free(vr), free(slots), free(k2), free(v2), free(o1);
    free(o2), free(o3), free(kv.k_params), free(kv.v_params);
}

/* A KV cache split into 2 or 3 shards (attn_kv_cache_attend_at; the sharded
 * cache's building block): ranges, or round-robin pages of 1 .. 17 tokens
 * (local caches contiguous or paged by those pages), each shard attended at
 * its keys' global positions, the shares merged in shard order with
 * attn_merge_states (the sinks last, as a state of no value): against the
 * reference over the whole keys, merged result 1 and 2 threads bitwise.
 * Decode-sized cases with finite inputs (the rule on non-finite values is
 * the other paths'). */
static void shard_path(const prob *p, double smax) {
    if (p->has_drop || p->d.key_mask || p->nseq || p->dt != ATTN_DTYPE_F32 || p->d.causal == ATTN_CAUSAL_TOP_LEFT ||
        p->Sq > 16 || p->d.impl == ATTN_IMPL_REF || p->Sk == 0)
        return;
    for (size_t i = 0; i < nk(p); i++)
        if (!isfinite(p->k[i])) return;
    for (size_t i = 0; i < nv(p); i++)
        if (!isfinite(p->v[i])) return;
    int nsh = 2 + (int)(cur_case % 2), rr = cur_case % 3 != 0;
    int64_t page = rr ? 1 + (int64_t)(cur_case % 17) : (p->Sk + nsh - 1) / nsh, B = p->B, H = p->Hkv, n[3];
    for (int64_t b = 0; b < B; b++) n[b] = p->seqlens ? p->seqlens[b] : p->Sk;
    size_t nl = (size_t)(B * p->H * p->Sq);
    float *acc = calloc(no(p) + 1, 4), *la = calloc(nl + 1, 4), *part = calloc(no(p) + 1, 4), *lp = calloc(nl + 1, 4);
    float *again = calloc(no(p) + 1, 4), *o3 = calloc(no(p) + 1, 4);
    float *kr = calloc(nk(p) + 1, 4), *vr = calloc(nv(p) + 1, 4);
    attn_sdpa_desc d = p->d;
    d.seqlens_k = NULL, d.sinks = NULL, d.Sk = 0;
    attn_status st = ATTN_OK;
    char path[80];
    snprintf(path, sizeof path, "%d shards, %s of %lld", nsh, rr ? "round-robin pages" : "ranges", (long long)page);
    for (int rep = 0; rep < 2 && !st; rep++) {
        omp_set_num_threads(rep ? 1 : 2);
        for (int r = 0; r < nsh && !st; r++) { /* shard r: the positions it owns, in order */
            int64_t m[3] = {0, 0, 0}, cap = 1;
            for (int64_t b = 0; b < B; b++)
                for (int64_t j = 0; j < n[b]; j++) {
                    if ((rr ? j / page % nsh : j / page) != r) continue;
                    for (int64_t hk = 0; hk < H; hk++) {
                        memcpy(kr + ((b * H + hk) * p->Sk + m[b]) * p->D, p->k + ((b * H + hk) * p->Sk + j) * p->D,
                               (size_t)p->D * 4);
                        memcpy(vr + ((b * H + hk) * p->Sk + m[b]) * p->Dv, p->v + ((b * H + hk) * p->Sk + j) * p->Dv,
                               (size_t)p->Dv * 4);
                    }
                    m[b]++, cap = m[b] > cap ? m[b] : cap;
                }
            attn_kv_cache_config cfg = {.batch = B,
                                        .kv_heads = H,
                                        .capacity = cap,
                                        .head_dim = p->D,
                                        .v_head_dim = p->Dv,
                                        .page_size = rr && cur_case % 2 ? page : 0};
            attn_kv_cache *c = NULL;
            st = attn_kv_cache_create(&cfg, &c);
            if (!st) st = attn_kv_cache_append(c, m, fview(kr, H, p->Sk, p->D), fview(vr, H, p->Sk, p->Dv));
            attn_kv_positions pos = {n, page, rr ? nsh * page : page, r * page};
            if (!st)
                st = attn_kv_cache_attend_at(c, &d, &pos, fview(p->q, p->H, p->Sq, p->D),
                                             fview(r ? part : acc, p->H, p->Sq, p->Dv), r ? lp : la);
            if (!st && r) st = attn_merge_states((int64_t)nl, p->Dv, acc, la, part, lp, acc, la);
            attn_kv_cache_free(c);
        }
        if (!st && p->d.sinks) { /* the sinks: merged in last */
            memset(part, 0, no(p) * 4);
            for (size_t i = 0; i < nl; i++) lp[i] = p->d.sinks[(int64_t)i / p->Sq % p->H];
            st = attn_merge_states((int64_t)nl, p->Dv, acc, la, part, lp, acc, la);
        }
        if (!rep) memcpy(again, acc, no(p) * 4);
    }
    omp_set_num_threads(2);
    attn_sdpa_desc r = p->d;
    r.impl = ATTN_IMPL_REF, r.seqlens_k = n, r.seqlens_k_dtype = ATTN_DTYPE_I64;
    attn_status s3 = attn_sdpa_forward(&r, fview(p->q, p->H, p->Sq, p->D), fview(p->k, H, p->Sk, p->D),
                                       fview(p->v, H, p->Sk, p->Dv), fview(o3, p->H, p->Sq, p->Dv), NULL);
    if (st != s3)
        report(p, path, "statuses differ: shards %d, reference %d", st, s3);
    else if (!st && !bitwise(p, path, "out", acc, again, no(p)))
        check_close(p, path, "out", acc, o3, no(p), 2e-4, maxabs(p->v, nv(p)), smax, 0);
    free(acc), free(la), free(part), free(lp), free(again), free(o3), free(kr), free(vr);
}

/* The block API (ring attention's primitives) on two key blocks [0, K1) and
 * [K1, Sk): the forward's blocks merged by log-sum-exp as src/mpi/ring.c
 * merges them, the backward from the folded row statistics. out and g
 * (dq, dk, dv) as forward()/backward() give them. */
static attn_view block_kv(const prob *p, int is_v, int64_t ks) {
    int64_t n = is_v ? p->Dv : p->D;
    attn_view w = view(p, is_v ? p->v : p->k, is_v ? p->v16 : p->k16, p->Hkv, p->Sk, n);
    size_t es = p->dt == ATTN_DTYPE_F32 ? 4 : 2;
    w.data = (float *)(void *)((char *)w.data + (size_t)(ks * n) * es);
    return w;
}

static attn_status blocks(const prob *p, int64_t K1, float *out, float *g) {
    int64_t ks[2] = {0, K1}, kn[2] = {K1, p->Sk - K1}, rows = p->B * p->H * p->Sq;
    float *ob = calloc(no(p) + 1, 4), *lb = calloc((size_t)rows + 1, 4), *lse = calloc((size_t)rows + 1, 4);
    float *m = calloc((size_t)rows + 1, 4), *l = calloc((size_t)rows + 1, 4), *t = calloc((size_t)rows + 1, 4);
    float *dqb = calloc(nq(p) + 1, 4);
    attn_status st = ATTN_OK;
    for (int64_t r = 0; r < rows; r++) lse[r] = -INFINITY, m[r] = -INFINITY;
    memset(out, 0, no(p) * 4);
    attn_view q = view(p, p->q, p->q16, p->H, p->Sq, p->D), dO = fview(p->dout, p->H, p->Sq, p->Dv);
    for (int bi = 0; bi < 2 && !st; bi++) {
        if (!kn[bi]) continue;
        attn_sdpa_desc e = p->d;
        e.impl = ATTN_IMPL_FAST, e.Sk = kn[bi], e.k_start = ks[bi], e.Sk_total = p->Sk;
        attn_view k = block_kv(p, 0, ks[bi]), v = block_kv(p, 1, ks[bi]);
        if ((st = attn_sdpa_forward(&e, q, k, v, fview(ob, p->H, p->Sq, p->Dv), lb))) break;
        for (int64_t r = 0; r < rows; r++) { /* ring.c's merge */
            float lp = lb[r], la = lse[r], *o = out + r * p->Dv;
            const float *op = ob + r * p->Dv;
            if (lp == -INFINITY) continue;
            if (la == -INFINITY) {
                memcpy(o, op, (size_t)p->Dv * 4), lse[r] = lp;
                continue;
            }
            double M = la > lp ? la : lp, wa = exp((double)la - M), wp = exp((double)lp - M), sum = wa + wp;
            for (int64_t c = 0; c < p->Dv; c++) o[c] = (float)((wa * o[c] + wp * op[c]) / sum);
            lse[r] = (float)(M + log(sum));
        }
        if ((st = attn_sdpa_block_stats(&e, q, k, v, dO, m, l, t))) break;
    }
    float *dq = g, *dk = g + nq(p), *dv = dk + nk(p);
    memset(g, 0, (nq(p) + nk(p) + nv(p)) * 4);
    int first = 1;
    for (int bi = 0; bi < 2 && !st; bi++) {
        if (!kn[bi]) continue;
        attn_sdpa_desc e = p->d;
        e.impl = ATTN_IMPL_FAST, e.Sk = kn[bi], e.k_start = ks[bi], e.Sk_total = p->Sk;
        attn_view gk = fview(dk + ks[bi] * p->D, p->Hkv, p->Sk, p->D);
        attn_view gv = fview(dv + ks[bi] * p->Dv, p->Hkv, p->Sk, p->Dv);
        if ((st = attn_sdpa_block_backward(&e, q, block_kv(p, 0, ks[bi]), block_kv(p, 1, ks[bi]), dO, m, l, t,
                                           fview(dqb, p->H, p->Sq, p->D), gk, gv)))
            break;
        for (size_t i = 0; i < nq(p); i++) dq[i] = first ? dqb[i] : dq[i] + dqb[i];
        first = 0;
    }
    free(ob), free(lb), free(lse), free(m), free(l), free(t), free(dqb);
    return st;
}

/* A math mode (attn.h, attn_math) on the forward paths: DATA for 16-bit
 * inputs, BF16 for float32 ones (which rounds q, k, v to bf16), drawn from the
 * case. Every path is non-finite only where the oracle's rule allows
 * (rounding keeps finite values finite: P <= 2^11), and the fused forward and the
 * default entry (decode for Sq <= 16) give the reference's answer in that
 * mode: values within the strict rule plus what rounding P to the type's
 * nearer neighbour may move (3 units of the type's precision times max |v|),
 * and the same bits on 1 and 2 threads. */
static void mode_paths(const prob *p, const oracle *o, double smax) {
    prob m = *p;
    m.d.math = p->dt == ATTN_DTYPE_F16 || p->dt == ATTN_DTYPE_BF16 ? ATTN_MATH_DATA : ATTN_MATH_BF16;
    double u = p->dt == ATTN_DTYPE_F16 ? 0x1p-11 : 0x1p-8, vb = maxabs(p->v, nv(p));
    float *r = calloc(no(p) + 1, 4), *f1 = calloc(no(p) + 1, 4), *f2 = calloc(no(p) + 1, 4);
    float *a1 = calloc(no(p) + 1, 4), *a2 = calloc(no(p) + 1, 4);
    attn_status sr = forward(&m, ATTN_IMPL_REF, 1, r, NULL), s1 = forward(&m, ATTN_IMPL_FAST, 1, f1, NULL);
    attn_status s2 = forward(&m, ATTN_IMPL_FAST, 2, f2, NULL), s3 = forward(&m, ATTN_IMPL_AUTO, 1, a1, NULL);
    attn_status s4 = forward(&m, ATTN_IMPL_AUTO, 2, a2, NULL);
    if (sr || s1 || s2 || s3 || s4) {
        report(p, "math mode", "statuses: ref %d fast %d/%d auto %d/%d", sr, s1, s2, s3, s4);
    } else {
        /* non-finite only where PyTorch's math allows it; not required where the
         * lean oracle's tiny double weights meet an inf value: a P that rounds
         * to zero is an exact zero weight, which may or may not carry it */
        uint8_t *none = calloc(no(p) + 1, 1);
        check_nonfinite(p, "math mode reference", "out", r, no(p), none, o->nf_full_o);
        check_nonfinite(p, "math mode fused forward", "out", f1, no(p), none, o->nf_full_o);
        check_nonfinite(p, "math mode default forward", "out", a1, no(p), none, o->nf_full_o);
        free(none);
        bitwise(p, "math mode fused forward", "out", f1, f2, no(p));
        bitwise(p, "math mode default forward", "out", a1, a2, no(p));
        double rt = 2e-4 + 3 * u, base = vb * (1.0 + 3 * u / (64 * 0x1p-24));
        check_close(p, "math mode fused forward", "out", f1, r, no(p), rt, base, smax, 0);
        check_close(p, "math mode default forward", "out", a1, r, no(p), rt, base, smax, 0);
    }
    free(r), free(f1), free(f2), free(a1), free(a2);
    /* the backward in the mode (dO, P, dS rounded too): fused on 1 and 2 threads
     * bitwise, against the reference in the same mode; the gradients' bases as the
     * strict comparison's (main) */
    size_t a = nq(p), b = nk(p), c = nv(p), ng = a + b + c + (size_t)p->H + (size_t)p->nbias + 1;
    float *gr = calloc(ng, 4), *g1 = calloc(ng, 4), *g2 = calloc(ng, 4);
    attn_status br = backward(&m, ATTN_IMPL_REF, 1, gr), b1 = backward(&m, ATTN_IMPL_FAST, 1, g1);
    attn_status b2 = backward(&m, ATTN_IMPL_FAST, 2, g2);
    if (br || b1 || b2) {
        report(p, "math mode backward", "statuses: ref %d fast %d/%d", br, b1, b2);
    } else {
        /* a P or dS element that rounds the other way (the paths' float and double
         * values on either side of a tie) moves a gradient by one unit of the type's
         * precision of that term: 3 u of the bases on top of the strict tolerance */
        double sc = fabs(p->d.scale), dov = maxabs(p->dout, no(p)) * vb * (double)p->Dv, rt = 1e-3 + 3 * u;
        double wid = 1.0 + 3 * u / (64 * 0x1p-24);
        bitwise(p, "math mode fused backward", "dq/dk/dv", g1, g2, a + b + c);
        check_close(p, "math mode fused backward", "dq", g1, gr, a, rt,
                    wid * dov * maxabs(p->k, b) * sc * (double)(p->Sk + 1), smax, 0);
        check_close(p, "math mode fused backward", "dk", g1 + a, gr + a, b, rt,
                    wid * dov * maxabs(p->q, a) * sc * (double)(p->Sq + 1), smax, 0);
        check_close(p, "math mode fused backward", "dv", g1 + a + b, gr + a + b, c, rt,
                    wid * maxabs(p->dout, no(p)) * (double)(p->Sq + 1), smax, 0);
    }
    free(gr), free(g1), free(g2);
}

static void run_case(uint64_t seed, uint64_t cas) {
    prob p;
    draw(&p, seed, cas);
    cur_seed = seed, cur_case = cas;
    int before = failures;
    oracle o;
    int use_oracle = !p.has_drop;
    if (use_oracle) oracle_run(&p, &o);
    float *oref = calloc(no(&p) + 1, 4), *o1 = calloc(no(&p) + 1, 4), *o2 = calloc(no(&p) + 1, 4);
    float *oa = calloc(no(&p) + 1, 4);
    size_t ng = nq(&p) + nk(&p) + nv(&p) + (size_t)(p.H + p.nbias) + 1; /* dq, dk, dv, dsinks, dbias */
    float *gref = calloc(ng, 4), *g1 = calloc(ng, 4), *g2 = calloc(ng, 4);
    attn_status sr = forward(&p, ATTN_IMPL_REF, 1, oref, NULL);
    attn_status s1 = forward(&p, ATTN_IMPL_FAST, 1, o1, NULL), s2 = forward(&p, ATTN_IMPL_FAST, 2, o2, NULL);
    attn_status sa = forward(&p, ATTN_IMPL_AUTO, 2, oa, NULL);
    double smax = use_oracle ? o.smax : 1e3;
    if (sr != ATTN_OK || s1 != ATTN_OK || s2 != ATTN_OK || sa != ATTN_OK) {
        report(&p, "forward", "statuses: ref %d fast %d/%d auto %d", sr, s1, s2, sa);
    } else {
        if (use_oracle) {
            check_nonfinite(&p, "reference forward", "out", oref, no(&p), o.nf_lean_o, o.nf_full_o);
            check_nonfinite(&p, "fused forward", "out", o1, no(&p), o.nf_lean_o, o.nf_full_o);
            check_nonfinite(&p, "default forward (decode for Sq <= 16)", "out", oa, no(&p), o.nf_lean_o, o.nf_full_o);
        }
        bitwise(&p, "fused forward", "out", o1, o2, no(&p));
        double vb = maxabs(p.v, nv(&p));
        check_close(&p, "fused forward", "out", o1, oref, no(&p), 2e-4, vb, smax, !use_oracle);
        check_close(&p, "default forward (decode for Sq <= 16)", "out", oa, oref, no(&p), 2e-4, vb, smax, !use_oracle);
    }
    if (use_oracle && cas % 3 == 1) mode_paths(&p, &o, smax); /* a math mode on a third of the cases */
    if (p.Sq <= 16) {                                         /* decode on 1 and 2 threads */
        float *d1 = calloc(no(&p) + 1, 4);
        if (forward(&p, ATTN_IMPL_AUTO, 1, d1, NULL) == ATTN_OK) bitwise(&p, "decode", "out", d1, oa, no(&p));
        free(d1);
    }
    /* dS = P (dP - D): terms of |dO| |v| (times |k| or |q| and |scale| for dq, dk), summed over keys */
    double sc = fabs(p.d.scale), dov = maxabs(p.dout, no(&p)) * maxabs(p.v, nv(&p)) * (double)p.Dv;
    double gbase[3] = {dov * maxabs(p.k, nk(&p)) * sc * (double)(p.Sk + 1),
                       dov * maxabs(p.q, nq(&p)) * sc * (double)(p.Sq + 1),
                       maxabs(p.dout, no(&p)) * (double)(p.Sq + 1)};
    sr = backward(&p, ATTN_IMPL_REF, 1, gref);
    s1 = backward(&p, ATTN_IMPL_FAST, 1, g1), s2 = backward(&p, ATTN_IMPL_FAST, 2, g2);
    if (sr != ATTN_OK || s1 != ATTN_OK || s2 != ATTN_OK) {
        report(&p, "backward", "statuses: ref %d fast %d/%d", sr, s1, s2);
    } else {
        size_t a = nq(&p), b = nk(&p), c = nv(&p);
        if (use_oracle) {
            check_nonfinite(&p, "reference backward", "dq", gref, a, o.nf_lean_q, o.nf_full_q);
            check_nonfinite(&p, "reference backward", "dk", gref + a, b, o.nf_lean_k, o.nf_full_k);
            check_nonfinite(&p, "reference backward", "dv", gref + a + b, c, o.nf_lean_v, o.nf_full_v);
            check_nonfinite(&p, "fused backward", "dq", g1, a, o.nf_lean_q, o.nf_full_q);
            check_nonfinite(&p, "fused backward", "dk", g1 + a, b, o.nf_lean_k, o.nf_full_k);
            check_nonfinite(&p, "fused backward", "dv", g1 + a + b, c, o.nf_lean_v, o.nf_full_v);
        }
        bitwise(&p, "fused backward", "dq/dk/dv", g1, g2, a + b + c);
        check_close(&p, "fused backward", "dq", g1, gref, a, 1e-3, gbase[0], smax, !use_oracle);
        check_close(&p, "fused backward", "dk", g1 + a, gref + a, b, 1e-3, gbase[1], smax, !use_oracle);
        check_close(&p, "fused backward", "dv", g1 + a + b, gref + a + b, c, 1e-3, gbase[2], smax, !use_oracle);
        if (p.d.sinks) { /* dsinks: sums over B Sq rows of P_sink Di, Di of the size of dO v */
            bitwise(&p, "fused backward", "dsinks", g1 + a + b + c, g2 + a + b + c, (size_t)p.H);
            check_close(&p, "fused backward", "dsinks", g1 + a + b + c, gref + a + b + c, (size_t)p.H, 1e-3,
                        gbase[2] * maxabs(p.v, nv(&p)) * (double)p.Dv, smax, !use_oracle);
        }
        if (p.d.attn_bias) { /* dbias: P (dP - Di) summed over the broadcast copies */
            size_t at = a + b + c + (size_t)p.H, nb = (size_t)p.nbias;
            double copies = (double)(p.B * p.H * p.Sq * p.Sk) / (double)(p.nbias ? p.nbias : 1);
            /* non-finite dbias must agree (every element written: the buffer starts as NaN) unless
             * PyTorch's math allows NaN/inf somewhere in the gradients: then hidden pairs may or may not
             * carry it (docs/SEMANTICS.md) and only finite pairs are compared */
            int tame = use_oracle && !any_set(o.nf_full_q, a) && !any_set(o.nf_full_k, b) && !any_set(o.nf_full_v, c);
            bitwise(&p, "fused backward", "dbias", g1 + at, g2 + at, nb);
            check_close(&p, "fused backward", "dbias", g1 + at, gref + at, nb, 1e-3, 2 * dov * (copies + 1), smax,
                        tame);
        }
    }
    int flex = p.d.score_mod || p.d.mask_mod || p.d.block_mask; /* refused by the block API and shards */
    if (use_oracle && p.Sk > 0 && p.Sq > 0 && !p.d.sinks && !p.d.attn_mask && !p.d.attn_bias && !p.nseq && !flex) {
        float *ob = calloc(no(&p) + 1, 4), *gb = calloc(ng, 4);
        attn_status sb = blocks(&p, rint_(0, p.Sk), ob, gb);
        if (sb != ATTN_OK) {
            report(&p, "blocks", "status %d", sb);
        } else {
            size_t a = nq(&p), b = nk(&p), c = nv(&p);
            check_nonfinite(&p, "block forward", "out", ob, no(&p), o.nf_lean_o, o.nf_full_o);
            check_nonfinite(&p, "block backward", "dq", gb, a, o.nf_lean_q, o.nf_full_q);
            check_nonfinite(&p, "block backward", "dk", gb + a, b, o.nf_lean_k, o.nf_full_k);
            check_nonfinite(&p, "block backward", "dv", gb + a + b, c, o.nf_lean_v, o.nf_full_v);
            check_close(&p, "block forward", "out", ob, oref, no(&p), 2e-4, maxabs(p.v, nv(&p)), smax, 0);
            check_close(&p, "block backward", "dq", gb, gref, a, 1e-3, gbase[0], smax, 0);
            check_close(&p, "block backward", "dk", gb + a, gref + a, b, 1e-3, gbase[1], smax, 0);
            check_close(&p, "block backward", "dv", gb + a + b, gref + a + b, c, 1e-3, gbase[2], smax, 0);
        }
        free(ob), free(gb);
    }
    static const attn_dtype sts[CACHE_TYPES] = {ATTN_DTYPE_F32,     ATTN_DTYPE_F16,      ATTN_DTYPE_BF16,
                                                ATTN_DTYPE_Q8_0,    ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_FP8_E5M2,
                                                ATTN_DTYPE_KV_INT8, ATTN_DTYPE_KV_INT4,  ATTN_DTYPE_Q4_0};
    if (p.Sq <= 16) { /* these storage types, contiguous and paged, in turn */
        int t = (int)(cas % CACHE_TYPES);
        cache_path(&p, sts[t], 0, smax);
        cache_path(&p, sts[t], (int64_t)(cas % 3 == 0 ? 16 : 64), smax);
    }
    if (!flex) shard_path(&p, smax); /* a cache split into shards, merged */
    /* caller-owned pages: a storage type of every format, a layout and a page size (1 .. 70) of the case's */
    static const attn_dtype fmts[] = {ATTN_DTYPE_F32,     ATTN_DTYPE_F16,      ATTN_DTYPE_BF16,
                                      ATTN_DTYPE_Q8_0,    ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_FP8_E5M2,
                                      ATTN_DTYPE_KV_INT8, ATTN_DTYPE_KV_INT4,  ATTN_DTYPE_Q4_0};
    pages_path(&p, fmts[(cas / 4) % 9], fmts[(cas / 4 + (cas % 5 == 0) * (1 + cas % 7)) % 9],
               1 + (int64_t)((cas * 7) % 70), cas % 2 ? ATTN_KV_HND : ATTN_KV_NHD,
               smax); /* a fifth: V of another type */
    failed_cases += failures > before;
    if (verbose || failures > before)
        printf("case %llu: B=%lld H=%lld Hkv=%lld Sq=%lld Sk=%lld D=%lld Dv=%lld%s: %s\n", (unsigned long long)cas,
               (long long)p.B, (long long)p.H, (long long)p.Hkv, (long long)p.Sq, (long long)p.Sk, (long long)p.D,
               (long long)p.Dv, p.what, failures > before ? "FAILED" : "ok");
    free(oref), free(o1), free(o2), free(oa), free(gref), free(g1), free(g2);
    if (use_oracle) oracle_free(&o);
    prob_free(&p);
}

/* a seed no run before is likely to have had: the clock's nanoseconds and the process id, mixed, below 2^31
 * (short to type in a reproducer) */
static uint64_t fresh_seed(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    uint64_t x = (uint64_t)t.tv_sec * 1000000007ull ^ (uint64_t)t.tv_nsec ^ (uint64_t)getpid() << 20;
    x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33;
    return x % 2147483647ull + 1;
}

int main(int argc, char **argv) {
    double seconds = 20;
    uint64_t seed = 1, one = UINT64_MAX, cases = UINT64_MAX;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc && !strcmp(argv[i + 1], "random"))
            seed = fresh_seed(), i++, printf("fuzz_paths: fresh seed %llu\n", (unsigned long long)seed);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--case") && i + 1 < argc)
            one = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--cases") && i + 1 < argc)
            cases = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "-v"))
            verbose = 1;
        else if (!strcmp(argv[i], "--tables")) { /* every kernel table's name (scripts/fuzz-long.sh) */
            for (int t = 0; attn_kernel_table_name(t); t++) printf("%s\n", attn_kernel_table_name(t));
            return 0;
        } else {
            fprintf(stderr,
                    "usage: fuzz_paths [--seconds N] [--seed S|random] [--cases N] [--case C] [-v] [--tables]\n");
            return 2;
        }
    }
    if (getenv("ATTN_TEST_SKIP_UNSUPPORTED") && attn_kernel_status() == ATTN_E_UNSUPPORTED) {
        printf("skipped: ATTN_ISA=%s is not runnable on this CPU or build\n", getenv("ATTN_ISA"));
        return 77;
    }
    if (one != UINT64_MAX) {
        run_case(seed, one);
    } else {
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        uint64_t c = 0;
        for (; c < cases; c++) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            if ((double)(t.tv_sec - t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - t0.tv_nsec) > seconds) break;
            run_case(seed, c);
            if (failures >= 20) break;
        }
        clock_gettime(CLOCK_MONOTONIC, &t);
        double el = (double)(t.tv_sec - t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - t0.tv_nsec);
        printf("fuzz_paths: seed %llu, %llu cases in %.1f s (%.0f a second), kernels %s\n", (unsigned long long)seed,
               (unsigned long long)c, el, el > 0 ? (double)c / el : 0.0, attn_kernel_name());
        printf("%llu passed, %d failed\n", (unsigned long long)c - (unsigned long long)failed_cases, failed_cases);
        return failures ? 1 : 0;
    }
    printf("%d passed, %d failed\n", failures ? 0 : 1, failures ? 1 : 0);
    return failures ? 1 : 0;
}
