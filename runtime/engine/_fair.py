"""A tool's waiting calls served fairly across principals: deficit round robin.

`Mailbox` keeps its waiting calls in a plain deque (first come, first served) unless the runtime
says `fair=True`; then in a `FairQueue`: one lane per principal, served in turn, each turn worth
the principal's weight (default 1.0) in calls. A principal that queued 10,000 calls waits behind
its own burst, not in front of everyone else's; one with weight 2 gets twice the turns.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

__all__ = ["FairQueue"]

T = TypeVar("T")


class FairQueue(Generic[T]):
    """The deque operations `Mailbox` uses (append, appendleft, popleft, len, iteration), over
    one lane per key (`key_of(item)`: the call's principal)."""

    __slots__ = ("_deficit", "_key_of", "_lanes", "_len", "_ring", "_weights")

    def __init__(self, key_of: Callable[[T], str | None], weights: Mapping[str, float] | None = None) -> None:
        self._key_of = key_of
        self._weights = dict(weights or {})
        self._lanes: dict[str | None, collections.deque[T]] = {}
        self._deficit: dict[str | None, float] = {}
        self._ring: collections.deque[str | None] = collections.deque()  # keys with items, in turn
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __iter__(self) -> Iterator[T]:
        for key in list(self._ring):
            yield from list(self._lanes[key])

    def _lane(self, key: str | None, first: bool) -> collections.deque[T]:
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = collections.deque()
            if first:  # taken back (it was already chosen): its lane goes first, with a turn
                self._ring.appendleft(key)
                self._deficit[key] = max(1.0, self._weights.get(key, 1.0)) if key is not None else 1.0
            else:
                self._ring.append(key)
                self._deficit[key] = 0.0
        return lane

    def append(self, item: T) -> None:
        self._lane(self._key_of(item), False).append(item)
        self._len += 1

    def appendleft(self, item: T) -> None:
        self._lane(self._key_of(item), True).appendleft(item)
        self._len += 1

    def popleft(self) -> T:
        if not self._len:
            raise IndexError("pop from an empty FairQueue")
        ring, deficit = self._ring, self._deficit
        idle = 0  # lanes turned in a row that had no call's worth of credit
        while True:
            key = ring[0]
            owed = deficit[key]
            if owed < 1.0:  # a new turn for this lane
                owed += self._weights.get(key, 1.0) if key is not None else 1.0
                if owed < 1.0:  # a weight under 1 saves up over turns
                    deficit[key] = owed
                    ring.rotate(-1)
                    idle += 1
                    if idle >= len(ring):  # a whole round served no one: skip the rounds that would not
                        self._skip()
                        idle = 0
                    continue
            lane = self._lanes[key]
            item = lane.popleft()
            self._len -= 1
            owed -= 1.0
            if not lane:  # an empty lane leaves the ring and keeps no credit
                ring.popleft()
                del self._lanes[key], deficit[key]
            elif owed < 1.0:  # its turn is over
                deficit[key] = owed
                ring.rotate(-1)
            else:
                deficit[key] = owed
            return item

    def _skip(self) -> None:
        """Credit every lane at once with the rounds in which none of them would be served (all
        their weights under 1), instead of turning the ring 1/weight times: a pop's work is
        bounded by the lanes, whatever the weights."""
        deficit, weights = self._deficit, self._weights
        rounds = min(math.ceil((1.0 - deficit[k]) / weights.get(k, 1.0)) for k in self._ring if k is not None)
        if rounds > 1:
            for k in self._ring:
                if k is not None:
                    deficit[k] += (rounds - 1) * weights.get(k, 1.0)

    def keep(self, wanted: Callable[[T], bool]) -> None:
        """Drop the items `wanted` says no to (the answered calls), keeping every order."""
        for key in list(self._ring):
            lane = self._lanes[key]
            kept = collections.deque(item for item in lane if wanted(item))
            self._len -= len(lane) - len(kept)
            if kept:
                self._lanes[key] = kept
            else:
                self._ring.remove(key)
                del self._lanes[key], self._deficit[key]
