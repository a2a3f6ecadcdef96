"""`serve_http` of a runtime whose tools may run as MCP tasks (SEP-2663), one bearer token per
principal (alice, bob). Prints its URL on stdout once it serves; serves until killed.
Tasks are polled every 0.1 s (`Durable.poll_interval`: the `pollIntervalMs` it tells clients).
Run: `python tasks.py`.
"""

from __future__ import annotations

import functools
from pathlib import Path

import msgspec
import trio

from runtime import CallContext, Durable, open_runtime, tool
from runtime.mcp import serve_http

TOKENS = {"tok-alice": "alice", "tok-bob": "bob"}


class Confirm(msgspec.Struct, frozen=True):
    confirm: bool = False


@tool(task=True)
async def report(seconds: float) -> str:
    """Write a report that takes `seconds`."""
    await trio.sleep(seconds)
    return f"report after {seconds} s"


@tool(task="required")
async def confirm_delete(ctx: CallContext, filename: str) -> str:
    """Ask before deleting `filename`."""
    answer = await ctx.elicit(f"Delete {filename}?", Confirm, key="confirm")
    return f"deleted {filename}" if answer.value is not None and answer.value.confirm else f"kept {filename}"


@tool(requires_approval=True)
def pay(amount: int) -> str:
    """Pay `amount` (asks first)."""
    return f"paid {amount}"


@tool(task="required")
async def slow_write(path: str, seconds: float) -> str:
    """Write `path` after `seconds` (only ever as a task); each start adds a line to `path.started`."""
    async with await trio.open_file(path + ".started", "a") as started:
        await started.write("started\n")
    await trio.sleep(seconds)
    await trio.Path(path).write_text("written")
    return f"wrote {Path(path).name}"


@tool(task="required", requires_approval=True)
def transfer(amount: int) -> str:
    """Transfer `amount` (a task that waits for an approval first)."""
    return f"transferred {amount}"


async def main() -> None:
    async with (
        open_runtime(
            [report, confirm_delete, pay, slow_write, transfer],
            tracing=False,
            durable=Durable(poll_interval=0.1),
        ) as rt,
        trio.open_nursery() as nursery,
    ):
        host, port = await nursery.start(functools.partial(serve_http, rt, port=0, tokens=TOKENS))
        print(f"http://{host}:{port}/mcp", flush=True)


trio.run(main)
