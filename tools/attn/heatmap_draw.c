/* Attention heatmaps: the layout builds one list of rectangles and texts in
 * integer pixels; the SVG writer and the PNG rasterizer render that same
 * list. The raster uses an embedded 5x7 font scaled by whole pixels, so a
 * PNG depends only on the data (no fonts from the machine). */
#include "heatmap_draw.h"

#include "font5x7.h"

#include <math.h>
#include <png.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- colors --------------------------------------------------------------- */

/* viridis at t = 0, 1/8, ..., 1 (matplotlib's map), linear in between */
static const unsigned char VIRIDIS[9][3] = {{68, 1, 84},    {72, 40, 120},  {62, 73, 137},
                                            {49, 104, 142}, {38, 130, 142}, {31, 158, 137},
                                            {53, 183, 121}, {110, 206, 88}, {253, 231, 37}};
#define RGB(r, g, b) (((uint32_t)(r) << 16) | ((uint32_t)(g) << 8) | (uint32_t)(b))
#define WHITE RGB(255, 255, 255)
#define INK RGB(34, 34, 34)
#define MASKED RGB(214, 214, 214)
#define MASK_MARK RGB(160, 160, 160)

static uint32_t colormap(double t) {
    t = t < 0.0 ? 0.0 : t > 1.0 ? 1.0 : t;
    double f = t * 8.0;
    int i = (int)f;
    if (i >= 8) i = 7;
    f -= i;
    unsigned char c[3];
    for (int k = 0; k < 3; k++) c[k] = (unsigned char)lround(VIRIDIS[i][k] + f * (VIRIDIS[i + 1][k] - VIRIDIS[i][k]));
    return RGB(c[0], c[1], c[2]);
}

/* ---- the drawing ---------------------------------------------------------- */

enum { IT_RECT, IT_TEXT };
enum { AN_START, AN_MIDDLE, AN_END };

typedef struct item {
    int kind;
    int x, y, w, h; /* rect; text: anchor point (x, y = top of a horizontal text, or its
                     * anchor along a vertical one, which reads bottom to top) */
    uint32_t rgb;
    int cell; /* rect is a heatmap cell: q, k, wv, masked below */
    int64_t q, k;
    float wv;
    int masked;
    int s, anchor, vertical; /* text: pixel scale, anchor, rotated -90 degrees */
    char *text;
} item;

typedef struct scene {
    int W, H;
    item *it;
    size_t n, cap;
    int oom;
} scene;

static item *add(scene *sc) {
    if (sc->oom) return NULL;
    if (sc->n == sc->cap) {
        size_t cap = sc->cap ? 2 * sc->cap : 256;
        item *p = realloc(sc->it, cap * sizeof *p);
        if (!p) {
            sc->oom = 1;
            return NULL;
        }
        sc->it = p, sc->cap = cap;
    }
    item *i = &sc->it[sc->n++];
    memset(i, 0, sizeof *i);
    return i;
}

static void rect(scene *sc, int x, int y, int w, int h, uint32_t rgb) {
    item *i = add(sc);
    if (i) i->kind = IT_RECT, i->x = x, i->y = y, i->w = w, i->h = h, i->rgb = rgb;
}

static void text(scene *sc, int x, int y, int s, int anchor, int vertical, const char *t) {
    item *i = add(sc);
    if (!i) return;
    i->kind = IT_TEXT, i->x = x, i->y = y, i->s = s, i->anchor = anchor, i->vertical = vertical, i->rgb = INK;
    i->text = strdup(t);
    if (!i->text) sc->oom = 1;
}

static void scene_free(scene *sc) {
    for (size_t i = 0; i < sc->n; i++) free(sc->it[i].text);
    free(sc->it);
}

/* characters as drawn: UTF-8 sequences count once (the raster shows '?') */
static int glyph_count(const char *t) {
    int n = 0;
    for (const unsigned char *p = (const unsigned char *)t; *p; p++) n += (*p & 0xC0) != 0x80;
    return n;
}
static int text_len_px(const char *t, int s) {
    int n = glyph_count(t);
    return n ? 6 * s * n - s : 0;
}

/* a label cut to at most 16 characters ("..." ending) */
static void label_fit(char *dst, size_t cap, const char *src) {
    if (glyph_count(src) <= 16) {
        snprintf(dst, cap, "%s", src);
        return;
    }
    size_t b = 0;
    int n = 0;
    for (; src[b] && b + 4 < cap; b++) {
        if (((unsigned char)src[b] & 0xC0) != 0x80 && n++ == 13) break;
    }
    snprintf(dst, cap, "%.*s...", (int)b, src);
}

static void label_of(char *dst, size_t cap, const char *const *labels, int64_t i) {
    if (labels)
        label_fit(dst, cap, labels[i]);
    else
        snprintf(dst, cap, "%lld", (long long)i);
}

static void fmt_tick(char *dst, size_t cap, double v) { snprintf(dst, cap, "%.3g", v); }

/* The layout: title, key labels (vertical, above the grid), query labels
 * (left), the grid, a color bar with ticks, and a "masked" swatch. */
static void layout(const heatmap_spec *h, scene *sc) {
    int64_t S = h->S, Sk = h->Sk, big = S > Sk ? S : Sk;
    int cs = (int)(640 / big);
    cs = cs > 40 ? 40 : cs < 2 ? 2 : cs;
    int s = cs >= 18 ? 2 : 1; /* label scale */
    int gap = cs >= 8;        /* a 1-pixel white line between cells */
    int maxq = 1, maxk = 1;
    char buf[128];
    for (int64_t i = 0; i < S; i++) {
        label_of(buf, sizeof buf, h->qlabels, i);
        int n = glyph_count(buf);
        maxq = n > maxq ? n : maxq;
    }
    for (int64_t j = 0; j < Sk; j++) {
        label_of(buf, sizeof buf, h->klabels, j);
        int n = glyph_count(buf);
        maxk = n > maxk ? n : maxk;
    }
    float vmax = 0.0f;
    int any_masked = 0;
    for (int64_t i = 0; i < S * Sk; i++) {
        int m = h->scores && isinf(h->scores[i]) && h->scores[i] < 0;
        any_masked |= m;
        if (!m && h->weights[i] > vmax) vmax = h->weights[i];
    }
    if (h->vmax > 0.0f)
        vmax = h->vmax;
    else if (h->vmax == 0.0f && !(vmax > 1.0f))
        vmax = 1.0f; /* weights are probabilities: the scale is 0..1 (more after dropout) */
    else if (!(vmax > 0.0f))
        vmax = 1.0f;          /* auto on an all-zero map */
    const int M = 16, ts = 2; /* margin, title scale */
    int title_h = h->title ? 9 * ts + 10 : 0;
    int axis_h = 7 * ts + 8; /* the "keys" / "queries" axis titles */
    int left = M + axis_h + 6 * s * maxq + 6;
    int top = M + title_h + axis_h + 6 * s * maxk + 6;
    int gw = (int)(Sk * cs), gh = (int)(S * cs);
    int cbx = left + gw + 18, cbw = 14, cbh = gh < 120 ? 120 : gh;
    int tick_w = 6 * s * 6;
    sc->W = cbx + cbw + 6 + tick_w + M;
    static const char *const masked_note = "masked (the query cannot see this key)";
    int need_w = left + text_len_px(h->title ? h->title : "", ts) + M;
    if (sc->W < need_w) sc->W = need_w;
    need_w = left + 7 * s + 8 + text_len_px(masked_note, s) + M;
    if (any_masked && sc->W < need_w) sc->W = need_w;
    sc->H = top + (gh > cbh ? gh : cbh) + M + (any_masked ? 9 * s + 14 : 0);
    rect(sc, 0, 0, sc->W, sc->H, WHITE);
    if (h->title) text(sc, left, M, ts, AN_START, 0, h->title);
    /* axis titles */
    text(sc, left + gw / 2, M + title_h, ts, AN_MIDDLE, 0, "keys");
    text(sc, M, top + gh / 2, ts, AN_MIDDLE, 1, "queries");
    /* labels: every step-th when cells are smaller than the text */
    int step_q = (7 * s + 1 + cs - 1) / cs, step_k = step_q;
    for (int64_t i = 0; i < S; i += step_q) {
        label_of(buf, sizeof buf, h->qlabels, i);
        text(sc, left - 6, top + (int)i * cs + (cs - 7 * s) / 2, s, AN_END, 0, buf);
    }
    for (int64_t j = 0; j < Sk; j += step_k) {
        label_of(buf, sizeof buf, h->klabels, j);
        text(sc, left + (int)j * cs + (cs - 7 * s) / 2, top - 6, s, AN_START, 1, buf);
    }
    /* the cells */
    for (int64_t i = 0; i < S; i++)
        for (int64_t j = 0; j < Sk; j++) {
            float w = h->weights[i * Sk + j];
            int m = h->scores && isinf(h->scores[i * Sk + j]) && h->scores[i * Sk + j] < 0;
            item *it = add(sc);
            if (!it) return;
            it->kind = IT_RECT, it->cell = 1, it->q = i, it->k = j, it->wv = w, it->masked = m;
            it->x = left + (int)j * cs, it->y = top + (int)i * cs, it->w = it->h = cs - gap;
            it->rgb = m ? MASKED : colormap((double)w / vmax);
            if (m && cs >= 10) /* a small mark in the middle of a masked cell */
                rect(sc, it->x + (cs - gap) / 2 - 1, it->y + (cs - gap) / 2 - 1, 2, 2, MASK_MARK);
        }
    /* the color bar: 0 at the bottom, vmax at the top */
    for (int r = 0; r < cbh; r++) rect(sc, cbx, top + r, cbw, 1, colormap((double)(cbh - 1 - r) / (cbh - 1)));
    for (int t = 0; t <= 4; t++) {
        int y = top + (cbh - 1) - (cbh - 1) * t / 4;
        rect(sc, cbx + cbw, y, 4, 1, INK);
        fmt_tick(buf, sizeof buf, vmax * t / 4.0);
        text(sc, cbx + cbw + 6, y - 7 * s / 2, s, AN_START, 0, buf);
    }
    if (any_masked) {
        int y = top + (gh > cbh ? gh : cbh) + 10;
        rect(sc, left, y, 7 * s + 2, 7 * s + 2, MASKED);
        text(sc, left + 7 * s + 8, y + 1, s, AN_START, 0, masked_note);
    }
}

/* ---- SVG ------------------------------------------------------------------- */

static void svg_escape(FILE *f, const char *t) {
    for (const unsigned char *p = (const unsigned char *)t; *p; p++) {
        if (*p == '&')
            fputs("&amp;", f);
        else if (*p == '<')
            fputs("&lt;", f);
        else if (*p == '>')
            fputs("&gt;", f);
        else if (*p == '"')
            fputs("&quot;", f);
        else if (*p < 0x20)
            fputc('?', f);
        else
            fputc(*p, f);
    }
}

static void write_svg(const scene *sc, const heatmap_spec *h, FILE *f) {
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "font-family=\"DejaVu Sans Mono, monospace\">\n",
            sc->W, sc->H, sc->W, sc->H);
    if (h->title) {
        fputs("<title>", f);
        svg_escape(f, h->title);
        fputs("</title>\n", f);
    }
    static const char *const anchors[3] = {"start", "middle", "end"};
    char ql[128], kl[128];
    for (size_t n = 0; n < sc->n; n++) {
        const item *i = &sc->it[n];
        if (i->kind == IT_RECT) {
            fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#%06x\"", i->x, i->y, i->w, i->h,
                    (unsigned)i->rgb);
            if (!i->cell) {
                fputs("/>\n", f);
                continue;
            }
            fprintf(f, " data-q=\"%lld\" data-k=\"%lld\" data-w=\"%.6f\"%s><title>", (long long)i->q, (long long)i->k,
                    (double)i->wv, i->masked ? " data-masked=\"1\"" : "");
            label_of(ql, sizeof ql, h->qlabels, i->q);
            label_of(kl, sizeof kl, h->klabels, i->k);
            fprintf(f, "query %lld (", (long long)i->q);
            svg_escape(f, ql);
            fprintf(f, ") -&gt; key %lld (", (long long)i->k);
            svg_escape(f, kl);
            if (i->masked)
                fputs("): masked</title></rect>\n", f);
            else
                fprintf(f, "): %.4f</title></rect>\n", (double)i->wv);
        } else {
            /* font-size 10 s: the cap height of a monospace face is ~0.7 em = 7 s */
            if (i->vertical)
                fprintf(f, "<text transform=\"translate(%d %d) rotate(-90)\"", i->x + 7 * i->s, i->y);
            else
                fprintf(f, "<text x=\"%d\" y=\"%d\"", i->x, i->y + 7 * i->s);
            fprintf(f, " font-size=\"%d\" text-anchor=\"%s\" fill=\"#%06x\">", 10 * i->s, anchors[i->anchor],
                    (unsigned)i->rgb);
            svg_escape(f, i->text);
            fputs("</text>\n", f);
        }
    }
    fputs("</svg>\n", f);
}

/* ---- raster ---------------------------------------------------------------- */

typedef struct raster {
    int W, H;
    unsigned char *px; /* RGB */
} raster;

static void put_rect(raster *r, int x, int y, int w, int h, uint32_t rgb) {
    int x0 = x < 0 ? 0 : x, y0 = y < 0 ? 0 : y, x1 = x + w > r->W ? r->W : x + w, y1 = y + h > r->H ? r->H : y + h;
    for (int yy = y0; yy < y1; yy++)
        for (int xx = x0; xx < x1; xx++) {
            unsigned char *p = r->px + ((size_t)yy * (size_t)r->W + (size_t)xx) * 3;
            p[0] = (unsigned char)(rgb >> 16), p[1] = (unsigned char)(rgb >> 8), p[2] = (unsigned char)rgb;
        }
}

static void put_text(raster *r, const item *i) {
    int s = i->s, len = text_len_px(i->text, s);
    int shift = i->anchor == AN_START ? 0 : i->anchor == AN_MIDDLE ? len / 2 : len;
    int u0 = 0; /* position along the text */
    for (const unsigned char *p = (const unsigned char *)i->text; *p; p++) {
        if ((*p & 0xC0) == 0x80) continue; /* inside a UTF-8 sequence */
        int c = *p >= 32 && *p < 127 ? *p : '?';
        const unsigned char *g = font5x7[c - 32];
        for (int gy = 0; gy < 9; gy++)
            for (int gx = 0; gx < 5; gx++) {
                if (!(g[gy] >> (4 - gx) & 1)) continue;
                int u = u0 + gx * s - shift, v = gy * s;
                if (i->vertical) /* rotated -90 degrees: along the text is up, glyph tops point left */
                    put_rect(r, i->x + v, i->y - u - s, s, s, i->rgb);
                else
                    put_rect(r, i->x + u, i->y + v, s, s, i->rgb);
            }
        u0 += 6 * s;
    }
}

static int write_png(const scene *sc, FILE *f, char *err, size_t errlen) {
    raster r = {sc->W, sc->H, malloc((size_t)sc->W * (size_t)sc->H * 3)};
    png_bytep *rows = malloc((size_t)sc->H * sizeof *rows);
    if (!r.px || !rows) {
        free(r.px), free(rows);
        snprintf(err, errlen, "out of memory for a %d x %d picture", sc->W, sc->H);
        return -1;
    }
    for (size_t n = 0; n < sc->n; n++) {
        const item *i = &sc->it[n];
        if (i->kind == IT_RECT)
            put_rect(&r, i->x, i->y, i->w, i->h, i->rgb);
        else
            put_text(&r, i);
    }
    for (int y = 0; y < sc->H; y++) rows[y] = r.px + (size_t)y * (size_t)sc->W * 3;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    int rc = -1;
    if (png && info && !setjmp(png_jmpbuf(png))) {
        png_init_io(png, f);
        png_set_IHDR(png, info, (png_uint_32)sc->W, (png_uint_32)sc->H, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
                     PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
        png_write_info(png, info);
        png_write_image(png, rows);
        png_write_end(png, NULL);
        rc = 0;
    } else {
        snprintf(err, errlen, "libpng could not encode the picture");
    }
    png_destroy_write_struct(png ? &png : NULL, info ? &info : NULL);
    free(r.px), free(rows);
    return rc;
}

/* ---- files ------------------------------------------------------------------ */

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcasecmp(s + a - b, suf);
}

int heatmap_format_ok(const char *path) { return ends_with(path, ".svg") || ends_with(path, ".png"); }

int heatmap_write(const heatmap_spec *h, const char *path, char *err, size_t errlen) {
    if (!heatmap_format_ok(path)) {
        snprintf(err, errlen, "'%s': the output must end in .svg or .png", path);
        return -1;
    }
    if (h->S < 1 || h->Sk < 1 || h->S > 100000 || h->Sk > 100000) {
        snprintf(err, errlen, "a %lld x %lld map cannot be drawn", (long long)h->S, (long long)h->Sk);
        return -1;
    }
    scene sc;
    memset(&sc, 0, sizeof sc);
    layout(h, &sc);
    if (sc.oom) {
        scene_free(&sc);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    size_t n = strlen(path);
    char *tmp = malloc(n + 16);
    if (!tmp) {
        scene_free(&sc);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    snprintf(tmp, n + 16, "%s.tmp-XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd >= 0) (void)fchmod(fd, 0644); /* mkstemp creates 0600; outputs are ordinary files */
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    int rc = -1;
    if (!f) {
        if (fd >= 0) close(fd), unlink(tmp);
        snprintf(err, errlen, "cannot create a file next to '%s'", path);
    } else {
        if (ends_with(path, ".svg")) {
            write_svg(&sc, h, f);
            rc = 0;
        } else {
            rc = write_png(&sc, f, err, errlen);
        }
        if (fflush(f) != 0 || ferror(f)) {
            if (!rc) snprintf(err, errlen, "cannot write '%s'", path);
            rc = -1;
        }
        if (fclose(f) != 0 && !rc) {
            snprintf(err, errlen, "cannot write '%s'", path);
            rc = -1;
        }
        if (!rc && rename(tmp, path) != 0) {
            snprintf(err, errlen, "cannot replace '%s'", path);
            rc = -1;
        }
        if (rc) unlink(tmp);
    }
    free(tmp);
    scene_free(&sc);
    return rc;
}
