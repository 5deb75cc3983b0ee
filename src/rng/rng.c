/* PyTorch-compatible random streams: MT19937 (torch's default CPU generator),
 * torch.rand / uniform_, the nn.Linear init, and the two dropout streams
 * (MKL builds: MCG31 seeded by one draw; non-MKL builds: one 64-bit draw per
 * element). See docs/SEMANTICS.md, "Randomness". */
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MT_N 624
#define MT_M 397

void attn_generator_seed(attn_generator *g, uint64_t seed) {
    if (!g) return;
    g->mt[0] = (uint32_t)(seed & 0xffffffffu);
    for (uint32_t j = 1; j < MT_N; j++) g->mt[j] = 1812433253u * (g->mt[j - 1] ^ (g->mt[j - 1] >> 30)) + j;
    g->index = MT_N;
    g->flavor = ATTN_TORCH_MKL;
}

void attn_generator_set_flavor(attn_generator *g, attn_torch_flavor f) {
    if (g && (f == ATTN_TORCH_MKL || f == ATTN_TORCH_NOMKL)) g->flavor = (uint32_t)f;
}

static void mt_twist(attn_generator *g) {
    static const uint32_t mag01[2] = {0u, 0x9908b0dfu};
    uint32_t *mt = g->mt;
    int k;
    for (k = 0; k < MT_N - MT_M; k++) {
        uint32_t y = (mt[k] & 0x80000000u) | (mt[k + 1] & 0x7fffffffu);
        mt[k] = mt[k + MT_M] ^ (y >> 1) ^ mag01[y & 1u];
    }
    for (; k < MT_N - 1; k++) {
        uint32_t y = (mt[k] & 0x80000000u) | (mt[k + 1] & 0x7fffffffu);
        mt[k] = mt[k + (MT_M - MT_N)] ^ (y >> 1) ^ mag01[y & 1u];
    }
    uint32_t y = (mt[MT_N - 1] & 0x80000000u) | (mt[0] & 0x7fffffffu);
    mt[MT_N - 1] = mt[MT_M - 1] ^ (y >> 1) ^ mag01[y & 1u];
    g->index = 0;
}

uint32_t attn_generator_next32(attn_generator *g) {
    if (!g) return 0;
    if (g->index >= MT_N) mt_twist(g);
    uint32_t y = g->mt[g->index++];
    y ^= (y >> 11);
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= (y >> 18);
    return y;
}

/* torch's random64(): two 32-bit draws, the first is the high half. */
static uint64_t next64(attn_generator *g) {
    uint64_t hi = attn_generator_next32(g);
    uint64_t lo = attn_generator_next32(g);
    return (hi << 32) | lo;
}

attn_status attn_uniform(attn_generator *g, float *out, size_t n, double a, double b) {
    if (!g || (!out && n)) return attn_fail(ATTN_E_INVALID, "%s is NULL", g ? "out (n > 0)" : "the generator");
    if (!(a <= b) || !isfinite(a) || !isfinite(b))
        return attn_fail(ATTN_E_INVALID, "from = %g, to = %g: finite, from <= to expected", a, b);
    /* torch: from/to are first rounded to the tensor's dtype, the sample is
     * computed in double (uniform_real_distribution<float> uses a 24-bit draw)
     * and rounded to float on store. */
    double fa = (double)(float)a, fb = (double)(float)b;
    for (size_t i = 0; i < n; i++) {
        uint32_t r = attn_generator_next32(g) & 0xffffffu;
        double u = (double)r * 0x1p-24;
        out[i] = (float)(u * (fb - fa) + fa);
    }
    return ATTN_OK;
}

attn_status attn_rand(attn_generator *g, float *out, size_t n) { return attn_uniform(g, out, n, 0.0, 1.0); }

attn_status attn_linear_init(attn_generator *g, float *weight, float *bias, int64_t in_features, int64_t out_features) {
    if (!g || !weight) return attn_fail(ATTN_E_INVALID, "%s is NULL", g ? "weight" : "the generator");
    if (in_features <= 0 || out_features <= 0)
        return attn_fail(ATTN_E_INVALID, "in_features = %lld, out_features = %lld: each >= 1 expected",
                         (long long)in_features, (long long)out_features);
    size_t n;
    if (attn_mul_size((size_t)in_features, (size_t)out_features, &n))
        return attn_fail(ATTN_E_OVERFLOW, "in_features = %lld, out_features = %lld: the weight's size overflows",
                         (long long)in_features, (long long)out_features);
    /* kaiming_uniform_(w, a=sqrt(5)) with fan_in = in_features, leaky_relu gain,
     * replicated in Python's double arithmetic. */
    double a = sqrt(5.0);
    double gain = sqrt(2.0 / (1.0 + a * a));
    double std = gain / sqrt((double)in_features);
    double bound = sqrt(3.0) * std;
    attn_status st = attn_uniform(g, weight, n, -bound, bound);
    if (st != ATTN_OK || !bias) return st;
    double bb = 1.0 / sqrt((double)in_features);
    return attn_uniform(g, bias, (size_t)out_features, -bb, bb);
}

/* ---- dropout ------------------------------------------------------------ */

#define MCG31_M 2147483647u /* 2^31 - 1 */
#define MCG31_A 1132489760u

static uint32_t mulmod31(uint64_t a, uint64_t b) { return (uint32_t)((a * b) % MCG31_M); }

static uint32_t powmod31(uint32_t base, uint64_t e) {
    uint64_t r = 1, b = base;
    while (e) {
        if (e & 1u) r = (r * b) % MCG31_M;
        b = (b * b) % MCG31_M;
        e >>= 1;
    }
    return (uint32_t)r;
}

attn_status attn_dropout_begin(attn_generator *g, double p, uint64_t n, attn_dropout *out) {
    if (!out) return attn_fail(ATTN_E_INVALID, "out is NULL");
    memset(out, 0, sizeof *out);
    if (!(p >= 0.0 && p <= 1.0)) return attn_fail(ATTN_E_INVALID, "p = %g: a probability in [0, 1] expected", p);
    out->p = p;
    out->n = n;
    /* torch: p == 0 and p == 1 return before any draw (zeros for p == 1). */
    if (p == 0.0 || p == 1.0 || n == 0) {
        out->scale = p == 1.0 ? 0.0f : 1.0f;
        return ATTN_OK;
    }
    if (!g) return attn_fail(ATTN_E_INVALID, "the generator is NULL (p = %g draws a mask)", p);
    out->flavor = g->flavor;
    /* torch: noise.bernoulli_(1 - p).div_(1 - p); the divisor becomes a float */
    out->scale = 1.0f / (float)(1.0 - p);
    if (g->flavor == ATTN_TORCH_NOMKL) {
        if (n > SIZE_MAX) return ATTN_E_OVERFLOW;
        out->keep = malloc((size_t)n);
        if (!out->keep) return ATTN_E_NOMEM;
        /* bernoulli_(1-p): uniform double from a 53-bit draw, keep iff u < 1-p */
        double keep_p = 1.0 - p;
        for (uint64_t i = 0; i < n; i++) {
            double u = (double)(next64(g) & ((1ull << 53) - 1)) * 0x1p-53;
            out->keep[i] = u < keep_p;
        }
    } else {
        uint32_t seed = attn_generator_next32(g) % MCG31_M;
        out->mcg_seed = seed ? seed : 1u;
    }
    return ATTN_OK;
}

/* MKL MCG31: element i uses x_i = x0 * a^i mod m; keep iff x_i/m < 1-p. */
static int mcg_keep_x(uint32_t x, double p) {
    double u = (double)x / (double)MCG31_M;
    return u < 1.0 - p;
}

uint32_t attn_dropout_mcg_at(const attn_dropout *d, uint64_t i) { return mulmod31(d->mcg_seed, powmod31(MCG31_A, i)); }

uint32_t attn_mcg_jump(uint64_t k) { return powmod31(MCG31_A, k); }
uint32_t attn_mcg_mul(uint32_t x, uint32_t y) { return mulmod31(x, y); }

uint32_t attn_dropout_mcg_threshold(const attn_dropout *d) {
    /* the smallest x with x / m >= 1 - p, found around the estimate so that
     * "x < T" is exactly the double comparison mcg_keep_x makes */
    double kp = 1.0 - d->p;
    int64_t t = (int64_t)(kp * (double)MCG31_M);
    if (t < 0) t = 0;
    while (t > 0 && mcg_keep_x((uint32_t)(t - 1), d->p) == 0) t--;
    while (t <= (int64_t)MCG31_M && mcg_keep_x((uint32_t)t, d->p)) t++;
    return (uint32_t)t;
}

int attn_dropout_keep(const attn_dropout *d, uint64_t i) {
    if (!d || d->p == 0.0) return 1;
    if (d->p == 1.0) return 0;
    if (d->keep) return i < d->n ? d->keep[i] : 0;
    return mcg_keep_x(mulmod31(d->mcg_seed, powmod31(MCG31_A, i)), d->p);
}

void attn_dropout_mask_range(const attn_dropout *d, uint64_t start, size_t len, uint8_t *keep) {
    if (!d || d->p == 0.0) {
        memset(keep, 1, len);
        return;
    }
    if (d->p == 1.0) {
        memset(keep, 0, len);
        return;
    }
    if (d->keep) {
        memcpy(keep, d->keep + start, len);
        return;
    }
    uint32_t x = mulmod31(d->mcg_seed, powmod31(MCG31_A, start));
    for (size_t i = 0; i < len; i++) {
        keep[i] = (uint8_t)mcg_keep_x(x, d->p);
        x = mulmod31(x, MCG31_A);
    }
}

attn_status attn_dropout_apply(const attn_dropout *d, const float *in, float *out) {
    if (!d || (d->n && (!in || !out)))
        return attn_fail(ATTN_E_INVALID, "%s is NULL", !d ? "the dropout" : !in ? "in" : "out");
    if (d->n > SIZE_MAX)
        return attn_fail(ATTN_E_OVERFLOW, "n = %llu: past this machine's size_t", (unsigned long long)d->n);
    size_t n = (size_t)d->n;
    if (d->p == 0.0) {
        if (out != in) memmove(out, in, n * sizeof *out);
        return ATTN_OK;
    }
    if (d->p == 1.0 || d->keep) {
        for (size_t i = 0; i < n; i++) out[i] = in[i] * ((d->keep && d->keep[i]) ? d->scale : 0.0f);
        return ATTN_OK;
    }
    uint32_t x = d->mcg_seed;
    for (size_t i = 0; i < n; i++) {
        out[i] = in[i] * (mcg_keep_x(x, d->p) ? d->scale : 0.0f);
        x = mulmod31(x, MCG31_A);
    }
    return ATTN_OK;
}

void attn_dropout_end(attn_dropout *d) {
    if (!d) return;
    free(d->keep);
    d->keep = NULL;
}

attn_status attn_dropout_tensor(attn_generator *g, double p, const float *in, float *out, size_t n) {
    attn_dropout d;
    attn_status st = attn_dropout_begin(g, p, n, &d);
    if (st == ATTN_OK) st = attn_dropout_apply(&d, in, out);
    attn_dropout_end(&d);
    return st;
}
