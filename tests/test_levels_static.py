"""Each CPU level's code stays inside its level: the disassembly of every object file of a build
(tools/check_baseline.py) — the extension modules and baseline kernels use nothing above x86-64-v2,
the avx2 kernels nothing above x86-64-v3. (tests/test_cpu_levels.py runs the code on emulated CPUs.)"""

import os
import platform
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "tools", "check_baseline.py")


@pytest.mark.slow
@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 levels")
@pytest.mark.skipif(not os.path.exists(SCRIPT) or shutil.which("objdump") is None, reason="needs the checkout, objdump")
@pytest.mark.skipif(bool(os.environ.get("SYNET_SANITIZED")), reason="not inside the sanitized run")
def test_every_level_stays_inside_its_instructions(tmp_path):
    result = subprocess.run([sys.executable, SCRIPT, "--keep", str(tmp_path / "build")],
                            capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "0 instructions above their level" in result.stdout
