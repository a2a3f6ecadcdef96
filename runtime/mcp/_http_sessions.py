"""Handshake-era MCP sessions over HTTP, capped per principal and evicted fairly.

The SDK's session manager holds at most `max_sessions` and answers 503 beyond; its idle timeout
never fires while a GET stream is open. So one client could open every session and lock every
other client out, for the idle timeout or, holding GET streams, for ever. `FairSessions` is the
SDK's manager with its admission replaced:

- A principal is whom the credential names: the verified token's (client id, issuer, subject).
  A shared static token (`--token`) or no authentication names no one (every holder presents the
  same credential), so there the principal is the client's network address (an IPv6 client's
  /64): on one machine, every client is one principal.
- A principal holds at most `max_per_principal` sessions (below `max_sessions`). Opening one
  more closes its own least recently used idle session; if none is idle, 503.
- At `max_sessions`, a new session closes the least recently used idle session of the principal
  that holds the most; if no session anywhere is idle, 503.
- Idle means no request being served. A GET stream (a client listening for notifications) is
  counted as a session like any other and does not make it busy: holding streams open keeps
  nobody else out.

A closed session's id answers 404 from then on (the client opens a new one, as after the idle
timeout). Sessions are only closed under pressure, never because a cap was merely approached.
"""

from __future__ import annotations

import contextvars
import ipaddress
import logging
from typing import Any
from uuid import uuid4

import trio
from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["FairSessions", "principal_of"]

log = logging.getLogger("runtime.mcp")

Principal = tuple[str, ...]

_peer: contextvars.ContextVar[str] = contextvars.ContextVar("tool_runtime_mcp_peer", default="?")


def principal_of(requestor: AuthorizationContext | None, peer: str, *, by_peer: bool) -> Principal:
    """Whom a session belongs to, for the caps: the token's principal, or the client's address."""
    if by_peer or requestor is None:
        return ("peer", _network(peer))
    return ("token", requestor["client_id"], requestor["issuer"] or "", requestor["subject"] or "")


def _network(host: str) -> str:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if address.version == 6 and not address.is_loopback:
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


class _Session(StreamableHTTPServerTransport):
    """The SDK's transport for one session, which also knows whose it is and whether it is busy."""

    def __init__(self, principal: Principal, **options: Any) -> None:
        super().__init__(**options)
        self.principal = principal
        self.serving = 0  # requests being served, GET streams not counted
        self.used = trio.current_time()

    async def handle_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        listening = scope.get("method") == "GET"
        self.used = trio.current_time()
        if not listening:
            self.serving += 1
        try:
            await super().handle_request(scope, receive, send)
        finally:
            if not listening:
                self.serving -= 1
                self.used = trio.current_time()


class FairSessions(StreamableHTTPSessionManager):
    """The SDK's session manager with a cap per principal and fair eviction (module docstring)."""

    def __init__(self, app: Any, *, max_per_principal: int, by_peer: bool, **options: Any) -> None:
        super().__init__(app, **options)
        self.max_per_principal = max_per_principal
        self.by_peer = by_peer
        self._held: dict[Principal, dict[str, _Session]] = {}
        self.asgi_app.app = _NotePeer(self.asgi_app.app)  # the peer's address, for `_admit_session`

    def sessions_of(self, principal: Principal) -> int:
        """How many sessions `principal` holds now."""
        return len(self._held.get(principal, ()))

    # The SDK's one admission point (called under its session-creation lock), replaced.
    def _admit_session(self, requestor: AuthorizationContext | None) -> StreamableHTTPServerTransport | None:
        principal = principal_of(requestor, _peer.get(), by_peer=self.by_peer)
        mine = self._held.get(principal, {})
        if len(mine) >= self.max_per_principal:
            if not self._close_idlest(mine):
                log.info("no session for %s: its %d sessions are all serving requests", principal, len(mine))
                return None
        elif self.max_sessions is not None and len(self._server_instances) >= self.max_sessions:
            holders = sorted(self._held.values(), key=len, reverse=True)
            if not any(self._close_idlest(theirs) for theirs in holders):
                log.info(
                    "no session for %s: all %d sessions are serving requests", principal, self.max_sessions
                )
                return None
        session = _Session(
            principal,
            mcp_session_id=uuid4().hex,
            is_json_response_enabled=self.json_response,
            event_store=self.event_store,
            security_settings=self.security_settings,
            retry_interval=self.retry_interval,
            idle_timeout=self.session_idle_timeout,
        )
        session_id = session.mcp_session_id
        assert session_id is not None
        if requestor is not None:
            self._session_owners[session_id] = requestor
        self._server_instances[session_id] = session
        self._held.setdefault(principal, {})[session_id] = session
        return session

    async def _discard_session(self, session_id: str, transport: StreamableHTTPServerTransport) -> None:
        self._forget(session_id, transport)
        await super()._discard_session(session_id, transport)

    def _forget(self, session_id: str, transport: StreamableHTTPServerTransport) -> None:
        if isinstance(transport, _Session):
            held = self._held.get(transport.principal)
            if held is not None and held.pop(session_id, None) is not None and not held:
                del self._held[transport.principal]

    def _close_idlest(self, sessions: dict[str, _Session]) -> bool:
        """Close the least recently used of `sessions` that serves no request; False if none."""
        idle = [
            (session.used, session_id, session)
            for session_id, session in sessions.items()
            if not session.serving
        ]
        if not idle:
            return False
        _, session_id, session = min(idle, key=lambda entry: entry[0])
        log.info(
            "closing MCP session %s of %s to make room (the least recently used)",
            session_id,
            session.principal,
        )
        # Forgotten at once (as the SDK's discard does first): its id answers 404 from now on and
        # the caps count it gone. Its server task ends as on its idle timeout and terminates it.
        self._server_instances.pop(session_id, None)
        self._session_owners.pop(session_id, None)
        self._forget(session_id, session)
        if session.idle_scope is not None:
            session.idle_scope.cancel()
        elif self._task_group is not None:
            self._task_group.start_soon(session.terminate)
        return True


class _NotePeer:
    """Puts the client's address where the session manager's admission can read it."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        client = scope.get("client")
        token = _peer.set(str(client[0]) if client else "?")
        try:
            await self._app(scope, receive, send)
        finally:
            _peer.reset(token)
