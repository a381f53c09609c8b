"""float64 references of SPEC's formulas, shared by the tests (tests/test_*.py) and the fuzz files
(tests/fuzz/fuzz_*.py): one copy of each, written from the SPEC, independently of synet's code.

- BF16: ``bf16_round`` (float32 through ml_dtypes, float64 rounded once, exactly), ``bf16_bits_by_search``
  (a slow, obviously-right search over every bfloat16 value), ``bf16_ulp``.
- Activations (SPEC §2): ``activate``, ``DEFAULTS``, ``activation_slope`` (a bound of |f'|).
- GatherElements (SPEC §4): ``gather_reference``.
- QuantizedAdd (SPEC §5, §10): ``along``, ``dequantize``, ``add_value``, ``quantize``, ``check_quantized``,
  ``check_float32``, ``check_add``.
- Transposed convolution in 1-D, 2-D and 3-D (SPEC §6, §10): ``reference_nd``, ``assert_close``.
- Inputs laid out otherwise than in C order: ``laid_out``.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from synet import Activation

BF16 = np.dtype(ml_dtypes.bfloat16)

# ---------------------------------------------------------------------------------------------
# BF16

_BF16_MAX = (2 - 2.0 ** -7) * 2.0 ** 127   # the largest finite bfloat16


def bf16_round(a) -> np.ndarray:
    """float64 values of `a` rounded once to bfloat16 (nearest-even), as synet's kernels do.

    float32 (and bfloat16, and anything else but float64) goes through float32 and ml_dtypes; a float64
    input is rounded directly from float64 (ml_dtypes would round twice, through float32): exact for every
    value, subnormals (multiples of 2**-133), overflow to ±inf and NaN included."""
    a = np.asarray(a)
    if a.dtype != np.float64:
        with np.errstate(invalid="ignore"):
            return np.asarray(a, np.float32).astype(BF16).astype(np.float64)
    with np.errstate(all="ignore"):
        _, exponent = np.frexp(a)                            # |a| in [2**(e-1), 2**e)
        quantum = np.ldexp(1.0, np.maximum(exponent, -125) - 8)   # 8 significant bits; 2**-133 below 2**-126
        rounded = np.rint(a / quantum) * quantum             # both exact in float64; rint: ties to even
        rounded = np.where(np.abs(rounded) > _BF16_MAX, np.copysign(np.inf, a), rounded)
        return np.where(np.isfinite(a), rounded, a)


def bf16_bits_by_search(d: np.ndarray) -> np.ndarray:
    """bfloat16 bits of float64 values rounded once (nearest-even), by searching the neighbours among all
    65,536 bfloat16 values: slow, and independent of ``bf16_round``'s arithmetic."""
    with np.errstate(invalid="ignore"):
        table = np.arange(1 << 16, dtype=np.uint16).view(BF16).astype(np.float64)
    keep = np.isfinite(table) & ~(np.arange(1 << 16) == 0x8000)  # drop NaN/inf and -0
    values = table[keep]
    codes = np.arange(1 << 16, dtype=np.uint16)[keep]
    order = np.argsort(values, kind="stable")
    values, codes = values[order], codes[order]
    out = np.empty(d.shape, np.uint16)
    for n, v in enumerate(d):
        if np.isnan(v):
            out[n] = 0xFFC0 if np.signbit(v) else 0x7FC0
            continue
        if v == 0:
            out[n] = 0x8000 if np.signbit(v) else 0
            continue
        biggest = values[-1]
        if abs(v) >= biggest:
            ulp = biggest - values[-2]
            over = abs(v) - biggest  # exact: abs(v) within [biggest, 2*biggest)
            if over >= ulp / 2 or np.isinf(v):  # the tie goes to the even neighbour, 2**128 = inf
                out[n] = 0xFF80 if v < 0 else 0x7F80
            else:
                out[n] = codes[-1] | (0x8000 if v < 0 else 0)
            continue
        hi = np.searchsorted(values, v, side="left")
        if values[hi] == v:
            out[n] = codes[hi]
            continue
        lo = hi - 1
        below, above = v - values[lo], values[hi] - v
        if below < above or (below == above and codes[lo] % 2 == 0):
            out[n] = codes[lo]
        else:
            out[n] = codes[hi]
        if out[n] == 0 and v < 0:  # rounding to zero keeps the sign
            out[n] = 0x8000
    return out


def bf16_ulp(values) -> np.ndarray:
    """One bfloat16 ulp at |values| (8 significant bits; the ulp of the smallest normal below it)."""
    with np.errstate(divide="ignore"):
        exponent = np.floor(np.log2(np.maximum(np.abs(np.asarray(values, np.float64)), 2.0 ** -126)))
    return 2.0 ** (exponent - 7)


# ---------------------------------------------------------------------------------------------
# Activations (SPEC §2)

DEFAULTS = {Activation.LEAKY_RELU: [0.01], Activation.RESTRICT_RANGE: [0.0, 6.0], Activation.ELU: [1.0],
            Activation.HSWISH: [3.0, 1 / 6], Activation.MISH: [20.0], Activation.HARD_SIGMOID: [1 / 6, 0.5],
            Activation.SWISH: [1.0]}

_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def _activation(act) -> Activation:
    """The enum, its value, or its snake-case name ("leaky_relu")."""
    return Activation[act.upper()] if isinstance(act, str) else Activation(act)


def _params(act, params) -> np.ndarray | None:
    """The activation's parameters as the kernels see them: float32 (SPEC §2's defaults for None)."""
    act = _activation(act)
    if params is None:
        params = DEFAULTS.get(act)
    return None if params is None else np.asarray(params, np.float32).astype(np.float64).reshape(-1)


def activate(x, act, params=None, channel_axis: int = 1) -> np.ndarray:
    """SPEC §2's activation of float64 `x`; params (float32, as the kernels take them) or None for the
    defaults. PRELU: one slope per channel along `channel_axis` (one slope for every element when a single
    slope is given or `x` has rank < 2)."""
    act = _activation(act)
    x = np.asarray(x, np.float64)
    p = _params(act, params)
    with np.errstate(all="ignore"):
        if act == Activation.IDENTITY:
            return x
        if act == Activation.RELU:
            return np.maximum(x, 0.0)
        if act == Activation.LEAKY_RELU:
            return np.where(x > 0, x, p[0] * x)
        if act == Activation.RESTRICT_RANGE:
            return np.minimum(np.maximum(p[0], x), p[1])
        if act == Activation.PRELU:
            if x.ndim >= 2 and p.size > 1:
                shape = [1] * x.ndim
                shape[channel_axis] = -1
                slope = p.reshape(shape)
            else:
                slope = p[0]
            return np.where(x > 0, x, slope * x)
        if act == Activation.ELU:
            return np.where(x >= 0, x, p[0] * np.expm1(np.minimum(x, 0.0)))
        if act == Activation.HSWISH:
            return np.maximum(np.minimum(x, p[0]) + p[0], 0.0) * p[1] * x
        if act == Activation.MISH:
            return np.where(x > p[0], x, x * np.tanh(np.log1p(np.exp(np.minimum(x, p[0])))))
        if act == Activation.HARD_SIGMOID:
            return np.maximum(0.0, np.minimum(x * p[0] + p[1], 1.0))
        if act == Activation.SWISH:
            return x / (1.0 + np.exp(-p[0] * x))
        if act == Activation.GELU:   # erfc(-z) = 1 + erf(z), without the cancellation for x << 0
            return 0.5 * x * _erfc(-x / math.sqrt(2.0))
    raise AssertionError(act)


def activation_slope(act, params=None) -> float:
    """A bound of |f'| (at least 1): how much the activation may enlarge an error of its input."""
    act = _activation(act)
    p = _params(act, params)
    if act in (Activation.LEAKY_RELU, Activation.PRELU, Activation.ELU, Activation.HARD_SIGMOID):
        return max(1.0, float(np.max(np.abs(p[:1] if act == Activation.HARD_SIGMOID else p))))
    if act == Activation.HSWISH:   # f' = sc·(2x + sh) on (-sh, sh): at most 3·sh·sc
        return max(1.0, 3 * abs(p[0] * p[1]))
    return {Activation.MISH: 1.1, Activation.SWISH: 1.1, Activation.GELU: 1.13}.get(act, 1.0)


# ---------------------------------------------------------------------------------------------
# GatherElements (SPEC §4)


def gather_reference(data, indices, axis: int) -> np.ndarray:
    """ONNX GatherElements: the sub-block of data that indices covers off the axis, negative indices
    counted from the end (which must all be in range)."""
    data, indices = np.asarray(data), np.asarray(indices).astype(np.int64)
    axis %= data.ndim
    block = tuple(slice(0, n) if d != axis else slice(None) for d, n in enumerate(indices.shape))
    n = data.shape[axis]
    assert ((indices >= -n) & (indices < n)).all()
    return np.take_along_axis(data[block], np.where(indices < 0, indices + n, indices), axis)


# ---------------------------------------------------------------------------------------------
# QuantizedAdd (SPEC §5, §10)

RANGES = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127)}
TIE_TOLERANCE = 1e-3


def along(values, ndim: int, axis: int) -> np.ndarray:
    """A scale or zero point (a number, or a 1-D array along `axis`) shaped to broadcast against an
    array of `ndim` dimensions (ONNX QuantizeLinear's per-axis meaning)."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 1:
        return v.reshape(())
    shape = [1] * ndim
    shape[axis % ndim] = v.size
    return v.reshape(shape)


def dequantize(x, scale, zero, axis: int = 1) -> np.ndarray:
    """(x − zero)·scale of a UINT8 / INT8 tensor; a FLOAT32 one as is."""
    x = np.asarray(x)
    if x.dtype in RANGES:
        return (x.astype(np.float64) - along(zero, x.ndim, axis)) * along(scale, x.ndim, axis)
    return x.astype(np.float64)


def add_value(a, b, q: dict, act=Activation.IDENTITY, params=None, axis: int = 1) -> np.ndarray:
    """Activate(a' + b') in float64; q holds a_scale, a_zero, b_scale, b_zero."""
    return activate(dequantize(a, q["a_scale"], q["a_zero"], axis) + dequantize(b, q["b_scale"], q["b_zero"], axis),
                    act, params)


def quantize(value, dst_scale, dst_zero, dtype, axis: int = 1):
    """(expected integers, near a tie) of a quantised output: clamp(rint(value / s) + z, lo, hi), NaN -> lo."""
    lo, hi = RANGES[np.dtype(dtype)]
    value = np.asarray(value, np.float64)
    with np.errstate(all="ignore"):
        q = value / along(dst_scale, value.ndim, axis)
        expected = np.where(np.isnan(q), lo, np.clip(np.rint(q) + along(dst_zero, value.ndim, axis), lo, hi))
        near_tie = np.abs(np.abs(q - np.floor(q)) - 0.5) < TIE_TOLERANCE
    return expected.astype(np.int64), near_tie


def check_quantized(got, value, dst_scale, dst_zero, axis: int = 1) -> np.ndarray:
    """A UINT8 / INT8 result within 1 of the float64 formula, exact unless within TIE_TOLERANCE of a tie
    (SPEC §5). Returns the near-tie mask."""
    assert got.dtype in RANGES, got.dtype
    expected, near_tie = quantize(value, dst_scale, dst_zero, got.dtype, axis)
    diff = np.abs(got.astype(np.int64) - expected)
    assert diff.max(initial=0) <= 1, f"off by {diff.max()}"
    bad = (diff != 0) & ~near_tie
    assert not bad.any(), (f"{bad.sum()} inexact away from ties, e.g. got {got[bad][:5]} expected "
                           f"{expected[bad][:5]}")
    return near_tie


def check_float32(got, value) -> None:
    """A FLOAT32 result within 1e-6·max(1, |value|) of the float64 formula; NaN and ±inf where it has them."""
    assert got.dtype == np.float32, got.dtype
    v = np.asarray(value, dtype=np.float64)
    g = got.astype(np.float64)
    assert np.array_equal(np.isnan(g), np.isnan(v))
    finite = np.isfinite(v) & (np.abs(v) < 3.4e38)
    assert np.array_equal(g[np.isinf(v)], v[np.isinf(v)])
    err = np.abs(g[finite] - v[finite])
    tol = 1e-6 * np.maximum(1.0, np.abs(v[finite]))
    assert (err <= tol).all(), f"max error {np.max(err / tol, initial=0)} x tolerance"


def check_add(got, a, b, q: dict, act=Activation.IDENTITY, params=None, axis: int = 1) -> None:
    """A quantized add's result (any output type) against the float64 formula."""
    value = add_value(a, b, q, act, params, axis)
    assert got.shape == value.shape, (got.shape, value.shape)
    if got.dtype in RANGES:
        check_quantized(got, value, q["dst_scale"], q["dst_zero"], axis)
    else:
        check_float32(got, value)


# ---------------------------------------------------------------------------------------------
# Transposed convolution, any number of spatial dimensions (SPEC §6, §10)


def reference_nd(x, w, bias, stride, begin, end, dilation, groups):
    """Transposed convolution in float64, channels first: x [N, C, *S], w [C, Cg_out, *K]. The output is the
    full output (positions i·stride + k·dilation) cropped by `begin` / `end` pads; a negative pad extends it
    with positions no tap reaches (output_padding is a negative end pad). Returns (result incl. bias,
    Σ|x·w| per output)."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    n, c, *size = x.shape
    cg_out, *kernel = w.shape[1:]
    dims = len(size)
    full = [s * (i - 1) + d * (k - 1) + 1 for i, k, s, d in zip(size, kernel, stride, dilation)]
    dst = [f - b - e for f, b, e in zip(full, begin, end)]
    assert min(dst, default=1) >= 1, dst
    low = [min(0, b) for b in begin]                             # the first position kept, if before 0
    span = [max(f, b + o) - lo for f, b, o, lo in zip(full, begin, dst, low)]
    out = np.zeros((n, groups, cg_out, *span))
    mag = np.zeros_like(out)
    xg = x.reshape(n, groups, c // groups, *size)
    wg = w.reshape(groups, c // groups, cg_out, *kernel)
    letters = "hwd"[:dims]
    rule = f"ngc{letters},gce->nge{letters}"
    for taps in np.ndindex(*kernel):
        where = (Ellipsis,) + tuple(slice(t * d - lo, t * d - lo + s * (i - 1) + 1, s)
                                    for t, d, s, i, lo in zip(taps, dilation, stride, size, low))
        out[where] += np.einsum(rule, xg, wg[(Ellipsis, *taps)])
        mag[where] += np.einsum(rule, np.abs(xg), np.abs(wg[(Ellipsis, *taps)]))
    crop = (slice(None), slice(None)) + tuple(slice(b - lo, b - lo + o) for b, o, lo in zip(begin, dst, low))
    out = out.reshape(n, -1, *span)[crop]
    mag = mag.reshape(n, -1, *span)[crop]
    if bias is not None:
        out = out + np.asarray(bias, np.float64).reshape((1, -1) + (1,) * dims)
    return out, mag


def deconvolution_tolerance(ref, mag, dst_bf16: bool, slope: float = 1.0, pre=None) -> np.ndarray:
    """SPEC §6: FP32 output within 1e-5·Σ|x·w| (times the activation's slope bound) plus the rounding of
    bias and activation: the FP32 rounding of the activation's input `pre` (sum + bias; half an FP32 ulp,
    times the slope bound: GELU of -2.32, an output 100x smaller than its input, is off by more than
    2e-7·|ref| from it alone) and of the output (2e-7·|ref|); a BF16 output within one BF16 ulp more."""
    ref = np.asarray(ref, np.float64)
    tolerance = 1e-5 * slope * mag + 2e-7 * np.abs(ref) + 1e-30
    if pre is not None:
        tolerance = tolerance + slope * 2.0**-24 * np.abs(np.asarray(pre, np.float64))
    if dst_bf16:
        tolerance = tolerance + bf16_ulp(ref)
    return tolerance


def assert_close(got, ref, mag, dst_bf16: bool, slope: float = 1.0, pre=None) -> None:
    """`got` (any float dtype) against the float64 reference: NaN exactly where the reference has NaN,
    ±inf exactly equal, the finite values within ``deconvolution_tolerance``."""
    got = np.asarray(got).astype(np.float64)
    ref = np.asarray(ref, np.float64)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    nan_got, nan_ref = np.isnan(got), np.isnan(ref)
    assert np.array_equal(nan_got, nan_ref), (f"NaN at {np.argwhere(nan_got & ~nan_ref)[:3].tolist()} (not in the "
                                              f"reference), missing at {np.argwhere(nan_ref & ~nan_got)[:3].tolist()}")
    infinite = np.isinf(ref)
    assert np.array_equal(got[infinite], ref[infinite]), np.argwhere(infinite & (got != ref))[:3].tolist()
    finite = np.isfinite(ref)
    pre = None if pre is None else np.asarray(pre)[finite]
    got, ref, mag = got[finite], ref[finite], np.asarray(mag)[finite]
    tolerance = deconvolution_tolerance(ref, mag, dst_bf16, slope, pre)
    bad = ~(np.abs(got - ref) <= tolerance)
    worst = np.argmax(np.abs(got - ref) / tolerance) if bad.any() else None
    assert not bad.any(), (f"{bad.sum()} of {bad.size} outside tolerance; worst at {worst}: got {got[bad][:3]}, "
                           f"expected {ref[bad][:3]}, tolerance {tolerance[bad][:3]}")


def laid_out(x, order):
    """`x`'s values in an array laid out in memory in the order `order` of its axes (padded with leading
    ones to len(order) axes): an NHWC tensor seen as NCHW for order (0, 2, 3, 1)."""
    x = np.asarray(x)
    padded = x.reshape((1,) * (len(order) - x.ndim) + x.shape)
    memory = np.ascontiguousarray(padded.transpose(order))
    return memory.transpose(np.argsort(order)).reshape(x.shape)


def off_its_element_size(shape, dtype, values=None):
    """A writeable, C-contiguous array of `shape` at an odd address (NumPy's flags: not aligned, but for bytes), holding
    `values` if given. C kernels load and store whole elements; UBSan holds such an access to be undefined."""
    n = math.prod(shape) if isinstance(shape, tuple) else shape
    out = np.frombuffer(bytearray(n * np.dtype(dtype).itemsize + 1), dtype, n, offset=1).reshape(shape)
    assert out.ctypes.data % 2 and out.flags.writeable and out.flags.c_contiguous
    assert np.dtype(dtype).itemsize == 1 or not out.flags.aligned
    if values is not None:
        out[...] = values
    return out
