/* Paged KV cache soak: random append / trim / reset / fork operations over a
 * batch of sequences that share one page pool (too small for every sequence
 * at capacity, so appends also fail for want of a page and must change
 * nothing; forks share pages, and appends into a shared last page copy it),
 * each followed by a decode attend against a contiguous cache fed the same
 * operations (its forks copy rows): a page freed or overwritten while
 * another sequence refers to it would change the answer. With 128-token pages (a multiple of decode's block)
 * the two must agree bitwise, with 64- and 16-token pages within float32 rounding.
 * At the end the pool's free pages are back to its total, and the resident
 * memory did not grow over the run.
 * usage: test_kvcache_soak SRCDIR [OPS]   (default 100000) */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 4, HKV = 2, G = 2, H = HKV * G, D = 32, CAP = 256, CHUNK = 40 };

static long rss_kb(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, res = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &res) != 2) res = 0;
        fclose(f);
    }
    return res * 4;
}

static int soak(int64_t ps, attn_dtype dt, long ops, uint32_t seed) {
    int64_t max_pages = CAP / ps, pool = B * max_pages * 3 / 5; /* 60%: appends run out of pages */
    attn_kv_cache_config pc = {.batch = B,
                               .kv_heads = HKV,
                               .capacity = CAP,
                               .head_dim = D,
                               .v_head_dim = D,
                               .dtype = dt,
                               .page_size = ps,
                               .num_pages = pool},
                         cc = {
                             .batch = B, .kv_heads = HKV, .capacity = CAP, .head_dim = D, .v_head_dim = D, .dtype = dt};
    attn_kv_cache *paged = NULL, *contig = NULL;
    CHECK_OK(attn_kv_cache_create(&pc, &paged));
    CHECK_OK(attn_kv_cache_create(&cc, &contig));
    if (!paged || !contig) return 1;
    float *k = malloc(sizeof(float) * B * HKV * CHUNK * D), *v = malloc(sizeof(float) * B * HKV * CHUNK * D);
    float q[B * H * 2 * D], o1[B * H * 2 * D], o2[B * H * 2 * D];
    attn_view vk = {k, HKV * CHUNK * D, CHUNK * D, D}, vv = {v, HKV * CHUNK * D, CHUNK * D, D};
    int bad = 0, nomem = 0, forks = 0;
    long rss0 = 0;
    for (long op = 0; op < ops && bad < 5; op++) {
        if (op == ops / 10) rss0 = rss_kb();
        int b = tu_irand(&seed, 0, B - 1), kind = tu_irand(&seed, 0, 11);
        int64_t len = attn_kv_cache_len(contig, b);
        if (kind < 6) { /* append 1..CHUNK rows to sequence b (and sometimes to all) */
            int64_t n[B] = {0};
            for (int t = 0; t < B; t++)
                if (t == b || kind == 0) n[t] = tu_irand(&seed, 1, CHUNK);
            for (int t = 0; t < B; t++)
                if (attn_kv_cache_len(contig, t) + n[t] > CAP) n[t] = CAP - attn_kv_cache_len(contig, t);
            for (int i = 0; i < B * HKV * CHUNK * D; i++) k[i] = tu_frand(&seed), v[i] = tu_frand(&seed);
            attn_status st = attn_kv_cache_append(paged, n, vk, vv);
            if (st == ATTN_E_NOMEM) { /* no free page: nothing may have changed */
                nomem++;
                for (int t = 0; t < B; t++)
                    if (attn_kv_cache_len(paged, t) != attn_kv_cache_len(contig, t)) bad++;
            } else if (st != ATTN_OK || attn_kv_cache_append(contig, n, vk, vv) != ATTN_OK) {
                bad++;
                fprintf(stderr, "op %ld: append failed (%d)\n", op, st);
            }
        } else if (kind < 9) { /* trim to a shorter length */
            int64_t to = len ? tu_irand(&seed, 0, (int)len) : 0;
            if (attn_kv_cache_trim(paged, b, to) != ATTN_OK || attn_kv_cache_trim(contig, b, to) != ATTN_OK) bad++;
        } else if (kind == 9) {
            if (attn_kv_cache_reset(paged, b) != ATTN_OK || attn_kv_cache_reset(contig, b) != ATTN_OK) bad++;
        } else { /* sequence b becomes a copy of another (shared pages) */
            int src = tu_irand(&seed, 0, B - 1);
            forks++;
            if (attn_kv_cache_fork(paged, src, b) != ATTN_OK || attn_kv_cache_fork(contig, src, b) != ATTN_OK) bad++;
        }
        /* decode against both: one or two new tokens per sequence */
        int64_t Sq = tu_irand(&seed, 1, 2);
        for (int i = 0; i < B * H * Sq * D; i++) q[i] = tu_frand(&seed);
        attn_sdpa_desc d;
        attn_sdpa_desc_init(&d, B, H, Sq, 0, D, D);
        d.Hkv = HKV;
        d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
        attn_view vq = {q, H * Sq * D, Sq * D, D}, a = {o1, H * Sq * D, Sq * D, D}, c = {o2, H * Sq * D, Sq * D, D};
        if (attn_kv_cache_attend(paged, &d, vq, a, NULL) != ATTN_OK ||
            attn_kv_cache_attend(contig, &d, vq, c, NULL) != ATTN_OK) {
            bad++;
            continue;
        }
        int n = B * H * (int)Sq * D, diff = 0;
        for (int i = 0; i < n; i++)
            diff += ps % 128 == 0 ? memcmp(&o1[i], &o2[i], sizeof(float)) != 0
                                  : !(fabsf(o1[i] - o2[i]) <= 1e-5f * (1.0f + fabsf(o2[i])));
        if (diff && bad++ < 5) fprintf(stderr, "op %ld: page %lld: %d outputs differ\n", op, (long long)ps, diff);
    }
    for (int b = 0; b < B; b++) CHECK_OK(attn_kv_cache_reset(paged, b));
    CHECK(attn_kv_cache_free_pages(paged) == pool, "page %lld: %lld of %lld pages free after resetting everything",
          (long long)ps, (long long)attn_kv_cache_free_pages(paged), (long long)pool);
    long rss1 = rss_kb();
    CHECK(bad == 0, "page %lld: %d operations went wrong", (long long)ps, bad);
    CHECK(nomem > 0, "page %lld: the pool ran out of pages at least once (%d times)", (long long)ps, nomem);
    CHECK(forks > 0, "page %lld: forks were drawn (%d)", (long long)ps, forks);
#ifndef __SANITIZE_ADDRESS__ /* ASan keeps freed memory in quarantine, resident by design; LeakSanitizer checks        \
                              * for leaks at exit instead */
    CHECK(rss1 <= rss0 + 2048, "page %lld: resident memory %ld KB at 10%% of the run, %ld KB at its end", (long long)ps,
          rss0, rss1);
#endif
    printf("page %lld: %ld operations (%d forks), %d appends refused for want of a page, RSS %ld -> %ld KB\n",
           (long long)ps, ops, forks, nomem, rss0, rss1);
    attn_kv_cache_free(paged), attn_kv_cache_free(contig);
    free(k), free(v);
    return 0;
}

int main(int argc, char **argv) {
    tu_init(argc, argv);
    long ops = argc > 2 ? atol(argv[2]) : 100000;
    soak(128, ATTN_DTYPE_F16, ops / 2, 7);
    soak(64, ATTN_DTYPE_F16, ops / 2, 13);
    soak(16, ATTN_DTYPE_F32, ops / 4, 9);
    soak(16, ATTN_DTYPE_KV_INT4, ops / 4, 11); /* the rows' (scale, zero) pairs follow forks and copies */
    return tu_finish("test_kvcache_soak");
}
