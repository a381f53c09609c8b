"""AMX coexistence: synet's AMX deconvolution and PyTorch's bf16 conv_transpose2d (oneDNN, which may use AMX
too) interleaved in one thread, in both orders, many times: no crash, and every call of each library gives
the same bits as its first (a tile configuration left behind or clobbered by the other would show).

Runs only where synet's AMX kernels can run (``synet._deconvolution.amx_available()``) and torch is installed.
``SYNET_TEST_AMX_ANY_KERNEL=1`` runs it whatever kernel synet picks (to check the test itself on a machine
without AMX).
"""

import os

import numpy as np
import pytest
from reference import BF16, activate, assert_close, bf16_round, reference_nd

import synet
from synet._deconvolution import amx_available

torch = pytest.importorskip("torch", reason="torch is not installed")
ANY_KERNEL = os.environ.get("SYNET_TEST_AMX_ANY_KERNEL") == "1"
pytestmark = pytest.mark.skipif(not (ANY_KERNEL or amx_available()), reason="synet's AMX kernels cannot run here")

ROUNDS = 50


def synet_case(fmt, groups, src_type, seed):
    """A PhaseGemm context with >= 16 input channels per group (AMX's), its source, and the reference check."""
    rng = np.random.default_rng(seed)
    cg_in, cg_out, size = 32, 24, (9, 13)
    c_in, c_out = cg_in * groups, cg_out * groups
    conv = synet.ConvParams.deconvolution(c_in, *size, c_out, 4, 2, 1, 1, groups, "relu", src_type, "bf16", fmt)
    x = rng.standard_normal((1, c_in, *size)).astype(np.float32)
    w = rng.standard_normal((c_in, cg_out, 4, 4)).astype(np.float32)
    bias = rng.standard_normal(c_out).astype(np.float32)
    nhwc = fmt == "NHWC"
    context = synet.Deconvolution16b(1, conv)
    context.set_params(np.ascontiguousarray(w.transpose(0, 2, 3, 1)) if nhwc else w, bias)
    assert context.info().startswith("PhaseGemm"), context.info()
    if not ANY_KERNEL:
        assert "amx-bf16" in context.info(), context.info()
    src = np.ascontiguousarray(x.transpose(0, 2, 3, 1)) if nhwc else x
    if src_type == "bf16":
        src = src.astype(BF16)
    ref, mag = reference_nd(bf16_round(x), bf16_round(w), bias, (2, 2), (1, 1), (1, 1), (1, 1), groups)
    return context, src, (activate(ref, "relu"), mag, nhwc)


def torch_case(channels_last, seed):
    """PyTorch's bf16 ConvTranspose2d on a workload of the same kind (oneDNN; AMX where the CPU has it)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 64, 11, 10, generator=g).to(torch.bfloat16)
    w = torch.randn(64, 48, 4, 4, generator=g).to(torch.bfloat16)
    b = torch.randn(48, generator=g).to(torch.bfloat16)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)

    def run():
        with torch.no_grad():
            y = torch.nn.functional.conv_transpose2d(x, w, b, stride=2, padding=1)
        return y.float().contiguous().numpy().view(np.uint32).copy()

    return run


def test_synet_amx_and_torch_bf16_interleaved():
    cases = [synet_case("NHWC", 1, "f32", 1), synet_case("NCHW", 1, "f32", 2), synet_case("NHWC", 2, "bf16", 3),
             synet_case("NCHW", 2, "bf16", 4)]
    torch_runs = [torch_case(False, 5), torch_case(True, 6)]

    def synet_call(k, n_threads):
        context, src, _ = cases[k]
        return context.forward(src, n_threads=n_threads).view(np.uint16).copy()

    synet_first = [synet_call(k, None) for k in range(len(cases))]
    torch_first = [run() for run in torch_runs]
    for k, (_context, _, (ref, mag, nhwc)) in enumerate(cases):   # the first results are right
        got = synet_first[k].view(BF16)
        assert_close(np.moveaxis(got, -1, 1) if nhwc else got, ref, mag, True)
    for round_ in range(ROUNDS):
        for k in range(len(cases)):
            n_threads = (None, 1, 2)[(round_ + k) % 3]
            t = (round_ + k) % len(torch_runs)
            if (round_ + k) % 2:   # both orders: synet then torch, torch then synet
                assert np.array_equal(synet_call(k, n_threads), synet_first[k]), (round_, k, "synet first")
                assert np.array_equal(torch_runs[t](), torch_first[t]), (round_, t, "torch after synet")
            else:
                assert np.array_equal(torch_runs[t](), torch_first[t]), (round_, t, "torch first")
                assert np.array_equal(synet_call(k, n_threads), synet_first[k]), (round_, k, "synet after torch")


def test_functional_form_with_torch_in_between():
    """The functional form (a cached plan, weights packed per call) between torch calls: the same bits."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 48, 8, 8)).astype(BF16)
    w = rng.standard_normal((48, 32, 4, 4)).astype(np.float32)
    run = torch_case(True, 8)
    first = synet.conv_transpose2d(x, w, None, 2, 1).view(np.uint16).copy()
    torch_first = run()
    for _ in range(ROUNDS):
        assert np.array_equal(run(), torch_first)
        assert np.array_equal(synet.conv_transpose2d(x, w, None, 2, 1).view(np.uint16), first)
