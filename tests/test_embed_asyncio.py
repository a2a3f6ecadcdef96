"""open_asyncio_runtime: the runtime on an asyncio loop as trio's guest; asyncio tools; context.

These tests run real asyncio loops (and uvloop), so they use short real waits where a tool
must be mid-call; every such wait is bounded and none decides an outcome by timing alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
import trio
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runtime import (
    Answer,
    CallContext,
    Elicitation,
    FailureKind,
    RuntimeClosed,
    ToolCall,
    ToolDefinitionError,
    asking,
    open_runtime,
    tool,
)
from runtime.embed import AsyncioRuntime, RuntimeThread, open_asyncio_runtime
from runtime.tracing import Tracing

EVENTS: list[str] = []
STARTED: set[str] = set()  # the tools whose code has begun to run


@tool
async def add(a: int, b: int) -> int:
    return a + b


@tool
def add_sync(a: int, b: int) -> int:
    return a + b


@tool(loop="asyncio")
async def nap(seconds: float) -> str:
    """Sleeps with asyncio (fails under trio: it needs the host's asyncio loop)."""
    asyncio.get_running_loop()  # raises "no running event loop" outside asyncio
    STARTED.add("nap")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        EVENTS.append("nap cancelled")
        raise
    return f"slept {seconds}"


@tool(loop="asyncio")
async def echo_over_tcp(port: int, text: str) -> str:
    """Talks to an asyncio TCP server through asyncio streams."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(text.encode() + b"\n")
        await writer.drain()
        return (await reader.readline()).decode().strip()
    finally:
        writer.close()
        await writer.wait_closed()


@tool(loop="asyncio")
async def asyncio_boom() -> None:
    await asyncio.sleep(0)
    raise ValueError("bad input from the backend")


@tool(loop="asyncio", timeout=0.05)
async def asyncio_slow() -> str:
    try:
        await asyncio.sleep(30)
    finally:
        EVENTS.append("asyncio_slow ended")
    return "never"


@tool
async def trio_forever() -> None:
    STARTED.add("trio_forever")
    try:
        await trio.sleep_forever()
    finally:
        EVENTS.append("trio_forever ended")


ALL = [add, add_sync, nap, echo_over_tcp, asyncio_boom, asyncio_slow, trio_forever]


def call(name: str, args: dict[str, Any] | None = None, id: str = "c1") -> ToolCall:
    return ToolCall(id=id, name=name, arguments=json.dumps(args or {}))


@pytest.fixture(autouse=True)
def _reset() -> None:
    EVENTS.clear()
    STARTED.clear()


def run_on_both_loops(main: Callable[[], Awaitable[None]]) -> None:
    """Run `main` on asyncio's own loop, then on uvloop (uvicorn's default where installed)."""
    asyncio.run(main())
    uvloop = pytest.importorskip("uvloop")
    EVENTS.clear()
    STARTED.clear()
    uvloop.run(main())


async def settle(rt: AsyncioRuntime, tool_name: str) -> None:
    """Wait (bounded) until `tool_name` runs no call: its cancelled work has ended."""
    for _ in range(500):
        if rt.statistics().tools[tool_name].in_flight == 0:
            return
        await asyncio.sleep(0.002)
    raise AssertionError(f"{tool_name} still has a call in flight")


def test_calls_many_calls_and_as_completed_from_asyncio() -> None:
    async def main() -> None:
        async with open_asyncio_runtime(ALL, tracing=False) as rt:
            assert (await rt.call(call("add", {"a": 1, "b": 2}))).content == "3"
            results = await rt.call_many(
                [
                    call("add", {"a": 2, "b": 2}, "a"),
                    call("add_sync", {"a": 3, "b": 3}, "b"),
                    call("nap", {"seconds": 0}, "c"),
                    call("nope", {}, "d"),
                    call("add", {"a": "x", "b": 1}, "e"),
                ]
            )
            assert [r.call_id for r in results] == ["a", "b", "c", "d", "e"]
            assert [r.content for r in results[:3]] == ["4", "6", "slept 0.0"]
            assert [getattr(r, "kind", None) for r in results[3:]] == [
                FailureKind.UNKNOWN_TOOL,
                FailureKind.INVALID_ARGUMENTS,
            ]
            order = [
                r.call_id
                async for r in rt.as_completed(
                    [call("nap", {"seconds": 0.05}, "slow"), call("add", {"a": 1, "b": 1}, "fast")]
                )
            ]
            assert order == ["fast", "slow"]
            assert (await rt.invoke("add", a=5, b=5)).content == "10"

    run_on_both_loops(main)


def test_the_host_loop_keeps_running_while_calls_wait() -> None:
    async def main() -> None:
        async with open_asyncio_runtime(ALL, tracing=False) as rt:
            ticks = 0
            pending = asyncio.ensure_future(rt.call(call("nap", {"seconds": 0.05})))
            while not pending.done():
                ticks += 1
                await asyncio.sleep(0)
            assert pending.result().content == "slept 0.05"
            assert ticks > 10  # the loop served other work meanwhile

    asyncio.run(main())


def test_an_asyncio_tool_uses_asyncio_sleep_and_asyncio_streams() -> None:
    async def main() -> None:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            line = await reader.readline()
            writer.write(line.upper())
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server, open_asyncio_runtime(ALL, tracing=False) as rt:
            slept, echoed, boom = await rt.call_many(
                [
                    call("nap", {"seconds": 0.01}, "n"),
                    call("echo_over_tcp", {"port": port, "text": "hello"}, "e"),
                    call("asyncio_boom", {}, "b"),
                ]
            )
            assert slept.content == "slept 0.01"
            assert echoed.content == "HELLO"
            assert boom.kind is FailureKind.ERROR  # type: ignore[union-attr]
            assert boom.content == "Error: tool 'asyncio_boom' raised ValueError: bad input from the backend"
            assert rt.statistics().tools["echo_over_tcp"].succeeded == 1

    run_on_both_loops(main)


def test_an_asyncio_tool_times_out_once_and_its_task_is_cancelled() -> None:
    async def main() -> None:
        async with open_asyncio_runtime(ALL, tracing=False) as rt:
            result = await rt.call(call("asyncio_slow"))
            assert result.kind is FailureKind.TIMEOUT  # type: ignore[union-attr]
            assert result.content == "Error: tool 'asyncio_slow' did not finish within 0.05s"
            per_call = await rt.call(call("nap", {"seconds": 30}), timeout=0.02)
            assert per_call.kind is FailureKind.TIMEOUT  # type: ignore[union-attr]
            await settle(rt, "asyncio_slow")
            await settle(rt, "nap")
            stats = rt.statistics().tools
            assert stats["asyncio_slow"].failures == {"timeout": 1}
            assert stats["asyncio_slow"].abandoned == stats["nap"].abandoned == 0
            assert EVENTS == ["asyncio_slow ended", "nap cancelled"]
        assert asyncio.all_tasks() == {asyncio.current_task()}  # no asyncio task left behind

    run_on_both_loops(main)


@pytest.mark.parametrize("tool_name", ["nap", "trio_forever"])
def test_cancelling_the_asyncio_caller_cancels_the_call_once_and_leaks_nothing(tool_name: str) -> None:
    async def main() -> None:
        async with open_asyncio_runtime(ALL, tracing=False) as rt:
            args = {"seconds": 30} if tool_name == "nap" else {}
            task = asyncio.ensure_future(rt.call(call(tool_name, args)))
            # The tool's code must be running (a call counted in flight may not have begun it yet:
            # cancelled then, its code never runs, and rightly has nothing to clean up).
            while tool_name not in STARTED:  # noqa: ASYNC110 - set by the tool, on the trio guest run
                await asyncio.sleep(0.001)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await settle(rt, tool_name)
            stats = rt.statistics().tools[tool_name]
            assert (stats.calls, stats.failures, stats.abandoned) == (1, {"cancelled": 1}, 0)
            # The caller is answered at once; its tool's code hears the cancellation on the loop's
            # (or the guest run's) next turn, and ends.
            for _ in range(500):
                if EVENTS:
                    break
                await asyncio.sleep(0.002)
            assert (["nap cancelled"] if tool_name == "nap" else ["trio_forever ended"]) == EVENTS
            assert (await rt.call(call("add", {"a": 1, "b": 1}))).content == "2"  # still serving
        assert asyncio.all_tasks() == {asyncio.current_task()}

    run_on_both_loops(main)


def test_closing_early_from_as_completed_cancels_the_rest() -> None:
    async def main() -> None:
        async with open_asyncio_runtime(ALL, tracing=False) as rt:
            calls = [call("add", {"a": 1, "b": 1}, "fast"), call("nap", {"seconds": 30}, "slow")]
            async with contextlib.aclosing(rt.as_completed(calls)) as results:
                async for first in results:
                    assert first.call_id == "fast"
                    break
            await settle(rt, "nap")
            assert rt.statistics().tools["nap"].failures == {"cancelled": 1}

    asyncio.run(main())


def test_an_asyncio_tool_needs_an_asyncio_host_and_says_so_at_open() -> None:
    message = (
        r"tool 'nap' is an asyncio tool \(loop='asyncio'\): it needs a runtime running on an asyncio loop"
    )

    async def trio_main() -> None:
        with pytest.raises(ToolDefinitionError, match=message):
            async with open_runtime([nap], tracing=False):
                pass

    trio.run(trio_main)
    with pytest.raises(ToolDefinitionError, match=message), RuntimeThread([nap], tracing=False):
        pass
    with pytest.raises(ToolDefinitionError, match="this function is not async"):

        @tool(loop="asyncio")
        def sync_tool() -> None: ...

    with pytest.raises(ToolDefinitionError, match="loop must be 'trio', 'asyncio' or 'any', not 'uv'"):
        tool(add.fn, loop="uv")  # type: ignore[arg-type]


def test_opening_fails_in_the_callers_task_and_use_after_close_raises() -> None:
    async def main() -> None:
        with pytest.raises(ValueError, match="Tool 'add' is already defined"):
            async with open_asyncio_runtime([add, add], tracing=False):
                pass
        async with open_asyncio_runtime([add], tracing=False) as rt:
            pass
        with pytest.raises(RuntimeClosed):
            await rt.call(call("add", {"a": 1, "b": 1}))

    asyncio.run(main())


def test_statistics_have_a_plain_json_form() -> None:
    async def main() -> dict[str, Any]:
        async with open_asyncio_runtime(ALL, tracing=False) as rt:
            await rt.call_many([call("add", {"a": 1, "b": 1}, "a"), call("nope", {}, "b")])
            return rt.statistics().to_dict()

    data = json.loads(json.dumps(asyncio.run(main())))
    assert data["unknown_tool_calls"] == 1
    assert data["tools"]["add"]["calls"] == 1
    assert data["tools"]["add"]["state"] == "up"


# -- the caller's span is the parent of the tool's span, through every embedding -------------


@pytest.fixture
def traced() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


@tool(loop="asyncio")
async def asyncio_traced(x: int) -> int:
    await asyncio.sleep(0)
    with PROVIDER[0].get_tracer("tool").start_as_current_span("inside asyncio tool"):
        await asyncio.sleep(0)
    return x


PROVIDER: list[TracerProvider] = []


def _parents(exporter: InMemorySpanExporter) -> dict[str, list[str]]:
    """Span name -> names of the parents of every span of that name."""
    spans: list[ReadableSpan] = list(exporter.get_finished_spans())
    by_id = {s.context.span_id: s.name for s in spans if s.context is not None}
    out: dict[str, list[str]] = {}
    for s in spans:
        parent = by_id.get(s.parent.span_id, "?") if s.parent is not None else "-"
        out.setdefault(s.name, []).append(parent)
    return out


def test_the_callers_span_is_the_parent_through_the_asyncio_embedding(
    traced: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = traced
    PROVIDER[:] = [provider]
    tracer = provider.get_tracer("server")

    async def main() -> None:
        async with open_asyncio_runtime([add, add_sync, asyncio_traced], tracing=Tracing(provider)) as rt:
            with tracer.start_as_current_span("request one"):
                await rt.call(call("add", {"a": 1, "b": 1}))
            with tracer.start_as_current_span("request many"):
                await rt.call_many(
                    [call("add_sync", {"a": 1, "b": 1}, "s"), call("asyncio_traced", {"x": 1}, "t")]
                )
            with tracer.start_as_current_span("request stream"):
                async for _ in rt.as_completed([call("add", {"a": 2, "b": 2}, "u")]):
                    pass

    asyncio.run(main())
    assert _parents(exporter) == {
        "execute_tool add": ["request one", "request stream"],
        "execute_tool add_sync": ["request many"],
        "execute_tool asyncio_traced": ["request many"],
        "inside asyncio tool": ["execute_tool asyncio_traced"],
        "request one": ["-"],
        "request many": ["-"],
        "request stream": ["-"],
    }


def test_the_callers_span_is_the_parent_through_runtime_thread(
    traced: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = traced
    tracer = provider.get_tracer("server")

    async def from_asyncio(rt: RuntimeThread) -> None:
        with tracer.start_as_current_span("asyncio acall"):
            await rt.acall(call("add", {"a": 1, "b": 1}))
        with tracer.start_as_current_span("asyncio acall_many"):
            await rt.acall_many([call("add", {"a": 1, "b": 1}, "a"), call("add_sync", {"a": 1, "b": 1}, "b")])

    with RuntimeThread([add, add_sync], tracing=Tracing(provider)) as rt:
        asyncio.run(from_asyncio(rt))

        def in_a_thread() -> None:
            with tracer.start_as_current_span("thread call"):
                rt.call(call("add_sync", {"a": 1, "b": 1}))
            with tracer.start_as_current_span("thread call_many"):
                rt.call_many([call("add", {"a": 1, "b": 1})])

        worker = threading.Thread(target=in_a_thread)
        worker.start()
        worker.join()
    parents = _parents(exporter)
    assert sorted(parents["execute_tool add"]) == ["asyncio acall", "asyncio acall_many", "thread call_many"]
    assert sorted(parents["execute_tool add_sync"]) == ["asyncio acall_many", "thread call"]


@tool
async def confirm_step(ctx: CallContext, step: str) -> str:
    answer = await ctx.elicit(f"Run {step}?", None)
    return f"{step}: {answer.action}"


def test_a_per_request_answerer_set_in_asyncio_code_reaches_the_tools_question() -> None:
    # runtime.asking is a context variable of the caller: it crosses into the call like the span.
    async def main() -> list[str]:
        async def approve(q: Elicitation) -> Answer:
            return Answer.accept()

        async def refuse(q: Elicitation) -> Answer:
            return Answer.decline("not in this request")

        async with open_asyncio_runtime([confirm_step], tracing=False) as rt:

            async def request(handler: Any, step: str) -> str:
                with asking(on_elicit=handler):
                    return (await rt.call(call("confirm_step", {"step": step}))).content

            return list(await asyncio.gather(request(approve, "a"), request(refuse, "b")))

    assert asyncio.run(main()) == ["a: accept", "b: decline"]


def test_a_call_that_needs_approval_is_deferred_from_asyncio_on_a_sqlite_journal(tmp_path: Any) -> None:
    """The approval's deferral writes the journal (it suspends on a SQLite store): an asyncio
    caller's call of the tool takes a trio task for it from the first call, as for a cache's."""
    from runtime import ToolPending
    from runtime.stores import SQLiteStore

    @tool(requires_approval=True)
    async def pay(amount: int) -> str:
        return f"paid {amount}"

    async def main() -> None:
        async with open_asyncio_runtime([pay], tracing=False, store=SQLiteStore(tmp_path / "calls.db")) as rt:
            pending = await rt.call(ToolCall(id="c1", name="pay", arguments={"amount": 5}))
            assert isinstance(pending, ToolPending), pending
            handle = rt.detached(pending.detached_id)
            await handle.approve()
            assert (await handle.result()).content == "paid 5"

    asyncio.run(main())
