"""FastMCP 4's own client (fastmcp-tasks' `TasksClientExtension`, registered on every FastMCP
`Client`) against our served tasks: run by tests/test_fastmcp_interop.py from the FastMCP
virtualenv (.venv-fastmcp), with our server's URL. Each step prints one JSON line (what the
FastMCP side saw); the test reads them. Not importable from the runtime's venv.

Usage: python client.py URL STEP [ARGS as JSON]
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import mcp_types
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp.exceptions import ToolError
from fastmcp_tasks.client import call_tool_task

URL, STEP = sys.argv[1], sys.argv[2]
ARGS: dict[str, Any] = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
TOKEN = ARGS.pop("token", "tok-alice")
REPLY = ARGS.pop("reply", {"action": "accept", "content": {"confirm": True}})
asked: list[str] = []


def say(**what: Any) -> None:
    print(json.dumps(what), flush=True)


async def on_elicit(message: str, response_type: Any, params: Any, context: Any) -> Any:
    """Answer every question with REPLY (its action and content), and keep what was asked."""
    asked.append(message)
    return mcp_types.ElicitResult(action=REPLY["action"], content=REPLY.get("content"))


def text(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


async def main() -> None:
    transport = StreamableHttpTransport(URL, headers={"Authorization": f"Bearer {TOKEN}"})
    async with Client(transport, elicitation_handler=on_elicit) as client:
        if STEP == "list":
            tools = await client.list_tools()
            say(protocol=client.protocol_version, tools=sorted(t.name for t in tools))
        elif STEP == "call":  # the transparent path: call_tool polls tasks/get to the end
            name = ARGS.pop("tool")
            try:
                result = await client.call_tool(name, ARGS)
                say(ok=True, text=text(result), asked=asked)
            except ToolError as exc:
                say(ok=False, error=str(exc), asked=asked)
        elif STEP == "handle":  # the explicit handle: task id, status, result
            name = ARGS.pop("tool")
            task = await call_tool_task(client, name, ARGS)
            first = await task.status()
            result = await task.result()
            say(
                task_id=task.task_id,
                first=first.status,
                ttl_ms=first.ttl_ms,
                poll_ms=first.poll_interval_ms,
                text=text(result),
                asked=asked,
            )
        elif STEP == "cancel":  # start a task, wait for it to work, cancel it, see it settle
            name = ARGS.pop("tool")
            task = await call_tool_task(client, name, ARGS)
            await task.wait(state="working", timeout=30)
            await task.cancel()
            final = await task.wait(timeout=30)
            say(task_id=task.task_id, final=final.status)
        elif STEP == "get":  # tasks/get of a given id (another principal's, an unknown one)
            from fastmcp_tasks.client import _send_get

            try:
                got = await _send_get(client.session, ARGS["task_id"])
                say(ok=True, status=got.status)
            except Exception as exc:
                say(ok=False, error=str(exc), type=type(exc).__name__)
        else:
            raise SystemExit(f"unknown step {STEP!r}")


anyio.run(main)
