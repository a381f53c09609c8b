/* The core's arithmetic peak for the kernel classes synet uses, measured by register-only loops (the
 * bench's roofline: a GEMM-shaped kernel cannot beat these; memory-bound ones are measured against the
 * stream bandwidth instead). Each function runs `iterations` steps of independent accumulator chains
 * and returns the floating-point operations it performed (multiply and add count as two). */
#ifndef SYNET_PEAK_H
#define SYNET_PEAK_H

#include "common.h"

typedef struct synet_peak_kernels {
    const char *level;
    double (*fp32_fma)(int64_t iterations);  /* FP32 fused multiply-adds at the level's vector width */
    double (*bf16_dot)(int64_t iterations);  /* vdpbf16ps (NULL below avx512_bf16) */
    double (*amx_bf16)(int64_t iterations);  /* tdpbf16ps (NULL below amx; needs the AMX permission) */
} synet_peak_kernels;

SYNET_DECLARE_TABLES(synet_peak_kernels, synet_peak_kernels)

#endif
