"""Hostile-input strategies and the outcome rule shared by the fuzz files.

The outcome rule (tests/outcomes.py): a call ends in a result or in TypeError, ValueError, IndexError,
MemoryError, OverflowError, or a RuntimeError that says a context is not ready (one of the documented
messages); a synet.InternalError, or any other exception, fails the fuzz run.
"""

from __future__ import annotations

import os

import numpy as np
from hypothesis import strategies as st
from outcomes import failed, outcome
from reference import BF16

__all__ = ["BF16", "DTYPES", "OUT_MUTATIONS", "arrays", "attempt", "check_again", "failed", "guarded", "intact", "junk",
           "log", "out_variant"]

DTYPES = [np.float32, np.float64, np.uint8, np.int8, np.int32, np.int64, np.uint16, np.uint64, np.float16, BF16,
          np.bool_, np.complex64, object, "U2", [("a", np.int32)]]


def log(*what: object) -> None:
    """Record the example about to run (flushed, so it survives a crash)."""
    path = os.environ.get("SYNET_FUZZ_LOG")
    if path:
        with open(path, "a") as f:
            f.write(repr(what)[:2000].replace("\n", " ") + "\n")


def attempt(call, *args, **kwargs):
    """Run `call`: a result, or an allowed exception (returned, not raised: test it with ``failed``);
    an exception the outcome rule does not allow (an InternalError above all) is raised."""
    log(getattr(call, "__qualname__", call), args, kwargs)
    return outcome(call, *args, **kwargs)


def guarded(shape, dtype, fill=0x5A):
    """An array of `shape` inside a buffer with 64 bytes of `fill` on each side: (array, buffer)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    buffer = np.full(nbytes + 128, fill, np.uint8)
    return buffer[64:64 + nbytes].view(dtype).reshape(shape), buffer


def intact(buffer, fill=0x5A) -> bool:
    """Nothing was written into the guard bands of a ``guarded`` buffer."""
    return bool((buffer[:64] == fill).all() and (buffer[len(buffer) - 64:] == fill).all())


# An `out` for calling again what gave a result: the first three fit (the result's shape, a BF16 or FP32 dtype).
OUT_MUTATIONS = ("out_good", "out_bf16", "out_uint16", "out_f64", "out_wrong_shape", "out_flat", "out_readonly",
                 "out_strided", "out_list", "out_view_of_x")


def out_variant(result, mutation, x):
    """The `out` of OUT_MUTATIONS' `mutation` for a call that gave `result` from input `x`."""
    out = np.zeros_like(result)
    if mutation == "out_bf16":
        out = out.astype(BF16)
    elif mutation == "out_uint16":
        out = out.astype(BF16).view(np.uint16)
    elif mutation == "out_f64":
        out = out.astype(np.float64)
    elif mutation == "out_wrong_shape":
        out = np.zeros(result.shape + (1,), result.dtype)
    elif mutation == "out_flat":
        out = out.reshape(-1)
    elif mutation == "out_readonly":
        out.flags.writeable = False
    elif mutation == "out_strided":
        out = np.repeat(out, 2, axis=-1)[..., ::2]
    elif mutation == "out_list":
        out = out.tolist()
    elif mutation == "out_view_of_x" and isinstance(x, np.ndarray) and x.dtype == np.float32 and x.size >= out.size:
        out = x.reshape(-1)[:out.size].reshape(out.shape)
    return out


def check_again(again, out, result, mutation) -> None:
    """The call again with ``out_variant``'s `out`: `out` itself holding the result's bits (rounded once to
    BF16 for a BF16 out of an FP32 result), or an allowed error; never an error for an `out` that fits."""
    if not failed(again):
        assert again is out
        assert again.shape == result.shape
        if out.dtype == result.dtype:
            assert np.array_equal(again.view(np.uint8), result.view(np.uint8))
        else:   # a BF16 out of an FP32 result: the result rounded once
            assert np.array_equal(again.view(np.uint16), result.astype(BF16).view(np.uint16))
    elif mutation in OUT_MUTATIONS[:3]:
        raise AssertionError(f"an out of the result's shape and a BF16/FP32 dtype was refused: {again!r}")


def _build(spec):
    dtype, shape, mode, values = spec
    dtype = np.dtype(dtype)
    if mode == "huge":  # a zero-stride view of 2**57 elements: nothing of that size can be allocated
        base = np.zeros(1, dtype if dtype.kind != "O" else np.float32)
        return np.lib.stride_tricks.as_strided(base, shape=(2**28, 2**29), strides=(0, 0), writeable=False)
    array = np.empty(shape, dtype)
    if array.size and dtype.kind in "iub":
        whole = [int(v) if not isinstance(v, float) else (int(v) if np.isfinite(v) else 0) for v in values]
        modulus = 2 if dtype.kind == "b" else 1 << (8 * dtype.itemsize - (dtype.kind == "i"))
        array[...] = np.resize(np.array([w % modulus for w in whole], dtype=object), shape).astype(dtype)
    elif array.size and (dtype.kind in "fc" or dtype == BF16):
        with np.errstate(all="ignore"):
            array[...] = np.resize(np.array(values, np.float64), shape).astype(dtype)
    elif dtype.kind == "O":
        array[...] = None
    if mode == "strided" and array.ndim and array.shape[-1]:
        array = np.repeat(array, 2, axis=-1)[..., ::2]
    elif mode == "reversed" and array.ndim:
        array = array[..., ::-1]
    elif mode == "readonly":
        array.flags.writeable = False
    elif mode == "list":
        return array.tolist()
    elif mode == "scalar":
        return array.reshape(-1)[0] if array.size else 0
    return array


def arrays(max_dims: int = 4, max_side: int = 6, huge: bool = True):
    values = st.lists(st.one_of(st.integers(-2**40, 2**40), st.floats(allow_nan=True, allow_infinity=True)),
                      min_size=1, max_size=8)
    shapes = st.lists(st.integers(0, max_side), max_size=max_dims).map(tuple)
    modes = st.sampled_from(["plain", "plain", "strided", "reversed", "readonly", "list", "scalar"] + ["huge"] * huge)
    return st.tuples(st.sampled_from(DTYPES), shapes, modes, values).map(_build)


def junk():
    """Anything a careless caller might pass where a parameter goes."""
    return st.one_of(st.none(), st.booleans(), st.integers(-2**65, 2**65), st.floats(allow_nan=True),
                     st.text(max_size=4), st.sampled_from(["f32", "bf16", "u8", "i32", "i64", "nchw", "relu", "32f"]),
                     st.lists(st.integers(-3, 2**33), max_size=4), st.just(np.float32), st.just(BF16),
                     st.just(object()))
