"""Fuzz Deconvolution16b, ConvParams and conv_transpose2d (and, method by method in any order, Deconvolution3d16b):
right results or allowed exceptions (tests/outcomes.py), whatever comes in."""

import pickle

import numpy as np
import pytest
from fuzzing import BF16, OUT_MUTATIONS, arrays, attempt, check_again, failed, guarded, intact, junk, out_variant
from hypothesis import given
from hypothesis import strategies as st
from reference import activate, activation_slope, assert_close, bf16_round, reference_nd

import synet

SMALL = st.integers(-3, 5)
GEOMETRY = st.one_of(SMALL, st.tuples(SMALL, SMALL), st.tuples(SMALL, SMALL, SMALL, SMALL), junk(),
                     st.integers(2**31 - 2, 2**64))
LAYOUTS = st.one_of(st.sampled_from(["NCHW", "NHWC", "nhwc", synet.TensorFormat.NHWC, 0, 1]), junk())
ACTIVATIONS = st.one_of(st.sampled_from(list(synet.Activation)), st.integers(-2, 12), junk())
OUT_DTYPES = st.one_of(st.sampled_from([None, np.float32, BF16, "bf16", np.uint16, np.float64, np.uint8]), junk())
THREADS = st.one_of(st.none(), st.integers(-2, 4), junk())


def channels_first(a, nhwc):
    """x [N, H, W, C] or weight [C_in, kY, kX, C_out/g] of a channels-last call as channels first."""
    return np.moveaxis(np.asarray(a), -1, 1) if nhwc else np.asarray(a)


def expected_2d(x, w, bias, stride, pad, output_padding, groups, dilation, activation, nhwc):
    """(float64 reference, Σ|x·w|, slope bound) of conv_transpose2d, channels first (tests/reference.py)."""
    ref, mag = reference_nd(bf16_round(channels_first(x, nhwc)), bf16_round(channels_first(w, nhwc)), bias, stride,
                            pad[:2], (pad[2] - output_padding[0], pad[3] - output_padding[1]), dilation, groups)
    return activate(ref, activation), mag, activation_slope(activation)


# ---- the functional form ---------------------------------------------------------------------------------------


@given(arrays(), arrays(), st.one_of(st.none(), arrays(), junk()), GEOMETRY, GEOMETRY, GEOMETRY, GEOMETRY, GEOMETRY,
       LAYOUTS, ACTIVATIONS, st.one_of(st.none(), arrays(), junk()), OUT_DTYPES, st.one_of(st.none(), arrays()),
       THREADS)
def test_functional_anything(x, w, bias, stride, padding, output_padding, groups, dilation, layout, activation,
                             params, out_dtype, out, n_threads):
    attempt(synet.conv_transpose2d, x, w, bias, stride, padding, output_padding, groups, dilation, layout=layout,
            activation=activation, activation_params=params, out_dtype=out_dtype, out=out, n_threads=n_threads)


MUTATIONS = ["none", "x_strided", "x_readonly", "x_list", "x_f64", "x_int", "x_uint16", "x_bool", "x_3d", "x_5d",
             "x_empty", "x_nan", "w_transposed", "w_3d", "w_empty", "w_nan", "w_strided", "bias_short",
             "bias_nan", "out_alias_x", "x_huge", "w_huge", *OUT_MUTATIONS]


@given(st.integers(1, 2), st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.integers(1, 4),
       st.integers(1, 4), st.integers(1, 3), st.tuples(SMALL, SMALL), st.tuples(SMALL, SMALL, SMALL, SMALL),
       st.tuples(SMALL, SMALL), st.tuples(SMALL, SMALL), st.integers(-1, 4), st.booleans(),
       st.sampled_from(MUTATIONS), st.sampled_from(MUTATIONS), st.integers(0, 2**32 - 1))
def test_functional_near_valid(n, cg_in, cg_out, groups, h, w, k, stride, padding, output_padding, dilation,
                               groups_given, nhwc, mutation, mutation2, seed):
    """Valid shapes, hostile parameters and hostile variants of each array: no crash."""
    rng = np.random.default_rng(seed)
    c_in = cg_in * groups
    x = rng.standard_normal((n, h, w, c_in) if nhwc else (n, c_in, h, w)).astype(np.float32)
    weight = rng.standard_normal((c_in, k, k, cg_out) if nhwc else (c_in, cg_out, k, k)).astype(np.float32)
    bias = rng.standard_normal(cg_out * groups).astype(np.float32)
    out = None
    for m in sorted((mutation, mutation2), key=lambda m: m.endswith("_huge")):   # huge views last: never copied
        if m.startswith(("x_", "out_alias")) and not isinstance(x, np.ndarray):
            x = np.array(x, np.float32)
        if m == "x_strided":
            x = np.repeat(x, 2, axis=-1)[..., ::2]
        elif m == "x_readonly":
            x.flags.writeable = False
        elif m == "x_list":
            x = x.tolist()
        elif m == "x_f64":
            x = np.asarray(x, np.float64)
        elif m == "x_int":
            x = np.asarray(x).astype(np.int32)
        elif m == "x_uint16":
            x = np.asarray(x, np.float32).astype(BF16).view(np.uint16)
        elif m == "x_bool":
            x = np.asarray(x) > 0
        elif m == "x_3d":
            x = np.asarray(x)[0] if len(x) else x   # (after x_empty there is no image to drop the batch of)
        elif m == "x_5d":
            x = np.asarray(x)[None]
        elif m == "x_empty":
            x = np.asarray(x)[:0]
        elif m == "x_nan":
            x = np.array(x, np.float32)
            x.reshape(-1)[::3] = [np.nan, np.inf, -np.inf][seed % 3]
        elif m == "w_transposed":
            weight = weight.T
        elif m == "w_3d":
            weight = weight[0]
        elif m == "w_empty":
            weight = weight[:, :0]
        elif m == "w_nan":
            weight = weight.copy()
            weight.reshape(-1)[::2] = np.nan
        elif m == "w_strided":
            weight = np.repeat(weight, 2, axis=0)[::2]
        elif m == "bias_short":
            bias = bias[:-1]
        elif m == "bias_nan":
            bias = np.full_like(bias, np.nan)
        elif m == "out_alias_x":
            out = np.asarray(x)
        elif m == "x_huge":
            x = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape=(2**15, c_in, 2**16, 2**16)
                                                if not nhwc else (2**15, 2**16, 2**16, c_in), strides=(0,) * 4)
        elif m == "w_huge":
            weight = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape=(c_in, 2**20, 2**20, 2),
                                                     strides=(0,) * 4)
    result = attempt(synet.conv_transpose2d, x, weight, bias, stride, padding, output_padding,
                     groups_given if groups_given != 4 else groups, dilation, layout="NHWC" if nhwc else "NCHW")
    if not failed(result) and mutation in OUT_MUTATIONS:
        out = out_variant(result, mutation, x)   # the same call again with an `out` of the right shape, or a wrong one
        again = attempt(synet.conv_transpose2d, x, weight, bias, stride, padding, output_padding,
                        groups_given if groups_given != 4 else groups, dilation, layout="NHWC" if nhwc else "NCHW",
                        out=out)
        check_again(again, out, result, mutation)


@given(st.integers(1, 2), st.sampled_from([1, 2, 3, 5, 16, 17]), st.integers(1, 5), st.integers(1, 3),
       st.integers(1, 5), st.integers(1, 5), st.integers(1, 4), st.integers(1, 4), st.integers(1, 3),
       st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.tuples(*[st.integers(0, 3)] * 4),
       st.tuples(st.integers(0, 2), st.integers(0, 2)), st.booleans(),
       st.sampled_from(["identity", "relu", "leaky_relu"]), st.sampled_from(["f32", "bf16"]),
       st.sampled_from(["f32", "bf16"]), st.booleans(), st.integers(1, 3), st.integers(0, 2**32 - 1),
       st.sampled_from([None] * 4 + ["x_nan", "x_inf", "w_nan", "w_inf"]))
def test_right_results_random_geometry(n, cg_in, cg_out, groups, h, w, ky, kx, sy, sx, dy, dx, pad, output_padding,
                                       nhwc, activation, x_type, out_type, with_bias, n_threads, seed, special):
    """Well-formed calls of random geometry: within SPEC §6's tolerance of the float64 reference."""
    rng = np.random.default_rng(seed)
    c_in = cg_in * groups
    x = rng.standard_normal((n, h, w, c_in) if nhwc else (n, c_in, h, w)).astype(np.float32)
    weight = rng.standard_normal((c_in, ky, kx, cg_out) if nhwc else (c_in, cg_out, ky, kx)).astype(np.float32)
    bias = rng.standard_normal(cg_out * groups).astype(np.float32) if with_bias else None
    if special:   # one NaN or ±inf in x or in the weights
        target = x if special[0] == "x" else weight
        target.reshape(-1)[seed % target.size] = np.nan if special.endswith("nan") else (-1) ** seed * np.inf
    if x_type == "bf16":
        x = x.astype(BF16)
    op = (min(output_padding[0], max(sy, dy) - 1), min(output_padding[1], max(sx, dx) - 1))
    result = attempt(synet.conv_transpose2d, x, weight, bias, (sy, sx), pad, op, groups, (dy, dx),
                     layout="NHWC" if nhwc else "NCHW", activation=activation,
                     out_dtype=np.float32 if out_type == "f32" else BF16, n_threads=n_threads)
    full_h = (h - 1) * sy + dy * (ky - 1) + 1 + op[0]
    full_w = (w - 1) * sx + dx * (kx - 1) + 1 + op[1]
    if full_h - pad[0] - pad[2] <= 0 or full_w - pad[1] - pad[3] <= 0:
        assert isinstance(result, ValueError), result
        return
    assert not failed(result), result
    expected, mag, slope = expected_2d(x, weight, bias, (sy, sx), pad, op, groups, (dy, dx), activation, nhwc)
    assert_close(channels_first(result, nhwc), expected, mag, out_type == "bf16", slope)
    # the context with the portable micro-kernel: the same bits as avx512bf16 (AMX sums in another order)
    fmt = "NHWC" if nhwc else "NCHW"
    if min(pad[2] - op[0], pad[3] - op[1]) < 0:
        return   # output_padding larger than the end pad: ConvParams.deconvolution takes pads >= 0 only
    conv = synet.ConvParams.deconvolution(c_in, h, w, cg_out * groups, (ky, kx), (sy, sx), (dy, dx),
                                          (pad[0], pad[1], pad[2] - op[0], pad[3] - op[1]), groups, activation,
                                          x_type, out_type, fmt)
    context = synet.Deconvolution16b(n, conv, synet.Compatibility.BF16_SOFT)
    context.set_params(weight, bias)
    buf, buf_guard = guarded((context.external_buffer_size(),), np.uint8)
    dst, dst_guard = guarded(result.shape, result.dtype)
    soft = attempt(context.forward, x, buf, dst, n_threads=n_threads)
    assert not failed(soft), soft
    assert soft is dst and intact(buf_guard) and intact(dst_guard)
    if cg_in < 16 or not synet._deconvolution.amx_available():
        assert np.array_equal(soft.view(np.uint8), result.view(np.uint8)), context.info()
    assert_close(channels_first(soft, nhwc), expected, mag, out_type == "bf16", slope)


@pytest.mark.parametrize("bad, group", [(np.nan, 1), (np.inf, 1), (np.nan, 2), (np.inf, 2)])
def test_nonfinite_weight_stays_in_its_outputs(bad, group):
    """out[ox] = Σ_k x[ox − k]·w[k]: w[0] is NaN/inf, so only out[0] (the one output that uses it) is non-finite."""
    x = np.ones((1, 2 * group, 1, 1), np.float32)
    w = np.ones((2 * group, 1, 1, 2), np.float32)
    w[:, :, :, 0] = bad
    out = synet.conv_transpose2d(x, w, groups=2 * group if group == 1 else 1)
    assert not np.isfinite(out[..., 0]).any()
    np.testing.assert_array_equal(out[..., 1], 2 * group if group == 2 else 1)


# ---- ConvParams ------------------------------------------------------------------------------------------------

INTS = st.one_of(st.integers(-2, 6), st.integers(2**31, 2**64), junk())


@given(INTS, INTS, INTS, INTS, GEOMETRY, GEOMETRY, GEOMETRY, GEOMETRY, INTS, ACTIVATIONS, junk(), junk(), LAYOUTS,
       st.integers(1, 3), st.one_of(st.integers(-1, 64), junk()))
def test_conv_params_anything(src_c, src_h, src_w, dst_c, kernel, stride, dilation, pad, group, activation, src_type,
                              dst_type, layout, batch, compatibility):
    conv = attempt(synet.ConvParams.deconvolution, src_c, src_h, src_w, dst_c, kernel, stride, dilation, pad, group,
                   activation, src_type, dst_type, layout)
    if not failed(conv):
        context = attempt(synet.Deconvolution16b, batch, conv, compatibility)
        if not failed(context):
            attempt(context.set_params, np.ones(max(1, min(conv.src_c * conv.kernel_y * conv.kernel_x
                                                           * conv.dst_c // conv.group, 4096)), np.float32))


@given(st.lists(st.one_of(INTS, junk(), st.sampled_from(list(synet.DataType)), LAYOUTS), min_size=22, max_size=22),
       st.one_of(st.integers(-1, 3), junk()))
def test_raw_conv_params_in_init(fields, batch):
    conv = attempt(synet.ConvParams, *fields)
    if not failed(conv):
        context = synet.Deconvolution16b()
        attempt(context.init, batch, conv)
        attempt(context.forward, np.zeros(8, np.float32))


# ---- the context, methods in any order ---------------------------------------------------------------------------

# name: (context class, batch, ConvParams(3d).deconvolution arguments)
GOOD = {
    "nchw": (synet.Deconvolution16b, 1, dict(src_c=4, src_h=3, src_w=3, dst_c=6, kernel=3, stride=2, pad=1, group=2,
                                             activation="relu")),
    "nhwc": (synet.Deconvolution16b, 2, dict(src_c=3, src_h=2, src_w=4, dst_c=2, kernel=2, stride=2, format="NHWC",
                                             dst_type="bf16")),
    "same": (synet.Deconvolution16b, 1, dict(src_c=4, src_h=3, src_w=3, dst_c=4, kernel=1)),   # dst = src's size
    "dw": (synet.Deconvolution16b, 1, dict(src_c=3, src_h=3, src_w=2, dst_c=3, kernel=3, stride=2, dilation=2,
                                           group=3, pad=(1, 0))),
    "amx": (synet.Deconvolution16b, 1, dict(src_c=32, src_h=2, src_w=17, dst_c=20, kernel=(2, 3), stride=(1, 2),
                                            src_type="bf16", format="NHWC")),
    "ncdhw": (synet.Deconvolution3d16b, 1, dict(src_c=4, src_d=2, src_h=3, src_w=3, dst_c=6, kernel=3, stride=2,
                                                pad=1, group=2, activation="relu")),
    "ndhwc": (synet.Deconvolution3d16b, 2, dict(src_c=3, src_d=2, src_h=2, src_w=4, dst_c=2, kernel=(1, 2, 2),
                                                stride=(1, 2, 2), format="NDHWC", dst_type="bf16")),
    "same3d": (synet.Deconvolution3d16b, 1, dict(src_c=4, src_d=2, src_h=3, src_w=3, dst_c=4, kernel=1)),
    "dw3d": (synet.Deconvolution3d16b, 1, dict(src_c=3, src_d=2, src_h=3, src_w=2, dst_c=3, kernel=3, stride=2,
                                               dilation=(1, 2, 1), group=3, pad=(1, 0, 1, 0, 1, 1))),
    "amx3d": (synet.Deconvolution3d16b, 1, dict(src_c=32, src_d=2, src_h=2, src_w=9, dst_c=20, kernel=(2, 2, 3),
                                                stride=(1, 1, 2), src_type="bf16", format="NDHWC",
                                                activation="gelu")),
}
HUGE = {synet.Deconvolution16b: [
    dict(src_c=2**40, src_h=2**40, src_w=1, dst_c=1, kernel=1), dict(src_c=1, src_h=2**40, src_w=1, dst_c=1, kernel=2),
    dict(src_c=1, src_h=1, src_w=1, dst_c=1, kernel=2**40), dict(src_c=1, src_h=2, src_w=1, dst_c=1, kernel=1,
                                                                 stride=2**40),
    dict(src_c=2**62, src_h=2, src_w=2, dst_c=2**62, kernel=1), dict(src_c=3, src_h=2**31, src_w=2**31, dst_c=3,
                                                                     kernel=3),
    dict(src_c=2**21, src_h=2**21, src_w=2**21, dst_c=1, kernel=1)],
    synet.Deconvolution3d16b: [
    dict(src_c=2**40, src_d=1, src_h=2**40, src_w=1, dst_c=1, kernel=1),
    dict(src_c=1, src_d=2, src_h=2, src_w=2, dst_c=1, kernel=2, stride=8472028),   # stride product past 2**63
    dict(src_c=1, src_d=4, src_h=4, src_w=4, dst_c=1, kernel=2, stride=(3, 2**21, 2**21)),
    dict(src_c=3, src_d=2**21, src_h=2**21, src_w=2**21, dst_c=3, kernel=3),
    dict(src_c=1, src_d=1, src_h=1, src_w=1, dst_c=1, kernel=(2**21, 2**21, 2**21))]}


def params_type(context_type):
    return synet.ConvParams3d if context_type is synet.Deconvolution3d16b else synet.ConvParams


def good_case(name):
    """(context class, batch, conv, src, weight, bias, {compatibility: expected result})."""
    context_type, batch, args = GOOD[name]
    conv = params_type(context_type).deconvolution(**args)
    three = context_type is synet.Deconvolution3d16b
    rng = np.random.default_rng(len(name))
    nhwc = conv.src_format == synet.TensorFormat.NHWC
    spatial = (conv.src_d, conv.src_h, conv.src_w) if three else (conv.src_h, conv.src_w)
    kernel = (conv.kernel_z, conv.kernel_y, conv.kernel_x) if three else (conv.kernel_y, conv.kernel_x)
    src = rng.standard_normal((batch, *spatial, conv.src_c) if nhwc else (batch, conv.src_c, *spatial))
    src = src.astype(BF16 if conv.src_type == synet.DataType.BFLOAT16 else np.float32)
    cg_out = conv.dst_c // conv.group
    weight = rng.standard_normal((conv.src_c, *kernel, cg_out) if nhwc else (conv.src_c, cg_out, *kernel))
    weight = weight.astype(np.float32)
    bias = rng.standard_normal(conv.dst_c).astype(np.float32)
    if three:
        call = dict(stride=(conv.stride_z, conv.stride_y, conv.stride_x),
                    padding=(conv.pad_front, conv.pad_y, conv.pad_x, conv.pad_back, conv.pad_h, conv.pad_w),
                    dilation=(conv.dilation_z, conv.dilation_y, conv.dilation_x), layout="NDHWC" if nhwc else "NCDHW")
    else:
        call = dict(stride=(conv.stride_y, conv.stride_x), padding=(conv.pad_y, conv.pad_x, conv.pad_h, conv.pad_w),
                    dilation=(conv.dilation_y, conv.dilation_x), layout="NHWC" if nhwc else "NCHW")
    function = synet.conv_transpose3d if three else synet.conv_transpose2d
    expected = function(src, weight, bias, groups=conv.group, activation=conv.activation, out_dtype=conv.dst_type,
                        **call)
    soft = context_type(batch, conv, synet.Compatibility.BF16_SOFT)
    soft.set_params(weight, bias)
    return context_type, batch, conv, src, weight, bias, {0: expected, 32: soft.forward(src)}


CASES = {name: good_case(name) for name in GOOD}
OPERATIONS = st.lists(st.sampled_from(["init", "init_junk", "init_huge", "init_other_kind", "set_params",
                                       "set_params_junk", "set_params_twice", "forward", "forward_junk",
                                       "forward_buf", "forward_buf_small", "forward_buf_junk", "forward_alias",
                                       "forward_buf_alias", "forward_dst", "forward_dst_bits", "clear", "enable",
                                       "info", "sizes", "pickle"]), min_size=1, max_size=10)


@given(st.sampled_from([synet.Deconvolution16b, synet.Deconvolution3d16b]), OPERATIONS,
       st.lists(st.integers(0, 4), min_size=10, max_size=10), st.integers(0, 6),
       st.tuples(st.one_of(st.integers(-1, 3), junk()), st.one_of(junk(), arrays()), st.one_of(junk(), arrays()),
                 st.one_of(st.none(), arrays(), junk()), st.one_of(st.none(), arrays(), junk())),
       arrays(), arrays(), st.sampled_from([0, 32]), THREADS)
def test_context_in_any_order(context_type, operations, picks, huge, junk_args, src_junk, buf_junk, compat,
                              n_threads):
    """Deconvolution16b's and Deconvolution3d16b's methods in any order, with good and junk arguments: allowed
    outcomes, the functional form's bits (BF16_SOFT: the soft kernel's) whenever the context is ready, a
    not-ready RuntimeError whenever it is not, nothing written outside dst and buf."""
    names = [name for name in GOOD if GOOD[name][0] is context_type]
    huge_args = HUGE[context_type][huge % len(HUGE[context_type])]
    context = context_type()
    state = [None, False, 0]   # the geometry initialised, weights set for it, its compatibility
    for step, operation in enumerate(operations):
        name = names[picks[step]]
        _, batch, conv, src, weight, bias, expected = CASES[name]
        current = CASES.get(state[0])
        if operation == "init":
            result = attempt(context.init, batch, conv, compat)
            assert result is None, result
            if (state[0], state[2]) != (name, compat):   # identical arguments keep the weights
                state[:] = [name, False, compat]
        elif operation == "init_junk":
            if not failed(attempt(context.init, junk_args[0], junk_args[1], junk_args[2])):
                state[:] = ["?", False, 0]   # a valid init by chance: the context is something unknown
            elif not context.enable():
                state[:] = [None, False, 0]
        elif operation == "init_huge":
            result = attempt(context.init, 1, params_type(context_type).deconvolution(**huge_args))
            assert isinstance(result, (ValueError, MemoryError)), result
        elif operation == "init_other_kind":   # a 2-D context takes no ConvParams3d, a 3-D one no ConvParams
            other = [n for n in GOOD if GOOD[n][0] is not context_type][picks[step]]
            result = attempt(context.init, 1, CASES[other][2])
            assert isinstance(result, TypeError), result
        elif operation in ("set_params", "set_params_twice"):
            if current is None:
                result = attempt(context.set_params, weight)
                assert failed(result) or state[0] == "?", result
                continue
            for _ in range(1 + (operation == "set_params_twice")):
                result = attempt(context.set_params, current[4], current[5])
                assert result is None, result
            state[1] = True
        elif operation == "set_params_junk":
            if not failed(attempt(context.set_params, junk_args[1], junk_args[3], junk_args[4])) and \
                    state[0] is not None:
                    state[0] = "?"   # weights of some other values: results unknown
        elif operation == "forward_junk":
            attempt(context.forward, src_junk, None, None, n_threads=n_threads)
            attempt(context.forward, current[3] if current else src, buf_junk, src_junk)
        elif operation == "enable":
            assert context.enable() == (state[0] is not None)
        elif operation == "info":
            result = attempt(context.info)
            assert isinstance(result, RuntimeError if state[0] is None else str), result
        elif operation == "sizes":
            assert isinstance(attempt(context.internal_buffer_size), int)
            attempt(context.external_buffer_size)
        elif operation == "clear":
            context.clear()
            state[:] = [None, False, 0]
        elif operation == "pickle":   # a context travels with its init arguments and weights
            again = attempt(lambda: pickle.loads(pickle.dumps(context)))
            assert not failed(again), again
            assert again.enable() == context.enable()
            if context.enable():
                assert type(again) is context_type, type(again)
            else:   # KNOWN BUG, test_deconvolution_nd.py::test_an_uninitialised_3d_context_pickles_as_itself
                assert type(again) in (context_type, synet.Deconvolution16b), type(again)
            if current is not None and state[1]:
                want = current[6][state[2]]
                assert np.array_equal(again.forward(current[3]).view(np.uint8), want.view(np.uint8)), state
        else:   # a forward with the current geometry's source
            if current is None or state[0] == "?":
                result = attempt(context.forward, src)
                if state[0] is None:
                    assert isinstance(result, RuntimeError), result
                continue
            src, want = current[3], current[6][state[2]]
            size = context.external_buffer_size()
            buf = dst = None
            buf_guard = dst_guard = None
            if operation == "forward_buf":
                buf, buf_guard = guarded((size + step,), np.uint8)
            elif operation == "forward_buf_small":
                buf = np.empty(max(size - 1, 0), np.uint8)
            elif operation == "forward_buf_junk":
                buf = buf_junk
            elif operation == "forward_alias":
                dst = src.view(np.uint16) if src.dtype == BF16 else src
            elif operation == "forward_buf_alias":
                buf = src.view(np.uint8).reshape(-1)
            elif operation == "forward_dst":
                dst, dst_guard = guarded(want.shape, want.dtype, 7)
            elif operation == "forward_dst_bits":   # BF16 results into raw uint16 bits, FP32 ones into a BF16 dst
                dst, dst_guard = guarded(want.shape, np.uint16 if want.dtype == BF16 else BF16, 7)
            result = attempt(context.forward, src, buf, dst, n_threads=step % 3 or None)
            if not state[1]:
                assert isinstance(result, RuntimeError), result
            elif operation in ("forward", "forward_buf", "forward_dst"):
                assert not failed(result), result
                assert np.array_equal(result.view(np.uint8), want.view(np.uint8)), (state, operation)
            elif operation == "forward_dst_bits":
                if want.dtype == BF16:
                    assert result is dst and np.array_equal(result, want.view(np.uint16)), (state, result)
                else:
                    assert isinstance(result, ValueError), result   # no hidden conversion of an FP32 result
            elif (operation in ("forward_buf_small", "forward_buf_alias") and size
                  or operation == "forward_alias" and src.size == want.size):
                assert isinstance(result, ValueError), result
            elif not failed(result):
                assert np.array_equal(result.view(np.uint8), want.view(np.uint8)), (state, operation)
            for guard in (buf_guard, dst_guard):
                assert guard is None or intact(guard, 0x5A if guard is buf_guard else 7)
