"""The one entry: how every call gets in, whoever makes it. The steps (prepare, starting,
admit, finish) are `_steps.Steps`; this module adds how a trio caller waits:

    call      trio's `send` shape: a checkpoint, the attempt that needs no wait (a cache hit, an
              eager call, a call run here when it only awaits another process), then a park
    stream    the same, its reply slot a bounded channel of the tool's chunks
    batch     `call_many` / `as_completed`: admit every call, yield them as they finish
    cancelled the caller gave up: every call not answered ends CANCELLED, hooks included

The asyncio embedding and `RuntimeThread` use the same steps; only how they wait differs.
Nothing here knows where a tool runs: that is its executor's.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any

import trio

from ..messages import FailureKind, ToolCall, ToolResult
from ._batch import Batch, lapse_due
from ._call import Call
from ._scope import Scope
from ._states import CANCELLED_MESSAGE, DONE, QUEUED, REPORTED, RUNNING
from ._steps import Steps

__all__ = ["STREAM_BUFFER", "Entry"]

log = logging.getLogger("runtime.engine")

_HOOK_GRACE = 1.0  # seconds the shielded failure hooks of a cancelled call may take
_EAGER_RUN = 128  # calls a batch admits in its caller's task between two checkpoints
_INF = math.inf  # the hot path's globals, one lookup each
_checkpoint_if_cancelled = trio.lowlevel.checkpoint_if_cancelled
_cancel_shielded_checkpoint = trio.lowlevel.cancel_shielded_checkpoint

STREAM_BUFFER = 8
"""Chunks of a streamed call that may wait for its reader before the tool waits too."""


class _Stream:
    """The reply slot of a call read as a stream (`Entry.stream`): once the call is settled, its
    chunks end (the reader drains what is buffered, then reads the result)."""

    __slots__ = ("send",)

    def __init__(self, send: trio.MemorySendChannel[str]) -> None:
        self.send = send

    def settled(self, call: Call) -> None:
        plan = call.plan
        if plan is not None:
            plan.sinks.pop(call, None)
        self.send.close()

    def expire_at(self, when: float) -> None:
        pass  # the reader waits until the call's `expires`, read each time it waits


class Entry(Steps):
    """The engine's way in (an internal port: `Runtime` and the embeddings use it)."""

    # -- a trio caller -------------------------------------------------------------------

    async def call(
        self,
        call: ToolCall,
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        principal: str | None = None,
        scope: Scope | None = None,
    ) -> ToolResult:
        """One call from a trio task: always its one result (`Runtime.call`)."""
        if self.closed or self._dormant:
            self.check_open()
        if self._resilience.caches and self.pipeline is None and scope is None and metadata is None:
            hit = self._cached(call, principal)
            if hit is not None:
                await _checkpoint_if_cancelled()
                await _cancel_shielded_checkpoint()
                return hit
        deadline = _INF if timeout is None else trio.current_time() + timeout
        c = self.prepare(call, metadata, deadline, timeout, None, 0, principal, scope)
        pipeline = self.pipeline
        suspended = False
        try:
            plan = c.plan
            if pipeline is not None or (plan is not None and plan.policies):
                if (plan is not None and plan.suspends) or not (
                    pipeline is None or pipeline.hooks_cannot_suspend
                ):
                    await self.starting(c)
                else:
                    self.starting_now(c)  # nothing to await: no coroutine for it
            await _checkpoint_if_cancelled()  # trio's rule; a cancelled caller runs nothing
            plan = c.plan
            if c.state is QUEUED:
                assert plan is not None  # routed: only a routed call waits
                if not (
                    plan.mailbox.admit(c, None)
                    if c.gates is None and plan.in_caller is None
                    else self.admit(c, here=True)
                ):
                    await self._wait_room(c)
                elif c.state is RUNNING and (runner := plan.in_caller) is not None and c.executor is runner:
                    suspended = await runner.run(c)  # here, in this task: no hop to a worker and back
            state = c.state
            if state is DONE:
                if not suspended:  # trio's rule: a schedule point, unless the tool's code gave one
                    await _cancel_shielded_checkpoint()
            elif c.expires == _INF and c.plan.untimed:  # type: ignore[union-attr]  # no deadline: no scope
                await c.wait()
            else:
                await self._wait_timed(c)
        except BaseException:
            await self.cancelled([c])
            raise
        if pipeline is None:
            if c.flows is None:
                c.reported()
            elif c.plan is not None and c.plan.suspends:
                await self.finish(c)
            else:
                self.finish_now(c)
        else:
            await self.finish(c)
        return c.result  # type: ignore[return-value]  # DONE

    async def stream(
        self,
        call: ToolCall,
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        principal: str | None = None,
        scope: Scope | None = None,
        buffer: int = STREAM_BUFFER,
    ) -> AsyncGenerator[str | ToolResult, None]:
        """One call from a trio task, read as it goes: a streaming tool's chunks, then the one
        result (`Runtime.stream`). The call goes the way `call` takes it; only its reply slot
        differs: a bounded channel the tool's chunks go through, closed when it is settled."""
        if self.closed or self._dormant:
            self.check_open()
        deadline = math.inf if timeout is None else trio.current_time() + timeout
        send: trio.MemorySendChannel[str]
        receive: trio.MemoryReceiveChannel[str]
        send, receive = trio.open_memory_channel(buffer)  # not `[str]`: a generic alias costs ~10 us
        c = self.prepare(call, metadata, deadline, timeout, _Stream(send), 0, principal, scope)
        try:
            plan = c.plan
            if self.pipeline is not None or (plan is not None and plan.policies):
                await self.starting(c)
            await trio.lowlevel.checkpoint_if_cancelled()  # trio's rule; a cancelled caller runs nothing
            plan = c.plan  # a policy may have sent it to another tool
            if c.state is QUEUED:
                assert plan is not None  # routed: only a routed call waits
                if plan.streams:
                    plan.sinks[c] = send
                if not self.admit(c):
                    await self._wait_room(c)
            with receive:
                while (chunk := await self._next_chunk(c, receive)) is not None:
                    yield chunk  # outside every cancel scope: the reader's code runs here
        except BaseException:
            await self.cancelled([c])
            raise
        await self.finish(c)
        yield c.result  # type: ignore[misc]  # settled

    async def _next_chunk(self, c: Call, receive: trio.MemoryReceiveChannel[str]) -> str | None:
        """The call's next chunk, or None once it is settled and its chunks are read; its deadline
        lapses meanwhile (as in `_wait_timed`)."""
        if c.expires == math.inf and c.plan is not None and c.plan.untimed:  # no deadline to keep
            try:
                return await receive.receive()
            except trio.EndOfChannel:
                return None
        while True:
            with trio.CancelScope(deadline=math.inf if c.settled else c.expires) as waiting:
                c.waiter = waiting
                try:
                    return await receive.receive()
                except trio.EndOfChannel:
                    return None
                finally:
                    c.waiter = None
            if not c.settled and c.expires <= trio.current_time():
                c.lapse()

    async def _wait_room(self, c: Call) -> None:
        """The call's mailbox is full: wait for room (backpressure), no longer than its deadline."""
        mailbox = c.plan.mailbox  # type: ignore[union-attr]  # routed
        with trio.CancelScope(deadline=c.expires) as waiting:
            c.waiter = waiting
            while c.state is QUEUED and not self.admit(c):
                await mailbox.wait_room()
        c.waiter = None
        if c.state is QUEUED and waiting.cancelled_caught:
            c.lapse()

    async def _wait_timed(self, c: Call) -> None:
        """Wait, answering the call from this side once its deadline lapses."""
        while True:
            with trio.CancelScope(deadline=c.expires) as waiting:
                c.waiter = waiting
                if c.state is not DONE:
                    await c.wait()
            c.waiter = None
            if c.state is DONE:
                return
            if c.expires <= trio.current_time():  # not moved later meanwhile (a retry's next attempt)
                c.lapse()
            if c.state is DONE:
                return

    async def cancelled(self, calls: Sequence[Call]) -> None:
        """The caller was cancelled: every call not yet answered fails CANCELLED, hooks included."""
        for c in calls:
            state = c.state
            if state is not DONE and state is not REPORTED:
                c.abandon(FailureKind.CANCELLED, CANCELLED_MESSAGE)
                c.fail(
                    FailureKind.CANCELLED, CANCELLED_MESSAGE
                )  # a running call: its later result is dropped
        with trio.CancelScope(shield=True), trio.move_on_after(_HOOK_GRACE):
            for c in calls:
                await self.finish(c)

    async def batch(
        self,
        calls: Sequence[ToolCall],
        metadata: Mapping[str, Any] | None,
        timeout: float | None,
        principal: str | None = None,
        scope: Scope | None = None,
    ) -> AsyncGenerator[list[Call], None]:
        """A trio caller's batch: admit every call, then yield the finished ones in chunks, in
        the order they finish (a thousand calls finishing together cost one resume)."""
        self.check_open()
        deadline = math.inf if timeout is None else trio.current_time() + timeout
        batch = Batch(deadline)
        prepare = self.prepare
        cs = [
            prepare(call, metadata, deadline, timeout, batch, i, principal, scope)
            for i, call in enumerate(calls)
        ]
        if self._batch_gates:
            self.gate_batch(cs)
        plans = {c.plan for c in cs}  # most batches call a few tools: what each needs, once
        plans.discard(None)
        if not batch.timed:
            batch.timed = any(not plan.untimed for plan in plans)  # type: ignore[union-attr]
        plain = self.pipeline is None and not any(plan.policies for plan in plans)  # type: ignore[union-attr]
        finished = 0
        try:
            if not plain:
                await self._begin_batch(cs, plans)
            with trio.move_on_at(deadline):
                await trio.lowlevel.checkpoint()  # trio's rule; and a cancelled caller runs nothing
                admitted = 0
                for c in cs:
                    if c.state is not QUEUED:
                        continue
                    if not (c.plan.mailbox.admit(c, None) if c.gates is None else self.admit(c)):  # type: ignore[union-attr]  # QUEUED: routed
                        mailbox = c.plan.mailbox  # type: ignore[union-attr]  # routed
                        while c.state is QUEUED and not self.admit(c):
                            await mailbox.wait_room()  # a full mailbox: wait for room (backpressure)
                    admitted += 1
                    if admitted % _EAGER_RUN == 0:
                        await trio.lowlevel.checkpoint()  # a long batch lets others run too
            while finished < len(cs):
                while not batch.done:
                    await batch.wait()
                    if not batch.done:  # a call's deadline lapsed
                        batch.expires = lapse_due(cs, trio.current_time())
                chunk = list(batch.done)
                batch.done.clear()
                for c in chunk:
                    if plain:
                        c.reported()  # nothing to await: no coroutine for it
                    else:
                        await self.finish(c)
                finished += len(chunk)
                yield chunk
        except BaseException:
            await self.cancelled([c for c in cs if c.state is not REPORTED])
            raise

    async def _begin_batch(self, cs: list[Call], plans: set[Any]) -> None:
        """Begin's steps after `prepare` for a batch: its calls whose policies may suspend
        together (a policy that asks someone lets them through at once), then the others."""
        begun: set[Call] = set()
        if any(plan.suspends for plan in plans):
            suspending = [c for c in cs if c.plan is not None and c.plan.suspends and c.state is QUEUED]
            async with trio.open_nursery() as nursery:
                for c in suspending:
                    nursery.start_soon(self.starting, c)
            begun.update(suspending)
        for c in cs:
            if c not in begun:
                await self.starting(c)
