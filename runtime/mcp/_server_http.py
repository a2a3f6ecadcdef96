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
  non-loopback bind needs one (or `insecure_no_auth=True`). A refused request gets 401.
- Bounds: `read_timeout` (a connection that sends no request is closed, and a request's body
  must arrive within it: 408), `max_body` (413), `max_body_buffer` (the bytes of bodies still
  arriving, all requests together: 503), `max_sessions` and `max_sessions_per_principal`
  with fair eviction (`_http_sessions`), `session_idle_timeout`.
- Refused requests are logged, at most one line per `log_interval` after the first (with how
  many more, and why): a flood of bad requests is not a flood of log lines.

SSE streams are resumable: each starts with a priming event (an id and a `retry` of 1 s),
and the last `MAX_STORED_EVENTS` events are kept so that a client whose stream broke
reconnects with `Last-Event-ID` and gets what it missed.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, cast

import trio
from hypercorn.config import Config
from hypercorn.trio.run import worker_serve
from hypercorn.utils import wrap_app
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend, RequireAuthMiddleware
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.routes import build_resource_metadata_url, create_protected_resource_routes
from mcp.server.auth.settings import AuthSettings
from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import JSONRPCMessage
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.routing import Route
from starlette.types import ASGIApp

from ..engine import Runtime
from ..search import ToolSearch
from ._http_limits import DEFAULT_LOG_INTERVAL, BoundBodies, LogRefusals, RefusalLog
from ._http_sessions import FairSessions
from ._server import DEFAULT_MAX_READ_BYTES, DEFAULT_MAX_VIEWS, DEFAULT_NAME, DEFAULT_VIEW_IDLE, ServedRuntime
from ._server_reads import CountSent

__all__ = ["StaticToken", "Tokens", "serve_http"]

log = logging.getLogger("runtime.mcp")

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
DEFAULT_READ_TIMEOUT = 30.0
DEFAULT_MAX_BODY = 4 * 1024 * 1024
DEFAULT_MAX_SESSIONS = 1000
DEFAULT_MAX_SESSIONS_PER_PRINCIPAL = 100
BODY_BUFFER_BODIES = 16  # max_body_buffer defaults to this many bodies of max_body
DEFAULT_SESSION_IDLE_TIMEOUT = 30 * 60.0
RETRY_INTERVAL_MS = 1000  # what SSE clients are told to wait before they reconnect
MAX_STORED_EVENTS = 10_000  # events kept for clients that reconnect with Last-Event-ID
MAX_STORED_BYTES = 32 << 20  # and the most they may weigh together (the newest is always kept)
_WEIGHED_NODES = 10_000  # values looked at to weigh one message (a larger one weighs as many MiB)


class RecentEvents(EventStore):
    """The last SSE events of every stream, so a client that lost its stream resumes it.

    Bounded twice: at most `limit` events, and at most `max_bytes` of them (as their strings
    weigh; the newest one is kept whatever it weighs). The oldest go first; a client that comes
    back later than that gets what is left. (Counted in events only, ten thousand responses to
    `resources/read` of a 40 MiB artifact were 400 GB.)
    """

    def __init__(self, limit: int = MAX_STORED_EVENTS, max_bytes: int = MAX_STORED_BYTES) -> None:
        self._limit = limit
        self._max_bytes = max_bytes
        self._events: dict[EventId, tuple[StreamId, JSONRPCMessage | None, int]] = {}
        self._next = 0
        self.bytes = 0

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        self._next += 1
        event_id = str(self._next)
        weight = _weight(message)
        self._events[event_id] = (stream_id, message, weight)
        self.bytes += weight
        events = self._events
        while len(events) > self._limit or (self.bytes > self._max_bytes and len(events) > 1):
            self.bytes -= events.pop(next(iter(events)))[2]
        return event_id

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        found = self._events.get(last_event_id)
        if found is None:
            return None
        stream_id = found[0]
        after = int(last_event_id)
        for event_id, (stream, message, _) in list(self._events.items()):
            if stream == stream_id and int(event_id) > after and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream_id


def _weight(message: Any) -> int:
    """About how many bytes a message holds: its strings' lengths, its other values 8 each,
    found by a walk of at most `_WEIGHED_NODES` values (never an encoding of it)."""
    if message is None:
        return 0
    stack: list[Any] = [getattr(message, name, None) for name in ("result", "params", "error")]
    weight, seen = 64, 0
    while stack and seen < _WEIGHED_NODES:
        value = stack.pop()
        seen += 1
        if isinstance(value, str | bytes):
            weight += len(value)
        elif isinstance(value, dict):
            stack.extend(value.values())
            weight += 8 * len(value)
        elif isinstance(value, list | tuple):
            stack.extend(value)
        elif hasattr(value, "__dict__"):  # a model the SDK has not dumped
            stack.extend(vars(value).values())
        else:
            weight += 8
    if stack:
        weight += len(stack) << 20
    return weight


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


class Tokens:
    """A `TokenVerifier` for one bearer token per principal (`{token: principal}`): each
    request's token is compared with every known one in constant time, and the principal it
    names is the session's (`AccessToken.subject`): its calls run for it, and it is served that
    principal's view of the tools."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        if not tokens:
            raise ValueError("MCP tokens is empty: give {token: principal} pairs (or no tokens)")
        for token, principal in tokens.items():
            if not isinstance(token, str) or not token.strip():
                raise ValueError("an MCP bearer token in tokens is empty: give non-empty tokens")
            if not isinstance(principal, str) or not principal:
                raise ValueError(
                    f"the principal of an MCP token must be a non-empty string, not {principal!r}"
                )
        self._tokens = [(token.encode(), principal) for token, principal in tokens.items()]

    async def verify_token(self, token: str) -> AccessToken | None:
        given = token.encode()
        found: str | None = None
        for known, principal in self._tokens:  # no early exit: the time does not say which matched
            if hmac.compare_digest(given, known):
                found = principal
        if found is None:
            return None
        return AccessToken(token=token, client_id="bearer-token", scopes=[], subject=found)


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
    tokens: Mapping[str, str] | None = None,
    token_verifier: TokenVerifier | None = None,
    view_of: Callable[[str | None], Any] | None = None,
    auth: AuthSettings | None = None,
    allowed_hosts: Sequence[str] = (),
    insecure_no_auth: bool = False,
    read_timeout: float = DEFAULT_READ_TIMEOUT,
    max_body: int = DEFAULT_MAX_BODY,
    max_body_buffer: int | None = None,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    max_sessions_per_principal: int = DEFAULT_MAX_SESSIONS_PER_PRINCIPAL,
    session_idle_timeout: float = DEFAULT_SESSION_IDLE_TIMEOUT,
    sse_poll_after: float | None = None,
    log_interval: float = DEFAULT_LOG_INTERVAL,
    max_views: int = DEFAULT_MAX_VIEWS,
    view_idle: float = DEFAULT_VIEW_IDLE,
    max_read_bytes: int = DEFAULT_MAX_READ_BYTES,
    name: str = DEFAULT_NAME,
    instructions: str | None = None,
    search: ToolSearch | None = None,
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
        tokens: one bearer token per principal (`{token: principal}`) instead of `token`: a
            session's calls run for its token's principal, each client has its own sessions.
        token_verifier: checks bearer tokens instead of `token` (e.g. OAuth 2.1 access tokens);
            a verified token's principal is its `subject` (or its `client_id`).
        view_of: the view a principal is served (`lambda p: rt.scoped(principal=p, ...)`):
            what it lists and may call; made once per principal. Default: every tool, each
            call run for the session's principal.
        auth: the SDK's auth settings for `token_verifier` (issuer, resource URL: served as
            protected-resource metadata, required scopes).
        allowed_hosts: more names clients may reach the server by (`mcp.example.com`,
            `10.0.0.5:8000`); the bound host and loopback names always are.
        insecure_no_auth: allow a non-loopback bind without a token.
        read_timeout: seconds a connection may stay open without sending a request, and that a
            request's body may take to arrive (longer: 408, and the connection is closed).
        max_body: the largest request body, in bytes (larger: 413).
        max_body_buffer: the most bytes of request bodies still arriving, all requests together
            (the one that would pass it: 503); None: 16 times `max_body`.
        max_sessions: the most handshake-era sessions held at once.
        max_sessions_per_principal: the most one principal holds (clamped to `max_sessions`); at
            a cap, the least recently used idle session makes room (see `_http_sessions`: with a
            static `token` or none, a principal is a client address).
        session_idle_timeout: seconds after which an unused session is closed.
        sse_poll_after: a call still running after this many seconds closes its SSE stream, and
            the client polls for the rest (SEP-1699: no connection held by a long call; the
            SDK offers it to 2025-11-25 sessions); None: streams stay open.
        max_views: the most principals' views kept at once (the least recently used goes first;
            a principal's next request makes it again).
        view_idle: seconds an unused principal's view is kept.
        max_read_bytes: the most memory `resources/read` may hold at once, each read counted as
            three copies of its artifact (its text, its JSON, the bytes written); a read waits for
            room, and one larger than this is served alone.
        log_interval: after a refused request is logged, more refusals within this many seconds
            make one line at its end (with their count), not one each.
        name: the server's name in the handshake.
        instructions: text the client may show its model about these tools.
        search: past `search.threshold` tools, list a search tool and `search.always` instead
            of every tool; what a session's searches find joins its listing (`ServedRuntime`).
        task_status: receives the bound (host, port) once the server accepts connections.

    Raises:
        ValueError: an empty token, or a non-loopback bind without a token or `insecure_no_auth`.
        OSError: the address cannot be bound (in use, not local...).
    """
    if sum(option is not None for option in (token, tokens, token_verifier)) > 1:
        raise ValueError("serve_http takes one of token, tokens and token_verifier")
    if tokens is not None:
        token_verifier = Tokens(tokens)
    check_http_options(host, token, token_verifier, insecure_no_auth)
    if max_body_buffer is None:
        max_body_buffer = BODY_BUFFER_BODIES * int(max_body) if isinstance(max_body, int) else 0
    for option, value in (
        ("read_timeout", read_timeout),
        ("max_body", max_body),
        ("max_body_buffer", max_body_buffer),
        ("max_sessions", max_sessions),
        ("max_sessions_per_principal", max_sessions_per_principal),
        ("session_idle_timeout", session_idle_timeout),
        ("log_interval", log_interval),
        ("max_views", max_views),
        ("view_idle", view_idle),
        ("max_read_bytes", max_read_bytes),
    ):
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ValueError(f"serve_http {option} must be a positive number, not {value!r}")
    if token is None and token_verifier is None and not is_loopback(host):
        log.warning("serving MCP on %s without a token: whoever reaches it can call every tool", host)
    if sse_poll_after is not None and (isinstance(sse_poll_after, bool) or sse_poll_after <= 0):
        raise ValueError(
            f"serve_http sse_poll_after must be a positive number or None, not {sse_poll_after!r}"
        )
    served = ServedRuntime(
        rt,
        name=name,
        instructions=instructions,
        sse_poll_after=sse_poll_after,
        view_of=view_of,
        max_views=max_views,
        view_idle=view_idle,
        max_read_bytes=max_read_bytes,
        search=search,
    )
    verifier: TokenVerifier | None = StaticToken(token) if token is not None else token_verifier
    if verifier is not None and auth is None:
        # The SDK installs its bearer check only with auth settings; without a resource URL it
        # serves no protected-resource metadata (a static token has no authorization server).
        auth = AuthSettings.model_validate(
            {"issuer_url": f"http://{_url_host(host)}", "resource_server_url": None}
        )
    sessions = FairSessions(
        served.server,
        event_store=RecentEvents(),
        security_settings=security_settings(host, allowed_hosts),
        retry_interval=RETRY_INTERVAL_MS,
        session_idle_timeout=session_idle_timeout,
        max_request_body_size=int(max_body),
        max_sessions=int(max_sessions),
        max_per_principal=min(int(max_sessions_per_principal), int(max_sessions)),
        by_peer=token is not None or verifier is None,  # a shared token names no one
    )
    refusals = RefusalLog(log, log_interval)
    app: ASGIApp = LogRefusals(
        BoundBodies(
            CountSent(_starlette_app(sessions, path, verifier, auth), served.reading),
            read_timeout=read_timeout,
            max_buffered=int(max_body_buffer),
        ),
        refusals,
    )
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
        with _sdk_refusal_lines_dropped():
            await _serve(config, sockets, app, served, refusals, address, path, task_status)
    finally:
        for sock in sockets.insecure_sockets:
            sock.close()


async def _serve(
    config: Config,
    sockets: Any,
    app: ASGIApp,
    served: ServedRuntime,
    refusals: RefusalLog,
    address: tuple[str, int],
    path: str,
    task_status: trio.TaskStatus[tuple[str, int]],
) -> None:
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
        nursery.start_soon(refusals.run)
        await nursery.start(run_server)
        log.info("serving MCP at http://%s:%d%s", *address, path)
        task_status.started(address)


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


def _starlette_app(
    sessions: FairSessions, path: str, verifier: TokenVerifier | None, auth: AuthSettings | None
) -> Starlette:
    """The SDK's streamable-HTTP app (as `Server.streamable_http_app` builds it from the SDK's own
    parts: bearer-token middleware, protected-resource metadata), around our session manager."""
    endpoint: ASGIApp = StreamableHTTPASGIApp(sessions)
    middleware: list[Middleware] = []
    routes: list[Route] = []
    if verifier is not None:
        assert auth is not None
        resource = auth.resource_server_url
        middleware = [
            Middleware(
                AuthenticationMiddleware,
                backend=BearerAuthBackend(
                    verifier, resource_server_url=resource if auth.validate_token_resource else None
                ),
            ),
            Middleware(AuthContextMiddleware),
        ]
        metadata_url = build_resource_metadata_url(resource) if resource else None
        endpoint = RequireAuthMiddleware(endpoint, auth.required_scopes or [], metadata_url)
    routes.append(Route(path, endpoint=endpoint))
    if auth is not None and auth.resource_server_url:
        routes.extend(
            create_protected_resource_routes(
                resource_url=auth.resource_server_url,
                authorization_servers=[auth.issuer_url],
                scopes_supported=auth.required_scopes,
            )
        )
    return Starlette(routes=routes, middleware=middleware, lifespan=lambda _: sessions.run())


# The SDK's own line for each request it refuses (some with a client's header in them):
# `RefusalLog` reports these refusals, rate-limited.
_SDK_REFUSAL_LINES = {
    "mcp.server.streamable_http_manager": ("Refusing to open a new session", "Rejecting request for session"),
    "mcp.server.transport_security": ("Missing Host header", "Invalid Host header", "Invalid Origin header"),
    "mcp.server.auth.middleware.bearer_auth": ("Bearer token resource",),
}


class _WithoutLines(logging.Filter):
    def __init__(self, prefixes: tuple[str, ...]) -> None:
        super().__init__()
        self._prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, str) and record.msg.startswith(self._prefixes))


@contextlib.contextmanager
def _sdk_refusal_lines_dropped() -> Iterator[None]:
    """While serving, the SDK's line per refused request is dropped (ours says it, rate-limited)."""
    filters = [(logging.getLogger(name), _WithoutLines(lines)) for name, lines in _SDK_REFUSAL_LINES.items()]
    for logger, quiet in filters:
        logger.addFilter(quiet)
    try:
        yield
    finally:
        for logger, quiet in filters:
            logger.removeFilter(quiet)
