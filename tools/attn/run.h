/* Options and inputs shared by `attn run` and `attn heatmap`: the module,
 * its weights, the input tensors and the layer options. */
#ifndef ATTN_TOOL_RUN_H
#define ATTN_TOOL_RUN_H

#include "attn.h"

#include <stdint.h>

typedef struct run_opts {
    const char *module, *weights, *input, *output;
    int64_t heads, context_length, seed, threads, incremental;
    int has_heads, has_ctx, has_seed, has_out_dropout, train, grad;
    double dropout, out_dropout;
    int impl; /* attn_impl */
    int math; /* attn_math (attn run) */
    attn_torch_flavor flavor;
    /* heatmap only */
    int64_t head, batch; /* -1 = not given */
    const char *tokens, *key_tokens, *vmax_s;
    float vmax; /* 0 default, < 0 auto */
} run_opts;

/* A loaded layer and its inputs. */
typedef struct run_inputs {
    attn_layer_kind kind;
    attn_st_file *wf, *inf;
    attn_layer *layer;
    float *x, *y;  /* x (B, S, C); y (B, Sk, C) for cross */
    uint8_t *mask; /* (B, Sk), true = masked, or NULL */
    int xnd;       /* 2 or 3: the rank of x in the file */
    int64_t B, S, Sk, C;
} run_inputs;

/* Parse the options of `attn run` (heatmap = 0) or `attn heatmap` (1).
 * Prints the error and returns 0 on a bad command line, -1 after printing
 * the help. */
int run_parse(int argc, char **argv, run_opts *o, int heatmap);
/* Read the input file and build the layer from the weights. Prints the
 * error and returns its exit code (EXIT_USAGE or 1), 0 on success; the
 * caller frees in with run_inputs_free either way. */
int run_load(const run_opts *o, run_inputs *in);
void run_inputs_free(run_inputs *in);

#endif
