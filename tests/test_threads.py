"""Thread policy: defaults follow OpenMP (OMP_NUM_THREADS, threadpoolctl), explicit settings win."""

import os
import subprocess
import sys

import pytest

import synet
from synet._kernels import OPENMP, available_cpus


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
    with pytest.raises(TypeError, match="n_threads: expected an int"):
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
    assert synet.get_num_threads() == min(available_cpus(), int(os.environ.get("OMP_NUM_THREADS", "1024")))


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
