/* attn run: one layer on tensors read from safetensors files.
 *
 * Input file:  x (S, C) or (B, S, C); y for cross (same rank and batch);
 *              mask (B, Sk) BOOL or U8, true = masked ((Sk) accepted for 2-D x).
 *              grad_out (shape of out) with --grad.
 * Output file: out, (S, W) or (B, S, W); with --grad also grad_x, grad_y
 *              (cross) and grad.<state_dict key> for every parameter.
 *              Written atomically. */
#include "cli.h"
#include "opts.h"
#include "run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define O(f) offsetof(run_opts, f)
#define RUN_COMMON                                                                                                     \
    {NULL,                                                                                                             \
     OPT_STR,                                                                                                          \
     O(module),                                                                                                        \
     0,                                                                                                                \
     0,                                                                                                                \
     0,                                                                                                                \
     NULL,                                                                                                             \
     NULL,                                                                                                             \
     "the layer kind: simple, sa_v1, sa_v2, causal, mha_wrapper, mha, "                                                \
     "gpt_mha, single_head, fused_mha, bidirectional, causal_mha, cross"},                                             \
        {"--weights", OPT_STR, O(weights), 0, 0, 0, NULL, NULL, "the layer's state_dict as safetensors"},              \
        {"--input", OPT_STR, O(input), 0, 0, 0, NULL, NULL, "safetensors with x [y, mask, grad_out]"},                 \
        {"--output", OPT_STR, O(output), 0, 0, 0, NULL, NULL, "the file to write"},                                    \
        {"--heads", OPT_I64, O(heads), CLI_SEEN(run_opts, has_heads), 1, 65536, NULL, NULL, "attention heads"},        \
        {"--context-length",                                                                                           \
         OPT_I64,                                                                                                      \
         O(context_length),                                                                                            \
         CLI_SEEN(run_opts, has_ctx),                                                                                  \
         1,                                                                                                            \
         1 << 20,                                                                                                      \
         NULL,                                                                                                         \
         NULL,                                                                                                         \
         "the mask buffers' size (or the causal limit)"},                                                              \
        {"--dropout", OPT_PROB, O(dropout), 0, 0, 0, NULL, NULL, "attention dropout (with --train)"},                  \
        {"--out-dropout",                                                                                              \
         OPT_PROB,                                                                                                     \
         O(out_dropout),                                                                                               \
         CLI_SEEN(run_opts, has_out_dropout),                                                                          \
         0,                                                                                                            \
         0,                                                                                                            \
         NULL,                                                                                                         \
         NULL,                                                                                                         \
         "output dropout (default --dropout)"},                                                                        \
        {"--train", OPT_FLAG, O(train), 0, 0, 0, NULL, NULL, "train mode: dropout on (needs --seed)"},                 \
        {"--seed",                                                                                                     \
         OPT_I64,                                                                                                      \
         O(seed),                                                                                                      \
         CLI_SEEN(run_opts, has_seed),                                                                                 \
         0,                                                                                                            \
         9.3e18,                                                                                                       \
         NULL,                                                                                                         \
         NULL,                                                                                                         \
         "torch.manual_seed in force before forward"},                                                                 \
        {"--torch-flavor",                                                                                             \
         OPT_FLAVOR,                                                                                                   \
         O(flavor),                                                                                                    \
         0,                                                                                                            \
         0,                                                                                                            \
         0,                                                                                                            \
         NULL,                                                                                                         \
         NULL,                                                                                                         \
         "dropout stream of PyTorch builds (default mkl)"},                                                            \
        {"--threads", OPT_I64, O(threads), 0, 1, 1024, NULL, NULL, "OpenMP and BLAS threads"}, {                       \
        "--impl", OPT_CHOICE, O(impl), 0, 0, 0, "auto|ref|fast", NULL, "SDPA path"                                     \
    }
static const cli_opt run_table[] = {
    RUN_COMMON,
    {"--math", OPT_CHOICE, O(math), 0, 0, 0, "strict|data|bf16", NULL,
     "attention products' arithmetic (float32 layers: data = strict, bf16 rounds to bf16)"},
    {"--grad", OPT_FLAG, O(grad), 0, 0, 0, NULL, NULL, "also the backward of grad_out"},
    {"--incremental", OPT_I64, O(incremental), 0, 1, INT32_MAX, NULL, NULL,
     "feed N tokens at a time through a KV cache"},
};
static const cli_opt heatmap_table[] = {
    RUN_COMMON,
    {"--head", OPT_I64, O(head), 0, 0, INT32_MAX, NULL, NULL, "only this head"},
    {"--batch", OPT_I64, O(batch), 0, 0, INT32_MAX, NULL, NULL, "only this batch row"},
    {"--vmax", OPT_STR, O(vmax_s), 0, 0, 0, NULL, NULL, "'auto' or the weight at full colour"},
    {"--tokens", OPT_STR, O(tokens), 0, 0, 0, NULL, NULL, "query labels, comma-separated"},
    {"--key-tokens", OPT_STR, O(key_tokens), 0, 0, 0, NULL, NULL, "key labels, comma-separated"},
};
#undef O

int run_parse(int argc, char **argv, run_opts *o, int heatmap) {
    memset(o, 0, sizeof *o);
    o->head = o->batch = -1;
    o->flavor = ATTN_TORCH_MKL; /* one documented default, never inferred from the machine */
    int r = heatmap ? cli_parse_opts("heatmap", "MODULE --input I --output O.png [options]", heatmap_table,
                                     (int)(sizeof heatmap_table / sizeof heatmap_table[0]), argc, argv, o)
                    : cli_parse_opts("run", "MODULE --weights W --input I --output O [options]", run_table,
                                     (int)(sizeof run_table / sizeof run_table[0]), argc, argv, o);
    if (r <= 0) return r;
    if (o->vmax_s) {
        char *end = NULL;
        double x = strcmp(o->vmax_s, "auto") ? strtod(o->vmax_s, &end) : -1.0;
        if (strcmp(o->vmax_s, "auto") && (!end || *end || !(x > 0.0) || x > 1e30)) {
            cli_error("--vmax must be 'auto' or a positive number, got '%s'", o->vmax_s);
            return 0;
        }
        o->vmax = (float)x;
    }
    const char *cmd = heatmap ? "heatmap" : "run";
    if (!o->module) {
        cli_error("%s: missing MODULE (simple, sa_v1, sa_v2, causal, mha_wrapper, mha, gpt_mha, single_head, "
                  "fused_mha, bidirectional, causal_mha, cross)",
                  cmd);
        return 0;
    }
    if (!o->input || !o->output) {
        cli_error("%s: --input and --output are required", cmd);
        return 0;
    }
    if (cli_output_is_input(cmd, o->output, "--input", o->input) ||
        cli_output_is_input(cmd, o->output, "--weights", o->weights))
        return 0;
    if (o->train && !o->has_seed) {
        cli_error("%s: --train needs --seed N (the torch.manual_seed in force before forward)", cmd);
        return 0;
    }
    if (o->incremental && (o->train || o->grad)) {
        cli_error("run: --incremental runs the KV-cache path in eval mode (no --train, no --grad)");
        return 0;
    }
    if (!o->has_out_dropout) o->out_dropout = o->dropout;
    return 1;
}

static int kind_needs_heads(attn_layer_kind k) { return (attn_layer_kind_flags(k) & ATTN_KIND_HEADS) != 0; }

/* The forward of a causal layer fed n tokens at a time through a KV cache
 * (the last chunk shorter); the chunks' outputs are concatenated into
 * fa->out. Returns 0 on success. */
static int run_incremental(attn_layer *layer, const attn_forward_args *fa, int64_t C, int64_t W, int64_t n,
                           const char *module) {
    int64_t heads, hd, B = fa->B, S = fa->S;
    attn_status st = attn_layer_kv_shape(layer, &heads, &hd);
    if (st != ATTN_OK) {
        cli_error("--incremental: %s has no incremental form (causal, mha_wrapper, mha, gpt_mha and causal_mha do)",
                  module);
        return 1;
    }
    attn_kv_cache_config kc = {
        .batch = B, .kv_heads = heads, .capacity = S, .head_dim = hd, .v_head_dim = hd, .dtype = ATTN_DTYPE_F32};
    attn_kv_cache *cache = NULL;
    int64_t chunk = n < S ? n : S;
    float *xc = malloc((size_t)(B * chunk * C) * sizeof(float)), *oc = malloc((size_t)(B * chunk * W) * sizeof(float));
    if ((st = attn_kv_cache_create(&kc, &cache)) != ATTN_OK || !xc || !oc) {
        cli_error("--incremental: cannot create the KV cache: %s", st ? cli_status(st) : "out of memory");
        attn_kv_cache_free(cache), free(xc), free(oc);
        return 1;
    }
    for (int64_t t0 = 0; t0 < S && st == ATTN_OK; t0 += chunk) {
        int64_t m = S - t0 < chunk ? S - t0 : chunk;
        for (int64_t b = 0; b < B; b++)
            memcpy(xc + b * m * C, fa->x + (b * S + t0) * C, (size_t)(m * C) * sizeof(float));
        /* the padding mask of the whole input covers the cache's positions after every chunk */
        attn_forward_args ia = {
            .x = xc, .B = B, .S = m, .mask = fa->mask, .Sk = S, .impl = fa->impl, .out = oc, .math = fa->math};
        st = attn_layer_forward_incremental(layer, cache, &ia);
        for (int64_t b = 0; st == ATTN_OK && b < B; b++)
            memcpy(fa->out + (b * S + t0) * W, oc + b * m * W, (size_t)(m * W) * sizeof(float));
    }
    if (st != ATTN_OK) cli_error("%s incremental forward failed: %s", module, cli_status(st));
    attn_kv_cache_free(cache), free(xc), free(oc);
    return st != ATTN_OK;
}

int run_load(const run_opts *po, run_inputs *in) {
    const run_opts o = *po;
    memset(in, 0, sizeof *in);
    attn_layer_kind kind;
    if (attn_layer_kind_parse(o.module, &kind) != ATTN_OK) {
        cli_error("unknown module '%s'", o.module);
        return EXIT_USAGE;
    }
    in->kind = kind;
    if (kind_needs_heads(kind) && !o.has_heads) {
        cli_error("%s needs --heads N", o.module);
        return EXIT_USAGE;
    }
    if (!o.weights && kind != ATTN_LAYER_SIMPLE) {
        cli_error("%s needs --weights W.safetensors", o.module);
        return EXIT_USAGE;
    }
    if (o.threads > 0) cli_set_threads((int)o.threads);
    attn_status st;
    if ((st = attn_st_open(o.input, &in->inf)) != ATTN_OK) {
        cli_error("cannot load input '%s': %s", o.input, cli_status(st));
        return 1;
    }
    attn_st_file *inf = in->inf;
    int xnd, ynd = 0;
    int64_t xs[ATTN_MAX_DIMS], ys[ATTN_MAX_DIMS];
    if (!cli_read_float(inf, o.input, "x", &xnd, xs, &in->x)) return 1;
    if (xnd != 2 && xnd != 3) {
        cli_error("%s: x must be (S, C) or (B, S, C), has %d dims", o.input, xnd);
        return 1;
    }
    int64_t B = xnd == 3 ? xs[0] : 1, S = xs[xnd - 2], C = xs[xnd - 1], Sk = S;
    if (B < 1 || S < 1 || C < 1) {
        cli_error("%s: x has an empty dimension", o.input);
        return 1;
    }
    if (attn_layer_kind_flags(kind) & ATTN_KIND_CROSS) {
        if (!cli_read_float(inf, o.input, "y", &ynd, ys, &in->y)) return 1;
        if (ynd != xnd || (ynd == 3 && ys[0] != B) || ys[ynd - 1] != C || ys[ynd - 2] < 1) {
            cli_error("%s: y must be (%s Sk, %lld) to match x", o.input, xnd == 3 ? "B," : "", (long long)C);
            return 1;
        }
        Sk = ys[ynd - 2];
    }
    in->xnd = xnd, in->B = B, in->S = S, in->Sk = Sk, in->C = C;
    attn_dtype mdt;
    int mnd;
    int64_t ms[ATTN_MAX_DIMS];
    if (attn_st_info(inf, "mask", &mdt, &mnd, ms) == ATTN_OK) {
        if (mdt != ATTN_DTYPE_BOOL && mdt != ATTN_DTYPE_U8) {
            cli_error("%s: mask must be BOOL or U8 (true = masked)", o.input);
            return 1;
        }
        int ok = (mnd == 2 && ms[0] == B && ms[1] == Sk) || (mnd == 1 && xnd == 2 && ms[0] == Sk);
        if (!ok) {
            cli_error("%s: mask must have shape (B, Sk) = (%lld, %lld)", o.input, (long long)B, (long long)Sk);
            return 1;
        }
        if (!(attn_layer_kind_flags(kind) & ATTN_KIND_TAKES_MASK)) {
            cli_error("%s does not take a padding mask (bidirectional, causal_mha and cross do)", o.module);
            return 1;
        }
        in->mask = malloc((size_t)(B * Sk));
        if (!in->mask) {
            cli_error("out of memory");
            return 1;
        }
        if ((st = attn_st_read_u8(inf, "mask", in->mask, (size_t)(B * Sk))) != ATTN_OK) {
            cli_error("%s: cannot read mask: %s", o.input, cli_status(st));
            return 1;
        }
    }

    attn_layer_config cfg;
    attn_layer_config_default(&cfg, kind, C, C, o.has_heads ? o.heads : 1);
    cfg.dropout = o.dropout;
    cfg.out_dropout = o.out_dropout;
    unsigned kf = attn_layer_kind_flags(kind);
    int ctx_setting = (kf & ATTN_KIND_CAUSAL) && !(kf & ATTN_KIND_BUFFER); /* a limit, not a buffer's size */
    if (o.has_ctx && ctx_setting) cfg.context_length = o.context_length;
    char detail[256];
    if (o.weights) {
        if ((st = attn_st_open(o.weights, &in->wf)) != ATTN_OK) {
            cli_error("cannot load weights '%s': %s", o.weights, cli_status(st));
            return 1;
        }
        if ((st = attn_layer_load_ex(&cfg, in->wf, &in->layer, detail, sizeof detail)) != ATTN_OK) {
            cli_error("%s: %s: %s", o.weights, o.module, detail[0] ? detail : cli_status(st));
            return 1;
        }
    } else if ((st = attn_layer_create(&cfg, &in->layer)) != ATTN_OK) {
        cli_error("%s: %s", o.module, cli_status(st));
        return 1;
    }
    const attn_layer_config *lc = attn_layer_get_config(in->layer);
    if (o.has_ctx && lc->context_length > 0 && !ctx_setting && lc->context_length != o.context_length) {
        cli_error("--context-length %lld disagrees with the %lld x %lld mask buffer in '%s'",
                  (long long)o.context_length, (long long)lc->context_length, (long long)lc->context_length, o.weights);
        return 1;
    }
    if (o.has_heads && lc->num_heads != o.heads) {
        cli_error("--heads %lld disagrees with the %lld heads in '%s'", (long long)o.heads, (long long)lc->num_heads,
                  o.weights);
        return 1;
    }
    if (lc->d_in != C) {
        cli_error("input x has width %lld but the %s weights expect %lld", (long long)C, o.module, (long long)lc->d_in);
        return 1;
    }
    if (lc->context_length > 0 && (S > lc->context_length || Sk > lc->context_length) && (kf & ATTN_KIND_CAUSAL)) {
        cli_error("sequence length %lld exceeds the context length %lld", (long long)(S > Sk ? S : Sk),
                  (long long)lc->context_length);
        return 1;
    }
    return 0;
}

void run_inputs_free(run_inputs *in) {
    attn_layer_free(in->layer);
    attn_st_close(in->wf);
    attn_st_close(in->inf);
    free(in->x), free(in->y), free(in->mask);
    memset(in, 0, sizeof *in);
}

int cmd_run(int argc, char **argv) {
    run_opts o;
    int pr = run_parse(argc, argv, &o, 0);
    if (pr <= 0) return pr < 0 ? 0 : EXIT_USAGE;
    run_inputs in;
    int rc = run_load(&o, &in);
    if (rc) {
        run_inputs_free(&in);
        return rc;
    }
    rc = 1;
    attn_layer *layer = in.layer;
    attn_st_file *inf = in.inf;
    float *x = in.x, *y = in.y, *out = NULL, *gout = NULL, *gx = NULL, *gy = NULL;
    uint8_t *mask = in.mask;
    int xnd = in.xnd;
    int64_t B = in.B, S = in.S, Sk = in.Sk, C = in.C;
    attn_st_writer *w = NULL;
    attn_status st;
    int64_t W = attn_layer_out_width(layer);
    out = malloc((size_t)(B * S * W) * sizeof(float));
    if (!out) {
        cli_error("out of memory");
        goto done;
    }
    attn_generator gen;
    attn_generator_seed(&gen, (uint64_t)o.seed);
    attn_generator_set_flavor(&gen, o.flavor);
    attn_forward_args fa = {x, B, S, y, Sk, mask, o.train, &gen, (attn_impl)o.impl, out, (attn_math)o.math};
    if (o.incremental) { /* through the layer's KV cache, N tokens at a time */
        if (run_incremental(layer, &fa, C, W, o.incremental, o.module)) goto done;
    } else if ((st = attn_layer_forward(layer, &fa)) != ATTN_OK) {
        cli_error("%s forward failed: %s", o.module, cli_status(st));
        goto done;
    }
    int64_t os[3] = {B, S, W};
    if ((st = attn_st_writer_new(&w)) != ATTN_OK ||
        (st = attn_st_writer_add(w, "out", ATTN_DTYPE_F32, xnd, xnd == 3 ? os : os + 1, out)) != ATTN_OK) {
        cli_error("cannot build output: %s", cli_status(st));
        goto done;
    }
    if (o.grad) {
        int gnd;
        int64_t gs[ATTN_MAX_DIMS];
        if (!cli_read_float(inf, o.input, "grad_out", &gnd, gs, &gout)) goto done;
        int same = gnd == xnd;
        for (int i = 0; same && i < gnd; i++) same = gs[i] == (xnd == 3 ? os : os + 1)[i];
        if (!same) {
            cli_error("%s: grad_out must have the shape of out, (%s%lld, %lld)", o.input, xnd == 3 ? "B, " : "",
                      (long long)S, (long long)W);
            goto done;
        }
        gx = malloc((size_t)(B * S * C) * sizeof(float));
        gy = y ? malloc((size_t)(B * Sk * C) * sizeof(float)) : NULL;
        if (!gx || (y && !gy)) {
            cli_error("out of memory");
            goto done;
        }
        attn_layer_zero_grad(layer);
        attn_backward_args ba = {gout, gx, gy};
        if ((st = attn_layer_backward(layer, &ba)) != ATTN_OK) {
            cli_error("%s backward failed: %s", o.module, cli_status(st));
            goto done;
        }
        int64_t xsh[3] = {B, S, C}, ysh[3] = {B, Sk, C};
        st = attn_st_writer_add(w, "grad_x", ATTN_DTYPE_F32, xnd, xnd == 3 ? xsh : xsh + 1, gx);
        if (!st && gy) st = attn_st_writer_add(w, "grad_y", ATTN_DTYPE_F32, xnd, xnd == 3 ? ysh : ysh + 1, gy);
        for (int i = 0; !st && i < attn_layer_tensor_count(layer); i++) {
            attn_tensor_info t;
            attn_layer_tensor(layer, i, &t);
            if (t.is_buffer) continue;
            char name[128];
            snprintf(name, sizeof name, "grad.%s", t.name);
            st = attn_st_writer_add(w, name, ATTN_DTYPE_F32, t.ndim, t.shape, t.grad);
        }
        if (st) {
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
    attn_st_writer_free(w);
    run_inputs_free(&in);
    free(out);
    free(gout);
    free(gx);
    free(gy);
    return rc;
}
