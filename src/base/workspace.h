/* Scratch memory of the fused kernels (packed K/V panels, gradient
 * partials, statistics rows), reused across calls. A call that needs tens of
 * megabytes of fresh pages pays a page fault and a kernel zeroing for every
 * 4 KiB of them (measured: 11% of a causal backward's cycles, B=1 H=8
 * S=2048 D=64); a freed buffer is kept instead (up to ATTN_CACHE_MB
 * megabytes, attn.h) and handed to the next request it fits. Thread-safe;
 * contents are never assumed (callers initialize what they read). */
#ifndef ATTN_WORKSPACE_H
#define ATTN_WORKSPACE_H

#include <stddef.h>

/* bytes of 64-byte-aligned memory, a cached block or a new one; NULL if none */
void *attn_ws_alloc(size_t bytes);
/* give p (from attn_ws_alloc, or NULL) back: cached or freed */
void attn_ws_free(void *p);
/* bytes held by the cache now (for tests) */
size_t attn_ws_cached_bytes(void);

/* Large arrays that decode streams through (KV pages): 2 MiB aligned and,
 * on Linux, advised as transparent huge pages (fewer TLB misses: 4 KiB pages
 * cost decode 6-11%, docs/PERFORMANCE.md); small requests plain malloc.
 * Not cached; release with free(). NULL if none. */
void *attn_big_alloc(size_t bytes);

#endif
