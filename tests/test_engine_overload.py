"""Backpressure for plain `def` tools (the most common kind) under steady overload.

A sync tool that sets no `max_concurrency` runs on its own threads (`thread_limit`); its calls
beyond those threads wait in its mailbox, so `mailbox_size` and `on_full="reject"` act on it as
on any tool. Before, each call left the mailbox at once for a task that waited for a thread: at
5x capacity 14 of 3,200 were refused and the accepted ones' p99 grew to 32 s.

These drive real threads, so they use the real clock; what they assert is structural (every
call one result, the waiting line never longer than the mailbox, most calls refused at 5x, and
an accepted call waits behind no more calls than the mailbox and the threads hold, where an
unbounded line grows with the run). Their latency is printed, not asserted: on a loaded machine
the threads themselves wait for a core.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import trio

from runtime import FailureKind, ToolCall, ToolResult, open_runtime, tool
from runtime.embed import open_asyncio_runtime

SERVICE = 0.01  # seconds a call holds its thread
THREADS = 2
MAILBOX = 4
RATE = 5 * THREADS / SERVICE  # calls started per second: five times what the tool can serve
SECONDS = 1.5
STARTS: dict[int, int] = {}
"""key -> how many calls had begun to run before it (the tool's threads write it)."""
_STARTING = threading.Lock()


@tool(mailbox_size=MAILBOX, on_full="reject")
def slow_lookup(key: int) -> int:
    """Blocks its thread for a moment (a sync client library, say)."""
    with _STARTING:
        STARTS[key] = len(STARTS)
    time.sleep(SERVICE)
    return key


def call(i: int) -> ToolCall:
    return ToolCall(id=f"c{i}", name="slow_lookup", arguments=json.dumps({"key": i}))


Result = tuple[ToolResult, float, int]  # the result, its latency, how many calls had begun when it was sent


def check(results: dict[int, Result], longest_line: int, sent: int) -> None:
    assert sorted(results) == list(range(sent))  # every call: exactly one result, its own
    for i, (result, _, _) in results.items():
        assert result.call_id == f"c{i}"
        assert result.ok or result.kind is FailureKind.OVERLOADED, result
    refused = [r for r, _, _ in results.values() if not r.ok]
    accepted = sorted(latency for r, latency, _ in results.values() if r.ok)
    # Calls that began to run after an accepted call was sent and before it: those waiting ahead
    # of it in the mailbox, and those on their way from it to a thread.
    overtaken = max(STARTS[i] - begun for i, (r, _, begun) in results.items() if r.ok)
    p99 = accepted[int(len(accepted) * 0.99) - 1]
    print(
        f"{sent} calls at 5x: {len(refused)} OVERLOADED, {len(accepted)} served, "
        f"p99 {p99 * 1000:.0f} ms, longest line {longest_line}, at most {overtaken} calls ran first"
    )
    assert all("is overloaded" in r.message for r in refused), refused[0].message
    assert longest_line <= MAILBOX
    assert len(refused) >= sent // 2  # at 5x, most calls cannot be served: they are told at once
    # And the tool keeps serving: its threads could serve 300 calls in the run; a loaded machine
    # serves far fewer (the loop and the threads wait for a core: 73 here with both cores busy).
    assert len(accepted) >= THREADS * SECONDS / SERVICE / 20
    # An unbounded line has an accepted call wait behind hundreds of calls by the end of the run
    # (~(5 - 1) x the run: seconds); a bounded one, behind the mailbox and the threads at most.
    assert overtaken <= MAILBOX + THREADS


async def test_a_sync_tool_without_max_concurrency_refuses_calls_beyond_its_mailbox_under_5x_load() -> None:
    results: dict[int, Result] = {}
    longest_line = 0
    STARTS.clear()
    async with open_runtime([slow_lookup], tracing=False, thread_limit=THREADS) as rt:

        async def one(i: int) -> None:
            start, begun = time.perf_counter(), len(STARTS)
            result = await rt.call(call(i))
            results[i] = (result, time.perf_counter() - start, begun)

        sent = int(RATE * SECONDS)
        async with trio.open_nursery() as nursery:
            begin = trio.current_time()
            for i in range(sent):
                nursery.start_soon(one, i)
                longest_line = max(longest_line, rt.statistics().tools["slow_lookup"].queued)
                await trio.sleep_until(begin + (i + 1) / RATE)
    check(results, longest_line, sent)


def test_the_same_from_asyncio() -> None:
    async def main() -> tuple[dict[int, Result], int, int]:
        results: dict[int, Result] = {}
        longest_line = 0
        STARTS.clear()
        async with open_asyncio_runtime([slow_lookup], tracing=False, thread_limit=THREADS) as rt:

            async def one(i: int) -> None:
                start, begun = time.perf_counter(), len(STARTS)
                result = await rt.call(call(i))
                results[i] = (result, time.perf_counter() - start, begun)

            loop = asyncio.get_running_loop()
            sent = int(RATE * SECONDS)
            tasks: list[asyncio.Task[Any]] = []
            begin = loop.time()
            for i in range(sent):
                tasks.append(asyncio.ensure_future(one(i)))
                longest_line = max(longest_line, rt.statistics().tools["slow_lookup"].queued)
                await asyncio.sleep(max(0.0, begin + (i + 1) / RATE - loop.time()))
            await asyncio.gather(*tasks)
        return results, longest_line, sent

    check(*asyncio.run(main()))
