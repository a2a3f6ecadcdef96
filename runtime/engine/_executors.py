"""Where a tool's calls run: the executors, each of which starts, cancels and reports; no more.

    Inline       a call that cannot suspend (an `async def` with no `await`, an `inline=True`
                 sync tool), run to its end where it is admitted: in its caller's task
    WorkerTasks  trio tasks of the tool actor's incarnation, one per running call (kept idle
                 between bursts); also what serves a placed tool (its body awaits the placement)
    Threads      the sync tool's own kept threads (`_threads`)
    HostTasks    tasks of the host asyncio loop (`loop="asyncio"` tools, and `loop="any"` ones
                 called from asyncio code under `open_asyncio_runtime`)
    InCaller     the trio caller's own task, for a call whose code only awaits another process
                 (a Subprocess worker, an MCP server) and stops at once when cancelled: `rt.call`
                 admitted with a free slot runs it right there (no hop to a worker and back)

Each reports a call's end through the call (`returned`, `raised`, `stopped`, `lost`), which
maps it to a result; each frees the mailbox slot when what the call held is free again. The
Subprocess and Ray executors are WorkerTasks whose body is the placement's `call`. Threads,
HostTasks and InCaller run calls outside the incarnation's nursery: the incarnation's end kills
them (`kill`); what still runs is cancelled, and reports its call UNAVAILABLE; a thread cannot
be interrupted, so its call is answered and the thread counted.

Which executors serve a tool (`Executors`):

    placed in other processes   worker tasks that await the placement (Subprocess, Ray)
    sync, inline=True           run where admitted (Inline), else on a worker task
    sync                        the tool's kept threads (Threads); approval first: a worker task
    loop="asyncio"              tasks of the host asyncio loop (HostTasks)
    async, cannot suspend       run where admitted (Inline), unless bounded or approved
    async                       worker tasks; with loop="any" under an asyncio host, an asyncio
                                caller's call runs as a host task instead (`host_executor`)
    in_caller                   a trio caller's call may run in its own task (InCaller)

The mailbox's capacity is the tool's `max_concurrency`, else its placement's room (or the
runtime's `thread_limit` for a sync tool); unbounded for async tools.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import math
import sys
from collections.abc import Callable
from typing import Any

import outcome
import trio

from ..exceptions import CallStopped
from ..messages import FailureKind, ToolFailure
from ..tools import Placement, ToolBase
from ..tools.lowlevel import is_cancellation, reraise_own_cancellation
from ._call import QUEUED, Call
from ._outcome import failure
from ._plan import InContext, ToolPlan
from ._threads import Job, KeptThreads

__all__ = ["KEEP_IDLE", "Executors", "HostTasks", "InCaller", "Inline", "Threads", "WorkerTasks", "awaiting"]


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

    def start(self, call: Call[ToolPlan]) -> None:
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

    def cancel(self, call: Call[ToolPlan]) -> None:
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

    def __init__(self, plan: ToolPlan, body: Callable[[Call[ToolPlan]], Any] | None = None) -> None:
        self._plan = plan
        self._body = body if body is not None else plan.coroutine
        self._ready: collections.deque[Call[ToolPlan]] = collections.deque()
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
        elif self._ready:  # calls handed over before the incarnation's nursery was there
            self._wake_one()

    def start(self, call: Call[ToolPlan]) -> None:
        self._ready.append(call)
        if not self._releasing and not self._waking:  # else a worker takes it, or wakes another for it
            self._wake_one()

    def _wake_one(self) -> None:
        if self._idle:
            self._waking += 1
            trio.lowlevel.reschedule(self._idle.pop())
        elif self._nursery is not None:
            self._waking += 1
            self._nursery.start_soon(self._worker, name=self._name)
        # else: an on-demand actor serves before its incarnation's nursery is there (`serve`)

    def cancel(self, call: Call[ToolPlan]) -> None:
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


def awaiting(plan: ToolPlan) -> Callable[[Call[ToolPlan]], Any]:
    """A worker task's body for a placed tool: the placement's call, in the call's context."""

    def body(call: Call[ToolPlan]) -> Any:
        return InContext(call.context, plan.placed_call(call))

    return body


class Threads:
    """A sync tool's calls on its kept threads; the mailbox's capacity is its thread budget.

    A call cancelled while its job is queued never runs. One cancelled while its thread runs
    it is answered now (no thread can be interrupted): the thread runs on, abandoned and
    counted (`stuck`), and keeps its slot until it returns; then its call hears how its work
    ended (a late result: its breaker and its dedupe journal hear it).
    """

    holds = True

    def __init__(self, plan: ToolPlan, threads: KeptThreads) -> None:
        self.stuck = 0
        self._plan = plan
        self.threads = threads
        self.calls: dict[Job, Call[ToolPlan]] = {}
        self._abandoned: set[Job] = set()  # jobs whose calls were answered while their thread ran

    def start(self, call: Call[ToolPlan]) -> None:
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

    def cancel(self, call: Call[ToolPlan]) -> None:
        job = call.job
        if job is None:
            return
        plan = self._plan
        if self.threads.drop(job):  # it never ran: its slot is free
            del self.calls[job]
            call.stopped()
            plan.mailbox.release()
            return
        self._abandon(call, call.stop_result())

    def kill(self) -> None:
        """The incarnation ended under these calls (a crash, down, shutdown): each is answered
        UNAVAILABLE now; those not started never run, the others run on, abandoned."""
        for job, call in list(self.calls.items()):
            if job in self._abandoned:
                continue  # answered already: its thread runs on
            if self.threads.drop(job):
                del self.calls[job]
                call.lost()
                self._plan.mailbox.release()
            else:
                self._abandon(
                    call, failure(call.call, FailureKind.UNAVAILABLE, self._plan.unavailable_message())
                )

    def _abandon(self, call: Call[ToolPlan], result: ToolFailure) -> None:
        """Answer a call whose thread runs on: its slot stays held until the thread returns."""
        if call.job not in self._abandoned:
            self._abandoned.add(call.job)
            self.stuck += 1
        call.give_up(result.kind, result.message)

    def _done(self, job: Job, result: outcome.Outcome[Any]) -> None:
        """A job's thread returned (on the runtime's thread): its call's work is over."""
        call = self.calls.pop(job)
        if job in self._abandoned:  # abandoned while it ran: its thread is free again
            self._abandoned.discard(job)
            self.stuck -= 1
        if type(result) is outcome.Value:
            call.returned(result.value)
        else:
            call.raised(result.error)  # type: ignore[attr-defined]  # an Error
        self._plan.mailbox.release()


class _Outside:
    """Calls that run outside the incarnation's nursery, each with a job that cancels (an
    asyncio task, a cancel scope): cancelling a call cancels its job, and the incarnation's end
    (`kill`) cancels them all, each then reporting its call UNAVAILABLE."""

    stuck = 0
    holds = True

    def __init__(self, plan: ToolPlan) -> None:
        self._plan = plan
        self.running: set[Call[ToolPlan]] = set()
        self._killed = False

    def serve(self) -> None:
        self._killed = False

    def cancel(self, call: Call[ToolPlan]) -> None:
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

    def start(self, call: Call[ToolPlan]) -> None:
        plan = self._plan
        if not call.start(self):
            plan.mailbox.release()
            return
        task = self._loop.create_task(_contained(plan, call), context=call.context)
        call.job = task
        self.running.add(call)
        task.add_done_callback(functools.partial(self._done, call))

    def _done(self, call: Call[ToolPlan], task: asyncio.Task[Any]) -> None:
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
        elif type(result := task.result()) is _Escaped:
            call.raised(result.exc)
        else:
            call.returned(result)
        self._plan.mailbox.release()


class _Escaped:
    """A KeyboardInterrupt or SystemExit an asyncio tool raised, kept from its loop."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


async def _contained(plan: ToolPlan, call: Call[ToolPlan]) -> Any:
    """An asyncio tool's call, run by a task of the host loop: asyncio re-raises a task's
    KeyboardInterrupt and SystemExit out of the loop (ending the host's `asyncio.run`); a tool's
    are its call's failure here, as on every other executor. (The tool's coroutine is made here:
    one made outside would never be awaited by a task cancelled before its first step.)"""
    try:
        return await plan.host_coroutine(call)
    except (KeyboardInterrupt, SystemExit) as exc:
        return _Escaped(exc)


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

    def __init__(self, plan: ToolPlan, body: Callable[[Call[ToolPlan]], Any], stops: bool = False) -> None:
        super().__init__(plan)
        self._body = body
        self._stops = stops

    def start(self, call: Call[ToolPlan]) -> None:
        if not call.start(self):
            self._plan.mailbox.release()
        # its calls are found among the plan's running ones (`kill`): no set of its own, which
        # would weigh on each of thousands of parked calls

    def cancel(self, call: Call[ToolPlan]) -> None:
        job = call.job
        if type(job) is trio.lowlevel.Task:  # run without a scope: its placement stops it
            placed = self._plan.placed
            if placed is not None:
                placed.stop(job)  # type: ignore[attr-defined]  # `stops_calls`: it has one
        elif job is not None:
            job.cancel()

    def kill(self) -> None:
        self._killed = True
        for call in [c for c in self._plan.running if c.executor is self]:
            self.cancel(call)

    async def run(self, call: Call[ToolPlan]) -> bool:
        """Run the started `call` here, to its report; True if its code yielded to trio on the
        way (the caller has had its schedule point then). Raises only what is the caller's: its
        own cancellation, or a KeyboardInterrupt / SystemExit delivered to its task. (A parked
        call keeps this frame: it has few locals.)"""
        raised: BaseException | None = None
        body: Any = None
        value: Any = None
        if self._stops and call.deadline == math.inf:
            scope = None
            if self._killed:
                raised = CallStopped("the incarnation ended before the call ran")
            else:
                call.job = trio.lowlevel.current_task()
                try:
                    body = self._body(call)  # may raise at once: the tool's code starts here
                    value = await body
                except BaseException:  # sorted out below
                    raised = sys.exc_info()[1]
        else:
            with trio.CancelScope(deadline=call.deadline) as scope:
                call.job = scope
                if self._killed:
                    scope.cancel()
                try:
                    body = self._body(call)  # may raise at once: the tool's code starts here
                    value = await body
                except BaseException:  # sorted out below, outside this call's own scope
                    raised = sys.exc_info()[1]
        if raised is None:
            call.returned(value)
            self._plan.mailbox.release()
            return bool(getattr(body, "suspended", False))
        try:
            if isinstance(raised, KeyboardInterrupt | SystemExit):
                raise raised  # delivered to this (the caller's) task: the caller's, not the tool's
            await trio.lowlevel.checkpoint_if_cancelled()  # the caller's own cancellation first
        except BaseException:
            call.cancelled = call.interrupted = True
            call.stopped()
            self._plan.mailbox.release()
            raise
        self._ended(call, raised, call.interrupted if scope is None else scope.cancel_called)
        return bool(getattr(body, "suspended", False))

    def _ended(self, call: Call[ToolPlan], raised: BaseException, stop_asked: bool) -> None:
        """Report a call whose code raised: lost (the incarnation ended under it), stopped (its
        deadline, its caller's abandon), or the tool's own failure."""
        killed = self._killed and not call.interrupted  # the incarnation ended under it
        if killed and (is_cancellation(raised) or type(raised) is CallStopped):
            call.lost()
        elif stop_asked and not killed:  # its deadline, or its caller's abandon
            call.stopped()
        else:  # the tool's own failure (a worker that died, a Cancelled that is not its own)
            call.raised(raised)
        self._plan.mailbox.release()


class Executors:
    """The executors of one tool (see the module docstring) and its mailbox's capacity.

    Attributes:
        executor: where its mailbox starts calls.
        capacity: how many of its calls run at once.
        workers: its worker tasks (always made: an Inline call that must wait goes there).
        threads: its kept threads (a sync tool), if any.
        host: its host-loop tasks, if any.
        placement: where it runs, if in other processes.
        needs_context: its calls need a CallContext.
    """

    __slots__ = (
        "capacity",
        "executor",
        "host",
        "needs_context",
        "placement",
        "plan",
        "threads",
        "workers",
    )

    def __init__(
        self, tool: ToolBase[Any, Any], plan: ToolPlan, *, thread_limit: int, host_loop: Any
    ) -> None:
        self.plan = plan
        options = plan.options
        placement = options.placement
        self.placement: Placement | None = (
            placement if placement is not None and not placement.in_process else None
        )
        asks = options.requires_approval is not False
        # a policy's is made when it asks; a stream's chunks reach its caller's handler with it
        self.needs_context = tool.takes_context or asks or tool.streams
        self.threads: Threads | None = None
        self.host: HostTasks | None = None
        limit = options.max_concurrency
        workers = self.workers = WorkerTasks(plan)
        executor: Any
        capacity: float = limit if limit is not None else math.inf
        if self.placement is not None:
            room = self.placement.capacity(tool)
            capacity = room if limit is None else min(room, limit)
            executor = self.workers = WorkerTasks(plan, awaiting(plan))
        elif not tool.is_async:
            capacity = limit or thread_limit
            if not options.inline:
                plan.threads = KeptThreads(tool.name, host_loop)
                self.threads = Threads(plan, plan.threads)
            if asks:
                executor = workers  # its approval is awaited first, in a worker task
            elif options.inline:
                executor = Inline(plan, lambda: self.workers)
            else:
                executor = self.threads
        elif options.loop == "asyncio" and not asks:
            executor = self.host = HostTasks(plan, host_loop)
        elif plan.eager_code is not None and limit is None and not asks:
            executor = Inline(plan, lambda: self.workers)
        else:
            executor = workers
            if (
                options.loop == "any"
                and host_loop is not None
                and limit is None
                and not asks
                and not tool.streams  # its chunks go through trio channels: it runs on trio
            ):
                plan.host_executor = self.host = HostTasks(plan, host_loop)
        in_caller = options.in_caller if self.placement is None else self.placement.in_caller
        if in_caller and (tool.is_async or self.placement is not None) and not asks and not tool.streams:
            body = awaiting(plan) if self.placement is not None else plan.coroutine
            stops = self.placement is not None and self.placement.stops_calls
            plan.in_caller = InCaller(plan, body, stops)
        self.executor = executor
        self.capacity = capacity

    def serve(self, nursery: Any) -> None:
        """An incarnation serves: its worker tasks start in `nursery` (None: it ended)."""
        self.workers.serve(nursery)
        if nursery is not None:
            if self.host is not None:
                self.host.serve()
            if self.plan.in_caller is not None:
                self.plan.in_caller.serve()

    def kill(self) -> None:
        """Calls that run outside the incarnation's nursery (threads, host tasks, callers' tasks)
        end with it."""
        if self.threads is not None:
            self.threads.kill()
        if self.host is not None:
            self.host.kill()
        if self.plan.in_caller is not None:
            self.plan.in_caller.kill()
