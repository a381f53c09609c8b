"""Fuzz the BF16 helpers: right bits or Python exceptions, whatever comes in."""

import numpy as np
from fuzzing import BF16, arrays, attempt, failed, junk
from hypothesis import given
from hypothesis import strategies as st

import synet


@given(arrays(), st.one_of(st.sampled_from(["nearest", "truncate"]), junk()), st.one_of(st.none(), arrays()),
       st.one_of(st.none(), st.integers(-3, 3)))
def test_conversions(x, rounding, out, n_threads):
    result = attempt(synet.float32_to_bfloat16, x, rounding=rounding, out=out, n_threads=n_threads)
    if not failed(result) and rounding == "nearest":
        source = np.asarray(x)
        if source.dtype == np.float32:
            with np.errstate(invalid="ignore"):
                expected = source.astype(BF16).view(np.uint16)
            nan = np.isnan(source)
            assert np.array_equal(np.asarray(result).view(np.uint16)[~nan], expected[~nan])
    attempt(synet.round_to_bfloat16, x, rounding=rounding, out=out, n_threads=n_threads)
    back = attempt(synet.bfloat16_to_float32, x, out=out, n_threads=n_threads)
    if not failed(back):
        raw = np.asarray(x).view(np.uint16)
        assert np.array_equal(back.view(np.uint32), raw.astype(np.uint32) << 16)


@given(st.one_of(junk(), st.integers(-4, 4)))
def test_thread_settings(n):
    result = attempt(synet.set_num_threads, n)
    assert synet.get_num_threads() >= 1
    synet.set_num_threads(None)
    assert result is None or failed(result)
