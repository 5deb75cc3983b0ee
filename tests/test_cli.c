/* The CLI contract (DESIGN.md section 5): errors go to stderr as
 * "attn: error: ...", exit 1 (2 for usage), and an existing output file is
 * never changed by a failed run.
 * usage: test_cli SRCDIR ATTN_BINARY */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *attn;
static char golden[400];

/* Run attn with args; returns exit code, stderr captured in err. */
static int run(const char *args, char *err, size_t errlen) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' %s >cli_stdout.txt 2>cli_stderr.txt", attn, args);
    int rc = system(cmd);
    rc = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
    FILE *f = fopen("cli_stderr.txt", "r");
    size_t n = f ? fread(err, 1, errlen - 1, f) : 0;
    err[n] = 0;
    if (f) fclose(f);
    return rc;
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static int file_is(const char *path, const char *text) {
    char buf[256] = {0};
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    return n == strlen(text) && !memcmp(buf, text, n);
}

/* expect exit code `code`, an "attn: error:" line containing `needle`, and
 * the sentinel output file unchanged */
static int file_contains(const char *path, const char *needle) {
    size_t n = 0;
    char *text = tu_slurp(path, &n);
    int found = text && strstr(text, needle) != NULL;
    free(text);
    return found;
}

static void expect_fail(const char *what, const char *args, int code, const char *needle) {
    char err[4096], full[3072];
    write_file("cli_out.safetensors", "sentinel");
    snprintf(full, sizeof full, "%s --output cli_out.safetensors", args);
    int rc = run(full, err, sizeof err);
    CHECK(rc == code, "%s: exit %d, want %d (stderr: %s)", what, rc, code, err);
    CHECK(strstr(err, "attn: error: ") == err, "%s: stderr starts with 'attn: error: ': %s", what, err);
    CHECK(!needle || strstr(err, needle), "%s: stderr mentions '%s': %s", what, needle, err);
    CHECK(file_is("cli_out.safetensors", "sentinel"), "%s: existing output file was modified", what);
}

static void make_input(const char *path, int B, int S, int C, int with_mask) {
    attn_st_writer *w;
    attn_st_writer_new(&w);
    float *x = calloc((size_t)(B * S * C), sizeof *x);
    for (int i = 0; i < B * S * C; i++) x[i] = (float)((i * 7) % 11) / 11.0f - 0.5f;
    int64_t sh[3] = {B, S, C}, ms[2] = {B, S};
    attn_st_writer_add(w, "x", ATTN_DTYPE_F32, 3, sh, x);
    if (with_mask) {
        uint8_t *m = calloc((size_t)(B * S), 1);
        attn_st_writer_add(w, "mask", ATTN_DTYPE_BOOL, 2, ms, m);
        free(m);
    }
    attn_st_writer_save(w, path);
    attn_st_writer_free(w);
    free(x);
}

/* q (1, Hq, 4, 8), k and v (1, Hkv, 5, 8), seqlens_k (1) = sl if sl > 0 */
static void make_sdpa_input(const char *path, int Hq, int Hkv, int sl) {
    attn_st_writer *w;
    attn_st_writer_new(&w);
    float buf[256];
    for (int i = 0; i < 256; i++) buf[i] = (float)((i * 5) % 13) / 13.0f - 0.5f;
    int64_t qs[4] = {1, Hq, 4, 8}, ks[4] = {1, Hkv, 5, 8};
    attn_st_writer_add(w, "q", ATTN_DTYPE_F32, 4, qs, buf);
    attn_st_writer_add(w, "k", ATTN_DTYPE_F32, 4, ks, buf);
    attn_st_writer_add(w, "v", ATTN_DTYPE_F32, 4, ks, buf);
    attn_st_writer_save(w, path);
    attn_st_writer_free(w);
    if (sl > 0) { /* the writer stores floats and bytes: append an I64 tensor by hand */
        FILE *f = fopen(path, "rb");
        if (!f) return;
        fseek(f, 0, SEEK_END);
        long sz = ftell(f);
        fseek(f, 0, SEEK_SET);
        unsigned char *raw = malloc((size_t)sz);
        if (fread(raw, 1, (size_t)sz, f) != (size_t)sz) sz = 0;
        fclose(f);
        uint64_t hl;
        memcpy(&hl, raw, 8);
        size_t data = (size_t)sz - 8 - hl;
        char hdr[4096];
        memcpy(hdr, raw + 8, hl);
        hdr[hl] = 0;
        char *end = strrchr(hdr, '}');
        if (!end) return;
        char nh[4096];
        int n =
            snprintf(nh, sizeof nh, "%.*s,\"seqlens_k\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[%zu,%zu]}}",
                     (int)(end - hdr), hdr, data, data + 8);
        while (n % 8) nh[n++] = ' ';
        uint64_t nl = (uint64_t)n;
        int64_t v = sl;
        f = fopen(path, "wb");
        fwrite(&nl, 8, 1, f);
        fwrite(nh, 1, (size_t)n, f);
        fwrite(raw + 8 + hl, 1, data, f);
        fwrite(&v, 8, 1, f);
        fclose(f);
        free(raw);
    }
}

/* causal weights (C -> O) with context length ctx, optionally a corrupted mask */
static void make_causal_weights(const char *path, int C, int O, int ctx, int corrupt, const char *extra) {
    attn_layer_config c;
    attn_layer_config_default(&c, ATTN_LAYER_CAUSAL, C, O, 1);
    c.context_length = ctx;
    attn_layer *l;
    attn_layer_create(&c, &l);
    attn_generator g;
    attn_generator_seed(&g, 1);
    attn_layer_init(l, &g);
    attn_st_writer *w;
    attn_st_writer_new(&w);
    for (int i = 0; i < attn_layer_tensor_count(l); i++) {
        attn_tensor_info t;
        attn_layer_tensor(l, i, &t);
        if (corrupt && t.is_buffer) t.data[1] = 0.0f; /* unmask a future key */
        attn_st_writer_add(w, t.name, ATTN_DTYPE_F32, t.ndim, t.shape, t.data);
    }
    if (extra) {
        int64_t one = 1;
        float z = 0;
        attn_st_writer_add(w, extra, ATTN_DTYPE_F32, 1, &one, &z);
    }
    attn_st_writer_save(w, path);
    attn_st_writer_free(w);
    attn_layer_free(l);
}

static int same_bytes(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    char *x = tu_slurp(a, &na), *y = tu_slurp(b, &nb);
    int eq = x && y && na == nb && !memcmp(x, y, na);
    free(x), free(y);
    return eq;
}

static void copy_file(const char *from, const char *to) {
    size_t n = 0;
    char *x = tu_slurp(from, &n);
    FILE *f = fopen(to, "wb");
    if (x && f) fwrite(x, 1, n, f);
    if (f) fclose(f);
    free(x);
}

/* an --output that names an input (the same path, another spelling, a hard
 * link) is refused with exit 2 and the input is left as it was; a
 * non-finite ALiBi slope is named */
static void same_file_refused(char *err, size_t errlen) {
    copy_file("cli_sdpa_ok.safetensors", "cli_same_ref.safetensors");
    CHECK(run("sdpa --input cli_sdpa_ok.safetensors --output cli_sdpa_ok.safetensors", err, errlen) == 2 &&
              strstr(err, "same file as --input"),
          "sdpa --output = --input refused: %s", err);
    CHECK(run("sdpa --input cli_sdpa_ok.safetensors --output ./cli_sdpa_ok.safetensors", err, errlen) == 2,
          "sdpa --output = ./--input refused: %s", err);
    unlink("cli_sdpa_link.safetensors");
    CHECK(link("cli_sdpa_ok.safetensors", "cli_sdpa_link.safetensors") == 0, "hard link");
    CHECK(run("sdpa --input cli_sdpa_ok.safetensors --output cli_sdpa_link.safetensors", err, errlen) == 2,
          "sdpa --output = a hard link of --input refused: %s", err);
    CHECK(same_bytes("cli_sdpa_ok.safetensors", "cli_same_ref.safetensors"), "the sdpa input is untouched");
    char a[2048], wts[1024], in[1024];
    snprintf(wts, sizeof wts, "%s/sa_v2_0.weights.safetensors", golden);
    snprintf(in, sizeof in, "%s/sa_v2_0.io.safetensors", golden);
    copy_file(wts, "cli_w.safetensors"), copy_file(in, "cli_in.safetensors");
    snprintf(a, sizeof a,
             "run sa_v2 --weights cli_w.safetensors --input cli_in.safetensors --output cli_w.safetensors");
    CHECK(run(a, err, errlen) == 2 && strstr(err, "same file as --weights"), "run --output = --weights refused: %s",
          err);
    snprintf(a, sizeof a,
             "run sa_v2 --weights cli_w.safetensors --input cli_in.safetensors --output cli_in.safetensors");
    CHECK(run(a, err, errlen) == 2 && strstr(err, "same file as --input"), "run --output = --input refused: %s", err);
    snprintf(a, sizeof a,
             "heatmap sa_v2 --weights cli_w.safetensors --input cli_in.safetensors --output cli_in.safetensors");
    CHECK(run(a, err, errlen) == 2, "heatmap --output = --input refused: %s", err);
    CHECK(same_bytes(wts, "cli_w.safetensors") && same_bytes(in, "cli_in.safetensors"), "run's inputs are untouched");
    /* a NaN ALiBi slope: the message names the tensor and the head */
    attn_st_writer *w;
    attn_st_writer_new(&w);
    float buf[256], sl[4] = {0.5f, NAN, 0.25f, 0.125f};
    for (int i = 0; i < 256; i++) buf[i] = (float)((i * 5) % 13) / 13.0f - 0.5f;
    int64_t qs[4] = {1, 4, 4, 8}, ks[4] = {1, 2, 5, 8}, ss[1] = {4};
    attn_st_writer_add(w, "q", ATTN_DTYPE_F32, 4, qs, buf);
    attn_st_writer_add(w, "k", ATTN_DTYPE_F32, 4, ks, buf);
    attn_st_writer_add(w, "v", ATTN_DTYPE_F32, 4, ks, buf);
    attn_st_writer_add(w, "alibi_slopes", ATTN_DTYPE_F32, 1, ss, sl);
    attn_st_writer_save(w, "cli_sdpa_alibi.safetensors");
    attn_st_writer_free(w);
    expect_fail("sdpa NaN alibi slope", "sdpa --input cli_sdpa_alibi.safetensors", 1, "alibi_slopes[1]");
    /* sinks (and --attention-chunk) run, --grad writes dsinks; an unknown tensor is refused */
    int64_t gs[4] = {1, 4, 4, 8};
    attn_st_writer_new(&w);
    attn_st_writer_add(w, "q", ATTN_DTYPE_F32, 4, qs, buf);
    attn_st_writer_add(w, "k", ATTN_DTYPE_F32, 4, ks, buf);
    attn_st_writer_add(w, "v", ATTN_DTYPE_F32, 4, ks, buf);
    sl[1] = -1.0f;
    attn_st_writer_add(w, "sinks", ATTN_DTYPE_F32, 1, ss, sl);
    attn_st_writer_add(w, "grad_out", ATTN_DTYPE_F32, 4, gs, buf + 7);
    attn_st_writer_save(w, "cli_sdpa_sinks.safetensors");
    int64_t ms[4] = {1, 1, 4, 5}; /* a dense mask broadcast over batch and heads */
    uint8_t dm[20];
    for (int i = 0; i < 20; i++) dm[i] = (uint8_t)(i % 3 != 0);
    attn_st_writer_add(w, "attn_mask", ATTN_DTYPE_BOOL, 4, ms, dm);
    attn_st_writer_add(w, "attn_bias", ATTN_DTYPE_F32, 4, ms, buf + 3);
    attn_st_writer_save(w, "cli_sdpa_dense.safetensors");
    attn_st_writer_add(w, "attn_bogus", ATTN_DTYPE_F32, 1, ss, sl);
    attn_st_writer_save(w, "cli_sdpa_bias.safetensors");
    attn_st_writer_free(w);
    char err2[2048];
    CHECK(run("sdpa --input cli_sdpa_sinks.safetensors --output cli_sdpa_sinks_out.safetensors --grad "
              "--attention-chunk 2",
              err2, sizeof err2) == 0,
          "sdpa with sinks and chunks: %s", err2);
    attn_st_file *so = NULL;
    CHECK(attn_st_open("cli_sdpa_sinks_out.safetensors", &so) == ATTN_OK &&
              attn_st_info(so, "dsinks", NULL, NULL, NULL) == ATTN_OK,
          "--grad with sinks writes dsinks");
    attn_st_close(so);
    CHECK(run("sdpa --input cli_sdpa_dense.safetensors --output cli_sdpa_dense_out.safetensors --grad", err2,
              sizeof err2) == 0,
          "sdpa with a broadcast attn_mask and attn_bias: %s", err2);
    expect_fail("sdpa unknown tensor", "sdpa --input cli_sdpa_bias.safetensors", 1, "unknown tensor 'attn_bogus'");
    CHECK(file_contains("cli_stderr.txt", "q, k, v, key_mask, seqlens_k, alibi_slopes, sinks, attn_mask, attn_bias, "
                                          "cu_seqlens_q, cu_seqlens_k, grad_out"),
          "the unknown-tensor message lists every accepted name");
    /* bad values of the newer inputs: exit 1 naming the tensor, the output untouched */
    static const struct {
        const char *name, *needle;
        int nd;
        int64_t sh[4];
    } bad[] = {
        {"sinks", "sinks", 1, {3, 0, 0, 0}},          /* 3 sinks for 4 heads */
        {"attn_mask", "attn_mask", 4, {1, 1, 3, 5}},  /* Sq = 4: 3 does not broadcast */
        {"attn_bias", "attn_bias", 4, {1, 4, 4, 4}},  /* Sk = 5 */
        {"attn_bias", "attn_bias", 2, {4, 5, 0, 0}},  /* not 4 dims */
        {"attn_mask", "BOOL or U8", 4, {1, 1, 4, 5}}, /* a float mask */
    };
    for (size_t c = 0; c < sizeof bad / sizeof bad[0]; c++) {
        attn_st_writer_new(&w);
        attn_st_writer_add(w, "q", ATTN_DTYPE_F32, 4, qs, buf);
        attn_st_writer_add(w, "k", ATTN_DTYPE_F32, 4, ks, buf);
        attn_st_writer_add(w, "v", ATTN_DTYPE_F32, 4, ks, buf);
        int is_mask = !strcmp(bad[c].name, "attn_mask") && c != 4;
        attn_st_writer_add(w, bad[c].name, is_mask ? ATTN_DTYPE_BOOL : ATTN_DTYPE_F32, bad[c].nd, bad[c].sh,
                           is_mask ? (const void *)dm : (const void *)buf);
        attn_st_writer_save(w, "cli_sdpa_badval.safetensors");
        attn_st_writer_free(w);
        char what[64];
        snprintf(what, sizeof what, "sdpa bad %s (case %zu)", bad[c].name, c);
        expect_fail(what, "sdpa --input cli_sdpa_badval.safetensors", 1, bad[c].needle);
    }
    expect_fail("sdpa negative chunk", "sdpa --input cli_sdpa_sinks.safetensors --attention-chunk -1", 2,
                "--attention-chunk");
}

/* attn sdpa --grad with attn_bias writes dbias in the bias's own shape, for
 * every shape the CLI accepts (each dim its own or 1): the gradient of a
 * full-shape bias (the library's call) summed over the dims the bias
 * broadcasts; with sinks, dsinks too */
static void test_sdpa_dbias(void) {
    enum { B = 2, H = 2, SQ = 5, SK = 7, D = 8 };
    uint32_t seed = 7;
    float *q = tu_rand_array(B * H * SQ * D, &seed, 1.0f), *k = tu_rand_array(B * H * SK * D, &seed, 1.0f);
    float *v = tu_rand_array(B * H * SK * D, &seed, 1.0f), *go = tu_rand_array(B * H * SQ * D, &seed, 1.0f);
    float *bias = tu_rand_array(B * H * SQ * SK, &seed, 2.0f), sinks[H] = {0.25f, -0.5f};
    float full[B * H * SQ * SK], out[B * H * SQ * D], lse[B * H * SQ], dq[B * H * SQ * D], dk[B * H * SK * D],
        dv[B * H * SK * D], ds[H];
    int64_t dims[4] = {B, H, SQ, SK}, qs[4] = {B, H, SQ, D}, ks[4] = {B, H, SK, D}, hs[1] = {H};
    for (int pat = 0; pat < 16; pat++) { /* bit t set: dim t broadcast (size 1) */
        int64_t bs[4], st[4], n = 1;
        for (int t = 3; t >= 0; t--) bs[t] = (pat >> t & 1) ? 1 : dims[t], st[t] = bs[t] == 1 ? 0 : n, n *= bs[t];
        /* the library on the bias expanded to full shape: its dbias is the per-pair gradient */
        attn_sdpa_desc d;
        attn_sdpa_desc_init(&d, B, H, SQ, SK, D, D);
        int64_t fst[4] = {H * SQ * SK, SQ * SK, SK, 1};
        float *xb = malloc(sizeof full);
        for (int64_t e = 0; e < B * H * SQ * SK; e++) {
            int64_t b = e / fst[0], h = e / fst[1] % H, i = e / fst[2] % SQ, j = e % SK;
            xb[e] = bias[b * st[0] + h * st[1] + i * st[2] + j * st[3]];
        }
        d.attn_bias = xb, d.dbias = full, d.sinks = sinks, d.dsinks = ds;
        memcpy(d.attn_bias_strides, fst, sizeof fst);
        attn_view vq = {q, H * SQ * D, SQ * D, D}, vk = {k, H * SK * D, SK * D, D}, vv = {v, H * SK * D, SK * D, D};
        attn_view vo = {out, H * SQ * D, SQ * D, D}, vg = {go, H * SQ * D, SQ * D, D};
        attn_view vdq = {dq, H * SQ * D, SQ * D, D}, vdk = {dk, H * SK * D, SK * D, D},
                  vdv = {dv, H * SK * D, SK * D, D};
        CHECK(attn_sdpa_forward(&d, vq, vk, vv, vo, lse) == ATTN_OK &&
                  attn_sdpa_backward(&d, vq, vk, vv, vo, vg, lse, vdq, vdk, vdv) == ATTN_OK,
              "library forward/backward with a full-shape bias");
        free(xb);
        double want[B * H * SQ * SK] = {0};
        for (int64_t e = 0; e < B * H * SQ * SK; e++) {
            int64_t b = e / fst[0], h = e / fst[1] % H, i = e / fst[2] % SQ, j = e % SK;
            want[b * st[0] + h * st[1] + i * st[2] + j * st[3]] += full[e];
        }
        attn_st_writer *w;
        attn_st_writer_new(&w);
        attn_st_writer_add(w, "q", ATTN_DTYPE_F32, 4, qs, q);
        attn_st_writer_add(w, "k", ATTN_DTYPE_F32, 4, ks, k);
        attn_st_writer_add(w, "v", ATTN_DTYPE_F32, 4, ks, v);
        attn_st_writer_add(w, "grad_out", ATTN_DTYPE_F32, 4, qs, go);
        attn_st_writer_add(w, "attn_bias", ATTN_DTYPE_F32, 4, bs, bias);
        attn_st_writer_add(w, "sinks", ATTN_DTYPE_F32, 1, hs, sinks);
        attn_st_writer_save(w, "cli_dbias.safetensors");
        attn_st_writer_free(w);
        char err[2048];
        CHECK(run("sdpa --input cli_dbias.safetensors --output cli_dbias_out.safetensors --grad", err, sizeof err) == 0,
              "sdpa --grad with attn_bias (%lld, %lld, %lld, %lld): %s", (long long)bs[0], (long long)bs[1],
              (long long)bs[2], (long long)bs[3], err);
        attn_st_file *f = NULL;
        attn_dtype dt = ATTN_DTYPE_INVALID;
        int nd = 0;
        int64_t gsh[ATTN_MAX_DIMS] = {0};
        float got[B * H * SQ * SK], gds[H];
        int ok = attn_st_open("cli_dbias_out.safetensors", &f) == ATTN_OK &&
                 attn_st_info(f, "dbias", &dt, &nd, gsh) == ATTN_OK && dt == ATTN_DTYPE_F32 && nd == 4 &&
                 !memcmp(gsh, bs, sizeof bs) && attn_st_read_f32(f, "dbias", got, (size_t)n) == ATTN_OK &&
                 attn_st_read_f32(f, "dsinks", gds, H) == ATTN_OK;
        attn_st_close(f);
        CHECK(ok, "dbias of shape (%lld, %lld, %lld, %lld) and dsinks are written", (long long)bs[0], (long long)bs[1],
              (long long)bs[2], (long long)bs[3]);
        double worst = 0;
        for (int64_t e = 0; ok && e < n; e++) worst = fmax(worst, fabs(got[e] - want[e]));
        for (int h = 0; ok && h < H; h++) worst = fmax(worst, fabs(gds[h] - ds[h]));
        CHECK(ok && worst < 1e-5, "pattern %d: dbias = the per-pair gradient summed over broadcast dims, max |diff| %g",
              pat, worst);
    }
    free(q), free(k), free(v), free(go), free(bias);
}

/* --math on attn sdpa (golden sdpa_14: f16 q, k, v, top-left causal: strict gives PyTorch's
 * float32 answer, data rounds P to f16 and moves off it a little) and on
 * attn run (bf16 rounding of a float32 layer); a bad mode is a usage error */
static void test_math(void) {
    char a[3072], err[2048];
    float st[2 * 4 * 17 * 32], da[2 * 4 * 17 * 32], gold[2 * 4 * 17 * 32];
    const char *modes[2] = {"strict", "data"};
    float *outs[2] = {st, da};
    for (int m = 0; m < 2; m++) {
        snprintf(a, sizeof a,
                 "sdpa --input %s/sdpa_14.safetensors --causal top-left --output cli_math_%s.safetensors --math %s",
                 golden, modes[m], modes[m]);
        CHECK(run(a, err, sizeof err) == 0, "sdpa --math %s: %s", modes[m], err);
        snprintf(a, sizeof a, "cli_math_%s.safetensors", modes[m]);
        attn_st_file *f = NULL;
        CHECK(attn_st_open(a, &f) == ATTN_OK && attn_st_read_f32(f, "out", outs[m], 2 * 4 * 17 * 32) == ATTN_OK,
              "sdpa --math %s writes out", modes[m]);
        attn_st_close(f);
    }
    snprintf(a, sizeof a, "%s/sdpa_14.safetensors", golden);
    attn_st_file *g = NULL;
    CHECK(attn_st_open(a, &g) == ATTN_OK && attn_st_read_f32(g, "out", gold, 2 * 4 * 17 * 32) == ATTN_OK,
          "the golden out");
    attn_st_close(g);
    double es = 0, ed = 0, dd = 0;
    for (int i = 0; i < 2 * 4 * 17 * 32; i++)
        es = fmax(es, fabs(st[i] - gold[i])), ed = fmax(ed, fabs(da[i] - gold[i])), dd = fmax(dd, fabs(da[i] - st[i]));
    int rounds = attn_math_rounds(ATTN_DTYPE_F16); /* the CLI runs this library's default table */
    CHECK(es < 1e-5 && ed < 2e-3 && (rounds ? dd > 0 : dd == 0),
          "--math strict %.2g / data %.2g from PyTorch's float32, apart by %.2g", es, ed, dd);
    expect_fail("sdpa bad math", "sdpa --input x --math fp8", 2, "--math");
    snprintf(a, sizeof a,
             "run sa_v2 --weights %s/sa_v2_0.weights.safetensors --input %s/sa_v2_0.io.safetensors --output "
             "cli_math_run.safetensors --math bf16",
             golden, golden);
    CHECK(run(a, err, sizeof err) == 0, "run --math bf16: %s", err);
}

/* packed sequences: 3-D q, k, v with cu_seqlens; each sequence's out, lse and
 * gradients equal the library's own call on that sequence alone */
static void test_sdpa_varlen(void) {
    enum { TQ = 7, TK = 9, H = 2, HKV = 1, D = 4 };
    float q[TQ * H * D], k[TK * HKV * D], v[TK * HKV * D], go[TQ * H * D];
    for (int i = 0; i < TQ * H * D; i++) q[i] = (float)((i * 7) % 11) / 11.0f - 0.4f, go[i] = (float)(i % 5) - 2.0f;
    for (int i = 0; i < TK * HKV * D; i++) k[i] = (float)((i * 3) % 13) / 13.0f - 0.5f, v[i] = (float)(i % 9) - 4.0f;
    int32_t cq[3] = {0, 3, 7};
    int64_t ck[3] = {0, 5, 9}, qsh[3] = {TQ, H, D}, ksh[3] = {TK, HKV, D}, n3[1] = {3};
    attn_st_writer *w;
    attn_st_writer_new(&w);
    attn_st_writer_add(w, "q", ATTN_DTYPE_F32, 3, qsh, q);
    attn_st_writer_add(w, "k", ATTN_DTYPE_F32, 3, ksh, k);
    attn_st_writer_add(w, "v", ATTN_DTYPE_F32, 3, ksh, v);
    attn_st_writer_add(w, "grad_out", ATTN_DTYPE_F32, 3, qsh, go);
    attn_st_writer_add(w, "cu_seqlens_q", ATTN_DTYPE_I32, 1, n3, cq);
    attn_st_writer_save(w, "cli_varlen_half.safetensors"); /* cu_seqlens_k missing */
    attn_st_writer_add(w, "cu_seqlens_k", ATTN_DTYPE_I64, 1, n3, ck);
    attn_st_writer_save(w, "cli_varlen.safetensors");
    attn_st_writer_free(w);
    expect_fail("varlen without cu_seqlens_k", "sdpa --input cli_varlen_half.safetensors", 1, "cu_seqlens_k");
    char err[2048];
    CHECK(run("sdpa --input cli_varlen.safetensors --output cli_varlen_out.safetensors --causal bottom-right --grad",
              err, sizeof err) == 0,
          "sdpa on packed sequences: %s", err);
    float out[TQ * H * D], lse[H * TQ], dq[TQ * H * D], dk[TK * HKV * D], dv[TK * HKV * D];
    attn_st_file *f = NULL;
    int ok = attn_st_open("cli_varlen_out.safetensors", &f) == ATTN_OK &&
             !attn_st_read_f32(f, "out", out, TQ * H * D) && !attn_st_read_f32(f, "lse", lse, H * TQ) &&
             !attn_st_read_f32(f, "dq", dq, TQ * H * D) && !attn_st_read_f32(f, "dk", dk, TK * HKV * D) &&
             !attn_st_read_f32(f, "dv", dv, TK * HKV * D);
    attn_st_close(f);
    CHECK(ok, "the packed output has out (Tq, H, Dv), lse (H, Tq), dq, dk, dv");
    double worst = 0;
    for (int s = 0; ok && s < 2; s++) {
        int64_t sq = cq[s + 1] - cq[s], sk = ck[s + 1] - ck[s];
        float o1[TQ * H * D], l1[H * TQ], dq1[TQ * H * D], dk1[TK * HKV * D], dv1[TK * HKV * D];
        attn_sdpa_desc d;
        attn_sdpa_desc_init(&d, 1, H, sq, sk, D, D);
        d.Hkv = HKV, d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        attn_view vq = {q + cq[s] * H * D, 0, D, H * D}, vk = {k + ck[s] * HKV * D, 0, D, HKV * D};
        attn_view vv = {v + ck[s] * HKV * D, 0, D, HKV * D}, vg = {go + cq[s] * H * D, 0, D, H * D};
        attn_view vo = {o1, 0, sq * D, D}, vdq = {dq1, 0, sq * D, D}, vdk = {dk1, 0, sk * D, D},
                  vdv = {dv1, 0, sk * D, D};
        CHECK(attn_sdpa_forward(&d, vq, vk, vv, vo, l1) == ATTN_OK &&
                  attn_sdpa_backward(&d, vq, vk, vv, vo, vg, l1, vdq, vdk, vdv) == ATTN_OK,
              "sequence %d alone", s);
        for (int h = 0; h < H; h++)
            for (int64_t i = 0; i < sq; i++) {
                worst = fmax(worst, fabs(lse[h * TQ + cq[s] + i] - l1[h * sq + i]));
                for (int c = 0; c < D; c++) {
                    int64_t at = ((cq[s] + i) * H + h) * D + c, at1 = (h * sq + i) * D + c;
                    worst = fmax(worst, fmax(fabs(out[at] - o1[at1]), fabs(dq[at] - dq1[at1])));
                }
            }
        for (int64_t j = 0; j < sk; j++)
            for (int c = 0; c < D; c++) {
                int64_t at = (ck[s] + j) * D + c, at1 = j * D + c;
                worst = fmax(worst, fmax(fabs(dk[at] - dk1[at1]), fabs(dv[at] - dv1[at1])));
            }
    }
    CHECK(ok && worst < 1e-5, "packed sdpa equals per-sequence calls: max |diff| %g", worst);
    int64_t bad[3] = {0, 5, 8}; /* cu_seqlens_k ending before Tk */
    attn_st_writer_new(&w);
    attn_st_writer_add(w, "q", ATTN_DTYPE_F32, 3, qsh, q);
    attn_st_writer_add(w, "k", ATTN_DTYPE_F32, 3, ksh, k);
    attn_st_writer_add(w, "v", ATTN_DTYPE_F32, 3, ksh, v);
    attn_st_writer_add(w, "cu_seqlens_q", ATTN_DTYPE_I32, 1, n3, cq);
    attn_st_writer_add(w, "cu_seqlens_k", ATTN_DTYPE_I64, 1, n3, bad);
    attn_st_writer_save(w, "cli_varlen_bad.safetensors");
    attn_st_writer_free(w);
    expect_fail("cu_seqlens_k short of Tk", "sdpa --input cli_varlen_bad.safetensors", 1, "end at Tk = 9");
}

/* attn bench runs its modes (tiny sizes; speed is never asserted) and says what it ran */
static void test_bench_smoke(void) {
    static const char *cases[][2] = {
        {"--decode --batch 3 --heads 4 --kv-heads 2 --kv-seq 200 --ragged --page-size 16 --kv-dtype f16",
         "\"ragged\": true"},
        {"--decode --heads 2 --kv-seq 100 --queries 4 --tree", "\"tree\": true"},
        {"--seq 96 --heads 2 --varlen 3 --causal --backward", "\"op\": \"backward\""},
        {"--seq 96 --heads 2 --attention-chunk 40 --sinks", "\"chunk\": 40"},
        {"--decode --cascade --batch 2 --kv-seq 64 --suffix 10 --heads 4 --kv-heads 2", "\"speedup\""},
        {"--decode --caller-pages --batch 2 --kv-seq 100 --heads 4 --kv-heads 2 --page-size 16 --kv-dtype bf16",
         "\"ratio_to_cache\""},
        {"--decode --formats --heads 2 --kv-heads 1 --head-dim 64 --kv-seq 64 --math data", "\"kv_dtype\": \"q4_0\""},
        {"--decode --formats --heads 2 --kv-heads 1 --head-dim 64 --kv-seq 40 --page-size 16", "\"ratio_to_own_read\""},
        {"--decode --heads 2 --kv-seq 100 --kv-dtype int8 --page-size 16", "\"ratio_to_own_read\""},
        {"--decode --mla --head-dim 64 --v-head-dim 32 --kv-seq 100 --page-size 16 --kv-dtype int8",
         "\"ratio_to_own_read\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[512], err[1024];
        snprintf(args, sizeof args, "bench %s --min-time 0 --sgemm-n 0 --json", cases[i][0]);
        CHECK(run(args, err, sizeof err) == 0, "attn %s: exit 0 (%s)", args, err);
        CHECK(file_contains("cli_stdout.txt", cases[i][1]), "attn %s prints %s", args, cases[i][1]);
    }
    char err[1024];
    CHECK(run("bench --decode --tree --ragged --kv-seq 64", err, sizeof err) == 2 && strstr(err, "do not combine"),
          "bench --tree --ragged refused: %s", err);
    /* the same-run lines: sgemm, and oneDNN's bf16 matmul (null where oneDNN has no bf16 here) */
    CHECK(run("bench --seq 64 --heads 1 --min-time 0 --sgemm-n 64 --json", err, sizeof err) == 0, "bench lines: %s",
          err);
    CHECK(file_contains("cli_stdout.txt", "\"sgemm_gflops\"") &&
              file_contains("cli_stdout.txt", "\"bf16_gemm_gflops\"") &&
              file_contains("cli_stdout.txt", "\"ratio_to_bf16\""),
          "bench --json reports the sgemm and bf16 lines");
    /* the sgemm line runs on the best core OpenBLAS has for this CPU: a pin is
     * cleared, and a detection below AVX2 on an AVX2 host is raised */
    const char *ct = getenv("OPENBLAS_CORETYPE");
    char saved[64] = "";
    if (ct) snprintf(saved, sizeof saved, "%s", ct);
    setenv("OPENBLAS_CORETYPE", "Prescott", 1);
    CHECK(run("bench --seq 64 --heads 1 --min-time 0 --sgemm-n 64 --json", err, sizeof err) == 0, "bench: %s", err);
    if (ct)
        setenv("OPENBLAS_CORETYPE", saved, 1);
    else
        unsetenv("OPENBLAS_CORETYPE");
    CHECK(
        file_contains("cli_stdout.txt", "\"blas_env_cleared\": \"OPENBLAS_CORETYPE=Prescott"), /* and L2_SIZE if set */
        "bench clears a pinned OpenBLAS core for its sgemm line");
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        CHECK(!file_contains("cli_stdout.txt", "\"blas_core\": \"Prescott\""),
              "bench's sgemm line on an AVX2 host runs an AVX2 or AVX-512 core");
#endif
}

/* --help prints every option of the command's table and exits 0 */
static void test_help(void) {
    static const char *cases[][4] = {
        {"sdpa", "--softcap", "--window-left", "--ring-layout"},
        {"bench", "--kv-dtype", "--blas-env", "--min-time"},
        {"run", "--incremental", "--torch-flavor", "--context-length"},
        {"heatmap", "--vmax", "--key-tokens", "--heads"},
        {"train", "--lr", "--length", "--save"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[512], args[64];
        snprintf(args, sizeof args, "%s --help", cases[i][0]);
        CHECK(run(args, err, sizeof err) == 0, "attn %s: exit 0", args);
        for (int k = 1; k < 4; k++)
            CHECK(file_contains("cli_stdout.txt", cases[i][k]), "attn %s lists %s", args, cases[i][k]);
    }
}

/* usage errors and ATTN_ISA: exit 2 */
static void test_usage_errors(void) {
    char err[4096], a[3072];
    /* usage errors: exit 2 */
    CHECK(run("", err, sizeof err) == 2, "no command");
    CHECK(run("frobnicate", err, sizeof err) == 2, "unknown command");
    expect_fail("unknown option", "run sa_v2 --bogus 1 --input x", 2, "unknown option '--bogus'");
    expect_fail("unknown module", "run nope --weights w --input x", 2, "unknown module");
    expect_fail("missing --heads", "run mha --weights w --input x", 2, "--heads");
    expect_fail("dropout > 1", "run causal --weights w --input x --dropout 1.5", 2, "probability");
    expect_fail("dropout not a number", "run causal --weights w --input x --dropout abc", 2, "probability");
    expect_fail("train without seed", "run causal --weights w --input x --train", 2, "--seed");
    expect_fail("heads not a number", "run mha --weights w --input x --heads two", 2, "--heads");

    /* ATTN_ISA naming kernels this build/CPU cannot run: a clear message, exit 2, and version says why */
    setenv("ATTN_ISA", "avx512", 1);
    if (tu_cpu_avx512())
        CHECK(run("version", err, sizeof err) == 0 && file_contains("cli_stdout.txt", "kernels: avx512"),
              "ATTN_ISA=avx512 is honoured on this CPU");
    else
        expect_fail("ATTN_ISA=avx512", "bench --seq 32 --heads 1 --min-time 0 --sgemm-n 0", 2, "lacks AVX-512");
    CHECK(run("version", err, sizeof err) == 0, "version runs with an unusable ATTN_ISA");
    setenv("ATTN_ISA", "fastest", 1);
    snprintf(a, sizeof a, "run sa_v2 --weights %s/sa_v2_0.weights.safetensors --input %s/sa_v2_0.io.safetensors",
             golden, golden);
    expect_fail("ATTN_ISA unknown", a, 2, "unknown kernel set");
    setenv("ATTN_ISA", "generic", 1);
    CHECK(run("version", err, sizeof err) == 0 && file_contains("cli_stdout.txt", "kernels: generic"),
          "ATTN_ISA=generic is honoured");
    unsetenv("ATTN_ISA");
}

/* bench's usage errors name the options and the values they got (bench takes no --output: expect_fail's) */
static void test_bench_usage_errors(void) {
    static const char *cases[][2] = {
        {"bench --decode --heads 6 --kv-heads 4 --min-time 0", "got --heads 6 and --kv-heads 4"},
        {"bench --decode --formats --head-dim 48 --min-time 0", "multiple of 64 (every format takes it), got 48"},
        {"bench --decode --mla --head-dim 64 --v-head-dim 128 --min-time 0", "got --v-head-dim 128 and --head-dim 64"},
        {"bench --decode --cascade --kv-seq 100 --page-size 16 --min-time 0", "got --kv-seq 100 and --page-size 16"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[4096];
        int rc = run(cases[i][0], err, sizeof err);
        CHECK(rc == 2, "attn %s: exit %d, want 2 (stderr: %s)", cases[i][0], rc, err);
        CHECK(strstr(err, "attn: error: ") == err && strstr(err, cases[i][1]), "attn %s: stderr names '%s': %s",
              cases[i][0], cases[i][1], err);
    }
}

/* data errors: exit 1; the incremental run with a padding mask */
static void test_data_errors(void) {
    char err[4096], a[3072];
    /* data errors: exit 1 */
    snprintf(a, sizeof a, "run sa_v2 --weights %s/sa_v2_0.weights.safetensors --input missing.safetensors", golden);
    expect_fail("missing input file", a, 1, "missing.safetensors");
    expect_fail("missing input file: the library's detail", a, 1, "No such file or directory");
    write_file("cli_garbage.safetensors", "this is not a safetensors file at all");
    snprintf(a, sizeof a, "run sa_v2 --weights cli_garbage.safetensors --input %s/sa_v2_0.io.safetensors", golden);
    expect_fail("garbage weights", a, 1, "malformed");
    expect_fail("garbage weights: the library's detail", a, 1, "not a safetensors file");
    snprintf(a, sizeof a, "run sa_v2 --weights %s/simple_2.weights.safetensors --input %s/sa_v2_0.io.safetensors",
             golden, golden);
    expect_fail("missing tensor", a, 1, "missing tensor 'W_query.weight'");
    snprintf(a, sizeof a, "run sa_v2 --weights %s/sa_v2_0.weights.safetensors --input %s/simple_2.io.safetensors",
             golden, golden);
    expect_fail("width mismatch", a, 1, "width");
    make_causal_weights("cli_causal.safetensors", 4, 3, 5, 0, NULL);
    make_input("cli_in_long.safetensors", 2, 6, 4, 0);
    make_input("cli_in_ok.safetensors", 2, 5, 4, 0);
    expect_fail("longer than context", "run causal --weights cli_causal.safetensors --input cli_in_long.safetensors", 1,
                "context length");
    make_causal_weights("cli_causal_bad.safetensors", 4, 3, 5, 1, NULL);
    expect_fail("corrupted mask buffer",
                "run causal --weights cli_causal_bad.safetensors --input cli_in_ok.safetensors", 1, "mask");
    make_causal_weights("cli_causal_extra.safetensors", 4, 3, 5, 0, "W_bogus");
    expect_fail("unexpected tensor", "run causal --weights cli_causal_extra.safetensors --input cli_in_ok.safetensors",
                1, "unexpected tensor 'W_bogus'");
    snprintf(
        a, sizeof a,
        "run fused_mha --heads 3 --weights %s/fused_mha_5.weights.safetensors --input %s/fused_mha_5.io.safetensors",
        golden, golden);
    expect_fail("heads do not divide the width", a, 1, "divisible");
    /* a padded batch through the KV cache N tokens at a time: the golden (PyTorch) output */
    snprintf(a, sizeof a,
             "run causal_mha --heads 2 --weights %s/causal_mha_16.weights.safetensors --input "
             "%s/causal_mha_16.io.safetensors --incremental 3 --output cli_inc_mask.safetensors",
             golden, golden);
    CHECK(run(a, err, sizeof err) == 0, "run --incremental with a padding mask: %s", err);
    {
        char io[1200];
        snprintf(io, sizeof io, "%s/causal_mha_16.io.safetensors", golden);
        attn_st_file *fo = NULL, *fi = NULL;
        static float got[2 * 16 * 16], want[2 * 16 * 16];
        int ok = attn_st_open("cli_inc_mask.safetensors", &fo) == ATTN_OK && attn_st_open(io, &fi) == ATTN_OK &&
                 attn_st_read_f32(fo, "out", got, 512) == ATTN_OK && attn_st_read_f32(fi, "out", want, 512) == ATTN_OK;
        CHECK(ok, "read the incremental and golden outputs");
        if (ok) tu_allclose("run --incremental 3 with a mask == PyTorch", got, want, 512, 2e-4, 2e-5);
        attn_st_close(fo), attn_st_close(fi);
    }
    make_input("cli_in_mask.safetensors", 2, 5, 4, 1);
    expect_fail("mask for a layer without one",
                "run causal --weights cli_causal.safetensors --input cli_in_mask.safetensors", 1, "padding mask");
}

/* an output path that cannot be written; atomic replacement; the dropout
 * stream; thread counts */
static void test_outputs(void) {
    char err[4096];
    CHECK(run("run causal --weights cli_causal.safetensors --input cli_in_ok.safetensors --output "
              "/nonexistent-dir/o.safetensors",
              err, sizeof err) == 1,
          "unwritable output: %s", err);
    CHECK(strstr(err, "cannot write output"), "unwritable output message: %s", err);

    /* success replaces the output atomically and leaves no temp file */
    write_file("cli_out.safetensors", "sentinel");
    int rc =
        run("run causal --weights cli_causal.safetensors --input cli_in_ok.safetensors --output cli_out.safetensors",
            err, sizeof err);
    CHECK(rc == 0, "valid run exits 0: %s", err);
    attn_st_file *f = NULL;
    CHECK_OK(attn_st_open("cli_out.safetensors", &f));
    int nd = 0;
    int64_t sh[ATTN_MAX_DIMS];
    CHECK(f && attn_st_info(f, "out", NULL, &nd, sh) == ATTN_OK && nd == 3 && sh[0] == 2 && sh[1] == 5 && sh[2] == 3,
          "out is (2, 5, 3)");
    attn_st_close(f);
    CHECK(system("ls cli_out.safetensors.tmp.* >/dev/null 2>&1") != 0, "no temp file left behind");
    CHECK(run("version", err, sizeof err) == 0, "version");

    /* the dropout stream follows --torch-flavor; without it, the MKL stream,
     * whatever is installed on the machine or set in the environment */
    const char *base = "run causal --weights cli_causal.safetensors --input cli_in_ok.safetensors --train --seed 3 "
                       "--dropout 0.5";
    char c1[2048];
    snprintf(c1, sizeof c1, "%s --torch-flavor mkl --output cli_f1.safetensors", base);
    CHECK(run(c1, err, sizeof err) == 0, "mkl run: %s", err);
    snprintf(c1, sizeof c1, "%s --torch-flavor nomkl --output cli_f2.safetensors", base);
    CHECK(run(c1, err, sizeof err) == 0, "nomkl run: %s", err);
    setenv("ATTN_TORCH_FLAVOR", "nomkl", 1); /* an old setting that must have no effect */
    snprintf(c1, sizeof c1, "%s --output cli_f3.safetensors", base);
    CHECK(run(c1, err, sizeof err) == 0, "default-flavor run: %s", err);
    unsetenv("ATTN_TORCH_FLAVOR");
    CHECK(system("cmp -s cli_f1.safetensors cli_f3.safetensors") == 0, "the default dropout stream is mkl");
    CHECK(system("cmp -s cli_f1.safetensors cli_f2.safetensors") != 0, "mkl and nomkl streams differ");
    /* --threads 1 and --threads 2 give byte-identical files (forward, dropout and gradients) */
    char gsrc[1100];
    snprintf(gsrc, sizeof gsrc,
             "run cross --heads 3 --weights %s/cross_44.weights.safetensors --input %s/cross_44.io.safetensors "
             "--train --seed 5 --dropout 0.3 --grad",
             golden, golden);
    snprintf(c1, sizeof c1, "%s --threads 1 --output cli_t1.safetensors", gsrc);
    CHECK(run(c1, err, sizeof err) == 0, "--threads 1 run: %s", err);
    snprintf(c1, sizeof c1, "%s --threads 2 --output cli_t2.safetensors", gsrc);
    CHECK(run(c1, err, sizeof err) == 0, "--threads 2 run: %s", err);
    CHECK(system("cmp -s cli_t1.safetensors cli_t2.safetensors") == 0, "--threads 1 and 2 outputs are bitwise equal");
    expect_fail("bad thread count", "run causal --weights w --input x --threads 0", 2, "--threads");
    expect_fail("bad flavor", "run causal --weights w --input x --torch-flavor intel", 2, "--torch-flavor");
    expect_fail("auto flavor is gone", "run causal --weights w --input x --torch-flavor auto", 2, "--torch-flavor");
}

/* attn sdpa: usage and data errors; misc refusals */
static void test_sdpa_errors(void) {
    char err[4096];
    expect_fail("sdpa bad causal", "sdpa --input x --causal sideways", 2, "--causal");
    expect_fail("sdpa bad window", "sdpa --input x --window-left -2", 2, "--window-left");
    expect_fail("sdpa bad softcap", "sdpa --input x --softcap -1", 2, "--softcap");
    expect_fail("sdpa missing input", "sdpa", 2, "--input");
    make_sdpa_input("cli_sdpa_gqa.safetensors", 3, 2, 0); /* 3 query heads, 2 kv heads */
    expect_fail("sdpa heads", "sdpa --input cli_sdpa_gqa.safetensors", 1, "multiple");
    make_sdpa_input("cli_sdpa_sl.safetensors", 2, 2, 9); /* seqlens 9 > Sk 5 */
    expect_fail("sdpa seqlens", "sdpa --input cli_sdpa_sl.safetensors", 1, "seqlens_k");
    make_sdpa_input("cli_sdpa_ok.safetensors", 4, 2, 3);
    CHECK(run("sdpa --input cli_sdpa_ok.safetensors --output cli_sdpa_out.safetensors --causal bottom-right "
              "--window-left 2 --softcap 10",
              err, sizeof err) == 0,
          "sdpa with GQA, seqlens, window and softcap: %s", err);
    expect_fail("sdpa grad without grad_out", "sdpa --input cli_sdpa_ok.safetensors --grad", 1, "grad_out");
    same_file_refused(err, sizeof err);
    expect_fail("run --incremental on a non-causal module",
                "run sa_v2 --weights w --input x --incremental 2 --train --seed 1", 2, "--incremental");
}

int main(int argc, char **argv) {
    tu_init(argc, argv);
    if (argc < 3) return 2;
    attn = argv[2];
    test_help();
    test_sdpa_varlen();
    test_sdpa_dbias();
    test_bench_smoke();
    if (snprintf(golden, sizeof golden, "%s/golden", tu_srcdir) >= (int)sizeof golden) return 2;
    test_usage_errors();
    test_bench_usage_errors();
    test_data_errors();
    test_outputs();
    test_sdpa_errors();
    test_math();
    return tu_finish("test_cli");
}
