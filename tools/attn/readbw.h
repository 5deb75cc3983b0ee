/* Read bandwidth reference for `attn bench --decode` (readbw.c). */
#ifndef ATTN_READBW_H
#define ATTN_READBW_H

#include <stddef.h>

/* The sum of p[0..n) read by every OpenMP thread of the current team size,
 * one contiguous slice each, with the widest vectors this CPU runs. */
float attn_readbw_sum(const float *p, size_t n);
/* Which vectors attn_readbw_sum uses here: "avx512", "avx" or "plain". */
const char *attn_readbw_kernel(void);
/* n floats to read, allocated as the library allocates a KV cache (2 MB
 * aligned, transparent huge pages advised: one core read 24.5 GB/s from
 * such a buffer and 17.7 from malloc's 4 KB pages, Zen 5), filled; free()
 * releases it. NULL without memory. */
float *attn_readbw_buf(size_t n);

#endif
