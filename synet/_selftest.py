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
    exact = np.array_equal(synet.bfloat16_to_float32(b), b.astype(np.float32))
    results.append(_check("bfloat16_to_float32 exact", exact))
    data = rng.standard_normal((3, 17, 5)).astype(np.float32)
    idx = rng.integers(-17, 17, (3, 11, 5))
    results.append(_check("gather_elements == take_along_axis",
                          np.array_equal(synet.gather_elements(data, idx, 1),
                                         np.take_along_axis(data, idx % 17, 1))))
    a = rng.integers(0, 256, (2, 8, 33, 17), dtype=np.uint8)
    c = rng.integers(0, 256, (1, 8, 1, 1), dtype=np.uint8)
    for act, fn in (("identity", lambda v: v), ("relu", lambda v: np.maximum(v, 0.0))):
        for other in (a[::-1].copy(), c):
            value = fn((a - 47.0) * 0.010 + (other - 30.0) * 0.020) / 0.015
            expected = np.clip(np.rint(value) + 38, 0, 255)
            got = synet.quantized_add(a, other, a_scale=0.010, a_zero=47, b_scale=0.020, b_zero=30,
                                      dst_scale=0.015, dst_zero=38, activation=act)
            near_tie = np.abs(np.abs(value - np.floor(value)) - 0.5) < 1e-3
            diff = np.abs(got.astype(int) - expected)
            results.append(_check(f"quantized_add u8 {act} {'per-channel' if other is c else 'equal shapes'}"
                                  " == float64 formula", bool((diff <= 1).all() and (diff[~near_tie] == 0).all())))
    x = rng.standard_normal((1, 32, 6, 5)).astype(np.float32)
    w = rng.standard_normal((32, 8, 3, 3)).astype(np.float32)
    xr = x.astype(ml_dtypes.bfloat16).astype(np.float64)
    wr = w.astype(ml_dtypes.bfloat16).astype(np.float64)
    ref = np.zeros((1, 8, 13, 11))  # stride 2, kernel 3: full output 13x11, then pad 1
    for ky in range(3):
        for kx in range(3):
            ref[:, :, ky:ky + 11:2, kx:kx + 9:2] += np.einsum("nchw,cd->ndhw", xr, wr[:, :, ky, kx])
    ref = ref[:, :, 1:-1, 1:-1]
    got = synet.conv_transpose2d(x, w, stride=2, padding=1)
    results.append(_check("conv_transpose2d == float64 reference (BF16 operands)",
                          bool(np.allclose(got, ref, rtol=0, atol=1e-4))))
    return all(results)
