"""The bench's optional Simd peer (synet/benchmarks/simd_peer.py): its ctypes declarations, the no-op without a
library, and — when SYNET_TEST_SIMD names a libSimd.so built by the user — the candidates against synet."""

from __future__ import annotations

import ctypes
import os

import numpy as np
import pytest

from synet import benchmarks
from synet.benchmarks import simd_peer

SIMD = os.environ.get("SYNET_TEST_SIMD")
needs_simd = pytest.mark.skipif(not SIMD, reason="set SYNET_TEST_SIMD to a libSimd.so to run the Simd peer")


def test_convolution_parameters_layout():
    """SimdConvolutionParameters as SimdLib.h lays it out on LP64: 17 size_t, 5 enums (ints), 4 bytes of padding
    after each pair of enums and after the last one."""
    fields = {name: getattr(simd_peer.SimdConvolutionParameters, name).offset
                  for name, _ in simd_peer.SimdConvolutionParameters._fields_}
    assert ctypes.sizeof(simd_peer.SimdConvolutionParameters) == 160
    assert (fields["srcT"], fields["srcF"], fields["dstC"]) == (24, 28, 32)
    assert (fields["dstT"], fields["dstF"], fields["kernelY"]) == (56, 60, 64)
    assert (fields["group"], fields["activation"]) == (144, 152)


def test_no_library_no_candidate(monkeypatch):
    monkeypatch.setattr(benchmarks, "SIMD_LIBRARY", None)
    candidates = {"synet": lambda: None}
    simd_peer.add(candidates, "T", "gather", np.zeros(1), data=np.zeros(1, np.float32))
    assert list(candidates) == ["synet"]


def test_worker_runs_calls_in_order_on_its_thread():
    import threading

    worker = simd_peer.Worker("test-simd-peer")
    names = [worker.call(lambda i=i: (i, threading.current_thread().name)) for i in range(3)]
    assert names == [(i, "test-simd-peer") for i in range(3)]
    with pytest.raises(ZeroDivisionError):
        worker.call(lambda: 1 / 0)


def test_on_thread_candidates_are_warmed_and_timed_on_their_thread():
    """`measure` runs an OnThread candidate's warm-up and timed calls on its own thread (no hand-off per call):
    every call happens there, and the number of hand-offs does not grow with the calls."""
    import threading

    worker = simd_peer.Worker("test-on-thread")
    threads, handoffs = [], []

    def call(fn, *args):
        handoffs.append(fn)
        return worker.call(fn, *args)

    candidate = benchmarks.OnThread(lambda: threads.append(threading.current_thread().name), call)
    times = benchmarks.measure({"on thread": candidate, "here": lambda: None}, repeats=3, target_s=1e-3,
                               warm_s=1e-3)
    assert set(times) == {"on thread", "here"} and all(t > 0 for t in times.values())
    assert len(threads) > 20 and set(threads) == {"test-on-thread"}
    assert len(handoffs) == 5  # warm-up, calls per sample, three samples


@needs_simd
@pytest.mark.parametrize("name", ["G1", "G4", "Q1", "Q3", "Q5", "Q6", "Q9", "D2", "D3", "D4", "S5", "S6", "S7"])
def test_simd_candidates_agree_with_synet(monkeypatch, name):
    monkeypatch.setattr(benchmarks, "SIMD_LIBRARY", SIMD)
    monkeypatch.setattr(simd_peer, "CHECKS", [])
    workload = next(w for w in benchmarks.all_workloads() if w.name == name)
    made = workload.make()
    candidates = made[0] if isinstance(made, tuple) else made
    entry, *more = simd_peer.CHECKS
    if name in ("Q6", "Q9", "D4"):  # unequal shapes, GELU, grouped NCHW: declined
        assert "simd" not in candidates and not entry["added"] and not more
    else:
        assert entry["ok"], entry
        candidates["simd"]()
    if name == "G4":  # a constant index: Simd also without SetIndex, as "synet without set_index"
        assert len(more) == 1 and more[0]["ok"], more
        candidates["simd without SetIndex"]()
    else:
        assert not more


@needs_simd
def test_simd_deconvolution_on_a_dedicated_thread(monkeypatch):
    monkeypatch.setattr(benchmarks, "SIMD_LIBRARY", SIMD)
    monkeypatch.setattr(simd_peer, "DEDICATED_THREAD", True)
    monkeypatch.setattr(simd_peer, "CHECKS", [])
    workload = next(w for w in benchmarks.all_workloads() if w.name == "D2")
    made = workload.make()
    candidates = made[0] if isinstance(made, tuple) else made
    (entry,) = simd_peer.CHECKS
    assert entry["ok"] and "dedicated thread" in entry["info"], entry
    candidates["simd"]()
    del candidates  # releases the context on the worker
