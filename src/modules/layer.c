/* The seed layers: parameters under their PyTorch state_dict names, the seed
 * classes' init order, loading, and forward. See docs/LAYERS.md.
 *
 * Every layer is the same pipeline with different wiring:
 *   x (B,S,C) --projections--> q, k, v in row buffers (heads side by side)
 *     --core SDPA per head group--> ctx (B,S,H*hd)
 *     --optional output projection + output dropout--> out
 * The wiring (which weight feeds which buffer, scale, mask, dropout order) is
 * each kind's entry in the table of kinds.c. */
#include "layer_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *attn_layer_kind_name(attn_layer_kind k) {
    const layer_kind *e = attn_layer_kind_of(k);
    return e ? e->name : NULL;
}

attn_status attn_layer_kind_parse(const char *name, attn_layer_kind *out) {
    if (!name || !out) return attn_fail(ATTN_E_INVALID, "%s is NULL", name ? "out" : "name");
    for (int k = 0; k < ATTN_LAYER_KIND_COUNT; k++)
        if (strcmp(name, attn_layer_kind_of((attn_layer_kind)k)->name) == 0) {
            *out = (attn_layer_kind)k;
            return ATTN_OK;
        }
    return attn_fail(ATTN_E_INVALID, "name = \"%.64s\": not a layer kind (attn layers lists them)", name);
}

void attn_layer_config_default(attn_layer_config *c, attn_layer_kind kind, int64_t d_in, int64_t d_out,
                               int64_t num_heads) {
    if (!c) return;
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->d_in = d_in;
    c->d_out = d_out;
    c->num_heads = num_heads > 0 ? num_heads : 1;
    const layer_kind *k = attn_layer_kind_of(kind);
    c->qkv_bias = k && (k->flags & K_QKV_BIAS); /* Warner layers default bias=True; Raschka/nanoGPT q/k/v have none */
    c->out_bias = 1;
    c->causal_align = ATTN_CAUSAL_TOP_LEFT;
}

/* ---- tensor table ------------------------------------------------------- */

static void fill_causal_buffer(layer_tensor *t, int lower_ones) {
    int64_t n = t->shape[0];
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++)
            t->data[i * n + j] = lower_ones ? (j <= i ? 1.0f : 0.0f) : (j > i ? 1.0f : 0.0f);
}

/* Registers tensors in state_dict order (the kind's entry), then fills the
 * causal buffers. */
static attn_status build(attn_layer *l) {
    const layer_kind *k = attn_layer_kind_of(l->cfg.kind);
    attn_status st = k->build(l);
    if (st) return st;
    for (int i = 0; i < l->n; i++)
        if (l->t[i].is_buffer) fill_causal_buffer(&l->t[i], (k->flags & K_TRIL) != 0);
    return ATTN_OK;
}

static attn_status check_config(const attn_layer_config *c, char *detail, size_t dl) {
    if (!c || c->kind < 0 || c->kind >= ATTN_LAYER_KIND_COUNT) {
        if (c)
            attn_layer_detail(detail, dl, "kind = %d: not a layer kind (0 .. %d)", (int)c->kind,
                              ATTN_LAYER_KIND_COUNT - 1);
        else
            attn_layer_detail(detail, dl, "the config is NULL");
        return ATTN_E_INVALID;
    }
    if (c->d_in < 1 || c->d_in > INT32_MAX || c->d_out < 1 || c->d_out > INT32_MAX) {
        attn_layer_detail(detail, dl, "d_in = %lld, d_out = %lld: widths in [1, 2^31) expected", (long long)c->d_in,
                          (long long)c->d_out);
        return ATTN_E_SHAPE;
    }
    if (c->num_heads < 1 || c->num_heads > 65536) {
        attn_layer_detail(detail, dl, "num_heads = %lld: in [1, 65536] expected", (long long)c->num_heads);
        return ATTN_E_SHAPE;
    }
    if (!(c->dropout >= 0.0 && c->dropout <= 1.0) || !(c->out_dropout >= 0.0 && c->out_dropout <= 1.0)) {
        attn_layer_detail(detail, dl, "dropout = %g, out_dropout = %g: probabilities in [0, 1] expected", c->dropout,
                          c->out_dropout);
        return ATTN_E_INVALID;
    }
    if (c->causal_align != 0 && c->causal_align != ATTN_CAUSAL_TOP_LEFT &&
        c->causal_align != ATTN_CAUSAL_BOTTOM_RIGHT) {
        attn_layer_detail(detail, dl, "causal_align = %d: 0, ATTN_CAUSAL_TOP_LEFT or ATTN_CAUSAL_BOTTOM_RIGHT expected",
                          (int)c->causal_align);
        return ATTN_E_INVALID;
    }
    if (c->context_length < 0 || c->context_length > (1 << 20)) {
        attn_layer_detail(detail, dl, "context_length = %lld: in [0, 2^20] expected", (long long)c->context_length);
        return ATTN_E_SHAPE;
    }
    if (attn_layer_kind_of(c->kind)->buffer && c->context_length < 1) {
        attn_layer_detail(detail, dl, "%s needs a context length (its mask buffer size)",
                          attn_layer_kind_of(c->kind)->name);
        return ATTN_E_SHAPE;
    }
    const layer_kind *k = attn_layer_kind_of(c->kind);
    int64_t C = c->d_in, H = c->num_heads;
    if (k->head_div && C < k->head_div) {
        attn_layer_detail(detail, dl, "%s: hidden size must be >= %d (head size is C//%d)", k->name, k->head_div,
                          k->head_div);
        return ATTN_E_SHAPE;
    }
    if ((k->flags & K_DIV_IN) && C % H) {
        attn_layer_detail(detail, dl, "%s: width %lld must be divisible by the number of heads (%lld)", k->name,
                          (long long)C, (long long)H);
        return ATTN_E_SHAPE;
    }
    if ((k->flags & K_DIV_OUT) && c->d_out % H) {
        attn_layer_detail(detail, dl, "%s: d_out (%lld) must be divisible by the number of heads (%lld)", k->name,
                          (long long)c->d_out, (long long)H);
        return ATTN_E_SHAPE;
    }
    if ((k->flags & K_SAME_WIDTH) && c->d_out != C) {
        attn_layer_detail(detail, dl, "%s: d_out = %lld must equal d_in = %lld", k->name, (long long)c->d_out,
                          (long long)C);
        return ATTN_E_SHAPE;
    }
    return ATTN_OK;
}

void attn_layer_free(attn_layer *l) {
    if (!l) return;
    for (int i = 0; i < l->n; i++) {
        free(l->t[i].data);
        free(l->t[i].grad);
    }
    free(l->t);
    attn_layer_cache_clear(&l->cache);
    free(l);
}

static attn_status create(const attn_layer_config *c, attn_layer **out, char *detail, size_t dl) {
    attn_status st = check_config(c, detail, dl);
    if (st) return st;
    attn_layer *l = calloc(1, sizeof *l);
    if (!l) return ATTN_E_NOMEM;
    l->cfg = *c;
    if (l->cfg.causal_align == 0) l->cfg.causal_align = ATTN_CAUSAL_TOP_LEFT;
    if (attn_layer_kind_of(l->cfg.kind)->head_div) l->cfg.num_heads = 1; /* one head of C / head_div */
    st = build(l);
    if (st) {
        attn_layer_free(l);
        return st;
    }
    *out = l;
    return ATTN_OK;
}

attn_status attn_layer_create(const attn_layer_config *c, attn_layer **out) {
    attn_err_clear();
    if (!out) return attn_fail(ATTN_E_INVALID, "out is NULL");
    *out = NULL;
    return create(c, out, NULL, 0);
}

const attn_layer_config *attn_layer_get_config(const attn_layer *l) { return l ? &l->cfg : NULL; }

int attn_layer_tensor_count(const attn_layer *l) { return l ? l->n : 0; }

attn_status attn_layer_tensor(const attn_layer *l, int i, attn_tensor_info *out) {
    if (!l || !out) return attn_fail(ATTN_E_INVALID, "%s is NULL", l ? "out" : "the layer");
    if (i < 0 || i >= l->n) return attn_fail(ATTN_E_INVALID, "i = %d: the layer has %d tensors", i, l->n);
    const layer_tensor *t = &l->t[i];
    memset(out, 0, sizeof *out);
    out->name = t->name;
    out->ndim = t->ndim;
    out->shape[0] = t->shape[0];
    out->shape[1] = t->shape[1];
    out->is_buffer = t->is_buffer;
    out->data = t->data;
    out->grad = t->grad;
    return ATTN_OK;
}

int64_t attn_layer_out_width(const attn_layer *l) {
    if (!l) return 0;
    wiring w;
    attn_layer_wire(&l->cfg, &w, NULL);
    return w.out_width;
}

/* ---- init (the seed classes' __init__ order) ---------------------------- */

attn_status attn_layer_init(attn_layer *l, attn_generator *g) {
    attn_err_clear();
    if (!l || !g) return attn_fail(ATTN_E_INVALID, "%s is NULL", l ? "the generator" : "the layer");
    return attn_layer_kind_of(l->cfg.kind)->init(l, g);
}

/* ---- save / load --------------------------------------------------------- */

attn_status attn_layer_save(const attn_layer *l, const char *path) {
    if (!l || !path) return attn_fail(ATTN_E_INVALID, "%s is NULL", l ? "path" : "the layer");
    attn_st_writer *w;
    attn_status st = attn_st_writer_new(&w);
    for (int i = 0; st == ATTN_OK && i < l->n; i++)
        st = attn_st_writer_add(w, l->t[i].name, ATTN_DTYPE_F32, l->t[i].ndim, l->t[i].shape, l->t[i].data);
    if (st == ATTN_OK) st = attn_st_writer_save(w, path);
    attn_st_writer_free(w);
    return st;
}

static attn_status load_buffer(layer_tensor *t, const attn_st_file *f, int lower_ones, char *detail, size_t dl) {
    attn_dtype dt;
    attn_st_info(f, t->name, &dt, NULL, NULL);
    attn_status st;
    float *tmp = malloc(t->numel * sizeof *tmp);
    if (!tmp) return ATTN_E_NOMEM;
    if (dt == ATTN_DTYPE_BOOL || dt == ATTN_DTYPE_U8) {
        uint8_t *u = malloc(t->numel ? t->numel : 1);
        st = u ? attn_st_read_u8(f, t->name, u, t->numel) : ATTN_E_NOMEM;
        for (size_t i = 0; st == ATTN_OK && i < t->numel; i++) tmp[i] = u[i] ? 1.0f : 0.0f;
        free(u);
    } else {
        st = attn_st_read_f32(f, t->name, tmp, t->numel);
    }
    if (st != ATTN_OK) {
        attn_layer_detail(detail, dl, "cannot read buffer '%s': %s", t->name, attn_status_string(st));
        free(tmp);
        return st;
    }
    int64_t n = t->shape[0];
    for (int64_t i = 0; i < n && st == ATTN_OK; i++)
        for (int64_t j = 0; j < n; j++) {
            float want = lower_ones ? (j <= i ? 1.0f : 0.0f) : (j > i ? 1.0f : 0.0f);
            if (tmp[i * n + j] != want) {
                attn_layer_detail(detail, dl, "buffer '%s' is not the causal %s: element [%lld, %lld] is %g", t->name,
                                  lower_ones ? "tril(ones)" : "triu(ones, diagonal=1)", (long long)i, (long long)j,
                                  (double)tmp[i * n + j]);
                st = ATTN_E_BUFFER;
                break;
            }
        }
    free(tmp);
    return st;
}

attn_status attn_layer_load_ex(const attn_layer_config *c, const attn_st_file *f, attn_layer **out, char *detail,
                               size_t dl) {
    attn_err_clear();
    attn_layer_detail(detail, dl, "%s", "");
    if (!c || !f || !out) return attn_fail(ATTN_E_INVALID, "%s is NULL", !c ? "the config" : !f ? "the file" : "out");
    *out = NULL;
    attn_layer_config cfg = *c;
    if (cfg.kind < 0 || cfg.kind >= ATTN_LAYER_KIND_COUNT) {
        attn_layer_detail(detail, dl, "kind = %d: not a layer kind (0 .. %d)", (int)cfg.kind,
                          ATTN_LAYER_KIND_COUNT - 1);
        return ATTN_E_INVALID;
    }
    if (cfg.num_heads < 1) cfg.num_heads = 1;
    const layer_kind *k = attn_layer_kind_of(cfg.kind);
    attn_status st = k->infer(&cfg, f, detail, dl); /* widths, biases, heads, context from the file */
    if (st) return st;
    attn_layer *l = NULL;
    st = create(&cfg, &l, detail, dl);
    if (st) return st;
    /* Every expected tensor must be present with its exact shape ... */
    for (int i = 0; i < l->n && st == ATTN_OK; i++) {
        layer_tensor *t = &l->t[i];
        int nd;
        int64_t sh[ATTN_MAX_DIMS];
        st = attn_st_info(f, t->name, NULL, &nd, sh);
        if (st == ATTN_E_NOT_FOUND) {
            attn_layer_detail(detail, dl, "missing tensor '%s'", t->name);
            break;
        }
        if (nd != t->ndim || sh[0] != t->shape[0] || (nd > 1 && sh[1] != t->shape[1])) {
            attn_layer_detail(detail, dl, "tensor '%s' has shape (%lld%s%lld), expected (%lld%s%lld)", t->name,
                              (long long)sh[0], nd > 1 ? ", " : "", nd > 1 ? (long long)sh[1] : 0LL,
                              (long long)t->shape[0], t->ndim > 1 ? ", " : "",
                              t->ndim > 1 ? (long long)t->shape[1] : 0LL);
            st = ATTN_E_SHAPE;
            break;
        }
        if (t->is_buffer) {
            st = load_buffer(t, f, (k->flags & K_TRIL) != 0, detail, dl);
        } else {
            st = attn_st_read_f32(f, t->name, t->data, t->numel);
            if (st) attn_layer_detail(detail, dl, "cannot read tensor '%s': %s", t->name, attn_status_string(st));
        }
    }
    /* ... and nothing else may be (load_state_dict(strict=True)). */
    for (int i = 0; st == ATTN_OK && i < attn_st_count(f); i++) {
        const char *name = attn_st_name(f, i);
        if (!attn_layer_find(l, name)) {
            attn_layer_detail(detail, dl, "unexpected tensor '%s' for layer %s", name, k->name);
            st = ATTN_E_FORMAT;
        }
    }
    if (st) {
        attn_layer_free(l);
        return st;
    }
    *out = l;
    return ATTN_OK;
}

attn_status attn_layer_load(const attn_layer_config *c, const attn_st_file *f, attn_layer **out) {
    return attn_layer_load_ex(c, f, out, NULL, 0);
}
