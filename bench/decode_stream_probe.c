/* Decode's memory streams through the library's kernels, alone (no
 * softmax, no driver): K blocks through qk_rows, V blocks through pv_rows,
 * and hand-written variants of the same loops, against a plain sum over the
 * same bytes in the same run. How docs/PERFORMANCE.md ("Decode streams on
 * Zen 3") found that reading several key rows at once, or V in narrow column
 * passes, streams slower than one row after another. Not built by make:
 *   gcc -O3 -mavx2 -mfma -Isrc -Iinclude bench/decode_stream_probe.c build/libattn.a \
 *       -o /tmp/probe -lopenblas -lcjson -ldnnl -fopenmp -lm
 *   OMP_NUM_THREADS=1 /tmp/probe R NB PF MODE
 * R query rows, NB keys a block, PF rows of software prefetch (0: none);
 * MODE 0 qk_rows + pv_rows, 1 qk_rows, 2 pv_rows, 3 one key a step with 4
 * accumulators, 4 the plain sum, 5 / 6 four / two keys a step, 8 four rows
 * one key a step, 9 two keys two accumulators, 10 one key two
 * accumulators, 11 a whole V row a step, 12 / 13 / 14 P V passes of 2 rows
 * x 4 vectors / 4 x 2 / 1 x 8, 17 / 18 / 19 those after prefetching the
 * block. f32 rows, D = 128, 2^19 keys. */
#include "kernels/kernels.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <immintrin.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static float sum(const float*p,size_t n){__m256 a=_mm256_setzero_ps(),b=a,c=a,d=a;for(size_t i=0;i<n;i+=32){a=_mm256_add_ps(a,_mm256_load_ps(p+i));b=_mm256_add_ps(b,_mm256_load_ps(p+i+8));c=_mm256_add_ps(c,_mm256_load_ps(p+i+16));d=_mm256_add_ps(d,_mm256_load_ps(p+i+24));}a=_mm256_add_ps(_mm256_add_ps(a,b),_mm256_add_ps(c,d));float s[8];_mm256_storeu_ps(s,a);return s[0]+s[1]+s[2]+s[3]+s[4]+s[5]+s[6]+s[7];}
static inline __attribute__((always_inline)) void pvp(int R, const int NR, const int NW, int64_t NB, const float *V, const float *S, float *O) {
  for (int r0 = 0; r0 < R; r0 += NR)
    for (int c0 = 0; c0 < 128; c0 += 8 * NW) {
      __m256 o[8]; for (int u=0;u<NR;u++) for (int w=0;w<NW;w++) o[u*NW+w]=_mm256_loadu_ps(O+(r0+u)*128+c0+8*w);
      const float *v = V + c0;
      for (int64_t e = 0; e < NB; e++, v += 128) { __m256 x[8];
        for (int w=0;w<NW;w++) x[w]=_mm256_load_ps(v+8*w);
        for (int u=0;u<NR;u++) { __m256 p=_mm256_broadcast_ss(S+(r0+u)*NB+e); for (int w=0;w<NW;w++) o[u*NW+w]=_mm256_fmadd_ps(p,x[w],o[u*NW+w]); } }
      for (int u=0;u<NR;u++) for (int w=0;w<NW;w++) _mm256_storeu_ps(O+(r0+u)*128+c0+8*w,o[u*NW+w]);
    }
}
int main(int argc, char **argv) {
  int R = atoi(argv[1]), NB = atoi(argv[2]), PF = atoi(argv[3]), mode = atoi(argv[4]); /* mode 0 qk+pv, 1 qk only, 2 pv only */
  const attn_kernel_table *kt = attn_kernels();
  int64_t D = 128, T = 1 << 19; size_t n = (size_t)T * D;
  float *K, *V; posix_memalign((void**)&K, 2<<20, n*4); posix_memalign((void**)&V, 2<<20, n*4);
  madvise(K, n*4, MADV_HUGEPAGE); madvise(V, n*4, MADV_HUGEPAGE);
  for (size_t i = 0; i < n; i++) K[i] = (float)(i % 13) * 0.01f, V[i] = (float)(i % 7) * 0.01f;
  float Q[16*128], S[16*512], O[16*128]; memset(S, 0, sizeof S); for (int i=0;i<16*128;i++) Q[i]=0.001f*(i%5);
  memset(O, 0, sizeof O);
  for (int rep = 0; rep < 4; rep++) {
    double t = now(); float s = sum(K, n) + sum(V, n); double tr = now() - t;
    t = now();
    for (int64_t j = 0; j < T; j += NB) {
      const float *pk = j + PF < T ? K + (j + PF) * D : NULL, *pv = j + PF < T ? V + (j + PF) * D : NULL;
      if (mode == 3) { /* one row at a time, 4 accumulators */
        for (int64_t e = 0; e < NB; e++) { const float *k = K + (j + e) * D; __m256 a0=_mm256_setzero_ps(),a1=a0,a2=a0,a3=a0;
          for (int c = 0; c < 128; c += 32) { a0=_mm256_fmadd_ps(_mm256_loadu_ps(Q+c),_mm256_load_ps(k+c),a0); a1=_mm256_fmadd_ps(_mm256_loadu_ps(Q+c+8),_mm256_load_ps(k+c+8),a1); a2=_mm256_fmadd_ps(_mm256_loadu_ps(Q+c+16),_mm256_load_ps(k+c+16),a2); a3=_mm256_fmadd_ps(_mm256_loadu_ps(Q+c+24),_mm256_load_ps(k+c+24),a3);}
          a0=_mm256_add_ps(_mm256_add_ps(a0,a1),_mm256_add_ps(a2,a3)); float t8[8]; _mm256_storeu_ps(t8,a0); S[e]=t8[0]+t8[1]+t8[2]+t8[3]+t8[4]+t8[5]+t8[6]+t8[7]; }
        continue; }
      if (mode == 5 || mode == 6) { int NK = mode == 5 ? 4 : 2;
        for (int64_t e = 0; e < NB; e += NK) { const float *k = K + (j + e) * D; __m256 a[4]; for (int u=0;u<4;u++) a[u]=_mm256_setzero_ps();
          for (int c = 0; c < 128; c += 8) { __m256 y=_mm256_loadu_ps(Q+c); for (int u=0;u<NK;u++) a[u]=_mm256_fmadd_ps(y,_mm256_load_ps(k+u*D+c),a[u]); }
          float t8[8]; for (int u=0;u<NK;u++){ _mm256_storeu_ps(t8,a[u]); S[e+u]=t8[0]+t8[1]+t8[2]+t8[3]+t8[4]+t8[5]+t8[6]+t8[7]; } }
        continue; }
      if (mode == 8) { /* R=4 rows, 1 key at a time, 2 accumulators per row (chains of 8) */
        for (int64_t e = 0; e < NB; e++) { const float *k = K + (j + e) * D; __m256 a[8]; for (int u=0;u<8;u++) a[u]=_mm256_setzero_ps();
          for (int c = 0; c < 128; c += 16) { __m256 x0=_mm256_load_ps(k+c), x1=_mm256_load_ps(k+c+8);
            for (int u=0;u<4;u++) { a[2*u]=_mm256_fmadd_ps(_mm256_loadu_ps(Q+u*128+c),x0,a[2*u]); a[2*u+1]=_mm256_fmadd_ps(_mm256_loadu_ps(Q+u*128+c+8),x1,a[2*u+1]); } }
          float t8[8]; for (int u=0;u<4;u++){ _mm256_storeu_ps(t8,_mm256_add_ps(a[2*u],a[2*u+1])); S[u*NB+e]=t8[0]+t8[1]+t8[2]+t8[3]+t8[4]+t8[5]+t8[6]+t8[7]; } }
        continue; }
      if (mode == 9) { /* 2 keys, 2 accumulators each */
        for (int64_t e = 0; e < NB; e += 2) { const float *k = K + (j + e) * D; __m256 a0=_mm256_setzero_ps(),a1=a0,b0=a0,b1=a0;
          for (int c = 0; c < 128; c += 16) { __m256 y0=_mm256_loadu_ps(Q+c), y1=_mm256_loadu_ps(Q+c+8);
            a0=_mm256_fmadd_ps(y0,_mm256_load_ps(k+c),a0); a1=_mm256_fmadd_ps(y1,_mm256_load_ps(k+c+8),a1);
            b0=_mm256_fmadd_ps(y0,_mm256_load_ps(k+D+c),b0); b1=_mm256_fmadd_ps(y1,_mm256_load_ps(k+D+c+8),b1);}
          float t8[8]; _mm256_storeu_ps(t8,_mm256_add_ps(a0,a1)); S[e]=t8[0]+t8[1]+t8[2]+t8[3]+t8[4]+t8[5]+t8[6]+t8[7];
          _mm256_storeu_ps(t8,_mm256_add_ps(b0,b1)); S[e+1]=t8[0]+t8[1]+t8[2]+t8[3]+t8[4]+t8[5]+t8[6]+t8[7]; }
        continue; }
      if (mode == 10) { /* 1 key, 2 accumulators */
        for (int64_t e = 0; e < NB; e++) { const float *k = K + (j + e) * D; __m256 a0=_mm256_setzero_ps(),a1=a0;
          for (int c = 0; c < 128; c += 16) { a0=_mm256_fmadd_ps(_mm256_loadu_ps(Q+c),_mm256_load_ps(k+c),a0); a1=_mm256_fmadd_ps(_mm256_loadu_ps(Q+c+8),_mm256_load_ps(k+c+8),a1);}
          float t8[8]; _mm256_storeu_ps(t8,_mm256_add_ps(a0,a1)); S[e]=t8[0]+t8[1]+t8[2]+t8[3]+t8[4]+t8[5]+t8[6]+t8[7]; }
        continue; }
      if (mode == 11) { /* O += p V row by row, 16 accumulators (whole row) */
        __m256 o[16]; for (int w=0;w<16;w++) o[w]=_mm256_loadu_ps(O+8*w);
        for (int64_t e = 0; e < NB; e++) { const float *v = V + (j + e) * D; __m256 p=_mm256_broadcast_ss(S+e);
          for (int w=0;w<16;w++) o[w]=_mm256_fmadd_ps(p,_mm256_load_ps(v+8*w),o[w]); }
        for (int w=0;w<16;w++) _mm256_storeu_ps(O+8*w,o[w]);
        continue; }
      if (mode == 17 || mode == 18 || mode == 19) { const char *pb = (const char *)(V + (j + (mode == 19 ? NB : 0)) * D);
        if (j + NB < T || mode != 19) for (int64_t l = 0; l < NB * D * 4; l += 64) __builtin_prefetch(pb + l, 0, 3);
        if (mode == 18) pvp(4, 1, 8, NB, V + j * D, S, O); else pvp(4, 4, 2, NB, V + j * D, S, O); continue; }
      if (mode == 12) { pvp(4, 2, 4, NB, V + j * D, S, O); continue; }
      if (mode == 13) { pvp(4, 4, 2, NB, V + j * D, S, O); continue; }
      if (mode == 14) { pvp(4, 1, 8, NB, V + j * D, S, O); continue; }
      if (mode == 4) { S[0] += sum(K + j * D, (size_t)NB * D); continue; }
      if (mode != 2) kt->qk_rows(Q, R, D, K + j * D, D, NB, S, NB, PF ? pk : NULL, D, D);
      if (mode != 1) kt->pv_rows(S, NB, R, V + j * D, D, NB, D, O, D, PF ? pv : NULL, D, D);
      if (mode == 2) S[0] += 1e-9f;
    }
    double td = now() - t;
    double bytes = (mode == 0 ? 2.0 : 1.0) * n * 4;
    printf("R=%d NB=%d PF=%d mode %d: %.1f GB/s, read %.1f GB/s, ratio %.3f (%g %g)\n", R, NB, PF, mode, bytes/td/1e9, 2.0*n*4/tr/1e9, (bytes/td)/(2.0*n*4/tr), s, O[5]);
  }
}
