"""The call state machine: one object per tool call, from its entry to its one result.

    entry (`_entry`)   prepare: routed, its context, its deadline      QUEUED
       │               begin: bounds + decode, call chain, starting hooks
       │               admitted by its tool's mailbox (`_mailbox`)
       ▼
    executor.start     `start()`: the tool's own deadline armed         RUNNING
       │               the tool runs where its executor runs it
       ▼
    executor reports   `returned` / `raised` / `stopped` / `lost`       DONE
       │               the one outcome mapping (`_plan`): result, restart decision
       │               (a result kept as artifacts that has to wait stays RUNNING, its
       │               keeping the call's executor, until `kept`)
       ▼
    the caller         `report()`: counted, finishing hooks             REPORTED

Every transition is a method of `Call`, and only these change `state`: here, the executor's
side (engine/_running.py), and a failed attempt's way back to QUEUED (`_again`,
engine/_attempts.py). A call is settled (DONE) exactly once: the first `settle` wins, whoever makes it (its executor, its caller's
deadline, its caller's cancellation, a crash, shutdown), and a result that comes after that
is late: dropped, and counted as abandoned work when its code ran on past a grace.

The caller enforces every deadline itself: it waits until `expires`, and a call whose code
ignores its cancellation is answered TIMEOUT a grace after its deadline (`lapse`): the waiter's
side, with what becomes of a result that comes late, is engine/_waiting.py; a failed attempt's
way back to QUEUED under a `Retry` is engine/_attempts.py; the executor's side (its start and
the executor's report, through the one outcome mapping to DONE) is engine/_running.py (`Call`'s
other three halves). The states and the executor and reply protocols: engine/_states.py.
"""

from __future__ import annotations

import contextvars
import logging
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import trio

from ..messages import FailureKind, ToolCall, ToolResult, ToolSuccess
from ..tools import CallContext
from ._attempts import Attempts
from ._outcome import failure
from ._running import Running
from ._states import ABANDON_GRACE, DONE, QUEUED, REPORTED, RUNNING, Executor
from ._waiting import Waiting

if TYPE_CHECKING:
    from ._plan import ToolPlan

__all__ = ["Call"]

log = logging.getLogger("runtime.engine")

_copy_context = contextvars.copy_context
_INF = math.inf
_Task = trio.lowlevel.Task
_reschedule = trio.lowlevel.reschedule


class Call(Waiting, Attempts, Running):
    """One tool call on its way (see the module docstring for its states).

    Attributes:
        call: the ToolCall (made safe to echo when the model sent odd fields).
        ctx: its CallContext, when something needs one (features, the tool, asking).
        context: a copy of the caller's contextvars; the tool's code runs in it.
        plan: what serves its tool (None: not routed to any tool).
        args: the decoded arguments.
        deadline: absolute trio time by which it must end (inf: none); once RUNNING, the
            sooner of the caller's and the tool's own.
        expires: when its waiter looks again (`lapse`).
        limit: the timeout in seconds behind `deadline`, for the TIMEOUT message.
        result: its one result, once DONE.
        executor: what runs it, once RUNNING.
        job: the executor's handle on it while it runs (a cancel scope, a thread job, a task).
        cancelled: its caller gave up, so a stop means CANCELLED, not TIMEOUT.
        reply: who is told when it is settled (a parked trio task, a batch, an asyncio waiter).
        waiter: the cancel scope a single trio caller waits in (its deadline is moved in).
        index: its position in its batch.
        queued: it waits in its tool's mailbox.
        principal: who it runs for (None: nobody said).
        flows: the policies that let it through, each waiting for its outcome (None: none).
        notes: the policies' decisions, kept until the call's span exists.
        shown: the call as observers see it, when a policy redacted some of it.
        asked: the tool the model named, when a policy sent the call to another one.
        metadata: the caller's metadata, kept for a context made later (a policy asks for one).
        attempt: which attempt runs (1 until a `Retry` runs it again).
        until: the caller's deadline and its timeout, while the tool's own shortens `deadline`
            (an attempt after a tool TIMEOUT gets the tool's timeout again, within this).
        gates: the budgets it waits in before its mailbox (`Gate`s), and how many it holds.
        handed: its caller gave up while identical calls wait for its work (`Flight`): the work
            runs on for them, not as an orphan of its caller (`stop_handed` ends it).
        error: what its tool raised in its last attempt, for `Retry(on=ExceptionType)`.
    """

    __slots__ = (
        "args",
        "asked",
        "attempt",
        "call",
        "cancelled",
        "context",
        "ctx",
        "deadline",
        "error",
        "executor",
        "expires",
        "flows",
        "gates",
        "handed",
        "index",
        "interrupted",
        "job",
        "limit",
        "metadata",
        "notes",
        "passed",
        "plan",
        "principal",
        "queued",
        "reply",
        "result",
        "settled_at",
        "shown",
        "state",
        "until",
        "waiter",
    )

    def __init__(
        self,
        call: ToolCall,
        ctx: CallContext | None,
        plan: ToolPlan | None,
        deadline: float,
        limit: float | None,
        reply: Any = None,
        index: int = 0,
        principal: str | None = None,
    ) -> None:
        self.call = call
        self.ctx = ctx
        self.plan = plan
        self.context = _copy_context()
        self.args: Any = None
        self.deadline = deadline
        self.expires = deadline
        self.limit = limit
        self.state = QUEUED
        self.result: ToolResult | None = None
        self.executor: Executor | None = None
        self.job: Any = None
        self.cancelled = False
        self.interrupted = False
        self.settled_at = _INF
        self.reply = reply
        self.waiter: trio.CancelScope | None = None
        self.index = index
        self.queued = False
        self.principal = principal
        self.flows: list[Any] | None = None
        self.notes: list[tuple[str, dict[str, Any]]] | None = None
        self.shown: ToolCall | None = None
        self.asked: str | None = None
        self.metadata: Mapping[str, Any] | None = None
        self.attempt = 1
        self.until: tuple[float, float | None] | None = None
        self.gates: tuple[Any, ...] | None = None
        self.passed = 0
        self.handed = False
        self.error: BaseException | None = None

    # -- settling ----------------------------------------------------------------------

    @property
    def settled(self) -> bool:
        """Answered (DONE or REPORTED)."""
        state = self.state
        return state is DONE or state is REPORTED

    def settle(self, result: ToolResult) -> bool:
        """Answer the call from outside its executor; False (nothing happens) if answered already.

        A call answered while its executor still runs it is an orphan: if its code is still
        running a grace later, it counts as abandoned.
        """
        state = self.state
        if state is DONE or state is REPORTED:
            return False
        if state is RUNNING:
            self.settled_at = now = trio.current_time()
            plan = self.plan
            if plan is not None and not self.handed:
                plan.counters.orphans[self] = now + ABANDON_GRACE
        elif self.queued:
            self.queued = False
            plan = self.plan
            if plan is not None:
                plan.mailbox.left(self)
        self.state = DONE
        self.result = result
        if self.passed:
            if state is RUNNING:  # its work goes on: it leaves its gates when that ends (`_late`)
                for gate in self.gates[: self.passed]:  # type: ignore[index]  # passed > 0: it has gates
                    gate.answered(self)
            else:
                self._leave_gates(result)
        self._notify()
        return True

    def fail(self, kind: FailureKind, message: str, error_type: str | None = None) -> bool:
        """Settle with a failure."""
        return self.settle(failure(self.call, kind, message, error_type))

    def _leave_gates(self, result: ToolResult) -> None:
        """Give back the places it held (budgets, an identical call's run) once its work is over;
        `result` is what the work ended with (its answer, or a late result after it)."""
        gates, passed = self.gates, self.passed
        self.passed = 0
        for gate in gates[:passed]:  # type: ignore[index]  # passed > 0: it has gates
            gate.leave(self, result)

    def _notify(self) -> None:
        reply = self.reply
        if reply is None:
            return
        if type(reply) is _Task:
            self.reply = None
            _reschedule(reply)
        else:
            reply.settled(self)

    # -- the end ------------------------------------------------------------------------

    def transform(self, result: ToolResult) -> None:
        """DONE -> DONE with the result its policies made of the one it settled with."""
        assert self.state is DONE
        self.result = result

    def reported(self) -> bool:
        """DONE -> REPORTED; False if it was reported already (the finishing step runs once)."""
        if self.state is not DONE:
            return False
        self.state = REPORTED
        plan = self.plan
        if plan is not None:
            counters = plan.counters
            counters.calls += 1
            result = self.result
            if type(result) is ToolSuccess:
                counters.succeeded += 1
            else:
                counters.record_failure(result)  # type: ignore[arg-type]  # DONE: a failure
        return True

    def __repr__(self) -> str:
        return f"<Call {self.call.id!r} {self.call.name!r} {self.state.value}>"
