/* Register-only peak loops, compiled once per CPU level (see peak.h and common.h). */
#include "peak.h"

#include "vector.h"

#define CHAINS 12 /* independent accumulators: more than the FMA latency x throughput of current cores */

/* FP32 multiply-adds on the level's vectors (vector.h; at the baseline, without FMA, a multiply and an add) */
static double fp32_fma(int64_t iterations)
{
    vfloat acc[CHAINS];
    const vfloat a = splat(0.999999f), b = splat(1e-7f);
    for (int c = 0; c < CHAINS; ++c)
        acc[c] = splat((float)c);
    for (int64_t i = 0; i < iterations; ++i)
        for (int c = 0; c < CHAINS; ++c)
            acc[c] = multiply_add(acc[c], a, b);
    float sink = 0;
    for (int c = 0; c < CHAINS; ++c)
        sink += acc[c][0];
    return (double)iterations * CHAINS * VW * 2 + (sink == -1.0f);
}

#if defined(__AVX512BF16__) && SYNET_AVX512
static double bf16_dot(int64_t iterations)
{
    __m512 acc[CHAINS];
    const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3F7F3F7F), b = (__m512bh)_mm512_set1_epi32(0x33D633D6);
    for (int c = 0; c < CHAINS; ++c)
        acc[c] = _mm512_set1_ps((float)c);
    for (int64_t i = 0; i < iterations; ++i)
        for (int c = 0; c < CHAINS; ++c)
            acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
    float sink = 0;
    for (int c = 0; c < CHAINS; ++c)
        sink += _mm512_reduce_add_ps(acc[c]);
    return (double)iterations * CHAINS * 16 * 2 * 2 + (sink == -1.0f);
}
#define BF16_DOT bf16_dot
#else
#define BF16_DOT NULL
#endif

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__linux__)
static double amx_bf16(int64_t iterations)
{
    struct {
        uint8_t palette, start_row, reserved[14];
        uint16_t colsb[16];
        uint8_t rows[16];
    } cfg;
    uint16_t data[16 * 32] __attribute__((aligned(64)));
    memset(&cfg, 0, sizeof(cfg));
    cfg.palette = 1;
    for (int t = 0; t < 8; ++t) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    for (int i = 0; i < 16 * 32; ++i)
        data[i] = 0x3C00; /* small BF16 values: no overflow */
    _tile_loadconfig(&cfg);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, data, 64);
    _tile_loadd(5, data, 64);
    _tile_loadd(6, data, 64);
    _tile_loadd(7, data, 64);
    for (int64_t i = 0; i < iterations; ++i) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    float out[16 * 16];
    _tile_stored(0, out, 64);
    _tile_release();
    return (double)iterations * 4 * 16 * 16 * 32 * 2 + (out[0] == -1.0f);
}
#define AMX_BF16 amx_bf16
#else
#define AMX_BF16 NULL
#endif

const synet_peak_kernels SYNET_LEVEL_NAME(synet_peak_kernels) = {SYNET_STR(SYNET_LEVEL_SUFFIX), fp32_fma, BF16_DOT,
                                                                 AMX_BF16};
