"""Tools and OpenTelemetry helpers shared by tests/test_integrations_*.py.

The tools cover what every framework test drives: two calls that must overlap (parallel),
a tool that raises, one that refuses its input, one that times out, and one to hide.
"""

from __future__ import annotations

from collections.abc import Iterable

import trio
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runtime import ToolRejected, tool
from runtime.tracing import Tracing

EVENTS: list[str] = []


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
async def overlap(label: str) -> str:
    """Start, wait a little, end: two calls run in parallel when both start before either ends."""
    EVENTS.append(f"start {label}")
    await trio.sleep(0.05)
    EVENTS.append(f"end {label}")
    return f"done {label}"


@tool
async def boom() -> str:
    """Always crashes."""
    raise ValueError("the backend is on fire")


@tool
def positive(n: int) -> int:
    """Accept only positive numbers (a sync tool: it runs in a worker thread)."""
    if n <= 0:
        raise ToolRejected(f"n must be positive, got {n}")
    return n


@tool(timeout=0.05)
async def sleepy() -> str:
    """Never answers within its 50 ms timeout."""
    await trio.sleep(10)
    return "never"


@tool
async def secret() -> str:
    """A tool the adapters hide."""
    EVENTS.append("secret ran")
    return "the launch codes"


TOOLS = [add, overlap, boom, positive, sleepy, secret]


def ran_in_parallel(*labels: str) -> bool:
    """Every call started before any of them ended."""
    starts = [EVENTS.index(f"start {label}") for label in labels]
    ends = [EVENTS.index(f"end {label}") for label in labels]
    return max(starts) < min(ends)


class Otel:
    """A real OpenTelemetry SDK with an in-memory exporter, and the runtime's Tracing on it."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def tracing(self) -> Tracing:
        return Tracing(tracer_provider=self.provider)

    @property
    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans if s.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, f"{len(found)} spans named {name!r}: {[s.name for s in self.spans]}"
        return found[0]

    def parent_of(self, span: ReadableSpan) -> ReadableSpan:
        assert span.parent is not None, f"{span.name} is a root span"
        for candidate in self.spans:
            if candidate.context.span_id == span.parent.span_id:
                return candidate
        raise AssertionError(f"the parent of {span.name} was not exported")

    def ancestors(self, span: ReadableSpan) -> list[str]:
        """The names of the span's parents, nearest first."""
        names = []
        while span.parent is not None:
            span = self.parent_of(span)
            names.append(span.name)
        return names

    def ours(self) -> list[ReadableSpan]:
        """The runtime's spans (scope tool-runtime)."""
        return [
            s
            for s in self.spans
            if s.instrumentation_scope and s.instrumentation_scope.name == "tool-runtime"
        ]


def names(spans: Iterable[ReadableSpan]) -> list[str]:
    return sorted(s.name for s in spans)
