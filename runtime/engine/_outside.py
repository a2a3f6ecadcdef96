"""The executors whose calls run outside the incarnation's nursery; each starts, cancels and
reports, no more.

    Threads      the sync tool's own kept threads (`_threads`)
    HostTasks    tasks of the host asyncio loop (`loop="asyncio"` tools, and `loop="any"` ones
                 called from asyncio code under `open_asyncio_runtime`)
    InCaller     the trio caller's own task, for a call whose code only awaits another process
                 (a Subprocess worker, an MCP server) and stops at once when cancelled: `rt.call`
                 admitted with a free slot runs it right there (no hop to a worker and back)

The incarnation's end kills them (`kill`): what still runs is cancelled, and reports its call
UNAVAILABLE; a thread cannot be interrupted, so its call is answered and the thread counted.
"""

from __future__ import annotations

import asyncio
import functools
import math
from collections.abc import Callable
from typing import Any

import outcome
import trio

from ..exceptions import CallStopped
from ..tools import is_cancellation
from ._call import Call
from ._plan import ToolPlan
from ._threads import Job, KeptThreads

__all__ = ["HostTasks", "InCaller", "Threads"]


class Threads:
    """A sync tool's calls on its kept threads; the mailbox's capacity is its thread budget.

    A call cancelled while its job is queued never runs. One cancelled while its thread runs
    it is answered now (no thread can be interrupted): the thread runs on, abandoned and
    counted (`stuck`), and keeps its slot until it returns.
    """

    holds = True

    def __init__(self, plan: ToolPlan, threads: KeptThreads) -> None:
        self.stuck = 0
        self._plan = plan
        self.threads = threads
        self.calls: dict[Job, Call] = {}

    def start(self, call: Call) -> None:
        plan = self._plan
        if not call.start(self):
            plan.mailbox.release()
            return
        try:
            call.job = self.threads.submit(call.context, plan.sync_call, (call.args, call.ctx), self._done)
        except Exception as exc:  # no thread can start now (a resource limit): this call fails
            call.raised(exc)
            plan.mailbox.release()
            return
        self.calls[call.job] = call

    def cancel(self, call: Call) -> None:
        job = call.job
        if job is None:
            return
        plan = self._plan
        if self.threads.drop(job):  # it never ran: its slot is free
            del self.calls[job]
            call.stopped()
            plan.mailbox.release()
            return
        self.stuck += 1  # it runs on: `_done` frees its slot when it returns
        plan.counters.abandoned_threads += 1
        if call.ctx is not None:
            call.ctx.abandoned = True
        call.stopped()

    def kill(self) -> None:
        """The incarnation ended under these calls (a crash, down, shutdown): each is answered
        UNAVAILABLE now; those not started never run, the others run on, abandoned."""
        for job, call in list(self.calls.items()):
            if call.job is not job:
                continue  # answered already (a thread that was abandoned)
            if self.threads.drop(job):
                del self.calls[job]
                call.lost()
                self._plan.mailbox.release()
            else:
                self.stuck += 1
                self._plan.counters.abandoned_threads += 1
                call.lost()

    def _done(self, job: Job, result: outcome.Outcome[Any]) -> None:
        """A job's thread returned (on the runtime's thread)."""
        call = self.calls.pop(job)
        if call.job is job:
            if type(result) is outcome.Value:
                call.returned(result.value)
            else:
                call.raised(result.error)  # type: ignore[attr-defined]  # an Error
        else:  # abandoned while it ran: its thread is free again
            self.stuck -= 1
        self._plan.mailbox.release()


class _Outside:
    """Calls that run outside the incarnation's nursery, each with a job that cancels (an
    asyncio task, a cancel scope): cancelling a call cancels its job, and the incarnation's end
    (`kill`) cancels them all, each then reporting its call UNAVAILABLE."""

    stuck = 0
    holds = True

    def __init__(self, plan: ToolPlan) -> None:
        self._plan = plan
        self.running: set[Call] = set()
        self._killed = False

    def serve(self) -> None:
        self._killed = False

    def cancel(self, call: Call) -> None:
        job = call.job
        if job is not None:
            job.cancel()

    def kill(self) -> None:
        self._killed = True
        for call in self.running:
            job = call.job
            if job is not None:
                job.cancel()


class HostTasks(_Outside):
    """Tasks of the host asyncio loop: an asyncio tool's coroutine runs there, in the call's
    context; cancelling the call cancels the task, and its end reports the call's."""

    def __init__(self, plan: ToolPlan, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(plan)
        self._loop = loop

    def start(self, call: Call) -> None:
        plan = self._plan
        if not call.start(self):
            plan.mailbox.release()
            return
        task = self._loop.create_task(plan.host_coroutine(call), context=call.context)
        call.job = task
        self.running.add(call)
        task.add_done_callback(functools.partial(self._done, call))

    def _done(self, call: Call, task: asyncio.Task[Any]) -> None:
        self.running.discard(call)
        if task.cancelled():
            if call.interrupted:  # cancelled by its deadline or its caller
                call.stopped()
            elif self._killed:
                call.lost()
            else:  # the tool's code cancelled its own task
                call.raised(asyncio.CancelledError())
        elif (exc := task.exception()) is not None:
            call.raised(exc)
        else:
            call.returned(task.result())
        self._plan.mailbox.release()


class InCaller(_Outside):
    """Runs a call in its trio caller's task: `start` (at admission) makes it RUNNING, and the
    caller awaits `run` right after, with nothing in between. Chosen at admission for a trio
    caller's `rt.call` (`Steps.admit(here=True)`) only when the call has no gates and the tool's
    mailbox has a free slot and nobody waits (else the call takes the worker tasks), for
    code that stops at once when cancelled (the caller waits for it to stop). Its caller's own
    cancellation passes through, the call answered CANCELLED first.

    A call with a deadline runs in a cancel scope of its own, which its deadline, an abandon
    and the incarnation's end (`kill`: UNAVAILABLE) cancel. One with none, of a placement that
    `stops_calls`, runs without: trio's scope costs as much as a whole in-process call, and
    only an abandon or the incarnation's end can stop such a call, which the placement then
    does itself (`placed.stop(task)`: the worker killed, `CallStopped` raised in the task).
    """

    def __init__(self, plan: ToolPlan, body: Callable[[Call], Any], stops: bool = False) -> None:
        super().__init__(plan)
        self._body = body
        self._stops = stops

    def start(self, call: Call) -> None:
        if not call.start(self):
            self._plan.mailbox.release()
            return
        self.running.add(call)

    def cancel(self, call: Call) -> None:
        job = call.job
        if type(job) is trio.lowlevel.Task:  # run without a scope: its placement stops it
            placed = self._plan.placed
            if placed is not None:
                placed.stop(job)  # type: ignore[attr-defined]  # `stops_calls`: it has one
        elif job is not None:
            job.cancel()

    def kill(self) -> None:
        self._killed = True
        for call in list(self.running):
            self.cancel(call)

    async def run(self, call: Call) -> bool:
        """Run the started `call` here, to its report; True if its code yielded to trio on the
        way (the caller has had its schedule point then). Raises only what is the caller's: its
        own cancellation, or a KeyboardInterrupt / SystemExit delivered to its task."""
        raised: BaseException | None = None
        body: Any = None
        if self._stops and call.deadline == math.inf:
            if self._killed:
                raised = CallStopped("the incarnation ended before the call ran")
            else:
                call.job = trio.lowlevel.current_task()
                try:
                    body = self._body(call)  # may raise at once: the tool's code starts here
                    value = await body
                except BaseException as exc:  # sorted out below
                    raised = exc
            stop_asked = call.interrupted  # an abandon (the incarnation's end: `_killed`)
        else:
            with trio.CancelScope(deadline=call.deadline) as scope:
                call.job = scope
                if self._killed:
                    scope.cancel()
                try:
                    body = self._body(call)  # may raise at once: the tool's code starts here
                    value = await body
                except BaseException as exc:  # sorted out below, outside this call's own scope
                    raised = exc
            stop_asked = scope.cancel_called  # its deadline, an abandon, or the incarnation's end
        self.running.discard(call)
        suspended: bool = getattr(body, "suspended", False)
        if raised is None:
            call.returned(value)
            self._plan.mailbox.release()
            return suspended
        try:
            if isinstance(raised, KeyboardInterrupt | SystemExit):
                raise raised  # delivered to this (the caller's) task: the caller's, not the tool's
            await trio.lowlevel.checkpoint_if_cancelled()  # the caller's own cancellation first
        except BaseException:
            call.cancelled = call.interrupted = True
            call.stopped()
            self._plan.mailbox.release()
            raise
        killed = self._killed and not call.interrupted  # the incarnation ended under it
        if killed and (is_cancellation(raised) or type(raised) is CallStopped):
            call.lost()
        elif stop_asked and not killed:  # its deadline, or its caller's abandon
            call.stopped()
        else:  # the tool's own failure (a worker that died, a Cancelled that is not its own)
            call.raised(raised)
        self._plan.mailbox.release()
        return suspended
