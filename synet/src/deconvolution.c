/* Deconvolution16b kernels, compiled once per CPU level (see common.h).
 *
 * PhaseGemm: the output is split into stride_y x stride_x phases (output pixels whose taps have the
 * same kernel positions); each phase is an ordinary stride-1 convolution, run as an implicit GEMM
 * over (taps x input channels): no col2im, no scatter-add. Every output element is summed once, in
 * registers or tiles, then bias + activation are applied and it is stored. The source is first
 * converted to a zero-padded NHWC image, so every tap of a phase is in range.
 *
 * The summation order is AMX's, at every level, so that every level gives the same bits: tdpbf16ps
 * (as the SDM's pseudocode says; tested bit for bit on an AMX Xeon) sums, for each block of 32
 * input channels, the even channels' products from zero in channel order, the odd channels' likewise,
 * then adds the two and adds that to the running sum. So for each output element:
 *     sum = 0; for each tap, for each block of KBLOCK channel pairs:
 *         even = sum over the block's channels 2k (in order) of x * w, each addition rounded to FP32
 *         odd  = the same over the channels 2k + 1;  sum = sum + (even + odd)
 * A product of two BF16 values is exact in FP32, so a multiply-add equals an fma there. Micro-kernels:
 *   - FP32 (any level): FP32 multiply-adds of the BF16 values; the image holds them as FP32.
 *   - BF16 (avx512_bf16 and up): vdpbf16ps on the BF16 image, up to 12 pixels x 64 channels.
 *   - AMX (amx): tdpbf16ps on tiles, 2 x 16 pixels x 32 channels a task.
 * Depthwise (group == src_c == dst_c): FP32 multiply-adds of BF16-rounded values, by phase and tap,
 * vectorised along x (NCHW) or channels (NHWC).
 *
 * Each output element is summed by one task in a fixed order, so results do not depend on the
 * thread count. The hardware BF16 instructions treat BF16 subnormal inputs as zero and flush
 * subnormal FP32 results to zero; the FP32 micro-kernel does not: the one difference between levels.
 */
#include "deconvolution_level.h"

#define BLOCK SYNET_DECONV_BLOCK
#define MMAX 8          /* output pixels per micro-tile, at most (micro_rows) */
#define KBLOCK 16       /* channel pairs a tdpbf16ps sums apart (32 BF16 channels): the summation order */
#define BORDER_CHUNK 256 /* border pass: output channels summed together */

#if defined(__AVX512BF16__) && SYNET_AVX512
#define HAVE_BF16 1
#else
#define HAVE_BF16 0
#endif
#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && HAVE_BF16 && defined(__linux__)
#define HAVE_AMX 1
#else
#define HAVE_AMX 0
#endif

/* Where a micro-tile's sums can go straight to dst instead of to the tile buffer (channels last, whole
   channel blocks, IDENTITY or RELU): element off + m * mstep + n for pixel m and channel n, plus bias[n],
   FP32 or (bf16) BF16; a micro-kernel call of the channels from c stores channel n to off + c + n (bias[c + n]).
   Storing from the accumulators saves deconv_store's second pass through the tile, whose loads and stores the
   output's misses held up (D2 0.117 -> 0.088 ms). `stream`: FP32 stores that bypass the caches (gemm_task). */
typedef struct {
    void *dst;
    int64_t off, mstep;
    const float *bias;
    int relu, bf16, stream;
} tile_store;

/* ---- the FP32 micro-kernel: pairs in lanes ---- */

/* Each channel pair's even and odd sums side by side in the lanes, so that one broadcast of a pixel's two
   channels (2k, 2k + 1) feeds both parities' chains and both, with their totals, stay in registers (the
   chains one parity after the other, the other's sums and the totals in memory: D5 at avx512 1.15x the time,
   D2 1.23x). A unit of VW output channels is two vectors of VW / 2 pairs: channel 4i + 2h + j of the unit
   (i < VW / 4, j < 2) at pair 2i + j of vector h, the even channel's lane first — the order in which unpacking
   (even, odd) BF16 pairs with zeros, 16 bits at a time within each 128-bit lane, widens them, and in which
   gathering two vectors' even (odd) lanes, 128 bits at a time, puts the unit's even (odd) sums back in
   channel order. Wide float32 weights (wide_weights) are packed in that order. */

/* x[0], x[1] in every pair of lanes */
SYNET_INLINE vfloat pair_splat(const float *x)
{
    double pair;
    memcpy(&pair, x, 8);
#if SYNET_AVX512
    return _mm512_castpd_ps(_mm512_set1_pd(pair));
#elif SYNET_AVX2
    return _mm256_castpd_ps(_mm256_set1_pd(pair));
#elif defined(__SSE2__)
    return _mm_castpd_ps(_mm_set1_pd(pair));
#else
    (void)pair;
    return (vfloat){x[0], x[1], x[0], x[1]};
#endif
}

/* a unit's two weight vectors from its VW (even, odd) BF16 pairs in channel order (even | odd << 16) */
SYNET_INLINE void widen_pairs(vbits pairs, vfloat w[2])
{
#if SYNET_AVX512
    const __m512i zero = _mm512_setzero_si512();
    w[0] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, (__m512i)pairs));
    w[1] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, (__m512i)pairs));
#elif SYNET_AVX2
    const __m256i zero = _mm256_setzero_si256();
    w[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, (__m256i)pairs));
    w[1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, (__m256i)pairs));
#elif defined(__SSE2__)
    const __m128i zero = _mm_setzero_si128();
    w[0] = _mm_castsi128_ps(_mm_unpacklo_epi16(zero, (__m128i)pairs));
    w[1] = _mm_castsi128_ps(_mm_unpackhi_epi16(zero, (__m128i)pairs));
#else
    const uint32_t high = 0xFFFF0000u;
    w[0] = (vfloat)(vbits){pairs[0] << 16, pairs[0] & high, pairs[1] << 16, pairs[1] & high};
    w[1] = (vfloat)(vbits){pairs[2] << 16, pairs[2] & high, pairs[3] << 16, pairs[3] & high};
#endif
}

/* the even (`odd`: the odd) lanes of a unit's vectors a and b, in channel order: lanes 0 and 2 (1 and 3) of
   each 4 of a, then b's, 128 bits at a time */
SYNET_INLINE vfloat parity_lanes(vfloat a, vfloat b, const int odd)
{
#if SYNET_AVX512
    return odd ? _mm512_shuffle_ps(a, b, 0xDD) : _mm512_shuffle_ps(a, b, 0x88);
#elif SYNET_AVX2
    return odd ? _mm256_shuffle_ps(a, b, 0xDD) : _mm256_shuffle_ps(a, b, 0x88);
#elif defined(__SSE__)
    return odd ? _mm_shuffle_ps(a, b, 0xDD) : _mm_shuffle_ps(a, b, 0x88);
#else
    return odd ? __builtin_shufflevector(a, b, 1, 3, 5, 7) : __builtin_shufflevector(a, b, 0, 2, 4, 6);
#endif
}

/* Units of VW channels a call: AVX-512, 2 (4 pixels: 16 sums, 8 totals, 4 weight vectors and a broadcast in
   its 32 registers); below, 1 (5 pixels in 16 registers, a few totals on the stack: 4 pixels, all in
   registers, took 1.01-1.03x the time at avx2) */
#if VW == 16
#define FP32_UNITS 2
#else
#define FP32_UNITS 1
#endif

/* out[m][n] (row stride BLOCK), or through ts to dst: for M pixels (a, ps apart) and n < NU * VW channels, the
   sum over taps t and blocks of KBLOCK channel pairs, in tdpbf16ps's order (see the top of the file), of
   a[toff[t] + m*ps + c] * weight[c][n] for channels c = 2k, 2k + 1; b: pair 0's weights, the next pair's
   bstride floats further, each unit's 2 * VW floats (`wide`) or VW BF16 pairs. Per block: sums from zero,
   each lane one parity's chain; then total = total + (even + odd). */
SYNET_INLINE void fp32_tile(const float *a, const int64_t *toff, int64_t ntaps, int64_t kpairs, int64_t ps,
                            const float *b, int64_t bstride, float *out, const int wide, const int M, const int NU,
                            const tile_store *ts, int64_t c)
{
    vfloat total[MMAX][FP32_UNITS];
    for (int m = 0; m < M; ++m)
        for (int u = 0; u < NU; ++u)
            total[m][u] = (vfloat){};
    for (int64_t t = 0; t < ntaps; ++t)
        for (int64_t k0 = 0; k0 < kpairs; k0 += KBLOCK) {
            const int64_t k1 = SYNET_MIN(kpairs, k0 + KBLOCK);
            const float *at = a + toff[t];
            vfloat sum[MMAX][2 * FP32_UNITS];
            for (int m = 0; m < M; ++m)
                for (int v = 0; v < 2 * NU; ++v)
                    sum[m][v] = (vfloat){};
#pragma GCC unroll 4
            for (int64_t k = k0; k < k1; ++k, b += bstride) {
                vfloat w[2 * FP32_UNITS];
                for (int u = 0; u < NU; ++u) {
                    if (wide) {
                        w[2 * u] = *(const vfloat_u *)(const void *)(b + 2 * VW * u);
                        w[2 * u + 1] = *(const vfloat_u *)(const void *)(b + 2 * VW * u + VW);
                    } else {
                        widen_pairs(*(const vbits_u *)(const void *)(b + VW * u), w + 2 * u);
                    }
                }
                for (int m = 0; m < M; ++m) {
                    const vfloat x = pair_splat(at + m * ps + 2 * k);
                    for (int v = 0; v < 2 * NU; ++v)
                        sum[m][v] = multiply_add(x, w[v], sum[m][v]);
                }
            }
            for (int m = 0; m < M; ++m)
                for (int u = 0; u < NU; ++u)
                    total[m][u] = total[m][u] + (parity_lanes(sum[m][2 * u], sum[m][2 * u + 1], 0) +
                                                 parity_lanes(sum[m][2 * u], sum[m][2 * u + 1], 1));
        }
    if (ts) { /* act(sum + bias), RELU as synet_act_relu (x < 0 ? 0 : x); ts and the bias read before the
                 first store, as in bf16_tile */
        const int64_t mstep = ts->mstep;
        const int relu = ts->relu, stream = ts->stream;
        float *d32 = (float *)ts->dst + ts->off + c;
        vfloat bias[FP32_UNITS];
        for (int u = 0; u < NU; ++u)
            bias[u] = *(const vfloat_u *)(const void *)(ts->bias + c + VW * u);
        for (int m = 0; m < M; ++m)
            for (int u = 0; u < NU; ++u) {
                vfloat x = total[m][u] + bias[u];
                if (relu)
                    x = relu_vf(x);
                if (stream)
                    stream_vf(d32 + m * mstep + VW * u, x);
                else
                    store_vf(d32, m * mstep + VW * u, x, 0);
            }
        return;
    }
    for (int m = 0; m < M; ++m)
        for (int u = 0; u < NU; ++u)
            *(vfloat_u *)(void *)(out + m * BLOCK + VW * u) = total[m][u];
}

#define FP32_CASE(MM, NN)                                                             \
    case (MM) * 8 + (NN):                                                             \
        if (wide)                                                                     \
            fp32_tile(a, toff, ntaps, kpairs, ps, b, bstride, out, 1, MM, NN, ts, c); \
        else                                                                          \
            fp32_tile(a, toff, ntaps, kpairs, ps, b, bstride, out, 0, MM, NN, ts, c); \
        return;
#define FP32_CASES_M4(NN) FP32_CASE(1, NN) FP32_CASE(2, NN) FP32_CASE(3, NN) FP32_CASE(4, NN)

/* fp32_tile of M pixels x NU units (micro_rows, FP32_UNITS) */
static void fp32_call(const float *a, const int64_t *toff, int64_t ntaps, int64_t kpairs, int64_t ps,
                      const float *b, int64_t bstride, int wide, float *out, int M, int NU, const tile_store *ts,
                      int64_t c)
{
    switch (M * 8 + NU) {
        FP32_CASES_M4(1)
        FP32_CASE(5, 1)
#if VW == 16
        FP32_CASE(6, 1)
        FP32_CASE(7, 1)
        FP32_CASE(8, 1)
        FP32_CASES_M4(2)
#endif
    default:
        break;
    }
}

/* ---- the vdpbf16ps micro-kernel ---- */

#if HAVE_BF16
/* One block of `pairs` channel pairs (even) of M pixels x NV vectors of channels, with vdpbf16ps, which adds
   the products of a pair's high then low halves to one sum: both parities' sums from zero, in channel order,
   side by side (even: channels c = 4j, c + 2; odd: 4j + 1, 4j + 3, each step one of each), then
   total += even + odd. A step's pair of one parity is broadcast as (high c, low c + 2): `x` holds the block's
   channels of the M pixels (xs apart) in quad order, 4j .. 4j + 3 as 4j + 2, 4j, 4j + 3, 4j + 1 (quad_place),
   and pack_gemm packs the weights' pairs likewise (pair_weights): row 2j holds (4j + 2, 4j), row 2j + 1
   (4j + 3, 4j + 1). */
SYNET_INLINE void bf16_block(const uint16_t *x, int64_t xs, const uint16_t *b, int64_t bstride, int64_t pairs,
                             const int M, const int NV, __m512 total[MMAX][2])
{
    __m512 even[MMAX][2], odd[MMAX][2];
    for (int m = 0; m < M; ++m)
        for (int v = 0; v < NV; ++v)
            even[m][v] = odd[m][v] = _mm512_setzero_ps();
#pragma GCC unroll 2
    for (int64_t k = 0; k < pairs; k += 2) {
        const uint16_t *row = b + k * bstride;
        __m512bh we[2], wo[2];
        for (int v = 0; v < NV; ++v) {
            we[v] = (__m512bh)_mm512_loadu_si512((const void *)(row + 32 * v));
            wo[v] = (__m512bh)_mm512_loadu_si512((const void *)(row + bstride + 32 * v));
        }
        for (int m = 0; m < M; ++m) {
            int32_t pe, po;
            memcpy(&pe, x + m * xs + 2 * k, 4);
            memcpy(&po, x + m * xs + 2 * k + 2, 4);
            const __m512bh xe = (__m512bh)_mm512_set1_epi32(pe), xo = (__m512bh)_mm512_set1_epi32(po);
            for (int v = 0; v < NV; ++v) {
                even[m][v] = _mm512_dpbf16_ps(even[m][v], xe, we[v]);
                odd[m][v] = _mm512_dpbf16_ps(odd[m][v], xo, wo[v]);
            }
        }
    }
    for (int m = 0; m < M; ++m)
        for (int v = 0; v < NV; ++v)
            total[m][v] = _mm512_add_ps(total[m][v], _mm512_add_ps(even[m][v], odd[m][v]));
}

/* fp32_tile with bf16_block (kpairs even), NV <= 2, on an image in quad order (`quads`, image_quads), or with
   each block's channels of the M pixels first reordered into x. The totals, both parities' sums (3 x M x NV),
   2 x NV weights and two broadcasts fill the registers: nothing is spilled (6 pixels x 4 vectors, the parities
   one after the other with one's sums in registers and the rest in memory, took 1.25x the time on D5, AMD
   Zen 4). */
SYNET_INLINE void bf16_tile(const uint16_t *a, const int64_t *toff, int64_t ntaps, int64_t kpairs, int64_t ps,
                            int quads, const uint16_t *b, int64_t bstride, float *out, const int M, const int NV,
                            const tile_store *ts, int64_t c)
{
    __m512 total[MMAX][2];
    uint16_t x[MMAX * 32];
    /* quad order (quad_place), 32 lanes */
    const __m512i order = _mm512_set_epi16(29, 31, 28, 30, 25, 27, 24, 26, 21, 23, 20, 22, 17, 19, 16, 18, 13, 15, 12, 14,
                                           9, 11, 8, 10, 5, 7, 4, 6, 1, 3, 0, 2);
    for (int m = 0; m < M; ++m)
        for (int v = 0; v < NV; ++v)
            total[m][v] = _mm512_setzero_ps();
    for (int64_t t = 0; t < ntaps; ++t)
        for (int64_t k0 = 0; k0 < kpairs; k0 += KBLOCK) {
            const int64_t pairs = SYNET_MIN(kpairs - k0, KBLOCK);
            if (quads) {
                bf16_block(a + toff[t] + 2 * k0, ps, b, bstride, pairs, M, NV, total);
            } else {
                const __mmask32 lanes = pairs == KBLOCK ? 0xFFFFFFFFu : (1u << (2 * pairs)) - 1;
                for (int m = 0; m < M; ++m)
                    _mm512_storeu_si512(
                        (void *)(x + m * 32),
                        _mm512_permutexvar_epi16(order,
                                                 _mm512_maskz_loadu_epi16(lanes, a + toff[t] + m * ps + 2 * k0)));
                bf16_block(x, 32, b, bstride, pairs, M, NV, total);
            }
            b += pairs * bstride;
        }
    if (ts) { /* store_fast's epilogue (store_act16), whole-vector stores; ts and the bias are read before the
                 first store (-fno-strict-aliasing: reloads after each store waited on it, and D2 gained 1.0x
                 instead of 1.12x) */
        void *dst = ts->dst;
        const int64_t off = ts->off + c, mstep = ts->mstep;
        const int relu = ts->relu, bf16 = ts->bf16, whole = ts->stream ? 2 : 1;
        __m512 bias[2];
        for (int v = 0; v < NV; ++v)
            bias[v] = _mm512_loadu_ps(ts->bias + c + 16 * v);
        for (int m = 0; m < M; ++m)
            for (int v = 0; v < NV; ++v)
                store_act16_lanes(dst, off + m * mstep + 16 * v, 0xFFFF, _mm512_add_ps(total[m][v], bias[v]), relu,
                                  bf16, whole);
        return;
    }
    for (int m = 0; m < M; ++m)
        for (int v = 0; v < NV; ++v)
            _mm512_storeu_ps(out + m * BLOCK + 16 * v, total[m][v]);
}

#define BF16_CASE(MM, NN) \
    case (MM) * 8 + (NN): \
        bf16_tile(a, toff, ntaps, kpairs, ps, quads, b, bstride, out, MM, NN, ts, c); \
        return;
#define BF16_CASES_M4(NN) BF16_CASE(1, NN) BF16_CASE(2, NN) BF16_CASE(3, NN) BF16_CASE(4, NN)
#define BF16_CASES_M8(NN) BF16_CASES_M4(NN) BF16_CASE(5, NN) BF16_CASE(6, NN) BF16_CASE(7, NN) BF16_CASE(8, NN)

static void bf16_call(const uint16_t *a, const int64_t *toff, int64_t ntaps, int64_t kpairs, int64_t ps, int quads,
                      const uint16_t *b, int64_t bstride, float *out, int M, int NV, const tile_store *ts,
                      int64_t c)
{
    switch (M * 8 + NV) {
        BF16_CASES_M8(1)
        BF16_CASES_M4(2)
    default:
        break;
    }
}
#endif

/* ---- the AMX micro-kernel ---- */

#if HAVE_AMX
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* Tiles: C 0..3 (rows x 16 FP32), A 4, 5 (rows pixels x 32 BF16 channels), B 6, 7 (16 pairs x 16 lanes). */
static void amx_configure(int rows)
{
    tile_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.palette = 1;
    for (int t = 0; t < 6; ++t) {
        cfg.rows[t] = (uint8_t)rows;
        cfg.colsb[t] = 64;
    }
    for (int t = 6; t < 8; ++t) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
}

static void amx_release(void) { _tile_release(); }

/* A unit's sums waiting in a tile buffer (32 x 32 FP32, segment 1 from row 16) for deconv_store, one segment
   (`pieces` of them) at a time, between the next unit's steps: the stores' cache misses overlap the tiles'
   work instead of following it (D1-D3, D5 3-10 % faster). Pieces of 16 channels were slower (D2 1.5x): a
   pixel's cache lines are best written together. */
typedef struct {
    const float *tile;
    synet_size doff[2], rows, nvalid, oc0, off, mstep, nstep; /* rows: each segment's pixels */
    int pieces, done;
} amx_pending;

static void amx_store_piece(const synet_deconv_plan *p, amx_pending *w, void *dst)
{
    const int s = w->done;
    deconv_store(w->tile + s * 16 * 32, 32, w->rows, w->nvalid, w->oc0, p, dst,
                 w->off + w->doff[s], w->mstep, w->nstep);
    w->done++;
}

/* the pieces of w due after `step` of `steps` (all of them after the last) */
SYNET_INLINE void amx_store_due(const synet_deconv_plan *p, amx_pending *w, void *dst, int64_t step, int64_t steps)
{
    while (w->done < w->pieces && (int64_t)w->done * steps < step * w->pieces)
        amx_store_piece(p, w, dst);
}

/* One unit: pixel segment a0 (and a1 when not NULL) of the configured rows x nv*16 output channels;
   K = taps x kblocks x 32 channels, into `out` ([32][32] FP32, a1's rows from row 16); the pending unit's
   stores (if any) interleaved with the steps. */
static void amx_unit(const uint16_t *a0, const uint16_t *a1, const int64_t *toff, int64_t ntaps, int64_t kblocks,
                     int64_t astride, const uint16_t *b, int nv, float *out, const synet_deconv_plan *p,
                     amx_pending *pending, void *dst)
{
    const int64_t bstride = nv * 64; /* bytes per pair row of the packed weights */
    const int64_t steps = ntaps * kblocks;
    int64_t step = 0;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t t = 0; t < ntaps; ++t) {
        const uint16_t *p0 = a0 + toff[t];
        const uint16_t *p1 = a1 ? a1 + toff[t] : a0;
        for (int64_t kb = 0; kb < kblocks; ++kb, b += 16 * nv * 32) {
            _tile_loadd(4, p0 + 32 * kb, astride);
            _tile_loadd(6, b, bstride);
            _tile_dpbf16ps(0, 4, 6);
            if (nv == 2) {
                _tile_loadd(7, b + 32, bstride);
                _tile_dpbf16ps(1, 4, 7);
            }
            if (a1) {
                _tile_loadd(5, p1 + 32 * kb, astride);
                _tile_dpbf16ps(2, 5, 6);
                if (nv == 2)
                    _tile_dpbf16ps(3, 5, 7);
            }
            if (pending)
                amx_store_due(p, pending, dst, ++step, steps);
        }
    }
    _tile_stored(0, out, 128);
    if (nv == 2)
        _tile_stored(1, out + 16, 128);
    if (a1) {
        _tile_stored(2, out + 16 * 32, 128);
        if (nv == 2)
            _tile_stored(3, out + 16 * 32 + 16, 128);
    }
}
#endif

/* dst elements between neighbouring output pixels of one channel, and channels of one pixel */
static synet_size pixel_step(const synet_deconv_plan *p) { return p->nhwc ? p->dst_c : 1; }
static synet_size channel_step(const synet_deconv_plan *p) { return p->nhwc ? 1 : p->dst_d * p->dst_h * p->dst_w; }

/* output channels of channel block ob that exist (of p->block_width) */
SYNET_INLINE synet_size block_valid(const synet_deconv_plan *p, synet_size ob)
{
    return SYNET_MIN(p->block_width, p->cg_out - ob * p->block_width);
}

/* ---- the padded source image ---- */

/* The vdpbf16ps micro-kernel's channel order (see bf16_block): each 4 channels c .. c + 3 as c + 2, c, c + 3,
   c + 1. The image it reads in place is in this order (image_quads); channel c's place: */
SYNET_INLINE synet_size quad_place(synet_size c)
{
    return (c & ~(synet_size)3) | (synet_size)((0x8D >> (2 * (c & 3))) & 3);
}

/* whether the image holds each group's channels in quad order (quad_place): the vdpbf16ps micro-kernel's
   own copy (a source read in place, `direct`, is reordered in the micro-kernel) */
static int image_quads(const synet_deconv_plan *p) { return p->micro == SYNET_MICRO_BF16 && !p->direct; }

/* n elements of s to d as BF16 bits, each 4 in quad order; a last part-filled quad is written whole, its
   missing channels as zeros (the image's pad channels) */
static void convert_run_quads(const void *s, int src_bf16, uint16_t *d, synet_size n)
{
#if SYNET_AVX512
    for (synet_size i = 0; i < n; i += 16) {
        const __mmask16 k = synet_mask16(n - i);
        const __m256i h = src_bf16 ? _mm256_maskz_loadu_epi16(k, (const uint16_t *)s + i)
                                   : synet_bf16_pack_x16(_mm512_maskz_loadu_ps(k, (const float *)s + i));
        _mm256_mask_storeu_epi16(d + i, synet_mask16((n - i + 3) & ~(synet_size)3), quad_order(h));
    }
#else
    for (synet_size i = 0; i < n; ++i)
        d[quad_place(i)] = bf16_at(s, src_bf16, i);
    for (synet_size i = n; i & 3; ++i)
        d[quad_place(i)] = 0;
#endif
}

#if HAVE_BF16
/* ---- channels first, pixels in lanes (p->lanes: the vdpbf16ps kernel's own image and tasks, lanes_task) ----

   A lanes plan's image holds each padded row (z, y) as [pair q][x], a 32-bit lane a pixel: the quad image's
   pairs (quad_place: q = 2j channels 4j (high) and 4j + 2 (low), q = 2j + 1 channels 4j + 1 and 4j + 3) with
   a row's pixels side by side, so that 16 pixels of a pair are one vector. Same size as the channels-last
   image. */

/* 16 source values of one channel row from x (lanes k) as BF16 bits in the low half of each 32-bit lane */
SYNET_INLINE __m512i lanes_source(const char *s, int src_bf16, synet_size x, __mmask16 k)
{
    if (src_bf16)
        return _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, (const uint16_t *)(const void *)s + x));
    return synet_bf16_nearest_x16(_mm512_castps_si512(_mm512_maskz_loadu_ps(k, (const float *)(const void *)s + x)));
}

/* Image row (n, z, y) (z, y: source coordinates) of a lanes plan, at d: each pair row's pad_low_x zero lanes,
   the source row's pixels (channel pair (hi, hi + 2) as (high, low) halves), zeros to padded_w. Each channel's
   loads prefetch TRANSPOSED_PREFETCH bytes ahead into L2 within the channel (convert_transposed's reasons). */
static void pad_row_lanes(const synet_deconv_plan *p, const void *src, uint32_t *d, synet_size n, synet_size z,
                          synet_size y)
{
    const synet_size w = p->padded_w, pairs = p->cg_padded / 2, se = p->src_bf16 ? 2 : 4;
    const synet_size plane = p->src_d * p->src_h * p->src_w, right = w - p->pad_low_x - p->src_w;
    const synet_size prefetch_end = ((p->src_d - z) * p->src_h - y) * p->src_w * se - TRANSPOSED_PREFETCH;
    for (synet_size g = 0; g < p->group; ++g)
        for (synet_size q = 0; q < pairs; ++q) {
            uint32_t *o = d + (g * pairs + q) * w;
            const synet_size hi = 4 * (q / 2) + q % 2, lo = hi + 2;
            memset(o, 0, p->pad_low_x * 4);
            memset(o + p->pad_low_x + p->src_w, 0, right * 4);
            o += p->pad_low_x;
            if (hi >= p->cg_in) {
                memset(o, 0, p->src_w * 4);
                continue;
            }
            const synet_size channel = n * p->src_c + g * p->cg_in + hi;
            const char *sh = (const char *)src + (((channel * p->src_d + z) * p->src_h + y) * p->src_w) * se;
            const char *sl = lo < p->cg_in ? sh + 2 * plane * se : NULL;
            for (synet_size x = 0; x < p->src_w; x += 16) {
                const __mmask16 k = synet_mask16(p->src_w - x);
                if (x * se < prefetch_end) {
                    _mm_prefetch(sh + x * se + TRANSPOSED_PREFETCH, _MM_HINT_T1);
                    if (sl)
                        _mm_prefetch(sl + x * se + TRANSPOSED_PREFETCH, _MM_HINT_T1);
                }
                const __m512i h = lanes_source(sh, p->src_bf16, x, k);
                const __m512i l = sl ? lanes_source(sl, p->src_bf16, x, k) : _mm512_setzero_si512();
                _mm512_mask_storeu_epi32(o + x, k, _mm512_or_si512(_mm512_slli_epi32(h, 16), l));
            }
        }
}
#endif

/* GEMM: row r of image[n, yp, xp, g, c] = bf16(src[n, g*cg_in + c, yp - pad_low_y, xp - pad_low_x]), zero
   outside the source and in the pad channels; c at quad_place(c) for image_quads */
static void pad_row_gemm(const synet_deconv_plan *p, const void *src, void *image, synet_size r)
{
    const int f32 = p->micro == SYNET_MICRO_FP32, quads = image_quads(p);
    const synet_size e = f32 ? 4 : 2, cpt = p->pixel_stride, row_len = p->padded_w * cpt;
    const synet_size n = r / (p->padded_d * p->padded_h), z = r / p->padded_h % p->padded_d - p->pad_low_z;
    const synet_size y = r % p->padded_h - p->pad_low_y;
    const int outside = y < 0 || y >= p->src_h || z < 0 || z >= p->src_d;
    char *d = (char *)image + r * row_len * e;
#if HAVE_BF16
    if (!outside && p->lanes) {
        pad_row_lanes(p, src, (uint32_t *)(void *)d, n, z, y);
        return;
    }
#endif
    if (outside || p->cg_padded != p->cg_in) {
        memset(d, 0, row_len * e);
        if (outside)
            return;
    } else { /* only the left and right borders */
        memset(d, 0, p->pad_low_x * cpt * e);
        memset(d + (p->pad_low_x + p->src_w) * cpt * e, 0, (p->padded_w - p->pad_low_x - p->src_w) * cpt * e);
    }
    d += p->pad_low_x * cpt * e;
    const synet_size se = p->src_bf16 ? 2 : 4;
    if (p->nhwc) {
        const synet_size s0 = ((n * p->src_d + z) * p->src_h + y) * p->src_w * p->src_c;
        if (p->cg_padded == p->cg_in) {
            if (quads)
                convert_run_quads((const char *)src + s0 * se, p->src_bf16, (uint16_t *)(void *)d,
                                  p->src_w * p->src_c);
            else
                deconv_convert_run((const char *)src + s0 * se, p->src_bf16, d, f32, p->src_w * p->src_c,
                                   p->src_w * p->src_c * se);
            return;
        }
        for (synet_size x = 0; x < p->src_w; ++x)
            for (synet_size g = 0; g < p->group; ++g) {
                const char *s = (const char *)src + (s0 + x * p->src_c + g * p->cg_in) * se;
                char *o = d + (x * cpt + g * p->cg_padded) * e;
                if (quads)
                    convert_run_quads(s, p->src_bf16, (uint16_t *)(void *)o, p->cg_in);
                else
                    deconv_convert_run(s, p->src_bf16, o, f32, p->cg_in, p->cg_in * se);
            }
        return;
    }
    for (synet_size g = 0; g < p->group; ++g)
        convert_transposed((const char *)src + ((((n * p->src_c + g * p->cg_in) * p->src_d + z) * p->src_h + y) * p->src_w) * se,
                       p->src_bf16, p->src_d * p->src_h * p->src_w, p->cg_in, p->src_w, d + g * p->cg_padded * e, f32,
                       quads, cpt, ((p->src_d - z) * p->src_h - y) * p->src_w);
}

static void pad_row(const synet_deconv_plan *p, const void *src, void *image, synet_size r)
{
    if (p->impl == SYNET_DECONV_DEPTHWISE)
        deconv_depthwise_pad_row(p, src, image, r);
    else
        pad_row_gemm(p, src, image, r);
}

/* ---- tasks ---- */

/* M pixels x nv16 * 16 channels of one phase, to out (row stride BLOCK) or, given ts, to dst: calls of up to
   MICRO_SPAN channels (the FP32 micro-kernel's FP32_UNITS units) or BF16_SPAN (vdpbf16ps): both parities'
   sums and the totals of M x that many channels fill the registers */
#define MICRO_SPAN (FP32_UNITS * VW)
#define BF16_SPAN 32

/* uint16 elements of one packed row of `lanes` output channels: (even, odd) BF16 pairs, or (wide_weights, the
   FP32 micro-kernel where they fit L2) float32 weights of both parities in units of VW channels (fp32_tile),
   widened once here rather than on every load */
static synet_size row_units(const synet_deconv_plan *p, synet_size lanes) { return lanes * (p->wide_weights ? 4 : 2); }

/* channels of the strip from n0 of a block of `lanes` channels (strip_row) */
static synet_size strip_width(const synet_deconv_plan *p, synet_size lanes, synet_size n0)
{
    return SYNET_MIN(p->weight_strip, lanes - n0);
}

/* The packed row of tap t (of the phase's ntaps), pair k, output channels n0 .. of a block of `lanes`
   channels, in uint16 elements from the block's start. The block is cut in strips of p->weight_strip
   channels, each strip's rows [t][k] back to back: for the FP32 micro-kernel, one strip is what one call
   reads (MICRO_SPAN channels), so its weights are one sequential stream (rows of a whole 64-channel block,
   512 bytes apart, met in 8 of L1's 64 sets: strips took D5 at avx2 to 0.93-0.98x the time); the others read whole
   rows (one strip). n0: a multiple of the strip. */
static synet_size strip_row(const synet_deconv_plan *p, synet_size ntaps, synet_size t, synet_size k, synet_size lanes,
                            synet_size n0)
{
    return row_units(p, n0) * ntaps * p->kpairs + (t * p->kpairs + k) * row_units(p, strip_width(p, lanes, n0));
}

/* ts is passed on with the channel offset c of each call (a copy per call with off and bias moved, its fields
   stored and then read back as one 32-byte load, waited on store forwarding: 5 % of D5's time). The FP32
   micro-kernel sums only the units that hold some of the block's `nvalid` channels (below AVX-512 a unit is 8
   or 4 channels: a group of 8 output channels sums half the products or fewer); the tile's other lanes are
   left as they are, and nothing reads them (its stores take nvalid channels). */
static void micro_tile(const synet_deconv_plan *p, const void *a, const int64_t *toff, int64_t ntaps,
                       const uint16_t *b, float *out, int M, int nv16, int nvalid, const tile_store *ts)
{
    const int channels = nv16 * 16;
#if HAVE_BF16
    if (p->micro != SYNET_MICRO_FP32) {
        const int quads = image_quads(p);
        for (int c = 0; c < channels; c += BF16_SPAN)
            bf16_call((const uint16_t *)a, toff, ntaps, p->kpairs, p->pixel_stride, quads, b + 2 * c, 2 * channels,
                      out + c, M, SYNET_MIN(BF16_SPAN, channels - c) / 16, ts, c);
        return;
    }
#endif
    for (int c0 = 0; c0 < channels && c0 < nvalid; c0 += MICRO_SPAN) {
        const int span = SYNET_MIN(MICRO_SPAN, channels - c0), units = (SYNET_MIN(span, nvalid - c0) + VW - 1) / VW;
        /* this strip's rows: wide, 2 * span floats; else span pairs (a float each) */
        const float *strip = (const float *)(const void *)(b + strip_row(p, ntaps, 0, 0, channels, c0));
        fp32_call((const float *)a, toff, ntaps, p->kpairs, p->pixel_stride, strip,
                  p->wide_weights ? 2 * span : span, p->wide_weights != 0, out + c0, M, units, ts, c0);
    }
}

/* Pixels per micro-tile of nv16 x 16 channels: the sums of M x MICRO_SPAN or BF16_SPAN channels (both
   parities'), their totals, the weights and a broadcast fill the registers (AVX-512: 32: of 16 channels
   2 x 8 sums + 8 totals + 2 weights, of 32 or more 16 + 8 + 4; below, 16: fp32_tile's 5 pixels x a unit). */
static int micro_rows(int nv16)
{
#if VW == 16
    return nv16 == 1 ? 8 : 4;
#else
    (void)nv16;
    return 5;
#endif
}

#define PHASE_SUMS 96 /* pixels of the x phases of a column chunk together, at most */
#define PHASES_MAX 16         /* the most x phases stored together */

#if SYNET_AVX512 || SYNET_AVX2

/* ---- windows of WIN = 16 output columns (store_phases): one channel's 64 bytes of FP32 outputs, or 32
   of BF16 ones; lanes [q0, q1) of one ---- */
#define WIN 16
#if SYNET_AVX512
typedef __m512 window;
/* col[c] = channel n0 + c of the window's columns q0 <= q < q1 (the channels of column q at row[q] + n0),
   c < nn <= 16, zero elsewhere */
SYNET_INLINE void window_columns(const float *const *row, int q0, int q1, synet_size n0, int nn, window col[WIN])
{
    for (int q = 0; q < WIN; ++q)
        col[q] = q >= q0 && q < q1 ? _mm512_maskz_loadu_ps(synet_mask16(nn), row[q] + n0) : _mm512_setzero_ps();
    synet_transpose16(col);
}
SYNET_INLINE window window_bias(window v, float b) { return _mm512_add_ps(v, _mm512_set1_ps(b)); }
SYNET_INLINE window window_relu(window v) { return _mm512_max_ps(_mm512_setzero_ps(), v); }
SYNET_INLINE window window_load(const float *s) { return _mm512_loadu_ps(s); }
/* lanes < n from s, the others from v */
SYNET_INLINE window window_merge(window v, const float *s, int n) { return _mm512_mask_loadu_ps(v, synet_mask16(n), s); }
SYNET_INLINE void window_store(void *dst, synet_size o, int q0, int q1, window v, int bf16)
{
    store_act16(dst, o, (__mmask16)(synet_mask16(q1) & ~synet_mask16(q0)), v, 0, bf16);
}
SYNET_INLINE void window_stream(float *d, window v) { stream_vf(d, v); }
#else
typedef struct {
    __m256 half[2]; /* lanes 0-7, 8-15 */
} window;
SYNET_INLINE void window_columns(const float *const *row, int q0, int q1, synet_size n0, int nn, window col[8])
{
    const __m256i kn = synet_mask8(nn);
    for (int h = 0; h < 2; ++h) { /* columns 8h .. 8h + 7 */
        __m256 t[8];
        for (int q = 0; q < 8; ++q)
            t[q] = 8 * h + q >= q0 && 8 * h + q < q1 ? _mm256_maskload_ps(row[8 * h + q] + n0, kn) : _mm256_setzero_ps();
        synet_transpose8(t);
        for (int c = 0; c < 8; ++c)
            col[c].half[h] = t[c];
    }
}
SYNET_INLINE window window_bias(window v, float b)
{
    const __m256 vb = _mm256_set1_ps(b);
    return (window){{_mm256_add_ps(v.half[0], vb), _mm256_add_ps(v.half[1], vb)}};
}
SYNET_INLINE window window_relu(window v)
{
    const __m256 zero = _mm256_setzero_ps();
    return (window){{_mm256_max_ps(zero, v.half[0]), _mm256_max_ps(zero, v.half[1])}};
}
SYNET_INLINE window window_load(const float *s) { return (window){{_mm256_loadu_ps(s), _mm256_loadu_ps(s + 8)}}; }
SYNET_INLINE window window_merge(window v, const float *s, int n)
{
    for (int h = 0; h < 2; ++h) {
        const __m256i k = synet_mask8(n - 8 * h);
        v.half[h] = _mm256_blendv_ps(v.half[h], _mm256_maskload_ps(s + 8 * h, k), _mm256_castsi256_ps(k));
    }
    return v;
}
/* lanes [q0, q1) of 8 of one half: whole by one store; part by a masked store (FP32; slow on AMD, so only
   at a row's ends) or lane by lane (BF16: AVX2 has no 16-bit masked store) */
SYNET_INLINE void half_store(void *dst, synet_size o, int q0, int q1, __m256 v, int bf16)
{
    if (q0 == 0 && q1 == 8) {
        store_vf(dst, o, v, bf16);
    } else if (!bf16) {
        if (q0 < q1)
            _mm256_maskstore_ps((float *)dst + o, _mm256_andnot_si256(synet_mask8(q0), synet_mask8(q1)),
                                canonical_nan_vf(v));
    } else {
        float lanes[8];
        _mm256_storeu_ps(lanes, v);
        for (int q = q0; q < q1; ++q)
            store_f(dst, o + q, lanes[q], 1);
    }
}
SYNET_INLINE void window_store(void *dst, synet_size o, int q0, int q1, window v, int bf16)
{
    half_store(dst, o, q0, SYNET_MIN(q1, 8), v.half[0], bf16);
    half_store(dst, o + 8, SYNET_MAX(q0 - 8, 0), q1 - 8, v.half[1], bf16);
}
SYNET_INLINE void window_stream(float *d, window v)
{
    stream_vf(d, v.half[0]);
    stream_vf(d + 8, v.half[1]);
}
#endif

/* Pixels of one x phase in a column chunk when the phases are stored together (store_phases). */
static synet_size phase_chunk(const synet_deconv_plan *p, int mmax)
{
    return SYNET_MIN((synet_size)(4 * mmax), PHASE_SUMS / p->stride_x);
}

/* The last, part-filled window of store_phases, held back per channel until the next row of the task
   fills it (a channels-first output row runs on into the next one): lanes [0, count) of the WIN-output
   window at dst offset `at` (channel oc0; channel c at at + c * cstep), bias and activation applied. */
typedef struct window_carry {
    float v[BLOCK * WIN];
    synet_size at, count;
} window_carry;

static void flush_carry(const synet_deconv_plan *p, window_carry *carry, void *dst, synet_size nvalid)
{
    for (synet_size c = 0; carry->count && c < nvalid; ++c)
        window_store(dst, carry->at + c * channel_step(p), 0, (int)carry->count, window_load(carry->v + c * WIN), p->dst_bf16);
    carry->count = 0;
}

/* Channels first with stride_x 2 to PHASES_MAX and IDENTITY / RELU: the x phases interleave along each
   output row, so storing a tile of one phase writes every stride_x-th element of each channel's row
   (masked stores, or scatters beyond 2, each line written stride_x times). Instead the raw sums of all
   phases of a column chunk are kept ([pixel][channel] rows, phase rx's pixel c0 + q in row q of
   sums + rx * chunk * BLOCK) and stored together: 16 consecutive output columns at a time, their 16 rows
   (from the phases in turn) transposed in registers, so that each channel's columns go out in one
   contiguous store, with bias and activation as deconv_store adds them (stride 2, AVX-512: D1 0.67 -> 0.57
   ms, D7 4.3 -> 3.6 ms; at avx2, where this replaced deconv_store's masked stores to every other element,
   slow on AMD: D7 0.61x the time, D1 0.93-0.95x). At avx2 a window is two 8 x 8 transposes. The windows of
   16 columns start on a store boundary of channel oc0's row (NumPy's buffers start 16 bytes into a cache
   line, and stores across two lines cost D7 1.2x); a row's last, part-filled window waits in `carry` for
   the next row (or chunk) of the task when that continues it in dst, and is stored on its own otherwise.
   With p->stream, whole 64-byte windows bypass the caches (an output far larger than they are: D7 3.7 ->
   2.6 ms; at avx2, D7 streamed takes 0.83x the time of plain stores, but 1.15x when windows of 8 columns
   streamed half lines); the task ends with an sfence. The pixels of a
   phase outside the columns all phases cover go through deconv_store. ni[rx]: the phase's pixels end
   (exclusive); base: dst offset of channel oc0, x 0. */
static void store_phases(const synet_deconv_plan *p, float *sums, synet_size chunk, synet_size c0,
                         const synet_size *ni, void *dst, synet_size base, synet_size oc0, synet_size nvalid,
                         window_carry *carry)
{
    const synet_size cstep = channel_step(p), sx = p->stride_x;
    synet_size first[PHASES_MAX], count[PHASES_MAX];
    /* [lo, hi): the columns where every x is a pixel of this chunk of its phase: from the last phase's
       first x less stride_x - 1 to the first phase's last x plus stride_x (empty if a phase has none) */
    synet_size lo = 0, hi = 0, last_first = 0, first_last = 0;
    int all = 1;
    for (synet_size rx = 0; rx < sx; ++rx) {
        first[rx] = (synet_size)rx - p->pad_left + sx * (p->col_first[rx] + c0); /* x of the chunk's first pixel */
        count[rx] = ni[rx] > c0 ? ni[rx] - c0 : 0;
        all = all && count[rx];
        last_first = rx ? SYNET_MAX(last_first, first[rx]) : first[rx];
        first_last = rx ? SYNET_MIN(first_last, first[rx] + sx * (count[rx] - 1)) : first[rx] + sx * (count[rx] - 1);
    }
    if (all) {
        lo = last_first - (sx - 1);
        hi = SYNET_MAX(lo, first_last + sx);
    }
    for (synet_size rx = 0; rx < sx; ++rx) { /* a phase's pixels left of lo and from hi on, on their own */
        if (!count[rx])
            continue;
        float *own = sums + rx * chunk * BLOCK;
        const synet_size left = hi > lo ? SYNET_MIN(count[rx], (SYNET_MAX(0, lo - first[rx]) + sx - 1) / sx) : count[rx];
        const synet_size right =
            hi > lo ? SYNET_MIN(count[rx], SYNET_MAX(left, (SYNET_MAX(0, hi - first[rx]) + sx - 1) / sx)) : count[rx];
        if (left)
            deconv_store(own, BLOCK, left, nvalid, oc0, p, dst, base + first[rx], sx, cstep);
        if (right < count[rx])
            deconv_store(own + right * BLOCK, BLOCK, count[rx] - right, nvalid, oc0, p, dst,
                         base + first[rx] + sx * right, sx, cstep);
    }
    if (hi <= lo)
        return;
    const int relu = p->act == SYNET_ACT_RELU;
    const float *bias = p->bias + oc0;
    const synet_size e = p->dst_bf16 ? 2 : 4;
    /* lanes before lo in the first window: the carry's, when it continues into this row */
    const synet_size mis = (((uintptr_t)dst + (base + lo) * e) & (WIN * e - 1)) / e;
    if (carry->count && (carry->at + carry->count != base + lo || carry->count != mis))
        flush_carry(p, carry, dst, nvalid);
    for (synet_size x0 = lo - mis; x0 < hi; x0 += WIN) {
        const synet_size q0 = x0 < lo ? lo - x0 : 0, q1 = SYNET_MIN((synet_size)WIN, hi - x0);
        const int carried = x0 < lo && carry->count, held = q1 < WIN && (q0 == 0 || carried);
        const int from = carried ? 0 : (int)q0; /* the lanes stored: [from, q1) */
        const float *row[WIN];
        /* column x: x + pad_left = sx * quot + rx, phase rx, its pixel quot - col_first[rx] - c0 of the chunk
           (counted on from the window's first column: a division per column cost D7 8 %) */
        synet_size quot = (x0 + q0 + p->pad_left) / sx, rx = (x0 + q0 + p->pad_left) % sx;
        for (synet_size q = q0; q < q1; ++q) {
            row[q] = sums + (rx * chunk + quot - p->col_first[rx] - c0) * BLOCK;
            if (++rx == sx) {
                rx = 0;
                ++quot;
            }
        }
        for (synet_size n0 = 0; n0 < nvalid; n0 += VW) {
            const int nn = (int)SYNET_MIN((synet_size)VW, nvalid - n0);
            window col[VW];
            window_columns(row, (int)q0, (int)q1, n0, nn, col);
            for (int c = 0; c < nn; ++c) {
                window v = window_bias(col[c], bias[n0 + c]);
                if (relu)
                    v = window_relu(v); /* NaN stays NaN (the second operand) */
                if (carried)
                    v = window_merge(v, carry->v + (n0 + c) * WIN, (int)q0);
                const synet_size o = base + (n0 + c) * cstep + x0;
                if (held)
                    window_store(carry->v + (n0 + c) * WIN, 0, 0, WIN, v, 0);
                else if (p->stream && from == 0 && q1 == WIN && !p->dst_bf16 && !((uintptr_t)((float *)dst + o) & 63))
                    window_stream((float *)dst + o, v);
                else
                    window_store(dst, o, from, (int)q1, v, p->dst_bf16);
            }
        }
        if (carried)
            carry->count = 0;
        if (held) {
            carry->at = base + x0;
            carry->count = q1;
        }
    }
}
#endif

/* Task t of a GEMM plan without AMX: its image n, group g, run of rows and output channel block ob */
typedef struct gemm_task_place {
    synet_size n, g, run, ob;
} gemm_task_place;

static gemm_task_place gemm_task_of(const synet_deconv_plan *p, synet_size t)
{
    gemm_task_place at;
    const synet_size nruns = (p->nrows + p->row_run - 1) / p->row_run;
    at.ob = t % p->nblocks;
    t /= p->nblocks;
    at.run = t % nruns;
    t /= nruns;
    at.g = t % p->group;
    at.n = t / p->group;
    return at;
}

/* One task: a run of p->row_run output phase rows (in output order) of one image and group, one block of
   <= 64 output channels. */
static void gemm_task(const synet_deconv_plan *p, const void *image, void *dst, synet_size task)
{
    float tile[MMAX * BLOCK];
#if SYNET_AVX512 || SYNET_AVX2
    float sums[PHASE_SUMS * BLOCK];
    const int paired = !p->nhwc && p->stride_x >= 2 && p->stride_x <= PHASES_MAX &&
                       (p->act == SYNET_ACT_IDENTITY || p->act == SYNET_ACT_RELU);
#else
    const int paired = 0;
#endif
    const gemm_task_place place = gemm_task_of(p, task);
    const synet_size ob = place.ob, run = place.run, g = place.g, n = place.n;
    const synet_size phases = p->stride_z * p->stride_y * p->stride_x;
    const synet_size nvalid = SYNET_MIN((synet_size)BLOCK, p->cg_out - ob * BLOCK);
    const int nv = (int)((nvalid + 15) / 16), mmax = micro_rows(nv);
    const synet_size oc0 = g * p->cg_out + ob * BLOCK, e = p->micro == SYNET_MICRO_FP32 ? 4 : 2;
    /* straight to dst (tile_store): channels last, whole vectors (the micro-kernel's: micro_tile), IDENTITY /
       RELU, and BF16 output only from the vdpbf16ps kernel */
    const int direct = p->nhwc && nvalid % VW == 0 &&
                       (p->act == SYNET_ACT_IDENTITY || p->act == SYNET_ACT_RELU) &&
                       (!p->dst_bf16 || (HAVE_BF16 && p->micro != SYNET_MICRO_FP32));
    /* an FP32 output far larger than the caches (p->stream) whose every direct store is a whole cache line:
       they bypass the caches, each pixel's whole lines one after another (D5, 4 MB out: 0.87x the time, at
       avx2 0.90x). Lines: the block's first channel on one (dst + oc0), a pixel step of whole lines (dst_c
       a multiple of 16) and whole 16-channel units in the block (two vectors at avx2); a channel count of 120,
       or a group starting at channel 72, streamed to unaligned addresses, which fault. dst_bf16 only for a
       plan not made by the planner. */
    const int stream = p->stream && !p->dst_bf16 && p->dst_c % 16 == 0 && nvalid % 16 == 0 &&
                       !((uintptr_t)((float *)dst + oc0 * channel_step(p)) & 63);
    /* columns in chunks, every x phase of a chunk before the next chunk: the output lines the phases
       share (stride_x phases interleave along a row) are completed while they are in cache */
    synet_size columns = 0;
    for (synet_size rx = 0; rx < p->stride_x; ++rx)
        columns = SYNET_MAX(columns, p->col_count[rx]);
#if SYNET_AVX512 || SYNET_AVX2
    const synet_size chunk = paired ? phase_chunk(p, mmax) : (synet_size)(4 * mmax);
#else
    const synet_size chunk = 4 * mmax;
#endif
#if SYNET_AVX512 || SYNET_AVX2
    window_carry carry;
    carry.count = 0;
#endif
    for (synet_size r = run * p->row_run; r < SYNET_MIN(p->nrows, (run + 1) * p->row_run); ++r) {
        const synet_deconv_row row = synet_deconv_row_of(p, r);
        const synet_size rzy = row.rzy, j = row.j, k = row.k, oy = row.oy, oz = row.oz;
        for (synet_size c0 = 0; c0 < columns; c0 += chunk) {
            synet_size ends[PHASES_MAX];
            for (synet_size rx = 0; rx < p->stride_x; ++rx) {
                const synet_size phase = rzy * p->stride_x + rx, i0 = p->col_first[rx];
                const synet_size ni = SYNET_MIN(p->col_count[rx], c0 + chunk);
                if (rx < PHASES_MAX)
                    ends[rx] = ni;
                const uint16_t *bw = p->weights + p->weight_offsets[(g * phases + phase) * p->nblocks + ob];
                for (synet_size i = c0; i < ni;) {
                    /* the fewest tiles of <= mmax pixels, of near-equal sizes (16 at <= 5: 4+4+4+4, not 5+5+5+1:
                       a thin tile has too few accumulators to keep the multiply-adds busy) */
                    const synet_size rest = ni - i, tiles = (rest + mmax - 1) / mmax;
                    const int M = (int)((rest + tiles - 1) / tiles);
                    const synet_size at =
                        n * p->padded_image +
                        (((k + p->pad_low_z) * p->padded_h + j + p->pad_low_y) * p->padded_w +
                         (i0 + i + p->pad_low_x)) *
                            p->pixel_stride +
                        g * p->cg_padded;
#if SYNET_AVX512 || SYNET_AVX2
                    float *out = paired ? sums + (rx * chunk + i - c0) * BLOCK : tile;
#else
                    float *out = tile;
#endif
                    const synet_size off =
                        n * p->dst_image + oc0 * channel_step(p) +
                        ((oz * p->dst_h + oy) * p->dst_w + rx - p->pad_left + p->stride_x * (i0 + i)) * pixel_step(p);
                    const tile_store ts = {dst, off, p->stride_x * pixel_step(p), p->bias + oc0,
                                           p->act == SYNET_ACT_RELU, p->dst_bf16, stream};
                    micro_tile(p, (const char *)image + at * e, p->tap_offsets + p->phase_tap0[phase],
                               p->phase_taps[phase], bw, out, M, nv, (int)nvalid, direct ? &ts : NULL);
                    if (!paired && !direct)
                        deconv_store(tile, BLOCK, M, nvalid, oc0, p, dst, off, p->stride_x * pixel_step(p),
                                     channel_step(p));
                    i += M;
                }
            }
#if SYNET_AVX512 || SYNET_AVX2
            if (paired)
                store_phases(p, sums, chunk, c0, ends, dst,
                             n * p->dst_image + oc0 * channel_step(p) + (oz * p->dst_h + oy) * p->dst_w, oc0, nvalid,
                             &carry);
#else
            (void)ends;
#endif
        }
    }
#if SYNET_AVX512 || SYNET_AVX2
    if (paired)
        flush_carry(p, &carry, dst, nvalid);
    if (p->stream)
        _mm_sfence();
#endif
}

#if HAVE_BF16
/* ---- lanes_task: channels first, 16 pixels of an output channel in a vector ---- */

/* One tile: NP vectors of 16 pixels of one phase x NC output channels, summed in AMX's order as bf16_block
   does (per tap and block of KBLOCK pairs: the even pairs' sums and the odd pairs' from zero, then
   total += even + odd), each lane a pixel: per step a pair row of the image (lanes k[v] of vector v, the
   others zero) and a channel's weight pair broadcast. a: the image's lanes at the tile's first pixel (taps at
   toff, pair rows qs apart); b: the packed weights of its first channel's strip (SYNET_LANES_STRIP channels,
   rows [tap][pair] of one pair each, ntaps * kpairs rows a strip); totals to out[c * 32 + 16 * v]. The sums
   (3 x NP x NC), two pair rows a vector and two weights fill the registers. */
SYNET_INLINE void lanes_tile(const uint32_t *a, const int64_t *toff, int64_t ntaps, int64_t kpairs, int64_t qs,
                             const __mmask16 *k, const uint16_t *b, float *out, const int NP, const int NC)
{
    const int64_t rs = 2 * SYNET_LANES_STRIP, strip = ntaps * kpairs * rs; /* uint16 elements of a row, a strip */
    __m512 total[2][8];
    for (int v = 0; v < NP; ++v)
        for (int c = 0; c < NC; ++c)
            total[v][c] = _mm512_setzero_ps();
    for (int64_t t = 0; t < ntaps; ++t)
        for (int64_t k0 = 0; k0 < kpairs; k0 += KBLOCK) {
            const int64_t pairs = SYNET_MIN(kpairs - k0, KBLOCK);
            __m512 even[2][8], odd[2][8];
            for (int v = 0; v < NP; ++v)
                for (int c = 0; c < NC; ++c)
                    even[v][c] = odd[v][c] = _mm512_setzero_ps();
            for (int64_t q = k0; q < k0 + pairs; q += 2) {
                const uint32_t *xr = a + toff[t] + q * qs;
                const uint16_t *row = b + (t * kpairs + q) * rs;
                __m512bh xe[2], xo[2];
                for (int v = 0; v < NP; ++v) {
                    xe[v] = (__m512bh)_mm512_maskz_loadu_epi32(k[v], xr + 16 * v);
                    xo[v] = (__m512bh)_mm512_maskz_loadu_epi32(k[v], xr + qs + 16 * v);
                }
                for (int c = 0; c < NC; ++c) {
                    const uint16_t *w = row + c / SYNET_LANES_STRIP * strip + c % SYNET_LANES_STRIP * 2;
                    int32_t pe, po;
                    memcpy(&pe, w, 4);
                    memcpy(&po, w + rs, 4);
                    const __m512bh we = (__m512bh)_mm512_set1_epi32(pe), wo = (__m512bh)_mm512_set1_epi32(po);
                    for (int v = 0; v < NP; ++v) {
                        even[v][c] = _mm512_dpbf16_ps(even[v][c], xe[v], we);
                        odd[v][c] = _mm512_dpbf16_ps(odd[v][c], xo[v], wo);
                    }
                }
            }
            for (int v = 0; v < NP; ++v)
                for (int c = 0; c < NC; ++c)
                    total[v][c] = _mm512_add_ps(total[v][c], _mm512_add_ps(even[v][c], odd[v][c]));
        }
    for (int v = 0; v < NP; ++v)
        for (int c = 0; c < NC; ++c)
            _mm512_storeu_ps(out + c * 32 + 16 * v, total[v][c]);
}

/* output channels of a lanes tile of np vectors (its sums fill the registers); a multiple of SYNET_LANES_STRIP */
static int lanes_channels(int np) { return np == 2 ? 4 : 8; }

static void lanes_call(const uint32_t *a, const int64_t *toff, int64_t ntaps, int64_t kpairs, int64_t qs,
                       const __mmask16 *k, const uint16_t *b, float *out, int np, int nc)
{
    switch (np * 8 + nc) {
#define LANES_CASE(NP, NC) \
    case (NP) * 8 + (NC): \
        lanes_tile(a, toff, ntaps, kpairs, qs, k, b, out, NP, NC); \
        return;
        LANES_CASE(1, 1) LANES_CASE(1, 2) LANES_CASE(1, 3) LANES_CASE(1, 4)
        LANES_CASE(1, 5) LANES_CASE(1, 6) LANES_CASE(1, 7) LANES_CASE(1, 8)
        LANES_CASE(2, 1) LANES_CASE(2, 2) LANES_CASE(2, 3) LANES_CASE(2, 4)
#undef LANES_CASE
    default:
        break;
    }
}

/* lanes [lo, hi) of a vector of 16 (clamped to it) */
static __mmask16 lanes_between(synet_size lo, synet_size hi)
{
    lo = SYNET_MAX(lo, 0);
    hi = SYNET_MIN(hi, 16);
    return hi > lo ? (__mmask16)(synet_mask16(hi) & ~synet_mask16(lo)) : 0;
}

/* gemm_task for a lanes plan: a run of output rows of one image and group, one block of <= 64 output channels.
   A row goes in chunks of up to 2 x 16 x stride_x outputs from x0: the outputs x0 + u + stride_x * m of each
   parity u < stride_x are pixels i0 + m of one phase (i0 = (x0 + u + pad_left) / stride_x), a vector of 16
   each; a few output channels at a time, each parity's sums of those pixels, then (stride_x 2) interleaved
   into consecutive outputs, bias and activation added, in whole vectors (past the caches where p->stream). */
static void lanes_task(const synet_deconv_plan *p, const void *image, void *dst, synet_size task)
{
    float sums[2][8 * 32];
    int64_t toff[2][SYNET_LANES_TAPS];
    const gemm_task_place place = gemm_task_of(p, task);
    const synet_size ob = place.ob, run = place.run, g = place.g, n = place.n;
    const synet_size sx = p->stride_x, phases = p->stride_z * p->stride_y * sx, span = 16 * sx;
    const synet_size nvalid = block_valid(p, ob);
    const synet_size oc0 = g * p->cg_out + ob * BLOCK, cstep = channel_step(p), e = p->dst_bf16 ? 2 : 4;
    const uint32_t *img = (const uint32_t *)image + (n * p->padded_image + g * p->cg_padded * p->padded_w) / 2;
    const int relu = p->act == SYNET_ACT_RELU, stream = p->stream && !p->dst_bf16;
    /* output lanes in order from the two parities' sums: (0, 16), (1, 17), ... */
    const __m512i first = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i second = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
    for (synet_size r = run * p->row_run; r < SYNET_MIN(p->nrows, (run + 1) * p->row_run); ++r) {
        const synet_deconv_row row = synet_deconv_row_of(p, r);
        const uint32_t *a = img + ((row.k + p->pad_low_z) * p->padded_h + row.j + p->pad_low_y) * p->padded_w *
                                      p->pixel_stride / 2 + p->pad_low_x;
        const synet_size d0 = n * p->dst_image + oc0 * cstep + (row.oz * p->dst_h + row.oy) * p->dst_w;
        const uint16_t *bw[2];
        synet_size ntaps[2], rxs[2];
        for (synet_size u = 0; u < sx; ++u) { /* parity u: phase rx in every chunk (x0 steps by 2 * span) */
            const synet_size rx = (u + p->pad_left) % sx, phase = row.rzy * sx + rx, t0 = p->phase_tap0[phase];
            rxs[u] = rx;
            ntaps[u] = p->phase_taps[phase];
            bw[u] = p->weights + p->weight_offsets[(g * phases + phase) * p->nblocks + ob];
            /* each tap's offset: the channels-last image's, in lanes, its x part (dx pixels of pixel_stride
               elements) put back as dx lanes */
            for (synet_size i = 0; i < ntaps[u]; ++i) {
                const synet_size dx = -(p->tap_kx[t0 + i] * p->dilation_x / sx);
                toff[u][i] = (p->tap_offsets[t0 + i] - dx * p->pixel_stride) / 2 + dx;
            }
        }
        for (synet_size x0 = 0; x0 < p->dst_w; x0 += 2 * span) {
            const int np = p->dst_w - x0 > span ? 2 : 1, nc_max = lanes_channels(np);
            const uint32_t *at[2];
            __mmask16 k[2][2];
            for (synet_size u = 0; u < sx; ++u) { /* parity u's pixels from i0 */
                const synet_size rx = rxs[u], i0 = (x0 + u + p->pad_left) / sx;
                at[u] = a + i0;
                for (int v = 0; v < np; ++v) {
                    const synet_size from = i0 + 16 * v - p->col_first[rx];
                    k[u][v] = lanes_between(-from, p->col_count[rx] - from);
                }
            }
            for (synet_size c0 = 0; c0 < nvalid; c0 += nc_max) {
                const int nc = (int)SYNET_MIN((synet_size)nc_max, nvalid - c0);
                for (synet_size u = 0; u < sx; ++u)
                    lanes_call(at[u], toff[u], ntaps[u], p->kpairs, p->padded_w, k[u],
                               bw[u] + c0 * ntaps[u] * p->kpairs * 2, sums[u], np, nc);
                for (int c = 0; c < nc; ++c) {
                    const __m512 bias = _mm512_set1_ps(p->bias[oc0 + c0 + c]);
                    const synet_size o = d0 + (c0 + c) * cstep;
                    for (int v = 0; v < np; ++v) {
                        const __m512 s0 = _mm512_loadu_ps(sums[0] + c * 32 + 16 * v);
                        __m512 out[2];
                        if (sx == 2) {
                            const __m512 s1 = _mm512_loadu_ps(sums[1] + c * 32 + 16 * v);
                            out[0] = _mm512_permutex2var_ps(s0, first, s1);
                            out[1] = _mm512_permutex2var_ps(s0, second, s1);
                        } else {
                            out[0] = s0;
                        }
                        for (synet_size h = 0; h < sx; ++h) {
                            const synet_size x = x0 + span * v + 16 * h;
                            const __mmask16 lanes = lanes_between(0, p->dst_w - x);
                            if (!lanes)
                                continue;
                            const __m512 value = _mm512_add_ps(out[h], bias);
                            if (lanes == 0xFFFF && stream && !(((uintptr_t)dst + (o + x) * e) & 63))
                                store_act16_lanes(dst, o + x, lanes, value, relu, 0, 2);
                            else
                                store_act16(dst, o + x, lanes, value, relu, p->dst_bf16);
                        }
                    }
                }
            }
        }
    }
    if (stream)
        _mm_sfence();
}
#endif

#if HAVE_AMX
/* AMX: one run of units, each one or two segments of <= 16 pixels of a phase x one block of <= 32 channels;
   each unit's stores run during the next unit's tile arithmetic (two tile buffers). */
static void amx_task(const synet_deconv_plan *p, const void *image, void *dst, synet_size task, int *rows)
{
    float tiles[2][32 * 32];
    const synet_size r = task % p->amx_runs, g = task / p->amx_runs % p->group, n = task / p->amx_runs / p->group;
    const uint16_t *img = (const uint16_t *)image + n * p->padded_image + g * p->cg_padded;
    amx_pending pending, *waiting = NULL;
    for (synet_size u = p->run_unit0[r], k = 0; u < p->run_unit0[r + 1]; ++u, ++k) {
        const synet_size s0 = p->unit_s0[u], s1 = p->unit_s1[u], ob = p->unit_ob[u];
        const synet_size M = p->seg_m[s0], phase = p->seg_phase[s0];
        const synet_size nvalid = block_valid(p, ob);
        if (rows[0] != M) { /* this thread's tile configuration (the last unit's sums are in its buffer) */
            amx_configure((int)M);
            rows[0] = (int)M;
        }
        float *tile = tiles[k & 1];
        amx_unit(img + p->seg_aoff[s0], s1 >= 0 ? img + p->seg_aoff[s1] : NULL, p->tap_offsets + p->phase_tap0[phase],
                 p->phase_taps[phase], p->kpairs / 16, p->pixel_stride * 2,
                 p->weights + p->weight_offsets[(g * p->stride_z * p->stride_y * p->stride_x + phase) * p->nblocks + ob],
                 (int)((nvalid + 15) / 16), tile, p, waiting, dst);
        if (waiting) /* after a unit without steps (a phase with no taps) */
            amx_store_due(p, waiting, dst, 1, 1);
        pending.tile = tile;
        pending.doff[0] = p->seg_doff[s0];
        pending.doff[1] = s1 >= 0 ? p->seg_doff[s1] : 0;
        pending.rows = M;
        pending.nvalid = nvalid;
        pending.oc0 = g * p->cg_out + ob * p->block_width;
        pending.off = n * p->dst_image + pending.oc0 * channel_step(p);
        pending.mstep = p->stride_x * pixel_step(p);
        pending.nstep = channel_step(p);
        pending.pieces = s1 >= 0 ? 2 : 1;
        pending.done = 0;
        waiting = &pending;
    }
    if (waiting)
        amx_store_due(p, waiting, dst, 1, 1);
}
#endif

static void task(const synet_deconv_plan *p, const void *src, void *image, void *dst, synet_size t, int *rows)
{
    if (p->impl == SYNET_DECONV_DEPTHWISE) {
        deconv_depthwise_task(p, src, image, dst, t);
        return;
    }
#if HAVE_AMX
    if (p->micro == SYNET_MICRO_AMX) {
        amx_task(p, p->direct ? src : image, dst, t, rows);
        return;
    }
#endif
    (void)rows;
#if HAVE_BF16
    if (p->lanes) {
        lanes_task(p, image, dst, t);
        return;
    }
#endif
    gemm_task(p, p->direct ? src : image, dst, t);
}

/* Exact borders: the border outputs of one (image n, group g, output row oy), in-range taps only:
   dst[n, g*cg_out + co, oy, ox] = act(bias + sum_{ky, kx, ci} bf16(src[n, g*cg_in + ci, iy, ix]) * w[g, ky, kx, ci, co])
   over the taps with iy = (oy + pad_top - ky*dilation_y) / stride_y an integer in [0, src_h) (likewise x).
   FP32 sums in (ky, kx, ci) order; every output of a border row, else the border columns. */
static void border_task(const synet_deconv_plan *p, const void *src, void *dst, synet_size task)
{
    float acc[BORDER_CHUNK];
    const synet_size oy = task % p->dst_h, oz = task / p->dst_h % p->dst_d, g = task / (p->dst_h * p->dst_d) % p->group;
    const synet_size n = task / (p->dst_h * p->dst_d) / p->group;
    const int full_row = p->border_y[oy] != 0 || p->border_z[oz] != 0;
    const synet_size count = full_row ? p->dst_w : p->nborder_x;
    const synet_size src_chan = p->nhwc ? 1 : p->src_d * p->src_h * p->src_w; /* elements between input channels */
    for (synet_size k = 0; k < count; ++k) {
        const synet_size ox = full_row ? k : p->border_x[k];
        for (synet_size c0 = 0; c0 < p->cg_out; c0 += BORDER_CHUNK) {
            const synet_size cn = SYNET_MIN((synet_size)BORDER_CHUNK, p->cg_out - c0);
            for (synet_size co = 0; co < cn; ++co)
                acc[co] = 0.0f;
            for (synet_size kz = 0; kz < p->kernel_z; ++kz) {
                const synet_size tz = oz + p->pad_front - kz * p->dilation_z;
                if (tz < 0 || tz % p->stride_z != 0 || tz / p->stride_z >= p->src_d)
                    continue;
                const synet_size iz = tz / p->stride_z;
                for (synet_size ky = 0; ky < p->kernel_y; ++ky) {
                    const synet_size ty = oy + p->pad_top - ky * p->dilation_y;
                    if (ty < 0 || ty % p->stride_y != 0 || ty / p->stride_y >= p->src_h)
                        continue;
                    const synet_size iy = ty / p->stride_y;
                    for (synet_size kx = 0; kx < p->kernel_x; ++kx) {
                        const synet_size tx = ox + p->pad_left - kx * p->dilation_x;
                        if (tx < 0 || tx % p->stride_x != 0 || tx / p->stride_x >= p->src_w)
                            continue;
                        const synet_size ix = tx / p->stride_x;
                        const synet_size pixel =
                            p->nhwc ? (((n * p->src_d + iz) * p->src_h + iy) * p->src_w + ix) * p->src_c + g * p->cg_in
                                    : (((n * p->src_c + g * p->cg_in) * p->src_d + iz) * p->src_h + iy) * p->src_w + ix;
                        const float *w = p->exact_weights +
                                         (((g * p->kernel_z + kz) * p->kernel_y + ky) * p->kernel_x + kx) * p->cg_in *
                                             p->cg_out + c0;
                        for (synet_size ci = 0; ci < p->cg_in; ++ci) {
                            const float a = synet_bf16_to_float(bf16_at(src, p->src_bf16, pixel + ci * src_chan));
                            for (synet_size co = 0; co < cn; ++co)
                                acc[co] += a * w[ci * p->cg_out + co];
                        }
                    }
                }
            }
            const synet_size off = n * p->dst_image + (g * p->cg_out + c0) * channel_step(p) +
                                   ((oz * p->dst_h + oy) * p->dst_w + ox) * pixel_step(p);
            deconv_store(acc, 0, 1, cn, g * p->cg_out + c0, p, dst, off, 0, channel_step(p));
        }
    }
}

/* ---- weight packing ---- */

/* channels at .. at + VW - 1 (at: a multiple of VW) of a packed row: their (even, odd) BF16 pairs, as they
   are or (wide) as a wide_weights unit (fp32_tile) */
SYNET_INLINE void store_pairs(uint16_t *row, synet_size at, vbits pairs, int wide)
{
    if (wide) {
        vfloat w[2];
        widen_pairs(pairs, w);
        *(vfloat_u *)(void *)(row + 4 * at) = w[0];
        *(vfloat_u *)(void *)(row + 4 * at + 2 * VW) = w[1];
    } else {
        *(vbits_u *)(void *)(row + 2 * at) = pairs;
    }
}

/* a row of `lanes` (even, odd) BF16 pairs, in the first half of its place -> the same channels' wide_weights
   row */
static void widen_row(uint16_t *row, synet_size lanes)
{
    vbits pairs[BLOCK / VW];
    for (synet_size u = 0; u < lanes / VW; ++u)
        pairs[u] = *(const vbits_u *)(const void *)(row + 2 * VW * u);
    for (synet_size u = 0; u < lanes / VW; ++u)
        store_pairs(row, VW * u, pairs[u], 1);
}

#if SYNET_AVX2 && !SYNET_AVX512 /* (the AVX2 level's packing: 8 channels a step) */
/* channels at .. at + 7 of a packed row from the rounded BF16 bits of their even (a) and odd (b) weights (low
   halves), as pairs or a wide unit (store_pairs); the lanes where either is NaN or inf or-ed into *bad */
SYNET_INLINE void store_rounded_pairs(uint16_t *row, synet_size at, __m256i a, __m256i b, int wide, __m256i *bad)
{
    const __m256i exponent = _mm256_set1_epi32(0x7F80);
    *bad = _mm256_or_si256(*bad, _mm256_or_si256(_mm256_cmpeq_epi32(_mm256_and_si256(a, exponent), exponent),
                                                 _mm256_cmpeq_epi32(_mm256_and_si256(b, exponent), exponent)));
    store_pairs(row, at, (vbits)_mm256_or_si256(a, _mm256_slli_epi32(b, 16)), wide);
}
#endif

/* One row of a packed block: lanes n < valid of (bf16(w0[n * co_step]), bf16(w1[n * co_step])) pairs
   (w0 or w1 NULL: zeros, a pad channel), zero lanes up to `lanes`, as pairs or (wide) as a wide_weights row;
   returns whether a rounded value is NaN/inf. */
static int pack_row(const float *w0, const float *w1, synet_size co_step, synet_size valid, synet_size lanes,
                    uint16_t *row, int wide)
{
    synet_size n = 0;
    uint32_t nonfinite = 0;
#if SYNET_AVX512
    const __m512i step = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32((int)co_step));
    const __m512i exponent = _mm512_set1_epi16(0x7F80);
    __mmask32 bad = 0;
    if (co_step <= (1 << 26))
        for (; n < lanes; n += 16) {
            const __mmask16 m = synet_mask16(valid - n);
            __m512i a = _mm512_setzero_si512(), b = _mm512_setzero_si512();
            if (w0)
                a = co_step == 1 ? _mm512_maskz_loadu_epi32(m, w0 + n)
                                 : _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, step, w0 + n * co_step, 4);
            if (w1)
                b = co_step == 1 ? _mm512_maskz_loadu_epi32(m, w1 + n)
                                 : _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, step, w1 + n * co_step, 4);
            const __m512i pairs = synet_bf16_pairs_x16(_mm512_castsi512_ps(a), _mm512_castsi512_ps(b));
            bad |= _mm512_cmpeq_epi16_mask(_mm512_and_si512(pairs, exponent), exponent);
            if (lanes - n >= 16)
                store_pairs(row, n, (vbits)pairs, wide);
            else /* a lanes plan's strip of SYNET_LANES_STRIP channels */
                _mm512_mask_storeu_epi16(row + 2 * n, (__mmask32)((1u << (2 * (lanes - n))) - 1), pairs);
        }
    nonfinite |= bad != 0;
#elif SYNET_AVX2
    /* contiguous channels by masked loads; strided ones by gathers (slow on AMD: see pack_gemm_transposed) */
    const __m256i step = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)co_step));
    __m256i bad = _mm256_setzero_si256();
    if (co_step <= (1 << 26))
        for (; n < lanes; n += 8) {
            const __m256i m = synet_mask8(valid - n);
            __m256i a = _mm256_setzero_si256(), b = _mm256_setzero_si256();
            if (w0)
                a = co_step == 1 ? _mm256_maskload_epi32((const int *)(w0 + n), m)
                                 : _mm256_mask_i32gather_epi32(a, (const int *)(w0 + n * co_step), step, m, 4);
            if (w1)
                b = co_step == 1 ? _mm256_maskload_epi32((const int *)(w1 + n), m)
                                 : _mm256_mask_i32gather_epi32(b, (const int *)(w1 + n * co_step), step, m, 4);
            store_rounded_pairs(row, n, synet_bf16_nearest_x8(a), synet_bf16_nearest_x8(b), wide, &bad);
        }
    nonfinite |= !_mm256_testz_si256(bad, bad);
#endif
    /* the whole row, where the vector loop did none of it (the baseline; strides past its gathers' range) */
    const int scalar = n < lanes;
    for (; n < lanes; ++n) {
        const uint16_t a = n < valid && w0 ? synet_bf16_from_float(w0[n * co_step]) : 0;
        const uint16_t b = n < valid && w1 ? synet_bf16_from_float(w1[n * co_step]) : 0;
        nonfinite |= (uint32_t)((a & 0x7F80) == 0x7F80) | (uint32_t)((b & 0x7F80) == 0x7F80);
        row[2 * n] = a;
        row[2 * n + 1] = b;
    }
    if (scalar && wide)
        widen_row(row, lanes);
    return nonfinite != 0;
}

/* The weights of packed pair k of group g: those of its low and its high half's input channel, NULL for a
   pad channel. The FP32 and AMX kernels read channels (2k, 2k + 1); the vdpbf16ps kernel (bf16_tile) reads
   4 channels c .. c + 3 as the pairs (low c + 2, high c) and (c + 3, c + 1). */
static void pair_weights(const synet_deconv_plan *p, const synet_deconv_weights *w, synet_size g, synet_size k,
                         const float **low, const float **high)
{
    synet_size lo = 2 * k, hi = 2 * k + 1;
    if (p->micro == SYNET_MICRO_BF16) {
        lo = k % 2 ? 2 * k + 1 : 2 * k + 2;
        hi = k % 2 ? 2 * k - 1 : 2 * k;
    }
    const float *w0 = w->w + g * p->cg_in * w->ci_step;
    *low = lo < p->cg_in ? w0 + lo * w->ci_step : NULL;
    *high = hi < p->cg_in ? w0 + hi * w->ci_step : NULL;
}

/* the kernel position (kz * kernel_y + ky) * kernel_x + kx of tap t (the phases' tap tables) */
SYNET_INLINE synet_size kernel_position(const synet_deconv_plan *p, synet_size t)
{
    return (p->tap_kz[t] * p->kernel_y + p->tap_ky[t]) * p->kernel_x + p->tap_kx[t];
}

/* GEMM unit: pair k of group g, for every phase, tap and block: the row of lanes (n, e) =
   bf16(w[g, ci, block * width + n, ky, kx]) for the pair's low (e = 0) and high input channel ci
   (pair_weights), zero beyond cg_in / cg_out. Reads stay within two input channels' weights, which stay
   in L1 while the unit runs. */
#if SYNET_AVX512
#define TRANSPOSED_TAPS_MAX 16 /* pack_gemm_transposed: the most taps (AVX2: kernels of up to 8 x 8 or 4 x 4 x 4) */
#else
#define TRANSPOSED_TAPS_MAX 64
#endif
#if SYNET_AVX512
/* pack_gemm for weights whose taps of one (ci, co) are contiguous (PyTorch's NCHW layout, kernels of <= 16
   taps): 16 output channels x every tap a step, transposed in registers, one 64-byte store per tap into its
   strip's row (D1's weights: 3x faster than gathering each row), or for a lanes plan one 16-byte store per
   strip of SYNET_LANES_STRIP channels. w0, w1: the pair's weights (pair_weights). */
static int pack_gemm_transposed(const synet_deconv_plan *p, const synet_deconv_weights *w, synet_size g, synet_size k,
                                const float *w0, const float *w1, uint16_t *packed)
{
    const synet_size phases = p->stride_z * p->stride_y * p->stride_x, taps = p->kernel_z * p->kernel_y * p->kernel_x;
    const synet_size strip = p->weight_strip;
    const int wide = p->wide_weights != 0; /* (read once: the stores may alias p) */
    const __m512i exponent = _mm512_set1_epi16(0x7F80);
    const __mmask16 tap_mask = synet_mask16(taps);
    __mmask32 bad = 0;
    __m512 r0[TRANSPOSED_TAPS_MAX], r1[TRANSPOSED_TAPS_MAX];
    uint16_t *blocks[TRANSPOSED_TAPS_MAX]; /* of each kernel position: its phase's packed block, */
    synet_size tap_of[TRANSPOSED_TAPS_MAX], ntaps_of[TRANSPOSED_TAPS_MAX]; /* its tap there, the phase's taps, */
    uint16_t *rows[TRANSPOSED_TAPS_MAX]; /* its row of pair k in the strip of channel n */
    for (synet_size ob = 0; ob < p->nblocks; ++ob) {
        const synet_size first = ob * p->block_width;
        const synet_size valid = block_valid(p, ob), lanes = (valid + 15) / 16 * 16;
        for (synet_size phase = 0; phase < phases; ++phase)
            for (synet_size t = 0; t < p->phase_taps[phase]; ++t) {
                const synet_size position = kernel_position(p, p->phase_tap0[phase] + t);
                blocks[position] = packed + p->weight_offsets[(g * phases + phase) * p->nblocks + ob];
                tap_of[position] = t;
                ntaps_of[position] = p->phase_taps[phase];
            }
        for (synet_size n = 0; n < lanes; n += 16) {
            const synet_size nn = SYNET_MIN((synet_size)16, valid - n);
            if (n % strip < 16) /* a new strip */
                for (synet_size t = 0; t < taps; ++t)
                    rows[t] = blocks[t] + strip_row(p, ntaps_of[t], tap_of[t], k, lanes, n - n % strip);
            if (w0)
                synet_load_transposed16(w0 + (first + n) * w->co_step, w->co_step, nn, tap_mask, r0);
            if (w1)
                synet_load_transposed16(w1 + (first + n) * w->co_step, w->co_step, nn, tap_mask, r1);
            for (synet_size t = 0; t < taps; ++t) {
                const __m512i v = synet_bf16_pairs_x16(w0 ? r0[t] : _mm512_setzero_ps(), w1 ? r1[t] : _mm512_setzero_ps());
                bad |= _mm512_cmpeq_epi16_mask(_mm512_and_si512(v, exponent), exponent);
                if (strip >= 16) {
                    store_pairs(rows[t], n % strip, (vbits)v, wide);
                } else { /* a lanes plan: 4 strips of SYNET_LANES_STRIP channels, each as wide as rows[t]'s */
                    const synet_size step = row_units(p, SYNET_LANES_STRIP) * ntaps_of[t] * p->kpairs;
                    _mm_storeu_si128((__m128i *)(void *)rows[t], _mm512_castsi512_si128(v));
                    _mm_storeu_si128((__m128i *)(void *)(rows[t] + step), _mm512_extracti32x4_epi32(v, 1));
                    _mm_storeu_si128((__m128i *)(void *)(rows[t] + 2 * step), _mm512_extracti32x4_epi32(v, 2));
                    _mm_storeu_si128((__m128i *)(void *)(rows[t] + 3 * step), _mm512_extracti32x4_epi32(v, 3));
                }
            }
        }
    }
    return bad != 0;
}
#elif SYNET_AVX2
/* r[t] = tap t < taps (<= TRANSPOSED_TAPS_MAX) of rows 0 .. 7, `stride` floats apart, whose taps are contiguous
   from s: an 8 x 8 transpose per 8 taps; rows from `rows` on read as zeros */
SYNET_INLINE void load_taps_transposed8(const float *s, synet_size stride, synet_size rows, synet_size taps,
                                        __m256 r[TRANSPOSED_TAPS_MAX])
{
    for (synet_size h = 0; 8 * h < taps; ++h) {
        const __m256i columns = synet_mask8(taps - 8 * h);
        __m256 t[8];
        for (synet_size q = 0; q < 8; ++q)
            t[q] = q < rows ? _mm256_maskload_ps(s + q * stride + 8 * h, columns) : _mm256_setzero_ps();
        synet_transpose8(t);
        for (int c = 0; c < 8; ++c)
            r[8 * h + c] = t[c];
    }
}

/* pack_gemm for weights whose taps of one (ci, co) are contiguous (PyTorch's NCHW layout, kernels of up to
   TRANSPOSED_TAPS_MAX taps): 8 output channels x every tap a step, transposed in registers, one row store per
   tap instead of a gather per row (vpgatherdd is slow on AMD: packing D1's weights 0.65x the time on Zen 1).
   w0, w1: the pair's weights (pair_weights). */
static int pack_gemm_transposed(const synet_deconv_plan *p, const synet_deconv_weights *w, synet_size g, synet_size k,
                                const float *w0, const float *w1, uint16_t *packed)
{
    const synet_size phases = p->stride_z * p->stride_y * p->stride_x, taps = p->kernel_z * p->kernel_y * p->kernel_x;
    synet_size phase_of[TRANSPOSED_TAPS_MAX], tap_of[TRANSPOSED_TAPS_MAX]; /* of each kernel position: its phase,
                                                                                 its tap in the phase */
    for (synet_size phase = 0; phase < phases; ++phase)
        for (synet_size t = 0; t < p->phase_taps[phase]; ++t) {
            const synet_size position = kernel_position(p, p->phase_tap0[phase] + t);
            phase_of[position] = phase;
            tap_of[position] = t;
        }
    const __m256i zero = _mm256_setzero_si256();
    const int wide = p->wide_weights != 0; /* (read once: the stores may alias p) */
    __m256i bad = zero;
    __m256 r0[TRANSPOSED_TAPS_MAX], r1[TRANSPOSED_TAPS_MAX];
    for (synet_size ob = 0; ob < p->nblocks; ++ob) {
        const synet_size first = ob * p->block_width;
        const synet_size valid = block_valid(p, ob), lanes = (valid + 15) / 16 * 16;
        for (synet_size n = 0; n < lanes; n += 8) {
            const synet_size rows = SYNET_MIN((synet_size)8, valid - n), n0 = n - n % p->weight_strip;
            if (w0)
                load_taps_transposed8(w0 + (first + n) * w->co_step, w->co_step, rows, taps, r0);
            if (w1)
                load_taps_transposed8(w1 + (first + n) * w->co_step, w->co_step, rows, taps, r1);
            for (synet_size t = 0; t < taps; ++t) {
                const __m256i a = w0 ? synet_bf16_nearest_x8(_mm256_castps_si256(r0[t])) : zero;
                const __m256i b = w1 ? synet_bf16_nearest_x8(_mm256_castps_si256(r1[t])) : zero;
                const synet_size phase = phase_of[t];
                uint16_t *row = packed + p->weight_offsets[(g * phases + phase) * p->nblocks + ob] +
                                strip_row(p, p->phase_taps[phase], tap_of[t], k, lanes, n0);
                store_rounded_pairs(row, n - n0, a, b, wide, &bad);
            }
        }
    }
    return !_mm256_testz_si256(bad, bad);
}
#endif

static int pack_gemm(const synet_deconv_plan *p, const synet_deconv_weights *w, synet_size g, synet_size k,
                     uint16_t *packed)
{
    int nonfinite = 0;
    const float *w0, *w1;
    pair_weights(p, w, g, k, &w0, &w1);
#if SYNET_AVX512 || SYNET_AVX2
    if ((w0 || w1) && w->kx_step == 1 && w->ky_step == p->kernel_x && w->kz_step == p->kernel_y * p->kernel_x &&
        w->co_step == p->kernel_z * w->kz_step && w->co_step <= TRANSPOSED_TAPS_MAX && w->co_step > 1)
        return pack_gemm_transposed(p, w, g, k, w0, w1, packed);
#endif
    const synet_size phases = p->stride_z * p->stride_y * p->stride_x;
    for (synet_size phase = 0; phase < phases; ++phase) {
        const synet_size t0 = p->phase_tap0[phase];
        for (synet_size t = 0; t < p->phase_taps[phase]; ++t) {
            const synet_size tap = tap_step(p, w, t0 + t);
            for (synet_size ob = 0; ob < p->nblocks; ++ob) {
                const synet_size first = ob * p->block_width;
                const synet_size valid = block_valid(p, ob), lanes = (valid + 15) / 16 * 16;
                uint16_t *block = packed + p->weight_offsets[(g * phases + phase) * p->nblocks + ob];
                for (synet_size n0 = 0; n0 < lanes;) { /* strip by strip (strip_row) */
                    uint16_t *row = block + strip_row(p, p->phase_taps[phase], t, k, lanes, n0);
                    const synet_size width = strip_width(p, lanes, n0);
                    if (!w0 && !w1) { /* a pad pair (AMX pads channels to 32, vdpbf16ps to 4) */
                        memset(row, 0, (size_t)row_units(p, width) * 2);
                    } else {
                        const synet_size at = tap + (first + n0) * w->co_step;
                        nonfinite |= pack_row(w0 ? w0 + at : NULL, w1 ? w1 + at : NULL, w->co_step,
                                              SYNET_MIN(width, SYNET_MAX(0, valid - n0)), width, row,
                                              p->wide_weights != 0);
                    }
                    n0 += width;
                }
            }
        }
    }
    return nonfinite;
}

static int pack(const synet_deconv_plan *p, const synet_deconv_weights *w, synet_size u, void *packed)
{
    if (p->impl == SYNET_DECONV_DEPTHWISE)
        return deconv_depthwise_pack(p, w, u, (float *)packed);
    return pack_gemm(p, w, u / p->kpairs, u % p->kpairs, (uint16_t *)packed);
}

#if HAVE_AMX
#define AMX_RELEASE amx_release
#else
#define AMX_RELEASE NULL
#endif

const synet_deconv_kernels SYNET_LEVEL_NAME(synet_deconv_kernels) = {
    SYNET_STR(SYNET_LEVEL_SUFFIX), HAVE_BF16, HAVE_AMX, MICRO_SPAN, VW, pad_row, task, AMX_RELEASE, border_task, pack,
};
