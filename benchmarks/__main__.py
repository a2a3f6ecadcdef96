"""`make bench`: run every benchmark, print the ratio tables, write benchmarks/results/*.json."""

from __future__ import annotations

import argparse


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    parser.add_argument(
        "--only",
        choices=[
            "runtime",
            "peers",
            "mcp",
            "placement",
            "streaming",
            "code",
            "server",
            "resilience",
            "detached",
            "search",
            "report",
        ],
        help="run one report (peers needs the bench extra)",
    )
    args = parser.parse_args()
    if args.only in (None, "runtime"):
        from . import bench_runtime

        report = bench_runtime.main(quick=args.quick)
        report.print()
        print(f"\nwrote {report.save()}")
    if args.only in (None, "mcp"):
        from . import bench_mcp  # starts MCP server processes (stdio and HTTP)

        report = bench_mcp.main(quick=args.quick)
        report.print()
        print(f"\nwrote {report.save()}")
    if args.only in (None, "placement"):
        from . import bench_placement  # starts worker processes and a local Ray (the ray extra)

        report = bench_placement.main(quick=args.quick)
        report.print()
        print(f"\nwrote {report.save()}")
    if args.only in (None, "streaming"):
        from . import bench_streaming  # streaming tools, and a 50 MB result kept whole

        report = bench_streaming.main(quick=args.quick)
        report.print()
        print(f"\nwrote {report.save()}")
    if args.only in (None, "code"):
        from . import bench_code  # programs in pydantic-monty's sandbox (the code extra)

        report = bench_code.main(quick=args.quick)
        report.print()
        print(f"\nwrote {report.save()}")
    if args.only in (None, "peers"):
        from . import bench_peers  # imports each peer only when it runs it

        report = bench_peers.main(quick=args.quick)
        report.print()
        print(f"\nwrote {report.save()}")
        bench_peers.curves(quick=args.quick)
    if args.only in (None, "server"):
        from . import bench_server  # W5: server processes under wrk

        bench_server.main(quick=args.quick)
    if args.only in (None, "resilience"):
        from . import bench_resilience  # starts a redis-server and worker processes; runs valgrind

        report = bench_resilience.main(quick=args.quick)
        report.print()
        print(f"\nwrote {report.save()}")
    if args.only in (None, "detached"):
        from . import bench_detached  # detached and deferred calls; starts a redis-server

        report = bench_detached.main(quick=args.quick)
        report.print()
        print(f"\nwrote {report.save()}")
    if args.only in (None, "search"):
        from . import bench_search  # the BFCL catalog (fetched once into .cache/), tiktoken's o200k_base

        report = bench_search.main(quick=args.quick)
        bench_search.show(report)
        print(f"\nwrote {report.save()}")
    if args.only in (None, "report"):
        from . import report as results_md

        print(f"wrote {results_md.write()}")


if __name__ == "__main__":
    main()
