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

static const float *T(const attn_layer *l, const char *name) {
    layer_tensor *t = attn_layer_find(l, name);
    return t ? t->data : NULL;
}
static float *G(const attn_layer *l, const char *name) {
    layer_tensor *t = attn_layer_find(l, name);
    return t ? t->grad : NULL;
}

static attn_view opview(float *const *bufs, operand o, int64_t S, int64_t hd) {
    attn_view v = {bufs[o.buf] + o.col, S * o.row, hd, o.row};
    return v;
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
    d->math = c->math;
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

/* a->impl an attn_impl, or ATTN_E_INVALID naming it */
static attn_status impl_check(const attn_forward_args *a) {
    if (a->impl >= ATTN_IMPL_AUTO && a->impl <= ATTN_IMPL_FAST) return ATTN_OK;
    return attn_fail(ATTN_E_INVALID, "args impl = %d: not an attn_impl", (int)a->impl);
}

static attn_status check_args(const attn_layer *l, const attn_forward_args *a, int need_out) {
    const attn_layer_config *c = &l->cfg;
    const char *kind = attn_layer_kind_of(c->kind)->name;
    if (!a->x || (need_out && !a->out)) return attn_fail(ATTN_E_INVALID, "args->%s is NULL", a->x ? "out" : "x");
    if (a->B < 1 || a->S < 1 || a->B > INT32_MAX || a->S > INT32_MAX)
        return attn_fail(ATTN_E_SHAPE, "args B = %lld, S = %lld: each in [1, 2^31) expected", (long long)a->B,
                         (long long)a->S);
    unsigned flags = attn_layer_kind_of(c->kind)->flags;
    if (flags & K_CROSS) {
        if (!a->y) return attn_fail(ATTN_E_INVALID, "args->y is NULL: %s attends to y", kind);
        if (a->Sk < 1 || a->Sk > INT32_MAX)
            return attn_fail(ATTN_E_SHAPE, "args Sk = %lld: y's rows in [1, 2^31) expected", (long long)a->Sk);
    }
    if (a->mask && !(flags & K_TAKES_MASK))
        return attn_fail(ATTN_E_INVALID, "args->mask given: %s takes no mask", kind);
    if (impl_check(a)) return ATTN_E_INVALID;
    int64_t Sk = (flags & K_CROSS) ? a->Sk : a->S;
    if (c->context_length > 0 && (flags & K_CAUSAL) && (a->S > c->context_length || Sk > c->context_length))
        return attn_fail(ATTN_E_CONTEXT, "args %s = %lld: past the layer's context_length = %lld",
                         a->S > c->context_length ? "S" : "Sk", (long long)(a->S > c->context_length ? a->S : Sk),
                         (long long)c->context_length);
    if (a->train && (c->dropout > 0.0 || c->out_dropout > 0.0) && !a->gen)
        return attn_fail(ATTN_E_INVALID, "args->gen is NULL: training with dropout = %g, out_dropout = %g draws masks",
                         c->dropout, c->out_dropout);
    size_t n;
    int64_t width = 3 * c->d_in + 3 * c->d_out * c->num_heads;
    if (attn_mul3_size((size_t)a->B, (size_t)(a->S > Sk ? a->S : Sk), (size_t)width, &n) ||
        n > (SIZE_MAX / sizeof(float)) / 8)
        return attn_fail(ATTN_E_OVERFLOW, "args B = %lld, S = %lld: the activations' size overflows", (long long)a->B,
                         (long long)(a->S > Sk ? a->S : Sk));
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

/* the output projection's weight and bias names */
static void out_proj_names(const attn_layer *l, char *wn, char *bn) {
    const char *pn = attn_layer_kind_of(l->cfg.kind)->out_proj;
    snprintf(wn, LAYER_NAME_MAX, "%s.weight", pn);
    snprintf(bn, LAYER_NAME_MAX, "%s.bias", pn);
}

/* ctx (M rows) -> out: the output projection, or a copy for layers without one */
static void out_project(const attn_layer *l, const wiring *w, const layer_cache *c, float *out, int64_t M) {
    if (!w->has_out_proj) {
        memcpy(out, c->buf[BUF_CTX], c->len[BUF_CTX] * sizeof(float));
        return;
    }
    char wn[LAYER_NAME_MAX], bn[LAYER_NAME_MAX];
    out_proj_names(l, wn, bn);
    int64_t W = w->out_width;
    attn_linear_fwd(c->buf[BUF_CTX], w->w[BUF_CTX], T(l, wn), T(l, bn), out, W, M, w->w[BUF_CTX], W);
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
    const layer_kind *k = attn_layer_kind_of(cf->kind);
    c->Sk = (k->flags & K_CROSS) ? a->Sk : a->S;
    c->train = a->train;
    c->impl = a->impl;
    c->math = a->math;
    c->causal = (k->flags & K_CAUSAL) ? (cf->causal_align ? cf->causal_align : ATTN_CAUSAL_TOP_LEFT) : ATTN_CAUSAL_NONE;
    int64_t M = c->B * c->S, Mk = c->B * c->Sk, C = cf->d_in;
    wiring w;
    attn_layer_wire(cf, &w, NULL);
    c->scale = w.scale;
    c->ngroups = w.ngroups;
    c->groups = calloc((size_t)w.ngroups, sizeof *c->groups);
    c->drops = calloc((size_t)w.ngroups, sizeof *c->drops);
    if (!c->groups || !c->drops) st = ATTN_E_NOMEM;
    if (!st) attn_layer_wire(cf, &w, c->groups);
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
    k->project(l, c);
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
    attn_err_clear();
    if (!l || !a) return attn_fail(ATTN_E_INVALID, "%s is NULL", l ? "args" : "the layer");
    wiring w;
    attn_status st = forward_prepare(l, a, &w, 1);
    if (st) return st;
    const attn_layer_config *cf = &l->cfg;
    layer_cache *c = &l->cache;
    int64_t M = c->B * c->S, W = w.out_width;
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
        if (a->train && cf->out_dropout > 0.0 && (attn_layer_kind_of(cf->kind)->flags & K_OUT_DROPOUT)) {
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
    attn_layer_wire(&l->cfg, &w, NULL);
    if (w.ngroups == 1) attn_layer_wire(&l->cfg, &w, g);
    return w.ngroups == 1 ? g[0].H : w.ngroups; /* one head per group otherwise */
}

attn_status attn_layer_attention_weights(attn_layer *l, const attn_forward_args *a, float *scores, float *weights) {
    attn_err_clear();
    if (!l || !a || (!scores && !weights))
        return attn_fail(ATTN_E_INVALID, "%s",
                         !l   ? "the layer is NULL"
                         : !a ? "args is NULL"
                              : "scores and weights are NULL");
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

/* Every incremental kind keeps its heads side by side in the q/k/v/ctx
 * buffers (group gi's head h at column groups[gi].col + h * hd), so all heads
 * are one (B, Htot, S, hd) view of each buffer: Htot heads of the groups'
 * size. */
attn_status attn_layer_kv_shape(const attn_layer *l, int64_t *kv_heads, int64_t *head_dim) {
    if (!l || !kv_heads || !head_dim)
        return attn_fail(ATTN_E_INVALID, "%s is NULL", !l ? "the layer" : !kv_heads ? "kv_heads" : "head_dim");
    if (!(attn_layer_kind_of(l->cfg.kind)->flags & K_INCREMENTAL))
        return attn_fail(ATTN_E_UNSUPPORTED, "%s: no incremental decoding (no KV cache)",
                         attn_layer_kind_of(l->cfg.kind)->name);
    wiring w;
    attn_layer_wire(&l->cfg, &w, NULL);
    *kv_heads = attn_layer_attention_heads(l);
    *head_dim = w.w[BUF_CTX] / *kv_heads; /* ctx holds every head side by side */
    return ATTN_OK;
}

attn_status attn_layer_forward_incremental(attn_layer *l, attn_kv_cache *kvc, const attn_forward_args *a) {
    attn_err_clear();
    if (!l || !kvc || !a || !a->x || !a->out)
        return attn_fail(ATTN_E_INVALID, "%s is NULL",
                         !l      ? "the layer"
                         : !kvc  ? "the cache"
                         : !a    ? "args"
                         : !a->x ? "args->x"
                                 : "args->out");
    const attn_layer_config *cf = &l->cfg;
    const layer_kind *kd = attn_layer_kind_of(cf->kind);
    if (!(kd->flags & K_INCREMENTAL) || a->train || a->y || (a->mask && !(kd->flags & K_TAKES_MASK)))
        return attn_fail(ATTN_E_UNSUPPORTED, "%s incrementally: %s", kd->name,
                         !(kd->flags & K_INCREMENTAL) ? "not this kind (no KV cache)"
                         : a->train                   ? "args train = 1 (incremental steps do not train)"
                         : a->y                       ? "args->y given (self-attention only)"
                                                      : "args->mask given: this kind takes no mask");
    if (impl_check(a)) return ATTN_E_INVALID;
    if (a->B < 1 || a->S < 0 || a->S > INT32_MAX)
        return attn_fail(ATTN_E_SHAPE, "args B = %lld, S = %lld: B in [1, 2^31), S in [0, 2^31) expected",
                         (long long)a->B, (long long)a->S);
    int64_t Htot, hd;
    attn_layer_kv_shape(l, &Htot, &hd);
    const attn_kv_cache_config *kc = attn_kv_cache_get_config(kvc);
    if (kc->batch != a->B || kc->kv_heads != Htot || kc->head_dim != hd || kc->v_head_dim != hd)
        return attn_fail(ATTN_E_SHAPE,
                         "the cache's batch = %lld, kv_heads = %lld, head_dim = %lld, v_head_dim = %lld: the layer "
                         "wants B = %lld, %lld heads of %lld",
                         (long long)kc->batch, (long long)kc->kv_heads, (long long)kc->head_dim,
                         (long long)kc->v_head_dim, (long long)a->B, (long long)Htot, (long long)hd);
    for (int64_t b = 0; b < a->B; b++) { /* check the lengths before anything changes */
        int64_t len = attn_kv_cache_len(kvc, b);
        if (len + a->S > kc->capacity || (cf->context_length > 0 && len + a->S > cf->context_length))
            return attn_fail(ATTN_E_CONTEXT, "sequence %lld: %lld cached + S = %lld past the %s = %lld", (long long)b,
                             (long long)len, (long long)a->S,
                             len + a->S > kc->capacity ? "cache's capacity" : "layer's context_length",
                             (long long)(len + a->S > kc->capacity ? kc->capacity : cf->context_length));
        if (a->mask && a->Sk < len + a->S) /* the mask covers every cached position */
            return attn_fail(ATTN_E_SHAPE, "args Sk = %lld: the mask must cover sequence %lld's %lld positions",
                             (long long)a->Sk, (long long)b, (long long)(len + a->S));
    }
    if (a->S == 0) return ATTN_OK;
    layer_cache *c = &l->cache;
    attn_layer_cache_clear(c); /* the incremental pass leaves nothing for backward */
    wiring w;
    attn_layer_wire(cf, &w, NULL);
    c->B = a->B, c->S = a->S, c->Sk = a->S, c->impl = a->impl, c->scale = w.scale;
    int64_t M = c->B * c->S, C = cf->d_in;
    sdpa_group *groups = calloc((size_t)w.ngroups, sizeof *groups);
    int64_t *n = malloc((size_t)a->B * sizeof *n);
    attn_status st = groups && n ? ATTN_OK : ATTN_E_NOMEM;
    if (!st) attn_layer_wire(cf, &w, groups);
    if (!st) st = alloc_buf(c, BUF_X, (size_t)(M * C), a->x);
    if (!st) st = alloc_buf(c, BUF_Q, (size_t)(M * w.w[BUF_Q]), NULL);
    if (!st) st = alloc_buf(c, BUF_K, (size_t)(M * w.w[BUF_K]), NULL);
    if (!st) st = alloc_buf(c, BUF_V, (size_t)(M * w.w[BUF_V]), NULL);
    if (!st) st = alloc_buf(c, BUF_CTX, (size_t)(M * w.w[BUF_CTX]), NULL);
    if (!st) {
        kd->project(l, c);
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
            d.impl = a->impl, d.math = a->math;
            if (a->mask)
                d.key_mask = a->mask, d.key_mask_stride_b = a->Sk, d.key_mask_polarity = ATTN_MASK_TRUE_MEANS_MASKED;
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

attn_status attn_layer_backward(attn_layer *l, const attn_backward_args *a) {
    attn_err_clear();
    if (!l || !a || !a->dout)
        return attn_fail(ATTN_E_INVALID, "%s is NULL", !l ? "the layer" : !a ? "args" : "args->dout");
    layer_cache *c = &l->cache;
    if (!c->valid)
        return attn_fail(
            ATTN_E_STATE,
            "no attn_layer_forward to take the backward of (or an attention_weights or incremental call since)");
    const attn_layer_config *cf = &l->cfg;
    const layer_kind *k = attn_layer_kind_of(cf->kind);
    int shared = (k->flags & K_SHARED_QKV) != 0; /* q = k = v = x: one gradient buffer per use */
    wiring w;
    attn_layer_wire(cf, &w, NULL);
    int64_t M = c->B * c->S, W = w.out_width, C = cf->d_in;
    attn_status st = ATTN_OK;
    float *gb[BUF_COUNT] = {0};
    float *dpre = NULL;
    /* gradient buffers mirror the forward buffers; simple gets separate q/k/v */
    for (int b = BUF_Q; b <= BUF_CTX && !st; b++) {
        size_t n = (b == BUF_CTX && !w.has_out_proj) ? 0 : c->len[b];
        if (shared && b != BUF_CTX) n = (size_t)(M * C);
        if (n && !(gb[b] = calloc(n, sizeof(float)))) st = ATTN_E_NOMEM;
    }
    if (st) goto done;
    if (w.has_out_proj) {
        char wn[LAYER_NAME_MAX], bn[LAYER_NAME_MAX];
        out_proj_names(l, wn, bn);
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
        attn_linear_bwd(c->buf[BUF_CTX], w.w[BUF_CTX], T(l, wn), dy, W, gb[BUF_CTX], w.w[BUF_CTX], 0, G(l, wn),
                        G(l, bn), M, w.w[BUF_CTX], W);
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
        if (shared) { /* x used thrice: one gradient buffer per use */
            gg.q.buf = BUF_Q, gg.k.buf = BUF_K, gg.v.buf = BUF_V;
        }
        st = attn_sdpa_backward(&d, opview(fw, g->q, c->S, g->hd), opview(fw, g->k, c->Sk, g->hd),
                                opview(fw, g->v, c->Sk, g->hd), opview(fw, g->o, c->S, g->hd),
                                opview(bw, g->o, c->S, g->hd), lse_at(c, gi), opview(bw, gg.q, c->S, g->hd),
                                opview(bw, gg.k, c->Sk, g->hd), opview(bw, gg.v, c->Sk, g->hd));
    }
    if (!st) k->project_bwd(l, c, gb, a->dx, a->dy);
done:
    for (int b = 0; b < BUF_COUNT; b++) free(gb[b]);
    free(dpre);
    return st;
}
