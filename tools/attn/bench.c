/* attn bench: time the core SDPA (forward, or backward) and OpenBLAS sgemm in
 * the same run. FLOPs: forward 4*B*H*Sq*Sk*D (halved when causal), backward
 * 2.5x that; sgemm 2*N^3. The SDPA and sgemm are timed in alternating rounds
 * (the machine's speed drifts); reported: the median time of each and the
 * median over rounds of the GFLOP/s ratio. */
#include "cli.h"
#ifdef ATTN_HAVE_MPI
#include "cli_ring.h"
#endif
#include "base/half.h"
#include "readbw.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

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
    if (st != ATTN_OK) cli_error("bench: %s", attn_status_string(st));
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
    double start = now(), slice = min_time / 4.0;
    do {
        double t1, rs[64], rg[64];
        int ks = 0, kg = 0;
        if (fa(a)) return 1;
        double t0 = now();
        do {
            t1 = now();
            if (fa(a)) return 1;
            rs[ks++] = now() - t1;
        } while (ks < 64 && (ks < 2 || now() - t0 < slice));
        if (fb) {
            fb(b);
            t0 = now();
            do {
                t1 = now();
                fb(b);
                rg[kg++] = now() - t1;
            } while (kg < 64 && (kg < 2 || now() - t0 < slice));
        }
        qsort(rs, (size_t)ks, sizeof rs[0], cmp_d);
        for (int i = 0; i < ks && ns < 256; i++) ts[ns++] = rs[i];
        if (kg) {
            qsort(rg, (size_t)kg, sizeof rg[0], cmp_d);
            for (int i = 0; i < kg && ng < 256; i++) tg[ng++] = rg[i];
            rt[rounds] = (work_a / rs[ks / 2]) / (work_b / rg[kg / 2]);
        } else {
            rt[rounds] = 0.0;
        }
        rounds++;
    } while (rounds < 16 && (rounds < 2 || now() - start < min_time));
    qsort(ts, (size_t)ns, sizeof ts[0], cmp_d);
    qsort(tg, (size_t)ng, sizeof tg[0], cmp_d);
    qsort(rt, (size_t)rounds, sizeof rt[0], cmp_d);
    res->ta = ts[ns / 2], res->tb = ng ? tg[ng / 2] : 0.0, res->ratio = rt[rounds / 2], res->reps = ns;
    return 0;
}

static float *frand_buf(size_t n, uint32_t seed) {
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

typedef struct rd_ctx {
    const float *p;
    size_t n;
    volatile float sink;
} rd_ctx;

/* the machine's read bandwidth on the decode's thread count (readbw.c: the
 * widest vectors, 8 accumulators, one stream per thread) */
static int run_read(void *v) {
    rd_ctx *r = v;
    r->sink = attn_readbw_sum(r->p, r->n);
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
    if (st != ATTN_OK) cli_error("bench: %s", attn_status_string(st));
    return st != ATTN_OK;
}

static int bench_decode(int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t D, int64_t page, attn_dtype dt,
                        attn_impl impl, double min_time, int json) {
    if (H % Hkv) {
        cli_error("--heads must be a multiple of --kv-heads");
        return EXIT_USAGE;
    }
    attn_kv_cache_config cfg = {B, Hkv, T, D, D, dt, page, 0};
    const char *dtn = dt == ATTN_DTYPE_F32    ? "f32"
                      : dt == ATTN_DTYPE_F16  ? "f16"
                      : dt == ATTN_DTYPE_BF16 ? "bf16"
                                              : "q8_0";
    dec_ctx c;
    memset(&c, 0, sizeof c);
    attn_status st = attn_kv_cache_create(&cfg, &c.cache);
    if (st != ATTN_OK) {
        cli_error("bench: KV cache of B=%lld Hkv=%lld T=%lld D=%lld: %s", (long long)B, (long long)Hkv, (long long)T,
                  (long long)D, attn_status_string(st));
        return 1;
    }
    /* fill every sequence to T tokens, 1024 at a time */
    int64_t chunk = T < 1024 ? T : 1024;
    float *kk = frand_buf((size_t)(B * Hkv * chunk * D), 5), *vv = frand_buf((size_t)(B * Hkv * chunk * D), 6);
    float *q = frand_buf((size_t)(B * H * D), 4), *o = frand_buf((size_t)(B * H * D), 7);
    int64_t *n = calloc((size_t)B, sizeof *n);
    /* K and V as stored: 4, 2 or 34/32 bytes per element */
    size_t bytes = (size_t)(2 * B * Hkv * T) * (dt == ATTN_DTYPE_F32    ? (size_t)D * 4
                                                : dt == ATTN_DTYPE_Q8_0 ? (size_t)(D / 32) * 34
                                                                        : (size_t)D * 2);
    rd_ctx rd = {frand_buf(bytes / sizeof(float), 8), bytes / sizeof(float), 0.0f};
    if (!kk || !vv || !q || !o || !n || !rd.p) {
        cli_error("bench: out of memory");
        return 1;
    }
    attn_view vk = {kk, Hkv * chunk * D, chunk * D, D}, vv_ = {vv, Hkv * chunk * D, chunk * D, D};
    for (int64_t done = 0; done < T; done += chunk) {
        for (int64_t b = 0; b < B; b++) n[b] = T - done < chunk ? T - done : chunk;
        if ((st = attn_kv_cache_append(c.cache, n, vk, vv_)) != ATTN_OK) {
            cli_error("bench: append: %s", attn_status_string(st));
            return 1;
        }
    }
    attn_sdpa_desc_init(&c.d, B, H, 1, T, D, D);
    c.d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    c.d.impl = impl;
    attn_view vq = {q, H * D, D, D}, vo = {o, H * D, D, D};
    c.q = vq, c.o = vo;
    bench_result r;
    if (time_pair(run_decode, &c, (double)bytes, run_read, &rd, (double)bytes, min_time, &r)) return 1;
    double gbps = (double)bytes / r.ta * 1e-9, rd_gbps = (double)bytes / r.tb * 1e-9;
    int nthreads = omp_get_max_threads();
    const char *kern = impl == ATTN_IMPL_REF ? "ref" : attn_kernel_name();
    if (json)
        printf("{\"op\": \"decode\", \"impl\": \"%s\", \"kernels\": \"%s\", \"B\": %lld, \"H\": %lld, "
               "\"Hkv\": %lld, \"T\": %lld, \"D\": %lld, \"kv_dtype\": \"%s\", \"page_size\": %lld, "
               "\"threads\": %d, \"reps\": %d, \"ms\": %.4f, \"bytes\": %zu, \"gbps\": %.2f, "
               "\"read_gbps\": %.2f, \"read_kernel\": \"%s\", \"ratio_to_read\": %.3f}\n",
               impl == ATTN_IMPL_REF ? "ref" : "fast", kern, (long long)B, (long long)H, (long long)Hkv, (long long)T,
               (long long)D, dtn, (long long)page, nthreads, r.reps, r.ta * 1e3, bytes, gbps, rd_gbps,
               attn_readbw_kernel(), r.ratio);
    else
        printf("decode %s (%s kernels) B=%lld Hq=%lld Hkv=%lld T=%lld D=%lld %s cache%s, %d threads: %.3f ms, "
               "%.1f GB/s of K+V; read bandwidth %.1f GB/s; ratio %.2f\n",
               impl == ATTN_IMPL_REF ? "ref" : "fast", kern, (long long)B, (long long)H, (long long)Hkv, (long long)T,
               (long long)D, dtn, page ? " (paged)" : "", nthreads, r.ta * 1e3, gbps, rd_gbps, r.ratio);
    attn_kv_cache_free(c.cache);
    free(kk), free(vv), free(q), free(o), free(n), free((void *)rd.p);
    return 0;
}

int cmd_bench(int argc, char **argv) {
    int64_t B = 1, H = 8, S = 2048, Sk = 0, D = 64, threads = 0, sgemm_n = 2048, Hkv = 0, page = 0;
    int causal = 0, backward = 0, json = 0, decode = 0, alibi = 0, ring = 0, ring_layout = -1, blas_keep = 0;
    int64_t window = -1;
    double softcap = 0.0;
    attn_dtype kv_dtype = ATTN_DTYPE_F32, qkv_dtype = ATTN_DTYPE_F32;
    attn_impl impl = ATTN_IMPL_FAST;
    double min_time = 1.0, p_drop = 0.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t *dst = NULL, lo = 1, hi = 1 << 24;
        if (!strcmp(a, "--causal"))
            causal = 1;
        else if (!strcmp(a, "--backward"))
            backward = 1;
        else if (!strcmp(a, "--json"))
            json = 1;
        else if (!strcmp(a, "--decode"))
            decode = 1;
        else if (!strcmp(a, "--ring"))
            ring = 1;
        else if (!strcmp(a, "--blas-env")) {
            if (!v || (strcmp(v, "keep") && strcmp(v, "clear"))) {
                cli_error("--blas-env must be keep or clear");
                return EXIT_USAGE;
            }
            blas_keep = !strcmp(v, "keep");
            i++;
        } else if (!strcmp(a, "--ring-layout")) {
            if (!v || (strcmp(v, "contiguous") && strcmp(v, "zigzag"))) {
                cli_error("--ring-layout must be contiguous or zigzag");
                return EXIT_USAGE;
            }
            ring_layout = !strcmp(v, "zigzag");
            i++;
        } else if (!strcmp(a, "--alibi"))
            alibi = 1;
        else if (!strcmp(a, "--window"))
            dst = &window, lo = 0;
        else if (!strcmp(a, "--softcap")) {
            char *end;
            softcap = v ? strtod(v, &end) : -1.0;
            if (!v || *end || !(softcap > 0.0 && softcap < 1e6)) {
                cli_error("--softcap must be a positive number");
                return EXIT_USAGE;
            }
            i++;
        } else if (!strcmp(a, "--kv-heads"))
            dst = &Hkv;
        else if (!strcmp(a, "--page-size"))
            dst = &page, lo = 0;
        else if (!strcmp(a, "--dtype")) {
            if (!v || (strcmp(v, "f32") && strcmp(v, "f16") && strcmp(v, "bf16"))) {
                cli_error("--dtype must be f32, f16 or bf16 (the element type of q, k and v)");
                return EXIT_USAGE;
            }
            qkv_dtype = !strcmp(v, "f32") ? ATTN_DTYPE_F32 : !strcmp(v, "f16") ? ATTN_DTYPE_F16 : ATTN_DTYPE_BF16;
            i++;
        } else if (!strcmp(a, "--kv-dtype")) {
            if (!v || (strcmp(v, "f32") && strcmp(v, "f16") && strcmp(v, "bf16") && strcmp(v, "q8_0"))) {
                cli_error("--kv-dtype must be f32, f16, bf16 or q8_0");
                return EXIT_USAGE;
            }
            kv_dtype = !strcmp(v, "f32")    ? ATTN_DTYPE_F32
                       : !strcmp(v, "f16")  ? ATTN_DTYPE_F16
                       : !strcmp(v, "bf16") ? ATTN_DTYPE_BF16
                                            : ATTN_DTYPE_Q8_0;
            i++;
        } else if (!strcmp(a, "--batch"))
            dst = &B;
        else if (!strcmp(a, "--heads"))
            dst = &H;
        else if (!strcmp(a, "--seq"))
            dst = &S;
        else if (!strcmp(a, "--kv-seq"))
            dst = &Sk;
        else if (!strcmp(a, "--head-dim"))
            dst = &D, hi = 4096;
        else if (!strcmp(a, "--threads"))
            dst = &threads, hi = 1024;
        else if (!strcmp(a, "--sgemm-n"))
            dst = &sgemm_n, lo = 0, hi = 8192;
        else if (!strcmp(a, "--impl")) {
            if (!v || (strcmp(v, "fast") && strcmp(v, "ref") && strcmp(v, "auto"))) {
                cli_error("--impl must be fast, ref or auto");
                return EXIT_USAGE;
            }
            impl = !strcmp(v, "ref") ? ATTN_IMPL_REF : !strcmp(v, "auto") ? ATTN_IMPL_AUTO : ATTN_IMPL_FAST;
            i++;
        } else if (!strcmp(a, "--dropout")) {
            if (!v || !cli_parse_prob(v, &p_drop)) {
                cli_error("--dropout must be a probability in [0, 1]");
                return EXIT_USAGE;
            }
            i++;
        } else if (!strcmp(a, "--min-time")) {
            char *end;
            min_time = v ? strtod(v, &end) : -1.0;
            if (!v || *end || !(min_time >= 0.0 && min_time <= 600.0)) {
                cli_error("--min-time must be seconds in [0, 600]");
                return EXIT_USAGE;
            }
            i++;
        } else {
            cli_error("unknown option '%s'", a);
            return EXIT_USAGE;
        }
        if (dst) {
            if (!v || !cli_parse_i64(v, lo, hi, dst)) {
                cli_error("%s needs an integer in [%lld, %lld]", a, (long long)lo, (long long)hi);
                return EXIT_USAGE;
            }
            i++;
        }
    }
    if (!Sk) Sk = S;
    if (threads > 0) cli_set_threads((int)threads);
    int nthreads = omp_get_max_threads();
    if (decode) return bench_decode(B, H, Hkv ? Hkv : H, Sk, D, page, kv_dtype, impl, min_time, json);
    if (ring) {
#ifdef ATTN_HAVE_MPI
        int rank, nr;
        if (!cli_ring_begin(&argc, &argv, &rank, &nr)) {
            cli_error("bench --ring: MPI did not start");
            return 1;
        }
        int rc = cli_ring_bench(B, H, Hkv ? Hkv : H, S, D, causal, ring_layout, backward, min_time, json);
        cli_ring_end();
        return rc;
#else
        (void)ring_layout;
        cli_error("bench --ring needs libattn built with MPI (install libopenmpi-dev and rebuild)");
        return EXIT_USAGE;
#endif
    }

    /* The sgemm reference runs with the BLAS at the machine's full ISA: an
     * environment that pins OpenBLAS lower (OPENBLAS_CORETYPE, OPENBLAS_L2_SIZE:
     * this project's test environment does) would make every ratio flattering.
     * Unless --blas-env keep, re-run this command without them (OpenBLAS reads
     * them once, when it loads); the SDPA kernels do not depend on them. */
    char pinned[256] = "";
    for (int e = 0; e < 2; e++) {
        const char *name = e ? "OPENBLAS_L2_SIZE" : "OPENBLAS_CORETYPE", *val = getenv(name);
        if (val && *val)
            snprintf(pinned + strlen(pinned), sizeof pinned - strlen(pinned), "%s%s=%s", *pinned ? " " : "", name, val);
    }
    const char *was = getenv("ATTN_BENCH_BLAS_WAS"); /* set by the re-run: what the caller's environment pinned */
    if (sgemm_n > 0 && *pinned && !blas_keep && !was) {
        setenv("ATTN_BENCH_BLAS_WAS", pinned, 1);
        unsetenv("OPENBLAS_CORETYPE"), unsetenv("OPENBLAS_L2_SIZE");
        fflush(stdout);
        execv("/proc/self/exe", argv - 1); /* argv - 1: the program's own argv[0] ("attn") */
        cli_error("bench: cannot re-run without %s: the sgemm reference below is pinned", pinned);
    }
    const char *core = openblas_get_corename();
    char blas_note[384];
    if (*pinned)
        snprintf(blas_note, sizeof blas_note, "OpenBLAS %s, PINNED by %s: ratios are against a restricted BLAS",
                 core ? core : "?", pinned);
    else if (was && *was)
        snprintf(blas_note, sizeof blas_note, "OpenBLAS %s, unrestricted (re-run without %s)", core ? core : "?", was);
    else
        snprintf(blas_note, sizeof blas_note, "OpenBLAS %s", core ? core : "?");

    /* sgemm reference point, same threads, timed in alternation with the
     * SDPA so both see the same machine (this VM's speed drifts) */
    sg_ctx sg = {(int)sgemm_n, NULL, NULL, NULL};
    if (sgemm_n > 0) {
        size_t n2 = (size_t)(sgemm_n * sgemm_n);
        sg.a = frand_buf(n2, 1), sg.b = frand_buf(n2, 2), sg.c = frand_buf(n2, 3);
        if (!sg.a || !sg.b || !sg.c) {
            cli_error("bench: out of memory");
            return 1;
        }
    }

    if (!Hkv) Hkv = H;
    if (H % Hkv) {
        cli_error("--heads must be a multiple of --kv-heads");
        return EXIT_USAGE;
    }
    size_t nq = (size_t)(B * H * S * D), nk = (size_t)(B * Hkv * Sk * D), nl = (size_t)(B * H * S);
    sd_ctx c;
    memset(&c, 0, sizeof c);
    attn_sdpa_desc_init(&c.d, B, H, S, Sk, D, D);
    c.d.Hkv = Hkv;
    c.d.causal = causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
    c.d.impl = impl;
    if (window >= 0) c.d.window = 1, c.d.window_left = window, c.d.window_right = causal ? 0 : window;
    c.d.softcap = (float)softcap;
    float *slopes = malloc((size_t)H * sizeof *slopes);
    if (!slopes) return 1;
    for (int64_t h = 0; h < H; h++) slopes[h] = powf(2.0f, -8.0f * (float)(h + 1) / (float)H);
    if (alibi) c.d.alibi_slopes = slopes;
    attn_dropout drop;
    memset(&drop, 0, sizeof drop);
    if (p_drop > 0.0) { /* the MKL stream (random access, generated inside the tiles) */
        attn_generator gen;
        attn_generator_seed(&gen, 0);
        if (attn_dropout_begin(&gen, p_drop, (uint64_t)nl * (uint64_t)Sk, &drop) != ATTN_OK) {
            cli_error("bench: dropout setup failed");
            return 1;
        }
        c.d.dropout = &drop;
    }
    float *q = frand_buf(nq, 4), *k = frand_buf(nk, 5), *v = frand_buf(nk, 6), *o = frand_buf(nq, 7);
    float *go = backward ? frand_buf(nq, 8) : NULL, *dq = backward ? frand_buf(nq, 9) : NULL;
    float *dk = backward ? frand_buf(nk, 10) : NULL, *dvv = backward ? frand_buf(nk, 11) : NULL;
    c.lse = malloc(nl * sizeof(float));
    if (!q || !k || !v || !o || !c.lse || (backward && (!go || !dq || !dk || !dvv))) {
        cli_error("bench: out of memory for B=%lld H=%lld S=%lld D=%lld", (long long)B, (long long)H, (long long)S,
                  (long long)D);
        return 1;
    }
    if (qkv_dtype != ATTN_DTYPE_F32) { /* 16-bit inputs: converted in place (the patterns fill the front half) */
        float *bufs[3] = {q, k, v};
        size_t ns[3] = {nq, nk, nk};
        for (int t = 0; t < 3; t++) {
            uint16_t *u = (uint16_t *)(void *)bufs[t];
            for (size_t i = 0; i < ns[t]; i++)
                u[i] = qkv_dtype == ATTN_DTYPE_F16 ? attn_f32_to_f16(bufs[t][i]) : attn_f32_to_bf16(bufs[t][i]);
        }
        c.d.qkv_dtype = qkv_dtype;
    }
    attn_view vq = {q, H * S * D, S * D, D}, vk = {k, Hkv * Sk * D, Sk * D, D}, vv = {v, Hkv * Sk * D, Sk * D, D};
    attn_view vo = {o, H * S * D, S * D, D};
    c.q = vq, c.k = vk, c.v = vv, c.o = vo;
    if (backward) {
        attn_view vgo = {go, H * S * D, S * D, D}, vdq = {dq, H * S * D, S * D, D};
        attn_view vdk = {dk, Hkv * Sk * D, Sk * D, D}, vdv = {dvv, Hkv * Sk * D, Sk * D, D};
        c.go = vgo, c.dq = vdq, c.dk = vdk, c.dv = vdv;
        if (run_sdpa(&c)) return 1; /* forward once: out and lse for backward */
    }
    c.backward = backward;
    /* FLOPs of the visible (query, key) pairs: the full S x Sk, halved when
     * causal; a window counts only the keys it shows */
    double pairs = (double)S * (double)Sk * (causal ? 0.5 : 1.0);
    if (window >= 0) {
        pairs = 0.0;
        for (int64_t i = 0; i < S; i++) {
            int64_t lo = i - window < 0 ? 0 : i - window,
                    hi = causal ? i + 1 : (i + window + 1 < Sk ? i + window + 1 : Sk);
            pairs += (double)(hi > lo ? hi - lo : 0);
        }
    }
    double flops = 4.0 * (double)B * (double)H * pairs * (double)D;
    if (backward) flops *= 2.5;
    double sg_flops = 2.0 * (double)sgemm_n * (double)sgemm_n * (double)sgemm_n;
    bench_result r;
    if (time_pair(run_sdpa, &c, flops, sgemm_n > 0 ? run_sgemm : NULL, &sg, sg_flops, min_time, &r)) return 1;
    int reps = r.reps;
    double t = r.ta, gflops = flops / t * 1e-9, ratio = r.ratio;
    double sg_ms = r.tb * 1e3, sg_gflops = r.tb > 0 ? sg_flops / r.tb * 1e-9 : 0.0;
    const char *kern = impl == ATTN_IMPL_REF ? "ref" : attn_kernel_name();
    if (json) {
        printf(
            "{\"op\": \"%s\", \"impl\": \"%s\", \"kernels\": \"%s\", \"B\": %lld, \"H\": %lld, \"Hkv\": %lld, "
            "\"window\": %lld, \"softcap\": %g, \"alibi\": %s, \"Sq\": %lld, "
            "\"Sk\": %lld, \"D\": %lld, \"causal\": %s, \"threads\": %d, \"reps\": %d, \"ms\": %.4f, "
            "\"gflops\": %.2f, \"sgemm_n\": %lld, \"sgemm_ms\": %.4f, \"sgemm_gflops\": %.2f, "
            "\"ratio_to_sgemm\": %.3f, \"blas_core\": \"%s\", \"blas_pinned\": \"%s\", \"blas_env_cleared\": \"%s\"}\n",
            backward ? "backward" : "forward", impl == ATTN_IMPL_REF ? "ref" : "fast", kern, (long long)B, (long long)H,
            (long long)Hkv, (long long)window, softcap, alibi ? "true" : "false", (long long)S, (long long)Sk,
            (long long)D, causal ? "true" : "false", nthreads, reps, t * 1e3, gflops, (long long)sgemm_n, sg_ms,
            sg_gflops, ratio, core ? core : "?", pinned, was ? was : "");
    } else {
        char feat[96] = "";
        int fl = 0;
        if (Hkv != H) fl += snprintf(feat + fl, sizeof feat - (size_t)fl, " Hkv=%lld", (long long)Hkv);
        if (window >= 0) fl += snprintf(feat + fl, sizeof feat - (size_t)fl, " window=%lld", (long long)window);
        if (softcap > 0) fl += snprintf(feat + fl, sizeof feat - (size_t)fl, " softcap=%g", softcap);
        if (alibi) fl += snprintf(feat + fl, sizeof feat - (size_t)fl, " alibi");
        if (qkv_dtype != ATTN_DTYPE_F32)
            snprintf(feat + fl, sizeof feat - (size_t)fl, " %s", qkv_dtype == ATTN_DTYPE_F16 ? "f16" : "bf16");
        printf("sdpa %s %s (%s kernels) B=%lld H=%lld Sq=%lld Sk=%lld D=%lld%s%s, %d threads: %.3f ms, %.1f GFLOP/s",
               backward ? "backward" : "forward", impl == ATTN_IMPL_REF ? "ref" : "fast", kern, (long long)B,
               (long long)H, (long long)S, (long long)Sk, (long long)D, causal ? " causal" : "", feat, nthreads,
               t * 1e3, gflops);
        if (sgemm_n > 0)
            printf("; sgemm %lld^3: %.1f GFLOP/s (%s); ratio %.2f", (long long)sgemm_n, sg_gflops, blas_note, ratio);
        printf("\n");
    }
    free(q), free(k), free(v), free(o), free(go), free(dq), free(dk), free(dvv), free(c.lse), free(slopes);
    free(sg.a), free(sg.b), free(sg.c);
    return 0;
}
