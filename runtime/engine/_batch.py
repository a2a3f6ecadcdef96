"""Where the calls of one `call_many` / `as_completed` report, in the order they finish.

One trio task waits for the whole batch: the calls settle into `done`, and the task wakes at
the earliest `expires` among them to lapse the ones due (their deadlines, or the grace after
one). A thousand calls that finish together cost one wakeup of the waiting task.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Sequence

import trio

from ._call import Call
from ._states import DONE, REPORTED

__all__ = ["Batch", "lapse_due"]


class Batch:
    """The reply slot shared by a batch's calls."""

    __slots__ = ("_wakeup", "done", "expires", "timed", "waiter")

    def __init__(self, deadline: float) -> None:
        self.timed = deadline != math.inf  # or one of its tools has a timeout (set by the entry)
        self.done: collections.deque[Call] = collections.deque()
        self._wakeup = trio.Event()
        self.expires = deadline  # the earliest `expires` of its calls (a lower bound)
        self.waiter: trio.CancelScope | None = None

    def settled(self, call: Call) -> None:
        done = self.done
        done.append(call)
        if len(done) == 1:  # the waiter parks only with none done: the first one wakes it
            self._wakeup.set()

    def expire_at(self, when: float) -> None:
        if when < self.expires:
            self.expires = when
            waiter = self.waiter
            if waiter is not None and when < waiter.deadline:
                waiter.deadline = when

    async def wait(self) -> None:
        """Return when at least one settled call is waiting in `done`, or at `expires`."""
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


def lapse_due(calls: Sequence[Call], now: float) -> float:
    """Lapse every call of a batch whose `expires` has come; returns the next `expires`."""
    soonest = math.inf
    for call in calls:
        state = call.state
        if state is DONE or state is REPORTED:
            continue
        if call.expires <= now:
            call.lapse()
        state = call.state
        if state is not DONE and state is not REPORTED and call.expires < soonest:
            soonest = call.expires
    return soonest
