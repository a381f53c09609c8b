"""Argument checks shared by every op: run with the GIL, before any kernel starts."""

from __future__ import annotations

import numpy as np

UINT16 = np.dtype(np.uint16)


class InternalError(RuntimeError):
    """A kernel reported a status its caller's checks should have made impossible: a bug in synet."""


def internal_error(where: str, status: int) -> InternalError:
    return InternalError(f"{where}: internal error, kernel status {status} after the checks passed "
                         f"(a bug in synet: please report it)")


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
