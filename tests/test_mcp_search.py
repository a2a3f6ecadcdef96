"""A served runtime holding many tools offers a search tool (issue 44), through the SDK client.

In-process (`ServedRuntime` over the SDK's memory transport, both protocol eras) and as a child
process (`python -m runtime serve ... --search-over N` over stdio).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
import trio
from mcp import Client, MCPError, StdioServerParameters
from mcp.client._memory import InMemoryTransport

from runtime import ToolRegistry, open_runtime, tool
from runtime.mcp._server import ServedRuntime
from runtime.search import ToolSearch
from tests.mcp_fixtures import registry as fixtures

ROOT = Path(__file__).resolve().parent.parent
CALL_TIMEOUT = 30


@tool
def get_current_weather(city: str) -> str:
    """The weather now in a city: temperature, wind and rain."""
    return f"sunny in {city}"


@tool
def convert_currency(amount: float, source: str, target: str) -> str:
    """Exchange an amount of money from one currency into another."""
    return f"{amount * 2} {target}"


@tool
def book_flight(origin: str, destination: str) -> str:
    """Reserve a seat on a plane between two airports."""
    return f"booked {origin}-{destination}"


@tool
def create_github_issue(repository: str, title: str) -> str:
    """Open an issue in a GitHub repository."""
    return "issue 7"


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


TOOLS = ToolRegistry([add, get_current_weather, convert_currency, book_flight, create_github_issue])


def names(listing: types.ListToolsResult) -> list[str]:
    return [t.name for t in listing.tools]


def text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


@asynccontextmanager
async def client_of(
    search: ToolSearch, mode: str, registry: ToolRegistry = TOOLS, **options: Any
) -> AsyncIterator[tuple[Client, trio.Event]]:
    """An SDK client of a `ServedRuntime` over memory streams, and an event set by list_changed."""
    changed = trio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    async with open_runtime(registry, tracing=False) as rt, trio.open_nursery() as nursery:
        served = ServedRuntime(rt, search=search, **options)
        nursery.start_soon(served.announce_changes)
        async with Client(InMemoryTransport(served.server), mode=mode, message_handler=on_message) as client:
            yield client, changed
        nursery.cancel_scope.cancel()


async def test_past_its_threshold_a_server_lists_the_search_tool_and_what_a_session_finds() -> None:
    with trio.fail_after(CALL_TIMEOUT):
        async with client_of(ToolSearch(threshold=3, always=["add"]), "legacy") as (client, changed):
            listing = await client.list_tools()
            assert names(listing) == ["search_tools", "add"]
            assert listing.tools[0].input_schema["required"] == ["query"]
            found = await client.call_tool("search_tools", {"query": "what's the weather like in Paris?"})
            assert not found.is_error
            assert text(found).splitlines()[1].startswith("- get_current_weather: The weather now")
            assert found.structured_content is not None
            definitions = found.structured_content["tools"]
            assert definitions[0]["name"] == "get_current_weather"
            assert definitions[0]["inputSchema"]["required"] == ["city"]
            await changed.wait()  # this session's listing changed: it is told
            assert names(await client.list_tools())[:3] == ["search_tools", "add", "get_current_weather"]
            weather = await client.call_tool("get_current_weather", {"city": "Paris"})
            assert text(weather) == "sunny in Paris"
            # A tool no search found yet is not listed, but it can be called by name.
            assert "book_flight" not in names(await client.list_tools())
            booked = await client.call_tool("book_flight", {"origin": "CDG", "destination": "FCO"})
            assert text(booked) == "booked CDG-FCO"


async def test_each_session_lists_only_what_its_own_searches_found() -> None:
    search = ToolSearch(threshold=3, always=["add"])
    with trio.fail_after(CALL_TIMEOUT):
        async with open_runtime(TOOLS, tracing=False) as rt:
            served = ServedRuntime(rt, search=search)
            async with (
                Client(InMemoryTransport(served.server), mode="legacy") as first,
                Client(InMemoryTransport(served.server), mode="legacy") as second,
            ):
                await first.call_tool("search_tools", {"query": "exchange money into euros"})
                assert "convert_currency" in names(await first.list_tools())
                assert names(await second.list_tools()) == ["search_tools", "add"]


async def test_within_its_threshold_a_server_lists_every_tool_and_no_search_tool() -> None:
    with trio.fail_after(CALL_TIMEOUT):
        async with client_of(ToolSearch(threshold=10), "legacy") as (client, _):
            assert names(await client.list_tools()) == [t.name for t in TOOLS]
            with pytest.raises(MCPError, match="no tool named 'search_tools'"):  # not offered
                await client.call_tool("search_tools", {"query": "weather"})


async def test_a_stateless_client_gets_the_found_tools_whole_in_the_search_result() -> None:
    with trio.fail_after(CALL_TIMEOUT):
        async with client_of(ToolSearch(threshold=3), "auto") as (client, _):
            assert client.protocol_version == "2026-07-28"
            assert names(await client.list_tools()) == ["search_tools"]
            found = await client.call_tool("search_tools", {"query": "open an issue on github"})
            assert found.structured_content is not None
            definition = found.structured_content["tools"][0]
            assert definition["name"] == "create_github_issue"
            # No session to load it into: the listing is the same, the definition is enough to call it.
            assert names(await client.list_tools()) == ["search_tools"]
            called = await client.call_tool(definition["name"], {"repository": "a/b", "title": "bug"})
            assert text(called) == "issue 7"


@pytest.mark.parametrize(
    "arguments", [{}, {"query": 7}, {"query": "weather", "limit": 99}], ids=["none", "not-text", "unknown"]
)
async def test_a_search_with_bad_arguments_is_a_tool_error_that_says_what_it_takes(
    arguments: dict[str, Any],
) -> None:
    with trio.fail_after(CALL_TIMEOUT):
        async with client_of(ToolSearch(threshold=3), "legacy") as (client, _):
            result = await client.call_tool("search_tools", arguments)
            assert result.is_error
            assert "takes one argument, 'query'" in text(result)


async def test_a_search_that_finds_nothing_says_so() -> None:
    with trio.fail_after(CALL_TIMEOUT):
        async with client_of(ToolSearch(threshold=3), "legacy") as (client, changed):
            result = await client.call_tool("search_tools", {"query": "quantum chromodynamics"})
            assert not result.is_error
            assert text(result).startswith("No tool matches 'quantum chromodynamics'")
            assert result.structured_content == {"tools": []}
            assert not changed.is_set()


async def test_a_client_searches_only_the_tools_its_view_holds() -> None:
    search = ToolSearch(threshold=2)
    with trio.fail_after(CALL_TIMEOUT):
        async with open_runtime(TOOLS, tracing=False) as rt:
            view = rt.scoped(exclude=["get_current_weather"])
            served = ServedRuntime(rt, search=search, view_of=lambda principal: view)
            async with Client(InMemoryTransport(served.server), mode="legacy") as client:
                found = await client.call_tool("search_tools", {"query": "weather in Paris now"})
                assert found.structured_content is not None
                assert "get_current_weather" not in [t["name"] for t in found.structured_content["tools"]]
                assert "get_current_weather" not in names(await client.list_tools())


async def test_cli_serve_search_over_offers_the_search_tool_over_stdio() -> None:
    server = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "runtime",
            "serve",
            "tests.mcp_fixtures:registry",
            "--search-over",
            "2",
            "--search-always",
            "add",
        ],
        cwd=str(ROOT),
    )
    changed = trio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    with trio.fail_after(CALL_TIMEOUT):
        async with Client(server, mode="legacy", message_handler=on_message) as client:
            assert len(fixtures) == 4
            assert names(await client.list_tools()) == ["search_tools", "add"]
            found = await client.call_tool("search_tools", {"query": "weather forecast for a city"})
            assert found.structured_content is not None
            assert found.structured_content["tools"][0]["name"] == "forecast"
            await changed.wait()
            assert names(await client.list_tools())[:3] == ["search_tools", "add", "forecast"]
            result = await client.call_tool("forecast", {"city": "Oslo"})
            assert not result.is_error
