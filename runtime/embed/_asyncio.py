"""`open_asyncio_runtime`: the runtime on an asyncio server's own event loop, no second thread.

    @contextlib.asynccontextmanager
    async def lifespan(app):                                  # FastAPI / Starlette
        async with open_asyncio_runtime(registry) as rt:
            app.state.tools = rt
            yield

    results = await app.state.tools.call_many(calls)          # in any handler

trio runs as a guest of the asyncio loop (`trio.lowlevel.start_guest_run`; asyncio and uvloop
both work): its tasks run on the loop's thread, between the loop's own callbacks, and only
trio's wait for I/O sits in a helper thread, blocked, most of the time. So the handlers, the
runtime and its async tools share one thread and never fight over the GIL; sync tools still
run in their threads.

An asyncio caller goes through the engine's one entry itself (`Entry`: prepare, begin, admit),
in its own task, and waits on an asyncio future: a call that cannot suspend runs right there, a
sync tool's thread reports to the loop, an asyncio tool's coroutine becomes a task of the loop,
and a trio tool's call is handed to a worker task of its actor; its deadline is a timer of the
loop. Only when a feature's hook may suspend does the call go through a trio task instead.
Cancelling the asyncio task cancels the call; its CancelledError is raised once the call has
ended (CANCELLED, hooks included), or a grace later if its code ignores the cancellation.

Tools declared `@tool(loop="asyncio")` run their coroutine as a task of this loop, so code
written for asyncio (asyncio.sleep, aiohttp, asyncpg) works in them, with the same timeouts,
cancellation, failures and spans as any tool.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import math
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar, Unpack

import outcome
import trio

from .._flows import drive_now
from ..engine import Runtime, RuntimeOptions, RuntimeOptionsKw, RuntimeStatistics
from ..engine._call import ABANDON_GRACE, CANCELLED_MESSAGE, QUEUED, Call
from ..engine._entry import STREAM_BUFFER, Entry, lapse_due
from ..engine._open import open_engine
from ..engine._plan import ToolPlan
from ..engine._runtime import View, collect, completed
from ..engine._scope import Prepare, Scope
from ..exceptions import RuntimeClosed
from ..features import Feature
from ..messages import FailureKind, ToolCall, ToolResult
from ..registry import ToolLike, ToolRegistry
from ..tools import ToolBase

log = logging.getLogger("runtime.embed")

__all__ = ["AsyncioRuntime", "AsyncioScopedRuntime", "open_asyncio_runtime"]

T = TypeVar("T")
_END = object()
_EAGER_RUN = 128  # calls a batch admits between two turns of the loop


class _Waiter:
    """The reply slot of an asyncio caller: its calls settle into `done` and wake it; its
    deadlines are a timer of the loop, which lapses the calls that are due."""

    __slots__ = ("_future", "_loop", "_timer", "_when", "calls", "done")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._future: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._when = math.inf
        self.calls: Sequence[Call[ToolPlan]] = ()
        self.done: collections.deque[Call[ToolPlan]] = collections.deque()

    def settled(self, call: Call[ToolPlan]) -> None:
        self.done.append(call)
        future = self._future
        if future is not None and not future.done():
            future.set_result(None)

    def expire_at(self, when: float) -> None:
        if when < self._when:
            self._arm(when)

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._when = when
        if when != math.inf:
            delay = max(0.0, when - trio.current_time())
            self._timer = self._loop.call_at(self._loop.time() + delay, self._lapse)

    def _lapse(self) -> None:
        self._timer = None
        self._when = math.inf
        self._arm(lapse_due(self.calls, trio.current_time()))

    async def wait(self, also: asyncio.Future[Any] | None = None) -> None:
        """Return once a call has settled into `done` (its deadlines lapse meanwhile), or `also` is done."""
        if self.done:
            return
        if self._timer is None:
            self._arm(min((c.expires for c in self.calls if not c.settled), default=math.inf))
        future = self._future = self._loop.create_future()
        try:
            if also is None:
                await future
            else:
                await asyncio.wait((future, also), return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._future = None
            future.cancel()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class AsyncioRuntime:
    """A runtime running on this asyncio loop (trio as its guest); from `open_asyncio_runtime`.

    Every method is for asyncio tasks of the loop the runtime was opened on; other threads
    use `RuntimeThread`. The calls mean what they mean on `Runtime`: every call gets exactly
    one result, and no exception from a tool reaches the caller.
    """

    def __init__(
        self, runtime: Runtime, entry: Entry, nursery: trio.Nursery, stop: trio.Event, loop: Any
    ) -> None:
        self._rt = runtime
        self._entry = entry
        self._nursery = nursery
        self._stop = stop
        self._loop: asyncio.AbstractEventLoop = loop
        self._closing = False

    @property
    def runtime(self) -> Runtime:
        """The trio-side `Runtime` (for trio code running in the same guest run)."""
        return self._rt

    @property
    def registry(self) -> ToolRegistry:
        """The tools callable now (a snapshot)."""
        return self._rt.registry

    @property
    def features(self) -> tuple[Feature, ...]:
        return self._rt.features

    def statistics(self) -> RuntimeStatistics:
        """`Runtime.statistics()` (`.to_dict()` gives plain JSON-ready data)."""
        self._check()
        return self._rt.statistics()

    async def call(
        self,
        call: ToolCall,
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        principal: str | None = None,
    ) -> ToolResult:
        """Run one tool call; always returns its result (`Runtime.call`)."""
        results = await self._batch([call], metadata, timeout, principal, None, single=True)
        return results[0]

    async def call_many(
        self,
        calls: Iterable[ToolCall],
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        principal: str | None = None,
    ) -> list[ToolResult]:
        """Run calls concurrently; results in the order of `calls`, one per call."""
        return await self._batch(list(calls), metadata, timeout, principal, None)

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
        """Call a tool from code with keyword arguments, through the same pipeline."""
        name = tool if isinstance(tool, str) else tool.name
        call = ToolCall(id=f"invoke-{id(arguments):x}", name=name, arguments=arguments)
        return await self.call(call, metadata=_metadata, timeout=_timeout, principal=_principal)

    def as_completed(
        self,
        calls: Iterable[ToolCall],
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        principal: str | None = None,
    ) -> AsyncIterator[ToolResult]:
        """Run calls concurrently and yield each result as it finishes (fastest first).

        Stopping early cancels the calls still running; close the generator to do it at once
        (`contextlib.aclosing`), as with `Runtime.as_completed`.
        """
        return self._completed(list(calls), metadata, timeout, principal, None)

    def stream(
        self,
        call: ToolCall,
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        principal: str | None = None,
        buffer: int = STREAM_BUFFER,
    ) -> AsyncIterator[str | ToolResult]:
        """`Runtime.stream` for asyncio: a streaming tool's chunks as it yields them, then the one
        result. A slow reader holds the tool up once `buffer` chunks wait; stopping early cancels
        the call (close the generator, `contextlib.aclosing`, to do it at once)."""
        return self._streamed(call, metadata, timeout, principal, None, buffer)

    def scoped(
        self,
        principal: str | None = None,
        *,
        only: Iterable[str] | None = None,
        exclude: Iterable[str] = (),
        tags: Iterable[str] | None = None,
        prepare: Prepare | None = None,
    ) -> AsyncioScopedRuntime:
        """A per-request view (`Runtime.scoped`), for asyncio callers."""
        return AsyncioScopedRuntime(
            self, Scope(principal, only=only, exclude=exclude, tags=tags, prepare=prepare)
        )

    async def _completed(
        self,
        batch: list[ToolCall],
        metadata: Mapping[str, Any] | None,
        timeout: float | None,
        principal: str | None,
        scope: Scope | None,
    ) -> AsyncGenerator[ToolResult]:
        self._check()
        await asyncio.sleep(0)  # the loop's other tasks get a turn, as trio's checkpoint gives them
        if not self._entry.direct:
            async with contextlib.aclosing(
                self._pumped(batch, metadata, timeout, principal, scope)
            ) as results:
                async for result in results:
                    yield result
            return
        waiter, cs = await self._begin(batch, metadata, timeout, principal, scope)
        finished = 0
        try:
            while finished < len(cs):
                await waiter.wait()
                while waiter.done:
                    c = waiter.done.popleft()
                    drive_now(self._entry.finishing(c))
                    finished += 1
                    yield c.result  # type: ignore[misc]  # settled
        except BaseException:  # stopped early, or cancelled: the calls still running end CANCELLED
            await self._cancelled(cs, waiter)
            raise
        finally:
            waiter.close()

    async def register(self, *tools: ToolLike, replace: bool = False) -> None:
        """`Runtime.register` from asyncio."""
        await self._run(lambda: self._rt.register(*tools, replace=replace))

    async def unregister(self, *names: str) -> None:
        """`Runtime.unregister` from asyncio."""
        await self._run(lambda: self._rt.unregister(*names))

    # -- the direct path: the engine's entry, from this task ----------------------------

    async def _batch(
        self,
        calls: list[ToolCall],
        metadata: Mapping[str, Any] | None,
        timeout: float | None,
        principal: str | None,
        scope: Scope | None,
        single: bool = False,
    ) -> list[ToolResult]:
        self._check()
        await asyncio.sleep(0)  # the loop's other tasks get a turn, as trio's checkpoint gives them
        entry = self._entry
        if not entry.direct:  # a feature's hook or a policy may suspend: the calls go through trio
            if single:
                one = calls[0]
                return [
                    await self._run(
                        lambda: entry.call(
                            one, metadata=metadata, timeout=timeout, principal=principal, scope=scope
                        )
                    )
                ]
            return await self._run(lambda: collect(entry, calls, metadata, timeout, principal, scope))
        waiter, cs = await self._begin(calls, metadata, timeout, principal, scope)
        finished = 0
        try:
            while finished < len(cs):
                await waiter.wait()
                while waiter.done:
                    drive_now(self._entry.finishing(waiter.done.popleft()))
                    finished += 1
        except BaseException:
            await self._cancelled(cs, waiter)
            raise
        finally:
            waiter.close()
        return [c.result for c in cs]  # type: ignore[misc]  # every one settled

    async def _begin(
        self,
        calls: list[ToolCall],
        metadata: Mapping[str, Any] | None,
        timeout: float | None,
        principal: str | None,
        scope: Scope | None,
    ) -> tuple[_Waiter, list[Call[ToolPlan]]]:
        """Prepare, begin and admit every call from this task (the engine's entry, run here)."""
        entry = self._entry
        entry.check_open()
        waiter = _Waiter(self._loop)
        deadline = math.inf if timeout is None else trio.current_time() + timeout
        cs = [
            entry.prepare(call, metadata, deadline, timeout, waiter, i, principal, scope)
            for i, call in enumerate(calls)
        ]
        waiter.calls = cs
        entry.gate_batch(cs)
        try:
            for c in cs:
                drive_now(entry.starting(c))
            for admitted, c in enumerate(cs, 1):
                if c.state is QUEUED and not entry.admit(c, host=True):
                    await self._wait_room(c, waiter)
                if admitted % _EAGER_RUN == 0:
                    await asyncio.sleep(0)  # a long batch lets others run too
        except BaseException:
            await self._cancelled(cs, waiter)
            waiter.close()
            raise
        return waiter, cs

    async def _wait_room(self, c: Call[ToolPlan], waiter: _Waiter) -> None:
        """The call's mailbox is full: wait for room (backpressure), no longer than its deadline."""
        mailbox = c.plan.mailbox  # type: ignore[union-attr]  # routed
        while c.state is QUEUED and not self._entry.admit(c, host=True):
            room: asyncio.Future[None] = self._loop.create_future()
            withdraw = mailbox.wait_room_soon(functools.partial(_resolve, room))
            try:
                await waiter.wait(room)  # room, or the call settled meanwhile (its deadline)
            finally:
                withdraw()
                room.cancel()

    async def _cancelled(self, cs: Sequence[Call[ToolPlan]], waiter: _Waiter) -> None:
        """The caller stopped waiting: every call not answered ends CANCELLED once its code has
        stopped, or a grace later if it ignores its cancellation (abandoned); hooks included."""
        for c in cs:
            if not c.settled:
                c.abandon(FailureKind.CANCELLED, CANCELLED_MESSAGE)
        left = [c for c in cs if not c.settled]
        if left:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                async with asyncio.timeout(ABANDON_GRACE):
                    while any(not c.settled for c in left):
                        waiter.done.clear()
                        await waiter.wait()
            for c in left:
                c.give_up(FailureKind.CANCELLED, f"{CANCELLED_MESSAGE}; it did not stop when cancelled")
        for c in cs:
            drive_now(self._entry.finishing(c))

    # -- through trio (a feature's hook may suspend; registration) ----------------------

    def _check(self) -> None:
        if self._closing:
            raise RuntimeClosed("the asyncio runtime is closed; use it inside its `async with` block")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not self._loop:
            raise RuntimeError(
                "this runtime runs on another event loop (or thread); from other threads use "
                "runtime.embed.RuntimeThread"
            )

    def _spawn(self, fn: Callable[[], Awaitable[Any]]) -> _Handle:
        """Start `fn` as a trio task in a copy of the caller's context; its outcome comes back
        through `handle.ended` (an asyncio future)."""
        self._check()
        handle = _Handle(self._loop.create_future())

        async def run() -> None:
            result: outcome.Outcome[Any] | None = None
            try:
                with handle.scope:
                    try:
                        result = outcome.Value(await fn())
                    except Exception as exc:
                        result = outcome.Error(exc)
            finally:
                if not handle.ended.done():
                    handle.ended.set_result(result)  # None: cancelled before it could end

        # start_soon from the host loop's thread: trio's run state is this thread's while the
        # guest run lasts, and the new task starts in a copy of the current (the caller's) context.
        self._nursery.start_soon(run)
        return handle

    async def _run(self, fn: Callable[[], Awaitable[T]], /) -> T:
        value: T = await self._ended(self._spawn(fn))
        return value

    async def _ended(self, handle: _Handle) -> Any:
        """The value of a spawned trio call, once it has ended there."""
        try:
            ended = await asyncio.shield(handle.ended)
        except asyncio.CancelledError:
            # The asyncio caller gave up: cancel the call where it runs, and let it end there
            # (it fails CANCELLED, its hooks run) before the cancellation goes on.
            handle.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(handle.ended)
            raise
        if ended is None:
            raise RuntimeClosed("the asyncio runtime closed while this call was running")
        return ended.unwrap()

    async def _pumped(
        self,
        batch: list[ToolCall],
        metadata: Mapping[str, Any] | None,
        timeout: float | None,
        principal: str | None,
        scope: Scope | None,
    ) -> AsyncGenerator[ToolResult, None]:
        """`Runtime.as_completed` in a trio task, its results passed here as they come."""
        queue: asyncio.Queue[Any] = asyncio.Queue()

        async def pump() -> None:
            results = completed(self._entry, batch, metadata, timeout, principal, scope)
            async with contextlib.aclosing(results):
                async for result in results:
                    queue.put_nowait(result)

        handle = self._spawn(pump)
        handle.ended.add_done_callback(lambda _: queue.put_nowait(_END))
        try:
            while True:
                item = await queue.get()
                if item is _END:
                    ended = handle.ended.result()
                    if ended is None:
                        raise RuntimeClosed("the asyncio runtime closed while these calls were running")
                    ended.unwrap()
                    return
                yield item
        finally:
            if not handle.ended.done():
                handle.cancel()
            await asyncio.shield(handle.ended)

    async def _streamed(
        self,
        call: ToolCall,
        metadata: Mapping[str, Any] | None,
        timeout: float | None,
        principal: str | None,
        scope: Scope | None,
        buffer: int,
    ) -> AsyncGenerator[str | ToolResult, None]:
        """`Entry.stream` in a trio task, each item passed here once the one before was taken (so
        the tool waits for this reader as it would for a trio one)."""
        self._check()
        await asyncio.sleep(0)  # the loop's other tasks get a turn, as trio's checkpoint gives them
        queue: asyncio.Queue[Any] = asyncio.Queue()
        taken = trio.Semaphore(1)  # released by this side (the guest run's state is this thread's)
        entry = self._entry

        async def pump() -> None:
            items = entry.stream(
                call, metadata=metadata, timeout=timeout, principal=principal, scope=scope, buffer=buffer
            )
            async with contextlib.aclosing(items):
                async for item in items:
                    await taken.acquire()
                    queue.put_nowait(item)

        handle = self._spawn(pump)
        handle.ended.add_done_callback(lambda _: queue.put_nowait(_END))
        try:
            while True:
                item = await queue.get()
                if item is _END:
                    ended = handle.ended.result()
                    if ended is None:
                        raise RuntimeClosed("the asyncio runtime closed while this call was running")
                    ended.unwrap()
                    return
                taken.release()
                yield item
        finally:
            if not handle.ended.done():
                handle.cancel()
            await asyncio.shield(handle.ended)

    def _close(self) -> None:
        self._closing = True
        self._stop.set()


class AsyncioScopedRuntime(View):
    """A per-request view of an `AsyncioRuntime` (from `AsyncioRuntime.scoped`): its call
    methods for this view's principal and visible tools, and `registry` / `schemas`."""

    def __init__(self, owner: AsyncioRuntime, scope: Scope) -> None:
        super().__init__(scope, owner._rt._routing)
        self._owner = owner

    async def call(
        self, call: ToolCall, *, metadata: Mapping[str, Any] | None = None, timeout: float | None = None
    ) -> ToolResult:
        """`AsyncioRuntime.call`, for this view."""
        results = await self._owner._batch([call], metadata, timeout, None, self._check(), single=True)
        return results[0]

    async def call_many(
        self,
        calls: Iterable[ToolCall],
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> list[ToolResult]:
        """`AsyncioRuntime.call_many`, for this view."""
        return await self._owner._batch(list(calls), metadata, timeout, None, self._check())

    def as_completed(
        self,
        calls: Iterable[ToolCall],
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> AsyncIterator[ToolResult]:
        """`AsyncioRuntime.as_completed`, for this view."""
        return self._owner._completed(list(calls), metadata, timeout, None, self._check())

    def stream(
        self,
        call: ToolCall,
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        buffer: int = STREAM_BUFFER,
    ) -> AsyncIterator[str | ToolResult]:
        """`AsyncioRuntime.stream`, for this view."""
        return self._owner._streamed(call, metadata, timeout, None, self._check(), buffer)

    async def invoke(
        self,
        tool: ToolBase[Any, Any] | str,
        /,
        *,
        _metadata: Mapping[str, Any] | None = None,
        _timeout: float | None = None,
        **arguments: Any,
    ) -> ToolResult:
        """`AsyncioRuntime.invoke`, for this view."""
        name = tool if isinstance(tool, str) else tool.name
        call = ToolCall(id=f"invoke-{id(arguments):x}", name=name, arguments=arguments)
        return await self.call(call, metadata=_metadata, timeout=_timeout)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _Handle:
    __slots__ = ("ended", "scope")

    def __init__(self, ended: asyncio.Future[Any]) -> None:
        self.ended = ended
        self.scope = trio.CancelScope()

    def cancel(self) -> None:
        self.scope.cancel()


@contextlib.asynccontextmanager
async def open_asyncio_runtime(
    registry: ToolRegistry | Iterable[ToolLike] = (),
    *,
    options: RuntimeOptions | None = None,
    **settings: Unpack[RuntimeOptionsKw],
) -> AsyncIterator[AsyncioRuntime]:
    """Open a runtime on the running asyncio (or uvloop) loop, as trio's guest; an async
    context manager for an asyncio server's lifespan.

    Args:
        registry: the tools, as for `open_runtime`.
        options, **settings: the runtime's settings, as for `open_runtime`.

    On exit the runtime closes as `open_runtime` does: waiting calls fail at once, running ones
    get `shutdown_timeout` seconds, then they are cancelled (UNAVAILABLE) and, if their code
    ignores that, abandoned a grace later; every asyncio caller gets its result.

    Raises:
        RuntimeError: a trio run is already active on this thread (one runtime per loop).
        Exception: whatever opening the runtime raised (a bad registry, an asyncio tool...).
    """
    loop = asyncio.get_running_loop()
    built = RuntimeOptions.build(options, **settings)
    ready: asyncio.Future[AsyncioRuntime] = loop.create_future()
    finished: asyncio.Future[outcome.Outcome[None]] = loop.create_future()
    # The runtime has closed: every call answered, what ignored its cancellation abandoned. The
    # guest run itself may go on after that (an abandoned task that never returns keeps it, as
    # it would keep `trio.run`), but the asyncio side no longer waits for it.
    closed: asyncio.Future[outcome.Outcome[int]] = loop.create_future()

    async def main() -> None:
        try:
            abandoned = await serve()
        except BaseException as exc:
            if not closed.done():
                closed.set_result(outcome.Error(exc))
            raise
        if not closed.done():
            closed.set_result(outcome.Value(abandoned))

    async def serve() -> int:
        """Serve until told to stop; how many calls' work was abandoned at the close."""
        stop = trio.Event()
        async with (
            open_engine(registry, built, host_loop=loop) as (rt, entry),
            trio.open_nursery() as nursery,
        ):
            ready.set_result(AsyncioRuntime(rt, entry, nursery, stop, loop))
            await stop.wait()
            # The runtime closes first (within its grace: every call has its result), then the
            # nursery of what went through trio ends.
            with trio.CancelScope(shield=True):
                await rt._close()
        return rt._supervisor.abandoned

    def done(result: outcome.Outcome[None]) -> None:
        if not finished.done():
            finished.set_result(result)

    trio.lowlevel.start_guest_run(
        main,
        run_sync_soon_threadsafe=loop.call_soon_threadsafe,
        run_sync_soon_not_threadsafe=loop.call_soon,
        done_callback=done,
        host_uses_signal_set_wakeup_fd=True,  # asyncio uses it for its signal handlers
        strict_exception_groups=True,
    )
    await asyncio.wait((ready, finished), return_when=asyncio.FIRST_COMPLETED)
    if not ready.done():  # opening failed: the guest run has ended already
        finished.result().unwrap()
        raise RuntimeError("the asyncio runtime ended before it opened")  # pragma: no cover
    rt = ready.result()
    try:
        yield rt
    finally:
        rt._close()
        await asyncio.shield(asyncio.wait((closed, finished), return_when=asyncio.FIRST_COMPLETED))
        if not finished.done() and closed.done() and closed.result() == outcome.Value(0):
            await asyncio.shield(finished)  # nothing abandoned: the run ends a few turns after its main
        if finished.done():
            finished.result().unwrap()
        else:
            closed.result().unwrap()
            log.warning(
                "the runtime closed with abandoned work still running on trio (code that ignores "
                "cancellation); it runs on until it returns or the loop closes"
            )
