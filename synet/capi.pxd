# cython: language_level=3
"""synet's public Cython API: ``from synet.capi cimport ...`` (add ``synet.get_include()`` to the include path).

Plain C functions on pointers, sizes and opaque plan handles. A plan handle comes from a context
prepared in Python (``*_plan(context)``, with the GIL) and runs with ``*_run`` inside ``with nogil``:
the same bits as the context's ``forward``. The handle points into the context: keep the context
alive, and do not call its init, set_index, set_params or clear, while the plan runs.

Every function here that runs returns a status: SYNET_OK, SYNET_VALUE_ERROR (a NULL or unusable
pointer, a bad size, n_threads < 1 or above 1024), SYNET_INDEX_ERROR (an index out of range; its
output element is 0), SYNET_NOT_READY (a plan without what it needs). ABI rules:
docs/cython_api.rst; the signatures are pinned by tests/capi_signatures.txt.
"""

from libc.stdint cimport uint16_t

cdef extern from "src/capi.h" nogil:
    ctypedef struct synet_gather_plan_t:
        pass
    ctypedef struct synet_quantized_add_plan_t:
        pass
    ctypedef struct synet_deconvolution_plan_t:
        pass
    enum:
        SYNET_OK
        SYNET_VALUE_ERROR
        SYNET_INDEX_ERROR
        SYNET_NOT_READY

# GatherElements: dst[b, c, i] = src[b, idx[b, c, i] (+ src_count if negative), i]

cdef const synet_gather_plan_t* gather_plan(object context) except NULL
    # the plan of a synet.GatherElements after init (with its analysed index after set_index)

cdef int gather_run(const synet_gather_plan_t* plan, const void* src, const void* idx, void* dst,
                    int n_threads) noexcept nogil
    # idx NULL: the analysed index of set_index (SYNET_NOT_READY without one)

cdef int gather_elements(const void* src, const void* idx, void* dst, Py_ssize_t outer, Py_ssize_t src_count,
                         Py_ssize_t inner, Py_ssize_t idx_count, int elem_size, int index_size,
                         int n_threads) noexcept nogil
    # one gather without a context: src [outer, src_count, inner], idx and dst [outer, idx_count, inner],
    # elem_size 1, 2, 4 or 8 bytes, index_size 4 (int32) or 8 (int64)

# QuantizedAdd: dst = Quantize(Activate(a' + b'))

cdef const synet_quantized_add_plan_t* quantized_add_plan(object context) except NULL
    # the plan of a synet.QuantizedAdd after init

cdef int quantized_add_run(const synet_quantized_add_plan_t* plan, const void* a, const void* b, void* dst,
                           int n_threads) noexcept nogil

# Deconvolution16b: dst = act(bias + conv_transpose(bf16(src), bf16(weight)))

cdef const synet_deconvolution_plan_t* deconvolution_plan(object context) except NULL
    # the plan of a synet.Deconvolution16b after init and set_params

cdef Py_ssize_t deconvolution_buffer_size(const synet_deconvolution_plan_t* plan) noexcept nogil
    # bytes of scratch deconvolution_run needs in buf (any alignment; 0: buf may be NULL)

cdef int deconvolution_run(const synet_deconvolution_plan_t* plan, const void* src, void* buf, void* dst,
                           int n_threads) noexcept nogil
    # src, dst C-contiguous in the context's layout and types (BF16 as raw uint16 bits)

# BF16 arrays (the inline scalar helpers are in synet/bf16.pxd)

cdef int bf16_round(const float* src, uint16_t* dst, Py_ssize_t n, int truncate, int n_threads) noexcept nogil
    # dst[i] = bfloat16 bits of src[i], nearest-even (truncate 0) or toward zero (1)

cdef int bf16_widen(const uint16_t* src, float* dst, Py_ssize_t n, int n_threads) noexcept nogil
    # dst[i] = the float32 value of bfloat16 bits src[i]
