"""`serve_http` with one bearer token per principal, each principal served its own view: alice
sees every tool, the others not `admin_*`. `whoami` says whom a call runs for. Prints its URL on
stdout once it serves; serves until killed. Run: `python principals.py`.
"""

from __future__ import annotations

import functools

import trio

from runtime import CallContext, open_runtime, tool
from runtime.mcp import serve_http

TOKENS = {"tok-service": "service", "tok-alice": "alice", "tok-bob": "bob", "tok-carol": "carol"}


@tool
async def whoami(ctx: CallContext) -> str:
    """Whom this call runs for."""
    await trio.sleep(0.01)  # long enough for calls of several principals to overlap
    return ctx.principal or "nobody"


@tool
async def admin_reset() -> str:
    """Reset everything (administrators only)."""
    return "reset"


async def main() -> None:
    async with open_runtime([whoami, admin_reset], tracing=False) as rt:

        def view_of(principal: str | None) -> object:
            return rt.scoped(principal=principal, exclude=() if principal == "alice" else ["admin_*"])

        async with trio.open_nursery() as nursery:
            host, port = await nursery.start(
                functools.partial(serve_http, rt, port=0, tokens=TOKENS, view_of=view_of)
            )
            print(f"http://{host}:{port}/mcp", flush=True)


trio.run(main)
