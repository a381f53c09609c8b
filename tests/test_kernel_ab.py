"""benchmarks/kernel_ab, the kernel A/B harness: its C plan reader names every scalar and table the planner
writes, so a field added to the plan cannot stay zero in the harness unnoticed."""

import os
import re

import pytest

import synet
from synet import _deconvolution_plan as planning

MAIN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "kernel_ab", "main.c")
pytestmark = pytest.mark.skipif(not os.path.exists(MAIN), reason="needs the checkout")


@pytest.mark.parametrize("amx", [False, True])
def test_the_harness_reads_every_plan_field(amx):
    with open(MAIN) as f:
        text = f.read()
    scalars = set(re.findall(r"SCALAR\((\w+)\)", text)) - {"x"}
    tables = set(re.findall(r"TABLE\((\w+)\)", text)) - {"x"}
    conv = synet.ConvParams.deconvolution(64, 8, 8, 64, 2, 2, 1, 0, 1, format="NHWC")
    plan = planning.plan(1, planning.validate(conv), 0, True, amx, 64, lambda: True)
    assert set(plan.scalars) == scalars
    assert set(plan.tables) == tables
