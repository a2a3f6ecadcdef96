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
run in worker threads.

Each `await rt.call(...)` starts one trio task for the call, inside a copy of the caller's
context (its OpenTelemetry span is the parent of the tool's), and hands the result back
through an asyncio future. Cancelling the asyncio task cancels the call on the trio side; the
caller's CancelledError is raised once the call has ended there (CANCELLED, hooks included).

Tools declared `@tool(loop="asyncio")` run their coroutine as a task of this loop, so code
written for asyncio (asyncio.sleep, aiohttp, asyncpg) works in them, with the same timeouts,
cancellation, failures and spans as any tool.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar, cast

import outcome
import trio

from ..engine import Runtime, RuntimeStatistics, open_runtime
from ..engine._envelope import ABANDON_GRACE, DONE, HostEnvelope
from ..exceptions import RuntimeClosed
from ..features import Feature
from ..messages import ToolCall, ToolResult
from ..registry import ToolLike, ToolRegistry
from ..tools import ToolBase

__all__ = ["AsyncioRuntime", "open_asyncio_runtime"]

T = TypeVar("T")
_END = object()


class AsyncioRuntime:
    """A runtime running on this asyncio loop (trio as its guest); from `open_asyncio_runtime`.

    Every method is for asyncio tasks of the loop the runtime was opened on; other threads
    use `RuntimeThread`. The calls mean what they mean on `Runtime`: every call gets exactly
    one result, and no exception from a tool reaches the caller.
    """

    def __init__(self, runtime: Runtime, nursery: trio.Nursery, stop: trio.Event, loop: Any) -> None:
        self._rt = runtime
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
        self, call: ToolCall, *, metadata: Mapping[str, Any] | None = None, timeout: float | None = None
    ) -> ToolResult:
        """Run one tool call; always returns its result (`Runtime.call`)."""
        self._check()
        await asyncio.sleep(0)  # the loop's other tasks get a turn, as trio's checkpoint gives them
        result = self._rt.call_now(call, metadata=metadata, timeout=timeout)
        if result is not None:  # nothing in it could wait: no trio task, no wakeup of trio
            return result
        env = self._start_on_host(call, metadata, timeout)
        if env is not None:  # a sync or asyncio tool: it reports to this loop, not to trio
            return await self._on_host(env)
        return await self._run(self._rt.call, call, metadata=metadata, timeout=timeout)

    async def call_many(
        self,
        calls: Iterable[ToolCall],
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> list[ToolResult]:
        """Run calls concurrently; results in the order of `calls`, one per call.

        Calls that cannot wait on anything are served at once, here; the others go to trio
        together, as one `Runtime.call_many`.
        """
        self._check()
        await asyncio.sleep(0)  # the loop's other tasks get a turn, as trio's checkpoint gives them
        batch = list(calls)
        started = self._loop.time()
        now = self._rt.call_now
        results: list[ToolResult | HostEnvelope | None] = [
            now(c, metadata=metadata, timeout=timeout) for c in batch
        ]
        for i, r in enumerate(results):
            if r is None:  # a sync tool's call may start here, its thread reporting to this loop
                results[i] = self._start_on_host(batch[i], metadata, timeout)
        rest = [c for c, r in zip(batch, results, strict=True) if r is None]
        handle = None
        if rest:  # the others go to trio together, within what is left of the timeout
            left = _left(timeout, started, self._loop.time())
            handle = self._spawn(lambda: self._rt.call_many(rest, metadata=metadata, timeout=left))
        hosted = [r for r in results if isinstance(r, HostEnvelope)]
        waited = 0
        try:
            for env in hosted:
                await self._on_host(env)
                waited += 1
        except asyncio.CancelledError:
            # the caller gave up: every call still running ends CANCELLED (`_on_host` ended its own)
            await self._give_up(hosted[waited + 1 :])
            if handle is not None:
                handle.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(handle.ended)
            raise
        served = iter(await self._ended(handle) if handle is not None else ())
        return [
            r.result if isinstance(r, HostEnvelope) else r if r is not None else next(served)  # type: ignore[misc]
            for r in results
        ]

    async def invoke(
        self,
        tool: ToolBase[Any, Any] | str,
        /,
        *,
        _metadata: Mapping[str, Any] | None = None,
        _timeout: float | None = None,
        **arguments: Any,
    ) -> ToolResult:
        """Call a tool from code with keyword arguments, through the same pipeline."""
        return await self._run(self._rt.invoke, tool, _metadata=_metadata, _timeout=_timeout, **arguments)

    async def as_completed(
        self,
        calls: Iterable[ToolCall],
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> AsyncIterator[ToolResult]:
        """Run calls concurrently and yield each result as it finishes (fastest first).

        Stopping early cancels the calls still running; close the generator to do it at once
        (`contextlib.aclosing`), as with `Runtime.as_completed`.
        """
        queue: asyncio.Queue[Any] = asyncio.Queue()
        self._check()
        await asyncio.sleep(0)  # the loop's other tasks get a turn, as trio's checkpoint gives them
        started = self._loop.time()
        ready: list[ToolResult] = []  # calls that could not wait on anything: done already
        hosted: list[HostEnvelope] = []  # sync and asyncio tools' calls started here
        batch: list[ToolCall] = []
        for c in calls:
            result = self._rt.call_now(c, metadata=metadata, timeout=timeout)
            if result is not None:
                ready.append(result)
            elif (env := self._start_on_host(c, metadata, timeout)) is not None:
                hosted.append(env)
            else:
                batch.append(c)

        async def report(env: HostEnvelope) -> None:
            queue.put_nowait(await self._on_host(env))

        waiters = [asyncio.ensure_future(report(env)) for env in hosted]
        left = _left(timeout, started, self._loop.time())

        async def pump() -> None:
            results = cast(
                AsyncGenerator[ToolResult, None],
                self._rt.as_completed(batch, metadata=metadata, timeout=left),
            )
            async with contextlib.aclosing(results):
                async for result in results:
                    queue.put_nowait(result)

        handle = self._spawn(pump) if batch else None  # started before any is yielded
        if handle is not None:  # after the pump's results: its end (RuntimeClosed, if so)
            handle.ended.add_done_callback(lambda _: queue.put_nowait(_END))
        remaining = len(hosted) + len(batch)
        try:
            for result in ready:
                yield result
            while remaining:
                item = await queue.get()
                if item is _END:
                    assert handle is not None
                    ended = handle.ended.result()
                    if ended is None:
                        raise RuntimeClosed("the asyncio runtime closed while these calls were running")
                    ended.unwrap()
                    continue
                remaining -= 1
                yield item
        finally:  # stopped early: the calls still running end CANCELLED
            if handle is not None and not handle.ended.done():
                handle.cancel()
            if waiters:
                for waiter in waiters:
                    waiter.cancel()
                await asyncio.gather(*waiters, return_exceptions=True)
                await self._give_up([env for env in hosted if not env.reported])  # waiters not begun
            if handle is not None:
                await asyncio.shield(handle.ended)

    async def register(self, *tools: ToolLike, replace: bool = False) -> None:
        """`Runtime.register` from asyncio."""
        await self._run(self._rt.register, *tools, replace=replace)

    async def unregister(self, *names: str) -> None:
        """`Runtime.unregister` from asyncio."""
        await self._run(self._rt.unregister, *names)

    # -- internals -------------------------------------------------------------------

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

    async def _run(self, fn: Callable[..., Awaitable[T]], /, *args: Any, **kwargs: Any) -> T:
        value: T = await self._ended(self._spawn(lambda: fn(*args, **kwargs)))
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

    def _start_on_host(
        self, call: ToolCall, metadata: Mapping[str, Any] | None, timeout: float | None
    ) -> HostEnvelope | None:
        return self._rt.start_on_host(
            call, self._loop.create_future(), self._loop, metadata=metadata, timeout=timeout
        )

    async def _give_up(self, hosted: list[HostEnvelope]) -> None:
        """The caller stopped waiting for these calls from `_start_on_host`: each ends CANCELLED
        and is finished; asyncio tools' tasks are cancelled and get the grace to end together."""
        rt = self._rt
        tasks = [env for env in hosted if rt.give_up_on_host(env, cancelled=True)]
        if tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([env.future for env in tasks], timeout=ABANDON_GRACE)
            for env in tasks:
                rt.abandon_on_host(env)
        for env in hosted:
            rt.finish_now(env)

    async def _grace(self, env: HostEnvelope) -> None:
        """An asyncio tool's task was cancelled: let it end (and settle its call) for a grace,
        then answer the call anyway (the task runs on, abandoned)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(env.future), ABANDON_GRACE)
        self._rt.abandon_on_host(env)

    async def _on_host(self, env: HostEnvelope) -> ToolResult:
        """Wait for a sync tool's call started from this loop (`Runtime.start_on_host`), no longer
        than its deadline; its thread reports here, not to trio."""
        rt = self._rt
        try:
            if env.state != DONE:
                if env.expires == math.inf:
                    await asyncio.shield(env.future)
                else:
                    with contextlib.suppress(TimeoutError):
                        left = max(0.0, env.expires - trio.current_time())
                        await asyncio.wait_for(asyncio.shield(env.future), left)
                    if rt.give_up_on_host(env, cancelled=False):  # nothing if it finished in time
                        await self._grace(env)
        except asyncio.CancelledError:
            if rt.give_up_on_host(env, cancelled=True):
                with contextlib.suppress(asyncio.CancelledError):
                    await self._grace(env)
            rt.finish_now(env)
            raise
        rt.finish_now(env)
        assert env.result is not None
        return env.result

    def _close(self) -> None:
        self._closing = True
        self._stop.set()


def _left(timeout: float | None, started: float, now: float) -> float | None:
    """What is left of a batch's `timeout` for its calls sent to trio after some were served here."""
    return None if timeout is None else max(0.0, timeout - (now - started))


class _Handle:
    __slots__ = ("ended", "scope")

    def __init__(self, ended: asyncio.Future[Any]) -> None:
        self.ended = ended
        self.scope = trio.CancelScope()

    def cancel(self) -> None:
        self.scope.cancel()


@contextlib.asynccontextmanager
async def open_asyncio_runtime(
    registry: ToolRegistry | Iterable[ToolLike] = (), **options: Any
) -> AsyncIterator[AsyncioRuntime]:
    """Open a runtime on the running asyncio (or uvloop) loop, as trio's guest; an async
    context manager for an asyncio server's lifespan.

    Args:
        registry: the tools, as for `open_runtime`.
        **options: any keyword `open_runtime` takes (features, tracing, default_timeout...).

    Raises:
        RuntimeError: a trio run is already active on this thread (one runtime per loop).
        Exception: whatever opening the runtime raised (a bad registry, an asyncio tool...).
    """
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[AsyncioRuntime] = loop.create_future()
    finished: asyncio.Future[outcome.Outcome[None]] = loop.create_future()

    async def main() -> None:
        stop = trio.Event()
        async with (
            open_runtime(registry, asyncio_loop=loop, **options) as rt,
            trio.open_nursery() as nursery,
        ):
            ready.set_result(AsyncioRuntime(rt, nursery, stop, loop))
            await stop.wait()
            # Leaving the nursery waits for the calls already handed over; then the runtime closes.

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
        await asyncio.shield(finished)
        finished.result().unwrap()
