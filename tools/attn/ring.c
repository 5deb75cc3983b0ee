/* The CLI's side of ring attention (built with MPI only): MPI start and
 * end, each rank's shard of whole arrays, and the results gathered back on
 * rank 0, so that `mpirun -np N attn sdpa --ring` writes the file a single
 * process writes. */
#include "cli.h"
#include "cli_ring.h"

#include "attn_mpi.h"
#include "base/storage.h"
#include "readbw.h"

#include <omp.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int started_here;

int cli_ring_begin(int *argc, char ***argv, int *rank, int *size) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        if (MPI_Init(argc, argv) != MPI_SUCCESS) return 0;
        started_here = 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    return 1;
}

int cli_ring_sync(int ok) {
    int all = ok;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all;
}

void cli_ring_end(void) {
    if (started_here) MPI_Finalize();
    started_here = 0;
}

/* rows of a whole (B, Hh, S, W) array (es-byte elements) that rank r holds, in shard order */
static void *take_rows(const void *all, int64_t es, int64_t B, int64_t Hh, int64_t S, int64_t W, int n, int r,
                       attn_ring_layout lay) {
    int64_t st[2], ln[2], m = attn_ring_shard(S, n, r, lay, st, ln);
    char *out = malloc((size_t)(B * Hh * m * W * es) + 1);
    for (int64_t bh = 0; out && bh < B * Hh; bh++)
        for (int p = 0, at = 0; p < 2; p++)
            for (int64_t i = 0; i < ln[p]; i++, at++)
                memcpy(out + (size_t)((bh * m + at) * W * es),
                       (const char *)all + (size_t)((bh * S + st[p] + i) * W * es), (size_t)(W * es));
    return out;
}

/* every rank's rows (float32, shard order) into the whole array on rank 0 */
static int gather_rows(const float *mine, float *all, int64_t B, int64_t Hh, int64_t S, int64_t W, int n, int rank,
                       attn_ring_layout lay) {
    int64_t st[2], ln[2], m = attn_ring_shard(S, n, rank, lay, st, ln), total = 0;
    int *counts = NULL, *displs = NULL, ok = 1;
    float *buf = NULL;
    if (rank == 0) {
        counts = malloc((size_t)n * sizeof *counts), displs = malloc((size_t)n * sizeof *displs);
        for (int r = 0; counts && displs && r < n; r++) {
            int64_t s2[2], l2[2], mr = attn_ring_shard(S, n, r, lay, s2, l2);
            counts[r] = (int)(B * Hh * mr * W), displs[r] = (int)total, total += counts[r];
        }
        buf = malloc((size_t)total * sizeof *buf + 1);
        ok = counts && displs && buf;
    }
    if (!cli_ring_sync(ok)) {
        free(counts), free(displs), free(buf);
        return 0;
    }
    MPI_Gatherv(mine, (int)(B * Hh * m * W), MPI_FLOAT, buf, counts, displs, MPI_FLOAT, 0, MPI_COMM_WORLD);
    for (int r = 0; rank == 0 && r < n; r++) { /* unshard */
        int64_t s2[2], l2[2], mr = attn_ring_shard(S, n, r, lay, s2, l2);
        const float *src = buf + displs[r];
        for (int64_t bh = 0; bh < B * Hh; bh++)
            for (int p = 0, at = 0; p < 2; p++)
                for (int64_t i = 0; i < l2[p]; i++, at++)
                    memcpy(all + (size_t)((bh * S + s2[p] + i) * W), src + (size_t)((bh * mr + at) * W),
                           (size_t)W * sizeof(float));
    }
    free(counts), free(displs), free(buf);
    return 1;
}

static attn_view v4(void *data, int64_t Hh, int64_t S, int64_t W) {
    attn_view v = {data, Hh * S * W, S * W, W};
    return v;
}

attn_status cli_ring_sdpa(const attn_sdpa_desc *d, int layout_id, int64_t es, const void *q, const void *k,
                          const void *v, float *out, float *lse, const float *dout, float *dq, float *dk, float *dv) {
    attn_ring_layout lay = (attn_ring_layout)layout_id;
    int n, r;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    int64_t B = d->B, H = d->H, Hkv = d->Hkv > 0 ? d->Hkv : d->H, Sq = d->Sq, Sk = d->Sk, D = d->D, Dv = d->Dv;
    int64_t st2[2], ln2[2], mq = attn_ring_shard(Sq, n, r, lay, st2, ln2),
                            mk = attn_ring_shard(Sk, n, r, lay, st2, ln2);
    void *lq = take_rows(q, es, B, H, Sq, D, n, r, lay), *lk = take_rows(k, es, B, Hkv, Sk, D, n, r, lay);
    void *lv = take_rows(v, es, B, Hkv, Sk, Dv, n, r, lay);
    float *lo = malloc((size_t)(B * H * mq * Dv) * 4 + 4), *ll = malloc((size_t)(B * H * mq) * 4 + 4);
    float *ldo = dout ? take_rows(dout, 4, B, H, Sq, Dv, n, r, lay) : NULL;
    float *ldq = dout ? malloc((size_t)(B * H * mq * D) * 4 + 4) : NULL;
    float *ldk = dout ? malloc((size_t)(B * Hkv * mk * D) * 4 + 4) : NULL;
    float *ldv = dout ? malloc((size_t)(B * Hkv * mk * Dv) * 4 + 4) : NULL;
    int ok = lq && lk && lv && lo && ll && (!dout || (ldo && ldq && ldk && ldv));
    attn_status st = cli_ring_sync(ok) ? ATTN_OK : ATTN_E_NOMEM;
    if (!st)
        st = attn_ring_forward(MPI_COMM_WORLD, d, lay, v4(lq, H, mq, D), v4(lk, Hkv, mk, D), v4(lv, Hkv, mk, Dv),
                               v4(lo, H, mq, Dv), ll, NULL);
    if (!st && dout)
        st = attn_ring_backward(MPI_COMM_WORLD, d, lay, v4(lq, H, mq, D), v4(lk, Hkv, mk, D), v4(lv, Hkv, mk, Dv),
                                v4(ldo, H, mq, Dv), v4(ldq, H, mq, D), v4(ldk, Hkv, mk, D), v4(ldv, Hkv, mk, Dv), NULL);
    if (!st && !(gather_rows(lo, out, B, H, Sq, Dv, n, r, lay) && gather_rows(ll, lse, B, H, Sq, 1, n, r, lay)))
        st = ATTN_E_NOMEM;
    if (!st && dout &&
        !(gather_rows(ldq, dq, B, H, Sq, D, n, r, lay) && gather_rows(ldk, dk, B, Hkv, Sk, D, n, r, lay) &&
          gather_rows(ldv, dv, B, Hkv, Sk, Dv, n, r, lay)))
        st = ATTN_E_NOMEM;
    free(lq), free(lk), free(lv), free(lo), free(ll), free(ldo), free(ldq), free(ldk), free(ldv);
    return st;
}

/* ---- attn bench --ring --------------------------------------------------- */

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* median of v[0..n) */
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_dbl);
    return n ? v[n / 2] : 0.0;
}

/* the K/V exchange of one ring alone: n-1 steps of send-to-next /
 * receive-from-prev of this shard's K/V bytes, no compute */
static double comm_alone(int n, int rank, void *a, void *b, int bytes) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int s = 0; s < n - 1; s++)
        MPI_Sendrecv(a, bytes, MPI_BYTE, (rank + 1) % n, 5, b, bytes, MPI_BYTE, (rank + n - 1) % n, 5, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
    return MPI_Wtime() - t0;
}

int cli_ring_bench(int64_t B, int64_t H, int64_t Hkv, int64_t S, int64_t D, int causal, int layout_id, int backward,
                   double min_time, int json) {
    int n, rank;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    attn_ring_layout lay = layout_id >= 0 ? (attn_ring_layout)layout_id
                           : causal       ? ATTN_RING_ZIGZAG
                                          : ATTN_RING_CONTIGUOUS;
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, B, H, S, S, D, D);
    d.Hkv = Hkv, d.causal = causal ? ATTN_CAUSAL_TOP_LEFT : ATTN_CAUSAL_NONE;
    int64_t st[2], ln[2], m = attn_ring_shard(S, n, rank, lay, st, ln), kmax = 0;
    for (int r = 0; r < n; r++) {
        int64_t s2[2], l2[2], mr = attn_ring_shard(S, n, r, lay, s2, l2);
        kmax = mr > kmax ? mr : kmax;
    }
    size_t nq = (size_t)(B * H * m * D), nk = (size_t)(B * Hkv * m * D);
    float *q = malloc(nq * 4 + 4), *k = malloc(nk * 4 + 4), *v = malloc(nk * 4 + 4), *o = malloc(nq * 4 + 4);
    float *g = malloc(nq * 4 + 4), *dq = malloc(nq * 4 + 4), *dk = malloc(nk * 4 + 4), *dv = malloc(nk * 4 + 4);
    int bytes = (int)(B * Hkv * kmax * 2 * D * 4);
    void *ca = malloc((size_t)bytes + 1), *cb = malloc((size_t)bytes + 1);
    int ok = q && k && v && o && g && dq && dk && dv && ca && cb;
    if (!cli_ring_sync(ok)) {
        if (rank == 0) cli_error("bench --ring: out of memory");
        free(q), free(k), free(v), free(o), free(g), free(dq), free(dk), free(dv), free(ca), free(cb);
        return 1;
    }
    uint32_t x = 12345u + (uint32_t)rank;
    float *all[4] = {q, k, v, g};
    size_t cnt[4] = {nq, nk, nk, nq};
    for (int a = 0; a < 4; a++)
        for (size_t i = 0; i < cnt[a]; i++)
            x = x * 1664525u + 1013904223u, all[a][i] = (float)(x >> 8) * 0x1p-24f - 0.5f;
    memset(ca, 1, (size_t)bytes);
    attn_view vq = {q, H * m * D, m * D, D}, vk = {k, Hkv * m * D, m * D, D}, vv = {v, Hkv * m * D, m * D, D};
    attn_view vo = {o, H * m * D, m * D, D}, vg = {g, H * m * D, m * D, D}, vdq = {dq, H * m * D, m * D, D};
    attn_view vdk = {dk, Hkv * m * D, m * D, D}, vdv = {dv, Hkv * m * D, m * D, D};
    double tot[64], comp[64], wait[64], alone[64];
    int reps = 0;
    attn_status stt = ATTN_OK;
    double start = MPI_Wtime();
    do {
        attn_ring_timing t;
        MPI_Barrier(MPI_COMM_WORLD);
        stt = backward ? attn_ring_backward(MPI_COMM_WORLD, &d, lay, vq, vk, vv, vg, vdq, vdk, vdv, &t)
                       : attn_ring_forward(MPI_COMM_WORLD, &d, lay, vq, vk, vv, vo, NULL, &t);
        if (stt) break;
        /* the call's time (slowest rank), the slowest and fastest compute */
        double mine[3] = {t.total_s, t.compute_s, -t.compute_s}, mx[3];
        MPI_Allreduce(mine, mx, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        double ca_t = comm_alone(n, rank, ca, cb, bytes), ca_mx;
        MPI_Allreduce(&ca_t, &ca_mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        tot[reps] = mx[0], comp[reps] = mx[1], wait[reps] = mx[1] + mx[2], alone[reps] = ca_mx;
        reps++;
        double el = MPI_Wtime() - start;
        MPI_Bcast(&el, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        if (reps >= 3 && el >= min_time) break;
    } while (reps < 64);
    if (stt) {
        if (rank == 0) cli_error("bench --ring: %s", cli_status(stt));
    } else if (rank == 0) {
        int rings = backward ? 2 : 1, steps = n * rings;
        double ex[64];
        for (int i = 0; i < reps; i++) ex[i] = tot[i] - comp[i]; /* beyond the slowest rank's compute */
        double T = median(tot, reps), C = median(comp, reps), I = median(wait, reps), W = median(ex, reps);
        double M = median(alone, reps) * rings; /* the exchanges alone, as many rings as the call runs */
        /* the part of the message time hidden behind compute: exposed time against the messages alone */
        double hidden = M > 0.0 ? 1.0 - W / M : 1.0;
        hidden = hidden < 0.0 ? 0.0 : hidden > 1.0 ? 1.0 : hidden;
        double flops =
            (backward ? 10.0 : 4.0) * (double)(B * H) * (double)S * (double)S * (double)D * (causal ? 0.5 : 1.0);
        if (json)
            printf("{\"op\": \"ring_%s\", \"ranks\": %d, \"layout\": \"%s\", \"B\": %lld, \"H\": %lld, \"Hkv\": %lld, "
                   "\"S\": %lld, \"D\": %lld, \"causal\": %d, \"reps\": %d, \"ms\": %.4f, \"compute_ms_per_step\": "
                   "%.4f, \"message_ms_per_step\": %.4f, \"exposed_ms_per_step\": %.4f, \"overlap\": %.3f, "
                   "\"imbalance_ms_per_step\": %.4f, \"kv_bytes_per_step\": %d, \"gflops\": %.2f}\n",
                   backward ? "backward" : "forward", n, lay ? "zigzag" : "contiguous", (long long)B, (long long)H,
                   (long long)Hkv, (long long)S, (long long)D, causal, reps, T * 1e3, C / steps * 1e3,
                   n > 1 ? M / (rings * (n - 1)) * 1e3 : 0.0, W / steps * 1e3, hidden, I / steps * 1e3, bytes,
                   flops / T * 1e-9);
        else
            printf("ring %s on %d ranks (%s), B=%lld H=%lld Hkv=%lld S=%lld D=%lld%s: %.3f ms (%.1f GFLOP/s); per "
                   "step: compute %.3f ms (slowest rank; fastest %.3f less), K/V message %.3f ms alone (%d bytes), "
                   "exposed %.3f ms; overlap %.2f\n",
                   backward ? "backward" : "forward", n, lay ? "zigzag" : "contiguous", (long long)B, (long long)H,
                   (long long)Hkv, (long long)S, (long long)D, causal ? " causal" : "", T * 1e3, flops / T * 1e-9,
                   C / steps * 1e3, I / steps * 1e3, n > 1 ? M / (rings * (n - 1)) * 1e3 : 0.0, bytes, W / steps * 1e3,
                   hidden);
    }
    free(q), free(k), free(v), free(o), free(g), free(dq), free(dk), free(dv), free(ca), free(cb);
    return stt != ATTN_OK;
}

/* ---- attn bench --decode --shard: the sharded KV cache's decode step ---- */

/* a rank's shard filled with n T tokens per sequence over all ranks, chunk by chunk (the same random chunk each
 * time: timing only); rank 0 also fills a whole cache (the one-process reference) when whole is not NULL */
static attn_status shard_fill(attn_kv_shard *sh, attn_kv_cache *whole, int64_t B, int64_t Hkv, int64_t total,
                              int64_t D) {
    int64_t chunk = total < 4096 ? total : 4096;
    float *rows = malloc((size_t)(B * Hkv * chunk * D) * sizeof(float));
    int64_t *n = malloc((size_t)B * sizeof *n);
    attn_status st = rows && n ? ATTN_OK : ATTN_E_NOMEM;
    uint32_t x = 4242u;
    for (int64_t i = 0; rows && i < B * Hkv * chunk * D; i++)
        x = x * 1664525u + 1013904223u, rows[i] = (float)(x >> 8) * 0x1p-24f - 0.5f;
    attn_view v = {rows, Hkv * chunk * D, chunk * D, D};
    for (int64_t done = 0; done < total; done += chunk) {
        for (int64_t b = 0; n && b < B; b++) n[b] = total - done < chunk ? total - done : chunk;
        attn_status s2 = attn_kv_shard_append(sh, n ? n : (int64_t[1]){0}, v, v); /* collective: every rank calls */
        if (!st) st = s2;
        if (!st && whole) st = attn_kv_cache_append(whole, n, v, v);
    }
    free(rows), free(n);
    return st;
}

int cli_shard_bench(int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t D, int dtype, int64_t page, int single,
                    double min_time, int json) {
    int n, rank;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    attn_kv_cache_config cfg = {
        .batch = B, .kv_heads = Hkv, .capacity = T * n, .head_dim = D, .dtype = (attn_dtype)dtype};
    attn_kv_shard *sh = NULL;
    attn_kv_cache *whole = NULL;
    attn_status st = attn_kv_shard_create(MPI_COMM_WORLD, &cfg, ATTN_SHARD_ROUND_ROBIN, page, &sh);
    if (!st && single && rank == 0) st = attn_kv_cache_create(&cfg, &whole);
    if (!cli_ring_sync(st == ATTN_OK)) {
        if (rank == 0) cli_error("bench --shard: %s", cli_status(st ? st : ATTN_E_NOMEM));
        attn_kv_shard_free(sh), attn_kv_cache_free(whole);
        return 1;
    }
    st = shard_fill(sh, whole, B, Hkv, T * n, D);
    /* this rank's shard bytes, read alone in the same rounds: the memory bound of its share */
    const attn_storage *sto = attn_storage_of((attn_dtype)dtype); /* a row's bytes (int8 / int4: its pair too) */
    size_t row = sto ? attn_storage_bytes((attn_dtype)dtype, D) + (sto->params == ATTN_ST_ROWPAR ? 8 : 0) : 0;
    size_t bytes = (size_t)(B * Hkv * 2) * (size_t)attn_kv_cache_len(attn_kv_shard_local(sh), 0) * row;
    double es = (double)row / (double)D;
    void *rb = attn_readbw_buf(bytes);
    float *q = malloc((size_t)(B * H * D) * 4), *o = malloc((size_t)(B * H * D) * 4);
    if (!cli_ring_sync(!st && rb && q && o)) {
        if (rank == 0) cli_error("bench --shard: %s", cli_status(st ? st : ATTN_E_NOMEM));
        free(rb), free(q), free(o), attn_kv_shard_free(sh), attn_kv_cache_free(whole);
        return 1;
    }
    for (int64_t i = 0; i < B * H * D; i++) q[i] = 0.01f * (float)(i % 97);
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, B, H, 1, 0, D, D);
    d.Hkv = Hkv, d.causal = ATTN_CAUSAL_BOTTOM_RIGHT;
    attn_view vq = {q, H * D, D, D}, vo = {o, H * D, D, D};
    double tot[64], comp[64], comm[64], rd[64], one[64], ratio[64], loc[64], alone[64];
    int64_t per = B * H * (D + 1); /* one rank's (out, lse) floats: the all-gather's share */
    float *ga = malloc((size_t)per * 4), *gb = malloc((size_t)(per * n) * 4);
    attn_kv_positions pos = attn_kv_shard_positions(sh);
    int reps = 0;
    double start = MPI_Wtime();
    volatile unsigned sink = 0;
    do {
        attn_ring_timing t;
        MPI_Barrier(MPI_COMM_WORLD);
        st = attn_shard_decode(sh, &d, vq, vo, NULL, &t);
        if (st) break;
        double mine[3] = {t.total_s, t.compute_s, t.wait_s}, mx[3];
        MPI_Allreduce(mine, mx, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        /* the share alone (no collectives), and the two collectives alone (no compute) */
        MPI_Barrier(MPI_COMM_WORLD);
        double tl = MPI_Wtime();
        attn_kv_cache_attend_at(attn_kv_shard_local(sh), &d, &pos, vq, vo, NULL);
        tl = MPI_Wtime() - tl;
        MPI_Barrier(MPI_COMM_WORLD);
        double ta = MPI_Wtime();
        int64_t probe[2] = {0, 0}, pr[2];
        MPI_Allreduce(probe, pr, 2, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
        if (ga && gb) MPI_Allgather(ga, (int)per, MPI_FLOAT, gb, (int)per, MPI_FLOAT, MPI_COMM_WORLD);
        ta = MPI_Wtime() - ta;
        double la[2] = {tl, ta}, lm[2];
        MPI_Allreduce(la, lm, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD); /* every rank reads its shard's bytes at once */
        double t0 = MPI_Wtime();
        sink += attn_readbw_sum(rb, bytes);
        double tr = MPI_Wtime() - t0, trm;
        MPI_Allreduce(&tr, &trm, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        double ts = 0.0;
        if (whole) { /* the one process over the whole cache (rank 0; the others wait) */
            attn_sdpa_desc dw = d;
            t0 = MPI_Wtime();
            if (attn_kv_cache_attend(whole, &dw, vq, vo, NULL) != ATTN_OK) ts = -1.0;
            ts = ts < 0 ? ts : MPI_Wtime() - t0;
        }
        MPI_Bcast(&ts, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        tot[reps] = mx[0], comp[reps] = mx[1], comm[reps] = mx[2], rd[reps] = trm, one[reps] = ts;
        loc[reps] = lm[0], alone[reps] = lm[1];
        ratio[reps] = trm / mx[0];
        reps++;
        double el = MPI_Wtime() - start;
        MPI_Bcast(&el, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        if (reps >= 5 && el >= min_time) break;
    } while (reps < 64);
    if (st) {
        if (rank == 0) cli_error("bench --shard: %s", cli_status(st));
    } else if (rank == 0) {
        double Tm = median(tot, reps), C = median(comp, reps), M = median(comm, reps), R = median(rd, reps);
        double S1 = whole ? median(one, reps) : 0.0, ra = median(ratio, reps), L = median(loc, reps);
        double A = median(alone, reps);
        int64_t msg = B * H * (D + 1) * 4;
        if (json)
            printf("{\"op\": \"shard_decode\", \"ranks\": %d, \"B\": %lld, \"H\": %lld, \"Hkv\": %lld, \"T_per_rank\": "
                   "%lld, \"D\": %lld, \"kv_dtype_bytes\": %.4g, \"page\": %lld, \"threads\": %d, \"reps\": %d, "
                   "\"ms\": %.4f, \"compute_ms\": %.4f, \"comm_ms\": %.4f, \"read_ms\": %.4f, \"ratio_to_read\": "
                   "%.3f, \"comm_share\": %.3f, \"local_ms\": %.4f, \"ratio_to_local\": %.3f, "
                   "\"collectives_alone_ms\": %.4f, \"single_ms\": %.4f, \"speedup\": %.3f, "
                   "\"bytes_per_rank_step\": %lld, \"shard_bytes\": %zu}\n",
                   n, (long long)B, (long long)H, (long long)Hkv, (long long)T, (long long)D, es, (long long)page,
                   omp_get_max_threads(), reps, Tm * 1e3, C * 1e3, M * 1e3, R * 1e3, ra, M / Tm, L * 1e3, L / Tm,
                   A * 1e3, S1 * 1e3, S1 > 0 ? S1 / Tm : 0.0, (long long)msg, bytes);
        else
            printf("sharded decode on %d ranks, B=%lld H=%lld Hkv=%lld T=%lld per rank, D=%lld: %.3f ms a step "
                   "(compute %.3f, collectives %.3f); each rank's shard read alone %.3f ms: ratio %.2f; one process "
                   "over the whole cache %.3f ms\n",
                   n, (long long)B, (long long)H, (long long)Hkv, (long long)T, (long long)D, Tm * 1e3, C * 1e3,
                   M * 1e3, R * 1e3, ra, S1 * 1e3);
    }
    (void)sink;
    free(rb), free(q), free(o), free(ga), free(gb);
    attn_kv_shard_free(sh), attn_kv_cache_free(whole);
    return st != ATTN_OK;
}
