"""The call surface, declared once, and `Runtime`, the public face of a running engine.

`Calls` is every runtime's call surface: `call`, `call_many`, `as_completed`, `stream`, `invoke`
and `scoped`, with the same keywords, the calls that outlive a request (`detach`, `detached`,
`pending`, `detached_calls`), and `registry` / `descriptors` / `schemas` / `search` of
what it sees. `Runtime` (from `open_runtime`, for trio callers), a request's view of any
runtime (`ScopedRuntime`, from `.scoped(...)`), the asyncio runtime (`runtime.embed`) and a
RuntimeThread's asyncio face are each a `Calls` on a `Driver`: how its callers wait for the
entry's one sequence of steps (prepare, begin, admit, wait, finish). The trio driver is the
`Entry` itself; the asyncio driver is `_entry.AsyncioDriver`; a RuntimeThread bridges to the
trio driver from other threads. That protocol is the documented internal port the embeddings
use.

`Runtime` has no public constructor: `open_runtime` makes one and closes it.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Mapping,
    Sequence,
)
from typing import Any, NoReturn, Protocol, TypeVar, Unpack, overload

import trio

from ..exceptions import RuntimeClosed
from ..features import Feature
from ..messages import ToolCall, ToolFailure, ToolPending, ToolResult, ToolSuccess
from ..registry import ToolLike, ToolRegistry
from ..schema import ToolDescriptor, render_tool
from ..stores import ArtifactStore, Store
from ..tools import FunctionTool, ToolBase
from ..tools.lowlevel import Asker
from ._call import Call
from ._detached import DetachedCall
from ._entry import STREAM_BUFFER, CallSettings, Entry
from ._journal import DetachedStatus
from ._scope import Prepare, Scope
from ._stats import RuntimeStatistics
from ._supervisor import RegistryActor, Supervisor

__all__ = [
    "CallSettings",
    "Calls",
    "Driver",
    "Runtime",
    "ScopedRuntime",
    "new_invoke_id",
    "one_batch",
    "routing_of",
]

R = TypeVar("R")

_invoke_ids = itertools.count(1)


def routing_of(surface: Calls) -> RegistryActor:
    """The registry actor a surface reads (for an embedding that puts a surface of its own on
    the same runtime)."""
    return surface._routing


def one_batch(surface: Calls) -> ScopedRuntime:
    """A view of `surface` (same principal, same tools, as it describes them) whose calls count as
    one batch however each is made: `Budget(per_batch=N)` lets N of them run at once and the
    others wait their turn within their deadlines, as a `call_many`'s calls do. For callers
    that make one model turn's calls one by one (code mode's program)."""
    return ScopedRuntime(surface._driver, surface._routing, Scope(parent=surface._scope, batch=True))


def new_invoke_id() -> str:
    """An id for a call made from code (`invoke`): unique in this process, on every runtime."""
    return f"invoke-{next(_invoke_ids)}"


class Driver(Protocol):
    """How a runtime's callers wait for the entry's steps (the internal port of the embeddings).

    Each method takes the call's settings as the entry does, and `scope`, the view's (None: the
    whole runtime). `batch` yields the batch's calls in chunks, in the order they finish.
    """

    def call(
        self, call: ToolCall, *, scope: Scope | None = None, **settings: Unpack[CallSettings]
    ) -> Awaitable[ToolResult]: ...

    def call_many(
        self, calls: Sequence[ToolCall], *, scope: Scope | None = None, **settings: Unpack[CallSettings]
    ) -> Awaitable[list[ToolResult]]:
        """The batch's results in the order of `calls` (`collected` from `batch`, where the
        driver's callers wait: one hop for a thread's)."""
        ...

    def batch(
        self, calls: Sequence[ToolCall], *, scope: Scope | None = None, **settings: Unpack[CallSettings]
    ) -> AsyncGenerator[list[Call[Any]], None]: ...

    def stream(
        self,
        call: ToolCall,
        *,
        scope: Scope | None = None,
        buffer: int = STREAM_BUFFER,
        **settings: Unpack[CallSettings],
    ) -> AsyncGenerator[str | ToolResult, None]: ...

    def run(self, fn: Callable[[], Awaitable[R]], /) -> Awaitable[R]:
        """`await fn()` where the runtime's own steps run (trio), for this driver's callers."""
        ...

    @property
    def durable(self) -> Any:
        """The runtime's journal of detached and deferred calls (engine/_detached.py `Book`)."""
        ...


class Calls:
    """The call surface, declared once (see the module docstring): a runtime's, or a view's.

    Every call gets exactly one result (a ToolSuccess or a ToolFailure), which arrives by its
    deadline (its `timeout`, its tool's, the runtime's default) even from a tool that ignores
    cancellation. `principal`: who the call runs for (an id, never a secret: it is on the
    call's span and keys per-principal policies); a view's calls run for its principal unless
    a call names another. The only exceptions these raise are the caller's own: the runtime
    (or the view) is closed, and the caller's cancellation.
    """

    def __init__(self, driver: Driver, routing: RegistryActor, scope: Scope | None) -> None:
        self._driver = driver
        self._routing = routing
        self._scope = scope
        self._closed = False
        self._searched: tuple[int, ToolRegistry] | None = None  # (routing version, what `search` reads)
        if scope is not None and scope.view is None:
            scope.view = self  # what its `prepare` is given: the view its caller holds

    # -- what it sees ------------------------------------------------------------------

    @property
    def principal(self) -> str | None:
        """Who this view's calls run for (None: nobody said)."""
        return self._scope.principal if self._scope is not None else None

    @property
    def registry(self) -> ToolRegistry:
        """The tools it sees now (a snapshot, MCP tools included)."""
        routing, scope = self._routing, self._scope
        if scope is None:
            return routing.registry
        return scope.visible(routing.registry, routing.version)

    def descriptors(self) -> list[ToolDescriptor]:
        """What its model is told of each tool it sees (after a view's `prepare`)."""
        routing, scope = self._routing, self._scope
        if scope is None:
            return routing.registry.descriptors()
        return scope.descriptors(routing.registry, routing.version)

    def schemas(self, provider: str = "jsonschema", *, strict: bool = False) -> list[dict[str, Any]]:
        """The definitions of the tools it sees for `provider` (as `ToolRegistry.schemas`)."""
        scope = self._scope
        if scope is None or scope.prepare is None:
            return self.registry.schemas(provider, strict=strict)
        return [render_tool(d, provider, strict=strict) for d in self.descriptors()]

    def search(self, query: str, *, limit: int = 5) -> list[ToolDescriptor]:
        """The tools it sees that best match `query`, best first (`ToolRegistry.search` over
        the runtime's index, kept current as tools come and go), ranked by what it tells its
        model of them and as it describes them: a word a view's `prepare` took out of a
        description does not find the tool, one it put in does."""
        if self._scope is None:
            return self._routing.registry.search(query, limit=limit)
        return self._searchable().search(query, limit=limit)

    def _searchable(self) -> ToolRegistry:
        """The tools it sees, searched as it describes them (worked out once per registry version)."""
        version = self._routing.version
        searched = self._searched
        if searched is not None and searched[0] == version:
            return searched[1]
        visible = self.registry
        shown = {
            d.name: d
            for d in self.descriptors()
            if (t := visible.get_or_none(d.name)) is not None and d is not t.descriptor
        }
        if shown:  # re-described: searched through the runtime's index with what it shows in their place
            base = self._routing.registry
            visible = ToolRegistry._trusted({t.name: t for t in visible}, within=base, shown=shown)
        self._searched = (version, visible)
        return visible

    # -- calling -----------------------------------------------------------------------

    async def call(self, call: ToolCall, /, **settings: Unpack[CallSettings]) -> ToolResult:
        """Run one tool call; always returns its result (a ToolSuccess or a ToolFailure)."""
        scope = self._scope if not self._closed else self._open()  # (no call on the open path)
        return await self._driver.call(call, scope=scope, **settings)

    async def call_many(
        self, calls: Iterable[ToolCall], /, **settings: Unpack[CallSettings]
    ) -> list[ToolResult]:
        """Run calls concurrently; results in the order of `calls`, one per call."""
        scope = self._scope if not self._closed else self._open()
        return await self._driver.call_many(list(calls), scope=scope, **settings)

    def as_completed(
        self, calls: Iterable[ToolCall], /, **settings: Unpack[CallSettings]
    ) -> AsyncIterator[ToolResult]:
        """Run calls concurrently and yield each result as it finishes (fastest first).

        Stopping early cancels the calls still running (each still gets its CANCELLED result
        reported to the features). Python closes an async generator left by `break` only when
        it is garbage-collected, so close it yourself to cancel at once::

            async with contextlib.aclosing(rt.as_completed(calls)) as results:
                async for result in results:
                    ...
        """
        return self._completed(self._driver.batch(list(calls), scope=self._open(), **settings))

    async def _completed(self, chunks: AsyncGenerator[list[Call[Any]], None]) -> AsyncGenerator[ToolResult]:
        # aclosing: a consumer that stops early closes this generator, and that must close the
        # batch too (cancelling its calls now), not leave it to the garbage collector.
        async with contextlib.aclosing(chunks):
            async for chunk in chunks:
                for c in chunk:
                    yield c.result  # type: ignore[misc]  # settled: DONE

    def stream(
        self, call: ToolCall, /, *, buffer: int = STREAM_BUFFER, **settings: Unpack[CallSettings]
    ) -> AsyncGenerator[str | ToolResult, None]:
        """Run one call and yield a streaming tool's chunks as it yields them, then its one result
        (the last item, a ToolSuccess or ToolFailure; the only item for a tool that does not stream).

        At most `buffer` chunks wait for the reader: a slower reader holds the tool up at its
        next `yield` (backpressure). The call's deadline and the reader's cancellation stop the
        tool (its generator is closed) and end the stream with its TIMEOUT or CANCELLED.
        Stopping early cancels the call; close the generator to do it at once::

            async with contextlib.aclosing(rt.stream(call)) as items:
                async for item in items:
                    if isinstance(item, str):
                        print(item, end="")
                    else:
                        result = item
        """
        return self._driver.stream(call, scope=self._open(), buffer=buffer, **settings)

    @overload
    async def invoke(
        self,
        tool: FunctionTool[..., Coroutine[Any, Any, R]],
        /,
        *,
        _metadata: Mapping[str, Any] | None = None,
        _timeout: float | None = None,
        _principal: str | None = None,
        **arguments: Any,
    ) -> ToolSuccess[R] | ToolFailure | ToolPending: ...
    @overload
    async def invoke(
        self,
        tool: FunctionTool[..., R],
        /,
        *,
        _metadata: Mapping[str, Any] | None = None,
        _timeout: float | None = None,
        _principal: str | None = None,
        **arguments: Any,
    ) -> ToolSuccess[R] | ToolFailure | ToolPending: ...
    @overload
    async def invoke(
        self,
        tool: ToolBase[Any, R],
        /,
        *,
        _metadata: Mapping[str, Any] | None = None,
        _timeout: float | None = None,
        _principal: str | None = None,
        **arguments: Any,
    ) -> ToolSuccess[R] | ToolFailure | ToolPending: ...
    @overload
    async def invoke(
        self,
        tool: str,
        /,
        *,
        _metadata: Mapping[str, Any] | None = None,
        _timeout: float | None = None,
        _principal: str | None = None,
        **arguments: Any,
    ) -> ToolResult: ...
    async def invoke(
        self,
        tool: ToolBase[Any, Any] | str,
        /,
        *,
        _metadata: Mapping[str, Any] | None = None,
        _timeout: float | None = None,
        _principal: str | None = None,
        **arguments: Any,
    ) -> ToolResult:
        """Call a tool from code, with keyword arguments, through the same pipeline.

        Given the tool object, the result is typed from it: `ToolSuccess[int] | ToolFailure`
        for `@tool def add(a: int, b: int) -> int`.

        `await rt.invoke(add, a=1, b=2)`; the arguments are validated like a model's (a value
        that is not JSON, such as `object()`, is INVALID_ARGUMENTS for this call alone). The
        call's own settings are spelt with an underscore (`_principal=`, `_timeout=`...), so no
        tool parameter is ever taken for one. Its id is unique in the process (`invoke-N`).
        """
        name = tool if isinstance(tool, str) else tool.name
        call = ToolCall(id=new_invoke_id(), name=name, arguments=arguments)
        return await self.call(call, metadata=_metadata, timeout=_timeout, principal=_principal)

    # -- calls that outlive a request ---------------------------------------------------

    async def detach(
        self,
        call: ToolCall,
        /,
        *,
        id: str | None = None,
        **settings: Unpack[CallSettings],
    ) -> DetachedCall:
        """Start `call` as a detached call and return its handle at once (the call is in the
        journal by then): it runs in the runtime, not in this caller, and outlives the caller's
        request (and, on a SQLite or Redis store, this process: another process or a restart
        ends it). Everything else is a call's: its one result, its deadline (`timeout`, counted
        from now), its policies, its span (linked to the caller's).

        `id`: the detached call's id, when the caller chooses it (1-128 letters, digits and
        `_.:-`): a second `detach` with the same id and principal is the same call, not a
        second one (start exactly once, across retries of a request). Default: a new one.

        Raises:
            ToolOverloaded: the principal has `Durable.max_per_principal` live calls already.
            StoreError: the journal could not be written (nothing was started).
            ValueError: a malformed `id` or `timeout`.
            RuntimeClosed: the runtime (or the view) is closed.
        """
        scope = self._open()
        driver = self._driver
        book = driver.durable
        detached_id, owner = await driver.run(
            lambda: book.detach(
                call, settings.get("metadata"), settings.get("timeout"), settings.get("principal"), scope, id
            )
        )
        return DetachedCall(book, driver.run, detached_id, owner)

    def detached(self, id: str, *, principal: str | None = None) -> DetachedCall:
        """A handle on the detached (or deferred) call `id` of this view's principal (or
        `principal`), made at any time, in any process that shares the store. Nothing is read
        until it is used: an id that is not the principal's raises `CallNotFound` then."""
        scope = self._open()
        if principal is None and scope is not None:
            principal = scope.principal
        return DetachedCall(self._driver.durable, self._driver.run, id, principal)

    async def pending(self, *, principal: str | None = None) -> list[DetachedStatus]:
        """The principal's calls that wait for input (an approval, an outside result, the answer
        to their tool's question), oldest first."""
        return await self._listed(principal, waiting=True)

    async def detached_calls(self, *, principal: str | None = None) -> list[DetachedStatus]:
        """Every detached and deferred call of the principal still kept (running, waiting, or
        ended less than its ttl ago), oldest first."""
        return await self._listed(principal, waiting=False)

    async def _listed(self, principal: str | None, *, waiting: bool) -> list[DetachedStatus]:
        scope = self._open()
        if principal is None and scope is not None:
            principal = scope.principal
        book = self._driver.durable
        found: list[DetachedStatus] = await self._driver.run(lambda: book.listed(principal, waiting=waiting))
        return found

    def scoped(
        self,
        *,
        principal: str | None = None,
        only: Iterable[str] | None = None,
        exclude: Iterable[str] = (),
        tags: Iterable[str] | None = None,
        prepare: Prepare | None = None,
    ) -> ScopedRuntime:
        """A view for one request: its calls run for `principal`, and it sees (and may call)
        only the tools `only` / `exclude` (names or globs), `tags` and `prepare` leave it; a
        view of a view sees only what both let it.

            with rt.scoped(principal="user-42", exclude=["delete_*"]) as view:
                tools = view.schemas("openai")     # what this request's model is shown
                results = await view.call_many(calls)  # a hidden tool is UNKNOWN_TOOL
        """
        scope = Scope(principal, only=only, exclude=exclude, tags=tags, prepare=prepare, parent=self._scope)
        return ScopedRuntime(self._driver, self._routing, scope)

    def _open(self) -> Scope | None:
        """This surface's scope, checking it may still be called."""
        if self._closed:
            raise RuntimeClosed("this view is closed; make another with rt.scoped(...)")
        return self._scope


class ScopedRuntime(Calls):
    """A per-request view of a runtime (from `.scoped(...)` on any runtime or view): the call
    surface for its principal and the tools it may see; a context manager whose end closes it
    (its calls then raise RuntimeClosed). It waits as the runtime it views does (trio, asyncio)."""

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> ScopedRuntime:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class _NoPublicConstructor(type):
    """`Runtime(...)` is refused: runtimes come from `open_runtime` (trio's pattern)."""

    def __call__(cls, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError(f"{cls.__qualname__} has no public constructor; use `async with open_runtime(...)`")

    def _create(cls, *args: Any, **kwargs: Any) -> Any:
        return super().__call__(*args, **kwargs)


class Runtime(Calls, metaclass=_NoPublicConstructor):
    """A running tool system, for trio callers; get one from `open_runtime`."""

    def __init__(self, routing: RegistryActor, entry: Entry, supervisor: Supervisor) -> None:
        super().__init__(entry, routing, None)
        self._entry = entry
        self._supervisor = supervisor
        # The hot path: a trio caller's `rt.call` is the trio driver's own call (the same
        # signature and steps as `Calls.call`, one coroutine frame less: 4% of a call).
        self.call = entry.call  # type: ignore[method-assign]
        entry.views = lambda driver, scope: ScopedRuntime(driver, routing, scope)

    # -- introspection ---------------------------------------------------------------

    @property
    def registry_version(self) -> int:
        """Increases every time the set of tools changes (tools registered or removed)."""
        return self._routing.version

    async def wait_registry_changed(self, version: int) -> int:
        """Wait until `registry_version` differs from `version`; returns the new version.

        For edges that must tell their clients (MCP's `notifications/tools/list_changed`).
        """
        while self._routing.version == version:
            await self._routing.changed.wait()
        return self._routing.version

    @property
    def asking(self) -> Asker | None:
        """Who answers the tools' questions (`open_runtime(on_elicit=..., ...)`); None: no one.

        MCP connections answer their servers' elicitation, sampling and roots requests with these.
        """
        return self._entry.asking

    @property
    def max_result_chars(self) -> int:
        """Every text that goes back to a model is cut at this many characters (edges honour it too)."""
        return self._routing.settings.options.max_result_chars

    @property
    def features(self) -> tuple[Feature, ...]:
        pipeline = self._entry.pipeline
        return pipeline.features if pipeline is not None else ()

    @property
    def artifacts(self) -> ArtifactStore | None:
        """Where results over their limit are kept whole (`open_runtime(artifacts=...)`); None:
        they are cut. Read one from code with `await rt.artifacts.read(principal, handle)`."""
        keeper = self._routing.settings.keeper
        return keeper.store if keeper is not None else None

    @property
    def store(self) -> Store:
        """The store this runtime keeps state in (`open_runtime(store=...)`, a `MemoryStore` by
        default): its policies' state, and its MCP connections' tool pins."""
        resilience = self._routing.settings.resilience
        assert resilience is not None  # open_runtime always makes one
        return resilience.store

    def statistics(self) -> RuntimeStatistics:
        """Per-tool counters: calls, failures by kind, in flight, queued, restarts, state,
        abandoned work (calls answered while their code ran on). `.to_dict()` for JSON."""
        return RuntimeStatistics(
            tools=self._routing.statistics(),
            unknown_tool_calls=self._entry.unknown,
            **self._entry.store_health(),
        )

    async def invalidate(
        self, tool: str, arguments: Mapping[str, Any] | str | None = None, *, principal: str | None = None
    ) -> int:
        """Forget cached results of `tool` (`cache=Cache(...)`): all of them, a principal's,
        or those of one call (`arguments`, as the model would send them, with `principal`
        unless the cache is shared). Returns how many were forgotten (0: a tool without a cache).

        Raises:
            KeyError: no tool has that name.
            ValueError: `arguments` do not decode as the tool's.
        """
        actor = self._routing.actor(tool)
        if actor is None:
            raise KeyError(f"no tool named {tool!r}")
        return await actor.invalidate(arguments, principal)

    # -- run-time registration -------------------------------------------------------

    async def register(self, *tools: ToolLike, replace: bool = False) -> None:
        """Add tools while running (each gets a supervised actor); returns once each tool's
        first `setup()` attempt has ended (bounded by its `setup_timeout`).

        Raises:
            ValueError: a name is taken and `replace` is False.
            RuntimeClosed: the runtime is closed or shutting down.
        """
        self._check_not_closing()
        for actor in await self._routing.register(list(ToolRegistry(tools)), replace=replace):
            await actor.ready.wait()

    async def unregister(self, *names: str) -> None:
        """Remove tools while running; their waiting calls fail UNAVAILABLE.

        Raises:
            RuntimeClosed: the runtime is closed or shutting down.
        """
        self._check_not_closing()
        await self._routing.unregister(names)

    def _check_not_closing(self) -> None:
        self._entry.check_open()
        if self._entry.closing:
            raise RuntimeClosed("the runtime is shutting down; no tool can be added or removed")

    async def _close(self) -> None:
        if self._entry.closing:
            return
        self._entry.closing = True
        await self._supervisor.stop_all()
        self._routing.close()
        self._entry.closed = True
        # A turn for the callers just answered: two, as trio may run this task before them in
        # the batch of tasks they share, and once more before they run.
        await trio.lowlevel.cancel_shielded_checkpoint()
        await trio.lowlevel.cancel_shielded_checkpoint()
