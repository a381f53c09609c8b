"""Deconvolution16b planning: argument checks, the phase decomposition and every table the kernels read
(pure Python; synet/_deconvolution.pyx turns a plan into the C struct of synet/src/deconvolution.h).

Output pixel o = r - pad_begin + stride * j of an axis belongs to phase r < stride; it takes kernel tap
k when (r - k * dilation) % stride == 0, from input i = j + (r - k * dilation) // stride. Each phase
(ry, rx) is a stride-1 convolution over its taps: an implicit GEMM over (taps x input channels).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ._activations import activation_params
from ._conv_params import ConvParams, deconvolution_size
from ._types import BFLOAT16, Activation, Compatibility, DataType, TensorFormat, as_activation, as_compatibility
from ._types import as_data_type, as_format

GEMM, DEPTHWISE = 1, 2
MICRO_FP32, MICRO_BF16, MICRO_AMX = 0, 1, 2
MICRO_NAMES = {MICRO_FP32: "fp32", MICRO_BF16: "avx512bf16", MICRO_AMX: "amx-bf16"}
BLOCK = 64          # output channels per packed weight block (SYNET_DECONV_BLOCK)
AMX_BLOCK = 32
MAX_PLAN = 1 << 24  # table entries (phases x taps, rows, columns) a geometry may need
FLOAT32 = np.dtype(np.float32)
UINT16 = np.dtype(np.uint16)
INT_FIELDS = ("src_c", "src_h", "src_w", "dst_c", "dst_h", "dst_w", "kernel_y", "kernel_x", "dilation_y",
              "dilation_x", "stride_y", "stride_x", "group")


@dataclasses.dataclass(frozen=True, eq=False)
class DeconvolutionPlan:
    """A planned deconvolution: the C plan's values (`scalars`), its tables and the shapes around it."""

    conv: ConvParams          # normalised
    batch: int
    compatibility: int
    impl: int                 # GEMM or DEPTHWISE
    micro: int                # MICRO_*
    scalars: dict             # field of synet_deconv_plan -> int
    tables: dict              # field of synet_deconv_plan -> int64 array (never empty)
    src_shape: tuple
    dst_shape: tuple
    src_dtypes: tuple         # accepted src dtypes (first: the preferred one)
    dst_dtypes: tuple
    weight_shape: tuple       # the caller's weight layout, for messages
    packed_size: int          # GEMM: uint16 elements of packed weights; depthwise: float32 entries
    pack_units: int           # GEMM: group * kpairs; depthwise: src_c
    weight_steps: tuple       # (ci, co, ky, kx) element steps of the caller's weight layout

    @property
    def info(self) -> str:
        if self.impl == DEPTHWISE:
            return "Depthwise fp32"
        return f"PhaseGemm {MICRO_NAMES[self.micro]}" + (" direct" if self.scalars["direct"] else "")


def _int(value: object, name: str, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name}: expected an int >= {minimum}, got {value}")
    return int(value)


def validate(conv: object) -> ConvParams:
    """A normalised copy of conv, or TypeError / ValueError naming what was expected."""
    if not isinstance(conv, ConvParams):
        raise TypeError(f"conv: expected a synet.ConvParams, got {type(conv).__name__}")
    v = {f: _int(getattr(conv, f), f"conv.{f}", 1) for f in INT_FIELDS}
    v.update({f: _int(getattr(conv, f), f"conv.{f}") for f in ("pad_y", "pad_x", "pad_h", "pad_w")})
    if v["pad_y"] < 0 or v["pad_x"] < 0:
        raise ValueError(f"conv.pad_y, conv.pad_x: expected pads >= 0, got {v['pad_y']}, {v['pad_x']}")
    for f, s, d in (("pad_h", "stride_y", "dilation_y"), ("pad_w", "stride_x", "dilation_x")):
        limit = max(v[s], v[d])  # a negative end pad is PyTorch's output_padding
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
    for axis, src, dst, k, s, d, p0, p1 in (
            ("h", "src_h", "dst_h", "kernel_y", "stride_y", "dilation_y", "pad_y", "pad_h"),
            ("w", "src_w", "dst_w", "kernel_x", "stride_x", "dilation_x", "pad_x", "pad_w")):
        expected = deconvolution_size(v[src], v[k], v[s], v[d], v[p0], v[p1])
        if expected <= 0:
            raise ValueError(f"conv.dst_{axis}: the geometry gives a dst size {expected}; expected >= 1")
        if v[dst] != expected:
            raise ValueError(f"conv.dst_{axis}: expected {expected} = {v[s]}·({v[src]} − 1) + {v[d]}·({v[k]} − 1) + 1 − "
                             f"{v[p0]} − {v[p1]}, got {v[dst]}")
    return ConvParams(v["src_c"], v["src_h"], v["src_w"], src_type, src_format, v["dst_c"], v["dst_h"], v["dst_w"],
                      dst_type, dst_format, v["kernel_y"], v["kernel_x"], v["dilation_y"], v["dilation_x"],
                      v["stride_y"], v["stride_x"], v["pad_y"], v["pad_x"], v["pad_h"], v["pad_w"], g, activation)


def check_sizes(batch: int, conv: ConvParams) -> None:
    """ValueError for a geometry whose tensors overflow 63-bit byte counts or whose tables would be
    absurdly long (building them would never return)."""
    g = conv.group
    sizes = {"src": batch * conv.src_c * conv.src_h * conv.src_w,
             "dst": batch * conv.dst_c * conv.dst_h * conv.dst_w,
             "weight": conv.src_c * conv.kernel_y * conv.kernel_x * (conv.dst_c // g),
             "padded src": batch * (conv.src_c + 32 * g) * (conv.src_h + conv.dilation_y * conv.kernel_y)
                           * (conv.src_w + conv.dilation_x * conv.kernel_x)}
    for name, n in sizes.items():
        if n * 4 + 4096 >= 1 << 63:
            raise ValueError(f"conv: the {name} tensor of {n} elements overflows 64-bit byte sizes")
    entries = (conv.stride_y * conv.kernel_y + conv.stride_x * conv.kernel_x + conv.stride_y * conv.stride_x
               + conv.kernel_y * conv.kernel_x + conv.dst_h + conv.dst_w + conv.dst_h * conv.dst_w // 16)
    if entries > MAX_PLAN:
        raise ValueError(f"conv: the geometry needs {entries} plan entries (stride·kernel, stride_y·stride_x, "
                         f"kernel_y·kernel_x, dst_h + dst_w + dst_h·dst_w/16); expected at most {MAX_PLAN}")


def axis_phases(stride: int, dilation: int, kernel: int, pad_begin: int, src: int, dst: int):
    """Per phase r < stride: its taps [(k, input offset)], first index j0 and count of outputs; and the
    zero padding (low, high) that keeps every tap of every output in range."""
    phases = []
    low = high = 0
    for r in range(stride):
        taps = [(k, (r - k * dilation) // stride) for k in range(kernel) if (r - k * dilation) % stride == 0]
        j0 = -((r - pad_begin) // stride)            # ceil((pad_begin - r) / stride)
        j1 = -((r - pad_begin - dst) // stride)      # ceil((dst + pad_begin - r) / stride)
        count = max(0, j1 - j0)
        phases.append((taps, j0, count))
        if taps and count:
            offsets = [o for _, o in taps]
            low = max(low, -(j0 + min(offsets)))
            high = max(high, j0 + count - 1 + max(offsets) - (src - 1))
    return phases, low, high


def border_outputs(phases, stride: int, pad_begin: int, src: int, dst: int) -> np.ndarray:
    """Flags [dst] of one axis: 1 for an output some tap of whose phase reads outside [0, src)."""
    flags = np.zeros(dst, np.int64)
    for r, (taps, j0, count) in enumerate(phases):
        if taps and count:
            offsets = [o for _, o in taps]
            j = np.arange(j0, j0 + count, dtype=np.int64)
            flags[r - pad_begin + stride * j] = (j + min(offsets) < 0) | (j + max(offsets) >= src)
    return flags


def _table(values) -> np.ndarray:
    """An int64 table, with one extra entry so that no table is empty (the C side reads a pointer)."""
    return np.array(list(values) + [0], np.int64)


def plan(batch: object, conv: object, compatibility: object, micro_bf16: bool, micro_amx: bool,
         amx_permission) -> DeconvolutionPlan:
    """Plan `batch` images of geometry `conv` for the deconvolution kernels of one CPU level: `micro_bf16`
    and `micro_amx` say which micro-kernels the level has; `amx_permission()` asks the OS (called only
    when the plan would use AMX)."""
    batch = _int(batch, "batch", 1)
    conv = validate(conv)
    compat = as_compatibility(compatibility)
    check_sizes(batch, conv)
    nhwc = conv.src_format == TensorFormat.NHWC
    g = conv.group
    cg_in, cg_out = conv.src_c // g, conv.dst_c // g
    depthwise = cg_in == 1 and cg_out == 1
    geo = conv
    if (conv.kernel_y, conv.kernel_x, conv.stride_y, conv.stride_x, conv.pad_y, conv.pad_x, conv.pad_h,
            conv.pad_w) == (1, 1, 1, 1, 0, 0, 0, 0):  # a 1x1 stride-1 deconvolution is one long row
        geo = dataclasses.replace(conv, src_h=1, src_w=conv.src_h * conv.src_w, dst_h=1, dst_w=conv.dst_h * conv.dst_w)
    phases_y, ply, phy = axis_phases(geo.stride_y, geo.dilation_y, geo.kernel_y, geo.pad_y, geo.src_h, geo.dst_h)
    phases_x, plx, phx = axis_phases(geo.stride_x, geo.dilation_x, geo.kernel_x, geo.pad_x, geo.src_w, geo.dst_w)
    hp, wp = geo.src_h + ply + phy, geo.src_w + plx + phx
    src_bf16 = conv.src_type == DataType.BFLOAT16
    soft = bool(compat & Compatibility.BF16_SOFT) or not micro_bf16
    amx = not soft and micro_amx and cg_in >= 16 and not depthwise and bool(amx_permission())
    micro = MICRO_AMX if amx else (MICRO_FP32 if soft else MICRO_BF16)
    width = AMX_BLOCK if amx else BLOCK
    if depthwise:
        cgp, cpt, pix, elem = 1, 1, conv.src_c if nhwc else 1, 4
        direct = False
        buf_size = batch * conv.src_c * hp * wp * 4 + 64
        pad_rows = batch * hp * (1 if nhwc else conv.src_c)
    else:
        cgp = (cg_in + 31) // 32 * 32 if amx else cg_in + (cg_in & 1)
        cpt = pix = g * cgp
        elem = 4 if micro == MICRO_FP32 else 2
        direct = nhwc and src_bf16 and micro != MICRO_FP32 and cgp == cg_in and ply == plx == phy == phx == 0
        buf_size = 0 if direct else batch * hp * wp * cpt * elem + 64
        pad_rows = 0 if direct else batch * hp
    row = wp * pix
    # taps per phase (ry, rx), ky-major, with their offsets in the padded image and kernel positions
    phase_taps: list[int] = []
    phase_tap0: list[int] = []
    tap_offsets: list[int] = []
    tap_ky: list[int] = []
    tap_kx: list[int] = []
    for taps_y, _, _ in phases_y:
        for taps_x, _, _ in phases_x:
            phase_tap0.append(len(tap_offsets))
            phase_taps.append(len(taps_y) * len(taps_x))
            for ky, oy in taps_y:
                for kx, ox in taps_x:
                    tap_offsets.append(oy * row + ox * pix)
                    tap_ky.append(ky)
                    tap_kx.append(kx)
    rows = [(ry, j0 + j) for ry, (_, j0, count) in enumerate(phases_y) for j in range(count)]
    col_first = [ph[1] for ph in phases_x]
    col_count = [ph[2] for ph in phases_x]
    nblocks = (cg_out + width - 1) // width
    # AMX: segments of <= 16 pixels of one phase row; the full ones of a phase go in pairs
    seg_aoff, seg_doff, seg_m, seg_phase, seg_place, units = [], [], [], [], [], []
    if amx:
        for phase in range(geo.stride_y * geo.stride_x):
            ry, rx = divmod(phase, geo.stride_x)
            full: list[int] = []
            tails: list[int] = []
            for r_ry, j in rows:
                if r_ry != ry:
                    continue
                oy = ry - geo.pad_y + geo.stride_y * j
                for i in range(0, col_count[rx], 16):
                    ii = col_first[rx] + i
                    ox = rx - geo.pad_x + geo.stride_x * ii
                    seg_aoff.append(((j + ply) * wp + ii + plx) * cpt)
                    seg_doff.append((oy * geo.dst_w + ox) * (conv.dst_c if nhwc else 1))
                    m = min(16, col_count[rx] - i)
                    seg_m.append(m)
                    seg_phase.append(phase)
                    seg_place.append((oy, ox))
                    (full if m == 16 else tails).append(len(seg_m) - 1)
            units += [(full[k], full[k + 1] if k + 1 < len(full) else -1) for k in range(0, len(full), 2)]
            units += [(k, -1) for k in tails]
        # in output order: the phases that interleave in one output row run back to back, so a thread's
        # share of the tasks is a band of output rows (no cache line written by two threads)
        units.sort(key=lambda unit: seg_place[unit[0]])
    border_y = border_outputs(phases_y, geo.stride_y, geo.pad_y, geo.src_h, geo.dst_h)
    border_x = np.flatnonzero(border_outputs(phases_x, geo.stride_x, geo.pad_x, geo.src_w, geo.dst_w))
    kpairs = len(tap_ky) if depthwise else cgp // 2
    phases = geo.stride_y * geo.stride_x
    weight_offsets, offset = [], 0
    if not depthwise:
        for _ in range(g):
            for phase in range(phases):
                for ob in range(nblocks):
                    lanes = (min(width, cg_out - ob * width) + 15) // 16 * 16
                    weight_offsets.append(offset)
                    offset += phase_taps[phase] * kpairs * lanes * 2
    packed_size = conv.src_c * len(tap_ky) if depthwise else offset + 64
    tables = {
        "phase_taps": _table(phase_taps), "phase_tap0": _table(phase_tap0 + [len(tap_offsets)]),
        "tap_offsets": _table(tap_offsets), "tap_ky": _table(tap_ky), "tap_kx": _table(tap_kx),
        "row_phase": _table(r[0] for r in rows), "row_index": _table(r[1] for r in rows),
        "col_first": _table(col_first), "col_count": _table(col_count),
        "unit_s0": _table(u[0] for u in units), "unit_s1": _table(u[1] for u in units),
        "seg_aoff": _table(seg_aoff), "seg_doff": _table(seg_doff), "seg_m": _table(seg_m),
        "seg_phase": _table(seg_phase), "border_y": _table(border_y), "border_x": _table(border_x),
        "weight_offsets": _table(weight_offsets),
    }
    ntasks = batch * (len(rows) * (1 if nhwc else conv.src_c) if depthwise
                      else g * (len(units) if amx else len(rows)) * nblocks)
    scalars = dict(
        impl=DEPTHWISE if depthwise else GEMM, micro=micro, src_bf16=int(src_bf16),
        dst_bf16=int(conv.dst_type == DataType.BFLOAT16), nhwc=int(nhwc), direct=int(direct),
        act=int(conv.activation), buf_size=buf_size, batch=batch, src_c=geo.src_c, src_h=geo.src_h,
        src_w=geo.src_w, dst_c=geo.dst_c, dst_h=geo.dst_h, dst_w=geo.dst_w, group=g, cg_in=cg_in, cg_out=cg_out,
        kernel_y=geo.kernel_y, kernel_x=geo.kernel_x, dilation_y=geo.dilation_y, dilation_x=geo.dilation_x,
        stride_y=geo.stride_y, stride_x=geo.stride_x, pad_top=geo.pad_y, pad_left=geo.pad_x, padded_h=hp,
        padded_w=wp, pad_low_y=ply, pad_low_x=plx, cg_padded=cgp, pixel_stride=cpt,
        padded_image=hp * wp * (conv.src_c if depthwise else cpt), kpairs=kpairs, block_width=width,
        nblocks=nblocks, nrows=len(rows), nunits=len(units), ntasks=ntasks,
        dst_image=geo.dst_h * geo.dst_w * geo.dst_c, pad_rows=pad_rows, nborder_x=len(border_x),
    )
    ky, kx = conv.kernel_y, conv.kernel_x
    if nhwc:
        src_shape = (batch, conv.src_h, conv.src_w, conv.src_c)
        dst_shape = (batch, conv.dst_h, conv.dst_w, conv.dst_c)
        weight_shape = (conv.src_c, ky, kx, cg_out)
        steps = (ky * kx * cg_out, 1, kx * cg_out, cg_out)
    else:
        src_shape = (batch, conv.src_c, conv.src_h, conv.src_w)
        dst_shape = (batch, conv.dst_c, conv.dst_h, conv.dst_w)
        weight_shape = (conv.src_c, cg_out, ky, kx)
        steps = (cg_out * ky * kx, ky * kx, kx, 1)
    src_dtypes = (BFLOAT16, UINT16) if src_bf16 else (FLOAT32,)
    dst_dtypes = (BFLOAT16, UINT16) if conv.dst_type == DataType.BFLOAT16 else (FLOAT32,)
    return DeconvolutionPlan(conv, batch, int(compat), scalars["impl"], micro, scalars, tables, src_shape, dst_shape,
                             src_dtypes, dst_dtypes, weight_shape, packed_size,
                             conv.src_c if depthwise else g * kpairs, steps)


def weight_array(weight: object, planned: DeconvolutionPlan) -> np.ndarray:
    """The caller's weights as C-contiguous float32 of the plan's element count (ValueError otherwise)."""
    w = np.asarray(weight)
    if w.dtype.kind not in "fiu" and w.dtype != BFLOAT16:
        raise ValueError(f"weight: expected real numbers, got dtype {w.dtype}")
    n = int(np.prod(planned.weight_shape))
    if w.size != n:
        layout = "[srcC, kY, kX, dstC/group]" if planned.conv.src_format == TensorFormat.NHWC \
            else "[srcC, dstC/group, kY, kX]"
        raise ValueError(f"weight: expected {n} elements ({layout} = {'·'.join(map(str, planned.weight_shape))}), "
                         f"got {w.size}")
    return np.ascontiguousarray(w, np.float32)


def bias_array(bias: object, dst_c: int) -> np.ndarray:
    if bias is None:
        return np.zeros(dst_c, np.float32)
    b = np.array(bias, np.float32, copy=True, order="C").reshape(-1)
    if b.size != dst_c:
        raise ValueError(f"bias: expected {dst_c} elements (dstC), got {b.size}")
    return b


def params_array(planned: DeconvolutionPlan, params: object, name: str = "params") -> np.ndarray:
    conv = planned.conv
    return activation_params(conv.activation, params, conv.dst_c, name, allow_single_slope=False,
                             allow_extra_slopes=True)


def exact_weights(weight: np.ndarray, planned: DeconvolutionPlan) -> np.ndarray:
    """The BF16-rounded FP32 weights of the exact-border pass, [group][kernel_y][kernel_x][cg_in][cg_out]."""
    from ._kernels import round_to_bfloat16

    conv = planned.conv
    g, ky, kx = conv.group, conv.kernel_y, conv.kernel_x
    cg_in, cg_out = conv.src_c // g, conv.dst_c // g
    if conv.src_format == TensorFormat.NHWC:
        canon = weight.reshape(g, cg_in, ky, kx, cg_out)
    else:
        canon = weight.reshape(g, cg_in, cg_out, ky, kx).transpose(0, 1, 3, 4, 2)
    return np.ascontiguousarray(round_to_bfloat16(canon).transpose(0, 2, 3, 1, 4)).reshape(-1)


def unpack_weights(packed: np.ndarray, planned: DeconvolutionPlan) -> np.ndarray:
    """The packed weights back in the caller's layout, as float32 (BF16-rounded values): packing them
    again gives the same packed bits (pickling keeps these, never the packed buffer)."""
    s, t, conv = planned.scalars, planned.tables, planned.conv
    g, cg_in, cg_out = s["group"], s["cg_in"], s["cg_out"]
    ky, kx = conv.kernel_y, conv.kernel_x
    canon = np.zeros((g, cg_in, ky, kx, cg_out), np.float32)   # [group, ci, ky, kx, co]
    tap_ky, tap_kx = t["tap_ky"], t["tap_kx"]
    if planned.impl == DEPTHWISE:
        taps = s["kpairs"]
        table = packed.reshape(taps, conv.src_c).T if s["nhwc"] else packed.reshape(conv.src_c, taps)
        canon[:, 0, tap_ky[:taps], tap_kx[:taps], 0] = table
    else:
        phases, kpairs, width, nblocks = s["stride_y"] * s["stride_x"], s["kpairs"], s["block_width"], s["nblocks"]
        for gi in range(g):
            for phase in range(phases):
                ntaps, t0 = int(t["phase_taps"][phase]), int(t["phase_tap0"][phase])
                for ob in range(nblocks):
                    off = int(t["weight_offsets"][(gi * phases + phase) * nblocks + ob])
                    valid = min(width, cg_out - ob * width)
                    lanes = (valid + 15) // 16 * 16
                    block = packed[off:off + ntaps * kpairs * lanes * 2].reshape(ntaps, kpairs, lanes, 2)
                    bits = block[:, :, :valid, :].transpose(0, 1, 3, 2).reshape(ntaps, 2 * kpairs, valid)[:, :cg_in]
                    values = (bits.astype(np.uint32) << 16).view(np.float32)
                    for ti in range(ntaps):
                        canon[gi, :, tap_ky[t0 + ti], tap_kx[t0 + ti], ob * width:ob * width + valid] = values[ti]
    if s["nhwc"]:
        return canon.reshape(conv.src_c, ky, kx, cg_out)
    return np.ascontiguousarray(canon.transpose(0, 1, 4, 2, 3)).reshape(conv.src_c, cg_out, ky, kx)


def has_borders(planned: DeconvolutionPlan) -> bool:
    s = planned.scalars
    return s["padded_h"] > s["src_h"] or s["padded_w"] > s["src_w"]


def functional_conv(x_shape: tuple, x_dtype, w_shape: tuple, stride, padding, output_padding, groups, dilation,
                    layout, activation, out_dtype, out) -> tuple:
    """conv_transpose2d's arguments checked and mapped onto (ConvParams, batch, unbatched, output shape)."""
    from ._conv_params import pads, pair

    fmt = as_format(layout, "layout")
    nhwc = fmt == TensorFormat.NHWC
    if len(x_shape) not in (3, 4):
        raise ValueError(f"x: expected a 4-D {'[N, H, W, C]' if nhwc else '[N, C, H, W]'} array (or 3-D unbatched), "
                         f"got shape {x_shape}")
    unbatched = len(x_shape) == 3
    if unbatched:
        x_shape = (1, *x_shape)
    if len(w_shape) != 4:
        layout_text = "[C_in, kH, kW, C_out/groups]" if nhwc else "[C_in, C_out/groups, kH, kW]"
        raise ValueError(f"weight: expected a 4-D {layout_text} array, got shape {w_shape}")
    if nhwc:
        n, h, wd, c_in = x_shape
        w_in, ky, kx, cg_out = w_shape
    else:
        n, c_in, h, wd = x_shape
        w_in, cg_out, ky, kx = w_shape
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise ValueError(f"groups: expected an int >= 1, got {groups!r}")
    if w_in != c_in:
        raise ValueError(f"weight: expected {c_in} input channels (x's) in dimension 0, got shape {w_shape}")
    if c_in % groups:
        raise ValueError(f"groups: expected a divisor of the {c_in} input channels, got {groups}")
    sy, sx = pair(stride, "stride")
    dy, dx = pair(dilation, "dilation")
    top, left, bottom, right = pads(padding, "padding")
    oy, ox = pair(output_padding, "output_padding", 0)
    if oy >= max(sy, dy) or ox >= max(sx, dx):
        raise ValueError(f"output_padding: expected values < max(stride, dilation) = "
                         f"({max(sy, dy)}, {max(sx, dx)}), got ({oy}, {ox})")
    if min(ky, kx) < 1:
        raise ValueError(f"weight: expected a kernel of at least 1x1, got shape {w_shape}")
    dst_c = cg_out * groups
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
    dst_h = deconvolution_size(h, ky, sy, dy, top, bottom - oy)
    dst_w = deconvolution_size(wd, kx, sx, dx, left, right - ox)
    empty_input = min(n, c_in, h, wd, dst_c) == 0
    if (dst_h <= 0 or dst_w <= 0) and not empty_input:
        raise ValueError(f"padding: {(top, left, bottom, right)} leaves an output of {dst_h}x{dst_w}; expected >= 1x1")
    dst_h, dst_w = max(dst_h, 0), max(dst_w, 0)
    act = as_activation(activation)
    shape = (n, dst_h, dst_w, dst_c) if nhwc else (n, dst_c, dst_h, dst_w)
    if min(shape) == 0:                          # nothing to compute: an empty result
        kind, conv = "empty", ConvParams(max(c_in, 1), 1, 1, src_type, fmt, max(dst_c, 1), 1, 1, dst_type, fmt, 1, 1)
    elif empty_input:                            # no input reaches the output: act(bias) everywhere, computed as a
        kind = "bias"                            # 1x1 deconvolution of one zero channel
        conv = ConvParams(1, dst_h, dst_w, DataType.FLOAT32, fmt, dst_c, dst_h, dst_w, dst_type, fmt, 1, 1,
                          activation=act)
    else:
        kind = "run"
        conv = ConvParams(c_in, h, wd, src_type, fmt, dst_c, dst_h, dst_w, dst_type, fmt, ky, kx, dy, dx, sy, sx,
                          top, left, bottom - oy, right - ox, int(groups), act)
    return conv, n, unbatched, shape[1:] if unbatched else shape, kind


__all__ = ["Activation", "DeconvolutionPlan", "plan", "validate"]
