/* BF16 array conversions: one block of a parallel conversion (synet/_kernels.pyx drives them). */
#ifndef SYNET_BF16_H
#define SYNET_BF16_H

#include "common.h"

typedef struct synet_bf16_kernels {
    const char *level;
    /* dst[i] = bf16(src[i]) for i < n (float32 bits in); `wide`: dst holds the float32 bits of the
       rounded value (uint32), else the bfloat16 bits (uint16). `truncate`: toward zero, else
       nearest-even. `stream` may bypass the caches for the aligned middle; `avail` (>= n)
       elements of src may be read from src on (a prefetch may look ahead into them). */
    void (*round_f32)(const uint32_t *src, void *dst, synet_size n, synet_size avail, int truncate, int wide,
                      int stream);
    /* the same from float64, rounded once */
    void (*round_f64)(const double *src, void *dst, synet_size n, int truncate, int wide);
    /* float32 bits = bfloat16 bits << 16 */
    void (*widen)(const uint16_t *src, uint32_t *dst, synet_size n, synet_size avail, int stream);
} synet_bf16_kernels;

SYNET_DECLARE_TABLES(synet_bf16_kernels, synet_bf16_kernels)

#endif
