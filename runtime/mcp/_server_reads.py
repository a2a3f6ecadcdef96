"""The bytes of artifacts the server is serving at once (`resources/read`), bounded.

A read of a kept artifact joins it whole (MCP has no paging for resources), and the SDK then
dumps it, encodes it as JSON and writes it as one server-sent event: six readers of a 40 MiB
artifact grew the server by 500-900 MiB. `ReadBudget` keeps the artifact bytes between a read's
start and the moment they are written to a client under `total`: a read takes its size from the
budget before it reads (waiting its turn, first come first served; one larger than the budget
goes alone), and gives it back as the server writes response bytes (`sent`, told by the HTTP
app for every body it writes), so the next large read starts once the last one has left. A
response that is never written (its client went away) gives its bytes back after `hold`
seconds; without an HTTP app (stdio) a read gives its bytes back once the SDK lets go of it.
"""

from __future__ import annotations

import collections
import math
from typing import Any

import trio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CountSent", "ReadBudget"]


class ReadBudget:
    """At most `total` bytes of reads between their start and their write (see the module)."""

    def __init__(self, total: int, *, hold: float = 30.0) -> None:
        self.total = total
        self.free = float(total)
        self.hold = hold
        self.counts_sent = False  # an HTTP app tells it what it writes (`CountSent`)
        self._waiting: collections.deque[tuple[int, trio.Event]] = collections.deque()
        self._owed: collections.deque[list[float]] = collections.deque()  # [bytes, given back by]

    async def take(self, wanted: int) -> int:
        """Room for `wanted` bytes (at most `total`); waits for it. Returns what was taken."""
        wanted = min(max(0, wanted), self.total)
        self._expire()
        if not self._waiting and self.free >= wanted:
            self.free -= wanted
            await trio.lowlevel.checkpoint()
            return wanted
        entry = (wanted, trio.Event())
        self._waiting.append(entry)
        try:
            while not entry[1].is_set():
                owed = self._owed
                with trio.move_on_at(owed[0][2] if owed else math.inf):
                    await entry[1].wait()
                self._expire()
        except BaseException:
            if entry[1].is_set():  # given room just as it was cancelled: give it back
                self.give(wanted)
            else:
                self._waiting.remove(entry)
                self.give(0)  # the ones behind it may fit now
            raise
        return wanted

    def give(self, taken: float) -> None:
        """Give `taken` bytes back now."""
        self.free += taken
        waiting = self._waiting
        while waiting and waiting[0][0] <= self.free:
            wanted, event = waiting.popleft()
            self.free -= wanted
            event.set()

    def owe(self, taken: int, size: int) -> None:
        """`taken` bytes of budget are held by a response of about `size` bytes on its way to a
        client: given back in proportion as response bytes are written."""
        if taken:
            self._owed.append([float(taken), taken / max(1, size), trio.current_time() + self.hold])

    def sent(self, count: int) -> None:
        """The HTTP app wrote `count` bytes of a response."""
        owed, back, left = self._owed, 0.0, float(count)
        while owed and left > 0:
            first = owed[0]
            paid = min(first[0], left * first[1])
            first[0] -= paid
            left -= paid / first[1]
            back += paid
            if first[0] <= 0.5:
                back += first[0]
                owed.popleft()
        if back:
            self.give(back)

    def _expire(self) -> None:
        owed, now, back = self._owed, trio.current_time(), 0.0
        while owed and owed[0][2] <= now:
            back += owed.popleft()[0]
        if back:
            self.give(back)


class CountSent:
    """An ASGI app that tells `budget` how many response bytes `app` writes."""

    def __init__(self, app: ASGIApp, budget: ReadBudget) -> None:
        self.app = app
        self.budget = budget
        budget.counts_sent = True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        budget = self.budget

        async def counted(message: Message) -> None:
            await send(message)
            if message["type"] == "http.response.body":
                body: Any = message.get("body", b"")
                if body:
                    budget.sent(len(body))

        await self.app(scope, receive, counted)
