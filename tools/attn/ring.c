/* The CLI's side of ring attention (built with MPI only): MPI start and
 * end, each rank's shard of whole arrays, and the results gathered back on
 * rank 0, so that `mpirun -np N attn sdpa --ring` writes the file a single
 * process writes. */
#include "cli.h"
#include "cli_ring.h"

#include "attn_mpi.h"

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
