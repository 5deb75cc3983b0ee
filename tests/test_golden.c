/* Golden tests: every case of tests/golden/manifest.txt (written by
 * gen_golden.py with PyTorch) is run through the library and, when the attn
 * binary is given, through `attn run`; outputs must match PyTorch's within
 * rtol 2e-4, atol 2e-5.
 * usage: test_golden SRCDIR [ATTN_BINARY] */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RTOL 2e-4
#define ATOL 2e-5

typedef struct gcase {
    char name[64], kind[32], flavor[16];
    int heads, train, seed, ctx;
    double dropout, out_dropout;
} gcase;

static int parse_line(const char *line, gcase *c) {
    memset(c, 0, sizeof *c);
    char buf[512];
    snprintf(buf, sizeof buf, "%s", line);
    char *save = NULL;
    int fields = 0;
    for (char *tok = strtok_r(buf, " \t\n", &save); tok; tok = strtok_r(NULL, " \t\n", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) return 0;
        *eq = 0;
        const char *k = tok, *v = eq + 1;
        fields++;
        if (!strcmp(k, "case"))
            snprintf(c->name, sizeof c->name, "%s", v);
        else if (!strcmp(k, "kind"))
            snprintf(c->kind, sizeof c->kind, "%s", v);
        else if (!strcmp(k, "flavor"))
            snprintf(c->flavor, sizeof c->flavor, "%s", v);
        else if (!strcmp(k, "heads"))
            c->heads = atoi(v);
        else if (!strcmp(k, "train"))
            c->train = atoi(v);
        else if (!strcmp(k, "seed"))
            c->seed = atoi(v);
        else if (!strcmp(k, "ctx"))
            c->ctx = atoi(v);
        else if (!strcmp(k, "dropout"))
            c->dropout = atof(v);
        else if (!strcmp(k, "out_dropout"))
            c->out_dropout = atof(v);
        else
            fields--;
    }
    return fields >= 9;
}

static float *read_all(const attn_st_file *f, const char *name, int *nd, int64_t *sh, size_t *n) {
    if (attn_st_info(f, name, NULL, nd, sh) != ATTN_OK) return NULL;
    *n = 1;
    for (int i = 0; i < *nd; i++) *n *= (size_t)sh[i];
    float *p = malloc((*n ? *n : 1) * sizeof *p);
    if (p && attn_st_read_f32(f, name, p, *n) != ATTN_OK) {
        free(p);
        return NULL;
    }
    return p;
}

/* Every grad_* / grad.<param> tensor of the golden io file against ours. */
static void compare_grads(const char *cname, const char *via, const attn_st_file *io, const attn_layer *l,
                          const float *gx, const float *gy, size_t xn, size_t yn) {
    int nparams = 0, ncompared = 0;
    for (int i = 0; i < attn_st_count(io); i++) {
        const char *name = attn_st_name(io, i);
        if (strncmp(name, "grad", 4) != 0 || !strcmp(name, "grad_out")) continue;
        int nd;
        int64_t sh[ATTN_MAX_DIMS];
        size_t n;
        float *want = read_all(io, name, &nd, sh, &n);
        const float *got = NULL;
        if (!strcmp(name, "grad_x") && n == xn)
            got = gx;
        else if (!strcmp(name, "grad_y") && n == yn)
            got = gy;
        else if (!strncmp(name, "grad.", 5)) {
            nparams++;
            for (int t = 0; t < attn_layer_tensor_count(l); t++) {
                attn_tensor_info ti;
                attn_layer_tensor(l, t, &ti);
                if (!strcmp(ti.name, name + 5)) got = ti.grad;
            }
        }
        CHECK(got != NULL, "%s: no gradient '%s' (%s)", cname, name, via);
        if (got && want) {
            char label[160];
            snprintf(label, sizeof label, "%s %s (%s)", cname, name, via);
            tu_allclose(label, got, want, n, RTOL, ATOL);
            ncompared++;
        }
        free(want);
    }
    int ltrain = 0;
    for (int t = 0; t < attn_layer_tensor_count(l); t++) {
        attn_tensor_info ti;
        attn_layer_tensor(l, t, &ti);
        ltrain += !ti.is_buffer;
    }
    CHECK(nparams == ltrain, "%s: golden has %d parameter gradients, layer has %d parameters", cname, nparams, ltrain);
    CHECK(ncompared > 0, "%s: no gradient compared", cname);
}

static void run_lib(const gcase *c, const char *wpath, const char *iopath) {
    attn_st_file *wf = NULL, *io = NULL;
    CHECK_OK(attn_st_open(wpath, &wf));
    CHECK_OK(attn_st_open(iopath, &io));
    if (!wf || !io) goto out;
    int xnd, ond, ynd = 0;
    int64_t xs[ATTN_MAX_DIMS], os[ATTN_MAX_DIMS], ys[ATTN_MAX_DIMS];
    size_t xn, on, yn = 0;
    float *x = read_all(io, "x", &xnd, xs, &xn), *want = read_all(io, "out", &ond, os, &on);
    float *y = read_all(io, "y", &ynd, ys, &yn);
    CHECK(x && want, "%s: x/out missing", c->name);
    int64_t B = xnd == 3 ? xs[0] : 1, S = xs[xnd - 2], C = xs[xnd - 1];
    int64_t Sk = y ? ys[ynd - 2] : S;
    uint8_t *mask = NULL;
    if (attn_st_info(io, "mask", NULL, NULL, NULL) == ATTN_OK) {
        mask = malloc((size_t)(B * Sk));
        CHECK_OK(attn_st_read_u8(io, "mask", mask, (size_t)(B * Sk)));
    }
    attn_layer_kind kind;
    CHECK_OK(attn_layer_kind_parse(c->kind, &kind));
    attn_layer_config cfg;
    attn_layer_config_default(&cfg, kind, C, C, c->heads);
    cfg.dropout = c->dropout;
    cfg.out_dropout = c->out_dropout;
    if (kind == ATTN_LAYER_CAUSAL_MHA || kind == ATTN_LAYER_CROSS) cfg.context_length = c->ctx;
    attn_layer *l = NULL;
    char detail[256];
    attn_status st = attn_layer_load_ex(&cfg, wf, &l, detail, sizeof detail);
    CHECK(st == ATTN_OK, "%s: load: %s (%s)", c->name, attn_status_string(st), detail);
    /* both paths: the fused default and the reference */
    for (int impl = ATTN_IMPL_AUTO; l && x && want && impl <= ATTN_IMPL_REF; impl++) {
        const char *via = impl == ATTN_IMPL_REF ? "library, ref" : "library, fast";
        float *out = calloc(on, sizeof *out);
        attn_generator g;
        attn_generator_seed(&g, (uint64_t)c->seed);
        attn_generator_set_flavor(&g, strcmp(c->flavor, "mkl") ? ATTN_TORCH_NOMKL : ATTN_TORCH_MKL);
        attn_forward_args a = {x, B, S, y, Sk, mask, c->train, &g, (attn_impl)impl, out, ATTN_MATH_STRICT};
        CHECK_OK(attn_layer_forward(l, &a));
        char label[128];
        snprintf(label, sizeof label, "%s out (%s)", c->name, via);
        tu_allclose(label, out, want, on, RTOL, ATOL);
        free(out);
        int gnd;
        int64_t gs[ATTN_MAX_DIMS];
        size_t gn;
        float *gout = read_all(io, "grad_out", &gnd, gs, &gn);
        if (gout) {
            float *gx = calloc(xn, sizeof *gx), *gy = y ? calloc(yn, sizeof *gy) : NULL;
            attn_layer_zero_grad(l);
            attn_backward_args ba = {gout, gx, gy};
            CHECK_OK(attn_layer_backward(l, &ba));
            compare_grads(c->name, via, io, l, gx, gy, xn, yn);
            free(gx);
            free(gy);
            free(gout);
        }
    }
    /* eval cases carry the attention weights every head computed in PyTorch */
    int wnd;
    int64_t ws[ATTN_MAX_DIMS];
    size_t wn;
    float *wwant = l && x ? read_all(io, "attn_weights", &wnd, ws, &wn) : NULL;
    if (wwant) {
        int64_t H = attn_layer_attention_heads(l);
        CHECK(wnd == 4 && ws[0] == B && ws[1] == H && ws[2] == S && ws[3] == Sk,
              "%s: attn_weights shape differs from (B=%lld, H=%lld, S=%lld, Sk=%lld)", c->name, (long long)B,
              (long long)H, (long long)S, (long long)Sk);
        float *w = calloc(wn, sizeof *w);
        attn_forward_args a = {x, B, S, y, Sk, mask, 0, NULL, ATTN_IMPL_AUTO, NULL, ATTN_MATH_STRICT};
        CHECK_OK(attn_layer_attention_weights(l, &a, NULL, w));
        float *sc = calloc(wn, sizeof *sc), *w2 = calloc(wn, sizeof *w2);
        CHECK_OK(attn_layer_attention_weights(l, &a, sc, w2)); /* scores: -inf exactly where PyTorch gives 0 */
        size_t bad = 0;
        for (size_t i = 0; i < wn; i++) bad += (sc[i] == -INFINITY) != (wwant[i] == 0.0f) || w2[i] != w[i];
        CHECK(bad == 0, "%s: %zu scores disagree with the weights' zeros", c->name, bad);
        free(sc), free(w2);
        char label[128];
        snprintf(label, sizeof label, "%s attn_weights", c->name);
        tu_allclose(label, w, wwant, wn, RTOL, ATOL);
        free(w), free(wwant);
    }
    attn_layer_free(l);
    free(x);
    free(y);
    free(want);
    free(mask);
out:
    attn_st_close(wf);
    attn_st_close(io);
}

static void run_cli(const gcase *c, const char *attn, const char *wpath, const char *iopath) {
    char outpath[256], cmd[2048];
    snprintf(outpath, sizeof outpath, "golden_cli_%s.safetensors", c->name);
    int n = snprintf(cmd, sizeof cmd, "'%s' run %s --weights '%s' --input '%s' --output '%s'", attn, c->kind, wpath,
                     iopath, outpath);
    if (c->heads > 1 || !strcmp(c->kind, "mha") || !strcmp(c->kind, "fused_mha") || !strcmp(c->kind, "bidirectional") ||
        !strcmp(c->kind, "causal_mha") || !strcmp(c->kind, "cross"))
        n += snprintf(cmd + n, sizeof cmd - (size_t)n, " --heads %d", c->heads);
    if (c->ctx) n += snprintf(cmd + n, sizeof cmd - (size_t)n, " --context-length %d", c->ctx);
    n += snprintf(cmd + n, sizeof cmd - (size_t)n, " --dropout %.9g --out-dropout %.9g --torch-flavor %s", c->dropout,
                  c->out_dropout, c->flavor);
    if (c->train) n += snprintf(cmd + n, sizeof cmd - (size_t)n, " --train --seed %d", c->seed);
    n += snprintf(cmd + n, sizeof cmd - (size_t)n, " --grad");
    int rc = system(cmd);
    CHECK(rc == 0, "%s: '%s' exited %d", c->name, cmd, rc);
    if (rc != 0) return;
    attn_st_file *of = NULL, *io = NULL;
    CHECK_OK(attn_st_open(outpath, &of));
    CHECK_OK(attn_st_open(iopath, &io));
    int nd1, nd2;
    int64_t s1[ATTN_MAX_DIMS], s2[ATTN_MAX_DIMS];
    size_t n1, n2;
    float *got = of ? read_all(of, "out", &nd1, s1, &n1) : NULL, *want = io ? read_all(io, "out", &nd2, s2, &n2) : NULL;
    CHECK(got && want && nd1 == nd2 && n1 == n2 && !memcmp(s1, s2, (size_t)nd1 * sizeof s1[0]),
          "%s: CLI output shape differs from PyTorch's", c->name);
    if (got && want && n1 == n2) {
        char label[128];
        snprintf(label, sizeof label, "%s out (attn run)", c->name);
        tu_allclose(label, got, want, n1, RTOL, ATOL);
    }
    /* every gradient PyTorch computed must be in the CLI output */
    for (int i = 0; of && io && i < attn_st_count(io); i++) {
        const char *name = attn_st_name(io, i);
        if (strncmp(name, "grad", 4) != 0 || !strcmp(name, "grad_out")) continue;
        int a1, a2;
        int64_t t1[ATTN_MAX_DIMS], t2[ATTN_MAX_DIMS];
        size_t m1, m2;
        float *g1 = read_all(of, name, &a1, t1, &m1), *g2 = read_all(io, name, &a2, t2, &m2);
        CHECK(g1 && g2 && m1 == m2, "%s: attn run --grad did not write '%s'", c->name, name);
        if (g1 && g2 && m1 == m2) {
            char label[160];
            snprintf(label, sizeof label, "%s %s (attn run)", c->name, name);
            tu_allclose(label, g1, g2, m1, RTOL, ATOL);
        }
        free(g1);
        free(g2);
    }
    free(got);
    free(want);
    attn_st_close(of);
    attn_st_close(io);
    unlink(outpath);
}

/* eval-mode causal cases without a padding mask, again through the KV cache:
 * `attn run --incremental 3` must reproduce PyTorch's full forward */
static void run_cli_incremental(const gcase *c, const char *attn, const char *wpath, const char *iopath) {
    const char *kinds[] = {"causal", "mha_wrapper", "mha", "gpt_mha", "causal_mha"};
    int ok = 0;
    for (int i = 0; i < 5; i++) ok |= !strcmp(c->kind, kinds[i]);
    attn_st_file *io = NULL;
    if (!ok || c->train || attn_st_open(iopath, &io) != ATTN_OK) return;
    int has_mask = attn_st_info(io, "mask", NULL, NULL, NULL) == ATTN_OK;
    if (has_mask) {
        attn_st_close(io);
        return;
    }
    char outpath[256], cmd[2048];
    snprintf(outpath, sizeof outpath, "golden_inc_%s.safetensors", c->name);
    int n = snprintf(cmd, sizeof cmd, "'%s' run %s --weights '%s' --input '%s' --output '%s' --incremental 3", attn,
                     c->kind, wpath, iopath, outpath);
    if (!strcmp(c->kind, "mha") || !strcmp(c->kind, "causal_mha"))
        n += snprintf(cmd + n, sizeof cmd - (size_t)n, " --heads %d", c->heads);
    if (c->ctx) snprintf(cmd + n, sizeof cmd - (size_t)n, " --context-length %d", c->ctx);
    int rc = system(cmd);
    CHECK(rc == 0, "%s: '%s' exited %d", c->name, cmd, rc);
    attn_st_file *of = NULL;
    if (rc == 0 && attn_st_open(outpath, &of) == ATTN_OK) {
        int nd1, nd2;
        int64_t s1[ATTN_MAX_DIMS], s2[ATTN_MAX_DIMS];
        size_t n1, n2;
        float *got = read_all(of, "out", &nd1, s1, &n1), *want = read_all(io, "out", &nd2, s2, &n2);
        CHECK(got && want && n1 == n2, "%s: incremental output shape", c->name);
        if (got && want && n1 == n2) {
            char label[128];
            snprintf(label, sizeof label, "%s out (attn run --incremental 3)", c->name);
            tu_allclose(label, got, want, n1, RTOL, ATOL);
        }
        free(got), free(want);
        attn_st_close(of);
    }
    attn_st_close(io);
    unlink(outpath);
}

int main(int argc, char **argv) {
    tu_init(argc, argv);
    const char *attn = argc > 2 ? argv[2] : NULL;
    char path[1024];
    snprintf(path, sizeof path, "%s/golden/manifest.txt", tu_srcdir);
    FILE *m = fopen(path, "r");
    CHECK(m != NULL, "cannot open %s", path);
    if (!m) return tu_finish("test_golden");
    char line[512];
    int ncases = 0;
    while (fgets(line, sizeof line, m)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        gcase c;
        CHECK(parse_line(line, &c), "bad manifest line: %s", line);
        char wpath[1024], iopath[1024];
        snprintf(wpath, sizeof wpath, "%s/golden/%s.weights.safetensors", tu_srcdir, c.name);
        snprintf(iopath, sizeof iopath, "%s/golden/%s.io.safetensors", tu_srcdir, c.name);
        run_lib(&c, wpath, iopath);
        if (attn) run_cli(&c, attn, wpath, iopath);
        if (attn) run_cli_incremental(&c, attn, wpath, iopath);
        ncases++;
    }
    fclose(m);
    CHECK(ncases > 0, "no golden cases");
    printf("%d golden cases\n", ncases);
    return tu_finish("test_golden");
}
