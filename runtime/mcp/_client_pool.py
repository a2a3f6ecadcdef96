"""Per-principal MCP sessions: one connection spec whose credentials come from the principal.

    mcp.http(url, headers=service_headers, credentials=lambda principal: {"Authorization": ...})

The server's tools are listed over the spec's own connection (`headers` / `auth`: the
service's credential). Each call made for a principal goes over a session of that principal's
own, opened with `credentials(principal)` (headers, on top of `headers`) at its first call,
kept for its next calls and closed once unused for `principal_idle_timeout` seconds. At most
`max_principal_sessions` are open at once: a new principal closes the least recently used idle
one; when every one is serving a call, the new principal's call is UNAVAILABLE (retry soon).
A session serves only its own principal's calls; a call for no principal is REJECTED (it has
no credential to go with), and so is one whose principal `credentials` returns None for.
A session that cannot open (refused credentials, a server that is down) fails the calls
waiting for it UNAVAILABLE, with the reason; the next call tries again.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

from ..exceptions import ToolRejected, ToolUnavailable

__all__ = ["Held", "SessionPool"]

log = logging.getLogger("runtime.mcp")


class Held:
    """One principal's session: its link once open, how many calls use it, when it was last used."""

    __slots__ = ("busy", "error", "headers", "idle_timeout", "link", "principal", "ready", "scope", "used")

    def __init__(self, principal: str, headers: Mapping[str, str], idle_timeout: float) -> None:
        self.principal = principal
        self.headers = headers
        self.idle_timeout = idle_timeout
        self.link: Any = None
        self.ready = trio.Event()
        self.busy = 0
        self.used = trio.current_time()
        self.error = "the session closed"
        self.scope: trio.CancelScope | None = None

    async def serve(self, link: Any) -> None:
        """In the session's task, once it is open: keep it until it is lost or idle long enough."""
        self.link = link
        self.ready.set()
        while link.lost is None:
            with trio.move_on_at(self.used + self.idle_timeout):
                await link.wake.wait()
            if link.wake.is_set():
                link.wake = trio.Event()  # a list_changed: the service's own connection re-lists
            if self.busy == 0 and trio.current_time() >= self.used + self.idle_timeout:
                return


class SessionPool:
    """The per-principal sessions of one server (the module docstring); `open(held)` runs one
    session, calling `await held.serve(link)` once it is open."""

    def __init__(
        self,
        name: str,
        credentials: Callable[[str], Mapping[str, str] | None],
        open_session: Callable[[Held], Awaitable[None]],
        describe: Callable[[BaseException], str],
        *,
        max_sessions: int,
        idle_timeout: float,
    ) -> None:
        self.name = name
        self.max_sessions = max_sessions
        self.idle_timeout = idle_timeout
        self.nursery: trio.Nursery | None = None
        self._credentials = credentials
        self._open = open_session
        self._describe = describe
        self._held: dict[str, Held] = {}

    def sessions(self) -> dict[str, int]:
        """principal -> the calls its open session serves now."""
        return {principal: held.busy for principal, held in self._held.items() if held.link is not None}

    async def acquire(self, principal: str | None) -> Held:
        """The principal's open session, opened first if need be; `release` it after the call."""
        if principal is None:
            raise ToolRejected(
                f"MCP server {self.name!r} takes calls made for a principal only "
                "(its credentials come from the principal)"
            )
        held = self._held.get(principal)
        if held is None:
            headers = self._credentials(principal)
            if headers is None:
                raise ToolRejected(f"MCP server {self.name!r} has no credentials for principal {principal!r}")
            if len(self._held) >= self.max_sessions and not self._close_idlest():
                raise ToolUnavailable(
                    f"MCP server {self.name!r}: all {self.max_sessions} principals' sessions are "
                    "serving calls; retry shortly"
                )
            if self.nursery is None:
                raise ToolUnavailable(f"MCP server {self.name!r} is not running")
            held = Held(principal, dict(headers), self.idle_timeout)
            self._held[principal] = held
            self.nursery.start_soon(self._keep, held)
        held.busy += 1
        held.used = trio.current_time()
        try:
            await held.ready.wait()
        except BaseException:
            self.release(held)
            raise
        if held.link is None or held.link.lost is not None:
            self.release(held)
            raise ToolUnavailable(
                f"MCP server {self.name!r}: no session for principal {principal!r} ({held.error})"
            )
        return held

    def release(self, held: Held) -> None:
        held.busy -= 1
        held.used = trio.current_time()

    async def _keep(self, held: Held) -> None:
        try:
            with trio.CancelScope() as held.scope:
                await self._open(held)
            if not held.scope.cancelled_caught:
                log.debug(
                    "MCP server %r: the session of principal %r was closed: idle for %gs",
                    self.name,
                    held.principal,
                    self.idle_timeout,
                )
        except Exception as exc:
            held.error = self._describe(exc)
            log.warning(
                "MCP server %r: the session of principal %r failed: %s", self.name, held.principal, held.error
            )
        finally:
            if self._held.get(held.principal) is held:
                del self._held[held.principal]
            held.link = None
            held.ready.set()

    def _close_idlest(self) -> bool:
        idle = [held for held in self._held.values() if held.busy == 0 and held.link is not None]
        if not idle:
            return False
        oldest = min(idle, key=lambda held: held.used)
        log.info(
            "MCP server %r: closing the idle session of principal %r to make room",
            self.name,
            oldest.principal,
        )
        del self._held[oldest.principal]
        if oldest.scope is not None:
            oldest.scope.cancel()
        return True
