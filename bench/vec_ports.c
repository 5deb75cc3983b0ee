/* Throughput of the vector instructions decode's kernels use, alone and in
 * pairs, as instructions a cycle at a given clock (a pair: both kinds
 * together): which ones share the pipes. Two builds of this one file:
 *
 * 512-bit (24 independent chains a loop step: twelve of each kind, enough to
 * hide a five-cycle latency at two a cycle). On Zen 5: VPDPBUSD with VFMADD
 * or VDPBF16PS two a cycle between them, with VPERMT2B, VCVTPH2PS or
 * GF2P8AFFINEQB 2.3-2.4, with VPERMPS 2.8; with VCVTDQ2PS, VPADDD, VPUNPCK,
 * VPSHUFD, VPTERNLOGD or VPSRLW four. On Zen 4 (256-bit units): VDPBF16PS
 * beside VPADDD, VPSRLW, VPXORD, VPSHUFD or a masked byte move two a cycle
 * between them, beside VPTERNLOGD 1.7, VPUNPCK, VPSHUFB or VSHUFF32X4 1.3,
 * VPERMT2B 1.2, VCVTPH2PS or GF2P8AFFINEQB 1.0-1.1 (zen4/vec-ports).
 * VPDPWSSD (P V's products) on Zen 5, in the mix below (16 products and
 * four of X a step), X's cost in the products' slots: VMULPS 1, VPERMB,
 * VPERMW, GF2P8AFFINEQB, VPSHUFB, VBROADCASTI32X4 m128 0.26-0.39,
 * VCVTPH2PS, VINSERTI32X4 m128 0.14-0.32, VPBROADCASTD m32, VPSRLW, VPANDD,
 * VCVTPS2DQ about 0 (zen5/vec-ports, fifth row).
 *   gcc -O2 -mavx512f -mavx512bw -mavx512vnni -mavx512vbmi -mavx512bf16 -mgfni bench/vec_ports.c -o /tmp/vec_ports
 *
 * 256-bit AVX2 (12 chains, six of each kind: 16 registers). On Zen 1 (two
 * 128-bit halves an instruction): VFMADD, VMULPS, VPSIGNB, VPUNPCK one a
 * cycle, VPMADDUBSW, VPMADDWD, VCVTDQ2PS, VCVTPH2PS and VPSLLW a half,
 * VPHADDD a third; VPMADDUBSW with VPMADDWD 0.5 (one pipe: an integer dot of
 * 8-bit codes, both, costs four of its cycles per 32 products, what FMAs take
 * for 32), with VFMADD, VCVTDQ2PS or VPUNPCK 1 (other pipes); VFMADD with
 * VCVTDQ2PS 0.7, with VPSIGNB 0.76, with VPMOVSXBW 0.74 (shared), with
 * VPUNPCK 1.5 (zen1/vec-ports256).
 *   gcc -O2 -mavx2 -mfma -mf16c bench/vec_ports.c -o /tmp/vec_ports256
 *
 * Not built by make. Run: /tmp/vec_ports [GHz]   (the clock: the chain of
 * dependent multiplies below measures it) */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
#define N 100000000L
#ifdef __AVX512F__
#define DP(a) _mm512_dpbusd_epi32(a, x, y)
#define AD(a) _mm512_add_epi32(a, x)
#define UP(a) _mm512_unpacklo_epi32(a, x)
#define PB(a) _mm512_permutex2var_epi8(a, y, x)
#define PW(a) _mm512_permutex2var_epi16(a, y, x)
#define PS(a) _mm512_castps_si512(_mm512_permutexvar_ps(y, _mm512_castsi512_ps(a)))
#define CV(a) _mm512_castps_si512(_mm512_cvtepi32_ps(a))
#define FM(a)                                                                                                          \
    _mm512_castps_si512(_mm512_fmadd_ps(_mm512_castsi512_ps(a), _mm512_castsi512_ps(x), _mm512_castsi512_ps(y)))
#define SH(a) _mm512_castps_si512(_mm512_shuffle_f32x4(_mm512_castsi512_ps(a), _mm512_castsi512_ps(x), 0x44))
#define PT(a) _mm512_castps_si512(_mm512_permutex2var_ps(_mm512_castsi512_ps(a), y, _mm512_castsi512_ps(x)))
#define TL(a) _mm512_ternarylogic_epi32(a, x, y, 0xea)
#define SR(a) _mm512_srli_epi16(a, 4)
#define BF(a) _mm512_castps_si512(_mm512_dpbf16_ps(_mm512_castsi512_ps(a), (__m512bh)x, (__m512bh)y))
#define CH(a) _mm512_castps_si512(_mm512_cvtph_ps(_mm512_castsi512_si256(a)))
#define PB1(a) _mm512_maskz_permutexvar_epi8(0x5555555555555555ull, y, a)
#define ZX(a) _mm512_add_epi32(a, _mm512_cvtepu8_epi32(_mm512_castsi512_si128(a)))
#define SD(a) _mm512_shuffle_epi32(a, _MM_PERM_BBBB)
#define GF(a) _mm512_gf2p8affine_epi64_epi8(a, x, 0)
#define WS(a) _mm512_dpwssd_epi32(a, x, y)
#define XR(a) _mm512_xor_si512(a, x)
#define XY(a) _mm512_castsi256_si512(_mm256_xor_si256(_mm512_castsi512_si256(a), _mm512_castsi512_si256(x)))
#define SI(a) _mm512_shuffle_i32x4(a, a, 0x55)
#define SW(a) _mm512_add_epi16(a, _mm512_cvtepi8_epi16(_mm512_castsi512_si256(a)))
#define SB(a) _mm512_shuffle_epi8(a, y)
#define MB1(a) _mm512_mask_mov_epi8(a, 0x5555555555555555ull, x)
#define TN(a) _mm512_movm_epi8(_mm512_testn_epi8_mask(a, x))
#define CI(a) _mm512_cvtps_epi32(_mm512_castsi512_ps(a))
/* VPDPWSSD with its weight pair broadcast from memory in the same step (VPBROADCASTD zmm, m32: P V's weights) */
static int bmem[16] __attribute__((aligned(64))) = {0x00030005};
static inline __m512i ws_bc(__m512i a, __m512i x) {
    __m512i w;
    __asm__ volatile("vpbroadcastd %1, %0" : "=v"(w) : "m"(bmem[0]));
    return _mm512_dpwssd_epi32(a, x, w);
}
#define WB(a) ws_bc(a, x)
#define PW1(a) _mm512_permutexvar_epi16(y, a)
#define IN(a) _mm512_inserti32x4(a, _mm512_castsi512_si128(x), 1)
#define OR(a) _mm512_or_si512(a, x)
#define VT __m512i
#define VADD _mm512_add_epi32
#define NCH 24
#else
#define MB(a) _mm256_maddubs_epi16(a, y)
#define MW(a) _mm256_madd_epi16(a, y)
#define SG(a) _mm256_sign_epi8(a, y)
#define AD(a) _mm256_add_epi32(a, x)
#define UP(a) _mm256_unpacklo_epi32(a, x)
#define HD(a) _mm256_hadd_epi32(a, x)
#define CV(a) _mm256_castps_si256(_mm256_cvtepi32_ps(a))
#define FM(a)                                                                                                          \
    _mm256_castps_si256(_mm256_fmadd_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(x), _mm256_castsi256_ps(y)))
#define ML(a) _mm256_castps_si256(_mm256_mul_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(x)))
#define CH(a) _mm256_castps_si256(_mm256_cvtph_ps(_mm256_castsi256_si128(a)))
#define SX(a) _mm256_add_epi16(a, _mm256_cvtepi8_epi16(_mm256_castsi256_si128(a)))
#define SL(a) _mm256_slli_epi16(a, 7)
#define AN(a) _mm256_and_si256(a, x)
#define VT __m256i
#define VADD _mm256_add_epi32
#define NCH 12
#endif
/* NCH chains, ops A and B alternating (512-bit: 24, twelve of each, enough to hide a 5-cycle latency at two a
 * cycle; 256-bit: 12, the b chains unused, 16 registers) */
#if NCH == 24
#define STEP_B(A, B)                                                                                                   \
    b0 = A(b0), b1 = B(b1), b2 = A(b2), b3 = B(b3), b4 = A(b4), b5 = B(b5), b6 = A(b6), b7 = B(b7), b8 = A(b8),        \
    b9 = B(b9), b10 = A(b10), b11 = B(b11);                                                                            \
    __asm__(""                                                                                                         \
            : "+v"(b0), "+v"(b1), "+v"(b2), "+v"(b3), "+v"(b4), "+v"(b5), "+v"(b6), "+v"(b7), "+v"(b8), "+v"(b9),      \
              "+v"(b10), "+v"(b11))
#define DECL_B VT b0 = x, b1 = y, b2 = x, b3 = y, b4 = x, b5 = y, b6 = x, b7 = y, b8 = x, b9 = y, b10 = x, b11 = y
#define B6 b6
#else
#define STEP_B(A, B) (void)0
#define DECL_B (void)0
#define B6 a6
#endif
#define BENCH(name, A, B)                                                                                              \
    {                                                                                                                  \
        VT a0 = x, a1 = y, a2 = x, a3 = y, a4 = x, a5 = y, a6 = x, a7 = y, a8 = x, a9 = y, a10 = x, a11 = y;           \
        DECL_B;                                                                                                        \
        double t0 = now();                                                                                             \
        for (long it = 0; it < N; it++) {                                                                              \
            a0 = A(a0), a1 = B(a1), a2 = A(a2), a3 = B(a3), a4 = A(a4), a5 = B(a5), a6 = A(a6), a7 = B(a7),            \
            a8 = A(a8), a9 = B(a9), a10 = A(a10), a11 = B(a11);                                                        \
            __asm__(""                                                                                                 \
                    : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7), "+v"(a8),        \
                      "+v"(a9), "+v"(a10), "+v"(a11));                                                                 \
            STEP_B(A, B);                                                                                              \
        }                                                                                                              \
        double c = (now() - t0) / (double)N * ghz * 1e9;                                                               \
        sink = VADD(sink, VADD(a0, VADD(a5, VADD(a11, B6))));                                                          \
        printf("%-16s %5.2f a cycle\n", name, NCH / c);                                                                \
    }
#ifdef __AVX512F__
/* The mix: 16 independent VPDPWSSD a loop step (accumulators zmm0-15) and four independent instructions X (into
 * zmm20-23, from zmm18 / zmm19, memory at mix_mem, mask k1), as decode's P V mixes them: X's cost as the cycles
 * it adds to the 16 products, in their pipes' slots (two a cycle; 1: X takes a product's place). The pairs above
 * alternate the two kinds one for one, with twelve dependent chains of each: some kinds (VPERMB, VCVTPH2PS) read
 * as sharing the products' pipes there and not in this mix */
static unsigned char mix_mem[256] __attribute__((aligned(64)));
#define MIX_D(a) "vpdpwssd %%zmm16, %%zmm17, %%zmm" #a "\n\t"
#define MIX_D16                                                                                                        \
    MIX_D(0)                                                                                                           \
    MIX_D(1)                                                                                                           \
    MIX_D(2)                                                                                                           \
    MIX_D(3)                                                                                                           \
    MIX_D(4) MIX_D(5) MIX_D(6) MIX_D(7) MIX_D(8) MIX_D(9) MIX_D(10) MIX_D(11) MIX_D(12) MIX_D(13) MIX_D(14) MIX_D(15)
#define MIX_CLOBBER                                                                                                    \
    "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12",         \
        "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23"
/* ns: the loop step's time in ns */
#define MIX_LOOP(ns, body)                                                                                             \
    do {                                                                                                               \
        double t0 = now();                                                                                             \
        for (long it = 0; it < N; it++) __asm__ volatile(body : : "r"(mix_mem) : MIX_CLOBBER);                         \
        ns = (now() - t0) / (double)N * 1e9;                                                                           \
    } while (0)
/* the X kinds, X_k(r) writing zmm r */
#define X_vpermb(r) "vpermb %%zmm18, %%zmm19, %%zmm" #r "%{%%k1%}%{z%}\n\t"
#define X_vpshufb(r) "vpshufb %%zmm18, %%zmm19, %%zmm" #r "\n\t"
#define X_vpermw(r) "vpermw %%zmm18, %%zmm19, %%zmm" #r "\n\t"
#define X_vcvtph2ps(r) "vcvtph2ps %%ymm18, %%zmm" #r "\n\t"
#define X_vcvtps2dq(r) "vcvtps2dq %%zmm18, %%zmm" #r "\n\t"
#define X_vmulps(r) "vmulps %%zmm18, %%zmm19, %%zmm" #r "\n\t"
#define X_vpsrlw(r) "vpsrlw $4, %%zmm18, %%zmm" #r "\n\t"
#define X_vpandd(r) "vpandd %%zmm18, %%zmm19, %%zmm" #r "\n\t"
#define X_vgf2p8affineqb(r) "vgf2p8affineqb $0, %%zmm18, %%zmm19, %%zmm" #r "\n\t"
#define X_vpbroadcastd_m32(r) "vpbroadcastd (%0), %%zmm" #r "\n\t"
#define X_vbroadcasti32x4_m128(r) "vbroadcasti32x4 16(%0), %%zmm" #r "\n\t"
#define X_vinserti32x4_m128(r) "vinserti32x4 $1, 32(%0), %%ymm18, %%ymm" #r "\n\t"
/* kind k four times (zmm20-23) beside the 16 products: its slots against base, the products alone */
#define MIX4(k)                                                                                                        \
    {                                                                                                                  \
        double ns;                                                                                                     \
        MIX_LOOP(ns, X_##k(20) X_##k(21) X_##k(22) X_##k(23) MIX_D16);                                                 \
        printf("%-16s %5.2f slots\n", #k, (ns - base) * ghz * 2.0 / 4.0);                                              \
    }
#endif
int main(int argc, char **argv) {
    double ghz = argc > 1 ? atof(argv[1]) : 0.0;
    if (ghz <= 0.0) {
        long v = 1, one = 1; /* IMUL: 3 cycles of latency (Golden Cove folds chains of immediate adds) */
        double t0 = now();
        for (long i = 0; i < 250000000L; i++)
            __asm__ volatile("imul %1, %0\n\timul %1, %0\n\timul %1, %0\n\timul %1, %0" : "+r"(v) : "r"(one));
        ghz = 3.0 / (now() - t0);
    }
    printf("clock %.2f GHz\n", ghz);
#ifdef __AVX512F__
    __m512i x = _mm512_set1_epi8(3), y = _mm512_set1_epi8(5), sink = x;
    BENCH("vpdpbusd", DP, DP);
    BENCH("vpaddd", AD, AD);
    BENCH("vpunpckldq", UP, UP);
    BENCH("vpermt2b", PB, PB);
    BENCH("vpermt2w", PW, PW);
    BENCH("vpermps", PS, PS);
    BENCH("vcvtdq2ps", CV, CV);
    BENCH("vfmadd", FM, FM);
    BENCH("vshuff32x4", SH, SH);
    BENCH("vpternlogd", TL, TL);
    BENCH("vpsrlw", SR, SR);
    BENCH("vdpbf16ps", BF, BF);
    BENCH("vcvtph2ps", CH, CH);
    BENCH("vpermb (masked)", PB1, PB1);
    BENCH("vpmovzxbd+add", ZX, ZX);
    BENCH("vpshufd", SD, SD);
    BENCH("vgf2p8affineqb", GF, GF);
    BENCH("dpbusd+cvt", DP, CV);
    BENCH("dpbusd+permt2b", DP, PB);
    BENCH("dpbusd+fma", DP, FM);
    BENCH("dpbusd+unpack", DP, UP);
    BENCH("dpbusd+add", DP, AD);
    BENCH("dpbusd+permps", DP, PS);
    BENCH("dpbusd+ternlog", DP, TL);
    BENCH("dpbusd+srlw", DP, SR);
    BENCH("dpbusd+dpbf16", DP, BF);
    BENCH("dpbusd+cvtph", DP, CH);
    BENCH("dpbusd+permb", DP, PB1);
    BENCH("dpbusd+movzx+add", DP, ZX);
    BENCH("dpbusd+pshufd", DP, SD);
    BENCH("dpbusd+gf2p8aff", DP, GF);
    BENCH("cvt+unpack", CV, UP);
    BENCH("vpermt2ps", PT, PT);
    BENCH("dpbf16+permt2ps", BF, PT);
    BENCH("dpbf16+shuff32x4", BF, SH);
    BENCH("dpbf16+permt2b", BF, PB);
    BENCH("dpbf16+unpack", BF, UP);
    BENCH("fma+permps", FM, PS);
    BENCH("vpdpwssd", WS, WS);
    BENCH("vpxord", XR, XR);
    BENCH("vpxor ymm", XY, XY);
    BENCH("dpbusd+xor", DP, XR);
    BENCH("dpbusd+xor ymm", DP, XY);
    BENCH("dpbusd+shufi32x4", DP, SI);
    BENCH("dpwssd+movsxbw+add", WS, SW);
    BENCH("vpshufb", SB, SB);
    BENCH("dpbf16+pshufb", BF, SB);
    BENCH("dpbf16+add", BF, AD);
    BENCH("dpbf16+srlw", BF, SR);
    BENCH("dpbf16+ternlog", BF, TL);
    BENCH("dpbf16+xor", BF, XR);
    BENCH("dpbf16+pshufd", BF, SD);
    BENCH("dpbf16+gf2p8aff", BF, GF);
    BENCH("dpbf16+cvtph", BF, CH);
    BENCH("dpbf16+blendb", BF, MB1);
    BENCH("dpbf16+testnmb+movm", BF, TN);
    BENCH("dpbf16+xor ymm", BF, XY);
    BENCH("dpwssd+bcast m32", WS, WB);
    BENCH("dpwssd+fma", WS, FM);
    BENCH("vcvtps2dq", CI, CI);
    BENCH("dpwssd+cvtps2dq", WS, CI);
    BENCH("dpwssd+cvtph", WS, CH);
    BENCH("dpwssd+permb", WS, PB1);
    BENCH("dpwssd+pshufb", WS, SB);
    BENCH("dpwssd+permw", WS, PW1);
    BENCH("dpwssd+inserti32x4", WS, IN);
    BENCH("dpwssd+or", WS, OR);
    BENCH("dpwssd+srlw", WS, SR);
    {
        double base;
        __asm__ volatile("kxnorq %%k1, %%k1, %%k1"
                         :
                         :
                         : "k1"); /* VPERMB's mask (its value only picks the zeroed bytes) */
        MIX_LOOP(base, MIX_D16);
        printf("mix: 16 vpdpwssd %.2f cycles; four X beside them, X's slots\n", base * ghz);
        MIX4(vpermb);
        MIX4(vpshufb);
        MIX4(vpermw);
        MIX4(vcvtph2ps);
        MIX4(vcvtps2dq);
        MIX4(vmulps);
        MIX4(vpsrlw);
        MIX4(vpandd);
        MIX4(vgf2p8affineqb);
        MIX4(vpbroadcastd_m32);
        MIX4(vbroadcasti32x4_m128);
        MIX4(vinserti32x4_m128);
    }
#else
    __m256i x = _mm256_set1_epi8(3), y = _mm256_set1_epi8(5), sink = x;
    BENCH("vpmaddubsw", MB, MB);
    BENCH("vpmaddwd", MW, MW);
    BENCH("vpsignb", SG, SG);
    BENCH("vpaddd", AD, AD);
    BENCH("vpunpckldq", UP, UP);
    BENCH("vphaddd", HD, HD);
    BENCH("vcvtdq2ps", CV, CV);
    BENCH("vfmadd", FM, FM);
    BENCH("vmulps", ML, ML);
    BENCH("vcvtph2ps", CH, CH);
    BENCH("vpmovsxbw+add", SX, SX);
    BENCH("vpsllw", SL, SL);
    BENCH("vpand", AN, AN);
    BENCH("maddubs+maddwd", MB, MW);
    BENCH("maddubs+fma", MB, FM);
    BENCH("maddubs+sign", MB, SG);
    BENCH("maddubs+cvt", MB, CV);
    BENCH("maddubs+unpack", MB, UP);
    BENCH("maddubs+hadd", MB, HD);
    BENCH("fma+cvt", FM, CV);
    BENCH("fma+sign", FM, SG);
    BENCH("fma+cvtph", FM, CH);
    BENCH("fma+sllw", FM, SL);
    BENCH("fma+movsx", FM, SX);
    BENCH("fma+unpack", FM, UP);
    BENCH("fma+add", FM, AD);
#endif
    int o[16];
    memcpy(o, &sink, sizeof sink);
    return o[0] == 12345 ? 1 : 0;
}
