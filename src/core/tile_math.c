/* Vector math for score_mod callbacks (attn.h, attn_tile_softcap): the
 * kernels the built-in rules run, on a caller's tile. */
#include "internal.h"
#include "kernels/kernels.h"

void attn_tile_softcap(float *s, int64_t ld, int64_t rows, int64_t cols, float cap, float *ds) {
    if (!s || rows <= 0 || cols <= 0 || !(cap > 0.0f)) return;
    const attn_kernel_table *kt = attn_kernels();
    for (int64_t r = 0; r < rows; r++) {
        float *x = s + r * ld;
        kt->softcap_row(x, cols, 1.0f, cap);
        if (ds)
            for (int64_t c = 0; c < cols; c++) {
                float t = x[c] / cap; /* exactly +-1 where tanh saturates: 0 */
                ds[r * ld + c] = 1.0f - t * t;
            }
    }
}
