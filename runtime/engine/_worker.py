"""The workers of one tool actor: they take envelopes from its mailbox and serve them.

Async tools get one worker per concurrent call (a pool that grows when every worker is busy,
up to `max_concurrency`, and shrinks when idle). Sync tools run in worker threads under the
tool's own thread budget (its `max_concurrency`, else the runtime's `thread_limit`), so one
tool's stuck threads can never starve another tool; `inline=True` runs them on the loop.

Serving a call: check the arguments' bounds, decode them, arm the deadline, run the tool,
turn the value into text and parts. Everything that touches the model's or the caller's
data happens inside that call's failure mapping (`_outcome`): whatever it raises becomes
that call's result, and the worker goes on to the next call.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
import types
from collections.abc import Callable, Generator
from contextvars import ContextVar
from typing import Any

import outcome
import trio

from ..exceptions import RemoteToolError, ResultTypeError
from ..messages import FailureKind, ToolFailure, ToolResult, ToolSuccess
from ..tools import CallContext, PlacedTool, ToolBase, ToolOptions, cannot_suspend, result_encoder, run_to_end
from ._arguments import check_arguments, not_unicode
from ._config import EngineConfig
from ._envelope import DONE, QUEUED, RUNNING, Envelope, HostEnvelope
from ._outcome import describe_error, exception_failure, failure, input_failure, success
from ._stats import ToolCounters
from ._threads import KeptThreads

__all__ = ["WorkerPool", "call_chain", "eager_code", "escapes"]

log = logging.getLogger("runtime.engine")

_KEEP_IDLE = 4  # idle workers an async tool keeps between bursts
_STOPPED = (FailureKind.TIMEOUT, FailureKind.CANCELLED)  # only `_interrupted` makes these in a worker
_ASYNC, _INLINE, _THREAD, _PLACED, _ASYNCIO = 0, 1, 2, 3, 4  # how a tool's dispatch runs
_SETTLED = object()  # `_arguments_now`: the call is answered already
_ASYNCIO_GRACE = 0.05  # seconds a cancelled asyncio tool gets to end before the worker moves on

call_chain: ContextVar[tuple[ToolCounters, ...]] = ContextVar("runtime_call_chain", default=())
"""The tools (by their counters) whose calls are running in this context, outermost first.

Set only around calls to tools with a `max_concurrency`: a call from inside such a tool to
itself, when its whole capacity is held by its own call chain, would wait forever.
"""

_encode = result_encoder.encode


def eager_code(tool: ToolBase[Any, Any]) -> types.CodeType | None:
    """The code of an async tool's coroutine if it can never suspend (no `await` in it), else None."""
    code = tool.dispatch_code()
    return code if cannot_suspend(code) else None


class _InContext(Generator[Any, Any, Any]):
    """Awaits a coroutine with each of its steps run in `context` (what asyncio does for a task).

    A call's code runs in a copy of its caller's contextvars on every path, not in the
    worker's: the caller's OpenTelemetry context, request ids and the like reach the tool,
    and what the tool sets stays in its call. An object with `send`/`throw` rather than a
    generator: a parked call keeps this (56 bytes) instead of a generator frame.
    """

    __slots__ = ("_context", "_coro")

    def __init__(self, context: contextvars.Context, coro: Any) -> None:
        self._context = context
        self._coro = coro

    def __await__(self) -> Generator[Any, Any, Any]:
        return self

    def __iter__(self) -> Generator[Any, Any, Any]:
        return self

    def __next__(self) -> Any:
        return self._context.run(self._coro.send, None)

    def send(self, value: Any) -> Any:
        return self._context.run(self._coro.send, value)

    def throw(self, typ: Any, value: Any = None, tb: Any = None) -> Any:
        # Trio's answer to a trap (Cancelled, ...) goes into the tool, in its context.
        exc = value if value is not None else typ
        if tb is not None and isinstance(exc, BaseException):
            exc = exc.with_traceback(tb)
        return self._context.run(self._coro.throw, exc)

    def close(self) -> None:
        self._context.run(self._coro.close)


def escapes(exc: BaseException) -> bool:
    """True for an exception that is a cancellation of trio's (alone or in a group)."""
    if isinstance(exc, trio.Cancelled):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(trio.Cancelled) is not None
    return False


class WorkerPool:
    """Serves one tool's calls from its mailbox, for one incarnation of its actor at a time.

    Args:
        tool: the tool.
        options: its options.
        config: the runtime's settings.
        counters: the tool's counters (shared with the actor and the callers).
        receive: the mailbox's receiving end.
        crashed: called with the reason when the tool raised one of its `restart_on`
            exceptions (the actor cancels the incarnation and restarts).
        why_unavailable: what a call hears when it cannot be served (down, shutting down).
    """

    def __init__(
        self,
        tool: ToolBase[Any, Any],
        options: ToolOptions,
        config: EngineConfig,
        counters: ToolCounters,
        receive: trio.MemoryReceiveChannel[Envelope],
        crashed: Callable[[str], None],
        why_unavailable: Callable[[], str],
    ) -> None:
        self.tool = tool
        self.name = tool.name
        self.counters = counters
        self._receive = receive.receive
        self._crashed = crashed
        self._why_unavailable = why_unavailable
        self.stopping = False
        self.crash_reason: str | None = None
        self._nursery: trio.Nursery | None = None
        self._workers = 0
        self._idle = 0
        self.running: set[Envelope] = set()  # the calls the workers are serving now
        self._hosts_ended: trio.Event | None = None  # set once no call from the host loop is unanswered
        cls = type(tool)
        self._mode = _ASYNC if tool.is_async else _INLINE if options.inline else _THREAD
        self._loop = config.asyncio_loop
        if tool.is_async and options.loop == "asyncio":
            self._mode = _ASYNCIO
        self._limit = options.max_concurrency
        self._chained = options.max_concurrency is not None
        self.capacity = options.max_concurrency if options.max_concurrency is not None else math.inf
        self.limiter: trio.CapacityLimiter | None = None
        self.placed: PlacedTool | None = None  # set by the actor for each incarnation
        self.threads: KeptThreads | None = None  # a sync tool's own threads
        placement = options.placement
        if placement is not None and not placement.in_process:
            # Another process runs the tool: as many workers here as it can serve at once,
            # so that the calls beyond wait in the mailbox (backpressure, on_full).
            self._mode = _PLACED
            room = placement.capacity(tool)
            self._limit = room if options.max_concurrency is None else min(room, options.max_concurrency)
            self.capacity = self._limit
        elif self._mode == _THREAD:
            budget = options.max_concurrency or config.thread_limit
            self.limiter = trio.CapacityLimiter(budget)
            self.capacity = budget
            self.threads = KeptThreads(tool.name, self.limiter, self._thread_abandoned)
        self._timeout = options.timeout
        self._default_timeout = config.default_timeout
        self._untimed = self._timeout is None and self._default_timeout is None
        self._restart_on = options.restart_on
        self._approval = options.requires_approval
        self._parts = cls.result_to_parts is not ToolBase.result_to_parts
        self._tool_dispatch = tool.dispatch
        self._decode: Callable[[Any], Any] = tool.decode_args
        codec = tool._codec
        if cls.decode_args is ToolBase.decode_args and codec is not None:
            self._decode = codec.decode  # skip a layer: the hook is not overridden
        self._present = tool.result_presenter()  # value -> (text, ToolSuccess.value), checked
        self._around = config.pipeline if config.pipeline.wraps_calls else None
        self._max_bytes = config.max_argument_bytes
        self._max_depth = config.max_argument_depth
        self._max_chars = config.max_result_chars
        self._eager_code = eager_code(tool) if self._mode == _ASYNC else None
        self._can_run_now = (
            (self._mode == _INLINE or self._eager_code is not None)
            and not self._chained
            and self._approval is False
        )
        self.eager = False
        """True while the pool serves and its calls may run in their callers' tasks (`serve_now`)."""
        self._can_host = (
            (
                self._mode in (_THREAD, _ASYNCIO)
                or (self._mode == _ASYNC and options.loop == "any" and self._loop is not None)
            )
            and not self._chained
            and self._approval is False
            and cls.teardown is ToolBase.teardown  # an actor's stop waits for its workers' calls only
        )
        self.host_ready = False
        """True while this tool's calls may start from the host loop (`start_on_host`): a sync
        tool, an asyncio tool, or a `loop="any"` tool in a runtime with an asyncio host."""

    def stop_fast_paths(self) -> None:
        """The actor stops serving (stopping, crashed, down): every call takes the mailbox."""
        self.eager = False
        self.host_ready = False

    def use_pipeline(self, pipeline: Any) -> None:
        """The features changed (one turned on after the runtime opened)."""
        self._around = pipeline if pipeline.wraps_calls else None

    # -- the pool --------------------------------------------------------------------

    def start(self, nursery: trio.Nursery) -> None:
        """Serve in `nursery` (one incarnation of the actor)."""
        self._nursery = nursery
        self._workers = self._idle = 0
        self.crash_reason = None
        self.eager = self._can_run_now and not self.stopping
        self.host_ready = self._can_host and not self.stopping
        self._spawn()

    def _spawn(self) -> None:
        assert self._nursery is not None
        self._workers += 1
        self._idle += 1
        self._nursery.start_soon(self._worker)

    def stuck_threads(self) -> int:
        """Threads of this tool still running calls that were already answered."""
        return 0 if self.threads is None else self.threads.stuck

    async def _worker(self) -> None:
        # The hot path, in one coroutine frame: a parked call costs its task, this frame and
        # the tool's own coroutine. One cancel scope serves many calls: a call's deadline is
        # set on it while the call runs, and a caller that gives up cancels it (entering a
        # scope per call would cost about as much as the channel hop). A cancelled scope is
        # replaced.
        receive = self._receive
        counters = self.counters
        running = self.running
        while True:
            with trio.CancelScope() as scope:
                while True:
                    try:
                        env = await receive()
                    except (trio.EndOfChannel, trio.ClosedResourceError):
                        return
                    self._idle -= 1
                    if self._idle == 0 and (self._limit is None or self._workers < self._limit):
                        self._spawn()
                    try:
                        if env.state == QUEUED:  # else settled while it waited (its caller gave up)
                            if self.stopping:
                                env.fail(FailureKind.UNAVAILABLE, self._why_unavailable())
                            else:
                                env.state = RUNNING
                                env.scope = scope
                                counters.in_flight += 1
                                running.add(env)
                                result: ToolResult
                                try:
                                    raw = env.call.arguments
                                    try:
                                        if (
                                            type(raw) is not str
                                            or (size := len(raw)) * 4 > self._max_bytes
                                            or (
                                                size > self._max_depth
                                                and raw.count("[") + raw.count("{") > self._max_depth
                                            )
                                        ):
                                            check_arguments(raw, self._max_bytes, self._max_depth)
                                        args = self._decode(raw)
                                    except Exception as exc:
                                        result = self._input_failure(env, raw, exc)
                                    else:
                                        timed = not (
                                            self._untimed and env.deadline == math.inf
                                        ) and self._arm(env, scope)
                                        try:
                                            if self._approval is not False:
                                                await self._approve(env, args)
                                            if self._chained:
                                                self._chain(env)
                                            if self._mode == _ASYNC:  # the tool's code runs in env.context
                                                context = env.context
                                                value = await _InContext(
                                                    context,
                                                    context.run(self._tool_dispatch, args, env.ctx)
                                                    if self._around is None or env.ctx is None
                                                    else self._async_call(args, env.ctx),
                                                )
                                            else:
                                                value = await self._dispatch(env, args)
                                        except BaseException as exc:  # KeyboardInterrupt too: the tool's own
                                            result = await self._raised(env, exc, scope)
                                        else:
                                            result = (
                                                self._success(env, value)
                                                if self._mode != _PLACED
                                                else self._placed_success(env, value)
                                            )
                                        finally:
                                            if timed:
                                                scope.deadline = math.inf
                                except BaseException:  # cancelled from outside: a crash or shutdown
                                    self._interrupt(env, scope)
                                    raise
                                finally:
                                    counters.in_flight -= 1
                                    running.discard(env)
                                    env.scope = None
                                if not env.settle(result):
                                    self._late(env, result)
                    finally:
                        self._idle += 1
                    if self._idle > _KEEP_IDLE:
                        self._idle -= 1
                        self._workers -= 1
                        return
                    if scope.cancel_called:
                        break  # a call was cancelled or timed out: take a fresh scope

    # -- a call in its caller's task -----------------------------------------------------

    def serve_now(self, env: Envelope) -> bool:
        """Serve `env` here and now, in the caller's task, and settle it (only while `eager`).

        False (and `env` untouched, the pool no longer eager) in the one case it cannot: the
        tool's function was replaced by one whose code was not checked (a test patching
        `tool.fn`); the caller then sends the call to the mailbox as usual.

        For tools whose calls cannot suspend: an `async def` whose code has no `await`
        (checked in its bytecode), or an `inline=True` sync tool. Such a call runs to its end
        in one step wherever it runs, so it cannot be cancelled, time out or wait on anything
        in a worker either; running it here saves the two task switches of the mailbox hop.
        Like every call it runs in `env.context`, a copy of its caller's contextvars. The
        caller has passed a checkpoint first (trio's rule: every call of an async API function is one).
        """
        args = self._arguments_now(env)
        if args is _SETTLED:
            return True
        ctx = env.ctx
        if ctx is not None and not (self._untimed and env.deadline == math.inf):
            ctx.deadline = self._deadline(env)  # for the tool to read: nothing can interrupt it
        step = self._sync_call if self._mode == _INLINE else self._run_to_end
        counters = self.counters
        counters.in_flight += 1
        try:
            value = env.context.run(step, args, ctx)
        except _NotHere:
            return False
        except BaseException as exc:  # KeyboardInterrupt too: the tool's own (nothing here awaits)
            result = self._failed(env, exc)
        else:
            result = self._success(env, value)
        finally:
            counters.in_flight -= 1
        env.settle(result)
        return True

    def _arguments_now(self, env: Envelope) -> Any:
        """The call's decoded arguments for a direct path, or `_SETTLED` with `env` answered:
        its deadline passed before it could start (TIMEOUT, as in the mailbox), or its
        arguments are bad (the worker's checks, the same failures)."""
        if env.deadline != math.inf and env.deadline <= trio.current_time():
            env.fail(FailureKind.TIMEOUT, env.timeout_message())
            return _SETTLED
        raw = env.call.arguments
        try:
            if (
                type(raw) is not str
                or (size := len(raw)) * 4 > self._max_bytes
                or (size > self._max_depth and raw.count("[") + raw.count("{") > self._max_depth)
            ):
                check_arguments(raw, self._max_bytes, self._max_depth)
            return self._decode(raw)
        except Exception as exc:
            env.settle(self._input_failure(env, raw, exc))
            return _SETTLED

    def _run_to_end(self, args: Any, ctx: CallContext | None) -> Any:
        if self._around is not None and ctx is not None:
            with self._around.around(ctx):
                return self._step(args, ctx)
        return self._step(args, ctx)

    def _step(self, args: Any, ctx: CallContext | None) -> Any:
        coro = self._tool_dispatch(args, ctx)
        if getattr(coro, "cr_code", None) is not self._eager_code:  # a function replaced since
            self.eager = self._can_run_now = False
            if hasattr(coro, "close"):
                coro.close()  # never started: nothing of it ran
            raise _NotHere
        return run_to_end(coro)

    # -- a sync tool's call from the host asyncio loop ------------------------------------

    def start_on_host(self, env: HostEnvelope, loop: Any) -> bool:
        """Start a sync tool's call for an asyncio caller in the runtime's host loop: its thread
        reports to the loop (as `asyncio.to_thread` does), so neither the call nor its result
        wakes trio; with the tool's thread budget in use, it waits for a token on the loop's
        side. An asyncio tool's (or a `loop="any"` tool's) call becomes a task of the loop.
        True: started or settled (OVERLOADED when every thread of the budget is stuck, as on
        trio's path); False: not now (the pool stopped serving), and `env` is untouched.
        """
        if not self.host_ready:
            return False
        if self._mode != _THREAD:  # an asyncio tool, or one for either loop (`loop="any"`)
            return self._task_on_host(env, loop)
        limiter = self.limiter
        threads = self.threads
        if limiter is None or threads is None:
            return False
        stuck = self.stuck_threads()
        if stuck >= limiter.total_tokens:
            env.fail(FailureKind.OVERLOADED, _all_stuck(self.name, stuck))
            return True
        args = self._arguments_now(env)
        if args is _SETTLED:
            return True
        ctx = env.ctx
        job = threads.start(
            env.context, self._sync_call, (args, ctx), loop, lambda result: self._host_done(env, result)
        )
        env.job = job
        env.pool = self
        env.state = RUNNING
        self.counters.in_flight += 1
        self.running.add(env)
        deadline = self._deadline(env)
        if deadline != math.inf:
            env.expire_at(deadline)
            if ctx is not None:
                ctx.deadline = deadline
        return True

    def _task_on_host(self, env: HostEnvelope, loop: Any) -> bool:
        """An asyncio tool's call from its host loop: its coroutine becomes a task of the loop
        right here (in the call's context), and its end settles the call; trio is not involved."""
        args = self._arguments_now(env)
        if args is _SETTLED:
            return True
        ctx = env.ctx
        task = loop.create_task(self._async_call(args, ctx), context=env.context)
        env.job = task
        env.pool = self
        env.state = RUNNING
        self.counters.in_flight += 1
        self.running.add(env)
        deadline = self._deadline(env)
        if deadline != math.inf:
            env.expire_at(deadline)
            if ctx is not None:
                ctx.deadline = deadline
        task.add_done_callback(lambda done: self._task_done(env, done))
        return True

    def _task_done(self, env: HostEnvelope, task: Any) -> None:
        """An asyncio tool's task from `_task_on_host` ended (on the loop)."""
        env.job = None
        self.counters.in_flight -= 1
        self.running.discard(env)
        if task.cancelled():
            if env.interrupted:  # cancelled by its deadline or its caller (`interrupt_task`)
                answer: ToolResult = self._interrupted(env)
            elif not self.host_ready:  # the incarnation ended: `kill_hosts`
                answer = failure(env.call, FailureKind.UNAVAILABLE, self._unavailable_message())
            else:
                answer = self._failed(env, asyncio.CancelledError())
        elif (exc := task.exception()) is not None:
            answer = self._failed(env, exc)
        else:
            answer = self._success(env, task.result())
        if not env.settle(answer):
            self._late(env, answer)

    def interrupt_task(self, env: HostEnvelope, cancelled: bool) -> None:
        """The caller of an asyncio tool's call from the host loop stops waiting: cancel its task
        (it settles the call when it ends; `abandon_task` answers it if it does not end)."""
        task = env.job
        env.cancelled = cancelled
        env.interrupted = True
        if task is not None:
            task.cancel()

    def _host_done(self, env: HostEnvelope, result: outcome.Outcome[Any]) -> None:
        """The thread of a `start_on_host` call returned (on the loop's thread)."""
        self._left_host(env)
        if isinstance(result, outcome.Value):
            answer = self._success(env, result.value)
        else:
            answer = self._failed(env, result.error)  # type: ignore[attr-defined]  # an Error
        if not env.settle(answer):
            self._late(env, answer)

    def drop_host(self, env: HostEnvelope, kind: FailureKind, message: str) -> None:
        """The asyncio caller stopped waiting (its deadline, its cancellation): answer the call
        now; its thread runs on, abandoned and counted, and keeps its slot until it returns."""
        if env.state != RUNNING or env.job is None:
            env.fail(kind, message)
            return
        assert self.threads is not None
        ran = not self.threads.drop(env.job)  # False: still queued, and now it never runs
        self._left_host(env)
        if ran:
            self._thread_abandoned(env)
        env.fail(kind, message)

    def _left_host(self, env: HostEnvelope) -> None:
        env.job = None
        self.counters.in_flight -= 1
        self.running.discard(env)

    def _unanswered_hosts(self) -> list[HostEnvelope]:
        return [env for env in self.running if type(env) is HostEnvelope and env.state != DONE]

    async def hosts_ended(self) -> None:
        """Wait until every call started from the host loop is answered: the workers' calls end
        with the incarnation's nursery, these do not (no trio task runs them). The actor's stop
        waits here too, so shutdown's grace, its kill and its abandonment reach them."""
        if self._unanswered_hosts():
            self._hosts_ended = trio.Event()
            try:
                await self._hosts_ended.wait()
            finally:
                self._hosts_ended = None

    def host_settled(self) -> None:
        """A call started from the host loop was answered (`HostEnvelope._notify`)."""
        if self._hosts_ended is not None and not self._unanswered_hosts():
            self._hosts_ended.set()

    def kill_hosts(self) -> None:
        """The incarnation ends now (a kill, a crash, down): every call started from the host
        loop fails UNAVAILABLE. A sync tool's call that has not started never does; one that runs
        is abandoned (its thread runs on); an asyncio tool's task is cancelled, and its end
        answers the call."""
        message = self._unavailable_message()
        for env in self._unanswered_hosts():
            if isinstance(env.job, asyncio.Future):
                env.job.cancel()  # `_task_done` answers it
            elif env.job is not None:
                self.drop_host(env, FailureKind.UNAVAILABLE, message)

    def give_up_hosts(self) -> None:
        """The incarnation ended, but these asyncio tasks ignored their cancellation: answer them
        (they run on, abandoned and counted)."""
        message = self._unavailable_message()
        for env in self._unanswered_hosts():
            env.give_up(FailureKind.UNAVAILABLE, f"{message}; the call did not stop when cancelled")

    # -- one call --------------------------------------------------------------------

    def _chain(self, env: Envelope) -> None:
        """The call's context records that this tool runs (its own copy: nothing to reset)."""
        env.context.run(call_chain.set, (*env.context.get(call_chain, ()), self.counters))

    def _sync_call(self, args: Any, ctx: CallContext | None) -> Any:
        """A sync tool's call, under the features' `around_call` (in the call's context)."""
        if self._around is not None and ctx is not None:
            with self._around.around(ctx):
                return self._tool_dispatch(args, ctx)
        return self._tool_dispatch(args, ctx)

    async def _async_call(self, args: Any, ctx: CallContext | None) -> Any:
        """An async tool's call, under the features' `around_call` (in the call's context)."""
        if self._around is not None and ctx is not None:
            with self._around.around(ctx):
                return await self._tool_dispatch(args, ctx)
        return await self._tool_dispatch(args, ctx)

    async def _approve(self, env: Envelope, args: Any) -> None:
        """Ask before the tool runs (`requires_approval`); raises ToolRejected when denied."""
        approval = self._approval
        if approval is not True and not approval(args):
            return
        ctx = env.ctx
        assert ctx is not None  # routing makes a context for every tool that asks
        await ctx.approve(env.call.arguments)

    async def _dispatch(self, env: Envelope, args: Any) -> Any:
        """A call of a tool that is not a plain async one (those run in `_worker`)."""
        if self._mode == _INLINE:
            return env.context.run(self._sync_call, args, env.ctx)
        if self._mode == _PLACED:
            if self._around is not None and env.ctx is not None:
                with self._around.around(env.ctx):  # the span is current for its progress and logs
                    return await self._placed_call(env)
            return await self._placed_call(env)
        if self._mode == _ASYNCIO:
            return await self._on_asyncio(env, args)
        limiter = self.limiter
        assert limiter is not None
        stuck = self.stuck_threads()
        if stuck >= limiter.total_tokens:
            raise _Overloaded(_all_stuck(self.name, stuck))
        assert self.threads is not None
        return await self.threads.run(env, env.context, self._sync_call, args, env.ctx)

    def _thread_abandoned(self, env: Envelope) -> None:
        # Its caller stopped waiting: the thread runs on (no thread can be interrupted) and
        # keeps its slot of the tool's budget until it ends; `stuck_threads` counts it meanwhile.
        self.counters.abandoned_threads += 1
        if env.ctx is not None:
            env.ctx.abandoned = True

    async def _placed_call(self, env: Envelope) -> ToolSuccess:
        """Serve the call where the tool's placement runs it (the arguments are checked already)."""
        placed = self.placed
        if placed is None:  # between incarnations: the call waits for none
            raise _Unplaced(self._why_unavailable())
        raw = env.call.arguments
        arguments = raw.encode() if type(raw) is str else _encode(raw)
        timeout = None
        scope = env.scope
        if scope is not None and scope.deadline != math.inf:
            timeout = max(0.0, scope.deadline - trio.current_time())
        return await placed.call(env.call, arguments, env.ctx, timeout)

    def _placed_success(self, env: Envelope, done: ToolSuccess) -> ToolResult:
        """A success built where the tool ran, cut to the runtime's limits like any other."""
        return success(env.call, self.name, done.value, done.content, done.parts, self._max_chars)

    async def _on_asyncio(self, env: Envelope, args: Any) -> Any:
        """Run an asyncio tool's coroutine as a task of the host's asyncio loop, and wait for it.

        The runtime is a trio guest on that loop's thread, so this is a hand-off within one
        thread. The task runs in a copy of this worker's context (the call's span is current
        there); cancelling this call (its deadline, its caller) cancels the task.
        """
        loop = self._loop
        task = loop.create_task(self._async_call(args, env.ctx), context=env.context)
        done = trio.Event()
        task.add_done_callback(lambda _: done.set())  # on the host thread, inside the guest run
        try:
            await done.wait()
        except trio.Cancelled:
            task.cancel()
            with trio.CancelScope(shield=True), trio.move_on_after(_ASYNCIO_GRACE):
                await done.wait()  # a task that ignores its cancellation runs on, abandoned
            if task.done() and not task.cancelled():
                task.exception()  # retrieved: asyncio would log it as never retrieved
            raise
        return task.result()

    def _deadline(self, env: Envelope) -> float:
        """The call's deadline, starting now (inf: none); sets `env.limit` if the tool's is sooner."""
        deadline = env.deadline
        # The tool's own limit and the caller's both hold (the smaller wins); the runtime's
        # default is only for a call that neither limits.
        limit = self._timeout
        if limit is None and deadline == math.inf:
            limit = self._default_timeout
        if limit is not None:
            own = trio.current_time() + limit
            if own < deadline:
                deadline = own
                env.limit = limit
        return deadline

    def _arm(self, env: Envelope, scope: trio.CancelScope) -> bool:
        """Put the call's deadline on the worker's scope (and its caller's); True if there is one."""
        deadline = self._deadline(env)
        if deadline == math.inf:
            return False
        scope.deadline = deadline
        env.expire_at(deadline)  # the caller answers it then if the tool ignores its cancellation
        if env.ctx is not None:
            env.ctx.deadline = deadline
        return True

    async def _raised(self, env: Envelope, exc: BaseException, scope: trio.CancelScope) -> ToolResult:
        """The result of a call whose tool raised `exc`; re-raises a cancellation from outside."""
        if scope.cancel_called:  # its deadline, or its caller gave up (maybe turned into an error)
            return self._interrupted(env)
        if escapes(exc):
            # Not this call's cancellation: an outer one (a sibling's crash, shutdown) is
            # re-raised here; otherwise the tool raised a Cancelled that is not its own.
            await trio.lowlevel.checkpoint_if_cancelled()
        return self._failed(env, exc)

    def _failed(self, env: Envelope, exc: BaseException) -> ToolResult:
        """The result of a call whose tool raised `exc` (not a cancellation of this call's)."""
        if isinstance(exc, _Overloaded):
            return failure(env.call, FailureKind.OVERLOADED, str(exc))
        if isinstance(exc, _Unplaced):
            return failure(env.call, FailureKind.UNAVAILABLE, str(exc))
        result = exception_failure(env.call, self.name, exc, self._max_chars)
        if env.ctx is not None:
            env.ctx.error = exc
        if self._restart_on and (
            isinstance(exc, self._restart_on) or (isinstance(exc, RemoteToolError) and exc.restart)
        ):
            log.warning(
                "tool %r raised %s, a restart_on exception", self.name, result.error_type, exc_info=exc
            )
            self.crash_reason = describe_error(exc)[1]
            self._crashed(self.crash_reason)
        elif result.kind is FailureKind.ERROR:
            log.info("tool %r raised %s", self.name, result.error_type, exc_info=exc)
        return result

    def _input_failure(self, env: Envelope, raw: Any, exc: Exception) -> ToolFailure:
        if isinstance(exc, UnicodeError):
            exc = not_unicode(raw, exc)
        return input_failure(env.call, self.name, exc, self._max_chars)

    def _success(self, env: Envelope, value: Any) -> ToolResult:
        try:
            text, shown = self._present(value)
            if not self._parts and len(text) <= self._max_chars:  # the common case
                return ToolSuccess(call_id=env.call.id, tool=self.name, content=text, value=shown)
            parts = tuple(self.tool.result_to_parts(value)) if self._parts else ()
            return success(env.call, self.name, shown, text, parts, self._max_chars)
        except Exception as exc:
            error_type, text = describe_error(exc)
            if isinstance(exc, ResultTypeError):  # its message names the tool, the value and the type
                text = str(exc)
            else:
                text = f"tool {self.name!r} returned a result that could not be encoded: {text}"
            return failure(env.call, FailureKind.ERROR, text[: self._max_chars], error_type)

    def _interrupted(self, env: Envelope) -> ToolFailure:
        if env.cancelled:
            return failure(env.call, FailureKind.CANCELLED, "the call was cancelled by its caller")
        return failure(env.call, FailureKind.TIMEOUT, env.timeout_message())

    def _interrupt(self, env: Envelope, scope: trio.CancelScope) -> None:
        """The call was cancelled from outside before it could settle: say why."""
        if scope.cancel_called:  # this call's deadline, or its caller gave up
            env.settle(self._interrupted(env))
        else:  # a sibling call crashed the actor, or shutdown
            env.fail(FailureKind.UNAVAILABLE, self._unavailable_message())

    def _unavailable_message(self) -> str:
        reason = self.crash_reason
        if reason:
            return f"tool {self.name!r} crashed while serving this call ({reason}) and is restarting"
        return self._why_unavailable()

    def _late(self, env: Envelope, result: ToolResult) -> None:
        """The call was answered already (its caller gave up, a deadline lapsed): drop this result."""
        since = self.counters.orphans.pop(env, None)
        if since is None:
            return
        if not result.ok and result.kind in _STOPPED:  # type: ignore[union-attr]
            return  # it ended through its cancellation (however late the loop let it): not abandoned
        now = trio.current_time()
        if now >= since:
            self.counters.abandoned_late += 1
            log.warning(
                "tool %r: call %s ended %.3gs after it was answered (it ignored cancellation); "
                "its result (%s) is dropped",
                self.name,
                env.call.id,
                now - env.settled_at,
                "success" if result.ok else result.kind.value,  # type: ignore[union-attr]
            )


class _NotHere(Exception):
    """`serve_now` cannot run this call (its tool's code changed): the mailbox must."""


def _all_stuck(name: str, stuck: int) -> str:
    return (
        f"tool {name!r} is overloaded: all {stuck} of its threads are still running calls that "
        "timed out or were cancelled (they are blocked and cannot be interrupted); try again later"
    )


class _Overloaded(Exception):
    """A sync tool's thread budget is held entirely by abandoned threads."""


class _Unplaced(Exception):
    """A placed tool's workers are not running (its actor is between incarnations)."""
