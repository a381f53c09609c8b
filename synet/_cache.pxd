# cython: language_level=3
"""Private: the functional forms' plan cache, cimported by the ops (direct calls of get and put)."""

from cpython.pythread cimport PyThread_type_lock


cdef class PlanCache:
    cdef readonly str name
    cdef readonly Py_ssize_t capacity, hits, misses
    cdef object _items               # OrderedDict: key -> plan, least recently used first
    cdef PyThread_type_lock _lock

    cdef void _acquire(self) noexcept
    cpdef object get(self, object key)
    cpdef put(self, object key, object plan)
