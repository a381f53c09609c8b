/* Vector helpers shared by the kernel sources, for the instruction set the including source is
 * compiled for (each level's copy is `static`). The BF16 roundings here are the vector forms of
 * synet_bf16_nearest / synet_bf16_truncate in common.h: the same bits for every input.
 */
#ifndef SYNET_VECTOR_H
#define SYNET_VECTOR_H

#include "common.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
#define SYNET_AVX512 1
#else
#define SYNET_AVX512 0
#endif
#if defined(__AVX2__) && defined(__FMA__)
#define SYNET_AVX2 1
#else
#define SYNET_AVX2 0
#endif

/* ---- FP32 vectors of the level (GCC vector extensions): VW lanes of the widest vectors it has ---- */

#if SYNET_AVX512
#define VW 16
#elif SYNET_AVX2
#define VW 8
#else
#define VW 4
#endif
typedef float vfloat __attribute__((vector_size(VW * 4)));
typedef uint32_t vbits __attribute__((vector_size(VW * 4)));
typedef float vfloat_u __attribute__((vector_size(VW * 4), aligned(4)));
typedef uint32_t vbits_u __attribute__((vector_size(VW * 4), aligned(4)));

/* x in every lane (adding x to a zero vector would turn -0 into +0) */
SYNET_INLINE vfloat splat(float x)
{
#if SYNET_AVX512
    return _mm512_set1_ps(x);
#elif SYNET_AVX2
    return _mm256_set1_ps(x);
#elif defined(__SSE__)
    return _mm_set1_ps(x);
#else
    vfloat v;
    for (int i = 0; i < VW; ++i)
        v[i] = x;
    return v;
#endif
}

/* a * b + c on lanes. The levels with FMA instructions round once (the fma). The baseline has none: it rounds
   the product first, the same as the fma wherever the product is exact in FP32 — always for two BF16 values
   (8 + 8 significant bits), unless the product lies beyond FP32's range or below its normal range. Its
   SYNET_EXACT_PRODUCTS copy (setup.py, for the calls whose products may lie there) forms the product in
   float64, where it is exact: rounding product + c once from there is the fma's result (the sum of a 16-bit
   product and an FP32 value is exact in float64 unless one is below the other's FP32 half-ulp by far, and then
   no false tie can arise). For BF16 operands only. (A baseline built with FMA instructions, by
   SYNET_EXTRA_CFLAGS, uses them in both copies.) */
SYNET_INLINE vfloat multiply_add(vfloat a, vfloat b, vfloat c)
{
#if SYNET_AVX512
    return _mm512_fmadd_ps(a, b, c);
#elif SYNET_AVX2
    return _mm256_fmadd_ps(a, b, c);
#elif SYNET_EXACT_PRODUCTS
    typedef double vdouble __attribute__((vector_size(VW * 8)));
    return __builtin_convertvector(__builtin_convertvector(a, vdouble) * __builtin_convertvector(b, vdouble) +
                                       __builtin_convertvector(c, vdouble),
                                   vfloat);
#else
    return a * b + c;
#endif
}

/* multiply_add of one lane, for the scalar tails of vector loops (the lanes' bits, the products beyond or below
   FP32's range included) */
SYNET_INLINE float multiply_add1(float a, float b, float c)
{
#if SYNET_AVX512 || SYNET_AVX2
    return __builtin_fmaf(a, b, c);
#elif SYNET_EXACT_PRODUCTS
    return (float)((double)a * (double)b + (double)c);
#else
    return a * b + c;
#endif
}

SYNET_INLINE vfloat load_vf(const float *s) { return *(const vfloat_u *)(const void *)s; }

/* The transposed convolution's outputs: every NaN stored as the one quiet NaN 0xFFC00000 (x86's default NaN, which
   inf - inf gives; BF16 0xFFC0). Which of two NaNs an x86 add keeps depends on the order of its operands, and the
   kernels of the levels (and the compiler) order a sum's partial sums differently: NaNs of both signs met in a sum
   gave either. */
#define CANONICAL_NAN_BITS 0xFFC00000u
/* (on the bits: GCC folds `x != x ? NaN : x` to x, a NaN being a NaN to it) */
SYNET_INLINE float canonical_nan_f(float x)
{
    return synet_f32_bits_nan(synet_f32_bits(x)) ? synet_f32_from_bits(CANONICAL_NAN_BITS) : x;
}

#if SYNET_AVX512
/* x, with the canonical NaN in the lanes where `of` is a NaN: one vfixupimmps classifying `of` (QNaN and SNaN,
   tokens 0 and 1 -> the QNaN indefinite, response 3; others keep x, response 0) */
SYNET_INLINE __m512 canonical_nan_where_x16(__m512 x, __m512 of)
{
    return _mm512_fixupimm_ps(x, of, _mm512_set1_epi32(0x33), 0);
}
#endif

/* x, with the canonical NaN in the lanes where `of` is a NaN */
SYNET_INLINE vfloat canonical_nan_where_vf(vfloat x, vfloat of)
{
#if SYNET_AVX512
    return canonical_nan_where_x16(x, of);
#elif SYNET_AVX2
    return _mm256_blendv_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32((int)CANONICAL_NAN_BITS)),
                            _mm256_cmp_ps(of, of, _CMP_UNORD_Q));
#else
    const vbits nan = (vbits)(of != of);
    return (vfloat)(((vbits)x & ~nan) | (nan & CANONICAL_NAN_BITS));
#endif
}

SYNET_INLINE vfloat canonical_nan_vf(vfloat x) { return canonical_nan_where_vf(x, x); }

/* A zero vector of its own, made where it is used by a zeroing idiom (the register renamer's: no execution
   unit), to start a chain of multiply-adds: from one shared zero register the compiler copies it, or a weight,
   before each chain's first multiply-add (AMD Zen 1, depthwise D4h 0.93x, D4 0.97x the time) */
SYNET_INLINE vfloat fresh_zero(void)
{
    vfloat z;
#if defined(__AVX__)
    __asm__ volatile("vxorps %x0, %x0, %x0" : "=v"(z));
#elif defined(__SSE__)
    __asm__ volatile("xorps %0, %0" : "=x"(z));
#else
    z = (vfloat){};
#endif
    return z;
}

/* v, held in a register: the compiler may not fold the load that made it into each of its uses (each a load
   again, from L1) */
SYNET_INLINE vfloat in_register(vfloat v)
{
#if defined(__x86_64__) || defined(__i386__)
    __asm__("" : "+v"(v));
#elif defined(__aarch64__)
    __asm__("" : "+w"(v));
#endif
    return v;
}

#if SYNET_AVX512
/* float32 bits rounded to nearest-even at bit 16 (bits + 0x7FFF + bit 16): right for every value but NaNs, whose
   payload may carry into the exponent */
SYNET_INLINE __m512i synet_bf16_round_bits_x16(__m512i bits)
{
    const __m512i lsb = _mm512_srli_epi32(_mm512_slli_epi32(bits, 15), 31); /* bit 16 */
    return _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7FFF)), lsb);
}

/* 16 lanes of float32 bits -> bfloat16 bits in the high half of each lane (the low half is not zeroed).
   Two constants only (the bit tests by shifts, NaN by an unordered compare): a kernel's weights stay in
   registers around it. */
SYNET_INLINE __m512i synet_bf16_nearest_high_x16(__m512i bits)
{
    const __mmask16 nan = _mm512_cmp_ps_mask(_mm512_castsi512_ps(bits), _mm512_castsi512_ps(bits), _CMP_UNORD_Q);
    const __m512i sign = _mm512_slli_epi32(_mm512_srli_epi32(bits, 31), 31);
    return _mm512_mask_or_epi32(synet_bf16_round_bits_x16(bits), nan, sign, _mm512_set1_epi32(0x7FC00000));
}

/* 16 floats rounded to bfloat16 (nearest-even), as float32 values, NaNs canonical (canonical_nan_vf's): the
   integer rounding without its NaN handling, then one vfixupimmps that classifies v puts the canonical NaN in
   its NaN lanes (6 instructions, against 11 for synet_bf16_nearest_x16, a shift back and canonical_nan_vf) */
SYNET_INLINE __m512 synet_bf16_round_canonical_x16(__m512 v)
{
    const __m512i rounded = synet_bf16_round_bits_x16(_mm512_castps_si512(v));
    const __m512 high = _mm512_castsi512_ps(_mm512_and_si512(rounded, _mm512_set1_epi32((int)0xFFFF0000u)));
    return canonical_nan_where_x16(high, v);
}

/* 16 lanes of float32 bits -> bfloat16 bits in the low half of each lane. */
SYNET_INLINE __m512i synet_bf16_nearest_x16(__m512i bits)
{
    return _mm512_srli_epi32(synet_bf16_nearest_high_x16(bits), 16);
}

SYNET_INLINE __m512i synet_bf16_truncate_x16(__m512i bits)
{
    const __m512i high = _mm512_srli_epi32(bits, 16);
    const __mmask16 nan =
        _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
    const __mmask16 empty = nan & _mm512_testn_epi32_mask(high, _mm512_set1_epi32(0x7F));
    return _mm512_mask_or_epi32(high, empty, high, _mm512_set1_epi32(0x0040));
}

/* synet_bf16_pack_x16 by integer operations, for every value */
SYNET_INLINE __m256i synet_bf16_pack_int_x16(__m512 v)
{
    return _mm512_cvtepi32_epi16(synet_bf16_nearest_x16(_mm512_castps_si512(v)));
}

#if defined(__AVX512BF16__)
/* Whether vcvtneps2bf16 rounds every lane of v as synet_bf16_nearest does (the levels from avx512_bf16 on):
   it rounds to nearest-even too, but flushes subnormals to zero and keeps a NaN's payload. One vfpclassps;
   a vector with a NaN or a subnormal goes the integer way (BF16 outputs of transposed convolutions, A/B
   against the integer rounding: D4h 0.78x the time, D4 0.82x, D2 0.89x, D3 0.92x). */
SYNET_INLINE int synet_bf16_convert_exact(__m512 v)
{
    return !_mm512_fpclass_ps_mask(v, 0x01 | 0x20 | 0x80); /* quiet NaN, subnormal, signalling NaN */
}

/* 16 floats -> 16 bfloat16 (nearest-even) packed in 256 bits. */
SYNET_INLINE __m256i synet_bf16_pack_x16(__m512 v)
{
    return synet_bf16_convert_exact(v) ? (__m256i)_mm512_cvtneps_pbh(v) : synet_bf16_pack_int_x16(v);
}
#else
/* 16 floats -> 16 bfloat16 (nearest-even) packed in 256 bits. */
SYNET_INLINE __m256i synet_bf16_pack_x16(__m512 v) { return synet_bf16_pack_int_x16(v); }
#endif

/* 16 pairs of floats (a[i], b[i]) -> 32 bfloat16 (nearest-even, as synet_bf16_nearest), interleaved a0 b0 a1 b1
   ...: one vcvtne2ps2bf16 and a vpermw where it rounds the same (weight packing: 0.6x the instructions), else
   by integer operations */
SYNET_INLINE __m512i synet_bf16_pairs_x16(__m512 a, __m512 b)
{
#if defined(__AVX512BF16__)
    if (synet_bf16_convert_exact(a) && synet_bf16_convert_exact(b)) {
        const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7,
                                                    22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
        return _mm512_permutexvar_epi16(interleave, (__m512i)_mm512_cvtne2ps_pbh(b, a)); /* (b high, a low) */
    }
#endif
    return _mm512_or_si512(synet_bf16_nearest_x16(_mm512_castps_si512(a)),
                           _mm512_slli_epi32(synet_bf16_nearest_x16(_mm512_castps_si512(b)), 16));
}

/* the first min(n, 16) lanes */
SYNET_INLINE __mmask16 synet_mask16(int64_t n) { return (__mmask16)(n >= 16 ? 0xFFFFu : (1u << (n > 0 ? n : 0)) - 1); }

/* r[i][j] -> r[j][i] for a 16x16 block of floats */
SYNET_INLINE void synet_transpose16(__m512 r[16])
{
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) { /* r[i + q], 128-bit lane L: rows i..i+3 of column 4L + q */
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int q = 0; q < 4; ++q) {
        const __m512 t0 = _mm512_shuffle_f32x4(r[q], r[4 + q], 0x88), t1 = _mm512_shuffle_f32x4(r[q], r[4 + q], 0xDD);
        const __m512 t2 = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0x88);
        const __m512 t3 = _mm512_shuffle_f32x4(r[8 + q], r[12 + q], 0xDD);
        t[q] = _mm512_shuffle_f32x4(t0, t2, 0x88);      /* column q */
        t[4 + q] = _mm512_shuffle_f32x4(t1, t3, 0x88);  /* column 4 + q */
        t[8 + q] = _mm512_shuffle_f32x4(t0, t2, 0xDD);  /* column 8 + q */
        t[12 + q] = _mm512_shuffle_f32x4(t1, t3, 0xDD); /* column 12 + q */
    }
    for (int i = 0; i < 16; ++i)
        r[i] = t[i];
}

/* r[j] = column j of the block s[i * stride + j], i < rows, j in the mask kcols (zero elsewhere) */
SYNET_INLINE void synet_load_transposed16(const float *s, int64_t stride, int64_t rows, __mmask16 kcols, __m512 r[16])
{
    for (int64_t i = 0; i < 16; ++i)
        r[i] = i < rows ? _mm512_maskz_loadu_ps(kcols, s + i * stride) : _mm512_setzero_ps();
    synet_transpose16(r);
}

/* bit i of k -> bit 2i: the lanes of every other element */
SYNET_INLINE uint32_t synet_spread16(uint32_t k)
{
    k = (k | (k << 8)) & 0x00FF00FFu;
    k = (k | (k << 4)) & 0x0F0F0F0Fu;
    k = (k | (k << 2)) & 0x33333333u;
    return (k | (k << 1)) & 0x55555555u;
}
#endif

/* float32 bits b (a vector of uint32 lanes) rounded to nearest-even at bit 16, the bfloat16 in the high halves:
   right for every value but NaNs, whose payload may carry into the exponent */
#define BF16_ROUNDED_BITS(b) ((b) + 0x7FFFu + (((b) >> 16) & 1u))

#if SYNET_AVX2
typedef uint32_t synet_u32x8 __attribute__((vector_size(32)));

/* synet_bf16_nearest_canonical_x8 before its shift: each lane's bfloat16 in its high half (the low half not zero) */
SYNET_INLINE __m256i synet_bf16_nearest_canonical_high_x8(__m256i bits)
{
    return (__m256i)BF16_ROUNDED_BITS((synet_u32x8)bits);
}

/* The rounding alone of synet_bf16_nearest_x8 (5 operations of its 10): right for 8 lanes whose only NaN is
   canonical_nan_vf's (0xFFC00000, which rounds to its BF16 0xFFC0 like any value) */
SYNET_INLINE __m256i synet_bf16_nearest_canonical_x8(__m256i bits)
{
    return (__m256i)((synet_u32x8)synet_bf16_nearest_canonical_high_x8(bits) >> 16);
}

/* 8 lanes of float32 bits -> bfloat16 bits in the low half of each lane. */
SYNET_INLINE __m256i synet_bf16_nearest_x8(__m256i bits)
{
    const __m256i high = _mm256_srli_epi32(bits, 16);
    const __m256i abs = _mm256_and_si256(bits, _mm256_set1_epi32(0x7FFFFFFF));
    /* abs > 0x7F800000 as signed ints: both are non-negative */
    const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7F800000));
    const __m256i quiet = _mm256_or_si256(_mm256_and_si256(high, _mm256_set1_epi32(0x8000)), _mm256_set1_epi32(0x7FC0));
    return _mm256_blendv_epi8(synet_bf16_nearest_canonical_x8(bits), quiet, nan);
}

/* the first min(n, 8) lanes as a vector mask (all ones in a lane that is in) */
SYNET_INLINE __m256i synet_mask8(int64_t n)
{
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n > 8 ? 8 : n)), lane);
}

/* r[i][j] -> r[j][i] for an 8x8 block of floats */
SYNET_INLINE void synet_transpose8(__m256 r[8])
{
    __m256 t[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) { /* r[i + q], 128-bit lane L: rows i..i+3 of column 4L + q */
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int q = 0; q < 4; ++q) {
        t[q] = _mm256_permute2f128_ps(r[q], r[4 + q], 0x20);     /* column q */
        t[4 + q] = _mm256_permute2f128_ps(r[q], r[4 + q], 0x31); /* column 4 + q */
    }
    for (int i = 0; i < 8; ++i)
        r[i] = t[i];
}
#endif

#if !SYNET_AVX512 && !SYNET_AVX2
/* VW bfloat16 values */
typedef uint16_t vhalf __attribute__((vector_size(VW * 2)));
typedef uint16_t vhalf_u __attribute__((vector_size(VW * 2), aligned(2)));

/* synet_bf16_nearest on each lane: nearest-even, NaN -> quiet NaN of its sign (the levels without AVX2;
   the others have it as synet_bf16_nearest_x16 / _x8) */
SYNET_INLINE vhalf bf16_nearest_vf(vfloat x)
{
    const vbits b = (vbits)x, high = b >> 16;
    const vbits nan = (vbits)((b & 0x7FFFFFFFu) > 0x7F800000u);
    const vbits rounded = (b + 0x7FFFu + (high & 1u)) >> 16, quiet = (high & 0x8000u) | 0x7FC0u;
    return __builtin_convertvector((rounded & ~nan) | (quiet & nan), vhalf);
}
#endif

/* The floats of v rounded to bfloat16 (nearest-even), as float32 values, NaNs canonical (canonical_nan_vf's):
   synet_bf16_round_float's bits on every lane */
SYNET_INLINE vfloat bf16_round_canonical_vf(vfloat v)
{
#if SYNET_AVX512
    return synet_bf16_round_canonical_x16(v);
#else /* (the rounding may carry a NaN's payload into its exponent: the NaN test reads v) */
    return canonical_nan_where_vf((vfloat)(BF16_ROUNDED_BITS((vbits)v) & 0xFFFF0000u), v);
#endif
}

/* element i of out: FP32, or (bf16) BF16 bits */
SYNET_INLINE void *element_at(void *out, int64_t i, int bf16) { return (char *)out + i * (bf16 ? 2 : 4); }

/* The output stores below (the transposed convolution's) store NaNs as canonical_nan_vf does. */

/* v, whose only NaN is the canonical one, to elements i..i + VW - 1 of out: FP32, or (bf16) their BF16 bits
   (synet_bf16_nearest: at AVX2 the rounding alone, see synet_bf16_nearest_canonical_x8) */
SYNET_INLINE void store_vf_canonical(void *out, int64_t i, vfloat v, int bf16)
{
    if (!bf16)
        *(vfloat_u *)(void *)((float *)out + i) = v;
#if SYNET_AVX512
    else
        _mm256_storeu_si256((__m256i *)((uint16_t *)out + i), synet_bf16_pack_x16(v));
#elif SYNET_AVX2
    else {
        const __m256i h = synet_bf16_nearest_canonical_x8(_mm256_castps_si256(v));
        _mm_storeu_si128((__m128i *)((uint16_t *)out + i),
                         _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
    }
#else
    else
        *(vhalf_u *)(void *)((uint16_t *)out + i) = bf16_nearest_vf(v);
#endif
}

/* the same, NaNs made canonical */
SYNET_INLINE void store_vf(void *out, int64_t i, vfloat v, int bf16) { store_vf_canonical(out, i, canonical_nan_vf(v), bf16); }

/* v to out (FP32, aligned to the vector) bypassing the caches: a non-temporal store, whose writer ends with an
   sfence (the baseline: a plain store) */
SYNET_INLINE void stream_vf(float *out, vfloat v)
{
    v = canonical_nan_vf(v);
#if SYNET_AVX512
    _mm512_stream_ps(out, v);
#elif SYNET_AVX2
    _mm256_stream_ps(out, v);
#else
    *(vfloat_u *)(void *)out = v;
#endif
}

/* the same for one value */
SYNET_INLINE void store_f(void *out, int64_t i, float v, int bf16)
{
    v = canonical_nan_f(v);
    if (bf16)
        ((uint16_t *)out)[i] = synet_bf16_from_float(v);
    else
        ((float *)out)[i] = v;
}

#if SYNET_AVX512
/* lanes k of v to elements i.. of out, as store_vf: one masked store */
SYNET_INLINE void store_vf_lanes(void *out, int64_t i, __mmask16 k, vfloat v, int bf16)
{
    v = canonical_nan_vf(v);
    if (bf16)
        _mm256_mask_storeu_epi16((uint16_t *)out + i, k, synet_bf16_pack_x16(v));
    else
        _mm512_mask_storeu_ps((float *)out + i, k, v);
}
#endif

/* the first n (<= VW) lanes of v to elements i..i + n - 1 of out, as store_vf (AVX-512: one masked store;
   below, a lane at a time) */
SYNET_INLINE void store_vf_part(void *out, int64_t i, vfloat v, int64_t n, int bf16)
{
#if SYNET_AVX512
    store_vf_lanes(out, i, synet_mask16(n), v, bf16);
#else
    float lanes[VW];
    *(vfloat_u *)(void *)lanes = v;
    for (int64_t k = 0; k < n; ++k)
        store_f(out, i + k, lanes[k], bf16);
#endif
}

#endif
