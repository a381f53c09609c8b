"""QuantizedAdd workloads Q1-Q10 (issue #3) against NumPy float32, onnxruntime QLinearAdd, torch quantized add.

Scales a 0.010, b 0.020, dst 0.015; zero points 47, 30, 38 (the seed's example). Q7 is the INT8 add
(onnxruntime's QLinearAdd on int8 tensors), Q8 quantises every tensor per channel (axis 1, scales and
zero points around the seed's), Q9 applies GELU (the lookup kernel). "synet functional" is
``synet.quantized_add`` called again and again with the same arguments (plan-cache hits, no table rebuilt).
"""

from __future__ import annotations

import warnings

import numpy as np

import synet

from . import Workload, ort_single_op, torch_single_thread

RNG_SEED = 2026
Q = dict(a_scale=0.010, a_zero=47, b_scale=0.020, b_zero=30, dst_scale=0.015, dst_zero=38)
SHAPE = (1, 256, 56, 56)


def _per_channel_q(channels):
    """Per-channel scales (within 0.8-1.25x of the seed's) and zero points (seed's +- 8) along axis 1."""
    rng = np.random.default_rng(RNG_SEED + 1)
    q = {}
    for name in ("a", "b", "dst"):
        q[f"{name}_scale"] = Q[f"{name}_scale"] * rng.uniform(0.8, 1.25, channels)
        q[f"{name}_zero"] = Q[f"{name}_zero"] + rng.integers(-8, 9, channels)
    return q


def _numpy_float32(a, b, dst_dtype, activation, q=Q):
    """The plain float32 NumPy expression of the formula (per-channel parameters broadcast along axis 1)."""
    f32 = np.float32

    def param(name):
        value = np.asarray(q[name], dtype=f32)
        return value.reshape((1, -1) + (1,) * (a.ndim - 2)) if value.ndim else value

    sa, za, sb, zb = param("a_scale"), param("a_zero"), param("b_scale"), param("b_zero")
    ds, dz = param("dst_scale"), param("dst_zero")
    lo, hi = (-128, 127) if dst_dtype == np.int8 else (0, 255)

    def dequantize(x, scale, zero):
        return (x.astype(f32) - zero) * scale if x.dtype != np.float32 else x

    def run():
        value = dequantize(a, sa, za) + dequantize(b, sb, zb)
        if activation == "relu":
            value = np.maximum(value, f32(0))
        elif activation == "gelu":  # NumPy has no erf: the tanh form, as cheap as NumPy gets
            value = f32(0.5) * value * (f32(1) + np.tanh(f32(0.7978845608) * (value + f32(0.044715) * value ** 3)))
        if dst_dtype == np.float32:
            return value
        return np.clip(np.rint(value / ds) + dz, lo, hi).astype(dst_dtype)

    return run


def _torch_float32_gelu(a, b):
    """torch on float32 tensors: dequantize, add, exact GELU (erf), quantize; one thread, or None."""
    torch = torch_single_thread()
    if torch is None:
        return None
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)

    def run():
        value = (ta.float() - Q["a_zero"]) * Q["a_scale"] + (tb.float() - Q["b_zero"]) * Q["b_scale"]
        value = torch.nn.functional.gelu(value)
        return torch.clamp(torch.round(value / Q["dst_scale"]) + Q["dst_zero"], 0, 255).to(torch.uint8)

    return run


def _ort_qlinear_add(a, b):
    """com.microsoft QLinearAdd on one thread (u8 + u8 -> u8 or i8 + i8 -> i8, no activation), or None."""
    zero = np.int8 if a.dtype == np.int8 else np.uint8
    constants = {"a_s": np.float32(Q["a_scale"]), "a_z": zero(Q["a_zero"]), "b_s": np.float32(Q["b_scale"]),
                 "b_z": zero(Q["b_zero"]), "c_s": np.float32(Q["dst_scale"]), "c_z": zero(Q["dst_zero"])}
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


def _operand(dtype, shape, rng, zero):
    if dtype == np.float32:
        return ((rng.integers(0, 256, shape) - Q["a_zero"]) * Q["a_scale"]).astype(np.float32)
    lo, hi = (-128, 127) if dtype == np.int8 else (0, 255)
    return rng.integers(lo, hi + 1, shape).astype(dtype)


def _workload(name, title, a_dtype, a_shape, b_shape, dst_dtype, activation, *, b_dtype=np.uint8,
              per_channel=False, functional=False):
    def make():
        rng = np.random.default_rng(RNG_SEED)
        a = _operand(a_dtype, a_shape, rng, Q["a_zero"])
        b = _operand(b_dtype, b_shape, rng, Q["b_zero"])
        q = _per_channel_q(a_shape[1]) if per_channel else Q
        context = synet.QuantizedAdd(a.shape, a.dtype, q["a_scale"], q["a_zero"], b.shape, b.dtype,
                                     q["b_scale"], q["b_zero"], activation, None, dst_dtype,
                                     q["dst_scale"], q["dst_zero"])
        dst = np.empty(context.shape, dtype=dst_dtype)
        candidates = {
            "synet": lambda: context.forward(a, b, dst, n_threads=1),
            "synet x2": lambda: context.forward(a, b, dst, n_threads=2),
        }
        if functional:
            candidates["synet functional"] = lambda: synet.quantized_add(
                a, b, **q, dst_dtype=dst_dtype, activation=activation, out=dst, n_threads=1)
        candidates["numpy float32"] = _numpy_float32(a, b, dst_dtype, activation, q)
        one_byte = a_dtype == b_dtype == dst_dtype and a_dtype != np.float32
        if one_byte and not per_channel:
            if activation == "identity":
                ort = _ort_qlinear_add(a, b)
                if ort is not None:
                    candidates["onnxruntime QLinearAdd"] = ort
            if a_dtype == np.uint8 and activation in ("identity", "relu"):
                torch_add = _torch_quantized_add(a, b, activation == "relu")
                if torch_add is not None:
                    candidates["torch quantized." + ("add_relu" if activation == "relu" else "add")] = torch_add
            if activation == "gelu" and a_dtype == np.uint8:
                torch_gelu = _torch_float32_gelu(a, b)
                if torch_gelu is not None:
                    candidates["torch float32 gelu"] = torch_gelu
        from . import simd_peer
        simd_peer.add(candidates, name, "quantized_add", dst, a=a, b=b, q=q, activation=activation, dst_dtype=dst_dtype)
        return candidates

    n = int(np.prod(np.broadcast_shapes(a_shape, b_shape)))
    nbytes = int(np.prod(a_shape)) * np.dtype(a_dtype).itemsize + int(np.prod(b_shape)) * np.dtype(b_dtype).itemsize \
        + n * np.dtype(dst_dtype).itemsize
    return Workload(name, title, make, nbytes=nbytes)


def _channels_last_workload(name, title, shape, activation):
    """The functional form on a u8 + u8 -> u8 pair laid out NHWC in memory and seen as NCHW `shape`
    (PyTorch's channels_last); peers get the same strided arrays."""
    def make():
        rng = np.random.default_rng(RNG_SEED)
        n, c, h, w = shape
        a, b = (_operand(np.uint8, (n, h, w, c), rng, 0).transpose(0, 3, 1, 2) for _ in range(2))
        candidates = {
            "synet": lambda: synet.quantized_add(a, b, **Q, activation=activation, n_threads=1),
            "synet x2": lambda: synet.quantized_add(a, b, **Q, activation=activation, n_threads=2),
            "numpy float32": _numpy_float32(a, b, np.uint8, activation),
        }
        torch_add = _torch_quantized_add(a, b, activation == "relu")
        if torch_add is not None:
            candidates["torch quantized." + ("add_relu" if activation == "relu" else "add")] = torch_add
        return candidates

    return Workload(name, title, make, nbytes=3 * int(np.prod(shape)))


WORKLOADS = [
    _workload("Q1", "qadd u8+u8->u8 identity [1,256,56,56]", np.uint8, SHAPE, SHAPE, np.uint8, "identity",
              functional=True),
    _workload("Q2", "qadd u8+u8->u8 identity [8,256,56,56]", np.uint8, (8, 256, 56, 56), (8, 256, 56, 56),
              np.uint8, "identity"),
    _workload("Q3", "qadd u8+u8->f32 identity [1,256,56,56]", np.uint8, SHAPE, SHAPE, np.float32, "identity"),
    _workload("Q4", "qadd u8+u8->u8 relu [1,256,56,56]", np.uint8, SHAPE, SHAPE, np.uint8, "relu", functional=True),
    _workload("Q5", "qadd f32+u8->u8 identity [1,256,56,56]", np.float32, SHAPE, SHAPE, np.uint8, "identity"),
    _workload("Q6", "qadd u8 [1,256,56,56] + u8 [1,256,1,1] -> u8 relu", np.uint8, SHAPE, (1, 256, 1, 1),
              np.uint8, "relu"),
    _workload("Q7", "qadd i8+i8->i8 identity [1,256,56,56]", np.int8, SHAPE, SHAPE, np.int8, "identity",
              b_dtype=np.int8),
    _workload("Q8", "qadd u8+u8->u8 per-channel (axis 1) [1,256,56,56]", np.uint8, SHAPE, SHAPE, np.uint8,
              "identity", per_channel=True),
    _workload("Q9", "qadd u8+u8->u8 gelu [1,256,56,56]", np.uint8, SHAPE, SHAPE, np.uint8, "gelu",
              functional=True),
    _channels_last_workload("Q10", "qadd u8+u8->u8 relu [1,256,56,56] laid out NHWC (functional)", SHAPE, "relu"),
]
