"""Fuzz conv_transpose1d, conv_transpose3d, ConvParams3d and Deconvolution3d16b: right results or allowed
exceptions (tests/outcomes.py), whatever comes in.

Hostile calls (any arrays, per-axis parameters of any length and value, groups, layouts, empty tensors,
`out` of any kind) end in a result or an allowed exception; well-formed calls of random geometry (groups,
dilation, asymmetric padding, output_padding, every activation, FP32/BF16 in and out, NaN/inf in x or
the weights, empty batches, channels and lengths) equal tests/reference.py's float64 reference within
SPEC §6's tolerance, give the same bits into an `out`, and agree with the 2-D kernel (1-D) or the
Deconvolution3d16b context (3-D). (Deconvolution3d16b's methods in any order: fuzz_deconvolution.py.)
"""

import numpy as np
from fuzzing import BF16, OUT_MUTATIONS, arrays, attempt, check_again, failed, guarded, intact, junk, out_variant
from hypothesis import event, given
from hypothesis import strategies as st
from reference import activate, activation_slope, assert_close, bf16_round, reference_nd

import synet

FUNCTIONS = {1: synet.conv_transpose1d, 3: synet.conv_transpose3d}
LAYOUT_NAMES = {1: ("NCL", "NLC"), 3: ("NCDHW", "NDHWC")}
SMALL = st.integers(-3, 5)
PER_AXIS = st.one_of(SMALL, st.lists(SMALL, max_size=7).map(tuple), st.lists(SMALL, max_size=7),
                     st.just(np.array([1, 2, 1])), st.just(np.int64(2)), st.just((1.5, 1, 1)), st.just((True,) * 3),
                     junk(), st.integers(2**31 - 2, 2**64), st.tuples(st.integers(2**31 - 2, 2**40), SMALL, SMALL))
LAYOUTS = st.one_of(st.sampled_from(["NCL", "NLC", "ncl", " nlc ", "NCDHW", "NDHWC", "ndhwc", "NCHW", "NHWC", 0, 1,
                                     synet.TensorFormat.NHWC]), junk())
ACTIVATIONS = st.one_of(st.sampled_from(list(synet.Activation)), st.integers(-2, 12), junk())
OUT_DTYPES = st.one_of(st.sampled_from([None, np.float32, BF16, "bf16", np.uint16, np.float64, np.uint8]), junk())
THREADS = st.one_of(st.none(), st.integers(-2, 4), junk())
DIMS = st.sampled_from([1, 3])


def channels_first(a, channels_last):
    """An array of a channels-last call (x, result: [N, *S, C]; weight: [C_in, *K, C_out/g]) as channels first."""
    return np.moveaxis(np.asarray(a), -1, 1) if channels_last else np.asarray(a)


def channels_last(a):
    return np.ascontiguousarray(np.moveaxis(a, 1, -1))


# ---- the functional forms, anything -------------------------------------------------------------------------


@given(DIMS, arrays(max_dims=6), arrays(max_dims=6), st.one_of(st.none(), arrays(), junk()), PER_AXIS, PER_AXIS,
       PER_AXIS, st.one_of(SMALL, junk()), PER_AXIS, LAYOUTS, ACTIVATIONS, st.one_of(st.none(), arrays(), junk()),
       OUT_DTYPES, st.one_of(st.none(), arrays(max_dims=6)), THREADS)
def test_functional_anything(dims, x, w, bias, stride, padding, output_padding, groups, dilation, layout,
                             activation, params, out_dtype, out, n_threads):
    attempt(FUNCTIONS[dims], x, w, bias, stride, padding, output_padding, groups, dilation, layout=layout,
            activation=activation, activation_params=params, out_dtype=out_dtype, out=out, n_threads=n_threads)


MUTATIONS = ["none", "x_strided", "x_readonly", "x_list", "x_f64", "x_int", "x_uint16", "x_bool", "x_complex",
             "x_object", "x_unbatched", "x_rank_up", "x_rank_down", "x_empty_batch", "x_empty_channels",
             "x_empty_space", "x_nan", "x_huge", "w_transposed", "w_rank_down", "w_empty_out", "w_empty_kernel",
             "w_nan", "w_inf", "w_strided", "w_bf16", "w_list", "w_huge", "bias_short", "bias_long", "bias_2d",
             "bias_nan", "bias_str", "params_short", "params_nan", "out_alias_x", *OUT_MUTATIONS]


def huge(ndim, axis, keep):
    """A zero-stride float32 view of about 2**59 elements (nothing of that size can be allocated) with `keep`
    along `axis` (x's channels: the call gets past the shape checks)."""
    side = 2 ** (59 // max(1, ndim - 1))
    shape = [side] * ndim
    if ndim:
        shape[axis] = keep
    return np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), shape=tuple(shape), strides=(0,) * ndim)


def mutate(m, x, weight, bias, params, nhwc, seed):
    """One hostile variant of a valid call's arrays (after an earlier mutation some do not apply: then the
    arrays stay as they are)."""
    if m.startswith("x_") and not isinstance(x, np.ndarray):
        x = np.array(x, np.float32)
    if m.startswith("w_") and not isinstance(weight, np.ndarray):
        weight = np.array(weight, np.float32)
    if m.startswith("bias_") and not isinstance(bias, np.ndarray):
        return x, weight, bias, params
    try:
        if m == "x_strided":
            x = np.repeat(x, 2, axis=-1)[..., ::2]
        elif m == "x_readonly":
            x = x.copy()
            x.flags.writeable = False
        elif m == "x_list":
            x = x.tolist()
        elif m in ("x_f64", "x_int", "x_bool", "x_complex", "x_object"):
            x = x.astype({"x_f64": np.float64, "x_int": np.int32, "x_bool": np.bool_, "x_complex": np.complex64,
                          "x_object": object}[m])
        elif m == "x_uint16":
            x = np.asarray(x, np.float32).astype(BF16).view(np.uint16)
        elif m == "x_unbatched":
            x = x[0] if len(x) else x
        elif m == "x_rank_up":
            x = x[None]
        elif m == "x_rank_down" and x.ndim >= 2 and x.size:
            x = x.reshape(x.shape[:-2] + (-1,))
        elif m == "x_empty_batch":
            x = x[:0]
        elif m == "x_empty_channels":
            x = x[..., :0] if nhwc else x[:, :0]
        elif m == "x_empty_space":
            x = x[:, :0] if nhwc else x[..., :0]
        elif m == "x_nan":
            x = np.array(x, np.float32)
            x.reshape(-1)[::3] = [np.nan, np.inf, -np.inf][seed % 3]
        elif m == "x_huge":
            x = huge(x.ndim, -1 if nhwc else min(1, x.ndim - 1), x.shape[-1 if nhwc else min(1, x.ndim - 1)])
        elif m == "w_transposed":
            weight = weight.T
        elif m == "w_rank_down":
            weight = weight[0]
        elif m == "w_empty_out":
            weight = weight[..., :0] if nhwc else weight[:, :0]
        elif m == "w_empty_kernel":
            weight = weight[:, :, :0] if not nhwc else weight[:, :0]
        elif m in ("w_nan", "w_inf"):
            weight = weight.copy()
            weight.reshape(-1)[::2] = np.nan if m == "w_nan" else -np.inf
        elif m == "w_strided":
            weight = np.repeat(weight, 2, axis=0)[::2]
        elif m == "w_bf16":
            weight = weight.astype(BF16)
        elif m == "w_list":
            weight = weight.tolist()
        elif m == "w_huge":
            weight = huge(weight.ndim, 0, weight.shape[0])
        elif m == "bias_short":
            bias = bias[:-1]
        elif m == "bias_long":
            bias = np.append(bias, 1)
        elif m == "bias_2d":
            bias = bias[None]
        elif m == "bias_nan":
            bias = np.full(bias.shape, np.nan, np.float32)
        elif m == "bias_str":
            bias = "bias"
        elif m == "params_short":
            params = [0.5]
        elif m == "params_nan":
            params = [np.nan] * 64
    except (IndexError, ValueError, TypeError):   # an earlier mutation left no room for this one
        pass
    return x, weight, bias, params


@given(DIMS, st.integers(1, 2), st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.integers(1, 4),
       st.integers(1, 3), PER_AXIS, PER_AXIS, PER_AXIS, PER_AXIS, st.integers(-1, 4), st.booleans(),
       st.sampled_from(MUTATIONS), st.sampled_from(MUTATIONS), st.sampled_from(["identity", "prelu", "hswish"]),
       st.integers(0, 2**32 - 1))
def test_functional_near_valid(dims, n, cg_in, cg_out, groups, size, k, stride, padding, output_padding, dilation,
                               groups_given, nhwc, mutation, mutation2, activation, seed):
    """Valid shapes, hostile per-axis parameters and hostile variants of each array: an allowed outcome; an
    `out` of the right kind gets the same bits as the result."""
    rng = np.random.default_rng(seed)
    c_in, c_out = cg_in * groups, cg_out * groups
    spatial, kernel = (size,) * dims, (k,) * dims
    x = rng.standard_normal((n, *spatial, c_in) if nhwc else (n, c_in, *spatial)).astype(np.float32)
    weight = rng.standard_normal((c_in, *kernel, cg_out) if nhwc else (c_in, cg_out, *kernel)).astype(np.float32)
    bias = rng.standard_normal(c_out).astype(np.float32)
    params = rng.uniform(-1, 1, c_out) if activation == "prelu" else None
    for m in sorted((mutation, mutation2), key=lambda m: m.endswith("_huge")):   # huge views last: never copied
        x, weight, bias, params = mutate(m, x, weight, bias, params, nhwc, seed)
    call = dict(layout=LAYOUT_NAMES[dims][nhwc], activation=activation, activation_params=params)
    fn = FUNCTIONS[dims]
    g = groups_given if groups_given != 4 else groups
    out = np.asarray(x) if "out_alias_x" in (mutation, mutation2) else None
    result = attempt(fn, x, weight, bias, stride, padding, output_padding, g, dilation, out=out, **call)
    if failed(result) or mutation not in OUT_MUTATIONS:
        return
    out = out_variant(result, mutation, x)   # the same call again with an `out` of the right shape, or a wrong one
    again = attempt(fn, x, weight, bias, stride, padding, output_padding, g, dilation, out=out, **call)
    check_again(again, out, result, mutation)


# ---- the functional forms, well-formed: the reference ------------------------------------------------------


@st.composite
def valid_calls(draw):
    """A well-formed call of random geometry; one time in eight an empty batch, channel count or length, one
    in eight pads that may leave no output."""
    dims = draw(DIMS)
    depthwise = draw(st.integers(0, 3)) == 0
    groups = draw(st.integers(1, 5)) if depthwise else draw(st.sampled_from([1, 1, 2, 3]))
    cg_in = 1 if depthwise else draw(st.sampled_from([1, 2, 3, 5, 8, 16, 17] if dims == 1 else [1, 2, 3, 16, 17]))
    cg_out = 1 if depthwise else draw(st.sampled_from([1, 3, 5, 16] if dims == 1 else [1, 3, 5]))
    size = [draw(st.integers(1, 9 if dims == 1 else 3)) for _ in range(dims)]
    n = draw(st.sampled_from([1, 1, 2]))
    empty = draw(st.sampled_from([None] * 28 + ["batch", "c_in", "c_out", "size"]))
    if empty == "batch":
        n = 0
    elif empty == "c_in":
        cg_in = 0
    elif empty == "c_out":
        cg_out = 0
    elif empty == "size":
        size[draw(st.integers(0, dims - 1))] = 0
    kernel = tuple(draw(st.integers(1, 4 if dims == 1 else 3)) for _ in range(dims))
    stride = tuple(draw(st.integers(1, 3)) for _ in range(dims))
    dilation = tuple(draw(st.integers(1, 2)) for _ in range(dims))
    extra = tuple(draw(st.integers(0, max(s, d) - 1)) for s, d in zip(stride, dilation))
    full = [s * (i - 1) + d * (k - 1) + 1 + o for i, k, s, d, o in zip(size, kernel, stride, dilation, extra)]
    most = [max(1, f + 2) if draw(st.integers(0, 7)) == 0 else max(0, f - 1) // 2 for f in full]
    pads = tuple(draw(st.integers(0, m)) for m in most + most)
    return dict(dims=dims, n=n, c_in=cg_in * groups, c_out=cg_out * groups, groups=groups, size=tuple(size),
                kernel=kernel, stride=stride, dilation=dilation, extra=extra, pads=pads,
                pad_form=draw(st.sampled_from(["full", "full", "symmetric", "int"])), nhwc=draw(st.booleans()),
                act=draw(st.sampled_from(list(synet.Activation))), x_type=draw(st.sampled_from(["f32", "bf16",
                                                                                                "u16"])),
                out_type=draw(st.sampled_from(["f32", "bf16", None])), with_bias=draw(st.booleans()),
                unbatched=draw(st.integers(0, 5)) == 0, n_threads=draw(st.sampled_from([1, 2, None])),
                special=draw(st.sampled_from([None] * 4 + ["x_nan", "x_inf", "w_nan", "w_inf", "w_big"])),
                seed=draw(st.integers(0, 2**32 - 1)))


def padding_of(case):
    """The call's padding argument, and the (begin, end) it means."""
    dims, pads = case["dims"], case["pads"]
    if case["pad_form"] == "int":
        return pads[0], (pads[0],) * dims, (pads[0],) * dims
    if case["pad_form"] == "symmetric":
        return pads[:dims], pads[:dims], pads[:dims]
    return pads, pads[:dims], pads[dims:]


@given(valid_calls())
def test_right_results_random_geometry(case):
    """Within SPEC §6's tolerance of the float64 reference (NaN and ±inf exactly where it has them); the same
    bits into an `out`; 1-D: the 2-D kernel's bits with H = 1; 3-D: Deconvolution3d16b's bits."""
    dims, nhwc, groups = case["dims"], case["nhwc"], case["groups"]
    rng = np.random.default_rng(case["seed"])
    x = rng.standard_normal((case["n"], case["c_in"], *case["size"])).astype(np.float32)
    w = rng.standard_normal((case["c_in"], case["c_out"] // groups, *case["kernel"])).astype(np.float32)
    bias = rng.standard_normal(case["c_out"]).astype(np.float32) if case["with_bias"] else None
    act = case["act"]
    params = rng.uniform(-1.5, 1.5, case["c_out"]) if act == synet.Activation.PRELU else None
    special = case["special"]
    if special:   # one NaN or ±inf in x or in the weights (w_big: finite in FP32, ±inf in BF16)
        target = x if special[0] == "x" else w
        if target.size:
            value = {"nan": np.nan, "inf": (-1) ** case["seed"] * np.inf, "big": -3.4e38}[special[2:]]
            target.reshape(-1)[case["seed"] % target.size] = value
    xs, ws = (channels_last(x), channels_last(w)) if nhwc else (x, w)
    if case["x_type"] != "f32":
        xs = xs.astype(BF16)
        if case["x_type"] == "u16":
            xs = xs.view(np.uint16)
    if case["unbatched"] and case["n"] == 1:
        xs = xs[0]
    padding, begin, end = padding_of(case)
    out_dtype = {"f32": np.float32, "bf16": BF16, None: None}[case["out_type"]]
    fn = FUNCTIONS[dims]
    layout = LAYOUT_NAMES[dims][nhwc]
    result = attempt(fn, xs, ws, bias, case["stride"], padding, case["extra"], groups, case["dilation"],
                     layout=layout, activation=act, activation_params=params, out_dtype=out_dtype,
                     n_threads=case["n_threads"])
    full = [s * (i - 1) + d * (k - 1) + 1 + o for i, k, s, d, o in zip(case["size"], case["kernel"], case["stride"],
                                                                      case["dilation"], case["extra"])]
    dst = [f - b - e for f, b, e in zip(full, begin, end)]
    # padding that leaves no output is an error whatever the batch and channel counts (as in torch; an empty
    # batch or channel count once excused it); only an empty input length leaves the output's length at 0
    if min(dst) <= 0 and min(case["size"]) > 0:
        event("no output: ValueError")
        assert isinstance(result, ValueError) and str(result).startswith("padding"), result
        return
    assert not failed(result), result
    dst_bf16 = case["out_type"] == "bf16" or (case["out_type"] is None and case["x_type"] != "f32")
    assert result.dtype == (BF16 if dst_bf16 else np.float32)
    dst = [max(d, 0) for d in dst]
    shape = (case["n"], *dst, case["c_out"]) if nhwc else (case["n"], case["c_out"], *dst)
    assert result.shape == (shape[1:] if xs.ndim == dims + 1 else shape)
    got = channels_first(result.reshape(shape), nhwc)
    no_input = min(case["size"]) == 0 or case["c_in"] == 0   # no input reaches the output
    event(f"{dims}-D " + ("empty output" if not got.size else "act(bias)" if no_input else "reference"))
    if got.size:
        if no_input:   # every output is act(bias)
            ref = np.zeros(got.shape) + (0 if bias is None else bias.astype(np.float64).reshape((-1,) + (1,) * dims))
            mag = np.zeros(got.shape)
        else:
            ref, mag = reference_nd(bf16_round(x), bf16_round(w), bias, case["stride"], begin,
                                    [e - o for e, o in zip(end, case["extra"])], case["dilation"], groups)
        assert_close(got, activate(ref, act, params), mag, dst_bf16, activation_slope(act, params))
    # the same bits into an out of the result's shape (BF16 results: a uint16 out too), inside guard bands
    out, guard = guarded(result.shape, np.uint16 if dst_bf16 and case["seed"] % 2 else result.dtype)
    again = attempt(fn, xs, ws, bias, case["stride"], padding, case["extra"], groups, case["dilation"],
                    layout=layout, activation=act, activation_params=params, out_dtype=out_dtype, out=out,
                    n_threads=3 - (case["n_threads"] or 1))
    if no_input and got.size:   # KNOWN BUG, test_deconvolution_nd.py::test_out_is_returned_when_no_input_reaches_it
        assert isinstance(again, np.ndarray) and np.shares_memory(again, out) and again.shape == out.shape, again
    else:
        assert again is out, again
    assert np.array_equal(out.view(np.uint8), result.view(np.uint8))
    assert intact(guard)
    if not got.size or min(case["n"], case["c_in"], case["c_out"], *case["size"]) == 0:   # (an empty input)
        return
    if dims == 1:   # 1-D is the 2-D kernel with H = 1
        two = synet.conv_transpose2d(xs[..., None, :, :] if nhwc else xs[..., None, :],
                                     ws[:, None] if nhwc else ws[:, :, None], bias, (1, case["stride"][0]),
                                     (0, begin[0], 0, end[0]), (0, case["extra"][0]), groups,
                                     (1, case["dilation"][0]), layout="NHWC" if nhwc else "NCHW", activation=act,
                                     activation_params=params, out_dtype=out_dtype)
        assert np.array_equal(two.reshape(-1).view(np.uint8), result.reshape(-1).view(np.uint8))
    elif min(e - o for e, o in zip(end, case["extra"])) >= 0 and xs.ndim == 5:
        conv = synet.ConvParams3d.deconvolution(case["c_in"], *case["size"], case["c_out"], case["kernel"],
                                                case["stride"], case["dilation"],
                                                begin + tuple(e - o for e, o in zip(end, case["extra"])), groups,
                                                act, "f32" if case["x_type"] == "f32" else "bf16",
                                                "bf16" if dst_bf16 else "f32", layout)
        context = synet.Deconvolution3d16b(case["n"], conv)
        context.set_params(ws, bias, params)
        buf, buf_guard = guarded((context.external_buffer_size(),), np.uint8)
        dst, dst_guard = guarded(result.shape, result.dtype)
        assert context.forward(xs, buf, dst) is dst
        assert np.array_equal(dst.view(np.uint8), result.view(np.uint8)), context.info()
        assert intact(buf_guard) and intact(dst_guard)
        event("3-D context compared")


# ---- ConvParams3d and the 3-D context ----------------------------------------------------------------------

INTS = st.one_of(st.integers(-2, 6), st.integers(2**31, 2**64), junk())


@given(INTS, INTS, INTS, INTS, INTS, PER_AXIS, PER_AXIS, PER_AXIS, PER_AXIS, INTS, ACTIVATIONS, junk(), junk(),
       LAYOUTS, st.integers(1, 3), st.one_of(st.integers(-1, 64), junk()))
def test_conv_params_3d_anything(src_c, src_d, src_h, src_w, dst_c, kernel, stride, dilation, pad, group, activation,
                                 src_type, dst_type, layout, batch, compatibility):
    conv = attempt(synet.ConvParams3d.deconvolution, src_c, src_d, src_h, src_w, dst_c, kernel, stride, dilation, pad,
                   group, activation, src_type, dst_type, layout)
    if not failed(conv):
        context = attempt(synet.Deconvolution3d16b, batch, conv, compatibility)
        if not failed(context):
            weights = conv.src_c * conv.kernel_z * conv.kernel_y * conv.kernel_x * conv.dst_c // conv.group
            if weights <= 1 << 16:
                attempt(context.set_params, np.ones(weights, np.float32))


@given(st.lists(st.one_of(INTS, junk(), st.sampled_from(list(synet.DataType)), LAYOUTS), min_size=29, max_size=29),
       st.one_of(st.integers(-1, 3), junk()), st.booleans())
def test_raw_conv_params_3d_in_init(fields, batch, two_d):
    conv = attempt(synet.ConvParams3d, *fields)
    if not failed(conv):
        context = synet.Deconvolution3d16b() if not two_d else synet.Deconvolution16b()
        result = attempt(context.init, batch, conv)
        if two_d:   # a 2-D context takes no ConvParams3d
            assert failed(result), result
            if type(batch) is int and batch >= 1:
                assert isinstance(result, TypeError), result
        attempt(context.forward, np.zeros(8, np.float32))
