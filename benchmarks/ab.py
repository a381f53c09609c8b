"""Two builds of synet in one process, timed in alternation: a change's speed-up on a noisy machine.

    python benchmarks/ab.py PATH_A PATH_B D1,D5 [--rounds 30] [--candidate synet]

PATH_A and PATH_B are source trees with the extension built in place (``python setup.py build_ext
--inplace``). Each is imported as ``synet`` in turn (its modules moved aside under their own names
afterwards), so both live in this process; the workloads of each are built by its own
``synet.benchmarks``, and each build's modules are put back in ``sys.modules`` before its samples
(for what its calls import lazily). Then, round after round, the two candidates run one sample each (after a short
warm-up of that candidate), in alternating order, so both see the same state of the machine: on a VM
whose core slows down 2-3x for seconds at a time (another tenant on the SMT sibling), fresh processes
timed one after another give contradictory answers. Prints, per workload, each build's best and median
time and B's time / A's: the geometric mean of two medians over rounds, one per set of workloads (each
build's workloads are made twice, A's first and B's first, against a bias of where arrays land).
Differences below about 5 % stay unresolved on such a machine.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import statistics
import sys
import time


def synet_modules() -> list[str]:
    return [name for name in sys.modules if name.split(".")[0] == "synet"]


def load(path: str) -> dict:
    """synet from source tree `path`, as a dict of its modules (removed from sys.modules again), the
    workload modules (which synet.benchmarks imports lazily) included."""
    sys.path.insert(0, path)
    try:
        importlib.invalidate_caches()
        synet = importlib.import_module("synet")
        importlib.import_module("synet.benchmarks").all_workloads()
        if not synet.__file__.startswith(path):
            raise SystemExit(f"{path}: imported synet from {synet.__file__}")
    finally:
        sys.path.remove(path)
    return {name: sys.modules.pop(name) for name in synet_modules()}


def activate(modules: dict) -> None:
    """Make one build's modules the only synet modules in sys.modules. (Updating sys.modules with them
    left the other build's lazily imported modules in place: until 2026-12-01 every build's workloads came
    from the workload modules of build A, so both sides of a comparison ran A's code.)"""
    for name in synet_modules():
        del sys.modules[name]
    sys.modules.update(modules)


def candidates(modules: dict, names: list[str], candidate: str) -> dict:
    """The `candidate` callable of each named workload, built with this build's modules in place (and what
    making them imported added to them)."""
    activate(modules)
    found = {}
    for workload in modules["synet.benchmarks"].all_workloads():
        if workload.name in names:
            made = workload.make()
            found[workload.name] = (made[0] if isinstance(made, tuple) else made)[candidate]
    modules.update({name: sys.modules[name] for name in synet_modules()})
    root = os.path.dirname(os.path.dirname(modules["synet"].__file__))
    for name, module in modules.items():
        if not (getattr(module, "__file__", None) or root).startswith(root):
            raise SystemExit(f"{name} of the wrong build: {module.__file__}")
    return found


def timed(fn, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("path_a")
    parser.add_argument("path_b")
    parser.add_argument("workloads", help="comma-separated workload ids, e.g. D1,D5")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--candidate", default="synet")
    parser.add_argument("--sample", type=float, default=0.02, help="seconds per sample")
    args = parser.parse_args()
    names = args.workloads.split(",")
    modules = [load(path) for path in (args.path_a, args.path_b)]
    # each build's workloads made twice, A's first and then B's first: where an array lands (and so its
    # cache sets and 4K aliasing) favoured whichever build's workloads came second by up to 15 % (D1);
    # the two sets cancel that
    made = [candidates(modules[0], names, args.candidate), candidates(modules[1], names, args.candidate),
            candidates(modules[1], names, args.candidate), candidates(modules[0], names, args.candidate)]
    build_of = (0, 1, 1, 0)
    for name in names:
        fns = [m[name] for m in made]
        for i, fn in enumerate(fns):
            activate(modules[build_of[i]])   # what a call imports lazily comes from its own build
            timed(fn, 3)
        calls = max(1, int(args.sample / timed(fns[0], 3)))
        times: list[list[float]] = [[] for _ in fns]
        for r in range(args.rounds):
            for i in (range(4) if r % 2 == 0 else range(3, -1, -1)):
                activate(modules[build_of[i]])
                timed(fns[i], max(1, calls // 4))   # this candidate's caches and clocks
                times[i].append(timed(fns[i], calls))
        a, b = times[0] + times[3], times[1] + times[2]
        ratio = math.sqrt(statistics.median(y / x for x, y in zip(times[0], times[1])) *
                          statistics.median(y / x for x, y in zip(times[3], times[2])))
        print(f"{name:4s} A best {min(a) * 1e3:.4f} ms median {statistics.median(a) * 1e3:.4f} ms   "
              f"B best {min(b) * 1e3:.4f} ms median {statistics.median(b) * 1e3:.4f} ms   B/A {ratio:.3f}", flush=True)


if __name__ == "__main__":
    main()
