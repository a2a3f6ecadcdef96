"""An MCP server (the SDK's low-level `Server`) whose tools have the shapes real servers send.

- `tree`: a recursive input schema (`$defs` that refer to themselves), checked one level deep.
- `files.read/v2`: a name with characters a provider would refuse.
- `broken`: an input schema that is not JSON Schema (the client skips it).
- `ping`: a name a test gives to one of its own tools too.
- `either`: required fields that depend on each other (`anyOf` beside `properties`).
Each call answers with its name and the arguments it received, as JSON text.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server

NODE = {
    "type": "object",
    "properties": {
        "value": {"type": "integer"},
        "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
    },
    "required": ["value"],
}
TOOLS = [
    types.Tool(
        name="tree",
        description="Sum a tree.",
        input_schema={
            "type": "object",
            "properties": {"root": {"$ref": "#/$defs/Node"}},
            "$defs": {"Node": NODE},
        },
    ),
    types.Tool(
        name="files.read/v2", input_schema={"type": "object", "properties": {"path": {"type": "string"}}}
    ),
    types.Tool(name="broken", input_schema={"type": "object", "properties": {"x": {"type": "strng"}}}),
    types.Tool(name="ping", input_schema={"type": "object"}),
    types.Tool(
        name="either",
        input_schema={
            "type": "object",
            "properties": {"id": {"type": "string"}, "url": {"type": "string", "format": "uri"}},
            "anyOf": [{"required": ["id"]}, {"required": ["url"]}],
        },
    ),
]


async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    text = json.dumps({"tool": params.name, "arguments": params.arguments}, sort_keys=True)
    return types.CallToolResult(content=[types.TextContent(text=text)])


server = Server("odd", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
