"""The .pyi stubs describe the compiled modules as they are (mypy's stubtest)."""

import os
import subprocess
import sys

import pytest


def test_stubtest(tmp_path):
    pytest.importorskip("mypy")
    allowlist = os.path.join(os.path.dirname(__file__), "stubtest_allowlist.txt")
    result = subprocess.run([sys.executable, "-m", "mypy.stubtest", "synet", "--allowlist", allowlist],
                            cwd=tmp_path, capture_output=True, text=True)  # cwd: import the installed synet
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
