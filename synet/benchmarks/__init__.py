"""The workload suite behind ``python -m synet bench``: synet against installed peers.

Each op module (``gather``, ``bf16``, ...) lists `Workload`s. A workload builds its data once
and returns candidates: ``"synet"`` at one thread (the reference of every ratio), ``"synet x2"``
at two threads, ``"synet functional"`` (the functional form as a PyTorch user calls it), and peers
(numpy, torch, onnxruntime at one thread) or variants. Candidates are timed round-robin, each
sample after at least WARM_S of untimed calls of that candidate (AVX-512 / AMX code runs several
times slower for 50-100 ms after even a few ms without such work), so machine noise hits them
alike; the median of the repeats is reported.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

REFERENCE = "synet"
SIMD_LIBRARY: str | None = None  # a libSimd.so path: the workloads add a "simd" candidate (benchmarks/simd_peer.py)


@dataclasses.dataclass
class Workload:
    name: str                 # short id, e.g. "G1"
    title: str                # what it computes
    make: Callable[[], dict[str, Callable[[], object]]]
    nbytes: int = 0           # memory traffic of one call, for GB/s
    flops: int = 0            # floating-point operations of one call, for GFLOP/s
    micro: bool = False       # a per-call-overhead workload: report microseconds
    # make() may return (candidates, meta) with meta["peak"], the arithmetic that bounds synet's kernel when
    # it is compute-bound: "fp32_fma", "bf16_dot" or "amx_bf16" (synet/_kernels.pyx: peak_flops); a gather's
    # meta["loads"], (source, offsets, target) for its loads alone (synet._kernels.LoadRun); a 2-D transposed
    # convolution's meta["conv"] is its ConvParams (benchmarks/kernel_ab/dump.py plans it)


def machine_limits(seconds: float = 0.05) -> dict:
    """This thread's limits: stream bandwidth (a large copy, bytes read + written per second; a large
    read) and the arithmetic peaks of the kernel classes synet uses (register-only loops)."""
    from synet._kernels import PEAK_KINDS, peak_flops

    n = 64 << 20  # bytes: far beyond the caches
    a = np.ones(n // 8, np.uint64)
    b = np.empty_like(a)

    def best(fn):
        fn()
        times = []
        for _ in range(7):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return min(times)

    copy = 2 * n / best(lambda: np.copyto(b, a)) / 1e9
    read = n / best(lambda: np.bitwise_or.reduce(a)) / 1e9
    peaks = {kind: peak_flops(kind, seconds) for kind in PEAK_KINDS}
    return {"copy GB/s": copy, "read GB/s": read,
            "peak GFLOP/s": {k: v / 1e9 for k, v in peaks.items() if v is not None}}


COPY_LIMIT = "limit: copy (same bytes)"
# what a second thread gains on a copy: the same memcpy calls (blocks) on one thread and on two
COPY_BLOCKS = "limit: copy in blocks (same bytes)"
COPY_BLOCKS_X2 = "limit: copy in blocks x2 (same bytes)"
LOADS_LIMIT = "limit: loads (same addresses)"


def limit_candidates(workload: Workload, meta: dict) -> dict[str, Callable[[], object]]:
    """What bounds the workload at this machine's limit, as calls timed in the same rounds as its candidates
    (the machine's speed changes from second to second on a shared VM, so a limit measured once at the start
    does not hold for a workload measured minutes later): a copy that reads and writes its bytes (a working set
    of the same size, so one that fits the caches is measured against the caches), its FLOPs as a
    register-only loop of its kernel's arithmetic (meta["peak"]: synet._kernels.PEAK_KINDS; see machine_limits),
    and a gather's loads alone (meta["loads"]: one load an element from the addresses it reads, in the output's
    order; synet._kernels.LoadRun). The copy runs again as the same memcpy calls of 256 KiB blocks on one thread
    and on two (synet._kernels.copy_run): their ratio is what a second thread gains on a copy, and "synet x2"'s
    limit is the copy's time over it."""
    from synet._kernels import LoadRun, copy_run, peak_run

    limits: dict[str, Callable[[], object]] = {}
    if workload.micro:
        return limits
    if workload.nbytes:
        source = np.ones(max(1, workload.nbytes // 16), np.uint64)   # half the bytes read, half written
        target = np.empty_like(source)
        limits[COPY_LIMIT] = lambda: np.copyto(target, source)
        limits[COPY_BLOCKS] = lambda: copy_run(source, target, 1)
        limits[COPY_BLOCKS_X2] = lambda: copy_run(source, target, 2)
    peak = meta.get("peak", "")
    per_step = peak_run(peak, 1000) if workload.flops and peak else None
    if per_step:
        steps = max(1, round(workload.flops * 1000 / per_step))
        limits[f"limit: {peak} (same FLOPs)"] = lambda: peak_run(peak, steps)
    if "loads" in meta:
        limits[LOADS_LIMIT] = LoadRun(*meta["loads"]).run
    return limits


def optional(module: str):
    """The module if it is installed, else None (peers are optional)."""
    try:
        return importlib.import_module(module)
    except Exception:  # an installed-but-broken peer counts as missing
        return None


def torch_single_thread():
    torch = optional("torch")
    if torch is not None:
        torch.set_num_threads(1)
    return torch


def ort_single_op(op_type: str, inputs: list[str], feeds: dict, initializers: dict | None = None,
                  domain: str = "", **attributes):
    """A call running one onnxruntime node on `feeds` (1 intra-op thread), or None without onnx/ort.

    `inputs` orders the node's inputs, taken from `feeds` (graph inputs) and `initializers`
    (constant arrays); the output has the element type of the first feed.
    """
    onnx = optional("onnx")
    if onnx is None:
        return None
    from onnx import helper, numpy_helper

    def info(name, array):
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(array.dtype), list(array.shape))

    first = next(iter(feeds.values()))
    node = helper.make_node(op_type, inputs, ["out"], domain=domain, **attributes)
    graph = helper.make_graph(
        [node], op_type, [info(name, array) for name, array in feeds.items()],
        [helper.make_tensor_value_info("out", helper.np_dtype_to_tensor_dtype(first.dtype), None)],
        [numpy_helper.from_array(np.asarray(array), name) for name, array in (initializers or {}).items()])
    opsets = [helper.make_opsetid("", 13)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    session = ort_session(model)
    if session is None:
        return None
    return lambda: session.run(None, feeds)


def ort_session(model):
    """An onnxruntime session on one intra-op thread for an onnx ModelProto, or None."""
    ort = optional("onnxruntime")
    if ort is None:
        return None
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


WARM_S = 0.1  # seconds of untimed calls of a candidate before each of its samples


class OnThread:
    """A candidate whose every call must run on one thread of its own: `call(fn, *args)` runs `fn(*args)` there
    and returns its result. Calling the candidate hands `fn` over; `measure` warms and times it on that thread
    instead, so its samples carry no hand-off between threads (about 20 us a call)."""

    def __init__(self, fn: Callable[[], object], call: Callable[..., Any]):
        self.fn, self.call = fn, call

    def __call__(self) -> object:
        return self.call(self.fn)


def _calls_per_sample(fn: Callable[[], object], target_s: float) -> int:
    if isinstance(fn, OnThread):
        return fn.call(_calls_per_sample, fn.fn, target_s)
    start = time.perf_counter()
    fn()
    elapsed = max(time.perf_counter() - start, 1e-7)
    return max(1, min(100_000, int(target_s / elapsed)))


def _warm(fn: Callable[[], object], seconds: float) -> None:
    """Untimed calls for `seconds` (at least two): caches, page faults, the core's vector-unit clocks."""
    if isinstance(fn, OnThread):
        return fn.call(_warm, fn.fn, seconds)
    end = time.perf_counter() + seconds
    fn()
    fn()
    while time.perf_counter() < end:
        fn()


def _sample(fn: Callable[[], object], calls: int, warm_s: float) -> float:
    """Seconds per call of `calls` calls of `fn`, timed after `warm_s` of untimed calls (on the candidate's
    own thread for an `OnThread`)."""
    if isinstance(fn, OnThread):
        return fn.call(_sample, fn.fn, calls, warm_s)
    _warm(fn, warm_s)
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def measure(candidates: dict[str, Callable[[], object]], repeats: int, target_s: float,
            warm_s: float = WARM_S) -> dict[str, float]:
    """Median seconds per call of each candidate, sampled round-robin, each sample after `warm_s` of
    untimed calls of the same candidate.

    Whoever runs right after another candidate pays for what that one left behind (a peer that
    allocates and frees a 32 MB output slowed the next call by 15-40%), and AVX-512 / AMX code runs
    2.5-4.4x slower for 50-100 ms after a pause: the warm-up absorbs both. Each round starts one
    candidate later.
    """
    loops = {}
    for label, fn in candidates.items():
        _warm(fn, warm_s)
        loops[label] = _calls_per_sample(fn, target_s)
    samples: dict[str, list[float]] = {label: [] for label in candidates}
    labels = list(candidates)
    for round_ in range(repeats):
        for position in range(len(labels)):
            label = labels[(round_ + position) % len(labels)]
            samples[label].append(_sample(candidates[label], loops[label], warm_s))
    return {label: statistics.median(values) for label, values in samples.items()}


# One module per op, each with a WORKLOADS list.
OP_MODULES = ("gather", "bf16", "quantized_add", "deconvolution", "small")


def all_workloads() -> list[Workload]:
    workloads: list[Workload] = []
    for name in OP_MODULES:
        workloads.extend(importlib.import_module(f"{__name__}.{name}").WORKLOADS)
    return workloads


def run(only: list[str] | None = None, repeats: int = 7, target_s: float = 0.01, json_path: str | None = None,
        out=sys.stdout, warm_s: float = WARM_S) -> list[dict]:
    """Run the workloads (all, or those named in `only`), print a table, optionally save JSON."""
    import synet

    workloads = [w for w in all_workloads() if not only or w.name in only]
    dispatch = synet.config()["dispatch"]
    print(f"synet {synet.__version__}: CPU level {dispatch['chosen']} (supported {dispatch['supported']}); "
          f"kernels {', '.join(f'{op} {lvl}' for op, lvl in dispatch['ops'].items())}"
          f"{'; deconvolution off AMX on vdpbf16ps' if dispatch['bf16_dot'] else ''}"
          f"{'; gathers by vpgather' if dispatch['vector_gather'] else ''}", file=out)
    busy = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if busy >= 0.5:
        print(f"note: load average {busy:.2f} before the run: other processes use the CPUs, so times are noisy and "
              f"the multi-threaded rows (x2) can be far slower than one thread (OpenMP's spin-wait; see the "
              f"threads docs)", file=out)
    limits = machine_limits()
    print(f"limits of one thread: copy {limits['copy GB/s']:.1f} GB/s, read {limits['read GB/s']:.1f} GB/s; "
          + ", ".join(f"{k} {v:.0f} GFLOP/s" for k, v in limits["peak GFLOP/s"].items()), file=out)
    rows = []
    for number, workload in enumerate(workloads, 1):
        print(f"[{number}/{len(workloads)}] {workload.name}: {workload.title} ...", file=sys.stderr, flush=True)
        made = workload.make()
        meta: dict[str, Any]
        candidates, meta = made if isinstance(made, tuple) else (made, {})
        bounds = limit_candidates(workload, meta)
        times = measure({**candidates, **bounds}, repeats, target_s, warm_s)
        reference = times[REFERENCE]
        # the limit: the slower of the copy and the peak loop, timed in the same rounds as synet; for two
        # threads, the copy's time over a second thread's gain on the block copy, or half the peak loop's (two
        # cores). A gather's loads alone are a share of their own ("loads %"; two threads: half their time), not
        # a limit: in the caches its kernel can beat them (G2's registers, G3's strips)
        bound_label = max((label for label in bounds if label not in (COPY_BLOCKS, COPY_BLOCKS_X2, LOADS_LIMIT)),
                          key=lambda label: times[label], default=None)
        for label, seconds in times.items():
            row = {"workload": workload.name, "title": workload.title, "candidate": label,
                   "ms": seconds * 1e3, "vs_synet": seconds / reference, "micro": workload.micro}
            if workload.nbytes:
                row["GB/s"] = workload.nbytes / seconds / 1e9
            if workload.flops:
                row["GFLOP/s"] = workload.flops / seconds / 1e9
            if bound_label is not None and label.startswith("synet"):
                limit = times[bound_label]
                if label == "synet x2":
                    limit /= (times[COPY_BLOCKS] / times[COPY_BLOCKS_X2]) if bound_label == COPY_LIMIT else 2
                row["limit %"] = 100 * limit / seconds
                row["bound"] = "memory" if bound_label == COPY_LIMIT else meta.get("peak", "")
                if workload.nbytes:   # against DRAM's stream bandwidth, whatever the working set
                    row["dram limit %"] = 100 * workload.nbytes / (limits["copy GB/s"] * 1e9) / seconds
                if LOADS_LIMIT in times:
                    row["loads %"] = 100 * times[LOADS_LIMIT] / (2 if label == "synet x2" else 1) / seconds
            rows.append(row)
        del candidates, made, bounds
    print_table(rows, out)
    if json_path:
        meta = {"date": time.strftime("%Y-%m-%d"), "cpu": cpu_name(), "config": synet.config(),
                "repeats": repeats, "python": platform.python_version(), "limits": limits}
        with open(json_path, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
        print(f"saved {json_path}", file=sys.stderr)
    return rows


# Peers restricted to the same instructions as a synet level (set in the peer's own subprocess): PyTorch's
# own kernels, oneDNN's, and MKL's (its SGEMM runs PyTorch's 1x1 transposed convolutions, D3, and ignores
# the other two: unrestricted it ran AVX-512 code at "avx2"; FP32 GEMMs gain nothing from the higher levels).
PEER_ISA_ENV = {
    "baseline": {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41",
                 "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "avx512": {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE",
               "MKL_ENABLE_INSTRUCTIONS": "AVX512"},
    "avx512_bf16": {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"},
    "amx": {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX"},
}


def run_levels(levels: list[str], only: list[str] | None = None, repeats: int = 7, json_path: str | None = None,
               out=sys.stdout) -> dict[str, list[dict]]:
    """The suite once per CPU level, each in a subprocess with SYNET_MAX_ISA=level and the torch peers
    restricted to the same instructions; prints, per workload, each candidate's time at each level."""
    import os
    import subprocess
    import tempfile

    import synet

    supported = synet.config()["dispatch"]["supported"]
    from synet._kernels import LEVELS

    levels = [lv for lv in levels if LEVELS.index(lv) <= LEVELS.index(supported)]
    results: dict[str, list[dict]] = {}
    for level in levels:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "bench.json")
            cmd = [sys.executable, "-m", "synet", "bench", "--repeats", str(repeats), "--json", path]
            if only:
                cmd += ["--only", ",".join(only)]
            env = dict(os.environ, SYNET_MAX_ISA=level, **PEER_ISA_ENV[level])
            print(f"level {level} ...", file=sys.stderr, flush=True)
            subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
            with open(path) as f:
                results[level] = json.load(f)["rows"]
    header = f"{'workload':<9}{'candidate':<30}" + "".join(f"{lv:>22}" for lv in levels)
    print(header, file=out)
    print("-" * len(header), file=out)
    keys: list[tuple[str, str]] = []
    for level in levels:
        for row in results[level]:
            if (row["workload"], row["candidate"]) not in keys:
                keys.append((row["workload"], row["candidate"]))
    table = {(lv, r["workload"], r["candidate"]): r for lv in levels for r in results[lv]}
    last = None
    for workload, candidate in keys:
        cells = []
        for level in levels:
            found = table.get((level, workload, candidate))
            if found is None:
                cells.append(f"{'-':>22}")
                continue
            median = f"{found['ms'] * 1e3:.2f}us" if found.get("micro") else f"{found['ms']:.3f}ms"
            cells.append(f"{median + ' (' + format(found['vs_synet'], '.2f') + 'x)':>22}")
        print(f"{workload if workload != last else '':<9}{candidate:<30}" + "".join(cells), file=out)
        last = workload
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"levels": results}, f, indent=1)
    return results


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def print_table(rows: list[dict], out=sys.stdout) -> None:
    """One line per candidate; `time / synet` > 1 means synet (1 thread) is that much faster."""
    header = f"{'workload':<9}{'candidate':<30}{'median':>13}{'rate':>15}{'time / synet':>14}{'% of limit':>33}"
    print(header, file=out)
    print("-" * len(header), file=out)
    last = None
    for row in rows:
        if "GFLOP/s" in row:
            rate = f"{row['GFLOP/s']:.1f} GFLOP/s"
        elif "GB/s" in row:
            rate = f"{row['GB/s']:.1f} GB/s"
        else:
            rate = ""
        name = row["workload"] if row["workload"] != last else ""
        last = row["workload"]
        median = f"{row['ms'] * 1e3:.2f} us" if row.get("micro") else f"{row['ms']:.3f} ms"
        limit = f"{row['limit %']:.0f}% ({row['bound']})" if "limit %" in row else ""
        if "loads %" in row:
            limit += f"; loads {row['loads %']:.0f}%"
        print(f"{name:<9}{row['candidate']:<30}{median:>13}{rate:>15}{row['vs_synet']:>13.2f}x{limit:>33}", file=out)


def plot(rows: list[dict], path: str) -> None:
    """A bar chart of synet's speed-up over each peer per workload (peer time / synet time, 1 thread, log
    scale), saved as an image (matplotlib, the bench extra)."""
    import matplotlib  # type: ignore[import-not-found, unused-ignore]  # the bench extra

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # type: ignore[import-not-found, unused-ignore]

    workloads: list[str] = []
    peers: list[str] = []
    ratios: dict[tuple[str, str], float] = {}
    for row in rows:
        if row["candidate"].startswith(("synet", "limit:")):
            continue
        family = row["candidate"].split()[0].split(".")[0]   # "torch", "numpy", "onnxruntime", "ml_dtypes", ...
        if row["workload"] not in workloads:
            workloads.append(row["workload"])
        if family not in peers:
            peers.append(family)
        key = (row["workload"], family)
        ratios[key] = min(ratios.get(key, float("inf")), row["vs_synet"])   # the fastest variant of a peer
    width = 0.8 / max(len(peers), 1)
    figure, axes = plt.subplots(figsize=(max(8, 0.6 * len(workloads) + 2), 4.5))
    for i, peer in enumerate(peers):
        xs = [k + i * width for k, w in enumerate(workloads) if (w, peer) in ratios]
        ys = [ratios[(w, peer)] for w in workloads if (w, peer) in ratios]
        axes.bar(xs, ys, width, label=peer)
    axes.axhline(1.0, color="black", linewidth=0.8)
    axes.set_yscale("log")
    axes.set_xticks([k + 0.4 - width / 2 for k in range(len(workloads))], workloads)
    axes.set_ylabel("speed-up of synet (peer time / synet time)")
    axes.set_title("synet vs its peers, one thread (above 1: synet is faster)")
    axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
