"""A server process for the durability tests of detached and deferred calls (issue 43):
tests/test_detached_durable.py and the crash harness tests/test_detached_crash.py.

    python tests/detached_server.py --store sqlite:PATH | redis:URL --log FILE [--node N] [--lease S]

One runtime on a shared store (`Durable(node=--node)`: a restart of the same node recovers what
its killed run left at once). Its tools append a line `WHAT KEY PID` to `--log` (O_APPEND: the
lines of several processes never mix), so a test counts how often each side effect happened,
across kills and restarts:

- `pay(key, hold, die)`: not idempotent. Writes `begin KEY`, waits `hold` s, writes `effect KEY`
  (the side effect), and returns `paid KEY`. `die` kills its own process (SIGKILL) at a point:
  "before" (before `begin`), "during" (between `begin` and `effect`), "after" (after `effect`,
  before the result is journaled); once per key (a call run again after the kill goes on).
- `put(key, hold, die)`: the same, idempotent (it may run again after a kill).
- `guarded(key, hold, die)`: `pay` with `requires_approval=True`: a plain call of it is deferred.

Requests (one JSON object a line on stdin) and answers (stdout); each request runs in a task of
its own (a slow `result` does not hold up the next one), and its answer carries its `n`:

    {"n": 1, "op": "detach", "tool": T, "key": K, "id": ID, "principal": P, "hold": S, "die": D}
    {"n": 2, "op": "defer", "key": K, "principal": P, ...}     -> {"n": 2, "pending": ID}
    {"n": 3, "op": "status" | "approve" | "cancel" | "deny" | "result" | "pending", "id": ID, "principal": P}

Each answer is {"n": N, ...}: `status` (a DetachedStatus as JSON), `result`, `pending` (ids),
or `error` (the exception's type name and text). It writes {"ready": PID} once its runtime is
open, and ends when stdin closes.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from typing import Any

import msgspec
import trio

from runtime import CallNotFound, CallStateError, Durable, ToolCall, ToolPending, open_runtime, tool
from runtime.stores import RedisStore, SQLiteStore, Store

PID = os.getpid()


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--store", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--prefix", default="runtime:")
    p.add_argument("--node", default=None)
    p.add_argument("--lease", type=float, default=15.0)
    return p.parse_args()


def open_store(spec: str, prefix: str) -> Store:
    kind, _, where = spec.partition(":")
    if kind == "sqlite":
        return SQLiteStore(where)
    if kind == "redis":
        return RedisStore(where, prefix=prefix)
    raise SystemExit(f"unknown store {spec!r}")


def tools(log_path: str) -> list[Any]:
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def wrote(line: str) -> None:
        os.write(log, f"{line} {PID}\n".encode())

    def die_once(key: str) -> None:
        """SIGKILL this process, the first time `key`'s call gets here (a call run again after
        the kill goes on)."""
        try:
            os.close(os.open(f"{log_path}.died-{key}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        os.kill(PID, signal.SIGKILL)

    async def side_effect(key: str, hold: float, die: str) -> str:
        if die == "before":
            die_once(key)
        wrote(f"begin {key}")
        await trio.sleep(hold)
        if die == "during":
            die_once(key)
        wrote(f"effect {key}")
        if die == "after":
            die_once(key)
        return f"paid {key}"

    @tool
    async def pay(key: str, hold: float = 0.0, die: str = "") -> str:
        """Not idempotent."""
        return await side_effect(key, hold, die)

    @tool(idempotent=True)
    async def put(key: str, hold: float = 0.0, die: str = "") -> str:
        """Idempotent."""
        return await side_effect(key, hold, die)

    @tool(requires_approval=True)
    async def guarded(key: str, hold: float = 0.0, die: str = "") -> str:
        """Not idempotent, and approved first."""
        return await side_effect(key, hold, die)

    return [pay, put, guarded]


def say(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def arguments(request: dict[str, Any]) -> str:
    return json.dumps(
        {"key": request["key"], "hold": request.get("hold", 0.0), "die": request.get("die", "")}
    )


async def answer(rt: Any, request: dict[str, Any]) -> dict[str, Any]:
    op, principal = request["op"], request.get("principal")
    try:
        if op == "detach":
            call = ToolCall(id=request["key"], name=request["tool"], arguments=arguments(request))
            handle = await rt.detach(call, id=request.get("id"), principal=principal)
            return {"detached": handle.id}
        if op == "defer":
            call = ToolCall(id=request["key"], name="guarded", arguments=arguments(request))
            result = await rt.call(call, principal=principal)
            if isinstance(result, ToolPending):
                return {"pending": result.detached_id}
            return {"result": msgspec.to_builtins(result)}
        if op == "pending":
            return {"pending": [s.id for s in await rt.pending(principal=principal)]}
        handle = rt.detached(request["id"], principal=principal)
        if op == "result":
            return {"result": msgspec.to_builtins(await handle.result())}
        if op == "deny":
            status = await handle.deny(request.get("message", "no"))
        else:
            status = await getattr(handle, op)()
        return {"status": msgspec.to_builtins(status)}
    except (CallNotFound, CallStateError) as exc:
        return {"error": type(exc).__name__, "text": str(exc)}


async def main() -> None:
    args = parse()
    durable = Durable(node=args.node, lease=args.lease, poll_interval=0.05)
    async with (
        open_runtime(tools(args.log), store=open_store(args.store, args.prefix), durable=durable) as rt,
        trio.open_nursery() as nursery,
    ):
        say({"ready": PID})

        async def serve(request: dict[str, Any]) -> None:
            say({"n": request.get("n"), **(await answer(rt, request))})

        async for line in trio.wrap_file(sys.stdin):
            nursery.start_soon(serve, json.loads(line))
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main)
