/* ATTN_ISA that cannot be honoured (set by ctest: "avx512" -> ATTN_E_UNSUPPORTED
 * on a CPU without AVX-512, ATTN_OK on one with it (argv[2] "avx512");
 * "fastest" -> ATTN_E_INVALID, argv[2] the expected status): every fused
 * entry point returns that status instead of running other kernels, and the
 * reference path still runs. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    tu_init(argc, argv);
    attn_status want = argc > 2 ? (attn_status)atoi(argv[2]) : ATTN_E_UNSUPPORTED;
    if (argc > 2 && !strcmp(argv[2], "avx512")) want = tu_cpu_avx512() ? ATTN_OK : ATTN_E_UNSUPPORTED;
    CHECK(attn_kernel_status() == want, "attn_kernel_status %d, want %d (ATTN_ISA=%s)", attn_kernel_status(), want,
          getenv("ATTN_ISA"));
    int64_t H = 2, S = 20, D = 16;
    size_t n = (size_t)(H * S * D);
    uint32_t seed = 3;
    float *q = tu_rand_array(n, &seed, 1.0f), *o = calloc(n, sizeof(float)), *g = calloc(n, sizeof(float));
    attn_view v = {q, H * S * D, S * D, D}, ov = {o, H * S * D, S * D, D}, gv = {g, H * S * D, S * D, D};
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, H, S, S, D, D);
    CHECK(attn_sdpa_forward(&d, v, v, v, ov, NULL) == want, "forward (auto) returns the kernel status");
    d.impl = ATTN_IMPL_FAST;
    CHECK(attn_sdpa_backward(&d, v, v, v, ov, v, NULL, gv, gv, gv) == want, "backward returns the kernel status");
    d.impl = ATTN_IMPL_REF;
    CHECK_OK(attn_sdpa_forward(&d, v, v, v, ov, NULL));
    attn_kv_cache_config kc = {.batch = 1, .kv_heads = H, .capacity = 32, .head_dim = D};
    attn_kv_cache *c = NULL;
    CHECK_OK(attn_kv_cache_create(&kc, &c));
    int64_t len = S;
    CHECK_OK(attn_kv_cache_append(c, &len, v, v));
    attn_sdpa_desc dd;
    attn_sdpa_desc_init(&dd, 1, H, 1, S, D, D);
    attn_view q1 = {q, H * D, D, D}, o1 = {o, H * D, D, D};
    CHECK(attn_kv_cache_attend(c, &dd, q1, o1, NULL) == want, "decode returns the kernel status");
    attn_kv_cache_free(c);
    free(q), free(o), free(g);
    return tu_finish("test_isa");
}
