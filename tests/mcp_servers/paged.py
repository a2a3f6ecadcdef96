"""An MCP server on the SDK's low-level `Server` whose tools/list answers in pages of 3.

Seven tools `t0`..`t6`; each returns its own name. Run over stdio: `python paged.py`.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server

PAGE = 3
TOOLS = [
    types.Tool(
        name=f"t{i}",
        description=f"Tool number {i}.",
        input_schema={"type": "object", "properties": {"n": {"type": "integer"}}},
    )
    for i in range(7)
]


async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    start = int(params.cursor) if params is not None and params.cursor else 0
    end = start + PAGE
    return types.ListToolsResult(tools=TOOLS[start:end], next_cursor=str(end) if end < len(TOOLS) else None)


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=params.name)])


server = Server("paged", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
