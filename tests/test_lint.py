"""Lint as a test: ruff (Python, stubs, benchmarks, tools, tests) and cython-lint (.pyx / .pxd), configured in
pyproject.toml. A finding fails the suite; the message lists them."""

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(ROOT, "pyproject.toml")), reason="needs the checkout")


def cython_sources():
    found = []
    for folder, _, files in os.walk(ROOT):
        if any(part in folder for part in ("/build", "/.git", "/dist", "/docs/_build")):
            continue
        found += [os.path.join(folder, f) for f in files if f.endswith((".pyx", ".pxd"))]
    return sorted(found)


def test_ruff_finds_nothing():
    pytest.importorskip("ruff")
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_cython_lint_finds_nothing():
    tool = shutil.which("cython-lint") or shutil.which("cython-lint", path=os.path.dirname(sys.executable))
    if tool is None:
        pytest.skip("cython-lint is not installed (the test extra has it)")
    sources = cython_sources()
    assert len(sources) >= 10, sources   # the package's modules and the downstream example are seen
    result = subprocess.run([tool, *sources], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
