"""A runtime's tools served over MCP, with the SDK's low-level `Server`; and `serve_stdio`.

Every `tools/call` goes through `Runtime.call`, so arguments are validated by the runtime
(the low-level server validates nothing), and limits, spans and supervision apply. The W3C
trace context of the request's `_meta` becomes the call's metadata, so the served call's
`execute_tool` span continues the client's trace.

`notifications/tools/list_changed` follows the runtime's `registry_version`, in both protocol
eras: published on the `subscriptions/listen` bus (2026-07-28), and sent on the standalone
channel of every connection that completed the `initialize` handshake (2025-11-25).

A server holding many tools can offer a search tool instead (`search=ToolSearch(threshold=N)`):
when a client would be listed more than N tools, `tools/list` holds the search tool and the
always-listed ones (`ToolSearch.always`); a search answers with the tools it found (their text,
and their whole MCP definitions as `structuredContent`), and in a 2025-11-25 session the found
tools join that session's listing (after the others, in the order found) with a
`notifications/tools/list_changed` to it alone. A tool not listed can still be called by name:
the listing is what the model is shown, not what it may call (its view decides that).

A streaming tool's chunks go out as they come, each a `notifications/progress` whose message is
the chunk (progress counts the chunks; sent when the client gave a progress token), awaited in
turn: a slow client slows the tool down. When the runtime keeps artifacts (`Artifacts`), a
result over its limit goes out as its preview and a `resource_link` to `artifact://art_...`,
and the server declares `resources` and serves `resources/list` and `resources/read` of the
artifacts of the request's principal (its verified token's); an anonymous client of the
handshake era sees only those its own session made, through `resources/*` and the artifact
tools alike; an anonymous request with no session (2026-07-28, stateless) lists none and reads
one only by the handle its result gave it. A handle that is not the reader's, or that expired,
is `-32602` "Resource not found" with the URI in its data (SEP-2164). Reads are bounded: the
artifacts being read at once hold at most `max_read_bytes` (a read waits for room), however many
clients read a large one together.

A client's idempotency key (`_meta` `idempotency_key`, or `idempotencyKey`) becomes the call's
metadata `idempotency_key`: a tool with `Dedupe` answers a repeated `tools/call` with that key
(within its principal) from its journal, without running again.

Per-principal state is bounded: a principal's view is made on its first request and kept while
it is used, at most `max_views` of them (the least recently used goes first) and none idle for
longer than `view_idle` seconds.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import hashlib
import importlib.metadata
import logging
import warnings
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import mcp_types as types
import trio
from mcp import MCPError
from mcp.server import NotificationOptions, Server, ServerRequestContext
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.connection import Connection
from mcp.server.models import InitializationOptions
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.server.session import ServerSession
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp_types import INVALID_PARAMS
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ..engine import READ_TOOLS, Runtime
from ..engine.lowlevel import answered_before
from ..exceptions import ArtifactMissing, CallNotFound, RuntimeClosed, ToolOverloaded
from ..messages import ResourceLinkPart, ToolCall, ToolPending, ToolResult, ToolSuccess
from ..schema import ToolDescriptor, render_tool
from ..search import FoundTools, ToolSearch, found_text
from ..stores import StoreError
from ..tools import LOG_LEVELS, CallContext, asking, reporting
from ..tools.lowlevel import backgrounding
from ._asking import ServedAsker
from ._server_catalog import Catalog, error_result, plain_result
from ._server_reads import ReadBudget
from ._server_tasks import (
    TASKS,
    TaskIdParams,
    TaskListen,
    TaskStart,
    TaskUpdateParams,
    check_name_header,
    created,
    declared,
    detailed,
    lookup_failed,
    missing_tasks,
    not_found,
    quietly_refused,
    responses,
)

__all__ = [
    "DEFAULT_MAX_READ_BYTES",
    "DEFAULT_MAX_VIEWS",
    "DEFAULT_NAME",
    "DEFAULT_VIEW_IDLE",
    "ServedRuntime",
    "call_metadata",
    "serve_stdio",
    "trace_metadata",
]

log = logging.getLogger("runtime.mcp")

DEFAULT_NAME = "tool-runtime"
DEFAULT_MAX_VIEWS = 1024  # principals' views kept at once
DEFAULT_VIEW_IDLE = 600.0  # seconds an unused principal's view is kept
DEFAULT_MAX_READ_BYTES = 64 << 20  # bytes of artifacts read at once (resources/read)
IDEMPOTENCY_KEYS = ("idempotency_key", "idempotencyKey")  # where a client's key may be in `_meta`
_LONG_KEY = 128  # a longer key is kept as its digest
READ_COPIES = 3  # what a read holds at its peak, in copies of the artifact: its text, JSON, the bytes written
_ARTIFACT = "artifact://"
_NOTIFY_TIMEOUT = 5.0  # seconds one slow client may hold up a list_changed fan-out
_W3C = TraceContextTextMapPropagator()
_SEVERITY = {level: rank for rank, level in enumerate(LOG_LEVELS)}


def _version() -> str:
    try:
        return importlib.metadata.version("tool-runtime")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree
        return "0"


class _Server(Server[Any]):
    """The SDK server, announcing `tools.listChanged` in the handshake era too.

    The streamable-HTTP session manager asks the server for its initialization options
    itself, with no notification options: the default has to say it.
    """

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities,
            extensions,
        )


class ServedRuntime:
    """A runtime behind an MCP server: the SDK `Server` and the task that announces tool changes.

    Attributes:
        server: the SDK's low-level server; run it over any transport while
            `announce_changes` runs beside it.
        reading: the bytes of artifacts being served at once (`resources/read`); an HTTP app
            tells it what it writes (`CountSent`).
    """

    def __init__(
        self,
        rt: Runtime,
        *,
        name: str = DEFAULT_NAME,
        instructions: str | None = None,
        sse_poll_after: float | None = None,
        view_of: Callable[[str | None], Any] | None = None,
        max_views: int = DEFAULT_MAX_VIEWS,
        view_idle: float = DEFAULT_VIEW_IDLE,
        max_read_bytes: int = DEFAULT_MAX_READ_BYTES,
        search: ToolSearch | None = None,
    ) -> None:
        self._rt = rt
        self._search = search
        self._search_listing = _search_listing(search) if search is not None else None
        # the tools each 2025-11-25 connection's searches found, in the order found
        self._found: weakref.WeakKeyDictionary[Any, list[str]] = weakref.WeakKeyDictionary()
        self._view_of = view_of
        # principal -> (its view, when last used), least recently used first
        self._views: collections.OrderedDict[str | None, tuple[Any, float]] = collections.OrderedDict()
        self._max_views = max_views
        self._view_idle = view_idle
        self.reading = ReadBudget(max_read_bytes)
        self._poll_after = sse_poll_after
        self._catalog = Catalog(rt)
        self._bus = InMemorySubscriptionBus()
        self._listen = ListenHandler(self._bus)
        # handshake-era connections -> a session to tell them of changes, one per connection
        self._sessions: dict[Any, ServerSession] = {}
        # logging/setLevel per connection (handshake era; 2026-07-28 asks per request in `_meta`)
        self._levels: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        # artifacts the calls of each connection made (an anonymous session reads only its own)
        self._made: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()
        self._handshakes: weakref.WeakSet[Any] = weakref.WeakSet()  # connections of the handshake era
        resources: dict[str, Any] = {}
        if rt.artifacts is not None:
            resources = {"on_list_resources": self._list_resources, "on_read_resource": self._read_resource}
        with warnings.catch_warnings():
            # The SDK flags logging/setLevel as deprecated from 2026-07-28; 2025-11-25 clients use it.
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            self.server = _Server(
                name,
                version=_version(),
                instructions=instructions,
                get_tool_input_schema=self._catalog.input_schema,
                on_list_tools=self._list_tools,
                # a CreateTaskResult (SEP-2663) is a mapping: the SDK serves extension shapes as given
                on_call_tool=self._call_tool,  # type: ignore[arg-type]
                # list changes (the SDK's handler) and task status notifications (SEP-2663)
                on_subscriptions_listen=TaskListen(
                    self._bus, self._listen, self._listen_caller, self._detailed, owner_of=_listen_owner
                ),
                on_set_logging_level=self._set_level,
                **resources,
            )
        self.server.add_notification_handler(
            "notifications/initialized", types.NotificationParams, self._initialized
        )
        # MCP Tasks (SEP-2663): a task is a detached call (see _server_tasks).
        self.server.extensions[TASKS] = {}
        self.server.add_request_handler("tasks/get", TaskIdParams, self._get_task)
        self.server.add_request_handler("tasks/update", TaskUpdateParams, self._update_task)
        self.server.add_request_handler("tasks/cancel", TaskIdParams, self._cancel_task)
        # 2026-07-28 input-required rounds: the requestState a client echoes is sealed and
        # verified by the SDK (AES-GCM under a key of this process, bound to the call, expiring).
        self.server.middleware.append(
            RequestStateBoundary(RequestStateSecurity.ephemeral(), default_audience=name)
        )

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        listing = self._catalog.listing()
        view = self._view()
        tools = listing.tools
        if view is not None:
            visible = view.registry
            tools = [t for t in listing.tools if visible.get_or_none(t.name) is not None]
        if self._search is not None:
            tools = self._deferred(tools, _connection_of(ctx.session))
        elif view is None:
            return listing
        return types.ListToolsResult(tools=tools)

    # -- tool search -------------------------------------------------------------------

    def _deferred(self, tools: list[types.Tool], connection: Any) -> list[types.Tool]:
        """`tools` as listed with search on: all of them up to the threshold; past it the
        search tool, the always-listed tools, and what this connection's searches found."""
        search, tool = self._search, self._search_listing
        assert search is not None
        assert tool is not None
        always = [t for t in tools if search.is_always(t.name) and t.name != search.name]
        deferred = {t.name: t for t in tools if not search.is_always(t.name) and t.name != search.name}
        if len(deferred) <= search.threshold:
            return tools
        found = [deferred[n] for n in self._found.get(connection, ()) if n in deferred]
        return [tool, *always, *found]

    def _offers_search(self, view: Any) -> bool:
        """Whether the search tool is listed to this client (more tools than the threshold)."""
        search = self._search
        if search is None:
            return False
        registry = self._rt.registry if view is None else view.registry
        deferred = sum(1 for n in registry.names() if n != search.name and not search.is_always(n))
        return deferred > search.threshold

    async def _run_search(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams, view: Any
    ) -> types.CallToolResult:
        search = self._search
        assert search is not None
        arguments = params.arguments or {}
        query = arguments.get("query")
        if not isinstance(query, str) or set(arguments) != {"query"}:
            return error_result(
                f"Error: {search.name} takes one argument, 'query': a few words saying what the "
                "tool you need does"
            )
        finder = self._rt.search if view is None else view.search
        skip = sum(
            1 for n in (self._rt.registry if view is None else view.registry).names() if search.is_always(n)
        )
        found: list[types.Tool] = []
        described: list[ToolDescriptor] = []
        for descriptor in finder(query, limit=search.limit + skip + 1):
            if descriptor.name == search.name or search.is_always(descriptor.name):
                continue
            served = self._catalog.get(descriptor.name)
            if served is not None and len(found) < search.limit:
                found.append(served.listing)
                described.append(descriptor)
        connection = _connection_of(ctx.session)
        if found and connection in self._handshakes:  # a session: the found tools join its listing
            known = self._found.setdefault(connection, [])
            new = [t.name for t in found if t.name not in known]
            if new:
                known.extend(new)
                await self._notify(ctx.session)
        text = found_text(FoundTools(query=query, tools=tuple(described)))
        definitions = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in found]
        return types.CallToolResult(
            content=[types.TextContent(text=text)], structured_content={"tools": definitions}
        )

    def _view(self) -> Any:
        """The view of the principal this request's verified token names (None: the runtime)."""
        principal = principal_of_token(get_access_token())
        if principal is None and self._view_of is None:
            return None
        views, now = self._views, trio.current_time()
        held = views.get(principal)
        if held is None:
            view = (
                self._view_of(principal)
                if self._view_of is not None
                else self._rt.scoped(principal=principal)
            )
        else:
            view = held[0]
            views.move_to_end(principal)
        views[principal] = (view, now)
        idle = now - self._view_idle
        while len(views) > self._max_views or next(iter(views.values()))[1] < idle:
            views.popitem(last=False)  # the least recently used (never this one: it is the newest)
        return view

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult | dict[str, Any]:
        view = self._view()
        if self._search is not None and params.name == self._search.name and self._offers_search(view):
            return await self._run_search(ctx, params, view)
        caller = self._rt if view is None else view
        registry = caller.registry
        listed = registry.get_or_none(params.name) is not None  # in this principal's view
        served = self._catalog.get(params.name) if listed else None
        if not listed:
            raise MCPError(INVALID_PARAMS, f"Unknown tool: {registry.missing_message(params.name)}")
        if params.name in READ_TOOLS and self._rt.artifacts is not None:
            _, own, _ = self._reader(ctx)
            handle = (params.arguments or {}).get("handle")
            if own is not None and handle not in own:  # an anonymous session reads only its own
                return error_result(f"Error: no artifact {handle} was made in this session")
        call = ToolCall(
            id=f"mcp-{ctx.request_id}" if ctx.request_id is not None else "mcp",
            name=params.name,
            arguments=params.arguments or {},
        )
        session = ctx.session
        tasks = declared(session, params.meta)  # the client takes tasks (SEP-2663)
        support = served.tool.options.task_support if served is not None else "forbidden"
        if support == "required" and not tasks:
            raise missing_tasks(f"tool {params.name!r}")
        later = (
            support != "forbidden"
            and tasks
            and served is not None
            and served.tool.options.task_from != "start"
        )
        if support != "forbidden" and tasks and not later:
            return await self._start_task(caller, call, params)
        background = TaskStart(call) if later else None  # `ctx.background()` makes it a task
        floor = self._levels.get(_connection_of(session), 0)

        async def on_progress(
            call_ctx: CallContext, progress: float, total: float | None, message: str | None
        ) -> None:
            await session.report_progress(progress, total, message)  # a no-op without a progress token

        async def on_log(call_ctx: CallContext, level: str, message: str, data: dict[str, Any]) -> None:
            if _SEVERITY[level] < floor:
                return
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                await session.send_log_message(
                    level,  # type: ignore[arg-type]  # one of LOG_LEVELS, MCP's own
                    {"message": message, **data} if data else message,
                    logger=call_ctx.tool_name,
                    related_request_id=ctx.request_id,
                )

        chunks = 0

        async def on_chunk(call_ctx: CallContext, chunk: str) -> None:
            nonlocal chunks
            chunks += 1
            await session.report_progress(chunks, None, chunk)  # the chunk is the message

        questions = ServedAsker(session, ctx.request_id, params)  # ctx.elicit / sample / list_roots
        try:
            with (
                reporting(on_progress=on_progress, on_log=on_log, on_chunk=on_chunk),
                asking(**questions.handlers()),
                backgrounding(background.reached) if background is not None else contextlib.nullcontext(),
            ):
                close = ctx.close_sse_stream
                if close is None or self._poll_after is None:
                    result = await caller.call(call, metadata=call_metadata(params.meta))
                else:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(_release_stream, close, self._poll_after)
                        result = await caller.call(call, metadata=call_metadata(params.meta))
                        nursery.cancel_scope.cancel()
        except RuntimeClosed as exc:
            return error_result(f"Error: {exc}")
        if questions.pending:  # 2026-07-28: this round ends with the questions; the client calls again
            return questions.input_required()
        if background is not None and background.started:  # its task starts: run again, detached
            return await self._start_task(caller, call, params, questions.given)
        if questions.modern and not result.ok and questions.missing.model_fields_set:
            raise questions.missing_capability()  # 2026-07-28: -32021, not a tool error
        if tasks and isinstance(result, ToolPending):  # waiting for an approval: its task
            try:
                return created(await caller.detached(result.detached_id).status())
            except (CallNotFound, StoreError):
                pass  # forgotten already: the pending text, as to any client
        self._remember(session, result)
        return (
            served.result(result, self._rt.max_result_chars) if served is not None else plain_result(result)
        )

    # -- MCP Tasks (SEP-2663) ------------------------------------------------------------

    async def _start_task(
        self,
        caller: Any,
        call: ToolCall,
        params: types.CallToolRequestParams,
        answers: Mapping[str, Any] | None = None,
    ) -> types.CallToolResult | dict[str, Any]:
        """A call made a task: detached for the request's principal (with `answers`: those the
        client gave the questions its tool asked in the request); its CreateTaskResult once it
        is journaled (a tasks/get right after finds it)."""
        try:
            with answered_before(answers or {}):
                handle = await caller.detach(call, metadata=call_metadata(params.meta))
            return created(await handle.status())
        except (ToolOverloaded, StoreError, RuntimeClosed, ValueError) as exc:
            # ValueError: what the client answered in the request cannot be journaled
            return error_result(f"Error: the call could not be started as a task: {exc}")

    def _task_caller(self, ctx: ServerRequestContext[Any], params: TaskIdParams | TaskUpdateParams) -> Any:
        """The calls surface of the request's principal, once the request may use tasks."""
        if not declared(ctx.session, params.meta):
            raise missing_tasks(ctx.method)
        check_name_header(ctx.request, params.task_id)
        view = self._view()
        return self._rt if view is None else view

    async def _task_status(self, caller: Any, task_id: str) -> Any:
        try:
            return await caller.detached(task_id).status()
        except Exception as exc:
            if lookup_failed(exc):
                raise not_found(task_id) from None
            raise

    async def _get_task(self, ctx: ServerRequestContext[Any], params: TaskIdParams) -> dict[str, Any]:
        caller = self._task_caller(ctx, params)
        return self._detailed(await self._task_status(caller, params.task_id))

    def _detailed(self, status: Any) -> dict[str, Any]:
        """The DetailedTask of `status` (tasks/get, notifications/tasks)."""
        served = self._catalog.get(status.tool)

        def render(result: ToolResult) -> types.CallToolResult:
            if served is None:
                return plain_result(result)
            return served.result(result, self._rt.max_result_chars)

        return detailed(status, render)

    def _listen_caller(self, ctx: ServerRequestContext[Any], params: Any) -> Any:
        """The calls surface whose tasks a listen request may watch (its principal's)."""
        view = self._view()
        return self._rt if view is None else view

    async def _update_task(self, ctx: ServerRequestContext[Any], params: TaskUpdateParams) -> dict[str, Any]:
        caller = self._task_caller(ctx, params)
        status = await self._task_status(caller, params.task_id)
        handle = caller.detached(params.task_id)
        for key, answer in responses(status, params.input_responses).items():
            try:
                await handle.answer(answer, key=key)
            except Exception as exc:
                if isinstance(exc, CallNotFound):
                    raise not_found(params.task_id) from None
                if isinstance(exc, ValueError):  # the answer cannot be journaled: the task asks on
                    raise MCPError(INVALID_PARAMS, f"inputResponses[{key!r}]: {exc}") from None
                if not quietly_refused(exc):
                    raise
        return {}

    async def _cancel_task(self, ctx: ServerRequestContext[Any], params: TaskIdParams) -> dict[str, Any]:
        caller = self._task_caller(ctx, params)
        try:
            await caller.detached(params.task_id).cancel()
        except Exception as exc:
            if lookup_failed(exc):
                raise not_found(params.task_id) from None
            raise
        return {}

    # -- artifacts as resources --------------------------------------------------------

    def _remember(self, session: ServerSession, result: ToolResult) -> None:
        """The artifacts a call's result links to, as made by its connection."""
        if type(result) is not ToolSuccess:
            return
        handles = [
            p.name for p in result.parts if type(p) is ResourceLinkPart and p.uri.startswith(_ARTIFACT)
        ]
        if handles:
            connection = _connection_of(session)
            made = self._made.get(connection)
            if made is None:
                made = self._made[connection] = set()
            made.update(handles)

    def _reader(self, ctx: ServerRequestContext[Any]) -> tuple[str | None, set[str] | None, bool]:
        """Whose artifacts this request reads (the principal its calls run for); for an anonymous
        session of the handshake era, the only handles it may read (its own); and whether it may
        list them (an anonymous request with no session may not: nothing says which are its own)."""
        view = self._view()
        principal = getattr(view, "principal", None) if view is not None else None
        if principal is not None:
            return principal, None, True
        connection = _connection_of(ctx.session)  # one per client; a session object per request
        if connection in self._handshakes:
            return None, self._made.get(connection, set()), True
        return None, None, False

    async def _list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        store = self._rt.artifacts
        assert store is not None  # served only with artifacts
        principal, own, may_list = self._reader(ctx)
        if not may_list:
            return types.ListResourcesResult(resources=[])
        listed = [
            types.Resource(
                uri=info.uri,
                name=info.handle,
                mime_type=info.mime_type,
                size=info.size,
                description=(
                    f"a result of {info.chars:,} characters, kept whole"
                    if info.chars is not None
                    else f"a result of {info.size:,} bytes, kept whole"
                ),
            )
            for info in await store.listing(principal)
            if own is None or info.handle in own
        ]
        return types.ListResourcesResult(resources=listed)

    async def _read_resource(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        store = self._rt.artifacts
        assert store is not None  # served only with artifacts
        uri = str(params.uri)
        handle = uri.removeprefix(_ARTIFACT)
        principal, own, _ = self._reader(ctx)
        try:
            if not uri.startswith(_ARTIFACT):
                raise ArtifactMissing(f"{uri} is not an artifact of this server (artifact://art_...)")
            if own is not None and handle not in own:
                raise ArtifactMissing(f"no artifact {handle} was made in this session")
            info = await store.info(principal, handle)
            # room among the reads under way (a whole artifact is joined, then encoded and written
            # by the SDK: six readers of 40 MiB grew the server by 500-900 MiB): `ReadBudget`
            held = await self.reading.take(info.size * READ_COPIES)
            try:
                data = await store.read(principal, handle)
            except BaseException:
                self.reading.give(held)
                raise
        except ArtifactMissing as exc:
            raise MCPError(INVALID_PARAMS, f"Resource not found: {exc}", {"uri": uri}) from None
        contents: types.TextResourceContents | types.BlobResourceContents
        if isinstance(data, str):
            contents = types.TextResourceContents(uri=uri, mime_type=info.mime_type, text=data)
        else:
            blob = base64.b64encode(data).decode("ascii")
            del data
            contents = types.BlobResourceContents(uri=uri, mime_type=info.mime_type, blob=blob)
        if self.reading.counts_sent:  # given back as the HTTP app writes the response
            self.reading.owe(held, info.size)
        else:  # given back once the SDK lets go of it
            weakref.finalize(contents, self.reading.give, held)
        return types.ReadResourceResult(contents=[contents])

    async def _set_level(
        self, ctx: ServerRequestContext[Any], params: types.SetLevelRequestParams
    ) -> types.EmptyResult:
        self._levels[_connection_of(ctx.session)] = _SEVERITY.get(params.level, 0)
        return types.EmptyResult()

    async def _initialized(self, ctx: ServerRequestContext[Any], params: types.NotificationParams) -> None:
        # A handshake-era connection: list_changed goes to it on its standalone channel. The
        # SDK keeps no list of connections and exposes no close hook on the request context,
        # so the session's connection (private) is where its removal is scheduled. Once per
        # connection: a client that repeats the notification holds nothing more for it.
        session = ctx.session
        key = _connection_of(session)
        if key in self._sessions:
            return
        self._sessions[key] = session
        self._handshakes.add(key)
        connection = getattr(session, "_connection", None)
        if isinstance(connection, Connection):
            connection.exit_stack.callback(self._sessions.pop, key, None)

    async def announce_changes(self) -> None:
        """Tell connected clients whenever the runtime's tools change; runs until cancelled."""
        version = self._rt.registry_version
        while True:
            version = await self._rt.wait_registry_changed(version)
            await self._bus.publish(ToolsListChanged())
            sessions = list(self._sessions.values())
            if sessions:
                async with trio.open_nursery() as nursery:
                    for session in sessions:
                        nursery.start_soon(self._notify, session)

    @staticmethod
    async def _notify(session: ServerSession) -> None:
        with trio.move_on_after(_NOTIFY_TIMEOUT):
            try:
                await session.send_tool_list_changed()
            except Exception as exc:  # a connection going away; the next listing is current anyway
                log.debug("list_changed not delivered: %s", exc)


def _search_listing(search: ToolSearch) -> types.Tool:
    """The search tool as MCP lists it, with the shape of its `structuredContent`."""
    listed = dict(render_tool(search.descriptor(), "mcp"))
    listed["outputSchema"] = {
        "type": "object",
        "properties": {
            "tools": {
                "type": "array",
                "description": "The tools found, as tools/list gives them.",
                "items": {"type": "object"},
            }
        },
        "required": ["tools"],
    }
    return types.Tool.model_validate(listed)


async def _release_stream(close: Any, after: float) -> None:
    """SSE polling (SEP-1699): a call still running after `after` seconds lets go of its stream.

    The client reconnects with Last-Event-ID after the `retry` interval and gets what it missed.
    """
    await trio.sleep(after)
    await close()


def _connection_of(session: ServerSession) -> Any:
    """The connection a request's session belongs to (one per client; private in the SDK)."""
    return getattr(session, "_connection", session)


def call_metadata(meta: Mapping[str, Any] | None) -> dict[str, str] | None:
    """A served call's metadata from its request's `_meta`: the W3C trace context it continues
    (`trace_metadata`) and the client's idempotency key, if it sent one (a key longer than 128
    characters is kept as its SHA-256)."""
    metadata = trace_metadata(meta)
    if meta is not None:
        for name in IDEMPOTENCY_KEYS:
            key = meta.get(name)
            if isinstance(key, str) and key:
                if len(key) > _LONG_KEY:
                    key = "sha256:" + hashlib.sha256(key.encode()).hexdigest()
                metadata = {**metadata, "idempotency_key": key} if metadata else {"idempotency_key": key}
                break
    return metadata


def trace_metadata(meta: Mapping[str, Any] | None) -> dict[str, str] | None:
    """The W3C trace context a served call continues, as call metadata (None when there is none).

    The current span is the SDK's server span of this request (a child of the `_meta`
    traceparent), or the client's span itself when no SDK is configured; the `_meta` carrier
    is used as it is when the current context belongs to another trace.
    """
    traceparent = meta.get("traceparent") if meta is not None else None
    requested = _trace_id(traceparent) if isinstance(traceparent, str) else None
    current = trace.get_current_span().get_span_context()
    if current.is_valid and requested in (None, current.trace_id):
        carrier: dict[str, str] = {}
        _W3C.inject(carrier)
        return carrier
    if meta is None or requested is None:
        return None
    carrier = {"traceparent": str(traceparent)}
    tracestate = meta.get("tracestate")
    if isinstance(tracestate, str):
        carrier["tracestate"] = tracestate
    return carrier


def _trace_id(traceparent: str) -> int | None:
    """The trace id of a W3C traceparent (`00-<trace id>-<span id>-<flags>`), None if malformed."""
    parts = traceparent.split("-")
    if len(parts) != 4 or len(parts[1]) != 32:
        return None
    try:
        return int(parts[1], 16) or None
    except ValueError:
        return None


async def serve_stdio(
    rt: Runtime,
    *,
    name: str = DEFAULT_NAME,
    instructions: str | None = None,
    search: ToolSearch | None = None,
) -> None:
    """Serve `rt`'s tools over MCP on this process's stdin and stdout, until stdin closes.

    While serving, stdout carries only the protocol (stray prints go to stderr). Both
    protocol eras are served: the client's first request decides.

    Args:
        rt: the runtime whose tools are served (tools registered later are served too).
        name: the server's name in the handshake.
        instructions: text the client may show its model about these tools.
        search: past `search.threshold` tools, list a search tool and `search.always`
            instead of every tool (see the module's docstring).
    """
    served = ServedRuntime(rt, name=name, instructions=instructions, search=search)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(served.announce_changes)
        async with stdio_server() as (read_stream, write_stream):
            await served.server.run(read_stream, write_stream, served.server.create_initialization_options())
        nursery.cancel_scope.cancel()


def _listen_owner(ctx: ServerRequestContext[Any]) -> tuple[str, str | None]:
    """Whose budget of task listen streams a request spends: its verified token's principal,
    else (a shared token, or none) its client's address, as sessions are shared out."""
    principal = principal_of_token(get_access_token())
    if principal is not None:
        return ("principal", principal)
    client = getattr(getattr(ctx, "request", None), "client", None)
    return ("peer", getattr(client, "host", None))


def principal_of_token(token: AccessToken | None) -> str | None:
    """Who a verified bearer token names: its subject, or its client (None for no token, or
    the one shared `token=` of `serve_http`, which names no one)."""
    if token is None:
        return None
    if token.subject:
        return token.subject
    return None if token.client_id == "bearer-token" else token.client_id
