"""What the executors run of one tool's call: its code, in the call's context, under what wraps it.

A call's code runs in a copy of its caller's contextvars (`InContext`), under the features'
`around_call`, after its approval if it asks for one. A sync tool's call runs on its kept
threads (`_in_thread`, awaited by a worker task when it was approved first), an asyncio tool's
as a task of the host loop (`_on_host`), a placed tool's where its placement runs it
(`placed_call`). A streaming tool's code (an `async def` generator) is driven here (`_stream`):
each chunk goes to the call's reader (`Runtime.stream`, through a bounded channel: a slow reader
slows the tool) and to its caller's `on_chunk` handler, and the call's value is the chunks joined.

`ToolCode` is the half of `ToolPlan` (engine/_plan.py) that runs code; the other half is the
call state machine's tool-dependent begin and end.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import math
from collections.abc import Callable, Generator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import trio

from ..messages import FailureKind, ToolSuccess
from ..tools import CallContext, PlacedTool, ToolBase, ToolOptions, chunk_handler, result_encoder, run_to_end
from ._call import Call
from ._states import ABANDON_GRACE
from ._stats import ToolCounters
from ._threads import KeptThreads

if TYPE_CHECKING:
    from ..features import FeaturePipeline

__all__ = ["InContext", "ToolCode", "call_chain"]

log = logging.getLogger("runtime.engine")

call_chain: ContextVar[tuple[ToolCounters, ...]] = ContextVar("runtime_call_chain", default=())
"""The tools (by their counters) whose calls are running in this context, outermost first.

Set only around calls to tools with a `max_concurrency`: a call from inside such a tool to
itself, when its whole capacity is held by its own call chain, would wait forever.
"""

_encode = result_encoder.encode


class InContext(Generator[Any, Any, Any]):
    """Awaits a coroutine with each of its steps run in `context` (what asyncio does for a task).

    A call's code runs in a copy of its caller's contextvars on every path: the caller's
    OpenTelemetry context, request ids and the like reach the tool, and what the tool sets
    stays in its call. An object with `send`/`throw` rather than a generator: a parked call
    keeps this (64 bytes) instead of a generator frame. `suspended`: the coroutine has yielded
    to trio at least once (it passed a schedule point).
    """

    __slots__ = ("_context", "_coro", "suspended")

    def __init__(self, context: contextvars.Context, coro: Any) -> None:
        self._context = context
        self._coro = coro
        self.suspended = False

    def __await__(self) -> Generator[Any, Any, Any]:
        return self

    def __iter__(self) -> Generator[Any, Any, Any]:
        return self

    def __next__(self) -> Any:
        trap = self._context.run(self._coro.send, None)
        self.suspended = True  # it yielded: a trap goes to trio
        return trap

    def send(self, value: Any) -> Any:
        trap = self._context.run(self._coro.send, value)
        self.suspended = True
        return trap

    def throw(self, typ: Any, value: Any = None, tb: Any = None) -> Any:
        # Trio's answer to a trap (Cancelled, ...) goes into the tool, in its context.
        exc = value if value is not None else typ
        if tb is not None and isinstance(exc, BaseException):
            exc = exc.with_traceback(tb)
        return self._context.run(self._coro.throw, exc)

    def close(self) -> None:
        self._context.run(self._coro.close)


class ToolCode:
    """Runs one tool's calls' code (see the module docstring); its state is `ToolPlan`'s."""

    tool: ToolBase[Any, Any]
    name: str
    options: ToolOptions
    counters: ToolCounters
    approval: Any
    chained: bool
    streams: bool
    sinks: dict[Call, Any]
    threads: KeptThreads | None
    host_loop: Any
    placed: PlacedTool | None
    dispatch: Callable[..., Any]
    _direct: bool
    _around: FeaturePipeline | None
    _why_unavailable: Callable[[], str]

    def coroutine(self, call: Call) -> Any:
        """The call's awaitable for a trio worker task: the tool's code runs in `call.context`
        (its approval, if it asks for one, first: in the worker's)."""
        context = call.context
        if self.approval is not False:
            return self._approved(call)
        if self._direct:
            return InContext(context, context.run(self.dispatch, call.args, call.ctx))
        return InContext(context, self._wrapped(call))

    async def _wrapped(self, call: Call) -> Any:
        """The tool's code with what wraps it: its call chain, the features' `around_call`."""
        if self.chained:
            call_chain.set((*call_chain.get(), self.counters))  # the call's own context: no reset
        if self._around is not None and call.ctx is not None:
            with self._around.around(call.ctx):
                return await (self._stream(call) if self.streams else self.dispatch(call.args, call.ctx))
        return await (self._stream(call) if self.streams else self.dispatch(call.args, call.ctx))

    async def _stream(self, call: Call) -> str:
        """A streaming tool's call: drive its generator, hand each chunk to the call's reader and
        to its caller's `on_chunk` handler (both awaited: backpressure), and return the chunks
        joined. However the call ends (its deadline, its caller's cancellation), the generator is
        closed (`aclose`) before it does; its span counts the chunks and their bytes."""
        ctx = call.ctx
        on_chunk = chunk_handler()  # in the call's context: its caller's `reporting(...)` block
        pieces: list[str] = []
        size = 0
        generator = self.dispatch(call.args, ctx)
        try:
            async with contextlib.aclosing(generator):
                async for chunk in generator:
                    text = chunk if type(chunk) is str else _chunk_text(chunk)
                    pieces.append(text)
                    size += len(text) if text.isascii() else len(text.encode())
                    sink = self.sinks.get(call)
                    if sink is not None:
                        try:
                            await sink.send(text)
                        except (trio.BrokenResourceError, trio.ClosedResourceError):
                            self.sinks.pop(call, None)  # its reader is gone: the call is being stopped
                    if on_chunk is not None and ctx is not None:
                        try:
                            await on_chunk(ctx, text)
                        except Exception:
                            log.exception("the chunk handler failed for call %s", call.call.id)
        finally:
            if ctx is not None and ctx._observer is not None:
                ctx._observer.event(
                    ctx, "tool.stream", {"tool.stream.chunks": len(pieces), "tool.stream.bytes": size}
                )
        return "".join(pieces)

    async def _approved(self, call: Call) -> Any:
        await self._approve(call)
        if not self.tool.is_async:
            if self.options.inline:
                return call.context.run(self.sync_call, call.args, call.ctx)
            return await self._in_thread(call)
        if self.options.loop == "asyncio":
            return await self._on_host(call)
        return await InContext(call.context, self._wrapped(call))

    async def _in_thread(self, call: Call) -> Any:
        """A sync tool's call on its threads, awaited by a worker task (after its approval)."""
        threads = self.threads
        assert threads is not None
        task = trio.lowlevel.current_task()
        ran: list[Any] = []

        def done(job: Any, result: Any) -> None:
            if ran:  # abandoned meanwhile: nobody waits
                return
            ran.append(result)
            trio.lowlevel.reschedule(task, result)

        job = threads.submit(call.context, self.sync_call, (call.args, call.ctx), done)

        def abort(_: object) -> trio.lowlevel.Abort:
            if not threads.drop(job):  # it runs on: abandoned (its thread cannot be interrupted)
                ran.append(None)
                self.counters.abandoned_threads += 1
                if call.ctx is not None:
                    call.ctx.abandoned = True
            return trio.lowlevel.Abort.SUCCEEDED

        return await trio.lowlevel.wait_task_rescheduled(abort)

    async def _on_host(self, call: Call) -> Any:
        """An asyncio tool's call as a task of the host loop, awaited by a worker task (after its
        approval); cancelling this cancels the task, which gets a grace to end."""
        loop = self.host_loop
        task = loop.create_task(self.host_coroutine(call), context=call.context)
        ended = trio.Event()
        task.add_done_callback(lambda _: ended.set())  # on the host thread, inside the guest run
        try:
            await ended.wait()
        except trio.Cancelled:
            task.cancel()
            with trio.CancelScope(shield=True), trio.move_on_after(ABANDON_GRACE):
                await ended.wait()  # a task that ignores its cancellation runs on, abandoned
            if task.done() and not task.cancelled():
                task.exception()  # retrieved: asyncio would log it as never retrieved
            raise
        return task.result()

    def host_coroutine(self, call: Call) -> Any:
        """The call's coroutine for a task of the host asyncio loop (it runs in `call.context`)."""
        return self._wrapped(call)

    def sync_call(self, args: Any, ctx: CallContext | None) -> Any:
        """A sync tool's call (in a thread, or inline), under the features' `around_call`."""
        if self._around is not None and ctx is not None:
            with self._around.around(ctx):
                return self.dispatch(args, ctx)
        return self.dispatch(args, ctx)

    def run_to_end(self, coro: Any, ctx: CallContext | None) -> Any:
        """Run an `eager_coroutine` here, to its end (in the call's context: `Context.run` it)."""
        if self._around is not None and ctx is not None:
            with self._around.around(ctx):
                return run_to_end(coro)
        return run_to_end(coro)

    async def placed_call(self, call: Call) -> ToolSuccess[Any]:
        """Serve the call where the tool's placement runs it (the arguments are checked already)."""
        placed = self.placed
        if placed is None:  # between incarnations: the call waits for none
            raise _Refused(FailureKind.UNAVAILABLE, self._why_unavailable())
        raw = call.call.arguments
        arguments = raw.encode() if type(raw) is str else _encode(raw)
        timeout = None
        if call.deadline != math.inf:
            timeout = max(0.0, call.deadline - trio.current_time())
        if self._around is not None and call.ctx is not None:
            with self._around.around(call.ctx):  # the span is current for its progress and logs
                return await placed.call(call.call, arguments, call.ctx, timeout)
        return await placed.call(call.call, arguments, call.ctx, timeout)

    async def _approve(self, call: Call) -> None:  # in the worker's context, as before the tool's
        """Ask before the tool runs (`requires_approval`); raises ToolRejected when denied."""
        approval = self.approval
        if approval is False or (approval is not True and not approval(call.args)):
            return
        ctx = call.ctx
        assert ctx is not None  # routing makes a context for every tool that asks
        await ctx.approve(call.call.arguments)


class _Refused(Exception):
    """The engine's own refusal of a call while it runs (a placed tool between incarnations)."""

    def __init__(self, kind: FailureKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _chunk_text(chunk: Any) -> str:
    """A chunk that is not a str, as text: its JSON (or, failing that, its `str()`)."""
    try:
        return _encode(chunk).decode()
    except Exception:
        return str(chunk)
