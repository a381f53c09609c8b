from typing import Literal

import numpy as np
import numpy.typing as npt
from typing_extensions import disjoint_base

OPENMP: bool
LEVELS: tuple[str, ...]
DISABLE_CPU_FEATURES: tuple[str, ...]
BF16_LEVEL: str

PEAK_KINDS: tuple[str, ...]

def dispatch() -> dict: ...
def peak_run(kind: str, iterations: int) -> float | None: ...
def peak_flops(kind: str, seconds: float = 0.05) -> float | None: ...
def copy_run(source: np.ndarray, target: np.ndarray, n_threads: int | None = None) -> None: ...

@disjoint_base
class LoadRun:
    def __init__(self, source: np.ndarray, offsets: np.ndarray, target: np.ndarray) -> None: ...
    def run(self) -> None: ...

def available_cpus() -> int: ...
def set_num_threads(n: int | None) -> None: ...
def get_num_threads() -> int: ...
def resolve_num_threads(n_threads: int | None = None) -> int: ...
def float32_to_bfloat16(
    x: npt.ArrayLike,
    *,
    rounding: Literal["nearest", "truncate"] = "nearest",
    out: np.ndarray | None = None,
    n_threads: int | None = None,
) -> np.ndarray: ...
def bfloat16_to_float32(
    x: npt.ArrayLike, *, out: np.ndarray | None = None, n_threads: int | None = None
) -> np.ndarray: ...
def round_to_bfloat16(
    x: npt.ArrayLike,
    *,
    rounding: Literal["nearest", "truncate"] = "nearest",
    out: np.ndarray | None = None,
    n_threads: int | None = None,
) -> np.ndarray: ...
