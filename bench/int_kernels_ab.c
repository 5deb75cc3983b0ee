/* The math modes' integer and fp8 decode kernels of two builds in one
 * process (qk_rows_q8, and pv_rows_i16 for int8 / int4 or pv_rows_x for
 * q8_0; q4_0: pv_rows_i16, the DATA step's kernel; fp8: qk_rows_bf,
 * pv_rows_bf, or qk_rows_x / pv_rows_x on a table without bf16 products;
 * table $IKAB_TABLE, default avx512-bf16),
 * alternating round by round: R query rows against 128 keys in L1, D =
 * 128, ns a key, medians and the median of the per-round ratios (new /
 * old). How docs/PERFORMANCE.md compared the
 * kernels of two commits. Not built by make; each build's static library
 * wrapped in a shared object of its own:
 *   echo '#include "kernels/kernels.h"
 *   __attribute__((visibility("default"))) const attn_kernel_table *
 *   wrap_lookup(const char *n) { return attn_kernels_lookup(n); }' > /tmp/w.c
 *   gcc -O2 -shared -fPIC -Isrc -Iinclude /tmp/w.c -Wl,--whole-archive \
 *       OLD/build/libattn.a -Wl,--no-whole-archive -o /tmp/ib/old.so \
 *       -lopenblas -ldnnl -fopenmp -lm -lstdc++ -lcjson   (and new.so)
 *   gcc -O2 -Isrc -Iinclude bench/int_kernels_ab.c -o /tmp/ikab -ldl -lm
 *   IKAB_TABLE=avx2 /tmp/ikab R T [rounds]   (T: 0 int8, 1 int4, 2 q8_0, 3 q4_0; 4 e4m3, 5 e5m2:
 *   qk_rows_bf and pv_rows_bf, the table's bf16 products; 6 bf16: qk_rows_x,
 *   pv_rows_x; 7 bf16: qk_rows_bf, pv_rows_bf, the math modes' kernels from
 *   four rows). IKAB_Q8_I16=1: q8_0's P V on the new side through
 *   pv_rows_i16 (the old side's pv_rows_x: the two paths compared), 2: on both.
 *   IKAB_PF=1: the integer kernels (qk_rows_q8, pv_rows_i16) also prefetch
 *   rows, 128 rows on in the same buffers (lines already in L1: the
 *   prefetches' own cost, as decode issues them). IKAB_IT: calls a round
 *   (default 5000; longer rounds ride out a noisy VM's short stalls) */
#include "kernels/kernels.h"
#include "base/storage.h"
#include "base/half.h"
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
typedef const attn_kernel_table *(*lk)(const char *);
static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
int main(int argc, char **argv) {
    int R = atoi(argv[1]);
    int ti = atoi(argv[2]);
    int rounds = argc > 3 ? atoi(argv[3]) : 9;
    const attn_kernel_table *kb[2];
    const char *so[2] = {"/tmp/ib/old.so", "/tmp/ib/new.so"};
    for (int i = 0; i < 2; i++) {
        void *h = dlopen(so[i], RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            puts(dlerror());
            return 1;
        }
        kb[i] = ((lk)dlsym(h, "wrap_lookup"))(getenv("IKAB_TABLE") ? getenv("IKAB_TABLE") : "avx512-bf16");
    }
    enum { D = 128, N = 128 };
    /* 64-byte aligned, as a cache's rows are (2 MB aligned buffers): no line-split loads of whole rows */
    static unsigned char K[N * 400] __attribute__((aligned(64))), V[N * 400] __attribute__((aligned(64))), Qq[16 * 200];
    static float Q[16 * D], S[16 * N], O[16 * D];
    for (int i = 0; i < N * 400; i++) K[i] = (unsigned char)rand(), V[i] = (unsigned char)rand();
    for (int i = 1; i < N * 400; i += 2) K[i] = 0x3f, V[i] = 0x3f; /* bf16: finite values (1..2) */
    for (int i = 0; i < 16 * D; i++) Q[i] = (float)(rand() % 100) / 50.0f - 1.0f;
    for (int r = 0; r < 16; r++) attn_q8_quantize_row(Q + r * D, D, Qq + r * attn_q8_row_bytes(D));
    for (int i = 0; i < 16 * N; i++) S[i] = (float)(rand() % 100) / 100.0f;
    attn_dtype ts[8] = {ATTN_DTYPE_KV_INT8,  ATTN_DTYPE_KV_INT4,  ATTN_DTYPE_Q8_0, ATTN_DTYPE_Q4_0,
                        ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_FP8_E5M2, ATTN_DTYPE_BF16, ATTN_DTYPE_BF16};
    if (ti < 0 || ti > 7) return fprintf(stderr, "T: 0..7\n"), 2;
    attn_dtype t = ts[ti];
    static unsigned short Qb[16 * D]; /* fp8: the rows as bf16 (qk_rows_bf), codes of finite values */
    for (int i = 0; i < 16 * D; i++) Qb[i] = (unsigned short)(0x3f00 + (rand() & 0x7f));
    for (int i = 0; ti >= 4 && ti < 6 && i < N * 200; i++) K[i] &= 0x3f, V[i] &= 0x3f;
    size_t bb = t == ATTN_DTYPE_Q4_0 ? ATTN_Q4_BYTES : ATTN_Q8_BYTES; /* block scales: finite (0.5 .. 1) */
    for (size_t o = 0; (ti == 2 || ti == 3) && o + bb <= (size_t)N * attn_storage_bytes(t, D); o += bb)
        K[o] = V[o] = (unsigned char)rand(), K[o + 1] = V[o + 1] = 0x38;
    int q8i = ti == 2 && getenv("IKAB_Q8_I16") ? atoi(getenv("IKAB_Q8_I16")) : 0;
    int pf = getenv("IKAB_PF") ? atoi(getenv("IKAB_PF")) : 0;
    const unsigned char *kpre = pf ? K + 128 * attn_storage_bytes(t, D) : NULL,
                        *vpre = pf ? V + 128 * attn_storage_bytes(t, D) : NULL;
    int64_t ldpre = pf ? D : 0;
    double qk[2][64], pv[2][64];
    for (int round = 0; round < rounds; round++)
        for (int w = 0; w < 2; w++) {
            int it = getenv("IKAB_IT") ? atoi(getenv("IKAB_IT")) : 5000;
            double t0 = now();
            for (int i = 0; i < it; i++)
                if (ti == 6 || (ti >= 4 && !kb[w]->qk_rows_bf))
                    kb[w]->qk_rows_x(Q, R, D, K, D, N, S, N, NULL, 0, 0, t);
                else if (ti >= 4)
                    kb[w]->qk_rows_bf(Qb, D, R, D, K, D, N, S, N, 1.0f, NULL, 0, 0, t);
                else
                    kb[w]->qk_rows_q8(Qq, R, D, K, D, N, S, N, kpre, ldpre, ldpre, t);
            double t1 = now();
            if (ti == 6 || (ti >= 4 && !kb[w]->qk_rows_bf))
                for (int i = 0; i < it; i++) kb[w]->pv_rows_x(S, N, R, V, D, N, D, O, D, NULL, 0, 0, t);
            else if (ti >= 4)
                for (int i = 0; i < it; i++) kb[w]->pv_rows_bf(S, N, R, V, D, N, D, O, D, 1.0f, NULL, 0, 0, t);
            else if (ti < 2 || ti == 3 || q8i > 1 - w)
                for (int i = 0; i < it; i++) kb[w]->pv_rows_i16(S, N, R, V, D, N, D, O, D, vpre, ldpre, ldpre, t);
            else
                for (int i = 0; i < it; i++) kb[w]->pv_rows_x(S, N, R, V, D, N, D, O, D, NULL, 0, 0, t);
            double t2 = now(), k = 1e9 / it / N;
            qk[w][round] = (t1 - t0) * k, pv[w][round] = (t2 - t1) * k;
        }
    /* median of per-round ratios and of times */
    double rq[64], rp[64];
    for (int i = 0; i < rounds; i++) rq[i] = qk[1][i] / qk[0][i], rp[i] = pv[1][i] / pv[0][i];

    qsort(rq, rounds, 8, cmp);
    qsort(rp, rounds, 8, cmp);
    for (int w = 0; w < 2; w++) {
        qsort(qk[w], rounds, 8, cmp);
        qsort(pv[w], rounds, 8, cmp);
    }
    printf(
        "{\"op\": \"int-kernels-ab\", \"kv_dtype\": \"%s\", \"R\": %d, \"qk_old_ns\": %.2f, \"qk_new_ns\": %.2f, "
        "\"qk_ratio\": %.2f, \"qk_ratio_min\": %.2f, \"qk_ratio_max\": %.2f, \"pv_old_ns\": %.2f, \"pv_new_ns\": %.2f, "
        "\"pv_ratio\": %.2f, \"pv_ratio_min\": %.2f, \"pv_ratio_max\": %.2f}\n",
        attn_storage_of(t)->name, R, qk[0][rounds / 2], qk[1][rounds / 2], rq[rounds / 2], rq[0], rq[rounds - 1],
        pv[0][rounds / 2], pv[1][rounds / 2], rp[rounds / 2], rp[0], rp[rounds - 1]);
    return 0;
}
