from typing import final

import numpy as np
import numpy.typing as npt
from typing_extensions import disjoint_base

from ._conv_params import ConvParams, ConvParams3d

LEVEL: str
PICKLE_VERSION: int
BF16_DOT: bool

def amx_available() -> bool: ...

@disjoint_base
class Deconvolution16b:
    def __init__(self, batch: int | None = None, conv: ConvParams | None = None, compatibility: int = 0) -> None: ...
    def init(self, batch: int, conv: ConvParams, compatibility: int = 0) -> None: ...
    def enable(self) -> bool: ...
    def external_buffer_size(self) -> int: ...
    def internal_buffer_size(self) -> int: ...
    def info(self) -> str: ...
    def set_params(
        self, weight: npt.ArrayLike, bias: npt.ArrayLike | None = None, params: npt.ArrayLike | None = None
    ) -> None: ...
    def forward(
        self, src: np.ndarray, buf: np.ndarray | None = None, dst: np.ndarray | None = None, *,
        n_threads: int | None = None
    ) -> np.ndarray: ...
    def clear(self) -> None: ...
    @property
    def batch(self) -> int | None: ...
    @property
    def conv(self) -> ConvParams | ConvParams3d | None: ...

@final
class Deconvolution3d16b(Deconvolution16b):
    def __init__(self, batch: int | None = None, conv: ConvParams3d | None = None,  # type: ignore[override]
                 compatibility: int = 0) -> None: ...
    def init(self, batch: int, conv: ConvParams3d, compatibility: int = 0) -> None: ...  # type: ignore[override]

def conv_transpose2d(
    x: npt.ArrayLike,
    weight: npt.ArrayLike,
    bias: npt.ArrayLike | None = None,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] | tuple[int, int, int, int] = 0,
    output_padding: int | tuple[int, int] = 0,
    groups: int = 1,
    dilation: int | tuple[int, int] = 1,
    *,
    layout: str = "NCHW",
    activation: object = "identity",
    activation_params: npt.ArrayLike | None = None,
    out_dtype: npt.DTypeLike | None = None,
    out: np.ndarray | None = None,
    n_threads: int | None = None,
) -> np.ndarray: ...

def conv_transpose1d(
    x: npt.ArrayLike,
    weight: npt.ArrayLike,
    bias: npt.ArrayLike | None = None,
    stride: int | tuple[int] = 1,
    padding: int | tuple[int] | tuple[int, int] = 0,
    output_padding: int | tuple[int] = 0,
    groups: int = 1,
    dilation: int | tuple[int] = 1,
    *,
    layout: str = "NCL",
    activation: object = "identity",
    activation_params: npt.ArrayLike | None = None,
    out_dtype: npt.DTypeLike | None = None,
    out: np.ndarray | None = None,
    n_threads: int | None = None,
) -> np.ndarray: ...

def conv_transpose3d(
    x: npt.ArrayLike,
    weight: npt.ArrayLike,
    bias: npt.ArrayLike | None = None,
    stride: int | tuple[int, int, int] = 1,
    padding: int | tuple[int, int, int] | tuple[int, int, int, int, int, int] = 0,
    output_padding: int | tuple[int, int, int] = 0,
    groups: int = 1,
    dilation: int | tuple[int, int, int] = 1,
    *,
    layout: str = "NCDHW",
    activation: object = "identity",
    activation_params: npt.ArrayLike | None = None,
    out_dtype: npt.DTypeLike | None = None,
    out: np.ndarray | None = None,
    n_threads: int | None = None,
) -> np.ndarray: ...
