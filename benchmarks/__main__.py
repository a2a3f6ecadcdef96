"""`make bench`: run every benchmark, print the ratio tables, write benchmarks/results/*.json."""

from __future__ import annotations

import argparse

from . import bench_runtime


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    args = parser.parse_args()
    report = bench_runtime.main(quick=args.quick)
    report.print()
    print(f"\nwrote {report.save()}")


if __name__ == "__main__":
    main()
