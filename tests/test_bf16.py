"""BF16 helpers against ml_dtypes and an exact float64 reference."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from reference import BF16, bf16_bits_by_search, bf16_round, off_its_element_size

import synet

LOW_HALVES = np.array([0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF], dtype=np.uint32)


def all_upper_halves_float32():
    """Every upper half (65,536) x the awkward lower halves: ties, just below/above, extremes."""
    upper = np.arange(1 << 16, dtype=np.uint32) << 16
    return (upper[:, None] | LOW_HALVES[None, :]).reshape(-1).view(np.float32)


def bits(a):
    return a.view(np.uint16)


@pytest.mark.filterwarnings("ignore:invalid value encountered in cast")
def test_nearest_matches_ml_dtypes_on_every_upper_half():
    x = all_upper_halves_float32()
    ours = bits(synet.float32_to_bfloat16(x))
    theirs = bits(x.astype(BF16))
    finite_or_inf = ~np.isnan(x)
    np.testing.assert_array_equal(ours[finite_or_inf], theirs[finite_or_inf])
    # NaN stays a NaN of the same sign (ml_dtypes' canonical quiet NaN, in fact)
    nan = np.isnan(x)
    assert np.isnan(ours.view(BF16)[nan].astype(np.float32)).all()
    np.testing.assert_array_equal(ours[nan] >> 15, (x.view(np.uint32)[nan] >> 31).astype(np.uint16))
    np.testing.assert_array_equal(ours[nan], theirs[nan])


@pytest.mark.filterwarnings("ignore:invalid value encountered in cast")
def test_nearest_matches_ml_dtypes_on_random_bits():
    raw = np.random.default_rng(7).integers(0, 2**32, 1 << 20, dtype=np.uint64).astype(np.uint32)
    x = raw.view(np.float32)
    np.testing.assert_array_equal(bits(synet.float32_to_bfloat16(x)), bits(x.astype(BF16)))


def test_nearest_overflow_subnormals_and_ties():
    cases = {
        np.float32(3.4028235e38): 0x7F80,          # FLT_MAX rounds up to inf
        np.float32(-3.4028235e38): 0xFF80,
        np.float32(np.inf): 0x7F80,
        np.float32(-np.inf): 0xFF80,
        np.uint32(0x3F808000).view(np.float32): 0x3F80,  # tie, even below
        np.uint32(0x3F818000).view(np.float32): 0x3F82,  # tie, even above
        np.uint32(0x00008000).view(np.float32): 0x0000,  # subnormal tie to even (0)
        np.uint32(0x00018000).view(np.float32): 0x0002,
        np.float32(-0.0): 0x8000,
    }
    x = np.array(list(cases), dtype=np.float32)
    np.testing.assert_array_equal(bits(synet.float32_to_bfloat16(x)), np.array(list(cases.values()), np.uint16))


def test_truncate_drops_low_bits_and_keeps_nan():
    x = all_upper_halves_float32()
    ours = bits(synet.float32_to_bfloat16(x, rounding="truncate"))
    expected = (x.view(np.uint32) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    np.testing.assert_array_equal(ours[~nan], expected[~nan])
    # a NaN keeps its sign and stays NaN even when its kept mantissa is zero
    back = ours.view(BF16).astype(np.float32)
    assert np.isnan(back[nan]).all()
    np.testing.assert_array_equal(ours[nan] >> 15, expected[nan] >> 15)
    kept_payload = nan & ((expected & 0x7F) != 0)
    np.testing.assert_array_equal(ours[kept_payload], expected[kept_payload])


def test_float64_is_rounded_once():
    # float32 rounding would make this an exact tie and round it down to 1.0 (double rounding)
    d = np.array([1 + 2**-8 + 2**-30, -(1 + 2**-8 + 2**-30)])
    np.testing.assert_array_equal(bits(synet.float32_to_bfloat16(d)), [0x3F81, 0xBF81])
    assert bits(d.astype(np.float32).astype(BF16))[0] == 0x3F80  # what rounding twice gives


@given(hnp.arrays(np.float64, st.integers(0, 64), elements=st.floats(allow_nan=True, allow_infinity=True)))
def test_float64_rounding_matches_exact_reference(d):
    np.testing.assert_array_equal(bits(synet.float32_to_bfloat16(d)), bf16_bits_by_search(d))


def test_float64_edges():
    d = np.array([2.0**-133, 2.0**-134, 3 * 2.0**-135, 2.0**-126 * (1 - 2**-9), 2.0**128, 3.3961e38, 1e300,
                  -1e300, 5e-324, np.inf, -np.inf])
    np.testing.assert_array_equal(bits(synet.float32_to_bfloat16(d)), bf16_bits_by_search(d))


def assert_references_agree(d):
    """tests/reference.py's vectorised bf16_round (used by the deconvolution tests) equals the search."""
    expected = bf16_bits_by_search(d).view(BF16).astype(np.float64)
    got = bf16_round(d)
    assert np.array_equal(got, expected, equal_nan=True) and np.array_equal(np.signbit(got), np.signbit(expected))


@given(hnp.arrays(np.float64, st.integers(0, 64), elements=st.floats(allow_nan=True, allow_infinity=True)))
def test_the_two_float64_references_agree(d):
    assert_references_agree(d)


def every_tie_float64():
    """Every tie between two positive bfloat16 values (subnormals included), their negatives, values just off
    the ties, and the extremes."""
    values = np.arange(0x7F80, dtype=np.uint16).view(BF16).astype(np.float64)     # +0 ... the largest finite
    ties = np.append((values[:-1] + values[1:]) / 2, values[-1] + (values[-1] - values[-2]) / 2)
    off = np.concatenate([np.nextafter(ties, 0), np.nextafter(ties, np.inf)])
    return np.concatenate([ties, -ties, off[::5], -off[2::5], [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, 1e300]])


def test_the_two_float64_references_agree_on_every_tie():
    assert_references_agree(every_tie_float64())


def test_float64_rounding_on_every_tie():
    d = every_tie_float64()
    np.testing.assert_array_equal(bits(synet.float32_to_bfloat16(d)), bf16_bits_by_search(d))


def test_float64_truncate_rounds_toward_zero():
    rng = np.random.default_rng(3)
    d = rng.standard_normal(10000) * 10.0 ** rng.integers(-40, 39, 10000)
    ours = synet.float32_to_bfloat16(d, rounding="truncate").astype(np.float64)
    assert (np.abs(ours) <= np.abs(d)).all()
    nearest_down = synet.round_to_bfloat16(d.astype(np.float32), rounding="truncate").astype(np.float64)
    step_up = np.nextafter(ours.astype(np.float32), np.copysign(np.inf, d).astype(np.float32))
    # the next bfloat16 away from zero is beyond d: ours is the largest magnitude not above |d|
    next_bf16 = synet.round_to_bfloat16(step_up.astype(np.float32), rounding="nearest")
    assert (np.abs(next_bf16.astype(np.float64)) > np.abs(d)).all() or np.array_equal(ours, nearest_down)
    np.testing.assert_array_equal(np.sign(ours[ours != 0]), np.sign(d[ours != 0]))
    assert bits(synet.float32_to_bfloat16(np.array([np.inf, -np.inf, 1e300]), rounding="truncate")).tolist() == [
        0x7F80, 0xFF80, 0x7F7F]


def test_bfloat16_to_float32_is_exact_for_every_pattern():
    raw = np.arange(1 << 16, dtype=np.uint16)
    expected = (raw.astype(np.uint32) << 16).view(np.float32)
    out = synet.bfloat16_to_float32(raw)
    np.testing.assert_array_equal(out.view(np.uint32), expected.view(np.uint32))
    np.testing.assert_array_equal(synet.bfloat16_to_float32(raw.view(BF16)).view(np.uint32), expected.view(np.uint32))
    assert out.dtype == np.float32


def test_round_to_bfloat16_is_the_round_trip():
    x = all_upper_halves_float32()
    for rounding in ("nearest", "truncate"):
        rounded = synet.round_to_bfloat16(x, rounding=rounding)
        back = synet.bfloat16_to_float32(synet.float32_to_bfloat16(x, rounding=rounding))
        np.testing.assert_array_equal(rounded.view(np.uint32), back.view(np.uint32))
        assert rounded.dtype == np.float32


def test_shapes_out_and_raw_bits():
    x = np.random.default_rng(0).standard_normal((3, 4, 5)).astype(np.float32)
    result = synet.float32_to_bfloat16(x)
    assert result.shape == x.shape and result.dtype == BF16
    out = np.empty((3, 4, 5), np.uint16)
    assert synet.float32_to_bfloat16(x, out=out) is out
    np.testing.assert_array_equal(out, bits(x.astype(BF16)))
    # non-contiguous input, 0-d and empty
    np.testing.assert_array_equal(bits(synet.float32_to_bfloat16(x[:, ::2].T)), bits(x[:, ::2].T.astype(BF16)))
    assert synet.float32_to_bfloat16(np.float32(1.5)).shape == ()
    assert synet.float32_to_bfloat16(np.empty((0, 3), np.float32)).shape == (0, 3)
    assert synet.bfloat16_to_float32(np.empty(0, BF16)).shape == (0,)
    # python lists and ints are float64, rounded once
    np.testing.assert_array_equal(bits(synet.float32_to_bfloat16([1, 2.5, 257])), [0x3F80, 0x4020, 0x4380])


@pytest.mark.parametrize("n", [1, 31, 1 << 15, (1 << 17) + 3])
def test_thread_count_does_not_change_bits(n):
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32) * 1e3
    one = synet.float32_to_bfloat16(x, n_threads=1)
    two = synet.float32_to_bfloat16(x, n_threads=2)
    np.testing.assert_array_equal(bits(one), bits(two))
    np.testing.assert_array_equal(synet.bfloat16_to_float32(one, n_threads=1),
                                  synet.bfloat16_to_float32(one, n_threads=2))


@pytest.mark.skipif(np.dtype(np.longdouble).itemsize <= 8, reason="long double is float64 here")
def test_long_double_is_refused_not_rounded_twice():
    """float64 would round a long double first: 1 + 2**-8 + 2**-60 gave bfloat16 1.0 (the value lies above the
    midpoint of 1 and 1.0078125)."""
    for convert in (synet.float32_to_bfloat16, synet.round_to_bfloat16):
        with pytest.raises(ValueError, match=r"x: expected real numbers \(float32, float64, float16, integers\), "
                                             r"got dtype float128"):
            convert(np.array([1 + 2**-8 + 2**-60], np.longdouble))


@pytest.mark.parametrize("rounding", ["nearest", "truncate"])
def test_byte_swapped_float32_is_float32(rounding):
    """A >f4 array gives the bits its values give as native float32, NaN payloads included (truncate keeps a
    signalling NaN's high payload bits; through float64 it came back quiet: 0x7fc1 for 0x7f81)."""
    raw = np.array([0x7F810000, 0xFF810001, 0x7FA00000, 0x3F808000, 0x3F818000, 0x00000001, 0x7F7FFFFF],
                   np.uint32)
    native = raw.view(np.float32)
    swapped = native.astype(">f4")
    expected = bits(synet.float32_to_bfloat16(native, rounding=rounding))
    np.testing.assert_array_equal(bits(synet.float32_to_bfloat16(swapped, rounding=rounding)), expected)
    np.testing.assert_array_equal(synet.round_to_bfloat16(swapped, rounding=rounding).view(np.uint32),
                                  expected.astype(np.uint32) << 16)
    if rounding == "truncate":
        assert list(expected[:2]) == [0x7F81, 0xFF81]


def test_errors_name_the_parameter():
    x = np.ones(4, np.float32)
    with pytest.raises(ValueError, match="rounding"):
        synet.float32_to_bfloat16(x, rounding="up")
    with pytest.raises(ValueError, match="x: expected real numbers"):
        synet.float32_to_bfloat16(np.ones(3, np.complex64))
    with pytest.raises(ValueError, match="x: expected bfloat16"):
        synet.bfloat16_to_float32(x)
    with pytest.raises(ValueError, match="out: expected shape"):
        synet.float32_to_bfloat16(x, out=np.empty(5, BF16))
    for convert, source, dtype in ((synet.float32_to_bfloat16, x, BF16), (synet.round_to_bfloat16, x, np.float32),
                                   (synet.bfloat16_to_float32, x.astype(BF16), np.float32)):
        with pytest.raises(ValueError, match=r"out: expected shape \(4,\), got \(2, 2\)"):   # as many elements
            convert(source, out=np.empty((2, 2), dtype))
        with pytest.raises(ValueError, match="out: expected a writeable C-contiguous"):
            convert(source, out=np.empty(8, dtype)[::2])
    with pytest.raises(ValueError, match="out: expected dtype"):
        synet.float32_to_bfloat16(x, out=np.empty(4, np.float32))
    with pytest.raises(ValueError, match="out: expected a writeable"):
        ro = np.empty(4, BF16)
        ro.flags.writeable = False
        synet.float32_to_bfloat16(x, out=ro)
    with pytest.raises(TypeError, match="out: expected a numpy.ndarray"):
        synet.round_to_bfloat16(x, out=[0.0] * 4)
    with pytest.raises(ValueError, match="out: expected dtype"):
        synet.bfloat16_to_float32(x.astype(BF16), out=np.empty(4, np.float64))
    with pytest.raises(ValueError, match="n_threads"):
        synet.float32_to_bfloat16(x, n_threads=0)
    with pytest.raises(TypeError, match="n_threads"):
        synet.float32_to_bfloat16(x, n_threads=1.5)


@pytest.mark.filterwarnings("ignore:invalid value encountered in cast")
@pytest.mark.parametrize("offset", [0, 1, 3])
def test_large_arrays_stream_through_misaligned_outputs(offset):
    """Outputs of 4 MiB+ take the streaming path; its head/middle/tail split must not show."""
    n = (4 << 20) + 37
    x = np.random.default_rng(offset).integers(0, 2**32, n + offset, dtype=np.uint64).astype(np.uint32)
    x = x.view(np.float32)[offset:]
    out = np.empty(n + 8, np.uint16)[offset:offset + n]
    result = synet.float32_to_bfloat16(x, out=out)
    np.testing.assert_array_equal(result, bits(x.astype(BF16)))
    truncated = bits(synet.float32_to_bfloat16(x, rounding="truncate"))
    expected = (x.view(np.uint32) >> 16).astype(np.uint16)
    expected[np.isnan(x) & ((expected & 0x7F) == 0)] |= 0x40
    np.testing.assert_array_equal(truncated, expected)
    wide = synet.bfloat16_to_float32(result, out=np.empty(n + 8, np.float32)[offset:offset + n])
    np.testing.assert_array_equal(wide.view(np.uint32), result.astype(np.uint32) << 16)


@pytest.mark.parametrize("kind", ["uint16", "bfloat16"])
def test_large_outputs_at_an_odd_address(kind):
    """An `out` off its element size never reaches the streaming stores' 64-byte alignment: the streaming paths
    (4 MiB+ for float32 -> bfloat16, 32 MiB+ for bfloat16 -> float32) crashed on one (segfault); it is stored
    plainly now, with the same bits (through aligned copies: C stores whole elements, and UBSan holds a store at
    an odd address to be undefined)."""
    n = (8 << 20) + 37
    x = np.random.default_rng(4).standard_normal(n).astype(np.float32)
    expected = bits(x.astype(BF16))
    out = off_its_element_size(n, np.uint16 if kind == "uint16" else BF16)
    assert synet.float32_to_bfloat16(x, out=out) is out
    np.testing.assert_array_equal(bits(out), expected)
    truncated = synet.float32_to_bfloat16(x, rounding="truncate", out=off_its_element_size(n, np.uint16))
    np.testing.assert_array_equal(bits(truncated), (x.view(np.uint32) >> 16).astype(np.uint16))
    wide = off_its_element_size(n, np.float32)
    assert wide.nbytes >= 32 << 20
    np.testing.assert_array_equal(synet.bfloat16_to_float32(expected, out=wide).view(np.uint32),
                                  expected.astype(np.uint32) << 16)
    np.testing.assert_array_equal(synet.round_to_bfloat16(x, out=wide).view(np.uint32),
                                  expected.astype(np.uint32) << 16)
    odd_x, odd_bits = off_its_element_size(n, np.float32), off_its_element_size(n, np.uint16)   # inputs too
    odd_x[:], odd_bits[:] = x, expected
    np.testing.assert_array_equal(bits(synet.float32_to_bfloat16(odd_x)), expected)
    np.testing.assert_array_equal(synet.bfloat16_to_float32(odd_bits).view(np.uint32), expected.astype(np.uint32) << 16)


@pytest.mark.parametrize("offset", [0, 1, 3])
def test_widening_streams_into_large_given_outputs(offset):
    """bfloat16 -> float32 streams past the caches only into a caller's `out` of 32 MiB+ (a fresh result is
    stored plainly): both give the same bits, head / middle / tail of a misaligned `out` included."""
    n = (8 << 20) + 37
    raw = np.random.default_rng(offset).integers(0, 2**16, n + offset, dtype=np.uint16)[offset:]
    expected = raw.astype(np.uint32) << 16
    out = np.empty(n + 8, np.float32)[offset:offset + n]
    assert out.nbytes >= 32 << 20
    np.testing.assert_array_equal(synet.bfloat16_to_float32(raw, out=out).view(np.uint32), expected)
    np.testing.assert_array_equal(synet.bfloat16_to_float32(raw, n_threads=2).view(np.uint32), expected)


def test_pooled_outputs_are_independent_arrays():
    x = np.random.default_rng(11).standard_normal(1 << 23).astype(np.float32)  # 16 MiB of bf16
    first = synet.float32_to_bfloat16(x)
    second = synet.float32_to_bfloat16(-x)
    assert not np.shares_memory(first, second)
    np.testing.assert_array_equal(bits(first), bits(x.astype(BF16)))
    del first
    third = synet.float32_to_bfloat16(x * 2)  # may reuse the first's memory
    np.testing.assert_array_equal(bits(second), bits((-x).astype(BF16)))
    np.testing.assert_array_equal(bits(third), bits((x * 2).astype(BF16)))
    assert third.flags.writeable and third.flags.c_contiguous


@pytest.mark.parametrize("axes", [(1, 0), (2, 0, 1), (1, 2, 0), (2, 1, 0)])
def test_transposed_inputs_keep_their_layout(axes):
    """A transposed or Fortran-ordered input is converted where it lies and gives a result laid out alike, as
    NumPy's astype does (no copy to C order first); an `out` laid out alike is written in place, one in C order
    gets the same values; a strided input is copied once and gives C order."""
    rng = np.random.default_rng(len(axes) * 10 + axes[0])
    shape = (6, 40, 24)[:len(axes)]
    x = (rng.standard_normal(shape) * 100).astype(np.float32).transpose(axes)
    h = x.astype(BF16)   # astype keeps x's layout
    assert not x.flags.c_contiguous and not h.flags.c_contiguous
    cases = ((synet.float32_to_bfloat16, x, h), (synet.round_to_bfloat16, x, h.astype(np.float32)),
             (synet.bfloat16_to_float32, h, h.astype(np.float32)),
             (synet.bfloat16_to_float32, h.view(np.uint16), h.astype(np.float32)))
    for convert, source, expected in cases:
        result = convert(source)
        assert result.strides == expected.strides, convert.__name__
        np.testing.assert_array_equal(np.ascontiguousarray(result).view(np.uint8),
                                      np.ascontiguousarray(expected).view(np.uint8))
        for out in (np.empty_like(expected), np.empty(expected.shape, expected.dtype)):   # x's layout, C order
            assert convert(source, out=out) is out
            np.testing.assert_array_equal(np.ascontiguousarray(out).view(np.uint8),
                                          np.ascontiguousarray(expected).view(np.uint8))
    strided = x[..., ::2]
    result = synet.float32_to_bfloat16(strided)
    assert result.flags.c_contiguous
    np.testing.assert_array_equal(bits(result), bits(strided.astype(BF16)))
    wide = synet.bfloat16_to_float32(h[..., ::2])
    assert wide.flags.c_contiguous
    np.testing.assert_array_equal(wide, h[..., ::2].astype(np.float32))


def test_float64_nans_of_every_payload_stay_quiet_nans_of_their_sign():
    """A float64 NaN rounds to the quiet bfloat16 NaN of its sign (0x7FC0 / 0xFFC0) whatever its payload: one
    whose payload sits in the low bits must not round up into infinity, nor a signalling one stay signalling."""
    payloads = np.array([1, 2, (1 << 44) - 1, 1 << 44, 1 << 45, (1 << 51) - 1, 1 << 51, (1 << 52) - 1], np.uint64)
    nans = np.concatenate([0x7FF0000000000000 | payloads, 0xFFF0000000000000 | payloads]).view(np.float64)
    assert np.isnan(nans).all()
    expected = [0x7FC0] * len(payloads) + [0xFFC0] * len(payloads)
    for wide in (False, True):   # bfloat16 bits, and the float32 of round_to_bfloat16
        got = synet.round_to_bfloat16(nans).view(np.uint32) >> 16 if wide else bits(synet.float32_to_bfloat16(nans))
        assert got.tolist() == expected
