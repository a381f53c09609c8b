"""QuantizedAdd planning: argument checks, the broadcast walk, the constants and the kernel choice (pure Python).

The kernels (synet/src/quantized_add.c) compute, per output element o of quantisation channel c:

    x' = (x - zero[c]) * scale[c]      (UINT8 / INT8 operand; FLOAT32 is used as is)
    value = Activate(a' + b')
    dst = clamp(round_half_even(value / dst_scale[c]) + dst_zero[c], lo, hi)   (UINT8 / INT8 output)

One channel when every scale and zero point is per tensor; with per-axis ones, the channels run
along one output axis.
"""

from __future__ import annotations

import array
import dataclasses
import math
import numbers
import sys

import numpy as np

from ._activations import activation_params
from ._arrays import as_array, from_torch, mutable_array_like, native
from ._types import Activation, DataType, as_activation, as_data_type, dtype_or_none

IO_DTYPES = {DataType.FLOAT32: np.dtype(np.float32), DataType.UINT8: np.dtype(np.uint8),
             DataType.INT8: np.dtype(np.int8)}
ZERO_RANGES = {DataType.UINT8: (0, 255), DataType.INT8: (-128, 127)}
# A quantised output's dst_scale outside [2**-100, 2**100]: its outputs' values a' + b' may lie beyond float32's
# range (a' up to 255 * 3.4e38) or in its subnormal range, where the float64 sum's rounding to float32 loses
# the value / dst_scale the output needs. There the float64 path sums the operands times a power of two that
# brings dst_scale to [1, 2) (exact) and quantises with the scaled dst_scale, for the activations that commute
# with that scaling (_value_exponent, _scaled_path); the float32 paths do not run.
DST_SCALE_RANGE = (2.0**-100, 2.0**100)
SCALING_ACTIVATIONS = (Activation.IDENTITY, Activation.RELU, Activation.LEAKY_RELU, Activation.PRELU)
MAX_SIZE = 2**62
LUT_MIN = 1 << 17        # output elements from which 1-byte operands and output use a lookup table
STREAM_MIN = 1 << 22     # 1-byte output elements from which the folded kernel streams its stores
# Largest worst-case error (in output steps) of the float32 paths: they are then exact wherever the
# exact value lies more than 1e-3 from a rounding tie.
FOLDED_MAX_ERROR = 2.5e-4
GENERIC, FOLDED, LOOKUP = 0, 1, 2
# Per-axis channels shorter than LANES_INNER_MAX (an inner axis, e.g. NHWC's channels) run on per-position
# constants of one period (nchan * chan_inner outputs, 84 bytes each) instead of channel by channel, when
# the period is at most LANES_PERIOD_MAX or the channels are very short (runs of under 8 outputs cost far
# more than large tables). Measured crossover (u8 [1,*,256,inner], avx512): inner 64, or a 16 K period.
MAX_RANK = 32  # dimensions NumPy's broadcast_shapes takes (it raises RuntimeError past them)
LANES_INNER_MAX = 64
LANES_PERIOD_MAX = 1 << 14
LANES_SHORT = 8
LANE_DTYPES = {"a_scale": np.float64, "b_scale": np.float64,
               "a_zero": np.int32, "b_zero": np.int32,
               "folded_in_doubles": np.int32}  # the others float32, as in synet_qadd_consts


@dataclasses.dataclass(frozen=True, eq=False)
class QuantizedAddPlan:
    """Everything the kernels need, as Python values; synet/_quantized_add.pyx makes the C plan of it."""

    key: tuple
    a_type: DataType
    b_type: DataType
    dst_type: DataType
    a_shape: tuple
    b_shape: tuple
    out_shape: tuple
    size: int
    act: Activation
    act_params: np.ndarray      # float32
    prelu_inner: int
    prelu_channels: int
    mode: int
    float_values: bool
    consts: dict                # field of synet_qadd_consts -> float64 / int64 array of nchan values
    nchan: int
    chan_inner: int
    inner: int
    rank: int
    table: np.ndarray           # intp [3, max(rank, 1)]: outer shape, a strides, b strides
    a_scalar: bool
    b_scalar: bool
    lanes: dict | None = None   # field -> array of nchan * chan_inner values (per-position constants)

    @property
    def kernel(self) -> str:
        return ("generic", "folded", "lookup")[self.mode]


def io_type(value: object, name: str) -> DataType:
    """FLOAT32, UINT8 or INT8 from a DataType, a name or a NumPy dtype; ValueError naming `name` otherwise."""
    try:
        data_type = as_data_type(value, name)
    except ValueError:
        dtype = dtype_or_none(value) if not isinstance(value, str) else None
        got = dtype if dtype is not None else repr(value)
        raise ValueError(f"{name}: expected FLOAT32, UINT8 or INT8, got {got}") from None
    if data_type not in IO_DTYPES:
        raise ValueError(f"{name}: expected FLOAT32, UINT8 or INT8, got {data_type.name}")
    return data_type


def shape_of(value: object, name: str) -> tuple[int, ...]:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = (value,)
    try:
        dims: tuple = tuple(value)  # type: ignore[call-overload, arg-type]
    except TypeError:
        raise TypeError(f"{name}: expected a sequence of ints, got {value!r}") from None
    for dim in dims:
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
            raise TypeError(f"{name}: expected a sequence of ints, got {value!r}")
        if dim < 0:
            raise ValueError(f"{name}: expected dimensions >= 0, got {dims}")
    if len(dims) > 64:
        raise ValueError(f"{name}: expected at most 64 dimensions, got {len(dims)}")
    size = math.prod(int(d) for d in dims)
    if size >= MAX_SIZE:
        raise ValueError(f"{name}: {dims} holds {size} elements, too many for 64-bit sizes")
    return tuple(int(d) for d in dims)


def _scale(value: object, name: str) -> float:
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
        try:
            scale = float(value)
        except OverflowError:   # (an int or Fraction beyond float64's range: not finite)
            scale = math.inf
        if math.isfinite(scale) and scale > 0:
            return scale
    raise ValueError(f"{name}: expected a finite number > 0, got {value!r}")


def _zero(value: object, name: str, data_type: DataType) -> int:
    lo, hi = ZERO_RANGES[data_type]
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and lo <= value <= hi:
        return int(value)
    raise ValueError(f"{name}: expected an int in [{lo}, {hi}] ({data_type.name}), got {value!r}")


def _values(value: object, name: str, check) -> tuple[list, bool]:
    """(values, per_axis): a scalar (a number, a 0-d array or a one-element 1-D array: per tensor, as
    NumPy broadcasting and onnxruntime's QLinear ops read it), or a 1-D sequence checked element by
    element."""
    value = from_torch(value, name)
    if mutable_array_like(value):   # (an array.array, a memoryview, an object with __array__: read as NumPy does)
        value = np.array(value)
    if isinstance(value, (np.ndarray, list, tuple)):
        try:  # a list keeps its items as they are (no conversion of them all to one dtype)
            array = np.asarray(value, dtype=object if not isinstance(value, np.ndarray) else None)
        except (ValueError, TypeError):
            raise ValueError(f"{name}: expected a number or a non-empty 1-D array (per axis), got {value!r:.80}") \
                from None
        if array.ndim > 1 or array.size == 0:
            raise ValueError(f"{name}: expected a number or a non-empty 1-D array (per axis), got shape "
                             f"{array.shape}")
        # (a list's 0-d arrays, such as a list of 0-d tensors' values, are read as their numbers)
        items = array.reshape(-1).tolist() if array.dtype != object else \
            [v[()] if isinstance(v, np.ndarray) and v.ndim == 0 else v for v in array.reshape(-1)]
        values = [check(v.item() if isinstance(v, np.generic) else v, name if array.ndim == 0 else f"{name}[{i}]")
                  for i, v in enumerate(items)]
        return values, len(values) > 1
    return [check(value, name)], False


def _quantisation(name: str, data_type: DataType, scale: object, zero: object, shape: tuple, out_rank: int,
                  axis: int, per_axis: dict) -> tuple[list, list]:
    """Checked scale and zero lists of one tensor (length 1, or its size along `axis`, > 1); per-axis ones
    record their output axis in `per_axis` (name -> (output axis, length))."""
    if (type(scale) is float or type(scale) is int) and type(zero) is int:  # the usual call: no per-axis analysis
        lo, hi = ZERO_RANGES[data_type]
        if 0 < scale <= sys.float_info.max and lo <= zero <= hi:   # (an int beyond float64's: the checks below)
            return [float(scale)], [zero]
    scales, scale_axis = _values(scale, f"{name}_scale", _scale)
    zeros, zero_axis = _values(zero, f"{name}_zero", lambda v, n: _zero(v, n, data_type))
    for values, param, is_axis in ((scales, f"{name}_scale", scale_axis), (zeros, f"{name}_zero", zero_axis)):
        if not is_axis:
            continue
        rank = len(shape)
        if not -rank <= axis < rank:
            raise ValueError(f"{param}: per-axis values need axis in [-{rank}, {rank}) of {name}'s shape {shape}, "
                             f"got axis {axis}")
        own = axis % rank
        if len(values) != shape[own]:
            raise ValueError(f"{param}: expected {shape[own]} value{'s' if shape[own] != 1 else ''} ({name}'s "
                             f"size along axis {own} of {shape}) or one (per tensor), got {len(values)}")
        per_axis[param] = (own + out_rank - rank, len(values))
    return scales, zeros


def _geometry(a_shape: tuple, b_shape: tuple, out_shape: tuple):
    """(inner, a_scalar, b_scalar, table, rank) of the broadcast walk; table = [shape, a_strides, b_strides].

    Dimensions of size 1 in the output are dropped, adjacent dimensions along which both operands stay
    contiguous (or both stay broadcast) are merged; the innermost merged dimension is the row.
    """
    rank = len(out_shape)
    a_full = (1,) * (rank - len(a_shape)) + a_shape
    b_full = (1,) * (rank - len(b_shape)) + b_shape

    def strides(shape):
        result, step = [], 1
        for dim in reversed(shape):
            result.append(0 if dim == 1 else step)
            step *= dim
        return result[::-1]

    sa, sb = strides(a_full), strides(b_full)
    dims = [(n, sa[d], sb[d]) for d, n in enumerate(out_shape) if n != 1]
    merged: list[tuple[int, int, int]] = []  # innermost first
    for n, da, db in reversed(dims):
        if merged:
            m, ta, tb = merged[-1]
            if da == ta * m and db == tb * m:
                merged[-1] = (n * m, ta, tb)
                continue
        merged.append((n, da, db))
    if not merged:
        return 1, False, False, np.zeros((3, 1), dtype=np.intp), 0
    inner, ta, tb = merged[0]
    outer = merged[:0:-1]  # outermost first
    table = np.zeros((3, max(len(outer), 1)), dtype=np.intp)
    for d, (n, da, db) in enumerate(outer):
        table[:, d] = (n, da, db)
    return inner, ta == 0, tb == 0, table, len(outer)


def _folded(sa: float, za: int, sb: float, zb: int, ds: float, dz: int):
    """(ka, kb, kc) of the folded float32 kernel, or None when its error bound is too large."""
    ka, kb = sa / ds, sb / ds
    kc = dz - za * ka - zb * kb
    if not (ka < 1e30 and kb < 1e30 and abs(kc) < 1e30):
        return None
    if min(ka, kb) < 2.0**-100:  # the vector kernels scale ka, kb by down to 2**-24 and need them normal
        return None
    # |fl(a*fka + fl(b*fkb + fkc)) - (a*ka + b*kb + kc)| for |a|, |b| <= 255 and the |q| <= 256 that
    # matter: rounding of ka, kb, kc, of the inner and of the outer fma (u = 2**-24)
    bound = (2 * 255 * ka + 2 * 255 * kb + 2 * abs(kc) + 256) * 2.0**-24 * 1.01
    return (ka, kb, kc) if bound <= FOLDED_MAX_ERROR else None


def _ulp_exponent(x: float) -> float:
    """The exponent of the last significant bit of x, a float32 value (inf for 0)."""
    if x == 0:
        return math.inf
    return max(math.frexp(x)[1] - 24, -149)


def _folded_in_doubles(ka: float, kb: float, kc: float) -> bool:
    """Whether both fmas of the folded formula, fma(a, ka, fma(b, kb, kc)) with |a|, |b| <= 255, are exact
    sums in float64 (then one float64 sum rounded to float32 is the fma): a byte times a float32 has <= 32
    significant bits, and sums of multiples of 2^e below 2^(e + 53) are exact. The inner result, rounded
    to float32, is a multiple of 2^e1 like the exact sum it rounds."""
    ka, kb, kc = array.array("f", (ka, kb, kc))   # rounded to float32
    e1 = min(_ulp_exponent(kb), _ulp_exponent(kc))
    e2 = min(_ulp_exponent(ka), e1)
    m1 = 255.0 * abs(kb) + abs(kc)
    m2 = 255.0 * abs(ka) + m1 * (1.0 + 2.0**-23)
    return e1 != math.inf and m1 < 2.0 ** (e1 + 53) and m2 < 2.0 ** (e2 + 53)


def _extreme_dst_scale(ds: float, dst_type: DataType) -> bool:
    """Whether a quantised output's dst_scale lies outside DST_SCALE_RANGE."""
    return dst_type != DataType.FLOAT32 and not DST_SCALE_RANGE[0] <= ds <= DST_SCALE_RANGE[1]


def _value_exponent(ds: float, act: Activation, dst_type: DataType) -> int:
    """The power of two 2**k the float64 path scales a' + b' by (DST_SCALE_RANGE): k = 0, or the k that brings
    dst_scale to [1, 2). Exact either way, so the same bits wherever the values stay in float32's normal range."""
    if act not in SCALING_ACTIVATIONS or not _extreme_dst_scale(ds, dst_type):
        return 0
    return 1 - math.frexp(ds)[1]


def _scaled_path(sa: float, sb: float, ds: float, k: int) -> tuple[float, float, float]:
    """(a_scale, b_scale, 1 / dst_scale) of the float64 path in the frame 2**k (_value_exponent; a float32
    operand's scale is 1), each operand scale at most 2**700, so that 255 * 2**700 and 2**128 * 2**700 stay
    finite (no inf * 0, no inf - inf). An operand whose scale passes 2**700 while the other's is more than 2**600
    below it is capped there: a nonzero value of it (>= 2**700 * 2**-k dst_scale) saturates the output whatever
    the other adds. Two within 2**600 of each other (they may cancel) are lowered together by the same power of
    two instead, and so is dst_scale: their ratio, and an exact 0, is kept; a nonzero sum of them is at least
    2**(100 - 53) output steps there, and saturates. k = 0: the scales as they are."""
    if k == 0:
        return sa, sb, 1.0 / ds
    ea, eb = math.frexp(sa)[1] + k, math.frexp(sb)[1] + k
    top = max(ea, eb)
    inv = 1.0 / math.ldexp(ds, k)                      # in (0.5, 1]
    if top <= 700:
        return math.ldexp(sa, k), math.ldexp(sb, k), inv
    if min(ea, eb) >= top - 600:
        down = top - 700
        return math.ldexp(sa, k - down), math.ldexp(sb, k - down), math.ldexp(inv, down) if down < 1000 else math.inf
    # (the other, if past 2**690 itself, at 2**690: it saturates too, and 255 * 2**690 cannot cancel 2**700)
    capped = [2.0**700 if e == top else 2.0**690 if e > 690 else math.ldexp(s, k) for s, e in ((sa, ea), (sb, eb))]
    return capped[0], capped[1], inv


def _float_values_ok(a_type, sa, za, b_type, sb, zb, act, params, dst_type, ds) -> bool:
    """Whether a' + b' may be summed in float32: its worst-case error stays below FOLDED_MAX_ERROR output
    steps for a quantised output (exact away from ties), below 5e-7 for a float32 one (1e-6 relative,
    with room for the final roundings). Each quantised operand's float32 product is within 2**-24 |x'|
    of the exact one; the sum, the activation (slope <= 1 here) and the quantisation add a few roundings."""
    if _extreme_dst_scale(ds, dst_type):
        return False
    slope_ok = act in (Activation.LEAKY_RELU, Activation.PRELU) and np.abs(params).max() <= 1
    if act not in (Activation.IDENTITY, Activation.RELU, Activation.RESTRICT_RANGE) and (
            dst_type == DataType.FLOAT32 or not slope_ok):
        return False
    spread = 0.0
    for data_type, scale, zero in ((a_type, sa, za), (b_type, sb, zb)):
        if data_type != DataType.FLOAT32:
            if not 1e-30 < scale < 1e30:
                return False
            lo, hi = ZERO_RANGES[data_type]
            spread += max(zero - lo, hi - zero) * scale
    error = spread * 2.0**-24 * 1.01
    if dst_type != DataType.FLOAT32:
        return error / ds + 4 * 256 * 2.0**-24 <= FOLDED_MAX_ERROR
    return error <= 5e-7


def broadcast_shapes(a_shape: tuple, b_shape: tuple, a_name: str, b_name: str) -> tuple[int, ...]:
    """The shape two operands broadcast to (NumPy's rules); ValueError naming the parameter otherwise."""
    for name, shape in ((a_name, a_shape), (b_name, b_shape)):
        if len(shape) > MAX_RANK:   # (NumPy raises RuntimeError past them)
            raise ValueError(f"{name}: expected at most {MAX_RANK} dimensions (NumPy's broadcasting), "
                             f"got {len(shape)}")
    try:
        return tuple(int(d) for d in np.broadcast_shapes(a_shape, b_shape))
    except ValueError:
        raise ValueError(f"{b_name}: expected a shape that broadcasts with {a_name}'s {tuple(a_shape)} "
                         f"(NumPy rules), got {tuple(b_shape)}") from None


def plan(a_shape, a_type, a_scale, a_zero, b_shape, b_type, b_scale, b_zero, act_type, act_params, dst_type,
         dst_scale, dst_zero, axis=1) -> QuantizedAddPlan:
    """Check init's arguments (ValueError / TypeError naming the parameter) and plan the add."""
    a_shape = shape_of(a_shape, "a_shape")
    b_shape = shape_of(b_shape, "b_shape")
    a_type = io_type(a_type, "a_type")
    b_type = io_type(b_type, "b_type")
    dst_type = io_type(dst_type, "dst_type")
    out_shape = broadcast_shapes(a_shape, b_shape, "a_shape", "b_shape")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis: expected an int, got {type(axis).__name__}")
    act = as_activation(act_type, "act_type")
    channels = out_shape[1] if len(out_shape) >= 2 else 1
    params = activation_params(act, act_params, channels, "act_params")
    rank = len(out_shape)
    per_axis: dict = {}
    quant = {}
    for name, data_type, scale, zero, shape in (("a", a_type, a_scale, a_zero, a_shape),
                                                ("b", b_type, b_scale, b_zero, b_shape),
                                                ("dst", dst_type, dst_scale, dst_zero, out_shape)):
        if data_type == DataType.FLOAT32:  # scale and zero of a float tensor are ignored
            quant[name] = ([1.0], [0])
        else:
            quant[name] = _quantisation(name, data_type, scale, zero, shape, rank, int(axis), per_axis)
    out_axes = {out_axis for out_axis, _ in per_axis.values()}
    if len(out_axes) > 1:
        raise ValueError(f"axis: the per-axis scales and zero points ({', '.join(per_axis)}) must run along one "
                         f"output axis, got output axes {sorted(out_axes)}")
    size = math.prod(out_shape)
    if size >= MAX_SIZE:
        raise ValueError(f"b_shape: the broadcast shape {out_shape} has too many elements")
    if per_axis:
        out_axis = out_axes.pop()
        nchan, chan_inner = out_shape[out_axis], math.prod(out_shape[out_axis + 1:])
    else:
        nchan, chan_inner = 1, 1

    def per_channel(values):
        return values * nchan if len(values) == 1 else values  # a tensor's length-1 axis broadcasts

    sa, za = map(per_channel, quant["a"])  # type: ignore[misc]
    sb, zb = map(per_channel, quant["b"])
    ds, dz = map(per_channel, quant["dst"])
    fields: dict[str, list] = {f: [] for f in ("a_scale", "b_scale", "fa_scale",
                                               "fa_scale_low", "fb_scale", "fb_scale_low", "a_zero", "b_zero",
                                               "q_pre", "q_inv", "q_zero", "ka", "kb", "kc", "lo",
                                               "folded_in_doubles")}
    float_values = all(_float_values_ok(a_type, sa[c], za[c], b_type, sb[c], zb[c], act, params, dst_type, ds[c])
                       for c in range(nchan))
    one_byte = DataType.FLOAT32 not in (a_type, b_type, dst_type)  # any mix of UINT8 and INT8
    folded = [_folded(sa[c], za[c], sb[c], zb[c], ds[c], dz[c]) for c in range(nchan)] \
        if one_byte and a_type == b_type == dst_type and act in (Activation.IDENTITY, Activation.RELU) else [None]
    use_folded = all(f is not None for f in folded)
    qmin = ZERO_RANGES.get(dst_type, (0, 0))[0]
    for c in range(nchan):
        a_scale, b_scale, inv = _scaled_path(sa[c], sb[c], ds[c], _value_exponent(ds[c], act, dst_type))
        fa = float(np.float32(sa[c])) if float_values else 0.0
        fb = float(np.float32(sb[c])) if float_values else 0.0
        pre = 2.0**64 if inv > 2.0**100 else (2.0**-64 if inv < 2.0**-100 else 1.0)
        # q_inv in float32's normal range: past it (dst_scale below 2**-190 or above 2**190) every nonzero value
        # saturates, or every finite one rounds to 0, either way; an inv / pre of 0 or inf made 0 * inf a NaN
        q_inv = min(max(inv / pre, 2.0**-126), 2.0**126)
        ka, kb, kc = folded[c] if use_folded else (0.0, 0.0, 0.0)  # type: ignore[misc]
        lo = dz[c] if act == Activation.RELU else qmin
        for name, value in (("a_scale", a_scale), ("b_scale", b_scale), ("fa_scale", fa),
                            ("fa_scale_low", sa[c] - fa if float_values else 0.0),
                            ("fb_scale", fb), ("fb_scale_low", sb[c] - fb if float_values else 0.0),
                            ("a_zero", za[c]), ("b_zero", zb[c]), ("q_pre", pre), ("q_inv", q_inv),
                            ("q_zero", dz[c]), ("ka", ka), ("kb", kb), ("kc", kc), ("lo", lo),
                            ("folded_in_doubles", int(use_folded and _folded_in_doubles(ka, kb, kc)))):
            fields[name].append(value)
    mode = GENERIC
    if use_folded:
        mode = FOLDED
    elif one_byte and act != Activation.PRELU and nchan == 1 and size >= LUT_MIN:
        mode = LOOKUP
    if act == Activation.PRELU and params.size > 1:
        prelu_channels, prelu_inner = channels, math.prod(out_shape[2:])
    else:
        prelu_channels = prelu_inner = 1
    inner, a_scalar, b_scalar, table, walk_rank = _geometry(a_shape, b_shape, out_shape)
    key = (a_shape, a_type, tuple(sa), tuple(za), b_shape, b_type, tuple(sb), tuple(zb), act, params.tobytes(),
           dst_type, tuple(ds), tuple(dz), nchan, chan_inner)
    lanes = None
    if nchan > 1 and chan_inner < LANES_INNER_MAX and (nchan * chan_inner <= LANES_PERIOD_MAX or
                                                       chan_inner < LANES_SHORT):
        lanes = {f: np.repeat(np.asarray(v, dtype=LANE_DTYPES.get(f, np.float32)), chan_inner)
                 for f, v in fields.items()}
    return QuantizedAddPlan(key, a_type, b_type, dst_type, a_shape, b_shape, out_shape, size, act, params,
                            prelu_inner, prelu_channels, mode, float_values, fields, nchan, chan_inner, inner,
                            walk_rank, table, a_scalar, b_scalar, lanes)


# The line tables of the lookup kernel: every output a function of n = wa * a' + wb * b' (operand bytes, signed
# ones plus 128), which holds when b's scale is wb / wa times a's (equal scales, power-of-two scales, ...).
LINE_WEIGHTS = ((1, 1), (1, 2), (2, 1))
LINE_BYTES = 832           # synet/src/quantized_add.h: SYNET_QADD_LINE_BYTES


def line_table(lut: np.ndarray, a_signed: bool, b_signed: bool) -> tuple[int, int, np.ndarray] | None:
    """(wa, wb, line) when each of the lookup table's 65536 outputs (lut[(a_byte << 8) | b_byte]) equals
    line[wa * a' + wb * b'] (a', b': the bytes, plus 128 when signed), checked for every pair; else None.

    With the table's rows and columns in a', b' order, the pairs of one n = wa * a' + wb * b' inside the
    256 x 256 square are consecutive steps of (wb, -wa) (wa, wb coprime, the square convex): the outputs are a
    function of n exactly when every entry equals the one a step away, a comparison of two shifted views."""
    table = lut[:65536].reshape(256, 256)
    if a_signed or b_signed:   # table[a', b']: byte ^ 0x80 is a rotation by 128
        table = np.roll(table, (128 if a_signed else 0, 128 if b_signed else 0), axis=(0, 1))
    for wa, wb in LINE_WEIGHTS:
        if np.array_equal(table[:256 - wb, wa:], table[wb:, :256 - wa]):
            line = np.zeros(LINE_BYTES, np.uint8)
            line[_line_positions(wa, wb)] = table.ravel()
            return wa, wb, line
    return None


_LINE_POSITIONS: dict[tuple[int, int], np.ndarray] = {}


def _line_positions(wa: int, wb: int) -> np.ndarray:
    """wa * a' + wb * b' for every (a', b') of the 256 x 256 square, row-major (made once per weights)."""
    positions = _LINE_POSITIONS.get((wa, wb))
    if positions is None:
        n = np.arange(256)
        positions = _LINE_POSITIONS[wa, wb] = (wa * n[:, None] + wb * n[None, :]).ravel()
    return positions


def operand(x: object, name: str) -> np.ndarray:
    """A functional form's operand: float64 becomes float32; uint8, int8, float32 as they are (in the
    machine's byte order)."""
    array = native(as_array(x, name))
    if array.dtype == np.float64:
        return np.asarray(array, dtype=np.float32, order="C")  # (ascontiguousarray makes 0-d arrays 1-d)
    if array.dtype not in (np.dtype(np.uint8), np.dtype(np.int8), np.dtype(np.float32)):
        raise ValueError(f"{name}: expected dtype uint8, int8, float32 or float64 (converted to float32), "
                         f"got {array.dtype}")
    return np.asarray(array, order="C")
