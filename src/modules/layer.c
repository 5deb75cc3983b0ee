/* The seed layers: parameters under their PyTorch state_dict names, the seed
 * classes' init order, loading, and forward. See docs/LAYERS.md.
 *
 * Every layer is the same pipeline with different wiring:
 *   x (B,S,C) --projections--> q, k, v in row buffers (heads side by side)
 *     --core SDPA per head group--> ctx (B,S,H*hd)
 *     --optional output projection + output dropout--> out
 * The wiring (which weight feeds which buffer, scale, mask, dropout order) is
 * decided per kind below. */
#include "layer_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[ATTN_LAYER_KIND_COUNT] = {
    "simple",  "sa_v1",       "sa_v2",     "causal",        "mha_wrapper", "mha",
    "gpt_mha", "single_head", "fused_mha", "bidirectional", "causal_mha",  "cross",
};

const char *attn_layer_kind_name(attn_layer_kind k) {
    return (k >= 0 && k < ATTN_LAYER_KIND_COUNT) ? kind_names[k] : NULL;
}

attn_status attn_layer_kind_parse(const char *name, attn_layer_kind *out) {
    if (!name || !out) return ATTN_E_INVALID;
    for (int k = 0; k < ATTN_LAYER_KIND_COUNT; k++)
        if (strcmp(name, kind_names[k]) == 0) {
            *out = (attn_layer_kind)k;
            return ATTN_OK;
        }
    return ATTN_E_INVALID;
}

static int kind_warner(attn_layer_kind k) {
    return k == ATTN_LAYER_SINGLE_HEAD || k == ATTN_LAYER_FUSED_MHA || k == ATTN_LAYER_BIDIRECTIONAL ||
           k == ATTN_LAYER_CAUSAL_MHA || k == ATTN_LAYER_CROSS;
}

void attn_layer_config_default(attn_layer_config *c, attn_layer_kind kind, int64_t d_in, int64_t d_out,
                               int64_t num_heads) {
    if (!c) return;
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->d_in = d_in;
    c->d_out = d_out;
    c->num_heads = num_heads > 0 ? num_heads : 1;
    c->qkv_bias = kind_warner(kind); /* Warner layers default bias=True; Raschka/nanoGPT q/k/v have none */
    c->out_bias = 1;
    c->causal_align = ATTN_CAUSAL_TOP_LEFT;
}

/* ---- tensor table ------------------------------------------------------- */

static void set_detail(char *buf, size_t len, const char *fmt, ...) {
    if (!buf || !len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

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

/* nn.Linear(in, out, bias) under prefix: prefix.weight (out,in) [prefix.bias (out)] */
static attn_status add_linear(attn_layer *l, const char *prefix, int64_t in, int64_t out, int bias) {
    char name[LAYER_NAME_MAX];
    snprintf(name, sizeof name, "%s.weight", prefix);
    attn_status st = add_tensor(l, name, 2, out, in, 0);
    if (st == ATTN_OK && bias) {
        snprintf(name, sizeof name, "%s.bias", prefix);
        st = add_tensor(l, name, 1, out, 0, 0);
    }
    return st;
}

static void fill_causal_buffer(layer_tensor *t, int lower_ones) {
    int64_t n = t->shape[0];
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++)
            t->data[i * n + j] = lower_ones ? (j <= i ? 1.0f : 0.0f) : (j > i ? 1.0f : 0.0f);
}

/* Registers tensors in state_dict order (a module's own buffers before its
 * children). */
static attn_status build(attn_layer *l) {
    const attn_layer_config *c = &l->cfg;
    int64_t C = c->d_in, O = c->d_out, H = c->num_heads, ctx = c->context_length;
    int qb = c->qkv_bias;
    attn_status st = ATTN_OK;
    char p[LAYER_NAME_MAX];
    switch (c->kind) {
    case ATTN_LAYER_SIMPLE: break;
    case ATTN_LAYER_SA_V1:
        if ((st = add_tensor(l, "W_query", 2, C, O, 0))) return st;
        if ((st = add_tensor(l, "W_key", 2, C, O, 0))) return st;
        st = add_tensor(l, "W_value", 2, C, O, 0);
        break;
    case ATTN_LAYER_CAUSAL:
        if ((st = add_tensor(l, "mask", 2, ctx, ctx, 1))) return st;
        /* fall through */
    case ATTN_LAYER_SA_V2:
        if ((st = add_linear(l, "W_query", C, O, qb))) return st;
        if ((st = add_linear(l, "W_key", C, O, qb))) return st;
        st = add_linear(l, "W_value", C, O, qb);
        break;
    case ATTN_LAYER_MHA_WRAPPER:
        for (int64_t h = 0; h < H && !st; h++) {
            snprintf(p, sizeof p, "heads.%lld.mask", (long long)h);
            if ((st = add_tensor(l, p, 2, ctx, ctx, 1))) return st;
            snprintf(p, sizeof p, "heads.%lld.W_query", (long long)h);
            if ((st = add_linear(l, p, C, O, qb))) return st;
            snprintf(p, sizeof p, "heads.%lld.W_key", (long long)h);
            if ((st = add_linear(l, p, C, O, qb))) return st;
            snprintf(p, sizeof p, "heads.%lld.W_value", (long long)h);
            st = add_linear(l, p, C, O, qb);
        }
        break;
    case ATTN_LAYER_MHA:
        if ((st = add_tensor(l, "mask", 2, ctx, ctx, 1))) return st;
        if ((st = add_linear(l, "W_query", C, O, qb))) return st;
        if ((st = add_linear(l, "W_key", C, O, qb))) return st;
        if ((st = add_linear(l, "W_value", C, O, qb))) return st;
        st = add_linear(l, "out_proj", O, O, c->out_bias);
        break;
    case ATTN_LAYER_GPT_MHA:
        for (int64_t h = 0; h < H && !st; h++) {
            snprintf(p, sizeof p, "heads.%lld.tril", (long long)h);
            if ((st = add_tensor(l, p, 2, ctx, ctx, 1))) return st;
            snprintf(p, sizeof p, "heads.%lld.key", (long long)h);
            if ((st = add_linear(l, p, C, C / H, qb))) return st;
            snprintf(p, sizeof p, "heads.%lld.query", (long long)h);
            if ((st = add_linear(l, p, C, C / H, qb))) return st;
            snprintf(p, sizeof p, "heads.%lld.value", (long long)h);
            st = add_linear(l, p, C, C / H, qb);
        }
        if (!st) st = add_linear(l, "proj", C, C, c->out_bias);
        break;
    case ATTN_LAYER_SINGLE_HEAD:
        if ((st = add_linear(l, "Wqkv", C, 3 * (C / 4), qb))) return st;
        st = add_linear(l, "Wo", C / 4, C, c->out_bias);
        break;
    case ATTN_LAYER_FUSED_MHA:
    case ATTN_LAYER_BIDIRECTIONAL:
    case ATTN_LAYER_CAUSAL_MHA:
        if ((st = add_linear(l, "Wqkv", C, 3 * C, qb))) return st;
        st = add_linear(l, "Wo", C, C, c->out_bias);
        break;
    case ATTN_LAYER_CROSS:
        if ((st = add_linear(l, "Wq", C, C, qb))) return st;
        if ((st = add_linear(l, "Wkv", C, 2 * C, qb))) return st;
        st = add_linear(l, "Wo", C, C, c->out_bias);
        break;
    default: return ATTN_E_INVALID;
    }
    if (st) return st;
    for (int i = 0; i < l->n; i++)
        if (l->t[i].is_buffer) fill_causal_buffer(&l->t[i], c->kind == ATTN_LAYER_GPT_MHA);
    return ATTN_OK;
}

static attn_status check_config(const attn_layer_config *c, char *detail, size_t dl) {
    if (!c || c->kind < 0 || c->kind >= ATTN_LAYER_KIND_COUNT) {
        set_detail(detail, dl, "unknown layer kind");
        return ATTN_E_INVALID;
    }
    if (c->d_in < 1 || c->d_in > INT32_MAX || c->d_out < 1 || c->d_out > INT32_MAX) {
        set_detail(detail, dl, "widths must be in [1, 2^31)");
        return ATTN_E_SHAPE;
    }
    if (c->num_heads < 1 || c->num_heads > 65536) {
        set_detail(detail, dl, "number of heads must be in [1, 65536]");
        return ATTN_E_SHAPE;
    }
    if (!(c->dropout >= 0.0 && c->dropout <= 1.0) || !(c->out_dropout >= 0.0 && c->out_dropout <= 1.0)) {
        set_detail(detail, dl, "dropout probabilities must be in [0, 1]");
        return ATTN_E_INVALID;
    }
    if (c->causal_align != 0 && c->causal_align != ATTN_CAUSAL_TOP_LEFT &&
        c->causal_align != ATTN_CAUSAL_BOTTOM_RIGHT) {
        set_detail(detail, dl, "invalid causal alignment");
        return ATTN_E_INVALID;
    }
    if (c->context_length < 0 || c->context_length > (1 << 20)) {
        set_detail(detail, dl, "context length must be in [0, 2^20]");
        return ATTN_E_SHAPE;
    }
    if (attn_kind_has_buffer_mask(c->kind) && c->context_length < 1) {
        set_detail(detail, dl, "%s needs a context length (its mask buffer size)", kind_names[c->kind]);
        return ATTN_E_SHAPE;
    }
    int64_t C = c->d_in, H = c->num_heads;
    switch (c->kind) {
    case ATTN_LAYER_SIMPLE:
        if (c->d_out != C) {
            set_detail(detail, dl, "simple: d_out must equal d_in");
            return ATTN_E_SHAPE;
        }
        break;
    case ATTN_LAYER_MHA:
        if (c->d_out % H) {
            set_detail(detail, dl, "mha: d_out (%lld) must be divisible by the number of heads (%lld)",
                       (long long)c->d_out, (long long)H);
            return ATTN_E_SHAPE;
        }
        break;
    case ATTN_LAYER_GPT_MHA:
    case ATTN_LAYER_FUSED_MHA:
    case ATTN_LAYER_BIDIRECTIONAL:
    case ATTN_LAYER_CAUSAL_MHA:
    case ATTN_LAYER_CROSS:
        if (C % H) {
            set_detail(detail, dl, "%s: width %lld must be divisible by the number of heads (%lld)",
                       kind_names[c->kind], (long long)C, (long long)H);
            return ATTN_E_SHAPE;
        }
        if (c->d_out != C) {
            set_detail(detail, dl, "%s: d_out must equal d_in", kind_names[c->kind]);
            return ATTN_E_SHAPE;
        }
        break;
    case ATTN_LAYER_SINGLE_HEAD:
        if (C < 4) {
            set_detail(detail, dl, "single_head: hidden size must be >= 4 (head size is C//4)");
            return ATTN_E_SHAPE;
        }
        if (c->d_out != C) {
            set_detail(detail, dl, "single_head: d_out must equal d_in");
            return ATTN_E_SHAPE;
        }
        break;
    default: break;
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
    if (l->cfg.kind == ATTN_LAYER_SINGLE_HEAD) l->cfg.num_heads = 1;
    st = build(l);
    if (st) {
        attn_layer_free(l);
        return st;
    }
    *out = l;
    return ATTN_OK;
}

attn_status attn_layer_create(const attn_layer_config *c, attn_layer **out) {
    if (!out) return ATTN_E_INVALID;
    *out = NULL;
    return create(c, out, NULL, 0);
}

const attn_layer_config *attn_layer_get_config(const attn_layer *l) { return l ? &l->cfg : NULL; }

int attn_layer_tensor_count(const attn_layer *l) { return l ? l->n : 0; }

attn_status attn_layer_tensor(const attn_layer *l, int i, attn_tensor_info *out) {
    if (!l || !out || i < 0 || i >= l->n) return ATTN_E_INVALID;
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
    const attn_layer_config *c = &l->cfg;
    switch (c->kind) {
    case ATTN_LAYER_SA_V1:
    case ATTN_LAYER_SA_V2:
    case ATTN_LAYER_CAUSAL:
    case ATTN_LAYER_MHA: return c->d_out;
    case ATTN_LAYER_MHA_WRAPPER: return c->d_out * c->num_heads;
    default: return c->d_in;
    }
}

/* ---- init (the seed classes' __init__ order) ---------------------------- */

static attn_status init_linear(attn_layer *l, attn_generator *g, const char *prefix) {
    char w[LAYER_NAME_MAX], b[LAYER_NAME_MAX];
    if (snprintf(w, sizeof w, "%s.weight", prefix) >= (int)sizeof w ||
        snprintf(b, sizeof b, "%s.bias", prefix) >= (int)sizeof b)
        return ATTN_E_INVALID;
    layer_tensor *tw = attn_layer_find(l, w), *tb = attn_layer_find(l, b);
    if (!tw) return ATTN_E_NOT_FOUND;
    return attn_linear_init(g, tw->data, tb ? tb->data : NULL, tw->shape[1], tw->shape[0]);
}

attn_status attn_layer_init(attn_layer *l, attn_generator *g) {
    if (!l || !g) return ATTN_E_INVALID;
    attn_status st = ATTN_OK;
    char p[LAYER_NAME_MAX];
    switch (l->cfg.kind) {
    case ATTN_LAYER_SIMPLE: return ATTN_OK;
    case ATTN_LAYER_SA_V1:
        for (int i = 0; i < 3 && !st; i++) {
            layer_tensor *t = attn_layer_find(l, i == 0 ? "W_query" : i == 1 ? "W_key" : "W_value");
            st = attn_rand(g, t->data, t->numel);
        }
        return st;
    case ATTN_LAYER_SA_V2:
    case ATTN_LAYER_CAUSAL:
    case ATTN_LAYER_MHA:
        if ((st = init_linear(l, g, "W_query"))) return st;
        if ((st = init_linear(l, g, "W_key"))) return st;
        if ((st = init_linear(l, g, "W_value"))) return st;
        return l->cfg.kind == ATTN_LAYER_MHA ? init_linear(l, g, "out_proj") : ATTN_OK;
    case ATTN_LAYER_MHA_WRAPPER:
        for (int64_t h = 0; h < l->cfg.num_heads && !st; h++) {
            static const char *const qkv[3] = {"W_query", "W_key", "W_value"};
            for (int i = 0; i < 3 && !st; i++) {
                snprintf(p, sizeof p, "heads.%lld.%s", (long long)h, qkv[i]);
                st = init_linear(l, g, p);
            }
        }
        return st;
    case ATTN_LAYER_GPT_MHA:
        for (int64_t h = 0; h < l->cfg.num_heads && !st; h++) {
            static const char *const kqv[3] = {"key", "query", "value"}; /* Head.__init__ order */
            for (int i = 0; i < 3 && !st; i++) {
                snprintf(p, sizeof p, "heads.%lld.%s", (long long)h, kqv[i]);
                st = init_linear(l, g, p);
            }
        }
        return st ? st : init_linear(l, g, "proj");
    case ATTN_LAYER_SINGLE_HEAD:
    case ATTN_LAYER_FUSED_MHA:
    case ATTN_LAYER_BIDIRECTIONAL:
    case ATTN_LAYER_CAUSAL_MHA:
        if ((st = init_linear(l, g, "Wqkv"))) return st;
        return init_linear(l, g, "Wo");
    case ATTN_LAYER_CROSS:
        if ((st = init_linear(l, g, "Wq"))) return st;
        if ((st = init_linear(l, g, "Wkv"))) return st;
        return init_linear(l, g, "Wo");
    default: return ATTN_E_INVALID;
    }
}

/* ---- save / load --------------------------------------------------------- */

attn_status attn_layer_save(const attn_layer *l, const char *path) {
    if (!l || !path) return ATTN_E_INVALID;
    attn_st_writer *w;
    attn_status st = attn_st_writer_new(&w);
    for (int i = 0; st == ATTN_OK && i < l->n; i++)
        st = attn_st_writer_add(w, l->t[i].name, ATTN_DTYPE_F32, l->t[i].ndim, l->t[i].shape, l->t[i].data);
    if (st == ATTN_OK) st = attn_st_writer_save(w, path);
    attn_st_writer_free(w);
    return st;
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
        set_detail(detail, dl, "missing tensor '%s'", name);
        return st;
    }
    if (nd != 2) {
        set_detail(detail, dl, "tensor '%s' must be 2-D, has %d dims", name, nd);
        return ATTN_E_SHAPE;
    }
    *d0 = sh[0];
    *d1 = sh[1];
    return ATTN_OK;
}

static int64_t count_heads(const attn_st_file *f, const char *fmt) {
    char name[LAYER_NAME_MAX];
    int64_t h = 0;
    for (;; h++) {
        snprintf(name, sizeof name, fmt, (long long)h);
        if (!st_has(f, name)) return h;
    }
}

/* Fill the config's dims from the file. */
static attn_status infer_config(attn_layer_config *c, const attn_st_file *f, char *detail, size_t dl) {
    int64_t a, b, a2, b2;
    attn_status st;
    const char *wq = NULL;
    switch (c->kind) {
    case ATTN_LAYER_SIMPLE: return ATTN_OK; /* widths come from the input */
    case ATTN_LAYER_SA_V1:
        if ((st = st_dims2(f, "W_query", &a, &b, detail, dl))) return st;
        c->d_in = a;
        c->d_out = b;
        return ATTN_OK;
    case ATTN_LAYER_SA_V2:
    case ATTN_LAYER_CAUSAL:
    case ATTN_LAYER_MHA: wq = "W_query"; break;
    case ATTN_LAYER_MHA_WRAPPER:
        c->num_heads = count_heads(f, "heads.%lld.W_query.weight");
        if (c->num_heads < 1) {
            set_detail(detail, dl, "missing tensor 'heads.0.W_query.weight'");
            return ATTN_E_NOT_FOUND;
        }
        wq = "heads.0.W_query";
        break;
    case ATTN_LAYER_GPT_MHA:
        c->num_heads = count_heads(f, "heads.%lld.key.weight");
        if (c->num_heads < 1) {
            set_detail(detail, dl, "missing tensor 'heads.0.key.weight'");
            return ATTN_E_NOT_FOUND;
        }
        if ((st = st_dims2(f, "heads.0.key.weight", &a, &b, detail, dl))) return st;
        c->d_in = c->d_out = b;
        c->qkv_bias = st_has(f, "heads.0.key.bias");
        c->out_bias = st_has(f, "proj.bias");
        if ((st = st_dims2(f, "heads.0.tril", &a2, &b2, detail, dl))) return st;
        c->context_length = a2;
        if (a * c->num_heads != c->d_in) {
            set_detail(detail, dl, "gpt_mha: %lld heads of size %lld do not make n_embd %lld", (long long)c->num_heads,
                       (long long)a, (long long)c->d_in);
            return ATTN_E_SHAPE;
        }
        return ATTN_OK;
    case ATTN_LAYER_SINGLE_HEAD:
    case ATTN_LAYER_FUSED_MHA:
    case ATTN_LAYER_BIDIRECTIONAL:
    case ATTN_LAYER_CAUSAL_MHA:
        if ((st = st_dims2(f, "Wqkv.weight", &a, &b, detail, dl))) return st;
        c->d_in = c->d_out = b;
        c->qkv_bias = st_has(f, "Wqkv.bias");
        c->out_bias = st_has(f, "Wo.bias");
        return ATTN_OK;
    case ATTN_LAYER_CROSS:
        if ((st = st_dims2(f, "Wq.weight", &a, &b, detail, dl))) return st;
        c->d_in = c->d_out = b;
        c->qkv_bias = st_has(f, "Wq.bias");
        c->out_bias = st_has(f, "Wo.bias");
        return ATTN_OK;
    default: return ATTN_E_INVALID;
    }
    char name[LAYER_NAME_MAX];
    snprintf(name, sizeof name, "%s.weight", wq);
    if ((st = st_dims2(f, name, &a, &b, detail, dl))) return st;
    c->d_out = a;
    c->d_in = b;
    snprintf(name, sizeof name, "%s.bias", wq);
    c->qkv_bias = st_has(f, name);
    c->out_bias = c->kind == ATTN_LAYER_MHA ? st_has(f, "out_proj.bias") : 1;
    if (attn_kind_has_buffer_mask(c->kind)) {
        const char *mname = c->kind == ATTN_LAYER_MHA_WRAPPER ? "heads.0.mask" : "mask";
        if ((st = st_dims2(f, mname, &a2, &b2, detail, dl))) return st;
        c->context_length = a2;
    }
    return ATTN_OK;
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
        set_detail(detail, dl, "cannot read buffer '%s': %s", t->name, attn_status_string(st));
        free(tmp);
        return st;
    }
    int64_t n = t->shape[0];
    for (int64_t i = 0; i < n && st == ATTN_OK; i++)
        for (int64_t j = 0; j < n; j++) {
            float want = lower_ones ? (j <= i ? 1.0f : 0.0f) : (j > i ? 1.0f : 0.0f);
            if (tmp[i * n + j] != want) {
                set_detail(detail, dl, "buffer '%s' is not the causal %s: element [%lld, %lld] is %g", t->name,
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
    set_detail(detail, dl, "%s", "");
    if (!c || !f || !out) return ATTN_E_INVALID;
    *out = NULL;
    attn_layer_config cfg = *c;
    if (cfg.kind < 0 || cfg.kind >= ATTN_LAYER_KIND_COUNT) {
        set_detail(detail, dl, "unknown layer kind");
        return ATTN_E_INVALID;
    }
    if (cfg.num_heads < 1) cfg.num_heads = 1;
    attn_status st = infer_config(&cfg, f, detail, dl);
    if (st) return st;
    if (cfg.kind == ATTN_LAYER_SIMPLE && cfg.d_in < 1) cfg.d_in = cfg.d_out = 1;
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
            set_detail(detail, dl, "missing tensor '%s'", t->name);
            break;
        }
        if (nd != t->ndim || sh[0] != t->shape[0] || (nd > 1 && sh[1] != t->shape[1])) {
            set_detail(detail, dl, "tensor '%s' has shape (%lld%s%lld), expected (%lld%s%lld)", t->name,
                       (long long)sh[0], nd > 1 ? ", " : "", nd > 1 ? (long long)sh[1] : 0LL, (long long)t->shape[0],
                       t->ndim > 1 ? ", " : "", t->ndim > 1 ? (long long)t->shape[1] : 0LL);
            st = ATTN_E_SHAPE;
            break;
        }
        if (t->is_buffer) {
            st = load_buffer(t, f, cfg.kind == ATTN_LAYER_GPT_MHA, detail, dl);
        } else {
            st = attn_st_read_f32(f, t->name, t->data, t->numel);
            if (st) set_detail(detail, dl, "cannot read tensor '%s': %s", t->name, attn_status_string(st));
        }
    }
    /* ... and nothing else may be (load_state_dict(strict=True)). */
    for (int i = 0; st == ATTN_OK && i < attn_st_count(f); i++) {
        const char *name = attn_st_name(f, i);
        if (!attn_layer_find(l, name)) {
            set_detail(detail, dl, "unexpected tensor '%s' for layer %s", name, kind_names[cfg.kind]);
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
