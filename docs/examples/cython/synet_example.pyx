# cython: boundscheck=False, wraparound=False
"""Runs synet's kernels from Cython, without the GIL, through synet's public Cython API."""

from libc.stdint cimport int64_t, uint16_t
from libc.stdlib cimport free, malloc

import math

import synet

from synet.bf16 cimport bf16_to_float32, float32_to_bf16
from synet.capi cimport (
    SYNET_OK, deconvolution_buffer_size, deconvolution_plan, deconvolution_run,
    gather_elements, quantized_add_plan, quantized_add_run, synet_deconvolution_plan_t,
    synet_quantized_add_plan_t,
)


def gather_rows(const float[:, ::1] src, const int64_t[:, ::1] idx, float[:, ::1] dst):
    """dst[r, c] = src[r, idx[r, c]]: one gather without a context (float32 data, int64 indices)."""
    cdef int status
    # the kernel trusts the sizes it is given: the arrays must be as large as they say (the caller's part)
    if idx.shape[0] != src.shape[0] or dst.shape[0] != idx.shape[0] or dst.shape[1] != idx.shape[1]:
        raise ValueError("gather_rows: idx and dst need src's rows, dst idx's columns")
    with nogil:
        status = gather_elements(&src[0, 0], &idx[0, 0], &dst[0, 0], src.shape[0], src.shape[1], 1,
                                 idx.shape[1], 4, 8, 1)
    return status


def add_rows(context, const unsigned char[:, ::1] a, const unsigned char[:, ::1] b, unsigned char[:, ::1] dst):
    """Runs a QuantizedAdd prepared in Python on every row: many small adds, one GIL release."""
    cdef const synet_quantized_add_plan_t* plan = quantized_add_plan(context)  # with the GIL
    cdef Py_ssize_t r
    cdef int status = SYNET_OK
    if not a.shape[1] == b.shape[1] == dst.shape[1] == math.prod(context.shape) or \
            not a.shape[0] == b.shape[0] == dst.shape[0]:
        raise ValueError("add_rows: a, b and dst need rows of the context's shape, as many of each")
    with nogil:
        for r in range(a.shape[0]):
            status = quantized_add_run(plan, &a[r, 0], &b[r, 0], &dst[r, 0], 1)
            if status != SYNET_OK:
                break
    return status


def deconvolve(context, const float[::1] src, float[::1] dst, int n_threads=1):
    """Runs a Deconvolution16b prepared in Python (init + set_params), with a scratch buffer of its own."""
    cdef const synet_deconvolution_plan_t* plan = deconvolution_plan(context)  # with the GIL
    cdef Py_ssize_t size = deconvolution_buffer_size(plan)                     # 0: no buffer needed
    cdef void* buf
    cdef int status
    conv = context.conv                                                        # float32 src and dst
    if conv.src_type != synet.DataType.FLOAT32 or conv.dst_type != synet.DataType.FLOAT32 or \
            src.shape[0] != context.batch * conv.src_c * conv.src_h * conv.src_w or \
            dst.shape[0] != context.batch * conv.dst_c * conv.dst_h * conv.dst_w:
        raise ValueError("deconvolve: src and dst need float32 and the context's sizes")
    buf = malloc(size) if size > 0 else NULL
    if size > 0 and buf == NULL:
        raise MemoryError()
    with nogil:
        status = deconvolution_run(plan, &src[0], buf, &dst[0], n_threads)
    free(buf)
    return status


def bf16_round_trip(const float[::1] x, float[::1] out):
    """out[i] = x[i] rounded to bfloat16 (nearest-even) and widened back, by synet's inline helpers."""
    cdef Py_ssize_t i
    cdef uint16_t bits
    with nogil:
        for i in range(x.shape[0]):
            bits = float32_to_bf16(x[i])
            out[i] = bf16_to_float32(bits)
