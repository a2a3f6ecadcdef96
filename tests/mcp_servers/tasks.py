"""`serve_http` of a runtime whose tools may run as MCP tasks (SEP-2663), one bearer token per
principal (alice, bob). Prints its URL on stdout once it serves; serves until killed.
Run: `python tasks.py`.
"""

from __future__ import annotations

import functools

import msgspec
import trio

from runtime import CallContext, open_runtime, tool
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


async def main() -> None:
    async with (
        open_runtime([report, confirm_delete, pay], tracing=False) as rt,
        trio.open_nursery() as nursery,
    ):
        host, port = await nursery.start(functools.partial(serve_http, rt, port=0, tokens=TOKENS))
        print(f"http://{host}:{port}/mcp", flush=True)


trio.run(main)
