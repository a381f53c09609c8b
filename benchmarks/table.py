"""Render a bench JSON (``python -m synet bench --json PATH``) as the docs' reST table.

    python benchmarks/table.py bench.json [before.json]

With a second file, a column gives the "before" run's synet time of each workload (as it was then).
"""

import json
import sys


def load(path: str) -> tuple[dict, dict[str, dict[str, dict]]]:
    """The report and its rows by workload and candidate."""
    with open(path) as f:
        report = json.load(f)
    rows: dict[str, dict[str, dict]] = {}
    for row in report["rows"]:
        rows.setdefault(row["workload"], {})[row["candidate"]] = row
    return report, rows


def time_of(row: dict) -> str:
    return f"{row['ms'] * 1e3:.2f} us" if row.get("micro") else f"{row['ms']:.3f} ms"


def main(path: str, before_path: str | None = None) -> None:
    report, rows = load(path)
    before = load(before_path)[1] if before_path else {}
    head = ("id", "synet 1T", *(("before",) if before else ()), "rate", "limit", "2 threads",
            "peers: time / synet (1 thread)")
    table = []
    for name, candidates in rows.items():
        synet = candidates["synet"]
        if synet.get("micro"):
            rate = ""
        elif "GFLOP/s" in synet:
            rate = f"{synet['GFLOP/s']:.0f} GFLOP/s"
        else:
            rate = f"{synet.get('GB/s', 0):.1f} GB/s"
        limit = f"{synet['limit %']:.0f} % {synet['bound']}" if "limit %" in synet else ""
        if "loads %" in synet:   # a gather's loads alone, in the output's order
            limit += f" (loads {synet['loads %']:.0f} %)"
        two = candidates.get("synet x2")
        speedup = f"{synet['ms'] / two['ms']:.2f}x" if two else ""
        copy, copy2 = candidates.get("limit: copy in blocks (same bytes)"), \
            candidates.get("limit: copy in blocks x2 (same bytes)")
        if two and synet.get("bound") == "memory" and copy and copy2:   # what two threads gain on a copy
            speedup += f" (copy {copy['ms'] / copy2['ms']:.2f}x)"
        peers = "; ".join(f"{label} {row['vs_synet']:.2f}x" for label, row in candidates.items()
                          if label not in ("synet", "synet x2") and not label.startswith("limit:"))
        then = (time_of(before[name]["synet"]) if name in before else "new",) if before else ()
        table.append((name, time_of(synet), *then, rate, limit, speedup, peers))
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
    main(*sys.argv[1:3])
