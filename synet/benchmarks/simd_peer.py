"""Simd (https://github.com/ermig1979/Simd) as an optional peer of ``python -m synet bench --simd PATH``.

A ctypes binding to a ``libSimd.so`` built by the user (synet ships none of Simd's code): the
three ops' C API from Simd's public header ``SimdLib.h`` (SimdSynetGatherElements*,
SimdSynetQuantizedAdd*, SimdSynetDeconvolution16b*, SimdRelease), and the functions that turn a
workload's data into a ``"simd"`` candidate, or into a reason why Simd cannot run it.

`add` is what the workload modules call: it does nothing unless `benchmarks.SIMD_LIBRARY` names a
library; otherwise it builds the candidate, runs it and synet's once, compares the outputs (same
bits for gathers and quantized adds, the deconvolution within the BF16 tolerance of synet's tests)
and records the result in `CHECKS` (printed by `print_summary`).

Known Simd faults worked around here (none of them is patched, they are avoided):

* grouped NCHW deconvolution (``Base::SynetDeconvolution16bGemm``, e.g. the depthwise D4) sizes its
  BF16 weight buffer for one group and writes every group's weights into it: a heap overflow. The peer
  declines every NCHW deconvolution with group > 1.
* Simd's AMX kernels keep the tile configuration per thread and load it once: when another library on
  the same thread releases the tiles (``tilerelease``), the next Simd tile instruction raises SIGILL.
  On a CPU with AMX (or with ``DEDICATED_THREAD = True``) every deconvolution call (init, set params,
  forward, release) runs on one worker thread of its own, which no other library touches; the bench warms
  and times the forward there (`benchmarks.OnThread`), so the samples carry no hand-off between threads.
* the UINT8 + UINT8 -> UINT8 quantized add ignores the activation (its ReLU is an identity) and has no
  kernel at all for other activations (its forward would call a null pointer): the peer declines
  activations other than identity and ReLU, and records the ReLU mismatch.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import queue
import sys
import threading
import weakref
from collections.abc import Callable

import numpy as np

from synet._types import BFLOAT16, Activation, DataType, TensorFormat, as_activation

c_size_t = ctypes.c_size_t
c_void_p = ctypes.c_void_p
c_int = ctypes.c_int          # every Simd enum (SimdTensorDataType, ...) is a C enum: an int
c_float_p = ctypes.POINTER(ctypes.c_float)
c_size_t_p = ctypes.POINTER(c_size_t)

SIMD_FALSE, SIMD_TRUE = 0, 1
SIMD_CPU_INFO_AMX_BF16 = 11     # SimdCpuInfoAmxBf16 in SimdCpuInfoType (SimdLib.h of 7.1.162: Sockets = 0)
SIMD_CPU_INFO_AVX512BW = 9      # SimdCpuInfoAvx512bw

# None: a dedicated thread for the deconvolution when Simd uses AMX; True / False force it (environment:
# SYNET_BENCH_SIMD_THREAD=1 / 0).
DEDICATED_THREAD: bool | None = {"1": True, "0": False}.get(os.environ.get("SYNET_BENCH_SIMD_THREAD", ""))


class SimdConvolutionParameters(ctypes.Structure):
    """SimdConvolutionParameters, field for field as SimdLib.h declares it."""

    _fields_ = [
        ("srcC", c_size_t), ("srcH", c_size_t), ("srcW", c_size_t),
        ("srcT", c_int),                # SimdTensorDataType
        ("srcF", c_int),                # SimdTensorFormatType
        ("dstC", c_size_t), ("dstH", c_size_t), ("dstW", c_size_t),
        ("dstT", c_int), ("dstF", c_int),
        ("kernelY", c_size_t), ("kernelX", c_size_t),
        ("dilationY", c_size_t), ("dilationX", c_size_t),
        ("strideY", c_size_t), ("strideX", c_size_t),
        ("padY", c_size_t), ("padX", c_size_t), ("padH", c_size_t), ("padW", c_size_t),
        ("group", c_size_t),
        ("activation", c_int),          # SimdConvolutionActivationType
    ]


class Unsupported(Exception):
    """Simd cannot (or must not) run this workload; the message says why."""


@dataclasses.dataclass
class Peer:
    """A Simd candidate: `forward` runs it on the workload's arrays into `dst`; `per_call`, when given, does the
    same taking the arrays' addresses on every call (as a thin ctypes binding does); `info` names Simd's kernel."""

    forward: Callable[[], object]
    dst: np.ndarray
    info: str = ""
    per_call: Callable[[], None] | None = None


class SimdLibrary:
    """The C functions of one libSimd.so, with their argument and result types declared."""

    def __init__(self, path: str):
        self.path = os.path.abspath(path)
        self.lib = lib = ctypes.CDLL(self.path)

        def declare(name, restype, *argtypes):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = restype, list(argtypes)
            return fn

        self.version = declare("SimdVersion", ctypes.c_char_p)
        self.cpu_info = declare("SimdCpuInfo", ctypes.c_uint64, c_int)
        self.release = declare("SimdRelease", None, c_void_p)
        # GatherElements
        self.gather_init = declare("SimdSynetGatherElementsInit", c_void_p, c_int, c_int, c_int, c_size_t,
                                   c_size_t_p, c_size_t, c_size_t, c_size_t, c_size_t)
        self.gather_set_index = declare("SimdSynetGatherElementsSetIndex", None, c_void_p, c_void_p)
        self.gather_forward = declare("SimdSynetGatherElementsForward", None, c_void_p, c_void_p, c_void_p, c_void_p)
        # QuantizedAdd
        self.qadd_init = declare("SimdSynetQuantizedAddInit", c_void_p,
                                 c_size_t_p, c_size_t, c_int, c_float_p, ctypes.c_int32,
                                 c_size_t_p, c_size_t, c_int, c_float_p, ctypes.c_int32,
                                 c_int, c_float_p, c_int, c_float_p, ctypes.c_int32)
        self.qadd_forward = declare("SimdSynetQuantizedAddForward", None, c_void_p, c_void_p, c_void_p, c_void_p)
        # Deconvolution16b
        self.deconv_init = declare("SimdSynetDeconvolution16bInit", c_void_p, c_size_t,
                                   ctypes.POINTER(SimdConvolutionParameters), c_int)
        self.deconv_external_buffer_size = declare("SimdSynetDeconvolution16bExternalBufferSize", c_size_t, c_void_p)
        self.deconv_info = declare("SimdSynetDeconvolution16bInfo", ctypes.c_char_p, c_void_p)
        self.deconv_set_params = declare("SimdSynetDeconvolution16bSetParams", None, c_void_p, c_void_p, c_void_p,
                                         c_void_p)
        self.deconv_forward = declare("SimdSynetDeconvolution16bForward", None, c_void_p, c_void_p, c_void_p,
                                      c_void_p)

    def describe(self) -> str:
        levels = [name for name, code in (("AVX-512BW", SIMD_CPU_INFO_AVX512BW), ("AMX-BF16", SIMD_CPU_INFO_AMX_BF16))
                  if self.cpu_info(code)]
        used = ", ".join(levels) or "below AVX-512"
        return f"Simd {self.version().decode()} ({self.path}; code paths in use: {used})"

    def has_amx(self) -> bool:
        return bool(self.cpu_info(SIMD_CPU_INFO_AMX_BF16))


class Worker:
    """One thread of its own that runs the calls given to it, one at a time, in order."""

    def __init__(self, name: str = "simd-peer"):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            fn, args, box, done = self._jobs.get()
            try:
                box.append(fn(*args))
            except BaseException as error:  # handed back to the caller
                box.append(error)
                box.append(None)
            done.release()

    def call(self, fn: Callable, *args):
        if threading.current_thread() is self._thread:
            return fn(*args)
        box: list = []
        done = threading.Lock()
        done.acquire()
        self._jobs.put((fn, args, box, done))
        done.acquire()
        if len(box) == 2:
            raise box[0]
        return box[0]


_LIBRARIES: dict[str, SimdLibrary | None] = {}
_WORKER: Worker | None = None
CHECKS: list[dict] = []        # one entry per workload: candidate added or declined, and the output check


def library() -> SimdLibrary | None:
    """The library named by `benchmarks.SIMD_LIBRARY` (loaded once), or None when none is named or it fails to load."""
    from . import SIMD_LIBRARY

    if not SIMD_LIBRARY:
        return None
    if SIMD_LIBRARY not in _LIBRARIES:
        try:
            lib = SimdLibrary(SIMD_LIBRARY)
            print(lib.describe(), file=sys.stderr)
        except (OSError, AttributeError) as error:
            print(f"simd: cannot use {SIMD_LIBRARY}: {error}", file=sys.stderr)
            lib = None
        _LIBRARIES[SIMD_LIBRARY] = lib
    return _LIBRARIES[SIMD_LIBRARY]


def worker() -> Worker:
    global _WORKER
    if _WORKER is None:
        _WORKER = Worker()
    return _WORKER


def _pointer(array: np.ndarray | None) -> c_void_p:
    return c_void_p(None if array is None else array.ctypes.data)


def _contiguous(*arrays: np.ndarray) -> None:
    for array in arrays:
        if not array.flags.c_contiguous:
            raise Unsupported("operands must be C-contiguous")


_DATA_TYPES = {np.dtype(np.float32): DataType.FLOAT32, np.dtype(np.uint8): DataType.UINT8, BFLOAT16: DataType.BFLOAT16,
               np.dtype(np.int32): DataType.INT32, np.dtype(np.int64): DataType.INT64, np.dtype(np.int8): DataType.INT8}


# ------------------------------------------------------------------------------------------------ GatherElements

def gather(lib: SimdLibrary, data: np.ndarray, indices: np.ndarray, outer, src_count: int, inner: int, idx_count: int,
           index_const: bool = False, like: np.ndarray | None = None) -> Peer:
    """SimdSynetGatherElements on `data`, `indices` (FP32 / BF16 / UINT8 data,
    INT32 / INT64 indices); a constant index is analysed once with SetIndex, as synet's set_index."""
    _contiguous(data, indices)
    data_type, index_type = _DATA_TYPES.get(data.dtype), _DATA_TYPES.get(indices.dtype)
    if data_type not in (DataType.FLOAT32, DataType.BFLOAT16, DataType.UINT8):
        raise Unsupported(f"Simd gathers FP32, BF16 or UINT8 data, not {data.dtype}")
    if index_type not in (DataType.INT32, DataType.INT64):
        raise Unsupported(f"Simd takes INT32 or INT64 indices, not {indices.dtype}")
    outer = [int(v) for v in outer]
    shape = (*outer, idx_count, inner)
    if like is not None and like.size == int(np.prod(shape)):
        shape = like.shape
    dst = np.empty(shape, data.dtype)
    outer_c = (c_size_t * max(1, len(outer)))(*outer)
    context = lib.gather_init(data_type, index_type, SIMD_TRUE if index_const else SIMD_FALSE, 1, outer_c,
                              len(outer), src_count, inner, idx_count)
    if not context:
        raise Unsupported("SimdSynetGatherElementsInit returned NULL")
    handle = _Context(lib, context)
    if index_const:
        lib.gather_set_index(context, _pointer(indices))
    return Peer(_bind(lib.gather_forward, handle, data, indices, dst), dst, "Base, scalar",
                _bind_per_call(lib.gather_forward, handle, data, indices, dst))


# ------------------------------------------------------------------------------------------------ QuantizedAdd

def quantized_add(lib: SimdLibrary, a: np.ndarray, b: np.ndarray, q: dict, activation, dst_dtype,
                  like: np.ndarray | None = None) -> Peer:
    """SimdSynetQuantizedAdd of `a` and `b` with the scales and zero points of `q`
    (a_scale, a_zero, b_scale, b_zero, dst_scale, dst_zero)."""
    _contiguous(a, b)
    dst_dtype = np.dtype(dst_dtype)
    types = [_DATA_TYPES.get(x) for x in (a.dtype, b.dtype, dst_dtype)]
    if any(t not in (DataType.FLOAT32, DataType.UINT8) for t in types):
        raise Unsupported(f"Simd adds FP32 / UINT8 tensors into FP32 / UINT8, not {a.dtype} + {b.dtype} -> {dst_dtype}")
    if a.shape != b.shape:
        raise Unsupported(f"Simd adds tensors of equal shapes only, not {a.shape} + {b.shape}")
    if any(np.ndim(q[k]) for k in q):
        raise Unsupported("Simd takes one scale and zero point per tensor (no per-channel quantisation)")
    act = as_activation(activation)
    if act not in (Activation.IDENTITY, Activation.RELU):
        raise Unsupported(f"Simd's quantized add has identity and ReLU only, not {act.name.lower()} "
                          "(its UINT8 path would call a null kernel)")
    if types == [DataType.UINT8] * 3:
        info = "Simd's SIMD u8 kernel" + ("; it ignores the activation" if act != Activation.IDENTITY else "")
    else:
        info = "Base, scalar"
    dst = np.empty(like.shape if like is not None and like.size == a.size else a.shape, dst_dtype)
    shape = (c_size_t * max(1, a.ndim))(*a.shape)
    scales = [ctypes.c_float(q[k]) for k in ("a_scale", "b_scale", "dst_scale")]
    context = lib.qadd_init(shape, a.ndim, types[0], ctypes.byref(scales[0]), int(q["a_zero"]),
                            shape, b.ndim, types[1], ctypes.byref(scales[1]), int(q["b_zero"]),
                            int(act), None, types[2], ctypes.byref(scales[2]), int(q["dst_zero"]))
    if not context:
        raise Unsupported("SimdSynetQuantizedAddInit returned NULL")
    handle = _Context(lib, context)
    return Peer(_bind(lib.qadd_forward, handle, a, b, dst), dst, info,
                _bind_per_call(lib.qadd_forward, handle, a, b, dst))


# ------------------------------------------------------------------------------------------------ Deconvolution16b

def deconvolution(lib: SimdLibrary, conv, x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None,
                  like: np.ndarray, batch: int = 1) -> Peer:
    """SimdSynetDeconvolution16b with synet's ConvParams `conv`; `weight` in
    the layout both libraries take ([srcC, dstC/group, kY, kX] NCHW, [srcC, kY, kX, dstC] NHWC)."""
    if conv.group > 1 and conv.src_format == TensorFormat.NCHW:
        raise Unsupported("Simd's grouped NCHW deconvolution (Base::SynetDeconvolution16bGemm) overflows its "
                          "weight buffer (sized for one group): skipped")
    if conv.group > 1:
        raise Unsupported("Simd's NHWC deconvolution takes group 1 only")
    if conv.activation not in (Activation.IDENTITY, Activation.RELU):
        raise Unsupported("the peer passes no activation parameters")
    _contiguous(x, weight)
    dst = np.empty_like(like)
    params = SimdConvolutionParameters(
        conv.src_c, conv.src_h, conv.src_w, int(conv.src_type), int(conv.src_format),
        conv.dst_c, conv.dst_h, conv.dst_w, int(conv.dst_type), int(conv.dst_format),
        conv.kernel_y, conv.kernel_x, conv.dilation_y, conv.dilation_x, conv.stride_y, conv.stride_x,
        conv.pad_y, conv.pad_x, conv.pad_h, conv.pad_w, conv.group, int(conv.activation))
    weight = np.ascontiguousarray(weight, np.float32)
    bias = None if bias is None else np.ascontiguousarray(bias, np.float32)
    use_worker = DEDICATED_THREAD if DEDICATED_THREAD is not None else lib.has_amx()
    run = worker().call if use_worker else (lambda fn, *args: fn(*args))
    context = run(lib.deconv_init, batch, ctypes.byref(params), 0)
    if not context:
        raise Unsupported("SimdSynetDeconvolution16bInit returned NULL")
    handle = _Context(lib, context, run if use_worker else None)
    run(lib.deconv_set_params, context, _pointer(weight), _pointer(bias), None)
    info = run(lib.deconv_info, context).decode()
    buf = np.empty(max(1, run(lib.deconv_external_buffer_size, context)), np.uint8)
    fn: Callable[[], object] = _bind(lib.deconv_forward, handle, x, buf, dst)
    if use_worker:
        from . import OnThread

        fn = OnThread(fn, worker().call)
        info += ", on a dedicated thread (timed there)"
    return Peer(fn, dst, info)


# ------------------------------------------------------------------------------------------------ helpers

class _Context:
    """A Simd context released (SimdRelease, on the thread that made it) when the candidate is dropped."""

    def __init__(self, lib: SimdLibrary, context: int, run: Callable | None = None):
        self.pointer = c_void_p(context)
        release = lib.release
        self._finalizer = weakref.finalize(self, (lambda: run(release, context)) if run else (lambda: release(context)))


def _bind(forward, handle: _Context, *arrays: np.ndarray) -> Callable[[], None]:
    """forward(context, pointers of three `arrays`) with the pointers converted once (context and arrays kept alive)."""
    p0, p1, p2 = (_pointer(a) for a in arrays)
    context = handle.pointer

    def fn(handle=handle, keep=arrays):
        forward(context, p0, p1, p2)
    return fn


def _bind_per_call(forward, handle: _Context, *arrays: np.ndarray) -> Callable[[], None]:
    """forward(context, a.ctypes.data, ...): each call takes the arrays' pointers, as a thin binding does."""
    a0, a1, a2 = arrays
    context = handle.pointer

    def fn(handle=handle):
        forward(context, a0.ctypes.data, a1.ctypes.data, a2.ctypes.data)
    return fn


# ------------------------------------------------------------------------------------------------ checks

def _compare(op: str, got: np.ndarray, want: np.ndarray, tolerance: np.ndarray | None) -> dict:
    """How Simd's output `got` compares with synet's `want`."""
    n = want.size
    got, want = got.reshape(-1), want.reshape(-1)
    if op != "deconvolution":
        same = np.array_equal(got.view(np.uint8), want.view(np.uint8))
        if same:
            return {"ok": True, "result": f"same bits ({n} elements)"}
        diff = got != want
        first = int(np.argmax(diff))
        delta = np.abs(got.astype(np.float64) - want.astype(np.float64))
        text = (f"{int(diff.sum())} of {n} elements differ (max |diff| {delta.max():g}; "
                f"first at {first}: simd {got[first]}, synet {want[first]})")
        if want.dtype == np.float32:  # FP32 results: both within synet's contract, 1e-6·max(1, |v|) of float64
            close = bool((delta <= 2e-6 * np.maximum(1, np.abs(want.astype(np.float64)))).all())
            return {"ok": close, "result": text + (": FP32 rounding, within 2e-6·max(1, |v|)" if close else "")}
        return {"ok": False, "result": text}
    assert tolerance is not None
    g, w = got.astype(np.float32), want.astype(np.float32)
    delta = np.abs(g - w)
    bad = ~(delta <= tolerance)
    worst = float((delta / np.maximum(tolerance, 1e-30)).max())
    text = f"max |diff| {delta.max():.3g} (max |synet| {np.abs(w).max():.3g}); worst diff / tolerance {worst:.2f}"
    if bad.any():
        return {"ok": False, "result": f"{int(bad.sum())} of {n} outside the BF16 tolerance: " + text}
    return {"ok": True, "result": f"within the BF16 tolerance ({n} elements): " + text}


def deconvolution_tolerance(conv, x: np.ndarray, weight: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Twice synet's test tolerance (each library within it of the exact BF16-input sum): 2e-5 * sum |x||w| +
    2e-7 |ref|, plus 2^-7 |ref| per side for BF16 outputs."""
    import synet

    nhwc = conv.src_format == TensorFormat.NHWC
    c, k = conv.dst_c // conv.group, (conv.kernel_y, conv.kernel_x)
    weight = weight.reshape((conv.src_c, *k, c) if nhwc else (conv.src_c, c, *k))
    x = x.reshape((-1, conv.src_h, conv.src_w, conv.src_c) if nhwc else (-1, conv.src_c, conv.src_h, conv.src_w))
    mag = synet.conv_transpose2d(np.abs(x.astype(np.float32)), np.abs(weight.astype(np.float32)), None,
                                 (conv.stride_y, conv.stride_x), (conv.pad_y, conv.pad_x, conv.pad_h, conv.pad_w),
                                 groups=conv.group, dilation=(conv.dilation_y, conv.dilation_x),
                                 layout="NHWC" if nhwc else "NCHW", n_threads=1)
    ref = np.abs(reference.astype(np.float32)).reshape(-1)
    tol = 2 * (2e-5 * mag.reshape(-1) + 2e-7 * ref)
    if reference.dtype == BFLOAT16:
        tol = tol + 2 * ref * 2.0 ** -7
    return tol


BUILDERS: dict[str, Callable[..., Peer]] = {"gather": gather, "quantized_add": quantized_add,
                                             "deconvolution": deconvolution}


def add(candidates: dict, workload: str, op: str, reference: np.ndarray, label: str = "simd", **data) -> None:
    """Add the `label` candidate ("simd") of `op` (`BUILDERS`) built from `data` to `candidates`, when a library
    is named.

    `reference` is the array synet's "synet" candidate writes (Simd's output has its shape and type): both
    candidates are run once and their outputs compared. Per-call workloads (``micro=True``) also get
    "simd, pointers per call" (the arrays' addresses taken on every call, as a thin ctypes binding does)."""
    lib = library()
    if lib is None:
        return
    micro = data.pop("micro", False)
    entry: dict[str, object] = {"workload": workload, "op": op, "label": label}
    try:
        peer = BUILDERS[op](lib, like=reference, **data)
    except Unsupported as reason:
        entry.update(added=False, result=str(reason))
        CHECKS.append(entry)
        print(f"{label} {workload}: not run: {reason}", file=sys.stderr)
        return
    candidates[label] = peer.forward
    if micro and peer.per_call is not None:
        candidates["simd, pointers per call"] = peer.per_call
    candidates["synet"]()
    want = reference.copy()
    peer.dst[...] = 0
    peer.forward()
    tolerance = deconvolution_tolerance(data["conv"], data["x"], data["weight"], want) if op == "deconvolution" \
        else None
    entry.update(added=True, info=peer.info, **_compare(op, peer.dst, want, tolerance))
    CHECKS.append(entry)
    print(f"{label} {workload}: {_status(entry)}: {entry['result']}" + (f" [{peer.info}]" if peer.info else ""),
          file=sys.stderr)


def _status(entry: dict) -> str:
    if not entry["added"]:
        return "not run"
    if entry["ok"]:
        return "ok"
    return "MISMATCH (known)" if "ignores the activation" in entry.get("info", "") else "MISMATCH"


def configure(path: str | None) -> None:
    """Name the library of the "simd" candidates (``--simd``); SYNET_BENCH_SIMD names it when `path` is None, and is
    set from `path` so that the ``--isa`` subprocesses inherit it."""
    from .. import benchmarks

    path = path or os.environ.get("SYNET_BENCH_SIMD") or None
    benchmarks.SIMD_LIBRARY = path
    if path:
        os.environ["SYNET_BENCH_SIMD"] = path


def print_summary(out=sys.stdout) -> None:
    """One line per workload: Simd's output against synet's, or why Simd was not run."""
    if not CHECKS:
        return
    print("\nSimd peer: output against synet's (run once per workload)", file=out)
    for entry in CHECKS:
        info = f" [{entry['info']}]" if entry.get("info") else ""
        if entry.get("label", "simd") != "simd":
            info += f" (candidate {entry['label']!r})"
        print(f"  {entry['workload']:<5}{_status(entry):<18}{entry['result']}{info}", file=out)
