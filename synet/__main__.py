"""python -m synet {info,bench,selftest}."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m synet", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("info",
                        help="version, compiler, flags, OpenMP, CPU levels (compiled, supported, chosen), threads")
    bench = commands.add_parser("bench", help="run the built-in workloads against installed peers")
    bench.add_argument("--only", help="comma-separated workload names, e.g. G1,B2")
    bench.add_argument("--repeats", type=int, default=7, help="timed rounds per candidate (median reported)")
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
