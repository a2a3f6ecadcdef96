"""A call's states and what the state machine (engine/_call.py) talks to: the executor that runs
a call and the reply that is told when it is settled."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import trio

    from ..tools import CallContext
    from ._call import Call
    from ._plan import ToolPlan

__all__ = [
    "ABANDON_GRACE",
    "CANCELLED_MESSAGE",
    "DONE",
    "QUEUED",
    "REPORTED",
    "RUNNING",
    "CallPart",
    "CallState",
    "Executor",
    "Reply",
]

ABANDON_GRACE = 0.05
"""Seconds a running call gets to end after its cancellation before its caller answers it."""

CANCELLED_MESSAGE = "the call was cancelled by its caller"


class CallState(enum.Enum):
    """Where a call is: QUEUED (not running yet), RUNNING, DONE (answered), REPORTED (counted)."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    REPORTED = "reported"


QUEUED = CallState.QUEUED
RUNNING = CallState.RUNNING
DONE = CallState.DONE
REPORTED = CallState.REPORTED


class Executor(Protocol):
    """Where a tool's calls run. It starts a call, cancels it on request, and reports its end
    through the call (`returned`, `raised`, `stopped`, `lost`); it knows nothing of failure
    kinds, features, spans, policies or supervision. Each frees its mailbox slot itself, when
    what the call held (a worker task, a thread, a process) is free again."""

    def start(self, call: Call) -> None:
        """Run `call` (already admitted); `call.start()` says whether it still should."""

    def cancel(self, call: Call) -> None:
        """Stop a running `call` (its deadline, its caller); it reports `stopped` when it has."""

    stuck: int
    """Slots held by work that was answered but could not be stopped (blocked threads)."""

    holds: bool
    """A started call holds a slot until the executor frees it (False: it ends within `start`)."""


class Reply(Protocol):
    """Who waits for a call other than one trio task: a batch, an asyncio future."""

    def settled(self, call: Call) -> None: ...

    def expire_at(self, when: float) -> None: ...


class CallPart:
    """What each half of `Call` (`Waiting`, `Attempts`) reads of the call's own state, declared
    once for mypy; the slots are `Call`'s alone, so no call has a `__dict__`."""

    if not TYPE_CHECKING:
        __slots__ = ()

    ctx: CallContext | None
    plan: ToolPlan | None
    state: CallState
    deadline: float
    expires: float
    limit: float | None
    waiter: trio.CancelScope | None
    cancelled: bool
    interrupted: bool
