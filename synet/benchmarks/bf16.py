"""BF16 conversion workloads B1, B2 (issue #2) against ml_dtypes casts and a plain memory copy."""

from __future__ import annotations

import ml_dtypes
import numpy as np

import synet

from . import Workload, torch_single_thread

N = 16 * 1024 * 1024


def _make_b1():
    x = np.random.default_rng(1).standard_normal(N).astype(np.float32)
    out = np.empty(N, dtype=ml_dtypes.bfloat16)
    candidates = {
        "synet": lambda: synet.float32_to_bfloat16(x, n_threads=1),
        "synet x2": lambda: synet.float32_to_bfloat16(x, n_threads=2),
        "synet out=": lambda: synet.float32_to_bfloat16(x, out=out, n_threads=1),
        "ml_dtypes astype": lambda: x.astype(ml_dtypes.bfloat16),
    }
    torch = torch_single_thread()
    if torch is not None:
        t = torch.from_numpy(x)
        candidates["torch .to(bfloat16)"] = lambda: t.to(torch.bfloat16)
    return candidates


def _make_b2():
    x = np.random.default_rng(2).standard_normal(N).astype(ml_dtypes.bfloat16)
    out = np.empty(N, dtype=np.float32)
    same_bytes = np.empty(N * 2, dtype=np.uint16)
    copy_target = np.empty_like(same_bytes)
    candidates = {
        "synet": lambda: synet.bfloat16_to_float32(x, n_threads=1),
        "synet x2": lambda: synet.bfloat16_to_float32(x, n_threads=2),
        "synet out=": lambda: synet.bfloat16_to_float32(x, out=out, n_threads=1),
        "ml_dtypes astype": lambda: x.astype(np.float32),
        "memory copy (np.copyto, out bytes)": lambda: np.copyto(copy_target, same_bytes),
    }
    torch = torch_single_thread()
    if torch is not None:
        t = torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
        candidates["torch .to(float32)"] = lambda: t.to(torch.float32)
    return candidates


WORKLOADS = [
    Workload("B1", "float32 -> bfloat16 (nearest), 16M elements", _make_b1, nbytes=N * 6),
    Workload("B2", "bfloat16 -> float32, 16M elements", _make_b2, nbytes=N * 6),
]
