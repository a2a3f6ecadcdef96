"""An MCP server (the SDK's low-level `Server`) whose tools are whatever it is told they are.

`python mutable.py TOOLS.json`: the tools listed are the MCP `Tool` objects in the file (read at
start, so a server restarted on a changed file lists changed tools), plus `mutate`, a tool that
replaces them (its `tools` argument: the new list) and says so with `notifications/tools/list_changed`.
Every other call answers with the tool's name and the arguments it received, as JSON text and as
structured content, so a test can tell what reached the server.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.stdio import stdio_server

MUTATE = types.Tool(
    name="mutate",
    description="Replace this server's tools.",
    input_schema={
        "type": "object",
        "properties": {"tools": {"type": "array", "items": {"type": "object"}}},
        "required": ["tools"],
    },
)
TOOLS: list[types.Tool] = []


async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[*TOOLS, MUTATE])


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    arguments = params.arguments or {}
    if params.name == "mutate":
        TOOLS[:] = [types.Tool.model_validate(t) for t in arguments["tools"]]
        await ctx.session.send_tool_list_changed()
        return types.CallToolResult(content=[types.TextContent(text="mutated")])
    structured = {"tool": params.name, "arguments": arguments}
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(structured, sort_keys=True))],
        structured_content=structured,
    )


server = Server("mutable", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    listing = json.loads(await anyio.Path(sys.argv[1]).read_text())
    TOOLS[:] = [types.Tool.model_validate(t) for t in listing]
    options = server.create_initialization_options(NotificationOptions(tools_changed=True))
    async with stdio_server() as (read, write):
        await server.run(read, write, options)


if __name__ == "__main__":
    anyio.run(main)
