# cython: boundscheck=False, wraparound=False
"""Runs synet's kernels from another extension, entirely inside `with nogil`."""

from libc.stdint cimport int64_t, uint16_t

from synet.bf16 cimport float32_to_bf16, bf16_to_float32
from synet.status cimport SynetStatus
from synet._gather cimport GatherElements, GatherPlan, gather_elements_run
from synet._quantized_add cimport QuantizedAdd, QuantizedAddPlan, quantized_add_run
from synet.activations cimport activate, ACT_HSWISH, ACT_COUNT
from synet._deconvolution cimport Deconvolution16b, DeconvolutionPlan, deconvolution_run


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


def gather_offsets(const float[::1] src, const int[::1] offsets, float[::1] dst, Py_ssize_t outer,
                   Py_ssize_t src_count, Py_ssize_t idx_count, Py_ssize_t period, int n_threads=1):
    """A gather (inner 1) with analysed offsets made here, valid or not; returns the status."""
    cdef GatherPlan plan
    cdef SynetStatus status
    plan.outer, plan.src_count, plan.inner, plan.idx_count = outer, src_count, 1, idx_count
    plan.elem_size, plan.index_size = 4, 8
    plan.offsets, plan.offsets_size, plan.period = &offsets[0], 4, period
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


# QuantizedAdd: a plan prepared in Python, run without the GIL


def quantized_add_u8(QuantizedAdd context, const unsigned char[::1] a, const unsigned char[::1] b,
        unsigned char[::1] dst, int n_threads=1):
    cdef QuantizedAddPlan plan = context.plan()
    cdef SynetStatus status
    with nogil:
        status = quantized_add_run(&plan, &a[0], &b[0], &dst[0], n_threads)
    return status


def quantized_add_f32(QuantizedAdd context, const float[::1] a, const unsigned char[::1] b, float[::1] dst):
    cdef QuantizedAddPlan plan = context.plan()
    cdef SynetStatus status
    with nogil:
        status = quantized_add_run(&plan, &a[0], &b[0], &dst[0], 2)
    return status


def quantized_add_bad_calls(QuantizedAdd context):
    cdef QuantizedAddPlan plan = context.plan()
    cdef unsigned char x = 0
    null_plan = quantized_add_run(NULL, &x, &x, &x, 1)
    null_ptr = quantized_add_run(&plan, NULL, &x, &x, 1)
    plan.a_type = 1
    bad_type = quantized_add_run(&plan, &x, &x, &x, 1)
    return null_plan, null_ptr, bad_type


def hswish(float x):
    cdef float params[2]
    params[0] = 3.0
    params[1] = 1.0 / 6.0
    return activate(x, ACT_HSWISH, params, 0)


# Deconvolution16b: packed weights of a context prepared in Python, run without the GIL


def deconvolution(Deconvolution16b context, const unsigned char[::1] src, unsigned char[::1] buf,
                  unsigned char[::1] dst, int n_threads=1):
    """src, dst: the raw bytes of the context's tensors; buf: None or >= plan.buf_size bytes."""
    cdef DeconvolutionPlan plan = context.plan()
    cdef void* pbuf = NULL if buf is None else <void*>&buf[0]
    cdef SynetStatus status
    with nogil:
        status = deconvolution_run(&plan, &src[0], pbuf, &dst[0], n_threads)
    return status


def deconvolution_buf_size(Deconvolution16b context):
    return context.plan().buf_size


def deconvolution_bad_calls(Deconvolution16b context, const unsigned char[::1] src, unsigned char[::1] buf,
                            unsigned char[::1] dst):
    """Statuses of: a NULL plan, a NULL src, a NULL buf (when needed), no weights, a bad activation."""
    cdef DeconvolutionPlan plan = context.plan()
    cdef DeconvolutionPlan bad
    null_plan = deconvolution_run(NULL, &src[0], &buf[0], &dst[0], 1)
    null_src = deconvolution_run(&plan, NULL, &buf[0], &dst[0], 1)
    null_buf = deconvolution_run(&plan, &src[0], NULL, &dst[0], 1)
    bad = plan
    bad.weights = NULL
    bad.wdw = NULL
    no_weights = deconvolution_run(&bad, &src[0], &buf[0], &dst[0], 1)
    bad = plan
    bad.act = ACT_COUNT
    bad_act = deconvolution_run(&bad, &src[0], &buf[0], &dst[0], 1)
    return null_plan, null_src, null_buf, no_weights, bad_act


def deconvolution_bad_border_calls(Deconvolution16b context, const unsigned char[::1] src, unsigned char[::1] buf,
                                   unsigned char[::1] dst):
    """Statuses of an exact-borders plan without: its row table, its column table, its FP32 weights."""
    cdef DeconvolutionPlan plan = context.plan()
    cdef DeconvolutionPlan bad
    bad = plan
    bad.border_y = NULL
    no_rows = deconvolution_run(&bad, &src[0], &buf[0], &dst[0], 1)
    bad = plan
    bad.border_x = NULL
    no_columns = deconvolution_run(&bad, &src[0], &buf[0], &dst[0], 1)
    bad = plan
    bad.wexact = NULL
    no_weights = deconvolution_run(&bad, &src[0], &buf[0], &dst[0], 1)
    return plan.exact_borders, no_rows, no_columns, no_weights
