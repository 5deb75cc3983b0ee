/* The block products through oneDNN (src/kernels/mm.h): attn_mm_run
 * against a float64 matmul on every operand type this host's oneDNN has
 * (float32 always where oneDNN is built in; bf16 / f16 where it has them),
 * strided and transposed B, accumulation, empty shapes; ATTN_PRODUCTS's
 * verdicts (ctest runs this program under each value): "kernels" enables
 * nothing, "onednn" every 16-bit type (float32 carriers where oneDNN lacks
 * the type), an unknown value is ATTN_E_INVALID from every fused entry
 * point, and the math products' text says what runs. */
#include "testutil.h"
#include "base/half.h"
#include "kernels/mm.h"

#include <stdlib.h>
#include <string.h>

static uint32_t lcg = 99u;

/* x as stored in type t and back */
static float as_t(attn_dtype t, float x) {
    if (t == ATTN_DTYPE_BF16) return attn_bf16_to_f32(attn_f32_to_bf16(x));
    if (t == ATTN_DTYPE_F16) return attn_f16_to_f32(attn_f32_to_f16(x));
    return x;
}

static void store(attn_dtype t, const float *x, int64_t n, void *dst) {
    for (int64_t i = 0; i < n; i++) {
        if (t == ATTN_DTYPE_F32) ((float *)dst)[i] = x[i];
        if (t == ATTN_DTYPE_BF16) ((uint16_t *)dst)[i] = attn_f32_to_bf16(x[i]);
        if (t == ATTN_DTYPE_F16) ((uint16_t *)dst)[i] = attn_f32_to_f16(x[i]);
    }
}

/* C (M x N, ldc) (+)= A B, A(m, k) at A[m sam + k sak], B(k, n) at B[k sbk + n sbn]: attn_mm_run against
 * float64; trans: B transposed (bit 0), A transposed (bit 1) */
static void one(attn_mm *mm, attn_dtype t, int64_t M, int64_t N, int64_t K, int trans, int acc) {
    int64_t ldc = N + 5, sbk = trans & 1 ? 1 : N + 2, sbn = trans & 1 ? K + 1 : 1;
    int64_t sam = trans & 2 ? 1 : K + 3, sak = trans & 2 ? M + 2 : 1;
    int64_t nb = trans & 1 ? N * sbn : K * sbk, na = trans & 2 ? K * sak : M * sam;
    float *a = tu_rand_array((size_t)(na + 1), &lcg, 1.0f), *b = tu_rand_array((size_t)(nb + 1), &lcg, 1.0f);
    float *c = tu_rand_array((size_t)(M * ldc + 1), &lcg, 1.0f), *c0 = malloc((size_t)(M * ldc + 1) * 4);
    for (int64_t i = 0; i < na; i++) a[i] = as_t(t, a[i]);
    for (int64_t i = 0; i < nb; i++) b[i] = as_t(t, b[i]);
    memcpy(c0, c, (size_t)(M * ldc + 1) * 4);
    void *at = malloc((size_t)(na + 1) * 4), *bt = malloc((size_t)(nb + 1) * 4);
    store(t, a, na, at), store(t, b, nb, bt);
    attn_status st = attn_mm_run(mm, t, M, N, K, at, sam, sak, bt, sbk, sbn, c, ldc, acc);
    CHECK(st == ATTN_OK, "type %d %ldx%ldx%ld trans %d acc %d: status %d", (int)t, (long)M, (long)N, (long)K, trans,
          acc, (int)st);
    double worst = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < ldc; j++) {
            if (j >= N) { /* past N: untouched */
                worst = c[i * ldc + j] != c0[i * ldc + j] ? 1e30 : worst;
                continue;
            }
            double want = acc ? c0[i * ldc + j] : 0.0, mag = fabs(want);
            for (int64_t k = 0; k < K; k++) {
                double p = (double)a[i * sam + k * sak] * b[k * sbk + j * sbn];
                want += p, mag += fabs(p);
            }
            double e = fabs(c[i * ldc + j] - want) / (mag + 1e-30);
            worst = e > worst ? e : worst;
        }
    CHECK(worst < 1e-5, "type %d %ldx%ldx%ld trans %d acc %d: relative error %.3g", (int)t, (long)M, (long)N, (long)K,
          trans, acc, worst);
    free(a), free(b), free(c), free(c0), free(at), free(bt);
}

static void products(void) {
    attn_mm *mm = attn_mm_new();
    CHECK(attn_mm_run(NULL, ATTN_DTYPE_F32, 1, 1, 1, NULL, 1, 1, NULL, 1, 1, NULL, 1, 0) == ATTN_E_UNSUPPORTED,
          "no oneDNN objects: unsupported");
    if (!mm) { /* no oneDNN in this build, or ATTN_PRODUCTS=kernels */
        CHECK(attn_mm_describe() == NULL || getenv("ATTN_PRODUCTS"), "oneDNN built in but no objects");
        return;
    }
    attn_dtype types[3] = {ATTN_DTYPE_F32, ATTN_DTYPE_BF16, ATTN_DTYPE_F16};
    for (int ti = 0; ti < 3; ti++) {
        attn_dtype t = types[ti];
        /* the 16-bit types where this oneDNN multiplies them (attn_mm_type names the type itself) */
        if (t != ATTN_DTYPE_F32 && attn_mm_type(t) != t) continue;
        for (int trans = 0; trans < 4; trans++)
            for (int acc = 0; acc < 2; acc++) {
                one(mm, t, 48, 256, 64, trans, acc); /* the forward's tile shapes */
                one(mm, t, 48, 80, 128, trans, acc);
                one(mm, t, 7, 33, 5, trans, acc);
                one(mm, t, 48, 64, 1, trans, acc);
            }
        one(mm, t, 48, 256, 64, 1, 0); /* a cached primitive, new buffers */
    }
    float c[4] = {1, 2, 3, 4};
    CHECK_OK(attn_mm_run(mm, ATTN_DTYPE_F32, 2, 2, 0, c, 1, 1, c, 1, 1, c, 2, 1)); /* K = 0, accumulate: unchanged */
    CHECK(c[0] == 1 && c[3] == 4, "K = 0 with accumulation leaves C");
    CHECK_OK(attn_mm_run(mm, ATTN_DTYPE_F32, 2, 2, 0, c, 1, 1, c, 1, 1, c, 2, 0));
    CHECK(c[0] == 0 && c[1] == 0 && c[2] == 0 && c[3] == 0, "K = 0 without accumulation: zeros");
    CHECK_OK(attn_mm_run(mm, ATTN_DTYPE_F32, 0, 5, 3, NULL, 3, 1, NULL, 1, 3, NULL, 5, 0)); /* M = 0: nothing */
    for (int i = 0; i < 70; i++) /* more shapes than the cache holds: replaced, still right */
        one(mm, ATTN_DTYPE_F32, 3, 16 + i, 4, i & 3, 0);
    attn_mm_free(mm);
}

/* ATTN_PRODUCTS's verdict */
static void setting(void) {
    const char *e = getenv("ATTN_PRODUCTS");
    int built = attn_mm_describe() != NULL || (e && !strcmp(e, "kernels"));
    float buf[64] = {0};
    attn_view v = {buf, 16, 16, 4};
    attn_sdpa_desc d;
    attn_sdpa_desc_init(&d, 1, 1, 4, 4, 4, 4);
    attn_status fwd = attn_sdpa_forward(&d, v, v, v, v, NULL); /* the fused path checks the setting */
    if (e && strcmp(e, "auto") && strcmp(e, "onednn") && strcmp(e, "kernels")) {
        CHECK(attn_mm_status() == ATTN_E_INVALID && fwd == ATTN_E_INVALID, "ATTN_PRODUCTS=%s: invalid (%d)", e,
              (int)fwd);
        return;
    }
    CHECK(attn_mm_type(ATTN_DTYPE_Q8_0) == ATTN_DTYPE_Q8_0 && attn_mm_type(ATTN_DTYPE_F32) == ATTN_DTYPE_Q8_0,
          "only 16-bit operands go through oneDNN");
    if (e && !strcmp(e, "kernels")) {
        CHECK_OK(fwd);
        CHECK(attn_mm_type(ATTN_DTYPE_BF16) == ATTN_DTYPE_Q8_0 && attn_mm_type(ATTN_DTYPE_F16) == ATTN_DTYPE_Q8_0,
              "kernels: nothing through oneDNN");
        CHECK(!strstr(attn_math_products(), "oneDNN"), "kernels: the products' text names no oneDNN");
    } else if (e && !strcmp(e, "onednn")) {
        if (!built) {
            CHECK(fwd == ATTN_E_UNSUPPORTED, "onednn without oneDNN: unsupported (%d)", (int)fwd);
            return;
        }
        CHECK_OK(fwd);
        for (int t = ATTN_DTYPE_F16; t <= ATTN_DTYPE_BF16; t++) {
            attn_dtype m = attn_mm_type((attn_dtype)t);
            CHECK(m == (attn_dtype)t || m == ATTN_DTYPE_F32, "onednn: type %d through oneDNN (%d)", t, (int)m);
            CHECK(attn_math_rounds((attn_dtype)t), "onednn: the mode rounds type %d", t);
        }
        CHECK(attn_math_rounds(ATTN_DTYPE_F32), "onednn: BF16 mode rounds float32 data");
        CHECK(strstr(attn_math_products(), "oneDNN") != NULL, "onednn: the products' text says so: %s",
              attn_math_products());
    } else {
        CHECK_OK(fwd);
    }
}

int main(int argc, char **argv) {
    tu_init(argc, argv);
    setting();
    products();
    return tu_finish("test_mm");
}
