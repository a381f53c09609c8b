# cython: boundscheck=False, wraparound=False
"""Runs synet's kernels from another extension, entirely inside `with nogil`."""

from libc.stdint cimport int64_t, uint16_t

from synet.bf16 cimport float32_to_bf16, bf16_to_float32
from synet.status cimport SynetStatus
from synet._gather cimport GatherElements, GatherPlan, gather_elements_run


def gather(const float[::1] src, const int64_t[::1] idx, float[::1] dst, Py_ssize_t outer, Py_ssize_t src_count,
           Py_ssize_t inner, Py_ssize_t idx_count, int n_threads=1):
    """A gather of float32 data with int64 indices from a plan made here; returns the status."""
    cdef GatherPlan plan
    cdef SynetStatus status
    plan.outer, plan.src_count, plan.inner, plan.idx_count = outer, src_count, inner, idx_count
    plan.elem_size, plan.index_size = 4, 8
    plan.offsets, plan.offsets_size, plan.period = NULL, 0, 0
    with nogil:
        status = gather_elements_run(&plan, &src[0], &idx[0], &dst[0], n_threads)
    return status


def gather_prepared(GatherElements context, const float[::1] src, float[::1] dst, int n_threads=2):
    """A gather with the analysed index of a context prepared in Python (set_index)."""
    cdef GatherPlan plan = context.plan()
    cdef SynetStatus status
    with nogil:
        status = gather_elements_run(&plan, &src[0], NULL, &dst[0], n_threads)
    return status


def to_bfloat16(const float[::1] x, uint16_t[::1] out):
    cdef Py_ssize_t i
    with nogil:
        for i in range(x.shape[0]):
            out[i] = float32_to_bf16(x[i])


def from_bfloat16(const uint16_t[::1] x, float[::1] out):
    cdef Py_ssize_t i
    with nogil:
        for i in range(x.shape[0]):
            out[i] = bf16_to_float32(x[i])
