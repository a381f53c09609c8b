"""Build synet: Cython extension modules for the baseline CPU, C kernels once per CPU level.

Each kernel source in synet/src/ is compiled once for every level its op has (LEVELS, OP_LEVELS),
with that level's flags and its own symbol names; the extension modules pick a level at import
(synet/_kernels.pyx). A level the compiler cannot build is skipped with a warning. Non-x86 machines
build the baseline only.

Environment switches:
  SYNET_CPU_BASELINE=native  build for this CPU only: everything with -march=native, one level
  SYNET_DEBUG=1              bounds/wraparound checks on, -O1 -g (for sanitizer or debug builds)
  SYNET_EXTRA_CFLAGS         extra compiler flags (e.g. -fsanitize=address,undefined)
"""

import concurrent.futures
import glob
import os
import platform
import subprocess
import sys
import tempfile

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

DEBUG = os.environ.get("SYNET_DEBUG", "") not in ("", "0")
CPU_BASELINE = os.environ.get("SYNET_CPU_BASELINE", "").strip() or "default"
EXTRA_CFLAGS = os.environ.get("SYNET_EXTRA_CFLAGS", "").split()
X86_64 = platform.machine().lower() in ("x86_64", "amd64")
SRC = os.path.join("synet", "src")

if CPU_BASELINE not in ("default", "native"):
    sys.exit(f"synet: SYNET_CPU_BASELINE must be 'native' or unset, got {CPU_BASELINE!r}")

# CPU levels (SPEC section 8), lowest first: flags, and a probe the compiler must build for the level.
LEVELS = {
    "baseline": (["-march=x86-64-v2", "-mtune=generic"] if X86_64 else [], "int main(void) { return 0; }"),
    "avx2": (["-march=x86-64-v3", "-mtune=generic"],
             "#include <immintrin.h>\nint main(void) { return _mm256_cvtsi256_si32(_mm256_set1_epi32(1)) - 1; }"),
    "avx512": (["-march=x86-64-v4", "-mtune=generic", "-mprefer-vector-width=512"],
               "#include <immintrin.h>\n"
               "int main(void) { return _mm512_reduce_add_epi32(_mm512_set1_epi32(0)); }"),
    "avx512_bf16": (["-march=x86-64-v4", "-mavx512bf16", "-mavx512vnni", "-mtune=generic",
                     "-mprefer-vector-width=512"],
                    "#include <immintrin.h>\nint main(void) { __m512 a = _mm512_dpbf16_ps(_mm512_setzero_ps(),"
                    " (__m512bh)_mm512_setzero_si512(), (__m512bh)_mm512_setzero_si512());"
                    " return (int)_mm512_reduce_add_ps(a); }"),
    "amx": (["-march=x86-64-v4", "-mavx512bf16", "-mavx512vnni", "-mamx-tile", "-mamx-bf16", "-mtune=generic",
             "-mprefer-vector-width=512"],
            "#include <immintrin.h>\nint main(void) { _tile_release(); return 0; }"),
}
# The levels each kernel source is compiled for (above its last level it has nothing new to offer).
OP_LEVELS = {
    "bf16": ("baseline", "avx2", "avx512"),
    "gather": ("baseline", "avx2", "avx512"),
    "quantized_add": ("baseline", "avx2", "avx512"),
    "deconvolution": ("baseline", "avx2", "avx512", "avx512_bf16", "amx"),
    "peak": ("baseline", "avx2", "avx512", "avx512_bf16", "amx"),   # the bench's roofline
}
# Ops whose baseline (no FMA instructions) is compiled a second time with float64 products (SYNET_EXACT_PRODUCTS):
# the run takes that copy when a product could leave FP32's normal range, where the FMA levels' fused
# multiply-adds keep what a rounded product loses (docs/deconvolution.rst, "Numerics").
EXACT_PRODUCTS_OPS = ("deconvolution",)
# Each op's sources, compiled at every one of its levels (default: synet/src/<op>.c).
OP_SOURCES = {"deconvolution": ("deconvolution.c", "deconvolution_depthwise.c")}
# Extension module -> the kernel sources it links (cpu.c, level-independent, goes with _kernels).
MODULE_OPS = {"_kernels": ("bf16", "peak"), "_gather": ("gather",), "_quantized_add": ("quantized_add",),
              "_deconvolution": ("deconvolution",)}
HEADERS = sorted(glob.glob(os.path.join(SRC, "*.h")))

OPENMP_PROBE = r"""
#include <omp.h>
int main(void) {
    int n = 0;
    #pragma omp parallel reduction(+:n)
    n += 1;
    return n > 0 ? 0 : 1;
}
"""


def compiles(compiler, flags, source=OPENMP_PROBE):
    """Whether `compiler` compiles and links `source` with `flags`."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "probe.c")
        with open(path, "w") as f:
            f.write(source)
        cmd = [compiler, *flags, path, "-o", os.path.join(tmp, "probe")]
        return subprocess.run(cmd, capture_output=True).returncode == 0


def native_level(compiler):
    """The highest level -march=native implies (from the compiler's predefined macros)."""
    text = subprocess.run([compiler, "-march=native", "-dM", "-E", "-x", "c", os.devnull], capture_output=True,
                          text=True).stdout
    defined = {line.split()[1] for line in text.splitlines() if line.startswith("#define ")}
    level = "baseline"
    for name, macros in (("avx2", ("__AVX2__", "__FMA__")),
                         ("avx512", ("__AVX512F__", "__AVX512BW__", "__AVX512DQ__", "__AVX512VL__")),
                         ("avx512_bf16", ("__AVX512BF16__",)), ("amx", ("__AMX_TILE__", "__AMX_BF16__"))):
        if not all(m in defined for m in macros):
            break
        level = name
    return level


class SynetBuildExt(build_ext):
    """build_ext that compiles the per-level kernels, probes OpenMP and records what it built."""

    def finalize_options(self):
        super().finalize_options()
        if self.parallel is None:
            self.parallel = os.cpu_count() or 1  # one extension module per op: build them side by side

    def build_extensions(self):
        compiler = self.compiler.compiler_so[0]
        version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
        version = version.splitlines()[0] if version else compiler
        openmp = compiles(compiler, ["-fopenmp"])
        if not openmp:
            print("synet: WARNING OpenMP not found; building serial kernels", file=sys.stderr)
        optimise = ["-O1", "-g"] if DEBUG else ["-O3", "-g0"]
        common = ["-fvisibility=hidden", "-fno-semantic-interposition", *EXTRA_CFLAGS]
        levels = self.levels(compiler)
        module_arch = (["-march=native"] if CPU_BASELINE == "native" else levels.get("baseline", []))
        module_flags = [*optimise, *module_arch, *(["-fopenmp"] if openmp else []), "-fno-wrapv",
                        "-Wno-unreachable-code", *common]
        kernel_flags = [*optimise, "-ffp-contract=off", "-std=gnu11", "-Wall", *common]
        objects, built = self.compile_kernels(levels, kernel_flags)
        for ext in self.extensions:
            name = ext.name.split(".")[-1]
            ext.extra_compile_args = module_flags
            ext.extra_link_args = (["-fopenmp"] if openmp else []) + EXTRA_CFLAGS
            ext.extra_objects = [o for op in MODULE_OPS.get(name, ()) for o in objects[op]]
            if name == "_kernels":
                ext.extra_objects += objects["cpu"]
            ext.depends = HEADERS + ext.extra_objects  # a rebuilt kernel object relinks the module
        self.write_config(version, module_flags, openmp, built)
        super().build_extensions()

    def levels(self, compiler):
        """{level: flags} of the levels this build compiles (native: the one -march=native implies)."""
        if CPU_BASELINE == "native":
            return {native_level(compiler) if X86_64 else "baseline": ["-march=native"]}
        names = list(LEVELS) if X86_64 else ["baseline"]
        levels = {}
        for name in names:
            flags, probe = LEVELS[name]
            if compiles(compiler, flags, probe):
                levels[name] = flags
            else:
                print(f"synet: WARNING {compiler} cannot build the {name} level ({' '.join(flags)}); "
                      "skipping it", file=sys.stderr)
        if "baseline" not in levels:
            raise RuntimeError(f"synet: {compiler} cannot build the baseline level")
        return levels

    def compile_kernels(self, levels, flags):
        """({op: [object files]}, {op: [levels]}): every op source at each of its levels (in parallel), and cpu.c."""
        jobs, built = [], {}
        for op, op_levels in OP_LEVELS.items():
            present = [lvl for lvl in op_levels if lvl in levels]
            if CPU_BASELINE == "native":  # the op's own highest level up to the native one
                native = list(LEVELS).index(next(iter(levels)))
                present = [max((lvl for lvl in op_levels if list(LEVELS).index(lvl) <= native),
                               key=list(LEVELS).index)]
                level_flags = {present[0]: levels[next(iter(levels))]}
            else:
                level_flags = levels
            built[op] = present
            for level in present:
                variants = [(level, [])]
                if op in EXACT_PRODUCTS_OPS and level == "baseline":
                    variants.append(("baseline_exact", [("SYNET_EXACT_PRODUCTS", "1")]))
                for name, macros in variants:
                    for source in OP_SOURCES.get(op, (op + ".c",)):
                        jobs.append((op, os.path.join(SRC, source), name, level_flags[level], macros))
        base = levels.get("baseline", next(iter(levels.values())))
        jobs.append(("cpu", os.path.join(SRC, "cpu.c"), "baseline", base, []))

        def compile_one(job):
            op, source, name, level_flags, macros = job
            out = os.path.join(self.build_temp, "levels", name)
            return op, self.compiler.compile([source], output_dir=out, include_dirs=[SRC],
                                             macros=[("SYNET_LEVEL_SUFFIX", name), *macros],
                                             extra_postargs=[*flags, *level_flags], depends=HEADERS)
        objects = {op: [] for op in [*OP_LEVELS, "cpu"]}
        with concurrent.futures.ThreadPoolExecutor(max(1, self.parallel or 1)) as pool:
            for op, objs in pool.map(compile_one, jobs):
                objects[op] += objs
        return objects, built

    def write_config(self, compiler_version, cflags, openmp, built):
        text = (
            '"""What this build of synet was compiled with (generated by setup.py)."""\n'
            f"COMPILER = {compiler_version!r}\n"
            f"CFLAGS = {' '.join(cflags)!r}\n"
            f"OPENMP = {openmp!r}\n"
            f"CPU_BASELINE = {CPU_BASELINE!r}\n"
            f"LEVELS_BUILT = {built!r}\n"
            f"DEBUG = {DEBUG!r}\n"
            f"CYTHON_DIRECTIVES = {DIRECTIVES!r}\n"
        )
        targets = {os.path.join("synet", "_config.py")}
        if not self.inplace:
            targets.add(os.path.join(self.build_lib, "synet", "_config.py"))
        for target in targets:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "w") as f:
                f.write(text)


DIRECTIVES = {
    "language_level": 3,
    "boundscheck": DEBUG,
    "wraparound": DEBUG,
    "initializedcheck": DEBUG,
    "cdivision": True,
    "embedsignature": True,
    "auto_pickle": False,  # contexts pickle through __reduce__ (their init arguments and data), never implicitly
}

extensions = [
    Extension(
        "synet." + os.path.splitext(os.path.basename(path))[0],
        [path],
        include_dirs=[np.get_include(), SRC],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_2_0_API_VERSION")],
        depends=HEADERS,
    )
    for path in sorted(glob.glob(os.path.join("synet", "*.pyx")))
]
# the deconvolution planner, pure Python, compiled as it is, with Python's semantics (indexing, division;
# annotations are documentation, not C types): a new shape's plan in 0.7x the time. An in-place build's module
# shadows the .py: rebuild after editing it, as after editing a .pyx
extensions.append(cythonize(Extension("synet._deconvolution_plan", [os.path.join("synet", "_deconvolution_plan.py")]),
                            compiler_directives={"language_level": 3, "annotation_typing": False,
                                                 "embedsignature": True})[0])

setup(
    ext_modules=cythonize(extensions, compiler_directives=DIRECTIVES, nthreads=os.cpu_count() or 1),
    cmdclass={"build_ext": SynetBuildExt},
)
