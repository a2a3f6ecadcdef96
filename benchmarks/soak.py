"""`make soak`: 100,000 mixed calls through one runtime; nothing may be left behind.

Every batch of 1,000 calls holds, in real time:

- 40% ok: async (in `call_many` and as concurrent `rt.call`s) and sync (worker threads);
- 10% raise: async and sync tools that raise;
- 20% invalid: bad JSON, wrong argument types, unknown tools;
- 20% timeouts: per-call `timeout=` on concurrent `rt.call`s, tool timeouts of async tools,
  and tool timeouts of sync tools whose threads block past them (abandoned threads);
- 10% caller cancellations: concurrent `rt.call`s whose tasks are cancelled mid-call.

Every result is checked against what its case allows, and every call is counted once in
`rt.statistics()` (the cancelled ones too). The report is a table of live trio tasks,
threads and RSS before the runtime opens, once it is open, after the calls, once it has
closed, and after trio's idle worker threads have retired; then calls/s. The exit status is
non-zero if a result was wrong or missing, if the live trio tasks are not back to the
baseline once the runtime has closed (or the threads once trio's idle ones have retired),
or if RSS grew by 20 MB or more.

    python -m benchmarks.soak [--calls 100000] [--batch 1000]
"""

from __future__ import annotations

import argparse
import gc
import logging
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import trio

from runtime import Runtime, ToolCall, ToolFailure, ToolResult, open_runtime, tool

RSS_LIMIT_MB = 20.0
THREAD_IDLE = 10.0  # seconds trio keeps an idle worker thread in its cache
_KEEP_IDLE = 4  # idle workers each actor may keep (runtime.engine._worker)

# -- tools -------------------------------------------------------------------------------------


@tool
async def echo(x: int = 0) -> int:
    return x


@tool
def echo_sync(x: int = 0) -> int:
    return x


@tool
async def boom(x: int = 0) -> int:
    raise ValueError(f"boom {x}")


@tool
def boom_sync(x: int = 0) -> int:
    raise RuntimeError(f"boom {x}")


@tool
async def slow(seconds: float = 10.0) -> str:
    """Outlives its per-call timeout."""
    await trio.sleep(seconds)
    return "late"


@tool
async def victim(seconds: float = 10.0) -> str:
    """Outlives the caller that cancels it."""
    await trio.sleep(seconds)
    return "late"


@tool(timeout=0.01)
async def timed(seconds: float = 10.0) -> str:
    """Sleeps past its own tool timeout."""
    await trio.sleep(seconds)
    return "late"


@tool(timeout=0.005)
def timed_sync(seconds: float = 0.02) -> str:
    """Blocks its thread past its tool timeout (the thread is abandoned, then ends)."""
    time.sleep(seconds)
    return "late"


TOOLS = [echo, echo_sync, boom, boom_sync, slow, victim, timed, timed_sync]

# -- the mix of one batch ----------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """`count` calls per 1,000 of one kind, how they are made, and the results they may have."""

    label: str
    category: str  # ok, raise, invalid, timeout, cancel
    count: int
    how: str  # "many" (in call_many), "call" (a concurrent rt.call), "cancel" (a cancelled rt.call)
    make: Callable[[str], ToolCall]
    allowed: frozenset[str]
    timeout: float | None = None


def _call(name: str, arguments: str = "{}") -> Callable[[str], ToolCall]:
    return lambda cid: ToolCall(id=cid, name=name, arguments=arguments)


CASES = [
    Case("ok, async (call_many)", "ok", 250, "many", _call("echo", '{"x": 1}'), frozenset({"ok"})),
    Case("ok, sync thread (call_many)", "ok", 50, "many", _call("echo_sync", '{"x": 2}'), frozenset({"ok"})),
    Case("ok, async (rt.call)", "ok", 100, "call", _call("echo", '{"x": 3}'), frozenset({"ok"})),
    Case("raise, async", "raise", 80, "many", _call("boom"), frozenset({"error"})),
    Case("raise, sync thread", "raise", 20, "many", _call("boom_sync"), frozenset({"error"})),
    Case(
        "invalid: bad JSON", "invalid", 70, "many", _call("echo", '{"x": '), frozenset({"invalid_arguments"})
    ),
    Case(
        "invalid: wrong type",
        "invalid",
        70,
        "many",
        _call("echo", '{"x": "one"}'),
        frozenset({"invalid_arguments"}),
    ),
    Case("invalid: unknown tool", "invalid", 60, "many", _call("no_such_tool"), frozenset({"unknown_tool"})),
    Case(
        "timeout: per call (rt.call)",
        "timeout",
        100,
        "call",
        _call("slow"),
        frozenset({"timeout"}),
        timeout=0.01,
    ),
    Case("timeout: tool, async", "timeout", 80, "many", _call("timed"), frozenset({"timeout"})),
    # A blocked thread cannot be stopped: its call is answered TIMEOUT, the thread is abandoned
    # (counted) and keeps its slot until it ends; a tool whose every slot is so held fails fast.
    # On a loaded machine a thread may also end before the loop gets to its deadline: then it
    # wins the race and its call succeeds ("ok"), which is right too.
    Case(
        "timeout: tool, sync thread",
        "timeout",
        20,
        "many",
        _call("timed_sync"),
        frozenset({"timeout", "overloaded", "ok"}),
    ),
    Case("caller cancels mid-call", "cancel", 100, "cancel", _call("victim"), frozenset({"cancelled"})),
]
assert sum(c.count for c in CASES) == 1000
CANCEL_AFTER = 0.002  # seconds between looks at whether the calls to cancel are running yet
CANCEL_WAIT = 0.5  # seconds at most before they are cancelled anyway


# -- measuring ---------------------------------------------------------------------------------


def count_tasks() -> int:
    """Live trio tasks, from the root task down (the runtime's system task included)."""

    def walk(task: trio.lowlevel.Task) -> int:
        return 1 + sum(walk(child) for nursery in task.child_nurseries for child in nursery.child_tasks)

    return walk(trio.lowlevel.current_root_task())


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


@dataclass
class Sample:
    when: str
    tasks: int
    threads: int
    rss: float


def sample(when: str) -> Sample:
    gc.collect()
    return Sample(when, count_tasks(), threading.active_count(), rss_mb())


class LogTally(logging.Handler):
    """Counts the engine's log records by level and message (instead of printing thousands)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.counts: Counter[tuple[str, str]] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[record.levelname, str(record.msg)[:90]] += 1


# -- the soak ----------------------------------------------------------------------------------


@dataclass
class Tally:
    sent: Counter[str]  # per tool (routed calls)
    outcomes: Counter[tuple[str, str]]  # (case label, result kind)
    wrong: list[str]
    unknown: int = 0
    running_when_cancelled: int = 0  # cancelled calls that were running in their tool (mid-call)


def kind_of(result: ToolResult) -> str:
    return result.kind.value if isinstance(result, ToolFailure) else "ok"


async def one_batch(rt: Runtime, n: int, batch: int, tally: Tally) -> None:
    scale = batch / 1000
    many: list[tuple[Case, ToolCall]] = []
    singles: list[tuple[Case, ToolCall]] = []
    cancels: list[tuple[Case, ToolCall]] = []
    for case in CASES:
        for k in range(round(case.count * scale)):
            call = case.make(f"{n}-{case.label[:12]}-{k}")
            (many if case.how == "many" else singles if case.how == "call" else cancels).append((case, call))
            if call.name == "no_such_tool":
                tally.unknown += 1
            else:
                tally.sent[call.name] += 1

    def record(case: Case, call: ToolCall, result: ToolResult) -> None:
        kind = kind_of(result)
        tally.outcomes[case.label, kind] += 1
        if kind not in case.allowed or result.call_id != call.id:
            tally.wrong.append(f"{case.label}: {call.id} -> {result!r}"[:300])

    async def single(case: Case, call: ToolCall) -> None:
        record(case, call, await rt.call(call, timeout=case.timeout))

    def victim_running() -> int:
        return rt.statistics().tools["victim"].in_flight

    async def cancelled(group: list[tuple[Case, ToolCall]]) -> None:
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                for case, call in group:
                    nursery.start_soon(single, case, call)  # a result here would be wrong
                # Mid-call: once they are all running in their tool (or after a while at most).
                waited = trio.current_time() + CANCEL_WAIT
                while (running := victim_running()) < len(group) and trio.current_time() < waited:
                    await trio.sleep(CANCEL_AFTER)
                tally.running_when_cancelled += running
                scope.cancel()
        for case, _ in group:
            tally.outcomes[case.label, "cancelled"] += 1  # no result reaches a cancelled caller

    async with trio.open_nursery() as nursery:
        nursery.start_soon(cancelled, cancels)
        for case, call in singles:
            nursery.start_soon(single, case, call)
        results = await rt.call_many([call for _, call in many])
        if len(results) != len(many):
            tally.wrong.append(f"call_many gave {len(results)} results for {len(many)} calls")
        for (case, call), result in zip(many, results, strict=False):
            record(case, call, result)


async def soak(total: int, batch: int) -> int:
    logs = LogTally()
    engine_log = logging.getLogger("runtime")
    engine_log.addHandler(logs)
    engine_log.setLevel(logging.INFO)
    engine_log.propagate = False
    samples = [sample("before (runtime not open)")]
    tally = Tally(Counter(), Counter(), [])
    batches = total // batch
    async with open_runtime(TOOLS, tracing=False) as rt:
        samples.append(sample("runtime open, no call yet"))
        started = time.perf_counter()
        for n in range(batches):
            await one_batch(rt, n, batch, tally)
            if n == 0:
                elapsed_first = time.perf_counter() - started
                samples.append(sample(f"after the first {batch:,} calls (open)"))
                started = time.perf_counter() - elapsed_first  # the sample is not a call
        elapsed = time.perf_counter() - started
        await trio.sleep(0.1)  # the last abandoned threads (20 ms) end
        samples.append(sample(f"after {batches * batch:,} calls (open)"))
        stats = rt.statistics()
    samples.append(sample("end (runtime closed)"))
    final = rt.statistics()
    await trio.sleep(THREAD_IDLE + 1)  # trio's idle worker threads retire
    samples.append(sample(f"end + {THREAD_IDLE + 1:g}s (idle threads retired)"))

    calls = batches * batch
    print(f"\n== soak: {calls:,} mixed calls in batches of {batch:,} ==")
    print(f"{'':<40} {'trio tasks':>10} {'threads':>8} {'RSS MB':>8}")
    for s in samples:
        print(f"{s.when:<40} {s.tasks:>10} {s.threads:>8} {s.rss:>8.1f}")
    print(f"\n{calls:,} calls in {elapsed:.1f} s: {calls / elapsed:,.0f} calls/s")

    print(f"\n{'case':<32} {'outcome':<18} {'calls':>8}")
    for (label, kind), count in sorted(tally.outcomes.items()):
        print(f"{label:<32} {kind:<18} {count:>8}")
    cancels = tally.outcomes["caller cancels mid-call", "cancelled"]
    print(f"caller cancellations: {tally.running_when_cancelled:,} of {cancels:,} were running in their tool")
    print(f"\n{'tool':<12} {'calls':>7} {'counted':>8} {'abandoned':>10} {'threads':>8}  failures")
    for name in sorted(tally.sent):
        t = final.tools[name]
        print(
            f"{name:<12} {tally.sent[name]:>7} {t.calls:>8} {t.abandoned:>10} {t.threads:>8}  "
            f"{dict(sorted(t.failures.items()))}"
        )

    print("\nthe engine's log records (INFO and up), by message:")
    for (level, message), count in sorted(logs.counts.items()):
        print(f"{count:>8} {level:<8} {message}")

    problems: list[str] = []
    if tally.wrong:
        problems.append(f"{len(tally.wrong)} wrong or missing results, e.g. {tally.wrong[:3]}")
    for name, sent in tally.sent.items():
        if final.tools[name].calls != sent:
            problems.append(f"tool {name!r}: {sent} calls sent, {final.tools[name].calls} counted")
    if final.unknown_tool_calls != tally.unknown:
        problems.append(f"{tally.unknown} unknown-tool calls sent, {final.unknown_tool_calls} counted")
    if stats.in_flight or final.in_flight:
        problems.append(f"calls still in flight: {stats.in_flight} (open), {final.in_flight} (closed)")
    open_idle = samples[1].tasks + _KEEP_IDLE * len(TOOLS)
    if samples[-3].tasks > open_idle:
        problems.append(f"{samples[-3].tasks} trio tasks after the calls; at most {open_idle} expected")
    if samples[-2].tasks != samples[0].tasks:
        problems.append(
            f"trio tasks: {samples[0].tasks} before, {samples[-2].tasks} after the runtime closed"
        )
    if samples[-1].threads != samples[0].threads:
        problems.append(f"threads: {samples[0].threads} before, {samples[-1].threads} once idle ones retired")
    growth = samples[-2].rss - samples[0].rss
    if growth >= RSS_LIMIT_MB:
        problems.append(f"RSS grew by {growth:.1f} MB (limit: under {RSS_LIMIT_MB:g} MB)")
    print(f"\nRSS growth, before -> end: {growth:+.1f} MB (goal: under {RSS_LIMIT_MB:g} MB)")
    print(f"trio tasks, before -> end: {samples[0].tasks} -> {samples[-2].tasks} (goal: equal)")
    for problem in problems:
        print(f"FAIL: {problem}")
    print("soak: ok" if not problems else "soak: FAILED")
    return 1 if problems else 0


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak")
    parser.add_argument("--calls", type=int, default=100_000, help="calls in all (default 100,000)")
    parser.add_argument("--batch", type=int, default=1000, help="calls per batch (default 1,000)")
    args = parser.parse_args()
    sys.exit(trio.run(soak, args.calls, args.batch))


if __name__ == "__main__":
    main()
