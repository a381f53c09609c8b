/* The 11 activations of Simd's Synet family (SPEC section 2), shared by every op that fuses one.
 *
 * `x` is float32; `params` holds the activation's parameters in Simd's order (the Python layer
 * fills in the defaults, see synet/_activations.py):
 *
 *   IDENTITY        0  x
 *   RELU            1  max(0, x)
 *   LEAKY_RELU      2  x > 0 ? x : s*x                          s (0.01)
 *   RESTRICT_RANGE  3  min(max(lo, x), hi)                      lo, hi (0, 6)
 *   PRELU           4  x > 0 ? x : s[c]*x, c = channel          one slope per channel
 *   ELU             5  x >= 0 ? x : a*(exp(x) - 1)              a (1.0)
 *   HSWISH          6  max(min(x, sh) + sh, 0) * sc * x         sh, sc (3, 1/6)
 *   MISH            7  x > t ? x : x*tanh(log1p(exp(x)))        t (20)
 *   HARD_SIGMOID    8  max(0, min(x*sc + sh, 1))                sc, sh (1/6, 0.5)
 *   SWISH           9  x / (1 + exp(-s*x))                      s (1.0)
 *   GELU           10  x * (1 + erf(x/sqrt(2))) / 2
 *
 * NaN propagates (comparisons are written so that NaN takes the "pass x" branch). ELU, HSWISH,
 * MISH, SWISH and GELU are evaluated in float64 and rounded once (within 0.5 ulp on bfloat16
 * inputs); ELU uses expm1, GELU erfc(-x/sqrt(2))/2. Every function is a pure function of its
 * arguments and every kernel source is compiled with -ffp-contract=off, so each CPU level, a
 * vectorised loop and its scalar tail give the same bits.
 */
#ifndef SYNET_ACTIVATIONS_H
#define SYNET_ACTIVATIONS_H

#include "common.h"

enum {
    SYNET_ACT_IDENTITY = 0,
    SYNET_ACT_RELU = 1,
    SYNET_ACT_LEAKY_RELU = 2,
    SYNET_ACT_RESTRICT_RANGE = 3,
    SYNET_ACT_PRELU = 4,
    SYNET_ACT_ELU = 5,
    SYNET_ACT_HSWISH = 6,
    SYNET_ACT_MISH = 7,
    SYNET_ACT_HARD_SIGMOID = 8,
    SYNET_ACT_SWISH = 9,
    SYNET_ACT_GELU = 10,
    SYNET_ACT_COUNT = 11,
};

static inline float synet_act_relu(float x) { return x < 0 ? 0.0f : x; }

static inline float synet_act_leaky_relu(float x, float s) { return x > 0 ? x : s * x; }

static inline float synet_act_restrict_range(float x, float lo, float hi)
{
    x = x < lo ? lo : x;
    return x > hi ? hi : x;
}

static inline float synet_act_elu(float x, float a) { return !(x < 0) ? x : (float)((double)a * expm1((double)x)); }

static inline float synet_act_hswish(float x, float shift, float scale)
{
    double t = x > shift ? shift : x;
    t = t + shift;
    t = t < 0 ? 0.0 : t;
    return (float)(t * scale * x);
}

static inline float synet_act_mish(float x, float threshold)
{
    return x > threshold ? x : (float)(x * tanh(log1p(exp((double)x))));
}

static inline float synet_act_hard_sigmoid(float x, float scale, float shift)
{
    float y = fmaf(x, scale, shift);
    y = y > 1 ? 1.0f : y;
    return y < 0 ? 0.0f : y;
}

static inline float synet_act_swish(float x, float s) { return (float)(x / (1.0 + exp(-(double)s * x))); }

static inline float synet_act_gelu(float x) { return (float)(0.5 * x * erfc((double)x * -0.70710678118654752440)); }

/* x[j] = Activate(x[j]) for j < n, in place, one loop per activation (the simple ones vectorise).
   For PRELU x[j] is flat output element first + j, of channel (first + j) / inner % channels;
   the other activations ignore first, inner and channels. */
static inline void synet_activate_block(float *x, synet_size n, int act, const float *params, synet_size first,
                                        synet_size inner, synet_size channels)
{
    synet_size j;
    float p0, p1;
    if (act == SYNET_ACT_IDENTITY)
        return;
    if (act == SYNET_ACT_PRELU) {
        if (channels <= 1) {
            p0 = params[0];
            for (j = 0; j < n; ++j)
                x[j] = synet_act_leaky_relu(x[j], p0);
            return;
        }
        j = 0;
        while (j < n) { /* one run per channel segment */
            const synet_size c = ((first + j) / inner) % channels;
            const synet_size stop = SYNET_MIN(n, j + inner - (first + j) % inner);
            p0 = params[c];
            for (synet_size k = j; k < stop; ++k)
                x[k] = synet_act_leaky_relu(x[k], p0);
            j = stop;
        }
        return;
    }
    p0 = act != SYNET_ACT_RELU && act != SYNET_ACT_GELU ? params[0] : 0.0f;
    p1 = act == SYNET_ACT_RESTRICT_RANGE || act == SYNET_ACT_HSWISH || act == SYNET_ACT_HARD_SIGMOID ? params[1] : 0.0f;
    switch (act) {
    case SYNET_ACT_RELU:
        for (j = 0; j < n; ++j)
            x[j] = synet_act_relu(x[j]);
        break;
    case SYNET_ACT_LEAKY_RELU:
        for (j = 0; j < n; ++j)
            x[j] = synet_act_leaky_relu(x[j], p0);
        break;
    case SYNET_ACT_RESTRICT_RANGE:
        for (j = 0; j < n; ++j)
            x[j] = synet_act_restrict_range(x[j], p0, p1);
        break;
    case SYNET_ACT_ELU:
        for (j = 0; j < n; ++j)
            x[j] = synet_act_elu(x[j], p0);
        break;
    case SYNET_ACT_HSWISH:
        for (j = 0; j < n; ++j)
            x[j] = synet_act_hswish(x[j], p0, p1);
        break;
    case SYNET_ACT_MISH:
        for (j = 0; j < n; ++j)
            x[j] = synet_act_mish(x[j], p0);
        break;
    case SYNET_ACT_HARD_SIGMOID:
        for (j = 0; j < n; ++j)
            x[j] = synet_act_hard_sigmoid(x[j], p0, p1);
        break;
    case SYNET_ACT_SWISH:
        for (j = 0; j < n; ++j)
            x[j] = synet_act_swish(x[j], p0);
        break;
    case SYNET_ACT_GELU:
        for (j = 0; j < n; ++j)
            x[j] = synet_act_gelu(x[j]);
        break;
    default:
        break;
    }
}

#endif
