#include "testutil.h"

#include <math.h>
#include <string.h>

int tu_failures, tu_checks;
const char *tu_srcdir = ".";

void tu_init(int argc, char **argv) {
    if (argc > 1) tu_srcdir = argv[1];
}

int tu_allclose(const char *label, const float *a, const float *b, size_t n, double rtol, double atol) {
    size_t bad = 0, worst = 0;
    double worst_excess = -1.0;
    for (size_t i = 0; i < n; i++) {
        double x = a[i], y = b[i];
        if ((isnan(x) && isnan(y)) || x == y) continue;
        double tol = atol + rtol * fabs(y);
        double err = fabs(x - y);
        if (!(err <= tol)) {
            bad++;
            double ex = isnan(err) ? INFINITY : err - tol;
            if (ex > worst_excess) worst_excess = ex, worst = i;
        }
    }
    tu_checks++;
    if (bad) {
        tu_failures++;
        fprintf(stderr, "MISMATCH %s: %zu of %zu elements; worst at [%zu]: got %.9g want %.9g\n", label, bad, n, worst,
                (double)a[worst], (double)b[worst]);
        return 0;
    }
    return 1;
}

int tu_equal(const char *label, const float *a, const float *b, size_t n) {
    tu_checks++;
    if (n && memcmp(a, b, n * sizeof(float)) != 0) {
        tu_failures++;
        for (size_t i = 0; i < n; i++)
            if (memcmp(&a[i], &b[i], sizeof(float))) {
                fprintf(stderr, "NOT BITWISE EQUAL %s: first at [%zu]: %.9g vs %.9g\n", label, i, (double)a[i],
                        (double)b[i]);
                break;
            }
        return 0;
    }
    return 1;
}

int tu_finish(const char *name) {
    printf("%s: %d passed, %d failed\n", name, tu_checks - tu_failures, tu_failures);
    return tu_failures ? 1 : 0;
}

float tu_frand(uint32_t *state) {
    *state = *state * 1664525u + 1013904223u;
    return (float)((*state >> 8) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

int tu_irand(uint32_t *state, int lo, int hi) {
    *state = *state * 1664525u + 1013904223u;
    return lo + (int)((*state >> 8) % (uint32_t)(hi - lo + 1));
}
