"""Thread policy: defaults follow OpenMP (OMP_NUM_THREADS, threadpoolctl), explicit settings win."""

import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

import synet
from synet._kernels import OPENMP, available_cpus

# OpenMP reads OMP_NUM_THREADS once, when the process starts (read here at collection, before any test:
# distributed's nanny sets it to 1 in this process's environment for the workers it starts)
OMP_NUM_THREADS_AT_START = os.environ.get("OMP_NUM_THREADS")


@pytest.fixture(autouse=True)
def reset_threads():
    yield
    synet.set_num_threads(None)


def test_set_and_get():
    synet.set_num_threads(1)
    assert synet.get_num_threads() == 1
    synet.set_num_threads(-1)
    assert synet.get_num_threads() == (available_cpus() if OPENMP else 1)
    synet.set_num_threads(None)
    assert synet.get_num_threads() >= 1


def test_bad_counts():
    with pytest.raises(ValueError, match="n: expected a non-zero int"):
        synet.set_num_threads(0)
    with pytest.raises(ValueError, match="leaves no thread"):
        synet.set_num_threads(-available_cpus() - 1)
    with pytest.raises(TypeError, match="^n: expected an int or None, got str$"):
        synet.set_num_threads("2")
    with pytest.raises(TypeError):
        synet.set_num_threads(2.0)


@pytest.mark.skipif(not OPENMP, reason="serial build")
def test_threadpoolctl_sees_and_limits_synet():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    info = threadpoolctl.threadpool_info()
    assert any(pool["user_api"] == "openmp" for pool in info)
    with threadpoolctl.threadpool_limits(limits=1, user_api="openmp"):
        assert synet.get_num_threads() == 1
    assert synet.get_num_threads() == min(available_cpus(), int(OMP_NUM_THREADS_AT_START or "1024"))


@pytest.mark.skipif(not OPENMP, reason="serial build")
def test_default_honours_omp_num_threads(tmp_path):
    code = "import synet; print(synet.get_num_threads())"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    run = dict(env=env, capture_output=True, text=True, check=True, cwd=tmp_path)  # not the checkout
    out = subprocess.run([sys.executable, "-c", code], **run)
    assert out.stdout.strip() == "1"
    env.pop("OMP_NUM_THREADS")
    out = subprocess.run([sys.executable, "-c", code], **run)
    assert out.stdout.strip() == str(available_cpus())


def test_show_config_prints_the_build(capsys):
    synet.show_config()
    text = capsys.readouterr().out
    for key in ("version", "compiler", "cflags", "openmp", "dispatch", "threads"):
        assert key in text
    assert synet.config()["version"] == synet.__version__


# ---------------------------------------------------------------------------------------------
# set_num_threads is OpenMP's own setting: threadpoolctl scopes nest around it (SPEC §7)

needs_openmp = pytest.mark.skipif(not OPENMP, reason="serial build")


def _threadpoolctl():
    return pytest.importorskip("threadpoolctl")


@needs_openmp
@pytest.mark.parametrize("user_api", [None, "openmp"])
def test_a_limit_entered_after_set_num_threads_wins_inside_and_restores_it(user_api):
    """(a) set_num_threads(n), then threadpool_limits(1): 1 inside, n again after (n: not the default)."""
    threadpoolctl = _threadpoolctl()
    n = synet.get_num_threads() + 2
    synet.set_num_threads(n)
    with threadpoolctl.threadpool_limits(limits=1, user_api=user_api):
        assert synet.get_num_threads() == 1
        with threadpoolctl.threadpool_limits(limits=2, user_api="openmp"):   # scopes nest
            assert synet.get_num_threads() == 2
        assert synet.get_num_threads() == 1
    assert synet.get_num_threads() == n


@needs_openmp
def test_set_num_threads_inside_a_limit_wins_until_the_limit_restores_its_saved_value():
    """(b) Inside threadpool_limits(1), set_num_threads(n) takes effect at once; leaving the scope, threadpoolctl
    sets back the count it saved on entry (what set_num_threads did inside does not outlive the scope)."""
    threadpoolctl = _threadpoolctl()
    synet.set_num_threads(None)
    before = synet.get_num_threads()
    with threadpoolctl.threadpool_limits(limits=1, user_api="openmp"):
        assert synet.get_num_threads() == 1
        synet.set_num_threads(before + 2)
        assert synet.get_num_threads() == before + 2
    assert synet.get_num_threads() == before


@needs_openmp
def test_set_num_threads_none_restores_the_import_time_count(tmp_path):
    """None: the count found at import (OMP_NUM_THREADS here), whatever was set or limited since."""
    code = """if True:
        import synet, threadpoolctl
        first = synet.get_num_threads()
        synet.set_num_threads(1)
        synet.set_num_threads(None)
        again = synet.get_num_threads()
        with threadpoolctl.threadpool_limits(1, user_api="openmp"):
            synet.set_num_threads(None)
            inside = synet.get_num_threads()
        print(first, again, inside)
    """
    env = dict(os.environ, OMP_NUM_THREADS="3")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                         cwd=tmp_path)
    assert out.stdout.split() == ["3", "3", "3"]


@needs_openmp
def test_set_num_threads_is_the_calling_threads_setting():
    """omp_set_num_threads sets the calling thread's count: another thread keeps the import-time default and
    its own setting does not reach this one."""
    import threading

    synet.set_num_threads(None)
    default = synet.get_num_threads()
    synet.set_num_threads(3)
    seen = []

    def other():
        seen.append(synet.get_num_threads())
        synet.set_num_threads(1)
        seen.append(synet.get_num_threads())

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert seen == [default, 1]
    assert synet.get_num_threads() == 3


def test_negative_counts():
    cpus = available_cpus()
    for n, expected in ((-1, cpus), (-cpus, 1)):
        synet.set_num_threads(n)
        assert synet.get_num_threads() == (expected if OPENMP else 1)
    synet.set_num_threads(np.int64(-1))
    assert synet.get_num_threads() == (cpus if OPENMP else 1)
    with pytest.raises(ValueError, match=f"n: {-cpus - 1} leaves no thread of the {cpus} CPUs available"):
        synet.set_num_threads(-cpus - 1)
    with pytest.raises(ValueError, match=f"n_threads: {-cpus - 1} leaves no thread"):
        synet.float32_to_bfloat16(np.ones(4, np.float32), n_threads=-cpus - 1)


@pytest.mark.parametrize("n, error, message", [
    (0, ValueError, "n: expected a non-zero int (negative counts from the CPU count), got 0"),
    (True, TypeError, "expected an int or None, got bool"),
    (False, TypeError, "expected an int or None, got bool"),
    (2.0, TypeError, "expected an int or None, got float"),
    (np.float32(2), TypeError, "expected an int or None, got float32"),
    ("2", TypeError, "expected an int or None, got str"),
    ([2], TypeError, "expected an int or None, got list"),
])
def test_set_num_threads_errors(n, error, message):
    synet.set_num_threads(2)
    with pytest.raises(error) as info:
        synet.set_num_threads(n)
    assert message in str(info.value)
    assert synet.get_num_threads() == (2 if OPENMP else 1)   # a refused count changes nothing


@pytest.mark.parametrize("n, error", [(0, ValueError), (True, TypeError), (1.0, TypeError), ("1", TypeError)])
def test_n_threads_errors(n, error):
    with pytest.raises(error, match="n_threads"):
        synet.float32_to_bfloat16(np.ones(4, np.float32), n_threads=n)


_THREAD_COUNTS = """if True:
    import os, numpy as np, synet, threadpoolctl

    def threads():
        return len(os.listdir("/proc/self/task"))

    x = np.ones(1 << 20, np.float32)         # 32 blocks of a parallel loop
    synet.float32_to_bfloat16(x, n_threads=1)
    with threadpoolctl.threadpool_limits(1, user_api="openmp"):
        base = threads()
        synet.float32_to_bfloat16(x)                # the limit: no OpenMP worker starts
        limited = threads()
        synet.float32_to_bfloat16(x, n_threads=3)   # an explicit n_threads wins over the limit
        explicit = threads()
    print(base, limited, explicit)
"""


@needs_openmp
@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux's /proc")
def test_explicit_n_threads_wins_over_the_limit_observably(tmp_path):
    """The thread count of a call, seen through the threads the OpenMP runtime starts (it keeps its workers):
    none under threadpool_limits(1), two more for n_threads=3 inside the same scope."""
    _threadpoolctl()
    out = subprocess.run([sys.executable, "-c", _THREAD_COUNTS], capture_output=True, text=True, check=True,
                         cwd=tmp_path, env=dict(os.environ, OMP_NUM_THREADS="2"))
    base, limited, explicit = map(int, out.stdout.split())
    assert limited == base
    assert explicit == base + 2


_LIBGOMP = """if True:
    import json, numpy, threadpoolctl

    def openmp_libraries():
        with open("/proc/self/maps") as f:
            return {line.split()[-1] for line in f if "libgomp" in line or "libomp" in line or "libiomp" in line}

    before = openmp_libraries()
    import synet, synet._deconvolution, synet._gather, synet._quantized_add
    print(json.dumps({"synet": sorted(openmp_libraries() - before),
                      "threadpoolctl": [i["filepath"] for i in threadpoolctl.threadpool_info()
                                        if i["user_api"] == "openmp"]}))
"""


@needs_openmp
@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs Linux's /proc")
def test_threadpoolctl_sees_the_openmp_runtime_synet_loads(tmp_path):
    """The OpenMP runtime that importing synet's extension modules maps into the process is one threadpoolctl
    lists (and so limits)."""
    import json

    _threadpoolctl()
    out = subprocess.run([sys.executable, "-c", _LIBGOMP], capture_output=True, text=True, check=True, cwd=tmp_path)
    found = json.loads(out.stdout)
    assert found["synet"], "importing synet mapped no OpenMP runtime"
    seen = {os.path.realpath(p) for p in found["threadpoolctl"]}
    assert {os.path.realpath(p) for p in found["synet"]} <= seen, found


# ---------------------------------------------------------------------------------------------
# Absurd thread counts (SPEC §7: a ValueError naming the parameter; no input crashes the interpreter)


@pytest.mark.parametrize("count", [1025, 2**31 - 1, 2**31, 2**80])
@pytest.mark.parametrize("where", ["set_num_threads", "n_threads"])
def test_a_count_above_1024_is_a_value_error_naming_the_parameter(where, count):
    """(2**31 was OverflowError('value too large to convert to int'), naming nothing; 2**31 - 1 reached
    OpenMP, which ended the process when it could not start the threads.)"""
    name = "n" if where == "set_num_threads" else "n_threads"
    before = synet.get_num_threads()
    with pytest.raises(ValueError, match=rf"^{name}: expected a thread count of at most 1024, got {count}$"):
        if where == "set_num_threads":
            synet.set_num_threads(count)
        else:
            synet.float32_to_bfloat16(np.ones(4, np.float32), n_threads=count)
    assert synet.get_num_threads() == before


@needs_openmp
def test_1024_threads_are_allowed():   # (checked without starting them)
    from synet._kernels import resolve_num_threads

    assert resolve_num_threads(1024) == 1024


_ABSURD = """if True:
    import resource, numpy as np, synet
    x = np.ones(1 << 20, np.float32)
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))   # room for a few hundred thread stacks
    try:
        synet.float32_to_bfloat16(x, n_threads=2**31 - 1)
        print("result")
    except Exception as error:
        print(type(error).__name__)
"""


@needs_openmp
@pytest.mark.skipif(bool(os.environ.get("SYNET_SANITIZED")), reason="AddressSanitizer needs more address space")
def test_an_absurd_thread_count_does_not_end_the_process(tmp_path):
    out = subprocess.run([sys.executable, "-c", _ABSURD], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, (out.returncode, out.stderr[-500:])
    assert out.stdout.strip() == "ValueError", out.stdout


COUNT_REGIONS = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
static long regions;
typedef void (*parallel_fn)(void (*)(void *), void *, unsigned, unsigned);
void GOMP_parallel(void (*fn)(void *), void *data, unsigned threads, unsigned flags)
{
    static parallel_fn next;   /* libgomp is loaded by the extensions, out of the global scope */
    if (!next)
        next = (parallel_fn)dlsym(dlopen("libgomp.so.1", RTLD_LAZY), "GOMP_parallel");
    if (!next)
        abort();
    ++regions;
    next(fn, data, threads, flags);
}
long synet_test_regions(void) { return regions; }
"""

ONE_THREAD_CALLS = r"""
import ctypes, numpy as np, synet
regions = ctypes.CDLL(None).synet_test_regions
regions.restype = ctypes.c_long
rng = np.random.default_rng(0)
a, b = rng.integers(0, 256, 1 << 20, dtype=np.uint8), rng.integers(0, 256, 1 << 20, dtype=np.uint8)
data = rng.standard_normal((256, 1024)).astype(np.float32)   # 8 blocks of a parallel BF16 conversion
index = rng.integers(0, 1024, (256, 1024))
x = rng.standard_normal((1, 64, 32, 32)).astype(np.float32)
w = rng.standard_normal((64, 128, 4, 4)).astype(np.float32)
calls = {
    "quantized_add": lambda n: synet.quantized_add(a, b, a_scale=0.1, n_threads=n),
    "gather_elements": lambda n: synet.gather_elements(data, index, 1, n_threads=n),
    "conv_transpose2d": lambda n: synet.conv_transpose2d(x, w, None, 2, 1, n_threads=n),
    "bfloat16": lambda n: synet.float32_to_bfloat16(data, n_threads=n),
    "bfloat16 from float64": lambda n: synet.float32_to_bfloat16(data.astype(np.float64), n_threads=n),
}
for name, call in calls.items():
    before = regions()
    call(1)
    one = regions() - before
    before = regions()
    call(2)
    print(name, one, regions() - before)
"""


@pytest.mark.skipif(not OPENMP or sys.platform != "linux", reason="counts libgomp's parallel regions")
def test_one_thread_opens_no_parallel_region(tmp_path):
    """n_threads=1 runs on the calling thread: no OpenMP region, which even with one thread costs libgomp's
    team setup and two futex system calls a call (a conv_transpose2d call made two, for its weights). Two
    threads on work this size do open one (so the count sees them)."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc to build the region counter")
    source, shim = tmp_path / "count.c", tmp_path / "count.so"
    source.write_text(COUNT_REGIONS)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(shim), str(source), "-ldl"], check=True)
    # after what is preloaded already (the sanitizer run's libasan must stay first)
    env = dict(os.environ, LD_PRELOAD=f"{os.environ.get('LD_PRELOAD', '')} {shim}".strip())
    result = subprocess.run([sys.executable, "-c", ONE_THREAD_CALLS], capture_output=True, text=True, env=env,
                            timeout=300, cwd=tmp_path)   # not the checkout: the installed synet
    assert result.returncode == 0, result.stderr
    counts = {line.rsplit(" ", 2)[0]: tuple(map(int, line.rsplit(" ", 2)[1:])) for line in result.stdout.splitlines()}
    assert len(counts) == 5
    for name, (one, two) in counts.items():
        assert one == 0, f"{name}: {one} parallel regions with n_threads=1"
        assert two >= 1, f"{name}: no parallel region with n_threads=2 (the counter sees none)"


FORK_SCRIPT = r"""
import multiprocessing, os, sys, threading
import numpy as np, synet

rng = np.random.default_rng(0)
x = rng.standard_normal((1, 64, 48, 48)).astype(np.float32)
w = rng.standard_normal((64, 32, 4, 4)).astype(np.float32)
a = rng.integers(0, 256, 1 << 21).astype(np.uint8)
data = rng.standard_normal((8, 4096, 64)).astype(np.float32)
index = rng.integers(0, 4096, (8, 4096, 64))
big = rng.standard_normal(1 << 22).astype(np.float32)

def run():
    return [synet.conv_transpose2d(x, w, stride=2, padding=1, n_threads=2).tobytes(),
            synet.quantized_add(a, a, a_scale=0.1, b_scale=0.2, dst_scale=0.3, n_threads=2).tobytes(),
            synet.gather_elements(data, index, 1, n_threads=2).tobytes(),
            synet.float32_to_bfloat16(big, n_threads=2).tobytes()]

expected = run()   # the parent ran parallel regions of two threads (here and in another thread)
worker = threading.Thread(target=run)
worker.start()
worker.join()

def child(_):
    return run() == expected

with multiprocessing.get_context("fork").Pool(2) as pool:
    assert pool.map(child, range(4)) == [True] * 4
pid = os.fork()
if pid == 0:
    os._exit(0 if run() == expected else 3)
assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
assert run() == expected   # and the parent still runs on two threads
print("ok")
"""


@pytest.mark.skipif(not OPENMP or not hasattr(os, "fork"), reason="needs OpenMP and fork")
def test_a_forked_child_runs_parallel_regions(tmp_path):
    """GNU libgomp is not fork-safe: a child forked after its parent ran a two-thread region hung for ever at its
    own first one (multiprocessing's "fork" start method, os.fork). synet releases the forking thread's OpenMP
    threads before each fork; parent and child start new ones."""
    script = tmp_path / "fork.py"
    script.write_text(FORK_SCRIPT)
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True,
                               env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        out, err = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)   # the hung children too
        process.communicate()
        pytest.fail("a forked child hung in its first parallel region")
    assert process.returncode == 0 and out.strip() == "ok", err[-2000:]


@pytest.mark.skipif(not OPENMP, reason="needs OpenMP")
@pytest.mark.parametrize("env, expected", [
    ({"OMP_NUM_THREADS": "100000"}, "1024 1024"),   # crashed in libgomp at the first parallel call
    ({"OMP_NUM_THREADS": "2", "OMP_THREAD_LIMIT": "1"}, "1 1"),   # the region gets 1: reported 2
    ({"OMP_NUM_THREADS": "2", "OMP_MAX_ACTIVE_LEVELS": "0"}, "1 1"),   # no active region: reported 2
])
def test_the_default_count_is_what_a_region_gets(env, expected, tmp_path):
    """The count a call without n_threads uses (and get_num_threads reports) is OpenMP's within OMP_THREAD_LIMIT
    and OMP_MAX_ACTIVE_LEVELS, and at most 1024 however large OMP_NUM_THREADS or a threadpoolctl limit is."""
    code = ("import synet; from synet._kernels import resolve_num_threads; "
            "print(synet.get_num_threads(), resolve_num_threads())")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
                         check=True, cwd=tmp_path)
    assert out.stdout.strip() == expected


@pytest.mark.skipif(not OPENMP, reason="needs OpenMP")
def test_a_threadpoolctl_limit_above_1024_is_capped():
    from threadpoolctl import threadpool_limits
    with threadpool_limits(limits=100000, user_api="openmp"):
        assert synet.get_num_threads() == 1024


@pytest.mark.skipif(not OPENMP or not hasattr(os, "sched_getaffinity"), reason="needs OpenMP and Linux")
@pytest.mark.parametrize("env", [{"OMP_PROC_BIND": "true"}, {"OMP_PROC_BIND": "spread", "OMP_PLACES": "threads"}])
def test_negative_counts_count_the_process_cpus_under_binding(env, tmp_path):
    """libgomp binds the initial thread to one place under OMP_PROC_BIND: the thread's own affinity mask then
    held one CPU and n_threads=-1 meant 1 (set_num_threads(-2): "leaves no thread of the 1 CPUs")."""
    code = ("import os, synet; from synet._kernels import resolve_num_threads; "
            "print(resolve_num_threads(-1), len(os.sched_getaffinity(0)), os.cpu_count())")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
                         check=True, cwd=tmp_path)
    minus_one, _, cpus = map(int, out.stdout.split())
    assert minus_one == min(cpus, len(os.sched_getaffinity(0)))


@pytest.mark.parametrize("value, warned", [("avx512vbmi", None), (" AVX512VBMI ", None),
                                           ("avx512vbmi, bogus", "'bogus' ignored"), ("avx2", "'avx2' ignored")])
def test_disabled_cpu_features_are_read_as_names(value, warned, tmp_path):
    """SYNET_DISABLE_CPU_FEATURES: names in any case, spaces ignored (the kernels compared bytes: "AVX512VBMI" was
    ignored without a word); a name nothing reads warns at import, as the other SYNET_* variables do."""
    out = subprocess.run([sys.executable, "-c", "import synet"], capture_output=True, text=True, cwd=tmp_path,
                         env={**os.environ, "SYNET_DISABLE_CPU_FEATURES": value})
    assert out.returncode == 0, out.stderr
    if warned is None:
        assert "SYNET_DISABLE_CPU_FEATURES" not in out.stderr
    else:
        assert f"SYNET_DISABLE_CPU_FEATURES: {warned}; expected some of avx512vbmi" in out.stderr
