"""GatherElements (ONNX): dst[b, c, i] = src[b, idx[b, c, i] (+ src_count if negative), i].

The context class `GatherElements` keeps the geometry between `init` and `forward` and, with
`index_const`, an analysed copy of the index (synet/_gather_plan.py). `gather_elements` is the
NumPy-style form. The kernels are synet/src/gather.c at the CPU level chosen at import.
"""

cimport cython
cimport numpy as cnp
from cpython.long cimport PyLong_AsLongAndOverflow
from cython.parallel cimport prange
from libc.stdint cimport int64_t
from libc.string cimport memcpy, memset

from synet._csrc cimport (
    SYNET_INDEX_ERROR, SYNET_NOT_READY, SYNET_OK, SYNET_VALUE_ERROR, synet_gather_job, synet_gather_kernels,
    synet_gather_kernels_at,
)
from synet._fastpath cimport data_of, is_operand, is_output, new_array, new_like, overlaps, same_shape
from synet._kernels cimport call_threads, kernel_level, vector_gather_preferred

import numpy as np

from . import _gather_plan as planning
from ._arrays import UINT16, as_array, check_buffer, check_out, internal_error, memory_order, run_in_memory_order
from ._types import BFLOAT16

cnp.import_array()

cdef const synet_gather_kernels* K = synet_gather_kernels_at(kernel_level())
if K == NULL:
    raise ImportError("synet._gather: this build has no gather kernels for this CPU (a native build elsewhere?)")
LEVEL = K.level.decode()
# whether elements load by vpgather (AVX-512 kernels only; see synet._kernels)
cdef bint _VECTOR_GATHER = vector_gather_preferred() and LEVEL == "avx512"
VECTOR_GATHER = bool(_VECTOR_GATHER)

cdef enum:
    PARALLEL_MIN = 1 << 15  # dst elements below which a gather runs on one thread
    NOGIL_MIN = 1 << 10     # dst elements below which releasing the GIL costs more than the gather


cdef inline bint _bytes_fit(Py_ssize_t outer, Py_ssize_t count, Py_ssize_t inner) noexcept nogil:
    """outer·count·inner elements of up to 8 bytes (sizes >= 0) fit a Py_ssize_t, with room to spare (below
    2**59 elements: a product in doubles, not the integer divisions that took 4 % of a 64-element forward): a C
    API caller's sizes whose product wrapped to 0 ran nothing and reported success."""
    return <double>outer * <double>count * <double>inner < 576460752303423488.0   # 2**59


cdef int gather_run(const GatherPlan* plan, const void* src, const void* idx, void* dst, int n_threads) noexcept nogil:
    """Run a plan (see _gather.pxd): the one entry point of the Python and C APIs."""
    cdef synet_gather_job job
    cdef Py_ssize_t t, bad = 0
    cdef bint analysed = idx == NULL
    if plan == NULL or plan.outer < 0 or plan.src_count < 0 or plan.inner < 0 or plan.idx_count < 0 or \
            plan.idx_period < 0 or n_threads < 1:
        return SYNET_VALUE_ERROR
    if plan.elem_size not in (1, 2, 4, 8) or not _bytes_fit(plan.outer, plan.idx_count, plan.inner) or \
            not _bytes_fit(plan.outer, plan.src_count, plan.inner):
        return SYNET_VALUE_ERROR
    job.outer, job.src_count, job.inner, job.idx_count = plan.outer, plan.src_count, plan.inner, plan.idx_count
    if job.outer == 0 or job.idx_count == 0 or job.inner == 0:   # (a product of the others may not fit)
        return SYNET_OK
    if analysed:
        if plan.offsets == NULL or plan.period < 1:
            return SYNET_NOT_READY
        job.idx, job.index_size, job.period, job.offsets = plan.offsets, plan.offsets_size, plan.period, 1
    else:
        job.idx, job.index_size, job.period, job.offsets = idx, plan.index_size, plan.idx_period or plan.outer, 0
    if src == NULL or dst == NULL or job.index_size not in (4, 8):
        return SYNET_VALUE_ERROR
    if plan.src_count == 0:   # every index is out of range: every output element is 0
        memset(dst, 0, <size_t>(job.outer * job.idx_count * job.inner * plan.elem_size))
        return SYNET_INDEX_ERROR
    job.src, job.dst, job.elem_size, job.vector_gather = src, dst, plan.elem_size, _VECTOR_GATHER
    K.prepare(&job)
    if n_threads <= 1 or job.outer * job.idx_count * job.inner < PARALLEL_MIN:
        for t in range(job.ntasks):   # no parallel region to open (one thread's costs two futex calls)
            bad += K.task(&job, t)
    else:
        for t in prange(job.ntasks, schedule="static", num_threads=n_threads):
            bad += K.task(&job, t)
    return SYNET_INDEX_ERROR if bad else SYNET_OK


@cython.final
@cython.no_gc
cdef class _GatherState:
    """An initialised context, immutable: forward reads it once, so a concurrent init or set_index
    (which install a new one) never changes what a running forward sees."""

    cdef GatherPlan plan
    cdef object geometry           # planning.GatherGeometry
    cdef object dtype, alt_dtype   # src / dst dtypes (alt: uint16 bits of bfloat16, else None)
    cdef object index_dtype
    cdef tuple dtypes              # (dtype, alt) for the error messages
    cdef object offsets            # analysed index, or None
    cdef tuple index_shape         # the shape set_index was given
    cdef Py_ssize_t src_size, idx_size


cdef _GatherState _new_state(geometry, offsets=None, Py_ssize_t period=0, tuple index_shape=None):
    cdef _GatherState st = _GatherState.__new__(_GatherState)
    st.geometry = geometry
    st.dtype = geometry.dtype
    st.alt_dtype = _raw_bits_of(geometry.dtype)
    st.dtypes = _dtypes_with_bits(geometry.dtype)
    st.index_dtype = geometry.index_dtype
    st.src_size, st.idx_size = geometry.src_size, geometry.idx_size
    st.plan.outer, st.plan.src_count = geometry.outer_size, geometry.src_count
    st.plan.inner, st.plan.idx_count = geometry.inner, geometry.idx_count
    st.plan.elem_size, st.plan.index_size = geometry.dtype.itemsize, geometry.index_dtype.itemsize
    st.offsets, st.index_shape = offsets, index_shape
    st.plan.offsets, st.plan.offsets_size, st.plan.period, st.plan.idx_period = NULL, 0, 0, 0
    if offsets is not None:
        st.plan.offsets = data_of(offsets)
        st.plan.offsets_size = offsets.dtype.itemsize
        st.plan.period = period
    return st


cdef inline _GatherState _ready(GatherElements context):
    if context._state is None:
        raise RuntimeError("GatherElements: call init() before using the context")
    return <_GatherState>context._state


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

    def __init__(self, data_type=None, index_type=None, index_const=False, index_users=1,
                 outer=None, src_count=None, inner=None, idx_count=None):
        self._state = None
        if data_type is not None or index_type is not None or outer is not None or \
                src_count is not None or inner is not None or idx_count is not None:
            self.init(data_type, index_type, index_const, index_users, outer, src_count, inner, idx_count)

    def init(self, data_type, index_type, index_const, index_users, outer, src_count, inner, idx_count):
        """(Re)initialise: src is [prod(outer), src_count, inner], idx and dst [prod(outer), idx_count, inner].

        Identical arguments keep the context (and its analysed index); others rebuild it.

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
        """
        geometry = planning.geometry(data_type, index_type, index_const, index_users, outer, src_count, inner,
                                     idx_count)
        state = self._state
        if state is not None and (<_GatherState>state).geometry == geometry:
            return
        self._state = _new_state(geometry)

    def enable(self):
        """True when `init` has built the context and `forward` may be called."""
        return self._state is not None

    def internal_buffer_size(self):
        """Bytes held by the context: the analysed index (0 without `set_index`)."""
        state = self._state
        return 0 if state is None or (<_GatherState>state).offsets is None else (<_GatherState>state).offsets.nbytes

    @property
    def index_users(self):
        """Contexts sharing the constant index, as given to `init` (None before `init`)."""
        return None if self._state is None else (<_GatherState>self._state).geometry.index_users

    @property
    def level(self):
        """The CPU level the kernels run at, e.g. ``"avx512"``."""
        return LEVEL

    def set_index(self, idx):
        """Validate and analyse a constant index once; afterwards `forward(src)` needs no idx.

        Negative indices are normalised, offsets ``c' * inner + i`` precomputed (int32 when
        they fit) and only the trailing outer slices over which the index differs are kept.

        Parameters
        ----------
        idx : ndarray
            C-contiguous, the context's index type, prod(outer)·idx_count·inner elements.

        Raises
        ------
        IndexError
            The first index outside [-src_count, src_count): its flat position and value.
        """
        cdef _GatherState st = _ready(self)
        if not st.geometry.index_const:
            raise RuntimeError("GatherElements.set_index: the context was made with index_const=False")
        idx = check_buffer(idx, "idx", (st.index_dtype,), st.idx_size)
        offsets, period = planning.analyse_index(st.geometry, idx)   # (NumPy releases the GIL in there)
        new = _new_state(st.geometry, offsets, period, idx.shape)
        # an init or clear meanwhile (another thread) replaced the state these offsets fit: the index would undo
        # it (the test and the store run without Python code between them, under the GIL)
        if self._state is not st:
            raise RuntimeError("GatherElements.set_index: the context was re-initialised during the call")
        self._state = new

    cdef const GatherPlan* plan_of(self) except NULL:
        """The context's gather as a C-level plan (with its analysed index, if set)."""
        return &_ready(self).plan

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
            Output of the context's dtype (BFLOAT16 also as uint16 raw bits) and idx's size; allocated with idx's
            shape when None (bfloat16 for a BFLOAT16 context, src given as bfloat16 or as uint16 bits).
        n_threads : int, optional

        Returns
        -------
        dst

        Raises
        ------
        IndexError
            An index outside [-src_count, src_count); names its flat position and value.
        """
        cdef _GatherState st = _ready(self)
        cdef int threads = call_threads(n_threads)
        cdef GatherPlan plan = st.plan
        cdef int status
        if not is_operand(src, st.dtype, st.alt_dtype, st.src_size):  # else check_buffer raises
            check_buffer(src, "src", st.dtypes, st.src_size)
        if idx is None:
            if st.offsets is None:
                raise RuntimeError("GatherElements.forward: idx is None but no index was set "
                                   "(call set_index on a context made with index_const=True)")
            shape = st.index_shape
        else:
            if not is_operand(idx, st.index_dtype, None, st.idx_size):
                check_buffer(idx, "idx", (st.index_dtype,), st.idx_size)
            shape = idx.shape
        if dst is None:   # (bfloat16 for uint16 bits of a BFLOAT16 context: what synet allocates for BF16)
            dst = new_like(st.dtype, shape)
        else:
            if not is_output(dst, st.dtype, st.alt_dtype, st.idx_size):
                check_buffer(dst, "dst", st.dtypes, st.idx_size, writeable=True)
            if overlaps(dst, src) or overlaps(dst, idx):
                raise ValueError("dst: must not overlap src or idx")
        cdef const void* ps = data_of(src)
        cdef const void* pi = NULL if idx is None else data_of(idx)
        cdef void* pd = data_of(dst)
        if st.idx_size < NOGIL_MIN:
            status = gather_run(&plan, ps, pi, pd, threads)
        else:
            with nogil:
                status = gather_run(&plan, ps, pi, pd, threads)
        if status == SYNET_INDEX_ERROR:
            raise planning.index_error(idx, st.geometry.src_count)
        if status != SYNET_OK:
            raise internal_error("GatherElements.forward", status)
        return dst

    def clear(self):
        """Release the context: geometry and analysed index."""
        self._state = None

    def __reduce__(self):
        """Pickles init's arguments and the constant index (the slices set_index kept, as int64 indices),
        never the analysed offsets; unpickling re-runs init and set_index."""
        if self._state is None:
            return _restore, (PICKLE_VERSION, None, None, None)
        cdef _GatherState st = <_GatherState>self._state
        g = st.geometry
        args = (g.dtype, g.index_dtype, g.index_const, g.index_users, g.outer, g.src_count, g.inner, g.idx_count)
        index = None
        if st.offsets is not None:  # the kept slices, as indices: set_index of their tiling gives the same state
            index = planning.index_of_offsets(st.offsets, g, st.plan.period)
        return _restore, (PICKLE_VERSION, args, index, st.index_shape)


PICKLE_VERSION = 1


def _restore(version, args, index, index_shape):
    """Rebuilds a pickled GatherElements (see GatherElements.__reduce__); ValueError / TypeError naming
    what does not fit for a state it did not make."""
    if version != PICKLE_VERSION:
        raise ValueError(f"GatherElements pickle: state version {version!r} is not {PICKLE_VERSION} "
                         f"(made by another synet version)")
    context = GatherElements()
    if args is not None:
        if not isinstance(args, tuple) or len(args) != 8:
            raise ValueError(f"GatherElements pickle: expected 8 init arguments, got {args!r:.80}")
        context.init(*args)
        if index is not None:
            geometry = (<_GatherState>context._state).geometry
            if not geometry.index_const:
                raise ValueError("GatherElements pickle: an index for a context made with index_const=False")
            restored = planning.index_for_set_index(index, geometry, index_shape)
            if isinstance(restored, tuple):   # the analysed state itself
                offsets, period, shape = restored
                context._state = _new_state(geometry, offsets, period, shape)
            else:
                context.set_index(restored)
        elif index_shape is not None:
            raise ValueError("GatherElements pickle: an index shape without an index")
    return context


cdef inline bint _axis_fits(object axis, int nd, int below) noexcept:
    """Whether the int `axis` is in [-nd, below), without raising for one beyond a C long (2**70 reached
    an OverflowError, and "Exception ignored" from the noexcept fast path, instead of the ValueError)."""
    cdef int overflow = 0
    cdef long value = PyLong_AsLongAndOverflow(axis, &overflow)
    return overflow == 0 and -nd <= value < below


cdef inline int _axis_in_range(long axis, int nd) noexcept:
    """`axis` in [-nd, nd) as an index in [0, nd): the modules divide as C does (cdivision), where -1 % nd
    is -1, which read the size before the shape's first (gather_elements(x, i, -1) of equal shapes raised
    a bogus IndexError or crashed)."""
    return <int>(axis + nd if axis < 0 else axis)


cdef bint _same_block(data, indices, axis) noexcept:
    """gather_elements' common call, checked without Python-level code: C-contiguous ndarrays of the
    same shape off the axis, data of a builtin 1/2/4/8-byte dtype (or bfloat16), int32/int64 indices, an
    int axis in range. Anything else takes the general path (with its checks and messages)."""
    cdef int nd, ax, d, t
    if not (cnp.PyArray_Check(data) and cnp.PyArray_Check(indices) and type(axis) is int):
        return False
    nd = cnp.PyArray_NDIM(<cnp.ndarray>data)
    if nd < 1 or nd != cnp.PyArray_NDIM(<cnp.ndarray>indices) or not _axis_fits(axis, nd, nd):
        return False
    if not (cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>data) and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>indices)):
        return False
    t = cnp.PyArray_TYPE(<cnp.ndarray>indices)
    if (t != cnp.NPY_INT64 and t != cnp.NPY_INT32) or not cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>indices):
        return False
    t = cnp.PyArray_TYPE(<cnp.ndarray>data)
    if not ((t < cnp.NPY_OBJECT and cnp.PyArray_ITEMSIZE(<cnp.ndarray>data) in (1, 2, 4, 8)) or
            (<cnp.ndarray>data).dtype is BFLOAT16):
        return False
    ax = _axis_in_range(axis, nd)
    for d in range(nd):
        if d != ax and cnp.PyArray_DIMS(<cnp.ndarray>data)[d] != cnp.PyArray_DIMS(<cnp.ndarray>indices)[d]:
            return False
    return True


cdef object _gather_in_memory_order(data, indices, axis, out, n_threads):
    """gather_elements of ndarrays laid out alike in a transposed order of their axes (see memory_order: an
    NHWC tensor seen as NCHW) on their C-ordered views, into `out` or a result laid out alike; None where
    they lie otherwise, or where a check fails (the caller then raises, its message naming its shapes)."""
    if not (cnp.PyArray_Check(data) and cnp.PyArray_Check(indices) and type(axis) is int):
        return None
    cdef int nd = cnp.PyArray_NDIM(<cnp.ndarray>data)
    if nd < 2 or cnp.PyArray_NDIM(<cnp.ndarray>indices) != nd or not _axis_fits(axis, nd, nd):
        return None
    order = memory_order(indices)
    if order is None or order == tuple(range(nd)) or not data.transpose(order).flags.c_contiguous:
        return None
    try:
        return run_in_memory_order(order, lambda d, i, o: gather_elements(d, i, order.index(axis % nd), out=o,
                                                                          n_threads=n_threads),
                                   (data, indices), out, indices.shape)
    except (ValueError, IndexError):
        return None


cdef int _broadcast_axes(indices, int ax) noexcept:
    """How many leading axes before `ax` the index is broadcast along (stride 0: np.broadcast_to, torch's
    expand of an index over the batch); they are gathered by reading one index slice for all of them
    (materialising a [1, 1024, 256] index expanded to batch 8 took 4x the gather)."""
    cdef int d = 0
    while d < ax and cnp.PyArray_STRIDES(<cnp.ndarray>indices)[d] == 0 and cnp.PyArray_DIMS(<cnp.ndarray>indices)[d]:
        d += 1
    return d


cdef inline object _raw_bits_of(dtype):
    """uint16 for bfloat16 elements (their raw bits are taken as they are), else None."""
    return UINT16 if dtype is BFLOAT16 else None


cdef inline tuple _dtypes_with_bits(dtype):
    """The dtypes an array of `dtype` elements may be given as: itself, and uint16 raw bits for bfloat16."""
    return (BFLOAT16, UINT16) if dtype is BFLOAT16 else (dtype,)


cdef object _out_of_range(where, value, int axis, Py_ssize_t src_count):
    return IndexError(f"indices[{', '.join(map(str, map(int, where)))}] = {value} is out of range "
                      f"for axis {axis} with size {src_count}")


cdef inline void _copy_row(const char* src, const int64_t* rows, char* dst, Py_ssize_t r, Py_ssize_t idx_count,
                           Py_ssize_t src_count, Py_ssize_t row_bytes) noexcept nogil:
    """dst row r = src row (r // idx_count) * src_count + rows[r], for rows already in [0, src_count)."""
    memcpy(dst + r * row_bytes, src + ((r // idx_count) * src_count + rows[r]) * row_bytes, row_bytes)


cdef void _copy_rows(const char* src, const int64_t* rows, char* dst, Py_ssize_t n_rows, Py_ssize_t idx_count,
                     Py_ssize_t src_count, Py_ssize_t row_bytes, int n_threads) noexcept nogil:
    """_copy_row for every row, on one thread without opening a parallel region."""
    cdef Py_ssize_t r
    if n_threads <= 1:
        for r in range(n_rows):
            _copy_row(src, rows, dst, r, idx_count, src_count, row_bytes)
    else:
        for r in prange(n_rows, schedule="static", num_threads=n_threads):
            _copy_row(src, rows, dst, r, idx_count, src_count, row_bytes)


cdef object _gather_rows(data, indices, axis, out, int threads):
    """gather_elements with an index constant along every axis after `axis` (stride 0 there: a row index
    broadcast by np.broadcast_to or torch's expand): ``out[o, j, :] = data[o, indices[o, j, 0], :]``, whole
    rows copied; None for any other index (and for sub-blocks). Materialising such an index and gathering
    element by element took 8x NumPy's fancy indexing (8 x 1024 rows of 256 float32: 2.06 ms, 0.25)."""
    if not (cnp.PyArray_Check(indices) and type(axis) is int):
        return None
    cdef int nd = cnp.PyArray_NDIM(<cnp.ndarray>indices), ax, d
    if not _axis_fits(axis, nd, nd - 1) or axis == -1:
        return None
    ax = _axis_in_range(axis, nd)
    cdef cnp.npy_intp* dims = cnp.PyArray_DIMS(<cnp.ndarray>indices)
    cdef Py_ssize_t inner = 1
    for d in range(ax + 1, nd):
        if dims[d] > 1 and cnp.PyArray_STRIDES(<cnp.ndarray>indices)[d] != 0:
            return None
        inner *= dims[d]
    if inner < 2:
        return None
    given = indices[(slice(None),) * (ax + 1) + (0,) * (nd - ax - 1)]
    rows = planning.as_indices(given)
    data = as_array(data, "data")
    planning.functional_geometry(data, indices, axis)   # its errors, as the general path raises them
    for d in range(nd):
        if d != ax and dims[d] != cnp.PyArray_DIMS(<cnp.ndarray>data)[d]:
            return None   # a sub-block: the general path
    cdef Py_ssize_t src_count = data.shape[ax]
    rows = np.array(rows, np.int64)                     # normalised in place: never the caller's memory
    if ((rows < -src_count) | (rows >= src_count)).any():
        position = planning.first_bad(rows, src_count)[0]
        where = np.unravel_index(position, rows.shape)
        raise _out_of_range(where + (0,) * (nd - ax - 1), given[where], ax, src_count)
    rows[rows < 0] += src_count
    src = np.ascontiguousarray(data)
    if out is None:
        out = new_array(data.dtype, nd, cnp.PyArray_DIMS(<cnp.ndarray>indices))
    else:
        out = check_out(out, indices.shape, _dtypes_with_bits(data.dtype), {"data": src, "indices": indices})
    cdef Py_ssize_t n_rows = rows.size, idx_count = indices.shape[ax]
    cdef Py_ssize_t row_bytes = cnp.PyArray_NBYTES(<cnp.ndarray>out) // max(n_rows, 1)
    cdef int n_threads = threads if cnp.PyArray_SIZE(<cnp.ndarray>out) >= PARALLEL_MIN else 1
    cdef const char* ps = <const char*>data_of(src)
    cdef const int64_t* pr = <const int64_t*>data_of(rows)
    cdef char* pd = <char*>data_of(out)
    if n_rows == 0 or row_bytes == 0:
        return out
    with nogil:
        _copy_rows(ps, pr, pd, n_rows, idx_count, src_count, row_bytes, n_threads)
    return out


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
        Indices' shape, data's dtype (uint16 raw bits for bfloat16 data), C-contiguous or laid out as
        transposed data and indices are.
    n_threads : int, optional

    Returns
    -------
    ndarray of indices' shape and data's dtype, laid out as data and indices when they lie in the same
    other order of their axes (channels-last seen as NCHW), else C-ordered

    Raises
    ------
    IndexError
        An index outside [-size, size) of the axis: names its position, value, axis and size.

    Examples
    --------
    >>> data = np.array([[1, 2], [3, 4]], np.float32)
    >>> gather_elements(data, np.array([[0, 0], [1, 0]]), axis=1)
    array([[1., 1.],
           [4., 3.]], dtype=float32)
    >>> gather_elements(data, np.array([[-1, 0]]), axis=0)
    array([[3., 2.]], dtype=float32)
    """
    cdef int threads = call_threads(n_threads)
    cdef GatherPlan plan
    cdef int status, d, ax = 0, broadcast = 0
    cdef Py_ssize_t period = 0   # outer slices the index holds (0: all of them)
    given = None                 # the caller's indices where they were converted
    if _same_block(data, indices, axis):   # the common call: whole arrays, checked on the C API
        ax = _axis_in_range(axis, cnp.PyArray_NDIM(<cnp.ndarray>data))
        src, idx = data, indices
    else:
        # a transposed pair gathers as it lies (copying it to C order took 10x the gather)
        result = _gather_in_memory_order(data, indices, axis, out, n_threads)
        if result is None:
            result = _gather_rows(data, indices, axis, out, threads)
        if result is not None:
            return result
        data = as_array(data, "data")
        given = as_array(indices, "indices")   # (as_indices clamps uint64 values past int64: errors name given's)
        indices = planning.as_indices(given)
        axis, block = planning.functional_geometry(data, indices, axis)
        ax = axis
        src = np.ascontiguousarray(data[block])
        broadcast = _broadcast_axes(indices, ax)
        idx = np.ascontiguousarray(indices[(0,) * broadcast])   # the slices an outer broadcast repeats, once
        if broadcast:
            period = 1
            for d in range(broadcast, ax):
                period *= cnp.PyArray_DIMS(<cnp.ndarray>indices)[d]
    cdef cnp.npy_intp* shape = cnp.PyArray_DIMS(<cnp.ndarray>indices)
    cdef object dtype = (<cnp.ndarray>data).dtype
    if out is None:
        out = new_array(dtype, cnp.PyArray_NDIM(<cnp.ndarray>indices), shape)
    elif not (is_output(out, dtype, _raw_bits_of(dtype), cnp.PyArray_SIZE(<cnp.ndarray>indices))
              and same_shape(out, indices) and not overlaps(out, src) and not overlaps(out, idx)):
        out = check_out(out, indices.shape, _dtypes_with_bits(dtype), {"data": src, "indices": idx})   # raises
    if cnp.PyArray_SIZE(<cnp.ndarray>out) == 0:
        return out
    src_count = cnp.PyArray_DIMS(<cnp.ndarray>data)[ax]
    plan.outer = plan.inner = 1
    for d in range(ax):
        plan.outer *= shape[d]
    for d in range(ax + 1, cnp.PyArray_NDIM(<cnp.ndarray>indices)):
        plan.inner *= shape[d]
    plan.src_count, plan.idx_count = src_count, shape[ax]
    plan.elem_size, plan.index_size = cnp.PyArray_ITEMSIZE(<cnp.ndarray>data), cnp.PyArray_ITEMSIZE(<cnp.ndarray>idx)
    plan.offsets, plan.offsets_size, plan.period, plan.idx_period = NULL, 0, 0, period
    cdef const void* ps = data_of(src)
    cdef const void* pi = data_of(idx)
    cdef void* pd = data_of(out)
    if cnp.PyArray_SIZE(<cnp.ndarray>out) < NOGIL_MIN:
        status = gather_run(&plan, ps, pi, pd, threads)
    else:
        with nogil:
            status = gather_run(&plan, ps, pi, pd, threads)
    if status == SYNET_INDEX_ERROR:   # (a broadcast index's first bad one is in its first copy, at the same place)
        where = np.unravel_index(planning.first_bad(idx, src_count)[0], indices.shape)
        raise _out_of_range(where, (indices if given is None else given)[where], ax, src_count)
    if status != SYNET_OK:
        raise internal_error("gather_elements", status)
    return out
