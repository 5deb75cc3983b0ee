/* Run-time kernel choice. The best table this CPU and its OS run:
 *   avx512   AVX-512 F, BW, DQ, VL (CPUID) and the OS saves the ZMM state
 *            (XGETBV: XCR0 has SSE, AVX, opmask, ZMM_Hi256, Hi16_ZMM)
 *   avx2     AVX2, FMA, F16C and the OS saves the YMM state
 *   generic  the portable kernels, anywhere
 * On CPUs that run AVX-512 on 256-bit units (AMD family 19h, Zen 4) the
 * default is "avx512-256": the avx512 table with the decode Q K^T kernels and
 * the float32 P V kernel of the avx2 table (its -vnni and -bf16 forms also
 * with the int8 / int4 Q K^T on 256-bit registers, make_half). Measured there
 * (docs/PERFORMANCE.md, "Per host"): a 16-lane Q K^T row pays twice the
 * horizontal reductions per multiply-add of an 8-lane one for the same FMA
 * rate (12.4 vs 10.3 ns per key, R = 4, D = 128, in L1), and float32 P V
 * from memory on one thread ran at 0.84 of the read bandwidth at 16 lanes,
 * 0.92 at 8; 16-bit and q8_0 P V, prefill and backward are as fast or faster
 * at 16 lanes.
 * ATTN_ISA (read once) forces a set: "auto" (the default), "generic", "avx2",
 * "avx512", "avx512-256", their "-vnni" forms (AVX-VNNI / AVX512-VNNI's
 * VPDPBUSD for the int8 dots: best() takes them where CPUID has them) and
 * "-bf16" forms (-vnni with AVX512-BF16, VBMI and GFNI: the fp8 caches' products
 * through VDPBF16PS; best() takes them where CPUID has all three; on
 * Intel cores "avx512-bf16-fma", the same table with those products as
 * float32 FMAs), or
 * "avx512-simde" (the AVX-512 source through SIMD Everywhere's
 * emulation, where the build has it: for tests on hosts without AVX-512).
 * A set this CPU or build cannot run makes attn_kernel_status() an error
 * (ATTN_E_UNSUPPORTED; an unknown name ATTN_E_INVALID) that every fused
 * entry point returns, rather than a silent fallback. */
#include "kernels.h"
#include "mm.h"
#include "base/sem.h"

#include "attn.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef ATTN_HAVE_AVX2_BUILD
#include <cpuid.h>
#endif

#ifdef ATTN_HAVE_AVX2_BUILD
/* XCR0: which register state the OS saves (0 without OSXSAVE) */
static unsigned long long xcr0(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE)) return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

static int have_avx2(void) {
    __builtin_cpu_init();
    return (xcr0() & 0x6) == 0x6 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
}

static int have_avx512(void) {
    __builtin_cpu_init();
    return have_avx2() && (xcr0() & 0xe6) == 0xe6 && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl");
}

/* VNNI's VPDPBUSD: CPUID leaf 7 sub-leaf 0 ECX bit 11 (AVX512-VNNI), sub-leaf
 * 1 EAX bit 4 (AVX-VNNI, VEX-encoded: needs only AVX2's register state) */
static int have_avx512_vnni(void) {
    unsigned a, b, c, d;
    return have_avx512() && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (c >> 11 & 1);
}
/* AVX512-BF16 (CPUID 7.1 EAX bit 5), VBMI (7.0 ECX bit 1) and GFNI (7.0 ECX bit 8): the fp8 products, q4_0's
 * nibbles (every CPU with the first two has GFNI: Zen 4 and 5, Sapphire Rapids and later) */
static int have_avx512_bf16(void) {
    unsigned a, b, c, d;
    if (!have_avx512_vnni() || !__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(c >> 1 & 1) || !(c >> 8 & 1)) return 0;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 5 & 1);
}
static int have_avx_vnni(void) {
    unsigned a, b, c, d;
    return have_avx2() && __get_cpuid_max(0, NULL) >= 7 && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 4 & 1);
}

/* CPUID leaf 0's EBX: the vendor string's first four letters */
static unsigned vendor(void) {
    unsigned a, b, c, d;
    return __get_cpuid(0, &a, &b, &c, &d) ? b : 0;
}

/* AVX-512 on 256-bit units: AMD family 19h (Zen 4); Zen 5 (1Ah) and Intel's
 * AVX-512 server cores run 512-bit operations at full width */
static int avx512_half_width(void) {
    unsigned a, b, c, d;
    if (vendor() != 0x68747541u /* "Auth"enticAMD */ || !__get_cpuid(1, &a, &b, &c, &d)) return 0;
    unsigned family = (a >> 8 & 0xf) + ((a >> 8 & 0xf) == 0xf ? (a >> 20 & 0xff) : 0);
    return family == 0x19;
}

/* asked once: CPUID traps to the hypervisor in a VM (asked per call, it took a
 * bf16 decode step at 512 keys from 0.11 to 0.20 ms on the Zen 5 VM) */
static int half_width = -1; /* benign race: every thread computes the same answer */
int attn_cpu_avx512_half_width(void) {
    int h = __atomic_load_n(&half_width, __ATOMIC_RELAXED);
    if (h < 0) h = avx512_half_width(), __atomic_store_n(&half_width, h, __ATOMIC_RELAXED);
    return h;
}

/* Intel cores (GenuineIntel): VDPBF16PS and VPERMT2B issue at 0.5 a cycle
 * against 2 FMAs (Emerald Rapids, bench/vec_ports.c) */
static int intel_core(void) { return vendor() == 0x756e6547u; /* "Genu"ineIntel */ }

/* avx512-bf16: the file's table, with decode's Q K^T row kernels (over
 * stored rows: float32, integer and bf16 products) at every row count, its
 * P V ones below four rows a kv head and over 16-bit rows (float32
 * products) at every row count, from the same source built with
 * PREFETCHNTA (table_avx512_bf16_nta.c): the next rows' lines prefetched
 * as non-temporal. The default on AMD's full-width AVX-512 cores. Zen 5,
 * T 65536, alternating rounds: a bf16 cache's step at one row 1.01-1.09x
 * the GB/s on one thread, 1.04-1.12x on two, f16's 1.00-1.11x, bf16 in
 * strict at four rows 1.01-1.10x (zen5/decode-nta16-ab); below four rows
 * the integer and fp8 kernels too, one row, one thread (`attn bench
 * --decode --formats`, two runs of 5 rounds): int8 1.17x and 1.11x, q8_0
 * 1.11x / 0.96x, int4 1.08x / 1.02x, q4_0 1.05x / 0.96x, fp8 e4m3 1.08x /
 * 1.02x, e5m2 1.03x / 1.17x (the second run's rounds 0.57-1.50: a noisy
 * hour); int8 alone 1.17-1.18x (1.12-1.32, 7 and 9 rounds), on two
 * threads 1.11x; at two rows every format 1.05-1.41x against T1 at two
 * and three rows, at three 0.97-1.03x (7 rounds, zen5/decode-nta-rows23-ab).
 * From four rows the Q K^T kernels' NTA against T1: a bf16 cache's step
 * 1.09x on one thread (0.85-0.99 the time, every round faster; 9 rounds),
 * 1.03x on two; fp8, int8, q8_0, int4 0.99-1.01x, eight rows 1.00x
 * (zen5/decode-nta-qk4-ab). The P V kernels' T1 stays there: NTA for the
 * whole table ran fp8 0.90-0.96x, the integer formats 0.95-1.07x
 * (zen5/decode-nta-all-ab, decode-nta-rows-ab). Intel's cores
 * (avx512-bf16-fma) and Zen 4's (avx512-256-bf16) keep PREFETCHT1
 * throughout: not measured there.
 * Its integer Q K^T reads q8_0's key blocks as avx512-256-bf16 does (one
 * 256-bit load and XOR a block, then lane shuffles: the same sums, the
 * same bits), where two 128-bit broadcasts and two 512-bit XORs took Zen 5
 * 1.18x / 1.15x / 1.05x the kernel's time at one, two and four rows (eight:
 * the same; 128 keys in L1, zen5/q8-pair-load-ab) and the step on chip (T
 * 8192) 1.06x / 1.20x the GB/s at one and two rows (from memory: 1.04x at
 * one row, four rows within the noise); the other types keep the 512-bit
 * steps (the 256-bit ones took int8 1.3-1.45x the time, int4 1.1-1.3x at four and eight rows).
 * Intel's table keeps the broadcasts (not measured there). */
#define NTA_BELOW 4 /* rows a kv head: P V's NTA table below it */
static const attn_kernel_table *bf16_pv_pf(int64_t R) {
    return R < NTA_BELOW ? &attn_kernels_avx512_bf16_nta : &attn_kernels_avx512_bf16;
}
static void bf16_pv_rows_x(const float *P, int64_t ldp, int64_t R, const void *V, int64_t ldv, int64_t n, int64_t Dv,
                           float *O, int64_t ldo, const void *pre, int64_t ldpre, int64_t wpre, attn_dtype dt) {
    int w16 = dt == ATTN_DTYPE_BF16 || dt == ATTN_DTYPE_F16; /* float32 products over 16-bit rows: every R */
    (w16 ? &attn_kernels_avx512_bf16_nta : bf16_pv_pf(R))
        ->pv_rows_x(P, ldp, R, V, ldv, n, Dv, O, ldo, pre, ldpre, wpre, dt);
}
static void bf16_pv_rows_i16(const float *P, int64_t ldp, int64_t R, const void *V, int64_t ldv, int64_t n, int64_t Dv,
                             float *O, int64_t ldo, const void *pre, int64_t ldpre, int64_t wpre, attn_dtype dt) {
    bf16_pv_pf(R)->pv_rows_i16(P, ldp, R, V, ldv, n, Dv, O, ldo, pre, ldpre, wpre, dt);
}
static void bf16_pv_rows_bf(const float *P, int64_t ldp, int64_t R, const void *V, int64_t ldv, int64_t n, int64_t Dv,
                            float *O, int64_t ldo, float sc, const void *pre, int64_t ldpre, int64_t wpre,
                            attn_dtype dt) {
    bf16_pv_pf(R)->pv_rows_bf(P, ldp, R, V, ldv, n, Dv, O, ldo, sc, pre, ldpre, wpre, dt);
}
/* name: a table's qk_rows_q8 that takes q8_0 keys through y (the 256-bit key blocks' form) and the other types
 * through base's */
#define Q8_BLOCKS_Y(name, y, base)                                                                                     \
    static void name(const void *Q, int64_t R, int64_t D, const void *K, int64_t ldk, int64_t n, float *S,             \
                     int64_t lds, const void *pre, int64_t ldpre, int64_t wpre, attn_dtype dt) {                       \
        (dt == ATTN_DTYPE_Q8_0 ? y : (base).qk_rows_q8)(Q, R, D, K, ldk, n, S, lds, pre, ldpre, wpre, dt);             \
    }
Q8_BLOCKS_Y(bf16_qk_rows_q8, attn_qk_rows_q8_bf16_nta_y, attn_kernels_avx512_bf16_nta)
/* get: table var, made by make on first use */
#define TABLE_ONCE(get, var, make)                                                                                     \
    static const attn_kernel_table *get(void) {                                                                        \
        static pthread_once_t once = PTHREAD_ONCE_INIT;                                                                \
        pthread_once(&once, make);                                                                                     \
        return &var;                                                                                                   \
    }
static attn_kernel_table avx512_bf16;
static void make_bf16(void) {
    avx512_bf16 = attn_kernels_avx512_bf16;
    avx512_bf16.qk_rows_x = attn_kernels_avx512_bf16_nta.qk_rows_x, avx512_bf16.pv_rows_x = bf16_pv_rows_x;
    avx512_bf16.qk_rows_q8 = bf16_qk_rows_q8, avx512_bf16.pv_rows_i16 = bf16_pv_rows_i16;
    avx512_bf16.qk_rows_bf = attn_kernels_avx512_bf16_nta.qk_rows_bf, avx512_bf16.pv_rows_bf = bf16_pv_rows_bf;
}
TABLE_ONCE(avx512_bf16_table, avx512_bf16, make_bf16)

/* avx512-bf16-fma: the avx512-bf16 table with the math modes' fp8 decode
 * products (and a bf16 V's P V) as float32 FMAs on the same operands (q and
 * P rounded to bf16, the values converted) rather than VDPBF16PS pairs: the
 * products are exact either way, the sums in another order. The default on
 * Intel cores; measured on Emerald Rapids (one thread, D 128, 32768 keys,
 * alternating): e5m2's decode step 1.2x faster at one and four rows a kv
 * head, e4m3's and the integer formats' the same, bf16's at four rows
 * 0.96-0.97x (genuineintel-f6-m207/decode-formats-fma-ab.jsonl). */
static attn_kernel_table avx512_bf16_fma;
static void make_bf16_fma(void) {
    avx512_bf16_fma = attn_kernels_avx512_bf16;
    avx512_bf16_fma.name = "avx512-bf16-fma";
    avx512_bf16_fma.qk_rows_bf = NULL, avx512_bf16_fma.pv_rows_bf = NULL, avx512_bf16_fma.qk_bf_types = 0;
    avx512_bf16_fma.math_products = ATTN_MATH_PRODUCTS_FP8_FMA;
}
TABLE_ONCE(avx512_bf16_fma_table, avx512_bf16_fma, make_bf16_fma)

/* avx512-256: the AVX-512 table with the AVX2 source's decode row kernels
 * (faster on 256-bit units); avx512-256-vnni the same over avx512-vnni, and
 * with its int8 / int4 Q K^T from three rows on 256-bit registers (qk_q8:
 * a 128-bit broadcast into a 512-bit register costs Zen 4 a shuffle beside
 * the load, into a 256-bit one the load alone; the kernel 0.79-0.87x the
 * time over int8 at 3, 4 and 8 rows, 0.88-0.89x over int4:
 * zen4/kb-ymm-ab), and q8_0's key blocks read by one 256-bit load and
 * XOR each, then lane shuffles, where two 128-bit broadcasts and two
 * 512-bit XORs took 1.08-1.14x the kernel's time at one to four rows
 * (zen4/q8-ymm-xor-ab) */
typedef __typeof__(attn_qk_rows_q8_vnni_y) qk_q8_fn;
static attn_kernel_table avx512_256, avx512_256_vnni, avx512_256_bf16;
static void make_half(attn_kernel_table *t, const attn_kernel_table *base, const char *name, qk_q8_fn *qk_q8) {
    *t = *base;
    t->name = name;
    t->qk_rows = attn_kernels_avx2.qk_rows;
    t->qk_rows_x = attn_kernels_avx2.qk_rows_x;
    t->pv_rows = attn_kernels_avx2.pv_rows;
    if (qk_q8) t->qk_rows_q8 = qk_q8;
}
static void make_avx512_256(void) {
    make_half(&avx512_256, &attn_kernels_avx512, "avx512-256", NULL);
    make_half(&avx512_256_vnni, &attn_kernels_avx512_vnni, "avx512-256-vnni", attn_qk_rows_q8_vnni_y);
    make_half(&avx512_256_bf16, &attn_kernels_avx512_bf16, "avx512-256-bf16", attn_qk_rows_q8_bf16_y);
}
/* isa: 0 avx512, 1 -vnni, 2 -bf16 */
static const attn_kernel_table *avx512_256_table(int isa) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, make_avx512_256);
    return isa == 2 ? &avx512_256_bf16 : isa ? &avx512_256_vnni : &avx512_256;
}
#endif

static const attn_kernel_table *table_generic(void) { return &attn_kernels_generic; }
#ifdef ATTN_HAVE_AVX2_BUILD
static const attn_kernel_table *table_avx2(void) { return &attn_kernels_avx2; }
static const attn_kernel_table *table_avx2_vnni(void) { return &attn_kernels_avx2_vnni; }
static const attn_kernel_table *table_avx512(void) { return &attn_kernels_avx512; }
static const attn_kernel_table *table_avx512_vnni(void) { return &attn_kernels_avx512_vnni; }
static const attn_kernel_table *table_avx512_bf16(void) { return avx512_bf16_table(); }
static const attn_kernel_table *table_avx512_256(void) { return avx512_256_table(0); }
static const attn_kernel_table *table_avx512_256_vnni(void) { return avx512_256_table(1); }
static const attn_kernel_table *table_avx512_256_bf16(void) { return avx512_256_table(2); }
#ifdef ATTN_HAVE_SIMDE
/* avx512-simde: the AVX-512 source's table through SIMDe, with q8_0's Q K^T in the form the avx512-bf16 table
 * takes (one 256-bit load a key block), so that the form the default full-width table runs is tested on any
 * AVX2 host */
Q8_BLOCKS_Y(simde_qk_rows_q8, attn_qk_rows_q8_simde_y, attn_kernels_avx512_simde)
static attn_kernel_table avx512_simde;
static void make_simde(void) {
    avx512_simde = attn_kernels_avx512_simde;
    avx512_simde.qk_rows_q8 = simde_qk_rows_q8;
}
TABLE_ONCE(table_avx512_simde, avx512_simde, make_simde)
#endif
#define TABLE(name, runs, get)                                                                                         \
    { name, runs, get }
#else
#define TABLE(name, runs, get)                                                                                         \
    { name, NULL, NULL }
#endif
static int runs_anywhere(void) { return 1; }

/* Every kernel table, in ATTN_ISA's names: the one list that lookup, the
 * names ATTN_ISA knows and attn_kernel_table_name (tests, fuzz-long.sh)
 * read; a table this build lacks has no functions. A new table is a row. */
static const struct {
    const char *name;
    int (*runs)(void);                     /* this CPU and OS run it */
    const attn_kernel_table *(*get)(void); /* the table, made on first use */
} tables[] = {
    {"generic", runs_anywhere, table_generic},
    TABLE("avx2", have_avx2, table_avx2),
    TABLE("avx2-vnni", have_avx_vnni, table_avx2_vnni),
    TABLE("avx512", have_avx512, table_avx512),
    TABLE("avx512-vnni", have_avx512_vnni, table_avx512_vnni),
    TABLE("avx512-bf16", have_avx512_bf16, table_avx512_bf16),
    TABLE("avx512-256", have_avx512, table_avx512_256),
    TABLE("avx512-256-vnni", have_avx512_vnni, table_avx512_256_vnni),
    TABLE("avx512-256-bf16", have_avx512_bf16, table_avx512_256_bf16),
    TABLE("avx512-bf16-fma", have_avx512_bf16, avx512_bf16_fma_table),
#ifdef ATTN_HAVE_SIMDE
    TABLE("avx512-simde", have_avx2, table_avx512_simde),
#else
    {"avx512-simde", NULL, NULL},
#endif
};
#undef TABLE
enum { n_tables = sizeof tables / sizeof tables[0] };

const char *attn_kernel_table_name(int i) { return i >= 0 && i < n_tables ? tables[i].name : NULL; }

/* the table of that name, if this build has it (else NULL; *known = the
 * name is one of the list's); *ok = this CPU runs it */
static const attn_kernel_table *lookup(const char *name, int *known, int *ok) {
    *known = *ok = 0;
    for (int i = 0; i < n_tables; i++)
        if (!strcmp(name, tables[i].name)) {
            *known = 1;
            if (!tables[i].get) return NULL;
            *ok = tables[i].runs();
            return tables[i].get();
        }
    return NULL;
}

#ifndef ATTN_HAVE_AVX2_BUILD
int attn_cpu_avx512_half_width(void) { return 0; }
#endif

static const attn_kernel_table *best(void) {
#ifdef ATTN_HAVE_AVX2_BUILD
    if (have_avx512()) {
        int isa = have_avx512_bf16() ? 2 : have_avx512_vnni();
        if (avx512_half_width()) return avx512_256_table(isa);
        if (isa == 2 && intel_core()) return avx512_bf16_fma_table();
        return isa == 2 ? avx512_bf16_table() : isa ? &attn_kernels_avx512_vnni : &attn_kernels_avx512;
    }
    if (have_avx2()) return have_avx_vnni() ? &attn_kernels_avx2_vnni : &attn_kernels_avx2;
#endif
    return &attn_kernels_generic;
}

const attn_kernel_table *attn_kernels_lookup(const char *name) {
    int known, ok;
    const attn_kernel_table *t = lookup(name, &known, &ok);
    return ok ? t : NULL;
}

static const attn_kernel_table *choose(attn_status *st) {
    const char *force = getenv("ATTN_ISA");
    *st = ATTN_OK;
    if (!force || !*force || !strcmp(force, "auto")) return best();
    int known, ok;
    const attn_kernel_table *t = lookup(force, &known, &ok);
    if (t && ok) return t;
    /* known names this CPU or build cannot run are unsupported; anything else is invalid */
    *st = known ? ATTN_E_UNSUPPORTED : ATTN_E_INVALID;
    return best();
}

static const attn_kernel_table *table; /* benign race: every thread computes the same pointer */
static attn_status table_status;

const attn_kernel_table *attn_kernels(void) {
    const attn_kernel_table *t = __atomic_load_n(&table, __ATOMIC_ACQUIRE);
    if (!t) {
        attn_status st;
        t = choose(&st);
        __atomic_store_n(&table_status, st, __ATOMIC_RELAXED);
        __atomic_store_n(&table, t, __ATOMIC_RELEASE);
    }
    return t;
}

attn_status attn_kernel_status(void) {
    attn_kernels();
    attn_status st = __atomic_load_n(&table_status, __ATOMIC_RELAXED);
    return st ? st : attn_mm_status();
}

const char *attn_kernel_name(void) { return attn_kernels()->name; }
/* the operand type of the products that oneDNN would take for data of type
 * t in a mode (float32 data: BF16 mode's bf16; fp8: BF16 mode's bf16, which
 * holds its values exactly) */
static attn_dtype mm_operand(attn_dtype t) { return attn_sem_bf16_data(t) ? ATTN_DTYPE_BF16 : t; }

static char products[512];
static void make_products(void) {
    const char *mm = attn_mm_describe();
    int any = attn_mm_type(ATTN_DTYPE_BF16) != ATTN_DTYPE_Q8_0 || attn_mm_type(ATTN_DTYPE_F16) != ATTN_DTYPE_Q8_0;
    snprintf(products, sizeof products, "%s%s%s", attn_kernels()->math_products, any && mm ? "; " : "",
             any && mm ? mm : "");
}

const char *attn_math_products(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, make_products);
    return products;
}

int attn_math_rounds(attn_dtype kv_type) {
    if ((int)kv_type < 0 || (int)kv_type >= 32) return 0;
    if (attn_kernels()->math_types >> kv_type & 1u) return 1;
    return kv_type != ATTN_DTYPE_Q8_0 && attn_mm_type(mm_operand(kv_type)) != ATTN_DTYPE_Q8_0;
}
