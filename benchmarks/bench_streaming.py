"""Streaming tools and results kept whole (issue 24), against floors measured in the same run.

- first chunk: from `rt.stream(call)` to the first chunk in the reader's hands, for a tool whose
  generator yields at once. Floor: the same generator driven by a trio task of its own, its
  chunks through a trio memory channel (buffer 8) to the reader: one hop, no runtime.
- chunks/s through `rt.stream`: a tool that yields 20,000 short chunks, each read by the reader
  (us per chunk; the note gives chunks/s). Same floor: the generator in a task, a channel.
- chunks/s collected by `rt.call` (nobody reads them one by one; the result is them joined).
  Floor: the generator driven directly, its chunks joined.
- a 50 MB result kept whole (`Artifacts()`, in memory): from the tool's return to the call's
  result (its text under the limit, the link beside it). Floor: what keeping cannot avoid, done
  directly: the text encoded and hashed (SHA-256), 1 MiB at a time, in one worker thread.
- the loop's longest step while that 50 MB result is kept (the work goes to worker threads): the
  runtime keeps serving other calls meanwhile. Against a 1 ms ticker's own period.

Each ratio is subject / floor, both medians of interleaved repetitions.
"""

from __future__ import annotations

import hashlib
import statistics
import time
from collections.abc import AsyncIterator

import trio

from runtime import Artifacts, ToolCall, open_runtime, tool

from ._harness import Report, Row

CHUNKS = 20_000
BIG = 50_000_000
_TEXT = ("0123456789abcdef" * (BIG // 16 + 1))[:BIG]


async def numbers(n: int) -> AsyncIterator[str]:
    """The generator every measurement drives: `n` short chunks, no waiting between them."""
    for i in range(n):
        yield f"chunk {i:08d}\n"


stream_tool = tool(numbers, name="numbers")


@tool
async def big() -> str:
    """A 50 MB text."""
    await trio.lowlevel.checkpoint()
    return _TEXT


async def _floor_first_chunk(rounds: int) -> float:
    """Median seconds to the first chunk: the generator in a task, its chunks through a channel."""
    times: list[float] = []
    async with trio.open_nursery() as nursery:
        for _ in range(rounds):
            send: trio.MemorySendChannel[str]
            receive: trio.MemoryReceiveChannel[str]
            send, receive = trio.open_memory_channel(8)

            async def produce(send: trio.MemorySendChannel[str] = send) -> None:
                async with send:
                    async for chunk in numbers(1):
                        await send.send(chunk)

            began = time.perf_counter()
            nursery.start_soon(produce)
            async with receive:
                await receive.receive()
                times.append(time.perf_counter() - began)
                async for _ in receive:
                    pass
    return statistics.median(times)


async def _subject_first_chunk(rt: object, rounds: int) -> float:
    times: list[float] = []
    call = ToolCall(id="f", name="numbers", arguments='{"n": 1}')
    for _ in range(rounds):
        began = time.perf_counter()
        items = rt.stream(call)  # type: ignore[attr-defined]
        await items.__anext__()
        times.append(time.perf_counter() - began)
        async for _ in items:
            pass
    return statistics.median(times)


async def _floor_read(n: int) -> float:
    """Seconds for `n` chunks through a task and a channel."""
    send: trio.MemorySendChannel[str]
    receive: trio.MemoryReceiveChannel[str]
    send, receive = trio.open_memory_channel(8)

    async def produce() -> None:
        async with send:
            async for chunk in numbers(n):
                await send.send(chunk)

    began = time.perf_counter()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(produce)
        async with receive:
            async for _ in receive:
                pass
    return time.perf_counter() - began


async def _subject_read(rt: object, n: int) -> float:
    began = time.perf_counter()
    async for _ in rt.stream(ToolCall(id="r", name="numbers", arguments=f'{{"n": {n}}}')):  # type: ignore[attr-defined]
        pass
    return time.perf_counter() - began


async def _floor_collect(n: int) -> float:
    began = time.perf_counter()
    "".join([chunk async for chunk in numbers(n)])
    return time.perf_counter() - began


async def _subject_collect(rt: object, n: int) -> float:
    began = time.perf_counter()
    await rt.call(ToolCall(id="c", name="numbers", arguments=f'{{"n": {n}}}'))  # type: ignore[attr-defined]
    return time.perf_counter() - began


def _hash_in_chunks() -> None:
    hasher = hashlib.sha256()
    for i in range(0, BIG, 1 << 20):
        hasher.update(_TEXT[i : i + (1 << 20)].encode())


async def _floor_keep() -> float:
    began = time.perf_counter()
    await trio.to_thread.run_sync(_hash_in_chunks)
    return time.perf_counter() - began


async def _subject_keep(rt: object, principal: str) -> tuple[float, float]:
    """Seconds for the call, and the loop's longest step meanwhile (a 1 ms ticker)."""
    busiest = 0.0
    async with trio.open_nursery() as nursery:

        async def tick() -> None:
            nonlocal busiest
            last = time.perf_counter()
            while True:
                await trio.sleep(0.001)
                now = time.perf_counter()
                busiest = max(busiest, now - last)
                last = now

        nursery.start_soon(tick)
        await trio.sleep(0.01)
        began = time.perf_counter()
        result = await rt.call(ToolCall(id="k", name="big"), principal=principal)  # type: ignore[attr-defined]
        took = time.perf_counter() - began
        nursery.cancel_scope.cancel()
    assert result.ok, result
    assert len(result.content) <= 100_000
    return took, busiest


def main(quick: bool = False) -> Report:
    report = Report("streaming")
    rounds = 200 if quick else 2000
    n = 2_000 if quick else CHUNKS
    repeats = 3 if quick else 7

    async def run() -> None:
        async with open_runtime([stream_tool, big], tracing=False, artifacts=Artifacts()) as rt:
            await _subject_first_chunk(rt, 20)  # warm up
            await _floor_first_chunk(20)
            floor_first: list[float] = []
            first: list[float] = []
            for _ in range(repeats):
                floor_first.append(await _floor_first_chunk(rounds))
                first.append(await _subject_first_chunk(rt, rounds))
            subject, floor = statistics.median(first), statistics.median(floor_first)
            report.add(
                Row(
                    "stream: first chunk",
                    "rt.stream",
                    "task+chan",
                    subject * 1e6,
                    floor * 1e6,
                    None,
                    f"{subject * 1e6:.1f} us from rt.stream(call) to the first chunk",
                )
            )
            reads, floors = [], []
            for _ in range(repeats):
                floors.append(await _floor_read(n))
                reads.append(await _subject_read(rt, n))
            subject, floor = statistics.median(reads), statistics.median(floors)
            report.add(
                Row(
                    f"stream: {n:,} chunks read",
                    "rt.stream",
                    "task+chan",
                    subject / n * 1e6,
                    floor / n * 1e6,
                    None,
                    f"{n / subject:,.0f} chunks/s (floor {n / floor:,.0f})",
                )
            )
            collects, floors = [], []
            for _ in range(repeats):
                floors.append(await _floor_collect(n))
                collects.append(await _subject_collect(rt, n))
            subject, floor = statistics.median(collects), statistics.median(floors)
            report.add(
                Row(
                    f"stream: {n:,} chunks collected",
                    "rt.call",
                    "join",
                    subject / n * 1e6,
                    floor / n * 1e6,
                    None,
                    f"{n / subject:,.0f} chunks/s (floor {n / floor:,.0f})",
                )
            )
            keeps, floors, steps = [], [], []
            for i in range(1 if quick else 3):  # a new principal each time: kept anew, not found
                floors.append(await _floor_keep())
                took, step = await _subject_keep(rt, f"p{i}")
                keeps.append(took)
                steps.append(step)
            subject, floor = statistics.median(keeps), statistics.median(floors)
            report.add(
                Row(
                    "50 MB result kept whole",
                    "Artifacts()",
                    "sha256",
                    subject * 1e6,
                    floor * 1e6,
                    None,
                    f"call {subject * 1000:.0f} ms; encoding + hashing it alone {floor * 1000:.0f} ms",
                )
            )
            step = max(steps)
            report.add(
                Row(
                    "50 MB kept: loop's longest step",
                    "Artifacts()",
                    "1 ms tick",
                    step * 1e6,
                    1000.0,
                    None,
                    f"{step * 1000:.1f} ms at most between two 1 ms ticks while it was kept",
                )
            )

    trio.run(run)
    return report


if __name__ == "__main__":
    result = main()
    result.print()
    print(f"\nwrote {result.save()}")
