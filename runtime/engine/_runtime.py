"""`Runtime`: the public face of a running engine (get one from `open_runtime`, in `_open`).

Every call method goes through the one entry (`_entry.Entry`): prepare, begin, admit, wait,
finish. `Runtime` has no public constructor: `open_runtime` makes one and closes it.

A request's view of it (`Runtime.scoped`, a `ScopedRuntime`) has the same call methods, for
its principal and the tools its `Scope` lets it see; `registry` / `schemas` show what it sees.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine, Iterable, Mapping
from typing import Any, NoReturn, TypeVar, overload

from ..exceptions import RuntimeClosed
from ..features import Feature
from ..messages import ToolCall, ToolFailure, ToolResult, ToolSuccess
from ..registry import ToolLike, ToolRegistry
from ..schema import ToolDescriptor, render_tool
from ..stores import ArtifactStore
from ..tools import Asker, FunctionTool, ToolBase
from ._entry import STREAM_BUFFER, Entry
from ._scope import Prepare, Scope
from ._stats import RuntimeStatistics
from ._supervisor import RegistryActor, Supervisor

__all__ = ["Runtime", "ScopedRuntime", "View", "collect", "completed"]

R = TypeVar("R")


class _NoPublicConstructor(type):
    """`Runtime(...)` is refused: runtimes come from `open_runtime` (trio's pattern)."""

    def __call__(cls, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError(f"{cls.__qualname__} has no public constructor; use `async with open_runtime(...)`")

    def _create(cls, *args: Any, **kwargs: Any) -> Any:
        return super().__call__(*args, **kwargs)


class Runtime(metaclass=_NoPublicConstructor):
    """A running tool system; get one from `open_runtime`."""

    def __init__(self, routing: RegistryActor, entry: Entry, supervisor: Supervisor) -> None:
        self._routing = routing
        self._entry = entry
        self._supervisor = supervisor
        self._ids = itertools.count(1)
        # The hot path: `rt.call` is the entry's own (same signature, one coroutine frame less).
        self.call = entry.call  # type: ignore[method-assign]
        entry.views = lambda scope: ScopedRuntime(self, scope)

    # -- introspection ---------------------------------------------------------------

    @property
    def registry(self) -> ToolRegistry:
        """The tools callable now (a snapshot, MCP tools included)."""
        return self._routing.registry

    def search(self, query: str, *, limit: int = 5) -> list[ToolDescriptor]:
        """The tools that best match `query`, best first (`ToolRegistry.search` over the live
        registry, whose index is kept current as tools come and go, MCP tools included)."""
        return self._routing.registry.search(query, limit=limit)

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

    def statistics(self) -> RuntimeStatistics:
        """Per-tool counters: calls, failures by kind, in flight, queued, restarts, state,
        abandoned work (calls answered while their code ran on). `.to_dict()` for JSON."""
        return RuntimeStatistics(
            tools={name: a.statistics() for name, a in self._routing.routes.items()},
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
        actor = self._routing.routes.get(tool)
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

    # -- calling ---------------------------------------------------------------------

    async def call(
        self,
        call: ToolCall,
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        principal: str | None = None,
    ) -> ToolResult:
        """Run one tool call; always returns its result (a ToolSuccess or a ToolFailure).

        The result arrives by the call's deadline (its `timeout`, its tool's, the runtime's
        default), even from a tool that ignores cancellation. `principal`: who the call runs
        for (an id, never a secret: it is on the call's span and keys per-principal policies).

        Raises:
            RuntimeClosed: the runtime is closed (the only exception this raises, besides
                the caller's own cancellation).
        """
        return await self._entry.call(call, metadata=metadata, timeout=timeout, principal=principal)

    async def call_many(
        self,
        calls: Iterable[ToolCall],
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        principal: str | None = None,
    ) -> list[ToolResult]:
        """Run calls concurrently; results in the order of `calls`, one per call."""
        return await collect(self._entry, list(calls), metadata, timeout, principal, None)

    def as_completed(
        self,
        calls: Iterable[ToolCall],
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        principal: str | None = None,
    ) -> AsyncIterator[ToolResult]:
        """Run calls concurrently and yield each result as it finishes (fastest first).

        Stopping early cancels the calls still running (each still gets its CANCELLED result
        reported to the features). Python closes an async generator left by `break` only when
        it is garbage-collected, so close it yourself to cancel at once::

            async with contextlib.aclosing(rt.as_completed(calls)) as results:
                async for result in results:
                    ...
        """
        return completed(self._entry, list(calls), metadata, timeout, principal, None)

    def stream(
        self,
        call: ToolCall,
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        principal: str | None = None,
        buffer: int = STREAM_BUFFER,
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
        return self._entry.stream(
            call, metadata=metadata, timeout=timeout, principal=principal, buffer=buffer
        )

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
    ) -> ToolSuccess[R] | ToolFailure: ...
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
    ) -> ToolSuccess[R] | ToolFailure: ...
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
    ) -> ToolSuccess[R] | ToolFailure: ...
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
        tool parameter is ever taken for one.
        """
        name = tool if isinstance(tool, str) else tool.name
        call = ToolCall(id=f"invoke-{next(self._ids)}", name=name, arguments=arguments)
        return await self._entry.call(call, metadata=_metadata, timeout=_timeout, principal=_principal)

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
        only the tools `only` / `exclude` (names or globs), `tags` and `prepare` leave it.

            with rt.scoped(principal="user-42", exclude=["delete_*"]) as view:
                tools = view.schemas("openai")     # what this request's model is shown
                results = await view.call_many(calls)  # a hidden tool is UNKNOWN_TOOL
        """
        return ScopedRuntime(self, Scope(principal, only=only, exclude=exclude, tags=tags, prepare=prepare))

    async def _close(self) -> None:
        if self._entry.closing:
            return
        self._entry.closing = True
        await self._supervisor.stop_all()
        self._routing.close()
        self._entry.closed = True


class View:
    """What every scoped view has (`rt.scoped(...)` on each kind of runtime); a context manager
    whose end closes it (its calls then raise RuntimeClosed)."""

    def __init__(self, scope: Scope, routing: Any) -> None:
        self._scope = scope
        self._routing = routing
        self._closed = False
        scope.view = self

    @property
    def principal(self) -> str | None:
        return self._scope.principal

    @property
    def registry(self) -> ToolRegistry:
        """The tools this view sees now."""
        return self._scope.visible(self._routing.registry, self._routing.version)

    def descriptors(self) -> list[ToolDescriptor]:
        """What this view's model is told of each visible tool (after `prepare`)."""
        return self._scope.descriptors(self._routing.registry, self._routing.version)

    def search(self, query: str, *, limit: int = 5) -> list[ToolDescriptor]:
        """The tools this view sees that best match `query`, best first (as `ToolRegistry.search`,
        over the runtime's index, kept current as tools come and go), as this view describes them."""
        found = self.registry.search(query, limit=limit)
        if self._scope.prepare is None:
            return found
        shown = {d.name: d for d in self.descriptors()}
        return [shown.get(d.name, d) for d in found]

    def schemas(self, provider: str = "jsonschema", *, strict: bool = False) -> list[dict[str, Any]]:
        """The visible tools' definitions for `provider`, as `ToolRegistry.schemas` renders them."""
        if self._scope.prepare is None:
            return self.registry.schemas(provider, strict=strict)
        return [render_tool(d, provider, strict=strict) for d in self.descriptors()]

    def _check(self) -> Scope:
        if self._closed:
            raise RuntimeClosed("this view is closed; make another with rt.scoped(...)")
        return self._scope

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class ScopedRuntime(View):
    """A per-request view of a `Runtime` (from `Runtime.scoped`): the runtime's call methods,
    for this view's principal and visible tools, and `registry` / `schemas` of what it sees."""

    def __init__(self, runtime: Runtime, scope: Scope) -> None:
        super().__init__(scope, runtime._routing)
        self._entry = runtime._entry
        self._ids = runtime._ids

    async def call(
        self, call: ToolCall, *, metadata: Mapping[str, Any] | None = None, timeout: float | None = None
    ) -> ToolResult:
        """`Runtime.call`, for this view."""
        return await self._entry.call(call, metadata=metadata, timeout=timeout, scope=self._check())

    async def call_many(
        self,
        calls: Iterable[ToolCall],
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> list[ToolResult]:
        """`Runtime.call_many`, for this view."""
        return await collect(self._entry, list(calls), metadata, timeout, None, self._check())

    def as_completed(
        self,
        calls: Iterable[ToolCall],
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> AsyncIterator[ToolResult]:
        """`Runtime.as_completed`, for this view."""
        return completed(self._entry, list(calls), metadata, timeout, None, self._check())

    def stream(
        self,
        call: ToolCall,
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        buffer: int = STREAM_BUFFER,
    ) -> AsyncGenerator[str | ToolResult, None]:
        """`Runtime.stream`, for this view."""
        return self._entry.stream(
            call, metadata=metadata, timeout=timeout, scope=self._check(), buffer=buffer
        )

    async def invoke(
        self,
        tool: ToolBase[Any, Any] | str,
        /,
        *,
        _metadata: Mapping[str, Any] | None = None,
        _timeout: float | None = None,
        **arguments: Any,
    ) -> ToolResult:
        """`Runtime.invoke`, for this view."""
        name = tool if isinstance(tool, str) else tool.name
        call = ToolCall(id=f"invoke-{next(self._ids)}", name=name, arguments=arguments)
        return await self._entry.call(call, metadata=_metadata, timeout=_timeout, scope=self._check())


async def collect(
    entry: Entry,
    calls: list[ToolCall],
    metadata: Mapping[str, Any] | None,
    timeout: float | None,
    principal: str | None,
    scope: Scope | None,
) -> list[ToolResult]:
    results: list[Any] = [None] * len(calls)
    async with contextlib.aclosing(entry.batch(calls, metadata, timeout, principal, scope)) as chunks:
        async for chunk in chunks:
            for c in chunk:
                results[c.index] = c.result
    return results


async def completed(
    entry: Entry,
    calls: list[ToolCall],
    metadata: Mapping[str, Any] | None,
    timeout: float | None,
    principal: str | None,
    scope: Scope | None,
) -> AsyncGenerator[ToolResult]:
    # aclosing: a consumer that stops early closes this generator, and that must close the
    # batch too (cancelling its calls now), not leave it to the garbage collector.
    async with contextlib.aclosing(entry.batch(calls, metadata, timeout, principal, scope)) as chunks:
        async for chunk in chunks:
            for c in chunk:
                yield c.result  # type: ignore[misc]  # settled: DONE
