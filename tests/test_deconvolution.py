"""Deconvolution16b / conv_transpose2d against an independent float64 NumPy reference."""

import dataclasses
import re
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from reference import BF16, activate, activation_slope, assert_close, bf16_round, reference_nd

from synet import (
    Activation,
    Compatibility,
    ConvParams,
    DataType,
    Deconvolution16b,
    _deconvolution_plan,
    conv_transpose2d,
    float32_to_bfloat16,
)
from synet._deconvolution import amx_available

HARDWARE_AMX = amx_available()


# ---------------------------------------------------------------------------------------------
# Helpers (the float64 reference is tests/reference.py's reference_nd)


def to_nhwc(a):
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1))


def to_nchw(a):
    return np.ascontiguousarray(a.transpose(0, 3, 1, 2))


def assert_nans_canonical(y):
    """Every NaN of a transposed convolution's output is the one quiet NaN 0xFFC00000 (BF16 0xFFC0)."""
    y = np.asarray(y)
    bits = y.view(np.uint16 if y.dtype == BF16 else np.uint32)[np.isnan(y.astype(np.float32))]
    canonical = 0xFFC0 if y.dtype == BF16 else 0xFFC00000
    assert (bits == canonical).all(), sorted({hex(b) for b in bits.tolist()})


def run_case(fmt, n, cg_in, cg_out, groups, hw, kernel, stride, dilation, pads, src_bf16, dst_bf16, act, bias,
             seed, compat=0, n_threads=1, params=None, bad_weights=(), bad_inputs=(), bad_bias=()):
    """One context against the reference. pads (top, left, bottom, right): a negative bottom/right is
    PyTorch's output_padding. bad_weights / bad_inputs / bad_bias: (position in [0, 1) of the flat weights /
    input / bias, value) replacements (a value of NaN bits: np.uint32)."""
    rng = np.random.default_rng(seed)
    pads = (pads,) * 4 if isinstance(pads, int) else tuple(pads)
    c_in, c_out = cg_in * groups, cg_out * groups
    x = rng.standard_normal((n, c_in, *hw)).astype(np.float32)
    w = rng.standard_normal((c_in, cg_out, *kernel)).astype(np.float32)
    b = rng.standard_normal(c_out).astype(np.float32) if bias else None
    if act == Activation.PRELU:
        params = rng.uniform(-1, 1, c_out).astype(np.float32)
    for array, replacements in ((w, bad_weights), (x, bad_inputs), (b, bad_bias if bias else ())):
        for position, value in replacements:
            flat = array.reshape(-1).view(np.uint32) if isinstance(value, np.uint32) else array.reshape(-1)
            flat[int(position * array.size)] = value
    ends = (max(pads[2], 0), max(pads[3], 0))
    conv = ConvParams.deconvolution(c_in, hw[0], hw[1], c_out, kernel, stride, dilation, (*pads[:2], *ends), groups,
                                    act, "bf16" if src_bf16 else "f32", "bf16" if dst_bf16 else "f32", fmt)
    if ends != pads[2:]:   # output_padding: ConvParams.deconvolution takes pads >= 0, the context negative end pads
        conv = dataclasses.replace(conv, pad_h=pads[2], pad_w=pads[3], dst_h=conv.dst_h + ends[0] - pads[2],
                                   dst_w=conv.dst_w + ends[1] - pads[3])
    d = Deconvolution16b()
    d.init(n, conv, compat)
    nhwc = fmt == "NHWC"
    xs = to_nhwc(x) if nhwc else x
    if src_bf16:
        xs = xs.astype(BF16)
    d.set_params(np.ascontiguousarray(w.transpose(0, 2, 3, 1)) if nhwc else w, b, params)
    y = d.forward(xs, n_threads=n_threads)
    assert y.dtype == (BF16 if dst_bf16 else np.float32)
    assert y.shape == ((n, conv.dst_h, conv.dst_w, c_out) if nhwc else (n, c_out, conv.dst_h, conv.dst_w))
    pre, mag = reference_nd(bf16_round(x), bf16_round(w), b, stride, pads[:2], pads[2:], dilation, groups)
    ref = activate(pre, act, params)   # (params None: the defaults; taken as FP32, as the op does)
    assert_close(to_nchw(y) if nhwc else y, ref, mag, dst_bf16, activation_slope(act, params), pre)
    assert_nans_canonical(y)
    return d, xs, y


# ---------------------------------------------------------------------------------------------
# Property test over geometries


@st.composite
def geometries(draw):
    fmt = draw(st.sampled_from(["NCHW", "NHWC"]))
    depthwise = draw(st.booleans()) and draw(st.booleans())
    groups = draw(st.integers(1, 6)) if depthwise else draw(st.sampled_from([1, 1, 2, 3]))
    cg_in = 1 if depthwise else draw(st.sampled_from([1, 2, 3, 5, 8, 16, 19, 33]))
    cg_out = 1 if depthwise else draw(st.sampled_from([1, 3, 16, 17, 33, 70]))
    kernel = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    hw = (draw(st.integers(1, 7)), draw(st.integers(1, 21)))
    pads = tuple(draw(st.integers(0, 2)) for _ in range(4))
    dst_h = stride[0] * (hw[0] - 1) + dilation[0] * (kernel[0] - 1) + 1 - pads[0] - pads[2]
    dst_w = stride[1] * (hw[1] - 1) + dilation[1] * (kernel[1] - 1) + 1 - pads[1] - pads[3]
    if dst_h <= 0 or dst_w <= 0:
        pads = (0, 0, 0, 0)
    return dict(fmt=fmt, n=draw(st.integers(1, 2)), cg_in=cg_in, cg_out=cg_out, groups=groups, hw=hw,
                kernel=kernel, stride=stride, dilation=dilation, pads=pads, src_bf16=draw(st.booleans()),
                dst_bf16=draw(st.booleans()), act=draw(st.sampled_from(list(Activation))), bias=draw(st.booleans()),
                seed=draw(st.integers(0, 2**16)), compat=draw(st.sampled_from([0, 0, 0, int(Compatibility.BF16_SOFT)])),
                n_threads=draw(st.integers(1, 2)))


@given(geometries())
def test_matches_reference(case):
    run_case(**case)


def has_border(dst, src, kernel, stride, dilation, pad_begin):
    """Some output of this axis has a tap (o + pad_begin − k·dilation divisible by stride) outside [0, src)."""
    return any((o + pad_begin - k * dilation) % stride == 0 and not 0 <= (o + pad_begin - k * dilation) // stride < src
               for o in range(dst) for k in range(kernel))


BAD_VALUES = [np.nan, np.inf, -np.inf, 3.4e38, -3.4e38]   # ±3.4e38: finite FP32, ±inf in BF16
# NaNs of both signs, quiet and signalling, with payloads (the bits of float32 NaNs), and infinities
BAD_INPUTS = [np.uint32(0x7FC00000), np.uint32(0xFFC00000), np.uint32(0x7FA50000), np.uint32(0xFF812345),
              np.uint32(0x7FC00001), np.inf, -np.inf]


@st.composite
def nonfinite_cases(draw):
    """geometries() with an output_padding and 1-4 weights NaN, ±inf or rounding to ±inf in BF16."""
    case = draw(geometries())
    (sy, sx), (dy, dx) = case["stride"], case["dilation"]
    top, left, bottom, right = case["pads"]
    case["pads"] = (top, left, bottom - draw(st.integers(0, max(sy, dy) - 1)),
                    right - draw(st.integers(0, max(sx, dx) - 1)))
    case["bad_weights"] = draw(st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.sampled_from(BAD_VALUES)),
                                        min_size=1, max_size=4))
    return case


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")   # the reference's inf − inf, 0·inf
@given(nonfinite_cases())
def test_nonfinite_weights_match_reference(case):
    """A NaN/inf weight reaches exactly the outputs whose in-range taps use it: the NaN mask and the
    infinities equal the reference's, the finite outputs are within its tolerance (issue #6)."""
    d, _, _ = run_case(**case)
    conv = d.conv
    borders = has_border(conv.dst_h, conv.src_h, conv.kernel_y, conv.stride_y, conv.dilation_y, conv.pad_y) or \
        has_border(conv.dst_w, conv.src_w, conv.kernel_x, conv.stride_x, conv.dilation_x, conv.pad_x)
    assert ("exact borders" in d.info()) == borders, d.info()


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")   # the reference's inf − inf, 0·inf
@given(nonfinite_cases(), st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.sampled_from(BAD_INPUTS)),
                                   min_size=1, max_size=6),
       st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.sampled_from(BAD_INPUTS)), max_size=2))
def test_nonfinite_inputs_give_the_canonical_nan(case, bad_inputs, bad_bias):
    """NaNs of either sign and payload and infinities in the input (and weights, and bias): the NaN mask and
    infinities equal the reference's, and every NaN output is 0xFFC00000 (x86 keeps the first operand's NaN of
    two, and each level orders a sum's operands its own way: NaNs of both signs met in one sum gave either)."""
    run_case(**case, bad_inputs=bad_inputs, bad_bias=bad_bias)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("groups, dst_c", [(24, 24), (1, 3)])   # depthwise; planar (few outputs)
@pytest.mark.parametrize("kernel, stride", [(4, 2), (3, 1)])
@pytest.mark.parametrize("dtype", [np.float32, BF16])
@pytest.mark.parametrize("act", ["identity", "relu"])
@pytest.mark.parametrize("where", ["input", "weight", "bias"])
@pytest.mark.filterwarnings("ignore:invalid value encountered in cast:RuntimeWarning")   # (NumPy: NaN to BF16)
def test_depthwise_and_planar_nans_canonical(layout, groups, dst_c, kernel, stride, dtype, act, where):
    """The depthwise and planar kernels store their sums as they are on x86: their source copy, weights table
    and bias must hold the canonical NaN only (a positive NaN with a payload in any of them would reach dst)."""
    rng = np.random.default_rng(kernel + stride + dst_c)
    x = rng.standard_normal((1, 24, 9, 37)).astype(np.float32)
    w = rng.standard_normal((24, dst_c // groups, kernel, kernel)).astype(np.float32)
    bias = rng.standard_normal(dst_c).astype(np.float32)
    operand = {"input": x, "weight": w, "bias": bias}[where]
    operand.reshape(-1).view(np.uint32)[::29] = 0x7FA10000   # (BF16: 0x7FA1, quieted 0x7FE1)
    if layout == "NHWC":
        x, w = to_nhwc(x), to_nhwc(w)
    y = conv_transpose2d(x.astype(dtype), w, bias, stride=stride, padding=1, groups=groups, layout=layout,
                         activation=act, out_dtype=dtype)
    assert np.isnan(y.astype(np.float32)).any()
    assert_nans_canonical(y)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("groups, dst_c", [(1, 16), (24, 24), (1, 3)])   # GEMM; depthwise; planar
@pytest.mark.parametrize("bits", [0x7F800001, 0x7FFFFFFF, 0xFFFFFFFF, 0xFF800001])
@pytest.mark.filterwarnings("ignore:invalid value encountered in cast:RuntimeWarning")
def test_nan_inputs_whose_rounding_carries_stay_nans(layout, groups, dst_c, bits):
    """FP32 NaN inputs whose BF16 rounding, done on the bits, would carry out of the NaN: a signalling NaN with
    a low payload (0x7F800001 + 0x7FFF is +inf's BF16), all-ones payloads (0xFFFFFFFF + 0x7FFF wraps to +0).
    They must reach the same outputs as the default NaN does, as canonical NaNs."""
    rng = np.random.default_rng(dst_c)
    x = rng.standard_normal((1, 24, 9, 37)).astype(np.float32)
    w = rng.standard_normal((24, dst_c // groups, 4, 4)).astype(np.float32)
    if layout == "NHWC":
        x, w = to_nhwc(x), to_nhwc(w)
    results = []
    for nan in (0x7FC00000, bits):
        given = x.copy()
        given.reshape(-1).view(np.uint32)[::31] = nan
        results.append(conv_transpose2d(given, w, stride=2, padding=1, groups=groups, layout=layout))
    assert np.isnan(results[0]).any()
    np.testing.assert_array_equal(np.isnan(results[1]), np.isnan(results[0]))
    assert_nans_canonical(results[1])


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
@pytest.mark.parametrize("act", list(Activation))
def test_activations(fmt, act):
    run_case(fmt, 1, 20, 18, 1, (5, 6), (3, 3), (2, 2), (1, 1), (1, 0, 0, 1), False, False, act, True, int(act))


@pytest.mark.parametrize("params", [[0.2], [0.3, 2.5, 99.0]])
def test_activation_params_extra_values_ignored(params):
    act = Activation.LEAKY_RELU if len(params) == 1 else Activation.RESTRICT_RANGE
    run_case("NCHW", 1, 4, 4, 1, (4, 4), (2, 2), (2, 2), (1, 1), 0, False, False, act, True, 3,
             params=np.array(params, np.float32))


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_prelu_extra_slopes_ignored(fmt):
    """The seed's callers pass max(dstC, 2) values: a single output channel gets 2, the first is its slope."""
    conv = ConvParams.deconvolution(3, 4, 4, 1, 2, 2, activation="prelu", format=fmt)
    x = np.random.default_rng(8).standard_normal(3 * 16).astype(np.float32)
    w = np.random.default_rng(9).standard_normal(3 * 4).astype(np.float32)
    d = Deconvolution16b(1, conv)
    d.set_params(w, None, [0.25, 7.0])
    y = d.forward(x)
    d.set_params(w, None, [1.0])
    z = d.forward(x)
    np.testing.assert_array_equal(y, np.where(z > 0, z, np.float32(0.25) * z))


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
@pytest.mark.parametrize("cg_in, cg_out, groups", [(64, 64, 1), (32, 48, 2), (1, 1, 24), (1, 1, 100), (3, 5, 1)])
def test_workload_shapes(fmt, cg_in, cg_out, groups):
    """Sizes like the benchmarks' (both kernels: AMX for >= 16 channels per group, vector otherwise)."""
    run_case(fmt, 2, cg_in, cg_out, groups, (9, 11), (4, 4), (2, 2), (1, 1), 1, False, False,
             Activation.IDENTITY, True, 7)


@pytest.mark.parametrize("stride, kernel, pads", [(3, 3, (0, 0, 0, 0)), (3, 5, (1, 2, 0, 1)), (4, 8, (0, 2, 0, 2)),
                                                  (8, 16, (0, 4, 0, 4)), (8, 3, (0, 1, 0, -3)), (16, 16, (0, 0, 0, 0)),
                                                  (16, 20, (0, 9, 0, 2)), (17, 17, (0, 3, 0, 3))])
@pytest.mark.parametrize("width", [1, 5, 13, 40])
@pytest.mark.parametrize("act, dst_bf16", [(Activation.IDENTITY, False), (Activation.RELU, True),
                                           (Activation.SWISH, False)])
def test_nchw_phases_stored_together(stride, kernel, pads, width, act, dst_bf16):
    """Channels first with stride_x 2-16 and IDENTITY / RELU: the sums of every x phase of a column chunk are
    kept and each channel's columns stored contiguously (edges through the epilogue); 17 phases, and other
    activations, store phase by phase. A 1-D layer like a vocoder's (k16 s8 p4)."""
    run_case("NCHW", 1, 8, 24, 1, (2, width), (1, kernel), (1, stride), (1, 1), pads, False, dst_bf16, act, True,
             stride * 100 + width)


def assert_same_bits_at_every_offset(d, xs, y):
    """d.forward(xs) into a dst at every offset into a cache line (guards around it), 1 and 2 threads: y's bits."""
    for offset in range(0, 64, y.itemsize):
        raw = np.full(y.nbytes + 256, 0xAB, np.uint8)
        start = (-raw.ctypes.data) % 64 + 64 + offset
        dst = raw[start:start + y.nbytes].view(y.dtype).reshape(y.shape)
        for threads in (1, 2):
            dst[...] = 0
            d.forward(xs, None, dst, n_threads=threads)
            assert np.array_equal(dst.view(np.uint8), y.view(np.uint8)), (offset, threads)
            assert (raw[:start] == 0xAB).all() and (raw[start + y.nbytes:] == 0xAB).all()


@pytest.mark.parametrize("hw, kernel, stride, pads, cg_out, dst_bf16, act, bad", [
    ((64, 64), 2, 2, 0, 64, False, Activation.IDENTITY, ()),         # 4 MiB out: streamed, runs of 2 rows
    ((64, 64), 2, 2, 0, 64, False, Activation.RELU, ((0.3, np.nan),)),  # ... NaN through RELU, exact borders
    ((150, 37), 3, 2, 1, 40, False, Activation.RELU, ()),            # rows not whole windows, 40 channels
    ((70, 45), 4, 3, (1, 2, 0, -1), 48, True, Activation.RELU, ()),  # BF16 out, stride 3, output_padding
    ((1, 700), 16, 8, 4, 24, False, Activation.IDENTITY, ()),        # one 5600-column row: chunk after chunk
])
def test_nchw_windows_carried_and_streamed(hw, kernel, stride, pads, cg_out, dst_bf16, act, bad):
    """Channels first, stored phases together: 16-column windows start on a store boundary, a row's
    part-filled last window waits for the next row (or column chunk) of the task, whole windows of a large
    output go past the caches. dst at every offset into a cache line, guards around it, 1 and 2 threads:
    the same bits as the reference-checked run."""
    d, xs, y = run_case("NCHW", 1, 8, cg_out, 1, hw, (kernel, kernel), (stride, stride), (1, 1), pads, False,
                        dst_bf16, act, True, 4000 + cg_out, bad_weights=bad)
    if bad:
        assert np.isnan(y).any() and np.isfinite(y).any()
    assert_same_bits_at_every_offset(d, xs, y)


@pytest.mark.parametrize("hw, kernel, stride, pads, cg_out, groups, act, bad", [
    ((64, 64), 2, 2, 0, 64, 1, Activation.IDENTITY, ()),            # 4 MiB out: the tiles' stores streamed
    ((64, 64), 2, 2, 0, 64, 1, Activation.RELU, ((0.3, np.nan),)),  # ... NaN through RELU
    ((64, 90), 2, 2, 0, 48, 1, Activation.IDENTITY, ()),            # 48 channels: a call of 32, one of 16
    ((64, 64), 4, 2, 1, 32, 2, Activation.RELU, ()),                # groups, borders
    ((82, 82), 3, 2, 1, 40, 1, Activation.IDENTITY, ()),            # no whole blocks: the tile buffer
    ((64, 64), 2, 2, 0, 120, 1, Activation.IDENTITY, ()),           # a pixel of part lines: plain stores
    ((64, 64), 2, 2, 0, 72, 2, Activation.RELU, ()),                # the second group's block starts mid-line
])
def test_nhwc_tiles_streamed(hw, kernel, stride, pads, cg_out, groups, act, bad):
    """Channels last, an FP32 output of 4 MiB or more: the micro-kernel's stores to dst bypass the caches
    where each is a whole cache line (dst's block on a line, a pixel of whole lines; a channel count of 120
    streamed to unaligned addresses and crashed). dst at every offset into a line, guards around it, 1 and 2
    threads: the same bits as the reference-checked run."""
    d, xs, y = run_case("NHWC", 1, 8, cg_out, groups, hw, (kernel, kernel), (stride, stride), (1, 1), pads,
                        False, False, act, True, 5000 + cg_out, bad_weights=bad)
    assert y.nbytes >= 4 << 20
    if bad:
        assert np.isnan(y).any() and np.isfinite(y).any()
    assert_same_bits_at_every_offset(d, xs, y)


def lanes_plan(conv, micro_bf16=True, compat=0):
    """Whether the planner makes conv a lanes plan (the vdpbf16ps kernel's pixels-in-lanes tasks) for a CPU
    with the vdpbf16ps micro-kernel (micro_bf16) and without AMX."""
    planned = _deconvolution_plan.plan(1, _deconvolution_plan.validate(conv), compat, micro_bf16, False, 32, 16,
                                       lambda: False)
    return bool(planned.scalars["lanes"])


@pytest.mark.parametrize("fmt, width, kernel, stride, act, compat, micro_bf16, lanes", [
    ("NCHW", 32, 4, 2, Activation.IDENTITY, 0, True, True),     # 64 output columns a row: two vectors a phase
    ("NCHW", 31, 4, 2, Activation.IDENTITY, 0, True, False),    # 62
    ("NCHW", 32, 3, 1, Activation.RELU, 0, True, True),         # stride 1: 32 columns
    ("NCHW", 30, 3, 1, Activation.RELU, 0, True, False),        # 30
    ("NCHW", 40, 2, 2, Activation.SWISH, 0, True, False),       # the epilogue's other activations
    ("NCHW", 40, 3, 3, Activation.IDENTITY, 0, True, False),    # stride 3: three phases along a row
    ("NHWC", 40, 2, 2, Activation.IDENTITY, 0, True, False),    # channels last: the pixel tiles
    ("NCHW", 40, 2, 2, Activation.IDENTITY, Compatibility.BF16_SOFT, True, False),  # the FP32 micro-kernel
    ("NCHW", 40, 2, 2, Activation.IDENTITY, 0, False, False),   # no vdpbf16ps kernel
    ("NCHW", 40, 9, 2, Activation.IDENTITY, 0, True, False),    # 81 taps
])
def test_lanes_plans_chosen(fmt, width, kernel, stride, act, compat, micro_bf16, lanes):
    """Channels first, stride_x 1 or 2, IDENTITY / RELU, at most SYNET_LANES_TAPS taps and rows of at least
    LANES_ROW_MIN output columns a phase, on the vdpbf16ps micro-kernel: a lanes plan; else the pixel tiles."""
    conv = ConvParams.deconvolution(32, 3, width, 24, kernel, stride, 1, (kernel - stride + 1) // 2,
                                    activation=act, format=fmt)
    assert lanes_plan(conv, micro_bf16, compat) == lanes
    planned = _deconvolution_plan.plan(1, _deconvolution_plan.validate(conv), compat, micro_bf16, False, 32, 16,
                                       lambda: False)
    assert planned.info.endswith(" lanes") == lanes


@pytest.mark.parametrize("cg_in, cg_out, groups, hw, kernel, stride, dilation, pads, bad", [
    (40, 20, 1, (3, 35), (4, 4), (2, 2), (1, 1), 1, ()),    # two taps a phase along x; 20 pairs: blocks of 16, 4
    (10, 70, 1, (2, 37), (3, 3), (1, 1), (1, 1), 1, ()),    # stride 1; pad channels; blocks of 64 and 6 outputs
    (12, 24, 2, (4, 40), (2, 2), (2, 2), (1, 1), 0, ()),    # groups; a tap a phase
    (24, 8, 1, (3, 33), (3, 3), (2, 2), (2, 2), (2, 1, 0, -1), ()),   # dilation, uneven pads, output_padding
    (64, 32, 1, (2, 70), (2, 2), (2, 2), (1, 1), 0, ()),    # 140 outputs a row: two chunks and a part one
    (16, 16, 1, (3, 40), (4, 4), (2, 2), (1, 1), 1, ((0.3, np.nan), (0.6, np.inf))),   # exact borders
])
@pytest.mark.parametrize("src_bf16, dst_bf16, act", [(False, False, Activation.IDENTITY),
                                                     (True, True, Activation.RELU), (False, True, Activation.RELU)])
def test_nchw_pixels_in_lanes(cg_in, cg_out, groups, hw, kernel, stride, dilation, pads, bad, src_bf16, dst_bf16,
                              act):
    """Lanes plans (at avx512_bf16 and amx: 16 pixels of one output channel in a vector, the weights of a few
    channels broadcast): against the reference, with the same bits at every dst offset and on 2 threads."""
    d, xs, y = run_case("NCHW", 2, cg_in, cg_out, groups, hw, kernel, stride, dilation, pads, src_bf16, dst_bf16,
                        act, True, 6000 + cg_out, bad_weights=bad)
    assert lanes_plan(d.conv) or not d.info().startswith("PhaseGemm avx512bf16")
    assert_same_bits_at_every_offset(d, xs, y)


@pytest.mark.parametrize("cg_out, groups", [(16, 1), (64, 1), (80, 1), (128, 1), (48, 2), (40, 1)])
@pytest.mark.parametrize("act", [Activation.IDENTITY, Activation.RELU, Activation.SWISH])
@pytest.mark.parametrize("dst_bf16", [False, True])
@pytest.mark.parametrize("kernel, stride", [(1, 1), (2, 2), (3, 2)])
def test_nhwc_tiles_stored_from_registers(cg_out, groups, act, dst_bf16, kernel, stride):
    """Channels last with whole blocks of 16 output channels and IDENTITY / RELU: the micro-kernel stores its
    sums to dst itself (other blocks and activations go through the tile buffer); groups offset the blocks."""
    run_case("NHWC", 2, 24, cg_out, groups, (5, 7), (kernel, kernel), (stride, stride), (1, 1), 0, False, dst_bf16,
             act, True, cg_out + kernel)


@pytest.mark.parametrize("width, kernel, stride, pads", [
    (600, 4, 2, 1),           # 1200 columns: two row chunks of the channels-first kernel, paired phases
    (530, 3, 2, (1, 2, 0, 1)),  # asymmetric pads: phases with different column ranges at the chunk edge
    (1100, 3, 1, 1),          # stride 1, 1100 columns
    (400, 5, 3, 2),           # stride 3 (scalar phases), 1199 columns
])
def test_depthwise_rows_wider_than_a_chunk(width, kernel, stride, pads):
    """Channels-first depthwise rows are assembled 1024 columns at a time: every column of each chunk."""
    run_case("NCHW", 1, 1, 1, 3, (2, width), (kernel, kernel), (stride, stride), (1, 1), pads, False, False,
             Activation.RELU, True, 21)


@pytest.mark.parametrize("width", [4, 7, 40])
@pytest.mark.parametrize("kernel, dilation", [(1, 1), (2, 1), (3, 1), (4, 1), (5, 2), (9, 3)])
@pytest.mark.parametrize("left, right", [(0, 0), (1, 0), (2, 1), (3, 0), (1, -1), (0, 2)])
def test_depthwise_stride2_column_pairs(width, kernel, dilation, left, right):
    """Channels-first depthwise with stride_x 2 computes output columns 2k, 2k + 1 as one output of each
    x phase, whichever phase column 0 belongs to (the left pad's parity), odd and even widths, phases with
    no taps (kernel 1), output_padding; the padded copy's edges wider than a vector (kernel 9,
    dilation 3)."""
    run_case("NCHW", 1, 1, 1, 3, (3, width), (kernel, kernel), (2, 2), (dilation, dilation), (1, left, 0, right),
             False, False, Activation.IDENTITY, True, 23)


@pytest.mark.parametrize("width, stride", [(64, 2), (37, 2), (45, 1), (200, 2)])
@pytest.mark.parametrize("act, bad", [(Activation.IDENTITY, ()), (Activation.RELU, ()),
                                      (Activation.RELU, ((0.3, np.nan), (0.7, -np.inf)))])
def test_depthwise_rows_assembled_in_dst(width, stride, act, bad):
    """Channels-first depthwise FP32 rows with IDENTITY / RELU and stride_x <= 2 are assembled in dst
    itself, the bias and activation added as each vector is stored (tails of rows by lanes); NaN from
    a NaN weight stays NaN through RELU, as the epilogue keeps it."""
    _, _, y = run_case("NCHW", 2, 1, 1, 12, (9, width), (4, 4), (stride, stride), (1, 1), 1, False, False, act,
                       True, width + stride, bad_weights=bad)
    if bad:
        assert np.isnan(y).any()


@pytest.mark.parametrize("channels", [12, 40, 64, 70])
@pytest.mark.parametrize("act, dst_bf16, bad", [(Activation.IDENTITY, False, ()), (Activation.RELU, False, ()),
                                                (Activation.RELU, False, ((0.3, np.nan), (0.6, np.inf))),
                                                (Activation.RELU, True, ()), (Activation.SWISH, False, ())])
@pytest.mark.parametrize("hw", [(6, 19), (2, 150)])  # a phase row of 10 pixels; of 75, in two tiles (64 + 11)
def test_depthwise_channels_last_tiles_stored_to_dst(channels, act, dst_bf16, bad, hw):
    """Channels-last depthwise tiles with FP32 output and IDENTITY / RELU store bias + sum (activated)
    straight to dst, vectors and the tail channels past them; BF16 outputs and other activations go
    through the tile buffer and the epilogue."""
    _, _, y = run_case("NHWC", 2, 1, 1, channels, hw, (4, 4), (2, 2), (1, 1), 1, False, dst_bf16, act, True,
                       channels + 7, bad_weights=bad)
    if bad:
        assert np.isnan(y).any()


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("channels, width, stride", [(12, 9, 2), (70, 21, 2), (16, 40, 1), (5, 33, 1), (4, 7, 3)])
@pytest.mark.parametrize("act", ["identity", "relu"])
def test_depthwise_bf16_outputs_rounded_as_stored(layout, channels, width, stride, act):
    """Depthwise BF16 outputs with IDENTITY / RELU are rounded as the kernels store them (nearest-even,
    every NaN the canonical 0xFFC0): bit for bit the FP32 output rounded by float32_to_bfloat16, on vectors
    and tails, channels whose output is the bias alone (values on BF16 ties, a subnormal, a negative NaN),
    inf and NaN from the source; no element around the output is written."""
    rng = np.random.default_rng(channels * width + stride)
    x = rng.standard_normal((2, channels, 5, width)).astype(np.float32)
    x[1, 1, 2, 3], x[1, 2, 0, 0] = np.inf, np.nan
    w = rng.standard_normal((channels, 1, 4, 4)).astype(np.float32)
    w[:4] = 0.0   # channels 0-3: the bias alone
    bias = rng.standard_normal(channels).astype(np.float32)
    bias[:4] = np.array([0x3F808000, 0x00018000, 0xFFC0FFFF, 0xBF818000], np.uint32).view(np.float32)
    x[:, :4] = 1.0   # (no inf * 0 in the bias-only channels)
    if layout == "NHWC":
        x, w = to_nhwc(x), to_nhwc(w)
    kwargs = dict(stride=stride, padding=1, groups=channels, layout=layout, activation=act)
    y32 = conv_transpose2d(x, w, bias, **kwargs)
    guarded = np.full(y32.size + 64, 0x5A5A, np.uint16)
    out = guarded[32:-32].reshape(y32.shape)
    conv_transpose2d(x, w, bias, out=out, **kwargs)
    assert np.array_equal(out, float32_to_bfloat16(y32).view(np.uint16))
    assert (guarded[:32] == 0x5A5A).all() and (guarded[-32:] == 0x5A5A).all()
    at = (slice(None), slice(0, 4)) if layout == "NCHW" else (Ellipsis, slice(0, 4))
    corner = out[at].reshape(2, 4, -1) if layout == "NCHW" else np.moveaxis(out[at], -1, 1).reshape(2, 4, -1)
    expected = [0x3F80, 0x0002, 0xFFC0, 0xBF82 if act == "identity" else 0]   # (RELU keeps NaN)
    assert (corner == np.array(expected, np.uint16)[None, :, None]).all()


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("channels, kernel, stride", [(32, 1, 1), (32, 2, 2), (48, 4, 2), (8, 3, 2)])
def test_gemm_bf16_outputs_rounded_as_stored(layout, channels, kernel, stride):
    """BF16 outputs of the GEMM kernels (AMX from 16 input channels where the CPU has it, else the FP32
    micro-kernel) are rounded as float32_to_bfloat16 rounds: nearest-even, every NaN the canonical 0xFFC0, a
    subnormal kept (the levels with AVX512-BF16 round by vcvtneps2bf16, which flushes subnormals, so those
    vectors go the integer way). Bit for bit the FP32 output rounded; output channels whose value is the bias
    alone (values on ties, subnormals, NaNs with payloads and signs) give the expected bits;
    the NaNs in other channels' vectors than the subnormals (channels last: a NaN sends its whole vector the
    integer way)."""
    rng = np.random.default_rng(channels + 10 * kernel + stride)
    x = rng.standard_normal((2, channels, 6, 9)).astype(np.float32)
    w = rng.standard_normal((channels, 40, kernel, kernel)).astype(np.float32)
    alone = [0, 1, 2, 3, 16, 17]   # output channels whose value is the bias alone
    w[:, alone] = 0.0
    bias = rng.standard_normal(40).astype(np.float32)
    bias[alone] = np.array([0x3F818000, 0x3F808000, 0x00018000, 0x80008001, 0x7FFFFFFF, 0xFFC0FFFF],
                           np.uint32).view(np.float32)
    if layout == "NHWC":
        x, w = to_nhwc(x), to_nhwc(w)
    kwargs = dict(stride=stride, padding=kernel // 2 if stride == 2 else 0, layout=layout)
    y32 = conv_transpose2d(x, w, bias, **kwargs)
    y16 = conv_transpose2d(x, w, bias, out_dtype="bf16", **kwargs).view(np.uint16)
    assert np.array_equal(y16, float32_to_bfloat16(y32).view(np.uint16))
    corner = y16[:, alone] if layout == "NCHW" else np.moveaxis(y16[..., alone], -1, 1)
    expected = np.array([0x3F82, 0x3F80, 0x0002, 0x8001, 0xFFC0, 0xFFC0], np.uint16)
    assert (corner.reshape(2, 6, -1) == expected[None, :, None]).all()


@pytest.mark.parametrize("pads", [(1, 1), (0, 1), (2, 3), (3, 1), (1, 0), (2, 2)])   # (top, left)
@pytest.mark.parametrize("width", [16, 37, 64])
@pytest.mark.parametrize("act, out_dtype", [("identity", None), ("relu", "bf16")])
def test_depthwise_columns_marched_down_rows(pads, width, act, out_dtype):
    """Channels first, kernel 4 stride 2 with an odd left pad: the two x phases' whole vectors are computed
    column by column down a phase's rows, each row's source vectors reused by the next row (tails row by
    row; an even left pad takes the row-by-row loop): the same bits as channels last, with inf and NaN in
    the source, on every row and column."""
    rng = np.random.default_rng(width + 10 * pads[0] + pads[1])
    channels = 6
    x = rng.standard_normal((2, channels, 9, width)).astype(np.float32)
    x[0, 1, 4, 5], x[1, 3, 8, width - 1], x[1, 2, 0, 0] = np.inf, np.nan, -np.inf
    w = rng.standard_normal((channels, 1, 4, 4)).astype(np.float32)
    bias = rng.standard_normal(channels).astype(np.float32)
    kwargs = dict(stride=2, padding=pads, groups=channels, activation=act, out_dtype=out_dtype)
    first = conv_transpose2d(x, w, bias, layout="NCHW", **kwargs)
    last = conv_transpose2d(to_nhwc(x), to_nhwc(w), bias, layout="NHWC", **kwargs)
    bits = np.uint16 if out_dtype else np.uint32
    assert np.array_equal(first.view(bits), to_nchw(last).view(bits))
    assert np.isnan(first.astype(np.float32)).any() and np.isinf(first.astype(np.float32)).any()


@pytest.mark.parametrize("width, stride, dst_bf16", [(3, 2, True), (1, 2, False), (5, 1, True), (4, 3, False)])
def test_depthwise_narrow_rows_batched(width, stride, dst_bf16):
    """Narrow channels-first depthwise rows are assembled many to a buffer (each row's tail vector spills
    into the next) and stored together: every row right, with a per-channel activation."""
    run_case("NCHW", 2, 1, 1, 5, (9, width), (3, 3), (stride, stride), (1, 1), 1, False, dst_bf16,
             Activation.PRELU, True, 22)


@pytest.mark.parametrize("pad_left", [0, 1, 2, 3])
@pytest.mark.parametrize("kernel", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("act, dst", [("identity", "f32"), ("relu", "bf16")])
def test_nchw_stride2_rows_match_nhwc(pad_left, kernel, act, dst):
    """Channels first with stride 2: the two x phases of a row are stored together (their columns
    interleaved in registers), the columns only one phase covers on their own; the same bits as NHWC."""
    cin, cout, h, w = 20, 70, 5, 13
    outs = []
    for fmt in ("NCHW", "NHWC"):
        conv = ConvParams.deconvolution(cin, h, w, cout, kernel, 2, 1, 0, 1, act, "f32", dst, fmt)
        conv = dataclasses.replace(conv, pad_x=pad_left, dst_w=conv.dst_w - pad_left)
        d = Deconvolution16b(1, conv)
        wt = np.random.default_rng(kernel).standard_normal((cin, cout, kernel, kernel)).astype(np.float32)
        x = np.random.default_rng(9).standard_normal((1, cin, h, w)).astype(np.float32)
        if fmt == "NHWC":
            wt, x = to_nhwc(wt), to_nhwc(x)
        d.set_params(wt, np.linspace(-1, 1, cout, dtype=np.float32))
        y = d.forward(x)
        outs.append(y if fmt == "NCHW" else to_nchw(y))
    bits = np.uint16 if dst == "bf16" else np.uint32
    assert np.array_equal(outs[0].view(bits), outs[1].view(bits))


@pytest.mark.parametrize("stride", [1, 2])
def test_bf16_input_nan_payloads_kept(stride):
    """A BF16 input's NaNs enter the channels-last image as they are (NCHW: transposed in registers; NHWC:
    copied), so both layouts give the same bits (every NaN output the canonical one)."""
    cin, cout, h, w = 20, 24, 5, 13
    rng = np.random.default_rng(31)
    x = rng.standard_normal((1, cin, h, w)).astype(np.float32).astype(BF16)
    bits = x.view(np.uint16)
    flat = bits.reshape(-1)
    where = rng.choice(flat.size, 12, replace=False)
    flat[where] = np.array([0x7F81, 0xFFA0, 0x7FC5, 0xFF81] * 3, np.uint16)
    wt = rng.standard_normal((cin, cout, 3, 3)).astype(np.float32)
    outs = []
    for fmt in ("NCHW", "NHWC"):
        d = Deconvolution16b(1, ConvParams.deconvolution(cin, h, w, cout, 3, stride, 1, 1, 1, "identity", "bf16",
                                                         "f32", fmt))
        d.set_params(wt if fmt == "NCHW" else to_nhwc(wt), np.linspace(-1, 1, cout, dtype=np.float32))
        y = d.forward(x if fmt == "NCHW" else to_nhwc(x))
        outs.append(y if fmt == "NCHW" else to_nchw(y))
    assert np.isnan(outs[0]).any()
    assert np.array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))


def test_kernel1_stride1_bf16_direct():
    d, _, _ = run_case("NHWC", 1, 32, 40, 1, (7, 5), (1, 1), (1, 1), (1, 1), 0, True, True,
                       Activation.RELU, True, 11)
    if HARDWARE_AMX:
        assert "direct" in d.info() and d.external_buffer_size() == 0


# ---------------------------------------------------------------------------------------------
# Threads and concurrency


@pytest.mark.parametrize("cg_in", [3, 40])
@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
def test_thread_count_agnostic(fmt, cg_in):
    rng = np.random.default_rng(5)
    conv = ConvParams.deconvolution(cg_in, 24, 20, 72, 4, 2, 1, 1, format=fmt, activation="gelu")
    d = Deconvolution16b(2, conv)
    d.set_params(rng.standard_normal(cg_in * 16 * 72).astype(np.float32), rng.standard_normal(72))
    x = rng.standard_normal((2, cg_in, 24, 20) if fmt == "NCHW" else (2, 24, 20, cg_in)).astype(np.float32)
    one = d.forward(x, n_threads=1)
    for n in (2, 3):
        assert np.array_equal(one.view(np.uint32), d.forward(x, n_threads=n).view(np.uint32))


def test_depthwise_thread_count_agnostic():
    rng = np.random.default_rng(6)
    conv = ConvParams.deconvolution(16, 40, 40, 16, 4, 2, 1, 1, group=16)
    d = Deconvolution16b(1, conv)
    d.set_params(rng.standard_normal(16 * 16).astype(np.float32))
    x = rng.standard_normal((1, 16, 40, 40)).astype(np.float32)
    assert d.info().startswith("Depthwise fp32")
    assert np.array_equal(d.forward(x, n_threads=1), d.forward(x, n_threads=2))


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
@pytest.mark.parametrize("cg_in, cg_out, groups", [(3, 72, 1), (40, 72, 1), (1, 1, 16)])
def test_nonfinite_weights_thread_count_agnostic(fmt, cg_in, cg_out, groups):
    """The border pass computes each output in one task: the same bits (NaN included) for 1, 2, 3 threads."""
    rng = np.random.default_rng(12)
    c_in = cg_in * groups
    conv = ConvParams.deconvolution(c_in, 24, 20, cg_out * groups, 4, 2, 1, 1, groups, format=fmt, activation="prelu")
    d = Deconvolution16b(2, conv)
    w = rng.standard_normal(c_in * 16 * cg_out).astype(np.float32)
    w[[0, 5, w.size // 2, w.size - 1]] = [np.nan, np.inf, -np.inf, np.nan]
    d.set_params(w, rng.standard_normal(cg_out * groups), rng.uniform(-1, 1, cg_out * groups))
    assert d.info().endswith(" + exact borders")
    x = rng.standard_normal((2, c_in, 24, 20) if fmt == "NCHW" else (2, 24, 20, c_in)).astype(np.float32)
    one = d.forward(x, n_threads=1)
    assert np.isnan(one).any() and np.isfinite(one).any()
    for n in (2, 3):
        assert np.array_equal(one.view(np.uint32), d.forward(x, n_threads=n).view(np.uint32))


@pytest.mark.parametrize("fmt", ["NCHW", "NHWC"])
@pytest.mark.parametrize("cg_in, cg_out, groups, kernel, stride, pad", [
    (3, 5, 1, 3, 2, 1),       # PhaseGemm with borders
    (40, 24, 1, 4, 2, 1),     # PhaseGemm (AMX where available)
    (1, 1, 8, 3, 1, 0),       # depthwise with borders
    (8, 8, 1, 2, 2, 0),       # every output's taps in range: no borders
    (16, 8, 1, 1, 1, 0),      # 1x1 stride 1: one long row, no borders
])
def test_finite_weights_skip_the_border_pass(fmt, cg_in, cg_out, groups, kernel, stride, pad):
    """Finite weights: no FP32 weight copy, no border pass (info, internal_buffer_size), the same bits after
    non-finite weights were set and replaced; non-finite weights add exactly the copy when borders exist."""
    rng = np.random.default_rng(13)
    c_in = cg_in * groups
    conv = ConvParams.deconvolution(c_in, 6, 7, cg_out * groups, kernel, stride, 1, pad, groups, format=fmt)
    d = Deconvolution16b(1, conv)
    w = rng.standard_normal(c_in * kernel * kernel * cg_out).astype(np.float32)
    x = rng.standard_normal(c_in * 6 * 7).astype(np.float32)
    d.set_params(w)
    info, size, before = d.info(), d.internal_buffer_size(), d.forward(x)
    assert "exact borders" not in info
    bad = w.copy()
    bad[w.size // 3] = np.nan
    d.set_params(bad)
    borders = has_border(conv.dst_h, 6, kernel, stride, 1, pad) or has_border(conv.dst_w, 7, kernel, stride, 1, pad)
    assert d.info() == (info + " + exact borders" if borders else info)
    assert d.internal_buffer_size() == size + (w.size * 4 if borders else 0)
    d.set_params(w)
    assert d.info() == info and d.internal_buffer_size() == size
    assert np.array_equal(d.forward(x).view(np.uint32), before.view(np.uint32))


def test_one_context_many_python_threads():
    rng = np.random.default_rng(7)
    conv = ConvParams.deconvolution(32, 12, 12, 24, 3, 2, 1, 1, format="NHWC")
    d = Deconvolution16b(1, conv)
    d.set_params(rng.standard_normal(32 * 9 * 24).astype(np.float32), rng.standard_normal(24))
    xs = [rng.standard_normal((1, 12, 12, 32)).astype(np.float32) for _ in range(8)]
    expected = [d.forward(x, n_threads=1) for x in xs]
    barrier = threading.Barrier(4)

    def work(i):
        barrier.wait()
        return [np.array_equal(d.forward(xs[(i + k) % 8], n_threads=1 + k % 2), expected[(i + k) % 8])
                for k in range(8)]

    with ThreadPoolExecutor(4) as pool:
        assert all(all(r) for r in pool.map(work, range(4)))


def amx_order_sum(x, w):
    """sum_c x[..., c] * w[c, n] in the AMX tile's order (tdpbf16ps): per block of 32 channels, the even
    channels' products summed from zero in order, the odd ones' likewise, then total += even + odd; every
    addition rounded to float32 (products of BF16 values are exact in float32)."""
    x, w = np.asarray(x, np.float32), np.asarray(w, np.float32)
    total = np.zeros(x.shape[:-1] + w.shape[1:], np.float32)
    for c0 in range(0, x.shape[-1], 32):
        sums = []
        for parity in (0, 1):
            part = np.zeros_like(total)
            for c in range(c0 + parity, min(c0 + 32, x.shape[-1]), 2):
                part = part + x[..., c, None] * w[c]
            sums.append(part)
        total = total + (sums[0] + sums[1])
    return total


@pytest.mark.parametrize("weights", ["pairs", "wide"])
@pytest.mark.parametrize("compat", [0, Compatibility.BF16_SOFT], ids=["hardware", "soft"])
@pytest.mark.parametrize("src_c, dst_c, group, layout", [(70, 24, 1, "NHWC"), (40, 20, 1, "NCHW"), (12, 10, 2, "NHWC"),
                                                         (6, 33, 1, "NCHW"), (16, 16, 1, "NHWC")])
def test_sums_in_the_amx_tiles_order(src_c, dst_c, group, layout, compat, weights, monkeypatch):
    """Every kernel (AMX, vdpbf16ps, the FP32 one at every level, with its weights as BF16 pairs or widened to
    float32 rows) sums in tdpbf16ps's order, so every CPU level gives the same bits (SPEC section 8): against a
    NumPy model of that order, kernel 2 stride 2 (one tap per output), every output of the BF16-rounded
    operands bit for bit."""
    monkeypatch.setattr(_deconvolution_plan, "WIDE_MAX", -1 if weights == "pairs" else 1 << 40)
    rng = np.random.default_rng(src_c)
    cg_in, cg_out = src_c // group, dst_c // group
    x = bf16_round(rng.standard_normal((2, src_c, 5, 7))).astype(np.float32)
    w = bf16_round(rng.standard_normal((src_c, cg_out, 2, 2))).astype(np.float32)
    bias = rng.standard_normal(dst_c).astype(np.float32)
    expected = np.empty((2, dst_c, 10, 14), np.float32)
    for g in range(group):
        xs = x[:, g * cg_in:(g + 1) * cg_in].transpose(0, 2, 3, 1)            # n, y, x, ci
        for ky in range(2):
            for kx in range(2):
                sums = amx_order_sum(xs, w[g * cg_in:(g + 1) * cg_in, :, ky, kx]) + bias[g * cg_out:(g + 1) * cg_out]
                expected[:, g * cg_out:(g + 1) * cg_out, ky::2, kx::2] = sums.transpose(0, 3, 1, 2)
    conv = ConvParams.deconvolution(src_c, 5, 7, dst_c, 2, 2, group=group, format=layout)
    d = Deconvolution16b(2, conv, compat)
    if layout == "NHWC":
        d.set_params(w.transpose(0, 2, 3, 1).copy(), bias)
        got = d.forward(x.transpose(0, 2, 3, 1).copy()).transpose(0, 3, 1, 2)
    else:
        d.set_params(w, bias)
        got = d.forward(x)
    assert np.array_equal(got.view(np.uint32), expected.view(np.uint32)), d.info()


# ---------------------------------------------------------------------------------------------
# Types, buffers, context life cycle


def test_uint16_bits_and_external_buffer():
    rng = np.random.default_rng(9)
    conv = ConvParams.deconvolution(8, 5, 5, 8, 2, 2, src_type="bf16", dst_type="bf16")
    d = Deconvolution16b(1, conv)
    d.set_params(rng.standard_normal(8 * 8 * 4).astype(np.float32))
    x = rng.standard_normal((1, 8, 5, 5)).astype(BF16)
    expected = d.forward(x)
    dst = np.zeros((1, 8, 10, 10), np.uint16)
    buf = np.empty(max(d.external_buffer_size(), 1), np.uint8)
    assert d.forward(x.view(np.uint16), buf, dst) is dst
    assert np.array_equal(dst, expected.view(np.uint16))
    assert d.internal_buffer_size() > 0


def test_seed_example():
    conv = ConvParams.deconvolution(4, 3, 3, 4, kernel=2, stride=2, format="NHWC")
    assert (conv.dst_h, conv.dst_w) == (6, 6)
    src = (np.arange(36, dtype=np.float32) * 0.01).reshape(1, 3, 3, 4)
    weight = (np.arange(64, dtype=np.float32) * 0.02)
    d = Deconvolution16b()
    d.init(1, conv)
    assert d.enable()
    d.set_params(weight, np.zeros(4, np.float32), None)
    dst = np.zeros((1, 6, 6, 4), np.float32)
    d.forward(src, None, dst)
    ref, mag = reference_nd(bf16_round(to_nchw(src)), bf16_round(weight.reshape(4, 2, 2, 4).transpose(0, 3, 1, 2)),
                            None, (2, 2), (0, 0), (0, 0), (1, 1), 1)
    assert_close(to_nchw(dst), ref, mag, False)


def test_init_same_arguments_keeps_weights_and_clear():
    conv = ConvParams.deconvolution(4, 3, 3, 4, 2, 2)
    d = Deconvolution16b(1, conv)
    d.set_params(np.ones(64, np.float32))
    d.init(1, ConvParams.deconvolution(4, 3, 3, 4, 2, 2))
    d.forward(np.ones((1, 4, 3, 3), np.float32))
    d.init(2, conv)
    with pytest.raises(RuntimeError, match="set_params"):
        d.forward(np.ones((2, 4, 3, 3), np.float32))
    d.clear()
    assert not d.enable()
    with pytest.raises(RuntimeError, match="init"):
        d.forward(np.ones((2, 4, 3, 3), np.float32))


def test_conv_params_deconvolution():
    c = ConvParams.deconvolution(8, 5, 7, 6, (3, 2), (2, 3), (1, 2), (1, 0, 2, 1), 2, "relu", "bf16", "f32", "nhwc")
    assert (c.dst_h, c.dst_w) == (2 * 4 + 3 - 3, 3 * 6 + 2 + 1 - 1)
    assert (c.pad_y, c.pad_x, c.pad_h, c.pad_w) == (1, 0, 2, 1)
    assert c.src_type == DataType.BFLOAT16 and c.dst_type == DataType.FLOAT32 and c.activation == Activation.RELU
    assert ConvParams.deconvolution(1, 4, 4, 1, 3, pad=(1, 0)).dst_h == 4
    with pytest.raises(ValueError, match="dst size"):
        ConvParams.deconvolution(1, 1, 1, 1, 1, pad=1)


# ---------------------------------------------------------------------------------------------
# Errors


def good_conv(**changes):
    conv = ConvParams.deconvolution(4, 3, 3, 6, 2, 2)
    for key, value in changes.items():
        setattr(conv, key, value)
    return conv


@pytest.mark.parametrize("changes, match", [
    (dict(dst_h=7), "dst_h: expected 6"),
    (dict(pad_y=5, pad_h=5), "dst size"),
    (dict(group=4), "group: expected a divisor"),
    (dict(group=3), "group: expected a divisor"),
    (dict(src_type=DataType.UINT8), "src_type: expected FLOAT32 or BFLOAT16"),
    (dict(dst_type="int32"), "dst_type: expected FLOAT32 or BFLOAT16"),
    (dict(src_format="NCHW", dst_format="NHWC"), "dst_format: expected the src_format"),
    (dict(src_format="NCWH"), "NCHW"),
    (dict(kernel_y=0), "kernel_y: expected an int >= 1"),
    (dict(activation="softmax"), "activation"),
])
def test_init_errors(changes, match):
    with pytest.raises(ValueError, match=match):
        Deconvolution16b().init(1, good_conv(**changes))


@pytest.mark.parametrize("args, match", [
    # src 2^21 x 2^21 x 2^21 floats: 2^65 bytes (the first tensor that overflows is named)
    ((1 << 21, 1 << 21, 1 << 21, 1, 1, 1), r"conv: the src tensor of 9223372036854775808 elements overflows 64-bit"),
    ((1, 1 << 20, 1 << 20, 1 << 23, 1, 1), r"conv: the dst tensor of 9223372036854775808 elements overflows 64-bit"),
    ((1 << 16, 1, 1, 1 << 16, (1 << 15, 1 << 16), 1), r"conv: the weight tensor of 9223372036854775808 elements"),
    ((1, 1, 1, 1, 1, (1 << 24, 1)), r"conv: the geometry needs 50331655 plan entries .*expected at most 16777216"),
    ((1, 1 << 14, 1 << 14, 1, 1, 1), r"conv: the geometry needs 16826375 plan entries"),
    # tiny tensors, but groups x stride phases x channel blocks of packed-weight offsets: planning took seconds
    # and memory without bound (2^17 groups, stride 64: 2^29 offsets)
    ((1 << 18, 1, 1, 1 << 17, 1, 64, 1, 0, 1 << 17), r"conv: the geometry needs 536875142 plan entries"),
    ((1, 1, 1, 1 << 32, 1, 1), r"conv: the geometry needs 268435465 plan entries"),
])
def test_init_size_errors(args, match):
    """A geometry whose tensors overflow 63-bit byte counts, or whose tables would be absurdly long."""
    with pytest.raises(ValueError, match=match):
        Deconvolution16b().init(1, ConvParams.deconvolution(*args))


def test_functional_refuses_absurd_plans_of_tiny_tensors():
    """1 MiB of x and of weights, a 1x1 output per channel, 2^17 groups at stride 64: planning ran for many
    seconds towards ~20 GB (a Python list of 2^29 packed-weight offsets); now the plan-size ValueError."""
    g = 1 << 17
    with pytest.raises(ValueError, match=r"conv: the geometry needs \d+ plan entries"):
        conv_transpose2d(np.ones((1, 2 * g, 1, 1), np.float32), np.ones((2 * g, 1, 1, 1), np.float32),
                         stride=64, groups=g)


def test_init_type_errors():
    with pytest.raises(TypeError, match="ConvParams"):
        Deconvolution16b().init(1, {"src_c": 4})
    with pytest.raises(ValueError, match="batch"):
        Deconvolution16b().init(0, good_conv())


def test_set_params_errors():
    d = Deconvolution16b()
    with pytest.raises(RuntimeError, match="init"):
        d.set_params(np.ones(48, np.float32))
    d.init(1, good_conv())
    with pytest.raises(ValueError, match=r"weight: expected 96 elements"):
        d.set_params(np.ones(95, np.float32))
    with pytest.raises(ValueError, match=r"bias: expected 6 elements"):
        d.set_params(np.ones(96, np.float32), np.ones(5, np.float32))
    d.init(1, good_conv(activation=Activation.PRELU))
    with pytest.raises(ValueError, match=r"params: PRELU needs its slopes \(6 per-channel values\), got None"):
        d.set_params(np.ones(96, np.float32))
    with pytest.raises(ValueError, match=r"params: PRELU expects at least 6 slope\(s\).*got 2"):
        d.set_params(np.ones(96, np.float32), None, np.ones(2, np.float32))
    d.init(1, good_conv(activation=Activation.RESTRICT_RANGE))
    with pytest.raises(ValueError, match=r"params: RESTRICT_RANGE expects 2 value\(s\), got 1"):
        d.set_params(np.ones(96, np.float32), None, [1.0])


def test_forward_errors():
    d = Deconvolution16b(1, good_conv())
    x = np.ones((1, 4, 3, 3), np.float32)
    with pytest.raises(RuntimeError, match="set_params"):
        d.forward(x)
    d.set_params(np.ones(96, np.float32))
    with pytest.raises(TypeError, match="src"):
        d.forward(x.tolist())
    with pytest.raises(ValueError, match="src: expected dtype float32"):
        d.forward(x.astype(np.float64))
    with pytest.raises(ValueError, match="C-contiguous"):
        d.forward(np.ones((1, 4, 3, 6), np.float32)[..., ::2])
    with pytest.raises(ValueError, match="elements"):
        d.forward(np.ones((1, 4, 3, 4), np.float32))
    with pytest.raises(ValueError, match="dst: expected dtype float32"):
        d.forward(x, None, np.ones((1, 6, 6, 6), np.float64))
    with pytest.raises(ValueError, match="dst: expected 216 elements"):
        d.forward(x, None, np.ones((1, 6, 6, 5), np.float32))
    if d.external_buffer_size():
        with pytest.raises(ValueError, match="buf: expected dtype uint8"):
            d.forward(x, np.ones(d.external_buffer_size(), np.int8))
        with pytest.raises(ValueError, match="buf: expected >="):
            d.forward(x, np.ones(d.external_buffer_size() - 1, np.uint8))
    with pytest.raises(TypeError, match="buf"):
        d.forward(x, bytearray(10_000))
    with pytest.raises(ValueError, match="n_threads"):
        d.forward(x, n_threads=0)


# ---------------------------------------------------------------------------------------------
# conv_transpose2d


try:
    import torch  # noqa: F811
    import torch.nn.functional as F
except Exception:  # pragma: no cover - torch is optional
    torch = None


@pytest.mark.skipif(torch is None, reason="torch not installed")
@pytest.mark.parametrize("kw", [
    dict(stride=2, padding=1, output_padding=1, groups=2, dilation=(1, 2)),
    dict(stride=(3, 1), padding=(0, 2), output_padding=(2, 0), groups=1, dilation=1),
    dict(stride=1, padding=0, output_padding=0, groups=4, dilation=3),
    dict(stride=2, padding=1, output_padding=(1, 1), groups=8, dilation=1),
])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_conv_transpose2d_matches_torch(kw, layout):
    rng = np.random.default_rng(10)
    x = rng.standard_normal((2, 8, 5, 7)).astype(np.float32)
    w = rng.standard_normal((8, 24 // kw["groups"], 3, 2)).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32)
    t = F.conv_transpose2d(torch.from_numpy(bf16_round(x)), torch.from_numpy(bf16_round(w)),
                           torch.from_numpy(b.astype(np.float64)), **kw).numpy()
    if layout == "NHWC":
        y = to_nchw(conv_transpose2d(to_nhwc(x), w.transpose(0, 2, 3, 1), b, layout="NHWC", **kw))
    else:
        y = conv_transpose2d(x, w, b, **kw)
    assert y.shape == t.shape
    scale = np.abs(bf16_round(x)).max() * np.abs(bf16_round(w)).max() * 8 * 6
    np.testing.assert_allclose(y, t, rtol=0, atol=1e-5 * scale)


def test_conv_transpose2d_forms():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, 4, 4)).astype(np.float32)
    w = rng.standard_normal((3, 2, 2, 2)).astype(np.float32)
    y = conv_transpose2d(x, w, stride=2)                       # unbatched
    assert y.shape == (2, 8, 8) and y.dtype == np.float32
    assert np.array_equal(conv_transpose2d(x.tolist(), w.tolist(), stride=2), y)   # array-likes
    yb = conv_transpose2d(x, w, stride=2, out_dtype="bf16")
    assert yb.dtype == BF16
    assert np.array_equal(yb, y.astype(BF16))
    assert conv_transpose2d(x.astype(BF16), w, stride=2).dtype == BF16
    out = np.empty((2, 8, 8), np.uint16)
    assert conv_transpose2d(x, w, stride=2, out=out) is out
    assert np.array_equal(out, y.astype(BF16).view(np.uint16))
    r = conv_transpose2d(x, w, stride=2, activation="PRelu", activation_params=[0.5, -1.0])
    expected = np.where(y > 0, y, np.array([0.5, -1.0], np.float32)[:, None, None] * y)
    np.testing.assert_allclose(r, expected, rtol=1e-6, atol=1e-6)
    assert np.array_equal(conv_transpose2d(x, w, stride=2, padding=(1, 0, 0, 1)), y[:, 1:, :7])


def test_conv_transpose2d_errors():
    x = np.ones((1, 4, 3, 3), np.float32)
    w = np.ones((4, 2, 3, 3), np.float32)
    with pytest.raises(ValueError, match="output_padding"):
        conv_transpose2d(x, w, stride=2, output_padding=2)
    with pytest.raises(ValueError, match="groups"):
        conv_transpose2d(x, w, groups=3)
    with pytest.raises(ValueError, match="input channels"):
        conv_transpose2d(x, np.ones((3, 2, 3, 3), np.float32))
    with pytest.raises(ValueError, match="out: expected shape"):
        conv_transpose2d(x, w, out=np.empty((1, 2, 4, 4), np.float32))
    with pytest.raises(ValueError, match="x: expected real numbers"):
        conv_transpose2d(np.array([["a"]]), w)
    with pytest.raises(ValueError, match="padding"):
        conv_transpose2d(x, w, padding=3)
    with pytest.raises(ValueError, match="layout"):
        conv_transpose2d(x, w, layout="CHWN")


def test_conv_transpose2d_out_checked_after_the_plan_is_cached():
    """out= on a cached plan goes through the C-API check; each bad out still raises its message."""
    x = np.ones((1, 4, 3, 3), np.float32)
    w = np.ones((4, 2, 3, 3), np.float32)
    good = np.empty((1, 2, 5, 5), np.float32)
    assert conv_transpose2d(x, w, out=good) is good
    read_only = np.empty((1, 2, 5, 5), np.float32)
    read_only.flags.writeable = False
    shared = np.empty(200, np.float32)
    for out, message in [(np.empty((1, 2, 5, 4), np.float32), "out: expected shape (1, 2, 5, 5), got (1, 2, 5, 4)"),
                         (np.empty((1, 2, 5, 5), np.float64), "out: expected dtype float32, got float64"),
                         (read_only, "out: expected a writeable C-contiguous array"),
                         (np.empty((5, 5, 2, 1), np.float32).T, "out: expected a writeable C-contiguous array"),
                         (shared[:50].reshape(1, 2, 5, 5), "out: must not overlap x")]:
        assert conv_transpose2d(x, w, out=good) is good   # the plan is cached
        source = shared[14:50].reshape(1, 4, 3, 3) if out.base is shared else x
        with pytest.raises(ValueError, match="^" + re.escape(message)):
            conv_transpose2d(source, w, out=out)
    np.testing.assert_array_equal(good, conv_transpose2d(x, w))


@pytest.mark.parametrize("name, params", [("elu", [1.0]), ("elu", [0.3]), ("hswish", [3.0, 1 / 6]), ("mish", [20.0]),
                                          ("swish", [1.0]), ("swish", [0.7]), ("gelu", [])])
def test_transcendental_activations_within_half_ulp(name, params):
    """Every finite bfloat16 input with |x| < 60 (the pre-activation is exact: x·1 + 0): the fused activation is
    the float64 value rounded once to float32, within 0.5 ulp (float32 libm composites were up to 130 ulp off)."""
    x = (np.arange(65536, dtype=np.uint32) << 16).view(np.float32)
    x = x[np.isfinite(x) & (np.abs(x) < 60)]
    got = conv_transpose2d(x.reshape(1, 1, 1, -1), np.ones((1, 1, 1, 1), np.float32), activation=name,
                           activation_params=params or None).reshape(-1).astype(np.float64)
    ref = activate(x.astype(np.float64), Activation[name.upper()], params or None)
    ulp = np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)   # ulp of float32 at |ref|
    err = np.abs(got - ref) / np.maximum(ulp, 2.0 ** -149)
    assert err.max() <= 0.5 + 1e-9, (x[err.argmax()], got[err.argmax()], ref[err.argmax()], err.max())
