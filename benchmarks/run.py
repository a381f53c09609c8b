"""Run synet's workload suite with more repeats than `python -m synet bench` and save JSON.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/run.py --repeats 15 --json bench.json

The workloads live in ``synet/benchmarks/`` (so the installed package carries them); this
script and ``asv_suite.py`` are thin front ends.
"""

import argparse

from synet import benchmarks


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="comma-separated workload names")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    only = args.only.split(",") if args.only else None
    benchmarks.run(only=only, repeats=args.repeats, json_path=args.json)


if __name__ == "__main__":
    main()
