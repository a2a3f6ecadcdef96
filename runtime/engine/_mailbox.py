"""A tool's mailbox: who runs now, who waits, who is refused. The one admission point of its calls.

Every call of a tool, whoever makes it (a trio task, asyncio code, a batch) and wherever the
tool runs (a worker task, its own threads, the host loop, another process), is admitted here:

    a slot free (running < capacity) and nobody waiting  -> its executor starts it now
    else, fewer than `size` waiting                      -> it waits its turn, in order (or
                                                            fairly across principals: `fair=True`)
    else (full)                                          -> OVERLOADED (`on_full="reject"`),
                                                            or its caller waits for room (in
                                                            order, or fairly too: `fair=True`)
A slot is held until the executor frees it: a call whose thread is blocked keeps its slot even
after it was answered, so a tool whose every thread is stuck takes no more work than it can do.

Between incarnations (restarting) calls wait here and start when the tool serves again; a
tool that is down or stopping refuses them (UNAVAILABLE).
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable
from typing import Any

import trio

from ..messages import FailureKind
from ._call import QUEUED, Call, Executor
from ._fair import FairQueue

__all__ = ["Mailbox"]


class Mailbox:
    """Admission for one tool actor (all its incarnations).

    Args:
        name: the tool's name (for messages).
        capacity: calls that may run at once.
        size: calls that may wait (`mailbox_size`).
        reject_when_full: OVERLOADED instead of backpressure when `size` are waiting.
        executor: what starts its calls.
        why_closed: what a refused call hears (down, shutting down).
        fair: the principals' weights when waiting calls are served fairly across principals
            (deficit round robin; `RuntimeOptions.fair`); None: in order of arrival.
    """

    __slots__ = (
        "_dead",
        "_fair",
        "_queue",
        "_refused",
        "_room",
        "_serving",
        "_why_closed",
        "_withdrawn",
        "capacity",
        "closed",
        "executor",
        "name",
        "reject_when_full",
        "running",
        "size",
    )

    def __init__(
        self,
        name: str,
        capacity: float,
        size: int,
        reject_when_full: bool,
        executor: Executor,
        why_closed: Callable[[], str],
        fair: dict[str, float] | None = None,
    ) -> None:
        self.name = name
        self.capacity = capacity
        self.size = size
        self.reject_when_full = reject_when_full
        self.executor = executor
        self._why_closed = why_closed
        self.running = 0
        self._fair = fair
        self._queue: collections.deque[Call[Any]] | FairQueue[Call[Any]] = self._empty()
        self._dead = 0  # calls in `_queue` answered while they waited (skipped when reached)
        # callers waiting for room; fair: one lane per principal, so that one principal's burst
        # waiting for room does not wait in front of everyone else's calls
        self._room: collections.deque[_RoomWaiter] | FairQueue[_RoomWaiter] = self._no_room_waiters()
        self._withdrawn = 0  # waiters in `_room` that gave up (skipped when reached)
        self._refused: str | None = None  # the principal of the call `admit` last found no room for
        self._serving = False
        self.closed = False

    def _empty(self) -> collections.deque[Call[Any]] | FairQueue[Call[Any]]:
        if self._fair is None:
            return collections.deque()
        return FairQueue(_principal, self._fair)

    def _no_room_waiters(self) -> collections.deque[_RoomWaiter] | FairQueue[_RoomWaiter]:
        if self._fair is None:
            return collections.deque()
        return FairQueue(_principal, self._fair)

    @property
    def queued(self) -> int:
        """Calls waiting now."""
        return len(self._queue) - self._dead

    def admit(self, call: Call[Any], executor: Executor | None = None) -> bool:
        """Start `call`, queue it, or settle it (refused); False: full, its caller must wait for room.

        `executor`: where it runs, if not the tool's own (an asyncio caller's `loop="any"` tool).
        """
        if self.closed:
            call.fail(FailureKind.UNAVAILABLE, self._why_closed())
            return True
        runner = executor if executor is not None else self.executor
        stuck = runner.stuck
        if stuck and stuck >= self.capacity:  # every slot is held by work that cannot be stopped
            call.fail(FailureKind.OVERLOADED, _all_stuck(self.name, stuck))
            return True
        if self._serving and self.running < self.capacity and len(self._queue) == self._dead:
            if runner.holds:
                self.running += 1
            if self._room:  # room is left behind it: the next waiter may come (a woken one came)
                self._wake_room()
            runner.start(call)
            return True
        if len(self._queue) - self._dead >= self.size:
            if not self.reject_when_full:
                self._refused = call.principal  # its caller waits for room next, in this lane
                return False
            call.fail(
                FailureKind.OVERLOADED,
                f"tool {self.name!r} is overloaded ({self.size} calls waiting); try again later",
            )
            return True
        call.executor = runner
        call.queued = True
        self._queue.append(call)
        if self._room:
            self._wake_room()
        return True

    def startable(self) -> bool:
        """A call admitted now would start at once (a free slot, nobody waiting)."""
        return self._serving and self.running < self.capacity and len(self._queue) == self._dead

    async def wait_room(self) -> None:
        """Wait until the call `admit` just found no room for may be queued again (backpressure):
        in order of arrival, or, fair, in its principal's turn."""
        task = trio.lowlevel.current_task()
        waiter = self._wait(lambda: trio.lowlevel.reschedule(task))

        def abort(_: object) -> trio.lowlevel.Abort:
            self._withdraw(waiter)
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    def wait_room_soon(self, callback: Callable[[], Any]) -> Callable[[], None]:
        """Call `callback` once the call `admit` just found no room for may be queued again (for
        waiters that are not trio tasks); returns a function that withdraws it."""
        waiter = self._wait(callback)
        return functools.partial(self._withdraw, waiter)

    def _wait(self, wake: Callable[[], Any]) -> _RoomWaiter:
        waiter = _RoomWaiter(self._refused, wake)
        self._room.append(waiter)
        return waiter

    def _withdraw(self, waiter: _RoomWaiter) -> None:
        """A waiter gives up (cancelled, or its call settled meanwhile); one woken already
        passes the room it was given on."""
        if waiter.wake is None:
            self._wake_room()
            return
        waiter.wake = None
        self._withdrawn += 1
        room = self._room
        if self._withdrawn > 64 and self._withdrawn * 2 > len(room):  # mostly gone: drop them now
            if isinstance(room, FairQueue):
                room.keep(_still_waiting)
            else:
                self._room = collections.deque(w for w in room if w.wake is not None)
            self._withdrawn = 0

    def left(self, call: Call[Any]) -> None:
        """A queued call was answered while it waited (its caller gave up, a deadline)."""
        self._dead += 1
        if self._dead > 64 and self._dead * 2 > len(self._queue):  # mostly dead: drop them now
            queue = self._queue
            if isinstance(queue, FairQueue):
                queue.keep(_waiting)
            else:
                self._queue = collections.deque(c for c in queue if c.queued)
            self._dead = 0
        self._wake_room()

    def release(self) -> None:
        """A slot is free again: start the next waiting call, if the tool serves."""
        self.running -= 1
        if self._queue:
            self._start_waiting()
        elif self._room:  # nothing queued: room for whoever waits (a waiter woken before came late)
            self._wake_room()

    def _start_waiting(self) -> None:
        queue = self._queue
        while queue and self._serving and self.running < self.capacity:
            call = queue.popleft()
            if not call.queued:
                self._dead -= 1
                continue
            call.queued = False
            runner = call.executor
            assert runner is not None
            if runner.holds:
                self.running += 1
            self._wake_room()
            runner.start(call)

    def take_back(self, calls: list[Call[Any]]) -> None:
        """Calls handed to an executor that ended before it ran them: they wait again, first."""
        for call in reversed(calls):
            self.running -= 1
            if call.state is QUEUED:
                call.queued = True
                self._queue.appendleft(call)

    def _wake_room(self) -> None:
        room = self._room
        while room and len(self._queue) - self._dead < self.size:
            waiter = room.popleft()
            wake, waiter.wake = waiter.wake, None
            if wake is not None:
                wake()
                return
            self._withdrawn -= 1

    # -- the actor's side ----------------------------------------------------------------

    def resume(self) -> None:
        """The tool serves (an incarnation began): start what waits."""
        if self.closed:
            return
        self._serving = True
        self._start_waiting()

    def pause(self) -> None:
        """The tool stops serving for now (crashed, restarting): calls wait, none start."""
        self._serving = False

    def reopen(self) -> None:
        """Take calls again (a down tool is tried again): they wait until it serves."""
        self.closed = False

    def close(self) -> None:
        """Refuse calls from now on (down, stopping); the waiting ones fail UNAVAILABLE now."""
        self.closed = True
        self._serving = False
        message = self._why_closed()
        queue, self._queue = self._queue, self._empty()
        self._dead = 0
        for call in queue:
            if call.queued:
                call.queued = False
                call.fail(FailureKind.UNAVAILABLE, message)
        room, self._room = self._room, self._no_room_waiters()
        self._withdrawn = 0
        for waiter in room:  # they find it closed and are refused
            wake, waiter.wake = waiter.wake, None
            if wake is not None:
                wake()


class _RoomWaiter:
    """A caller waiting for room in a full mailbox: `wake` is None once woken or withdrawn."""

    __slots__ = ("principal", "wake")

    def __init__(self, principal: str | None, wake: Callable[[], Any]) -> None:
        self.principal = principal
        self.wake: Callable[[], Any] | None = wake


def _principal(item: Call[Any] | _RoomWaiter) -> str | None:
    return item.principal


def _still_waiting(waiter: _RoomWaiter) -> bool:
    return waiter.wake is not None


def _waiting(call: Call[Any]) -> bool:
    return call.queued


def _all_stuck(name: str, stuck: int) -> str:
    return (
        f"tool {name!r} is overloaded: all {stuck} of its threads are still running calls that "
        "timed out or were cancelled (they are blocked and cannot be interrupted); try again later"
    )
