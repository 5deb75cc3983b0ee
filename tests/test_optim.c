/* Optimizers against torch.optim (golden/optim.safetensors: three steps of
 * SGD and AdamW in several configurations), state save/load, bad configs. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static attn_st_file *gf;

static float *rd(const char *name, size_t n) {
    float *p = malloc(n * sizeof *p);
    attn_status st = attn_st_read_f32(gf, name, p, n);
    CHECK(st == ATTN_OK, "golden %s: %s", name, attn_status_string(st));
    return p;
}

static int parse_cfg(char *line, char *name, attn_optim_config *c) {
    char *save = NULL;
    int ok = 0;
    for (char *tok = strtok_r(line, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) continue;
        *eq = 0;
        const char *k = tok, *v = eq + 1;
        if (!strcmp(k, "name"))
            strcpy(name, v), ok++;
        else if (!strcmp(k, "kind"))
            attn_optim_config_default(c, strcmp(v, "sgd") ? ATTN_OPTIM_ADAMW : ATTN_OPTIM_SGD), ok++;
        else if (!strcmp(k, "lr"))
            c->lr = atof(v);
        else if (!strcmp(k, "momentum"))
            c->momentum = atof(v);
        else if (!strcmp(k, "dampening"))
            c->dampening = atof(v);
        else if (!strcmp(k, "weight_decay"))
            c->weight_decay = atof(v);
        else if (!strcmp(k, "nesterov"))
            c->nesterov = atof(v) != 0.0;
        else if (!strcmp(k, "maximize"))
            c->maximize = atof(v) != 0.0;
        else if (!strcmp(k, "beta1"))
            c->beta1 = atof(v);
        else if (!strcmp(k, "beta2"))
            c->beta2 = atof(v);
        else if (!strcmp(k, "eps"))
            c->eps = atof(v);
    }
    return ok == 2;
}

static const size_t sizes[2] = {35, 13};

/* run `steps` steps starting at step `from`, optionally through save/load */
static void run_steps(attn_optim *o, float **g, float **p, int from, int to) {
    for (int s = from; s < to; s++) {
        for (int i = 0; i < 2; i++) {
            char name[32];
            snprintf(name, sizeof name, "p%d.grad%d", i, s);
            float *gr = rd(name, sizes[i]);
            memcpy(g[i], gr, sizes[i] * sizeof(float));
            free(gr);
        }
        CHECK_OK(attn_optim_step(o));
    }
    (void)p;
}

static void one_config(const char *name, const attn_optim_config *c) {
    float *p[2], *g[2], *p2[2], *g2[2];
    attn_optim *o = NULL, *o2 = NULL;
    CHECK_OK(attn_optim_create(c, &o));
    CHECK_OK(attn_optim_create(c, &o2));
    if (!o || !o2) return;
    for (int i = 0; i < 2; i++) {
        char pn[32];
        snprintf(pn, sizeof pn, "p%d.init", i);
        p[i] = rd(pn, sizes[i]);
        p2[i] = rd(pn, sizes[i]);
        g[i] = calloc(sizes[i], sizeof(float));
        g2[i] = calloc(sizes[i], sizeof(float));
        snprintf(pn, sizeof pn, "p%d", i);
        CHECK_OK(attn_optim_add_param(o, pn, p[i], g[i], sizes[i]));
        CHECK_OK(attn_optim_add_param(o2, pn, p2[i], g2[i], sizes[i]));
    }
    run_steps(o, g, p, 0, 3);
    for (int i = 0; i < 2; i++) {
        char key[96], label[128]; /* name: up to 63 characters */
        snprintf(key, sizeof key, "%s.p%d", name, i);
        float *want = rd(key, sizes[i]);
        snprintf(label, sizeof label, "%s p%d after 3 steps", name, i);
        tu_allclose(label, p[i], want, sizes[i], 1e-6, 1e-7);
        free(want);
    }
    /* two steps, save, load into a fresh optimizer, one more step: identical */
    run_steps(o2, g2, p2, 0, 2);
    CHECK_OK(attn_optim_save(o2, "optim_state.safetensors"));
    attn_optim *o3 = NULL;
    CHECK_OK(attn_optim_create(c, &o3));
    for (int i = 0; i < 2; i++) {
        char pn[32];
        snprintf(pn, sizeof pn, "p%d", i);
        CHECK_OK(attn_optim_add_param(o3, pn, p2[i], g2[i], sizes[i]));
    }
    CHECK_OK(attn_optim_load(o3, "optim_state.safetensors"));
    run_steps(o3, g2, p2, 2, 3);
    for (int i = 0; i < 2; i++) {
        char label[128];
        snprintf(label, sizeof label, "%s p%d resumed from saved state", name, i);
        tu_equal(label, p2[i], p[i], sizes[i]);
    }
    /* a state file for other parameters is rejected without changing anything */
    attn_optim *o4 = NULL;
    CHECK_OK(attn_optim_create(c, &o4));
    float other[3] = {0}, og[3] = {0};
    CHECK_OK(attn_optim_add_param(o4, "other", other, og, 3));
    CHECK(attn_optim_load(o4, "optim_state.safetensors") != ATTN_OK, "%s: foreign state rejected", name);
    attn_optim_free(o4);
    unlink("optim_state.safetensors");
    attn_optim_free(o);
    attn_optim_free(o2);
    attn_optim_free(o3);
    for (int i = 0; i < 2; i++) free(p[i]), free(g[i]), free(p2[i]), free(g2[i]);
}

int main(int argc, char **argv) {
    tu_init(argc, argv);
    char path[1024];
    snprintf(path, sizeof path, "%s/golden/optim.safetensors", tu_srcdir);
    CHECK_OK(attn_st_open(path, &gf));
    snprintf(path, sizeof path, "%s/golden/optim_manifest.txt", tu_srcdir);
    FILE *m = fopen(path, "r");
    CHECK(m != NULL, "cannot open %s", path);
    char line[512];
    int n = 0;
    while (gf && m && fgets(line, sizeof line, m)) {
        char name[64];
        attn_optim_config c;
        if (!parse_cfg(line, name, &c)) continue;
        one_config(name, &c);
        n++;
    }
    if (m) fclose(m);
    CHECK(n == 7, "7 optimizer configurations, ran %d", n);
    attn_st_close(gf);
    /* defaults and bad configurations */
    attn_optim_config c;
    attn_optim_config_default(&c, ATTN_OPTIM_ADAMW);
    CHECK(c.lr == 1e-3 && c.beta1 == 0.9 && c.beta2 == 0.999 && c.eps == 1e-8 && c.weight_decay == 1e-2,
          "AdamW defaults");
    attn_optim *o = NULL;
    c.beta1 = 1.0;
    CHECK(attn_optim_create(&c, &o) == ATTN_E_INVALID, "beta1 = 1 rejected");
    attn_optim_config_default(&c, ATTN_OPTIM_SGD);
    CHECK(c.weight_decay == 0.0 && c.momentum == 0.0, "SGD defaults");
    c.nesterov = 1;
    CHECK(attn_optim_create(&c, &o) == ATTN_E_INVALID, "nesterov without momentum rejected");
    c.nesterov = 0;
    c.lr = -1;
    CHECK(attn_optim_create(&c, &o) == ATTN_E_INVALID, "negative lr rejected");
    return tu_finish("test_optim");
}
