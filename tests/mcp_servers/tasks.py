"""`serve_http` of a runtime whose tools may run as MCP tasks (SEP-2663), one bearer token per
principal (alice, bob). Prints its URL on stdout once it serves; serves until killed.
Tasks are polled every 0.1 s (`Durable.poll_interval`: the `pollIntervalMs` it tells clients;
the environment's TASKS_POLL_INTERVAL, in seconds, says another).
Run: `python tasks.py`.
"""

from __future__ import annotations

import functools
import os
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


class Named(msgspec.Struct, frozen=True):
    name: str = ""


@tool(task=True)
async def two_names(ctx: CallContext) -> str:
    """Ask for two names at once (a nursery): both are open together."""
    got: dict[str, str] = {}

    async def ask(key: str) -> None:
        answer = await ctx.elicit(f"Name {key}?", Named, key=key)
        got[key] = answer.value.name if answer.value is not None else answer.action

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask, "first")
        nursery.start_soon(ask, "second")
    return f"first={got['first']} second={got['second']}"


@tool(task="required", task_from="background")
async def onboard(ctx: CallContext, path: str) -> str:
    """Ask for a name in the request, then write `path` as a task."""
    answer = await ctx.elicit("Your name?", Named, key="user_name")
    await ctx.background()  # the task starts here
    name = answer.value.name if answer.value is not None else answer.action
    async with await trio.open_file(path, "a") as f:
        await f.write(name + "\n")
    return f"welcome, {name}"


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


@tool(task="required")
async def browser_pick(ctx: CallContext) -> str:
    """The user picks a file in their browser: its result comes from outside."""
    await ctx.defer("the browser asks the user for a file")


async def main() -> None:
    async with (
        open_runtime(
            [report, confirm_delete, pay, slow_write, transfer, two_names, onboard, browser_pick],
            tracing=False,
            durable=Durable(poll_interval=float(os.environ.get("TASKS_POLL_INTERVAL", "0.1"))),
        ) as rt,
        trio.open_nursery() as nursery,
    ):
        host, port = await nursery.start(functools.partial(serve_http, rt, port=0, tokens=TOKENS))
        print(f"http://{host}:{port}/mcp", flush=True)


trio.run(main)
