/* Read bandwidth reference for `attn bench --decode` (readbw.c). */
#ifndef ATTN_READBW_H
#define ATTN_READBW_H

#include <stddef.h>

/* The sum of p[0..n) read by every OpenMP thread of the current team size,
 * one contiguous slice each, with the widest vectors this CPU runs. */
float attn_readbw_sum(const float *p, size_t n);
/* Which vectors attn_readbw_sum uses here: "avx512", "avx" or "plain". */
const char *attn_readbw_kernel(void);

#endif
