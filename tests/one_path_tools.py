"""The tool functions of tests/test_one_path.py: one per kind of executor, told by `kind` what to do.

At module level, so that a Subprocess worker or a Ray replica imports them by reference; the test
makes its tools from them (`tool(trio_kinds, name=..., placement=...)`). Nothing here runs at
import (a worker imports this module inside its own trio run).
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import AsyncIterator

import trio
import trio.lowlevel

from runtime import ToolCall

T = 0.2
"""Seconds: the deadline of each call that must time out (trio's virtual seconds where the route
runs on a MockClock, real ones elsewhere)."""

SHIELD = 0.8
"""Seconds a shielded tool ignores its cancellation: well past its deadline `T` and the grace after
it, even on a loaded machine."""

BLOCK = 0.8
"""Seconds a blocking sync tool holds its thread (or its worker process): well past its deadline `T`
(on trio's virtual clock the deadline passes at once: there `BLOCK_VIRTUAL` will do)."""

BLOCK_VIRTUAL = 1.0
"""Real seconds, on a MockClock: the clock jumps to the deadline only once the loop is idle, so a
thread that returned before a starved loop got there has, in virtual time, finished in time (it
was 0.2 s: one run in three failed so with three busy processes on two cores; 0.5 s failed once
with two busy loops beside make test's two workers)."""

SLOW = 100 * T
"""Seconds a slow tool takes: it would return, but its caller's deadline (`T`) comes first."""

RELEASE = threading.Event()
"""Set by the test once every call has its result: the in-process sync tools that wait on it return."""

_stale: list[BaseException] = []


def stale_cancelled() -> BaseException:
    """A real `trio.Cancelled`, caught in a trio run of its own (on a thread of its own, so this
    works anywhere, inside a run or not): raised by a tool, it is not the tool's own."""
    if not _stale:

        async def catch() -> None:
            with trio.CancelScope() as scope:
                scope.cancel()
                try:
                    await trio.lowlevel.checkpoint()
                except trio.Cancelled as exc:
                    _stale.append(exc)
                    raise

        thread = threading.Thread(target=trio.run, args=(catch,), name="stale cancelled")
        thread.start()
        thread.join()
    return _stale[0]


async def trio_kinds(kind: str, n: int = 0) -> int:
    """An async tool (trio): it suspends, so it runs in a task (a worker task, or in a worker process)."""
    await trio.lowlevel.checkpoint()
    if kind == "raise":
        raise ValueError(f"the tool raised for call {n}")
    if kind == "hang":
        await trio.sleep_forever()
    if kind == "slow":
        await trio.sleep(SLOW)
    if kind == "stale":
        raise stale_cancelled()
    if kind == "shielded":
        with trio.CancelScope(shield=True):
            await trio.sleep(SHIELD)
    return n


async def eager_kinds(kind: str, n: int = 0) -> int:
    """An async tool with no `await`: it cannot suspend, so its call runs in the caller's task."""
    if kind == "raise":
        raise ValueError(f"the tool raised for call {n}")
    if kind == "stale":
        raise stale_cancelled()
    return n


def sync_kinds(kind: str, n: int = 0, seconds: float = BLOCK) -> int:
    """A sync tool: in the tool's kept threads (or inline, with inline=True; or in a worker process)."""
    if kind == "raise":
        raise ValueError(f"the tool raised for call {n}")
    if kind == "hang":
        RELEASE.wait()  # forever in a worker process (it is killed at the deadline)
    if kind == "slow":
        RELEASE.wait(SLOW)
    if kind == "stale":
        raise stale_cancelled()
    if kind == "block":
        time.sleep(seconds)  # blocked in C: no thread can be interrupted
    return n


async def asyncio_kinds(kind: str, n: int = 0) -> int:
    """An asyncio tool (loop="asyncio"): a task of the host asyncio loop."""
    await asyncio.sleep(0)
    if kind == "raise":
        raise ValueError(f"the tool raised for call {n}")
    if kind == "hang":
        await asyncio.Event().wait()
    if kind == "slow":
        await asyncio.sleep(SLOW)
    if kind == "stale":
        raise stale_cancelled()
    if kind == "shielded":
        try:
            await asyncio.sleep(SLOW)
        except asyncio.CancelledError:
            await asyncio.sleep(SHIELD)  # ignores its cancellation for a while
    return n


STREAMS: collections.Counter[str] = collections.Counter()
"""How many of `stream_kinds`' generators were started ("opened") and closed ("closed")."""


async def stream_kinds(kind: str, n: int = 0) -> AsyncIterator[str]:
    """A streaming tool (an async generator, on trio): each kind after a first chunk (mid-stream);
    `ok` yields `n`'s digits one by one, so its result is `str(n)`."""
    STREAMS["opened"] += 1
    try:
        await trio.lowlevel.checkpoint()
        if kind == "ok":
            for digit in str(n):
                yield digit
                await trio.lowlevel.checkpoint()
            return
        yield "."
        if kind == "raise":
            raise ValueError(f"the tool raised for call {n}")
        if kind == "hang":
            await trio.sleep_forever()
        if kind == "slow":
            await trio.sleep(SLOW)
        if kind == "stale":
            raise stale_cancelled()
        if kind == "shielded":
            with trio.CancelScope(shield=True):
                await trio.sleep(SHIELD)
        yield "."
    finally:
        STREAMS["closed"] += 1


def deep_arguments(depth: int = 100) -> str:
    """JSON nested deeper than the runtime's limit (64 levels by default)."""
    return '{"kind": "ok", "n": ' + "[" * depth + "]" * depth + "}"


def make_call(call_id: str, name: str, arguments: str) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)
