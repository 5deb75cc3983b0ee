/* attn bench --pass: the fused softmax pass of the block products alone,
 * what a score costs between its two products: per row of a 128 x 256
 * float32 score tile (in L2), the row max, the online step, and 2^(s - m)
 * rounded to bf16, summed and stored as bf16 (attn_online_row_store), in
 * nanoseconds and core cycles per score. The core clock is measured right
 * after each round by a chain of dependent integer multiplies. */
#include "cli.h"
#include "core/flash_int.h"
#include "core/online.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* this core's clock in GHz over n dependent integer multiplies (3 cycles
 * each on every x86 core since Nehalem and Zen; a chain of immediate adds,
 * one a cycle elsewhere, is folded at rename by Golden Cove: 9 "GHz" on a
 * 2.5 GHz Emerald Rapids); 0 where not measured */
static double core_ghz(uint64_t n) {
#if defined(__x86_64__)
    uint64_t x = 1, one = 1;
    double t0 = cli_now();
    for (uint64_t i = 0; i < n; i += 8)
        __asm__ volatile("imul %1, %0\n\timul %1, %0\n\timul %1, %0\n\timul %1, %0\n\t"
                         "imul %1, %0\n\timul %1, %0\n\timul %1, %0\n\timul %1, %0"
                         : "+r"(x)
                         : "r"(one));
    return 3.0 * (double)n / (cli_now() - t0) * 1e-9;
#else
    (void)n;
    return 0.0;
#endif
}

int cli_bench_pass(double min_time, int json) {
    const attn_kernel_table *kt = attn_kernels();
    enum { BRP = MM_BR, BCP = MM_BC, DVP = 128 };
    float *S = malloc((size_t)(BRP * BCP) * sizeof(float)), *O = calloc((size_t)(BRP * DVP), sizeof(float));
    uint16_t *P = malloc((size_t)(BRP * BCP) * 2);
    if (!S || !O || !P) {
        cli_error("bench --pass: out of memory");
        free(S), free(O), free(P);
        return 1;
    }
    uint32_t s = 7u;
    for (int i = 0; i < BRP * BCP; i++) s = s * 1664525u + 1013904223u, S[i] = (float)(s >> 8) / 16777216.0f * 8.0f;
    /* rounds: the pass (16 tiles) and, right after it, the clock; a round's cycles a score is its time
     * times its clock (this VM's speed drifts: the median of the rounds' products) */
    double ts[64], cy[64], gh[64], sink = 0.0;
    int n = 0;
    double t_end = cli_now() + (min_time > 0 ? min_time : 1.0);
    do { /* each rep: fresh statistics, one max pass and one exponential pass a row */
        double t0 = cli_now();
        for (int rep = 0; rep < 16; rep++)
            for (int r = 0; r < BRP; r++) {
                float m = -INFINITY, l = 0.0f;
                attn_online_row_store(kt, S + r * BCP, BCP, 0.125f * ATTN_LOG2E, &m, &l, O + r * DVP, DVP,
                                      ATTN_DTYPE_BF16, ATTN_DTYPE_BF16, P + r * BCP);
                sink += l;
            }
        ts[n] = (cli_now() - t0) / (16.0 * BRP * BCP);
        gh[n] = core_ghz(4000000);
        cy[n] = ts[n] * 1e9 * gh[n];
        n++;
    } while (n < 64 && (n < 5 || cli_now() < t_end));
    qsort(ts, (size_t)n, sizeof ts[0], cli_cmp_double);
    qsort(cy, (size_t)n, sizeof cy[0], cli_cmp_double);
    qsort(gh, (size_t)n, sizeof gh[0], cli_cmp_double);
    double ghz = gh[n / 2], ns = ts[n / 2] * 1e9, cyc = cy[n / 2];
    if (json)
        printf("{\"op\": \"pass\", \"kernels\": \"%s\", \"lanes\": %d, \"tile\": [%d, %d], \"p_type\": \"bf16\", "
               "\"ns_per_score\": %.4f, \"ns_min\": %.4f, \"ns_max\": %.4f, \"core_ghz\": %.3f, "
               "\"cycles_per_score\": %.3f, \"cycles_min\": %.3f, \"cycles_max\": %.3f, \"rounds\": %d}\n",
               kt->name, kt->lanes, BRP, BCP, ns, ts[0] * 1e9, ts[n - 1] * 1e9, ghz, cyc, cy[0], cy[n - 1], n);
    else
        printf("softmax pass (%s kernels, %d lanes) over a %d x %d tile, P stored as bf16: %.3f ns a score (range "
               "%.3f-%.3f), core at %.2f GHz: %.2f cycles a score (range %.2f-%.2f, %d rounds)%s\n",
               kt->name, kt->lanes, BRP, BCP, ns, ts[0] * 1e9, ts[n - 1] * 1e9, ghz, cyc, cy[0], cy[n - 1], n,
               sink < 0 ? " " : "");
    free(S), free(O), free(P);
    return 0;
}
