"""Write the plan of a bench deconvolution for the kernel A/B harness (see build.sh).

    python benchmarks/kernel_ab/dump.py D5 [OUT.plan]

The plan is synet's own (synet._deconvolution_plan.plan for this CPU's best level: AMX where it is
allowed), written as ``s NAME VALUE`` lines (scalars) and ``t NAME COUNT V...`` lines (tables).
"""

from __future__ import annotations

import sys

import numpy as np

import synet
from synet import _deconvolution_plan as planning

# the bench's transposed convolutions (synet/benchmarks/deconvolution.py): layout, src_c, (h, w), dst_c,
# kernel, stride, pad, group, src and dst type
SHAPES = {
    "D1": ("NCHW", 256, (16, 16), 128, 4, 2, 1, 1, "f32", "f32"),
    "D2": ("NHWC", 64, (32, 32), 64, 2, 2, 0, 1, "f32", "f32"),
    "D3": ("NHWC", 256, (17, 15), 256, 1, 1, 0, 1, "bf16", "bf16"),
    "D3f": ("NHWC", 256, (17, 15), 256, 1, 1, 0, 1, "bf16", "f32"),
    "D5": ("NHWC", 128, (64, 64), 64, 4, 2, 1, 1, "f32", "f32"),
}


def main() -> None:
    name = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else f"{name}.plan"
    layout, src_c, (h, w), dst_c, kernel, stride, pad, group, src_t, dst_t = SHAPES[name]
    conv = synet.ConvParams.deconvolution(src_c, h, w, dst_c, kernel, stride, 1, pad, group,
                                          src_type=src_t, dst_type=dst_t, format=layout)
    plan = planning.plan(1, conv, 0, True, True, synet._deconvolution.amx_available)
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
