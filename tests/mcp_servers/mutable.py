"""An MCP server (the SDK's low-level `Server`) whose tools are whatever it is told they are.

`python mutable.py TOOLS.json`: the tools listed are the MCP `Tool` objects in the file (read at
start, so a server restarted on a changed file lists changed tools), plus two of its own:

- `mutate(tools, restart=false)`: replaces the tools and says so (`notifications/tools/list_changed`);
  with `restart`, writes them to the file instead and exits (the client reconnects to a new process);
- `history()`: the names of the tools called so far (its own excepted).

Every other call answers with the tool's name and the arguments it received, as JSON text and as
structured content, so a test can tell what reached the server.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.stdio import stdio_server

OWN = [
    types.Tool(
        name="mutate",
        description="Replace this server's tools.",
        input_schema={
            "type": "object",
            "properties": {
                "tools": {"type": "array", "items": {"type": "object"}},
                "restart": {"type": "boolean"},
            },
            "required": ["tools"],
        },
    ),
    types.Tool(name="history", description="The tools called so far.", input_schema={"type": "object"}),
]
TOOLS: list[types.Tool] = []
CALLED: list[str] = []


async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[*TOOLS, *OWN])


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    arguments = params.arguments or {}
    if params.name == "mutate":
        if arguments.get("restart"):
            await anyio.Path(sys.argv[1]).write_text(json.dumps(arguments["tools"]))
            os._exit(0)
        TOOLS[:] = [types.Tool.model_validate(t) for t in arguments["tools"]]
        await ctx.session.send_tool_list_changed()
        return types.CallToolResult(content=[types.TextContent(text="mutated")])
    if params.name == "history":
        return types.CallToolResult(content=[types.TextContent(text=json.dumps(CALLED))])
    CALLED.append(params.name)
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
