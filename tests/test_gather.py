"""GatherElements against np.take_along_axis (and onnxruntime / torch where installed)."""

import re
import threading

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from outcomes import PYTHON_ERRORS, failed, outcome
from reference import BF16, laid_out
from reference import gather_reference as reference

import synet

DATA_DTYPES = [np.float32, BF16, np.uint8, np.int8, np.float16, np.uint16, np.int32, np.int64, np.float64, np.bool_]


def random_data(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, endpoint=True, dtype=dtype)
    return (rng.standard_normal(shape) * 100).astype(dtype)


def test_seed_example():
    src = np.arange(8, dtype=np.float32)
    idx = np.array([0, 2, 1, 3, 1, 0], np.int32)
    gather = synet.GatherElements()
    gather.init(synet.DataType.FLOAT32, synet.DataType.INT32, False, 1, [2], 4, 1, 3)
    assert gather.enable()
    dst = np.zeros(6, np.float32)
    assert gather.forward(src, idx, dst) is dst
    np.testing.assert_array_equal(dst, [0, 2, 1, 7, 5, 4])


@pytest.mark.parametrize("dtype", DATA_DTYPES, ids=str)
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("shape, axis", [((5,), 0), ((4, 7), 1), ((4, 7), -2), ((3, 6, 5), 1), ((2, 3, 33, 300), 2),
                                         ((3, 1000, 1), 1), ((64, 40), 1), ((2, 3, 4, 5, 6), -1)])
def test_functional_matches_reference(dtype, index_dtype, shape, axis):
    rng = np.random.default_rng(sum(shape) + axis)
    data = random_data(rng, shape, dtype)
    n = shape[axis]
    ishape = list(shape)
    ishape[axis] = n + 5
    indices = rng.integers(-n, n, ishape).astype(index_dtype)
    result = synet.gather_elements(data, indices, axis)
    assert result.dtype == data.dtype and result.shape == indices.shape
    np.testing.assert_array_equal(result.view(np.uint8), reference(data, indices, axis).view(np.uint8))


def test_sub_block_indices_and_other_integer_dtypes():
    rng = np.random.default_rng(1)
    data = rng.standard_normal((5, 6, 7)).astype(np.float32)
    indices = rng.integers(0, 6, (3, 9, 4)).astype(np.uint8)
    np.testing.assert_array_equal(synet.gather_elements(data, indices, 1), reference(data, indices.astype(np.int64), 1))
    for dtype in (np.int8, np.int16, np.uint16, np.uint32, np.uint64):
        np.testing.assert_array_equal(synet.gather_elements(data, indices.astype(dtype), 1),
                                      reference(data, indices.astype(np.int64), 1))


def test_non_contiguous_inputs_and_out():
    rng = np.random.default_rng(2)
    data = rng.standard_normal((8, 10)).astype(np.float32)[::2, ::-1]
    indices = rng.integers(-10, 10, (4, 3))[:, ::1].T.copy().T
    out = np.empty((4, 3), np.float32)
    assert synet.gather_elements(data, indices, 1, out=out) is out
    np.testing.assert_array_equal(out, reference(data, indices, 1))


@pytest.mark.parametrize("dtype", [np.float32, np.uint8, BF16, np.float64])
@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1])
def test_transposed_pair_keeps_its_layout(dtype, axis):
    """Data and indices laid out alike channels-last (NHWC seen as NCHW) gather as they lie (a copy to C order
    took 10x the gather) into a result laid out alike, as torch.gather's is; the values are the reference's."""
    rng = np.random.default_rng(5)
    source = random_data(rng, (2, 6, 5, 7), dtype)
    ishape = tuple(4 if d == axis % 4 else n for d, n in enumerate(source.shape))
    indices = rng.integers(-source.shape[axis], source.shape[axis], ishape)
    order = (0, 2, 3, 1)
    result = synet.gather_elements(laid_out(source, order), laid_out(indices, order), axis)
    assert result.transpose(order).flags.c_contiguous and not result.flags.c_contiguous
    np.testing.assert_array_equal(np.ascontiguousarray(result).view(np.uint8),
                                  reference(source, indices, axis).view(np.uint8))
    # into an out= laid out alike, and into a C-ordered one
    for out in (laid_out(np.zeros(ishape, dtype), order), np.zeros(ishape, dtype)):
        assert synet.gather_elements(laid_out(source, order), laid_out(indices, order), axis, out=out) is out
        np.testing.assert_array_equal(np.ascontiguousarray(out).view(np.uint8),
                                      np.ascontiguousarray(result).view(np.uint8))
    indices[1, 2, 1, 3] = source.shape[axis]
    with pytest.raises(IndexError, match=rf"^indices\[1, 2, 1, 3\] = {source.shape[axis]} is out of range for "
                                         rf"axis {axis % 4} with size {source.shape[axis]}$"):
        synet.gather_elements(laid_out(source, order), laid_out(indices, order), axis)


def check_broadcast_index(data, source, indices, axis):
    """gather_elements of a broadcast (strided) index against the reference on its materialised copy, bitwise,
    on 1 or 2 threads, with or without out=; or the IndexError naming the first bad index and its place."""
    ax, n = axis % source.ndim, source.shape[axis]
    threads = data.draw(st.sampled_from([1, 2]), label="threads")
    out = np.empty(indices.shape, source.dtype) if data.draw(st.booleans(), label="out") else None
    full = np.ascontiguousarray(indices).astype(np.int64)
    bad = (full < -n) | (full >= n)
    if not bad.any():
        result = synet.gather_elements(source, indices, axis, out=out, n_threads=threads)
        assert out is None or result is out
        np.testing.assert_array_equal(result.view(np.uint8), reference(source, full, ax).view(np.uint8))
    else:
        where = np.unravel_index(int(np.argmax(bad.reshape(-1))), full.shape)
        message = (rf"^indices\[{', '.join(map(str, where))}\] = {full[where]} is out of range for axis {ax} "
                   rf"with size {n}$")
        with pytest.raises(IndexError, match=message):
            synet.gather_elements(source, indices, axis, out=out, n_threads=threads)


@given(st.data())
def test_hypothesis_row_index_broadcast_along_the_inner_axes(data):
    """An index constant along every axis after `axis` (np.broadcast_to, torch's expand) gathers whole
    rows: the reference's bits, for any dtype, index dtype, threads and out=, and the first bad row named."""
    ndim = data.draw(st.integers(2, 4), label="ndim")
    shape = tuple(data.draw(st.lists(st.integers(0, 5), min_size=ndim, max_size=ndim), label="shape"))
    ax = data.draw(st.integers(0, ndim - 2), label="axis")
    axis = data.draw(st.sampled_from([ax, ax - ndim]), label="axis given")
    idx_count = data.draw(st.integers(0, 6), label="idx_count")
    dtype = data.draw(st.sampled_from(DATA_DTYPES), label="dtype")
    index_dtype = data.draw(st.sampled_from([np.int64, np.int32, np.int16, np.uint8]), label="index_dtype")
    n = shape[ax]
    lo = 0 if np.dtype(index_dtype).kind == "u" else -n - 1
    row_shape = shape[:ax] + (idx_count,) + (1,) * (ndim - ax - 1)
    rows = np.array(data.draw(st.lists(st.integers(lo, n), min_size=int(np.prod(row_shape)),
                                       max_size=int(np.prod(row_shape))), label="rows"), index_dtype).reshape(row_shape)
    indices = np.broadcast_to(rows, shape[:ax] + (idx_count,) + shape[ax + 1:])
    check_broadcast_index(data, random_data(np.random.default_rng(1), shape, dtype), indices, axis)


@given(st.data())
def test_hypothesis_index_broadcast_along_the_leading_axes(data):
    """An index broadcast along leading axes before `axis` (np.broadcast_to, torch's expand of one index over
    the batch) reads its one copy for all of them: the reference's bits, for any dtype, index dtype, sub-block,
    threads and out=, and the first bad index named at its place in the broadcast index."""
    ndim = data.draw(st.integers(2, 4), label="ndim")
    shape = tuple(data.draw(st.lists(st.integers(0, 5), min_size=ndim, max_size=ndim), label="shape"))
    ax = data.draw(st.integers(1, ndim - 1), label="axis")
    axis = data.draw(st.sampled_from([ax, ax - ndim]), label="axis given")
    broadcast = data.draw(st.integers(1, ax), label="broadcast axes")
    idx_count = data.draw(st.integers(0, 6), label="idx_count")
    off_axis = [data.draw(st.integers(0, n), label=f"index size {d}") if d > ax else n for d, n in enumerate(shape)]
    dtype = data.draw(st.sampled_from(DATA_DTYPES), label="dtype")
    index_dtype = data.draw(st.sampled_from([np.int64, np.int32, np.int16, np.uint8]), label="index_dtype")
    n = shape[ax]
    lo = 0 if np.dtype(index_dtype).kind == "u" else -n - 1
    full_shape = tuple(off_axis[:ax]) + (idx_count,) + tuple(off_axis[ax + 1:])
    compact_shape = (1,) * broadcast + full_shape[broadcast:]
    values = data.draw(st.lists(st.integers(lo, n), min_size=int(np.prod(compact_shape)),
                                max_size=int(np.prod(compact_shape))), label="index")
    indices = np.broadcast_to(np.array(values, index_dtype).reshape(compact_shape), full_shape)
    check_broadcast_index(data, random_data(np.random.default_rng(3), shape, dtype), indices, axis)


def test_index_broadcast_along_the_batch_on_two_threads():
    """One index expanded over a batch of large slices, on both threads' tasks, and one broadcast along the
    batch but not the next axis (each of its slices repeated): the reference's values."""
    rng = np.random.default_rng(8)
    source = random_data(rng, (6, 300, 512), np.float32)
    indices = np.broadcast_to(rng.integers(-300, 300, (1, 200, 512)), (6, 200, 512))
    expected = reference(source, np.ascontiguousarray(indices), 1)
    for threads in (1, 2):
        np.testing.assert_array_equal(synet.gather_elements(source, indices, 1, n_threads=threads), expected)
        np.testing.assert_array_equal(synet.gather_elements(source, indices[:, :, :7], -1, n_threads=threads),
                                      reference(source, np.ascontiguousarray(indices[:, :, :7]), 2))
    source = random_data(rng, (3, 4, 50, 8), np.uint8)
    indices = np.broadcast_to(rng.integers(0, 50, (1, 4, 30, 8), np.int32), (3, 4, 30, 8))
    np.testing.assert_array_equal(synet.gather_elements(source, indices, 2),
                                  reference(source, np.ascontiguousarray(indices), 2))


def test_row_index_sub_blocks_and_large_rows():
    """A broadcast row index over a sub-block of data, and many large rows on two threads (the copy's
    parallel loop): the reference's values."""
    rng = np.random.default_rng(7)
    source = random_data(rng, (3, 50, 40), np.float32)
    rows = rng.integers(-50, 50, (2, 7, 1))
    for indices in (np.broadcast_to(rows, (2, 7, 40)), np.broadcast_to(rows, (2, 7, 30))):
        np.testing.assert_array_equal(synet.gather_elements(source, indices, 1),
                                      reference(source, np.ascontiguousarray(indices), 1))
    source = random_data(rng, (4, 300, 512), np.float32)
    indices = np.broadcast_to(rng.integers(-300, 300, (4, 200, 1)), (4, 200, 512))
    expected = reference(source, np.ascontiguousarray(indices), 1)
    for threads in (1, 2):
        np.testing.assert_array_equal(synet.gather_elements(source, indices, -2, n_threads=threads), expected)


@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 5), (4, 6, 2, 3)])
def test_every_negative_axis_with_an_index_of_data_shape(shape):
    """The fast path of whole C-ordered arrays with a negative axis (C's -1 % n is -1: it read the size
    before the shape's first, raising a bogus IndexError or crashing)."""
    rng = np.random.default_rng(11)
    data = random_data(rng, shape, np.float32)
    for axis in range(-len(shape), 0):
        indices = rng.integers(-shape[axis], shape[axis], shape)
        np.testing.assert_array_equal(synet.gather_elements(data, indices, axis), reference(data, indices, axis))


def test_empty_results():
    data = np.ones((3, 4), np.float32)
    assert synet.gather_elements(data, np.empty((3, 0), np.int64), 1).shape == (3, 0)
    assert synet.gather_elements(np.empty((3, 0), np.float32), np.empty((3, 0), np.int64), 0).shape == (3, 0)
    with pytest.raises(IndexError, match="size 0"):
        synet.gather_elements(np.empty((0, 2), np.float32), np.zeros((1, 2), np.int64), 0)


@pytest.mark.parametrize("dtype", [np.float32, np.uint8, BF16, np.float64])
def test_out_of_range_names_position_value_axis_and_size(dtype):
    data = np.zeros((2, 5, 3), dtype)
    indices = np.zeros((2, 4, 3), np.int64)
    indices[1, 2, 1] = 5
    with pytest.raises(IndexError, match=r"indices\[1, 2, 1\] = 5 is out of range for axis 1 with size 5"):
        synet.gather_elements(data, indices, 1)
    indices[1, 2, 1] = -6
    with pytest.raises(IndexError, match=r"= -6 .* axis 1 with size 5"):
        synet.gather_elements(data, indices, -2)
    indices[1, 2, 1] = 2**40  # not wrapped into range by a 32-bit cut
    with pytest.raises(IndexError, match=str(2**40)):
        synet.gather_elements(data, indices, 1)


def test_out_of_range_touches_nothing_outside_dst():
    data = np.arange(20, dtype=np.float32).reshape(4, 5)
    indices = np.full((4, 5), 7, np.int32)
    arena = np.full(40, -1.0, np.float32)
    dst = arena[10:30]
    gather = synet.GatherElements("f32", "i32", False, 1, [4], 5, 1, 5)
    with pytest.raises(IndexError, match="flat position 0"):
        gather.forward(data, indices, dst)
    assert (arena[:10] == -1).all() and (arena[30:] == -1).all()


@pytest.mark.filterwarnings("error")   # and no "Exception ignored" from the noexcept fast path
def test_functional_errors_name_the_parameter():
    data = np.ones((3, 4), np.float32)
    idx = np.zeros((3, 4), np.int64)
    with pytest.raises(ValueError, match="indices: expected rank 2"):
        synet.gather_elements(data, np.zeros(3, np.int64), 0)
    # C-ordered, channels-last, row-broadcast indices: an axis beyond a C long too (it raised OverflowError)
    for index in (idx, laid_out(idx, (1, 0)), np.broadcast_to(idx[:, :1], idx.shape)):
        for axis in (2, -3, 2**31, -2**31 - 1, 2**63, -2**70):
            with pytest.raises(ValueError, match=f"^axis: expected an int in \\[-2, 2\\), got {axis}$"):
                synet.gather_elements(data, index, axis)
    with pytest.raises(TypeError, match="axis: expected an int"):
        synet.gather_elements(data, idx, 1.0)
    with pytest.raises(ValueError, match="indices: size 5 of dimension 0 exceeds data's 3"):
        synet.gather_elements(data, np.zeros((5, 4), np.int64), 1)
    with pytest.raises(ValueError, match="indices: expected an integer dtype, got float32"):
        synet.gather_elements(data, idx.astype(np.float32), 0)
    with pytest.raises(ValueError, match="indices: expected an integer dtype, got bool"):
        synet.gather_elements(data, idx.astype(bool), 0)
    with pytest.raises(ValueError, match="data: expected a 1-, 2-, 4- or 8-byte dtype, got complex128"):
        synet.gather_elements(data.astype(np.complex128), idx, 0)
    with pytest.raises(ValueError, match="data: expected a 1-, 2-, 4- or 8-byte dtype, got object"):
        synet.gather_elements(data.astype(object), idx, 0)
    with pytest.raises(ValueError, match="data: expected an array of rank >= 1"):
        synet.gather_elements(np.float32(1), np.int64(0), 0)
    with pytest.raises(ValueError, match="out: expected shape"):
        synet.gather_elements(data, idx, 0, out=np.empty((4, 3), np.float32))
    with pytest.raises(ValueError, match="out: must not overlap"):
        synet.gather_elements(data, idx, 0, out=data)
    read_only = np.empty((3, 4), np.float32)
    read_only.flags.writeable = False
    bad_outs = [(np.empty((3, 4), np.float64), "out: expected dtype float32, got float64"),
                (read_only, "out: expected a writeable C-contiguous array"),
                (np.empty((4, 3), np.float32).T, "out: expected a writeable C-contiguous array"),
                (idx.view(np.float32).reshape(-1)[:12].reshape(3, 4), "out: must not overlap data or indices")]
    for out, message in bad_outs:
        with pytest.raises(ValueError, match="^" + re.escape(message)):
            synet.gather_elements(data, idx, 0, out=out)
    with pytest.raises(TypeError, match="out: expected a numpy.ndarray"):
        synet.gather_elements(data, idx, 0, out=[[0] * 4] * 3)


@given(st.data())
def test_hypothesis_functional(data):
    ndim = data.draw(st.integers(1, 4), label="ndim")
    shape = tuple(data.draw(st.lists(st.integers(0, 6), min_size=ndim, max_size=ndim), label="shape"))
    axis = data.draw(st.integers(-ndim, ndim - 1), label="axis")
    dtype = data.draw(st.sampled_from(DATA_DTYPES), label="dtype")
    index_dtype = data.draw(st.sampled_from([np.int32, np.int64, np.int16, np.uint8]), label="index_dtype")
    ishape = shape if data.draw(st.booleans(), label="index of data's shape") else \
        tuple(data.draw(st.integers(0, n), label="ishape") if d != axis % ndim else data.draw(st.integers(0, 7))
              for d, n in enumerate(shape))
    n = shape[axis]
    lo = 0 if np.dtype(index_dtype).kind == "u" else -n - 2
    indices = np.array(data.draw(st.lists(st.integers(lo, n + 2), min_size=int(np.prod(ishape)),
                                          max_size=int(np.prod(ishape))), label="indices"),
                       dtype=index_dtype).reshape(ishape)
    rng = np.random.default_rng(0)
    source = random_data(rng, shape, dtype)
    threads = data.draw(st.sampled_from([1, 2]), label="threads")
    # either operand may lie in memory in another order of its axes (an NHWC tensor seen as NCHW)
    order = tuple(data.draw(st.permutations(range(ndim)), label="memory order"))
    laid = data.draw(st.sampled_from(["none", "source", "indices", "both"]), label="laid out")
    given_source = laid_out(source, order) if laid in ("source", "both") else source
    given_indices = laid_out(indices, order) if laid in ("indices", "both") else indices
    valid = ((indices.astype(np.int64) >= -n) & (indices.astype(np.int64) < n)).all()
    if valid:
        result = synet.gather_elements(given_source, given_indices, axis, n_threads=threads)
        np.testing.assert_array_equal(np.ascontiguousarray(result).view(np.uint8),
                                      reference(source, indices.astype(np.int64), axis).view(np.uint8))
    else:
        with pytest.raises(IndexError, match=f"axis {axis % ndim} with size {n}"):
            synet.gather_elements(given_source, given_indices, axis, n_threads=threads)


@given(st.data())
def test_hypothesis_context(data):
    outer = tuple(data.draw(st.lists(st.integers(0, 4), max_size=3), label="outer"))
    src_count, inner, idx_count = (data.draw(st.integers(0, 9), label=name) for name in ("src", "inner", "idx"))
    dtype = data.draw(st.sampled_from([np.float32, BF16, np.uint8, np.float64]), label="dtype")
    index_dtype = data.draw(st.sampled_from([np.int32, np.int64]), label="index_dtype")
    repeat_first = data.draw(st.booleans(), label="repeat_first")
    n_idx = int(np.prod(outer)) * idx_count * inner
    shape = (*outer, idx_count, inner)
    values = np.array(data.draw(st.lists(st.integers(-src_count - 1, src_count), min_size=n_idx, max_size=n_idx)),
                      np.int64).reshape(shape)
    if repeat_first and outer:
        values = np.ascontiguousarray(np.broadcast_to(values[:1], shape))
    idx = values.astype(index_dtype)
    src = random_data(np.random.default_rng(1), (*outer, src_count, inner), dtype)
    gather = synet.GatherElements(dtype, index_dtype, True, 1, list(outer), src_count, inner, idx_count)
    valid = ((values >= -src_count) & (values < src_count)).all()
    if not valid:
        with pytest.raises(IndexError, match="out of range"):
            gather.forward(src, idx)
        with pytest.raises(IndexError, match="out of range"):
            gather.set_index(idx)
        return
    expected = reference(src, values, len(outer))
    np.testing.assert_array_equal(gather.forward(src, idx).view(np.uint8), expected.view(np.uint8))
    gather.set_index(idx)
    np.testing.assert_array_equal(gather.forward(src, None, n_threads=2).view(np.uint8), expected.view(np.uint8))


def test_set_index_keeps_only_the_slices_that_differ():
    rng = np.random.default_rng(4)
    outer, src_count, inner, idx_count = (16, 64), 512, 1, 512
    idx = np.ascontiguousarray(np.broadcast_to(rng.integers(-512, 512, (1, 64, 512, 1)), (16, 64, 512, 1)))
    src = rng.standard_normal((16, 64, 512, 1)).astype(np.float32)
    gather = synet.GatherElements("float32", "int64", True, 1, outer, src_count, inner, idx_count)
    assert gather.internal_buffer_size() == 0
    gather.set_index(idx)
    assert gather.internal_buffer_size() == 64 * 512 * 4  # one repeated slice, int32 offsets
    expected = reference(src, idx, 2)
    np.testing.assert_array_equal(gather.forward(src), expected)
    np.testing.assert_array_equal(gather.forward(src, idx), expected)
    # re-init with the same arguments keeps the analysed index; other arguments drop it
    gather.init("float32", "int64", True, 1, outer, src_count, inner, idx_count)
    assert gather.internal_buffer_size() > 0
    gather.init("float32", "int64", True, 1, (16, 64), src_count, inner, 256)
    assert gather.internal_buffer_size() == 0
    with pytest.raises(RuntimeError, match="no index was set"):
        gather.forward(src)


def test_set_index_with_inner_and_no_repeat():
    rng = np.random.default_rng(5)
    src = rng.standard_normal((3, 7, 5)).astype(np.float32)
    idx = rng.integers(-7, 7, (3, 4, 5)).astype(np.int32)
    gather = synet.GatherElements("f32", "i32", True, 2, [3], 7, 5, 4)
    gather.set_index(idx)
    assert gather.internal_buffer_size() == idx.size * 4 and gather.index_users == 2
    np.testing.assert_array_equal(gather.forward(src), reference(src, idx, 1))
    assert gather.forward(src).shape == idx.shape


@pytest.mark.parametrize("chunk", [1, 4, 5, 13, 60, 1 << 20])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_set_index_in_chunks(monkeypatch, chunk, index_dtype):
    """set_index analyses the index a chunk of ANALYSE_CHUNK elements (whole rows of inner) at a time: chunk
    edges inside a row, a slice and across slices give the same offsets, kept slices and first bad position."""
    monkeypatch.setattr(synet._gather_plan, "ANALYSE_CHUNK", chunk)
    rng = np.random.default_rng(chunk)
    outer, src_count, inner, idx_count = (4, 3), 6, 5, 2
    src = rng.standard_normal((*outer, src_count, inner)).astype(np.float32)
    one = rng.integers(-src_count, src_count, (1, 1, idx_count, inner))
    negated = np.where(one < 0, one + src_count, one - src_count)   # the same indices, the other sign
    # every slice alike (one kept, though every other one is written negated), a repeated first outer dim (3
    # kept), none repeated
    for kind, idx, kept in (("alike", np.concatenate([one, negated] * 6).reshape(4, 3, idx_count, inner), 1),
                            ("first dim repeats", np.broadcast_to(rng.integers(-6, 6, (1, 3, 2, 5)), (4, 3, 2, 5)), 3),
                            ("none", rng.integers(-src_count, src_count, (4, 3, idx_count, inner)), 12)):
        idx = np.ascontiguousarray(idx, index_dtype)
        gather = synet.GatherElements("float32", index_dtype, True, 1, list(outer), src_count, inner, idx_count)
        gather.set_index(idx)
        assert gather.internal_buffer_size() == kept * idx_count * inner * 4, kind
        np.testing.assert_array_equal(gather.forward(src), reference(src, idx, 2))
        for position in (0, 9, 10, idx.size - 1):
            bad = idx.copy()
            bad.reshape(-1)[position] = -src_count - 1
            with pytest.raises(IndexError, match=rf"^idx: index -7 at flat position {position} is out of range"):
                gather.set_index(bad)


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_set_index_temporaries_stay_small(index_dtype):
    """set_index keeps int32 offsets and needs a chunk's temporaries beside them, not copies of the whole index
    (whole-array NumPy peaked at 6.25x an int32 index's bytes, 3.1x an int64 one's)."""
    tracemalloc = pytest.importorskip("tracemalloc")
    n = 1000
    idx = np.random.default_rng(0).integers(-n, n, size=(8, n, 1024)).astype(index_dtype)
    gather = synet.GatherElements("float32", index_dtype, True, 1, [8], n, 1024, n)
    tracemalloc.start()
    try:
        gather.set_index(idx)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= 4 * idx.size + 32 * synet._gather_plan.ANALYSE_CHUNK, peak / idx.nbytes


@pytest.mark.parametrize("dtype", [np.uint8, BF16, np.float32, np.float64])
@pytest.mark.parametrize("src_count, idx_count", [(37, 37), (300, 45), (2048, 4000)])
def test_set_index_offsets_every_width(dtype, src_count, idx_count):
    """The set_index offsets path (two steps of 16 per iteration, next slice prefetched when it is small):
    every element width, tails of 5 / 13 / 0 elements, small and large slices, 1 and 2 threads."""
    rng = np.random.default_rng(src_count)
    outer = (3, 5)
    idx = np.ascontiguousarray(np.broadcast_to(rng.integers(-src_count, src_count, (1, 5, idx_count, 1)),
                                               (*outer, idx_count, 1)))
    src = random_data(rng, (*outer, src_count, 1), dtype)
    expected = reference(src, idx, 2)
    gather = synet.GatherElements(dtype, np.int64, True, 1, list(outer), src_count, 1, idx_count)
    gather.set_index(idx)
    for n_threads in (1, 2):
        np.testing.assert_array_equal(gather.forward(src, n_threads=n_threads).view(np.uint8),
                                      expected.view(np.uint8))
        np.testing.assert_array_equal(gather.forward(src, idx, n_threads=n_threads).view(np.uint8),
                                      expected.view(np.uint8))


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_small_slices_grouped_per_task(dtype, index_dtype):
    """Slices of 300 elements run 13 to a task (77 tasks, the last one of 12 slices): the same bits at 1 and
    2 threads as NumPy, with and without set_index, and an out-of-range index in the last slice is reported."""
    rng = np.random.default_rng(8)
    outer, src_count, idx_count = 1000, 50, 300
    src = random_data(rng, (outer, src_count, 1), dtype)
    idx = rng.integers(-src_count, src_count, (outer, idx_count, 1)).astype(index_dtype)
    expected = reference(src, idx, 1)
    gather = synet.GatherElements(dtype, index_dtype, True, 1, [outer], src_count, 1, idx_count)
    for n_threads in (1, 2):
        np.testing.assert_array_equal(gather.forward(src, idx, n_threads=n_threads), expected)
    gather.set_index(idx)
    for n_threads in (1, 2):
        np.testing.assert_array_equal(gather.forward(src, n_threads=n_threads), expected)
    idx[-1, -1, 0] = src_count
    with pytest.raises(IndexError, match=f"index {src_count} at flat position {idx.size - 1} is out of range"):
        gather.forward(src, idx, n_threads=2)


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.uint8])
def test_bfloat16_raw_bits_and_threads(dtype):
    rng = np.random.default_rng(6)
    src = random_data(rng, (8, 1000, 64), dtype)
    idx = rng.integers(-1000, 1000, (8, 900, 64))
    gather = synet.GatherElements(dtype, np.int64, False, 1, [8], 1000, 64, 900)
    one = gather.forward(src, idx, n_threads=1)
    two = gather.forward(src, idx, n_threads=2)
    np.testing.assert_array_equal(one.view(np.uint8), two.view(np.uint8))
    np.testing.assert_array_equal(one.view(np.uint8), reference(src, idx, 1).view(np.uint8))
    if dtype == BF16:   # SPEC section 2: a result synet allocates is bfloat16; a caller's uint16 dst gets the bits
        from_bits = gather.forward(src.view(np.uint16), idx)
        assert from_bits.dtype == BF16   # (was uint16: the dtype of src)
        np.testing.assert_array_equal(from_bits.view(np.uint16), one.view(np.uint16))
        raw = np.empty(one.shape, np.uint16)
        assert gather.forward(src, idx, raw) is raw
        np.testing.assert_array_equal(raw, one.view(np.uint16))
        # the functional form: bfloat16 data into a uint16 out (was "out: expected dtype bfloat16, got uint16")
        for index in (idx, np.broadcast_to(idx[:1, :, :1], (8, 900, 1))):   # the general and the row paths
            expected = synet.gather_elements(src, index, 1)
            raw = np.empty(index.shape, np.uint16)
            assert synet.gather_elements(src, index, 1, out=raw) is raw
            np.testing.assert_array_equal(raw, expected.view(np.uint16))


def test_one_context_from_many_threads():
    rng = np.random.default_rng(7)
    gather = synet.GatherElements("float32", "int64", True, 4, [6], 300, 40, 200)
    idx = rng.integers(-300, 300, (6, 200, 40))
    gather.set_index(idx)
    sources = [rng.standard_normal((6, 300, 40)).astype(np.float32) for _ in range(8)]
    expected = [reference(s, idx, 1) for s in sources]
    failures = []
    barrier = threading.Barrier(4)

    def worker(offset):
        barrier.wait()
        for round_ in range(25):
            k = (offset + round_) % len(sources)
            try:
                out = gather.forward(sources[k], None if round_ % 2 else idx)
            except Exception as error:   # an exception in a thread would not fail the test by itself
                failures.append((k, repr(error)))
                continue
            if not np.array_equal(out, expected[k]):
                failures.append(k)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


def test_set_index_does_not_undo_an_init_made_meanwhile(monkeypatch):
    """set_index analyses its index without holding the GIL throughout (NumPy releases it): an init from
    another thread in between was silently undone (the old geometry came back with the index). Now set_index
    raises, as Deconvolution16b.set_params does, and the init stands. (Another thread's init is simulated
    between the analysis and the store.)"""
    from synet import _gather_plan
    gather = synet.GatherElements("float32", "int32", True, 1, [2], 4, 1, 3)
    analyse = _gather_plan.analyse_index

    def analyse_then_init(geometry, idx):
        result = analyse(geometry, idx)
        gather.init("uint8", "int32", True, 7, [2], 4, 1, 3)
        return result

    monkeypatch.setattr(_gather_plan, "analyse_index", analyse_then_init)
    with pytest.raises(RuntimeError, match=r"^GatherElements.set_index: the context was re-initialised during "
                                           r"the call$"):
        gather.set_index(np.zeros(6, np.int32))
    assert gather.index_users == 7 and gather.internal_buffer_size() == 0
    src = np.arange(8, dtype=np.uint8)
    np.testing.assert_array_equal(gather.forward(src, np.array([0, 2, 1, 3, 1, 0], np.int32)),
                                  src.reshape(2, 4)[[[0], [1]], [[0, 2, 1], [3, 1, 0]]].ravel())


def test_context_errors():
    gather = synet.GatherElements()
    assert not gather.enable()
    src = np.zeros(8, np.float32)
    idx = np.zeros(6, np.int32)
    with pytest.raises(RuntimeError, match="call init"):
        gather.forward(src, idx)
    with pytest.raises(RuntimeError, match="call init"):
        gather.set_index(idx)
    with pytest.raises(ValueError, match="index_type: expected INT32 or INT64"):
        gather.init("f32", "f32", False, 1, [2], 4, 1, 3)
    with pytest.raises(ValueError, match="data_type"):
        gather.init(np.complex128, "i32", False, 1, [2], 4, 1, 3)
    with pytest.raises(ValueError, match=r"data_type: expected a DataType.*got None"):   # (NumPy: float64)
        gather.init(None, "i32", False, 1, [2], 4, 1, 3)
    for bad in (",", "i4,,", "(", ("f4", ",")):   # np.dtype raises SyntaxError / ValueError / TypeError on these
        with pytest.raises(ValueError, match="data_type"):
            gather.init(bad, "i32", False, 1, [2], 4, 1, 3)
    with pytest.raises(ValueError, match="index_users: expected an int >= 1"):
        gather.init("f32", "i32", False, 0, [2], 4, 1, 3)
    with pytest.raises(ValueError, match="src_count: expected an int >= 0"):
        gather.init("f32", "i32", False, 1, [2], -4, 1, 3)
    with pytest.raises(TypeError, match="outer"):
        gather.init("f32", "i32", False, 1, ["a"], 4, 1, 3)
    with pytest.raises(ValueError, match="overflow"):
        gather.init("f32", "i32", False, 1, [2**40, 2**30], 4, 1, 3)
    # a huge count beside a zero one passed the size checks and raised OverflowError converting it to a C size
    for args, name in (((2**70, 0, 3), "src_count"), ((3, 0, 2**70), "idx_count"), ((3, 2**63, 3), "inner")):
        with pytest.raises(ValueError, match=rf"{name}: expected an int < 2\*\*63, got {args[args.index(max(args))]}"):
            gather.init("f32", "i32", False, 1, [0] if name == "inner" else [2], *args)
    with pytest.raises(ValueError, match=r"outer: expected an int < 2\*\*63"):
        gather.init("f32", "i32", False, 1, [2**70, 0], 4, 1, 3)
    gather.init("f32", "i32", False, 1, [2], 4, 1, 3)
    with pytest.raises(RuntimeError, match="index_const=False"):
        gather.set_index(idx)
    with pytest.raises(RuntimeError, match="no index was set"):
        gather.forward(src)
    with pytest.raises(TypeError, match="src: expected a numpy.ndarray"):
        gather.forward(list(src), idx)
    with pytest.raises(ValueError, match="src: expected dtype float32, got float64"):
        gather.forward(src.astype(np.float64), idx)
    with pytest.raises(ValueError, match="src: expected 8 elements, got 7"):
        gather.forward(src[:7], idx)
    with pytest.raises(ValueError, match="src: expected a C-contiguous"):
        gather.forward(np.zeros(16, np.float32)[::2], idx)
    with pytest.raises(ValueError, match="idx: expected dtype int32, got int64"):
        gather.forward(src, idx.astype(np.int64))
    with pytest.raises(ValueError, match="dst: expected a writeable"):
        ro = np.zeros(6, np.float32)
        ro.flags.writeable = False
        gather.forward(src, idx, ro)
    with pytest.raises(ValueError, match="dst: must not overlap"):
        both = np.zeros(8, np.float32)
        synet.GatherElements("f32", "i32", False, 1, [2], 4, 1, 4).forward(both, np.zeros(8, np.int32), both)
    gather.clear()
    assert not gather.enable()
    with pytest.raises(ValueError, match="index_users"):
        synet.GatherElements("f32", "i32", True, -1, [2], 4, 1, 3)


def test_read_only_inputs_are_fine():
    src = np.arange(8, dtype=np.float32)
    idx = np.array([0, 2, 1, 3, 1, 0], np.int32)
    src.flags.writeable = False
    idx.flags.writeable = False
    gather = synet.GatherElements("f32", "i32", True, 1, [2], 4, 1, 3)
    np.testing.assert_array_equal(gather.forward(src, idx), [0, 2, 1, 7, 5, 4])
    gather.set_index(idx)
    np.testing.assert_array_equal(gather.forward(src), [0, 2, 1, 7, 5, 4])
    np.testing.assert_array_equal(synet.gather_elements(src.reshape(2, 4), idx.reshape(2, 3), 1).ravel(),
                                  [0, 2, 1, 7, 5, 4])


def test_matches_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    rng = np.random.default_rng(8)
    data = rng.standard_normal((3, 9, 4)).astype(np.float32)
    indices = rng.integers(-9, 9, (3, 5, 4)).astype(np.int64)
    graph = helper.make_graph(
        [helper.make_node("GatherElements", ["data", "indices"], ["out"], axis=1)], "g",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, list(data.shape)),
         helper.make_tensor_value_info("indices", TensorProto.INT64, list(indices.shape))],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, list(indices.shape))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"data": data, "indices": indices})[0]
    np.testing.assert_array_equal(synet.gather_elements(data, indices, 1), expected)
    assert onnx is not None


def test_matches_torch_gather():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(9)
    data = rng.standard_normal((4, 6, 5)).astype(np.float32)
    indices = rng.integers(0, 5, (3, 6, 2))
    expected = torch.gather(torch.from_numpy(data), 2, torch.from_numpy(indices)).numpy()
    np.testing.assert_array_equal(synet.gather_elements(data, indices, 2), expected)


HOSTILE_DTYPES = [np.float32, np.float64, np.uint8, np.int32, np.int64, np.int8, np.complex64, np.bool_, BF16, object,
                  np.uint16, np.float16, "U3", [("a", np.int32)]]


def hostile_arrays():
    shapes = st.lists(st.integers(0, 5), max_size=4).map(tuple)

    def build(args):
        dtype, shape, mode, fill = args
        array = np.zeros(shape, dtype=dtype) if dtype is not object else np.empty(shape, object)
        if np.dtype(dtype).kind == "i":
            array[...] = fill
        elif np.dtype(dtype).kind == "u":
            array[...] = abs(fill)
        if mode == "strided" and array.ndim:
            array = np.repeat(array, 2, axis=-1)[..., ::2]
        elif mode == "readonly":
            array.flags.writeable = False
        elif mode == "list":
            return array.tolist()
        return array

    return st.tuples(st.sampled_from(HOSTILE_DTYPES), shapes, st.sampled_from(["plain", "strided", "readonly", "list"]),
                     st.integers(-8, 8)).map(build)


@given(hostile_arrays(), hostile_arrays(), st.one_of(st.integers(-6, 6), st.none(), st.just(1.5), st.just("0")),
       st.one_of(st.none(), hostile_arrays()))
def test_hostile_functional_raises_only_python_errors(data, indices, axis, out):
    result = outcome(synet.gather_elements, data, indices, axis, out=out, _accepted=PYTHON_ERRORS)
    if failed(result):
        return
    expected = reference(np.asarray(data), np.asarray(indices).astype(np.int64), axis)
    np.testing.assert_array_equal(np.asarray(result).view(np.uint8), expected.view(np.uint8))


@given(st.tuples(*(st.sampled_from([None, 0, 1, 2, 3, -1, "f32", "i64", "bf16", np.float64, 2**62, 1.5, [2], (3, 0)])
                   for _ in range(8))),
       hostile_arrays(), hostile_arrays(), st.one_of(st.none(), hostile_arrays()))
def test_hostile_context_raises_only_python_errors(init_args, src, idx, dst):
    gather = synet.GatherElements()
    for call in (lambda: gather.init(*init_args), lambda: gather.set_index(idx),
                 lambda: gather.forward(src, idx, dst), lambda: gather.forward(src, None, dst),
                 gather.internal_buffer_size, gather.enable):
        outcome(call, _accepted=PYTHON_ERRORS)


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float32, np.int64])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("inner", [2, 3, 4, 5, 7, 15, 16, 17, 31])
def test_short_rows_gather_as_one_run(dtype, index_dtype, inner):
    """A task's rows of `inner` < 32 elements go as one run, 32 elements a step, each element's column
    k mod inner (at every level: tests/test_cpu_levels.py): the reference's values with negatives, on 1 and 2
    threads; one index out of range gives 0 there and leaves its neighbours (in the same step) gathered."""
    rng = np.random.default_rng(inner)
    outer, src_count, idx_count = 3, 50, 333   # 999 * inner elements: many steps whose columns wrap mid-step
    data = random_data(rng, (outer, src_count, inner), dtype)
    indices = rng.integers(-src_count, src_count, (outer, idx_count, inner)).astype(index_dtype)
    gather = synet.GatherElements(dtype, index_dtype, False, 1, [outer], src_count, inner, idx_count)
    for n_threads in (1, 2):
        np.testing.assert_array_equal(gather.forward(data, indices, n_threads=n_threads), reference(data, indices, 1))
    position = (1, idx_count // 3, inner // 2)
    indices[position] = src_count
    expected = reference(data, np.where(indices == src_count, 0, indices), 1)
    expected[position] = 0
    dst = np.full(indices.shape, 7, dtype)
    with pytest.raises(IndexError, match=rf"index {src_count} at flat position \d+ is out of range"):
        gather.forward(data, indices, dst, n_threads=1)
    np.testing.assert_array_equal(dst, expected)


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("inner", [1, 2, 4, 8, 16, 32, 64, 96, 256, 3, 48])
def test_rows_with_every_index_of_a_step_in_range(dtype, index_dtype, inner):
    """A flat index (over 256 rows: no register table) and rows of 4- and 8-byte elements whose `inner` divides 32
    or is a multiple of it load a step of 32 elements straight from the index when all 32 are in [0, count)
    (AVX-512; rows from a run's start up to the first step that is not, then the vector index path, which 3 and
    48 take throughout): the reference's values where every step is such, where some steps hold negatives, and
    with one index out of range (0 there, its step's neighbours gathered, the error raised), on 1 and 2
    threads."""
    rng = np.random.default_rng(inner)
    outer, src_count, idx_count = 3, 300, max(2, 2000 // inner)
    data = random_data(rng, (outer, src_count, inner), dtype)
    indices = rng.integers(0, src_count, (outer, idx_count, inner)).astype(index_dtype)
    indices.reshape(-1)[::97] -= src_count   # a negative in every fourth step or so
    indices.reshape(-1)[: indices.size // 2] %= src_count   # none in the first half
    gather = synet.GatherElements(dtype, index_dtype, False, 1, [outer], src_count, inner, idx_count)
    for n_threads in (1, 2):
        np.testing.assert_array_equal(gather.forward(data, indices, n_threads=n_threads), reference(data, indices, 1))
    position = (1, idx_count // 4, inner - 1)
    indices[position] = src_count
    expected = reference(data, np.where(indices == src_count, 0, indices), 1)
    expected[position] = 0
    for n_threads in (1, 2):
        dst = np.full(indices.shape, 7, dtype)
        with pytest.raises(IndexError, match=rf"index {src_count} at flat position \d+ is out of range"):
            gather.forward(data, indices, dst, n_threads=n_threads)
        np.testing.assert_array_equal(dst, expected)


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("outer, src_count, inner, idx_count", [
    (2, 1024, 256, 1024),   # G3's slices: the 1-byte strip path (32-column strips, 32 KiB copies)
    (3, 7, 33, 700),        # a tail strip of 1 column
    (1, 7, 1000, 300),      # row blocks of 131 (int64) / 262 (int32) rows, the last one partial; 31 strips + 8
    (1, 1, 95, 1),          # one source row, tails of 31 columns
    (2, 1025, 64, 3),       # a slice too large for a strip copy: the row path
    (5, 300, 31, 40),       # inner below one strip: the row path
])
def test_one_byte_strips_match_reference(index_dtype, outer, src_count, inner, idx_count):
    """1-byte data with inner >= 32 gathers strip by strip: same values as NumPy for every geometry around its
    limits, negative indices, 1 and 2 threads, and out-of-range indices still reported."""
    rng = np.random.default_rng(outer * 1000 + inner)
    data = rng.integers(0, 256, (outer, src_count, inner), dtype=np.uint8)
    indices = rng.integers(-src_count, src_count, (outer, idx_count, inner)).astype(index_dtype)
    expected = reference(data, indices, 1)
    gather = synet.GatherElements("u8", index_dtype, False, 1, [outer], src_count, inner, idx_count)
    for n_threads in (1, 2):
        np.testing.assert_array_equal(gather.forward(data, indices, n_threads=n_threads), expected)
        np.testing.assert_array_equal(synet.gather_elements(data.view(np.int8), indices, 1, n_threads=n_threads),
                                      expected.view(np.int8))
    # out of range in the first strip (a whole one) and in the last column (a tail strip where inner % 32):
    # reported, zeros there, every other element gathered
    bad = [(outer - 1, idx_count // 2, 0), (outer - 1, idx_count // 2, inner - 1), (0, idx_count - 1, 0)]
    for position in bad:
        indices[position] = src_count
    expected = reference(data, np.where(indices == src_count, 0, indices), 1)
    for position in bad:
        expected[position] = 0
    for n_threads in (1, 2):
        dst = np.full(indices.shape, 7, np.uint8)
        with pytest.raises(IndexError, match=rf"index {src_count} at flat position \d+ is out of range"):
            gather.forward(data, indices, dst, n_threads=n_threads)
        np.testing.assert_array_equal(dst, expected)
    with pytest.raises(IndexError, match=f"= {src_count} is out of range for axis 1 with size {src_count}"):
        synet.gather_elements(data, indices, 1)


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("dtype, outer, src_count, inner, idx_count", [
    (np.float32, 2, 1024, 256, 1024),  # G1's slices: 2- to 8-byte elements strip by strip (128 KiB copies)
    (np.float32, 1, 1024, 70, 700),    # strips of 32, 32 and a tail of 6 columns
    (np.int64, 3, 512, 40, 300),       # 8-byte elements, 8 + 32-column strips
    (np.float16, 1, 2048, 33, 1024),   # 2-byte elements, a tail strip of 1 column
    (np.float32, 1, 1024, 256, 100),   # too few index rows for a strip copy (count / 2 or more): the row path
    (np.float32, 1, 1025, 64, 600),    # a strip too large to copy: the row path
])
def test_wide_strips_match_reference(index_dtype, dtype, outer, src_count, inner, idx_count):
    """Elements of 2 to 8 bytes from a slice too large for L2 gather strip by strip from a copy of the strip
    (on the portable loop; tests/levels_probe.py compares it with AVX-512's rows): same values as NumPy,
    negative indices, 1 and 2 threads, and out-of-range indices still reported."""
    rng = np.random.default_rng(outer * 1000 + inner)
    data = random_data(rng, (outer, src_count, inner), dtype)
    indices = rng.integers(-src_count, src_count, (outer, idx_count, inner)).astype(index_dtype)
    expected = reference(data, indices, 1)
    for n_threads in (1, 2):
        np.testing.assert_array_equal(synet.gather_elements(data, indices, 1, n_threads=n_threads), expected)
    indices[-1, idx_count // 2, inner - 1] = -src_count - 1
    with pytest.raises(IndexError, match=f"= {-src_count - 1} is out of range for axis 1 with size {src_count}"):
        synet.gather_elements(data, indices, 1)


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float32, np.int64])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("inner", [1, 3])
@pytest.mark.parametrize("case", ["in range", "negative", "out of range", "beyond int32"])
def test_blocks_of_32_lanes(dtype, index_dtype, inner, case):
    """Elements go 32 lanes at a time (AVX-512): 4- and 8-byte ones by scalar loads straight from an index that
    is in range as it is, else (every size) through clamped offsets by vpgather or scalar loads
    (SYNET_VECTOR_GATHER; both run by test_cpu_levels.py). Blocks of 32 with a negative, an out-of-range and (int64) a
    beyond-int32 index among in-range ones, a tail of 5: the reference's values, zeros where out of range."""
    rng = np.random.default_rng(inner * 10 + len(case))
    src_count, idx_count = 40, 101   # 101 * inner: three or nine full blocks and a tail
    data = random_data(rng, (2, src_count, inner), dtype)
    indices = rng.integers(0, src_count, (2, idx_count, inner)).astype(index_dtype)
    position = (1, 40, inner - 1)
    if case == "negative":
        indices[position] = -3
    elif case == "out of range":
        indices[position] = src_count
    elif case == "beyond int32":
        if index_dtype == np.int32:
            pytest.skip("int64 indices only")
        indices[position] = 2**32 + 1   # wrapped to 1 by a 32-bit cut
    gather = synet.GatherElements(dtype, index_dtype, False, 1, [2], src_count, inner, idx_count)
    dst = np.full(indices.shape, 7, dtype)
    if case in ("in range", "negative"):
        gather.forward(data, indices, dst)
        np.testing.assert_array_equal(dst, reference(data, indices, 1))
        return
    with pytest.raises(IndexError, match="out of range"):
        gather.forward(data, indices, dst)
    expected = reference(data, np.where(indices == indices[position], 0, indices), 1)
    expected[position] = 0
    np.testing.assert_array_equal(dst, expected)


@pytest.mark.parametrize("src_count", [1, 5, 16, 31, 32, 33, 64, 100, 128, 200, 255, 256, 257])
@pytest.mark.parametrize("idx_count", [1, 17, 300])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("case", ["in range", "negative", "out of range", "set_index"])
def test_slices_held_in_registers(src_count, idx_count, index_dtype, case):
    """4-byte elements with inner 1 from slices of at most 256 are looked up among registers holding the
    slice (permutes and blends on the index's bits), a row with an index out of range again lane by lane;
    dst 16 bytes into a cache line, as NumPy's buffers are. The reference's values, zeros where out of range."""
    rng = np.random.default_rng(src_count * 1000 + idx_count)
    outer = 5
    data = rng.integers(-2**31, 2**31, (outer, src_count, 1)).astype(np.int32)
    low = -src_count if case == "negative" else 0
    indices = rng.integers(low, src_count, (outer, idx_count, 1)).astype(index_dtype)
    arena = np.full(outer * idx_count + 32, 7, np.int32)
    dst = arena[4:4 + outer * idx_count].reshape(indices.shape)
    if case == "set_index":
        indices[:] = indices[:1]
        gather = synet.GatherElements(np.int32, index_dtype, True, 1, [outer], src_count, 1, idx_count)
        gather.set_index(indices)
        gather.forward(data, None, dst)
    else:
        gather = synet.GatherElements(np.int32, index_dtype, False, 1, [outer], src_count, 1, idx_count)
        if case == "out of range":
            indices[3, idx_count // 2, 0] = src_count
            with pytest.raises(IndexError, match="out of range"):
                gather.forward(data, indices, dst)
            expected = reference(data, np.where(indices == src_count, 0, indices), 1)
            expected[3, idx_count // 2, 0] = 0
            np.testing.assert_array_equal(dst, expected)
            return
        gather.forward(data, indices, dst)
    np.testing.assert_array_equal(dst, reference(data, indices, 1))
    assert (arena[:4] == 7).all() and (arena[4 + outer * idx_count:] == 7).all()


@pytest.mark.parametrize("inner", [1, 3, 40])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_set_index_slices_split_over_tasks(inner, index_dtype):
    """A slice larger than one task (about 4096 outputs) goes in row blocks: with set_index's offsets and
    with the index itself, inner 1 (one flat run) and inner > 1, the reference's values."""
    rng = np.random.default_rng(inner)
    src_count, idx_count = 300, 9000 // inner + 7
    idx = rng.integers(-src_count, src_count, (3, idx_count, inner)).astype(index_dtype)
    data = rng.standard_normal((3, src_count, inner)).astype(np.float32)
    expected = reference(data, idx, 1)
    for index_const in (True, False):
        gather = synet.GatherElements("float32", index_dtype, index_const, 1, [3], src_count, inner, idx_count)
        if index_const:
            gather.set_index(idx)
        np.testing.assert_array_equal(gather.forward(data, None if index_const else idx), expected)
        np.testing.assert_array_equal(gather.forward(data, idx), expected)


@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.uint16, np.float64])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_misaligned_arrays(dtype, index_dtype):
    """Data, indices and out one byte off their element alignment (NumPy allows that; dask's frames give
    such arrays): the same elements (under tools/sanitize.sh, no misaligned access either)."""
    rng = np.random.default_rng(7)

    def misaligned(a):
        buf = np.zeros(a.nbytes + a.itemsize, np.uint8)[1:1 + a.nbytes]
        view = buf.view(a.dtype).reshape(a.shape)
        view[...] = a
        assert view.flags.aligned == (a.itemsize == 1)
        return view

    for shape, axis in (((64, 100), 0), ((4, 64, 33), 1), ((3, 1000), 1)):
        data = rng.integers(0, 200, shape).astype(dtype)
        idx = rng.integers(-shape[axis], shape[axis], shape).astype(index_dtype)
        expected = np.take_along_axis(data, np.where(idx < 0, idx + shape[axis], idx), axis)
        out = misaligned(np.zeros(shape, dtype))
        synet.gather_elements(misaligned(data), misaligned(idx), axis=axis, out=out)
        np.testing.assert_array_equal(out, expected)
