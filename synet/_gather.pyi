from collections.abc import Sequence
from typing import final

import numpy as np
import numpy.typing as npt

LEVEL: str
VECTOR_GATHER: bool
PICKLE_VERSION: int

@final
class GatherElements:
    def __init__(
        self,
        data_type: object = None,
        index_type: object = None,
        index_const: bool = False,
        index_users: int = 1,
        outer: Sequence[int] | int | None = None,
        src_count: int | None = None,
        inner: int | None = None,
        idx_count: int | None = None,
    ) -> None: ...
    def init(
        self,
        data_type: object,
        index_type: object,
        index_const: bool,
        index_users: int,
        outer: Sequence[int] | int,
        src_count: int,
        inner: int,
        idx_count: int,
    ) -> None: ...
    def enable(self) -> bool: ...
    def internal_buffer_size(self) -> int: ...
    @property
    def index_users(self) -> int | None: ...
    @property
    def level(self) -> str: ...
    def set_index(self, idx: np.ndarray) -> None: ...
    def forward(
        self, src: np.ndarray, idx: np.ndarray | None = None, dst: np.ndarray | None = None, *,
        n_threads: int | None = None,
    ) -> np.ndarray: ...
    def clear(self) -> None: ...

def gather_elements(
    data: npt.ArrayLike, indices: npt.ArrayLike, axis: int = 0, *, out: np.ndarray | None = None,
    n_threads: int | None = None
) -> np.ndarray: ...
