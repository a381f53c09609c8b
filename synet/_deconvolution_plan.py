"""Deconvolution planning (1-D, 2-D, 3-D): argument checks, the phase decomposition and every table the
kernels read (pure Python; synet/_deconvolution.pyx turns a plan into the C struct of
synet/src/deconvolution.h).

Every geometry is planned as 3-D (2-D: depth 1; 1-D: depth and height 1). Output pixel
o = r - pad_begin + stride * j of an axis belongs to phase r < stride; it takes kernel tap k when
(r - k * dilation) % stride == 0, from input i = j + (r - k * dilation) // stride. Each phase (rz, ry, rx)
is a stride-1 convolution over its taps: an implicit GEMM over (taps x input channels).
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any, NamedTuple

import numpy as np

from ._activations import activation_params
from ._arrays import as_array, native, round_from_float64
from ._conv_params import ConvParams, ConvParams3d, deconvolution_size
from ._types import (
    BFLOAT16,
    Activation,
    Compatibility,
    DataType,
    TensorFormat,
    as_activation,
    as_compatibility,
    as_data_type,
    as_format,
)

GEMM, DEPTHWISE = 1, 2
MICRO_FP32, MICRO_BF16, MICRO_AMX = 0, 1, 2
MICRO_NAMES = {MICRO_FP32: "fp32", MICRO_BF16: "avx512bf16", MICRO_AMX: "amx-bf16"}
# input channels per group in the padded image are a multiple of these: AMX tiles take 32 at a time, the
# vdpbf16ps kernel two pairs (4 channels), the FP32 kernel one pair
LANES_STRIP = 4    # output channels of a strip of a lanes plan's packed weights (deconvolution.h)
LANES_TAPS = 64    # the most kernel positions of a lanes plan
LANES_ROW_MIN = 32  # output columns per x phase from which a plan is a lanes plan (two vectors a phase)
CHANNEL_MULTIPLE = {MICRO_FP32: 2, MICRO_BF16: 4, MICRO_AMX: 32}
BLOCK = 64          # output channels per packed weight block (SYNET_DECONV_BLOCK)
AMX_BLOCK = 32
AMX_RUN = 8         # AMX units a task runs (one unit's stores overlap the next one's tile arithmetic)
# plans of few output channels a group use the planar kernel up to these input channels a group, for output
# rows of at least the key's columns (narrower: the GEMM). 1-4 output channels, Zen 5, 1 thread, planar against
# the GEMM, k4 s2 / k3 s1 / k2 s2, NCHW (NHWC): rows of >= 64, 16..1024 -> 1..3 1.1-3.6x (1.4-4.1x) faster,
# 512 -> 4 (1.29x), 1024 -> 4 1.13x (0.73-0.82x); of 32-63, 256 -> 1 1.4-1.7x (2.2x), 256 -> 2 1.3x (1.55x),
# 64 -> 3 1.25x (1.36x), 64 -> 4 1.05-1.3x (1.18x), 256 -> 4 0.9-0.97x (1.1x); of 16-31, 16 -> 1 1.3-2.0x
# (1.37x), 64 -> 1 0.78-1.66x, 16 -> 4 0.51-1.2x.
# 5-32 output channels (planar: blocks of PLANAR_OUT_MAX, a task each), channels first only, by blocks: Zen 4,
# 1 thread, the same three kernels, the slowest of them: rows of >= 64, 16 -> 8 1.26-1.5x, 32 -> 8 1.03x, 8 -> 12
# 1.22-1.45x, 4 -> 16 1.32-1.56x, 8 -> 16 0.94x, 4 -> 32 1.08-2.3x; of 32-63, 8 -> 8 1.33-1.75x, 16 -> 8 1.02x,
# 4 -> 12 1.4-1.97x, 8 -> 12 1.06x, 4 -> 16 1.14-1.65x, 4 -> 32 0.92x; of 16-31, 4 -> 6 0.90x; channels last,
# where the GEMM stores its channel vectors as they lie, planar 4 -> 8 1.0-1.14x, 8 -> 16 0.28-0.35x.
# Rows of 16-31 (since a row's last outputs go by masked stores; Zen 4, the slowest of the three kernels at 16
# and 24 columns): 8 -> 2 1.26x, 16 -> 2 1.03x, 8 -> 3 1.10x, 16 -> 3 0.80x, 4 -> 4 1.28x, 8 -> 4 0.90x, 2 -> 6,
# 8 1.51x, 4 -> 6, 8 0.88-0.90x
PLANAR_MAX_IN = {64: {1: 1024, 2: 1024, 3: 1024, 4: 512, **dict.fromkeys(range(5, 9), 16),
                      **dict.fromkeys(range(9, 13), 8), **dict.fromkeys(range(13, 33), 4)},
                 32: {1: 1024, 2: 256, 3: 64, 4: 64, **dict.fromkeys(range(5, 9), 8),
                      **dict.fromkeys(range(9, 17), 4)},
                 16: {1: 16, 2: 8, 3: 8, 4: 4, **dict.fromkeys(range(5, 9), 2)}}
# Kernel 2, stride 2 along x (dilation 1): both x phases of a planar pair read the same sources, loaded once
# for both (deconvolution_depthwise.c: same_pair_sums), so the planar kernel wins more often, narrow rows too.
# Zen 4, 1 thread, NCHW, planar against the GEMM, padding 0 and 1 alike (rows of 8-15 / 16-31 / 32-63 / >= 64
# columns): 8 -> 1 2.6x / 2.8x, 32 -> 1 1.25x / 1.48x, 16 -> 2 1.34x / 1.46x, 8 -> 3 1.81x, 16 -> 4 0.95x /
# 1.05x, 8 -> 8 1.25x / 1.45x / 2.07x, 16 -> 8 0.64x / 0.70x / 1.10-1.43x / 1.66x, 32 -> 8 ... / 0.83-1.18x /
# 1.21-1.37x, 8 -> 12 1.00x / 1.11x / 1.62x, 16 -> 12 ... / 0.80-1.15x / 1.21-1.31x, 4 -> 16 1.25x / 1.32x,
# 8 -> 16 0.82x / 0.92x / 1.30x, 16 -> 16 ... / 0.63-0.89x / 0.99-1.03x; wider rows and <= 4 output
# channels: also PLANAR_MAX_IN (the larger of the two)
PLANAR_MAX_IN_PAIRED = {8: {1: 32, 2: 16, 3: 8, 4: 8, **dict.fromkeys(range(5, 9), 8),
                            **dict.fromkeys(range(9, 17), 4)},
                        16: {1: 64, 2: 32, 3: 16, 4: 16, **dict.fromkeys(range(5, 13), 8),
                             **dict.fromkeys(range(13, 17), 4)},
                        32: {**dict.fromkeys(range(5, 9), 16), **dict.fromkeys(range(9, 17), 8)},
                        64: {**dict.fromkeys(range(5, 9), 32), **dict.fromkeys(range(9, 13), 16),
                             **dict.fromkeys(range(13, 17), 8)}}
# Channels last, 5-8 output channels a group (two blocks, each storing its outputs dst_c apart): the planar kernel
# up to this many input channels a group (and PLANAR_MAX_IN's), where the GEMM sums 1-2 channel pairs a tap. AMD
# Zen 1 (AVX2), 1 thread, planar against the GEMM, rows of 16-256 columns, k3 s1 / k4 s2 / k2 s2: 1..4 -> 5..8
# 1.6-7.4x faster (1 -> 5, 4 -> 8 on 128 x 128: 5.8x, 2.1x); Zen 4 (AVX-512), 4 -> 8 1.0-1.14x. More input
# channels: 16 -> 8 0.96x, 8 -> 16 1.45x, 2 -> 16 0.75-1.45x, 2 -> 32 0.33-1.0x by shape (the GEMM's vectors fill).
PLANAR_NHWC_MAX_IN = 4
# ... and 9 to this many output channels of one input channel, stride 1 along x, rows of >= 32 columns (Zen 1:
# 1 -> 9, 12, 16 k3 s1 1.5-3.7x; rows of 16 0.67x; stride 2, 1 -> 16: 0.55-1.3x)
PLANAR_NHWC_WIDE = 16
# ... but for more output channels than one block (PLANAR_OUT_MAX), only on images of at least this many
# outputs a channel (8 -> 8 on 4 x 4 inputs: planar 4.1 us, the GEMM 3.7; 6 x 4 the same; 4 x 8 4.0 / 4.3)
PAIRED_BLOCKS_MIN = 96
PLANAR_BAND = 16    # output rows of a planar plane's task
PLANAR_OUT_MAX = 4  # output channels a planar task sums at once (a group's in blocks: SYNET_PLANAR_OUT_MAX)
PACK_CHANNELS = 16  # output channels a depthwise / planar weight packing unit rounds (SYNET_PACK_CHANNELS)
MAX_PLAN = 1 << 24  # table entries (phases x taps, rows, columns) a geometry may need
STREAM_MIN = 4 << 20  # output bytes from which whole lines of it bypass the caches
WIDE_MAX = 512 << 10  # bytes of one channel block's float32 weights up to which the FP32 micro-kernel gets them
FLOAT32 = np.dtype(np.float32)
UINT16 = np.dtype(np.uint16)
AXES = ("z", "y", "x")
BF16_SOFT = int(Compatibility.BF16_SOFT)
NO_TABLE = np.zeros(0, np.int64)
NO_TABLE.flags.writeable = False
# a table longer than this is made and joined as a NumPy array (shorter: Python ints, faster than NumPy's fixed
# costs): a plan's tap offsets (a planar family of 64 planes has 1024), border flags
LONG_TABLE = 64
EMPTY_TABLE = (0, 1)   # the bounds of an empty table: the leading 0 of the table data
AMX_TABLES = ("unit_s0", "unit_s1", "unit_ob", "run_unit0", "seg_aoff", "seg_doff", "seg_m", "seg_phase")
BORDER_TABLES = ("border_z", "border_y", "border_x")
SIZED_TABLES = ("tap_offsets", "col_first", "col_count")   # lengths fixed by the family, values by the sizes
FAMILY_TABLES = ("phase_taps", "phase_tap0", "tap_kz", "tap_ky", "tap_kx", "weight_offsets", *SIZED_TABLES)
# synet_deconv_plan's tables in the order of a plan's table_bounds: the family's, then those a plan appends
TABLES = (*FAMILY_TABLES, *AMX_TABLES, *BORDER_TABLES)
# synet_deconv_plan's values in the order of a plan's family_scalars and sized_scalars (_deconvolution.pyx,
# _new_geometry, assigns them in these orders)
FAMILY_SCALARS = ("impl", "micro", "wide_weights", "lanes", "src_bf16", "dst_bf16", "nhwc", "direct", "act", "src_c",
                  "dst_c", "group", "cg_in", "cg_out", "kernel_z", "kernel_y", "kernel_x", "dilation_z", "dilation_y",
                  "dilation_x", "stride_z", "stride_y", "stride_x", "pad_front", "pad_top", "pad_left", "cg_padded",
                  "pixel_stride", "kpairs", "block_width", "weight_strip", "nblocks")
SIZED_SCALARS = ("buf_size", "batch", "src_d", "src_h", "src_w", "dst_d", "dst_h", "dst_w", "padded_d", "padded_h",
                 "padded_w", "pad_low_z", "pad_low_y", "pad_low_x", "padded_image", "nrows", "nunits", "amx_runs",
                 "ntasks", "row_run", "stream", "dst_image", "pad_rows", "nborder_x")


def pair_channels(micro: int, kpairs: int) -> np.ndarray:
    """The input channel of each packed weight position 2k + e (pair k, low half e = 0, high half e = 1):
    2k + e, except for the vdpbf16ps kernel, which packs 4 channels c .. c + 3 as (c + 2, c), (c + 3, c + 1)
    (src/deconvolution.c: pair_weights)."""
    channels = np.arange(2 * kpairs)
    if micro == MICRO_BF16:
        channels = (channels.reshape(-1, 4)[:, [2, 0, 3, 1]]).reshape(-1)
    return channels


class Geometry(NamedTuple):
    """A transposed convolution in 3-D terms (what the kernels see); `dims` 1, 2 or 3 is what the caller
    sees (2-D: depth 1; 1-D: depth and height 1). A named tuple: immutable, and built in a quarter of a
    frozen dataclass's time (each new shape's plan builds one)."""

    dims: int
    src_c: int
    src: tuple            # (d, h, w)
    dst_c: int
    dst: tuple
    kernel: tuple
    stride: tuple
    dilation: tuple
    pad_begin: tuple      # (front, top, left)
    pad_end: tuple        # (back, bottom, right)
    group: int
    activation: Activation
    src_type: DataType
    dst_type: DataType
    channels_last: bool


class DeconvolutionPlan(NamedTuple):
    """A planned deconvolution: the C plan's values (`scalars`), its tables and the shapes around it. A named
    tuple, as Geometry (a frozen dataclass took 1.3 us of each new shape's plan)."""

    conv: object              # the normalised ConvParams / ConvParams3d (None: a functional plan)
    geometry: Geometry
    batch: int
    compatibility: int
    impl: int                 # GEMM or DEPTHWISE
    micro: int                # MICRO_*
    family_scalars: tuple     # synet_deconv_plan's values of FAMILY_SCALARS (the family's, shared)
    sized_scalars: tuple      # and of SIZED_SCALARS
    table_data: np.ndarray    # every table of synet_deconv_plan, int64, one after the other
    table_bounds: tuple       # (begin, end) in table_data of each of TABLES (never empty)
    src_shape: tuple
    dst_shape: tuple
    src_dtypes: tuple         # accepted src dtypes (first: the preferred one)
    dst_dtypes: tuple
    weight_shape: tuple       # the caller's weight layout
    packed_size: int          # GEMM: uint16 elements of packed weights; depthwise / planar: float32 entries
    pack_units: int           # GEMM: group * kpairs; depthwise / planar: dst_c / PACK_CHANNELS, rounded up
    weight_steps: tuple       # (ci, co, kz, ky, kx) element steps of the caller's weight layout

    @property
    def scalars(self) -> dict:
        """Field of synet_deconv_plan -> its value."""
        return dict(zip((*FAMILY_SCALARS, *SIZED_SCALARS), (*self.family_scalars, *self.sized_scalars)))

    @property
    def tables(self) -> dict:
        """Field of synet_deconv_plan -> its table (a view of table_data)."""
        return {name: self.table_data[begin:end] for name, (begin, end) in zip(TABLES, self.table_bounds)}

    @property
    def info(self) -> str:
        if self.impl == DEPTHWISE:
            return "Depthwise fp32" if self.scalars["cg_in"] == self.scalars["cg_out"] == 1 else "Planar fp32"
        return (f"PhaseGemm {MICRO_NAMES[self.micro]}" + (" direct" if self.scalars["direct"] else "")
                + (" lanes" if self.scalars["lanes"] else ""))


_tuple_new = tuple.__new__


def _named(cls, values: tuple):
    """cls(*values) for a NamedTuple class cls and a tuple of all its fields, without the Python-level __new__
    namedtuple runs (the same object in half the time: each new shape's plan makes two)."""
    return _tuple_new(cls, values)


def _int(value: object, name: str, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name}: expected an int >= {minimum}, got {value}")
    return int(value)


def _fields(three: bool) -> tuple:
    """(axes, sizes, count fields, begin pads, end pads) of a ConvParams (2-D) or ConvParams3d."""
    axes = ("z", "y", "x") if three else ("y", "x")
    sizes = ("d", "h", "w") if three else ("h", "w")
    counts = ("src_c", "dst_c", "group") + tuple(f"src_{a}" for a in sizes) + tuple(f"dst_{a}" for a in sizes) + \
        tuple(f"{k}_{a}" for k in ("kernel", "dilation", "stride") for a in axes)
    begin = (("pad_front",) if three else ()) + ("pad_y", "pad_x")
    end = (("pad_back",) if three else ()) + ("pad_h", "pad_w")
    return axes, sizes, counts, begin, end


_FIELDS = {three: _fields(three) for three in (False, True)}


def validate(given: object) -> ConvParams | ConvParams3d:
    """A normalised copy of a ConvParams or ConvParams3d, or TypeError / ValueError naming what was expected."""
    three = isinstance(given, ConvParams3d)
    if not three and not isinstance(given, ConvParams):
        raise TypeError(f"conv: expected a synet.ConvParams, got {type(given).__name__}")
    conv: Any = given
    axes, sizes, counts, begin, end = _FIELDS[three]
    v: dict[str, int] = {}
    for f in counts:   # plain ints as they are; anything else (and its message) through _int
        value = getattr(conv, f)
        v[f] = value if type(value) is int and value >= 1 else _int(value, f"conv.{f}", 1)
    for f in begin + end:
        value = getattr(conv, f)
        v[f] = value if type(value) is int else _int(value, f"conv.{f}")
    if min(v[f] for f in begin) < 0:
        raise ValueError(f"conv.{', conv.'.join(begin)}: expected pads >= 0, got {', '.join(str(v[f]) for f in begin)}")
    for f, a in zip(end, axes):  # a negative end pad is PyTorch's output_padding
        limit = max(v[f"stride_{a}"], v[f"dilation_{a}"])
        if v[f] <= -limit:
            raise ValueError(f"conv.{f}: expected a pad > -max(stride, dilation) = {-limit}, got {v[f]}")
    src_type = as_data_type(conv.src_type, "conv.src_type")
    dst_type = as_data_type(conv.dst_type, "conv.dst_type")
    for name, t in (("conv.src_type", src_type), ("conv.dst_type", dst_type)):
        if t not in (DataType.FLOAT32, DataType.BFLOAT16):
            raise ValueError(f"{name}: expected FLOAT32 or BFLOAT16, got {t.name}")
    src_format = as_format(conv.src_format, "conv.src_format")
    dst_format = as_format(conv.dst_format, "conv.dst_format")
    if src_format != dst_format:
        raise ValueError(f"conv.dst_format: expected the src_format {src_format.name}, got {dst_format.name}")
    activation = as_activation(conv.activation, "conv.activation")
    g = v["group"]
    if v["src_c"] % g or v["dst_c"] % g:
        raise ValueError(f"conv.group: expected a divisor of src_c {v['src_c']} and dst_c {v['dst_c']}, got {g}")
    for size, a, p0, p1 in zip(sizes, axes, begin, end):
        src, dst, k, st, d = f"src_{size}", f"dst_{size}", f"kernel_{a}", f"stride_{a}", f"dilation_{a}"
        expected = deconvolution_size(v[src], v[k], v[st], v[d], v[p0], v[p1])
        if expected <= 0:
            raise ValueError(f"conv.dst_{size}: the geometry gives a dst size {expected}; expected >= 1")
        if v[dst] != expected:
            raise ValueError(f"conv.dst_{size}: expected {expected} = {v[st]}·({v[src]} − 1) + "
                             f"{v[d]}·({v[k]} − 1) + 1 − {v[p0]} − {v[p1]}, got {v[dst]}")
    fields: dict[str, Any] = dict(v, src_type=src_type, dst_type=dst_type, src_format=src_format,
                                  dst_format=dst_format, activation=activation)
    return (ConvParams3d if three else ConvParams)(**fields)


def geometry_of(conv: ConvParams | ConvParams3d, dims: int | None = None) -> Geometry:
    """The 3-D view of a validated ConvParams (2-D; `dims` 1 for conv_transpose1d) or ConvParams3d."""
    if isinstance(conv, ConvParams3d):
        return Geometry(3, conv.src_c, (conv.src_d, conv.src_h, conv.src_w), conv.dst_c,
                        (conv.dst_d, conv.dst_h, conv.dst_w), (conv.kernel_z, conv.kernel_y, conv.kernel_x),
                        (conv.stride_z, conv.stride_y, conv.stride_x),
                        (conv.dilation_z, conv.dilation_y, conv.dilation_x),
                        (conv.pad_front, conv.pad_y, conv.pad_x), (conv.pad_back, conv.pad_h, conv.pad_w), conv.group,
                        conv.activation, conv.src_type, conv.dst_type, conv.src_format == TensorFormat.NHWC)
    return Geometry(dims or 2, conv.src_c, (1, conv.src_h, conv.src_w), conv.dst_c, (1, conv.dst_h, conv.dst_w),
                    (1, conv.kernel_y, conv.kernel_x), (1, conv.stride_y, conv.stride_x),
                    (1, conv.dilation_y, conv.dilation_x), (0, conv.pad_y, conv.pad_x), (0, conv.pad_h, conv.pad_w),
                    conv.group, conv.activation, conv.src_type, conv.dst_type, conv.src_format == TensorFormat.NHWC)


def check_sizes(batch: int, geo: Geometry) -> None:
    """ValueError for a geometry whose tensors overflow 63-bit byte counts or whose tables would be
    absurdly long (building them would never return)."""
    # (Geometry's first fields by position: one slice, not seven attribute lookups)
    _, src_c, (sd, sh, sw), dst_c, (dd, dh, dw), (kz, ky, kx), (tz, ty, tx), (lz, ly, lx), _, _, g = geo[:11]
    # exact Python ints (np.prod wraps around in int64: a huge stride or output passed the checks)
    sizes = (batch * src_c * sd * sh * sw, batch * dst_c * dd * dh * dw, src_c * kz * ky * kx * (dst_c // g),
             batch * (src_c + 32 * g) * (sd + lz * kz) * (sh + ly * ky) * (sw + lx * kx))
    if max(sizes) * 4 + 4096 >= 1 << 63:   # (one test on the way of every plan, the names only for the message)
        name, n = next(pair for pair in zip(("src", "dst", "weight", "padded src"), sizes)
                       if pair[1] * 4 + 4096 >= 1 << 63)
        raise ValueError(f"conv: the {name} tensor of {n} elements overflows 64-bit byte sizes")
    entries = tz * kz + ty * ky + tx * kx + tz * ty * tx + kz * ky * kx + dd + dh + dw + dd * dh + dd * dh * dw // 16 \
        + g * tz * ty * tx * ((dst_c // g + 15) // 16)   # the packed weights' offsets (tiny tensors had 2^29)
    if entries > MAX_PLAN:
        raise ValueError(f"conv: the geometry needs {entries} plan entries (stride·kernel, strides, kernel taps, "
                         f"output rows and pixels / 16, groups·strides·output channels / 16); expected at most "
                         f"{MAX_PLAN}")


@functools.lru_cache(maxsize=1024)
def axis_taps(stride: int, dilation: int, kernel: int) -> tuple:
    """The taps ((k, input offset), ...) of each phase r < stride of one axis: tap k serves phase
    r = k·dilation mod stride, from input offset (r - k·dilation) / stride. Memoised."""
    taps: list[list[tuple[int, int]]] = [[] for _ in range(stride)]
    for k in range(kernel):
        taps[k * dilation % stride].append((k, -(k * dilation // stride)))
    return tuple(map(tuple, taps))


@functools.lru_cache(maxsize=1024)
def axis_phases(stride: int, dilation: int, kernel: int, pad_begin: int, src: int, dst: int):
    """Per phase r < stride: its taps ((k, input offset), ...), first index j0 and count of outputs; and the
    zero padding (low, high) that keeps every tap of every output in range. Memoised (a pure function of six
    ints, immutable result): the axes a new shape shares with an earlier one, and a 2-D plan's depth, are
    looked up."""
    phases = []
    low = high = 0
    for r, taps in enumerate(axis_taps(stride, dilation, kernel)):
        j0 = -((r - pad_begin) // stride)            # ceil((pad_begin - r) / stride)
        j1 = -((r - pad_begin - dst) // stride)      # ceil((dst + pad_begin - r) / stride)
        count = max(0, j1 - j0)
        phases.append((taps, j0, count))
        if taps and count:   # a tap's offset falls as k grows: the first tap reads furthest right, the last left
            low = max(low, -(j0 + taps[-1][1]))
            high = max(high, j0 + count - 1 + taps[0][1] - (src - 1))
    return tuple(phases), low, high


def border_outputs(phases, stride: int, pad_begin: int, src: int, dst: int) -> np.ndarray:
    """Flags [dst] of one axis: 1 for an output some tap of whose phase reads outside [0, src). Phase r's
    outputs are r - pad_begin + stride * j (j0 <= j < j0 + count); its taps stay inside for
    -min(offsets) <= j < src - max(offsets): the flagged ones are a head and a tail, set as strided slices."""
    flags = np.zeros(dst, np.int64)
    for r, (taps, j0, count) in enumerate(phases):
        if taps and count:   # offsets fall as k grows (axis_phases)
            first, end = r - pad_begin + stride * j0, j0 + count
            inside_begin = min(max(-taps[-1][1], j0), end)
            inside_end = max(min(src - taps[0][1], end), inside_begin)
            flags[first:first + stride * (inside_begin - j0):stride] = 1
            flags[first + stride * (inside_end - j0):first + stride * count:stride] = 1
    return flags


def _tables(tables: dict, start: int = 0) -> tuple[np.ndarray, tuple]:
    """The int64 tables `tables` (name -> list or tuple of ints, or an int64 array: a long one taken as it is) as the
    table data that follows `start` entries of it (none: it begins with the leading 0 the empty tables all are,
    (0, 1)), each followed by a 0 so that none is empty (the C side reads a pointer); and the (begin, end) of
    each in the whole table data, in the order of `tables`."""
    chunks: list = []
    flat_list = [] if start else [0]
    end = start + len(flat_list)
    bounds = []
    for values in tables.values():
        if len(values):
            begin = end
            if isinstance(values, np.ndarray) and len(values) > LONG_TABLE:
                chunks += [np.array(flat_list, np.int64), values]
                flat_list = [0]
            else:
                flat_list += values.tolist() if isinstance(values, np.ndarray) else values
                flat_list.append(0)
            end = begin + len(values) + 1
            bounds.append((begin, end))
        else:
            bounds.append(EMPTY_TABLE)
    data = np.array(flat_list, np.int64)
    return (np.concatenate((*chunks, data)) if chunks else data), tuple(bounds)


@functools.lru_cache(maxsize=1024)
def phase_tap_lists(stride: tuple, dilation: tuple, kernel: tuple) -> tuple:
    """(taps per phase, first tap of each phase (and the total), and kz, ky, kx, oz, oy, ox of each tap) of a
    3-D geometry (axis_taps of each axis), phases (rz, ry, rx) in order, kz-major within a phase. Memoised: a
    new spatial size of a known kernel, stride and dilation looks it up."""
    phase_taps: list[int] = []
    phase_tap0: list[int] = []
    kz: list[int] = []
    ky: list[int] = []
    kx: list[int] = []
    oz: list[int] = []
    oy: list[int] = []
    ox: list[int] = []
    taps_z, taps_y, taps_x = map(axis_taps, stride, dilation, kernel)
    for tz in taps_z:
        for ty in taps_y:
            for tx in taps_x:
                phase_tap0.append(len(kz))
                phase_taps.append(len(tz) * len(ty) * len(tx))
                for z in tz:
                    for y in ty:
                        for x in tx:
                            kz.append(z[0])
                            ky.append(y[0])
                            kx.append(x[0])
                            oz.append(z[1])
                            oy.append(y[1])
                            ox.append(x[1])
    phase_tap0.append(len(kz))
    return tuple(phase_taps), tuple(phase_tap0), tuple(kz), tuple(ky), tuple(kx), tuple(oz), tuple(oy), tuple(ox)


@functools.lru_cache(maxsize=1024)
def weight_offsets_of(group: int, phase_taps: tuple, kpairs: int, block_units: tuple) -> tuple[tuple, int]:
    """(offset of each (group, phase, channel block)'s packed weights, uint16 elements of them all):
    a phase's block holds taps x kpairs rows of its units. Memoised like phase_tap_lists."""
    offsets: list[int] = []
    offset = 0
    for _ in range(group):
        for taps in phase_taps:
            for units in block_units:
                offsets.append(offset)
                offset += taps * kpairs * units
    return tuple(offsets), offset


class PlanFamily(NamedTuple):
    """What a plan's geometry fixes apart from its batch and spatial sizes (plan_family): the micro-kernel, the
    taps in their order, the packed weights' layout, and the C plan's values and tables none of the sizes
    change. Shared by every plan of the family (never modified)."""

    micro: int
    planes_kernel: bool       # planar, on planes (channels first, or a channels-last source transposed)
    cgp: int                  # GEMM: input channels a group in the padded image
    cpt: int                  # GEMM: elements a padded pixel (pixel_stride)
    pix: int                  # elements from one padded pixel to the next
    direct: bool              # GEMM on the caller's channels-last BF16 source itself (no padded copy)
    elem: int                 # bytes a padded element (GEMM)
    tap_parts: tuple | np.ndarray   # (oz, oy, ox, plane) of each tap in table order: its source offset's parts
                                    # (more than LONG_TABLE taps: a read-only int64 matrix, taps x 4)
    table_data: np.ndarray    # FAMILY_TABLES: those no size changes, then zeros for SIZED_TABLES (read-only
                              # int64; plan fills a copy's SIZED_TABLES and may append AMX_TABLES, BORDER_TABLES)
    table_bounds: tuple       # (begin, end) of each of TABLES: AMX_TABLES and BORDER_TABLES empty
    sized_start: int          # where SIZED_TABLES begin in table_data
    scalars: dict             # the C plan's values no size changes (FAMILY_SCALARS)
    scalar_values: tuple      # the same values in FAMILY_SCALARS' order
    packed_size: int
    pack_units: int
    weight_shape: tuple
    weight_steps: tuple
    src_dtypes: tuple
    dst_dtypes: tuple


@functools.lru_cache(maxsize=256)
def plan_family(sizeless: tuple, compat: int, micro_bf16: bool, fp32_strip: int, fp32_unit: int, planar: bool,
                amx: bool, unpadded: bool, lanes: bool = False) -> PlanFamily:
    """The family of a geometry given by its fields but src and dst (dims, src_c, dst_c, kernel, ...: the memo's
    key) for plans with the given kernel choices (plan). Memoised: a new spatial size of a known geometry looks
    it up (a key sliced from the Geometry costs 0.2 us, a Geometry made with src and dst () 0.9)."""
    geo = Geometry(sizeless[0], sizeless[1], (), sizeless[2], (), *sizeless[3:])
    nhwc = geo.channels_last
    g = geo.group
    cg_in, cg_out = geo.src_c // g, geo.dst_c // g
    depthwise = cg_in == 1 and cg_out == 1
    kernel, stride, dilation, pad_begin = geo.kernel, geo.stride, geo.dilation, geo.pad_begin
    src_bf16 = geo.src_type == DataType.BFLOAT16
    soft = bool(compat & BF16_SOFT)
    planes_kernel = planar and not channels_last_kernel(nhwc, cg_in, cg_out)
    micro = MICRO_AMX if amx else (MICRO_BF16 if micro_bf16 and not soft else MICRO_FP32)
    width = AMX_BLOCK if amx else BLOCK
    if planar:
        cgp, cpt, pix, elem = 1, 1, 1 if planes_kernel else geo.src_c, 4
        direct = False
    else:
        cgp = -(-cg_in // CHANNEL_MULTIPLE[micro]) * CHANNEL_MULTIPLE[micro]
        cpt = pix = g * cgp
        elem = 4 if micro == MICRO_FP32 else 2
        direct = nhwc and src_bf16 and micro != MICRO_FP32 and cgp == cg_in and unpadded
    # taps per phase (rz, ry, rx), kz-major, with their offsets in the padded image and kernel positions
    phase_taps, phase_tap0, tap_kz, tap_ky, tap_kx, tap_oz, tap_oy, tap_ox = phase_tap_lists(stride, dilation, kernel)
    # a planar plan: a phase's taps over each of the group's input planes in turn, plane-major (the plane's
    # taps read neighbouring rows; tap-major, each tap over all the planes: 128 -> 3 at 32 x 32 1.12x slower,
    # 64 -> 3 at 64 x 64 the same), deconv_depthwise_pack's order (list comprehensions, not generators: compiled,
    # a generator costs about 1 us)
    planes = cg_in if planar and not depthwise else 1
    ntaps = len(tap_oz) * planes
    tap_parts: tuple | np.ndarray
    if ntaps > LONG_TABLE:   # by NumPy: a tap's parts an int64 matrix (1024 taps as tuples: 0.4 ms a new layer)
        base_tap0 = np.array(phase_tap0, np.int64)
        per_phase = np.diff(base_tap0)
        entries = per_phase * planes
        at = np.repeat(np.arange(len(entries)), entries)              # the phase of each entry
        step = np.arange(ntaps) - (np.cumsum(entries) - entries)[at]  # its place in the phase
        tap = base_tap0[at] + step % per_phase[at]                    # its tap of the phase_tap_lists
        tap_parts = np.empty((ntaps, 4), np.int64)
        tap_parts[:, :3] = np.array((tap_oz, tap_oy, tap_ox), np.int64)[:, tap].T
        tap_parts[:, 3] = step // per_phase[at]                       # its plane
        tap_parts.flags.writeable = False
        tap_kz, tap_ky, tap_kx = np.array((tap_kz, tap_ky, tap_kx), np.int64)[:, tap]
    elif planes > 1:
        order = [(t, c) for p0, p1 in zip(phase_tap0, phase_tap0[1:]) for c in range(planes) for t in range(p0, p1)]
        tap_parts = tuple([(tap_oz[t], tap_oy[t], tap_ox[t], c) for t, c in order])
        tap_kz, tap_ky, tap_kx = [tuple([taps[t] for t, _ in order]) for taps in (tap_kz, tap_ky, tap_kx)]
    else:
        tap_parts = tuple(zip(tap_oz, tap_oy, tap_ox, itertools.repeat(0)))
    if planes > 1:
        phase_taps = tuple([n * planes for n in phase_taps])
        phase_tap0 = tuple([n * planes for n in phase_tap0])
    nblocks = (cg_out + width - 1) // width
    kpairs = len(tap_parts) if planar else cgp // 2
    # the FP32 micro-kernel's weights as float32 rows (no unpacking of BF16 pairs in its inner loop: D2, D3,
    # D5 0.88-0.93x the time at avx512 and avx2) where a channel block's weights, twice the bytes, stay well
    # inside L2 (D1's 1 MiB: 1.07-1.12x slower than pairs); in units of the micro-kernel's (fp32_unit channels)
    wide = fp32_unit if (micro == MICRO_FP32 and not planar and
                         len(tap_parts) * kpairs * min(width, cg_out) * 8 <= WIDE_MAX) else 0
    weight_offsets: tuple = ()
    if not planar:   # per group, phase and channel block (of `lanes` channels, whole vectors)
        block_units = tuple([row_units(wide, (min(width, cg_out - ob * width) + 15) // 16 * 16)
                             for ob in range(nblocks)])
        weight_offsets, offset = weight_offsets_of(g, phase_taps, kpairs, block_units)
    packed_size = geo.dst_c * len(tap_parts) if planar else offset + 64
    # (last, zeros in the places of the tables whose lengths no size changes but whose values do, none empty:
    # plan fills a copy)
    values = (phase_taps, phase_tap0, tap_kz, tap_ky, tap_kx, weight_offsets,
              np.zeros(ntaps, np.int64) if ntaps > LONG_TABLE else [0] * ntaps, [0] * stride[2], [0] * stride[2])
    table_data, family_bounds = _tables(dict(zip(FAMILY_TABLES, values)))
    table_data.flags.writeable = False
    table_bounds = family_bounds + (EMPTY_TABLE,) * (len(AMX_TABLES) + len(BORDER_TABLES))
    sized_start = family_bounds[FAMILY_TABLES.index(SIZED_TABLES[0])][0]
    scalars = {
        "impl": DEPTHWISE if planar else GEMM, "micro": micro, "wide_weights": wide, "src_bf16": int(src_bf16),
        "dst_bf16": int(geo.dst_type == DataType.BFLOAT16), "nhwc": int(nhwc), "direct": int(direct),
        "act": int(geo.activation), "src_c": geo.src_c, "dst_c": geo.dst_c, "group": g, "cg_in": cg_in,
        "cg_out": cg_out, "kernel_z": kernel[0], "kernel_y": kernel[1], "kernel_x": kernel[2],
        "dilation_z": dilation[0], "dilation_y": dilation[1], "dilation_x": dilation[2], "stride_z": stride[0],
        "stride_y": stride[1], "stride_x": stride[2], "pad_front": pad_begin[0], "pad_top": pad_begin[1],
        "pad_left": pad_begin[2], "cg_padded": cgp, "pixel_stride": cpt, "kpairs": kpairs, "block_width": width,
        "weight_strip": fp32_strip if micro == MICRO_FP32 else (LANES_STRIP if lanes else width), "nblocks": nblocks,
        "lanes": int(lanes),
    }
    scalar_values = tuple([scalars[name] for name in FAMILY_SCALARS])
    kz, ky, kx = kernel
    spatial_kernel = kernel[3 - geo.dims:]
    if nhwc:
        weight_shape = (geo.src_c, *spatial_kernel, cg_out)
        steps = (kz * ky * kx * cg_out, 1, ky * kx * cg_out, kx * cg_out, cg_out)
    else:
        weight_shape = (geo.src_c, cg_out, *spatial_kernel)
        steps = (cg_out * kz * ky * kx, kz * ky * kx, ky * kx, kx, 1)
    src_dtypes = (BFLOAT16, UINT16) if src_bf16 else (FLOAT32,)
    dst_dtypes = (BFLOAT16, UINT16) if geo.dst_type == DataType.BFLOAT16 else (FLOAT32,)
    return PlanFamily(micro, planes_kernel, cgp, cpt, pix, direct, elem, tap_parts, table_data, table_bounds,
                      sized_start, scalars, scalar_values, packed_size,
                      -(-geo.dst_c // PACK_CHANNELS) if planar else g * kpairs,
                      weight_shape, steps, src_dtypes, dst_dtypes)


def plan(batch: object, conv: ConvParams | ConvParams3d | Geometry, compatibility: object, micro_bf16: bool,
         micro_amx: bool, fp32_strip: int, fp32_unit: int, amx_permission,
         dims: int | None = None) -> DeconvolutionPlan:
    """Plan `batch` images of geometry `conv` (a ConvParams or ConvParams3d as `validate` returns it, or one
    with the same guarantees: functional_conv's, dims=1 for a 1-D call; or functional_geometry's Geometry,
    the plan's conv then None) for the deconvolution kernels of one
    CPU level: `micro_amx` says whether the level has the AMX micro-kernel,
    `micro_bf16` whether plans off AMX use the vdpbf16ps one (the level has it and this CPU runs it faster
    than FP32 FMAs), `fp32_strip` how many output channels its FP32 micro-kernel sums per call (the strips
    its weights are packed in), `fp32_unit` the channels of its float32 weight rows' units (its vector width);
    `amx_permission()` asks the OS (called only when the plan would use AMX).
    What the sizes do not change comes from plan_family (memoised); the rest is worked out here."""
    batch = _int(batch, "batch", 1)
    compat = int(as_compatibility(compatibility))
    geo = conv if isinstance(conv, Geometry) else geometry_of(conv, dims)
    check_sizes(batch, geo)
    nhwc = geo.channels_last
    g = geo.group
    cg_in, cg_out = geo.src_c // g, geo.dst_c // g
    depthwise = cg_in == 1 and cg_out == 1
    src, dst, kernel, stride, dilation = geo.src, geo.dst, geo.kernel, geo.stride, geo.dilation
    pad_begin, pad_end = geo.pad_begin, geo.pad_end
    if kernel == (1, 1, 1) and stride == (1, 1, 1) and pad_begin == pad_end == (0, 0, 0):
        # a 1x1x1 stride-1 deconvolution is a GEMM over all pixels: one long row
        src, dst = (1, 1, math.prod(src)), (1, 1, math.prod(dst))
    dst_pixels = dst[0] * dst[1] * dst[2]
    axes = [axis_phases(stride[a], dilation[a], kernel[a], pad_begin[a], src[a], dst[a]) for a in range(3)]
    (_, plz, phz), (_, ply, phy), (phases_x, plx, phx) = axes
    dp, hp, wp = src[0] + plz + phz, src[1] + ply + phy, src[2] + plx + phx
    unpadded = plz == phz == ply == phy == plx == phx == 0
    # few output channels a group: the depthwise kernel's planes, the taps of a block of up to PLANAR_OUT_MAX of
    # the group's output channels running over its input planes together (with few input channels too, the
    # GEMM's sums are few a pixel and its output blocks part-filled; the planar kernel's vectors run along rows,
    # so it wants wide ones: PLANAR_MAX_IN); a channels-last source is transposed into planes, its outputs
    # stored dst_c apart. The same choice at every level, AMX's too: the kernels sum in different orders.
    # (several blocks of output channels on a small image: the GEMM, PAIRED_BLOCKS_MIN)
    paired = (kernel[2] == stride[2] == 2 and dilation[2] == 1 and
              (cg_out <= PLANAR_OUT_MAX or dst_pixels >= PAIRED_BLOCKS_MIN))
    planar = depthwise or (stride[2] <= 2 and cg_in <= planar_max_in(cg_out, dst[2], nhwc, paired, stride[2] == 1))
    amx = (not (compat & BF16_SOFT) and micro_amx and cg_in >= 16 and not planar and bool(amx_permission()))
    # (the geometry's fields but src and dst: dims, src_c, dst_c, kernel, ...)
    # channels first on the vdpbf16ps kernel: 16 pixels of an output channel in a vector (deconvolution.c:
    # lanes_task), where rows are long enough to fill two vectors of each x phase (AMD Zen 4, kernel harness:
    # 0.80-0.99x the time of the pixel tiles at 64 x 64 outputs and more; at 32 x 32 1.01-1.03x, and 2x at
    # 16 x 16 with stride 2, half of each vector idle)
    lanes = (bool(micro_bf16) and not (compat & BF16_SOFT) and not amx and not planar and not nhwc and stride[2] <= 2
             and dst[2] >= LANES_ROW_MIN * stride[2] and math.prod(kernel) <= LANES_TAPS
             and geo.activation in (Activation.IDENTITY, Activation.RELU))
    family = plan_family((geo[0], geo[1], geo[3], *geo[5:]), compat, bool(micro_bf16), fp32_strip, fp32_unit,
                         planar, amx, unpadded, lanes)
    cpt, pix = family.cpt, family.pix
    if planar:
        # + 64 floats: a row's last vector may read up to 15 columns past the image (into lanes never stored)
        buf_size = batch * geo.src_c * dp * hp * wp * 4 + 64 + 256
        # channels first: each depthwise plane's task pads it; a planar one's input planes are padded first,
        # a plane a task (channels last: a padded row a task)
        pad_rows = batch * dp * hp if nhwc else (0 if depthwise else batch * geo.src_c)
    else:
        buf_size = 0 if family.direct else batch * dp * hp * wp * cpt * family.elem + 64
        pad_rows = 0 if family.direct else batch * dp * hp
    row, plane = wp * pix, hp * wp * pix
    image = dp * plane
    tap_offsets: list | np.ndarray
    if isinstance(family.tap_parts, np.ndarray):   # many taps (a planar family of 64 planes has 1024)
        tap_offsets = family.tap_parts @ np.array((plane, row, pix, image), np.int64)
    else:   # few: Python ints (faster than NumPy's fixed costs)
        tap_offsets = [oz * plane + oy * row + ox * pix + c * image for oz, oy, ox, c in family.tap_parts]
    # task rows: one per output row (oz, oy), in output order (the kernels derive each one's phase and
    # indices: deconvolution.h, synet_deconv_row_of)
    nrows = dst[0] * dst[1]
    col_first = [ph[1] for ph in phases_x]
    col_count = [ph[2] for ph in phases_x]
    nblocks = family.scalars["nblocks"]
    # AMX: segments of <= 16 pixels of one phase row; the full ones of a phase go in pairs
    seg_aoff: list[int] = []
    seg_doff: list[int] = []
    seg_m: list[int] = []
    seg_phase: list[int] = []
    seg_place: list[tuple[int, int, int]] = []
    unit_s0: list[int] = []
    unit_s1: list[int] = []
    unit_ob: list[int] = []
    run_unit0: list[int] = []
    if amx:
        by_phase: dict[int, tuple[list[int], list[int]]] = {}
        for oz, oy in itertools.product(range(dst[0]), range(dst[1])):
            jz, rz = divmod(oz + pad_begin[0], stride[0])
            jy, ry = divmod(oy + pad_begin[1], stride[1])
            rzy = rz * stride[1] + ry
            for rx in range(stride[2]):
                phase = rzy * stride[2] + rx
                full, tails = by_phase.setdefault(phase, ([], []))
                for i in range(0, col_count[rx], 16):
                    ii = col_first[rx] + i
                    ox = rx - pad_begin[2] + stride[2] * ii
                    seg_aoff.append((((jz + plz) * hp + jy + ply) * wp + ii + plx) * cpt)
                    seg_doff.append(((oz * dst[1] + oy) * dst[2] + ox) * (geo.dst_c if nhwc else 1))
                    m = min(16, col_count[rx] - i)
                    seg_m.append(m)
                    seg_phase.append(phase)
                    seg_place.append((oz, oy, ox))
                    (full if m == 16 else tails).append(len(seg_m) - 1)
        pairs: list[tuple[int, int]] = []
        for phase in sorted(by_phase):
            full, tails = by_phase[phase]
            pairs += [(full[k], full[k + 1] if k + 1 < len(full) else -1) for k in range(0, len(full), 2)]
            pairs += [(k, -1) for k in tails]
        # in output order, a unit's channel blocks back to back: the phases that interleave in one output row
        # run together, so a thread's share of the tasks is a band of output rows (no cache line written by two
        # threads), and a block's neighbour shares its image pixels (in L1) and its part-filled cache lines
        pairs.sort(key=lambda pair: seg_place[pair[0]])
        for s0, s1 in pairs:
            unit_s0 += [s0] * nblocks
            unit_s1 += [s1] * nblocks
            unit_ob += range(nblocks)
        run_unit0 += range(0, len(unit_s0), AMX_RUN)
        run_unit0.append(len(unit_s0))
    amx_runs = max(0, len(run_unit0) - 1)
    # border flags per axis, none on an axis without padding (low = high = 0); a plan without any padding has
    # no border outputs (has_borders), and its kernels never read the tables
    border_z = border_y = border_x = NO_TABLE
    if not unpadded:
        border_z, border_y, border_x = (
            border_outputs(phases, stride[a], pad_begin[a], src[a], dst[a]) if low or high
            else np.zeros(dst[a], np.int64) for a, (phases, low, high) in enumerate(axes))
        border_x = np.flatnonzero(border_x)
    # the family's tables with SIZED_TABLES filled in (each followed by its 0), then those of varying lengths
    table_data = family.table_data.copy()
    at = family.sized_start
    if isinstance(tap_offsets, np.ndarray):
        table_data[at:at + len(tap_offsets)] = tap_offsets
        table_data[at + len(tap_offsets) + 1:] = [*col_first, 0, *col_count, 0]
    else:
        table_data[at:] = [*tap_offsets, 0, *col_first, 0, *col_count, 0]
    table_bounds = family.table_bounds
    if amx or not unpadded:   # (both groups, empty or not: the last entries of TABLES)
        appended = (unit_s0, unit_s1, unit_ob, run_unit0, seg_aoff, seg_doff, seg_m, seg_phase, border_z, border_y,
                    border_x)
        plan_data, plan_bounds = _tables(dict(zip(AMX_TABLES + BORDER_TABLES, appended)), len(table_data))
        table_data = np.concatenate((table_data, plan_data))
        table_bounds = table_bounds[:len(FAMILY_TABLES)] + plan_bounds
    # channels first, not AMX: a task's run of consecutive output rows. The GEMM's: a row's last part-filled
    # store window waits for the next row of the run (16 rows at most, and >= 64 runs per image, group and
    # channel block); planar: bands of PLANAR_BAND rows, each plane's (so that a few output channels keep both
    # threads busy: 64 -> 3 on 2 threads 0.67x -> 0.5x the time); depthwise: the whole plane (its task pads it);
    # depthwise channels last: bands of up to PLANAR_BAND rows, all channels, >= 8 bands an image where the
    # rows allow (the band's rows go strip by strip: depthwise_band_channels_last)
    if amx or (nhwc and not planar):
        row_run = 1
    elif channels_last_kernel(nhwc, cg_in, cg_out):
        row_run = max(1, min(PLANAR_BAND, nrows // 8))
    elif planar:
        row_run = nrows if depthwise else PLANAR_BAND
    else:
        row_run = max(1, min(16, nrows // 64))
    nruns = -(-nrows // row_run)
    ntasks = batch * ((g * -(-cg_out // PLANAR_OUT_MAX) * nruns if family.planes_kernel else nruns) if planar
                      else g * (amx_runs if amx else nruns * nblocks))
    # an FP32 output far larger than the caches: non-temporal stores of whole lines (channels first: the phases'
    # store windows; channels last: micro-tiles stored from the registers; BF16 outputs gained nothing)
    stream = int(not (amx or planar) and geo.dst_type == DataType.FLOAT32 and
                 batch * dst_pixels * geo.dst_c * 4 >= STREAM_MIN)
    sized_scalars = (buf_size, batch, *src, *dst, dp, hp, wp, plz, ply, plx,   # (SIZED_SCALARS' order)
                     dp * hp * wp * (geo.src_c if planar else cpt), nrows, len(unit_s0), amx_runs, ntasks, row_run,
                     stream, dst_pixels * geo.dst_c, pad_rows, len(border_x))
    spatial = geo.src[3 - geo.dims:], geo.dst[3 - geo.dims:]
    if nhwc:
        src_shape = (batch, *spatial[0], geo.src_c)
        dst_shape = (batch, *spatial[1], geo.dst_c)
    else:
        src_shape = (batch, geo.src_c, *spatial[0])
        dst_shape = (batch, geo.dst_c, *spatial[1])
    return _named(DeconvolutionPlan, (None if conv is geo else conv, geo, batch, compat, family.scalars["impl"],
                                      family.micro, family.scalar_values, sized_scalars, table_data, table_bounds,
                                      src_shape, dst_shape, family.src_dtypes, family.dst_dtypes, family.weight_shape,
                                      family.packed_size, family.pack_units, family.weight_steps))


def check_reals(array: np.ndarray, name: str, kinds: str = "biuf") -> np.ndarray:
    """`array` itself if its dtype is of `kinds` or bfloat16, else ValueError naming the parameter."""
    if array.dtype.kind not in kinds and array.dtype != BFLOAT16:
        raise ValueError(f"{name}: expected real numbers, got dtype {array.dtype}")
    return array


def weight_array(weight: object, planned: DeconvolutionPlan) -> np.ndarray:
    """The caller's weights as C-contiguous float32 of the plan's element count (ValueError otherwise):
    float32 and bfloat16 (uint16: its raw bits) as they are, other reals rounded to bfloat16 once, from
    float64 (the kernels round float32 weights to bfloat16 as they pack them: those values stay)."""
    w = native(as_array(weight, "weight"))
    if w.dtype == UINT16:
        w = w.view(BFLOAT16)
    check_reals(w, "weight", "fiu")
    n = math.prod(planned.weight_shape)
    if w.size != n:
        kernel = {1: "kL", 2: "kY, kX", 3: "kD, kH, kW"}[planned.geometry.dims]
        layout = f"[srcC, {kernel}, dstC/group]" if planned.geometry.channels_last else f"[srcC, dstC/group, {kernel}]"
        raise ValueError(f"weight: expected {n} elements ({layout} = {'·'.join(map(str, planned.weight_shape))}), "
                         f"got {w.size}")
    if w.dtype != np.float32 and w.dtype != BFLOAT16:
        return round_from_float64(w).reshape(-1)
    w = np.ascontiguousarray(w, np.float32)
    return w if w.flags.aligned else w.copy()   # (the packing reads whole floats)


def check_without_geometry(weight: object, bias: object, dst_c: int) -> None:
    """A functional call with an empty output and no geometry to plan (a spatial axis of size 0): its weights'
    element type and its bias checked as a call that computes checks them (ValueError / TypeError)."""
    w = native(as_array(weight, "weight"))
    check_reals(w.view(BFLOAT16) if w.dtype == UINT16 else w, "weight", "fiu")
    if bias is not None:
        bias_array(bias, dst_c)


def bias_array(bias: object, dst_c: int) -> np.ndarray:
    if bias is None:
        return np.zeros(dst_c, np.float32)
    given = check_reals(as_array(bias, "bias"), "bias")
    b = np.array(given, np.float32, copy=True, order="C").reshape(-1)
    if b.size != dst_c:
        raise ValueError(f"bias: expected {dst_c} elements (dstC), got {b.size}")
    return b


def params_array(of: Geometry | FunctionalCall, params: object, name: str = "params") -> np.ndarray:
    """The activation parameters of a geometry's or a functional call's activation and output channels."""
    return activation_params(of.activation, params, of.dst_c, name, allow_single_slope=False, allow_extra_slopes=True)


def _canonical(weight: np.ndarray, geo: Geometry) -> np.ndarray:
    """The caller's weights as [group, cg_in, kz, ky, kx, cg_out]."""
    g = geo.group
    cg_in, cg_out = geo.src_c // g, geo.dst_c // g
    if geo.channels_last:
        return weight.reshape(g, cg_in, *geo.kernel, cg_out)
    return weight.reshape(g, cg_in, cg_out, *geo.kernel).transpose(0, 1, 3, 4, 5, 2)


def exact_weights(weight: np.ndarray, planned: DeconvolutionPlan) -> np.ndarray:
    """The BF16-rounded FP32 weights of the exact-border pass, [group][kz][ky][kx][cg_in][cg_out]."""
    from ._kernels import round_to_bfloat16

    canon = _canonical(weight, planned.geometry)
    return np.ascontiguousarray(round_to_bfloat16(canon).transpose(0, 2, 3, 4, 1, 5)).reshape(-1)


def row_units(wide: int, lanes: int) -> int:
    """uint16 elements of one packed weight row of `lanes` output channels (synet/src/deconvolution.c:
    row_units): (even, odd) BF16 pairs, or (`wide`) float32 weights of both parities."""
    return lanes * (4 if wide else 2)


def channels_last_kernel(nhwc: object, cg_in: int, cg_out: int) -> bool:
    """Whether a depthwise plan runs the channels-last kernel on its source as it lies (a depthwise one on a
    channels-last source: deconvolution_depthwise.c's channels_last_kernel); every other depthwise or planar
    plan runs on planes."""
    return bool(nhwc) and cg_in == cg_out == 1


def planar_max_in(cg_out: int, width: int, nhwc: object, paired: bool = False, unit_stride: bool = False) -> int:
    """The most input channels a group a planar plan of cg_out output channels a group and output rows of
    `width` columns may have (0: none); channels last, more than one block of output channels only with few
    input channels (PLANAR_NHWC_MAX_IN, PLANAR_NHWC_WIDE). `paired`: kernel 2, stride 2 along x (channels first:
    PLANAR_MAX_IN_PAIRED too); `unit_stride`: stride 1 along x."""
    if nhwc and cg_out > PLANAR_OUT_MAX:
        if cg_out > 2 * PLANAR_OUT_MAX:
            return int(cg_out <= PLANAR_NHWC_WIDE and unit_stride and width >= 32)
        return min(PLANAR_NHWC_MAX_IN, planar_max_in(cg_out, width, False))
    most = 0
    for table in (PLANAR_MAX_IN, PLANAR_MAX_IN_PAIRED) if paired and not nhwc else (PLANAR_MAX_IN,):
        for least, limits in table.items():   # (a loop: a generator costs ~1 us a plan compiled)
            if width >= least:
                most = max(most, limits.get(cg_out, 0))
    return most


def tap_channels(phase_taps: np.ndarray, phase_tap0: np.ndarray, cg_in: int) -> np.ndarray:
    """The input channel (in its group) each tap of a depthwise / planar plan reads: a phase's taps run over
    the group's planes in turn, phase_taps / cg_in taps each (deconv_depthwise_pack)."""
    counts = np.asarray(phase_taps, np.int64)
    phase = np.repeat(np.arange(counts.size), counts)
    start = np.asarray(phase_tap0, np.int64)[:-1][phase]
    return (np.arange(phase.size) - start) // (counts[phase] // cg_in)


def unpack_weights(packed: np.ndarray, planned: DeconvolutionPlan) -> np.ndarray:
    """The packed weights back in the caller's layout, as float32 (BF16-rounded values): packing them
    again gives the same packed bits (pickling keeps these, never the packed buffer)."""
    s, t, geo = planned.scalars, planned.tables, planned.geometry
    g, cg_in, cg_out = s["group"], s["cg_in"], s["cg_out"]
    canon = np.zeros((g, cg_in, *geo.kernel, cg_out), np.float32)   # [group, ci, kz, ky, kx, co]
    taps = (t["tap_kz"], t["tap_ky"], t["tap_kx"])
    if planned.impl == DEPTHWISE:
        n = s["kpairs"]   # [output channel c][tap t]; a planar plan's tap t reads the input channel tap_channels
        table = (packed.reshape(n, geo.dst_c).T if channels_last_kernel(s["nhwc"], cg_in, cg_out)
                 else packed.reshape(geo.dst_c, n))   # the channels-last kernel's [tap][c], else [c][tap]
        channel, tap = np.arange(geo.dst_c)[:, None], np.arange(n)
        ci = tap_channels(t["phase_taps"], t["phase_tap0"], cg_in)
        canon[channel // cg_out, ci[tap], taps[0][tap], taps[1][tap], taps[2][tap], channel % cg_out] = table
    else:
        phases = s["stride_z"] * s["stride_y"] * s["stride_x"]
        kpairs, width, nblocks = s["kpairs"], s["block_width"], s["nblocks"]
        pair_order = np.argsort(pair_channels(planned.micro, kpairs))   # packed position of each channel
        for gi in range(g):
            for phase in range(phases):
                ntaps, t0 = int(t["phase_taps"][phase]), int(t["phase_tap0"][phase])
                for ob in range(nblocks):
                    off = int(t["weight_offsets"][(gi * phases + phase) * nblocks + ob])
                    valid = min(width, cg_out - ob * width)
                    lanes = (valid + 15) // 16 * 16
                    strips = []   # [tap, pair, parity, channel] of each strip of weight_strip channels
                    for n0 in range(0, lanes, s["weight_strip"]):
                        ws = min(s["weight_strip"], lanes - n0)
                        strip = packed[off:off + ntaps * kpairs * row_units(s["wide_weights"], ws)]
                        off += strip.size
                        if s["wide_weights"]:   # float32 rows in units of U channels, [unit, h, i, j, parity]
                            unit = s["wide_weights"]   # of channel U u + 4i + 2h + j: BF16 bits in the high halves
                            pairs = strip.reshape(ntaps, kpairs, ws // unit, 2, unit // 4, 2, 2, 2)[..., 1]
                            strips.append(pairs.transpose(0, 1, 6, 2, 4, 3, 5).reshape(ntaps, kpairs, 2, ws))
                        else:                   # (even, odd) BF16 pairs
                            strips.append(strip.reshape(ntaps, kpairs, ws, 2).transpose(0, 1, 3, 2))
                    bits = np.concatenate(strips, axis=3)[..., :valid]
                    bits = bits.reshape(ntaps, 2 * kpairs, valid)
                    bits = bits[:, pair_order][:, :cg_in]
                    values = (bits.astype(np.uint32) << 16).view(np.float32)
                    for ti in range(ntaps):
                        k = t0 + ti
                        canon[gi, :, taps[0][k], taps[1][k], taps[2][k], ob * width:ob * width + valid] = values[ti]
    if geo.channels_last:
        return canon.reshape(planned.weight_shape)
    return np.ascontiguousarray(canon.transpose(0, 1, 5, 2, 3, 4)).reshape(planned.weight_shape)


def has_borders(planned: DeconvolutionPlan) -> bool:
    s = planned.scalars
    return s["padded_d"] > s["src_d"] or s["padded_h"] > s["src_h"] or s["padded_w"] > s["src_w"]


LAYOUTS = {1: ("NCL", "NLC"), 2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}


def _ints(value: object, name: str, lengths: tuple[int, ...], expected: str, expected_sequence: str) -> tuple[int, ...]:
    """An int (repeated lengths[0] times) or a sequence of ints of one of `lengths`; TypeError / ValueError
    "{name}: expected {expected}" (not a sequence) / "{expected_sequence}" (a wrong one) otherwise."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return (int(value),) * lengths[0]
    try:
        values: tuple = tuple(value)  # type: ignore[call-overload, arg-type]
    except TypeError:
        raise TypeError(f"{name}: expected {expected}, got {value!r}") from None
    if len(values) not in lengths or any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) for v in values):
        raise ValueError(f"{name}: expected {expected_sequence}, got {value!r}")
    return tuple(int(v) for v in values)


def _per_axis(value: object, name: str, dims: int, minimum: int) -> tuple[int, ...]:
    """An int or a sequence of `dims` ints, each >= minimum."""
    if type(value) is int and value >= minimum:
        return (value,) * dims
    expected = f"an int or {dims} ints"
    values = _ints(value, name, (dims,), expected, expected)
    if min(values) < minimum:
        raise ValueError(f"{name}: expected values >= {minimum}, got {value!r}")
    return values


def _pads(value: object, dims: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """padding: an int, `dims` ints (both sides) or 2 * `dims` ints (all begins, then all ends), >= 0."""
    if type(value) is int and value >= 0:
        return (value,) * dims, (value,) * dims
    values = _ints(value, "padding", (dims, 2 * dims), f"an int, {dims} or {2 * dims} ints",
                   f"an int, {dims} ints (both sides) or {2 * dims} ints (all begins, then all ends)")
    if min(values) < 0:
        raise ValueError(f"padding: expected pads >= 0, got {value!r}")
    return (values, values) if len(values) == dims else (values[:dims], values[dims:])


class FunctionalCall(NamedTuple):
    """conv_transpose{1,2,3}d's arguments checked and normalised, apart from x's batch, channels and sizes
    (functional_arguments: the same for every x of its rank)."""

    dims: int
    nhwc: bool
    w_in: int
    kernel: tuple             # (kz, ky, kx): 1 on the axes a 1-D / 2-D call does not have (likewise below)
    stride: tuple
    dilation: tuple
    pad_begin: tuple
    pad_end: tuple            # less output_padding
    dst_of_zero: tuple        # the output size an axis of size 0 would have: dst = stride·src + dst_of_zero
    pads: tuple               # the caller's (all begins, then all ends: for messages)
    groups: int
    dst_c: int
    src_type: DataType
    dst_type: DataType
    activation: Activation


def functional_arguments(dims: int, x_shape: tuple, x_dtype, w_shape: tuple, stride, padding, output_padding,
                         groups, dilation, layout, activation, out_dtype, out) -> FunctionalCall:
    """conv_transpose{1,2,3}d's arguments but x's batch, channels and sizes checked (ValueError / TypeError
    saying what was expected) and mapped onto a FunctionalCall; of x_shape only its rank is read (and shown in
    its error). So the result holds for every x of that rank: the functional forms memoise it."""
    first, last = LAYOUTS[dims]
    if dims == 2:
        nhwc = as_format(layout, "layout") == TensorFormat.NHWC
    elif isinstance(layout, str) and (name := layout.strip().upper()) in (first, last):
        nhwc = name == last
    else:
        raise ValueError(f"layout: expected {first!r} or {last!r}, got {layout!r}")
    spatial_names = "DHW"[3 - dims:] if dims > 1 else "L"
    if len(x_shape) not in (dims + 1, dims + 2):
        text = f"[N, {', '.join(spatial_names)}, C]" if nhwc else f"[N, C, {', '.join(spatial_names)}]"
        raise ValueError(f"x: expected a {dims + 2}-D {text} array (or {dims + 1}-D unbatched), got shape {x_shape}")
    if len(w_shape) != dims + 2:
        kernel_text = ", ".join(f"k{a}" for a in spatial_names)
        text = f"[C_in, {kernel_text}, C_out/groups]" if nhwc else f"[C_in, C_out/groups, {kernel_text}]"
        raise ValueError(f"weight: expected a {dims + 2}-D {text} array, got shape {w_shape}")
    if nhwc:
        w_in, *kernel, cg_out = w_shape
    else:
        w_in, cg_out, *kernel = w_shape
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise ValueError(f"groups: expected an int >= 1, got {groups!r}")
    strides = _per_axis(stride, "stride", dims, 1)
    dilations = _per_axis(dilation, "dilation", dims, 1)
    begin, end = _pads(padding, dims)
    extra = _per_axis(output_padding, "output_padding", dims, 0)
    for o, st, d in zip(extra, strides, dilations):
        if o >= max(st, d):
            limits = tuple(max(st, d) for st, d in zip(strides, dilations))
            raise ValueError(f"output_padding: expected values < max(stride, dilation) = {limits}, got {extra}")
    if min(kernel) < 1:
        raise ValueError(f"weight: expected a kernel of at least {'x'.join('1' * dims)}, got shape {w_shape}")
    if out_dtype is None:
        if out is not None and out.dtype in (FLOAT32, BFLOAT16, UINT16):
            dst_type = DataType.FLOAT32 if out.dtype == FLOAT32 else DataType.BFLOAT16
        else:
            dst_type = DataType.BFLOAT16 if x_dtype == BFLOAT16 else DataType.FLOAT32
    else:
        dst_type = as_data_type(out_dtype, "out_dtype")
        if dst_type not in (DataType.FLOAT32, DataType.BFLOAT16):
            raise ValueError(f"out_dtype: expected float32 or bfloat16, got {dst_type.name}")
    src_type = DataType.BFLOAT16 if x_dtype == BFLOAT16 else DataType.FLOAT32
    full, none = (3 - dims) * (1,), (3 - dims) * (0,)
    kernel3, stride3, dilation3 = full + tuple(kernel), full + strides, full + dilations
    begin3, end3 = none + begin, none + tuple(e - o for e, o in zip(end, extra))
    dst_of_zero = tuple(map(deconvolution_size, (0, 0, 0), kernel3, stride3, dilation3, begin3, end3))
    return FunctionalCall(dims, nhwc, w_in, kernel3, stride3, dilation3, begin3, end3, dst_of_zero, begin + end,
                          int(groups), cg_out * int(groups), src_type, dst_type, as_activation(activation))


def functional_geometry(call: FunctionalCall, x_shape: tuple, w_shape: tuple) -> tuple:
    """conv_transpose{1,2,3}d's x of shape x_shape (its channels checked against the weights and groups, its
    output sizes >= 1) with `call`'s arguments: (geometry, batch, unbatched, output shape, kind); kind "run",
    "empty" (nothing to compute: geometry None) or "bias" (no input reaches the output: every output is
    act(bias), computed as a 1x1 deconvolution, the geometry's)."""
    dims = call.dims
    unbatched = len(x_shape) == dims + 1
    if unbatched:
        x_shape = (1, *x_shape)
    if call.nhwc:
        n, c_in, size = x_shape[0], x_shape[-1], x_shape[1:-1]
    else:
        n, c_in, size = x_shape[0], x_shape[1], x_shape[2:]
    if call.w_in != c_in:
        raise ValueError(f"weight: expected {c_in} input channels (x's) in dimension 0, got shape {w_shape}")
    if c_in % call.groups:
        raise ValueError(f"groups: expected a divisor of the {c_in} input channels, got {call.groups}")
    src = (1,) * (3 - dims) + size
    stride, zero = call.stride, call.dst_of_zero
    dst = (stride[0] * src[0] + zero[0], stride[1] * src[1] + zero[1], stride[2] * src[2] + zero[2])
    dst_c = call.dst_c
    empty_input = n == 0 or c_in == 0 or dst_c == 0 or 0 in size
    if min(dst) <= 0:
        if min(size) > 0:   # (an empty batch or no channels leave the output's sizes as they are: checked)
            raise ValueError(f"padding: {call.pads} leaves an output of {'x'.join(map(str, dst[3 - dims:]))}; "
                             f"expected >= {'x'.join('1' * dims)}")
        dst = tuple(max(d, 0) for d in dst)
    spatial = dst[3 - dims:]
    shape = (n, *spatial, dst_c) if call.nhwc else (n, dst_c, *spatial)
    kind = "empty" if min(shape) == 0 else ("bias" if empty_input else "run")
    ones, zeros = (1, 1, 1), (0, 0, 0)
    if kind == "empty":
        geo = None
    elif kind == "bias":
        geo = _named(Geometry, (dims, 1, dst, dst_c, dst, ones, ones, ones, zeros, zeros, 1, call.activation,
                                DataType.FLOAT32, call.dst_type, call.nhwc))
    else:
        geo = _named(Geometry, (dims, c_in, src, dst_c, dst, call.kernel, call.stride, call.dilation, call.pad_begin,
                                call.pad_end, call.groups, call.activation, call.src_type, call.dst_type, call.nhwc))
    return geo, n, unbatched, shape[1:] if unbatched else shape, kind


def conv_params_of(geo: Geometry) -> ConvParams | ConvParams3d:
    """The ConvParams (1-D, 2-D: depth dropped; 1-D: height 1) or ConvParams3d of a geometry."""
    fmt = TensorFormat.NHWC if geo.channels_last else TensorFormat.NCHW
    (sd, sh, sw), (dd, dh, dw), (kz, ky, kx) = geo.src, geo.dst, geo.kernel
    (tz, ty, tx), (lz, ly, lx), (bz, by, bx), (ez, ey, ex) = geo.stride, geo.dilation, geo.pad_begin, geo.pad_end
    if geo.dims == 3:
        return ConvParams3d(geo.src_c, sd, sh, sw, geo.src_type, fmt, geo.dst_c, dd, dh, dw, geo.dst_type, fmt, kz, ky,
                            kx, lz, ly, lx, tz, ty, tx, bz, by, bx, ez, ey, ex, geo.group, geo.activation)
    return ConvParams(geo.src_c, sh, sw, geo.src_type, fmt, geo.dst_c, dh, dw, geo.dst_type, fmt, ky, kx, ly, lx, ty,
                      tx, by, bx, ey, ex, geo.group, geo.activation)


def functional_conv(dims: int, x_shape: tuple, x_dtype, w_shape: tuple, stride, padding, output_padding, groups,
                    dilation, layout, activation, out_dtype, out) -> tuple:
    """conv_transpose{1,2,3}d's arguments checked and mapped onto (conv, batch, unbatched, output shape, kind)
    (functional_arguments, then functional_geometry): conv a ConvParams (1-D: height 1) or ConvParams3d, or
    None for kind "empty"."""
    call = functional_arguments(dims, x_shape, x_dtype, w_shape, stride, padding, output_padding, groups, dilation,
                                layout, activation, out_dtype, out)
    geo, n, unbatched, shape, kind = functional_geometry(call, x_shape, w_shape)
    return None if geo is None else conv_params_of(geo), n, unbatched, shape, kind
