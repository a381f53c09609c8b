"""synet_exact_fma (synet/src/exact_fma.h), the quantized add's fma on CPUs without FMA instructions:
the bits of libm's fmaf on cases where rounding the float64 sum to float32 is wrong (a false tie), on
subnormal results and on millions of random and quantisation-like triples. Compiled here for x86-64-v2."""

import os
import platform
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "synet", "src")

DRIVER = r"""
#include <stdio.h>
#include "exact_fma.h"

static uint32_t bits_of(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static float float_of(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }
static uint64_t state = 88172645463325252ull;
static uint32_t next(void) { state ^= state << 13; state ^= state >> 7; state ^= state << 17; return (uint32_t)state; }

int main(void)
{
    /* (1 + 2^-18) * 2^-24 (1 - 2^-18) + (1 + 2^-23): the float64 sum rounds onto a float32 tie that the
       exact sum lies below (and its negation); 2^-127 + 2^-150 (131231 - 2^-30) (a product of two 24-bit
       integers), a subnormal result whose float64 sum rounds onto a tie of subnormals; an exact tie */
    const float cases[][3] = {{1.0f + 0x1p-18f, 0x1p-24f * (1.0f - 0x1p-18f), 1.0f + 0x1p-23f},
                              {1.0f + 0x1p-18f, -0x1p-24f * (1.0f - 0x1p-18f), -1.0f - 0x1p-23f},
                              {8410501.0f * 0x1p-90f, 16753843.0f * 0x1p-90f, 0x1p-127f},
                              {1.5f, 0x1p-24f, 1.0f}};
    long differ = 0, naive = 0;
    for (int i = 0; i < 4; ++i) {
        const float a = cases[i][0], b = cases[i][1], c = cases[i][2];
        differ += bits_of(synet_exact_fma(a, b, c)) != bits_of(fmaf(a, b, c));
        naive += bits_of((float)((double)a * b + c)) != bits_of(fmaf(a, b, c));
    }
    for (long i = 0; i < 4000000; ++i) {
        float a, b, c;
        switch (i % 4) {
        case 0: a = float_of(next()); b = float_of(next()); c = float_of(next()); break;
        case 1: /* short products added to floats near 1: float64 ties */
            a = 1.0f + (float)(next() % 4096) / 4096.0f;
            b = ldexpf((float)(int)(next() % 65536), -(int)(next() % 60)) * (next() & 1 ? 1.0f : -1.0f);
            c = float_of((next() & 0x807FFFFFu) | 0x3F800000u); break;
        case 2: /* dequantisation and quantisation: a byte difference times a scale, plus a zero point */
            a = (float)((int)(next() % 511) - 255); b = float_of((next() & 0x007FFFFFu) | ((100u + next() % 40) << 23));
            c = (float)(int)(next() % 256) + 0.5f * (float)(next() & 1); break;
        default: /* tiny: subnormal results */
            a = float_of(next() & 0x0FFFFFFFu); b = float_of(next() & 0x0FFFFFFFu); c = float_of(next() & 0x80FFFFFFu);
        }
        const float e = synet_exact_fma(a, b, c), f = fmaf(a, b, c);
        differ += bits_of(e) != bits_of(f) && !(e != e && f != f);
    }
    printf("%ld %ld\n", differ, naive);
    return 0;
}
"""


@pytest.mark.skipif(shutil.which("gcc") is None or platform.machine() not in ("x86_64", "AMD64"),
                    reason="needs gcc on x86-64")
@pytest.mark.parametrize("march", ["x86-64-v2", "x86-64-v3"])
def test_exact_fma_gives_fmaf_bits(tmp_path, march):
    source, program = tmp_path / "driver.c", tmp_path / "driver"
    source.write_text(DRIVER)
    subprocess.run(["gcc", "-O2", f"-march={march}", "-I", SRC, str(source), "-o", str(program), "-lm"], check=True)
    differ, naive = map(int, subprocess.run([str(program)], capture_output=True, text=True,
                                            check=True).stdout.split())
    assert differ == 0
    assert naive == 3   # the first three cases are ones where the plain float64 sum is wrong
