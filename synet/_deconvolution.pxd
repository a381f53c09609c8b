# cython: language_level=3
"""Private: Deconvolution16b's C-level runner and context (the public surface is synet/capi.pxd)."""

from synet._csrc cimport synet_deconv_plan


cdef int deconv_run(const synet_deconv_plan* plan, const void* src, void* buf, void* dst, int n_threads) noexcept nogil
    # dst = act(bias + conv_transpose(bf16(src), bf16(weight))) for plan.batch images; src and dst
    # C-contiguous in the plan's layout and types (BF16 as raw uint16 bits); buf: plan.buf_size bytes.
    # SYNET_VALUE_ERROR: a NULL plan, src or dst, a NULL buf when plan.buf_size > 0, a bad implementation,
    # activation, size or table, or a kernel this CPU / process cannot run; SYNET_NOT_READY: no weights.


cdef class Deconvolution16b:
    cdef object _state             # _State, or None before init
    cdef object _lock              # serialises init / set_params / clear (forward reads _state once)

    cdef const synet_deconv_plan* plan_of(self) except NULL
