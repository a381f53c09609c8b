/* BF16 array conversions, compiled once per CPU level (see common.h). The loops are written so
 * that the compiler vectorises them for the level; large float32 <-> bfloat16 conversions stream
 * their 64-byte aligned middles past the caches with the level's widest stores. */
#include "bf16.h"

#include "vector.h"

/* Non-temporal stores starve the hardware prefetchers of the source stream: each step asks for
   the bytes it reads PREFETCH bytes ahead while that stays inside the source (16M elements,
   float32 -> bfloat16: 6.2 -> 3.3 ms). */
#define PREFETCH 8192

#if SYNET_AVX2 || SYNET_AVX512
static void prefetch_ahead(const void *p, synet_size bytes, synet_size left)
{
    for (synet_size b = 0; b < bytes && PREFETCH + b < left; b += 64)
        _mm_prefetch((const char *)p + PREFETCH + b, _MM_HINT_T0);
}
#endif

static void round_range16(const uint32_t *src, uint16_t *dst, synet_size n, int truncate)
{
    if (truncate) /* two loops so that each vectorises without a branch */
        for (synet_size i = 0; i < n; ++i)
            dst[i] = synet_bf16_truncate(src[i]);
    else
        for (synet_size i = 0; i < n; ++i)
            dst[i] = synet_bf16_nearest(src[i]);
}

/* Streams dst[i] = bf16(src[i]) from i = 0 while a whole step fits; dst is 64-byte aligned.
   Returns the elements done. */
static synet_size round_stream16(const uint32_t *src, uint16_t *dst, synet_size n, synet_size avail, int truncate)
{
    synet_size i = 0;
#if SYNET_AVX512
    const __m512i order = _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
    for (; i + 32 <= n; i += 32) {
        prefetch_ahead(src + i, 128, (avail - i) * 4);
        const __m512i lo = _mm512_loadu_si512(src + i), hi = _mm512_loadu_si512(src + i + 16);
        const __m512i a = truncate ? synet_bf16_truncate_x16(lo) : synet_bf16_nearest_x16(lo);
        const __m512i b = truncate ? synet_bf16_truncate_x16(hi) : synet_bf16_nearest_x16(hi);
        _mm512_stream_si512((void *)(dst + i), _mm512_permutexvar_epi64(order, _mm512_packus_epi32(a, b)));
    }
    _mm_sfence();
#elif SYNET_AVX2
    if (truncate)
        return 0; /* the truncating loop vectorises as it is */
    for (; i + 16 <= n; i += 16) {
        prefetch_ahead(src + i, 64, (avail - i) * 4);
        const __m256i a = synet_bf16_nearest_x8(_mm256_loadu_si256((const __m256i *)(src + i)));
        const __m256i b = synet_bf16_nearest_x8(_mm256_loadu_si256((const __m256i *)(src + i + 8)));
        _mm256_stream_si256((__m256i *)(dst + i), _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8));
    }
    _mm_sfence();
#else
    (void)src, (void)dst, (void)n, (void)avail, (void)truncate;
#endif
    return i;
}

/* The elements before the first 64-byte boundary at or after p (p a multiple of itemsize), at most n. */
static synet_size to_alignment(const void *p, synet_size itemsize, synet_size n)
{
    const synet_size head = (synet_size)((-(uintptr_t)p) & 63) / itemsize;
    return head < n ? head : n;
}

static void round_f32(const uint32_t *src, void *dst, synet_size n, synet_size avail, int truncate, int wide,
                      int stream)
{
    if (wide) {
        uint32_t *d = (uint32_t *)dst;
        if (truncate)
            for (synet_size i = 0; i < n; ++i)
                d[i] = (uint32_t)synet_bf16_truncate(src[i]) << 16;
        else
            for (synet_size i = 0; i < n; ++i)
                d[i] = (uint32_t)synet_bf16_nearest(src[i]) << 16;
        return;
    }
    uint16_t *d = (uint16_t *)dst;
    synet_size done = 0;
    if (stream && ((uintptr_t)d & 1) == 0) { /* (a dst off its element size never reaches 64-byte alignment) */
        done = to_alignment(d, 2, n);
        round_range16(src, d, done, truncate);
        done += round_stream16(src + done, d + done, n - done, avail - done, truncate);
    }
    round_range16(src + done, d + done, n - done, truncate);
}

static void round_f64(const double *src, void *dst, synet_size n, int truncate, int wide)
{
    uint16_t *d16 = (uint16_t *)dst;
    uint32_t *d32 = (uint32_t *)dst;
    if (truncate) {
        for (synet_size i = 0; i < n; ++i) {
            const uint16_t h = synet_bf16_truncate_f64(src[i]);
            if (wide)
                d32[i] = (uint32_t)h << 16;
            else
                d16[i] = h;
        }
    } else if (wide) { /* one loop a case, so that each vectorises */
        for (synet_size i = 0; i < n; ++i)
            d32[i] = (uint32_t)synet_bf16_nearest_f64(src[i]) << 16;
    } else {
        for (synet_size i = 0; i < n; ++i)
            d16[i] = synet_bf16_nearest_f64(src[i]);
    }
}

static void widen_range(const uint16_t *src, uint32_t *dst, synet_size n)
{
    for (synet_size i = 0; i < n; ++i)
        dst[i] = (uint32_t)src[i] << 16;
}

static void widen(const uint16_t *src, uint32_t *dst, synet_size n, synet_size avail, int stream)
{
    synet_size i = 0;
    if (stream && ((uintptr_t)dst & 3) == 0) {
        i = to_alignment(dst, 4, n);
        widen_range(src, dst, i);
#if SYNET_AVX512
        for (; i + 32 <= n; i += 32) {
            prefetch_ahead(src + i, 64, (avail - i) * 2);
            const __m512i both = _mm512_loadu_si512(src + i);
            _mm512_stream_si512((void *)(dst + i),
                                _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(both)), 16));
            _mm512_stream_si512((void *)(dst + i + 16),
                                _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(both, 1)), 16));
        }
        _mm_sfence();
#elif SYNET_AVX2
        for (; i + 16 <= n; i += 16) {
            prefetch_ahead(src + i, 32, (avail - i) * 2);
            const __m256i both = _mm256_loadu_si256((const __m256i *)(src + i));
            _mm256_stream_si256((__m256i *)(dst + i),
                                _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(both)), 16));
            _mm256_stream_si256((__m256i *)(dst + i + 8),
                                _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(both, 1)), 16));
        }
        _mm_sfence();
#else
        (void)avail;
#endif
    }
    widen_range(src + i, dst + i, n - i);
}

const synet_bf16_kernels SYNET_LEVEL_NAME(synet_bf16_kernels) = {
    SYNET_STR(SYNET_LEVEL_SUFFIX), round_f32, round_f64, widen,
};
