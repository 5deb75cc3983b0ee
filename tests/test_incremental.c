/* Incremental forward through a KV cache: for every causal layer kind,
 * feeding the sequences in chunks of 1, 3, 7 tokens (and all at once), through
 * contiguous and paged caches, on both SDPA paths, gives the full forward's
 * output. Errors: non-causal kinds and train mode are refused, the context
 * length and the cache capacity are enforced and leave the cache unchanged. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static uint32_t lcg = 4321u;

static attn_layer *make_layer(attn_layer_kind kind, int64_t C, int64_t O, int64_t H, int64_t ctx, uint64_t seed) {
    attn_layer_config c;
    attn_layer_config_default(&c, kind, C, O, H);
    c.context_length = ctx;
    attn_layer *l = NULL;
    CHECK_OK(attn_layer_create(&c, &l));
    attn_generator g;
    attn_generator_seed(&g, seed);
    CHECK_OK(attn_layer_init(l, &g));
    return l;
}

/* x (B, S, C) through the cache `chunk` tokens at a time (mask: (B, S) over
 * every position, or NULL), the outputs concatenated into inc (B, S, W) */
static void feed(attn_layer *l, attn_kv_cache *cache, const float *x, int64_t B, int64_t S, int64_t C, int64_t W,
                 int64_t chunk, const uint8_t *mask, attn_impl impl, float *xc, float *oc, float *inc) {
    for (int64_t t0 = 0; t0 < S; t0 += chunk) {
        int64_t n = S - t0 < chunk ? S - t0 : chunk;
        for (int64_t b = 0; b < B; b++) memcpy(xc + b * n * C, x + (b * S + t0) * C, (size_t)(n * C) * 4);
        attn_forward_args ia = {.x = xc, .B = B, .S = n, .mask = mask, .Sk = mask ? S : 0, .out = oc, .impl = impl};
        CHECK_OK(attn_layer_forward_incremental(l, cache, &ia));
        for (int64_t b = 0; b < B; b++) memcpy(inc + (b * S + t0) * W, oc + b * n * W, (size_t)(n * W) * 4);
    }
}

static void run_kind(attn_layer_kind kind, int64_t O, int64_t H) {
    const int64_t B = 2, S = 23, C = 16;
    attn_layer *l = make_layer(kind, C, O, H, 32, 7);
    if (!l) return;
    int64_t W = attn_layer_out_width(l), heads, hd;
    CHECK_OK(attn_layer_kv_shape(l, &heads, &hd));
    float *x = malloc((size_t)(B * S * C) * 4), *full = malloc((size_t)(B * S * W) * 4);
    float *inc = malloc((size_t)(B * S * W) * 4), *xc = malloc((size_t)(B * S * C) * 4),
          *oc = malloc((size_t)(B * S * W) * 4);
    for (int64_t i = 0; i < B * S * C; i++) x[i] = tu_frand(&lcg);
    attn_forward_args fa = {.x = x, .B = B, .S = S, .out = full};
    CHECK_OK(attn_layer_forward(l, &fa));
    const int chunks[] = {1, 3, 7, 23};
    for (int ci = 0; ci < 4; ci++)
        for (int paged = 0; paged <= 1; paged++)
            for (int impl = ATTN_IMPL_AUTO; impl <= ATTN_IMPL_REF; impl++) {
                attn_kv_cache_config kc = {.batch = B,
                                           .kv_heads = heads,
                                           .capacity = 40,
                                           .head_dim = hd,
                                           .v_head_dim = hd,
                                           .dtype = ATTN_DTYPE_F32,
                                           .page_size = paged ? 8 : 0};
                attn_kv_cache *cache = NULL;
                CHECK_OK(attn_kv_cache_create(&kc, &cache));
                feed(l, cache, x, B, S, C, W, chunks[ci], NULL, (attn_impl)impl, xc, oc, inc);
                char lab[128];
                snprintf(lab, sizeof lab, "%s chunk %d %s impl %d: incremental == full", attn_layer_kind_name(kind),
                         chunks[ci], paged ? "paged" : "contiguous", impl);
                tu_allclose(lab, inc, full, (size_t)(B * S * W), 2e-5, 2e-6);
                CHECK(attn_kv_cache_len(cache, 1) == S, "%s: cache holds the sequence", lab);
                /* the layer's context length (32) is enforced; the cache is unchanged */
                float xx[2 * 10 * 16] = {0}, oo[2 * 10 * 64];
                attn_forward_args big = {.x = xx, .B = B, .S = 10, .out = oo};
                CHECK(attn_layer_forward_incremental(l, cache, &big) == ATTN_E_CONTEXT, "%s: context length", lab);
                CHECK(attn_kv_cache_len(cache, 0) == S, "%s: cache unchanged after a refused chunk", lab);
                attn_kv_cache_free(cache);
            }
    /* train mode, masks and a cache of the wrong shape are refused */
    attn_kv_cache_config kc = {
        .batch = B, .kv_heads = heads + 1, .capacity = 40, .head_dim = hd, .v_head_dim = hd, .dtype = ATTN_DTYPE_F32};
    attn_kv_cache *wrong = NULL;
    CHECK_OK(attn_kv_cache_create(&kc, &wrong));
    attn_forward_args ia = {.x = x, .B = B, .S = 2, .out = oc};
    CHECK(attn_layer_forward_incremental(l, wrong, &ia) == ATTN_E_SHAPE, "cache with the wrong head count");
    attn_kv_cache_free(wrong);
    kc.kv_heads = heads;
    CHECK_OK(attn_kv_cache_create(&kc, &wrong));
    attn_generator g;
    attn_generator_seed(&g, 1);
    attn_forward_args tr = {.x = x, .B = B, .S = 2, .out = oc, .train = 1, .gen = &g};
    CHECK(attn_layer_forward_incremental(l, wrong, &tr) == ATTN_E_UNSUPPORTED, "train mode");
    CHECK(attn_kv_cache_len(wrong, 0) == 0, "nothing appended by a refused call");
    attn_kv_cache_free(wrong);
    CHECK(attn_layer_backward(l, &(attn_backward_args){.dout = oc}) == ATTN_E_STATE,
          "no backward after an incremental pass");
    free(x), free(full), free(inc), free(xc), free(oc);
    attn_layer_free(l);
}

/* left- and right-padded batches through the cache with the growing padding
 * mask give the full forward's output with the same mask (causal_mha) */
static void padded_incremental(void) {
    const int64_t B = 3, S = 19, C = 16;
    attn_layer *l = make_layer(ATTN_LAYER_CAUSAL_MHA, C, C, 2, 32, 5);
    if (!l) return;
    int64_t W = attn_layer_out_width(l), heads, hd;
    CHECK_OK(attn_layer_kv_shape(l, &heads, &hd));
    float *x = malloc((size_t)(B * S * C) * 4), *full = malloc((size_t)(B * S * W) * 4);
    float *inc = malloc((size_t)(B * S * W) * 4), *xc = malloc((size_t)(B * S * C) * 4),
          *oc = malloc((size_t)(B * S * W) * 4);
    uint8_t mask[3 * 19] = {0};
    for (int64_t j = 0; j < 6; j++) mask[1 * S + j] = 1;     /* sequence 1: 6 tokens of left padding */
    for (int64_t j = S - 4; j < S; j++) mask[2 * S + j] = 1; /* sequence 2: 4 tokens of right padding */
    for (int64_t i = 0; i < B * S * C; i++) x[i] = tu_frand(&lcg);
    attn_forward_args fa = {.x = x, .B = B, .S = S, .mask = mask, .out = full};
    CHECK_OK(attn_layer_forward(l, &fa));
    const int chunks[] = {1, 4, 19};
    for (int ci = 0; ci < 3; ci++)
        for (int paged = 0; paged <= 1; paged++) {
            attn_kv_cache_config kc = {.batch = B,
                                       .kv_heads = heads,
                                       .capacity = 32,
                                       .head_dim = hd,
                                       .v_head_dim = hd,
                                       .dtype = ATTN_DTYPE_F32,
                                       .page_size = paged ? 8 : 0};
            attn_kv_cache *cache = NULL;
            CHECK_OK(attn_kv_cache_create(&kc, &cache));
            feed(l, cache, x, B, S, C, W, chunks[ci], mask, ATTN_IMPL_AUTO, xc, oc, inc);
            char lab[96];
            snprintf(lab, sizeof lab, "padded batch, chunk %d %s: incremental == full", chunks[ci],
                     paged ? "paged" : "contiguous");
            tu_allclose(lab, inc, full, (size_t)(B * S * W), 2e-5, 2e-6);
            /* a mask narrower than the cache's positions is refused, nothing appended */
            attn_forward_args bad = {.x = xc, .B = B, .S = 0, .mask = mask, .Sk = 2, .out = oc};
            bad.S = 1;
            CHECK(attn_layer_forward_incremental(l, cache, &bad) == ATTN_E_SHAPE, "short mask");
            CHECK(attn_kv_cache_len(cache, 0) == S, "nothing appended by a refused call");
            attn_kv_cache_free(cache);
        }
    free(x), free(full), free(inc), free(xc), free(oc);
    attn_layer_free(l);
}

/* the public flags of the table of kinds agree with what each layer does */
static void test_kind_flags(void) {
    CHECK(attn_layer_kind_flags(ATTN_LAYER_KIND_COUNT) == 0, "no flags for an unknown kind");
    for (int k = 0; k < ATTN_LAYER_KIND_COUNT; k++) {
        unsigned f = attn_layer_kind_flags((attn_layer_kind)k);
        const char *name = attn_layer_kind_name((attn_layer_kind)k);
        attn_layer *l = make_layer((attn_layer_kind)k, 16, 16, 2, 8, 1);
        if (!l) continue;
        int64_t h, d;
        CHECK((attn_layer_kv_shape(l, &h, &d) == ATTN_OK) == !!(f & ATTN_KIND_INCREMENTAL), "%s: incremental", name);
        int bufs = 0;
        for (int i = 0; i < attn_layer_tensor_count(l); i++) {
            attn_tensor_info ti;
            CHECK_OK(attn_layer_tensor(l, i, &ti));
            bufs |= ti.is_buffer;
        }
        CHECK(bufs == !!(f & ATTN_KIND_BUFFER), "%s: causal buffers", name);
        float x[2 * 3 * 16] = {0}, y[2 * 3 * 16] = {0}, out[2 * 3 * 64];
        uint8_t mask[6] = {0};
        attn_forward_args fa = {.x = x, .B = 2, .S = 3, .out = out, .mask = mask};
        if (f & ATTN_KIND_CROSS) fa.y = y, fa.Sk = 3;
        attn_status st = attn_layer_forward(l, &fa);
        CHECK((st == ATTN_OK) == !!(f & ATTN_KIND_TAKES_MASK), "%s: takes a padding mask (status %d)", name, st);
        fa.mask = NULL, fa.y = NULL, fa.Sk = 0;
        st = attn_layer_forward(l, &fa);
        CHECK((st == ATTN_OK) == !(f & ATTN_KIND_CROSS), "%s: needs y exactly when cross (status %d)", name, st);
        attn_layer_free(l);
    }
}

int main(int argc, char **argv) {
    tu_init(argc, argv);
    test_kind_flags();
    padded_incremental();
    run_kind(ATTN_LAYER_CAUSAL, 8, 1);
    run_kind(ATTN_LAYER_MHA_WRAPPER, 6, 3);
    run_kind(ATTN_LAYER_MHA, 16, 4);
    run_kind(ATTN_LAYER_GPT_MHA, 16, 4);
    run_kind(ATTN_LAYER_CAUSAL_MHA, 16, 2);
    attn_layer *l = make_layer(ATTN_LAYER_BIDIRECTIONAL, 16, 16, 2, 0, 1);
    int64_t h, d;
    CHECK(attn_layer_kv_shape(l, &h, &d) == ATTN_E_UNSUPPORTED, "bidirectional has no incremental form");
    attn_layer_free(l);
    return tu_finish("test_incremental");
}
