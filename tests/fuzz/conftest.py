"""Fuzz suite settings. These files (fuzz_*.py) run in a child process started by
tests/test_fuzz.py, so that a crash is a reported failure, not a dead test run:

    pytest -p no:cacheprovider -o python_files='fuzz_*.py' tests/fuzz              # short CI profile
    SYNET_FUZZ_PROFILE=long pytest -o python_files='fuzz_*.py' tests/fuzz          # long profile

Every example is written to $SYNET_FUZZ_LOG (if set) before it runs: after a crash the last
line names the input that caused it.
"""

import datetime
import os
import sys

from hypothesis import HealthCheck, settings

# tests/: the float64 references (reference.py) and the outcome rule (outcomes.py)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A runaway call (a table or a loop sized by a huge parameter) fails its example: a deadline far above any
# honest call's time; and an address-space limit turns it into a MemoryError (then the deadline's failure)
# instead of the machine's OOM killer ending this and other processes. SYNET_FUZZ_MEMORY_GB=0: no limit (nor
# under AddressSanitizer, which reserves terabytes of address space).
DEADLINE = datetime.timedelta(seconds=float(os.environ.get("SYNET_FUZZ_DEADLINE_S", "20")))
PROFILES = {"ci": 300, "long": 5000}
settings.register_profile(
    "fuzz", derandomize=os.environ.get("SYNET_FUZZ_PROFILE", "ci") == "ci", deadline=DEADLINE,
    max_examples=PROFILES[os.environ.get("SYNET_FUZZ_PROFILE", "ci")], print_blob=True,
    suppress_health_check=list(HealthCheck),
)


def _limit_address_space() -> None:
    try:
        import resource

        limit = int(float(os.environ.get("SYNET_FUZZ_MEMORY_GB", "8")) * 2**30)
        if os.environ.get("SYNET_SANITIZED") or "libasan" in os.environ.get("LD_PRELOAD", ""):
            return
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if limit and (soft == resource.RLIM_INFINITY or soft > limit):
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, ValueError, OSError):   # not POSIX, or not allowed: no limit
        pass


def pytest_configure(config):
    """Only for a fuzz run (python_files = fuzz_*.py): pytest also imports this file when it collects tests/
    for the main suite, whose settings (tests/conftest.py's profile, no memory limit) must stay its own."""
    if "fuzz_*.py" not in config.getini("python_files"):
        return
    settings.load_profile("fuzz")
    _limit_address_space()
    config.addinivalue_line("filterwarnings", "ignore::RuntimeWarning")
