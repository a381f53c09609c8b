"""Enums keep Simd's values; parsers accept enums, values, names and dtypes."""

import ml_dtypes
import numpy as np
import pytest

import synet
from synet._types import as_activation, as_compatibility, as_data_type, as_format, dtype_of


def test_enum_values_are_simds():
    assert [(d.name, d.value) for d in synet.DataType] == [
        ("FLOAT32", 0), ("INT32", 1), ("INT8", 2), ("UINT8", 3), ("INT64", 4), ("UINT64", 5), ("BOOL", 6),
        ("BFLOAT16", 7), ("FLOAT16", 8)]
    assert (synet.TensorFormat.NCHW, synet.TensorFormat.NHWC) == (0, 1)
    assert [a.value for a in synet.Activation] == list(range(11))
    assert synet.Activation.GELU == 10 and synet.Activation.LEAKY_RELU == 2
    assert (synet.Compatibility.FMA_NO_TAIL, synet.Compatibility.FMA_AVOID, synet.Compatibility.BF16_HARD,
            synet.Compatibility.BF16_SOFT) == (1, 2, 16, 32)


@pytest.mark.parametrize("value, expected", [
    ("float32", synet.DataType.FLOAT32), ("F32", synet.DataType.FLOAT32), ("32f", synet.DataType.FLOAT32),
    (np.float32, synet.DataType.FLOAT32), (np.dtype("float32"), synet.DataType.FLOAT32),
    ("bfloat16", synet.DataType.BFLOAT16), ("bf16", synet.DataType.BFLOAT16), ("16b", synet.DataType.BFLOAT16),
    (ml_dtypes.bfloat16, synet.DataType.BFLOAT16), ("uint8", synet.DataType.UINT8), ("u8", synet.DataType.UINT8),
    ("8u", synet.DataType.UINT8), (np.uint8, synet.DataType.UINT8), ("int32", synet.DataType.INT32),
    ("i32", synet.DataType.INT32), ("32i", synet.DataType.INT32), (np.int32, synet.DataType.INT32),
    ("INT64", synet.DataType.INT64), ("i64", synet.DataType.INT64), ("64i", synet.DataType.INT64),
    (np.int64, synet.DataType.INT64), (3, synet.DataType.UINT8), (synet.DataType.INT8, synet.DataType.INT8),
])
def test_data_type_spellings(value, expected):
    assert as_data_type(value) is expected


def test_dtype_of_bfloat16():
    assert dtype_of(synet.DataType.BFLOAT16) == np.dtype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("value", ["float", "leaky_relu", "LeakyRelu", "Leaky-ReLU", 2, synet.Activation.LEAKY_RELU])
def test_activation_spellings(value):
    if value == "float":
        with pytest.raises(ValueError, match="activation"):
            as_activation(value)
    else:
        assert as_activation(value) is synet.Activation.LEAKY_RELU


def test_format_and_compatibility():
    assert as_format("nhwc") is synet.TensorFormat.NHWC and as_format(0) is synet.TensorFormat.NCHW
    assert as_compatibility(16 | 1) == synet.Compatibility.BF16_HARD | synet.Compatibility.FMA_NO_TAIL


@pytest.mark.parametrize("parser, bad, name", [
    (as_data_type, "float33", "data_type"), (as_data_type, 99, "data_type"), (as_data_type, np.complex64, "data_type"),
    (as_data_type, True, "data_type"), (as_activation, 11, "activation"), (as_activation, None, "activation"),
    (as_format, "NCWH", "format"), (as_format, 2, "format"), (as_compatibility, 4, "compatibility"),
    (as_compatibility, -1, "compatibility"),
    # NumPy's own dtype parser raises ValueError / SyntaxError on these: still ours, naming the parameter
    (as_data_type, ("f4", ","), "data_type"), (as_data_type, ("f4", 2**62), "data_type"),
])
def test_bad_spellings_name_the_parameter(parser, bad, name):
    with pytest.raises(ValueError, match=name):
        parser(bad)
