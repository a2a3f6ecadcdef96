"""Issue 25, points 12 and 14 over MCP, with real SDK servers and the official client.

12: a remote tool is the server's schema: `registry.schemas("mcp")` and `("jsonschema")` are
it, served again it is it, calls are checked against it, and providers shown the IR keep
`required` and read its either-or in the description. 14: our own tools go out with every
type written where it is used, as clients that do not follow `$ref` (the MCP Inspector) need.
"""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec
import pytest
import trio
from mcp import Client
from mcp.client._memory import InMemoryTransport

from runtime import FailureKind, ToolCall, open_runtime, tool
from runtime import mcp as rmcp
from runtime.mcp._server import ServedRuntime
from tests.mcp_servers.fidelity import FETCH_SCHEMA, OUTPUT_SCHEMA

SERVERS = Path(__file__).parent / "mcp_servers"
LIMIT = 30


def remote(mode: str = "legacy") -> rmcp.ServerSpec:
    # a loaded machine may take more than the default 10 s to start a Python server process
    return rmcp.stdio(
        sys.executable, [str(SERVERS / "fidelity.py")], mode=mode, name="fidelity", connect_timeout=LIMIT - 5
    )


async def test_a_remote_tools_schema_is_the_servers_own_wherever_it_goes() -> None:
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[remote()], tracing=False) as rt:
            (listed,) = rt.registry.schemas("mcp")
            assert listed["inputSchema"] == FETCH_SCHEMA  # $defs, $anchor, allOf/anyOf, if/then, open
            assert listed["outputSchema"] == OUTPUT_SCHEMA
            (plain,) = rt.registry.schemas("jsonschema")
            assert plain["parameters"] == FETCH_SCHEMA
            # Served again (a runtime in front of another server), the official client sees it as given.
            served = ServedRuntime(rt)
            async with Client(InMemoryTransport(served.server), mode="legacy") as client:
                (again,) = (await client.list_tools()).tools
                assert again.input_schema == FETCH_SCHEMA
                assert again.output_schema == OUTPUT_SCHEMA
                proxied = await client.call_tool(
                    "fetch", {"url": "https://x.test", "mode": "text", "lang": "en"}
                )
                assert proxied.is_error is False  # the structuredContent validates against OUTPUT_SCHEMA
                assert proxied.structured_content == {
                    "arguments": {"url": "https://x.test", "mode": "text", "lang": "en"}
                }


@pytest.mark.parametrize("provider", ["openai", "openai-responses", "anthropic", "gemini"])
async def test_providers_shown_a_remote_tool_keep_its_required_and_read_its_rules(provider: str) -> None:
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[remote()], tracing=False) as rt:
            (rendered,) = rt.registry.schemas(provider)
    function = rendered.get("function", rendered)
    parameters = function.get("parameters") or function["input_schema"]
    assert parameters["required"] == ["mode"]
    assert function["description"] == (
        'Fetch a page. Requires `url` or `path`. When `mode` is "raw", `retries` is required.'
    )
    assert parameters["properties"]["options"]["description"].startswith("how to fetch")


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_calls_to_a_remote_tool_are_checked_against_its_own_schema(mode: str) -> None:
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[remote(mode)], tracing=False) as rt:
            neither, raw, extra, integral = await rt.call_many(
                [
                    ToolCall(id="1", name="fetch", arguments='{"mode": "text"}'),
                    ToolCall(id="2", name="fetch", arguments='{"mode": "raw", "path": "/a"}'),
                    ToolCall(id="3", name="fetch", arguments='{"mode": "text", "path": "/a", "lang": "en"}'),
                    ToolCall(id="4", name="fetch", arguments='{"mode": "raw", "path": "/a", "retries": 2.0}'),
                ]
            )
    assert neither.kind is FailureKind.INVALID_ARGUMENTS  # the either-or, checked before the server sees it
    assert raw.kind is FailureKind.INVALID_ARGUMENTS  # if/then: raw needs retries
    assert "`$.retries`: required field is missing" in raw.message
    assert extra.ok  # an open schema: the extra argument passes, and reaches the server
    assert msgspec.json.decode(extra.content)["arguments"]["lang"] == "en"
    assert integral.ok  # 2.0 is an integer (point 1)


# -- 14. what goes out from our server ------------------------------------------------------------


class Point(msgspec.Struct):
    x: int
    y: int


class Box(msgspec.Struct):
    low: Point
    high: Point


@tool
def area(box: Box, origin: Point) -> int:
    """The area of a box."""
    return (box.high.x - box.low.x) * (box.high.y - box.low.y)


async def test_our_tools_go_out_with_nested_types_inlined_for_clients_that_do_not_follow_refs() -> None:
    with trio.fail_after(LIMIT):
        async with open_runtime([area], tracing=False) as rt:
            served = ServedRuntime(rt)
            async with Client(InMemoryTransport(served.server), mode="legacy") as client:
                (listed,) = (await client.list_tools()).tools
                result = await client.call_tool(
                    "area",
                    {"box": {"low": {"x": 0, "y": 0}, "high": {"x": 2, "y": 3}}, "origin": {"x": 0, "y": 0}},
                )
    schema = listed.input_schema
    assert "$ref" not in msgspec.json.encode(schema).decode()
    assert "$defs" not in schema
    # A client that reads `type` without following references (the Inspector) sees objects, not strings.
    assert schema["properties"]["box"]["type"] == "object"
    assert schema["properties"]["box"]["properties"]["low"]["type"] == "object"
    assert schema["properties"]["origin"]["properties"]["x"] == {"type": "integer"}
    assert result.structured_content == {"result": 6}
