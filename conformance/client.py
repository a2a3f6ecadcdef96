"""The client the MCP conformance suite's client scenarios drive: a runtime with one MCP server.

`python -m conformance.client URL`, with `MCP_CONFORMANCE_SCENARIO` and
`MCP_CONFORMANCE_PROTOCOL_VERSION` set by the suite. It does what an agent using the runtime
does: connect (`mcp.http(URL)`), list the tools, then call each tool once with arguments made
from its schema, and exit 0 when every call got its one result (success or failure alike: the
scenarios judge what reached the server).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any

import httpx2
import trio

from runtime import Answer, Elicitation, ToolCall, ToolFailure, open_runtime
from runtime.mcp import McpTool, http, oauth

SAMPLES: dict[str, Any] = {
    "string": "x",
    "number": 1,
    "integer": 1,
    "boolean": True,
    "object": {},
    "array": [],
    "null": None,
}
# The suite's echo tool gets back the schema the client kept for the scenario's focal tool.
ECHO_TOOL = "json_schema_echo"
FOCAL_TOOL = "json_schema_2020_12_tool"
CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"


def sample_arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """Values for the required properties of an object schema (and for named numbers)."""
    properties = schema.get("properties") or {}
    arguments: dict[str, Any] = {}
    for name in schema.get("required") or []:
        prop = properties.get(name) or {}
        if "enum" in prop:
            arguments[name] = prop["enum"][0]
            continue
        kind = prop.get("type", "string")
        arguments[name] = SAMPLES.get(kind if isinstance(kind, str) else kind[0], "x")
    return arguments


async def accept_defaults(question: Elicitation) -> Answer:
    """A user who accepts every form as offered (the schema's defaults fill it in)."""
    return Answer.accept()


async def consent(authorization_url: str) -> str:
    """The user's browser: open the authorization URL, come back with the redirect URL."""
    async with httpx2.AsyncClient(follow_redirects=False) as browser:
        response = await browser.get(authorization_url)
    return response.headers.get("location", "")


async def main(url: str) -> int:
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    version = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION", "2025-11-25")
    mode = version if version == "2026-07-28" else "legacy"
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    given = {c["name"]: c.get("arguments", {}) for c in context.get("toolCalls", [])}
    # Behind OAuth (the auth/* scenarios) the user consents at once: the browser step is one GET.
    # The suite's clients publish their metadata document at CLIENT_METADATA_URL (SEP-991); a
    # scenario may hand over a pre-registered client instead.
    auth = oauth(
        url,
        authorize=consent,
        client_name="tool-runtime conformance client",
        client_id=context.get("client_id"),
        client_secret=context.get("client_secret"),
        client_metadata_url=CLIENT_METADATA_URL,
    )
    server = http(url, mode=mode, name="conformance", connect_timeout=10.0, call_timeout=10.0, auth=auth)
    async with open_runtime(mcp_servers=[server], on_elicit=accept_defaults) as rt:
        tools = [t for t in rt.registry if isinstance(t, McpTool)]
        print(f"{scenario} ({version}): {len(tools)} tools: {', '.join(t.name for t in tools)}")
        schemas = {t.remote_name: t.json_schema for t in tools}
        for index, tool in enumerate(tools):
            arguments: dict[str, Any]
            if tool.remote_name in given:  # the scenario says which arguments to send
                arguments = given[tool.remote_name]
            elif tool.remote_name == ECHO_TOOL:
                arguments = {"schema": schemas.get(FOCAL_TOOL, {})}
            elif tool.remote_name == "add_numbers":
                arguments = {"a": 2, "b": 3}
            else:
                arguments = sample_arguments(tool.json_schema)
            result = await rt.call(ToolCall(id=f"c{index}", name=tool.name, arguments=arguments))
            kind = result.kind if isinstance(result, ToolFailure) else "ok"
            print(f"  {tool.name}: {kind}: {result.content[:200]}")
    return 0


if __name__ == "__main__":
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    sys.exit(trio.run(main, sys.argv[-1]))
