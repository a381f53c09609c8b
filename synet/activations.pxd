# cython: language_level=3
"""The 11 activations of Simd's Synet family (SPEC section 2) as inline nogil C functions.

One place for the formulas, shared by every op that fuses an activation (QuantizedAdd,
Deconvolution16b, ...). ``x`` is float32; ``params`` holds the activation's parameters in
Simd's order (the Python layer fills in the defaults, see ``synet._activations``):

==============  ==========================================  ============================
activation      formula                                     params (default)
==============  ==========================================  ============================
IDENTITY   0    x                                           --
RELU       1    max(0, x)                                   --
LEAKY_RELU 2    x > 0 ? x : s*x                             s (0.01)
RESTRICT   3    min(max(lo, x), hi)                         lo, hi (0, 6)
PRELU      4    x > 0 ? x : s[c]*x,  c = channel            one slope per channel
ELU        5    x >= 0 ? x : a*(exp(x) - 1)                 a (1.0)
HSWISH     6    max(min(x, sh) + sh, 0) * sc * x            sh, sc (3, 1/6)
MISH       7    x > t ? x : x*tanh(log1p(exp(x)))           t (20)
HARD_SIGM  8    max(0, min(x*sc + sh, 1))                   sc, sh (1/6, 0.5)
SWISH      9    x / (1 + exp(-s*x))                         s (1.0)
GELU      10    x * (1 + erf(x/sqrt(2))) / 2                --
==============  ==========================================  ============================

Conventions: NaN propagates through every activation (the comparisons are written so that
a NaN takes the "pass x through" branch); ELU uses expm1 and GELU erfc(-x/sqrt(2)) / 2,
which are the same formulas evaluated without cancellation. Every function is a pure
function of its arguments, so a vectorised loop and its scalar tail give the same bits.

`activate_block` applies one activation to a float32 block in place, with the switch
outside the loops so the simple activations (RELU, LEAKY_RELU, RESTRICT_RANGE, PRELU,
HSWISH, HARD_SIGMOID) vectorise. For PRELU element j of the block has the flat output
index ``first + j`` and the channel ``(first + j) // inner % channels`` (NCHW: inner = H*W;
NHWC: inner = 1).

`activate_store_fast` is the vectorised epilogue of a block of FP32 sums: bias, IDENTITY or
RELU, and an FP32 or BF16 (nearest-even) store at any strides, in AVX-512 registers. It
returns 0 (nothing done) where it does not apply (another activation, no AVX-512BW in the
build, strides beyond its gather range); the caller then runs `activate_block` and stores.
"""

from libc.math cimport exp, expm1, tanh, log1p, erfc, fmaf
from libc.stdint cimport int64_t

cdef extern from * nogil:
    """
    #ifndef SYNET_ACTIVATIONS_STORE
    #define SYNET_ACTIVATIONS_STORE
    #include <stdint.h>
    #if defined(__AVX512F__) && defined(__AVX512BW__)
    #include <immintrin.h>
    /* 16 lanes of FP32 -> BF16 bits, round to nearest even; a NaN becomes a quiet NaN of its sign. */
    static inline __m256i synet_act_bf16_vec(__m512 v)
    {
        const __m512i bits = _mm512_castps_si512(v);
        const __m512i abs = _mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFFFF));
        const __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7F800000));
        __m512i r = _mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF),
                        _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1))));
        r = _mm512_srli_epi32(r, 16);
        r = _mm512_mask_or_epi32(r, nan, _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x8000)),
                                 _mm512_set1_epi32(0x7FC0));
        return _mm512_cvtepi32_epi16(r);
    }

    /* r[i][j] -> r[j][i] for a 16x16 block of floats */
    static inline void synet_transpose16(__m512 r[16])
    {
        __m512 t[16];
        for (int i = 0; i < 16; i += 2) {
            t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
            t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
        }
        for (int i = 0; i < 16; i += 4) {   /* r[i + q], 128-bit lane L: rows i..i+3 of column 4L + q */
            r[i] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
            r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
            r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
            r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
        }
        for (int q = 0; q < 4; ++q) {
            const __m512 t0 = _mm512_shuffle_f32x4(r[q], r[4 + q], 0x88), t1 = _mm512_shuffle_f32x4(r[q], r[4 + q], 0xDD);
            const __m512 t2 = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0x88), t3 = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0xDD);
            t[q] = _mm512_shuffle_f32x4(t0, t2, 0x88);        /* column q */
            t[4 + q] = _mm512_shuffle_f32x4(t1, t3, 0x88);    /* column 4 + q */
            t[8 + q] = _mm512_shuffle_f32x4(t0, t2, 0xDD);    /* column 8 + q */
            t[12 + q] = _mm512_shuffle_f32x4(t1, t3, 0xDD);   /* column 12 + q */
        }
        for (int i = 0; i < 16; ++i) r[i] = t[i];
    }

    /* the first min(n, 16) lanes */
    static inline __mmask16 synet_mask16(int64_t n) { return (__mmask16)(n >= 16 ? 0xFFFFu : (1u << n) - 1); }

    /* r[j] = column j of the block s[i * stride + j], i < rows, j in the mask kcols (zero elsewhere) */
    static inline void synet_load_transposed16(const float *s, int64_t stride, int64_t rows, __mmask16 kcols,
                                               __m512 r[16])
    {
        for (int64_t i = 0; i < 16; ++i)
            r[i] = i < rows ? _mm512_maskz_loadu_ps(kcols, s + i * stride) : _mm512_setzero_ps();
        synet_transpose16(r);
    }

    /* bit i of k -> bit 2i: the lanes of every other element */
    static inline uint32_t synet_spread16(uint32_t k)
    {
        k = (k | (k << 8)) & 0x00FF00FFu;
        k = (k | (k << 4)) & 0x0F0F0F0Fu;
        k = (k | (k << 2)) & 0x33333333u;
        return (k | (k << 1)) & 0x55555555u;
    }

    /* dst[off + m*mstep + n*nstep] = act(src[m*sstride + n] + bias[n]) for m < M, n < N; act 0 (IDENTITY)
       or 1 (RELU); bias NULL adds 0; dst FP32, or BF16 bits when bf16. Returns 1 when done, else 0. */
    static inline int synet_act_store_fast(const float *src, int64_t sstride, int64_t M, int64_t N, const float *bias,
                                    void *dst, int bf16, int act, int64_t off, int64_t mstep, int64_t nstep)
    {
        const __m512 zero = _mm512_setzero_ps();
        const int relu = act == 1;
        float *d32 = (float *)dst;
        uint16_t *d16 = (uint16_t *)dst;
        if (act != 0 && act != 1) return 0;
        if (nstep == 1) {
            for (int64_t m = 0; m < M; ++m) {
                int64_t n = 0;
                if (!bf16) {  /* FP32: a short first store up to the cache line, then whole lines */
                    int64_t head = (int64_t)(((64u - ((uintptr_t)(d32 + off + m * mstep) & 63u)) & 63u) >> 2);
                    if (head > N) head = N;
                    if (head) {
                        const __mmask16 k = (__mmask16)((1u << head) - 1);
                        __m512 v = _mm512_maskz_loadu_ps(k, src + m * sstride);
                        if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, bias));
                        if (relu) v = _mm512_max_ps(zero, v);
                        _mm512_mask_storeu_ps(d32 + off + m * mstep, k, v);
                        n = head;
                    }
                }
                for (; n < N; n += 16) {
                    const __mmask16 k = N - n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (N - n)) - 1);
                    __m512 v = _mm512_maskz_loadu_ps(k, src + m * sstride + n);
                    if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, bias + n));
                    if (relu) v = _mm512_max_ps(zero, v);
                    if (bf16) _mm256_mask_storeu_epi16(d16 + off + m * mstep + n, k, synet_act_bf16_vec(v));
                    else _mm512_mask_storeu_ps(d32 + off + m * mstep + n, k, v);
                }
            }
            return 1;
        }
        if (sstride > (1 << 26) || mstep > (1 << 26) || sstride < 0 || mstep < 0) return 0;
        /* runs along m for each channel n: 16x16 blocks of src transposed in registers (one channel a
           register), or a gather for a single strided channel; stores contiguous, every other
           element (mstep 2: the stride-2 phases of a deconvolution), or scattered */
        const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        const __m512i gidx = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)sstride));
        const __m512i sidx = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)mstep));
        const __m512i pair_lo = _mm512_srli_epi32(lane, 1), pair_hi = _mm512_add_epi32(pair_lo, _mm512_set1_epi32(8));
        const __m512i pair16 = _mm512_set_epi16(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8,
                                                7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
        __m512 col[16];
        for (int64_t n0 = 0; n0 < N; n0 += 16) {
            const int64_t nn = N - n0 < 16 ? N - n0 : 16;
            for (int64_t m = 0; m < M; m += 16) {
                const int64_t mm = M - m < 16 ? M - m : 16;
                const __mmask16 k = synet_mask16(mm);
                if (nn == 1) {
                    col[0] = sstride == 1 ? _mm512_maskz_loadu_ps(k, src + m + n0)
                                          : _mm512_mask_i32gather_ps(zero, k, gidx, src + m * sstride + n0, 4);
                } else {
                    synet_load_transposed16(src + m * sstride + n0, sstride, mm, synet_mask16(nn), col);
                }
                for (int64_t j = 0; j < nn; ++j) {
                    __m512 v = _mm512_add_ps(col[j], _mm512_set1_ps(bias ? bias[n0 + j] : 0.0f));
                    if (relu) v = _mm512_max_ps(zero, v);
                    const int64_t o = off + (n0 + j) * nstep + m * mstep;
                    if (bf16) {
                        const __m256i h = synet_act_bf16_vec(v);
                        if (mstep == 1) _mm256_mask_storeu_epi16(d16 + o, k, h);
                        else if (mstep == 2)
                            _mm512_mask_storeu_epi16(d16 + o, synet_spread16(k),
                                                     _mm512_permutexvar_epi16(pair16, _mm512_castsi256_si512(h)));
                        else {
                            uint16_t tmp[16];
                            _mm256_storeu_si256((__m256i *)tmp, h);
                            for (int64_t i = 0; i < mm; ++i) d16[o + i * mstep] = tmp[i];
                        }
                    } else if (mstep == 1) {
                        _mm512_mask_storeu_ps(d32 + o, k, v);
                    } else if (mstep == 2) {
                        const uint32_t spread = synet_spread16(k);
                        _mm512_mask_storeu_ps(d32 + o, (__mmask16)spread, _mm512_permutexvar_ps(pair_lo, v));
                        if (mm > 8) _mm512_mask_storeu_ps(d32 + o + 16, (__mmask16)(spread >> 16), _mm512_permutexvar_ps(pair_hi, v));
                    } else {
                        _mm512_mask_i32scatter_ps(d32 + o, k, sidx, v, 4);
                    }
                }
            }
        }
        return 1;
    }
    #else
    static inline int synet_act_store_fast(const float *src, int64_t sstride, int64_t M, int64_t N, const float *bias,
                                    void *dst, int bf16, int act, int64_t off, int64_t mstep, int64_t nstep)
    { (void)src; (void)sstride; (void)M; (void)N; (void)bias; (void)dst; (void)bf16; (void)act; (void)off;
      (void)mstep; (void)nstep; return 0; }
    #endif
    #endif
    """
    int activate_store_fast "synet_act_store_fast"(
        const float* src, int64_t sstride, int64_t M, int64_t N, const float* bias, void* dst, int bf16,
        int act, int64_t off, int64_t mstep, int64_t nstep)

cdef enum:
    ACT_IDENTITY = 0
    ACT_RELU = 1
    ACT_LEAKY_RELU = 2
    ACT_RESTRICT_RANGE = 3
    ACT_PRELU = 4
    ACT_ELU = 5
    ACT_HSWISH = 6
    ACT_MISH = 7
    ACT_HARD_SIGMOID = 8
    ACT_SWISH = 9
    ACT_GELU = 10
    ACT_COUNT = 11


cdef inline float act_relu(float x) noexcept nogil:
    """max(0, x); NaN stays NaN."""
    return 0.0 if x < 0 else x

cdef inline float act_leaky_relu(float x, float s) noexcept nogil:
    """x > 0 ? x : s*x (also PReLU with the channel's slope)."""
    return x if x > 0 else s * x

cdef inline float act_restrict_range(float x, float lo, float hi) noexcept nogil:
    """min(max(lo, x), hi); NaN stays NaN."""
    x = lo if x < lo else x
    return hi if x > hi else x

cdef inline float act_elu(float x, float a) noexcept nogil:
    """x >= 0 ? x : a*(exp(x) - 1), with expm1, in float64 rounded once."""
    return x if not x < 0 else <float>(<double>a * expm1(<double>x))

cdef inline float act_hswish(float x, float shift, float scale) noexcept nogil:
    """max(min(x, shift) + shift, 0) * scale * x, in float64 rounded once."""
    cdef double t = shift if x > shift else x
    t = t + shift
    t = 0.0 if t < 0 else t
    return <float>(t * scale * x)

cdef inline float act_mish(float x, float threshold) noexcept nogil:
    """x > threshold ? x : x*tanh(log1p(exp(x))), in float64 rounded once."""
    return x if x > threshold else <float>(x * tanh(log1p(exp(<double>x))))

cdef inline float act_hard_sigmoid(float x, float scale, float shift) noexcept nogil:
    """max(0, min(x*scale + shift, 1)); the product and sum are one fma."""
    cdef float y = fmaf(x, scale, shift)
    y = 1.0 if y > 1 else y
    return 0.0 if y < 0 else y

cdef inline float act_swish(float x, float s) noexcept nogil:
    """x / (1 + exp(-s*x)), in float64 rounded once."""
    return <float>(x / (1.0 + exp(-<double>s * x)))

cdef inline float act_gelu(float x) noexcept nogil:
    """x*(1 + erf(x/sqrt(2)))/2, evaluated as x*erfc(-x/sqrt(2))/2 in float64 rounded once."""
    return <float>(0.5 * x * erfc(<double>x * -0.70710678118654752440))


cdef inline float activate(float x, int act, const float* params, Py_ssize_t channel) noexcept nogil:
    """One value: Activate(x) for activation `act` (ACT_*) with `params` (see the table).

    `channel` selects PRELU's slope (params[channel]); the other activations ignore it.
    An unknown `act` returns x.
    """
    if act == ACT_RELU:
        return act_relu(x)
    if act == ACT_LEAKY_RELU:
        return act_leaky_relu(x, params[0])
    if act == ACT_RESTRICT_RANGE:
        return act_restrict_range(x, params[0], params[1])
    if act == ACT_PRELU:
        return act_leaky_relu(x, params[channel])
    if act == ACT_ELU:
        return act_elu(x, params[0])
    if act == ACT_HSWISH:
        return act_hswish(x, params[0], params[1])
    if act == ACT_MISH:
        return act_mish(x, params[0])
    if act == ACT_HARD_SIGMOID:
        return act_hard_sigmoid(x, params[0], params[1])
    if act == ACT_SWISH:
        return act_swish(x, params[0])
    if act == ACT_GELU:
        return act_gelu(x)
    return x


cdef inline void activate_block(float* x, Py_ssize_t n, int act, const float* params,
                                Py_ssize_t first, Py_ssize_t inner, Py_ssize_t channels) noexcept nogil:
    """x[j] = Activate(x[j]) for j < n, in place; one loop per activation.

    For PRELU, x[j] is flat output element ``first + j``, of channel
    ``(first + j) // inner % channels``; the other activations ignore first/inner/channels.
    """
    cdef Py_ssize_t j, k, stop, c
    cdef float p0, p1
    if act == ACT_IDENTITY:
        return
    if act == ACT_PRELU:
        if channels <= 1:
            p0 = params[0]
            for j in range(n):
                x[j] = act_leaky_relu(x[j], p0)
            return
        j = 0
        while j < n:  # one run per channel segment, each a vectorisable loop
            c = ((first + j) // inner) % channels
            stop = min(n, j + inner - (first + j) % inner)
            p0 = params[c]
            for k in range(j, stop):
                x[k] = act_leaky_relu(x[k], p0)
            j = stop
        return
    p0 = params[0] if act != ACT_RELU and act != ACT_GELU else 0.0
    p1 = params[1] if act == ACT_RESTRICT_RANGE or act == ACT_HSWISH or act == ACT_HARD_SIGMOID else 0.0
    if act == ACT_RELU:
        for j in range(n):
            x[j] = act_relu(x[j])
    elif act == ACT_LEAKY_RELU:
        for j in range(n):
            x[j] = act_leaky_relu(x[j], p0)
    elif act == ACT_RESTRICT_RANGE:
        for j in range(n):
            x[j] = act_restrict_range(x[j], p0, p1)
    elif act == ACT_ELU:
        for j in range(n):
            x[j] = act_elu(x[j], p0)
    elif act == ACT_HSWISH:
        for j in range(n):
            x[j] = act_hswish(x[j], p0, p1)
    elif act == ACT_MISH:
        for j in range(n):
            x[j] = act_mish(x[j], p0)
    elif act == ACT_HARD_SIGMOID:
        for j in range(n):
            x[j] = act_hard_sigmoid(x[j], p0, p1)
    elif act == ACT_SWISH:
        for j in range(n):
            x[j] = act_swish(x[j], p0)
    elif act == ACT_GELU:
        for j in range(n):
            x[j] = act_gelu(x[j])
