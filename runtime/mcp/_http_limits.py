"""ASGI layers in front of the MCP HTTP app: a time and memory bound on request bodies, and a
log of refused requests that a flood cannot turn into a flood of log lines.

    LogRefusals(BoundBodies(app))

`BoundBodies`: a request's body must arrive whole within `read_timeout` of its request (hypercorn's
timeouts cover the wait for a request's head only: a client sending a byte every half second
held its connection for ever); a late one gets 408 and its connection is closed, so what it had
sent is let go at once. The bodies still arriving hold at most `max_buffered` bytes together:
the request whose bytes would pass that gets 503 (each may hold up to `max_body`, 4 MiB, and
100 connections holding 4 MiB-1 each pinned 400 MB).

`RefusalLog`: the first refusal is logged at once, then at most one line per `interval` says how
many more there were and why (and at the end of serving, what was left to say).
"""

from __future__ import annotations

import collections
import logging
import math
from typing import ClassVar

import trio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["REFUSAL", "BoundBodies", "LogRefusals", "RefusalLog"]

REFUSAL = "tool_runtime.refusal"  # scope key: why a layer of ours refused the request
DEFAULT_LOG_INTERVAL = 10.0


class RefusalLog:
    """Refused requests to a logger, at most one line per `interval` seconds after the first."""

    def __init__(self, logger: logging.Logger, interval: float = DEFAULT_LOG_INTERVAL) -> None:
        self._log = logger
        self._interval = interval
        self._quiet_until = -math.inf  # a line was written: the next waits until then
        self._held: collections.Counter[tuple[int, str]] = collections.Counter()
        self._last = ""
        self._wake = trio.Event()

    def refused(self, status: int, reason: str, where: str) -> None:
        """Note a refusal: `where` says which request (method, path, client)."""
        now = trio.current_time()
        if now >= self._quiet_until and not self._held:
            self._log.warning("MCP HTTP %s: %d %s", where, status, reason)
            self._quiet_until = now + self._interval
            return
        self._held[(status, reason)] += 1
        self._last = where
        self._wake.set()

    def flush(self) -> None:
        """Write the line for the refusals held back so far, if any."""
        if not self._held:
            return
        total = sum(self._held.values())
        kinds = ", ".join(
            f"{count} x {status} {reason}" for (status, reason), count in self._held.most_common()
        )
        self._log.warning(
            "MCP HTTP: %d more request%s refused since the last line (%s); the last: %s",
            total,
            "" if total == 1 else "s",
            kinds,
            self._last,
        )
        self._held.clear()
        self._quiet_until = trio.current_time() + self._interval

    async def run(self) -> None:
        """Write the held-back line at the end of each quiet interval; and when cancelled."""
        try:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                await trio.sleep_until(self._quiet_until)
                self.flush()
        finally:
            self.flush()


class LogRefusals:
    """ASGI middleware: each refused request (401, 403, 408, 413, 421, 503) to the refusal log."""

    _REASONS: ClassVar[dict[int, str]] = {
        401: "not authenticated (missing or wrong bearer token)",
        403: "forbidden (Origin not allowed, or the token lacks a scope)",
        408: "request body not received in time",
        413: "request body too large",
        421: "Host header not allowed (DNS rebinding protection)",
        503: "too many sessions (the caps are reached and no session is idle)",
    }

    def __init__(self, app: ASGIApp, refusals: RefusalLog) -> None:
        self._app = app
        self._refusals = refusals

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                status = message["status"]
                reason = scope.get(REFUSAL) or self._REASONS.get(status)
                if reason is not None:
                    client = scope.get("client")
                    where = f"{scope.get('method')} {scope.get('path')} from " + (
                        f"{client[0]}:{client[1]}" if client else "?"
                    )
                    self._refusals.refused(status, reason, where)
            await send(message)

        await self._app(scope, receive, watch)


class BoundBodies:
    """ASGI middleware: request bodies arrive whole within `read_timeout`, and the ones still
    arriving hold at most `max_buffered` bytes together (see the module docstring)."""

    def __init__(self, app: ASGIApp, *, read_timeout: float, max_buffered: int) -> None:
        self._app = app
        self.timeout = read_timeout
        self.max_buffered = max_buffered
        self.held = 0  # bytes of bodies still arriving, all requests together

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        body = _Body(self, trio.current_time() + self.timeout, receive)
        with trio.CancelScope() as body.scope:
            try:
                await self._app(scope, body.receive, body.watch(send))
            finally:
                body.let_go()
        if body.refusal is None:
            return
        status, reason = body.refusal
        scope[REFUSAL] = reason
        if body.responded:
            return  # too late for a status: the connection ends with the response cut short
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"connection", b"close"),  # what is left of the body is never read
                    *([(b"retry-after", b"1")] if status == 503 else []),
                ],
            }
        )
        await send({"type": "http.response.body", "body": reason.encode()})


class _Body:
    """The receiving side of one request's body (for `BoundBodies`)."""

    __slots__ = ("_bounds", "_deadline", "_mine", "_receive", "complete", "refusal", "responded", "scope")

    def __init__(self, bounds: BoundBodies, deadline: float, receive: Receive) -> None:
        self._bounds = bounds
        self._deadline = deadline
        self._receive = receive
        self._mine = 0
        self.complete = False
        self.refusal: tuple[int, str] | None = None
        self.responded = False
        self.scope: trio.CancelScope

    async def receive(self) -> Message:
        if self.complete:
            return await self._receive()  # the body is in: the app waits for a disconnect
        refusal: tuple[int, str] | None = None
        with trio.move_on_at(self._deadline):
            message = await self._receive()
            refusal = self._count(message)
            if refusal is None:
                return message
        self.refusal = refusal or (408, f"request body not received within {self._bounds.timeout:g} s")
        self.let_go()
        self.scope.cancel()  # the app's handling of this request ends here; the caller answers
        await trio.lowlevel.checkpoint()  # raises Cancelled
        raise AssertionError("unreachable: the scope was cancelled")

    def _count(self, message: Message) -> tuple[int, str] | None:
        """Count a message's bytes while the body is still arriving; a refusal if over the bound."""
        if message["type"] != "http.request" or not message.get("more_body", False):
            self.complete = True
            self.let_go()
            return None
        size = len(message.get("body", b""))
        self._mine += size
        self._bounds.held += size
        if self._bounds.held > self._bounds.max_buffered:
            return (503, "server busy receiving other request bodies (try again)")
        return None

    def let_go(self) -> None:
        self._bounds.held -= self._mine
        self._mine = 0

    def watch(self, send: Send) -> Send:
        async def watched(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.responded = True
            await send(message)

        return watched
