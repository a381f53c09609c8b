"""QuantizedAdd: element-wise add of UINT8/FLOAT32 tensors with dequantisation, activation and
requantisation, with NumPy broadcasting.

    a' = (a - a_zero) * a_scale   (UINT8 a; a FLOAT32 a is used as is), b' likewise
    value = Activate(a' + b')
    dst = clamp(round_half_even(value / dst_scale) + dst_zero, 0, 255)   (UINT8 dst)
    dst = value                                                          (FLOAT32 dst)

Three kernels, chosen once in `init`:

* generic (every type combination and activation): a' + b' in float64, where the u8 products
  are exact, rounded once to float32 (or in float32 with split scales, when `init` bounds the
  error below what the output needs); the activation of ``activations.pxd`` on a float32
  block; the u8 output quantised in float32 with an exact clamp (NaN -> 0, +-inf and huge
  values saturate) before rounding half to even.
* folded (u8 + u8 -> u8, IDENTITY or RELU): ``q = fma(a, ka, fma(b, kb, kc))`` in float32 with
  ``ka = a_scale/dst_scale`` etc., clamped to [lo, 255] (lo = dst_zero for RELU) and rounded;
  used only when its worst-case error, bounded in `init`, is below 2.5e-4 output steps, so it
  is exact away from rounding ties. AVX-512BW intrinsics (64 outputs per step) where the
  build has them, the same arithmetic as a portable auto-vectorised loop otherwise.
* lookup (u8 + u8 -> u8, any activation but PRELU, large tensors): a 256 x 256 table built
  in `init` by the generic kernel, so it gives the generic kernel's bits (AVX-512 gathers).

Broadcasting: the output is walked as rows of `inner` contiguous elements in which each
operand is either contiguous or one repeated value; a row's operand offsets come from the
outer dimensions' strides (0 where an operand is broadcast). Equal shapes are one row,
a scalar or per-channel [1, C, 1, 1] operand gives rows of H*W with a constant operand.
"""

cimport cython
cimport numpy as cnp
from cython.parallel cimport prange
from libc.math cimport fmaf, rintf
from libc.stdint cimport uint8_t

import math
import numbers
import threading

import numpy as np

from synet.activations cimport ACT_COUNT, activate_block
from synet.status cimport SynetStatus, SYNET_OK, SYNET_VALUE_ERROR, SYNET_NOT_READY

from ._activations import activation_params as activation_params_of
from ._arrays import check_buffer, require_array
from ._kernels import resolve_num_threads
from ._types import Activation, DataType, as_activation, as_data_type

cnp.import_array()

cdef extern from *:
    """
    /* The folded u8 + u8 -> u8 kernel in AVX-512BW, 64 outputs per iteration:
       q = fma(a, ka, fma(b, kb, kc)) in float32 (16 lanes x 4), rounded half to even by
       vcvtps2dq (the default MXCSR mode), saturated to [0, 255] by the signed 32 -> 16 and
       unsigned 16 -> 8 packs, then max(q, lo). The folded path is only chosen when
       |q| < 2**22, so the conversion is exact; the result equals the portable loop's
       rintf(clamp(q, lo, 255)). The tail runs the same code on masked loads and stores. */
    #if defined(__AVX512F__) && defined(__AVX512BW__)
    /* GCC tunes -march=native on recent Intel cores for 256-bit vectors; these loops are
       short-latency streaming loops that run faster on full 512-bit vectors. */
    #if defined(__GNUC__) && !defined(__clang__)
    #pragma GCC target("prefer-vector-width=512")
    #endif
    #include <immintrin.h>
    #define SYNET_QADD_AVX512 1
    #define SYNET_QADD_ALWAYS_INLINE static inline __attribute__((always_inline))

    SYNET_QADD_ALWAYS_INLINE __m512 synet_qadd_u8x16(__m128i x) {
        return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(x));
    }

    /* mode 0: both operands contiguous; 1: a is one value (ca); 2: b is one value (cb = fma(b, kb, kc)) */
    SYNET_QADD_ALWAYS_INLINE __m512i synet_qadd_folded64(
            const __m128i* a, const __m128i* b, const int mode, __m512 ka, __m512 kb, __m512 kc,
            __m512 ca, __m512 cb, __m512i lo, __m512i order) {
        __m512i d[4];
        for (int k = 0; k < 4; ++k) {
            __m512 q;
            if (mode == 2)
                q = _mm512_fmadd_ps(synet_qadd_u8x16(a[k]), ka, cb);
            else if (mode == 1)
                q = _mm512_fmadd_ps(ca, ka, _mm512_fmadd_ps(synet_qadd_u8x16(b[k]), kb, kc));
            else
                q = _mm512_fmadd_ps(synet_qadd_u8x16(a[k]), ka, _mm512_fmadd_ps(synet_qadd_u8x16(b[k]), kb, kc));
            d[k] = _mm512_cvtps_epi32(q);
        }
        __m512i bytes = _mm512_packus_epi16(_mm512_packs_epi32(d[0], d[1]), _mm512_packs_epi32(d[2], d[3]));
        return _mm512_max_epu8(_mm512_permutexvar_epi32(order, bytes), lo);
    }

    /* Up to 64 outputs on masked loads and a masked store (row heads and tails). */
    SYNET_QADD_ALWAYS_INLINE void synet_qadd_folded_masked(
            const uint8_t* a, const uint8_t* b, uint8_t* dst, Py_ssize_t count, const int mode,
            __m512 ka, __m512 kb, __m512 kc, __m512 ca, __m512 cb, __m512i lo, __m512i order) {
        __m128i va[4], vb[4];
        __mmask64 mask = _bzhi_u64(~0ULL, (unsigned)count);
        __m512i ta = mode != 1 ? _mm512_maskz_loadu_epi8(mask, a) : _mm512_setzero_si512();
        __m512i tb = mode != 2 ? _mm512_maskz_loadu_epi8(mask, b) : _mm512_setzero_si512();
        va[0] = _mm512_castsi512_si128(ta); vb[0] = _mm512_castsi512_si128(tb);
        va[1] = _mm512_extracti32x4_epi32(ta, 1); vb[1] = _mm512_extracti32x4_epi32(tb, 1);
        va[2] = _mm512_extracti32x4_epi32(ta, 2); vb[2] = _mm512_extracti32x4_epi32(tb, 2);
        va[3] = _mm512_extracti32x4_epi32(ta, 3); vb[3] = _mm512_extracti32x4_epi32(tb, 3);
        _mm512_mask_storeu_epi8((void*)dst, mask, synet_qadd_folded64(va, vb, mode, ka, kb, kc, ca, cb, lo, order));
    }

    /* stream: write dst with non-temporal stores (outputs much larger than the caches), after
       a masked head that aligns dst to 64 bytes; an sfence orders them before returning. */
    SYNET_QADD_ALWAYS_INLINE void synet_qadd_folded_loop(
            const uint8_t* a, const uint8_t* b, uint8_t* dst, Py_ssize_t n, const int mode,
            float ka, float kb, float kc, uint8_t lo, const int stream) {
        const __m512 vka = _mm512_set1_ps(ka), vkb = _mm512_set1_ps(kb), vkc = _mm512_set1_ps(kc);
        const __m512 ca = _mm512_set1_ps(mode == 1 ? (float)a[0] : 0.0f);
        const __m512 cb = _mm512_set1_ps(mode == 2 ? fmaf((float)b[0], kb, kc) : 0.0f);
        const __m512i vlo = _mm512_set1_epi8((char)lo);
        const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
        Py_ssize_t i = 0;
        __m128i va[4], vb[4];
        if (stream) {
            i = (Py_ssize_t)((64 - ((uintptr_t)dst & 63)) & 63);
            i = i < n ? i : n;
            if (i)
                synet_qadd_folded_masked(a, b, dst, i, mode, vka, vkb, vkc, ca, cb, vlo, order);
        }
        for (; i + 64 <= n; i += 64) {
            for (int k = 0; k < 4; ++k) {
                if (mode != 1) va[k] = _mm_loadu_si128((const __m128i*)(a + i + 16 * k));
                if (mode != 2) vb[k] = _mm_loadu_si128((const __m128i*)(b + i + 16 * k));
            }
            __m512i r = synet_qadd_folded64(va, vb, mode, vka, vkb, vkc, ca, cb, vlo, order);
            if (stream)
                _mm512_stream_si512((__m512i*)(dst + i), r);
            else
                _mm512_storeu_si512((void*)(dst + i), r);
        }
        if (i < n)
            synet_qadd_folded_masked(mode == 1 ? a : a + i, mode == 2 ? b : b + i, dst + i, n - i, mode,
                                     vka, vkb, vkc, ca, cb, vlo, order);
        if (stream)
            _mm_sfence();
    }

    static void synet_qadd_folded_avx512(const uint8_t* a, const uint8_t* b, uint8_t* dst, Py_ssize_t n,
                                         int mode, float ka, float kb, float kc, uint8_t lo, int stream) {
        if (stream) {
            if (mode == 1) synet_qadd_folded_loop(a, b, dst, n, 1, ka, kb, kc, lo, 1);
            else if (mode == 2) synet_qadd_folded_loop(a, b, dst, n, 2, ka, kb, kc, lo, 1);
            else synet_qadd_folded_loop(a, b, dst, n, 0, ka, kb, kc, lo, 1);
        } else {
            if (mode == 1) synet_qadd_folded_loop(a, b, dst, n, 1, ka, kb, kc, lo, 0);
            else if (mode == 2) synet_qadd_folded_loop(a, b, dst, n, 2, ka, kb, kc, lo, 0);
            else synet_qadd_folded_loop(a, b, dst, n, 0, ka, kb, kc, lo, 0);
        }
    }

    /* The u8 + u8 -> u8 lookup kernel: dst = lut[a * 256 + b] by 16-lane dword gathers (the
       table is padded by 3 bytes so every 4-byte read stays inside it), keeping the low byte. */
    SYNET_QADD_ALWAYS_INLINE __m512i synet_qadd_lut_index(__m128i a, __m128i b, const int mode,
                                                          __m512i ca, __m512i cb) {
        __m512i ia = mode == 1 ? ca : _mm512_slli_epi32(_mm512_cvtepu8_epi32(a), 8);
        __m512i ib = mode == 2 ? cb : _mm512_cvtepu8_epi32(b);
        return _mm512_or_si512(ia, ib);
    }

    SYNET_QADD_ALWAYS_INLINE void synet_qadd_lut_loop(const uint8_t* a, const uint8_t* b, uint8_t* dst,
                                                      Py_ssize_t n, const int mode, const uint8_t* lut) {
        const __m512i ca = _mm512_set1_epi32(mode == 1 ? (int)a[0] << 8 : 0);
        const __m512i cb = _mm512_set1_epi32(mode == 2 ? (int)b[0] : 0);
        const __m128i zero = _mm_setzero_si128();
        Py_ssize_t i = 0;
        for (; i + 16 <= n; i += 16) {
            __m128i va = mode != 1 ? _mm_loadu_si128((const __m128i*)(a + i)) : zero;
            __m128i vb = mode != 2 ? _mm_loadu_si128((const __m128i*)(b + i)) : zero;
            __m512i g = _mm512_i32gather_epi32(synet_qadd_lut_index(va, vb, mode, ca, cb), (const void*)lut, 1);
            _mm_storeu_si128((__m128i*)(dst + i), _mm512_cvtepi32_epi8(g));
        }
        if (i < n) {
            __mmask16 mask = (__mmask16)_bzhi_u32(0xFFFFu, (unsigned)(n - i));
            __m128i va = mode != 1 ? _mm_maskz_loadu_epi8(mask, a + i) : zero;
            __m128i vb = mode != 2 ? _mm_maskz_loadu_epi8(mask, b + i) : zero;
            __m512i g = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), mask,
                                                    synet_qadd_lut_index(va, vb, mode, ca, cb), (const void*)lut, 1);
            _mm_mask_storeu_epi8((void*)(dst + i), mask, _mm512_cvtepi32_epi8(g));
        }
    }

    static void synet_qadd_lut_avx512(const uint8_t* a, const uint8_t* b, uint8_t* dst, Py_ssize_t n,
                                      int mode, const uint8_t* lut) {
        if (mode == 1) synet_qadd_lut_loop(a, b, dst, n, 1, lut);
        else if (mode == 2) synet_qadd_lut_loop(a, b, dst, n, 2, lut);
        else synet_qadd_lut_loop(a, b, dst, n, 0, lut);
    }
    #else
    #define SYNET_QADD_AVX512 0
    static void synet_qadd_folded_avx512(const uint8_t* a, const uint8_t* b, uint8_t* dst, Py_ssize_t n,
                                         int mode, float ka, float kb, float kc, uint8_t lo, int stream) {}
    static void synet_qadd_lut_avx512(const uint8_t* a, const uint8_t* b, uint8_t* dst, Py_ssize_t n,
                                      int mode, const uint8_t* lut) {}
    #endif
    """
    const bint SYNET_QADD_AVX512
    void synet_qadd_folded_avx512(const uint8_t* a, const uint8_t* b, uint8_t* dst, Py_ssize_t n,
                                  int mode, float ka, float kb, float kc, uint8_t lo, int stream) noexcept nogil
    void synet_qadd_lut_avx512(const uint8_t* a, const uint8_t* b, uint8_t* dst, Py_ssize_t n,
                               int mode, const uint8_t* lut) noexcept nogil

ctypedef fused a_t:
    uint8_t
    float

ctypedef fused b_t:
    uint8_t
    float

ctypedef fused out_t:
    uint8_t
    float

ctypedef fused src_t:
    uint8_t
    float

ctypedef fused acc_t:  # precision of a' + b'
    float
    double

cdef enum:
    TILE = 1 << 14          # output elements per parallel task
    BLOCK = 512             # float32 scratch of the generic kernel, per row segment
    PARALLEL_MIN = 1 << 17  # output elements below which a call runs on one thread
    LUT_MIN = 1 << 17       # output elements from which u8+u8->u8 uses a lookup table
    STREAM_MIN = 1 << 22    # u8 output elements from which the folded kernel streams its stores
    MODE_GENERIC = 0
    MODE_FOLDED = 1
    MODE_LUT = 2
    SYNET_FLOAT32 = 0       # DataType values of the plan's a_type, b_type, dst_type
    SYNET_UINT8 = 3

# Largest worst-case error (in output steps) of the folded float32 kernel: it is then exact
# wherever the exact value lies more than 1e-3 from a rounding tie.
FOLDED_MAX_ERROR = 2.5e-4

# ---------------------------------------------------------------------------------------------
# Kernels (noexcept nogil; fused over the a, b and dst element types)


cdef inline acc_t _deq(src_t x, acc_t scale, acc_t offset, int zero) noexcept nogil:
    """A dequantised operand. u8 in float64: x * scale + offset (an exact product, one rounding);
    u8 in float32: d = float(x - zero) (exact), d * scale with the scale split in float32 halves
    (scale = high + low): fma(d, high, d * low), within ~2**-24 |x'| of the exact product;
    float32: x."""
    cdef float d
    if src_t is uint8_t:
        if acc_t is float:
            d = <float>(<int>x - zero)
            return fmaf(d, scale, d * offset)
        else:
            return <double>x * scale + offset
    else:
        return <acc_t>x


cdef inline float _clamp_round(float q, float lo) noexcept nogil:
    """round_half_even(clamp(q, lo, 255)); NaN -> lo (the comparisons send it there)."""
    q = q if q > lo else lo
    q = q if q < 255 else 255
    return rintf(q)


cdef inline void _values(const a_t* a, const b_t* b, float* v, Py_ssize_t n, acc_t sa, acc_t oa,
                        acc_t sb, acc_t ob, const QuantizedAddPlan* p) noexcept nogil:
    """v[i] = float32(a'[i] + b'[i]), the sum in acc_t; a scalar operand is dequantised once."""
    cdef Py_ssize_t i
    cdef int za = p.a_zero, zb = p.b_zero
    cdef acc_t c
    if p.a_scalar:
        c = _deq(a[0], sa, oa, za)
        for i in range(n):
            v[i] = <float>(c + _deq(b[i], sb, ob, zb))
    elif p.b_scalar:
        c = _deq(b[0], sb, ob, zb)
        for i in range(n):
            v[i] = <float>(_deq(a[i], sa, oa, za) + c)
    else:
        for i in range(n):
            v[i] = <float>(_deq(a[i], sa, oa, za) + _deq(b[i], sb, ob, zb))


cdef inline void _quantize(const float* v, uint8_t* dst, Py_ssize_t n, const QuantizedAddPlan* p) noexcept nogil:
    """dst = clamp(round_half_even(v / dst_scale) + dst_zero, 0, 255), NaN -> 0."""
    cdef Py_ssize_t i
    cdef float pre = p.q_pre, inv = p.q_inv, zero = p.q_zero
    for i in range(n):
        dst[i] = <uint8_t>_clamp_round(fmaf(v[i] * pre, inv, zero), 0.0)


cdef inline void _folded_row(const uint8_t* a, const uint8_t* b, uint8_t* dst, Py_ssize_t n,
                             const QuantizedAddPlan* p) noexcept nogil:
    """u8 + u8 -> u8, IDENTITY / RELU: q = fma(a, ka, fma(b, kb, kc)), clamp [lo, 255], round."""
    cdef Py_ssize_t i
    cdef float ka = p.ka, kb = p.kb, kc = p.kc, lo = p.lo, c
    if SYNET_QADD_AVX512:
        synet_qadd_folded_avx512(a, b, dst, n, 1 if p.a_scalar else (2 if p.b_scalar else 0),
                                 ka, kb, kc, <uint8_t>lo, p.size >= STREAM_MIN)
        return
    if p.a_scalar:
        c = <float>a[0]
        for i in range(n):
            dst[i] = <uint8_t>_clamp_round(fmaf(c, ka, fmaf(<float>b[i], kb, kc)), lo)
    elif p.b_scalar:
        c = fmaf(<float>b[0], kb, kc)
        for i in range(n):
            dst[i] = <uint8_t>_clamp_round(fmaf(<float>a[i], ka, c), lo)
    else:
        for i in range(n):
            dst[i] = <uint8_t>_clamp_round(fmaf(<float>a[i], ka, fmaf(<float>b[i], kb, kc)), lo)


cdef inline void _lut_row(const uint8_t* a, const uint8_t* b, uint8_t* dst, Py_ssize_t n,
                          const QuantizedAddPlan* p) noexcept nogil:
    """u8 + u8 -> u8 by table: dst = lut[a * 256 + b]."""
    cdef Py_ssize_t i
    cdef const uint8_t* t
    if SYNET_QADD_AVX512:
        synet_qadd_lut_avx512(a, b, dst, n, 1 if p.a_scalar else (2 if p.b_scalar else 0), p.lut)
        return
    if p.a_scalar:
        t = p.lut + (<Py_ssize_t>a[0] << 8)
        for i in range(n):
            dst[i] = t[b[i]]
    elif p.b_scalar:
        t = p.lut + b[0]
        for i in range(n):
            dst[i] = t[<Py_ssize_t>a[i] << 8]
    else:
        for i in range(n):
            dst[i] = p.lut[(<Py_ssize_t>a[i] << 8) | b[i]]


cdef inline void _row(const a_t* a, const b_t* b, out_t* dst, Py_ssize_t n, Py_ssize_t first,
                      const QuantizedAddPlan* p) noexcept nogil:
    """n outputs from flat index `first`; a / b point at the row's first operand element."""
    cdef float buf[BLOCK]
    cdef float* v
    cdef Py_ssize_t off, m
    if a_t is uint8_t and b_t is uint8_t and out_t is uint8_t:
        if p.mode == MODE_FOLDED:
            _folded_row(a, b, dst, n, p)
            return
        if p.mode == MODE_LUT:
            _lut_row(a, b, dst, n, p)
            return
    cdef Py_ssize_t blocks = (n + BLOCK - 1) // BLOCK, block
    for block in range(blocks):
        off = block * BLOCK
        m = min(<Py_ssize_t>BLOCK, n - off)
        if out_t is float:
            v = <float*>(dst + off)  # a float32 output is its own scratch
        else:
            v = buf
        if p.float_values:
            _values(a if p.a_scalar else a + off, b if p.b_scalar else b + off, v, m,
                    p.fa_scale, p.fa_scale_low, p.fb_scale, p.fb_scale_low, p)
        else:
            _values(a if p.a_scalar else a + off, b if p.b_scalar else b + off, v, m,
                    p.a_scale, p.a_offset, p.b_scale, p.b_offset, p)
        activate_block(v, m, p.act, p.act_params, first + off, p.prelu_inner, p.prelu_channels)
        if out_t is uint8_t:
            _quantize(v, <uint8_t*>(dst + off), m, p)


cdef inline void _tile(const a_t* a, const b_t* b, out_t* dst, Py_ssize_t start, Py_ssize_t stop,
                       const QuantizedAddPlan* p) noexcept nogil:
    """Outputs start..stop (flat), row segment by row segment."""
    cdef Py_ssize_t pos = start, row, col, count, ao, bo, r, k, d
    while pos < stop:
        row = pos // p.inner
        col = pos - row * p.inner
        count = min(p.inner - col, stop - pos)
        ao = 0 if p.a_scalar else col
        bo = 0 if p.b_scalar else col
        r = row
        for d in range(p.rank - 1, -1, -1):
            k = r % p.outer_shape[d]
            r = r // p.outer_shape[d]
            ao += k * p.a_strides[d]
            bo += k * p.b_strides[d]
        _row(a + ao, b + bo, dst + pos, count, pos, p)
        pos += count


cdef void qadd_kernel(const a_t* a, const b_t* b, out_t* dst, const QuantizedAddPlan* p, int threads) noexcept nogil:
    """The whole output, in tiles of TILE elements: parallel over outputs (no element is written
    by two threads; the tiling does not depend on the thread count, nor do the results)."""
    cdef Py_ssize_t tiles = (p.size + TILE - 1) // TILE, t
    for t in prange(tiles, schedule="static", num_threads=threads,
                    use_threads_if=p.size >= PARALLEL_MIN):
        _tile(a, b, dst, t * TILE, min(p.size, (t + 1) * TILE), p)


cdef SynetStatus quantized_add_run(const QuantizedAddPlan* plan, const void* a, const void* b, void* dst,
                                   int n_threads) noexcept nogil:
    """Run a plan (see _quantized_add.pxd); the one entry point of the Python and C APIs."""
    cdef int code
    if plan == NULL:
        return SYNET_VALUE_ERROR
    if plan.size <= 0:
        return SYNET_OK if plan.size == 0 else SYNET_VALUE_ERROR
    if a == NULL or b == NULL or dst == NULL or plan.act_params == NULL or plan.inner <= 0 or \
            plan.rank < 0 or (plan.rank > 0 and (plan.outer_shape == NULL or plan.a_strides == NULL or
                                                 plan.b_strides == NULL)):
        return SYNET_VALUE_ERROR
    if plan.a_type not in (SYNET_FLOAT32, SYNET_UINT8) or plan.b_type not in (SYNET_FLOAT32, SYNET_UINT8) or \
            plan.dst_type not in (SYNET_FLOAT32, SYNET_UINT8) or plan.act < 0 or plan.act >= ACT_COUNT:
        return SYNET_VALUE_ERROR
    if plan.mode != MODE_GENERIC and (plan.a_type != SYNET_UINT8 or plan.b_type != SYNET_UINT8 or
                                      plan.dst_type != SYNET_UINT8):
        return SYNET_VALUE_ERROR
    if plan.mode == MODE_LUT and plan.lut == NULL:
        return SYNET_NOT_READY
    if plan.mode < MODE_GENERIC or plan.mode > MODE_LUT:
        return SYNET_VALUE_ERROR
    code = 4 * (plan.a_type == SYNET_FLOAT32) + 2 * (plan.b_type == SYNET_FLOAT32) + (plan.dst_type == SYNET_FLOAT32)
    _dispatch(code, a, b, dst, plan, max(n_threads, 1))
    return SYNET_OK


cdef void _dispatch(int code, const void* a, const void* b, void* dst, const QuantizedAddPlan* p,
                    int threads) noexcept nogil:
    """code = 4 * (a is float32) + 2 * (b is float32) + (dst is float32)."""
    if code == 0:
        qadd_kernel(<const uint8_t*>a, <const uint8_t*>b, <uint8_t*>dst, p, threads)
    elif code == 1:
        qadd_kernel(<const uint8_t*>a, <const uint8_t*>b, <float*>dst, p, threads)
    elif code == 2:
        qadd_kernel(<const uint8_t*>a, <const float*>b, <uint8_t*>dst, p, threads)
    elif code == 3:
        qadd_kernel(<const uint8_t*>a, <const float*>b, <float*>dst, p, threads)
    elif code == 4:
        qadd_kernel(<const float*>a, <const uint8_t*>b, <uint8_t*>dst, p, threads)
    elif code == 5:
        qadd_kernel(<const float*>a, <const uint8_t*>b, <float*>dst, p, threads)
    elif code == 6:
        qadd_kernel(<const float*>a, <const float*>b, <uint8_t*>dst, p, threads)
    else:
        qadd_kernel(<const float*>a, <const float*>b, <float*>dst, p, threads)


# ---------------------------------------------------------------------------------------------
# Argument checks (Python-land, before any kernel starts)

_IO_DTYPES = {DataType.FLOAT32: np.dtype(np.float32), DataType.UINT8: np.dtype(np.uint8)}
_MAX_SIZE = 2**62


def _io_type(value, str name):
    data_type = as_data_type(value, name)
    if data_type not in _IO_DTYPES:
        raise ValueError(f"{name}: expected FLOAT32 or UINT8, got {data_type.name}")
    return data_type


def _shape(value, str name):
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = (value,)
    try:
        dims = tuple(value)
    except TypeError:
        raise TypeError(f"{name}: expected a sequence of ints, got {value!r}") from None
    for dim in dims:
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
            raise TypeError(f"{name}: expected a sequence of ints, got {value!r}")
        if dim < 0:
            raise ValueError(f"{name}: expected dimensions >= 0, got {dims}")
    if len(dims) > 64:
        raise ValueError(f"{name}: expected at most 64 dimensions, got {len(dims)}")
    size = math.prod(int(d) for d in dims)
    if size >= _MAX_SIZE:
        raise ValueError(f"{name}: {dims} holds {size} elements, too many for 64-bit sizes")
    return tuple(int(d) for d in dims)


def _scale(value, str name):
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
        scale = float(value)
        if math.isfinite(scale) and scale > 0:
            return scale
    raise ValueError(f"{name}: expected a finite number > 0, got {value!r}")


def _zero(value, str name):
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and 0 <= value <= 255:
        return int(value)
    raise ValueError(f"{name}: expected an int in [0, 255], got {value!r}")


@cython.wraparound(True)
def _geometry(tuple a_shape, tuple b_shape, tuple out_shape):
    """(inner, a_scalar, b_scalar, outer) for the broadcast walk; outer = [shape, a_strides, b_strides].

    Dimensions of size 1 in the output are dropped, adjacent dimensions along which both
    operands stay contiguous (or both stay broadcast) are merged; the innermost merged
    dimension is the row.
    """
    rank = len(out_shape)
    a_full = (1,) * (rank - len(a_shape)) + a_shape
    b_full = (1,) * (rank - len(b_shape)) + b_shape

    def strides(shape):
        result, step = [], 1
        for dim in reversed(shape):
            result.append(0 if dim == 1 else step)
            step *= dim
        return result[::-1]

    sa, sb = strides(a_full), strides(b_full)
    dims = [(n, sa[d], sb[d]) for d, n in enumerate(out_shape) if n != 1]
    merged = []  # innermost first
    for n, da, db in reversed(dims):
        if merged:
            m, ta, tb = merged[-1]
            if da == ta * m and db == tb * m:
                merged[-1] = (n * m, ta, tb)
                continue
        merged.append((n, da, db))
    if not merged:
        return 1, False, False, np.zeros((3, 1), dtype=np.intp), 0
    inner, ta, tb = merged[0]
    outer = merged[:0:-1]  # outermost first
    table = np.zeros((3, max(len(outer), 1)), dtype=np.intp)
    for d, (n, da, db) in enumerate(outer):
        table[:, d] = (n, da, db)
    return inner, ta == 0, tb == 0, table, len(outer)


def _folded_constants(double sa, int za, double sb, int zb, double ds, int dz):
    """(ka, kb, kc) of the folded float32 kernel, or None when its error bound is too large."""
    ka, kb = sa / ds, sb / ds
    kc = dz - za * ka - zb * kb
    if not (ka < 1e30 and kb < 1e30 and abs(kc) < 1e30):
        return None
    # |fl(a*fka + fl(b*fkb + fkc)) - (a*ka + b*kb + kc)| for a, b <= 255 and the |q| <= 256
    # that matter: rounding of ka, kb, kc, of the inner and of the outer fma (u = 2**-24)
    bound = (2 * 255 * ka + 2 * 255 * kb + 2 * abs(kc) + 256) * 2.0**-24 * 1.01
    return (ka, kb, kc) if bound <= FOLDED_MAX_ERROR else None


def _float_values_ok(a_type, double sa, int za, b_type, double sb, int zb, act, params, dst_type, double ds):
    """Whether a' + b' may be computed in float32: its worst-case error stays below
    FOLDED_MAX_ERROR output steps for a u8 output (exact away from ties), below 5e-7 for a
    float32 output (1e-6 relative, with room for the final roundings).

    Each u8 operand's float32 product is within 2**-24 |x'| (+ a negligible low-half term) of
    the exact one and the float32 operand is exact; the sum, the activation (slope <= 1 here)
    and the quantisation add a few roundings relative to the result.
    """
    if act not in (Activation.IDENTITY, Activation.RELU, Activation.RESTRICT_RANGE):
        if dst_type != DataType.UINT8 or act not in (Activation.LEAKY_RELU, Activation.PRELU) or \
                np.abs(params).max() > 1:
            return False
    spread = 0.0
    for data_type, scale, zero in ((a_type, sa, za), (b_type, sb, zb)):
        if data_type == DataType.UINT8:
            if not 1e-30 < scale < 1e30:
                return False
            spread += max(zero, 255 - zero) * scale
    error = spread * 2.0**-24 * 1.01
    if dst_type == DataType.UINT8:
        return error / ds + 4 * 256 * 2.0**-24 <= FOLDED_MAX_ERROR
    return error <= 5e-7


cdef inline void* _data(object array):
    return cnp.PyArray_DATA(<cnp.ndarray>array)


cdef _check_alias(dst, operand, str name):
    """dst may be `operand` itself (in-place: same data, dtype and size), never a partial overlap."""
    if np.may_share_memory(dst, operand):
        if not (_data(dst) == _data(operand) and dst.dtype == operand.dtype and dst.size == operand.size):
            raise ValueError(f"dst: overlaps {name} without being {name} itself (in-place needs the "
                             f"same data, dtype {dst.dtype} and {dst.size} elements; got {name} "
                             f"with dtype {operand.dtype} and {operand.size} elements)")


# ---------------------------------------------------------------------------------------------
# The context


@cython.final
cdef class QuantizedAdd:
    """Context of Simd's SynetQuantizedAdd, extended to broadcasting and every activation.

    ``value = Activate((a - a_zero)*a_scale + (b - b_zero)*b_scale)`` (a FLOAT32 operand is used
    as is); UINT8 output ``clamp(round_half_even(value / dst_scale) + dst_zero, 0, 255)``,
    FLOAT32 output ``value``. The constructor takes `init`'s keywords and calls it when a shape
    or type is given.

    Examples
    --------
    >>> add = QuantizedAdd([64], "u8", 0.010, 47, [64], "u8", 0.020, 30, "identity", None,
    ...                    "u8", 0.015, 38)
    >>> add.forward(np.full(64, 50, np.uint8), np.full(64, 80, np.uint8))[:4]
    array([107, 107, 107, 107], dtype=uint8)
    """

    def __init__(self, a_shape=None, a_type=None, a_scale=1.0, a_zero=0, b_shape=None, b_type=None,
                 b_scale=1.0, b_zero=0, act_type=Activation.IDENTITY, act_params=None, dst_type=None,
                 dst_scale=1.0, dst_zero=0):
        self._key = None
        if a_shape is not None or a_type is not None or b_shape is not None or b_type is not None \
                or dst_type is not None:
            self.init(a_shape, a_type, a_scale, a_zero, b_shape, b_type, b_scale, b_zero, act_type,
                      act_params, dst_type, dst_scale, dst_zero)

    def init(self, a_shape, a_type, a_scale, a_zero, b_shape, b_type, b_scale, b_zero, act_type,
             act_params, dst_type, dst_scale, dst_zero):
        """(Re)initialise the context.

        Parameters
        ----------
        a_shape, b_shape : sequence of int
            The operands' shapes; they broadcast with NumPy's rules to the output shape.
        a_type, b_type, dst_type : DataType, name or dtype
            FLOAT32 or UINT8 each.
        a_scale, b_scale, dst_scale : float
            Quantisation scales (finite, > 0) of UINT8 tensors; ignored for FLOAT32 ones.
        a_zero, b_zero, dst_zero : int
            Zero points (ints in [0, 255]) of UINT8 tensors; ignored for FLOAT32 ones.
        act_type : Activation or name
            Applied to a' + b'.
        act_params : sequence of float, optional
            The activation's parameters (defaults when None; extra values ignored). PRELU:
            one slope per channel of the output's axis 1, or a single slope (required).

        Identical arguments keep the context; others rebuild it.

        Raises
        ------
        ValueError
            Shapes that do not broadcast, types other than FLOAT32 / UINT8, bad scales, zero
            points or activation parameters; the message names the parameter.
        """
        a_shape = _shape(a_shape, "a_shape")
        b_shape = _shape(b_shape, "b_shape")
        a_type = _io_type(a_type, "a_type")
        b_type = _io_type(b_type, "b_type")
        dst_type = _io_type(dst_type, "dst_type")
        try:
            out_shape = tuple(int(d) for d in np.broadcast_shapes(a_shape, b_shape))
        except ValueError:
            raise ValueError(f"b_shape: expected a shape that broadcasts with a_shape {a_shape} "
                             f"(NumPy rules), got {b_shape}") from None
        act = as_activation(act_type, "act_type")
        channels = out_shape[1] if len(out_shape) >= 2 else 1
        params = activation_params_of(act, act_params, channels, "act_params")
        u8 = DataType.UINT8
        sa, za = (_scale(a_scale, "a_scale"), _zero(a_zero, "a_zero")) if a_type == u8 else (1.0, 0)
        sb, zb = (_scale(b_scale, "b_scale"), _zero(b_zero, "b_zero")) if b_type == u8 else (1.0, 0)
        ds, dz = (_scale(dst_scale, "dst_scale"), _zero(dst_zero, "dst_zero")) if dst_type == u8 else (1.0, 0)
        key = (a_shape, a_type, sa, za, b_shape, b_type, sb, zb, act, params.tobytes(), dst_type, ds, dz)
        if key == self._key:
            return
        size = math.prod(out_shape)
        if size >= _MAX_SIZE:
            raise ValueError(f"b_shape: the broadcast shape {out_shape} has too many elements")

        cdef QuantizedAddPlan plan
        cdef Py_ssize_t width
        plan.a_scale, plan.a_offset = sa, -za * sa
        plan.a_zero, plan.b_zero = za, zb
        plan.float_values = _float_values_ok(a_type, sa, za, b_type, sb, zb, act, params, dst_type, ds)
        plan.fa_scale = sa if plan.float_values else 0
        plan.fa_scale_low = sa - plan.fa_scale if plan.float_values else 0
        plan.fb_scale = sb if plan.float_values else 0
        plan.fb_scale_low = sb - plan.fb_scale if plan.float_values else 0
        plan.b_scale, plan.b_offset = sb, -zb * sb
        inv = 1.0 / ds
        pre = 2.0**64 if inv > 2.0**100 else (2.0**-64 if inv < 2.0**-100 else 1.0)
        plan.q_pre, plan.q_inv, plan.q_zero = pre, inv / pre, dz
        plan.act = int(act)
        plan.act_params = <const float*>_data(params)
        if act == Activation.PRELU and params.size > 1:
            plan.prelu_channels = channels
            plan.prelu_inner = math.prod(out_shape[2:])
        else:
            plan.prelu_channels = plan.prelu_inner = 1
        plan.lut = NULL
        plan.a_type, plan.b_type, plan.dst_type = int(a_type), int(b_type), int(dst_type)
        inner, a_scalar, b_scalar, table, rank = _geometry(a_shape, b_shape, out_shape)
        plan.size, plan.inner, plan.rank = size, inner, rank
        plan.outer_shape = <const Py_ssize_t*>_data(table)
        width = table.shape[1]
        plan.a_strides = plan.outer_shape + width
        plan.b_strides = plan.outer_shape + 2 * width
        plan.a_scalar, plan.b_scalar = a_scalar, b_scalar
        plan.mode = MODE_GENERIC
        plan.ka = plan.kb = plan.kc = plan.lo = 0
        lut = None
        if a_type == u8 and b_type == u8 and dst_type == u8:
            folded = _folded_constants(sa, za, sb, zb, ds, dz) if act in (Activation.IDENTITY, Activation.RELU) \
                else None
            if folded is not None:
                plan.ka, plan.kb, plan.kc = folded
                plan.lo = dz if act == Activation.RELU else 0
                plan.mode = MODE_FOLDED
            elif act != Activation.PRELU and size >= LUT_MIN:
                lut = _build_lut(&plan)
                plan.lut = <const uint8_t*>_data(lut)
                plan.mode = MODE_LUT
        # publish in one step (no Python code runs in between), so a concurrent forward sees
        # either the old or the new context
        self._act_params, self._table, self._lut = params, table, lut
        self._plan = plan
        self._a_dtypes, self._b_dtypes, self._dst_dtypes = \
            (_IO_DTYPES[a_type],), (_IO_DTYPES[b_type],), (_IO_DTYPES[dst_type],)
        self._a_size, self._b_size = math.prod(a_shape), math.prod(b_shape)
        self._out_shape = out_shape
        self._key = key

    def enable(self):
        """True when `init` has built the context and `forward` may be called."""
        return self._key is not None

    @property
    def shape(self):
        """The output (broadcast) shape, or None before `init`."""
        return self._out_shape if self._key is not None else None

    @property
    def kernel(self):
        """Which kernel `init` chose: 'generic', 'folded' or 'lookup' (None before `init`)."""
        if self._key is None:
            return None
        return ("generic", "folded", "lookup")[self._plan.mode]

    def forward(self, a, b, dst=None, *, n_threads=None):
        """dst = Quantize(Activate(a' + b')), broadcast to the output shape.

        Parameters
        ----------
        a, b : ndarray
            C-contiguous, the context's dtype (uint8 / float32) and element count (any shape).
        dst : ndarray, optional
            C-contiguous, writeable, the output dtype and element count; may be `a` or `b`
            itself (in-place) when dtype and size match. Allocated with the broadcast shape
            when None.
        n_threads : int, optional
            Threads for this call (default ``synet.get_num_threads()``).

        Returns
        -------
        dst
        """
        if self._key is None:
            raise RuntimeError("QuantizedAdd: call init() before forward()")
        # one snapshot of the context (a concurrent init cannot pull the arrays away)
        cdef QuantizedAddPlan plan = self._plan
        keep = (self._act_params, self._table, self._lut)
        cdef SynetStatus status
        dst_dtypes = self._dst_dtypes
        cdef int threads = resolve_num_threads(n_threads)
        a = check_buffer(a, "a", self._a_dtypes, self._a_size)
        b = check_buffer(b, "b", self._b_dtypes, self._b_size)
        if dst is None:
            dst = np.empty(self._out_shape, dtype=dst_dtypes[0])
        else:
            dst = check_buffer(dst, "dst", dst_dtypes, plan.size, writeable=True)
            _check_alias(dst, a, "a")
            _check_alias(dst, b, "b")
        if plan.size == 0:
            return dst
        cdef const void* pa = _data(a)
        cdef const void* pb = _data(b)
        cdef void* pd = _data(dst)
        with nogil:
            status = quantized_add_run(&plan, pa, pb, pd, threads)
        del keep
        if status != SYNET_OK:  # the checks above make this unreachable
            raise RuntimeError(f"QuantizedAdd.forward: kernel status {status}")
        return dst

    cdef QuantizedAddPlan plan(self) except *:
        """The context as a C-level plan for `quantized_add_run` (points into the context's arrays:
        keep the context alive and do not re-init or clear it while the plan runs)."""
        if self._key is None:
            raise RuntimeError("QuantizedAdd: call init() before plan()")
        return self._plan

    def clear(self):
        """Release the context."""
        self._key = None
        self._act_params = self._table = self._lut = None
        self._out_shape = None


cdef object _build_lut(const QuantizedAddPlan* plan):
    """dst[a * 256 + b] of the generic kernel for every u8 pair (same bits as the generic path)."""
    cdef QuantizedAddPlan flat = plan[0]
    flat.mode = MODE_GENERIC
    flat.size = flat.inner = 65536
    flat.rank = 0
    flat.a_scalar = flat.b_scalar = False
    flat.prelu_inner = flat.prelu_channels = 1
    pairs = np.arange(65536, dtype=np.uint16)
    a = (pairs >> 8).astype(np.uint8)
    b = (pairs & 0xFF).astype(np.uint8)
    lut = np.zeros(65536 + 64, dtype=np.uint8)  # padded for the AVX-512 kernel's 4-byte gathers
    cdef int threads = resolve_num_threads(None)
    cdef const void* pa = _data(a)
    cdef const void* pb = _data(b)
    cdef void* pd = _data(lut)
    with nogil:
        quantized_add_run(&flat, pa, pb, pd, threads)
    return lut


# ---------------------------------------------------------------------------------------------
# Functional form

_OPERAND_DTYPES = (np.dtype(np.uint8), np.dtype(np.float32))


def _operand(x, str name):
    array = np.asarray(x)
    if array.dtype == np.float64:
        return np.asarray(array, dtype=np.float32, order="C")  # (ascontiguousarray makes 0-d arrays 1-d)
    if array.dtype not in _OPERAND_DTYPES:
        raise ValueError(f"{name}: expected dtype uint8, float32 or float64 (converted to float32), "
                         f"got {array.dtype}")
    return np.asarray(array, order="C")


def quantized_add(a, b, *, a_scale=1.0, a_zero=0, b_scale=1.0, b_zero=0, dst_scale=1.0, dst_zero=0,
                  dst_dtype=np.uint8, activation="identity", activation_params=None, out=None,
                  n_threads=None):
    """Quantized add with NumPy broadcasting: ``Quantize(Activate(a' + b'))``.

    ``x' = (x - x_zero) * x_scale`` for a uint8 operand, ``x`` itself for a float32 one;
    ``value = Activate(a' + b')``; a uint8 result is
    ``clamp(round_half_even(value / dst_scale) + dst_zero, 0, 255)`` (NaN -> 0, +-inf and
    values beyond the range saturate), a float32 result is ``value``.

    Parameters
    ----------
    a, b : array_like
        uint8 or float32 (float64 is converted to float32); they broadcast with NumPy's rules.
    a_scale, a_zero, b_scale, b_zero : float, int
        Quantisation of uint8 operands (scale finite > 0, zero in [0, 255]); ignored for
        float32 ones.
    dst_scale, dst_zero : float, int
        Quantisation of a uint8 result; ignored for float32.
    dst_dtype : dtype or name
        uint8 (default) or float32.
    activation : Activation or name
        One of the 11 of ``synet.Activation`` (default identity).
    activation_params : sequence of float, optional
        Its parameters (defaults when None); PRELU: slopes along axis 1 of the result, or one.
    out : ndarray, optional
        C-contiguous, writeable, the result's shape and `dst_dtype`; may be `a` or `b`.
    n_threads : int, optional

    Returns
    -------
    ndarray of the broadcast shape and `dst_dtype` (or `out`)

    Examples
    --------
    >>> quantized_add(np.array([50], np.uint8), np.array([80], np.uint8), a_scale=0.01,
    ...               a_zero=47, b_scale=0.02, b_zero=30, dst_scale=0.015, dst_zero=38)
    array([107], dtype=uint8)
    """
    if out is not None:
        require_array(out, "out")
    a = _operand(a, "a")
    b = _operand(b, "b")
    dst_type = _io_type(dst_dtype, "dst_dtype")
    try:
        out_shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ValueError(f"b: expected a shape that broadcasts with a's {a.shape} (NumPy rules), "
                         f"got {b.shape}") from None
    act = as_activation(activation, "activation")
    activation_params = activation_params_of(act, activation_params, out_shape[1] if len(out_shape) >= 2 else 1,
                                             "activation_params")
    context = QuantizedAdd(a.shape, a.dtype, a_scale, a_zero, b.shape, b.dtype, b_scale, b_zero,
                           act, activation_params, dst_type, dst_scale, dst_zero)
    if out is None:
        return context.forward(a, b, n_threads=n_threads)
    shape = context.shape
    dtype = _IO_DTYPES[dst_type]
    if out.shape != shape or out.dtype != dtype:
        raise ValueError(f"out: expected shape {shape} and dtype {dtype}, got shape {out.shape} "
                         f"and dtype {out.dtype}")
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError("out: expected a writeable C-contiguous array")
    return context.forward(a, b, out, n_threads=n_threads)
