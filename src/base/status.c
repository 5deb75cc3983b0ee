/* Version and status strings, and the calling thread's error detail. */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char detail[384];

const char *attn_last_error(void) { return detail; }

void attn_err_clear(void) { detail[0] = 0; }

attn_status attn_fail(attn_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return st;
}

const char *attn_version(void) { return ATTN_VERSION_STRING; }
int attn_version_number(void) { return ATTN_VERSION_NUMBER; }

const char *attn_status_string(attn_status s) {
    switch (s) {
    case ATTN_OK: return "ok";
    case ATTN_E_INVALID: return "invalid argument";
    case ATTN_E_SHAPE: return "inconsistent or unsupported shape";
    case ATTN_E_NOMEM: return "out of memory";
    case ATTN_E_OVERFLOW: return "size overflow";
    case ATTN_E_IO: return "I/O error";
    case ATTN_E_FORMAT: return "malformed file";
    case ATTN_E_NOT_FOUND: return "tensor not found";
    case ATTN_E_DTYPE: return "unsupported or unexpected dtype";
    case ATTN_E_CONTEXT: return "sequence longer than the context length";
    case ATTN_E_UNSUPPORTED: return "unsupported by this path or build";
    case ATTN_E_BUFFER: return "buffer has unexpected contents";
    case ATTN_E_STATE: return "call out of order";
    case ATTN_E_COMM: return "message passing failed";
    }
    return "unknown status";
}

int attn_numel(int ndim, const int64_t *shape, size_t *out) {
    size_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (uint64_t)shape[i] > SIZE_MAX) return 1;
        if (attn_mul_size(n, (size_t)shape[i], &n)) return 1;
    }
    *out = n;
    return 0;
}
