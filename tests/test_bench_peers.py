"""The bench's per-level peers (``python -m synet bench --isa``) really run that level's instructions."""

import os
import subprocess
import sys

import pytest

import synet
from synet.benchmarks import PEER_ISA_ENV

# PyTorch's transposed convolutions as the bench calls them: 1x1 (an MKL SGEMM) and k4 s2 (oneDNN)
PEER_CALLS = r"""
import torch
torch.set_num_threads(1)
x = torch.randn(1, 64, 9, 7).contiguous(memory_format=torch.channels_last)
torch.nn.functional.conv_transpose2d(x, torch.randn(64, 32, 1, 1))
torch.nn.functional.conv_transpose2d(x, torch.randn(64, 32, 4, 4), stride=2, padding=1)
"""


@pytest.mark.parametrize("level", ["baseline", "avx2"])
def test_torch_peer_is_restricted_to_the_level(level):
    pytest.importorskip("torch")
    if synet._kernels.LEVELS.index(synet.config()["dispatch"]["supported"]) <= synet._kernels.LEVELS.index(level):
        pytest.skip("the CPU has nothing above this level to leave out")
    env = dict(os.environ, MKL_VERBOSE="1", ONEDNN_VERBOSE="1", **PEER_ISA_ENV[level])
    run = subprocess.run([sys.executable, "-c", PEER_CALLS], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    log = run.stdout + run.stderr
    mkl = [line for line in log.splitlines() if line.startswith("MKL_VERBOSE oneMKL")]
    if mkl:   # PyTorch built with MKL: its banner names the code path it chose
        assert "AVX-512" not in mkl[0] and "AVX512" not in mkl[0], mkl[0]
    kernels = [line.split(",")[5] for line in log.splitlines()
               if line.startswith("onednn_verbose") and ",exec," in line and ",deconvolution," in line]
    assert kernels, log[-2000:]
    assert not any("avx512" in k or "amx" in k for k in kernels), kernels
