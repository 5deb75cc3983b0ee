/* What both halves of the layer code share, below them: the kind
 * predicates, tensor lookup by state_dict name and the forward cache's
 * release. layer.c (construction, init, load/save) and compute.c (forward,
 * backward) both call down into this file; neither calls the other. */
#include "layer_internal.h"

#include <stdlib.h>
#include <string.h>

int attn_kind_has_buffer_mask(attn_layer_kind k) {
    return k == ATTN_LAYER_CAUSAL || k == ATTN_LAYER_MHA_WRAPPER || k == ATTN_LAYER_MHA || k == ATTN_LAYER_GPT_MHA;
}
int attn_kind_is_causal(attn_layer_kind k) {
    return attn_kind_has_buffer_mask(k) || k == ATTN_LAYER_CAUSAL_MHA || k == ATTN_LAYER_CROSS;
}
int attn_kind_takes_mask(attn_layer_kind k) {
    return k == ATTN_LAYER_BIDIRECTIONAL || k == ATTN_LAYER_CAUSAL_MHA || k == ATTN_LAYER_CROSS;
}
layer_tensor *attn_layer_find(const attn_layer *l, const char *name) {
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->t[i].name, name) == 0) return &l->t[i];
    return NULL;
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
