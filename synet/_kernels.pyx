"""synet's runtime core: CPU dispatch, the OpenMP thread policy and the BF16 array helpers.

Dispatch: at import, CPUID + XGETBV give the CPU's best level (``LEVELS``), ``SYNET_MAX_ISA`` may
cap it, and every op runs the kernels of the highest level compiled for it up to that one
(synet/src/*.h: a table of functions per op and level). AMX needs Linux's permission for the tile
state: asked the first time an AMX kernel is planned, never at import; refused, the next level runs.
Deconvolutions that do not run on AMX use the AVX512-BF16 dot products only where they outpace the FP32
FMAs (``synet_cpu_bf16_dot_fast``: AMD's, not Intel's), or as ``SYNET_BF16_DOT`` says; GatherElements
loads elements by AVX-512's vpgather only where it outpaces scalar loads
(``synet_cpu_vector_gather_fast``: Intel's without the Downfall microcode, not AMD's), or as
``SYNET_VECTOR_GATHER`` says.
"""

import os
import warnings

import numpy as np

cimport numpy as cnp
from cython.parallel cimport prange
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy

from synet._fastpath cimport is_output, new_array, overlaps, same_shape
from libc.stdint cimport int32_t, int64_t

from synet._csrc cimport (
    SYNET_LEVEL_AMX, SYNET_LEVEL_AVX512, SYNET_LEVEL_AVX512_BF16, SYNET_MAX_THREADS, synet_amx_permission,
    synet_bf16_kernels, synet_bf16_kernels_at, synet_cpu_bf16_dot_fast, synet_cpu_level, synet_cpu_vector_gather_fast,
    synet_peak_kernels, synet_peak_kernels_at,
)

from ._arrays import (
    UINT16, as_array, check_n_threads, check_out, memory_order, native, require_array, run_in_memory_order)
from ._types import BFLOAT16

cnp.import_array()

cdef extern from "threads.h":
    const int SYNET_OPENMP
    void omp_set_num_threads(int n) noexcept nogil
    int synet_install_fork_handler() noexcept nogil
    int synet_default_threads(int cap) noexcept nogil
    int synet_openmp_cpus() noexcept nogil

OPENMP = bool(SYNET_OPENMP)
if synet_install_fork_handler() != 0:   # (pthread_atfork fails only without memory)
    raise MemoryError("synet: cannot install its fork handler")

# ---------------------------------------------------------------------------------------------
# CPU dispatch

LEVELS = ("baseline", "avx2", "avx512", "avx512_bf16", "amx")


def _max_isa():
    """SYNET_MAX_ISA as a level index (unset: no cap); an unknown name warns and caps nothing."""
    value = os.environ.get("SYNET_MAX_ISA", "").strip().lower()
    if not value:
        return len(LEVELS) - 1
    if value in LEVELS:
        return LEVELS.index(value)
    warnings.warn(f"SYNET_MAX_ISA={value!r} is not a CPU level; expected one of {', '.join(LEVELS)} "
                  f"(ignored)", RuntimeWarning, stacklevel=2)
    return len(LEVELS) - 1


def _kernel_choice(str variable, bint available, faster_here):
    """A choice between two kernels that give the same results, made at import: never where the level lacks
    the instructions (`available`); else as the environment variable says ("1": yes, "0": no; another value
    warns and is ignored), else whether they are the faster ones on this CPU (`faster_here()`)."""
    if not available:
        return False
    value = os.environ.get(variable, "").strip()
    if value in ("0", "1"):
        return value == "1"
    if value:
        warnings.warn(f"{variable}={value!r}: expected 1 or 0 (ignored)", RuntimeWarning, stacklevel=2)
    return bool(faster_here())


DISABLE_CPU_FEATURES = ("avx512vbmi",)   # what SYNET_DISABLE_CPU_FEATURES may name (read by the kernels' C)


def _check_disabled_features():
    """Warns about names in SYNET_DISABLE_CPU_FEATURES (comma-separated, any case) that nothing reads."""
    names = [name.strip().lower() for name in os.environ.get("SYNET_DISABLE_CPU_FEATURES", "").split(",")]
    unknown = [name for name in names if name and name not in DISABLE_CPU_FEATURES]
    if unknown:
        warnings.warn(f"SYNET_DISABLE_CPU_FEATURES: {', '.join(map(repr, unknown))} ignored; expected some of "
                      f"{', '.join(DISABLE_CPU_FEATURES)}", RuntimeWarning, stacklevel=2)


_check_disabled_features()
cdef int _SUPPORTED = synet_cpu_level()
cdef int _CAP = _max_isa()
cdef int _LEVEL = min(_SUPPORTED, _CAP)
cdef int _AMX = -1   # -1: not asked yet; 0 / 1: Linux's answer
# deconvolutions off AMX on the vdpbf16ps micro-kernel (the FP32 one sums in the same order: the same bits but
# for the hardware's subnormal flushing)
cdef bint _BF16_DOT = _kernel_choice("SYNET_BF16_DOT", _LEVEL >= SYNET_LEVEL_AVX512_BF16,
                                     lambda: synet_cpu_bf16_dot_fast())
# GatherElements' 4- and 8-byte elements by vpgather (exact either way)
cdef bint _VECTOR_GATHER = _kernel_choice("SYNET_VECTOR_GATHER", _LEVEL >= SYNET_LEVEL_AVX512,
                                          lambda: synet_cpu_vector_gather_fast())


cdef int kernel_level() noexcept nogil:
    return _LEVEL


cdef int amx_ready() noexcept nogil:
    global _AMX
    if _LEVEL < SYNET_LEVEL_AMX:
        return 0
    if _AMX < 0:
        _AMX = synet_amx_permission()
    return _AMX


cdef bint bf16_dot_preferred() noexcept nogil:
    return _BF16_DOT


cdef bint vector_gather_preferred() noexcept nogil:
    return _VECTOR_GATHER


def dispatch():
    """The levels: compiled per op, supported by this CPU, the cap of SYNET_MAX_ISA, and chosen."""
    from . import _config

    chosen = LEVELS[_LEVEL]
    if _LEVEL == SYNET_LEVEL_AMX and _AMX == 0:
        chosen = LEVELS[SYNET_LEVEL_AVX512_BF16] + " (AMX refused by the OS)"
    return {
        "compiled": dict(_config.LEVELS_BUILT),
        "supported": LEVELS[_SUPPORTED],
        "cap": LEVELS[_CAP],
        "chosen": chosen,
    }


# ---------------------------------------------------------------------------------------------
# Threads


def available_cpus():
    """The number of CPUs this process may run on (OpenMP's count, else the OS's affinity mask)."""
    cdef int cpus = synet_openmp_cpus()
    if cpus > 0:
        return cpus
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _normalise_threads(n, str name):
    check_n_threads(n, name)
    n = int(n)
    if n == 0:
        raise ValueError(f"{name}: expected a non-zero int (negative counts from the CPU count), got 0")
    if n < 0:
        cpus = available_cpus()
        if cpus + n + 1 < 1:
            raise ValueError(f"{name}: {n} leaves no thread of the {cpus} CPUs available")
        n = cpus + n + 1
    return n if OPENMP else 1


cdef int _INITIAL_THREADS = synet_default_threads(SYNET_MAX_THREADS)


def set_num_threads(n):
    """Set OpenMP's thread count for synet's kernels: n > 0, or n < 0 for (CPUs + 1 + n); None
    restores the count the importing thread had at import (OMP_NUM_THREADS, else the CPUs; a threadpoolctl
    limit in force at import included).

    This is OpenMP's own setting (``omp_set_num_threads``) of the calling thread, as PyTorch's is:
    a ``threadpoolctl.threadpool_limits`` scope entered later limits it inside the scope and
    restores it on exit. An explicit ``n_threads=`` argument of a call wins over both.
    """
    omp_set_num_threads(_INITIAL_THREADS if n is None else _normalise_threads(n, "n"))


def get_num_threads():
    """The threads synet's kernels use when a call does not say (``n_threads=None``): OpenMP's
    current count (OMP_NUM_THREADS, threadpoolctl's limits, set_num_threads, else the CPUs), within
    OMP_THREAD_LIMIT and at most 1024."""
    return synet_default_threads(SYNET_MAX_THREADS)


cdef int call_threads(object n_threads) except -1:
    if n_threads is None:
        return synet_default_threads(SYNET_MAX_THREADS)
    if type(n_threads) is int and 0 < n_threads <= SYNET_MAX_THREADS:   # the common case, quickly
        return <int>n_threads if SYNET_OPENMP else 1
    return _normalise_threads(n_threads, "n_threads")


def resolve_num_threads(n_threads=None):
    """The thread count for one call: `n_threads` if given (negatives count back), else the default."""
    return call_threads(n_threads)


# ---------------------------------------------------------------------------------------------
# BF16 array helpers

cdef const synet_bf16_kernels* _BF16 = synet_bf16_kernels_at(_LEVEL)
BF16_LEVEL = _BF16.level.decode()

_FLOAT32 = np.dtype(np.float32)

cdef enum:
    BLOCK = 1 << 15          # elements per parallel block; below 4 blocks a conversion runs serially
    STREAM_MIN = 4 << 20     # output bytes from which float32 -> bfloat16 stores bypass the caches
    WIDEN_STREAM_MIN = 32 << 20   # the same for bfloat16 -> float32 into a caller's `out`
    NOGIL_MIN = 1 << 13      # elements from which a conversion releases the GIL (below, that costs more)


cdef void bf16_round_array(const uint32_t* src, char* dst, Py_ssize_t n, int itemsize, bint truncate,
                           int threads) noexcept nogil:
    """dst = bf16(src) as bfloat16 bits (itemsize 2) or float32 bits of the rounded value (4)."""
    cdef Py_ssize_t block, start
    cdef Py_ssize_t blocks = (n + BLOCK - 1) // BLOCK
    cdef bint stream = n * itemsize >= STREAM_MIN
    if blocks < 4 or threads == 1:   # no parallel region to open: the same blocks
        for block in range(blocks):
            start = block * BLOCK
            _BF16.round_f32(src + start, dst + start * itemsize, min(<Py_ssize_t>BLOCK, n - start), n - start,
                            truncate, itemsize == 4, stream)
        return
    for block in prange(blocks, schedule="static", num_threads=threads):
        start = block * BLOCK
        _BF16.round_f32(src + start, dst + start * itemsize, min(<Py_ssize_t>BLOCK, n - start), n - start, truncate,
                        itemsize == 4, stream)


cdef void _round_f64(const double* src, char* dst, Py_ssize_t n, int itemsize, bint truncate,
                     int threads) noexcept nogil:
    cdef Py_ssize_t block, start
    cdef Py_ssize_t blocks = (n + BLOCK - 1) // BLOCK
    if blocks < 4 or threads == 1:   # no parallel region to open: the same blocks
        for block in range(blocks):
            start = block * BLOCK
            _BF16.round_f64(src + start, dst + start * itemsize, min(<Py_ssize_t>BLOCK, n - start), truncate,
                            itemsize == 4)
        return
    for block in prange(blocks, schedule="static", num_threads=threads):
        start = block * BLOCK
        _BF16.round_f64(src + start, dst + start * itemsize, min(<Py_ssize_t>BLOCK, n - start), truncate,
                        itemsize == 4)


cdef void bf16_widen_array(const uint16_t* src, uint32_t* dst, Py_ssize_t n, int threads,
                           bint fresh_dst) noexcept nogil:
    """float32 bits = bfloat16 bits << 16. Stores bypass the caches only into a caller's dst of 32 MiB or more:
    on AMD Zen 5 plain stores took 0.45-0.65x the time up to 16 MiB of output (2 threads: 0.3x), and 0.8x into
    a `fresh_dst` of 64 MiB (B2: each page is zeroed in the cache as the stores reach it); into a caller's
    64 MiB, 1.1-1.3x."""
    cdef Py_ssize_t block, start
    cdef Py_ssize_t blocks = (n + BLOCK - 1) // BLOCK
    cdef bint stream = not fresh_dst and n * 4 >= WIDEN_STREAM_MIN
    if blocks < 4 or threads == 1:   # no parallel region to open: the same blocks
        for block in range(blocks):
            start = block * BLOCK
            _BF16.widen(src + start, dst + start, min(<Py_ssize_t>BLOCK, n - start), n - start, stream)
        return
    for block in prange(blocks, schedule="static", num_threads=threads):
        start = block * BLOCK
        _BF16.widen(src + start, dst + start, min(<Py_ssize_t>BLOCK, n - start), n - start, stream)


def _parse_rounding(rounding):
    if isinstance(rounding, str) and rounding.lower() in ("nearest", "truncate"):
        return rounding.lower() == "truncate"
    raise ValueError(f"rounding: expected 'nearest' or 'truncate', got {rounding!r}")


def _real_input(x, str name="x"):
    """`x` as a C-contiguous float32 or float64 array in the machine's byte order (a byte-swapped float32 stays
    float32; integers, bool and float16 widen to float64, exactly; a long double, which float64 would round
    first, is refused)."""
    array = native(as_array(x, name))
    if array.dtype == BFLOAT16:   # (a bfloat16 array, list or scalar: its values, exact in float32)
        array = array.astype(np.float32)
    if array.dtype == np.float32 or array.dtype == np.float64:
        return np.asarray(array, order="C")
    if array.dtype.kind in "biu" or array.dtype == np.float16:
        return np.asarray(array, dtype=np.float64, order="C")
    raise ValueError(f"{name}: expected real numbers (float32, float64, float16, integers), got dtype {array.dtype}")


def _in_memory_order(convert, x, out, *args):
    """``convert(x, out, *args)`` on the C-ordered views of a transposed or Fortran-ordered `x` (and `out`, laid
    out alike), the result in x's layout as NumPy's ``astype`` keeps it (copying x to C order first took 13x
    ml_dtypes' time on a transposed 1024 x 1024 array); None where `x` (or `out`) lies otherwise."""
    order = memory_order(x)
    if order is None:
        return None
    return run_in_memory_order(order, lambda view, out_view: convert(view, out_view, *args), (x,), out, x.shape)


cdef inline bint in_place(object out, object x) noexcept:
    """out is x's own memory, element for element (round_to_bfloat16(x, out=x): each output replaces its own
    input, read first); any other overlap wrote outputs over input not yet read."""
    return cnp.PyArray_DATA(<cnp.ndarray>out) == cnp.PyArray_DATA(<cnp.ndarray>x) and \
        cnp.PyArray_ITEMSIZE(<cnp.ndarray>out) == cnp.PyArray_ITEMSIZE(<cnp.ndarray>x)


def _round_to_bf16(x, out, rounding, n_threads, tuple out_dtypes):
    """Round `x` to bfloat16 into `out` (or a new array of out_dtypes[0], laid out as `x` when it is a
    transposed or Fortran-ordered array, else C-ordered)."""
    cdef bint truncate
    cdef int threads = call_threads(n_threads)
    if cnp.PyArray_Check(x) and not cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>x):
        result = _in_memory_order(_round_to_bf16, x, out, rounding, n_threads, out_dtypes)
        if result is not None:
            return result
    if rounding == "nearest":
        truncate = False
    else:
        truncate = _parse_rounding(rounding)
    if cnp.PyArray_Check(x) and cnp.PyArray_TYPE(<cnp.ndarray>x) == cnp.NPY_FLOAT32 and \
            cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>x) and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>x):
        array = x
    else:
        array = _real_input(x)
    cdef Py_ssize_t n = cnp.PyArray_SIZE(<cnp.ndarray>array)
    if out is None:
        out = new_array(out_dtypes[0], cnp.PyArray_NDIM(<cnp.ndarray>array), cnp.PyArray_DIMS(<cnp.ndarray>array))
    elif not (is_output(out, out_dtypes[0], out_dtypes[len(out_dtypes) - 1], n) and same_shape(out, array) and
              (not overlaps(out, array) or in_place(out, array))):
        out = check_out(out, array.shape, out_dtypes, {"x": array})   # (overlapping: raises)
    if not (cnp.PyArray_ISALIGNED(<cnp.ndarray>array) and cnp.PyArray_ISALIGNED(<cnp.ndarray>out)):
        # the kernels read and write whole elements: an array off its element size (np.frombuffer at an odd
        # offset) goes through aligned copies, as NumPy's own loops do
        out[...] = _round_to_bf16(np.array(array), None, rounding, n_threads, (out.dtype,))
        return out
    cdef int itemsize = cnp.PyArray_ITEMSIZE(<cnp.ndarray>out)
    cdef char* dst = <char*>cnp.PyArray_DATA(<cnp.ndarray>out)
    cdef const void* src = cnp.PyArray_DATA(<cnp.ndarray>array)
    if n == 0:
        return out
    if cnp.PyArray_TYPE(<cnp.ndarray>array) == cnp.NPY_FLOAT32:
        if n < NOGIL_MIN:
            bf16_round_array(<const uint32_t*>src, dst, n, itemsize, truncate, 1)
            return out
        with nogil:
            bf16_round_array(<const uint32_t*>src, dst, n, itemsize, truncate, threads)
    else:
        with nogil:
            _round_f64(<const double*>src, dst, n, itemsize, truncate, threads)
    return out


def float32_to_bfloat16(x, *, rounding="nearest", out=None, n_threads=None):
    """Round to bfloat16: ``bf16 = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16`` (nearest-even).

    Parameters
    ----------
    x : array_like
        float32 values; float64 (and integer) input is rounded once, directly from float64.
    rounding : {"nearest", "truncate"}
        Round to nearest, ties to even (bit-identical to ml_dtypes), or drop the low bits.
        NaN stays a quiet NaN of the same sign; overflow gives +-inf (nearest).
    out : ndarray of ml_dtypes.bfloat16 or uint16 (raw bits), optional
        Where to write the result; same shape as `x`.
    n_threads : int, optional
        Threads for this call (default: ``synet.get_num_threads()``).

    Returns
    -------
    ndarray of ml_dtypes.bfloat16 (or `out`)

    Examples
    --------
    >>> print(float32_to_bfloat16(np.array([1.0, 1.01171875, -np.inf], np.float32)))
    [1 1.01562 -inf]
    """
    return _round_to_bf16(x, out, rounding, n_threads, (BFLOAT16, UINT16))


def bfloat16_to_float32(x, *, out=None, n_threads=None):
    """Widen bfloat16 to float32 exactly: ``bits32 = bits16 << 16``.

    Parameters
    ----------
    x : ndarray of ml_dtypes.bfloat16 or uint16 (raw bits)
    out : float32 ndarray of `x`'s shape, optional
    n_threads : int, optional

    Returns
    -------
    float32 ndarray (or `out`)

    Examples
    --------
    >>> bfloat16_to_float32(np.array([0x3F80, 0xC000], np.uint16))
    array([ 1., -2.], dtype=float32)
    """
    cdef int threads = call_threads(n_threads)
    if cnp.PyArray_Check(x) and not cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>x):
        result = _in_memory_order(_widen, x, out, n_threads)   # a transposed x: a result laid out alike
        if result is not None:
            return result
    array = as_array(x, "x")
    if array.dtype != BFLOAT16 and array.dtype != UINT16:
        raise ValueError(f"x: expected bfloat16 (or uint16 raw bits), got dtype {array.dtype}")
    if not cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>array):   # as raw bits: NumPy copies ml_dtypes' bfloat16
        array = np.asarray(array.view(UINT16), order="C")      # element by element
    cdef Py_ssize_t n = array.size
    cdef bint fresh = out is None
    if fresh:
        out = new_array(_FLOAT32, cnp.PyArray_NDIM(<cnp.ndarray>array), cnp.PyArray_DIMS(<cnp.ndarray>array))
    elif not (is_output(out, _FLOAT32, _FLOAT32, n) and same_shape(out, array) and not overlaps(out, array)):
        out = check_out(out, array.shape, (_FLOAT32,), {"x": array})   # (overlapping: raises)
    if not (cnp.PyArray_ISALIGNED(<cnp.ndarray>array) and cnp.PyArray_ISALIGNED(<cnp.ndarray>out)):
        out[...] = bfloat16_to_float32(np.array(array), n_threads=n_threads)   # (aligned copies, as above)
        return out
    cdef const uint16_t* src = <const uint16_t*>cnp.PyArray_DATA(array)
    cdef uint32_t* dst = <uint32_t*>cnp.PyArray_DATA(out)
    if n < NOGIL_MIN:
        bf16_widen_array(src, dst, n, 1, fresh)
    else:
        with nogil:
            bf16_widen_array(src, dst, n, threads, fresh)
    return out


def _widen(x, out, n_threads):
    """bfloat16_to_float32 in the form _in_memory_order calls."""
    return bfloat16_to_float32(x, out=out, n_threads=n_threads)


def round_to_bfloat16(x, *, rounding="nearest", out=None, n_threads=None):
    """float32 values that bfloat16 holds exactly: ``bfloat16_to_float32(float32_to_bfloat16(x))``.

    Parameters
    ----------
    x : array_like
        float32 (or float64, rounded once) values.
    rounding : {"nearest", "truncate"}
    out : float32 ndarray of `x`'s shape, optional
    n_threads : int, optional

    Returns
    -------
    float32 ndarray (or `out`)

    Examples
    --------
    >>> round_to_bfloat16(np.array([1.01171875, 3.14159], np.float32))
    array([1.015625, 3.140625], dtype=float32)
    """
    return _round_to_bf16(x, out, rounding, n_threads, (_FLOAT32,))


# ---------------------------------------------------------------------------------------------
# The core's arithmetic peaks (the bench's roofline)

cdef const synet_peak_kernels* _PEAK = synet_peak_kernels_at(_LEVEL)
PEAK_KINDS = ("fp32_fma", "bf16_dot", "amx_bf16")


ctypedef double (*peak_loop)(int64_t) noexcept nogil


cdef peak_loop _peak_loop_of(str kind) except *:
    """The register-only loop of `kind`, NULL where this CPU level (or the OS, for AMX) does not allow it."""
    if kind == "fp32_fma":
        return _PEAK.fp32_fma
    if kind == "bf16_dot":
        return _PEAK.bf16_dot
    if kind == "amx_bf16":
        return _PEAK.amx_bf16 if amx_ready() else NULL
    raise ValueError(f"kind: expected one of {', '.join(PEAK_KINDS)}, got {kind!r}")


def peak_run(str kind, int64_t iterations):
    """Run `iterations` steps of the register-only loop of `kind` (see peak_flops) on this thread; the
    floating-point operations it performed, or None where it is not allowed. The bench times it beside a
    workload to get that workload's FLOPs at the peak in the same rounds."""
    cdef peak_loop loop = _peak_loop_of(kind)
    cdef double flops
    if loop == NULL:
        return None
    with nogil:
        flops = loop(iterations)
    return flops


cdef enum:
    COPY_BLOCK = 1 << 18   # bytes a memcpy call of copy_run copies (the last one: the rest)


def _source_and_target(source, target, bint aligned):
    """`source` and `target` as ndarrays, C-contiguous (and aligned to their elements where `aligned`): the
    bench's run helpers' arguments."""
    a = require_array(source, "source")
    b = require_array(target, "target")
    if not (a.flags.c_contiguous and b.flags.c_contiguous and (not aligned or a.flags.aligned and b.flags.aligned)):
        raise ValueError(f"source, target: expected C-contiguous{', aligned' if aligned else ''} arrays")
    return a, b


def _check_target_apart(a, b):
    """target `b` writeable and apart from source `a`."""
    if not b.flags.writeable:
        raise ValueError("target: expected a writeable array, got a read-only one")
    if np.may_share_memory(a, b):
        raise ValueError("target: must not overlap source")


def copy_run(source, target, n_threads=None):
    """Copy the bytes of `source` into `target` (C-contiguous ndarrays of the same size in bytes, target
    writeable, not overlapping) on `n_threads` threads, each a contiguous share of COPY_BLOCK-byte blocks:
    the bench's stream-bandwidth limit on one thread and on two. Every thread count makes the same memcpy
    calls (glibc switches to non-temporal stores for large sizes: one 20 MB copy against two of 10 MB made
    a second thread look 3x faster)."""
    cdef int threads = call_threads(n_threads)
    a, b = _source_and_target(source, target, False)
    if a.nbytes != b.nbytes:
        raise ValueError(f"target: expected {a.nbytes} bytes (source's), got {b.nbytes}")
    _check_target_apart(a, b)
    cdef const char* src = <const char*>cnp.PyArray_DATA(<cnp.ndarray>a)
    cdef char* dst = <char*>cnp.PyArray_DATA(<cnp.ndarray>b)
    cdef Py_ssize_t n = a.nbytes, blocks = (n + COPY_BLOCK - 1) // COPY_BLOCK, i
    with nogil:
        for i in prange(blocks, num_threads=threads, schedule="static"):
            memcpy(dst + i * COPY_BLOCK, src + i * COPY_BLOCK, min(COPY_BLOCK, n - i * COPY_BLOCK))


ctypedef fused load_word:
    uint8_t
    uint16_t
    uint32_t
    uint64_t

ctypedef fused load_offset:
    int32_t
    int64_t


cdef void _load_words(const load_word* src, const load_offset* offsets, load_word* dst, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t j
    for j in range(n):
        dst[j] = src[offsets[j]]


cdef void _load_run(const char* src, const load_offset* offsets, char* dst, Py_ssize_t n, int width) noexcept nogil:
    if width == 1:
        _load_words(<const uint8_t*>src, offsets, <uint8_t*>dst, n)
    elif width == 2:
        _load_words(<const uint16_t*>src, offsets, <uint16_t*>dst, n)
    elif width == 4:
        _load_words(<const uint32_t*>src, offsets, <uint32_t*>dst, n)
    else:
        _load_words(<const uint64_t*>src, offsets, <uint64_t*>dst, n)


cdef class LoadRun:
    """``run()``: ``target.flat[j] = source.flat[offsets[j]]`` on this thread, nothing else: the loads a
    gather cannot do without (one an element, in the output's order), none of its index arithmetic or checks.
    The bench times it beside a gather (``limit: loads (same addresses)``) as the machine's time for its reads,
    which at random addresses take far longer than a copy of the same bytes. Checked once here: C-contiguous
    arrays of one element size (1, 2, 4 or 8 bytes) aligned to it, target writeable and apart from source,
    int32 or int64 offsets (others are taken as int64) inside source, one per target element; the offsets are
    copied (so none can change afterwards)."""

    cdef object source, target, offsets
    cdef int width

    def __init__(self, source, offsets, target):
        a, b = _source_and_target(source, target, True)
        if a.itemsize != b.itemsize or a.itemsize not in (1, 2, 4, 8):
            raise ValueError(f"target: expected elements of source's size, 1, 2, 4 or 8 bytes; got {b.itemsize} "
                             f"and {a.itemsize}")
        _check_target_apart(a, b)
        o = np.asarray(offsets)
        o = np.array(o, dtype=o.dtype if o.dtype in (np.int32, np.int64) else np.int64, order="C", copy=True)
        if o.size != b.size:
            raise ValueError(f"offsets: expected {b.size} (target's size), got {o.size}")
        if o.size and (o.min() < 0 or o.max() >= a.size):
            raise ValueError(f"offsets: expected values in [0, {a.size}), got {o.min()}..{o.max()}")
        o.flags.writeable = False
        self.source, self.target, self.offsets, self.width = a, b, o, a.itemsize

    def run(self):
        cdef const char* src = <const char*>cnp.PyArray_DATA(<cnp.ndarray>self.source)
        cdef char* dst = <char*>cnp.PyArray_DATA(<cnp.ndarray>self.target)
        cdef const void* offsets = cnp.PyArray_DATA(<cnp.ndarray>self.offsets)
        cdef Py_ssize_t n = cnp.PyArray_SIZE(<cnp.ndarray>self.offsets)
        cdef bint offsets64 = cnp.PyArray_ITEMSIZE(<cnp.ndarray>self.offsets) == 8
        with nogil:
            if offsets64:
                _load_run(src, <const int64_t*>offsets, dst, n, self.width)
            else:
                _load_run(src, <const int32_t*>offsets, dst, n, self.width)


def peak_flops(str kind, double seconds=0.05):
    """FLOP/s of a register-only loop of one kind of instruction on this thread at the chosen CPU level:
    ``"fp32_fma"``, ``"bf16_dot"`` (vdpbf16ps) or ``"amx_bf16"`` (tdpbf16ps); None where this CPU level
    (or the OS, for AMX) does not allow it. The best of a few runs of about `seconds` each."""
    import time

    cdef peak_loop loop = _peak_loop_of(kind)
    cdef int64_t iterations = 1000
    cdef double flops
    if loop == NULL:
        return None
    best = 0.0
    while True:   # calibrate: about `seconds` per run
        start = time.perf_counter()
        with nogil:
            flops = loop(iterations)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds / 4:
            break
        iterations *= 4
    for _ in range(5):
        start = time.perf_counter()
        with nogil:
            flops = loop(iterations)
        best = max(best, flops / (time.perf_counter() - start))
    return best
