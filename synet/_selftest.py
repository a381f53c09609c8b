"""A quick check, without pytest, that each op agrees with a NumPy reference on this machine."""

from __future__ import annotations

import ml_dtypes
import numpy as np

import synet


def _check(name: str, ok: bool) -> bool:
    print(f"{'ok  ' if ok else 'FAIL'} {name}")
    return ok


def selftest() -> bool:
    rng = np.random.default_rng(0)
    results = []
    x = rng.standard_normal(100_003).astype(np.float32)
    results.append(_check("float32_to_bfloat16 == ml_dtypes",
                          np.array_equal(synet.float32_to_bfloat16(x).view(np.uint16),
                                         x.astype(ml_dtypes.bfloat16).view(np.uint16))))
    b = x.astype(ml_dtypes.bfloat16)
    results.append(_check("bfloat16_to_float32 exact", np.array_equal(synet.bfloat16_to_float32(b), b.astype(np.float32))))
    data = rng.standard_normal((3, 17, 5)).astype(np.float32)
    idx = rng.integers(-17, 17, (3, 11, 5))
    results.append(_check("gather_elements == take_along_axis",
                          np.array_equal(synet.gather_elements(data, idx, 1),
                                         np.take_along_axis(data, idx % 17, 1))))
    return all(results)
