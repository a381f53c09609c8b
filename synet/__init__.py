"""synet: fast, exact inference kernels of Simd's Synet family for NumPy (Cython + OpenMP).

GatherElements, QuantizedAdd, BF16 conversions, thread control; see README.rst for the full guide.
"""

from __future__ import annotations

import os
import platform
import sys

from ._kernels import (
    OPENMP as _OPENMP,
    SIMD_LEVEL as _SIMD_LEVEL,
    bfloat16_to_float32,
    float32_to_bfloat16,
    get_num_threads,
    release_cached_buffers,
    round_to_bfloat16,
    set_num_threads,
)
from ._conv_params import ConvParams
from ._deconvolution import Deconvolution16b, conv_transpose2d
from ._gather import GatherElements, gather_elements
from ._quantized_add import QuantizedAdd, quantized_add
from ._types import Activation, Compatibility, DataType, TensorFormat

__version__ = "0.1.0"

__all__ = [
    "Activation",
    "Compatibility",
    "ConvParams",
    "DataType",
    "Deconvolution16b",
    "GatherElements",
    "QuantizedAdd",
    "TensorFormat",
    "__version__",
    "bfloat16_to_float32",
    "config",
    "conv_transpose2d",
    "float32_to_bfloat16",
    "gather_elements",
    "get_include",
    "get_num_threads",
    "quantized_add",
    "release_cached_buffers",
    "round_to_bfloat16",
    "set_num_threads",
    "show_config",
]


def get_include() -> str:
    """The folder holding synet's public .pxd files: add it to a downstream extension's include path."""
    return os.path.dirname(os.path.abspath(__file__))


def config() -> dict:
    """What this build is: version, compiler, flags, OpenMP, SIMD level and the thread count."""
    from . import _config

    return {
        "version": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "compiler": _config.COMPILER,
        "cflags": _config.CFLAGS,
        "cpu_baseline": _config.CPU_BASELINE,
        "debug": _config.DEBUG,
        "openmp": _OPENMP,
        "simd": _SIMD_LEVEL,
        "threads": get_num_threads(),
    }


def show_config() -> None:
    """Print `config()` one item a line."""
    for key, value in config().items():
        print(f"{key:>13}: {value}")
