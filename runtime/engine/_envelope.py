"""The envelope a call travels in, its one-shot reply slot, and the failure texts.

An envelope is settled exactly once: the first `settle` wins and later ones are ignored.
That single rule is what guarantees one result per call whoever finishes it (the worker,
a deadline on the caller's side, a crash, shutdown).
"""

from __future__ import annotations

import collections
import math
from typing import TYPE_CHECKING

import trio

from ..messages import FailureKind, ToolCall, ToolFailure, ToolResult
from ..tools import CallContext

if TYPE_CHECKING:
    from ._actor import ToolActor

__all__ = ["Batch", "Envelope", "describe_error", "failure", "truncate"]

QUEUED, RUNNING, DONE = 0, 1, 2


def failure(call: ToolCall, kind: FailureKind, message: str, error_type: str | None = None) -> ToolFailure:
    """A failure answering `call`."""
    return ToolFailure(call_id=call.id, tool=call.name, kind=kind, message=message, error_type=error_type)


class Batch:
    """Where the envelopes of one `call_many` / `as_completed` report, in completion order."""

    __slots__ = ("_wakeup", "done", "pending")

    def __init__(self, pending: int) -> None:
        self.pending = pending
        self.done: collections.deque[Envelope] = collections.deque()
        self._wakeup = trio.Event()

    def settled(self, env: Envelope) -> None:
        self.done.append(env)
        self.pending -= 1
        self._wakeup.set()

    async def wait(self) -> None:
        """Return when at least one settled envelope is waiting in `done`."""
        while not self.done:
            self._wakeup = trio.Event()
            await self._wakeup.wait()


class Envelope:
    """One call on its way: the call, its context, its deadline and its reply slot.

    Attributes:
        deadline: absolute trio time by which the call must end (inf: none).
        limit: the timeout in seconds behind `deadline`, for the TIMEOUT message.
        state: QUEUED, RUNNING or DONE.
        scope: the worker's cancel scope while RUNNING.
        cancelled: the caller gave up (cancellation), so a cancel means CANCELLED.
    """

    __slots__ = (
        "_batch",
        "actor",
        "call",
        "cancelled",
        "ctx",
        "deadline",
        "event",
        "index",
        "limit",
        "reported",
        "result",
        "scope",
        "state",
    )

    def __init__(
        self,
        call: ToolCall,
        ctx: CallContext | None,
        deadline: float = math.inf,
        limit: float | None = None,
        batch: Batch | None = None,
        index: int = 0,
    ) -> None:
        self.call = call
        self.ctx = ctx
        self.deadline = deadline
        self.limit = limit
        self.actor: ToolActor | None = None
        self.result: ToolResult | None = None
        self.state = QUEUED
        self.scope: trio.CancelScope | None = None
        self.cancelled = False
        self.reported = False  # finishing hooks ran (the caller's side)
        self.index = index
        self._batch = batch
        self.event: trio.Event | None = None if batch is not None else trio.Event()

    def settle(self, result: ToolResult) -> bool:
        """Answer the call; False (and nothing happens) if it was answered already."""
        if self.state == DONE:
            return False
        self.state = DONE
        self.result = result
        if self._batch is not None:
            self._batch.settled(self)
        else:
            assert self.event is not None
            self.event.set()
        return True

    def fail(self, kind: FailureKind, message: str, error_type: str | None = None) -> bool:
        """Settle with a failure."""
        return self.settle(failure(self.call, kind, message, error_type))

    async def wait(self) -> None:
        """Wait until settled (single calls only)."""
        assert self.event is not None
        await self.event.wait()

    def abandon(self, kind: FailureKind, message: str) -> None:
        """The caller stops waiting: settle a queued call now, cancel a running one.

        A running call is settled by its worker once the cancellation reaches it.
        """
        if self.state == QUEUED:
            self.fail(kind, message)
        elif self.state == RUNNING:
            self.cancelled = kind is FailureKind.CANCELLED
            if self.scope is not None:
                self.scope.cancel()

    def timeout_message(self) -> str:
        limit = f"{self.limit:g}s" if self.limit is not None else "its deadline"
        return f"tool {self.call.name!r} did not finish within {limit}"

    def __repr__(self) -> str:
        state = ("queued", "running", "done")[self.state]
        return f"<Envelope {self.call.id!r} {self.call.name!r} {state}>"


def describe_error(exc: BaseException) -> tuple[str, str]:
    """(qualified type, "Type: message") of an exception, never a traceback."""
    cls = type(exc)
    qualified = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    text = str(exc)
    return qualified, f"{cls.__name__}: {text}" if text else cls.__name__


def truncate(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, with a marker saying so."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[truncated: the result had {len(text)} characters; showing the first {limit}]"
