/* Minimal test helpers: CHECK macros with labels, float comparison. */
#ifndef ATTN_TESTUTIL_H
#define ATTN_TESTUTIL_H

#include "attn.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

extern int tu_failures, tu_checks;
extern const char *tu_srcdir; /* tests/ source directory (argv[1]) */

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        tu_checks++;                                                                                                   \
        if (!(cond)) {                                                                                                 \
            tu_failures++;                                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);                                   \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fputc('\n', stderr);                                                                                       \
        }                                                                                                              \
    } while (0)

#define CHECK_OK(expr) CHECK((expr) == ATTN_OK, "%s", attn_status_string(expr))

/* Compare arrays with |a-b| <= atol + rtol*|b|; prints the worst mismatch
 * with the label. NaN matches NaN. Returns 1 if all close. */
int tu_allclose(const char *label, const float *a, const float *b, size_t n, double rtol, double atol);
/* Bitwise equality. */
int tu_equal(const char *label, const float *a, const float *b, size_t n);
/* argv[1] is the tests/ source directory. Makes path arguments absolute and
 * moves the test into a private scratch directory under $TMPDIR. */
void tu_init(int argc, char **argv);
/* Small deterministic LCG for test data: uniform in [-1, 1) and in [lo, hi]. */
float tu_frand(uint32_t *state);
int tu_irand(uint32_t *state, int lo, int hi);
/* A whole file, NUL-terminated (malloc'ed; its length in *len if len), or NULL */
char *tu_slurp(const char *path, size_t *len);
/* n floats uniform in [-amp, amp) (malloc'ed, at least one element) */
float *tu_rand_array(size_t n, uint32_t *state, float amp);
/* n bytes (zeros) that end where a page the process may not read begins: a read or write past them faults (as
 * at the end of a caller's mapping); any alignment n leaves. NULL where the mapping fails; tu_guard_free frees */
void *tu_guard_alloc(size_t n);
void tu_guard_free(void *p);
/* float32 -> bfloat16 bits, round to nearest even */
uint16_t tu_bf16(float x);
/* Prints "N passed, N failed" and returns the exit code. */
int tu_finish(const char *name);
/* 1 when this CPU and its OS run AVX-512 F/BW/DQ/VL (the test's own check,
 * independent of the library's dispatch) */
int tu_cpu_avx512(void);

#endif
