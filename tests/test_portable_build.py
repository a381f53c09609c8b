"""SYNET_CPU_BASELINE builds stay inside their CPU level (tools/check_baseline.py reads the
disassembly of every extension module)."""

import os
import platform
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "tools", "check_baseline.py")


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 levels")
@pytest.mark.skipif(not os.path.exists(SCRIPT) or shutil.which("objdump") is None, reason="needs the checkout, objdump")
@pytest.mark.skipif(bool(os.environ.get("SYNET_SANITIZED")), reason="not inside the sanitized run")
def test_x86_64_v3_build_uses_nothing_above_avx2(tmp_path):
    result = subprocess.run([sys.executable, SCRIPT, "x86-64-v3", "--keep", str(tmp_path / "build")],
                            capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "0 instructions above the baseline" in result.stdout
