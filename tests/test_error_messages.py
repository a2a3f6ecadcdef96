"""Mistakes a newcomer makes, and the message that says how to fix each (issue 26)."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Generator
from typing import Any

import pytest
import trio

from runtime import FailureKind, ToolCall, ToolDefinitionError, ToolRegistry, open_runtime, tool


def search(query: str) -> str:
    return query


def shout(query: str) -> str:
    return query.upper()


def test_a_duplicate_name_in_a_registry_suggests_another_name() -> None:
    other = tool(name="search")(shout)
    with pytest.raises(ValueError, match=r"^Tool 'search' is already defined; ") as info:
        ToolRegistry([search, other])
    assert "@tool(name=...)" in str(info.value)
    assert "replace=True" not in str(info.value)  # a registry has no replace: a rename is the fix


def test_the_same_tool_listed_twice_says_so() -> None:
    found = tool(search)
    with pytest.raises(
        ValueError, match=r"^Tool 'search' is already defined: the same tool is listed twice$"
    ):
        ToolRegistry([found, found])


async def test_registering_a_taken_name_at_run_time_suggests_replace_true() -> None:
    async with open_runtime([search], tracing=False) as rt:
        with pytest.raises(ValueError, match=r"^Tool 'search' is already defined; pass replace=True"):
            await rt.register(tool(name="search")(shout))
        await rt.register(tool(name="search")(shout), replace=True)
        assert (await rt.invoke("search", query="a")).content == "A"


async def test_two_new_tools_of_one_name_at_run_time_suggest_a_rename_not_replace() -> None:
    async with open_runtime([], tracing=False) as rt:
        with pytest.raises(ValueError, match=r"^Tool 'twice' is already defined; give the new one") as info:
            await rt.register(tool(name="twice")(lambda: 1), tool(name="twice")(lambda: 2))
    assert "replace=True" not in str(info.value)


def test_a_misspelt_tool_option_suggests_the_option_meant() -> None:
    with pytest.raises(
        ToolDefinitionError,
        match=r"^tool 'slow': unknown option 'timout'; did you mean 'timeout'\? the options are: timeout, ",
    ):

        @tool(timout=5)
        def slow() -> None: ...


def test_an_unknown_option_far_from_every_option_lists_them_without_a_guess() -> None:
    with pytest.raises(ToolDefinitionError, match=r"unknown option 'colour'; the options are: timeout, "):

        @tool(colour="red")
        def paint() -> None: ...


def test_open_runtime_under_asyncio_run_names_open_asyncio_runtime() -> None:
    async def main() -> None:
        async with open_runtime([search]):
            pass  # pragma: no cover - never reached

    with pytest.raises(RuntimeError) as info:
        asyncio.run(main())
    assert str(info.value) == (
        "open_runtime needs trio (trio.run(main)) and was called from asyncio code (asyncio.run): "
        "from asyncio use runtime.embed.open_asyncio_runtime, from sync code runtime.embed.RuntimeThread"
    )


class AsyncioFuture:
    """What an asyncio library's awaitable does at its heart: yield a Future to the loop."""

    def __await__(self) -> Generator[Any, None, None]:
        loop = asyncio.new_event_loop()
        try:
            yield loop.create_future()
        finally:
            loop.close()


@tool
async def uses_asyncio_sleep() -> str:
    await asyncio.sleep(0.01)
    return "slept"


@tool
async def awaits_a_future() -> str:
    await AsyncioFuture()
    return "done"


HINT = (
    'the tool awaits asyncio code but runs on trio: give it @tool(loop="asyncio") and open the '
    "runtime with runtime.embed.open_asyncio_runtime, or use a trio-compatible client"
)


async def test_an_async_tool_awaiting_asyncio_code_under_trio_is_told_how_to_run_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="runtime.engine")
    async with open_runtime([uses_asyncio_sleep, awaits_a_future], tracing=False) as rt:
        slept = await rt.invoke(uses_asyncio_sleep)
        again = await rt.invoke(uses_asyncio_sleep)
        future = await rt.invoke(awaits_a_future)
    assert slept.kind is FailureKind.ERROR
    assert slept.message == f"tool 'uses_asyncio_sleep' raised RuntimeError: no running event loop ({HINT})"
    assert again.message == slept.message
    assert future.kind is FailureKind.ERROR
    assert future.message.startswith(
        "tool 'awaits_a_future' raised TypeError: trio.run received unrecognized"
    )
    assert future.message.endswith(f"({HINT})")
    told = [r.getMessage() for r in caplog.records if "awaits asyncio code" in r.getMessage()]
    assert told == [f"tool 'uses_asyncio_sleep': {HINT}", f"tool 'awaits_a_future': {HINT}"]  # once a tool


@tool
async def waits(seconds: float) -> str:
    await trio.sleep(seconds)
    return "done"


@tool(timeout=500)
async def bounded(seconds: float) -> str:
    await trio.sleep(seconds)
    return "done"


async def test_a_call_with_no_deadline_that_runs_long_is_logged_once(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="runtime.engine")
    async with (
        open_runtime([waits, bounded], tracing=False, long_call_warning=60) as rt,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(rt.call, ToolCall(id="long", name="waits", arguments={"seconds": 300}))
        nursery.start_soon(rt.call, ToolCall(id="short", name="waits", arguments={"seconds": 50}))
        nursery.start_soon(rt.call, ToolCall(id="timed", name="bounded", arguments={"seconds": 300}))
        nursery.start_soon(functools.partial(rt.invoke, waits, seconds=300, _timeout=400))
    told = [r.getMessage() for r in caplog.records if "no deadline" in r.getMessage()]
    assert len(told) == 1, told  # the long one, once: the short one ended, the others had deadlines
    assert told[0].startswith("tool 'waits': call long has run over ")
    assert told[0].endswith(
        " s with no deadline; give the tool timeout=, or the runtime default_timeout=, to bound such calls"
    )
    seconds = float(told[0].split("over ")[1].split(" s")[0])
    assert 60 <= seconds <= 60 + 2 * 15


async def test_no_long_call_warning_when_it_is_off(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="runtime.engine")
    async with open_runtime([waits], tracing=False, long_call_warning=None) as rt:
        assert (await rt.invoke(waits, seconds=300)).ok
    assert not [r for r in caplog.records if "no deadline" in r.getMessage()]
