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

An asyncio caller goes through the engine's one entry itself, in its own task, and waits on an
asyncio future (the engine's asyncio driver, `runtime.engine.lowlevel.AsyncioDriver`): a call
that cannot suspend runs right there, a sync tool's thread reports to the loop, an asyncio
tool's coroutine becomes a task of the loop, and a trio tool's call is handed to a worker task
of its actor; its deadline is a timer of the loop. Only when a flow may suspend (a feature's
hook, a policy that `suspends`) does the call go through a trio task instead. Cancelling the
asyncio task cancels the call: it is answered CANCELLED (hooks included) and its work stopped,
as for a trio caller. Its call surface is every runtime's (`call`, `call_many`,
`as_completed`, `stream`, `invoke`, `scoped`, with the same keywords).

Tools declared `@tool(loop="asyncio")` run their coroutine as a task of this loop, so code
written for asyncio (asyncio.sleep, aiohttp, asyncpg) works in them, with the same timeouts,
cancellation, failures and spans as any tool.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable

import outcome
import trio

from ..engine import Runtime, RuntimeOptions, RuntimeStatistics
from ..engine.lowlevel import AsyncioDriver, Calls, ScopedRuntime, open_engine, routing_of, settings_keywords
from ..features import Feature
from ..registry import ToolLike, ToolRegistry

log = logging.getLogger("runtime.embed")

__all__ = ["AsyncioRuntime", "AsyncioScopedRuntime", "open_asyncio_runtime"]

AsyncioScopedRuntime = ScopedRuntime
"""A per-request view of an `AsyncioRuntime` (from `.scoped(...)`): every view is a
`ScopedRuntime`, waiting as the runtime it views does (here, on the asyncio loop)."""


class AsyncioRuntime(Calls):
    """A runtime running on this asyncio loop (trio as its guest); from `open_asyncio_runtime`.

    Its call surface is every runtime's (`Calls`: `call`, `call_many`, `as_completed`,
    `stream`, `invoke`, `scoped`), for asyncio tasks of the loop it was opened on; other threads
    use `RuntimeThread`. Every call gets exactly one result, and no exception from a tool
    reaches the caller.
    """

    def __init__(self, runtime: Runtime, driver: AsyncioDriver, stop: trio.Event) -> None:
        super().__init__(driver, routing_of(runtime), None)
        self._rt = runtime
        self._asyncio = driver
        self._stop = stop

    @property
    def runtime(self) -> Runtime:
        """The trio-side `Runtime` (for trio code running in the same guest run)."""
        return self._rt

    @property
    def features(self) -> tuple[Feature, ...]:
        return self._rt.features

    def statistics(self) -> RuntimeStatistics:
        """`Runtime.statistics()` (`.to_dict()` gives plain JSON-ready data)."""
        self._asyncio.check()
        return self._rt.statistics()

    async def register(self, *tools: ToolLike, replace: bool = False) -> None:
        """`Runtime.register` from asyncio."""
        await self._asyncio.run(lambda: self._rt.register(*tools, replace=replace))

    async def unregister(self, *names: str) -> None:
        """`Runtime.unregister` from asyncio."""
        await self._asyncio.run(lambda: self._rt.unregister(*names))

    def _close(self) -> None:
        self._asyncio.closing = True
        self._stop.set()


@settings_keywords(RuntimeOptions)
@contextlib.asynccontextmanager
async def open_asyncio_runtime(
    registry: ToolRegistry | Iterable[ToolLike], built: RuntimeOptions
) -> AsyncIterator[AsyncioRuntime]:
    """Open a runtime on the running asyncio (or uvloop) loop, as trio's guest; an async
    context manager for an asyncio server's lifespan.

    `open_asyncio_runtime(registry, **settings)`: the tools and the settings (any field of
    `RuntimeOptions`), as for `open_runtime`.

    On exit the runtime closes as `open_runtime` does: waiting calls fail at once, running ones
    get `shutdown_timeout` seconds, then they are cancelled (UNAVAILABLE) and, if their code
    ignores that, abandoned a grace later; every asyncio caller gets its result.

    Raises:
        RuntimeError: a trio run is already active on this thread (one runtime per loop).
        Exception: whatever opening the runtime raised (a bad registry, an asyncio tool...).
    """
    loop = asyncio.get_running_loop()
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
            driver = entry.asyncio_driver = AsyncioDriver(entry, loop, nursery)
            ready.set_result(AsyncioRuntime(rt, driver, stop))
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
