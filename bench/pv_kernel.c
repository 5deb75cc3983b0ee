/* One P V kernel of a kernel table alone, on 128 keys in cache (Dv 128,
 * random codes, block scales 1, P in [0, 1)): ns a key, the best of 5
 * rounds of 20000 calls, as a JSON line. Not built by make; against a
 * build's static library:
 *   cc -O2 -fopenmp -Isrc -Iinclude bench/pv_kernel.c build/libattn.a \
 *      -lopenblas -ldnnl -lm -o /tmp/pv_kernel
 *   /tmp/pv_kernel TABLE R KIND   KIND: i16-q4 (pv_rows_i16 over q4_0),
 *   i16-int4, x-q4 (pv_rows_x over q4_0: float32 FMAs), bf-q4 (pv_rows_bf
 *   over q4_0, where a build has it) */
#include "kernels/kernels.h"

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
    if (argc < 4) return fprintf(stderr, "usage: pv_kernel TABLE R i16-q4|i16-int4|x-q4|bf-q4\n"), 2;
    const attn_kernel_table *kt = attn_kernels_lookup(argv[1]);
    int R = atoi(argv[2]), n = 128, Dv = 128;
    const char *kind = argv[3];
    if (!kt || R < 1 || R > 16) return fprintf(stderr, "pv_kernel: no table %s or R %d outside 1..16\n", argv[1], R), 2;
    attn_dtype t = strcmp(kind, "i16-int4") ? ATTN_DTYPE_Q4_0 : ATTN_DTYPE_KV_INT4;
    size_t vs = attn_storage_bytes(t, Dv);
    unsigned char *V = malloc((size_t)n * vs);
    float *P = malloc(16 * 128 * sizeof(float)), *O = calloc(16 * 136, sizeof(float));
    if (!V || !P || !O) return 1;
    srand(1);
    for (size_t i = 0; i < (size_t)n * vs; i++) V[i] = (unsigned char)rand();
    for (int j = 0; t == ATTN_DTYPE_Q4_0 && j < n; j++)
        for (int b = 0; b < Dv / 32; b++) memcpy(V + (size_t)j * vs + (size_t)b * 18, &(uint16_t){0x3c00}, 2);
    for (int i = 0; i < 16 * 128; i++) P[i] = (float)rand() / (float)RAND_MAX;
    const int it = 20000;
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now();
        for (int k = 0; k < it; k++)
            if (!strcmp(kind, "x-q4"))
                kt->pv_rows_x(P, 128, R, V, Dv, n, Dv, O, 136, NULL, 0, 0, t);
            else if (!strcmp(kind, "bf-q4") && kt->pv_rows_bf)
                kt->pv_rows_bf(P, 128, R, V, Dv, n, Dv, O, 136, 1.0f, NULL, 0, 0, t);
            else
                kt->pv_rows_i16(P, 128, R, V, Dv, n, Dv, O, 136, NULL, 0, 0, t);
        double dt = (now() - t0) / it / n * 1e9;
        best = dt < best ? dt : best;
    }
    printf("{\"op\": \"pv-kernel\", \"kernels\": \"%s\", \"kind\": \"%s\", \"R\": %d, \"keys\": %d, \"Dv\": %d, "
           "\"ns_per_key\": %.3f}\n",
           kt->name, kind, R, n, Dv, best);
    free(V), free(P), free(O);
    return 0;
}
