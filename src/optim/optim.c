/* torch.optim.SGD and torch.optim.AdamW (PyTorch 1.13-2.x single-tensor
 * algorithms, amsgrad off), float32 state, scalars in double as Python
 * computes them. */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct oparam {
    char *name;
    float *data, *grad;
    size_t n;
    float *buf1, *buf2; /* SGD: momentum buffer; AdamW: exp_avg, exp_avg_sq */
    int has_buf1;       /* SGD momentum buffer exists (created on the first step) */
    double step;
} oparam;

struct attn_optim {
    attn_optim_config cfg;
    int n, cap;
    oparam *p;
};

void attn_optim_config_default(attn_optim_config *c, attn_optim_kind kind) {
    if (!c) return;
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->lr = 1e-3;
    c->beta1 = 0.9;
    c->beta2 = 0.999;
    c->eps = 1e-8;
    c->weight_decay = kind == ATTN_OPTIM_ADAMW ? 1e-2 : 0.0;
}

attn_status attn_optim_create(const attn_optim_config *c, attn_optim **out) {
    attn_err_clear();
    if (!c || !out) return attn_fail(ATTN_E_INVALID, "%s is NULL", c ? "out" : "the config");
    *out = NULL;
    if (c->kind != ATTN_OPTIM_SGD && c->kind != ATTN_OPTIM_ADAMW)
        return attn_fail(ATTN_E_INVALID, "kind = %d: ATTN_OPTIM_SGD or ATTN_OPTIM_ADAMW expected", (int)c->kind);
    if (!(c->lr >= 0.0) || !isfinite(c->lr) || !(c->weight_decay >= 0.0))
        return attn_fail(ATTN_E_INVALID, "lr = %g, weight_decay = %g: a finite lr >= 0 and weight_decay >= 0 expected",
                         c->lr, c->weight_decay);
    if (c->kind == ATTN_OPTIM_SGD) {
        if (!(c->momentum >= 0.0) || !isfinite(c->dampening))
            return attn_fail(ATTN_E_INVALID,
                             "momentum = %g, dampening = %g: momentum >= 0, a finite dampening expected", c->momentum,
                             c->dampening);
        if (c->nesterov && (c->momentum <= 0.0 || c->dampening != 0.0))
            return attn_fail(ATTN_E_INVALID,
                             "nesterov with momentum = %g, dampening = %g: momentum > 0 and "
                             "dampening 0 expected (PyTorch's rule)",
                             c->momentum, c->dampening);
    } else {
        if (!(c->beta1 >= 0.0 && c->beta1 < 1.0) || !(c->beta2 >= 0.0 && c->beta2 < 1.0) || !(c->eps >= 0.0))
            return attn_fail(ATTN_E_INVALID, "beta1 = %g, beta2 = %g, eps = %g: betas in [0, 1), eps >= 0 expected",
                             c->beta1, c->beta2, c->eps);
    }
    attn_optim *o = calloc(1, sizeof *o);
    if (!o) return ATTN_E_NOMEM;
    o->cfg = *c;
    *out = o;
    return ATTN_OK;
}

void attn_optim_free(attn_optim *o) {
    if (!o) return;
    for (int i = 0; i < o->n; i++) {
        free(o->p[i].name);
        free(o->p[i].buf1);
        free(o->p[i].buf2);
    }
    free(o->p);
    free(o);
}

attn_status attn_optim_add_param(attn_optim *o, const char *name, float *data, float *grad, size_t n) {
    attn_err_clear();
    if (!o || !name || !name[0] || (n && (!data || !grad)))
        return attn_fail(ATTN_E_INVALID, "%s",
                         !o         ? "the optimizer is NULL"
                         : !name    ? "name is NULL"
                         : !name[0] ? "name is empty"
                         : !data    ? "data is NULL (n > 0)"
                                    : "grad is NULL (n > 0)");
    for (int i = 0; i < o->n; i++)
        if (!strcmp(o->p[i].name, name) || (n && o->p[i].data == data))
            return attn_fail(ATTN_E_INVALID, "name = \"%.64s\": %s parameter \"%.64s\"", name,
                             strcmp(o->p[i].name, name) ? "its data is already the data of" : "already the name of",
                             o->p[i].name);
    if (n > SIZE_MAX / sizeof(float)) return attn_fail(ATTN_E_OVERFLOW, "n = %zu: too many floats", n);
    if (o->n == o->cap) {
        int nc = o->cap ? 2 * o->cap : 16;
        oparam *np = realloc(o->p, (size_t)nc * sizeof *np);
        if (!np) return ATTN_E_NOMEM;
        o->p = np;
        o->cap = nc;
    }
    oparam *p = &o->p[o->n];
    memset(p, 0, sizeof *p);
    p->name = strdup(name);
    p->buf1 = calloc(n ? n : 1, sizeof(float));
    p->buf2 = o->cfg.kind == ATTN_OPTIM_ADAMW ? calloc(n ? n : 1, sizeof(float)) : NULL;
    if (!p->name || !p->buf1 || (o->cfg.kind == ATTN_OPTIM_ADAMW && !p->buf2)) {
        free(p->name);
        free(p->buf1);
        free(p->buf2);
        return ATTN_E_NOMEM;
    }
    p->data = data;
    p->grad = grad;
    p->n = n;
    o->n++;
    return ATTN_OK;
}

attn_status attn_optim_add_layer(attn_optim *o, attn_layer *l, const char *prefix) {
    if (!o || !l) return attn_fail(ATTN_E_INVALID, "%s is NULL", o ? "the layer" : "the optimizer");
    for (int i = 0; i < attn_layer_tensor_count(l); i++) {
        attn_tensor_info t;
        attn_layer_tensor(l, i, &t);
        if (t.is_buffer) continue;
        char name[256];
        snprintf(name, sizeof name, "%s%s", prefix ? prefix : "", t.name);
        size_t n;
        if (attn_numel(t.ndim, t.shape, &n)) return ATTN_E_OVERFLOW;
        attn_status st = attn_optim_add_param(o, name, t.data, t.grad, n);
        if (st) return st;
    }
    return ATTN_OK;
}

/* SGD (torch.optim.sgd._single_tensor_sgd):
 *   d = g (+ wd * p); buf = d on the first step, else momentum * buf + (1 - dampening) * d;
 *   d = nesterov ? d + momentum * buf : buf; p -= lr * d */
static void sgd_step(const attn_optim_config *c, oparam *p) {
    float wd = (float)c->weight_decay, mom = (float)c->momentum, damp = (float)(1.0 - c->dampening);
    float nlr = (float)-c->lr;
    int first = !p->has_buf1;
    for (size_t i = 0; i < p->n; i++) {
        float g = c->maximize ? -p->grad[i] : p->grad[i];
        if (wd != 0.0f) g = fmaf(wd, p->data[i], g);
        if (mom != 0.0f) {
            float b = first ? g : fmaf(damp, g, p->buf1[i] * mom);
            p->buf1[i] = b;
            g = c->nesterov ? fmaf(mom, b, g) : b;
        }
        p->data[i] = fmaf(nlr, g, p->data[i]);
    }
    if (mom != 0.0f) p->has_buf1 = 1;
}

/* AdamW (torch.optim.adamw._single_tensor_adamw):
 *   p *= 1 - lr * wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
 *   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps) */
static void adamw_step(const attn_optim_config *c, oparam *p) {
    p->step += 1.0;
    double bc1 = 1.0 - pow(c->beta1, p->step), bc2 = 1.0 - pow(c->beta2, p->step);
    float decay = (float)(1.0 - c->lr * c->weight_decay);
    float b1 = (float)c->beta1, ob1 = (float)(1.0 - c->beta1), b2 = (float)c->beta2, ob2 = (float)(1.0 - c->beta2);
    float step_size = (float)(c->lr / bc1), bc2s = (float)sqrt(bc2), eps = (float)c->eps;
    for (size_t i = 0; i < p->n; i++) {
        float g = c->maximize ? -p->grad[i] : p->grad[i];
        float x = p->data[i] * decay;
        /* operation order of torch's vectorized kernels: add with alpha is an
         * fma, addcmul is self + (value * t1) * t2, addcdiv self + (value * t1) / t2 */
        float m = fmaf(ob1, g, p->buf1[i] * b1);
        float v = p->buf2[i] * b2 + (ob2 * g) * g;
        p->buf1[i] = m;
        p->buf2[i] = v;
        float denom = sqrtf(v) / bc2s + eps;
        p->data[i] = x + (-step_size * m) / denom;
    }
}

attn_status attn_optim_step(attn_optim *o) {
    attn_err_clear();
    if (!o) return attn_fail(ATTN_E_INVALID, "the optimizer is NULL");
    for (int i = 0; i < o->n; i++) {
        if (o->cfg.kind == ATTN_OPTIM_SGD) {
            o->p[i].step += 1.0;
            sgd_step(&o->cfg, &o->p[i]);
        } else {
            adamw_step(&o->cfg, &o->p[i]);
        }
    }
    return ATTN_OK;
}

attn_status attn_optim_save(const attn_optim *o, const char *path) {
    attn_err_clear();
    if (!o || !path) return attn_fail(ATTN_E_INVALID, "%s is NULL", o ? "path" : "the optimizer");
    attn_st_writer *w;
    attn_status st = attn_st_writer_new(&w);
    char name[300];
    for (int i = 0; !st && i < o->n; i++) {
        const oparam *p = &o->p[i];
        int64_t one = 1, n = (int64_t)p->n;
        float stepf = (float)p->step;
        snprintf(name, sizeof name, "%s.step", p->name);
        st = attn_st_writer_add(w, name, ATTN_DTYPE_F32, 1, &one, &stepf);
        if (!st && o->cfg.kind == ATTN_OPTIM_SGD && p->has_buf1) {
            snprintf(name, sizeof name, "%s.momentum_buffer", p->name);
            st = attn_st_writer_add(w, name, ATTN_DTYPE_F32, 1, &n, p->buf1);
        }
        if (!st && o->cfg.kind == ATTN_OPTIM_ADAMW) {
            snprintf(name, sizeof name, "%s.exp_avg", p->name);
            st = attn_st_writer_add(w, name, ATTN_DTYPE_F32, 1, &n, p->buf1);
            snprintf(name, sizeof name, "%s.exp_avg_sq", p->name);
            if (!st) st = attn_st_writer_add(w, name, ATTN_DTYPE_F32, 1, &n, p->buf2);
        }
    }
    if (!st) st = attn_st_writer_save(w, path);
    attn_st_writer_free(w);
    return st;
}

/* Is "<name><suffix>" a float tensor of exactly n elements? ATTN_E_NOT_FOUND if absent (a refusal with its
 * message where the entry is required) */
static attn_status check_state(const attn_st_file *f, const char *name, const char *suffix, size_t n, int required) {
    char key[300];
    snprintf(key, sizeof key, "%s%s", name, suffix);
    attn_dtype dt;
    int nd;
    int64_t sh[ATTN_MAX_DIMS];
    attn_status st = attn_st_info(f, key, &dt, &nd, sh);
    if (st) return st == ATTN_E_NOT_FOUND && required ? attn_fail(st, "the state has no \"%.200s\"", key) : st;
    size_t m;
    if (attn_numel(nd, sh, &m) || m != n)
        return attn_fail(ATTN_E_SHAPE, "\"%.200s\": %zu elements, the parameter has %zu", key, m, n);
    if (dt != ATTN_DTYPE_F32 && dt != ATTN_DTYPE_F16 && dt != ATTN_DTYPE_BF16 && dt != ATTN_DTYPE_F64)
        return attn_fail(ATTN_E_DTYPE, "\"%.200s\": dtype %d, a float type expected", key, (int)dt);
    return ATTN_OK;
}

static attn_status read_state(const attn_st_file *f, const char *name, const char *suffix, float *dst, size_t n) {
    char key[300];
    snprintf(key, sizeof key, "%s%s", name, suffix);
    return attn_st_read_f32(f, key, dst, n);
}

attn_status attn_optim_load(attn_optim *o, const char *path) {
    attn_err_clear();
    if (!o || !path) return attn_fail(ATTN_E_INVALID, "%s is NULL", o ? "path" : "the optimizer");
    attn_st_file *f;
    attn_status st = attn_st_open(path, &f);
    if (st) return st;
    /* validate every entry (presence, shape, dtype, integral step, nothing
     * unknown) before changing any state */
    int adam = o->cfg.kind == ATTN_OPTIM_ADAMW;
    size_t expected = 0;
    for (int i = 0; !st && i < o->n; i++) {
        const oparam *p = &o->p[i];
        float stepf = 0.0f;
        st = check_state(f, p->name, ".step", 1, 1);
        if (!st) st = read_state(f, p->name, ".step", &stepf, 1);
        if (!st && (!(stepf >= 0.0f) || stepf != floorf(stepf)))
            st = attn_fail(ATTN_E_FORMAT, "\"%.200s.step\" = %g: a whole number >= 0 expected", p->name, stepf);
        if (!st && adam) st = check_state(f, p->name, ".exp_avg", p->n, 1);
        if (!st && adam) st = check_state(f, p->name, ".exp_avg_sq", p->n, 1);
        if (!st && !adam) {
            attn_status s1 = check_state(f, p->name, ".momentum_buffer", p->n, 0);
            if (s1 == ATTN_OK)
                expected++;
            else if (s1 != ATTN_E_NOT_FOUND)
                st = s1;
        }
        expected += adam ? 3 : 1;
    }
    if (!st && (size_t)attn_st_count(f) != expected) /* unknown entries */
        st =
            attn_fail(ATTN_E_FORMAT, "%s: %d tensors, the optimizer's state has %zu", path, attn_st_count(f), expected);
    /* all valid: now apply */
    for (int i = 0; !st && i < o->n; i++) {
        oparam *p = &o->p[i];
        float stepf;
        read_state(f, p->name, ".step", &stepf, 1);
        p->step = stepf;
        if (adam) {
            read_state(f, p->name, ".exp_avg", p->buf1, p->n);
            read_state(f, p->name, ".exp_avg_sq", p->buf2, p->n);
        } else {
            p->has_buf1 = read_state(f, p->name, ".momentum_buffer", p->buf1, p->n) == ATTN_OK;
            if (!p->has_buf1) memset(p->buf1, 0, (p->n ? p->n : 1) * sizeof(float));
        }
    }
    attn_st_close(f);
    return st;
}
