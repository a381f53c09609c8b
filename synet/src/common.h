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

/* float64 -> bfloat16 bits rounded once, nearest-even (no double rounding through float32), without a
   branch (a loop of it vectorises: 1M values 1.7 -> 0.3 ms on AMD Zen 5). Normal results round the 52-bit
   mantissa to 7 bits on the float64 bits; subnormal ones (|x| < 2**-126) are multiples of 2**-133, rounded
   by adding and subtracting 1.5 * 2**-81 (whose last bit is worth 2**-133), with x's sign; either is then
   exact in float32 (or beyond its range: +-inf), whose high half is the result. NaN gives a quiet NaN of
   its sign. */
static inline uint16_t synet_bf16_nearest_f64(double value)
{
    const uint64_t magnitude_mask = ~(UINT64_C(1) << 63);
    const double tiny_step = 0x1.8p-81; /* 1.5 * 2**-81 */
    uint64_t bits, rounded, tiny_bits;
    memcpy(&bits, &value, 8);
    const uint64_t magnitude = bits & magnitude_mask;
    rounded = (bits + ((UINT64_C(1) << 44) - 1) + ((bits >> 45) & 1)) & ~((UINT64_C(1) << 45) - 1);
    const double tiny = (value + tiny_step) - tiny_step;
    memcpy(&tiny_bits, &tiny, 8);
    tiny_bits = (tiny_bits & magnitude_mask) | (bits & ~magnitude_mask);
    /* selections by masks (with ?: GCC kept branches and did not vectorise) */
    const uint64_t is_tiny = -(uint64_t)(magnitude < UINT64_C(0x3810000000000000)); /* 2**-126 */
    const uint64_t chosen = (tiny_bits & is_tiny) | (rounded & ~is_tiny);
    double narrowed; /* 2**128 and beyond: +-inf in float32 (IEEE 754 overflow) */
    memcpy(&narrowed, &chosen, 8);
    const uint32_t h = synet_f32_bits((float)narrowed) >> 16;
    const uint32_t is_nan = -(uint32_t)(magnitude > UINT64_C(0x7FF0000000000000));
    return (uint16_t)(((((uint32_t)(bits >> 48) & 0x8000u) | 0x7FC0u) & is_nan) | (h & ~is_nan));
}

/* float64 -> bfloat16 bits toward zero: the float32 toward zero of `value` (nearest, stepped back
   when it rounded away from zero) truncates to the bfloat16 toward zero; inf and NaN pass. */
static inline uint16_t synet_bf16_truncate_f64(double value)
{
    float narrowed;
    if (isnan(value) || isinf(value)) {
        narrowed = (float)value;
    } else if (fabs(value) > 3.4028234663852886e+38) { /* FLT_MAX */
        narrowed = value > 0 ? 3.4028234663852886e+38f : -3.4028234663852886e+38f;
    } else {
        narrowed = (float)value;
        if (fabs((double)narrowed) > fabs(value))
            narrowed = nextafterf(narrowed, 0.0f);
    }
    return synet_bf16_truncate(synet_f32_bits(narrowed));
}

#endif
