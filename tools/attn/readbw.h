/* Read bandwidth reference for `attn bench --decode` (readbw.c). */
#ifndef ATTN_READBW_H
#define ATTN_READBW_H

#include <stddef.h>

/* The bytes at p read by every OpenMP thread of the current team size, one
 * contiguous slice each, with the widest vectors this CPU runs: their sum as
 * 32-bit words (any bytes: a KV cache's own storage too). */
unsigned attn_readbw_sum(const void *p, size_t bytes);
/* attn_readbw_sum over n regions in turn (p[i], bytes[i] each): a KV cache's
 * several arrays, read as the decode reads them. */
unsigned attn_readbw_sum_regions(const void *const *p, const size_t *bytes, int n);
/* Which vectors attn_readbw_sum uses here: "avx512", "avx2" or "plain". */
const char *attn_readbw_kernel(void);
/* bytes to read, allocated as the library allocates a KV cache (2 MB
 * aligned, transparent huge pages advised: one core read 24.5 GB/s from
 * such a buffer and 17.7 from malloc's 4 KB pages, Zen 5), filled; free()
 * releases it. NULL without memory. */
void *attn_readbw_buf(size_t bytes);

#endif
