"""synet.dask (SPEC §11): the functional forms over dask arrays give the same bits as one synet call, on
dask's local schedulers and on a dask.distributed cluster of two worker processes (loopback only), also
when a worker is killed mid-computation; weights travel once per worker; bad arguments fail eagerly."""

import logging
import os
import re
import signal
import sys
import time

import ml_dtypes
import numpy as np
import pytest

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")

import synet  # noqa: E402
import synet.dask as sd  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)
TIMEOUT = 120   # seconds any one computation on the cluster may take


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and \
        np.array_equal(np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8))


def rng(seed=0):
    return np.random.default_rng(seed)


# ---------------------------------------------------------------------------------------------
# Workloads: (dask result, the one local synet call it must equal)


def conv_case(layout="NHWC", n=12, chunk=3, out_dtype=None, activation="identity", seed=1, src_dtype=np.float32,
              groups=1):
    r = rng(seed)
    cin, cout = 16, 8
    x = r.standard_normal((n, 9, 7, cin) if layout == "NHWC" else (n, cin, 9, 7)).astype(src_dtype)
    w = r.standard_normal((cin, 4, 4, cout // groups) if layout == "NHWC" else (cin, cout // groups, 4, 4))
    w = w.astype(np.float32)
    bias = r.standard_normal(cout).astype(np.float32)
    params = r.standard_normal(cout).astype(np.float32) if activation == "prelu" else None
    kwargs = dict(stride=2, padding=1, groups=groups, layout=layout, activation=activation,
                  activation_params=params, out_dtype=out_dtype)
    xd = da.from_array(x, chunks=(chunk, 4, 3, 5))   # chunked along every axis: the others become one chunk
    return sd.conv_transpose2d(xd, w, bias, **kwargs), synet.conv_transpose2d(x, w, bias, **kwargs)


def gather_case(dask_data=True, dask_indices=True, axis=1, seed=2, dtype=np.float32):
    r = rng(seed)
    data = (r.standard_normal((10, 12, 7)) * 100).astype(dtype)
    indices = r.integers(-12, 12, (10, 5, 6)) if axis == 1 else r.integers(-10, 10, (4, 12, 6))
    d = da.from_array(data, chunks=(3, 5, 4)) if dask_data else data
    i = da.from_array(indices, chunks=(4, 2, 4)) if dask_indices else indices
    return sd.gather_elements(d, i, axis=axis), synet.gather_elements(data, indices, axis=axis)


def qadd_case(b_kind="dask", per_axis=False, activation="hswish", seed=3, dst_dtype="u8"):
    r = rng(seed)
    a = r.integers(0, 256, (16, 6, 40)).astype(np.uint8)
    b = r.integers(-128, 128, (6, 1)).astype(np.int8) if b_kind != "full" else \
        r.integers(-128, 128, (16, 6, 40)).astype(np.int8)
    kwargs = dict(a_scale=0.031, a_zero=17, b_scale=0.047, b_zero=-5, dst_scale=0.05, dst_zero=100,
                  activation=activation, dst_dtype=dst_dtype)
    if per_axis:
        kwargs.update(a_scale=r.uniform(0.01, 0.05, 6), a_zero=r.integers(0, 256, 6))
    if activation == "prelu":
        kwargs["activation_params"] = r.uniform(-1, 1, 6).astype(np.float32)
    bd = b if b_kind == "numpy" else da.from_array(b, chunks=(2, 1) if b_kind == "dask" else (5, 4, 7))
    return sd.quantized_add(da.from_array(a, chunks=(5, 4, 9)), bd, **kwargs), synet.quantized_add(a, b, **kwargs)


CASES = {
    "conv nhwc": lambda: conv_case("NHWC"),
    "conv nchw bf16 out prelu": lambda: conv_case("NCHW", out_dtype="bf16", activation="prelu"),
    "conv bf16 in, grouped, ragged chunks": lambda: conv_case("NCHW", n=11, chunk=4, src_dtype=BF16, groups=2),
    "gather dask/dask": lambda: gather_case(True, True),
    "gather dask data, numpy indices": lambda: gather_case(True, False),
    "gather numpy data, dask indices": lambda: gather_case(False, True),
    "gather axis 0, sub-block, bf16": lambda: gather_case(True, True, axis=0, dtype=BF16),
    "qadd dask b broadcast": lambda: qadd_case("dask"),
    "qadd numpy b broadcast": lambda: qadd_case("numpy"),
    "qadd full dask b, other chunks": lambda: qadd_case("full"),
    "qadd per-axis, prelu": lambda: qadd_case("numpy", per_axis=True, activation="prelu", dst_dtype="f32"),
}


# ---------------------------------------------------------------------------------------------
# Local schedulers (fast)


@pytest.mark.parametrize("scheduler", ["threads", "sync"])
@pytest.mark.parametrize("name", list(CASES))
def test_local_schedulers_same_bits(name, scheduler):
    result, expected = CASES[name]()
    assert result.dtype == expected.dtype and result._meta.dtype == expected.dtype
    assert result.shape == expected.shape
    assert result.npartitions > 1
    assert same_bits(result.compute(scheduler=scheduler), expected)


def test_bfloat16_results_are_ml_dtypes():
    result, expected = CASES["conv nchw bf16 out prelu"]()
    assert result.dtype == BF16 and type(result._meta) is np.ndarray and result._meta.dtype == BF16
    assert result.compute(scheduler="threads").dtype == BF16


def test_unbatched_and_numpy_inputs():
    r = rng(4)
    x = r.standard_normal((6, 5, 5)).astype(np.float32)
    w = r.standard_normal((6, 3, 3, 3)).astype(np.float32)
    assert same_bits(sd.conv_transpose2d(x, w, stride=2).compute(), synet.conv_transpose2d(x, w, stride=2))
    data, idx = r.standard_normal((4, 5)), r.integers(0, 5, (4, 3))
    assert same_bits(sd.gather_elements(data, idx, axis=1).compute(), synet.gather_elements(data, idx, axis=1))
    a, b = r.integers(0, 256, (3, 4)).astype(np.uint8), r.integers(0, 256, (4,)).astype(np.uint8)
    assert same_bits(sd.quantized_add(a, b).compute(), synet.quantized_add(a, b))


def test_conv_degenerate_shapes():
    """No input channels (the output is act(bias)), no output channels, an empty batch: as one call."""
    r = rng(10)
    bias = r.standard_normal(3).astype(np.float32)
    cases = [(np.zeros((5, 0, 4, 4), np.float32), np.zeros((0, 3, 3, 3), np.float32), bias),
             (r.standard_normal((5, 2, 4, 4)).astype(np.float32), np.zeros((2, 0, 3, 3), np.float32), None),
             (np.zeros((0, 2, 4, 4), np.float32), r.standard_normal((2, 3, 3, 3)).astype(np.float32), bias)]
    for x, w, b in cases:
        kwargs = dict(stride=2, activation="relu")
        result = sd.conv_transpose2d(da.from_array(x, chunks=(2, 1, 2, 2)), w, b, **kwargs)
        assert same_bits(result.compute(scheduler="threads"), synet.conv_transpose2d(x, w, b, **kwargs))


def test_quantized_add_parameters_are_taken_when_the_graph_is_built():
    """The arguments are checked when the graph is built; the tasks must run with those values, not with what
    the caller's arrays and lists hold by the time the graph is computed."""
    a = da.from_array(np.full(4, 10, np.uint8), chunks=2)
    scale, slopes = np.array([1.0, 1.0, 1.0, 1.0]), [0.5]
    result = sd.quantized_add(a, np.zeros(4, np.uint8), a_scale=scale, axis=0, activation="prelu",
                              activation_params=slopes)
    scale[:] = 2.0
    slopes[0] = 0.25
    np.testing.assert_array_equal(result.compute(), [10, 10, 10, 10])


def test_quantized_add_chunks_below_and_above_the_lookup_table():
    """The whole array takes the lookup-table kernel, its chunks the computed one: the same bits."""
    r = rng(5)
    a = r.integers(0, 256, (8, 128, 256)).astype(np.uint8)
    b = r.integers(0, 256, (8, 128, 256)).astype(np.uint8)
    kwargs = dict(a_scale=0.0371, a_zero=3, b_scale=0.0213, b_zero=7, dst_scale=0.0173, dst_zero=5, activation="mish")
    assert synet.QuantizedAdd(a.shape, "u8", 0.0371, 3, b.shape, "u8", 0.0213, 7, "mish", None, "u8", 0.0173,
                              5).kernel.startswith("lookup")
    result = sd.quantized_add(da.from_array(a, chunks=(1, 16, 256)), da.from_array(b, chunks=(2, 64, 128)), **kwargs)
    assert same_bits(result.compute(scheduler="threads"), synet.quantized_add(a, b, **kwargs))


def test_chunking():
    """Batch chunks kept for the deconvolution; any non-axis chunks for gather and quantized add."""
    result, _ = CASES["conv nhwc"]()
    assert result.chunks[0] == (3, 3, 3, 3) and all(len(c) == 1 for c in result.chunks[1:])
    result, _ = CASES["gather dask/dask"]()
    assert result.chunks == ((4, 4, 2), (5,), (4, 2))
    result, _ = CASES["gather dask data, numpy indices"]()
    assert result.chunks == ((3, 3, 3, 1), (5,), (4, 2))
    result, _ = CASES["qadd dask b broadcast"]()
    assert result.chunks == ((5, 5, 5, 1), (4, 2), (9, 9, 9, 9, 4))
    result, _ = CASES["qadd per-axis, prelu"]()
    assert result.chunks == ((5, 5, 5, 1), (6,), (9, 9, 9, 9, 4))


def shared_keys(result):
    return [k for k in dict(result.__dask_graph__()) if isinstance(k, str) and k.startswith("synet-shared-")]


def test_one_shared_key_per_call():
    """The prepared context (or a NumPy operand) is one graph key every chunk task depends on; the graph
    holds it once, as the pickle of the context (BF16 weights: half the float32 bytes)."""
    result, _ = conv_case(n=40, chunk=2)
    keys = shared_keys(result)
    assert len(keys) == 1
    graph = dict(result.__dask_graph__())
    shared = shared_of(result)
    assert isinstance(shared, sd._Shared) and shared.nbytes < 16 * 4 * 4 * 8 * 4 // 2 + 4096
    dependents = [k for k in graph if keys[0] in dask.core.get_dependencies(graph, k)]
    assert len(dependents) == 20
    for name in ("gather dask data, numpy indices", "qadd numpy b broadcast"):
        assert len(shared_keys(CASES[name]()[0])) == 1


def shared_of(result):
    shared = dict(result.__dask_graph__())[shared_keys(result)[0]]
    return getattr(shared, "value", shared)   # a DataNode in newer dask


def test_process_keeps_its_last_four_contexts():
    """A copy of a context's key arriving after the first one is gone (the scheduler sent it again)
    reuses the context built here, while it is among the last four; a NumPy operand's key is not kept."""
    import gc
    import pickle

    def arrives(shared):   # what a worker holds: its own copy of the key's bytes, unpickled on use
        return pickle.loads(pickle.dumps(shared)).value

    first = shared_of(conv_case(n=6, chunk=2, seed=31)[0])
    others = [shared_of(conv_case(n=6, chunk=2, seed=32 + i)[0]) for i in range(4)]
    built = sd._BUILT[first.token]
    context = arrives(first)
    gc.collect()
    assert arrives(first) is context and sd._BUILT[first.token] == built + 1
    del context
    for other in others[:3]:
        arrives(other)
    gc.collect()
    assert sd._BUILT[first.token] == built + 1 and arrives(first) is not None
    assert sd._BUILT[first.token] == built + 1   # still among the last four
    for other in others:
        arrives(other)
    gc.collect()
    arrives(first)
    assert sd._BUILT[first.token] == built + 2   # four others since: unpickled again
    operand = shared_of(CASES["qadd numpy b broadcast"]()[0])
    before = sd._BUILT[operand.token]
    arrives(operand)
    gc.collect()
    arrives(operand)
    assert sd._BUILT[operand.token] == before + 2


def test_1d_and_3d_graphs_are_snapshots_checked_when_made():
    """The 1-D and 3-D forms kept the caller's lists and arrays in the graph (a PRELU slope array or a stride list
    changed after the graph was made changed the result, and its shape from the graph's), and raised a wrong
    bias, a bool weight or padding that leaves no output only at compute time."""
    xn = np.random.default_rng(0).standard_normal((4, 2, 3)).astype(np.float32)
    x = da.from_array(xn, chunks=(2, -1, -1))
    w = np.ones((2, 2, 2), np.float32)
    slopes, stride = np.array([0.5, 0.25], np.float32), [2]
    y = sd.conv_transpose1d(x, w, stride=stride, activation="prelu", activation_params=slopes)
    expected = synet.conv_transpose1d(xn, w, stride=2, activation="prelu", activation_params=slopes)
    slopes[:] = [-7.0, 9.0]
    stride[0] = 3
    assert same_bits(y.compute(scheduler="sync"), expected) and y.shape == expected.shape
    x3 = da.from_array(np.ones((4, 1, 2, 2, 2), np.float32), chunks=(2, -1, -1, -1, -1))
    w3 = np.ones((1, 1, 3, 3, 3), np.float32)
    with pytest.raises(ValueError, match=r"bias: expected 1 elements \(dstC\), got 2"):
        sd.conv_transpose3d(x3, w3, np.ones(2, np.float32))
    with pytest.raises(ValueError, match="weight: expected real numbers, got dtype bool"):
        sd.conv_transpose1d(x, w.astype(bool))
    with pytest.raises(ValueError, match="padding: .* leaves an output of"):
        sd.conv_transpose3d(x3, w3, padding=(0, 0, 3))


def test_the_record_of_unpickled_keys_is_bounded():
    """The per-process count of unpickled keys (kept for the tests above) grew by one token per call for as long
    as the process lived (~110 bytes a call: a worker's memory grew with every new set of weights)."""
    import pickle
    for i in range(sd._BUILT_TOKENS + 50):
        assert sd._Shared(f"bounded-{i}", pickle.dumps(np.zeros(1)), False).value.shape == (1,)
    assert len(sd._BUILT) <= sd._BUILT_TOKENS
    assert sd._BUILT[f"bounded-{sd._BUILT_TOKENS + 49}"] == 1 and "bounded-0" not in sd._BUILT


def test_numpy_operand_is_a_snapshot():
    """A NumPy operand is pickled into the graph when it is made: changing it afterwards changes nothing,
    on every scheduler alike."""
    r = rng(11)
    a = r.integers(0, 256, (6, 4)).astype(np.uint8)
    b = r.integers(0, 256, (4,)).astype(np.uint8)
    expected = synet.quantized_add(a, b)
    result = sd.quantized_add(da.from_array(a, chunks=2), b)
    b[:] = 0
    assert same_bits(result.compute(scheduler="threads"), expected)


def test_default_threads_outside_workers():
    assert sd.default_threads() == synet.get_num_threads()   # the main thread: one task at a time
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(sd.default_threads).result() == 1   # a threaded scheduler's pool


# ---------------------------------------------------------------------------------------------
# Errors, eagerly


def unknown_batch(x, chunks):
    d = da.from_array(x, chunks=chunks)
    return d[d.reshape(d.shape[0], -1)[:, 0] == d.reshape(d.shape[0], -1)[:, 0]]   # NaN chunk sizes along 0


def test_unknown_chunk_sizes():
    r = rng(6)
    x = r.standard_normal((6, 4, 5, 5)).astype(np.float32)
    w = r.standard_normal((4, 2, 3, 3)).astype(np.float32)
    xu = unknown_batch(x, 2)
    assert np.isnan(xu.shape[0])
    # the batch of a deconvolution may be unknown: nothing is rechunked or located along it
    result = sd.conv_transpose2d(xu, w, stride=2)
    assert same_bits(result.compute(scheduler="threads"), synet.conv_transpose2d(x, w, stride=2))
    xd = da.from_array(x, chunks=2)
    some = xd[da.from_array(np.array([True, True, False, False, False, True]), chunks=2)]   # an empty chunk
    result = sd.conv_transpose2d(some, w, stride=2, out_dtype="bf16")
    assert same_bits(result.compute(scheduler="threads"), synet.conv_transpose2d(x[[0, 1, 5]], w, stride=2,
                                                                                  out_dtype="bf16"))
    with pytest.raises(ValueError, match=r"x: the chunk sizes along axis 2 are unknown"):
        sd.conv_transpose2d(xu.transpose(2, 1, 0, 3), w, stride=2)
    a = r.integers(0, 256, (6, 4, 5)).astype(np.uint8)
    au = unknown_batch(a, 2)
    ok = sd.quantized_add(au, a[0])    # b broadcasts along the unknown axis: fine
    assert same_bits(ok.compute(scheduler="threads"), synet.quantized_add(a, a[0]))
    with pytest.raises(ValueError, match=r"a: the chunk sizes along axis 0 are unknown"):
        sd.quantized_add(au, a)
    with pytest.raises(ValueError, match=r"data: the chunk sizes along axis 0 are unknown"):
        sd.gather_elements(au, np.zeros((6, 2, 5), np.int64), axis=1)
    with pytest.raises(ValueError, match=r"indices: the chunk sizes along axis 0 are unknown"):
        sd.gather_elements(a, unknown_batch(np.zeros((6, 2, 5), np.int64), 3), axis=1)


def test_errors_are_eager_with_the_functional_forms_messages():
    r = rng(7)
    x = da.from_array(r.standard_normal((4, 6, 5, 5)).astype(np.float32), chunks=2)
    w = r.standard_normal((6, 2, 3, 3)).astype(np.float32)
    cases = [
        (lambda: sd.conv_transpose2d(x, w[:5]), ValueError, "weight: expected 6 input channels"),
        (lambda: sd.conv_transpose2d(x, w, groups=4), ValueError, "groups"),
        (lambda: sd.conv_transpose2d(x, w, output_padding=2), ValueError, "output_padding"),
        (lambda: sd.conv_transpose2d(x, w, bias=np.zeros(3)), ValueError, "bias: expected 2 elements"),
        (lambda: sd.conv_transpose2d(x[:, :, :0], w, bias=np.zeros(3), stride=3), ValueError,
         "bias: expected 2 elements"),   # (a spatial axis of size 0: an empty output, checked all the same)
        (lambda: sd.conv_transpose2d(x, w, activation="prelu"), ValueError, "params"),
        (lambda: sd.conv_transpose2d(x, w, layout="NCDHW"), ValueError, "layout"),
        (lambda: sd.conv_transpose2d(x.astype(np.complex64), w), ValueError, "x: expected real numbers"),
        (lambda: sd.conv_transpose2d(x[0, 0], w), ValueError, "x: expected a 4-D"),
        (lambda: sd.conv_transpose2d(x, w, n_threads="two"), TypeError, "n_threads"),
        (lambda: sd.gather_elements(x, np.zeros((4, 6, 5, 5), np.float32)), ValueError, "indices: expected an integer"),
        (lambda: sd.gather_elements(x, np.zeros((4, 6, 5), np.int64)), ValueError, "indices: expected rank 4"),
        (lambda: sd.gather_elements(x, np.zeros((4, 7, 5, 5), np.int64), axis=0), ValueError, "exceeds data's"),
        (lambda: sd.gather_elements(x, np.full((4, 2, 5, 5), 6), axis=1), IndexError,
         r"indices\[0, 0, 0, 0\] = 6 is out of range for axis 1 with size 6"),
        (lambda: sd.gather_elements(x, np.zeros((4, 2, 5, 5), np.int64), axis=4), ValueError, "axis"),
        (lambda: sd.quantized_add(x, x, a_scale=-1.0, dst_dtype="f32", a_zero=0), ValueError, None),
        (lambda: sd.quantized_add(x.astype(np.uint8), x.astype(np.uint8), a_scale=-1.0), ValueError, "a_scale"),
        (lambda: sd.quantized_add(x.astype(np.uint8), x[:, :2].astype(np.uint8)), ValueError, "broadcasts"),
        (lambda: sd.quantized_add(x.astype(np.int16), x.astype(np.uint8)), ValueError, "a: expected dtype"),
        (lambda: sd.quantized_add(x.astype(np.uint8), x.astype(np.uint8), a_scale=np.ones(5)), ValueError,
         "a_scale: expected 6 values"),
        (lambda: sd.quantized_add(x.astype(np.uint8), x.astype(np.uint8), activation="nope"), ValueError,
         "activation"),
        (lambda: sd.quantized_add(x.astype(np.uint8), x.astype(np.uint8), activation="prelu",
                                  activation_params=np.ones(4)), ValueError, "activation_params"),
    ]
    for make, error, match in cases:
        if match is None:
            make()   # float32 operands ignore their scales: no error
            continue
        with pytest.raises(error, match=match):
            make()


def test_quantized_add_errors_name_the_callers_shapes():
    """The checks run on a probe of the operands (one element off the per-axis axes): its shape, (1, 1, 1, 1),
    was in the message instead of the caller's."""
    a = da.from_array(np.zeros((4, 6, 10, 12), np.uint8), chunks=2)
    scales = np.full(6, 0.1)
    with pytest.raises(ValueError, match=re.escape("a_scale: per-axis values need axis in [-4, 4) of a's shape "
                                                   "(4, 6, 10, 12), got axis 7")):
        sd.quantized_add(a, a, a_scale=scales, axis=7)
    with pytest.raises(ValueError, match=re.escape("a_scale: expected 6 values (a's size along axis 1 of "
                                                   "(4, 6, 10, 12)) or one (per tensor), got 5")):
        sd.quantized_add(a, a, a_scale=scales[:5], axis=1)


def _eager_message(function, *args, **kwargs) -> str:
    with pytest.raises(ValueError) as info:
        function(*args, **kwargs)
    return str(info.value)


def test_activation_and_dst_errors_are_the_eager_messages():
    """conv_transpose2d's activation_params errors named set_params' "params"; quantized_add's named the probe's
    dst shape, (1, 8, 1), and a PRELU without slopes asked for "1 per-channel values" (the probe's channels)."""
    r = rng(10)
    x = r.standard_normal((4, 6, 5, 4)).astype(np.float32)
    w = r.standard_normal((6, 3, 3, 3)).astype(np.float32)
    a = r.integers(0, 256, (6, 8, 5)).astype(np.uint8)
    lazy_x, lazy_a = da.from_array(x, chunks=(2, -1, -1, -1)), da.from_array(a, chunks=2)
    for kwargs in (dict(activation="prelu", activation_params=[1.0, 2.0]), dict(activation="prelu"),
                   dict(activation="elu", activation_params="x")):
        message = _eager_message(synet.conv_transpose2d, x, w, **kwargs)
        assert message.startswith("activation_params: ")
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            sd.conv_transpose2d(lazy_x, w, **kwargs)
    for kwargs in (dict(dst_scale=np.ones(3)), dict(activation="prelu"), dict(activation="prelu", axis=1)):
        message = _eager_message(synet.quantized_add, a, a, **kwargs)
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            sd.quantized_add(lazy_a, lazy_a, **kwargs)


def test_index_error_at_compute_names_the_global_position():
    r = rng(8)
    data = r.standard_normal((6, 8, 5)).astype(np.float32)
    idx = r.integers(0, 8, (6, 4, 5))
    idx[5, 3, 4] = 8
    result = sd.gather_elements(da.from_array(data, chunks=2), da.from_array(idx, chunks=2), axis=1)
    with pytest.raises(IndexError, match=r"indices\[5, 3, 4\] = 8 is out of range for axis 1 with size 8"):
        result.compute(scheduler="threads")
    # a uint64 index past int64's range: its own value, as the eager form says (was 2**63 - 1, clamped)
    huge = idx.astype(np.uint64)
    huge[5, 3, 4] = 2**64 - 1
    message = r"indices\[5, 3, 4\] = 18446744073709551615 is out of range for axis 1 with size 8"
    with pytest.raises(IndexError, match=message):
        synet.gather_elements(data, huge, axis=1)
    with pytest.raises(IndexError, match=message):
        sd.gather_elements(da.from_array(data, chunks=2), da.from_array(huge, chunks=2), axis=1).compute()


@pytest.mark.parametrize("name, rank", [("conv_transpose1d", 3), ("conv_transpose3d", 5)])
def test_other_ranks(name, rank):
    function = getattr(synet, name)
    r = rng(9)
    x = r.standard_normal((7, 4, *(5,) * (rank - 2))).astype(np.float32)
    w = r.standard_normal((4, 3, *(3,) * (rank - 2))).astype(np.float32)
    bias = r.standard_normal(3).astype(np.float32)
    result = getattr(sd, name)(da.from_array(x, chunks=2), w, bias, stride=2, padding=1)
    assert result.chunks[0] == (2, 2, 2, 1)
    assert same_bits(result.compute(scheduler="threads"), function(x, w, bias, stride=2, padding=1))


# ---------------------------------------------------------------------------------------------
# A dask.distributed cluster of two worker processes on loopback (marked slow: about 15 s in all)


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    environ = dict(os.environ)   # distributed's nanny sets OMP_NUM_THREADS=1 here: restored for the other tests
    root = os.path.dirname(os.path.dirname(os.path.abspath(synet.__file__)))
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, saved) if p)   # the workers import this synet
    try:
        # the active memory manager every 5 ms, not 2 s: it drops a worker's replica of the context's key
        # between its chunk tasks, and stealing sends it again (the context must not be rebuilt)
        with dask.config.set({"distributed.scheduler.active-memory-manager.interval": "5ms"}):
            cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                   dashboard_address=None, worker_dashboard_address=None,
                                   silence_logs=logging.CRITICAL)
    finally:
        if saved is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = saved
    client = Client(cluster, timeout=60)
    client.wait_for_workers(2, timeout=60)
    try:
        yield client
    finally:
        client.close(timeout=30)
        cluster.close(timeout=30)
        os.environ.clear()
        os.environ.update(environ)


@pytest.mark.slow   # a cluster of two worker processes: seconds
def test_cluster_is_loopback(client):
    addresses = [client.scheduler.address, *client.scheduler_info()["workers"]]
    assert all(a.startswith("tcp://127.0.0.1:") for a in addresses), addresses
    assert len(set(client.run(os.getpid).values()) - {os.getpid()}) == 2   # two processes, not this one


@pytest.mark.slow   # a cluster of two worker processes: seconds
@pytest.mark.parametrize("name", list(CASES))
def test_cluster_same_bits(client, name):
    result, expected = CASES[name]()
    assert same_bits(client.compute(result).result(timeout=TIMEOUT), expected)


@pytest.mark.slow   # a cluster of two worker processes: seconds
def test_cluster_weights_travel_once_per_worker(client):
    """20 chunk tasks, one shared key: each worker process unpickles the context at most once, the client
    never (it only ever held the bytes the graph carries)."""
    result, expected = conv_case(n=40, chunk=2, seed=21)
    token = shared_keys(result)[0][len("synet-shared-"):]
    assert same_bits(client.compute(result).result(timeout=TIMEOUT), expected)
    built = client.run(lambda: __import__("synet.dask").dask._BUILT[token])
    assert all(count <= 1 for count in built.values()) and 1 <= sum(built.values()) <= 2, built
    assert sd._BUILT[token] == 0


@pytest.mark.slow   # a cluster of two worker processes: seconds
def test_cluster_thread_budget(client):
    """In a worker: synet's threads x the worker's threads never exceed what the process may use (the nanny
    sets OMP_NUM_THREADS=1 in its workers, so that is one synet thread per task there)."""
    budget = client.run(lambda: __import__("synet").get_num_threads())
    futures = [client.submit(sd.default_threads, pure=False, workers=[w]) for w in budget]
    distributed.wait(futures, timeout=TIMEOUT)
    threads = client.gather(futures)
    nthreads = client.nthreads()
    for w, n in zip(budget, threads):
        assert n >= 1 and n * nthreads[w] <= max(budget[w], 1)


def slow_copy(block):
    """A chunk's input, made slowly (sent by value: the workers cannot import this module)."""
    time.sleep(0.04)
    return block.copy()


@pytest.mark.slow   # a cluster of two worker processes: seconds
def test_cluster_worker_killed_mid_compute(client):
    """SIGKILL one worker process while a computation of many chunks runs: dask reruns its tasks (and its
    copy of the shared context) elsewhere, and the result has the same bits."""
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        r = rng(30)
        n, cin, cout = 64, 32, 16
        x = r.standard_normal((n, 16, 16, cin)).astype(np.float32)
        w = r.standard_normal((cin, 4, 4, cout)).astype(np.float32)
        bias = r.standard_normal(cout).astype(np.float32)
        kwargs = dict(stride=2, padding=1, layout="NHWC")
        expected = synet.conv_transpose2d(x, w, bias, **kwargs)
        xd = da.from_array(x, chunks=(1, -1, -1, -1)).map_blocks(slow_copy, dtype=x.dtype)   # ~1.3 s in all
        result = sd.conv_transpose2d(xd, w, bias, **kwargs)
        pids = client.run(os.getpid)
        parts = client.compute(list(result.to_delayed().ravel()))
        distributed.wait(parts, timeout=TIMEOUT, return_when="FIRST_COMPLETED")   # under way
        assert sum(p.done() for p in parts) < len(parts) // 2, "the computation was almost over before the kill"
        victim = sorted(pids)[0]
        os.kill(pids[victim], signal.SIGKILL)
        distributed.wait(parts, timeout=TIMEOUT)
        assert same_bits(np.concatenate(client.gather(parts)), expected)
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    deadline = time.monotonic() + 60   # the nanny restarts the worker (for any test after this one)
    while len(client.scheduler_info()["workers"]) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(client.scheduler_info()["workers"]) == 2
    assert pids[victim] not in client.run(os.getpid).values()   # it was killed (and replaced)
