"""A FastMCP 4 server with `task=True` tools (fastmcp-tasks, SEP-2663), run over stdio by
tests/test_fastmcp_interop.py from the FastMCP virtualenv (.venv-fastmcp, made by the Makefile):
our MCP client calls its tools. Not importable from the runtime's venv (FastMCP is not ours)."""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import anyio
import mcp_types
from fastmcp import Context, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks import TasksExtension

server = FastMCP("fastmcp-tasks")
server.add_extension(TasksExtension(url="memory://"))

# FastMCP tells clients to poll every 5 s by default (`pollIntervalMs`, which our client follows):
# 0.1 s here, so a test does not wait 5 s per task.
POLL = timedelta(milliseconds=100)
OPTIONAL = TaskConfig(mode="optional", poll_interval=POLL)
REQUIRED = TaskConfig(mode="required", poll_interval=POLL)


@server.tool(task=OPTIONAL)
async def add(a: int, b: int) -> int:
    """Add two numbers (a task when the client asks for one)."""
    return a + b


@server.tool(task=REQUIRED)
async def slow_write(path: str, seconds: float) -> str:
    """Append a line to `path`.started, wait `seconds`, then write `path` (always a task)."""
    async with await anyio.open_file(f"{path}.started", "a") as started:
        await started.write("started\n")
    await anyio.sleep(seconds)
    await anyio.Path(path).write_text("written")
    return f"wrote {Path(path).name}"


@server.tool(task=REQUIRED)
async def failing_job(reason: str) -> str:
    """Fail with `reason` (always a task)."""
    raise ToolError(reason)


@server.tool(task=REQUIRED)
async def confirm_delete(filename: str, ctx: Context) -> str | mcp_types.InputRequiredResult:
    """Ask whether to delete `filename` (the guard pattern: the task waits in input_required)."""
    answers = ctx.input_responses or {}
    answer = answers.get("confirm")
    if answer is None:
        ask = mcp_types.ElicitRequest(
            params=mcp_types.ElicitRequestFormParams(
                message=f"Delete {filename}?",
                requested_schema={
                    "type": "object",
                    "properties": {"confirm": {"type": "boolean"}},
                    "required": ["confirm"],
                },
            )
        )
        return mcp_types.InputRequiredResult(input_requests={"confirm": ask})
    if (
        isinstance(answer, mcp_types.ElicitResult)
        and answer.action == "accept"
        and (answer.content or {}).get("confirm")
    ):
        return f"deleted {filename}"
    return f"kept {filename}"


if __name__ == "__main__":
    print(f"fastmcp server on stdio ({sys.version_info[:2]})", file=sys.stderr)
    server.run(transport="stdio", show_banner=False)
