/* Fuzz harness: arbitrary bytes as a safetensors file, then as the weights of
 * every layer kind. Built two ways:
 *   - with clang -fsanitize=fuzzer,address (cmake -DATTN_FUZZ=ON, `make fuzz`)
 *     as a libFuzzer target;
 *   - in every normal build as test_fuzz_corpus, which replays the committed
 *     corpus (tests/fuzz/corpus) through the same entry point.
 * Everything must be rejected or accepted cleanly: no crash, no leak, no
 * out-of-bounds read (ASan), no UB (UBSan in SANITIZE=1 builds). */
#include "attn.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    attn_st_file *f = NULL;
    if (attn_st_open_memory(data, size, &f) != ATTN_OK) return 0;
    for (int i = 0; i < attn_st_count(f); i++) {
        const char *name = attn_st_name(f, i);
        attn_dtype dt;
        int nd;
        int64_t sh[ATTN_MAX_DIMS];
        if (attn_st_info(f, name, &dt, &nd, sh) != ATTN_OK) continue;
        size_t n = 1;
        int big = 0;
        for (int d = 0; d < nd; d++) {
            if (sh[d] > 0 && n > ((size_t)1 << 22) / (size_t)sh[d]) big = 1;
            n *= (size_t)sh[d];
        }
        if (big) continue;
        float *buf = malloc((n ? n : 1) * sizeof(float));
        if (!buf) continue;
        if (dt == ATTN_DTYPE_BOOL || dt == ATTN_DTYPE_U8)
            (void)attn_st_read_u8(f, name, (uint8_t *)buf, n);
        else
            (void)attn_st_read_f32(f, name, buf, n);
        (void)attn_st_read_f32(f, name, buf, n + 1); /* wrong count: must be refused */
        free(buf);
    }
    for (int k = 0; k < ATTN_LAYER_KIND_COUNT; k++) {
        attn_layer_config c;
        attn_layer_config_default(&c, (attn_layer_kind)k, 4, 4, 2);
        attn_layer *l = NULL;
        char why[128];
        if (attn_layer_load_ex(&c, f, &l, why, sizeof why) == ATTN_OK) {
            const attn_layer_config *lc = attn_layer_get_config(l);
            /* a tiny forward on weights that loaded: shapes must be consistent */
            if (lc->d_in <= 64 && lc->context_length <= 64) {
                int64_t S = 3, C = lc->d_in, W = attn_layer_out_width(l);
                float *x = calloc((size_t)(S * C), sizeof(float)), *out = calloc((size_t)(S * W), sizeof(float));
                attn_forward_args a = {
                    x, 1, S, k == ATTN_LAYER_CROSS ? x : NULL, S, NULL, 0, NULL, ATTN_IMPL_AUTO, out, ATTN_MATH_STRICT};
                if (x && out) (void)attn_layer_forward(l, &a);
                free(x);
                free(out);
            }
        }
        attn_layer_free(l);
    }
    attn_st_close(f);
    return 0;
}
