/* The scratch-memory cache of workspace.h: a few slots under one mutex.
 * A request takes the smallest cached block that holds it, if that block is
 * not more than twice the request (a small request never pins a huge block);
 * a freed block is kept while the cache stays under its cap, displacing the
 * smallest cached block when every slot is full. */
#include "workspace.h"

#include "attn.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__unix__) || defined(__APPLE__)
#include <sys/mman.h>
#define WS_MMAP 1
#endif

#define WS_SLOTS 8
#define WS_HDR 64 /* a header (the block's size) before each block keeps 64-byte alignment */
#define WS_DEFAULT_MB 256
/* Blocks from this size on are mapped pages of their own (mmap), returned to
 * the system when freed and not cached: from malloc, glibc would raise its
 * mmap threshold after the first such free and keep later blocks in its heap,
 * where freed pages stay resident (a causal backward at S = 32768 peaked at
 * 367 MB with ATTN_CACHE_MB=0, 171 MB with the cache). */
#define WS_MAP_MIN ((size_t)1 << 20)

static void *block_new(size_t need) {
#ifdef WS_MMAP
    if (need >= WS_MAP_MIN) {
        void *p = mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        return p == MAP_FAILED ? NULL : p;
    }
#endif
    return aligned_alloc(WS_HDR, need);
}

static void block_free(void *base) {
    if (!base) return;
#ifdef WS_MMAP
    size_t size;
    memcpy(&size, base, sizeof size);
    if (size >= WS_MAP_MIN) {
        munmap(base, size);
        return;
    }
#endif
    free(base);
}

void *attn_big_alloc(size_t bytes) {
    void *p = NULL;
    size_t align = (size_t)2 << 20;
    if (bytes < align) return malloc(bytes ? bytes : 1);
    if (posix_memalign(&p, align, (bytes + align - 1) / align * align)) return NULL;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    madvise(p, (bytes + align - 1) / align * align, MADV_HUGEPAGE); /* advice only: failure is harmless */
#endif
    return p;
}

static pthread_mutex_t ws_mu = PTHREAD_MUTEX_INITIALIZER;
static void *ws_block[WS_SLOTS]; /* base pointers (header included) */
static size_t ws_size[WS_SLOTS], ws_cached, ws_cap;
static int ws_cap_read;

/* ATTN_CACHE_MB, read once: a decimal number of megabytes (0: no cache);
 * anything else leaves the default */
static size_t cache_cap(void) {
    if (!ws_cap_read) {
        ws_cap_read = 1;
        ws_cap = (size_t)WS_DEFAULT_MB << 20;
        const char *e = getenv("ATTN_CACHE_MB");
        if (e && *e) {
            char *end;
            unsigned long long mb = strtoull(e, &end, 10);
            if (*end == '\0' && e[0] != '-' && mb <= (SIZE_MAX >> 21)) ws_cap = (size_t)mb << 20;
        }
    }
    return ws_cap;
}

void *attn_ws_alloc(size_t bytes) {
    if (bytes > SIZE_MAX - 2 * WS_HDR) return NULL;
    size_t need = (bytes + WS_HDR + WS_HDR - 1) / WS_HDR * WS_HDR;
    /* mapped blocks in whole megabytes: the forward's and the backward's K/V
     * panels (rounded to different tile sizes) then fit the same cached block;
     * the pages past the request are never touched, so never resident */
    if (need >= WS_MAP_MIN) need = (need + WS_MAP_MIN - 1) / WS_MAP_MIN * WS_MAP_MIN;
    pthread_mutex_lock(&ws_mu);
    int best = -1;
    for (int i = 0; i < WS_SLOTS; i++)
        if (ws_block[i] && ws_size[i] >= need && ws_size[i] / 2 <= need && (best < 0 || ws_size[i] < ws_size[best]))
            best = i;
    void *base = NULL;
    if (best >= 0) {
        base = ws_block[best];
        ws_block[best] = NULL;
        ws_cached -= ws_size[best];
    }
    pthread_mutex_unlock(&ws_mu);
    if (!base) {
        base = block_new(need);
        if (!base) return NULL;
        memcpy(base, &need, sizeof need);
    }
    return (char *)base + WS_HDR;
}

void attn_ws_free(void *p) {
    if (!p) return;
    void *base = (char *)p - WS_HDR, *drop = base;
    size_t size;
    memcpy(&size, base, sizeof size);
    pthread_mutex_lock(&ws_mu);
    size_t cap = cache_cap();
    if (size <= cap) {
        int at = -1, small = -1;
        for (int i = 0; i < WS_SLOTS; i++) {
            if (!ws_block[i] && at < 0) at = i;
            if (ws_block[i] && (small < 0 || ws_size[i] < ws_size[small])) small = i;
        }
        if (at < 0 && small >= 0 && ws_size[small] < size) { /* displace the smallest block */
            at = small;
            drop = ws_block[small];
            ws_cached -= ws_size[small];
            ws_block[small] = NULL;
        }
        /* make room under the cap, smallest blocks first */
        while (at >= 0 && ws_cached + size > cap) {
            int s = -1;
            for (int i = 0; i < WS_SLOTS; i++)
                if (ws_block[i] && (s < 0 || ws_size[i] < ws_size[s])) s = i;
            if (s < 0) break;
            block_free(ws_block[s]);
            ws_cached -= ws_size[s];
            ws_block[s] = NULL;
        }
        if (at >= 0 && ws_cached + size <= cap) {
            ws_block[at] = base, ws_size[at] = size, ws_cached += size;
            if (drop == base) drop = NULL;
        }
    }
    pthread_mutex_unlock(&ws_mu);
    block_free(drop);
}

size_t attn_ws_cached_bytes(void) {
    pthread_mutex_lock(&ws_mu);
    size_t n = ws_cached;
    pthread_mutex_unlock(&ws_mu);
    return n;
}

void attn_release_cached_memory(void) {
    pthread_mutex_lock(&ws_mu);
    for (int i = 0; i < WS_SLOTS; i++) {
        block_free(ws_block[i]);
        ws_block[i] = NULL;
    }
    ws_cached = 0;
    pthread_mutex_unlock(&ws_mu);
}
