"""Outputs of HUGE_OUTPUT_MIN bytes or more come from synet._arrays.empty_huge: fresh memory starting on
a 2 MiB boundary (transparent huge pages), with the same values as the ordinary path (out= into
np.empty), writeable and C-contiguous; and np.empty where mapping or advising fails. Outputs of 16 KiB
or more start on a 64-byte cache line; smaller ones are plain NumPy arrays."""

import mmap
import sys

import ml_dtypes
import numpy as np
import pytest

import synet
from synet import _arrays

BIG = _arrays.HUGE_OUTPUT_MIN
LINUX = sys.platform.startswith("linux")


def _check(result, expected):
    assert result.dtype == expected.dtype and result.shape == expected.shape
    assert result.flags.c_contiguous and result.flags.writeable and result.base is not None
    if LINUX:
        assert result.ctypes.data % _arrays.HUGE_PAGE == 0
    assert np.array_equal(result.view(np.uint8), expected.view(np.uint8))
    result[...] = 0  # writeable, every byte


def _ops():
    rng = np.random.default_rng(5)
    f32 = rng.standard_normal(BIG // 4).astype(np.float32)                 # 32 MiB of float32 out
    yield "float32_to_bfloat16", lambda out=None: synet.float32_to_bfloat16(
        np.repeat(f32, 2), **({"out": out} if out is not None else {})), (BIG // 2,), ml_dtypes.bfloat16
    h = f32.astype(ml_dtypes.bfloat16)
    yield "bfloat16_to_float32", lambda out=None: synet.bfloat16_to_float32(
        h, **({"out": out} if out is not None else {})), (BIG // 4,), np.float32
    a, b = (rng.integers(0, 256, BIG, dtype=np.uint8) for _ in range(2))
    yield "quantized_add", lambda out=None: synet.quantized_add(
        a, b, a_scale=0.01, a_zero=3, b_scale=0.02, b_zero=7, dst_scale=0.03, dst_zero=5,
        **({"out": out} if out is not None else {})), (BIG,), np.uint8
    idx = rng.integers(-64, 64, (BIG // 4 // 64, 64))
    data = rng.standard_normal((BIG // 4 // 64, 64)).astype(np.float32)
    yield "gather_elements", lambda out=None: synet.gather_elements(
        data, idx, 1, **({"out": out} if out is not None else {})), idx.shape, np.float32
    x = rng.standard_normal((1, 8, 256, 256)).astype(np.float32)
    w = rng.standard_normal((8, 32, 2, 2)).astype(np.float32)
    yield "conv_transpose2d", lambda out=None: synet.conv_transpose2d(
        x, w, None, 2, **({"out": out} if out is not None else {})), (1, 32, 512, 512), np.float32


@pytest.mark.parametrize("name", ["float32_to_bfloat16", "bfloat16_to_float32", "quantized_add",
                                  "gather_elements", "conv_transpose2d"])
def test_large_outputs_start_on_a_huge_page(name):
    run, shape, dtype = next((r, s, d) for n, r, s, d in _ops() if n == name)
    expected = np.empty(shape, dtype)
    assert expected.nbytes >= BIG
    run(expected)
    _check(run(), expected)


ALIGNED_MIN = 16 << 10   # bytes (synet._fastpath's ALIGNED_OUTPUT_MIN)


def _op_outputs(n):
    """Each op's output of n float32 / bfloat16 / uint8 elements (n a multiple of 64)."""
    rng = np.random.default_rng(6)
    f32 = rng.standard_normal(n).astype(np.float32)
    yield synet.float32_to_bfloat16(f32)
    yield synet.bfloat16_to_float32(f32.astype(ml_dtypes.bfloat16))
    a = rng.integers(0, 256, n, dtype=np.uint8)
    yield synet.quantized_add(a, a, a_scale=0.01, a_zero=3, b_scale=0.02, b_zero=7, dst_scale=0.03, dst_zero=5)
    yield synet.gather_elements(f32.reshape(-1, 64), rng.integers(0, 64, (n // 64, 64)), 1)
    yield synet.conv_transpose2d(np.ones((1, 4, n // 64, 4), np.float32), np.ones((4, 4, 1, 4), np.float32),
                                 stride=(1, 4))
    context = synet.Deconvolution16b()
    context.init(1, synet.ConvParams.deconvolution(4, n // 64, 4, 4, (1, 4), (1, 4), 1, 0, 1, format="NHWC"))
    context.set_params(np.ones((4, 1, 4, 4), np.float32), None)
    yield context.forward(np.ones((1, n // 64, 4, 4), np.float32))


@pytest.mark.parametrize("n", [ALIGNED_MIN, ALIGNED_MIN + 64, 3 * ALIGNED_MIN])
def test_outputs_from_16k_start_on_a_cache_line(n):
    for y in _op_outputs(n):
        if y.nbytes >= ALIGNED_MIN:
            assert y.ctypes.data % 64 == 0 and y.base is not None and y.base.nbytes >= y.nbytes
            assert y.flags.c_contiguous and y.flags.writeable and y.flags.aligned
            y[...] = 0   # every byte writeable


def test_outputs_below_16k_stay_numpy_arrays():
    for y in _op_outputs(ALIGNED_MIN // 4 - 64):   # float32: just below; bfloat16 and uint8: far below
        assert y.base is None


def test_small_outputs_stay_numpy_arrays():
    y = synet.bfloat16_to_float32(np.ones(1000, ml_dtypes.bfloat16))
    assert y.base is None and (y == 1).all()


def test_empty_huge_falls_back_without_mmap(monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError("no mapping")
    monkeypatch.setattr(_arrays.mmap, "mmap", refuse)
    y = _arrays.empty_huge(np.float32, (BIG // 4,))
    assert y.shape == (BIG // 4,) and y.dtype == np.float32 and y.base is None and y.flags.writeable
    h = synet.float32_to_bfloat16(np.ones(BIG // 2, np.float32))
    assert h.base is None and (h.view(np.uint16) == 0x3F80).all()


@pytest.mark.skipif(not hasattr(mmap, "MADV_HUGEPAGE"), reason="no MADV_HUGEPAGE on this platform")
def test_empty_huge_without_huge_pages(monkeypatch):
    """A kernel that refuses the advice still gives the aligned array."""
    class Region(mmap.mmap):
        def madvise(self, *args):
            raise OSError("not supported")
    monkeypatch.setattr(_arrays.mmap, "mmap", Region)
    y = _arrays.empty_huge(np.uint8, (BIG + 5,))
    assert y.shape == (BIG + 5,) and y.ctypes.data % _arrays.HUGE_PAGE == 0 and y.flags.writeable
    y[-1] = 7
    assert y[-1] == 7
