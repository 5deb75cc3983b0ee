/* The fused forward's products through oneDNN (kernels/mm.h), the math
 * modes' bf16 / f16 operands on the matrix engine (AMX).
 *
 * What makes oneDNN fast here (measured on an AMX host: per call, one
 * thread, 48-row tiles ran at 580-770 GFLOP/s with B given strided and
 * 1175-1537 with B pre-reordered; a C with padded rows fell off AMX):
 *   - every product writes a dense C (S: MM_BR x MM_BC, O: MM_BR x DvP);
 *   - K^T and V of every key block are reordered once, per kv head, into
 *     the layout the primitive asks for (oneDNN's "any" weights format),
 *     and every query block of the group multiplies them as they are;
 *   - query blocks of MM_BR rows: each call is a large product;
 *   - P is written in the product's type by the pass that computes it
 *     (exp2_store_row: max, exponential, rounding, row sum, store).
 * Per key block: S = Q K^T, the score step (score.h), the online softmax
 * (online.h) and O += P V, the same definitions as the kernels' path. */
#include "base/rows.h"
#include "base/sem.h"
#include "flash_int.h"
#include "online.h"

#include <stdio.h>
#include <string.h>

/* a packed block's bytes, rounded up to whole cache lines (blocks stay aligned) */
static size_t line_up(size_t n) { return (n + 63) / 64 * 64; }

int attn_fwd_mm_plan(fwd_call *c) {
    attn_mm *m = attn_mm_thread();
    int64_t D = c->d->D;
    /* S (MM_BR x MM_BC) = Q K^T: A = Q rows, B = the key block's K^T, packed */
    c->qk = (attn_mm_shape){c->mt, MM_BR, MM_BC, D, D, 1, 0, 0, 0};
    /* O (MM_BR x DvP) += P V: A = P rows, B = the key block's V rows, packed */
    c->pv = (attn_mm_shape){c->mt, MM_BR, c->DvP, MM_BC, MM_BC, 1, 0, 0, 1};
    if (!m || attn_mm_prepare(m, &c->qk, &c->kbytes) || attn_mm_prepare(m, &c->pv, &c->vbytes) || !c->kbytes ||
        !c->vbytes) {
        c->mt = ATTN_DTYPE_Q8_0; /* the kernels' products */
        return 0;
    }
    c->kbytes = line_up(c->kbytes), c->vbytes = line_up(c->vbytes);
    c->br = MM_BR, c->bc = MM_BC;
    return 1;
}

size_t attn_fwd_mm_head_bytes(const fwd_call *c) {
    size_t n;
    return attn_mul_size((size_t)(c->SkP / c->bc), c->kbytes + c->vbytes, &n) ? 0 : n;
}

/* A view's rows as a packed operand's source: their elements already are
 * the operand type mt and the mode rounds nothing more (kvt F32), so the
 * reorder reads the view in place */
static int view_is_operand(const attn_sdpa_desc *d, attn_dtype mt, attn_dtype kvt) {
    return attn_view_dtype(d->qkv_dtype) == mt && kvt == ATTN_DTYPE_F32;
}

/* rows [j0, j0 + n) of head (b, h) of view t (w values each) as operand
 * rows of type mt, w2 apart (zeros past w and from row n on, up to np
 * rows), rounded to kvt: one vector pass a row (store_row) */
static void rows_as_operand(const attn_kernel_table *kt, const attn_sdpa_desc *d, attn_view t, int64_t b, int64_t h,
                            int64_t j0, int64_t n, int64_t np, int64_t w, int64_t w2, attn_dtype kvt, attn_dtype mt,
                            char *dst, float *row) {
    size_t rb = attn_storage_bytes(mt, w2), used = attn_storage_bytes(mt, w);
    for (int64_t j = 0; j < np; j++) {
        char *to = dst + (size_t)j * rb;
        if (j >= n) {
            memset(to, 0, rb);
            continue;
        }
        kt->store_row(attn_flash_row_operand(kt, t, d->qkv_dtype, b, h, j0 + j, w, ATTN_DTYPE_F32, row), w, kvt, mt,
                      to);
        memset(to + used, 0, rb - used);
    }
}

attn_status attn_fwd_mm_pack(const fwd_call *c, attn_view k, attn_view v, int64_t b, int64_t hk, void *panel,
                             float *tmp) {
    const attn_sdpa_desc *d = c->d;
    int64_t D = d->D, Dv = d->Dv, DvP = c->DvP, bc = c->bc;
    attn_dtype kvt = attn_sem_kv_type(d, attn_view_dtype(d->qkv_dtype)), mt = c->mt;
    size_t kr = attn_storage_bytes(mt, D);
    char *K = (char *)tmp, *V = K + (size_t)bc * kr; /* a block's rows as mt */
    float *row = tmp + bc * (D + DvP);               /* one row's float32 values */
    attn_mm *m = attn_mm_thread();
    attn_status s = m ? ATTN_OK : ATTN_E_NOMEM;
    int direct = view_is_operand(d, mt, kvt);
    for (int64_t j0 = 0; j0 < c->SkP && !s; j0 += bc) {
        char *blk = (char *)panel + (size_t)(j0 / bc) * (c->kbytes + c->vbytes);
        int64_t n = d->Sk - j0 < bc ? d->Sk - j0 : bc, whole = direct && n == bc;
        if (whole) /* B(k, n) = K row j0 + n, column k, in place */
            s = attn_mm_pack(m, &c->qk, attn_row_addr(k, d->qkv_dtype, b, hk, j0), 1, k.stride_s, blk);
        else {
            rows_as_operand(c->kt, d, k, b, hk, j0, n, bc, D, D, kvt, mt, K, row);
            s = attn_mm_pack(m, &c->qk, K, 1, D, blk);
        }
        if (s) break;
        if (whole && Dv == DvP) /* B(k, n) = V row j0 + k, column n, in place */
            s = attn_mm_pack(m, &c->pv, attn_row_addr(v, d->qkv_dtype, b, hk, j0), v.stride_s, 1, blk + c->kbytes);
        else {
            rows_as_operand(c->kt, d, v, b, hk, j0, n, bc, Dv, DvP, kvt, mt, V, row);
            s = attn_mm_pack(m, &c->pv, V, DvP, 1, blk + c->kbytes);
        }
    }
    return s;
}

void attn_fwd_mm_block(const fwd_call *c, fwd_bufs *t, int64_t b, int64_t h, int64_t blk, const void *panel) {
    const attn_sdpa_desc *d = c->d;
    const attn_kernel_table *kt = c->kt;
    int64_t DvP = c->DvP, br = c->br, bc = c->bc, i0, rows, klo, khi;
    size_t pr = attn_storage_bytes(c->mt, bc); /* a row of P */
    attn_score_keys keys = attn_fwd_begin(c, t, b, h, blk, &i0, &rows);
    kt->store_row(t->Qp, br * d->D, ATTN_DTYPE_F32, c->mt, t->Qm);          /* rounded already; padding rows zeros */
    memset((char *)t->Pm + (size_t)rows * pr, 0, (size_t)(br - rows) * pr); /* and their P */
    attn_sem_rows_range(d, keys.sq.skb, keys.sq.off, i0, i0 + rows, &klo, &khi);
    attn_flex_keys(d, b, h, i0, rows, &klo, &khi);
    for (int64_t j0 = klo / bc * bc; j0 < khi && !t->err; j0 += bc) {
        if (attn_score_tile_hidden(d, &keys.sq, h, rows, i0, j0, bc)) continue; /* P = 0 */
        const char *kb = (const char *)panel + (size_t)(j0 / bc) * (c->kbytes + c->vbytes);
        t->err = attn_mm_exec(t->mm, &c->qk, t->Qm, kb, t->S);
        if (t->err) break;
        attn_score_tile(kt, d, &keys, h, t->S, bc, bc, rows, i0, j0, NULL);
        for (int64_t r = 0; r < rows; r++)
            attn_online_row_store(kt, t->S + r * bc, bc, c->escale, &t->m[r], &t->l[r], t->O + r * DvP, DvP, c->pt,
                                  c->mt, (char *)t->Pm + (size_t)r * pr);
        t->err = attn_mm_exec(t->mm, &c->pv, t->Pm, kb + c->kbytes, t->O);
    }
    attn_fwd_finish(c, t, b, h, i0, rows);
}

/* ---- the backward ------------------------------------------------------------ */

int attn_bwd_mm_plan_make(attn_bwd_mm_plan *p, attn_dtype mt, int64_t DP, int64_t DvP) {
    attn_mm *m = attn_mm_thread();
    int64_t br = MMB_BR, bc = MMB_BC;
    *p = (attn_bwd_mm_plan){.mt = mt, .br = br, .bc = bc, .DP = DP, .DvP = DvP};
    p->s = (attn_mm_shape){mt, br, bc, DP, DP, 1, 0, 0, 0};    /* S = Q K^T */
    p->dp = (attn_mm_shape){mt, br, bc, DvP, DvP, 1, 0, 0, 0}; /* dP = dO V^T */
    p->dv = (attn_mm_shape){mt, bc, DvP, br, 1, bc, 0, 0, 1};  /* dV += P^T dO: A(m, k) = P[k][m] */
    p->dk = (attn_mm_shape){mt, bc, DP, br, 1, bc, 0, 0, 1};   /* dK += dS^T Q */
    p->dq = (attn_mm_shape){mt, br, DP, bc, bc, 1, 0, 0, 1};   /* dQ += dS K */
    if (!m || attn_mm_prepare(m, &p->s, &p->ks) || attn_mm_prepare(m, &p->dp, &p->vs) ||
        attn_mm_prepare(m, &p->dq, &p->kq) || attn_mm_prepare(m, &p->dv, &p->qo) ||
        attn_mm_prepare(m, &p->dk, &p->qq) || !p->ks || !p->vs || !p->kq || !p->qo || !p->qq)
        return 0;
    p->ks = line_up(p->ks), p->vs = line_up(p->vs), p->kq = line_up(p->kq);
    p->tile = p->ks + p->vs + p->kq;
    return 1;
}

attn_status attn_bwd_mm_pack_keys(const attn_bwd_mm_plan *p, const attn_kernel_table *kt, const attn_sdpa_desc *d,
                                  attn_view k, attn_view v, int64_t b, int64_t hk, int64_t nkt, char *dst, float *tmp) {
    int64_t D = d->D, Dv = d->Dv, DP = p->DP, DvP = p->DvP, bc = p->bc;
    attn_dtype kvt = attn_sem_kv_type(d, attn_view_dtype(d->qkv_dtype)), mt = p->mt;
    size_t kr = attn_storage_bytes(mt, DP);
    char *K = (char *)tmp, *V = K + (size_t)bc * kr; /* a tile's rows as mt, zero past D, Dv */
    float *row = tmp + bc * (DP + DvP);
    attn_mm *m = attn_mm_thread();
    attn_status s = m ? ATTN_OK : ATTN_E_NOMEM;
    int direct = view_is_operand(d, mt, kvt);
    for (int64_t t = 0; t < nkt && !s; t++) {
        char *tile = dst + (size_t)t * p->tile;
        int64_t n = d->Sk - t * bc < bc ? d->Sk - t * bc : bc;
        if (direct && n == bc && D == DP) { /* K read in place: B(k, n) = K row n, column k; then row k, column n */
            const void *K0 = attn_row_addr(k, d->qkv_dtype, b, hk, t * bc);
            s = attn_mm_pack(m, &p->s, K0, 1, k.stride_s, tile);
            if (!s) s = attn_mm_pack(m, &p->dq, K0, k.stride_s, 1, tile + p->ks + p->vs);
        } else {
            rows_as_operand(kt, d, k, b, hk, t * bc, n, bc, D, DP, kvt, mt, K, row);
            s = attn_mm_pack(m, &p->s, K, 1, DP, tile);
            if (!s) s = attn_mm_pack(m, &p->dq, K, DP, 1, tile + p->ks + p->vs);
        }
        if (s) break;
        if (direct && n == bc && Dv == DvP) {
            s = attn_mm_pack(m, &p->dp, attn_row_addr(v, d->qkv_dtype, b, hk, t * bc), 1, v.stride_s, tile + p->ks);
        } else {
            rows_as_operand(kt, d, v, b, hk, t * bc, n, bc, Dv, DvP, kvt, mt, V, row);
            s = attn_mm_pack(m, &p->dp, V, 1, DvP, tile + p->ks);
        }
    }
    return s;
}

attn_status attn_bwd_mm_pack_block(const attn_bwd_mm_plan *p, attn_mm *m, const void *Q, const void *dO, void *Qb,
                                   void *dOb) {
    attn_status s = attn_mm_pack(m, &p->dk, Q, p->DP, 1, Qb); /* B(k, n) = Q row k, column n */
    return s ? s : attn_mm_pack(m, &p->dv, dO, p->DvP, 1, dOb);
}

/* ---- what runs ------------------------------------------------------------------ */

void attn_flash_mm_impls(char *buf, size_t n) {
    attn_dtype mt = attn_mm_type(ATTN_DTYPE_BF16);
    attn_mm *m = attn_mm_thread();
    if (!n) return;
    buf[0] = 0;
    if (mt == ATTN_DTYPE_Q8_0 || !m) return;
    attn_bwd_mm_plan p;
    attn_bwd_mm_plan_make(&p, mt, 128, 128); /* its shapes, whether or not oneDNN takes all of them */
    const attn_mm_shape sh[7] = {{mt, MM_BR, MM_BC, 128, 128, 1, 0, 0, 0},
                                 {mt, MM_BR, 128, MM_BC, MM_BC, 1, 0, 0, 1},
                                 p.s,
                                 p.dp,
                                 p.dv,
                                 p.dk,
                                 p.dq};
    static const char *what[7] = {"forward Q K^T", "P V", "backward S", "dP", "dV", "dK", "dQ"};
    size_t at = 0;
    for (int i = 0; i < 7 && at < n; i++) {
        size_t packed;
        attn_status st = attn_mm_prepare(m, &sh[i], &packed);
        const char *impl = attn_mm_impl(m, &sh[i]);
        at += (size_t)snprintf(buf + at, n - at, "%s%s %s%s",
                               i == 0   ? ""
                               : i == 2 ? "; "
                                        : ", ",
                               what[i], impl ? impl : "none",
                               st == ATTN_E_UNSUPPORTED && impl ? " (refused: not AMX or AVX512-BF16)" : "");
    }
}
