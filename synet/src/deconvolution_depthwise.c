/* Depthwise Deconvolution16b kernels (group == src_c == dst_c), compiled once per CPU level.
 *
 * dst[n, c, oy, ox] = act(bias[c] + sum over taps bf16(src[n, c, iy, ix]) * bf16(w[c, ky, kx])), FP32
 * multiply-adds of BF16-rounded values by output phase and tap: a BF16 product is exact in FP32, so the
 * multiply-add equals the fma and every level gives the same bits. Channels first: a task is one
 * (image, channel) plane, vectorised along x (the two phases of a stride-2 row computed together and
 * interleaved in registers). Channels last: a task is one output row, vectorised along channels.
 */
#include "deconvolution_level.h"

/* On x86 every NaN these kernels make is the canonical one (canonical_nan_vf) already: their FP32 source copy,
   weights table and bias hold canonical NaNs only, and x86's arithmetic passes such a NaN on or makes its default
   NaN, the same bits. So the stores of their own sums skip canonical_nan_vf (D4 took 1.09x the time with it);
   elsewhere the default NaN is another one. */
#if defined(__x86_64__) || defined(__i386__)
#define store_sums store_vf_canonical
#else
#define store_sums store_vf
#endif

/* Whether the level's kernels can store BF16 outputs themselves (see direct_bf16) */
#define DIRECT_BF16 (SYNET_AVX512 || SYNET_AVX2)

#define DW_COLS 1024 /* output columns of one channels-first row assembled at a time */
#define DW_BUFFER 2048 /* floats a channel of the row buffer: 16 rows of 128, 8 of 256 (4 rows a phase, as
                          planar_rows' blocks want; with 1024, NHWC 64 -> 1 at 64 x 64 2.1x slower) */
#define MARCH_ROWS 8 /* rows of a marching pair's chunk at avx2 (Zen 1, 1 -> 2 k4 s2 at 512 x 512, whole
                         columns of 512 rows: 1.5x the time) */
#define DW_UNROLL_MAX 9 /* the most taps the kernels unroll */
#define PLANAR_OUT_MAX SYNET_PLANAR_OUT_MAX
#define UNROLLED_TAPS(X) X(1) X(2) X(3) X(4) X(6) X(8) X(9) /* the tap counts they unroll */

/* n if the kernels unroll n taps, else 0 */
static int64_t unrolled_taps(int64_t n)
{
#define UNROLLED(NT) \
    case NT:
    switch (n) {
        UNROLLED_TAPS(UNROLLED)
        return n;
    default:
        return 0;
    }
#undef UNROLLED
}

/* Row (zp, yp) of one image's (or channels first, one plane's) BF16-rounded FP32 copy at
   image, `pix` floats a column, from its source at src: zeros where the row is outside src, else the
   converted source row between zeros. Edges of up to VW floats are zeroed by one vector store each,
   before the values overwrite what they cover, where the `room` floats from the row's start are the
   caller's to write (the rows after it written later). src_end: the end of the whole source (the rows
   after this one are prefetched up to there). */
static void padded_row(const synet_deconv_plan *p, const char *src, float *image, synet_size pix, synet_size zp,
                       synet_size yp, synet_size room, const char *src_end)
{
    const synet_size W = p->padded_w * pix, left = p->pad_low_x * pix, n = p->src_w * pix, right = W - left - n;
    const synet_size y = yp - p->pad_low_y, z = zp - p->pad_low_z;
    float *d = image + (zp * p->padded_h + yp) * W;
    if (y < 0 || y >= p->src_h || z < 0 || z >= p->src_d) {
        memset(d, 0, W * 4);
        return;
    }
    const vfloat zero = {};
    if (left <= VW && VW <= room)
        *(vfloat_u *)(void *)d = zero;
    else
        memset(d, 0, left * 4);
    if (right <= VW && left + n + VW <= room)
        *(vfloat_u *)(void *)(d + left + n) = zero;
    else
        memset(d + left + n, 0, right * 4);
    const char *row = src + (z * p->src_h + y) * n * (p->src_bf16 ? 2 : 4);
    deconv_convert_run(row, p->src_bf16, d + left, 1, n, (synet_size)(src_end - row));
}

/* bytes of one channel of one image of the source (channels last: times src_c, one image) */
static synet_size plane_bytes(const synet_deconv_plan *p)
{
    return p->src_d * p->src_h * p->src_w * (p->src_bf16 ? 2 : 4);
}

/* the end of the whole source: how far padded_row may prefetch */
static const char *source_end(const synet_deconv_plan *p, const void *src)
{
    return (const char *)src + p->batch * p->src_c * plane_bytes(p);
}

static const float *pad_plane(const synet_deconv_plan *p, const void *src, float *pad, synet_size task);

/* Whether a plan runs the channels-last kernel (depthwise_band_channels_last, its padded image [n, zp, yp, xp,
   c]): a depthwise one on a channels-last source; every other (depthwise channels first, planar) runs on
   planes [n, c, zp, yp, xp] */
static int channels_last_kernel(const synet_deconv_plan *p) { return p->nhwc && p->cg_in == 1 && p->cg_out == 1; }

/* The blocks of up to PLANAR_OUT_MAX output channels a planar group's are computed in, a task each (a block's
   sums side by side in the registers) */
static synet_size channel_blocks(const synet_deconv_plan *p)
{
    return (p->cg_out + PLANAR_OUT_MAX - 1) / PLANAR_OUT_MAX;
}

/* Planar, channels last: padded row r (image n, zp, yp) of each of the image's src_c planes, the source row
   transposed into them */
static void planes_row(const synet_deconv_plan *p, const void *src, float *image, synet_size r)
{
    const synet_size rows = p->padded_d * p->padded_h, n = r / rows, zp = r % rows / p->padded_h;
    const synet_size yp = r % p->padded_h, y = yp - p->pad_low_y, z = zp - p->pad_low_z;
    const synet_size W = p->padded_w, plane = rows * W, left = p->pad_low_x, right = W - left - p->src_w;
    float *d = image + n * p->src_c * plane + (zp * p->padded_h + yp) * W;
    const int outside = y < 0 || y >= p->src_h || z < 0 || z >= p->src_d;
    for (synet_size c = 0; c < p->src_c; ++c) { /* the pads, all of a row outside the source */
        memset(d + c * plane, 0, (outside ? W : left) * 4);
        if (!outside)
            memset(d + c * plane + left + p->src_w, 0, right * 4);
    }
    if (!outside)
        convert_transposed((const char *)src + ((n * p->src_d + z) * p->src_h + y) * p->src_w * p->src_c *
                                                   (p->src_bf16 ? 2 : 4),
                           p->src_bf16, p->src_c, p->src_w, p->src_c, d + left, 1, 0, plane, 0);
}

/* Part r of the BF16-rounded FP32 copy of the whole source, zero-padded, each a task of its own: for the
   channels-last kernel [n, zp, yp, xp, c], row r; planar, channels first, plane r (a row a task, the task's own
   cost was a tenth of D8's time: its rows are 66 floats) or channels last, row r of every plane (planes_row) */
void deconv_depthwise_pad_row(const synet_deconv_plan *p, const void *src, void *image, synet_size r)
{
    const synet_size rows = p->padded_d * p->padded_h;
    if (!p->nhwc) {
        pad_plane(p, src, (float *)image + r * rows * p->padded_w, r);
        return;
    }
    if (!channels_last_kernel(p)) {
        planes_row(p, src, (float *)image, r);
        return;
    }
    const synet_size plane = r / rows, pix = p->src_c;
    padded_row(p, (const char *)src + plane * plane_bytes(p) * pix, (float *)image + plane * rows * p->padded_w * pix,
               pix, r % rows / p->padded_h, r % p->padded_h, p->padded_w * pix, source_end(p, src));
}

/* One vector of outputs i..i+VW-1 of a phase: sum_t w[t] * s[toff[t] + i], in tap order; phase_scalar, the same
   sum of one output by multiply_add1, gives the lanes' bits. */
SYNET_INLINE vfloat phase_vector(const float *s, const int64_t *toff, const float *w, int64_t ntaps, int64_t i)
{
    vfloat a = fresh_zero();
    for (int64_t t = 0; t < ntaps; ++t)
        a = multiply_add(splat(w[t]), load_vf(s + toff[t] + i), a);
    return a;
}

SYNET_INLINE float phase_scalar(const float *s, const int64_t *toff, const float *w, int64_t ntaps, int64_t i)
{
    float a = 0.0f;
    for (int64_t t = 0; t < ntaps; ++t)
        a = multiply_add1(w[t], s[toff[t] + i], a);
    return a;
}

#if VW == 16
#define INTERLEAVE_LO 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23
#define INTERLEAVE_HI 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31
#elif VW == 8
#define INTERLEAVE_LO 0, 8, 1, 9, 2, 10, 3, 11
#define INTERLEAVE_HI 4, 12, 5, 13, 6, 14, 7, 15
#else
#define INTERLEAVE_LO 0, 4, 1, 5
#define INTERLEAVE_HI 2, 6, 3, 7
#endif

/* lo, hi = a[0], b[0], a[1], b[1], ...: the outputs of a pair's two phases in column order */
SYNET_INLINE void interleave(vfloat a, vfloat b, vfloat *lo, vfloat *hi)
{
#if VW == 8 && SYNET_AVX2 /* the 64-bit pairs of each in order 0, 2, 1, 3 first, then the in-lane unpacks
                             interleave them (GCC's vunpck, vinsertf128 and vperm2f128: 14 micro-ops on AMD
                             Zen 1, against 10) */
    a = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(a), 0xD8));
    b = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(b), 0xD8));
    *lo = _mm256_unpacklo_ps(a, b);
    *hi = _mm256_unpackhi_ps(a, b);
#else
    *lo = __builtin_shufflevector(a, b, INTERLEAVE_LO);
    *hi = __builtin_shufflevector(a, b, INTERLEAVE_HI);
#endif
}

/* phase_vector with NT taps hoisted: sum_t w[t] * src[t][i], in tap order */
SYNET_INLINE vfloat hoisted_vector(const float *const *src, const vfloat *w, int64_t i, const int NT)
{
    vfloat a = fresh_zero();
    for (int t = 0; t < NT; ++t)
        a = multiply_add(w[t], load_vf(src[t] + i), a);
    return a;
}

/* `rows` rows of one phase (or of two x phases, interleaved) */
typedef struct phase_rows {
    const float *s, *s_b;         /* the first row's source at its output 0: phase a, phase b */
    const int64_t *toff, *toff_b; /* their taps' offsets in the padded image */
    const float *w, *w_b;         /* their taps' weights */
    int64_t ntaps, ntaps_b;
    int64_t nout;                 /* outputs of a row */
    int64_t rows, s_step, out_step;
    void *out;                    /* FP32, or with bf16 BF16 bits */
    const float *bias;            /* finish_mode > 0: out = the finished sums, with bias[0] */
    int mode;                     /* finish_mode, or 0: the raw sums (to the buffer) */
    int bf16;
    int64_t channels;             /* output channels (planar: a block's; else 1): channel k's weights at */
    int64_t w_step, out_step_c;   /* w + k w_step (w_b too), its outputs at out + k out_step_c, bias bias[k] */
    int64_t done_rows, done_x;    /* the rows below done_rows have their outputs below done_x (planar_rows) */
} phase_rows;

/* How the depthwise kernels store outputs with IDENTITY / RELU themselves, from the sums in registers,
   without a buffer and the epilogue's second pass (D4 0.207 -> 0.189 ms, D4h 0.223 -> 0.139 ms; BF16
   outputs rounded as they are stored): 1, + bias; 2, + bias then RELU; 0, through the buffer and the
   epilogue (other activations). */
static int finish_mode(const synet_deconv_plan *p)
{
    return p->act == SYNET_ACT_IDENTITY ? 1 : (p->act == SYNET_ACT_RELU ? 2 : 0);
}

/* The sums of a pair's two phases, NT taps each, where phase b's odd taps read what phase a's even ones
   before them read (sb[t] == sa[t - 1]: stride 2 and kernel 4 with odd padding, the taps of a row one
   column apart): those vectors are loaded once (D4 8 -> 6 loads a step) */
SYNET_INLINE void shared_pair_sums(const float *const *sa, const vfloat *wa, const float *const *sb, const vfloat *wb,
                                   int64_t i, vfloat *a, vfloat *b, const int NT)
{
    vfloat sum_a = fresh_zero(), sum_b = fresh_zero(), even = {};
    for (int t = 0; t < NT; ++t) {
        const vfloat x = load_vf(sa[t] + i);
        sum_a = multiply_add(wa[t], x, sum_a);
        sum_b = multiply_add(wb[t], t % 2 ? even : load_vf(sb[t] + i), sum_b);
        even = x;
    }
    *a = sum_a;
    *b = sum_b;
}

/* The sums of a pair's two phases, NT taps each, that read the same sources (kernel 2, stride 2: each source
   column feeds both x phases): each vector loaded once for both (k2 s2 8 -> 8 planar: 16 loads a step -> 8) */
SYNET_INLINE void same_pair_sums(const float *const *sa, const vfloat *wa, const vfloat *wb, int64_t i, vfloat *a,
                                 vfloat *b, const int NT)
{
    vfloat sum_a = fresh_zero(), sum_b = fresh_zero();
    for (int t = 0; t < NT; ++t) {
        const vfloat x = load_vf(sa[t] + i);
        sum_a = multiply_add(wa[t], x, sum_a);
        sum_b = multiply_add(wb[t], x, sum_b);
    }
    *a = sum_a;
    *b = sum_b;
}

/* The sums of a row at source index i..i + VW - 1: phase a's (a), and with two phases phase b's (b); SHARE:
   the pair's taps as shared_pair_sums (1, 2) or same_pair_sums (3) takes them */
SYNET_INLINE void phase_sums(const phase_rows *q, const float *const *sa, const vfloat *wa, const float *const *sb,
                             const vfloat *wb, int64_t i, vfloat *a, vfloat *b, const int pair, const int NT,
                             const int SHARE)
{
    if (SHARE == 3) {
        same_pair_sums(sa, wa, wb, i, a, b, NT);
        return;
    }
    if (SHARE) {
        shared_pair_sums(sa, wa, sb, wb, i, a, b, NT);
        return;
    }
    *a = NT > 0 ? hoisted_vector(sa, wa, i, NT) : phase_vector(q->s, q->toff, q->w, q->ntaps, i);
    if (pair)
        *b = NT > 0 ? hoisted_vector(sb, wb, i, NT) : phase_vector(q->s_b, q->toff_b, q->w_b, q->ntaps_b, i);
}

/* The outputs x..x + VW - 1 (lo) of a row at source index i, or with two phases x..x + 2 VW - 1 (lo, hi):
   out[2i] = phase a (i), out[2i + 1] = phase b (i). */
SYNET_INLINE void phase_vectors(const phase_rows *q, const float *const *sa, const vfloat *wa, const float *const *sb,
                                const vfloat *wb, int64_t i, vfloat *lo, vfloat *hi, const int pair, const int NT,
                                const int SHARE)
{
    vfloat a, b;
    phase_sums(q, sa, wa, sb, wb, i, &a, &b, pair, NT, SHARE);
    *lo = a;
    if (pair) {
        interleave(a, b, lo, hi);
    }
}

#if SYNET_AVX512
/* out[i + 2k] = bf16(a[k]), out[i + 2k + 1] = bf16(b[k]) for k < 16: both rounded, then interleaved by one
   word permute (rounding the interleaved floats, as the FP32 path would store them, costs two permutes
   more and two narrowing stores) */
SYNET_INLINE void store_pair_bf16(void *out, int64_t i, vfloat a, vfloat b)
{
    static const uint16_t high_words[32] = {1,  33, 3,  35, 5,  37, 7,  39, 9,  41, 11, 43, 13, 45, 15, 47,
                                            17, 49, 19, 51, 21, 53, 23, 55, 25, 57, 27, 59, 29, 61, 31, 63};
#if defined(__AVX512BF16__)
    if (synet_bf16_convert_exact(a) && synet_bf16_convert_exact(b)) { /* a's words, then b's: interleaved */
        static const uint16_t pairs[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                           8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
        const __m512i ab = (__m512i)_mm512_cvtne2ps_pbh(b, a);
        _mm512_storeu_si512((uint16_t *)out + i, _mm512_permutexvar_epi16(_mm512_loadu_si512(pairs), ab));
        return;
    }
#endif
    const __m512i ha = synet_bf16_nearest_high_x16(_mm512_castps_si512(a));
    const __m512i hb = synet_bf16_nearest_high_x16(_mm512_castps_si512(b));
    _mm512_storeu_si512((uint16_t *)out + i, _mm512_permutex2var_epi16(ha, _mm512_loadu_si512(high_words), hb));
}
#endif

/* A pair's sums a (phase a) and b at one source index, finished and stored interleaved as outputs
   at..at + 2 VW - 1 */
SYNET_INLINE void store_pair(void *out, int64_t at, vfloat a, vfloat b, vfloat bias, int mode, const int BF16)
{
    a = finish(a, bias, mode);
    b = finish(b, bias, mode);
#if SYNET_AVX512
    if (BF16) {
        store_pair_bf16(out, at, a, b);
        return;
    }
#endif
#if VW == 8 && SYNET_AVX2
    if (BF16) { /* both rounded (their only NaN the canonical one, see store_sums), a's BF16 into the low half
                   of each 32-bit lane and b's into the high half: the lanes are the pairs in output order */
        const __m256i ha = synet_bf16_nearest_canonical_high_x8((__m256i)a);
        const __m256i hb = synet_bf16_nearest_canonical_high_x8((__m256i)b);
        _mm256_storeu_si256((__m256i *)((uint16_t *)out + at), _mm256_blend_epi16(_mm256_srli_epi32(ha, 16), hb, 0xAA));
        return;
    }
    /* the in-lane unpacks stored by 128-bit halves, without interleave's lane-crossing permutes (vpermpd: 3
       micro-ops on AMD Zen 1; D4 0.95x the time) */
    const __m256 lo = _mm256_unpacklo_ps(a, b), hi = _mm256_unpackhi_ps(a, b);
    float *o = (float *)out + at;
    _mm_storeu_ps(o, _mm256_castps256_ps128(lo));
    _mm_storeu_ps(o + 4, _mm256_castps256_ps128(hi));
    _mm_storeu_ps(o + 8, _mm256_extractf128_ps(lo, 1));
    _mm_storeu_ps(o + 12, _mm256_extractf128_ps(hi, 1));
#else
    vfloat lo, hi;
    interleave(a, b, &lo, &hi);
    store_sums(out, at, lo, BF16);
    store_sums(out, at + VW, hi, BF16);
#endif
}

/* SHARE 2: a pair of 4-tap phases that shares as shared_pair_sums takes it and whose taps 2 and 3 read
   the row above taps 0 and 1 (sa[2] + s_step == sa[0], sa[3] + s_step == sa[1], sb[2] + s_step == sb[0]:
   kernel 4 and stride 2 along y, any padding). Outputs x..x + 2 VW - 1 of every row, rows inner: a row's
   three new source vectors (phase a's taps 0 and 1, phase b's tap 0) are the next row's other three,
   so each row loads three vectors instead of six; the same sums in the same tap order. XB such column
   blocks side by side (with AVX-512 2: each row's stores cover more whole cache lines, D4 0.91x). Rows
   r0 <= r < r1. At avx2 each store first prefetches the line 2 blocks to its right where the row's `full`
   outputs go on there (the same row's next march but one; AMD Zen 1, D4's 4 MB output 0.78x the time: the
   marches' stores, a cache line each 1 KB apart, waited on their lines). */
SYNET_INLINE void marching_pair(const float *const *sa, const vfloat *wa, const float *const *sb, const vfloat *wb,
                                int64_t x, int64_t full, int64_t r0, int64_t r1, int64_t s_step, void *out,
                                int64_t out_step, vfloat bias, int mode, const int BF16, const int XB)
{
    const int prefetch = VW == 8 && x + 6 * VW <= full;
    vfloat up_a0[2], up_a1[2], up_b0[2];
    for (int j = 0; j < XB; ++j) {
        const int64_t i = r0 * s_step + x / 2 + j * VW;
        up_a0[j] = load_vf(sa[2] + i);
        up_a1[j] = load_vf(sa[3] + i);
        up_b0[j] = load_vf(sb[2] + i);
    }
    for (int64_t r = r0; r < r1; ++r)
        for (int j = 0; j < XB; ++j) {
            const int64_t k = r * s_step + x / 2 + j * VW;
            const vfloat a0 = load_vf(sa[0] + k), a1 = load_vf(sa[1] + k), b0 = load_vf(sb[0] + k);
            vfloat a = multiply_add(wa[0], a0, fresh_zero()), b = multiply_add(wb[0], b0, fresh_zero());
            a = multiply_add(wa[1], a1, a);
            b = multiply_add(wb[1], a0, b);
            a = multiply_add(wa[2], up_a0[j], a);
            b = multiply_add(wb[2], up_b0[j], b);
            a = multiply_add(wa[3], up_a1[j], a);
            b = multiply_add(wb[3], up_a0[j], b);
            if (prefetch)
                __builtin_prefetch((const float *)out + r * out_step + x + 4 * VW, 1, 3);
            store_pair(out, r * out_step + x + j * 2 * VW, a, b, bias, mode, BF16);
            up_a0[j] = a0;
            up_a1[j] = a1;
            up_b0[j] = b0;
        }
}

/* Many taps (a planar plan's: taps x input channels, looped, not unrolled): the sums of CO output channels
   (weights w + k w_step) of one phase at source columns i + j VW (j < XB) of rows i, i + s_step, ... (R of
   them), CO x R x XB vectors summed side by side (one sum alone waits for its previous multiply-add at every
   tap: 64 -> 3 channels 2x slower), each source vector loaded once for the CO channels' multiply-adds, each
   sum in tap order as phase_vector's (each loaded vector in a register: folded into the CO multiply-adds,
   the loads crossed cache lines CO times; 64 -> 3 1.14x slower). acc[(k R + r) XB + j]. */
#define PLANAR_SUMS 24 /* vectors summed side by side, at most */
SYNET_INLINE void planar_sums(const float *s, const int64_t *toff, const float *w, int64_t w_step, int64_t ntaps,
                              int64_t i, int64_t s_step, vfloat acc[PLANAR_SUMS], const int CO, const int R,
                              const int XB)
{
    for (int k = 0; k < CO * R * XB; ++k)
        acc[k] = fresh_zero();
    for (int64_t t = 0; t < ntaps; ++t) {
        vfloat wt[PLANAR_OUT_MAX];
        for (int k = 0; k < CO; ++k)
            wt[k] = splat(w[k * w_step + t]);
        const float *st = s + toff[t] + i;
        for (int r = 0; r < R; ++r)
            for (int j = 0; j < XB; ++j) {
                const vfloat x = in_register(load_vf(st + r * s_step + j * VW));
                for (int k = 0; k < CO; ++k)
                    acc[(k * R + r) * XB + j] = multiply_add(wt[k], x, acc[(k * R + r) * XB + j]);
            }
    }
}

/* Whether q is one output channel of a pair of phases whose 4 taps a plane (ky-major) read, phase a, rows 0
   and -1 (the row above) at columns 0 and -1 of its first tap's, and phase b the same rows at columns +1 and 0
   (kernel 4, stride 2, odd padding, along both axes: planar_pair_rows) */
static int planar_pair_marches(const phase_rows *q)
{
    if (q->channels != 1 || q->ntaps != q->ntaps_b || q->ntaps % 4)
        return 0;
    const int64_t up = q->s_step;
    for (int64_t t = 0; t < q->ntaps; t += 4) {
        const int64_t *a = q->toff + t, *b = q->toff_b + t;
        if (a[1] != a[0] - 1 || a[2] != a[0] - up || a[3] != a[0] - up - 1 || q->s_b + b[0] != q->s + a[0] + 1 ||
            b[1] != b[0] - 1 || b[2] != b[0] - up || b[3] != b[0] - up - 1)
            return 0;
    }
    return 1;
}

/* planar_sums of both phases of a planar_pair_marches pair, rows i, i + s_step, ... (PLANAR_PAIR_ROWS of them)
   of one vector at source index i: the rows of a plane go down in turn, each of its three vectors (columns -1,
   0, +1) loaded once for the taps of both phases that read it in this row and the next (from 2 loads a
   multiply-add to 0.47: 15 for a plane's 32); the same sums in the same order. 4 rows as fast as 8 (64 -> 1,
   32 -> 1), and a buffer of 8 rows of 256 columns holds them. */
#define PLANAR_PAIR_ROWS 4
SYNET_INLINE void planar_pair_rows(const phase_rows *q, int64_t i, vfloat *a, vfloat *b)
{
    const int64_t up = q->s_step;
    for (int r = 0; r < PLANAR_PAIR_ROWS; ++r)
        a[r] = b[r] = (vfloat){};
    for (int64_t t = 0; t < q->ntaps; t += 4) {
        const float *x = q->s + q->toff[t] + i;
        vfloat wa[4], wb[4];
        for (int k = 0; k < 4; ++k) {
            wa[k] = splat(q->w[t + k]);
            wb[k] = splat(q->w_b[t + k]);
        }
        vfloat left_up = in_register(load_vf(x - up - 1)), mid_up = in_register(load_vf(x - up)),
               right_up = in_register(load_vf(x - up + 1));
        for (int r = 0; r < PLANAR_PAIR_ROWS; ++r) {
            const vfloat left = in_register(load_vf(x + r * up - 1)), mid = in_register(load_vf(x + r * up)),
                         right = in_register(load_vf(x + r * up + 1));
            a[r] = multiply_add(wa[0], mid, a[r]);
            a[r] = multiply_add(wa[1], left, a[r]);
            a[r] = multiply_add(wa[2], mid_up, a[r]);
            a[r] = multiply_add(wa[3], left_up, a[r]);
            b[r] = multiply_add(wb[0], right, b[r]);
            b[r] = multiply_add(wb[1], mid, b[r]);
            b[r] = multiply_add(wb[2], right_up, b[r]);
            b[r] = multiply_add(wb[3], mid_up, b[r]);
            left_up = left;
            mid_up = mid;
            right_up = right;
        }
    }
}

/* The whole vectors of q's rows (all its channels), R rows and XB vectors (of each phase) at a time, for many
   taps; sets q's done_rows and done_x (the rest are phase_run's). bf16: q->bf16 (direct_bf16), tested at each
   store (a store for ntaps x CO multiply-adds), not compiled twice. MARCH: the sums of a planar_pair_marches
   pair by planar_pair_rows (CO 1, R PLANAR_PAIR_ROWS, XB 1). */
SYNET_INLINE void planar_block_rows(phase_rows *q, int64_t full, int bf16, const int pair, const int CO, const int R,
                                    const int XB, const int MARCH)
{
    const int64_t per = pair ? 2 * VW : VW, step = XB * per;
    const int64_t blocks = full - full % step, rows = q->rows - q->rows % R;
    const int mode = q->mode;
    vfloat bias[PLANAR_OUT_MAX];
    for (int k = 0; k < CO; ++k)
        bias[k] = mode ? splat(canonical_nan_f(q->bias[k])) : (vfloat){};
    vfloat a[PLANAR_SUMS], b[PLANAR_SUMS];
    for (int64_t r = 0; r < rows; r += R)
        for (int64_t x = 0; x < blocks; x += step) {
            const int64_t i = r * q->s_step + (pair ? x / 2 : x);
            if (MARCH) {
                planar_pair_rows(q, i, a, b);
            } else {
                planar_sums(q->s, q->toff, q->w, q->w_step, q->ntaps, i, q->s_step, a, CO, R, XB);
                if (pair)
                    planar_sums(q->s_b, q->toff_b, q->w_b, q->w_step, q->ntaps_b, i, q->s_step, b, CO, R, XB);
            }
            for (int k = 0; k < CO; ++k)
                for (int y = 0; y < R; ++y)
                    for (int j = 0; j < XB; ++j) {
                        const int64_t o = k * q->out_step_c + (r + y) * q->out_step + x + j * per;
                        const int m = (k * R + y) * XB + j;
                        if (pair)
                            store_pair(q->out, o, a[m], b[m], bias[k], mode, bf16);
                        else
                            store_sums(q->out, o, finish(a[m], bias[k], mode), bf16);
                    }
        }
    q->done_rows = rows;
    q->done_x = blocks;
}

/* planar_block_rows of CO channels with the widest blocks a row holds, B = R x XB vectors a channel: 4
   vectors of B / 4 rows, 2 of B / 2 or 1 of B */
SYNET_INLINE void planar_blocks(phase_rows *q, int64_t full, int bf16, const int pair, const int CO, const int B)
{
    const int64_t per = pair ? 2 * VW : VW;
    if (B >= 4 && full >= 4 * per)
        planar_block_rows(q, full, bf16, pair, CO, B / 4, 4, 0);
    else if (full >= 2 * per)
        planar_block_rows(q, full, bf16, pair, CO, B / 2, 2, 0);
    else
        planar_block_rows(q, full, bf16, pair, CO, B, 1, 0);
}

/* The vectors B a channel of CO gets: CO x B sums, CO weights and a source vector in the registers (32 with
   AVX-512, 16 below). Measured (64 -> 1..4 at 64 x 64, k4 s2): AVX-512, 3 channels of 4 vectors 1.5x slower than
   of 8, 2 of 12 1.4x slower than of 8, 1 of 4 1.05x slower than of 8; AVX2, 3 of 4 1.45x and 2 of 4 1.2x
   slower than of 2, 1 of 8 1.15x slower than of 4 */
#define PLANAR_VECTORS(CO) (VW == 16 ? ((CO) <= 3 ? 8 : 4) : ((CO) == 1 ? 4 : 2))

/* planar_blocks for q's channel count; a function of its own for each of pair and not (a BF16 output is
   a test a block), never inlined (inlined into depthwise_plane beside the unrolled pairs, D8h took 1.05x the
   time). One channel of a marching pair (22 registers: its sums, 8 weights, 6 source vectors):
   planar_pair_rows. */
static __attribute__((noinline)) void planar_rows(phase_rows *q, int64_t full, const int pair)
{
    const int bf16 = DIRECT_BF16 && q->bf16;
    if (VW == 16 && pair && planar_pair_marches(q)) {
        planar_block_rows(q, full, bf16, 1, 1, PLANAR_PAIR_ROWS, 1, 1);
        return;
    }
    switch (q->channels) {
    case 1:
        planar_blocks(q, full, bf16, pair, 1, PLANAR_VECTORS(1));
        return;
    case 2:
        planar_blocks(q, full, bf16, pair, 2, PLANAR_VECTORS(2));
        return;
    case 3:
        planar_blocks(q, full, bf16, pair, 3, PLANAR_VECTORS(3));
        return;
    default:
        planar_blocks(q, full, bf16, pair, 4, PLANAR_VECTORS(4));
    }
}

/* q's rows: out[r * out_step + x] for x < nout = phase(i) at source index r * s_step + i, i = x (one phase)
   or, interleaved, i = x / 2 of phase a (x even) or b (x odd). NT > 0 taps (both phases): their weights
   and source rows are loaded once, in registers (the stores to out could alias w, so the compiler would
   reload them at every vector). A row's last vector may read up to 2 VW - 1 source columns past its
   outputs' (the scratch has room); its outputs past nout are not stored. BF16: q->bf16 (a constant, so
   that the FP32 loop has no test in it: D4 1.17x slower with one). SHARE: 1, a pair's sums as
   shared_pair_sums makes them; 2, and its whole vectors by marching_pair; 3, as same_pair_sums makes them. */
SYNET_INLINE void phase_run(const phase_rows *q, const int pair, const int NT, const int BF16, const int SHARE)
{
    vfloat wa[DW_UNROLL_MAX], wb[DW_UNROLL_MAX];
    const float *sa[DW_UNROLL_MAX], *sb[DW_UNROLL_MAX];
    for (int t = 0; t < NT; ++t) {
        wa[t] = splat(q->w[t]);
        sa[t] = q->s + q->toff[t];
        if (pair) {
            wb[t] = splat(q->w_b[t]);
            sb[t] = SHARE == 3 ? sa[t] : q->s_b + q->toff_b[t];
        }
    }
    const int64_t per = pair ? 2 * VW : VW, nout = q->nout;
    /* (read before the first store: the stores to out could alias q's fields) */
    const int mode = q->mode;
    const vfloat bias = mode ? splat(canonical_nan_f(*q->bias)) : (vfloat){};
    void *const out = q->out;
    const int64_t full = nout - nout % per; /* outputs in whole vectors */
    if (SHARE == 2) { /* at avx2 the rows in chunks of MARCH_ROWS, every block of a chunk before the next */
        const int64_t chunk = VW == 8 ? MARCH_ROWS : q->rows;
        for (int64_t r0 = 0; r0 < q->rows; r0 += chunk) {
            const int64_t r1 = SYNET_MIN(q->rows, r0 + chunk);
            int64_t x = 0;
            for (; VW == 16 && x + 2 * per <= full; x += 2 * per) /* (2 blocks in 16 registers: 1.07x slower) */
                marching_pair(sa, wa, sb, wb, x, full, r0, r1, q->s_step, out, q->out_step, bias, mode, BF16,
                              2);
            for (; x < full; x += per)
                marching_pair(sa, wa, sb, wb, x, full, r0, r1, q->s_step, out, q->out_step, bias, mode, BF16,
                              1);
        }
    }
    vfloat lo, hi = {};
    for (int64_t r = 0; r < q->rows; ++r) {
        const int64_t o = r * q->out_step, so = r * q->s_step;
        int64_t x = SHARE == 2 ? full : (r < q->done_rows ? q->done_x : 0);
        for (; x < full; x += per) {
            vfloat a, b = {};
            phase_sums(q, sa, wa, sb, wb, so + (pair ? x / 2 : x), &a, &b, pair, NT, SHARE);
            if (pair)
                store_pair(out, o + x, a, b, bias, mode, BF16);
            else
                store_sums(out, o + x, finish(a, bias, mode), BF16);
        }
        if (x < nout) { /* the row's last, part-filled vectors (AVX-512: masked stores; a lane at a time, 8 x 8
                           -> 16 x 16, 8 -> 8, k2 s2 planar took 1.9x the time) */
            phase_vectors(q, sa, wa, sb, wb, so + (pair ? x / 2 : x), &lo, &hi, pair, NT, SHARE);
            const int64_t n = nout - x;
            store_vf_part(out, o + x, finish(lo, bias, mode), n < VW ? n : VW, BF16);
            if (n > VW)
                store_vf_part(out, o + x + VW, finish(hi, bias, mode), n - VW, BF16);
        }
    }
}

/* Whether a pair's phase b reads at its odd taps what phase a reads at the even ones before them
   (shared_pair_sums) */
static int pair_shares_taps(const phase_rows *q)
{
    for (int64_t t = 1; t < q->ntaps; t += 2)
        if (q->s_b + q->toff_b[t] != q->s + q->toff[t - 1])
            return 0;
    return 1;
}

/* Whether a pair's phase b reads at every tap what phase a reads (same_pair_sums) */
static int pair_same_taps(const phase_rows *q)
{
    for (int64_t t = 0; t < q->ntaps; ++t)
        if (q->s_b + q->toff_b[t] != q->s + q->toff[t])
            return 0;
    return 1;
}

/* Whether a sharing pair of 4 taps reads the row above at taps 2 and 3 (marching_pair) */
static int pair_marches(const phase_rows *q)
{
    return q->toff[2] + q->s_step == q->toff[0] && q->toff[3] + q->s_step == q->toff[1] &&
           q->toff_b[2] + q->s_step == q->toff_b[0];
}

/* phase_run with the tap count unrolled for the common small ones (equal in both phases of a pair), and
   pairs of 4 taps that share (stride 2, kernel 4, odd padding) on their own; BF16 outputs come here where
   direct_bf16 says only. One channel; n: the taps unrolled, 0 for none. */
static void phase_channel(const phase_rows *q, int pair, int64_t n)
{
    const int bf16 = DIRECT_BF16 && q->bf16;
    if (pair && n == 4 && pair_shares_taps(q)) {
        if (VW >= 8 && pair_marches(q)) /* (4 lanes in 16 registers: D4 at baseline 1.11x slower) */
            bf16 ? phase_run(q, 1, 4, 1, 2) : phase_run(q, 1, 4, 0, 2);
        else
            bf16 ? phase_run(q, 1, 4, 1, 1) : phase_run(q, 1, 4, 0, 1);
        return;
    }
#define PHASE_CASE(NT) \
    case NT: \
        if (pair && pair_same_taps(q)) \
            bf16 ? phase_run(q, 1, NT, 1, 3) : phase_run(q, 1, NT, 0, 3); \
        else if (pair) \
            bf16 ? phase_run(q, 1, NT, 1, 0) : phase_run(q, 1, NT, 0, 0); \
        else \
            bf16 ? phase_run(q, 0, NT, 1, 0) : phase_run(q, 0, NT, 0, 0); \
        return;
    switch (n) {
        UNROLLED_TAPS(PHASE_CASE)
    default:
        if (pair)
            bf16 ? phase_run(q, 1, 0, 1, 0) : phase_run(q, 1, 0, 0, 0);
        else
            bf16 ? phase_run(q, 0, 0, 1, 0) : phase_run(q, 0, 0, 0, 0);
    }
#undef PHASE_CASE
}

/* q's rows, each channel's: with many taps (none unrolled), whole vectors of every channel at once
   (planar_rows), then each channel's rest (phase_channel) */
static void phase_columns(phase_rows *q, int pair)
{
    const int64_t n = unrolled_taps(!pair || q->ntaps == q->ntaps_b ? q->ntaps : 0);
    const int64_t per = pair ? 2 * VW : VW, full = q->nout - q->nout % per;
    if (n == 0)
        pair ? planar_rows(q, full, 1) : planar_rows(q, full, 0);
    for (int64_t k = 0; k < q->channels; ++k) {
        phase_rows c = *q;
        c.w += k * q->w_step;
        if (pair)
            c.w_b += k * q->w_step;
        c.out = element_at(q->out, k * q->out_step_c, q->bf16);
        c.bias += k;
        phase_channel(&c, pair, n);
    }
}

/* Whether a channels-first plan's kernels store BF16 outputs themselves rather than through the row buffer and
   the epilogue: with AVX-512; at avx2 where every phase has too many taps to unroll (planar_rows' blocks: AMD
   Zen 1, "synet bf16", D8 0.82x the time) or x's two phases are a pair (store_pair rounds both into one
   vector of 16-bit pairs: D4 0.80x, D9 0.94x; the unrolled kernels of one phase, rounding and packing each
   vector, took D9 1.08x); not at the baseline (rounding the interleaved vectors as they are stored made D4
   with BF16 output 1.25x slower there) */
static int direct_bf16(const synet_deconv_plan *p)
{
    if (!DIRECT_BF16 || SYNET_AVX512 || p->stride_x == 2)
        return DIRECT_BF16;
    for (synet_size phase = 0; phase < p->stride_z * p->stride_y * p->stride_x; ++phase)
        if (unrolled_taps(p->phase_taps[phase]))
            return 0;
    return 1;
}

/* The outputs rx - pad_left + stride_x * m of phase rx that fall in columns [x0, x1): m in [*m0, *m1). */
static void phase_range(const synet_deconv_plan *p, synet_size rx, synet_size x0, synet_size x1, synet_size *m0,
                        synet_size *m1)
{
    const synet_size base = rx - p->pad_left;
    *m0 = p->col_first[rx];
    *m1 = *m0 + p->col_count[rx];
    if (x1 - x0 < p->dst_w) { /* a part of the row (divisions of non-negative numbers only) */
        const synet_size last = x1 - 1 - base;
        *m0 = SYNET_MAX(*m0, x0 - base <= 0 ? 0 : (x0 - base + p->stride_x - 1) / p->stride_x);
        *m1 = last < 0 ? *m0 : SYNET_MAX(*m0, SYNET_MIN(*m1, last / p->stride_x + 1));
    }
}

/* Channels first: the BF16-rounded FP32 copy of plane `task` (n * C + c), zero-padded, at pad; returns pad */
static const float *pad_plane(const synet_deconv_plan *p, const void *src, float *pad, synet_size task)
{
    const synet_size rows = p->padded_d * p->padded_h;
    const char *plane = (const char *)src + task * plane_bytes(p), *end = source_end(p, src);
    for (synet_size zp = 0, r = 0; zp < p->padded_d; ++zp)
        for (synet_size yp = 0; yp < p->padded_h; ++yp, ++r) /* (no division a row) */
            padded_row(p, plane, pad, 1, zp, yp, (rows - r) * p->padded_w, end);
    return pad;
}

/* Channels first: rows r, r + stride_y, ... (L of them, one phase, consecutive source rows) of columns
   [x0, x0 + width), at out, out + out_step, ... Stride 2: output columns 2k and 2k + 1 are one output of
   each x phase, ra's k + ca and rb's k + cb, computed as interleaved pairs. */
static void assemble_rows(const synet_deconv_plan *p, const float *pad, const float *w, synet_size r, synet_size L,
                          synet_size x0, synet_size width, void *out, synet_size out_step, synet_size out_step_c,
                          const float *bias, int mode, int bf16, synet_size channels)
{
    /* channels: a planar block's 1-PLANAR_OUT_MAX (1 with stride_x > 2: the plan's rule) */
    const synet_deconv_row row = synet_deconv_row_of(p, r);
    const synet_size rzy = row.rzy, j = row.j, k = row.k;
    const float *s = pad + ((k + p->pad_low_z) * p->padded_h + j + p->pad_low_y) * p->padded_w + p->pad_low_x;
    if (p->stride_x == 2) {
        const synet_size ra = p->pad_left % 2, rb = 1 - ra;
        const synet_size ca = (p->pad_left - ra) / 2, cb = (p->pad_left + 1 - rb) / 2;
        const synet_size pa = rzy * 2 + ra, pb = rzy * 2 + rb, k0 = x0 / 2; /* (x0 is even) */
        phase_rows q = {s + k0 + ca, s + k0 + cb, p->tap_offsets + p->phase_tap0[pa],
                        p->tap_offsets + p->phase_tap0[pb], w + p->phase_tap0[pa], w + p->phase_tap0[pb],
                        p->phase_taps[pa], p->phase_taps[pb], width, L, p->padded_w, out_step, out,
                        bias, mode, bf16, channels, p->kpairs, out_step_c, 0, 0};
        phase_columns(&q, 1);
        return;
    }
    for (synet_size rx = 0; rx < p->stride_x; ++rx) {
        synet_size m0, m1;
        phase_range(p, rx, x0, x0 + width, &m0, &m1);
        const synet_size phase = rzy * p->stride_x + rx;
        const int64_t *toff = p->tap_offsets + p->phase_tap0[phase];
        const float *wt = w + p->phase_tap0[phase];
        const synet_size first = rx - p->pad_left + p->stride_x * m0 - x0;
        if (p->stride_x == 1) {
            phase_rows q = {s + m0, NULL, toff, NULL, wt, NULL, p->phase_taps[phase], 0, m1 - m0, L,
                            p->padded_w, out_step, element_at(out, first, bf16), bias, mode, bf16, channels,
                            p->kpairs, out_step_c, 0, 0};
            phase_columns(&q, 0);
        } else { /* (through the buffer: mode 0, FP32) */
            float *o = (float *)out + first;
            for (synet_size i = 0; i < L; ++i)
                for (synet_size m = m0; m < m1; ++m)
                    o[i * out_step + p->stride_x * (m - m0)] =
                        phase_scalar(s + i * p->padded_w + m, toff, wt, p->phase_taps[phase], 0);
        }
    }
}

/* How many of rows r, r + stride_y, ... below `end` are of r's phase, on consecutive source rows: those
   of r's output plane (oy + L * stride_y < dst_h: phase ry, index j + L; the next plane's are of
   another phase rz, or with stride_z 1 of index k + 1) */
static synet_size same_phase_rows(const synet_deconv_plan *p, synet_size r, synet_size end)
{
    const synet_size next_plane = r - r % p->dst_h + p->dst_h;
    return (SYNET_MIN(end, next_plane) - r + p->stride_y - 1) / p->stride_y;
}

#if SYNET_AVX512
/* dst[off + i * C + k] = act(acc[k * astride + i] + bias[k]) for i < npix, k < C, 2 <= C <= 16: whole pixels of
   a channels-last dst from C runs of one channel each (a planar plan's few output channels), act IDENTITY or
   RELU; returns 0 (nothing done) otherwise. Output vector j of a block of 16 pixels holds the flat elements
   f = 16 j + l, pixel f / C and channel f % C: C masked permutes of the block's channel vectors, stored whole
   (store_fast, a channel at a time, scattered them: vscatterdps took 80 % of D8h's epilogue). */
static int store_pixels(const float *acc, int64_t astride, int64_t C, int64_t npix, const float *bias, void *dst,
                        int bf16, int act, int64_t off)
{
    if ((act != SYNET_ACT_IDENTITY && act != SYNET_ACT_RELU) || C < 2 || C > 16)
        return 0;
    const int relu = act == SYNET_ACT_RELU;
    __m512i pixel[16];
    __m512 bv[16], chan[16];
    __mmask16 of_channel[16][16]; /* [j][k]: the lanes of output vector j from channel k */
    for (int64_t j = 0; j < C; ++j) {
        int32_t pix[16];
        float b[16];
        for (int k = 0; k < C; ++k)
            of_channel[j][k] = 0;
        for (int l = 0; l < 16; ++l) {
            const int64_t f = 16 * j + l;
            pix[l] = (int32_t)(f / C);
            b[l] = bias[f % C];
            of_channel[j][f % C] |= (__mmask16)(1u << l);
        }
        pixel[j] = _mm512_loadu_si512((const void *)pix);
        bv[j] = _mm512_loadu_ps(b);
    }
    for (int64_t i0 = 0; i0 < npix; i0 += 16) {
        const int64_t n = SYNET_MIN(npix - i0, (int64_t)16), elements = n * C;
        for (int64_t k = 0; k < C; ++k)
            chan[k] = _mm512_maskz_loadu_ps(synet_mask16(n), acc + k * astride + i0);
        for (int64_t j = 0; 16 * j < elements; ++j) {
            __m512 v = _mm512_setzero_ps();
            for (int64_t k = 0; k < C; ++k)
                v = _mm512_mask_permutexvar_ps(v, of_channel[j][k], pixel[j], chan[k]);
            const int64_t left = elements - 16 * j;
            store_act16(dst, off + i0 * C + 16 * j, synet_mask16(left < 16 ? left : 16), _mm512_add_ps(v, bv[j]),
                        relu, bf16);
        }
    }
    return 1;
}
#endif

/* On planes: one image's output planes of one group (depthwise: one channel). Depthwise, its input plane's
   padded copy is made here (it stays in cache for the taps); planar (several input channels a group, padded
   by pad_row before the tasks), the taps of a phase run over the group's input planes, for a block of up to
   PLANAR_OUT_MAX of its output channels at once. The output rows are assembled in a row buffer a channel,
   several whole rows at a time where they fit, and stored once with bias and activation (channels last:
   through the buffer, each output dst_c from the next). The rows of one phase that follow each other (every
   stride_y-th) are assembled in one call. */
static void depthwise_plane(const synet_deconv_plan *p, const void *src, float *image, void *dst, synet_size task)
{
    float buffer[PLANAR_OUT_MAX * DW_BUFFER];
    /* a planar group's output rows come in bands of row_run, and its output channels in blocks of up to
       PLANAR_OUT_MAX, one band of one block a task (a depthwise plane is one band: its task pads its source
       plane) */
    const synet_size bands = (p->nrows + p->row_run - 1) / p->row_run, band = task % bands;
    const synet_size row_begin = band * p->row_run, row_end = SYNET_MIN(p->nrows, row_begin + p->row_run);
    task /= bands;
    const synet_size blocks = channel_blocks(p), block = task % blocks;
    task /= blocks;
    const synet_size g = task % p->group, n = task / p->group, c = g * p->cg_out + block * PLANAR_OUT_MAX;
    const synet_size channels = SYNET_MIN((synet_size)PLANAR_OUT_MAX, p->cg_out - block * PLANAR_OUT_MAX);
    const synet_size sy = p->stride_y;
    const synet_size plane = n * p->src_c + g * p->cg_in; /* the group's first input plane */
    const synet_size plane_rows = p->padded_d * p->padded_h, dst_plane = p->dst_d * p->dst_h * p->dst_w;
    float *first = image + plane * plane_rows * p->padded_w;
    const float *pad = p->pad_rows ? first : pad_plane(p, src, first, plane);
    const float *w = p->depthwise + c * p->kpairs;
    for (synet_size x0 = 0; x0 < p->dst_w; x0 += DW_COLS) { /* (DW_COLS even: x0 is) */
        const synet_size width = SYNET_MIN(p->dst_w - x0, (synet_size)DW_COLS);
        /* finished in dst itself (finish_mode) where the phases are vectors (stride_x <= 2), BF16 outputs
           where direct_bf16 says; else assembled in the buffer, then stored by the epilogue */
        const int mode = !p->nhwc && p->stride_x <= 2 && (!p->dst_bf16 || direct_bf16(p)) ? finish_mode(p) : 0;
        /* whole rows, every output row of the plane in order (the plan sorts them): all of them when they
           go to dst (each phase's rows in one call, its weights and tap pointers set up once: D4 0.18 ->
           0.155 ms), as many as the buffer holds when they go through it; otherwise one row at a time */
        const int whole = width == p->dst_w && p->nrows == p->dst_d * p->dst_h;
        const synet_size batch = whole ? (mode ? row_end - row_begin : DW_BUFFER / width) : 1;
        for (synet_size r0 = row_begin; r0 < row_end; r0 += batch) {
            const synet_size nb = SYNET_MIN(batch, row_end - r0);
            const synet_deconv_row row = synet_deconv_row_of(p, r0);
            const synet_size oy = row.oy, oz = row.oz;
            const synet_size pixel = ((n * p->dst_d + oz) * p->dst_h + oy) * p->dst_w + x0; /* (channels last) */
            const synet_size at = p->nhwc ? pixel * p->dst_c + c
                                          : (((n * p->dst_c + c) * p->dst_d + oz) * p->dst_h + oy) * p->dst_w + x0;
            const int bf16 = mode && p->dst_bf16;
            void *out = mode ? element_at(dst, at, bf16) : buffer;
            for (synet_size q = 0; q < SYNET_MIN(nb, sy); ++q)
                for (synet_size r = r0 + q, L; r < r0 + nb; r += L * sy) {
                    L = same_phase_rows(p, r, r0 + nb);
                    assemble_rows(p, pad, w, r, L, x0, width, element_at(out, (r - r0) * width, bf16), sy * width,
                                  mode ? dst_plane : DW_BUFFER, p->bias + c, mode, bf16, channels);
                }
            if (mode)
                continue;
#if SYNET_AVX512 /* whole pixels of a channels-last dst */
            if (p->nhwc && channels == p->dst_c &&
                store_pixels(buffer, DW_BUFFER, channels, nb * width, p->bias + c, dst, p->dst_bf16, p->act, at))
                continue;
#endif
            for (synet_size k = 0; k < channels; ++k) /* (channels last: an output dst_c from the next) */
                deconv_store(buffer + k * DW_BUFFER, 1, nb * width, 1, c + k, p, dst, at + k * (p->nhwc ? 1 : dst_plane),
                             p->nhwc ? p->dst_c : 1, 0);
        }
    }
}

/* Channels last: DW_SPAN channels of up to DW_PIXELS output pixels of a phase, summed in registers and
   stored to dst with IDENTITY / RELU (finish_mode), else to a tile [pixel][channel] (row stride DW_SPAN)
   that the epilogue stores. */
#define DW_NV (VW == 16 ? 4 : 2) /* vectors of channels in a span: NT x DW_NV weights stay in registers */
#define DW_SPAN (DW_NV * VW)
/* outputs of a phase a tile: a strip of depthwise_band_channels_last (AVX2 and below, 4 tiles a pixel of 64
   channels: with strips of 16, D4h at avx2 1.075x the time of a task a row, with 64 1.03x) */
#define DW_PIXELS (VW == 16 ? 16 : 64)

/* Where channels_last_tile stores finished outputs itself (finish_mode > 0): out[l * out_row + m * step + c] for
   `rows` rows l of a phase, their sources s_row apart */
typedef struct tile_out {
    void *out; /* FP32, or with bf16 BF16 bits */
    synet_size step;
    const float *bias;
    int mode, bf16;
    synet_size rows, s_row, out_row;
} tile_out;

/* The vector channels of channels_last_tile, tile[m][v * VW..] for m < M, v < nv (and L rows), at one finish mode (MODE,
   a constant: with a branch on the mode at every vector, and the channel tail's values live across the
   loop, the tap pointers were kept in vector registers; D4h 0.154 -> 0.129 ms, at AVX2 0.30 -> 0.19 ms). */
SYNET_INLINE void channels_last_vectors(const float *s, synet_size C, const int64_t *toff, const float *w,
                                        int64_t ntaps, synet_size M, synet_size nv, void *out, synet_size step,
                                        const float *bias, synet_size L, synet_size s_row, synet_size out_row,
                                        const int NT, const int MODE, const int BF16)
{
    vfloat wv[DW_UNROLL_MAX][DW_NV], bv[DW_NV];
    const float *st[DW_UNROLL_MAX]; /* the taps' sources (toff[t] would be reloaded after every store) */
    for (int t = 0; t < NT; ++t) {
        st[t] = s + toff[t];
        for (int v = 0; v < DW_NV; ++v)
            wv[t][v] = v < nv ? load_vf(w + t * C + v * VW) : (vfloat){};
    }
    for (int v = 0; v < DW_NV; ++v)
        bv[v] = MODE && v < nv ? canonical_nan_vf(load_vf(bias + v * VW)) : (vfloat){};
    for (synet_size l = 0; l < L; ++l)
        for (synet_size m = 0; m < M; ++m)
            for (int v = 0; v < DW_NV; ++v) {
                if (v >= nv)
                    break;
                const synet_size i = l * s_row + m * C + v * VW;
                vfloat a = fresh_zero();
                if (NT > 0)
                    for (int t = 0; t < NT; ++t)
                        a = multiply_add(wv[t][v], load_vf(st[t] + i), a);
                else
                    for (int64_t t = 0; t < ntaps; ++t)
                        a = multiply_add(load_vf(w + t * C + v * VW), load_vf(s + toff[t] + i), a);
                store_sums(out, l * out_row + m * step + v * VW, finish(a, bv[v], MODE), BF16);
            }
}

/* channels_last_tile's channels c0..cn - 1 past its whole vectors, one at a time by multiply_add1 (the lanes' fma);
   a function of its own, out of the tiles' vector loops (inlined there, D4h took 1.02-1.03x the time) */
static __attribute__((noinline)) void channels_last_rest(const float *s, synet_size C, const int64_t *toff,
                                                         const float *w, int64_t ntaps, synet_size M, synet_size c0,
                                                         synet_size cn, void *out, synet_size step, const float *bias,
                                                         int mode, int bf16, synet_size L, synet_size s_row,
                                                         synet_size out_row)
{
    for (synet_size l = 0; l < L; ++l)
        for (synet_size m = 0; m < M; ++m)
            for (synet_size c = c0; c < cn; ++c) {
                float a = 0.0f;
                for (int64_t t = 0; t < ntaps; ++t)
                    a = multiply_add1(w[t * C + c], s[l * s_row + m * C + toff[t] + c], a);
                store_f(out, l * out_row + m * step + c, finish1(a, mode ? bias[c] : 0.0f, mode), bf16);
            }
}

/* tile[m][c] = sum over taps t of w[t * C + c] * s[m * C + toff[t] + c], in tap order, for m < M, c < cn.
   NT > 0: that many taps, their weights loaded once into registers (every pixel of the segment uses
   them); NT == 0: ntaps, the weights loaded at each use. BF16: to->bf16, a constant. */
SYNET_INLINE void channels_last_tile(const float *s, synet_size C, const int64_t *toff, const float *w, int64_t ntaps,
                                     synet_size M, synet_size cn, float *tile, const tile_out *to, const int NT,
                                     const int BF16)
{
    const synet_size nv = cn / VW;
    void *const out = to ? to->out : tile;
    const synet_size step = to ? to->step : DW_SPAN;
    const float *const bias = to ? to->bias : NULL;
    const int mode = to ? to->mode : 0;
    const synet_size L = to ? to->rows : 1, s_row = to ? to->s_row : 0, out_row = to ? to->out_row : 0;
    if (mode == 2)
        channels_last_vectors(s, C, toff, w, ntaps, M, nv, out, step, bias, L, s_row, out_row, NT, 2, BF16);
    else if (mode == 1)
        channels_last_vectors(s, C, toff, w, ntaps, M, nv, out, step, bias, L, s_row, out_row, NT, 1, BF16);
    else
        channels_last_vectors(s, C, toff, w, ntaps, M, nv, out, step, bias, L, s_row, out_row, NT, 0, BF16);
    if (nv * VW < cn)
        channels_last_rest(s, C, toff, w, ntaps, M, nv * VW, cn, out, step, bias, mode, BF16, L, s_row, out_row);
}

/* channels_last_tile with the tap count unrolled for the common small ones */
SYNET_INLINE void channels_last_taps(const float *s, synet_size C, const int64_t *toff, const float *w, int64_t ntaps,
                                     synet_size M, synet_size cn, float *tile, const tile_out *to, const int BF16)
{
#define TILE_CASE(NT) \
    case NT: \
        channels_last_tile(s, C, toff, w, ntaps, M, cn, tile, to, NT, BF16); \
        return;
    switch (ntaps) {
        UNROLLED_TAPS(TILE_CASE)
    default:
        channels_last_tile(s, C, toff, w, ntaps, M, cn, tile, to, 0, BF16);
    }
#undef TILE_CASE
}

/* The FP32- and BF16-output tiles, each in a function of its own: inlined into the row loop, the tiles' loops
   ran out of general registers (D4h 1.09x slower), and the BF16 ones inlined beside the FP32 ones cost
   D4h FP32 1.05x */
static __attribute__((noinline)) void channels_last_fp32(const float *s, synet_size C, const int64_t *toff,
                                                         const float *w, int64_t ntaps, synet_size M, synet_size cn,
                                                         float *tile, const tile_out *to)
{
    channels_last_taps(s, C, toff, w, ntaps, M, cn, tile, to, 0);
}

static __attribute__((noinline)) void channels_last_bf16(const float *s, synet_size C, const int64_t *toff,
                                                         const float *w, int64_t ntaps, synet_size M, synet_size cn,
                                                         const tile_out *to)
{
    channels_last_taps(s, C, toff, w, ntaps, M, cn, NULL, to, 1);
}

static void channels_last_call(const float *s, synet_size C, const int64_t *toff, const float *w, int64_t ntaps,
                               synet_size M, synet_size cn, float *tile, const tile_out *to)
{
    if (to && to->bf16)
        channels_last_bf16(s, C, toff, w, ntaps, M, cn, to);
    else
        channels_last_fp32(s, C, toff, w, ntaps, M, cn, tile, to);
}

/* Channels last: the output rows of one band (row_run of them, of one image; task = image * bands + band) in
   strips of DW_PIXELS outputs of each phase, the band's rows of a strip before the next strip (its source
   pixels stay in L1 for the rows that read them again), a phase's rows of a strip in one call (the weights
   loaded once), in tiles of pixels x channels; each output stored once with bias and activation. Row by
   row, each phase row a call: D4h 1.08x the time (Zen 5, avx512_bf16). */
static void depthwise_band_channels_last(const synet_deconv_plan *p, const float *image, void *dst, synet_size task)
{
    float tile[DW_PIXELS * DW_SPAN];
    const synet_size bands = (p->nrows + p->row_run - 1) / p->row_run, band = task % bands, n = task / bands;
    const synet_size row_begin = band * p->row_run, row_end = SYNET_MIN(p->nrows, row_begin + p->row_run);
    const synet_size C = p->src_c, pixel_step = p->stride_x * C, sy = p->stride_y;
    const synet_size s_row = p->padded_w * C, out_row = sy * p->dst_w * C; /* a phase's next row */
    const int mode = finish_mode(p); /* the tiles store finished outputs to dst themselves */
    synet_size columns = 0;          /* the most outputs of a phase in a row */
    for (synet_size rx = 0; rx < p->stride_x; ++rx)
        columns = SYNET_MAX(columns, p->col_count[rx]);
    for (synet_size i = 0; i < columns; i += DW_PIXELS)
        for (synet_size q = 0; q < SYNET_MIN(sy, row_end - row_begin); ++q)
            for (synet_size r = row_begin + q, L; r < row_end; r += L * sy) {
                L = same_phase_rows(p, r, row_end); /* rows r, r + sy, ...: one phase, consecutive sources */
                const synet_deconv_row row = synet_deconv_row_of(p, r);
                const synet_size zy = (row.k + p->pad_low_z) * p->padded_h + row.j + p->pad_low_y;
                const synet_size pixel = ((n * p->dst_d + row.oz) * p->dst_h + row.oy) * p->dst_w;
                for (synet_size rx = 0; rx < p->stride_x; ++rx) {
                    if (i >= p->col_count[rx])
                        continue;
                    const synet_size phase = row.rzy * p->stride_x + rx, i0 = p->col_first[rx] + i;
                    const synet_size M = SYNET_MIN((synet_size)DW_PIXELS, p->col_count[rx] - i);
                    const int64_t *toff = p->tap_offsets + p->phase_tap0[phase];
                    const float *s = image + ((n * p->padded_d * p->padded_h + zy) * p->padded_w + i0 + p->pad_low_x) * C;
                    const synet_size off = (pixel + rx - p->pad_left + p->stride_x * i0) * C;
                    for (synet_size c0 = 0; c0 < C; c0 += DW_SPAN) {
                        const synet_size cn = SYNET_MIN((synet_size)DW_SPAN, C - c0);
                        const float *w = p->depthwise + p->phase_tap0[phase] * C + c0;
                        if (mode) {
                            const tile_out to = {element_at(dst, off + c0, p->dst_bf16), pixel_step, p->bias + c0, mode,
                                                 p->dst_bf16, L, s_row, out_row};
                            channels_last_call(s + c0, C, toff, w, p->phase_taps[phase], M, cn, tile, &to);
                        } else
                            for (synet_size l = 0; l < L; ++l) {
                                channels_last_call(s + l * s_row + c0, C, toff, w, p->phase_taps[phase], M, cn, tile,
                                                   NULL);
                                deconv_store(tile, DW_SPAN, M, cn, c0, p, dst, off + l * out_row + c0, pixel_step, 1);
                            }
                    }
                }
            }
}


/* Depthwise (or planar) unit u: output channels u * SYNET_PACK_CHANNELS .. (to dst_c), each one's rounded FP32
   weights by tap, [c][tap] (NCHW) or [tap][c] (NHWC); a planar plan's phase runs its taps over each of the
   group's input planes in turn (phase_taps / cg_in taps a plane). A kernel position's weight offset is worked
   out once for the unit's channels (with one channel a unit, D4's 1024 weights took 2x the time) */
int deconv_depthwise_pack(const synet_deconv_plan *p, const synet_deconv_weights *w, synet_size u, float *table)
{
    int nonfinite = 0;
    const synet_size c0 = u * SYNET_PACK_CHANNELS, n = SYNET_MIN((synet_size)SYNET_PACK_CHANNELS, p->dst_c - c0);
    const synet_size cg_in = p->cg_in, phases = p->stride_z * p->stride_y * p->stride_x;
    /* channel c0 + j's weights from w->w + base[j], its tap t at table[(c0 + j) * c_step + t * t_step] */
    synet_size base[SYNET_PACK_CHANNELS];
    for (synet_size j = 0; j < n; ++j)
        base[j] = (c0 + j) / p->cg_out * cg_in * w->ci_step + (c0 + j) % p->cg_out * w->co_step;
    const int last = channels_last_kernel(p);
    const synet_size c_step = last ? 1 : p->kpairs, t_step = last ? p->src_c : 1;
    float *out = table + c0 * c_step;
    for (synet_size phase = 0; phase < phases; ++phase) {
        /* the phase's taps run over the group's planes in turn, per taps a plane, the same kernel positions in
           every plane: one weight offset a position, its planes ci_step apart in w, per apart in the table */
        const synet_size per = p->phase_taps[phase] / cg_in, t0 = p->phase_tap0[phase];
        for (synet_size i = 0; i < per; ++i) {
            const float *at = w->w + tap_step(p, w, t0 + i);
            for (synet_size j = 0; j < n; ++j) {
                const float *from = at + base[j];
                float *to = out + j * c_step + (t0 + i) * t_step;
                for (synet_size k = 0; k < cg_in; ++k) {
                    const uint16_t h = synet_bf16_from_float(from[k * w->ci_step]);
                    nonfinite |= (h & 0x7F80) == 0x7F80;
                    to[k * per * t_step] = canonical_nan_f(synet_bf16_to_float(h));
                }
            }
        }
    }
    return nonfinite;
}

void deconv_depthwise_task(const synet_deconv_plan *p, const void *src, void *image, void *dst, synet_size t)
{
    if (channels_last_kernel(p))
        depthwise_band_channels_last(p, (const float *)image, dst, t);
    else
        depthwise_plane(p, src, (float *)image, dst, t);
}
