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
    attn_math math;
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

/* How a kind's forward is laid out: buffer widths per token row, the
 * number of SDPA groups, and the layer's constants. */
typedef struct wiring {
    int64_t w[BUF_COUNT]; /* row length of Q, K, V, CTX (0 = unused) */
    int ngroups;
    double p_attn;    /* attention dropout (0 for kinds without it) */
    int has_out_proj; /* ctx -> out through the kind's output projection */
    float scale;      /* the scores' scale */
    int64_t out_width;
} wiring;

/* What a kind is (kinds.c has the table and the entries). */
enum {
    K_CAUSAL = ATTN_KIND_CAUSAL, /* the public flags (attn.h) first */
    K_TAKES_MASK = ATTN_KIND_TAKES_MASK,
    K_CROSS = ATTN_KIND_CROSS,
    K_INCREMENTAL = ATTN_KIND_INCREMENTAL, /* all heads one (B, Htot, S, hd) view of each buffer */
    K_HEADS = ATTN_KIND_HEADS,
    K_PUBLIC = ATTN_KIND_CAUSAL | ATTN_KIND_TAKES_MASK | ATTN_KIND_CROSS | ATTN_KIND_INCREMENTAL | ATTN_KIND_HEADS,
    K_QKV_BIAS = 1 << 6,     /* the seed class's q/k/v projections default to bias=True */
    K_ATTN_DROPOUT = 1 << 7, /* dropout on the attention weights */
    K_OUT_DROPOUT = 1 << 8,  /* dropout after the output projection */
    K_TRIL = 1 << 9,         /* the causal buffer is tril(ones) (nanoGPT), else triu(ones, 1) */
    K_SAME_WIDTH = 1 << 10,  /* d_out must equal d_in */
    K_DIV_IN = 1 << 11,      /* d_in must be a multiple of the heads */
    K_DIV_OUT = 1 << 12,     /* d_out must be a multiple of the heads */
    K_MULTIHEAD = 1 << 13,   /* one group of num_heads heads over d_out */
    K_SHARED_QKV = 1 << 14   /* q = k = v = x: backward keeps a gradient per use */
};

typedef struct layer_kind {
    const char *name;
    unsigned flags;                      /* K_* */
    const char *buffer;                  /* the causal buffer's state_dict name ("%lld": per head), or NULL */
    const char *out_proj;                /* the output projection's prefix, or NULL */
    int head_div;                        /* > 0: one head of d_in / head_div (single_head), num_heads forced to 1 */
    attn_status (*build)(attn_layer *l); /* registers the tensors in state_dict order */
    attn_status (*init)(attn_layer *l, attn_generator *g); /* the seed class's init order */
    attn_status (*infer)(attn_layer_config *c, const attn_st_file *f, char *detail, size_t dl); /* dims from a file */
    void (*wire)(const attn_layer_config *c, wiring *w, sdpa_group *g); /* widths, groups, scale, out width */
    void (*project)(const attn_layer *l, layer_cache *c);               /* x (and y) -> q, k, v buffers */
    void (*project_bwd)(attn_layer *l, layer_cache *c, float *const *gb, float *dx, float *dy);
} layer_kind;

/* kinds.c */
const layer_kind *attn_layer_kind_of(attn_layer_kind k); /* NULL when k is not a kind */
/* the wiring of c (g: ngroups entries, or NULL for the counts alone) */
void attn_layer_wire(const attn_layer_config *c, wiring *w, sdpa_group *g);

/* layer_common.c (shared by kinds.c, layer.c and compute.c) */
void attn_layer_cache_clear(layer_cache *c);
layer_tensor *attn_layer_find(const attn_layer *l, const char *name);
layer_tensor *attn_layer_findf(const attn_layer *l, const char *fmt, long long h); /* fmt's "%lld" = h */
void attn_layer_detail(char *buf, size_t len, const char *fmt, ...);               /* into detail, if any */

#endif
