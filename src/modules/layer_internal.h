/* Internal layout of attn_layer, shared by the module sources. */
#ifndef ATTN_LAYER_INTERNAL_H
#define ATTN_LAYER_INTERNAL_H

#include "../internal.h"

#define LAYER_NAME_MAX 64

typedef struct layer_tensor {
    char name[LAYER_NAME_MAX]; /* state_dict key */
    int ndim;
    int64_t shape[ATTN_MAX_DIMS];
    size_t numel;
    int is_buffer;
    float *data;
    float *grad;
} layer_tensor;

struct attn_layer {
    attn_layer_config cfg;
    int n, cap;
    layer_tensor *t; /* state_dict order */
};

layer_tensor *attn_layer_find(const attn_layer *l, const char *name);
int attn_kind_is_causal(attn_layer_kind k);
int attn_kind_takes_mask(attn_layer_kind k);

#endif
