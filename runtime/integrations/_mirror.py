"""A framework's own trace, mirrored as OpenTelemetry spans, so the runtime's spans nest in it.

openai-agents traces with its own spans (a `TracingProcessor` sees them start and end) and
LangChain with its run tree (a callback handler sees each run start and end); neither makes an
OpenTelemetry span current while a tool runs. A `SpanMirror` turns those events into OTel spans
keyed by the framework's ids (span id, run id) and parented the way the framework parents them
(the root under whatever OTel span is current when it starts). While a tool of ours runs, the
adapter looks up the mirrored span of the framework's span around it (`parent_context`) and
makes it the current context of the call, so the runtime's `execute_tool` span is its child.

With no mirror, or when a framework span was not mirrored, the call keeps the caller's current
OTel context (a span the application opened around the agent run, say): nothing changes.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Hashable, Iterator, Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider
from opentelemetry.util.types import AttributeValue

__all__ = ["SpanMirror"]

_MIRRORS: weakref.WeakSet[SpanMirror] = weakref.WeakSet()


class SpanMirror:
    """OTel spans standing for a framework's spans, by the framework's key for each.

    Args:
        scope: the instrumentation scope name of the mirrored spans.
        tracer_provider: where they go (default: the global provider).
    """

    def __init__(self, scope: str, tracer_provider: TracerProvider | None = None) -> None:
        self._tracer = trace.get_tracer(scope, tracer_provider=tracer_provider)
        self._spans: dict[Hashable, Span] = {}
        self._aliases: dict[Hashable, Hashable | None] = {}  # framework spans not mirrored -> their parent
        self._lock = threading.Lock()  # the frameworks may report from worker threads
        _MIRRORS.add(self)

    def start(
        self,
        key: Hashable,
        parent: Hashable | None,
        name: str,
        attributes: Mapping[str, AttributeValue] | None = None,
    ) -> None:
        """A framework span began: mirror it under its parent's mirror, or under the current context."""
        with self._lock:
            parent_span = self._find(parent)
        context = trace.set_span_in_context(parent_span) if parent_span is not None else None
        span = self._tracer.start_span(name, context=context, kind=SpanKind.INTERNAL, attributes=attributes)
        with self._lock:
            self._spans[key] = span

    def alias(self, key: Hashable, parent: Hashable | None) -> None:
        """A framework span began that is not mirrored: its children go under its parent's mirror."""
        with self._lock:
            self._aliases[key] = parent

    def end(
        self,
        key: Hashable,
        *,
        error: str | None = None,
        attributes: Mapping[str, AttributeValue] | None = None,
    ) -> None:
        """A framework span ended (with `error`, if it failed); its mirror ends too."""
        with self._lock:
            self._aliases.pop(key, None)
            span = self._spans.pop(key, None)
        if span is None:
            return
        if attributes:
            span.set_attributes(attributes)
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end()

    def span(self, key: Hashable) -> Span | None:
        """The mirror of the framework span `key` (or of its nearest mirrored parent), while it runs."""
        with self._lock:
            return self._find(key)

    def _find(self, key: Hashable | None) -> Span | None:
        for _ in range(64):  # aliases form chains, not cycles; the bound only guards a framework bug
            if key is None:
                return None
            span = self._spans.get(key)
            if span is not None or key not in self._aliases:
                return span
            key = self._aliases[key]
        return None

    def close(self) -> None:
        """End every mirrored span still open (the framework will not report them any more)."""
        with self._lock:
            spans, self._spans = list(self._spans.values()), {}
            self._aliases.clear()
        for span in spans:
            span.end()


def mirrored(key: Hashable | None) -> Span | None:
    """The mirror of framework span `key` in any live `SpanMirror`, or None."""
    if key is None:
        return None
    for mirror in list(_MIRRORS):
        span = mirror.span(key)
        if span is not None:
            return span
    return None


@contextlib.contextmanager
def parent_context(key: Hashable | None) -> Iterator[None]:
    """Make the mirror of framework span `key` the current OTel span, if there is one."""
    span = mirrored(key)
    if span is None:
        yield
        return
    token = otel_context.attach(trace.set_span_in_context(span))
    try:
        yield
    finally:
        otel_context.detach(token)


def attributes_of(items: Mapping[str, Any]) -> dict[str, AttributeValue]:
    """The items fit to be span attributes (str, bool, int, float), others dropped."""
    return {k: v for k, v in items.items() if isinstance(v, str | bool | int | float)}
