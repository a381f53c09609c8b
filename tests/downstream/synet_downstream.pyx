# cython: boundscheck=False, wraparound=False
"""Runs synet's kernels from another extension through the public Cython API, inside `with nogil`."""

from libc.stdint cimport int64_t, uint16_t

from synet.bf16 cimport (
    bf16_nearest_from_float64, bf16_to_float32, bf16_truncate_from_float64, float32_to_bf16,
)
from synet.capi cimport (
    bf16_round, bf16_widen, deconvolution_buffer_size, deconvolution_plan, deconvolution_run, gather_elements,
    gather_plan, gather_run, quantized_add_plan, quantized_add_run, synet_deconvolution_plan_t,
    synet_gather_plan_t, synet_quantized_add_plan_t,
)


def gather(const float[::1] src, const int64_t[::1] idx, float[::1] dst, Py_ssize_t outer, Py_ssize_t src_count,
           Py_ssize_t inner, Py_ssize_t idx_count, int n_threads=1):
    """A gather of float32 data with int64 indices, without a context; returns the status."""
    cdef int status
    with nogil:
        status = gather_elements(&src[0], &idx[0], &dst[0], outer, src_count, inner, idx_count, 4, 8, n_threads)
    return status


def gather_bad_calls(const float[::1] src, const int64_t[::1] idx, float[::1] dst):
    """Statuses of: NULL src, NULL idx, NULL dst, an element size of 3, an index size of 2, a negative size."""
    return (gather_elements(NULL, &idx[0], &dst[0], 1, 1, 1, 1, 4, 8, 1),
            gather_elements(&src[0], NULL, &dst[0], 1, 1, 1, 1, 4, 8, 1),
            gather_elements(&src[0], &idx[0], NULL, 1, 1, 1, 1, 4, 8, 1),
            gather_elements(&src[0], &idx[0], &dst[0], 1, 1, 1, 1, 3, 8, 1),
            gather_elements(&src[0], &idx[0], &dst[0], 1, 1, 1, 1, 4, 2, 1),
            gather_elements(&src[0], &idx[0], &dst[0], -1, 1, 1, 1, 4, 8, 1))


def gather_nothing_to_do():
    """Statuses of gathers of no element with NULL pointers: outer 0, idx_count 0, inner 0; and with a negative
    size."""
    return (gather_elements(NULL, NULL, NULL, 0, 5, 1, 1, 4, 8, 1),
            gather_elements(NULL, NULL, NULL, 2, 5, 1, 0, 4, 8, 1),
            gather_elements(NULL, NULL, NULL, 2, 5, 0, 1, 4, 8, 1),
            gather_elements(NULL, NULL, NULL, 0, -1, 1, 1, 4, 8, 1))


def quantized_add_nothing_to_do(context):
    """The status of a quantized add of no element (a context of shape (0,)) with NULL pointers."""
    return quantized_add_run(quantized_add_plan(context), NULL, NULL, NULL, 1)


def gather_prepared(context, const float[::1] src, float[::1] dst, int n_threads=2):
    """A gather with the analysed index of a context prepared in Python (set_index)."""
    cdef const synet_gather_plan_t* plan = gather_plan(context)
    cdef int status
    with nogil:
        status = gather_run(plan, &src[0], NULL, &dst[0], n_threads)
    return status


def gather_null_plan(const float[::1] src, float[::1] dst):
    return gather_run(NULL, &src[0], NULL, &dst[0], 1)


def to_bfloat16(const float[::1] x, uint16_t[::1] out):
    cdef Py_ssize_t i
    with nogil:
        for i in range(x.shape[0]):
            out[i] = float32_to_bf16(x[i])


def from_float64(const double[::1] x, uint16_t[::1] out, bint truncate):
    cdef Py_ssize_t i
    with nogil:
        for i in range(x.shape[0]):
            out[i] = bf16_truncate_from_float64(x[i]) if truncate else bf16_nearest_from_float64(x[i])


def from_bfloat16(const uint16_t[::1] x, float[::1] out):
    cdef Py_ssize_t i
    with nogil:
        for i in range(x.shape[0]):
            out[i] = bf16_to_float32(x[i])


def round_array(const float[::1] x, uint16_t[::1] out, int truncate, int n_threads):
    cdef int status
    with nogil:
        status = bf16_round(&x[0], &out[0], x.shape[0], truncate, n_threads)
    return status


def widen_array(const uint16_t[::1] x, float[::1] out, int n_threads):
    cdef int status
    with nogil:
        status = bf16_widen(&x[0], &out[0], x.shape[0], n_threads)
    return status


def quantized_add(context, const unsigned char[::1] a, const unsigned char[::1] b, unsigned char[::1] dst,
                  int n_threads=1):
    """a, b, dst: the raw bytes of the context's tensors."""
    cdef const synet_quantized_add_plan_t* plan = quantized_add_plan(context)
    cdef int status
    with nogil:
        status = quantized_add_run(plan, &a[0], &b[0], &dst[0], n_threads)
    return status


def quantized_add_bad_calls(context):
    """Statuses of: a NULL plan, a NULL operand, a NULL dst."""
    cdef const synet_quantized_add_plan_t* plan = quantized_add_plan(context)
    cdef unsigned char x[64]
    return (quantized_add_run(NULL, x, x, x, 1), quantized_add_run(plan, NULL, x, x, 1),
            quantized_add_run(plan, x, x, NULL, 1))


def deconvolution(context, const unsigned char[::1] src, unsigned char[::1] buf, unsigned char[::1] dst,
                  int n_threads=1):
    """src, dst: the raw bytes of the context's tensors; buf: None or >= the buffer size."""
    cdef const synet_deconvolution_plan_t* plan = deconvolution_plan(context)
    cdef void* pbuf = NULL if buf is None else <void*>&buf[0]
    cdef int status
    with nogil:
        status = deconvolution_run(plan, &src[0], pbuf, &dst[0], n_threads)
    return status


def deconvolution_buf_size(context):
    return deconvolution_buffer_size(deconvolution_plan(context))


def deconvolution_bad_calls(context, const unsigned char[::1] src, unsigned char[::1] buf, unsigned char[::1] dst):
    """Statuses of: a NULL plan, a NULL src, a NULL buf (when one is needed), a NULL dst; the NULL plan's size."""
    cdef const synet_deconvolution_plan_t* plan = deconvolution_plan(context)
    return (deconvolution_run(NULL, &src[0], &buf[0], &dst[0], 1), deconvolution_run(plan, NULL, &buf[0], &dst[0], 1),
            deconvolution_run(plan, &src[0], NULL, &dst[0], 1), deconvolution_run(plan, &src[0], &buf[0], NULL, 1),
            deconvolution_buffer_size(NULL))


def bf16_bad_calls():
    """Statuses of bf16_round and bf16_widen with: a NULL src, a NULL dst, a negative size, and (valid) no
    elements with NULL pointers."""
    cdef float x[4]
    cdef uint16_t raw[4]
    return ((bf16_round(NULL, raw, 4, 0, 1), bf16_round(x, NULL, 4, 0, 1), bf16_round(x, raw, -1, 0, 1),
             bf16_round(NULL, NULL, 0, 0, 1)),
            (bf16_widen(NULL, x, 4, 1), bf16_widen(raw, NULL, 4, 1), bf16_widen(raw, x, -1, 1),
             bf16_widen(NULL, NULL, 0, 1)))
