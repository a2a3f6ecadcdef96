"""What the engine knows of one tool to serve its calls: built once per actor, read by every call.

A `ToolPlan` holds the two halves of the call state machine that depend on the tool:

- begin: `decode` checks the arguments' bounds and decodes them, in one strict pass;
- end: `shape` (a value -> its ToolSuccess, cut to the limits, or what is over them kept whole
  as artifacts by the runtime's `Keeper`) and `failure` (an exception -> its ToolFailure, and
  whether the actor restarts), the one outcome mapping of `_outcome`;

and what the executors run of it, the tool's code in the call's context, from `ToolCode`
(engine/_code.py).
"""

from __future__ import annotations

import logging
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from ..exceptions import RemoteToolError, ResultTypeError
from ..features import FeaturePipeline
from ..messages import ContentPart, FailureKind, ToolFailure, ToolResult, ToolSuccess
from ..tools import (
    PlacedTool,
    Retry,
    ToolBase,
    ToolOptions,
    cannot_suspend,
    result_encoder,
)
from ._arguments import check_arguments, not_unicode
from ._call import Call
from ._code import ToolCode, _Refused
from ._mailbox import Mailbox
from ._outcome import describe_error, exception_failure, failure, input_failure, success
from ._stats import ToolCounters
from ._threads import KeptThreads

if TYPE_CHECKING:
    from ._artifacts import Keeper
    from ._outside import InCaller

__all__ = ["ToolPlan"]

log = logging.getLogger("runtime.engine")

_encode = result_encoder.encode


class ToolPlan(ToolCode):
    """One tool, as the engine serves it.

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
        self.running: set[Call] = set()  # calls an executor runs now (not yet ended)
        self.draining = False  # the actor waits for `running` to empty (a graceful stop)
        self.drained: Callable[[], None] = _nothing
        self.mailbox: Mailbox = None  # type: ignore[assignment]  # set by the actor, with its executor
        self.placed: PlacedTool | None = None  # a placed tool's workers, per incarnation
        self.threads: KeptThreads | None = None  # a sync tool's threads (set by the actor)
        self.host_loop: Any = None  # the host asyncio loop (asyncio tools)
        self._hinted = False  # the asyncio-under-trio hint was logged
        self.host_executor: Any = None  # where an asyncio caller's call runs, if not where a trio caller's
        self.in_caller: InCaller | None = None  # where `rt.call` runs a call that only awaits another process
        self.policies: tuple[Any, ...] = ()  # its interceptors, outermost first (set by the actor)
        self.suspends = False  # one of them yields awaitables: its calls go through a trio task
        self.retry: Retry | None = None  # run a failed call again (set by the actor)
        self.retry_later: Callable[[float, Call], None] = _never  # where a retry waits its backoff
        self.breaker: Any = None  # its circuit breaker's state (`BreakerState`), which hears every attempt
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
        self.sinks: dict[Call, Any] = {}  # a streamed call's reader (a channel), while it runs
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

    # -- begin ---------------------------------------------------------------------------

    def decode(self, call: Call) -> bool:
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

    def shape(self, call: Call, value: Any, wait: bool = True) -> ToolResult | None:
        """The result of a call whose tool returned `value`: its text (and parts), cut to the
        limits or, when the runtime keeps artifacts, what is over them kept whole; ERROR if the
        value cannot be turned into text. None: keeping it has to wait (the call ends then);
        never with `wait=False` (what would wait is cut instead)."""
        if self.is_placed and type(value) is ToolSuccess:  # built where the tool ran
            shaped = self._bounded(call, value.value, value.content, value.parts, wait)
            mismatch = value.type_mismatch
            return shaped if mismatch is None else self._mismatched(call, shaped, mismatch)
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

    def _returned(self, call: Call, value: Any, returned: tuple[str, Any], wait: bool) -> ToolResult | None:
        """The success of a value that is not of the declared result type, as it was returned."""
        text, shown = returned
        parts: tuple[ContentPart, ...] = ()
        if self._parts:
            try:
                parts = tuple(self.tool.result_to_parts(value))
            except Exception:  # the text stands for it
                log.debug("tool %r: no parts for a result of another type", self.name, exc_info=True)
        return self._bounded(call, shown, text, parts, wait)

    def _mismatched(self, call: Call, result: ToolResult | None, message: str) -> ToolResult | None:
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
        self, call: Call, value: Any, text: str, parts: tuple[ContentPart, ...], wait: bool
    ) -> ToolResult | None:
        """A success within the limits: what is over them is kept (artifacts) or cut."""
        keeper = self.keeper
        if keeper is not None and (len(text) > self.max_chars or keeper.over(parts, self.max_chars)):
            return keeper.keep(call, self, value, text, parts, wait)
        return success(call.call, self.name, value, text, parts, self.max_chars)

    def failure(self, call: Call, exc: BaseException) -> ToolFailure:
        """The result of a call whose tool raised `exc`; a `restart_on` exception also crashes
        the actor (the only exceptions that count toward a restart are the tool's own)."""
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


def _never(delay: float, call: Call) -> None:  # pragma: no cover - set with `retry`
    raise AssertionError("a retry without a place to wait")
