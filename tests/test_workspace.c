/* The scratch-memory cache (src/base/workspace.c, attn_release_cached_memory):
 * alignment, reuse of a freed block, no huge block for a small request, the
 * ATTN_CACHE_MB cap, threads allocating and freeing at once, and results
 * that do not depend on whether a block came from the cache. */
#include "base/workspace.h"
#include "testutil.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void test_reuse(void) {
    char *a = attn_ws_alloc(3 << 20);
    CHECK(a && ((uintptr_t)a & 63) == 0, "64-byte aligned block");
    memset(a, 1, 3 << 20);
    attn_ws_free(a);
    char *b = attn_ws_alloc((3 << 20) - 100); /* fits the cached block */
    CHECK(b == a, "a freed block is handed to the next request it fits");
    char *c = attn_ws_alloc(1000); /* b is taken: a new block */
    CHECK(c && c != b, "a second request gets its own block");
    attn_ws_free(b);
    char *d = attn_ws_alloc(1000); /* the cached 3 MiB block is more than twice too big */
    CHECK(d && d != b, "a small request does not pin a large cached block");
    attn_ws_free(c), attn_ws_free(d);
    attn_ws_free(NULL);
    attn_release_cached_memory();
    char *e = attn_ws_alloc(3 << 20);
    CHECK(e != NULL, "allocation after release");
    attn_ws_free(e);
    CHECK(attn_ws_alloc(SIZE_MAX - 10) == NULL, "an impossible size gives NULL");
}

/* ATTN_CACHE_MB=8 (set by main before the first use): a 16 MiB block is not kept */
static void test_cap(void) {
    attn_release_cached_memory();
    CHECK(attn_ws_cached_bytes() == 0, "release empties the cache");
    char *big = attn_ws_alloc(16u << 20);
    CHECK(big != NULL, "16 MiB");
    attn_ws_free(big);
    CHECK(attn_ws_cached_bytes() == 0, "a block over the cap is freed, not kept (%zu cached)", attn_ws_cached_bytes());
    char *mid = attn_ws_alloc(3u << 20);
    attn_ws_free(mid);
    size_t one = attn_ws_cached_bytes();
    /* blocks from 1 MiB on are whole mapped megabytes: 3 MiB + its header is 4 MiB */
    CHECK(one == (4u << 20), "a 3 MiB block is kept, as 4 whole MiB (%zu cached)", one);
    char *small[12];
    for (int i = 0; i < 12; i++) small[i] = attn_ws_alloc((size_t)(i + 1) << 18); /* 256 KiB .. 3 MiB */
    for (int i = 0; i < 12; i++) attn_ws_free(small[i]);
    CHECK(attn_ws_cached_bytes() <= (8u << 20), "the cache stays under ATTN_CACHE_MB (%zu cached)",
          attn_ws_cached_bytes());
    attn_release_cached_memory();
    CHECK(attn_ws_cached_bytes() == 0, "release empties the cache");
}

static void *hammer(void *arg) {
    uint32_t seed = (uint32_t)(uintptr_t)arg;
    int *bad = malloc(sizeof *bad);
    *bad = 0;
    for (int it = 0; it < 400; it++) {
        size_t n = (size_t)tu_irand(&seed, 1, 1 << 18) * 4;
        unsigned char *p = attn_ws_alloc(n), tag = (unsigned char)(seed & 0xff);
        if (!p) {
            (*bad)++;
            continue;
        }
        memset(p, tag, n);
        for (size_t i = 0; i < n; i += 4093) *bad += p[i] != tag;
        *bad += p[n - 1] != tag;
        attn_ws_free(p);
    }
    return bad;
}

static void test_threads(void) {
    pthread_t th[4];
    for (uintptr_t i = 0; i < 4; i++) pthread_create(&th[i], NULL, hammer, (void *)(i * 7919 + 1));
    int bad = 0;
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(th[i], &r);
        bad += *(int *)r;
        free(r);
    }
    CHECK(bad == 0, "%d corrupted or missing blocks with 4 threads", bad);
}

/* the same forward and backward, twice (the second from cached blocks) and after a release */
static void test_results(void) {
    int64_t H = 3, S = 200, D = 32;
    size_t n = (size_t)(H * S * D);
    uint32_t seed = 11;
    float *q = tu_rand_array(n, &seed, 1.0f), *k = tu_rand_array(n, &seed, 1.0f), *v = tu_rand_array(n, &seed, 1.0f);
    float *go = tu_rand_array(n, &seed, 1.0f), *o[3], *dq[3];
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, H, S, S, D, D);
    d.causal = ATTN_CAUSAL_TOP_LEFT, d.impl = ATTN_IMPL_FAST;
    attn_view Q = {q, H * S * D, S * D, D}, K = {k, H * S * D, S * D, D}, V = {v, H * S * D, S * D, D};
    attn_view GO = {go, H * S * D, S * D, D}, none = {NULL, 0, 0, 0};
    float *dk = malloc(n * sizeof(float)), *dv = malloc(n * sizeof(float));
    for (int r = 0; r < 3; r++) {
        if (r == 2) attn_release_cached_memory();
        o[r] = malloc(n * sizeof(float)), dq[r] = malloc(n * sizeof(float));
        attn_view O = {o[r], H * S * D, S * D, D}, DQ = {dq[r], H * S * D, S * D, D};
        attn_view DK = {dk, H * S * D, S * D, D}, DV = {dv, H * S * D, S * D, D};
        CHECK_OK(attn_sdpa_forward(&d, Q, K, V, O, NULL));
        CHECK_OK(attn_sdpa_backward(&d, Q, K, V, none, GO, NULL, DQ, DK, DV));
    }
    for (int r = 1; r < 3; r++) {
        tu_equal("forward with cached scratch", o[r], o[0], n);
        tu_equal("backward with cached scratch", dq[r], dq[0], n);
    }
    for (int r = 0; r < 3; r++) free(o[r]), free(dq[r]);
    free(q), free(k), free(v), free(go), free(dk), free(dv);
}

int main(int argc, char **argv) {
    setenv("ATTN_CACHE_MB", "8", 1); /* read once, at the first free */
    tu_init(argc, argv);
    test_reuse();
    test_cap();
    test_threads();
    test_results();
    attn_release_cached_memory();
    return tu_finish("test_workspace");
}
