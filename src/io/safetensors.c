/* safetensors read/write.
 *
 * Format: u64 little-endian header length N, N bytes of JSON (an object of
 *   name -> {"dtype", "shape", "data_offsets": [begin, end]} plus an optional
 *   "__metadata__" object of strings), then the data section.
 * Reader policy (strict): N >= 2 and N <= min(file - 8, 100 MiB); the JSON is
 * one object followed only by spaces; names are unique, non-empty; dtypes
 * known; shapes have <= ATTN_MAX_DIMS non-negative integer dims; offsets are
 * integers with begin <= end and end - begin == numel * itemsize; the tensors
 * tile the data section exactly (sorted by offset, no gaps, no overlaps) and
 * no byte follows the last tensor. */
#include "internal.h"
#include "base/half.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_MAX_HEADER (100u * 1024u * 1024u)

typedef struct st_entry {
    char *name;
    attn_dtype dtype;
    int ndim;
    int64_t shape[ATTN_MAX_DIMS];
    uint64_t begin, end; /* relative to the data section */
} st_entry;

struct attn_st_file {
    unsigned char *buf; /* whole file */
    size_t len;
    size_t data_off; /* 8 + N */
    int count;
    st_entry *e;
};

static size_t dtype_size(attn_dtype t) {
    switch (t) {
    case ATTN_DTYPE_F32: return 4;
    case ATTN_DTYPE_F16: return 2;
    case ATTN_DTYPE_BF16: return 2;
    case ATTN_DTYPE_F64: return 8;
    case ATTN_DTYPE_BOOL: return 1;
    case ATTN_DTYPE_U8: return 1;
    case ATTN_DTYPE_I64: return 8;
    case ATTN_DTYPE_I32: return 4;
    default: return 0;
    }
}

static const char *dtype_name(attn_dtype t) {
    switch (t) {
    case ATTN_DTYPE_F32: return "F32";
    case ATTN_DTYPE_F16: return "F16";
    case ATTN_DTYPE_BF16: return "BF16";
    case ATTN_DTYPE_F64: return "F64";
    case ATTN_DTYPE_BOOL: return "BOOL";
    case ATTN_DTYPE_U8: return "U8";
    case ATTN_DTYPE_I64: return "I64";
    case ATTN_DTYPE_I32: return "I32";
    default: return NULL;
    }
}

static attn_dtype dtype_parse(const char *s) {
    for (int t = ATTN_DTYPE_F32; t <= ATTN_DTYPE_I32; t++)
        if (strcmp(s, dtype_name((attn_dtype)t)) == 0) return (attn_dtype)t;
    return ATTN_DTYPE_INVALID;
}

void attn_st_close(attn_st_file *f) {
    if (!f) return;
    for (int i = 0; i < f->count; i++) free(f->e[i].name);
    free(f->e);
    free(f->buf);
    free(f);
}

/* A JSON number that is a non-negative integer <= 2^53. */
static int json_uint(const cJSON *n, uint64_t *out) {
    if (!cJSON_IsNumber(n)) return 0;
    double v = n->valuedouble;
    if (!(v >= 0.0) || v > 9007199254740992.0 || floor(v) != v) return 0;
    *out = (uint64_t)v;
    return 1;
}

static int cmp_begin(const void *a, const void *b) {
    const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end < y->end ? -1 : x->end > y->end);
}

static attn_status parse_entry(const cJSON *item, size_t data_len, st_entry *e) {
    if (!cJSON_IsObject(item)) return ATTN_E_FORMAT;
    const cJSON *dt = NULL, *sh = NULL, *off = NULL;
    for (const cJSON *c = item->child; c; c = c->next) {
        if (strcmp(c->string, "dtype") == 0 && !dt)
            dt = c;
        else if (strcmp(c->string, "shape") == 0 && !sh)
            sh = c;
        else if (strcmp(c->string, "data_offsets") == 0 && !off)
            off = c;
        else
            return ATTN_E_FORMAT; /* unknown or duplicate key */
    }
    if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(off)) return ATTN_E_FORMAT;
    e->dtype = dtype_parse(dt->valuestring);
    if (e->dtype == ATTN_DTYPE_INVALID) return ATTN_E_DTYPE;
    int nd = cJSON_GetArraySize(sh);
    if (nd > ATTN_MAX_DIMS) return ATTN_E_FORMAT;
    e->ndim = nd;
    size_t numel = 1;
    int i = 0;
    for (const cJSON *c = sh->child; c; c = c->next, i++) {
        uint64_t v;
        if (!json_uint(c, &v) || v > (uint64_t)INT64_MAX) return ATTN_E_FORMAT;
        e->shape[i] = (int64_t)v;
        if (v > SIZE_MAX || attn_mul_size(numel, (size_t)v, &numel)) return ATTN_E_FORMAT;
    }
    if (cJSON_GetArraySize(off) != 2) return ATTN_E_FORMAT;
    if (!json_uint(off->child, &e->begin) || !json_uint(off->child->next, &e->end)) return ATTN_E_FORMAT;
    size_t nbytes;
    if (attn_mul_size(numel, dtype_size(e->dtype), &nbytes)) return ATTN_E_FORMAT;
    if (e->begin > e->end || e->end > data_len || e->end - e->begin != nbytes) return ATTN_E_FORMAT;
    return ATTN_OK;
}

static attn_status parse_header(attn_st_file *f) {
    if (f->len < 8) return attn_fail(ATTN_E_FORMAT, "%zu bytes: not a safetensors file (no header length)", f->len);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | f->buf[i];
    if (n < 2 || n > ST_MAX_HEADER || n > f->len - 8)
        return attn_fail(ATTN_E_FORMAT, "header length %llu in a file of %zu bytes: not a safetensors file",
                         (unsigned long long)n, f->len);
    f->data_off = 8 + (size_t)n;
    const char *hdr = (const char *)f->buf + 8;
    if (memchr(hdr, '\0', (size_t)n)) return ATTN_E_FORMAT;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, (size_t)n, &end, 0);
    if (!root) return ATTN_E_FORMAT;
    attn_status st = ATTN_OK;
    for (const char *p = end; p < hdr + n; p++)
        if (*p != ' ') st = ATTN_E_FORMAT; /* only space padding may follow the JSON */
    if (st == ATTN_OK && !cJSON_IsObject(root)) st = ATTN_E_FORMAT;
    int count = 0;
    if (st == ATTN_OK)
        for (const cJSON *c = root->child; c; c = c->next) count++;
    if (st == ATTN_OK && count > 0) {
        f->e = calloc((size_t)count, sizeof *f->e);
        if (!f->e) st = ATTN_E_NOMEM;
    }
    size_t data_len = f->len - f->data_off;
    int seen_meta = 0;
    for (const cJSON *c = st == ATTN_OK ? root->child : NULL; c && st == ATTN_OK; c = c->next) {
        if (strcmp(c->string, "__metadata__") == 0) {
            if (seen_meta++ || !cJSON_IsObject(c)) st = ATTN_E_FORMAT;
            for (const cJSON *m = c->child; m && st == ATTN_OK; m = m->next)
                if (!cJSON_IsString(m)) st = ATTN_E_FORMAT;
            continue;
        }
        if (c->string[0] == '\0') {
            st = ATTN_E_FORMAT;
            break;
        }
        for (int i = 0; i < f->count; i++)
            if (strcmp(f->e[i].name, c->string) == 0) st = ATTN_E_FORMAT; /* duplicate name */
        if (st != ATTN_OK) break;
        st_entry *e = &f->e[f->count];
        st = parse_entry(c, data_len, e);
        if (st != ATTN_OK) {
            attn_fail(st, "tensor '%s': %s", c->string,
                      st == ATTN_E_DTYPE ? "a dtype libattn does not read"
                                         : "its dtype, shape and data_offsets do not describe its bytes");
            break;
        }
        e->name = strdup(c->string);
        if (!e->name) {
            st = ATTN_E_NOMEM;
            break;
        }
        f->count++;
    }
    cJSON_Delete(root);
    if (st == ATTN_E_FORMAT && !attn_last_error()[0]) attn_fail(st, "the JSON header is not a safetensors header");
    if (st != ATTN_OK) return st;
    /* The tensors must tile [0, data_len) exactly. */
    if (f->count == 0)
        return data_len == 0 ? ATTN_OK : attn_fail(ATTN_E_FORMAT, "%zu data bytes and no tensors", data_len);
    st_entry **order = malloc((size_t)f->count * sizeof *order);
    if (!order) return ATTN_E_NOMEM;
    for (int i = 0; i < f->count; i++) order[i] = &f->e[i];
    qsort(order, (size_t)f->count, sizeof *order, cmp_begin);
    uint64_t pos = 0;
    for (int i = 0; i < f->count && st == ATTN_OK; i++) {
        if (order[i]->begin != pos) st = ATTN_E_FORMAT; /* gap or overlap */
        pos = order[i]->end;
    }
    if (st == ATTN_OK && pos != data_len) st = ATTN_E_FORMAT; /* trailing data */
    free(order);
    return st ? attn_fail(st, "the tensors do not tile the data exactly (a gap, an overlap or trailing bytes)") : st;
}

static attn_status open_owned(unsigned char *buf, size_t len, attn_st_file **out) {
    attn_st_file *f = calloc(1, sizeof *f);
    if (!f) {
        free(buf);
        return ATTN_E_NOMEM;
    }
    f->buf = buf;
    f->len = len;
    attn_status st = parse_header(f);
    if (st != ATTN_OK) {
        attn_st_close(f);
        return st;
    }
    *out = f;
    return ATTN_OK;
}

attn_status attn_st_open_memory(const void *data, size_t len, attn_st_file **out) {
    attn_err_clear();
    if (!out || (!data && len)) return attn_fail(ATTN_E_INVALID, "%s is NULL", out ? "data" : "out");
    *out = NULL;
    unsigned char *buf = malloc(len ? len : 1);
    if (!buf) return ATTN_E_NOMEM;
    if (len) memcpy(buf, data, len);
    return open_owned(buf, len, out);
}

attn_status attn_st_open(const char *path, attn_st_file **out) {
    attn_err_clear();
    if (!path || !out) return attn_fail(ATTN_E_INVALID, "%s is NULL", path ? "out" : "path");
    *out = NULL;
    FILE *fp = fopen(path, "rb");
    if (!fp) return attn_fail(ATTN_E_IO, "%s: %s", path, strerror(errno));
    attn_status st = ATTN_OK;
    long sz = -1;
    if (fseek(fp, 0, SEEK_END) == 0) sz = ftell(fp);
    if (sz < 0 || fseek(fp, 0, SEEK_SET) != 0) st = ATTN_E_IO;
    unsigned char *buf = NULL;
    if (st == ATTN_OK) {
        buf = malloc(sz ? (size_t)sz : 1);
        if (!buf) st = ATTN_E_NOMEM;
    }
    if (st == ATTN_OK && sz > 0 && fread(buf, 1, (size_t)sz, fp) != (size_t)sz) st = ATTN_E_IO;
    fclose(fp);
    if (st != ATTN_OK) {
        free(buf);
        return st;
    }
    return open_owned(buf, (size_t)sz, out);
}

int attn_st_count(const attn_st_file *f) { return f ? f->count : 0; }

const char *attn_st_name(const attn_st_file *f, int i) { return (f && i >= 0 && i < f->count) ? f->e[i].name : NULL; }

static const st_entry *find(const attn_st_file *f, const char *name) {
    for (int i = 0; i < f->count; i++)
        if (strcmp(f->e[i].name, name) == 0) return &f->e[i];
    return NULL;
}

/* tensor name of f into *e, with the thread's detail cleared; a message
 * (attn_last_error) when there is none */
static attn_status lookup(const attn_st_file *f, const char *name, const st_entry **e) {
    attn_err_clear();
    if (!f || !name) return attn_fail(ATTN_E_INVALID, "%s is NULL", f ? "name" : "the file");
    *e = find(f, name);
    return *e ? ATTN_OK : attn_fail(ATTN_E_NOT_FOUND, "no tensor '%s' in the file", name);
}

/* a tensor of n elements of sz bytes was asked for; the file's holds another count */
static attn_status count_fail(const st_entry *e, size_t sz, size_t n) {
    return attn_fail(ATTN_E_SHAPE, "tensor '%s' holds %zu values; %zu asked for", e->name,
                     (size_t)(e->end - e->begin) / sz, n);
}

/* tensor e's dtype is not one the read takes */
static attn_status dtype_fail(const st_entry *e, const char *want) {
    return attn_fail(ATTN_E_DTYPE, "tensor '%s' is %s; %s expected", e->name, dtype_name(e->dtype), want);
}

attn_status attn_st_info(const attn_st_file *f, const char *name, attn_dtype *dtype, int *ndim,
                         int64_t shape[ATTN_MAX_DIMS]) {
    const st_entry *e;
    attn_status st = lookup(f, name, &e);
    if (st) return st;
    if (dtype) *dtype = e->dtype;
    if (ndim) *ndim = e->ndim;
    if (shape)
        for (int i = 0; i < ATTN_MAX_DIMS; i++) shape[i] = i < e->ndim ? e->shape[i] : 0;
    return ATTN_OK;
}

static uint64_t load_le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

attn_status attn_st_read_f32(const attn_st_file *f, const char *name, float *out, size_t n) {
    const st_entry *e;
    attn_status st = lookup(f, name, &e);
    if (st) return st;
    if (!out && n) return attn_fail(ATTN_E_INVALID, "out is NULL for %zu values", n);
    size_t sz = dtype_size(e->dtype);
    if (e->dtype != ATTN_DTYPE_F32 && e->dtype != ATTN_DTYPE_F16 && e->dtype != ATTN_DTYPE_BF16 &&
        e->dtype != ATTN_DTYPE_F64)
        return dtype_fail(e, "a float type");
    if ((e->end - e->begin) / sz != n) return count_fail(e, sz, n);
    const unsigned char *p = f->buf + f->data_off + e->begin;
    for (size_t i = 0; i < n; i++, p += sz) {
        uint64_t v = load_le(p, (int)sz);
        if (e->dtype == ATTN_DTYPE_F32) {
            uint32_t b = (uint32_t)v;
            memcpy(&out[i], &b, 4);
        } else if (e->dtype == ATTN_DTYPE_F64) {
            double dv;
            memcpy(&dv, &v, 8);
            out[i] = (float)dv;
        } else if (e->dtype == ATTN_DTYPE_BF16) {
            uint32_t b = (uint32_t)v << 16;
            memcpy(&out[i], &b, 4);
        } else {
            out[i] = attn_f16_to_f32((uint16_t)v);
        }
    }
    return ATTN_OK;
}

attn_status attn_st_read_u8(const attn_st_file *f, const char *name, uint8_t *out, size_t n) {
    const st_entry *e;
    attn_status st = lookup(f, name, &e);
    if (st) return st;
    if (!out && n) return attn_fail(ATTN_E_INVALID, "out is NULL for %zu values", n);
    if (e->dtype != ATTN_DTYPE_BOOL && e->dtype != ATTN_DTYPE_U8) return dtype_fail(e, "BOOL or U8");
    if (e->end - e->begin != n) return count_fail(e, 1, n);
    const unsigned char *p = f->buf + f->data_off + e->begin;
    if (e->dtype == ATTN_DTYPE_BOOL)
        for (size_t i = 0; i < n; i++)
            if (p[i] > 1) return attn_fail(ATTN_E_FORMAT, "tensor '%s': byte %zu = %d is not a bool", e->name, i, p[i]);
    if (n) memcpy(out, p, n);
    return ATTN_OK;
}

attn_status attn_st_read_u16(const attn_st_file *f, const char *name, uint16_t *out, size_t n) {
    const st_entry *e;
    attn_status st = lookup(f, name, &e);
    if (st) return st;
    if (!out && n) return attn_fail(ATTN_E_INVALID, "out is NULL for %zu values", n);
    if (e->dtype != ATTN_DTYPE_F16 && e->dtype != ATTN_DTYPE_BF16) return dtype_fail(e, "F16 or BF16");
    if (e->end - e->begin != n * 2) return count_fail(e, 2, n);
    const unsigned char *p = f->buf + f->data_off + e->begin;
    for (size_t i = 0; i < n; i++) out[i] = (uint16_t)(p[2 * i] | (p[2 * i + 1] << 8));
    return ATTN_OK;
}

attn_status attn_st_read_i64(const attn_st_file *f, const char *name, int64_t *out, size_t n) {
    const st_entry *e;
    attn_status st = lookup(f, name, &e);
    if (st) return st;
    if (!out && n) return attn_fail(ATTN_E_INVALID, "out is NULL for %zu values", n);
    if (e->dtype != ATTN_DTYPE_I32 && e->dtype != ATTN_DTYPE_I64) return dtype_fail(e, "I32 or I64");
    size_t sz = dtype_size(e->dtype);
    if (e->end - e->begin != n * sz) return count_fail(e, sz, n);
    const unsigned char *p = f->buf + f->data_off + e->begin;
    for (size_t i = 0; i < n; i++) {
        if (sz == 4) {
            int32_t x;
            memcpy(&x, p + 4 * i, 4);
            out[i] = x;
        } else {
            memcpy(&out[i], p + 8 * i, 8);
        }
    }
    return ATTN_OK;
}

/* ---- writer ------------------------------------------------------------- */

typedef struct wr_entry {
    char *name;
    attn_dtype dtype;
    int ndim;
    int64_t shape[ATTN_MAX_DIMS];
    void *data;
    size_t nbytes;
} wr_entry;

struct attn_st_writer {
    int count, cap;
    wr_entry *e;
};

attn_status attn_st_writer_new(attn_st_writer **out) {
    if (!out) return attn_fail(ATTN_E_INVALID, "out is NULL");
    *out = calloc(1, sizeof **out);
    return *out ? ATTN_OK : ATTN_E_NOMEM;
}

void attn_st_writer_free(attn_st_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->count; i++) {
        free(w->e[i].name);
        free(w->e[i].data);
    }
    free(w->e);
    free(w);
}

attn_status attn_st_writer_add(attn_st_writer *w, const char *name, attn_dtype dtype, int ndim, const int64_t *shape,
                               const void *data) {
    attn_err_clear();
    if (!w || !name) return attn_fail(ATTN_E_INVALID, "%s is NULL", w ? "name" : "the writer");
    if (!name[0] || strcmp(name, "__metadata__") == 0)
        return attn_fail(ATTN_E_INVALID, "name = \"%s\": a tensor name expected", name);
    if (ndim < 0 || ndim > ATTN_MAX_DIMS || (ndim && !shape))
        return attn_fail(ATTN_E_INVALID, "tensor '%.64s': ndim = %d%s", name, ndim,
                         ndim < 0 || ndim > ATTN_MAX_DIMS ? ": 0 .. ATTN_MAX_DIMS expected" : " and shape NULL");
    if (dtype != ATTN_DTYPE_F32 && dtype != ATTN_DTYPE_BOOL && dtype != ATTN_DTYPE_U8 && dtype != ATTN_DTYPE_I32 &&
        dtype != ATTN_DTYPE_I64)
        return attn_fail(ATTN_E_DTYPE, "tensor '%.64s': dtype %d: F32, BOOL, U8, I32 or I64 expected", name,
                         (int)dtype);
    for (int i = 0; i < w->count; i++)
        if (strcmp(w->e[i].name, name) == 0) return attn_fail(ATTN_E_INVALID, "tensor '%.64s' added twice", name);
    size_t numel, nbytes;
    if (attn_numel(ndim, shape, &numel) || attn_mul_size(numel, dtype_size(dtype), &nbytes))
        return attn_fail(ATTN_E_OVERFLOW, "tensor '%.64s': its shape's size overflows", name);
    if (nbytes && !data) return attn_fail(ATTN_E_INVALID, "tensor '%.64s': data is NULL", name);
    if (w->count == w->cap) {
        int nc = w->cap ? w->cap * 2 : 8;
        wr_entry *ne = realloc(w->e, (size_t)nc * sizeof *ne);
        if (!ne) return ATTN_E_NOMEM;
        w->e = ne;
        w->cap = nc;
    }
    wr_entry *e = &w->e[w->count];
    memset(e, 0, sizeof *e);
    e->name = strdup(name);
    e->data = malloc(nbytes ? nbytes : 1);
    if (!e->name || !e->data) {
        free(e->name);
        free(e->data);
        return ATTN_E_NOMEM;
    }
    e->dtype = dtype;
    e->ndim = ndim;
    for (int i = 0; i < ndim; i++) e->shape[i] = shape[i];
    if (nbytes) memcpy(e->data, data, nbytes); /* stored little-endian: x86/ARM host order */
    e->nbytes = nbytes;
    w->count++;
    return ATTN_OK;
}

static char *build_header(const attn_st_writer *w, size_t *len) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    size_t off = 0;
    int ok = 1;
    for (int i = 0; i < w->count && ok; i++) {
        const wr_entry *e = &w->e[i];
        cJSON *t = cJSON_CreateObject(), *sh = cJSON_CreateArray(), *of = cJSON_CreateArray();
        ok = t && sh && of;
        for (int d = 0; ok && d < e->ndim; d++) ok = cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)e->shape[d]));
        ok = ok && cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off)) &&
             cJSON_AddItemToArray(of, cJSON_CreateNumber((double)(off + e->nbytes)));
        ok = ok && cJSON_AddStringToObject(t, "dtype", dtype_name(e->dtype)) != NULL;
        if (ok) {
            cJSON_AddItemToObject(t, "shape", sh);
            cJSON_AddItemToObject(t, "data_offsets", of);
            cJSON_AddItemToObject(root, e->name, t);
        } else {
            cJSON_Delete(t);
            cJSON_Delete(sh);
            cJSON_Delete(of);
        }
        off += e->nbytes;
    }
    char *s = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!s) return NULL;
    size_t n = strlen(s), padded = (n + 7) & ~(size_t)7;
    char *p = realloc(s, padded + 1);
    if (!p) {
        free(s);
        return NULL;
    }
    memset(p + n, ' ', padded - n);
    p[padded] = '\0';
    *len = padded;
    return p;
}

attn_status attn_st_writer_save(const attn_st_writer *w, const char *path) {
    attn_err_clear();
    if (!w || !path || !path[0])
        return attn_fail(ATTN_E_INVALID, "%s", !w ? "the writer is NULL" : "path is NULL or empty");
    size_t hlen = 0;
    char *hdr = build_header(w, &hlen);
    if (!hdr) return ATTN_E_NOMEM;
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 16);
    if (!tmp) {
        free(hdr);
        return ATTN_E_NOMEM;
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp.XXXXXX", 12);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        attn_fail(ATTN_E_IO, "%s: a file beside it: %s", path, strerror(errno));
        free(hdr);
        free(tmp);
        return ATTN_E_IO;
    }
    (void)fchmod(fd, 0644); /* mkstemp creates 0600; outputs are ordinary files */
    /* for the message: what the writes below set */
    errno = 0;
    FILE *fp = fdopen(fd, "wb");
    int ok = fp != NULL;
    if (!fp) close(fd);
    unsigned char lenb[8];
    for (int i = 0; i < 8; i++) lenb[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    ok = ok && fwrite(lenb, 1, 8, fp) == 8 && fwrite(hdr, 1, hlen, fp) == hlen;
    for (int i = 0; ok && i < w->count; i++)
        ok = w->e[i].nbytes == 0 || fwrite(w->e[i].data, 1, w->e[i].nbytes, fp) == w->e[i].nbytes;
    ok = ok && fflush(fp) == 0 && fsync(fileno(fp)) == 0;
    if (fp && fclose(fp) != 0) ok = 0;
    if (ok && rename(tmp, path) != 0) ok = 0;
    if (!ok) {
        attn_fail(ATTN_E_IO, "%s: %s", path, errno ? strerror(errno) : "writing failed");
        unlink(tmp);
    }
    free(hdr);
    free(tmp);
    return ok ? ATTN_OK : ATTN_E_IO;
}
