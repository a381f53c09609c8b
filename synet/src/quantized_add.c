/* QuantizedAdd kernels, compiled once per CPU level (see common.h). Three kernels, chosen by the plan, and
 * row tables over them:
 *
 * - generic (every type combination and activation): a' + b' in float64 (or in float32 with split
 *   scales where the planner bounds the error below what the output needs), rounded once to float32;
 *   the activation of activations.h on a float32 block; a quantised output in float32 with an exact
 *   clamp (NaN -> lo, +-inf and huge values saturate) before rounding half to even.
 * - folded (u8 + u8 -> u8 or i8 + i8 -> i8, IDENTITY or RELU): q = fma(a, ka, fma(b, kb, kc)) in
 *   float32, clamped to [lo, hi] and rounded; the planner uses it only where its error bound keeps it
 *   exact away from rounding ties. AVX-512BW: 64 outputs a step; AVX2: 32 (the same steps on 8 lanes,
 *   1.7x faster than the compiler's vectorisation of the portable loop, which rounds and clamps in
 *   float); the portable loop elsewhere (which, without FMA instructions, sums in float64 where that is
 *   exactly the fma, see folded_fma).
 * - lookup (1-byte operands and output, per tensor, any activation but PRELU, large outputs): a
 *   65536-entry table built by the generic kernel, indexed by the operands' bytes. AVX-512: 16-lane
 *   gathers; elsewhere scalar loads, which measure as fast here (AVX2 gathers gain ~10 %).
 *
 * - row tables (AVX-512 with VBMI): a row whose one operand is constant and whose other operand and output
 *   are 1-byte is looked up in a table of its 256 outputs, which the row's kernel above computes.
 *
 * Per-axis scales and zero points: one synet_qadd_consts per channel, rows split at channel boundaries;
 * channels shorter than the planner's LANES_INNER_MAX (NHWC's channels) instead run the generic and folded
 * formulas with constants per output position (synet_qadd_lanes), the same bits either way.
 */
#include "quantized_add.h"

#include "activations.h"
#include "exact_fma.h"
#include "vector.h"

#define BLOCK 512 /* float32 scratch of the generic kernel, per row segment */

typedef uint8_t u8_t;
typedef int8_t i8_t;
typedef float f32_t;

/* ---- generic ---- */

/* A dequantised operand. Quantised in float64: (x - zero) * scale, the difference exact, so the product is
   the one rounding a float64 evaluation of the formula makes (x * scale - zero * scale rounded three times:
   a' + b' of operands that cancel was off by far more than the float32 result's 1e-6); in float32:
   d = float(x - zero) (exact), d * scale with the scale split in float32 halves: fma(d, high, d * low),
   within ~2**-24 |x'| of the exact product; float32: x (in float64 times its scale: 1, or the plan's power of
   two that keeps a' + b' / dst_scale within float32's normal range, _quantized_add_plan._scaled_path). */
SYNET_INLINE double deq_u8_double(u8_t x, double scale, int zero) { return (double)((int)x - zero) * scale; }
SYNET_INLINE double deq_i8_double(i8_t x, double scale, int zero) { return (double)((int)x - zero) * scale; }
SYNET_INLINE double deq_f32_double(f32_t x, double scale, int zero)
{
    (void)zero;
    return (double)x * scale;
}
SYNET_INLINE float deq_u8_float(u8_t x, float high, float low, int zero)
{
    const float d = (float)((int)x - zero);
    return synet_exact_fma(d, high, d * low);
}
SYNET_INLINE float deq_i8_float(i8_t x, float high, float low, int zero)
{
    const float d = (float)((int)x - zero);
    return synet_exact_fma(d, high, d * low);
}
SYNET_INLINE float deq_f32_float(f32_t x, float high, float low, int zero)
{
    (void)high, (void)low, (void)zero;
    return x;
}

/* a' + b' with a NaN a' giving its own NaN (quieted), whatever b' is: x86 keeps the first operand's NaN of
   two, and the compiler may put either first (float32 + float32 -> float32 gave b's NaN in the vectors and
   a's in the tail, and a's vectors at AVX2) */
#define nan_first_sum(x, y) _Generic((x), double: nan_first_sum_d, default: nan_first_sum_f)(x, y)
SYNET_INLINE double nan_first_sum_d(double x, double y) { return x != x ? x + x : x + y; }
SYNET_INLINE float nan_first_sum_f(float x, float y) { return x != x ? x + x : x + y; }
/* a' + b' for a of type A: a quantised a' is never NaN (its scale is finite) */
#define SUM_u8(x, y) ((x) + (y))
#define SUM_i8(x, y) ((x) + (y))
#define SUM_f32(x, y) nan_first_sum(x, y)

/* the scale arguments of deq_*_double and deq_*_float from a synet_qadd_consts */
#define DOUBLE_A(k) (k)->a_scale
#define DOUBLE_B(k) (k)->b_scale
#define FLOAT_A(k) (k)->fa_scale, (k)->fa_scale_low
#define FLOAT_B(k) (k)->fb_scale, (k)->fb_scale_low

/* v[i] = float32(a'[i] + b'[i]) with the sum in ACC; a scalar operand is dequantised once. KA / KB: the
   operands' scale arguments (DOUBLE_A / FLOAT_A...). */
#define VALUES(A, B, ACC, KA, KB)                                                                                \
    static void values_##A##_##B##_##ACC(const A##_t *a, const B##_t *b, float *v, synet_size n,               \
                                         const synet_qadd_consts *k, int a_scalar, int b_scalar)                \
    {                                                                                                            \
        const int za = k->a_zero, zb = k->b_zero;                                                                \
        if (a_scalar) {                                                                                          \
            const ACC c = deq_##A##_##ACC(a[0], KA(k), za);                                                      \
            for (synet_size i = 0; i < n; ++i)                                                                   \
                v[i] = (float)SUM_##A(c, deq_##B##_##ACC(b[i], KB(k), zb));                                      \
        } else if (b_scalar) {                                                                                   \
            const ACC c = deq_##B##_##ACC(b[0], KB(k), zb);                                                      \
            for (synet_size i = 0; i < n; ++i)                                                                   \
                v[i] = (float)SUM_##A(deq_##A##_##ACC(a[i], KA(k), za), c);                                      \
        } else {                                                                                                 \
            for (synet_size i = 0; i < n; ++i)                                                                   \
                v[i] = (float)SUM_##A(deq_##A##_##ACC(a[i], KA(k), za), deq_##B##_##ACC(b[i], KB(k), zb));       \
        }                                                                                                        \
    }
#define VALUES_BOTH(A, B)                    \
    VALUES(A, B, double, DOUBLE_A, DOUBLE_B) \
    VALUES(A, B, float, FLOAT_A, FLOAT_B)
VALUES_BOTH(u8, u8)
VALUES_BOTH(u8, i8)
VALUES_BOTH(u8, f32)
VALUES_BOTH(i8, u8)
VALUES_BOTH(i8, i8)
VALUES_BOTH(i8, f32)
VALUES_BOTH(f32, u8)
VALUES_BOTH(f32, i8)
VALUES_BOTH(f32, f32)

/* round_half_even(clamp(q, lo, hi)); NaN -> lo (the comparisons send it there) */
SYNET_INLINE float clamp_round(float q, float lo, float hi)
{
    q = q > lo ? q : lo;
    q = q < hi ? q : hi;
    return rintf(q);
}

/* dst = clamp(round_half_even(v / dst_scale) + dst_zero, lo, hi) */
#define QUANTIZE(T)                                                                                         \
    static void quantize_##T(const float *v, T##_t *dst, synet_size n, const synet_qadd_consts *k, float lo, \
                             float hi)                                                                      \
    {                                                                                                       \
        const float pre = k->q_pre, inv = k->q_inv, zero = k->q_zero;                                       \
        for (synet_size i = 0; i < n; ++i)                                                                  \
            dst[i] = (T##_t)clamp_round(synet_exact_fma(v[i] * pre, inv, zero), lo, hi);                    \
    }
QUANTIZE(u8)
QUANTIZE(i8)

/* n generic outputs from flat index `first`; a / b point at the row's first operand element */
#define GENERIC(A, B, OUT)                                                                                     \
    static void generic_##A##_##B##_##OUT(const synet_qadd_plan *p, const synet_qadd_consts *k, const void *a_, \
                                          const void *b_, void *dst_, synet_size n, synet_size first)          \
    {                                                                                                          \
        const A##_t *a = (const A##_t *)a_;                                                                    \
        const B##_t *b = (const B##_t *)b_;                                                                    \
        OUT##_t *dst = (OUT##_t *)dst_;                                                                        \
        float buf[BLOCK];                                                                                      \
        for (synet_size off = 0; off < n; off += BLOCK) {                                                      \
            const synet_size m = SYNET_MIN((synet_size)BLOCK, n - off);                                        \
            float *v = sizeof(OUT##_t) == 4 ? (float *)(void *)(dst + off) : buf; /* float32 dst: its own scratch */ \
            const A##_t *ao = p->a_scalar ? a : a + off;                                                       \
            const B##_t *bo = p->b_scalar ? b : b + off;                                                       \
            if (p->float_values)                                                                               \
                values_##A##_##B##_float(ao, bo, v, m, k, p->a_scalar, p->b_scalar);                           \
            else                                                                                               \
                values_##A##_##B##_double(ao, bo, v, m, k, p->a_scalar, p->b_scalar);                          \
            synet_activate_block(v, m, p->act, p->act_params, first + off, p->prelu_inner, p->prelu_channels); \
            QUANTIZE_##OUT(v, dst + off, m, k, p);                                                             \
        }                                                                                                      \
    }
#define QUANTIZE_f32(v, d, m, k, p) (void)0
#define QUANTIZE_u8(v, d, m, k, p) quantize_u8(v, d, m, k, 0.0f, 255.0f)
#define QUANTIZE_i8(v, d, m, k, p) quantize_i8(v, d, m, k, -128.0f, 127.0f)
#define GENERIC_OUT(A, B) GENERIC(A, B, u8) GENERIC(A, B, i8) GENERIC(A, B, f32)
GENERIC_OUT(u8, u8)
GENERIC_OUT(u8, i8)
GENERIC_OUT(u8, f32)
GENERIC_OUT(i8, u8)
GENERIC_OUT(i8, i8)
GENERIC_OUT(i8, f32)
GENERIC_OUT(f32, u8)
GENERIC_OUT(f32, i8)
GENERIC_OUT(f32, f32)

typedef void (*generic_row)(const synet_qadd_plan *, const synet_qadd_consts *, const void *, const void *, void *,
                            synet_size, synet_size);

/* [a][b][dst], each 0 = u8, 1 = i8, 2 = f32 */
static const generic_row GENERIC_ROWS[3][3][3] = {
    {{generic_u8_u8_u8, generic_u8_u8_i8, generic_u8_u8_f32},
     {generic_u8_i8_u8, generic_u8_i8_i8, generic_u8_i8_f32},
     {generic_u8_f32_u8, generic_u8_f32_i8, generic_u8_f32_f32}},
    {{generic_i8_u8_u8, generic_i8_u8_i8, generic_i8_u8_f32},
     {generic_i8_i8_u8, generic_i8_i8_i8, generic_i8_i8_f32},
     {generic_i8_f32_u8, generic_i8_f32_i8, generic_i8_f32_f32}},
    {{generic_f32_u8_u8, generic_f32_u8_i8, generic_f32_u8_f32},
     {generic_f32_i8_u8, generic_f32_i8_i8, generic_f32_i8_f32},
     {generic_f32_f32_u8, generic_f32_f32_i8, generic_f32_f32_f32}},
};

static int type_slot(int type) { return type == SYNET_QADD_U8 ? 0 : (type == SYNET_QADD_I8 ? 1 : 2); }

static synet_size type_size(int type) { return type == SYNET_QADD_F32 ? 4 : 1; }

/* ---- folded ---- */

#if SYNET_AVX512 || SYNET_AVX2
/* The vector kernels read every dword of operand bytes as 4 float32 vectors, one per byte position r: lane
   j of position r is byte 4j + r times 2**-position_shift, taken out by a mask or a shift rather than by
   widening byte shuffles (the shuffle ports are the busy ones here). The constants of position r carry the
   inverse power of two (position_scale), so fma(x_r, k * scale, c) is fma(byte, k, c) bit for bit: the
   planner keeps k * 2**-24 a normal float32. After the saturating packs, the bytes of every 128-bit lane
   come out position by position, and one in-lane byte shuffle (POSITION_ORDER) puts them back in order. */
SYNET_INLINE float position_scale(int r, const int sign)
{
    if (sign) /* r = 0 and 3: the byte at the top of its dword; 1 and 2: sign-extended in place */
        return r == 1 ? 0x1p-8f : r == 2 ? 0x1p-16f : 0x1p-24f;
    return r == 1 ? 0x1p-8f : r == 2 ? 0x1p-16f : 1.0f; /* masked in place, except r = 3 (shifted down) */
}
#define POSITION_ORDER 0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15
#endif

#if SYNET_AVX512
typedef __m512 fvec;
typedef __m512i ivec;
#define FOLDED_STEP 64
#define I(op) _mm512_##op
#define BYTE_ORDER_VEC _mm512_broadcast_i32x4(_mm_setr_epi8(POSITION_ORDER))
#define VLOADU _mm512_loadu_si512
#define VSTOREU _mm512_storeu_si512
#define VSTREAM(p, v) _mm512_stream_si512((__m512i *)(p), v)
#define VZERO _mm512_setzero_si512
#elif SYNET_AVX2
typedef __m256 fvec;
typedef __m256i ivec;
#define FOLDED_STEP 32
#define I(op) _mm256_##op
#define BYTE_ORDER_VEC _mm256_broadcastsi128_si256(_mm_setr_epi8(POSITION_ORDER))
#define VLOADU(p) _mm256_loadu_si256((const __m256i *)(p))
#define VSTOREU(p, v) _mm256_storeu_si256((__m256i *)(p), v)
#define VSTREAM(p, v) _mm256_stream_si256((__m256i *)(p), v)
#define VZERO _mm256_setzero_si256
#endif

#if SYNET_AVX512 || SYNET_AVX2
/* the 4 byte positions of a vector of bytes (unsigned or signed) as float32 lanes, see position_scale;
   signed bytes 1 and 2 are sign-extended in place, ((v & m) ^ s) - s, by ALU operations that leave the
   busy shift / shuffle ports alone (Q7 0.93-0.95x the time of a shift and a mask each) */
SYNET_INLINE void positions(ivec v, const int sign, fvec x[4])
{
    if (sign) {
        const ivec top = I(set1_epi32)((int)0xFF000000u);
        x[0] = I(cvtepi32_ps)(I(slli_epi32)(v, 24));
        const ivec s1 = I(set1_epi32)(0x8000), s2 = I(set1_epi32)(0x800000);
        x[1] = I(cvtepi32_ps)(I(sub_epi32)((v & I(set1_epi32)(0xFF00)) ^ s1, s1));
        x[2] = I(cvtepi32_ps)(I(sub_epi32)((v & I(set1_epi32)(0xFF0000)) ^ s2, s2));
        x[3] = I(cvtepi32_ps)(v & top);
    } else {
        x[0] = I(cvtepi32_ps)(v & I(set1_epi32)(0xFF));
        x[1] = I(cvtepi32_ps)(v & I(set1_epi32)(0xFF00));
        x[2] = I(cvtepi32_ps)(v & I(set1_epi32)(0xFF0000));
        x[3] = I(cvtepi32_ps)(I(srli_epi32)(v, 24));
    }
}

/* FOLDED_STEP outputs: q rounded half to even by vcvtps2dq (MXCSR's default mode), saturated by the
   packs, then max(q, lo) when `clamp` (RELU with lo above the type's minimum). The planner keeps
   |q| < 2**22, so the conversion is exact and this equals the portable clamp_round. mode 0: both operands
   contiguous; 1: a is one value (ca: a / position_scale(3), times ka[3]); 2: b is one value (cb). */
SYNET_INLINE ivec folded_step(ivec va, ivec vb, const int mode, const int sign, const int clamp, const fvec ka[4],
                              const fvec kb[4], fvec kc, fvec ca, fvec cb, ivec lo)
{
    fvec xa[4], xb[4];
    ivec d[4];
    if (mode != 1)
        positions(va, sign, xa);
    if (mode != 2)
        positions(vb, sign, xb);
    for (int r = 0; r < 4; ++r) {
        fvec q;
        if (mode == 2)
            q = I(fmadd_ps)(xa[r], ka[r], cb);
        else if (mode == 1)
            q = I(fmadd_ps)(ca, ka[3], I(fmadd_ps)(xb[r], kb[r], kc));
        else
            q = I(fmadd_ps)(xa[r], ka[r], I(fmadd_ps)(xb[r], kb[r], kc));
        d[r] = I(cvtps_epi32)(q);
    }
    const ivec w0 = I(packs_epi32)(d[0], d[1]), w1 = I(packs_epi32)(d[2], d[3]);
    const ivec bytes = sign ? I(packs_epi16)(w0, w1) : I(packus_epi16)(w0, w1);
    const ivec ordered = I(shuffle_epi8)(bytes, BYTE_ORDER_VEC);
    if (!clamp)
        return ordered;
    return sign ? I(max_epi8)(ordered, lo) : I(max_epu8)(ordered, lo);
}

/* up to FOLDED_STEP outputs (row heads and tails): masked loads and store with AVX-512, 32-byte copies
   with AVX2; the same vector steps, so the same bits */
SYNET_INLINE void folded_part(const uint8_t *a, const uint8_t *b, uint8_t *dst, synet_size count, const int mode,
                              const int sign, const int clamp, const fvec ka[4], const fvec kb[4], fvec kc, fvec ca,
                              fvec cb, ivec lo)
{
#if SYNET_AVX512
    const __mmask64 mask = _bzhi_u64(~0ULL, (unsigned)count);
    const ivec va = mode != 1 ? _mm512_maskz_loadu_epi8(mask, a) : _mm512_setzero_si512();
    const ivec vb = mode != 2 ? _mm512_maskz_loadu_epi8(mask, b) : _mm512_setzero_si512();
    _mm512_mask_storeu_epi8((void *)dst, mask, folded_step(va, vb, mode, sign, clamp, ka, kb, kc, ca, cb, lo));
#else
    uint8_t ta[32] = {0}, tb[32] = {0}, td[32];
    if (mode != 1)
        memcpy(ta, a, (size_t)count);
    if (mode != 2)
        memcpy(tb, b, (size_t)count);
    VSTOREU(td, folded_step(VLOADU(ta), VLOADU(tb), mode, sign, clamp, ka, kb, kc, ca, cb, lo));
    memcpy(dst, td, (size_t)count);
#endif
}

/* Outputs before the first vector boundary of the streams (a, b, dst) that most of them share, dst's on a tie
   or when `stream` (non-temporal stores need it), 0 for short rows. NumPy's buffers start 16 or 32 bytes
   after a cache line, and loads and stores across lines cost: Q1 with all three 16 bytes off ran 1.35x
   slower than aligned (AVX-512). */
SYNET_INLINE synet_size aligning_head(const uint8_t *a, const uint8_t *b, const uint8_t *dst, synet_size n,
                                      const int mode, const int stream)
{
    const uintptr_t step = FOLDED_STEP, d = (uintptr_t)dst % step, oa = (uintptr_t)a % step,
                    ob = (uintptr_t)b % step;
    uintptr_t off = d;
    if (n < 4 * FOLDED_STEP && !stream)
        return 0;
    if (!stream && mode == 0 && oa == ob && oa != d) /* both operands agree, dst does not */
        off = oa;
    const synet_size head = (synet_size)((step - off) % step);
    return head < n ? head : n;
}

/* Whether operand x, not at a vector boundary after the head, is better loaded in halves (AVX-512): its
   loads, split across cache lines, are slow behind non-temporal stores, and when it trails dst by less than
   512 bytes modulo 4 KiB, they wait on the stores just made to lines of the same page offsets (Q1
   1.3-1.6x slower in both cases than in halves; AVX2's 32-byte loads measured slower in halves). */
SYNET_INLINE int split_loads_stall(const uint8_t *x, const uint8_t *dst, synet_size head, const int stream)
{
    const uintptr_t lag = ((uintptr_t)dst - (uintptr_t)x) & 4095;
    return SYNET_AVX512 && ((uintptr_t)(x + head) & (FOLDED_STEP - 1)) && (stream || (lag && lag < 512));
}

/* a vector of operand bytes; `halves`: as two loads of half a vector (see split_loads_stall) */
SYNET_INLINE ivec load_operand(const uint8_t *p, const int halves)
{
#if SYNET_AVX512
    if (halves)
        return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p)),
                                  _mm256_loadu_si256((const __m256i *)(p + 32)), 1);
#else
    (void)halves;
#endif
    return VLOADU(p);
}

/* a vector of outputs at dst, by a non-temporal store when `stream` */
SYNET_INLINE void folded_store(uint8_t *dst, ivec r, const int stream)
{
    if (stream)
        VSTREAM(dst, r);
    else
        VSTOREU(dst, r);
}

/* stream: non-temporal stores (outputs much larger than the caches); an sfence orders them before
   returning. A head of aligning_head outputs goes first; `halves`: operands load in halves (split_loads_stall). */
SYNET_INLINE void folded_loop(const uint8_t *a, const uint8_t *b, uint8_t *dst, synet_size n, const int mode,
                              const int sign, const int clamp, const synet_qadd_consts *k, const int stream,
                              synet_size head, const int halves)
{
    fvec ka[4], kb[4];
    for (int r = 0; r < 4; ++r) {
        ka[r] = I(set1_ps)(k->ka * position_scale(r, sign));
        kb[r] = I(set1_ps)(k->kb * position_scale(r, sign));
    }
    const fvec kc = I(set1_ps)(k->kc);
    const float a0 = sign ? (float)(int8_t)a[0] : (float)a[0], b0 = sign ? (float)(int8_t)b[0] : (float)b[0];
    const fvec ca = I(set1_ps)(mode == 1 ? a0 / position_scale(3, sign) : 0.0f); /* times ka[3], exact */
    const fvec cb = I(set1_ps)(mode == 2 ? synet_exact_fma(b0, k->kb, k->kc) : 0.0f);
    const ivec lo = I(set1_epi8)((char)(int)k->lo);
    const ivec zero = VZERO();
    synet_size i = head;
    if (i)
        folded_part(a, b, dst, i, mode, sign, clamp, ka, kb, kc, ca, cb, lo);
#if !SYNET_AVX512
    /* the operands a step ahead of the stores: a load right after the store before it, when dst is 8 to 48
       bytes after an operand modulo 4 KiB, waited on that store (4K aliasing; AMD Zen 1, Q2 1.6-2x the time;
       two 6.4 MB arrays allocated one after the other are 16 bytes apart so); the row's last whole vector
       goes by the loop below */
    if (i + 2 * FOLDED_STEP <= n) {
        ivec va = mode != 1 ? VLOADU(a + i) : zero, vb = mode != 2 ? VLOADU(b + i) : zero;
        for (; i + 2 * FOLDED_STEP <= n; i += FOLDED_STEP) {
            const ivec next_a = mode != 1 ? VLOADU(a + i + FOLDED_STEP) : zero;
            const ivec next_b = mode != 2 ? VLOADU(b + i + FOLDED_STEP) : zero;
            folded_store(dst + i, folded_step(va, vb, mode, sign, clamp, ka, kb, kc, ca, cb, lo), stream);
            va = next_a;
            vb = next_b;
        }
    }
#endif
    for (; i + FOLDED_STEP <= n; i += FOLDED_STEP) {
        const ivec va = mode != 1 ? load_operand(a + i, halves) : zero;
        const ivec vb = mode != 2 ? load_operand(b + i, halves) : zero;
        folded_store(dst + i, folded_step(va, vb, mode, sign, clamp, ka, kb, kc, ca, cb, lo), stream);
    }
    if (i < n)
        folded_part(mode == 1 ? a : a + i, mode == 2 ? b : b + i, dst + i, n - i, mode, sign, clamp, ka, kb, kc, ca,
                    cb, lo);
    if (stream)
        _mm_sfence();
}
/* ---- fused generic (the vector levels) ---- */

/* deq_*_float of the value at x */
static float deq_float(const void *x, int type, float high, float low, int zero)
{
    if (type == SYNET_QADD_U8)
        return deq_u8_float(*(const u8_t *)x, high, low, zero);
    if (type == SYNET_QADD_I8)
        return deq_i8_float(*(const i8_t *)x, high, low, zero);
    return deq_f32_float(*(const f32_t *)x, high, low, zero);
}

/* one vector of dequantised operand values at x: float32 as they are; bytes as deq_*_float computes them */
SYNET_INLINE fvec fused_deq(const void *x, const int type, fvec high, fvec low, ivec zero)
{
    if (type == SYNET_QADD_F32)
        return I(loadu_ps)((const float *)x);
#if SYNET_AVX512
    const __m128i bytes = _mm_loadu_si128((const __m128i *)x);
#else
    const __m128i bytes = _mm_loadl_epi64((const __m128i *)x);
#endif
    const ivec i = type == SYNET_QADD_U8 ? I(cvtepu8_epi32)(bytes) : I(cvtepi8_epi32)(bytes);
    const fvec d = I(cvtepi32_ps)(I(sub_epi32)(i, zero));
    return I(fmadd_ps)(d, high, I(mul_ps)(d, low));
}

/* The generic kernel with float32 values (plan.float_values), IDENTITY or RELU, in one pass of vectors:
   VALUES, synet_act_relu and, for a 1-byte output, QUANTIZE's operations in their order (max(0, v) keeps
   NaN and -0 as synet_act_relu does; max / min clamp as clamp_round does, NaN to lo; vcvtps2dq rounds half
   to even like rintf), so the same bits, without the float32 scratch and its three passes (Q5, f32 + u8 ->
   u8: 0.090 -> 0.065 ms at AVX-512, 0.167 -> 0.120 ms at AVX2; the compiler's vectorisation of the same
   loop in C widened and packed through 16-bit words and ran 1.16x slower than the passes). A float32
   output (`out` SYNET_QADD_F32) takes the values as they are: the compiler's vectorisation of VALUES widened
   each operand's bytes through 16-bit words by cross-lane shuffles. Outputs in steps of 4 vectors; returns
   how many it did. ca / cb: a scalar operand's value. */
SYNET_INLINE synet_size fused_loop(const char *a, const char *b, void *dst, synet_size n, const synet_qadd_consts *k,
                                   const int ta, const int tb, const int out, const int a_scalar,
                                   const int b_scalar, const int relu, float ca, float cb)
{
    const synet_size ea = type_size(ta), eb = type_size(tb), lanes = sizeof(fvec) / 4;
    const int sign = out == SYNET_QADD_I8;
    const fvec ha = I(set1_ps)(k->fa_scale), la = I(set1_ps)(k->fa_scale_low);
    const fvec hb = I(set1_ps)(k->fb_scale), lb = I(set1_ps)(k->fb_scale_low);
    const ivec za = I(set1_epi32)(k->a_zero), zb = I(set1_epi32)(k->b_zero);
    const fvec pre = I(set1_ps)(k->q_pre), inv = I(set1_ps)(k->q_inv), zq = I(set1_ps)(k->q_zero);
    const fvec lo = I(set1_ps)(sign ? -128.0f : 0.0f), hi = I(set1_ps)(sign ? 127.0f : 255.0f);
    const fvec zero = I(setzero_ps)(), va = I(set1_ps)(ca), vb = I(set1_ps)(cb);
#if SYNET_AVX512 /* dword j of the packed vector holds outputs 4j..4j+3 of vector j % 4, lane j / 4 */
    const ivec order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
#else
    const ivec order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
#endif
    synet_size i = 0;
    for (; i + 4 * lanes <= n; i += 4 * lanes) {
        ivec d[4];
        for (int r = 0; r < 4; ++r) {
            const synet_size o = i + r * lanes;
            const fvec x = a_scalar ? va : fused_deq(a + o * ea, ta, ha, la, za);
            const fvec y = b_scalar ? vb : fused_deq(b + o * eb, tb, hb, lb, zb);
            fvec v = I(add_ps)(x, y);
            if (out == SYNET_QADD_F32 && ta == SYNET_QADD_F32) /* a NaN a' gives its own NaN (nan_first_sum) */
#if SYNET_AVX512
                v = _mm512_mask_add_ps(v, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x, x);
#else
                v = _mm256_blendv_ps(v, _mm256_add_ps(x, x), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
#endif
            if (relu)
                v = I(max_ps)(zero, v);
            if (out == SYNET_QADD_F32) {
                I(storeu_ps)((float *)dst + o, v);
                continue;
            }
            const fvec q = I(fmadd_ps)(I(mul_ps)(v, pre), inv, zq);
            d[r] = I(cvtps_epi32)(I(min_ps)(I(max_ps)(q, lo), hi));
        }
        if (out == SYNET_QADD_F32)
            continue;
        const ivec w0 = I(packs_epi32)(d[0], d[1]), w1 = I(packs_epi32)(d[2], d[3]);
        const ivec bytes = sign ? I(packs_epi16)(w0, w1) : I(packus_epi16)(w0, w1);
#if SYNET_AVX512
        VSTOREU((uint8_t *)dst + i, _mm512_permutexvar_epi32(order, bytes));
#else
        VSTOREU((uint8_t *)dst + i, _mm256_permutevar8x32_epi32(bytes, order));
#endif
    }
    return i;
}
#define FUSED_CASE(TA, TB, OUT)                                                                                \
    case (TA * 4 + TB) * 4 + OUT:                                                                              \
        return fused_loop(a, b, dst, n, k, TA, TB, OUT, p->a_scalar, p->b_scalar, relu, ca, cb);
#define FUSED_CASES(TA, TB) FUSED_CASE(TA, TB, SYNET_QADD_U8) FUSED_CASE(TA, TB, SYNET_QADD_I8) \
    FUSED_CASE(TA, TB, SYNET_QADD_F32)
/* fused_loop for the plan's types, or 0 outputs where it does not apply */
static synet_size fused_row(const synet_qadd_plan *p, const synet_qadd_consts *k, const char *a, const char *b,
                            void *dst, synet_size n)
{
    const int relu = p->act == SYNET_ACT_RELU;
    if (!p->float_values || (p->act != SYNET_ACT_IDENTITY && !relu) || n <= 0)
        return 0;
    const float ca = p->a_scalar ? deq_float(a, p->a_type, k->fa_scale, k->fa_scale_low, k->a_zero) : 0.0f;
    const float cb = p->b_scalar ? deq_float(b, p->b_type, k->fb_scale, k->fb_scale_low, k->b_zero) : 0.0f;
    switch ((p->a_type * 4 + p->b_type) * 4 + p->dst_type) {
        FUSED_CASES(SYNET_QADD_F32, SYNET_QADD_U8) FUSED_CASES(SYNET_QADD_F32, SYNET_QADD_I8)
        FUSED_CASES(SYNET_QADD_U8, SYNET_QADD_F32) FUSED_CASES(SYNET_QADD_I8, SYNET_QADD_F32)
        FUSED_CASES(SYNET_QADD_F32, SYNET_QADD_F32) FUSED_CASES(SYNET_QADD_U8, SYNET_QADD_U8)
        FUSED_CASES(SYNET_QADD_U8, SYNET_QADD_I8) FUSED_CASES(SYNET_QADD_I8, SYNET_QADD_U8)
        FUSED_CASES(SYNET_QADD_I8, SYNET_QADD_I8)
    }
    return 0;
}
#undef FUSED_CASES
#undef FUSED_CASE
#undef I
#undef VLOADU
#undef VSTOREU
#undef VSTREAM
#undef VZERO
#endif

#if !(SYNET_AVX512 || SYNET_AVX2)
static synet_size fused_row(const synet_qadd_plan *p, const synet_qadd_consts *k, const char *a, const char *b,
                            void *dst, synet_size n)
{
    (void)p, (void)k, (void)a, (void)b, (void)dst, (void)n;
    return 0;
}
#endif

#if SYNET_AVX512 || SYNET_AVX2
/* folded_loop (the level's vectors) with its mode, sign, clamp and stream constant */
#define FOLDED_CASE(MODE, SIGN, CLAMP, STREAM)                                                                 \
    case ((MODE) * 2 + (SIGN)) * 4 + (CLAMP) * 2 + (STREAM):                                                  \
        if (halves)                                                                                           \
            folded_loop(a, b, dst, n, MODE, SIGN, CLAMP, k, STREAM, head, 1);                                 \
        else                                                                                                  \
            folded_loop(a, b, dst, n, MODE, SIGN, CLAMP, k, STREAM, head, 0);                                 \
        break;
#define FOLDED_CASES(MODE, SIGN)                                                                               \
    FOLDED_CASE(MODE, SIGN, 0, 0) FOLDED_CASE(MODE, SIGN, 0, 1) FOLDED_CASE(MODE, SIGN, 1, 0)                   \
    FOLDED_CASE(MODE, SIGN, 1, 1)
static void folded_row(const void *a_, const void *b_, void *dst_, synet_size n, const synet_qadd_consts *k,
                       int mode, int sign, int stream, float hi)
{
    const uint8_t *a = (const uint8_t *)a_, *b = (const uint8_t *)b_;
    uint8_t *dst = (uint8_t *)dst_;
    const int clamp = k->lo > (sign ? -128.0f : 0.0f); /* below that the saturating packs clamp already */
    const synet_size head = aligning_head(a, b, dst, n, mode, stream);
    const int halves = (mode != 1 && split_loads_stall(a, dst, head, stream)) ||
                       (mode != 2 && split_loads_stall(b, dst, head, stream));
    (void)hi;                                          /* as they do at 255 / 127 */
    switch ((mode * 2 + sign) * 4 + clamp * 2 + stream) {
        FOLDED_CASES(0, 0)
        FOLDED_CASES(0, 1)
        FOLDED_CASES(1, 0)
        FOLDED_CASES(1, 1)
        FOLDED_CASES(2, 0)
        FOLDED_CASES(2, 1)
    }
}
#undef FOLDED_CASES
#undef FOLDED_CASE
#else
/* fma(x, k, c): in float64 where the planner found that exact (synet_qadd_consts.folded_in_doubles), which
   levels without FMA instructions run instead of synet_exact_fma (Q1 at baseline 2.1 -> 0.66 ms) */
SYNET_INLINE float folded_fma(float x, float k, float c, const int in_doubles)
{
    return in_doubles ? (float)((double)x * (double)k + (double)c) : synet_exact_fma(x, k, c);
}

#define FOLDED_PORTABLE(T)                                                                                    \
    SYNET_INLINE void folded_##T##_of(const T##_t *a, const T##_t *b, T##_t *dst, synet_size n,                 \
                                      const synet_qadd_consts *k, int mode, float hi, const int d)            \
    {                                                                                                         \
        const float ka = k->ka, kb = k->kb, kc = k->kc, lo = k->lo;                                           \
        if (mode == 1) {                                                                                      \
            const float c = (float)a[0];                                                                      \
            for (synet_size i = 0; i < n; ++i)                                                                \
                dst[i] = (T##_t)clamp_round(folded_fma(c, ka, folded_fma((float)b[i], kb, kc, d), d), lo, hi); \
        } else if (mode == 2) {                                                                               \
            const float c = synet_exact_fma((float)b[0], kb, kc);                                             \
            for (synet_size i = 0; i < n; ++i)                                                                \
                dst[i] = (T##_t)clamp_round(folded_fma((float)a[i], ka, c, d), lo, hi);                       \
        } else {                                                                                              \
            for (synet_size i = 0; i < n; ++i)                                                                \
                dst[i] = (T##_t)clamp_round(folded_fma((float)a[i], ka, folded_fma((float)b[i], kb, kc, d), d), \
                                            lo, hi);                                                          \
        }                                                                                                     \
    }                                                                                                         \
    static void folded_##T(const T##_t *a, const T##_t *b, T##_t *dst, synet_size n, const synet_qadd_consts *k, \
                           int mode, float hi)                                                                \
    {                                                                                                         \
        if (k->folded_in_doubles)                                                                             \
            folded_##T##_of(a, b, dst, n, k, mode, hi, 1);                                                    \
        else                                                                                                  \
            folded_##T##_of(a, b, dst, n, k, mode, hi, 0);                                                    \
    }
FOLDED_PORTABLE(u8)
FOLDED_PORTABLE(i8)

static void folded_row(const void *a, const void *b, void *dst, synet_size n, const synet_qadd_consts *k, int mode,
                       int sign, int stream, float hi)
{
    (void)stream;
    if (sign)
        folded_i8((const i8_t *)a, (const i8_t *)b, (i8_t *)dst, n, k, mode, hi);
    else
        folded_u8((const u8_t *)a, (const u8_t *)b, (u8_t *)dst, n, k, mode, hi);
}
#endif

/* ---- lookup ---- */

/* what a byte of the type is xored with to index a line (synet_qadd_plan.line): a signed one plus 128 */
SYNET_INLINE int sign_flip(int type) { return type == SYNET_QADD_I8 ? 0x80 : 0; }

#if SYNET_AVX512
/* dst = lut[(a_byte << 8) | b_byte] by 16-lane dword gathers (the table is padded so every 4-byte read
   stays inside it), keeping the low byte; with a line (mode 0), line[wa * a' + wb * b'] gathered from its
   832 bytes, which stay in L1 where the 64 KiB table does not */
SYNET_INLINE __m512i lut_index(__m128i a, __m128i b, const int mode, __m512i ca, __m512i cb, const int line,
                               __m512i wa, __m512i wb, __m512i fa, __m512i fb)
{
    if (line)
        return _mm512_add_epi32(_mm512_mullo_epi32(_mm512_xor_si512(_mm512_cvtepu8_epi32(a), fa), wa),
                                _mm512_mullo_epi32(_mm512_xor_si512(_mm512_cvtepu8_epi32(b), fb), wb));
    const __m512i ia = mode == 1 ? ca : _mm512_slli_epi32(_mm512_cvtepu8_epi32(a), 8);
    const __m512i ib = mode == 2 ? cb : _mm512_cvtepu8_epi32(b);
    return _mm512_or_si512(ia, ib);
}

SYNET_INLINE void lut_loop(const synet_qadd_plan *p, const uint8_t *a, const uint8_t *b, uint8_t *dst, synet_size n,
                           const int mode, const int line)
{
    const __m512i ca = _mm512_set1_epi32(mode == 1 ? (int)a[0] << 8 : 0);
    const __m512i cb = _mm512_set1_epi32(mode == 2 ? (int)b[0] : 0);
    const __m512i wa = _mm512_set1_epi32(p->line_wa), wb = _mm512_set1_epi32(p->line_wb);
    const __m512i fa = _mm512_set1_epi32(sign_flip(p->a_type)), fb = _mm512_set1_epi32(sign_flip(p->b_type));
    const void *table = line ? (const void *)p->line : (const void *)p->lut;
    const __m128i zero = _mm_setzero_si128();
    synet_size i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m128i va = mode != 1 ? _mm_loadu_si128((const __m128i *)(a + i)) : zero;
        const __m128i vb = mode != 2 ? _mm_loadu_si128((const __m128i *)(b + i)) : zero;
        const __m512i g = _mm512_i32gather_epi32(lut_index(va, vb, mode, ca, cb, line, wa, wb, fa, fb), table, 1);
        _mm_storeu_si128((__m128i *)(dst + i), _mm512_cvtepi32_epi8(g));
    }
    if (i < n) {
        const __mmask16 mask = (__mmask16)_bzhi_u32(0xFFFFu, (unsigned)(n - i));
        const __m128i va = mode != 1 ? _mm_maskz_loadu_epi8(mask, a + i) : zero;
        const __m128i vb = mode != 2 ? _mm_maskz_loadu_epi8(mask, b + i) : zero;
        const __m512i g = _mm512_mask_i32gather_epi32(
            _mm512_setzero_si512(), mask, lut_index(va, vb, mode, ca, cb, line, wa, wb, fa, fb), table, 1);
        _mm_mask_storeu_epi8((void *)(dst + i), mask, _mm512_cvtepi32_epi8(g));
    }
}

static void lut_row(const synet_qadd_plan *p, const uint8_t *a, const uint8_t *b, uint8_t *dst, synet_size n,
                    int mode)
{
    if (mode == 1)
        lut_loop(p, a, b, dst, n, 1, 0);
    else if (mode == 2)
        lut_loop(p, a, b, dst, n, 2, 0);
    else if (p->line)
        lut_loop(p, a, b, dst, n, 0, 1);
    else
        lut_loop(p, a, b, dst, n, 0, 0);
}
#else
static void lut_row(const synet_qadd_plan *p, const uint8_t *a, const uint8_t *b, uint8_t *dst, synet_size n,
                    int mode)
{
    const uint8_t *lut = p->lut;
    if (mode == 1) {
        const uint8_t *t = lut + ((synet_size)a[0] << 8);
        for (synet_size i = 0; i < n; ++i)
            dst[i] = t[b[i]];
    } else if (mode == 2) {
        const uint8_t *t = lut + b[0];
        for (synet_size i = 0; i < n; ++i)
            dst[i] = t[(synet_size)a[i] << 8];
    } else {
        for (synet_size i = 0; i < n; ++i)
            dst[i] = lut[((synet_size)a[i] << 8) | b[i]];
    }
}
#endif

/* ---- per-position constants (synet_qadd_lanes): the formulas above, constants indexed per output ---- */

/* v[i] = float32(a'[i] + b'[i]) with the constants of position j + i; a scalar operand is dequantised per
   output (its constants change), giving the bits VALUES gives with one channel's constants */
/* the scale arguments of position i (LANE_VALUES' arrays) */
#define LANE_DOUBLE_A(i) sa[i]
#define LANE_DOUBLE_B(i) sb[i]
#define LANE_FLOAT_A(i) fa[i], fal[i]
#define LANE_FLOAT_B(i) fb[i], fbl[i]
#define LANE_VALUES(A, B, ACC, KA, KB)                                                                            \
    static void lane_values_##A##_##B##_##ACC(const A##_t *a, const B##_t *b, float *v, synet_size n,          \
                                              const synet_qadd_lanes *L, synet_size j, int a_scalar,           \
                                              int b_scalar)                                                    \
    {                                                                                                            \
        const double *restrict sa = L->a_scale + j, *restrict sb = L->b_scale + j;                               \
        const float *restrict fa = L->fa_scale + j, *restrict fal = L->fa_scale_low + j;                        \
        const float *restrict fb = L->fb_scale + j, *restrict fbl = L->fb_scale_low + j;                        \
        const int *restrict za = L->a_zero + j, *restrict zb = L->b_zero + j;                                    \
        (void)sa, (void)sb, (void)fa, (void)fal, (void)fb, (void)fbl;                                            \
        if (a_scalar) {                                                                                          \
            const A##_t x = a[0];                                                                                \
            for (synet_size i = 0; i < n; ++i)                                                                   \
                v[i] = (float)SUM_##A(deq_##A##_##ACC(x, KA(i), za[i]), deq_##B##_##ACC(b[i], KB(i), zb[i]));    \
        } else if (b_scalar) {                                                                                   \
            const B##_t y = b[0];                                                                                \
            for (synet_size i = 0; i < n; ++i)                                                                   \
                v[i] = (float)SUM_##A(deq_##A##_##ACC(a[i], KA(i), za[i]), deq_##B##_##ACC(y, KB(i), zb[i]));    \
        } else {                                                                                                 \
            for (synet_size i = 0; i < n; ++i)                                                                   \
                v[i] = (float)SUM_##A(deq_##A##_##ACC(a[i], KA(i), za[i]), deq_##B##_##ACC(b[i], KB(i), zb[i])); \
        }                                                                                                        \
    }
#define LANE_VALUES_BOTH(A, B)                                 \
    LANE_VALUES(A, B, double, LANE_DOUBLE_A, LANE_DOUBLE_B)    \
    LANE_VALUES(A, B, float, LANE_FLOAT_A, LANE_FLOAT_B)
LANE_VALUES_BOTH(u8, u8)
LANE_VALUES_BOTH(u8, i8)
LANE_VALUES_BOTH(u8, f32)
LANE_VALUES_BOTH(i8, u8)
LANE_VALUES_BOTH(i8, i8)
LANE_VALUES_BOTH(i8, f32)
LANE_VALUES_BOTH(f32, u8)
LANE_VALUES_BOTH(f32, i8)
LANE_VALUES_BOTH(f32, f32)

#define LANE_QUANTIZE(T)                                                                                      \
    static void lane_quantize_##T(const float *v, T##_t *dst, synet_size n, const synet_qadd_lanes *L,         \
                                  synet_size j, float lo, float hi)                                           \
    {                                                                                                         \
        const float *restrict pre = L->q_pre + j, *restrict inv = L->q_inv + j, *restrict zero = L->q_zero + j; \
        for (synet_size i = 0; i < n; ++i)                                                                    \
            dst[i] = (T##_t)clamp_round(synet_exact_fma(v[i] * pre[i], inv[i], zero[i]), lo, hi);             \
    }
LANE_QUANTIZE(u8)
LANE_QUANTIZE(i8)

/* n generic outputs from flat index `first`, position j of the period */
#define LANE_GENERIC(A, B, OUT)                                                                                \
    static void lane_generic_##A##_##B##_##OUT(const synet_qadd_plan *p, synet_size j, const void *a_,          \
                                               const void *b_, void *dst_, synet_size n, synet_size first)      \
    {                                                                                                          \
        const A##_t *a = (const A##_t *)a_;                                                                    \
        const B##_t *b = (const B##_t *)b_;                                                                    \
        OUT##_t *dst = (OUT##_t *)dst_;                                                                        \
        float buf[BLOCK];                                                                                      \
        for (synet_size off = 0; off < n; off += BLOCK) {                                                      \
            const synet_size m = SYNET_MIN((synet_size)BLOCK, n - off);                                        \
            float *v = sizeof(OUT##_t) == 4 ? (float *)(void *)(dst + off) : buf;                              \
            const A##_t *ao = p->a_scalar ? a : a + off;                                                       \
            const B##_t *bo = p->b_scalar ? b : b + off;                                                       \
            if (p->float_values)                                                                               \
                lane_values_##A##_##B##_float(ao, bo, v, m, p->lanes, j + off, p->a_scalar, p->b_scalar);      \
            else                                                                                               \
                lane_values_##A##_##B##_double(ao, bo, v, m, p->lanes, j + off, p->a_scalar, p->b_scalar);     \
            synet_activate_block(v, m, p->act, p->act_params, first + off, p->prelu_inner, p->prelu_channels); \
            LANE_QUANTIZE_##OUT(v, dst + off, m, p->lanes, j + off);                                           \
        }                                                                                                      \
    }
#define LANE_QUANTIZE_f32(v, d, m, L, j) (void)0
#define LANE_QUANTIZE_u8(v, d, m, L, j) lane_quantize_u8(v, d, m, L, j, 0.0f, 255.0f)
#define LANE_QUANTIZE_i8(v, d, m, L, j) lane_quantize_i8(v, d, m, L, j, -128.0f, 127.0f)
#define LANE_GENERIC_OUT(A, B) LANE_GENERIC(A, B, u8) LANE_GENERIC(A, B, i8) LANE_GENERIC(A, B, f32)
LANE_GENERIC_OUT(u8, u8)
LANE_GENERIC_OUT(u8, i8)
LANE_GENERIC_OUT(u8, f32)
LANE_GENERIC_OUT(i8, u8)
LANE_GENERIC_OUT(i8, i8)
LANE_GENERIC_OUT(i8, f32)
LANE_GENERIC_OUT(f32, u8)
LANE_GENERIC_OUT(f32, i8)
LANE_GENERIC_OUT(f32, f32)

typedef void (*lane_generic_row)(const synet_qadd_plan *, synet_size, const void *, const void *, void *, synet_size,
                                 synet_size);

static const lane_generic_row LANE_GENERIC_ROWS[3][3][3] = {
    {{lane_generic_u8_u8_u8, lane_generic_u8_u8_i8, lane_generic_u8_u8_f32},
     {lane_generic_u8_i8_u8, lane_generic_u8_i8_i8, lane_generic_u8_i8_f32},
     {lane_generic_u8_f32_u8, lane_generic_u8_f32_i8, lane_generic_u8_f32_f32}},
    {{lane_generic_i8_u8_u8, lane_generic_i8_u8_i8, lane_generic_i8_u8_f32},
     {lane_generic_i8_i8_u8, lane_generic_i8_i8_i8, lane_generic_i8_i8_f32},
     {lane_generic_i8_f32_u8, lane_generic_i8_f32_i8, lane_generic_i8_f32_f32}},
    {{lane_generic_f32_u8_u8, lane_generic_f32_u8_i8, lane_generic_f32_u8_f32},
     {lane_generic_f32_i8_u8, lane_generic_f32_i8_i8, lane_generic_f32_i8_f32},
     {lane_generic_f32_f32_u8, lane_generic_f32_f32_i8, lane_generic_f32_f32_f32}},
};

/* folded, constants per position: clamp_round(fma(a, ka, fma(b, kb, kc)), lo, hi), the value every folded
   path computes (their rounding and saturation equal clamp_round where the planner allows them) */
#define LANE_FOLDED(T)                                                                                        \
    static void lane_folded_##T(const T##_t *a, const T##_t *b, T##_t *dst, synet_size n,                     \
                                const synet_qadd_lanes *L, synet_size j, int mode, float hi)                  \
    {                                                                                                         \
        const float *restrict ka = L->ka + j, *restrict kb = L->kb + j, *restrict kc = L->kc + j;             \
        const float *restrict lo = L->lo + j;                                                                 \
        if (mode == 1) {                                                                                      \
            const float c = (float)a[0];                                                                      \
            for (synet_size i = 0; i < n; ++i) {                                                              \
                const float t = synet_exact_fma((float)b[i], kb[i], kc[i]);                                   \
                dst[i] = (T##_t)clamp_round(synet_exact_fma(c, ka[i], t), lo[i], hi);                         \
            }                                                                                                 \
        } else if (mode == 2) {                                                                               \
            const float c = (float)b[0];                                                                      \
            for (synet_size i = 0; i < n; ++i) {                                                              \
                const float t = synet_exact_fma(c, kb[i], kc[i]);                                             \
                dst[i] = (T##_t)clamp_round(synet_exact_fma((float)a[i], ka[i], t), lo[i], hi);               \
            }                                                                                                 \
        } else {                                                                                              \
            for (synet_size i = 0; i < n; ++i) {                                                              \
                const float t = synet_exact_fma((float)b[i], kb[i], kc[i]);                                   \
                dst[i] = (T##_t)clamp_round(synet_exact_fma((float)a[i], ka[i], t), lo[i], hi);               \
            }                                                                                                 \
        }                                                                                                     \
    }
LANE_FOLDED(u8)
LANE_FOLDED(i8)

/* n outputs of one row from flat index `first`, positions j.. of the period (j + n <= period) */
static void run_lanes(const synet_qadd_plan *p, synet_size j, const char *a, const char *b, char *dst, synet_size n,
                      synet_size first)
{
    const int mode = p->a_scalar ? 1 : (p->b_scalar ? 2 : 0);
    if (p->mode == SYNET_QADD_FOLDED) {
        if (p->dst_type == SYNET_QADD_I8)
            lane_folded_i8((const i8_t *)a, (const i8_t *)b, (i8_t *)dst, n, p->lanes, j, mode, 127.0f);
        else
            lane_folded_u8((const u8_t *)a, (const u8_t *)b, (u8_t *)dst, n, p->lanes, j, mode, 255.0f);
        return;
    }
    LANE_GENERIC_ROWS[type_slot(p->a_type)][type_slot(p->b_type)][type_slot(p->dst_type)](p, j, a, b, dst, n, first);
}

/* ---- the walk ---- */

/* n outputs of one row from flat index `first`, all of one quantisation channel, by the plan's kernel */
static void run_kernel(const synet_qadd_plan *p, const synet_qadd_consts *k, const char *a, const char *b, char *dst,
                       synet_size n, synet_size first, int stream)
{
    const int mode = p->a_scalar ? 1 : (p->b_scalar ? 2 : 0);
    if (p->mode == SYNET_QADD_FOLDED) {
        folded_row(a, b, dst, n, k, mode, p->dst_type == SYNET_QADD_I8, stream,
                   p->dst_type == SYNET_QADD_I8 ? 127.0f : 255.0f);
        return;
    }
    if (p->mode == SYNET_QADD_LOOKUP) {
        lut_row(p, (const uint8_t *)a, (const uint8_t *)b, (uint8_t *)dst, n, mode);
        return;
    }
    const synet_size done = fused_row(p, k, a, b, dst, n); /* then the rest */
    if (done < n)
        GENERIC_ROWS[type_slot(p->a_type)][type_slot(p->b_type)][type_slot(p->dst_type)](
            p, k, p->a_scalar ? a : a + done * type_size(p->a_type),
            p->b_scalar ? b : b + done * type_size(p->b_type), dst + done * type_size(p->dst_type), n - done,
            first + done);
}

/* ---- row tables (AVX-512 levels, on CPUs with AVX512-VBMI) ---- */

#if SYNET_AVX512 && defined(__GNUC__) && defined(__x86_64__)
#include <cpuid.h>
#include <stdlib.h>

#include "listed.h"
#define ROW_TABLES 1
#define VBMI __attribute__((target("avx512vbmi")))

/* whether the CPU has AVX512-VBMI (CPUID 7.0 ECX bit 1; the AVX-512 level has checked the OS's ZMM state) and
   SYNET_DISABLE_CPU_FEATURES (a comma-separated list, read once) does not name it "avx512vbmi" */
static int cpu_has_vbmi(void)
{
    static int answer = -1; /* idempotent: threads that race compute the same value */
    int known = __atomic_load_n(&answer, __ATOMIC_RELAXED);
    if (known < 0) {
        unsigned a, b, c = 0, d;
        known = __get_cpuid_count(7, 0, &a, &b, &c, &d) && ((c >> 1) & 1) &&
                !synet_listed(getenv("SYNET_DISABLE_CPU_FEATURES"), "avx512vbmi");
        __atomic_store_n(&answer, known, __ATOMIC_RELAXED);
    }
    return known;
}

/* Row outputs from which a row table beats the plan's kernel on the whole row (u8 + per-channel u8, one
   thread, crossovers measured between 256 and 1023 outputs a row): generic 256-392 (GELU in float64, ~22 ns
   an output; HSWISH 256-392 too), folded 512-784; the lookup kernel's is a row of its table, nothing to
   compute (rows of 49 outputs: 0.35-0.54 ns an output against its gathers' 0.77-0.84; of 16: even). */
#define LOOKUP_ROW_MIN 32
static synet_size row_table_min(int mode)
{
    return mode == SYNET_QADD_GENERIC ? 320 : (mode == SYNET_QADD_FOLDED ? 640 : LOOKUP_ROW_MIN);
}

/* Whether a row of n outputs depends on one operand's byte only: the other operand is one value along the
   row, the output is 1-byte, and the activation does not depend on the position (every one but PRELU). */
static int row_table_applies(const synet_qadd_plan *p, synet_size n)
{
    const int varying = p->a_scalar ? p->b_type : p->a_type;
    return (p->a_scalar ^ p->b_scalar) && n >= row_table_min(p->mode) && varying != SYNET_QADD_F32 &&
           p->dst_type != SYNET_QADD_F32 && p->act != SYNET_ACT_PRELU && cpu_has_vbmi();
}

/* table[x] for the 4 vectors of a row table (bytes 0..255 of the varying operand, raw bits): indices 0-127
   by one vpermi2b over the first two, 128-255 over the last two, chosen by the index's top bit */
VBMI SYNET_INLINE __m512i row_table_lookup(__m512i x, const __m512i t[4])
{
    const __m512i low = _mm512_permutex2var_epi8(t[0], x, t[1]);
    const __m512i high = _mm512_permutex2var_epi8(t[2], x, t[3]);
    return _mm512_mask_blend_epi8(_mm512_movepi8_mask(x), low, high);
}

/* The stores of a row of table lookups: n outputs into out, 64 a step: a head up to out's cache line, then
   aligned stores (streamed when `stream`, then an sfence), then a masked tail. STEP(MASK, AT): the 64 outputs
   at AT, their operands loaded under MASK (all ones in the loops: the compiler loads them unmasked). */
#define LOOKUP_STORES(OUT, N, STREAM, STEP)                                                                  \
    do {                                                                                                      \
        const synet_size head_ = SYNET_MIN((N), (synet_size)((64 - (uintptr_t)(OUT) % 64) % 64));            \
        synet_size i_ = 0;                                                                                    \
        if (head_) {                                                                                          \
            const __mmask64 mask_ = _bzhi_u64(~0ULL, (unsigned)head_);                                        \
            _mm512_mask_storeu_epi8((void *)(OUT), mask_, STEP(mask_, 0));                                    \
            i_ = head_;                                                                                       \
        }                                                                                                     \
        if (STREAM) {                                                                                         \
            for (; i_ + 64 <= (N); i_ += 64)                                                                  \
                _mm512_stream_si512((__m512i *)((OUT) + i_), STEP(~0ULL, i_));                                \
            _mm_sfence();                                                                                     \
        } else {                                                                                              \
            for (; i_ + 64 <= (N); i_ += 64)                                                                  \
                _mm512_store_si512((__m512i *)((OUT) + i_), STEP(~0ULL, i_));                                 \
        }                                                                                                     \
        if (i_ < (N)) {                                                                                       \
            const __mmask64 mask_ = _bzhi_u64(~0ULL, (unsigned)((N) - i_));                                   \
            _mm512_mask_storeu_epi8((void *)((OUT) + i_), mask_, STEP(mask_, i_));                            \
        }                                                                                                     \
    } while (0)

/* n outputs of the varying operand's bytes x looked up in `table`, 64 a step (aligned stores; streamed when
   `stream`) */
VBMI static void row_table_lookups(const uint8_t *x, const uint8_t *table, uint8_t *out, synet_size n, int stream)
{
    __m512i t[4];
    for (int r = 0; r < 4; ++r)
        t[r] = _mm512_loadu_si512((const void *)(table + 64 * r));
#define ROW_STEP(MASK, AT) row_table_lookup(_mm512_maskz_loadu_epi8(MASK, x + (AT)), t)
    LOOKUP_STORES(out, n, stream, ROW_STEP);
#undef ROW_STEP
}

/* Whether a row goes by line_lookups: a lookup plan with a line (synet_qadd_plan.line), both operands varying */
static int line_applies(const synet_qadd_plan *p)
{
    return p->line && !p->a_scalar && !p->b_scalar && cpu_has_vbmi();
}

/* line[wa * a' + wb * b'] of 64 pairs of bytes (a', b': signed ones already flipped). The index's low byte is the
   wrapped byte sum; its bits 8 and 9 are the sum of two carries, that of doubling the operand of weight 2 (its
   top bit) and that of the last add (the sum below an addend): their xor and their and. vpermi2b looks the low
   7 bits up in each 128-byte pair of the line's registers; blends on bits 7, 8 and 9 choose the pair (wa + wb
   = 2: indices below 512, 8 registers; 3: below 768, 12). */
VBMI SYNET_INLINE __m512i line_lookup(__m512i va, __m512i vb, const int wa, const int wb, const __m512i t[12])
{
    const __m512i x = wa == 2 ? _mm512_add_epi8(va, va) : va, y = wb == 2 ? _mm512_add_epi8(vb, vb) : vb;
    const __mmask64 doubled = wa == 2 ? _mm512_movepi8_mask(va) : (wb == 2 ? _mm512_movepi8_mask(vb) : 0);
    const __m512i low = _mm512_add_epi8(x, y);
    const __mmask64 added = _mm512_cmplt_epu8_mask(low, y);
    const __mmask64 b7 = _mm512_movepi8_mask(low), b8 = _kxor_mask64(doubled, added);
    __m512i r = _mm512_mask_blend_epi8(b7, _mm512_permutex2var_epi8(t[0], low, t[1]),
                                       _mm512_permutex2var_epi8(t[2], low, t[3]));
    r = _mm512_mask_blend_epi8(b8, r,
                               _mm512_mask_blend_epi8(b7, _mm512_permutex2var_epi8(t[4], low, t[5]),
                                                      _mm512_permutex2var_epi8(t[6], low, t[7])));
    if (wa + wb == 3)
        r = _mm512_mask_blend_epi8(_kand_mask64(doubled, added), r,
                                   _mm512_mask_blend_epi8(b7, _mm512_permutex2var_epi8(t[8], low, t[9]),
                                                          _mm512_permutex2var_epi8(t[10], low, t[11])));
    return r;
}

/* n outputs of a row that line_applies to, 64 a step (a head up to dst's cache line first; streamed stores
   when `stream`), with the line's weights wa, wb constants */
VBMI SYNET_INLINE void line_loop(const synet_qadd_plan *p, const uint8_t *a, const uint8_t *b, uint8_t *dst,
                                 synet_size n, const int wa, const int wb)
{
    __m512i t[12];
    for (int r = 0; r < 12; ++r)
        t[r] = r < 4 * (wa + wb) ? _mm512_loadu_si512((const void *)(p->line + 64 * r)) : _mm512_setzero_si512();
    const __m512i fa = _mm512_set1_epi8((char)sign_flip(p->a_type));
    const __m512i fb = _mm512_set1_epi8((char)sign_flip(p->b_type));
#define LINE_STEP(MASK, AT)                                                                                       \
    line_lookup(_mm512_xor_si512(_mm512_maskz_loadu_epi8(MASK, a + (AT)), fa),                                     \
                _mm512_xor_si512(_mm512_maskz_loadu_epi8(MASK, b + (AT)), fb), wa, wb, t)
    LOOKUP_STORES(dst, n, p->stream, LINE_STEP);
#undef LINE_STEP
}

/* the lookup kernel's row by its line: per 64 outputs 2 loads and flips, 2 or 3 byte adds, 4 mask operations,
   4 or 6 permutes and their blends, against 4 gathers from 64 KiB (Q9 0.37 -> 0.117 ms) */
VBMI static void line_lookups(const synet_qadd_plan *p, const uint8_t *a, const uint8_t *b, uint8_t *dst,
                              synet_size n)
{
    if (p->line_wa == 2)
        line_loop(p, a, b, dst, n, 2, 1);
    else if (p->line_wb == 2)
        line_loop(p, a, b, dst, n, 1, 2);
    else
        line_loop(p, a, b, dst, n, 1, 1);
}

/* A row that row_table_applies to: its own kernel computes the outputs of all 256 byte values of the
   varying operand into a table (so the same bits as running it on the row), then the row's outputs are
   looked up: 2 permutes and a blend per 64 outputs instead of the kernel's arithmetic (Q6, the folded u8
   kernel with a per-channel b: 4 conversions, 4 FMAs, 4 conversions back and 4 packs or shuffles). */
static void row_table_run(const synet_qadd_plan *p, const synet_qadd_consts *k, const char *a, const char *b,
                          char *dst, synet_size n, synet_size first)
{
    const uint8_t *x = (const uint8_t *)(p->a_scalar ? b : a);
    if (p->lut) { /* a row of the plan's table: a's (b varies), or of its transposed half */
        const uint8_t c = *(const uint8_t *)(p->a_scalar ? a : b);
        row_table_lookups(x, p->lut + (p->a_scalar ? 0 : 65536) + ((synet_size)c << 8), (uint8_t *)dst, n, p->stream);
        return;
    }
    _Alignas(64) uint8_t bytes[256], table[256];
    for (int i = 0; i < 256; ++i)
        bytes[i] = (uint8_t)i;
    run_kernel(p, k, p->a_scalar ? a : (const char *)bytes, p->a_scalar ? (const char *)bytes : b, (char *)table,
               256, first, 0);
    row_table_lookups(x, table, (uint8_t *)dst, n, p->stream);
}
#endif

/* n outputs of one row from flat index `first`, all of one quantisation channel */
static void run(const synet_qadd_plan *p, const synet_qadd_consts *k, const char *a, const char *b, char *dst,
                synet_size n, synet_size first)
{
#ifdef ROW_TABLES
    if (row_table_applies(p, n)) {
        row_table_run(p, k, a, b, dst, n, first);
        return;
    }
    if (line_applies(p)) {
        line_lookups(p, (const uint8_t *)a, (const uint8_t *)b, (uint8_t *)dst, n);
        return;
    }
#endif
    run_kernel(p, k, a, b, dst, n, first, p->stream);
}

/* outputs start..stop, row segment by row segment (and channel by channel when per axis) */
static void tile(const synet_qadd_plan *p, const void *a, const void *b, void *dst, synet_size start,
                 synet_size stop)
{
    const synet_size ea = type_size(p->a_type), eb = type_size(p->b_type), ed = type_size(p->dst_type);
    synet_size pos = start;
    while (pos < stop) {
        const synet_size row = pos / p->inner, col = pos - row * p->inner;
        synet_size count = SYNET_MIN(p->inner - col, stop - pos);
        synet_size ao = p->a_scalar ? 0 : col, bo = p->b_scalar ? 0 : col, r = row;
        for (synet_size d = p->rank - 1; d >= 0; --d) {
            const synet_size i = r % p->outer_shape[d];
            r /= p->outer_shape[d];
            ao += i * p->a_strides[d];
            bo += i * p->b_strides[d];
        }
        if (p->lanes) { /* up to the end of the period */
            const synet_size j = pos % p->lanes->period;
            count = SYNET_MIN(count, p->lanes->period - j);
            run_lanes(p, j, (const char *)a + ao * ea, (const char *)b + bo * eb, (char *)dst + pos * ed, count, pos);
            pos += count;
            continue;
        }
        synet_size channel = 0;
        if (p->nchan > 1) { /* up to the next channel boundary */
            channel = pos / p->chan_inner % p->nchan;
            count = SYNET_MIN(count, p->chan_inner - pos % p->chan_inner);
        }
        run(p, p->consts + channel, (const char *)a + ao * ea, (const char *)b + bo * eb, (char *)dst + pos * ed,
            count, pos);
        pos += count;
    }
}

const synet_qadd_kernels SYNET_LEVEL_NAME(synet_qadd_kernels) = {SYNET_STR(SYNET_LEVEL_SUFFIX), tile};
