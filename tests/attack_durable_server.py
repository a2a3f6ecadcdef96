"""An MCP server (stdio) for tests/test_attack_durable.py: a task tool that asks a question and
gives up waiting after half a second, on a journal that forgets finished tasks 0.2 s later (a
client that answers later than that finds the task gone, as after a restart on a MemoryStore).
Run: `python tests/attack_durable_server.py`."""

from __future__ import annotations

import msgspec
import trio

from runtime import CallContext, Durable, open_runtime, tool
from runtime.mcp import serve_stdio


class Go(msgspec.Struct, frozen=True):
    go: bool = False


@tool(task="required", timeout=0.5)
async def impatient(ctx: CallContext) -> str:
    """Ask whether to go on; waits half a second for the answer."""
    answer = await ctx.elicit("Go on?", Go, key="go")
    return "went on" if answer.value is not None and answer.value.go else "stopped"


async def main() -> None:
    async with open_runtime([impatient], tracing=False, durable=Durable(ttl=0.2, poll_interval=0.05)) as rt:
        await serve_stdio(rt)


if __name__ == "__main__":
    trio.run(main)
