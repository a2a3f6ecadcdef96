"""The SDK transports a connection opens, and a watch on their read side.

An MCP session has no event for "the server went away": when a stdio server exits, the
SDK's dispatcher sees its read stream end, wakes the requests waiting on it and stops, and
nobody else hears of it. `WatchedTransport` wraps a transport so that the end of its read
stream (the server exited, the stream broke) is reported at once, and the connection
reconnects before the next call instead of failing it.

It also reads each response before the SDK does, to take what real servers send:

- a `tools/list` page where one tool's entry does not validate (`inputSchema.type` 5): that
  tool is left out with a warning naming it, instead of the whole page failing;
- a result without `resultType` (a 2025-era habit, required from 2026-07-28): read as
  `"complete"`, as the spec says absent means (and a listing without cache hints: not cached).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pydantic
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage
from mcp_types.methods import validate_server_result

__all__ = ["TransportStreams", "http_transport", "sse_transport", "stdio_transport", "WatchedTransport"]

TransportStreams = tuple[Any, Any]  # (read stream, write stream) as the SDK's Transport yields them
Transport = AbstractAsyncContextManager[TransportStreams]

_SSE_READ_TIMEOUT = 300.0  # a server may keep a response stream quiet for long
_MAX_EVENT = 1 << 20  # the SDK's own bound on one server-sent event

log = logging.getLogger("runtime.mcp")
_ERAS = ("2025-11-25", "2026-07-28")
_EMPTY_PAGE = {"resultType": "complete", "ttlMs": 0, "cacheScope": "private"}


def stdio_transport(
    command: str,
    args: tuple[str, ...],
    env: Mapping[str, str] | None,
    cwd: str | Path | None,
) -> Transport:
    """Start `command` as a subprocess and talk MCP over its stdin / stdout.

    The server's stderr goes to this process's stderr.
    """
    params = StdioServerParameters(
        command=command, args=list(args), env=dict(env) if env is not None else None, cwd=cwd
    )
    return stdio_client(params, errlog=sys.stderr)


@contextlib.asynccontextmanager
async def http_transport(
    url: str,
    headers: Mapping[str, str] | None,
    connect_timeout: float,
    *,
    auth: Any = None,
    max_event: int = _MAX_EVENT,
) -> AsyncIterator[TransportStreams]:
    """Streamable HTTP to `url`, with `headers` (and `auth`, an httpx2.Auth) on every request;
    one server-sent event (a result, a resource read) may hold up to `max_event` bytes."""
    timeout = httpx2.Timeout(connect_timeout, read=_SSE_READ_TIMEOUT)
    async with (
        httpx2.AsyncClient(headers=dict(headers) if headers else None, timeout=timeout, auth=auth) as client,
        streamable_http_client(
            url, http_client=client, max_sse_event_size=max(_MAX_EVENT, max_event)
        ) as streams,
    ):
        yield streams


def sse_transport(
    url: str, headers: Mapping[str, str] | None, connect_timeout: float, *, auth: Any = None
) -> Transport:
    """The 2024-11-05 HTTP+SSE transport (servers that predate streamable HTTP)."""
    return sse_client(
        url,
        headers=dict(headers) if headers else None,
        timeout=connect_timeout,
        sse_read_timeout=_SSE_READ_TIMEOUT,
        auth=auth,
    )


class WatchedTransport:
    """`transport`, calling `on_end()` once its read stream ends or breaks; responses made readable."""

    def __init__(self, transport: Transport, on_end: Callable[[], None], server: str = "?") -> None:
        self._transport = transport
        self._on_end = on_end
        self._server = server
        self._read: _WatchedRead | None = None

    async def __aenter__(self) -> TransportStreams:
        read, write = await self._transport.__aenter__()
        self._read = _WatchedRead(read, self._on_end, self._server)
        return self._read, write

    def negotiated(self, modern: bool) -> None:
        """The session's protocol era is known: a pre-2026 one needs no `resultType` (the SDK
        would only take it out again)."""
        if self._read is not None:
            self._read.modern = modern

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        return await self._transport.__aexit__(exc_type, exc, tb)


class _WatchedRead:
    """A read stream (the SDK's `ReadStream` protocol) that reports its own end."""

    __slots__ = ("_inner", "_on_end", "_server", "modern")

    def __init__(self, inner: Any, on_end: Callable[[], None], server: str = "?") -> None:
        self._inner = inner
        self._on_end = on_end
        self._server = server
        self.modern = True  # until the handshake says otherwise: responses get `resultType`

    @property
    def last_context(self) -> Any:
        # The SDK's context-carrying streams expose the sender's contextvars here.
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        try:
            item: SessionMessage | Exception = await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise
        if isinstance(item, SessionMessage) and isinstance(item.message, types.JSONRPCResponse):
            readable(item.message.result, self._server, self.modern)
        return item

    async def aclose(self) -> None:
        await self._inner.aclose()

    def close(self) -> None:
        close = getattr(self._inner, "close", None)
        if close is not None:
            close()

    def __aiter__(self) -> _WatchedRead:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _WatchedRead:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


def readable(result: dict[str, Any], server: str, modern: bool = True) -> None:
    """Make a response's result what the SDK accepts, in place (see the module's docstring)."""
    if type(result) is not dict:
        return
    if modern:
        result.setdefault("resultType", "complete")
    listed = result.get("tools")
    if isinstance(listed, list):
        result.setdefault("ttlMs", 0)
        result.setdefault("cacheScope", "private")
        kept: list[Any] = []
        for entry in listed:
            try:
                for version in _ERAS:  # the page is checked as the SDK checks it, one tool at a time
                    validate_server_result("tools/list", version, {**_EMPTY_PAGE, "tools": [entry]})
            except pydantic.ValidationError as exc:
                name = entry.get("name") if isinstance(entry, dict) else None
                problem = exc.errors()[0]
                where = ".".join(str(p) for p in problem["loc"])
                log.warning(
                    "MCP server %r: tool %r is skipped: the MCP SDK refuses its listing (%s: %s)",
                    server,
                    name,
                    where,
                    problem["msg"],
                )
            else:
                kept.append(entry)
        if len(kept) != len(listed):
            result["tools"] = kept
