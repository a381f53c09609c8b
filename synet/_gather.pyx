"""GatherElements (ONNX): dst[b, c, i] = src[b, idx[b, c, i] (+ src_count if negative), i].

The context class `GatherElements` keeps the geometry between `init` and `forward` and, with
`index_const`, an analysed copy of the index: negatives normalised, offsets premultiplied by
`inner`, and only the outer slices that differ. `gather_elements` is the NumPy-style form.
"""

cimport cython
from cython.parallel cimport prange
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

import numpy as np

from ._arrays import UINT16, check_buffer, require_array
from ._kernels import resolve_num_threads
from ._types import BFLOAT16, DataType, as_data_type, dtype_of

ctypedef fused elem_t:  # data elements are copied by width
    uint8_t
    uint16_t
    uint32_t
    uint64_t

ctypedef fused index_t:
    int32_t
    int64_t

cdef enum:
    TILE = 4096            # dst elements per parallel task (at least one row of `inner`)
    PARALLEL_MIN = 1 << 15  # dst elements below which a gather runs on one thread

_WIDTH_DTYPE = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32), 8: np.dtype(np.uint64)}
_INDEX_DTYPES = {DataType.INT32: np.dtype(np.int32), DataType.INT64: np.dtype(np.int64)}
_INT32_MAX = 2**31 - 1


cdef inline Py_ssize_t _gather_tile(
    const elem_t* src, const index_t* idx, elem_t* dst, Py_ssize_t c_begin, Py_ssize_t c_end,
    Py_ssize_t src_count, Py_ssize_t inner, bint offsets,
) noexcept nogil:
    """Rows c_begin..c_end of one outer slice; returns how many indices were out of range.

    With `offsets` the index holds validated src offsets (c' * inner + i). Otherwise each
    index is normalised and checked; an out-of-range one reads src[0 * inner + i] instead and
    is counted, so nothing outside src or dst is touched.
    """
    cdef Py_ssize_t c, i, k, ic, bad = 0
    cdef bint ok
    if offsets:
        for k in range(c_begin * inner, c_end * inner):
            dst[k] = src[idx[k]]
    elif inner == 1:
        for c in range(c_begin, c_end):
            ic = idx[c]
            ic = ic + src_count if ic < 0 else ic
            ok = <size_t>ic < <size_t>src_count
            bad += not ok
            dst[c] = src[ic if ok else 0]
    else:
        for c in range(c_begin, c_end):
            for i in range(inner):
                k = c * inner + i
                ic = idx[k]
                ic = ic + src_count if ic < 0 else ic
                ok = <size_t>ic < <size_t>src_count
                bad += not ok
                dst[k] = src[(ic if ok else 0) * inner + i]
    return bad


cdef Py_ssize_t gather_kernel(
    const elem_t* src, const index_t* idx, elem_t* dst, Py_ssize_t outer, Py_ssize_t src_count,
    Py_ssize_t inner, Py_ssize_t idx_count, Py_ssize_t idx_period, bint offsets, int threads,
) noexcept nogil:
    """Gather all outer slices; outer slice b reads index slice b % idx_period.

    Parallel over tiles of whole rows of dst, so each element is written by one thread and
    the result does not depend on the thread count. Returns the out-of-range index count.
    """
    cdef Py_ssize_t row = idx_count * inner
    cdef Py_ssize_t rows_per_task = max(1, TILE // inner) if inner else 1
    cdef Py_ssize_t tasks_per_outer = (idx_count + rows_per_task - 1) // rows_per_task
    cdef Py_ssize_t tasks = outer * tasks_per_outer
    cdef Py_ssize_t task, b, c_begin, bad = 0
    for task in prange(tasks, schedule="static", num_threads=threads,
                       use_threads_if=outer * row >= PARALLEL_MIN):
        b = task // tasks_per_outer
        c_begin = (task % tasks_per_outer) * rows_per_task
        bad += _gather_tile(
            src + b * src_count * inner, idx + (b % idx_period) * row, dst + b * row,
            c_begin, min(c_begin + rows_per_task, idx_count), src_count, inner, offsets)
    return bad


def _run(const elem_t[::1] src, const index_t[::1] idx, elem_t[::1] dst, Py_ssize_t outer,
         Py_ssize_t src_count, Py_ssize_t inner, Py_ssize_t idx_count, Py_ssize_t idx_period,
         bint offsets, int threads):
    """Run gather_kernel on flat views (element width x index type chosen by Cython's dispatch)."""
    cdef Py_ssize_t bad
    if dst.shape[0] == 0:
        return 0
    with nogil:
        bad = gather_kernel(&src[0], &idx[0], &dst[0], outer, src_count, inner, idx_count,
                            idx_period, offsets, threads)
    return bad


def _first_bad(idx, Py_ssize_t src_count):
    """Flat position and value of the first index outside [-src_count, src_count)."""
    flat = idx.reshape(-1)
    bad = (flat < -src_count) | (flat >= src_count)
    position = int(np.argmax(bad))
    return position, int(flat[position])


def _data_dtype(value, str param="data_type"):
    """The NumPy dtype of gathered elements: a DataType / name, or any 1-, 2-, 4-, 8-byte dtype."""
    try:
        return dtype_of(as_data_type(value, param))
    except ValueError:
        try:
            dtype = np.dtype(value)
        except TypeError:
            dtype = None
        if dtype is not None and dtype.itemsize in _WIDTH_DTYPE and not dtype.hasobject and dtype.kind != "V":
            return dtype
        raise


def _count(value, str name, Py_ssize_t minimum=0):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name}: expected an int >= {minimum}, got {value}")
    return int(value)


def _checked_size(str what, *factors, Py_ssize_t itemsize=1):
    size = 1
    for factor in factors:
        size *= factor
    if size * itemsize >= 2**63:
        raise ValueError(f"{what}: {' x '.join(map(str, factors))} elements overflow 64-bit sizes")
    return size


@cython.final
cdef class GatherElements:
    """Context of ONNX GatherElements over a tensor viewed as [outer..., src_count, inner].

    ``dst[b, c, i] = src[b, idx[b, c, i] (+ src_count if negative), i]`` for b over
    prod(outer), c < idx_count, i < inner. The constructor takes `init`'s keywords.

    Examples
    --------
    >>> g = GatherElements("float32", "int32", False, 1, [2], 4, 1, 3)
    >>> g.forward(np.arange(8, dtype=np.float32), np.array([0, 2, 1, 3, 1, 0], np.int32))
    array([0., 2., 1., 7., 5., 4.], dtype=float32)
    """

    cdef object _dtype        # dtype of src/dst elements
    cdef object _index_dtype  # int32 or int64
    cdef tuple _key           # init's arguments, normalised
    cdef tuple _outer
    cdef Py_ssize_t _outer_size, _src_count, _inner, _idx_count
    cdef bint _index_const
    cdef Py_ssize_t _index_users
    cdef object _offsets      # analysed index (set_index), flat, or None
    cdef tuple _index_shape   # the shape set_index was given
    cdef Py_ssize_t _period   # outer slices the analysed index covers

    def __init__(self, data_type=None, index_type=None, index_const=False, index_users=1,
                 outer=None, src_count=None, inner=None, idx_count=None):
        self._key = None
        self._offsets = None
        if data_type is not None or index_type is not None or outer is not None or \
                src_count is not None or inner is not None or idx_count is not None:
            self.init(data_type, index_type, index_const, index_users, outer, src_count, inner, idx_count)

    def init(self, data_type, index_type, index_const, index_users, outer, src_count, inner, idx_count):
        """(Re)initialise: src is [prod(outer), src_count, inner], idx and dst [prod(outer), idx_count, inner].

        Parameters
        ----------
        data_type : DataType, name or dtype
            FLOAT32, BFLOAT16, UINT8, or any 1-, 2-, 4- or 8-byte NumPy dtype (copied as is).
        index_type : DataType or name
            INT32 or INT64.
        index_const : bool
            The index is constant: `set_index` analyses it once and `forward(src)` reuses it.
        index_users : int
            Contexts sharing the constant index (>= 1).
        outer : sequence of int
            Dimensions before the gathered axis.
        src_count, inner, idx_count : int
            Gathered-axis length of src, product of the dimensions after it, gathered-axis
            length of idx and dst.

        Identical arguments keep the context (and its analysed index); others rebuild it.
        """
        dtype = _data_dtype(data_type)
        index_type = as_data_type(index_type, "index_type")
        if index_type not in _INDEX_DTYPES:
            raise ValueError(f"index_type: expected INT32 or INT64, got {index_type.name}")
        if not isinstance(index_const, (bool, np.bool_, int)):
            raise TypeError(f"index_const: expected a bool, got {type(index_const).__name__}")
        users = _count(index_users, "index_users", 1)
        if isinstance(outer, (int, np.integer)) and not isinstance(outer, bool):
            outer = (outer,)
        try:
            outer = tuple(_count(d, "outer") for d in outer)
        except TypeError:
            raise TypeError(f"outer: expected a sequence of ints, got {outer!r}") from None
        counts = (_count(src_count, "src_count"), _count(inner, "inner"), _count(idx_count, "idx_count"))
        key = (dtype, index_type, bool(index_const), users, outer, counts)
        if key == self._key:
            return
        self.clear()
        outer_size = _checked_size("outer", *outer)
        _checked_size("src", outer_size, counts[0], counts[1], itemsize=dtype.itemsize)
        _checked_size("idx", outer_size, counts[2], counts[1], itemsize=8)
        self._dtype = dtype
        self._index_dtype = _INDEX_DTYPES[index_type]
        self._outer = outer
        self._outer_size = outer_size
        self._src_count, self._inner, self._idx_count = counts
        self._index_const = bool(index_const)
        self._index_users = users
        self._key = key

    def enable(self):
        """True when `init` has built the context and `forward` may be called."""
        return self._key is not None

    def internal_buffer_size(self):
        """Bytes held by the context: the analysed index (0 without `set_index`)."""
        return 0 if self._offsets is None else self._offsets.nbytes

    @property
    def index_users(self):
        """Contexts sharing the constant index, as given to `init`."""
        return self._index_users

    cdef _require_ready(self):
        if self._key is None:
            raise RuntimeError("GatherElements: call init() before using the context")

    cdef _src_dtypes(self):
        return (BFLOAT16, UINT16) if self._dtype == BFLOAT16 else (self._dtype,)

    def set_index(self, idx):
        """Validate and analyse a constant index once; afterwards `forward(src)` needs no idx.

        Negative indices are normalised, offsets ``c' * inner + i`` precomputed (int32 when
        they fit) and only the trailing outer slices over which the index differs are kept.
        Raises IndexError naming the first out-of-range index's flat position and value.
        """
        self._require_ready()
        if not self._index_const:
            raise RuntimeError("GatherElements.set_index: the context was made with index_const=False")
        n = self._outer_size * self._idx_count * self._inner
        idx = check_buffer(idx, "idx", (self._index_dtype,), n)
        flat = idx.reshape(-1).astype(np.int64)
        if n:
            bad = (flat < -self._src_count) | (flat >= self._src_count)
            if bad.any():
                position, value = _first_bad(flat, self._src_count)
                raise IndexError(f"idx: index {value} at flat position {position} is out of range "
                                 f"[-{self._src_count}, {self._src_count})")
        flat = np.where(flat < 0, flat + self._src_count, flat)
        row = self._idx_count * self._inner
        period = self._outer_size
        for split in range(len(self._outer) + 1):
            # outer slices b and b + period hold the same index when the first `split` dims repeat
            repeat = _checked_size("outer", *self._outer[:split])
            if repeat > 0 and row > 0:
                slices = flat.reshape(repeat, -1)
                if (slices == slices[:1]).all():
                    period = self._outer_size // repeat
                    break
        flat = flat[: max(period, 1) * row].reshape(-1, self._inner if self._inner else 1)
        offsets = flat * self._inner + np.arange(self._inner, dtype=np.int64)
        fits32 = self._src_count * self._inner <= _INT32_MAX
        self._offsets = np.ascontiguousarray(offsets.reshape(-1), np.int32 if fits32 else np.int64)
        self._period = max(period, 1)
        self._index_shape = idx.shape

    def forward(self, src, idx=None, dst=None, *, n_threads=None):
        """Gather: ``dst[b, c, i] = src[b, idx[b, c, i] (+ src_count if negative), i]``.

        Parameters
        ----------
        src : ndarray
            C-contiguous, prod(outer) * src_count * inner elements of the context's dtype
            (BFLOAT16 also as uint16 raw bits).
        idx : ndarray, optional
            C-contiguous int32/int64 (the context's index type), prod(outer) * idx_count * inner
            elements. None uses the index given to `set_index`.
        dst : ndarray, optional
            Output of src's dtype and idx's size; allocated with idx's shape when None.
        n_threads : int, optional

        Returns
        -------
        dst

        Raises
        ------
        IndexError
            An index outside [-src_count, src_count); names its flat position and value.
        """
        self._require_ready()
        offsets = self._offsets  # one reference: a concurrent set_index cannot pull it away
        cdef int threads = resolve_num_threads(n_threads)
        n = self._outer_size * self._idx_count * self._inner
        src = check_buffer(src, "src", self._src_dtypes(), self._outer_size * self._src_count * self._inner)
        if idx is None:
            if offsets is None:
                raise RuntimeError("GatherElements.forward: idx is None but no index was set "
                                   "(call set_index on a context made with index_const=True)")
            shape = self._index_shape
        else:
            idx = check_buffer(idx, "idx", (self._index_dtype,), n)
            shape = idx.shape
        if dst is None:
            dst = np.empty(shape, dtype=src.dtype)
        else:
            dst = check_buffer(dst, "dst", self._src_dtypes(), n, writeable=True)
            if np.may_share_memory(dst, src) or (idx is not None and np.may_share_memory(dst, idx)):
                raise ValueError("dst: must not overlap src or idx")
        if n == 0:
            return dst
        width = _WIDTH_DTYPE[self._dtype.itemsize]
        if idx is None:
            _run(src.reshape(-1).view(width), offsets, dst.reshape(-1).view(width),
                 self._outer_size, self._src_count, self._inner, self._idx_count, self._period, True, threads)
            return dst
        if self._src_count == 0:
            bad = 1
        else:
            bad = _run(src.reshape(-1).view(width), idx.reshape(-1), dst.reshape(-1).view(width),
                       self._outer_size, self._src_count, self._inner, self._idx_count,
                       self._outer_size, False, threads)
        if bad:
            position, value = _first_bad(idx, self._src_count)
            raise IndexError(f"idx: index {value} at flat position {position} is out of range "
                             f"[-{self._src_count}, {self._src_count})")
        return dst

    def clear(self):
        """Release the context: geometry and analysed index."""
        self._key = None
        self._offsets = None
        self._index_shape = None
        self._outer = ()
        self._outer_size = self._src_count = self._inner = self._idx_count = 0
        self._period = 1


def _as_indices(indices):
    """indices as an int32/int64 array; other integer dtypes widen to int64 (checked)."""
    indices = np.asarray(indices)
    if indices.dtype == np.int32 or indices.dtype == np.int64:
        return indices
    if indices.dtype == np.uint64:  # values past int64's range stay out of range
        return np.minimum(indices, np.uint64(np.iinfo(np.int64).max)).astype(np.int64)
    if indices.dtype.kind in "iu":
        return indices.astype(np.int64)
    raise ValueError(f"indices: expected an integer dtype, got {indices.dtype}")


def gather_elements(data, indices, axis=0, *, out=None, n_threads=None):
    """ONNX GatherElements: ``out[..., j, ...] = data[..., indices[..., j, ...], ...]`` along `axis`.

    Parameters
    ----------
    data : array_like
        Any 1-, 2-, 4- or 8-byte dtype (float32, bfloat16, uint8, int64, float64, ...).
    indices : array_like of int
        Same rank as data; off the axis each size <= data's (a sub-block, as in ONNX and
        PyTorch). Negative values count from the end of the axis.
    axis : int
        Negative values count from the last dimension.
    out : ndarray, optional
        C-contiguous, indices' shape, data's dtype.
    n_threads : int, optional

    Returns
    -------
    ndarray of indices' shape and data's dtype

    Raises
    ------
    IndexError
        An index outside [-size, size) of the axis: names its position, value, axis and size.
    """
    data = np.asarray(data)
    if data.dtype.hasobject or data.dtype.itemsize not in _WIDTH_DTYPE or data.dtype.kind == "V":
        raise ValueError(f"data: expected a 1-, 2-, 4- or 8-byte dtype, got {data.dtype}")
    indices = _as_indices(indices)
    if data.ndim == 0:
        raise ValueError("data: expected an array of rank >= 1, got a scalar")
    if indices.ndim != data.ndim:
        raise ValueError(f"indices: expected rank {data.ndim} (data's), got rank {indices.ndim}")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis: expected an int, got {type(axis).__name__}")
    if not -data.ndim <= axis < data.ndim:
        raise ValueError(f"axis: expected an int in [-{data.ndim}, {data.ndim}), got {axis}")
    axis = int(axis) % data.ndim
    for dim, (n_idx, n_data) in enumerate(zip(indices.shape, data.shape)):
        if dim != axis and n_idx > n_data:
            raise ValueError(f"indices: size {n_idx} of dimension {dim} exceeds data's {n_data} "
                             f"(only axis {axis} may differ)")
    block = tuple(slice(0, n) if dim != axis else slice(None) for dim, n in enumerate(indices.shape))
    src = np.ascontiguousarray(data[block])
    idx = np.ascontiguousarray(indices)
    if out is None:
        out = np.empty(indices.shape, dtype=data.dtype)
    else:
        out = require_array(out, "out")
        if out.shape != indices.shape or out.dtype != data.dtype:
            raise ValueError(f"out: expected shape {indices.shape} and dtype {data.dtype}, "
                             f"got shape {out.shape} and dtype {out.dtype}")
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError("out: expected a writeable C-contiguous array")
        if np.may_share_memory(out, src) or np.may_share_memory(out, idx):
            raise ValueError("out: must not overlap data or indices")
    if out.size == 0:
        return out
    cdef int threads = resolve_num_threads(n_threads)
    src_count = data.shape[axis]
    outer = _checked_size("indices", *indices.shape[:axis])
    inner = _checked_size("indices", *indices.shape[axis + 1:])
    width = _WIDTH_DTYPE[data.dtype.itemsize]
    bad = 1 if src_count == 0 else _run(
        src.reshape(-1).view(width), idx.reshape(-1), out.reshape(-1).view(width),
        outer, src_count, inner, indices.shape[axis], outer, False, threads)
    if bad:
        position, value = _first_bad(idx, src_count)
        where = np.unravel_index(position, indices.shape)
        raise IndexError(f"indices[{', '.join(map(str, map(int, where)))}] = {value} is out of range "
                         f"for axis {axis} with size {src_count}")
    return out
