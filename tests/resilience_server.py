"""A server process for tests/test_resilience_shared.py: one runtime on a shared store that
serves the turns it reads on stdin, one JSON object a line, and writes what happened on stdout.

    python tests/resilience_server.py --store sqlite:PATH | redis:URL --log FILE [options]

Its tools append a line `TOOL ARG PID` to `--log` each time they run (O_APPEND: lines of
several processes never mix), so a test counts executions across processes and restarts:

- `work(n)`: `Dedupe(ttl=300, claim=--claim)`; takes `--hold` seconds, or an hour for an `n`
  in `--hang` (to be killed while it runs); returns a text naming the run that made it.
- `ping()`: `RateLimit(rate=--rate, burst=--burst)` on the tool, or on the principal
  (`Budget(rate=...)`) with `--budget`.
- `remote(fail)`: `CircuitBreaker(failures=3, cool_down=--cool-down)`; UNAVAILABLE if `fail`.

Requests (stdin) and what each writes (stdout):

    {"turn": [{"id", "name", "arguments"}, ...]}  a line per result as it ends, then {"done": ...}
    {"hammer": SECONDS, "tasks": N}               `ping` from N tasks for SECONDS, then the counts
    {"stats": true}                                the runtime's statistics

It writes {"ready": PID} once its runtime is open; it ends when stdin closes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import sys
import time
from typing import Any

import msgspec
import trio

from runtime import (
    Budget,
    CircuitBreaker,
    Dedupe,
    RateLimit,
    Runtime,
    ToolCall,
    ToolFailure,
    ToolResult,
    open_runtime,
    tool,
)
from runtime.exceptions import ToolUnavailable
from runtime.stores import RedisStore, SQLiteStore, Store

PID = os.getpid()
RUN = secrets.token_hex(4)  # tells this run's executions from an earlier run's stored results


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--store", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--prefix", default="runtime:")
    p.add_argument("--claim", type=float, default=30.0)
    p.add_argument("--hold", type=float, default=0.0)
    p.add_argument("--hang", type=int, nargs="*", default=[])
    p.add_argument("--rate", type=float, default=100.0)
    p.add_argument("--burst", type=float, default=100.0)
    p.add_argument("--budget", action="store_true")
    p.add_argument("--cool-down", type=float, default=30.0)
    return p.parse_args()


def open_store(spec: str, prefix: str) -> Store:
    kind, _, where = spec.partition(":")
    if kind == "sqlite":
        return SQLiteStore(where)
    if kind == "redis":
        return RedisStore(where, prefix=prefix)
    raise SystemExit(f"unknown store {spec!r}")


def tools(args: argparse.Namespace) -> list[Any]:
    log = os.open(args.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def ran(line: str) -> None:
        os.write(log, f"{line} {PID}\n".encode())

    @tool(dedupe=Dedupe(ttl=300, claim=args.claim))
    async def work(n: int) -> str:
        """Deduplicated and journaled."""
        ran(f"work {n}")
        await trio.sleep(3600 if n in args.hang else args.hold)
        return f"work {n} by run {RUN}"

    limit = RateLimit(rate=args.rate, burst=args.burst)

    @tool(rate_limit=None if args.budget else limit)
    async def ping() -> str:
        """Rate-limited."""
        ran("ping -")
        return "pong"

    @tool(breaker=CircuitBreaker(failures=3, window=60, cool_down=args.cool_down))
    async def remote(fail: bool) -> str:
        """Behind a circuit breaker."""
        ran(f"remote {fail}")
        if fail:
            raise ToolUnavailable("the backend does not answer")
        return "answered"

    return [work, ping, remote]


def say(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def shown(result: ToolResult) -> dict[str, Any]:
    if isinstance(result, ToolFailure):
        return {"id": result.call_id, "ok": False, "kind": result.kind.value, "message": result.message}
    return {"id": result.call_id, "ok": True, "value": result.value}


async def hammer(rt: Runtime, seconds: float, tasks: int) -> dict[str, Any]:
    """Call `ping` from `tasks` loops for `seconds`: admitted and refused calls, and the wall
    time from before the first call to after the last (the window the bucket refilled in)."""
    counts = {"admitted": 0, "refused": 0}
    ping = ToolCall(id="p", name="ping", arguments="{}")

    async def loop(stop: float) -> None:
        while time.time() < stop:
            result = await rt.call(ping, principal="shared")
            if isinstance(result, ToolFailure):
                assert result.kind.value == "overloaded", result
                counts["refused"] += 1
            else:
                counts["admitted"] += 1
            await trio.sleep(0.002)  # room for the other process; tokens wait in the bucket

    first = time.time()
    async with trio.open_nursery() as nursery:
        for _ in range(tasks):
            nursery.start_soon(loop, first + seconds)
    return {**counts, "first": first, "last": time.time()}


async def main() -> None:
    args = parse()
    budget = Budget(rate=RateLimit(rate=args.rate, burst=args.burst)) if args.budget else None
    async with open_runtime(tools(args), store=open_store(args.store, args.prefix), budget=budget) as rt:
        say({"ready": PID})
        lines = trio.wrap_file(sys.stdin)
        async for line in lines:
            request = json.loads(line)
            if "turn" in request:
                calls = [ToolCall(**c) for c in request["turn"]]
                async with contextlib.aclosing(rt.as_completed(calls)) as results:
                    async for result in results:
                        say(shown(result))
                say({"done": len(calls)})
            elif "hammer" in request:
                say(await hammer(rt, request["hammer"], request["tasks"]))
            elif "stats" in request:
                say(msgspec.to_builtins(rt.statistics()))


if __name__ == "__main__":
    trio.run(main)
