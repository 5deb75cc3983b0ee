/* Finite-difference gradient checks of every layer's backward: central
 * differences of the loss L = sum(out * g), accumulated in double over the
 * float32 forward, for x, y and (a sample of) every parameter, in eval mode
 * and in train mode with dropout (the generator is reseeded before every
 * forward so each evaluation draws the same masks). A structural check: the
 * PyTorch goldens (test_golden) pin the exact values. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint32_t lcg = 777u;
static float frand(void) { return tu_frand(&lcg); }

typedef struct setup {
    attn_layer *l;
    int64_t B, S, Sk, C, W;
    float *x, *y, *g, *out;
    uint8_t *mask;
    int train;
} setup;

static double loss(setup *s) {
    attn_generator gen;
    attn_generator_seed(&gen, 99);
    attn_forward_args a = {s->x,     s->B, s->S,          s->y,   s->Sk,           s->mask,
                           s->train, &gen, ATTN_IMPL_REF, s->out, ATTN_MATH_STRICT};
    if (attn_layer_forward(s->l, &a) != ATTN_OK) return NAN;
    double L = 0.0;
    for (int64_t i = 0; i < s->B * s->S * s->W; i++) L += (double)s->out[i] * s->g[i];
    return L;
}

/* numeric d L / d p[i] for a sample of indices; compare with analytic */
static void fd_check(setup *s, const char *label, float *p, const float *ana, size_t n) {
    const double h = 2e-2;
    size_t stride = n > 24 ? n / 24 : 1;
    int bad = 0;
    for (size_t i = 0; i < n; i += stride) {
        float keep = p[i];
        p[i] = (float)(keep + h);
        double lp = loss(s);
        p[i] = (float)(keep - h);
        double lm = loss(s);
        p[i] = keep;
        double num = (lp - lm) / (2 * h), a = ana[i];
        if (!(fabs(num - a) <= 2e-3 + 2e-2 * fabs(a))) {
            if (!bad) fprintf(stderr, "FD MISMATCH %s[%zu]: analytic %.6g numeric %.6g\n", label, i, a, num);
            bad = 1;
        }
    }
    CHECK(!bad, "%s gradient disagrees with finite differences", label);
}

static void check_kind(attn_layer_kind kind, int train, attn_causal align) {
    setup s;
    memset(&s, 0, sizeof s);
    s.B = 2, s.S = 5, s.C = 8, s.Sk = kind == ATTN_LAYER_CROSS ? 4 : 5, s.train = train;
    attn_layer_config c;
    int64_t heads = (kind == ATTN_LAYER_SIMPLE || kind == ATTN_LAYER_SINGLE_HEAD || kind == ATTN_LAYER_SA_V1 ||
                     kind == ATTN_LAYER_SA_V2 || kind == ATTN_LAYER_CAUSAL)
                        ? 1
                        : 2;
    int64_t d_out = (kind == ATTN_LAYER_SA_V1 || kind == ATTN_LAYER_SA_V2 || kind == ATTN_LAYER_CAUSAL ||
                     kind == ATTN_LAYER_MHA_WRAPPER || kind == ATTN_LAYER_MHA)
                        ? 6
                        : 8;
    attn_layer_config_default(&c, kind, s.C, d_out, heads);
    c.qkv_bias = 1;
    c.context_length = (kind == ATTN_LAYER_CAUSAL || kind == ATTN_LAYER_MHA_WRAPPER || kind == ATTN_LAYER_MHA ||
                        kind == ATTN_LAYER_GPT_MHA)
                           ? 7
                           : 0;
    c.dropout = train ? 0.3 : 0.0;
    c.out_dropout = train ? 0.2 : 0.0;
    c.causal_align = align;
    CHECK_OK(attn_layer_create(&c, &s.l));
    if (!s.l) return;
    attn_generator g;
    attn_generator_seed(&g, 5 + (uint64_t)kind);
    CHECK_OK(attn_layer_init(s.l, &g));
    s.W = attn_layer_out_width(s.l);
    size_t nx = (size_t)(s.B * s.S * s.C), ny = (size_t)(s.B * s.Sk * s.C), no = (size_t)(s.B * s.S * s.W);
    s.x = malloc(nx * 4), s.out = malloc(no * 4), s.g = malloc(no * 4);
    for (size_t i = 0; i < nx; i++) s.x[i] = frand();
    for (size_t i = 0; i < no; i++) s.g[i] = frand();
    if (kind == ATTN_LAYER_CROSS) {
        s.y = malloc(ny * 4);
        for (size_t i = 0; i < ny; i++) s.y[i] = frand();
    }
    if (kind == ATTN_LAYER_BIDIRECTIONAL || kind == ATTN_LAYER_CAUSAL_MHA || kind == ATTN_LAYER_CROSS) {
        s.mask = calloc((size_t)(s.B * s.Sk), 1);
        s.mask[s.Sk - 1] = 1;                /* batch 0: right padding */
        s.mask[s.Sk] = s.mask[s.Sk + 1] = 1; /* batch 1: left padding (fully-masked causal rows) */
    }
    float *dx = calloc(nx, 4), *dy = s.y ? calloc(ny, 4) : NULL;
    loss(&s);
    attn_layer_zero_grad(s.l);
    attn_backward_args ba = {s.g, dx, dy};
    CHECK_OK(attn_layer_backward(s.l, &ba));
    /* snapshot analytic parameter gradients (forward in fd_check does not touch them) */
    char label[128];
    snprintf(label, sizeof label, "%s%s dx", attn_layer_kind_name(kind), train ? " (train)" : "");
    fd_check(&s, label, s.x, dx, nx);
    if (s.y) {
        snprintf(label, sizeof label, "%s%s dy", attn_layer_kind_name(kind), train ? " (train)" : "");
        fd_check(&s, label, s.y, dy, ny);
    }
    for (int i = 0; i < attn_layer_tensor_count(s.l); i++) {
        attn_tensor_info t;
        attn_layer_tensor(s.l, i, &t);
        if (t.is_buffer) continue;
        size_t n = (size_t)t.shape[0] * (size_t)(t.ndim > 1 ? t.shape[1] : 1);
        float *ana = malloc(n * 4);
        memcpy(ana, t.grad, n * 4);
        snprintf(label, sizeof label, "%s%s d%s", attn_layer_kind_name(kind), train ? " (train)" : "", t.name);
        fd_check(&s, label, t.data, ana, n);
        free(ana);
    }
    attn_layer_free(s.l);
    free(s.x), free(s.y), free(s.g), free(s.out), free(s.mask), free(dx), free(dy);
}

int main(int argc, char **argv) {
    tu_init(argc, argv);
    for (int k = 0; k < ATTN_LAYER_KIND_COUNT; k++) {
        check_kind((attn_layer_kind)k, 0, ATTN_CAUSAL_TOP_LEFT);
        check_kind((attn_layer_kind)k, 1, ATTN_CAUSAL_TOP_LEFT);
    }
    /* cross-attention with bottom-right alignment (the C API's option) */
    check_kind(ATTN_LAYER_CROSS, 0, ATTN_CAUSAL_BOTTOM_RIGHT);
    check_kind(ATTN_LAYER_CROSS, 1, ATTN_CAUSAL_BOTTOM_RIGHT);
    {
        /* Sq = 5 > Sk = 4, bottom-right: query 0 sees no key, so its context is
         * zero and its output is Wo's bias; top-left: query 0 sees key 0 */
        attn_layer_config c;
        attn_layer_config_default(&c, ATTN_LAYER_CROSS, 8, 8, 2);
        attn_layer *l2;
        CHECK_OK(attn_layer_create(&c, &l2));
        attn_generator g;
        attn_generator_seed(&g, 3);
        attn_layer_init(l2, &g);
        float x[5 * 8], y[4 * 8], out[5 * 8], bias[8];
        for (int i = 0; i < 40; i++) x[i] = frand();
        for (int i = 0; i < 32; i++) y[i] = frand();
        for (int i = 0; i < attn_layer_tensor_count(l2); i++) {
            attn_tensor_info t;
            attn_layer_tensor(l2, i, &t);
            if (!strcmp(t.name, "Wo.bias")) memcpy(bias, t.data, sizeof bias);
        }
        attn_forward_args a = {x, 1, 5, y, 4, NULL, 0, NULL, ATTN_IMPL_AUTO, out, ATTN_MATH_STRICT};
        CHECK_OK(attn_layer_forward(l2, &a));
        CHECK(memcmp(out, bias, sizeof bias) != 0, "top-left: query 0 sees key 0");
        attn_layer_free(l2);
        c.causal_align = ATTN_CAUSAL_BOTTOM_RIGHT;
        CHECK_OK(attn_layer_create(&c, &l2));
        attn_generator_seed(&g, 3);
        attn_layer_init(l2, &g);
        CHECK_OK(attn_layer_forward(l2, &a));
        CHECK(memcmp(out, bias, sizeof bias) == 0, "bottom-right: query 0 sees nothing, output = Wo.bias");
        CHECK(memcmp(out + 8, bias, sizeof bias) != 0, "bottom-right: query 1 sees key 0");
        attn_layer_free(l2);
    }
    /* backward before any forward */
    attn_layer_config c;
    attn_layer_config_default(&c, ATTN_LAYER_SA_V2, 4, 4, 1);
    attn_layer *l;
    CHECK_OK(attn_layer_create(&c, &l));
    float d[4] = {0};
    attn_backward_args ba = {d, d, NULL};
    CHECK(attn_layer_backward(l, &ba) == ATTN_E_STATE, "backward before forward is ATTN_E_STATE");
    attn_layer_free(l);
    return tu_finish("test_gradcheck");
}
