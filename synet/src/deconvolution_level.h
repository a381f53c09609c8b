/* What the level-compiled Deconvolution16b sources (deconvolution.c: the GEMM; deconvolution_depthwise.c)
 * share: the level's FP32 vectors, the epilogue and the source conversion (static: each source gets its
 * own copy, specialised where it is called), and the depthwise entry points deconvolution.c calls. Like
 * the kernels tables, those carry the level in their names, so no two levels share a symbol; the build
 * hides them from other shared objects.
 */
#ifndef SYNET_DECONVOLUTION_LEVEL_H
#define SYNET_DECONVOLUTION_LEVEL_H

#include "deconvolution.h"

#include "activations.h"
#include "vector.h"

/* the weights of kernel position t (tap_kz / tap_ky / tap_kx[t]), relative to a (ci, co) */
SYNET_INLINE synet_size tap_step(const synet_deconv_plan *p, const synet_deconv_weights *w, synet_size t)
{
    return p->tap_kz[t] * w->kz_step + p->tap_ky[t] * w->ky_step + p->tap_kx[t] * w->kx_step;
}

#define STORE_RUN 64 /* epilogue: values activated together */

/* synet_act_relu on lanes: x < 0 ? 0 : x (NaN and -0 kept, as the epilogue's max(0, x) keeps them) */
SYNET_INLINE vfloat relu_vf(vfloat x)
{
    const vfloat zero = {};
    return (vfloat)((vbits)x & ~(vbits)(x < zero));
}

/* the epilogue's operations on a vector of sums, IDENTITY (mode 1) or RELU (2) stored as they are finished
   (the depthwise kernels' finish_mode, store_run; 0: none) */
SYNET_INLINE vfloat finish(vfloat x, vfloat bias, const int mode)
{
    if (mode)
        x = x + bias;
    return mode == 2 ? relu_vf(x) : x;
}

/* the same on one sum */
SYNET_INLINE float finish1(float x, float bias, const int mode)
{
    if (mode)
        x = x + bias;
    return mode == 2 ? synet_act_relu(x) : x;
}

/* ---- the epilogue: bias, activation, FP32 or BF16 store ---- */

#if SYNET_AVX512
/* RELU (relu) or IDENTITY of v, stored to lanes k of dst at element o (`whole`: all 16, by a plain store; 2:
   an FP32 store bypassing the caches, o on a 64-byte line): FP32, or BF16 bits (nearest-even) */
SYNET_INLINE void store_act16_lanes(void *dst, int64_t o, __mmask16 k, __m512 v, int relu, int bf16, const int whole)
{
    if (relu)
        v = _mm512_max_ps(_mm512_setzero_ps(), v);
    if (bf16 && whole) /* (bf16 a constant in each branch: GCC keeps gemm_task's code as it was) */
        store_vf(dst, o, v, 1);
    else if (bf16)
        store_vf_lanes(dst, o, k, v, 1);
    else if (whole == 2)
        stream_vf((float *)dst + o, v);
    else if (whole)
        store_vf(dst, o, v, 0);
    else
        store_vf_lanes(dst, o, k, v, 0);
}

SYNET_INLINE void store_act16(void *dst, int64_t o, __mmask16 k, __m512 v, int relu, int bf16)
{
    store_act16_lanes(dst, o, k, v, relu, bf16, 0);
}

/* dst[off + m*mstep + n*nstep] = act(src[m*sstride + n] + bias[n]) for m < M, n < N, act IDENTITY or
   RELU, in registers; dst FP32 or BF16 bits. Returns 0 (nothing done) for other activations or
   strides beyond its gather range. */
static int store_fast(const float *src, int64_t sstride, int64_t M, int64_t N, const float *bias, void *dst, int bf16,
                      int act, int64_t off, int64_t mstep, int64_t nstep)
{
    const __m512 zero = _mm512_setzero_ps();
    const int relu = act == SYNET_ACT_RELU;
    float *d32 = (float *)dst;
    uint16_t *d16 = (uint16_t *)dst;
    if (act != SYNET_ACT_IDENTITY && act != SYNET_ACT_RELU)
        return 0;
    if (nstep == 1) {
        for (int64_t m = 0; m < M; ++m) {
            int64_t n = 0;
            if (!bf16) { /* FP32: a short first store up to the cache line, then whole lines */
                int64_t head = (int64_t)(((64u - ((uintptr_t)(d32 + off + m * mstep) & 63u)) & 63u) >> 2);
                if (head > N)
                    head = N;
                if (head) {
                    const __mmask16 k = (__mmask16)((1u << head) - 1);
                    const __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(k, src + m * sstride), _mm512_maskz_loadu_ps(k, bias));
                    store_act16(dst, off + m * mstep, k, v, relu, 0);
                    n = head;
                }
            }
            for (; n < N; n += 16) {
                const __mmask16 k = synet_mask16(N - n);
                const __m512 v =
                    _mm512_add_ps(_mm512_maskz_loadu_ps(k, src + m * sstride + n), _mm512_maskz_loadu_ps(k, bias + n));
                store_act16(dst, off + m * mstep + n, k, v, relu, bf16);
            }
        }
        return 1;
    }
    if (sstride > (1 << 26) || mstep > (1 << 26) || sstride < 0 || mstep < 0)
        return 0;
    /* runs along m for each channel n: 16x16 blocks of src transposed in registers (one channel a
       register), or a gather for a single strided channel; stores contiguous, every other element
       (mstep 2: the stride-2 phases), or scattered */
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i gidx = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)sstride));
    const __m512i sidx = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)mstep));
    const __m512i pair_lo = _mm512_srli_epi32(lane, 1), pair_hi = _mm512_add_epi32(pair_lo, _mm512_set1_epi32(8));
    const __m512i pair16 = _mm512_set_epi16(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8, 7, 7, 6, 6, 5, 5,
                                            4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    __m512 col[16];
    for (int64_t n0 = 0; n0 < N; n0 += 16) {
        const int64_t nn = N - n0 < 16 ? N - n0 : 16;
        for (int64_t m = 0; m < M; m += 16) {
            const int64_t mm = M - m < 16 ? M - m : 16;
            const __mmask16 k = synet_mask16(mm);
            if (nn == 1)
                col[0] = sstride == 1 ? _mm512_maskz_loadu_ps(k, src + m + n0)
                                      : _mm512_mask_i32gather_ps(zero, k, gidx, src + m * sstride + n0, 4);
            else
                synet_load_transposed16(src + m * sstride + n0, sstride, mm, synet_mask16(nn), col);
            for (int64_t j = 0; j < nn; ++j) {
                __m512 v = _mm512_add_ps(col[j], _mm512_set1_ps(bias[n0 + j]));
                if (relu)
                    v = _mm512_max_ps(zero, v);
                v = canonical_nan_vf(v); /* as store_vf stores it */
                const int64_t o = off + (n0 + j) * nstep + m * mstep;
                if (bf16) {
                    const __m256i h = synet_bf16_pack_x16(v);
                    if (mstep == 1) {
                        _mm256_mask_storeu_epi16(d16 + o, k, h);
                    } else if (mstep == 2) {
                        _mm512_mask_storeu_epi16(d16 + o, synet_spread16(k),
                                                 _mm512_permutexvar_epi16(pair16, _mm512_castsi256_si512(h)));
                    } else {
                        uint16_t tmp[16];
                        _mm256_storeu_si256((__m256i *)tmp, h);
                        for (int64_t i = 0; i < mm; ++i)
                            d16[o + i * mstep] = tmp[i];
                    }
                } else if (mstep == 1) {
                    _mm512_mask_storeu_ps(d32 + o, k, v);
                } else if (mstep == 2) {
                    const uint32_t spread = synet_spread16(k);
                    _mm512_mask_storeu_ps(d32 + o, (__mmask16)spread, _mm512_permutexvar_ps(pair_lo, v));
                    if (mm > 8)
                        _mm512_mask_storeu_ps(d32 + o + 16, (__mmask16)(spread >> 16), _mm512_permutexvar_ps(pair_hi, v));
                } else {
                    _mm512_mask_i32scatter_ps(d32 + o, k, sidx, v, 4);
                }
            }
        }
    }
    return 1;
}
#endif

#if SYNET_AVX2 && !SYNET_AVX512
/* dst[o + i] = finish(s[i], b[i * bstep], mode) for i < n, FP32 or BF16 dst: bstep 1, a pixel's row of
   channels; 0, one channel's run of pixels */
SYNET_INLINE void store_run(const float *s, const float *b, int bstep, int64_t n, void *dst, int64_t o, int mode, int bf16)
{
    int64_t i = 0;
    for (; i + VW <= n; i += VW)
        store_vf(dst, o + i, finish(load_vf(s + i), bstep ? load_vf(b + i) : splat(b[0]), mode), bf16);
    for (; i < n; ++i)
        store_f(dst, o + i, finish1(s[i], b[i * bstep], mode), bf16);
}

/* store_fast below AVX-512, IDENTITY or RELU: contiguous runs (a pixel's channels, nstep 1; one channel's
   pixels, N 1 and mstep 1) by whole vectors, FP32 or BF16; FP32 channels first with pixels every mstep = 1
   or 2 elements (the stride-2 x phases) by 8 x 8 blocks of src transposed in registers (one channel a
   register), each channel's run of pixels stored by one masked store, or by two spread to every other
   element. Returns 0 (nothing done) otherwise. */
static int store_fast(const float *src, int64_t sstride, int64_t M, int64_t N, const float *bias, void *dst, int bf16,
                      int act, int64_t off, int64_t mstep, int64_t nstep)
{
    if (act != SYNET_ACT_IDENTITY && act != SYNET_ACT_RELU)
        return 0;
    const int relu = act == SYNET_ACT_RELU;
    if (nstep == 1) {
        for (int64_t m = 0; m < M; ++m)
            store_run(src + m * sstride, bias, 1, N, dst, off + m * mstep, 1 + relu, bf16);
        return 1;
    }
    if (N == 1 && sstride == 1 && mstep == 1) {
        store_run(src, bias, 0, M, dst, off, 1 + relu, bf16);
        return 1;
    }
    if (bf16 || (mstep != 1 && mstep != 2))
        return 0;
    const __m256 zero = _mm256_setzero_ps();
    const __m256i pair_lo = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3), pair_hi = _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7);
    const __m256i even = _mm256_setr_epi32(-1, 0, -1, 0, -1, 0, -1, 0);
    float *d32 = (float *)dst;
    __m256 col[8];
    for (int64_t n0 = 0; n0 < N; n0 += 8) {
        const int64_t nn = N - n0 < 8 ? N - n0 : 8;
        const __m256i kn = synet_mask8(nn);
        for (int64_t m = 0; m < M; m += 8) {
            const int64_t mm = M - m < 8 ? M - m : 8;
            for (int64_t i = 0; i < 8; ++i)
                col[i] = i < mm ? _mm256_maskload_ps(src + (m + i) * sstride + n0, kn) : zero;
            synet_transpose8(col);
            for (int64_t j = 0; j < nn; ++j) {
                __m256 v = _mm256_add_ps(col[j], _mm256_set1_ps(bias[n0 + j]));
                if (relu)
                    v = _mm256_max_ps(zero, v); /* NaN and -0 stay (the second operand) */
                v = canonical_nan_vf(v);        /* as store_vf stores it */
                float *d = d32 + off + (n0 + j) * nstep + m * mstep;
                if (mstep == 1) {
                    _mm256_maskstore_ps(d, synet_mask8(mm), v);
                } else {
                    _mm256_maskstore_ps(d, _mm256_and_si256(even, synet_mask8(2 * mm)), _mm256_permutevar8x32_ps(v, pair_lo));
                    if (mm > 4)
                        _mm256_maskstore_ps(d + 8, _mm256_and_si256(even, synet_mask8(2 * mm - 8)),
                                            _mm256_permutevar8x32_ps(v, pair_hi));
                }
            }
        }
    }
    return 1;
}
#endif

/* dst[off + m*mstep + n*nstep] = act(acc[m*mstride + n] + bias[c0 + n]) for m < M, n < N: output
   channel c0 + n, FP32 or BF16 (nearest-even) dst. The activation runs on runs of <= STORE_RUN values
   of one pixel (nstep == 1) or one channel (nstep != 1). */
static void deconv_store(const float *acc, synet_size mstride, synet_size M, synet_size N, synet_size c0,
                  const synet_deconv_plan *p, void *dst, synet_size off, synet_size mstep, synet_size nstep)
{
    float run[STORE_RUN];
    const float *bias = p->bias + c0;
#if SYNET_AVX512 || SYNET_AVX2
    if (store_fast(acc, mstride, M, N, bias, dst, p->dst_bf16, p->act, off, mstep, nstep))
        return;
#endif
    if (nstep == 1) { /* PRELU's channel of run[k] is c0 + j + k */
        for (synet_size m = 0; m < M; ++m)
            for (synet_size j = 0; j < N; j += STORE_RUN) {
                const synet_size len = SYNET_MIN((synet_size)STORE_RUN, N - j);
                for (synet_size k = 0; k < len; ++k)
                    run[k] = acc[m * mstride + j + k] + bias[j + k];
                synet_activate_block(run, len, p->act, p->params, c0 + j, 1, p->dst_c);
                for (synet_size k = 0; k < len; ++k)
                    store_f(dst, off + m * mstep + j + k, run[k], p->dst_bf16);
            }
        return;
    }
    for (synet_size n = 0; n < N; ++n) { /* PRELU reads the single slope params[c0 + n] */
        const float *prm = p->params + (p->act == SYNET_ACT_PRELU ? c0 + n : 0);
        for (synet_size j = 0; j < M; j += STORE_RUN) {
            const synet_size len = SYNET_MIN((synet_size)STORE_RUN, M - j);
            for (synet_size k = 0; k < len; ++k)
                run[k] = acc[(j + k) * mstride + n] + bias[n];
            synet_activate_block(run, len, p->act, prm, 0, 1, 1);
            for (synet_size k = 0; k < len; ++k)
                store_f(dst, off + n * nstep + (j + k) * mstep, run[k], p->dst_bf16);
        }
    }
}

/* ---- the padded source image ---- */

#define CONVERT_AHEAD 2048 /* bytes: how far ahead of its loads deconv_convert_run prefetches the source */

/* d[i] = bf16(s[i]) for i < n, as BF16 bits (f32 0) or as their FP32 values (f32 1; NaNs canonical_nan_f's: see
   deconvolution_depthwise.c's store_sums). Rounding FP32, the source is prefetched CONVERT_AHEAD bytes ahead,
   inside its first `s_bytes` (the rows the caller converts next: the depthwise kernels' padded copies waited
   on their loads; D4 0.952x, D4h 0.956x the time) */
static void deconv_convert_run(const void *s, int src_bf16, void *d, int f32, synet_size n, synet_size s_bytes)
{
    if (f32) {
        float *o = (float *)d;
        if (src_bf16) {
            for (synet_size i = 0; i < n; ++i)
                o[i] = canonical_nan_f(synet_bf16_to_float(((const uint16_t *)s)[i]));
            return;
        }
        synet_size i = 0;
        /* (by integer operations: vcvtneps2bf16, widened back, then canonical_nan_vf took D4 1.025x the time; at
           avx2 the compiler's vectorisation of the scalar loop below took 0.6 ns a float, a fifth of D4's time) */
        for (; i + 16 <= n; i += 16) {
            if (4 * i + CONVERT_AHEAD < s_bytes)
                __builtin_prefetch((const char *)s + 4 * i + CONVERT_AHEAD, 0, 3);
            for (int j = 0; j < 16; j += VW)
                *(vfloat_u *)(void *)(o + i + j) = bf16_round_canonical_vf(load_vf((const float *)s + i + j));
        }
#if SYNET_AVX512
        if (i < n) {
            const __mmask16 k = synet_mask16(n - i);
            _mm512_mask_storeu_ps(o + i, k, synet_bf16_round_canonical_x16(_mm512_maskz_loadu_ps(k, (const float *)s + i)));
            return;
        }
#endif
        for (; i < n; ++i)
            o[i] = canonical_nan_f(synet_bf16_round_float(((const float *)s)[i]));
        return;
    }
    uint16_t *o = (uint16_t *)d;
    if (src_bf16) {
        memcpy(o, s, n * 2);
        return;
    }
    const float *f = (const float *)s;
    synet_size i = 0;
#if SYNET_AVX512
    for (; i < n; i += 16) {
        const __mmask16 k = synet_mask16(n - i);
        _mm256_mask_storeu_epi16(o + i, k, synet_bf16_pack_x16(_mm512_maskz_loadu_ps(k, f + i)));
    }
#endif
    for (; i < n; ++i)
        o[i] = synet_bf16_from_float(f[i]);
}

/* one source value as BF16 bits */
SYNET_INLINE uint16_t bf16_at(const void *src, int src_bf16, synet_size i)
{
    return src_bf16 ? ((const uint16_t *)src)[i] : synet_bf16_from_float(((const float *)src)[i]);
}

#if SYNET_AVX512 || SYNET_AVX2
/* the level's widest FP32 vector */
#if SYNET_AVX512
typedef __m512 vreg;
typedef __m512i vregi;
#define transpose_vw synet_transpose16
#else
typedef __m256 vreg;
typedef __m256i vregi;
#define transpose_vw synet_transpose8
#endif

#if SYNET_AVX512
/* 16 BF16 lanes in quad order (quad_place) */
SYNET_INLINE __m256i quad_order(__m256i h)
{
    return _mm256_permutexvar_epi16(_mm256_set_epi16(13, 15, 12, 14, 9, 11, 8, 10, 5, 7, 4, 6, 1, 3, 0, 2), h);
}
#endif

/* n <= VW elements of s from i (zero beyond): FP32 values, or BF16 bits widened to their FP32 values */
SYNET_INLINE vreg load_source(const void *s, int src_bf16, synet_size i, int n)
{
#if SYNET_AVX512
    if (src_bf16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(synet_mask16(n), (const uint16_t *)s + i)), 16));
    return _mm512_maskz_loadu_ps(synet_mask16(n), (const float *)s + i);
#else
    if (src_bf16) {
        uint16_t h[8] = {0};
        memcpy(h, (const uint16_t *)s + i, (size_t)n * 2);
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)h)), 16));
    }
    return n == 8 ? _mm256_loadu_ps((const float *)s + i) : _mm256_maskload_ps((const float *)s + i, synet_mask8(n));
#endif
}

/* the first n <= VW lanes of v to d from i: bf16(v) (nearest-even; v as it is when it came from BF16 bits),
   as FP32 values (f32; NaNs canonical) or BF16 bits; `quads` (i a multiple of 4, v zero from lane n): BF16 bits in
   quad_order, whole quads */
SYNET_INLINE void store_image(void *d, int f32, int src_bf16, int quads, synet_size i, int n, vreg v)
{
#if SYNET_AVX512
    if (f32) { /* (v is its BF16 value when it came from BF16 bits) */
        _mm512_mask_storeu_ps((float *)d + i, synet_mask16(n),
                              src_bf16 ? (__m512)canonical_nan_vf(v) : synet_bf16_round_canonical_x16(v));
        return;
    }
    const vregi bits =
        src_bf16 ? _mm512_srli_epi32(_mm512_castps_si512(v), 16) : synet_bf16_nearest_x16(_mm512_castps_si512(v));
    if (quads)
        _mm256_mask_storeu_epi16((uint16_t *)d + i, synet_mask16((n + 3) & ~3),
                                 quad_order(_mm512_cvtepi32_epi16(bits)));
    else
        _mm256_mask_storeu_epi16((uint16_t *)d + i, synet_mask16(n), _mm512_cvtepi32_epi16(bits));
#else
    (void)quads;
    if (f32) { /* (as with AVX-512: 7 operations a vector, the BF16 bits and their widening took 13) */
        const vreg r = src_bf16 ? canonical_nan_vf(v) : bf16_round_canonical_vf(v);
        if (n == 8)
            _mm256_storeu_ps((float *)d + i, r);
        else
            _mm256_maskstore_ps((float *)d + i, synet_mask8(n), r);
        return;
    }
    const vregi bits =
        src_bf16 ? _mm256_srli_epi32(_mm256_castps_si256(v), 16) : synet_bf16_nearest_x8(_mm256_castps_si256(v));
    uint32_t h[8]; /* BF16 bits in the low halves: the image of the levels with BF16 micro-kernels only */
    _mm256_storeu_si256((__m256i *)h, bits);
    for (int k = 0; k < n; ++k)
        ((uint16_t *)d)[i + k] = (uint16_t)h[k];
#endif
}
#endif

/* Source bytes prefetched ahead of convert_transposed's loads (into L2: see there) */
#define TRANSPOSED_PREFETCH 1024

/* A transposed copy: d[j * d_row + i] = bf16(s[i * s_row + j]) (f32: NaNs canonical), i < rows, j < cols (VW x VW a step, transposed
   in registers; NCHW -> channels last for the GEMM's image, D7 at avx2, scalar: pad_row 30 % of the time;
   channels last -> planes for a planar plan's). `ahead`: the elements of s from i * s_row on that may be read
   (the rest of a channels-first source's channel: the rows the next calls convert), 0 for none; from AVX2 up
   each load prefetches TRANSPOSED_PREFETCH bytes ahead within them, into L2. Channels first, the rows of a
   call are one plane apart, often a multiple of 4 KiB, so that all of them meet in one or two of L1's 64 sets
   (D7: 64 rows 64 KiB apart): prefetched into L1, they evicted one another (D7 0.95x the time), into L2 D7
   took 0.87x (2 KiB 0.87x, 512 B 0.88x, 4 KiB 0.91x; a source read from L1 would take 0.82x). */
static void convert_transposed(const void *s, int src_bf16, synet_size s_row, synet_size rows, synet_size cols,
                               void *d, int f32, int quads, synet_size d_row, synet_size ahead)
{
#if SYNET_AVX512 || SYNET_AVX2
    const synet_size se = src_bf16 ? 2 : 4, prefetch_end = ahead * se - TRANSPOSED_PREFETCH;
    vreg r[VW];
    for (synet_size i0 = 0; i0 < rows; i0 += VW) {
        const int ni = (int)SYNET_MIN((synet_size)VW, rows - i0);
        for (synet_size j0 = 0; j0 < cols; j0 += VW) {
            const int nj = (int)SYNET_MIN((synet_size)VW, cols - j0);
            const int prefetch = j0 * se < prefetch_end;
            for (int k = 0; k < VW; ++k) {
                if (prefetch && k < ni)
                    _mm_prefetch((const char *)s + ((i0 + k) * s_row + j0) * se + TRANSPOSED_PREFETCH, _MM_HINT_T1);
                r[k] = k < ni ? load_source(s, src_bf16, (i0 + k) * s_row + j0, nj) : (vreg){0};
            }
            transpose_vw(r);
            for (int k = 0; k < nj; ++k)
                store_image(d, f32, src_bf16, quads, (j0 + k) * d_row + i0, ni, r[k]);
        }
    }
#else
    (void)quads; /* BF16 micro-kernels only */
    (void)ahead;
    for (synet_size i = 0; i < rows; ++i)
        for (synet_size j = 0; j < cols; ++j) {
            const uint16_t h = bf16_at(s, src_bf16, i * s_row + j);
            if (f32)
                ((float *)d)[j * d_row + i] = canonical_nan_f(synet_bf16_to_float(h));
            else
                ((uint16_t *)d)[j * d_row + i] = h;
        }
#endif
}

/* ---- deconvolution_depthwise.c (group == src_c == dst_c) ---- */

#define deconv_depthwise_pad_row SYNET_LEVEL_NAME(synet_deconv_depthwise_pad_row)
#define deconv_depthwise_task SYNET_LEVEL_NAME(synet_deconv_depthwise_task)
#define deconv_depthwise_pack SYNET_LEVEL_NAME(synet_deconv_depthwise_pack)

/* row r of the BF16-rounded FP32 copy of src, zero-padded */
void deconv_depthwise_pad_row(const synet_deconv_plan *p, const void *src, void *image, synet_size r);
/* output task t: a channels-first plane (it pads its own rows of `image`) or a channels-last row */
void deconv_depthwise_task(const synet_deconv_plan *p, const void *src, void *image, void *dst, synet_size t);
/* channel c's BF16-rounded weights into the FP32 table; 1 when one is NaN or inf */
int deconv_depthwise_pack(const synet_deconv_plan *p, const synet_deconv_weights *w, synet_size c, float *table);

#endif
