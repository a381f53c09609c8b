"""synet_listed (synet/src/listed.h), how the kernels read SYNET_DISABLE_CPU_FEATURES: names in any case, spaces
around them ignored, whole names only. Compiled here on its own."""

import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "synet", "src")

DRIVER = r"""
#include <stdio.h>
#include "listed.h"

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; ++i)
        printf("%d", synet_listed(argv[i], "avx512vbmi"));
    printf("%d\n", synet_listed(NULL, "avx512vbmi"));
    return 0;
}
"""

CASES = {   # list -> whether it names avx512vbmi
    "avx512vbmi": 1, "AVX512VBMI": 1, "Avx512Vbmi": 1, " avx512vbmi ": 1, "avx2, avx512vbmi": 1,
    "avx512vbmi,avx2": 1, "\tavx512vbmi\t,x": 1, "x,,avx512vbmi": 1,
    "": 0, "avx512vbmi2": 0, "avx512vbm": 0, "xavx512vbmi": 0, "avx512 vbmi": 0, "avx2": 0, ",": 0,
}


@pytest.mark.skipif(shutil.which("gcc") is None and shutil.which("cc") is None, reason="needs a C compiler")
def test_listed_reads_names_as_the_other_variables_are_read(tmp_path):
    """"AVX512VBMI" and "avx2, avx512vbmi" were ignored without a word (the kernels compared bytes exactly)."""
    compiler = shutil.which("gcc") or shutil.which("cc")
    source, program = tmp_path / "listed.c", tmp_path / "listed"
    source.write_text(DRIVER)
    subprocess.run([compiler, "-std=gnu11", "-O2", "-Wall", "-Werror", f"-I{SRC}", str(source), "-o", str(program)],
                   check=True)
    out = subprocess.run([str(program), *CASES], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "".join(str(v) for v in CASES.values()) + "0"
