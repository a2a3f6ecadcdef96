"""`serve_http`: a runtime's tools over MCP streamable HTTP, served by hypercorn on trio.

The SDK's streamable-HTTP app (an ASGI app) serves both protocol eras: a request that names
a 2026-07-28 `MCP-Protocol-Version` is one self-contained exchange, anything else joins or
opens a handshake-era session.

Safe by default, on every bind:

- DNS rebinding: the Host header must name the bound host, a loopback name (`localhost`,
  `127.0.0.1`, `[::1]`) or one of `allowed_hosts` (421 otherwise), and an Origin header, when
  sent, one of those too (403 otherwise).
- Authentication through the SDK's interfaces: `token=` is checked (in constant time) by a
  `TokenVerifier`; any other verifier (OAuth 2.1 access tokens, with `auth=` for the
  protected-resource metadata) plugs in the same way. An empty token is refused, and a
  non-loopback bind needs one (or `insecure_no_auth=True`). A refused request gets 401 and
  a log line saying so.
- Bounds: `read_timeout` (a connection that sends no request is closed), `max_body` (413),
  `max_sessions` and `session_idle_timeout`.

SSE streams are resumable: each starts with a priming event (an id and a `retry` of 1 s),
and the last `MAX_STORED_EVENTS` events are kept so that a client whose stream broke
reconnects with `Last-Event-ID` and gets what it missed.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from collections.abc import Sequence
from typing import Any, ClassVar, cast

import trio
from hypercorn.config import Config
from hypercorn.trio.run import worker_serve
from hypercorn.utils import wrap_app
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import JSONRPCMessage
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..engine import Runtime
from ._server import DEFAULT_NAME, ServedRuntime

__all__ = ["StaticToken", "serve_http"]

log = logging.getLogger("runtime.mcp")

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
DEFAULT_READ_TIMEOUT = 30.0
DEFAULT_MAX_BODY = 4 * 1024 * 1024
DEFAULT_MAX_SESSIONS = 1000
DEFAULT_SESSION_IDLE_TIMEOUT = 30 * 60.0
RETRY_INTERVAL_MS = 1000  # what SSE clients are told to wait before they reconnect
MAX_STORED_EVENTS = 10_000  # events kept for clients that reconnect with Last-Event-ID


class RecentEvents(EventStore):
    """The last `limit` SSE events of every stream, so a client that lost its stream resumes it.

    Bounded: the oldest events go first; a client that comes back later than that gets what is left.
    """

    def __init__(self, limit: int = MAX_STORED_EVENTS) -> None:
        self._limit = limit
        self._events: dict[EventId, tuple[StreamId, JSONRPCMessage | None]] = {}
        self._next = 0

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        self._next += 1
        event_id = str(self._next)
        self._events[event_id] = (stream_id, message)
        if len(self._events) > self._limit:
            del self._events[next(iter(self._events))]
        return event_id

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        found = self._events.get(last_event_id)
        if found is None:
            return None
        stream_id = found[0]
        after = int(last_event_id)
        for event_id, (stream, message) in list(self._events.items()):
            if stream == stream_id and int(event_id) > after and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream_id


class StaticToken:
    """A `TokenVerifier` for one shared bearer token, compared in constant time."""

    def __init__(self, token: str) -> None:
        if not token or not token.strip():
            raise ValueError("the MCP bearer token is empty: give a non-empty token (or none)")
        self._token = token.encode()

    async def verify_token(self, token: str) -> AccessToken | None:
        if hmac.compare_digest(token.encode(), self._token):
            return AccessToken(token=token, client_id="bearer-token", scopes=[])
        return None


def check_http_options(host: str, token: str | None, verifier: Any, insecure_no_auth: bool) -> None:
    """Refuse an unsafe configuration before anything is bound.

    Raises:
        ValueError: an empty token, or a non-loopback bind without authentication.
    """
    if token is not None and not token.strip():
        raise ValueError("the MCP bearer token is empty: give a non-empty token (or none)")
    if token is None and verifier is None and not insecure_no_auth and not is_loopback(host):
        raise ValueError(
            f"serving MCP on {host} (not loopback) needs a token (--token or $TOOL_RUNTIME_MCP_TOKEN); "
            "--insecure-no-auth lets anyone who reaches it call every tool"
        )


async def serve_http(
    rt: Runtime,
    host: str = "127.0.0.1",
    port: int = 8000,
    path: str = "/mcp",
    *,
    token: str | None = None,
    token_verifier: TokenVerifier | None = None,
    auth: AuthSettings | None = None,
    allowed_hosts: Sequence[str] = (),
    insecure_no_auth: bool = False,
    read_timeout: float = DEFAULT_READ_TIMEOUT,
    max_body: int = DEFAULT_MAX_BODY,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    session_idle_timeout: float = DEFAULT_SESSION_IDLE_TIMEOUT,
    sse_poll_after: float | None = None,
    name: str = DEFAULT_NAME,
    instructions: str | None = None,
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `rt`'s tools over MCP streamable HTTP at `http://host:port/path`, until cancelled.

    Start it with `await nursery.start(serve_http, rt, ...)` to learn the bound address.

    Args:
        rt: the runtime whose tools are served (tools registered later are served too).
        host: the address to bind; loopback by default.
        port: the port; 0 picks a free one.
        path: the endpoint's path.
        token: requests without `Authorization: Bearer <token>` get 401.
        token_verifier: checks bearer tokens instead of `token` (e.g. OAuth 2.1 access tokens).
        auth: the SDK's auth settings for `token_verifier` (issuer, resource URL: served as
            protected-resource metadata, required scopes).
        allowed_hosts: more names clients may reach the server by (`mcp.example.com`,
            `10.0.0.5:8000`); the bound host and loopback names always are.
        insecure_no_auth: allow a non-loopback bind without a token.
        read_timeout: seconds a connection may stay open without sending a request.
        max_body: the largest request body, in bytes (larger: 413).
        max_sessions: the most handshake-era sessions held at once.
        session_idle_timeout: seconds after which an unused session is closed.
        sse_poll_after: a call still running after this many seconds closes its SSE stream, and
            the client polls for the rest (SEP-1699: no connection held by a long call; the
            SDK offers it to 2025-11-25 sessions); None: streams stay open.
        name: the server's name in the handshake.
        instructions: text the client may show its model about these tools.
        task_status: receives the bound (host, port) once the server accepts connections.

    Raises:
        ValueError: an empty token, or a non-loopback bind without a token or `insecure_no_auth`.
        OSError: the address cannot be bound (in use, not local...).
    """
    check_http_options(host, token, token_verifier, insecure_no_auth)
    for option, value in (
        ("read_timeout", read_timeout),
        ("max_body", max_body),
        ("max_sessions", max_sessions),
        ("session_idle_timeout", session_idle_timeout),
    ):
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ValueError(f"serve_http {option} must be a positive number, not {value!r}")
    if token is None and token_verifier is None and not is_loopback(host):
        log.warning("serving MCP on %s without a token: whoever reaches it can call every tool", host)
    if sse_poll_after is not None and (isinstance(sse_poll_after, bool) or sse_poll_after <= 0):
        raise ValueError(
            f"serve_http sse_poll_after must be a positive number or None, not {sse_poll_after!r}"
        )
    served = ServedRuntime(rt, name=name, instructions=instructions, sse_poll_after=sse_poll_after)
    verifier: TokenVerifier | None = StaticToken(token) if token is not None else token_verifier
    if verifier is not None and auth is None:
        # The SDK installs its bearer check only with auth settings; without a resource URL it
        # serves no protected-resource metadata (a static token has no authorization server).
        auth = AuthSettings.model_validate(
            {"issuer_url": f"http://{_url_host(host)}", "resource_server_url": None}
        )
    app: ASGIApp = served.server.streamable_http_app(
        streamable_http_path=path,
        host=host,
        transport_security=security_settings(host, allowed_hosts),
        max_request_body_size=int(max_body),
        event_store=RecentEvents(),
        retry_interval=RETRY_INTERVAL_MS,
        max_sessions=int(max_sessions),
        session_idle_timeout=session_idle_timeout,
        token_verifier=verifier,
        auth=auth,
    )
    app = LogRefusals(app)
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.keep_alive_timeout = read_timeout  # also bounds a connection that never sends a request
    config.errorlog = logging.getLogger("hypercorn.error")
    # Bound here, before any task starts, so that a taken port is a plain OSError for the caller.
    sockets = config.create_sockets()
    try:
        for sock in sockets.insecure_sockets:
            sock.listen(config.backlog)
        bound: Any = sockets.insecure_sockets[0].getsockname()
        address = (str(bound[0]), int(bound[1]))
        async with trio.open_nursery() as nursery:

            async def run_server(*, task_status: trio.TaskStatus[list[str]]) -> None:
                try:
                    # cast: starlette and hypercorn spell the same ASGI callable with different types
                    await worker_serve(
                        wrap_app(cast(Any, app), config.wsgi_max_body_size, "asgi"),
                        config,
                        sockets=sockets,
                        task_status=task_status,
                    )
                finally:
                    nursery.cancel_scope.cancel()  # the server stopped: so does the announcer

            nursery.start_soon(served.announce_changes)
            await nursery.start(run_server)
            log.info("serving MCP at http://%s:%d%s", *address, path)
            task_status.started(address)
    finally:
        for sock in sockets.insecure_sockets:
            sock.close()


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address) is this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def security_settings(host: str, allowed_hosts: Sequence[str]) -> TransportSecuritySettings:
    """Host and Origin allow-lists: the bound host, loopback names and `allowed_hosts`."""
    names: list[str] = []
    for name in (_url_host(host), *LOOPBACK_NAMES, *allowed_hosts):
        if name and name not in names:
            names.append(name)
    hosts: list[str] = []
    origins: list[str] = []
    for name in names:
        has_port = name.rsplit("]", 1)[-1].count(":") == 1 if name.startswith("[") else name.count(":") == 1
        hosts.append(name)
        for scheme in ("http", "https"):
            origins.append(f"{scheme}://{name}")
        if not has_port:
            hosts.append(f"{name}:*")
            origins.extend((f"http://{name}:*", f"https://{name}:*"))
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )


class LogRefusals:
    """ASGI middleware: logs each refused request (401, 403, 413, 421) with its reason."""

    _REASONS: ClassVar[dict[int, str]] = {
        401: "not authenticated (missing or wrong bearer token)",
        403: "forbidden (Origin not allowed, or the token lacks a scope)",
        413: "request body too large",
        421: "Host header not allowed (DNS rebinding protection)",
    }

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                reason = self._REASONS.get(message["status"])
                if reason is not None:
                    client = scope.get("client")
                    log.warning(
                        "MCP HTTP %s %s from %s: %d %s",
                        scope.get("method"),
                        scope.get("path"),
                        f"{client[0]}:{client[1]}" if client else "?",
                        message["status"],
                        reason,
                    )
            await send(message)

        await self._app(scope, receive, watch)
