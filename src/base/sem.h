/* The semantics of attn_sdpa_desc in one place (attn.h states them): which
 * keys a query row sees and how a score is modified. The reference, the
 * fused tiles, decode and the KV cache all call these; nothing here depends
 * on a path. */
#ifndef ATTN_SEM_H
#define ATTN_SEM_H

#include "attn.h"
#include "storage.h"

#include <math.h>
#include <stdint.h>

/* A descriptor may be one block of a larger problem (q_start, k_start,
 * Sq_total, Sk_total: ring attention). Everything below works in the
 * block's local coordinates, derived from the global rule: local query i is
 * global i + q_start, local key j is global j + k_start. For an ordinary call
 * (all four zero) the global and local coordinates coincide. */
static inline int64_t attn_sem_sq_total(const attn_sdpa_desc *d) { return d->Sq_total > 0 ? d->Sq_total : d->Sq; }
static inline int64_t attn_sem_sk_total(const attn_sdpa_desc *d) { return d->Sk_total > 0 ? d->Sk_total : d->Sk; }
static inline int attn_sem_is_block(const attn_sdpa_desc *d) {
    return d->q_start != 0 || d->k_start != 0 || d->Sq_total != 0 || d->Sk_total != 0;
}

/* keys that exist for sequence b, globally */
static inline int64_t attn_sem_skg(const attn_sdpa_desc *d, int64_t b) {
    if (!d->seqlens_k) return attn_sem_sk_total(d);
    return d->seqlens_k_dtype == ATTN_DTYPE_I32 ? (int64_t)((const int32_t *)d->seqlens_k)[b]
                                                : ((const int64_t *)d->seqlens_k)[b];
}

/* keys of this block that exist for sequence b: local keys [0, sk) */
static inline int64_t attn_sem_sk(const attn_sdpa_desc *d, int64_t b) {
    int64_t n = attn_sem_skg(d, b) - d->k_start;
    return n < 0 ? 0 : n > d->Sk ? d->Sk : n;
}

/* the offset of the query rows on the key axis, local: local key i + off is
 * "now" for local row i (global: key i + q_start + off_g, off_g = 0 for
 * top-left, Sk_b - Sq_total otherwise), given the global key count skg */
static inline int64_t attn_sem_off_skg(const attn_sdpa_desc *d, int64_t skg) {
    int64_t off_g = d->causal == ATTN_CAUSAL_TOP_LEFT ? 0 : skg - attn_sem_sq_total(d);
    return off_g + d->q_start - d->k_start;
}
static inline int64_t attn_sem_off(const attn_sdpa_desc *d, int64_t b) {
    return attn_sem_off_skg(d, attn_sem_skg(d, b));
}

/* the packed sequence holding query row i (varlen: binary search in cu_seqlens_q; an empty sequence never
 * holds a row) */
static inline int64_t attn_sem_varlen_seq(const attn_sdpa_desc *d, int64_t i) {
    int64_t lo = 0, hi = d->nseq - 1; /* the last s with cu_q[s] <= i */
    while (lo < hi) {
        int64_t mid = (lo + hi + 1) / 2;
        if (d->cu_seqlens_q[mid] <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* Keys [*lo, *hi) of query row i of sequence b (skb = attn_sem_sk, off =
 * attn_sem_off) before the padding mask; *hi <= *lo when none. Packed
 * sequences (varlen): the rule of row i's own sequence, in its coordinates,
 * moved to its keys. */
static inline void attn_sem_range(const attn_sdpa_desc *d, int64_t skb, int64_t off, int64_t i, int64_t *lo,
                                  int64_t *hi) {
    int64_t base = 0;
    if (d->cu_seqlens_q) {
        int64_t s = attn_sem_varlen_seq(d, i), q0 = d->cu_seqlens_q[s], k0 = d->cu_seqlens_k[s];
        int64_t sq = d->cu_seqlens_q[s + 1] - q0;
        base = k0, skb = d->cu_seqlens_k[s + 1] - k0;
        off = d->causal == ATTN_CAUSAL_TOP_LEFT ? 0 : skb - sq;
        i -= q0;
    }
    int64_t a = 0, e = skb, now = i + off;
    if (d->causal != ATTN_CAUSAL_NONE && now + 1 < e) e = now + 1;
    if (d->window) {
        if (d->window_left >= 0 && now - d->window_left > a) a = now - d->window_left;
        if (d->window_right >= 0 && now + d->window_right + 1 < e) e = now + d->window_right + 1;
    }
    if (d->attention_chunk > 0) { /* the chunk of "now", in global key positions */
        int64_t C = d->attention_chunk, g = now + d->k_start;
        int64_t cs = (g >= 0 ? g / C : -((-g + C - 1) / C)) * C - d->k_start; /* floor division */
        if (cs > a) a = cs;
        if (cs + C < e) e = cs + C;
    }
    if (d->cu_seqlens_q && a > skb) a = skb; /* an empty range stays within its sequence's keys */
    if (e < a) e = a;
    *lo = a + base, *hi = e + base;
}

/* The end of query row i's segment: the first row after i whose keys start a
 * new run (a packed sequence's first row, or a row whose "now" enters the
 * next chunk), or Sq. Rows of one segment see key ranges that move forward
 * together; rows of two segments see disjoint ones. off: attn_sem_off of
 * any batch row (the segments are a tiling choice, not a rule: a ragged
 * seqlens_k only makes them less apt). */
static inline int64_t attn_sem_segment_end(const attn_sdpa_desc *d, int64_t off, int64_t i) {
    int64_t e = d->Sq, base = 0;
    if (d->cu_seqlens_q) {
        int64_t s = attn_sem_varlen_seq(d, i), q0 = d->cu_seqlens_q[s], sq = d->cu_seqlens_q[s + 1] - q0;
        int64_t skb = d->cu_seqlens_k[s + 1] - d->cu_seqlens_k[s];
        off = d->causal == ATTN_CAUSAL_TOP_LEFT ? 0 : skb - sq;
        e = q0 + sq, base = q0;
    }
    if (d->attention_chunk > 0) { /* the row whose global "now" is the next multiple of C */
        int64_t C = d->attention_chunk, g = i - base + off + d->k_start;
        int64_t next = ((g >= 0 ? g / C : -((-g + C - 1) / C)) + 1) * C; /* floor division */
        int64_t row = next - off - d->k_start + base;
        if (row < e) e = row;
    }
    return e;
}

/* Keys [*lo, *hi) that some row of i0 .. i1 - 1 may see (row ranges are
 * non-decreasing in the row), clamped to the keys that exist. */
static inline void attn_sem_rows_range(const attn_sdpa_desc *d, int64_t skb, int64_t off, int64_t i0, int64_t i1,
                                       int64_t *lo, int64_t *hi) {
    int64_t a, e;
    attn_sem_range(d, skb, off, i0, lo, &e);
    attn_sem_range(d, skb, off, i1 - 1, &a, hi);
    if (*hi > skb) *hi = skb; /* an empty last row may report hi = lo beyond the keys */
    if (*lo > skb) *lo = skb; /* rows past the keys (a window's left edge): an empty range within them */
    if (*hi < *lo) *hi = *lo;
}

/* does the padding mask hide (local) key j of sequence b? */
static inline int attn_sem_padded(const attn_sdpa_desc *d, int64_t b, int64_t j) {
    if (!d->key_mask) return 0;
    int t = d->key_mask[b * d->key_mask_stride_b + d->k_start + j] != 0;
    return d->key_mask_polarity == ATTN_MASK_TRUE_MEANS_MASKED ? t : !t;
}

/* the dense mask's row (b, h, i) from key j (its keys attn_mask_strides[3] apart) */
static inline const uint8_t *attn_sem_dense_row(const attn_sdpa_desc *d, int64_t b, int64_t h, int64_t i, int64_t j) {
    const int64_t *st = d->attn_mask_strides;
    return d->attn_mask + b * st[0] + h * st[1] + i * st[2] + j * st[3];
}

/* does the dense mask let (b, h, i, j) take part? (local rows and keys) */
static inline int attn_sem_dense(const attn_sdpa_desc *d, int64_t b, int64_t h, int64_t i, int64_t j) {
    return !d->attn_mask || *attn_sem_dense_row(d, b, h, i, j) != 0;
}

/* the dense bias's row (b, h, i) from key j (its keys attn_bias_strides[3] apart) */
static inline const float *attn_sem_bias_row(const attn_sdpa_desc *d, int64_t b, int64_t h, int64_t i, int64_t j) {
    const int64_t *st = d->attn_bias_strides;
    return d->attn_bias + b * st[0] + h * st[1] + i * st[2] + j * st[3];
}

/* the dense bias of (b, h, i, j), 0 without one */
static inline float attn_sem_bias(const attn_sdpa_desc *d, int64_t b, int64_t h, int64_t i, int64_t j) {
    return d->attn_bias ? *attn_sem_bias_row(d, b, h, i, j) : 0.0f;
}

/* full visibility of key j to row i of head h (the reference's per-element test) */
static inline int attn_sem_visible(const attn_sdpa_desc *d, int64_t b, int64_t h, int64_t i, int64_t j) {
    int64_t skb = attn_sem_sk(d, b), lo, hi;
    attn_sem_range(d, skb, attn_sem_off(d, b), i, &lo, &hi);
    return j >= lo && j < hi && !attn_sem_padded(d, b, j) && attn_sem_dense(d, b, h, i, j);
}

/* ALiBi bias of (i, j) for a head's slope */
static inline double attn_sem_alibi(float slope, int64_t i, int64_t off, int64_t j) {
    int64_t dist = i + off - j;
    return -(double)slope * (double)(dist < 0 ? -dist : dist);
}

/* key/value heads (Hkv = 0 means H) and query heads per kv head */
static inline int64_t attn_sem_hkv(const attn_sdpa_desc *d) { return d->Hkv > 0 ? d->Hkv : d->H; }
static inline int64_t attn_sem_group(const attn_sdpa_desc *d) {
    return attn_sem_hkv(d) > 0 ? d->H / attn_sem_hkv(d) : 1;
}

/* kv head read by query head h */
static inline int64_t attn_sem_kvh(const attn_sdpa_desc *d, int64_t h) { return h / attn_sem_group(d); }

/* ---- math modes (attn.h, attn_math): which operands of the products are
 * rounded, and to what. kdt / vdt: the storage type of K / V (a view's
 * qkv_dtype as attn_view_dtype gives it, or the cache's). ATTN_DTYPE_F32
 * means "not rounded". ---- */

/* the type q is rounded to for Q K^T: K's 16-bit type; q8_0 blocks (32
 * values, an f16 scale) for the block-scaled caches (q8_0, q4_0), and q8_0
 * blocks sharing one scale for the row (Q8_ROW) for the per-token caches
 * (int8; int4 with D a multiple of 64), when D is a multiple of 32: Q K^T
 * then runs in their integers */
/* fp8 data, whose values bf16 holds exactly: the modes multiply it as bf16 data (q and P rounded to bf16) */
static inline int attn_sem_fp8(attn_dtype t) { return t == ATTN_DTYPE_FP8_E4M3 || t == ATTN_DTYPE_FP8_E5M2; }

static inline attn_dtype attn_sem_q_type(const attn_sdpa_desc *d, attn_dtype kdt) {
    if (d->math == ATTN_MATH_STRICT) return ATTN_DTYPE_F32;
    if (kdt == ATTN_DTYPE_F16 || kdt == ATTN_DTYPE_BF16 || kdt == ATTN_DTYPE_Q8_0) return kdt;
    if (kdt == ATTN_DTYPE_Q4_0 && d->D % 32 == 0) return ATTN_DTYPE_Q8_0;
    if ((kdt == ATTN_DTYPE_KV_INT8 && d->D % 32 == 0) || (kdt == ATTN_DTYPE_KV_INT4 && d->D % 64 == 0))
        return ATTN_DTYPE_Q8_ROW; /* per-token scales on K: one scale on q too, the dot one integer sum */
    if (attn_sem_fp8(kdt)) return ATTN_DTYPE_BF16; /* fp8's own 16-bit products (DATA and BF16) */
    return d->math == ATTN_MATH_BF16 ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F32;
}
/* does q go to the products as int8 blocks (q8_0 blocks, or one scale a row)? */
static inline int attn_sem_q_int8(attn_dtype qt) { return qt == ATTN_DTYPE_Q8_0 || qt == ATTN_DTYPE_Q8_ROW; }

/* the type K and V rows are rounded to as they enter the products (their
 * storage already is their type; only float32 data in BF16 mode rounds) */
static inline attn_dtype attn_sem_kv_type(const attn_sdpa_desc *d, attn_dtype dt) {
    return d->math == ATTN_MATH_BF16 && dt == ATTN_DTYPE_F32 ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F32;
}

/* the data BF16 mode takes into bf16 products: float32 (rounded) and fp8
 * (whose values bf16 holds exactly) */
static inline int attn_sem_bf16_data(attn_dtype t) { return t == ATTN_DTYPE_F32 || attn_sem_fp8(t); }

/* the type the unnormalized P is rounded to for P V (an integer V: F32;
 * decode's rows: attn_sem_p_int16). BF16 mode: bf16 for float32 V and for
 * fp8 V (whose values bf16 holds exactly: both products' operands then
 * bf16, as over fp8 K, whose q attn_sem_q_type rounds to bf16) */
static inline attn_dtype attn_sem_p_type(const attn_sdpa_desc *d, attn_dtype vdt) {
    if (d->math == ATTN_MATH_STRICT) return ATTN_DTYPE_F32;
    if (vdt == ATTN_DTYPE_F16 || vdt == ATTN_DTYPE_BF16) return vdt;
    if (attn_sem_fp8(vdt)) return ATTN_DTYPE_BF16;
    return d->math == ATTN_MATH_BF16 && vdt == ATTN_DTYPE_F32 ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F32;
}

/* does P V take V's int8 / int4 / q4_0 / q8_0 codes in integers: P times the
 * rows' scales (q4_0, q8_0: times each key's block scale, a row of weights a
 * block of 32 columns) rounded to 16 bits per row and block of 64 keys
 * (attn_p16_quantize), the dot an exact int32 sum (Dv a multiple of 16,
 * int4, q4_0 and q8_0 of 32)? Decode below the block products' rows;
 * elsewhere P stays float32 on these caches. */
static inline int attn_sem_p_int16(const attn_sdpa_desc *d, attn_dtype vdt) {
    if (d->math == ATTN_MATH_STRICT) return 0;
    return (vdt == ATTN_DTYPE_KV_INT8 && d->Dv % 16 == 0) ||
           ((vdt == ATTN_DTYPE_KV_INT4 || vdt == ATTN_DTYPE_Q4_0 || vdt == ATTN_DTYPE_Q8_0) && d->Dv % 32 == 0);
}

/* the backward's 16-bit operands (attn.h, attn_sdpa_backward): dO (for
 * dP = dO V^T and dV += P^T dO), the normalized P (dV) and dS = d loss /
 * d(q.k) with the scale and softcap derivative in it (dQ += dS K, dK +=
 * dS^T Q) rounded to V's type as P is; q, k, v as the forward rounds them.
 * dP, Di, P for dS, the gradients' sums: float32 (the reference: float64) */
static inline attn_dtype attn_sem_grad_type(const attn_sdpa_desc *d, attn_dtype vdt) { return attn_sem_p_type(d, vdt); }

/* does the mode round anything for these types (the scale then stays out of
 * the rounded queries: score.h applies it to the float32 scores) */
static inline int attn_sem_rounds(const attn_sdpa_desc *d, attn_dtype kdt, attn_dtype vdt) {
    return attn_sem_q_type(d, kdt) != ATTN_DTYPE_F32 || attn_sem_kv_type(d, kdt) != ATTN_DTYPE_F32 ||
           attn_sem_p_type(d, vdt) != ATTN_DTYPE_F32;
}

#endif
