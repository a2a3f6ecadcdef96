"""`serve_http` of a runtime on a SQLite journal whose store SIGKILLs its own process at one
step of a call's start (tests/test_attack_reattach.py): the n-th time (`--at N`) it is asked to
`--kill-at` OP (`add`: the record, `set`: the live marker, `incr`: the principal's count), the
process dies before doing it. Its tool `onboard` is `task_from="background"`: each run past
`ctx.background()` appends a line to `--log`. Prints its URL once it serves.

    python tests/attack_reattach_server.py --db PATH --log PATH [--kill-at OP --at N]
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
from typing import Any

import trio

from runtime import CallContext, Durable, open_runtime, tool
from runtime.mcp import serve_http
from runtime.stores import SQLiteStore


class Killing:
    """A store that kills this process instead of doing its `n`-th `op` on a journal key."""

    def __init__(self, inner: SQLiteStore, op: str | None, n: int) -> None:
        self.inner = inner
        self.op = op
        self.left = n

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)
        if name != self.op:
            return method

        async def step(key: str, *args: Any, **kwargs: Any) -> Any:
            if key.startswith(("dc:", "dca:", "dcn:")):  # a record, a marker, a count (not the lease)
                self.left -= 1
                if self.left == 0:
                    os.kill(os.getpid(), signal.SIGKILL)
            return await method(key, *args, **kwargs)

        return step


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--kill-at", default=None)
    p.add_argument("--at", type=int, default=1)
    args = p.parse_args()

    @tool(task="required", task_from="background")
    async def onboard(ctx: CallContext, name: str) -> str:
        """Onboard `name` as a task."""
        await ctx.background()
        async with await trio.open_file(args.log, "a") as f:
            await f.write(f"{name}\n")
        return f"welcome, {name}"

    async def serve() -> None:
        store = Killing(SQLiteStore(args.db), args.kill_at, args.at)
        async with (
            open_runtime(
                [onboard],
                store=store,  # type: ignore[arg-type]
                tracing=False,
                durable=Durable(node="server-1", poll_interval=0.1),
            ) as rt,
            trio.open_nursery() as nursery,
        ):
            tokens = {"tok-alice": "alice"}
            host, port = await nursery.start(functools.partial(serve_http, rt, port=0, tokens=tokens))
            print(f"http://{host}:{port}/mcp", flush=True)

    trio.run(serve)


if __name__ == "__main__":
    main()
