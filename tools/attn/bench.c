/* attn bench: time the core SDPA (forward, or backward) and OpenBLAS sgemm in
 * the same run. FLOPs: forward 4*B*H*Sq*Sk*D (halved when causal), backward
 * 2.5x that; sgemm 2*N^3. The SDPA and sgemm are timed in alternating rounds
 * (the machine's speed drifts); reported: the median time of each and the
 * median over rounds of the GFLOP/s ratio. */
#include "cli.h"
#include "opts.h"
#ifdef ATTN_HAVE_MPI
#include "cli_ring.h"
#endif
#include "base/half.h"
#include "base/storage.h"
#include "base/workspace.h"
#include "core/kv_src.h"
#include "kernels/mm.h"
#include "readbw.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

typedef struct sg_ctx {
    int n;
    float *a, *b, *c;
} sg_ctx;

static int run_sgemm(void *p) {
    sg_ctx *s = p;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s->n, s->n, s->n, 1.0f, s->a, s->n, s->b, s->n, 0.0f, s->c,
                s->n);
    return 0;
}

/* oneDNN's lines: an n^3 matmul of type t (BF16: the bf16 line; F32: the
 * float32 line the products through oneDNN are measured against where it
 * has no bf16) -> float32, its rows shared out over the threads, each on
 * its own primitives (oneDNN's own threading of one call measured alike on
 * the AMX host, 2740-2815 GFLOP/s) */
typedef struct mml_ctx {
    int n;
    attn_dtype t;
    void *a, *b;
    float *c;
} mml_ctx;

static int run_mmline(void *p) {
    mml_ctx *s = p;
    int bad = 0;
    size_t es = attn_storage_bytes(s->t, 1);
#pragma omp parallel reduction(| : bad)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        int64_t r0 = (int64_t)s->n * t / nt, r1 = (int64_t)s->n * (t + 1) / nt;
        bad |= attn_mm_run(attn_mm_thread(), s->t, r1 - r0, s->n, s->n, (char *)s->a + (size_t)(r0 * s->n) * es, s->n,
                           1, s->b, s->n, 1, s->c + r0 * s->n, s->n, 0) != ATTN_OK;
    }
    if (bad) cli_error("bench: oneDNN's matmul failed");
    return bad;
}

/* the line's operands from sgemm's (converted to t) */
static int mmline_make(mml_ctx *m, attn_dtype t, int n, const float *a, const float *b) {
    size_t n2 = (size_t)n * (size_t)n;
    m->n = n, m->t = t;
    m->a = malloc(n2 * 4), m->b = malloc(n2 * 4), m->c = malloc(n2 * 4);
    if (!m->a || !m->b || !m->c) return 0;
    attn_storage_of(t)->store(a, (int64_t)n2, m->a), attn_storage_of(t)->store(b, (int64_t)n2, m->b);
    return 1;
}

static void mmline_free(mml_ctx *m) { free(m->a), free(m->b), free(m->c); }

typedef struct sd_ctx {
    attn_sdpa_desc d;
    attn_view q, k, v, o, go, dq, dk, dv;
    float *lse;
    int backward;
} sd_ctx;

static int run_sdpa(void *p) {
    sd_ctx *s = p;
    attn_status st = s->backward ? attn_sdpa_backward(&s->d, s->q, s->k, s->v, s->o, s->go, s->lse, s->dq, s->dk, s->dv)
                                 : attn_sdpa_forward(&s->d, s->q, s->k, s->v, s->o, s->lse);
    if (st != ATTN_OK) cli_error("bench: %s", cli_status(st));
    return st != ATTN_OK;
}

typedef struct bench_result {
    double ta, tb, ratio; /* median seconds of A and B; median over rounds of (workA/tA) / (workB/tB) */
    int reps;             /* timed runs of A */
} bench_result;

/* Time A (and the reference B, if given) in alternating rounds: each round
 * runs a warm-up and repetitions of A, then of B, so each round's ratio
 * compares the two at nearly the same moment (this VM's speed drifts), and
 * the warm-up after each switch lets the other thread pool go idle. */
static int time_pair(int (*fa)(void *), void *a, double work_a, int (*fb)(void *), void *b, double work_b,
                     double min_time, bench_result *res) {
    static double ts[256], tg[256];
    double rt[16];
    int ns = 0, ng = 0, rounds = 0;
    double start = cli_now(), slice = min_time / 4.0;
    do {
        double t1, rs[64], rg[64];
        int ks = 0, kg = 0;
        if (fa(a)) return 1;
        double t0 = cli_now();
        do {
            t1 = cli_now();
            if (fa(a)) return 1;
            rs[ks++] = cli_now() - t1;
        } while (ks < 64 && (ks < 2 || cli_now() - t0 < slice));
        if (fb) {
            fb(b);
            t0 = cli_now();
            do {
                t1 = cli_now();
                fb(b);
                rg[kg++] = cli_now() - t1;
            } while (kg < 64 && (kg < 2 || cli_now() - t0 < slice));
        }
        qsort(rs, (size_t)ks, sizeof rs[0], cli_cmp_double);
        for (int i = 0; i < ks && ns < 256; i++) ts[ns++] = rs[i];
        if (kg) {
            qsort(rg, (size_t)kg, sizeof rg[0], cli_cmp_double);
            for (int i = 0; i < kg && ng < 256; i++) tg[ng++] = rg[i];
            rt[rounds] = (work_a / rs[ks / 2]) / (work_b / rg[kg / 2]);
        } else {
            rt[rounds] = 0.0;
        }
        rounds++;
    } while (rounds < 16 && (rounds < 2 || cli_now() - start < min_time));
    qsort(ts, (size_t)ns, sizeof ts[0], cli_cmp_double);
    qsort(tg, (size_t)ng, sizeof tg[0], cli_cmp_double);
    qsort(rt, (size_t)rounds, sizeof rt[0], cli_cmp_double);
    res->ta = ts[ns / 2], res->tb = ng ? tg[ng / 2] : 0.0, res->ratio = rt[rounds / 2], res->reps = ns;
    return 0;
}

float *cli_frand_buf(size_t n, uint32_t seed) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    if (!p) return NULL;
    uint32_t x = seed * 2654435761u + 1u;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        p[i] = (float)((x >> 8) * (1.0 / 16777216.0)) - 0.5f;
    }
    return p;
}

/* ---- decode: one new token per sequence against a KV cache ---------------- */

/* up to four regions to read: a buffer of the step's bytes, or a cache's
 * own storage (attn_kv_cache_regions: on this kind of VM one allocation may
 * read up to 2x faster or slower than another) */
typedef struct rd_ctx {
    const void *p[4];
    size_t bytes[4], total;
    int n;
    volatile unsigned sink;
} rd_ctx;

static rd_ctx rd_of(const void *const *p, const size_t *bytes, int n) {
    rd_ctx r = {.n = n};
    for (int i = 0; i < n; i++) r.p[i] = p[i], r.bytes[i] = bytes[i], r.total += bytes[i];
    return r;
}

/* the machine's read bandwidth on the decode's thread count (readbw.c: the
 * widest vectors, 8 accumulators, one stream per thread) */
static int run_read(void *v) {
    rd_ctx *r = v;
    r->sink += attn_readbw_sum_regions(r->p, r->bytes, r->n);
    return 0;
}

typedef struct dec_ctx {
    attn_kv_cache *cache;
    attn_sdpa_desc d;
    attn_view q, o;
} dec_ctx;

static int run_decode(void *v) {
    dec_ctx *c = v;
    attn_status st = attn_kv_cache_attend(c->cache, &c->d, c->q, c->o, NULL);
    if (st != ATTN_OK) cli_error("bench: %s", cli_status(st));
    return st != ATTN_OK;
}

/* A tree of Sq draft tokens at the end of T cached positions as a (Sq, T)
 * mask: every draft sees the prompt, itself and its ancestors in a binary
 * tree (parent of draft a: (a - 1) / 2): speculative decoding's check. */
static uint8_t *tree_mask(int64_t Sq, int64_t T) {
    uint8_t *m = calloc((size_t)(Sq * T), 1);
    for (int64_t i = 0; m && i < Sq; i++) {
        memset(m + i * T, 1, (size_t)(T - Sq));
        for (int64_t a = i;; a = (a - 1) / 2) {
            m[i * T + T - Sq + a] = 1;
            if (a == 0) break;
        }
    }
    return m;
}

static const char *const math_names[] = {"strict", "data", "bf16"}; /* attn_math */

/* the KV storage types by name, in dtypes[]'s order */
#define KV_NAMES "f32|f16|bf16|q8_0|fp8_e4m3|fp8_e5m2|int8|int4|q4_0"
static const char *kv_name(attn_dtype dt);
/* bytes of one stored row of D values (int8 / int4: with its (scale, zero) pair) */
static size_t kv_row_bytes(attn_dtype dt, int64_t D) {
    return attn_storage_bytes(dt, D) + (attn_storage_of(dt)->params == ATTN_ST_ROWPAR ? 2 * sizeof(float) : 0);
}

/* bench_decode's modes */
#define DEC_TREE 1   /* the queries are a tree of drafts */
#define DEC_RAGGED 2 /* sequence b holds T/2 + b (T/2) / (B - 1) tokens (appended together: pages interleave) */
#define DEC_CALLER 4 /* the same rows in caller-owned pages (attn_paged_attention) against the cache */

/* decode over caller-owned pages: the cache's rows copied into pages of the
 * same size and layout (HND, pages in the cache's order) */
typedef struct pg_ctx {
    attn_paged_kv kv;
    attn_sdpa_desc d;
    attn_view q, o;
} pg_ctx;

static int run_paged(void *v) {
    pg_ctx *c = v;
    attn_status st = attn_paged_attention(&c->d, c->q, &c->kv, NULL, c->o, NULL);
    if (st != ATTN_OK) cli_error("bench: %s", cli_status(st));
    return st != ATTN_OK;
}

/* caller-owned pages' own storage as regions to read: K's and V's pages and
 * their (scale, zero) pairs, whichever are there */
static rd_ctx pages_rd(const attn_paged_kv *kv) {
    size_t rows = (size_t)(kv->num_pages * kv->page_size * kv->Hkv), bytes[4];
    const void *p[4];
    int n = 0;
    if (kv->k_pages) p[n] = kv->k_pages, bytes[n++] = rows * attn_storage_bytes(kv->dtype, kv->D);
    if (kv->v_pages) p[n] = kv->v_pages, bytes[n++] = rows * attn_storage_bytes(kv->dtype, kv->Dv);
    if (kv->k_params) p[n] = kv->k_params, bytes[n++] = rows * 2 * sizeof(float);
    if (kv->v_params) p[n] = kv->v_params, bytes[n++] = rows * 2 * sizeof(float);
    return rd_of(p, bytes, n);
}

/* the cache's rows as caller-owned pages (one table per sequence, pages in
 * order); 0 when out of memory */
static int caller_pages(attn_kv_cache *cache, int64_t B, int64_t Hkv, int64_t D, int64_t ps, attn_dtype dt,
                        const int64_t *len, pg_ctx *p) {
    int64_t np = 0;
    for (int64_t b = 0; b < B; b++) np += (len[b] + ps - 1) / ps;
    p->kv = (attn_paged_kv){
        .dtype = dt, .layout = ATTN_KV_HND, .num_pages = np, .page_size = ps, .Hkv = Hkv, .D = D, .Dv = D};
    size_t pb = attn_storage_bytes(dt, ps * Hkv * D);
    p->kv.k_pages = attn_big_alloc((size_t)np * pb), p->kv.v_pages = attn_big_alloc((size_t)np * pb);
    int32_t *ip = malloc((size_t)(B + 1) * 4), *ind = malloc((size_t)(np ? np : 1) * 4), *last = malloc((size_t)B * 4);
    float *kr = malloc((size_t)(Hkv * D) * 4), *vr = malloc((size_t)(Hkv * D) * 4);
    if (!p->kv.k_pages || !p->kv.v_pages || !ip || !ind || !last || !kr || !vr) return 0;
    if (attn_storage_of(dt)->params == ATTN_ST_ROWPAR) { /* int8 / int4: the rows' pairs */
        p->kv.k_params = attn_big_alloc((size_t)(np * ps * Hkv) * 8),
        p->kv.v_params = attn_big_alloc((size_t)(np * ps * Hkv) * 8);
        if (!p->kv.k_params || !p->kv.v_params) return 0;
    }
    ip[0] = 0;
    for (int64_t b = 0, at = 0; b < B; b++) {
        int64_t n = (len[b] + ps - 1) / ps;
        for (int64_t i = 0; i < n; i++) ind[at + i] = (int32_t)(at + i);
        at += n, ip[b + 1] = (int32_t)at, last[b] = n ? (int32_t)(len[b] - (n - 1) * ps) : 0;
        for (int64_t j = 0; j < len[b]; j++) {
            for (int64_t hk = 0; hk < Hkv; hk++) attn_kv_cache_read(cache, b, hk, j, kr + hk * D, vr + hk * D);
            int64_t slot = (int64_t)ind[ip[b] + j / ps] * ps + j % ps;
            attn_paged_append(&p->kv, 1, kr, vr, &slot);
        }
    }
    p->kv.kv_indptr = ip, p->kv.kv_indices = ind, p->kv.kv_last_page_len = last;
    free(kr), free(vr);
    return 1;
}

static int bench_decode(int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t D, int64_t page, attn_dtype dt,
                        attn_impl impl, attn_math math, double min_time, int json, int64_t Sq, int mode) {
    int tree = mode & DEC_TREE, ragged = mode & DEC_RAGGED;
    if (tree && ragged) {
        cli_error("bench: --tree and --ragged do not combine (the tree's drafts end every sequence at T)");
        return EXIT_USAGE;
    }
    attn_kv_cache_config cfg = {
        .batch = B, .kv_heads = Hkv, .capacity = T, .head_dim = D, .v_head_dim = D, .dtype = dt, .page_size = page};
    const char *dtn = kv_name(dt);
    dec_ctx c;
    memset(&c, 0, sizeof c);
    attn_status st = attn_kv_cache_create(&cfg, &c.cache);
    if (st != ATTN_OK) {
        cli_error("bench: KV cache of B=%lld Hkv=%lld T=%lld D=%lld: %s", (long long)B, (long long)Hkv, (long long)T,
                  (long long)D, cli_status(st));
        return 1;
    }
    /* fill every sequence to T tokens, 1024 at a time */
    int64_t chunk = T < 1024 ? T : 1024;
    float *kk = cli_frand_buf((size_t)(B * Hkv * chunk * D), 5), *vv = cli_frand_buf((size_t)(B * Hkv * chunk * D), 6);
    float *q = cli_frand_buf((size_t)(B * H * Sq * D), 4), *o = cli_frand_buf((size_t)(B * H * Sq * D), 7);
    uint8_t *tm = tree ? tree_mask(Sq, T) : NULL;
    int64_t *n = calloc((size_t)B, sizeof *n), *len = calloc((size_t)B, sizeof *len), tokens = 0;
    for (int64_t b = 0; len && b < B; b++) tokens += len[b] = ragged && B > 1 ? T / 2 + b * (T - T / 2) / (B - 1) : T;
    /* K and V as stored: 4, 2 or 34/32 bytes per element */
    size_t bytes = (size_t)(2 * Hkv * tokens) * kv_row_bytes(dt, D);
    void *buf = attn_readbw_buf(bytes);
    rd_ctx rd = rd_of((const void *const *)&buf, &bytes, 1);
    if (!kk || !vv || !q || !o || !n || !len || !buf || (tree && !tm)) {
        cli_error("bench: out of memory");
        return 1;
    }
    attn_view vk = {kk, Hkv * chunk * D, chunk * D, D}, vv_ = {vv, Hkv * chunk * D, chunk * D, D};
    for (int64_t done = 0; done < T; done += chunk) {
        for (int64_t b = 0; b < B; b++) n[b] = len[b] - done < 0 ? 0 : len[b] - done < chunk ? len[b] - done : chunk;
        if ((st = attn_kv_cache_append(c.cache, n, vk, vv_)) != ATTN_OK) {
            cli_error("bench: append: %s", cli_status(st));
            return 1;
        }
    }
    attn_sdpa_desc_init(&c.d, B, H, Sq, T, D, D);
    c.d.causal = tree ? ATTN_CAUSAL_NONE : ATTN_CAUSAL_BOTTOM_RIGHT; /* a tree replaces the causal rule */
    c.d.impl = impl, c.d.math = math;
    if (tree) c.d.attn_mask = tm, c.d.attn_mask_strides[2] = T, c.d.attn_mask_strides[3] = 1;
    attn_view vq = {q, H * Sq * D, Sq * D, D}, vo = {o, H * Sq * D, Sq * D, D};
    c.q = vq, c.o = vo;
    bench_result r;
    if (mode & DEC_CALLER) { /* the same rows in caller-owned pages, in alternating rounds with the cache */
        pg_ctx pg;
        memset(&pg, 0, sizeof pg);
        if (page < 1 || tree) {
            cli_error("bench: --caller-pages needs --page-size > 0 (the cache's pages, copied) and no --tree");
            return EXIT_USAGE;
        }
        if (!caller_pages(c.cache, B, Hkv, D, page, dt, len, &pg)) {
            cli_error("bench: out of memory");
            return 1;
        }
        pg.d = c.d, pg.d.Hkv = Hkv, pg.q = vq,
        pg.o = (attn_view){cli_frand_buf((size_t)(B * H * Sq * D), 9), H * Sq * D, Sq * D, D};
        if (time_pair(run_paged, &pg, (double)bytes, run_decode, &c, (double)bytes, min_time, &r)) return 1;
        double g_pages = (double)bytes / r.ta * 1e-9, g_cache = (double)bytes / r.tb * 1e-9;
        if (json)
            printf("{\"op\": \"decode-caller-pages\", \"math\": \"%s\", \"kernels\": \"%s\", \"B\": %lld, \"H\": %lld, "
                   "\"Hkv\": %lld, \"T\": %lld, \"Sq\": %lld, \"D\": %lld, \"kv_dtype\": \"%s\", \"page_size\": %lld, "
                   "\"layout\": \"HND\", \"threads\": %d, \"reps\": %d, \"gbps_pages\": %.2f, \"gbps_cache\": %.2f, "
                   "\"ratio_to_cache\": %.3f}\n",
                   math_names[math], attn_kernel_name(), (long long)B, (long long)H, (long long)Hkv, (long long)T,
                   (long long)Sq, (long long)D, dtn, (long long)page, omp_get_max_threads(), r.reps, g_pages, g_cache,
                   r.ratio);
        else
            printf("decode over caller-owned pages (HND, %lld tokens) vs the cache's own pages, %s, T=%lld: %.1f vs "
                   "%.1f GB/s, ratio %.3f (median of the rounds)\n",
                   (long long)page, dtn, (long long)T, g_pages, g_cache, r.ratio);
        free(pg.kv.k_pages), free(pg.kv.v_pages), free((void *)pg.kv.kv_indptr), free((void *)pg.kv.kv_indices);
        free((void *)pg.kv.kv_last_page_len), free(pg.o.data);
        attn_kv_cache_free(c.cache);
        free(kk), free(vv), free(q), free(o), free(n), free(len), free(buf), free(tm);
        return 0;
    }
    /* against a buffer of the step's bytes, then against the cache's own storage (all of it: a paged pool's
     * spare pages and a capacity past the rows too, so compared per byte) */
    const void *rp[4];
    size_t rb[4];
    rd_ctx own = rd_of(rp, rb, attn_kv_cache_regions(c.cache, rp, rb));
    bench_result ro;
    if (time_pair(run_decode, &c, (double)bytes, run_read, &rd, (double)bytes, min_time, &r) ||
        time_pair(run_decode, &c, (double)bytes, run_read, &own, (double)own.total, min_time, &ro))
        return 1;
    double gbps = (double)bytes / r.ta * 1e-9, rd_gbps = (double)bytes / r.tb * 1e-9,
           own_gbps = (double)own.total / ro.tb * 1e-9;
    int nthreads = omp_get_max_threads();
    const char *kern = impl == ATTN_IMPL_REF ? "ref" : attn_kernel_name();
    if (json)
        printf("{\"op\": \"decode\", \"impl\": \"%s\", \"math\": \"%s\", \"kernels\": \"%s\", \"B\": %lld, "
               "\"H\": %lld, \"Hkv\": %lld, \"T\": %lld, \"ragged\": %s, \"Sq\": %lld, \"tree\": %s, \"D\": %lld, "
               "\"kv_dtype\": \"%s\", "
               "\"page_size\": %lld, "
               "\"threads\": %d, \"reps\": %d, \"ms\": %.4f, \"bytes\": %zu, \"gbps\": %.2f, "
               "\"read_gbps\": %.2f, \"read_kernel\": \"%s\", \"ratio_to_read\": %.3f, \"own_read_gbps\": %.2f, "
               "\"ratio_to_own_read\": %.3f}\n",
               impl == ATTN_IMPL_REF ? "ref" : "fast", math_names[math], kern, (long long)B, (long long)H,
               (long long)Hkv, (long long)T, ragged ? "true" : "false", (long long)Sq, tree ? "true" : "false",
               (long long)D, dtn, (long long)page, nthreads, r.reps, r.ta * 1e3, bytes, gbps, rd_gbps,
               attn_readbw_kernel(), r.ratio, own_gbps, ro.ratio);
    else
        printf(
            "decode %s math=%s (%s kernels) B=%lld Hq=%lld Hkv=%lld T=%lld%s Sq=%lld%s D=%lld %s cache%s, %d threads: "
            "%.3f ms, %.1f GB/s of K+V; read bandwidth %.1f GB/s; ratio %.2f; the cache's own storage read at %.1f "
            "GB/s; ratio %.2f\n",
            impl == ATTN_IMPL_REF ? "ref" : "fast", math_names[math], kern, (long long)B, (long long)H, (long long)Hkv,
            (long long)T, ragged ? " (ragged)" : "", (long long)Sq, tree ? " tree" : "", (long long)D, dtn,
            page ? " (paged)" : "", nthreads, r.ta * 1e3, gbps, rd_gbps, r.ratio, own_gbps, ro.ratio);
    attn_kv_cache_free(c.cache);
    free(kk), free(vv), free(q), free(o), free(n), free(len), free(buf), free(tm);
    return 0;
}

/* ---- MLA decode: one latent head per token (DeepSeek; FlashMLA) ------------ */

/* B sequences of T latent rows of D values (576: 512 latent + 64 rope) in
 * caller pages without V pages (V = each row's first Dv), H query heads over
 * the one latent head: GB/s of the rows against the read of as many bytes,
 * alternating rounds */
static int bench_mla(int64_t B, int64_t H, int64_t T, int64_t D, int64_t Dv, int64_t ps, attn_dtype dt, attn_math math,
                     double min_time, int json) {
    if (Dv > D) {
        cli_error("bench --mla: --v-head-dim must be at most --head-dim, got --v-head-dim %lld and --head-dim %lld",
                  (long long)Dv, (long long)D);
        return EXIT_USAGE;
    }
    if (ps < 1) {
        cli_error("bench --mla: --page-size must be at least 1, got %lld", (long long)ps);
        return EXIT_USAGE;
    }
    int64_t np = (T + ps - 1) / ps, P = B * np, chunk = ps < 256 ? 256 / ps * ps : ps;
    static const float one[1] = {1.0f};
    pg_ctx c;
    memset(&c, 0, sizeof c);
    c.kv = (attn_paged_kv){.dtype = dt, .num_pages = P, .page_size = ps, .Hkv = 1, .D = D, .Dv = Dv};
    if (attn_storage_of(dt)->params == ATTN_ST_SCALED) c.kv.k_scale = one, c.kv.k_scale_len = 1;
    c.kv.k_pages = attn_big_alloc((size_t)P * attn_storage_bytes(dt, ps * D));
    if (attn_storage_of(dt)->params == ATTN_ST_ROWPAR) c.kv.k_params = attn_big_alloc((size_t)(P * ps) * 8);
    int32_t *ip = malloc((size_t)(B + 1) * 4), *ind = malloc((size_t)P * 4), *last = malloc((size_t)B * 4);
    float *rows = cli_frand_buf((size_t)(chunk * D), 5), *q = cli_frand_buf((size_t)(B * H * D), 4);
    int64_t *slots = malloc((size_t)chunk * sizeof *slots);
    size_t bytes = (size_t)(B * T) * kv_row_bytes(dt, D);
    void *buf = attn_readbw_buf(bytes);
    rd_ctx rd = rd_of((const void *const *)&buf, &bytes, 1);
    c.o = (attn_view){cli_frand_buf((size_t)(B * H * Dv), 7), H * Dv, Dv, Dv};
    if (!c.kv.k_pages || !ip || !ind || !last || !rows || !q || !slots || !buf || !c.o.data ||
        (attn_storage_of(dt)->params == ATTN_ST_ROWPAR && !c.kv.k_params)) {
        cli_error("bench: out of memory");
        return 1;
    }
    ip[0] = 0;
    for (int64_t b = 0; b < B; b++) {
        for (int64_t i = 0; i < np; i++) ind[b * np + i] = (int32_t)(b * np + i);
        ip[b + 1] = (int32_t)((b + 1) * np), last[b] = (int32_t)(T - (np - 1) * ps);
    }
    c.kv.kv_indptr = ip, c.kv.kv_indices = ind, c.kv.kv_last_page_len = last;
    for (int64_t t0 = 0; t0 < P * ps; t0 += chunk) { /* every slot written (the last pages' tails too) */
        int64_t n = P * ps - t0 < chunk ? P * ps - t0 : chunk;
        for (int64_t t = 0; t < n; t++) slots[t] = t0 + t;
        attn_status st = attn_paged_append(&c.kv, n, rows, NULL, slots);
        if (st) {
            cli_error("bench: %s", cli_status(st));
            return 1;
        }
    }
    attn_sdpa_desc_init(&c.d, B, H, 1, 0, D, Dv);
    c.d.Hkv = 1, c.d.math = math, c.d.causal = ATTN_CAUSAL_BOTTOM_RIGHT, c.d.scale = 0.1352f; /* the caller's scale */
    c.q = (attn_view){q, H * D, D, D};
    bench_result r, ro;
    rd_ctx own = pages_rd(&c.kv); /* the pages themselves, compared per byte */
    if (time_pair(run_paged, &c, (double)bytes, run_read, &rd, (double)bytes, min_time, &r) ||
        time_pair(run_paged, &c, (double)bytes, run_read, &own, (double)own.total, min_time, &ro))
        return 1;
    double gbps = (double)bytes / r.ta * 1e-9, rd_gbps = (double)bytes / r.tb * 1e-9,
           own_gbps = (double)own.total / ro.tb * 1e-9;
    double gflops = 2.0 * (double)(B * H * T) * (double)(D + Dv) / r.ta * 1e-9; /* Q K^T and P V */
    if (json)
        printf("{\"op\": \"decode-mla\", \"math\": \"%s\", \"kernels\": \"%s\", \"B\": %lld, \"H\": %lld, \"T\": %lld, "
               "\"D\": %lld, \"Dv\": %lld, \"kv_dtype\": \"%s\", \"page_size\": %lld, \"threads\": %d, \"reps\": %d, "
               "\"ms\": %.4f, \"bytes\": %zu, \"gbps\": %.2f, \"gflops\": %.1f, \"read_gbps\": %.2f, "
               "\"ratio_to_read\": %.3f, \"own_read_gbps\": %.2f, \"ratio_to_own_read\": %.3f}\n",
               math_names[math], attn_kernel_name(), (long long)B, (long long)H, (long long)T, (long long)D,
               (long long)Dv, kv_name(dt), (long long)ps, omp_get_max_threads(), r.reps, r.ta * 1e3, bytes, gbps,
               gflops, rd_gbps, r.ratio, own_gbps, ro.ratio);
    else
        printf("MLA decode B=%lld Hq=%lld T=%lld latent %lld (V %lld) %s, pages of %lld, %d threads: %.3f ms, %.1f "
               "GB/s (%.1f GFLOP/s); read bandwidth %.1f GB/s; ratio %.2f; the pages' own read %.1f GB/s; ratio %.2f\n",
               (long long)B, (long long)H, (long long)T, (long long)D, (long long)Dv, kv_name(dt), (long long)ps,
               omp_get_max_threads(), r.ta * 1e3, gbps, gflops, rd_gbps, r.ratio, own_gbps, ro.ratio);
    free(c.kv.k_pages), free(c.kv.k_params), free(ip), free(ind), free(last), free(rows), free(q), free(slots);
    free(buf), free(c.o.data);
    return 0;
}

/* ---- cascade: B sequences sharing a prefix, one decode step ---------------- */

/* Caller-owned pages (attn_paged_kv) holding a prefix of T tokens and B
 * suffixes of U tokens; three page tables over them: every sequence's whole
 * cache (the prefix pages, then its own), the prefix alone, the suffixes. */
typedef struct casc_ctx {
    attn_paged_kv full, prefix, suffix;
    attn_sdpa_desc d_full, d_prefix, d_suffix;
    attn_view q, q_prefix, o_full, o_prefix, o_suffix;
    float *lse_prefix, *lse_suffix, *lse_t, *o_merged, *lse_merged;
    int64_t B, H, D;
} casc_ctx;

/* each sequence over its whole cache: the prefix read B times */
static int run_full(void *v) {
    casc_ctx *c = v;
    attn_status st = attn_paged_attention(&c->d_full, c->q, &c->full, NULL, c->o_full, NULL);
    if (st != ATTN_OK) cli_error("bench: %s", cli_status(st));
    return st != ATTN_OK;
}

/* the prefix once for every sequence's query rows (B rows a head, no causal
 * rule: every row comes after the prefix), the suffixes each alone, merged */
static int run_cascade(void *v) {
    casc_ctx *c = v;
    attn_status st = attn_paged_attention(&c->d_prefix, c->q_prefix, &c->prefix, NULL, c->o_prefix, c->lse_prefix);
    if (!st) st = attn_paged_attention(&c->d_suffix, c->q, &c->suffix, NULL, c->o_suffix, c->lse_suffix);
    for (int64_t b = 0; !st && b < c->B; b++) /* the prefix's lse (H, B) as (B, H) */
        for (int64_t h = 0; h < c->H; h++) c->lse_t[b * c->H + h] = c->lse_prefix[h * c->B + b];
    if (!st)
        st = attn_merge_states(c->B * c->H, c->D, c->o_prefix.data, c->lse_t, c->o_suffix.data, c->lse_suffix,
                               c->o_merged, c->lse_merged);
    if (st != ATTN_OK) cli_error("bench: %s", cli_status(st));
    return st != ATTN_OK;
}

static int bench_cascade(int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t U, int64_t D, int64_t ps, attn_dtype dt,
                         attn_math math, double min_time, int json) {
    if (T < 1 || ps < 1 || T % ps) {
        cli_error("bench --cascade: --kv-seq (the shared prefix) must be a positive multiple of --page-size, got "
                  "--kv-seq %lld and --page-size %lld",
                  (long long)T, (long long)ps);
        return EXIT_USAGE;
    }
    if (U < 1) {
        cli_error("bench --cascade: --suffix must be at least 1, got %lld", (long long)U);
        return EXIT_USAGE;
    }
    int64_t np = T / ps, ns = (U + ps - 1) / ps, P = np + B * ns;
    casc_ctx c;
    memset(&c, 0, sizeof c);
    c.B = B, c.H = H, c.D = D;
    size_t page_bytes = attn_storage_bytes(dt, ps * Hkv * D);
    void *kp = malloc((size_t)P * page_bytes), *vp = malloc((size_t)P * page_bytes);
    int32_t *ind_full = malloc((size_t)(B * (np + ns)) * sizeof(int32_t)), *ip_full = malloc((size_t)(B + 1) * 4);
    int32_t *ind_pre = malloc((size_t)np * 4), *ip_suf = malloc((size_t)(B + 1) * 4),
            *ind_suf = malloc((size_t)(B * ns) * 4);
    int32_t *last = malloc((size_t)B * 4), ip_pre[2] = {0, (int32_t)np}, last_pre = (int32_t)ps;
    size_t nq = (size_t)(B * H * D);
    float *q = cli_frand_buf(nq, 4), *of = malloc(nq * 4), *opre = malloc(nq * 4), *osuf = malloc(nq * 4);
    c.lse_prefix = malloc((size_t)(B * H) * 4), c.lse_suffix = malloc((size_t)(B * H) * 4);
    c.lse_t = malloc((size_t)(B * H) * 4), c.o_merged = malloc(nq * 4), c.lse_merged = malloc((size_t)(B * H) * 4);
    float *rows = cli_frand_buf((size_t)(ps * Hkv * D), 5);
    int64_t *slots = malloc((size_t)ps * sizeof *slots);
    if (!kp || !vp || !ind_full || !ip_full || !ind_pre || !ip_suf || !ind_suf || !last || !q || !of || !opre ||
        !osuf || !c.lse_prefix || !c.lse_suffix || !c.lse_t || !c.o_merged || !c.lse_merged || !rows || !slots) {
        cli_error("bench: out of memory");
        return 1;
    }
    attn_paged_kv kv = {.dtype = dt,
                        .layout = ATTN_KV_NHD,
                        .num_pages = P,
                        .page_size = ps,
                        .Hkv = Hkv,
                        .D = D,
                        .Dv = D,
                        .k_pages = kp,
                        .v_pages = vp};
    for (int64_t p = 0; p < P; p++) { /* every page's rows: random, a different rotation each page */
        for (int64_t t = 0; t < ps; t++) slots[t] = p * ps + t;
        for (size_t i = 0; i < (size_t)(ps * Hkv * D); i++)
            rows[i] = rows[(i + 7 * (size_t)p + 1) % (size_t)(ps * Hkv * D)] * 0.999f;
        attn_status st = attn_paged_append(&kv, ps, rows, rows, slots);
        if (st) {
            cli_error("bench: %s", cli_status(st));
            return 1;
        }
    }
    for (int64_t i = 0; i < np; i++) ind_pre[i] = (int32_t)i;
    ip_full[0] = ip_suf[0] = 0;
    for (int64_t b = 0; b < B; b++) {
        for (int64_t i = 0; i < np; i++) ind_full[b * (np + ns) + i] = (int32_t)i;
        for (int64_t i = 0; i < ns; i++)
            ind_full[b * (np + ns) + np + i] = ind_suf[b * ns + i] = (int32_t)(np + b * ns + i);
        ip_full[b + 1] = (int32_t)((b + 1) * (np + ns)), ip_suf[b + 1] = (int32_t)((b + 1) * ns);
        last[b] = (int32_t)(U - (ns - 1) * ps);
    }
    c.full = c.prefix = c.suffix = kv;
    c.full.kv_indptr = ip_full, c.full.kv_indices = ind_full, c.full.kv_last_page_len = last;
    c.prefix.kv_indptr = ip_pre, c.prefix.kv_indices = ind_pre, c.prefix.kv_last_page_len = &last_pre;
    c.suffix.kv_indptr = ip_suf, c.suffix.kv_indices = ind_suf, c.suffix.kv_last_page_len = last;
    attn_sdpa_desc_init(&c.d_full, B, H, 1, 0, D, D);
    c.d_full.Hkv = Hkv, c.d_full.causal = ATTN_CAUSAL_BOTTOM_RIGHT, c.d_full.math = math;
    c.d_suffix = c.d_full;
    attn_sdpa_desc_init(&c.d_prefix, 1, H, B, 0, D, D);
    c.d_prefix.Hkv = Hkv, c.d_prefix.math = math; /* every query row after the whole prefix: no causal rule */
    c.q = (attn_view){q, H * D, D, D}, c.q_prefix = (attn_view){q, 0, D, H * D};
    c.o_full = (attn_view){of, H * D, D, D}, c.o_prefix = (attn_view){opre, 0, D, H * D};
    c.o_suffix = (attn_view){osuf, H * D, D, D};
    bench_result r;
    if (time_pair(run_full, &c, 1.0, run_cascade, &c, 1.0, min_time, &r)) return 1;
    double diff = 0; /* the two answers (the last runs' outputs) */
    for (size_t i = 0; i < nq; i++) diff = fmax(diff, fabs((double)of[i] - c.o_merged[i]));
    double speedup = r.ratio > 0 ? 1.0 / r.ratio : 0.0; /* the median of the per-round ratios t_full / t_cascade */
    const char *dtn = kv_name(dt);
    if (json)
        printf("{\"op\": \"cascade\", \"math\": \"%s\", \"kernels\": \"%s\", \"B\": %lld, \"H\": %lld, \"Hkv\": %lld, "
               "\"T\": %lld, \"suffix\": %lld, \"D\": %lld, \"kv_dtype\": \"%s\", \"page_size\": %lld, "
               "\"threads\": %d, \"reps\": %d, \"ms_full\": %.4f, \"ms_cascade\": %.4f, \"speedup\": %.3f, "
               "\"max_abs_diff\": %.3g}\n",
               math_names[math], attn_kernel_name(), (long long)B, (long long)H, (long long)Hkv, (long long)T,
               (long long)U, (long long)D, dtn, (long long)ps, omp_get_max_threads(), r.reps, r.ta * 1e3, r.tb * 1e3,
               speedup, diff);
    else
        printf("cascade decode B=%lld Hq=%lld Hkv=%lld prefix %lld + suffix %lld D=%lld %s, pages of %lld, %d "
               "threads: each sequence whole %.3f ms, cascade %.3f ms, speedup %.2fx (median of the rounds' "
               "ratios), max |diff| %.3g\n",
               (long long)B, (long long)H, (long long)Hkv, (long long)T, (long long)U, (long long)D, dtn, (long long)ps,
               omp_get_max_threads(), r.ta * 1e3, r.tb * 1e3, speedup, diff);
    free(kp), free(vp), free(ind_full), free(ip_full), free(ind_pre), free(ip_suf), free(ind_suf), free(last), free(q);
    free(of), free(opre), free(osuf), free(c.lse_prefix), free(c.lse_suffix), free(c.lse_t), free(c.o_merged);
    free(c.lse_merged), free(rows), free(slots);
    return 0;
}

typedef struct bench_opts {
    int64_t B, H, S, Sk, D, threads, sgemm_n, Hkv, page, window, chunk, docs, varlen, suffix;
    int causal, backward, json, decode, alibi, ring, ring_layout, blas_keep, sinks, tree, ragged, cascade, caller, mla;
    int shard, no_single, pass, formats, flex;
    int64_t v_head_dim;
    int64_t queries;
    double softcap, min_time, p_drop;
    int kv_dtype, qkv_dtype, impl, math; /* attn_dtype, attn_dtype, attn_impl, attn_math */
} bench_opts;

static const int dtypes[] = {ATTN_DTYPE_F32,     ATTN_DTYPE_F16,      ATTN_DTYPE_BF16,
                             ATTN_DTYPE_Q8_0,    ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_FP8_E5M2,
                             ATTN_DTYPE_KV_INT8, ATTN_DTYPE_KV_INT4,  ATTN_DTYPE_Q4_0};
static const int impls[] = {ATTN_IMPL_FAST, ATTN_IMPL_REF, ATTN_IMPL_AUTO};

/* the name --kv-dtype gives dt (its token of KV_NAMES, at dt's place in dtypes[]) */
static const char *kv_name(attn_dtype dt) {
    static char name[16];
    const char *p = KV_NAMES;
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++, p = strchr(p, '|') + 1) {
        if (dtypes[i] != (int)dt) {
            if (!strchr(p, '|')) break;
            continue;
        }
        size_t n = strchr(p, '|') ? (size_t)(strchr(p, '|') - p) : strlen(p);
        memcpy(name, p, n), name[n] = 0;
        return name;
    }
    return "?";
}
#define O(f) offsetof(bench_opts, f)
static const cli_opt bench_table[] = {
    {"--batch", OPT_I64, O(B), 0, 1, 1 << 24, NULL, NULL, "B: sequences"},
    {"--heads", OPT_I64, O(H), 0, 1, 1 << 24, NULL, NULL, "H: query heads"},
    {"--kv-heads", OPT_I64, O(Hkv), 0, 1, 1 << 24, NULL, NULL, "Hkv: key/value heads (GQA; default H)"},
    {"--seq", OPT_I64, O(S), 0, 1, 1 << 24, NULL, NULL, "Sq: query length (default 2048)"},
    {"--kv-seq", OPT_I64, O(Sk), 0, 1, 1 << 24, NULL, NULL,
     "Sk: key length (default Sq); with --decode the cache length"},
    {"--head-dim", OPT_I64, O(D), 0, 1, 4096, NULL, NULL, "D: head size (default 64)"},
    {"--causal", OPT_FLAG, O(causal), 0, 0, 0, NULL, NULL, "causal mask (top-left)"},
    {"--window", OPT_I64, O(window), 0, 0, 1 << 24, NULL, NULL,
     "sliding window: keys this far left (and right unless causal)"},
    {"--softcap", OPT_F64, O(softcap), 0, 0, 1e6, NULL, NULL, "score softcap (0 = off)"},
    {"--alibi", OPT_FLAG, O(alibi), 0, 0, 0, NULL, NULL, "ALiBi slopes 2^(-8h/H)"},
    {"--sinks", OPT_FLAG, O(sinks), 0, 0, 0, NULL, NULL,
     "attention sinks (logit 0.5 per head; backward writes dsinks)"},
    {"--documents", OPT_I64, O(docs), 0, 0, 1 << 20, NULL, NULL,
     "a dense bool mask of N equal documents (block diagonal, (1, 1, Sq, Sk) broadcast)"},
    {"--varlen", OPT_I64, O(varlen), 0, 0, 4096, NULL, NULL,
     "N packed sequences of Sq / N rows each in one B = 1 call (cu_seqlens)"},
    {"--attention-chunk", OPT_I64, O(chunk), 0, 0, 1 << 24, NULL, NULL, "chunked local attention of C positions"},
    {"--dropout", OPT_PROB, O(p_drop), 0, 0, 0, NULL, NULL, "attention dropout (MKL stream)"},
    {"--dtype", OPT_CHOICE, O(qkv_dtype), 0, 0, 0, "f32|f16|bf16", dtypes, "element type of q, k and v"},
    {"--backward", OPT_FLAG, O(backward), 0, 0, 0, NULL, NULL, "time the backward (FLOPs 2.5x the forward's)"},
    {"--impl", OPT_CHOICE, O(impl), 0, 0, 0, "fast|ref|auto", impls, "SDPA path"},
    {"--math", OPT_CHOICE, O(math), 0, 0, 0, "strict|data|bf16", NULL,
     "products' arithmetic (attn_math): float32, the data's type, or bf16"},
    {"--decode", OPT_FLAG, O(decode), 0, 0, 0, NULL, NULL,
     "one query per head against a KV cache of --kv-seq tokens; GB/s"},
    {"--kv-dtype", OPT_CHOICE, O(kv_dtype), 0, 0, 0, KV_NAMES, dtypes, "--decode: the cache's storage"},
    {"--queries", OPT_I64, O(queries), 0, 1, 16, NULL, NULL, "--decode: query rows per head (default 1)"},
    {"--tree", OPT_FLAG, O(tree), 0, 0, 0, NULL, NULL,
     "--decode: the queries are a binary tree of draft tokens (mask)"},
    {"--ragged", OPT_FLAG, O(ragged), 0, 0, 0, NULL, NULL,
     "--decode: sequences of T/2 .. T tokens (appended together, so their pages interleave)"},
    {"--page-size", OPT_I64, O(page), 0, 0, 1 << 24, NULL, NULL, "--decode: tokens per page (0 = contiguous)"},
    {"--caller-pages", OPT_FLAG, O(caller), 0, 0, 0, NULL, NULL,
     "--decode: the same rows in caller-owned pages (attn_paged_attention), timed against the cache"},
    {"--mla", OPT_FLAG, O(mla), 0, 0, 0, NULL, NULL,
     "--decode: MLA's latent cache (one head of --head-dim values a token, V its first --v-head-dim; caller pages)"},
    {"--v-head-dim", OPT_I64, O(v_head_dim), 0, 1, 4096, NULL, NULL, "--mla: V's values of each latent row (512)"},
    {"--cascade", OPT_FLAG, O(cascade), 0, 0, 0, NULL, NULL,
     "--decode: B sequences sharing a --kv-seq prefix, each with its own --suffix: the prefix attended once for all, "
     "merged (speedup over attending each sequence's whole cache)"},
    {"--suffix", OPT_I64, O(suffix), 0, 0, 1 << 24, NULL, NULL, "--cascade: each sequence's own tokens (default 256)"},
    {"--threads", OPT_I64, O(threads), 0, 1, 1024, NULL, NULL, "OpenMP and BLAS threads"},
    {"--sgemm-n", OPT_I64, O(sgemm_n), 0, 0, 8192, NULL, NULL, "N of the same-run sgemm reference (0 = none)"},
    {"--blas-env", OPT_CHOICE, O(blas_keep), 0, 0, 0, "clear|keep", NULL,
     "clear: re-run without OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE for the sgemm reference"},
    {"--min-time", OPT_F64, O(min_time), 0, 0, 600, NULL, NULL, "seconds to time (alternating rounds)"},
    {"--json", OPT_FLAG, O(json), 0, 0, 0, NULL, NULL, "one JSON line"},
    {"--ring", OPT_FLAG, O(ring), 0, 0, 0, NULL, NULL, "ring attention over the MPI ranks"},
    {"--formats", OPT_FLAG, O(formats), 0, 0, 0, NULL, NULL,
     "--decode: one step over the same rows in every KV format, alternating rounds with the read (a table)"},
    {"--flex", OPT_FLAG, O(flex), 0, 0, 0, NULL, NULL,
     "programmable attention: document / sliding-window masks vs the dense forward, mask_mod and score_mod vs the "
     "built-in causal, ALiBi and softcap (B = 1; --heads, --seq, --head-dim)"},
    {"--pass", OPT_FLAG, O(pass), 0, 0, 0, NULL, NULL,
     "the block products' softmax pass alone (max, exp2, bf16 P): ns and core cycles a score"},
    {"--shard", OPT_FLAG, O(shard), 0, 0, 0, NULL, NULL,
     "--decode under mpirun: the KV cache sharded over the ranks, --kv-seq tokens per rank (attn_shard_decode)"},
    {"--no-single", OPT_FLAG, O(no_single), 0, 0, 0, NULL, NULL,
     "--shard: skip the one-process decode of the whole cache (its memory)"},
    {"--ring-layout", OPT_CHOICE, O(ring_layout), 0, 0, 0, "contiguous|zigzag", NULL, "--ring: sequence sharding"},
};
#undef O

static int bench_parse(int argc, char **argv, bench_opts *o) {
    memset(o, 0, sizeof *o);
    o->B = 1, o->H = 8, o->S = 2048, o->D = 64, o->sgemm_n = 2048, o->window = -1, o->ring_layout = -1;
    o->kv_dtype = o->qkv_dtype = ATTN_DTYPE_F32, o->impl = ATTN_IMPL_FAST, o->min_time = 1.0, o->queries = 1;
    o->suffix = 256;
    int r = cli_parse_opts("bench", "[options]", bench_table, (int)(sizeof bench_table / sizeof bench_table[0]), argc,
                           argv, o);
    if (r <= 0) return r;
    if (o->qkv_dtype == ATTN_DTYPE_Q8_0) {
        cli_error("--dtype must be f32, f16 or bf16 (the element type of q, k and v)");
        return 0;
    }
    if (!o->Sk) o->Sk = o->S;
    if (!o->Hkv) o->Hkv = o->H;
    if (o->H % o->Hkv) {
        cli_error("--heads must be a multiple of --kv-heads (every bench mode), got --heads %lld and --kv-heads %lld",
                  (long long)o->H, (long long)o->Hkv);
        return 0;
    }
    return 1;
}

/* The class of an OpenBLAS core name: 3 AVX-512, 2 AVX2, 1 AVX, 0 older or
 * unknown; and the best core this CPU's features run (NULL off x86 or below
 * AVX2). */
static int blas_core_class(const char *c) {
    static const char *const cls[][4] = {{"SkylakeX", "Cooperlake", "SapphireRapids", NULL},
                                         {"Haswell", "Zen", "Excavator", NULL},
                                         {"Sandybridge", "Bulldozer", "Piledriver", "Steamroller"}};
    for (int k = 0; c && k < 3; k++)
        for (int i = 0; i < 4 && cls[k][i]; i++)
            if (!strcmp(c, cls[k][i])) return 3 - k;
    return 0;
}

static const char *blas_best_core(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl"))
        return __builtin_cpu_supports("avx512bf16") ? "Cooperlake" : "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
    return NULL;
}

/* The sgemm reference runs with the BLAS at the machine's full ISA: an
 * environment that pins OpenBLAS lower (OPENBLAS_CORETYPE, OPENBLAS_L2_SIZE:
 * this project's test environment does) would make every ratio flattering.
 * Unless --blas-env keep, re-run this command without them (OpenBLAS reads
 * them once, when it loads); the SDPA kernels do not depend on them. Where
 * OpenBLAS's own detection does not know the CPU and falls below AVX2
 * (0.3.21 takes an Emerald Rapids Xeon for a Prescott: a quarter of its
 * sgemm), re-run once more with OPENBLAS_CORETYPE set to the best core the
 * CPU's features run. Fills what was pinned, what the re-runs cleared and
 * raised, and a note for the report. */
static void blas_env(const bench_opts *o, char **argv, char *pinned, size_t pl, const char **was, const char **raised,
                     char *note, size_t nl) {
    pinned[0] = 0;
    *raised = getenv("ATTN_BENCH_BLAS_RAISED"); /* set by the raising re-run: what OpenBLAS detected */
    for (int e = 0; e < 2 && !*raised; e++) {
        const char *name = e ? "OPENBLAS_L2_SIZE" : "OPENBLAS_CORETYPE", *val = getenv(name);
        if (val && *val)
            snprintf(pinned + strlen(pinned), pl - strlen(pinned), "%s%s=%s", *pinned ? " " : "", name, val);
    }
    *was = getenv("ATTN_BENCH_BLAS_WAS"); /* set by the re-run: what the caller's environment pinned */
    const char *core = openblas_get_corename(), *best = blas_best_core();
    if (o->sgemm_n > 0 && *pinned && !o->blas_keep && !*was) {
        setenv("ATTN_BENCH_BLAS_WAS", pinned, 1);
        unsetenv("OPENBLAS_CORETYPE"), unsetenv("OPENBLAS_L2_SIZE");
        fflush(stdout);
        execv("/proc/self/exe", argv - 1); /* argv - 1: the program's own argv[0] ("attn") */
        cli_error("bench: cannot re-run without %s: the sgemm reference below is pinned", pinned);
    } else if (o->sgemm_n > 0 && !*pinned && !o->blas_keep && !*raised && core && best && blas_core_class(core) < 2 &&
               blas_core_class(core) < blas_core_class(best)) {
        setenv("ATTN_BENCH_BLAS_RAISED", core, 1), setenv("OPENBLAS_CORETYPE", best, 1);
        fflush(stdout);
        execv("/proc/self/exe", argv - 1);
        cli_error("bench: cannot re-run with OPENBLAS_CORETYPE=%s: OpenBLAS detects this CPU as %s", best, core);
    }
    char raise[128] = "";
    if (*raised) snprintf(raise, sizeof raise, "; it detects this CPU as %s, set to the best core it runs", *raised);
    if (*pinned)
        snprintf(note, nl, "OpenBLAS %s, PINNED by %s: ratios are against a restricted BLAS", core ? core : "?",
                 pinned);
    else if (*was && **was)
        snprintf(note, nl, "OpenBLAS %s, unrestricted (re-run without %s)%s", core ? core : "?", *was, raise);
    else
        snprintf(note, nl, "OpenBLAS %s%s", core ? core : "?", raise);
}

/* FLOPs of the visible (query, key) pairs: the full S x Sk, halved when
 * causal; a window or chunks count only the keys they show */
static double prefill_flops(const bench_opts *o) {
    double pairs = (double)o->S * (double)o->Sk * (o->causal ? 0.5 : 1.0);
    if (o->window >= 0 || o->chunk > 0 || o->docs > 0 || o->varlen > 0) {
        pairs = 0.0;
        for (int64_t i = 0; i < o->S; i++) { /* top-left: query i is position i */
            int64_t lo = 0, hi = o->causal ? i + 1 : o->Sk;
            if (o->window >= 0) lo = i - o->window > lo ? i - o->window : lo;
            if (o->window >= 0 && !o->causal) hi = i + o->window + 1 < hi ? i + o->window + 1 : hi;
            if (o->chunk > 0) lo = i / o->chunk * o->chunk > lo ? i / o->chunk * o->chunk : lo;
            if (o->chunk > 0) hi = (i / o->chunk + 1) * o->chunk < hi ? (i / o->chunk + 1) * o->chunk : hi;
            if (o->varlen > 0) { /* equal packed sequences, each causal top-left within itself */
                int64_t L = o->S / o->varlen, s0 = i / L * L;
                lo = s0, hi = o->causal ? i + 1 : s0 + L;
            }
            if (o->docs > 0) { /* document i * docs / S: keys j with j * docs / Sk the same */
                int64_t doc = i * o->docs / o->S, a = (doc * o->Sk + o->docs - 1) / o->docs,
                        e = ((doc + 1) * o->Sk + o->docs - 1) / o->docs;
                lo = a > lo ? a : lo, hi = e < hi ? e : hi;
            }
            pairs += (double)(hi > lo ? hi - lo : 0);
        }
    }
    return 4.0 * (double)o->B * (double)o->H * pairs * (double)o->D * (o->backward ? 2.5 : 1.0);
}

/* the problem's tensors (16-bit inputs converted in place: the patterns fill
 * the front half) and descriptor; 0 when out of memory */
static int prefill_setup(const bench_opts *o, sd_ctx *c, float **bufs, float *slopes, attn_dropout *drop) {
    int64_t B = o->B, H = o->H, S = o->S, Sk = o->Sk, D = o->D, Hkv = o->Hkv;
    size_t nq = (size_t)(B * H * S * D), nk = (size_t)(B * Hkv * Sk * D), nl = (size_t)(B * H * S);
    memset(c, 0, sizeof *c);
    attn_sdpa_desc_init(&c->d, B, H, S, Sk, D, D);
    c->d.Hkv = Hkv;
    c->d.causal = o->causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
    c->d.impl = (attn_impl)o->impl, c->d.math = (attn_math)o->math;
    if (o->window >= 0) c->d.window = 1, c->d.window_left = o->window, c->d.window_right = o->causal ? 0 : o->window;
    c->d.softcap = (float)o->softcap;
    for (int64_t h = 0; h < H; h++) slopes[h] = powf(2.0f, -8.0f * (float)(h + 1) / (float)H);
    if (o->alibi) c->d.alibi_slopes = slopes;
    c->d.attention_chunk = o->chunk;
    if (o->varlen > 0) { /* bufs[8]: the offsets of varlen equal sequences (Sq = Sk a multiple of N) */
        int32_t *cu = (int32_t *)(void *)(bufs[8] = malloc((size_t)(o->varlen + 1) * 4));
        if (!cu || B != 1 || S != Sk || S % o->varlen) return 0;
        for (int64_t s = 0; s <= o->varlen; s++) cu[s] = (int32_t)(s * (S / o->varlen));
        c->d.cu_seqlens_q = c->d.cu_seqlens_k = cu, c->d.nseq = o->varlen;
    }
    if (o->docs > 0) { /* bufs[8]: the documents' block-diagonal mask, one byte a pair */
        uint8_t *m = (uint8_t *)(void *)(bufs[8] = malloc((size_t)(S * Sk) + 4));
        if (!m) return 0;
        for (int64_t i = 0; i < S; i++)
            for (int64_t j = 0; j < Sk; j++) m[i * Sk + j] = i * o->docs / S == j * o->docs / Sk;
        c->d.attn_mask = m, c->d.attn_mask_strides[2] = Sk, c->d.attn_mask_strides[3] = 1;
    }
    if (o->sinks) c->d.sinks = slopes + H, c->d.dsinks = slopes + 2 * H; /* sinks 0.5 (set below), dsinks */
    for (int64_t h = 0; h < H; h++) slopes[H + h] = 0.5f;
    memset(drop, 0, sizeof *drop);
    if (o->p_drop > 0.0) { /* the MKL stream (random access, generated inside the tiles) */
        attn_generator gen;
        attn_generator_seed(&gen, 0);
        if (attn_dropout_begin(&gen, o->p_drop, (uint64_t)nl * (uint64_t)Sk, drop) != ATTN_OK) return 0;
        c->d.dropout = drop;
    }
    size_t ns[8] = {nq, nk, nk, nq, nq, nq, nk, nk};
    for (int t = 0; t < 8; t++) bufs[t] = t < 4 || o->backward ? cli_frand_buf(ns[t], (uint32_t)(4 + t)) : NULL;
    c->lse = malloc(nl * sizeof(float));
    for (int t = 0; t < 8; t++)
        if (!bufs[t] && (t < 4 || o->backward)) return 0;
    if (!c->lse) return 0;
    if (o->qkv_dtype != ATTN_DTYPE_F32) {
        for (int t = 0; t < 3; t++) {
            uint16_t *u = (uint16_t *)(void *)bufs[t];
            for (size_t i = 0; i < ns[t]; i++)
                u[i] = o->qkv_dtype == ATTN_DTYPE_F16 ? attn_f32_to_f16(bufs[t][i]) : attn_f32_to_bf16(bufs[t][i]);
        }
        c->d.qkv_dtype = (attn_dtype)o->qkv_dtype;
    }
    attn_view *views[8] = {&c->q, &c->k, &c->v, &c->o, &c->go, &c->dq, &c->dk, &c->dv};
    for (int t = 0; t < 8; t++) {
        int64_t rows = t == 1 || t == 2 || t >= 6 ? Hkv * Sk : H * S, seq = t == 1 || t == 2 || t >= 6 ? Sk : S;
        *views[t] = (attn_view){bufs[t], rows * D, seq * D, D};
    }
    return 1;
}

static void prefill_report(const bench_opts *o, const bench_result *r, double flops, double sg_flops,
                           const char *pinned, const char *was, const char *raised, const char *blas_note,
                           const bench_result *rb, const bench_result *rf, const attn_mm_counts *mc) {
    char names[256];
    attn_mm_impls_seen(names, sizeof names);
    double t = r->ta, gflops = flops / t * 1e-9, sg_ms = r->tb * 1e3,
           sg_gflops = r->tb > 0 ? sg_flops / r->tb * 1e-9 : 0.0;
    const char *kern = o->impl == ATTN_IMPL_REF ? "ref" : attn_kernel_name(), *core = openblas_get_corename();
    const char *op = o->backward ? "backward" : "forward", *impl = o->impl == ATTN_IMPL_REF ? "ref" : "fast";
    int nthreads = omp_get_max_threads();
    if (o->json) {
        printf("{\"op\": \"%s\", \"impl\": \"%s\", \"math\": \"%s\", \"kernels\": \"%s\", \"B\": %lld, \"H\": %lld, "
               "\"Hkv\": %lld, "
               "\"window\": %lld, \"softcap\": %g, \"alibi\": %s, \"sinks\": %s, \"chunk\": %lld, \"Sq\": %lld, "
               "\"Sk\": %lld, \"D\": %lld, \"causal\": %s, \"threads\": %d, \"reps\": %d, \"ms\": %.4f, "
               "\"gflops\": %.2f, \"sgemm_n\": %lld, \"sgemm_ms\": %.4f, \"sgemm_gflops\": %.2f, "
               "\"ratio_to_sgemm\": %.3f, \"blas_core\": \"%s\", \"blas_detected\": \"%s\", \"blas_pinned\": \"%s\", "
               "\"blas_env_cleared\": \"%s\", ",
               op, impl, math_names[o->math], kern, (long long)o->B, (long long)o->H, (long long)o->Hkv,
               (long long)o->window, o->softcap, o->alibi ? "true" : "false", o->sinks ? "true" : "false",
               (long long)o->chunk, (long long)o->S, (long long)o->Sk, (long long)o->D, o->causal ? "true" : "false",
               nthreads, r->reps, t * 1e3, gflops, (long long)o->sgemm_n, sg_ms, sg_gflops, r->ratio, core ? core : "?",
               raised ? raised
               : core ? core
                      : "?",
               pinned, was ? was : "");
        if (rb) /* the bf16 line, timed in its own alternation with the SDPA */
            printf("\"bf16_gemm_gflops\": %.2f, \"ratio_to_bf16\": %.3f, ", sg_flops / rb->tb * 1e-9, rb->ratio);
        else
            printf("\"bf16_gemm_gflops\": null, \"ratio_to_bf16\": null, ");
        if (rf) /* oneDNN's float32 line (the products through oneDNN as float32) */
            printf("\"onednn_f32_gflops\": %.2f, \"ratio_to_onednn_f32\": %.3f, ", sg_flops / rf->tb * 1e-9, rf->ratio);
        /* oneDNN's calls and reorders in one call, and the implementations it picked */
        printf("\"onednn_runs\": %lld, \"onednn_packs\": %lld, \"onednn_impls\": \"%s\"}\n", (long long)mc->runs,
               (long long)mc->packs, names);
        return;
    }
    char feat[96] = "";
    int fl = 0;
    if (o->Hkv != o->H) fl += snprintf(feat + fl, sizeof feat - (size_t)fl, " Hkv=%lld", (long long)o->Hkv);
    if (o->window >= 0) fl += snprintf(feat + fl, sizeof feat - (size_t)fl, " window=%lld", (long long)o->window);
    if (o->softcap > 0) fl += snprintf(feat + fl, sizeof feat - (size_t)fl, " softcap=%g", o->softcap);
    if (o->alibi) fl += snprintf(feat + fl, sizeof feat - (size_t)fl, " alibi");
    if (o->sinks) fl += snprintf(feat + fl, sizeof feat - (size_t)fl, " sinks");
    if (o->chunk) fl += snprintf(feat + fl, sizeof feat - (size_t)fl, " chunk=%lld", (long long)o->chunk);
    if (o->docs) fl += snprintf(feat + fl, sizeof feat - (size_t)fl, " documents=%lld", (long long)o->docs);
    if (o->varlen) fl += snprintf(feat + fl, sizeof feat - (size_t)fl, " varlen=%lld", (long long)o->varlen);
    if (o->qkv_dtype != ATTN_DTYPE_F32)
        fl += snprintf(feat + fl, sizeof feat - (size_t)fl, " %s", o->qkv_dtype == ATTN_DTYPE_F16 ? "f16" : "bf16");
    if (o->math) snprintf(feat + fl, sizeof feat - (size_t)fl, " math=%s", math_names[o->math]);
    printf("sdpa %s %s (%s kernels) B=%lld H=%lld Sq=%lld Sk=%lld D=%lld%s%s, %d threads: %.3f ms, %.1f GFLOP/s", op,
           impl, kern, (long long)o->B, (long long)o->H, (long long)o->S, (long long)o->Sk, (long long)o->D,
           o->causal ? " causal" : "", feat, nthreads, t * 1e3, gflops);
    if (o->sgemm_n > 0)
        printf("; sgemm %lld^3: %.1f GFLOP/s (%s); ratio %.2f", (long long)o->sgemm_n, sg_gflops, blas_note, r->ratio);
    if (rb)
        printf("; oneDNN bf16 %lld^3: %.1f GFLOP/s, ratio %.2f", (long long)o->sgemm_n, sg_flops / rb->tb * 1e-9,
               rb->ratio);
    if (rf)
        printf("; oneDNN f32 %lld^3: %.1f GFLOP/s, ratio %.2f", (long long)o->sgemm_n, sg_flops / rf->tb * 1e-9,
               rf->ratio);
    if (mc->runs)
        printf("; oneDNN: %lld products, %lld reorders a call (%s)", (long long)mc->runs, (long long)mc->packs, names);
    printf("\n");
}

static int bench_ring(const bench_opts *o, int argc, char **argv) {
#ifdef ATTN_HAVE_MPI
    int rank, nr;
    if (!cli_ring_begin(&argc, &argv, &rank, &nr)) {
        cli_error("bench --ring: MPI did not start");
        return 1;
    }
    int rc =
        cli_ring_bench(o->B, o->H, o->Hkv, o->S, o->D, o->causal, o->ring_layout, o->backward, o->min_time, o->json);
    cli_ring_end();
    return rc;
#else
    (void)o, (void)argc, (void)argv;
    cli_error("bench --ring needs libattn built with MPI (install libopenmpi-dev and rebuild)");
    return EXIT_USAGE;
#endif
}

static int bench_shard(const bench_opts *o, int argc, char **argv) {
#ifdef ATTN_HAVE_MPI
    int rank, nr;
    if (!cli_ring_begin(&argc, &argv, &rank, &nr)) {
        cli_error("bench --shard: MPI did not start");
        return 1;
    }
    int rc = cli_shard_bench(o->B, o->H, o->Hkv, o->Sk, o->D, o->kv_dtype, o->page ? o->page : 64, !o->no_single,
                             o->min_time, o->json);
    cli_ring_end();
    return rc;
#else
    (void)o, (void)argc, (void)argv;
    cli_error("bench --shard needs libattn built with MPI (install libopenmpi-dev and rebuild)");
    return EXIT_USAGE;
#endif
}

int cmd_bench(int argc, char **argv) {
    bench_opts o;
    int pr = bench_parse(argc, argv, &o);
    if (pr <= 0) return pr < 0 ? 0 : EXIT_USAGE;
    if (o.threads > 0) cli_set_threads((int)o.threads);
    if (o.pass) return cli_bench_pass(o.min_time, o.json);
    if (o.flex) return cli_bench_flex(o.H, o.S, o.D, o.min_time, o.json);
    if (o.decode && o.shard) return bench_shard(&o, argc, argv);
    if (o.shard) {
        cli_error("bench: --shard goes with --decode");
        return EXIT_USAGE;
    }
    if (o.decode && o.mla)
        return bench_mla(o.B, o.H, o.Sk, o.D, o.v_head_dim ? o.v_head_dim : 512, o.page ? o.page : 64,
                         (attn_dtype)o.kv_dtype, (attn_math)o.math, o.min_time, o.json);
    if (o.mla || o.v_head_dim) {
        cli_error("bench: --mla and --v-head-dim go with --decode");
        return EXIT_USAGE;
    }
    if (o.decode && o.formats)
        return cli_bench_formats(o.B, o.H, o.Hkv, o.Sk, o.D, o.page, (attn_math)o.math, o.min_time, o.json);
    if (o.formats) {
        cli_error("bench: --formats goes with --decode");
        return EXIT_USAGE;
    }
    if (o.decode && o.cascade)
        return bench_cascade(o.B, o.H, o.Hkv, o.Sk, o.suffix, o.D, o.page ? o.page : 16, (attn_dtype)o.kv_dtype,
                             (attn_math)o.math, o.min_time, o.json);
    if (o.cascade) {
        cli_error("bench: --cascade goes with --decode");
        return EXIT_USAGE;
    }
    if (o.decode)
        return bench_decode(o.B, o.H, o.Hkv, o.Sk, o.D, o.page, (attn_dtype)o.kv_dtype, (attn_impl)o.impl,
                            (attn_math)o.math, o.min_time, o.json, o.queries,
                            (o.tree ? DEC_TREE : 0) | (o.ragged ? DEC_RAGGED : 0) | (o.caller ? DEC_CALLER : 0));
    if (o.ring) return bench_ring(&o, argc, argv);
    char pinned[256], blas_note[384];
    const char *was, *raised;
    blas_env(&o, argv, pinned, sizeof pinned, &was, &raised, blas_note, sizeof blas_note);
    /* sgemm reference point, same threads, timed in alternation with the
     * SDPA so both see the same machine (this VM's speed drifts) */
    sg_ctx sg = {(int)o.sgemm_n, NULL, NULL, NULL};
    mml_ctx bf = {0}, f1 = {0}; /* oneDNN's bf16 and float32 lines */
    bench_result rb, rf;
    float *bufs[9] = {0}, *slopes = malloc((size_t)(3 * o.H) * sizeof *slopes); /* ALiBi, sinks, dsinks */
    sd_ctx c;
    attn_dropout drop;
    int rc = 1;
    memset(&c, 0, sizeof c);
    if (o.sgemm_n > 0) {
        size_t n2 = (size_t)(o.sgemm_n * o.sgemm_n);
        sg.a = cli_frand_buf(n2, 1), sg.b = cli_frand_buf(n2, 2), sg.c = cli_frand_buf(n2, 3);
    }
    if (!slopes || (o.sgemm_n > 0 && (!sg.a || !sg.b || !sg.c)) || !prefill_setup(&o, &c, bufs, slopes, &drop)) {
        cli_error("bench: out of memory for B=%lld H=%lld S=%lld D=%lld", (long long)o.B, (long long)o.H,
                  (long long)o.S, (long long)o.D);
        goto done;
    }
    if (o.backward && run_sdpa(&c)) goto done; /* forward once: out and lse for backward */
    c.backward = o.backward;
    double flops = prefill_flops(&o), sg_flops = 2.0 * (double)o.sgemm_n * (double)o.sgemm_n * (double)o.sgemm_n;
    bench_result r;
    if (time_pair(run_sdpa, &c, flops, o.sgemm_n > 0 ? run_sgemm : NULL, &sg, sg_flops, o.min_time, &r)) goto done;
    /* the bf16 line where oneDNN multiplies bf16 here; the float32 line where the call's products go
     * through oneDNN as float32 (ATTN_PRODUCTS=onednn without bf16: the provider path's own yardstick) */
    int want_bf = o.sgemm_n > 0 && attn_mm_has(ATTN_DTYPE_BF16);
    int want_f1 =
        o.sgemm_n > 0 && o.math != ATTN_MATH_STRICT && attn_math_rounds((attn_dtype)o.qkv_dtype) &&
        attn_mm_type(o.qkv_dtype == ATTN_DTYPE_F32 ? ATTN_DTYPE_BF16 : (attn_dtype)o.qkv_dtype) == ATTN_DTYPE_F32;
    if ((want_bf && !mmline_make(&bf, ATTN_DTYPE_BF16, (int)o.sgemm_n, sg.a, sg.b)) ||
        (want_f1 && !mmline_make(&f1, ATTN_DTYPE_F32, (int)o.sgemm_n, sg.a, sg.b))) {
        cli_error("bench: out of memory for oneDNN's line");
        goto done;
    }
    if (want_bf && time_pair(run_sdpa, &c, flops, run_mmline, &bf, sg_flops, o.min_time, &rb)) goto done;
    if (want_f1 && time_pair(run_sdpa, &c, flops, run_mmline, &f1, sg_flops, o.min_time, &rf)) goto done;
    attn_mm_counts c0, c1; /* one more call: what its products cost in oneDNN calls and reorders */
    attn_mm_counts_get(&c0);
    if (run_sdpa(&c)) goto done;
    attn_mm_counts_get(&c1);
    c1.runs -= c0.runs, c1.packs -= c0.packs;
    prefill_report(&o, &r, flops, sg_flops, pinned, was, raised, blas_note, want_bf ? &rb : NULL, want_f1 ? &rf : NULL,
                   &c1);
    rc = 0;
done:
    for (int t = 0; t < 9; t++) free(bufs[t]);
    free(c.lse), free(slopes), free(sg.a), free(sg.b), free(sg.c);
    mmline_free(&bf), mmline_free(&f1);
    return rc;
}
