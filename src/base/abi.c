/* sizeof of the public structs, for bindings that lay them out themselves
 * (the Python package checks its ctypes mirrors against these at import). */
#include "attn.h"

#include <string.h>

size_t attn_abi_size(const char *type_name) {
    static const struct {
        const char *name;
        size_t size;
    } t[] = {ATTN_ABI_STRUCTS(ATTN_ABI_ENTRY_)};
    if (!type_name) return 0;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(t[i].name, type_name)) return t[i].size;
    return 0;
}
