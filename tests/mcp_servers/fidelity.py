"""An MCP server (the SDK's low-level `Server`) whose tool schemas use JSON Schema 2020-12 as servers do.

- `fetch`: `$defs` with an `$anchor`, an inline `$ref` with a description beside it, an `allOf`
  over an `anyOf` of required names (`url` or `path`), `if`/`then`, and an open object (extra
  arguments pass); an outputSchema with titles.
Each call answers with the arguments it received, as JSON text and as structured content.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server

FETCH_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "options": {
            "$anchor": "opts",
            "type": "object",
            "properties": {"timeout": {"type": "number"}, "follow": {"type": "boolean"}},
        }
    },
    "properties": {
        "url": {"type": "string", "format": "uri"},
        "path": {"type": "string"},
        "mode": {"enum": ["text", "raw"]},
        "options": {"$ref": "#opts", "description": "how to fetch"},
        "retries": {"type": "integer", "minimum": 0},
    },
    "required": ["mode"],
    "allOf": [{"anyOf": [{"required": ["url"]}, {"required": ["path"]}]}],
    "if": {"properties": {"mode": {"const": "raw"}}, "required": ["mode"]},
    "then": {"required": ["retries"]},
}
OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"arguments": {"title": "Arguments", "type": "object"}},
    "required": ["arguments"],
    "title": "Fetched",
}
TOOLS = [
    types.Tool(
        name="fetch", description="Fetch a page", input_schema=FETCH_SCHEMA, output_schema=OUTPUT_SCHEMA
    )
]


async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    structured = {"arguments": params.arguments or {}}
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(structured, sort_keys=True))],
        structured_content=structured,
    )


server = Server("fidelity", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
