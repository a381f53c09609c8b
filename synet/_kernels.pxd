# cython: language_level=3
"""Private: what the op modules take from synet's runtime core (synet/_kernels.pyx)."""

from libc.stdint cimport uint16_t, uint32_t

cdef int kernel_level() noexcept nogil
    # the CPU level kernels run at: the CPU's best, capped by SYNET_MAX_ISA (read at import)

cdef int amx_ready() noexcept nogil
    # 1 when AMX kernels may run: the level allows them and Linux granted the tile state (asked once,
    # the first time this is called)

cdef bint bf16_dot_preferred() noexcept nogil
    # whether deconvolutions off AMX use the vdpbf16ps micro-kernel (the level has it, and this CPU's dot
    # products outpace its FP32 FMAs, or SYNET_BF16_DOT=1)

cdef bint vector_gather_preferred() noexcept nogil
    # whether GatherElements loads its elements by vpgather (the level has it, and this CPU's gathers
    # outpace scalar loads, or SYNET_VECTOR_GATHER=1)

cdef int call_threads(object n_threads) except -1
    # the threads of one call: n_threads if given (negatives count back from the CPUs), else the
    # default (OpenMP's current thread count)

cdef void bf16_round_array(const uint32_t* src, char* dst, Py_ssize_t n, int itemsize, bint truncate,
                           int threads) noexcept nogil
    # dst = bf16(src) as bfloat16 bits (itemsize 2) or float32 bits of the rounded value (4)

cdef void bf16_widen_array(const uint16_t* src, uint32_t* dst, Py_ssize_t n, int threads,
                           bint fresh_dst) noexcept nogil
    # float32 bits = bfloat16 bits << 16
