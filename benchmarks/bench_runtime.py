"""W1-W4 and the traced call: the runtime against floors measured in the same run.

floor_a: cached `msgspec.json.Decoder(ArgsStruct)` decode + direct call + encode.
floor_b: floor_a behind one trio memory-channel hop with a `trio.Event` reply.
floor_c: floor_b + one OpenTelemetry SDK span (in-memory exporter).
"""

from __future__ import annotations

import gc
import math
import time
import tracemalloc
from typing import Annotated, Any

import msgspec
import trio
import trio.testing
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runtime import CallRequest, Description, Policy, ToolCall, open_runtime, tool
from runtime.mcp._schema_tool import JsonSchemaTool
from runtime.tracing import Tracing

from ._harness import Report, Row, compare, per_op_sync

AddArgs = msgspec.defstruct("AddArgs", [("a", int), ("b", int)], forbid_unknown_fields=True)
_decoder = msgspec.json.Decoder(AddArgs)
_encoder = msgspec.json.Encoder()
RAW = '{"a": 1, "b": 2}'


def _add(a: int, b: int) -> int:
    return a + b


def floor_a_once() -> bytes:
    args = _decoder.decode(RAW)
    return _encoder.encode(_add(args.a, args.b))


class _Slot:
    __slots__ = ("done", "raw", "result")

    def __init__(self, raw: str) -> None:
        self.raw = raw
        self.done = trio.Event()
        self.result: bytes = b""


async def _floor_worker(receive: trio.MemoryReceiveChannel[_Slot]) -> None:
    async for slot in receive:
        args = _decoder.decode(slot.raw)
        slot.result = _encoder.encode(_add(args.a, args.b))
        slot.done.set()


def _tracer() -> tuple[TracerProvider, Any]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    return provider, provider.get_tracer("floor")


_GENAI_ATTRIBUTES = {
    "gen_ai.operation.name": "execute_tool",
    "gen_ai.tool.name": "add",
    "gen_ai.tool.type": "function",
    "gen_ai.tool.description": "Add two numbers.",
}


async def floor_b_seq(n: int, traced: bool = False, attributes: bool = False) -> float:
    tracer = _tracer()[1] if traced else None
    send, receive = trio.open_memory_channel[_Slot](1024)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_floor_worker, receive)
        gc.collect()
        start = trio.current_time()
        for _ in range(n):
            if tracer is not None:
                span = tracer.start_span(
                    "execute_tool add",
                    attributes={**_GENAI_ATTRIBUTES, "gen_ai.tool.call.id": "c1"} if attributes else None,
                )
            slot = _Slot(RAW)
            send.send_nowait(slot)
            await slot.done.wait()
            if tracer is not None:
                span.end()
        elapsed = trio.current_time() - start
        nursery.cancel_scope.cancel()
    return elapsed / n * 1e6


async def floor_b_fanout(batch: int, rounds: int) -> float:
    send, receive = trio.open_memory_channel[_Slot](batch)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_floor_worker, receive)
        gc.collect()
        start = trio.current_time()
        for _ in range(rounds):
            slots = [_Slot(RAW) for _ in range(batch)]
            for slot in slots:
                send.send_nowait(slot)
            for slot in slots:
                await slot.done.wait()
        elapsed = trio.current_time() - start
        nursery.cancel_scope.cancel()
    return elapsed / (batch * rounds) * 1e6


@tool
async def add(a: int, b: int) -> int:
    return a + b


@tool(inline=True)
def add_inline(a: int, b: int) -> int:
    return a + b


@tool
def add_thread(a: int, b: int) -> int:
    return a + b


class NoOp(Policy):
    """A policy that lets every call through and returns its result: the policy machinery's cost."""

    def intercept(self, request: CallRequest) -> Any:
        return (yield request)


async def runtime_seq(n: int, name: str = "add", tracing: bool | Tracing = False, policies: int = 0) -> float:
    chain = [NoOp() for _ in range(policies)]
    async with open_runtime([add, add_inline, add_thread], tracing=tracing, policies=chain) as rt:
        call = ToolCall(id="c1", name=name, arguments=RAW)
        await rt.call(call)
        gc.collect()
        start = trio.current_time()
        for _ in range(n):
            await rt.call(call)
        elapsed = trio.current_time() - start
    return elapsed / n * 1e6


async def runtime_fanout(batch: int, rounds: int) -> float:
    async with open_runtime([add], tracing=False) as rt:
        calls = [ToolCall(id=f"c{i}", name="add", arguments=RAW) for i in range(batch)]
        await rt.call_many(calls)
        gc.collect()
        start = trio.current_time()
        for _ in range(rounds):
            await rt.call_many(calls)
        elapsed = trio.current_time() - start
    return elapsed / (batch * rounds) * 1e6


def build_floor_once() -> None:
    struct = msgspec.defstruct(
        "search",
        [
            ("query", Annotated[str, msgspec.Meta(description="words to look for")]),
            ("limit", int, 10),
            ("verbose", bool, False),
        ],
        kw_only=True,
        forbid_unknown_fields=True,
    )
    msgspec.json.schema(struct)


def _search(
    query: Annotated[str, Description("words to look for")], limit: int = 10, verbose: bool = False
) -> list[str]:
    """Search the documentation.

    Args:
        limit: how many hits to return.
        verbose: include snippets.
    """
    return []


def build_tool_once() -> None:
    tool(_search).descriptor  # noqa: B018 - building it is the point


_SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "where to look"},
        "depth": {"type": "integer", "minimum": 0},
        "mode": {"enum": ["fast", "full"]},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["path"],
}


async def _schema_fn(arguments: dict[str, Any], ctx: Any) -> str:
    return ""


def build_json_schema_tool_once() -> None:
    JsonSchemaTool("find", "Find files.", _SCHEMA, _schema_fn)  # an MCP server's tool is one of these


# -- W4: memory per parked call --------------------------------------------------------------


async def parked_floor(n: int) -> float:
    release = trio.Event()

    async def hold(slot: _Slot) -> None:
        await release.wait()
        slot.done.set()

    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    async with trio.open_nursery() as nursery:
        send, receive = trio.open_memory_channel[_Slot](math.inf)

        async def worker() -> None:
            async with trio.open_nursery() as inner:
                async for slot in receive:
                    inner.start_soon(hold, slot)

        nursery.start_soon(worker)
        slots = [_Slot(RAW) for _ in range(n)]
        for slot in slots:
            send.send_nowait(slot)
        await trio.testing.wait_all_tasks_blocked()
        during = tracemalloc.get_traced_memory()[0]
        release.set()
        for slot in slots:
            await slot.done.wait()
        await send.aclose()
    tracemalloc.stop()
    return (during - before) / n


async def parked_runtime(n: int) -> float:
    release = trio.Event()

    @tool
    async def hold(x: int) -> int:
        await release.wait()
        return x

    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    async with open_runtime([hold], tracing=False) as rt, trio.open_nursery() as nursery:
        calls = [ToolCall(id=f"c{i}", name="hold", arguments='{"x": 1}') for i in range(n)]
        results: list[Any] = []

        async def run() -> None:
            results.extend(await rt.call_many(calls))

        nursery.start_soon(run)
        await trio.testing.wait_all_tasks_blocked()
        during = tracemalloc.get_traced_memory()[0]
        release.set()
    tracemalloc.stop()
    assert len(results) == n
    assert all(r.ok for r in results)
    return (during - before) / n


# -- thousands of tools: each costs nothing until it is called (issue 44) -----------------------


def _many_tools(n: int) -> list[Any]:
    made = []
    for i in range(n):

        async def f(x: int) -> int:
            return x

        f.__name__ = f"t{i}"
        f.__doc__ = f"Tool number {i}."
        made.append(tool(f))
    return made


async def _open_close(n: int, calls: int = 0) -> tuple[float, float, float, float]:
    """Seconds to open a runtime of `n` tools and to close it, traced bytes per idle tool, and
    microseconds per sequential call of one of them (`calls` of them)."""
    import gc

    made = _many_tools(n)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    start = time.perf_counter()
    async with open_runtime(made, tracing=False) as rt:
        opened = time.perf_counter()
        idle = (tracemalloc.get_traced_memory()[0] - before) / n
        tracemalloc.stop()
        call = ToolCall(id="c", name=f"t{n // 2}", arguments='{"x": 1}')
        await rt.call(call)
        t0 = time.perf_counter()
        for _ in range(calls):
            await rt.call(call)
        per_call = (time.perf_counter() - t0) / max(1, calls) * 1e6
        closing = time.perf_counter()
    closed = time.perf_counter()
    return opened - start, closed - closing, idle, per_call


def scale_rows(report: Report, quick: bool) -> None:
    """Open and close 10,000 and 100,000 tools; bytes per idle tool; a call's cost among them."""
    calls = 2_000 if quick else 20_000
    o10, c10, idle10, call10 = trio.run(_open_close, 10_000, calls)
    _, _, _, call1 = trio.run(_open_close, 1, calls)
    report.add(Row("open 10,000 tools (goal 0.5 s)", "runtime", "goal", o10 * 1e6, 500_000, target=1.0))
    report.add(Row("close 10,000 tools (goal 0.5 s)", "runtime", "goal", c10 * 1e6, 500_000, target=1.0))
    report.add(Row("bytes per idle tool (goal 2 KB)", "runtime", "goal", idle10, 2048, target=1.0))
    report.add(Row("a call among 10,000 tools vs among 1", "runtime", "1 tool", call10, call1, target=1.1))
    if not quick:
        o100, c100, _, _ = trio.run(_open_close, 100_000, 0)
        report.add(
            Row("open 100,000 tools vs 10x 10,000", "runtime", "10x", o100 * 1e6, o10 * 10e6, target=1.0)
        )
        report.add(
            Row("close 100,000 tools vs 10x 10,000", "runtime", "10x", c100 * 1e6, c10 * 10e6, target=1.0)
        )


def main(quick: bool = False) -> Report:
    import trio.testing

    n = 3_000 if quick else 20_000
    repeats = 3 if quick else 7
    report = Report("runtime")

    s, f = compare(
        lambda: per_op_sync(floor_a_once, n * 5), lambda: per_op_sync(floor_a_once, n * 5), repeats
    )
    report.add(Row("floor_a (decode+call+encode)", "floor_a", "floor_a", s, f, note="sanity: ~1.00"))

    s, f = compare(lambda: trio.run(runtime_seq, n), lambda: trio.run(floor_b_seq, n), repeats)
    report.add(Row("W1 sequential call, async tool", "runtime", "floor_b", s, f, target=1.3))
    s, f = compare(
        lambda: trio.run(runtime_seq, n, "add", False, 3), lambda: trio.run(runtime_seq, n), repeats
    )
    report.add(
        Row(
            "W1 + three no-op policies",
            "runtime+3 policies",
            "runtime",
            s,
            f,
            note=f"+{s - f:.2f} us per call (budget: +2 us)",
        )
    )
    s, f = compare(lambda: trio.run(runtime_seq, n, "add_inline"), lambda: trio.run(floor_b_seq, n), repeats)
    report.add(Row("W1 sequential call, inline sync", "runtime", "floor_b", s, f, target=1.3))
    s, f = compare(
        lambda: trio.run(runtime_seq, n // 4, "add_thread"), lambda: trio.run(floor_b_seq, n), repeats
    )
    report.add(
        Row("W1 sequential call, sync in thread", "runtime", "floor_b", s, f, note="a thread hop per call")
    )

    rounds = 3 if quick else 20
    s, f = compare(
        lambda: trio.run(runtime_fanout, 1000, rounds),
        lambda: trio.run(floor_b_fanout, 1000, rounds),
        repeats,
    )
    report.add(Row("W2 1,000 concurrent calls (per call)", "runtime", "floor_b", s, f, target=1.3))

    m = 300 if quick else 1500
    s, f = compare(lambda: per_op_sync(build_tool_once, m), lambda: per_op_sync(build_floor_once, m), repeats)
    report.add(
        Row(
            "W3 tool + schema build",
            "@tool",
            "floor_a'",
            s,
            f,
            target=1.5,
            note="floor: defstruct+json.schema",
        )
    )

    from . import _big_module

    s, _ = compare(lambda: _big_module.build_on_big_module(), lambda: 1000.0, 3 if quick else 5)
    report.add(Row("W3 tool, parameter class in a 4,000-line module", "@tool", "1 ms", s, 1000.0, target=1.0))
    s, _ = compare(_big_module.first_on_big_module, lambda: 1000.0, 3 if quick else 5)
    report.add(
        Row(
            "W3 first tool on a 4,000-line module",
            "@tool",
            "1 ms",
            s,
            1000.0,
            target=1.0,
            note="reads its source",
        )
    )
    s, _ = compare(lambda: per_op_sync(build_json_schema_tool_once, m), lambda: 100.0, repeats)
    report.add(Row("W3 JsonSchemaTool build", "JsonSchemaTool", "0.1 ms", s, 100.0, target=1.0))

    parked = 2_000 if quick else 10_000
    s, f = compare(lambda: trio.run(parked_runtime, parked), lambda: trio.run(parked_floor, parked), 3)
    report.add(
        Row(
            f"W4 bytes per parked call ({parked:,})",
            "runtime",
            "floor_b",
            s,
            f,
            target=1.3,
            note="bytes, not us",
        )
    )

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    traced = Tracing(tracer_provider=provider)
    s, f = compare(
        lambda: trio.run(runtime_seq, n, "add", traced), lambda: trio.run(floor_b_seq, n, True), repeats
    )
    report.add(Row("traced call (SDK, in-memory export)", "runtime", "floor_c", s, f, target=1.2))
    s, f = compare(
        lambda: trio.run(runtime_seq, n, "add", traced), lambda: trio.run(floor_b_seq, n, True, True), repeats
    )
    report.add(
        Row(
            "traced call, same-attributes floor",
            "runtime",
            "floor_c+",
            s,
            f,
            note="span carries the 5 GenAI attributes",
        )
    )

    s, f = compare(
        lambda: trio.run(runtime_seq, n, "add", True), lambda: trio.run(runtime_seq, n, "add", False), repeats
    )
    report.add(Row("tracing=True, no SDK configured", "runtime", "untraced", s, f, target=1.1))
    scale_rows(report, quick)
    return report
