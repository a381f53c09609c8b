"""The plan cache of the functional forms: bounded, thread-safe, keyed by everything that defines a plan.

A functional call (``conv_transpose2d``, ``quantized_add``) builds its plan (geometry, tables, kernel
choice) once per distinct key and reuses it afterwards; arrays are never keys by identity (they are
mutable): weights are packed per call, and array-valued parameters are keyed by their bytes.
(``gather_elements`` has nothing to plan: its fast path checks its arguments on the NumPy C API.)
"""

from __future__ import annotations

import heapq
import operator
import threading

import numpy as np

CAPACITY = 128  # plans per op; the least recently used one goes first
_STAMP = operator.itemgetter(0)


class PlanCache:
    """The plans of one functional form by key, least recently used out first. A hit hashes and compares
    its key once (a recency stamp in the entry, not a move in an ordered dict). Eviction, at a miss of a
    full cache, takes the oldest stamp from a list of the oldest quarter made by one scan (about 10 us for
    128 plans) and used up over the next misses (about 0.5 us a miss in all)."""

    def __init__(self, name: str, capacity: int = CAPACITY):
        self.name = name
        self.capacity = capacity
        self._items: dict = {}     # key -> [stamp of its last use, plan, key]
        self._lock = threading.Lock()
        self._clock = 0
        self._oldest: list = []    # (stamp, key) of the oldest entries at the last scan, the oldest last
        self.hits = self.misses = 0

    def get(self, key):
        """The plan cached under `key`, or None."""
        with self._lock:
            entry = self._items.get(key)
            if entry is None:
                self.misses += 1
                return None
            self._clock += 1
            entry[0] = self._clock
            self.hits += 1
            return entry[1]

    def put(self, key, plan) -> None:
        with self._lock:
            self._clock += 1
            self._items[key] = [self._clock, plan, key]
            while len(self._items) > self.capacity:
                self._evict_oldest()

    def _evict_oldest(self) -> None:
        """Drop the least recently used entry: the oldest one in `_oldest` whose stamp has not changed since
        the scan that listed it (an entry used or added since then has a newer stamp than all of those),
        listing the oldest quarter again when none is left."""
        while True:
            while self._oldest:
                stamp, key = self._oldest.pop()
                entry = self._items.get(key)
                if entry is not None and entry[0] == stamp:
                    del self._items[key]
                    return
            oldest = heapq.nsmallest(max(1, self.capacity // 4), self._items.values(), key=_STAMP)
            self._oldest = [(entry[0], entry[2]) for entry in reversed(oldest)]

    def info(self) -> dict:
        with self._lock:
            return {"plans": len(self._items), "capacity": self.capacity, "hits": self.hits, "misses": self.misses}

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._oldest.clear()
            self.hits = self.misses = 0


CACHES: dict[str, PlanCache] = {}


def cache(name: str) -> PlanCache:
    """The plan cache of one functional form (made on first use)."""
    if name not in CACHES:
        CACHES[name] = PlanCache(name)
    return CACHES[name]


def info() -> dict:
    """{op: {plans, capacity, hits, misses}} of every functional form's cache."""
    return {name: c.info() for name, c in sorted(CACHES.items())}


def clear() -> None:
    """Empty every plan cache."""
    for c in CACHES.values():
        c.clear()


def key_of(value: object) -> object:
    """A hashable key of a parameter value that tells apart what validation tells apart: scalars with
    their type (True, 1 and 1.0 differ), arrays and sequences by their contents. TypeError for a
    value it cannot key (the call then plans without the cache)."""
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(key_of(v) for v in value))
    hash(value)
    return (type(value), value)
