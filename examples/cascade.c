/* Cascade attention over pages a serving engine owns.
 *
 * B sequences share a long prefix (a system prompt) and each has its own
 * suffix. The engine keeps the rows in its own page arrays (NHD layout) and
 * hands libattn a page table per question (FlashInfer's CSR form):
 *   - per sequence: every sequence's table lists the prefix pages, then its
 *     own, and one decode step reads the prefix B times;
 *   - cascade: the prefix attended once for all B query rows (one
 *     "sequence" of B rows, no causal rule: every row comes after the
 *     prefix), each suffix alone, and the two states merged with
 *     attn_merge_states (their lse: natural log).
 * The rows are written with attn_paged_append through a slot mapping. The
 * two answers must agree to float32 rounding; the example prints their
 * times and the largest difference, and ends with a check line.
 *
 * Build and run: make examples (or: cc cascade.c $(pkg-config --cflags --libs attn) -lm)
 * usage: cascade [--quick] */
#include <attn.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { HQ = 8, HKV = 2, D = 64, PS = 16 };

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static float frand(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) / 16777216.0f * 2.0f - 1.0f;
}

static int fail(const char *what, attn_status st) {
    fprintf(stderr, "cascade: %s: %s\n", what, attn_status_string(st));
    return 1;
}

int main(int argc, char **argv) {
    int quick = argc > 1 && !strcmp(argv[1], "--quick");
    int B = quick ? 4 : 16, T = quick ? 512 : 8192, U = quick ? 40 : 256; /* sequences, prefix, suffix tokens */
    int np = T / PS, ns = (U + PS - 1) / PS, P = np + B * ns;
    size_t page = (size_t)PS * HKV * D;
    float *kp = malloc((size_t)P * page * sizeof(float)), *vp = malloc((size_t)P * page * sizeof(float));
    float *rows = malloc(page * sizeof(float)), *q = malloc((size_t)B * HQ * D * sizeof(float));
    float *o_full = malloc((size_t)B * HQ * D * sizeof(float)), *o_pre = malloc((size_t)B * HQ * D * sizeof(float));
    float *o_suf = malloc((size_t)B * HQ * D * sizeof(float)), *out = malloc((size_t)B * HQ * D * sizeof(float));
    float *l_pre = malloc((size_t)B * HQ * sizeof(float)), *l_pre_t = malloc((size_t)B * HQ * sizeof(float));
    float *l_suf = malloc((size_t)B * HQ * sizeof(float)), *lse = malloc((size_t)B * HQ * sizeof(float));
    int32_t *ip_full = malloc((size_t)(B + 1) * 4), *ind_full = malloc((size_t)B * (np + ns) * 4);
    int32_t *ip_suf = malloc((size_t)(B + 1) * 4), *ind_suf = malloc((size_t)B * ns * 4), *last = malloc((size_t)B * 4);
    int32_t *ind_pre = malloc((size_t)np * 4), ip_pre[2] = {0, np}, last_pre = PS;
    int64_t slots[PS];
    if (!kp || !vp || !rows || !q || !o_full || !o_pre || !o_suf || !out || !l_pre || !l_pre_t || !l_suf || !lse ||
        !ip_full || !ind_full || !ip_suf || !ind_suf || !last || !ind_pre) {
        fprintf(stderr, "cascade: out of memory\n");
        return 1;
    }
    /* the engine's pages: page p holds tokens p * PS .. of the rows it was given */
    attn_paged_kv kv = {.dtype = ATTN_DTYPE_F32,
                        .layout = ATTN_KV_NHD,
                        .num_pages = P,
                        .page_size = PS,
                        .Hkv = HKV,
                        .D = D,
                        .Dv = D,
                        .k_pages = kp,
                        .v_pages = vp};
    uint32_t seed = 1;
    for (int p = 0; p < P; p++) {
        for (size_t i = 0; i < page; i++) rows[i] = frand(&seed);
        for (int t = 0; t < PS; t++) slots[t] = (int64_t)p * PS + t;
        attn_status st = attn_paged_append(&kv, PS, rows, rows, slots);
        if (st) return fail("append", st);
    }
    /* the page tables: prefix pages 0 .. np - 1, sequence b's own pages after them */
    ip_full[0] = ip_suf[0] = 0;
    for (int i = 0; i < np; i++) ind_pre[i] = i;
    for (int b = 0; b < B; b++) {
        for (int i = 0; i < np; i++) ind_full[b * (np + ns) + i] = i;
        for (int i = 0; i < ns; i++) ind_full[b * (np + ns) + np + i] = ind_suf[b * ns + i] = np + b * ns + i;
        ip_full[b + 1] = (b + 1) * (np + ns), ip_suf[b + 1] = (b + 1) * ns, last[b] = U - (ns - 1) * PS;
    }
    attn_paged_kv full = kv, pre = kv, suf = kv;
    full.kv_indptr = ip_full, full.kv_indices = ind_full, full.kv_last_page_len = last;
    pre.kv_indptr = ip_pre, pre.kv_indices = ind_pre, pre.kv_last_page_len = &last_pre;
    suf.kv_indptr = ip_suf, suf.kv_indices = ind_suf, suf.kv_last_page_len = last;
    for (int i = 0; i < B * HQ * D; i++) q[i] = frand(&seed); /* one new token per sequence: rows (b, h) */

    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, B, HQ, 1, 0, D, D);
    d.Hkv = HKV, d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    attn_view vq = {q, HQ * D, D, D}, vfull = {o_full, HQ * D, D, D}, vsuf = {o_suf, HQ * D, D, D};
    attn_status st = attn_paged_attention(&d, vq, &full, NULL, vfull, NULL); /* warm-up: the threads start */
    double t0 = now();
    if (!st) st = attn_paged_attention(&d, vq, &full, NULL, vfull, NULL);
    double t_full = now() - t0;
    if (st) return fail("per-sequence attention", st);

    /* cascade: the prefix once, B rows per head (q viewed as (1, HQ, B, D)), then the suffixes */
    attn_sdpa_desc dp;
    attn_sdpa_desc_init(&dp, 1, HQ, B, 0, D, D);
    dp.Hkv = HKV; /* no causal rule: every row comes after the whole prefix */
    attn_view qp = {q, 0, D, HQ * D}, vpre = {o_pre, 0, D, HQ * D};
    st = attn_paged_attention(&dp, qp, &pre, NULL, vpre, l_pre); /* warm-up, as above */
    t0 = now();
    if (!st) st = attn_paged_attention(&dp, qp, &pre, NULL, vpre, l_pre);
    if (!st) st = attn_paged_attention(&d, vq, &suf, NULL, vsuf, l_suf);
    for (int b = 0; b < B; b++) /* the prefix's lse comes (HQ, B): rows (b, h) as the suffix's */
        for (int h = 0; h < HQ; h++) l_pre_t[b * HQ + h] = l_pre[h * B + b];
    if (!st) st = attn_merge_states((int64_t)B * HQ, D, o_pre, l_pre_t, o_suf, l_suf, out, lse);
    double t_cascade = now() - t0;
    if (st) return fail("cascade", st);

    double diff = 0;
    for (int i = 0; i < B * HQ * D; i++) diff = fmax(diff, fabs((double)out[i] - o_full[i]));
    printf("%d sequences sharing a %d-token prefix, %d tokens each of their own, Hq=%d Hkv=%d D=%d, pages of %d\n", B,
           T, U, HQ, HKV, D, PS);
    printf("per sequence %.3f ms (the prefix read %d times), cascade %.3f ms (once, then merged)\n", t_full * 1e3, B,
           t_cascade * 1e3);
    printf("check: cascade equals per-sequence attention, max |diff| %.3g: %s\n", diff, diff < 1e-5 ? "ok" : "FAILED");
    free(kp), free(vp), free(rows), free(q), free(o_full), free(o_pre), free(o_suf), free(out), free(l_pre);
    free(l_pre_t), free(l_suf), free(lse), free(ip_full), free(ind_full), free(ip_suf), free(ind_suf), free(last);
    free(ind_pre);
    return diff < 1e-5 ? 0 : 1;
}
