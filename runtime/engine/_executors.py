"""The in-process executors: where a tool's calls run. Each starts, cancels and reports; no more.

    Inline       a call that cannot suspend (an `async def` with no `await`, an `inline=True`
                 sync tool), run to its end where it is admitted: in its caller's task
    WorkerTasks  trio tasks of the tool actor's incarnation, one per running call (kept idle
                 between bursts); also what serves a placed tool (its body awaits the placement)
    Threads, HostTasks, InCaller
                 run calls outside the incarnation's nursery (engine/_outside.py)

Each reports a call's end through the call (`returned`, `raised`, `stopped`, `lost`), which
maps it to a result; each frees the mailbox slot when what the call held is free again. The
Subprocess and Ray executors are WorkerTasks whose body is the placement's `call`.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable
from typing import Any

import trio

from ..tools import reraise_own_cancellation
from ._call import Call
from ._code import InContext
from ._plan import ToolPlan
from ._states import QUEUED

__all__ = ["KEEP_IDLE", "Inline", "WorkerTasks", "awaiting"]


async def _a_coroutine() -> None:
    pass


_probe = _a_coroutine()
_COROUTINE = type(_probe)
_probe.close()

KEEP_IDLE = 4
"""Idle worker tasks an async tool keeps between bursts."""


class Inline:
    """Runs a call that cannot suspend to its end, right where it is admitted (no hop).

    Such a call can be neither cancelled nor timed out anywhere: it runs in one step, within
    `start`, so it holds no slot. A tool whose function was replaced by code that was not
    checked goes to `fallback` from then on.
    """

    stuck = 0
    holds = False

    def __init__(self, plan: ToolPlan, fallback: Callable[[], Any]) -> None:
        self._plan = plan
        self._fallback = fallback
        self._sync = not plan.tool.is_async

    def start(self, call: Call) -> None:
        plan = self._plan
        if self._sync:
            if call.start(self):
                try:
                    value = call.context.run(plan.sync_call, call.args, call.ctx)
                except BaseException as exc:  # KeyboardInterrupt too: the tool's own (nothing here awaits)
                    call.raised(exc)
                else:
                    call.returned(value)
            return
        if call.state is not QUEUED:  # answered while it waited
            return
        context = call.context
        coro = context.run(plan.dispatch, call.args, call.ctx)
        if type(coro) is not _COROUTINE or coro.cr_code is not plan.eager_code:  # type: ignore[attr-defined]
            if hasattr(coro, "close"):
                coro.close()  # never started: nothing of it ran
            plan.eager_code = None  # its code changed: worker tasks serve it from now on
            executor = self._fallback()
            plan.mailbox.executor = executor
            plan.mailbox.running += 1  # the slot the worker task frees
            executor.start(call)
            return
        if not call.start(self):
            coro.close()
            return
        try:
            if plan._around is not None:  # a feature wraps the tool's code (`around_call`)
                value = context.run(plan.run_to_end, coro, call.ctx)
            else:  # its one step, in its context: it returns (StopIteration) or raises
                context.run(coro.send, None)
                coro.close()
                raise RuntimeError(f"{coro!r} suspended where it cannot")  # its code was checked
        except StopIteration as stop:
            call.returned(stop.value)
        except BaseException as exc:  # KeyboardInterrupt too: the tool's own
            call.raised(exc)
        else:
            call.returned(value)

    def cancel(self, call: Call) -> None:
        pass  # it ran to its end in `start`


class WorkerTasks:
    """Trio tasks that run one call at a time each, in the nursery of the actor's incarnation.

    A worker that frees a slot takes the next call itself. A new call wakes an idle worker, or
    starts one, only when no worker is already on its way to the calls that wait; the worker
    that takes a call wakes (or starts) one more if others still wait. So a burst of quick
    calls is served by a few workers taking call after call, and calls that park each get a
    worker of their own, one scheduler turn after another (trio's memory channel does the same).
    One cancel scope serves a worker's calls: a call's deadline is set on it while it runs, and
    a caller that gives up cancels it (a cancelled scope is replaced).
    """

    stuck = 0
    holds = True

    def __init__(self, plan: ToolPlan, body: Callable[[Call], Any] | None = None) -> None:
        self._plan = plan
        self._body = body if body is not None else plan.coroutine
        self._ready: collections.deque[Call] = collections.deque()
        self._idle: list[trio.lowlevel.Task] = []
        self._waking = 0  # workers woken or started for `_ready` that have not looked at it yet
        self._nursery: trio.Nursery | None = None
        self._releasing = False
        self._name = f"tool {plan.name} worker"

    def serve(self, nursery: trio.Nursery | None) -> None:
        """Run in `nursery` (an incarnation), or in none (it ended: what was handed over waits again)."""
        self._nursery = nursery
        self._waking = 0
        if nursery is None:
            self._idle.clear()
            ready, self._ready = list(self._ready), collections.deque()
            self._plan.mailbox.take_back(ready)

    def start(self, call: Call) -> None:
        self._ready.append(call)
        if not self._releasing and not self._waking:  # else a worker takes it, or wakes another for it
            self._wake_one()

    def _wake_one(self) -> None:
        self._waking += 1
        if self._idle:
            trio.lowlevel.reschedule(self._idle.pop())
        else:
            assert self._nursery is not None
            self._nursery.start_soon(self._worker, name=self._name)

    def cancel(self, call: Call) -> None:
        scope = call.job
        if scope is not None:
            scope.cancel()

    async def _worker(self) -> None:
        # The hot path. A parked call costs this task, this frame and the tool's own coroutine.
        ready = self._ready
        body = self._body
        mailbox = self._plan.mailbox
        self._waking -= 1  # started for `_ready`
        while True:
            with trio.CancelScope() as scope:
                while True:
                    while not ready:
                        if len(self._idle) >= KEEP_IDLE:
                            return
                        await self._park()
                    call = ready.popleft()
                    if ready and not self._waking:
                        self._wake_one()  # more wait: one more worker on its way
                    if call.start(self):
                        call.job = scope
                        deadline = call.deadline
                        if deadline != math.inf:
                            scope.deadline = deadline
                        try:
                            value = await body(call)
                        except BaseException as exc:  # KeyboardInterrupt too: the tool's own
                            if scope.cancel_called:  # its deadline, or its caller gave up
                                call.stopped()
                            else:
                                # Not this call's: an outer cancellation (a crash, shutdown) goes
                                # on; a Cancelled the tool raised that is not its own is its error.
                                try:
                                    await reraise_own_cancellation(exc)
                                except BaseException:
                                    call.lost()
                                    mailbox.release()
                                    raise
                                call.raised(exc)
                        else:
                            call.returned(value)
                            value = None
                        if deadline != math.inf:
                            scope.deadline = math.inf
                    self._releasing = True
                    try:
                        mailbox.release()
                    finally:
                        self._releasing = False
                    del call  # a parked worker holds no call (nor its result) alive
                    if scope.cancel_called:
                        break  # a call was cancelled or timed out: take a fresh scope

    async def _park(self) -> None:
        task = trio.lowlevel.current_task()
        idle = self._idle
        idle.append(task)

        def abort(_: object) -> trio.lowlevel.Abort:
            if task in idle:
                idle.remove(task)
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)
        self._waking -= 1  # woken for `_ready`


def awaiting(plan: ToolPlan) -> Callable[[Call], Any]:
    """A worker task's body for a placed tool: the placement's call, in the call's context."""

    def body(call: Call) -> Any:
        return InContext(call.context, plan.placed_call(call))

    return body
