"""SEP-2243 header parameters: `Annotated[str, mcp.Header("Region")]` is served with its
`x-mcp-header`, our client mirrors the argument into `Mcp-Param-Region`, and the server
refuses a call whose header and argument disagree (HTTP 400, -32020)."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

import httpx2
import pytest
import trio

from runtime import Description, Runtime, ToolCall, ToolRegistry, open_runtime, tool
from runtime import mcp as rmcp
from runtime.mcp import Header, serve_http

pytestmark = [
    pytest.mark.filterwarnings("ignore:Async generator 'httpx2\\.:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:Async generator 'httpcore2\\.:ResourceWarning"),
]

seen: list[str] = []


@tool
def lookup(region: Annotated[str, Description("the region"), Header("Region")], key: str) -> str:
    """Look a key up in a region."""
    seen.append(region)
    return f"{key}@{region}"


def test_the_header_is_kept_in_the_mcp_schema_only() -> None:
    registry = ToolRegistry([lookup])
    (served,) = registry.schemas("mcp")
    assert served["inputSchema"]["properties"]["region"] == {
        "type": "string",
        "description": "the region",
        "x-mcp-header": "Region",
    }
    (openai,) = registry.schemas("openai", strict=True)
    assert "x-mcp-header" not in openai["function"]["parameters"]["properties"]["region"]
    with pytest.raises(ValueError, match="header-name token"):
        Header("Bad Name")


@asynccontextmanager
async def served(rt: Runtime) -> AsyncIterator[str]:
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(functools.partial(serve_http, rt, port=0))
        yield f"http://{host}:{port}/mcp"
        nursery.cancel_scope.cancel()


async def test_our_client_sends_the_header_and_the_server_checks_it() -> None:
    seen.clear()
    async with open_runtime([lookup], tracing=False) as server_rt, served(server_rt) as url:
        spec = rmcp.http(url, mode="2026-07-28", prefix="remote")
        async with open_runtime(mcp_servers=[spec], tracing=False) as rt:
            result = await rt.call(
                ToolCall(id="1", name="remote_lookup", arguments='{"region": "eu-west", "key": "k"}')
            )
        assert result.content == "k@eu-west"
        assert seen == ["eu-west"]

        body = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {
                "name": "lookup",
                "arguments": {"region": "eu-west", "key": "k"},
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {},
                },
            },
        }
        headers = {
            "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": "tools/call",
            "Mcp-Name": "lookup",
            "Accept": "application/json, text/event-stream",
        }
        async with httpx2.AsyncClient() as http:
            mismatch = await http.post(url, json=body, headers={**headers, "Mcp-Param-Region": "us-east"})
            missing = await http.post(url, json=body, headers=headers)
    for response in (mismatch, missing):
        assert response.status_code == 400
        assert response.json()["error"]["code"] == -32020
    assert seen == ["eu-west"]  # the refused calls never reached the tool
