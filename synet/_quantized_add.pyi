from collections.abc import Sequence
from typing import final

import numpy as np
import numpy.typing as npt

FOLDED_MAX_ERROR: float

@final
class QuantizedAdd:
    def __init__(
        self,
        a_shape: Sequence[int] | None = None,
        a_type: object = None,
        a_scale: float = 1.0,
        a_zero: int = 0,
        b_shape: Sequence[int] | None = None,
        b_type: object = None,
        b_scale: float = 1.0,
        b_zero: int = 0,
        act_type: object = ...,
        act_params: npt.ArrayLike | None = None,
        dst_type: object = None,
        dst_scale: float = 1.0,
        dst_zero: int = 0,
    ) -> None: ...
    def init(
        self,
        a_shape: Sequence[int],
        a_type: object,
        a_scale: float,
        a_zero: int,
        b_shape: Sequence[int],
        b_type: object,
        b_scale: float,
        b_zero: int,
        act_type: object,
        act_params: npt.ArrayLike | None,
        dst_type: object,
        dst_scale: float,
        dst_zero: int,
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
    a_scale: float = 1.0,
    a_zero: int = 0,
    b_scale: float = 1.0,
    b_zero: int = 0,
    dst_scale: float = 1.0,
    dst_zero: int = 0,
    dst_dtype: npt.DTypeLike = ...,
    activation: object = "identity",
    activation_params: npt.ArrayLike | None = None,
    out: np.ndarray | None = None,
    n_threads: int | None = None,
) -> np.ndarray: ...
