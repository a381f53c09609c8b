# cython: language_level=3
"""BF16 conversions as inline C functions: the helpers every synet kernel uses.

Downstream extensions ``cimport synet.bf16`` and compile these in; they are pure
functions of their arguments (noexcept nogil), bit-identical to ml_dtypes on every
non-NaN float32, with NaN kept as a quiet NaN of the same sign.
"""

from libc.stdint cimport uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy
from libc.math cimport rint, fabs, signbit, isnan, isinf, nextafterf

cdef inline uint32_t float32_bits(float value) noexcept nogil:
    """The IEEE-754 bits of a float32."""
    cdef uint32_t bits
    memcpy(&bits, &value, 4)
    return bits

cdef inline float float32_from_bits(uint32_t bits) noexcept nogil:
    """The float32 whose IEEE-754 bits are `bits`."""
    cdef float value
    memcpy(&value, &bits, 4)
    return value

cdef inline uint16_t bf16_nearest_from_bits(uint32_t bits) noexcept nogil:
    """float32 bits -> bfloat16 bits, round to nearest, ties to even.

    bf16 = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16; NaN -> 0x7FC0 | sign.
    Overflow rounds to +-inf, as IEEE-754 requires.
    """
    if (bits & 0x7FFFFFFF) > 0x7F800000:
        return <uint16_t>(((bits >> 16) & 0x8000) | 0x7FC0)
    return <uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16)

cdef inline uint16_t bf16_truncate_from_bits(uint32_t bits) noexcept nogil:
    """float32 bits -> bfloat16 bits by dropping the low 16 bits.

    A NaN whose kept mantissa would be zero (which would read as inf) becomes quiet.
    """
    cdef uint16_t high = <uint16_t>(bits >> 16)
    if (bits & 0x7FFFFFFF) > 0x7F800000 and (high & 0x7F) == 0:
        return high | 0x0040
    return high

cdef inline uint16_t float32_to_bf16(float value) noexcept nogil:
    """float32 -> bfloat16 bits, nearest-even."""
    return bf16_nearest_from_bits(float32_bits(value))

cdef inline float bf16_to_float32(uint16_t value) noexcept nogil:
    """bfloat16 bits -> float32 (exact)."""
    return float32_from_bits((<uint32_t>value) << 16)

cdef inline float round_float32_to_bf16(float value) noexcept nogil:
    """The float32 nearest to `value` that bfloat16 holds exactly (ties to even)."""
    return bf16_to_float32(float32_to_bf16(value))

cdef inline uint16_t bf16_nearest_from_float64(double value) noexcept nogil:
    """float64 -> bfloat16 bits rounded once, nearest-even (no double rounding via float32).

    Normal results: round the 52-bit mantissa to 7 bits on the float64 bits, then the
    rounded value converts to float32 exactly (or overflows to inf). Subnormal results
    (|x| < 2**-126) are multiples of 2**-133: rint(x * 2**133) * 2**-133.
    """
    cdef uint64_t bits, rounded
    cdef double magnitude = fabs(value)
    if isnan(value):
        return 0xFFC0 if signbit(value) else 0x7FC0
    if magnitude < 1.1754943508222875e-38:  # 2**-126
        return float32_to_bf16(<float>(rint(value * 1.0889035741470031e+40) * 9.183549615799121e-41))
    memcpy(&bits, &value, 8)
    rounded = (bits + ((<uint64_t>1 << 44) - 1) + ((bits >> 45) & 1)) & ~((<uint64_t>1 << 45) - 1)
    memcpy(&value, &rounded, 8)
    if fabs(value) >= 3.402823669209385e+38:  # 2**128: beyond bfloat16's (and float32's) range
        return 0xFF80 if signbit(value) else 0x7F80
    return float32_to_bf16(<float>value)

cdef inline uint16_t bf16_truncate_from_float64(double value) noexcept nogil:
    """float64 -> bfloat16 bits rounded toward zero, directly from float64.

    The float32 toward zero of `value` (nearest, stepped back when it rounded away from
    zero) truncates to the bfloat16 toward zero of `value`; inf and NaN pass through.
    """
    cdef float narrowed
    if isnan(value) or isinf(value):
        narrowed = <float>value
    elif fabs(value) > 3.4028234663852886e+38:  # FLT_MAX
        narrowed = 3.4028234663852886e+38 if value > 0 else -3.4028234663852886e+38
    else:
        narrowed = <float>value
        if fabs(<double>narrowed) > fabs(value):
            narrowed = nextafterf(narrowed, 0.0)
    return bf16_truncate_from_bits(float32_bits(narrowed))
