/* Throughput of the 512-bit instructions decode's integer kernels use,
 * alone and in pairs (twelve independent chains a loop step), as
 * instructions a cycle at a given clock: which ones share the pipes
 * (on Zen 5: VPDPBUSD, VFMADD, VDPBF16PS, VPERMT2B/W and VPERMPS two a
 * cycle between them, VPADDD / VPUNPCK four). Not built by make:
 *   gcc -O2 -mavx512f -mavx512bw -mavx512vnni -mavx512vbmi -mavx512bf16 bench/vec_ports.c -o /tmp/vec_ports
 *   /tmp/vec_ports [GHz]   (the clock: the loop of four dependent adds below measures it) */
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
/* twelve chains, ops A and B alternating */
#define STEP(A, B)                                                                                                     \
    a0 = A(a0), a1 = B(a1), a2 = A(a2), a3 = B(a3), a4 = A(a4), a5 = B(a5), a6 = A(a6), a7 = B(a7), a8 = A(a8),        \
    a9 = B(a9), a10 = A(a10), a11 = B(a11)
#define BENCH(name, A, B)                                                                                              \
    {                                                                                                                  \
        __m512i a0 = x, a1 = y, a2 = x, a3 = y, a4 = x, a5 = y, a6 = x, a7 = y, a8 = x, a9 = y, a10 = x, a11 = y;      \
        double t0 = now();                                                                                             \
        for (long it = 0; it < N; it++) {                                                                              \
            STEP(A, B);                                                                                                \
            __asm__(""                                                                                                 \
                    : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7), "+v"(a8),        \
                      "+v"(a9), "+v"(a10), "+v"(a11));                                                                 \
        }                                                                                                              \
        double c = (now() - t0) / (double)N * ghz * 1e9;                                                               \
        sink = _mm512_add_epi32(sink, _mm512_add_epi32(a0, _mm512_add_epi32(a5, a11)));                                \
        printf("%-16s %5.2f a cycle\n", name, 12.0 / c);                                                               \
    }
int main(int argc, char **argv) {
    double ghz = argc > 1 ? atof(argv[1]) : 0.0;
    if (ghz <= 0.0) {
        long v = 1;
        double t0 = now();
        for (long i = 0; i < 1000000000L; i++)
            __asm__ volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0" : "+r"(v));
        ghz = 4.0 / (now() - t0);
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
    BENCH("cvt+unpack", CV, UP);
    BENCH("fma+permps", FM, PS);
    int o[16];
    _mm512_storeu_si512(o, sink);
    return o[0] == 12345 ? 1 : 0;
}
