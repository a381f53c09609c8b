"""The functional forms' plan cache (a hit is exactly as correct as a miss, thread-safe, bounded) and
their empty tensors (the right shape, never an error, never a kernel)."""

import collections
import re
import threading

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import synet
from synet import _cache
from synet._quantized_add_plan import LUT_MIN


@pytest.fixture(autouse=True)
def fresh_cache():
    synet.clear_plan_cache()
    yield
    synet.clear_plan_cache()


def test_a_hit_gives_the_bits_of_a_miss():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 12, 7, 9)).astype(np.float32)
    w = rng.standard_normal((12, 5, 3, 3)).astype(np.float32)
    b = rng.standard_normal(10).astype(np.float32)
    first = synet.conv_transpose2d(x, w, b, 2, 1, groups=2, activation="prelu", activation_params=np.full(10, 0.3))
    assert synet.plan_cache_info()["conv_transpose2d"] == {"plans": 1, "capacity": _cache.CAPACITY, "hits": 0,
                                                           "misses": 1}
    second = synet.conv_transpose2d(x, w, b, 2, 1, groups=2, activation="prelu", activation_params=np.full(10, 0.3))
    assert synet.plan_cache_info()["conv_transpose2d"]["hits"] == 1
    assert np.array_equal(first.view(np.uint32), second.view(np.uint32))
    # new weights, bias and input on a hit: packed per call, never taken from the cache
    w2, x2 = w * 2, x[::-1].copy()
    third = synet.conv_transpose2d(x2, w2, -b, 2, 1, groups=2, activation="prelu", activation_params=np.full(10, 0.3))
    synet.clear_plan_cache()
    miss = synet.conv_transpose2d(x2, w2, -b, 2, 1, groups=2, activation="prelu", activation_params=np.full(10, 0.3))
    assert np.array_equal(third.view(np.uint32), miss.view(np.uint32))


@pytest.mark.parametrize("changed", [
    dict(stride=1), dict(padding=0), dict(padding=(1, 0, 1, 2)), dict(dilation=2), dict(groups=1),
    dict(activation="relu"), dict(activation_params=np.full(10, 0.5)), dict(out_dtype=ml_dtypes.bfloat16),
    dict(output_padding=1),
])
def test_every_argument_is_part_of_the_key(changed):
    """A call that differs in one argument gets its own plan: its result is the one of a fresh miss."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 12, 6, 5)).astype(np.float32)
    w = rng.standard_normal((12, 5 if changed.get("groups") != 1 else 10, 3, 3)).astype(np.float32)
    base = dict(stride=2, padding=1, groups=2, dilation=1, activation="prelu", activation_params=np.full(10, 0.3))
    if changed.get("groups") == 1:
        w = rng.standard_normal((12, 10, 3, 3)).astype(np.float32)
        base["groups"] = 1
    synet.conv_transpose2d(x, w if "groups" not in changed else w[:, :5], **base)
    args = dict(base, **changed)
    hit_or_new = synet.conv_transpose2d(x, w if args["groups"] == 1 else w[:, :5], **args)
    synet.clear_plan_cache()
    fresh = synet.conv_transpose2d(x, w if args["groups"] == 1 else w[:, :5], **args)
    assert hit_or_new.dtype == fresh.dtype and hit_or_new.shape == fresh.shape
    assert np.array_equal(hit_or_new.view(np.uint8), fresh.view(np.uint8))


@pytest.mark.parametrize("x_dtype", [np.float32, ml_dtypes.bfloat16])
@pytest.mark.parametrize("out_dtype", [None, np.float32, ml_dtypes.bfloat16, np.uint16, np.float64])
def test_an_out_shares_the_plan_only_when_it_asks_for_the_same_output(x_dtype, out_dtype):
    """An FP32 out for an FP32 x gets the plan of the call without out (a hit); any other out dtype is a key
    of its own, and every call gives the bits of a fresh miss (or its error)."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 6, 5, 4)).astype(x_dtype)
    w = rng.standard_normal((6, 4, 2, 2)).astype(np.float32)
    synet.conv_transpose2d(x, w, stride=2)
    out = np.empty((1, 4, 10, 8), out_dtype) if out_dtype is not None else None

    def call():
        try:
            return synet.conv_transpose2d(x, w, stride=2, out=out)
        except ValueError as error:
            return str(error)

    result = call()
    shared = out_dtype is None or (out_dtype is np.float32 and x_dtype is np.float32)
    assert synet.plan_cache_info()["conv_transpose2d"]["hits"] == int(shared)
    synet.clear_plan_cache()
    fresh = call()
    if isinstance(fresh, str):
        assert result == fresh and out_dtype is np.float64
    else:
        assert np.array_equal(np.asarray(result).view(np.uint8), fresh.view(np.uint8))


@pytest.mark.parametrize("x_dtype", [np.float32, ml_dtypes.bfloat16])
@pytest.mark.parametrize("native", [np.dtype(np.uint16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32)],
                         ids=str)
def test_a_refused_byte_swapped_out_leaves_no_plan_for_the_native_one(x_dtype, native):
    """A byte-swapped out keyed as its native twin did (dtype.num): its refused call cached a plan for its own
    output type, and the native out's valid calls then failed ("out: expected dtype float32, got uint16") until
    the cache was cleared."""
    x = np.ones((1, 2, 3, 3), x_dtype)
    w = np.ones((2, 1, 3, 3), np.float32)
    synet.clear_plan_cache()
    expected = synet.conv_transpose2d(x, w, out=np.empty((1, 1, 5, 5), native))
    synet.clear_plan_cache()
    swapped = np.empty((1, 1, 5, 5), native.newbyteorder(">" if native.byteorder != ">" else "<"))
    expected_dtypes = "float32" if x_dtype is np.float32 else "bfloat16 or uint16"
    with pytest.raises(ValueError, match=f"out: expected dtype {expected_dtypes}, got >"):   # (x's type decides)
        synet.conv_transpose2d(x, w, out=swapped)
    got = synet.conv_transpose2d(x, w, out=np.empty((1, 1, 5, 5), native))
    assert got.dtype == native and got.tobytes() == expected.tobytes()


def test_equal_values_of_other_types_are_other_keys():
    """True, 1 and 1.0 are different arguments: validation treats them differently, so must the cache."""
    a = np.arange(8, dtype=np.uint8)
    synet.quantized_add(a, a, a_zero=1)
    with pytest.raises(ValueError, match="a_zero"):
        synet.quantized_add(a, a, a_zero=True)
    with pytest.raises(ValueError, match="a_zero"):
        synet.quantized_add(a, a, a_zero=1.0)


def test_the_cache_is_bounded_and_clears():
    rng = np.random.default_rng(2)
    w = rng.standard_normal((2, 2, 2, 2)).astype(np.float32)
    for size in range(_cache.CAPACITY + 40):
        synet.conv_transpose2d(np.ones((1, 2, 1, size + 1), np.float32), w)
    info = synet.plan_cache_info()["conv_transpose2d"]
    assert info["plans"] == _cache.CAPACITY and info["misses"] == _cache.CAPACITY + 40
    synet.clear_plan_cache()
    assert synet.plan_cache_info()["conv_transpose2d"]["plans"] == 0
    assert "plan_cache" in synet.config()


@given(capacity=st.integers(1, 16),
       steps=st.lists(st.tuples(st.booleans(), st.integers(0, 24)), min_size=40, max_size=200))
def test_the_cache_keeps_exactly_the_most_recently_used_plans(capacity, steps):
    # eviction takes its victims from a list made by one scan and used over later misses: after any sequence
    # of gets and puts (re-puts of a cached key included) the cache holds what an exact LRU model holds
    cache = _cache.PlanCache("test", capacity)
    model: collections.OrderedDict = collections.OrderedDict()
    for is_put, drawn in steps:
        key = drawn % (capacity + 4)   # a few more keys than places: many hits, many evictions
        if is_put:
            cache.put(key, f"plan {key}")
            model[key] = f"plan {key}"
            model.move_to_end(key)
            while len(model) > capacity:
                model.popitem(last=False)
        else:
            assert cache.get(key) == model.get(key)
            if key in model:
                model.move_to_end(key)
    assert all(cache.get(key) == model.get(key) for key in range(capacity + 4))


def test_a_plan_used_after_the_scan_that_listed_it_stays():
    cache = _cache.PlanCache("test", 8)
    for key in range(9):
        cache.put(key, key)   # the ninth: a scan lists plans 0 and 1 as the oldest, plan 0 goes
    cache.get(1)              # plan 1 used: plan 2 is now the least recently used
    cache.put(9, 9)
    assert [key for key in range(10) if cache.get(key) is None] == [0, 2]


def test_the_least_recently_used_plan_goes_first():
    """A full cache drops the plan whose last use is oldest, not the oldest plan: one used again stays."""
    a = np.arange(16, dtype=np.uint8)

    def call(k):
        synet.quantized_add(a, a, a_zero=k)

    for k in range(_cache.CAPACITY):
        call(k)
    call(0)                                   # plan 0 used again: plan 1 is now the least recently used
    call(_cache.CAPACITY)                     # a miss of a full cache: plan 1 goes
    info = synet.plan_cache_info()["quantized_add"]
    assert (info["plans"], info["hits"], info["misses"]) == (_cache.CAPACITY, 1, _cache.CAPACITY + 1)
    call(0)
    assert synet.plan_cache_info()["quantized_add"]["hits"] == 2
    call(1)
    assert synet.plan_cache_info()["quantized_add"]["misses"] == _cache.CAPACITY + 2


def test_equal_values_in_other_arguments_are_other_keys():
    """The kinds of the quantisation arguments are keyed per argument: a_scale=1, b_scale=1.0 is not
    a_scale=1.0, b_scale=1 (both valid), and a str dtype is not the type."""
    a = np.arange(8, dtype=np.uint8)
    synet.quantized_add(a, a, a_scale=1, b_scale=1.0)
    synet.quantized_add(a, a, a_scale=1.0, b_scale=1)
    synet.quantized_add(a, a, dst_dtype="uint8")
    synet.quantized_add(a, a, dst_dtype=np.uint8)
    assert synet.plan_cache_info()["quantized_add"] == {"plans": 4, "capacity": _cache.CAPACITY, "hits": 0,
                                                        "misses": 4}


def test_unhashable_arguments_plan_without_the_cache():
    x = np.ones((1, 2, 3, 3), np.float32)
    w = np.ones((2, 2, 2, 2), np.float32)
    y = synet.conv_transpose2d(x, w, stride=[2, 2])        # a list: keyed by its contents
    z = synet.conv_transpose2d(x, w, stride=np.array([2, 2]))
    assert np.array_equal(y, z)


class _Slopes:
    """An array-like (``__array__``) whose hash is its identity, as a user's parameter holder's is."""

    def __init__(self, values):
        self.values = np.asarray(values, np.float32)

    def __array__(self, dtype=None, copy=None):
        return self.values if dtype is None else self.values.astype(dtype)

    def __len__(self):
        return len(self.values)

    def __getitem__(self, i):
        return self.values[i]


@pytest.mark.parametrize("kind", ["__array__", "read-only memoryview"])
def test_array_likes_changed_in_place_are_keyed_by_their_values(kind):
    """An object with __array__ keyed by its identity, a read-only byte memoryview by its first contents (a
    memoryview caches its hash): changed in place, both kept their plans and gave the old slope's result."""
    x = np.array([-10.0, -1.0, 1.0], np.float32)
    zero = np.zeros(3, np.float32)
    holder = bytearray([2])
    params = _Slopes([2.0]) if kind == "__array__" else memoryview(holder).toreadonly()

    def add():
        return synet.quantized_add(x, zero, dst_dtype="float32", activation="leaky_relu", activation_params=params)

    def conv():   # (-10 - 1 under the 2x2 kernel: the smallest sum)
        y = synet.conv_transpose2d(x.reshape(1, 1, 1, 3), np.ones((1, 1, 2, 2), np.float32),
                                   activation="leaky_relu", activation_params=params)
        return y.min()

    np.testing.assert_array_equal(add(), [-20.0, -2.0, 1.0])
    assert conv() == -22.0
    if kind == "__array__":
        params.values[0] = 1.0
    else:
        holder[0] = 1
    np.testing.assert_array_equal(add(), [-10.0, -1.0, 1.0])
    assert conv() == -11.0


def _in_threads(work, count):
    """work(0), ..., work(count - 1), each on a thread of its own, all at once; returns when all are done."""
    threads = [threading.Thread(target=work, args=(s,)) for s in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_four_threads_share_the_cache():
    rng = np.random.default_rng(3)
    shapes = [(1, 8, 5 + k, 6) for k in range(6)]
    w = rng.standard_normal((8, 4, 4, 4)).astype(np.float32)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    expected = [synet.conv_transpose2d(x, w, stride=2, padding=1, n_threads=1) for x in inputs]
    synet.clear_plan_cache()
    errors = []

    def work(seed):
        order = np.random.default_rng(seed).permutation(len(inputs) * 20) % len(inputs)
        for i in order:
            got = synet.conv_transpose2d(inputs[i], w, stride=2, padding=1, n_threads=1)
            if not np.array_equal(got.view(np.uint32), expected[i].view(np.uint32)):
                errors.append(i)

    _in_threads(work, 4)
    assert not errors
    info = synet.plan_cache_info()["conv_transpose2d"]
    assert info["plans"] == len(inputs) and info["hits"] + info["misses"] == 4 * 20 * len(inputs)


def test_functional_gather_and_add_reuse_plans():
    a = np.arange(1000, dtype=np.uint8) % 251
    first = synet.quantized_add(a, a[::-1].copy(), a_scale=0.01, b_scale=0.02, activation="gelu")
    second = synet.quantized_add(a, a[::-1].copy(), a_scale=0.01, b_scale=0.02, activation="gelu")
    assert np.array_equal(first, second)
    assert synet.plan_cache_info()["quantized_add"]["hits"] == 1


QUANT = dict(a_scale=0.01, a_zero=47, b_scale=0.02, b_zero=30, dst_scale=0.015, dst_zero=38)
# (a's shape, b's shape) in call order; the first of each pairing has one element, so its plan's walk has no
# broadcast operand, which the later (larger) calls of that pairing need
PAIRINGS = {
    "same shape": [((1,), (1,)), ((5,), (5,)), ((), ()), ((3, 1, 4), (3, 1, 4)), ((0, 3), (0, 3)),
                   ((2, 64, 65), (2, 64, 65))],
    "a of one element": [((1,), (1, 1)), ((), (5,)), ((1, 1), (3, 1, 4)), ((1,), (0, 3)), ((1, 1, 1), (2, 64, 65))],
    "b of one element": [((1, 1), (1,)), ((5,), ()), ((3, 1, 4), (1, 1)), ((0, 3), (1,)), ((2, 64, 65), (1, 1, 1))],
    # (the first has two elements in each operand: its plan's walk is one row, no broadcast)
    "a along one axis of b": [((2, 1, 1), (1, 2, 1, 1)), ((3, 1, 1), (2, 3, 4, 5)), ((1, 3, 1, 1), (2, 3, 4, 5)),
                              ((4,), (2, 3, 4)), ((3, 1), (0, 3, 5)), ((2, 1), (2, 2, 1)), ((64, 1, 1), (2, 64, 9, 9)),
                              ((1, 1, 7), (3, 5, 7))],
    "b along one axis of a": [((1, 2, 1, 1), (2, 1, 1)), ((2, 3, 4, 5), (3, 1, 1)), ((2, 3, 4, 5), (1, 3, 1, 1)),
                              ((2, 3, 4), (4,)), ((0, 3, 5), (3, 1)), ((2, 2, 1), (2, 1)), ((2, 64, 9, 9), (64, 1, 1)),
                              ((3, 5, 7), (1, 1, 7))],
}


@pytest.mark.parametrize("activation", ["identity", "relu", "gelu"])
@pytest.mark.parametrize("dtypes", [(np.uint8, np.uint8, np.uint8), (np.int8, np.float32, np.uint8),
                                    (np.uint8, np.int8, np.float32)])
@pytest.mark.parametrize("pairing", sorted(PAIRINGS))
def test_adds_whose_walk_follows_from_their_shapes_share_one_plan(pairing, dtypes, activation):
    """Operands of one shape, one of a single element, or one varying along a single axis of the other (rank
    not above the other's), with per-tensor quantisation: one plan serves every shape of that pairing, with
    the bits and shape of a context made for the shape."""
    rng = np.random.default_rng(5)
    a_dtype, b_dtype, dst_dtype = dtypes
    for a_shape, b_shape in PAIRINGS[pairing]:
        a = rng.integers(-128 if a_dtype == np.int8 else 0, 128, a_shape).astype(a_dtype)
        b = rng.integers(-128 if b_dtype == np.int8 else 0, 128, b_shape).astype(b_dtype)
        got = synet.quantized_add(a, b, **QUANT, dst_dtype=dst_dtype, activation=activation)
        context = synet.QuantizedAdd(a_shape, a_dtype, 0.01, 47, b_shape, b_dtype, 0.02, 30, activation, None,
                                     dst_dtype, 0.015, 38)
        expected = context.forward(a, b)
        assert got.shape == expected.shape and got.dtype == expected.dtype
        assert got.tobytes() == expected.tobytes(), (a_shape, b_shape)
        out = np.empty(expected.shape, dst_dtype)
        assert synet.quantized_add(a, b, **QUANT, dst_dtype=dst_dtype, activation=activation, out=out) is out
        assert out.tobytes() == expected.tobytes()
        with pytest.raises(ValueError, match=re.escape(f"out: expected shape {expected.shape}")):
            synet.quantized_add(a, b, **QUANT, dst_dtype=dst_dtype, activation=activation,
                                out=np.empty(expected.shape + (1,), dst_dtype))
    assert synet.plan_cache_info()["quantized_add"]["plans"] == 1


@pytest.mark.parametrize("shapes", [
    [((n,), (n,)) for n in (1, 7, 64, 1000, 5000, 70000)],
    [((1, 8, h, w), (8, 1, 1)) for h, w in ((1, 1), (3, 5), (16, 16), (40, 1), (60, 70))] + [((9, 7, 8), (8,))],
], ids=["same shape", "b along one axis of a"])
def test_four_threads_share_one_plan(shapes):
    """Threads running one shared plan on different shapes at once (each call runs its own copy of the plan's
    sizes and walk): every result as a context of its shapes gives it."""
    rng = np.random.default_rng(8)
    inputs = [(rng.integers(0, 256, a, dtype=np.uint8), rng.integers(0, 256, b, dtype=np.uint8)) for a, b in shapes]
    expected = [synet.QuantizedAdd(a.shape, "u8", 0.01, 47, b.shape, "u8", 0.02, 30, "gelu", None, "u8", 0.015, 38)
                .forward(a, b) for a, b in inputs]
    errors = []

    def work(seed):
        for i in np.random.default_rng(seed).permutation(len(shapes) * 20) % len(shapes):
            a, b = inputs[i]
            if synet.quantized_add(a, b, **QUANT, activation="gelu").tobytes() != expected[i].tobytes():
                errors.append(i)

    _in_threads(work, 4)
    assert not errors
    assert synet.plan_cache_info()["quantized_add"]["plans"] == 1


def test_a_lookup_sized_add_gets_its_own_plan():
    """From the planner's LUT_MIN outputs on, 1-byte adds may use a lookup table: another plan, built once."""
    rng = np.random.default_rng(6)
    for n in (LUT_MIN - 1, LUT_MIN, 3 * LUT_MIN + 5, 7):
        a, b = rng.integers(0, 256, (2, n), dtype=np.uint8)
        got = synet.quantized_add(a, b, **QUANT, activation="gelu")
        context = synet.QuantizedAdd([n], "u8", 0.01, 47, [n], "u8", 0.02, 30, "gelu", None, "u8", 0.015, 38)
        assert got.tobytes() == context.forward(a, b).tobytes()
    assert synet.plan_cache_info()["quantized_add"] == {"plans": 2, "capacity": _cache.CAPACITY, "hits": 2,
                                                        "misses": 2}


@pytest.mark.parametrize("arguments", [
    dict(a_shape=(4, 1), b_shape=(1, 5)),                          # a broadcast in both directions
    dict(a_shape=(1, 1, 1), b_shape=(5,)),                         # a single element of higher rank
    dict(a_scale=np.float32(0.01)),                                # not a Python float
    dict(dst_zero=np.array([38, 39, 40])),                         # per axis
    dict(activation="leaky_relu", activation_params=[0.2]),       # activation parameters given
])
def test_other_adds_plan_per_shape(arguments):
    """Any other call keeps a plan per pair of shapes (and is as exact: compared with a context)."""
    rng = np.random.default_rng(7)
    a_shape, b_shape = arguments.pop("a_shape", (2, 3, 4)), arguments.pop("b_shape", (2, 3, 4))
    q = dict(QUANT, **arguments)
    for scale in (1, 2):
        a_at = tuple(n * scale if n > 1 else n for n in a_shape)
        b_at = tuple(n * scale if n > 1 else n for n in b_shape)
        if "dst_zero" in arguments:
            a_at, b_at = (scale, 3, 4), (scale, 3, 4)
        a = rng.integers(0, 256, a_at, dtype=np.uint8)
        b = rng.integers(0, 256, b_at, dtype=np.uint8)
        got = synet.quantized_add(a, b, **q)
        context = synet.QuantizedAdd(a_at, "u8", q["a_scale"], q["a_zero"], b_at, "u8", q["b_scale"], q["b_zero"],
                                     q.get("activation", "identity"), q.get("activation_params"), "u8",
                                     q["dst_scale"], q["dst_zero"])
        assert got.tobytes() == context.forward(a, b).tobytes()
    assert synet.plan_cache_info()["quantized_add"]["plans"] == 2


# ---------------------------------------------------------------------------------------------
# Empty tensors

@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_conv_transpose2d_batch_of_zero(layout):
    """onnxruntime's DimWithZero case: PyTorch and onnxruntime return an empty result."""
    x = np.zeros((0, 4, 3, 3) if layout == "NCHW" else (0, 3, 3, 4), np.float32)
    w = np.ones((4, 2, 2, 2), np.float32)
    y = synet.conv_transpose2d(x, w, stride=2, layout=layout)
    assert y.shape == ((0, 2, 6, 6) if layout == "NCHW" else (0, 6, 6, 2)) and y.dtype == np.float32
    out = np.empty(y.shape, ml_dtypes.bfloat16)
    assert synet.conv_transpose2d(x.astype(ml_dtypes.bfloat16), w, stride=2, layout=layout, out=out) is out


def test_conv_transpose2d_zero_output_channels_and_rows():
    w = np.ones((4, 0, 2, 2), np.float32)
    assert synet.conv_transpose2d(np.ones((1, 4, 3, 3), np.float32), w, stride=2).shape == (1, 0, 6, 6)
    assert synet.conv_transpose2d(np.ones((1, 4, 0, 3), np.float32), np.ones((4, 2, 2, 2), np.float32),
                                  stride=2).shape == (1, 2, 0, 6)


@pytest.mark.parametrize("activation", ["identity", "relu", "gelu"])
def test_conv_transpose2d_without_input_gives_the_activated_bias(activation):
    """No input channel (or no input row) reaches the output: every output is act(bias), as the formula says."""
    bias = np.array([0.5, -3.0, 2.0], np.float32)
    expected = synet.conv_transpose2d(np.zeros((1, 1, 1, 1), np.float32), np.zeros((1, 3, 1, 1), np.float32), bias,
                                      activation=activation)[0, :, 0, 0]
    y = synet.conv_transpose2d(np.ones((2, 0, 3, 3), np.float32), np.ones((0, 3, 2, 2), np.float32), bias, stride=2,
                               activation=activation)
    assert y.shape == (2, 3, 6, 6)
    assert np.array_equal(y, np.broadcast_to(expected[None, :, None, None], y.shape))
    y = synet.conv_transpose2d(np.ones((1, 2, 0, 3), np.float32), np.ones((2, 3, 4, 4), np.float32), bias,
                               activation=activation)
    assert y.shape == (1, 3, 3, 6)
    assert np.array_equal(y, np.broadcast_to(expected[None, :, None, None], y.shape))


def test_a_zero_kernel_is_an_error():
    with pytest.raises(ValueError, match="kernel of at least 1x1"):
        synet.conv_transpose2d(np.ones((1, 4, 3, 3), np.float32), np.ones((4, 2, 0, 2), np.float32))


@pytest.mark.parametrize("shape", [(0,), (0, 5), (3, 0), (2, 0, 4), (0, 0, 0)])
def test_gather_and_add_empty(shape):
    data = np.ones(tuple(max(s, 1) for s in shape), np.float32)
    idx = np.zeros(shape, np.int64)
    assert synet.gather_elements(data, idx, 0).shape == shape
    a = np.zeros(shape, np.uint8)
    assert synet.quantized_add(a, a).shape == shape


def test_activation_params_are_checked_with_the_arguments_and_never_alias_the_callers():
    """conv_transpose2d's activation parameters are checked with the other arguments (once per rank: an empty
    batch's are too) and kept, read-only, for every shape of those arguments; the caller's array is copied
    (still writeable, and new values in it are new arguments: a new shape after a change uses them)."""
    rng = np.random.default_rng(6)
    w = rng.standard_normal((4, 2, 2, 2)).astype(np.float32)
    slopes = np.array([0.5, -0.25], np.float32)
    x1, x2 = (rng.standard_normal((1, 4, h, 3)).astype(np.float32) for h in (3, 5))
    kwargs = dict(stride=2, activation="prelu")
    synet.conv_transpose2d(x1, w, activation_params=slopes, **kwargs)
    assert slopes.flags.writeable
    slopes[:] = (2.0, -3.0)
    got = synet.conv_transpose2d(x2, w, activation_params=slopes, **kwargs)
    synet.clear_plan_cache()
    synet._deconvolution._CALLS.clear()
    fresh = synet.conv_transpose2d(x2, w, activation_params=np.array((2.0, -3.0), np.float32), **kwargs)
    assert np.array_equal(got.view(np.uint32), fresh.view(np.uint32))
    with pytest.raises(ValueError, match=re.escape("activation_params: PRELU expects at least 2 slope(s)")):
        synet.conv_transpose2d(x1[:0], w, activation_params=[1.0], **kwargs)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_a_new_shape_of_known_arguments_is_checked_as_the_first(layout):
    """A new x of known arguments (its rank's checked arguments memoised: FunctionalCall) is still checked on
    its own channels and output size, with the first call's messages, and planned as a fresh process would."""
    rng = np.random.default_rng(5)
    nhwc = layout == "NHWC"

    def x_of(c, h, w):
        return rng.standard_normal((1, h, w, c) if nhwc else (1, c, h, w)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 2) if nhwc else (4, 2, 3, 3)).astype(np.float32)
    kwargs = dict(stride=2, padding=3, groups=2, layout=layout)
    xs = [x_of(4, 5, 6), x_of(4, 9, 4)]
    results = [synet.conv_transpose2d(x, w, **kwargs) for x in xs]
    with pytest.raises(ValueError, match=re.escape("weight: expected 6 input channels (x's) in dimension 0, got "
                                                   f"shape {w.shape}")):
        synet.conv_transpose2d(x_of(6, 5, 6), w, **kwargs)
    with pytest.raises(ValueError, match=re.escape("groups: expected a divisor of the 3 input channels, got 2")):
        synet.conv_transpose2d(x_of(3, 5, 6), w[:3], **kwargs)
    with pytest.raises(ValueError, match=re.escape("padding: (3, 3, 3, 3) leaves an output of 1x-1; expected >= 1x1")):
        synet.conv_transpose2d(x_of(4, 3, 2), w, **kwargs)
    synet.clear_plan_cache()
    synet._deconvolution._CALLS.clear()
    for x, result in zip(xs, results):
        assert np.array_equal(result.view(np.uint32), synet.conv_transpose2d(x, w, **kwargs).view(np.uint32))
