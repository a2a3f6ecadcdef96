"""The executor's side of a call (`Call`'s running half, engine/_call.py): its start and the
executor's report of how it ended.

    start       QUEUED -> RUNNING on an executor: a breaker that opened meanwhile refuses it;
                the tool's own deadline is armed (the sooner of the caller's and the tool's)
    returned    the tool returned a value: the plan shapes its result (or keeps it whole: `kept`)
    raised      the tool raised: the one outcome mapping (`ToolPlan.failure`)
    stopped     it stopped because it was asked to: CANCELLED for its caller, else TIMEOUT
    lost        the executor went away under it: UNAVAILABLE
    _end        RUNNING -> DONE (or QUEUED again for a `Retry`, or a late result if answered)

The states, and the executor's protocol these serve: engine/_states.py.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import trio

from ..messages import FailureKind, ToolCall, ToolFailure, ToolResult
from ._outcome import failure
from ._states import CANCELLED_MESSAGE, DONE, QUEUED, RUNNING, CallPart, Executor

__all__ = ["Running"]

_INF = math.inf
_Task = trio.lowlevel.Task
_reschedule = trio.lowlevel.reschedule


class Running(CallPart):
    """The executor's half of `Call` (its state is the call's)."""

    if not TYPE_CHECKING:
        __slots__ = ()  # the slots are Call's (`CallPart`)

    call: ToolCall
    result: ToolResult | None
    executor: Executor | None
    job: Any
    reply: Any
    handed: bool
    passed: int
    until: tuple[float, float | None] | None
    error: BaseException | None

    if TYPE_CHECKING:  # the other halves' (Call, Waiting, Attempts): declared for mypy only

        def fail(self, kind: FailureKind, message: str, error_type: str | None = None) -> bool: ...
        def expire_at(self, when: float) -> None: ...
        def timeout_message(self) -> str: ...
        def _again(self, result: ToolFailure) -> bool: ...
        def _leave_gates(self, result: ToolResult) -> None: ...
        def _late(self, result: ToolResult) -> None: ...

    def start(self, executor: Executor) -> bool:
        """QUEUED -> RUNNING, on `executor`: arm the deadline. False: do not run it (it was
        answered while it waited, or its deadline passed before it could start: TIMEOUT)."""
        if self.state is not QUEUED:
            return False
        plan = self.plan
        assert plan is not None
        breaker = plan.breaker
        if breaker is not None and breaker.state == "open":  # it opened while this call waited
            refused = breaker.refusal(trio.current_time(), self)
            if refused is not None:
                self.fail(FailureKind.UNAVAILABLE, refused)
                return False
        deadline = self.deadline
        if deadline != _INF or not plan.untimed:  # a deadline to arm
            own = plan.timeout
            if own is None and deadline == _INF:
                own = plan.default_timeout
            now = trio.current_time()
            if deadline <= now:
                self.fail(FailureKind.TIMEOUT, self.timeout_message())
                return False
            if own is not None and now + own < deadline:
                if plan.retry is not None:
                    self.until = (deadline, self.limit)
                deadline = self.deadline = now + own
                self.limit = own
            self.expire_at(deadline)  # the waiter looks again then, should the tool ignore its cancel
            if self.ctx is not None:
                self.ctx.deadline = deadline
        self.state = RUNNING
        self.executor = executor
        plan.counters.in_flight += 1
        plan.running.add(self)  # type: ignore[arg-type]  # self is the Call
        return True

    def returned(self, value: Any) -> None:
        """The tool returned `value`."""
        plan = self.plan
        assert plan is not None
        result = plan.shape(self, value)  # type: ignore[arg-type]  # self is the Call
        if result is not None:  # None: its result is being kept whole (`kept` ends it)
            self._end(result)

    def kept(self, result: ToolResult) -> None:
        """Its result was kept as artifacts (a keeping that had to wait: `_artifacts.Keeper`)."""
        self._end(result)

    def raised(self, exc: BaseException) -> None:
        """The tool raised `exc` (not a cancellation of this call)."""
        plan = self.plan
        assert plan is not None
        self.error = exc  # for its Retry's `on` (an exception type, a predicate)
        self._end(plan.failure(self, exc))  # type: ignore[arg-type]  # self is the Call

    def stopped(self) -> None:
        """The call stopped because it was asked to (its deadline, its caller)."""
        self._end(self.stop_result())

    def lost(self) -> None:
        """The executor went away under the call (its tool crashed, shutdown, a dead worker)."""
        plan = self.plan
        assert plan is not None
        self._end(failure(self.call, FailureKind.UNAVAILABLE, plan.unavailable_message()))

    def stop_result(self) -> ToolFailure:
        if self.cancelled and not self.handed:  # a handed-over run that stops met its deadline
            return failure(self.call, FailureKind.CANCELLED, CANCELLED_MESSAGE)
        return failure(self.call, FailureKind.TIMEOUT, self.timeout_message())

    def _end(self, result: ToolResult) -> None:
        """RUNNING -> DONE by the executor's report (or a late result, if answered already)."""
        plan = self.plan
        assert plan is not None
        plan.counters.in_flight -= 1
        plan.running.discard(self)
        self.job = None
        if self.state is RUNNING:
            if plan.breaker is not None:
                plan.breaker.heard(self, result)  # every attempt's outcome, retries included
            if plan.retry is not None and type(result) is ToolFailure and self._again(result):
                pass  # it waits for its next attempt
            else:
                self.state = DONE
                self.result = result
                if self.passed:
                    self._leave_gates(result)
                reply = self.reply
                if reply is not None:  # `_notify`, on the hot path
                    if type(reply) is _Task:
                        self.reply = None
                        _reschedule(reply)
                    else:
                        reply.settled(self)
        else:
            self._late(result)
        if plan.draining and not plan.running:
            plan.drained()
