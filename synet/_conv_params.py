"""SimdConvolutionParameters as a dataclass, with the deconvolution geometry helper."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ._types import Activation, DataType, TensorFormat, as_activation, as_data_type, as_format


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def pair(value: Any, name: str, minimum: int = 1) -> tuple[int, int]:
    """An int or a (y, x) pair of ints, each >= minimum, as (y, x)."""
    if _is_int(value):
        values: tuple[int, ...] = (int(value), int(value))
    else:
        try:
            values = tuple(value)
        except TypeError:
            raise TypeError(f"{name}: expected an int or a (y, x) pair of ints, got {value!r}") from None
        if len(values) != 2 or not all(_is_int(v) for v in values):
            raise ValueError(f"{name}: expected an int or a (y, x) pair of ints, got {value!r}")
        values = (int(values[0]), int(values[1]))
    if min(values) < minimum:
        raise ValueError(f"{name}: expected values >= {minimum}, got {value!r}")
    return values[0], values[1]


def pads(value: Any, name: str = "pad") -> tuple[int, int, int, int]:
    """An int, (y, x) or (top, left, bottom, right) of ints >= 0, as (top, left, bottom, right)."""
    if _is_int(value):
        values: tuple[int, ...] = (int(value),) * 4
    else:
        try:
            values = tuple(value)
        except TypeError:
            raise TypeError(f"{name}: expected an int, (y, x) or (top, left, bottom, right), got {value!r}") from None
        if len(values) not in (2, 4) or not all(_is_int(v) for v in values):
            raise ValueError(f"{name}: expected an int, (y, x) or (top, left, bottom, right) of ints, got {value!r}")
        values = tuple(int(v) for v in values)
        if len(values) == 2:
            values = (values[0], values[1], values[0], values[1])
    if min(values) < 0:
        raise ValueError(f"{name}: expected pads >= 0, got {value!r}")
    return values[0], values[1], values[2], values[3]


def deconvolution_size(src: int, kernel: int, stride: int, dilation: int, pad_begin: int, pad_end: int) -> int:
    """dst = stride·(src − 1) + dilation·(kernel − 1) + 1 − pad_begin − pad_end."""
    return stride * (src - 1) + dilation * (kernel - 1) + 1 - pad_begin - pad_end


@dataclasses.dataclass
class ConvParams:
    """SimdConvolutionParameters in snake_case (see Simd's SimdConvolutionParameters).

    pad_y, pad_x are the top and left pads, pad_h, pad_w the bottom and right ones.
    Build a deconvolution's parameters with :meth:`ConvParams.deconvolution`, which derives
    dst_h and dst_w.
    """

    src_c: int
    src_h: int
    src_w: int
    src_type: DataType
    src_format: TensorFormat
    dst_c: int
    dst_h: int
    dst_w: int
    dst_type: DataType
    dst_format: TensorFormat
    kernel_y: int
    kernel_x: int
    dilation_y: int = 1
    dilation_x: int = 1
    stride_y: int = 1
    stride_x: int = 1
    pad_y: int = 0
    pad_x: int = 0
    pad_h: int = 0
    pad_w: int = 0
    group: int = 1
    activation: Activation = Activation.IDENTITY

    @classmethod
    def deconvolution(cls, src_c, src_h, src_w, dst_c, kernel, stride=1, dilation=1, pad=0, group=1,
                      activation=Activation.IDENTITY, src_type=DataType.FLOAT32, dst_type=DataType.FLOAT32,
                      format=TensorFormat.NCHW) -> ConvParams:
        """Parameters of a transposed convolution; dst_h, dst_w follow from the others.

        ``dst = stride·(src − 1) + dilation·(kernel − 1) + 1 − pad_begin − pad_end`` per axis.
        kernel, stride, dilation: int or (y, x); pad: int, (y, x) or (top, left, bottom, right).
        Raises ValueError when a derived size is <= 0.
        """
        for name, value in (("src_c", src_c), ("src_h", src_h), ("src_w", src_w), ("dst_c", dst_c),
                            ("group", group)):
            if not _is_int(value):
                raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
            if value < 1:
                raise ValueError(f"{name}: expected an int >= 1, got {value}")
        ky, kx = pair(kernel, "kernel")
        sy, sx = pair(stride, "stride")
        dy, dx = pair(dilation, "dilation")
        top, left, bottom, right = pads(pad)
        dst_h = deconvolution_size(int(src_h), ky, sy, dy, top, bottom)
        dst_w = deconvolution_size(int(src_w), kx, sx, dx, left, right)
        if dst_h <= 0 or dst_w <= 0:
            raise ValueError(f"pad: pads {(top, left, bottom, right)} leave a dst of {dst_h}x{dst_w}; "
                             f"expected a dst size >= 1")
        fmt = as_format(format)
        return cls(int(src_c), int(src_h), int(src_w), as_data_type(src_type, "src_type"), fmt,
                   int(dst_c), dst_h, dst_w, as_data_type(dst_type, "dst_type"), fmt,
                   ky, kx, dy, dx, sy, sx, top, left, bottom, right, int(group), as_activation(activation))


def triple(value: Any, name: str, minimum: int = 1) -> tuple[int, int, int]:
    """An int or a (d, h, w) triple of ints, each >= minimum, as (d, h, w)."""
    if _is_int(value):
        values: tuple[int, ...] = (int(value),) * 3
    else:
        try:
            values = tuple(value)
        except TypeError:
            raise TypeError(f"{name}: expected an int or a (d, h, w) triple of ints, got {value!r}") from None
        if len(values) != 3 or not all(_is_int(v) for v in values):
            raise ValueError(f"{name}: expected an int or a (d, h, w) triple of ints, got {value!r}")
        values = tuple(int(v) for v in values)
    if min(values) < minimum:
        raise ValueError(f"{name}: expected values >= {minimum}, got {value!r}")
    return values[0], values[1], values[2]


def pads3(value: Any, name: str = "pad") -> tuple[int, int, int, int, int, int]:
    """An int, (d, h, w) or (front, top, left, back, bottom, right) of ints >= 0, as the six pads."""
    if _is_int(value):
        values: tuple[int, ...] = (int(value),) * 6
    else:
        try:
            values = tuple(value)
        except TypeError:
            raise TypeError(f"{name}: expected an int, (d, h, w) or (front, top, left, back, bottom, right), "
                            f"got {value!r}") from None
        if len(values) not in (3, 6) or not all(_is_int(v) for v in values):
            raise ValueError(f"{name}: expected an int, (d, h, w) or (front, top, left, back, bottom, right) of ints, "
                             f"got {value!r}")
        values = tuple(int(v) for v in values)
        if len(values) == 3:
            values = values * 2
    if min(values) < 0:
        raise ValueError(f"{name}: expected pads >= 0, got {value!r}")
    return values  # type: ignore[return-value]


@dataclasses.dataclass
class ConvParams3d:
    """The 3-D transposed convolution's parameters, in the style of SimdConvolutionParameters.

    Channels first (``src_format = NCHW``: tensors [N, C, D, H, W], weights [srcC, dstC/group, kD, kH, kW],
    PyTorch's ConvTranspose3d) or channels last (``NHWC``: [N, D, H, W, C], weights [srcC, kD, kH, kW,
    dstC/group]). pad_front, pad_y, pad_x are the begin pads of depth, height and width, pad_back, pad_h,
    pad_w their end pads. Build one with :meth:`ConvParams3d.deconvolution`, which derives dst_d, dst_h
    and dst_w.
    """

    src_c: int
    src_d: int
    src_h: int
    src_w: int
    src_type: DataType
    src_format: TensorFormat
    dst_c: int
    dst_d: int
    dst_h: int
    dst_w: int
    dst_type: DataType
    dst_format: TensorFormat
    kernel_z: int
    kernel_y: int
    kernel_x: int
    dilation_z: int = 1
    dilation_y: int = 1
    dilation_x: int = 1
    stride_z: int = 1
    stride_y: int = 1
    stride_x: int = 1
    pad_front: int = 0
    pad_y: int = 0
    pad_x: int = 0
    pad_back: int = 0
    pad_h: int = 0
    pad_w: int = 0
    group: int = 1
    activation: Activation = Activation.IDENTITY

    @classmethod
    def deconvolution(cls, src_c, src_d, src_h, src_w, dst_c, kernel, stride=1, dilation=1, pad=0, group=1,
                      activation=Activation.IDENTITY, src_type=DataType.FLOAT32, dst_type=DataType.FLOAT32,
                      format="NCDHW") -> ConvParams3d:
        """Parameters of a 3-D transposed convolution; dst_d, dst_h, dst_w follow from the others.

        kernel, stride, dilation: int or (d, h, w); pad: int, (d, h, w) or (front, top, left, back,
        bottom, right); format "NCDHW" (channels first) or "NDHWC" (channels last).
        """
        for name, value in (("src_c", src_c), ("src_d", src_d), ("src_h", src_h), ("src_w", src_w),
                            ("dst_c", dst_c), ("group", group)):
            if not _is_int(value):
                raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
            if value < 1:
                raise ValueError(f"{name}: expected an int >= 1, got {value}")
        kz, ky, kx = triple(kernel, "kernel")
        sz, sy, sx = triple(stride, "stride")
        dz, dy, dx = triple(dilation, "dilation")
        front, top, left, back, bottom, right = pads3(pad)
        dst_d = deconvolution_size(int(src_d), kz, sz, dz, front, back)
        dst_h = deconvolution_size(int(src_h), ky, sy, dy, top, bottom)
        dst_w = deconvolution_size(int(src_w), kx, sx, dx, left, right)
        if min(dst_d, dst_h, dst_w) <= 0:
            raise ValueError(f"pad: pads {(front, top, left, back, bottom, right)} leave a dst of "
                             f"{dst_d}x{dst_h}x{dst_w}; expected a dst size >= 1")
        fmt = as_format_3d(format)
        return cls(int(src_c), int(src_d), int(src_h), int(src_w), as_data_type(src_type, "src_type"), fmt,
                   int(dst_c), dst_d, dst_h, dst_w, as_data_type(dst_type, "dst_type"), fmt, kz, ky, kx, dz, dy, dx,
                   sz, sy, sx, front, top, left, back, bottom, right, int(group), as_activation(activation))


def as_format_3d(value: Any, param: str = "format") -> TensorFormat:
    """Channels first ("NCDHW", or TensorFormat.NCHW / "NCHW") or last ("NDHWC", NHWC) for 3-D tensors."""
    if isinstance(value, str) and value.strip().upper() in ("NCDHW", "NDHWC"):
        return TensorFormat.NCHW if value.strip().upper() == "NCDHW" else TensorFormat.NHWC
    return as_format(value, param)
