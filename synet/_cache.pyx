# cython: language_level=3
"""The plan cache of the functional forms: bounded, thread-safe, keyed by everything that defines a plan.

A functional call (``conv_transpose2d``, ``quantized_add``) builds its plan (geometry, tables, kernel
choice) once per distinct key and reuses it afterwards; arrays are never keys by identity (they are
mutable): weights are packed per call, and array-valued parameters are keyed by their bytes.
(``gather_elements`` has nothing to plan: its fast path checks its arguments on the NumPy C API.)
"""

cimport cython
from cpython.pythread cimport (NOWAIT_LOCK, WAIT_LOCK, PyThread_acquire_lock, PyThread_allocate_lock,
                               PyThread_free_lock, PyThread_release_lock)

import struct
from collections import OrderedDict

import numpy as np

from ._arrays import loaded_torch, mutable_array_like, torch_array

CAPACITY = 128  # plans per op; the least recently used one goes first


@cython.final
cdef class PlanCache:
    """The plans of one functional form by key, least recently used out first (an OrderedDict: a hit moves
    its key to the end, a miss of a full cache drops the first). Compiled, with a C lock taken without a
    Python call: in a call that plans a new shape (S8) get and put cost 1.7 µs less than as interpreted
    Python, a hit 0.16 µs instead of 0.36."""

    def __cinit__(self):
        self._items = OrderedDict()
        self._lock = PyThread_allocate_lock()
        if self._lock == NULL:
            raise MemoryError("plan cache: no lock")

    def __init__(self, str name, Py_ssize_t capacity=CAPACITY):
        self.name = name
        self.capacity = capacity

    def __dealloc__(self):
        if self._lock != NULL:
            PyThread_free_lock(self._lock)

    cdef inline void _acquire(self) noexcept:
        # (waiting with the GIL released: the holder may need it, e.g. to compare keys)
        if not PyThread_acquire_lock(self._lock, NOWAIT_LOCK):
            with nogil:
                PyThread_acquire_lock(self._lock, WAIT_LOCK)

    cpdef object get(self, object key):
        """The plan cached under `key`, or None."""
        self._acquire()
        try:
            plan = self._items.get(key)
            if plan is None:
                self.misses += 1
            else:
                self._items.move_to_end(key)
                self.hits += 1
            return plan
        finally:
            PyThread_release_lock(self._lock)

    cpdef put(self, object key, object plan):
        """Cache `plan` (not None) under `key`, dropping the least recently used plan of a full cache."""
        evicted = None
        self._acquire()
        try:
            self._items[key] = plan
            self._items.move_to_end(key)
            if len(self._items) > self.capacity:
                evicted = self._items.popitem(False)
        finally:
            PyThread_release_lock(self._lock)
        del evicted   # (the dropped plan freed here, with the lock released)

    def info(self) -> dict:
        self._acquire()
        try:
            return {"plans": len(self._items), "capacity": self.capacity, "hits": self.hits, "misses": self.misses}
        finally:
            PyThread_release_lock(self._lock)

    def clear(self) -> None:
        self._acquire()
        try:
            plans, self._items = self._items, OrderedDict()
            self.hits = self.misses = 0
        finally:
            PyThread_release_lock(self._lock)
        del plans   # (freed with the lock released)


CACHES = {}   # name -> PlanCache


def cache(name: str) -> PlanCache:
    """The plan cache of one functional form (made on first use)."""
    if name not in CACHES:
        CACHES[name] = PlanCache(name)
    return CACHES[name]


def info() -> dict:
    """{op: {plans, capacity, hits, misses}} of every functional form's cache."""
    return {name: c.info() for name, c in sorted(CACHES.items())}


CLEARED_WITH = []   # callables emptying the memos kept beside the caches (a functional form's checked arguments)


def clear() -> None:
    """Empty every plan cache, and the memos kept beside them."""
    for c in CACHES.values():
        c.clear()
    for memo_clear in CLEARED_WITH:
        memo_clear()


def key_of(value: object) -> object:
    """A hashable key of a parameter value that tells apart what validation tells apart: scalars with
    their type (True, 1 and 1.0 differ; floats by their bits, so -0.0 and 0.0, and NaNs of either sign),
    arrays and torch tensors by their dtype and bytes, sequences by their contents. TypeError for a value it
    cannot key (an array of objects, whose bytes are pointers: the call then plans without the cache)."""
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise TypeError("an array of objects has no key")
        return ("ndarray", value.dtype, value.shape, value.tobytes())   # (the dtype: ml_dtypes' share '<V1')
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(key_of(v) for v in value))
    if isinstance(value, (float, np.floating)):   # by its bits: -0.0 == 0.0, but a slope of -0.0 gives -0
        return (type(value), _INT_BITS.unpack(_FLOAT_BITS.pack(float(value)))[0])
    torch = None if value is None or isinstance(value, (int, str, type, np.dtype, np.generic)) else loaded_torch()
    if torch is not None and isinstance(value, torch.Tensor):   # by its values: its hash is its identity (changed
        try:                                                      # in place, it kept its plan)
            return key_of(torch_array(value, "value"))
        except ValueError as error:
            raise TypeError(str(error)) from None
    if mutable_array_like(value):   # by its values (an object with __array__ hashed by its identity, a read-only
        try:                         # memoryview by its first contents: changed in place, they kept their plans)
            return (type(value), key_of(np.array(value)))
        except ValueError as error:
            raise TypeError(str(error)) from None
    try:
        hash(value)
    except ValueError as error:   # (a writable memoryview: "cannot hash")
        raise TypeError(str(error)) from None
    return (type(value), value)


# a float's bits as a key (its hex() is "nan" for every NaN)
_FLOAT_BITS, _INT_BITS = struct.Struct("<d"), struct.Struct("<q")
