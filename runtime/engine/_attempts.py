"""A call's attempts under its tool's `Retry` (`Call`'s third half, engine/_call.py).

retried   a failure of a kind the Retry takes, with attempts left
_again    RUNNING -> QUEUED for the next attempt, after its backoff, if that ends within the
          caller's deadline (the caller's own deadline and timeout come back: `until`)
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, cast

import trio

from ..messages import ToolFailure
from ._states import QUEUED, CallPart

if TYPE_CHECKING:
    from ._call import Call

__all__ = ["Attempts"]


class Attempts(CallPart):
    """The retrying half of `Call` (its state is the call's)."""

    if not TYPE_CHECKING:
        __slots__ = ()  # the slots are Call's (`CallPart`)

    attempt: int
    until: tuple[float, float | None] | None
    error: BaseException | None

    def retried(self, result: ToolFailure) -> bool:
        """Its `Retry` tries this failure again (its kind, or what raised it), and attempts remain."""
        retry = self.plan.retry if self.plan is not None else None
        return retry is not None and self.attempt < retry.attempts and retry.retries(result.kind, self.error)

    def _again(self, result: ToolFailure) -> bool:
        """RUNNING -> QUEUED for another attempt (`Retry`), if its kind is retried, attempts
        remain and the backoff ends within the caller's deadline. The span hears of each."""
        plan = self.plan
        assert plan is not None
        retry = plan.retry
        if retry is None or self.cancelled or not self.retried(result):
            return False
        if plan.breaker is not None and not plan.breaker.allows_retry():
            return False  # its circuit opened: the model reads this failure, not a storm of attempts
        delay = retry.delay(self.attempt + 1, random.random())
        until = self.until
        deadline, limit = until if until is not None else (self.deadline, self.limit)
        now = trio.current_time()
        if now + delay >= deadline or (self.interrupted and until is None):
            return False  # no time left (or the caller's own deadline stopped it)
        ctx = self.ctx
        if ctx is not None and ctx._observer is not None:
            ctx._observer.event(
                ctx,
                "tool.retry",
                {"tool.retry.attempt": self.attempt, "tool.retry.outcome": result.kind.value},
            )
        plan.counters.retries += 1
        self.attempt += 1
        self.error = None
        self.state = QUEUED
        self.interrupted = False
        self.deadline = self.expires = deadline
        self.limit = limit
        waiter = self.waiter
        if waiter is not None:
            waiter.deadline = deadline  # its waiter looks again at the caller's deadline, no sooner
        plan.retry_later(delay, cast("Call", self))
        return True
