"""One supervised connection to an MCP server (`RemoteServer`): what runs a spec's `run`.

The connection's life is here; what the listed tools become (and keeping the registry
current) is `RemoteCatalog`'s, in `_client_catalog`. Neither imports the specs: they read
a spec through `ServerOptions`.

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
  when the connection drops fail UNAVAILABLE too (none hang; a call following a remote task
  follows it again over the next connection instead): the session's SDK `Client` is
  closed, and it answers every request still waiting CONNECTION_CLOSED.
- Tools are listed when the connection opens and when the server says they changed, never
  per call. A name another tool already has is not taken over: that tool is skipped and logged.
- A cancelled call cancels its MCP request (the SDK sends `notifications/cancelled`).
- Tools not served because their pins could not be read (the store is down, `_pins`) are
  reviewed again from the last listing, with the spec's backoff, until the store answers.
- Progress notifications reach the caller as a local tool's `ctx.report_progress` would
  (a `tool.progress` event on the call's span, the caller's `reporting(on_progress=...)`);
  the server's log messages go to the `runtime.mcp` logger.
- The listen stream (2026-07-28) is opened only when the server announced
  `tools.listChanged`; when it ends it is reopened with backoff, never in the way of calls.
- A JSON-RPC error the server answers a call with is ERROR for that call (the connection
  stays); only the connection going away is UNAVAILABLE, and a 2026-07-28 server's -32021
  (this client lacks a capability the tool needs: elicitation, sampling, roots), which
  names the handler to give.
- A server's questions (elicitation, sampling, roots) go to the runtime's handlers saying
  which server asked and, where it can be told, for which of the runtime's calls.
- A tool the server runs as a task (SEP-2663 `taskSupport` "required", or "optional" for a
  call detached here; a server that declares the extension but lists no tool's support, as
  FastMCP's at 2026-07-28, is offered a task for a detached call, and a tool it refuses with
  -32021 naming the extension is called again as a task, and from then on, as "required")
  is followed to its end by polling (`_client_tasks`): its questions are
  asked through the call's own asking flow, and cancelling the call cancels the task. A
  connection lost while a task is followed does not end the call: the same task is followed
  over the next connection (within the call's deadline, and `_REATTACH_WITHIN`); a detached
  call journals its task's id, and its run after a restart follows that task. The server's
  status notifications for the task (`notifications/tasks`) wake the poll early.
- A connection refused at the HTTP level (401, 403 `insufficient_scope`) is reported as
  that, even where the SDK went on to another handshake and reports that one's failure.
"""

from __future__ import annotations

import hashlib
import logging
import math
import secrets
import warnings
from collections.abc import Coroutine
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types as types
import msgspec
import trio
from mcp import Client, MCPError
from mcp.client.subscriptions import SubscriptionLost
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp_types import (
    CONNECTION_CLOSED,
    INVALID_PARAMS,
    INVALID_REQUEST,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    Implementation,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from opentelemetry import trace

from ..exceptions import CannotAsk, RuntimeClosed, ToolRejected, ToolUnavailable
from ..tools import CallContext
from ..tools.lowlevel import is_cancellation
from ._asking import client_callbacks
from ._client_catalog import RemoteCatalog, ServerOptions
from ._client_pool import Held, SessionPool
from ._client_tasks import (
    CANCEL_TIMEOUT,
    TASKS,
    TaskCall,
    TasksExtension,
    as_task,
    cancel_task,
    declare_per_call,
    journaled_task,
    poll,
    tasking,
)
from ._client_tool import McpTool
from ._client_transport import WatchedTransport

if TYPE_CHECKING:
    from ..engine import ToolRegistrar

__all__ = ["RemoteServer"]

log = logging.getLogger("runtime.mcp")
remote_log = logging.getLogger("runtime.mcp.remote")  # what servers log (notifications/message)
_PYTHON_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "notice": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "alert": logging.CRITICAL,
    "emergency": logging.CRITICAL,
}

_MAX_PAGES = 1000  # a server whose cursors never end cannot hang a listing
_STABLE = 10.0  # seconds a session must last for the backoff to start over
_REATTACH_WITHIN = 300.0  # seconds a call whose task lost its connection waits for the next one
_CLIENT_INFO = Implementation(name="tool-runtime", version="0.1.0")


class _Link:
    """One session with the server; replaced at every reconnect."""

    __slots__ = ("client", "dirty", "lost", "wake")

    def __init__(self) -> None:
        self.client: Client | None = None
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

    async def on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.mark_dirty()
        elif isinstance(message, Exception):
            log.debug("MCP transport reported %r", message)


class RemoteServer:
    """Runs one spec: the connection's life (connect, listen, reconnect) and its tools' calls.

    What the server's tools become here, and keeping them current in the registry, is its
    `catalog`'s work (`RemoteCatalog`).
    """

    def __init__(self, spec: ServerOptions) -> None:
        self.spec = spec
        self.name = spec.name
        self.catalog = RemoteCatalog(spec, self.call)
        self.link: _Link | None = None
        self.last_error = "it has not connected yet"
        self._ready: Any = trio.TASK_STATUS_IGNORED
        self._up = False  # whether the current session got as far as registering the tools
        self._transport: Any = None  # the current session's transport (it may know a refusal)
        self._in_flight: dict[int, tuple[str, str | None]] = {}  # calls being served: (tool, call id)
        self._linked = trio.Event()  # set (and replaced) each time a new session is open
        self._nursery: trio.Nursery | None = None  # the connection's own background work
        credentials = getattr(spec, "credentials", None)
        self.pool = (
            SessionPool(
                self.name,
                credentials,
                self._principal_session,
                _describe,
                max_sessions=getattr(spec, "max_principal_sessions", 32),
                idle_timeout=getattr(spec, "principal_idle_timeout", 300.0),
            )
            if credentials is not None
            else None
        )

    # -- the connection's life -------------------------------------------------------

    async def run(self, registrar: ToolRegistrar, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Connect, serve, reconnect with backoff, until cancelled."""
        async with trio.open_nursery() as sessions:  # the principals' own sessions (if any)
            if self.pool is not None:
                self.pool.nursery = sessions
            self._nursery = sessions  # and the tasks/cancel of calls that ended disconnected
            try:
                await self._connect(registrar, task_status)
            finally:
                self._nursery = None
                sessions.cancel_scope.cancel()

    async def _connect(self, registrar: ToolRegistrar, task_status: Any) -> None:
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
                    refusal = getattr(self._transport, "refusal", None)
                    if refusal and not self._up:  # what the SDK's own error hides (auto mode falls back)
                        reason = f"{refusal} (the connection then failed: {reason})"
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
        self._transport = transport = spec.transport()
        watched = WatchedTransport(
            transport, lambda: link.mark_lost("the server closed the connection"), self.name
        )
        tasks = TasksExtension()
        client = Client(
            watched,
            mode=spec.mode,
            cache=None,  # the listing is re-read on change; a cached page would be stale
            message_handler=link.on_message,
            logging_callback=self._server_log,
            log_level="info",  # 2026-07-28: log messages come only to requests that ask for them
            client_info=_CLIENT_INFO,
            extensions=[tasks],  # a remote tool's task (SEP-2663), followed to its end
            # a server's elicitation / sampling / roots requests (and 2026-07-28 input-required
            # results, followed for a bounded number of rounds) go to the runtime's handlers
            **client_callbacks(getattr(registrar, "asking", None), server=self.name, who=self.asking_call),
        )
        with trio.CancelScope(deadline=trio.current_time() + spec.connect_timeout) as connecting:
            async with client, trio.open_nursery() as nursery:
                watched.negotiated(client.protocol_version in MODERN_PROTOCOL_VERSIONS)
                _read_unstructured(client)
                declare_per_call(client.session, tasks)
                capabilities = client.server_capabilities
                # A version adopted without asking (mode="2026-07-28") learned no capabilities:
                # listening is tried, and a refusal is taken as the answer.
                adopted = spec.mode in MODERN_PROTOCOL_VERSIONS
                announces = adopted or bool(
                    capabilities.tools is not None and capabilities.tools.list_changed
                )
                if client.protocol_version in MODERN_PROTOCOL_VERSIONS and announces:
                    await nursery.start(self._listen, client, link)  # before listing: no change is missed
                if (
                    client.protocol_version not in MODERN_PROTOCOL_VERSIONS
                    and capabilities.logging is not None
                ):
                    await _ask_info_logs(client)  # as `log_level` does per request in 2026-07-28
                listing = await self._list(client)
                connecting.deadline = math.inf
                link.client = client
                self.link = link
                linked, self._linked = self._linked, trio.Event()
                linked.set()  # a call that lost its task's connection follows it over this one
                try:
                    await self.catalog.apply(registrar, listing)
                    self._up = True
                    log.info(
                        "connected to MCP server %r (protocol %s, %d tools)",
                        self.name,
                        client.protocol_version,
                        len(self.catalog.tools),
                    )
                    self._started()
                    recheck = spec.backoff  # tools whose pins cannot be read yet: asked again
                    while True:
                        if self.catalog.unchecked:
                            with trio.move_on_after(recheck):
                                await link.wake.wait()
                            if not link.wake.is_set():
                                await self.catalog.recheck(registrar)
                                recheck = min(spec.max_backoff, recheck * 2)
                                continue
                        else:
                            recheck = spec.backoff
                            await link.wake.wait()
                        link.wake = trio.Event()
                        if link.lost is not None:
                            break
                        if link.dirty:
                            link.dirty = False
                            await self.catalog.apply(registrar, await self._list(client))
                finally:
                    self.link = None
                    link.mark_lost("the connection was closed")  # unless it already had a reason
                    self.last_error = link.lost or "the connection was closed"  # what calls are told now
                    nursery.cancel_scope.cancel()
        if connecting.cancelled_caught:
            return f"no answer within {spec.connect_timeout:g}s"
        return link.lost or "the session ended"

    async def _principal_session(self, held: Held) -> None:
        """One principal's own session (runtime.mcp._client_pool): opened with its credentials,
        kept while `held.serve` says so."""
        spec = self.spec
        link = _Link()
        watched = WatchedTransport(
            spec.transport(held.headers),  # type: ignore[call-arg]  # the HTTP specs take headers
            lambda: link.mark_lost("the server closed the connection"),
            self.name,
        )
        tasks = TasksExtension()
        client = Client(
            watched,
            mode=spec.mode,
            cache=None,
            message_handler=link.on_message,
            logging_callback=self._server_log,
            client_info=_CLIENT_INFO,
            extensions=[tasks],
        )
        with trio.CancelScope(deadline=trio.current_time() + spec.connect_timeout) as connecting:
            async with client:
                watched.negotiated(client.protocol_version in MODERN_PROTOCOL_VERSIONS)
                _read_unstructured(client)
                declare_per_call(client.session, tasks)
                connecting.deadline = math.inf
                link.client = client
                try:
                    await held.serve(link)
                finally:
                    link.mark_lost("the principal's session was closed")
        if connecting.cancelled_caught:
            raise ToolUnavailable(f"no answer within {spec.connect_timeout:g}s")

    async def _listen(
        self, client: Client, link: _Link, *, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        """2026-07-28: tools/list_changed arrives through a `subscriptions/listen` stream.

        Opened only when the server announced `tools.listChanged`. When the stream ends or
        breaks it is opened again after a backoff (doubling, capped), and the tools are listed
        again (a change may have been missed meanwhile); calls are never held up by it.
        """
        spec = self.spec
        started = False
        failures = 0
        try:
            while True:
                opened = False
                try:
                    async with client.listen(tools_list_changed=True) as subscription:
                        if not started:
                            task_status.started()
                            started = True
                        opened = True
                        if failures:
                            link.mark_dirty()  # reopened: what changed while it was closed is read now
                        async for _ in subscription:
                            failures = 0
                            link.mark_dirty()
                    reason = "the server ended it"
                except SubscriptionLost as exc:
                    reason = f"it broke ({exc})"
                except MCPError as exc:
                    if exc.code == CONNECTION_CLOSED:
                        link.mark_lost(f"the connection closed ({exc.error.message})")
                        return
                    if not opened and failures == 0:
                        log.info(
                            "MCP server %r refused subscriptions/listen (%s); its tools are listed once "
                            "per connection",
                            self.name,
                            exc.error.message,
                        )
                        return
                    reason = f"it failed ({exc.error.message})"
                if not started:
                    task_status.started()
                    started = True
                delay = min(spec.max_backoff, spec.backoff * 2**failures)
                failures += 1
                log.debug(
                    "MCP server %r: the subscriptions/listen stream ended: %s; reopened in %.2gs",
                    self.name,
                    reason,
                    delay,
                )
                await trio.sleep(delay)
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
        """A server's log message: a record of the `runtime.mcp.remote` logger at its level."""
        level = _PYTHON_LEVELS.get(params.level, logging.INFO)
        remote_log.log(level, "MCP server %r (%s): %s", self.name, params.logger or "-", params.data)

    # -- calls -----------------------------------------------------------------------

    def asking_call(self) -> tuple[str | None, str | None]:
        """(tool name, call id) of the runtime call a request from the server belongs to.

        2026-07-28: the SDK answers a call's input requests in the calling task, where
        `_serving` says which call it is. 2025-11-25: the server's requests arrive on the
        session's own task, so only a call alone in flight can be named.
        """
        current = _serving.get()
        if current is not None:
            return current
        if len(self._in_flight) == 1:
            return next(iter(self._in_flight.values()))
        return None, None

    def call(
        self, tool: McpTool, args: Any, ctx: CallContext | None
    ) -> Coroutine[Any, Any, types.CallToolResult]:
        """Send one `tools/call` for `tool` with its checked `args` (a coroutine to await).

        Raises:
            ToolUnavailable: not connected, or the connection dropped during the call.
            ToolRejected: the server refused the arguments (JSON-RPC invalid params).
            MCPError: any other error the server answered with (reported as ERROR).
        """
        if self.pool is None:  # the one session: no coroutine of ours in between
            return self._call_over(self.link, tool, args, ctx)
        return self._call_pooled(self.pool, tool, args, ctx)

    async def _call_pooled(
        self, pool: SessionPool, tool: McpTool, args: Any, ctx: CallContext | None
    ) -> types.CallToolResult:
        held = await pool.acquire(ctx.principal if ctx is not None else None)
        try:
            return await self._call_over(held.link, tool, args, ctx)
        finally:
            pool.release(held)

    async def _call_over(
        self, link: _Link | None, tool: McpTool, args: Any, ctx: CallContext | None
    ) -> types.CallToolResult:
        client = link.client if link is not None else None
        if link is None or client is None:
            raise ToolUnavailable(
                f"MCP server {self.name!r} is not connected ({self.last_error}); reconnecting"
            )
        arguments = msgspec.to_builtins(args)

        serving = (tool.name, ctx.call_id if ctx is not None else None)
        key = id(serving)  # unique while the call runs: it holds `serving`
        self._in_flight[key] = serving
        token = _serving.set(serving)
        support = tool.remote_task
        if support is None and _serves_tasks(client):
            # the server serves tasks but its listing does not say which tools (FastMCP's at
            # 2026-07-28): the server decides per call, so a call detached here offers it one
            support = "optional"
        task = TaskCall(self.name, tool.remote_name, ctx) if as_task(support, ctx) else None
        task_token = tasking.set(task)
        try:
            # Progress is asked for only when someone hears it (no token, no notifications).
            wanted = _progress_to(ctx) if ctx is not None and ctx.hears_progress else None
            meta = _idempotency(ctx) if ctx is not None and _keyed(tool, ctx) else None
            if task is None and _was_task(self.name, tool, ctx):
                # a run of this detached call before this one made it a task (a tool learned
                # "required" from a -32021, which this process has not seen): follow that one
                task = TaskCall(self.name, tool.remote_name, ctx)
                tasking.set(task)
            if task is not None and (journaled := journaled_task(task)) is not None:
                # a run of this detached call in a process that died made it a task: follow it
                log.info(
                    "MCP server %r: detached call %s follows its journaled task %s again",
                    self.name,
                    ctx.detached_id if ctx is not None else None,
                    journaled,
                )
                task.task_id = journaled
                result = await self._follow_again(task, tool, link, lost=False)
            else:
                try:
                    try:
                        result = await client.call_tool(
                            tool.remote_name, arguments, progress_callback=wanted, meta=meta
                        )
                    except MCPError as exc:
                        if task is not None or not _needs_tasks(exc):
                            raise
                        # -32021 naming the tasks extension: the server runs this tool only
                        # as a task (its listing did not say so) and refused before running
                        # it; sent again as a task, and remembered for the tool's next calls
                        log.info("MCP server %r runs %r only as a task", self.name, tool.remote_name)
                        tool.remote_task = "required"
                        task = TaskCall(self.name, tool.remote_name, ctx)
                        tasking.set(task)
                        result = await client.call_tool(
                            tool.remote_name, arguments, progress_callback=wanted, meta=meta
                        )
                except Exception:
                    if task is None or not task.lost:
                        raise
                    # the connection went away while its task was followed: not the task's end
                    result = await self._follow_again(task, tool, link, lost=True)
            if self.spec.max_links:
                for block in result.content:  # a loop: no generator a call
                    if isinstance(block, types.ResourceLink):
                        return await self._read_links(client, result)
            return result
        except MCPError as exc:
            if exc.code == MISSING_REQUIRED_CLIENT_CAPABILITY:  # 2026-07-28: -32021
                raise CannotAsk(_missing_capability(self.name, exc)) from None
            if _connection_gone(exc, link) or _session_gone(exc):
                # A link that ends (its server exited, another call lost it, the runtime
                # closes) wakes the calls still waiting on it as its Client closes: the SDK
                # answers them CONNECTION_CLOSED (no cancel scope of our own per call).
                reason = link.lost or exc.error.message
                link.mark_lost(f"the connection was lost during a call ({exc.error.message})")
                raise ToolUnavailable(
                    f"the connection to MCP server {self.name!r} was lost during the call "
                    f"({reason}); reconnecting"
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
            tasking.reset(task_token)
            _serving.reset(token)
            del self._in_flight[key]

    async def _follow_again(
        self, task: TaskCall, tool: McpTool, link: _Link, *, lost: bool
    ) -> types.CallToolResult:
        """Follow `task` (its id known) until it ends: over `link` (`lost` False: a task a run
        before this one journaled), else over the next connection to the server, and again
        after each loss; bounded by the call's deadline, and by `_REATTACH_WITHIN` seconds
        without a connection.

        Raises:
            ToolUnavailable: no connection came back in time, or the server no longer knows the
                task (it expired, the server restarted without its tasks).
        """
        task_id = task.task_id
        assert task_id is not None
        old: _Link | None = None
        if lost:
            link.mark_lost(f"the connection was lost while task {task_id} was followed")
            old = link
        while True:
            try:
                new, held = await self._relink(old, task, tool)
            except trio.Cancelled:  # our call ended while it waited for a connection
                left = task.ctx is not None and task.ctx.handed_over  # resumed elsewhere: left running
                if not left and self._nursery is not None:  # the call answers now; the task stops later
                    self._nursery.start_soon(self._cancel_when_back, old, task, tool)
                raise
            try:
                client = new.client
                assert client is not None
                task.lost = False
                try:
                    result = await poll(client.session, task_id, task)
                except Exception:
                    if not task.lost:
                        raise
                    new.mark_lost(f"the connection was lost while task {task_id} was followed")
                    old = new
                    continue
                if not result.is_error:
                    await client.session.validate_tool_result(tool.remote_name, result)
                return result
            finally:
                if held is not None and self.pool is not None:
                    self.pool.release(held)

    async def _cancel_when_back(self, old: _Link | None, task: TaskCall, tool: McpTool) -> None:
        """`tasks/cancel` for the task of a call that ended (cancelled, past its deadline) while it
        waited for a connection: sent once one is back, within `CANCEL_TIMEOUT` (shielded), as
        `poll` sends it for a call that ends while connected. Runs in the connection's own
        nursery (the call is answered at once), within `_REATTACH_WITHIN` seconds; the runtime
        closing, or no connection in time, leaves the task to the server's ttl."""
        try:
            new, held = await self._relink(old, task, tool)
        except Exception as exc:  # none came back in time, no session for its principal now
            log.info("MCP server %r: task %s could not be cancelled: %s", self.name, task.task_id, exc)
            return
        try:
            assert new.client is not None
            assert task.task_id is not None
            with trio.move_on_after(CANCEL_TIMEOUT):
                await cancel_task(new.client.session, task.task_id)
                log.info("MCP server %r: task %s cancelled (its call had ended)", self.name, task.task_id)
        except Exception as exc:
            log.info("MCP server %r: task %s could not be cancelled: %s", self.name, task.task_id, exc)
        finally:
            if held is not None and self.pool is not None:
                self.pool.release(held)

    async def _relink(self, old: _Link | None, task: TaskCall, tool: McpTool) -> tuple[_Link, Held | None]:
        """The next open connection for `task`'s call (another than `old`): the server's, or its
        principal's own session (`Held`: release it after). Waits for it (the connection loop
        reconnects; a principal's session is opened again) at most `_REATTACH_WITHIN` seconds.

        Raises:
            ToolUnavailable: none came in time.
        """
        ctx = task.ctx
        delay = self.spec.backoff
        with trio.move_on_after(_REATTACH_WITHIN):
            while True:
                if self.pool is not None:
                    try:
                        held = await self.pool.acquire(ctx.principal if ctx is not None else None)
                    except ToolUnavailable:
                        held = None
                    if held is not None:
                        if held.link is not old:
                            if old is not None:
                                log.info("MCP server %r: following task %s again", self.name, task.task_id)
                            return held.link, held
                        self.pool.release(held)
                    await trio.sleep(delay)
                    delay = min(self.spec.max_backoff, delay * 2)
                    continue
                current = self.link
                if current is not None and current is not old and current.lost is None:
                    if old is not None:
                        log.info("MCP server %r: following task %s again", self.name, task.task_id)
                    return current, None
                await self._linked.wait()
        raise ToolUnavailable(
            f"the connection to MCP server {self.name!r} was lost while its task {task.task_id} "
            f"(tool {tool.remote_name!r}) was followed, and did not come back within "
            f"{_REATTACH_WITHIN:g}s; the task was not cancelled and may still run"
        )

    async def _read_links(self, client: Client, result: types.CallToolResult) -> types.CallToolResult:
        """The result with its `resource_link`s read (`resources/read`), within `max_links` and
        `max_link_bytes`: each read one becomes the embedded resources it holds; a link that is
        not read (over the bounds, or the read failed) stays as it is."""
        spec = self.spec
        links, budget = spec.max_links, spec.max_link_bytes
        blocks: list[types.ContentBlock] = []
        for block in result.content:
            if not isinstance(block, types.ResourceLink) or links <= 0:
                blocks.append(block)
                continue
            if block.size is not None and block.size > budget:
                blocks.append(block)
                continue
            links -= 1
            try:
                read = await client.read_resource(str(block.uri))
            except MCPError as exc:
                log.info("MCP server %r: resource %s not read: %s", self.name, block.uri, exc.error.message)
                blocks.append(block)
                continue
            size = sum(
                len(c.text.encode()) if isinstance(c, types.TextResourceContents) else len(c.blob) * 3 // 4
                for c in read.contents
            )
            if size > budget or not read.contents:
                blocks.append(block)
                continue
            budget -= size
            blocks.extend(types.EmbeddedResource(resource=c) for c in read.contents)
        return result.model_copy(update={"content": blocks})


_serving: ContextVar[tuple[str, str | None] | None] = ContextVar("runtime_mcp_serving", default=None)
"""(tool name, call id) of the runtime call whose `tools/call` this task is waiting on."""

_HANDLERS = {"elicitation": "on_elicit", "sampling": "on_sample", "roots": "on_roots"}


def _needs_tasks(exc: MCPError) -> bool:
    """Whether `exc` is a -32021 whose `requiredCapabilities` name the tasks extension."""
    if exc.code != MISSING_REQUIRED_CLIENT_CAPABILITY or not isinstance(exc.error.data, dict):
        return False
    needed = exc.error.data.get("requiredCapabilities")
    extensions = needed.get("extensions") if isinstance(needed, dict) else None
    return isinstance(extensions, dict) and TASKS in extensions


def _serves_tasks(client: Client) -> bool:
    """Whether the server declared the tasks extension (known where the version was asked for)."""
    capabilities = client.session.server_capabilities  # None before the handshake
    extensions = capabilities.extensions if capabilities is not None else None
    return isinstance(extensions, dict) and TASKS in extensions


def _was_task(server: str, tool: McpTool, ctx: CallContext | None) -> bool:
    """Whether a run of this detached call before this one journaled a task of this tool."""
    return journaled_task(TaskCall(server, tool.remote_name, ctx)) is not None


def _missing_capability(server: str, exc: MCPError) -> str:
    """A 2026-07-28 server's -32021 in words: what it needs, and which handler gives it."""
    data = exc.error.data if isinstance(exc.error.data, dict) else {}
    needed = data.get("requiredCapabilities")
    names = sorted(needed) if isinstance(needed, dict) else []
    handlers = ", ".join(f"{_HANDLERS[n]}=" for n in names if n in _HANDLERS)
    what = ", ".join(names) if names else "a capability"
    give = f"; give open_runtime({handlers}...) a handler" if handlers else ""
    return (
        f"MCP server {server!r} needs {what} from this client, which did not declare it "
        f"({exc.error.message}){give}"
    )


# What the SDK itself says when a request's answer can no longer come (its CONNECTION_CLOSED code
# is -32000, which a server may also use for an error of its own).
_SDK_CLOSED = ("Connection closed", "SSE stream ended without a response")


async def _ask_info_logs(client: Client) -> None:
    """`logging/setLevel info`: a server's debug chatter is not worth the wire."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await client.set_logging_level("info")
    except MCPError as exc:
        log.debug("logging/setLevel refused: %s", exc.error.message)


def _read_unstructured(client: Client) -> None:
    """Let the session take a result without `structuredContent` from a tool with an outputSchema.

    The SDK refuses such a result ("has an output schema but did not return structured
    content"); a server sends one when the value is not of the tool's declared type (a runtime
    serving a loose annotation leaves the structured part out rather than send it wrong). Its
    text is the value as returned, which is what the model reads here: it is taken as text.
    Structured content that is sent is still checked against the schema.
    """
    session = client.session
    check = session.validate_tool_result

    async def validate_tool_result(name: str, result: types.CallToolResult) -> None:
        if result.structured_content is None and "structured_content" not in result.model_fields_set:
            return
        await check(name, result)

    session.validate_tool_result = validate_tool_result  # type: ignore[method-assign]


def _progress_to(ctx: CallContext) -> ProgressFnT:
    """The SDK's progress callback for a call whose caller hears progress: reported through the
    call's context (span event, handler), with the call's span current (the SDK calls back
    from its own task)."""
    span = trace.get_current_span()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        with trace.use_span(span, end_on_exit=False):
            await ctx.report_progress(progress, total, message)

    return on_progress


def _keyed(tool: McpTool, ctx: CallContext) -> bool:
    """Whether a call's `tools/call` carries an idempotency key: its caller gave one, or its tool
    may be run again with effects (the server says it is idempotent, and not read-only: only
    such a tool is retried, and a read-only one run again changes nothing, so a fresh key for
    each of its calls would only keep a server from joining identical ones)."""
    return (tool.idempotent and not tool.read_only) or "idempotency_key" in ctx.metadata


def _idempotency(ctx: CallContext) -> Any:
    """The `_meta` of a call's `tools/call`: its idempotency key, the same for each of its
    attempts (a `Retry`), so a server that keeps a journal answers a retry of work it did without
    doing it again. The caller's own key (metadata `idempotency_key`) when it gave one; else one
    made for the call on its first attempt and kept in its metadata. Sent scoped to the call's
    principal (`scoped_key`): the server sees this runtime's tenants as one client, and two
    tenants' keys alike ("checkout-1") must not name one operation there."""
    key = ctx.metadata.get("idempotency_key")
    if not isinstance(key, str) or not key:
        key = secrets.token_hex(16)
        ctx.metadata = ctx.metadata | {"idempotency_key": key}
    return {"idempotency_key": scoped_key(ctx.principal, key)}


def scoped_key(principal: str | None, key: str) -> str:
    """A caller's idempotency key as a server is sent it: a digest of its principal and the key
    (32 hex digits). The same principal and key give the same digest in every process (a retry
    that another of the runtime's processes sends is still known to the server), and another
    principal's key is another digest; the digest shows neither the name nor the key."""
    who = (principal or "").encode()
    named = b"%d:%s%s" % (len(who), who, key.encode())  # the length first: no two pairs alike
    return hashlib.blake2b(named, digest_size=16, person=b"runtime-mcp-key").hexdigest()


def _connection_gone(exc: MCPError, link: _Link) -> bool:
    """The connection went away during the call (not an error the server answered with)."""
    if exc.code != CONNECTION_CLOSED:
        return False
    return link.lost is not None or exc.error.message in _SDK_CLOSED


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
    cancelled = is_cancellation(exc)
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
