"""Per-call cost: small tensors through the functional forms (S1-S4), the contexts' forward (S5-S7) and
the first call of a new shape (S8-S10), in microseconds per call, against PyTorch / NumPy / ml_dtypes on
the same data."""

from __future__ import annotations

import functools
import itertools

import ml_dtypes
import numpy as np

import synet

from . import Workload, torch_single_thread

RNG_SEED = 2026


def _synet_deconvolution(x, w, b):
    return synet.conv_transpose2d(x, w, b, stride=2, n_threads=1)


def _torch_deconvolution(torch, x, w, b):
    with torch.inference_mode():
        return torch.nn.functional.conv_transpose2d(x, w, b, stride=2)


def _tiny_deconvolution():
    rng = np.random.default_rng(RNG_SEED)
    x = rng.standard_normal((1, 8, 4, 4)).astype(np.float32)
    w = rng.standard_normal((8, 8, 2, 2)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    candidates = {"synet": functools.partial(_synet_deconvolution, x, w, b)}
    torch = torch_single_thread()
    if torch is not None:
        candidates["torch fp32"] = functools.partial(_torch_deconvolution, torch, *map(torch.from_numpy, (x, w, b)))
    return candidates


def _synet_quantized_add(a, b):
    return synet.quantized_add(a, b, a_scale=0.010, a_zero=47, b_scale=0.020, b_zero=30, dst_scale=0.015,
                               dst_zero=38, n_threads=1)


def _numpy_quantized_add(a, b):
    """_synet_quantized_add in NumPy float32 (round half to even, clamped)."""
    f32 = np.float32
    value = (a.astype(f32) - f32(47)) * f32(0.010) + (b.astype(f32) - f32(30)) * f32(0.020)
    return np.clip(np.rint(value / f32(0.015)) + f32(38), 0, 255).astype(np.uint8)


def _small_quantized_add():
    rng = np.random.default_rng(RNG_SEED)
    a, b = rng.integers(0, 256, 1024, dtype=np.uint8), rng.integers(0, 256, 1024, dtype=np.uint8)
    return {"synet": functools.partial(_synet_quantized_add, a, b),
            "numpy float32": functools.partial(_numpy_quantized_add, a, b)}


def _small_gather():
    rng = np.random.default_rng(RNG_SEED)
    data = rng.standard_normal((16, 16)).astype(np.float32)
    idx = rng.integers(0, 16, (16, 16))
    candidates = {
        "synet": lambda: synet.gather_elements(data, idx, 1, n_threads=1),
        "numpy take_along_axis": lambda: np.take_along_axis(data, idx, 1),
    }
    torch = torch_single_thread()
    if torch is not None:
        td, ti = torch.from_numpy(data), torch.from_numpy(idx)
        candidates["torch.gather"] = lambda: torch.gather(td, 1, ti)
    return candidates


def _small_bf16():
    x = np.random.default_rng(RNG_SEED).standard_normal(1024).astype(np.float32)
    return {"synet": lambda: synet.float32_to_bfloat16(x, n_threads=1),
            "ml_dtypes astype": lambda: x.astype(ml_dtypes.bfloat16)}


def _forward_quantized_add():
    rng = np.random.default_rng(RNG_SEED)
    a, b = rng.integers(0, 256, 64, dtype=np.uint8), rng.integers(0, 256, 64, dtype=np.uint8)
    dst = np.empty(64, np.uint8)
    context = synet.QuantizedAdd([64], "u8", 0.010, 47, [64], "u8", 0.020, 30, "identity", None, "u8", 0.015, 38)
    candidates = {"synet": lambda: context.forward(a, b, dst, n_threads=1)}
    from . import simd_peer
    simd_peer.add(candidates, "S5", "quantized_add", dst, micro=True, a=a, b=b, activation="identity",
                  dst_dtype=np.uint8, q=dict(a_scale=0.010, a_zero=47, b_scale=0.020, b_zero=30, dst_scale=0.015,
                                             dst_zero=38))
    return candidates


def _forward_gather():
    rng = np.random.default_rng(RNG_SEED)
    src = rng.standard_normal(64).astype(np.float32)
    idx = rng.integers(0, 64, 64).astype(np.int64)
    dst = np.empty(64, np.float32)
    context = synet.GatherElements("f32", "i64", False, 1, [1], 64, 1, 64)
    candidates = {"synet": lambda: context.forward(src, idx, dst, n_threads=1)}
    from . import simd_peer
    simd_peer.add(candidates, "S6", "gather", dst, micro=True, data=src, indices=idx, outer=[1], src_count=64, inner=1,
                  idx_count=64)
    return candidates


def _forward_deconvolution():
    rng = np.random.default_rng(RNG_SEED)
    conv = synet.ConvParams.deconvolution(32, 1, 1, 32, 1, format="NHWC")
    context = synet.Deconvolution16b(1, conv)
    w = rng.standard_normal(32 * 32).astype(np.float32)
    context.set_params(w)
    x = rng.standard_normal((1, 1, 1, 32)).astype(np.float32)
    dst = context.forward(x)
    candidates = {"synet": lambda: context.forward(x, None, dst, n_threads=1)}
    from . import simd_peer
    simd_peer.add(candidates, "S7", "deconvolution", dst, micro=True, conv=conv, x=x, weight=w, bias=None)
    return candidates


# The first call of a geometry: every call a new shape, in a cycle longer than synet's plan cache (128 plans)
# and oneDNN's primitive cache (1024), so each one plans afresh, as a model with dynamic shapes does.
FIRST_CALL_SHAPES = [(h, w) for h in range(4, 37) for w in range(4, 37)]   # 1089


def _first_call_deconvolution():
    rng = np.random.default_rng(RNG_SEED)
    xs = [rng.standard_normal((1, 8, h, w)).astype(np.float32) for h, w in FIRST_CALL_SHAPES]
    w = rng.standard_normal((8, 8, 2, 2)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    inputs = itertools.cycle(xs)
    candidates = {"synet": lambda: _synet_deconvolution(next(inputs), w, b)}
    torch = torch_single_thread()
    if torch is not None:
        txs = itertools.cycle([torch.from_numpy(x) for x in xs])
        tw, tb = torch.from_numpy(w), torch.from_numpy(b)
        candidates["torch fp32"] = lambda: _torch_deconvolution(torch, next(txs), tw, tb)
    return candidates


def _cycled_adds(pairs):
    """synet's quantized add and NumPy's expression, each call on the next (a, b) of the cycle."""
    cycle = itertools.cycle(pairs)
    return {"synet": lambda: _synet_quantized_add(*next(cycle)),
            "numpy float32": lambda: _numpy_quantized_add(*next(cycle))}


def _first_call_quantized_add():
    rng = np.random.default_rng(RNG_SEED)
    return _cycled_adds([(rng.integers(0, 256, 1024 + k, dtype=np.uint8),
                          rng.integers(0, 256, 1024 + k, dtype=np.uint8)) for k in range(len(FIRST_CALL_SHAPES))])


def _first_call_broadcast_add():
    rng = np.random.default_rng(RNG_SEED)
    bias = rng.integers(0, 256, (1, 8, 1, 1), dtype=np.uint8)
    return _cycled_adds([(rng.integers(0, 256, (1, 8, h, w), dtype=np.uint8), bias) for h, w in FIRST_CALL_SHAPES])


WORKLOADS = [
    Workload("S1", "conv_transpose2d NCHW 8x4x4 -> 8, k2 s2 (functional, per call)", _tiny_deconvolution,
             micro=True),
    Workload("S2", "quantized_add u8 1K elements (functional, per call)", _small_quantized_add, micro=True),
    Workload("S3", "gather_elements f32 16x16, axis 1 (functional, per call)", _small_gather, micro=True),
    Workload("S4", "float32_to_bfloat16 1K elements (per call)", _small_bf16, micro=True),
    Workload("S5", "QuantizedAdd.forward u8 64 elements, dst given", _forward_quantized_add, micro=True),
    Workload("S6", "GatherElements.forward f32 64 elements, dst given", _forward_gather, micro=True),
    Workload("S7", "Deconvolution16b.forward NHWC 32x1x1 -> 32, 1x1, dst given", _forward_deconvolution, micro=True),
    Workload("S8", "conv_transpose2d NCHW 8xHxW -> 8, k2 s2, first call (a new shape each call)",
             _first_call_deconvolution, micro=True),
    Workload("S9", "quantized_add u8 1K elements, first call (a new length each call)", _first_call_quantized_add,
             micro=True),
    Workload("S10", "quantized_add u8 1x8xHxW + 1x8x1x1, first call (a new shape each call)",
             _first_call_broadcast_add, micro=True),
]
