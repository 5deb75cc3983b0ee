/* A KV cache sharded over MPI ranks (include/attn_mpi.h, docs/RING.md
 * "Sharded KV cache"; issue 36).
 *
 * Every rank keeps a libattn KV cache with its part of every sequence's
 * positions (the placement policy: ranges, or round-robin by pages) and the
 * global lengths. Decode is tree attention: each rank attends its shard with
 * the global positions (attn_kv_cache_attend_at: the rules read global
 * keys), one all-gather brings every rank's (out, lse) to every rank, and
 * each merges them in rank order with attn_merge_states: the same bits on
 * every rank and every run, whatever the timing, and messages whose size
 * depends on B, H, Sq and Dv only. Prefill runs ring attention on the
 * prompt's shards and moves each K/V row to its owner with one all-to-all.
 *
 * Failures: the ranks compare the problem's scalars (an all-reduce of
 * min and max) and agree on one status, so a rank's error never leaves
 * another waiting; a failed append or prefill is undone on every rank. */
#include "attn_mpi.h"
#include "internal.h"
#include "fields.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define AGREE_MAX 24 /* scalars compared per agreement */

struct attn_kv_shard {
    MPI_Comm comm;
    int n, r;
    attn_shard_policy policy;
    int64_t block, capacity, B, Hkv, D, Dv;
    attn_kv_cache *local;
    int64_t *glen; /* (B) global lengths */
};

/* One collective: the status every rank returns, from this rank's st and
 * n int64 values that must be the same on every rank (the problem's
 * scalars): the minimum over the ranks of (v, -v, st, -st) gives each
 * value's minimum and maximum. ATTN_E_INVALID on every rank when the values
 * differ, else the largest status of any rank, ATTN_E_COMM when the
 * collective fails. */
static attn_status agree(MPI_Comm comm, const int64_t *v, int n, attn_status st) {
    int64_t a[2 * AGREE_MAX + 2], m[2 * AGREE_MAX + 2]; /* n <= AGREE_MAX: the same count on every rank */
    for (int i = 0; i < n; i++) a[i] = v[i], a[n + i] = -v[i];
    a[2 * n] = (int64_t)st, a[2 * n + 1] = -(int64_t)st;
    if (MPI_Allreduce(a, m, 2 * n + 2, MPI_INT64_T, MPI_MIN, comm) != MPI_SUCCESS) return ATTN_E_COMM;
    int same = 1;
    for (int i = 0; i < n; i++) same &= m[i] == -m[n + i];
    return same ? (attn_status)(-m[2 * n + 1]) : ATTN_E_INVALID; /* the largest status of any rank */
}

int attn_kv_shard_owner(const attn_kv_shard *s, int64_t g) {
    if (!s || g < 0) return -1;
    return s->policy == ATTN_SHARD_RANGES ? (int)(g / s->block) : (int)(g / s->block % s->n);
}

/* this rank's local index of global position g (which it holds) */
static int64_t local_index(const attn_kv_shard *s, int64_t g) {
    if (s->policy == ATTN_SHARD_RANGES) return g - (int64_t)s->r * s->block;
    return g / s->block / s->n * s->block + g % s->block;
}

/* where this rank's local keys sit globally (attn_kv_cache_attend_at) */
static attn_kv_positions shard_positions(const attn_kv_shard *s) {
    if (s->policy == ATTN_SHARD_RANGES) return (attn_kv_positions){s->glen, s->block, s->block, s->r * s->block};
    return (attn_kv_positions){s->glen, s->block, s->n * s->block, s->r * s->block};
}

attn_status attn_kv_shard_create(MPI_Comm comm, const attn_kv_cache_config *cfg, attn_shard_policy policy,
                                 int64_t block, attn_kv_shard **out) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!out || !inited || comm == MPI_COMM_NULL)
        return attn_fail(ATTN_E_INVALID, "%s",
                         !out     ? "out is NULL"
                         : inited ? "comm is MPI_COMM_NULL"
                                  : "MPI is not initialized");
    *out = NULL;
    attn_kv_shard *s = calloc(1, sizeof *s);
    if (!s) return ATTN_E_NOMEM; /* (the other ranks then fail in the collective below: MPI reports it) */
    if (MPI_Comm_dup(comm, &s->comm) != MPI_SUCCESS) {
        free(s);
        return ATTN_E_COMM;
    }
    MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN);
    MPI_Comm_size(s->comm, &s->n);
    MPI_Comm_rank(s->comm, &s->r);
    attn_status st = ATTN_OK;
    if (!cfg || (policy != ATTN_SHARD_RANGES && policy != ATTN_SHARD_ROUND_ROBIN) || block < 0) st = ATTN_E_INVALID;
    int64_t f[12] = {0};
    if (cfg) {
        int64_t g[12] = {cfg->batch,   cfg->kv_heads,  cfg->capacity,  cfg->head_dim,   cfg->v_head_dim, cfg->dtype,
                         cfg->v_dtype, cfg->page_size, cfg->num_pages, (int64_t)policy, block,           s->n};
        memcpy(f, g, sizeof f);
    }
    if (!st) {
        s->policy = policy, s->capacity = cfg->capacity, s->B = cfg->batch, s->Hkv = cfg->kv_heads;
        s->D = cfg->head_dim, s->Dv = cfg->v_head_dim ? cfg->v_head_dim : cfg->head_dim;
        s->block = block ? block : policy == ATTN_SHARD_RANGES ? (cfg->capacity + s->n - 1) / s->n : 64;
        if (s->B < 1 || s->capacity < 1 || s->block < 1 ||
            (policy == ATTN_SHARD_RANGES && s->block * (int64_t)s->n < s->capacity))
            st = ATTN_E_SHAPE;
    }
    if (!st) { /* the local cache: a range, or this rank's share of the pages */
        attn_kv_cache_config lc = *cfg;
        int64_t pages = (s->capacity + s->block - 1) / s->block;
        lc.capacity = policy == ATTN_SHARD_RANGES ? s->block : (pages + s->n - 1) / s->n * s->block;
        st = attn_kv_cache_create(&lc, &s->local);
        s->glen = calloc((size_t)s->B, sizeof *s->glen);
        if (!st && !s->glen) st = ATTN_E_NOMEM;
    }
    st = agree(s->comm, f, 12, st); /* the same cache everywhere, created everywhere */
    if (st) {
        attn_kv_shard_free(s);
        return st;
    }
    *out = s;
    return ATTN_OK;
}

void attn_kv_shard_free(attn_kv_shard *s) {
    if (!s) return;
    attn_kv_cache_free(s->local);
    free(s->glen);
    if (s->comm != MPI_COMM_NULL) MPI_Comm_free(&s->comm);
    free(s);
}

int64_t attn_kv_shard_len(const attn_kv_shard *s, int64_t b) { return s && b >= 0 && b < s->B ? s->glen[b] : -1; }

const attn_kv_cache *attn_kv_shard_local(const attn_kv_shard *s) { return s ? s->local : NULL; }

attn_kv_positions attn_kv_shard_positions(const attn_kv_shard *s) {
    return s ? shard_positions(s) : (attn_kv_positions){NULL, 0, 0, 0};
}

/* rows (b, ., t) of n[b] new tokens at global positions glen[b] + t that
 * this rank holds, packed into k2, v2 (B, Hkv, nmax, .), counts into nl;
 * returns 0 when out of memory */
static int pack_mine(const attn_kv_shard *s, const int64_t *n, attn_view k, attn_view v, int64_t *nl, float **k2,
                     float **v2, int64_t *nmax) {
    *nmax = 0;
    for (int64_t b = 0; b < s->B; b++) {
        nl[b] = 0;
        for (int64_t t = 0; t < n[b]; t++) nl[b] += attn_kv_shard_owner(s, s->glen[b] + t) == s->r;
        *nmax = nl[b] > *nmax ? nl[b] : *nmax;
    }
    size_t rows = (size_t)(s->B * s->Hkv * (*nmax ? *nmax : 1));
    *k2 = malloc(rows * (size_t)s->D * sizeof(float)), *v2 = malloc(rows * (size_t)s->Dv * sizeof(float));
    if (!*k2 || !*v2) return 0;
    for (int64_t b = 0; b < s->B; b++)
        for (int64_t t = 0, at = 0; t < n[b]; t++) {
            if (attn_kv_shard_owner(s, s->glen[b] + t) != s->r) continue;
            for (int64_t h = 0; h < s->Hkv; h++) {
                size_t row = (size_t)((b * s->Hkv + h) * *nmax + at);
                memcpy(*k2 + row * (size_t)s->D, k.data + b * k.stride_b + h * k.stride_h + t * k.stride_s,
                       (size_t)s->D * sizeof(float));
                memcpy(*v2 + row * (size_t)s->Dv, v.data + b * v.stride_b + h * v.stride_h + t * v.stride_s,
                       (size_t)s->Dv * sizeof(float));
            }
            at++;
        }
    return 1;
}

attn_status attn_kv_shard_append(attn_kv_shard *s, const int64_t *n, attn_view k, attn_view v) {
    if (!s) return attn_fail(ATTN_E_INVALID, "the shard is NULL");
    attn_status st = ATTN_OK;
    int64_t *nn = calloc((size_t)s->B, sizeof *nn), *nl = calloc((size_t)s->B, sizeof *nl);
    int64_t *old = calloc((size_t)s->B, sizeof *old);
    if (!nn || !nl || !old) st = ATTN_E_NOMEM;
    if (!st && !n) st = ATTN_E_INVALID;
    for (int64_t b = 0; !st && b < s->B; b++) nn[b] = n[b];
    for (int64_t b = 0; !st && b < s->B; b++) {
        if (nn[b] < 0)
            st = ATTN_E_SHAPE;
        else if (nn[b] > s->capacity - s->glen[b])
            st = ATTN_E_CONTEXT;
    }
    float *k2 = NULL, *v2 = NULL;
    int64_t nmax = 0, any = 0;
    for (int64_t b = 0; b < s->B; b++) any |= nn[b] > 0;
    if (!st && any && (!k.data || !v.data)) st = ATTN_E_INVALID;
    if (!st && !pack_mine(s, nn, k, v, nl, &k2, &v2, &nmax)) st = ATTN_E_NOMEM;
    for (int64_t b = 0; !st && b < s->B; b++) old[b] = attn_kv_cache_len(s->local, b);
    attn_status mine = st;
    if (!st) {
        attn_view lk = {k2, s->Hkv * nmax * s->D, nmax * s->D, s->D},
                  lv = {v2, s->Hkv * nmax * s->Dv, nmax * s->Dv, s->Dv};
        mine = attn_kv_cache_append(s->local, nl, lk, lv);
    }
    /* the same counts everywhere (their sums, weighted by position, compared), appended everywhere */
    int64_t digest[5] = {0, 0, 0, INT64_MIN, INT64_MAX};
    for (int64_t b = 0; n && b < s->B; b++) {
        digest[0] += n[b], digest[1] += n[b] * (b + 1), digest[2] += n[b] * (b + 1) * (b + 1);
        digest[3] = n[b] > digest[3] ? n[b] : digest[3], digest[4] = n[b] < digest[4] ? n[b] : digest[4];
    }
    st = agree(s->comm, digest, 5, mine);
    if (st && !mine) /* another rank failed: undo this rank's rows */
        for (int64_t b = 0; b < s->B; b++) attn_kv_cache_trim(s->local, b, old[b]);
    if (!st)
        for (int64_t b = 0; b < s->B; b++) s->glen[b] += nn[b];
    free(nn), free(nl), free(old), free(k2), free(v2);
    return st;
}

attn_status attn_kv_shard_fork(attn_kv_shard *s, int64_t src, int64_t dst) {
    if (!s) return attn_fail(ATTN_E_INVALID, "the shard is NULL");
    int64_t f[2] = {src, dst};
    attn_status st = src < 0 || src >= s->B || dst < 0 || dst >= s->B ? ATTN_E_INVALID : ATTN_OK;
    st = agree(s->comm, f, 2, st); /* the same fork everywhere (a fork cannot fail once valid) */
    if (!st) st = attn_kv_cache_fork(s->local, src, dst);
    if (!st) s->glen[dst] = s->glen[src];
    return st;
}

/* the states of every rank (all, n x (nq Dv + nq) floats) merged in rank
 * order into out / lse; the sinks last */
static attn_status merge_ranks(const attn_kv_shard *s, const attn_sdpa_desc *d, const float *all, int64_t nq,
                               float *acc, float *la, attn_view out, float *lse) {
    int64_t Dv = d->Dv, per = nq * (Dv + 1);
    memcpy(acc, all, (size_t)(nq * Dv) * sizeof(float));
    memcpy(la, all + nq * Dv, (size_t)nq * sizeof(float));
    attn_status st = ATTN_OK;
    for (int r = 1; !st && r < s->n; r++)
        st = attn_merge_states(nq, Dv, acc, la, all + r * per, all + r * per + nq * Dv, acc, la);
    if (!st && d->sinks) { /* a state of no value, lse = the head's sink */
        float *zero = calloc((size_t)(nq * Dv), sizeof(float)), *ls = malloc((size_t)nq * sizeof(float));
        if (!zero || !ls) st = ATTN_E_NOMEM;
        for (int64_t i = 0; !st && i < nq; i++) ls[i] = d->sinks[(i / d->Sq) % d->H];
        if (!st) st = attn_merge_states(nq, Dv, acc, la, zero, ls, acc, la);
        free(zero), free(ls);
    }
    for (int64_t b = 0; !st && b < d->B; b++)
        for (int64_t h = 0; h < d->H; h++)
            for (int64_t i = 0; i < d->Sq; i++) {
                int64_t row = (b * d->H + h) * d->Sq + i;
                memcpy(out.data + b * out.stride_b + h * out.stride_h + i * out.stride_s, acc + row * Dv,
                       (size_t)Dv * sizeof(float));
                if (lse) lse[row] = la[row];
            }
    return st;
}

attn_status attn_shard_decode(attn_kv_shard *s, const attn_sdpa_desc *d, attn_view q, attn_view out, float *lse,
                              attn_ring_timing *timing) {
    if (!s) return attn_fail(ATTN_E_INVALID, "the shard is NULL");
    double t0 = MPI_Wtime(), tw = 0.0;
    attn_ring_timing tm = {0};
    int64_t f[ATTN_MPI_FIELDS] = {0};
    int nf = ATTN_MPI_FIELDS;
    if (d) attn_mpi_fields(d, f);
    attn_status st = !d ? ATTN_E_INVALID : ATTN_OK;
    if (!st && (d->B != s->B || d->Sq < 1 || d->H < 1 || d->Dv < 1)) st = ATTN_E_SHAPE;
    if (!st && (d->score_mod || d->mask_mod || d->block_mask)) /* programmable rules: not over shards */
        st = ATTN_E_UNSUPPORTED;
    int64_t nq = st ? 0 : d->B * d->H * d->Sq, Dv = st ? 0 : d->Dv, per = nq * (Dv + 1);
    if (!st && (double)per * s->n * sizeof(float) > (double)INT_MAX) st = ATTN_E_OVERFLOW;
    float *mine = NULL, *all = NULL, *acc = NULL, *la = NULL;
    if (!st) {
        mine = malloc((size_t)(per + 1) * sizeof(float)), all = malloc((size_t)((per + 1) * s->n) * sizeof(float));
        acc = malloc((size_t)(nq * Dv) * sizeof(float)), la = malloc((size_t)nq * sizeof(float));
        if (!mine || !all || !acc || !la) st = ATTN_E_NOMEM;
    }
    if (!st) { /* this shard's share, without the sinks (merged in once, last) */
        attn_sdpa_desc e = *d;
        e.sinks = NULL;
        attn_kv_positions pos = shard_positions(s);
        attn_view o = {mine, d->H * d->Sq * Dv, d->Sq * Dv, Dv};
        st = attn_kv_cache_attend_at(s->local, &e, &pos, q, o, mine + nq * Dv);
    }
    /* two collectives: the problem and every rank's status agreed, then every rank's state to every rank */
    double tc = MPI_Wtime();
    st = agree(s->comm, f, nf, st);
    if (!st && MPI_Allgather(mine, (int)per, MPI_FLOAT, all, (int)per, MPI_FLOAT, s->comm) != MPI_SUCCESS)
        st = ATTN_E_COMM;
    tw += MPI_Wtime() - tc;
    if (!st) st = merge_ranks(s, d, all, nq, acc, la, out, lse);
    free(mine), free(all), free(acc), free(la);
    tm.total_s = MPI_Wtime() - t0, tm.wait_s = tw, tm.compute_s = tm.total_s - tw, tm.steps = 1;
    tm.bytes_sent = st ? 0 : per * (int64_t)sizeof(float) * (s->n - 1);
    if (timing) *timing = tm;
    return st;
}

/* The K/V rows of this rank's ring shard (positions from attn_ring_shard)
 * that rank `to` holds, in order (b, position, kv head), K then V of each:
 * packed into buf (NULL: counted only); returns the floats */
static int64_t rows_for(const attn_kv_shard *s, int64_t S, attn_ring_layout layout, int from, int to, attn_view k,
                        attn_view v, float *buf) {
    int64_t st[2], ln[2], w = s->D + s->Dv, at = 0, j0 = 0;
    attn_ring_shard(S, s->n, from, layout, st, ln);
    for (int64_t b = 0; b < s->B; b++) {
        j0 = 0; /* the row's index within the sender's shard */
        for (int p = 0; p < 2; p++)
            for (int64_t g = st[p]; g < st[p] + ln[p]; g++, j0++) {
                if (attn_kv_shard_owner(s, g) != to) continue;
                for (int64_t h = 0; h < s->Hkv && buf; h++, at += w) {
                    memcpy(buf + at, k.data + b * k.stride_b + h * k.stride_h + j0 * k.stride_s,
                           (size_t)s->D * sizeof(float));
                    memcpy(buf + at + s->D, v.data + b * v.stride_b + h * v.stride_h + j0 * v.stride_s,
                           (size_t)s->Dv * sizeof(float));
                }
                if (!buf) at += s->Hkv * w;
            }
    }
    return at;
}

/* the rows received from every rank (recv, at displs) into this rank's
 * packed (B, Hkv, nl, .) k2, v2 at their local indices */
static void place_rows(const attn_kv_shard *s, int64_t S, attn_ring_layout layout, const float *recv, const int *displs,
                       int64_t nl, float *k2, float *v2) {
    int64_t w = s->D + s->Dv;
    for (int from = 0; from < s->n; from++) {
        int64_t st[2], ln[2];
        const float *p = recv + displs[from];
        attn_ring_shard(S, s->n, from, layout, st, ln);
        for (int64_t b = 0; b < s->B; b++)
            for (int q = 0; q < 2; q++)
                for (int64_t g = st[q]; g < st[q] + ln[q]; g++) {
                    if (attn_kv_shard_owner(s, g) != s->r) continue;
                    for (int64_t h = 0; h < s->Hkv; h++, p += w) {
                        size_t row = (size_t)((b * s->Hkv + h) * nl + local_index(s, g));
                        memcpy(k2 + row * (size_t)s->D, p, (size_t)s->D * sizeof(float));
                        memcpy(v2 + row * (size_t)s->Dv, p + s->D, (size_t)s->Dv * sizeof(float));
                    }
                }
    }
}

/* every K/V row of the prompt (S tokens) to the rank holding it, appended
 * there: the counts and buffers ready on every rank (agreed with the
 * problem's scalars f) before the exchange; the status every rank returns */
static attn_status move_rows(attn_kv_shard *s, int64_t S, attn_ring_layout layout, attn_view k, attn_view v,
                             const int64_t *f, int nf) {
    int *sc = calloc((size_t)s->n, sizeof(int)), *sd = calloc((size_t)s->n, sizeof(int));
    int *rc = calloc((size_t)s->n, sizeof(int)), *rd = calloc((size_t)s->n, sizeof(int));
    attn_status st = sc && sd && rc && rd ? ATTN_OK : ATTN_E_NOMEM;
    int64_t ts = 0, tr = 0, nl = 0;
    for (int p = 0; !st && p < s->n; p++) {
        int64_t a = rows_for(s, S, layout, s->r, p, k, v, NULL), b = rows_for(s, S, layout, p, s->r, k, v, NULL);
        if (ts + a > INT_MAX || tr + b > INT_MAX) st = ATTN_E_OVERFLOW;
        sc[p] = (int)a, sd[p] = (int)ts, rc[p] = (int)b, rd[p] = (int)tr, ts += a, tr += b;
    }
    for (int64_t g = 0; g < S; g++) nl += attn_kv_shard_owner(s, g) == s->r;
    float *send = malloc((size_t)(ts ? ts : 1) * sizeof(float)), *recv = malloc((size_t)(tr ? tr : 1) * sizeof(float));
    size_t rows = (size_t)(s->B * s->Hkv * (nl ? nl : 1));
    float *k2 = malloc(rows * (size_t)s->D * sizeof(float)), *v2 = malloc(rows * (size_t)s->Dv * sizeof(float));
    if (!st && (!send || !recv || !k2 || !v2)) st = ATTN_E_NOMEM;
    for (int p = 0; !st && p < s->n; p++) rows_for(s, S, layout, s->r, p, k, v, send + sd[p]);
    st = agree(s->comm, f, nf, st); /* every rank ready: the exchange's counts match pairwise */
    if (!st && MPI_Alltoallv(send, sc, sd, MPI_FLOAT, recv, rc, rd, MPI_FLOAT, s->comm) != MPI_SUCCESS)
        st = ATTN_E_COMM;
    attn_status mine = st;
    if (!st) {
        place_rows(s, S, layout, recv, rd, nl, k2, v2);
        int64_t *n = malloc((size_t)s->B * sizeof *n);
        for (int64_t b = 0; n && b < s->B; b++) n[b] = nl;
        attn_view lk = {k2, s->Hkv * nl * s->D, nl * s->D, s->D}, lv = {v2, s->Hkv * nl * s->Dv, nl * s->Dv, s->Dv};
        mine = n ? attn_kv_cache_append(s->local, n, lk, lv) : ATTN_E_NOMEM;
        free(n);
        st = agree(s->comm, f, nf, mine);
        if (st && !mine) attn_kv_cache_reset(s->local, -1); /* another rank failed: the sequences stay empty */
    }
    free(sc), free(sd), free(rc), free(rd), free(send), free(recv), free(k2), free(v2);
    return st;
}

attn_status attn_shard_prefill(attn_kv_shard *s, const attn_sdpa_desc *d, attn_ring_layout layout, attn_view q,
                               attn_view k, attn_view v, attn_view out, float *lse, attn_ring_timing *timing) {
    if (!s) return attn_fail(ATTN_E_INVALID, "the shard is NULL");
    int64_t f[ATTN_MPI_FIELDS + 1] = {0};
    int nf = ATTN_MPI_FIELDS + 1;
    if (d) attn_mpi_fields(d, f);
    f[ATTN_MPI_FIELDS] = (int64_t)layout;
    attn_status st = !d ? ATTN_E_INVALID : ATTN_OK;
    for (int64_t b = 0; !st && b < s->B; b++)
        if (s->glen[b] != 0) st = ATTN_E_INVALID; /* a prompt fills empty sequences */
    if (!st && (d->qkv_dtype != ATTN_DTYPE_INVALID && d->qkv_dtype != ATTN_DTYPE_F32)) st = ATTN_E_UNSUPPORTED;
    if (!st && (d->score_mod || d->mask_mod || d->block_mask)) /* programmable rules: not over shards */
        st = ATTN_E_UNSUPPORTED;
    if (!st && (d->B != s->B || attn_kv_cache_get_config(s->local)->kv_heads != (d->Hkv ? d->Hkv : d->H) ||
                d->D != s->D || d->Dv != s->Dv || d->Sq != d->Sk))
        st = ATTN_E_SHAPE;
    if (!st && d->Sk > s->capacity) st = ATTN_E_CONTEXT;
    st = agree(s->comm, f, nf, st);
    if (st) return st;
    st = attn_ring_forward(s->comm, d, layout, q, k, v, out, lse, timing); /* the same status everywhere */
    if (st) return st;
    st = move_rows(s, d->Sk, layout, k, v, f, nf);
    for (int64_t b = 0; !st && b < s->B; b++) s->glen[b] = d->Sk;
    return st;
}
