/* attn heatmap: the attention weights of one head of a layer as a picture
 * (SVG or PNG), from the same weights and input files as `attn run`. */
#include "cli.h"
#include "heatmap_draw.h"
#include "run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Split a comma-separated list in place; returns the count (pointers into s). */
static int64_t split_tokens(char *s, char **out, int64_t cap) {
    int64_t n = 0;
    for (char *p = s;; p++) {
        if (n < cap) out[n] = p;
        n++;
        p = strchr(p, ',');
        if (!p) break;
        *p = '\0';
    }
    return n;
}

/* Labels from --tokens / --key-tokens: exactly `want` of them. Returns a
 * malloc'ed array (and the copied string in *store), NULL on error (printed). */
static char **labels(const char *opt, const char *list, int64_t want, const char *what, char **store) {
    *store = strdup(list);
    char **l = calloc((size_t)want, sizeof *l);
    if (!*store || !l) {
        cli_error("out of memory");
        free(l);
        return NULL;
    }
    int64_t n = split_tokens(*store, l, want);
    if (n != want) {
        cli_error("%s has %lld tokens but the input has %lld %s", opt, (long long)n, (long long)want, what);
        free(l);
        return NULL;
    }
    return l;
}

int cmd_heatmap(int argc, char **argv) {
    run_opts o;
    int pr = run_parse(argc, argv, &o, 1);
    if (pr <= 0) return pr < 0 ? 0 : EXIT_USAGE;
    if (!heatmap_format_ok(o.output)) {
        cli_error("heatmap: --output must end in .svg or .png, got '%s'", o.output);
        return EXIT_USAGE;
    }
    run_inputs in;
    int rc = run_load(&o, &in);
    float *sc = NULL, *w = NULL, *ws = NULL, *ss = NULL;
    char **ql = NULL, **kl = NULL, *qstore = NULL, *kstore = NULL;
    if (rc) goto done;
    rc = EXIT_USAGE;
    int64_t H = attn_layer_attention_heads(in.layer), B = in.B, S = in.S, Sk = in.Sk;
    int64_t head = o.head < 0 ? 0 : o.head, batch = o.batch < 0 ? 0 : o.batch;
    if (head >= H) {
        cli_error("--head %lld: %s has %lld head%s (0 to %lld)", (long long)head, o.module, (long long)H,
                  H == 1 ? "" : "s", (long long)(H - 1));
        goto done;
    }
    if (batch >= B) {
        cli_error("--batch %lld: the input has %lld sequence%s (0 to %lld)", (long long)batch, (long long)B,
                  B == 1 ? "" : "s", (long long)(B - 1));
        goto done;
    }
    int cross = (attn_layer_kind_flags(in.kind) & ATTN_KIND_CROSS) != 0;
    if (o.tokens && !(ql = labels("--tokens", o.tokens, S, "queries", &qstore))) goto done;
    if (o.key_tokens && !(kl = labels("--key-tokens", o.key_tokens, Sk, "keys", &kstore))) goto done;
    if (!kl && !cross) kl = ql; /* self-attention: the keys are the same tokens */
    rc = 1;
    size_t n = (size_t)B * (size_t)H * (size_t)S * (size_t)Sk;
    if (S > 4096 || Sk > 4096) {
        cli_error("heatmap: %lld x %lld is too large to draw (at most 4096 x 4096)", (long long)S, (long long)Sk);
        goto done;
    }
    sc = malloc(n * sizeof *sc), w = malloc(n * sizeof *w);
    ws = malloc((size_t)(S * Sk) * sizeof *ws), ss = malloc((size_t)(S * Sk) * sizeof *ss);
    if (!sc || !w || !ws || !ss) {
        cli_error("out of memory for the %lld x %lld attention of %lld heads", (long long)S, (long long)Sk,
                  (long long)(B * H));
        goto done;
    }
    attn_generator gen;
    attn_generator_seed(&gen, (uint64_t)o.seed);
    attn_generator_set_flavor(&gen, o.flavor);
    attn_forward_args fa = {in.x, B, S, in.y, Sk, in.mask, o.train, &gen, (attn_impl)o.impl, NULL, ATTN_MATH_STRICT};
    attn_status st = attn_layer_attention_weights(in.layer, &fa, sc, w);
    if (st != ATTN_OK) {
        cli_error("%s: attention weights: %s", o.module, cli_status(st));
        goto done;
    }
    size_t off = ((size_t)batch * (size_t)H + (size_t)head) * (size_t)(S * Sk);
    memcpy(ws, w + off, (size_t)(S * Sk) * sizeof *ws);
    memcpy(ss, sc + off, (size_t)(S * Sk) * sizeof *ss);
    char title[256];
    snprintf(title, sizeof title, "%s: head %lld of %lld, sequence %lld of %lld%s", o.module, (long long)head,
             (long long)H, (long long)batch, (long long)B, o.train ? " (train: after dropout)" : "");
    heatmap_spec spec = {ws, ss, S, Sk, (const char *const *)ql, (const char *const *)kl, title, o.vmax};
    char err[512];
    if (heatmap_write(&spec, o.output, err, sizeof err) != 0) {
        cli_error("heatmap: %s", err);
        goto done;
    }
    rc = 0;
done:
    if (kl != ql) free(kl);
    free(ql), free(qstore), free(kstore);
    free(sc), free(w), free(ws), free(ss);
    run_inputs_free(&in);
    return rc;
}
