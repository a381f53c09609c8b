"""Runs every op on fixed inputs and saves the raw bytes of each result (tests/test_cpu_levels.py runs
it in subprocesses under each SYNET_MAX_ISA and compares the files bit for bit).

    SYNET_MAX_ISA=avx2 python tests/levels_probe.py OUT.npz

The inputs are normal numbers (no subnormals: the hardware BF16 instructions treat those as zero).
"""

from __future__ import annotations

import sys

import ml_dtypes
import numpy as np

import synet
from synet import Activation

ACTIVATIONS = [a.name.lower() for a in Activation]


def act_params(act: str, channels: int, rng) -> np.ndarray | None:
    if act == "prelu":
        return rng.uniform(-1, 1, channels).astype(np.float32)
    return None


def probe(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    # BF16 conversions: small and large (streamed) arrays, nearest and truncate, float32 and float64
    for n in (1001, 3_000_017):
        x = (rng.standard_normal(n) * 100).astype(np.float32)
        x[:8] = [np.inf, -np.inf, np.nan, -np.nan, 3.4e38, -3.4e38, 1.0, -0.0]
        for rounding in ("nearest", "truncate"):
            out[f"bf16 f32 {rounding} {n}"] = synet.float32_to_bfloat16(x, rounding=rounding).view(np.uint16)
            out[f"bf16 f64 {rounding} {n}"] = synet.round_to_bfloat16(x.astype(np.float64) * 1.0001,
                                                                      rounding=rounding)
        out[f"widen {n}"] = synet.bfloat16_to_float32(x.astype(ml_dtypes.bfloat16))
    # GatherElements: every element width, both index types, inner 1 / > 1, a constant index
    for dtype in (np.uint8, np.float16, np.float32, np.int64):
        data = rng.integers(0, 100, (3, 40, 37)).astype(dtype)
        for itype in (np.int32, np.int64):
            for axis in (1, 2):
                idx = rng.integers(-data.shape[axis], data.shape[axis], (3, 29, 37) if axis == 1 else (3, 40, 23))
                out[f"gather {np.dtype(dtype).name} {np.dtype(itype).name} axis {axis}"] = \
                    synet.gather_elements(data, idx.astype(itype), axis)
    data = rng.integers(0, 256, (8, 1024, 64)).astype(np.uint8)   # the 1-byte strip path
    out["gather u8 strips"] = synet.gather_elements(data, rng.integers(-1024, 1024, (8, 1024, 64)), 1)
    for dtype in (np.float16, np.float32, np.int64):   # the portable level's strips of wider elements
        count = 131072 // (32 * np.dtype(dtype).itemsize)
        data = rng.integers(0, 100, (2, count, 70)).astype(dtype)
        for itype in (np.int32, np.int64):
            idx = rng.integers(-count, count, (2, count * 3 // 4, 70)).astype(itype)
            out[f"gather {np.dtype(dtype).name} {np.dtype(itype).name} strips"] = synet.gather_elements(data, idx, 1)
    g = synet.GatherElements("f32", "i64", True, 1, [4, 16], 128, 1, 128)
    idx = np.tile(rng.integers(-128, 128, (1, 16, 128, 1)), (4, 1, 1, 1))
    g.set_index(idx)
    out["gather const"] = g.forward(rng.standard_normal(4 * 16 * 128).astype(np.float32))
    # QuantizedAdd: every type mix of uint8 / int8 / float32, every activation, broadcasting
    types = {"u8": np.uint8, "i8": np.int8, "f32": np.float32}

    def operand(t, shape):
        if t == "f32":
            return (rng.standard_normal(shape) * 2).astype(np.float32)
        info = np.iinfo(types[t])
        return rng.integers(info.min, info.max + 1, shape).astype(types[t])

    zero = {"u8": 30, "i8": -5, "f32": 0}
    for ta in types:
        for tb in types:
            for td in types:
                a, b = operand(ta, (2, 16, 9, 11)), operand(tb, (16, 1, 11))
                for act in ACTIVATIONS:
                    out[f"qadd {ta}+{tb}->{td} {act}"] = synet.quantized_add(
                        a, b, a_scale=0.02, a_zero=zero[ta], b_scale=0.03, b_zero=zero[tb], dst_scale=0.05,
                        dst_zero=zero[td], dst_dtype=types[td], activation=act,
                        activation_params=act_params(act, 16, rng))
    # long rows through the fused generic loop (float32 values, IDENTITY / RELU, 1-byte output): float32
    # operands with NaN, +-inf, -0, huge values and values on rounding ties, either operand a scalar
    special = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e30, -1e30, 0.025, -0.025, 0.075, 3.4e38], np.float32)
    for ta, tb in (("f32", "u8"), ("u8", "f32"), ("f32", "i8"), ("i8", "f32"), ("f32", "f32"), ("u8", "i8")):
        for td in ("u8", "i8"):
            a, b = operand(ta, (3, 1001)), operand(tb, (3, 1001))
            for x in (a, b):
                if x.dtype == np.float32:
                    flat = x.reshape(-1)
                    flat[::7] = np.resize(special, flat[::7].size)
            for act in ("identity", "relu"):
                for name, (x, y) in (("rows", (a, b)), ("a scalar", (a[:1, :1], b)), ("b scalar", (a, b[:1, :1]))):
                    out[f"qadd fused {ta}+{tb}->{td} {act} {name}"] = synet.quantized_add(
                        x, y, a_scale=0.02, a_zero=zero[ta], b_scale=0.03, b_zero=zero[tb], dst_scale=0.05,
                        dst_zero=zero[td], dst_dtype=types[td], activation=act)
    a, b = operand("u8", (1, 64, 56, 56)), operand("u8", (1, 64, 56, 56))   # folded and lookup kernels
    for act in ("identity", "relu", "gelu", "elu"):
        out[f"qadd large {act}"] = synet.quantized_add(a, b, a_scale=0.01, a_zero=47, b_scale=0.02, b_zero=30,
                                                       dst_scale=0.015, dst_zero=38, activation=act)
    out["qadd per-axis"] = synet.quantized_add(a, b, a_scale=rng.uniform(0.01, 0.02, 64), a_zero=47,
                                               b_scale=0.02, b_zero=rng.integers(0, 255, 64), dst_scale=0.015,
                                               dst_zero=38)
    # the folded kernel on every pair of operand bytes (and one operand a scalar), with constants the portable
    # level sums in float64 (most) or by fmaf (b_scale 1e-12: the exponents span more than a float64); scales
    # 0.5 +- 2^-24 put half the values a few float32 steps from a rounding tie, where an fma differs from a
    # product rounded first
    pairs = np.arange(65536)
    half_up, half_down = 0.5 + 2.0**-24, 0.5 - 2.0**-25
    for t, zeros in (("u8", (47, 200, 3)), ("i8", (-5, 100, -128))):
        info = np.iinfo(types[t])
        qa = (pairs >> 8).astype(np.uint8).view(types[t]).reshape(256, 256)
        qb = (pairs & 255).astype(np.uint8).view(types[t]).reshape(256, 256)
        for n, (sa, sb, ds) in enumerate([(0.01, 0.02, 0.015), (0.3, 0.7, 0.25), (1.0, 1.0, 1.0), (0.013, 1e-12, 0.011),
                                          (3e-3, 1.7e-3, 9e-4), (1e-30, 2e-30, 1.5e-30), (half_up, half_up, 1.0),
                                          (half_down, half_up, 1.0)]):
            za, zb, zd = (zeros[n % 3], zeros[(n + 1) % 3], zeros[(n + 2) % 3]) if n < 6 else (0, 0, 0)
            assert info.min <= min(za, zb, zd) and max(za, zb, zd) <= info.max
            for act in ("identity", "relu"):
                for name, (x, y) in (("pairs", (qa, qb)), ("a scalar", (qa[:1, :1], qb)),
                                     ("b scalar", (qa, qb[:1, :1]))):
                    out[f"qadd folded {t} {n} {act} {name}"] = synet.quantized_add(
                        x, y, a_scale=sa, a_zero=za, b_scale=sb, b_zero=zb, dst_scale=ds, dst_zero=zd,
                        dst_dtype=types[t], activation=act)
    # Deconvolution: both layouts, FP32 / BF16 in and out, every activation, GEMM, depthwise and (channels first,
    # few output channels) planar, 1 and 2 threads
    # (NaNs of both signs and payloads, and infinities, in inputs and weights: a sum meeting NaNs of both signs)
    specials = np.array([0x7FC00000, 0xFFC00000, 0x7FA50000, 0xFF812345, 0x7F800000, 0xFF800000, 0x7F800001,
                         0xFFFFFFFF],   # (the last two: NaNs whose BF16 rounding on the bits would carry)
                        np.uint32).view(np.float32)
    for fmt, nonfinite in (("NCHW", False), ("NHWC", False), ("NCHW", True), ("NHWC", True)):
        for src_c, dst_c, group, kernel, stride, width in (
                (24, 40, 1, 4, 2, 11), (40, 36, 1, 3, 1, 11), (64, 64, 1, 1, 1, 11), (16, 16, 16, 4, 2, 11),
                (20, 20, 20, 3, 1, 11), (12, 20, 2, 2, 2, 11), (70, 24, 1, 2, 2, 11), (10, 12, 1, 3, 1, 11),
                (24, 3, 1, 4, 2, 40), (32, 4, 2, 3, 1, 37), (64, 2, 1, 4, 2, 19),   # (these five planar: the
                (16, 20, 2, 4, 2, 40), (8, 8, 1, 2, 2, 24),   # last two in blocks of output channels, NCHW only;
                (4, 8, 1, 4, 2, 40), (1, 9, 1, 3, 1, 40)):   # these two in both layouts)
            x = rng.standard_normal((2, src_c, 9, width)).astype(np.float32)
            w = rng.standard_normal((src_c, dst_c // group, kernel, kernel)).astype(np.float32)
            if nonfinite:
                x.reshape(-1)[::29] = np.resize(specials, x.reshape(-1)[::29].size)
                w.reshape(-1)[::37] = np.resize(specials[::-1], w.reshape(-1)[::37].size)
            if fmt == "NHWC":
                x, w = x.transpose(0, 2, 3, 1).copy(), w.transpose(0, 2, 3, 1).copy()
            bias = rng.standard_normal(dst_c).astype(np.float32)
            for act in ("identity", "relu", "elu") if nonfinite else ACTIVATIONS:
                for src_type, out_dtype in (("f32", np.float32), ("bf16", ml_dtypes.bfloat16)):
                    xs = x.astype(ml_dtypes.bfloat16) if src_type == "bf16" else x
                    for threads in (1,) if nonfinite else (1, 2):
                        key = f"deconv {fmt} {src_c}->{dst_c} g{group} k{kernel} s{stride} {act} {src_type} " \
                              f"{np.dtype(out_dtype).name} t{threads}{' nonfinite' if nonfinite else ''}"
                        out[key] = synet.conv_transpose2d(
                            xs, w, bias, stride, kernel // 2 if stride > 1 else 0, groups=group, layout=fmt,
                            activation=act, activation_params=act_params(act, dst_c, rng), out_dtype=out_dtype,
                            n_threads=threads)
    # planar, one output channel a group, k4 s2 p1 (with AVX-512 each loaded vector shared by both x phases and
    # two rows: planar_pair_rows; below it, planar_sums)
    x = rng.standard_normal((2, 24, 17, 40)).astype(np.float32)
    w = rng.standard_normal((24, 1, 4, 4)).astype(np.float32)
    for act in ("identity", "relu", "hswish"):
        for out_dtype in (np.float32, ml_dtypes.bfloat16):
            out[f"deconv planar pair {act} {np.dtype(out_dtype).name}"] = synet.conv_transpose2d(
                x, w, rng.standard_normal(2).astype(np.float32)[:1], 2, 1, activation=act, out_dtype=out_dtype)
    # depthwise, channels last, tall and wide: bands of several rows, a phase's rows a call, several strips
    x = rng.standard_normal((2, 37, 70, 24)).astype(np.float32)
    for kernel, stride in ((4, 2), (3, 1)):
        w = rng.standard_normal((24, kernel, kernel, 1)).astype(np.float32)
        for act in ("identity", "relu", "hswish"):
            for out_dtype in (np.float32, ml_dtypes.bfloat16):
                out[f"deconv depthwise NHWC bands k{kernel} {act} {np.dtype(out_dtype).name}"] = synet.conv_transpose2d(
                    x, w, rng.standard_normal(24).astype(np.float32), stride, 1, groups=24, layout="NHWC",
                    activation=act, out_dtype=out_dtype, n_threads=2)
    # outputs of 4 MiB: stores that bypass the caches (channels first: the phases' windows; last: the tiles)
    x = rng.standard_normal((1, 16, 64, 64)).astype(np.float32)
    w = rng.standard_normal((16, 64, 2, 2)).astype(np.float32)
    bias = rng.standard_normal(64).astype(np.float32)
    for fmt in ("NCHW", "NHWC"):
        xs, ws = (x, w) if fmt == "NCHW" else (x.transpose(0, 2, 3, 1).copy(), w.transpose(0, 2, 3, 1).copy())
        out[f"deconv {fmt} streamed"] = synet.conv_transpose2d(xs, ws, bias, 2, layout=fmt, activation="relu",
                                                               n_threads=2)
        xs, ws = xs.copy(), ws.copy()
        xs.reshape(-1)[::997] = np.resize(specials, xs.reshape(-1)[::997].size)
        ws.reshape(-1)[::41] = np.resize(specials[::-1], ws.reshape(-1)[::41].size)
        out[f"deconv {fmt} streamed nonfinite"] = synet.conv_transpose2d(xs, ws, bias, 2, layout=fmt, n_threads=2)
    # channels first, rows of >= 32 outputs a phase: from avx512_bf16 on the pixels-in-lanes tasks (two taps a
    # phase along x and a part block of pairs; stride 1, pad channels, part strips; groups), 1-D and 3-D too
    for src_c, dst_c, group, kernel, stride, pad, width in ((40, 20, 1, 4, 2, 1, 35), (10, 70, 1, 3, 1, 1, 37),
                                                            (12, 24, 2, 2, 2, 0, 40)):
        x = rng.standard_normal((2, src_c, 3, width)).astype(np.float32)
        w = rng.standard_normal((src_c, dst_c // group, kernel, kernel)).astype(np.float32)
        x.reshape(-1)[::53] = np.resize(specials, x.reshape(-1)[::53].size)
        bias = rng.standard_normal(dst_c).astype(np.float32)
        for act in ("identity", "relu"):
            for src_type, out_dtype in (("f32", np.float32), ("bf16", ml_dtypes.bfloat16)):
                xs = x.astype(ml_dtypes.bfloat16) if src_type == "bf16" else x
                out[f"deconv lanes {src_c}->{dst_c} g{group} k{kernel} s{stride} {act} {src_type}"] = \
                    synet.conv_transpose2d(xs, w, bias, stride, pad, groups=group, activation=act,
                                           out_dtype=out_dtype, n_threads=2)
    x = rng.standard_normal((2, 24, 70)).astype(np.float32)
    w = rng.standard_normal((24, 16, 4)).astype(np.float32)
    out["deconv lanes 1-D"] = synet.conv_transpose1d(x, w, None, 2, 1, activation="relu")
    x = rng.standard_normal((1, 32, 2, 3, 40)).astype(np.float32)
    w = rng.standard_normal((32, 24, 2, 2, 2)).astype(np.float32)
    out["deconv lanes 3-D"] = synet.conv_transpose3d(x, w, rng.standard_normal(24).astype(np.float32), 2, n_threads=2)
    return {k: np.ascontiguousarray(v).view(np.uint8).reshape(-1) for k, v in out.items()}


if __name__ == "__main__":
    np.savez(sys.argv[1], level=np.array(synet.config()["dispatch"]["ops"]["deconvolution"]), **probe())
