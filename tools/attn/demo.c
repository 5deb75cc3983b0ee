/* attn demo: the seed notebooks 000, 002 and 003, step by step, every tensor
 * they print recomputed by libattn from the same random seeds and printed in
 * PyTorch's format. The attention math (scores, masks, softmax, dropout,
 * layers) goes through the library; the notebooks' own small arithmetic
 * (x @ W, sums, divisions) is done here as the notebooks do it, in float32. */
#include "cli.h"
#include "heatmap_draw.h"
#include "print.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TMAX 128

/* A small dense float32 tensor (at most 3-D, TMAX elements). */
typedef struct T {
    int nd;
    int64_t sh[3];
    float d[TMAX];
} T;

static int failed;

static void check(attn_status st, const char *what) {
    if (st != ATTN_OK && !failed) {
        cli_error("demo: %s: %s", what, cli_status(st));
        failed = 1;
    }
}

static T mk(int nd, int64_t a, int64_t b, int64_t c) {
    T t;
    memset(&t, 0, sizeof t);
    t.nd = nd;
    t.sh[0] = a;
    t.sh[1] = b;
    t.sh[2] = c;
    return t;
}
static size_t numel(const T *t) {
    size_t n = 1;
    for (int i = 0; i < t->nd; i++) n *= (size_t)t->sh[i];
    return n;
}
static void show(const char *prefix, const T *t, const char *suffix) {
    tp_print(stdout, prefix, t->d, t->nd, t->sh, suffix);
}
static void show_size(const char *prefix, const T *t) { tp_print_size(stdout, prefix, t->nd, t->sh); }
static void step(const char *text) { printf("\n>>> %s\n", text); }

/* row r of a 2-D tensor as a 1-D tensor */
static T row(const T *t, int64_t r) {
    T o = mk(1, t->sh[1], 0, 0);
    memcpy(o.d, t->d + r * t->sh[1], (size_t)t->sh[1] * sizeof(float));
    return o;
}

/* The notebooks' a @ b for 1-D or 2-D a and 2-D b, float32 accumulation. */
static T matmul(const T *a, const T *b) {
    int64_t M = a->nd == 1 ? 1 : a->sh[0], K = a->sh[a->nd - 1], N = b->sh[1];
    T o = a->nd == 1 ? mk(1, N, 0, 0) : mk(2, M, N, 0);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            float s = 0.0f;
            for (int64_t k = 0; k < K; k++) s += a->d[i * K + k] * b->d[k * N + j];
            o.d[i * N + j] = s;
        }
    return o;
}

static float dot(const T *a, const T *b) {
    float s = 0.0f;
    for (int64_t k = 0; k < a->sh[0]; k++) s += a->d[k] * b->d[k];
    return s;
}

/* tensor.sum() as torch's CPU kernel adds a short row: four interleaved
 * accumulators combined pairwise (the last bit shows in "Sum: tensor(1.)"). */
static float fsum(const T *t) {
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (size_t i = 0; i < numel(t); i++) acc[i % 4] += t->d[i];
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

/* Python's builtin sum() over a row: left to right in float32. */
static float pysum(const T *t) {
    float s = 0.0f;
    for (size_t i = 0; i < numel(t); i++) s += t->d[i];
    return s;
}

static T scalar(float v) {
    T t = mk(0, 0, 0, 0);
    t.d[0] = v;
    return t;
}

/* ---- heatmaps (attn demo --heatmaps DIR) ---------------------------------- */

static const char *hm_dir; /* NULL: no pictures */
static int hm_count;
static const char *const TOKENS[6] = {"Your", "journey", "starts", "with", "one", "step"};

/* DIR/name.svg and DIR/name.png of an (S, Sk) map; scores (or NULL) mark
 * the hidden keys with -inf. */
static void map_write(const char *name, const char *title, const float *w, const float *scores, int64_t S, int64_t Sk,
                      const char *const *labels) {
    if (!hm_dir || failed) return;
    heatmap_spec h = {w, scores, S, Sk, labels, labels, title, 0.0f};
    static const char *const ext[2] = {"svg", "png"};
    for (int e = 0; e < 2; e++) {
        char path[4096], err[512];
        snprintf(path, sizeof path, "%s/%s.%s", hm_dir, name, ext[e]);
        if (heatmap_write(&h, path, err, sizeof err) != 0) {
            cli_error("demo --heatmaps: %s", err);
            failed = 1;
            return;
        }
        hm_count++;
    }
}

/* every head of sequence `batch` of a layer's attention on x (and y, mask) */
static void map_layer(const char *name, const char *title, attn_layer *l, const T *x, const T *y, const uint8_t *mask,
                      int64_t batch, const char *const *labels) {
    if (!hm_dir || failed || !l) return;
    int64_t B = x->nd == 3 ? x->sh[0] : 1, S = x->sh[x->nd - 2], Sk = y ? y->sh[1] : S;
    int64_t H = attn_layer_attention_heads(l);
    size_t n = (size_t)(B * H * S * Sk);
    float *sc = malloc(n * sizeof *sc), *w = malloc(n * sizeof *w);
    attn_forward_args a = {
        x->d, B, S, y ? y->d : NULL, y ? Sk : 0, mask, 0, NULL, ATTN_IMPL_REF, NULL, ATTN_MATH_STRICT};
    if (!sc || !w)
        check(ATTN_E_NOMEM, "heatmap");
    else
        check(attn_layer_attention_weights(l, &a, sc, w), "attention weights");
    for (int64_t h = 0; h < H && !failed; h++) {
        char nm[128], tt[256];
        snprintf(nm, sizeof nm, H > 1 ? "%s_head%lld" : "%s", name, (long long)h);
        snprintf(tt, sizeof tt, H > 1 ? "%s, head %lld" : "%s", title, (long long)h);
        size_t off = (size_t)((batch * H + h) * S * Sk);
        map_write(nm, tt, w + off, sc + off, S, Sk, labels);
    }
    free(sc), free(w);
}

/* ---- the attention steps, through libattn -------------------------------- */

/* q (Sq, D) or (D) against k (Sk, D): scale * q.k with causal masking. */
static attn_sdpa_desc desc(const T *q, const T *k, float scale, attn_causal causal) {
    attn_sdpa_desc d;
    memset(&d, 0, sizeof d);
    d.B = d.H = 1;
    d.Sq = q->nd == 1 ? 1 : q->sh[0];
    d.Sk = k->sh[0];
    d.D = d.Dv = k->sh[1];
    d.scale = scale;
    d.causal = causal;
    d.impl = ATTN_IMPL_REF;
    return d;
}
static attn_view view(const T *t) {
    int64_t D = t->sh[t->nd - 1];
    attn_view v = {(float *)t->d, 0, 0, D};
    return v;
}
static T out_like(const T *q, int64_t n) { return q->nd == 1 ? mk(1, n, 0, 0) : mk(2, q->sh[0], n, 0); }

static T scores(const T *q, const T *k, float scale, attn_causal causal) {
    attn_sdpa_desc d = desc(q, k, scale, causal);
    T o = out_like(q, d.Sk);
    check(attn_sdpa_weights(&d, view(q), view(k), o.d, NULL), "scores");
    return o;
}
static T weights(const T *q, const T *k, float scale, attn_causal causal) {
    attn_sdpa_desc d = desc(q, k, scale, causal);
    T o = out_like(q, d.Sk);
    check(attn_sdpa_weights(&d, view(q), view(k), NULL, o.d), "softmax weights");
    return o;
}
static T context(const T *q, const T *k, const T *v, float scale, attn_causal causal) {
    attn_sdpa_desc d = desc(q, k, scale, causal);
    T o = out_like(q, v->sh[1]);
    d.Dv = v->sh[1];
    check(attn_sdpa_forward(&d, view(q), view(k), view(v), view(&o), NULL), "context");
    return o;
}
static T dropout(attn_generator *g, double p, const T *in) {
    T o = *in;
    check(attn_dropout_tensor(g, p, in->d, o.d, numel(in)), "dropout");
    return o;
}

/* Create a seed layer, init it under torch.manual_seed(seed), run it on x. */
/* Run a layer created with config c, initialized under torch.manual_seed(init_seed),
 * forward under torch.manual_seed(fwd_seed) (which matters only when train);
 * x is (S, C) or (B, S, C). Keeps the layer in *keep if asked. */
static T run_cfg(const attn_layer_config *c, uint64_t init_seed, const T *x, const T *y, const uint8_t *mask, int train,
                 uint64_t fwd_seed, attn_layer **keep) {
    attn_layer *l = NULL;
    attn_generator g;
    attn_generator_seed(&g, init_seed);
    T o = mk(0, 0, 0, 0);
    check(attn_layer_create(c, &l), "layer create");
    if (!l) return o;
    check(attn_layer_init(l, &g), "layer init");
    int64_t B = x->nd == 3 ? x->sh[0] : 1, S = x->sh[x->nd - 2], W = attn_layer_out_width(l);
    o = x->nd == 3 ? mk(3, B, S, W) : mk(2, S, W, 0);
    attn_generator_seed(&g, fwd_seed);
    attn_forward_args a = {
        x->d, B, S, y ? y->d : NULL, y ? y->sh[1] : 0, mask, train, &g, ATTN_IMPL_REF, o.d, ATTN_MATH_STRICT};
    check(attn_layer_forward(l, &a), "layer forward");
    if (keep)
        *keep = l;
    else
        attn_layer_free(l);
    return o;
}

/* A seed layer with its default config, initialized under torch.manual_seed(seed), in eval mode. */
static T layer_run(attn_layer_kind kind, int64_t d_in, int64_t d_out, int64_t heads, int64_t ctx, uint64_t seed,
                   const T *x, attn_layer **keep) {
    attn_layer_config c;
    attn_layer_config_default(&c, kind, d_in, d_out, heads);
    c.context_length = ctx;
    return run_cfg(&c, seed, x, NULL, NULL, 0, 0, keep);
}

static T param(const attn_layer *l, const char *name) {
    T o = mk(0, 0, 0, 0);
    for (int i = 0; i < attn_layer_tensor_count(l); i++) {
        attn_tensor_info ti;
        attn_layer_tensor(l, i, &ti);
        if (strcmp(ti.name, name) == 0) {
            o = mk(ti.ndim, ti.shape[0], ti.shape[1], 0);
            memcpy(o.d, ti.data, numel(&o) * sizeof(float));
        }
    }
    return o;
}

/* x @ W.T for an nn.Linear weight (no bias in the seeds' v2 layers) */
static T linear(const T *x, const T *w) {
    T wt = mk(2, w->sh[1], w->sh[0], 0);
    for (int64_t i = 0; i < w->sh[0]; i++)
        for (int64_t j = 0; j < w->sh[1]; j++) wt.d[j * w->sh[0] + i] = w->d[i * w->sh[1] + j];
    return matmul(x, &wt);
}

/* Python's repr of a float32 value converted to double (shortest round trip). */
static void print_pyfloat(const char *prefix, float v) {
    char buf[64];
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)v);
        if (strtod(buf, NULL) == (double)v) break;
    }
    if (!strpbrk(buf, ".e")) strcat(buf, ".0");
    printf("%s%s\n", prefix, buf);
}

/* ---- shared pieces of the walkthroughs ---------------------------------- */

static const float INPUTS[18] = {0.43f, 0.15f, 0.89f, 0.55f, 0.87f, 0.66f, 0.57f, 0.85f, 0.64f,
                                 0.22f, 0.58f, 0.33f, 0.77f, 0.25f, 0.10f, 0.05f, 0.80f, 0.55f};

static T inputs_tensor(void) {
    T x = mk(2, 6, 3, 0);
    memcpy(x.d, INPUTS, sizeof INPUTS);
    return x;
}

static T batch_of(const T *x) {
    T b = mk(3, 2, x->sh[0], x->sh[1]);
    memcpy(b.d, x->d, numel(x) * sizeof(float));
    memcpy(b.d + numel(x), x->d, numel(x) * sizeof(float));
    return b;
}

static T tri(int n, int upper) { /* tril(ones) or triu(ones, diagonal=1) */
    T m = mk(2, n, n, 0);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) m.d[i * n + j] = upper ? (j > i) : (j <= i);
    return m;
}

/* Weightless attention for query 2, as in seeds 000 and 002. */
static void weightless(const char *ctx_prefix, int pyfloat_rows) {
    T x = inputs_tensor();
    T q2 = row(&x, 1);
    step("attention scores of query x^2 (dot products)");
    T s2 = scores(&q2, &x, 1.0f, ATTN_CAUSAL_NONE);
    show("", &s2, NULL);
    step("normalized by their sum");
    /* the notebook divides its own torch.dot scores (float32) by their sum */
    T tmp = s2;
    for (int i = 0; i < 6; i++) {
        T xi = row(&x, i);
        tmp.d[i] = dot(&xi, &q2);
    }
    float tot = fsum(&tmp);
    for (int i = 0; i < 6; i++) tmp.d[i] /= tot;
    show("Attention weights: ", &tmp, NULL);
    T sum = scalar(fsum(&tmp));
    show("Sum: ", &sum, NULL);
    step("softmax_naive: exp(x) / exp(x).sum()");
    T nv = s2;
    T ex = s2;
    for (int i = 0; i < 6; i++) ex.d[i] = expf(s2.d[i]);
    float etot = fsum(&ex);
    for (int i = 0; i < 6; i++) nv.d[i] = ex.d[i] / etot;
    show("Attention weights: ", &nv, NULL);
    sum = scalar(fsum(&nv));
    show("Sum: ", &sum, NULL);
    step("torch.softmax (libattn's softmax)");
    T w2 = weights(&q2, &x, 1.0f, ATTN_CAUSAL_NONE);
    show("Attention weights: ", &w2, NULL);
    sum = scalar(fsum(&w2));
    show("Sum: ", &sum, NULL);
    step("context vector of x^2");
    T c2 = context(&q2, &x, &x, 1.0f, ATTN_CAUSAL_NONE);
    show(ctx_prefix, &c2, NULL);
    step("all attention scores, loop and matmul (inputs @ inputs.T)");
    T s = scores(&x, &x, 1.0f, ATTN_CAUSAL_NONE);
    show("", &s, NULL);
    show("", &s, NULL);
    if (pyfloat_rows) tp_print_size(stdout, "tensor shape = ", 2, s.sh);
    step("attention weights (softmax over each row)");
    T w = weights(&x, &x, 1.0f, ATTN_CAUSAL_NONE);
    show("", &w, NULL);
    if (pyfloat_rows)
        for (int i = 0; i < 6; i++) {
            char p[32];
            T r = row(&w, i);
            snprintf(p, sizeof p, "row%d = ", i);
            print_pyfloat(p, pysum(&r));
        }
    step("all context vectors: attn run simple");
    T all = layer_run(ATTN_LAYER_SIMPLE, 3, 3, 1, 0, 0, &x, NULL);
    show("", &all, NULL);
    if (pyfloat_rows) {
        T r = row(&all, 1);
        show("", &r, NULL);
        show("", &c2, NULL);
    }
}

/* ---- seed 000 ------------------------------------------------------------ */

static void causal_steps(const T *x, const attn_layer *v2, const char *w_label, int with_simple) {
    T Wq = param(v2, "W_query.weight"), Wk = param(v2, "W_key.weight");
    T q = linear(x, &Wq), k = linear(x, &Wk);
    float sc = attn_default_scale(k.sh[1]);
    T w = weights(&q, &k, sc, ATTN_CAUSAL_NONE);
    if (with_simple) {
        step("attention weights of sa_v2 before masking");
        show("", &w, "grad_fn=<SoftmaxBackward0>");
        step("mask_simple = torch.tril(torch.ones(6, 6))");
        T ms = tri(6, 0);
        show("", &ms, NULL);
        step("masked_simple = attn_weights * mask_simple");
        T m = w;
        for (int i = 0; i < 36; i++) m.d[i] = w.d[i] * ms.d[i];
        show("", &m, "grad_fn=<MulBackward0>");
        step("renormalized rows");
        T n = m;
        for (int i = 0; i < 6; i++) {
            float rs = 0.0f;
            for (int j = 0; j < 6; j++) rs += m.d[i * 6 + j];
            for (int j = 0; j < 6; j++) n.d[i * 6 + j] = m.d[i * 6 + j] / rs;
        }
        show("", &n, "grad_fn=<DivBackward0>");
    } else {
        step("mask = torch.triu(torch.ones(6, 6), diagonal=1)");
        T mu = tri(6, 1);
        show("", &mu, NULL);
    }
    step("scores with the causal mask (-inf above the diagonal), libattn causal top-left");
    T ms = scores(&q, &k, 1.0f, ATTN_CAUSAL_TOP_LEFT);
    show("", &ms, "grad_fn=<MaskedFillBackward0>");
    step(w_label);
    T wc = weights(&q, &k, sc, ATTN_CAUSAL_TOP_LEFT);
    show("", &wc, "grad_fn=<SoftmaxBackward0>");
}

static void seed_000(void) {
    printf("=================================================================\n");
    printf("Seed 000 — self-attention, from weightless to multi-head\n");
    printf("=================================================================\n");
    weightless("", 0);

    T x = inputs_tensor();
    T x2 = row(&x, 1);
    step("torch.manual_seed(123); W_query, W_key, W_value = torch.rand(3, 2) each");
    attn_layer *v1 = NULL;
    T v1out = layer_run(ATTN_LAYER_SA_V1, 3, 2, 1, 0, 123, &x, &v1);
    if (hm_dir) { /* the pictures of seed 000's layers */
        attn_layer *simple = NULL;
        layer_run(ATTN_LAYER_SIMPLE, 3, 3, 1, 0, 0, &x, &simple);
        map_layer("01_weightless", "weightless: softmax(x x^T)", simple, &x, NULL, NULL, 0, TOKENS);
        attn_layer_free(simple);
        map_layer("02_sa_v1", "SelfAttention_v1, torch.manual_seed(123)", v1, &x, NULL, NULL, 0, TOKENS);
    }
    T Wq = param(v1, "W_query"), Wk = param(v1, "W_key"), Wv = param(v1, "W_value");
    T q2 = matmul(&x2, &Wq);
    step("query_2 = x_2 @ W_query");
    show("", &q2, NULL);
    T keys = matmul(&x, &Wk), values = matmul(&x, &Wv);
    show_size("keys.shape: ", &keys);
    show_size("values.shape: ", &values);
    step("attn_score_22 = query_2 . keys[1]");
    T k2 = row(&keys, 1);
    T s22 = scalar(dot(&q2, &k2));
    show("", &s22, NULL);
    step("attn_scores_2 = query_2 @ keys.T");
    T s2 = scores(&q2, &keys, 1.0f, ATTN_CAUSAL_NONE);
    show("", &s2, NULL);
    step("attn_weights_2 = softmax(attn_scores_2 / sqrt(d_k))");
    float sc = attn_default_scale(2);
    T w2 = weights(&q2, &keys, sc, ATTN_CAUSAL_NONE);
    show("", &w2, NULL);
    step("context_vec_2 = attn_weights_2 @ values");
    T c2 = context(&q2, &keys, &values, sc, ATTN_CAUSAL_NONE);
    show("", &c2, NULL);
    step("SelfAttention_v1 (torch.manual_seed(123)): attn run sa_v1");
    show("", &v1out, "grad_fn=<MmBackward0>");
    attn_layer_free(v1);

    step("SelfAttention_v2 (torch.manual_seed(789)): attn run sa_v2");
    attn_layer *v2 = NULL;
    T v2out = layer_run(ATTN_LAYER_SA_V2, 3, 2, 1, 0, 789, &x, &v2);
    show("", &v2out, "grad_fn=<MmBackward0>");
    map_layer("03_sa_v2", "SelfAttention_v2, torch.manual_seed(789)", v2, &x, NULL, NULL, 0, TOKENS);
    causal_steps(&x, v2, "softmax(masked / sqrt(d_k)): the causal attention weights", 1);

    step("torch.manual_seed(123); nn.Dropout(0.5) on torch.ones(6, 6)");
    attn_generator g;
    attn_generator_seed(&g, 123);
    T ones = mk(2, 6, 6, 0);
    for (int i = 0; i < 36; i++) ones.d[i] = 1.0f;
    T dx = dropout(&g, 0.5, &ones);
    show("", &dx, NULL);
    step("torch.manual_seed(123); dropout(attn_weights)");
    T Wq2 = param(v2, "W_query.weight"), Wk2 = param(v2, "W_key.weight");
    T q = linear(&x, &Wq2), k = linear(&x, &Wk2);
    T wc = weights(&q, &k, attn_default_scale(2), ATTN_CAUSAL_TOP_LEFT);
    attn_generator_seed(&g, 123);
    T dw = dropout(&g, 0.5, &wc);
    show("", &dw, "grad_fn=<MulBackward0>");
    attn_layer_free(v2);
    if (hm_dir) {
        T ms = scores(&q, &k, attn_default_scale(2), ATTN_CAUSAL_TOP_LEFT);
        map_write("04_causal", "causal mask on SelfAttention_v2's weights", wc.d, ms.d, 6, 6, TOKENS);
        map_write("05_causal_dropout", "the same after dropout(0.5), torch.manual_seed(123)", dw.d, ms.d, 6, 6, TOKENS);
    }

    T batch = batch_of(&x);
    step("batch = torch.stack((inputs, inputs))");
    show_size("", &batch);
    step("CausalAttention(3, 2, context_length=6, dropout=0.0), torch.manual_seed(123): attn run causal");
    T ca = layer_run(ATTN_LAYER_CAUSAL, 3, 2, 1, 6, 123, &batch, NULL);
    show_size("context_vecs.shape: ", &ca);
    step("MultiHeadAttentionWrapper(3, 2, 6, 0.0, num_heads=2), torch.manual_seed(123): attn run mha_wrapper");
    attn_layer *ml = NULL;
    T mw = layer_run(ATTN_LAYER_MHA_WRAPPER, 3, 2, 2, 6, 123, &batch, &ml);
    show("", &mw, "grad_fn=<CatBackward0>");
    show_size("context_vecs.shape: ", &mw);
    map_layer("06_mha_wrapper", "MultiHeadAttentionWrapper, torch.manual_seed(123)", ml, &batch, NULL, NULL, 0, TOKENS);
    attn_layer_free(ml);
    step("MultiHeadAttention(3, 2, 6, 0.0, num_heads=2), torch.manual_seed(123): attn run mha");
    ml = NULL;
    T mh = layer_run(ATTN_LAYER_MHA, 3, 2, 2, 6, 123, &batch, &ml);
    map_layer("07_mha", "MultiHeadAttention (weight split), torch.manual_seed(123)", ml, &batch, NULL, NULL, 0, TOKENS);
    attn_layer_free(ml);
    show("", &mh, "grad_fn=<ViewBackward0>");
    show_size("context_vecs.shape: ", &mh);
}

/* ---- seed 002 ------------------------------------------------------------ */

static void seed_002(void) {
    printf("\n=================================================================\n");
    printf("Seed 002 — the same chapter, second notebook\n");
    printf("=================================================================\n");
    T x = inputs_tensor();
    show_size("", &x);
    weightless("Context vector: ", 1);

    T x2 = row(&x, 1);
    step("x_2.shape and d_in");
    show_size("", &x2);
    printf("3\n");
    step("torch.manual_seed(123); W_query, W_key, W_value = torch.rand(3, 2) each");
    attn_layer *v1 = NULL;
    T v1out = layer_run(ATTN_LAYER_SA_V1, 3, 2, 1, 0, 123, &x, &v1);
    T Wq = param(v1, "W_query"), Wk = param(v1, "W_key"), Wv = param(v1, "W_value");
    T q2 = matmul(&x2, &Wq), k2 = matmul(&x2, &Wk);
    T keys = matmul(&x, &Wk), values = matmul(&x, &Wv);
    show("query_2 = ", &q2, NULL);
    show("key_2 = ", &k2, NULL);
    show("keys = ", &keys, NULL);
    show("values = ", &values, NULL);
    step("attn_scores_22, attn_scores_2, attn_weights_2, context_vec_2");
    T s22 = scalar(dot(&q2, &k2));
    show("", &s22, NULL);
    T s2 = scores(&q2, &keys, 1.0f, ATTN_CAUSAL_NONE);
    show("attn_scores_2 = ", &s2, NULL);
    float sc = attn_default_scale(2);
    T w2 = weights(&q2, &keys, sc, ATTN_CAUSAL_NONE);
    show("attn_weights_2 = ", &w2, NULL);
    T c2 = context(&q2, &keys, &values, sc, ATTN_CAUSAL_NONE);
    show("context_vec_2 = ", &c2, NULL);
    step("SelfAttention_v1 (torch.manual_seed(123)): attn run sa_v1");
    show("", &v1out, "grad_fn=<MmBackward0>");
    attn_layer_free(v1);

    step("SelfAttention_v2 (torch.manual_seed(789)): attn run sa_v2");
    attn_layer *v2 = NULL;
    T v2out = layer_run(ATTN_LAYER_SA_V2, 3, 2, 1, 0, 789, &x, &v2);
    show("", &v2out, "grad_fn=<MmBackward0>");
    causal_steps(&x, v2, "attn_weights_causal = softmax(masked / sqrt(d_k))", 0);

    step("torch.manual_seed(123); dropout(ones(6, 6)), then dropout(attn_weights_causal) from the same stream");
    attn_generator g;
    attn_generator_seed(&g, 123);
    T ones = mk(2, 6, 6, 0);
    for (int i = 0; i < 36; i++) ones.d[i] = 1.0f;
    T dx = dropout(&g, 0.5, &ones);
    show("", &dx, NULL);
    T Wq2 = param(v2, "W_query.weight"), Wk2 = param(v2, "W_key.weight");
    T q = linear(&x, &Wq2), k = linear(&x, &Wk2);
    T wc = weights(&q, &k, attn_default_scale(2), ATTN_CAUSAL_TOP_LEFT);
    T dw = dropout(&g, 0.5, &wc); /* the second draw of the stream */
    show("", &dw, "grad_fn=<MulBackward0>");
    attn_layer_free(v2);

    T batch = batch_of(&x);
    step("batch = torch.stack((inputs, inputs))");
    show_size("", &batch);
    step("CausalAttention(3, 2, 6, dropout=0.0), torch.manual_seed(123): attn run causal");
    T ca = layer_run(ATTN_LAYER_CAUSAL, 3, 2, 1, 6, 123, &batch, NULL);
    show("", &ca, "grad_fn=<UnsafeViewBackward0>");
    step("MultiHeadAttentionWrapper(3, 2, 6, 0.0, num_heads=2), torch.manual_seed(123): attn run mha_wrapper");
    T mw = layer_run(ATTN_LAYER_MHA_WRAPPER, 3, 2, 2, 6, 123, &batch, NULL);
    show("", &mw, "grad_fn=<CatBackward0>");
    show_size("context_vecs.shape: ", &mw);
    step("MultiHeadAttention(3, 2, 6, 0.0, num_heads=2, qkv_bias=False), torch.manual_seed(123): attn run mha");
    T mh = layer_run(ATTN_LAYER_MHA, 3, 2, 2, 6, 123, &batch, NULL);
    show("", &mh, "grad_fn=<ViewBackward0>");
    show_size("context_vecs.shape: ", &mh);
}

/* ---- seed 003 ------------------------------------------------------------ */

static void seed_003(void) {
    printf("\n=================================================================\n");
    printf("Seed 003 — trainable weights drawn in the order W_query, W_value, W_key\n");
    printf("=================================================================\n");
    T x = inputs_tensor(), x2 = row(&x, 1);
    step("torch.manual_seed(123); W_query, W_value, W_key = torch.rand(3, 2) each (note the order)");
    attn_generator g;
    attn_generator_seed(&g, 123);
    T Wq = mk(2, 3, 2, 0), Wv = mk(2, 3, 2, 0), Wk = mk(2, 3, 2, 0);
    check(attn_rand(&g, Wq.d, 6), "rand");
    check(attn_rand(&g, Wv.d, 6), "rand");
    check(attn_rand(&g, Wk.d, 6), "rand");
    T q2 = matmul(&x2, &Wq);
    show("", &q2, NULL);
    T keys = matmul(&x, &Wk), values = matmul(&x, &Wv), queries = matmul(&x, &Wq);
    show_size("keys.shape:  ", &keys);
    show_size("values.shape:  ", &values);
    show_size("queries.shape:  ", &queries);
    step("attn_score_22 = query_2 . keys[1]");
    T k2 = row(&keys, 1);
    T s22 = scalar(dot(&q2, &k2));
    show("", &s22, NULL);
    step("attn_score_2 = query_2 @ keys.T");
    T s2 = scores(&q2, &keys, 1.0f, ATTN_CAUSAL_NONE);
    show("", &s2, NULL);
    step("attn_scores = queries @ keys.T");
    T s = scores(&queries, &keys, 1.0f, ATTN_CAUSAL_NONE);
    show("", &s, NULL);
    step("attn_weights = softmax(attn_scores / sqrt(2))");
    float sc = attn_default_scale(2);
    T w = weights(&queries, &keys, sc, ATTN_CAUSAL_NONE);
    show("", &w, NULL);
    step("context_vector = attn_weights @ values");
    T cv = context(&queries, &keys, &values, sc, ATTN_CAUSAL_NONE);
    show("", &cv, NULL);
    step("SelfAttention_v1 (torch.manual_seed(123); its __init__ draws query, key, value): attn run sa_v1");
    T v1out = layer_run(ATTN_LAYER_SA_V1, 3, 2, 1, 0, 123, &x, NULL);
    show("", &v1out, "grad_fn=<MmBackward0>");
    step("SelfAttention_v2 (torch.manual_seed(789)): attn run sa_v2");
    attn_layer *v2 = NULL;
    T v2out = layer_run(ATTN_LAYER_SA_V2, 3, 2, 1, 0, 789, &x, &v2);
    show("", &v2out, "grad_fn=<MmBackward0>");
    causal_steps(&x, v2, "attn_weights = softmax(masked / sqrt(2))", 1);
    step("context_vector = attn_weights @ values (values of the W_value drawn above)");
    T Wq2 = param(v2, "W_query.weight"), Wk2 = param(v2, "W_key.weight");
    T q = linear(&x, &Wq2), k = linear(&x, &Wk2);
    T cc = context(&q, &k, &values, sc, ATTN_CAUSAL_TOP_LEFT);
    show("", &cc, "grad_fn=<MmBackward0>");
    step("torch.manual_seed(123); nn.Dropout(0.5) on torch.ones(6, 6)");
    attn_generator_seed(&g, 123);
    T ones = mk(2, 6, 6, 0);
    for (int i = 0; i < 36; i++) ones.d[i] = 1.0f;
    T dx = dropout(&g, 0.5, &ones);
    show("", &dx, NULL);
    step("torch.manual_seed(123); print(attn_weights); print(dropout(attn_weights))");
    T wc = weights(&q, &k, sc, ATTN_CAUSAL_TOP_LEFT);
    show("", &wc, "grad_fn=<SoftmaxBackward0>");
    attn_generator_seed(&g, 123);
    T dw = dropout(&g, 0.5, &wc);
    show("", &dw, "grad_fn=<MulBackward0>");
    attn_layer_free(v2);
    T batch = batch_of(&x);
    step("batch = torch.stack((inputs, inputs))");
    show_size("", &batch);
}

/* ---- seeds 001 and 004: the other layers on a small example ------------- */

/* (B, Sq, Sk) "masked" matrix (True = hidden) of a causal and/or padding mask */
static void show_hidden(const char *prefix, int64_t B, int64_t Sq, int64_t Sk, int causal, const uint8_t *pad) {
    uint8_t m[2 * 8 * 8];
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < Sq; i++)
            for (int64_t j = 0; j < Sk; j++)
                m[(b * Sq + i) * Sk + j] = (uint8_t)((causal && j > i) || (pad && pad[b * Sk + j]));
    int64_t sh[3] = {B, Sq, Sk};
    tp_print_bool(stdout, prefix, m, 3, sh);
}

static void seeds_001_004(void) {
    printf("\n=================================================================\n");
    printf("Seeds 001 and 004 — nanoGPT and Warner layers on a small example\n");
    printf("=================================================================\n");
    printf("(These notebooks print no tensors; the numbers below come from libattn with\n"
           " the same initialization PyTorch would use under each torch.manual_seed.)\n");
    attn_generator g;
    attn_generator_seed(&g, 1337);
    T x = mk(3, 2, 5, 8);
    check(attn_rand(&g, x.d, numel(&x)), "rand");
    step("torch.manual_seed(1337); x = torch.rand(2, 5, 8)");
    show("", &x, NULL);

    attn_layer_config c;
    step("seed 001: MultiHeadAttention(num_heads=2, head_size=4) of nanoGPT Heads, n_embd=8, block_size=5");
    printf("each head masks with tril[:T, :T] == 0 (True = hidden):\n");
    show_hidden("", 1, 5, 5, 1, NULL);
    attn_layer_config_default(&c, ATTN_LAYER_GPT_MHA, 8, 8, 2);
    c.context_length = 5;
    attn_layer *kl1 = NULL;
    T o = run_cfg(&c, 0, &x, NULL, NULL, 0, 0, &kl1);
    map_layer("08_gpt_mha", "nanoGPT MultiHeadAttention of Heads, torch.manual_seed(0)", kl1, &x, NULL, NULL, 0, NULL);
    attn_layer_free(kl1);
    show("eval, torch.manual_seed(0) init: ", &o, "grad_fn=<ViewBackward0>");
    c.dropout = c.out_dropout = 0.2;
    o = run_cfg(&c, 0, &x, NULL, NULL, 1, 42, NULL);
    show("train, dropout=0.2, torch.manual_seed(42) before forward: ", &o, "grad_fn=<MulBackward0>");

    step("seed 004: SingleHeadAttention(hidden_size=8): head size 8 // 4 = 2, no mask");
    attn_layer_config_default(&c, ATTN_LAYER_SINGLE_HEAD, 8, 8, 1);
    o = run_cfg(&c, 0, &x, NULL, NULL, 0, 0, NULL);
    show("", &o, "grad_fn=<ViewBackward0>");

    step("seed 004: MultiHeadAttetion(hidden_size=8, num_heads=2), eval");
    attn_layer_config_default(&c, ATTN_LAYER_FUSED_MHA, 8, 8, 2);
    attn_layer *kl2 = NULL;
    o = run_cfg(&c, 0, &x, NULL, NULL, 0, 0, &kl2);
    map_layer("09_fused_mha", "MultiHeadAttetion (fused Wqkv), torch.manual_seed(0)", kl2, &x, NULL, NULL, 0, NULL);
    attn_layer_free(kl2);
    show("", &o, "grad_fn=<ViewBackward0>");

    uint8_t pad[10] = {0, 0, 0, 1, 1, /* batch 0: right padding */ 1, 1, 0, 0, 0 /* batch 1: left padding */};
    int64_t psh[2] = {2, 5};
    step("seed 004: BidirectionalAttention(8, 2) with a padding mask (True = padding)");
    tp_print_bool(stdout, "mask = ", pad, 2, psh);
    printf("every query ignores the padded keys (True = hidden):\n");
    show_hidden("", 2, 5, 5, 0, pad);
    attn_layer_config_default(&c, ATTN_LAYER_BIDIRECTIONAL, 8, 8, 2);
    attn_layer *kl3 = NULL;
    o = run_cfg(&c, 0, &x, NULL, pad, 0, 0, &kl3);
    map_layer("10_bidirectional_padding", "BidirectionalAttention, sequence 0 (right padding)", kl3, &x, NULL, pad, 0,
              NULL);
    attn_layer_free(kl3);
    show("", &o, "grad_fn=<ViewBackward0>");

    step("seed 004: CausalAttention(8, 2, context_size=5): causal OR padding, nothing mutated");
    show_hidden("", 2, 5, 5, 1, pad);
    printf("batch 1, queries 0 and 1 see no key (left padding): their context is zero,\n"
           "so their output is Wo's bias alone, never NaN.\n");
    attn_layer_config_default(&c, ATTN_LAYER_CAUSAL_MHA, 8, 8, 2);
    c.context_length = 5;
    attn_layer *kl4 = NULL;
    o = run_cfg(&c, 0, &x, NULL, pad, 0, 0, &kl4);
    map_layer("11_causal_mha_padding", "Warner CausalAttention, sequence 1 (left padding)", kl4, &x, NULL, pad, 1,
              NULL);
    attn_layer_free(kl4);
    show("", &o, "grad_fn=<ViewBackward0>");

    step("seed 004: CausalCrossAttention(8, 2, context_size=5): x (2, 5, 8) attends to y (2, 3, 8)");
    T y = mk(3, 2, 3, 8);
    attn_generator_seed(&g, 7);
    check(attn_rand(&g, y.d, numel(&y)), "rand");
    show("y = torch.rand(2, 3, 8) under torch.manual_seed(7): ", &y, NULL);
    printf("causal top-left over (Sq=5, Sk=3) (True = hidden):\n");
    show_hidden("", 1, 5, 3, 1, NULL);
    attn_layer_config_default(&c, ATTN_LAYER_CROSS, 8, 8, 2);
    c.context_length = 5;
    o = run_cfg(&c, 0, &x, &y, NULL, 0, 0, NULL);
    show("", &o, "grad_fn=<ViewBackward0>");
}

int cmd_demo(int argc, char **argv) {
    hm_dir = NULL;
    if (argc == 3 && !strcmp(argv[1], "--heatmaps")) {
        hm_dir = argv[2];
        if (mkdir(hm_dir, 0777) != 0) {
            struct stat stt;
            if (stat(hm_dir, &stt) != 0 || !S_ISDIR(stt.st_mode)) {
                cli_error("demo --heatmaps: cannot create the directory '%s'", hm_dir);
                return 1;
            }
        }
    } else if (argc > 1) {
        cli_error("demo takes no arguments but --heatmaps DIR");
        return EXIT_USAGE;
    }
    failed = 0;
    hm_count = 0;
    seed_000();
    seed_002();
    seed_003();
    seeds_001_004();
    if (hm_dir && !failed) printf("\nheatmaps: %d files (SVG and PNG) in %s\n", hm_count, hm_dir);
    fflush(stdout);
    return failed ? 1 : 0;
}
