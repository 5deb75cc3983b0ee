/* Ring attention over MPI (include/attn_mpi.h, docs/RING.md).
 *
 * Every rank holds its query rows and its K/V shard. In each of n steps a
 * rank computes its rows against the K/V shard it holds (one block per pair
 * of query piece and key piece, described with the block fields of
 * attn_sdpa_desc so that causality, windows, key lengths, padding and ALiBi
 * follow the global positions), while the shard moves on to the next rank
 * (non-blocking send/receive into a second buffer: double buffering).
 * Partial results merge by log-sum-exp in step order, which is the same on
 * every run: results do not depend on timing.
 *
 * Backward: a first ring folds each row's softmax statistics over all key
 * blocks (attn_sdpa_block_stats: PyTorch's rowsum(P dP), see SEMANTICS.md);
 * a second ring carries K, V and their dK, dV accumulators; each rank adds
 * its share and passes the accumulators on, and after n steps they arrive
 * home. The accumulator of a step is sent after that step's compute and
 * received during the next step's compute, so it overlaps too.
 *
 * Failures: every rank keeps the communication pattern going and the ranks
 * agree on one status at the end (MPI_Allreduce), so an error on one rank
 * never leaves another waiting. MPI errors return (a private duplicate of
 * the caller's communicator with MPI_ERRORS_RETURN) as ATTN_E_COMM. */
#include "attn_mpi.h"
#include "internal.h"

#include "base/sem.h"
#include "fields.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { TAG_KV = 11, TAG_DKV = 12 };

int64_t attn_ring_shard(int64_t S, int n, int r, attn_ring_layout layout, int64_t start[2], int64_t len[2]) {
    if (S < 0 || n < 1 || r < 0 || r >= n || !start || !len) return -1;
    if (layout == ATTN_RING_CONTIGUOUS) {
        start[0] = S * r / n, len[0] = S * (r + 1) / n - start[0];
        start[1] = start[0] + len[0], len[1] = 0;
    } else if (layout == ATTN_RING_ZIGZAG) {
        int64_t m = 2 * (int64_t)n, c1 = 2 * (int64_t)n - 1 - r;
        start[0] = S * r / m, len[0] = S * (r + 1) / m - start[0];
        start[1] = S * c1 / m, len[1] = S * (c1 + 1) / m - start[1];
    } else {
        return -1;
    }
    return len[0] + len[1];
}

typedef struct ring {
    MPI_Comm comm;
    int n, r, prev, next;
    const attn_sdpa_desc *d;
    attn_ring_layout layout;
    int64_t B, H, Hkv, D, Dv, es; /* es: bytes per q/k/v element */
    int64_t qs[2], ql[2], nq;     /* this rank's query pieces */
    int64_t kmax;                 /* the most keys any rank holds */
    attn_ring_timing tm;
    int mpi_failed;
    MPI_Request *pending; /* the step's messages in flight (polled between blocks) */
    int npending;
} ring;

static double now(void) { return MPI_Wtime(); }

static void mpi_ok(ring *R, int rc) {
    if (rc != MPI_SUCCESS) R->mpi_failed = 1;
}

/* the key pieces of rank src, and their offsets within its shard */
static int64_t kpieces(const ring *R, int src, int64_t ks[2], int64_t kl[2], int64_t klo[2]) {
    int64_t n = attn_ring_shard(R->d->Sk, R->n, src, R->layout, ks, kl);
    klo[0] = 0, klo[1] = kl[0];
    return n;
}

/* element i of an array of es-byte elements */
static void *at(const void *base, int64_t es, int64_t i) { return (char *)base + (size_t)(i * es); }

static attn_view view_of(const void *data, int64_t es, int64_t sb, int64_t sh, int64_t ss, int64_t row0) {
    attn_view v = {(float *)at(data, es, row0 * ss), sb, sh, ss};
    return v;
}

/* the block desc of query piece p against key piece [ks, ks + kl) */
static attn_sdpa_desc block_desc(const ring *R, int p, int64_t ks, int64_t kl) {
    attn_sdpa_desc e = *R->d;
    e.Sq = R->ql[p], e.Sk = kl, e.q_start = R->qs[p], e.k_start = ks;
    e.Sq_total = R->d->Sq, e.Sk_total = R->d->Sk;
    return e;
}

/* can any row of the block see any key of it (before padding)? */
static int block_visible(const attn_sdpa_desc *e) {
    if (e->Sq == 0 || e->Sk == 0) return 0;
    for (int64_t b = 0; b < e->B; b++) {
        int64_t lo, hi, skb = attn_sem_sk(e, b);
        attn_sem_rows_range(e, skb, attn_sem_off(e, b), 0, e->Sq, &lo, &hi);
        if (hi > lo) return 1;
    }
    return 0;
}

/* agree on one status over the ring: the first nonzero by status value */
static attn_status agree(ring *R, attn_status st) {
    int local = R->mpi_failed ? ATTN_E_COMM : (int)st, all = local;
    if (MPI_Allreduce(&local, &all, 1, MPI_INT, MPI_MAX, R->comm) != MPI_SUCCESS) all = ATTN_E_COMM;
    return (attn_status)all;
}

/* checks every rank can make alone, the same problem on every rank, and the setup */
static attn_status ring_init(ring *R, MPI_Comm comm, const attn_sdpa_desc *d, attn_ring_layout layout) {
    attn_err_clear();
    memset(R, 0, sizeof *R);
    R->comm = MPI_COMM_NULL;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited || comm == MPI_COMM_NULL)
        return attn_fail(ATTN_E_INVALID, "%s", inited ? "comm is MPI_COMM_NULL" : "MPI is not initialized");
    if (MPI_Comm_dup(comm, &R->comm) != MPI_SUCCESS) return attn_fail(ATTN_E_COMM, "MPI_Comm_dup failed");
    MPI_Comm_set_errhandler(R->comm, MPI_ERRORS_RETURN);
    MPI_Comm_size(R->comm, &R->n);
    MPI_Comm_rank(R->comm, &R->r);
    R->prev = (R->r + R->n - 1) % R->n, R->next = (R->r + 1) % R->n;
    R->d = d, R->layout = layout;
    attn_status st = ATTN_OK;
    if (!d || (layout != ATTN_RING_CONTIGUOUS && layout != ATTN_RING_ZIGZAG))
        st =
            d ? attn_fail(ATTN_E_INVALID, "layout = %d: ATTN_RING_CONTIGUOUS or ATTN_RING_ZIGZAG expected", (int)layout)
              : attn_fail(ATTN_E_INVALID, "the descriptor is NULL");
    /* the same problem everywhere: compare the scalar fields */
    int64_t mine[ATTN_MPI_FIELDS + 1] = {0}, lo[ATTN_MPI_FIELDS + 1], hi[ATTN_MPI_FIELDS + 1];
    if (d) attn_mpi_fields(d, mine);
    mine[ATTN_MPI_FIELDS] = (int64_t)layout;
    if (MPI_Allreduce(mine, lo, ATTN_MPI_FIELDS + 1, MPI_INT64_T, MPI_MIN, R->comm) != MPI_SUCCESS ||
        MPI_Allreduce(mine, hi, ATTN_MPI_FIELDS + 1, MPI_INT64_T, MPI_MAX, R->comm) != MPI_SUCCESS)
        return attn_fail(ATTN_E_COMM, "MPI_Allreduce of the problem's fields failed");
    if (!st && memcmp(lo, hi, sizeof lo) != 0) /* ranks disagree on the problem */
        st = attn_fail(ATTN_E_INVALID, "the ranks' descriptors or layouts differ (every rank passes the same problem)");
    if (!st && (d->dropout || d->sinks || d->attn_mask || d->attn_bias || attn_sem_is_block(d) || d->score_mod ||
                d->mask_mod || d->block_mask))
        st = attn_fail(ATTN_E_UNSUPPORTED, "%s over the ring",
                       d->dropout                     ? "dropout"
                       : d->sinks                     ? "sinks"
                       : d->attn_mask || d->attn_bias ? "a dense mask or bias"
                       : attn_sem_is_block(d)         ? "a block of a larger problem"
                                                      : "score_mod, mask_mod or block_mask");
    if (!st && (d->B < 1 || d->H < 1 || d->D < 1 || d->Dv < 1 || d->Sq < 0 || d->Sk < 0))
        st = attn_fail(ATTN_E_SHAPE,
                       "B = %lld, H = %lld, D = %lld, Dv = %lld, Sq = %lld, Sk = %lld: B, H, D, Dv >= 1 "
                       "and Sq, Sk >= 0 expected",
                       (long long)d->B, (long long)d->H, (long long)d->D, (long long)d->Dv, (long long)d->Sq,
                       (long long)d->Sk);
    if (st) return st;
    R->B = d->B, R->H = d->H, R->Hkv = attn_sem_hkv(d), R->D = d->D, R->Dv = d->Dv;
    if (R->H % R->Hkv)
        return attn_fail(ATTN_E_SHAPE, "H = %lld, Hkv = %lld: H a multiple of Hkv expected", (long long)R->H,
                         (long long)R->Hkv);
    R->es = (d->qkv_dtype == ATTN_DTYPE_F16 || d->qkv_dtype == ATTN_DTYPE_BF16) ? 2 : 4;
    R->nq = attn_ring_shard(d->Sq, R->n, R->r, layout, R->qs, R->ql);
    for (int src = 0; src < R->n; src++) {
        int64_t ks[2], kl[2];
        int64_t m = attn_ring_shard(d->Sk, R->n, src, layout, ks, kl);
        R->kmax = m > R->kmax ? m : R->kmax;
    }
    /* one K/V message: B * Hkv * kmax * (D + Dv) elements of 4 bytes at most */
    double bytes = (double)R->B * (double)R->Hkv * (double)R->kmax * (double)(R->D + R->Dv) * 4.0;
    if (bytes > (double)INT_MAX)
        return attn_fail(ATTN_E_OVERFLOW, "a K / V message of %.0f bytes: at most 2^31 - 1 (MPI's count)", bytes);
    return ATTN_OK;
}

static void ring_done(ring *R, attn_ring_timing *timing, double t0) {
    R->tm.total_s = now() - t0;
    if (timing) *timing = R->tm;
    if (R->comm != MPI_COMM_NULL) MPI_Comm_free(&R->comm);
}

/* After ring_init: 1 (with *st the status to return, the ring released) when
 * no step can run (no communicator, or the communicator failed); 0 otherwise,
 * *st then still carrying a local error the ring agrees on later. */
static int ring_failed(ring *R, attn_status *st, attn_ring_timing *timing, double t0) {
    if (*st != ATTN_E_COMM && R->comm != MPI_COMM_NULL) return 0;
    ring_done(R, timing, t0);
    if (!*st) *st = ATTN_E_COMM;
    return 1;
}

/* this rank's K and V rows into a message: K (B, Hkv, nk, D) then V (B, Hkv, nk, Dv), es-byte elements */
static void pack_kv(const ring *R, attn_view k, attn_view v, int64_t nk, void *buf) {
    int64_t es = R->es;
    void *vb = at(buf, es, R->B * R->Hkv * nk * R->D);
    for (int64_t b = 0; b < R->B; b++)
        for (int64_t h = 0; h < R->Hkv; h++)
            for (int64_t j = 0; j < nk; j++) {
                int64_t row = (b * R->Hkv + h) * nk + j;
                memcpy(at(buf, es, row * R->D), at(k.data, es, b * k.stride_b + h * k.stride_h + j * k.stride_s),
                       (size_t)(R->D * es));
                memcpy(at(vb, es, row * R->Dv), at(v.data, es, b * v.stride_b + h * v.stride_h + j * v.stride_s),
                       (size_t)(R->Dv * es));
            }
}

/* the K and V views of key piece c of a message from a rank holding nk keys */
static void kv_views(const ring *R, const void *buf, int64_t es, int64_t nk, int64_t klo, attn_view *k, attn_view *v) {
    const void *vb = at(buf, es, R->B * R->Hkv * nk * R->D);
    *k = view_of(buf, es, R->Hkv * nk * R->D, nk * R->D, R->D, klo);
    *v = view_of(vb, es, R->Hkv * nk * R->Dv, nk * R->Dv, R->Dv, klo);
}

/* the rows of query piece p within this rank's views */
static attn_view qpiece(const ring *R, attn_view t, int64_t es, int p) {
    attn_view x = t;
    x.data = (float *)at(t.data, es, (p ? R->ql[0] : 0) * t.stride_s);
    return x;
}

/* out, lse of a block (B, H, ql, Dv) merged into the rank's (B, H, nq, Dv) by log-sum-exp */
static void merge(const ring *R, int p, const float *po, const float *pl, float *ao, float *al) {
    int64_t lo = p ? R->ql[0] : 0, Dv = R->Dv;
    for (int64_t bh = 0; bh < R->B * R->H; bh++)
        for (int64_t i = 0; i < R->ql[p]; i++) {
            float lp = pl[bh * R->ql[p] + i];
            size_t row = (size_t)(bh * R->nq + lo + i);
            float la = al[row], *o = ao + row * (size_t)Dv;
            const float *op = po + (size_t)(bh * R->ql[p] + i) * (size_t)Dv;
            if (lp == -INFINITY) continue;
            if (la == -INFINITY) {
                memcpy(o, op, (size_t)Dv * sizeof(float));
                al[row] = lp;
                continue;
            }
            double M = la > lp ? la : lp, wa = exp((double)la - M), wp = exp((double)lp - M), s = wa + wp;
            for (int64_t c = 0; c < Dv; c++) o[c] = (float)((wa * o[c] + wp * op[c]) / s);
            al[row] = (float)(M + log(s));
        }
}

/* post step s's K/V exchange: send the shard of src (in kv[cur]) on, receive
 * the next one (of rank `from`) into kv[cur ^ 1]; nothing at the last step */
static void post_kv(ring *R, int s, int src, int from, void *const kv[2], int cur, MPI_Request rq[2]) {
    rq[0] = rq[1] = MPI_REQUEST_NULL;
    if (s >= R->n - 1) return;
    int64_t ks[2], kl[2], klo[2], nsrc = kpieces(R, src, ks, kl, klo), nfrom = kpieces(R, from, ks, kl, klo);
    int out = (int)(R->B * R->Hkv * nsrc * (R->D + R->Dv) * R->es);
    int in = (int)(R->B * R->Hkv * nfrom * (R->D + R->Dv) * R->es);
    mpi_ok(R, MPI_Irecv(kv[cur ^ 1], in, MPI_BYTE, R->prev, TAG_KV, R->comm, &rq[0]));
    mpi_ok(R, MPI_Isend(kv[cur], out, MPI_BYTE, R->next, TAG_KV, R->comm, &rq[1]));
    R->tm.bytes_sent += out;
}

/* One ring of K/V: step s computes on the shard of rank (r - s) mod n held
 * in cur while it moves on. fn(R, src, buf, ctx) does the step's work. */
typedef attn_status (*step_fn)(ring *R, int src, const void *buf, void *ctx);

static attn_status kv_ring(ring *R, attn_view k, attn_view v, step_fn fn, void *ctx) {
    size_t cap = (size_t)(R->B * R->Hkv * R->kmax * (R->D + R->Dv) * R->es);
    void *buf[2] = {malloc(cap ? cap : 1), malloc(cap ? cap : 1)};
    attn_status st = buf[0] && buf[1] ? ATTN_OK : ATTN_E_NOMEM;
    int64_t ks[2], kl[2], klo[2], mine = kpieces(R, R->r, ks, kl, klo);
    st = agree(R, st); /* a rank without buffers must not leave the others waiting */
    if (st) {
        free(buf[0]), free(buf[1]);
        return st;
    }
    pack_kv(R, k, v, mine, buf[0]);
    for (int s = 0, cur = 0; s < R->n; s++, cur ^= 1) {
        int src = (R->r - s + R->n) % R->n, from = (R->r - s - 1 + 2 * R->n) % R->n;
        MPI_Request rq[2];
        post_kv(R, s, src, from, buf, cur, rq); /* send what we hold on, receive the next shard */
        R->pending = rq, R->npending = 2;
        double t = now();
        if (!st && !R->mpi_failed) st = fn(R, src, buf[cur], ctx);
        R->npending = 0;
        double t2 = now();
        R->tm.compute_s += t2 - t;
        mpi_ok(R, MPI_Waitall(2, rq, MPI_STATUSES_IGNORE));
        R->tm.wait_s += now() - t2;
        R->tm.steps++;
    }
    free(buf[0]), free(buf[1]);
    return st;
}

/* Every visible block of a step: this rank's query piece p against key
 * piece pc of the shard of src held in buf (K, V views into it). */
typedef attn_status (*block_fn)(ring *R, int p, const attn_sdpa_desc *e, attn_view k, attn_view v, int64_t nk,
                                int64_t klo, void *ctx);

static attn_status each_block(ring *R, int src, const void *buf, block_fn fn, void *ctx) {
    int64_t ks[2], kl[2], klo[2], nk = kpieces(R, src, ks, kl, klo);
    for (int p = 0; p < 2; p++)
        for (int pc = 0; pc < 2; pc++) {
            attn_sdpa_desc e = block_desc(R, p, ks[pc], kl[pc]);
            if (!block_visible(&e)) continue;
            attn_view kv, vv;
            kv_views(R, buf, R->es, nk, klo[pc], &kv, &vv);
            attn_status st = fn(R, p, &e, kv, vv, nk, klo[pc], ctx);
            if (st) return st;
            if (R->npending) { /* let MPI progress the messages in flight (no progress thread) */
                int done;
                mpi_ok(R, MPI_Testall(R->npending, R->pending, &done, MPI_STATUSES_IGNORE));
            }
        }
    return ATTN_OK;
}

/* ---- forward ---------------------------------------------------------------- */

typedef struct fwd_ctx {
    attn_view q;
    float *acc_o, *acc_l, *po, *pl; /* the rank's (B,H,nq,Dv) / (B,H,nq); one block's */
} fwd_ctx;

static attn_status fwd_block(ring *R, int p, const attn_sdpa_desc *e, attn_view kv, attn_view vv, int64_t nk,
                             int64_t klo, void *vctx) {
    (void)nk, (void)klo;
    fwd_ctx *c = vctx;
    attn_view o = {c->po, R->H * e->Sq * R->Dv, e->Sq * R->Dv, R->Dv};
    attn_status st = attn_sdpa_forward(e, qpiece(R, c->q, R->es, p), kv, vv, o, c->pl);
    if (!st) merge(R, p, c->po, c->pl, c->acc_o, c->acc_l);
    return st;
}

static attn_status fwd_step(ring *R, int src, const void *buf, void *ctx) {
    return each_block(R, src, buf, fwd_block, ctx);
}

attn_status attn_ring_forward(MPI_Comm comm, const attn_sdpa_desc *d, attn_ring_layout layout, attn_view q, attn_view k,
                              attn_view v, attn_view out, float *lse, attn_ring_timing *timing) {
    double t0 = MPI_Wtime();
    ring R;
    attn_status st = ring_init(&R, comm, d, layout);
    if (ring_failed(&R, &st, timing, t0)) return st;
    int64_t rows = R.B * R.H * R.nq;
    fwd_ctx c = {q, NULL, NULL, NULL, NULL};
    if (!st && rows > 0 && (!q.data || !out.data)) st = ATTN_E_INVALID;
    if (!st) {
        size_t no = (size_t)(rows * R.Dv) + 1, nl = (size_t)rows + 1;
        c.acc_o = calloc(no, sizeof(float)), c.acc_l = malloc(nl * sizeof(float));
        c.po = malloc(no * sizeof(float)), c.pl = malloc(nl * sizeof(float));
        if (!c.acc_o || !c.acc_l || !c.po || !c.pl) st = ATTN_E_NOMEM;
        for (int64_t i = 0; !st && i < rows; i++) c.acc_l[i] = -INFINITY;
    }
    st = agree(&R, st); /* every rank starts the ring, or none does */
    if (!st) st = kv_ring(&R, k, v, fwd_step, &c);
    st = agree(&R, st);
    for (int64_t bh = 0; !st && bh < R.B * R.H; bh++) /* the merged rows into out (and lse) */
        for (int64_t i = 0; i < R.nq; i++) {
            float *o = out.data + (bh / R.H) * out.stride_b + (bh % R.H) * out.stride_h + i * out.stride_s;
            memcpy(o, c.acc_o + (size_t)(bh * R.nq + i) * (size_t)R.Dv, (size_t)R.Dv * sizeof(float));
            if (lse) lse[bh * R.nq + i] = c.acc_l[bh * R.nq + i];
        }
    free(c.acc_o), free(c.acc_l), free(c.po), free(c.pl);
    ring_done(&R, timing, t0);
    return st;
}

/* ---- backward ----------------------------------------------------------------- */

typedef struct bwd_ctx {
    attn_view q, dout;
    float *m[2], *l[2], *t[2]; /* per query piece (B, H, ql[p]) */
    float *dq, *pdq;           /* the rank's (B,H,nq,D); one block's (B,H,ql,D) */
    float *dkv, *pdk, *pdv;    /* a step's dK,dV share (B,Hkv,kmax,D+Dv layout of the message); one block's */
} bwd_ctx;

static attn_status stats_block(ring *R, int p, const attn_sdpa_desc *e, attn_view kv, attn_view vv, int64_t nk,
                               int64_t klo, void *vctx) {
    (void)nk, (void)klo;
    bwd_ctx *c = vctx;
    return attn_sdpa_block_stats(e, qpiece(R, c->q, R->es, p), kv, vv, qpiece(R, c->dout, 4, p), c->m[p], c->l[p],
                                 c->t[p]);
}

static attn_status stats_step(ring *R, int src, const void *buf, void *ctx) {
    return each_block(R, src, buf, stats_block, ctx);
}

/* this rank's share of the gradients for one block: dq into c->dq, dK/dV
 * added into c->dkv in the message layout of the shard (nk keys) */
static attn_status grad_block(ring *R, int p, const attn_sdpa_desc *e, attn_view kv, attn_view vv, int64_t nk,
                              int64_t klo, void *vctx) {
    bwd_ctx *c = vctx;
    attn_view gq = {c->pdq, R->H * e->Sq * R->D, e->Sq * R->D, R->D};
    attn_view bk = {c->pdk, R->Hkv * e->Sk * R->D, e->Sk * R->D, R->D};
    attn_view bv = {c->pdv, R->Hkv * e->Sk * R->Dv, e->Sk * R->Dv, R->Dv};
    attn_status st = attn_sdpa_block_backward(e, qpiece(R, c->q, R->es, p), kv, vv, qpiece(R, c->dout, 4, p), c->m[p],
                                              c->l[p], c->t[p], gq, bk, bv);
    if (st) return st;
    int64_t lo = p ? R->ql[0] : 0;
    for (int64_t bh = 0; bh < R->B * R->H; bh++)
        for (int64_t i = 0; i < e->Sq; i++) {
            float *a = c->dq + (size_t)(bh * R->nq + lo + i) * (size_t)R->D;
            const float *g = c->pdq + (size_t)(bh * e->Sq + i) * (size_t)R->D;
            for (int64_t x = 0; x < R->D; x++) a[x] += g[x];
        }
    attn_view gk, gv;
    kv_views(R, c->dkv, 4, nk, klo, &gk, &gv);
    for (int64_t b = 0; b < R->B; b++)
        for (int64_t h = 0; h < R->Hkv; h++)
            for (int64_t j = 0; j < e->Sk; j++) {
                float *ak = gk.data + b * gk.stride_b + h * gk.stride_h + j * gk.stride_s;
                float *av = gv.data + b * gv.stride_b + h * gv.stride_h + j * gv.stride_s;
                const float *sk = c->pdk + ((b * R->Hkv + h) * e->Sk + j) * R->D;
                const float *sv = c->pdv + ((b * R->Hkv + h) * e->Sk + j) * R->Dv;
                for (int64_t x = 0; x < R->D; x++) ak[x] += sk[x];
                for (int64_t x = 0; x < R->Dv; x++) av[x] += sv[x];
            }
    return ATTN_OK;
}

static attn_status grad_step(ring *R, int src, const void *buf, void *ctx) {
    bwd_ctx *c = ctx;
    int64_t ks[2], kl[2], klo[2], nk = kpieces(R, src, ks, kl, klo);
    memset(c->dkv, 0, (size_t)(R->B * R->Hkv * nk * (R->D + R->Dv)) * sizeof(float));
    return each_block(R, src, buf, grad_block, ctx);
}

/* the second ring: K/V move as in kv_ring; the dK/dV accumulator of the
 * block a rank just worked on follows one step behind, and after n steps
 * each accumulator is home (in *home). */
static attn_status grad_ring(ring *R, attn_view k, attn_view v, bwd_ctx *c, float **home) {
    size_t cap = (size_t)(R->B * R->Hkv * R->kmax * (R->D + R->Dv));
    void *kvb[2] = {malloc(cap * (size_t)R->es + 1), malloc(cap * (size_t)R->es + 1)};
    float *acc[2] = {calloc(cap + 1, sizeof(float)), calloc(cap + 1, sizeof(float))};
    attn_status st = kvb[0] && kvb[1] && acc[0] && acc[1] ? ATTN_OK : ATTN_E_NOMEM;
    int64_t ks[2], kl[2], klo[2], mine = kpieces(R, R->r, ks, kl, klo);
    st = agree(R, st);
    if (st) {
        free(kvb[0]), free(kvb[1]), free(acc[0]), free(acc[1]);
        return st;
    }
    pack_kv(R, k, v, mine, kvb[0]);
    MPI_Request arq[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL}; /* the accumulator in flight */
    int a = 0;                                                 /* acc[a]: this step's accumulator */
    for (int s = 0, cur = 0; s < R->n; s++, cur ^= 1) {
        int src = (R->r - s + R->n) % R->n, from = (R->r - s - 1 + 2 * R->n) % R->n;
        MPI_Request rq[2];
        int64_t nsrc = kpieces(R, src, ks, kl, klo);
        post_kv(R, s, src, from, kvb, cur, rq);
        MPI_Request inflight[4] = {rq[0], rq[1], arq[0], arq[1]};
        R->pending = inflight, R->npending = 4;
        double t = now();
        if (!st && !R->mpi_failed) st = grad_step(R, src, kvb[cur], c);
        R->npending = 0;
        rq[0] = inflight[0], rq[1] = inflight[1], arq[0] = inflight[2], arq[1] = inflight[3];
        double t2 = now();
        R->tm.compute_s += t2 - t;
        mpi_ok(R, MPI_Waitall(2, arq, MPI_STATUSES_IGNORE)); /* src's accumulator (step 0: our own, zero) */
        double t3 = now();
        R->tm.wait_s += t3 - t2;
        int count = (int)(R->B * R->Hkv * nsrc * (R->D + R->Dv));
        if (!st)
            for (int i = 0; i < count; i++) acc[a][i] += c->dkv[i];
        if (R->n > 1) { /* on to the next rank; the one after src's comes from prev */
            int64_t nfrom = kpieces(R, from, ks, kl, klo);
            int in = (int)(R->B * R->Hkv * (s < R->n - 1 ? nfrom : mine) * (R->D + R->Dv));
            mpi_ok(R, MPI_Irecv(acc[a ^ 1], in, MPI_FLOAT, R->prev, TAG_DKV, R->comm, &arq[0]));
            mpi_ok(R, MPI_Isend(acc[a], count, MPI_FLOAT, R->next, TAG_DKV, R->comm, &arq[1]));
            R->tm.bytes_sent += (int64_t)count * 4;
            a ^= 1;
        }
        R->tm.compute_s += now() - t3;
        double t4 = now();
        mpi_ok(R, MPI_Waitall(2, rq, MPI_STATUSES_IGNORE));
        R->tm.wait_s += now() - t4;
        R->tm.steps++;
    }
    double t5 = now();
    mpi_ok(R, MPI_Waitall(2, arq, MPI_STATUSES_IGNORE)); /* our own accumulator, home */
    R->tm.wait_s += now() - t5;
    free(kvb[0]), free(kvb[1]);
    *home = acc[a];
    free(acc[a ^ 1]);
    return st;
}

attn_status attn_ring_backward(MPI_Comm comm, const attn_sdpa_desc *d, attn_ring_layout layout, attn_view q,
                               attn_view k, attn_view v, attn_view dout, attn_view dq, attn_view dk, attn_view dv,
                               attn_ring_timing *timing) {
    double t0 = MPI_Wtime();
    ring R;
    attn_status st = ring_init(&R, comm, d, layout);
    if (ring_failed(&R, &st, timing, t0)) return st;
    bwd_ctx c;
    memset(&c, 0, sizeof c);
    c.q = q, c.dout = dout;
    int64_t rows = R.B * R.H * R.nq, ks[2], kl[2], klo[2], mine = st ? 0 : kpieces(&R, R.r, ks, kl, klo);
    if (!st && rows > 0 && (!q.data || !dout.data || !dq.data)) st = ATTN_E_INVALID;
    if (!st && mine > 0 && (!k.data || !v.data || !dk.data || !dv.data)) st = ATTN_E_INVALID;
    if (!st) {
        for (int p = 0; p < 2; p++) {
            size_t n = (size_t)(R.B * R.H * R.ql[p]) + 1;
            c.m[p] = malloc(n * sizeof(float)), c.l[p] = calloc(n, sizeof(float)), c.t[p] = calloc(n, sizeof(float));
            if (!c.m[p] || !c.l[p] || !c.t[p]) st = ATTN_E_NOMEM;
            for (size_t i = 0; !st && i < n; i++) c.m[p][i] = -INFINITY;
        }
        int64_t qmax = R.ql[0] > R.ql[1] ? R.ql[0] : R.ql[1], kmx = R.kmax;
        c.dq = calloc((size_t)(rows * R.D) + 1, sizeof(float));
        c.pdq = malloc((size_t)(R.B * R.H * qmax * R.D + 1) * sizeof(float));
        c.dkv = malloc((size_t)(R.B * R.Hkv * kmx * (R.D + R.Dv) + 1) * sizeof(float));
        c.pdk = malloc((size_t)(R.B * R.Hkv * kmx * R.D + 1) * sizeof(float));
        c.pdv = malloc((size_t)(R.B * R.Hkv * kmx * R.Dv + 1) * sizeof(float));
        if (!c.dq || !c.pdq || !c.dkv || !c.pdk || !c.pdv) st = ATTN_E_NOMEM;
    }
    st = agree(&R, st);
    if (!st) st = kv_ring(&R, k, v, stats_step, &c); /* ring 1: the rows' statistics */
    st = agree(&R, st);
    float *home = NULL;
    if (!st) st = grad_ring(&R, k, v, &c, &home); /* ring 2: gradients */
    if (!home && !st) st = ATTN_E_NOMEM;
    st = agree(&R, st);
    if (!st) {
        for (int64_t bh = 0; R.nq > 0 && bh < R.B * R.H; bh++)
            for (int64_t i = 0; i < R.nq; i++)
                memcpy(dq.data + (bh / R.H) * dq.stride_b + (bh % R.H) * dq.stride_h + i * dq.stride_s,
                       c.dq + (size_t)(bh * R.nq + i) * (size_t)R.D, (size_t)R.D * sizeof(float));
        attn_view gk, gv;
        kv_views(&R, home, 4, mine, 0, &gk, &gv);
        for (int64_t b = 0; b < R.B; b++)
            for (int64_t h = 0; h < R.Hkv; h++)
                for (int64_t j = 0; j < mine; j++) {
                    memcpy(dk.data + b * dk.stride_b + h * dk.stride_h + j * dk.stride_s,
                           gk.data + b * gk.stride_b + h * gk.stride_h + j * gk.stride_s, (size_t)R.D * sizeof(float));
                    memcpy(dv.data + b * dv.stride_b + h * dv.stride_h + j * dv.stride_s,
                           gv.data + b * gv.stride_b + h * gv.stride_h + j * gv.stride_s, (size_t)R.Dv * sizeof(float));
                }
    }
    for (int p = 0; p < 2; p++) free(c.m[p]), free(c.l[p]), free(c.t[p]);
    free(c.dq), free(c.pdq), free(c.dkv), free(c.pdk), free(c.pdv), free(home);
    ring_done(&R, timing, t0);
    return st;
}
