/* What the layer code shares, below it: tensor lookup by state_dict name,
 * error details and the forward cache's release. kinds.c (the table of
 * kinds), layer.c (construction, init, load/save) and compute.c (forward,
 * backward) call down into this file; layer.c and compute.c read the table
 * in kinds.c and never call each other. */
#include "layer_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

layer_tensor *attn_layer_find(const attn_layer *l, const char *name) {
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->t[i].name, name) == 0) return &l->t[i];
    return NULL;
}

layer_tensor *attn_layer_findf(const attn_layer *l, const char *fmt, long long h) {
    char name[LAYER_NAME_MAX];
    snprintf(name, sizeof name, fmt, h);
    return attn_layer_find(l, name);
}

void attn_layer_detail(char *buf, size_t len, const char *fmt, ...) {
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    attn_fail(ATTN_OK, "%s", line); /* the thread's detail too (attn_last_error) */
    if (buf && len) snprintf(buf, len, "%s", line);
}

void attn_layer_cache_clear(layer_cache *c) {
    for (int b = 0; b < BUF_COUNT; b++) free(c->buf[b]);
    for (int g = 0; g < c->ngroups; g++) attn_dropout_end(&c->drops[g]);
    attn_dropout_end(&c->out_drop);
    free(c->drops);
    free(c->groups);
    free(c->mask);
    free(c->lse);
    memset(c, 0, sizeof *c);
}
