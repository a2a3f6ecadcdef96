"""Write benchmarks/RESULTS.md (tables of ratios) and its PNG plots from benchmarks/results/*.json.

    python -m benchmarks.report          # after `make bench` (which runs it last)

Every figure comes from the JSON files of one `make bench` run; nothing is typed in by hand.
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Any

from ._harness import RESULTS

HERE = Path(__file__).parent
OUT = HERE / "RESULTS.md"


def _load(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _ratio_table(rows: list[dict[str, Any]], unit: str = "us") -> list[str]:
    lines = [
        f"| workload | subject | {unit} | against | {unit} | ratio | goal |",
        "|---|---|---:|---|---:|---:|---|",
    ]
    for r in rows:
        target = r.get("target")
        verdict = (
            "" if target is None else (f"<= {target:g} " + ("ok" if r["ratio"] <= target else "**over**"))
        )
        lines.append(
            f"| {r['workload']} | {r['subject']} | {r['subject_us']:.1f} | {r['floor']} | "
            f"{r['floor_us']:.1f} | {r['ratio']:.2f}x | {verdict} |"
        )
    return lines


def _goal(r: dict[str, Any]) -> str:
    """A resilience row's goal and whether it was met: an exact count, a band or a bound."""
    target, low = r.get("target"), r.get("low")
    ratio = r["subject_us"] / r["floor_us"]  # not the JSON's, which is rounded to 3 places
    if r.get("exact"):
        goal, met = f"= {r['floor_us']:g} exactly", r["subject_us"] == r["floor_us"]
    elif target is None:
        return ""
    elif low is not None:
        goal, met = f"{low:g}-{target:g}x", low <= ratio <= target
    else:
        goal, met = f"<= {target:g}x", ratio <= target
    return f"{goal} " + ("ok" if met else "**missed**")


def _resilience_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| figure | subject | value | against | value | unit | ratio | goal |",
        "|---|---|---:|---|---:|---|---:|---|",
    ]
    for r in rows:
        digits = 0 if r["unit"] in ("instructions", "calls", "executions", "calls at once") else 1
        lines.append(
            f"| {r['workload']} | {r['subject']} | {r['subject_us']:,.{digits}f} | {r['floor']} | "
            f"{r['floor_us']:,.{digits}f} | {r['unit']} | {r['subject_us'] / r['floor_us']:.4f}x | {_goal(r)} |"
        )
    lines.append("")
    lines += [f"- {r['workload']}: {r['note']}" for r in rows if r["note"]]
    return lines


def _search_section(search: dict[str, Any]) -> list[str]:
    """Tool search: quality on the BFCL catalog (both halves of the split), the ablation, speed
    at 1x/10x/100x (wall as a server sees it, gc off, CPU), odd queries, tokens."""
    catalog = search["catalog"]
    lines = [
        "## Tool search (benchmarks/bench_search.py)",
        "",
        f"Run {search['when']}. The BFCL catalog: {catalog['tools']:,} function docs pooled, "
        f"{catalog['query_answer_pairs']:,} (user request, answer) pairs, split in a tuning half "
        f"({catalog.get('tuning', '?')}) on which the search's constants were chosen and a held-out "
        f"half ({catalog.get('held_out', '?')}). A hit is a result that is the function the answer calls.",
        "",
        "| search | requests | r@1 | r@5 | r@10 | MRR | exact doc r@5 |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for name, halves in search["quality"].items():
        for half, q in halves.items():
            lines.append(
                f"| {name} | {half} | {q['function_recall@1']:.3f} | {q['function_recall@5']:.3f} | "
                f"{q['function_recall@10']:.3f} | {q['function_mrr']:.3f} | {q['doc_recall@5']:.3f} |"
            )
    lines += ["", "| ranking | r@5 all | r@5 held-out |", "|---|---:|---:|"]
    for name, r in search.get("ablation", {}).items():
        lines.append(f"| {name} | {r['all']:.4f} | {r['held-out']:.4f} |")
    lines += [
        "",
        "Latency in ms, p50 / p99 over the requests: wall with the garbage collector on (as a server "
        "sees it), wall with it off, and CPU time (`time.thread_time`: without the time this shared "
        "2-core machine's other processes took the core; its load average is given). The floor, "
        "timed after each search in the same loop: a fixed piece of pure Python arithmetic that "
        "takes the median search's CPU time; its wall p99 is what this machine adds to anything that "
        "runs that long. Goal: p99 under 2 ms at 2,400 tools and under 20 ms at 240,000; an update "
        "under 1 ms.",
        "",
        "| tools | build s | MB | load | search wall | gc off | CPU | fixed work wall | update wall "
        "| update CPU | plain BM25 wall | p50 x plain BM25 |",
        "|---:|---:|---:|---|---|---|---|---|---|---|---|---:|",
    ]
    for row in search["speed"]:
        w, g, c = row["search_wall"], row["search_wall_gc_off"], row["search_cpu"]
        uw, uc = row["update_wall"], row["update_cpu"]
        base = row.get("plain_bm25_wall")
        versus = f"{base['p50_ms']:.2f} / {base['p99_ms']:.2f}" if base else "(not run: seconds a query)"
        ratio = f"{w['p50_ms'] / base['p50_ms']:.3f}x" if base else ""
        f = row.get("fixed_work_wall")
        fixed = f"{f['p50_ms']:.2f} / {f['p99_ms']:.2f}" if f else ""
        lines.append(
            f"| {row['tools']:,} | {row['build_s']:.2f} | {row['memory_mb']} | {row['load_average'][0]} | "
            f"{w['p50_ms']:.2f} / {w['p99_ms']:.2f} | {g['p50_ms']:.2f} / {g['p99_ms']:.2f} | "
            f"{c['p50_ms']:.2f} / {c['p99_ms']:.2f} | {fixed} | {uw['p50_ms']:.2f} / {uw['p99_ms']:.2f} | "
            f"{uc['p50_ms']:.2f} / {uc['p99_ms']:.2f} | {versus} | {ratio} |"
        )
    edge = [row for row in search["speed"] if "edge_median_ms" in row]
    if edge:
        names = list(edge[0]["edge_median_ms"])
        lines += ["", "Odd queries (each gets a list: tests/test_search.py), median ms of 9 runs:"]
        lines += ["", "| tools | " + " | ".join(names) + " |", "|---:|" + "---:|" * len(names)]
        for row in edge:
            cells = " | ".join(f"{row['edge_median_ms'][n]:.2f}" for n in names)
            lines.append(f"| {row['tools']:,} | {cells} |")
    tokens = search.get("tokens")
    if tokens:
        lines += [
            "",
            "| tools payload (o200k_base tokens) | tokens | fewer than sent whole |",
            "|---|---:|---:|",
        ]
        for provider, count in tokens["everything"].items():
            lines.append(f"| {provider}, every tool | {count:,} | |")
        for form, count in tokens["deferred"].items():
            lines.append(f"| {form}, deferred | {count:,} | {tokens['fewer'][form]:.1%} |")
    lines.append("")
    return lines


def _plots(w5: dict[str, Any] | None, curves: dict[str, Any] | None) -> list[str]:
    """Draw the PNGs; returns their file names (without matplotlib: the ones already drawn)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # the plots drawn last time stay (and so do their lines in RESULTS.md)
        print("no plots drawn: matplotlib is not installed (the bench extra)")
        return [
            p for p in ("w5_latency.png", "fanout_scaling.png", "memory_per_call.png") if (HERE / p).exists()
        ]
    made = []
    if w5 and w5.get("runs"):
        fig, axes = plt.subplots(1, 3, figsize=(16, 5), sharey=True)
        groups = [("uvicorn", "asyncio"), ("uvicorn", "uvloop"), ("hypercorn", "trio")]
        for ax, (server, loop) in zip(axes, groups, strict=True):
            for result in w5["runs"]:
                if result["server"] != server or result["loop"] != loop or not result["runs"]:
                    continue
                runs = sorted(result["runs"], key=lambda r: r["requests"])
                run = runs[len(runs) // 2]
                points = [(float(p), v) for p, v in run["percentiles_us"].items() if float(p) < 100]
                points.append((100.0, run["max_us"]))  # wrk's percentile(100) reads 0: use its max
                xs = [p for p, _ in points]
                ys = [v / 1000 for _, v in points]
                ax.plot(xs, ys, marker="o", label=result["mode"])
            ax.set_title(f"{server} ({loop})")
            ax.set_xlabel("percentile")
            ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend()
        axes[0].set_ylabel("latency, ms (log)")
        fig.suptitle("W5: request latency by percentile (200 connections, 4 tool calls a request)")
        fig.tight_layout()
        fig.savefig(HERE / "w5_latency.png", dpi=90)
        plt.close(fig)
        made.append("w5_latency.png")
    if curves:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for name, points in curves["fanout_us_per_call"].items():
            if points:
                sizes = sorted(points, key=int)
                ax.plot([int(s) for s in sizes], [points[s] for s in sizes], marker="o", label=name)
        ax.set_xscale("log")
        ax.set_xlabel("calls in one fan-out")
        ax.set_ylabel("us per call")
        ax.set_title("Fan-out scaling (add(a, b) from JSON text)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(HERE / "fanout_scaling.png", dpi=90)
        plt.close(fig)
        made.append("fanout_scaling.png")

        fig, ax = plt.subplots(figsize=(7, 4.5))
        memory = curves["bytes_per_parked_call"]
        names = [n for n in memory if memory[n]]
        sizes = sorted({int(s) for n in names for s in memory[n]})
        width = 0.8 / max(1, len(names))
        for i, name in enumerate(names):
            ax.bar(
                [j + i * width for j in range(len(sizes))],
                [memory[name].get(str(s), memory[name].get(s, 0)) for s in sizes],  # type: ignore[call-overload]
                width,
                label=name,
            )
        ax.set_xticks([j + width * (len(names) - 1) / 2 for j in range(len(sizes))])
        ax.set_xticklabels([f"{s:,} parked" for s in sizes])
        ax.set_ylabel("bytes per in-flight call (tracemalloc)")
        ax.set_title("Memory per in-flight call")
        ax.legend()
        fig.tight_layout()
        fig.savefig(HERE / "memory_per_call.png", dpi=90)
        plt.close(fig)
        made.append("memory_per_call.png")
    return made


def _cluster_section(cluster: dict[str, Any]) -> list[str]:
    """Ray on a multi-node cluster (benchmarks/bench_ray_cluster.py, in placement.json)."""
    scaling = cluster["scaling"]
    low, high = scaling["load_average"]
    lines = [
        "## Ray on a cluster (benchmarks/bench_ray_cluster.py)",
        "",
        f"Run {cluster['when']}, on Ray's `ray.cluster_utils.Cluster`: {cluster['nodes']}. "
        f'A CPU-bound tool ({scaling["spin_ms"]:g} ms of CPU a call), `Ray(replicas=N, scheduling="spread")`: '
        "one replica per node, N callers making calls one after another; medians of "
        f'{scaling["rounds"]} interleaved rounds. "Plain processes" is the same work in N processes '
        "without Ray, in the same rounds: what the machine gives N CPU-bound workers at that moment. "
        f"The machine has {scaling['cores']} cores for every node, this driver and other programs (load "
        f"average {low:.1f} -> {high:.1f} during the run): past what it gives, more replicas cannot "
        "add calls/s, and the figure shows the machine's bound, not Ray's or the runtime's.",
        "",
        "| replicas | nodes | calls/s | x 1 replica | plain processes x 1 | of what the machine gives | p50 ms | p99 ms | p99 x 1 replica |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in scaling["rows"]:
        lines.append(
            f"| {row['replicas']} | {row['nodes']} | {row['calls_per_s']:.1f} | {row['calls_x1']:.2f}x | "
            f"{row['plain_x1']:.2f}x | {row['of_machine']:.2f} | {row['p50_ms']:.1f} | {row['p99_ms']:.1f} | "
            f"{row['p99_x1']:.2f}x |"
        )
    checks = cluster["health_checks"]
    lines += [
        "",
        "Failover: one replica serving 4 callers; its node is removed. Serving again = from the removal to "
        "the first answer from the new replica (on a node that is left). A drained node (SIGTERM to its "
        "raylet) is reported dead by Ray at once; a crashed one (SIGKILL) is noticed when calls to it hang "
        f"up, or after {checks['health_check_failure_threshold']} missed health checks "
        f"{checks['health_check_period_ms'] / 1000:g} s apart (Ray's default: 5 x 3 s).",
        "",
        "| node | serving again s | calls UNAVAILABLE | other failures | calls |",
        "|---|---:|---:|---:|---:|",
    ]
    for f in cluster["failover"]:
        lines.append(
            f"| {f['how']} | {f['serving_again_s']:.2f} | {f['unavailable_calls']} | {f['other_failures']} | "
            f"{f['calls']} |"
        )
    lines.append("")
    return lines


def write() -> Path:
    runtime = _load("runtime")
    peers = _load("peers")
    w5 = _load("w5")
    curves = _load("curves")
    plots = _plots(w5, curves)
    lines = [
        "# Benchmark results",
        "",
        f"Written by `make bench` ({time.strftime('%Y-%m-%d %H:%M')} UTC, Python {platform.python_version()}, "
        f"{platform.machine()}) from `benchmarks/results/*.json`; each section says when its "
        "benchmark ran (`python -m benchmarks --only X` reruns one). Ratios compare subjects "
        "measured in the same run, interleaved; on a shared 2-core machine single figures move "
        "by 10-50% between runs, the ratios less.",
        "",
    ]
    if w5 and w5.get("rows"):
        lines += [
            "## W5: agent server under load",
            "",
            f"Run {w5['when']}.",
            "",
            f"wrk, {w5['connections']} connections, loopback; each request is one assistant message with 4 tool "
            "calls (async I/O 2 ms, CPU-bound sync, small sync, async that raises for one argument in ten; "
            "one body in ten has malformed arguments). One server process; medians of the runs. The floor "
            "calls the functions directly on the same server and loop (sync ones in a thread). "
            "Goal (docs/ARCHITECTURE.md 4): req/s >= 0.9x and p99 <= 1.2x the floor's, on uvicorn's default loop too.",
            "",
            "| server | req/s | p50 ms | p99 ms | max ms | CPU us/req | req/s x floor | p99 x floor | CPU x floor | errors |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for row in w5["rows"]:
            lines.append(
                f"| {row['label']} | {row['rps']:.0f} | {row['p50_ms']:.1f} | {row['p99_ms']:.1f} | "
                f"{row['max_ms']:.0f} | {row['cpu_us_per_request']:.0f} | {row.get('rps_x_floor', 0):.2f} | "
                f"{row.get('p99_x_floor', 0):.2f} | {row.get('cpu_x_floor', 0):.2f} | {row['errors']} |"
            )
        lines.append("")
        if "w5_latency.png" in plots:
            lines += ["![W5 latency by percentile](w5_latency.png)", ""]
        if w5.get("embedding"):
            lines += [
                "### The two asyncio embeddings, one request at a time",
                "",
                "Sequential `call_many` round trips from an asyncio task: `risky(n=1)`, an async tool",
                "that cannot suspend (served in the asyncio task in guest mode), and `lookup`, a sync",
                "tool (a worker thread, reached through trio):",
                "",
                "| loop | tool | calls per call_many | open_asyncio_runtime (guest) us | RuntimeThread us |",
                "|---|---|---:|---:|---:|",
            ]
            for row in w5["embedding"]:
                lines.append(
                    f"| {row['loop']} | {row.get('tool', 'risky')} | {row['batch']} | {row['guest_us']:.0f} | "
                    f"{row['thread_us']:.0f} |"
                )
            lines.append("")
    if peers:
        lines += ["## Against the peers (benchmarks/bench_peers.py)", "", f"Run {peers['when']}.", ""]
        lines += _ratio_table(peers["rows"])
        lines.append("")
    if curves:
        lines += ["## Fan-out scaling and memory per in-flight call", "", "Run with the peers' table.", ""]
        fanout = curves["fanout_us_per_call"]
        sizes = sorted({int(s) for d in fanout.values() for s in d})
        lines += ["| calls | " + " | ".join(f"{n} us/call" for n in fanout if fanout[n]) + " |"]
        lines += ["|---:|" + "---:|" * sum(1 for n in fanout if fanout[n])]
        for s in sizes:
            cells = [f"{fanout[n][str(s)]:.1f}" for n in fanout if fanout[n]]
            lines.append(f"| {s:,} | " + " | ".join(cells) + " |")
        lines.append("")
        memory = curves["bytes_per_parked_call"]
        lines += ["| parked calls | " + " | ".join(f"{n} bytes/call" for n in memory if memory[n]) + " |"]
        lines += ["|---:|" + "---:|" * sum(1 for n in memory if memory[n])]
        for s in sorted({int(s) for d in memory.values() for s in d}):
            cells = [f"{memory[n][str(s)]:.0f}" for n in memory if memory[n]]
            lines.append(f"| {s:,} | " + " | ".join(cells) + " |")
        lines.append("")
        for png, title in (("fanout_scaling.png", "Fan-out scaling"), ("memory_per_call.png", "Memory")):
            if png in plots:
                lines += [f"![{title}]({png})", ""]
    if runtime:
        lines += [
            "## The runtime against its floors (benchmarks/bench_runtime.py)",
            "",
            f"Run {runtime['when']}.",
            "",
        ]
        lines += _ratio_table(runtime["rows"])
        lines += [
            "",
            "floor_a: cached msgspec decode + direct call + encode. floor_b: floor_a behind one trio "
            "memory-channel hop with a trio.Event reply. floor_c: floor_b + one OpenTelemetry SDK span.",
            "",
        ]
    streaming = _load("streaming")
    if streaming:
        lines += [
            "## Streaming tools and results kept whole (benchmarks/bench_streaming.py)",
            "",
            f"Run {streaming['when']}.",
            "",
        ]
        lines += _ratio_table(streaming["rows"])
        lines += [
            "",
            "task+chan: the tool's generator driven by a trio task of its own, its chunks through a "
            "trio memory channel (buffer 8) to the reader (one hop, no runtime). join: the generator "
            "driven directly, its chunks joined. sha256: the 50 MB text encoded and hashed 1 MiB at a "
            "time in one worker thread (what keeping it cannot avoid). 1 ms tick: a ticker's period "
            "(the loop's longest step while the result was kept, its work in worker threads).",
            "",
        ]
    code = _load("code")
    if code:
        lines += [
            "## Code mode (benchmarks/bench_code.py)",
            "",
            f"Run {code['when']}.",
            "",
        ]
        lines += _ratio_table(code["rows"])
        lines += [
            "",
            "rt.call / call_many: the same calls made directly. feed_run: the sandbox's own run of the "
            "program `1` (a session of a warm pool checked out, fed, given back, in one worker thread). "
            "A call from a program costs two sandbox turns (the call's stop, then its future's), each a "
            "round trip to the worker process through a kept thread. per_batch=8: the gather on a "
            "runtime with `Budget(per_batch=8)`, where a program's calls are one batch (8 at once, the "
            "others wait their turn), against `call_many` under the same budget.",
            "",
        ]
    search = _load("search")
    if search:
        lines += _search_section(search)
    mcp = _load("mcp")
    if mcp:
        lines += ["## MCP (benchmarks/bench_mcp.py)", "", f"Run {mcp['when']}.", ""]
        lines += _ratio_table(mcp["rows"])
        lines.append("")
        if mcp.get("instructions"):
            lines += [
                "The calling process's own work, in instructions (callgrind; wall-clock above moves "
                "5-10% between runs):",
                "",
            ]
            lines += _ratio_table(mcp["instructions"], "instructions")
            lines.append("")
    placement = _load("placement")
    if placement and placement.get("rows"):
        lines += [
            "## Placement (benchmarks/bench_placement.py)",
            "",
            f"Run {placement['when']}. The same function in-process (the floor: an async tool), in "
            "`Subprocess` workers and on local Ray replicas, in one runtime; warm calls sequential, "
            "interleaved with the floor, medians. The note says what each row's goal is about "
            "(docs/ARCHITECTURE.md 4); rows with no floor of their own show their figure in us.",
            "",
            "| workload | subject | us | against | us | note |",
            "|---|---|---:|---|---:|---|",
        ]
        for r in placement["rows"]:
            lines.append(
                f"| {r['workload']} | {r['subject']} | {r['subject_us']:,.1f} | {r['floor']} | "
                f"{r['floor_us']:,.1f} | {r['note']} |"
            )
        lines.append("")
    if placement and placement.get("cluster"):
        lines += _cluster_section(placement["cluster"])
    resilience = _load("resilience")
    if resilience:
        lines += [
            "## Resilience policies (benchmarks/bench_resilience.py)",
            "",
            f"Run {resilience['when']}. Issue 23's figures, each against what it must match in the same "
            "run: W1 is `rt.call` of an async tool, one call after another (as in the runtime's table); "
            "counts are exact; the Redis limit is counted over two OS processes sharing one "
            "`redis-server`; instructions are callgrind's (benchmarks/w1_instructions.py).",
            "",
        ]
        lines += _resilience_table(resilience["rows"])
        lines.append("")
    OUT.write_text("\n".join(lines))
    return OUT


if __name__ == "__main__":
    print(f"wrote {write()}")
