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

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import trio
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ._client import RemoteServer
from ._client_transport import Transport, http_transport, sse_transport, stdio_transport

if TYPE_CHECKING:
    from ..engine import ToolRegistrar

__all__ = ["HttpServer", "ServerSpec", "SseServer", "StdioServer", "http", "sse", "stdio"]

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

    def __post_init__(self) -> None:
        if self.prefix is not None and not _PREFIX.fullmatch(self.prefix):
            raise ValueError(
                f"MCP prefix {self.prefix!r} must be 1-32 characters from a-z, A-Z, 0-9, '_' and '-'"
            )
        if self.mode not in _MODES:
            raise ValueError(f"MCP mode must be one of {', '.join(map(repr, _MODES))}, not {self.mode!r}")
        for option in ("connect_timeout", "backoff", "max_backoff"):
            value = getattr(self, option)
            if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"MCP {option} must be a positive number of seconds, not {value!r}")
        if isinstance(self.max_tools, bool) or not isinstance(self.max_tools, int) or self.max_tools < 1:
            raise ValueError(f"MCP max_tools must be a positive integer, not {self.max_tools!r}")
        call_timeout = self.call_timeout
        if call_timeout is not None and (
            not isinstance(call_timeout, int | float) or isinstance(call_timeout, bool) or call_timeout <= 0
        ):
            raise ValueError(
                f"MCP call_timeout must be a positive number of seconds or None, not {call_timeout!r}"
            )

    def transport(self) -> Transport:
        """A fresh SDK transport to the server (entered once per connection attempt)."""
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

    def transport(self) -> Transport:
        return stdio_transport(self.command, self.args, self.env, self.cwd)


class HttpServer(ServerSpec, frozen=True, kw_only=True):
    """A server reached over streamable HTTP."""

    url: str
    headers: dict[str, str] | None = None
    auth: Any = None  # an httpx2.Auth: `mcp.oauth(...)`, or any of the SDK's OAuth providers

    def transport(self) -> Transport:
        return http_transport(self.url, self.headers, self.connect_timeout, auth=self.auth)


class SseServer(ServerSpec, frozen=True, kw_only=True):
    """A server reached over the older HTTP+SSE transport (always the `initialize` handshake)."""

    url: str
    headers: dict[str, str] | None = None
    auth: Any = None  # an httpx2.Auth, as for `http`

    def transport(self) -> Transport:
        return sse_transport(self.url, self.headers, self.connect_timeout, auth=self.auth)


def stdio(
    command: str,
    args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    prefix: str | None = None,
    mode: str = "auto",
    name: str | None = None,
    connect_timeout: float = 10.0,
    call_timeout: float | None = DEFAULT_CALL_TIMEOUT,
    backoff: float = 0.5,
    max_backoff: float = 30.0,
    max_tools: int = 1000,
    requires_approval: Any = False,
) -> StdioServer:
    """An MCP server to start as a subprocess: `mcp.stdio("uvx", ["mcp-server-fetch"])`.

    Args:
        command: the executable.
        args: its arguments.
        env: environment variables for it, on top of a safe default set (PATH, HOME...).
        cwd: its working directory.
        prefix: namespaces its tools: `{prefix}_{tool}`.
        mode: "auto", "legacy" or "2026-07-28" (see `ServerSpec`).
        name: how logs name it (default: the command line).
        connect_timeout: seconds to start, connect and list the tools.
        call_timeout: the timeout of each of its tools (default 60 s; None: the runtime's).
        backoff: seconds before the first restart; doubles per failed attempt.
        max_backoff: the longest wait between attempts.
        max_tools: the most tools taken from the server (default 1000).
        requires_approval: its tools ask before they run (True, or a predicate on the arguments).
    """
    if isinstance(args, str):
        raise TypeError("args must be a sequence of strings, not one string")
    return StdioServer(
        name=name or prefix or " ".join([Path(command).name, *args])[:80],
        command=command,
        args=tuple(args),
        env=dict(env) if env is not None else None,
        cwd=str(cwd) if cwd is not None else None,
        prefix=prefix,
        mode=mode,
        connect_timeout=connect_timeout,
        call_timeout=call_timeout,
        backoff=backoff,
        max_backoff=max_backoff,
        max_tools=max_tools,
        requires_approval=requires_approval,
    )


def http(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    prefix: str | None = None,
    mode: str = "auto",
    name: str | None = None,
    connect_timeout: float = 10.0,
    call_timeout: float | None = DEFAULT_CALL_TIMEOUT,
    backoff: float = 0.5,
    max_backoff: float = 30.0,
    max_tools: int = 1000,
    requires_approval: Any = False,
    auth: Any = None,
) -> HttpServer:
    """An MCP server over streamable HTTP: `mcp.http("https://example.com/mcp", headers=...)`.

    Args:
        url: the server's MCP endpoint.
        headers: sent with every request (e.g. `{"Authorization": "Bearer ..."}`).
        auth: an `httpx2.Auth` for every request: `mcp.oauth(url, ...)` for a server behind
            OAuth 2.1 (discovery, registration, PKCE, refresh and step-up by the SDK's own
            `OAuthClientProvider`), or any provider of `mcp.client.auth`.
        prefix: namespaces its tools: `{prefix}_{tool}`.
        mode: "auto", "legacy" or "2026-07-28" (see `ServerSpec`).
        name: how logs name it (default: the URL without credentials or query).
        connect_timeout: seconds to connect and list the tools.
        call_timeout: the timeout of each of its tools (default 60 s; None: the runtime's).
        backoff: seconds before the first reconnect; doubles per failed attempt.
        max_backoff: the longest wait between attempts.
        max_tools: the most tools taken from the server (default 1000).
        requires_approval: its tools ask before they run (True, or a predicate on the arguments).
    """
    return HttpServer(
        name=name or prefix or _display_url(url),
        url=url,
        headers=dict(headers) if headers else None,
        prefix=prefix,
        mode=mode,
        connect_timeout=connect_timeout,
        call_timeout=call_timeout,
        backoff=backoff,
        max_backoff=max_backoff,
        max_tools=max_tools,
        requires_approval=requires_approval,
        auth=auth,
    )


def sse(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    prefix: str | None = None,
    name: str | None = None,
    connect_timeout: float = 10.0,
    call_timeout: float | None = DEFAULT_CALL_TIMEOUT,
    backoff: float = 0.5,
    max_backoff: float = 30.0,
    max_tools: int = 1000,
    requires_approval: Any = False,
    auth: Any = None,
) -> SseServer:
    """An MCP server over the HTTP+SSE transport of 2024-11-05: `mcp.sse("http://host/sse")`.

    Same options as `http`; the protocol is always the `initialize` handshake.
    """
    return SseServer(
        name=name or prefix or _display_url(url),
        url=url,
        headers=dict(headers) if headers else None,
        prefix=prefix,
        mode="legacy",
        connect_timeout=connect_timeout,
        call_timeout=call_timeout,
        backoff=backoff,
        max_backoff=max_backoff,
        max_tools=max_tools,
        requires_approval=requires_approval,
        auth=auth,
    )


def _display_url(url: str) -> str:
    """`url` without credentials, query or fragment: safe to log."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url.split("?", 1)[0]
    authority, slash, path = rest.partition("/")
    host = authority.rpartition("@")[2]
    return f"{scheme}://{host}{slash}{path}".split("?", 1)[0].split("#", 1)[0]
