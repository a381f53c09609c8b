/* GatherElements kernels, compiled once per CPU level (see common.h).
 *
 * The work is split into tasks of whole rows of dst (at least one row of `inner`, about TILE
 * elements), or of row blocks x strips of 32 columns, so each element is written by one task and the
 * result does not depend on the thread count. Small slices go several to a task; strips are for 1-byte
 * elements of a small enough slice (AVX-512, see strip_u8) and wider ones of a slice too large for L2
 * (the portable loop, see wide_strip). With AVX-512, index math runs in vectors; elements are then loaded
 * by vpgather, except on CPUs whose vpgather is slow (AMD's; see synet_cpu_vector_gather_fast): scalar
 * loads 32 at a time there (scalar32, ELEMENTS16; strip_u8 too). An index in range as it is (a flat one,
 * set_index's offsets, or from a run's start rows whose inner divides 32 or is a multiple of it) loads 4- and
 * 8-byte elements by scalar loads everywhere (direct32, direct_rows).
 */
/* At avx2 the portable loop's auto-vectorised index work (normalise, range check, the blocks' index copies) in
   128-bit vectors: AMD Zen 1 splits each 256-bit operation in two and crosses lanes slowly (vperm2i128 packs the
   64-bit compares), which made the avx2 build slower than the baseline one (G2 1.28 vs 1.10 ms). One thread,
   separate processes: G1 6.6 -> 5.65 ms (mean of 16 placements of its arrays), G2 1.28 -> 1.04, G3 4.62 -> 3.46,
   G4 0.59 -> 0.42. (Before the includes, so that every function of the file has the same target options.) */
#if defined(__AVX2__) && !defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC target("prefer-vector-width=128")
#endif
#include "gather.h"

#include <stdlib.h>

#include "vector.h"

#define TILE 4096                  /* dst elements per task (at least one row of `inner`) */
#define STRIP_INDEX_BYTES (1 << 20) /* index bytes of one row block of the 1-byte strip gather */
#define AHEAD_MAX 16384            /* bytes: a task gathering a whole slice up to this prefetches the next one */
#define STRIP_COLS 32              /* columns of a strip */
#define WIDE_STRIP_SOURCE (128 << 10) /* bytes: the most a strip copy of 2- to 8-byte elements takes */
#define STRIP_BLOCK 8              /* rows of a strip gathered together */
#define STRIP_AHEAD 16             /* rows: how far ahead a strip prefetches its index */

#if SYNET_AVX512
#define INDEX_PREFETCH 4096 /* bytes: measured 5-10% faster on G1-G3 */
#define STRIP_BYTES 32768

/* 16 indices (or int32 offsets) as int32 lanes as they are, lanes m (0 elsewhere). int64 indices narrow
   with saturation, so one outside int32 stays out of range. */
SYNET_INLINE __m512i raw16(const void *idx, int idx64, __mmask16 m)
{
    if (!idx64)
        return _mm512_maskz_loadu_epi32(m, idx);
    const int64_t *p = (const int64_t *)idx;
    const __m256i lo = _mm512_cvtsepi64_epi32(_mm512_maskz_loadu_epi64((__mmask8)m, p));
    const __m256i hi = _mm512_cvtsepi64_epi32(_mm512_maskz_loadu_epi64((__mmask8)(m >> 8), p + 8));
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* 16 indices as int32 lanes, negatives counted from the end (`offsets`: int32 src offsets, taken as they
   are); *ok: the lanes of m inside [0, count). */
SYNET_INLINE __m512i index16(const void *idx, int idx64, int offsets, __mmask16 m, __m512i count, __mmask16 *ok)
{
    __m512i ic = raw16(idx, idx64 && !offsets, m);
    if (!offsets)
        ic = _mm512_mask_add_epi32(ic, _mm512_movepi32_mask(ic), ic, count);
    *ok = m & _mm512_cmplt_epu32_mask(ic, count);
    return ic;
}

/* The element offsets of 16 lanes of m: norm(idx[j]) * inner + pos[j], an out-of-range lane's index
   clamped to count - 1 (so every offset is inside src); *ok: the lanes of m in range. */
SYNET_INLINE __m512i offsets16(const void *idx, int idx64, int offsets, __mmask16 m, __m512i count, synet_size inner,
                               __m512i vinner, __m512i pos, __mmask16 *ok)
{
    __m512i ic = index16(idx, idx64, offsets, m, count, ok);
    ic = _mm512_min_epu32(ic, _mm512_sub_epi32(count, _mm512_set1_epi32(1)));
    return _mm512_add_epi32(inner == 1 ? ic : _mm512_mullo_epi32(ic, vinner), pos);
}

/* One step: dst[j] = src element at norm(idx[j]) * inner + pos[j] for the lanes j of m; returns how
   many were out of range (they write 0). `offsets`: idx holds int32 src offsets, still checked.
   An out-of-range lane gathers element count - 1 and is zeroed afterwards, so the gather mask is
   known before the index arrives (G4 with set_index 1.4x faster than masking with the check). */
SYNET_INLINE int gather16(const void *src, const void *idx, int idx64, int offsets, void *dst, int width,
                          __mmask16 m, __m512i count, synet_size inner, __m512i vinner, __m512i pos, __m512i last,
                          __m128i wshift)
{
    __mmask16 ok;
    const __m512i off = offsets16(idx, idx64, offsets, m, count, inner, vinner, pos, &ok);
    if (width == 4) {
        const __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, off, src, 4);
        _mm512_mask_storeu_epi32(dst, m, _mm512_maskz_mov_epi32(ok, v));
    } else if (width == 8) {
        const __m512i v0 =
            _mm512_mask_i32gather_epi64(_mm512_setzero_si512(), (__mmask8)m, _mm512_castsi512_si256(off), src, 8);
        const __m512i v1 = _mm512_mask_i32gather_epi64(_mm512_setzero_si512(), (__mmask8)(m >> 8),
                                                       _mm512_extracti64x4_epi64(off, 1), src, 8);
        _mm512_mask_storeu_epi64(dst, (__mmask8)m, _mm512_maskz_mov_epi64((__mmask8)ok, v0));
        _mm512_mask_storeu_epi64((char *)dst + 64, (__mmask8)(m >> 8), _mm512_maskz_mov_epi64((__mmask8)(ok >> 8), v1));
    } else { /* narrow elements: the aligned-down dword that stays inside src, shifted */
        const __m512i byte = _mm512_sll_epi32(off, wshift);
        const __m512i at = _mm512_min_epu32(byte, last);
        __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, at, src, 1);
        v = _mm512_maskz_mov_epi32(ok, _mm512_srlv_epi32(v, _mm512_slli_epi32(_mm512_sub_epi32(byte, at), 3)));
        if (width == 2)
            _mm256_mask_storeu_epi16(dst, m, _mm512_cvtepi32_epi16(v));
        else
            _mm_mask_storeu_epi8(dst, m, _mm512_cvtepi32_epi8(v));
    }
    return __builtin_popcount((unsigned)(m & ~ok));
}

/* Whether all 32 indices (or offsets) at idx are in [0, count) as they are: no negative to count from the end,
   none out of range. */
SYNET_INLINE int all_in_range32(const void *idx, const int idx_size, synet_size count)
{
    if (idx_size == 4) {
        const __m512i c = _mm512_set1_epi32((int)count);
        return (_mm512_cmplt_epu32_mask(_mm512_loadu_si512(idx), c) &
                _mm512_cmplt_epu32_mask(_mm512_loadu_si512((const char *)idx + 64), c)) == 0xFFFF;
    }
    const __m512i c = _mm512_set1_epi64(count);
    __mmask8 ok = 0xFF;
    for (int q = 0; q < 4; ++q)
        ok &= _mm512_cmplt_epu64_mask(_mm512_loadu_si512((const char *)idx + 64 * q), c);
    return ok == 0xFF;
}

/* The caller's arrays need not be aligned to their element size (NumPy allows that; dask's frames give such
   arrays): the portable loops access elements and indices through types of alignment 1. */
#define SCALAR_LOOP(INDEX, ELEM, AT)                                                                       \
    {                                                                                                      \
        typedef ELEM elem_u __attribute__((aligned(1)));                                                   \
        typedef INDEX index_u __attribute__((aligned(1), unused));                                           \
        _Pragma("GCC unroll 32") for (int j = 0; j < 32; ++j)                                              \
            ((elem_u *)dst)[j] = ((const elem_u *)src)[AT];                                                \
    }

/* 4-byte elements two at a time: both loaded, stored as one 8-byte word (3 memory operations a pair, 4 with
   8-byte indices, against 6: G4 with set_index 0.89x the time); A and B: the offsets of elements j and j + 1
   (two int32 offsets read as one word: the compiler loads it once for both) */
#define PAIR_LOOP(A, B)                                                                                    \
    {                                                                                                      \
        typedef uint32_t elem_u __attribute__((aligned(1)));                                               \
        typedef uint64_t pair_u __attribute__((aligned(1)));                                               \
        typedef int64_t offset_u __attribute__((aligned(1), unused));                                       \
        _Pragma("GCC unroll 16") for (int j = 0; j < 32; j += 2) {                                         \
            const uint64_t a_ = ((const elem_u *)src)[A], b_ = ((const elem_u *)src)[B];                  \
            ((pair_u *)dst)[j / 2] = a_ | b_ << 32;                                                        \
        }                                                                                                  \
    }

/* 32 4- or 8-byte elements of a run whose indices are all in range as they are, by scalar loads, returning 1; 0
   (nothing done) when one is not. period 0: dst[j] = src[idx[j]] (a flat index or set_index's offsets; G2 0.51 ->
   0.44 ms, G4 without set_index 0.305 -> 0.25 ms on AMD; vpgather measured 1.05x slower on Intel); else rows of
   `inner` with step 1, whose columns repeat every `period` lanes (32: the 32 lanes are columns side by side, src
   at the first one's): dst[j] = src[idx[j] * inner + j % period] (G5, rows of 4: 0.83-0.87x the time on AMD Zen 4). */
SYNET_INLINE int direct32(const void *src, const void *idx, const int idx_size, void *dst, const int width,
                          synet_size count, synet_size inner, const int period)
{
#define ROW_AT(I, J) (period ? (I) * inner + (J) % period : (I))
    if (!all_in_range32(idx, idx_size, count))
        return 0;
    if (width == 4 && idx_size == 4)
        PAIR_LOOP(ROW_AT((uint32_t)((const pair_u *)idx)[j / 2], j), ROW_AT(((const pair_u *)idx)[j / 2] >> 32, j + 1))
    else if (width == 4)
        PAIR_LOOP(ROW_AT(((const offset_u *)idx)[j], j), ROW_AT(((const offset_u *)idx)[j + 1], j + 1))
    else if (idx_size == 4)
        SCALAR_LOOP(int32_t, uint64_t, ROW_AT(((const index_u *)idx)[j], j))
    else
        SCALAR_LOOP(int64_t, uint64_t, ROW_AT(((const index_u *)idx)[j], j))
#undef ROW_AT
    return 1;
}
#undef SCALAR_LOOP
#undef PAIR_LOOP

/* OUT[j] = SRC[offset j] for the 16 uint32 offsets in O's lanes, by scalar loads and stores of ELEM: the
   offsets move to general registers two at a time (a vector store of them and 16 loads back waited on the
   store: G3 0.56 -> 0.38 ns an element in cache); volatile stores, or GCC merges them into vector inserts */
#define ELEMENT_PAIR(ELEM, SRC, OUT, Q, K)                                                                   \
    {                                                                                                        \
        typedef ELEM pair_u __attribute__((aligned(1)));                                                     \
        const uint64_t q_ = (Q);                                                                             \
        ((volatile pair_u *)(OUT))[K] = ((const pair_u *)(SRC))[(uint32_t)q_];                               \
        ((volatile pair_u *)(OUT))[(K) + 1] = ((const pair_u *)(SRC))[q_ >> 32];                             \
    }
#define ELEMENTS4(ELEM, SRC, Q, OUT, K)                                                                      \
    ELEMENT_PAIR(ELEM, SRC, OUT, (uint64_t)_mm_cvtsi128_si64(Q), K)                                          \
    ELEMENT_PAIR(ELEM, SRC, OUT, (uint64_t)_mm_extract_epi64(Q, 1), (K) + 2)
#define ELEMENTS16(ELEM, SRC, O, OUT)                                                                        \
    {                                                                                                        \
        ELEMENTS4(ELEM, SRC, _mm512_castsi512_si128(O), OUT, 0)                                              \
        ELEMENTS4(ELEM, SRC, _mm512_extracti32x4_epi32(O, 1), OUT, 4)                                        \
        ELEMENTS4(ELEM, SRC, _mm512_extracti32x4_epi32(O, 2), OUT, 8)                                        \
        ELEMENTS4(ELEM, SRC, _mm512_extracti32x4_epi32(O, 3), OUT, 12)                                       \
    }
#define ELEMENTS32(ELEM, SRC, O0, O1, OUT)                                                                   \
    {                                                                                                        \
        ELEMENTS16(ELEM, SRC, O0, OUT)                                                                       \
        ELEMENTS16(ELEM, SRC, O1, (char *)(OUT) + 16 * sizeof(ELEM))                                         \
    }

/* gather16 twice, 32 full lanes, as scalar loads, where vpgather is slow (AMD's vpgatherdd loads about one
   element a cycle): the offsets computed in vectors (clamped into src) and moved to general registers,
   out-of-range lanes zeroed afterwards (G1 2.1 -> 1.8 ms on AMD, 1.5x slower than vpgather on Intel's
   Emerald Rapids). */
SYNET_INLINE int scalar32(const void *src, const void *idx, const int idx_size, const int offsets, void *dst,
                          const int width, __m512i vcount, synet_size inner, __m512i vinner, __m512i pos0,
                          __m512i pos1)
{
    __mmask16 ok0, ok1;
    const __m512i o0 = offsets16(idx, idx_size == 8, offsets, 0xFFFF, vcount, inner, vinner, pos0, &ok0);
    const __m512i o1 = offsets16((const char *)idx + 16 * idx_size, idx_size == 8, offsets, 0xFFFF, vcount, inner,
                                 vinner, pos1, &ok1);
    if (width == 1)
        ELEMENTS32(uint8_t, src, o0, o1, dst)
    else if (width == 2)
        ELEMENTS32(uint16_t, src, o0, o1, dst)
    else if (width == 4)
        ELEMENTS32(uint32_t, src, o0, o1, dst)
    else
        ELEMENTS32(uint64_t, src, o0, o1, dst)
    const uint32_t bad = ~((uint32_t)ok1 << 16 | ok0);
    if (bad && width == 1)
        _mm256_mask_storeu_epi8(dst, bad, _mm256_setzero_si256());
    else if (bad && width == 2)
        _mm512_mask_storeu_epi16(dst, bad, _mm512_setzero_si512());
    else if (bad) {
        for (int q = 0; q < 2 * width / 4; ++q) { /* 64-byte quarters of dst */
            if (width == 4)
                _mm512_mask_storeu_epi32((char *)dst + 64 * q, (__mmask16)(bad >> (16 * q)), _mm512_setzero_si512());
            else
                _mm512_mask_storeu_epi64((char *)dst + 64 * q, (__mmask8)(bad >> (8 * q)), _mm512_setzero_si512());
        }
    }
    return __builtin_popcount(bad);
}

/* The lanes' columns 16 elements on: pos + advance, less span where that reaches it (pos < span, advance <
   span: once at most) */
SYNET_INLINE __m512i next_pos(__m512i pos, __m512i advance, __m512i span)
{
    const __m512i p = _mm512_add_epi32(pos, advance);
    return _mm512_mask_sub_epi32(p, _mm512_cmpge_epi32_mask(p, span), p, span);
}

/* The prefetches of a run's block at k: ahead[*a:] in steps of ahead_step bytes (*a: how far it got), the index
   INDEX_PREFETCH bytes ahead of the block (inside it only) */
SYNET_INLINE void prefetch_block(const char *ahead, synet_size *a, synet_size ahead_step, synet_size ahead_bytes,
                                 const void *idx, synet_size idx_bytes, synet_size k, const int idx_size)
{
    for (synet_size end = *a + ahead_step; *a < end && *a < ahead_bytes; *a += 64)
        _mm_prefetch(ahead + *a, _MM_HINT_T0);
    for (synet_size line = 0; line < 32 * idx_size; line += 64)
        if (k * idx_size + INDEX_PREFETCH + line < idx_bytes) /* inside the index only */
            _mm_prefetch((const char *)idx + k * idx_size + INDEX_PREFETCH + line, _MM_HINT_T0);
}

/* The blocks of 32 of a run of rows of len elements (gather_row's, step 1, len a multiple of 32 or a divisor of
   it: `period` 32 or len) from k = 0 by direct32 while their indices are in range as they are; returns where it
   stopped. The columns of a block's lanes repeat every `period` lanes, from column k mod len (c). gather_row's loop does the rest: trying each block there, and falling back to
   scalar32 where one failed, cost G1 (half its indices negative) 1.06x its time. */
SYNET_INLINE synet_size direct_rows(const char *src, const void *idx, synet_size idx_bytes, void *dst, synet_size n,
                                    synet_size len, synet_size count, synet_size inner, const char *ahead,
                                    synet_size *a, synet_size ahead_step, synet_size ahead_bytes, const int width,
                                    const int idx_size, const int period)
{
    synet_size k = 0, c = 0;
    for (; k + 32 <= n; k += 32) {
        prefetch_block(ahead, a, ahead_step, ahead_bytes, idx, idx_bytes, k, idx_size);
        const char *ik = (const char *)idx + k * idx_size;
        char *dk = (char *)dst + k * width;
        const int done = period == 32   ? direct32(src + c * width, ik, idx_size, dk, width, count, inner, 32)
                         : period == 16 ? direct32(src, ik, idx_size, dk, width, count, inner, 16)
                         : period == 8  ? direct32(src, ik, idx_size, dk, width, count, inner, 8)
                         : period == 4  ? direct32(src, ik, idx_size, dk, width, count, inner, 4)
                                        : direct32(src, ik, idx_size, dk, width, count, inner, 2);
        if (!done)
            break;
        if (period == 32 && (c += 32) == len)
            c = 0;
    }
    return k;
}

/* dst[k] = src[norm(idx[k]) * inner + (k mod row_len) * step] for k < n (a run of rows of row_len elements, or
   one row: row_len >= n) in blocks of 32 (direct32 first for rows that allow it: direct_rows; then direct32,
   scalar32 unless `vector_gather`, or two gathers in flight: G2 6-10% faster than one). ahead[0:ahead_bytes],
   the next task's source, is prefetched in equal parts per iteration: random reads inside a small slice defeat
   the hardware prefetcher (G4 1.26x, G2 1.06x faster). idx[n:idx_bytes / idx_size] is more index of the task
   (prefetched too). Returns the out-of-range count. */
SYNET_INLINE synet_size gather_row(const void *src, synet_size src_bytes, const void *idx, synet_size idx_bytes,
                                   void *dst, synet_size n, synet_size row_len, synet_size count, synet_size inner,
                                   synet_size step, const char *ahead, synet_size ahead_bytes, const int width,
                                   const int idx_size, const int offsets, const int inner1, const int vector_gather)
{
    const int idx64 = idx_size == 8;
    const __m512i vcount = _mm512_set1_epi32((int)count), vinner = _mm512_set1_epi32((int)inner);
    const synet_size len = row_len < n ? row_len : n; /* (lanes past n are masked) */
    const __m512i advance = _mm512_set1_epi32((int)(16 % len * step)), span = _mm512_set1_epi32((int)(len * step));
    const __m512i last = _mm512_set1_epi32((int)((src_bytes < 0x7FFFFFFF ? src_bytes : 0x7FFFFFFF) - 4));
    const __m128i wshift = _mm_cvtsi32_si128(width == 2);
    /* pos: (k mod len) * step of the 16 lanes at hand; a step of 16 lanes wraps a lane once at most */
    __m512i pos = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                     _mm512_set1_epi32((int)step));
    for (synet_size q = len; q < 16; q += len)
        pos = _mm512_mask_sub_epi32(pos, _mm512_cmpge_epi32_mask(pos, span), pos, span);
    const synet_size ahead_step = ((ahead_bytes * 32 + n - 1) / n + 63) & ~(synet_size)63;
    synet_size bad = 0, a = 0, k = 0;
    const int rows = !inner1 && !offsets && width >= 4 && step == 1;
    const int period = !rows ? 0 : len % 32 == 0 ? 32 : 32 % len == 0 && len > 1 ? (int)len : 0;
    if (period) { /* pos at k: column k mod len on (0 where len divides 32; lanes j < 16 do not wrap) */
        k = direct_rows((const char *)src, idx, idx_bytes, dst, n, len, count, inner, ahead, &a, ahead_step,
                        ahead_bytes, width, idx_size, period);
        pos = _mm512_add_epi32(pos, _mm512_set1_epi32((int)(k % len)));
    }
    for (; k < n; k += 32) {
        prefetch_block(ahead, &a, ahead_step, ahead_bytes, idx, idx_bytes, k, idx_size);
        const __mmask32 m = n - k >= 32 ? 0xFFFFFFFFu : (__mmask32)((1ull << (n - k)) - 1);
        if (m == 0xFFFFFFFFu) {
            const char *ik = (const char *)idx + k * idx_size;
            char *dk = (char *)dst + k * width;
            const __m512i pos1 = next_pos(pos, advance, span);
            int done = inner1 && width >= 4 && direct32(src, ik, idx_size, dk, width, count, 1, 0);
            if (!done && !vector_gather) {
                bad += scalar32(src, ik, idx_size, offsets, dk, width, vcount, inner1 ? 1 : inner, vinner, pos, pos1);
                done = 1;
            }
            if (done) {
                pos = next_pos(pos1, advance, span);
                continue;
            }
        }
        bad += gather16(src, (const char *)idx + k * idx_size, idx64, offsets, (char *)dst + k * width, width,
                        (__mmask16)m, vcount, inner1 ? 1 : inner, vinner, pos, last, wshift);
        pos = next_pos(pos, advance, span);
        if (m >> 16)
            bad += gather16(src, (const char *)idx + (k + 16) * idx_size, idx64, offsets,
                            (char *)dst + (k + 16) * width, width, (__mmask16)(m >> 16), vcount, inner1 ? 1 : inner,
                            vinner, pos, last, wshift);
        pos = next_pos(pos, advance, span);
    }
    return bad;
}

/* 4-byte elements with inner 1 from slices of at most TABLE_MAX: the slice is held in up to 16 registers
   and each output looked up among them, by vpermt2ps on pairs of registers (the index's low 5 bits) and
   blends on its bits 5 to 7, instead of three memory operations an element (G2 0.27 -> 0.12 ms). `pairs`:
   1, 2, 4 or 8 pairs of registers, the fewest that hold `count` elements. */
#define TABLE_MAX 256

SYNET_INLINE __m512i table_lookup(const __m512i t[16], __m512i i, const int pairs)
{
    const __m512i b5 = _mm512_set1_epi32(32), b6 = _mm512_set1_epi32(64), b7 = _mm512_set1_epi32(128);
    if (pairs == 1)
        return _mm512_permutex2var_epi32(t[0], i, t[1]);
    const __mmask16 h5 = _mm512_test_epi32_mask(i, b5);
    const __m512i q0 = _mm512_mask_blend_epi32(h5, _mm512_permutex2var_epi32(t[0], i, t[1]),
                                               _mm512_permutex2var_epi32(t[2], i, t[3]));
    if (pairs == 2)
        return q0;
    const __mmask16 h6 = _mm512_test_epi32_mask(i, b6);
    const __m512i q1 = _mm512_mask_blend_epi32(h5, _mm512_permutex2var_epi32(t[4], i, t[5]),
                                               _mm512_permutex2var_epi32(t[6], i, t[7]));
    const __m512i w0 = _mm512_mask_blend_epi32(h6, q0, q1);
    if (pairs == 4)
        return w0;
    const __m512i q2 = _mm512_mask_blend_epi32(h5, _mm512_permutex2var_epi32(t[8], i, t[9]),
                                               _mm512_permutex2var_epi32(t[10], i, t[11]));
    const __m512i q3 = _mm512_mask_blend_epi32(h5, _mm512_permutex2var_epi32(t[12], i, t[13]),
                                               _mm512_permutex2var_epi32(t[14], i, t[15]));
    return _mm512_mask_blend_epi32(_mm512_test_epi32_mask(i, b7), w0, _mm512_mask_blend_epi32(h6, q2, q3));
}

/* 16 lookups of the index (or offsets) at ir, lanes m: out-of-range lanes give 0 and are counted in
   the lanes of *badv (no mask moves to general registers in the loop) */
SYNET_INLINE __m512i table16(const __m512i t[16], const char *ir, const int idx_size, const int offsets,
                             __mmask16 m, __m512i vcount, __m512i *badv, const int pairs)
{
    __mmask16 ok;
    const __m512i ic = index16(ir, idx_size == 8, offsets, m, vcount, &ok);
    *badv = _mm512_mask_add_epi32(*badv, m & ~ok, *badv, _mm512_set1_epi32(1));
    return _mm512_maskz_mov_epi32(ok, table_lookup(t, ic, pairs));
}

/* gather_loop's rows by table_lookup: the registers loaded for each slice (once when src_step is 0). A row
   is looked up as its indices are, a negative one counted from the end (for a count that fills the
   registers, its low bits already are), while their minimum and maximum are kept; a row with one out of
   range is done again lane-checked (table16): a mask per step took 1.45x longer in a standalone loop. */
SYNET_INLINE synet_size table_loop(const char *src, synet_size src_step, const void *idx, void *dst, synet_size n,
                                   synet_size row_step, synet_size rows, synet_size count, const int idx_size,
                                   const int offsets, const int pairs)
{
    const __m512i vcount = _mm512_set1_epi32((int)count);
    const int wraps = count == (synet_size)(32 * pairs); /* idx mod count is its low bits */
    __m512i t[16] = {0}, badv = _mm512_setzero_si512();
    for (synet_size r = 0; r < rows; ++r) {
        for (int k = 0; k < 2 * pairs && (r == 0 || src_step); ++k) /* masked: nothing read past the slice */
            t[k] = _mm512_maskz_loadu_epi32(synet_mask16((int64_t)count - 16 * k), src + r * src_step + 64 * k);
        if (src_step && r + 1 < rows) /* the next slice's registers, while this one's lookups run */
            for (synet_size line = 0; line < count * 4; line += 64)
                _mm_prefetch(src + (r + 1) * src_step + line, _MM_HINT_T0);
        const char *ir = (const char *)idx + r * row_step * idx_size;
        uint32_t *dr = (uint32_t *)dst + r * row_step;
        __m512i low = _mm512_setzero_si512(), high = _mm512_setzero_si512();
        /* a head up to a cache line of dst first: NumPy's buffers start 16 or 32 bytes into one, and stores
           across lines cost */
        const synet_size head = SYNET_MIN(n, (synet_size)((64 - ((uintptr_t)dr & 63)) & 63) / 4);
/* the 16 lookups from K, lanes MASK (0xFFFF: a whole vector, unmasked) */
#define TABLE_STEP(K, MASK)                                                                                    \
    do {                                                                                                       \
        __m512i ic = raw16(ir + (K) * idx_size, idx_size == 8, MASK);                                          \
        low = _mm512_min_epi32(low, ic);                                                                       \
        high = _mm512_max_epi32(high, ic);                                                                     \
        if (!offsets && !wraps)                                                                                \
            ic = _mm512_add_epi32(ic, _mm512_and_si512(_mm512_srai_epi32(ic, 31), vcount));                    \
        if ((MASK) == 0xFFFF)                                                                                  \
            _mm512_storeu_si512(dr + (K), table_lookup(t, ic, pairs));                                         \
        else                                                                                                   \
            _mm512_mask_storeu_epi32(dr + (K), MASK, table_lookup(t, ic, pairs));                              \
    } while (0)
        /* the head and the tail masked, whole vectors between without a mask or a test (a step computed,
           masked and tested each time: 14 scalar instructions a vector, G2 1.3x the time) */
        if (head)
            TABLE_STEP(0, synet_mask16(head));
        synet_size k = head;
        for (; k + 16 <= n; k += 16)
            TABLE_STEP(k, 0xFFFF);
        if (k < n)
            TABLE_STEP(k, synet_mask16(n - k));
#undef TABLE_STEP
        if (_mm512_reduce_max_epi32(high) >= (int)count ||
            _mm512_reduce_min_epi32(low) < (offsets ? 0 : -(int)count)) /* again, lane-checked */
            for (synet_size k = 0; k < n; k += 16) {
                const __mmask16 m = synet_mask16(n - k);
                _mm512_mask_storeu_epi32(dr + k, m, table16(t, ir + k * idx_size, idx_size, offsets, m, vcount, &badv,
                                                            pairs));
            }
    }
    return _mm512_reduce_add_epi32(badv);
}

/* `rows` runs of gather_row, each n elements of idx and dst and src_step bytes of src further on (the rows
   of one slice: src_step 0; whole slices: their size); row r prefetches ahead_bytes of the source after its
   own, the last row only when ahead_last. Instantiated per constant width, index size, offsets and
   inner == 1 (gather_simd), so neither the loop nor the rows carry a per-step branch or dispatch (G1:
   8192 rows of 256 a call; G4: 8 slices of 512 a task, 0.23 -> 0.19 ms). */
SYNET_INLINE synet_size gather_loop(const char *src, synet_size src_bytes, synet_size src_step, const void *idx,
                                    synet_size idx_bytes, void *dst, synet_size n, synet_size row_len,
                                    synet_size row_step, synet_size rows, synet_size count, synet_size inner,
                                    synet_size step, synet_size ahead_bytes,
                                    int ahead_last, const int width, const int idx_size, const int offsets,
                                    const int inner1, int vector_gather)
{
    if (width == 4 && inner1 && count <= TABLE_MAX) {
        const int pairs = count <= 32 ? 1 : count <= 64 ? 2 : count <= 128 ? 4 : 8;
        if (pairs == 1)
            return table_loop(src, src_step, idx, dst, n, row_step, rows, count, idx_size, offsets, 1);
        if (pairs == 2)
            return table_loop(src, src_step, idx, dst, n, row_step, rows, count, idx_size, offsets, 2);
        if (pairs == 4)
            return table_loop(src, src_step, idx, dst, n, row_step, rows, count, idx_size, offsets, 4);
        return table_loop(src, src_step, idx, dst, n, row_step, rows, count, idx_size, offsets, 8);
    }
    synet_size bad = 0;
    for (synet_size r = 0; r < rows; ++r)
        bad += gather_row(src + r * src_step, src_bytes - r * src_step, (const char *)idx + r * row_step * idx_size,
                          idx_bytes - r * row_step * idx_size, (char *)dst + r * row_step * width, n, row_len,
                          count, inner, step, src + (r + 1) * src_step, r + 1 < rows || ahead_last ? ahead_bytes : 0, width,
                          idx_size, offsets, inner1, vector_gather);
    return bad;
}

#define LOOP_CASE(W, X, O, I1)                                                                                 \
    case ((W) * 16 + (X) * 2 + (O)) * 2 + (I1):                                                                \
        return gather_loop(src, src_bytes, src_step, idx, idx_bytes, dst, n, row_len, row_step, rows, count, inner,  \
                           step, ahead_bytes, ahead_last, W, X, O, I1, vector_gather);
#define LOOP_CASES_W(W) LOOP_CASE(W, 4, 0, 0) LOOP_CASE(W, 4, 0, 1) LOOP_CASE(W, 8, 0, 0) LOOP_CASE(W, 8, 0, 1) \
    LOOP_CASE(W, 4, 1, 0) LOOP_CASE(W, 4, 1, 1)

/* gather_loop for the case at hand, or -1 when offsets do not fit int32 or a row's source is under 4 bytes */
static synet_size gather_simd(const char *src, synet_size src_bytes, synet_size src_step, const void *idx,
                              int idx_size, int offsets, synet_size idx_bytes, void *dst, int width, synet_size n,
                              synet_size row_len, synet_size row_step, synet_size rows, synet_size count,
                              synet_size inner, synet_size step, synet_size ahead_bytes, int ahead_last,
                              int vector_gather)
{
    if (count * inner * width > 0x7FFFFFFF || src_bytes - (rows - 1) * src_step < 4 || (offsets && idx_size != 4))
        return -1;
    switch (((width * 16 + idx_size * 2 + (offsets != 0)) * 2) + (inner == 1)) {
        LOOP_CASES_W(1)
        LOOP_CASES_W(2)
        LOOP_CASES_W(4)
        LOOP_CASES_W(8)
    default:
        return -1;
    }
}

/* whether a slice of `count` rows of `inner` 1-byte elements gathers strip by strip */
static int strips_apply(synet_size count, synet_size inner) { return inner >= 32 && count * 32 <= STRIP_BYTES; }

/* 1-byte elements, inner >= 32: rows c_begin..c_end of the strip of 32 columns s0..s0+31 gather
   from a copy of that strip of src ([count][32] bytes), which stays in L1, instead of from random
   rows of the whole slice in L2; the index of the rows ahead is prefetched (G3 1.90 -> 1.31 ms). */
SYNET_INLINE synet_size strip_u8_of(const uint8_t *src, const void *idx, const int idx_size, uint8_t *dst,
                                    synet_size c_begin, synet_size c_end, synet_size count, synet_size inner,
                                    synet_size s0, const int vector_gather)
{
    uint8_t buf[STRIP_BYTES + 64] __attribute__((aligned(64)));
    const int idx64 = idx_size == 8;
    const synet_size cols = inner - s0 < 32 ? inner - s0 : 32, ahead = 6 * inner * idx_size;
    const __mmask32 kc = cols == 32 ? 0xFFFFFFFFu : (1u << cols) - 1;
    const __mmask16 k0 = (__mmask16)kc, k1 = (__mmask16)(kc >> 16);
    const __m512i vcount = _mm512_set1_epi32((int)count);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i lane16 = _mm512_add_epi32(lane, _mm512_set1_epi32(16));
    synet_size bad = 0;
    for (synet_size c = 0; c < count; c++)
        _mm256_store_si256((__m256i *)(buf + c * 32), _mm256_maskz_loadu_epi8(kc, src + c * inner + s0));
    memset(buf + count * 32, 0, 64); /* the dword read at the last byte runs 3 bytes past it */
    for (synet_size c = c_begin; c < c_end; c++) {
        const char *ip = (const char *)idx + (c * inner + s0) * idx_size;
        __mmask16 ok0, ok1;
        if (c + 7 < c_end) /* this task's index 6 rows ahead */
            for (int line = 0; line < 4 * idx_size / 8 + 1; ++line)
                _mm_prefetch(ip + ahead + 64 * line, _MM_HINT_T0);
        const __m512i i0 = index16(ip, idx64, 0, k0, vcount, &ok0);
        const __m512i i1 = index16(ip + 16 * idx_size, idx64, 0, k1, vcount, &ok1);
        bad += __builtin_popcount((unsigned)(k0 & ~ok0)) + __builtin_popcount((unsigned)(k1 & ~ok1));
        if (vector_gather) { /* the dword at byte c' * 32 + column holds the element in its low byte */
            const __m512i v0 = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), ok0,
                                                           _mm512_add_epi32(_mm512_slli_epi32(i0, 5), lane), buf, 1);
            const __m512i v1 = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), ok1,
                                                           _mm512_add_epi32(_mm512_slli_epi32(i1, 5), lane16), buf, 1);
            _mm256_mask_storeu_epi8(dst + c * inner + s0, kc,
                                    _mm256_inserti128_si256(_mm256_castsi128_si256(_mm512_cvtepi32_epi8(v0)),
                                                            _mm512_cvtepi32_epi8(v1), 1));
            continue;
        }
        /* scalar loads: the offsets of the lanes in range, 0 for the others, moved to general registers */
        const __m512i o0 = _mm512_maskz_add_epi32(ok0, _mm512_slli_epi32(i0, 5), lane);
        const __m512i o1 = _mm512_maskz_add_epi32(ok1, _mm512_slli_epi32(i1, 5), lane16);
        const __mmask32 ok = (__mmask32)ok1 << 16 | ok0;
        uint8_t *d = dst + c * inner + s0;
        if (cols == 32) {
            ELEMENTS32(uint8_t, buf, o0, o1, d)
            if (ok != kc)
                _mm256_mask_storeu_epi8(d, kc & ~ok, _mm256_setzero_si256());
        } else {
            uint8_t b[32] __attribute__((aligned(32)));
            ELEMENTS32(uint8_t, buf, o0, o1, b)
            _mm256_mask_storeu_epi8(d, kc, _mm256_maskz_mov_epi8(ok, _mm256_load_si256((const __m256i *)b)));
        }
    }
    return bad;
}

/* strip_u8_of with the index size a constant (G3 1.3x faster than with it a variable); at a cache line
   (its loop's place in the line moved G3 by 5-7 % between builds) */
__attribute__((aligned(64))) static synet_size strip_u8(const uint8_t *src, const void *idx, int idx_size,
                                                        uint8_t *dst, synet_size c_begin, synet_size c_end,
                                                        synet_size count, synet_size inner, synet_size s0,
                                                        int vector_gather)
{
    if (vector_gather)
        return idx_size == 8 ? strip_u8_of(src, idx, 8, dst, c_begin, c_end, count, inner, s0, 1)
                             : strip_u8_of(src, idx, 4, dst, c_begin, c_end, count, inner, s0, 1);
    if (idx_size == 8)
        return strip_u8_of(src, idx, 8, dst, c_begin, c_end, count, inner, s0, 0);
    return strip_u8_of(src, idx, 4, dst, c_begin, c_end, count, inner, s0, 0);
}
#else
static synet_size gather_simd(const char *src, synet_size src_bytes, synet_size src_step, const void *idx,
                              int idx_size, int offsets, synet_size idx_bytes, void *dst, int width, synet_size n,
                              synet_size row_len, synet_size row_step, synet_size rows, synet_size count,
                              synet_size inner, synet_size step, synet_size ahead_bytes, int ahead_last,
                              int vector_gather)
{
    (void)src, (void)src_bytes, (void)src_step, (void)idx, (void)idx_size, (void)offsets, (void)idx_bytes, (void)dst;
    (void)width, (void)n, (void)row_len, (void)row_step, (void)rows, (void)count, (void)inner, (void)step, (void)ahead_bytes;
    (void)ahead_last, (void)vector_gather;
    return -1;
}
static int strips_apply(synet_size count, synet_size inner)
{
    (void)count, (void)inner;
    return 0;
}
static synet_size strip_u8(const uint8_t *src, const void *idx, int idx_size, uint8_t *dst, synet_size c_begin,
                           synet_size c_end, synet_size count, synet_size inner, synet_size s0, int vector_gather)
{
    (void)src, (void)idx, (void)idx_size, (void)dst, (void)c_begin, (void)c_end, (void)count, (void)inner, (void)s0;
    (void)vector_gather;
    return 0;
}
#endif

/* The portable loop: dst[k] = src[norm(idx[k]) * inner + COL(k) * step] for k0 <= k < k1 (COL(k): the column
   of element k); norm adds `count` to a negative index (not to `offsets`), without a branch (random signs: G1
   at avx2 10.1 -> 5.0 ms); an index still outside [0, count) is counted and gives 0. */
#define PORTABLE_LOOP(ELEM, NORMALISE, K0, K1, COL)                                                            \
    for (synet_size k = (K0); k < (K1); ++k) {                                                                 \
        synet_size ic = (synet_size)idx[k];                                                                    \
        if (NORMALISE)                                                                                         \
            ic += (ic >> 63) & count;                                                                          \
        const int ok = (size_t)ic < (size_t)count;                                                             \
        bad += !ok;                                                                                            \
        const ELEM v = src[(ok ? ic : count - 1) * inner + (COL(k)) * step]; /* always in range */            \
        dst[k] = ok ? v : 0;                                                                                   \
    }
/* Blocks of 32 while they fit: a block whose indices are all in range (negatives counted from the end)
   without a per-element check or select, another one by PORTABLE_LOOP. Flat runs (inner 1, step 0: an index
   or set_index's offsets) test the indices as they are and load dst[k] = src[idx[k]] (G2 at avx2 0.86 -> 0.3
   ms); the others keep the normalised indices of the block for the loads (G1 at avx2 5.8 -> 2.9 ms, G3 2.9 ->
   1.2 ms). COL(k) as in PORTABLE_LOOP, for k in the block; NEXT_BLOCK steps what COL reads to the next. */
#define PORTABLE_BLOCKS(ELEM, COL, NEXT_BLOCK)                                                                 \
    for (; k0 + 32 <= n; k0 += 32) {                                                                           \
        const synet_size k1 = k0 + 32;                                                                         \
        synet_size ic[32];                                                                                         \
        int all = 1;                                                                                           \
        if (inner == 1 && step == 0) {                                                                         \
            for (int j = 0; j < 32; ++j)                                                                       \
                all &= (size_t)idx[k0 + j] < (size_t)count;                                                   \
            if (all) {                                                                                         \
                _Pragma("GCC unroll 32") for (int j = 0; j < 32; ++j) dst[k0 + j] = src[idx[k0 + j]];          \
                NEXT_BLOCK;                                                                                    \
                continue;                                                                                      \
            }                                                                                                  \
        } else { /* (offsets come in flat runs only) */                                                        \
            for (int j = 0; j < 32; ++j) {                                                                     \
                synet_size v = (synet_size)idx[k0 + j];                                                        \
                v += (v >> 63) & count;                                                                        \
                all &= (size_t)v < (size_t)count;                                                              \
                ic[j] = v;                                                                                     \
            }                                                                                                  \
            if (all) {                                                                                         \
                _Pragma("GCC unroll 32") for (int j = 0; j < 32; ++j)                                          \
                    dst[k0 + j] = src[ic[j] * inner + (COL(k0 + j)) * step];                                   \
                NEXT_BLOCK;                                                                                    \
                continue;                                                                                      \
            }                                                                                                  \
        }                                                                                                      \
        if (offsets)                                                                                           \
            PORTABLE_LOOP(ELEM, 0, k0, k1, COL)                                                                \
        else                                                                                                   \
            PORTABLE_LOOP(ELEM, 1, k0, k1, COL)                                                                \
        NEXT_BLOCK;                                                                                            \
    }                                                                                                          \
    if (offsets)                                                                                               \
        PORTABLE_LOOP(ELEM, 0, k0, n, COL)                                                                     \
    else                                                                                                       \
        PORTABLE_LOOP(ELEM, 1, k0, n, COL)
/* column[j] = j mod row_len for j < 64, counted (64 divisions cost a call ~0.3 us on AMD Zen 1); out of line, so
   that the gather loops around it compile as they would without it */
__attribute__((noinline)) static void column_table(uint8_t column[64], synet_size row_len)
{
    for (int j = 0, c = 0; j < 64; ++j, c = c + 1 == row_len ? 0 : c + 1)
        column[j] = (uint8_t)c;
}
#define COLUMN_OF_RUN(k) (k)
#define COLUMN_OF_ROWS(k) (column[col0 + (k) - k0])
/* A run of n elements: one row (row_len >= n), or rows of row_len <= 32 (the columns from a table of
   j mod row_len, its start moved on a block at a time). */
#define PORTABLE_RUN(ELEM, INDEX)                                                                               \
    static synet_size run_##ELEM##_##INDEX(const void *src_, const void *idx_, void *dst_, synet_size n,       \
                                           synet_size row_len, synet_size count, synet_size inner,             \
                                           synet_size step, int offsets)                                       \
    {                                                                                                          \
        typedef ELEM elem_u __attribute__((aligned(1))); /* (see SCALAR_LOOP) */                               \
        typedef INDEX index_u __attribute__((aligned(1)));                                                     \
        const elem_u *src = (const elem_u *)src_;                                                              \
        const index_u *idx = (const index_u *)idx_;                                                            \
        elem_u *dst = (elem_u *)dst_;                                                                          \
        synet_size bad = 0, k0 = 0;                                                                            \
        if (row_len >= n) {                                                                                    \
            PORTABLE_BLOCKS(ELEM, COLUMN_OF_RUN, (void)0)                                                      \
            return bad;                                                                                        \
        }                                                                                                      \
        uint8_t column[64];                                                                                    \
        column_table(column, row_len);                                                                         \
        synet_size col0 = 0; /* the column of k0 */                                                           \
        const synet_size advance = 32 % row_len;                                                               \
        PORTABLE_BLOCKS(ELEM, COLUMN_OF_ROWS, col0 = col0 + advance - (col0 + advance >= row_len ? row_len : 0)) \
        return bad;                                                                                            \
    }
PORTABLE_RUN(uint8_t, int32_t)
PORTABLE_RUN(uint8_t, int64_t)
PORTABLE_RUN(uint16_t, int32_t)
PORTABLE_RUN(uint16_t, int64_t)
PORTABLE_RUN(uint32_t, int32_t)
PORTABLE_RUN(uint32_t, int64_t)
PORTABLE_RUN(uint64_t, int32_t)
PORTABLE_RUN(uint64_t, int64_t)

typedef synet_size (*portable_run)(const void *, const void *, void *, synet_size, synet_size, synet_size,
                                   synet_size, synet_size, int);

static portable_run portable_of(int elem_size, int index_size)
{
    const int i64 = index_size == 8;
    switch (elem_size) {
    case 1:
        return i64 ? run_uint8_t_int64_t : run_uint8_t_int32_t;
    case 2:
        return i64 ? run_uint16_t_int64_t : run_uint16_t_int32_t;
    case 4:
        return i64 ? run_uint32_t_int64_t : run_uint32_t_int32_t;
    default:
        return i64 ? run_uint64_t_int64_t : run_uint64_t_int32_t;
    }
}

/* `rows` runs of n elements, each n further on in idx and dst and src_step bytes further on in src: idx[:idx_left]
   is the index the task has left; each row prefetches ahead_bytes of the source after it (the last row only
   when ahead_last). */
static synet_size run(const synet_gather_job *j, const char *src, synet_size src_bytes, synet_size src_step,
                      const char *idx, synet_size idx_left, char *dst, synet_size n, synet_size row_len,
                      synet_size row_step, synet_size rows, synet_size count, synet_size inner, synet_size step,
                      int offsets, synet_size ahead_bytes, int ahead_last)
{
    synet_size bad = gather_simd(src, src_bytes, src_step, idx, j->index_size, offsets, idx_left * j->index_size, dst,
                                 j->elem_size, n, row_len, row_step, rows, count, inner, step, ahead_bytes, ahead_last,
                                 j->vector_gather);
    if (bad >= 0)
        return bad;
    bad = 0; /* the portable loop: a call a row, or runs of rows of <= 32 */
    const synet_size len = row_len <= 32 ? n : row_len, x = j->index_size, e = j->elem_size;
    for (synet_size r = 0; r < rows; ++r)
        for (synet_size k = 0; k < n; k += len)
            bad += portable_of(j->elem_size, j->index_size)(src + r * src_step, idx + (r * row_step + k) * x,
                                                            dst + (r * row_step + k) * e, SYNET_MIN(len, n - k),
                                                            row_len, count, inner, step, offsets);
    return bad;
}

/* Whole slices b..b + nb of a task whose index slices follow each other, as the rows of one run (with offsets
   the index holds validated src offsets; else inner == 1). */
static synet_size slices(const synet_gather_job *j, synet_size b, synet_size nb)
{
    const synet_size e = j->elem_size, x = j->index_size, row = j->idx_count * j->inner;
    const synet_size slice_bytes = j->src_count * j->inner * e;
    const char *src = (const char *)j->src + b * slice_bytes, *idx = (const char *)j->idx + (b % j->period) * row * x;
    char *dst = (char *)j->dst + b * row * e;
    const synet_size ahead = j->prefetch_next ? slice_bytes : 0;
    if (j->offsets)
        return run(j, src, (j->outer - b) * slice_bytes, slice_bytes, idx, nb * row, dst, row, row, row, nb,
                   j->src_count * j->inner, 1, 0, 1, ahead, b + nb < j->outer);
    return run(j, src, (j->outer - b) * slice_bytes, slice_bytes, idx, nb * row, dst, row, row, row, nb, j->src_count,
               1, 0, 0, ahead, b + nb < j->outer);
}

/* Rows c_begin..c_end of one outer slice, one run: with offsets the index holds validated src offsets (a flat
   run); otherwise a run of rows of `inner` (1: a flat one), so that short rows go 32 elements a step as long
   ones do (rows of 4 float32, one call each: 2.4 ns an element on AMD Zen 5; as one run 0.42 ns). */
static synet_size rows_of_slice(const synet_gather_job *j, const char *src, synet_size src_bytes, const char *idx,
                                char *dst, synet_size c_begin, synet_size c_end)
{
    const synet_size e = j->elem_size, x = j->index_size, inner = j->inner, count = j->src_count;
    const synet_size n = (c_end - c_begin) * inner;
    idx += c_begin * inner * x;
    dst += c_begin * inner * e;
    if (j->offsets)
        return run(j, src, src_bytes, 0, idx, n, dst, n, n, n, 1, count * inner, 1, 0, 1, 0, 0);
    return run(j, src, src_bytes, 0, idx, n, dst, n, inner > 1 ? inner : n, n, 1, count, inner, inner > 1, 0, 0, 0);
}

/* whether a slice of `count` rows of `inner` elements of 2 to 8 bytes gathers strip by strip (wide_strip):
   a slice too large for L2 whose strip copy is not, with index rows enough to pay for the copies; on the
   portable loop only (with AVX-512's vector index math, G1 measured 1.0-1.16x slower by strips) */
static int wide_strips_apply(synet_size count, synet_size inner, synet_size elem_size, synet_size idx_count)
{
    return !SYNET_AVX512 && inner > STRIP_COLS && count * inner * elem_size > WIDE_STRIP_SOURCE &&
           count * STRIP_COLS * elem_size <= WIDE_STRIP_SOURCE && 2 * idx_count >= count;
}

static void prepare(synet_gather_job *j)
{
    const synet_size row = j->idx_count * j->inner, slice_bytes = j->src_count * j->inner * j->elem_size;
    j->rows_per_task = j->inner ? SYNET_MAX(1, TILE / j->inner) : 1;
    j->nstrips = 1;
    j->strips = !j->offsets && (j->elem_size == 1
                                    ? strips_apply(j->src_count, j->inner)
                                    : wide_strips_apply(j->src_count, j->inner, j->elem_size, j->idx_count));
    if (j->strips) {
        j->nstrips = (j->inner + STRIP_COLS - 1) / STRIP_COLS;
        /* rows whose index is about 1 MiB: 1-byte strips read a row block's whole index strip by strip, which
           stays in L2 between its strips (G3 1.13x faster with 512 rows than with 1024), wider ones their
           strip's part of it; >= src_count / 2 rows keep the strip copies <= 2 elements per element gathered */
        const synet_size index_row = (j->elem_size == 1 ? j->inner : STRIP_COLS) * j->index_size;
        j->rows_per_task = SYNET_MAX(SYNET_MAX(j->src_count / 2, STRIP_INDEX_BYTES / index_row), 1);
    }
    j->tasks_per_outer = j->nstrips * ((j->idx_count + j->rows_per_task - 1) / j->rows_per_task);
    /* whole slices (one run each, with offsets or inner == 1) go as the rows of one run; each prefetches the
       next slice's source when it is small */
    j->whole_slices = !j->strips && j->tasks_per_outer == 1 && (j->offsets || j->inner == 1);
    j->prefetch_next = j->whole_slices && slice_bytes <= AHEAD_MAX;
    /* small slices: several whole slices per task (G2: 4096 tasks of 256 -> 256 of 4096, 1.06x faster) */
    j->slices_per_task = j->tasks_per_outer == 1 && row ? SYNET_MAX(1, TILE / row) : 1;
    j->ntasks = (j->outer + j->slices_per_task - 1) / j->slices_per_task * j->tasks_per_outer;
}

/* 2- to 8-byte elements: `rows` rows of the strip of columns s0..s0 + STRIP_COLS - 1 of one slice gather from
   a copy of that strip of src ([count][STRIP_COLS] elements, in L2) instead of from random rows of the whole
   slice, whose power-of-two row strides also crowd a few cache sets (G1 at baseline 3.9 -> 2.3 ms, at avx2
   3.1 -> 2.1 ms). idx and dst: the first row's,
   idx_left elements of index from there. The copy is on the heap (up to 128 KiB: too much for the stacks of
   some threads); without it the strip gathers straight from src. */
static synet_size wide_strip(const synet_gather_job *j, const char *src, const char *idx, synet_size idx_left,
                             char *dst, synet_size rows, synet_size s0)
{
    const synet_size e = j->elem_size, cols = SYNET_MIN((synet_size)STRIP_COLS, j->inner - s0);
    const synet_size words = STRIP_COLS * e / 8; /* of a strip row */
    uint64_t *buf = (uint64_t *)malloc(j->src_count * STRIP_COLS * e);
    if (!buf)
        return run(j, src + s0 * e, j->src_count * j->inner * e - s0 * e, 0, idx, idx_left, dst, cols, cols, j->inner,
                   rows, j->src_count, j->inner, 1, 0, 0, 0);
    for (synet_size c = 0; c < j->src_count; ++c) {
        const char *s = src + (c * j->inner + s0) * e;
        if (c + STRIP_AHEAD < j->src_count) /* (strided rows defeat the hardware prefetcher) */
            for (synet_size b = 0; b < cols * e; b += 64)
                __builtin_prefetch(s + STRIP_AHEAD * j->inner * e + b);
        if (cols == STRIP_COLS)
            for (synet_size w = 0; w < words; ++w)
                memcpy(buf + c * words + w, s + 8 * w, 8);
        else
            memcpy(buf + c * words, s, cols * e);
    }
    synet_size bad = 0;
    const synet_size x = j->index_size, idx_row = j->inner * x, strip_idx = cols * x;
    for (synet_size r0 = 0; r0 < rows; r0 += STRIP_BLOCK) {
        const synet_size nr = SYNET_MIN((synet_size)STRIP_BLOCK, rows - r0);
        /* the index rows STRIP_AHEAD further on: strided rows defeat the hardware prefetcher */
        for (synet_size r = r0 + STRIP_AHEAD; r < SYNET_MIN(r0 + nr + STRIP_AHEAD, rows); ++r)
            for (synet_size b = 0; b < strip_idx; b += 64)
                __builtin_prefetch(idx + r * idx_row + b);
        bad += run(j, (const char *)buf, j->src_count * STRIP_COLS * e, 0, idx + r0 * idx_row,
                   idx_left - r0 * j->inner, dst + r0 * j->inner * e, cols, cols, j->inner, nr, j->src_count, STRIP_COLS,
                   1, 0, 0, 0);
    }
    free(buf);
    return bad;
}

static synet_size task(const synet_gather_job *j, synet_size t)
{
    const synet_size e = j->elem_size, x = j->index_size, row = j->idx_count * j->inner;
    const synet_size slice = j->src_count * j->inner;
    const synet_size first = t / j->tasks_per_outer * j->slices_per_task, part = t % j->tasks_per_outer;
    const synet_size c_begin = (part / j->nstrips) * j->rows_per_task;
    const synet_size c_end = SYNET_MIN(c_begin + j->rows_per_task, j->idx_count);
    const synet_size last = SYNET_MIN(first + j->slices_per_task, j->outer);
    const char *src = (const char *)j->src, *idx = (const char *)j->idx;
    char *dst = (char *)j->dst;
    synet_size bad = 0;
    if (j->whole_slices) { /* in runs of slices whose index slices follow each other (period wraps split them) */
        for (synet_size b = first; b < last;) {
            const synet_size nb = SYNET_MIN(last - b, j->period - b % j->period);
            bad += slices(j, b, nb);
            b += nb;
        }
        return bad;
    }
    for (synet_size b = first; b < last; b++) {
        const char *s = src + b * slice * e, *i = idx + (b % j->period) * row * x;
        char *d = dst + b * row * e;
        const synet_size s0 = (part % j->nstrips) * STRIP_COLS, first_elem = c_begin * j->inner + s0;
        if (j->strips && e == 1)
            bad += strip_u8((const uint8_t *)s, i, j->index_size, (uint8_t *)d, c_begin, c_end, j->src_count, j->inner,
                            s0, j->vector_gather);
        else if (j->strips)
            bad += wide_strip(j, s, i + first_elem * x, row - first_elem, d + first_elem * e, c_end - c_begin, s0);
        else
            bad += rows_of_slice(j, s, (j->outer - b) * slice * e, i, d, c_begin, c_end);
    }
    return bad;
}

const synet_gather_kernels SYNET_LEVEL_NAME(synet_gather_kernels) = {SYNET_STR(SYNET_LEVEL_SUFFIX), prepare, task};
