"""OpenTelemetry for tool calls: one span per call and two metrics, as a Feature.

Spans follow the GenAI semantic conventions: `execute_tool {tool name}`, kind INTERNAL,
`gen_ai.*` attributes, status ERROR and `error.type` on failure. The parent is the W3C
`traceparent` in the call's metadata when there is one, else the caller's current context;
the calls of one `call_many` are siblings. A detached call's run (`rt.detach`, an approved
deferred call) outlives its starter's span: its span starts a trace of its own and links to
the starter's (`LINK` in its metadata). A call that ends its turn pending ends its span with
the outcome "pending" and the detached call's id. While the tool's code runs, its span is the
current span (in the actor's task, and in the worker thread of a sync tool), so spans the
tool makes are its children.

The attribute names are defined here: the semconv package marks its GenAI names deprecated.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import Any, Final

import msgspec
from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.metrics import _internal as _metrics_api
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from .features import Feature
from .messages import ToolCall, ToolFailure, ToolPending, ToolResult, ToolSuccess
from .tools import CallContext

__all__ = [
    "CALL_ABANDONED",
    "DETACHED_ID",
    "LINK",
    "CALL_DURATION_METRIC",
    "CALLS_IN_FLIGHT_METRIC",
    "ERROR_TYPE",
    "GEN_AI_OPERATION_NAME",
    "GEN_AI_TOOL_CALL_ARGUMENTS",
    "GEN_AI_TOOL_CALL_ID",
    "GEN_AI_TOOL_CALL_RESULT",
    "GEN_AI_TOOL_DESCRIPTION",
    "GEN_AI_TOOL_NAME",
    "GEN_AI_TOOL_TYPE",
    "OUTCOME",
    "PRINCIPAL",
    "RESULT_TYPE_MISMATCH",
    "Tracing",
    "current_traceparent",
]

GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
GEN_AI_TOOL_DESCRIPTION: Final = "gen_ai.tool.description"
GEN_AI_TOOL_TYPE: Final = "gen_ai.tool.type"
GEN_AI_TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"
ERROR_TYPE: Final = "error.type"
OUTCOME: Final = "tool_runtime.outcome"
"""Metric attribute: "success", or the FailureKind value."""
PRINCIPAL: Final = "tool_runtime.principal"
"""Span attribute: who the call ran for (a principal id, never a credential)."""
CALL_ABANDONED: Final = "tool_runtime.call.abandoned"
"""Span attribute: the call was answered while its work could not be stopped (it runs on, abandoned)."""
RESULT_TYPE_MISMATCH: Final = "tool_runtime.result.type_mismatch"
"""Span attribute: why the result is not of the tool's declared result type (the model read it as returned)."""

LINK: Final = "tool_runtime.link"
"""Metadata key: a W3C traceparent the call's span links to (a detached call's starter)."""
DETACHED_ID: Final = "tool_runtime.detached.id"
"""Span attribute: the detached call a pending call became."""

CALL_DURATION_METRIC: Final = "tool_runtime.tool.call.duration"
CALLS_IN_FLIGHT_METRIC: Final = "tool_runtime.tool.calls.in_flight"

EXECUTE_TOOL: Final = "execute_tool"
_SCOPE: Final = "tool-runtime"
_W3C = TraceContextTextMapPropagator()


class Tracing(Feature):
    """Spans and metrics for every tool call.

    Args:
        tracer_provider: where spans go (default: the global provider).
        meter_provider: where metrics go (default: the global provider).
        record_arguments: put the call's arguments on the span (they may be sensitive).
        record_results: put the result text on the span (it may be sensitive).

    With neither provider given and no SDK configured globally when the runtime opens, the
    feature stays off, so untraced users pay next to nothing for it (one check per call);
    from the first call after a global provider is set (`trace.set_tracer_provider`, or the
    meter provider), it is on: a provider configured after the runtime opened still gets spans.
    """

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        *,
        record_arguments: bool = False,
        record_results: bool = False,
    ) -> None:
        self._tracer_provider = tracer_provider
        self._meter_provider = meter_provider
        self.record_arguments = record_arguments
        self.record_results = record_results
        self._tracer = trace.get_tracer(_SCOPE, tracer_provider=tracer_provider)
        meter = metrics.get_meter(_SCOPE, meter_provider=meter_provider)
        self._duration = meter.create_histogram(
            CALL_DURATION_METRIC, unit="s", description="Duration of tool calls, queueing included"
        )
        self._in_flight = meter.create_up_down_counter(
            CALLS_IN_FLIGHT_METRIC, unit="{call}", description="Tool calls started and not yet answered"
        )
        self._calls: dict[CallContext, tuple[trace.Span, float]] = {}
        self._static: dict[Any, dict[str, Any]] = {}

    @property
    def rechecks_enabled(self) -> bool:  # type: ignore[override]
        return self._tracer_provider is None and self._meter_provider is None

    @property
    def enabled(self) -> bool:
        if self._tracer_provider is not None or self._meter_provider is not None:
            return True
        # The common untraced case, checked before every call while dormant, so it reads the
        # API's module globals (a tenth of a microsecond): neither global provider set yet.
        # `get_tracer_provider()` looks at the environment each time (microseconds). Where
        # those globals are missing (another API version), the public functions decide. A
        # provider named in the environment (OTEL_PYTHON_TRACER_PROVIDER) is loaded by the
        # first `get_tracer_provider()`, which `Tracing()` itself makes, so it is never missed.
        if (
            getattr(trace, "_TRACER_PROVIDER", False) is None
            and getattr(_metrics_api, "_METER_PROVIDER", False) is None
        ):
            return False
        return _configured(trace.get_tracer_provider()) or _configured(metrics.get_meter_provider())

    # -- hooks -----------------------------------------------------------------------

    async def on_call_starting(self, call: ToolCall, ctx: CallContext) -> None:
        tool = ctx.tool
        static = self._static.get(tool) if tool is not None else None
        if static is None:
            static = self._static_attributes(call.name, tool)
        attributes = {**static, GEN_AI_TOOL_CALL_ID: call.id}
        principal = ctx.principal
        if principal is not None:
            attributes[PRINCIPAL] = principal
        if self.record_arguments:
            arguments = call.arguments
            attributes[GEN_AI_TOOL_CALL_ARGUMENTS] = (
                arguments if isinstance(arguments, str) else _json(arguments)
            )
        metadata = ctx.metadata
        parent = _parent(metadata)
        links = None
        if LINK in metadata:  # a detached call's run: a trace of its own, linked to its starter's
            linked = _span_context(metadata[LINK])
            if linked is not None:
                links = [Link(linked)]
                if parent is None:
                    parent = otel_context.Context()
        span = self._tracer.start_span(
            f"{EXECUTE_TOOL} {call.name}",
            context=parent,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            links=links,
        )
        self._calls[ctx] = (span, time.perf_counter())
        self._in_flight.add(1, {GEN_AI_TOOL_NAME: call.name})

    async def on_call_completed(self, call: ToolCall, result: ToolSuccess[Any], ctx: CallContext) -> None:
        self._end(call, result, ctx)

    async def on_call_failed(self, call: ToolCall, failure: ToolFailure, ctx: CallContext) -> None:
        self._end(call, failure, ctx)

    async def on_call_deferred(self, call: ToolCall, pending: ToolPending, ctx: CallContext) -> None:
        self._end(call, pending, ctx)

    def around_call(self, ctx: CallContext) -> contextlib.AbstractContextManager[None] | None:
        entry = self._calls.get(ctx)
        if entry is None:
            return None
        return _Current(entry[0])

    def on_call_event(self, ctx: CallContext, name: str, attributes: dict[str, Any]) -> None:
        entry = self._calls.get(ctx)
        if entry is not None:
            entry[0].add_event(name, attributes)

    def hears_call_events(self, ctx: CallContext) -> bool:
        entry = self._calls.get(ctx)
        return entry is not None and entry[0].is_recording()

    def on_supervisor_event(self, tool_name: str, event: str, reason: str) -> None:
        with self._tracer.start_as_current_span(
            f"supervise {tool_name}",
            kind=SpanKind.INTERNAL,
            attributes={GEN_AI_TOOL_NAME: tool_name, "tool_runtime.supervisor.event": event},
        ) as span:
            span.add_event(event, {"reason": reason})
            if event == "down":
                span.set_status(Status(StatusCode.ERROR, reason))

    # -- internals -------------------------------------------------------------------

    def _static_attributes(self, name: str, tool: Any) -> dict[str, Any]:
        """The attributes every span of this tool shares (cached per tool object)."""
        attributes: dict[str, Any] = {GEN_AI_OPERATION_NAME: EXECUTE_TOOL, GEN_AI_TOOL_NAME: name}
        if tool is not None:
            attributes[GEN_AI_TOOL_TYPE] = tool.tool_type
            if tool.descriptor.description:
                attributes[GEN_AI_TOOL_DESCRIPTION] = tool.descriptor.description
            if len(self._static) > 4096:  # tools come and go (MCP): keep the cache bounded
                self._static.clear()
            self._static[tool] = attributes
        return attributes

    def _end(self, call: ToolCall, result: ToolResult, ctx: CallContext) -> None:
        entry = self._calls.pop(ctx, None)
        if entry is None:
            return
        span, started = entry
        attributes: dict[str, Any] = {GEN_AI_TOOL_NAME: call.name}
        if isinstance(result, ToolFailure):
            error_type = result.error_type or result.kind.value
            attributes[OUTCOME] = result.kind.value
            attributes[ERROR_TYPE] = error_type
            span.set_attribute(ERROR_TYPE, error_type)
            if ctx.error is not None:
                span.record_exception(ctx.error)
            if ctx.abandoned:  # answered while its code ran on (it ignored cancellation, a stuck thread)
                span.set_attribute(CALL_ABANDONED, True)
            span.set_status(Status(StatusCode.ERROR, result.message))
        elif isinstance(result, ToolPending):
            attributes[OUTCOME] = "pending"
            span.set_attribute(OUTCOME, "pending")
            span.set_attribute(DETACHED_ID, result.detached_id)
        else:
            attributes[OUTCOME] = "success"
            if result.type_mismatch is not None:
                span.set_attribute(RESULT_TYPE_MISMATCH, result.type_mismatch)
            if self.record_results:
                span.set_attribute(GEN_AI_TOOL_CALL_RESULT, result.content)
        span.end()
        self._in_flight.add(-1, {GEN_AI_TOOL_NAME: call.name})
        self._duration.record(time.perf_counter() - started, attributes)


def _parent(metadata: Mapping[str, Any]) -> otel_context.Context | None:
    """The caller's trace context from W3C headers in the metadata, else None (the current one)."""
    if "traceparent" not in metadata:
        return None
    carrier = {"traceparent": str(metadata["traceparent"])}
    if "tracestate" in metadata:
        carrier["tracestate"] = str(metadata["tracestate"])
    return _W3C.extract(carrier)


def _span_context(traceparent: Any) -> trace.SpanContext | None:
    """The span context a W3C traceparent names (None if it names none)."""
    found = trace.get_current_span(_W3C.extract({"traceparent": str(traceparent)})).get_span_context()
    return found if found.is_valid else None


def current_traceparent() -> str | None:
    """The current span as a W3C traceparent, if there is a valid one (what a detached call's
    span links to)."""
    span = trace.get_current_span()
    if not span.get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get("traceparent")


class _Current:
    """Makes `span` the current span in the task (and thread) that enters it."""

    __slots__ = ("_span", "_token")

    def __init__(self, span: trace.Span) -> None:
        self._span = span

    def __enter__(self) -> None:
        self._token = otel_context.attach(trace.set_span_in_context(self._span))

    def __exit__(self, *exc_info: object) -> None:
        otel_context.detach(self._token)


def _json(value: Any) -> str:
    return msgspec.json.encode(value).decode()


def _configured(provider: object) -> bool:
    """False for the API's placeholder providers (no SDK installed or configured)."""
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider | metrics.NoOpMeterProvider):
        return False
    return type(provider).__name__ != "_ProxyMeterProvider"  # the API's global placeholder
