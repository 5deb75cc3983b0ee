/* Throughput of the 512-bit instructions decode's integer kernels use,
 * alone and in pairs (24 independent chains a loop step: twelve of each
 * kind, enough to hide a five-cycle latency at two a cycle), as
 * instructions a cycle at a given clock: which ones share the pipes (on
 * Zen 5: VPDPBUSD with VFMADD or VDPBF16PS two a cycle between them, with
 * VPERMT2B, VCVTPH2PS or GF2P8AFFINEQB 2.3-2.4, with VPERMPS 2.8; with
 * VCVTDQ2PS, VPADDD, VPUNPCK, VPSHUFD, VPTERNLOGD or VPSRLW four). Not built by make:
 *   gcc -O2 -mavx512f -mavx512bw -mavx512vnni -mavx512vbmi -mavx512bf16 -mgfni bench/vec_ports.c -o /tmp/vec_ports
 *   /tmp/vec_ports [GHz]   (the clock: the chain of dependent multiplies below measures it) */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
#define N 100000000L
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
#define TL(a) _mm512_ternarylogic_epi32(a, x, y, 0xea)
#define SR(a) _mm512_srli_epi16(a, 4)
#define BF(a) _mm512_castps_si512(_mm512_dpbf16_ps(_mm512_castsi512_ps(a), (__m512bh)x, (__m512bh)y))
#define CH(a) _mm512_castps_si512(_mm512_cvtph_ps(_mm512_castsi512_si256(a)))
#define PB1(a) _mm512_maskz_permutexvar_epi8(0x5555555555555555ull, y, a)
#define ZX(a) _mm512_add_epi32(a, _mm512_cvtepu8_epi32(_mm512_castsi512_si128(a)))
#define SD(a) _mm512_shuffle_epi32(a, _MM_PERM_BBBB)
#define GF(a) _mm512_gf2p8affine_epi64_epi8(a, x, 0)
/* 24 chains, ops A and B alternating (twelve of each: enough to hide a 5-cycle latency at two a cycle) */
#define STEP(A, B)                                                                                                     \
    a0 = A(a0), a1 = B(a1), a2 = A(a2), a3 = B(a3), a4 = A(a4), a5 = B(a5), a6 = A(a6), a7 = B(a7), a8 = A(a8),        \
    a9 = B(a9), a10 = A(a10), a11 = B(a11), b0 = A(b0), b1 = B(b1), b2 = A(b2), b3 = B(b3), b4 = A(b4), b5 = B(b5),    \
    b6 = A(b6), b7 = B(b7), b8 = A(b8), b9 = B(b9), b10 = A(b10), b11 = B(b11)
#define BENCH(name, A, B)                                                                                              \
    {                                                                                                                  \
        __m512i a0 = x, a1 = y, a2 = x, a3 = y, a4 = x, a5 = y, a6 = x, a7 = y, a8 = x, a9 = y, a10 = x, a11 = y;      \
        __m512i b0 = x, b1 = y, b2 = x, b3 = y, b4 = x, b5 = y, b6 = x, b7 = y, b8 = x, b9 = y, b10 = x, b11 = y;      \
        double t0 = now();                                                                                             \
        for (long it = 0; it < N; it++) {                                                                              \
            STEP(A, B);                                                                                                \
            __asm__(""                                                                                                 \
                    : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7), "+v"(a8),        \
                      "+v"(a9), "+v"(a10), "+v"(a11));                                                                 \
            __asm__(""                                                                                                 \
                    : "+v"(b0), "+v"(b1), "+v"(b2), "+v"(b3), "+v"(b4), "+v"(b5), "+v"(b6), "+v"(b7), "+v"(b8),        \
                      "+v"(b9), "+v"(b10), "+v"(b11));                                                                 \
        }                                                                                                              \
        double c = (now() - t0) / (double)N * ghz * 1e9;                                                               \
        sink = _mm512_add_epi32(sink, _mm512_add_epi32(a0, _mm512_add_epi32(a5, _mm512_add_epi32(a11, b6))));          \
        printf("%-16s %5.2f a cycle\n", name, 24.0 / c);                                                               \
    }
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
    BENCH("fma+permps", FM, PS);
    int o[16];
    _mm512_storeu_si512(o, sink);
    return o[0] == 12345 ? 1 : 0;
}
