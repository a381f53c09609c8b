"""QuantizedAdd workloads Q1-Q6 (issue #3) against NumPy float32, onnxruntime QLinearAdd, torch quantized add.

Scales a 0.010, b 0.020, dst 0.015; zero points 47, 30, 38 (the seed's example).
"""

from __future__ import annotations

import warnings

import numpy as np

import synet

from . import Workload, ort_single_op, torch_single_thread

RNG_SEED = 2026
Q = dict(a_scale=0.010, a_zero=47, b_scale=0.020, b_zero=30, dst_scale=0.015, dst_zero=38)


def _numpy_float32(a, b, dst_dtype, relu):
    """The plain float32 NumPy expression of the formula."""
    f32 = np.float32
    sa, za, sb, zb = f32(Q["a_scale"]), f32(Q["a_zero"]), f32(Q["b_scale"]), f32(Q["b_zero"])
    ds, dz = f32(Q["dst_scale"]), f32(Q["dst_zero"])

    def dequantize(x, scale, zero):
        return (x.astype(f32) - zero) * scale if x.dtype == np.uint8 else x

    def run():
        value = dequantize(a, sa, za) + dequantize(b, sb, zb)
        if relu:
            value = np.maximum(value, f32(0))
        if dst_dtype == np.float32:
            return value
        return np.clip(np.rint(value / ds) + dz, 0, 255).astype(np.uint8)

    return run


def _ort_qlinear_add(a, b):
    """com.microsoft QLinearAdd on one thread (u8 + u8 -> u8, no activation), or None."""
    constants = {"a_s": np.float32(Q["a_scale"]), "a_z": np.uint8(Q["a_zero"]), "b_s": np.float32(Q["b_scale"]),
                 "b_z": np.uint8(Q["b_zero"]), "c_s": np.float32(Q["dst_scale"]), "c_z": np.uint8(Q["dst_zero"])}
    return ort_single_op("QLinearAdd", ["a", "a_s", "a_z", "b", "b_s", "b_z", "c_s", "c_z"], {"a": a, "b": b},
                         constants, domain="com.microsoft")


def _torch_quantized_add(a, b, relu):
    """torch.ops.quantized.add(_relu) on quint8 tensors, one thread, or None."""
    torch = torch_single_thread()
    if torch is None:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            qa = torch._make_per_tensor_quantized_tensor(torch.from_numpy(a), Q["a_scale"], Q["a_zero"])
            qb = torch._make_per_tensor_quantized_tensor(torch.from_numpy(b), Q["b_scale"], Q["b_zero"])
        op = torch.ops.quantized.add_relu if relu else torch.ops.quantized.add
        op(qa, qb, Q["dst_scale"], Q["dst_zero"])
    except Exception:  # no quantized engine in this build
        return None
    return lambda: op(qa, qb, Q["dst_scale"], Q["dst_zero"])


def _workload(name, title, a_dtype, a_shape, b_shape, dst_dtype, activation):
    relu = activation == "relu"

    def make():
        rng = np.random.default_rng(RNG_SEED)
        if a_dtype == np.uint8:
            a = rng.integers(0, 256, a_shape, dtype=np.uint8)
        else:
            a = ((rng.integers(0, 256, a_shape) - Q["a_zero"]) * Q["a_scale"]).astype(np.float32)
        b = rng.integers(0, 256, b_shape, dtype=np.uint8)
        context = synet.QuantizedAdd(a.shape, a.dtype, Q["a_scale"], Q["a_zero"], b.shape, b.dtype,
                                     Q["b_scale"], Q["b_zero"], activation, None, dst_dtype,
                                     Q["dst_scale"], Q["dst_zero"])
        dst = np.empty(context.shape, dtype=dst_dtype)
        candidates = {
            "synet": lambda: context.forward(a, b, dst, n_threads=1),
            "synet x2": lambda: context.forward(a, b, dst, n_threads=2),
            "numpy float32": _numpy_float32(a, b, dst_dtype, relu),
        }
        if a_dtype == np.uint8 and dst_dtype == np.uint8:
            if not relu:
                ort = _ort_qlinear_add(a, b)
                if ort is not None:
                    candidates["onnxruntime QLinearAdd"] = ort
            torch_add = _torch_quantized_add(a, b, relu)
            if torch_add is not None:
                candidates["torch quantized." + ("add_relu" if relu else "add")] = torch_add
        return candidates

    n = int(np.prod(np.broadcast_shapes(a_shape, b_shape)))
    nbytes = int(np.prod(a_shape)) * np.dtype(a_dtype).itemsize + int(np.prod(b_shape)) + \
        n * np.dtype(dst_dtype).itemsize
    return Workload(name, title, make, nbytes=nbytes)


WORKLOADS = [
    _workload("Q1", "qadd u8+u8->u8 identity [1,256,56,56]", np.uint8, (1, 256, 56, 56), (1, 256, 56, 56),
              np.uint8, "identity"),
    _workload("Q2", "qadd u8+u8->u8 identity [8,256,56,56]", np.uint8, (8, 256, 56, 56), (8, 256, 56, 56),
              np.uint8, "identity"),
    _workload("Q3", "qadd u8+u8->f32 identity [1,256,56,56]", np.uint8, (1, 256, 56, 56), (1, 256, 56, 56),
              np.float32, "identity"),
    _workload("Q4", "qadd u8+u8->u8 relu [1,256,56,56]", np.uint8, (1, 256, 56, 56), (1, 256, 56, 56),
              np.uint8, "relu"),
    _workload("Q5", "qadd f32+u8->u8 identity [1,256,56,56]", np.float32, (1, 256, 56, 56), (1, 256, 56, 56),
              np.uint8, "identity"),
    _workload("Q6", "qadd u8 [1,256,56,56] + u8 [1,256,1,1] -> u8 relu", np.uint8, (1, 256, 56, 56),
              (1, 256, 1, 1), np.uint8, "relu"),
]
