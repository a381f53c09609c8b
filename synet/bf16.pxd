# cython: language_level=3
"""BF16 conversions as inline C functions: the helpers every synet kernel uses (``cimport synet.bf16``).

They are synet's own C definitions (synet/src/common.h, the one BF16 rounding of the package),
compiled into the downstream extension: add ``synet.get_include()`` to its include path. Pure
functions of their arguments (noexcept nogil), bit-identical to ml_dtypes on every non-NaN
float32, with NaN kept as a quiet NaN of the same sign.
"""

from libc.stdint cimport uint16_t, uint32_t

cdef extern from "src/common.h" nogil:
    uint32_t float32_bits "synet_f32_bits"(float value)
        # the IEEE-754 bits of a float32
    float float32_from_bits "synet_f32_from_bits"(uint32_t bits)
        # the float32 whose IEEE-754 bits are `bits`
    uint16_t bf16_nearest_from_bits "synet_bf16_nearest"(uint32_t bits)
        # float32 bits -> bfloat16 bits, nearest-even: (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16;
        # NaN -> 0x7FC0 | sign; overflow rounds to +-inf
    uint16_t bf16_truncate_from_bits "synet_bf16_truncate"(uint32_t bits)
        # float32 bits -> bfloat16 bits by dropping the low 16 bits (a NaN stays a NaN)
    uint16_t float32_to_bf16 "synet_bf16_from_float"(float value)
        # float32 -> bfloat16 bits, nearest-even
    float bf16_to_float32 "synet_bf16_to_float"(uint16_t value)
        # bfloat16 bits -> float32 (exact)
    float round_float32_to_bf16 "synet_bf16_round_float"(float value)
        # the float32 nearest to `value` that bfloat16 holds exactly (ties to even)
    uint16_t bf16_nearest_from_float64 "synet_bf16_nearest_f64"(double value)
        # float64 -> bfloat16 bits rounded once, nearest-even (no double rounding through float32)
    uint16_t bf16_truncate_from_float64 "synet_bf16_truncate_f64"(double value)
        # float64 -> bfloat16 bits toward zero
