/* Every tensor printed in seeds 000, 002 and 003 (tests/seed_tensors.txt,
 * extracted by extract_seed_tensors.py) must appear in `attn demo` output, as
 * many times as the seeds print it, with the same 4-decimal digits.
 * Comparison ignores whitespace and grad_fn suffixes.
 * usage: test_seed_tensors SRCDIR DEMO_OUTPUT */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

/* Remove whitespace and ", grad_fn=<...>" in place. */
static void normalize(char *s) {
    char *w = s;
    for (char *r = s; *r;) {
        if (*r == ' ' || *r == '\n' || *r == '\t' || *r == '\r') {
            r++;
            continue;
        }
        if (*r == ',') { /* ", grad_fn=<...>" possibly across a line break */
            const char *q = r + 1;
            while (*q == ' ' || *q == '\n') q++;
            if (strncmp(q, "grad_fn=<", 9) == 0) {
                char *e = strchr(q, '>');
                if (e) {
                    r = e + 1;
                    continue;
                }
            }
        }
        *w++ = *r++;
    }
    *w = 0;
}

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++) n++;
    return n;
}

int main(int argc, char **argv) {
    tu_init(argc, argv);
    if (argc < 3) {
        fprintf(stderr, "usage: test_seed_tensors SRCDIR DEMO_OUTPUT\n");
        return 2;
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/seed_tensors.txt", tu_srcdir);
    char *exp = tu_slurp(path, NULL), *demo = tu_slurp(argv[2], NULL);
    CHECK(exp && demo, "cannot read %s or %s", path, argv[2]);
    if (!exp || !demo) return tu_finish("test_seed_tensors");
    normalize(demo);
    char *blk[128];
    int nb = 0;
    for (char *b = exp; b && nb < 128;) {
        char *sep = strstr(b, "\n----\n");
        if (sep) *sep = 0;
        normalize(b);
        if (*b) blk[nb++] = b;
        b = sep ? sep + 6 : NULL;
    }
    CHECK(nb == 79, "expected 79 seed tensors, read %d", nb);
    for (int i = 0; i < nb; i++) {
        int want = 0;
        for (int j = 0; j < nb; j++) want += strcmp(blk[i], blk[j]) == 0;
        int got = count(demo, blk[i]);
        CHECK(got >= want, "seed tensor #%d printed %d times by the seeds, %d times by the demo: %.160s", i + 1, want,
              got, blk[i]);
    }
    free(exp);
    free(demo);
    return tu_finish("test_seed_tensors");
}
