from collections.abc import Sequence
from typing import final

import numpy as np
import numpy.typing as npt

LEVEL: str
PICKLE_VERSION: int

@final
class QuantizedAdd:
    def __init__(
        self,
        a_shape: Sequence[int] | None = None,
        a_type: object = None,
        a_scale: float | npt.ArrayLike = 1.0,
        a_zero: int | npt.ArrayLike = 0,
        b_shape: Sequence[int] | None = None,
        b_type: object = None,
        b_scale: float | npt.ArrayLike = 1.0,
        b_zero: int | npt.ArrayLike = 0,
        act_type: object = ...,
        act_params: npt.ArrayLike | None = None,
        dst_type: object = None,
        dst_scale: float | npt.ArrayLike = 1.0,
        dst_zero: int | npt.ArrayLike = 0,
        *,
        axis: int = 1,
    ) -> None: ...
    def init(
        self,
        a_shape: Sequence[int],
        a_type: object,
        a_scale: float | npt.ArrayLike,
        a_zero: int | npt.ArrayLike,
        b_shape: Sequence[int],
        b_type: object,
        b_scale: float | npt.ArrayLike,
        b_zero: int | npt.ArrayLike,
        act_type: object,
        act_params: npt.ArrayLike | None,
        dst_type: object,
        dst_scale: float | npt.ArrayLike,
        dst_zero: int | npt.ArrayLike,
        *,
        axis: int = 1,
    ) -> None: ...
    def enable(self) -> bool: ...
    @property
    def shape(self) -> tuple[int, ...] | None: ...
    @property
    def kernel(self) -> str | None: ...
    def forward(
        self, a: np.ndarray, b: np.ndarray, dst: np.ndarray | None = None, *, n_threads: int | None = None
    ) -> np.ndarray: ...
    def clear(self) -> None: ...

def quantized_add(
    a: npt.ArrayLike,
    b: npt.ArrayLike,
    *,
    a_scale: float | npt.ArrayLike = 1.0,
    a_zero: int | npt.ArrayLike = 0,
    b_scale: float | npt.ArrayLike = 1.0,
    b_zero: int | npt.ArrayLike = 0,
    dst_scale: float | npt.ArrayLike = 1.0,
    dst_zero: int | npt.ArrayLike = 0,
    dst_dtype: npt.DTypeLike = ...,
    activation: object = "identity",
    activation_params: npt.ArrayLike | None = None,
    axis: int = 1,
    out: np.ndarray | None = None,
    n_threads: int | None = None,
) -> np.ndarray: ...
