"""Simd's enums as IntEnums, and the parsers that accept enums, names and dtypes."""

from __future__ import annotations

import enum

import numpy as np

from ._arrays import BFLOAT16, loaded_torch


class DataType(enum.IntEnum):
    """SimdTensorDataType: tensor element types, with Simd's values (FLOAT32 = 0 ... FLOAT16 = 8)."""

    FLOAT32 = 0
    INT32 = 1
    INT8 = 2
    UINT8 = 3
    INT64 = 4
    UINT64 = 5
    BOOL = 6
    BFLOAT16 = 7
    FLOAT16 = 8


class TensorFormat(enum.IntEnum):
    """SimdTensorFormatType: NCHW = 0 (channels first), NHWC = 1 (channels last)."""

    NCHW = 0
    NHWC = 1


class Activation(enum.IntEnum):
    """SimdConvolutionActivationType: the 11 fused activations (formulas in synet/src/activations.h)."""

    IDENTITY = 0
    RELU = 1
    LEAKY_RELU = 2
    RESTRICT_RANGE = 3
    PRELU = 4
    ELU = 5
    HSWISH = 6
    MISH = 7
    HARD_SIGMOID = 8
    SWISH = 9
    GELU = 10


class Compatibility(enum.IntFlag):
    """SimdSynetCompatibilityType flags; BF16_SOFT selects the portable deconvolution kernel."""

    DEFAULT = 0
    FMA_NO_TAIL = 1
    FMA_AVOID = 2
    BF16_HARD = 16
    BF16_SOFT = 32


_KNOWN_COMPATIBILITY = sum(flag.value for flag in Compatibility)   # the bits of every flag (one bit each)
_COMPATIBILITY_OF_INT = {bits: Compatibility(bits) for bits in range(_KNOWN_COMPATIBILITY + 1)
                         if bits & ~_KNOWN_COMPATIBILITY == 0}   # the flags of each valid int


_DATA_TYPE_NAMES = {
    DataType.FLOAT32: ("float32", "f32", "32f", "float"),
    DataType.INT32: ("int32", "i32", "32i"),
    DataType.INT8: ("int8", "i8", "8i"),
    DataType.UINT8: ("uint8", "u8", "8u"),
    DataType.INT64: ("int64", "i64", "64i"),
    DataType.UINT64: ("uint64", "u64", "64u"),
    DataType.BOOL: ("bool", "b8"),
    DataType.BFLOAT16: ("bfloat16", "bf16", "16b"),
    DataType.FLOAT16: ("float16", "f16", "16f", "half"),
}
_DATA_TYPE_BY_NAME = {name: dt for dt, names in _DATA_TYPE_NAMES.items() for name in names}
_DTYPE_OF = {
    DataType.FLOAT32: np.dtype(np.float32),
    DataType.INT32: np.dtype(np.int32),
    DataType.INT8: np.dtype(np.int8),
    DataType.UINT8: np.dtype(np.uint8),
    DataType.INT64: np.dtype(np.int64),
    DataType.UINT64: np.dtype(np.uint64),
    DataType.BOOL: np.dtype(np.bool_),
    DataType.BFLOAT16: BFLOAT16,
    DataType.FLOAT16: np.dtype(np.float16),
}
_DATA_TYPE_OF_DTYPE = {dtype: dt for dt, dtype in _DTYPE_OF.items()}
_NUMPY_DATA_TYPES = ", ".join(str(d) for d in _DATA_TYPE_OF_DTYPE)   # (for messages)


def _name_key(name: str) -> str:
    return name.strip().lower().replace("_", "").replace("-", "")


_ACTIVATION_BY_KEY = {_name_key(act.name): act for act in Activation}
_ACTIVATIONS = {int(act): act for act in Activation}
_FORMAT_NAMES = frozenset(TensorFormat.__members__)


def _describe(value: object) -> str:
    return f"{value!r} ({type(value).__name__})"


def as_data_type(value: object, param: str = "data_type") -> DataType:
    """The DataType named by an enum, its value, a name (NumPy, short or Simd's) or a dtype."""
    if isinstance(value, DataType):
        return value
    if isinstance(value, str):
        found = _DATA_TYPE_BY_NAME.get(value.strip().lower())
        if found is not None:
            return found
    elif isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        try:
            return DataType(int(value))
        except ValueError:
            pass
    elif _is_torch_dtype(value):   # torch.float32, torch.bfloat16, torch.uint8 ...: by name
        found = _DATA_TYPE_BY_NAME.get(str(value).removeprefix("torch."))
        if found is not None:
            return found
        raise ValueError(f"{param}: {value} is none of synet's data types ({_NUMPY_DATA_TYPES})")
    else:
        dtype = dtype_or_none(value)
        if dtype is not None and dtype in _DATA_TYPE_OF_DTYPE:
            return _DATA_TYPE_OF_DTYPE[dtype]
        if dtype is not None:
            raise ValueError(f"{param}: NumPy's {dtype} is none of synet's data types ({_NUMPY_DATA_TYPES})")
    raise ValueError(
        f"{param}: expected a DataType, its name (e.g. 'float32', 'bf16', '8u') or a NumPy (or torch) "
        f"dtype, got {_describe(value)}"
    )


def _is_torch_dtype(value: object) -> bool:
    """Whether `value` is a torch.dtype (torch is never imported here)."""
    torch = loaded_torch()
    return torch is not None and isinstance(value, torch.dtype)


def dtype_or_none(value: object) -> np.dtype | None:
    """np.dtype(value), or None where NumPy does not read `value` as a dtype.

    NumPy's parser fails with TypeError, ValueError or even SyntaxError (``np.dtype(",")``): any
    failure means "not a dtype" here, and the caller raises its own error naming the parameter. None is not
    a dtype here either (NumPy reads it as float64: ``GatherElements(None, ...)`` gathered float64 words).
    """
    if value is None:
        return None
    try:
        return np.dtype(value)  # type: ignore[call-overload]
    except Exception:
        return None


def dtype_of(data_type: DataType) -> np.dtype:
    """The NumPy dtype that holds a DataType (ml_dtypes.bfloat16 for BFLOAT16)."""
    return _DTYPE_OF[data_type]


def as_activation(value: object, param: str = "activation") -> Activation:
    """The Activation named by an enum, its value, or a name in any case, with or without '_'."""
    if isinstance(value, Activation):
        return value
    if isinstance(value, str):
        act = _ACTIVATION_BY_KEY.get(value)   # a key as it is ("relu"), else normalised ("Leaky_ReLU")
        if act is None:
            act = _ACTIVATION_BY_KEY.get(_name_key(value))
        if act is not None:
            return act
    elif isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        act = _ACTIVATIONS.get(int(value))   # looked up: an enum call costs ~0.3 us of each new plan
        if act is not None:
            return act
    names = ", ".join(a.name.lower() for a in Activation)
    raise ValueError(f"{param}: expected an Activation or one of {names}; got {_describe(value)}")


def as_format(value: object, param: str = "format") -> TensorFormat:
    """The TensorFormat named by an enum, its value or 'NCHW' / 'NHWC' (any case)."""
    if isinstance(value, TensorFormat):
        return value
    if isinstance(value, str):
        try:
            return TensorFormat[value if value in _FORMAT_NAMES else value.strip().upper()]
        except KeyError:
            pass
    elif isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        try:
            return TensorFormat(int(value))
        except ValueError:
            pass
    raise ValueError(f"{param}: expected 'NCHW' or 'NHWC' (or a TensorFormat), got {_describe(value)}")


def as_compatibility(value: object, param: str = "compatibility") -> Compatibility:
    """Compatibility flags from an enum or an int made of its bits."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        found = _COMPATIBILITY_OF_INT.get(int(value))   # every valid combination (an IntFlag call costs ~0.3 us)
        if found is not None:
            return found
    raise ValueError(f"{param}: expected Compatibility flags, got {_describe(value)}")
