# cython: language_level=3
"""Public C-level API of GatherElements: ``from synet._gather cimport ...``.

A `GatherPlan` describes one gather; `gather_elements_run` executes it without the GIL and
returns a `synet.status` code. Build a plan yourself, or take the prepared one of a
Python-made context with ``(<GatherElements>context).plan()`` (it then points at the
context's analysed index: keep the context alive and do not re-index it while you run).
"""

from synet.status cimport SynetStatus


ctypedef struct GatherPlan:
    Py_ssize_t outer        # product of the outer dimensions
    Py_ssize_t src_count    # gathered-axis length of src
    Py_ssize_t inner        # product of the dimensions after the axis
    Py_ssize_t idx_count    # gathered-axis length of idx and dst
    int elem_size           # bytes per data element: 1, 2, 4 or 8
    int index_size          # bytes per caller index: 4 (int32) or 8 (int64)
    const void *offsets     # analysed index (normalised src offsets), or NULL
    int offsets_size        # bytes per analysed offset: 4 or 8
    Py_ssize_t period       # outer slices the analysed index covers (b reads slice b % period)


cdef SynetStatus gather_elements_run(const GatherPlan *plan, const void *src, const void *idx, void *dst,
                                     int n_threads) noexcept nogil
    # dst[b, c, i] = src[b, idx[b, c, i] (+ src_count if negative), i]; idx NULL uses plan.offsets.
    # SYNET_INDEX_ERROR: an index outside [-src_count, src_count) (its dst element is 0);
    # SYNET_VALUE_ERROR: a bad size or pointer; SYNET_NOT_READY: idx NULL and no analysed index.


cdef class GatherElements:
    cdef object _dtype          # dtype of src/dst elements
    cdef object _index_dtype    # int32 or int64
    cdef tuple _key             # init's arguments, normalised
    cdef tuple _outer
    cdef Py_ssize_t _outer_size, _src_count, _inner, _idx_count
    cdef bint _index_const
    cdef Py_ssize_t _index_users
    cdef tuple _analysed        # (offsets array, period, index shape) from set_index, or None

    cdef GatherPlan plan(self) except *
    cdef _require_ready(self)
    cdef _src_dtypes(self)
