"""Contexts that travel (SPEC §11): every context pickles its init arguments and the caller's data, never
packed buffers, and the copy — made by pickle or copy.deepcopy, here or in a process running at another
CPU level — gives the same bits. A state that synet did not make is a ValueError / TypeError."""

import contextlib
import copy
import dataclasses
import os
import pickle
import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import synet
from synet import (
    Activation,
    Compatibility,
    ConvParams,
    Deconvolution16b,
    GatherElements,
    QuantizedAdd,
    _deconvolution,
    _gather,
    _quantized_add,
)

BF16 = np.dtype(ml_dtypes.bfloat16)
SMALL = 2048   # bytes of a pickle beyond the caller's data: class paths, init arguments, ConvParams


def bits(a):
    """The raw bytes of an array (NaN payloads and signed zeros compare too)."""
    return np.ascontiguousarray(a).view(np.uint8)


def same_bits(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(bits(a), bits(b))


def copies(context):
    """The context after a pickle round trip (every protocol) and after copy.deepcopy."""
    return [pickle.loads(pickle.dumps(context, protocol)) for protocol in (2, pickle.HIGHEST_PROTOCOL)] + \
        [copy.deepcopy(context)]


def run(context, inputs):
    return context.forward(*inputs)


# ---------------------------------------------------------------------------------------------
# Cases: (name, context, inputs of forward, the caller's data bytes)


def gather_cases():
    rng = np.random.default_rng(11)
    cases = []
    # a runtime index (no set_index): only init's arguments travel
    g = GatherElements("float32", "int32", False, 1, [3, 2], 7, 5, 4)
    src = rng.standard_normal((3, 2, 7, 5)).astype(np.float32)
    idx = rng.integers(-7, 7, (3, 2, 4, 5)).astype(np.int32)
    cases.append(("runtime index", g, (src, idx), 0))
    # constant indices: distinct outer slices, repeated leading slices, repeated everywhere
    for name, dtype, itype, outer, repeat in (
            ("const f32 i64", np.float32, np.int64, (3, 4), 1),
            ("const bf16 i32, repeated outer", BF16, np.int32, (6, 2), 6),
            ("const u8 i64, one slice repeated", np.uint8, np.int64, (2, 3, 2), 12),
            ("const int64 data i32", np.int64, np.int32, (5,), 1),
            ("const float16 data", np.float16, np.int32, (4,), 2)):
        src_count, inner, idx_count = 9, 3, 5
        g = GatherElements(dtype, itype, True, 2, list(outer), src_count, inner, idx_count)
        period = int(np.prod(outer)) // repeat
        kept = rng.integers(-src_count, src_count, (period, idx_count * inner)).astype(itype)
        index = np.tile(kept, (repeat, 1)).reshape(*outer, idx_count, inner)
        g.set_index(index)
        src = (rng.standard_normal((*outer, src_count, inner)) * 100).astype(dtype)
        cases.append((name, g, (src,), index.nbytes))
    return cases


def qadd_cases():
    rng = np.random.default_rng(12)
    cases = []
    u8 = lambda *shape: rng.integers(0, 256, shape).astype(np.uint8)   # noqa: E731
    i8 = lambda *shape: rng.integers(-128, 128, shape).astype(np.int8)  # noqa: E731
    f32 = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    q = QuantizedAdd((4, 8, 6), "u8", 0.02, 40, (4, 8, 6), "u8", 0.03, 120, "identity", None, "u8", 0.04, 30)
    cases.append(("per tensor u8 (folded)", q, (u8(4, 8, 6), u8(4, 8, 6)), 0))
    q = QuantizedAdd((2, 5, 3), "i8", 0.05, -3, (5, 1), "u8", 0.01, 7, "hswish", None, "f32", 1.0, 0)
    cases.append(("i8 + u8 -> f32, broadcast, hswish", q, (i8(2, 5, 3), u8(5, 1)), 0))
    q = QuantizedAdd((2, 6, 4), "u8", rng.uniform(0.01, 0.1, 6), rng.integers(0, 256, 6), (2, 6, 4), "f32", 1.0, 0,
                     "prelu", rng.standard_normal(6).astype(np.float32), "u8", rng.uniform(0.05, 0.2, 6),
                     rng.integers(0, 256, 6))
    cases.append(("per-axis scales and zeros, prelu", q, (u8(2, 6, 4), f32(2, 6, 4)), 0))
    q = QuantizedAdd((3, 4, 5), "i8", 0.1, 0, (3, 4, 5), "i8", rng.uniform(0.01, 0.1, 5), rng.integers(-5, 5, 5),
                     "leaky_relu", [0.2], "i8", 0.07, 3, axis=-1)
    cases.append(("per-axis on the last axis, int8", q, (i8(3, 4, 5), i8(3, 4, 5)), 0))
    q = QuantizedAdd((8, 64, 512), "u8", 0.02, 40, (8, 64, 512), "u8", 0.03, 120, "swish", [1.5], "u8", 0.04, 30)
    assert q.kernel.startswith("lookup")
    cases.append(("lookup table", q, (u8(8, 64, 512), u8(8, 64, 512)), 0))
    return cases


def conv_cases():
    rng = np.random.default_rng(13)
    cases = []
    specs = [  # name, format, (src_c, dst_c, group), kernel, stride, pad, src/dst type, activation, compatibility
        ("nchw", "NCHW", (8, 6, 1), 3, 2, 1, "f32", "f32", "identity", 0),
        ("nhwc", "NHWC", (16, 12, 1), 4, 2, 1, "f32", "f32", "relu", 0),
        ("nchw grouped", "NCHW", (6, 9, 3), (3, 2), (2, 1), (1, 0, 2, 0), "f32", "f32", "identity", 0),
        ("nhwc grouped", "NHWC", (8, 4, 2), 3, 1, 1, "f32", "f32", "identity", 0),
        ("nchw depthwise", "NCHW", (5, 5, 5), 3, 2, 1, "f32", "f32", "identity", 0),
        ("nhwc depthwise", "NHWC", (7, 7, 7), 3, 1, 0, "f32", "f32", "identity", 0),
        ("bf16 in and out", "NHWC", (32, 20, 1), 2, 2, 0, "bf16", "bf16", "identity", 0),
        ("bf16 in, f32 out, wide dst", "NCHW", (4, 70, 1), 3, 1, 1, "bf16", "f32", "identity", 0),
        ("prelu", "NCHW", (8, 6, 1), 3, 2, 1, "f32", "bf16", "prelu", 0),
        ("elu", "NHWC", (6, 8, 1), 2, 1, 0, "f32", "f32", "elu", 0),
        ("bf16 soft", "NHWC", (16, 12, 1), 3, 2, 1, "f32", "f32", "identity", Compatibility.BF16_SOFT),
        # the FP32 micro-kernel's float32 weights in two strips (AVX-512: 32 and 8 of 16 channels, as pairs)
        ("bf16 soft, 40 outputs", "NHWC", (32, 40, 1), 2, 2, 0, "f32", "f32", "relu", Compatibility.BF16_SOFT),
    ]
    for name, fmt, (cin, cout, g), kernel, stride, pad, src_t, dst_t, act, compat in specs:
        conv = ConvParams.deconvolution(cin, 5, 6, cout, kernel=kernel, stride=stride, pad=pad, group=g,
                                        activation=act, src_type=src_t, dst_type=dst_t, format=fmt)
        ky, kx = (kernel, kernel) if isinstance(kernel, int) else kernel
        shape = (cin, ky, kx, cout // g) if fmt == "NHWC" else (cin, cout // g, ky, kx)
        weight = rng.standard_normal(shape).astype(np.float32)
        bias = rng.standard_normal(cout).astype(np.float32)
        params = {"prelu": rng.standard_normal(cout).astype(np.float32), "elu": [0.7]}.get(act)
        context = Deconvolution16b(2, conv, compat)
        context.set_params(weight, bias, params)
        x = rng.standard_normal((2, 5, 6, cin) if fmt == "NHWC" else (2, cin, 5, 6)).astype(np.float32)
        if src_t == "bf16":
            x = x.astype(BF16)
        cases.append((name, context, (x,),
                      weight.nbytes + bias.nbytes + np.asarray([] if params is None else params, np.float32).nbytes))
    # channels first with rows of 66 outputs: a lanes plan at avx512_bf16 (packed weights in strips of 4 channels)
    conv = ConvParams.deconvolution(20, 3, 33, 24, kernel=4, stride=2, pad=1, activation="relu")
    weight = rng.standard_normal((20, 24, 4, 4)).astype(np.float32)
    context = Deconvolution16b(1, conv)
    context.set_params(weight)
    cases.append(("nchw lanes", context, (rng.standard_normal((1, 20, 3, 33)).astype(np.float32),), weight.nbytes))
    # non-finite weights: the exact-border pass (its FP32 weight copy) is rebuilt, not pickled
    for fmt, cin, cout, g in (("NCHW", 8, 6, 1), ("NHWC", 8, 6, 1), ("NCHW", 4, 4, 4)):
        conv = ConvParams.deconvolution(cin, 4, 5, cout, kernel=3, stride=1, pad=0, group=g, format=fmt)
        shape = (cin, 3, 3, cout // g) if fmt == "NHWC" else (cin, cout // g, 3, 3)
        weight = rng.standard_normal(shape).astype(np.float32)
        weight.flat[[1, 5, 9, 14]] = [np.nan, np.inf, -np.inf, -np.nan]
        context = Deconvolution16b(1, conv)
        context.set_params(weight)
        assert context.info().endswith("+ exact borders")
        x = rng.standard_normal((1, 4, 5, cin) if fmt == "NHWC" else (1, cin, 4, 5)).astype(np.float32)
        cases.append((f"non-finite weights {fmt} g{g}", context, (x,), weight.nbytes))
    return cases


CASES = gather_cases() + qadd_cases() + conv_cases()
IDS = [case[0] for case in CASES]


# ---------------------------------------------------------------------------------------------
# Round trips in this process


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_round_trip_same_bits(case):
    _, context, inputs, _ = case
    expected = run(context, inputs)
    for other in copies(context):
        assert type(other) is type(context) and other is not context
        assert same_bits(run(other, inputs), expected)
        for attribute in ("info", "internal_buffer_size", "external_buffer_size"):
            if hasattr(context, attribute):
                assert getattr(other, attribute)() == getattr(context, attribute)()
        for attribute in ("kernel", "shape", "index_users", "conv"):
            if hasattr(context, attribute):
                assert getattr(other, attribute) == getattr(context, attribute)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_pickle_size_is_the_callers_data(case):
    """No packed buffer, analysed index or lookup table travels: the pickle is about the caller's data."""
    _, context, _, data_bytes = case
    size = len(pickle.dumps(context, pickle.HIGHEST_PROTOCOL))
    assert size <= 1.1 * data_bytes + SMALL, (size, data_bytes)


def test_pickle_sizes_exact_bounds():
    """The stored weights are bfloat16 (exact: they are BF16-rounded), a repeated index keeps one period."""
    rng = np.random.default_rng(1)
    conv = ConvParams.deconvolution(128, 8, 8, 64, kernel=4, stride=2, pad=1, format="NHWC")
    context = Deconvolution16b(1, conv)
    weight = rng.standard_normal((128, 4, 4, 64)).astype(np.float32)
    context.set_params(weight, np.zeros(64, np.float32))
    assert context.internal_buffer_size() > weight.nbytes // 2
    assert len(pickle.dumps(context, pickle.HIGHEST_PROTOCOL)) <= weight.nbytes // 2 + 64 * 4 * 2 + SMALL
    g = GatherElements("float32", "int64", True, 1, [64, 8], 100, 16, 10)
    g.set_index(np.tile(rng.integers(0, 100, (1, 8, 10, 16)), (64, 1, 1, 1)))
    assert len(pickle.dumps(g, pickle.HIGHEST_PROTOCOL)) <= 8 * 10 * 16 * 8 + SMALL


def test_not_initialised_contexts():
    for cls in (GatherElements, QuantizedAdd, Deconvolution16b):
        for other in copies(cls()):
            assert type(other) is cls and not other.enable()
    d = Deconvolution16b(1, ConvParams.deconvolution(4, 3, 3, 4, kernel=2, stride=2))
    for other in copies(d):   # initialised, no weights yet
        assert other.enable() and other.conv == d.conv
        with pytest.raises(RuntimeError):
            other.forward(np.zeros((1, 4, 3, 3), np.float32))
    g = GatherElements("float32", "int32", True, 1, [2], 3, 1, 2)   # index_const, no set_index yet
    for other in copies(g):
        assert other.internal_buffer_size() == 0
        with pytest.raises(RuntimeError):
            other.forward(np.zeros(6, np.float32))


@pytest.mark.parametrize("cls, conv, x_shape", [
    (Deconvolution16b, ConvParams.deconvolution(2, 3, 3, 2, kernel=3, stride=2, pad=1), (1, 2, 3, 3)),
    (synet.Deconvolution3d16b, synet.ConvParams3d.deconvolution(2, 2, 3, 3, 2, kernel=3, stride=2, pad=1),
     (1, 2, 2, 3, 3))], ids=["2d", "3d"])
def test_conv_property_is_a_copy(cls, conv, x_shape):
    """Changing what ``.conv`` returns (to derive a RELU twin) changed the context's own geometry: its pickle then
    ran RELU, and init with the original arguments stopped being a no-op (it dropped the weights)."""
    rng = np.random.default_rng(5)
    d = cls(1, conv)
    d.set_params(rng.standard_normal(2 * 2 * 3 ** (len(x_shape) - 2)).astype(np.float32) - 2.0)
    x = rng.standard_normal(x_shape).astype(np.float32)
    y = d.forward(x)
    assert (y < 0).any() and d.conv is not d.conv and d.conv == conv
    twin = d.conv
    twin.activation = Activation.RELU
    twin.src_h = 9
    assert d.conv == conv
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(d)).forward(x), y)
    d.init(1, copy.copy(conv))   # identical arguments: a no-op, the weights kept
    np.testing.assert_array_equal(d.forward(x), y)


class Upsampler(Deconvolution16b):
    """A user's subclass: an __init__ of its own (other arguments than the base's), attributes, a method."""

    def __init__(self, channels, scale):
        super().__init__(1, ConvParams.deconvolution(channels, 3, 3, channels, kernel=scale, stride=scale))
        self.scale = scale
        self.calls = 0

    def __call__(self, x):
        self.calls += 1
        return self.forward(x)


class Tagged(synet.Deconvolution16b):
    __slots__ = ()   # no __dict__: nothing but the class to keep


def test_subclasses_pickle_as_themselves():
    """An initialised Python subclass of Deconvolution16b came back from pickle as a Deconvolution16b: its class,
    methods and attributes lost (the state was rebuilt by the base class). Now the class and the instance's
    __dict__ travel; the copy is made by __new__ (the subclass's __init__ takes other arguments) and its
    geometry and weights by the base class's init and set_params."""
    rng = np.random.default_rng(9)
    up = Upsampler(4, 2)
    up.set_params(rng.standard_normal(64).astype(np.float32))
    x = rng.standard_normal((1, 4, 3, 3)).astype(np.float32)
    y = up(x)
    for other in copies(up):
        assert type(other) is Upsampler and other.scale == 2 and other.calls == 1
        assert same_bits(other(x), y) and other.calls == 2 and up.calls == 1
    fresh = Upsampler(4, 2)   # initialised, no weights
    for other in copies(fresh):
        assert type(other) is Upsampler and other.calls == 0 and other.conv == fresh.conv
    blank = Upsampler.__new__(Upsampler)   # not initialised (made as pickle makes it), an attribute
    blank.note = "x"
    for other in copies(blank):
        assert type(other) is Upsampler and other.note == "x" and other.conv is None
    tagged = Tagged(1, ConvParams.deconvolution(4, 3, 3, 4, kernel=2, stride=2))
    tagged.set_params(rng.standard_normal(64).astype(np.float32))
    for other in copies(tagged):
        assert type(other) is Tagged and same_bits(other.forward(x), tagged.forward(x))
    assert len(pickle.dumps(tagged)) <= 64 * 2 + SMALL


def test_pickles_without_a_class_still_load():
    """A pickle of the earlier format (no class in the state: the geometry chose it) loads as before."""
    d = Deconvolution16b(1, CONV)
    d.set_params(np.arange(96, dtype=np.float32))
    restore, (version, key, data, cls) = d.__reduce__()
    assert cls is Deconvolution16b
    for other in (pickle.loads(forged(restore, version, key, data)), pickle.loads(forged(restore, version, key, None))):
        assert type(other) is Deconvolution16b and other.conv == CONV
    conv3 = synet.ConvParams3d.deconvolution(2, 2, 2, 2, 3, kernel=2, stride=2)
    assert type(pickle.loads(forged(restore, version, (1, conv3, 0), None))) is synet.Deconvolution3d16b


def test_copies_are_independent():
    rng = np.random.default_rng(5)
    conv = ConvParams.deconvolution(4, 3, 3, 4, kernel=2, stride=2)
    d = Deconvolution16b(1, conv)
    d.set_params(rng.standard_normal(64).astype(np.float32))
    x = rng.standard_normal((1, 4, 3, 3)).astype(np.float32)
    before = d.forward(x)
    other = copy.deepcopy(d)
    other.set_params(np.zeros(64, np.float32))
    other.init(2, conv)
    assert same_bits(d.forward(x), before)
    clone = pickle.loads(pickle.dumps(d))
    d.clear()
    assert same_bits(clone.forward(x), before)


def test_gather_empty_outer_round_trip():
    """Regression: set_index of an empty index (an outer dimension of 0) kept one empty slice that
    unpickling rejected."""
    g = GatherElements("float32", "int64", True, 1, [0, 3], 4, 3, 2)
    g.set_index(np.zeros((0, 3, 2, 3), np.int64))
    for other in copies(g):
        assert other.forward(np.zeros(0, np.float32)).shape == (0, 3, 2, 3)


def test_gather_unpickles_a_repeated_index_without_building_it():
    """A constant index repeated over leading outer dimensions pickles its kept slices; unpickling tiled them back
    to the whole index and analysed it again (a 289-byte pickle took 402 MiB and 0.5 s). Now the kept slices'
    offsets are the state: same bits, a peak of about the slices' bytes, and the same state as set_index's."""
    import tracemalloc
    rng = np.random.default_rng(12)
    outer, period = (512, 4, 16), 64   # the index repeats over the first dimension: 64 slices kept
    g = GatherElements("float32", "int64", True, 1, list(outer), 8, 16, 8)
    kept = rng.integers(-8, 8, (1, 4, 16, 8, 16))
    g.set_index(np.broadcast_to(kept, (*outer, 8, 16)).copy())   # 32 MiB of index, 1/512 of it kept
    src = rng.standard_normal((*outer, 8, 16)).astype(np.float32)
    data = pickle.dumps(g, pickle.HIGHEST_PROTOCOL)
    assert len(data) <= kept.size * 8 + SMALL
    tracemalloc.start()
    try:
        other = pickle.loads(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * kept.size * 8, peak   # the whole index: 512x the kept slices
    assert same_bits(other.forward(src), g.forward(src))
    mine, theirs = _state(other)[1], _state(g)[1]
    assert mine[1] == theirs[1] and same_bits(mine[2], theirs[2]) and mine[3] == theirs[3] == (*outer, 8, 16)
    assert mine[2].shape[0] == period


def test_gather_unpickles_slices_of_another_period_through_set_index():
    """Kept slices whose count is no period the analysis finds (a state synet does not make, but a valid index
    once tiled) still load, through the whole index and set_index."""
    g = GatherElements("float32", "int32", True, 1, [4, 3], 5, 2, 3)
    restore, (version, args, index, shape) = g.__reduce__()
    two = np.arange(2 * 6, dtype=np.int32).reshape(2, 6) % 5   # 2 slices: periods found are 12, 3 and 1
    other = pickle.loads(forged(restore, version, args, two, (4, 3, 3, 2)))
    src = np.arange(4 * 3 * 5 * 2, dtype=np.float32)
    expected = np.take_along_axis(src.reshape(12, 5, 2), np.tile(two, (6, 1)).reshape(12, 3, 2), axis=1)
    assert same_bits(other.forward(src), expected.reshape(4, 3, 3, 2))


def test_qadd_shapes_given_as_iterators():
    """Regression: shapes given as generators were stored as such (unpicklable)."""
    q = QuantizedAdd((d for d in (2, 3)), "u8", 0.1, 3, iter([3]), "u8", 0.2, 4, "relu", None, "u8", 0.3, 5)
    a, b = np.arange(6, dtype=np.uint8).reshape(2, 3), np.arange(3, dtype=np.uint8)
    for other in copies(q):
        assert other.shape == (2, 3) and same_bits(other.forward(a, b), q.forward(a, b))


@pytest.mark.parametrize("kind", ["array.array", "tensor"])
def test_qadd_keeps_copies_of_every_array_like(kind):
    """init's arguments are kept for the pickle as copies: an array.array or a torch tensor was kept by reference,
    so changing it after init changed what the pickle (and deepcopy) computed, not what the live context did;
    and __reduce__ handed out the kept arrays themselves."""
    import array
    if kind == "tensor":
        torch = pytest.importorskip("torch")
        scales = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
        slopes = torch.tensor([0.5])
    else:
        scales, slopes = array.array("d", [0.1, 0.2, 0.3, 0.4]), array.array("f", [0.5])
    q = QuantizedAdd((2, 4, 3), "u8", scales, 3, (2, 4, 3), "u8", 0.05, 7, "leaky_relu", slopes, "f32", 1.0, 0)
    a, b = (np.arange(24, dtype=np.uint8).reshape(2, 4, 3) * k for k in (1, 5))
    expected = q.forward(a, b)
    scales[1] = 5.0
    slopes[0] = 0.0
    for other in copies(q):
        assert same_bits(other.forward(a, b), expected)
    _, (_, args) = q.__reduce__()
    args[2][:] = 9.0
    for other in copies(q):
        assert same_bits(other.forward(a, b), expected)


def test_gather_index_dtype_kept():
    """The pickled index is the context's index dtype (int32 stays int32)."""
    g = GatherElements("float32", "int32", True, 1, [4], 5, 2, 3)
    g.set_index(np.arange(24, dtype=np.int32).reshape(4, 3, 2) % 5 - 2)
    _, (_, _, index, shape) = g.__reduce__()
    assert index.dtype == np.int32 and shape == (4, 3, 2)


# ---------------------------------------------------------------------------------------------
# Another process at another CPU level

CHILD = textwrap.dedent("""
    import pickle, sys
    import numpy as np
    import synet
    level = synet.config()["dispatch"]["ops"]["deconvolution"]
    with open(sys.argv[1], "rb") as f:
        cases = pickle.load(f)
    outputs = [context.forward(*inputs) for context, inputs in cases]
    with open(sys.argv[2], "wb") as f:   # the contexts pickled again here, with this level's results
        pickle.dump((level, cases, outputs), f)
""")


def _child_env(isa):
    env = dict(os.environ, SYNET_MAX_ISA=isa)
    root = os.path.dirname(os.path.dirname(os.path.abspath(synet.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    return env


@pytest.mark.parametrize("isa", ["avx2", "baseline"])
def test_other_cpu_level_same_bits(isa, tmp_path):
    """Pickled here (at the best level), unpickled and run in a process capped at `isa`: the same bits;
    its contexts pickled there and run here: the same bits again."""
    supported = synet.config()["dispatch"]["supported"]
    cases = [(context, inputs) for _, context, inputs, _ in CASES]
    expected = [run(context, inputs) for context, inputs in cases]
    there, back = tmp_path / "cases.pkl", tmp_path / "back.pkl"
    there.write_bytes(pickle.dumps(cases, pickle.HIGHEST_PROTOCOL))
    result = subprocess.run([sys.executable, "-c", CHILD, str(there), str(back)], env=_child_env(isa),
                            capture_output=True, text=True, timeout=300, cwd=tmp_path)   # not the checkout
    assert result.returncode == 0, result.stderr[-3000:]
    level, returned, outputs = pickle.loads(back.read_bytes())
    if isa == "baseline" or supported != "baseline":
        assert level == isa, (level, supported)
    mismatched = [IDS[i] for i, (a, b) in enumerate(zip(expected, outputs)) if not same_bits(a, b)]
    assert not mismatched
    again = [run(context, inputs) for context, inputs in returned]
    assert not [IDS[i] for i, (a, b) in enumerate(zip(expected, again)) if not same_bits(a, b)]


# ---------------------------------------------------------------------------------------------
# States synet did not make


class Forged:
    """Pickles as the given reconstructor call (a state another version, or an attacker, wrote)."""

    def __init__(self, function, args):
        self.function, self.args = function, args

    def __reduce__(self):
        return self.function, self.args


def forged(function, *args):
    return pickle.dumps(Forged(function, args))


def _state(context):
    function, args = context.__reduce__()
    return function, list(args)


def named(*names):
    return [case for case in CASES if case[0] in names]


@pytest.mark.parametrize("case", named("runtime index", "const bf16 i32, repeated outer", "lookup table",
                                       "per-axis scales and zeros, prelu", "nchw depthwise", "bf16 soft"),
                         ids=lambda c: c[0])
def test_version_2_is_refused(case):
    function, args = _state(case[1])
    with pytest.raises(ValueError, match=r"state version 2 is not 1"):
        pickle.loads(forged(function, 2, *args[1:]))
    with pytest.raises(ValueError, match=r"state version '1' is not 1"):
        pickle.loads(forged(function, "1", *args[1:]))


G_ARGS = (np.dtype(np.float32), np.dtype(np.int64), True, 1, (2, 3), 4, 5, 2)
G_INDEX = np.zeros((1, 10), np.int64)
Q_ARGS = ((2, 3), "u8", 0.1, 3, (2, 3), "u8", 0.2, 4, "relu", None, "u8", 0.3, 5, 1)
CONV = ConvParams.deconvolution(4, 3, 3, 6, kernel=2, stride=2)
W = np.zeros(96, np.float32)

GARBAGE = [
    # GatherElements: (version, args, index, index_shape)
    (_gather._restore, (1, G_ARGS[:7], None, None), ValueError, "expected 8 init arguments"),
    (_gather._restore, (1, list(G_ARGS), None, None), ValueError, "expected 8 init arguments"),
    (_gather._restore, (1, "args", None, None), ValueError, "expected 8 init arguments"),
    (_gather._restore, (1, ("nope",) + G_ARGS[1:], None, None), ValueError, "data_type"),
    (_gather._restore, (1, G_ARGS[:1] + ("int16",) + G_ARGS[2:], None, None), ValueError, "index_type"),
    (_gather._restore, (1, G_ARGS[:4] + ("outer",) + G_ARGS[5:], None, None), TypeError, "outer"),
    (_gather._restore, (1, G_ARGS[:5] + (-4,) + G_ARGS[6:], None, None), ValueError, "src_count"),
    (_gather._restore, (1, G_ARGS[:3] + (0,) + G_ARGS[4:], None, None), ValueError, "index_users"),
    (_gather._restore, (1, G_ARGS, "garbage", (60,)), ValueError, "2-D int32/int64 index"),
    (_gather._restore, (1, G_ARGS, G_INDEX.astype(np.float64), (60,)), ValueError, "2-D int32/int64 index"),
    (_gather._restore, (1, G_ARGS, np.zeros((4, 10), np.int64), (60,)), ValueError, "does not fit the geometry"),
    (_gather._restore, (1, G_ARGS, np.zeros((1, 9), np.int64), (54,)), ValueError, "does not fit the geometry"),
    (_gather._restore, (1, G_ARGS, np.full((1, 10), 4, np.int64), (60,)), ValueError, r"outside \[0, src_count"),
    (_gather._restore, (1, G_ARGS, np.full((1, 10), -1, np.int64), (60,)), ValueError, r"outside \[0, src_count"),
    (_gather._restore, (1, G_ARGS, G_INDEX, None), ValueError, "index shape"),
    (_gather._restore, (1, G_ARGS, G_INDEX, (7,)), ValueError, "index shape"),
    (_gather._restore, (1, G_ARGS, G_INDEX, (-1,)), ValueError, "index shape"),
    (_gather._restore, (1, G_ARGS, G_INDEX, (6.0, 10.0)), ValueError, "index shape"),
    (_gather._restore, (1, G_ARGS, None, (60,)), ValueError, "index shape without an index"),
    (_gather._restore, (1, G_ARGS[:2] + (False,) + G_ARGS[3:], G_INDEX, (60,)), ValueError, "index_const=False"),
    (_gather._restore, (1, None), TypeError, "_restore"),
    # QuantizedAdd: (version, args)
    (_quantized_add._restore, (1, Q_ARGS[:13]), ValueError, "expected 14 init arguments"),
    (_quantized_add._restore, (1, list(Q_ARGS)), ValueError, "expected 14 init arguments"),
    (_quantized_add._restore, (1, ("x",) + Q_ARGS[1:]), TypeError, "a_shape"),
    (_quantized_add._restore, (1, ((2, 3), "u16") + Q_ARGS[2:]), ValueError, "a_type"),
    (_quantized_add._restore, (1, Q_ARGS[:2] + (-1.0,) + Q_ARGS[3:]), ValueError, "a_scale"),
    (_quantized_add._restore, (1, Q_ARGS[:3] + (300,) + Q_ARGS[4:]), ValueError, "a_zero"),
    (_quantized_add._restore, (1, Q_ARGS[:4] + ((4, 3),) + Q_ARGS[5:]), ValueError, "b_shape"),
    (_quantized_add._restore, (1, Q_ARGS[:8] + ("sigmoidal",) + Q_ARGS[9:]), ValueError, "act_type"),
    (_quantized_add._restore, (1, Q_ARGS[:8] + ("prelu", "slopes") + Q_ARGS[10:]), ValueError, "act_params"),
    (_quantized_add._restore, (1, Q_ARGS[:13] + ("z",)), TypeError, "axis"),
    # Deconvolution16b: (version, (batch, conv, compatibility), (weight, bias, params))
    (_deconvolution._restore, (1, (1, CONV), None), ValueError,
     r"^Deconvolution16b or Deconvolution3d16b pickle: expected \(batch, conv, compatibility\)"),
    (_deconvolution._restore, (1, [1, CONV, 0], None), ValueError, r"expected \(batch, conv, compatibility\)"),
    (_deconvolution._restore, (1, ("1", CONV, 0), None), TypeError, "batch"),
    (_deconvolution._restore, (1, (0, CONV, 0), None), ValueError, "batch"),
    (_deconvolution._restore, (1, (1, "conv", 0), None), TypeError, "conv"),
    (_deconvolution._restore, (1, (1, dataclasses.replace(CONV, dst_h=99), 0), None), ValueError, "conv.dst_h"),
    (_deconvolution._restore, (1, (1, dataclasses.replace(CONV, group=4), 0), None), ValueError, "conv.group"),
    (_deconvolution._restore, (1, (1, dataclasses.replace(CONV, src_type="bogus"), 0), None), ValueError,
     "conv.src_type"),
    (_deconvolution._restore, (1, (1, dataclasses.replace(CONV, src_type="u8"), 0), None), ValueError,
     "conv.src_type"),
    (_deconvolution._restore, (1, (1, dataclasses.replace(CONV, kernel_y=-3), 0), None), ValueError, "kernel_y"),
    (_deconvolution._restore, (1, (1, dataclasses.replace(CONV, dst_format="NHWC"), 0), None), ValueError,
     "conv.dst_format"),
    (_deconvolution._restore, (1, (1, CONV, "soft?"), None), ValueError, "compatibility"),
    (_deconvolution._restore, (1, (1, CONV, 0), (W,)), ValueError, r"expected \(weight, bias, params\)"),
    (_deconvolution._restore, (1, (1, CONV, 0), (W[:5], None, None)), ValueError, "weight: expected 96 elements"),
    (_deconvolution._restore, (1, (1, CONV, 0), ("garbage", None, None)), TypeError, "weight"),
    (_deconvolution._restore, (1, (1, CONV, 0), (W.astype(object), None, None)), TypeError, "weight"),
    (_deconvolution._restore, (1, (1, CONV, 0), (W, "bias", None)), TypeError, "bias"),
    (_deconvolution._restore, (1, (1, CONV, 0), (W, np.zeros(2, np.float32), None)), ValueError, "bias"),
    (_deconvolution._restore, (1, (1, CONV, 0), (W, None, "params")), TypeError, "params"),
    (_deconvolution._restore, (1, (1, dataclasses.replace(CONV, activation=Activation.PRELU), 0),
                               (W, None, np.zeros(2, np.float32))), ValueError, "params"),
    (_deconvolution._restore, (1, None, (W, None, None)), ValueError,
     "^Deconvolution16b or Deconvolution3d16b pickle: weights without a geometry"),
    (_deconvolution._restore, (1, (1, CONV, 0), None, GatherElements), TypeError,
     r"^Deconvolution16b pickle: expected a Deconvolution16b class, got <class 'synet._gather.GatherElements'>$"),
    (_deconvolution._restore, (1, (1, CONV, 0), None, "Deconvolution16b"), TypeError,
     r"^Deconvolution16b pickle: expected a Deconvolution16b class, got 'Deconvolution16b'$"),
    (_deconvolution._restore, (1, (1, synet.ConvParams3d.deconvolution(2, 2, 2, 2, 3, kernel=2, stride=2), 0), None,
                               Deconvolution16b), TypeError,
     r"^Deconvolution3d16b pickle: expected a Deconvolution3d16b class, got <class 'synet._deconvolution"),
]


@pytest.mark.parametrize("function, args, error, match", GARBAGE,
                         ids=[f"{g[0].__module__.split('.')[-1]}-{i}" for i, g in enumerate(GARBAGE)])
def test_garbage_state(function, args, error, match):
    with pytest.raises(error, match=match):
        pickle.loads(forged(function, *args))


POOL = [None, 0, -1, 1, 2**62, 1.5, float("nan"), "x", b"\x00", (), (1,), [1, 2], {}, np.zeros(3),
        np.zeros((2, 2), np.int64), np.full(10, -7, np.int64), np.dtype("float32"), Activation.PRELU, CONV]


@given(case=st.sampled_from(named("runtime index", "const bf16 i32, repeated outer", "per tensor u8 (folded)",
                                  "per-axis scales and zeros, prelu", "nhwc grouped", "nchw depthwise", "prelu",
                                  "non-finite weights NCHW g1")),
       where=st.lists(st.tuples(st.integers(0, 40), st.sampled_from(POOL)), min_size=1, max_size=3))
def test_garbage_state_fuzz(case, where):
    """Any field of a real state replaced by junk: unpickling gives a working context or a ValueError /
    TypeError, and a context it gives runs forward safely (its own errors, never a crash)."""
    _, context, inputs, _ = case
    function, args = _state(context)
    flat = []   # (path) of every replaceable slot: top-level fields and the items of tuples inside
    for i, value in enumerate(args):
        flat.append((i, None))
        if isinstance(value, tuple):
            flat.extend((i, j) for j in range(len(value)))
    for slot, junk in where:
        i, j = flat[slot % len(flat)]
        if i == 0:
            continue   # the version: its own test
        if j is None:
            args[i] = junk
        elif isinstance(args[i], tuple) and j < len(args[i]):
            args[i] = args[i][:j] + (junk,) + args[i][j + 1:]
    try:
        other = pickle.loads(forged(function, *args))
    except (ValueError, TypeError):
        return
    with contextlib.suppress(ValueError, TypeError, IndexError, RuntimeError):
        run(other, inputs)
