"""Calls that outlive a request (issue 43, DESIGN.md 3.14): what a detached call and its journal
cost, as ratios measured in one run.

- a detached call against a plain one: `await (await rt.detach(call)).result()` against
  `await rt.call(call)` of the same async tool, on the default `MemoryStore` (the journal's
  writes in place, no I/O): the cost of the handle, the record and the run in a task of its own;
- a deferred call approved: `rt.call` (a `ToolPending`), `approve`, `result`, against a plain call;
- journaling per call on SQLite and on Redis: the same detached call on `SQLiteStore` (a file in a
  temporary folder, WAL) and on `RedisStore` (a `redis-server` this bench starts on loopback),
  against the detached call on memory; their rows also give the journal's time per call in us.

Each subject runs sequentially (one call after another, as W1), interleaved in rounds so drift
on a shared machine hits them alike; the figure is each subject's median over the rounds. A
plain call with nothing detached is W1 itself (benchmarks/w1_instructions.py holds it to its
instructions; the journal's code is not on its path).

    python -m benchmarks --only detached [--quick]
"""

from __future__ import annotations

import gc
import tempfile
from collections.abc import Callable
from pathlib import Path

import trio

from runtime import ToolCall, ToolPending, open_runtime, tool
from runtime.stores import MemoryStore, RedisStore, SQLiteStore, Store

from ._harness import Report, Row
from .bench_resilience import _rounds, redis_server

RAW = '{"a": 1, "b": 2}'


@tool
async def add(a: int, b: int) -> int:
    return a + b


@tool(requires_approval=True)
async def add_approved(a: int, b: int) -> int:
    return a + b


async def _seq(n: int, store: Callable[[], Store] | None, how: str) -> float:
    """Microseconds per call of `how` ("plain", "detached", "deferred") over `n` calls."""
    settings = {} if store is None else {"store": store()}
    async with open_runtime([add, add_approved], tracing=False, **settings) as rt:
        name = "add_approved" if how == "deferred" else "add"
        call = ToolCall(id="c1", name=name, arguments=RAW)

        async def one() -> None:
            if how == "plain":
                await rt.call(call)
            elif how == "detached":
                handle = await rt.detach(call)
                await handle.result()
            else:
                pending = await rt.call(call)
                assert isinstance(pending, ToolPending)
                handle = rt.detached(pending.detached_id)
                await handle.approve()
                await handle.result()

        await one()
        gc.collect()
        start = trio.current_time()
        for _ in range(n):
            await one()
        elapsed = trio.current_time() - start
    return elapsed / n * 1e6


def measure(n: int, store: Callable[[], Store] | None, how: str) -> Callable[[], float]:
    return lambda: trio.run(_seq, n, store, how)


def main(quick: bool = False) -> Report:
    report = Report("detached")
    n_memory, n_store, repeats = (300, 100, 3) if quick else (3000, 500, 5)
    with tempfile.TemporaryDirectory(prefix="bench-detached-") as folder, redis_server() as url:
        counter = iter(range(1_000_000))

        def sqlite() -> Store:
            return SQLiteStore(Path(folder) / f"journal-{next(counter)}.db")

        def redis() -> Store:
            assert url is not None
            return RedisStore(url, prefix=f"bench{next(counter)}:")

        subjects = {
            "plain": measure(n_memory, None, "plain"),
            "detached": measure(n_memory, MemoryStore, "detached"),
            "deferred": measure(n_memory, MemoryStore, "deferred"),
            "detached (memory, n_store)": measure(n_store, MemoryStore, "detached"),
            "detached on SQLite": measure(n_store, sqlite, "detached"),
        }
        if url is not None:
            subjects["detached on Redis"] = measure(n_store, redis, "detached")
        else:
            print("no redis-server (apt-get install redis-server): the Redis row is not measured")
        times = _rounds(subjects, repeats)
    plain, detached = times["plain"], times["detached"]
    report.add(Row("detached call / plain call (memory)", "detached", "plain", detached, plain))
    report.add(Row("deferred call, approved / plain (memory)", "deferred", "plain", times["deferred"], plain))
    base = times["detached (memory, n_store)"]
    for store in ("SQLite", "Redis"):
        subject = times.get(f"detached on {store}")
        if subject is None:
            continue
        report.add(
            Row(
                f"journaling per call on {store}",
                f"detached on {store}",
                "detached on memory",
                subject,
                base,
                note=f"+{subject - base:,.0f} us a call for its journal's writes",
            )
        )
    report.extra["n"] = {"memory": n_memory, "store": n_store, "rounds": repeats}
    return report


if __name__ == "__main__":
    figures = main(quick=True)
    figures.print()
