"""An MCP server written with the official SDK (`MCPServer`), for the client tests and benchmark.

Run over stdio: `python demo.py`; over streamable HTTP: `python demo.py --http PORT`; over the
older HTTP+SSE transport: `python demo.py --sse PORT`.
It counts what it is asked (`stats`), so a test can tell what reached it.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import signal
import sys
from typing import Any, Literal

import anyio
import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, Field

COUNTS = {"calls": 0, "listings": 0, "cancelled": 0}
# A 1x1 red PNG.
DOT = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)


class Counting(MCPServer):
    async def list_tools(self) -> list[types.Tool]:
        COUNTS["listings"] += 1
        return await super().list_tools()


app = Counting("demo")


class Sum(BaseModel):
    total: int


class Filters(BaseModel):
    lang: Literal["en", "fr"]
    max_age: int = Field(default=30, ge=0)


def _count() -> None:
    COUNTS["calls"] += 1


@app.tool(title="Adder", annotations=types.ToolAnnotations(read_only_hint=True, idempotent_hint=True))
def add(a: int, b: int = 2) -> Sum:
    """Add two integers."""
    _count()
    return Sum(total=a + b)


@app.tool(structured_output=False)
def echo(text: str) -> str:
    """Echo the text back."""
    _count()
    return text


@app.tool(structured_output=False)
def search(query: str, limit: int = 10, filters: Filters | None = None) -> str:
    """Search, with optional filters."""
    _count()
    return f"{query}:{limit}:{filters.lang if filters else '-'}"


@app.tool()
def refuse(reason: str) -> str:
    """Always refuses, with the reason given."""
    _count()
    raise ToolError(reason)


@app.tool(structured_output=False)
def picture() -> list[types.ContentBlock]:
    """A caption and a picture."""
    _count()
    return [
        types.TextContent(text="a red dot", _meta={"secret": "not for the model"}),
        types.ImageContent(data=base64.b64encode(DOT).decode(), mime_type="image/png"),
    ]


@app.tool()
def stats() -> dict[str, int]:
    """What this server was asked so far."""
    return dict(COUNTS)


@app.tool()
def pid() -> int:
    """This server's process id."""
    return os.getpid()


@app.tool()
def traceparent(ctx: Context) -> str:
    """The W3C traceparent the request carried in its _meta."""
    meta: Any = ctx.request_context.meta or {}
    return str(meta.get("traceparent", ""))


@app.tool(structured_output=False)
async def sleep(seconds: float, ctx: Context) -> str:
    """Sleep, reporting progress every 50 ms."""
    _count()
    steps = max(1, int(seconds / 0.05))
    try:
        for i in range(steps):
            await ctx.report_progress(i, steps, "sleeping")
            await anyio.sleep(seconds / steps)
    except anyio.get_cancelled_exc_class():
        COUNTS["cancelled"] += 1
        raise
    return "rested"


@app.tool(structured_output=False)
async def crash(after: float = 0.2) -> str:
    """Kill this server process `after` seconds into the call (the call never returns)."""
    _count()
    await anyio.sleep(after)
    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"


@app.tool(structured_output=False)
def busy() -> str:
    """Answer with a JSON-RPC error of the server's own (-32000), not a tool result."""
    _count()
    raise MCPError(-32000, "the server is busy")


@app.tool(structured_output=False)
async def hang() -> str:
    """Never answer."""
    _count()
    await anyio.sleep_forever()
    return "unreachable"


async def _tools_changed(ctx: Context) -> None:
    with contextlib.suppress(Exception):  # 2025-11-25: a notification on the session
        await ctx.request_context.session.send_tool_list_changed()
    await ctx.notify_tools_changed()  # 2026-07-28: an event on subscriptions/listen


@app.tool(structured_output=False)
async def grow(name: str, description: str, ctx: Context) -> str:
    """Add a tool called `name` (or change its description), and say that the tools changed."""
    if app._tool_manager.get_tool(name) is not None:
        app.remove_tool(name)

    def made(x: int = 0) -> str:
        return f"{name}:{x}"

    app.add_tool(made, name=name, description=description, structured_output=False)
    await _tools_changed(ctx)
    return "grown"


@app.tool(structured_output=False)
async def shrink(name: str, ctx: Context) -> str:
    """Remove the tool called `name`, and say that the tools changed."""
    app.remove_tool(name)
    await _tools_changed(ctx)
    return "shrunk"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, metavar="PORT")
    parser.add_argument("--sse", type=int, metavar="PORT")
    args = parser.parse_args()
    if args.http is not None:
        app.run("streamable-http", host="127.0.0.1", port=args.http)
    elif args.sse is not None:
        app.run("sse", host="127.0.0.1", port=args.sse)
    else:
        app.run("stdio")


if __name__ == "__main__":
    sys.exit(main())
