"""synet's public Cython API (declared in synet/capi.pxd): thin, stable wrappers of the private runners."""

from libc.stdint cimport uint16_t, uint32_t

from synet._csrc cimport SYNET_MAX_THREADS, synet_deconv_plan, synet_qadd_plan
from synet._deconvolution cimport Deconvolution16b, deconv_run
from synet._gather cimport GatherElements, GatherPlan, gather_run as _gather_run
from synet._kernels cimport bf16_round_array, bf16_widen_array
from synet._quantized_add cimport QuantizedAdd, qadd_run


cdef inline bint bad_threads(int n_threads) noexcept nogil:
    return n_threads < 1 or n_threads > SYNET_MAX_THREADS


cdef const synet_gather_plan_t* gather_plan(object context) except NULL:
    if not isinstance(context, GatherElements):
        raise TypeError(f"context: expected a synet.GatherElements, got {type(context).__name__}")
    return <const synet_gather_plan_t*>(<GatherElements>context).plan_of()


cdef int gather_run(const synet_gather_plan_t* plan, const void* src, const void* idx, void* dst,
                    int n_threads) noexcept nogil:
    if bad_threads(n_threads):
        return SYNET_VALUE_ERROR
    return _gather_run(<const GatherPlan*>plan, src, idx, dst, n_threads)


cdef int gather_elements(const void* src, const void* idx, void* dst, Py_ssize_t outer, Py_ssize_t src_count,
                         Py_ssize_t inner, Py_ssize_t idx_count, int elem_size, int index_size,
                         int n_threads) noexcept nogil:
    cdef GatherPlan plan
    plan.outer, plan.src_count, plan.inner, plan.idx_count = outer, src_count, inner, idx_count
    plan.elem_size, plan.index_size = elem_size, index_size
    plan.offsets, plan.offsets_size, plan.period, plan.idx_period = NULL, 0, 0, 0
    if bad_threads(n_threads) or (idx == NULL and outer != 0 and idx_count != 0 and inner != 0):
        return SYNET_VALUE_ERROR
    # (with nothing to gather the pointers may be NULL, as bf16_round's may: _gather_run checks the sizes and
    # returns before it looks at them)
    return _gather_run(&plan, src, idx, dst, n_threads)


cdef const synet_quantized_add_plan_t* quantized_add_plan(object context) except NULL:
    if not isinstance(context, QuantizedAdd):
        raise TypeError(f"context: expected a synet.QuantizedAdd, got {type(context).__name__}")
    return <const synet_quantized_add_plan_t*>(<QuantizedAdd>context).plan_of()


cdef int quantized_add_run(const synet_quantized_add_plan_t* plan, const void* a, const void* b, void* dst,
                           int n_threads) noexcept nogil:
    if bad_threads(n_threads):
        return SYNET_VALUE_ERROR
    return qadd_run(<const synet_qadd_plan*>plan, a, b, dst, n_threads)


cdef const synet_deconvolution_plan_t* deconvolution_plan(object context) except NULL:
    if not isinstance(context, Deconvolution16b):
        raise TypeError(f"context: expected a synet.Deconvolution16b, got {type(context).__name__}")
    return <const synet_deconvolution_plan_t*>(<Deconvolution16b>context).plan_of()


cdef Py_ssize_t deconvolution_buffer_size(const synet_deconvolution_plan_t* plan) noexcept nogil:
    return 0 if plan == NULL else (<const synet_deconv_plan*>plan).buf_size


cdef int deconvolution_run(const synet_deconvolution_plan_t* plan, const void* src, void* buf, void* dst,
                           int n_threads) noexcept nogil:
    if bad_threads(n_threads):
        return SYNET_VALUE_ERROR
    return deconv_run(<const synet_deconv_plan*>plan, src, buf, dst, n_threads)


cdef int bf16_round(const float* src, uint16_t* dst, Py_ssize_t n, int truncate, int n_threads) noexcept nogil:
    if n < 0 or (n > 0 and (src == NULL or dst == NULL)) or bad_threads(n_threads):
        return SYNET_VALUE_ERROR
    bf16_round_array(<const uint32_t*>src, <char*>dst, n, 2, truncate != 0, n_threads)
    return SYNET_OK


cdef int bf16_widen(const uint16_t* src, float* dst, Py_ssize_t n, int n_threads) noexcept nogil:
    if n < 0 or (n > 0 and (src == NULL or dst == NULL)) or bad_threads(n_threads):
        return SYNET_VALUE_ERROR
    bf16_widen_array(src, <uint32_t*>dst, n, n_threads, False)
    return SYNET_OK
