"""One build in two environments (e.g. two CPU levels), timed in alternation: what a setting read at import costs.

    python benchmarks/ab_env.py Q1,D5 SYNET_MAX_ISA=avx2 SYNET_MAX_ISA=avx512 [--rounds 20]

Settings read at import (``SYNET_MAX_ISA``, ``SYNET_BF16_DOT``, ``SYNET_DISABLE_CPU_FEATURES``) cannot change
within a process, so each environment (comma-separated ``NAME=VALUE`` pairs, applied over this one's) gets a
child process that makes the workloads with the synet it imports and times one sample of a workload on
request. Round after round the two children run one sample each (after a short warm-up), in alternating
order, so both see the same state of a noisy VM (see benchmarks/ab.py). Prints, per workload, each side's
median and the median over rounds of B's time / A's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, sys, time
from synet.benchmarks import all_workloads

names, candidate = sys.argv[1].split(","), sys.argv[2]
calls_of = {}
for workload in all_workloads():
    if workload.name in names:
        made = workload.make()
        calls_of[workload.name] = (made[0] if isinstance(made, tuple) else made)[candidate]

def timed(fn, calls):
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls

print("ready", flush=True)
for line in sys.stdin:
    name, calls = line.split()
    timed(calls_of[name], max(1, int(calls) // 4))   # this candidate's caches and clocks
    print(json.dumps(timed(calls_of[name], int(calls))), flush=True)
"""


class Child:
    """A child process holding the workloads, made under `settings` ("NAME=VALUE,...")."""

    def __init__(self, settings: str, names: str, candidate: str):
        env = dict(os.environ)
        env.update(pair.split("=", 1) for pair in settings.split(",") if pair)
        self.process = subprocess.Popen([sys.executable, "-c", CHILD, names, candidate], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, env=env)
        if self.process.stdout.readline().strip() != "ready":
            raise SystemExit(f"the child under {settings!r} did not start")

    def sample(self, name: str, calls: int) -> float:
        self.process.stdin.write(f"{name} {calls}\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("workloads", help="comma-separated workload ids, e.g. Q1,D5")
    parser.add_argument("env_a", help='settings of A, e.g. "SYNET_MAX_ISA=avx2"')
    parser.add_argument("env_b", help='settings of B, e.g. "SYNET_MAX_ISA=avx512_bf16,SYNET_BF16_DOT=1"')
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--candidate", default="synet")
    parser.add_argument("--sample", type=float, default=0.02, help="seconds per sample")
    args = parser.parse_args()
    children = [Child(settings, args.workloads, args.candidate) for settings in (args.env_a, args.env_b)]
    for name in args.workloads.split(","):
        calls = max(1, int(args.sample / children[0].sample(name, 3)))
        times: list[list[float]] = [[], []]
        for r in range(args.rounds):
            for side in ((0, 1) if r % 2 == 0 else (1, 0)):
                times[side].append(children[side].sample(name, calls))
        ratio = statistics.median(b / a for a, b in zip(*times))
        print(f"{name:4s} A median {statistics.median(times[0]) * 1e3:.4f} ms   "
              f"B median {statistics.median(times[1]) * 1e3:.4f} ms   B/A {ratio:.3f}", flush=True)
    for child in children:
        child.close()


if __name__ == "__main__":
    main()
