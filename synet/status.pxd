# cython: language_level=3
"""Status codes of synet's nogil C-level kernels (``cimport synet.status``).

Python wrappers map them to exceptions: SYNET_VALUE_ERROR -> ValueError, SYNET_INDEX_ERROR ->
IndexError, SYNET_NOT_READY -> RuntimeError.
"""

cdef enum SynetStatus:
    SYNET_OK = 0
    SYNET_VALUE_ERROR = 1  # a size, type code or pointer the kernel cannot use
    SYNET_INDEX_ERROR = 2  # an index outside its range
    SYNET_NOT_READY = 3    # a context or plan that was not prepared (e.g. no weights, no index)
