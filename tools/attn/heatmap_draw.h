/* Attention heatmaps: one drawing, rendered as SVG (every cell an element
 * with data-q, data-k, data-w) or as PNG (libpng, an embedded 5x7 font, so
 * the pixels depend on nothing installed on the machine). */
#ifndef ATTN_TOOL_HEATMAP_DRAW_H
#define ATTN_TOOL_HEATMAP_DRAW_H

#include <stddef.h>
#include <stdint.h>

typedef struct heatmap_spec {
    const float *weights;                        /* (S, Sk) row-major */
    const float *scores;                         /* (S, Sk) or NULL: -inf marks a key the query cannot see */
    int64_t S, Sk;                               /* queries (rows), keys (columns) */
    const char *const *qlabels, *const *klabels; /* S and Sk labels, or NULL for positions */
    const char *title;
    float vmax; /* top of the color scale: 0 = max(1, largest weight) (weights are probabilities;
                 * dropout can scale them above 1), < 0 = the largest visible weight, > 0 = this */
} heatmap_spec;

/* 1 if path ends in .svg or .png (case-insensitive) */
int heatmap_format_ok(const char *path);
/* Draw the map and write it to path (.svg or .png) atomically: a temporary
 * file in the same directory renamed over path, so an existing file is
 * replaced only by a complete picture. Returns 0, or -1 with a message in
 * err. */
int heatmap_write(const heatmap_spec *h, const char *path, char *err, size_t errlen);

#endif
