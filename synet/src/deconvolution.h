/* Deconvolution16b: BF16/FP32 transposed convolution with fused bias and activation, in 1, 2 or 3
 * spatial dimensions (1-D and 2-D are 3-D with depth 1; 1-D also has height 1).
 *
 *   dst[n, oc, oz, oy, ox] = act(bias[oc] + sum src[n, ic, iz, iy, ix] * w[ic, oc, kz, ky, kx])
 *
 * over the taps with oz = iz*stride_z - pad_front + kz*dilation_z (likewise y, x), ic in oc's group;
 * src and w rounded to BF16 (nearest-even), products summed in FP32. The plan is built by
 * synet/_deconvolution_plan.py (geometry, tables) and synet/_deconvolution.pyx (pointers); the
 * kernels below run one task of it. See deconvolution.c for the algorithms.
 */
#ifndef SYNET_DECONVOLUTION_H
#define SYNET_DECONVOLUTION_H

#include "common.h"

enum { SYNET_DECONV_GEMM = 1, SYNET_DECONV_DEPTHWISE = 2 };

/* The GEMM micro-kernel: FP32 multiply-adds on BF16 values (any level), AVX-512 vdpbf16ps, AMX tiles. */
enum { SYNET_MICRO_FP32 = 0, SYNET_MICRO_BF16 = 1, SYNET_MICRO_AMX = 2 };

#define SYNET_DECONV_BLOCK 64 /* output channels per packed weight block (32 with AMX) */
#define SYNET_PLANAR_OUT_MAX 4 /* output channels a planar (DEPTHWISE) task sums at once: a group's in blocks */
#define SYNET_LANES_STRIP 4 /* output channels of a strip of a lanes plan's packed weights */
#define SYNET_LANES_TAPS 64 /* the most taps (kernel positions) of a lanes plan */
#define SYNET_PACK_CHANNELS 16 /* output channels a DEPTHWISE plan's weight packing unit rounds (pack_units) */

typedef struct synet_deconv_plan {
    int impl;        /* SYNET_DECONV_GEMM or SYNET_DECONV_DEPTHWISE */
    int micro;       /* GEMM: SYNET_MICRO_* */
    int wide_weights; /* SYNET_MICRO_FP32: packed rows of float32 weights, not BF16 pairs: in units of this many
                         channels (the table's fp32_unit), each two vectors of (even, odd) pairs, channel
                         4i + 2h + j of a unit at pair 2i + j of vector h (deconvolution.c: fp32_tile); 0: pairs */
    int lanes;       /* SYNET_MICRO_BF16, channels first, stride_x <= 2, at most SYNET_LANES_TAPS taps, IDENTITY /
                        RELU: the pixels-in-lanes kernel (deconvolution.c: lanes_task), its own image layout and
                        weights in strips of SYNET_LANES_STRIP channels */
    int src_bf16, dst_bf16; /* BF16 (raw bits) or FP32 src / dst */
    int nhwc;        /* NHWC (else NCHW) src and dst */
    int direct;      /* BF16 NHWC src read in place as the padded image (no copy) */
    int act;         /* SYNET_ACT_* */
    synet_size buf_size; /* bytes of scratch the run needs (the padded source image + 64) */
    /* geometry as the kernels see it (a 1x1x1 stride-1 deconvolution is one long row) */
    synet_size batch, src_c, src_d, src_h, src_w, dst_c, dst_d, dst_h, dst_w, group, cg_in, cg_out;
    synet_size kernel_z, kernel_y, kernel_x, dilation_z, dilation_y, dilation_x, stride_z, stride_y, stride_x;
    synet_size pad_front, pad_top, pad_left;
    /* the padded source image: [batch, padded_d, padded_h, padded_w, pixel_stride] (GEMM; BF16 bits, or
       FP32 values for SYNET_MICRO_FP32), with each group's cg_in channels padded to cg_padded (and for
       SYNET_MICRO_BF16 each 4 of them in the micro-kernel's order, deconvolution.c: quad_place); depthwise:
       FP32 [batch, src_c, padded_d, padded_h, padded_w] (channels first) or [batch, padded_d, padded_h,
       padded_w, src_c] (channels last). pad_low_z / pad_low_y / pad_low_x zero planes / rows / columns
       come before the source. */
    synet_size padded_d, padded_h, padded_w, pad_low_z, pad_low_y, pad_low_x, cg_padded, pixel_stride;
    synet_size padded_image;
    synet_size kpairs;      /* GEMM: cg_padded / 2 channel pairs; depthwise: taps per channel */
    synet_size block_width; /* output channels per weight block: 64, or 32 with AMX */
    synet_size weight_strip; /* output channels per strip of a packed weight block (deconvolution.c: strip_row):
                                the FP32 micro-kernel's channels per call (the table's fp32_strip), else
                                block_width (whole rows) */
    synet_size nblocks, nrows, nunits, ntasks, dst_image;
    /* GEMM, not AMX: a task's consecutive rows (output order); channels first: whole 64-byte output windows
       stored past the caches (an output far larger than they are). Channels-first depthwise / planar: the
       output rows of a plane's task (a depthwise plane: all of them) */
    synet_size row_run;
    int stream;
    synet_size pad_rows;    /* rows of the padded image the run fills (0: direct) */
    /* tables: every output phase (rz, ry, rx) of the stride_z x stride_y x stride_x phases, numbered
       (rz * stride_y + ry) * stride_x + rx, has phase_taps[phase] taps from phase_tap0[phase] on, with
       tap_offsets (elements of the padded image) and kernel positions tap_kz / tap_ky / tap_kx; a task
       row r < nrows is output row (r / dst_h, r % dst_h) (synet_deconv_row_of); phase column rx has
       col_count columns from col_first */
    const int64_t *phase_taps, *phase_tap0, *tap_offsets, *tap_kz, *tap_ky, *tap_kx;
    const int64_t *col_first, *col_count;
    /* AMX units: segment unit_s0 and (full segments only) unit_s1 or -1, output channel block unit_ob; a
       segment is <= 16 pixels of one phase row: its first pixel in the padded image (seg_aoff) and in dst
       (seg_doff). A task (of an image and group) is run r < amx_runs: units run_unit0[r] to
       run_unit0[r + 1] - 1. */
    synet_size amx_runs;
    const int64_t *unit_s0, *unit_s1, *unit_ob, *run_unit0, *seg_aoff, *seg_doff, *seg_m, *seg_phase;
    /* set_params' data */
    const float *bias;            /* [dst_c] */
    const float *params;          /* the activation's parameters (PRELU: dst_c slopes) */
    const uint16_t *weights;      /* GEMM: packed BF16 weights */
    const int64_t *weight_offsets;/* GEMM: [group][phase][block] offsets into weights */
    const float *depthwise;       /* depthwise: BF16-rounded FP32 weights [c][tap] (NCHW) or [tap][c] */
    /* Exact borders: a border output (a tap of its phase falls into the zero padding) gets NaN from a
       NaN or inf weight times that zero. When the rounded weights hold one, set_params sets
       exact_borders and exact_weights; the run then sums every border output again over its in-range
       taps only, as PyTorch does. */
    int exact_borders;
    synet_size nborder_x;
    const int64_t *border_z;      /* [dst_d]: 1 for a border plane (all of its outputs) */
    const int64_t *border_y;      /* [dst_h]: 1 for a border row (all of its outputs) */
    const int64_t *border_x;      /* [nborder_x]: the border columns, ascending */
    const float *exact_weights;   /* BF16-rounded FP32 weights [group][kernel_z][kernel_y][kernel_x][cg_in][cg_out] */
    /* The weights' exponent range (synet_exponent_range; set where the level has an exact-products copy) */
    int weight_exp_lo, weight_exp_hi;
} synet_deconv_plan;

/* Output row (oz, oy) of task row r, in the phase rzy = rz * stride_y + ry at index k along z and j along y,
   where oz + pad_front = stride_z * k + rz and oy + pad_top = stride_y * j + ry. */
typedef struct synet_deconv_row {
    synet_size oz, oy, rzy, k, j;
} synet_deconv_row;

static inline synet_deconv_row synet_deconv_row_of(const synet_deconv_plan *p, synet_size r)
{
    synet_deconv_row row;
    row.oz = r / p->dst_h;
    row.oy = r % p->dst_h;
    const synet_size z = row.oz + p->pad_front, y = row.oy + p->pad_top;
    row.k = z / p->stride_z;
    row.j = y / p->stride_y;
    row.rzy = z % p->stride_z * p->stride_y + y % p->stride_y;
    return row;
}

/* The caller's weights: element (g, ci, co, kz, ky, kx) is at w[(g * cg_in + ci) * ci_step + co * co_step +
   kz * kz_step + ky * ky_step + kx * kx_step] (FP32). */
typedef struct synet_deconv_weights {
    const float *w;
    synet_size ci_step, co_step, kz_step, ky_step, kx_step;
} synet_deconv_weights;

typedef struct synet_deconv_kernels {
    const char *level;
    int micro_bf16; /* has the vdpbf16ps micro-kernel */
    int micro_amx;  /* has the AMX micro-kernel */
    int fp32_strip; /* output channels the FP32 micro-kernel sums per call: its plans' weight_strip */
    int fp32_unit;  /* channels of a unit of the FP32 micro-kernel (its vector width): its plans' wide_weights
                       (when not 0) */
    /* pads / converts part r < pad_rows: row r of the padded image (batch * padded_d * padded_h); a planar
       plan's plane r (batch * src_c) */
    void (*pad_row)(const synet_deconv_plan *p, const void *src, void *image, synet_size r);
    /* output task t < ntasks (image: the padded source, filled by pad_row, or by the task itself for a
       channels-first depthwise plan); `rows`: this thread's configured AMX tile rows (0: none yet) */
    void (*task)(const synet_deconv_plan *p, const void *src, void *image, void *dst, synet_size t, int *rows);
    void (*amx_release)(void);
    /* exact borders: the border outputs of task t < batch * group * dst_d * dst_h */
    void (*border_task)(const synet_deconv_plan *p, const void *src, void *dst, synet_size t);
    /* packs unit u of the weights, rounded to BF16: GEMM (u < group * kpairs): channel pair u % kpairs
       of group u / kpairs into `packed` at p->weight_offsets; depthwise (u < src_c): channel u into the
       FP32 table. Returns 1 when a rounded weight of the unit is NaN or inf. */
    int (*pack)(const synet_deconv_plan *p, const synet_deconv_weights *w, synet_size u, void *packed);
} synet_deconv_kernels;

SYNET_DECLARE_TABLES(synet_deconv_kernels, synet_deconv_kernels)

/* The baseline's copy with float64 products (vector.h: multiply_add; setup.py: EXACT_PRODUCTS_OPS): the
   kernels of the level without FMA instructions, giving the FMA levels' bits where a product of BF16 values
   lies beyond FP32's range or below its normal range. The same plans and packed weights as the baseline's. */
extern const synet_deconv_kernels synet_deconv_kernels_baseline_exact __attribute__((weak));

/* The exact-products copy of the kernels k, or NULL: k has FMA instructions (or its copy was not built) */
static inline const synet_deconv_kernels *synet_deconv_exact_products_of(const synet_deconv_kernels *k)
{
    return k && k == &synet_deconv_kernels_baseline ? &synet_deconv_kernels_baseline_exact : 0;
}

/* The exponents of n values (FP32, or BF16 bits) after rounding to BF16, as far as products go: *lo and *hi
   bound the biased exponent e of every finite value v that is not 0 in BF16, 2^(e - 127) <= |v| < 2^(e - 126)
   (a BF16 subnormal, >= 2^-133, counts as e = -6; an FP32 value's e is raised by 1 for its rounding, which may
   carry into the next binade; an FP32 magnitude <= 0x8000, 2^-134, rounds to 0). No such value: *lo = 255,
   *hi = 0, which no source or weight range makes a product leave FP32's range with. (Written so that GCC
   vectorises the loops: the largest e + 1 with inf and NaN wrapped to 0, the smallest magnitude - 0x8001 with
   the magnitudes that round to 0 wrapped past every other.) */
SYNET_INLINE void synet_exponents_add(uint32_t bits, uint32_t *high, uint32_t *low)
{
    const uint32_t magnitude = bits & 0x7FFFFFFFu, up = ((magnitude >> 23) + 1) & 0xFF, below = magnitude - 0x8001u;
    *high = up > *high ? up : *high;
    *low = below < *low ? below : *low;
}

static inline void synet_exponent_range(const void *values, synet_size n, int bf16, int *lo, int *hi)
{
    uint32_t high = 0, low = 0xFFFFFFFFu;
    if (bf16)
        for (synet_size i = 0; i < n; ++i)
            synet_exponents_add((uint32_t)((const uint16_t *)values)[i] << 16, &high, &low);
    else
        for (synet_size i = 0; i < n; ++i)
            synet_exponents_add(((const uint32_t *)values)[i], &high, &low);
    const uint32_t smallest = low + 0x8001u; /* the smallest magnitude that is not 0 in BF16 (<= 0x8000: none) */
    *lo = smallest <= 0x8000u || smallest >= 0x7F800000u ? 255 : smallest < 0x00800000u ? -6 : (int)(smallest >> 23);
    *hi = high == 0 ? 0 : (int)high - 1 + !bf16;
}

/* The exponent range (synet_exponent_range) of part `part` of `parts` of p's source: range[0] lo, range[1] hi
   (deconv_run's threads scan it together) */
static inline void synet_deconv_source_exponents(const synet_deconv_plan *p, const void *src, synet_size part,
                                                 synet_size parts, int *range)
{
    const synet_size n = p->batch * p->src_c * p->src_d * p->src_h * p->src_w;
    const synet_size first = n / parts * part + SYNET_MIN(part, n % parts), size = n / parts + (part < n % parts);
    synet_exponent_range((const char *)src + first * (p->src_bf16 ? 2 : 4), size, p->src_bf16, range, range + 1);
}

/* Whether every product of a source value and a weight is exact in FP32 (2^-126 <= |x*w| < 2^128, or 0, inf,
   NaN), given the source's exponent ranges of `parts` parts: then the baseline's rounded products are the fma's,
   else a run at the baseline takes synet_deconv_kernels_baseline_exact. */
static inline int synet_deconv_products_exact(const synet_deconv_plan *p, const int *ranges, synet_size parts)
{
    int lo = 255, hi = 0;
    for (synet_size i = 0; i < parts; ++i) {
        lo = SYNET_MIN(lo, ranges[2 * i]);
        hi = SYNET_MAX(hi, ranges[2 * i + 1]);
    }
    /* |x*w| < 2^(hi - 126 + weight_exp_hi - 126) <= 2^128, and >= 2^(lo - 127 + weight_exp_lo - 127) >= 2^-126 */
    return hi + p->weight_exp_hi <= 380 && lo + p->weight_exp_lo >= 128;
}

#endif
