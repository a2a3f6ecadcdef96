"""Tools that stream their output (issue 24, DESIGN.md 3.12): an `async def` generator tool.

- `rt.stream(call)` yields each chunk as the tool yields it, then the one result (the chunks
  joined); `call` / `call_many` of such a tool collect it; an `on_chunk` handler hears each;
- a bounded buffer gives backpressure: a slow reader holds the tool up;
- a deadline, a reader that stops early and a cancelled caller stop the tool: one result each
  (TIMEOUT, CANCELLED), the generator closed (its `finally` ran), nothing left running;
- a large stream ends as an artifact; the span counts chunks and bytes and holds none of them;
- from asyncio (`open_asyncio_runtime`) and from threads (`RuntimeThread`) too.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runtime import (
    Artifacts,
    CallContext,
    FailureKind,
    ResourceLinkPart,
    ToolCall,
    ToolDefinitionError,
    ToolFailure,
    ToolResult,
    ToolSuccess,
    open_runtime,
    reporting,
    tool,
)
from runtime.embed import RuntimeThread, open_asyncio_runtime
from runtime.placement import Subprocess
from runtime.tracing import Tracing


class Log:
    """What the streaming tools did: chunks made, whether each generator was closed."""

    def __init__(self) -> None:
        self.made = 0
        self.closed = 0
        self.opened = 0


LOG = Log()


@pytest.fixture(autouse=True)
def fresh_log() -> None:
    LOG.made = LOG.closed = LOG.opened = 0


@tool
async def count(n: int, every: float = 1.0) -> AsyncIterator[str]:
    """Count to `n`, a line every `every` seconds."""
    LOG.opened += 1
    try:
        for i in range(1, n + 1):
            await trio.sleep(every)
            LOG.made += 1
            yield f"{i}\n"
    finally:
        LOG.closed += 1


@tool
async def mixed() -> AsyncIterator[Any]:
    """Chunks of other types: each becomes its JSON text."""
    yield "a"
    yield {"b": 1}
    yield 2


def streamed(n: int, every: float = 1.0, call_id: str = "s") -> ToolCall:
    return ToolCall(id=call_id, name="count", arguments={"n": n, "every": every})


def lines(n: int) -> list[str]:
    return [f"{i}\n" for i in range(1, n + 1)]


async def test_stream_yields_each_chunk_as_it_comes_then_the_one_result(
    autojump_clock: trio.abc.Clock,
) -> None:
    seen: list[tuple[float, str | ToolResult]] = []
    async with open_runtime([count], tracing=False) as rt:
        start = trio.current_time()
        async for item in rt.stream(streamed(3)):
            seen.append((trio.current_time() - start, item))
    assert [at for at, _ in seen] == [1.0, 2.0, 3.0, 3.0]  # each chunk when it is made
    assert [item for _, item in seen[:3]] == lines(3)
    result = seen[-1][1]
    assert isinstance(result, ToolSuccess)
    assert (result.content, result.value) == ("1\n2\n3\n", "1\n2\n3\n")
    assert (LOG.made, LOG.closed) == (3, 1)


async def test_call_and_call_many_collect_and_an_on_chunk_handler_hears_each(
    autojump_clock: trio.abc.Clock,
) -> None:
    heard: list[tuple[str, str]] = []

    async def on_chunk(ctx: CallContext, chunk: str) -> None:
        heard.append((ctx.call_id, chunk))

    async with open_runtime([count, mixed], tracing=False) as rt:
        one = await rt.call(streamed(2, call_id="one"))
        with reporting(on_chunk=on_chunk):
            many = await rt.call_many([streamed(2, call_id="a"), streamed(3, call_id="b")])
        other = await rt.call(ToolCall(id="m", name="mixed"))
        only = [item async for item in rt.stream(ToolCall(id="x", name="nope"))]
    assert one.content == "1\n2\n"
    assert [r.content for r in many] == ["1\n2\n", "1\n2\n3\n"]
    assert sorted(heard) == sorted([("a", "1\n"), ("a", "2\n"), ("b", "1\n"), ("b", "2\n"), ("b", "3\n")])
    assert other.content == 'a{"b":1}2'
    (unknown,) = only  # a call that streams nothing: its one result
    assert isinstance(unknown, ToolFailure)
    assert unknown.kind is FailureKind.UNKNOWN_TOOL


async def test_a_slow_reader_holds_the_tool_up(autojump_clock: trio.abc.Clock) -> None:
    ahead: list[int] = []
    async with open_runtime([count], tracing=False) as rt:
        read = 0
        async for item in rt.stream(streamed(40, every=0.01), buffer=4):
            if isinstance(item, str):
                read += 1
                await trio.sleep(1)  # a slow reader
                ahead.append(LOG.made - read)
        assert isinstance(item, ToolSuccess)
    # the tool is never more than the buffer (4), the chunk in the reader's hands and the one
    # its `yield` waits with ahead of the reader
    assert max(ahead) <= 4 + 1, ahead
    assert max(ahead) >= 4  # and it did run ahead: the buffer was used
    assert LOG.made == 40


async def test_a_deadline_mid_stream_closes_the_generator_and_gives_one_timeout(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with open_runtime([count], tracing=False) as rt:
        items = [item async for item in rt.stream(streamed(100), timeout=2.5)]
        called = await rt.call(streamed(100, call_id="c"), timeout=2.5)
        stats = rt.statistics().tools["count"]
    assert items[:2] == lines(2)
    (result,) = items[2:]
    assert isinstance(result, ToolFailure)
    assert result.kind is FailureKind.TIMEOUT
    assert isinstance(called, ToolFailure)
    assert called.kind is FailureKind.TIMEOUT
    assert (LOG.opened, LOG.closed) == (2, 2)  # each generator closed (its finally ran)
    assert (stats.calls, stats.in_flight, stats.abandoned) == (2, 0, 0)


async def test_a_reader_that_stops_early_or_is_cancelled_cancels_the_call(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with open_runtime([count], tracing=False) as rt:
        async with contextlib.aclosing(rt.stream(streamed(100, call_id="early"))) as items:
            async for item in items:
                assert item == "1\n"
                break
        with trio.move_on_after(3.5):
            async for _ in rt.stream(streamed(100, call_id="cancelled")):
                pass
        await trio.sleep(1)
        stats = rt.statistics().tools["count"]
    assert (LOG.opened, LOG.closed) == (2, 2)
    assert LOG.made <= 1 + 3 + 1  # nothing ran on after its reader left
    assert stats.failures == {"cancelled": 2}
    assert (stats.calls, stats.in_flight, stats.abandoned) == (2, 0, 0)


async def test_a_large_stream_ends_as_an_artifact() -> None:
    @tool
    async def dump(n: int) -> AsyncIterator[str]:
        for i in range(n):
            await trio.lowlevel.checkpoint()
            yield f"row {i:06d}\n"

    async with open_runtime([dump], tracing=False, max_result_chars=1000, artifacts=Artifacts()) as rt:
        items = [item async for item in rt.stream(ToolCall(id="d", name="dump", arguments={"n": 5000}))]
        result = items[-1]
        assert isinstance(result, ToolSuccess)
        (link,) = [p for p in result.parts if isinstance(p, ResourceLinkPart)]
        assert rt.artifacts is not None
        whole = await rt.artifacts.read(None, link.name)
    assert len(items) == 5001
    assert whole == "".join(items[:-1])  # the chunks joined, kept whole
    assert len(result.content) <= 1000


async def test_the_span_counts_chunks_and_bytes_and_holds_none_of_them(
    autojump_clock: trio.abc.Clock,
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    @tool
    async def words() -> AsyncIterator[str]:
        for word in ("zebra ", "ünïcode ", "quartz"):
            await trio.sleep(0.1)
            yield word

    async with open_runtime([words], tracing=Tracing(tracer_provider=provider)) as rt:
        result = await rt.call(ToolCall(id="w", name="words"))
    assert result.content == "zebra ünïcode quartz"
    (span,) = exporter.get_finished_spans()
    (event,) = [e for e in span.events if e.name == "tool.stream"]
    assert dict(event.attributes or {}) == {
        "tool.stream.chunks": 3,
        "tool.stream.bytes": len(result.content.encode()),
    }
    recorded = repr([dict(span.attributes or {}), *[dict(e.attributes or {}) for e in span.events]])
    assert "zebra" not in recorded  # the chunks themselves are never on the span


def test_a_stream_runs_on_trio_in_this_process() -> None:
    with pytest.raises(ToolDefinitionError, match=r"a streaming tool .* runs on trio"):

        @tool(loop="asyncio")
        async def aio() -> AsyncIterator[str]:
            yield "x"

    with pytest.raises(ToolDefinitionError, match=r"a streaming tool .* runs in this process"):

        @tool(placement=Subprocess(workers=1))
        async def placed() -> AsyncIterator[str]:
            yield "x"


def test_stream_from_asyncio_and_from_threads() -> None:
    async def from_asyncio() -> tuple[list[Any], list[Any]]:
        async with open_asyncio_runtime([count], tracing=False) as rt:
            whole = [item async for item in rt.stream(streamed(3, every=0.001))]
            async with contextlib.aclosing(rt.stream(streamed(1000, every=0.001, call_id="early"))) as items:
                first: list[Any] = []
                async for item in items:
                    first.append(item)
                    break
            return whole, first

    whole, first = asyncio.run(from_asyncio())
    assert first == ["1\n"]
    assert whole[:3] == lines(3)
    assert whole[-1].content == "1\n2\n3\n"
    assert (LOG.opened, LOG.closed) == (2, 2)  # the one left early is closed too
    with RuntimeThread([count], tracing=False) as rt:
        items = list(rt.stream(streamed(3, every=0.001)))
        left = rt.stream(streamed(1000, every=0.001, call_id="left"))
        assert next(left) == "1\n"
        left.close()  # cancels the call
    assert items[:3] == lines(3)
    assert items[-1].content == "1\n2\n3\n"
    assert (LOG.opened, LOG.closed) == (4, 4)


# -- a stream's result is bounded as it grows (issue 42, item 16) --------------------------------

MIB = 1 << 20


@tool
async def firehose(chunks: int) -> AsyncIterator[str]:
    """Yield `chunks` chunks of a MiB each (or for ever: -1)."""
    i = 0
    while chunks < 0 or i < chunks:
        await trio.lowlevel.checkpoint()
        yield chr(ord("a") + i % 26) * MIB
        i += 1


async def _peak_while(work: Any) -> tuple[Any, int]:
    import gc
    import tracemalloc

    gc.collect()
    tracemalloc.start()
    try:
        value = await work()
        return value, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


async def test_a_reader_that_drops_the_chunks_holds_no_more_than_the_limit() -> None:
    async with open_runtime([firehose], tracing=False) as rt:

        async def read() -> ToolResult:
            last: Any = None
            async with contextlib.aclosing(
                rt.stream(ToolCall(id="f", name="firehose", arguments={"chunks": 60}))
            ) as items:
                async for item in items:
                    last = item  # each chunk dropped as soon as it is read
            return last  # type: ignore[no-any-return]

        result, peak = await _peak_while(read)
    assert isinstance(result, ToolSuccess)
    assert f"the result had {60 * MIB} characters" in result.content  # cut while it streamed
    assert len(result.content) < 100_000 + 200
    assert peak < 16 * MIB, f"{peak / MIB:.0f} MiB held for a 60 MiB stream"


async def test_an_endless_stream_ends_at_its_deadline_with_bounded_memory() -> None:
    async with open_runtime([firehose], tracing=False) as rt:

        async def call() -> ToolResult:
            return await rt.call(ToolCall(id="f", name="firehose", arguments={"chunks": -1}), timeout=1.5)

        result, peak = await _peak_while(call)
    assert isinstance(result, ToolFailure)
    assert result.kind is FailureKind.TIMEOUT
    assert peak < 16 * MIB, f"{peak / MIB:.0f} MiB held by an endless stream"


async def test_a_stream_over_its_limit_is_kept_whole_as_an_artifact_without_holding_it_whole(
    tmp_path: Any,
) -> None:
    async with open_runtime(
        [firehose], tracing=False, artifacts=Artifacts(store=str(tmp_path), max_bytes=1 << 30)
    ) as rt:

        async def call() -> ToolResult:
            return await rt.call(ToolCall(id="f", name="firehose", arguments={"chunks": 40}))

        result, peak = await _peak_while(call)
        assert isinstance(result, ToolSuccess)
        (link,) = [p for p in result.parts if isinstance(p, ResourceLinkPart)]
        assert rt.artifacts is not None
        info = await rt.artifacts.info(None, link.name)
        tail = await rt.artifacts.read(None, link.name, 40 * MIB - 3, 3)
        middle = await rt.artifacts.read(None, link.name, 17 * MIB, 2)
    assert info.chars == 40 * MIB
    assert tail == "nnn"  # the 40th chunk is "n"s
    assert middle == "rr"  # the 18th, "r"s
    assert peak < 16 * MIB, f"{peak / MIB:.0f} MiB held while keeping a 40 MiB stream"
