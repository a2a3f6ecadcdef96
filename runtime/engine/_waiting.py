"""The waiter's side of a call (`Call`'s other half, engine/_call.py): its caller enforces the
deadline and gives up.

    expire_at   the waiter must look again by then (a tool's own deadline, a grace)
    wait        park the calling trio task until the call is settled
    lapse       `expires` passed: a queued call times out; a running one is cancelled, and
                answered a grace later if its code ignores that (abandoned, counted)
    abandon     the caller stops waiting (its cancellation, shutdown); identical calls waiting
                for its work keep it running (`handed`) until they leave too (`stop_handed`)
    give_up     answer a running call whose code did not stop when cancelled
    _late       a result for a call answered already: dropped, its gates left, and counted as
                abandoned work if it came more than a grace after the answer

Every change of state goes through `Call.fail` / `settle` and the executor's `cancel`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio

from ..messages import FailureKind, ToolCall, ToolFailure, ToolResult
from ._outcome import failure
from ._states import ABANDON_GRACE, DONE, QUEUED, RUNNING, CallPart

__all__ = ["Waiting"]

log = logging.getLogger("runtime.engine")


class Waiting(CallPart):
    """The waiter's half of `Call` (its state is the call's)."""

    if not TYPE_CHECKING:
        __slots__ = ()  # the slots are Call's (`CallPart`)

    call: ToolCall
    executor: Any  # its Executor, which takes the Call this is part of
    reply: Any
    handed: bool
    passed: int
    gates: tuple[Any, ...] | None
    settled_at: float

    def fail(self, kind: FailureKind, message: str, error_type: str | None = None) -> bool:
        raise NotImplementedError  # the call's (`Call.fail`)

    def _leave_gates(self, result: ToolResult) -> None:
        raise NotImplementedError  # the call's (`Call._leave_gates`)

    def expire_at(self, when: float) -> None:
        """The waiter must look again by `when` at the latest."""
        if when < self.expires:
            self.expires = when
            waiter = self.waiter
            if waiter is not None:
                if when < waiter.deadline:
                    waiter.deadline = when
            else:
                reply = self.reply
                if reply is not None and type(reply) is not trio.lowlevel.Task:
                    reply.expire_at(when)

    async def wait(self) -> None:
        """Park the calling trio task until the call is settled (a checkpoint either way)."""
        if self.state is DONE:
            await trio.lowlevel.checkpoint()
            return
        self.reply = trio.lowlevel.current_task()
        await trio.lowlevel.wait_task_rescheduled(self._abort)

    def _abort(self, _: object) -> trio.lowlevel.Abort:
        self.reply = None
        return trio.lowlevel.Abort.SUCCEEDED

    def lapse(self) -> None:
        """`expires` passed and the call is not answered: a queued call times out; a running one
        is cancelled, and answered a grace later if it ignores that (abandoned)."""
        state = self.state
        if state is QUEUED:
            self.fail(FailureKind.TIMEOUT, self.timeout_message())
        elif state is RUNNING:
            if not self.interrupted:
                self.interrupted = True
                self.expires = trio.current_time() + ABANDON_GRACE  # the waiter reads it again
                executor = self.executor
                assert executor is not None
                executor.cancel(self)
            else:
                self.give_up(
                    FailureKind.TIMEOUT,
                    f"{self.timeout_message()}; it did not stop when cancelled and was abandoned",
                )

    def abandon(self, kind: FailureKind, message: str) -> None:
        """The caller stops waiting (its cancellation, shutdown): a queued call is answered now,
        a running one cancelled (its later result is dropped)."""
        state = self.state
        if state is QUEUED:
            self.fail(kind, message)
        elif state is RUNNING:
            self.cancelled = cancelled = kind is FailureKind.CANCELLED
            if cancelled and self.passed and any(gate.keeps(self) for gate in self.gates[: self.passed]):  # type: ignore[index]  # passed > 0: it has gates
                self.handed = True  # identical calls wait for this work: it runs on for them,
                self.fail(kind, message)  # and its caller, who left, is answered now
                return
            self.interrupted = True
            executor = self.executor
            assert executor is not None
            executor.cancel(self)

    def stop_handed(self) -> None:
        """The calls its work ran on for have all ended too: cancel it now (as `abandon` would
        have), its late result dropped."""
        if self.handed and not self.interrupted:
            self.handed = False
            self.interrupted = True
            plan = self.plan
            if plan is not None:  # an orphan now: counted as abandoned if it runs on past a grace
                plan.counters.orphans[self] = trio.current_time() + ABANDON_GRACE
            executor = self.executor
            assert executor is not None
            executor.cancel(self)

    def give_up(self, kind: FailureKind, message: str) -> None:
        """Answer a running call whose code did not stop when cancelled: abandoned (counted)."""
        if self.ctx is not None:
            self.ctx.abandoned = True
        plan = self.plan
        if self.handed:  # answered already; the calls its work went on for hear this now
            self.handed = False
            if plan is not None:
                plan.counters.orphans[self] = self.settled_at
            result = failure(self.call, kind, message)
            for gate in self.gates[: self.passed]:  # type: ignore[index]  # handed: it has gates
                gate.given_up(self, result)
            return
        if self.fail(kind, message) and plan is not None and self in plan.counters.orphans:
            plan.counters.orphans[self] = self.settled_at  # known to ignore cancellation already

    def timeout_message(self) -> str:
        limit = f"{self.limit:g}s" if self.limit is not None else "its deadline"
        return f"tool {self.call.name!r} did not finish within {limit}"

    def _late(self, result: ToolResult) -> None:
        """A result for a call answered already (its caller gave up, a deadline lapsed): dropped.
        Its work is over now: the places it held in its gates are given back."""
        plan = self.plan
        assert plan is not None
        self.handed = False  # its work is over: nothing left to stop
        if self.passed:
            self._leave_gates(result)
        since = plan.counters.orphans.pop(self, None)
        if since is None:
            return
        if type(result) is ToolFailure and result.kind in _STOPPED:
            return  # it ended through its cancellation (however late the loop let it): not abandoned
        now = trio.current_time()
        if now >= since:
            plan.counters.abandoned_late += 1
            log.warning(
                "tool %r: call %s ended %.3gs after it was answered (it ignored cancellation); "
                "its result (%s) is dropped",
                plan.name,
                self.call.id,
                now - self.settled_at,
                "success" if result.ok else result.kind.value,  # type: ignore[union-attr]
            )


_STOPPED = (FailureKind.TIMEOUT, FailureKind.CANCELLED)
