/* The math modes' integer decode kernels (qk_rows_q8, then pv_rows_i16, as
 * the DATA step calls them a block at a time) over NBLK blocks of 128 keys
 * in turn, D = 128, R query rows, with the kernels' software prefetch of
 * the next block (PF 1) or none (PF 0): how fast the kernels alone run with
 * the rows in L1 (NBLK 1), in L2 / L3 or streamed from memory (NBLK large:
 * 2 x NBLK x 128 rows), against the whole step (`attn bench --decode`).
 * How docs/PERFORMANCE.md measured what the kernels lose to the memory at
 * four rows. Not built by make:
 *   gcc -O2 -Isrc -Iinclude bench/int_kernels_stream.c build/libattn.a \
 *       -o /tmp/iks -lopenblas -ldnnl -fopenmp -lm -lstdc++ -lcjson
 *   /tmp/iks R FMT NBLK [PF]   (FMT 0 int8, 1 int4, 2 q8_0, 3 q4_0; PF the
 *   prefetch distance in blocks, 0 none; the table $IKS_TABLE, default the
 *   host's; IKS_ONLY=1: Q K^T alone, 2: P V alone). Prints the best of 9
 *   rounds, ns a key. */
#include "kernels/kernels.h"
#include "base/storage.h"
#include "base/half.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 4) return fprintf(stderr, "usage: %s R FMT(0..3) NBLK [PF]\n", argv[0]), 2;
    int R = atoi(argv[1]), ti = atoi(argv[2]), nblk = atoi(argv[3]), pf = argc > 4 ? atoi(argv[4]) : 1;
    if (R < 1 || R > 16 || ti < 0 || ti > 3 || nblk < 1) return fprintf(stderr, "R 1..16, FMT 0..3, NBLK >= 1\n"), 2;
    const char *tn = getenv("IKS_TABLE"), *on = getenv("IKS_ONLY");
    int only = on ? atoi(on) : 0; /* 1: Q K^T alone, 2: P V alone */
    const attn_kernel_table *kt = tn ? attn_kernels_lookup(tn) : attn_kernels();
    if (!kt) return fprintf(stderr, "no table %s here\n", tn), 2;
    enum { D = 128, N = 128 };
    const attn_dtype ts[4] = {ATTN_DTYPE_KV_INT8, ATTN_DTYPE_KV_INT4, ATTN_DTYPE_Q8_0, ATTN_DTYPE_Q4_0};
    attn_dtype t = ts[ti];
    size_t rb = attn_storage_bytes(t, D), B = rb * N * (size_t)(nblk + (pf > 0 ? pf : 0)); /* + pf: the last prefetches */
    unsigned char *K = aligned_alloc(4096, (B + 4095) / 4096 * 4096), *V = aligned_alloc(4096, (B + 4095) / 4096 * 4096);
    if (!K || !V) return 1;
    for (size_t i = 0; i < B; i++) K[i] = (unsigned char)rand(), V[i] = (unsigned char)rand();
    size_t bb = t == ATTN_DTYPE_Q4_0 ? ATTN_Q4_BYTES : ATTN_Q8_BYTES; /* block scales: finite */
    for (size_t o = 0; ti >= 2 && o + bb <= B; o += bb) K[o + 1] = V[o + 1] = 0x38;
    static unsigned char Qq[16 * 200];
    static float Q[16 * D], S[16 * N], O[16 * D], P0[16 * N];
    for (int i = 0; i < 16 * D; i++) Q[i] = (float)(rand() % 100) / 50.0f - 1.0f;
    for (int r = 0; r < 16; r++) attn_q8_quantize_row(Q + r * D, D, Qq + r * attn_q8_row_bytes(D));
    for (int i = 0; i < 16 * N; i++) P0[i] = 0.01f * (float)(i % 97);
    double best = 1e30;
    for (int round = 0; round < 9; round++) {
        long nk = 0;
        double t0 = now();
        for (int rep = 0; rep < 200000 / nblk + 1; rep++)
            for (int b = 0; b < nblk; b++) {
                const unsigned char *k = K + (size_t)b * N * rb, *v = V + (size_t)b * N * rb;
                if (only != 2) kt->qk_rows_q8(Qq, R, D, k, D, N, S, N, pf ? k + (size_t)pf * N * rb : NULL, D, D, t);
                memcpy(S, P0, sizeof(float) * (size_t)(R * N)); /* P as the softmax leaves it */
                if (only != 1)
                    kt->pv_rows_i16(S, N, R, v, D, N, D, O, D, pf ? v + (size_t)pf * N * rb : NULL, D, D, t);
                nk += N;
            }
        double e = (now() - t0) * 1e9 / (double)nk;
        best = e < best ? e : best;
    }
    printf("{\"op\": \"int-kernels-stream\", \"kernels\": \"%s\", \"kv_dtype\": \"%s\", \"R\": %d, \"blocks\": %d, "
           "\"mb_each\": %.1f, \"prefetch\": %d, \"only\": %d, \"ns_per_key\": %.2f}\n",
           kt->name, attn_storage_of(t)->name, R, nblk, (double)B / 1048576.0, pf, only, best);
    return O[0] == 1234.5f;
}
