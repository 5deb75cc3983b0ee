/* The table of layer kinds: one entry per seed class, everything that
 * differs between them in one place. An entry names the class's state_dict
 * (its tensors in registration order, the causal buffer, the output
 * projection), the rules on its widths, which masks and inputs it takes,
 * and its entries for construction, init, loading, wiring and the
 * projections forward and backward. The rest of src/modules/ (layer.c,
 * compute.c) is one pipeline that reads this table and never asks which
 * kind it runs: a new layer kind is a new entry (docs/LAYERS.md).
 *
 * Kinds that share a structure share a family of functions:
 *   simple       no weights, q = k = v = x
 *   raw          SelfAttention_v1: three raw (C, O) matrices
 *   linear       SelfAttention_v2, CausalAttention, MultiHeadAttention:
 *                W_query / W_key / W_value nn.Linear, optional out_proj
 *   wrapper      MultiHeadAttentionWrapper: a CausalAttention per head
 *   gpt          nanoGPT's MultiHeadAttention of Heads
 *   wqkv         the Warner layers with a fused Wqkv projection
 *   cross        CrossAttention: Wq on x, Wkv on y */
#include "layer_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers -------------------------------------------------------------- */

static attn_status add_tensor(attn_layer *l, const char *name, int ndim, int64_t d0, int64_t d1, int is_buffer) {
    if (l->n == l->cap) {
        int nc = l->cap ? 2 * l->cap : 16;
        layer_tensor *nt = realloc(l->t, (size_t)nc * sizeof *nt);
        if (!nt) return ATTN_E_NOMEM;
        l->t = nt;
        l->cap = nc;
    }
    layer_tensor *t = &l->t[l->n];
    memset(t, 0, sizeof *t);
    if (snprintf(t->name, sizeof t->name, "%s", name) >= (int)sizeof t->name) return ATTN_E_INVALID;
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim > 1 ? d1 : 0;
    size_t n;
    if (attn_numel(ndim, t->shape, &n)) return ATTN_E_OVERFLOW;
    t->numel = n;
    t->is_buffer = is_buffer;
    t->data = calloc(n ? n : 1, sizeof(float));
    if (!t->data) return ATTN_E_NOMEM;
    if (!is_buffer) {
        t->grad = calloc(n ? n : 1, sizeof(float));
        if (!t->grad) {
            free(t->data);
            return ATTN_E_NOMEM;
        }
    }
    l->n++;
    return ATTN_OK;
}

/* nn.Linear(in, out, bias) under prefix (head h substituted for "%lld"):
 * prefix.weight (out, in) [prefix.bias (out)] */
static attn_status add_linear(attn_layer *l, const char *fmt, long long h, int64_t in, int64_t out, int bias) {
    char p[LAYER_NAME_MAX], name[LAYER_NAME_MAX];
    snprintf(p, sizeof p, fmt, h);
    if (snprintf(name, sizeof name, "%s.weight", p) >= (int)sizeof name) return ATTN_E_INVALID;
    attn_status st = add_tensor(l, name, 2, out, in, 0);
    if (st == ATTN_OK && bias) {
        if (snprintf(name, sizeof name, "%s.bias", p) >= (int)sizeof name) return ATTN_E_INVALID;
        st = add_tensor(l, name, 1, out, 0, 0);
    }
    return st;
}

/* the kind's causal buffer (ctx, ctx) of head h, when it has one */
static attn_status add_buffer(attn_layer *l, long long h) {
    const char *fmt = attn_layer_kind_of(l->cfg.kind)->buffer;
    if (!fmt) return ATTN_OK;
    char name[LAYER_NAME_MAX];
    snprintf(name, sizeof name, fmt, h);
    return add_tensor(l, name, 2, l->cfg.context_length, l->cfg.context_length, 1);
}

/* the output projection (in -> out), when the kind has one */
static attn_status add_out_proj(attn_layer *l, int64_t in, int64_t out) {
    const char *p = attn_layer_kind_of(l->cfg.kind)->out_proj;
    return p ? add_linear(l, p, 0, in, out, l->cfg.out_bias) : ATTN_OK;
}

static attn_status init_linear(attn_layer *l, attn_generator *g, const char *fmt, long long h) {
    char p[LAYER_NAME_MAX], w[LAYER_NAME_MAX], b[LAYER_NAME_MAX];
    snprintf(p, sizeof p, fmt, h);
    if (snprintf(w, sizeof w, "%s.weight", p) >= (int)sizeof w || snprintf(b, sizeof b, "%s.bias", p) >= (int)sizeof b)
        return ATTN_E_INVALID;
    layer_tensor *tw = attn_layer_find(l, w), *tb = attn_layer_find(l, b);
    if (!tw) return ATTN_E_NOT_FOUND;
    return attn_linear_init(g, tw->data, tb ? tb->data : NULL, tw->shape[1], tw->shape[0]);
}

static attn_status init_out_proj(attn_layer *l, attn_generator *g) {
    const char *p = attn_layer_kind_of(l->cfg.kind)->out_proj;
    return p ? init_linear(l, g, p, 0) : ATTN_OK;
}

static int st_has(const attn_st_file *f, const char *name) {
    return attn_st_info(f, name, NULL, NULL, NULL) == ATTN_OK;
}

/* Shape of a 2-D tensor in the file; ATTN_E_NOT_FOUND / ATTN_E_SHAPE. */
static attn_status st_dims2(const attn_st_file *f, const char *name, int64_t *d0, int64_t *d1, char *detail,
                            size_t dl) {
    int nd;
    int64_t sh[ATTN_MAX_DIMS];
    attn_status st = attn_st_info(f, name, NULL, &nd, sh);
    if (st == ATTN_E_NOT_FOUND) {
        attn_layer_detail(detail, dl, "missing tensor '%s'", name);
        return st;
    }
    if (nd != 2) {
        attn_layer_detail(detail, dl, "tensor '%s' must be 2-D, has %d dims", name, nd);
        return ATTN_E_SHAPE;
    }
    *d0 = sh[0];
    *d1 = sh[1];
    return ATTN_OK;
}

/* heads.0.<what>, heads.1.<what>, ... present in the file */
static attn_status count_heads(attn_layer_config *c, const attn_st_file *f, const char *fmt, char *detail, size_t dl) {
    char name[LAYER_NAME_MAX];
    int64_t h = 0;
    for (;; h++) {
        snprintf(name, sizeof name, fmt, (long long)h);
        if (!st_has(f, name)) break;
    }
    c->num_heads = h;
    if (h >= 1) return ATTN_OK;
    snprintf(name, sizeof name, fmt, 0LL);
    attn_layer_detail(detail, dl, "missing tensor '%s'", name);
    return ATTN_E_NOT_FOUND;
}

/* widths and biases from the q projection wq (out, in), the output
 * projection's bias, the context length from head 0's causal buffer */
static attn_status infer_from(attn_layer_config *c, const attn_st_file *f, const char *wq, char *detail, size_t dl) {
    const layer_kind *k = attn_layer_kind_of(c->kind);
    char name[LAYER_NAME_MAX];
    int64_t a, b;
    attn_status st;
    snprintf(name, sizeof name, "%s.weight", wq);
    if ((st = st_dims2(f, name, &a, &b, detail, dl))) return st;
    c->d_out = a;
    c->d_in = b;
    snprintf(name, sizeof name, "%s.bias", wq);
    c->qkv_bias = st_has(f, name);
    if (k->out_proj) {
        snprintf(name, sizeof name, "%s.bias", k->out_proj);
        c->out_bias = st_has(f, name);
    } else {
        c->out_bias = 1;
    }
    if (k->buffer) {
        snprintf(name, sizeof name, k->buffer, 0LL);
        if ((st = st_dims2(f, name, &a, &b, detail, dl))) return st;
        c->context_length = a;
    }
    return ATTN_OK;
}

static const float *T(const attn_layer *l, const char *fmt, long long h) {
    layer_tensor *t = attn_layer_findf(l, fmt, h);
    return t ? t->data : NULL;
}
static float *G(const attn_layer *l, const char *fmt, long long h) {
    layer_tensor *t = attn_layer_findf(l, fmt, h);
    return t ? t->grad : NULL;
}

static operand op(int buf, int64_t col, int64_t row) {
    operand o = {buf, col, row};
    return o;
}

/* one group of H heads of size hd whose q, k, v, ctx are column blocks */
static sdpa_group group(operand q, operand k, operand v, operand o, int64_t H, int64_t hd) {
    sdpa_group g = {q, k, v, o, H, hd};
    return g;
}

/* y = x W^T + b of prefix (head h) into column col of rows ldy apart, or its backward */
static void lin_fwd(const attn_layer *l, const char *fmt, long long h, const float *x, int64_t C, float *y, int64_t ldy,
                    int64_t M, int64_t N) {
    char w[LAYER_NAME_MAX], b[LAYER_NAME_MAX];
    snprintf(w, sizeof w, "%s.weight", fmt);
    snprintf(b, sizeof b, "%s.bias", fmt);
    attn_linear_fwd(x, C, T(l, w, h), T(l, b, h), y, ldy, M, C, N);
}
static void lin_bwd(attn_layer *l, const char *fmt, long long h, const float *x, int64_t C, const float *dy,
                    int64_t lddy, float *dx, int acc, int64_t M, int64_t N) {
    char w[LAYER_NAME_MAX], b[LAYER_NAME_MAX];
    snprintf(w, sizeof w, "%s.weight", fmt);
    snprintf(b, sizeof b, "%s.bias", fmt);
    attn_linear_bwd(x, C, T(l, w, h), dy, lddy, dx, C, acc, G(l, w, h), G(l, b, h), M, C, N);
}

static const char *const QKV[3] = {"W_query", "W_key", "W_value"};

/* ---- simple: no weights ------------------------------------------------------ */

static attn_status simple_build(attn_layer *l) { return (void)l, ATTN_OK; }
static attn_status simple_init(attn_layer *l, attn_generator *g) { return (void)l, (void)g, ATTN_OK; }
static attn_status simple_infer(attn_layer_config *c, const attn_st_file *f, char *detail, size_t dl) {
    (void)f, (void)detail, (void)dl;
    if (c->d_in < 1) c->d_in = c->d_out = 1; /* widths come from the input */
    return ATTN_OK;
}
static void simple_wire(const attn_layer_config *c, wiring *w, sdpa_group *g) {
    int64_t C = c->d_in;
    w->w[BUF_CTX] = C;
    w->scale = 1.0f;
    w->out_width = C;
    if (g) g[0] = group(op(BUF_X, 0, C), op(BUF_X, 0, C), op(BUF_X, 0, C), op(BUF_CTX, 0, C), 1, C);
}
static void simple_project(const attn_layer *l, layer_cache *c) { (void)l, (void)c; }
static void simple_project_bwd(attn_layer *l, layer_cache *c, float *const *gb, float *dx, float *dy) {
    (void)dy; /* q = k = v = x */
    int64_t n = c->B * c->S * l->cfg.d_in;
    for (int64_t i = 0; dx && i < n; i++) dx[i] = gb[BUF_Q][i] + gb[BUF_K][i] + gb[BUF_V][i];
}

/* ---- the single-group layers: raw (v1) and linear (v2, causal, mha) ---------- */

static void single_wire(const attn_layer_config *c, wiring *w, sdpa_group *g) {
    int64_t O = c->d_out, H = (attn_layer_kind_of(c->kind)->flags & K_MULTIHEAD) ? c->num_heads : 1;
    w->w[BUF_Q] = w->w[BUF_K] = w->w[BUF_V] = w->w[BUF_CTX] = O;
    w->scale = attn_default_scale(O / H);
    w->out_width = O;
    if (g) g[0] = group(op(BUF_Q, 0, O), op(BUF_K, 0, O), op(BUF_V, 0, O), op(BUF_CTX, 0, O), H, O / H);
}

static attn_status raw_build(attn_layer *l) {
    attn_status st = ATTN_OK;
    for (int i = 0; i < 3 && !st; i++) st = add_tensor(l, QKV[i], 2, l->cfg.d_in, l->cfg.d_out, 0);
    return st;
}
static attn_status raw_init(attn_layer *l, attn_generator *g) {
    attn_status st = ATTN_OK;
    for (int i = 0; i < 3 && !st; i++) {
        layer_tensor *t = attn_layer_find(l, QKV[i]);
        st = attn_rand(g, t->data, t->numel);
    }
    return st;
}
static attn_status raw_infer(attn_layer_config *c, const attn_st_file *f, char *detail, size_t dl) {
    return st_dims2(f, "W_query", &c->d_in, &c->d_out, detail, dl);
}
static void raw_project(const attn_layer *l, layer_cache *c) {
    int64_t C = l->cfg.d_in, O = l->cfg.d_out, M = c->B * c->S;
    for (int i = 0; i < 3; i++) attn_matmul_fwd(c->buf[BUF_X], C, T(l, QKV[i], 0), c->buf[BUF_Q + i], O, M, C, O);
}
static void raw_project_bwd(attn_layer *l, layer_cache *c, float *const *gb, float *dx, float *dy) {
    (void)dy;
    int64_t C = l->cfg.d_in, O = l->cfg.d_out, M = c->B * c->S;
    for (int i = 0; i < 3; i++)
        attn_matmul_bwd(c->buf[BUF_X], C, T(l, QKV[i], 0), gb[BUF_Q + i], O, dx, C, i > 0, G(l, QKV[i], 0), M, C, O);
}

static attn_status linear_build(attn_layer *l) {
    const attn_layer_config *c = &l->cfg;
    attn_status st = add_buffer(l, 0);
    for (int i = 0; i < 3 && !st; i++) st = add_linear(l, QKV[i], 0, c->d_in, c->d_out, c->qkv_bias);
    return st ? st : add_out_proj(l, c->d_out, c->d_out);
}
static attn_status linear_init(attn_layer *l, attn_generator *g) {
    attn_status st = ATTN_OK;
    for (int i = 0; i < 3 && !st; i++) st = init_linear(l, g, QKV[i], 0);
    return st ? st : init_out_proj(l, g);
}
static attn_status linear_infer(attn_layer_config *c, const attn_st_file *f, char *detail, size_t dl) {
    return infer_from(c, f, "W_query", detail, dl);
}
static void linear_project(const attn_layer *l, layer_cache *c) {
    int64_t C = l->cfg.d_in, O = l->cfg.d_out, M = c->B * c->S;
    for (int i = 0; i < 3; i++) lin_fwd(l, QKV[i], 0, c->buf[BUF_X], C, c->buf[BUF_Q + i], O, M, O);
}
static void linear_project_bwd(attn_layer *l, layer_cache *c, float *const *gb, float *dx, float *dy) {
    (void)dy;
    int64_t C = l->cfg.d_in, O = l->cfg.d_out, M = c->B * c->S;
    for (int i = 0; i < 3; i++) lin_bwd(l, QKV[i], 0, c->buf[BUF_X], C, gb[BUF_Q + i], O, dx, i > 0, M, O);
}

/* ---- one module per head: the wrapper (CausalAttention heads) and nanoGPT ---- */

static const char *const WRAP_QKV[3] = {"heads.%lld.W_query", "heads.%lld.W_key", "heads.%lld.W_value"};
static const char *const GPT_QKV[3] = {"heads.%lld.query", "heads.%lld.key", "heads.%lld.value"};

/* head h: columns [h * hs, (h + 1) * hs) of every buffer, rows of width H * hs */
static void per_head_wire(const attn_layer_config *c, int64_t hs, wiring *w, sdpa_group *g) {
    int64_t H = c->num_heads, R = H * hs;
    w->ngroups = (int)H;
    w->w[BUF_Q] = w->w[BUF_K] = w->w[BUF_V] = w->w[BUF_CTX] = R;
    for (int64_t h = 0; g && h < H; h++)
        g[h] = group(op(BUF_Q, h * hs, R), op(BUF_K, h * hs, R), op(BUF_V, h * hs, R), op(BUF_CTX, h * hs, R), 1, hs);
}
static void per_head_project(const attn_layer *l, layer_cache *c, const char *const *names, int64_t hs) {
    int64_t C = l->cfg.d_in, H = l->cfg.num_heads, M = c->B * c->S;
    for (long long h = 0; h < H; h++)
        for (int i = 0; i < 3; i++)
            lin_fwd(l, names[i], h, c->buf[BUF_X], C, c->buf[BUF_Q + i] + h * hs, H * hs, M, hs);
}
static void per_head_project_bwd(attn_layer *l, layer_cache *c, float *const *gb, float *dx, const char *const *names,
                                 int64_t hs) {
    int64_t C = l->cfg.d_in, H = l->cfg.num_heads, M = c->B * c->S;
    for (long long h = 0; h < H; h++)
        for (int i = 0; i < 3; i++)
            lin_bwd(l, names[i], h, c->buf[BUF_X], C, gb[BUF_Q + i] + h * hs, H * hs, dx, h > 0 || i > 0, M, hs);
}

static attn_status wrapper_build(attn_layer *l) {
    const attn_layer_config *c = &l->cfg;
    attn_status st = ATTN_OK;
    for (long long h = 0; h < c->num_heads && !st; h++) {
        st = add_buffer(l, h);
        for (int i = 0; i < 3 && !st; i++) st = add_linear(l, WRAP_QKV[i], h, c->d_in, c->d_out, c->qkv_bias);
    }
    return st;
}
static attn_status wrapper_init(attn_layer *l, attn_generator *g) {
    attn_status st = ATTN_OK;
    for (long long h = 0; h < l->cfg.num_heads && !st; h++)
        for (int i = 0; i < 3 && !st; i++) st = init_linear(l, g, WRAP_QKV[i], h);
    return st;
}
static attn_status wrapper_infer(attn_layer_config *c, const attn_st_file *f, char *detail, size_t dl) {
    attn_status st = count_heads(c, f, "heads.%lld.W_query.weight", detail, dl);
    return st ? st : infer_from(c, f, "heads.0.W_query", detail, dl);
}
static void wrapper_wire(const attn_layer_config *c, wiring *w, sdpa_group *g) {
    per_head_wire(c, c->d_out, w, g);
    w->scale = attn_default_scale(c->d_out);
    w->out_width = c->d_out * c->num_heads;
}
static void wrapper_project(const attn_layer *l, layer_cache *c) { per_head_project(l, c, WRAP_QKV, l->cfg.d_out); }
static void wrapper_project_bwd(attn_layer *l, layer_cache *c, float *const *gb, float *dx, float *dy) {
    (void)dy;
    per_head_project_bwd(l, c, gb, dx, WRAP_QKV, l->cfg.d_out);
}

static attn_status gpt_build(attn_layer *l) {
    const attn_layer_config *c = &l->cfg;
    int64_t C = c->d_in, hs = C / c->num_heads;
    static const int order[3] = {1, 0, 2}; /* Head.__init__ registers key, query, value */
    attn_status st = ATTN_OK;
    for (long long h = 0; h < c->num_heads && !st; h++) {
        st = add_buffer(l, h);
        for (int i = 0; i < 3 && !st; i++) st = add_linear(l, GPT_QKV[order[i]], h, C, hs, c->qkv_bias);
    }
    return st ? st : add_out_proj(l, C, C);
}
static attn_status gpt_init(attn_layer *l, attn_generator *g) {
    static const int order[3] = {1, 0, 2}; /* Head.__init__ order: key, query, value */
    attn_status st = ATTN_OK;
    for (long long h = 0; h < l->cfg.num_heads && !st; h++)
        for (int i = 0; i < 3 && !st; i++) st = init_linear(l, g, GPT_QKV[order[i]], h);
    return st ? st : init_out_proj(l, g);
}
static attn_status gpt_infer(attn_layer_config *c, const attn_st_file *f, char *detail, size_t dl) {
    int64_t a, b, a2, b2;
    attn_status st = count_heads(c, f, "heads.%lld.key.weight", detail, dl);
    if (st || (st = st_dims2(f, "heads.0.key.weight", &a, &b, detail, dl))) return st;
    c->d_in = c->d_out = b;
    c->qkv_bias = st_has(f, "heads.0.key.bias");
    c->out_bias = st_has(f, "proj.bias");
    if ((st = st_dims2(f, "heads.0.tril", &a2, &b2, detail, dl))) return st;
    c->context_length = a2;
    if (a * c->num_heads != c->d_in) {
        attn_layer_detail(detail, dl, "gpt_mha: %lld heads of size %lld do not make n_embd %lld",
                          (long long)c->num_heads, (long long)a, (long long)c->d_in);
        return ATTN_E_SHAPE;
    }
    return ATTN_OK;
}
static void gpt_wire(const attn_layer_config *c, wiring *w, sdpa_group *g) {
    per_head_wire(c, c->d_in / c->num_heads, w, g);
    w->scale = (float)pow((double)c->d_in, -0.5); /* the seed's C**-0.5, C = n_embd */
    w->out_width = c->d_in;
}
static void gpt_project(const attn_layer *l, layer_cache *c) {
    per_head_project(l, c, GPT_QKV, l->cfg.d_in / l->cfg.num_heads);
}
static void gpt_project_bwd(attn_layer *l, layer_cache *c, float *const *gb, float *dx, float *dy) {
    (void)dy;
    per_head_project_bwd(l, c, gb, dx, GPT_QKV, l->cfg.d_in / l->cfg.num_heads);
}

/* ---- Warner's fused Wqkv layers -------------------------------------------- */

/* heads and head size: one head of C / head_div (single_head), else C / H each */
static int64_t wqkv_heads(const attn_layer_config *c) {
    return attn_layer_kind_of(c->kind)->head_div ? 1 : c->num_heads;
}
static int64_t wqkv_hs(const attn_layer_config *c) {
    int64_t div = attn_layer_kind_of(c->kind)->head_div;
    return c->d_in / (div ? div : c->num_heads);
}
static attn_status wqkv_build(attn_layer *l) {
    const attn_layer_config *c = &l->cfg;
    int64_t C = c->d_in, A = wqkv_heads(c) * wqkv_hs(c); /* the attention width */
    attn_status st = add_linear(l, "Wqkv", 0, C, 3 * A, c->qkv_bias);
    return st ? st : add_out_proj(l, A, C);
}
static attn_status wqkv_init(attn_layer *l, attn_generator *g) {
    attn_status st = init_linear(l, g, "Wqkv", 0);
    return st ? st : init_out_proj(l, g);
}
/* the Warner layers (d_out = d_in): the width from the first projection
 * `first` (out, C), its bias, and the output projection's bias */
static attn_status infer_square(attn_layer_config *c, const attn_st_file *f, const char *first, char *detail,
                                size_t dl) {
    char w[LAYER_NAME_MAX], b[LAYER_NAME_MAX], ob[LAYER_NAME_MAX];
    int64_t rows, cols;
    snprintf(w, sizeof w, "%s.weight", first);
    snprintf(b, sizeof b, "%s.bias", first);
    snprintf(ob, sizeof ob, "%s.bias", attn_layer_kind_of(c->kind)->out_proj);
    attn_status st = st_dims2(f, w, &rows, &cols, detail, dl);
    if (st) return st;
    c->d_in = c->d_out = cols;
    c->qkv_bias = st_has(f, b);
    c->out_bias = st_has(f, ob);
    return ATTN_OK;
}
static attn_status wqkv_infer(attn_layer_config *c, const attn_st_file *f, char *detail, size_t dl) {
    return infer_square(c, f, "Wqkv", detail, dl);
}
/* Wqkv(x) reshaped (B, S, 3, H, hs): q, k, v are column blocks */
static void wqkv_wire(const attn_layer_config *c, wiring *w, sdpa_group *g) {
    int64_t H = wqkv_heads(c), hs = wqkv_hs(c), A = H * hs;
    w->w[BUF_Q] = 3 * A;
    w->w[BUF_CTX] = A;
    w->scale = attn_default_scale(hs);
    w->out_width = c->d_in;
    if (g) g[0] = group(op(BUF_Q, 0, 3 * A), op(BUF_Q, A, 3 * A), op(BUF_Q, 2 * A, 3 * A), op(BUF_CTX, 0, A), H, hs);
}
static void wqkv_project(const attn_layer *l, layer_cache *c) {
    int64_t C = l->cfg.d_in, A = 3 * wqkv_heads(&l->cfg) * wqkv_hs(&l->cfg);
    lin_fwd(l, "Wqkv", 0, c->buf[BUF_X], C, c->buf[BUF_Q], A, c->B * c->S, A);
}
static void wqkv_project_bwd(attn_layer *l, layer_cache *c, float *const *gb, float *dx, float *dy) {
    (void)dy;
    int64_t C = l->cfg.d_in, A = 3 * wqkv_heads(&l->cfg) * wqkv_hs(&l->cfg);
    lin_bwd(l, "Wqkv", 0, c->buf[BUF_X], C, gb[BUF_Q], A, dx, 0, c->B * c->S, A);
}

/* ---- cross attention: q = Wq(x); Wkv(y) reshaped (B, Sk, 2, H, C/H) ---------- */

static attn_status cross_build(attn_layer *l) {
    const attn_layer_config *c = &l->cfg;
    int64_t C = c->d_in;
    attn_status st = add_linear(l, "Wq", 0, C, C, c->qkv_bias);
    if (!st) st = add_linear(l, "Wkv", 0, C, 2 * C, c->qkv_bias);
    return st ? st : add_out_proj(l, C, C);
}
static attn_status cross_init(attn_layer *l, attn_generator *g) {
    attn_status st = init_linear(l, g, "Wq", 0);
    if (!st) st = init_linear(l, g, "Wkv", 0);
    return st ? st : init_out_proj(l, g);
}
static attn_status cross_infer(attn_layer_config *c, const attn_st_file *f, char *detail, size_t dl) {
    return infer_square(c, f, "Wq", detail, dl);
}
static void cross_wire(const attn_layer_config *c, wiring *w, sdpa_group *g) {
    int64_t C = c->d_in, H = c->num_heads;
    w->w[BUF_Q] = C;
    w->w[BUF_K] = 2 * C;
    w->w[BUF_CTX] = C;
    w->scale = attn_default_scale(C / H);
    w->out_width = C;
    if (g) g[0] = group(op(BUF_Q, 0, C), op(BUF_K, 0, 2 * C), op(BUF_K, C, 2 * C), op(BUF_CTX, 0, C), H, C / H);
}
static void cross_project(const attn_layer *l, layer_cache *c) {
    int64_t C = l->cfg.d_in;
    lin_fwd(l, "Wq", 0, c->buf[BUF_X], C, c->buf[BUF_Q], C, c->B * c->S, C);
    lin_fwd(l, "Wkv", 0, c->buf[BUF_Y], C, c->buf[BUF_K], 2 * C, c->B * c->Sk, 2 * C);
}
static void cross_project_bwd(attn_layer *l, layer_cache *c, float *const *gb, float *dx, float *dy) {
    int64_t C = l->cfg.d_in;
    lin_bwd(l, "Wq", 0, c->buf[BUF_X], C, gb[BUF_Q], C, dx, 0, c->B * c->S, C);
    lin_bwd(l, "Wkv", 0, c->buf[BUF_Y], C, gb[BUF_K], 2 * C, dy, 0, c->B * c->Sk, 2 * C);
}

/* ---- the table ----------------------------------------------------------------- */

#define FAMILY(f) f##_build, f##_init, f##_infer
#define OPS(f) f##_project, f##_project_bwd

static const layer_kind kinds[ATTN_LAYER_KIND_COUNT] = {
    [ATTN_LAYER_SIMPLE] = {"simple", K_SHARED_QKV | K_SAME_WIDTH, NULL, NULL, 0, FAMILY(simple), simple_wire,
                           OPS(simple)},
    [ATTN_LAYER_SA_V1] = {"sa_v1", 0, NULL, NULL, 0, FAMILY(raw), single_wire, OPS(raw)},
    [ATTN_LAYER_SA_V2] = {"sa_v2", 0, NULL, NULL, 0, FAMILY(linear), single_wire, OPS(linear)},
    [ATTN_LAYER_CAUSAL] = {"causal", K_CAUSAL | K_INCREMENTAL | K_ATTN_DROPOUT, "mask", NULL, 0, FAMILY(linear),
                           single_wire, OPS(linear)},
    [ATTN_LAYER_MHA_WRAPPER] = {"mha_wrapper", K_CAUSAL | K_INCREMENTAL | K_ATTN_DROPOUT, "heads.%lld.mask", NULL, 0,
                                FAMILY(wrapper), wrapper_wire, OPS(wrapper)},
    [ATTN_LAYER_MHA] = {"mha", K_CAUSAL | K_INCREMENTAL | K_HEADS | K_ATTN_DROPOUT | K_MULTIHEAD | K_DIV_OUT, "mask",
                        "out_proj", 0, FAMILY(linear), single_wire, OPS(linear)},
    [ATTN_LAYER_GPT_MHA] = {"gpt_mha",
                            K_CAUSAL | K_INCREMENTAL | K_ATTN_DROPOUT | K_OUT_DROPOUT | K_TRIL | K_DIV_IN |
                                K_SAME_WIDTH,
                            "heads.%lld.tril", "proj", 0, FAMILY(gpt), gpt_wire, OPS(gpt)},
    [ATTN_LAYER_SINGLE_HEAD] = {"single_head", K_QKV_BIAS | K_SAME_WIDTH, NULL, "Wo", 4, FAMILY(wqkv), wqkv_wire,
                                OPS(wqkv)},
    [ATTN_LAYER_FUSED_MHA] = {"fused_mha",
                              K_HEADS | K_QKV_BIAS | K_ATTN_DROPOUT | K_OUT_DROPOUT | K_DIV_IN | K_SAME_WIDTH, NULL,
                              "Wo", 0, FAMILY(wqkv), wqkv_wire, OPS(wqkv)},
    [ATTN_LAYER_BIDIRECTIONAL] = {"bidirectional",
                                  K_HEADS | K_QKV_BIAS | K_ATTN_DROPOUT | K_OUT_DROPOUT | K_DIV_IN | K_SAME_WIDTH |
                                      K_TAKES_MASK,
                                  NULL, "Wo", 0, FAMILY(wqkv), wqkv_wire, OPS(wqkv)},
    [ATTN_LAYER_CAUSAL_MHA] = {"causal_mha",
                               K_CAUSAL | K_INCREMENTAL | K_HEADS | K_QKV_BIAS | K_ATTN_DROPOUT | K_OUT_DROPOUT |
                                   K_DIV_IN | K_SAME_WIDTH | K_TAKES_MASK,
                               NULL, "Wo", 0, FAMILY(wqkv), wqkv_wire, OPS(wqkv)},
    [ATTN_LAYER_CROSS] = {"cross",
                          K_CAUSAL | K_CROSS | K_HEADS | K_QKV_BIAS | K_ATTN_DROPOUT | K_OUT_DROPOUT | K_DIV_IN |
                              K_SAME_WIDTH | K_TAKES_MASK,
                          NULL, "Wo", 0, FAMILY(cross), cross_wire, OPS(cross)},
};

const layer_kind *attn_layer_kind_of(attn_layer_kind k) {
    return (k >= 0 && k < ATTN_LAYER_KIND_COUNT) ? &kinds[k] : NULL;
}

unsigned attn_layer_kind_flags(attn_layer_kind k) {
    const layer_kind *e = attn_layer_kind_of(k);
    return e ? (e->flags & K_PUBLIC) | (e->buffer ? ATTN_KIND_BUFFER : 0u) : 0u;
}

void attn_layer_wire(const attn_layer_config *c, wiring *w, sdpa_group *g) {
    const layer_kind *k = attn_layer_kind_of(c->kind);
    memset(w, 0, sizeof *w);
    w->ngroups = 1;
    w->p_attn = (k->flags & K_ATTN_DROPOUT) ? c->dropout : 0.0;
    w->has_out_proj = k->out_proj != NULL;
    k->wire(c, w, g);
}
