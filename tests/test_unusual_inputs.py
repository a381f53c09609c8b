"""Inputs audits of unusual arrays found mishandled (2026-12-05): byte-swapped arrays (read as native numbers
by the fast paths), outputs overlapping an input, float64 weights rounded twice, uint16 weights, operands at
odd addresses."""

import numpy as np
import pytest
from reference import BF16, off_its_element_size

import synet

RNG = np.random.default_rng(2026)
SWAPPED = {np.dtype(np.float32): ">f4" if np.little_endian else "<f4",
           np.dtype(np.float64): ">f8" if np.little_endian else "<f8",
           np.dtype(np.int64): ">i8" if np.little_endian else "<i8",
           np.dtype(np.int32): ">i4" if np.little_endian else "<i4"}


def swapped(a):
    """`a`'s values in the other byte order (a different dtype, the same numbers)."""
    b = a.astype(SWAPPED[a.dtype])
    assert not b.dtype.isnative and np.array_equal(b, a, equal_nan=b.dtype.kind == "f")
    return b


def bits(a):
    return np.ascontiguousarray(a).view(np.uint8).tobytes()


def test_transposed_convolution_reads_byte_swapped_operands_as_numbers():
    x = RNG.standard_normal((1, 4, 5, 6)).astype(np.float32)
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(3).astype(np.float32)
    expected = synet.conv_transpose2d(x, w, b, stride=2)
    for args in ((swapped(x), w, b), (x, swapped(w), b), (x, w, swapped(b)), (x, swapped(w.astype(np.float64)), b)):
        assert bits(synet.conv_transpose2d(*args, stride=2)) == bits(expected)
    d = synet.Deconvolution16b(1, synet.ConvParams.deconvolution(4, 5, 6, 3, kernel=3, stride=2))
    d.set_params(swapped(w), swapped(b))
    assert bits(d.forward(x)) == bits(expected)


def test_transposed_convolution_rounds_float64_weights_and_inputs_once():
    """1 + 2**-8 + 2**-30 rounds to bfloat16 1 + 2**-7 from float64, to 1 through float32 (a tie there)."""
    v = 1 + 2**-8 + 2**-30
    one = np.ones((1, 1, 1, 1), np.float32)
    assert synet.conv_transpose2d(one, np.full((1, 1, 1, 1), v))[0, 0, 0, 0] == 1 + 2**-7
    assert synet.conv_transpose2d(np.full((1, 1, 1, 1), v), one)[0, 0, 0, 0] == 1 + 2**-7
    d = synet.Deconvolution16b(1, synet.ConvParams.deconvolution(1, 1, 1, 1, kernel=1))
    d.set_params(np.array([v]))
    assert d.forward(np.ones(1, np.float32))[0, 0, 0, 0] == 1 + 2**-7
    w = RNG.standard_normal((3, 2, 2, 2))   # float64, transposed in memory: the values, not the bytes
    x = RNG.standard_normal((1, 3, 4, 4)).astype(np.float32)
    rounded = synet.round_to_bfloat16(w)
    assert bits(synet.conv_transpose2d(x, np.asfortranarray(w))) == bits(synet.conv_transpose2d(x, rounded))


def test_uint16_weights_are_raw_bfloat16_bits():
    """As everywhere else a BF16 input is accepted: bits 0x3F80 are 1.0, not 16256."""
    x = np.ones((1, 1, 2, 2), np.float32)
    w = synet.float32_to_bfloat16(np.full((1, 1, 1, 1), 1.5, np.float32))
    assert synet.conv_transpose2d(x, w.view(np.uint16)).tolist() == synet.conv_transpose2d(x, w).tolist()
    assert synet.conv_transpose2d(x, w.view(np.uint16))[0, 0, 0, 0] == 1.5


def test_gather_reads_byte_swapped_indices_as_numbers():
    data = RNG.standard_normal((3, 10)).astype(np.float32)
    for dtype in (np.int64, np.int32):
        idx = RNG.integers(-10, 10, (3, 7)).astype(dtype)
        expected = np.take_along_axis(data, np.where(idx < 0, idx + 10, idx), 1)
        assert bits(synet.gather_elements(data, swapped(idx), 1)) == bits(expected)


def test_quantized_add_takes_byte_swapped_operands():
    a = RNG.integers(0, 256, 100).astype(np.uint8)
    b = RNG.standard_normal(100).astype(np.float32)
    expected = synet.quantized_add(a, b, dst_dtype=np.float32)
    for other in (swapped(b), swapped(b.astype(np.float64))):
        assert bits(synet.quantized_add(a, other, dst_dtype=np.float32)) == bits(expected)


@pytest.mark.parametrize("convert", [synet.float32_to_bfloat16, synet.round_to_bfloat16])
def test_bfloat16_rounding_reads_byte_swapped_float32_as_numbers(convert):
    x = np.array([1.0, 3.140625, -2.0, 1e-40, np.nan, -np.inf] * 3000, np.float32)
    assert bits(convert(swapped(x))) == bits(convert(x))


@pytest.mark.parametrize("n_threads", [1, 2])
def test_bfloat16_conversions_refuse_an_out_overlapping_x(n_threads):
    """Written over x at another place or width, the outputs overwrote input not yet read (results depended on
    the thread count): ValueError. round_to_bfloat16 into x itself, each output over its own input, works."""
    x = np.arange(1, 100001, dtype=np.float32)
    with pytest.raises(ValueError, match="out: must not overlap x"):
        synet.float32_to_bfloat16(x, out=x.view(np.uint16)[:100000], n_threads=n_threads)
    with pytest.raises(ValueError, match="out: must not overlap x"):
        synet.round_to_bfloat16(x[1:], out=x[:-1], n_threads=n_threads)
    expected = synet.round_to_bfloat16(x * np.float32(1.01))
    y = x * np.float32(1.01)
    assert synet.round_to_bfloat16(y, out=y, n_threads=n_threads) is y
    assert bits(y) == bits(expected)
    buf = np.zeros(200000, np.uint16)
    with pytest.raises(ValueError, match="out: must not overlap x"):
        synet.bfloat16_to_float32(buf[:100000], out=buf.view(np.float32), n_threads=n_threads)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_transposed_convolution_refuses_an_out_overlapping_bias(layout):
    """The bias is read while the kernels store: an out over it gave other sums (x was checked already)."""
    x = RNG.standard_normal((1, 4, 8, 8) if layout == "NCHW" else (1, 8, 8, 4)).astype(np.float32)
    w = RNG.standard_normal((4, 8, 1, 1) if layout == "NCHW" else (4, 1, 1, 8)).astype(np.float32)
    buf = np.zeros(8 * 8 * 8, np.float32)
    bias = buf[:8]
    bias[:] = np.arange(1, 9)
    out = buf.reshape((1, 8, 8, 8))
    with pytest.raises(ValueError, match="out: must not overlap x or bias"):
        synet.conv_transpose2d(x, w, bias, layout=layout, out=out)
    expected = synet.conv_transpose2d(x, w, bias.copy(), layout=layout)
    assert bits(synet.conv_transpose2d(x, w, list(bias), layout=layout, out=np.empty_like(out))) == bits(expected)


@pytest.mark.parametrize("dst_dtype, lo, hi", [(np.uint8, 0, 255), (np.int8, -128, 127)])
def test_quantized_add_saturates_at_extreme_output_scales(dst_dtype, lo, hi):
    """A dst_scale past 2**+-190 (valid: finite and > 0) put 1 / dst_scale outside float32: 0 * inf gave NaN,
    so the bottom of the range, where +inf saturates and 0 gives dst_zero."""
    f = np.array([np.inf, -np.inf, 0.0, 1.0, -1.0, 1e-45, np.nan], np.float32)
    z = np.zeros_like(f)
    for scale in (1e60, 1e100, 2.0**214, 1e300):   # finite values / scale round to 0
        got = synet.quantized_add(f, z, dst_scale=scale, dst_zero=5, dst_dtype=dst_dtype)
        assert got.tolist() == [hi, lo, 5, 5, 5, 5, lo]
    for scale in (1e-50, 1e-60, 2.0**-192, 1e-300):   # nonzero values / scale saturate
        got = synet.quantized_add(f, z, dst_scale=scale, dst_zero=5, dst_dtype=dst_dtype)
        assert got.tolist() == [hi, lo, 5, hi, lo, hi, lo]
    u = np.zeros(200, np.uint8)
    assert synet.quantized_add(u, u, dst_scale=1e-60, dst_zero=54).tolist() == [54] * 200


@pytest.mark.parametrize("zero_first", [True, False])
def test_plan_cache_keys_negative_zero_apart(zero_first):
    """-0.0 == 0.0 in Python, but a LEAKY_RELU slope of -0.0 makes negative inputs -0: a plan cached for one
    answered calls with the other."""
    x = np.array([-1.0, -2.0, 3.0], np.float32)
    z = np.zeros(3, np.float32)
    kw = dict(dst_dtype="float32", activation="leaky_relu")
    synet.clear_plan_cache()
    for slope in ((0.0, -0.0) if zero_first else (-0.0, 0.0)):
        got = synet.quantized_add(x, z, activation_params=[slope], **kw)
        assert bits(got) == bits(np.where(x < 0, x * np.float32(slope), x))
        w = np.full((1, 1, 1, 1), -1.0, np.float32)
        got = synet.conv_transpose2d(np.ones((1, 1, 1, 2), np.float32), w, activation="leaky_relu",
                                     activation_params=[slope])
        assert bits(got) == bits(np.full((1, 1, 1, 2), -1.0 * slope, np.float32))


def test_quantized_add_float32_output_of_cancelling_operands_is_the_float64_formula():
    """a' = (a - a_zero) * a_scale, one rounding, as a float64 evaluation of the formula makes it: computed as
    a * a_scale - a_zero * a_scale (three roundings), operands that cancel were off by 8e-6 of the result,
    past SPEC's 1e-6."""
    cases = [(234, 235, 3e38, np.float32(3e38)), (1, 255, float(np.float32(254000005120.0)) / 254,
                                                   np.float32(254000005120.0)),
             (7, 200, 1e30, np.float32(1.93e32))]
    for a, a_zero, a_scale, b in cases:
        expected = np.float32((a - a_zero) * a_scale + float(b))
        got = synet.quantized_add(np.array([a] * 70, np.uint8), np.full(70, b), a_scale=a_scale, a_zero=a_zero,
                                  dst_dtype=np.float32)
        assert bits(got) == bits(np.full(70, expected)), (a, a_zero, a_scale, b, got[0], expected)


def test_errors_name_what_the_caller_gave():
    """Messages the audit found leaking NumPy's internals or naming a value the caller did not give."""
    data = np.arange(10, dtype=np.float32)
    with pytest.raises(IndexError, match=r"indices\[0\] = 18446744073709551615 is out of range"):
        synet.gather_elements(data, np.array([2**64 - 1], np.uint64))
    rows = np.broadcast_to(np.array([[2**64 - 1]], np.uint64)[:, :, None], (3, 1, 4))   # the whole-rows path
    with pytest.raises(IndexError, match=r"= 18446744073709551615 is out of range for axis 1"):
        synet.gather_elements(np.zeros((3, 10, 4), np.float32), rows, axis=1)
    context = synet.GatherElements("f32", "i32", False, 1, [2], 0, 1, 3)
    with pytest.raises(IndexError, match=r"out of range \(the axis has size 0\)"):
        context.forward(np.zeros(0, np.float32), np.zeros(6, np.int32))
    transposed = np.ones((1,) * 30 + (2, 3), np.uint8).T   # (the memory-order paths broadcast first)
    with pytest.raises(ValueError, match="b: expected at most 32 dimensions"):
        synet.quantized_add(transposed, np.ones((1,) * 33, np.uint8))
    wide = np.ones((1,) * 31 + (2, 3), np.uint8).T
    with pytest.raises(ValueError, match="a: expected at most 32 dimensions"):
        synet.quantized_add(wide, wide.copy(order="K"), out=np.empty((1,) * 31 + (2, 3), np.uint8).T)
    for a_shape, b_shape, name in (((1,) * 40, (1,), "a"), ((1,), (1,) * 33, "b")):
        with pytest.raises(ValueError, match=f"{name}: expected at most 32 dimensions"):
            synet.quantized_add(np.ones(a_shape, np.uint8), np.ones(b_shape, np.uint8))
        with pytest.raises(ValueError, match=f"{name}_shape: expected at most 32 dimensions"):
            synet.QuantizedAdd(a_shape, "u8", 1.0, 0, b_shape, "u8", 1.0, 0, "identity", None, "u8", 1.0, 0)
    empty = np.ones((2, 0), np.float32)   # PRELU of no channels: no slopes needed
    assert synet.quantized_add(empty, empty, activation="prelu", activation_params=[], dst_dtype="float32").shape \
        == (2, 0)
    x, w = np.ones((1, 1, 2, 2), np.float32), np.ones((1, 1, 1, 1), np.float32)
    with pytest.raises(ValueError, match="out_dtype: NumPy's float64 is none of synet's data types"):
        synet.conv_transpose2d(x, w, out_dtype=np.dtype("float64"))
    for bias in (np.array(["a"]), np.array([1 + 5j])):
        with pytest.raises(ValueError, match="bias: expected real numbers"):
            synet.conv_transpose2d(x, w, bias)
    with pytest.raises(ValueError, match="activation_params: expected a sequence of real numbers"):
        synet.conv_transpose2d(x, w, activation="leaky_relu", activation_params=[0.1 + 1j])


def _leaky(slope):
    """conv_transpose2d's and quantized_add's LEAKY_RELU of -1 with these activation parameters, as float32 bits."""
    x, w = -np.ones((1, 1, 1, 1), np.float32), np.ones((1, 1, 1, 1), np.float32)
    y = synet.conv_transpose2d(x, w, activation="leaky_relu", activation_params=slope)
    q = synet.quantized_add(np.float32([-1.0]), np.float32([0.0]), dst_dtype=np.float32, activation="leaky_relu",
                            activation_params=slope)
    return int(y.view(np.uint32).item()), int(q.view(np.uint32).item())


def test_plan_cache_keys_parameters_by_value():
    """Arrays of objects were keyed by their bytes (pointers: a freed float's address came back with another
    value), ml_dtypes' 1-byte floats by dtype.str ('<V1' for all of them); NaNs of either sign keep theirs (the
    quantized add's output shows the slope's NaN; the transposed convolution's is always the canonical one)."""
    for i in range(1, 6):
        slope = np.array([i / 4], dtype=object)
        assert _leaky(slope) == (np.float32(-i / 4).view(np.uint32),) * 2
        del slope
    ml_dtypes = pytest.importorskip("ml_dtypes")
    raw = np.array([0x38], np.uint8)
    for t in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3b11fnuz, ml_dtypes.float8_e3m4):
        slope = raw.view(t)
        assert _leaky(slope) == (np.float32(-slope.astype(np.float32)[0]).view(np.uint32),) * 2
    nan = np.float64(np.nan)
    for sign in (1.0, -1.0, 1.0):
        expected = 0x7FC00000 if sign > 0 else 0xFFC00000
        assert _leaky(np.copysign(nan, sign)) == (0xFFC00000, expected)


def test_tampered_gather_pickle_claiming_a_huge_outer_raises_value_error():
    g = synet.GatherElements("f32", "i32", True, 1, [2, 3], 4, 5, 3)
    g.set_index(RNG.integers(-4, 4, (2, 3, 3, 5)).astype(np.int32))
    restore, (version, args, index, index_shape) = g.__reduce__()
    with pytest.raises(ValueError, match="index shape .* does not fit"):   # (it tiled first: MemoryError)
        restore(version, (*args[:4], (2**31, 3), *args[5:]), index, index_shape)


def test_gather_c_api_refuses_sizes_whose_product_wraps():
    """outer·idx_count·inner = 2**61·2·4 wraps to 0 in 64 bits: it ran nothing and reported success."""
    import ctypes

    from synet import capi
    name = ctypes.pythonapi.PyCapsule_GetName
    name.restype, name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    pointer = ctypes.pythonapi.PyCapsule_GetPointer
    pointer.restype, pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    capsule = capi.__pyx_capi__["gather_elements"]
    size, status, ptr = ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p
    gather = ctypes.CFUNCTYPE(status, ptr, ptr, ptr, size, size, size, size, status, status, status)(
        pointer(capsule, name(capsule)))   # (src, idx, dst, outer, src_count, inner, idx_count, sizes, threads)
    src, idx, dst = np.arange(24, dtype=np.float32), np.zeros(12, np.int32), np.full(12, -7, np.float32)
    assert gather(src.ctypes.data, idx.ctypes.data, dst.ctypes.data, 2**61, 3, 4, 2, 4, 4, 1) == 1   # VALUE_ERROR
    assert (dst == -7).all()
    assert gather(src.ctypes.data, idx.ctypes.data, dst.ctypes.data, 2, 3, 4, 1, 4, 4, 1) == 0   # OK
    assert gather(src.ctypes.data, idx.ctypes.data, dst.ctypes.data, 2**40, 1, 0, 2**40, 4, 4, 1) == 0   # empty


def test_dask_graphs_of_nan_slopes_of_either_sign_differ():
    """dask's tokenize gives +NaN and -NaN one token: the graph of one reused the other's results."""
    da = pytest.importorskip("dask.array")
    import synet.dask
    x = -np.ones((2, 1, 1, 1), np.float32)
    w = np.ones((1, 1, 1, 1), np.float32)
    names = set()
    for sign in (1.0, -1.0):
        slope = float(np.copysign(np.nan, sign))
        y = synet.dask.conv_transpose2d(da.from_array(x, chunks=1), w, activation="leaky_relu",
                                        activation_params=slope)
        names.add(y.name)
        expected = synet.conv_transpose2d(x, w, activation="leaky_relu", activation_params=[slope])
        assert bits(y.compute(scheduler="sync")) == bits(expected)
    assert len(names) == 2


NAN_SUM = """
import numpy as np, synet
a = np.full(200, np.nan, np.float32)
a[1::2] = -a[1::2]
b = -a
b[::3] = 1.0
for act in ("identity", "relu", "elu"):
    y = synet.quantized_add(a, b, dst_dtype=np.float32, activation=act)
    print(act, y.view(np.uint32).tolist() == (a + a).view(np.uint32).tolist())
"""


@pytest.mark.parametrize("level", ["", "avx2", "baseline"])
def test_quantized_add_nan_sum_is_a_nan_at_every_level(level, tmp_path):
    """a' + b' of two NaNs gives a's (quieted), in the vectors and in the tail, at every level: x86 keeps the
    first operand's NaN and the compiler put either first (b's in the vectors, a's in the tail; a's at AVX2)."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, SYNET_MAX_ISA=level) if level else dict(os.environ)
    run = subprocess.run([sys.executable, "-c", NAN_SUM], env=env, capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)   # (not the source tree: the installed synet)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["identity", "True", "relu", "True", "elu", "True"]


def test_quantized_add_parameters_of_unusual_types():
    """A named tuple of per-axis scales (synet.dask keeps a copy of it), a memoryview (read as NumPy reads it;
    hashing a writable one raises ValueError, which the plan cache once took for a bug)."""
    import collections
    scales = collections.namedtuple("scales", "r g b")(0.5, 1.0, 2.0)
    a = np.full(3, 8, np.uint8)
    expected = synet.quantized_add(a, a, a_scale=[0.5, 1.0, 2.0], axis=0)
    assert bits(synet.quantized_add(a, a, a_scale=scales, axis=0)) == bits(expected)
    with pytest.raises(ValueError, match=r"^a_scale\[0\]: expected a finite number > 0, got 0"):
        synet.quantized_add(a, a, a_scale=memoryview(bytearray(8)))   # eight uint8 zeros
    per_axis = bytearray(np.array([0.5, 1.0, 2.0]).tobytes())
    assert bits(synet.quantized_add(a, a, a_scale=memoryview(per_axis).cast("d"), axis=0)) == bits(expected)
    pytest.importorskip("dask.array")
    from synet import dask as synet_dask
    assert bits(synet_dask.quantized_add(a, a, a_scale=scales, axis=0).compute(scheduler="sync")) == bits(expected)


def test_dask_takes_named_tuples():
    """synet.dask's token of the arguments rebuilt tuples by their type: a named tuple's constructor failed."""
    da = pytest.importorskip("dask.array")
    import collections

    import synet.dask
    size = collections.namedtuple("size", "d h w")
    x = np.ones((2, 1, 3, 3, 3), np.float32)
    w = np.ones((1, 1, 2, 2, 2), np.float32)
    y = synet.dask.conv_transpose3d(da.from_array(x, chunks=1), w, stride=size(2, 2, 2))
    assert bits(y.compute(scheduler="sync")) == bits(synet.conv_transpose3d(x, w, stride=(2, 2, 2)))


def _non_array_calls():
    """(form, argument name, call with that argument replaced) for every array argument of the functional forms."""
    import synet.onnx as so
    x, w = np.ones((1, 4, 3, 3), np.float32), np.ones((4, 2, 1, 1), np.float32)
    data, idx, q = np.ones((2, 3), np.float32), np.zeros((2, 3), np.int64), np.zeros(3, np.uint8)
    return [
        ("conv_transpose2d", "x", lambda v: synet.conv_transpose2d(v, w)),
        ("conv_transpose2d", "weight", lambda v: synet.conv_transpose2d(x, v)),
        ("conv_transpose2d", "bias", lambda v: synet.conv_transpose2d(x, w, v)),
        ("conv_transpose1d", "x", lambda v: synet.conv_transpose1d(v, w[..., 0])),
        ("gather_elements", "data", lambda v: synet.gather_elements(v, idx, 1)),
        ("gather_elements", "indices", lambda v: synet.gather_elements(data, v, 1)),
        ("quantized_add", "a", lambda v: synet.quantized_add(v, q)),
        ("quantized_add", "b", lambda v: synet.quantized_add(q, v)),
        ("float32_to_bfloat16", "x", lambda v: synet.float32_to_bfloat16(v)),
        ("round_to_bfloat16", "x", lambda v: synet.round_to_bfloat16(v)),
        ("bfloat16_to_float32", "x", lambda v: synet.bfloat16_to_float32(v)),
        ("onnx.conv_transpose", "X", lambda v: so.conv_transpose(v, w)),
        ("onnx.conv_transpose", "W", lambda v: so.conv_transpose(x, v)),
        ("onnx.gather_elements", "data", lambda v: so.gather_elements(v, idx, 1)),
        ("onnx.gather_elements", "indices", lambda v: so.gather_elements(data, v, 1)),
        ("onnx.qlinear_add", "A", lambda v: so.qlinear_add(v, np.float32(0.1), q[0], q, np.float32(0.1), q[0],
                                                           np.float32(0.1), q[0])),
        ("onnx.qlinear_add", "A_scale", lambda v: so.qlinear_add(q, v, q[0], q, np.float32(0.1), q[0],
                                                                 np.float32(0.1), q[0])),
    ]


@pytest.mark.parametrize("value", [None, "abc", object()], ids=["None", "str", "object"])
def test_functional_forms_raise_type_error_for_non_arrays(value):
    """SPEC section 7: TypeError for non-arrays (a None, a str or another object where an array-like belongs),
    naming the parameter and what was given; they raised ValueError ("got dtype object")."""
    for form, name, call in _non_array_calls():
        if value is None and (name == "bias" or form == "onnx.qlinear_add"):
            continue   # (no bias; QLinearAdd: a required input missing, below)
        with pytest.raises(TypeError) as raised:
            call(value)
        assert str(raised.value) == f"{name}: expected an array-like of numbers, got {type(value).__name__}", form


    import synet.onnx as so
    for name in ("A", "A_scale"):
        args = dict(A=np.zeros(3, np.uint8), A_scale=np.float32(0.1), A_zero_point=None, B=np.zeros(3, np.uint8),
                    B_scale=np.float32(0.1), B_zero_point=None, C_scale=np.float32(0.1), C_zero_point=None)
        with pytest.raises(ValueError, match=f"^{name}: a required input of QLinearAdd is missing$"):
            so.qlinear_add(**dict(args, **{name: None}))


def test_functional_forms_keep_value_error_for_arrays_of_other_dtypes():
    """An ndarray or a list of strings or objects (ints past 64 bits) is an array-like of a wrong dtype (or
    shape): ValueError, as before."""
    for _form, _name, call in _non_array_calls():
        for array in (np.array(["a"]), np.array([None]), ["a"], [2**70]):
            with pytest.raises(ValueError):
                call(array)


def test_gather_takes_lists_of_strings_and_objects():
    """gather_elements copies any NumPy dtype: a list of strings or objects is an array-like it gathers."""
    import synet.onnx as so
    idx = [[1, 0], [0, 1]]
    for gather in (synet.gather_elements, so.gather_elements):
        assert gather([["a", "bb"], ["c", "d"]], idx, 1).tolist() == [["bb", "a"], ["c", "d"]]
    assert so.gather_elements([[1, None], [2, 3]], idx, 1).tolist() == [[None, 1], [2, 3]]


def test_dask_forms_raise_type_error_for_non_arrays():
    da = pytest.importorskip("dask.array")
    import synet.dask as sd
    x = da.ones((1, 4, 3, 3), dtype=np.float32)
    with pytest.raises(TypeError, match="^weight: expected an array-like of numbers, got NoneType$"):
        sd.conv_transpose2d(x, None)
    with pytest.raises(TypeError, match="^data: expected an array-like of numbers, got NoneType$"):
        sd.gather_elements(None, np.zeros((2, 3), np.int64), 1)
    with pytest.raises(TypeError, match="^b: expected an array-like of numbers, got NoneType$"):
        sd.quantized_add(da.zeros(3, dtype=np.uint8), None)


def test_ragged_sequences_are_named():
    """A ragged list leaked NumPy's message without the parameter's name."""
    with pytest.raises(ValueError, match="^x: setting an array element with a sequence"):
        synet.conv_transpose2d([[[[1.0], [1.0, 2.0]]]], np.ones((1, 1, 1, 1), np.float32))
    with pytest.raises(ValueError, match="^indices: setting an array element with a sequence"):
        synet.gather_elements(np.ones((2, 2), np.float32), [[0], [0, 1]], 1)


def test_bfloat16_rounding_takes_bfloat16_lists_and_scalars():
    """A bfloat16 ndarray was taken (its values), a list or a scalar of them refused ("got dtype bfloat16")."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    one_and_half = ml_dtypes.bfloat16(1.5)
    assert synet.float32_to_bfloat16([one_and_half]).view(np.uint16).tolist() == [0x3FC0]
    assert synet.round_to_bfloat16(one_and_half).tolist() == 1.5


# ---------------------------------------------------------------------------------------------
# operands off their element size (np.frombuffer at an odd offset): legal NumPy arrays that C may not load or
# store as elements (UBSan's "load of misaligned address"; the sanitizer job runs these tests). synet runs them
# through aligned copies, writing a given `out` back, with the aligned operands' bits. (An audit of 2,448 cases,
# 2026-12-05: quantized_add and the transposed convolutions passed such arrays to their kernels; gathers copied.)


@pytest.mark.parametrize("size", [210, (1 << 20) + 3])
@pytest.mark.parametrize("types", [("f32", "f32", "f32"), ("u8", "u8", "f32"), ("f32", "u8", "u8"), ("u8", "u8", "u8")])
@pytest.mark.parametrize("broadcast", [False, True])
def test_quantized_add_operands_at_odd_addresses(size, types, broadcast):
    dtypes = {"f32": np.float32, "u8": np.uint8}
    shape = (1, 6, 5, size // 30) if size > 1000 else (1, 6, 5, 7)
    a = (RNG.standard_normal(shape) * 40 + 100).astype(dtypes[types[0]])
    b = (RNG.standard_normal((1, 6, 1, 1) if broadcast else shape) * 40 + 100).astype(dtypes[types[1]])
    kwargs = dict(a_scale=0.02, a_zero=100, b_scale=0.03, b_zero=90, dst_scale=0.04, dst_zero=80,
                  dst_dtype=dtypes[types[2]])
    expected = synet.quantized_add(a, b, **kwargs)
    for odd_a, odd_b, odd_out in ((1, 0, 0), (0, 1, 0), (0, 0, 1), (1, 1, 1)):
        x = off_its_element_size(a.shape, a.dtype, a) if odd_a else a
        y = off_its_element_size(b.shape, b.dtype, b) if odd_b else b
        out = off_its_element_size(expected.shape, expected.dtype) if odd_out else None
        got = synet.quantized_add(x, y, out=out, **kwargs)
        assert out is None or got is out
        assert bits(got) == bits(expected), (odd_a, odd_b, odd_out)
    if types[0] == types[2]:   # in place, into an operand at an odd address
        x = off_its_element_size(a.shape, a.dtype, a)
        assert synet.quantized_add(x, b, out=x, **kwargs) is x and bits(x) == bits(expected)


@pytest.mark.parametrize("layout, groups, out_dtype", [("NCHW", 1, np.float32), ("NHWC", 1, np.float32),
                                                       ("NCHW", 4, BF16), ("NHWC", 2, np.float32)])
def test_transposed_convolution_operands_at_odd_addresses(layout, groups, out_dtype):
    x = RNG.standard_normal((2, 4, 9, 9)).astype(np.float32)
    w = RNG.standard_normal((4, 12 // groups, 3, 3)).astype(np.float32)
    bias = RNG.standard_normal(12).astype(np.float32)
    if layout == "NHWC":
        x, w = np.ascontiguousarray(x.transpose(0, 2, 3, 1)), np.ascontiguousarray(w.transpose(0, 2, 3, 1))
    kwargs = dict(stride=2, padding=1, groups=groups, layout=layout, out_dtype=out_dtype)
    expected = synet.conv_transpose2d(x, w, bias, **kwargs)
    for odd in ("x", "weight", "bias", "out", "all"):
        args = {"x": x, "weight": w, "bias": bias}
        for name in args:
            if odd in (name, "all"):
                args[name] = off_its_element_size(args[name].shape, np.float32, args[name])
        out = off_its_element_size(expected.shape, expected.dtype) if odd in ("out", "all") else None
        got = synet.conv_transpose2d(args["x"], args["weight"], args["bias"], out=out, **kwargs)
        assert out is None or got is out
        assert bits(got) == bits(expected), odd
    bits16 = synet.float32_to_bfloat16(x).view(np.uint16)   # a BF16 source's raw bits at an odd address
    assert bits(synet.conv_transpose2d(off_its_element_size(x.shape, np.uint16, bits16), w, bias, **kwargs)) == \
        bits(expected)
    # the context: weights and bias at odd addresses to set_params, src and dst to forward
    c_in, c_out = 4, 12
    conv = synet.ConvParams.deconvolution(c_in, 9, 9, c_out, 3, 2, pad=1, group=groups, format=layout)
    deconv = synet.Deconvolution16b(2, conv)
    deconv.set_params(off_its_element_size(w.shape, np.float32, w), off_its_element_size(bias.shape, np.float32, bias))
    if out_dtype is np.float32:
        dst = off_its_element_size(expected.shape, np.float32)
        assert deconv.forward(off_its_element_size(x.shape, np.float32, x), dst=dst) is dst
        assert bits(dst) == bits(expected)


@pytest.mark.parametrize("dims", [1, 3])
def test_1d_and_3d_transposed_convolutions_at_odd_addresses(dims):
    spatial = (11,) if dims == 1 else (3, 4, 5)
    x = RNG.standard_normal((1, 3, *spatial)).astype(np.float32)
    w = RNG.standard_normal((3, 5, *(2,) * dims)).astype(np.float32)
    function = synet.conv_transpose1d if dims == 1 else synet.conv_transpose3d
    expected = function(x, w, stride=2)
    out = off_its_element_size(expected.shape, np.float32)
    got = function(off_its_element_size(x.shape, np.float32, x), off_its_element_size(w.shape, np.float32, w),
                   stride=2, out=out)
    assert got is out and bits(got) == bits(expected)
