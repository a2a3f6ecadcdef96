"""Tools cost nothing until they are called (issue 44): a tool with nothing to set up, in this
process, gets its actor on its first call and loses it when idle, its counters kept; tools with
a `setup()` (or placed in other processes) still start when they are registered."""

from __future__ import annotations

import gc
import logging
import tracemalloc
from typing import Any

import msgspec
import pytest
import trio

from runtime import CallRequest, Policy, ToolBase, ToolCall, open_runtime, tool


class NoArgs(msgspec.Struct):
    pass


def many(n: int) -> list[Any]:
    tools = []
    for i in range(n):

        async def f(x: int) -> int:
            return x

        f.__name__ = f"t{i}"
        f.__doc__ = f"Tool number {i}."
        tools.append(tool(f))
    return tools


async def test_ten_thousand_tools_cost_under_2kb_each_until_called_and_close_without_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tools = many(10_000)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        with caplog.at_level(logging.WARNING):
            async with open_runtime(tools, tracing=False) as rt:
                idle = (tracemalloc.get_traced_memory()[0] - before) / len(tools)
                result = await rt.call(ToolCall(id="1", name="t42", arguments='{"x": 7}'))
                stats = rt.statistics()
    finally:
        tracemalloc.stop()
    assert result.ok
    assert idle < 2048, f"{idle:.0f} bytes per idle tool"
    assert len(stats.tools) == 10_000  # every tool is listed, running or not
    assert stats.tools["t42"].calls == 1
    assert stats.tools["t7"].state == "up"  # it serves on demand
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


async def test_an_actor_starts_on_its_first_call_and_stops_when_idle_keeping_its_counters(
    autojump_clock: trio.abc.Clock,
) -> None:
    @tool
    async def echo(text: str) -> str:
        """Echo."""
        return text

    async with open_runtime([echo], tracing=False, stop_idle_after=10) as rt:
        routing: Any = rt._routing
        assert "echo" not in routing.routes  # nothing runs for it yet
        assert (await rt.call(ToolCall(id="1", name="echo", arguments='{"text": "a"}'))).ok
        first = routing.routes["echo"]
        await trio.sleep(25)  # idle for two sweeps: its actor stops
        assert "echo" not in routing.routes
        assert rt.statistics().tools["echo"].calls == 1  # what it counted is kept
        assert (await rt.call(ToolCall(id="2", name="echo", arguments='{"text": "b"}'))).ok
        assert routing.routes["echo"] is not first  # a new actor, on the next call
        assert rt.statistics().tools["echo"].calls == 2
    assert rt.statistics().tools["echo"].state == "stopped"


async def test_a_busy_actor_is_not_stopped_for_idleness(autojump_clock: trio.abc.Clock) -> None:
    @tool
    async def slow() -> str:
        """Takes a minute."""
        await trio.sleep(60)
        return "done"

    async with open_runtime([slow], tracing=False, stop_idle_after=5) as rt:
        result = await rt.call(ToolCall(id="1", name="slow"))
        assert result.ok  # its call ran through many sweeps
        assert rt.statistics().tools["slow"].calls == 1


class Awaits(Policy):
    """A policy that awaits (a store, an approval) before it lets each call through."""

    suspends = True

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def intercept(self, request: CallRequest) -> Any:
        yield trio.sleep(self.seconds)  # noqa: ASYNC105  # a policy yields what it awaits
        return (yield request)


async def test_an_actor_a_call_is_on_its_way_to_is_not_stopped_for_idleness(
    autojump_clock: trio.abc.Clock,
) -> None:
    @tool
    async def echo(text: str) -> str:
        """Echo."""
        return text

    async with open_runtime([echo], tracing=False, stop_idle_after=5, policies=[Awaits(30)]) as rt:
        assert (await rt.call(ToolCall(id="1", name="echo", arguments='{"text": "a"}'))).ok
        # the next call is routed to the same actor, then waits 30 s in its policy: many sweeps
        result = await rt.call(ToolCall(id="2", name="echo", arguments='{"text": "b"}'))
        assert result.ok, result.content


async def test_a_tool_with_setup_starts_when_it_is_registered() -> None:
    log: list[str] = []

    class Connected(ToolBase[NoArgs, str]):
        name = "connected"
        description = "Needs a connection."

        async def setup(self) -> None:
            log.append("setup")

        async def execute(self, args: NoArgs, ctx: Any) -> str:
            return "ok"

    async with open_runtime([Connected()], tracing=False) as rt:
        assert log == ["setup"]  # before any call: its setup runs at open, as before
        assert "connected" in rt._routing.routes
