"""Write the plan of a bench transposed convolution for the kernel A/B harness (see build.sh).

    python benchmarks/kernel_ab/dump.py D5 [OUT.plan] [LEVEL]

The workload's own ConvParams (synet/benchmarks/deconvolution.py: its make() returns them as meta["conv"]),
planned by synet's planner for the micro-kernels of LEVEL (default amx: AMX where it is allowed; the
harness must be built for the same level), written as ``s NAME VALUE`` lines (scalars) and
``t NAME COUNT V...`` lines (tables).
"""

from __future__ import annotations

import sys

import numpy as np

import synet
from synet import _deconvolution_plan as planning
from synet.benchmarks import deconvolution as workloads


def main() -> None:
    name = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else f"{name}.plan"
    level = sys.argv[3] if len(sys.argv) > 3 else "amx"
    micro_bf16, micro_amx = level in ("avx512_bf16", "amx"), level == "amx"
    # the level's FP32 micro-kernel: its span and unit (deconvolution.c: MICRO_SPAN, VW)
    fp32_strip, fp32_unit = (8, 8) if level == "avx2" else (32, 16)
    workload = next(w for w in workloads.WORKLOADS if w.name == name)
    conv = workload.make()[1]["conv"]
    plan = planning.plan(1, planning.validate(conv), 0, micro_bf16, micro_amx, fp32_strip, fp32_unit,
                         synet._deconvolution.amx_available)
    with open(out, "w") as f:
        for key, value in plan.scalars.items():
            f.write(f"s {key} {int(value)}\n")
        f.write(f"s packed_size {int(plan.packed_size)}\ns src_size {int(np.prod(plan.src_shape))}\n")
        for key, table in plan.tables.items():
            table = np.asarray(table, np.int64)
            f.write(f"t {key} {table.size} " + " ".join(map(str, table.tolist())) + "\n")
    print(f"{out}: micro {plan.scalars['micro']}, {plan.scalars['ntasks']} tasks, direct {plan.scalars['direct']}")


if __name__ == "__main__":
    main()
