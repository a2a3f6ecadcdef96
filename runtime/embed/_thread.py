"""`RuntimeThread`: a runtime on its own trio thread, for sync code and asyncio servers.

    with RuntimeThread(registry) as rt:
        result = rt.call(ToolCall(...))                 # from any thread (blocks that thread)
        results = rt.call_many(calls)

    async def handler(request):                         # inside an asyncio server
        results = await rt.acall_many(calls)            # never blocks the event loop

A call from asyncio costs one hand-off to the trio thread and one back (no thread pool);
cancelling the asyncio task cancels the call on the trio side (it fails CANCELLED there).
The caller's context variables (its OpenTelemetry context) go with every call.

For an asyncio server, `open_asyncio_runtime` (runtime/embed/_asyncio.py) runs the runtime on
the server's own loop instead, without this second thread; see docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any, TypeVar, Unpack

import trio

from ..engine import Runtime, RuntimeOptions, RuntimeOptionsKw, RuntimeStatistics, open_runtime
from ..engine._entry import STREAM_BUFFER
from ..engine._runtime import View, collect
from ..engine._scope import Prepare, Scope
from ..exceptions import RuntimeClosed
from ..messages import ToolCall, ToolResult
from ..registry import ToolLike, ToolRegistry

__all__ = ["RuntimeThread", "ThreadScopedRuntime"]

log = logging.getLogger("runtime.embed")

_THREAD_EXIT_GRACE = 1.0  # seconds to wait for the thread once its runtime has closed

T = TypeVar("T")


class RuntimeThread:
    """Run `open_runtime(registry, ...)` on a dedicated thread; a context manager.

    Args:
        registry: the tools, as for `open_runtime`.
        options, **settings: the runtime's settings, as for `open_runtime`.
    """

    def __init__(
        self,
        registry: ToolRegistry | Iterable[ToolLike] = (),
        *,
        options: RuntimeOptions | None = None,
        **settings: Unpack[RuntimeOptionsKw],
    ) -> None:
        self._registry = registry
        self._options = RuntimeOptions.build(options, **settings)
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._runtime: Runtime | None = None
        self._nursery: trio.Nursery | None = None
        self._stop: trio.Event | None = None
        self._closed = False
        self._runtime_closed = threading.Event()  # open_runtime has returned (the thread may linger)

    # -- lifecycle -------------------------------------------------------------------

    def __enter__(self) -> RuntimeThread:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def start(self) -> None:
        """Start the thread and wait until the runtime is open.

        Raises:
            RuntimeError: already started.
            Exception: whatever opening the runtime raised (a bad registry...).
        """
        if self._thread is not None:
            raise RuntimeError("this RuntimeThread was already started")
        self._thread = threading.Thread(target=self._run, name="tool-runtime", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._startup_error is not None:
            self._thread.join()
            raise self._startup_error

    def close(self) -> None:
        """Stop taking calls, let running calls finish, close the runtime, join the thread."""
        if self._closed or self._thread is None:
            self._closed = True
            return
        self._closed = True
        token, stop = self._token, self._stop
        if token is not None and stop is not None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(stop.set)
        # The runtime closes within its grace period; the thread's trio run then also waits for
        # work the runtime abandoned (a tool that ignores cancellation). Do not wait for that.
        while self._thread.is_alive() and not self._runtime_closed.wait(0.05):
            pass
        self._thread.join(_THREAD_EXIT_GRACE)
        if self._thread.is_alive():
            log.warning(
                "the runtime is closed, but its thread still runs work it abandoned (a tool that "
                "ignores cancellation); it is a daemon thread and ends with that work or the process"
            )

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:
            if not self._ready.is_set():
                self._startup_error = exc
                self._ready.set()
            else:
                raise

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with open_runtime(self._registry, options=self._options) as rt, trio.open_nursery() as nursery:
            self._runtime = rt
            self._nursery = nursery
            self._ready.set()
            await self._stop.wait()
            # Leaving the nursery waits for the calls already handed over; then the runtime closes.
        self._runtime = None
        self._runtime_closed.set()

    # -- from other threads ----------------------------------------------------------

    def call(
        self,
        call: ToolCall,
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        principal: str | None = None,
    ) -> ToolResult:
        """`Runtime.call` from any thread but the runtime's own; blocks until the result."""
        rt = self._open()
        return self._blocking(rt.call, call, metadata=metadata, timeout=timeout, principal=principal)

    def call_many(
        self,
        calls: Iterable[ToolCall],
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        principal: str | None = None,
    ) -> list[ToolResult]:
        """`Runtime.call_many` from any thread; results in the order of `calls`."""
        rt = self._open()
        return self._blocking(
            rt.call_many, list(calls), metadata=metadata, timeout=timeout, principal=principal
        )

    def stream(
        self,
        call: ToolCall,
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        principal: str | None = None,
        buffer: int = STREAM_BUFFER,
    ) -> Iterator[str | ToolResult]:
        """`Runtime.stream` from any thread: a streaming tool's chunks as it yields them, then the
        one result. Each item is fetched when asked for, so a slow reader holds the tool up once
        `buffer` chunks wait; leaving the loop early cancels the call (close the iterator, or let
        the loop end, to do it at once)."""
        rt = self._open()
        items = rt.stream(call, metadata=metadata, timeout=timeout, principal=principal, buffer=buffer)
        ended = False
        try:
            while True:
                try:
                    item = self._blocking(items.__anext__)
                except StopAsyncIteration:
                    ended = True
                    return
                yield item
        finally:
            if not ended:
                with contextlib.suppress(RuntimeClosed):
                    self._blocking(items.aclose)

    def scoped(
        self,
        principal: str | None = None,
        *,
        only: Iterable[str] | None = None,
        exclude: Iterable[str] = (),
        tags: Iterable[str] | None = None,
        prepare: Prepare | None = None,
    ) -> ThreadScopedRuntime:
        """A per-request view (`Runtime.scoped`), for other threads and asyncio tasks."""
        rt = self._open()
        return ThreadScopedRuntime(
            self, rt, Scope(principal, only=only, exclude=exclude, tags=tags, prepare=prepare)
        )

    @property
    def registry(self) -> ToolRegistry:
        """The tools callable now (a snapshot: an immutable registry swapped whole, safe to read
        from any thread)."""
        rt = self._runtime
        if rt is None or self._closed:
            raise RuntimeClosed("the RuntimeThread is not running; use it inside its `with` block")
        return rt.registry

    def statistics(self) -> RuntimeStatistics:
        """`Runtime.statistics()`, read on the runtime's thread."""
        rt = self._open()
        try:
            return trio.from_thread.run_sync(rt.statistics, trio_token=self._token)
        except trio.RunFinishedError:
            raise RuntimeClosed("the RuntimeThread has stopped") from None

    # -- from asyncio ----------------------------------------------------------------

    async def acall(
        self,
        call: ToolCall,
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        principal: str | None = None,
    ) -> ToolResult:
        """`Runtime.call` from an asyncio task, without blocking its event loop."""
        rt = self._open()
        return await self._bridge(rt.call, call, metadata=metadata, timeout=timeout, principal=principal)

    async def acall_many(
        self,
        calls: Iterable[ToolCall],
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        principal: str | None = None,
    ) -> list[ToolResult]:
        """`Runtime.call_many` from an asyncio task; results in the order of `calls`."""
        rt = self._open()
        return await self._bridge(
            rt.call_many, list(calls), metadata=metadata, timeout=timeout, principal=principal
        )

    # -- internals -------------------------------------------------------------------

    def _open(self) -> Runtime:
        rt = self._runtime
        if rt is None or self._closed:
            raise RuntimeClosed("the RuntimeThread is not running; use it inside its `with` block")
        if threading.current_thread() is self._thread:
            raise RuntimeError(
                "RuntimeThread methods are for other threads; on its own thread use the Runtime"
            )
        return rt

    def _blocking(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        async def run() -> T:
            return await fn(*args, **kwargs)

        try:
            return trio.from_thread.run(run, trio_token=self._token)
        except trio.RunFinishedError:
            raise RuntimeClosed("the RuntimeThread has stopped") from None

    async def _bridge(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        scope = trio.CancelScope()

        def deliver(outcome: Callable[[], None]) -> None:
            with contextlib.suppress(RuntimeError):  # a closed event loop: nobody is waiting any more
                loop.call_soon_threadsafe(outcome)

        async def run() -> None:
            outcome: Callable[[], None] | None = None
            try:
                with scope:
                    try:
                        value = await fn(*args, **kwargs)
                    except Exception as exc:
                        outcome = functools.partial(_fail, future, exc)
                    else:
                        outcome = functools.partial(_succeed, future, value)
            finally:  # cancelled (by the asyncio side, or at shutdown): the future is cancelled
                deliver(outcome or functools.partial(_cancel, future))

        def spawn() -> None:
            nursery = self._nursery
            if nursery is None or self._stop is None or self._stop.is_set():
                deliver(functools.partial(_fail, future, RuntimeClosed("the RuntimeThread is closing")))
                return
            nursery.start_soon(run)

        assert self._token is not None
        try:
            # The call's task is spawned inside a copy of the caller's context, so it starts with
            # the caller's context variables (its OpenTelemetry span: the parent of the tool's).
            self._token.run_sync_soon(contextvars.copy_context().run, spawn)
        except trio.RunFinishedError:
            raise RuntimeClosed("the RuntimeThread has stopped") from None
        try:
            return await future
        except asyncio.CancelledError:
            # The asyncio caller gave up: cancel the call where it runs (it fails CANCELLED there).
            with contextlib.suppress(trio.RunFinishedError):
                self._token.run_sync_soon(scope.cancel)
            raise


def _succeed(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _fail(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)


def _cancel(future: asyncio.Future[Any]) -> None:
    if not future.done():
        future.cancel()


class ThreadScopedRuntime(View):
    """A per-request view of a `RuntimeThread` (from `RuntimeThread.scoped`): `call` /
    `call_many` from other threads, `acall` / `acall_many` from asyncio tasks, for this view's
    principal and visible tools; `registry` / `schemas` of what it sees."""

    def __init__(self, owner: RuntimeThread, rt: Runtime, scope: Scope) -> None:
        super().__init__(scope, rt._routing)
        self._owner = owner
        self._entry = rt._entry

    def call(
        self, call: ToolCall, *, metadata: Mapping[str, Any] | None = None, timeout: float | None = None
    ) -> ToolResult:
        """`RuntimeThread.call`, for this view."""
        self._owner._open()
        return self._owner._blocking(
            self._entry.call, call, metadata=metadata, timeout=timeout, scope=self._check()
        )

    def call_many(
        self,
        calls: Iterable[ToolCall],
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> list[ToolResult]:
        """`RuntimeThread.call_many`, for this view."""
        self._owner._open()
        return self._owner._blocking(
            collect, self._entry, list(calls), metadata, timeout, None, self._check()
        )

    async def acall(
        self, call: ToolCall, *, metadata: Mapping[str, Any] | None = None, timeout: float | None = None
    ) -> ToolResult:
        """`RuntimeThread.acall`, for this view."""
        self._owner._open()
        return await self._owner._bridge(
            self._entry.call, call, metadata=metadata, timeout=timeout, scope=self._check()
        )

    async def acall_many(
        self,
        calls: Iterable[ToolCall],
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> list[ToolResult]:
        """`RuntimeThread.acall_many`, for this view."""
        self._owner._open()
        return await self._owner._bridge(
            collect, self._entry, list(calls), metadata, timeout, None, self._check()
        )
