"""Where a placed tool actually runs: in a worker process or a Ray replica.

`ToolHost` imports the tool by reference, runs its lifecycle, and serves one `Request` at a
time: decode the arguments with the tool's own codec, give it a plain `CallContext` (call
id, tool name, metadata, deadline), make the runtime's span the current one, run it, and
build the reply: the `ToolSuccess` the engine would have built, or the exception boxed.
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from opentelemetry import context as otel_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ..exceptions import InvalidArguments, ResultTypeError, ToolOverloaded, ToolRejected, ToolUnavailable
from ..messages import ToolCallMetadata, ToolSuccess
from ..tools import LOG_LEVELS, CallContext, ToolBase
from ..tools.lowlevel import reraise_own_cancellation
from ._protocol import Done, Load, LogRecord, Progress, Raised, Reply, encode, encode_request
from ._reference import resolve

__all__ = ["RemoteContext", "ToolHost", "box", "rss_mb"]

log = logging.getLogger("runtime.placement")

_W3C = TraceContextTextMapPropagator()
_PLAIN = frozenset({int, float, str, bool, type(None), dict, list, tuple, bytes})  # never awaitable
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_mb() -> float:
    """This process's resident set size now, in MiB (Linux: /proc/self/statm)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE / (1 << 20)
    except OSError:  # not Linux: the peak instead of the current size
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _qualified(exc: BaseException) -> str:
    cls = type(exc)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def box(exc: BaseException, restart_on: tuple[type[BaseException], ...] = ()) -> Raised:
    """An exception as a `Raised` message (its traceback goes to stderr, i.e. the runtime's log)."""
    if isinstance(exc, ToolRejected):
        return Raised(category="rejected", error_type=_qualified(exc), message=exc.message)
    if isinstance(exc, InvalidArguments):
        return Raised(category="invalid", error_type=_qualified(exc), message=exc.expected, path=exc.path)
    if isinstance(exc, ToolUnavailable):
        return Raised(category="unavailable", error_type=_qualified(exc), message=exc.reason)
    if isinstance(exc, ToolOverloaded):
        return Raised(category="overloaded", error_type=_qualified(exc), message=exc.reason)
    try:
        text = str(exc)
    except Exception:
        text = ""
    if isinstance(exc, MemoryError):
        return Raised(category="memory", error_type="MemoryError", message=text, retire=True)
    traceback.print_exception(exc, file=sys.stderr)
    restart = bool(restart_on) and isinstance(exc, restart_on)
    return Raised(category="error", error_type=_qualified(exc), message=text, restart=restart)


Sender = Callable[[bytes], Awaitable[None]]


class RemoteContext(CallContext):
    """The `CallContext` of a call served in a worker: a plain copy of the caller's, whose
    `report_progress` and `log` travel back to the runtime as messages (where the caller's
    handlers, the rate limits and the call's span take them, as for an in-process call)."""

    __slots__ = ("_hears", "_send")

    def __init__(self, *args: Any, send: Sender | None, hears_progress: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._send = send
        self._hears = hears_progress

    @property
    def hears_progress(self) -> bool:
        return self._hears if self._send is not None else super().hears_progress

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        if self._send is None:
            return await super().report_progress(progress, total, message)
        await self._send(
            encode(
                Progress(
                    progress=float(progress), total=None if total is None else float(total), message=message
                )
            )
        )

    async def log(self, level: str, message: str, **data: Any) -> None:
        if self._send is None:
            return await super().log(level, message, **data)
        if level not in LOG_LEVELS:
            raise ValueError(f"log level must be one of {', '.join(LOG_LEVELS)}, not {level!r}")
        await self._send(encode_request(LogRecord(level=level, message=str(message), data=data)))


class ToolHost:
    """One placed tool in the process that runs it.

    Attributes:
        send: where `RemoteContext` sends progress and log messages (None: they stay local).
    """

    def __init__(self, load: Load, clock: Callable[[], float] | None = None) -> None:
        self.tool: ToolBase[Any, Any] = resolve(load.ref, load.name, load.main)
        self.name = load.name
        self.restart_on = self.tool.options.restart_on
        self.max_rss_mb = load.max_rss_mb
        self.is_async = self.tool.is_async
        self._clock = clock
        self.send: Sender | None = None
        cls = type(self.tool)
        self._parts = cls.result_to_parts is not ToolBase.result_to_parts
        self._present = self.tool.result_presenter()  # value -> (text, ToolSuccess.value), checked

    async def setup(self) -> None:
        await self.tool.setup()

    async def teardown(self) -> None:
        await self.tool.teardown()

    def begin(self, request: Any) -> tuple[Any, CallContext | None, object]:
        """Decode the request's arguments, build its context and enter its trace context.

        Returns:
            (args, ctx, token): pass `token` to `end`.
        """
        token: object = None
        if request.traceparent is not None:
            carrier = {"traceparent": request.traceparent}
            if request.tracestate:
                carrier["tracestate"] = request.tracestate
            token = otel_context.attach(_W3C.extract(carrier))
        try:
            args = self.tool.decode_args(request.arguments)
            ctx = None
            if self.tool.takes_context:
                deadline = None
                if request.timeout is not None and self._clock is not None:
                    deadline = self._clock() + request.timeout
                ctx = RemoteContext(
                    request.call_id,
                    self.name,
                    ToolCallMetadata(request.metadata),
                    deadline,
                    self.tool,
                    send=self.send,
                    hears_progress=request.hears_progress,
                )
        except BaseException:
            self.end(token)
            raise
        return args, ctx, token

    def end(self, token: object) -> None:
        if token is not None:
            otel_context.detach(token)  # type: ignore[arg-type]

    def done(self, call_id: str, value: Any) -> Reply:
        """The reply for a call that returned `value`."""
        tool = self.tool
        mismatch: str | None = None
        try:
            try:
                text, shown = self._present(value)
            except ResultTypeError as exc:
                if exc.returned is None:  # strict: the call fails
                    raise
                (text, shown), mismatch = exc.returned, str(exc)  # the parent counts and warns
            parts = tuple(tool.result_to_parts(value)) if self._parts else ()
            value = shown
        except Exception as exc:
            return Raised(
                category="error",
                error_type=_qualified(exc),
                message=str(exc)
                if isinstance(exc, ResultTypeError)
                else f"the result could not be encoded: {exc}",
            )
        retire = self.max_rss_mb is not None and rss_mb() > self.max_rss_mb
        return Done(
            result=ToolSuccess(
                call_id=call_id,
                tool=self.name,
                content=text,
                value=value,
                parts=parts,
                type_mismatch=mismatch,
            ),
            retire=retire,
        )

    def raised(self, exc: BaseException) -> Raised:
        reply = box(exc, self.restart_on)
        if not reply.retire and self.max_rss_mb is not None and rss_mb() > self.max_rss_mb:
            reply = msgspec.structs.replace(reply, retire=True)
        return reply

    def serve_sync(self, request: Any) -> Reply:
        """Serve a call of a sync tool on this thread."""
        try:
            args, ctx, token = self.begin(request)
        except BaseException as exc:
            return self.raised(exc)
        try:
            value = self.tool.dispatch(args, ctx)
            if type(value) not in _PLAIN and inspect.isawaitable(value):  # an async tool here: a bug of ours
                raise TypeError(f"tool {self.name!r} returned an awaitable on the sync path")
        except BaseException as exc:
            return self.raised(exc)
        finally:
            self.end(token)
        return self.done(request.call_id, value)

    async def serve(self, request: Any) -> Reply:
        """Serve a call (an async tool is awaited here; a sync one runs on this thread)."""
        if not self.is_async:
            return self.serve_sync(request)
        try:
            args, ctx, token = self.begin(request)
        except BaseException as exc:
            return self.raised(exc)
        try:
            value = await self.tool.dispatch(args, ctx)
        except BaseException as exc:
            await reraise_own_cancellation(exc)  # the worker's own (its call was cancelled) goes on
            return self.raised(exc)
        finally:
            self.end(token)
        return self.done(request.call_id, value)
