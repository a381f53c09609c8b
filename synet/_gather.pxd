# cython: language_level=3
"""Private: the C-level GatherElements plan and its runner (the public surface is synet/capi.pxd)."""

ctypedef struct GatherPlan:
    Py_ssize_t outer        # product of the outer dimensions
    Py_ssize_t src_count    # gathered-axis length of src
    Py_ssize_t inner        # product of the dimensions after the axis
    Py_ssize_t idx_count    # gathered-axis length of idx and dst
    int elem_size           # bytes per data element: 1, 2, 4 or 8
    int index_size          # bytes per caller index: 4 (int32) or 8 (int64)
    const void* offsets     # analysed index (normalised src offsets), or NULL
    int offsets_size        # bytes per analysed offset: 4 or 8
    Py_ssize_t period       # outer slices the analysed index covers (b reads slice b % period)
    Py_ssize_t idx_period   # outer slices a raw idx holds (b reads slice b % idx_period), 0: all of them


cdef int gather_run(const GatherPlan* plan, const void* src, const void* idx, void* dst,
                    int n_threads) noexcept nogil
    # dst[b, c, i] = src[b, idx[b, c, i] (+ src_count if negative), i]; idx NULL uses plan.offsets.
    # SYNET_INDEX_ERROR: an index outside [-src_count, src_count) (its dst element is 0);
    # SYNET_VALUE_ERROR: a bad size or pointer; SYNET_NOT_READY: idx NULL and no analysed index.


cdef class GatherElements:
    cdef object _state              # _GatherState, or None before init

    cdef const GatherPlan* plan_of(self) except NULL
