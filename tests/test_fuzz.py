"""Runs the fuzz suite (tests/fuzz/fuzz_*.py) in a child process: a crash there is a failure here,
reported with the input that caused it."""

import os
import subprocess
import sys

import pytest

FUZZ = os.path.join(os.path.dirname(__file__), "fuzz")


@pytest.mark.parametrize("name", sorted(f for f in os.listdir(FUZZ) if f.startswith("fuzz_") and f.endswith(".py")))
def test_fuzz_file_runs_without_crashing(name, tmp_path):
    log = tmp_path / "examples.log"
    env = dict(os.environ, SYNET_FUZZ_LOG=str(log))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "python_files=fuzz_*.py",
         "--rootdir", FUZZ, os.path.join(FUZZ, name)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
    examples = log.read_text().splitlines() if log.exists() else []
    if result.returncode < 0:
        pytest.fail(f"the fuzz run crashed with signal {-result.returncode} after {len(examples)} calls; "
                    f"last input: {examples[-1] if examples else '?'}\n{result.stderr[-3000:]}")
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    print(f"{name}: {len(examples)} calls")
