/* PyTorch-like tensor printing (torch._tensor_str, precision 4, linewidth 80). */
#ifndef ATTN_TOOL_PRINT_H
#define ATTN_TOOL_PRINT_H

#include <stdint.h>
#include <stdio.h>

/* Prints prefix, then "tensor(...)" as print(tensor) would, with optional
 * suffixes such as "grad_fn=<MmBackward0>" (NULL for none), then a newline.
 * ndim 0 prints a scalar. */
void tp_print(FILE *f, const char *prefix, const float *data, int ndim, const int64_t *shape, const char *suffix);
/* A bool tensor (bytes, non-zero = True) as PyTorch prints it. */
void tp_print_bool(FILE *f, const char *prefix, const uint8_t *data, int ndim, const int64_t *shape);
/* "torch.Size([2, 6, 3])" */
void tp_print_size(FILE *f, const char *prefix, int ndim, const int64_t *shape);

#endif
