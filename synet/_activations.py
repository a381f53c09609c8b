"""Activation parameters for the inline kernels of ``activations.pxd``: defaults and checks."""

from __future__ import annotations

import numpy as np

from ._arrays import from_torch
from ._types import Activation

# Values each activation reads, in Simd's order, with SPEC section 2's defaults.
DEFAULT_PARAMS: dict[Activation, tuple[float, ...]] = {
    Activation.IDENTITY: (),
    Activation.RELU: (),
    Activation.LEAKY_RELU: (0.01,),
    Activation.RESTRICT_RANGE: (0.0, 6.0),
    Activation.PRELU: (),  # one slope per channel, no default
    Activation.ELU: (1.0,),
    Activation.HSWISH: (3.0, 1.0 / 6.0),
    Activation.MISH: (20.0,),
    Activation.HARD_SIGMOID: (1.0 / 6.0, 0.5),
    Activation.SWISH: (1.0,),
    Activation.GELU: (),
}


def activation_params(act: Activation, params: object, channels: int, name: str = "act_params",
                      allow_single_slope: bool = True, allow_extra_slopes: bool = False) -> np.ndarray:
    """The float32 parameter array the kernels read for `act` (never empty).

    None gives the defaults. Otherwise `params` must hold at least the values `act` uses
    (extra values are ignored, as Simd's callers pass max(channels, 2)); PRELU needs
    `channels` slopes, or a single one when `allow_single_slope`; with `allow_extra_slopes`
    more than `channels` are accepted and the first `channels` kept. Raises ValueError naming
    `name`, what was expected and what was given.
    """
    if act == Activation.PRELU:
        if params is None:
            raise ValueError(f"{name}: PRELU needs its slopes ({channels} per-channel values"
                             f"{' or 1' if allow_single_slope else ''}), got None")
        values = _as_float_vector(params, name)
        if values.size == channels or (allow_single_slope and values.size == 1):
            return values if values.size else np.zeros(1, dtype=np.float32)   # (no channels: read, never used)
        if allow_extra_slopes and values.size > channels:
            return np.ascontiguousarray(values[:channels])
        expected = ("at least " if allow_extra_slopes else "") + f"{channels}" + \
            (" or 1" if allow_single_slope and channels != 1 else "")
        raise ValueError(f"{name}: PRELU expects {expected} slope(s) (one per channel of axis 1), "
                         f"got {values.size}")
    defaults = DEFAULT_PARAMS[act]
    if params is None:
        values = np.array(defaults, dtype=np.float32)
    else:
        values = _as_float_vector(params, name)
        if values.size < len(defaults):
            raise ValueError(f"{name}: {act.name} expects {len(defaults)} value(s), got {values.size}")
        values = _no_nan(values[: max(len(defaults), 1)], act, name)
    if values.size == 0:
        values = np.zeros(1, dtype=np.float32)  # kernels may read params[0]
    return np.ascontiguousarray(values, dtype=np.float32)


# The activations whose parameters enter a min or max, which has no one meaning for a NaN (C's fmaxf ignores it,
# a comparison keeps it or not by its order): NaN parameters are refused there. A NaN slope (LEAKY_RELU, PRELU),
# ELU's alpha, SWISH's beta or MISH's threshold (x > t) has the formula's meaning.
MIN_MAX_PARAMS = (Activation.RESTRICT_RANGE, Activation.HSWISH, Activation.HARD_SIGMOID)


def _no_nan(values: np.ndarray, act: Activation, name: str) -> np.ndarray:
    """`values`, or ValueError when one is NaN and `act` takes it into a min or max (MIN_MAX_PARAMS); ±inf
    are fine (RESTRICT_RANGE (0, inf) is RELU)."""
    if act in MIN_MAX_PARAMS and np.isnan(values).any():
        raise ValueError(f"{name}: {act.name} parameters enter a min or max: expected no NaN, got "
                         f"{values.tolist()}")
    return values


def _as_float_vector(params: object, name: str) -> np.ndarray:
    params = from_torch(params, name)
    try:
        if np.asarray(params).dtype.kind == "c":   # (NumPy would drop the imaginary parts with a warning)
            raise ValueError
        values = np.asarray(params, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):   # (an int beyond float64's range)
        raise ValueError(f"{name}: expected a sequence of real numbers, got {params!r}") from None
    if values.ndim > 1:
        raise ValueError(f"{name}: expected a 1-D sequence of numbers, got shape {values.shape}")
    return np.ascontiguousarray(values.reshape(-1), dtype=np.float32)
