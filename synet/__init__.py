"""synet: fast, exact inference kernels of Simd's Synet family for NumPy (Cython + OpenMP).

GatherElements, QuantizedAdd, Deconvolution16b (transposed convolution), BF16 conversions and
thread control; one build picks the best kernels for the CPU it runs on. See the documentation
in docs/ (and README.rst) for the guide.
"""

from __future__ import annotations

import os
import platform
import sys

from ._arrays import InternalError
from ._cache import clear as clear_plan_cache
from ._cache import info as plan_cache_info
from ._conv_params import ConvParams, ConvParams3d
from ._deconvolution import (
    Deconvolution3d16b,
    Deconvolution16b,
    conv_transpose1d,
    conv_transpose2d,
    conv_transpose3d,
)
from ._gather import GatherElements, gather_elements
from ._kernels import (
    OPENMP as _OPENMP,
)
from ._kernels import (
    bfloat16_to_float32,
    float32_to_bfloat16,
    get_num_threads,
    round_to_bfloat16,
    set_num_threads,
)
from ._kernels import (
    dispatch as _dispatch,
)
from ._quantized_add import QuantizedAdd, quantized_add
from ._types import Activation, Compatibility, DataType, TensorFormat
from ._version import __version__

__all__ = [
    "Activation",
    "Compatibility",
    "ConvParams",
    "ConvParams3d",
    "DataType",
    "Deconvolution16b",
    "Deconvolution3d16b",
    "GatherElements",
    "InternalError",
    "QuantizedAdd",
    "TensorFormat",
    "__version__",
    "bfloat16_to_float32",
    "clear_plan_cache",
    "config",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "float32_to_bfloat16",
    "gather_elements",
    "get_include",
    "get_num_threads",
    "plan_cache_info",
    "quantized_add",
    "round_to_bfloat16",
    "set_num_threads",
    "show_config",
]


def get_include() -> str:
    """The folder holding synet's public .pxd files and the C headers they include: add it to a
    downstream extension's include path."""
    return os.path.dirname(os.path.abspath(__file__))


def config() -> dict:
    """What this build is and runs: version, compiler, flags, OpenMP, CPU levels, threads, plan caches."""
    from . import _config, _deconvolution, _gather, _kernels, _quantized_add

    dispatch = _dispatch()
    dispatch["ops"] = {"bf16": _kernels.BF16_LEVEL, "gather": _gather.LEVEL, "quantized_add": _quantized_add.LEVEL,
                       "deconvolution": _deconvolution.LEVEL}
    dispatch["bf16_dot"] = _deconvolution.BF16_DOT
    dispatch["vector_gather"] = _gather.VECTOR_GATHER
    return {
        "version": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "compiler": _config.COMPILER,
        "cflags": _config.CFLAGS,
        "cpu_baseline": _config.CPU_BASELINE,
        "debug": _config.DEBUG,
        "openmp": _OPENMP,
        "dispatch": dispatch,
        "threads": get_num_threads(),
        "plan_cache": plan_cache_info(),
    }


def show_config() -> None:
    """Print `config()` one item a line."""
    for key, value in config().items():
        if isinstance(value, dict):
            print(f"{key:>13}:")
            for k, v in value.items():
                print(f"{'':>15}{k}: {v}")
        else:
            print(f"{key:>13}: {value}")
