"""Render a bench JSON (``python -m synet bench --json PATH``) as the README's reST table.

    python benchmarks/table.py bench.json
"""

import json
import sys


def main(path: str) -> None:
    with open(path) as f:
        report = json.load(f)
    rows: dict[str, dict[str, dict]] = {}
    for row in report["rows"]:
        rows.setdefault(row["workload"], {})[row["candidate"]] = row
    head = ("id", "synet 1T", "rate", "2 threads", "peers: time / synet (1 thread)")
    table = []
    for name, candidates in rows.items():
        synet = candidates["synet"]
        rate = f"{synet['GFLOP/s']:.0f} GFLOP/s" if "GFLOP/s" in synet else f"{synet.get('GB/s', 0):.1f} GB/s"
        two = candidates.get("synet x2")
        speedup = f"{synet['ms'] / two['ms']:.2f}x" if two else ""
        peers = "; ".join(f"{label} {row['vs_synet']:.2f}x" for label, row in candidates.items()
                          if label not in ("synet", "synet x2"))
        table.append((name, f"{synet['ms']:.3f} ms", rate, speedup, peers))
    widths = [max(len(r[i]) for r in table + [head]) for i in range(len(head))]
    rule = "  ".join("=" * w for w in widths)
    print(rule)
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip())
    print(rule)
    for r in table:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    print(rule)
    meta = report["meta"]
    print(f"\n{meta['date']}, {meta['cpu']}, median of {meta['repeats']} rounds")


if __name__ == "__main__":
    main(sys.argv[1])
