/* PyTorch-like tensor printing: a port of torch/_tensor_str.py (_Formatter,
 * _vector_str, _tensor_str_with_formatter, _add_suffixes) for float32 with the
 * default print options (precision 4, linewidth 80, no summarization). */
#include "print.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct fmt {
    int int_mode, sci_mode, width;
} fmt;

static void fmt_init(fmt *F, const float *v, size_t n) {
    F->int_mode = 1;
    F->sci_mode = 0;
    F->width = 1;
    double mn = INFINITY, mx = 0.0;
    size_t cnt = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(v[i]) || v[i] == 0.0f) continue;
        double a = fabs((double)v[i]);
        mn = a < mn ? a : mn;
        mx = a > mx ? a : mx;
        cnt++;
        if ((double)v[i] != ceil((double)v[i])) F->int_mode = 0;
    }
    if (cnt == 0) return;
    char buf[64];
    if (F->int_mode) {
        F->sci_mode = mx / mn > 1000.0 || mx > 1.e8;
    } else {
        F->sci_mode = mx / mn > 1000.0 || mx > 1.e8 || mn < 1.e-4;
    }
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(v[i]) || v[i] == 0.0f) continue;
        int len;
        if (F->sci_mode)
            len = snprintf(buf, sizeof buf, "%.4e", (double)v[i]);
        else if (F->int_mode)
            len = snprintf(buf, sizeof buf, "%.0f", (double)v[i]) + 1;
        else
            len = snprintf(buf, sizeof buf, "%.4f", (double)v[i]);
        if (len > F->width) F->width = len;
    }
}

static void fmt_value(const fmt *F, float x, char *out, size_t cap) {
    char buf[64];
    double v = x;
    if (isnan(v))
        snprintf(buf, sizeof buf, "nan");
    else if (isinf(v))
        snprintf(buf, sizeof buf, "%s", v < 0 ? "-inf" : "inf");
    else if (F->sci_mode)
        snprintf(buf, sizeof buf, "%.4e", v);
    else if (F->int_mode)
        snprintf(buf, sizeof buf, "%.0f.", v);
    else
        snprintf(buf, sizeof buf, "%.4f", v);
    int pad = F->width - (int)strlen(buf);
    snprintf(out, cap, "%*s%s", pad > 0 ? pad : 0, "", buf);
}

/* growable string */
typedef struct sbuf {
    char *s;
    size_t n, cap;
} sbuf;

static void sb_add(sbuf *b, const char *t) {
    size_t l = strlen(t);
    if (b->n + l + 1 > b->cap) {
        size_t nc = (b->cap ? b->cap * 2 : 256) + l;
        char *ns = realloc(b->s, nc);
        if (!ns) return;
        b->s = ns;
        b->cap = nc;
    }
    memcpy(b->s + b->n, t, l + 1);
    b->n += l;
}

static void sb_spaces(sbuf *b, int n) {
    for (int i = 0; i < n; i++) sb_add(b, " ");
}

/* Elements come from fd (floats) or, when bd is set, from bd (bools printed
 * as True/False, right-aligned to width 5 as torch does). */
typedef struct src {
    const float *fd;
    const uint8_t *bd;
} src;

static void elem_str(const fmt *F, const src *S, size_t i, char *val, size_t cap) {
    if (S->bd)
        snprintf(val, cap, "%5s", S->bd[i] ? "True" : "False");
    else
        fmt_value(F, S->fd[i], val, cap);
}

static void tensor_str(sbuf *b, const fmt *F, const src *S, size_t off, int ndim, const int64_t *shape, int indent) {
    if (ndim == 1) {
        int elem_len = (S->bd ? 5 : F->width) + 2;
        int per_line = (80 - indent) / elem_len;
        if (per_line < 1) per_line = 1;
        sb_add(b, "[");
        char val[80];
        for (int64_t i = 0; i < shape[0]; i++) {
            if (i > 0) {
                if (i % per_line == 0) {
                    sb_add(b, ",\n");
                    sb_spaces(b, indent + 1);
                } else {
                    sb_add(b, ", ");
                }
            }
            elem_str(F, S, off + (size_t)i, val, sizeof val);
            sb_add(b, val);
        }
        sb_add(b, "]");
        return;
    }
    size_t inner = 1;
    for (int k = 1; k < ndim; k++) inner *= (size_t)shape[k];
    sb_add(b, "[");
    for (int64_t i = 0; i < shape[0]; i++) {
        if (i > 0) {
            sb_add(b, ",");
            for (int k = 0; k < ndim - 1; k++) sb_add(b, "\n");
            sb_spaces(b, indent + 1);
        }
        tensor_str(b, F, S, off + (size_t)i * inner, ndim - 1, shape + 1, indent + 1);
    }
    sb_add(b, "]");
}

static void print_any(FILE *f, const char *prefix, const src *S, int ndim, const int64_t *shape, const char *suffix) {
    size_t n = 1;
    for (int k = 0; k < ndim; k++) n *= (size_t)shape[k];
    fmt F = {1, 0, 1};
    if (!S->bd) fmt_init(&F, S->fd, n);
    sbuf b = {0};
    sb_add(&b, "tensor(");
    if (ndim == 0) {
        char val[80];
        elem_str(&F, S, 0, val, sizeof val);
        sb_add(&b, S->bd ? (S->bd[0] ? "True" : "False") : val);
    } else if (n == 0) {
        sb_add(&b, "[]");
    } else {
        tensor_str(&b, &F, S, 0, ndim, shape, 7);
    }
    if (suffix && b.s) {
        const char *nl = strrchr(b.s, '\n');
        size_t last = nl ? b.n - (size_t)(nl - b.s) + 1 : b.n + 2; /* torch's last_line_len */
        if (last + strlen(suffix) + 2 > 80) {
            sb_add(&b, ",\n");
            sb_spaces(&b, 7);
        } else {
            sb_add(&b, ", ");
        }
        sb_add(&b, suffix);
    }
    sb_add(&b, ")");
    fprintf(f, "%s%s\n", prefix ? prefix : "", b.s ? b.s : "tensor(<out of memory>)");
    free(b.s);
}

void tp_print(FILE *f, const char *prefix, const float *data, int ndim, const int64_t *shape, const char *suffix) {
    src S = {data, NULL};
    print_any(f, prefix, &S, ndim, shape, suffix);
}

void tp_print_bool(FILE *f, const char *prefix, const uint8_t *data, int ndim, const int64_t *shape) {
    src S = {NULL, data};
    print_any(f, prefix, &S, ndim, shape, NULL);
}

void tp_print_size(FILE *f, const char *prefix, int ndim, const int64_t *shape) {
    fprintf(f, "%storch.Size([", prefix ? prefix : "");
    for (int k = 0; k < ndim; k++) fprintf(f, "%s%lld", k ? ", " : "", (long long)shape[k]);
    fprintf(f, "])\n");
}
