/* Shared helpers of the attn CLI. */
#ifndef ATTN_TOOL_CLI_H
#define ATTN_TOOL_CLI_H

#include "attn.h"

#include <stdint.h>

#define EXIT_USAGE 2

/* Print "attn: error: <msg>" to stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A refused call's status for a message: the status's text, then what the
 * library said about it (attn_last_error: the argument and its value). */
const char *cli_status(attn_status st);
/* Strict number parsing: the whole string must be a number in range. */
int cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);
int cli_parse_prob(const char *s, double *out);
/* "mkl" or "nomkl" -> flavor. The default of every command is
 * ATTN_TORCH_MKL (the seeds' and PyTorch's x86 wheels' dropout stream); it
 * never depends on what is installed on the machine. */
int cli_parse_flavor(const char *s, attn_torch_flavor *out);
/* A float tensor (any float dtype) of a safetensors file as a malloc'ed
 * float32 array; its dims in *ndim and shape. Prints the error and returns 0
 * on failure. */
int cli_read_float(const attn_st_file *f, const char *file, const char *name, int *ndim, int64_t *shape, float **out);
/* 1 when both paths exist and name the same file (device and inode: links
 * and other spellings included): an --output that would replace an input.
 * Prints "CMD: --output 'out' is the same file as OPT 'in' ..." then. */
int cli_output_is_input(const char *cmd, const char *out, const char *opt, const char *in);
/* A monotonic clock in seconds; qsort's comparison of doubles (ascending). */
double cli_now(void);
int cli_cmp_double(const void *a, const void *b);
/* n floats uniform in [-0.5, 0.5) from an LCG seeded with seed (malloc'ed; NULL without memory) */
float *cli_frand_buf(size_t n, uint32_t seed);
/* Set OpenMP and OpenBLAS thread counts (n >= 1). */
void cli_set_threads(int n);

/* attn bench --pass (bench_pass.c): the block products' softmax pass alone */
int cli_bench_pass(double min_time, int json);
/* attn bench --decode --formats (bench_formats.c): one decode step over every KV format, alternating rounds */
int cli_bench_formats(int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t D, int64_t page, attn_math math,
                      double min_time, int json);

/* attn bench --flex (bench_flex.c): programmable attention against the rules it reproduces, alternating rounds */
int cli_bench_flex(int64_t H, int64_t S, int64_t D, double min_time, int json);

int cmd_demo(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_sdpa(int argc, char **argv);
int cmd_heatmap(int argc, char **argv);

#endif
