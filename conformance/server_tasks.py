"""The MCP Tasks fixtures (SEP-2663, `io.modelcontextprotocol/tasks`) the conformance suite's
`tasks-*` scenarios call, written as a user of the runtime writes them: the tool option `task`
says a tool's calls may be (or must be) tasks; a task is a detached call of the runtime.
"""

from __future__ import annotations

import msgspec
import trio

from runtime import CallContext, ToolRegistry, ToolUnavailable, fail, tool


class Confirm(msgspec.Struct, frozen=True):
    confirm: bool = False


class Named(msgspec.Struct, frozen=True):
    name: str = ""
    confirm: bool = False


@tool
def greet(name: str) -> str:
    """Greet someone (a plain tool: never a task)."""
    return f"Hello, {name}!"


@tool(task=True)
async def slow_compute(seconds: float, label: str = "") -> str:
    """Sleep `seconds`, then answer (a task for a client that takes tasks)."""
    await trio.sleep(seconds)
    return f"computed {label} after {seconds} s"


@tool(task="required")
async def failing_job() -> str:
    """Fail as a tool fails, after a second (only as a task)."""
    await trio.sleep(1)
    fail("the job failed")


@tool(task=True)
async def protocol_error_job() -> str:
    """Fail as the runtime would, unable to run it (a task that ends failed, not completed)."""
    raise ToolUnavailable("the job's backend is gone")


@tool(task=True)
async def confirm_delete(ctx: CallContext, filename: str) -> str:
    """Ask before deleting `filename` (the task waits in input_required for the answer)."""
    answer = await ctx.elicit(f"Delete {filename}?", Confirm, key="confirm")
    if answer.value is not None and answer.value.confirm:
        return f"deleted {filename}"
    return f"kept {filename} ({answer.action})"


@tool(task=True)
async def multi_input(ctx: CallContext) -> str:
    """Ask two questions at once."""
    got: dict[str, str] = {}

    async def ask(key: str) -> None:
        answer = await ctx.elicit(f"Answer {key}", Named, key=key)
        got[key] = answer.value.name if answer.value is not None else answer.action

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask, "first")
        nursery.start_soon(ask, "second")
    return f"first={got['first']} second={got['second']}"


@tool(task="required", task_from="background")
async def test_tool_with_task(ctx: CallContext) -> str:
    """Ask for a name in the request (input-required rounds), then greet as a task."""
    answer = await ctx.elicit("What is your name?", Named, key="user_name")
    await ctx.background()  # the task starts here, with the name the client gave
    await trio.sleep(0.2)
    return f"Hello, {answer.value.name if answer.value is not None else answer.action}!"


TASKS = ToolRegistry(
    [greet, slow_compute, failing_job, protocol_error_job, confirm_delete, multi_input, test_tool_with_task]
)
