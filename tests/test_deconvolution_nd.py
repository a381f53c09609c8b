"""conv_transpose1d / conv_transpose3d and Deconvolution3d16b against an independent float64 reference
(and PyTorch in float64 where installed); 1-D and 3-D agree bit for bit with the 2-D form."""

import contextlib
import functools
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from reference import BF16, activate, activation_slope, assert_close, bf16_round, reference_nd

import synet
from synet import Activation, ConvParams3d, Deconvolution3d16b
from synet import _deconvolution_plan as planning

FUNCTIONS = {1: synet.conv_transpose1d, 2: synet.conv_transpose2d, 3: synet.conv_transpose3d}
LAYOUTS = {1: ("NCL", "NLC"), 2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}


@st.composite
def cases(draw, dims, width=None):
    """A transposed convolution of `dims` dimensions, small; `width` draws the last axis's size if given."""
    groups = draw(st.sampled_from([1, 1, 2, "depthwise"]))
    if groups == "depthwise":
        groups = c_in = c_out = draw(st.integers(1, 6))
    else:
        c_in = groups * draw(st.integers(1, 20 if dims == 1 else 9))
        c_out = groups * draw(st.integers(1, 20 if dims == 1 else 9))
    size = tuple(draw(st.integers(1, 9 if dims == 1 else 4)) for _ in range(dims if width is None else dims - 1))
    size += () if width is None else (draw(width),)
    kernel = tuple(draw(st.integers(1, 4 if dims == 1 else 3)) for _ in range(dims))
    stride = tuple(draw(st.integers(1, 3)) for _ in range(dims))
    dilation = tuple(draw(st.integers(1, 2)) for _ in range(dims))
    extra = tuple(draw(st.integers(0, max(s, d) - 1)) for s, d in zip(stride, dilation))
    full = [s * (i - 1) + d * (k - 1) + 1 + o for i, k, s, d, o in zip(size, kernel, stride, dilation, extra)]
    begin = tuple(draw(st.integers(0, max(0, f - 1) // 2)) for f in full)
    end = tuple(draw(st.integers(0, max(0, f - 1 - b) // 2)) for f, b in zip(full, begin))
    act = draw(st.sampled_from(list(Activation)))
    return dict(dims=dims, groups=groups, c_in=c_in, c_out=c_out, size=size, kernel=kernel, stride=stride,
                dilation=dilation, extra=extra, begin=begin, end=end, act=act, batch=draw(st.integers(1, 2)),
                layout=draw(st.sampled_from(LAYOUTS[dims])), src=draw(st.sampled_from(["f32", "bf16"])),
                dst=draw(st.sampled_from(["f32", "bf16"])), threads=draw(st.sampled_from([1, 2])),
                seed=draw(st.integers(0, 2**16)))


def run_case(case):
    dims, g = case["dims"], case["groups"]
    rng = np.random.default_rng(case["seed"])
    x = rng.standard_normal((case["batch"], case["c_in"], *case["size"])).astype(np.float32)
    w = rng.standard_normal((case["c_in"], case["c_out"] // g, *case["kernel"])).astype(np.float32)
    bias = rng.standard_normal(case["c_out"]).astype(np.float32)
    act = case["act"]
    params = rng.uniform(-1, 1, case["c_out"]) if act == Activation.PRELU else None   # None: the defaults
    channels_last = case["layout"] in ("NLC", "NHWC", "NDHWC")
    xs = np.moveaxis(x, 1, -1).copy() if channels_last else x
    ws = np.moveaxis(w, 1, -1).copy() if channels_last else w
    if case["src"] == "bf16":
        xs = xs.astype(BF16)
    got = FUNCTIONS[dims](xs, ws, bias, case["stride"], case["begin"] + case["end"], case["extra"], g,
                          case["dilation"], layout=case["layout"], activation=act,
                          activation_params=params,
                          out_dtype=BF16 if case["dst"] == "bf16" else np.float32, n_threads=case["threads"])
    if channels_last:
        got = np.moveaxis(got, -1, 1)
    end = tuple(e - o for e, o in zip(case["end"], case["extra"]))
    ref, mag = reference_nd(bf16_round(x), bf16_round(w), bias, case["stride"], case["begin"], end,
                            case["dilation"], g)
    ref = activate(ref, act, params)
    assert got.shape == ref.shape
    return got, ref, mag, activation_slope(act, params)


@given(cases(1))
def test_conv_transpose1d_matches_reference(case):
    got, ref, mag, slope = run_case(case)
    assert_close(got, ref, mag, case["dst"] == "bf16", slope)


@given(cases(3))
def test_conv_transpose3d_matches_reference(case):
    got, ref, mag, slope = run_case(case)
    assert_close(got, ref, mag, case["dst"] == "bf16", slope)


@pytest.mark.parametrize("layout", ["NCL", "NLC"])
@pytest.mark.parametrize("groups", [1, 4, 16])
def test_1d_is_the_2d_kernel_with_height_one(layout, groups):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 16, 37)).astype(np.float32)
    w = rng.standard_normal((16, 32 // groups, 5)).astype(np.float32)
    if layout == "NLC":
        x, w = np.moveaxis(x, 1, -1).copy(), np.moveaxis(w, 1, -1).copy()
    one = synet.conv_transpose1d(x, w, None, 3, (2, 1), 1, groups, 2, layout=layout, activation="relu")
    two = synet.conv_transpose2d(x[:, None] if layout == "NLC" else x[:, :, None], w[:, None] if layout == "NLC"
                                 else w[:, :, None], None, (1, 3), (0, 2, 0, 1), (0, 1), groups, (1, 2),
                                 layout="NHWC" if layout == "NLC" else "NCHW", activation="relu")
    assert np.array_equal(one.view(np.uint32), two.reshape(one.shape).view(np.uint32))


@pytest.mark.parametrize("layout", ["NCDHW", "NDHWC"])
def test_3d_with_depth_one_is_the_2d_result(layout):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 24, 1, 6, 7)).astype(np.float32)
    w = rng.standard_normal((24, 20, 1, 4, 4)).astype(np.float32)
    if layout == "NDHWC":
        x, w = np.moveaxis(x, 1, -1).copy(), np.moveaxis(w, 1, -1).copy()
    three = synet.conv_transpose3d(x, w, None, (1, 2, 2), (0, 1, 1), layout=layout)
    two = synet.conv_transpose2d(x[:, 0] if layout == "NDHWC" else x[:, :, 0],
                                 w[:, 0] if layout == "NDHWC" else w[:, :, 0], None, 2, 1,
                                 layout="NHWC" if layout == "NDHWC" else "NCHW")
    assert np.array_equal(three.view(np.uint32).reshape(-1), two.view(np.uint32).reshape(-1))


@contextlib.contextmanager
def planar_everywhere():
    """The planar kernel for every plan of 1-12 output channels (up to three blocks of PLANAR_OUT_MAX) and up to
    192 input channels a group, its narrow rows too (the functional forms' plan caches emptied before and
    after)."""
    chosen = planning.PLANAR_MAX_IN
    planning.PLANAR_MAX_IN = {1: dict.fromkeys(range(1, 13), 192)}
    synet.clear_plan_cache()
    try:
        yield
    finally:
        planning.PLANAR_MAX_IN = chosen
        synet.clear_plan_cache()


@st.composite
def planar_cases(draw, dims):
    """1-12 output channels a group (a task's block of PLANAR_OUT_MAX, several, and a part-filled last one) and
    up to 192 input channels a group, stride along x <= 2: the planar kernel's plans under planar_everywhere
    (any dims, layout, groups, padding, dilation, activation, dtypes, threads)."""
    # rows up to 60 wide: whole vectors, summed by blocks of rows and channels, and tails
    case = draw(cases(dims, width=st.integers(1, 60)).filter(lambda c: c["stride"][-1] <= 2))
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    cg_out = draw(st.sampled_from([1, 2, 3, 4, 5, 7, 8, 9, 12]))
    cg_in = draw(st.integers(1, 192))
    return dict(case, groups=groups, c_in=groups * cg_in, c_out=groups * cg_out)


@pytest.mark.parametrize("dims", [1, 2, 3])
@given(data=st.data())
def test_planar_plans_match_reference(dims, data):
    """Few output channels (the planar kernel: a group's output channels' taps over its input planes; a
    channels-last source transposed into them) against the float64 reference, in 1-, 2- and 3-D."""
    case = data.draw(planar_cases(dims))
    with planar_everywhere():
        got, ref, mag, slope = run_case(case)
    assert_close(got, ref, mag, case["dst"] == "bf16", slope)


@pytest.mark.parametrize("c_in, c_out, groups, width, planar, planar_nhwc", [
    (64, 3, 1, 32, True, True), (1024, 1, 1, 32, True, True), (4096, 4, 4, 32, True, True),
    (4, 8, 2, 32, True, True), (24, 24, 24, 4, True, True), (1025, 1, 1, 32, False, False),
    (1024, 1, 1, 16, True, True), (256, 2, 1, 16, True, True), (257, 2, 1, 16, False, False),
    (64, 4, 1, 16, True, True), (65, 3, 1, 16, False, False), (16, 1, 1, 8, True, True), (17, 1, 1, 8, False, False),
    (8, 2, 1, 8, True, True), (9, 2, 1, 8, False, False), (4, 4, 1, 8, True, True), (5, 4, 1, 8, False, False),
    (2, 1, 1, 7, False, False), (512, 4, 1, 32, True, True),
    (513, 4, 1, 32, False, False),
    # 5-32 output channels a group: channels first; channels last 5-8 of at most PLANAR_NHWC_MAX_IN input channels
    (16, 8, 1, 32, True, False), (17, 8, 1, 32, False, False), (32, 16, 2, 32, True, False),
    (8, 12, 1, 32, True, False), (9, 12, 1, 32, False, False), (4, 32, 1, 32, True, False),
    (4, 33, 1, 32, False, False), (8, 8, 1, 16, True, False), (9, 8, 1, 16, False, False),
    (4, 16, 1, 16, True, False), (4, 17, 1, 16, False, False), (2, 6, 1, 8, True, True), (3, 6, 1, 8, False, False),
    (4, 8, 1, 32, True, True), (5, 8, 1, 32, True, False), (8, 16, 2, 32, True, True), (1, 12, 1, 32, True, False)])
def test_planar_kernel_chosen_for_few_output_channels(c_in, c_out, groups, width, planar, planar_nhwc):
    """Few output channels a group and at most PLANAR_MAX_IN input channels a group for them and their rows (k4
    s2 p1: 2 x width output columns): the planar kernel ("Planar fp32"; a depthwise plan is its one-channel
    case, at every width), else the GEMM; channels last, more than PLANAR_OUT_MAX output channels a group only
    up to 8 of them and PLANAR_NHWC_MAX_IN input channels (at stride 2)."""
    for layout, chosen in (("NCHW", planar), ("NHWC", planar_nhwc)):
        expected = ("Depthwise" if c_in == c_out == groups else "Planar") if chosen else "PhaseGemm"
        conv = synet.ConvParams.deconvolution(c_in, 4, width, c_out, 4, 2, pad=1, group=groups, format=layout)
        info = synet.Deconvolution16b(1, conv).info()
        assert info.startswith(expected), (layout, info)


@pytest.mark.parametrize("c_in, c_out, width, stride, planar_nhwc", [
    (1, 9, 32, 1, True), (1, 16, 32, 1, True), (1, 16, 31, 1, False), (1, 17, 32, 1, False), (2, 9, 32, 1, False),
    (1, 9, 32, 2, False), (4, 8, 16, 1, False), (4, 8, 32, 1, True), (5, 8, 32, 1, False)])
def test_planar_kernel_chosen_channels_last(c_in, c_out, width, stride, planar_nhwc):
    """Channels last, 5-8 output channels of at most PLANAR_NHWC_MAX_IN input channels (and PLANAR_MAX_IN's for
    the rows), or 9-PLANAR_NHWC_WIDE of one input channel at stride 1 on rows of >= 32 columns: the planar kernel
    (the GEMM's sums there are 1-2 channel pairs a tap), with the bits of the channels-first planar plan."""
    conv = synet.ConvParams.deconvolution(c_in, 4, width, c_out, 3, stride, pad=1, format="NHWC")
    info = synet.Deconvolution16b(1, conv).info()
    assert info.startswith("Planar" if planar_nhwc else "PhaseGemm"), info
    if planar_nhwc:
        rng = np.random.default_rng(c_out)
        x = rng.standard_normal((2, c_in, 4, width)).astype(np.float32)
        w = rng.standard_normal((c_in, c_out, 3, 3)).astype(np.float32)
        bias = rng.standard_normal(c_out).astype(np.float32)
        first = synet.conv_transpose2d(x, w, bias, stride, 1, activation="relu")
        last = synet.conv_transpose2d(np.ascontiguousarray(x.transpose(0, 2, 3, 1)),
                                      np.ascontiguousarray(w.transpose(0, 2, 3, 1)), bias, stride, 1,
                                      layout="NHWC", activation="relu")
        np.testing.assert_array_equal(last.transpose(0, 3, 1, 2), first)


@pytest.mark.parametrize("c_in, c_out, height, width, dilation, planar, planar_nhwc", [
    (32, 1, 8, 4, 1, True, False), (33, 1, 8, 4, 1, False, False), (16, 2, 8, 4, 1, True, False),
    (17, 2, 8, 4, 1, False, False), (64, 1, 8, 8, 1, True, False), (65, 1, 8, 8, 1, False, False),
    (8, 8, 8, 4, 1, True, False), (9, 8, 8, 4, 1, False, False), (8, 8, 4, 8, 1, True, False),
    (8, 8, 4, 4, 1, False, False), (8, 4, 2, 4, 1, True, False), (8, 12, 8, 8, 1, True, False),
    (9, 12, 8, 8, 1, False, False), (16, 8, 16, 16, 1, True, False), (17, 8, 16, 16, 1, False, False),
    (32, 8, 32, 32, 1, True, False), (33, 8, 32, 32, 1, False, False), (4, 16, 8, 4, 1, True, False),
    (5, 16, 8, 4, 1, False, False), (8, 8, 8, 4, 2, False, False)])
def test_planar_kernel_chosen_for_kernel_2_stride_2(c_in, c_out, height, width, dilation, planar, planar_nhwc):
    """Kernel 2, stride 2 (dilation 1), channels first: the planar kernel for narrower rows and more input
    channels (PLANAR_MAX_IN_PAIRED: rows of 2 x width columns), several blocks of output channels only from
    PAIRED_BLOCKS_MIN outputs a channel; channels last and dilated kernels as PLANAR_MAX_IN says."""
    for layout, chosen in (("NCHW", planar), ("NHWC", planar_nhwc)):
        conv = synet.ConvParams.deconvolution(c_in, height, width, c_out, 2, 2, dilation=dilation, format=layout)
        info = synet.Deconvolution16b(1, conv).info()
        assert info.startswith("Planar" if chosen else "PhaseGemm"), (layout, info)


@pytest.mark.parametrize("act, out_dtype", [("identity", np.float32), ("relu", BF16), ("swish", np.float32),
                                             ("prelu", BF16)])
@pytest.mark.parametrize("nonfinite", [False, True])
def test_planar_wide_rows_and_nonfinite_weights(act, out_dtype, nonfinite):
    """A planar plan whose rows exceed one assembled chunk (1024 columns), through the buffer and finished in
    dst, BF16 out; an inf and a NaN weight (the exact-border pass): the reference's values."""
    rng = np.random.default_rng(12)
    x = rng.standard_normal((1, 8, 3, 700)).astype(np.float32)
    w = rng.standard_normal((8, 2, 4, 4)).astype(np.float32)
    if nonfinite:
        w[1, 0, 0, 3], w[5, 1, 2, 0] = np.inf, np.nan
    bias = rng.standard_normal(2).astype(np.float32)
    params = rng.uniform(-1, 1, 2).astype(np.float32) if act == "prelu" else None
    got = synet.conv_transpose2d(x, w, bias, 2, 1, activation=act, activation_params=params, out_dtype=out_dtype)
    ref, mag = reference_nd(bf16_round(x), bf16_round(w), bias, (2, 2), (1, 1), (1, 1), (1, 1), 1)
    act_enum = Activation[act.upper()]
    ref = activate(ref, act_enum, params)
    assert_close(got, ref, mag, out_dtype is BF16, activation_slope(act_enum, params))


@pytest.mark.parametrize("act, out_dtype", [("identity", np.float32), ("relu", BF16), ("elu", np.float32)])
@pytest.mark.parametrize("c_in, height, width, pad, groups", [
    (8, 8, 32, 1, 1), (5, 13, 45, 1, 1), (3, 16, 33, 3, 1), (12, 9, 40, 1, 2), (1, 24, 70, 1, 1)])
def test_planar_one_channel_pair_matches_two_channels(c_in, height, width, pad, groups, act, out_dtype):
    """One output channel a group, k4 s2 with odd padding (planar_pair_rows: each loaded vector shared by both x
    phases and two rows): the same bits as the group's first channel of two (summed by planar_sums, in the
    same order), and the float64 reference's values."""
    rng = np.random.default_rng(c_in * height + width)
    x = rng.standard_normal((2, c_in * groups, height, width)).astype(np.float32)
    w = rng.standard_normal((c_in * groups, 2, 4, 4)).astype(np.float32)
    bias = rng.standard_normal(2 * groups).astype(np.float32)
    one_of = [2 * g for g in range(groups)]
    one = synet.conv_transpose2d(x, w[:, :1].copy(), bias[one_of], 2, pad, groups=groups, activation=act,
                                 out_dtype=out_dtype)
    two = synet.conv_transpose2d(x, w, bias, 2, pad, groups=groups, activation=act, out_dtype=out_dtype)
    assert np.array_equal(one.view(np.uint16 if out_dtype is BF16 else np.uint32),
                          two[:, one_of].view(np.uint16 if out_dtype is BF16 else np.uint32))
    ref, mag = reference_nd(bf16_round(x), bf16_round(w[:, :1]), bias[one_of], (2, 2), (pad, pad), (pad, pad),
                            (1, 1), groups)
    act_enum = Activation[act.upper()]
    assert_close(one, activate(ref, act_enum, None), mag, out_dtype is BF16, activation_slope(act_enum, None))
    info = synet.Deconvolution16b(1, synet.ConvParams.deconvolution(c_in * groups, height, width, groups, 4, 2,
                                                                    pad=pad, group=groups)).info()
    assert info.startswith("Depthwise" if c_in == 1 and groups == 1 else "Planar"), info


@pytest.mark.parametrize("act, out_dtype, src_dtype", [("identity", np.float32, np.float32), ("relu", BF16, BF16),
                                                        ("prelu", np.float32, np.float32), ("gelu", BF16, np.float32)])
@pytest.mark.parametrize("c_in, c_out, groups, height, width, kernel, stride, pad", [
    (24, 3, 1, 13, 37, 4, 2, 1), (8, 1, 1, 20, 70, 4, 2, 1), (34, 4, 2, 7, 33, 3, 1, 1), (16, 2, 1, 5, 40, 2, 2, 0),
    (19, 3, 1, 3, 600, 4, 2, 1),
    # more output channels than a block (PLANAR_OUT_MAX), few input channels: channels last since 2026-12-05
    (4, 8, 1, 13, 37, 4, 2, 1), (8, 16, 2, 7, 33, 3, 1, 1), (1, 9, 1, 5, 40, 3, 1, 1), (6, 15, 3, 4, 50, 2, 2, 0),
    (2, 7, 1, 3, 600, 4, 2, 1), (1, 16, 1, 6, 35, 3, 1, 0)])
def test_planar_channels_last_is_channels_first(c_in, c_out, groups, height, width, kernel, stride, pad, act,
                                                out_dtype, src_dtype):
    """A channels-last planar plan (its source transposed into planes, its outputs stored through the row buffer
    dst_c apart): the channels-first plan's bits, transposed (rows wider than a buffer's too)."""
    rng = np.random.default_rng(c_in + width)
    x = rng.standard_normal((2, c_in, height, width)).astype(np.float32).astype(src_dtype)
    w = rng.standard_normal((c_in, c_out // groups, kernel, kernel)).astype(np.float32)
    bias = rng.standard_normal(c_out).astype(np.float32)
    params = rng.uniform(-1, 1, c_out).astype(np.float32) if act == "prelu" else None
    kwargs = dict(groups=groups, activation=act, activation_params=params, out_dtype=out_dtype)
    first = synet.conv_transpose2d(x, w, bias, stride, pad, **kwargs)
    last = synet.conv_transpose2d(np.moveaxis(x, 1, -1).copy(), np.moveaxis(w, 1, -1).copy(), bias, stride, pad,
                                  layout="NHWC", **kwargs)
    bits = np.uint16 if out_dtype is BF16 else np.uint32
    assert np.array_equal(np.moveaxis(first, 1, -1).view(bits), last.view(bits))
    conv = synet.ConvParams.deconvolution(c_in, height, width, c_out, kernel, stride, pad=pad, group=groups,
                                          format="NHWC")
    assert synet.Deconvolution16b(2, conv).info().startswith("Planar")


@pytest.mark.parametrize("act, out_dtype, threads", [("identity", np.float32, 1), ("relu", BF16, 2),
                                                     ("gelu", np.float32, 2), ("relu", np.float32, 1)])
@pytest.mark.parametrize("c, size, kernel, stride, pad", [
    (20, (20, 33), 4, 2, 1), (64, (16, 40), 3, 1, 1), (5, (30, 9), 3, 3, 0), (70, (24, 17), 2, 2, 0),
    (16, (3, 12, 10), 3, 2, 1), (3, (2, 17, 6), (2, 4, 3), (1, 2, 3), (0, 1, 1))])
def test_depthwise_channels_last_is_channels_first(c, size, kernel, stride, pad, act, out_dtype, threads):
    """The channels-last depthwise kernel (bands of output rows, strip by strip, a phase's rows of a strip in one
    call): the channels-first kernel's bits, transposed, and the float64 reference's values."""
    dims = len(size)
    rng = np.random.default_rng(c + size[-1])
    x = rng.standard_normal((2, c, *size)).astype(np.float32)
    w = rng.standard_normal((c, 1, *np.broadcast_to(kernel, dims))).astype(np.float32)
    bias = rng.standard_normal(c).astype(np.float32)
    kwargs = dict(groups=c, activation=act, out_dtype=out_dtype, n_threads=threads)
    first = FUNCTIONS[dims](x, w, bias, stride, pad, **kwargs)
    last = FUNCTIONS[dims](np.moveaxis(x, 1, -1).copy(), np.moveaxis(w, 1, -1).copy(), bias, stride, pad,
                           layout=LAYOUTS[dims][1], **kwargs)
    bits = np.uint16 if out_dtype is BF16 else np.uint32
    assert np.array_equal(np.moveaxis(first, 1, -1).view(bits), last.view(bits))
    pads = tuple(np.broadcast_to(pad, dims))
    ref, mag = reference_nd(bf16_round(x), bf16_round(w), bias, tuple(np.broadcast_to(stride, dims)), pads, pads,
                            (1,) * dims, c)
    act_enum = Activation[act.upper()]
    assert_close(np.moveaxis(last, -1, 1), activate(ref, act_enum, None), mag, out_dtype is BF16,
                 activation_slope(act_enum, None))


@pytest.mark.parametrize("c_in, c_out", [(48, 6), (16, 20)])   # 3 output channels a group; 10: blocks 4, 4, 2
def test_planar_context_pickles_and_runs_on_threads(c_in, c_out):
    """A planar context: the same bits on 1, 2 and 3 threads, and after a pickle round trip (its packed
    weights unpacked to the caller's layout and packed again)."""
    rng = np.random.default_rng(9)
    conv = synet.ConvParams.deconvolution(c_in, 13, 37, c_out, 4, 2, pad=1, group=2, activation=Activation.PRELU)
    context = synet.Deconvolution16b(2, conv)
    w = rng.standard_normal((c_in, c_out // 2, 4, 4)).astype(np.float32)
    bias = rng.standard_normal(c_out).astype(np.float32)
    slopes = rng.uniform(-1, 1, c_out).astype(np.float32)
    context.set_params(w, bias, slopes)
    x = rng.standard_normal((2, c_in, 13, 37)).astype(np.float32)
    one = context.forward(x, n_threads=1)
    assert context.info().startswith("Planar")
    ref, mag = reference_nd(bf16_round(x), bf16_round(w), bias, (2, 2), (1, 1), (1, 1), (1, 1), 2)
    assert_close(one, activate(ref, Activation.PRELU, slopes), mag, False, activation_slope(Activation.PRELU, slopes))
    for threads in (2, 3):
        assert np.array_equal(one.view(np.uint32), context.forward(x, n_threads=threads).view(np.uint32))
    copy = pickle.loads(pickle.dumps(context))
    assert np.array_equal(one.view(np.uint32), copy.forward(x).view(np.uint32))


@pytest.mark.parametrize("dims", [1, 3])
@pytest.mark.parametrize("depthwise", [False, True])
def test_thread_count_agnostic(dims, depthwise):
    rng = np.random.default_rng(3)
    c = 16
    size = (300,) if dims == 1 else (6, 9, 8)
    x = rng.standard_normal((2, c, *size)).astype(np.float32)
    w = rng.standard_normal((c, 1 if depthwise else 24, *(4,) * dims)).astype(np.float32)
    fn = FUNCTIONS[dims]
    one = fn(x, w, None, 2, 1, groups=c if depthwise else 1, activation="gelu", n_threads=1)
    for n in (2, 3):
        assert np.array_equal(one.view(np.uint32), fn(x, w, None, 2, 1, groups=c if depthwise else 1,
                                                      activation="gelu", n_threads=n).view(np.uint32))


@pytest.mark.parametrize("dims, groups", [(1, 1), (1, 3), (3, 1), (3, 2)])
def test_against_torch_float64(dims, groups):
    # (skipped inside: importorskip in a decorator skipped this whole module wherever torch is missing, CI too)
    torch = pytest.importorskip("torch", reason="torch not installed")
    rng = np.random.default_rng(4)
    size = (50,) if dims == 1 else (5, 6, 7)
    x = rng.standard_normal((2, 6, *size)).astype(np.float32)
    w = rng.standard_normal((6, 12 // groups, *(3,) * dims)).astype(np.float32)
    b = rng.standard_normal(12).astype(np.float32)
    torch_fn = torch.nn.functional.conv_transpose1d if dims == 1 else torch.nn.functional.conv_transpose3d
    ref = torch_fn(torch.from_numpy(bf16_round(x)), torch.from_numpy(bf16_round(w)),
                   torch.from_numpy(b.astype(np.float64)), stride=2, padding=1, output_padding=1, groups=groups,
                   dilation=1).numpy()
    got = FUNCTIONS[dims](x, w, b, 2, 1, 1, groups)
    _, mag = reference_nd(bf16_round(x), bf16_round(w), None, (2,) * dims, (1,) * dims, (0,) * dims, (1,) * dims,
                          groups)
    assert_close(got, ref, mag, False)


# ---------------------------------------------------------------------------------------------
# The 3-D context


def context_3d(layout="NCDHW", groups=1, activation="relu", seed=5):
    rng = np.random.default_rng(seed)
    conv = ConvParams3d.deconvolution(8 * groups, 3, 4, 5, 6 * groups, 3, 2, 1, 1, groups, activation, format=layout)
    d = Deconvolution3d16b(2, conv)
    w = rng.standard_normal(8 * groups * 27 * 6).astype(np.float32)
    d.set_params(w, rng.standard_normal(6 * groups))
    shape = (2, 8 * groups, 3, 4, 5) if layout == "NCDHW" else (2, 3, 4, 5, 8 * groups)
    return d, w, rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("layout", ["NCDHW", "NDHWC"])
@pytest.mark.parametrize("groups", [1, 2])
def test_3d_context_equals_the_functional_form(layout, groups):
    d, w, x = context_3d(layout, groups)
    conv = d.conv
    assert isinstance(conv, ConvParams3d) and (conv.dst_d, conv.dst_h, conv.dst_w) == (5, 7, 9)
    weight = w.reshape(8 * groups, 6, 3, 3, 3) if layout == "NCDHW" else w.reshape(8 * groups, 3, 3, 3, 6)
    bias = np.random.default_rng(5).standard_normal(8 * groups * 27 * 6)  # same draws as context_3d
    rng = np.random.default_rng(5)
    rng.standard_normal(8 * groups * 27 * 6)
    bias = rng.standard_normal(6 * groups)
    expected = synet.conv_transpose3d(x, weight, bias, 2, 1, groups=groups, layout=layout, activation="relu")
    assert np.array_equal(d.forward(x).view(np.uint32), expected.view(np.uint32))
    assert "[" in d.info() and d.external_buffer_size() > 0


def test_3d_context_pickles_and_rejects_2d_params():
    d, _, x = context_3d()
    again = pickle.loads(pickle.dumps(d))
    assert type(again) is Deconvolution3d16b
    assert np.array_equal(again.forward(x).view(np.uint32), d.forward(x).view(np.uint32))
    with pytest.raises(TypeError, match="ConvParams3d"):
        Deconvolution3d16b(1, synet.ConvParams.deconvolution(4, 3, 3, 4, 2, 2))
    with pytest.raises(TypeError, match="synet.ConvParams, got ConvParams3d"):
        synet.Deconvolution16b(1, d.conv)


@pytest.mark.parametrize("cleared", [False, True])
def test_an_uninitialised_3d_context_pickles_as_itself(cleared):
    d = context_3d()[0] if cleared else Deconvolution3d16b()
    if cleared:
        d.clear()
    assert type(pickle.loads(pickle.dumps(d))) is Deconvolution3d16b


def test_3d_nonfinite_weights_use_exact_borders():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 4, 3, 4, 5)).astype(np.float32)
    w = rng.standard_normal((4, 5, 2, 3, 3)).astype(np.float32)
    w[1, 2, 0, 1, 2] = np.nan
    w[3, 0, 1, 0, 0] = np.inf
    got = synet.conv_transpose3d(x, w, None, (1, 2, 2), (0, 1, 1))
    ref, mag = reference_nd(bf16_round(x), bf16_round(w), None, (1, 2, 2), (0, 1, 1), (0, 1, 1), (1, 1, 1), 1)
    assert_close(got, ref, mag, False)


@pytest.mark.parametrize("kwargs, message", [
    (dict(stride=(1, 2)), "stride: expected an int or 3 ints"),
    (dict(padding=(1, 2, 3, 4)), "padding: expected an int, 3 ints"),
    (dict(padding=5), "padding: .* leaves an output of"),
    (dict(output_padding=2), "output_padding: expected values < max"),
    (dict(layout="NCHW"), "layout: expected 'NCDHW' or 'NDHWC'"),
    (dict(groups=3), "groups: expected a divisor"),
])
def test_3d_errors_name_the_argument(kwargs, message):
    x = np.ones((1, 4, 2, 2, 2), np.float32)
    w = np.ones((4, 2, 2, 2, 2), np.float32)
    with pytest.raises(ValueError, match=message):
        synet.conv_transpose3d(x, w, **kwargs)


def test_1d_errors_name_the_argument():
    with pytest.raises(ValueError, match="x: expected a 3-D \\[N, C, L\\] array"):
        synet.conv_transpose1d(np.ones((1, 2, 3, 4), np.float32), np.ones((2, 2, 2), np.float32))
    with pytest.raises(ValueError, match="weight: expected a 3-D \\[C_in, kL, C_out/groups\\]"):
        synet.conv_transpose1d(np.ones((1, 3, 2), np.float32), np.ones((2, 2), np.float32), layout="NLC")


def test_empty_batches():
    assert synet.conv_transpose1d(np.ones((0, 2, 5), np.float32), np.ones((2, 3, 2), np.float32), stride=2).shape \
        == (0, 3, 10)
    assert synet.conv_transpose3d(np.ones((0, 2, 1, 2, 3), np.float32), np.ones((2, 3, 2, 2, 2), np.float32),
                                  stride=2).shape == (0, 3, 2, 4, 6)


def _no_input_call(dims):
    """conv_transpose{dims}d with no input channel into an `out`: (result, out)."""
    fn = {1: synet.conv_transpose1d, 2: synet.conv_transpose2d, 3: synet.conv_transpose3d}[dims]
    x = np.ones((2, 0) + (3,) * dims, np.float32)
    w = np.ones((0, 2) + (2,) * dims, np.float32)
    out = np.zeros((2, 2) + (4,) * dims, np.float32)
    return fn(x, w, np.array([5.0, -1.0], np.float32), out=out, activation="relu"), out


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_no_input_writes_act_bias_into_out(dims):
    result, out = _no_input_call(dims)
    assert (out[:, 0] == 5).all() and (out[:, 1] == 0).all()
    assert np.shares_memory(result, out) and result.shape == out.shape


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_out_is_returned_when_no_input_reaches_it(dims):
    result, out = _no_input_call(dims)
    assert result is out


_HUGE_GEOMETRY = """if True:
    import resource, sys, numpy as np, synet
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))   # a regression fails here, not the machine
    x = np.ones((1, 2, 4, 4, 4), np.float32)
    w = np.ones((2, 1, 2, 2, 2), np.float32)
    for stride in (8472028, (3, 2**21, 2**21), (2**22, 2**22, 1), 2**31 - 1):
        try:
            synet.conv_transpose3d(x, w, stride=stride)
            print("result")
        except ValueError as error:
            print("ValueError", str(error).split(":")[0])
    context = synet.Deconvolution3d16b()
    try:
        context.init(1, synet.ConvParams3d.deconvolution(2, 4, 4, 4, 1, 2, 8472028))
        print("init")
    except ValueError as error:
        print("ValueError", str(error).split(":")[0])
"""


@pytest.mark.skipif(bool(os.environ.get("SYNET_SANITIZED")), reason="AddressSanitizer needs more address space")
def test_products_beyond_int64_are_refused_at_once(tmp_path):
    """A stride whose product over the three axes, or an output whose element count, passes 2**63 is a
    ValueError before any table is built (np.prod wrapped around in int64, so a stride of 8472028 planned
    8472028 phases per axis: minutes and 20+ GB, then the OOM killer)."""
    out = subprocess.run([sys.executable, "-c", _HUGE_GEOMETRY], capture_output=True, text=True, cwd=tmp_path,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[:-1] == ["ValueError conv"] * 5, out.stdout


def plan_contents(planned):
    """Everything a plan holds, its tables by name (their order in table_data is the planner's business)."""
    fields = planned._asdict()
    fields.pop("table_data"), fields.pop("table_bounds")
    return fields, {name: table.tolist() for name, table in planned.tables.items()}


@pytest.mark.parametrize("micro_bf16, micro_amx", [(False, False), (True, False), (True, True)])
@given(st.data())
def test_a_plan_from_its_family_is_the_plan_made_afresh(micro_bf16, micro_amx, data):
    """plan() takes what the sizes do not change from a memoised family (plan_family): a geometry planned at
    one batch and size, then at another, gives what planning the second one with an empty memo gives; the
    first plan is unchanged by the second (nothing they share is modified)."""
    dims = data.draw(st.sampled_from([1, 2, 3]))
    layout = data.draw(st.sampled_from(planning.LAYOUTS[dims]))
    groups, cg_in, cg_out = data.draw(st.sampled_from([1, 1, 2])), data.draw(st.integers(1, 40)), \
        data.draw(st.integers(1, 12))

    def axes(low, high):
        return tuple(data.draw(st.lists(st.integers(low, high), min_size=dims, max_size=dims)))
    kernel, stride, padding, dilation = axes(1, 4), axes(1, 3), axes(0, 2), axes(1, 2)
    c_in = groups * cg_in
    w_shape = (c_in, *kernel, cg_out) if layout[-1] == "C" else (c_in, cg_out, *kernel)

    def plan(batch, sizes):
        x_shape = (batch, *sizes, c_in) if layout[-1] == "C" else (batch, c_in, *sizes)
        conv = planning.functional_conv(dims, x_shape, np.dtype(np.float32), w_shape, stride, padding, 0, groups,
                                        dilation, layout, "relu", None, None)[0]
        return planning.plan(batch, conv, 0, micro_bf16, micro_amx, 32, 16, lambda: True,
                             1 if dims == 1 else None)
    try:
        first = plan(data.draw(st.integers(1, 2)), axes(1, 9))
        first_contents = plan_contents(first)
        batch, sizes = data.draw(st.integers(1, 3)), axes(1, 9)
        second = plan_contents(plan(batch, sizes))
    except ValueError:   # padding that leaves no output
        event("rejected")
        return
    planning.plan_family.cache_clear()
    assert second == plan_contents(plan(batch, sizes))
    assert first_contents == plan_contents(first)
    event("planar" if first.impl == planning.DEPTHWISE else f"GEMM {planning.MICRO_NAMES[first.micro]}")


@st.composite
def functional_arguments(draw):
    """conv_transpose{1,2,3}d's geometry arguments, mostly valid (functional_conv sorts them out)."""
    dims = draw(st.sampled_from([1, 2, 3]))

    def per_axis(low, high):
        return draw(st.one_of(st.integers(low, high), st.lists(st.integers(low, high), min_size=dims, max_size=dims)))

    groups = draw(st.integers(1, 3))
    c_in = groups * draw(st.integers(0, 3))
    size = tuple(draw(st.lists(st.integers(0, 6), min_size=dims, max_size=dims)))
    kernel = tuple(draw(st.lists(st.integers(1, 4), min_size=dims, max_size=dims)))
    padding = draw(st.one_of(st.just(per_axis(0, 2)), st.lists(st.integers(0, 3), min_size=2 * dims,
                                                                max_size=2 * dims)))
    layout = draw(st.sampled_from(planning.LAYOUTS[dims]))
    x_shape = (draw(st.integers(0, 2)), *size, c_in) if layout[-1] == "C" else (draw(st.integers(0, 2)), c_in, *size)
    cg_out = draw(st.integers(0, 3))
    w_shape = (c_in, *kernel, cg_out) if layout[-1] == "C" else (c_in, cg_out, *kernel)
    return (dims, x_shape, draw(st.sampled_from([np.dtype(np.float32), np.dtype(BF16)])), w_shape,
            per_axis(1, 3), padding, per_axis(0, 2), groups, per_axis(1, 3), layout,
            draw(st.sampled_from(list(Activation))), draw(st.sampled_from([None, "float32", "bf16"])), None)


@given(functional_arguments())
def test_the_functional_forms_plan_geometries_validate_would_accept_unchanged(arguments):
    """plan() takes its ConvParams as validate() returns them; the functional forms' own pass as they are."""
    try:
        conv = planning.functional_conv(*arguments)[0]
    except ValueError:
        event("rejected")
        return
    event("planned" if conv is not None else "nothing to plan")
    if conv is not None:
        assert planning.validate(conv) == conv


@given(st.integers(1, 5), st.integers(1, 4), st.integers(1, 6), st.integers(0, 4), st.integers(1, 9))
def test_axis_phases_is_memoised_immutable_and_right(stride, dilation, kernel, pad_begin, src):
    """Every plan shares axis_phases' memoised result: it is made of tuples (hashable, so no plan can change
    what the next one reads), and equals the phases counted from the definition: output o = r - pad_begin +
    stride * j takes tap k from input j - (k * dilation) // stride when (r - k * dilation) % stride == 0."""
    dst = stride * (src - 1) + dilation * (kernel - 1) + 1 - pad_begin
    if dst < 1:
        return
    phases, low, high = result = planning.axis_phases(stride, dilation, kernel, pad_begin, src, dst)
    hash(result)
    assert planning.axis_phases(stride, dilation, kernel, pad_begin, src, dst) is result
    lows, highs = [0], [0]
    for r, (taps, j0, count) in enumerate(phases):
        assert taps == tuple((k, -(k * dilation // stride)) for k in range(kernel) if k * dilation % stride == r)
        outputs = [j for j in range(-kernel - pad_begin, dst + pad_begin + 1) if 0 <= r - pad_begin + stride * j < dst]
        assert (j0, count) == ((outputs[0], len(outputs)) if outputs else (j0, 0))
        for j in outputs:
            for _, offset in taps:
                lows.append(-(j + offset))
                highs.append(j + offset - (src - 1))
    assert (low, high) == (max(lows), max(highs))


def test_3d_context_messages_name_its_class():
    deconv = synet.Deconvolution3d16b()
    with pytest.raises(RuntimeError, match=r"^Deconvolution3d16b: call init\(\) before using the context$"):
        deconv.forward(np.zeros((1, 1, 1, 1, 1), np.float32))
    deconv.init(1, synet.ConvParams3d.deconvolution(1, 1, 1, 1, 1, kernel=1))
    with pytest.raises(RuntimeError, match=r"^Deconvolution3d16b.forward: call set_params\(\) before forward\(\)$"):
        deconv.forward(np.zeros((1, 1, 1, 1, 1), np.float32))
    deconv.set_params(np.ones((1, 1, 1, 1, 1), np.float32))
    restore, (version, key, data, cls) = deconv.__reduce__()
    with pytest.raises(TypeError, match=r"^Deconvolution3d16b pickle: weight: expected a float32"):
        restore(version, key, (data[0].astype(np.float64), None, None), cls)


def test_each_rank_checks_its_own_arguments():
    """The memo of checked arguments was shared by the 1-D, 2-D and 3-D forms and keyed without the rank: after
    conv_transpose1d(layout="NCL"), conv_transpose2d(layout="NCL") on the same shapes returned a 1-D result."""
    x1, w1 = np.ones((1, 1, 5), np.float32), np.ones((1, 1, 3), np.float32)
    x2, w2 = np.ones((1, 1, 3, 3), np.float32), np.ones((1, 1, 2, 2), np.float32)
    for first, second, message in (
            (lambda: synet.conv_transpose1d(x1, w1, layout="NCL"),
             lambda: synet.conv_transpose2d(x1, w1, layout="NCL"), "layout: expected 'NCHW' or 'NHWC'"),
            (lambda: synet.conv_transpose2d(x2, w2), lambda: synet.conv_transpose1d(x2, w2, layout="NCHW"),
             "layout: expected 'NCL' or 'NLC'"),
            (lambda: synet.conv_transpose2d(x2, w2), lambda: synet.conv_transpose3d(x2, w2, layout="NCHW"),
             "layout: expected 'NCDHW' or 'NDHWC'")):
        synet.clear_plan_cache()
        first()
        with pytest.raises(ValueError, match=message):
            second()


def assert_refuses_bad_weights_and_bias(form, x, w, dst_c):
    """form(x, ...) raises for a bias of another size or type and for bool weights, planning and then cached."""
    for _ in range(2):   # the first call plans, the second finds the plan
        with pytest.raises(ValueError, match=rf"^bias: expected {dst_c} elements \(dstC\), got 7$"):
            form(x, w, np.ones(7, np.float32))
        with pytest.raises(ValueError, match="^bias: expected real numbers"):
            form(x, w, np.ones(dst_c, np.complex64))
        with pytest.raises(ValueError, match="^weight: expected real numbers, got dtype bool"):
            form(x, w.astype(bool))


@pytest.mark.parametrize("form, x_shape, w_shape, shape", [
    (synet.conv_transpose1d, (2, 3, 0), (3, 2, 3), (2, 2, 0)),
    (synet.conv_transpose2d, (2, 3, 4, 0), (3, 2, 3, 3), (2, 2, 12, 0)),
    (synet.conv_transpose2d, (0, 3, 0, 4), (3, 2, 3, 3), (0, 2, 0, 12)),
    (synet.conv_transpose3d, (1, 3, 2, 0, 2), (3, 2, 3, 3, 3), (1, 2, 6, 0, 6)),
    (synet.conv_transpose2d, (3, 0, 4), (3, 2, 3, 3), (2, 0, 12))])
def test_an_empty_spatial_axis_checks_weights_and_bias(form, x_shape, w_shape, shape):
    """An input with a spatial axis of size 0 and an empty output (kernel = stride: no geometry to plan)
    accepted a bias of the wrong size and bool weights (the empty batch and every other call raise), and so
    synet.dask raised them only at compute time, from the chunks."""
    x, w = np.ones(x_shape, np.float32), np.ones(w_shape, np.float32)
    form = functools.partial(form, stride=3)
    assert form(x, w, np.ones(2, np.float32)).shape == shape
    assert_refuses_bad_weights_and_bias(form, x, w, 2)
    assert form(x, w.astype(BF16)).shape == shape   # (bfloat16 weights, raw uint16 bits too)
    assert form(x, w.astype(BF16).view(np.uint16)).shape == shape


@pytest.mark.parametrize("form, x_shape, w_shape", [
    (synet.conv_transpose1d, (0, 1, 4), (1, 1, 3)), (synet.conv_transpose2d, (0, 1, 4, 4), (1, 1, 3, 3)),
    (synet.conv_transpose3d, (0, 1, 2, 2, 2), (1, 1, 3, 3, 3))])
def test_an_empty_batch_is_checked_as_a_batch_of_one(form, x_shape, w_shape):
    """With N = 0 a bias of the wrong size or type, a bool weight, padding that leaves no output and an absurd plan
    were accepted (an empty result; torch raises); synet.dask checks its arguments on an empty batch, so its 1-D
    and 3-D forms raised those only at compute time."""
    x, w = np.ones(x_shape, np.float32), np.ones(w_shape, np.float32)
    dims = len(x_shape) - 2
    assert form(x, w, np.ones(1, np.float32)).shape == (0, 1, *(s + 2 for s in x_shape[2:]))
    assert_refuses_bad_weights_and_bias(form, x, w, 1)
    with pytest.raises(ValueError, match="padding: .* leaves an output of"):
        form(x, w, padding=9)
    with pytest.raises(ValueError, match="conv: the (geometry needs|dst tensor of)"):
        form(x, w, stride=(2**30,) * dims)
