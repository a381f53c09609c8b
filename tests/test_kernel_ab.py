"""benchmarks/kernel_ab, the kernel A/B harness: its C plan reader names every scalar and table the planner
writes, so a field added to the plan cannot stay zero in the harness unnoticed; and it runs the depthwise and
planar kernels' plans as well as the GEMM's, 3-D ones included."""

import os
import re
import shutil
import subprocess
import sys

import pytest

import synet
from synet import _deconvolution_plan as planning

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HARNESS = os.path.join(ROOT, "benchmarks", "kernel_ab")
MAIN = os.path.join(HARNESS, "main.c")
pytestmark = pytest.mark.skipif(not os.path.exists(MAIN), reason="needs the checkout")


@pytest.mark.parametrize("amx", [False, True])
def test_the_harness_reads_every_plan_field(amx):
    with open(MAIN) as f:
        text = f.read()
    scalars = set(re.findall(r"SCALAR\((\w+)\)", text)) - {"x"}
    tables = set(re.findall(r"TABLE\((\w+)\)", text)) - {"x"}
    conv = synet.ConvParams.deconvolution(64, 8, 8, 64, 2, 2, 1, 0, 1, format="NHWC")
    plan = planning.plan(1, planning.validate(conv), 0, True, amx, 32, 16, lambda: True)
    assert set(plan.scalars) == scalars
    assert set(plan.tables) == tables


PYX = os.path.join(ROOT, "synet", "_deconvolution.pyx")
SRC = os.path.join(ROOT, "synet", "src")


def test_the_extension_fills_the_c_plan_in_the_planners_order():
    """_new_geometry unpacks a plan's value tuples and table bounds into synet_deconv_plan's fields by position:
    its lists of fields are the planner's names in the planner's order."""
    with open(PYX) as f:
        text = f.read()

    def fields(pattern):
        block = re.search(pattern, text, re.S)
        assert block is not None, pattern
        return tuple(re.findall(r"&?p\.(\w+)", block.group(1)))

    assert fields(r"\(([^()]*)\) = <tuple>planned\.family_scalars") == planning.FAMILY_SCALARS
    assert fields(r"\(([^()]*)\) = <tuple>planned\.sized_scalars") == planning.SIZED_SCALARS
    assert fields(r"fields\[:\] = \[([^\]]*)\]") == planning.TABLES
    plan = planning.plan(2, planning.validate(synet.ConvParams.deconvolution(16, 5, 7, 8, 4, 2, 1)), 0, True, True,
                         32, 16, lambda: True)
    assert len(plan.family_scalars) == len(planning.FAMILY_SCALARS)
    assert len(plan.sized_scalars) == len(planning.SIZED_SCALARS)
    assert len(plan.table_bounds) == len(planning.TABLES) == 20


def test_the_planner_mirrors_the_c_constants():
    """Constants both the planner and the kernels use: deconvolution.h's values."""
    with open(os.path.join(SRC, "deconvolution.h")) as f:
        text = f.read()
    for c_name, value in (("SYNET_PACK_CHANNELS", planning.PACK_CHANNELS),
                          ("SYNET_PLANAR_OUT_MAX", planning.PLANAR_OUT_MAX),
                          ("SYNET_LANES_STRIP", planning.LANES_STRIP), ("SYNET_LANES_TAPS", planning.LANES_TAPS)):
        defined = re.search(rf"#define {c_name} (\d+)", text)
        assert defined is not None and int(defined.group(1)) == value, c_name


@pytest.fixture(scope="module")
def avx2_harness():
    """The harness built for avx2 with both copies from synet/src (where gcc, the level and the CPU allow)."""
    if "avx2" not in synet.config()["dispatch"]["compiled"]["deconvolution"] or shutil.which("gcc") is None:
        pytest.skip("needs gcc and an x86-64 build with the avx2 level")
    if synet.config()["dispatch"]["supported"] == "baseline":
        pytest.skip("the CPU has no AVX2")
    built = subprocess.run(["sh", os.path.join(HARNESS, "build.sh"), SRC, SRC, "avx2"], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    return built.stdout.strip().splitlines()[-1]


@pytest.mark.slow
@pytest.mark.parametrize("workload", ["D9", "D8", "D7"])
def test_the_harness_runs_every_kind_of_plan(avx2_harness, workload, tmp_path):
    """The harness runs a depthwise (D9) and a planar (D8) plan to the end with the same bits from both copies:
    their kernels read FP32 weights from the plan's `depthwise` table, which the harness once left NULL (a
    segfault at the first tap); and a 3-D GEMM plan (D7), whose workload once gave dump.py no ConvParams."""
    plan = str(tmp_path / f"{workload}.plan")
    subprocess.run([sys.executable, os.path.join(HARNESS, "dump.py"), workload, plan, "avx2"], check=True,
                   capture_output=True)
    ran = subprocess.run([avx2_harness, plan, "0.2"], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, (ran.returncode, ran.stderr)
    assert "same bits yes" in ran.stdout, ran.stdout
