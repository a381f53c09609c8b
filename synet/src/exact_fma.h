/* A correctly rounded float32 fma for every CPU level (standalone: tests/test_exact_fma.py compiles it). */
#ifndef SYNET_EXACT_FMA_H
#define SYNET_EXACT_FMA_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* fmaf(a, b, c), the same bits, without a libm call where the level has no FMA instructions (libm's
   fmaf there switches the rounding mode twice per call: Q5 at baseline 3.0 ms). The product a·b is exact
   in float64, so s = a·b + c rounded to float64 then to float32 is the correctly rounded result unless s
   is exactly halfway between two float32 values without being the exact sum (only then does the second
   rounding see a false tie), or the result is subnormal in float32 (its halfway points are elsewhere):
   those go to libm. (s is 0 only for an exact 0, with fmaf's sign.) */
static inline float synet_exact_fma(float a, float b, float c)
{
#if defined(__FMA__)
    return fmaf(a, b, c);
#else
    const double p = (double)a * (double)b, s = p + (double)c;
    uint64_t bits;
    memcpy(&bits, &s, 8);
    const int halfway = (bits & 0x1FFFFFFFu) == 0x10000000u && !(s - p == (double)c && s - (double)c == p);
    if (!halfway && (((bits >> 52) & 0x7FF) >= 0x3FF - 126 || s == 0.0))
        return (float)s;
    return fmaf(a, b, c);
#endif
}

#endif
