"""Fuzz QuantizedAdd and quantized_add: right results or Python exceptions, whatever comes in.

Hostile calls (any arrays, junk parameters, per-axis arrays of any shape, any axis) must end in a result or
one of the allowed exceptions; well-formed calls (UINT8 / INT8 / FLOAT32 in any mix, per tensor or per axis,
broadcasting shapes) must equal the float64 reference, and a dst must be written inside its bounds only.
"""

import numpy as np
from fuzzing import arrays, attempt, failed, guarded, intact, junk
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from reference import RANGES, check_add

import synet

NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-3, 300), junk())
PER_AXIS = st.one_of(arrays(max_dims=2, max_side=7, huge=False),
                     st.lists(st.one_of(st.floats(allow_nan=True), st.integers(-200, 300)), max_size=7))
SCALES = st.one_of(NUMBERS, PER_AXIS)
AXES = st.one_of(st.integers(-6, 6), junk())
ACTIVATIONS = st.one_of(st.sampled_from(list(synet.Activation)), st.integers(-2, 12), junk())
DTYPES = st.one_of(st.sampled_from([np.uint8, np.int8, np.float32, "i8", "8i", synet.DataType.INT8, np.int16,
                                    np.float16]), junk())


@given(arrays(), arrays(), SCALES, SCALES, SCALES, SCALES, SCALES, SCALES, DTYPES, ACTIVATIONS,
       st.one_of(st.none(), arrays(), st.lists(st.floats(), max_size=4)), st.one_of(st.none(), arrays()),
       st.one_of(st.none(), st.integers(-3, 3)), AXES)
def test_functional(a, b, a_scale, a_zero, b_scale, b_zero, dst_scale, dst_zero, dst_dtype, activation, params,
                    out, n_threads, axis):
    attempt(synet.quantized_add, a, b, a_scale=a_scale, a_zero=a_zero, b_scale=b_scale, b_zero=b_zero,
            dst_scale=dst_scale, dst_zero=dst_zero, dst_dtype=dst_dtype, activation=activation,
            activation_params=params, out=out, n_threads=n_threads, axis=axis)


SHAPES = st.one_of(st.lists(st.integers(0, 5), max_size=4), junk())
TYPES = st.one_of(st.sampled_from(["u8", "f32", "i8", synet.DataType.UINT8, synet.DataType.FLOAT32,
                                   synet.DataType.INT8, np.int8, "int16"]), junk())
OPERATIONS = st.lists(st.sampled_from(["init", "init_good", "init_per_axis", "forward", "forward_inplace", "clear",
                                       "enable", "kernel"]), min_size=1, max_size=8)


@given(OPERATIONS, st.tuples(SHAPES, TYPES, SCALES, SCALES, SHAPES, TYPES, SCALES, SCALES, ACTIVATIONS,
                             st.one_of(st.none(), arrays()), TYPES, SCALES, SCALES), AXES,
       arrays(), arrays(), st.one_of(st.none(), arrays()), st.integers(1, 300), st.sampled_from(list(synet.Activation)),
       st.sampled_from(["u8", "i8"]))
def test_context_in_any_order(operations, junk_args, axis, a, b, dst, channels, act, qtype):
    add = synet.QuantizedAdd()
    shape = [1, channels % 7, 3, 2]
    zero = 47 if qtype == "u8" else -47
    good_args = (shape, qtype, 0.01, zero, shape, qtype, 0.02, 30, act, np.full(8, 0.1, np.float32), qtype, 0.015,
                 38)
    per_axis = (shape, qtype, np.full(shape[1], 0.01), np.full(shape[1], zero), [1, shape[1], 1, 1], "u8", 0.02,
                np.arange(shape[1]), act, np.full(8, 0.1, np.float32), qtype, np.linspace(0.01, 0.02, shape[1]), 3)
    for operation in operations:
        if operation == "init":
            attempt(add.init, *junk_args, axis=axis)
        elif operation == "init_good":
            attempt(add.init, *good_args)
        elif operation == "init_per_axis":
            attempt(add.init, *per_axis, axis=1)
        elif operation == "forward":
            attempt(add.forward, a, b, dst)
        elif operation == "forward_inplace":
            attempt(add.forward, a, b, a)
        elif operation == "clear":
            add.clear()
        elif operation == "enable":
            assert isinstance(add.enable(), bool)
        else:
            assert add.kernel is None or add.kernel.split()[0] in ("generic", "folded", "lookup")


@st.composite
def valid_calls(draw):
    """A well-formed call: broadcasting shapes, any type mix, per-tensor or per-axis parameters (all on one
    output axis), valid scales of any magnitude, valid zero points, any activation (PRELU: one slope per
    channel of output axis 1, or a single one)."""
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=1, max_dims=4, max_side=9))
    sa, sb = shapes.input_shapes
    out = np.broadcast_shapes(sa, sb)
    types = [np.dtype(draw(st.sampled_from([np.uint8, np.int8, np.float32]))) for _ in range(3)]
    axis = draw(st.integers(-4, 3))
    scale = st.floats(1e-6, 1e3)
    q, out_axis = {}, None
    for name, shape, dtype in (("a", sa, types[0]), ("b", sb, types[1]), ("dst", out, types[2])):
        lo, hi = RANGES.get(dtype, (0, 255))
        rank = len(shape)
        here = axis % rank + len(out) - rank if -rank <= axis < rank else None
        n = shape[axis % rank] if here is not None else 0
        per_axis = (dtype != np.float32 and here is not None and n > 1 and out_axis in (None, here)
                    and draw(st.booleans()))
        if per_axis:
            out_axis = here
            q[f"{name}_scale"] = np.array(draw(st.lists(scale, min_size=n, max_size=n)))
            q[f"{name}_zero"] = np.array(draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n)))
        else:
            q[f"{name}_scale"] = draw(scale)
            q[f"{name}_zero"] = draw(st.integers(lo, hi))
    act = draw(st.sampled_from([synet.Activation.IDENTITY] * 4 + list(synet.Activation)))
    params = None
    if act == synet.Activation.PRELU:
        channels = out[1] if len(out) >= 2 and draw(st.booleans()) else 1
        params = np.array(draw(st.lists(st.floats(-2, 2), min_size=channels, max_size=channels)), np.float32)
    return sa, sb, types, axis, q, act, params, draw(st.integers(0, 2**32 - 1))


def operand(dtype, shape, rng):
    if dtype == np.float32:
        return (rng.standard_normal(shape) * rng.choice([0.01, 3.0, 1e4])).astype(np.float32)
    return rng.integers(0, 256, shape, dtype=np.uint8).view(dtype)


@given(valid_calls())
def test_valid_calls_equal_the_reference(call):
    """Well-formed calls (any activation): within 1 of the float64 formula and exact away from ties (1-byte
    outputs), within 1e-6 relative (float32), written inside dst only; the context gives the same bits."""
    sa, sb, types, axis, q, act, params, seed = call
    rng = np.random.default_rng(seed)
    a, b = operand(types[0], sa, rng), operand(types[1], sb, rng)
    shape = np.broadcast_shapes(sa, sb)
    out, guard = guarded(shape, types[2])
    result = attempt(synet.quantized_add, a, b, **q, dst_dtype=types[2], axis=axis, out=out, activation=act,
                     activation_params=params)
    assert not failed(result), result
    assert result is out
    assert intact(guard)
    check_add(result, a, b, q, act, params, axis=axis)
    context = attempt(synet.QuantizedAdd, sa, types[0], q["a_scale"], q["a_zero"], sb, types[1], q["b_scale"],
                      q["b_zero"], act, params, types[2], q["dst_scale"], q["dst_zero"], axis=axis)
    assert not failed(context), context
    assert context.forward(a, b).tobytes() == result.tobytes()


@st.composite
def invalid_calls(draw):
    """A well-formed call with one parameter broken: ValueError (TypeError for a non-int axis) naming it."""
    shape = (2, 6, 3)
    a_dtype = np.dtype(draw(st.sampled_from([np.uint8, np.int8])))
    lo, hi = RANGES[a_dtype]
    good = dict(a_scale=np.full(6, 0.01), a_zero=np.zeros(6, np.int64), b_scale=0.02, b_zero=3, dst_scale=0.015,
                dst_zero=5)
    param, value = draw(st.sampled_from([
        ("a_scale", np.full(5, 0.01)), ("a_scale", np.full(7, 0.01)), ("a_scale", np.full((2, 3), 0.01)),
        ("a_scale", np.array([])), ("a_zero", np.full(6, hi + 1)), ("a_zero", np.full(6, lo - 1)),
        ("a_scale", np.array([0.01] * 5 + [0.0])), ("a_scale", np.array([np.inf] * 6)),
        ("a_scale", np.array([np.nan] * 6)), ("b_zero", 256), ("dst_zero", -129), ("dst_scale", -1.0),
        ("b_scale", np.full(3, 0.02)), ("dst_scale", np.full(3, 0.02)),
    ]))
    return shape, a_dtype, dict(good, **{param: value}), param


@given(invalid_calls())
def test_invalid_calls_raise_naming_the_parameter(call):
    shape, a_dtype, q, param = call
    a = np.zeros(shape, a_dtype)
    b = np.zeros(shape, np.uint8)
    result = attempt(synet.quantized_add, a, b, **q)
    assert isinstance(result, ValueError), result
    assert str(result).startswith((param, "axis")), str(result)
