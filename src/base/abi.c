/* sizeof of the public structs, for bindings that lay them out themselves
 * (the Python package checks its ctypes mirrors against these at import). */
#include "attn.h"

#include <string.h>

size_t attn_abi_size(const char *type_name) {
    static const struct {
        const char *name;
        size_t size;
    } t[] = {
        {"attn_view", sizeof(attn_view)},
        {"attn_sdpa_desc", sizeof(attn_sdpa_desc)},
        {"attn_generator", sizeof(attn_generator)},
        {"attn_dropout", sizeof(attn_dropout)},
        {"attn_kv_cache_config", sizeof(attn_kv_cache_config)},
        {"attn_layer_config", sizeof(attn_layer_config)},
        {"attn_tensor_info", sizeof(attn_tensor_info)},
        {"attn_forward_args", sizeof(attn_forward_args)},
        {"attn_backward_args", sizeof(attn_backward_args)},
        {"attn_optim_config", sizeof(attn_optim_config)},
    };
    if (!type_name) return 0;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(t[i].name, type_name)) return t[i].size;
    return 0;
}
