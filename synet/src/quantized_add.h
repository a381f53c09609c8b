/* QuantizedAdd: dst = Quantize(Activate(a' + b')) with NumPy broadcasting.
 *
 *   x' = (x - zero) * scale   (UINT8 / INT8 x; a FLOAT32 x is used as is)
 *   value = Activate(a' + b')
 *   dst = clamp(round_half_even(value / dst_scale) + dst_zero, lo, hi)   (UINT8 [0, 255], INT8 [-128, 127])
 *   dst = value                                                          (FLOAT32)
 */
#ifndef SYNET_QUANTIZED_ADD_H
#define SYNET_QUANTIZED_ADD_H

#include "common.h"

enum { SYNET_QADD_F32 = 0, SYNET_QADD_I8 = 2, SYNET_QADD_U8 = 3 }; /* DataType values */
enum { SYNET_QADD_GENERIC = 0, SYNET_QADD_FOLDED = 1, SYNET_QADD_LOOKUP = 2 };
#define SYNET_QADD_LINE_BYTES 832 /* a line table: indices up to 3 * 255, padded for 4-byte gathers and to 13 * 64 */

/* The quantisation constants of one channel of the quantisation axis (one set when per tensor). */
typedef struct synet_qadd_consts {
    /* quantised operand in float64: x' = (x - zero) * scale */
    double a_scale, b_scale;
    /* quantised operand in float32 (plan.float_values): d = float(x - zero), x' = fma(d, hi, d * lo) */
    float fa_scale, fa_scale_low, fb_scale, fb_scale_low;
    int a_zero, b_zero;
    /* quantised output: q = fma(value * q_pre, q_inv, q_zero) */
    float q_pre, q_inv, q_zero;
    /* folded (same-type 1-byte operands and output, IDENTITY / RELU): q = fma(a, ka, fma(b, kb, kc)), >= lo */
    float ka, kb, kc, lo;
    /* folded: every product and sum of both fmas is exact in float64, so a float64 sum rounded once is the
       fma (what a level without FMA instructions runs) */
    int folded_in_doubles;
} synet_qadd_consts;

/* Per-axis constants along an inner axis (short channels, e.g. NHWC's last axis): the constants of every
   position j of one period (nchan * chan_inner outputs), as arrays of `period` values; output o runs with
   those of j = o % period. Values as in synet_qadd_consts. */
typedef struct synet_qadd_lanes {
    synet_size period;
    const double *a_scale, *b_scale;
    const float *fa_scale, *fa_scale_low, *fb_scale, *fb_scale_low;
    const int *a_zero, *b_zero;
    const float *q_pre, *q_inv, *q_zero;
    const float *ka, *kb, *kc, *lo;
} synet_qadd_lanes;

typedef struct synet_qadd_plan {
    int a_type, b_type, dst_type; /* SYNET_QADD_F32 / I8 / U8 */
    int mode;                     /* SYNET_QADD_GENERIC / FOLDED / LOOKUP */
    int float_values;             /* the generic kernel sums in float32 (its error bound allows it) */
    int act;                      /* SYNET_ACT_* */
    const float *act_params;      /* the activation's parameters (PRELU: slopes) */
    synet_size prelu_inner, prelu_channels; /* PRELU: channel of output o = o / inner % channels */
    const uint8_t *lut;           /* LOOKUP: 2 * 65536 (+ 64 padding) bytes, dst of (a_byte << 8) | b_byte,
                                     then at 65536 + ((b_byte << 8) | a_byte) the same (transposed); also
                                     FOLDED where the row tables read it (rows with one operand constant, at
                                     the avx512 level from the lookup size on), else NULL */
    /* LOOKUP (and per-tensor FOLDED from the lookup size on) at the avx512 level: when the kernel's output for
       every pair of operand bytes (LOOKUP: lut's entries) is a function of the line index n = line_wa * a' +
       line_wb * b' (a', b': the operand bytes, plus 128 when signed; weights 1 or 2, so n <
       SYNET_QADD_LINE_BYTES), that function: line[n] (NULL otherwise). The planner builds it from the kernel's
       65536 outputs and checks it against all of them. (Scalar loads from it were slower than from lut, at the
       lower levels.) */
    const uint8_t *line;
    int line_wa, line_wb;
    const synet_qadd_consts *consts;
    synet_size nchan, chan_inner; /* channel of output o = o / chan_inner % nchan (nchan 1: per tensor) */
    /* broadcasting: `size` outputs in rows of `inner`; row r's operand offsets unravel r over `rank`
       outer dimensions; a_scalar / b_scalar: that operand is one value along a row */
    synet_size size, inner, rank;
    const synet_size *outer_shape, *a_strides, *b_strides;
    int a_scalar, b_scalar;
    int stream; /* outputs much larger than the caches: the folded kernel may stream its stores */
    const synet_qadd_lanes *lanes; /* NULL, or the per-position constants (then `consts` is not used) */
} synet_qadd_plan;

/* (the Cython layer declares the plan's other fields; this one it sets through here) */
static inline void synet_qadd_plan_set_lanes(synet_qadd_plan *plan, const synet_qadd_lanes *lanes)
{
    plan->lanes = lanes;
}

/* whether a plan's lanes (if any) fit its channels and kernel */
static inline int synet_qadd_plan_lanes_ok(const synet_qadd_plan *plan)
{
    return !plan->lanes || (plan->lanes->period > 0 && plan->lanes->period == plan->nchan * plan->chan_inner &&
                            plan->mode != SYNET_QADD_LOOKUP);
}

typedef struct synet_qadd_kernels {
    const char *level;
    /* outputs start..stop (flat) of a checked plan */
    void (*tile)(const synet_qadd_plan *plan, const void *a, const void *b, void *dst, synet_size start,
                 synet_size stop);
} synet_qadd_kernels;

SYNET_DECLARE_TABLES(synet_qadd_kernels, synet_qadd_kernels)

#endif
