/* The online softmax step shared by the fused forward (flash.c) and
 * flash-decoding (decode.c), one tile row at a time. */
#ifndef ATTN_ONLINE_H
#define ATTN_ONLINE_H

#include "../kernels/kernels.h"

#include <math.h>
#include <string.h>

/* The rule for non-finite scores (docs/SEMANTICS.md, PyTorch's softmax with
 * _safe_softmax), in every path's running statistics: a row max is NaN when
 * any visible score is NaN (attn_row_max); a row whose max is -inf saw
 * no key, or only -inf scores, and gives 0; otherwise the ordinary formulas
 * run, so a NaN max makes P, l and the output NaN, and a +inf score gives
 * 2^(inf - inf) = NaN. "No key" is decided from the max alone: never from a
 * test such as l > 0 that a NaN also fails. */
static inline float attn_max_nan(float a, float b) { return (a != a || b != b) ? NAN : a > b ? a : b; }

/* A tile row's max for that rule: max_row's answer, or NaN when it says
 * -inf and the row holds a NaN (max_row may drop NaN; when its answer is
 * anything else, a NaN in the row already turns 2^(s - m) into NaN). The
 * scan runs only for rows with nothing finite in the tile. */
static inline float attn_row_max(const attn_kernel_table *kt, const float *s, int64_t n) {
    float m = kt->max_row(s, n);
    if (m == -INFINITY)
        for (int64_t j = 0; j < n; j++)
            if (s[j] != s[j]) return NAN;
    return m;
}

/* How far a row max may outgrow the reference max (base-2 units) before
 * rescaling: P is then at most 2^11, far from float overflow. */
#define ATTN_LAZY_MAX 11.0f

/* Row s[0..n) of raw scores (already masked with -inf) against the running
 * reference max *m, sum *l and output row o[0..no): s becomes
 * P = 2^(escale * s - m), and *l += sum P. Base 2: escale carries log2(e)
 * (or the scores already do: escale = 1) and m is in base-2 units.
 * Lazy rescaling: m only moves when the tile's max exceeds it by more than
 * ATTN_LAZY_MAX; then the running sum and output are rescaled by
 * 2^(m_old - m_new). A row that has seen no key yet gets P = 0. With pt not
 * F32 (a math mode), P is rounded to pt and *l sums the rounded P. */
/* The running statistics' step for a tile row whose max is mt (base 2):
 * 0 when nothing is visible yet (the row's P is 0), else 1 with *m, *l and
 * o (no floats) updated as attn_online_row says */
static inline int attn_online_step(const attn_kernel_table *kt, float mt, float *m, float *l, float *o, int64_t no) {
    if (mt == -INFINITY && *m == -INFINITY) return 0;     /* nothing visible yet: P = 0 */
    if (!(mt <= *m + ATTN_LAZY_MAX) || *m == -INFINITY) { /* a NaN max enters here too */
        float mn = attn_max_nan(mt, *m);
        if (*m != -INFINITY) {
            float alpha = exp2f(*m - mn);
            *l *= alpha;
            kt->scale_row(o, no, alpha);
        }
        *m = mn;
    }
    return 1;
}

static inline void attn_online_row(const attn_kernel_table *kt, float *s, int64_t n, float escale, float *m, float *l,
                                   float *o, int64_t no, attn_dtype pt) {
    if (!attn_online_step(kt, attn_row_max(kt, s, n) * escale, m, l, o, no)) {
        memset(s, 0, (size_t)n * sizeof(float));
        return;
    }
    *l += pt == ATTN_DTYPE_F32 ? kt->exp2_row(s, s, n, escale, *m) : kt->exp2_round_row(s, s, n, escale, *m, pt);
}

/* attn_online_row with P written as st at dst instead of over s (the block
 * products' operand: st pt's 16-bit type, or F32), in the exponential's
 * own pass (exp2_store_row): the same values and the same *l */
static inline void attn_online_row_store(const attn_kernel_table *kt, const float *s, int64_t n, float escale, float *m,
                                         float *l, float *o, int64_t no, attn_dtype pt, attn_dtype st, void *dst) {
    if (!attn_online_step(kt, attn_row_max(kt, s, n) * escale, m, l, o, no)) {
        memset(dst, 0, attn_storage_bytes(st, n));
        return;
    }
    *l += kt->exp2_store_row(s, n, escale, *m, pt, st, dst);
}

/* A row's end: the factor that turns its output accumulator (relative to
 * the running max m, base 2) into out, and its lse in natural units, from m
 * and the running sum l. With an attention sink (sink: the logit in natural
 * units, or NULL) the sink is one more term of the denominator that carries
 * no value: out = O 2^(m - M) / (l 2^(m - M) + 2^(sink log2(e) - M)), M the
 * larger of the two maxima; a row that saw no key (m = -inf) gives out 0 and
 * lse = sink. Without a sink: 1 / l and lse = m + log2(l) (-inf, factor 0,
 * for m = -inf). A NaN m gives NaN. */
static inline float attn_row_finish(float m, float l, const float *sink, float *lse) {
    if (!sink) {
        *lse = m == -INFINITY ? -INFINITY : (m + log2f(l)) * ATTN_LN2;
        return m == -INFINITY ? 0.0f : 1.0f / l;
    }
    if (m == -INFINITY) {
        *lse = *sink;
        return 0.0f;
    }
    float s2 = *sink * ATTN_LOG2E, M = attn_max_nan(m, s2), a = exp2f(m - M), L = l * a + exp2f(s2 - M);
    *lse = (M + log2f(L)) * ATTN_LN2;
    return a / L;
}

#endif
