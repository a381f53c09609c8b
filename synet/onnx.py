"""Run ONNX models with synet's kernels: attribute mapping and ``onnx.reference`` operators.

This module needs the ``onnx`` package (``pip install synet[onnx]``). It gives

* functions that take an ONNX node's inputs and attributes (ONNX names and meanings) and run synet:
  `conv_transpose` (ConvTranspose, 1-D / 2-D / 3-D), `gather_elements` (GatherElements) and
  `qlinear_add` (com.microsoft QLinearAdd, uint8 and int8);
* `conv_transpose_geometry`, the attribute resolution of ConvTranspose on its own (``auto_pad``,
  ``output_shape``, ``output_padding``, ``pads``, ``strides``, ``dilations``, ``group``,
  ``kernel_shape``), returning a `ConvTransposeGeometry` that says which synet call computes the node;
* `OPS`, ``onnx.reference.op_run.OpRun`` classes for those three operators, so that
  ``onnx.reference.ReferenceEvaluator(model, new_ops=synet.onnx.OPS)`` runs a model with synet's
  kernels and every other node with ONNX's reference implementation.

Everything here is written from the ONNX operator specification (ConvTranspose-22,
GatherElements-13) and onnxruntime's contrib-operator documentation (com.microsoft QLinearAdd). Where
the specification is ambiguous, the decision is written in the docstring of the function that makes it.

Numerics: ConvTranspose computes as `synet.Deconvolution16b` does, whatever the ONNX type — the
operands X and W are rounded to bfloat16 (nearest-even), the products are summed in float32, then the
bias is added in float32. That is not ONNX's float32 arithmetic: each BF16 operand is within 2**-8
(relative) of the float32 one, so an output may differ from a float32 runtime's by up to about
2**-7 * ``sum(|x * w|)`` over its terms (typically far less, the rounding errors cancel).
GatherElements is an exact copy; QLinearAdd is the
formula of the specification with round-half-to-even (SPEC section 5).

Examples
--------
>>> import onnx.reference, synet.onnx                                   # doctest: +SKIP
>>> sess = onnx.reference.ReferenceEvaluator(model, new_ops=synet.onnx.OPS)  # doctest: +SKIP
>>> (y,) = sess.run(None, {"X": x})                                      # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import numbers
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

try:
    from onnx.reference.op_run import OpRun
except ImportError as _missing:  # pragma: no cover - exercised only without onnx
    raise ImportError("synet.onnx needs the onnx package (>= 1.15): pip install 'synet[onnx]'") from _missing

import ml_dtypes

import synet
from synet._arrays import as_array, native
from synet._gather_plan import sub_block
from synet._kernels import resolve_num_threads
from synet._quantized_add_plan import broadcast_shapes

__all__ = [
    "AUTO_PADS",
    "ConvTranspose",
    "ConvTransposeGeometry",
    "GatherElements",
    "OPS",
    "QLinearAdd",
    "conv_transpose",
    "conv_transpose_geometry",
    "gather_elements",
    "qlinear_add",
]

#: The values of ConvTranspose's ``auto_pad`` (spelled exactly so, as the specification does).
AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")

_BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
_FLOAT32 = np.dtype(np.float32)
_CONV_TYPES = (_FLOAT32, np.dtype(np.float16), np.dtype(np.float64), _BFLOAT16)
_SYNET_CONV = {1: "conv_transpose1d", 2: "conv_transpose2d", 3: "conv_transpose3d"}


# --------------------------------------------------------------------------------------------------
# Attribute parsing


def _attr_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise ValueError(f"attribute {name!r}: expected an int, got {value!r}")
    if value < minimum:
        raise ValueError(f"attribute {name!r}: expected an int >= {minimum}, got {value}")
    return int(value)


def _attr_ints(name: str, value: Any, length: int | tuple[int, ...], what: str) -> tuple[int, ...]:
    """A sequence of ints of one of the lengths `length` (`what` says what they are, for messages)."""
    lengths = (length,) if isinstance(length, int) else length
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, np.ndarray)):
        raise ValueError(f"attribute {name!r}: expected a list of {what}, got {value!r}")
    items = list(value.tolist() if isinstance(value, np.ndarray) else value)
    for item in items:
        if isinstance(item, (bool, np.bool_)) or not isinstance(item, numbers.Integral):
            raise ValueError(f"attribute {name!r}: expected a list of ints ({what}), got {list(value)!r}")
    if len(items) not in lengths:
        expected = " or ".join(str(n) for n in lengths)
        raise ValueError(f"attribute {name!r}: expected {expected} values ({what}), got {len(items)}: {items}")
    return tuple(operator.index(i) for i in items)


def _auto_pad(value: Any) -> str:
    if value is None or isinstance(value, (str, bytes)) and not value:   # "": NOTSET, as onnxruntime reads it
        return "NOTSET"
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str) or value not in AUTO_PADS:
        raise ValueError(f"attribute 'auto_pad': expected one of {', '.join(AUTO_PADS)}, got {value!r}")
    return value


# --------------------------------------------------------------------------------------------------
# ConvTranspose


@dataclasses.dataclass(frozen=True)
class ConvTransposeGeometry:
    """A ConvTranspose node resolved: every attribute explicit, and the synet call that computes it.

    Attributes
    ----------
    spatial_rank : int
        1, 2 or 3 (X is [N, C, L], [N, C, H, W] or [N, C, D, H, W]).
    kernel_shape, strides, dilations, output_padding : tuple of int
        Per spatial axis (``output_padding`` as given: it is part of ``pads`` below).
    group : int
    pads : tuple of int
        The resolved ONNX pads, all begins then all ends (from ``pads``, ``auto_pad`` or
        ``output_shape``). A derived end pad may be negative: the output then extends past the full
        output, as ``output_padding`` extends it (``test_convtranspose_output_shape`` of ONNX's
        backend tests is such a node).
    output_shape : tuple of int
        The shape of Y, [N, M, spatial...].
    padding : tuple of int
        synet's ``padding`` argument, begins then ends, all >= 0.
    synet_output_padding : tuple of int
        synet's ``output_padding`` argument, each < max(stride, dilation).
    """

    spatial_rank: int
    kernel_shape: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    group: int
    output_padding: tuple[int, ...]
    pads: tuple[int, ...]
    output_shape: tuple[int, ...]
    padding: tuple[int, ...]
    synet_output_padding: tuple[int, ...]

    @property
    def synet_function(self) -> str:
        """The name of the synet function that computes the node (``conv_transpose{1,2,3}d``)."""
        return _SYNET_CONV[self.spatial_rank]

    def synet_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of that synet call (``stride``, ``padding``, ``output_padding``,
        ``groups``, ``dilation``), PyTorch's names; ``padding`` holds all begins then all ends."""
        return {"stride": self.strides, "padding": self.padding, "output_padding": self.synet_output_padding,
                "groups": self.group, "dilation": self.dilations}


def _split(total: int, upper: bool) -> tuple[int, int]:
    """The specification's split of a total padding: SAME_UPPER puts the odd unit at the end, every
    other auto_pad (NOTSET, SAME_LOWER, VALID) at the beginning. Floor division (see
    conv_transpose_geometry)."""
    if upper:
        begin = total // 2
        return begin, total - begin
    end = total // 2
    return total - end, end


def conv_transpose_geometry(x_shape: Sequence[int], w_shape: Sequence[int], *, auto_pad: Any = "NOTSET",
                            dilations: Any = None, group: Any = 1, kernel_shape: Any = None,
                            output_padding: Any = None, output_shape: Any = None, pads: Any = None,
                            strides: Any = None) -> ConvTransposeGeometry:
    """Resolve ConvTranspose's attributes for inputs of these shapes, exactly as ONNX specifies them.

    Parameters
    ----------
    x_shape, w_shape : sequence of int
        X: [N, C, spatial...] with 1, 2 or 3 spatial axes; W: [C, M / group, kernel...] (M is Y's
        channels). Spatial sizes and kernel sizes must be >= 1; N, C and M may be 0.
    auto_pad, dilations, group, kernel_shape, output_padding, output_shape, pads, strides
        ConvTranspose's attributes, with their ONNX names, meanings and defaults (None means absent).

    Returns
    -------
    ConvTransposeGeometry

    Raises
    ------
    ValueError
        For every attribute the specification does not allow, naming it: an ``auto_pad`` other than
        NOTSET / SAME_UPPER / SAME_LOWER / VALID (spelled so), lists of the wrong length, strides,
        dilations or group < 1, negative ``pads`` or ``output_padding``, ``output_padding`` >=
        max(stride, dilation), ``pads`` together with an ``auto_pad`` other than NOTSET, a
        ``kernel_shape`` that is not W's, a group that does not divide C, ``pads`` that leave no
        output, and an ``output_shape`` (or the in * stride size of SAME_UPPER / SAME_LOWER) that the
        other attributes cannot produce (see below).
    NotImplementedError
        For more than 3 spatial axes (valid ONNX that synet has no kernel for).

    Notes
    -----
    Along spatial axis i, with input size ``in``, kernel ``k``, stride ``s``, dilation ``d`` and
    output padding ``op``, the full output has ``F = s * (in - 1) + d * (k - 1) + 1`` positions and

    * with ``pads`` (or none; auto_pad NOTSET): ``out = F + op - pads[i] - pads[i + n]``;
      ``auto_pad=VALID`` is pads of 0;
    * with ``output_shape`` (its n spatial sizes, the specification's form; a full [N, M, spatial...]
      list is accepted too, its N and M checked against X and W — onnxruntime's shape inference
      refuses that form): ``out = output_shape[i]``,
      ``total = F + op - out``; SAME_UPPER: ``pads = (total // 2, total - total // 2)``, any other
      auto_pad (NOTSET, SAME_LOWER, VALID): ``pads = (total - total // 2, total // 2)``. ``pads`` is
      then ignored (as the specification says; it is still checked for form). ``auto_pad`` only
      chooses the split: output_shape sets the size;
    * with auto_pad SAME_UPPER / SAME_LOWER and no output_shape: the same formulas with
      ``out = in * s``.

    Decisions where the specification is silent or ambiguous:

    * ``//`` is floor division (Python's), also for a negative total. This keeps the specification's
      prose rule in the signed sense — the end gets the larger pad for SAME_UPPER, the beginning for
      the others — and gives ONNX's own backend test ``test_convtranspose_output_shape`` (total = -1:
      one more row and column at the end) its expected output.
    * A derived end pad may be negative, a derived begin pad may not: an output_shape (or SAME size)
      is *consistent* when the same output could be written with explicit pads >= 0 and an
      output_padding < max(stride, dilation), i.e. ``pads[i] >= 0`` and
      ``op - pads[i + n] < max(s, d)``. Otherwise it raises ValueError naming ``output_shape`` (or
      ``auto_pad``) and the sizes that are possible. This refuses what onnxruntime refuses
      ("Explicit output_shape is inconsistent with input spatial dimensions") except that
      onnxruntime checks the end extension against the stride alone. It also refuses auto_pad SAME
      when the kernel is shorter than the stride in a way that needs a negative begin pad (e.g.
      k = 1, s = 2, SAME_UPPER: total = -1 gives pads (-1, 0)); onnxruntime 1.32 returns a shorter
      output than in * s there, which is not the specification either.
    * ``output_padding`` must be < max(stride, dilation) (the specification says "less than the
      corresponding stride/dilation dimension"; PyTorch and onnxruntime read it as this maximum).
    * ``pads`` and an auto_pad other than NOTSET "cannot be used simultaneously": ValueError.
    """
    try:
        x_shape = tuple(operator.index(v) for v in x_shape)
        w_shape = tuple(operator.index(v) for v in w_shape)
    except TypeError:
        raise TypeError(f"x_shape, w_shape: expected sequences of ints, got {x_shape!r} and {w_shape!r}") from None
    if len(x_shape) < 3:
        raise ValueError(f"X: expected a tensor [N, C, spatial...] with at least one spatial axis, "
                         f"got shape {x_shape}")
    n = len(x_shape) - 2
    if n > 3:
        raise NotImplementedError(f"X: synet computes ConvTranspose with 1, 2 or 3 spatial axes, got {n} "
                                  f"(shape {x_shape})")
    if len(w_shape) != len(x_shape):
        raise ValueError(f"W: expected a tensor of X's rank {len(x_shape)} [C, M/group, kernel...], "
                         f"got shape {w_shape}")
    batch, channels = x_shape[:2]
    if batch < 0 or channels < 0:
        raise ValueError(f"X: expected N >= 0 and C >= 0, got shape {x_shape}")
    spatial = x_shape[2:]
    if min(spatial) < 1:
        raise ValueError(f"X: expected spatial sizes >= 1, got shape {x_shape}")
    kernel = w_shape[2:]
    if min(kernel) < 1 or w_shape[1] < 0:
        raise ValueError(f"W: expected M/group >= 0 and kernel sizes >= 1, got shape {w_shape}")
    if w_shape[0] != channels:
        raise ValueError(f"W: expected {channels} input channels (X's C) in dimension 0, got shape {w_shape}")
    group = _attr_int("group", 1 if group is None else group, 1)
    if channels % group:
        raise ValueError(f"attribute 'group': expected a divisor of X's {channels} channels, got {group}")
    out_channels = w_shape[1] * group
    if kernel_shape is not None:
        given = _attr_ints("kernel_shape", kernel_shape, n, "kernel sizes")
        if given != kernel:
            raise ValueError(f"attribute 'kernel_shape': expected W's kernel {list(kernel)}, got {list(given)}")
    strides_ = (1,) * n if strides is None else _attr_ints("strides", strides, n, "strides per spatial axis")
    if min(strides_) < 1:
        raise ValueError(f"attribute 'strides': expected values >= 1, got {list(strides_)}")
    dil = (1,) * n if dilations is None else _attr_ints("dilations", dilations, n, "dilations per spatial axis")
    if min(dil) < 1:
        raise ValueError(f"attribute 'dilations': expected values >= 1, got {list(dil)}")
    limits = tuple(max(s, d) for s, d in zip(strides_, dil))
    opad = (0,) * n if output_padding is None else _attr_ints("output_padding", output_padding, n,
                                                              "output paddings per spatial axis")
    if min(opad) < 0 or any(o >= m for o, m in zip(opad, limits)):
        raise ValueError(f"attribute 'output_padding': expected values >= 0 and < max(stride, dilation) = "
                         f"{list(limits)}, got {list(opad)}")
    mode = _auto_pad(auto_pad)
    explicit = None
    if pads is not None:
        explicit = _attr_ints("pads", pads, 2 * n, "all begins, then all ends")
        if min(explicit) < 0:
            raise ValueError(f"attribute 'pads': expected values >= 0, got {list(explicit)}")
        if mode != "NOTSET":
            raise ValueError(f"attribute 'pads': cannot be used together with auto_pad={mode} "
                             f"(the specification forbids it), got pads={list(explicit)}")
    full = tuple(s * (i - 1) + d * (k - 1) + 1 for i, k, s, d in zip(spatial, kernel, strides_, dil))

    if output_shape is not None or mode in ("SAME_UPPER", "SAME_LOWER"):
        if output_shape is not None:
            source = "output_shape"
            given = _attr_ints("output_shape", output_shape, (n, n + 2), "spatial output sizes")
            if len(given) == n + 2 and given[:2] != (batch, out_channels):
                raise ValueError(f"attribute 'output_shape': its batch and channel sizes {list(given[:2])} are "
                                 f"not Y's ({batch}, {out_channels}); the specification's form omits them")
            targets = given[-n:]
            if min(targets) < 1:
                raise ValueError(f"attribute 'output_shape': expected spatial sizes >= 1, got {list(given)}")
        else:
            source = "auto_pad"
            targets = tuple(i * s for i, s in zip(spatial, strides_))
        begins, ends = [], []
        for axis in range(n):
            total = full[axis] + opad[axis] - targets[axis]
            begin, end = _split(total, mode == "SAME_UPPER")
            if begin < 0 or opad[axis] - end >= limits[axis]:
                # the largest consistent size: begin pad 0 (or 1 for an odd total under the Else rule)
                high = full[axis] + opad[axis]
                if mode != "SAME_UPPER" and opad[axis] + 1 < limits[axis]:
                    high += 1
                what = (f"output_shape {list(targets)}" if source == "output_shape" else
                        f"auto_pad={mode} (output size in * stride = {targets[axis]})")
                raise ValueError(
                    f"attribute {source!r}: {what} is inconsistent with the other attributes on spatial axis "
                    f"{axis}: the specification's formula gives pads ({begin}, {end}), which no pads >= 0 with "
                    f"output_padding < max(stride, dilation) produce; sizes 1..{high} are possible there "
                    f"(input {spatial[axis]}, kernel {kernel[axis]}, stride {strides_[axis]}, dilation "
                    f"{dil[axis]}, output_padding {opad[axis]})")
            begins.append(begin)
            ends.append(end)
        resolved = tuple(begins) + tuple(ends)
    elif mode == "VALID" or explicit is None:
        resolved = (0,) * (2 * n)
    else:
        resolved = explicit

    out_spatial = tuple(full[a] + opad[a] - resolved[a] - resolved[a + n] for a in range(n))
    if min(out_spatial) < 1:
        raise ValueError(f"attribute 'pads': {list(resolved)} leave an output of {list(out_spatial)} "
                         f"(full output {list(full)}, output_padding {list(opad)}); expected sizes >= 1")
    # synet: padding >= 0 (begins, ends) and output_padding < max(stride, dilation); a negative
    # effective end (pad_end - output_padding) becomes synet's output_padding.
    effective_end = tuple(resolved[a + n] - opad[a] for a in range(n))
    padding = tuple(resolved[:n]) + tuple(max(e, 0) for e in effective_end)
    synet_opad = tuple(max(-e, 0) for e in effective_end)
    return ConvTransposeGeometry(spatial_rank=n, kernel_shape=kernel, strides=strides_, dilations=dil, group=group,
                                 output_padding=opad, pads=resolved,
                                 output_shape=(batch, out_channels, *out_spatial), padding=padding,
                                 synet_output_padding=synet_opad)


def _conv_operand(value: Any, name: str) -> np.ndarray:
    array = native(as_array(value, name))   # (a byte-swapped array as a native copy, as synet's own forms take it)
    if array.dtype not in _CONV_TYPES:
        raise ValueError(f"{name}: expected float32, float16, float64 or bfloat16 (ConvTranspose's T), "
                         f"got dtype {array.dtype}")
    return array


def conv_transpose(X: Any, W: Any, B: Any = None, *, auto_pad: Any = "NOTSET", dilations: Any = None,
                   group: Any = 1, kernel_shape: Any = None, output_padding: Any = None, output_shape: Any = None,
                   pads: Any = None, strides: Any = None, n_threads: int | None = None) -> np.ndarray:
    """ONNX ConvTranspose computed by synet (BF16 operands, FP32 sums).

    Parameters
    ----------
    X : array_like
        [N, C, L], [N, C, H, W] or [N, C, D, H, W]; float32, float16, float64 or bfloat16
        (``ml_dtypes.bfloat16``).
    W : array_like
        [C, M / group, kernel...], X's dtype.
    B : array_like, optional
        [M], X's dtype.
    auto_pad, dilations, group, kernel_shape, output_padding, output_shape, pads, strides
        ConvTranspose's attributes; see `conv_transpose_geometry` for how they are resolved.
    n_threads : int, optional
        Passed to synet.

    Returns
    -------
    ndarray
        Y of X's dtype and the shape the attributes give.

    Notes
    -----
    ``Y = B + conv_transpose(bf16(X), bf16(W))`` with float32 sums: synet's contract
    (`synet.Deconvolution16b`), not float32 arithmetic. By dtype:

    * float32: as is;
    * bfloat16: X and W are used as they are, the float32 result is rounded to bfloat16 once
      (nearest-even);
    * float16: X, W and B are widened to float32 (exact), the float32 result is rounded to float16;
    * float64: X and W are rounded to bfloat16 once, directly from float64 (`synet.round_to_bfloat16`,
      no double rounding through float32), B to float32; the float32 result is widened to float64 —
      a float64 model gets synet's BF16 accuracy, not float64's.

    The 1-D and 3-D nodes call ``synet.conv_transpose1d`` / ``synet.conv_transpose3d``; a synet
    without them raises NotImplementedError (there is no silent fallback to other numerics).
    """
    x = _conv_operand(X, "X")
    w = _conv_operand(W, "W")
    if w.dtype != x.dtype:
        raise ValueError(f"W: expected X's dtype {x.dtype} (ConvTranspose's one type T), got {w.dtype}")
    geometry = conv_transpose_geometry(x.shape, w.shape, auto_pad=auto_pad, dilations=dilations, group=group,
                                       kernel_shape=kernel_shape, output_padding=output_padding,
                                       output_shape=output_shape, pads=pads, strides=strides)
    b = None
    if B is not None:
        b = _conv_operand(B, "B")
        if b.dtype != x.dtype:
            raise ValueError(f"B: expected X's dtype {x.dtype} (ConvTranspose's one type T), got {b.dtype}")
        if b.shape != geometry.output_shape[1:2]:
            raise ValueError(f"B: expected shape ({geometry.output_shape[1]},) (Y's channels M), got {b.shape}")
    function = getattr(synet, geometry.synet_function, None)
    if function is None:
        raise NotImplementedError(f"ConvTranspose with {geometry.spatial_rank} spatial axes needs "
                                  f"synet.{geometry.synet_function}, which this synet ({synet.__version__}) "
                                  f"does not have")
    if geometry.output_shape[1] == 0:   # M = 0: an empty Y, as onnxruntime gives (synet's kernels need M >= 1)
        resolve_num_threads(n_threads)
        return np.zeros(geometry.output_shape, x.dtype)
    dtype = x.dtype
    if dtype == np.float64:
        x = synet.round_to_bfloat16(x)
        w = synet.round_to_bfloat16(w)
    elif dtype == np.float16:
        x = x.astype(np.float32)
        w = w.astype(np.float32)
    if b is not None and b.dtype != _FLOAT32:
        b = b.astype(np.float32)
    out_dtype = _BFLOAT16 if dtype == _BFLOAT16 else _FLOAT32
    y = function(x, w, b, **geometry.synet_kwargs(), out_dtype=out_dtype, n_threads=n_threads)
    if y.shape != geometry.output_shape:  # a contract between this module and synet, not a user error
        raise synet.InternalError(f"synet.{geometry.synet_function} returned shape {y.shape}, expected "
                                  f"{geometry.output_shape}")
    with np.errstate(over="ignore"):   # a float16 Y beyond its range is inf, as onnxruntime gives, no warning
        return y if y.dtype == dtype else y.astype(dtype)


# --------------------------------------------------------------------------------------------------
# GatherElements


def _gather_numpy(data: np.ndarray, indices: np.ndarray, axis: int) -> np.ndarray:
    """GatherElements for the dtypes synet's kernel does not copy (strings, objects, 16-byte types)."""
    size = data.shape[axis]
    block = data[sub_block(data.shape, indices.shape, axis)]
    normal = np.where(indices < 0, indices + size, indices)
    bad = (normal < 0) | (normal >= size)
    if bad.any():
        position = tuple(int(p) for p in np.argwhere(bad)[0])
        raise IndexError(f"indices{list(position)} = {int(indices[position])} is out of range for axis {axis} "
                         f"with size {size}")
    return np.take_along_axis(block, normal.astype(np.intp), axis)


def gather_elements(data: Any, indices: Any, axis: Any = 0, *, n_threads: int | None = None) -> np.ndarray:
    """ONNX GatherElements: ``out[i][j][k] = data[indices[i][j][k]][j][k]`` (axis 0; likewise others).

    Parameters
    ----------
    data : array_like
        Rank r >= 1, any dtype.
    indices : array_like of int32 or int64
        Rank r; off `axis` its sizes are <= data's (a sub-block, as onnxruntime and PyTorch allow; the
        specification's examples have equal sizes). Negative values count from the end of `axis`.
    axis : int
        In [-r, r - 1] (attribute ``axis``, default 0).
    n_threads : int, optional
        Passed to synet.

    Returns
    -------
    ndarray of indices' shape and data's dtype.

    Raises
    ------
    ValueError
        indices not int32 / int64, ranks that differ, an axis out of range (naming ``axis``).
    IndexError
        An index outside [-size, size) of the axis, naming its position and value.

    Notes
    -----
    `synet.gather_elements` copies every 1-, 2-, 4- and 8-byte dtype (bool, ints, floats, bfloat16,
    complex64); other dtypes (strings, objects, complex128) are gathered with NumPy, with the same
    checks and messages.
    """
    data = as_array(data, "data")
    indices = native(as_array(indices, "indices"))
    if indices.dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise ValueError(f"indices: expected int32 or int64 (GatherElements' Tind), got dtype {indices.dtype}")
    if data.ndim < 1:
        raise ValueError(f"data: expected rank >= 1, got a scalar of shape {data.shape}")
    if indices.ndim != data.ndim:
        raise ValueError(f"indices: expected data's rank {data.ndim}, got shape {indices.shape}")
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, numbers.Integral) or not (
            -data.ndim <= axis < data.ndim):
        raise ValueError(f"attribute 'axis': expected an int in [{-data.ndim}, {data.ndim - 1}], got {axis!r}")
    axis = int(axis)
    if data.dtype.itemsize in (1, 2, 4, 8) and data.dtype.kind in "biufc" or data.dtype == _BFLOAT16:
        return synet.gather_elements(data, indices, axis, n_threads=n_threads)
    resolve_num_threads(n_threads)   # (checked as synet checks it, though NumPy gathers these)
    return _gather_numpy(data, indices, axis % data.ndim)


# --------------------------------------------------------------------------------------------------
# QLinearAdd (com.microsoft)

_QTYPES = (np.dtype(np.uint8), np.dtype(np.int8))


def _per_tensor(array: np.ndarray, name: str) -> np.ndarray:
    """The one element of a scalar or 1-element 1-D tensor (QLinearAdd's scales and zero points), 0-D."""
    if array.size != 1 or array.ndim > 1:
        raise ValueError(f"{name}: expected a scalar or a 1-element 1-D tensor (QLinearAdd is per-tensor), "
                         f"got shape {array.shape}")
    return array.reshape(())


def _scale(value: Any, name: str) -> float:
    array = native(as_array(value, name))
    if array.dtype != _FLOAT32:
        raise ValueError(f"{name}: expected float32 (a scalar or a 1-element 1-D tensor), got dtype {array.dtype}")
    scale = float(_per_tensor(array, name))
    if not (np.isfinite(scale) and scale > 0):
        raise ValueError(f"{name}: expected a finite scale > 0, got {scale}")
    return scale


def _zero_point(value: Any, name: str, dtype: np.dtype) -> int:
    if value is None:
        return 0
    array = native(as_array(value, name))
    if array.dtype != dtype:
        raise ValueError(f"{name}: expected the quantized type {dtype} (A's), got dtype {array.dtype}")
    return int(_per_tensor(array, name))


def qlinear_add(A: Any, A_scale: Any, A_zero_point: Any, B: Any, B_scale: Any, B_zero_point: Any = None,
                C_scale: Any = None, C_zero_point: Any = None, *, n_threads: int | None = None) -> np.ndarray:
    """com.microsoft QLinearAdd (onnxruntime's contrib operator) computed by `synet.quantized_add`.

    ``C = saturate(round_half_even(((A - A_zero_point) * A_scale + (B - B_zero_point) * B_scale)
    / C_scale) + C_zero_point)``, in C's type (A's), with NumPy broadcasting of A and B.

    Parameters
    ----------
    A, B : array_like of uint8 or int8
        The same dtype (the operator's T); shapes that broadcast (NumPy / ONNX multidirectional rules).
    A_scale, B_scale, C_scale : float32 scalar or 1-element 1-D tensor
        Finite and > 0. C_scale is required (the inputs are in the operator's order, so it is a
        keyword default only because B_zero_point before it is optional).
    A_zero_point, B_zero_point, C_zero_point : T scalar or 1-element 1-D tensor, optional
        Absent (None) means 0, as the operator's optional inputs do.
    n_threads : int, optional
        Passed to synet.

    Returns
    -------
    ndarray of T and the broadcast shape.

    Raises
    ------
    ValueError
        Naming the input: a type other than uint8 / int8, A and B of different types, a zero point of
        another type, a scale that is not float32, not a single value, not finite or not > 0, shapes
        that do not broadcast, a missing B, B_scale or C_scale.

    Notes
    -----
    onnxruntime documents QLinearAdd's scales and zero points as per-tensor (a scalar or a 1-D tensor
    of size 1); the operator has no axis attribute, so synet's per-axis form is not used here. synet
    divides the float sum by C_scale and rounds half to even (SPEC section 5); onnxruntime multiplies
    by the float32 ratios A_scale / C_scale and B_scale / C_scale, so the two can differ by 1 where
    the value is within float32 rounding of a tie.
    """
    for value, name in ((A, "A"), (A_scale, "A_scale"), (B, "B"), (B_scale, "B_scale"), (C_scale, "C_scale")):
        if value is None:
            raise ValueError(f"{name}: a required input of QLinearAdd is missing")
    a = as_array(A, "A")
    if a.dtype not in _QTYPES:
        raise ValueError(f"A: expected uint8 or int8 (QLinearAdd's T), got dtype {a.dtype}")
    b = as_array(B, "B")
    if b.dtype != a.dtype:
        raise ValueError(f"B: expected A's type {a.dtype} (QLinearAdd's one type T), got dtype {b.dtype}")
    broadcast_shapes(a.shape, b.shape, "A", "B")
    return synet.quantized_add(
        a, b, a_scale=_scale(A_scale, "A_scale"), a_zero=_zero_point(A_zero_point, "A_zero_point", a.dtype),
        b_scale=_scale(B_scale, "B_scale"), b_zero=_zero_point(B_zero_point, "B_zero_point", a.dtype),
        dst_scale=_scale(C_scale, "C_scale"), dst_zero=_zero_point(C_zero_point, "C_zero_point", a.dtype),
        dst_dtype=a.dtype, n_threads=n_threads)


# --------------------------------------------------------------------------------------------------
# onnx.reference operators


def _no_unknown(op: str, extra: dict[str, Any]) -> None:
    if extra:
        raise ValueError(f"{op}: unknown attribute(s) {sorted(extra)}")


class GatherElements(OpRun):
    """GatherElements (ai.onnx, opsets 11 and 13) for ``onnx.reference.ReferenceEvaluator``, by synet.

    Exact: the same elements as any GatherElements. See `gather_elements`.
    """

    op_domain = ""

    def _run(self, data, indices, axis=None, **extra):  # type: ignore[override]
        _no_unknown("GatherElements", extra)
        return (gather_elements(data, indices, 0 if axis is None else axis),)


class ConvTranspose(OpRun):
    """ConvTranspose (ai.onnx, 1-D, 2-D and 3-D) for ``onnx.reference.ReferenceEvaluator``, by synet.

    It computes as `synet.Deconvolution16b` does: X and W rounded to bfloat16, products summed in
    float32, plus B — not float32 arithmetic (up to about 2**-7 * ``sum(|x * w|)`` from a float32
    runtime). float16 / float64 / bfloat16 models compute the same way and get Y in their own type.
    Attributes are resolved by `conv_transpose_geometry`; see `conv_transpose`.

    Versions: the attribute rules are those of ConvTranspose-11 and -22 (identical). ConvTranspose-1
    (models importing ai.onnx opset 1 to 10) defined ``auto_pad`` SAME as "output size = input size"
    and split an ``output_shape``'s padding the other way round (contradicting its own prose); such a
    node — SAME_UPPER / SAME_LOWER or output_shape under opset < 11 — raises NotImplementedError
    rather than be given the newer meaning. Its other nodes (pads, VALID) mean the same in every
    version and run.
    """

    op_domain = ""

    def _run(self, X, W, B=None, auto_pad=None, dilations=None, group=None,  # type: ignore[override]
             kernel_shape=None, output_padding=None, output_shape=None, pads=None, strides=None, **extra):
        _no_unknown("ConvTranspose", extra)
        opsets = self.run_params.get("opsets") or {}
        opset = opsets.get("", opsets.get("ai.onnx"))
        if opset is not None and opset < 11 and (output_shape is not None or
                                                 _auto_pad(auto_pad) in ("SAME_UPPER", "SAME_LOWER")):
            raise NotImplementedError(
                f"ConvTranspose under ai.onnx opset {opset} (ConvTranspose-1) with "
                f"{'output_shape' if output_shape is not None else 'auto_pad=' + _auto_pad(auto_pad)}: "
                f"ConvTranspose-1 defines these differently from ConvTranspose-11+, which synet implements")
        return (conv_transpose(X, W, B, auto_pad=auto_pad, dilations=dilations, group=1 if group is None else group,
                               kernel_shape=kernel_shape, output_padding=output_padding, output_shape=output_shape,
                               pads=pads, strides=strides),)


class QLinearAdd(OpRun):
    """com.microsoft QLinearAdd (uint8 and int8) for ``onnx.reference.ReferenceEvaluator``, by synet.

    Inputs A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point (zero points
    optional: absent is 0); output C of A's type. See `qlinear_add`. A model using it must import the
    ``com.microsoft`` opset.
    """

    op_domain = "com.microsoft"

    def _run(self, A, A_scale, A_zero_point=None, B=None, B_scale=None,  # type: ignore[override]
             B_zero_point=None, C_scale=None, C_zero_point=None, **extra):
        _no_unknown("QLinearAdd", extra)
        return (qlinear_add(A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point),)


#: The operators to pass as ``ReferenceEvaluator(model, new_ops=synet.onnx.OPS)``.
OPS: list[type[OpRun]] = [GatherElements, ConvTranspose, QLinearAdd]
