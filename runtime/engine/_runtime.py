"""`Runtime`: the public face of a running engine (get one from `open_runtime`, in `_open`).

Every call method goes through the one entry (`_entry.Entry`): prepare, begin, admit, wait,
finish. `Runtime` has no public constructor: `open_runtime` makes one and closes it.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine, Iterable, Mapping
from typing import Any, NoReturn, TypeVar, overload

from ..exceptions import RuntimeClosed
from ..features import Feature
from ..messages import ToolCall, ToolFailure, ToolResult, ToolSuccess
from ..registry import ToolLike, ToolRegistry
from ..stores import ArtifactStore, Store
from ..tools import Asker, FunctionTool, ToolBase
from ._entry import STREAM_BUFFER, Entry
from ._routing import RegistryActor
from ._scope import Prepare, Scope
from ._scoped import ScopedRuntime, collect, completed
from ._stats import RuntimeStatistics
from ._supervisor import Supervisor

__all__ = ["Runtime"]

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
