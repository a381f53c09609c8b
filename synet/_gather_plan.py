"""GatherElements planning: argument checks, geometry and the analysis of a constant index (pure Python)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ._arrays import as_array
from ._types import DataType, as_data_type, dtype_of, dtype_or_none

WIDTH_DTYPES = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32), 8: np.dtype(np.uint64)}
INDEX_DTYPES = {DataType.INT32: np.dtype(np.int32), DataType.INT64: np.dtype(np.int64)}
INT32_MAX = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class GatherGeometry:
    """src [prod(outer), src_count, inner]; idx and dst [prod(outer), idx_count, inner]."""

    dtype: np.dtype          # of src and dst elements
    index_dtype: np.dtype    # int32 or int64
    index_const: bool
    index_users: int
    outer: tuple[int, ...]
    src_count: int
    inner: int
    idx_count: int

    @property
    def outer_size(self) -> int:
        return math.prod(self.outer)

    @property
    def src_size(self) -> int:
        return self.outer_size * self.src_count * self.inner

    @property
    def idx_size(self) -> int:
        return self.outer_size * self.idx_count * self.inner


def copyable(dtype: np.dtype) -> bool:
    """Whether elements of `dtype` may be gathered as raw 1-, 2-, 4- or 8-byte words."""
    return (dtype.itemsize in WIDTH_DTYPES and not dtype.hasobject and dtype.names is None
            and dtype.subdtype is None and dtype.type is not np.void)


def data_dtype(value: object, param: str = "data_type") -> np.dtype:
    """The NumPy dtype of gathered elements: a DataType / name, or any 1-, 2-, 4-, 8-byte dtype."""
    try:
        return dtype_of(as_data_type(value, param))
    except ValueError:
        dtype = dtype_or_none(value)
        if dtype is not None and copyable(dtype):
            return dtype
        raise


def count(value: object, name: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name}: expected an int >= {minimum}, got {value}")
    if value >= 2**63:   # (a zero among the other factors hides it from the size checks; a C size would overflow)
        raise ValueError(f"{name}: expected an int < 2**63, got {value}")
    return int(value)


def checked_size(what: str, *factors: int, itemsize: int = 1) -> int:
    size = math.prod(factors)
    if size * itemsize >= 2**63:
        raise ValueError(f"{what}: {' x '.join(map(str, factors))} elements overflow 64-bit sizes")
    return size


def geometry(data_type, index_type, index_const, index_users, outer, src_count, inner, idx_count) -> GatherGeometry:
    """Checks init's arguments (TypeError / ValueError naming the parameter) and returns the geometry."""
    dtype = data_dtype(data_type)
    index_type = as_data_type(index_type, "index_type")
    if index_type not in INDEX_DTYPES:
        raise ValueError(f"index_type: expected INT32 or INT64, got {index_type.name}")
    if not isinstance(index_const, (bool, np.bool_, int)):
        raise TypeError(f"index_const: expected a bool, got {type(index_const).__name__}")
    users = count(index_users, "index_users", 1)
    if isinstance(outer, (int, np.integer)) and not isinstance(outer, bool):
        outer = (outer,)
    try:
        outer = tuple(count(d, "outer") for d in outer)
    except TypeError:
        raise TypeError(f"outer: expected a sequence of ints, got {outer!r}") from None
    counts = (count(src_count, "src_count"), count(inner, "inner"), count(idx_count, "idx_count"))
    outer_size = checked_size("outer", *outer)
    checked_size("src", outer_size, counts[0], counts[1], itemsize=dtype.itemsize)
    checked_size("idx", outer_size, counts[2], counts[1], itemsize=8)
    return GatherGeometry(dtype, INDEX_DTYPES[index_type], bool(index_const), users, outer, *counts)  # type: ignore[arg-type]


def first_bad(idx: np.ndarray, src_count: int) -> tuple[int, int]:
    """Flat position and value of the first index outside [-src_count, src_count)."""
    flat = idx.reshape(-1)
    bad = (flat < -src_count) | (flat >= src_count)
    position = int(np.argmax(bad))
    return position, int(flat[position])


def index_error(idx: np.ndarray, src_count: int, start: int = 0) -> IndexError:
    """The IndexError for the first bad index of `idx`, the part of a flat index from position `start`."""
    position, value = first_bad(idx, src_count)
    bounds = f"[-{src_count}, {src_count})" if src_count else "(the axis has size 0)"
    return IndexError(f"idx: index {value} at flat position {start + position} is out of range {bounds}")


ANALYSE_CHUNK = 1 << 20   # index elements analyse_index converts (and compares) at a time


def analyse_index(geo: GatherGeometry, idx: np.ndarray) -> tuple[np.ndarray, int]:
    """(offsets, period) of a constant index: negatives normalised, src offsets c * inner + i precomputed
    (int32 when they fit), only the trailing outer slices over which the index differs kept.

    Works through the index in chunks of ANALYSE_CHUNK elements: beside the offsets it keeps, it needs a
    chunk's temporaries, not copies of the whole index (whole-array NumPy took 3-7x the index's bytes).
    Raises IndexError for the first index outside [-src_count, src_count).
    """
    offsets = offsets_of(idx, geo)
    chunk = _chunk(geo)
    row = geo.idx_count * geo.inner
    period = geo.outer_size
    for split in range(len(geo.outer), 0, -1):  # the most repeated first
        # outer slices b and b + period hold the same index when the first `split` dims repeat: every
        # offset equals the one a slice before it
        repeat = math.prod(geo.outer[:split])
        if repeat > 0 and row > 0:
            size = offsets.size // repeat
            ends = [(start, min(start + chunk, offsets.size)) for start in range(size, offsets.size, chunk)]
            if all(np.array_equal(offsets[start:end], offsets[start - size:end - size]) for start, end in ends):
                period = geo.outer_size // repeat
                break
    period = max(period, 1)
    kept = offsets[: period * row]
    return (kept.copy() if kept.size < offsets.size else offsets), period


def _chunk(geo: GatherGeometry) -> int:
    """Index elements converted at a time: whole rows of `inner` (lane i of each at column i)."""
    inner = max(geo.inner, 1)
    return max(ANALYSE_CHUNK // inner, 1) * inner


def offsets_of(idx: np.ndarray, geo: GatherGeometry) -> np.ndarray:
    """The src offsets c * inner + i of index values c (negatives normalised; int32 when they fit), chunk by
    chunk; IndexError for the first value outside [-src_count, src_count)."""
    flat = idx.reshape(-1)
    count, inner = geo.src_count, max(geo.inner, 1)
    offsets = np.empty(flat.size, np.int32 if count * geo.inner <= INT32_MAX else np.int64)
    lanes = np.arange(inner, dtype=np.int64)
    chunk = _chunk(geo)
    for start in range(0, flat.size, chunk):
        part = flat[start:start + chunk].astype(np.int64)
        if ((part < -count) | (part >= count)).any():
            raise index_error(part, count, start)
        np.add(part, count, out=part, where=part < 0)
        part *= inner
        rows = part.reshape(-1, inner)
        rows += lanes
        offsets[start:start + part.size] = part
    return offsets


def index_of_offsets(offsets: np.ndarray, geo: GatherGeometry, period: int) -> np.ndarray:
    """The index of the `period` outer slices an analysis kept (offsets c * inner + i -> c), in the
    context's index dtype (the values are normalised, in [0, src_count), so they fit it)."""
    inner = max(geo.inner, 1)
    return (offsets.astype(np.int64).reshape(-1, inner) // inner).reshape(period, -1).astype(geo.index_dtype)


def index_for_set_index(index: object, geo: GatherGeometry, index_shape: object) -> np.ndarray | tuple:
    """A pickled index (the kept slices) as (offsets, period, index_shape), the state set_index of the full
    index would make, where its slices are a period analyse_index can find (every pickle synet makes; the full
    index is never built: a 98 KB pickle of a 402 MiB index took 1.7 s and +594 MiB);
    otherwise tiled back to a full index of the geometry's type and size, in `index_shape` (the shape set_index
    was given), for set_index to analyse.

    ValueError unless it is an int32 / int64 array [period, idx_count * inner] with period dividing
    prod(outer) and every value in [0, src_count) (as index_of_offsets makes it), and index_shape a tuple of
    sizes of prod(outer) * idx_count * inner elements (checked before the tiling: a state claiming a huge
    outer ran out of memory)."""
    kept = index if isinstance(index, np.ndarray) else np.asarray(index)
    if kept.dtype not in (np.dtype(np.int32), np.dtype(np.int64)) or kept.ndim != 2:
        raise ValueError(f"GatherElements pickle: expected a 2-D int32/int64 index, got shape {kept.shape} and dtype "
                         f"{kept.dtype}")
    row = geo.idx_count * geo.inner
    if geo.outer_size == 0:   # an empty index: the analysis kept one empty slice
        if kept.size:
            raise ValueError(f"GatherElements pickle: expected an empty index (outer {geo.outer}), got shape "
                             f"{kept.shape}")
        return np.zeros(0, geo.index_dtype).reshape(_checked_index_shape(index_shape, geo))
    if kept.shape[0] < 1 or geo.outer_size % kept.shape[0] or kept.shape[1] != row:
        raise ValueError(f"GatherElements pickle: an index of shape {kept.shape} does not fit the geometry (expected "
                         f"[a divisor of {geo.outer_size}, {row}])")
    if kept.size and (kept.min() < 0 or kept.max() >= geo.src_count):
        raise ValueError(f"GatherElements pickle: index values in [{kept.min()}, {kept.max()}] are outside "
                         f"[0, src_count = {geo.src_count})")
    shape = _checked_index_shape(index_shape, geo)
    if kept.shape[0] in split_periods(geo):   # what set_index of the tiled index would keep: its offsets only
        return offsets_of(kept, geo), kept.shape[0], shape
    full = np.tile(kept, (geo.outer_size // kept.shape[0], 1))
    return np.ascontiguousarray(full, geo.index_dtype).reshape(shape)


def split_periods(geo: GatherGeometry) -> set:
    """The periods analyse_index can find: prod(outer[split:]) for each split of the outer dimensions."""
    return {math.prod(geo.outer[split:]) for split in range(len(geo.outer) + 1)}


def _checked_index_shape(index_shape: object, geo: GatherGeometry) -> tuple:
    """index_shape, a tuple of sizes of the geometry's index element count (ValueError otherwise)."""
    if not isinstance(index_shape, tuple) or \
            not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in index_shape) or \
            math.prod(index_shape) != geo.idx_size:
        raise ValueError(f"GatherElements pickle: index shape {index_shape!r:.80} does not fit {geo.idx_size} "
                         f"index elements")
    return index_shape


def as_indices(indices: object) -> np.ndarray:
    """indices as an int32/int64 array; other integer dtypes widen to int64 (checked)."""
    indices = as_array(indices, "indices")
    if indices.dtype == np.int32 or indices.dtype == np.int64:
        return indices
    if indices.dtype == np.uint64:  # values past int64's range stay out of range
        return np.minimum(indices, np.uint64(np.iinfo(np.int64).max)).astype(np.int64)
    if indices.dtype.kind in "iu":
        return indices.astype(np.int64)
    raise ValueError(f"indices: expected an integer dtype, got {indices.dtype}")


def functional_geometry(data: np.ndarray, indices: np.ndarray, axis: object) -> tuple[int, tuple]:
    """The normalised axis of gather_elements and the block of data it reads; ValueError / TypeError otherwise."""
    if not copyable(data.dtype):
        raise ValueError(f"data: expected a 1-, 2-, 4- or 8-byte dtype, got {data.dtype}")
    if data.ndim == 0:
        raise ValueError("data: expected an array of rank >= 1, got a scalar")
    if indices.ndim != data.ndim:
        raise ValueError(f"indices: expected rank {data.ndim} (data's), got rank {indices.ndim}")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis: expected an int, got {type(axis).__name__}")
    if not -data.ndim <= axis < data.ndim:
        raise ValueError(f"axis: expected an int in [-{data.ndim}, {data.ndim}), got {axis}")
    axis = int(axis) % data.ndim
    return axis, sub_block(data.shape, indices.shape, axis)


def sub_block(data_shape: tuple, indices_shape: tuple, axis: int) -> tuple:
    """The slices of data a gather along (normalised) `axis` reads: indices' sizes off the axis, all of it along
    it; ValueError where indices are larger than data off the axis."""
    for dim, (n_idx, n_data) in enumerate(zip(indices_shape, data_shape)):
        if dim != axis and n_idx > n_data:
            raise ValueError(f"indices: size {n_idx} of dimension {dim} exceeds data's {n_data} "
                             f"(only axis {axis} may differ)")
    return tuple(slice(0, n) if dim != axis else slice(None) for dim, n in enumerate(indices_shape))
