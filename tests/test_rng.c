/* PyTorch-compatible randomness: MT19937, torch.rand, uniform_, nn.Linear
 * init and both dropout streams, against values PyTorch produced
 * (golden/rng.safetensors from gen_golden.py, and the masks the seed
 * notebooks print, which came from an MKL build). */
#include "internal.h"
#include "kernels/kernels.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static attn_st_file *golden;

static void cmp_golden(const char *name, const float *got, size_t n) {
    float *want = malloc(n * sizeof *want);
    attn_status st = attn_st_read_f32(golden, name, want, n);
    CHECK(st == ATTN_OK, "golden tensor %s: %s", name, attn_status_string(st));
    if (st == ATTN_OK) tu_equal(name, got, want, n);
    free(want);
}

static void test_mt19937(void) {
    /* std::mt19937(5489) first output and 10000th output (C++ standard). */
    attn_generator g;
    attn_generator_seed(&g, 5489);
    CHECK(attn_generator_next32(&g) == 3499211612u, "first mt19937 output");
    attn_generator_seed(&g, 5489);
    uint32_t v = 0;
    for (int i = 0; i < 10000; i++) v = attn_generator_next32(&g);
    CHECK(v == 4123659995u, "10000th mt19937 output is %u", v);
}

static void test_rand_uniform_linear(void) {
    attn_generator g;
    float buf[1000];
    attn_generator_seed(&g, 123);
    CHECK_OK(attn_rand(&g, buf, 1000));
    cmp_golden("rand_seed123", buf, 1000);
    attn_generator_seed(&g, 0);
    CHECK_OK(attn_uniform(&g, buf, 700, -2.5, 0.75));
    cmp_golden("uniform_seed0_m2.5_0.75", buf, 700);
    attn_generator_seed(&g, (1ull << 32) + 5);
    CHECK_OK(attn_rand(&g, buf, 50));
    cmp_golden("rand_seed2p32p5", buf, 50);
    static const int cases[4][3] = {{3, 2, 789}, {17, 5, 1}, {64, 48, 42}, {1, 1, 7}};
    for (int c = 0; c < 4; c++) {
        int in = cases[c][0], out = cases[c][1];
        float *w = malloc((size_t)(in * out) * sizeof *w), *b = malloc((size_t)out * sizeof *b);
        attn_generator_seed(&g, (uint64_t)cases[c][2]);
        CHECK_OK(attn_linear_init(&g, w, b, in, out));
        char name[64];
        snprintf(name, sizeof name, "linear_%d_%d_seed%d.weight", in, out, cases[c][2]);
        cmp_golden(name, w, (size_t)(in * out));
        snprintf(name, sizeof name, "linear_%d_%d_seed%d.bias", in, out, cases[c][2]);
        cmp_golden(name, b, (size_t)out);
        free(w);
        free(b);
    }
    CHECK(attn_uniform(&g, buf, 3, 1.0, 0.0) == ATTN_E_INVALID, "a > b rejected");
    CHECK(attn_linear_init(&g, buf, NULL, 0, 3) == ATTN_E_INVALID, "in_features 0 rejected");
}

/* The golden dropout file was written by the PyTorch that generated it; its
 * flavor is recorded in golden/rng_flavor.txt. */
static void test_dropout_golden(void) {
    char path[1024], flavor[16] = "";
    snprintf(path, sizeof path, "%s/golden/rng_flavor.txt", tu_srcdir);
    FILE *f = fopen(path, "r");
    CHECK(f && fscanf(f, "%15s", flavor) == 1, "cannot read %s", path);
    if (f) fclose(f);
    attn_generator g;
    attn_generator_seed(&g, 7);
    attn_generator_set_flavor(&g, strcmp(flavor, "mkl") ? ATTN_TORCH_NOMKL : ATTN_TORCH_MKL);
    float ones[37 * 29], out[37 * 29];
    for (int i = 0; i < 37 * 29; i++) ones[i] = 1.0f;
    CHECK_OK(attn_dropout_tensor(&g, 0.3, ones, out, 37 * 29));
    cmp_golden("dropout_p0.3_seed7_call1", out, 37 * 29);
    CHECK_OK(attn_dropout_tensor(&g, 0.3, ones, out, 37 * 29));
    cmp_golden("dropout_p0.3_seed7_call2", out, 37 * 29);
    float ar[300], o2[300];
    for (int i = 0; i < 300; i++) ar[i] = (float)(i + 1);
    attn_generator_seed(&g, 11);
    attn_generator_set_flavor(&g, strcmp(flavor, "mkl") ? ATTN_TORCH_NOMKL : ATTN_TORCH_MKL);
    CHECK_OK(attn_dropout_tensor(&g, 0.9, ar, o2, 300));
    cmp_golden("dropout_p0.9_seed11", o2, 300);
}

/* MKL stream: the masks seeds 000/002/003 print (torch.manual_seed(123),
 * nn.Dropout(0.5) on ones(6, 6), then a second call from the same stream). */
static void test_dropout_mkl_seed(void) {
    static const char *first = "111111"
                               "010000"
                               "001010"
                               "110001"
                               "100001"
                               "010000";
    /* second call: kept positions visible in seed 002's dropout(attn_weights_causal)
     * on its lower triangle (upper entries are zero weights either way) */
    static const char *second_lower = "1....."
                                      "00...."
                                      "001..."
                                      "0101.."
                                      "01111."
                                      "110011";
    attn_generator g;
    attn_generator_seed(&g, 123);
    float ones[36], out[36];
    for (int i = 0; i < 36; i++) ones[i] = 1.0f;
    CHECK_OK(attn_dropout_tensor(&g, 0.5, ones, out, 36));
    for (int i = 0; i < 36; i++) CHECK(out[i] == (first[i] == '1' ? 2.0f : 0.0f), "MKL mask 1 element %d", i);
    CHECK_OK(attn_dropout_tensor(&g, 0.5, ones, out, 36));
    for (int i = 0; i < 36; i++)
        if (second_lower[i] != '.') CHECK(out[i] == (second_lower[i] == '1' ? 2.0f : 0.0f), "MKL mask 2 element %d", i);
    /* keep() at any index equals the sequential stream (tiles can skip ahead) */
    attn_dropout d;
    attn_generator_seed(&g, 99);
    CHECK_OK(attn_dropout_begin(&g, 0.2, 100000, &d));
    float *big = malloc(100000 * sizeof *big), *bo = malloc(100000 * sizeof *bo);
    for (int i = 0; i < 100000; i++) big[i] = 1.0f;
    CHECK_OK(attn_dropout_apply(&d, big, bo));
    int agree = 1, kept = 0;
    for (int i = 0; i < 100000; i += 37) {
        agree &= attn_dropout_keep(&d, (uint64_t)i) == (bo[i] != 0.0f);
    }
    for (int i = 0; i < 100000; i++) kept += bo[i] != 0.0f;
    CHECK(agree, "random-access keep() disagrees with the sequential stream");
    CHECK(kept > 79000 && kept < 81000, "keep rate %d / 100000 for p = 0.2", kept);
    CHECK(bo[0] == 0.0f || bo[0] == 1.25f, "kept value is 1/(1-p) = 1.25, got %g", (double)bo[0]);
    attn_dropout_end(&d);
    free(big);
    free(bo);
}

static void test_dropout_edges(void) {
    attn_generator g, g0;
    attn_generator_seed(&g, 1);
    g0 = g;
    float in[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8];
    CHECK_OK(attn_dropout_tensor(&g, 0.0, in, out, 8));
    CHECK(!memcmp(&g, &g0, sizeof g), "p = 0 draws nothing");
    CHECK(!memcmp(in, out, sizeof in), "p = 0 is the identity");
    CHECK_OK(attn_dropout_tensor(&g, 1.0, in, out, 8));
    CHECK(!memcmp(&g, &g0, sizeof g), "p = 1 draws nothing");
    for (int i = 0; i < 8; i++) CHECK(out[i] == 0.0f, "p = 1 gives zeros");
    CHECK(attn_dropout_tensor(&g, 1.5, in, out, 8) == ATTN_E_INVALID, "p > 1 rejected");
    CHECK(attn_dropout_tensor(&g, -0.1, in, out, 8) == ATTN_E_INVALID, "p < 0 rejected");
    attn_generator_set_flavor(&g, ATTN_TORCH_NOMKL);
    attn_generator_seed(&g, 3);
    CHECK(g.flavor == ATTN_TORCH_MKL, "manual_seed resets the flavor to the default (MKL)");
}

/* The tiled kernels' MKL stream (threshold compare, 8 lanes) equals
 * attn_dropout_keep element by element, on both kernel tables. */
static void test_dropout_kernels(void) {
    static const double ps[] = {0.5, 0.1, 0.25, 1e-9, 0.999999, 0.3333333333};
    const attn_kernel_table *tables[2] = {&attn_kernels_generic, attn_kernels()};
    for (int t = 0; t < 2; t++)
        for (size_t pi = 0; pi < sizeof ps / sizeof ps[0]; pi++) {
            attn_generator g;
            attn_generator_seed(&g, 1000 + pi);
            attn_dropout d;
            CHECK_OK(attn_dropout_begin(&g, ps[pi], 1ull << 40, &d));
            uint32_t thr = attn_dropout_mcg_threshold(&d);
            float row[203];
            int bad = 0;
            for (uint64_t start = 0; start < (1ull << 40); start = start * 7 + 12345) {
                for (int j = 0; j < 203; j++) row[j] = 1.0f;
                tables[t]->dropout_mcg(row, 203, attn_dropout_mcg_at(&d, start), thr, d.scale);
                for (int j = 0; j < 203; j++) bad += (row[j] != 0.0f) != attn_dropout_keep(&d, start + (uint64_t)j);
            }
            CHECK(bad == 0, "%s kernel: %d keep decisions differ for p = %g", tables[t]->name, bad, ps[pi]);
        }
}

int main(int argc, char **argv) {
    tu_init(argc, argv);
    char path[1024];
    snprintf(path, sizeof path, "%s/golden/rng.safetensors", tu_srcdir);
    CHECK_OK(attn_st_open(path, &golden));
    test_mt19937();
    if (golden) {
        test_rand_uniform_linear();
        test_dropout_golden();
    }
    test_dropout_mkl_seed();
    test_dropout_edges();
    test_dropout_kernels();
    attn_st_close(golden);
    return tu_finish("test_rng");
}
