"""GatherElements (ONNX): dst[b, c, i] = src[b, idx[b, c, i] (+ src_count if negative), i].

The context class `GatherElements` keeps the geometry between `init` and `forward` and, with
`index_const`, an analysed copy of the index: negatives normalised, offsets premultiplied by
`inner`, and only the outer slices that differ. `gather_elements` is the NumPy-style form.
"""

cimport cython
cimport numpy as cnp
from cython.parallel cimport prange
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

from synet.status cimport SynetStatus, SYNET_OK, SYNET_VALUE_ERROR, SYNET_INDEX_ERROR, SYNET_NOT_READY

import numpy as np

cnp.import_array()

from ._arrays import UINT16, check_buffer, check_out
from ._kernels import resolve_num_threads
from ._types import BFLOAT16, DataType, as_data_type, dtype_of, dtype_or_none

ctypedef fused elem_t:  # data elements are copied by width
    uint8_t
    uint16_t
    uint32_t
    uint64_t

ctypedef fused index_t:
    int32_t
    int64_t

cdef enum:
    TILE = 4096            # dst elements per parallel task (at least one row of `inner`)
    PARALLEL_MIN = 1 << 15  # dst elements below which a gather runs on one thread
    STRIP_INDEX_BYTES = 1 << 20  # index bytes of one row block of the 1-byte strip gather (see gather_kernel)
    AHEAD_MAX = 16384       # bytes: a task gathering a whole slice up to this size prefetches the next one

_WIDTH_DTYPE = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32), 8: np.dtype(np.uint64)}
_INDEX_DTYPES = {DataType.INT32: np.dtype(np.int32), DataType.INT64: np.dtype(np.int64)}
_INT32_MAX = 2**31 - 1


cdef extern from *:
    """
    /* AVX-512 gather of 32 elements per iteration, for the common case of 1-, 2-, 4- or 8-byte
       elements whose offsets fit in int32. Returns the out-of-range index count, or -1 when
       the case is not covered (the caller then runs its portable loop). Lanes whose index is
       out of range read an element inside src and write dst[k] = 0. Plain stores: on
       this kernel's outputs non-temporal stores measured slower (dst lines are reused soon). */
    #if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
    #include <immintrin.h>
    #define SYNET_GATHER_SIMD "avx512"
    static inline __m512i synet_idx16(const void *idx, int idx64, __mmask16 m, __m512i count, __mmask16 *ok) {
        __m512i ic;
        if (idx64) {  /* saturating narrowing: an int64 outside int32 stays out of [0, count) */
            const int64_t *p = (const int64_t *)idx;
            __m256i lo = _mm512_cvtsepi64_epi32(_mm512_maskz_loadu_epi64((__mmask8)m, p));
            __m256i hi = _mm512_cvtsepi64_epi32(_mm512_maskz_loadu_epi64((__mmask8)(m >> 8), p + 8));
            ic = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        } else {
            ic = _mm512_maskz_loadu_epi32(m, idx);
        }
        ic = _mm512_mask_add_epi32(ic, _mm512_movepi32_mask(ic), ic, count);   /* negatives count from the end */
        *ok = m & _mm512_cmplt_epu32_mask(ic, count);
        return ic;
    }
    #define SYNET_INDEX_PREFETCH 4096   /* bytes: measured 5-10% faster on G1-G3 */
    /* One step: dst[j] = src element at norm(idx[j]) * inner + pos[j] for the lanes j of m;
       returns how many of them were out of range (those write 0). `offsets`: idx holds int32
       src offsets (set_index's), taken as they are (no negatives to normalise), still checked.
       An out-of-range lane gathers element count - 1 and is zeroed afterwards, so the gather
       mask is known before the index arrives (G4 with set_index 1.4x faster than masking the
       gather with the range check). */
    static inline int synet_gather16(const void *src, const void *idx, int idx64, int offsets, void *dst, int width,
                                     __mmask16 m, __m512i count, Py_ssize_t inner, __m512i vinner, __m512i pos,
                                     __m512i last, __m128i wshift) {
        __mmask16 ok;
        __m512i ic;
        if (offsets) {
            ic = _mm512_maskz_loadu_epi32(m, idx);
            ok = m & _mm512_cmplt_epu32_mask(ic, count);
        } else {
            ic = synet_idx16(idx, idx64, m, count, &ok);
        }
        ic = _mm512_min_epu32(ic, _mm512_sub_epi32(count, _mm512_set1_epi32(1)));
        __m512i off = _mm512_add_epi32(inner == 1 ? ic : _mm512_mullo_epi32(ic, vinner), pos);
        if (width == 4) {
            __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, off, src, 4);
            _mm512_mask_storeu_epi32(dst, m, _mm512_maskz_mov_epi32(ok, v));
        } else if (width == 8) {
            __m512i v0 = _mm512_mask_i32gather_epi64(_mm512_setzero_si512(), (__mmask8)m,
                                                     _mm512_castsi512_si256(off), src, 8);
            __m512i v1 = _mm512_mask_i32gather_epi64(_mm512_setzero_si512(), (__mmask8)(m >> 8),
                                                     _mm512_extracti64x4_epi64(off, 1), src, 8);
            _mm512_mask_storeu_epi64(dst, (__mmask8)m, _mm512_maskz_mov_epi64((__mmask8)ok, v0));
            _mm512_mask_storeu_epi64((char *)dst + 64, (__mmask8)(m >> 8),
                                     _mm512_maskz_mov_epi64((__mmask8)(ok >> 8), v1));
        } else {
            /* narrow elements: read the aligned-down dword that stays inside src, shift */
            __m512i byte = _mm512_sll_epi32(off, wshift);
            __m512i at = _mm512_min_epu32(byte, last);
            __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, at, src, 1);
            v = _mm512_maskz_mov_epi32(ok, _mm512_srlv_epi32(v, _mm512_slli_epi32(_mm512_sub_epi32(byte, at), 3)));
            if (width == 2)
                _mm256_mask_storeu_epi16(dst, m, _mm512_cvtepi32_epi16(v));
            else
                _mm_mask_storeu_epi8(dst, m, _mm512_cvtepi32_epi8(v));
        }
        return __builtin_popcount((unsigned)(m & ~ok));
    }
    /* Two steps of 16 per iteration (two gathers in flight: G2 6-10% faster than one). ahead[0:ahead_bytes],
       the next task's source, is prefetched in equal parts per iteration: random reads inside a small
       slice defeat the hardware prefetcher (G4 1.26x, G2 1.06x faster with it). */
    static Py_ssize_t synet_gather_simd(const void *src, Py_ssize_t src_bytes, const void *idx, int idx_size,
                                        int offsets, Py_ssize_t idx_bytes, void *dst, int width, Py_ssize_t n,
                                        Py_ssize_t count, Py_ssize_t inner, Py_ssize_t step,
                                        const char *ahead, Py_ssize_t ahead_bytes) {
        if (count * inner * width > 0x7FFFFFFF || src_bytes < 4 || (offsets && idx_size != 4))
            return -1;
        const int idx64 = idx_size == 8;
        const __m512i vcount = _mm512_set1_epi32((int)count), vinner = _mm512_set1_epi32((int)inner);
        const __m512i advance = _mm512_set1_epi32((int)(16 * step));
        const __m512i last = _mm512_set1_epi32((int)((src_bytes < 0x7FFFFFFF ? src_bytes : 0x7FFFFFFF) - 4));
        const __m128i wshift = _mm_cvtsi32_si128(width == 2);
        /* pos: the element offset k * step of each lane */
        __m512i pos = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                         _mm512_set1_epi32((int)step));
        const Py_ssize_t ahead_step = ((ahead_bytes * 32 + n - 1) / n + 63) & ~(Py_ssize_t)63;
        Py_ssize_t bad = 0, k, a = 0;
        for (k = 0; k < n; k += 32) {
            for (Py_ssize_t end = a + ahead_step; a < end && a < ahead_bytes; a += 64)
                _mm_prefetch(ahead + a, _MM_HINT_T0);
            for (Py_ssize_t line = 0; line < 32 * idx_size; line += 64)
                if (k * idx_size + SYNET_INDEX_PREFETCH + line < idx_bytes)   /* inside the index only */
                    _mm_prefetch((const char *)idx + k * idx_size + SYNET_INDEX_PREFETCH + line, _MM_HINT_T0);
            const __mmask32 m = n - k >= 32 ? 0xFFFFFFFFu : (__mmask32)((1ull << (n - k)) - 1);
            bad += synet_gather16(src, (const char *)idx + k * idx_size, idx64, offsets, (char *)dst + k * width,
                                  width, (__mmask16)m, vcount, inner, vinner, pos, last, wshift);
            pos = _mm512_add_epi32(pos, advance);
            if (m >> 16)
                bad += synet_gather16(src, (const char *)idx + (k + 16) * idx_size, idx64, offsets,
                                      (char *)dst + (k + 16) * width, width, (__mmask16)(m >> 16), vcount, inner,
                                      vinner, pos, last, wshift);
            pos = _mm512_add_epi32(pos, advance);
        }
        return bad;
    }
    /* 1-byte elements, inner >= 32: the rows c_begin..c_end of one strip of 32 columns (s0..s0+31)
       gather from a copy of that strip of src ([count][32] bytes, <= SYNET_STRIP_BYTES), which
       stays in L1, instead of from random rows of the whole slice in L2; the index of the rows
       ahead is prefetched. G3 (u8, 1024 x 256) in a C loop: 1.90 -> 1.31 ms. */
    #define SYNET_STRIP_BYTES 32768
    /* whether a slice of `count` rows of `inner` 1-byte elements gathers strip by strip */
    static inline int synet_strips_apply(Py_ssize_t count, Py_ssize_t inner) {
        return inner >= 32 && count * 32 <= SYNET_STRIP_BYTES;
    }
    static Py_ssize_t synet_gather_strip_u8(const uint8_t *src, const void *idx, int idx_size, uint8_t *dst,
                                            Py_ssize_t c_begin, Py_ssize_t c_end, Py_ssize_t count,
                                            Py_ssize_t inner, Py_ssize_t s0) {
        uint8_t buf[SYNET_STRIP_BYTES + 64] __attribute__((aligned(64)));
        if (!synet_strips_apply(count, inner) || s0 >= inner)
            return -1;
        const int idx64 = idx_size == 8;
        const Py_ssize_t cols = inner - s0 < 32 ? inner - s0 : 32, ahead = 6 * inner * idx_size;
        const __mmask32 kc = cols == 32 ? 0xFFFFFFFFu : (1u << cols) - 1;
        const __mmask16 k0 = (__mmask16)kc, k1 = (__mmask16)(kc >> 16);
        const __m512i vcount = _mm512_set1_epi32((int)count);
        const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        const __m512i lane16 = _mm512_add_epi32(lane, _mm512_set1_epi32(16));
        Py_ssize_t bad = 0;
        for (Py_ssize_t c = 0; c < count; c++)
            _mm256_store_si256((__m256i *)(buf + c * 32), _mm256_maskz_loadu_epi8(kc, src + c * inner + s0));
        memset(buf + count * 32, 0, 64);   /* the dword read at the last byte runs 3 bytes past it */
        for (Py_ssize_t c = c_begin; c < c_end; c++) {
            const char *ip = (const char *)idx + (c * inner + s0) * idx_size;
            __mmask16 ok0, ok1;
            if (c + 7 < c_end)   /* this task's index 6 rows ahead (32 indices: 2 or 4 lines, maybe 1 more) */
                for (int line = 0; line < 4 * idx_size / 8 + 1; ++line)
                    _mm_prefetch(ip + ahead + 64 * line, _MM_HINT_T0);
            __m512i i0 = synet_idx16(ip, idx64, k0, vcount, &ok0);
            __m512i i1 = synet_idx16(ip + 16 * idx_size, idx64, k1, vcount, &ok1);
            bad += __builtin_popcount((unsigned)(k0 & ~ok0)) + __builtin_popcount((unsigned)(k1 & ~ok1));
            /* the dword at byte c' * 32 + column holds the element in its low byte */
            __m512i v0 = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), ok0,
                                                     _mm512_add_epi32(_mm512_slli_epi32(i0, 5), lane), buf, 1);
            __m512i v1 = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), ok1,
                                                     _mm512_add_epi32(_mm512_slli_epi32(i1, 5), lane16), buf, 1);
            _mm256_mask_storeu_epi8(dst + c * inner + s0, kc,
                                    _mm256_inserti128_si256(_mm256_castsi128_si256(_mm512_cvtepi32_epi8(v0)),
                                                            _mm512_cvtepi32_epi8(v1), 1));
        }
        return bad;
    }
    #else
    #define SYNET_GATHER_SIMD "portable"
    static Py_ssize_t synet_gather_simd(const void *src, Py_ssize_t src_bytes, const void *idx, int idx_size,
                                        int offsets, Py_ssize_t idx_bytes, void *dst, int width, Py_ssize_t n,
                                        Py_ssize_t count, Py_ssize_t inner, Py_ssize_t step,
                                        const char *ahead, Py_ssize_t ahead_bytes) { return -1; }
    static inline int synet_strips_apply(Py_ssize_t count, Py_ssize_t inner) { return 0; }
    static Py_ssize_t synet_gather_strip_u8(const uint8_t *src, const void *idx, int idx_size, uint8_t *dst,
                                            Py_ssize_t c_begin, Py_ssize_t c_end, Py_ssize_t count,
                                            Py_ssize_t inner, Py_ssize_t s0) { return -1; }
    #endif
    """
    const char *SYNET_GATHER_SIMD
    Py_ssize_t synet_gather_simd(const void *src, Py_ssize_t src_bytes, const void *idx, int idx_size,
                                 bint offsets, Py_ssize_t idx_bytes, void *dst, int width, Py_ssize_t n,
                                 Py_ssize_t count, Py_ssize_t inner, Py_ssize_t step, const char *ahead,
                                 Py_ssize_t ahead_bytes) noexcept nogil
    bint synet_strips_apply(Py_ssize_t count, Py_ssize_t inner) noexcept nogil
    Py_ssize_t synet_gather_strip_u8(const uint8_t *src, const void *idx, int idx_size, uint8_t *dst,
                                     Py_ssize_t c_begin, Py_ssize_t c_end, Py_ssize_t count, Py_ssize_t inner,
                                     Py_ssize_t s0) noexcept nogil

GATHER_SIMD = SYNET_GATHER_SIMD.decode()


cdef inline Py_ssize_t _gather_run(
    const elem_t* src, Py_ssize_t src_bytes, const index_t* idx, Py_ssize_t idx_left, elem_t* dst,
    Py_ssize_t n, Py_ssize_t count, Py_ssize_t inner, Py_ssize_t step, bint offsets, const void* ahead,
    Py_ssize_t ahead_bytes,
) noexcept nogil:
    """``dst[k] = src[norm(idx[k]) * inner + k * step]`` for k < n; returns the out-of-range count.

    idx[n:idx_left] is more index of the same task and ahead[:ahead_bytes] the source of the
    next one: the SIMD loop prefetches both. norm adds `count` to a negative index (not to
    `offsets`, set_index's normalised offsets); an index still outside [0, count) is counted
    and its element is 0, and no memory outside src or dst is touched.
    """
    cdef Py_ssize_t k, ic, bad = synet_gather_simd(src, src_bytes, idx, sizeof(index_t), offsets,
                                                   idx_left * <Py_ssize_t>sizeof(index_t), dst,
                                                   sizeof(elem_t), n, count, inner, step,
                                                   <const char*>ahead, ahead_bytes)
    cdef bint ok
    if bad >= 0:
        return bad
    bad = 0
    for k in range(n):
        ic = idx[k]
        ic = ic + count if ic < 0 and not offsets else ic
        ok = <size_t>ic < <size_t>count
        bad += not ok
        dst[k] = src[ic * inner + k * step] if ok else 0
    return bad


cdef inline Py_ssize_t _gather_tile(
    const elem_t* src, Py_ssize_t src_bytes, const index_t* idx, elem_t* dst, Py_ssize_t c_begin,
    Py_ssize_t c_end, Py_ssize_t src_count, Py_ssize_t inner, bint offsets, Py_ssize_t ahead_bytes,
) noexcept nogil:
    """Rows c_begin..c_end of one outer slice; returns how many indices were out of range.

    With `offsets` the index holds validated src offsets (c' * inner + i): one flat run.
    With inner == 1 the rows form one run too; otherwise each row of `inner` is a run.
    A single run prefetches the first `ahead_bytes` of the next slice's source.
    """
    cdef Py_ssize_t c, bad = 0
    cdef const elem_t* next_src = src + src_count * inner
    if offsets:
        return _gather_run(src, src_bytes, idx + c_begin * inner, (c_end - c_begin) * inner, dst + c_begin * inner,
                           (c_end - c_begin) * inner, src_count * inner, 1, 0, True, next_src, ahead_bytes)
    if inner == 1:
        return _gather_run(src, src_bytes, idx + c_begin, c_end - c_begin, dst + c_begin, c_end - c_begin,
                           src_count, 1, 0, False, next_src, ahead_bytes)
    for c in range(c_begin, c_end):
        bad += _gather_run(src, src_bytes, idx + c * inner, (c_end - c) * inner, dst + c * inner, inner,
                           src_count, inner, 1, False, NULL, 0)
    return bad


cdef Py_ssize_t gather_kernel(
    const elem_t* src, const index_t* idx, elem_t* dst, Py_ssize_t outer, Py_ssize_t src_count,
    Py_ssize_t inner, Py_ssize_t idx_count, Py_ssize_t idx_period, bint offsets, int threads,
) noexcept nogil:
    """Gather all outer slices; outer slice b reads index slice b % idx_period.

    Parallel over tiles of whole rows of dst (1-byte elements with inner >= 32 and a small
    enough slice: over row blocks x strips of 32 columns, see synet_gather_strip_u8; small
    slices: over groups of whole slices), so each element is written by one thread and the
    result does not depend on the thread count. Returns the out-of-range index count.
    """
    cdef Py_ssize_t row = idx_count * inner, slice_size = src_count * inner
    cdef Py_ssize_t slice_bytes = slice_size * <Py_ssize_t>sizeof(elem_t), ahead_bytes = 0
    cdef Py_ssize_t rows_per_task = max(1, TILE // inner) if inner else 1
    cdef Py_ssize_t nstrips = 1, t, task, b, c_begin, bad = 0
    cdef bint strips = False
    if elem_t is uint8_t:
        strips = not offsets and synet_strips_apply(src_count, inner)
    if strips:
        nstrips = (inner + 31) // 32
        # a row block's index (read strip by strip) stays in L2 between its strips: G3 1.13x faster
        # with 512 rows (1 MB) than with 1024; >= src_count / 2 rows keep the strip copies <= 2 B per element
        rows_per_task = max(src_count // 2, STRIP_INDEX_BYTES // (inner * <Py_ssize_t>sizeof(index_t)), 1)
    cdef Py_ssize_t tasks_per_outer = nstrips * ((idx_count + rows_per_task - 1) // rows_per_task)
    # a task that gathers a whole slice (in one run: _gather_tile) prefetches the next slice's source
    cdef bint prefetch_next = not strips and tasks_per_outer == 1 and slice_bytes <= AHEAD_MAX
    # small slices: several whole slices per task (G2: 4096 tasks of 256 elements -> 256 of 4096,
    # 1.06x faster)
    cdef Py_ssize_t slices_per_task = max(1, TILE // row) if tasks_per_outer == 1 and row else 1
    cdef Py_ssize_t first
    for task in prange((outer + slices_per_task - 1) // slices_per_task * tasks_per_outer, schedule="static",
                       num_threads=threads, use_threads_if=outer * row >= PARALLEL_MIN):
        first = task // tasks_per_outer * slices_per_task
        t = task % tasks_per_outer
        c_begin = (t // nstrips) * rows_per_task
        for b in range(first, min(first + slices_per_task, outer)):
            if elem_t is uint8_t:
                if strips:
                    bad += synet_gather_strip_u8(src + b * slice_size, idx + (b % idx_period) * row,
                                                 sizeof(index_t), dst + b * row, c_begin,
                                                 min(c_begin + rows_per_task, idx_count), src_count, inner,
                                                 (t % nstrips) * 32)
                    continue
            ahead_bytes = slice_bytes if prefetch_next and b + 1 < outer else 0
            bad += _gather_tile(
                src + b * slice_size, (outer - b) * slice_bytes, idx + (b % idx_period) * row, dst + b * row,
                c_begin, min(c_begin + rows_per_task, idx_count), src_count, inner, offsets, ahead_bytes)
    return bad


cdef SynetStatus _dispatch_index(const elem_t *src, const void *idx, int index_size, elem_t *dst,
                                 const GatherPlan *plan, Py_ssize_t period, bint offsets, int threads) noexcept nogil:
    cdef Py_ssize_t bad
    if index_size == 4:
        bad = gather_kernel(src, <const int32_t *>idx, dst, plan.outer, plan.src_count, plan.inner,
                            plan.idx_count, period, offsets, threads)
    elif index_size == 8:
        bad = gather_kernel(src, <const int64_t *>idx, dst, plan.outer, plan.src_count, plan.inner,
                            plan.idx_count, period, offsets, threads)
    else:
        return SYNET_VALUE_ERROR
    return SYNET_INDEX_ERROR if bad else SYNET_OK


cdef SynetStatus gather_elements_run(const GatherPlan *plan, const void *src, const void *idx, void *dst,
                                     int n_threads) noexcept nogil:
    """Run a GatherPlan (see _gather.pxd); the one entry point of the Python and C APIs."""
    cdef bint offsets = idx == NULL
    cdef int index_size = plan.offsets_size if offsets else plan.index_size
    cdef Py_ssize_t period = plan.period if offsets else plan.outer
    cdef Py_ssize_t n = plan.outer * plan.idx_count * plan.inner
    if plan.outer < 0 or plan.src_count < 0 or plan.inner < 0 or plan.idx_count < 0 or n_threads < 1:
        return SYNET_VALUE_ERROR
    if n == 0:
        return SYNET_OK
    if offsets:
        idx = plan.offsets
        if idx == NULL or period < 1:
            return SYNET_NOT_READY
    if src == NULL or dst == NULL:
        return SYNET_VALUE_ERROR
    if plan.src_count == 0:
        return SYNET_INDEX_ERROR
    if plan.elem_size == 1:
        return _dispatch_index(<const uint8_t *>src, idx, index_size, <uint8_t *>dst, plan, period, offsets, n_threads)
    if plan.elem_size == 2:
        return _dispatch_index(<const uint16_t *>src, idx, index_size, <uint16_t *>dst, plan, period, offsets,
                               n_threads)
    if plan.elem_size == 4:
        return _dispatch_index(<const uint32_t *>src, idx, index_size, <uint32_t *>dst, plan, period, offsets,
                               n_threads)
    if plan.elem_size == 8:
        return _dispatch_index(<const uint64_t *>src, idx, index_size, <uint64_t *>dst, plan, period, offsets,
                               n_threads)
    return SYNET_VALUE_ERROR


cdef inline void *_data(cnp.ndarray array) noexcept:
    return cnp.PyArray_DATA(array)


cdef SynetStatus _run(GatherPlan *plan, src, idx, dst, int threads):
    """Run `plan` on NumPy arrays (checked by the caller) with the GIL released."""
    cdef const void *src_ptr = _data(src)
    cdef const void *idx_ptr = NULL if idx is None else _data(idx)
    cdef void *dst_ptr = _data(dst)
    cdef SynetStatus status
    with nogil:
        status = gather_elements_run(plan, src_ptr, idx_ptr, dst_ptr, threads)
    return status


def _first_bad(idx, Py_ssize_t src_count):
    """Flat position and value of the first index outside [-src_count, src_count)."""
    flat = idx.reshape(-1)
    bad = (flat < -src_count) | (flat >= src_count)
    position = int(np.argmax(bad))
    return position, int(flat[position])


def _copyable(dtype):
    """Whether gathered elements of `dtype` may be copied as raw 1-, 2-, 4- or 8-byte words."""
    return (dtype.itemsize in _WIDTH_DTYPE and not dtype.hasobject and dtype.names is None
            and dtype.subdtype is None and dtype.type is not np.void)


def _data_dtype(value, str param="data_type"):
    """The NumPy dtype of gathered elements: a DataType / name, or any 1-, 2-, 4-, 8-byte dtype."""
    try:
        return dtype_of(as_data_type(value, param))
    except ValueError:
        dtype = dtype_or_none(value)
        if dtype is not None and _copyable(dtype):
            return dtype
        raise


def _count(value, str name, Py_ssize_t minimum=0):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name}: expected an int >= {minimum}, got {value}")
    return int(value)


def _checked_size(str what, *factors, Py_ssize_t itemsize=1):
    size = 1
    for factor in factors:
        size *= factor
    if size * itemsize >= 2**63:
        raise ValueError(f"{what}: {' x '.join(map(str, factors))} elements overflow 64-bit sizes")
    return size


@cython.final
@cython.auto_pickle(False)
cdef class GatherElements:
    """Context of ONNX GatherElements over a tensor viewed as [outer..., src_count, inner].

    ``dst[b, c, i] = src[b, idx[b, c, i] (+ src_count if negative), i]`` for b over
    prod(outer), c < idx_count, i < inner. The constructor takes `init`'s keywords.

    Examples
    --------
    >>> g = GatherElements("float32", "int32", False, 1, [2], 4, 1, 3)
    >>> g.forward(np.arange(8, dtype=np.float32), np.array([0, 2, 1, 3, 1, 0], np.int32))
    array([0., 2., 1., 7., 5., 4.], dtype=float32)
    """

    # attributes: see _gather.pxd

    def __init__(self, data_type=None, index_type=None, index_const=False, index_users=1,
                 outer=None, src_count=None, inner=None, idx_count=None):
        self._key = None
        self._analysed = None
        if data_type is not None or index_type is not None or outer is not None or \
                src_count is not None or inner is not None or idx_count is not None:
            self.init(data_type, index_type, index_const, index_users, outer, src_count, inner, idx_count)

    def init(self, data_type, index_type, index_const, index_users, outer, src_count, inner, idx_count):
        """(Re)initialise: src is [prod(outer), src_count, inner], idx and dst [prod(outer), idx_count, inner].

        Parameters
        ----------
        data_type : DataType, name or dtype
            FLOAT32, BFLOAT16, UINT8, or any 1-, 2-, 4- or 8-byte NumPy dtype (copied as is).
        index_type : DataType or name
            INT32 or INT64.
        index_const : bool
            The index is constant: `set_index` analyses it once and `forward(src)` reuses it.
        index_users : int
            Contexts sharing the constant index (>= 1).
        outer : sequence of int
            Dimensions before the gathered axis.
        src_count, inner, idx_count : int
            Gathered-axis length of src, product of the dimensions after it, gathered-axis
            length of idx and dst.

        Identical arguments keep the context (and its analysed index); others rebuild it.
        """
        dtype = _data_dtype(data_type)
        index_type = as_data_type(index_type, "index_type")
        if index_type not in _INDEX_DTYPES:
            raise ValueError(f"index_type: expected INT32 or INT64, got {index_type.name}")
        if not isinstance(index_const, (bool, np.bool_, int)):
            raise TypeError(f"index_const: expected a bool, got {type(index_const).__name__}")
        users = _count(index_users, "index_users", 1)
        if isinstance(outer, (int, np.integer)) and not isinstance(outer, bool):
            outer = (outer,)
        try:
            outer = tuple(_count(d, "outer") for d in outer)
        except TypeError:
            raise TypeError(f"outer: expected a sequence of ints, got {outer!r}") from None
        counts = (_count(src_count, "src_count"), _count(inner, "inner"), _count(idx_count, "idx_count"))
        key = (dtype, index_type, bool(index_const), users, outer, counts)
        if key == self._key:
            return
        self.clear()
        outer_size = _checked_size("outer", *outer)
        _checked_size("src", outer_size, counts[0], counts[1], itemsize=dtype.itemsize)
        _checked_size("idx", outer_size, counts[2], counts[1], itemsize=8)
        self._dtype = dtype
        self._index_dtype = _INDEX_DTYPES[index_type]
        self._outer = outer
        self._outer_size = outer_size
        self._src_count, self._inner, self._idx_count = counts
        self._index_const = bool(index_const)
        self._index_users = users
        self._key = key

    def enable(self):
        """True when `init` has built the context and `forward` may be called."""
        return self._key is not None

    def internal_buffer_size(self):
        """Bytes held by the context: the analysed index (0 without `set_index`)."""
        return 0 if self._analysed is None else self._analysed[0].nbytes

    @property
    def index_users(self):
        """Contexts sharing the constant index, as given to `init`."""
        return self._index_users

    cdef _require_ready(self):
        if self._key is None:
            raise RuntimeError("GatherElements: call init() before using the context")

    cdef _src_dtypes(self):
        return (BFLOAT16, UINT16) if self._dtype == BFLOAT16 else (self._dtype,)

    def set_index(self, idx):
        """Validate and analyse a constant index once; afterwards `forward(src)` needs no idx.

        Negative indices are normalised, offsets ``c' * inner + i`` precomputed (int32 when
        they fit) and only the trailing outer slices over which the index differs are kept.

        Parameters
        ----------
        idx : ndarray
            C-contiguous, the context's index type, prod(outer)·idx_count·inner elements.

        Raises
        ------
        IndexError
            The first index outside [-src_count, src_count): its flat position and value.
        """
        self._require_ready()
        if not self._index_const:
            raise RuntimeError("GatherElements.set_index: the context was made with index_const=False")
        n = self._outer_size * self._idx_count * self._inner
        idx = check_buffer(idx, "idx", (self._index_dtype,), n)
        flat = idx.reshape(-1).astype(np.int64)
        if n:
            bad = (flat < -self._src_count) | (flat >= self._src_count)
            if bad.any():
                position, value = _first_bad(flat, self._src_count)
                raise IndexError(f"idx: index {value} at flat position {position} is out of range "
                                 f"[-{self._src_count}, {self._src_count})")
        flat = np.where(flat < 0, flat + self._src_count, flat)
        row = self._idx_count * self._inner
        period = self._outer_size
        for split in range(len(self._outer), 0, -1):  # the most repeated first
            # outer slices b and b + period hold the same index when the first `split` dims repeat
            repeat = _checked_size("outer", *self._outer[:split])
            if repeat > 0 and row > 0:
                slices = flat.reshape(repeat, -1)
                if (slices == slices[:1]).all():
                    period = self._outer_size // repeat
                    break
        flat = flat[: max(period, 1) * row].reshape(-1, self._inner if self._inner else 1)
        offsets = flat * self._inner + np.arange(self._inner, dtype=np.int64)
        fits32 = self._src_count * self._inner <= _INT32_MAX
        offsets = np.ascontiguousarray(offsets.reshape(-1), np.int32 if fits32 else np.int64)
        self._analysed = (offsets, max(period, 1), idx.shape)  # one assignment: forward sees all or none

    cdef GatherPlan plan(self) except *:
        """The context's gather as a C-level plan (with its analysed index, if set)."""
        cdef GatherPlan plan
        cdef cnp.ndarray offsets
        self._require_ready()
        plan.outer, plan.src_count = self._outer_size, self._src_count
        plan.inner, plan.idx_count = self._inner, self._idx_count
        plan.elem_size = self._dtype.itemsize
        plan.index_size = self._index_dtype.itemsize
        plan.offsets, plan.offsets_size, plan.period = NULL, 0, 0
        if self._analysed is not None:
            offsets = self._analysed[0]
            plan.offsets = cnp.PyArray_DATA(offsets)
            plan.offsets_size = offsets.dtype.itemsize
            plan.period = self._analysed[1]
        return plan

    def forward(self, src, idx=None, dst=None, *, n_threads=None):
        """Gather: ``dst[b, c, i] = src[b, idx[b, c, i] (+ src_count if negative), i]``.

        Parameters
        ----------
        src : ndarray
            C-contiguous, prod(outer) * src_count * inner elements of the context's dtype
            (BFLOAT16 also as uint16 raw bits).
        idx : ndarray, optional
            C-contiguous int32/int64 (the context's index type), prod(outer) * idx_count * inner
            elements. None uses the index given to `set_index`.
        dst : ndarray, optional
            Output of src's dtype and idx's size; allocated with idx's shape when None.
        n_threads : int, optional

        Returns
        -------
        dst

        Raises
        ------
        IndexError
            An index outside [-src_count, src_count); names its flat position and value.
        """
        analysed = self._analysed  # hold it: a concurrent set_index cannot pull it away
        cdef GatherPlan plan = self.plan()
        cdef int threads = resolve_num_threads(n_threads)
        n = self._outer_size * self._idx_count * self._inner
        src = check_buffer(src, "src", self._src_dtypes(), self._outer_size * self._src_count * self._inner)
        if idx is None:
            if analysed is None:
                raise RuntimeError("GatherElements.forward: idx is None but no index was set "
                                   "(call set_index on a context made with index_const=True)")
            offsets, plan.period, shape = analysed
            plan.offsets = cnp.PyArray_DATA(offsets)
            plan.offsets_size = offsets.dtype.itemsize
        else:
            idx = check_buffer(idx, "idx", (self._index_dtype,), n)
            shape = idx.shape
        if dst is None:
            dst = np.empty(shape, dtype=src.dtype)
        else:
            dst = check_buffer(dst, "dst", self._src_dtypes(), n, writeable=True)
            if np.may_share_memory(dst, src) or (idx is not None and np.may_share_memory(dst, idx)):
                raise ValueError("dst: must not overlap src or idx")
        if _run(&plan, src, idx, dst, threads) == SYNET_INDEX_ERROR:
            position, value = _first_bad(idx, self._src_count)
            raise IndexError(f"idx: index {value} at flat position {position} is out of range "
                             f"[-{self._src_count}, {self._src_count})")
        return dst

    def clear(self):
        """Release the context: geometry and analysed index."""
        self._key = None
        self._analysed = None
        self._outer = ()
        self._outer_size = self._src_count = self._inner = self._idx_count = 0


def _as_indices(indices):
    """indices as an int32/int64 array; other integer dtypes widen to int64 (checked)."""
    indices = np.asarray(indices)
    if indices.dtype == np.int32 or indices.dtype == np.int64:
        return indices
    if indices.dtype == np.uint64:  # values past int64's range stay out of range
        return np.minimum(indices, np.uint64(np.iinfo(np.int64).max)).astype(np.int64)
    if indices.dtype.kind in "iu":
        return indices.astype(np.int64)
    raise ValueError(f"indices: expected an integer dtype, got {indices.dtype}")


def gather_elements(data, indices, axis=0, *, out=None, n_threads=None):
    """ONNX GatherElements: ``out[..., j, ...] = data[..., indices[..., j, ...], ...]`` along `axis`.

    Parameters
    ----------
    data : array_like
        Any 1-, 2-, 4- or 8-byte dtype (float32, bfloat16, uint8, int64, float64, ...).
    indices : array_like of int
        Same rank as data; off the axis each size <= data's (a sub-block, as in ONNX and
        PyTorch). Negative values count from the end of the axis.
    axis : int
        Negative values count from the last dimension.
    out : ndarray, optional
        C-contiguous, indices' shape, data's dtype.
    n_threads : int, optional

    Returns
    -------
    ndarray of indices' shape and data's dtype

    Raises
    ------
    IndexError
        An index outside [-size, size) of the axis: names its position, value, axis and size.
    """
    data = np.asarray(data)
    if not _copyable(data.dtype):
        raise ValueError(f"data: expected a 1-, 2-, 4- or 8-byte dtype, got {data.dtype}")
    indices = _as_indices(indices)
    if data.ndim == 0:
        raise ValueError("data: expected an array of rank >= 1, got a scalar")
    if indices.ndim != data.ndim:
        raise ValueError(f"indices: expected rank {data.ndim} (data's), got rank {indices.ndim}")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis: expected an int, got {type(axis).__name__}")
    if not -data.ndim <= axis < data.ndim:
        raise ValueError(f"axis: expected an int in [-{data.ndim}, {data.ndim}), got {axis}")
    axis = int(axis) % data.ndim
    for dim, (n_idx, n_data) in enumerate(zip(indices.shape, data.shape)):
        if dim != axis and n_idx > n_data:
            raise ValueError(f"indices: size {n_idx} of dimension {dim} exceeds data's {n_data} "
                             f"(only axis {axis} may differ)")
    block = tuple(slice(0, n) if dim != axis else slice(None) for dim, n in enumerate(indices.shape))
    src = np.ascontiguousarray(data[block])
    idx = np.ascontiguousarray(indices)
    if out is None:
        out = np.empty(indices.shape, dtype=data.dtype)
    else:
        out = check_out(out, indices.shape, (data.dtype,), {"data": src, "indices": idx})
    if out.size == 0:
        return out
    cdef int threads = resolve_num_threads(n_threads)
    cdef GatherPlan plan
    src_count = data.shape[axis]
    plan.outer = _checked_size("indices", *indices.shape[:axis])
    plan.inner = _checked_size("indices", *indices.shape[axis + 1:])
    plan.src_count, plan.idx_count = src_count, indices.shape[axis]
    plan.elem_size, plan.index_size = data.dtype.itemsize, idx.dtype.itemsize
    plan.offsets, plan.offsets_size, plan.period = NULL, 0, 0
    if _run(&plan, src, idx, out, threads) == SYNET_INDEX_ERROR:
        position, value = _first_bad(idx, src_count)
        where = np.unravel_index(position, indices.shape)
        raise IndexError(f"indices[{', '.join(map(str, map(int, where)))}] = {value} is out of range "
                         f"for axis {axis} with size {src_count}")
    return out
