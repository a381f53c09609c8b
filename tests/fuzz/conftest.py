"""Fuzz suite settings. These files (fuzz_*.py) run in a child process started by
tests/test_fuzz.py, so that a crash is a reported failure, not a dead test run:

    pytest -p no:cacheprovider -o python_files='fuzz_*.py' tests/fuzz              # short CI profile
    SYNET_FUZZ_PROFILE=long pytest -o python_files='fuzz_*.py' tests/fuzz          # long profile

Every example is written to $SYNET_FUZZ_LOG (if set) before it runs: after a crash the last
line names the input that caused it.
"""

import os
import sys

from hypothesis import HealthCheck, settings

# tests/: the float64 references (reference.py) and the outcome rule (outcomes.py)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROFILES = {"ci": 300, "long": 5000}
settings.register_profile(
    "fuzz", derandomize=os.environ.get("SYNET_FUZZ_PROFILE", "ci") == "ci", deadline=None,
    max_examples=PROFILES[os.environ.get("SYNET_FUZZ_PROFILE", "ci")], print_blob=True,
    suppress_health_check=list(HealthCheck),
)
settings.load_profile("fuzz")


def pytest_configure(config):
    config.addinivalue_line("filterwarnings", "ignore::RuntimeWarning")
