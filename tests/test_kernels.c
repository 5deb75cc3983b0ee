/* The SIMD kernels' elementwise contract (src/kernels/kernels.h) on every
 * table this CPU can run: exp2_row's accuracy against double exp2, its
 * special values and clamps, the scale path, the returned sum, that the
 * vector lanes and the scalar tail give the same bits, and that the one-pass
 * backward kernels (exp2_dot_row, softmax_grad_row) give the bits of the
 * passes they replace. */
#include "kernels/kernels.h"
#include "testutil.h"

#include <math.h>
#include <string.h>

static double ulps(float got, double want) {
    /* relative error in units of 2^-23 (an ulp of 1) */
    return fabs((double)got - want) / (want * 0x1p-23);
}

static void test_exp2_accuracy(const attn_kernel_table *kt, double max_ulp) {
    enum { N = 1003 }; /* not a multiple of 8: the tail path runs too */
    static float x[N], y[N];
    double worst = 0.0, wt = 0.0;
    for (int rep = 0; rep < 400; rep++) {
        for (int j = 0; j < N; j++) /* t in [-126, 12]: every binade the drivers produce, incl. the lazy max */
            x[j] = -126.0f + 138.0f * (float)((rep * N + j) % 400000) / 400000.0f;
        float m = (rep % 3) ? 0.0f : -3.25f; /* t = x - m, exact here */
        float sum = kt->exp2_row(x, y, N, 1.0f, m);
        double ref_sum = 0.0;
        for (int j = 0; j < N; j++) {
            double t = (double)x[j] - m, want = exp2(t);
            ref_sum += want;
            if (t < -126.0 || t > 127.0) continue;
            double e = ulps(y[j], want);
            if (e > worst) worst = e, wt = t;
        }
        CHECK(fabs(sum - ref_sum) <= 1e-5 * ref_sum, "%s: sum %.9g vs %.9g", kt->name, sum, ref_sum);
    }
    printf("%s: exp2_row worst %.3f ulp\n", kt->name, worst);
    CHECK(worst <= max_ulp, "%s: exp2_row error %.2f ulp at t = %.9g (allowed %.1f)", kt->name, worst, wt, max_ulp);
}

static void test_exp2_special(const attn_kernel_table *kt) {
    float x[16] = {-INFINITY, 0.0f,  1.0f, -1.0f,  11.0f,  -127.0f, -200.0f, 5.5f,
                   3.0f,      -0.5f, 0.5f, 126.0f, -1e30f, 1e30f,   127.0f,  -126.0f};
    float y[16];
    kt->exp2_row(x, y, 16, 1.0f, 0.0f);
    CHECK(y[0] == 0.0f, "%s: 2^-inf = %g", kt->name, y[0]);
    CHECK(y[1] == 1.0f, "%s: 2^0 = %.9g (the row max must give exactly 1)", kt->name, y[1]);
    CHECK(y[2] == 2.0f && y[3] == 0.5f && y[4] == 2048.0f && y[8] == 8.0f, "%s: powers of two %.9g %.9g %.9g %.9g",
          kt->name, y[2], y[3], y[4], y[8]);
    CHECK(y[5] == 0.0f && y[6] == 0.0f && y[12] == 0.0f, "%s: t <= -127 gives 0: %g %g %g", kt->name, y[5], y[6],
          y[12]);
    CHECK(y[14] == 0x1p127f && y[13] == 0x1p127f, "%s: t >= 127 clamps to 2^127: %g %g", kt->name, y[14], y[13]);
    CHECK(y[15] == 0x1p-126f && y[11] == 0x1p126f, "%s: 2^-126 %g, 2^126 %g", kt->name, y[15], y[11]);
    float nan_in[9] = {0, 0, 0, NAN, 0, 0, 0, 0, NAN}, out[9];
    kt->exp2_row(nan_in, out, 9, 1.0f, 0.0f);
    CHECK(isnan(out[3]) && isnan(out[8]) && out[0] == 1.0f, "%s: NaN stays NaN (%g %g)", kt->name, out[3], out[8]);
    /* the scale path rounds the product first: 2^(fl(x * s) - m) */
    float xs[11], ys[11];
    for (int j = 0; j < 11; j++) xs[j] = 0.1f * (float)j - 0.7f;
    kt->exp2_row(xs, ys, 11, ATTN_LOG2E, -0.25f);
    for (int j = 0; j < 11; j++) {
        double want = exp2((double)(xs[j] * ATTN_LOG2E) + 0.25);
        CHECK(ulps(ys[j], want) <= 3.0, "%s: scaled element %d: %.9g vs %.9g", kt->name, j, ys[j], want);
    }
}

/* the same input gives the same bits in a vector lane and in the scalar tail */
static void test_exp2_lanes(const attn_kernel_table *kt) {
    float x[15], y[15];
    int bad = 0;
    for (int i = 0; i < 20000; i++) {
        float t = -127.5f + 140.0f * (float)i / 20000.0f;
        for (int j = 0; j < 15; j++) x[j] = t;
        kt->exp2_row(x, y, 15, 1.0f, 0.0f);
        for (int j = 1; j < 15; j++) bad += memcmp(&y[0], &y[j], sizeof(float)) != 0;
    }
    CHECK(bad == 0, "%s: %d lanes differ from lane 0", kt->name, bad);
}

/* the one-pass backward kernels give the bits of the passes they replace */
static void test_fused_rows(const attn_kernel_table *kt) {
    enum { N = 203 };
    static float x[N], w[N], y[N], p[N], g[N], g2[N];
    uint32_t seed = 7;
    int bad = 0;
    for (int n = 1; n <= N; n += (n < 20 ? 1 : 17)) {
        for (int j = 0; j < n; j++)
            x[j] = 8.0f * tu_frand(&seed) - (j % 5 == 0 ? INFINITY : 0.0f), w[j] = tu_frand(&seed);
        for (int sc = 0; sc < 2; sc++) {
            float scale = sc ? ATTN_LOG2E : 1.0f, m = 3.0f, dot;
            float sum = kt->exp2_dot_row(x, w, n, scale, m, &dot);
            float sum2 = kt->exp2_row(x, y, n, scale, m), dot2 = kt->dot_row(y, w, n);
            bad += memcmp(&sum, &sum2, sizeof sum) != 0 || memcmp(&dot, &dot2, sizeof dot) != 0;
            memcpy(g, w, sizeof w), memcpy(g2, w, sizeof w);
            kt->softmax_grad_row(x, p, g, n, scale, m, 0.37f, 0.11f, -0.125f);
            kt->scale_row(y, n, 0.37f);
            for (int j = 0; j < n; j++) g2[j] = y[j] * (g2[j] - 0.11f) * -0.125f;
            bad += memcmp(p, y, (size_t)n * sizeof(float)) != 0 || memcmp(g, g2, (size_t)n * sizeof(float)) != 0;
        }
    }
    CHECK(bad == 0, "%s: %d one-pass rows differ from the multi-pass form", kt->name, bad);
}

int main(int argc, char **argv) {
    tu_init(argc, argv);
    const attn_kernel_table *tables[2] = {&attn_kernels_generic, attn_kernels()};
    for (int t = 0; t < 2; t++) {
        if (t == 1 && tables[1] == tables[0]) break;
        test_exp2_accuracy(tables[t], 1.5); /* measured 0.99 (2026-11-23) */
        test_exp2_special(tables[t]);
        test_exp2_lanes(tables[t]);
        test_fused_rows(tables[t]);
    }
    return tu_finish("test_kernels");
}
