"""The workload suite behind ``python -m synet bench``: synet against installed peers.

Each op module (``gather``, ``bf16``, ...) lists `Workload`s. A workload builds its data once
and returns candidates: ``"synet"`` at one thread (the reference of every ratio), ``"synet x2"``
at two threads, and peers (numpy, torch, onnxruntime at one thread) or variants. Candidates are
timed round-robin after warm-up runs, so machine noise hits them alike, and the median of the
repeats is reported.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import platform
import statistics
import sys
import time
from typing import Callable

import numpy as np

REFERENCE = "synet"


@dataclasses.dataclass
class Workload:
    name: str                 # short id, e.g. "G1"
    title: str                # what it computes
    make: Callable[[], dict[str, Callable[[], object]]]
    nbytes: int = 0           # memory traffic of one call, for GB/s
    flops: int = 0            # floating-point operations of one call, for GFLOP/s


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


def _calls_per_sample(fn: Callable[[], object], target_s: float) -> int:
    start = time.perf_counter()
    fn()
    elapsed = max(time.perf_counter() - start, 1e-7)
    return max(1, min(10_000, int(target_s / elapsed)))


def measure(candidates: dict[str, Callable[[], object]], repeats: int, target_s: float) -> dict[str, float]:
    """Median seconds per call of each candidate, sampled round-robin after warm-up.

    Whoever runs right after another candidate pays for what that one left behind (a peer that
    allocates and frees a 32 MB output slowed the next call by 15-40%, whichever candidate it
    was), and a sample of n calls would spread that cost over n: fast candidates (larger n)
    would look faster still. So each sample starts with one untimed call, and each round starts
    one candidate later.
    """
    loops = {}
    for label, fn in candidates.items():
        for _ in range(2):
            fn()  # warm-up: caches, page faults, a warm heap for peers that allocate
        loops[label] = _calls_per_sample(fn, target_s)
    samples: dict[str, list[float]] = {label: [] for label in candidates}
    labels = list(candidates)
    for round_ in range(repeats):
        for position in range(len(labels)):
            label = labels[(round_ + position) % len(labels)]
            fn, n = candidates[label], loops[label]
            fn()  # untimed: the switch from the previous candidate
            start = time.perf_counter()
            for _ in range(n):
                fn()
            samples[label].append((time.perf_counter() - start) / n)
    return {label: statistics.median(values) for label, values in samples.items()}


# One module per op, each with a WORKLOADS list.
OP_MODULES = ("gather", "bf16", "quantized_add", "deconvolution")


def all_workloads() -> list[Workload]:
    workloads: list[Workload] = []
    for name in OP_MODULES:
        workloads.extend(importlib.import_module(f"{__name__}.{name}").WORKLOADS)
    return workloads


def run(only: list[str] | None = None, repeats: int = 7, target_s: float = 0.01, json_path: str | None = None,
        out=sys.stdout) -> list[dict]:
    """Run the workloads (all, or those named in `only`), print a table, optionally save JSON."""
    import synet

    workloads = [w for w in all_workloads() if not only or w.name in only]
    rows = []
    for number, workload in enumerate(workloads, 1):
        print(f"[{number}/{len(workloads)}] {workload.name}: {workload.title} ...", file=sys.stderr, flush=True)
        candidates = workload.make()
        times = measure(candidates, repeats, target_s)
        reference = times[REFERENCE]
        for label, seconds in times.items():
            row = {"workload": workload.name, "title": workload.title, "candidate": label,
                   "ms": seconds * 1e3, "vs_synet": seconds / reference}
            if workload.nbytes:
                row["GB/s"] = workload.nbytes / seconds / 1e9
            if workload.flops:
                row["GFLOP/s"] = workload.flops / seconds / 1e9
            rows.append(row)
        del candidates
    print_table(rows, out)
    if json_path:
        meta = {"date": time.strftime("%Y-%m-%d"), "cpu": cpu_name(), "config": synet.config(),
                "repeats": repeats, "python": platform.python_version()}
        with open(json_path, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
        print(f"saved {json_path}", file=sys.stderr)
    return rows


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
    header = f"{'workload':<9}{'candidate':<26}{'median ms':>11}{'rate':>15}{'time / synet':>14}"
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
        print(f"{name:<9}{row['candidate']:<26}{row['ms']:>11.3f}{rate:>15}{row['vs_synet']:>13.2f}x", file=out)
