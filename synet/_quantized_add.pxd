# cython: language_level=3
"""Private: QuantizedAdd's C-level runner and context (the public surface is synet/capi.pxd)."""

from synet._csrc cimport synet_qadd_plan


cdef int qadd_run(const synet_qadd_plan* plan, const void* a, const void* b, void* dst, int n_threads) noexcept nogil
    # dst = Quantize(Activate(a' + b')) over plan.size outputs; a, b, dst hold the plan's types.
    # SYNET_VALUE_ERROR: a NULL plan or pointer, bad types, mode or geometry; SYNET_NOT_READY: a lookup
    # plan without its table.


cdef class QuantizedAdd:
    cdef object _state              # _QaddState, or None before init

    cdef const synet_qadd_plan* plan_of(self) except NULL
