"""Fuzz QuantizedAdd and quantized_add: right results or Python exceptions, whatever comes in."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import synet
from fuzzing import ALLOWED, arrays, attempt, junk

SCALES = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-3, 300), junk())
ACTIVATIONS = st.one_of(st.sampled_from(list(synet.Activation)), st.integers(-2, 12), junk())


@given(arrays(), arrays(), SCALES, SCALES, SCALES, SCALES, SCALES, SCALES,
       st.one_of(st.sampled_from([np.uint8, np.float32]), junk()), ACTIVATIONS,
       st.one_of(st.none(), arrays(), st.lists(st.floats(), max_size=4)), st.one_of(st.none(), arrays()),
       st.one_of(st.none(), st.integers(-3, 3)))
def test_functional(a, b, a_scale, a_zero, b_scale, b_zero, dst_scale, dst_zero, dst_dtype, activation, params,
                    out, n_threads):
    attempt(synet.quantized_add, a, b, a_scale=a_scale, a_zero=a_zero, b_scale=b_scale, b_zero=b_zero,
            dst_scale=dst_scale, dst_zero=dst_zero, dst_dtype=dst_dtype, activation=activation,
            activation_params=params, out=out, n_threads=n_threads)


SHAPES = st.one_of(st.lists(st.integers(0, 5), max_size=4), junk())
TYPES = st.one_of(st.sampled_from(["u8", "f32", synet.DataType.UINT8, synet.DataType.FLOAT32]), junk())
OPERATIONS = st.lists(st.sampled_from(["init", "init_good", "forward", "forward_inplace", "clear", "enable",
                                       "kernel"]), min_size=1, max_size=8)


@given(OPERATIONS, st.tuples(SHAPES, TYPES, SCALES, SCALES, SHAPES, TYPES, SCALES, SCALES, ACTIVATIONS,
                             st.one_of(st.none(), arrays()), TYPES, SCALES, SCALES),
       arrays(), arrays(), st.one_of(st.none(), arrays()), st.integers(1, 300), st.sampled_from(list(synet.Activation)))
def test_context_in_any_order(operations, junk_args, a, b, dst, channels, act):
    add = synet.QuantizedAdd()
    shape = [1, channels % 7, 3, 2]
    good_args = (shape, "u8", 0.01, 47, shape, "u8", 0.02, 30, act, np.full(8, 0.1, np.float32), "u8", 0.015, 38)
    for operation in operations:
        if operation == "init":
            attempt(add.init, *junk_args)
        elif operation == "init_good":
            attempt(add.init, *good_args)
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


def reference(a, b, sa, za, sb, zb, sd, zd):
    value = (a.astype(np.float64) - za) * sa + (b.astype(np.float64) - zb) * sb
    return np.clip(np.rint(value / sd) + zd, 0, 255)


@given(st.integers(0, 2**32 - 1), st.floats(1e-6, 1e3), st.integers(0, 255), st.floats(1e-6, 1e3),
       st.integers(0, 255), st.floats(1e-6, 1e3), st.integers(0, 255),
       st.sampled_from([(7,), (2, 3, 4, 5), (1, 300, 2, 2)]))
def test_right_sizes_random_scales(seed, sa, za, sb, zb, sd, zd, shape):
    """Well-formed u8 calls with arbitrary valid scales: within 1 of the float64 formula."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 256, shape, dtype=np.uint8)
    b = rng.integers(0, 256, shape, dtype=np.uint8)
    result = attempt(synet.quantized_add, a, b, a_scale=sa, a_zero=za, b_scale=sb, b_zero=zb, dst_scale=sd,
                     dst_zero=zd)
    assert not isinstance(result, ALLOWED), result
    assert np.abs(result.astype(np.float64) - reference(a, b, sa, za, sb, zb, sd, zd)).max() <= 1
