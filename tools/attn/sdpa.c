/* attn sdpa: the core attention on tensors from a safetensors file.
 *   input:  q (B,Hq,Sq,D), k (B,Hkv,Sk,D), v (B,Hkv,Sk,Dv) (all F16 or all BF16:
 *           used as they are; otherwise converted to float32); optional
 *           key_mask (B,Sk) BOOL/U8 true = masked, seqlens_k (B) I32/I64,
 *           alibi_slopes (Hq) F32, sinks (Hq) F32, grad_out (B,Hq,Sq,Dv) with --grad;
 *           any other tensor is refused
 *   output: out (B,Hq,Sq,Dv), lse (B,Hq,Sq); with --grad dq, dk, dv
 *   packed sequences (varlen): with cu_seqlens_q and cu_seqlens_k (N+1) I32/I64,
 *           q (Tq,Hq,D), k (Tk,Hkv,D), v (Tk,Hkv,Dv), grad_out (Tq,Hq,Dv); out
 *           (Tq,Hq,Dv), lse (Hq,Tq), gradients in the inputs' layouts */
#include "cli.h"
#include "opts.h"
#ifdef ATTN_HAVE_MPI
#include "cli_ring.h"
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sdpa_opts {
    const char *input, *output;
    int causal; /* attn_causal */
    double scale, softcap;
    int has_scale, has_wl, has_wr, grad, ring, layout; /* layout: -1 = by the mask (zigzag when causal) */
    int64_t wl, wr, threads, chunk;
    int impl; /* attn_impl */
    int math; /* attn_math */
} sdpa_opts;

#define O(f) offsetof(sdpa_opts, f)
static const cli_opt sdpa_table[] = {
    {"--input", OPT_STR, O(input), 0, 0, 0, NULL, NULL,
     "safetensors with q, k, v [key_mask, seqlens_k, alibi_slopes, sinks, attn_mask, attn_bias, cu_seqlens_q/k, "
     "grad_out]"},
    {"--output", OPT_STR, O(output), 0, 0, 0, NULL, NULL, "safetensors to write: out, lse [dq, dk, dv]"},
    {"--causal", OPT_CHOICE, O(causal), 0, 0, 0, "none|top-left|bottom-right", NULL, "causal mask alignment"},
    {"--scale", OPT_F64, O(scale), CLI_SEEN(sdpa_opts, has_scale), -1e30, 1e30, NULL, NULL,
     "score scale (default 1/sqrt(D))"},
    {"--window-left", OPT_I64, O(wl), CLI_SEEN(sdpa_opts, has_wl), -1, INT64_MAX, NULL, NULL,
     "keys visible left of the diagonal (-1 = unbounded)"},
    {"--window-right", OPT_I64, O(wr), CLI_SEEN(sdpa_opts, has_wr), -1, INT64_MAX, NULL, NULL,
     "keys visible right of the diagonal (-1 = unbounded)"},
    {"--softcap", OPT_F64, O(softcap), 0, 0, 1e30, NULL, NULL, "cap * tanh(s / cap) on the scores (0 = off)"},
    {"--attention-chunk", OPT_I64, O(chunk), 0, 0, 1 << 30, NULL, NULL,
     "chunked local attention: keys in the query's chunk of C positions (0 = off)"},
    {"--impl", OPT_CHOICE, O(impl), 0, 0, 0, "auto|ref|fast", NULL, "SDPA path"},
    {"--math", OPT_CHOICE, O(math), 0, 0, 0, "strict|data|bf16", NULL,
     "products' arithmetic: float32 (strict), in the data's 16-bit / int8 type (data), or bf16 (docs/SEMANTICS.md)"},
    {"--grad", OPT_FLAG, O(grad), 0, 0, 0, NULL, NULL, "also the backward of grad_out: dq, dk, dv"},
    {"--threads", OPT_I64, O(threads), 0, 1, 1024, NULL, NULL, "OpenMP and BLAS threads"},
    {"--ring", OPT_FLAG, O(ring), 0, 0, 0, NULL, NULL,
     "ring attention over the MPI ranks (mpirun -np N attn sdpa --ring)"},
    {"--ring-layout", OPT_CHOICE, O(layout), 0, 0, 0, "contiguous|zigzag", NULL,
     "how the sequence is sharded (default zigzag when causal)"},
};
#undef O

static int parse(int argc, char **argv, sdpa_opts *o) {
    memset(o, 0, sizeof *o);
    o->layout = -1;
    int r = cli_parse_opts("sdpa", "--input I.safetensors --output O.safetensors [options]", sdpa_table,
                           (int)(sizeof sdpa_table / sizeof sdpa_table[0]), argc, argv, o);
    if (r <= 0) return r;
    if (!o->input || !o->output) {
        cli_error("sdpa: --input and --output are required");
        return 0;
    }
    if (cli_output_is_input("sdpa", o->output, "--input", o->input)) return 0;
    if (o->layout >= 0 && !o->ring) {
        cli_error("sdpa: --ring-layout needs --ring");
        return 0;
    }
#ifndef ATTN_HAVE_MPI
    if (o->ring) {
        cli_error("sdpa: --ring needs libattn built with MPI (install libopenmpi-dev and rebuild)");
        return 0;
    }
#endif
    return 1;
}

/* a float tensor of exactly nd dims; fills shape */
static float *read_f32(const attn_st_file *f, const char *file, const char *name, int nd, int64_t *shape) {
    int n;
    float *p = NULL;
    if (!cli_read_float(f, file, name, &n, shape, &p)) return NULL;
    if (n != nd) {
        cli_error("%s: '%s' must have %d dimensions, has %d", file, name, nd, n);
        free(p);
        return NULL;
    }
    return p;
}

/* an F16/BF16 tensor of nd dims' 16-bit patterns, returned as a float* for a view */
static float *read_u16(const attn_st_file *f, const char *file, const char *name, int nd, int64_t *shape) {
    int n;
    attn_st_info(f, name, NULL, &n, shape);
    if (n != nd) {
        cli_error("%s: '%s' must have %d dimensions, has %d", file, name, nd, n);
        return NULL;
    }
    size_t cnt = 1;
    for (int t = 0; t < nd; t++) cnt *= (size_t)shape[t];
    uint16_t *p = malloc((cnt ? cnt : 1) * sizeof *p);
    attn_status st = p ? attn_st_read_u16(f, name, p, cnt) : ATTN_E_NOMEM;
    if (st != ATTN_OK) {
        cli_error("%s: cannot read '%s': %s", file, name, cli_status(st));
        free(p);
        return NULL;
    }
    return (float *)(void *)p;
}

static int same(const int64_t *a, const int64_t *b, int n) {
    for (int i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

/* a per-head F32 vector of the input (alibi_slopes, sinks): (Hq), finite */
static int read_heads(const attn_st_file *f, const char *file, const char *name, const char *what, int64_t H,
                      float **out) {
    int nd;
    int64_t sh[ATTN_MAX_DIMS];
    if (attn_st_info(f, name, NULL, &nd, sh) != ATTN_OK) return 1;
    if (nd != 1 || sh[0] != H) {
        cli_error("%s: %s must have shape (Hq) = (%lld)", file, name, (long long)H);
        return 0;
    }
    if (!(*out = read_f32(f, file, name, 1, sh))) return 0;
    for (int64_t h = 0; h < H; h++)
        if (!isfinite((*out)[h])) {
            cli_error("%s: %s[%lld] = %g: %s must be finite", file, name, (long long)h, (double)(*out)[h], what);
            return 0;
        }
    return 1;
}

/* a dense attn_mask (BOOL/U8, true = takes part) or attn_bias (float) of
 * 4 dims, each B|1, Hq|1, Sq|1, Sk|1 (PyTorch's broadcasting), into d with
 * zero strides on the size-1 dims; 0 after an error */
static int read_dense(const attn_st_file *f, const char *file, const char *name, attn_sdpa_desc *d, void **out) {
    attn_dtype dt;
    int nd, is_mask = !strcmp(name, "attn_mask");
    int64_t sh[ATTN_MAX_DIMS], want[4] = {d->B, d->H, d->Sq, d->Sk}, n = 1;
    if (attn_st_info(f, name, &dt, &nd, sh) != ATTN_OK) return 1;
    int ok = nd == 4 && (!is_mask || dt == ATTN_DTYPE_BOOL || dt == ATTN_DTYPE_U8);
    for (int t = 0; ok && t < 4; t++) ok = sh[t] == want[t] || sh[t] == 1;
    if (!ok) {
        cli_error("%s: %s must be %s of 4 dims broadcastable to (B, Hq, Sq, Sk) = (%lld, %lld, %lld, %lld)", file, name,
                  is_mask ? "BOOL or U8 (true = takes part)" : "float", (long long)d->B, (long long)d->H,
                  (long long)d->Sq, (long long)d->Sk);
        return 0;
    }
    int64_t *st = is_mask ? d->attn_mask_strides : d->attn_bias_strides;
    for (int t = 3; t >= 0; t--) st[t] = sh[t] == 1 ? 0 : n, n *= sh[t];
    if (!is_mask) {
        int nd2;
        float *b = NULL;
        if (!cli_read_float(f, file, name, &nd2, sh, &b)) return 0;
        *out = b, d->attn_bias = b;
        return 1;
    }
    *out = malloc((size_t)n + 1);
    attn_status s = *out ? attn_st_read_u8(f, name, *out, (size_t)n) : ATTN_E_NOMEM;
    if (s != ATTN_OK) cli_error("%s: cannot read %s: %s", file, name, cli_status(s));
    d->attn_mask = *out;
    return s == ATTN_OK;
}

/* every tensor of the input is one sdpa reads, or one it writes (a file
 * may carry reference results: the golden files do): a misspelt or
 * unsupported tensor (an attn_bias) would otherwise be ignored and the
 * answer wrong */
static int known_tensors(const attn_st_file *f, const char *file) {
    static const char *const known[] = {
        "q",     "k",         "v",         "key_mask",     "seqlens_k",    "alibi_slopes",
        "sinks", "attn_mask", "attn_bias", "cu_seqlens_q", "cu_seqlens_k", "grad_out",
        "out",   "lse",       "dq",        "dk",           "dv",           "dsinks",
        "dbias"};
    for (int i = 0; i < attn_st_count(f); i++) {
        const char *name = attn_st_name(f, i);
        int ok = 0;
        for (size_t j = 0; j < sizeof known / sizeof known[0]; j++) ok |= !strcmp(name, known[j]);
        if (!ok) {
            cli_error(
                "%s: unknown tensor '%s' (attn sdpa reads q, k, v, key_mask, seqlens_k, alibi_slopes, sinks, "
                "attn_mask, attn_bias, cu_seqlens_q, cu_seqlens_k, grad_out; out, lse, dq, dk, dv, dsinks, dbias are "
                "its outputs' names and are passed over)",
                file, name);
            return 0;
        }
    }
    return 1;
}

/* cu_seqlens_q and cu_seqlens_k (I32/I64, N + 1 each: 0, then non-decreasing
 * offsets ending at Tq and Tk) into d as int32 (cu: one array of both); 0
 * after an error */
static int read_cu(const attn_st_file *f, const char *file, attn_sdpa_desc *d, int32_t **cu) {
    attn_dtype dt[2] = {ATTN_DTYPE_INVALID, ATTN_DTYPE_INVALID};
    int nd[2] = {0, 0};
    int64_t sh[2][ATTN_MAX_DIMS] = {{0}}, *tmp = NULL;
    attn_st_info(f, "cu_seqlens_q", &dt[0], &nd[0], sh[0]), attn_st_info(f, "cu_seqlens_k", &dt[1], &nd[1], sh[1]);
    int64_t n = sh[0][0], ends[2] = {d->Sq, d->Sk};
    int ok = nd[0] == 1 && nd[1] == 1 && n == sh[1][0] && n >= 2;
    for (int t = 0; t < 2; t++) ok = ok && (dt[t] == ATTN_DTYPE_I32 || dt[t] == ATTN_DTYPE_I64);
    if (!ok) {
        cli_error("%s: packed sequences need both cu_seqlens_q and cu_seqlens_k, I32 or I64 of one shape (N + 1), "
                  "N >= 1",
                  file);
        return 0;
    }
    *cu = malloc((size_t)(2 * n) * sizeof **cu), tmp = malloc((size_t)n * sizeof *tmp);
    for (int t = 0; ok && t < 2; t++) {
        const char *name = t ? "cu_seqlens_k" : "cu_seqlens_q";
        attn_status st = *cu && tmp ? attn_st_read_i64(f, name, tmp, (size_t)n) : ATTN_E_NOMEM;
        if (st != ATTN_OK) {
            cli_error("%s: cannot read %s: %s", file, name, cli_status(st));
            ok = 0;
            break;
        }
        for (int64_t s = 0; ok && s < n; s++) {
            ok = (s == 0 ? tmp[s] == 0 : tmp[s] >= tmp[s - 1]) && (s < n - 1 || tmp[s] == ends[t]) &&
                 tmp[s] <= INT32_MAX; /* the library's offsets are int32 */
            if (!ok)
                cli_error("%s: %s must start at 0, never decrease and end at %s = %lld (entry %lld is %lld)", file,
                          name, t ? "Tk" : "Tq", (long long)ends[t], (long long)s, (long long)tmp[s]);
            else
                (*cu)[t * n + s] = (int32_t)tmp[s];
        }
    }
    free(tmp);
    d->cu_seqlens_q = *cu, d->cu_seqlens_k = *cu + n, d->nseq = n - 1;
    return ok;
}

/* the optional key_mask, seqlens_k, alibi_slopes and sinks of the input into d
 * (their arrays malloc'ed into *mask, *seqlens, vecs[0], vecs[1]); 0 after an error */
static int read_extras(const attn_st_file *f, const char *file, attn_sdpa_desc *d, uint8_t **mask, int64_t **seqlens,
                       float **vecs, void **dense) {
    attn_status st = ATTN_OK;
    int64_t B = d->B, H = d->H, Sk = d->Sk;
    attn_dtype dt;
    int nd;
    int64_t sh[ATTN_MAX_DIMS];
    if (attn_st_info(f, "key_mask", &dt, &nd, sh) == ATTN_OK) {
        if (dt != ATTN_DTYPE_BOOL && dt != ATTN_DTYPE_U8) {
            cli_error("%s: key_mask must be BOOL or U8 (true = masked)", file);
            return 0;
        }
        if (nd != 2 || sh[0] != B || sh[1] != Sk) {
            cli_error("%s: key_mask must have shape (B, Sk) = (%lld, %lld)", file, (long long)B, (long long)Sk);
            return 0;
        }
        *mask = malloc((size_t)(B * Sk) + 1);
        if (!*mask || (st = attn_st_read_u8(f, "key_mask", *mask, (size_t)(B * Sk))) != ATTN_OK) {
            cli_error("%s: cannot read key_mask: %s", file, *mask ? cli_status(st) : "out of memory");
            return 0;
        }
        d->key_mask = *mask, d->key_mask_stride_b = Sk, d->key_mask_polarity = ATTN_MASK_TRUE_MEANS_MASKED;
    }
    if (attn_st_info(f, "seqlens_k", &dt, &nd, sh) == ATTN_OK) {
        if ((dt != ATTN_DTYPE_I32 && dt != ATTN_DTYPE_I64) || nd != 1 || sh[0] != B) {
            cli_error("%s: seqlens_k must be I32 or I64 of shape (B) = (%lld)", file, (long long)B);
            return 0;
        }
        *seqlens = malloc((size_t)B * sizeof **seqlens + 1);
        if (!*seqlens || (st = attn_st_read_i64(f, "seqlens_k", *seqlens, (size_t)B)) != ATTN_OK) {
            cli_error("%s: cannot read seqlens_k: %s", file, *seqlens ? cli_status(st) : "out of memory");
            return 0;
        }
        for (int64_t b = 0; b < B; b++)
            if ((*seqlens)[b] < 0 || (*seqlens)[b] > Sk) {
                cli_error("%s: seqlens_k[%lld] = %lld is outside [0, Sk = %lld]", file, (long long)b,
                          (long long)(*seqlens)[b], (long long)Sk);
                return 0;
            }
        d->seqlens_k = *seqlens, d->seqlens_k_dtype = ATTN_DTYPE_I64;
    }
    if (!read_heads(f, file, "alibi_slopes", "ALiBi slopes", H, &vecs[0]) ||
        !read_heads(f, file, "sinks", "sink logits", H, &vecs[1]) || !read_dense(f, file, "attn_mask", d, &dense[0]) ||
        !read_dense(f, file, "attn_bias", d, &dense[1]))
        return 0;
    d->alibi_slopes = vecs[0], d->sinks = vecs[1];
    return 1;
}

/* The file's shape of a (B, H, S, n) tensor sh: itself, or packed (S, H, n)
 * (B = 1); lse (B, H, S) or packed (H, S). Returns the number of dims. */
static int io_shape(int packed, const int64_t *sh, int lse, int64_t *out) {
    int64_t four[4] = {sh[0], sh[1], sh[2], sh[3]}, p[3] = {sh[2], sh[1], sh[3]}, pl[2] = {sh[1], sh[2]};
    int nd = lse ? (packed ? 2 : 3) : (packed ? 3 : 4);
    memcpy(out, packed ? (lse ? pl : p) : four, (size_t)nd * sizeof *out);
    return nd;
}

/* the view of a (B, H, S, n) tensor (sh) stored as in the file */
static attn_view io_view(float *p, int packed, const int64_t *sh) {
    int64_t H = sh[1], S = sh[2], n = sh[3];
    return packed ? (attn_view){p, S * H * n, n, H * n} : (attn_view){p, H * S * n, S * n, n};
}

/* q, k, v of the input (all F16 or all BF16 are used as they are: 16-bit
 * inputs, float32 accumulation; any other mix is converted to float32 on
 * load) with their shapes, as (B, H, S, n) (packed (T, H, n) files: B = 1),
 * checked against each other; 0 after an error */
static int read_qkv(const attn_st_file *f, const char *file, int packed, float **q, float **k, float **v, int64_t *qs,
                    int64_t *ks, int64_t *vs, attn_dtype *in16) {
    attn_dtype qt = ATTN_DTYPE_INVALID, kt = ATTN_DTYPE_INVALID, vt = ATTN_DTYPE_INVALID;
    attn_st_info(f, "q", &qt, NULL, NULL), attn_st_info(f, "k", &kt, NULL, NULL), attn_st_info(f, "v", &vt, NULL, NULL);
    *in16 = (qt == kt && kt == vt && (qt == ATTN_DTYPE_F16 || qt == ATTN_DTYPE_BF16)) ? qt : ATTN_DTYPE_F32;
    int nd = packed ? 3 : 4;
    if (*in16 != ATTN_DTYPE_F32) {
        if (!(*q = read_u16(f, file, "q", nd, qs)) || !(*k = read_u16(f, file, "k", nd, ks)) ||
            !(*v = read_u16(f, file, "v", nd, vs)))
            return 0;
    } else if (!(*q = read_f32(f, file, "q", nd, qs)) || !(*k = read_f32(f, file, "k", nd, ks)) ||
               !(*v = read_f32(f, file, "v", nd, vs))) {
        return 0;
    }
    if (packed) /* (T, H, n) -> (1, H, T, n) */
        for (int64_t *sh = qs; sh; sh = sh == qs ? ks : sh == ks ? vs : NULL) sh[3] = sh[2], sh[2] = sh[0], sh[0] = 1;
    int64_t B = qs[0], H = qs[1], D = qs[3], Hkv = ks[1], Sk = ks[2];
    if (ks[0] != B || ks[3] != D) {
        cli_error("%s: k must be (B, Hkv, Sk, D) = (%lld, Hkv, Sk, %lld) to match q", file, (long long)B, (long long)D);
        return 0;
    }
    if (vs[0] != B || vs[1] != Hkv || vs[2] != Sk) {
        cli_error("%s: v must be (B, Hkv, Sk, Dv) = (%lld, %lld, %lld, Dv) to match k", file, (long long)B,
                  (long long)Hkv, (long long)Sk);
        return 0;
    }
    if (Hkv < 1 || H % Hkv != 0) {
        cli_error("%s: the query heads (%lld) must be a multiple of the key/value heads (%lld)", file, (long long)H,
                  (long long)Hkv);
        return 0;
    }
    return 1;
}

/* --grad: grad_out of the input, checked against out's shape os, and the
 * gradient buffers g: dq, dk, dv, then dsinks with sinks and dbias (the
 * bias's own shape, bs, bnd) with attn_bias, set in d; 0 after an error */
static int grad_bufs(const attn_st_file *f, const char *file, attn_sdpa_desc *d, const int64_t *os, int ond,
                     int64_t Hkv, float **go, float **g, int64_t *bs, int *bnd) {
    int64_t gs[ATTN_MAX_DIMS], B = d->B, H = d->H, Sq = d->Sq, Sk = d->Sk, D = d->D, Dv = d->Dv, nb = 1;
    if (!(*go = read_f32(f, file, "grad_out", ond, gs))) return 0;
    if (!same(gs, os, ond)) {
        cli_error("%s: grad_out must have the shape of out, (%lld, %lld, %lld%s)", file, (long long)os[0],
                  (long long)os[1], (long long)os[2], ond == 4 ? ", Dv" : "");
        return 0;
    }
    size_t n[5] = {(size_t)(B * H * Sq * D), (size_t)(B * Hkv * Sk * D), (size_t)(B * Hkv * Sk * Dv), (size_t)H, 0};
    if (d->attn_bias) { /* read_dense checked it: 4 dims, each its own or 1 */
        attn_st_info(f, "attn_bias", NULL, bnd, bs);
        for (int t = 0; t < 4; t++) nb *= bs[t];
        n[4] = (size_t)nb;
    }
    int ok = 1;
    for (int t = 0; t < 5; t++)
        if (t < 3 || (t == 3 && d->sinks) || (t == 4 && d->attn_bias))
            ok &= (g[t] = malloc((n[t] ? n[t] : 1) * 4)) != NULL;
    if (!ok) {
        cli_error("out of memory");
        return 0;
    }
    d->dsinks = g[3], d->dbias = g[4];
    return 1;
}

/* dq, dk, dv (, dsinks, dbias) into the output, in the inputs' layouts */
static attn_status add_grads(attn_st_writer *w, const attn_sdpa_desc *d, int packed, const int64_t *qs,
                             const int64_t *ks, const int64_t *vs, const int64_t *bs, int bnd, float *const *g) {
    const int64_t *sh[3] = {qs, ks, vs};
    const char *names[3] = {"dq", "dk", "dv"};
    attn_status st = ATTN_OK;
    for (int t = 0; t < 3 && !st; t++) {
        int64_t fs[4];
        int nd = io_shape(packed, sh[t], 0, fs);
        st = attn_st_writer_add(w, names[t], ATTN_DTYPE_F32, nd, fs, g[t]);
    }
    if (!st && d->dsinks) st = attn_st_writer_add(w, "dsinks", ATTN_DTYPE_F32, 1, &d->H, d->dsinks);
    if (!st && d->dbias) st = attn_st_writer_add(w, "dbias", ATTN_DTYPE_F32, bnd, bs, d->dbias);
    return st;
}

int cmd_sdpa(int argc, char **argv) {
    sdpa_opts o;
    int pr = parse(argc, argv, &o);
    if (pr <= 0) return pr < 0 ? 0 : EXIT_USAGE;
    if (o.threads > 0) cli_set_threads((int)o.threads);
    int rc = 1, rank = 0, synced = 0; /* synced: the ranks have agreed that every input is fine */
#ifdef ATTN_HAVE_MPI
    int nranks = 1;
    if (o.ring && !cli_ring_begin(&argc, &argv, &rank, &nranks)) {
        cli_error("sdpa --ring: MPI did not start");
        return 1;
    }
#endif
    attn_st_file *f = NULL;
    attn_st_writer *w = NULL;
    float *q = NULL, *k = NULL, *v = NULL, *go = NULL, *out = NULL, *lse = NULL;
    float *g[5] = {NULL, NULL, NULL, NULL, NULL}; /* dq, dk, dv, dsinks, dbias */
    float *vecs[2] = {NULL, NULL};                /* alibi_slopes, sinks */
    int64_t bs[ATTN_MAX_DIMS];                    /* attn_bias's shape (for dbias) */
    int bnd = 0;
    void *dense[2] = {NULL, NULL}; /* attn_mask, attn_bias */
    uint8_t *mask = NULL;          /* the input's optional tensors (read_extras) */
    int64_t *seqlens = NULL;
    int32_t *cu = NULL; /* cu_seqlens_q, cu_seqlens_k */
    attn_status st;
    if ((st = attn_st_open(o.input, &f)) != ATTN_OK) {
        cli_error("cannot load input '%s': %s", o.input, cli_status(st));
        goto done;
    }
    int64_t qs[ATTN_MAX_DIMS], ks[ATTN_MAX_DIMS], vs[ATTN_MAX_DIMS];
    attn_dtype in16;
    int packed = attn_st_info(f, "cu_seqlens_q", NULL, NULL, NULL) == ATTN_OK ||
                 attn_st_info(f, "cu_seqlens_k", NULL, NULL, NULL) == ATTN_OK;
    if (!known_tensors(f, o.input) || !read_qkv(f, o.input, packed, &q, &k, &v, qs, ks, vs, &in16)) goto done;
    int64_t B = qs[0], H = qs[1], Sq = qs[2], D = qs[3], Hkv = ks[1], Sk = ks[2], Dv = vs[3];
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, B, H, Sq, Sk, D, Dv);
    d.Hkv = Hkv, d.qkv_dtype = in16, d.causal = (attn_causal)o.causal, d.impl = (attn_impl)o.impl;
    d.math = (attn_math)o.math;
    if (o.has_scale) d.scale = (float)o.scale;
    if (o.has_wl || o.has_wr) d.window = 1, d.window_left = o.has_wl ? o.wl : -1, d.window_right = o.has_wr ? o.wr : -1;
    d.softcap = (float)o.softcap;
    d.attention_chunk = o.chunk;
    if (!read_extras(f, o.input, &d, &mask, &seqlens, vecs, dense) || (packed && !read_cu(f, o.input, &d, &cu)))
        goto done;
    size_t no = (size_t)(B * H * Sq * Dv), nl = (size_t)(B * H * Sq);
    out = malloc((no ? no : 1) * sizeof *out), lse = malloc((nl ? nl : 1) * sizeof *lse);
    if (!out || !lse) {
        cli_error("out of memory");
        goto done;
    }
    int64_t os[4] = {B, H, Sq, Dv}, ofs[4], lfs[3]; /* out's shape, and out's and lse's in the file */
    int ond = io_shape(packed, os, 0, ofs), lnd = io_shape(packed, os, 1, lfs);
    attn_view vq = io_view(q, packed, qs), vk = io_view(k, packed, ks), vv = io_view(v, packed, vs);
    attn_view vo = io_view(out, packed, os);
    if (o.grad && !grad_bufs(f, o.input, &d, ofs, ond, Hkv, &go, g, bs, &bnd)) goto done;
#ifdef ATTN_HAVE_MPI
    if (o.ring) { /* every rank runs its shard; rank 0 gets the whole results */
        synced = 1;
        if (!cli_ring_sync(1)) goto done; /* another rank could not read its input */
        int layout = o.layout >= 0 ? o.layout : d.causal != ATTN_CAUSAL_NONE;
        st = cli_ring_sdpa(&d, layout, in16 != ATTN_DTYPE_F32 ? 2 : 4, q, k, v, out, lse, o.grad ? go : NULL, g[0],
                           g[1], g[2]);
        if (st != ATTN_OK) {
            if (rank == 0) cli_error("sdpa --ring on %d ranks failed: %s", nranks, cli_status(st));
            goto done;
        }
        if (rank != 0) { /* rank 0 writes the file */
            rc = 0;
            goto done;
        }
    }
#endif
    if (!o.ring && (st = attn_sdpa_forward(&d, vq, vk, vv, vo, lse)) != ATTN_OK) {
        cli_error("sdpa forward failed: %s", cli_status(st));
        goto done;
    }
    if ((st = attn_st_writer_new(&w)) != ATTN_OK ||
        (st = attn_st_writer_add(w, "out", ATTN_DTYPE_F32, ond, ofs, out)) ||
        (st = attn_st_writer_add(w, "lse", ATTN_DTYPE_F32, lnd, lfs, lse))) {
        cli_error("cannot build output: %s", cli_status(st));
        goto done;
    }
    if (o.grad) {
        attn_view vg = io_view(go, packed, os), vdq = io_view(g[0], packed, qs);
        attn_view vdk = io_view(g[1], packed, ks), vdv = io_view(g[2], packed, vs);
        if (!o.ring && (st = attn_sdpa_backward(&d, vq, vk, vv, vo, vg, lse, vdq, vdk, vdv)) != ATTN_OK) {
            cli_error("sdpa backward failed: %s", cli_status(st));
            goto done;
        }
        if ((st = add_grads(w, &d, packed, qs, ks, vs, bs, bnd, g))) {
            cli_error("cannot build output: %s", cli_status(st));
            goto done;
        }
    }
    if ((st = attn_st_writer_save(w, o.output)) != ATTN_OK) {
        cli_error("cannot write output '%s': %s", o.output, cli_status(st));
        goto done;
    }
    rc = 0;
done:
#ifdef ATTN_HAVE_MPI
    if (o.ring) {
        if (!synced) cli_ring_sync(0); /* this rank failed before the ring: release the others */
        cli_ring_end();
    }
#endif
    (void)synced, (void)rank;
    attn_st_writer_free(w);
    attn_st_close(f);
    free(q), free(k), free(v), free(go), free(out), free(lse);
    for (int t = 0; t < 5; t++) free(g[t]);
    free(vecs[0]), free(vecs[1]), free(dense[0]), free(dense[1]), free(mask), free(seqlens), free(cu);
    return rc;
}
