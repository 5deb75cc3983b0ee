/* attn heatmap and attn demo --heatmaps: the SVG's cells carry PyTorch's
 * attention weights (golden attn_weights), hidden keys are marked, the PNG
 * is the same drawing (each cell's pixels have the SVG cell's color), and
 * bad requests fail cleanly without touching an existing output.
 * usage: test_heatmap SRCDIR ATTN_BINARY */
#include "testutil.h"

#include <math.h>
#include <png.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static const char *attn;

typedef struct cell {
    long q, k, x, y, w, h;
    unsigned rgb;
    double wv;
    int masked;
} cell;

static int run(const char *args) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>/dev/null", attn, args);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* the cells of an SVG written by attn heatmap; returns the count */
static long svg_cells(const char *svg, cell *out, long cap, long *W, long *H) {
    sscanf(strstr(svg, "<svg"), "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%ld\" height=\"%ld\"", W, H);
    long n = 0;
    for (const char *p = strstr(svg, "<rect "); p; p = strstr(p + 1, "<rect ")) {
        const char *end = strchr(p, '>');
        const char *dq = strstr(p, "data-q=");
        if (!dq || dq > end) continue;
        cell c;
        memset(&c, 0, sizeof c);
        int got = sscanf(p,
                         "<rect x=\"%ld\" y=\"%ld\" width=\"%ld\" height=\"%ld\" fill=\"#%x\" data-q=\"%ld\" "
                         "data-k=\"%ld\" data-w=\"%lf\"",
                         &c.x, &c.y, &c.w, &c.h, &c.rgb, &c.q, &c.k, &c.wv);
        CHECK(got == 8, "cannot parse SVG cell: %.120s", p);
        const char *dm = strstr(p, "data-masked=\"1\"");
        c.masked = dm && dm < end;
        if (n < cap) out[n] = c;
        n++;
    }
    return n;
}

/* the PNG's pixels (RGB) or NULL */
static unsigned char *png_pixels(const char *path, long *W, long *H) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    unsigned char *px = NULL;
    png_bytep *rows = NULL;
    if (png && info && !setjmp(png_jmpbuf(png))) {
        png_init_io(png, f);
        png_read_info(png, info);
        *W = (long)png_get_image_width(png, info), *H = (long)png_get_image_height(png, info);
        if (png_get_color_type(png, info) == PNG_COLOR_TYPE_RGB && png_get_bit_depth(png, info) == 8) {
            px = malloc((size_t)(*W * *H * 3));
            rows = malloc((size_t)*H * sizeof *rows);
            for (long y = 0; px && rows && y < *H; y++) rows[y] = px + y * *W * 3;
            if (px && rows) png_read_image(png, rows);
        }
    }
    png_destroy_read_struct(png ? &png : NULL, info ? &info : NULL, NULL);
    free(rows);
    fclose(f);
    return px;
}

/* one golden case: every (batch, head) map against PyTorch's weights */
static void check_case(const char *name, const char *flags, int mapped_masks) {
    char wpath[1024], iopath[1024];
    snprintf(wpath, sizeof wpath, "%s/golden/%s.weights.safetensors", tu_srcdir, name);
    snprintf(iopath, sizeof iopath, "%s/golden/%s.io.safetensors", tu_srcdir, name);
    attn_st_file *io = NULL;
    CHECK_OK(attn_st_open(iopath, &io));
    if (!io) return;
    int nd;
    int64_t sh[ATTN_MAX_DIMS];
    CHECK_OK(attn_st_info(io, "attn_weights", NULL, &nd, sh));
    int64_t B = sh[0], H = sh[1], S = sh[2], Sk = sh[3], n = B * H * S * Sk;
    float *want = malloc((size_t)n * sizeof *want);
    CHECK_OK(attn_st_read_f32(io, "attn_weights", want, (size_t)n));
    cell *cells = malloc((size_t)(S * Sk) * sizeof *cells);
    int masked_seen = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            char args[4096];
            const char *fmt = "heatmap %s --weights '%s' --input '%s' --head %lld --batch %lld --output hm.%s";
            snprintf(args, sizeof args, fmt, flags, wpath, iopath, (long long)h, (long long)b, "svg");
            CHECK(run(args) == 0, "%s: attn %s failed", name, args);
            snprintf(args, sizeof args, fmt, flags, wpath, iopath, (long long)h, (long long)b, "png");
            CHECK(run(args) == 0, "%s: attn %s failed", name, args);
            char *svg = tu_slurp("hm.svg", NULL);
            CHECK(svg != NULL, "%s: no SVG", name);
            if (!svg) continue;
            long W = 0, Hh = 0, pw = 0, ph = 0;
            long nc = svg_cells(svg, cells, S * Sk, &W, &Hh);
            CHECK(nc == S * Sk, "%s: %ld cells in the SVG, want %lld", name, nc, (long long)(S * Sk));
            unsigned char *px = png_pixels("hm.png", &pw, &ph);
            CHECK(px && pw == W && ph == Hh, "%s: PNG %ldx%ld, SVG %ldx%ld", name, pw, ph, W, Hh);
            long bad_w = 0, bad_m = 0, bad_px = 0, seen = 0;
            for (long i = 0; i < nc && i < S * Sk; i++) {
                const cell *c = &cells[i];
                if (c->q < 0 || c->q >= S || c->k < 0 || c->k >= Sk) continue;
                seen++;
                float g = want[((b * H + h) * S + c->q) * Sk + c->k];
                bad_w += !(fabs(c->wv - g) <= 2e-5 + 2e-4 * fabs(g) + 5e-7);
                bad_m += c->masked != (g == 0.0f); /* PyTorch gives exactly 0 to a hidden key */
                masked_seen |= c->masked;
                if (px) { /* the cell's corner pixel in the PNG has the SVG cell's color */
                    const unsigned char *p = px + (c->y * pw + c->x) * 3;
                    bad_px += ((unsigned)p[0] << 16 | (unsigned)p[1] << 8 | p[2]) != c->rgb;
                }
            }
            CHECK(seen == S * Sk, "%s: cells out of range", name);
            CHECK(bad_w == 0, "%s b%lld h%lld: %ld data-w differ from PyTorch's weights", name, (long long)b,
                  (long long)h, bad_w);
            CHECK(bad_m == 0, "%s b%lld h%lld: %ld cells masked wrongly", name, (long long)b, (long long)h, bad_m);
            CHECK(bad_px == 0, "%s b%lld h%lld: %ld PNG cells differ from the SVG's", name, (long long)b, (long long)h,
                  bad_px);
            free(px);
            free(svg);
        }
    CHECK(masked_seen == mapped_masks, "%s: masked cells %s", name, mapped_masks ? "missing" : "unexpected");
    free(cells);
    free(want);
    attn_st_close(io);
}

static void check_errors(void) {
    char wpath[1024], iopath[1024], args[4096];
    snprintf(wpath, sizeof wpath, "%s/golden/causal_mha_16.weights.safetensors", tu_srcdir);
    snprintf(iopath, sizeof iopath, "%s/golden/causal_mha_16.io.safetensors", tu_srcdir);
    FILE *f = fopen("keep.png", "w");
    fputs("keep", f);
    fclose(f);
    const char *bad[] = {"--head 2", "--batch 99", "--tokens a,b", "--heads 3", "--seed"};
    for (int i = 0; i < 5; i++) {
        snprintf(args, sizeof args,
                 "heatmap causal_mha --heads 2 --context-length 18 --weights '%s' --input '%s' --output keep.png %s",
                 wpath, iopath, bad[i]);
        int rc = run(args);
        CHECK(rc == 1 || rc == 2, "'%s' exited %d", bad[i], rc);
    }
    snprintf(args, sizeof args,
             "heatmap causal_mha --heads 2 --weights '%s' --input missing.safetensors --output keep.png", wpath);
    CHECK(run(args) == 1, "missing input: exit 1");
    snprintf(args, sizeof args, "heatmap causal_mha --heads 2 --weights '%s' --input '%s' --output map.jpg", wpath,
             iopath);
    CHECK(run(args) == 2, ".jpg output: exit 2");
    char *k = tu_slurp("keep.png", NULL);
    CHECK(k && !strcmp(k, "keep"), "a failed heatmap changed the existing output");
    free(k);
    /* tokens label the axes, escaped in the SVG */
    snprintf(args, sizeof args,
             "heatmap sa_v1 --weights '%s/golden/sa_v1_0.weights.safetensors' --input "
             "'%s/golden/sa_v1_0.io.safetensors' --output tok.svg --tokens 'Your,journey,starts,with,one,a<b&c'",
             tu_srcdir, tu_srcdir);
    CHECK(run(args) == 0, "heatmap with tokens");
    char *svg = tu_slurp("tok.svg", NULL);
    CHECK(svg && strstr(svg, ">journey</text>") && strstr(svg, ">a&lt;b&amp;c</text>"), "token labels in the SVG");
    free(svg);
    /* --vmax auto: the largest weight gets the top color of the scale (viridis' yellow) */
    const char *v2 = "heatmap sa_v2 --weights '%s/golden/sa_v2_4.weights.safetensors' --input "
                     "'%s/golden/sa_v2_4.io.safetensors' --output %s --vmax %s";
    snprintf(args, sizeof args, v2, tu_srcdir, tu_srcdir, "auto.svg", "auto");
    CHECK(run(args) == 0, "--vmax auto");
    snprintf(args, sizeof args, v2, tu_srcdir, tu_srcdir, "zero.svg", "0");
    CHECK(run(args) == 2, "--vmax 0 is a usage error");
    svg = tu_slurp("auto.svg", NULL);
    static cell cs[64 * 64];
    long W, H, n = svg ? svg_cells(svg, cs, 64 * 64, &W, &H) : 0, top = 0;
    for (long i = 1; i < n && i < 64 * 64; i++) top = cs[i].wv > cs[top].wv ? i : top;
    CHECK(n == 64 * 64 && cs[top].rgb == 0xfde725, "--vmax auto: the largest weight is #%06x", n ? cs[top].rgb : 0);
    free(svg);
}

static void check_demo(void) {
    CHECK(run("demo --heatmaps maps > demo.txt") == 0, "attn demo --heatmaps maps");
    const char *names[] = {"01_weightless",
                           "02_sa_v1",
                           "03_sa_v2",
                           "04_causal",
                           "05_causal_dropout",
                           "06_mha_wrapper_head0",
                           "06_mha_wrapper_head1",
                           "07_mha_head1",
                           "08_gpt_mha_head1",
                           "09_fused_mha_head0",
                           "10_bidirectional_padding_head1",
                           "11_causal_mha_padding_head0"};
    for (int i = 0; i < 12; i++) {
        char path[256];
        size_t len = 0;
        snprintf(path, sizeof path, "maps/%s.svg", names[i]);
        char *svg = tu_slurp(path, &len);
        CHECK(svg && strstr(svg, "data-w=\""), "%s: no cells", path);
        long W, H, pw = 0, ph = 0;
        cell c[64];
        long n = svg ? svg_cells(svg, c, 64, &W, &H) : 0;
        CHECK(n == 36 || n == 25, "%s: %ld cells", path, n);
        snprintf(path, sizeof path, "maps/%s.png", names[i]);
        unsigned char *px = png_pixels(path, &pw, &ph);
        CHECK(px && pw == W && ph == H, "%s: not the SVG's drawing", path);
        free(px);
        free(svg);
    }
    /* the causal map masks exactly the 15 keys above the diagonal */
    char *svg = tu_slurp("maps/04_causal.svg", NULL);
    long W, H, masked = 0, bad = 0;
    cell c[36];
    long n = svg ? svg_cells(svg, c, 36, &W, &H) : 0;
    for (long i = 0; i < n && i < 36; i++) masked += c[i].masked, bad += c[i].masked != (c[i].k > c[i].q);
    CHECK(n == 36 && masked == 15 && bad == 0, "04_causal: %ld masked, %ld misplaced", masked, bad);
    free(svg);
}

int main(int argc, char **argv) {
    tu_init(argc, argv);
    attn = argc > 2 ? argv[2] : NULL;
    CHECK(attn != NULL, "usage: test_heatmap SRCDIR ATTN_BINARY");
    if (!attn) return tu_finish("test_heatmap");
    check_case("causal_mha_16", "causal_mha --heads 2 --context-length 18", 1);
    check_case("cross_26", "cross --heads 1 --context-length 66", 1);
    check_case("sa_v2_2", "sa_v2", 0);
    check_case("gpt_mha_12", "gpt_mha --heads 2", 1);
    check_errors();
    check_demo();
    return tu_finish("test_heatmap");
}
