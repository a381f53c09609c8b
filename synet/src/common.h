/* What every synet C source shares: sizes, status codes, CPU levels, per-level names and the
 * one scalar BF16 rounding.
 *
 * Kernel sources (bf16.c, gather.c, quantized_add.c, deconvolution*.c) are compiled once per CPU
 * level, each time with that level's flags and with SYNET_LEVEL_SUFFIX set to its name (setup.py).
 * Everything they define is `static` except one table of function pointers per op and the few
 * functions one source of an op calls in another (deconvolution_level.h); those are named with
 * SYNET_LEVEL_NAME, so no two levels ever share (or have the linker merge) a symbol.
 */
#ifndef SYNET_COMMON_H
#define SYNET_COMMON_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef ptrdiff_t synet_size; /* Py_ssize_t */

/* Status of every nogil entry point (Python maps them to exceptions). */
enum {
    SYNET_OK = 0,
    SYNET_VALUE_ERROR = 1, /* a size, type code or pointer the kernel cannot use */
    SYNET_INDEX_ERROR = 2, /* an index outside its range */
    SYNET_NOT_READY = 3,   /* a context or plan that was not prepared */
};

/* The most threads one call may ask for (a count above it is a value error: results do not depend on
   the count, and OpenMP ends the process when it cannot start the threads). */
#define SYNET_MAX_THREADS 1024

/* CPU levels, lowest first (SPEC section 8). */
enum {
    SYNET_LEVEL_BASELINE = 0,    /* x86-64-v2 (or the architecture's baseline) */
    SYNET_LEVEL_AVX2 = 1,        /* x86-64-v3 */
    SYNET_LEVEL_AVX512 = 2,      /* x86-64-v4: AVX-512 F, CD, BW, DQ, VL */
    SYNET_LEVEL_AVX512_BF16 = 3, /* + AVX512_BF16, AVX512_VNNI */
    SYNET_LEVEL_AMX = 4,         /* + AMX-TILE, AMX-BF16 */
    SYNET_LEVEL_COUNT = 5,
};

#define SYNET_CAT2_(a, b) a##_##b
#define SYNET_CAT2(a, b) SYNET_CAT2_(a, b)
#define SYNET_STR_(a) #a
#define SYNET_STR(a) SYNET_STR_(a)
/* name_<level> in a kernel source compiled for that level */
#define SYNET_LEVEL_NAME(name) SYNET_CAT2(name, SYNET_LEVEL_SUFFIX)

#if defined(__GNUC__)
#define SYNET_INLINE static inline __attribute__((always_inline))
#else
#define SYNET_INLINE static inline
#endif

/* Each op's kernel table exists once per level its source was compiled for (setup.py skips a level
   the compiler cannot build). The tables are weak references: a level that was not built is NULL. */
#define SYNET_DECLARE_TABLES(type, name)                                                              \
    extern const type name##_baseline __attribute__((weak));                                          \
    extern const type name##_avx2 __attribute__((weak));                                              \
    extern const type name##_avx512 __attribute__((weak));                                            \
    extern const type name##_avx512_bf16 __attribute__((weak));                                       \
    extern const type name##_amx __attribute__((weak));                                               \
    /* the table of the highest level <= level that was built, or NULL */                             \
    static inline const type *name##_at(int level)                                                    \
    {                                                                                                 \
        const type *const tables[SYNET_LEVEL_COUNT] = {&name##_baseline, &name##_avx2, &name##_avx512, \
                                                       &name##_avx512_bf16, &name##_amx};             \
        for (int l = level < SYNET_LEVEL_COUNT ? level : SYNET_LEVEL_COUNT - 1; l >= 0; --l)          \
            if (tables[l])                                                                            \
                return tables[l];                                                                     \
        return 0;                                                                                     \
    }

/* A barrier of the innermost enclosing OpenMP parallel region, for the Cython drivers: a prange inside
   `with parallel()` is an `omp for nowait`, so a pass that must see the previous one's results needs it (GCC's
   barrier at the start of a worksharing loop with firstprivate and lastprivate variables is not a promise). */
static inline void synet_barrier(void)
{
#ifdef _OPENMP
#pragma omp barrier
#endif
}

#define SYNET_MIN(a, b) ((a) < (b) ? (a) : (b))
#define SYNET_MAX(a, b) ((a) > (b) ? (a) : (b))

/* ---- BF16, scalar: the one definition of synet's rounding (vector forms in vector.h follow it) ---- */

static inline uint32_t synet_f32_bits(float value)
{
    uint32_t bits;
    memcpy(&bits, &value, 4);
    return bits;
}

static inline float synet_f32_from_bits(uint32_t bits)
{
    float value;
    memcpy(&value, &bits, 4);
    return value;
}

/* whether float32 bits are a NaN's (on the bits: a compiler may fold a test on the value, see vector.h) */
static inline int synet_f32_bits_nan(uint32_t bits) { return (bits & 0x7FFFFFFFu) > 0x7F800000u; }

/* float32 bits -> bfloat16 bits, nearest-even: (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16.
   NaN -> quiet NaN of the same sign (0x7FC0 | sign); overflow rounds to +-inf. */
static inline uint16_t synet_bf16_nearest(uint32_t bits)
{
    if (synet_f32_bits_nan(bits))
        return (uint16_t)(((bits >> 16) & 0x8000u) | 0x7FC0u);
    return (uint16_t)((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

/* float32 bits -> bfloat16 bits by dropping the low half; a NaN whose kept mantissa would be
   zero (it would read as inf) gets the quiet bit. */
static inline uint16_t synet_bf16_truncate(uint32_t bits)
{
    uint16_t high = (uint16_t)(bits >> 16);
    if (synet_f32_bits_nan(bits) && (high & 0x7F) == 0)
        return (uint16_t)(high | 0x0040);
    return high;
}

static inline uint16_t synet_bf16_from_float(float value) { return synet_bf16_nearest(synet_f32_bits(value)); }

static inline float synet_bf16_to_float(uint16_t value) { return synet_f32_from_bits((uint32_t)value << 16); }

/* The float32 nearest to `value` that bfloat16 holds exactly (ties to even). */
static inline float synet_bf16_round_float(float value) { return synet_bf16_to_float(synet_bf16_from_float(value)); }

/* The float64 -> bfloat16 conversions below work on the bits (but for adds of constants to values made of
   bits and a narrowing to float32, see synet_bf16_nearest_f64), so that an extension that cimports them
   (synet.bf16) gives the same bits when compiled with -ffast-math (which folded an add-and-subtract rounding
   and an isinf test away). A float64 of biased exponent e and 53-bit significand m (the implicit 1 included
   where e > 0) is m * 2**(e - 1075): its bfloat16 is
   - for |x| >= 2**-126 (e >= 897): sign | (e - 896) << 7 | the top 7 of its 52 fraction bits, rounded or cut
     at bit 45 (a carry from rounding goes on into the exponent); from 2**128 on (e >= 1151) +-inf, toward zero
     the largest finite value 0x7F7F;
   - below (e < 897): a subnormal, sign | m * 2**(e - 1075 + 133) rounded or cut to an integer (cut: m shifted
     right by 942 - e, at most 63: m < 2**53 gives 0 from there);
   - NaN: a quiet NaN of its sign, nearest 0x7FC0 | sign, toward zero keeping the top payload bits. */
#define SYNET_F64_SIGN (UINT64_C(1) << 63)
#define SYNET_F64_INF UINT64_C(0x7FF0000000000000)

/* float64 -> bfloat16 bits rounded once, nearest-even (no double rounding through float32), without a
   branch (a loop of it vectorises: 1M values 1.7 -> 0.3 ms on AMD Zen 5). */
static inline uint16_t synet_bf16_nearest_f64(double value)
{
    uint64_t bits, sum_bits, tiny_bits;
    memcpy(&bits, &value, 8);
    const uint64_t magnitude = bits & ~SYNET_F64_SIGN;
    const uint64_t rounded = (bits + ((UINT64_C(1) << 44) - 1) + ((bits >> 45) & 1)) & ~((UINT64_C(1) << 45) - 1);
    /* subnormal results: |x| rounded to a multiple k of 2**-133 by the add of 2**-81 (whose last bit is worth
       2**-133), k read from the sum's low bits, then k * 2**-133 from k's bits (adds of constants to values
       made of bits: nothing for -ffast-math to fold) */
    double magnitude_value, sum, k;
    memcpy(&magnitude_value, &magnitude, 8);
    sum = magnitude_value + 0x1p-81;
    memcpy(&sum_bits, &sum, 8);
    const uint64_t k_bits = UINT64_C(0x4330000000000000) | (sum_bits & 0xFFu); /* 2**52 + k */
    memcpy(&k, &k_bits, 8);
    const double tiny = (k - 0x1p52) * 0x1p-133;
    memcpy(&tiny_bits, &tiny, 8);
    tiny_bits |= bits & SYNET_F64_SIGN;
    /* selections by masks (with ?: GCC kept branches and did not vectorise) */
    const uint64_t is_tiny = -(uint64_t)(magnitude < UINT64_C(0x3810000000000000)); /* 2**-126 */
    const uint64_t chosen = (tiny_bits & is_tiny) | (rounded & ~is_tiny);
    double narrowed; /* either exact in float32, or 2**128 and beyond: +-inf (IEEE 754 overflow) */
    memcpy(&narrowed, &chosen, 8);
    const uint32_t h = synet_f32_bits((float)narrowed) >> 16;
    const uint32_t is_nan = -(uint32_t)(magnitude > SYNET_F64_INF);
    return (uint16_t)(((((uint32_t)(bits >> 48) & 0x8000u) | 0x7FC0u) & is_nan) | (h & ~is_nan));
}

/* float64 -> bfloat16 bits toward zero (inf stays inf) */
static inline uint16_t synet_bf16_truncate_f64(double value)
{
    uint64_t bits;
    memcpy(&bits, &value, 8);
    const uint64_t magnitude = bits & ~SYNET_F64_SIGN, e = magnitude >> 52;
    const uint16_t sign = (uint16_t)((bits >> 48) & 0x8000u);
    if (magnitude > SYNET_F64_INF) /* NaN: the top 6 payload bits kept, quiet */
        return (uint16_t)(sign | 0x7FC0u | ((magnitude >> 45) & 0x3Fu));
    if (magnitude == SYNET_F64_INF)
        return (uint16_t)(sign | 0x7F80u);
    if (e >= 1151)
        return (uint16_t)(sign | 0x7F7Fu);
    if (e >= 897)
        return (uint16_t)(sign | ((magnitude >> 45) - (UINT64_C(896) << 7)));
    const uint64_t m = (magnitude & ((UINT64_C(1) << 52) - 1)) | ((uint64_t)(e > 0) << 52);
    return (uint16_t)(sign | (m >> (e < 879 ? 63 : 942 - e)));
}

#endif
