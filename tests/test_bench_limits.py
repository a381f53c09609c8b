"""The bench's "% of limit": the limit is timed in the same rounds as the workload (a copy of its bytes, its
FLOPs as the peak loop), and the share is computed from those two times."""

import io

import numpy as np
import pytest

import synet.benchmarks as bench
from synet._kernels import PEAK_KINDS, copy_run, peak_run


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

    per_step = peak_run("fp32_fma", 1)
    return [bench.Workload("M1", "a copy", memory, nbytes=2 * source.nbytes),
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
    assert not any(r["candidate"].startswith("limit:") for r in rows if r["workload"] == "U1")
    assert "limit %" not in by[("U1", "synet")]
