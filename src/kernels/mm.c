/* Block products through oneDNN's matmul (mm.h): the only file that calls
 * oneDNN. Measured on an Intel AMX host: bf16 matmuls of
 * attention-sized blocks on one thread run at 700-2000 GFLOP/s with a
 * primitive per thread, 3x slower with one primitive shared by two threads,
 * and far slower when oneDNN starts its own threads for each small block:
 * so every thread keeps its own primitives and runs them on itself. */
#include "mm.h"
#include "kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef ATTN_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

/* ATTN_PRODUCTS (read once) and what oneDNN offers here */
enum { MM_AUTO, MM_ONEDNN, MM_KERNELS };
static struct {
    int mode, ok, amx, bf16isa, has_bf16, has_f16; /* ok: ATTN_PRODUCTS valid and an engine exists */
    int matrix; /* cpu_matrix(), asked once (CPUID traps to the hypervisor in a VM) */
    attn_status status;
    char describe[160];
} g;

static dnnl_data_type_t dnnl_type(attn_dtype t) {
    return t == ATTN_DTYPE_BF16 ? dnnl_bf16 : t == ATTN_DTYPE_F16 ? dnnl_f16 : dnnl_f32;
}

/* the primitive descriptor of C (M x N, f32, rows ldc apart) (+)= A B, A and B of type t; NULL if oneDNN has none */
static dnnl_primitive_desc_t make_pd(dnnl_engine_t eng, attn_dtype t, int64_t M, int64_t N, int64_t K, int64_t sam,
                                     int64_t sak, int64_t sbk, int64_t sbn, int64_t ldc, int acc, int packed) {
    dnnl_memory_desc_t a, b, c;
    dnnl_dims_t da = {M, K}, db = {K, N}, dc = {M, N}, sa = {sam, sak}, sb = {sbk, sbn}, sc = {ldc, 1};
    dnnl_matmul_desc_t md;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    if (dnnl_memory_desc_init_by_strides(&a, 2, da, dnnl_type(t), sa) ||
        (packed ? dnnl_memory_desc_init_by_tag(&b, 2, db, dnnl_type(t), dnnl_format_tag_any)
                : dnnl_memory_desc_init_by_strides(&b, 2, db, dnnl_type(t), sb)) ||
        dnnl_memory_desc_init_by_strides(&c, 2, dc, dnnl_f32, sc) || dnnl_matmul_desc_init(&md, &a, &b, NULL, &c) ||
        dnnl_primitive_attr_create(&attr))
        return NULL;
    if (acc && (dnnl_post_ops_create(&po) || dnnl_post_ops_append_sum(po, 1.0f) ||
                dnnl_primitive_attr_set_post_ops(attr, po))) {
        if (po) dnnl_post_ops_destroy(po);
        dnnl_primitive_attr_destroy(attr);
        return NULL;
    }
    if (dnnl_primitive_desc_create(&pd, &md, attr, eng, NULL) != dnnl_success) pd = NULL;
    if (po) dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    return pd;
}

/* does oneDNN have a t x t -> f32 matmul here (a small problem's descriptor) */
static int probe(dnnl_engine_t eng, attn_dtype t) {
    dnnl_primitive_desc_t pd = make_pd(eng, t, 16, 16, 16, 16, 1, 16, 1, 16, 0, 0);
    if (pd) dnnl_primitive_desc_destroy(pd);
    return pd != NULL;
}

/* Where auto looks at oneDNN at all (starting it costs every process on
 * other hosts): AMX-BF16 and AMX-TILE (CPUID 7.0 EDX bits 22, 24), or
 * AVX512-BF16 (7.1 EAX bit 5). Measured against the kernels' float32
 * products in prefill, backward and MLA: oneDNN's bf16 products 1.2-1.7x
 * on Zen 5 (bench/results/zen5/products-ab.jsonl), 1.4-1.8x on Zen 4's
 * 256-bit units (zen4/products-ab.jsonl). */
static int cpu_matrix(void) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1u) && (d >> 24 & 1u)) return 1;
    return __get_cpuid_max(0, NULL) >= 7 && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 5 & 1u);
#else
    return 0;
#endif
}

/* ATTN_PRODUCTS, read once */
static void init(void) {
    const char *e = getenv("ATTN_PRODUCTS");
    g.status = ATTN_OK, g.matrix = cpu_matrix();
    if (!e || !*e || !strcmp(e, "auto"))
        g.mode = MM_AUTO;
    else if (!strcmp(e, "onednn"))
        g.mode = MM_ONEDNN;
    else if (!strcmp(e, "kernels"))
        g.mode = MM_KERNELS;
    else
        g.mode = MM_KERNELS, g.status = ATTN_E_INVALID;
}

/* oneDNN's engine and what it multiplies here, looked at once, when needed */
static void probe_all(void) {
    dnnl_engine_t eng;
    if (g.mode != MM_KERNELS && dnnl_engine_create(&eng, dnnl_cpu, 0) == dnnl_success) {
        g.ok = 1;
        g.amx = dnnl_get_effective_cpu_isa() == dnnl_cpu_isa_avx512_core_amx;
        g.bf16isa = dnnl_get_effective_cpu_isa() == dnnl_cpu_isa_avx512_core_bf16;
        g.has_bf16 = probe(eng, ATTN_DTYPE_BF16), g.has_f16 = probe(eng, ATTN_DTYPE_F16);
        dnnl_engine_destroy(eng);
    } else if (g.mode == MM_ONEDNN) {
        g.status = ATTN_E_UNSUPPORTED; /* asked for, cannot run */
    }
    const dnnl_version_t *v = dnnl_version();
    const char *engine = g.amx ? "AMX" : g.bf16isa ? "AVX512-BF16, no AMX" : "no AMX";
    snprintf(g.describe, sizeof g.describe, "oneDNN %d.%d.%d matmul (%s%s%s) for the prefill's bf16/f16 products",
             v->major, v->minor, v->patch, engine, g.has_bf16 ? ", bf16" : ", no bf16",
             g.has_f16 ? ", f16" : ", no f16");
}

static void init_once(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, init);
}

static void probe_once(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    init_once();
    pthread_once(&once, probe_all);
}

attn_status attn_mm_status(void) {
    init_once();
    if (g.mode == MM_ONEDNN) probe_once(); /* whether it can start */
    return g.status;
}

attn_dtype attn_mm_type(attn_dtype t) {
    init_once();
    if (g.mode == MM_KERNELS || (g.mode == MM_AUTO && !g.matrix)) return ATTN_DTYPE_Q8_0;
    probe_once();
    if (!g.ok || (t != ATTN_DTYPE_BF16 && t != ATTN_DTYPE_F16)) return ATTN_DTYPE_Q8_0;
    int has = t == ATTN_DTYPE_BF16 ? g.has_bf16 : g.has_f16;
    if (g.mode == MM_ONEDNN) return has ? t : ATTN_DTYPE_F32;
    /* auto: on AMX, or bf16 on AVX512-BF16 (cpu_matrix) */
    return has && (g.amx || (g.bf16isa && t == ATTN_DTYPE_BF16)) ? t : ATTN_DTYPE_Q8_0;
}

int attn_mm_has(attn_dtype t) {
    probe_once();
    return g.ok && (t == ATTN_DTYPE_BF16 ? g.has_bf16 : t == ATTN_DTYPE_F16 ? g.has_f16 : t == ATTN_DTYPE_F32);
}

const char *attn_mm_describe(void) {
    probe_once();
    return g.ok ? g.describe : NULL;
}

/* ---- counts and names -------------------------------------------------------- */

static attn_mm_counts cnt; /* updated atomically */
static void count(int64_t *x) { __atomic_fetch_add(x, 1, __ATOMIC_RELAXED); }

void attn_mm_counts_get(attn_mm_counts *c) {
    c->runs = __atomic_load_n(&cnt.runs, __ATOMIC_RELAXED), c->packs = __atomic_load_n(&cnt.packs, __ATOMIC_RELAXED);
    c->made = __atomic_load_n(&cnt.made, __ATOMIC_RELAXED),
    c->non_amx = __atomic_load_n(&cnt.non_amx, __ATOMIC_RELAXED);
}

#define MM_NAMES 16
static struct {
    pthread_mutex_t mu;
    int n;
    char name[MM_NAMES][48];
    int64_t times[MM_NAMES];
} seen = {PTHREAD_MUTEX_INITIALIZER, 0, {{0}}, {0}};

static void note_impl(const char *impl) {
    pthread_mutex_lock(&seen.mu);
    int i = 0;
    while (i < seen.n && strcmp(seen.name[i], impl)) i++;
    if (i == seen.n && seen.n < MM_NAMES) snprintf(seen.name[seen.n++], sizeof seen.name[0], "%s", impl);
    if (i < seen.n) seen.times[i]++;
    pthread_mutex_unlock(&seen.mu);
}

void attn_mm_impls_seen(char *buf, size_t n) {
    if (!n) return;
    buf[0] = 0;
    pthread_mutex_lock(&seen.mu);
    for (int i = 0, at = 0; i < seen.n && (size_t)at < n; i++)
        at += snprintf(buf + at, n - (size_t)at, "%s%s x%lld", i ? ", " : "", seen.name[i], (long long)seen.times[i]);
    pthread_mutex_unlock(&seen.mu);
}

/* ---- one thread's primitives -------------------------------------------- */

#define MM_CACHE 64
#define MM_KEY 11
typedef struct mm_entry {
    int64_t key[MM_KEY]; /* t, M, N, K, sam, sak, sbk, sbn, ldc, acc, packed */
    dnnl_primitive_t p;
    dnnl_memory_t a, b, c;
    size_t packed;        /* bytes of B in the primitive's own layout (packed entries) */
    int refused;          /* auto on an AMX host, 16-bit operands, not an AMX implementation */
    char impl[48];        /* oneDNN's name for the implementation */
    dnnl_primitive_t reo; /* packed entries: the reorder of B from strides rk into that layout */
    dnnl_memory_t rsrc, rdst;
    int64_t rk[2];
} mm_entry;

struct attn_mm {
    dnnl_engine_t eng;
    dnnl_stream_t st;
    mm_entry e[MM_CACHE];
    int n, next; /* entries in use; the next to replace when full */
};

attn_mm *attn_mm_new(void) {
    probe_once();
    if (!g.ok) return NULL;
    attn_mm *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    if (dnnl_engine_create(&m->eng, dnnl_cpu, 0) != dnnl_success) {
        free(m);
        return NULL;
    }
    if (dnnl_stream_create(&m->st, m->eng, dnnl_stream_default_flags) != dnnl_success) {
        dnnl_engine_destroy(m->eng);
        free(m);
        return NULL;
    }
    return m;
}

static void entry_clear(mm_entry *x) {
    if (x->p) dnnl_primitive_destroy(x->p);
    if (x->a) dnnl_memory_destroy(x->a);
    if (x->b) dnnl_memory_destroy(x->b);
    if (x->c) dnnl_memory_destroy(x->c);
    if (x->reo) dnnl_primitive_destroy(x->reo);
    if (x->rsrc) dnnl_memory_destroy(x->rsrc);
    if (x->rdst) dnnl_memory_destroy(x->rdst);
    memset(x, 0, sizeof *x);
}

void attn_mm_free(attn_mm *m) {
    if (!m) return;
    for (int i = 0; i < m->n; i++) entry_clear(&m->e[i]);
    dnnl_stream_destroy(m->st);
    dnnl_engine_destroy(m->eng);
    free(m);
}

static pthread_key_t tls_key;
static void tls_free(void *p) { attn_mm_free(p); }
static void tls_make(void) { pthread_key_create(&tls_key, tls_free); }

attn_mm *attn_mm_thread(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, tls_make);
    attn_mm *m = pthread_getspecific(tls_key);
    if (!m && (m = attn_mm_new()) && pthread_setspecific(tls_key, m)) {
        attn_mm_free(m);
        m = NULL;
    }
    return m;
}

/* oneDNN sizes a primitive's work split by the OpenMP thread count when the
 * primitive is made, and runs it by the count when it runs: both on one
 * thread here, each thread with its own primitives. Made under two threads,
 * oneDNN's AMX matmul split a small product's reduction in two (the same
 * call then summed in another order on 1 and 2 threads: fuzz_paths' math
 * mode backward, Emerald Rapids). solo_begin returns the count to restore. */
static int solo_begin(void) {
#ifdef _OPENMP
    int nt = omp_get_max_threads();
    if (nt != 1) omp_set_num_threads(1);
    return nt;
#else
    return 1;
#endif
}
static void solo_end(int nt) {
#ifdef _OPENMP
    if (nt != 1) omp_set_num_threads(nt);
#else
    (void)nt;
#endif
}

/* Descriptors and primitives are made one thread at a time. oneDNN 2.7's
 * reorder lookup inserts into a static std::map, without a lock, the first
 * time a pair of data types is asked for: four threads making their first
 * reorder at once lost a node (LeakSanitizer, 1 process in 200) and could
 * corrupt the map. Primitives are made once per thread and shape; running
 * them is not serialized. */
static pthread_mutex_t make_mu = PTHREAD_MUTEX_INITIALIZER;

/* the entry of this key, made (replacing the oldest when the cache is full) if new; NULL on failure */
static mm_entry *entry_for(attn_mm *m, const int64_t key[MM_KEY]) {
    for (int i = 0; i < m->n; i++)
        if (!memcmp(m->e[i].key, key, sizeof m->e[i].key)) return &m->e[i];
    mm_entry *x = m->n < MM_CACHE ? &m->e[m->n++] : &m->e[m->next++ % MM_CACHE];
    entry_clear(x);
    attn_dtype t = (attn_dtype)key[0];
    int nt = solo_begin();
    pthread_mutex_lock(&make_mu);
    dnnl_primitive_desc_t pd =
        make_pd(m->eng, t, key[1], key[2], key[3], key[4], key[5], key[6], key[7], key[8], (int)key[9], (int)key[10]);
    if (!pd) {
        pthread_mutex_unlock(&make_mu);
        solo_end(nt);
        return NULL;
    }
    const dnnl_memory_desc_t *da = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
    const dnnl_memory_desc_t *db = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    const dnnl_memory_desc_t *dc = dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, (void *)&impl) != dnnl_success || !impl) impl = "?";
    int bad = !da || !db || !dc || dnnl_primitive_create(&x->p, pd) != dnnl_success ||
              dnnl_memory_create(&x->a, da, m->eng, DNNL_MEMORY_NONE) != dnnl_success ||
              dnnl_memory_create(&x->b, db, m->eng, DNNL_MEMORY_NONE) != dnnl_success ||
              dnnl_memory_create(&x->c, dc, m->eng, DNNL_MEMORY_NONE) != dnnl_success;
    if (!bad) {
        snprintf(x->impl, sizeof x->impl, "%s", impl);
        x->packed = key[10] ? dnnl_memory_desc_get_size(db) : 0;
        /* auto: the 16-bit products run on AMX (an AVX512-BF16 host: its bf16 kernels) or not through oneDNN */
        x->refused = g.mode == MM_AUTO && t != ATTN_DTYPE_F32 && !strstr(impl, g.amx ? "amx" : "avx512_core_bf16");
    }
    dnnl_primitive_desc_destroy(pd);
    pthread_mutex_unlock(&make_mu);
    solo_end(nt);
    if (bad) {
        entry_clear(x);
        return NULL;
    }
    memcpy(x->key, key, sizeof x->key);
    count(&cnt.made);
    if (x->refused) count(&cnt.non_amx);
    note_impl(x->impl);
    return x;
}

/* run primitive p on this thread alone (oneDNN would start a team of the
 * OpenMP thread count per call), counted in *counter */
static attn_status run_here(attn_mm *m, dnnl_primitive_t p, int nargs, const dnnl_exec_arg_t *args, int64_t *counter) {
    int nt = solo_begin();
    dnnl_status_t s = dnnl_primitive_execute(p, m->st, nargs, args);
    if (s == dnnl_success) s = dnnl_stream_wait(m->st);
    solo_end(nt);
    count(counter);
    return s == dnnl_success ? ATTN_OK : s == dnnl_out_of_memory ? ATTN_E_NOMEM : ATTN_E_UNSUPPORTED;
}

/* execute x's primitive with these operands on this thread */
static attn_status exec_entry(attn_mm *m, mm_entry *x, const void *A, const void *B, float *C) {
    if (dnnl_memory_set_data_handle(x->a, (void *)(uintptr_t)A) ||
        dnnl_memory_set_data_handle(x->b, (void *)(uintptr_t)B) || dnnl_memory_set_data_handle(x->c, C))
        return ATTN_E_UNSUPPORTED;
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, x->a}, {DNNL_ARG_WEIGHTS, x->b}, {DNNL_ARG_DST, x->c}};
    return run_here(m, x->p, 3, args, &cnt.runs);
}

attn_status attn_mm_run(attn_mm *m, attn_dtype t, int64_t M, int64_t N, int64_t K, const void *A, int64_t sam,
                        int64_t sak, const void *B, int64_t sbk, int64_t sbn, float *C, int64_t ldc, int acc) {
    if (!m) return ATTN_E_UNSUPPORTED;
    if (M == 0 || N == 0) return ATTN_OK;
    if (K == 0) { /* no products: C = acc ? C : 0 */
        for (int64_t i = 0; i < M && !acc; i++) memset(C + i * ldc, 0, (size_t)N * sizeof(float));
        return ATTN_OK;
    }
    const int64_t key[MM_KEY] = {(int64_t)t, M, N, K, sam, sak, sbk, sbn, ldc, acc != 0, 0};
    mm_entry *x = entry_for(m, key);
    return x ? exec_entry(m, x, A, B, C) : ATTN_E_UNSUPPORTED;
}

/* the entry of shape s (C dense) */
static mm_entry *shape_entry(attn_mm *m, const attn_mm_shape *s) {
    int packed = s->sbk == 0 && s->sbn == 0;
    const int64_t key[MM_KEY] = {(int64_t)s->t, s->M,   s->N, s->K,        s->sam, s->sak,
                                 s->sbk,        s->sbn, s->N, s->acc != 0, packed};
    return m && s->M > 0 && s->N > 0 && s->K > 0 ? entry_for(m, key) : NULL;
}

attn_status attn_mm_prepare(attn_mm *m, const attn_mm_shape *s, size_t *packed) {
    mm_entry *x = shape_entry(m, s);
    *packed = x ? x->packed : 0;
    return !x || x->refused ? ATTN_E_UNSUPPORTED : ATTN_OK;
}

attn_status attn_mm_pack(attn_mm *m, const attn_mm_shape *s, const void *B, int64_t sbk, int64_t sbn, void *dst) {
    mm_entry *x = shape_entry(m, s);
    if (!x || !x->packed) return ATTN_E_UNSUPPORTED;
    if (!x->reo || x->rk[0] != sbk || x->rk[1] != sbn) { /* the reorder from these strides */
        if (x->reo) dnnl_primitive_destroy(x->reo), x->reo = NULL;
        if (x->rsrc) dnnl_memory_destroy(x->rsrc), x->rsrc = NULL;
        if (x->rdst) dnnl_memory_destroy(x->rdst), x->rdst = NULL;
        dnnl_memory_desc_t src;
        dnnl_dims_t db = {s->K, s->N}, sb = {sbk, sbn};
        const dnnl_memory_desc_t *to = NULL;
        const_dnnl_primitive_desc_t pd = NULL;
        dnnl_primitive_desc_t rpd = NULL;
        pthread_mutex_lock(&make_mu);
        int bad = dnnl_memory_desc_init_by_strides(&src, 2, db, dnnl_type(s->t), sb) != dnnl_success ||
                  dnnl_primitive_get_primitive_desc(x->p, &pd) != dnnl_success ||
                  !(to = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0)) ||
                  dnnl_reorder_primitive_desc_create(&rpd, &src, m->eng, to, m->eng, NULL) != dnnl_success ||
                  dnnl_primitive_create(&x->reo, rpd) != dnnl_success ||
                  dnnl_memory_create(&x->rsrc, &src, m->eng, DNNL_MEMORY_NONE) != dnnl_success ||
                  dnnl_memory_create(&x->rdst, to, m->eng, DNNL_MEMORY_NONE) != dnnl_success;
        if (rpd) dnnl_primitive_desc_destroy(rpd);
        pthread_mutex_unlock(&make_mu);
        if (bad) return ATTN_E_UNSUPPORTED;
        x->rk[0] = sbk, x->rk[1] = sbn;
    }
    if (dnnl_memory_set_data_handle(x->rsrc, (void *)(uintptr_t)B) || dnnl_memory_set_data_handle(x->rdst, dst))
        return ATTN_E_UNSUPPORTED;
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, x->rsrc}, {DNNL_ARG_TO, x->rdst}};
    return run_here(m, x->reo, 2, args, &cnt.packs);
}

attn_status attn_mm_exec(attn_mm *m, const attn_mm_shape *s, const void *A, const void *B, float *C) {
    mm_entry *x = shape_entry(m, s);
    return x ? exec_entry(m, x, A, B, C) : ATTN_E_UNSUPPORTED;
}

const char *attn_mm_impl(attn_mm *m, const attn_mm_shape *s) {
    mm_entry *x = shape_entry(m, s);
    return x ? x->impl : NULL;
}

#else /* no oneDNN in this build */

attn_status attn_mm_status(void) {
    const char *e = getenv("ATTN_PRODUCTS");
    if (e && !strcmp(e, "onednn")) return ATTN_E_UNSUPPORTED; /* asked for, not built in */
    return !e || !*e || !strcmp(e, "auto") || !strcmp(e, "kernels") ? ATTN_OK : ATTN_E_INVALID;
}
attn_dtype attn_mm_type(attn_dtype t) {
    (void)t;
    return ATTN_DTYPE_Q8_0;
}
int attn_mm_has(attn_dtype t) {
    (void)t;
    return 0;
}
const char *attn_mm_describe(void) { return NULL; }
attn_mm *attn_mm_new(void) { return NULL; }
void attn_mm_free(attn_mm *m) { (void)m; }
attn_mm *attn_mm_thread(void) { return NULL; }
attn_status attn_mm_prepare(attn_mm *m, const attn_mm_shape *s, size_t *packed) {
    (void)m, (void)s;
    *packed = 0;
    return ATTN_E_UNSUPPORTED;
}
attn_status attn_mm_pack(attn_mm *m, const attn_mm_shape *s, const void *B, int64_t sbk, int64_t sbn, void *dst) {
    (void)m, (void)s, (void)B, (void)sbk, (void)sbn, (void)dst;
    return ATTN_E_UNSUPPORTED;
}
attn_status attn_mm_exec(attn_mm *m, const attn_mm_shape *s, const void *A, const void *B, float *C) {
    (void)m, (void)s, (void)A, (void)B, (void)C;
    return ATTN_E_UNSUPPORTED;
}
const char *attn_mm_impl(attn_mm *m, const attn_mm_shape *s) {
    (void)m, (void)s;
    return NULL;
}
void attn_mm_counts_get(attn_mm_counts *c) { memset(c, 0, sizeof *c); }
void attn_mm_impls_seen(char *buf, size_t n) {
    if (n) buf[0] = 0;
}
attn_status attn_mm_run(attn_mm *m, attn_dtype t, int64_t M, int64_t N, int64_t K, const void *A, int64_t sam,
                        int64_t sak, const void *B, int64_t sbk, int64_t sbn, float *C, int64_t ldc, int acc) {
    (void)m, (void)t, (void)M, (void)N, (void)K, (void)A, (void)sam, (void)sak, (void)B, (void)sbk, (void)sbn, (void)C,
        (void)ldc, (void)acc;
    return ATTN_E_UNSUPPORTED;
}

#endif
