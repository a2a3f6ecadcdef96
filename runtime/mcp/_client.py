"""One supervised connection to an MCP server: the ToolSource behind `mcp.stdio(...)` and friends.

Life of a connection (each turn of the loop is one session with the server)::

    connect ─▶ (2026-07-28: subscriptions/listen) ─▶ tools/list, every page ─▶ register the tools
       ▲                                                                          │
       │  fails       tools/list_changed (2025-11-25) or a listen event (2026-07-28):
       │              tools/list again; unregister removed, register new and changed
       │                                                                          ▼
    backoff (doubling, capped) ◀── the server exits, the stream breaks ◀── serve calls
                                   (calls in flight fail UNAVAILABLE)

- The first attempt reports to `open_runtime` whether it worked or not (`task_status.started()`),
  so a server that never starts delays nothing: its tools are absent, one log line says why,
  and the connection keeps trying in the background.
- While disconnected the tools stay registered and fail UNAVAILABLE at once; calls in flight
  when the connection drops fail UNAVAILABLE too (none hang).
- Tools are listed when the connection opens and when the server says they changed, never
  per call. A name another tool already has is not taken over: that tool is skipped and logged.
- A cancelled call cancels its MCP request (the SDK sends `notifications/cancelled`).
- Progress notifications are logged at DEBUG and added as `mcp.progress` events to the
  call's `execute_tool` span.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types as types
import msgspec
import trio
from mcp import Client, MCPError
from mcp.client.subscriptions import SubscriptionLost
from mcp_types import CONNECTION_CLOSED, INVALID_PARAMS, INVALID_REQUEST, Implementation
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from opentelemetry import trace

from ..exceptions import RuntimeClosed, ToolRejected, ToolUnavailable
from ..schema import descriptor_from_json_schema, parse_json_schema
from ..schema._to_python import arguments_struct
from ..tools import ArgsCodec, CallContext
from ._client_tool import McpTool, local_name
from ._client_transport import WatchedTransport

if TYPE_CHECKING:
    from ..engine import ToolRegistrar
    from ._client_specs import ServerSpec

__all__ = ["Connection"]

log = logging.getLogger("runtime.mcp")

_MAX_PAGES = 1000  # a server whose cursors never end cannot hang a listing
_STABLE = 10.0  # seconds a session must last for the backoff to start over
_CLIENT_INFO = Implementation(name="tool-runtime", version="0.1.0")
_FINGERPRINT = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")


class _Link:
    """One session with the server; replaced at every reconnect."""

    __slots__ = ("calls", "client", "dirty", "lost", "wake")

    def __init__(self) -> None:
        self.client: Client | None = None
        self.calls: set[trio.CancelScope] = set()
        self.dirty = False
        self.lost: str | None = None
        self.wake = trio.Event()

    def mark_dirty(self) -> None:
        self.dirty = True
        self.wake.set()

    def mark_lost(self, reason: str) -> None:
        if self.lost is None:
            self.lost = reason
        self.wake.set()

    def close(self) -> None:
        for scope in self.calls:
            scope.cancel()

    async def on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.mark_dirty()
        elif isinstance(message, Exception):
            log.debug("MCP transport reported %r", message)


class Connection:
    """Runs one spec: connects, keeps its tools registered and current, serves their calls."""

    def __init__(self, spec: ServerSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.link: _Link | None = None
        self.last_error = "it has not connected yet"
        self.tools: dict[str, tuple[McpTool, dict[str, Any]]] = {}  # local name -> (tool, listing entry)
        self._ready: Any = trio.TASK_STATUS_IGNORED
        self._up = False  # whether the current session got as far as registering the tools
        self._skipped: set[str] = set()  # names already logged as clashing

    # -- the connection's life -------------------------------------------------------

    async def run(self, registrar: ToolRegistrar, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Connect, serve, reconnect with backoff, until cancelled."""
        spec = self.spec
        self._ready = task_status
        failures = 0
        was_up = False
        try:
            while True:
                began = trio.current_time()
                self._up = False
                try:
                    reason = await self._session(registrar)
                except BaseException as exc:
                    if _escapes(exc):
                        raise
                    reason = _describe(exc)
                self.last_error = reason
                up = self._up
                if up and trio.current_time() - began >= _STABLE:
                    failures = 0
                delay = min(spec.max_backoff, spec.backoff * 2**failures)
                failures += 1
                if self._ready is not trio.TASK_STATUS_IGNORED:
                    log.error(
                        "MCP server %r did not start: %s; its tools are absent until it does "
                        "(retrying in the background)",
                        self.name,
                        reason,
                    )
                    self._started()
                elif up:
                    log.warning("lost MCP server %r: %s; reconnecting in %.2gs", self.name, reason, delay)
                elif was_up:
                    log.warning("MCP server %r is still unavailable: %s", self.name, reason)
                else:
                    log.debug("MCP server %r is still unavailable: %s", self.name, reason)
                was_up = up
                await trio.sleep(delay)
        except RuntimeClosed:  # the runtime is shutting down
            self._started()

    def _started(self) -> None:
        ready, self._ready = self._ready, trio.TASK_STATUS_IGNORED
        ready.started()

    async def _session(self, registrar: ToolRegistrar) -> str:
        """One session: returns (or raises) why it ended; sets `_up` once the tools are registered."""
        spec = self.spec
        link = _Link()
        client = Client(
            WatchedTransport(spec.transport(), lambda: link.mark_lost("the server closed the connection")),
            mode=spec.mode,
            cache=None,  # the listing is re-read on change; a cached page would be stale
            message_handler=link.on_message,
            logging_callback=self._server_log,
            client_info=_CLIENT_INFO,
        )
        with trio.CancelScope(deadline=trio.current_time() + spec.connect_timeout) as connecting:
            async with client, trio.open_nursery() as nursery:
                if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
                    await nursery.start(self._listen, client, link)  # before listing: no change is missed
                listing = await self._list(client)
                connecting.deadline = math.inf
                link.client = client
                self.link = link
                try:
                    await self._apply(registrar, listing)
                    self._up = True
                    log.info(
                        "connected to MCP server %r (protocol %s, %d tools)",
                        self.name,
                        client.protocol_version,
                        len(self.tools),
                    )
                    self._started()
                    while True:
                        await link.wake.wait()
                        link.wake = trio.Event()
                        if link.lost is not None:
                            break
                        if link.dirty:
                            link.dirty = False
                            await self._apply(registrar, await self._list(client))
                finally:
                    self.link = None
                    link.mark_lost("the connection was closed")  # unless it already had a reason
                    link.close()
                    nursery.cancel_scope.cancel()
        if connecting.cancelled_caught:
            return f"no answer within {spec.connect_timeout:g}s"
        return link.lost or "the session ended"

    async def _listen(
        self, client: Client, link: _Link, *, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        """2026-07-28: tools/list_changed arrives through a `subscriptions/listen` stream."""
        started = False
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                task_status.started()
                started = True
                async for _ in subscription:
                    link.mark_dirty()
            link.mark_lost("the server closed its subscriptions/listen stream")
        except SubscriptionLost as exc:
            link.mark_lost(f"its change stream broke ({exc})")
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED or started:
                link.mark_lost(f"its change stream failed ({exc.error.message})")
            else:
                log.info(
                    "MCP server %r does not offer subscriptions/listen (%s); its tools are listed once "
                    "per connection",
                    self.name,
                    exc.error.message,
                )
        finally:
            if not started:
                task_status.started()

    async def _list(self, client: Client) -> list[types.Tool]:
        tools: list[types.Tool] = []
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(_MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                return tools
            if cursor in seen:
                raise RuntimeError(f"tools/list returned the cursor {cursor!r} twice")
            seen.add(cursor)
        raise RuntimeError(f"tools/list did not end within {_MAX_PAGES} pages")

    async def _server_log(self, params: types.LoggingMessageNotificationParams) -> None:
        log.debug("MCP server %r logged (%s): %s", self.name, params.level, params.data)

    # -- the tools -------------------------------------------------------------------

    async def _apply(self, registrar: ToolRegistrar, listing: list[types.Tool]) -> None:
        """Make the registered tools match `listing`: remove, replace and add only what changed."""
        wanted: dict[str, tuple[types.Tool, dict[str, Any]]] = {}
        for remote in listing:
            name = local_name(remote.name, self.spec.prefix)
            if name is None:
                log.warning(
                    "MCP server %r: tool %r is skipped: no usable name is left", self.name, remote.name
                )
                continue
            if name in wanted:
                log.warning(
                    "MCP server %r: tools %r and %r are both called %r here; the first is kept",
                    self.name,
                    wanted[name][0].name,
                    remote.name,
                    name,
                )
                continue
            entry = remote.model_dump(mode="json", by_alias=True, exclude_none=True)
            wanted[name] = (remote, {k: entry[k] for k in _FINGERPRINT if k in entry})
        removed = [n for n in self.tools if n not in wanted]
        fresh: dict[str, tuple[McpTool, dict[str, Any]]] = {}
        for name, (remote, entry) in wanted.items():
            known = self.tools.get(name)
            if known is not None and known[1] == entry:
                continue
            made = self._make(name, remote)
            if made is None:
                if known is not None:
                    removed.append(name)
                continue
            fresh[name] = (made, entry)
        if removed:
            await registrar.unregister(*removed)
            for name in removed:
                del self.tools[name]
        replacing = [tool for name, (tool, _) in fresh.items() if name in self.tools]
        if replacing:
            await registrar.register(*replacing, replace=True)
            self.tools.update({n: fresh[n] for n in (t.name for t in replacing)})
        adding = [tool for name, (tool, _) in fresh.items() if name not in self.tools]
        if not adding:
            return
        try:
            await registrar.register(*adding)
        except ValueError:  # a name is taken by another tool: add the others one by one
            for tool in adding:
                try:
                    await registrar.register(tool)
                except ValueError as exc:
                    level = logging.DEBUG if tool.name in self._skipped else logging.WARNING
                    self._skipped.add(tool.name)
                    log.log(
                        level,
                        "MCP server %r: tool %r is skipped: %s (give the server a prefix=)",
                        self.name,
                        tool.name,
                        exc,
                    )
                else:
                    self.tools[tool.name] = fresh[tool.name]
        else:
            self.tools.update({t.name: fresh[t.name] for t in adding})

    def _make(self, name: str, remote: types.Tool) -> McpTool | None:
        """The runtime tool for a listed tool, or None (logged) when its schema cannot be used."""
        prefix = self.spec.prefix
        if name != (f"{prefix}_{remote.name}" if prefix else remote.name):
            log.info("MCP server %r: tool %r is called %r here", self.name, remote.name, name)
        annotations = remote.annotations
        try:
            descriptor = descriptor_from_json_schema(
                name,
                remote.description or "",
                remote.input_schema,
                title=remote.title or (annotations.title if annotations is not None else None),
                annotations=annotations.model_dump(by_alias=True, exclude_none=True) if annotations else None,
            )
            struct, loosened = arguments_struct(descriptor)
            codec = ArgsCodec(struct, fill=[(n, msgspec.UNSET, None) for n in loosened])
        except Exception as exc:
            log.warning(
                "MCP server %r: tool %r is skipped: its inputSchema cannot be used (%s)",
                self.name,
                remote.name,
                exc,
            )
            return None
        if remote.output_schema is not None:
            descriptor = self._with_output(descriptor, remote)
        return McpTool(
            name=name,
            remote_name=remote.name,
            server=self.name,
            descriptor=descriptor,
            codec=codec,
            caller=self.call,
            timeout=self.spec.call_timeout,
        )

    def _with_output(self, descriptor: Any, remote: types.Tool) -> Any:
        """The descriptor with the tool's outputSchema as its `output` type, when it parses."""
        try:
            output, definitions = parse_json_schema(remote.output_schema)
        except Exception as exc:
            log.debug("MCP server %r: the outputSchema of %r is not kept (%s)", self.name, remote.name, exc)
            return descriptor
        if set(definitions) & set(descriptor.definitions):
            log.debug(
                "MCP server %r: the outputSchema of %r is not kept (its $defs clash)", self.name, remote.name
            )
            return descriptor
        return msgspec.structs.replace(
            descriptor, output=output, definitions={**descriptor.definitions, **definitions}
        )

    # -- calls -----------------------------------------------------------------------

    async def call(self, tool: McpTool, args: Any, ctx: CallContext | None) -> types.CallToolResult:
        """Send one `tools/call` for `tool` with its checked `args`.

        Raises:
            ToolUnavailable: not connected, or the connection dropped during the call.
            ToolRejected: the server refused the arguments (JSON-RPC invalid params).
            MCPError: any other error the server answered with (reported as ERROR).
        """
        link = self.link
        client = link.client if link is not None else None
        if link is None or client is None:
            raise ToolUnavailable(
                f"MCP server {self.name!r} is not connected ({self.last_error}); reconnecting"
            )
        arguments = msgspec.to_builtins(args)
        span = trace.get_current_span()
        call_id = ctx.call_id if ctx is not None else "?"

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            log.debug(
                "MCP tool %r (call %s): progress %s/%s %s", tool.name, call_id, progress, total, message or ""
            )
            if span.is_recording():
                attributes: dict[str, Any] = {"mcp.progress": progress}
                if total is not None:
                    attributes["mcp.progress.total"] = total
                if message:
                    attributes["mcp.progress.message"] = message
                span.add_event("mcp.progress", attributes)

        with trio.CancelScope() as scope:
            link.calls.add(scope)
            try:
                return await client.call_tool(tool.remote_name, arguments, progress_callback=on_progress)
            except MCPError as exc:
                if exc.code == CONNECTION_CLOSED or _session_gone(exc):
                    link.mark_lost(f"the connection was lost during a call ({exc.error.message})")
                    raise ToolUnavailable(
                        f"the connection to MCP server {self.name!r} was lost during the call "
                        f"({exc.error.message}); reconnecting"
                    ) from None
                if exc.code == INVALID_PARAMS:
                    raise ToolRejected(exc.error.message) from None
                raise
            except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                link.mark_lost(f"the connection broke during a call ({exc!r})")
                raise ToolUnavailable(
                    f"the connection to MCP server {self.name!r} broke during the call; reconnecting"
                ) from None
            finally:
                link.calls.discard(scope)
        raise ToolUnavailable(
            f"MCP server {self.name!r} was lost during the call ({link.lost}); reconnecting"
        )


def _session_gone(exc: MCPError) -> bool:
    """The HTTP server no longer knows this session (it restarted): its 404 as the SDK reports it.

    The SDK keeps no status code: it passes the server's JSON-RPC error ("Session not found")
    or makes one of its own ("Session terminated"), both INVALID_REQUEST.
    """
    return exc.code == INVALID_REQUEST and "session" in exc.error.message.lower()


def _escapes(exc: BaseException) -> bool:
    """Whether `exc` must leave the connection loop: Ctrl-C, or this task being cancelled."""
    if isinstance(exc, KeyboardInterrupt):
        return True
    if isinstance(exc, BaseExceptionGroup) and exc.subgroup(KeyboardInterrupt) is not None:
        return True
    cancelled = isinstance(exc, trio.Cancelled) or (
        isinstance(exc, BaseExceptionGroup) and exc.subgroup(trio.Cancelled) is not None
    )
    # A Cancelled with no cancelled scope around this task would be a bug elsewhere; treat it as
    # a failed session rather than take the runtime down with it.
    return cancelled and trio.current_effective_deadline() == -math.inf


def _describe(exc: BaseException) -> str:
    """One line saying why a session failed (the first leaf of an exception group)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return exc.error.message
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
