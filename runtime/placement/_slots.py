"""The slots of a pool's replicas and the line of calls waiting for one.

    a call     takes a slot on the live replica with the fewest calls; with none free (or
               others already waiting) it joins the line, unless `max_queued` per replica are
               in it already: ToolOverloaded
    a slot     freed on a serving replica is handed to the first call in line (first come,
               first served: no call can overtake one that waits, however the tasks are
               scheduled); freed on a draining replica it is not handed on, and the replica's
               last one wakes whoever waits for it to be idle

The line tells a `LoadMeter` (if the pool autoscales) of every change in the calls holding a
slot or waiting, and how long each call waited.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

import trio

from ..exceptions import ToolOverloaded
from ._autoscale import LoadMeter

__all__ = ["Line", "Seat"]


class Seat(Protocol):
    """A replica as the line sees it."""

    in_flight: int
    draining: bool


S = TypeVar("S", bound=Seat)


class _Waiter(Generic[S]):
    __slots__ = ("event", "seat", "since")

    def __init__(self, since: float) -> None:
        self.since = since
        self.event = trio.Event()
        self.seat: S | None = None  # the slot it was handed


class Line(Generic[S]):
    """Slots on `live` (the pool's own list of serving replicas, read as it changes).

    Args:
        live: the replicas that take calls now.
        slots: calls one replica serves at once.
        max_queued: calls that may wait per replica (None: no bound here).
        replicas: how many replicas the bound counts (the pool's target, as it changes).
    """

    def __init__(
        self, live: list[S], slots: int, max_queued: int | None, replicas: Callable[[], int]
    ) -> None:
        self.live = live
        self.slots = slots
        self.max_queued = max_queued
        self._replicas = replicas
        self._waiters: collections.deque[_Waiter[S]] = collections.deque()
        self.busy = 0  # slots held, on every replica
        self.overloaded = 0
        self.meter: LoadMeter | None = None
        self.idle = trio.Event()  # set (and replaced) when a draining replica's last call ends

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def waited_so_far(self, now: float) -> list[float]:
        return [now - w.since for w in self._waiters]

    def free(self, exclude: S | None = None) -> S | None:
        """The serving replica with a free slot and the fewest calls (not `exclude`), if any."""
        best = None
        for seat in self.live:
            if (
                seat.in_flight < self.slots
                and seat is not exclude
                and (best is None or seat.in_flight < best.in_flight)
            ):
                best = seat
        return best

    def take(self, seat: S) -> None:
        """Hold a slot of `seat` (one `free` gave); `release` lets go of it."""
        seat.in_flight += 1
        self.busy += 1
        self._note()

    def release(self, seat: S) -> None:
        seat.in_flight -= 1
        self.busy -= 1
        if seat.draining:
            if not seat.in_flight:
                idle, self.idle = self.idle, trio.Event()
                idle.set()
        else:
            self.dispatch()
        self._note()

    def dispatch(self) -> None:
        """Hand free slots to the calls in line, first come first served (a slot was freed, a
        replica came up)."""
        waiters = self._waiters
        while waiters:
            seat = self.free()
            if seat is None:
                return
            waiter = waiters.popleft()
            seat.in_flight += 1
            self.busy += 1
            waiter.seat = seat
            waiter.event.set()

    async def acquire(self, what: str) -> S:
        """A slot: free now, or when one is handed to this call in line.

        Args:
            what: the replicas, for the OVERLOADED text ("Ray replicas").

        Raises:
            ToolOverloaded: `max_queued` calls per replica are in line already.
        """
        if not self._waiters:
            seat = self.free()
            if seat is not None:
                self.take(seat)
                return seat
        bound, replicas = self.max_queued, max(1, self._replicas())
        if bound is not None and len(self._waiters) >= bound * replicas:
            self.overloaded += 1
            raise ToolOverloaded(
                f"{len(self._waiters)} calls are waiting for its {replicas} {what} "
                f"(max_queued={bound} per replica); try again later"
            )
        waiter: _Waiter[S] = _Waiter(trio.current_time())
        self._waiters.append(waiter)
        self._note()
        try:
            await waiter.event.wait()
        except BaseException:
            if waiter.seat is not None:  # handed a slot as it was cancelled
                self.release(waiter.seat)
            else:
                self._waiters.remove(waiter)
                self._note()
            raise
        if self.meter is not None:
            self.meter.waited(trio.current_time() - waiter.since)
        assert waiter.seat is not None
        return waiter.seat

    def _note(self) -> None:
        if self.meter is not None:
            self.meter.level(trio.current_time(), self.busy + len(self._waiters))
