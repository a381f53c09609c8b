"""The whole suite, fuzz files included, under AddressSanitizer + UBSan (tools/sanitize.sh)."""

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "tools", "sanitize.sh")


@pytest.mark.slow
@pytest.mark.skipif(bool(os.environ.get("SYNET_SANITIZED")), reason="already the sanitized run")
@pytest.mark.skipif(not os.path.exists(SCRIPT) or shutil.which("gcc") is None, reason="needs the checkout and gcc")
def test_suite_is_clean_under_address_and_undefined_sanitizers():
    asan = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    if not os.path.isabs(asan):
        pytest.skip("gcc has no libasan")
    env = dict(os.environ, PYTHON=sys.executable)
    result = subprocess.run(["bash", SCRIPT], capture_output=True, text=True, timeout=3000, env=env)
    tail = result.stdout[-4000:] + result.stderr[-4000:]
    assert result.returncode == 0, tail
    assert "ERROR: AddressSanitizer" not in tail and "runtime error:" not in tail
