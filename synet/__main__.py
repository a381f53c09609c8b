"""python -m synet {info,bench,selftest}."""

from __future__ import annotations

import argparse
import os
import sys


def _positive_int(text: str) -> int:
    """argparse type: an int >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an int >= 1, got {text!r}")
    return value


def _writable_path(option: str, path: str | None) -> str | None:
    """Why a result file at `path` could not be written (checked before a run of minutes), or None."""
    if path is None:
        return None
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return f"{option}: {path!r} is a directory"
    if not os.path.isdir(folder):
        return f"{option}: no directory {folder!r}"
    if not os.access(folder, os.W_OK) or os.path.exists(path) and not os.access(path, os.W_OK):
        return f"{option}: cannot write {path!r}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m synet", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("info",
                        help="version, compiler, flags, OpenMP, CPU levels (compiled, supported, chosen), threads")
    bench = commands.add_parser("bench", help="run the built-in workloads against installed peers")
    bench.add_argument("--only", help="comma-separated workload names, e.g. G1,B2")
    bench.add_argument("--repeats", type=_positive_int, default=7, help="timed rounds per candidate (median reported)")
    bench.add_argument("--json", metavar="PATH", help="also save the results as JSON")
    bench.add_argument("--plot", metavar="PNG", help="also draw synet's speed-up over each peer (needs matplotlib)")
    bench.add_argument("--list", action="store_true", help="list the workloads and exit")
    bench.add_argument("--isa", metavar="LEVELS",
                       help="run the suite at each CPU level ('all' or e.g. avx2,avx512): one subprocess per level "
                            "with SYNET_MAX_ISA set and the torch peers restricted to the same instructions")
    bench.add_argument("--simd", metavar="PATH", help="add Simd (a libSimd.so built by you) as the 'simd' peer "
                                                      "where it can run the workload; also SYNET_BENCH_SIMD")
    commands.add_parser("selftest", help="quick correctness check of every op against NumPy")
    args = parser.parse_args(argv)

    if args.command == "info":
        import synet

        synet.show_config()
        return 0
    if args.command == "bench":
        from synet import benchmarks
        from synet.benchmarks import simd_peer

        simd_peer.configure(args.simd)
        if args.list:
            for workload in benchmarks.all_workloads():
                print(f"{workload.name:<5}{workload.title}")
            return 0
        only = [name.strip() for name in args.only.split(",")] if args.only else None
        names = [workload.name for workload in benchmarks.all_workloads()]
        unknown = [name for name in only or () if name not in names]
        if unknown:
            parser.error(f"--only: unknown workloads {unknown}; expected some of {', '.join(names)}")
        for problem in (_writable_path("--json", args.json), _writable_path("--plot", args.plot)):
            if problem:
                parser.error(problem)
        if args.plot:
            if args.isa:
                parser.error("--plot draws one run's speed-ups; run it without --isa")
            try:
                import matplotlib  # type: ignore[import-not-found, unused-ignore]  # noqa: F401  (the bench extra)
            except ImportError:
                parser.error("--plot needs matplotlib (pip install 'synet[bench]')")
        if args.isa:
            from synet._kernels import LEVELS

            levels = list(LEVELS) if args.isa == "all" else [lv.strip() for lv in args.isa.split(",")]
            unknown = [lv for lv in levels if lv not in LEVELS]
            if unknown:
                parser.error(f"--isa: unknown levels {unknown}; expected 'all' or some of {', '.join(LEVELS)}")
            benchmarks.run_levels(levels, only=only, repeats=args.repeats, json_path=args.json)
            return 0
        rows = benchmarks.run(only=only, repeats=args.repeats, json_path=args.json)
        simd_peer.print_summary()
        if args.plot:
            benchmarks.plot(rows, args.plot)
        return 0
    from synet._selftest import selftest

    return 0 if selftest() else 1


if __name__ == "__main__":
    sys.exit(main())
