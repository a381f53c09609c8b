"""The bench's "% of limit": the limit is timed in the same rounds as the workload (a copy of its bytes, its
FLOPs as the peak loop), and the share is computed from those two times; a gather's loads alone are a share of
their own ("loads %")."""

import io

import numpy as np
import pytest

import synet.benchmarks as bench
from synet._kernels import PEAK_KINDS, LoadRun, copy_run, peak_run


def test_peak_run_counts_its_operations():
    flops = peak_run("fp32_fma", 1000)
    assert flops > 0
    assert peak_run("fp32_fma", 3000) == 3 * flops
    with pytest.raises(ValueError, match="kind: expected one of fp32_fma, bf16_dot, amx_bf16, got 'fp64'"):
        peak_run("fp64", 10)
    for kind in PEAK_KINDS:   # None where the level (or the OS) does not allow it, never an error
        assert peak_run(kind, 10) is None or peak_run(kind, 10) > 0


@pytest.mark.parametrize("nbytes", [0, 1, 63, 64, 65, 1000, (1 << 20) + 3])
@pytest.mark.parametrize("threads", [1, 2, 3, 7])
def test_copy_run_copies_every_byte_once(nbytes, threads):
    rng = np.random.default_rng(nbytes + threads)
    raw = np.zeros(nbytes + 128, np.uint8)
    source = rng.integers(0, 256, nbytes, dtype=np.uint8)
    target = raw[64:64 + nbytes]
    copy_run(source, target, threads)
    assert np.array_equal(target, source)
    assert not raw[:64].any() and not raw[64 + nbytes:].any()   # nothing written outside target
    words = rng.standard_normal(nbytes // 4 + 1).astype(np.float32)   # any dtypes of the same bytes
    copy_run(words, raw[:words.nbytes].view(np.float32), threads)
    assert np.array_equal(raw[:words.nbytes].view(np.float32), words)


def test_copy_run_rejects_what_it_cannot_copy():
    a = np.ones(64, np.uint8)
    with pytest.raises(TypeError, match="source: expected a numpy.ndarray, got list"):
        copy_run([1, 2], a, 1)
    with pytest.raises(TypeError, match="target: expected a numpy.ndarray, got bytes"):
        copy_run(a, b"x" * 64, 1)
    with pytest.raises(ValueError, match="source, target: expected C-contiguous arrays"):
        copy_run(np.ones(128, np.uint8)[::2], a, 1)
    with pytest.raises(ValueError, match="target: expected 64 bytes \\(source's\\), got 32"):
        copy_run(a, np.ones(8, np.float32), 1)
    readonly = np.ones(64, np.uint8)
    readonly.flags.writeable = False
    with pytest.raises(ValueError, match="target: expected a writeable array, got a read-only one"):
        copy_run(a, readonly, 1)
    with pytest.raises(ValueError, match="target: must not overlap source"):
        copy_run(a, a, 1)
    with pytest.raises(ValueError, match="n_threads: expected a non-zero int"):
        copy_run(a, np.empty_like(a), 0)


@pytest.mark.parametrize("dtype", [np.uint8, np.float16, np.float32, np.int64])
@pytest.mark.parametrize("offset_dtype", [np.int32, np.int64, np.uint16])
def test_load_run_loads_each_offset_into_target(dtype, offset_dtype):
    rng = np.random.default_rng(np.dtype(dtype).itemsize)
    source = rng.integers(0, 100, (7, 9)).astype(dtype)
    offsets = rng.integers(0, source.size, (5, 11)).astype(offset_dtype)
    expected = source.reshape(-1)[offsets.astype(np.int64)]
    raw = np.zeros(offsets.size + 2, dtype)
    target = raw[1:-1].reshape(5, 11)
    loads = LoadRun(source, offsets, target)
    offsets[...] = source.size   # LoadRun loads from its own copy of the offsets
    loads.run()
    np.testing.assert_array_equal(target, expected)
    assert raw[0] == 0 and raw[-1] == 0   # nothing written outside target
    LoadRun(source, np.zeros(0, offset_dtype), np.zeros(0, dtype)).run()   # nothing to load


def test_load_run_rejects_what_it_cannot_load():
    a, offsets = np.arange(64, dtype=np.float32), np.zeros(8, np.int64)
    target = np.empty(8, np.float32)
    with pytest.raises(TypeError, match="source: expected a numpy.ndarray, got list"):
        LoadRun([1.0, 2.0], offsets, target)
    with pytest.raises(ValueError, match="source, target: expected C-contiguous, aligned arrays"):
        LoadRun(a[::2], offsets, target)
    with pytest.raises(ValueError, match="source, target: expected C-contiguous, aligned arrays"):
        LoadRun(a, offsets, np.zeros(40, np.uint8)[1:33].view(np.float32))
    with pytest.raises(ValueError, match="target: expected elements of source's size, 1, 2, 4 or 8 bytes; got 8 "
                                         "and 4"):
        LoadRun(a, offsets, np.empty(8, np.float64))
    with pytest.raises(ValueError, match="target: expected elements of source's size, 1, 2, 4 or 8 bytes; got 16"):
        LoadRun(np.ones(4, np.complex128), offsets[:4], np.empty(4, np.complex128))
    readonly = np.empty(8, np.float32)
    readonly.flags.writeable = False
    with pytest.raises(ValueError, match="target: expected a writeable array, got a read-only one"):
        LoadRun(a, offsets, readonly)
    with pytest.raises(ValueError, match="target: must not overlap source"):
        LoadRun(a, offsets, a[8:16])
    with pytest.raises(ValueError, match=r"offsets: expected 8 \(target's size\), got 9"):
        LoadRun(a, np.zeros(9, np.int64), target)
    for bad in (-1, 64):
        span = rf"{min(bad, 0)}\.\.{max(bad, 0)}"
        with pytest.raises(ValueError, match=rf"offsets: expected values in \[0, 64\), got {span}"):
            LoadRun(a, np.array([0] * 7 + [bad]), target)


@pytest.mark.parametrize("name", ["G1", "G2", "G3", "G4", "G5", "G6"])
def test_each_gathers_loads_read_what_it_gathers(name):
    """meta["loads"] of the bench's gathers reads the addresses synet gathers from: the same values, in the
    output's memory order."""
    workload = next(w for w in bench.all_workloads() if w.name == name)
    candidates, meta = workload.make()
    source, offsets, target = meta["loads"]
    LoadRun(source, offsets, target).run()
    result = candidates["synet"]()
    if name == "G6":   # a transposed pair: the output laid out as the source, the loads in that memory order
        result = result.swapaxes(-1, -2)
        assert result.flags.c_contiguous
    np.testing.assert_array_equal(target, result)


def _workloads(copied: list) -> list:
    """A memory-bound workload (a copy of 1 MiB), a compute-bound one (FP32 FLOPs, no bytes), one with both
    and a per-call one."""
    source = np.ones(1 << 17, np.uint32)
    target = np.empty_like(source)

    def memory():
        return {"synet": lambda: copied.append(np.copyto(target, source)),
                "synet x2": lambda: copy_run(source, target, 2)}

    def compute():
        return {"synet": lambda: peak_run("fp32_fma", 100), "synet x2": lambda: peak_run("fp32_fma", 50)}, \
            {"peak": "fp32_fma"}

    def gather():
        offsets = np.random.default_rng(0).integers(0, source.size, source.size)
        return memory(), {"loads": (source, offsets, np.empty_like(source))}

    per_step = peak_run("fp32_fma", 1)
    return [bench.Workload("M1", "a copy", memory, nbytes=2 * source.nbytes),
            bench.Workload("L1", "a copy with loads", gather, nbytes=2 * source.nbytes),
            bench.Workload("C1", "fp32 FMAs", compute, flops=int(100 * per_step)),
            bench.Workload("B1", "both", compute, nbytes=1 << 16, flops=int(100 * per_step)),
            bench.Workload("U1", "per call", memory, nbytes=2 * source.nbytes, micro=True)]


def test_limit_rows_are_timed_with_the_workload(monkeypatch):
    copied: list = []
    monkeypatch.setattr(bench, "all_workloads", lambda: _workloads(copied))
    monkeypatch.setattr(bench, "machine_limits", lambda: {"copy GB/s": 10.0, "read GB/s": 10.0,
                                                          "peak GFLOP/s": {}})
    rows = bench.run(repeats=2, target_s=1e-4, out=io.StringIO(), warm_s=1e-3)
    by = {(r["workload"], r["candidate"]): r for r in rows}
    assert copied   # the workload itself ran
    copy, fma = by[("M1", bench.COPY_LIMIT)], by[("C1", "limit: fp32_fma (same FLOPs)")]
    assert ("M1", "limit: fp32_fma (same FLOPs)") not in by and ("C1", bench.COPY_LIMIT) not in by
    for name, limit, bound in (("M1", copy, "memory"), ("C1", fma, "fp32_fma")):
        synet_row = by[(name, "synet")]
        assert synet_row["bound"] == bound
        assert synet_row["limit %"] == pytest.approx(100 * limit["ms"] / synet_row["ms"])
        assert "limit %" not in limit
    # two threads: the copy's time over what a second thread gains on the block copy, or half the peak loop's
    gain = by[("M1", bench.COPY_BLOCKS)]["ms"] / by[("M1", bench.COPY_BLOCKS_X2)]["ms"]
    assert by[("M1", "synet x2")]["limit %"] == pytest.approx(100 * copy["ms"] / gain / by[("M1", "synet x2")]["ms"])
    assert by[("C1", "synet x2")]["limit %"] == pytest.approx(100 * fma["ms"] / 2 / by[("C1", "synet x2")]["ms"])
    assert ("C1", bench.COPY_BLOCKS) not in by and ("C1", bench.COPY_BLOCKS_X2) not in by
    assert by[("M1", "synet")]["dram limit %"] == pytest.approx(
        100 * (1 << 20) / 10e9 / (by[("M1", "synet")]["ms"] / 1e3))
    both = {r["candidate"]: r for r in rows if r["workload"] == "B1"}
    slower = max((both[bench.COPY_LIMIT], both["limit: fp32_fma (same FLOPs)"]), key=lambda r: r["ms"])
    assert both["synet"]["limit %"] == pytest.approx(100 * slower["ms"] / both["synet"]["ms"])
    assert both["synet"]["bound"] == ("memory" if slower is both[bench.COPY_LIMIT] else "fp32_fma")
    # a gather's loads alone: a share of their own (two threads: half their time), never the bound
    loads, copy_ms = by[("L1", bench.LOADS_LIMIT)]["ms"], by[("L1", bench.COPY_LIMIT)]["ms"]
    gain = by[("L1", bench.COPY_BLOCKS)]["ms"] / by[("L1", bench.COPY_BLOCKS_X2)]["ms"]
    for label, threads in (("synet", 1), ("synet x2", 2)):
        row = by[("L1", label)]
        assert row["loads %"] == pytest.approx(100 * loads / threads / row["ms"])
        assert row["bound"] == "memory"
        assert row["limit %"] == pytest.approx(100 * copy_ms / (gain if threads == 2 else 1) / row["ms"])
    assert not any("loads %" in r for r in rows if r["workload"] != "L1")
    assert ("M1", bench.LOADS_LIMIT) not in by
    text = io.StringIO()
    bench.print_table(rows, text)
    assert f"; loads {by[('L1', 'synet')]['loads %']:.0f}%" in text.getvalue()
    assert not any(r["candidate"].startswith("limit:") for r in rows if r["workload"] == "U1")
    assert "limit %" not in by[("U1", "synet")]
