/* Helpers shared by the attn subcommands: messages, strict parsing, threads. */
#include "cli.h"

#include <cblas.h>
#include <errno.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void cli_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("attn: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

const char *cli_status(attn_status st) {
    static char line[512];
    const char *said = attn_last_error();
    if (!said[0]) return attn_status_string(st);
    snprintf(line, sizeof line, "%s: %s", attn_status_string(st), said);
    return line;
}

int cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

int cli_parse_prob(const char *s, double *out) {
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !(v >= 0.0 && v <= 1.0)) return 0;
    *out = v;
    return 1;
}

int cli_parse_flavor(const char *s, attn_torch_flavor *out) {
    if (!s) return 0;
    if (!strcmp(s, "mkl"))
        *out = ATTN_TORCH_MKL;
    else if (!strcmp(s, "nomkl"))
        *out = ATTN_TORCH_NOMKL;
    else
        return 0;
    return 1;
}

void cli_set_threads(int n) {
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

/* A float tensor from the input file, as a malloc'ed array. */
int cli_read_float(const attn_st_file *f, const char *file, const char *name, int *ndim, int64_t *shape, float **out) {
    attn_dtype dt;
    attn_status st = attn_st_info(f, name, &dt, ndim, shape);
    if (st == ATTN_E_NOT_FOUND) {
        cli_error("%s: missing tensor '%s'", file, name);
        return 0;
    }
    size_t n = 1;
    for (int i = 0; i < *ndim; i++) n *= (size_t)shape[i];
    *out = malloc((n ? n : 1) * sizeof(float));
    if (!*out) {
        cli_error("out of memory reading '%s'", name);
        return 0;
    }
    st = attn_st_read_f32(f, name, *out, n);
    if (st != ATTN_OK) {
        cli_error("%s: cannot read tensor '%s' as float: %s", file, name, cli_status(st));
        free(*out);
        *out = NULL;
        return 0;
    }
    return 1;
}

int cli_output_is_input(const char *cmd, const char *out, const char *opt, const char *in) {
    struct stat a, b;
    if (!out || !in || stat(out, &a) != 0 || stat(in, &b) != 0) return 0;
    if (a.st_dev != b.st_dev || a.st_ino != b.st_ino) return 0;
    cli_error("%s: --output '%s' is the same file as %s '%s': refusing to replace an input", cmd, out, opt, in);
    return 1;
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int cli_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
