"""QuantizedAdd against a float64 NumPy evaluation of SPEC section 5 written here, independently."""

import math
import threading

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

import synet
from synet import Activation, QuantizedAdd, quantized_add

ACTIVATIONS = list(Activation)
U8, F32 = np.dtype(np.uint8), np.dtype(np.float32)
TYPES = [U8, F32]
COMBOS = [(a, b, d) for a in TYPES for b in TYPES for d in TYPES]
SEED_Q = dict(a_scale=0.010, a_zero=47, b_scale=0.020, b_zero=30, dst_scale=0.015, dst_zero=38)
TIE_TOLERANCE = 1e-3
_erf = np.frompyfunc(math.erf, 1, 1)


# ---------------------------------------------------------------------------------------------
# The reference


def default_params(act, channels):
    return {
        Activation.LEAKY_RELU: [0.01], Activation.RESTRICT_RANGE: [0.0, 6.0],
        Activation.PRELU: list(np.linspace(-0.5, 1.5, channels)), Activation.ELU: [1.0],
        Activation.HSWISH: [3.0, 1.0 / 6.0], Activation.MISH: [20.0],
        Activation.HARD_SIGMOID: [1.0 / 6.0, 0.5], Activation.SWISH: [1.0],
    }.get(act)


def activate_ref(x, act, params):
    """SPEC section 2 in float64 (params as the kernels see them: float32)."""
    p = None if params is None else np.asarray(params, dtype=np.float32).astype(np.float64)
    with np.errstate(all="ignore"):
        if act == Activation.IDENTITY:
            return x
        if act == Activation.RELU:
            return np.maximum(0.0, x)
        if act == Activation.LEAKY_RELU:
            return np.where(x > 0, x, p[0] * x)
        if act == Activation.RESTRICT_RANGE:
            return np.minimum(np.maximum(p[0], x), p[1])
        if act == Activation.PRELU:
            if x.ndim >= 2 and p.size > 1:
                slope = p.reshape((1, -1) + (1,) * (x.ndim - 2))
            else:
                slope = p[0]
            return np.where(x > 0, x, slope * x)
        if act == Activation.ELU:
            return np.where(x >= 0, x, p[0] * (np.exp(x) - 1.0))
        if act == Activation.HSWISH:
            return np.maximum(np.minimum(x, p[0]) + p[0], 0.0) * p[1] * x
        if act == Activation.MISH:
            return np.where(x > p[0], x, x * np.tanh(np.log1p(np.exp(x))))
        if act == Activation.HARD_SIGMOID:
            return np.maximum(0.0, np.minimum(x * p[0] + p[1], 1.0))
        if act == Activation.SWISH:
            return x / (1.0 + np.exp(-p[0] * x))
        if act == Activation.GELU:
            return x * (1.0 + np.asarray(_erf(x / math.sqrt(2.0)), dtype=np.float64)) / 2.0
    raise AssertionError(act)


def dequantize_ref(x, scale, zero):
    x = np.asarray(x)
    if x.dtype == np.uint8:
        return (x.astype(np.float64) - zero) * scale
    return x.astype(np.float64)


def value_ref(a, b, q, act, params):
    return activate_ref(dequantize_ref(a, q["a_scale"], q["a_zero"]) + dequantize_ref(b, q["b_scale"], q["b_zero"]),
                        act, params)


def check_u8(got, value, dst_scale, dst_zero):
    """Within 1 of the float64 formula; exact unless within TIE_TOLERANCE of a rounding tie."""
    with np.errstate(all="ignore"):
        q = value / dst_scale
        expected = np.where(np.isnan(q), 0, np.clip(np.rint(q) + dst_zero, 0, 255))
        near_tie = np.abs(np.abs(q - np.floor(q)) - 0.5) < TIE_TOLERANCE
    diff = np.abs(got.astype(np.int64) - expected.astype(np.int64))
    assert got.dtype == np.uint8
    assert diff.max(initial=0) <= 1, f"off by {diff.max()}"
    bad = (diff != 0) & ~near_tie
    assert not bad.any(), (f"{bad.sum()} inexact away from ties, e.g. q={q[bad][:5]} "
                           f"got {got[bad][:5]} expected {expected[bad][:5]}")


def check_f32(got, value):
    assert got.dtype == np.float32
    v = np.asarray(value, dtype=np.float64)
    g = got.astype(np.float64)
    assert np.array_equal(np.isnan(g), np.isnan(v))
    finite = np.isfinite(v) & (np.abs(v) < 3.4e38)
    assert np.array_equal(g[np.isinf(v)], v[np.isinf(v)])
    err = np.abs(g[finite] - v[finite])
    tol = 1e-6 * np.maximum(1.0, np.abs(v[finite]))
    assert (err <= tol).all(), f"max error {np.max(err / tol, initial=0)} x tolerance"


def check(got, a, b, q, act=Activation.IDENTITY, params=None):
    value = value_ref(a, b, q, act, params)
    assert got.shape == value.shape
    if got.dtype == np.uint8:
        check_u8(got, value, q["dst_scale"], q["dst_zero"])
    else:
        check_f32(got, value)


def make(dtype, shape, rng, spread=3.0):
    if dtype == U8:
        return rng.integers(0, 256, shape, dtype=np.uint8)
    return (rng.standard_normal(shape) * spread).astype(np.float32)


def context(a, b, dst_dtype, q, act=Activation.IDENTITY, params=None):
    return QuantizedAdd(a.shape, a.dtype, q["a_scale"], q["a_zero"], b.shape, b.dtype, q["b_scale"],
                        q["b_zero"], act, params, dst_dtype, q["dst_scale"], q["dst_zero"])


# ---------------------------------------------------------------------------------------------
# The seed, all combinations, all activations


def test_seed_example():
    a = np.full(64, 50, np.uint8)
    b = np.full(64, 80, np.uint8)
    add = QuantizedAdd([64], "8u", 0.010, 47, [64], "8u", 0.020, 30, "identity", None, "8u", 0.015, 38)
    assert add.enable()
    dst = np.zeros(64, np.uint8)
    assert add.forward(a, b, dst) is dst
    assert (dst == 107).all()  # round((0.03 + 1.0) / 0.015) + 38
    add.clear()
    assert not add.enable()


@pytest.mark.parametrize("act", ACTIVATIONS, ids=lambda a: a.name)
@pytest.mark.parametrize("combo", COMBOS, ids=lambda c: "+".join(t.name for t in c))
def test_combinations_and_activations(combo, act):
    a_dtype, b_dtype, d_dtype = combo
    rng = np.random.default_rng(int(act) * 8 + COMBOS.index(combo))
    shape = (2, 5, 7, 9)
    a, b = make(a_dtype, shape, rng), make(b_dtype, shape, rng)
    params = default_params(act, shape[1])
    add = context(a, b, d_dtype, SEED_Q, act, params)
    check(add.forward(a, b), a, b, SEED_Q, act, params)
    got = quantized_add(a, b, **SEED_Q, dst_dtype=d_dtype, activation=act.name.lower(), activation_params=params)
    check(got, a, b, SEED_Q, act, params)


@pytest.mark.parametrize("act", ACTIVATIONS, ids=lambda a: a.name)
def test_activation_params_custom(act):
    rng = np.random.default_rng(7)
    a, b = make(U8, (3, 4, 50), rng), make(F32, (3, 4, 50), rng)
    params = {Activation.LEAKY_RELU: [0.3], Activation.RESTRICT_RANGE: [-1.0, 0.5, 99],
              Activation.PRELU: [0.25], Activation.ELU: [0.7], Activation.HSWISH: [2.0, 0.25],
              Activation.MISH: [1.0], Activation.HARD_SIGMOID: [0.2, 0.4], Activation.SWISH: [1.7]}.get(act)
    for dtype in TYPES:
        check(quantized_add(a, b, **SEED_Q, dst_dtype=dtype, activation=act, activation_params=params),
              a, b, SEED_Q, act, params)


def test_activation_defaults_match_spec():
    rng = np.random.default_rng(3)
    a, b = make(F32, 1000, rng), make(F32, 1000, rng)
    for act in ACTIVATIONS:
        if act == Activation.PRELU:
            continue
        got = quantized_add(a, b, dst_dtype=np.float32, activation=act)
        check(got, a, b, SEED_Q, act, default_params(act, 1))


def test_activation_names():
    a = np.array([100, 10], np.uint8)
    b = np.array([0, 0], np.uint8)
    ref = quantized_add(a, b, a_zero=50, dst_dtype="f32", activation=Activation.LEAKY_RELU)
    for name in ("leaky_relu", "LeakyRelu", "LEAKYRELU", 2):
        assert np.array_equal(quantized_add(a, b, a_zero=50, dst_dtype="f32", activation=name), ref)
    assert ref[1] == np.float32(0.01) * np.float32(-40)


# ---------------------------------------------------------------------------------------------
# Exhaustive u8 sweep, exact ties, every u8 + u8 -> u8 kernel

SWEEP_SETS = [
    SEED_Q,
    dict(a_scale=1 / 3, a_zero=128, b_scale=0.25, b_zero=0, dst_scale=0.1, dst_zero=0),
    dict(a_scale=0.05, a_zero=0, b_scale=0.005, b_zero=255, dst_scale=0.2, dst_zero=255),
    dict(a_scale=0.0123, a_zero=100, b_scale=0.0456, b_zero=200, dst_scale=0.0789, dst_zero=128),
]


def all_pairs(repeat=1):
    pairs = np.arange(65536)
    a, b = (pairs >> 8).astype(np.uint8), (pairs & 255).astype(np.uint8)
    return np.tile(a, repeat), np.tile(b, repeat)


@pytest.mark.parametrize("q", SWEEP_SETS, ids=range(len(SWEEP_SETS)))
@pytest.mark.parametrize("act", [Activation.IDENTITY, Activation.RELU, Activation.HSWISH, Activation.GELU,
                                 Activation.RESTRICT_RANGE], ids=lambda a: a.name)
@pytest.mark.parametrize("repeat", [1, 3], ids=["65536", "3x65536"])
def test_exhaustive_u8_pairs(q, act, repeat):
    a, b = all_pairs(repeat)
    params = default_params(act, 1)
    add = context(a, b, U8, q, act, params)
    expected_kernel = "folded" if act in (Activation.IDENTITY, Activation.RELU) else \
        ("lookup" if repeat > 1 else "generic")
    assert add.kernel.split()[0] == expected_kernel
    check(add.forward(a, b), a, b, q, act, params)
    check(add.forward(a, b, n_threads=2), a, b, q, act, params)


@pytest.mark.parametrize("q", SWEEP_SETS, ids=range(len(SWEEP_SETS)))
@pytest.mark.parametrize("act", [Activation.IDENTITY, Activation.RELU, Activation.LEAKY_RELU,
                                 Activation.RESTRICT_RANGE, Activation.ELU], ids=lambda a: a.name)
def test_exhaustive_mixed_to_u8(q, act):
    # float32 + u8 and u8 + float32 -> u8 over every pair (float32 sums where their bound allows)
    a, b = all_pairs()
    fb = ((b.astype(np.float64) - 30) * 0.02).astype(np.float32)
    params = default_params(act, 1)
    for x, y in ((a, fb), (fb, a)):
        check(context(x, y, U8, q, act, params).forward(x, y), x, y, q, act, params)


@pytest.mark.parametrize("q", SWEEP_SETS + [
    dict(a_scale=0.02, a_zero=0, b_scale=0.0125, b_zero=255, dst_scale=1, dst_zero=0),  # float32 sums, at the bound
    dict(a_scale=0.02, a_zero=0, b_scale=0.0135, b_zero=255, dst_scale=1, dst_zero=0),  # float64 sums, past it
], ids=range(len(SWEEP_SETS) + 2))
def test_exhaustive_u8_to_f32(q):
    a, b = all_pairs()
    for act in (Activation.IDENTITY, Activation.RELU, Activation.RESTRICT_RANGE, Activation.ELU):
        params = default_params(act, 1)
        check(quantized_add(a, b, **q, dst_dtype=np.float32, activation=act, activation_params=params), a, b, q,
              act, params)
        fa = ((a.astype(np.float64) - 100) * 0.03).astype(np.float32)
        check(quantized_add(fa, b, **q, dst_dtype=np.float32, activation=act, activation_params=params), fa, b, q,
              act, params)


@pytest.mark.parametrize("repeat", [1, 3])
@pytest.mark.parametrize("act", [Activation.IDENTITY, Activation.RELU, Activation.LEAKY_RELU])
def test_exact_ties_round_half_to_even(repeat, act):
    # value / dst_scale = (a - 100 + b - 100) / 2: every odd sum is an exact tie
    a, b = all_pairs(repeat)
    q = dict(a_scale=1.0, a_zero=100, b_scale=1.0, b_zero=100, dst_scale=2.0, dst_zero=64)
    params = [0.5] if act == Activation.LEAKY_RELU else None
    got = context(a, b, U8, q, act, params).forward(a, b)
    value = activate_ref(a.astype(np.float64) + b - 200, act, params) / 2.0
    expected = np.clip(np.rint(value) + 64, 0, 255)  # np.rint rounds half to even
    assert np.array_equal(got, expected.astype(np.uint8))


def test_folded_kernel_refused_when_inexact():
    a, b = all_pairs()
    q = dict(a_scale=1.0, a_zero=0, b_scale=1.0, b_zero=255, dst_scale=1e-3, dst_zero=0)
    add = context(a, b, U8, q)
    assert add.kernel.split()[0] == "generic"
    check(add.forward(a, b), a, b, q)
    a3, b3 = all_pairs(3)
    add = context(a3, b3, U8, q)
    assert add.kernel.split()[0] == "lookup"
    check(add.forward(a3, b3), a3, b3, q)


@pytest.mark.parametrize("n", [1, 2, 15, 16, 17, 63, 64, 65, 127, 128, 129, 1000, 4097])
def test_folded_tails(n):
    rng = np.random.default_rng(n)
    a, b = make(U8, n, rng), make(U8, n, rng)
    for act in (Activation.IDENTITY, Activation.RELU):
        for bb in (b, b[:1], b[:1].reshape(())):
            add = context(a, bb, U8, SEED_Q, act)
            assert add.kernel.split()[0] == "folded"
            check(add.forward(a, bb), a, bb, SEED_Q, act)
            check(context(bb, a, U8, SEED_Q, act).forward(bb, a), bb, a, SEED_Q, act)


@pytest.mark.parametrize("offset", [0, 3])
def test_folded_streaming_stores_large_unaligned(offset):
    # outputs of 4 Mi elements or more are written with non-temporal stores after an aligning head
    rng = np.random.default_rng(offset)
    n = (1 << 22) + 77
    a, b = make(U8, n, rng), make(U8, n, rng)
    buffer = np.zeros(n + 64, np.uint8)
    dst = buffer[offset:offset + n]
    add = context(a, b, U8, SEED_Q, Activation.RELU)
    assert add.kernel.split()[0] == "folded"
    add.forward(a, b, dst, n_threads=2)
    check(dst, a, b, SEED_Q, Activation.RELU)
    assert not buffer[:offset].any() and not buffer[offset + n:].any()
    assert add.forward(a, b, n_threads=1).tobytes() == dst.tobytes()
    c = make(U8, 1, rng)
    assert np.array_equal(context(a, c, U8, SEED_Q).forward(a, c), context(a, np.repeat(c, n), U8, SEED_Q)
                          .forward(a, np.repeat(c, n)))


# ---------------------------------------------------------------------------------------------
# Saturation


@pytest.mark.parametrize("b_dtype", TYPES)
def test_saturation_special_values(b_dtype):
    a = np.array([np.inf, -np.inf, np.nan, 1e30, -1e30, 3e38, -3e38, 1e10, -1e10, 0.0, 1e-30, 2**31, -2**31],
                 np.float32)
    b = np.full(a.shape, 30 if b_dtype == U8 else 0, b_dtype)
    got = quantized_add(a, b, b_scale=0.02, b_zero=30, dst_scale=0.015, dst_zero=38)
    assert got.tolist() == [255, 0, 0, 255, 0, 255, 0, 255, 0, 38, 38, 255, 0]
    check(got, a, b, dict(SEED_Q, a_scale=1, a_zero=0))
    # 3e38 + 3e38 overflows float32: still 255
    big = np.array([3e38, -3e38], np.float32)
    assert quantized_add(big, big).tolist() == [255, 0]
    f = quantized_add(big, big, dst_dtype=np.float32)
    assert f.tolist() == [np.inf, -np.inf]
    n = quantized_add(a, np.zeros_like(a), dst_dtype=np.float32)
    assert np.isnan(n[2]) and n[0] == np.inf and n[1] == -np.inf


@pytest.mark.parametrize("act", ACTIVATIONS, ids=lambda a: a.name)
def test_saturation_every_activation(act):
    a = np.array([np.inf, -np.inf, np.nan, 1e30, -1e30, 0.5, -0.5], np.float32)
    b = np.zeros(7, np.float32)
    params = default_params(act, 1)
    got = quantized_add(a, b, dst_scale=0.01, dst_zero=10, activation=act, activation_params=params)
    check(got, a, b, dict(SEED_Q, dst_scale=0.01, dst_zero=10), act, params)
    assert got[2] == 0  # NaN -> 0


def test_saturation_huge_scales():
    a = np.array([0, 255, 128, 127], np.uint8)
    b = np.array([255, 0, 128, 128], np.uint8)
    got = quantized_add(a, b, a_scale=3e38, a_zero=128, b_scale=3e38, b_zero=128, dst_scale=1e-30)
    assert got.tolist() == [0, 0, 0, 0]  # -3e38 / 1e-30 -> -inf; 0 -> dst_zero
    check(got, a, b, dict(a_scale=3e38, a_zero=128, b_scale=3e38, b_zero=128, dst_scale=1e-30, dst_zero=0))
    c = np.array([200, 0, 128, 129], np.uint8)
    tiny = quantized_add(c, np.full(4, 128, np.uint8), a_zero=128, b_zero=128, dst_scale=1e-40, dst_zero=7)
    assert tiny.tolist() == [255, 0, 7, 255]  # a subnormal dst_scale: 0 stays dst_zero, not NaN
    large = quantized_add(a, b, a_scale=1e38, a_zero=128, b_scale=1e38, b_zero=128, dst_scale=3e38, dst_zero=7)
    check(large, a, b, dict(a_scale=1e38, a_zero=128, b_scale=1e38, b_zero=128, dst_scale=3e38, dst_zero=7))


# ---------------------------------------------------------------------------------------------
# Broadcasting, in-place


BROADCAST_CASES = [
    ((1, 256, 7, 7), (1, 256, 1, 1)),
    ((2, 6, 5, 5), (1, 6, 1, 1)),
    ((2, 6, 5, 5), ()),
    ((3, 1), (1, 4)),
    ((4, 5, 6), (6,)),
    ((4, 5, 6), (5, 1)),
    ((1, 1, 1), (1,)),
    ((7,), (3, 1, 7)),
    ((2, 1, 3, 1), (1, 4, 1, 5)),
    ((2, 3, 0), (3, 1)),
    ((0,), ()),
]


@pytest.mark.parametrize("shapes", BROADCAST_CASES, ids=str)
@pytest.mark.parametrize("combo", [(U8, U8, U8), (F32, U8, U8), (U8, F32, F32), (U8, U8, F32)],
                         ids=lambda c: "+".join(t.name for t in c))
@pytest.mark.parametrize("act", [Activation.IDENTITY, Activation.RELU, Activation.PRELU, Activation.SWISH],
                         ids=lambda a: a.name)
def test_broadcasting(shapes, combo, act):
    rng = np.random.default_rng(len(shapes[0]) + len(shapes[1]))
    for sa, sb in (shapes, shapes[::-1]):
        a, b = make(combo[0], sa, rng), make(combo[1], sb, rng)
        out_shape = np.broadcast_shapes(sa, sb)
        channels = out_shape[1] if len(out_shape) >= 2 else 1
        params = default_params(act, channels)
        got = quantized_add(a, b, **SEED_Q, dst_dtype=combo[2], activation=act, activation_params=params)
        assert got.shape == out_shape
        check(got, a, b, SEED_Q, act, params)


def test_broadcast_shape_of_context():
    add = QuantizedAdd([2, 1, 5], "u8", 0.1, 0, [3, 1], "u8", 0.1, 0, "relu", None, "f32", 1, 0)
    assert add.shape == (2, 3, 5)
    a = np.arange(10, dtype=np.uint8).reshape(2, 1, 5)
    b = np.arange(3, dtype=np.uint8).reshape(3, 1)
    dst = add.forward(a, b)
    assert dst.shape == (2, 3, 5)
    np.testing.assert_allclose(dst, (a * 0.1 + b * 0.1).astype(np.float32), rtol=1e-6)


def test_prelu_single_slope_and_low_rank():
    rng = np.random.default_rng(5)
    a = make(F32, (3, 4, 5), rng)
    b = np.zeros((3, 4, 5), np.float32)
    got = quantized_add(a, b, dst_dtype=np.float32, activation="prelu", activation_params=[0.5])
    np.testing.assert_array_equal(got, np.where(a > 0, a, a * np.float32(0.5)))
    v = make(F32, 9, rng)
    got = quantized_add(v, np.float32(0), dst_dtype=np.float32, activation="prelu", activation_params=[0.25])
    np.testing.assert_array_equal(got, np.where(v > 0, v, v * np.float32(0.25)))


@pytest.mark.parametrize("combo", COMBOS, ids=lambda c: "+".join(t.name for t in c))
def test_in_place(combo):
    rng = np.random.default_rng(11)
    shape = (2, 3, 40, 41)
    a, b = make(combo[0], shape, rng), make(combo[1], shape, rng)
    expected = context(a, b, combo[2], SEED_Q).forward(a, b)
    for target in ("a", "b"):
        operand = a if target == "a" else b
        if operand.dtype != combo[2]:
            continue
        x, y = a.copy(), b.copy()
        dst = x if target == "a" else y
        out = context(x, y, combo[2], SEED_Q).forward(x, y, dst)
        assert out is dst
        assert np.array_equal(out, expected)
        x, y = a.copy(), b.copy()
        dst = x if target == "a" else y
        assert quantized_add(x, y, **SEED_Q, dst_dtype=combo[2], out=dst) is dst
        assert np.array_equal(dst, expected)


def test_in_place_large_all_kernels():
    a, b = all_pairs(3)
    for act in (Activation.IDENTITY, Activation.GELU):
        add = context(a, b, U8, SEED_Q, act)
        expected = add.forward(a, b)
        x = a.copy()
        add.forward(x, b, x, n_threads=2)
        assert np.array_equal(x, expected)


# ---------------------------------------------------------------------------------------------
# Hypothesis


@st.composite
def cases(draw):
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=6))
    sa, sb = shapes.input_shapes
    combo = draw(st.sampled_from(COMBOS))
    act = draw(st.sampled_from(ACTIVATIONS))
    scale = st.floats(1e-3, 1.0)
    zero = st.integers(0, 255)
    q = dict(a_scale=draw(scale), a_zero=draw(zero), b_scale=draw(scale), b_zero=draw(zero),
             dst_scale=draw(scale), dst_zero=draw(zero))
    seed = draw(st.integers(0, 2**32 - 1))
    spread = draw(st.sampled_from([0.1, 3.0, 300.0]))
    return sa, sb, combo, act, q, seed, spread


@given(cases())
def test_hypothesis_against_reference(case):
    sa, sb, combo, act, q, seed, spread = case
    rng = np.random.default_rng(seed)
    a, b = make(combo[0], sa, rng, spread), make(combo[1], sb, rng, spread)
    out_shape = np.broadcast_shapes(sa, sb)
    channels = out_shape[1] if len(out_shape) >= 2 else 1
    params = default_params(act, channels)
    add = context(a, b, combo[2], q, act, params)
    got = add.forward(np.ascontiguousarray(a), np.ascontiguousarray(b))
    check(got, a, b, q, act, params)
    assert np.array_equal(quantized_add(a, b, **q, dst_dtype=combo[2], activation=act,
                                        activation_params=params), got, equal_nan=combo[2] == F32)


@given(st.sampled_from(COMBOS), st.sampled_from(ACTIVATIONS), st.integers(0, 2**32 - 1))
def test_hypothesis_threads_bitwise(combo, act, seed):
    rng = np.random.default_rng(seed)
    shape = (1, 8, 131, 150)  # above the parallel threshold
    a, b = make(combo[0], shape, rng), make(combo[1], (1, 8, 1, 1) if seed % 2 else shape, rng)
    add = context(a, b, combo[2], SEED_Q, act, default_params(act, 8))
    one = add.forward(a, b, n_threads=1)
    two = add.forward(a, b, n_threads=2)
    assert one.tobytes() == two.tobytes()


# ---------------------------------------------------------------------------------------------
# Threads and concurrency


@pytest.mark.parametrize("act", [Activation.IDENTITY, Activation.RELU, Activation.HSWISH, Activation.PRELU],
                         ids=lambda a: a.name)
@pytest.mark.parametrize("combo", COMBOS, ids=lambda c: "+".join(t.name for t in c))
def test_threads_bitwise_identical(combo, act):
    rng = np.random.default_rng(17)
    shape = (2, 16, 70, 71)
    a, b = make(combo[0], shape, rng), make(combo[1], shape, rng)
    add = context(a, b, combo[2], SEED_Q, act, default_params(act, 16))
    results = [add.forward(a, b, n_threads=n).tobytes() for n in (1, 2, 3, -1)]
    assert len(set(results)) == 1
    synet.set_num_threads(1)
    try:
        assert add.forward(a, b).tobytes() == results[0]
    finally:
        synet.set_num_threads(None)


def test_one_context_many_python_threads():
    rng = np.random.default_rng(23)
    shape = (1, 32, 64, 64)
    add = QuantizedAdd(shape, "u8", 0.01, 47, [1, 32, 1, 1], "u8", 0.02, 30, "hswish", None, "u8", 0.015, 38)
    inputs = [(make(U8, shape, rng), make(U8, (1, 32, 1, 1), rng)) for _ in range(8)]
    expected = [add.forward(a, b, n_threads=1) for a, b in inputs]
    barrier = threading.Barrier(4)
    failures = []

    def work(k):
        barrier.wait()
        for round_ in range(5):
            for j in range(k, len(inputs), 4):
                got = add.forward(*inputs[j], n_threads=1 + (round_ + j) % 2)
                if not np.array_equal(got, expected[j]):
                    failures.append((k, j))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


# ---------------------------------------------------------------------------------------------
# Context behaviour


def test_context_any_shape_of_right_size_and_reinit():
    add = QuantizedAdd([2, 3], "u8", 0.5, 1, [2, 3], "f32", None, None, "identity", None, "f32", None, None)
    a = np.arange(6, dtype=np.uint8)
    b = np.ones(6, np.float32)
    dst = add.forward(a, b)  # flat arrays of the right size are fine
    assert dst.shape == (2, 3)
    np.testing.assert_array_equal(dst.reshape(-1), (a - 1.0) * 0.5 + 1)
    add.init([2, 3], "u8", 0.5, 1, [2, 3], "f32", None, None, "identity", None, "f32", None, None)  # no-op
    add.init([6], "u8", 0.25, 0, [1], "u8", 1.0, 0, "relu", None, "u8", 0.25, 0)
    assert add.shape == (6,)
    assert add.forward(a, np.array([1], np.uint8)).tolist() == [4, 5, 6, 7, 8, 9]


def test_float32_operand_ignores_its_scale_and_zero():
    a = np.array([1.5, -2.0], np.float32)
    b = np.array([3, 5], np.uint8)
    ref = quantized_add(a, b, b_scale=0.5, b_zero=3, dst_dtype="float32")
    for junk in (0.0, -1.0, float("nan"), "junk", None):
        got = quantized_add(a, b, a_scale=junk, a_zero=junk, b_scale=0.5, b_zero=3, dst_dtype="float32",
                            dst_scale=junk, dst_zero=junk)
        assert np.array_equal(got, ref)
    assert ref.tolist() == [1.5, -1.0]


def test_float64_input_becomes_float32():
    a = np.array([0.1, 0.2])
    got = quantized_add(a, np.array([0.3], np.float32), dst_dtype=np.float32)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, (a.astype(np.float32).astype(np.float64) + np.float64(np.float32(0.3)))
                                  .astype(np.float32))


def test_selftest_runs():
    from synet._selftest import selftest
    assert selftest()


# ---------------------------------------------------------------------------------------------
# Errors: type, and a message naming the parameter

GOOD = dict(a_shape=[2, 3], a_type="u8", a_scale=0.1, a_zero=3, b_shape=[2, 3], b_type="u8", b_scale=0.2,
            b_zero=4, act_type="relu", act_params=None, dst_type="u8", dst_scale=0.3, dst_zero=5)


@pytest.mark.parametrize("param, value, error", [
    ("a_shape", "abc", TypeError), ("a_shape", [2, -1], ValueError), ("b_shape", [2.5], TypeError),
    ("b_shape", [4, 3], ValueError), ("b_shape", None, TypeError),
    ("a_type", "int8", ValueError), ("a_type", "nonsense", ValueError), ("b_type", np.int32, ValueError),
    ("dst_type", "bf16", ValueError), ("dst_type", None, ValueError),
    ("a_scale", 0.0, ValueError), ("a_scale", -1.0, ValueError), ("a_scale", float("inf"), ValueError),
    ("a_scale", float("nan"), ValueError), ("a_scale", "0.1", ValueError), ("b_scale", None, ValueError),
    ("dst_scale", 0, ValueError), ("dst_scale", float("-inf"), ValueError),
    ("a_zero", -1, ValueError), ("a_zero", 256, ValueError), ("b_zero", 1.5, ValueError),
    ("dst_zero", 300, ValueError), ("dst_zero", True, ValueError),
    ("act_type", "softmax", ValueError), ("act_type", 11, ValueError),
    ("act_params", [[1.0]], ValueError), ("act_params", "abc", ValueError),
])
def test_init_errors(param, value, error):
    args = dict(GOOD, **{param: value})
    with pytest.raises(error, match=param):
        QuantizedAdd(**args)
    with pytest.raises(error, match=param):
        QuantizedAdd().init(**args)


@pytest.mark.parametrize("act, params", [
    ("prelu", None), ("prelu", [0.1, 0.2]), ("prelu", []), ("leaky_relu", []), ("restrict_range", [1.0]),
    ("hswish", [3.0]), ("hard_sigmoid", [0.2]), ("elu", []), ("swish", []), ("mish", []),
])
def test_activation_param_errors(act, params):
    with pytest.raises(ValueError, match="act_params"):
        QuantizedAdd(**dict(GOOD, act_type=act, act_params=params))
    with pytest.raises(ValueError, match="activation_params"):
        quantized_add(np.zeros((2, 3), np.uint8), np.zeros((2, 3), np.uint8), activation=act,
                      activation_params=params)


def test_forward_errors():
    add = QuantizedAdd(**GOOD)
    a = np.zeros((2, 3), np.uint8)
    with pytest.raises(RuntimeError, match="init"):
        QuantizedAdd().forward(a, a)
    with pytest.raises(TypeError, match="a"):
        add.forward([[0, 0, 0], [0, 0, 0]], a)
    with pytest.raises(TypeError, match="b"):
        add.forward(a, 3)
    with pytest.raises(ValueError, match="a: expected dtype uint8"):
        add.forward(a.astype(np.float32), a)
    with pytest.raises(ValueError, match="b: expected 6 elements"):
        add.forward(a, np.zeros(5, np.uint8))
    with pytest.raises(ValueError, match="a: expected a C-contiguous"):
        add.forward(np.zeros((3, 2), np.uint8).T, a)
    with pytest.raises(TypeError, match="dst"):
        add.forward(a, a, "out")
    with pytest.raises(ValueError, match="dst: expected dtype uint8"):
        add.forward(a, a, np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="dst: expected 6 elements"):
        add.forward(a, a, np.zeros(7, np.uint8))
    ro = np.zeros((2, 3), np.uint8)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="dst: expected a writeable"):
        add.forward(a, a, ro)
    with pytest.raises(ValueError, match="n_threads"):
        add.forward(a, a, n_threads=0)
    with pytest.raises(TypeError, match="n_threads"):
        add.forward(a, a, n_threads="2")
    # partial overlap with an operand
    buf = np.zeros(12, np.uint8)
    with pytest.raises(ValueError, match="dst: overlaps a"):
        add.forward(buf[:6], a, buf[3:9])
    with pytest.raises(ValueError, match="dst: overlaps b"):
        add.forward(a, buf[:6], buf[1:7])
    add.clear()
    with pytest.raises(RuntimeError, match="init"):
        add.forward(a, a)


def test_functional_errors():
    u8 = np.zeros((2, 3), np.uint8)
    with pytest.raises(ValueError, match="a: .*int64"):
        quantized_add(np.zeros((2, 3), np.int64), u8)
    with pytest.raises(ValueError, match="b: .*float16"):
        quantized_add(u8, np.zeros(3, np.float16))
    with pytest.raises(ValueError, match="a: .*int64"):
        quantized_add([1, 2, 3], u8[0])  # Python ints are int64: no silent reinterpretation
    with pytest.raises(ValueError, match="dst_dtype"):
        quantized_add(u8, u8, dst_dtype=np.int8)
    with pytest.raises(ValueError, match="b: "):
        quantized_add(u8, np.zeros(4, np.uint8))
    with pytest.raises(TypeError, match="out"):
        quantized_add(u8, u8, out=[0] * 6)
    with pytest.raises(ValueError, match="out: expected shape"):
        quantized_add(u8, u8, out=np.zeros(6, np.uint8))
    with pytest.raises(ValueError, match="out: expected shape"):
        quantized_add(u8, u8, out=np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="out: expected a writeable C-contiguous"):
        quantized_add(u8, u8, out=np.zeros((3, 2), np.uint8).T)
    with pytest.raises(ValueError, match="a_scale"):
        quantized_add(u8, u8, a_scale=0)
    with pytest.raises(ValueError, match="b_zero"):
        quantized_add(u8, u8, b_zero=-3)
    with pytest.raises(ValueError, match="dst_scale"):
        quantized_add(u8, u8, dst_scale=float("nan"))
    with pytest.raises(ValueError, match="dst_zero"):
        quantized_add(u8, u8, dst_zero=256)
    with pytest.raises(ValueError, match="activation"):
        quantized_add(u8, u8, activation="tanh")


# ---------------------------------------------------------------------------------------------
# onnxruntime QLinearAdd (com.microsoft)


def _ort_qlinear_add(a, b, q):
    ort = pytest.importorskip("onnxruntime")
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    inits = [helper.make_tensor("a_s", TensorProto.FLOAT, [], [q["a_scale"]]),
             helper.make_tensor("a_z", TensorProto.UINT8, [], [q["a_zero"]]),
             helper.make_tensor("b_s", TensorProto.FLOAT, [], [q["b_scale"]]),
             helper.make_tensor("b_z", TensorProto.UINT8, [], [q["b_zero"]]),
             helper.make_tensor("c_s", TensorProto.FLOAT, [], [q["dst_scale"]]),
             helper.make_tensor("c_z", TensorProto.UINT8, [], [q["dst_zero"]])]
    node = helper.make_node("QLinearAdd", ["a", "a_s", "a_z", "b", "b_s", "b_z", "c_s", "c_z"], ["c"],
                            domain="com.microsoft")
    out_shape = list(np.broadcast_shapes(a.shape, b.shape))
    graph = helper.make_graph([node], "qadd", [helper.make_tensor_value_info("a", TensorProto.UINT8, list(a.shape)),
                                               helper.make_tensor_value_info("b", TensorProto.UINT8, list(b.shape))],
                              [helper.make_tensor_value_info("c", TensorProto.UINT8, out_shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {"a": a, "b": b})[0]


@pytest.mark.parametrize("shapes", [((1, 16, 9, 9), (1, 16, 9, 9)), ((1, 16, 9, 9), (1, 16, 1, 1)),
                                    ((65536,), (65536,))])
@pytest.mark.parametrize("q", SWEEP_SETS[:2], ids=range(2))
def test_onnxruntime_qlinear_add(shapes, q):
    rng = np.random.default_rng(29)
    if shapes[0] == (65536,):
        a, b = all_pairs()
    else:
        a, b = make(U8, shapes[0], rng), make(U8, shapes[1], rng)
    theirs = _ort_qlinear_add(a, b, q)
    ours = quantized_add(a, b, **q)
    assert theirs.shape == ours.shape
    assert np.abs(theirs.astype(int) - ours.astype(int)).max() <= 1  # ORT may round differently
