/* Internal layout of attn_layer, shared by the module sources. */
#ifndef ATTN_LAYER_INTERNAL_H
#define ATTN_LAYER_INTERNAL_H

#include "../internal.h"

#define LAYER_NAME_MAX 64

typedef struct layer_tensor {
    char name[LAYER_NAME_MAX]; /* state_dict key */
    int ndim;
    int64_t shape[ATTN_MAX_DIMS];
    size_t numel;
    int is_buffer;
    float *data;
    float *grad;
} layer_tensor;

/* Where a q/k/v/out operand of an SDPA group lives: a buffer of the forward
 * cache, a column offset and a row length (token stride). */
enum { BUF_X, BUF_Y, BUF_Q, BUF_K, BUF_V, BUF_CTX, BUF_OUT, BUF_COUNT };
typedef struct operand {
    int buf;
    int64_t col, row;
} operand;

/* One core SDPA call (and one attention-dropout call). */
typedef struct sdpa_group {
    operand q, k, v, o;
    int64_t H, hd;
} sdpa_group;

/* What the last forward left for backward. */
typedef struct layer_cache {
    int valid;
    int64_t B, S, Sk;
    int train;
    attn_impl impl;
    float scale;
    attn_causal causal;
    float *buf[BUF_COUNT]; /* BUF_OUT unused (the caller owns out) */
    size_t len[BUF_COUNT]; /* element counts */
    uint8_t *mask;         /* (B, Sk) copy, true = masked */
    float *lse;            /* per group (B, H_g, S) log-sum-exp from the forward */
    int ngroups;
    sdpa_group *groups;
    attn_dropout *drops; /* one per group (p = 0 when not training) */
    attn_dropout out_drop;
} layer_cache;

struct attn_layer {
    attn_layer_config cfg;
    int n, cap;
    layer_tensor *t; /* state_dict order */
    layer_cache cache;
};

/* layer_common.c (shared by layer.c and compute.c) */
void attn_layer_cache_clear(layer_cache *c);
layer_tensor *attn_layer_find(const attn_layer *l, const char *name);
int attn_kind_has_buffer_mask(attn_layer_kind k); /* mask/tril persistent buffer */
int attn_kind_is_causal(attn_layer_kind k);
int attn_kind_takes_mask(attn_layer_kind k);

#endif
