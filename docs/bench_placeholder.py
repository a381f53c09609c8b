"""Draws docs/_static/bench.png from the benchmark figures that performance.rst quotes.

A stand-in until ``python -m synet bench --plot docs/_static/bench.png`` draws the figure from a
fresh run: the numbers below are copied from the table of docs/performance.rst (time of each peer
over synet's 1-thread time, in one run; > 1: synet is faster). Needs matplotlib:
``python docs/bench_placeholder.py``.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PEERS = ("NumPy / ml_dtypes", "PyTorch", "PyTorch bf16", "onnxruntime")
COLORS = ("#4c72b0", "#dd8452", "#c44e52", "#55a868")
# workload: {peer: time / synet}
RATIOS = {
    "G1 gather f32": {"NumPy / ml_dtypes": 6.26, "PyTorch": 2.82, "onnxruntime": 2.42},
    "G2 gather f32, inner 1": {"NumPy / ml_dtypes": 9.97, "PyTorch": 20.35, "onnxruntime": 22.16},
    "G3 gather u8": {"NumPy / ml_dtypes": 8.05, "PyTorch": 3.28, "onnxruntime": 2.67},
    "G4 gather, set_index": {"NumPy / ml_dtypes": 15.24, "PyTorch": 25.81, "onnxruntime": 52.70},
    "B1 f32 -> bf16": {"NumPy / ml_dtypes": 3.17, "PyTorch": 4.03},
    "B2 bf16 -> f32": {"NumPy / ml_dtypes": 3.37, "PyTorch": 7.34},
    "Q1 u8+u8->u8": {"NumPy / ml_dtypes": 23.29, "PyTorch": 2.39, "onnxruntime": 1.56},
    "Q2 u8+u8->u8, batch 8": {"NumPy / ml_dtypes": 32.99, "PyTorch": 2.35, "onnxruntime": 1.43},
    "Q3 u8+u8->f32": {"NumPy / ml_dtypes": 5.76},
    "Q4 u8+u8->u8 relu": {"NumPy / ml_dtypes": 26.48, "PyTorch": 2.82},
    "Q5 f32+u8->u8": {"NumPy / ml_dtypes": 7.52},
    "Q6 per-channel, relu": {"NumPy / ml_dtypes": 33.69, "PyTorch": 3.32},
    "D1 NCHW k4 s2": {"PyTorch": 7.50, "PyTorch bf16": 4.97, "onnxruntime": 7.10},
    "D2 NHWC k2 s2": {"PyTorch": 2.96, "PyTorch bf16": 1.15},
    "D3 NHWC 1x1, bf16": {"PyTorch": 5.89, "PyTorch bf16": 2.40},
    "D4 depthwise": {"PyTorch": 4.20, "PyTorch bf16": 14.96, "onnxruntime": 3.12},
    "D5 NHWC k4 s2": {"PyTorch": 4.52, "PyTorch bf16": 0.70},
}


def main(path: Path = Path(__file__).parent / "_static" / "bench.png") -> None:
    names = list(RATIOS)
    height = 0.8 / len(PEERS)
    fig, ax = plt.subplots(figsize=(8, 8.5), dpi=100)
    for p, (peer, color) in enumerate(zip(PEERS, COLORS)):
        ys = [i + (p - (len(PEERS) - 1) / 2) * height for i, name in enumerate(names) if peer in RATIOS[name]]
        xs = [RATIOS[name][peer] for name in names if peer in RATIOS[name]]
        ax.barh(ys, [x - 1.0 for x in xs], left=1.0, height=height, color=color, label=peer)  # bars from 1
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlim(0.5, 80)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlabel("peer time / synet time, 1 thread (> 1: synet is faster)")
    ax.set_title("synet against its peers (placeholder figure: numbers of docs/performance.rst)", fontsize=10)
    ax.grid(axis="x", which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    print(f"saved {path}")


if __name__ == "__main__":
    main()
