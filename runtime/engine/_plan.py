"""What the engine knows of one tool to serve its calls: built once per actor, read by every call.

A `ToolPlan` holds the parts of the call state machine that depend on the tool:

- begin: `decode` checks the arguments' bounds and decodes them, in one strict pass;
- its code: what the executors run of a call (`coroutine`, `sync_call`, `placed_call`...), in a
  copy of its caller's contextvars (`InContext`), under the features' `around_call`, after its
  approval if it asks for one. A sync tool's call runs on its kept threads (awaited by a worker
  task when it was approved first), an asyncio tool's as a task of the host loop, a placed tool's
  where its placement runs it. A streaming tool's code (an `async def` generator) is driven here
  (`_stream`): each chunk goes to the call's reader (`Runtime.stream`, through a bounded
  channel: a slow reader slows the tool) and to its caller's `on_chunk` handler;
- end: `shape` (a value -> its ToolSuccess, cut to the limits, or what is over them kept whole
  as artifacts by the runtime's `Keeper`) and `failure` (an exception -> its ToolFailure, and
  whether the actor restarts), the one outcome mapping of `_outcome`.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import math
import tempfile
import types
from collections.abc import Callable, Generator
from contextvars import ContextVar
from typing import Any

import msgspec
import trio

from ..exceptions import CallDeferred, RemoteToolError, ResultTypeError
from ..features import FeaturePipeline
from ..messages import ContentPart, FailureKind, ToolResult, ToolSuccess
from ..tools import CallContext, Retry, ToolBase, ToolOptions
from ..tools.lowlevel import PlacedTool, cannot_suspend, chunk_handler, result_encoder, run_to_end
from ._arguments import check_arguments, not_unicode
from ._artifacts import Keeper
from ._call import ABANDON_GRACE, Breaker, Call, InCallerExecutor
from ._mailbox import Mailbox
from ._outcome import cut_note, describe_error, exception_failure, failure, input_failure, success
from ._stats import ToolCounters
from ._threads import KeptThreads

__all__ = ["InContext", "Nowhere", "ToolPlan", "call_chain"]

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


class ToolPlan:
    """One tool, as the engine serves it (`Nowhere`: no tool, for a call that reaches none).

    Args:
        tool: the tool.
        options: its options (read once, when its actor was made).
        pipeline: the runtime's features.
        counters: its counters.
        max_bytes, max_depth: the bounds on a call's arguments.
        max_chars: every text that goes back is cut here.
        default_timeout: the runtime's default for calls that neither the tool nor the caller limits.
        crashed: called with the reason when the tool raises one of its `restart_on` exceptions.
        why_unavailable: what a call hears when the tool cannot serve it.
    """

    routed = True
    """A tool serves its calls (`Nowhere` is False)."""

    def __init__(
        self,
        tool: ToolBase[Any, Any],
        options: ToolOptions,
        pipeline: FeaturePipeline,
        counters: ToolCounters,
        *,
        max_bytes: int,
        max_depth: int,
        max_chars: int,
        default_timeout: float | None,
        crashed: Callable[[str], None],
        why_unavailable: Callable[[], str],
    ) -> None:
        self.tool = tool
        self.name = tool.name
        self.options = options
        self.counters = counters
        self.running: set[Call[ToolPlan]] = set()  # calls an executor runs now (not yet ended)
        self.holding = 0
        """Calls routed to this actor and not reported yet (an idle actor is stopped only at 0:
        a call on its way to the mailbox, past a policy that awaits, keeps it)."""
        self.draining = False  # the actor waits for `running` to empty (a graceful stop)
        self.drained: Callable[[], None] = _nothing
        self.mailbox: Mailbox = None  # type: ignore[assignment]  # set by the actor, with its executor
        self.placed: PlacedTool | None = None  # a placed tool's workers, per incarnation
        self.threads: KeptThreads | None = None  # a sync tool's threads (set by the actor)
        self.host_loop: Any = None  # the host asyncio loop (asyncio tools)
        self._hinted = False  # the asyncio-under-trio hint was logged
        self.host_executor: Any = None  # where an asyncio caller's call runs, if not where a trio caller's
        self.in_caller: InCallerExecutor | None = (
            None  # where `rt.call` runs a call that only awaits another process
        )
        self.policies: tuple[Any, ...] = ()  # its interceptors, outermost first (set by the actor)
        self.suspends = False  # one of them yields awaitables: its calls go through a trio task
        self.retry: Retry | None = None  # run a failed call again (set by the actor)
        self.retry_later: Callable[[float, Call[ToolPlan]], None] = _never  # where a retry waits its backoff
        self.breaker: Breaker | None = None  # its circuit breaker's state, which hears every attempt
        self.cached: Any = None  # its `CachePolicy`, when it is the first policy of its calls (on memory)
        placement = options.placement
        self.is_placed = placement is not None and not placement.in_process
        self.crash_reason: str | None = None
        self._crashed = crashed
        self._why_unavailable = why_unavailable
        self.timeout = options.timeout
        self.default_timeout = default_timeout
        self.untimed = options.timeout is None and default_timeout is None
        self.restart_on = options.restart_on
        self.approval = options.requires_approval
        self.chained = options.max_concurrency is not None
        self.max_bytes = max_bytes
        self.max_depth = max_depth
        self.max_chars = options.max_result_chars or max_chars
        self.keeper: Keeper | None = None  # keeps what is over its limits whole (set by the actor)
        self.streams = tool.streams  # an async generator: its chunks go to `sinks` as they come
        self.sinks: dict[Call[ToolPlan], Any] = {}  # a streamed call's reader (a channel), while it runs
        cls = type(tool)
        self._parts = cls.result_to_parts is not ToolBase.result_to_parts
        self._present = tool.result_presenter()  # value -> (text, ToolSuccess.value), checked
        self.dispatch = tool.dispatch
        self._decode: Callable[[Any], Any] = tool.decode_args
        self._plain: Callable[[str], Any] | None = None  # JSON text -> args in one step, if it may
        codec = tool._codec
        if cls.decode_args is ToolBase.decode_args and codec is not None:
            self._decode = codec.decode  # skip a layer: the hook is not overridden
            self._plain = codec.plain
        self._around = pipeline if pipeline.wraps_calls else None
        self._direct = self._around is None and not self.chained and not self.streams
        code = tool.dispatch_code() if tool.is_async else None
        self.eager_code: types.CodeType | None = code if cannot_suspend(code) else None
        """The code of the tool's coroutine when it can never suspend (no `await` in it)."""

    def use_pipeline(self, pipeline: FeaturePipeline) -> None:
        """The features changed (one turned on after the runtime opened)."""
        self._around = pipeline if pipeline.wraps_calls else None
        self._direct = self._around is None and not self.chained and not self.streams

    # -- the tool's code, as the executors run it -----------------------------------------

    def coroutine(self, call: Call[ToolPlan]) -> Any:
        """The call's awaitable for a trio worker task: the tool's code runs in `call.context`
        (its approval, if it asks for one, first: in the worker's)."""
        context = call.context
        if self.approval is not False:
            return self._approved(call)
        if self._direct:
            return InContext(context, context.run(self.dispatch, call.args, call.ctx))
        return InContext(context, self._wrapped(call))

    async def _wrapped(self, call: Call[ToolPlan]) -> Any:
        """The tool's code with what wraps it: its call chain, the features' `around_call`."""
        if self.chained:
            call_chain.set((*call_chain.get(), self.counters))  # the call's own context: no reset
        if self._around is not None and call.ctx is not None:
            with self._around.around(call.ctx):
                return await (self._stream(call) if self.streams else self.dispatch(call.args, call.ctx))
        return await (self._stream(call) if self.streams else self.dispatch(call.args, call.ctx))

    async def _stream(self, call: Call[ToolPlan]) -> str | Collected:
        """A streaming tool's call: drive its generator, hand each chunk to the call's reader and
        to its caller's `on_chunk` handler (both awaited: backpressure), and collect the chunks
        as its value within the call's limits as they come: whole while they fit (the chunks
        joined), past that only the first characters and the count, the rest in a temporary
        file when the runtime keeps results as artifacts (`Collected`). However the call ends
        (its deadline, its caller's cancellation), the generator is closed (`aclose`) before it
        does; its span counts the chunks and their bytes."""
        ctx = call.ctx
        on_chunk = chunk_handler()  # in the call's context: its caller's `reporting(...)` block
        collected = Collected(self.max_chars, spill=self.keeper is not None)
        chunks = size = 0
        generator = self.dispatch(call.args, ctx)
        try:
            async with contextlib.aclosing(generator):
                async for chunk in generator:
                    text = chunk if type(chunk) is str else _chunk_text(chunk)
                    chunks += 1
                    size += len(text) if text.isascii() else len(text.encode())
                    collected.add(text)
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
                    del chunk, text  # a parked stream holds no chunk it has passed on
        except BaseException:
            collected.close()
            raise
        finally:
            if ctx is not None:
                ctx.add_event("tool.stream", {"tool.stream.chunks": chunks, "tool.stream.bytes": size})
        return collected.result()

    async def _approved(self, call: Call[ToolPlan]) -> Any:
        await self._approve(call)
        if not self.tool.is_async:
            if self.options.inline:
                return call.context.run(self.sync_call, call.args, call.ctx)
            return await self._in_thread(call)
        if self.options.loop == "asyncio":
            return await self._on_host(call)
        return await InContext(call.context, self._wrapped(call))

    async def _in_thread(self, call: Call[ToolPlan]) -> Any:
        """A sync tool's call on its threads, awaited by a worker task (after its approval).

        Cancelled while its thread runs it (no thread can be interrupted), the call is answered
        from outside and this task waits on for the thread, as an async tool that ignores its
        cancellation would: the thread's end is the call's late result (its breaker and its
        dedupe journal hear it), and an orphan past its grace is counted abandoned."""
        threads = self.threads
        assert threads is not None
        task = trio.lowlevel.current_task()

        def done(job: Any, result: Any) -> None:
            trio.lowlevel.reschedule(task, result)

        job = threads.submit(call.context, self.sync_call, (call.args, call.ctx), done)

        def abort(_: object) -> trio.lowlevel.Abort:
            if threads.drop(job):  # it never ran: nothing runs on
                return trio.lowlevel.Abort.SUCCEEDED
            return trio.lowlevel.Abort.FAILED  # it runs on: `done` wakes this task

        return await trio.lowlevel.wait_task_rescheduled(abort)

    async def _on_host(self, call: Call[ToolPlan]) -> Any:
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

    def host_coroutine(self, call: Call[ToolPlan]) -> Any:
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

    async def placed_call(self, call: Call[ToolPlan]) -> ToolSuccess[Any]:
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

    async def _approve(self, call: Call[ToolPlan]) -> None:  # in the worker's context, as before the tool's
        """Ask before the tool runs (`requires_approval`); raises ToolRejected when denied."""
        approval = self.approval
        if approval is False or (approval is not True and not approval(call.args)):
            return
        ctx = call.ctx
        assert ctx is not None  # routing makes a context for every tool that asks
        if ctx.approved:  # a deferred approval, given: it runs without asking again
            return
        await ctx.approve(call.call.arguments)

    # -- begin ---------------------------------------------------------------------------

    def decode(self, call: Call[ToolPlan]) -> bool:
        """Check the call's arguments' bounds and decode them into `call.args`; False with the
        call answered (INVALID_ARGUMENTS, or REJECTED by a `decode_args` hook) if they are bad."""
        raw = call.call.arguments
        try:
            if (
                type(raw) is not str
                or (size := len(raw)) * 4 > self.max_bytes
                or (size > self.max_depth and raw.count("[") + raw.count("{") > self.max_depth)
            ):
                check_arguments(raw, self.max_bytes, self.max_depth)
            elif (plain := self._plain) is not None:
                try:
                    call.args = plain(raw)
                    return True
                except Exception:
                    pass  # the whole decode says what is wrong (or mends it)
            call.args = self._decode(raw)
        except Exception as exc:
            if isinstance(exc, UnicodeError):
                exc = not_unicode(raw, exc)
            call.settle(input_failure(call.call, self.name, exc, self.max_chars))
            return False
        return True

    # -- end: the one outcome mapping ----------------------------------------------------

    def shape(self, call: Call[ToolPlan], value: Any, wait: bool = True) -> ToolResult | None:
        """The result of a call whose tool returned `value`: its text (and parts), cut to the
        limits or, when the runtime keeps artifacts, what is over them kept whole; ERROR if the
        value cannot be turned into text. None: keeping it has to wait (the call ends then);
        never with `wait=False` (what would wait is cut instead)."""
        if self.is_placed and type(value) is ToolSuccess:  # built where the tool ran
            shaped = self._bounded(call, value.value, value.content, value.parts, wait)
            mismatch = value.type_mismatch
            return shaped if mismatch is None else self._mismatched(call, shaped, mismatch)
        if type(value) is Collected:  # a stream past its limit, cut (or spilled) as it came
            return self._collected(call, value, wait)
        try:
            text, shown = self._present(value)  # checked against the declared type, made text
            if not self._parts and len(text) <= self.max_chars:  # the common case
                return ToolSuccess(call_id=call.call.id, tool=self.name, content=text, value=shown)
            parts = tuple(self.tool.result_to_parts(value)) if self._parts else ()
            return self._bounded(call, shown, text, parts, wait)
        except Exception as exc:
            error_type, text = describe_error(exc)
            if isinstance(exc, ResultTypeError):
                if exc.returned is not None:  # a loose check: the model reads the value as returned
                    return self._mismatched(call, self._returned(call, value, exc.returned, wait), str(exc))
                self.counters.type_mismatches += 1
                message = str(exc)
            else:
                message = f"tool {self.name!r} returned a result that could not be encoded: {text}"
            return failure(call.call, FailureKind.ERROR, message[: self.max_chars], error_type)

    def _returned(
        self, call: Call[ToolPlan], value: Any, returned: tuple[str, Any], wait: bool
    ) -> ToolResult | None:
        """The success of a value that is not of the declared result type, as it was returned."""
        text, shown = returned
        parts: tuple[ContentPart, ...] = ()
        if self._parts:
            try:
                parts = tuple(self.tool.result_to_parts(value))
            except Exception:  # the text stands for it
                log.debug("tool %r: no parts for a result of another type", self.name, exc_info=True)
        return self._bounded(call, shown, text, parts, wait)

    def _mismatched(self, call: Call[ToolPlan], result: ToolResult | None, message: str) -> ToolResult | None:
        """`result`, of a value that is not of the declared result type: counted, the developer
        warned (once per shape), and marked; ERROR where a warnings filter makes that an error."""
        self.counters.type_mismatches += 1
        try:
            self.tool.result_codec.warn_once(message)
        except Exception as exc:  # `-W error`: the mismatch fails the call, as strict_result does
            return failure(call.call, FailureKind.ERROR, message[: self.max_chars], describe_error(exc)[0])
        if type(result) is ToolSuccess:
            return msgspec.structs.replace(result, type_mismatch=message)
        return result  # a failure, or kept whole later as an artifact (not marked then)

    def _bounded(
        self, call: Call[ToolPlan], value: Any, text: str, parts: tuple[ContentPart, ...], wait: bool
    ) -> ToolResult | None:
        """A success within the limits: what is over them is kept (artifacts) or cut."""
        keeper = self.keeper
        if keeper is not None and (len(text) > self.max_chars or keeper.over(parts, self.max_chars)):
            return keeper.keep(call, self.name, self.max_chars, value, text, parts, wait)
        return success(call.call, self.name, value, text, parts, self.max_chars)

    def _collected(self, call: Call[ToolPlan], collected: Collected, wait: bool) -> ToolResult | None:
        """The result of a stream that went past its limit: kept whole as an artifact from its
        temporary file, or cut (its first characters, and how many there were)."""
        keeper = self.keeper
        if keeper is not None and collected.file is not None:
            return keeper.keep_collected(call, self.name, self.max_chars, collected, wait)
        text = collected.cut()
        return ToolSuccess(call_id=call.call.id, tool=self.name, content=text, value=text)

    def failure(self, call: Call[ToolPlan], exc: BaseException) -> ToolResult:
        """The result of a call whose tool raised `exc`; a `restart_on` exception also crashes
        the actor (the only exceptions that count toward a restart are the tool's own). A tool
        that deferred its call (`ctx.defer`, journaled) gets its `ToolPending`."""
        if isinstance(exc, CallDeferred):
            deferred: ToolResult = exc.pending
            return msgspec.structs.replace(deferred, call_id=call.call.id, tool=call.call.name)
        if isinstance(exc, _Refused):
            return failure(call.call, exc.kind, str(exc))
        result = exception_failure(call.call, self.name, exc, self.max_chars)
        if self.tool.is_async and self.options.loop != "asyncio" and _asyncio_under_trio(exc):
            result = failure(call.call, result.kind, f"{result.message} ({_ASYNCIO_HINT})", result.error_type)
            if not self._hinted:
                self._hinted = True
                log.warning("tool %r: %s", self.name, _ASYNCIO_HINT)
        if call.ctx is not None:
            call.ctx.error = exc
        restart_on = self.restart_on
        if restart_on and (isinstance(exc, restart_on) or (isinstance(exc, RemoteToolError) and exc.restart)):
            log.warning(
                "tool %r raised %s, a restart_on exception", self.name, result.error_type, exc_info=exc
            )
            self.crash_reason = describe_error(exc)[1]
            self._crashed(self.crash_reason)
        elif result.kind is FailureKind.ERROR:
            log.info("tool %r raised %s", self.name, result.error_type, exc_info=exc)
        return result

    def unavailable_message(self) -> str:
        reason = self.crash_reason
        if reason:
            return f"tool {self.name!r} crashed while serving this call ({reason}) and is restarting"
        return self._why_unavailable()


class Nowhere(ToolPlan):
    """The plan of a call that reaches no tool: its name is unknown, hidden from its view, or
    malformed. Such a call is answered (UNKNOWN_TOOL, or UNAVAILABLE while the runtime shuts
    down) as it is prepared and never runs, so of a plan it reads only what an answered call
    reads; it meets `policies`, the runtime-wide policies that apply to every tool (a redaction
    holds, an audit hears it). One per entry: a call's plan is never None.
    """

    routed = False

    def __init__(self, policies: tuple[Any, ...]) -> None:  # no tool: not `ToolPlan.__init__`
        self.name = ""
        self.policies = policies
        self.suspends = any(p.suspends for p in policies)
        self.counters = ToolCounters()  # its calls are counted by the entry (`unknown`)
        self.running = set()
        self.holding = 0
        self.draining = False
        self.sinks = {}
        self.breaker = None
        self.retry = None
        self.timeout = None
        self.default_timeout = None
        self.untimed = True  # answered already: nothing to time
        self.in_caller = None
        self.host_executor = None
        self.crash_reason = None
        self.cached = None


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


def _nothing() -> None:
    pass


_ASYNCIO_HINT = (
    'the tool awaits asyncio code but runs on trio: give it @tool(loop="asyncio") and open the '
    "runtime with runtime.embed.open_asyncio_runtime, or use a trio-compatible client"
)


def _asyncio_under_trio(exc: BaseException) -> bool:
    """Whether `exc` is what asyncio code raises when it is awaited in a trio task."""
    text = str(exc) if isinstance(exc, RuntimeError | TypeError) else ""
    return text == "no running event loop" or text.startswith("trio.run received unrecognized yield message")


def _never(delay: float, call: Call[ToolPlan]) -> None:  # pragma: no cover - set with `retry`
    raise AssertionError("a retry without a place to wait")


class Collected:
    """A stream's chunks, collected within a limit as they come (`ToolPlan._stream`): whole
    while they fit; past `limit` characters only the first ones and the count, and, with
    `spill`, the whole text in a temporary file (in memory up to a MiB, on disk beyond), for a
    keeper to keep as an artifact. Never the whole of a long stream in memory."""

    __slots__ = ("chars", "file", "head", "limit", "pieces", "spill")

    def __init__(self, limit: int, *, spill: bool) -> None:
        self.limit = limit
        self.spill = spill
        self.pieces: list[str] | None = []  # None once past the limit
        self.head = ""
        self.chars = 0
        self.file: Any = None

    def add(self, text: str) -> None:
        self.chars += len(text)
        pieces = self.pieces
        if pieces is not None:
            pieces.append(text)
            if self.chars <= self.limit:
                return
            whole = "".join(pieces)  # past the limit now: at most a limit and a chunk
            self.pieces = None
            self.head = whole[: self.limit]
            if self.spill:
                spooled = tempfile.SpooledTemporaryFile  # closed by `close`, however the call ends
                self.file = spooled(max_size=_SPILL_IN_MEMORY, mode="w+", encoding="utf-8")
                self.file.write(whole)
            return
        if self.file is not None:
            self.file.write(text)

    def result(self) -> str | Collected:
        """The chunks joined, if they fit; else this."""
        if self.pieces is not None:
            return "".join(self.pieces)
        return self

    def cut(self) -> str:
        """What the model reads of a stream past its limit without a keeper."""
        self.close()
        return cut_note(self.head, self.chars, self.limit)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


_SPILL_IN_MEMORY = 1 << 20
"""Characters of a spilled stream kept in memory before its temporary file goes to disk."""
