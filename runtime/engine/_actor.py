"""A tool actor: one tool behind a bounded mailbox, served by an elastic pool of workers.

Life of an actor (each turn of the loop is one incarnation, Erlang/OTP one_for_one):

    setup() ──ok──▶ serve: workers take envelopes from the mailbox ──stop──▶ teardown() ─▶ stopped
       │                 │ a `restart_on` exception: in-flight calls fail, queued ones wait
       │ fails           ▼
       └──────────▶ teardown() ─▶ backoff ─▶ setup() again ...
                    more than `max_restarts` within `within` seconds ─▶ down: every call UNAVAILABLE

Workers: async tools get one worker per concurrent call (a pool that grows when all
workers are busy, up to `max_concurrency`, and shrinks when idle); sync tools run in
trio's worker threads under the runtime's CapacityLimiter, unless `inline=True`.
"""

from __future__ import annotations

import collections
import enum
import logging
import math
from collections.abc import Callable
from typing import Any

import msgspec
import trio

from ..exceptions import InvalidArguments, ToolRejected, ToolUnavailable
from ..features import FeaturePipeline
from ..messages import FailureKind, ToolFailure, ToolResult, ToolSuccess
from ..tools import ToolBase, result_encoder
from ._envelope import QUEUED, RUNNING, Envelope, describe_error, failure, truncate

__all__ = ["ActorState", "EngineConfig", "RestartPolicy", "ToolActor"]

log = logging.getLogger("runtime.engine")

_KEEP_IDLE = 4  # idle workers an async tool keeps between bursts
_ASYNC, _INLINE, _THREAD = 0, 1, 2  # how a tool's dispatch runs


class ActorState(enum.StrEnum):
    """Where an actor is in its life."""

    STARTING = "starting"
    UP = "up"
    RESTARTING = "restarting"
    DOWN = "down"
    STOPPED = "stopped"


class RestartPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """How the supervisor restarts a crashed tool actor (OTP restart intensity).

    Attributes:
        max_restarts: restarts allowed within `within` seconds; one more marks the tool down.
        within: the intensity period, in seconds.
        backoff: seconds before the first restart; doubles for each recent restart.
        max_backoff: the longest wait between restarts.
    """

    max_restarts: int = 3
    within: float = 5.0
    backoff: float = 0.1
    max_backoff: float = 5.0

    def delay(self, recent: int) -> float:
        """The wait before a restart when `recent` restarts happened within the period."""
        return float(min(self.max_backoff, self.backoff * 2 ** max(0, recent - 1)))


class EngineConfig(msgspec.Struct, kw_only=True):
    """Runtime-wide settings every actor reads."""

    pipeline: FeaturePipeline = msgspec.field(default_factory=FeaturePipeline)
    default_timeout: float | None = None
    max_argument_bytes: int = 1 << 20
    max_result_chars: int = 100_000
    shutdown_timeout: float = 5.0
    thread_limiter: Any = None  # trio.CapacityLimiter, shared by every sync tool


_encode = result_encoder.encode


def _default_text(value: Any) -> str:
    """`ToolBase.result_to_text` of a tool that overrides neither it nor `encode_result`."""
    return value if type(value) is str else _encode(value).decode()


def escapes(exc: BaseException) -> bool:
    """True for what a tool's code must let through: trio's cancellation and Ctrl-C.

    Anything else a tool raises, BaseExceptions such as SystemExit included, is its own
    failure and must never stop the runtime.
    """
    if isinstance(exc, trio.Cancelled | KeyboardInterrupt):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup((trio.Cancelled, KeyboardInterrupt)) is not None
    return False


class _Crash(Exception):
    """Why an incarnation ended early (kept apart from exceptions in the tool's own code)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ToolActor:
    """Serves one tool. Callers `submit` envelopes; the supervisor runs `supervise`."""

    def __init__(self, tool: ToolBase[Any, Any], config: EngineConfig) -> None:
        self.tool = tool
        self.name = tool.name
        self.config = config
        self._send, self._recv = trio.open_memory_channel[Envelope](tool.mailbox_size)
        self.state = ActorState.STARTING
        self.down_reason: str | None = None
        self.reject_when_full = tool.on_full == "reject"
        self._limit = tool.max_concurrency
        self._timeout = tool.timeout
        self._default_timeout = config.default_timeout
        self._untimed = self._timeout is None and self._default_timeout is None
        self._restart_on = tool.restart_on
        cls = type(tool)
        self._has_setup = cls.setup is not ToolBase.setup
        self._has_teardown = cls.teardown is not ToolBase.teardown
        self._parts = cls.result_to_parts is not ToolBase.result_to_parts
        self._value = cls.result_value is not ToolBase.result_value
        self._mode = _ASYNC if tool.is_async else _INLINE if tool.inline else _THREAD
        self._tool_dispatch = tool.dispatch
        self._decode: Callable[[Any], Any] = tool.decode_args
        codec = tool._codec
        if cls.decode_args is ToolBase.decode_args and codec is not None:
            self._decode = codec.decode  # skip a layer: the hook is not overridden
        self._to_text: Callable[[Any], str] = tool.result_to_text
        if cls.result_to_text is ToolBase.result_to_text and cls.encode_result is ToolBase.encode_result:
            self._to_text = _default_text  # the hooks are not overridden: skip two method calls
        self._around = config.pipeline if config.pipeline.wraps_calls else None
        self._max_bytes = config.max_argument_bytes
        self._max_chars = config.max_result_chars
        self._nursery: trio.Nursery | None = None
        self._crash: _Crash | None = None
        self._stopping = False
        self._stop_scope: trio.CancelScope | None = None
        self._setup_scope: trio.CancelScope | None = None
        self.stopped = trio.Event()
        self._workers = 0
        self._idle = 0
        # statistics
        self.in_flight = 0
        self.restarts = 0
        self.calls = 0
        self.succeeded = 0
        self.failures: collections.Counter[str] = collections.Counter()

    # -- the caller's side -------------------------------------------------------------

    def submit_nowait(self, env: Envelope) -> bool:
        """Queue `env`, or settle it if the tool cannot take it; False: the caller must wait."""
        env.actor = self
        if self.state is ActorState.DOWN or self._stopping:
            env.fail(FailureKind.UNAVAILABLE, self._unavailable())
            return True
        try:
            self._send.send_nowait(env)
        except trio.WouldBlock:
            if self.reject_when_full:
                env.fail(
                    FailureKind.OVERLOADED,
                    f"tool {self.name!r} is overloaded ({self.tool.mailbox_size} calls waiting); try again later",
                )
                return True
            return False
        except trio.ClosedResourceError:
            env.fail(FailureKind.UNAVAILABLE, self._unavailable())
        return True

    async def submit(self, env: Envelope) -> None:
        """Queue `env`, waiting for room in the mailbox (backpressure) if it is full."""
        if self.submit_nowait(env):
            return
        try:
            await self._send.send(env)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            env.fail(FailureKind.UNAVAILABLE, self._unavailable())

    def queued(self) -> int:
        return self._send.statistics().current_buffer_used

    def _unavailable(self) -> str:
        if self.state is ActorState.DOWN:
            return f"tool {self.name!r} is down: {self.down_reason}"
        return f"tool {self.name!r} is unavailable: the runtime is shutting down"

    # -- supervision -------------------------------------------------------------------

    async def supervise(self, policy: RestartPolicy, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Run incarnations until stopped or down; `started()` after the first setup attempt."""
        recent: collections.deque[float] = collections.deque()
        ready = task_status
        try:
            while not self._stopping:
                crash = await self._incarnation(ready)
                ready = trio.TASK_STATUS_IGNORED
                if crash is None or self._stopping:
                    break
                now = trio.current_time()
                recent.append(now)
                while recent and recent[0] < now - policy.within:
                    recent.popleft()
                if len(recent) > policy.max_restarts:
                    self._go_down(
                        f"it crashed {len(recent)} times within {policy.within:g}s (last: {crash.reason})"
                    )
                    return
                self.restarts += 1
                self.state = ActorState.RESTARTING
                log.warning("tool %r crashed (%s); restarting", self.name, crash.reason)
                self.config.pipeline.supervisor_event(self.name, "restart", crash.reason)
                with trio.CancelScope() as self._stop_scope:
                    await trio.sleep(policy.delay(len(recent)))
                self._stop_scope = None
        finally:
            if self.state is not ActorState.DOWN:
                self.state = ActorState.STOPPED
            self._fail_queued(self._unavailable())
            self.stopped.set()

    async def _incarnation(self, ready: Any) -> _Crash | None:
        self._crash = None
        if self._has_setup:
            scope = self._setup_scope = trio.CancelScope()  # kill() cancels a setup that hangs
            try:
                with scope:
                    await self.tool.setup()
            except BaseException as exc:
                if escapes(exc):
                    raise
                log.warning("setup of tool %r failed", self.name, exc_info=True)
                ready.started()
                await self._teardown()
                return _Crash(f"setup failed: {describe_error(exc)[1]}")
            finally:
                self._setup_scope = None
            if scope.cancelled_caught:  # stopped while setting up
                ready.started()
                await self._teardown()
                return None
        self.state = ActorState.UP
        ready.started()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._workers = self._idle = 0
                self._spawn_worker()
        finally:
            self._nursery = None
            await self._teardown()
        return self._crash

    async def _teardown(self) -> None:
        if not self._has_teardown:
            return
        with trio.CancelScope(shield=True), trio.move_on_after(self.config.shutdown_timeout):
            try:
                await self.tool.teardown()
            except BaseException as exc:
                if escapes(exc):
                    raise
                log.warning("teardown of tool %r failed", self.name, exc_info=True)

    def _go_down(self, reason: str) -> None:
        self.state = ActorState.DOWN
        self.down_reason = reason
        log.error("tool %r is down: %s", self.name, reason)
        self.config.pipeline.supervisor_event(self.name, "down", reason)
        self._send.close()
        self._fail_queued(self._unavailable())

    def _fail_queued(self, message: str) -> None:
        while True:
            try:
                env = self._recv.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                return
            env.fail(FailureKind.UNAVAILABLE, message)

    def begin_stop(self) -> None:
        """Stop taking calls; queued calls fail, running ones may finish (graceful)."""
        self._stopping = True
        self._send.close()
        self._fail_queued(self._unavailable())  # now, not once a busy worker gets to them
        if self._stop_scope is not None:
            self._stop_scope.cancel()

    def kill(self) -> None:
        """Cancel the running calls (they fail UNAVAILABLE) and a setup still running (brutal)."""
        self.begin_stop()
        if self._setup_scope is not None:
            self._setup_scope.cancel()
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    # -- workers -----------------------------------------------------------------------

    def _spawn_worker(self) -> None:
        assert self._nursery is not None
        self._workers += 1
        self._idle += 1
        self._nursery.start_soon(self._worker)

    async def _worker(self) -> None:
        # The hot path, in one coroutine frame: a parked call costs its task, this frame and
        # the tool's own coroutine. One cancel scope serves many calls: a call's deadline is
        # set on it while the call runs, and a caller that gives up cancels it (entering a
        # scope per call would cost about as much as the channel hop). A cancelled scope is
        # replaced.
        receive = self._recv.receive
        while True:
            with trio.CancelScope() as scope:
                while True:
                    try:
                        env = await receive()
                    except (trio.EndOfChannel, trio.ClosedResourceError):
                        return
                    self._idle -= 1
                    if self._idle == 0 and (self._limit is None or self._workers < self._limit):
                        self._spawn_worker()
                    if env.state == QUEUED:  # else settled while it waited (its caller gave up)
                        if self._stopping:
                            env.fail(FailureKind.UNAVAILABLE, self._unavailable())
                        else:
                            env.state = RUNNING
                            self.in_flight += 1
                            try:
                                raw = env.call.arguments
                                result: ToolResult | None = (
                                    self._too_large(env)
                                    if type(raw) is not str or len(raw) * 4 > self._max_bytes
                                    else None
                                )
                                if result is None:
                                    try:
                                        args = self._decode(raw)
                                    except Exception as exc:
                                        result = self._exception_result(env, exc)
                                    else:
                                        if self._untimed and env.deadline == math.inf:
                                            env.scope = scope  # no deadline: nothing to arm
                                            timed = False
                                        else:
                                            timed = self._arm(env, scope)
                                        try:
                                            if self._around is not None and env.ctx is not None:
                                                with self._around.around(env.ctx):
                                                    if self._mode == _ASYNC:
                                                        value = await self._tool_dispatch(args, env.ctx)
                                                    else:
                                                        value = await self._dispatch(args, env.ctx)
                                            elif self._mode == _ASYNC:
                                                value = await self._tool_dispatch(args, env.ctx)
                                            else:
                                                value = await self._dispatch(args, env.ctx)
                                        except BaseException as exc:  # SystemExit is the tool's error too
                                            if escapes(exc):
                                                raise
                                            if scope.cancel_called:
                                                result = self._interrupted(env)  # cancel turned into an error
                                            else:
                                                result = self._exception_result(env, exc)
                                        else:
                                            result = self._success(env, value)
                                        finally:
                                            if timed:
                                                scope.deadline = math.inf
                            except BaseException:
                                self._interrupt(env, scope)
                                raise
                            finally:
                                self.in_flight -= 1
                                env.scope = None
                            assert result is not None
                            env.settle(result)
                    self._idle += 1
                    if self._idle > _KEEP_IDLE:
                        self._idle -= 1
                        self._workers -= 1
                        return
                    if scope.cancel_called:
                        break  # a call was cancelled or timed out (and swallowed it): take a fresh scope

    def _too_large(self, env: Envelope) -> ToolFailure | None:
        """INVALID_ARGUMENTS for arguments over `max_argument_bytes` (as JSON), before decoding."""
        raw = env.call.arguments
        if type(raw) is str:
            size = len(raw.encode()) if len(raw) * 4 > self._max_bytes else 0
        else:  # an already-parsed object (Anthropic, Gemini): its size as JSON
            try:
                size = len(_encode(raw))
            except (TypeError, ValueError):
                return None  # not JSON-encodable: decoding says what is wrong with it
        if size <= self._max_bytes:
            return None
        return failure(
            env.call,
            FailureKind.INVALID_ARGUMENTS,
            f"invalid arguments for tool {self.name!r}: {size} bytes, over the limit of {self._max_bytes}",
        )

    def _arm(self, env: Envelope, scope: trio.CancelScope) -> bool:
        """Put the call's deadline on the worker's scope; True if there is one."""
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
        env.scope = scope
        if deadline == math.inf:
            return False
        scope.deadline = deadline
        if env.ctx is not None:
            env.ctx.deadline = deadline
        return True

    def _interrupt(self, env: Envelope, scope: trio.CancelScope) -> None:
        """The call was cancelled before it could settle: say why."""
        if scope.cancel_called:  # this call's deadline, or its caller gave up
            env.settle(self._interrupted(env))
        else:  # cancelled from outside: a sibling call crashed the actor, or shutdown
            reason = self._crash.reason if self._crash is not None else None
            message = (
                f"tool {self.name!r} crashed while serving this call ({reason}) and is restarting"
                if reason
                else self._unavailable()
            )
            env.fail(FailureKind.UNAVAILABLE, message)

    async def _dispatch(self, args: Any, ctx: Any) -> Any:
        if self._mode == _ASYNC:
            return await self._tool_dispatch(args, ctx)
        if self._mode == _INLINE:
            return self._tool_dispatch(args, ctx)
        return await trio.to_thread.run_sync(
            self._tool_dispatch, args, ctx, limiter=self.config.thread_limiter, abandon_on_cancel=True
        )

    def _interrupted(self, env: Envelope) -> ToolFailure:
        if env.cancelled:
            return failure(env.call, FailureKind.CANCELLED, "the call was cancelled by its caller")
        return failure(env.call, FailureKind.TIMEOUT, env.timeout_message())

    def _success(self, env: Envelope, value: Any) -> ToolResult:
        try:
            text = self._to_text(value)
            parts = tuple(self.tool.result_to_parts(value)) if self._parts else ()
            if self._value:
                value = self.tool.result_value(value)
        except Exception as exc:
            error_type, text = describe_error(exc)
            return failure(
                env.call,
                FailureKind.ERROR,
                f"tool {self.name!r} returned a result that could not be encoded: {text}",
                error_type,
            )
        return ToolSuccess(
            call_id=env.call.id,
            tool=self.name,
            content=text if len(text) <= self._max_chars else truncate(text, self._max_chars),
            value=value,
            parts=parts,
        )

    def _exception_result(self, env: Envelope, exc: BaseException) -> ToolFailure:
        call = env.call
        if isinstance(exc, ToolRejected):
            return failure(call, FailureKind.REJECTED, exc.message)
        if isinstance(exc, InvalidArguments):
            return failure(
                call,
                FailureKind.INVALID_ARGUMENTS,
                f"invalid arguments for tool {self.name!r}: `{exc.path}`: {exc.expected}",
            )
        if isinstance(exc, ToolUnavailable):
            return failure(call, FailureKind.UNAVAILABLE, f"tool {self.name!r} is unavailable: {exc.reason}")
        error_type, text = describe_error(exc)
        if env.ctx is not None:
            env.ctx.error = exc
        if self._restart_on and isinstance(exc, self._restart_on):
            self._crash = _Crash(text)
            if self._nursery is not None:
                self._nursery.cancel_scope.cancel()
            log.warning("tool %r raised %s, a restart_on exception", self.name, error_type, exc_info=exc)
        else:
            log.info("tool %r raised %s", self.name, error_type, exc_info=exc)
        return failure(call, FailureKind.ERROR, f"tool {self.name!r} raised {text}", error_type)

    def record(self, result: ToolResult) -> None:
        """Count a finished call."""
        self.calls += 1
        if isinstance(result, ToolSuccess):
            self.succeeded += 1
        else:
            self.record_failure(result)

    def record_failure(self, failure: ToolFailure) -> None:
        """Count a failure's kind (the caller counts the call itself)."""
        self.failures[failure.kind.value] += 1
