#define _GNU_SOURCE /* nftw flags, realpath, mkdtemp; before any header */
#include "testutil.h"

#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int tu_failures, tu_checks;
const char *tu_srcdir = ".";
static char scratch[PATH_MAX];

/* Arguments that name existing files become absolute, then the test moves
 * into a fresh directory of its own under $TMPDIR (removed by tu_finish):
 * whatever a test writes never lands in the source tree, wherever it is run. */
void tu_init(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        char *abs = realpath(argv[i], NULL);
        if (abs) argv[i] = abs; /* kept for the life of the test */
    }
    if (argc > 1) tu_srcdir = argv[1];
    /* a test run per kernel table (ctest's per-ISA runs) on a CPU or build
     * without that table is skipped, not failed (ctest: SKIP_RETURN_CODE 77) */
    const char *isa = getenv("ATTN_ISA");
    if (getenv("ATTN_TEST_SKIP_UNSUPPORTED") && attn_kernel_status() == ATTN_E_UNSUPPORTED) {
        printf("skipped: ATTN_ISA=%s is not runnable on this CPU or build\n", isa ? isa : "");
        exit(77);
    }
    /* scratch files under the working directory (ctest runs tests in the
     * build tree) unless TMPDIR says otherwise */
    const char *tmp = getenv("TMPDIR");
    char rel[PATH_MAX];
    snprintf(rel, sizeof rel, "%s/attn-test.XXXXXX", tmp && *tmp ? tmp : ".");
    if (!mkdtemp(rel) || !realpath(rel, scratch) || chdir(scratch) != 0) {
        fprintf(stderr, "cannot create a scratch directory under %s\n", tmp && *tmp ? tmp : ".");
        exit(2);
    }
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
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
    if (scratch[0] && chdir("/") == 0) nftw(scratch, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
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

float *tu_rand_array(size_t n, uint32_t *state, float amp) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; p && i < n; i++) p[i] = amp * tu_frand(state);
    return p;
}

/* the mapping's offset to the data and its length sit in the 16 bytes before the data */
void *tu_guard_alloc(size_t n) {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), h[2], area = (n + sizeof h + pg - 1) / pg * pg;
    unsigned char *m = mmap(NULL, area + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
    if (mprotect(m + area, pg, PROT_NONE)) {
        munmap(m, area + pg);
        return NULL;
    }
    h[0] = area - n, h[1] = area + pg;
    memcpy(m + area - n - sizeof h, h, sizeof h);
    return m + area - n;
}
void tu_guard_free(void *p) {
    size_t h[2];
    if (!p) return;
    memcpy(h, (unsigned char *)p - sizeof h, sizeof h);
    munmap((unsigned char *)p - h[0], h[1]);
}

uint16_t tu_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

char *tu_slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = '\0';
    if (s && len) *len = (size_t)n;
    fclose(f);
    return s;
}

int tu_cpu_avx512(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512dq") || !__builtin_cpu_supports("avx512vl"))
        return 0;
    unsigned lo, hi; /* XCR0: the OS saves opmask and ZMM state */
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 0xe6) == 0xe6;
#else
    return 0;
#endif
}
