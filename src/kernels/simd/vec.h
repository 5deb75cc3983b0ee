/* The vector mapping of the SIMD kernels (kernels_simd.c): one block of
 * definitions per instruction set, the kernels written once against it
 * (ggml's simd-mappings.h, Highway's tags). A new width is a new block here.
 *
 *   ATTN_VEC_AVX512   16 float lanes (AVX-512 F/BW/DQ/VL), masks in k registers;
 *                     with ATTN_VEC_SIMDE the same intrinsics through SIMD
 *                     Everywhere's emulation (a test-only table for hosts
 *                     without AVX-512: the same source, run anywhere)
 *   otherwise         8 float lanes (AVX2 + FMA + F16C), masks in vectors
 *
 * Every operation rounds once, as its intrinsic does (the file is built with
 * -ffp-contract=off: an FMA only where vf_fma says so). Names:
 *   vf       VL floats              vi   VL int32 lanes (or VL/2 int64)
 *   vmask    a lane mask            vh   the 256-bit half every reduction folds to
 */
#ifndef ATTN_VEC_H
#define ATTN_VEC_H

#include <stdint.h>
#include <string.h>

#if defined(ATTN_VEC_SIMDE)
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#include <simde/x86/f16c.h>
#else
#include <immintrin.h>
#endif

#define VEC_INLINE static inline __attribute__((always_inline))

#if defined(ATTN_VEC_AVX512)
/* ---- AVX-512: 16 lanes ---------------------------------------------------- */
#define VL 16
typedef __m512 vf;
typedef __m512i vi;
typedef __mmask16 vmask;

VEC_INLINE vf vf_load(const float *p) { return _mm512_loadu_ps(p); }
VEC_INLINE void vf_store(float *p, vf v) { _mm512_storeu_ps(p, v); }
VEC_INLINE vf vf_set1(float x) { return _mm512_set1_ps(x); }
VEC_INLINE vf vf_zero(void) { return _mm512_setzero_ps(); }
VEC_INLINE vf vf_add(vf a, vf b) { return _mm512_add_ps(a, b); }
VEC_INLINE vf vf_sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
VEC_INLINE vf vf_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
VEC_INLINE vf vf_fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }   /* a b + c, one rounding */
VEC_INLINE vf vf_fnma(vf a, vf b, vf c) { return _mm512_fnmadd_ps(a, b, c); } /* c - a b */
VEC_INLINE vf vf_min(vf a, vf b) { return _mm512_min_ps(a, b); }              /* b when either is NaN */
VEC_INLINE vf vf_max(vf a, vf b) { return _mm512_max_ps(a, b); }
VEC_INLINE vf vf_abs(vf a) {
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7fffffff)));
}
/* +-1 with the sign of a */
VEC_INLINE vf vf_copysign1(vf a) {
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(INT32_MIN)),
                                               _mm512_castps_si512(_mm512_set1_ps(1.0f))));
}
VEC_INLINE vf vf_round(vf a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }

#if defined(ATTN_VEC_SIMDE)
/* SIMDe 0.7.4 (Debian 12) lacks a few AVX-512 intrinsics (cvtps_epi32,
 * rcp14, extractf32x8, cvtph_ps, cvtepu16/epi8_epi32, masked loads and
 * stores): the emulated table does those lane by lane on the two 256-bit
 * halves with the AVX2 instruction of the same per-lane semantics (the
 * reciprocal estimate: AVX2's 12 bits instead of 14, refined alike). */
VEC_INLINE __m256 vf_half(vf v, int h) {
    float t[16];
    memcpy(t, &v, sizeof t);
    return _mm256_loadu_ps(t + 8 * h);
}
VEC_INLINE vf vf_join(__m256 lo, __m256 hi) {
    float t[16];
    vf v;
    _mm256_storeu_ps(t, lo), _mm256_storeu_ps(t + 8, hi);
    memcpy(&v, t, sizeof v);
    return v;
}
#else
/* lanes 8 h .. 8 h + 7 (h a constant) */
VEC_INLINE __m256 vf_half(vf v, int h) { return h ? _mm512_extractf32x8_ps(v, 1) : _mm512_castps512_ps256(v); }
/* two 8-lane halves as one vector (low lanes first) */
VEC_INLINE vf vf_join(__m256 lo, __m256 hi) { return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1); }
#endif

/* 2^n for integral n in [-127, 127] (n = -127 gives exactly 0) */
VEC_INLINE vf vf_pow2i(vf n) {
#if defined(ATTN_VEC_SIMDE)
    __m256i e0 = _mm256_add_epi32(_mm256_cvtps_epi32(vf_half(n, 0)), _mm256_set1_epi32(127));
    __m256i e1 = _mm256_add_epi32(_mm256_cvtps_epi32(vf_half(n, 1)), _mm256_set1_epi32(127));
    return vf_join(_mm256_castsi256_ps(_mm256_slli_epi32(e0, 23)), _mm256_castsi256_ps(_mm256_slli_epi32(e1, 23)));
#else
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
#endif
}
VEC_INLINE vf vf_rcp(vf a) {
#if defined(ATTN_VEC_SIMDE)
    return vf_join(_mm256_rcp_ps(vf_half(a, 0)), _mm256_rcp_ps(vf_half(a, 1)));
#else
    return _mm512_rcp14_ps(a);
#endif
}
VEC_INLINE vf vf_iota(void) { return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }

/* lanes j < r (0 <= r <= VL) */
VEC_INLINE vmask vm_tail(int64_t r) { return (vmask)(((uint32_t)1 << r) - 1u); }
#if defined(ATTN_VEC_SIMDE)
VEC_INLINE vf vf_maskz_load(const float *p, vmask m) {
    float t[16] = {0};
    for (int i = 0; i < 16; i++)
        if (m >> i & 1) t[i] = p[i];
    return _mm512_loadu_ps(t);
}
VEC_INLINE void vf_mask_store(float *p, vmask m, vf v) {
    float t[16];
    _mm512_storeu_ps(t, v);
    for (int i = 0; i < 16; i++)
        if (m >> i & 1) p[i] = t[i];
}
#else
VEC_INLINE vf vf_maskz_load(const float *p, vmask m) { return _mm512_maskz_loadu_ps(m, p); }
VEC_INLINE void vf_mask_store(float *p, vmask m, vf v) { _mm512_mask_storeu_ps(p, m, v); }
#endif
VEC_INLINE vf vf_maskz(vmask m, vf v) { return _mm512_maskz_mov_ps(m, v); }
VEC_INLINE vmask vf_lt(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
VEC_INLINE vf vf_blend(vmask m, vf a, vf b) { return _mm512_mask_blend_ps(m, a, b); } /* m ? b : a */

/* reductions fold to 256 bits first; the rest is one sequence for both widths */
typedef __m256 vh;
VEC_INLINE vh vf_fold(vf v) { return _mm256_add_ps(vf_half(v, 0), vf_half(v, 1)); }
VEC_INLINE vh vf_fold_max(vf v) { return _mm256_max_ps(vf_half(v, 0), vf_half(v, 1)); }

/* VL elements of other types, as floats */
#if defined(ATTN_VEC_SIMDE)
VEC_INLINE __m256 bf16x8(const void *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
VEC_INLINE __m256 i8x8(const void *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}
/* 16 IEEE halves as floats */
VEC_INLINE vf vf_cvt_h16(__m256i h) {
    return vf_join(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)));
}
VEC_INLINE vf vf_load_bf16(const void *p) { return vf_join(bf16x8(p), bf16x8((const char *)p + 16)); }
VEC_INLINE vf vf_load_bf16_w(const void *p) { return vf_load_bf16(p); } /* (8 lanes: without an index register) */
VEC_INLINE vf vf_load_i8(const void *p) { return vf_join(i8x8(p), i8x8((const char *)p + 8)); }
#else
VEC_INLINE vf vf_cvt_h16(__m256i h) { return _mm512_cvtph_ps(h); }
VEC_INLINE vf vf_load_bf16(const void *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}
VEC_INLINE vf vf_load_bf16_w(const void *p) { return vf_load_bf16(p); }
VEC_INLINE vf vf_load_i8(const void *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}
#endif
/* 32 bf16 values as floats in two vectors: *lo the even ones (0, 2, .. 30:
 * each 32-bit word's low half shifted up), *hi the odd ones (the high half
 * kept, the low cleared). One 512-bit load and two single-cycle operations
 * (a shift, an AND) for 32 values, where vf_load_bf16 takes a widening (a
 * shuffle-port operation on Intel) and a shift for 16 */
VEC_INLINE void vf_load_bf16x2(const void *p, vf *lo, vf *hi) {
    __m512i x = _mm512_loadu_si512(p);
    *lo = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
    *hi = _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32((int)0xffff0000u)));
}
/* 32 floats a (0..15), b (16..31) into vf_load_bf16x2's order (bf16_split),
 * and back (bf16_merge) */
VEC_INLINE void bf16_split(vf a, vf b, vf *lo, vf *hi) {
    const __m512i ev = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i od = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    *lo = _mm512_permutex2var_ps(a, ev, b), *hi = _mm512_permutex2var_ps(a, od, b);
}
VEC_INLINE void bf16_merge(vf lo, vf hi, vf *a, vf *b) {
    const __m512i i0 = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i i1 = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
    *a = _mm512_permutex2var_ps(lo, i0, hi), *b = _mm512_permutex2var_ps(lo, i1, hi);
}

VEC_INLINE vf vf_load_f16(const void *p) { return vf_cvt_h16(_mm256_loadu_si256((const __m256i *)p)); }

/* MCG31 dropout stream: VL/2 64-bit lanes of x * c mod (2^31 - 1) */
VEC_INLINE vi vi64_load(const uint64_t *p) { return _mm512_loadu_si512((const void *)p); }
VEC_INLINE vi vi64_set1(uint64_t c) { return _mm512_set1_epi64((long long)c); }
VEC_INLINE vi vi_mulmod_m31(vi x, vi c) {
    const vi m = _mm512_set1_epi64(0x7fffffff);
    vi p = _mm512_mul_epu32(x, c);
    vi t = _mm512_add_epi64(_mm512_and_si512(p, m), _mm512_srli_epi64(p, 31));
    return _mm512_mask_sub_epi64(t, _mm512_cmpge_epu64_mask(t, m), t, m);
}
/* even lanes' and odd lanes' x (low 32 bits of 64) back into element order */
VEC_INLINE vi vi_interleave(vi ev, vi od) { return _mm512_or_si512(ev, _mm512_slli_epi64(od, 32)); }
/* t * (x < thr ? scale : 0) per lane (x, thr < 2^31) */
VEC_INLINE vf vf_keep(vf t, vi x, uint32_t thr, vf scale) {
    return _mm512_mul_ps(t, _mm512_maskz_mov_ps(_mm512_cmpgt_epi32_mask(_mm512_set1_epi32((int)thr), x), scale));
}
VEC_INLINE void vi_store(uint32_t *p, vi v) { _mm512_storeu_si512((void *)p, v); }

#else
/* ---- AVX2 + FMA + F16C: 8 lanes ---------------------------------------------- */
#define VL 8
typedef __m256 vf;
typedef __m256i vi;
typedef __m256i vmask;

VEC_INLINE vf vf_load(const float *p) { return _mm256_loadu_ps(p); }
VEC_INLINE void vf_store(float *p, vf v) { _mm256_storeu_ps(p, v); }
VEC_INLINE vf vf_set1(float x) { return _mm256_set1_ps(x); }
VEC_INLINE vf vf_zero(void) { return _mm256_setzero_ps(); }
VEC_INLINE vf vf_add(vf a, vf b) { return _mm256_add_ps(a, b); }
VEC_INLINE vf vf_sub(vf a, vf b) { return _mm256_sub_ps(a, b); }
VEC_INLINE vf vf_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
VEC_INLINE vf vf_fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
VEC_INLINE vf vf_fnma(vf a, vf b, vf c) { return _mm256_fnmadd_ps(a, b, c); }
VEC_INLINE vf vf_min(vf a, vf b) { return _mm256_min_ps(a, b); }
VEC_INLINE vf vf_max(vf a, vf b) { return _mm256_max_ps(a, b); }
VEC_INLINE vf vf_abs(vf a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
VEC_INLINE vf vf_copysign1(vf a) { return _mm256_or_ps(_mm256_and_ps(_mm256_set1_ps(-0.0f), a), _mm256_set1_ps(1.0f)); }
VEC_INLINE vf vf_round(vf a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
VEC_INLINE vf vf_pow2i(vf n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
VEC_INLINE vf vf_rcp(vf a) { return _mm256_rcp_ps(a); }
VEC_INLINE vf vf_iota(void) { return _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7); }

VEC_INLINE vmask vm_tail(int64_t r) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)r), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
VEC_INLINE vf vf_maskz_load(const float *p, vmask m) { return _mm256_maskload_ps(p, m); }
VEC_INLINE void vf_mask_store(float *p, vmask m, vf v) { _mm256_maskstore_ps(p, m, v); }
VEC_INLINE vf vf_maskz(vmask m, vf v) { return _mm256_and_ps(v, _mm256_castsi256_ps(m)); }
VEC_INLINE vmask vf_lt(vf a, vf b) { return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_LT_OQ)); }
VEC_INLINE vf vf_blend(vmask m, vf a, vf b) { return _mm256_blendv_ps(a, b, _mm256_castsi256_ps(m)); }

typedef __m256 vh;
VEC_INLINE vh vf_fold(vf v) { return v; }
VEC_INLINE vh vf_fold_max(vf v) { return v; }

VEC_INLINE vf vf_load_f16(const void *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
/* bf16 to float32: the 8 words loaded into both 128-bit lanes, each moved
 * to the high half of its lane's 32-bit slot by one VPSHUFB (the low half
 * zero). Widening and a 16-bit shift (vf_load_bf16_w) take two operations,
 * the shift on Zen 1's one vector-shift pipe: Q K^T of one row over bf16
 * keys in L1 ran 18.4 -> 14.0 ns a 128-value key (Zen 1). The shuffle's
 * index takes a register: loops that hold all 16 (four-row Q K^T's 12
 * accumulators) keep vf_load_bf16_w, whose shift runs beside their FMAs.
 * Decode's bf16 loops read 16 values at a time through vf_load_bf16x2
 * (below); these two serve 8-value tails and the other paths. */
VEC_INLINE vf vf_load_bf16(const void *p) {
    const __m256i idx = _mm256_setr_epi8(-1, -1, 0, 1, -1, -1, 2, 3, -1, -1, 4, 5, -1, -1, 6, 7, -1, -1, 8, 9, -1, -1,
                                         10, 11, -1, -1, 12, 13, -1, -1, 14, 15);
    return _mm256_castsi256_ps(
        _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p)), idx));
}
VEC_INLINE vf vf_load_bf16_w(const void *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
/* 16 bf16 values as floats in two vectors, in-lane order: *lo values
 * 0..3 and 8..11, *hi 4..7 and 12..15 (bf16_split's order). One 256-bit
 * load and one VPUNPCK a vector against a zero, no shuffle index and no
 * broadcast: decode's Q K^T over bf16 keys ran 0.86x at one row and 0.89x
 * at four, its P V 0.93x at four (Zen 1, kernels alone, q and O kept in
 * the same order; zen1/bf16-unpack-kernels-ab) */
VEC_INLINE void vf_load_bf16x2(const void *p, vf *lo, vf *hi) {
    __m256i x = _mm256_loadu_si256((const __m256i *)p), z = _mm256_setzero_si256();
    __asm__("" : "+x"(x)); /* one load for both (GCC folded it into each unpack: two) */
    *lo = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, x)), *hi = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, x));
}
/* 16 floats a (0..7), b (8..15) into vf_load_bf16x2's order, and back (the same exchange of 128-bit halves) */
VEC_INLINE void bf16_split(vf a, vf b, vf *lo, vf *hi) {
    *lo = _mm256_permute2f128_ps(a, b, 0x20), *hi = _mm256_permute2f128_ps(a, b, 0x31);
}
VEC_INLINE void bf16_merge(vf lo, vf hi, vf *a, vf *b) { bf16_split(lo, hi, a, b); }
VEC_INLINE vf vf_load_i8(const void *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

VEC_INLINE vi vi64_load(const uint64_t *p) { return _mm256_loadu_si256((const __m256i *)(const void *)p); }
VEC_INLINE vi vi64_set1(uint64_t c) { return _mm256_set1_epi64x((long long)c); }
VEC_INLINE vi vi_mulmod_m31(vi x, vi c) {
    const vi m = _mm256_set1_epi64x(0x7fffffff);
    vi p = _mm256_mul_epu32(x, c);
    vi t = _mm256_add_epi64(_mm256_and_si256(p, m), _mm256_srli_epi64(p, 31));
    vi ge = _mm256_cmpgt_epi64(t, _mm256_sub_epi64(m, _mm256_set1_epi64x(1)));
    return _mm256_sub_epi64(t, _mm256_and_si256(ge, m));
}
VEC_INLINE vi vi_interleave(vi ev, vi od) { return _mm256_or_si256(ev, _mm256_slli_epi64(od, 32)); }
VEC_INLINE vf vf_keep(vf t, vi x, uint32_t thr, vf scale) {
    vi keep = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)thr), x);
    return _mm256_mul_ps(t, _mm256_and_ps(_mm256_castsi256_ps(keep), scale));
}
VEC_INLINE void vi_store(uint32_t *p, vi v) { _mm256_storeu_si256((__m256i *)(void *)p, v); }
#endif

/* ---- shared by both widths ------------------------------------------------------ */

/* the sum of 8 lanes, pairwise: (l0 + l4) + (l2 + l6) + ... */
VEC_INLINE float vh_sum(vh v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
VEC_INLINE float vf_sum(vf v) { return vh_sum(vf_fold(v)); }
VEC_INLINE float vf_hmax(vf v) {
    vh m = vf_fold_max(v);
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
/* the eight sums of a0..a7 (each folded to 8 lanes) in one hadd tree:
 * out = (sum a0, sum a1, ..., sum a7) */
VEC_INLINE vh vh_sum8(vh a0, vh a1, vh a2, vh a3, vh a4, vh a5, vh a6, vh a7) {
    __m256 t0 = _mm256_hadd_ps(a0, a1), t1 = _mm256_hadd_ps(a2, a3);
    __m256 t2 = _mm256_hadd_ps(a4, a5), t3 = _mm256_hadd_ps(a6, a7);
    __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}
/* the four sums of a0..a3 */
VEC_INLINE __m128 vh_sum4(vh a0, vh a1, vh a2, vh a3) {
    __m256 w = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    return _mm_add_ps(_mm256_castps256_ps128(w), _mm256_extractf128_ps(w, 1));
}
VEC_INLINE float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

/* 8 lanes rounded to bf16 / f16 and back (nearest even; a NaN stays a quiet
 * NaN), as base/half.h rounds: the math modes' operands */
VEC_INLINE __m256 vh_round_bf16(__m256 x) {
    __m256i u = _mm256_castps_si256(x), hi = _mm256_set1_epi32((int)0xffff0000u);
    __m256i bias =
        _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1)));
    __m256i r = _mm256_and_si256(_mm256_add_epi32(u, bias), hi);
    __m256i qnan = _mm256_or_si256(_mm256_and_si256(u, hi), _mm256_set1_epi32(0x00400000));
    return _mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(qnan), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}
VEC_INLINE __m256 vh_round_f16(__m256 x) { return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT)); }
VEC_INLINE __m256 vh_round_to(__m256 x, int f16) { return f16 ? vh_round_f16(x) : vh_round_bf16(x); }
/* 8 values already rounded to bf16 (their low halves zero) or to f16,
 * stored as 8 16-bit values: bf16 is the high half of each float32 */
VEC_INLINE void vh_store_bf16(void *p, __m256 x) {
    __m256i u = _mm256_srli_epi32(_mm256_castps_si256(x), 16); /* in [0, 65535]: the pack does not saturate */
    _mm_storeu_si128((__m128i *)p, _mm_packus_epi32(_mm256_castsi256_si128(u), _mm256_extracti128_si256(u, 1)));
}
VEC_INLINE void vh_store_f16(void *p, __m256 x) {
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT)); /* exact: x is an f16 value */
}
#if !defined(ATTN_VEC_AVX512)
VEC_INLINE vf vf_round_to(vf v, int f16) { return vh_round_to(v, f16); }
VEC_INLINE void vf_store16(void *p, vf v, int f16) {
    if (f16)
        vh_store_f16(p, v);
    else
        vh_store_bf16(p, v);
}
#else
/* bf16 in 16 lanes, as vh_round_bf16 */
VEC_INLINE vf vf_round_bf16(vf x) {
    __m512i u = _mm512_castps_si512(x), hi = _mm512_set1_epi32((int)0xffff0000u);
    __m512i bias =
        _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1)));
    __m512i r = _mm512_and_si512(_mm512_add_epi32(u, bias), hi);
    __m512i qnan = _mm512_or_si512(_mm512_and_si512(u, hi), _mm512_set1_epi32(0x00400000));
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), r, qnan));
}
#if defined(ATTN_VEC_SIMDE)
VEC_INLINE vf vf_round_to(vf v, int f16) {
    return f16 ? vf_join(vh_round_f16(vf_half(v, 0)), vh_round_f16(vf_half(v, 1))) : vf_round_bf16(v);
}
VEC_INLINE void vf_store16(void *p, vf v, int f16) {
    if (f16)
        vh_store_f16(p, vf_half(v, 0)), vh_store_f16((char *)p + 16, vf_half(v, 1));
    else
        vh_store_bf16(p, vf_half(v, 0)), vh_store_bf16((char *)p + 16, vf_half(v, 1));
}
#else
VEC_INLINE vf vf_round_to(vf v, int f16) {
    return f16 ? _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)) : vf_round_bf16(v);
}
VEC_INLINE void vf_store16(void *p, vf v, int f16) {
    __m256i h = f16 ? _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)
                    : _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(v), 16));
    _mm256_storeu_si256((__m256i *)p, h);
}
#endif
#endif
/* two vectors' values as vf_store16 stores them, a after b: on AVX2 the
 * bf16 pair packed in one shuffle pass and one 32-byte store */
VEC_INLINE void vf_store16_2(void *p, vf a, vf b, int f16) {
#if !defined(ATTN_VEC_AVX512)
    if (!f16) {
        __m256i u = _mm256_packus_epi32(_mm256_srli_epi32(_mm256_castps_si256(a), 16),
                                        _mm256_srli_epi32(_mm256_castps_si256(b), 16));
        _mm256_storeu_si256((__m256i *)p, _mm256_permute4x64_epi64(u, 0xd8)); /* the lanes back in order */
        return;
    }
#endif
    vf_store16(p, a, f16);
    vf_store16((char *)p + 2 * VL, b, f16);
}
/* the first r (< VL) values of v as vf_store16 stores them */
VEC_INLINE void vf_store16_part(void *p, vf v, int f16, int64_t r) {
    uint16_t t[VL];
    vf_store16(t, v, f16);
    memcpy(p, t, (size_t)r * 2);
}

#endif
