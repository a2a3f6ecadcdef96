"""`RuntimeThread`: a runtime on its own trio thread, for sync code and asyncio servers.

    with RuntimeThread(registry) as rt:
        result = rt.call(ToolCall(...))                 # from any thread (blocks that thread)
        results = rt.call_many(calls)
        for result in rt.as_completed(calls): ...

    async def handler(request):                         # inside an asyncio server
        results = await rt.aio.call_many(calls)         # never blocks the event loop
        results = await rt.acall_many(calls)            # the same

Its call surface is every runtime's (`call`, `call_many`, `as_completed`, `stream`, `invoke`,
`scoped`, `detach`, `detached`, `pending`, `detached_calls`, with the same keywords), blocking; `rt.aio` is the same surface awaited from asyncio
(any loop, any thread but the runtime's own), and so is a view's `.aio`. A call from asyncio
costs one hand-off to the trio thread and one back (no thread pool); cancelling the asyncio task
cancels the call on the trio side (it fails CANCELLED there). The caller's context variables
(its OpenTelemetry context) go with every call.

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
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar, Unpack

import trio

from ..engine import DetachedCall, DetachedStatus, Runtime, RuntimeOptions, RuntimeStatistics
from ..engine.lowlevel import (
    STREAM_BUFFER,
    Calls,
    CallSettings,
    Entry,
    Prepare,
    Scope,
    ScopedRuntime,
    collected,
    new_invoke_id,
    open_engine,
    routing_of,
    settings_keywords_method,
)
from ..exceptions import RuntimeClosed
from ..messages import ToolCall, ToolResult
from ..registry import ToolLike, ToolRegistry
from ..schema import ToolDescriptor
from ..tools import ToolBase

__all__ = ["BlockingDetachedCall", "RuntimeThread", "ThreadScopedRuntime"]

log = logging.getLogger("runtime.embed")

_THREAD_EXIT_GRACE = 1.0  # seconds to wait for the thread once its runtime has closed

T = TypeVar("T")
_END = object()


class BlockingCalls:
    """The call surface for sync code and other threads, declared once: a RuntimeThread's and
    its views'. Each method blocks its thread until its result, on the runtime's own thread;
    `aio` is the same surface for asyncio code (`await rt.aio.call(...)`)."""

    _thread_of: RuntimeThread
    _scope: Scope | None = None
    _closed = False

    def _target(self) -> Calls:
        """The trio-side surface these calls go through (checked open)."""
        thread = self._thread_of
        rt = thread._open()
        if self._closed:
            raise RuntimeClosed("this view is closed; make another with rt.scoped(...)")
        if self._scope is None:
            return rt
        return ScopedRuntime(thread._entry_now(), routing_of(rt), self._scope)

    # -- what it sees (snapshots, safe to read from any thread) --------------------------------

    @property
    def principal(self) -> str | None:
        return self._scope.principal if self._scope is not None else None

    @property
    def registry(self) -> ToolRegistry:
        """The tools it sees now (an immutable snapshot)."""
        return self._target().registry

    def descriptors(self) -> list[ToolDescriptor]:
        return self._target().descriptors()

    def schemas(self, provider: str = "jsonschema", *, strict: bool = False) -> list[dict[str, Any]]:
        return self._target().schemas(provider, strict=strict)

    def search(self, query: str, *, limit: int = 5) -> list[ToolDescriptor]:
        return self._target().search(query, limit=limit)

    # -- calling, blocking ----------------------------------------------------------------------

    def call(self, call: ToolCall, /, **settings: Unpack[CallSettings]) -> ToolResult:
        """`Runtime.call` from any thread but the runtime's own; blocks until the result."""
        return self._thread_of._blocking(self._target().call, call, **settings)

    def call_many(self, calls: Iterable[ToolCall], /, **settings: Unpack[CallSettings]) -> list[ToolResult]:
        """`Runtime.call_many` from any thread; results in the order of `calls`."""
        return self._thread_of._blocking(self._target().call_many, list(calls), **settings)

    def as_completed(
        self, calls: Iterable[ToolCall], /, **settings: Unpack[CallSettings]
    ) -> Iterator[ToolResult]:
        """`Runtime.as_completed` from any thread: each result as it finishes. Leaving the loop
        early cancels the calls still running (close the iterator to do it at once)."""
        return self._thread_of._iterate(self._target().as_completed(list(calls), **settings))

    def stream(
        self, call: ToolCall, /, *, buffer: int = STREAM_BUFFER, **settings: Unpack[CallSettings]
    ) -> Iterator[str | ToolResult]:
        """`Runtime.stream` from any thread: a streaming tool's chunks as it yields them, then the
        one result. Each item is fetched when asked for, so a slow reader holds the tool up once
        `buffer` chunks wait; leaving the loop early cancels the call (close the iterator, or let
        the loop end, to do it at once)."""
        return self._thread_of._iterate(self._target().stream(call, buffer=buffer, **settings))

    def invoke(
        self,
        tool: ToolBase[Any, Any] | str,
        /,
        *,
        _metadata: Mapping[str, Any] | None = None,
        _timeout: float | None = None,
        _principal: str | None = None,
        **arguments: Any,
    ) -> ToolResult:
        """`Runtime.invoke` from any thread (keyword arguments, validated like a model's)."""
        name = tool if isinstance(tool, str) else tool.name
        call = ToolCall(id=new_invoke_id(), name=name, arguments=arguments)
        return self.call(call, metadata=_metadata, timeout=_timeout, principal=_principal)

    def scoped(
        self,
        *,
        principal: str | None = None,
        only: Iterable[str] | None = None,
        exclude: Iterable[str] = (),
        tags: Iterable[str] | None = None,
        prepare: Prepare | None = None,
    ) -> ThreadScopedRuntime:
        """A per-request view (`Runtime.scoped`), for other threads and asyncio tasks."""
        self._thread_of._open()
        scope = Scope(principal, only=only, exclude=exclude, tags=tags, prepare=prepare, parent=self._scope)
        return ThreadScopedRuntime(self._thread_of, scope)

    # -- calls that outlive a request, blocking ------------------------------------------------

    def detach(
        self,
        call: ToolCall,
        /,
        *,
        id: str | None = None,
        **settings: Unpack[CallSettings],
    ) -> BlockingDetachedCall:
        """`Runtime.detach` from any thread: the handle at once (its methods block)."""
        target = self._target()
        handle = self._thread_of._blocking(target.detach, call, id=id, **settings)
        return BlockingDetachedCall(self._thread_of, handle)

    def detached(self, id: str, *, principal: str | None = None) -> BlockingDetachedCall:
        """`Runtime.detached` from any thread: a handle on an existing detached call."""
        return BlockingDetachedCall(self._thread_of, self._target().detached(id, principal=principal))

    def pending(self, *, principal: str | None = None) -> list[DetachedStatus]:
        """`Runtime.pending` from any thread."""
        target = self._target()
        return self._thread_of._blocking(target.pending, principal=principal)

    def detached_calls(self, *, principal: str | None = None) -> list[DetachedStatus]:
        """`Runtime.detached_calls` from any thread."""
        target = self._target()
        return self._thread_of._blocking(target.detached_calls, principal=principal)

    # -- the same surface, from asyncio ---------------------------------------------------------

    @property
    def aio(self) -> Calls:
        """This surface for asyncio code on any loop of another thread: each call is handed to
        the runtime's thread and its result back (cancelling the asyncio task cancels it there)."""
        thread = self._thread_of
        thread._open()
        return _AsyncFace(_ThreadDriver(thread), routing_of(thread._open()), self._scope)

    async def acall(self, call: ToolCall, /, **settings: Unpack[CallSettings]) -> ToolResult:
        """`rt.aio.call`: `Runtime.call` from an asyncio task, without blocking its event loop."""
        return await self.aio.call(call, **settings)

    async def acall_many(
        self, calls: Iterable[ToolCall], /, **settings: Unpack[CallSettings]
    ) -> list[ToolResult]:
        """`rt.aio.call_many`: `Runtime.call_many` from an asyncio task."""
        return await self.aio.call_many(calls, **settings)


class BlockingDetachedCall:
    """A `DetachedCall` for sync code and other threads: the same methods, each blocking until
    the runtime's thread has done it (`watch` is a blocking iterator)."""

    __slots__ = ("_handle", "_thread")

    def __init__(self, thread: RuntimeThread, handle: DetachedCall) -> None:
        self._thread = thread
        self._handle = handle

    @property
    def id(self) -> str:
        return self._handle.id

    @property
    def principal(self) -> str | None:
        return self._handle.principal

    def __repr__(self) -> str:
        return f"<BlockingDetachedCall {self.id!r} principal={self.principal!r}>"

    def status(self) -> DetachedStatus:
        return self._thread._blocking(self._handle.status)

    def result(self) -> ToolResult:
        return self._thread._blocking(self._handle.result)

    def watch(self) -> Iterator[DetachedStatus]:
        return self._thread._iterate(self._handle.watch())

    def cancel(self) -> DetachedStatus:
        return self._thread._blocking(self._handle.cancel)

    def approve(self, *, arguments: str | Mapping[str, Any] | None = None) -> DetachedStatus:
        return self._thread._blocking(self._handle.approve, arguments=arguments)

    def deny(self, message: str) -> DetachedStatus:
        return self._thread._blocking(self._handle.deny, message)

    def expire(self) -> DetachedStatus:
        return self._thread._blocking(self._handle.expire)

    def supply(self, *args: Any, error: str | None = None) -> DetachedStatus:
        return self._thread._blocking(self._handle.supply, *args, error=error)

    def answer(self, response: Any, *, key: str | None = None) -> DetachedStatus:
        return self._thread._blocking(self._handle.answer, response, key=key)


class _AsyncFace(Calls):
    """A RuntimeThread's (or a view's) call surface for asyncio code in other threads."""

    def _open(self) -> Scope | None:
        driver = self._driver
        assert isinstance(driver, _ThreadDriver)
        driver.thread._open()
        return self._scope


class _ThreadDriver:
    """The driver of asyncio callers in other threads: each call, batch or stream runs on the
    runtime's trio thread (through its `Entry`), and what it gives comes back to the caller's
    loop; the caller's cancellation cancels it there."""

    def __init__(self, thread: RuntimeThread) -> None:
        self.thread = thread

    @property
    def durable(self) -> Any:
        return self.thread._entry_now().durable

    async def run(self, fn: Callable[[], Awaitable[T]], /) -> T:
        """`await fn()` on the runtime's thread (a detached call's verbs)."""
        return await self.thread._bridge(fn)

    async def call(
        self, call: ToolCall, *, scope: Scope | None = None, **settings: Unpack[CallSettings]
    ) -> ToolResult:
        entry = self.thread._entry_now()
        return await self.thread._bridge(entry.call, call, scope=scope, **settings)

    async def call_many(
        self, calls: Sequence[ToolCall], *, scope: Scope | None = None, **settings: Unpack[CallSettings]
    ) -> list[ToolResult]:
        entry = self.thread._entry_now()  # the whole batch on the runtime's thread: one hop each way
        return await self.thread._bridge(
            lambda: collected(entry.batch(calls, scope=scope, **settings), len(calls))
        )

    def batch(
        self, calls: Sequence[ToolCall], *, scope: Scope | None = None, **settings: Unpack[CallSettings]
    ) -> AsyncGenerator[list[Any], None]:
        entry = self.thread._entry_now()
        return self.thread._bridge_items(lambda: entry.batch(calls, scope=scope, **settings))

    def stream(
        self,
        call: ToolCall,
        *,
        scope: Scope | None = None,
        buffer: int = STREAM_BUFFER,
        **settings: Unpack[CallSettings],
    ) -> AsyncGenerator[str | ToolResult, None]:
        entry = self.thread._entry_now()
        return self.thread._bridge_items(lambda: entry.stream(call, scope=scope, buffer=buffer, **settings))


class RuntimeThread(BlockingCalls):
    """Run `open_runtime(registry, ...)` on a dedicated thread; a context manager.

    Args:
        registry: the tools, as for `open_runtime`.
        options, **settings: the runtime's settings, as for `open_runtime`.
    """

    @settings_keywords_method(RuntimeOptions)
    def __init__(self, registry: ToolRegistry | Iterable[ToolLike], options: RuntimeOptions) -> None:
        self._registry = registry
        self._options = options
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._runtime: Runtime | None = None
        self._entry: Entry | None = None
        self._nursery: trio.Nursery | None = None
        self._stop: trio.Event | None = None
        self._closed = False
        self._runtime_closed = threading.Event()  # open_runtime has returned (the thread may linger)
        self._thread_of = self

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
        async with (
            open_engine(self._registry, self._options) as (rt, entry),
            trio.open_nursery() as nursery,
        ):
            self._runtime = rt
            self._entry = entry
            self._nursery = nursery
            self._ready.set()
            await self._stop.wait()
            # Leaving the nursery waits for the calls already handed over; then the runtime closes.
        self._runtime = None
        self._entry = None
        self._runtime_closed.set()

    def statistics(self) -> RuntimeStatistics:
        """`Runtime.statistics()`, read on the runtime's thread."""
        rt = self._open()
        try:
            return trio.from_thread.run_sync(rt.statistics, trio_token=self._token)
        except trio.RunFinishedError:
            raise RuntimeClosed("the RuntimeThread has stopped") from None

    def register(self, *tools: ToolLike, replace: bool = False) -> None:
        """`Runtime.register` from any thread."""
        rt = self._open()
        self._blocking(lambda: rt.register(*tools, replace=replace))

    def unregister(self, *names: str) -> None:
        """`Runtime.unregister` from any thread."""
        rt = self._open()
        self._blocking(lambda: rt.unregister(*names))

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

    def _entry_now(self) -> Entry:
        entry = self._entry
        if entry is None or self._closed:
            raise RuntimeClosed("the RuntimeThread is not running; use it inside its `with` block")
        return entry

    def _iterate(self, items: Any) -> Iterator[Any]:
        """A trio async iterator (of the runtime's thread) as a blocking iterator: each item is
        fetched when asked for; leaving early closes it there."""
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

    async def _bridge_items(self, items: Callable[[], Any]) -> AsyncGenerator[Any, None]:
        """What a trio async iterator of the runtime's thread yields, passed to this asyncio task
        as it comes, each once the one before was taken (backpressure); closing this closes it."""
        queue: asyncio.Queue[Any] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        scope = trio.CancelScope()
        taken = threading.Semaphore(0)

        def tell(item: Any, error: BaseException | None = None) -> bool:
            """Pass one item to the caller's loop; False: that loop is closed (nobody reads)."""
            try:
                loop.call_soon_threadsafe(queue.put_nowait, (item, error))
            except RuntimeError:  # the caller gave up and closed its loop (`asyncio.run` ends)
                return False
            return True

        async def pump() -> None:
            try:
                with scope:
                    async with contextlib.aclosing(items()) as source:
                        async for item in source:
                            if not tell(item):
                                break  # closing the source answers its calls CANCELLED
                            await trio.to_thread.run_sync(taken.acquire, abandon_on_cancel=True)
                tell(_END)
            except Exception as exc:  # the caller's error (a closed runtime...): it raises there
                tell(_END, exc)
            except BaseException as exc:  # the caller's closing, or the runtime's shutdown
                tell(_END, exc)
                raise

        self._spawn(pump)
        try:
            while True:
                item, error = await queue.get()
                if item is _END:
                    if error is not None and not isinstance(error, trio.Cancelled):
                        raise error
                    if error is not None:
                        raise RuntimeClosed("the RuntimeThread stopped while these calls were running")
                    return
                taken.release()
                yield item
        finally:
            token = self._token
            if token is not None:
                with contextlib.suppress(trio.RunFinishedError):
                    token.run_sync_soon(scope.cancel)
            taken.release()

    def _spawn(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Start `fn` as a trio task on the runtime's thread, in a copy of the caller's context."""

        def spawn() -> None:
            nursery = self._nursery
            if nursery is not None and self._stop is not None and not self._stop.is_set():
                nursery.start_soon(fn)

        assert self._token is not None
        try:
            self._token.run_sync_soon(contextvars.copy_context().run, spawn)
        except trio.RunFinishedError:
            raise RuntimeClosed("the RuntimeThread has stopped") from None

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


class ThreadScopedRuntime(BlockingCalls):
    """A per-request view of a `RuntimeThread` (from `.scoped(...)`): the blocking call surface
    for this view's principal and visible tools, `aio` for asyncio; a context manager whose end
    closes it."""

    def __init__(self, thread: RuntimeThread, scope: Scope) -> None:
        self._thread_of = thread
        self._scope = scope
        self._closed = False
        scope.view = self  # what its `prepare` is given

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> ThreadScopedRuntime:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
