"""What a tool may ask for at call time, how it talks back during a call, and how it refuses input.

A tool talks back with `await ctx.report_progress(...)` and `await ctx.log(...)`. Each report
goes to the call's observer (the features' `on_call_event`: tracing makes it an event on the
call's span; this layer knows no OpenTelemetry) and becomes a Python log record (DEBUG for progress, the record's
own level for `log`); when the call was made inside `reporting(on_progress=..., on_log=...)`
(served over MCP, the server does this for each request), the handlers get it too.
Progress is rate-limited per call (a burst of `PROGRESS_BURST`, then `PROGRESS_RATE` per
second; the report that reaches `total` always passes), and so is `log`: a chatty tool cannot
flood its caller.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import re
import time
import types
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, Final, Literal, NoReturn, Protocol, TypeVar, overload

import msgspec

from ..exceptions import CallDeferred, ToolRejected, ToolUnavailable
from ..messages import TERMINATE_TOOL, FailureKind, ToolCallMetadata, ToolFailure
from ._asking import (
    Asker,
    CannotAsk,
    Elicitation,
    Elicited,
    Root,
    RootsRequest,
    Sampled,
    Sampling,
    SamplingMessage,
    current_asker,
    elicitation_schema,
)

__all__ = [
    "LOG_LEVELS",
    "CallContext",
    "CallObserver",
    "ChunkHandler",
    "Description",
    "LogHandler",
    "ProgressHandler",
    "check_tool_name",
    "chunk_handler",
    "fail",
    "reporting",
    "validate",
]

_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

log = logging.getLogger("runtime.tools")

T = TypeVar("T")
_ARGUMENTS_SHOWN = 2000  # characters of a call's arguments shown in an approval question
_schemas: dict[Any, dict[str, Any]] = {}  # elicitation schema per answer type, made once

LOG_LEVELS: Final = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
"""The levels of `ctx.log`, least severe first (MCP's, after RFC 5424)."""

_PYTHON_LEVELS: Final = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "notice": logging.INFO + 5,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "alert": logging.CRITICAL,
    "emergency": logging.CRITICAL,
}
PROGRESS_BURST: Final = 10
PROGRESS_RATE: Final = 20.0  # reports per second once the burst is spent
LOG_BURST: Final = 50
LOG_RATE: Final = 50.0

ProgressHandler = Callable[["CallContext", float, "float | None", "str | None"], Awaitable[None]]
"""`async def on_progress(ctx, progress, total, message)`."""
LogHandler = Callable[["CallContext", str, str, "dict[str, Any]"], Awaitable[None]]
"""`async def on_log(ctx, level, message, data)`; `level` is one of `LOG_LEVELS`."""
ChunkHandler = Callable[["CallContext", str], Awaitable[None]]
"""`async def on_chunk(ctx, chunk)`: a streaming tool's chunk, as it yields it (awaited: a slow
handler slows the tool down)."""


class CallObserver(Protocol):
    """Who hears what a running call tells (the engine passes the features' pipeline)."""

    def hears(self, ctx: CallContext) -> bool:
        """Whether an event of this call would be recorded anywhere (a recording span)."""
        ...

    def event(self, ctx: CallContext, name: str, attributes: dict[str, Any]) -> None:
        """`name` happened during the call (`tool.progress`, `tool.log`, `tool.ask`)."""
        ...


class _Reporter:
    __slots__ = ("on_chunk", "on_log", "on_progress")

    def __init__(
        self, on_progress: ProgressHandler | None, on_log: LogHandler | None, on_chunk: ChunkHandler | None
    ) -> None:
        self.on_progress = on_progress
        self.on_log = on_log
        self.on_chunk = on_chunk


_reporter: contextvars.ContextVar[_Reporter | None] = contextvars.ContextVar("runtime_reporter", default=None)


@contextlib.contextmanager
def reporting(
    *,
    on_progress: ProgressHandler | None = None,
    on_log: LogHandler | None = None,
    on_chunk: ChunkHandler | None = None,
) -> Iterator[None]:
    """Calls started in this block send their tools' `report_progress` and `log` to these
    handlers, and a streaming tool's chunks to `on_chunk` as it yields them (served over MCP,
    the server sends each as a progress notification whose message is the chunk).

    ```python
    async def show(ctx, progress, total, message):
        print(f"{ctx.tool_name}: {progress}/{total} {message or ''}")

    with runtime.reporting(on_progress=show):
        result = await rt.call(call)
    ```

    A handler that raises is logged and does not affect the call; `on_chunk` is awaited before
    the tool goes on (backpressure).
    """
    token = _reporter.set(_Reporter(on_progress, on_log, on_chunk))
    try:
        yield
    finally:
        _reporter.reset(token)


BackgroundHandler = Callable[["CallContext"], Awaitable[None]]
_backgrounder: contextvars.ContextVar[BackgroundHandler | None] = contextvars.ContextVar(
    "runtime_backgrounder", default=None
)


@contextlib.contextmanager
def backgrounding(handler: BackgroundHandler) -> Iterator[None]:
    """Calls started in this block hand `ctx.background()` to `handler` (the MCP server's, for a
    call whose client takes tasks: it ends the call there, and the server makes it a task)."""
    token = _backgrounder.set(handler)
    try:
        yield
    finally:
        _backgrounder.reset(token)


def chunk_handler() -> ChunkHandler | None:
    """The `on_chunk` handler of the `reporting(...)` block this code runs in (a call's tool runs
    in a copy of its caller's context), or None."""
    reporter = _reporter.get()
    return reporter.on_chunk if reporter is not None else None


class _Bucket:
    """A token bucket: `burst` at once, then `rate` per second."""

    __slots__ = ("burst", "dropped", "last", "rate", "tokens")

    def __init__(self, burst: int, rate: float) -> None:
        self.burst = burst
        self.rate = rate
        self.tokens = float(burst)
        self.last = time.monotonic()
        self.dropped = 0

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        self.dropped += 1
        return False


_NOTHING_RESUMED: Mapping[str, Any] = types.MappingProxyType({})


class CallContext:
    """Injected into a tool that declares a parameter of this type; never in the schema.

    Attributes:
        call_id: the id of the call being served.
        tool_name: the tool's name.
        metadata: the merged ToolCallMetadata (features < caller < runtime keys).
        deadline: the trio time by which the call must end, or None.
        tool: the tool serving the call (None for an unknown tool).
        error: the exception behind an ERROR failure, set by the engine (for logs and spans).
        abandoned: set by the engine when the call was answered while its work could not be
            stopped (it ignored cancellation, or its thread was blocked); shown on the span.
        principal: who the call runs for (`rt.call(..., principal=...)`, a scoped view, the MCP
            session's credential); None when nobody said. An id, never a secret.
        approved: the call runs because it was approved (a deferred approval, `DetachedCall.approve`):
            a policy or a tool that would ask for an approval lets it through.
        detached_id: the id of the detached call this call runs as (`rt.detach`, or a deferred
            call once approved); None for a plain call.
        handed_over: set by the engine when this detached call's run is stopped without ending
            here (the runtime shuts down, or another process took the call over): work it
            started elsewhere (a checkpointed remote task) is left running for the run that
            resumes it, not cancelled.
        resumed: where a run of this detached call before this one left its work, by key (what
            it journaled with `checkpoint`); empty otherwise. Only the engine writes it: a
            caller's metadata cannot pose as a checkpoint.
    """

    __slots__ = (
        "_asking",
        "_background",
        "_log_bucket",
        "_observer",
        "_progress_bucket",
        "_reporter",
        "_scope",
        "_views",
        "abandoned",
        "approved",
        "call_id",
        "deadline",
        "detached_id",
        "error",
        "handed_over",
        "metadata",
        "principal",
        "resumed",
        "tool",
        "tool_name",
    )

    def __init__(
        self,
        call_id: str,
        tool_name: str,
        metadata: ToolCallMetadata = ToolCallMetadata.EMPTY,
        deadline: float | None = None,
        tool: Any = None,
        *,
        asking: Asker | None = None,
        observer: CallObserver | None = None,
        principal: str | None = None,
        views: Any = None,
        scope: Any = None,
    ) -> None:
        self.call_id = call_id
        self.tool = tool
        self.tool_name = tool_name
        self.metadata = metadata
        self.deadline = deadline
        self.error: BaseException | None = None
        self.abandoned = False
        self.approved = False
        self.detached_id: str | None = None
        self.handed_over = False
        self.resumed: Mapping[str, Any] = _NOTHING_RESUMED
        self.principal = principal
        self._observer = observer
        self._reporter = _reporter.get()  # made in the caller's task: its `reporting(...)` block
        self._background = _backgrounder.get()  # its `backgrounding(...)` block, likewise
        self._progress_bucket: _Bucket | None = None
        self._log_bucket: _Bucket | None = None
        own = current_asker()  # the caller's `asking(...)` block first, then the runtime's handlers
        self._asking = own.over(asking) if own is not None else asking
        self._views = views
        self._scope = scope

    @property
    def runtime(self) -> Any:
        """The runtime this call runs in, as its caller sees it: the view the call was made
        through (its principal, the tools it may see), for a tool that calls other tools
        (`await ctx.runtime.call(ToolCall(...))`, `ctx.runtime.descriptors()`); None when the
        call runs outside a runtime. Calls made through it are calls like any other: policies,
        budgets, deadlines and spans apply (their spans are children of this call's)."""
        views = self._views
        return views.view_of(self._scope, self.principal) if views is not None else None

    def add_event(self, name: str, attributes: dict[str, Any]) -> None:
        """Record that `name` happened during the call (an event on its span, for the features
        that hear the calls' events); costs nothing when nobody hears them."""
        observer = self._observer
        if observer is not None:
            observer.event(self, name, attributes)

    @property
    def hears_progress(self) -> bool:
        """Whether a progress report would reach anyone (a handler, or a recording span).

        A tool whose progress costs something to compute (or to ask a server for) may skip it.
        """
        reporter = self._reporter
        if reporter is not None and reporter.on_progress is not None:
            return True
        observer = self._observer
        return observer is not None and observer.hears(self)

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Tell the caller how far the call has got (`progress` of `total`, both any unit).

        Served over MCP, this is a `notifications/progress` for the request's progress token
        (when the client sent one). Reports beyond the rate limit are dropped, except the one
        that reaches `total`.
        """
        bucket = self._progress_bucket
        if bucket is None:
            bucket = self._progress_bucket = _Bucket(PROGRESS_BURST, PROGRESS_RATE)
        final = total is not None and progress >= total
        if not bucket.take() and not final:
            return
        log.debug(
            "tool %r (call %s): progress %s/%s %s",
            self.tool_name,
            self.call_id,
            progress,
            total,
            message or "",
        )
        observer = self._observer
        if observer is not None:
            attributes: dict[str, Any] = {"tool.progress": progress}
            if total is not None:
                attributes["tool.progress.total"] = total
            if message:
                attributes["tool.progress.message"] = message
            if bucket.dropped:
                attributes["tool.progress.dropped"] = bucket.dropped
            observer.event(self, "tool.progress", attributes)
        reporter = self._reporter
        if reporter is not None and reporter.on_progress is not None:
            try:
                await reporter.on_progress(self, progress, total, message)
            except Exception:
                log.exception("the progress handler failed for call %s", self.call_id)

    async def log(self, level: str, message: str, **data: Any) -> None:
        """Log `message` (with `data`) for the caller; `level` is one of `LOG_LEVELS`.

        Locally it is a record of the `runtime.tools.<tool name>` logger and an event on the
        call's span; served over MCP, a `notifications/message` at or above the client's
        `logging/setLevel`. Records beyond the rate limit are dropped.

        Raises:
            ValueError: `level` is not one of `LOG_LEVELS`.
        """
        if level not in _PYTHON_LEVELS:
            raise ValueError(f"log level must be one of {', '.join(LOG_LEVELS)}, not {level!r}")
        bucket = self._log_bucket
        if bucket is None:
            bucket = self._log_bucket = _Bucket(LOG_BURST, LOG_RATE)
        if not bucket.take():
            return
        logging.getLogger(f"runtime.tools.{self.tool_name}").log(
            _PYTHON_LEVELS[level], "%s%s", message, f" {data}" if data else ""
        )
        observer = self._observer
        if observer is not None:
            attributes: dict[str, Any] = {"log.severity": level, "log.message": message}
            if data:
                attributes["log.data"] = msgspec.json.encode(data, enc_hook=str).decode()
            observer.event(self, "tool.log", attributes)
        reporter = self._reporter
        if reporter is not None and reporter.on_log is not None:
            try:
                await reporter.on_log(self, level, message, data)
            except Exception:
                log.exception("the log handler failed for call %s", self.call_id)

    # -- asking back ------------------------------------------------------------------

    @overload
    async def elicit(self, message: str, answer_type: type[T], *, key: str | None = None) -> Elicited[T]: ...
    @overload
    async def elicit(
        self, message: str, answer_type: None = None, *, key: str | None = None
    ) -> Elicited[None]: ...
    @overload
    async def elicit(
        self, message: str, answer_type: dict[str, Any], *, key: str | None = None
    ) -> Elicited[dict[str, Any]]: ...

    async def elicit(self, message: str, answer_type: Any = None, *, key: str | None = None) -> Elicited[Any]:
        """Ask the user: returns `Elicited(action, value)`, `value` decoded into `answer_type`
        when they accept (`answer_type=None`: a plain yes/no, `value` is None; a dict: that
        JSON Schema is asked as it is, and `value` is the answer's dict).

        `answer_type` is a msgspec Struct, dataclass or TypedDict of primitive fields (str,
        int, float, bool, string enums and Literals, lists of those, dates); a field's default
        is offered as the form's default. Served over MCP it is an `elicitation/create`
        request to the client; locally it goes to `open_runtime(on_elicit=...)`.

        Raises:
            CannotAsk: no one can answer (no handler; the MCP client did not announce
                elicitation); uncaught, the call fails UNAVAILABLE saying so.
            ToolRejected: the accepted answer does not fit `answer_type`.
            TypeError: `answer_type` cannot be asked for as a flat form.
        """
        schema: dict[str, Any]
        if isinstance(answer_type, dict):  # a requestedSchema as given: the answer stays a dict
            schema, answer_type = answer_type, dict[str, Any]
        else:
            cached = _schemas.get(answer_type)
            if cached is None:
                cached = _schemas[answer_type] = elicitation_schema(answer_type)
            schema = cached
        question = Elicitation(
            message=message, schema=schema, tool_name=self.tool_name, call_id=self.call_id, key=key
        )
        answer = await self._ask_user(question, "asked the user")
        if answer.action != "accept":
            return Elicited(action=answer.action, reason=answer.reason)
        if answer_type is None:
            return Elicited(action="accept")
        try:
            value = msgspec.convert(answer.content or {}, answer_type, strict=False)
        except msgspec.ValidationError as exc:
            raise ToolRejected(f"the answer to {message!r} does not fit the question: {exc}") from None
        return Elicited(action="accept", value=value)

    async def approve(self, arguments: Any) -> None:
        """Ask whether this call may run (a `requires_approval` tool; the engine calls this).

        Raises:
            ToolRejected: the answer was no (the reason is in the message).
            CannotAsk: no one can answer.
        """
        if not isinstance(arguments, str):
            arguments = msgspec.json.encode(arguments, enc_hook=str).decode()
        shown = arguments if len(arguments) <= _ARGUMENTS_SHOWN else arguments[:_ARGUMENTS_SHOWN] + "..."
        question = Elicitation(
            message=f"Allow the tool {self.tool_name!r} to run with the arguments {shown}?",
            schema={"type": "object", "properties": {}},
            tool_name=self.tool_name,
            call_id=self.call_id,
            approval=True,
            arguments=arguments,
        )
        answer = await self._ask_user(question, "needs approval")
        if answer.action != "accept":
            how = "declined" if answer.action == "decline" else "cancelled"
            because = f": {answer.reason}" if answer.reason else ""
            raise ToolRejected(f"the user {how} running tool {self.tool_name!r}{because}; it did not run")

    async def defer(
        self,
        message: str | None = None,
        *,
        reason: Literal["outside", "approval"] = "outside",
        expires: float | None = None,
    ) -> NoReturn:
        """End this call's turn without a result: it is journaled as a detached call that waits,
        and the caller gets a `ToolPending` now. `reason` "outside": its result comes from
        outside (a browser, a webhook) and the application supplies it
        (`DetachedCall.supply`); "approval": it runs again, from the start, once approved (with
        `ctx.approved` True: do not defer then). `message`: what the model reads (by default,
        that the result comes in a later turn); `expires`: seconds it may wait (default: the
        runtime's `Durable.expires`).

        Never returns (raises `CallDeferred`, which the runtime turns into the call's result).
        A trio (or `loop="any"`) tool of a runtime's own process: not from a placed tool.
        """
        book = getattr(self._views, "durable", None)
        if book is None:
            raise CallDeferred(
                _not_deferred(self, "it is not running in a runtime that keeps deferred calls")
            )
        raise CallDeferred(await book.defer_from_tool(self, reason, message, expires))

    async def background(self) -> None:
        """Go on in the background: for a tool with `task_from="background"` served over MCP to a
        client that takes tasks (SEP-2663), the call becomes its task here. What the tool asked
        before went to the client in the request (input-required rounds); the call then runs
        again from the start as a detached call, its earlier questions answered with the
        client's answers, and this returns at once there. Anywhere else (a plain call, a client
        without tasks, a detached call) it returns at once.

        So the code before it runs once per round and once more in the task: ask there, and do
        side effects after it.
        """
        handler = self._background
        if handler is not None:
            await handler(self)

    async def checkpoint(self, key: str, value: Any) -> bool:
        """Journal where this detached call's work can be picked up again (a remote task's
        id, a job's handle): `value` (JSON) under `key`. If its process dies, the run that
        recovers the call finds it in `ctx.resumed[key]`, and the call is run again even when
        its tool is not idempotent: the tool must then resume from it, not start over. A later
        checkpoint with the same key replaces it.

        Returns False (nothing kept) for a call that is not detached (`ctx.detached_id` None)
        or not run by this process's journal. A trio (or `loop="any"`) tool of the runtime's
        own process.

        Raises:
            StoreError: the journal could not be written.
        """
        book = getattr(self._views, "durable", None)
        if book is None or self.detached_id is None:
            return False
        kept: bool = await book.checkpoint(self, key, value)
        return kept

    async def _ask_user(self, question: Elicitation, what: str) -> Any:
        handler = self._asking.on_elicit if self._asking is not None else None
        if handler is None:
            raise CannotAsk(
                f"it {what} and no one can answer: give open_runtime(on_elicit=...) a handler, or "
                "serve it over MCP to a client that supports elicitation"
            )
        return await _answer(self, handler, question, "elicitation")

    async def sample(
        self,
        messages: str | Sequence[str | SamplingMessage | Mapping[str, Any]],
        *,
        max_tokens: int = 1000,
        system_prompt: str | None = None,
        temperature: float | None = None,
        stop_sequences: Sequence[str] = (),
        model_hints: Sequence[str] = (),
        include_context: Any = None,
        metadata: dict[str, Any] | None = None,
        key: str | None = None,
    ) -> Sampled:
        """Ask the caller's model for a completion: returns `Sampled(text, model, stop_reason)`.

        `messages` is a prompt (one user message), or messages as `SamplingMessage`, dicts
        `{"role": ..., "content": ...}` or strings (user messages). Served over MCP it is a
        `sampling/createMessage` request to the client; locally it goes to
        `open_runtime(on_sample=...)`.

        Raises:
            CannotAsk: no one can answer (no handler; the MCP client did not announce sampling).
        """
        handler = self._asking.on_sample if self._asking is not None else None
        if handler is None:
            raise CannotAsk(
                "it asked for a completion from the caller's model (sampling) and no one can answer: "
                "give open_runtime(on_sample=...) a handler, or serve it over MCP to a client that "
                "supports sampling"
            )
        request = Sampling(
            messages=_sampling_messages(messages),
            max_tokens=max_tokens,
            system_prompt=system_prompt,
            temperature=temperature,
            stop_sequences=tuple(stop_sequences),
            model_hints=tuple(model_hints),
            include_context=include_context,
            metadata=metadata,
            tool_name=self.tool_name,
            call_id=self.call_id,
            key=key,
        )
        result: Sampled = await _answer(self, handler, request, "sampling")
        return result

    async def list_roots(self, *, key: str | None = None) -> list[Root]:
        """The roots (workspace folders, `file://` URIs) the caller offers.

        Served over MCP it is a `roots/list` request to the client; locally it goes to
        `open_runtime(on_roots=...)`.

        Raises:
            CannotAsk: no one can answer (no handler; the MCP client did not announce roots).
        """
        handler = self._asking.on_roots if self._asking is not None else None
        if handler is None:
            raise CannotAsk(
                "it asked for the caller's roots and no one can answer: give "
                "open_runtime(on_roots=...) a handler, or serve it over MCP to a client that "
                "supports roots"
            )
        roots = await _answer(
            self, handler, RootsRequest(tool_name=self.tool_name, call_id=self.call_id, key=key), "roots"
        )
        return list(roots)

    def __repr__(self) -> str:
        return (
            f"CallContext(call_id={self.call_id!r}, tool_name={self.tool_name!r}, "
            f"metadata={self.metadata!r}, deadline={self.deadline!r})"
        )


def _not_deferred(ctx: CallContext, why: str) -> ToolFailure:
    return ToolFailure(
        call_id=ctx.call_id,
        tool=ctx.tool_name,
        kind=FailureKind.UNAVAILABLE,
        message=f"tool {ctx.tool_name!r} could not defer its call: {why}",
    )


def asks_user(ctx: CallContext) -> bool:
    """Whether someone can answer this call's questions now (an `on_elicit` handler, an
    `asking(...)` block, an MCP client)."""
    asker = ctx._asking
    return asker is not None and asker.on_elicit is not None


def durable_of(ctx: CallContext) -> Any:
    """The journal of detached and deferred calls of the runtime the call runs in (engine/_detached's
    `Book`), or None."""
    return getattr(ctx._views, "durable", None)


async def _answer(ctx: CallContext, handler: Any, question: Any, kind: str) -> Any:
    """The handler's answer; a handler that fails is CannotAsk.

    A `ToolUnavailable` from the handler passes as it is: its own CannotAsk, and what ends a
    round of the 2026-07-28 input-required flow (the MCP server's handler raises it when the
    question goes to the client with the round's answer). That is not a CannotAsk, so a tool
    that catches CannotAsk to go on without an answer still stops there, and runs again with
    the answer in the next round: its side effects are done once, after the question, never
    unconfirmed first. Nor is it logged as a failure: it is how the round ends.

    The question and its outcome are an event of the call (`tool.ask`, on its span): what was
    asked and how it ended, never the answer's content (it may be sensitive).
    """
    tool_name = ctx.tool_name
    outcome = "no answer (the call ended first)"
    try:
        answer = await handler(question)
        action = getattr(answer, "action", None)
        outcome = action if isinstance(action, str) else "answered"
        return answer
    except CannotAsk as exc:
        outcome = f"cannot ask: {exc}"
        raise
    except ToolUnavailable as exc:  # the round ends here; the question went out
        outcome = f"asked, answered in the next round ({type(exc).__name__})"
        raise
    except Exception as exc:
        outcome = f"failed: {type(exc).__name__}"
        log.warning("the %s handler failed for tool %r", kind, tool_name, exc_info=True)
        raise CannotAsk(f"it asked ({kind}) and the answer failed: {type(exc).__name__}: {exc}") from exc
    finally:
        observer = ctx._observer
        if observer is not None:
            observer.event(ctx, "tool.ask", {"tool.ask.kind": kind, "tool.ask.outcome": outcome})


def _sampling_messages(
    messages: str | Sequence[str | SamplingMessage | Mapping[str, Any]],
) -> tuple[SamplingMessage, ...]:
    if isinstance(messages, str):
        return (SamplingMessage(role="user", content=messages),)
    out: list[SamplingMessage] = []
    for m in messages:
        if isinstance(m, SamplingMessage):
            out.append(m)
        elif isinstance(m, str):
            out.append(SamplingMessage(role="user", content=m))
        else:
            out.append(msgspec.convert(dict(m), SamplingMessage))
    return tuple(out)


def Description(text: str) -> msgspec.Meta:
    """Describe a parameter to the model: `Annotated[int, Description("page size")]`.

    It is msgspec's own `Meta(description=...)`, so it works on nested Struct fields too.
    """
    return msgspec.Meta(description=text)


def validate(condition: object, message: str) -> None:
    """Refuse the input (REJECTED, `message` shown to the model) unless `condition` holds."""
    if not condition:
        raise ToolRejected(message)


def fail(message: str) -> NoReturn:
    """Refuse the input (REJECTED, `message` shown to the model)."""
    raise ToolRejected(message)


def check_tool_name(name: object) -> str:
    """Return `name` if every provider accepts it as a tool name.

    Raises:
        ValueError: the name is not `^[a-zA-Z0-9_-]{1,64}$`, or it is the reserved `__terminate__`.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):  # `$` would let a trailing "\n" through
        raise ValueError(
            f"tool name {name!r} is not accepted by every provider: use 1-64 characters "
            "from a-z, A-Z, 0-9, '_' and '-'"
        )
    if name == TERMINATE_TOOL:
        raise ValueError(f"tool name {TERMINATE_TOOL!r} is reserved for ending an agent loop")
    return name
