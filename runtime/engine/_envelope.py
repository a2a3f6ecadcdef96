"""The envelope a call travels in, and its one-shot reply slot.

An envelope is settled exactly once: the first `settle` wins and later ones are ignored.
That single rule is what guarantees one result per call whoever finishes it (the worker,
a deadline on the caller's side, a crash, shutdown).

The caller enforces every deadline itself: it waits on the reply slot until `expires`, and
a tool that ignores its cancellation is answered TIMEOUT from the caller's side a short
grace after its deadline (its work is then "abandoned" and counted).
"""

from __future__ import annotations

import collections
import contextvars
import math
from typing import Any

import trio

from ..messages import FailureKind, ToolCall, ToolResult
from ..tools import CallContext
from ._outcome import failure
from ._stats import ToolCounters

__all__ = [
    "ABANDON_GRACE",
    "DONE",
    "QUEUED",
    "RUNNING",
    "Batch",
    "BatchEnvelope",
    "CallEnvelope",
    "Envelope",
    "HostEnvelope",
]

QUEUED, RUNNING, DONE = 0, 1, 2

ABANDON_GRACE = 0.05
"""Seconds a running call gets to end after its cancellation before its caller answers it."""


class Envelope:
    """One call on its way: the call, its context, its deadline and its reply slot.

    Attributes:
        deadline: absolute trio time by which the call must end (inf: none).
        limit: the timeout in seconds behind `deadline`, for the TIMEOUT message.
        expires: when the caller stops waiting for the worker and looks again (`lapse`).
        state: QUEUED, RUNNING or DONE.
        scope: the worker's cancel scope while RUNNING.
        cancelled: the caller gave up (cancellation), so a cancel means CANCELLED.
        counters: the counters of the tool it was routed to (None: not routed).
        settled_at: trio time of the settle (for calls answered while their work runs on).
    """

    __slots__ = (
        "call",
        "cancelled",
        "context",
        "counters",
        "ctx",
        "deadline",
        "expires",
        "interrupted",
        "limit",
        "reported",
        "result",
        "scope",
        "settled_at",
        "state",
    )

    call: ToolCall
    ctx: CallContext | None
    context: contextvars.Context  # a copy of the caller's contextvars: the tool's code runs in it
    deadline: float
    expires: float
    limit: float | None
    counters: ToolCounters | None
    result: ToolResult | None
    state: int
    scope: trio.CancelScope | None
    cancelled: bool
    interrupted: bool  # the caller cancelled the worker's scope after a lapse
    reported: bool  # finishing hooks ran (the caller's side)
    settled_at: float

    def settle(self, result: ToolResult) -> bool:
        """Answer the call; False (and nothing happens) if it was answered already."""
        if self.state == DONE:
            return False
        running = self.state == RUNNING
        self.state = DONE
        self.result = result
        if running and self.scope is not None:  # answered while its worker still runs it
            self.settled_at = trio.current_time()
            if self.counters is not None:  # abandoned if it still runs a grace from now
                self.counters.orphans[self] = self.settled_at + ABANDON_GRACE
        self._notify()
        return True

    def _notify(self) -> None:
        raise NotImplementedError

    def fail(self, kind: FailureKind, message: str, error_type: str | None = None) -> bool:
        """Settle with a failure."""
        return self.settle(failure(self.call, kind, message, error_type))

    def expire_at(self, when: float) -> None:
        """The worker armed a deadline: the caller must look again by `when` at the latest."""
        if when < self.expires:
            self.expires = when

    def abandon(self, kind: FailureKind, message: str) -> None:
        """The caller stops waiting: settle a queued call now, cancel a running one.

        A running call is settled by its worker once the cancellation reaches it, or by
        `lapse` after `ABANDON_GRACE` if it never does.
        """
        if self.state == QUEUED:
            self.fail(kind, message)
        elif self.state == RUNNING:
            self.cancelled = kind is FailureKind.CANCELLED
            if self.scope is not None:
                self.scope.cancel()

    def lapse(self) -> None:
        """`expires` passed and the call is not settled: cancel it, or answer it if cancelled already."""
        if self.state == QUEUED:
            self.fail(FailureKind.TIMEOUT, self.timeout_message())
        elif self.state == RUNNING:
            if not self.interrupted:
                self.interrupted = True
                if self.scope is not None:
                    self.scope.cancel()
                self.expires = trio.current_time() + ABANDON_GRACE
            else:  # cancelled a grace ago and still running: it ignores cancellation
                self.give_up(
                    FailureKind.TIMEOUT,
                    f"{self.timeout_message()}; it did not stop when cancelled and was abandoned",
                )

    def give_up(self, kind: FailureKind, message: str) -> None:
        """Answer a running call whose work did not stop when cancelled: it is abandoned (counted)."""
        if self.ctx is not None:
            self.ctx.abandoned = True
        if self.fail(kind, message) and self.counters is not None and self in self.counters.orphans:
            # Known to ignore cancellation already: counted as abandoned from now on.
            self.counters.orphans[self] = self.settled_at

    def timeout_message(self) -> str:
        limit = f"{self.limit:g}s" if self.limit is not None else "its deadline"
        return f"tool {self.call.name!r} did not finish within {limit}"

    def __repr__(self) -> str:
        state = ("queued", "running", "done")[self.state]
        return f"<{type(self).__name__} {self.call.id!r} {self.call.name!r} {state}>"


class CallEnvelope(Envelope):
    """The envelope of a single `Runtime.call`: its caller parks on it until it is settled.

    The reply slot is the parked task itself: `settle` reschedules it directly, with no
    Event or parking lot in between (about a microsecond less per call, and no Event to
    allocate). A cancellation while parked unparks it at once.

    Attributes:
        waiter: the caller's cancel scope while it waits (the worker moves its deadline in).
    """

    __slots__ = ("_parked", "waiter")

    def __init__(
        self, call: ToolCall, ctx: CallContext | None, deadline: float = math.inf, limit: float | None = None
    ) -> None:
        # Each subclass sets every slot itself (no shared __init__): one call less per call.
        self.call = call
        self.ctx = ctx
        self.context = contextvars.copy_context()
        self.deadline = deadline
        self.expires = deadline
        self.limit = limit
        self.counters = None
        self.result = None
        self.state = QUEUED
        self.scope = None
        self.cancelled = False
        self.interrupted = False
        self.reported = False
        self.settled_at = math.inf
        self._parked: trio.lowlevel.Task | None = None
        self.waiter: trio.CancelScope | None = None

    def _notify(self) -> None:
        task = self._parked
        if task is not None:
            self._parked = None
            trio.lowlevel.reschedule(task)

    async def wait(self) -> None:
        """Park the calling task until the envelope is settled (a checkpoint either way)."""
        if self.state == DONE:
            await trio.lowlevel.checkpoint()
            return
        self._parked = trio.lowlevel.current_task()
        await trio.lowlevel.wait_task_rescheduled(self._abort)

    def _abort(self, _: object) -> trio.lowlevel.Abort:
        self._parked = None
        return trio.lowlevel.Abort.SUCCEEDED

    def expire_at(self, when: float) -> None:
        if when < self.expires:
            self.expires = when
            waiter = self.waiter
            if waiter is not None and when < waiter.deadline:
                waiter.deadline = when


class Batch:
    """Where the envelopes of one `call_many` / `as_completed` report, in completion order."""

    __slots__ = ("_wakeup", "done", "expires", "pending", "timed", "waiter")

    def __init__(self, pending: int, deadline: float) -> None:
        self.timed = deadline != math.inf  # or one of its tools has a timeout (set by the runtime)
        self.pending = pending
        self.done: collections.deque[Envelope] = collections.deque()
        self._wakeup = trio.Event()
        self.expires = deadline  # the earliest `expires` of its envelopes (a lower bound)
        self.waiter: trio.CancelScope | None = None

    def settled(self, env: Envelope) -> None:
        self.done.append(env)
        self.pending -= 1
        self._wakeup.set()

    def expire_at(self, when: float) -> None:
        if when < self.expires:
            self.expires = when
            waiter = self.waiter
            if waiter is not None and when < waiter.deadline:
                waiter.deadline = when

    async def wait(self) -> None:
        """Return when at least one settled envelope is waiting in `done`, or at `expires`."""
        if not self.timed:  # no deadline anywhere in the batch: no scope to enter
            while not self.done:
                self._wakeup = trio.Event()
                await self._wakeup.wait()
            return
        with trio.CancelScope(deadline=self.expires) as self.waiter:
            while not self.done:
                self._wakeup = trio.Event()
                await self._wakeup.wait()
        self.waiter = None


class BatchEnvelope(Envelope):
    """The envelope of one call of a batch: it reports to the batch."""

    __slots__ = ("batch", "index")

    def __init__(
        self,
        call: ToolCall,
        ctx: CallContext | None,
        deadline: float,
        limit: float | None,
        batch: Batch,
        index: int,
    ) -> None:
        # Each subclass sets every slot itself (no shared __init__): one call less per call.
        self.call = call
        self.ctx = ctx
        self.context = contextvars.copy_context()
        self.deadline = deadline
        self.expires = deadline
        self.limit = limit
        self.counters = None
        self.result = None
        self.state = QUEUED
        self.scope = None
        self.cancelled = False
        self.interrupted = False
        self.reported = False
        self.settled_at = math.inf
        self.batch = batch
        self.index = index

    def _notify(self) -> None:
        self.batch.settled(self)

    def expire_at(self, when: float) -> None:
        if when < self.expires:
            self.expires = when
            self.batch.expire_at(when)


class HostEnvelope(CallEnvelope):
    """The envelope of a sync tool's call made from the host asyncio loop (`Runtime.start_on_host`).

    Its tool runs in one of its threads and reports to the loop, not to trio; settling it
    resolves `future` (on the loop's thread, which is the guest run's). No trio task parks
    on it.

    Attributes:
        future: an asyncio future, done once the envelope is settled.
        job: the thread's job while it runs (what `WorkerPool.drop_host` drops).
        pool: the pool serving it.
    """

    __slots__ = ("future", "job", "pool")

    def __init__(
        self, call: ToolCall, ctx: CallContext | None, deadline: float, limit: float | None, future: Any
    ) -> None:
        super().__init__(call, ctx, deadline, limit)  # not a hot path: a thread hop follows
        self.future = future
        self.job: Any = None
        self.pool: Any = None

    def _notify(self) -> None:
        if not self.future.done():
            self.future.set_result(None)
        pool = self.pool
        if pool is not None:
            pool.host_settled()
