"""MCP servers to connect to: `stdio(...)`, `http(...)`, `sse(...)`.

Each returns a spec: an immutable description that is also a ToolSource, so it can be passed
as `open_runtime(mcp_servers=[...])`. The runtime runs one supervised connection per spec
(see `runtime.mcp._client`); a spec holds no connection itself and may be reused.

Tool names: a server's tool `search` is called `search` in the runtime, or `{prefix}_search`
with `prefix="docs"` (`docs_search`). A name outside `^[a-zA-Z0-9_-]{1,64}$` (MCP allows
`.` and `/`, and 128 characters) has each run of other characters replaced by `_`, and a name
still too long is cut to 55 characters plus 8 hex digits of a hash; the change is logged.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

import httpx2
import msgspec
import trio
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ..tools import ToolOptions
from ._client import RemoteServer
from ._client_transport import Transport, http_transport, sse_transport, stdio_transport
from ._pins import ToolChange

if TYPE_CHECKING:
    from ..engine import ToolRegistrar

__all__ = [
    "HttpServer",
    "HttpSettings",
    "ServerSettings",
    "ServerSpec",
    "SseServer",
    "StdioServer",
    "http",
    "sse",
    "stdio",
]

DEFAULT_CALL_TIMEOUT = 60.0
_PREFIX = re.compile(r"^[a-zA-Z0-9_-]{1,32}$")
_MODES = ("legacy", "auto", *MODERN_PROTOCOL_VERSIONS)


class ServerSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What every spec has: how the connection behaves.

    Attributes:
        name: how logs and failure messages name the server.
        prefix: namespaces its tools (`{prefix}_{tool}`); None keeps the server's names.
        mode: "auto" (ask the server, `server/discover`, falling back to `initialize`),
            "legacy" (the 2025-11-25 `initialize` handshake), or a protocol version of the
            2026-07-28 era, adopted without asking.
        connect_timeout: seconds to connect and list the tools before the attempt fails.
        call_timeout: the `timeout` of each of its tools, 60 s by default (None: the runtime's
            default, which may be none: a server that never answers would hold the call).
        backoff: seconds before the first reconnect; doubles per failed attempt.
        max_backoff: the longest wait between attempts.
        max_tools: the most tools taken from the server; the rest are refused with a warning.
        requires_approval: each of its tools asks before it runs (True), or before the calls
            whose arguments (a dict) a predicate picks; see `ToolOptions.requires_approval`.
        include: the server's tools to take, by the server's names or globs (`"get_*"`); None:
            all of them.
        exclude: the server's tools to leave out, by name or glob (applied after `include`).
        options: tool options for each of its tools (`@tool`'s: `cache`, `retry`, `dedupe`,
            `rate_limit`, `breaker`, `tags`, `max_concurrency`...). `cache` reaches only the
            tools the server says are read-only (`readOnlyHint`), `retry` only those it says are
            idempotent (`idempotentHint`, or read-only): the others run every call once.
        max_links: the most `resource_link`s of one result that are read (`resources/read`):
            what they hold becomes part of the result (kept whole here too, when the runtime
            keeps artifacts); the others stay links. 0: never read.
        max_link_bytes: the most bytes read for the links of one result; a link that says it is
            larger (`size`), or whose content turns out larger, stays a link.
        pin: pin each of its tools at first sight (name, title, description, schemas,
            annotations) in the runtime's store, keyed by `name`, and hold a tool whose
            definition then changes until the change is accepted: it stays listed as pinned and
            its calls are REJECTED saying what changed (`runtime.mcp._pins`). False: off.
        on_tool_change: decides on a change, `(change: ToolChange) -> bool` (sync or async;
            True accepts it: the new definition is pinned and served). None (the default)
            refuses every change and logs it. Asked again at every listing while the tool is held.
    """

    name: str
    prefix: str | None = None
    mode: str = "auto"
    connect_timeout: float = 10.0
    call_timeout: float | None = DEFAULT_CALL_TIMEOUT
    backoff: float = 0.5
    max_backoff: float = 30.0
    max_tools: int = 1000
    requires_approval: Any = False
    include: tuple[str, ...] | None = None
    exclude: tuple[str, ...] = ()
    options: dict[str, Any] = msgspec.field(default_factory=dict)
    max_links: int = 8
    max_link_bytes: int = 16 << 20
    pin: bool = True
    on_tool_change: Any = None

    def __post_init__(self) -> None:
        if self.options:
            if not isinstance(self.options, Mapping):
                raise ValueError(f"MCP options must be a mapping of tool options, not {self.options!r}")
            try:  # checked as a tool's options would be (as if read-only: `cache` and `retry` pass)
                ToolOptions.build("an MCP server's tools", {**self.options, "read_only": True})
            except TypeError as exc:
                raise ValueError(str(exc)) from None
        if self.prefix is not None and not _PREFIX.fullmatch(self.prefix):
            raise ValueError(
                f"MCP prefix {self.prefix!r} must be 1-32 characters from a-z, A-Z, 0-9, '_' and '-'"
            )
        if not isinstance(self.pin, bool):
            raise ValueError(f"MCP pin must be True or False, not {self.pin!r}")
        if self.on_tool_change is not None and not callable(self.on_tool_change):
            raise ValueError(
                f"MCP on_tool_change must be a callable (change) -> bool, not {self.on_tool_change!r}"
            )
        if self.mode not in _MODES:
            raise ValueError(f"MCP mode must be one of {', '.join(map(repr, _MODES))}, not {self.mode!r}")
        for option in ("connect_timeout", "backoff", "max_backoff"):
            value = getattr(self, option)
            if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"MCP {option} must be a positive number of seconds, not {value!r}")
        for option in ("include", "exclude"):
            patterns = getattr(self, option)
            if patterns is not None and not all(isinstance(p, str) and p for p in patterns):
                raise ValueError(f"MCP {option} must be tool names or globs (strings), not {patterns!r}")
        if isinstance(self.max_tools, bool) or not isinstance(self.max_tools, int) or self.max_tools < 1:
            raise ValueError(f"MCP max_tools must be a positive integer, not {self.max_tools!r}")
        for option in ("max_links", "max_link_bytes"):
            value = getattr(self, option)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"MCP {option} must be an integer >= 0, not {value!r}")
        call_timeout = self.call_timeout
        if call_timeout is not None and (
            not isinstance(call_timeout, int | float) or isinstance(call_timeout, bool) or call_timeout <= 0
        ):
            raise ValueError(
                f"MCP call_timeout must be a positive number of seconds or None, not {call_timeout!r}"
            )

    def transport(self, headers: Mapping[str, str] | None = None) -> Transport:
        """A fresh SDK transport to the server (entered once per connection attempt); `headers`
        go with its requests on top of the spec's own (a principal's credentials)."""
        raise NotImplementedError

    async def run(self, registrar: ToolRegistrar, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """The ToolSource entry: connect, register the tools, keep them current, reconnect."""
        await RemoteServer(self).run(registrar, task_status=task_status)


class StdioServer(ServerSpec, frozen=True, kw_only=True):
    """A server started as a subprocess, spoken to over its stdin and stdout."""

    command: str
    args: tuple[str, ...] = ()
    env: dict[str, str] | None = None
    cwd: str | None = None

    def transport(self, headers: Mapping[str, str] | None = None) -> Transport:
        return stdio_transport(self.command, self.args, self.env, self.cwd)


class _OverHttp(ServerSpec, frozen=True, kw_only=True):
    """What both HTTP transports have: the URL, headers, auth and per-principal credentials."""

    url: str
    headers: dict[str, str] | None = None
    auth: Any = None  # an httpx2.Auth: `mcp.oauth(...)`, or any of the SDK's OAuth providers
    credentials: Any = None  # principal -> headers | None (runtime.mcp._client_pool)
    max_principal_sessions: int = 32
    principal_idle_timeout: float = 300.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.credentials is not None and not callable(self.credentials):
            raise ValueError("MCP credentials must be a callable of the principal that returns headers")
        sessions = self.max_principal_sessions
        if isinstance(sessions, bool) or not isinstance(sessions, int) or sessions < 1:
            raise ValueError(f"MCP max_principal_sessions must be a positive integer, not {sessions!r}")
        idle = self.principal_idle_timeout
        if isinstance(idle, bool) or not isinstance(idle, int | float) or idle <= 0:
            raise ValueError(f"MCP principal_idle_timeout must be a positive number of seconds, not {idle!r}")

    def _headers(self, extra: Mapping[str, str] | None) -> dict[str, str] | None:
        if not extra:
            return self.headers
        return {**(self.headers or {}), **extra}


class HttpServer(_OverHttp, frozen=True, kw_only=True):
    """A server reached over streamable HTTP."""

    def transport(self, headers: Mapping[str, str] | None = None) -> Transport:
        refusals = Refusals(self.auth)
        # a resource read for a link may be one event of max_link_bytes (base64: 4/3 of it)
        max_event = self.max_link_bytes * 3 // 2 + (1 << 20)
        return RefusalsSeen(
            http_transport(
                self.url, self._headers(headers), self.connect_timeout, auth=refusals, max_event=max_event
            ),
            refusals,
        )


class SseServer(_OverHttp, frozen=True, kw_only=True):
    """A server reached over the older HTTP+SSE transport (always the `initialize` handshake)."""

    def transport(self, headers: Mapping[str, str] | None = None) -> Transport:
        return sse_transport(self.url, self._headers(headers), self.connect_timeout, auth=self.auth)


class Refusals(httpx2.Auth):
    """The spec's auth (or none), remembering why the server last refused a request (401, 403).

    The SDK turns an HTTP refusal without a JSON-RPC body into a generic error, and in
    `mode="auto"` goes on to the `initialize` handshake, whose own failure is what it reports
    (a 2026-era server answers "Missing MCP-Protocol-Version header"): the refusal that
    started it, a 403 `insufficient_scope` say, is what the connection's failure should name.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.last: str | None = None
        if inner is not None:
            self.requires_request_body = inner.requires_request_body
            self.requires_response_body = inner.requires_response_body

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        if self.inner is None:
            response = yield request
            self._note(response)
            return
        flow = self.inner.async_auth_flow(request)
        request = await flow.__anext__()
        while True:
            response = yield request
            self._note(response)
            try:
                request = await flow.asend(response)
            except StopAsyncIteration:
                return

    def _note(self, response: httpx2.Response) -> None:
        status = response.status_code
        if status < 400:
            self.last = None  # refused before, let in since (an OAuth flow got a token)
            return
        if status not in (401, 403):
            return
        challenge = _challenge(response.headers.get("www-authenticate", ""))
        error = challenge.get("error") or ("unauthorized" if status == 401 else "forbidden")
        text = f"the server refused the request: HTTP {status} {error}"
        if challenge.get("scope"):
            text += f" (the scope it needs: {challenge['scope']})"
        if challenge.get("error_description"):
            text += f": {challenge['error_description']}"
        self.last = text


class RefusalsSeen:
    """A transport, and the refusal its requests last met (`refusal`, None when there was none)."""

    def __init__(self, transport: Transport, refusals: Refusals) -> None:
        self._transport = transport
        self._refusals = refusals

    @property
    def refusal(self) -> str | None:
        return self._refusals.last

    async def __aenter__(self) -> Any:
        return await self._transport.__aenter__()

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        return await self._transport.__aexit__(*exc_info)


_PARAM = re.compile(r'([A-Za-z_][A-Za-z0-9_-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]+))')


def _challenge(header: str) -> dict[str, str]:
    """The parameters of a `WWW-Authenticate: Bearer error="...", scope="..."` challenge."""
    return {m[1].lower(): m[2] if m[2] is not None else m[3] for m in _PARAM.finditer(header)}


class ServerSettings(TypedDict, total=False):
    """How a connection to an MCP server behaves: the keywords of `stdio`, `http` and `sse`
    (declared once here; their defaults and meanings are `ServerSpec`'s).

    Attributes:
        prefix: namespaces its tools: `{prefix}_{tool}`.
        mode: "auto", "legacy" or "2026-07-28" (not for `sse`: always "legacy").
        name: how logs and failure messages name it (default: the command line, or the URL
            without credentials or query).
        connect_timeout: seconds to start (or reach), connect and list the tools (10).
        call_timeout: the timeout of each of its tools (60 s; None: the runtime's).
        backoff: seconds before the first reconnect (0.5); doubles per failed attempt.
        max_backoff: the longest wait between attempts (30).
        max_tools: the most tools taken from the server (1000).
        requires_approval: its tools ask before they run (True, or a predicate on the arguments).
        include: only these of its tools (the server's names, or globs such as `"read_*"`).
        exclude: not these of its tools (names or globs; after `include`).
        options: tool options for each of its tools (see `ServerSpec.options`): e.g.
            `{"cache": Cache(ttl=60)}` caches the read-only ones.
        max_links: the most `resource_link`s of one result that are read (8; 0: none).
        max_link_bytes: the most bytes read for the links of one result (16 MiB).
        pin: pin its tools at first sight and hold a changed one until accepted (True).
        on_tool_change: `(change) -> bool`, sync or async: True accepts a changed tool (default:
            every change is refused and logged).
    """

    prefix: str | None
    mode: str
    name: str | None
    connect_timeout: float
    call_timeout: float | None
    backoff: float
    max_backoff: float
    max_tools: int
    requires_approval: Any
    include: Sequence[str] | None
    exclude: Sequence[str]
    options: Mapping[str, Any] | None
    max_links: int
    max_link_bytes: int
    pin: bool
    on_tool_change: Callable[[ToolChange], bool | Awaitable[bool]] | None


class HttpSettings(ServerSettings, total=False):
    """`ServerSettings`, and what an HTTP connection adds (the keywords of `http` and `sse`).

    Attributes:
        headers: sent with every request (e.g. `{"Authorization": "Bearer ..."}`).
        auth: an `httpx2.Auth` for every request: `mcp.oauth(url, ...)` for a server behind
            OAuth 2.1 (discovery, registration, PKCE, refresh and step-up by the SDK's own
            `OAuthClientProvider`), or any provider of `mcp.client.auth`.
        credentials: `principal -> headers` (or None: refused) for a session of each
            principal's own: its calls go over it, opened on its first call, closed when idle
            (see runtime.mcp._client_pool); `headers`/`auth` then list the tools only.
        max_principal_sessions: the most principals' sessions open at once (32).
        principal_idle_timeout: seconds a principal's session may be unused before it closes (300).
    """

    headers: Mapping[str, str] | None
    auth: Any
    credentials: Callable[[str], Mapping[str, str] | None] | None
    max_principal_sessions: int
    principal_idle_timeout: float


def stdio(
    command: str,
    args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    **settings: Unpack[ServerSettings],
) -> StdioServer:
    """An MCP server to start as a subprocess: `mcp.stdio("uvx", ["mcp-server-fetch"])`.

    Args:
        command: the executable.
        args: its arguments.
        env: environment variables for it, on top of a safe default set (PATH, HOME...).
        cwd: its working directory.
        **settings: how the connection behaves (`ServerSettings`).
    """
    if isinstance(args, str):
        raise TypeError("args must be a sequence of strings, not one string")
    name = settings.get("name") or settings.get("prefix") or " ".join([Path(command).name, *args])[:80]
    return StdioServer(
        command=command,
        args=tuple(args),
        env=dict(env) if env is not None else None,
        cwd=str(cwd) if cwd is not None else None,
        **_spec_fields(settings, name, "stdio"),
    )


def http(url: str, **settings: Unpack[HttpSettings]) -> HttpServer:
    """An MCP server over streamable HTTP: `mcp.http("https://example.com/mcp", headers=...)`.

    Args:
        url: the server's MCP endpoint.
        **settings: how the connection behaves (`HttpSettings`: `ServerSettings`, and the
            headers, auth and per-principal credentials of its requests).
    """
    name = settings.get("name") or settings.get("prefix") or _display_url(url)
    return HttpServer(url=url, **_spec_fields(settings, name))


def sse(url: str, **settings: Unpack[HttpSettings]) -> SseServer:
    """An MCP server over the HTTP+SSE transport of 2024-11-05: `mcp.sse("http://host/sse")`.

    Same settings as `http` (`credentials` too) but `mode`: the protocol is always the
    `initialize` handshake.
    """
    if "mode" in settings:
        raise TypeError("sse() takes no mode: the HTTP+SSE transport always uses the initialize handshake")
    name = settings.get("name") or settings.get("prefix") or _display_url(url)
    return SseServer(url=url, mode="legacy", **_spec_fields(settings, name, "sse"))


def _spec_fields(settings: Mapping[str, Any], name: str, kind: str = "http") -> dict[str, Any]:
    """The keywords of a spec from `mcp.<kind>(...)`'s settings: the sequences and mappings made
    immutable or copied, the rest as given.

    Raises:
        TypeError: a keyword the function does not take (the closest it does, named).
    """
    known = (ServerSettings if kind == "stdio" else HttpSettings).__optional_keys__
    for keyword in settings:
        if keyword not in known:
            close = difflib.get_close_matches(keyword, sorted(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TypeError(f"mcp.{kind}() got an unexpected keyword argument {keyword!r}{hint}")
    fields = dict(settings)
    fields["name"] = name
    if "include" in fields:
        fields["include"] = _patterns(fields["include"])
    if "exclude" in fields:
        fields["exclude"] = tuple(_patterns(fields["exclude"]) or ())
    if "options" in fields:
        fields["options"] = dict(fields["options"] or {})
    if "headers" in fields:
        fields["headers"] = dict(fields["headers"]) if fields["headers"] else None
    return fields


def _patterns(patterns: Sequence[str] | None) -> tuple[str, ...] | None:
    if patterns is None:
        return None
    if isinstance(patterns, str):
        raise TypeError("include and exclude take a sequence of names or globs, not one string")
    return tuple(patterns)


def _display_url(url: str) -> str:
    """`url` without credentials, query or fragment: safe to log."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url.split("?", 1)[0]
    authority, slash, path = rest.partition("/")
    host = authority.rpartition("@")[2]
    return f"{scheme}://{host}{slash}{path}".split("?", 1)[0].split("#", 1)[0]
