"""Argument checks shared by every op: run with the GIL, before any kernel starts."""

from __future__ import annotations

import contextlib
import math
import mmap
import sys

import ml_dtypes
import numpy as np
import numpy.typing as npt

UINT16 = np.dtype(np.uint16)
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)

HUGE_PAGE = 2 << 20          # bytes: an x86-64 transparent huge page
HUGE_OUTPUT_MIN = 32 << 20   # bytes from which glibc maps every allocation afresh (its largest mmap threshold)


def empty_huge(dtype: npt.DTypeLike, shape: tuple[int, ...]) -> np.ndarray:
    """np.empty(shape, dtype) for an array of HUGE_OUTPUT_MIN bytes or more: fresh anonymous memory whose
    data starts on a 2 MiB boundary, advised for transparent huge pages. An output that large is mapped
    anew on every call (glibc returns such blocks to the system when they are freed), so its first writes
    fault its pages in; NumPy's own buffer starts 16 bytes into a page and faulted slower (B2, 64 MiB out:
    6.0 -> 5.3 ms, 4.9 -> 4.1 ms on 2 threads). The array's base is the mapping, unmapped with the last
    reference. np.empty where the platform has no anonymous mmap."""
    descr = np.dtype(dtype)
    count = math.prod(shape)
    nbytes = count * descr.itemsize
    try:
        region = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except (AttributeError, OSError, TypeError, ValueError):
        return np.empty(shape, descr)
    offset = -np.frombuffer(region, np.uint8, 1).ctypes.data % HUGE_PAGE
    if hasattr(region, "madvise") and hasattr(mmap, "MADV_HUGEPAGE"):
        with contextlib.suppress(OSError):   # huge pages not available: ordinary pages
            region.madvise(mmap.MADV_HUGEPAGE, offset, nbytes)
    return np.frombuffer(region, descr, count, offset).reshape(shape)


def native(array: np.ndarray) -> np.ndarray:
    """`array` with its dtype in the machine's byte order: itself, or a copy when it is byte-swapped (the
    kernels read their arrays' bytes as native numbers)."""
    return array if array.dtype.isnative else array.astype(array.dtype.newbyteorder("="))


def round_from_float64(array: np.ndarray) -> np.ndarray:
    """Real numbers other than float32 and bfloat16 as C-ordered float32 values that bfloat16 holds, rounded
    once from float64 (through float32 first, values between two of float32's would round twice)."""
    from ._kernels import round_to_bfloat16
    return round_to_bfloat16(np.asarray(array, np.float64, order="C"))


def memory_order(x: np.ndarray) -> tuple[int, ...] | None:
    """The order of the axes in which `x` (2-D or more) lies densely in memory with positive strides:
    ``x.transpose(order)`` is C-contiguous (a transposed or Fortran-ordered array); None if it lies otherwise."""
    strides = x.strides   # (a stable sort: axes of equal strides keep their order)
    order = tuple(sorted(range(len(strides)), key=strides.__getitem__, reverse=True))
    if len(order) < 2 or not x.transpose(order).flags.c_contiguous:
        return None
    return order


def run_in_memory_order(order: tuple[int, ...], run, arrays: tuple, out: object, shape: tuple):
    """``run(*views, out_view)`` on the C-ordered views ``x.transpose(order)`` of `arrays` (see memory_order)
    and of `out`, the result seen in the caller's order of the axes (`out` itself when given); None when
    `out` is not an array of `shape` laid out in that order."""
    if out is not None and not (isinstance(out, np.ndarray) and out.shape == shape and
                                out.transpose(order).flags.c_contiguous):
        return None
    result = run(*(x.transpose(order) for x in arrays), None if out is None else out.transpose(order))
    if out is not None:
        return out
    inverse = [0] * len(order)   # (np.argsort of a tuple costs more than this call's Python: 1.6 us)
    for position, axis in enumerate(order):
        inverse[axis] = position
    return result.transpose(inverse)


class InternalError(RuntimeError):
    """A kernel reported a status its caller's checks should have made impossible: a bug in synet."""


def internal_error(where: str, status: int) -> InternalError:
    return InternalError(f"{where}: internal error, kernel status {status} after the checks passed "
                         f"(a bug in synet: please report it)")


def loaded_torch():
    """The torch module if the caller has imported it, else None (synet never imports it)."""
    return sys.modules.get("torch")


def torch_array(value: object, name: str) -> np.ndarray | None:
    """A torch.Tensor's data as an ndarray over its memory, None for anything else. Detached (synet computes
    no gradients: NumPy's own conversion refuses a tensor that requires them, such as a layer's weight);
    bfloat16 and the float8 types as ml_dtypes' (NumPy's conversion refuses them too); a conjugate or negative
    view resolved (a copy). A tensor whose dtype NumPy has no equivalent of (quantised, complex32) is a
    ValueError, one NumPy cannot see at all (on another device, sparse, meta) a TypeError, each naming the
    parameter. torch is never imported here."""
    torch = loaded_torch()
    if torch is None or not isinstance(value, torch.Tensor):
        return None
    tensor = value.detach() if value.requires_grad else value
    try:
        if tensor.dtype is torch.bfloat16:
            return tensor.view(torch.int16).numpy().view(BFLOAT16)
        return tensor.numpy()
    except (TypeError, RuntimeError) as error:
        readable = tensor.layout is torch.strided and tensor.device.type == "cpu"
        if readable and (tensor.is_conj() or tensor.is_neg()):
            return torch_array(tensor.resolve_conj().resolve_neg(), name)
        dtype = str(tensor.dtype).removeprefix("torch.")
        ml_dtype = getattr(ml_dtypes, dtype, None) if dtype.startswith("float8_") else None
        if readable and ml_dtype is not None and np.dtype(ml_dtype).itemsize == tensor.element_size() == 1:
            return tensor.view(torch.uint8).numpy().view(ml_dtype)
        if readable:
            raise ValueError(f"{name}: {tensor.dtype} has no NumPy dtype") from None
        raise TypeError(f"{name}: expected a tensor on the CPU that NumPy can read ({error})") from None


def mutable_array_like(value: object) -> bool:
    """Whether `value` is an object NumPy reads as an array — ``__array__``, the array interface or the buffer
    protocol (array.array, memoryview, a ctypes array, an xarray or pandas object) — other than an ndarray and
    the immutable scalars, strings and bytes (callers read torch tensors by torch_array first): its values may
    change in place while its hash, if it has one, stays its identity (or, for a memoryview, its first
    contents). Caches key it, and contexts keep it, by a copy of its values."""
    if value is None or isinstance(value, (int, float, complex, str, bytes, type, np.dtype, np.generic, np.ndarray)):
        return False
    if hasattr(value, "__array__") or hasattr(value, "__array_interface__") or hasattr(value, "__array_struct__"):
        return True
    try:
        memoryview(value)   # type: ignore[arg-type]
    except TypeError:
        return False
    return True


def from_torch(value: object, name: str) -> object:
    """`value` with every torch.Tensor in it (itself, or items of lists and tuples, nested) as its ndarray
    (torch_array); `value` itself where it holds none (or torch is not imported)."""
    if loaded_torch() is None:
        return value
    if isinstance(value, (list, tuple)):
        items = [from_torch(v, name) for v in value]
        return type(value)(items) if any(a is not b for a, b in zip(items, value)) else value
    tensor = torch_array(value, name)
    return value if tensor is None else tensor


def as_array(value: object, name: str) -> np.ndarray:
    """A functional form's array-like as an array (np.asarray; torch.Tensors, also inside sequences, by
    torch_array); TypeError naming the parameter when `value` is no array-like at all but one non-numeric
    object (None, a str, another object: SPEC section 7, "TypeError for non-arrays"). Arrays and sequences of
    a wrong dtype are left to the caller (ValueError; a gather takes strings and objects); a ragged sequence
    is a ValueError naming the parameter."""
    if isinstance(value, np.ndarray):
        return value
    tensor = torch_array(value, name)
    if tensor is not None:
        return tensor
    try:
        array = np.asarray(value)
    except ValueError as error:   # (NumPy's "setting an array element with a sequence ...")
        raise ValueError(f"{name}: {error}") from None
    except (TypeError, RuntimeError):   # (a sequence of tensors torch will not give NumPy: read them here)
        converted = from_torch(value, name)
        if converted is value:
            raise
        return as_array(converted, name)
    if array.ndim == 0 and array.dtype.kind in "OUS":
        raise TypeError(f"{name}: expected an array-like of numbers, got {type(value).__name__}")
    return array


def require_array(value: object, name: str) -> np.ndarray:
    """`value` itself if it is an ndarray, else TypeError naming the parameter."""
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{name}: expected a numpy.ndarray, got {type(value).__name__}")
    return value

def check_buffer(
    value: object,
    name: str,
    dtypes: tuple[np.dtype, ...],
    size: int,
    *,
    writeable: bool = False,
) -> np.ndarray:
    """A context's operand: an ndarray, C-contiguous, of one of `dtypes`, with `size` elements.

    No hidden copies: anything else raises (TypeError for a non-array, ValueError otherwise).
    """
    array = require_array(value, name)
    if array.dtype not in dtypes:
        expected = " or ".join(str(d) for d in dtypes)
        raise ValueError(f"{name}: expected dtype {expected}, got {array.dtype}")
    if not array.flags.c_contiguous:
        raise ValueError(f"{name}: expected a C-contiguous array (strides {array.strides} given)")
    if array.size != size:
        raise ValueError(f"{name}: expected {size} elements, got {array.size} (shape {array.shape})")
    if writeable and not array.flags.writeable:
        raise ValueError(f"{name}: expected a writeable array, got a read-only one")
    return array

MAX_THREADS = 1024   # SYNET_MAX_THREADS (src/common.h): OpenMP ends the process when it cannot start them


def check_n_threads(n_threads: object, name: str = "n_threads") -> None:
    """An int (or None) of at most MAX_THREADS; negatives are counted back from the CPUs later."""
    if n_threads is not None and (isinstance(n_threads, bool) or not isinstance(n_threads, (int, np.integer))):
        raise TypeError(f"{name}: expected an int or None, got {type(n_threads).__name__}")
    if n_threads is not None and n_threads > MAX_THREADS:
        raise ValueError(f"{name}: expected a thread count of at most {MAX_THREADS}, got {n_threads}")


def check_out(out: object, shape: tuple, dtypes: tuple, overlaps: dict | None = None) -> np.ndarray:
    """A functional form's `out`: an ndarray of `shape` and one of `dtypes`, writeable and
    C-contiguous, sharing no memory with the named arrays of `overlaps`."""
    array = require_array(out, "out")
    if array.shape != tuple(shape):
        raise ValueError(f"out: expected shape {tuple(shape)}, got {array.shape}")
    if array.dtype not in dtypes:
        raise ValueError(f"out: expected dtype {' or '.join(str(d) for d in dtypes)}, got {array.dtype}")
    if not array.flags.c_contiguous or not array.flags.writeable:
        raise ValueError("out: expected a writeable C-contiguous array")
    if overlaps and any(np.may_share_memory(array, other) for other in overlaps.values()):
        raise ValueError(f"out: must not overlap {' or '.join(overlaps)}")
    return array
