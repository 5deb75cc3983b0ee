/* The core attention's inference features against PyTorch (golden/sdpa_*,
 * from gen_sdpa_golden.py): each case through `attn sdpa --grad` with the
 * reference and the fused path, out, lse, dq, dk, dv. A tensor missing from
 * the golden file is a test failure, not a skip.
 * With a launcher (e.g. "mpirun -np 3 --oversubscribe") the same cases run
 * as `LAUNCHER attn sdpa --ring EXTRA...`: ring attention over MPI must write
 * PyTorch's results too.
 * usage: test_sdpa_golden SRCDIR ATTN_BINARY [LAUNCHER [EXTRA_OPTIONS]] */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static float *read_all(const attn_st_file *f, const char *name, size_t *n) {
    int nd;
    int64_t sh[ATTN_MAX_DIMS];
    if (!f || attn_st_info(f, name, NULL, &nd, sh) != ATTN_OK) return NULL;
    *n = 1;
    for (int i = 0; i < nd; i++) *n *= (size_t)sh[i];
    float *p = malloc((*n ? *n : 1) * sizeof *p);
    if (p && attn_st_read_f32(f, name, p, *n) != ATTN_OK) {
        free(p);
        return NULL;
    }
    return p;
}

static const char *launcher = "", *ring_opts = "";

static void run_case(const char *attn, const char *name, const char *opts, const char *impl) {
    char in[1024], out[256], cmd[3072];
    snprintf(in, sizeof in, "%s/golden/%s.safetensors", tu_srcdir, name);
    snprintf(out, sizeof out, "%s_%s.out.safetensors", name, impl);
    snprintf(cmd, sizeof cmd, "%s '%s' sdpa --input '%s' --output '%s' --grad --impl %s %s%s%s", launcher, attn, in,
             out, impl, opts, *launcher ? " --ring " : "", ring_opts);
    int rc = system(cmd);
    CHECK(rc == 0, "%s: '%s' exited %d", name, cmd, rc);
    if (rc) return;
    attn_st_file *want = NULL, *got = NULL;
    CHECK_OK(attn_st_open(in, &want));
    CHECK_OK(attn_st_open(out, &got));
    const char *names[] = {"out", "lse", "dq", "dk", "dv"};
    for (int t = 0; t < 5; t++) {
        size_t n1 = 0, n2 = 0;
        float *a = read_all(got, names[t], &n1), *b = read_all(want, names[t], &n2);
        CHECK(a && b && n1 == n2, "%s %s: tensor '%s' missing or of another size", name, impl, names[t]);
        if (a && b && n1 == n2) {
            char label[128];
            snprintf(label, sizeof label, "%s %s (%s)", name, names[t], impl);
            /* -inf lse rows must match exactly; the rest within float32 accumulation error */
            tu_allclose(label, a, b, n1, 2e-4, 2e-5);
        }
        free(a), free(b);
    }
    attn_st_close(want);
    attn_st_close(got);
    unlink(out);
}

int main(int argc, char **argv) {
    tu_init(argc, argv);
    if (argc < 3) return 2;
    if (argc > 3) launcher = argv[3];
    if (argc > 4) ring_opts = argv[4];
    char path[1024], line[512];
    snprintf(path, sizeof path, "%s/golden/sdpa_manifest.txt", tu_srcdir);
    FILE *m = fopen(path, "r");
    CHECK(m != NULL, "cannot open %s", path);
    int ncases = 0;
    while (m && fgets(line, sizeof line, m)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        line[strcspn(line, "\n")] = 0;
        char *sp = strchr(line, ' ');
        if (strncmp(line, "case=", 5) || !sp) {
            CHECK(0, "bad manifest line: %s", line);
            continue;
        }
        *sp = 0;
        run_case(argv[2], line + 5, sp + 1, "ref");
        run_case(argv[2], line + 5, sp + 1, "fast");
        ncases++;
    }
    if (m) fclose(m);
    CHECK(ncases >= 10, "only %d sdpa golden cases", ncases);
    printf("%d sdpa golden cases\n", ncases);
    return tu_finish("test_sdpa_golden");
}
