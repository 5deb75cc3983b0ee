/* Forward pass of every seed layer: projections (CBLAS), the core SDPA per
 * head group, output projection and dropout, drawing random numbers in the
 * same order as the seed classes' forward. */
#include "layer_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One core SDPA call: H heads of size hd laid side by side in row buffers
 * (token rows of length *_row; head h starts at column h*hd). */
typedef struct sdpa_group {
    const float *q, *k, *v;
    int64_t q_row, k_row, v_row;
    float *o;
    int64_t o_row;
    int64_t H, hd;
} sdpa_group;

typedef struct fwd_ctx {
    const attn_layer *l;
    const attn_forward_args *a;
    int64_t B, Sq, Sk;
    float scale;
    attn_causal causal;
} fwd_ctx;

static attn_view row_view(const float *base, int64_t S, int64_t row, int64_t hd) {
    attn_view v = {(float *)base, S * row, hd, row};
    return v;
}

/* Runs one group; draws its attention dropout (one nn.Dropout call over
 * (B, H, Sq, Sk)) when training. */
static attn_status run_group(const fwd_ctx *c, const sdpa_group *g, double p) {
    attn_sdpa_desc d;
    memset(&d, 0, sizeof d);
    d.B = c->B;
    d.H = g->H;
    d.Sq = c->Sq;
    d.Sk = c->Sk;
    d.D = d.Dv = g->hd;
    d.scale = c->scale;
    d.causal = c->causal;
    d.impl = c->a->impl;
    if (c->a->mask) {
        d.key_mask = c->a->mask;
        d.key_mask_stride_b = c->Sk;
        d.key_mask_polarity = ATTN_MASK_TRUE_MEANS_MASKED;
    }
    attn_dropout drop;
    memset(&drop, 0, sizeof drop);
    int use_drop = c->a->train && p > 0.0;
    if (use_drop) {
        size_t n;
        const int64_t dims[4] = {c->B, g->H, c->Sq, c->Sk};
        if (attn_numel(4, dims, &n)) return ATTN_E_OVERFLOW;
        attn_status st = attn_dropout_begin(c->a->gen, p, n, &drop);
        if (st) return st;
        d.dropout = &drop;
    }
    attn_status st = attn_sdpa_forward(&d, row_view(g->q, c->Sq, g->q_row, g->hd),
                                       row_view(g->k, c->Sk, g->k_row, g->hd), row_view(g->v, c->Sk, g->v_row, g->hd),
                                       row_view(g->o, c->Sq, g->o_row, g->hd), NULL);
    attn_dropout_end(&drop);
    return st;
}

static const float *T(const attn_layer *l, const char *name) {
    layer_tensor *t = attn_layer_find(l, name);
    return t ? t->data : NULL;
}

static attn_status out_dropout(const fwd_ctx *c, float *out, size_t n) {
    if (!c->a->train || c->l->cfg.out_dropout <= 0.0) return ATTN_OK;
    return attn_dropout_tensor(c->a->gen, c->l->cfg.out_dropout, out, out, n);
}

static attn_status check_args(const attn_layer *l, const attn_forward_args *a) {
    const attn_layer_config *c = &l->cfg;
    if (!a->x || !a->out || a->B < 1 || a->S < 1) return a->x && a->out ? ATTN_E_SHAPE : ATTN_E_INVALID;
    if (a->B > INT32_MAX || a->S > INT32_MAX) return ATTN_E_SHAPE;
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
    if (attn_mul3_size((size_t)a->B, (size_t)(a->S > Sk ? a->S : Sk), (size_t)(3 * c->d_in + 3 * c->d_out), &n) ||
        n > (SIZE_MAX / sizeof(float)) / 4)
        return ATTN_E_OVERFLOW;
    return ATTN_OK;
}

attn_status attn_layer_forward(attn_layer *l, const attn_forward_args *a) {
    if (!l || !a) return ATTN_E_INVALID;
    attn_status st = check_args(l, a);
    if (st) return st;
    const attn_layer_config *cf = &l->cfg;
    int64_t B = a->B, S = a->S, C = cf->d_in, O = cf->d_out, H = cf->num_heads;
    int64_t Sk = cf->kind == ATTN_LAYER_CROSS ? a->Sk : S;
    int64_t M = B * S, Mk = B * Sk;
    fwd_ctx c = {l, a, B, S, Sk, 1.0f, ATTN_CAUSAL_NONE};
    if (attn_kind_is_causal(cf->kind)) c.causal = cf->causal_align ? cf->causal_align : ATTN_CAUSAL_TOP_LEFT;

    /* scratch: up to 3 projection buffers + context, all (M or Mk) x width */
    int64_t wq = 0, wk = 0, ctxw = 0;
    switch (cf->kind) {
    case ATTN_LAYER_SIMPLE: break;
    case ATTN_LAYER_SA_V1:
    case ATTN_LAYER_SA_V2:
    case ATTN_LAYER_CAUSAL:
    case ATTN_LAYER_MHA_WRAPPER: wq = wk = O; break;
    case ATTN_LAYER_MHA: wq = wk = ctxw = O; break;
    case ATTN_LAYER_GPT_MHA: wq = wk = C / H; ctxw = C; break;
    case ATTN_LAYER_SINGLE_HEAD: wq = 3 * (C / 4); ctxw = C / 4; break;
    case ATTN_LAYER_FUSED_MHA:
    case ATTN_LAYER_BIDIRECTIONAL:
    case ATTN_LAYER_CAUSAL_MHA: wq = 3 * C; ctxw = C; break;
    case ATTN_LAYER_CROSS: wq = C; wk = 2 * C; ctxw = C; break;
    default: return ATTN_E_INVALID;
    }
    int separate_qkv = cf->kind == ATTN_LAYER_SA_V1 || cf->kind == ATTN_LAYER_SA_V2 || cf->kind == ATTN_LAYER_CAUSAL ||
                       cf->kind == ATTN_LAYER_MHA_WRAPPER || cf->kind == ATTN_LAYER_MHA || cf->kind == ATTN_LAYER_GPT_MHA;
    size_t nq = (size_t)(M * wq), nk = separate_qkv ? (size_t)(Mk * wk) : (cf->kind == ATTN_LAYER_CROSS ? (size_t)(Mk * wk) : 0);
    size_t nv = separate_qkv ? (size_t)(Mk * wk) : 0, nctx = (size_t)(M * ctxw);
    float *bq = nq ? malloc(nq * sizeof(float)) : NULL;
    float *bk = nk ? malloc(nk * sizeof(float)) : NULL;
    float *bv = nv ? malloc(nv * sizeof(float)) : NULL;
    float *bctx = nctx ? malloc(nctx * sizeof(float)) : NULL;
    if ((nq && !bq) || (nk && !bk) || (nv && !bv) || (nctx && !bctx)) {
        st = ATTN_E_NOMEM;
        goto done;
    }
    const float *x = a->x;
    float *out = a->out;
    char n1[LAYER_NAME_MAX], n2[LAYER_NAME_MAX];
    sdpa_group g;
    memset(&g, 0, sizeof g);

    switch (cf->kind) {
    case ATTN_LAYER_SIMPLE:
        g = (sdpa_group){x, x, x, C, C, C, out, C, 1, C};
        st = run_group(&c, &g, 0.0);
        break;
    case ATTN_LAYER_SA_V1:
        attn_matmul_fwd(x, T(l, "W_query"), bq, M, C, O);
        attn_matmul_fwd(x, T(l, "W_key"), bk, M, C, O);
        attn_matmul_fwd(x, T(l, "W_value"), bv, M, C, O);
        c.scale = attn_default_scale(O);
        g = (sdpa_group){bq, bk, bv, O, O, O, out, O, 1, O};
        st = run_group(&c, &g, 0.0);
        break;
    case ATTN_LAYER_SA_V2:
    case ATTN_LAYER_CAUSAL:
    case ATTN_LAYER_MHA:
        attn_linear_fwd(x, T(l, "W_query.weight"), T(l, "W_query.bias"), bq, M, C, O);
        attn_linear_fwd(x, T(l, "W_key.weight"), T(l, "W_key.bias"), bk, M, C, O);
        attn_linear_fwd(x, T(l, "W_value.weight"), T(l, "W_value.bias"), bv, M, C, O);
        if (cf->kind != ATTN_LAYER_MHA) {
            c.scale = attn_default_scale(O);
            g = (sdpa_group){bq, bk, bv, O, O, O, out, O, 1, O};
            st = run_group(&c, &g, cf->kind == ATTN_LAYER_CAUSAL ? cf->dropout : 0.0);
            break;
        }
        c.scale = attn_default_scale(O / H);
        g = (sdpa_group){bq, bk, bv, O, O, O, bctx, O, H, O / H};
        st = run_group(&c, &g, cf->dropout);
        if (!st) attn_linear_fwd(bctx, T(l, "out_proj.weight"), T(l, "out_proj.bias"), out, M, O, O);
        break;
    case ATTN_LAYER_MHA_WRAPPER:
        c.scale = attn_default_scale(O);
        for (int64_t h = 0; h < H && !st; h++) {
            static const char *const nm[3] = {"W_query", "W_key", "W_value"};
            float *dst[3] = {bq, bk, bv};
            for (int i = 0; i < 3; i++) {
                snprintf(n1, sizeof n1, "heads.%lld.%s.weight", (long long)h, nm[i]);
                snprintf(n2, sizeof n2, "heads.%lld.%s.bias", (long long)h, nm[i]);
                attn_linear_fwd(x, T(l, n1), T(l, n2), dst[i], M, C, O);
            }
            g = (sdpa_group){bq, bk, bv, O, O, O, out + h * O, H * O, 1, O};
            st = run_group(&c, &g, cf->dropout);
        }
        break;
    case ATTN_LAYER_GPT_MHA: {
        int64_t hs = C / H;
        c.scale = (float)pow((double)C, -0.5); /* the seed's C**-0.5 with C = n_embd */
        for (int64_t h = 0; h < H && !st; h++) {
            static const char *const nm[3] = {"query", "key", "value"};
            float *dst[3] = {bq, bk, bv};
            for (int i = 0; i < 3; i++) {
                snprintf(n1, sizeof n1, "heads.%lld.%s.weight", (long long)h, nm[i]);
                snprintf(n2, sizeof n2, "heads.%lld.%s.bias", (long long)h, nm[i]);
                attn_linear_fwd(x, T(l, n1), T(l, n2), dst[i], M, C, hs);
            }
            g = (sdpa_group){bq, bk, bv, hs, hs, hs, bctx + h * hs, C, 1, hs};
            st = run_group(&c, &g, cf->dropout);
        }
        if (!st) {
            attn_linear_fwd(bctx, T(l, "proj.weight"), T(l, "proj.bias"), out, M, C, C);
            st = out_dropout(&c, out, (size_t)(M * C));
        }
        break;
    }
    case ATTN_LAYER_SINGLE_HEAD: {
        int64_t hs = C / 4;
        attn_linear_fwd(x, T(l, "Wqkv.weight"), T(l, "Wqkv.bias"), bq, M, C, 3 * hs);
        c.scale = attn_default_scale(hs);
        g = (sdpa_group){bq, bq + hs, bq + 2 * hs, 3 * hs, 3 * hs, 3 * hs, bctx, hs, 1, hs};
        st = run_group(&c, &g, 0.0);
        if (!st) attn_linear_fwd(bctx, T(l, "Wo.weight"), T(l, "Wo.bias"), out, M, hs, C);
        break;
    }
    case ATTN_LAYER_FUSED_MHA:
    case ATTN_LAYER_BIDIRECTIONAL:
    case ATTN_LAYER_CAUSAL_MHA:
    case ATTN_LAYER_CROSS: {
        int64_t hs = C / H;
        const float *q, *k, *v;
        int64_t qr, kr;
        if (cf->kind == ATTN_LAYER_CROSS) {
            attn_linear_fwd(x, T(l, "Wq.weight"), T(l, "Wq.bias"), bq, M, C, C);
            attn_linear_fwd(a->y, T(l, "Wkv.weight"), T(l, "Wkv.bias"), bk, Mk, C, 2 * C);
            q = bq, k = bk, v = bk + C, qr = C, kr = 2 * C;
        } else {
            attn_linear_fwd(x, T(l, "Wqkv.weight"), T(l, "Wqkv.bias"), bq, M, C, 3 * C);
            q = bq, k = bq + C, v = bq + 2 * C, qr = kr = 3 * C;
        }
        c.scale = attn_default_scale(hs);
        g = (sdpa_group){q, k, v, qr, kr, kr, bctx, C, H, hs};
        st = run_group(&c, &g, cf->dropout);
        if (!st) {
            attn_linear_fwd(bctx, T(l, "Wo.weight"), T(l, "Wo.bias"), out, M, C, C);
            st = out_dropout(&c, out, (size_t)(M * C));
        }
        break;
    }
    default: st = ATTN_E_INVALID;
    }
done:
    free(bq);
    free(bk);
    free(bv);
    free(bctx);
    return st;
}
