"""Deconvolution16b: BF16/FP32 transposed convolution (PyTorch's ConvTranspose2d), fused activation.

``dst[n, oc, oy, ox] = act(bias[oc] + Σ src[n, ic, iy, ix] · w[ic, oc, ky, kx])`` over the taps
with ``oy = iy·stride_y − pad_y + ky·dilation_y`` (and likewise for x), ic in oc's group;
src and w are rounded to BF16 (nearest-even), the sum is accumulated in FP32.

Implementations (chosen in `init`, named by `info()`):

* ``PhaseGemm``: the output is split into stride_y·stride_x phases (output pixels whose
  taps have the same kernel positions); each phase is an ordinary stride-1 convolution, run
  as an implicit GEMM over (taps × input channels) — no col2im, no scatter-add: every output
  element is summed once, in registers or tiles, then bias + activation are applied and it is
  stored. The source is converted once per call to a zero-padded BF16 NHWC image (skipped
  for BF16 NHWC input that needs no padding: "direct"), so that every tap of a phase is in range;
  weights are rounded and packed in `set_params` per (group, phase, channel block).
  Micro-kernels: ``amx-bf16`` (AMX tiles, ``tdpbf16ps``; 2 × 16 pixels × 32 channels per
  task; >= 16 input channels per group, Linux), else ``avx512bf16`` (``vdpbf16ps``, up to
  12 pixels × 64 channels), else / with ``Compatibility.BF16_SOFT`` ``portable`` (FP32
  multiply-adds in vdpbf16ps's order). A 1×1 stride-1 deconvolution runs as one long row.
* ``Depthwise``: group == src_c == dst_c; FP32 multiply-adds of BF16-rounded values (exact
  products), by phase and tap, vectorised along x (NCHW) or channels (NHWC).

Exact borders: the padded source puts zeros where a border output's taps leave the image, and
0·w = 0 for every finite weight. A NaN or inf weight would make those outputs NaN, so when the
BF16-rounded weights hold one, `set_params` keeps them as FP32 and a border pass recomputes the
border outputs over their in-range taps only (as PyTorch sums). Finite weights skip it.

`forward` and C callers (``synet/_deconvolution.pxd``: a `DeconvolutionPlan` from
``Deconvolution16b.plan()``) run the same nogil entry point, `deconvolution_run`.

Each output element is summed by one task in a fixed order, so results do not depend on the
thread count. The hardware BF16 instructions treat BF16 subnormal inputs as zero and flush
subnormal FP32 results to zero (DAZ/FTZ); normal-range data is unaffected.
"""

cimport cython
from cython.parallel cimport parallel, prange, threadid
from libc.stdlib cimport calloc, free
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t
from libc.string cimport memcpy, memset

import dataclasses
import threading

import numpy as np

from synet.activations cimport ACT_COUNT, ACT_PRELU, activate_block, activate_store_fast
from synet.bf16 cimport float32_to_bf16, bf16_to_float32
from synet.status cimport SYNET_NOT_READY, SYNET_OK, SYNET_VALUE_ERROR, SynetStatus

from ._activations import activation_params
from ._arrays import UINT16, check_buffer, check_out, require_array
from ._conv_params import ConvParams, deconvolution_size, pads as _pads, pair as _pair
from ._kernels import resolve_num_threads
from ._types import (
    BFLOAT16, Compatibility, DataType, TensorFormat, as_activation, as_compatibility,
    as_data_type, as_format, dtype_of,
)

cdef extern from * nogil:
    """
    #include <stdint.h>
    #include <string.h>
    #if defined(__x86_64__) || defined(__i386__)
    #include <immintrin.h>
    #endif
    #if defined(__AVX512BF16__) && defined(__AVX512F__)
    #define SYNET_DC_AVX512BF16 1
    #else
    #define SYNET_DC_AVX512BF16 0
    #endif

    #define SYNET_DC_TILE_N 64   /* output channels per weight block (4 x 16 lanes) */
    #define SYNET_DC_MMAX 12     /* output pixels per micro-tile, at most */

    static inline float synet_dc_bf16f(uint16_t v) {
        uint32_t bits = (uint32_t)v << 16; float f; memcpy(&f, &bits, 4); return f;
    }

    /* Portable micro-kernel: out[m][n] = sum over taps t, pairs k of
       a[toff[t] + m*ps + 2k + 1]*b[..][n][1], then a[.. + 2k]*b[..][n][0] (vdpbf16ps's order).
       Products of BF16 values are exact in FP32, so fma(a, b, acc) == acc + a*b rounded once, as in
       vdpbf16ps. Each (t, k) row of b is widened to FP32 once (b0, b1) for all M pixels; the n loops
       are FP32 FMAs that the compiler vectorises, and every output keeps the same summation order. */
    static inline __attribute__((always_inline)) void synet_dc_tile_soft_impl(
        const uint16_t *a, const int64_t *toff, int64_t ntaps, int64_t kpairs, int64_t ps,
        const uint16_t *b, float *out, const int M, const int NV)
    {
        const int N = NV * 16;
        float acc[SYNET_DC_MMAX * SYNET_DC_TILE_N];
        float b0[SYNET_DC_TILE_N], b1[SYNET_DC_TILE_N];
        for (int i = 0; i < M * N; ++i)
            acc[i] = 0.0f;
        for (int64_t t = 0; t < ntaps; ++t) {
            const uint16_t *at = a + toff[t];
            for (int64_t k = 0; k < kpairs; ++k, b += 2 * N) {
                for (int n = 0; n < N; ++n) {
                    b0[n] = synet_dc_bf16f(b[2 * n]);
                    b1[n] = synet_dc_bf16f(b[2 * n + 1]);
                }
                for (int m = 0; m < M; ++m) {
                    const float a1 = synet_dc_bf16f(at[m * ps + 2 * k + 1]);
                    const float a0 = synet_dc_bf16f(at[m * ps + 2 * k]);
                    float *am = acc + m * N;
                    for (int n = 0; n < N; ++n)
                        am[n] = __builtin_fmaf(a0, b0[n], __builtin_fmaf(a1, b1[n], am[n]));
                }
            }
        }
        for (int m = 0; m < M; ++m)
            for (int n = 0; n < N; ++n)
                out[m * SYNET_DC_TILE_N + n] = acc[m * N + n];
    }

    #if SYNET_DC_AVX512BF16
    static inline __attribute__((always_inline)) void synet_dc_tile_avx_impl(
        const uint16_t *a, const int64_t *toff, int64_t ntaps, int64_t kpairs, int64_t ps,
        const uint16_t *b, float *out, const int M, const int NV)
    {
        __m512 acc[SYNET_DC_MMAX][4];
        for (int m = 0; m < M; ++m)
            for (int v = 0; v < NV; ++v)
                acc[m][v] = _mm512_setzero_ps();
        for (int64_t t = 0; t < ntaps; ++t) {
            const uint16_t *at = a + toff[t];
            for (int64_t k = 0; k < kpairs; ++k) {
                __m512bh bv[4];
                for (int v = 0; v < NV; ++v)
                    bv[v] = (__m512bh)_mm512_loadu_si512((const void *)(b + 32 * v));
                for (int m = 0; m < M; ++m) {
                    int32_t pairbits;
                    memcpy(&pairbits, at + m * ps + 2 * k, 4);
                    __m512bh av = (__m512bh)_mm512_set1_epi32(pairbits);
                    for (int v = 0; v < NV; ++v)
                        acc[m][v] = _mm512_dpbf16_ps(acc[m][v], av, bv[v]);
                }
                b += 32 * NV;
            }
        }
        for (int m = 0; m < M; ++m)
            for (int v = 0; v < NV; ++v)
                _mm512_storeu_ps(out + m * SYNET_DC_TILE_N + 16 * v, acc[m][v]);
    }
    #endif

    #define SYNET_DC_CASE(IMPL, MM, NN) case (MM) * 8 + (NN): \\
        IMPL(a, toff, ntaps, kpairs, ps, b, out, MM, NN); return;
    #define SYNET_DC_CASES_M(IMPL, NN) \\
        SYNET_DC_CASE(IMPL, 1, NN) SYNET_DC_CASE(IMPL, 2, NN) SYNET_DC_CASE(IMPL, 3, NN) \\
        SYNET_DC_CASE(IMPL, 4, NN) SYNET_DC_CASE(IMPL, 5, NN) SYNET_DC_CASE(IMPL, 6, NN)
    #define SYNET_DC_CASES_M12(IMPL, NN) SYNET_DC_CASES_M(IMPL, NN) \\
        SYNET_DC_CASE(IMPL, 7, NN) SYNET_DC_CASE(IMPL, 8, NN) SYNET_DC_CASE(IMPL, 9, NN) \\
        SYNET_DC_CASE(IMPL, 10, NN) SYNET_DC_CASE(IMPL, 11, NN) SYNET_DC_CASE(IMPL, 12, NN)
    #define SYNET_DC_CASES_M8(IMPL, NN) SYNET_DC_CASES_M(IMPL, NN) \\
        SYNET_DC_CASE(IMPL, 7, NN) SYNET_DC_CASE(IMPL, 8, NN)

    /* Largest micro-tile height for NV vectors of 16 output channels (<= 24 accumulators). */
    static int synet_dc_mmax(int nv) { return nv <= 2 ? 12 : (nv == 3 ? 8 : 6); }

    static int synet_dc_hard(void) { return SYNET_DC_AVX512BF16; }

    /* One micro-tile: M output pixels (A rows ps elements apart) x NV*16 output channels. */
    static void synet_dc_tile(const uint16_t *a, const int64_t *toff, int64_t ntaps, int64_t kpairs,
                              int64_t ps, const uint16_t *b, float *out, int M, int NV, int soft)
    {
    #if SYNET_DC_AVX512BF16
        if (!soft) {
            switch (M * 8 + NV) {
                SYNET_DC_CASES_M12(synet_dc_tile_avx_impl, 1)
                SYNET_DC_CASES_M12(synet_dc_tile_avx_impl, 2)
                SYNET_DC_CASES_M8(synet_dc_tile_avx_impl, 3)
                SYNET_DC_CASES_M(synet_dc_tile_avx_impl, 4)
                default: break;
            }
        }
    #endif
        switch (M * 8 + NV) {
            SYNET_DC_CASES_M12(synet_dc_tile_soft_impl, 1)
            SYNET_DC_CASES_M12(synet_dc_tile_soft_impl, 2)
            SYNET_DC_CASES_M8(synet_dc_tile_soft_impl, 3)
            SYNET_DC_CASES_M(synet_dc_tile_soft_impl, 4)
            default: break;
        }
    }

    #if defined(__AVX512F__) && defined(__AVX512BW__)
    /* d[i] = bf16(s[i]) (nearest-even, NaN quiet), i < n. */
    static void synet_dc_cvt_row(const float *s, uint16_t *d, int64_t n)
    {
        for (int64_t i = 0; i < n; i += 16) {
            const __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
            _mm256_mask_storeu_epi16(d + i, k, synet_act_bf16_vec(_mm512_maskz_loadu_ps(k, s + i)));
        }
    }
    /* NCHW -> channels last: d[x * dstride + c] = bf16(s[c * plane + x]), c < channels, x < width;
       16 channels x 16 pixels a step, transposed in registers. */
    static void synet_dc_cvt_planes(const float *s, int64_t plane, int64_t channels, int64_t width,
                                    uint16_t *d, int64_t dstride)
    {
        __m512 r[16];
        for (int64_t c0 = 0; c0 < channels; c0 += 16) {
            for (int64_t x0 = 0; x0 < width; x0 += 16) {
                const int64_t nx = width - x0 < 16 ? width - x0 : 16;
                synet_load_transposed16(s + c0 * plane + x0, plane, channels - c0, synet_mask16(nx), r);
                for (int64_t j = 0; j < nx; ++j)
                    _mm256_mask_storeu_epi16(d + (x0 + j) * dstride + c0, synet_mask16(channels - c0),
                                             synet_act_bf16_vec(r[j]));
            }
        }
    }
    #else
    static uint16_t synet_dc_bf16(const float *s)
    {
        uint32_t b; memcpy(&b, s, 4);
        return (b & 0x7FFFFFFFu) > 0x7F800000u ? (uint16_t)(((b >> 16) & 0x8000u) | 0x7FC0u)
                                               : (uint16_t)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
    }
    static void synet_dc_cvt_row(const float *s, uint16_t *d, int64_t n)
    {
        for (int64_t i = 0; i < n; ++i)
            d[i] = synet_dc_bf16(s + i);
    }
    static void synet_dc_cvt_planes(const float *s, int64_t plane, int64_t channels, int64_t width,
                                    uint16_t *d, int64_t dstride)
    {
        for (int64_t c = 0; c < channels; ++c)
            for (int64_t x = 0; x < width; ++x)
                d[x * dstride + c] = synet_dc_bf16(s + c * plane + x);
    }
    #endif

    /* ---- AMX (tile) BF16 kernel: Linux asks the kernel for the tile state once per process. ---- */
    #if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__linux__)
    #include <sys/syscall.h>
    #include <unistd.h>
    #define SYNET_DC_AMX 1
    typedef struct { uint8_t palette, start_row, reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; } synet_dc_tilecfg;

    static int synet_dc_amx_init(void)
    {
        /* ARCH_REQ_XCOMP_PERM (0x1023) for XFEATURE_XTILEDATA (18); 0 when granted */
        return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
    }

    /* Tiles: C 0..3 (rows x 16 FP32), A 4, 5 (rows pixels x 32 BF16 channels), B 6, 7 (16 pairs x 16 lanes). */
    static void synet_dc_amx_config(int rows)
    {
        synet_dc_tilecfg cfg;
        memset(&cfg, 0, sizeof(cfg));
        cfg.palette = 1;
        for (int t = 0; t < 6; ++t) { cfg.rows[t] = (uint8_t)rows; cfg.colsb[t] = 64; }
        for (int t = 6; t < 8; ++t) { cfg.rows[t] = 16; cfg.colsb[t] = 64; }
        _tile_loadconfig(&cfg);
    }

    static void synet_dc_amx_release(void) { _tile_release(); }

    /* One unit: pixel segment a0 (and a1 when not NULL) of the configured rows x nv*16 output
       channels; K = taps x kblocks x 32 channels; out: [32][32] FP32, a1's rows from row 16. */
    static void synet_dc_amx_unit(const uint16_t *a0, const uint16_t *a1, const int64_t *toff, int64_t ntaps,
                                  int64_t kblocks, int64_t astride, const uint16_t *b, int nv, float *out)
    {
        const int64_t bstride = nv * 64;      /* bytes per pair row of the packed weights */
        _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
        for (int64_t t = 0; t < ntaps; ++t) {
            const uint16_t *p0 = a0 + toff[t];
            const uint16_t *p1 = a1 ? a1 + toff[t] : a0;
            for (int64_t kb = 0; kb < kblocks; ++kb, b += 16 * nv * 32) {
                _tile_loadd(4, p0 + 32 * kb, astride);
                _tile_loadd(6, b, bstride);
                _tile_dpbf16ps(0, 4, 6);
                if (nv == 2) {
                    _tile_loadd(7, b + 32, bstride);
                    _tile_dpbf16ps(1, 4, 7);
                }
                if (a1) {
                    _tile_loadd(5, p1 + 32 * kb, astride);
                    _tile_dpbf16ps(2, 5, 6);
                    if (nv == 2)
                        _tile_dpbf16ps(3, 5, 7);
                }
            }
        }
        _tile_stored(0, out, 128);
        if (nv == 2) _tile_stored(1, out + 16, 128);
        if (a1) {
            _tile_stored(2, out + 16 * 32, 128);
            if (nv == 2) _tile_stored(3, out + 16 * 32 + 16, 128);
        }
    }
    #else
    #define SYNET_DC_AMX 0
    static int synet_dc_amx_init(void) { return 0; }
    static void synet_dc_amx_config(int rows) { (void)rows; }
    static void synet_dc_amx_release(void) {}
    static void synet_dc_amx_unit(const uint16_t *a0, const uint16_t *a1, const int64_t *toff, int64_t ntaps,
                                  int64_t kblocks, int64_t astride, const uint16_t *b, int nv, float *out)
    { (void)a0; (void)a1; (void)toff; (void)ntaps; (void)kblocks; (void)astride; (void)b; (void)nv; (void)out; }
    #endif

    /* Depthwise, one output row segment: acc[i] = sum_t w[t] * src[toff[t] + i] (in tap order). */
    static void synet_dc_dw_row(const float *src, const int64_t *toff, const float *w, int64_t ntaps,
                                int64_t len, float *acc)
    {
        for (int64_t i = 0; i < len; ++i)
            acc[i] = 0.0f;
        for (int64_t t = 0; t < ntaps; ++t) {
            const float *s = src + toff[t];
            const float wt = w[t];
            for (int64_t i = 0; i < len; ++i)
                acc[i] += wt * s[i];
        }
    }

    /* Depthwise NHWC, one output pixel: acc[c] = sum_t w[t*C + c] * src[toff[t] + c]. */
    static void synet_dc_dw_pixel(const float *src, const int64_t *toff, const float *w, int64_t ntaps,
                                  int64_t channels, int64_t wstride, float *acc)
    {
        for (int64_t c = 0; c < channels; ++c)
            acc[c] = 0.0f;
        for (int64_t t = 0; t < ntaps; ++t) {
            const float *s = src + toff[t];
            const float *wt = w + t * wstride;
            for (int64_t c = 0; c < channels; ++c)
                acc[c] += wt[c] * s[c];
        }
    }
    """
    int SYNET_DC_TILE_N
    int SYNET_DC_MMAX
    int synet_dc_mmax(int nv)
    int synet_dc_hard()
    void synet_dc_tile(const uint16_t *a, const int64_t *toff, int64_t ntaps, int64_t kpairs,
                       int64_t ps, const uint16_t *b, float *out, int M, int NV, int soft)
    int synet_dc_amx_init()
    void synet_dc_cvt_row(const float *s, uint16_t *d, int64_t n)
    void synet_dc_cvt_planes(const float *s, int64_t plane, int64_t channels, int64_t width, uint16_t *d,
                             int64_t dstride)
    void synet_dc_amx_config(int rows)
    void synet_dc_amx_release()
    void synet_dc_amx_unit(const uint16_t *a0, const uint16_t *a1, const int64_t *toff, int64_t ntaps,
                           int64_t kblocks, int64_t astride, const uint16_t *b, int nv, float *out)
    void synet_dc_dw_row(const float *src, const int64_t *toff, const float *w, int64_t ntaps,
                         int64_t length, float *acc)
    void synet_dc_dw_pixel(const float *src, const int64_t *toff, const float *w, int64_t ntaps,
                           int64_t channels, int64_t wstride, float *acc)

ctypedef fused src_t:
    float
    uint16_t  # bfloat16 bits

cdef enum:
    TILE_N = 64               # output channels per weight block (SYNET_DC_TILE_N)
    MMAX = 12                 # output pixels per micro-tile, at most (SYNET_DC_MMAX)
    DW_CHUNK = 256            # depthwise accumulator length
    BORDER_CHUNK = 256        # border pass: output channels summed together
    STORE_RUN = 64            # epilogue: values activated together
    PARALLEL_MIN = 1 << 18    # multiply-adds below which a call runs on one thread

HARDWARE_BF16 = bool(synet_dc_hard())
cdef bint _AMX_GRANTED = synet_dc_amx_init()   # asks Linux for the AMX tile state (once)
HARDWARE_AMX = bool(_AMX_GRANTED)

# ---------------------------------------------------------------------------------------------
# Kernels




cdef inline void _store(const float* acc, Py_ssize_t mstride, Py_ssize_t M, Py_ssize_t N, Py_ssize_t c0,
                        const DeconvolutionPlan* p, void* dst, Py_ssize_t off, Py_ssize_t mstep, Py_ssize_t nstep) noexcept nogil:
    """dst[off + m·mstep + n·nstep] = act(acc[m·mstride + n] + bias[c0 + n]) for m < M, n < N.

    Output channel c0 + n; FP32 or BF16 (nearest-even) dst. The activation is `activate_block`
    of ``synet/activations.pxd`` on runs of <= STORE_RUN values of one row (nstep == 1) or one
    channel (nstep != 1); IDENTITY and RELU take its vectorised `activate_store_fast` when the build has it.
    """
    cdef Py_ssize_t m, n, j0, j, k, len_
    cdef float run[STORE_RUN]
    cdef float* d32 = <float*>dst
    cdef uint16_t* d16 = <uint16_t*>dst
    cdef const float* bias = p.bias + c0
    cdef const float* prm
    cdef int act = p.act
    if activate_store_fast(acc, mstride, M, N, bias, dst, p.dst_bf16, act, off, mstep, nstep):
        return   # IDENTITY / RELU in vector registers
    if nstep == 1:   # runs along the channels of one pixel: PRELU's channel of run[k] is c0 + j + k
        for m in range(M):
            for j0 in range((N + STORE_RUN - 1) // STORE_RUN):
                j = j0 * STORE_RUN
                len_ = min(<Py_ssize_t>STORE_RUN, N - j)
                for k in range(len_):
                    run[k] = acc[m * mstride + j + k] + bias[j + k]
                activate_block(run, len_, act, p.params, c0 + j, 1, p.dst_c)
                if p.dst_bf16:
                    for k in range(len_):
                        d16[off + m * mstep + j + k] = float32_to_bf16(run[k])
                else:
                    for k in range(len_):
                        d32[off + m * mstep + j + k] = run[k]
    else:            # runs along the pixels of one channel: PRELU reads the single slope params[c0 + n]
        for n in range(N):
            prm = p.params + (c0 + n if act == ACT_PRELU else 0)
            for j0 in range((M + STORE_RUN - 1) // STORE_RUN):
                j = j0 * STORE_RUN
                len_ = min(<Py_ssize_t>STORE_RUN, M - j)
                for k in range(len_):
                    run[k] = acc[(j + k) * mstride + n] + bias[n]
                activate_block(run, len_, act, prm, 0, 1, 1)
                if p.dst_bf16:
                    for k in range(len_):
                        d16[off + n * nstep + (j + k) * mstep] = float32_to_bf16(run[k])
                else:
                    for k in range(len_):
                        d32[off + n * nstep + (j + k) * mstep] = run[k]


cdef inline uint16_t _bf16_of(src_t value) noexcept nogil:
    if src_t is float:
        return float32_to_bf16(value)
    else:
        return value


cdef inline float _bf16_value(src_t value) noexcept nogil:
    """The source value as the kernels multiply it: rounded to BF16, as float."""
    return bf16_to_float32(_bf16_of(value))


cdef void _pad_row(const src_t* src, uint16_t* a, const DeconvolutionPlan* p, Py_ssize_t r) noexcept nogil:
    """Row r of a[n, yp, xp, g, c] = bf16(src[n, g·cg_in + c, yp − ply, xp − plx]), zero outside (and in pad channels)."""
    cdef Py_ssize_t n, y, x, c, g, ci
    cdef Py_ssize_t row_len = p.wp * p.cpt
    cdef uint16_t* d
    cdef const src_t* s
    n = r // p.hp
    y = r % p.hp - p.ply
    d = a + r * row_len
    if y < 0 or y >= p.src_h or p.cgp != p.cg_in:
        memset(d, 0, row_len * 2)
        if y < 0 or y >= p.src_h:
            return
    else:  # only the left and right borders
        memset(d, 0, p.plx * p.cpt * 2)
        memset(d + (p.plx + p.src_w) * p.cpt, 0, (p.wp - p.plx - p.src_w) * p.cpt * 2)
    d = d + p.plx * p.cpt
    if p.nhwc:
        s = src + (n * p.src_h + y) * p.src_w * p.src_c
        if p.cgp == p.cg_in:
            if src_t is float:
                synet_dc_cvt_row(s, d, p.src_w * p.src_c)
            else:
                memcpy(d, s, p.src_w * p.src_c * 2)
        else:
            for x in range(p.src_w):
                for g in range(p.group):
                    for ci in range(p.cg_in):
                        d[x * p.cpt + g * p.cgp + ci] = _bf16_of(s[x * p.src_c + g * p.cg_in + ci])
    elif src_t is float:
        for g in range(p.group):
            synet_dc_cvt_planes(src + ((n * p.src_c + g * p.cg_in) * p.src_h + y) * p.src_w, p.src_h * p.src_w,
                                p.cg_in, p.src_w, d + g * p.cgp, p.cpt)
    else:
        for c in range(p.src_c):
            g = c // p.cg_in
            ci = g * p.cgp + c % p.cg_in
            s = src + ((n * p.src_c + c) * p.src_h + y) * p.src_w
            for x in range(p.src_w):
                d[x * p.cpt + ci] = s[x]


cdef inline Py_ssize_t _pixel_step(const DeconvolutionPlan* p) noexcept nogil:
    """dst elements between neighbouring output pixels of one channel."""
    return p.dst_c if p.nhwc else 1


cdef inline Py_ssize_t _channel_step(const DeconvolutionPlan* p) noexcept nogil:
    """dst elements between neighbouring output channels of one pixel."""
    return 1 if p.nhwc else p.dst_h * p.dst_w


cdef void _gemm_task(const uint16_t* a, void* dst, const DeconvolutionPlan* p, Py_ssize_t task) noexcept nogil:
    """One task: an output phase row of one image and group, one block of <= 64 output channels."""
    cdef Py_ssize_t t = task, ob, r, g, n, ry, rx, j, i, i0, ni, M, nv, nvalid, mmax, phase, oc0, oy
    cdef Py_ssize_t off
    cdef float tile[MMAX * TILE_N]
    cdef const uint16_t* at
    cdef const uint16_t* bw
    ob = t % p.nblocks
    t = t // p.nblocks
    r = t % p.nrows
    t = t // p.nrows
    g = t % p.group
    n = t // p.group
    ry = p.row_ry[r]
    j = p.row_j[r]
    oy = ry - p.pt + p.sy * j
    nvalid = min(<Py_ssize_t>TILE_N, p.cg_out - ob * TILE_N)
    nv = (nvalid + 15) // 16
    mmax = synet_dc_mmax(<int>nv)
    oc0 = g * p.cg_out + ob * TILE_N
    for rx in range(p.sx):
        phase = ry * p.sx + rx
        i0 = p.col_i0[rx]
        ni = p.col_n[rx]
        bw = p.weights + p.wofs[(g * p.sy * p.sx + phase) * p.nblocks + ob]
        i = 0
        while i < ni:
            M = min(mmax, ni - i)
            at = a + n * p.a_img + ((j + p.ply) * p.wp + (i0 + i + p.plx)) * p.cpt + g * p.cgp
            synet_dc_tile(at, p.toffs + p.ph_tap0[phase], p.ph_ntaps[phase], p.kpairs, p.cpt, bw,
                          tile, <int>M, <int>nv, p.soft)
            off = n * p.dst_img + oc0 * _channel_step(p) + \
                (oy * p.dst_w + rx - p.pl + p.sx * (i0 + i)) * _pixel_step(p)
            _store(tile, TILE_N, M, nvalid, oc0, p, dst, off, p.sx * _pixel_step(p), _channel_step(p))
            i = i + M


cdef void _amx_task(const uint16_t* a, void* dst, const DeconvolutionPlan* p, Py_ssize_t task, int* rows) noexcept nogil:
    """AMX: one unit (one or two segments of <= 16 pixels of a phase) x one block of <= 32 channels."""
    cdef Py_ssize_t t = task, u, ob, g, n, s0, s1, M, phase, nvalid, nv, oc0, off, mstep, nstep
    cdef float tile[32 * 32]
    cdef const uint16_t* img
    ob = t % p.nblocks      # channel blocks of one unit run back to back: its source tiles stay in cache
    t = t // p.nblocks
    u = t % p.nunits
    t = t // p.nunits
    g = t % p.group
    n = t // p.group
    s0 = p.unit_s0[u]
    s1 = p.unit_s1[u]
    M = p.seg_m[s0]
    phase = p.seg_phase[s0]
    nvalid = min(p.bw, p.cg_out - ob * p.bw)
    nv = (nvalid + 15) // 16
    oc0 = g * p.cg_out + ob * p.bw
    img = a + n * p.a_img + g * p.cgp
    if rows[0] != M:   # this thread's tile configuration
        synet_dc_amx_config(<int>M)
        rows[0] = <int>M
    synet_dc_amx_unit(img + p.seg_aoff[s0], img + p.seg_aoff[s1] if s1 >= 0 else NULL,
                      p.toffs + p.ph_tap0[phase], p.ph_ntaps[phase], p.kpairs // 16, p.cpt * 2,
                      p.weights + p.wofs[(g * p.sy * p.sx + phase) * p.nblocks + ob], <int>nv, tile)
    mstep = p.sx * _pixel_step(p)
    nstep = _channel_step(p)
    off = n * p.dst_img + oc0 * nstep   # + the segment's first pixel, seg_doff
    _store(tile, 32, M, nvalid, oc0, p, dst, off + p.seg_doff[s0], mstep, nstep)
    if s1 >= 0:
        _store(tile + 16 * 32, 32, M, nvalid, oc0, p, dst, off + p.seg_doff[s1], mstep, nstep)


cdef void _pad_row_f32(const src_t* src, float* a, const DeconvolutionPlan* p, Py_ssize_t r) noexcept nogil:
    """Depthwise: row r of the BF16-rounded FP32 copy of src, zero-padded; [n, c, yp, xp] or [n, yp, xp, c]."""
    cdef Py_ssize_t n, c, y, x
    cdef Py_ssize_t row_len = p.wp * p.src_c if p.nhwc else p.wp
    cdef float* d
    cdef const src_t* s
    y = r % p.hp - p.ply
    d = a + r * row_len
    if y < 0 or y >= p.src_h:
        memset(d, 0, row_len * 4)
        return
    if p.nhwc:  # only the left and right borders
        memset(d, 0, p.plx * p.src_c * 4)
        memset(d + (p.plx + p.src_w) * p.src_c, 0, (p.wp - p.plx - p.src_w) * p.src_c * 4)
    else:
        memset(d, 0, p.plx * 4)
        memset(d + p.plx + p.src_w, 0, (p.wp - p.plx - p.src_w) * 4)
    if p.nhwc:
        n = r // p.hp
        d = d + p.plx * p.src_c
        s = src + (n * p.src_h + y) * p.src_w * p.src_c
        for x in range(p.src_w * p.src_c):
            d[x] = _bf16_value(s[x])
    else:
        d = d + p.plx
        s = src + ((r // p.hp) * p.src_h + y) * p.src_w
        for x in range(p.src_w):
            d[x] = _bf16_value(s[x])


cdef void _depthwise_task(const float* a, void* dst, const DeconvolutionPlan* p, Py_ssize_t task) noexcept nogil:
    """One output phase row of one image (NHWC) or of one image channel (NCHW)."""
    cdef Py_ssize_t t = task, r, c, n, ry, rx, j, i, i0, ni, len_, phase, oy, off, c0, cn
    cdef float acc[DW_CHUNK]
    cdef const float* s
    r = t % p.nrows
    t = t // p.nrows
    ry = p.row_ry[r]
    j = p.row_j[r]
    oy = ry - p.pt + p.sy * j
    if p.nhwc:
        n = t
        for rx in range(p.sx):
            phase = ry * p.sx + rx
            i0 = p.col_i0[rx]
            ni = p.col_n[rx]
            for i in range(ni):
                s = a + ((n * p.hp + j + p.ply) * p.wp + i0 + i + p.plx) * p.src_c
                off = ((n * p.dst_h + oy) * p.dst_w + rx - p.pl + p.sx * (i0 + i)) * p.dst_c
                c0 = 0
                while c0 < p.src_c:
                    cn = min(<Py_ssize_t>DW_CHUNK, p.src_c - c0)
                    synet_dc_dw_pixel(s + c0, p.toffs + p.ph_tap0[phase], p.wdw + p.ph_tap0[phase] * p.src_c + c0,
                                      p.ph_ntaps[phase], cn, p.src_c, acc)
                    _store(acc, 0, 1, cn, c0, p, dst, off + c0, 0, 1)
                    c0 = c0 + cn
    else:
        c = t % p.src_c
        n = t // p.src_c
        for rx in range(p.sx):
            phase = ry * p.sx + rx
            i0 = p.col_i0[rx]
            ni = p.col_n[rx]
            i = 0
            while i < ni:
                len_ = min(<Py_ssize_t>DW_CHUNK, ni - i)
                s = a + ((n * p.src_c + c) * p.hp + j + p.ply) * p.wp + i0 + i + p.plx
                synet_dc_dw_row(s, p.toffs + p.ph_tap0[phase], p.wdw + c * p.kpairs + p.ph_tap0[phase],
                                p.ph_ntaps[phase], len_, acc)
                off = ((n * p.dst_c + c) * p.dst_h + oy) * p.dst_w + rx - p.pl + p.sx * (i0 + i)
                _store(acc, 1, len_, 1, c, p, dst, off, p.sx, 0)
                i = i + len_


cdef void _border_task(const src_t* src, void* dst, const DeconvolutionPlan* p, Py_ssize_t task) noexcept nogil:
    """Exact borders: the border outputs of one (image n, group g, output row oy), in-range taps only.

    ``dst[n, g·cg_out + co, oy, ox] = act(bias + Σ_{ky, kx} Σ_ci bf16(src[n, g·cg_in + ci, iy, ix])·w[g, ky, kx, ci, co])``
    over the taps with ``iy = (oy + pt − ky·dilation_y) / sy`` an integer in [0, src_h) (likewise x), so a
    NaN or inf weight never meets the zero padding. FP32 sums in (ky, kx, ci) order; every output of a
    border row, else the border columns.
    """
    cdef Py_ssize_t t = task, oy, g, n, k, count, ox, c0, cn, co, ci, ky, kx, ty, tx, iy, ix, off
    cdef Py_ssize_t src_pixel, src_chan
    cdef bint full_row
    cdef float a
    cdef float acc[BORDER_CHUNK]
    cdef const float* w
    oy = t % p.dst_h
    t = t // p.dst_h
    g = t % p.group
    n = t // p.group
    full_row = p.border_y[oy] != 0
    count = p.dst_w if full_row else p.nborder_x
    src_chan = 1 if p.nhwc else p.src_h * p.src_w      # elements between input channels
    for k in range(count):
        ox = k if full_row else p.border_x[k]
        c0 = 0
        while c0 < p.cg_out:
            cn = min(<Py_ssize_t>BORDER_CHUNK, p.cg_out - c0)
            for co in range(cn):
                acc[co] = 0.0
            for ky in range(p.kernel_y):
                ty = oy + p.pt - ky * p.dilation_y
                if ty < 0 or ty % p.sy != 0 or ty // p.sy >= p.src_h:
                    continue
                iy = ty // p.sy
                for kx in range(p.kernel_x):
                    tx = ox + p.pl - kx * p.dilation_x
                    if tx < 0 or tx % p.sx != 0 or tx // p.sx >= p.src_w:
                        continue
                    ix = tx // p.sx
                    if p.nhwc:
                        src_pixel = ((n * p.src_h + iy) * p.src_w + ix) * p.src_c + g * p.cg_in
                    else:
                        src_pixel = ((n * p.src_c + g * p.cg_in) * p.src_h + iy) * p.src_w + ix
                    w = p.wexact + ((g * p.kernel_y + ky) * p.kernel_x + kx) * p.cg_in * p.cg_out + c0
                    for ci in range(p.cg_in):
                        a = _bf16_value(src[src_pixel + ci * src_chan])
                        for co in range(cn):
                            acc[co] += a * w[ci * p.cg_out + co]
            off = n * p.dst_img + (g * p.cg_out + c0) * _channel_step(p) + (oy * p.dst_w + ox) * _pixel_step(p)
            _store(acc, 0, 1, cn, g * p.cg_out + c0, p, dst, off, 0, _channel_step(p))
            c0 = c0 + cn


cdef void _run_gemm(const src_t* src, uint16_t* abuf, void* dst, const DeconvolutionPlan* p, int threads) noexcept nogil:
    """Pad/convert the source (unless direct), all output tasks, then the border pass when
    exact_borders: one parallel region per call.

    Tasks are scheduled "guided" (a thread the OS delays does not hold back a fixed share);
    every output element is still summed by one task in a fixed order, whatever thread runs it.
    """
    cdef Py_ssize_t task, r
    cdef Py_ssize_t work = p.batch * p.dst_h * p.dst_w * p.dst_c * p.cg_in
    cdef Py_ssize_t pad_rows = 0 if p.direct else p.batch * p.hp
    cdef const uint16_t* a = <const uint16_t*>src if p.direct else abuf
    cdef int* rows
    cdef int one_rows[16]
    cdef int nthreads = threads if work >= PARALLEL_MIN else 1
    rows = <int*>calloc(nthreads * 16, sizeof(int))   # AMX: per thread, the tile rows configured (0: none)
    if rows == NULL:         # no memory for 16 ints a thread: run on this thread
        nthreads = 1
        one_rows[0] = 0
        rows = &one_rows[0]
    with parallel(num_threads=nthreads):
        for r in prange(pad_rows, schedule="static"):
            _pad_row(src, abuf, p, r)
        if p.amx:
            for task in prange(p.ntasks, schedule="guided"):
                _amx_task(a, dst, p, task, rows + 16 * threadid())
            synet_dc_amx_release()
        else:
            for task in prange(p.ntasks, schedule="guided"):
                _gemm_task(a, dst, p, task)
        if p.exact_borders:   # after the barrier that ends the main pass: overwrite its border outputs
            for task in prange(p.batch * p.group * p.dst_h, schedule="guided"):
                _border_task(src, dst, p, task)
    if rows != &one_rows[0]:
        free(rows)


cdef void _run_depthwise(const src_t* src, float* abuf, void* dst, const DeconvolutionPlan* p, int threads) noexcept nogil:
    cdef Py_ssize_t ntasks = p.batch * p.nrows * (1 if p.nhwc else p.src_c)
    cdef Py_ssize_t pad_rows = p.batch * p.hp * (1 if p.nhwc else p.src_c)
    cdef Py_ssize_t task, r
    cdef Py_ssize_t work = p.batch * p.dst_h * p.dst_w * p.dst_c * p.kpairs
    with parallel(num_threads=threads if work >= PARALLEL_MIN else 1):
        for r in prange(pad_rows, schedule="static"):
            _pad_row_f32(src, abuf, p, r)
        for task in prange(ntasks, schedule="guided"):
            _depthwise_task(abuf, dst, p, task)
        if p.exact_borders:   # after the barrier that ends the main pass: overwrite its border outputs
            for task in prange(p.batch * p.group * p.dst_h, schedule="guided"):
                _border_task(src, dst, p, task)


cdef SynetStatus deconvolution_run(const DeconvolutionPlan* plan, const void* src, void* buf, void* dst,
                                   int n_threads) noexcept nogil:
    """Run a plan (see _deconvolution.pxd); the one entry point of the Python and C APIs.

    ``dst = act(bias + conv_transpose(bf16(src), bf16(weight)))``: pads/converts src into buf
    (aligned to 64 bytes inside plan.buf_size), then runs every output task; with exact_borders
    (non-finite weights) the border outputs are then summed again over their in-range taps.
    """
    cdef const DeconvolutionPlan* p = plan
    cdef char* abuf = NULL
    cdef int threads = max(n_threads, 1)
    if p == NULL or src == NULL or dst == NULL:
        return SYNET_VALUE_ERROR
    if p.impl != SYNET_DECONV_GEMM and p.impl != SYNET_DECONV_DEPTHWISE or p.act < 0 or p.act >= ACT_COUNT:
        return SYNET_VALUE_ERROR
    if min(p.batch, p.src_c, p.src_h, p.src_w, p.dst_c, p.dst_h, p.dst_w, p.group, p.sy, p.sx) < 1 or \
            min(p.cg_in, p.cg_out, p.hp, p.wp, p.nrows, p.ntasks) < 1 or p.buf_size < 0 or \
            p.dst_img != p.dst_h * p.dst_w * p.dst_c:
        return SYNET_VALUE_ERROR
    if p.ph_ntaps == NULL or p.ph_tap0 == NULL or p.toffs == NULL or p.row_ry == NULL or p.row_j == NULL or \
            p.col_i0 == NULL or p.col_n == NULL:
        return SYNET_VALUE_ERROR
    if p.impl == SYNET_DECONV_GEMM and (
            (p.direct and not (p.src_bf16 and p.nhwc)) or (not p.soft and not synet_dc_hard()) or
            (p.amx and (not _AMX_GRANTED or p.nunits < 1 or p.unit_s0 == NULL or p.unit_s1 == NULL or
                        p.seg_aoff == NULL or p.seg_doff == NULL or p.seg_m == NULL or p.seg_phase == NULL))):
        return SYNET_VALUE_ERROR   # a kernel this build, CPU or process cannot run
    if p.exact_borders and (p.border_y == NULL or p.border_x == NULL or p.nborder_x < 0 or p.nborder_x > p.dst_w or
                            min(p.kernel_y, p.kernel_x, p.dilation_y, p.dilation_x) < 1):
        return SYNET_VALUE_ERROR   # the border pass's tables
    if p.bias == NULL or p.params == NULL or p.wofs == NULL or \
            (p.weights == NULL if p.impl == SYNET_DECONV_GEMM else p.wdw == NULL) or \
            (p.exact_borders and p.wexact == NULL):
        return SYNET_NOT_READY
    if p.buf_size > 0:
        if buf == NULL:
            return SYNET_VALUE_ERROR
        abuf = <char*>buf
        abuf = abuf + ((64 - (<size_t>abuf) % 64) % 64)
    if p.impl == SYNET_DECONV_GEMM:
        if p.src_bf16:
            _run_gemm(<const uint16_t*>src, <uint16_t*>abuf, dst, p, threads)
        else:
            _run_gemm(<const float*>src, <uint16_t*>abuf, dst, p, threads)
    elif p.src_bf16:
        _run_depthwise(<const uint16_t*>src, <float*>abuf, dst, p, threads)
    else:
        _run_depthwise(<const float*>src, <float*>abuf, dst, p, threads)
    return SYNET_OK


# ---------------------------------------------------------------------------------------------
# Geometry (Python-land, once per init)


@cython.cdivision(False)
@cython.infer_types(False)
def _axis_phases(stride, dilation, kernel, pad_begin, src, dst):
    """Per phase r < stride: taps [(k, input offset)], first index j0 and count of its outputs.

    Output o = r − pad_begin + stride·j takes tap k when (r − k·dilation) % stride == 0, from
    input i = j + (r − k·dilation) // stride. Also the zero padding (low, high) that keeps every
    tap of every output in range.
    """
    phases = []
    low = high = 0
    for r in range(stride):
        taps = [(k, (r - k * dilation) // stride) for k in range(kernel) if (r - k * dilation) % stride == 0]
        j0 = -((r - pad_begin) // stride)            # ceil((pad_begin - r) / stride)
        j1 = -((r - pad_begin - dst) // stride)      # ceil((dst + pad_begin - r) / stride)
        count = max(0, j1 - j0)
        phases.append((taps, j0, count))
        if taps and count:
            offsets = [o for _, o in taps]
            low = max(low, -(j0 + min(offsets)))
            high = max(high, j0 + count - 1 + max(offsets) - (src - 1))
    return phases, low, high


def _border_outputs(phases, stride, pad_begin, src, dst):
    """Flags [dst] of one axis: 1 for output o = r − pad_begin + stride·j when a tap of its phase r reads
    input j + offset outside [0, src) (the zero padding), else 0."""
    flags = np.zeros(dst, np.int64)
    for r, (taps, j0, count) in enumerate(phases):
        if taps and count:
            offsets = [o for _, o in taps]
            j = np.arange(j0, j0 + count, dtype=np.int64)
            flags[r - pad_begin + stride * j] = (j + min(offsets) < 0) | (j + max(offsets) >= src)
    return flags


_MAX_PLAN = 1 << 24   # Python-built table entries (phases·taps, rows, columns) a geometry may need


def _check_sizes(batch, conv):
    """ValueError for a geometry whose tensors do not fit 63-bit byte counts or whose plan tables would be
    absurdly long (init builds them in Python: without this, a kernel or stride of 2**40 never returns)."""
    g = conv.group
    sizes = {"src": batch * conv.src_c * conv.src_h * conv.src_w,
             "dst": batch * conv.dst_c * conv.dst_h * conv.dst_w,
             "weight": conv.src_c * conv.kernel_y * conv.kernel_x * (conv.dst_c // g),
             "padded src": batch * (conv.src_c + g) * (conv.src_h + conv.dilation_y * conv.kernel_y)
                           * (conv.src_w + conv.dilation_x * conv.kernel_x)}
    for name, n in sizes.items():
        if n * 4 + 4096 >= 1 << 63:
            raise ValueError(f"conv: the {name} tensor of {n} elements overflows 64-bit byte sizes")
    entries = (conv.stride_y * conv.kernel_y + conv.stride_x * conv.kernel_x + conv.stride_y * conv.stride_x
               + conv.kernel_y * conv.kernel_x + conv.dst_h + conv.dst_w + conv.dst_h * conv.dst_w // 16)
    if entries > _MAX_PLAN:
        raise ValueError(f"conv: the geometry needs {entries} plan entries (stride·kernel, stride_y·stride_x, "
                         f"kernel_y·kernel_x, dst_h + dst_w + dst_h·dst_w/16); expected at most {_MAX_PLAN}")


def _round_f32(array):
    """The float array rounded to BF16 (nearest-even), as float32 values."""
    from ._kernels import round_to_bfloat16
    return round_to_bfloat16(np.ascontiguousarray(array, np.float32))


_FLOAT32 = np.dtype(np.float32)


@cython.final
cdef class Deconvolution16b:
    """Context of a BF16/FP32 transposed convolution (Simd's SynetDeconvolution16b).

    ``dst = act(bias + conv_transpose(bf16(src), bf16(weight)))`` with FP32 accumulation.
    Layouts: NCHW src [N, srcC, H, W] with weight [srcC, dstC/group, kY, kX] (PyTorch's
    ConvTranspose2d); NHWC src [N, H, W, srcC] with weight [srcC, kY, kX, dstC/group].

    Examples
    --------
    >>> conv = ConvParams.deconvolution(4, 3, 3, 4, kernel=2, stride=2, format="NHWC")
    >>> d = Deconvolution16b()
    >>> d.init(1, conv)
    >>> d.set_params(np.ones(2 * 2 * 4 * 4, np.float32))
    >>> d.forward(np.ones((1, 3, 3, 4), np.float32)).shape
    (1, 6, 6, 4)
    """


    def __cinit__(self):
        self._key = None
        self._ready = False
        self._lock = threading.Lock()

    def __init__(self, batch=None, conv=None, compatibility=0):
        if batch is not None or conv is not None:
            self.init(batch, conv, compatibility)

    # -- init ----------------------------------------------------------------------------------

    def init(self, batch, conv, compatibility=0):
        """(Re)initialise for `batch` images of geometry `conv`.

        ``dst_h = stride_y·(src_h − 1) + dilation_y·(kernel_y − 1) + 1 − pad_y − pad_h`` (likewise
        x) must hold. Identical arguments keep the context (and its weights); others rebuild it.

        Parameters
        ----------
        batch : int
            Images per forward (>= 1).
        conv : ConvParams
            The geometry, types, formats, group and activation.
        compatibility : Compatibility or int
            ``Compatibility.BF16_SOFT`` picks the portable FP32 micro-kernel (same summation order).

        Raises
        ------
        ValueError
            An unsupported or inconsistent geometry (says what was expected).
        """
        if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)):
            raise TypeError(f"batch: expected an int, got {type(batch).__name__}")
        if batch < 1:
            raise ValueError(f"batch: expected an int >= 1, got {batch}")
        if not isinstance(conv, ConvParams):
            raise TypeError(f"conv: expected a synet.ConvParams, got {type(conv).__name__}")
        compat = as_compatibility(compatibility)
        c = self._validate(conv)
        _check_sizes(int(batch), c)
        key = (int(batch), c, int(compat))
        with self._lock:
            if key == self._key:
                return
            self._clear()
            self._build(int(batch), c, compat)
            self._key = key

    @staticmethod
    def _validate(conv):
        """A normalised copy of conv, or ValueError naming what was expected."""
        values = {}
        for f in ("src_c", "src_h", "src_w", "dst_c", "dst_h", "dst_w", "kernel_y", "kernel_x", "dilation_y",
                  "dilation_x", "stride_y", "stride_x", "group"):
            v = getattr(conv, f)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"conv.{f}: expected an int, got {type(v).__name__}")
            if v < 1:
                raise ValueError(f"conv.{f}: expected an int >= 1, got {v}")
            values[f] = int(v)
        for f in ("pad_y", "pad_x", "pad_h", "pad_w"):
            v = getattr(conv, f)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"conv.{f}: expected an int, got {type(v).__name__}")
            values[f] = int(v)
        if values["pad_y"] < 0 or values["pad_x"] < 0:
            raise ValueError(f"conv.pad_y, conv.pad_x: expected pads >= 0, got {values['pad_y']}, {values['pad_x']}")
        for f in ("pad_h", "pad_w"):  # a negative end pad is PyTorch's output_padding
            s = values["stride_y" if f == "pad_h" else "stride_x"]
            d = values["dilation_y" if f == "pad_h" else "dilation_x"]
            if values[f] <= -max(s, d):
                raise ValueError(f"conv.{f}: expected a pad > -max(stride, dilation) = {-max(s, d)}, got {values[f]}")
        src_type = as_data_type(conv.src_type, "conv.src_type")
        dst_type = as_data_type(conv.dst_type, "conv.dst_type")
        for name, t in (("conv.src_type", src_type), ("conv.dst_type", dst_type)):
            if t not in (DataType.FLOAT32, DataType.BFLOAT16):
                raise ValueError(f"{name}: expected FLOAT32 or BFLOAT16, got {t.name}")
        src_format = as_format(conv.src_format, "conv.src_format")
        dst_format = as_format(conv.dst_format, "conv.dst_format")
        if src_format != dst_format:
            raise ValueError(f"conv.dst_format: expected the src_format {src_format.name}, got {dst_format.name}")
        activation = as_activation(conv.activation, "conv.activation")
        g = values["group"]
        if values["src_c"] % g or values["dst_c"] % g:
            raise ValueError(f"conv.group: expected a divisor of src_c {values['src_c']} and dst_c "
                             f"{values['dst_c']}, got {g}")
        for axis, src, dst, k, s, d, p0, p1 in (
                ("h", "src_h", "dst_h", "kernel_y", "stride_y", "dilation_y", "pad_y", "pad_h"),
                ("w", "src_w", "dst_w", "kernel_x", "stride_x", "dilation_x", "pad_x", "pad_w")):
            expected = deconvolution_size(values[src], values[k], values[s], values[d], values[p0], values[p1])
            if expected <= 0:
                raise ValueError(f"conv.dst_{axis}: the geometry gives a dst size {expected}; expected >= 1")
            if values[dst] != expected:
                raise ValueError(f"conv.dst_{axis}: expected {expected} = {s}·({src} − 1) + {d}·({k} − 1) + 1 − "
                                 f"{p0} − {p1}, got {values[dst]}")
        return ConvParams(values["src_c"], values["src_h"], values["src_w"], src_type, src_format,
                          values["dst_c"], values["dst_h"], values["dst_w"], dst_type, dst_format,
                          values["kernel_y"], values["kernel_x"], values["dilation_y"], values["dilation_x"],
                          values["stride_y"], values["stride_x"], values["pad_y"], values["pad_x"],
                          values["pad_h"], values["pad_w"], g, activation)

    def _build(self, Py_ssize_t batch, conv, compat):
        cdef DeconvolutionPlan* p = &self._plan
        cdef const int64_t[::1] v
        nhwc = conv.src_format == TensorFormat.NHWC
        g = conv.group
        cg_in, cg_out = conv.src_c // g, conv.dst_c // g
        depthwise = cg_in == 1 and cg_out == 1
        geo = conv
        if (conv.kernel_y, conv.kernel_x, conv.stride_y, conv.stride_x, conv.pad_y, conv.pad_x, conv.pad_h,
                conv.pad_w) == (1, 1, 1, 1, 0, 0, 0, 0):
            # a 1x1 stride-1 deconvolution is a GEMM over all pixels: one long row
            geo = dataclasses.replace(conv, src_h=1, src_w=conv.src_h * conv.src_w, dst_h=1,
                                      dst_w=conv.dst_h * conv.dst_w)
        phases_y, ply, phy = _axis_phases(geo.stride_y, geo.dilation_y, geo.kernel_y, geo.pad_y, geo.src_h, geo.dst_h)
        phases_x, plx, phx = _axis_phases(geo.stride_x, geo.dilation_x, geo.kernel_x, geo.pad_x, geo.src_w, geo.dst_w)
        hp, wp = geo.src_h + ply + phy, geo.src_w + plx + phx
        src_bf16 = conv.src_type == DataType.BFLOAT16
        p.soft = bool(compat & Compatibility.BF16_SOFT) or not HARDWARE_BF16
        amx = HARDWARE_AMX and not (compat & Compatibility.BF16_SOFT) and cg_in >= 16 and not depthwise
        bw = 32 if amx else TILE_N
        if depthwise:
            p.impl = SYNET_DECONV_DEPTHWISE
            cgp = 1
            cpt = conv.src_c if nhwc else 1
            pix = conv.src_c if nhwc else 1     # elements between neighbouring pixels
            row = wp * pix
            p.direct = False
            p.buf_size = batch * conv.src_c * hp * wp * 4 + 64
        else:
            p.impl = SYNET_DECONV_GEMM
            cgp = (cg_in + 31) // 32 * 32 if amx else cg_in + (cg_in & 1)
            cpt = g * cgp
            p.direct = bool(nhwc and src_bf16 and cgp == cg_in and ply == plx == phy == phx == 0)
            pix = cpt
            row = wp * cpt
            p.buf_size = 0 if p.direct else batch * hp * wp * cpt * 2 + 64
        # tap tables: per phase (ry, rx), taps ky-major with their source offsets
        ntaps, tap0, toffs, tap_k = [], [], [], []
        for ry, (taps_y, _, _) in enumerate(phases_y):
            for rx, (taps_x, _, _) in enumerate(phases_x):
                tap0.append(len(toffs))
                ntaps.append(len(taps_y) * len(taps_x))
                for ky, oy in taps_y:
                    for kx, ox in taps_x:
                        toffs.append(oy * row + ox * pix)
                        tap_k.append((ky, kx))
        rows = [(ry, j0 + j) for ry, (_, j0, count) in enumerate(phases_y) for j in range(count)]
        row_ry = np.array([r[0] for r in rows], np.int64)
        row_j = np.array([r[1] for r in rows], np.int64)
        col_i0 = np.array([ph[1] for ph in phases_x], np.int64)
        col_n = np.array([ph[2] for ph in phases_x], np.int64)
        nblocks = (cg_out + bw - 1) // bw
        # AMX: segments of <= 16 pixels of one phase row; full ones of a phase go in pairs
        seg_aoff, seg_doff, seg_m, seg_phase, seg_place, units = [], [], [], [], [], []
        if amx:
            for phase in range(geo.stride_y * geo.stride_x):
                ry, rx = divmod(phase, geo.stride_x)
                full, tails = [], []
                for r_ry, j in rows:
                    if r_ry != ry:
                        continue
                    oy = ry - geo.pad_y + geo.stride_y * j
                    for i in range(0, col_n[rx], 16):
                        ii = col_i0[rx] + i
                        ox = rx - geo.pad_x + geo.stride_x * ii
                        seg_aoff.append(((j + ply) * wp + ii + plx) * cpt)
                        seg_doff.append((oy * geo.dst_w + ox) * (conv.dst_c if nhwc else 1))
                        m = min(16, int(col_n[rx]) - i)
                        seg_m.append(m)
                        seg_phase.append(phase)
                        seg_place.append((oy, ox))
                        (full if m == 16 else tails).append(len(seg_m) - 1)
                units += [(full[k], full[k + 1] if k + 1 < len(full) else -1) for k in range(0, len(full), 2)]
                units += [(k, -1) for k in tails]
            # in output order: the phases that interleave in one output row run back to back, so a
            # thread's share of the tasks is a band of output rows (no cache line written by two threads)
            units.sort(key=lambda unit: seg_place[unit[0]])
        unit_s0 = np.array([u[0] for u in units] + [0], np.int64)
        unit_s1 = np.array([u[1] for u in units] + [0], np.int64)
        seg_arrays = tuple(np.array(x + [0], np.int64) for x in (seg_aoff, seg_doff, seg_m, seg_phase))
        ntaps = np.array(ntaps, np.int64)
        tap0 = np.array(tap0 + [len(toffs)], np.int64)
        toffs = np.array(toffs + [0], np.int64)
        # exact borders (used only with non-finite weights): the outputs whose phase reads the zero padding
        border_y = _border_outputs(phases_y, geo.stride_y, geo.pad_y, geo.src_h, geo.dst_h)
        border_x = np.flatnonzero(_border_outputs(phases_x, geo.stride_x, geo.pad_x, geo.src_w, geo.dst_w))
        p.nborder_x = len(border_x)
        border_x = np.append(border_x, 0).astype(np.int64)
        self._keep = (row_ry, row_j, col_i0, col_n, ntaps, tap0, toffs, unit_s0, unit_s1) + seg_arrays + \
            (border_y, border_x)
        self._tap_k = tap_k
        self._conv = conv
        self._batch = batch
        self._compat = compat
        self._src_dtypes = (BFLOAT16, UINT16) if src_bf16 else (_FLOAT32,)
        self._dst_dtypes = (BFLOAT16, UINT16) if conv.dst_type == DataType.BFLOAT16 else (_FLOAT32,)
        self._dst_dtype = self._dst_dtypes[0]
        if nhwc:
            self._src_shape = (batch, conv.src_h, conv.src_w, conv.src_c)
            self._dst_shape = (batch, conv.dst_h, conv.dst_w, conv.dst_c)
        else:
            self._src_shape = (batch, conv.src_c, conv.src_h, conv.src_w)
            self._dst_shape = (batch, conv.dst_c, conv.dst_h, conv.dst_w)
        self._src_size = batch * conv.src_c * conv.src_h * conv.src_w
        self._dst_size = batch * conv.dst_c * conv.dst_h * conv.dst_w
        p.batch, p.src_c, p.src_h, p.src_w = batch, geo.src_c, geo.src_h, geo.src_w
        p.dst_c, p.dst_h, p.dst_w = geo.dst_c, geo.dst_h, geo.dst_w
        p.group, p.cg_in, p.cg_out = g, cg_in, cg_out
        p.sy, p.sx, p.pt, p.pl = geo.stride_y, geo.stride_x, geo.pad_y, geo.pad_x
        p.hp, p.wp, p.ply, p.plx, p.cgp, p.cpt = hp, wp, ply, plx, cgp, cpt
        p.a_img = hp * wp * (conv.src_c if depthwise else cpt)
        p.dst_img = geo.dst_h * geo.dst_w * geo.dst_c
        p.kpairs = len(tap_k) if depthwise else cgp // 2   # depthwise: taps per channel
        p.nblocks = nblocks
        p.bw = bw
        p.amx = amx
        p.nrows = len(rows)
        p.nunits = len(units)
        p.ntasks = batch * g * (len(units) if amx else len(rows)) * nblocks
        p.nhwc = nhwc
        p.dst_bf16 = conv.dst_type == DataType.BFLOAT16
        p.src_bf16 = src_bf16
        p.act = int(conv.activation)
        v = row_ry; p.row_ry = &v[0]
        v = row_j; p.row_j = &v[0]
        v = col_i0; p.col_i0 = &v[0]
        v = col_n; p.col_n = &v[0]
        v = ntaps; p.ph_ntaps = &v[0]
        v = tap0; p.ph_tap0 = &v[0]
        v = toffs; p.toffs = &v[0]
        v = unit_s0; p.unit_s0 = &v[0]
        v = unit_s1; p.unit_s1 = &v[0]
        v = seg_arrays[0]; p.seg_aoff = &v[0]
        v = seg_arrays[1]; p.seg_doff = &v[0]
        v = seg_arrays[2]; p.seg_m = &v[0]
        v = seg_arrays[3]; p.seg_phase = &v[0]
        v = border_y; p.border_y = &v[0]
        v = border_x; p.border_x = &v[0]
        p.kernel_y, p.kernel_x, p.dilation_y, p.dilation_x = geo.kernel_y, geo.kernel_x, geo.dilation_y, geo.dilation_x

    def enable(self):
        """True when `init` has built the context."""
        return self._key is not None

    def external_buffer_size(self):
        """Bytes of scratch `forward` needs in `buf` (the padded BF16 / FP32 source); 0 if none."""
        self._require_init()
        return int(self._plan.buf_size)

    def internal_buffer_size(self):
        """Bytes held by the context: packed weights, bias, activation parameters, tables, and with
        non-finite weights the FP32 weight copy of the exact-border pass."""
        if self._key is None:
            return 0
        total = sum(a.nbytes for a in self._keep)
        for a in (self._weights, self._bias, self._params, self._wofs, self._wexact):
            if a is not None:
                total += a.nbytes
        return int(total)

    def info(self):
        """The implementation chosen by `init`, e.g. ``"Cython::PhaseGemm avx512bf16"``; ``" + exact borders"``
        when the weights hold NaN or inf and the border outputs are summed again over their in-range taps."""
        self._require_init()
        borders = " + exact borders" if self._plan.exact_borders else ""   # non-finite weights
        if self._plan.impl == SYNET_DECONV_DEPTHWISE:
            return "Cython::Depthwise fp32" + borders
        kernel = "amx-bf16" if self._plan.amx else ("portable" if self._plan.soft else "avx512bf16")
        return f"Cython::PhaseGemm {kernel}" + (" direct" if self._plan.direct else "") + borders

    cdef _require_init(self):
        if self._key is None:
            raise RuntimeError("Deconvolution16b: call init() before using the context")

    # -- set_params ----------------------------------------------------------------------------

    def set_params(self, weight, bias=None, params=None):
        """Set weights (rounded to BF16 nearest-even and packed once), bias and activation params.

        Parameters
        ----------
        weight : array_like of float
            srcC·kY·kX·dstC/group values: NCHW ``[srcC, dstC/group, kY, kX]`` (PyTorch's layout) or
            NHWC ``[srcC, kY, kX, dstC/group]``.
        bias : array_like of float, optional
            dstC values; zeros when None.
        params : array_like of float, optional
            At least the values the activation uses (dstC slopes for PRELU; extras ignored);
            None takes the defaults of SPEC §2.
        """
        cdef DeconvolutionPlan* p = &self._plan
        cdef const float[::1] vb, vp, vw32, vwx
        cdef const int64_t[::1] vo
        cdef const uint16_t[::1] vw16
        with self._lock:
            self._require_init()
            conv = self._conv
            key = self._key
        g, cg_in, cg_out = conv.group, p.cg_in, p.cg_out
        ky, kx = conv.kernel_y, conv.kernel_x
        n_weight = conv.src_c * ky * kx * cg_out
        w = np.asarray(weight)
        if w.dtype.kind not in "fiu" and w.dtype != BFLOAT16:
            raise ValueError(f"weight: expected real numbers, got dtype {w.dtype}")
        if w.size != n_weight:
            layout = "[srcC, kY, kX, dstC/group]" if p.nhwc else "[srcC, dstC/group, kY, kX]"
            raise ValueError(f"weight: expected {n_weight} elements ({layout} = {conv.src_c}·{ky}·{kx}·{cg_out}), "
                             f"got {w.size}")
        if bias is None:
            b = np.zeros(conv.dst_c, np.float32)
        else:
            b = np.ascontiguousarray(np.asarray(bias), np.float32).reshape(-1)
            if b.size != conv.dst_c:
                raise ValueError(f"bias: expected {conv.dst_c} elements (dstC), got {b.size}")
            b = b.copy()
        prm = activation_params(conv.activation, params, conv.dst_c, "params", allow_single_slope=False,
                                allow_extra_slopes=True)
        w = np.asarray(w, np.float32)
        if p.nhwc:
            canon = w.reshape(g, cg_in, ky, kx, cg_out)
        else:
            canon = w.reshape(g, cg_in, cg_out, ky, kx).transpose(0, 1, 3, 4, 2)
        tap_k = self._tap_k
        sy, sx = conv.stride_y, conv.stride_x
        ntaps_all = np.asarray(self._keep[4])
        rounded = _round_f32(canon)   # [g, cg_in, ky, kx, cg_out], BF16 values
        wexact = None
        if (p.hp > p.src_h or p.wp > p.src_w) and not np.isfinite(rounded).all():
            # NaN/inf meets the zero padding of border outputs: keep the weights of the exact-border pass
            wexact = np.ascontiguousarray(rounded.transpose(0, 2, 3, 1, 4)).reshape(-1)
        if p.impl == SYNET_DECONV_DEPTHWISE:
            r = rounded.reshape(conv.src_c, ky, kx)   # [c, ky, kx]
            kyi = np.array([k[0] for k in tap_k], np.intp)
            kxi = np.array([k[1] for k in tap_k], np.intp)
            by_tap = r[:, kyi, kxi] if len(tap_k) else np.zeros((conv.src_c, 0), np.float32)
            packed = np.ascontiguousarray(by_tap.T if p.nhwc else by_tap, np.float32).reshape(-1)
            if packed.size == 0:
                packed = np.zeros(1, np.float32)
            wofs = np.zeros(1, np.int64)
        else:
            bits = (rounded.view(np.uint32) >> 16).astype(np.uint16)   # [g, cg_in, ky, kx, cg_out], BF16 bits
            cgp = p.cgp
            nblocks = p.nblocks
            if cgp != cg_in:
                bits = np.concatenate([bits, np.zeros((g, cgp - cg_in, ky, kx, cg_out), np.uint16)], axis=1)
            pieces = []
            wofs = np.zeros(g * sy * sx * nblocks, np.int64)
            offset = 0
            tap0 = np.asarray(self._keep[5])
            for gi in range(g):
                for phase in range(sy * sx):
                    taps = tap_k[tap0[phase]:tap0[phase] + ntaps_all[phase]]
                    if taps:
                        sel = np.stack([bits[gi, :, a, b_, :] for a, b_ in taps])   # [T, cgp, cg_out]
                    else:
                        sel = np.zeros((0, cgp, cg_out), np.uint16)
                    sel = sel.reshape(len(taps), cgp // 2, 2, cg_out)
                    for ob in range(nblocks):
                        lo = ob * p.bw
                        hi = min(cg_out, lo + p.bw)
                        lanes = ((hi - lo + 15) // 16) * 16
                        blk = np.zeros((len(taps), cgp // 2, lanes, 2), np.uint16)
                        blk[:, :, :hi - lo, :] = sel[:, :, :, lo:hi].transpose(0, 1, 3, 2)
                        wofs[(gi * sy * sx + phase) * nblocks + ob] = offset
                        pieces.append(blk.reshape(-1))
                        offset += blk.size
            packed = np.concatenate(pieces + [np.zeros(64, np.uint16)])
        with self._lock:
            if self._key is not key:   # init/clear ran meanwhile: these weights fit the old geometry
                raise RuntimeError("Deconvolution16b.set_params: the context was re-initialised during the call")
            self._weights, self._bias, self._params, self._wofs = packed, b, prm, wofs
            self._wexact = wexact
            p.exact_borders = wexact is not None
            if wexact is not None:
                vwx = wexact
                p.wexact = &vwx[0]
            else:
                p.wexact = NULL
            vb = b
            vp = prm
            vo = wofs
            p.bias = &vb[0]
            p.params = &vp[0]
            p.wofs = &vo[0]
            if p.impl == SYNET_DECONV_DEPTHWISE:
                vw32 = packed
                p.wdw = &vw32[0]
            else:
                vw16 = packed
                p.weights = &vw16[0]
            self._ready = True

    # -- forward -------------------------------------------------------------------------------

    def forward(self, src, buf=None, dst=None, *, n_threads=None):
        """Run the deconvolution: ``dst = act(bias + conv_transpose(bf16(src), bf16(weight)))``.

        Products of BF16 values are summed in FP32 (by `deconvolution_run`).

        Parameters
        ----------
        src : ndarray
            C-contiguous, the context's type (FLOAT32, or BFLOAT16 as ml_dtypes.bfloat16 / uint16
            bits), batch·srcC·srcH·srcW elements.
        buf : ndarray of uint8, optional
            Scratch of >= ``external_buffer_size()`` bytes; None uses a temporary one.
        dst : ndarray, optional
            C-contiguous, the dst type, batch·dstC·dstH·dstW elements; allocated in the
            layout's shape when None.
        n_threads : int, optional

        Returns
        -------
        dst
        """
        cdef int threads = resolve_num_threads(n_threads)
        cdef DeconvolutionPlan plan
        cdef Py_ssize_t src_size = 0, dst_size = 0
        cdef SynetStatus status
        with self._lock:   # one consistent snapshot: a concurrent init/set_params/clear cannot pull it away
            self._require_init()
            if not self._ready:
                raise RuntimeError("Deconvolution16b.forward: call set_params() before forward()")
            plan = self._plan     # a private copy; the references below keep the arrays it points into
            keep = self._keep
            weights, bias, prm, wofs, wexact = self._weights, self._bias, self._params, self._wofs, self._wexact
            src_dtypes, src_size = self._src_dtypes, self._src_size
            dst_dtypes, dst_dtype, dst_shape, dst_size = self._dst_dtypes, self._dst_dtype, self._dst_shape, self._dst_size
        src = check_buffer(src, "src", src_dtypes, src_size)
        if dst is None:
            dst = np.empty(dst_shape, dst_dtype)
        else:
            dst = check_buffer(dst, "dst", dst_dtypes, dst_size, writeable=True)
            if np.may_share_memory(dst, src):
                raise ValueError("dst: must not overlap src")
        if buf is not None:
            buf = require_array(buf, "buf")
            if buf.dtype != np.uint8:
                raise ValueError(f"buf: expected dtype uint8, got {buf.dtype}")
        if plan.buf_size:
            if buf is None:
                buf = np.empty(plan.buf_size, np.uint8)
            else:
                if not buf.flags.c_contiguous or not buf.flags.writeable:
                    raise ValueError("buf: expected a writeable C-contiguous array")
                if buf.size < plan.buf_size:
                    raise ValueError(f"buf: expected >= {plan.buf_size} bytes (external_buffer_size()), "
                                     f"got {buf.size}")
                if np.may_share_memory(buf, dst) or np.may_share_memory(buf, src):
                    raise ValueError("buf: must not overlap src or dst")
        cdef const void* ps = _const_ptr(src)
        cdef void* pd = _data_ptr(dst)
        cdef void* pb = _data_ptr(buf) if plan.buf_size else NULL
        with nogil:
            status = deconvolution_run(&plan, ps, pb, pd, threads)
        if status != SYNET_OK:   # the checks above make this unreachable
            raise RuntimeError(f"Deconvolution16b.forward: kernel status {status}")
        return dst

    cdef DeconvolutionPlan plan(self) except *:
        """The prepared context as a C-level plan for `deconvolution_run` (points into the context's
        arrays: keep the context alive and do not re-init, set_params or clear it while the plan runs)."""
        with self._lock:
            self._require_init()
            if not self._ready:
                raise RuntimeError("Deconvolution16b: call set_params() before plan()")
            return self._plan

    def clear(self):
        """Release the context: geometry, packed weights, bias and parameters."""
        with self._lock:
            self._clear()

    cdef _clear(self):
        self._key = None
        self._ready = False
        self._conv = None
        self._weights = self._bias = self._params = self._wofs = self._wexact = None
        self._keep = ()
        self._tap_k = None
        memset(&self._plan, 0, sizeof(DeconvolutionPlan))

    @property
    def conv(self):
        """The (normalised) ConvParams given to `init`, or None."""
        return self._conv


cdef void* _data_ptr(array):
    cdef uint8_t[::1] v = array.reshape(-1).view(np.uint8)
    return <void*>&v[0]


cdef const void* _const_ptr(array):
    cdef const uint8_t[::1] v = array.reshape(-1).view(np.uint8)
    return <const void*>&v[0]


def _as_operand(x, str name):
    """x as an array of float32 or bfloat16 (uint16: raw BF16 bits); other reals become float32."""
    array = np.asarray(x)
    if array.dtype == _FLOAT32 or array.dtype == BFLOAT16:
        return array, array.dtype
    if array.dtype == UINT16:
        return array.view(BFLOAT16), array.dtype
    if array.dtype.kind in "biuf":
        return array.astype(np.float32), _FLOAT32
    raise ValueError(f"{name}: expected real numbers (float32, bfloat16, float64, ...), got dtype {array.dtype}")


def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1, *,
                     layout="NCHW", activation="identity", activation_params=None, out_dtype=None, out=None,
                     n_threads=None):
    """Transposed 2-D convolution with PyTorch's ``conv_transpose2d`` arguments, BF16 inputs, FP32 sums.

    ``out = act(bias + conv_transpose(bf16(x), bf16(weight)))``; see `Deconvolution16b`.

    Parameters
    ----------
    x : array_like
        NCHW [N, C_in, H, W] (or [C_in, H, W]); with ``layout="NHWC"`` [N, H, W, C_in] (or [H, W, C_in]).
        float32 or bfloat16 (ml_dtypes, or uint16 raw bits); other real dtypes become float32.
    weight : array_like
        NCHW: [C_in, C_out/groups, kH, kW] (PyTorch's); NHWC: [C_in, kH, kW, C_out/groups].
    bias : array_like of C_out, optional
    stride, dilation : int or (sH, sW)
    padding : int, (pH, pW) or (top, left, bottom, right)
        Rows/columns removed from each border of the full output.
    output_padding : int or (oH, oW)
        Rows/columns added at the bottom/right, each < max(stride, dilation) of its axis.
    groups : int
    layout : {"NCHW", "NHWC"}
    activation : Activation or name; activation_params : its parameters (SPEC §2 defaults when None).
    out_dtype : float32 or bfloat16, optional
        Default: out's dtype if given, else bfloat16 for a bfloat16 x, else float32.
    out : ndarray, optional
        C-contiguous, the output shape; float32, ml_dtypes.bfloat16 or uint16 (raw bits).
    n_threads : int, optional

    Returns
    -------
    ndarray
        ``H_out = (H − 1)·sH − top − bottom + dH·(kH − 1) + oH + 1`` (likewise W).
    """
    fmt = as_format(layout, "layout")
    nhwc = fmt == TensorFormat.NHWC
    x, x_dtype = _as_operand(x, "x")
    w = np.asarray(weight)
    if w.dtype.kind not in "biuf" and w.dtype != BFLOAT16:
        raise ValueError(f"weight: expected real numbers, got dtype {w.dtype}")
    unbatched = x.ndim == 3
    if x.ndim not in (3, 4):
        raise ValueError(f"x: expected a 4-D {'[N, H, W, C]' if nhwc else '[N, C, H, W]'} array (or 3-D unbatched), "
                         f"got shape {x.shape}")
    if unbatched:
        x = x[None]
    if w.ndim != 4:
        raise ValueError(f"weight: expected a 4-D {'[C_in, kH, kW, C_out/groups]' if nhwc else '[C_in, C_out/groups, kH, kW]'} "
                         f"array, got shape {w.shape}")
    if nhwc:
        n, h, wd, c_in = x.shape
        w_in, ky, kx, cg_out = w.shape
    else:
        n, c_in, h, wd = x.shape
        w_in, cg_out, ky, kx = w.shape
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise ValueError(f"groups: expected an int >= 1, got {groups!r}")
    if w_in != c_in:
        raise ValueError(f"weight: expected {c_in} input channels (x's) in dimension 0, got shape {w.shape}")
    if c_in % groups:
        raise ValueError(f"groups: expected a divisor of the {c_in} input channels, got {groups}")
    if min(n, c_in, h, wd, cg_out, ky, kx) < 1:
        raise ValueError(f"x, weight: expected non-empty arrays, got shapes {x.shape}, {w.shape}")
    sy, sx = _pair(stride, "stride")
    dy, dx = _pair(dilation, "dilation")
    top, left, bottom, right = _pads(padding, "padding")
    oy, ox = _pair(output_padding, "output_padding", 0)
    if oy >= max(sy, dy) or ox >= max(sx, dx):
        raise ValueError(f"output_padding: expected values < max(stride, dilation) = "
                         f"({max(sy, dy)}, {max(sx, dx)}), got ({oy}, {ox})")
    dst_c = cg_out * groups
    act = as_activation(activation)
    if out is not None:
        out = require_array(out, "out")
    if out_dtype is None:
        if out is not None and out.dtype in (_FLOAT32, BFLOAT16, UINT16):
            dst_type = DataType.FLOAT32 if out.dtype == _FLOAT32 else DataType.BFLOAT16
        else:
            dst_type = DataType.BFLOAT16 if x_dtype in (BFLOAT16, UINT16) else DataType.FLOAT32
    else:
        dst_type = as_data_type(out_dtype, "out_dtype")
        if dst_type not in (DataType.FLOAT32, DataType.BFLOAT16):
            raise ValueError(f"out_dtype: expected float32 or bfloat16, got {dst_type.name}")
    src_type = DataType.BFLOAT16 if x.dtype == BFLOAT16 else DataType.FLOAT32
    dst_h = deconvolution_size(h, ky, sy, dy, top, bottom - oy)
    dst_w = deconvolution_size(wd, kx, sx, dx, left, right - ox)
    if dst_h <= 0 or dst_w <= 0:
        raise ValueError(f"padding: {(top, left, bottom, right)} leaves an output of {dst_h}x{dst_w}; expected >= 1x1")
    conv = ConvParams(c_in, h, wd, src_type, fmt, dst_c, dst_h, dst_w, dst_type, fmt, ky, kx, dy, dx, sy, sx,
                      top, left, bottom - oy, right - ox, int(groups), act)
    shape = (n, dst_h, dst_w, dst_c) if nhwc else (n, dst_c, dst_h, dst_w)
    if unbatched:
        shape = shape[1:]
    if out is not None:
        allowed = (_FLOAT32,) if dst_type == DataType.FLOAT32 else (BFLOAT16, UINT16)
        out = check_out(out, shape, allowed, {"x": x})
    context = Deconvolution16b()
    context.init(n, conv)
    context.set_params(w.astype(np.float32, copy=False) if w.dtype != _FLOAT32 else w, bias, activation_params)
    result = context.forward(np.ascontiguousarray(x), None,
                             out if out is not None else np.empty(shape, dtype_of(dst_type)),
                             n_threads=n_threads)
    return result

