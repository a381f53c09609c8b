"""The planar kernel against the GEMM on given transposed-convolution shapes, timed in alternation in one process.

    python benchmarks/kernel_choice.py 1,9,3,1,1,128,NHWC 4,8,4,2,1,64,NHWC [--groups 1] [--rounds 7]

Each shape is ``c_in,c_out,kernel,stride,padding,size,layout`` (a square image of ``size``, batch 1, float32,
1 thread). Both plans are made by the planner with its planar rule replaced (``planar_max_in``: every input
channel count, or none), so the rest of each plan is the planner's own; round after round each runs for 0.1 s of
warm-up and 0.1 s of samples, in alternating order. Prints the medians, their ratio and the kernel the planner
picks today: the data behind PLANAR_MAX_IN and its channels-last rules (synet/_deconvolution_plan.py) on the
CPU at hand. (The choice must be the same at every CPU level: the kernels sum in different orders.)
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import synet
import synet._deconvolution_plan as planning


def per_call(call, seconds: float) -> float:
    """Seconds per call over at least `seconds` of calls."""
    n, start = 0, time.perf_counter()
    while True:
        call()
        n += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return elapsed / n


RULES = {"planar": lambda *args, **kwargs: 1 << 30, "gemm": lambda *args, **kwargs: 0}   # planar_max_in's stand-ins


def compare(shape: str, groups: int, rounds: int, rng: np.random.Generator) -> str:
    """One shape's line: both kernels' median times, their ratio and the planner's choice."""
    c_in, c_out, kernel, stride, pad, size, layout = shape.split(",")
    c_in, c_out, kernel, stride, pad, size = map(int, (c_in, c_out, kernel, stride, pad, size))
    x = rng.standard_normal((1, c_in, size, size) if layout == "NCHW" else (1, size, size, c_in)).astype(np.float32)
    w = rng.standard_normal((c_in, c_out // groups, kernel, kernel) if layout == "NCHW" else
                            (c_in, kernel, kernel, c_out // groups)).astype(np.float32)

    def call():
        return synet.conv_transpose2d(x, w, None, stride, pad, groups=groups, layout=layout, n_threads=1)

    conv = synet.ConvParams.deconvolution(c_in, size, size, c_out, kernel, stride, pad=pad, group=groups,
                                          format=layout)
    picked = synet.Deconvolution16b(1, conv).info().split()[0]
    chosen = planning.planar_max_in
    times: dict[str, list[float]] = {name: [] for name in RULES}
    try:
        for r in range(rounds):
            for name in list(RULES)[:: 1 if r % 2 == 0 else -1]:
                planning.planar_max_in = RULES[name]
                synet.clear_plan_cache()
                per_call(call, 0.1)   # warm-up: AVX code runs slower for ~0.1 s after idling
                times[name].append(per_call(call, 0.1))
    finally:
        planning.planar_max_in = chosen
        synet.clear_plan_cache()
    planar, gemm = statistics.median(times["planar"]), statistics.median(times["gemm"])
    return (f"{shape} g{groups}: planar {planar * 1e3:8.3f} ms  GEMM {gemm * 1e3:8.3f} ms  GEMM / planar "
            f"{gemm / planar:5.2f}x  (the planner picks {picked})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shapes", nargs="+", help="c_in,c_out,kernel,stride,padding,size,layout")
    parser.add_argument("--groups", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    for shape in args.shapes:
        print(compare(shape, args.groups, args.rounds, rng))


if __name__ == "__main__":
    main()
