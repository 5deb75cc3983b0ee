/* Forward and backward of every seed layer.
 *
 * Every layer is the same pipeline with different wiring:
 *   x (B,S,C) --projections (CBLAS)--> q, k, v in row buffers
 *     --core SDPA per group--> ctx (B,S,H*hd) (or straight into out)
 *     --optional output projection + output dropout--> out (B,S,W)
 * A group is one SDPA call with one attention-dropout call: the whole layer
 * for Raschka's mha and the Warner layers, one head at a time for the
 * wrapper and nanoGPT (separate modules, separate nn.Dropout calls), so the
 * random draws come in the seed classes' order.
 *
 * The forward leaves its buffers in l->cache; backward runs the same wiring
 * in reverse with gradient buffers of identical layout. */
#include "layer_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const float *T(const attn_layer *l, const char *fmt, long long h) {
    char name[LAYER_NAME_MAX];
    snprintf(name, sizeof name, fmt, h);
    layer_tensor *t = attn_layer_find(l, name);
    return t ? t->data : NULL;
}
static float *G(const attn_layer *l, const char *fmt, long long h) {
    char name[LAYER_NAME_MAX];
    snprintf(name, sizeof name, fmt, h);
    layer_tensor *t = attn_layer_find(l, name);
    return t ? t->grad : NULL;
}

static operand op(int buf, int64_t col, int64_t row) {
    operand o = {buf, col, row};
    return o;
}

static attn_view opview(float *const *bufs, operand o, int64_t S, int64_t hd) {
    attn_view v = {bufs[o.buf] + o.col, S * o.row, hd, o.row};
    return v;
}

/* ---- wiring ---------------------------------------------------------------- */

/* Buffer widths per token row, the number of groups, and each group's operands. */
typedef struct wiring {
    int64_t w[BUF_COUNT]; /* row length of Q, K, V, CTX (0 = unused) */
    int ngroups;
    double p_attn;
    int has_out_proj;
} wiring;

static int64_t head_count_groups(const attn_layer_config *c) {
    return (c->kind == ATTN_LAYER_MHA_WRAPPER || c->kind == ATTN_LAYER_GPT_MHA) ? c->num_heads : 1;
}

static void wire(const attn_layer *l, wiring *w, sdpa_group *g /* ngroups entries, or NULL */) {
    const attn_layer_config *c = &l->cfg;
    int64_t C = c->d_in, O = c->d_out, H = c->num_heads;
    memset(w, 0, sizeof *w);
    w->ngroups = (int)head_count_groups(c);
    w->p_attn = c->dropout;
    switch (c->kind) {
    case ATTN_LAYER_SIMPLE:
        w->p_attn = 0.0;
        w->w[BUF_CTX] = C;
        if (g) g[0] = (sdpa_group){op(BUF_X, 0, C), op(BUF_X, 0, C), op(BUF_X, 0, C), op(BUF_CTX, 0, C), 1, C};
        break;
    case ATTN_LAYER_SA_V1:
    case ATTN_LAYER_SA_V2:
    case ATTN_LAYER_CAUSAL:
        if (c->kind != ATTN_LAYER_CAUSAL) w->p_attn = 0.0;
        w->w[BUF_Q] = w->w[BUF_K] = w->w[BUF_V] = w->w[BUF_CTX] = O;
        if (g) g[0] = (sdpa_group){op(BUF_Q, 0, O), op(BUF_K, 0, O), op(BUF_V, 0, O), op(BUF_CTX, 0, O), 1, O};
        break;
    case ATTN_LAYER_MHA_WRAPPER: /* head h: columns [h*O, (h+1)*O) of every buffer and of out */
        w->w[BUF_Q] = w->w[BUF_K] = w->w[BUF_V] = w->w[BUF_CTX] = H * O;
        for (int64_t h = 0; g && h < H; h++)
            g[h] = (sdpa_group){op(BUF_Q, h * O, H * O),
                                op(BUF_K, h * O, H * O),
                                op(BUF_V, h * O, H * O),
                                op(BUF_CTX, h * O, H * O),
                                1,
                                O};
        break;
    case ATTN_LAYER_MHA:
        w->w[BUF_Q] = w->w[BUF_K] = w->w[BUF_V] = w->w[BUF_CTX] = O;
        w->has_out_proj = 1;
        if (g) g[0] = (sdpa_group){op(BUF_Q, 0, O), op(BUF_K, 0, O), op(BUF_V, 0, O), op(BUF_CTX, 0, O), H, O / H};
        break;
    case ATTN_LAYER_GPT_MHA: {
        int64_t hs = C / H;
        w->w[BUF_Q] = w->w[BUF_K] = w->w[BUF_V] = w->w[BUF_CTX] = C;
        w->has_out_proj = 1;
        for (int64_t h = 0; g && h < H; h++)
            g[h] = (sdpa_group){
                op(BUF_Q, h * hs, C), op(BUF_K, h * hs, C), op(BUF_V, h * hs, C), op(BUF_CTX, h * hs, C), 1, hs};
        break;
    }
    case ATTN_LAYER_SINGLE_HEAD: {
        int64_t hs = C / 4;
        w->p_attn = 0.0;
        w->w[BUF_Q] = 3 * hs;
        w->w[BUF_CTX] = hs;
        w->has_out_proj = 1;
        if (g)
            g[0] = (sdpa_group){
                op(BUF_Q, 0, 3 * hs), op(BUF_Q, hs, 3 * hs), op(BUF_Q, 2 * hs, 3 * hs), op(BUF_CTX, 0, hs), 1, hs};
        break;
    }
    case ATTN_LAYER_FUSED_MHA:
    case ATTN_LAYER_BIDIRECTIONAL:
    case ATTN_LAYER_CAUSAL_MHA: /* Wqkv(x) reshaped (B,S,3,H,C/H): q, k, v are column blocks */
        w->w[BUF_Q] = 3 * C;
        w->w[BUF_CTX] = C;
        w->has_out_proj = 1;
        if (g)
            g[0] = (sdpa_group){
                op(BUF_Q, 0, 3 * C), op(BUF_Q, C, 3 * C), op(BUF_Q, 2 * C, 3 * C), op(BUF_CTX, 0, C), H, C / H};
        break;
    case ATTN_LAYER_CROSS: /* q = Wq(x); Wkv(y) reshaped (B,Sk,2,H,C/H) */
        w->w[BUF_Q] = C;
        w->w[BUF_K] = 2 * C;
        w->w[BUF_CTX] = C;
        w->has_out_proj = 1;
        if (g)
            g[0] = (sdpa_group){op(BUF_Q, 0, C), op(BUF_K, 0, 2 * C), op(BUF_K, C, 2 * C), op(BUF_CTX, 0, C), H, C / H};
        break;
    default: break;
    }
}

static float layer_scale(const attn_layer_config *c) {
    switch (c->kind) {
    case ATTN_LAYER_SIMPLE: return 1.0f;
    case ATTN_LAYER_SA_V1:
    case ATTN_LAYER_SA_V2:
    case ATTN_LAYER_CAUSAL:
    case ATTN_LAYER_MHA_WRAPPER: return attn_default_scale(c->d_out);
    case ATTN_LAYER_MHA: return attn_default_scale(c->d_out / c->num_heads);
    case ATTN_LAYER_GPT_MHA: return (float)pow((double)c->d_in, -0.5); /* the seed's C**-0.5, C = n_embd */
    case ATTN_LAYER_SINGLE_HEAD: return attn_default_scale(c->d_in / 4);
    default: return attn_default_scale(c->d_in / c->num_heads);
    }
}

static void group_desc(const layer_cache *c, const sdpa_group *g, const attn_dropout *drop, attn_sdpa_desc *d) {
    memset(d, 0, sizeof *d);
    d->B = c->B;
    d->H = g->H;
    d->Sq = c->S;
    d->Sk = c->Sk;
    d->D = d->Dv = g->hd;
    d->scale = c->scale;
    d->causal = c->causal;
    d->impl = c->impl;
    if (c->mask) {
        d->key_mask = c->mask;
        d->key_mask_stride_b = c->Sk;
        d->key_mask_polarity = ATTN_MASK_TRUE_MEANS_MASKED;
    }
    d->dropout = (drop && drop->p > 0.0) ? drop : NULL;
}

/* ---- forward ----------------------------------------------------------------- */

static size_t lse_offset(const layer_cache *c, int gi) {
    size_t off = 0;
    for (int g = 0; g < gi; g++) off += (size_t)(c->B * c->groups[g].H * c->S);
    return off;
}

static attn_status check_args(const attn_layer *l, const attn_forward_args *a, int need_out) {
    const attn_layer_config *c = &l->cfg;
    if (!a->x || (need_out && !a->out)) return ATTN_E_INVALID;
    if (a->B < 1 || a->S < 1 || a->B > INT32_MAX || a->S > INT32_MAX) return ATTN_E_SHAPE;
    if (c->kind == ATTN_LAYER_CROSS) {
        if (!a->y) return ATTN_E_INVALID;
        if (a->Sk < 1 || a->Sk > INT32_MAX) return ATTN_E_SHAPE;
    }
    if (a->mask && !attn_kind_takes_mask(c->kind)) return ATTN_E_INVALID;
    if (a->impl < ATTN_IMPL_AUTO || a->impl > ATTN_IMPL_FAST) return ATTN_E_INVALID;
    int64_t Sk = c->kind == ATTN_LAYER_CROSS ? a->Sk : a->S;
    if (c->context_length > 0 && attn_kind_is_causal(c->kind) && (a->S > c->context_length || Sk > c->context_length))
        return ATTN_E_CONTEXT;
    if (a->train && (c->dropout > 0.0 || c->out_dropout > 0.0) && !a->gen) return ATTN_E_INVALID;
    size_t n;
    int64_t width = 3 * c->d_in + 3 * c->d_out * c->num_heads;
    if (attn_mul3_size((size_t)a->B, (size_t)(a->S > Sk ? a->S : Sk), (size_t)width, &n) ||
        n > (SIZE_MAX / sizeof(float)) / 8)
        return ATTN_E_OVERFLOW;
    return ATTN_OK;
}

static attn_status alloc_buf(layer_cache *c, int b, size_t n, const float *src) {
    c->len[b] = n;
    if (!n) return ATTN_OK;
    c->buf[b] = malloc(n * sizeof(float));
    if (!c->buf[b]) return ATTN_E_NOMEM;
    if (src) memcpy(c->buf[b], src, n * sizeof(float));
    return ATTN_OK;
}

/* q, k, v projections into the cache buffers. */
static void project(const attn_layer *l, layer_cache *c) {
    const attn_layer_config *cf = &l->cfg;
    int64_t C = cf->d_in, O = cf->d_out, H = cf->num_heads, M = c->B * c->S, Mk = c->B * c->Sk;
    float *x = c->buf[BUF_X], *q = c->buf[BUF_Q], *k = c->buf[BUF_K], *v = c->buf[BUF_V];
    switch (cf->kind) {
    case ATTN_LAYER_SA_V1:
        attn_matmul_fwd(x, C, T(l, "W_query", 0), q, O, M, C, O);
        attn_matmul_fwd(x, C, T(l, "W_key", 0), k, O, M, C, O);
        attn_matmul_fwd(x, C, T(l, "W_value", 0), v, O, M, C, O);
        break;
    case ATTN_LAYER_SA_V2:
    case ATTN_LAYER_CAUSAL:
    case ATTN_LAYER_MHA:
        attn_linear_fwd(x, C, T(l, "W_query.weight", 0), T(l, "W_query.bias", 0), q, O, M, C, O);
        attn_linear_fwd(x, C, T(l, "W_key.weight", 0), T(l, "W_key.bias", 0), k, O, M, C, O);
        attn_linear_fwd(x, C, T(l, "W_value.weight", 0), T(l, "W_value.bias", 0), v, O, M, C, O);
        break;
    case ATTN_LAYER_MHA_WRAPPER:
        for (long long h = 0; h < H; h++) {
            attn_linear_fwd(x, C, T(l, "heads.%lld.W_query.weight", h), T(l, "heads.%lld.W_query.bias", h), q + h * O,
                            H * O, M, C, O);
            attn_linear_fwd(x, C, T(l, "heads.%lld.W_key.weight", h), T(l, "heads.%lld.W_key.bias", h), k + h * O,
                            H * O, M, C, O);
            attn_linear_fwd(x, C, T(l, "heads.%lld.W_value.weight", h), T(l, "heads.%lld.W_value.bias", h), v + h * O,
                            H * O, M, C, O);
        }
        break;
    case ATTN_LAYER_GPT_MHA:
        for (long long h = 0, hs = C / H; h < H; h++) {
            attn_linear_fwd(x, C, T(l, "heads.%lld.query.weight", h), T(l, "heads.%lld.query.bias", h), q + h * hs, C,
                            M, C, hs);
            attn_linear_fwd(x, C, T(l, "heads.%lld.key.weight", h), T(l, "heads.%lld.key.bias", h), k + h * hs, C, M, C,
                            hs);
            attn_linear_fwd(x, C, T(l, "heads.%lld.value.weight", h), T(l, "heads.%lld.value.bias", h), v + h * hs, C,
                            M, C, hs);
        }
        break;
    case ATTN_LAYER_SINGLE_HEAD:
        attn_linear_fwd(x, C, T(l, "Wqkv.weight", 0), T(l, "Wqkv.bias", 0), q, 3 * (C / 4), M, C, 3 * (C / 4));
        break;
    case ATTN_LAYER_FUSED_MHA:
    case ATTN_LAYER_BIDIRECTIONAL:
    case ATTN_LAYER_CAUSAL_MHA:
        attn_linear_fwd(x, C, T(l, "Wqkv.weight", 0), T(l, "Wqkv.bias", 0), q, 3 * C, M, C, 3 * C);
        break;
    case ATTN_LAYER_CROSS:
        attn_linear_fwd(x, C, T(l, "Wq.weight", 0), T(l, "Wq.bias", 0), q, C, M, C, C);
        attn_linear_fwd(c->buf[BUF_Y], C, T(l, "Wkv.weight", 0), T(l, "Wkv.bias", 0), k, 2 * C, Mk, C, 2 * C);
        break;
    default: break;
    }
}

static const char *out_proj_name(attn_layer_kind k) {
    return k == ATTN_LAYER_MHA ? "out_proj" : k == ATTN_LAYER_GPT_MHA ? "proj" : "Wo";
}

/* ctx (M rows) -> out: the output projection, or a copy for layers without one */
static void out_project(const attn_layer *l, const wiring *w, const layer_cache *c, float *out, int64_t M) {
    if (!w->has_out_proj) {
        memcpy(out, c->buf[BUF_CTX], c->len[BUF_CTX] * sizeof(float));
        return;
    }
    const char *pn = out_proj_name(l->cfg.kind);
    char wn[32], bn[32];
    snprintf(wn, sizeof wn, "%s.weight", pn);
    snprintf(bn, sizeof bn, "%s.bias", pn);
    int64_t W = attn_layer_out_width(l);
    attn_linear_fwd(c->buf[BUF_CTX], w->w[BUF_CTX], T(l, wn, 0), T(l, bn, 0), out, W, M, w->w[BUF_CTX], W);
}

/* Everything before the SDPA calls: check the arguments, lay out the cache
 * buffers and project q, k, v. On failure the cache is cleared. */
static attn_status forward_prepare(attn_layer *l, const attn_forward_args *a, wiring *wo, int need_out) {
    attn_status st = check_args(l, a, need_out);
    if (st) return st;
    const attn_layer_config *cf = &l->cfg;
    layer_cache *c = &l->cache;
    attn_layer_cache_clear(c);
    c->B = a->B;
    c->S = a->S;
    c->Sk = cf->kind == ATTN_LAYER_CROSS ? a->Sk : a->S;
    c->train = a->train;
    c->impl = a->impl;
    c->scale = layer_scale(cf);
    c->causal =
        attn_kind_is_causal(cf->kind) ? (cf->causal_align ? cf->causal_align : ATTN_CAUSAL_TOP_LEFT) : ATTN_CAUSAL_NONE;
    int64_t M = c->B * c->S, Mk = c->B * c->Sk, C = cf->d_in;
    wiring w;
    wire(l, &w, NULL);
    c->ngroups = w.ngroups;
    c->groups = calloc((size_t)w.ngroups, sizeof *c->groups);
    c->drops = calloc((size_t)w.ngroups, sizeof *c->drops);
    if (!c->groups || !c->drops) st = ATTN_E_NOMEM;
    if (!st) wire(l, &w, c->groups);
    if (!st) st = alloc_buf(c, BUF_X, (size_t)(M * C), a->x);
    if (!st && a->y) st = alloc_buf(c, BUF_Y, (size_t)(Mk * C), a->y);
    if (!st) st = alloc_buf(c, BUF_Q, (size_t)(M * w.w[BUF_Q]), NULL);
    if (!st) st = alloc_buf(c, BUF_K, (size_t)(Mk * w.w[BUF_K]), NULL);
    if (!st) st = alloc_buf(c, BUF_V, (size_t)(Mk * w.w[BUF_V]), NULL);
    if (!st) st = alloc_buf(c, BUF_CTX, (size_t)(M * w.w[BUF_CTX]), NULL);
    if (!st) { /* log-sum-exp of every group's rows, kept for the fused backward */
        int64_t heads = 0;
        for (int gi = 0; gi < c->ngroups; gi++) heads += c->groups[gi].H;
        c->lse = malloc((size_t)(heads * c->B * c->S) * sizeof(float));
        if (!c->lse) st = ATTN_E_NOMEM;
    }
    if (!st && a->mask) {
        c->mask = malloc((size_t)(c->B * c->Sk));
        if (!c->mask)
            st = ATTN_E_NOMEM;
        else
            memcpy(c->mask, a->mask, (size_t)(c->B * c->Sk));
    }
    if (st) {
        attn_layer_cache_clear(c);
        return st;
    }
    project(l, c);
    *wo = w;
    return ATTN_OK;
}

/* Group gi's attention-dropout draws (training with p > 0), taken from the
 * generator in the seed classes' order. */
static attn_status group_dropout(layer_cache *c, int gi, const wiring *w, const attn_forward_args *a) {
    if (!a->train || w->p_attn <= 0.0) return ATTN_OK;
    const int64_t dims[4] = {c->B, c->groups[gi].H, c->S, c->Sk};
    size_t n;
    return attn_numel(4, dims, &n) ? ATTN_E_OVERFLOW : attn_dropout_begin(a->gen, w->p_attn, n, &c->drops[gi]);
}

attn_status attn_layer_forward(attn_layer *l, const attn_forward_args *a) {
    if (!l || !a) return ATTN_E_INVALID;
    wiring w;
    attn_status st = forward_prepare(l, a, &w, 1);
    if (st) return st;
    const attn_layer_config *cf = &l->cfg;
    layer_cache *c = &l->cache;
    int64_t M = c->B * c->S, W = attn_layer_out_width(l);
    float *bufs[BUF_COUNT];
    memcpy(bufs, c->buf, sizeof bufs);
    bufs[BUF_OUT] = a->out;
    for (int gi = 0; gi < c->ngroups && !st; gi++) {
        const sdpa_group *g = &c->groups[gi];
        if ((st = group_dropout(c, gi, &w, a)) != ATTN_OK) break;
        attn_sdpa_desc d;
        group_desc(c, g, &c->drops[gi], &d);
        st = attn_sdpa_forward(&d, opview(bufs, g->q, c->S, g->hd), opview(bufs, g->k, c->Sk, g->hd),
                               opview(bufs, g->v, c->Sk, g->hd), opview(bufs, g->o, c->S, g->hd),
                               c->lse + lse_offset(c, gi));
    }
    if (st) goto fail;
    out_project(l, &w, c, a->out, M);
    if (w.has_out_proj) {
        if (a->train && cf->out_dropout > 0.0 && cf->kind != ATTN_LAYER_MHA && cf->kind != ATTN_LAYER_SINGLE_HEAD) {
            st = attn_dropout_begin(a->gen, cf->out_dropout, (uint64_t)(M * W), &c->out_drop);
            if (!st) st = attn_dropout_apply(&c->out_drop, a->out, a->out);
            if (st) goto fail;
        }
    }
    c->valid = 1;
    return ATTN_OK;
fail:
    attn_layer_cache_clear(c);
    return st;
}

int64_t attn_layer_attention_heads(const attn_layer *l) {
    if (!l) return 0;
    wiring w;
    sdpa_group g[1];
    wire(l, &w, NULL);
    if (w.ngroups == 1) wire(l, &w, g);
    return w.ngroups == 1 ? g[0].H : w.ngroups; /* one head per group otherwise */
}

attn_status attn_layer_attention_weights(attn_layer *l, const attn_forward_args *a, float *scores, float *weights) {
    if (!l || !a || (!scores && !weights)) return ATTN_E_INVALID;
    wiring w;
    attn_status st = forward_prepare(l, a, &w, 0);
    if (st) return st;
    layer_cache *c = &l->cache;
    float *bufs[BUF_COUNT];
    memcpy(bufs, c->buf, sizeof bufs);
    int64_t Htot = attn_layer_attention_heads(l), SS = c->S * c->Sk;
    for (int gi = 0; gi < c->ngroups && !st; gi++) { /* the forward's groups, in its order and random draws */
        const sdpa_group *g = &c->groups[gi];
        if ((st = group_dropout(c, gi, &w, a)) != ATTN_OK) break;
        attn_sdpa_desc d;
        group_desc(c, g, &c->drops[gi], &d);
        attn_view q = opview(bufs, g->q, c->S, g->hd), k = opview(bufs, g->k, c->Sk, g->hd);
        if (c->ngroups == 1) { /* (B, H, S, Sk) directly */
            st = attn_sdpa_weights(&d, q, k, scores, weights);
            break;
        }
        /* one head per group: group gi's (B, 1, S, Sk) go to head gi of (B, Htot, S, Sk) */
        float *ts = scores ? malloc((size_t)(c->B * SS) * sizeof(float)) : NULL;
        float *tw = weights ? malloc((size_t)(c->B * SS) * sizeof(float)) : NULL;
        if ((scores && !ts) || (weights && !tw)) st = ATTN_E_NOMEM;
        if (!st) st = attn_sdpa_weights(&d, q, k, ts, tw);
        for (int64_t b = 0; !st && b < c->B; b++) {
            if (ts) memcpy(scores + (b * Htot + gi) * SS, ts + b * SS, (size_t)SS * sizeof(float));
            if (tw) memcpy(weights + (b * Htot + gi) * SS, tw + b * SS, (size_t)SS * sizeof(float));
        }
        free(ts), free(tw);
    }
    attn_layer_cache_clear(c); /* nothing is left for backward */
    return st;
}

/* ---- incremental (KV cache) ---------------------------------------------------- */

/* Every causal kind keeps its heads side by side in the q/k/v/ctx buffers
 * (group gi's head h at column groups[gi].col + h * hd), so all heads are one
 * (B, Htot, S, hd) view of each buffer. */
static int kind_incremental(attn_layer_kind k) {
    return k == ATTN_LAYER_CAUSAL || k == ATTN_LAYER_MHA_WRAPPER || k == ATTN_LAYER_MHA || k == ATTN_LAYER_GPT_MHA ||
           k == ATTN_LAYER_CAUSAL_MHA;
}

attn_status attn_layer_kv_shape(const attn_layer *l, int64_t *kv_heads, int64_t *head_dim) {
    if (!l || !kv_heads || !head_dim) return ATTN_E_INVALID;
    if (!kind_incremental(l->cfg.kind)) return ATTN_E_UNSUPPORTED;
    const attn_layer_config *c = &l->cfg;
    *kv_heads = c->num_heads;
    switch (c->kind) {
    case ATTN_LAYER_CAUSAL: *kv_heads = 1, *head_dim = c->d_out; break;
    case ATTN_LAYER_MHA_WRAPPER: *head_dim = c->d_out; break;
    case ATTN_LAYER_MHA: *head_dim = c->d_out / c->num_heads; break;
    default: *head_dim = c->d_in / c->num_heads; break; /* gpt_mha, causal_mha */
    }
    return ATTN_OK;
}

attn_status attn_layer_forward_incremental(attn_layer *l, attn_kv_cache *kvc, const attn_forward_args *a) {
    if (!l || !kvc || !a || !a->x || !a->out) return ATTN_E_INVALID;
    const attn_layer_config *cf = &l->cfg;
    if (!kind_incremental(cf->kind) || a->train || a->mask || a->y) return ATTN_E_UNSUPPORTED;
    if (a->impl < ATTN_IMPL_AUTO || a->impl > ATTN_IMPL_FAST) return ATTN_E_INVALID;
    if (a->B < 1 || a->S < 0 || a->S > INT32_MAX) return ATTN_E_SHAPE;
    int64_t Htot, hd;
    attn_layer_kv_shape(l, &Htot, &hd);
    const attn_kv_cache_config *kc = attn_kv_cache_get_config(kvc);
    if (kc->batch != a->B || kc->kv_heads != Htot || kc->head_dim != hd || kc->v_head_dim != hd) return ATTN_E_SHAPE;
    for (int64_t b = 0; b < a->B; b++) { /* check the lengths before anything changes */
        int64_t len = attn_kv_cache_len(kvc, b);
        if (len + a->S > kc->capacity || (cf->context_length > 0 && len + a->S > cf->context_length))
            return ATTN_E_CONTEXT;
    }
    if (a->S == 0) return ATTN_OK;
    layer_cache *c = &l->cache;
    attn_layer_cache_clear(c); /* the incremental pass leaves nothing for backward */
    c->B = a->B, c->S = a->S, c->Sk = a->S, c->impl = a->impl, c->scale = layer_scale(cf);
    int64_t M = c->B * c->S, C = cf->d_in;
    wiring w;
    wire(l, &w, NULL);
    sdpa_group *groups = calloc((size_t)w.ngroups, sizeof *groups);
    int64_t *n = malloc((size_t)a->B * sizeof *n);
    attn_status st = groups && n ? ATTN_OK : ATTN_E_NOMEM;
    if (!st) wire(l, &w, groups);
    if (!st) st = alloc_buf(c, BUF_X, (size_t)(M * C), a->x);
    if (!st) st = alloc_buf(c, BUF_Q, (size_t)(M * w.w[BUF_Q]), NULL);
    if (!st) st = alloc_buf(c, BUF_K, (size_t)(M * w.w[BUF_K]), NULL);
    if (!st) st = alloc_buf(c, BUF_V, (size_t)(M * w.w[BUF_V]), NULL);
    if (!st) st = alloc_buf(c, BUF_CTX, (size_t)(M * w.w[BUF_CTX]), NULL);
    if (!st) {
        project(l, c);
        float *bufs[BUF_COUNT];
        memcpy(bufs, c->buf, sizeof bufs);
        attn_view q = opview(bufs, groups[0].q, c->S, hd), k = opview(bufs, groups[0].k, c->S, hd);
        attn_view v = opview(bufs, groups[0].v, c->S, hd), o = opview(bufs, groups[0].o, c->S, hd);
        for (int64_t b = 0; b < a->B; b++) n[b] = a->S;
        st = attn_kv_cache_append(kvc, n, k, v);
        if (!st) {
            attn_sdpa_desc d;
            attn_sdpa_desc_init(&d, a->B, Htot, a->S, 0, hd, hd);
            d.scale = c->scale;
            d.causal = ATTN_CAUSAL_BOTTOM_RIGHT; /* the chunk's queries are the last S tokens */
            d.impl = a->impl;
            st = attn_kv_cache_attend(kvc, &d, q, o, NULL);
            if (st) /* undo the append: the cache is as it was */
                for (int64_t b = 0; b < a->B; b++) attn_kv_cache_trim(kvc, b, attn_kv_cache_len(kvc, b) - a->S);
        }
    }
    if (!st) out_project(l, &w, c, a->out, M);
    free(groups), free(n);
    attn_layer_cache_clear(c);
    return st;
}

/* ---- backward ---------------------------------------------------------------- */

static const float *lse_at(const layer_cache *c, int gi) { return c->lse + lse_offset(c, gi); }

void attn_layer_zero_grad(attn_layer *l) {
    if (!l) return;
    for (int i = 0; i < l->n; i++)
        if (l->t[i].grad) memset(l->t[i].grad, 0, l->t[i].numel * sizeof(float));
}

/* Projections backward: parameter grads (+=) and dx, dy (written). */
static void project_bwd(attn_layer *l, layer_cache *c, float *const *gb, float *dx, float *dy) {
    const attn_layer_config *cf = &l->cfg;
    int64_t C = cf->d_in, O = cf->d_out, H = cf->num_heads, M = c->B * c->S, Mk = c->B * c->Sk;
    const float *x = c->buf[BUF_X];
    switch (cf->kind) {
    case ATTN_LAYER_SIMPLE: /* q = k = v = x */
        for (int64_t i = 0; dx && i < M * C; i++) dx[i] = gb[BUF_Q][i] + gb[BUF_K][i] + gb[BUF_V][i];
        break;
    case ATTN_LAYER_SA_V1:
        attn_matmul_bwd(x, C, T(l, "W_query", 0), gb[BUF_Q], O, dx, C, 0, G(l, "W_query", 0), M, C, O);
        attn_matmul_bwd(x, C, T(l, "W_key", 0), gb[BUF_K], O, dx, C, 1, G(l, "W_key", 0), M, C, O);
        attn_matmul_bwd(x, C, T(l, "W_value", 0), gb[BUF_V], O, dx, C, 1, G(l, "W_value", 0), M, C, O);
        break;
    case ATTN_LAYER_SA_V2:
    case ATTN_LAYER_CAUSAL:
    case ATTN_LAYER_MHA: {
        static const char *const nm[3] = {"W_query", "W_key", "W_value"};
        for (int i = 0; i < 3; i++) {
            char wn[32], bn[32];
            snprintf(wn, sizeof wn, "%s.weight", nm[i]);
            snprintf(bn, sizeof bn, "%s.bias", nm[i]);
            attn_linear_bwd(x, C, T(l, wn, 0), gb[BUF_Q + i], O, dx, C, i > 0, G(l, wn, 0), G(l, bn, 0), M, C, O);
        }
        break;
    }
    case ATTN_LAYER_MHA_WRAPPER:
    case ATTN_LAYER_GPT_MHA: {
        int wrap = cf->kind == ATTN_LAYER_MHA_WRAPPER;
        int64_t hs = wrap ? O : C / H, row = wrap ? H * O : C;
        static const char *const wn[3] = {"heads.%lld.W_query.weight", "heads.%lld.W_key.weight",
                                          "heads.%lld.W_value.weight"};
        static const char *const bn[3] = {"heads.%lld.W_query.bias", "heads.%lld.W_key.bias",
                                          "heads.%lld.W_value.bias"};
        static const char *const gw[3] = {"heads.%lld.query.weight", "heads.%lld.key.weight",
                                          "heads.%lld.value.weight"};
        static const char *const gbn[3] = {"heads.%lld.query.bias", "heads.%lld.key.bias", "heads.%lld.value.bias"};
        for (long long h = 0; h < H; h++)
            for (int i = 0; i < 3; i++) {
                const char *w = wrap ? wn[i] : gw[i], *b = wrap ? bn[i] : gbn[i];
                attn_linear_bwd(x, C, T(l, w, h), gb[BUF_Q + i] + h * hs, row, dx, C, h > 0 || i > 0, G(l, w, h),
                                G(l, b, h), M, C, hs);
            }
        break;
    }
    case ATTN_LAYER_SINGLE_HEAD:
        attn_linear_bwd(x, C, T(l, "Wqkv.weight", 0), gb[BUF_Q], 3 * (C / 4), dx, C, 0, G(l, "Wqkv.weight", 0),
                        G(l, "Wqkv.bias", 0), M, C, 3 * (C / 4));
        break;
    case ATTN_LAYER_FUSED_MHA:
    case ATTN_LAYER_BIDIRECTIONAL:
    case ATTN_LAYER_CAUSAL_MHA:
        attn_linear_bwd(x, C, T(l, "Wqkv.weight", 0), gb[BUF_Q], 3 * C, dx, C, 0, G(l, "Wqkv.weight", 0),
                        G(l, "Wqkv.bias", 0), M, C, 3 * C);
        break;
    case ATTN_LAYER_CROSS:
        attn_linear_bwd(x, C, T(l, "Wq.weight", 0), gb[BUF_Q], C, dx, C, 0, G(l, "Wq.weight", 0), G(l, "Wq.bias", 0), M,
                        C, C);
        attn_linear_bwd(c->buf[BUF_Y], C, T(l, "Wkv.weight", 0), gb[BUF_K], 2 * C, dy, C, 0, G(l, "Wkv.weight", 0),
                        G(l, "Wkv.bias", 0), Mk, C, 2 * C);
        break;
    default: break;
    }
}

attn_status attn_layer_backward(attn_layer *l, const attn_backward_args *a) {
    if (!l || !a || !a->dout) return ATTN_E_INVALID;
    layer_cache *c = &l->cache;
    if (!c->valid) return ATTN_E_STATE;
    const attn_layer_config *cf = &l->cfg;
    wiring w;
    wire(l, &w, NULL);
    int64_t M = c->B * c->S, W = attn_layer_out_width(l), C = cf->d_in;
    attn_status st = ATTN_OK;
    float *gb[BUF_COUNT] = {0};
    float *dpre = NULL;
    /* gradient buffers mirror the forward buffers; simple gets separate q/k/v */
    for (int b = BUF_Q; b <= BUF_CTX && !st; b++) {
        size_t n = (b == BUF_CTX && !w.has_out_proj) ? 0 : c->len[b];
        if (cf->kind == ATTN_LAYER_SIMPLE && b != BUF_CTX) n = (size_t)(M * C);
        if (n && !(gb[b] = calloc(n, sizeof(float)))) st = ATTN_E_NOMEM;
    }
    if (st) goto done;
    if (w.has_out_proj) {
        const char *pn = out_proj_name(cf->kind);
        char wn[32], bn[32];
        snprintf(wn, sizeof wn, "%s.weight", pn);
        snprintf(bn, sizeof bn, "%s.bias", pn);
        const float *dy = a->dout;
        if (c->out_drop.p > 0.0) { /* d(out_pre) = dout * keep * scale: the forward's mask */
            dpre = malloc((size_t)(M * W) * sizeof(float));
            if (!dpre) {
                st = ATTN_E_NOMEM;
                goto done;
            }
            attn_dropout_apply(&c->out_drop, a->dout, dpre);
            dy = dpre;
        }
        attn_linear_bwd(c->buf[BUF_CTX], w.w[BUF_CTX], T(l, wn, 0), dy, W, gb[BUF_CTX], w.w[BUF_CTX], 0, G(l, wn, 0),
                        G(l, bn, 0), M, w.w[BUF_CTX], W);
    }
    float *fw[BUF_COUNT], *bw[BUF_COUNT];
    memcpy(fw, c->buf, sizeof fw);
    memcpy(bw, gb, sizeof bw);
    if (!w.has_out_proj) bw[BUF_CTX] = (float *)a->dout; /* the SDPA output is the layer output */
    for (int gi = 0; gi < c->ngroups && !st; gi++) {
        const sdpa_group *g = &c->groups[gi];
        attn_sdpa_desc d;
        group_desc(c, g, &c->drops[gi], &d);
        sdpa_group gg = *g;
        if (cf->kind == ATTN_LAYER_SIMPLE) { /* x used thrice: one gradient buffer per use */
            gg.q.buf = BUF_Q, gg.k.buf = BUF_K, gg.v.buf = BUF_V;
        }
        st = attn_sdpa_backward(&d, opview(fw, g->q, c->S, g->hd), opview(fw, g->k, c->Sk, g->hd),
                                opview(fw, g->v, c->Sk, g->hd), opview(fw, g->o, c->S, g->hd),
                                opview(bw, g->o, c->S, g->hd), lse_at(c, gi), opview(bw, gg.q, c->S, g->hd),
                                opview(bw, gg.k, c->Sk, g->hd), opview(bw, gg.v, c->Sk, g->hd));
    }
    if (!st) project_bwd(l, c, gb, a->dx, a->dy);
done:
    for (int b = 0; b < BUF_COUNT; b++) free(gb[b]);
    free(dpre);
    return st;
}
