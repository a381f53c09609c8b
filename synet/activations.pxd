# cython: language_level=3
"""The 11 activations of Simd's Synet family (SPEC section 2) as inline nogil C functions.

One place for the formulas, shared by every op that fuses an activation (QuantizedAdd,
Deconvolution16b, ...). ``x`` is float32; ``params`` holds the activation's parameters in
Simd's order (the Python layer fills in the defaults, see ``synet._activations``):

==============  ==========================================  ============================
activation      formula                                     params (default)
==============  ==========================================  ============================
IDENTITY   0    x                                           --
RELU       1    max(0, x)                                   --
LEAKY_RELU 2    x > 0 ? x : s*x                             s (0.01)
RESTRICT   3    min(max(lo, x), hi)                         lo, hi (0, 6)
PRELU      4    x > 0 ? x : s[c]*x,  c = channel            one slope per channel
ELU        5    x >= 0 ? x : a*(exp(x) - 1)                 a (1.0)
HSWISH     6    max(min(x, sh) + sh, 0) * sc * x            sh, sc (3, 1/6)
MISH       7    x > t ? x : x*tanh(log1p(exp(x)))           t (20)
HARD_SIGM  8    max(0, min(x*sc + sh, 1))                   sc, sh (1/6, 0.5)
SWISH      9    x / (1 + exp(-s*x))                         s (1.0)
GELU      10    x * (1 + erf(x/sqrt(2))) / 2                --
==============  ==========================================  ============================

Conventions: NaN propagates through every activation (the comparisons are written so that
a NaN takes the "pass x through" branch); ELU uses expm1 and GELU erfc(-x/sqrt(2)) / 2,
which are the same formulas evaluated without cancellation. Every function is a pure
function of its arguments, so a vectorised loop and its scalar tail give the same bits.

`activate_block` applies one activation to a float32 block in place, with the switch
outside the loops so the simple activations (RELU, LEAKY_RELU, RESTRICT_RANGE, PRELU,
HSWISH, HARD_SIGMOID) vectorise. For PRELU element j of the block has the flat output
index ``first + j`` and the channel ``(first + j) // inner % channels`` (NCHW: inner = H*W;
NHWC: inner = 1).
"""

from libc.math cimport expf, expm1f, tanhf, log1pf, erfcf, fmaf

cdef enum:
    ACT_IDENTITY = 0
    ACT_RELU = 1
    ACT_LEAKY_RELU = 2
    ACT_RESTRICT_RANGE = 3
    ACT_PRELU = 4
    ACT_ELU = 5
    ACT_HSWISH = 6
    ACT_MISH = 7
    ACT_HARD_SIGMOID = 8
    ACT_SWISH = 9
    ACT_GELU = 10
    ACT_COUNT = 11


cdef inline float act_relu(float x) noexcept nogil:
    """max(0, x); NaN stays NaN."""
    return 0.0 if x < 0 else x

cdef inline float act_leaky_relu(float x, float s) noexcept nogil:
    """x > 0 ? x : s*x (also PReLU with the channel's slope)."""
    return x if x > 0 else s * x

cdef inline float act_restrict_range(float x, float lo, float hi) noexcept nogil:
    """min(max(lo, x), hi); NaN stays NaN."""
    x = lo if x < lo else x
    return hi if x > hi else x

cdef inline float act_elu(float x, float a) noexcept nogil:
    """x >= 0 ? x : a*(exp(x) - 1), with expm1."""
    return x if not x < 0 else a * expm1f(x)

cdef inline float act_hswish(float x, float shift, float scale) noexcept nogil:
    """max(min(x, shift) + shift, 0) * scale * x."""
    cdef float t = shift if x > shift else x
    t = t + shift
    t = 0.0 if t < 0 else t
    return t * scale * x

cdef inline float act_mish(float x, float threshold) noexcept nogil:
    """x > threshold ? x : x*tanh(log1p(exp(x)))."""
    return x if x > threshold else x * tanhf(log1pf(expf(x)))

cdef inline float act_hard_sigmoid(float x, float scale, float shift) noexcept nogil:
    """max(0, min(x*scale + shift, 1)); the product and sum are one fma."""
    cdef float y = fmaf(x, scale, shift)
    y = 1.0 if y > 1 else y
    return 0.0 if y < 0 else y

cdef inline float act_swish(float x, float s) noexcept nogil:
    """x / (1 + exp(-s*x))."""
    return x / (1.0 + expf(-s * x))

cdef inline float act_gelu(float x) noexcept nogil:
    """x*(1 + erf(x/sqrt(2)))/2, evaluated as x*erfc(-x/sqrt(2))/2."""
    return 0.5 * x * erfcf(x * -0.70710678118654752440)


cdef inline float activate(float x, int act, const float* params, Py_ssize_t channel) noexcept nogil:
    """One value: Activate(x) for activation `act` (ACT_*) with `params` (see the table).

    `channel` selects PRELU's slope (params[channel]); the other activations ignore it.
    An unknown `act` returns x.
    """
    if act == ACT_RELU:
        return act_relu(x)
    if act == ACT_LEAKY_RELU:
        return act_leaky_relu(x, params[0])
    if act == ACT_RESTRICT_RANGE:
        return act_restrict_range(x, params[0], params[1])
    if act == ACT_PRELU:
        return act_leaky_relu(x, params[channel])
    if act == ACT_ELU:
        return act_elu(x, params[0])
    if act == ACT_HSWISH:
        return act_hswish(x, params[0], params[1])
    if act == ACT_MISH:
        return act_mish(x, params[0])
    if act == ACT_HARD_SIGMOID:
        return act_hard_sigmoid(x, params[0], params[1])
    if act == ACT_SWISH:
        return act_swish(x, params[0])
    if act == ACT_GELU:
        return act_gelu(x)
    return x


cdef inline void activate_block(float* x, Py_ssize_t n, int act, const float* params,
                                Py_ssize_t first, Py_ssize_t inner, Py_ssize_t channels) noexcept nogil:
    """x[j] = Activate(x[j]) for j < n, in place; one loop per activation.

    For PRELU, x[j] is flat output element ``first + j``, of channel
    ``(first + j) // inner % channels``; the other activations ignore first/inner/channels.
    """
    cdef Py_ssize_t j, k, stop, c
    cdef float p0, p1
    if act == ACT_IDENTITY:
        return
    if act == ACT_PRELU:
        if channels <= 1:
            p0 = params[0]
            for j in range(n):
                x[j] = act_leaky_relu(x[j], p0)
            return
        j = 0
        while j < n:  # one run per channel segment, each a vectorisable loop
            c = ((first + j) // inner) % channels
            stop = min(n, j + inner - (first + j) % inner)
            p0 = params[c]
            for k in range(j, stop):
                x[k] = act_leaky_relu(x[k], p0)
            j = stop
        return
    p0 = params[0] if act != ACT_RELU and act != ACT_GELU else 0.0
    p1 = params[1] if act == ACT_RESTRICT_RANGE or act == ACT_HSWISH or act == ACT_HARD_SIGMOID else 0.0
    if act == ACT_RELU:
        for j in range(n):
            x[j] = act_relu(x[j])
    elif act == ACT_LEAKY_RELU:
        for j in range(n):
            x[j] = act_leaky_relu(x[j], p0)
    elif act == ACT_RESTRICT_RANGE:
        for j in range(n):
            x[j] = act_restrict_range(x[j], p0, p1)
    elif act == ACT_ELU:
        for j in range(n):
            x[j] = act_elu(x[j], p0)
    elif act == ACT_HSWISH:
        for j in range(n):
            x[j] = act_hswish(x[j], p0, p1)
    elif act == ACT_MISH:
        for j in range(n):
            x[j] = act_mish(x[j], p0)
    elif act == ACT_HARD_SIGMOID:
        for j in range(n):
            x[j] = act_hard_sigmoid(x[j], p0, p1)
    elif act == ACT_SWISH:
        for j in range(n):
            x[j] = act_swish(x[j], p0)
    elif act == ACT_GELU:
        for j in range(n):
            x[j] = act_gelu(x[j])
