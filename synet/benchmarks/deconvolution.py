"""Deconvolution16b workloads D1-D5 (issue #4) against torch conv_transpose2d and onnxruntime."""

from __future__ import annotations

import ml_dtypes
import numpy as np

import synet

from . import Workload, ort_single_op, torch_single_thread

RNG_SEED = 2026


def _ort_conv_transpose(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, kernel, stride, pad, group):
    """An onnxruntime ConvTranspose (NCHW, fp32, one thread), or None."""
    return ort_single_op("ConvTranspose", ["x", "w", "b"], {"x": x}, {"w": weight, "b": bias},
                         kernel_shape=[kernel, kernel], strides=[stride, stride], pads=[pad] * 4, group=group)


def _workload(name, layout, src_c, size, dst_c, kernel, stride, pad, group=1, dtype="f32", ort=False):
    src_h, src_w = size
    bf16 = dtype == "bf16"

    def make():
        rng = np.random.default_rng(RNG_SEED)
        x = rng.standard_normal((1, src_c, src_h, src_w)).astype(np.float32)        # NCHW
        w = (rng.standard_normal((src_c, dst_c // group, kernel, kernel)) * 0.1).astype(np.float32)
        b = rng.standard_normal(dst_c).astype(np.float32)
        nhwc = layout == "NHWC"
        xs = np.ascontiguousarray(x.transpose(0, 2, 3, 1)) if nhwc else x
        ws = np.ascontiguousarray(w.transpose(0, 2, 3, 1)) if nhwc else w
        if bf16:
            xs = xs.astype(ml_dtypes.bfloat16)
        conv = synet.ConvParams.deconvolution(src_c, src_h, src_w, dst_c, kernel, stride, 1, pad, group,
                                              src_type=dtype, dst_type=dtype, format=layout)
        context = synet.Deconvolution16b()
        context.init(1, conv)
        context.set_params(ws, b)
        dst = context.forward(xs)
        buf = np.empty(context.external_buffer_size(), np.uint8)
        candidates = {
            "synet": lambda: context.forward(xs, buf, dst, n_threads=1),
            "synet x2": lambda: context.forward(xs, buf, dst, n_threads=2),
            # as a PyTorch user calls it: weights in the layout's order, packed on every call
            "synet functional": lambda: synet.conv_transpose2d(xs, ws, b, stride, pad, groups=group, layout=layout,
                                                               n_threads=1),
        }
        if not bf16:   # the same deconvolution with BF16 src and dst: the bytes "torch bf16" moves
            conv16 = synet.ConvParams.deconvolution(src_c, src_h, src_w, dst_c, kernel, stride, 1, pad, group,
                                                    src_type="bf16", dst_type="bf16", format=layout)
            context16 = synet.Deconvolution16b()
            context16.init(1, conv16)
            context16.set_params(ws, b)
            xs16 = xs.astype(ml_dtypes.bfloat16)
            dst16 = context16.forward(xs16)
            buf16 = np.empty(context16.external_buffer_size(), np.uint8)
            candidates["synet bf16"] = lambda: context16.forward(xs16, buf16, dst16, n_threads=1)
        torch = torch_single_thread()
        if torch is not None:
            F = torch.nn.functional

            fmt = torch.channels_last if nhwc else torch.contiguous_format
            for label, tdtype in (("torch fp32", torch.float32), ("torch bf16", torch.bfloat16)):
                tx = torch.from_numpy(x).to(tdtype).contiguous(memory_format=fmt)
                tw = torch.from_numpy(w).to(tdtype).contiguous(memory_format=fmt)
                tb = torch.from_numpy(b).to(tdtype)

                def run(tx=tx, tw=tw, tb=tb):
                    with torch.inference_mode():
                        return F.conv_transpose2d(tx, tw, tb, stride=stride, padding=pad, groups=group)
                candidates[label] = run
        if ort and not nhwc:
            session = _ort_conv_transpose(x, w, b, kernel, stride, pad, group)
            if session is not None:
                candidates["onnxruntime fp32"] = session
        from . import simd_peer
        simd_peer.add(candidates, name, "deconvolution", dst, conv=conv, x=xs, weight=ws, bias=b)
        return candidates, {"peak": peak_of(context), "conv": conv}

    flops = 2 * kernel * kernel * src_c * src_h * src_w * dst_c // group
    size = 2 if bf16 else 4
    dst_h, dst_w = stride * (src_h - 1) + kernel - 2 * pad, stride * (src_w - 1) + kernel - 2 * pad
    nbytes = (src_c * src_h * src_w + dst_c * dst_h * dst_w) * size + 2 * src_c * kernel * kernel * dst_c // group
    title = (f"{layout} {src_c}x{src_h}x{src_w} -> {dst_c}, k{kernel} s{stride} p{pad}"
             + (f" g{group}" if group > 1 else "") + f", {dtype}")
    return Workload(name, title, make, flops=flops, nbytes=nbytes)


def peak_of(context) -> str:
    """The arithmetic that bounds a context's kernel (synet._kernels.peak_flops kinds)."""
    info = context.info()
    return "amx_bf16" if "amx" in info else ("bf16_dot" if "avx512bf16" in info else "fp32_fma")


WORKLOADS = [
    _workload("D1", "NCHW", 256, (16, 16), 128, 4, 2, 1, ort=True),
    _workload("D2", "NHWC", 64, (32, 32), 64, 2, 2, 0),
    _workload("D3", "NHWC", 256, (17, 15), 256, 1, 1, 0, dtype="bf16"),
    _workload("D4", "NCHW", 64, (64, 64), 64, 4, 2, 1, group=64, ort=True),
    _workload("D4h", "NHWC", 64, (64, 64), 64, 4, 2, 1, group=64),
    _workload("D5", "NHWC", 128, (64, 64), 64, 4, 2, 1),
    # an image decoder's last layer: few output channels (the planar kernel)
    _workload("D8", "NCHW", 64, (64, 64), 3, 4, 2, 1, ort=True),
    _workload("D8h", "NHWC", 64, (64, 64), 3, 4, 2, 1),
    # a small decoder layer: few channels in and out (the planar kernel, output channels in blocks)
    _workload("D9", "NCHW", 8, (64, 64), 8, 2, 2, 0, ort=True),
]


def _workload_nd(name, dims, src_c, size, dst_c, kernel, stride, pad, group=1):
    """1-D (NCL) and 3-D (NCDHW) transposed convolutions: context, functional form and peers."""
    fn = synet.conv_transpose1d if dims == 1 else synet.conv_transpose3d

    def make():
        rng = np.random.default_rng(RNG_SEED)
        x = rng.standard_normal((1, src_c, *size)).astype(np.float32)
        w = (rng.standard_normal((src_c, dst_c // group, *(kernel,) * dims)) * 0.1).astype(np.float32)
        b = rng.standard_normal(dst_c).astype(np.float32)
        if dims == 3:
            conv = synet.ConvParams3d.deconvolution(src_c, *size, dst_c, kernel, stride, 1, pad, group)
            context = synet.Deconvolution3d16b(1, conv)
            context.set_params(w, b)
            buf = np.empty(context.external_buffer_size(), np.uint8)
            dst = context.forward(x)
            candidates = {"synet": lambda: context.forward(x, buf, dst, n_threads=1),
                          "synet x2": lambda: context.forward(x, buf, dst, n_threads=2)}
        else:
            out = fn(x, w, b, stride, pad, groups=group)
            candidates = {"synet": lambda: fn(x, w, b, stride, pad, groups=group, out=out, n_threads=1),
                          "synet x2": lambda: fn(x, w, b, stride, pad, groups=group, out=out, n_threads=2)}
        candidates["synet functional"] = lambda: fn(x, w, b, stride, pad, groups=group, n_threads=1)
        if dims == 1:   # conv_transpose1d runs the 2-D kernels with height 1: their plan of this geometry
            context = synet.Deconvolution16b(1, synet.ConvParams.deconvolution(
                src_c, 1, size[0], dst_c, (1, kernel), (1, stride), 1, (0, pad), group))
        torch = torch_single_thread()
        if torch is not None:
            F = torch.nn.functional
            torch_fn = F.conv_transpose1d if dims == 1 else F.conv_transpose3d
            for label, tdtype in (("torch fp32", torch.float32), ("torch bf16", torch.bfloat16)):
                tx, tw, tb = (torch.from_numpy(a).to(tdtype) for a in (x, w, b))

                def run(tx=tx, tw=tw, tb=tb):
                    with torch.inference_mode():
                        return torch_fn(tx, tw, tb, stride=stride, padding=pad, groups=group)
                candidates[label] = run
        if dims == 3:
            session = ort_single_op("ConvTranspose", ["x", "w", "b"], {"x": x}, {"w": w, "b": b},
                                    kernel_shape=[kernel] * 3, strides=[stride] * 3, pads=[pad] * 6, group=group)
            if session is not None:
                candidates["onnxruntime fp32"] = session
        return candidates, {"peak": peak_of(context), "conv": context.conv}

    flops = 2 * kernel ** dims * src_c * int(np.prod(size)) * dst_c // group
    layout = "NCL" if dims == 1 else "NCDHW"
    title = f"{layout} {src_c}x{'x'.join(map(str, size))} -> {dst_c}, k{kernel} s{stride} p{pad}, f32"
    dst = [stride * (s - 1) + kernel - 2 * pad for s in size]
    nbytes = (src_c * int(np.prod(size)) + dst_c * int(np.prod(dst))) * 4 + 2 * src_c * kernel ** dims * dst_c // group
    return Workload(name, title, make, flops=flops, nbytes=nbytes)


WORKLOADS += [
    _workload_nd("D6", 1, 512, (4096,), 256, 16, 8, 4),
    _workload_nd("D7", 3, 64, (16, 32, 32), 32, 2, 2, 0),
]
