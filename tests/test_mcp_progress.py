"""A tool talks back during its call: `ctx.report_progress` and `ctx.log`, locally and over MCP.

Locally: span events, Python log records and the caller's `reporting(...)` handlers, rate
limited. Served: `notifications/progress` for the request's progress token and
`notifications/message` honouring `logging/setLevel`, seen by the SDK's own client.
"""

from __future__ import annotations

import logging
from typing import Any

import mcp_types as types
import pytest
import trio
from mcp import Client
from mcp.client._memory import InMemoryTransport
from mcp.shared.exceptions import MCPDeprecationWarning
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runtime import CallContext, ToolCall, ToolSuccess, open_runtime, reporting, tool
from runtime.mcp._server import ServedRuntime
from runtime.tools._context import PROGRESS_BURST
from runtime.tracing import Tracing

LIMIT = 10


@tool
async def steps(ctx: CallContext, n: int) -> str:
    """Report progress n times, then log."""
    for i in range(1, n + 1):
        await ctx.report_progress(i, total=n, message=f"step {i}")
    await ctx.log("warning", "almost done", n=n)
    await ctx.log("debug", "done")
    return "ok"


@tool
async def bad_level(ctx: CallContext) -> str:
    """Log at a level that does not exist."""
    await ctx.log("loud", "hello")
    return "unreachable"


def call(name: str, arguments: Any) -> ToolCall:
    return ToolCall(id="c1", name=name, arguments=arguments)


async def test_progress_and_logs_reach_the_span_python_logging_and_the_handlers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="runtime.tools")
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    progress: list[tuple[str, float, float | None, str | None]] = []
    logs: list[tuple[str, str, dict[str, Any]]] = []

    async def on_progress(ctx: CallContext, p: float, total: float | None, message: str | None) -> None:
        progress.append((ctx.tool_name, p, total, message))

    async def on_log(ctx: CallContext, level: str, message: str, data: dict[str, Any]) -> None:
        logs.append((level, message, data))

    with trio.fail_after(LIMIT):
        async with open_runtime([steps, bad_level], tracing=Tracing(provider)) as rt:
            with reporting(on_progress=on_progress, on_log=on_log):
                result = await rt.call(call("steps", {"n": 3}))
            assert isinstance(result, ToolSuccess)
            # Outside the block nobody is told, but the span and the log still are.
            await rt.call(call("steps", {"n": 1}))
            failure = await rt.call(call("bad_level", {}))
            assert not failure.ok
            assert "log level must be one of debug, info" in failure.content
    assert progress == [("steps", 1, 3, "step 1"), ("steps", 2, 3, "step 2"), ("steps", 3, 3, "step 3")]
    assert logs == [("warning", "almost done", {"n": 3}), ("debug", "done", {})]
    span = next(s for s in spans.get_finished_spans() if s.name == "execute_tool steps")
    events = [(e.name, dict(e.attributes or {})) for e in span.events]
    assert (
        "tool.progress",
        {"tool.progress": 1, "tool.progress.total": 3, "tool.progress.message": "step 1"},
    ) in events
    assert (
        "tool.log",
        {"log.severity": "warning", "log.message": "almost done", "log.data": '{"n":3}'},
    ) in events
    records = [(r.name, r.levelno, r.getMessage()) for r in caplog.records if r.name == "runtime.tools.steps"]
    assert ("runtime.tools.steps", logging.WARNING, "almost done {'n': 3}") in records


async def test_a_chatty_tool_is_rate_limited_but_its_last_report_passes() -> None:
    seen: list[float] = []

    async def on_progress(ctx: CallContext, p: float, total: float | None, message: str | None) -> None:
        seen.append(p)

    with trio.fail_after(LIMIT):
        async with open_runtime([steps], tracing=False) as rt, trio.open_nursery():
            with reporting(on_progress=on_progress):
                await rt.call(call("steps", {"n": 1000}))
    # A burst, perhaps a few more as tokens refill while it runs, and the final report.
    assert PROGRESS_BURST <= len(seen) < 100
    assert seen[:PROGRESS_BURST] == list(range(1, PROGRESS_BURST + 1))
    assert seen[-1] == 1000


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_served_progress_and_log_messages_reach_the_sdk_client(mode: str) -> None:
    progress: list[tuple[float, float | None, str | None]] = []
    messages: list[types.LoggingMessageNotificationParams] = []

    async def on_progress(p: float, total: float | None, message: str | None) -> None:
        progress.append((p, total, message))

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        messages.append(params)

    with trio.fail_after(LIMIT):
        async with open_runtime([steps], tracing=False) as rt:
            server = ServedRuntime(rt)
            transport = InMemoryTransport(server.server)
            options: dict[str, Any] = {"log_level": "warning"} if mode != "legacy" else {}
            async with Client(transport, mode=mode, logging_callback=on_log, **options) as client:
                if mode == "legacy":
                    assert client.server_capabilities.logging is not None
                    with pytest.warns(MCPDeprecationWarning):
                        await client.set_logging_level("warning")
                result = await client.call_tool("steps", {"n": 3}, progress_callback=on_progress)
                assert not result.is_error
    assert progress == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]
    # At or above the level asked for: the warning, not the debug message.
    assert [(m.level, m.logger, m.data) for m in messages] == [
        ("warning", "steps", {"message": "almost done", "n": 3})
    ]
