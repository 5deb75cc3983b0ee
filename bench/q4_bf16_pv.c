/* A prototype, not the library's code: q4_0 P V at four rows, D = 128, 128
 * keys in L1, with P times each key's block scale rounded to bf16 (the
 * weights, a gather of the 16 keys' scales a block) and the codes taken as
 * the bf16 values 128 + c (the code's 4 bits or'ed into 0x4300, exact),
 * two keys' codes interleaved by one VPERMB, VDPBF16PS two keys an
 * instruction, then 136 times the weights' sum taken off (c - 8 = (128 +
 * c) - 136). Checks the result against double math on the same rounded
 * weights and prints the weights' rounding error against float32 ones; ns
 * a key, best of 7, with and without the weights' preparation. Compare
 * with pv_rows_x (bench/int_kernels_ab.c, T 3) in the same phase of the
 * VM. Needs AVX512-BF16 and VBMI. Not built by make:
 *   gcc -O2 -march=native -Isrc -Iinclude bench/q4_bf16_pv.c -o /tmp/q4bf -lm
 *   /tmp/q4bf [1]   (1: the products alone, the weights left from before) */
#include "base/half.h"
#include "base/quant.h"
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
enum { D = 128, NB = D / ATTN_Q4_BLOCK, BB = ATTN_Q4_BYTES, N = 128, R = 4 };
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}
/* n = N keys: W[u][b][k] the bf16 of p[u][k] d[k][b], cs[u][b] the lanes of sum_k W */
static int skip_w;
__attribute__((noinline)) static void pv(const float *P, const uint8_t *V, int n, float *O) {
    static uint16_t W[R][NB][N] __attribute__((aligned(64)));
    __m512 cs[R][NB];
    for (int u = 0; u < R; u++)
        for (int b = 0; b < NB; b++) cs[u][b] = _mm512_setzero_ps();
    const __m512i lo4 = _mm512_set1_epi16(0x000f), bias = _mm512_set1_epi16(0x4300);
    const __m512bh ones = (__m512bh)_mm512_set1_epi16(0x3f80);
    /* word 2i = byte i (k), 2i + 1 = byte 16 + i (k + 1), zero high bytes */
    uint8_t ix[64];
    for (int i = 0; i < 32; i++) ix[2 * i] = (uint8_t)((i & 1) ? 16 + i / 2 : i / 2), ix[2 * i + 1] = 0;
    const __m512i idx = _mm512_loadu_si512(ix);
    const __m512i gofs = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32(NB * BB));
    for (int k = 0; k < n && !skip_w; k += 32)
        for (int b = 0; b < NB; b++) {
            __m512 d[2];
            for (int h = 0; h < 2; h++) {
                __m512i g =
                    _mm512_i32gather_epi32(gofs, (const void *)(V + (size_t)(k + 16 * h) * NB * BB + b * BB), 1);
                d[h] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
            }
            for (int u = 0; u < R; u++) {
                const float *p = P + u * N + k;
                __m512bh w = _mm512_cvtne2ps_pbh(_mm512_mul_ps(_mm512_loadu_ps(p + 16), d[1]),
                                                 _mm512_mul_ps(_mm512_loadu_ps(p), d[0]));
                _mm512_store_si512((void *)&W[u][b][k], (__m512i)w);
                cs[u][b] = _mm512_dpbf16_ps(cs[u][b], w, ones);
            }
        }
    for (int bp = 0; bp < NB; bp += 2) {
        __m512 a[R][2][2];
        for (int u = 0; u < R; u++)
            for (int i = 0; i < 2; i++) a[u][i][0] = a[u][i][1] = _mm512_setzero_ps();
        for (int k = 0; k < n; k += 2) {
            const uint8_t *v0 = V + (size_t)k * NB * BB, *v1 = v0 + NB * BB;
#pragma GCC unroll 2
            for (int i = 0; i < 2; i++) {
                int b = bp + i;
                __m256i c =
                    _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const void *)(v0 + b * BB + 2))),
                                            _mm_loadu_si128((const void *)(v1 + b * BB + 2)), 1);
                __m512i x = _mm512_maskz_permutexvar_epi8(0x5555555555555555ull, idx, _mm512_castsi256_si512(c));
                __m512bh lo = (__m512bh)_mm512_ternarylogic_epi32(x, lo4, bias, 0xea);
                __m512bh hi = (__m512bh)_mm512_or_si512(_mm512_srli_epi16(x, 4), bias);
#pragma GCC unroll 4
                for (int u = 0; u < R; u++) {
                    int wp;
                    memcpy(&wp, &W[u][b][k], 4);
                    __m512bh wv = (__m512bh)_mm512_set1_epi32(wp);
                    a[u][i][0] = _mm512_dpbf16_ps(a[u][i][0], lo, wv);
                    a[u][i][1] = _mm512_dpbf16_ps(a[u][i][1], hi, wv);
                }
            }
        }
        for (int u = 0; u < R; u++) /* c - 8 = (128 + c) - 136 */
            for (int i = 0; i < 2; i++) {
                __m512 c = _mm512_set1_ps(136.0f * _mm512_reduce_add_ps(cs[u][bp + i]));
                _mm512_storeu_ps(O + u * D + 32 * (bp + i), _mm512_sub_ps(a[u][i][0], c));
                _mm512_storeu_ps(O + u * D + 32 * (bp + i) + 16, _mm512_sub_ps(a[u][i][1], c));
            }
    }
}
int main(int argc, char **argv) {
    uint8_t *V = aligned_alloc(64, N * NB * BB + 64);
    float P[R * N], O[R * D];
    srand(1);
    for (int j = 0; j < N; j++)
        for (int b = 0; b < NB; b++) {
            uint8_t *blk = V + (j * NB + b) * BB;
            uint16_t h = attn_f32_to_f16(0.01f + (rand() % 1000) * 1e-4f);
            memcpy(blk, &h, 2);
            for (int i = 0; i < 16; i++) blk[2 + i] = rand() & 255;
        }
    for (int i = 0; i < R * N; i++) P[i] = (rand() % 10000) * 1e-4f;
    pv(P, V, N, O);
    double err = 0, mx = 0, mo = 0;
    for (int u = 0; u < R; u++)
        for (int c = 0; c < D; c++) {
            double s = 0, s0 = 0;
            int b = c / 32, o = c % 32;
            for (int j = 0; j < N; j++) {
                const uint8_t *blk = V + (j * NB + b) * BB;
                uint16_t h;
                memcpy(&h, blk, 2);
                int code = o < 16 ? blk[2 + o] & 15 : blk[2 + o - 16] >> 4;
                double w = attn_bf16_to_f32(attn_f32_to_bf16(P[u * N + j] * attn_f16_to_f32(h)));
                s += w * (code - 8), s0 += (double)P[u * N + j] * attn_f16_to_f32(h) * (code - 8);
            }
            err = fmax(err, fabs(O[u * D + c] - s)), mx = fmax(mx, fabs(s0 - s)), mo = fmax(mo, fabs(s0));
        }
    skip_w = argc > 1 && argv[1][0] == '1';
    double best = 1e9;
    for (int rep = 0; rep < 7; rep++) {
        double t = now();
        for (int i = 0; i < 20000; i++) {
            pv(P, V, N, O);
            __asm__ volatile("" ::: "memory");
        }
        t = (now() - t) / 20000 / N * 1e9;
        best = t < best ? t : best;
    }
    printf("{\"op\": \"q4-bf16-pv-proto\", \"R\": %d, \"D\": %d, \"keys\": %d, \"weights\": %s, \"ns_key\": %.2f, "
           "\"max_err_vs_bf16_weights\": %.3g, \"max_bf16_weights_vs_f32\": %.3g, \"max_abs_out\": %.3g}\n",
           R, D, N, skip_w ? "false" : "true", best, err, mx, mo);
    return 0;
}
