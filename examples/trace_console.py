"""One parallel tool turn, traced with OpenTelemetry's console exporter, then drawn as a tree.

    .venv/bin/python examples/trace_console.py            # span JSON + the tree
    .venv/bin/python examples/trace_console.py --tree     # just the tree

The agent's turn span is the parent; each tool call is an `execute_tool {name}` sibling
under it; what a tool traces itself nests under its own call.
"""

from __future__ import annotations

import sys

import trio
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runtime import ToolCall, open_runtime, tool

provider = TracerProvider()
memory = InMemorySpanExporter()
provider.add_span_processor(SimpleSpanProcessor(memory))
if "--tree" not in sys.argv:
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
trace.set_tracer_provider(provider)
tracer = trace.get_tracer("example.agent")


@tool
async def get_weather(city: str) -> str:
    """Current weather for a city."""
    with tracer.start_as_current_span("weather api"):
        await trio.sleep(0.02)
    return f"sunny in {city}"


@tool
async def search_docs(query: str, limit: int = 2) -> list[str]:
    """Search the documentation."""
    await trio.sleep(0.01)
    return [f"{query} #{i}" for i in range(limit)]


def draw(spans: list[ReadableSpan]) -> str:
    children: dict[int | None, list[ReadableSpan]] = {}
    ids = {s.context.span_id for s in spans if s.context is not None}
    for s in spans:
        parent = s.parent.span_id if s.parent is not None and s.parent.span_id in ids else None
        children.setdefault(parent, []).append(s)
    lines: list[str] = []

    def walk(parent: int | None, depth: int) -> None:
        for s in sorted(children.get(parent, []), key=lambda s: s.start_time or 0):
            ms = ((s.end_time or 0) - (s.start_time or 0)) / 1e6
            status = " ERROR" if s.status.status_code.name == "ERROR" else ""
            lines.append(f"{'  ' * depth}{s.name}  {ms:.1f} ms{status}")
            if s.context is not None:
                walk(s.context.span_id, depth + 1)

    walk(None, 0)
    return "\n".join(lines)


async def main() -> None:
    calls = [
        ToolCall(id="1", name="get_weather", arguments='{"city": "Paris"}'),
        ToolCall(id="2", name="search_docs", arguments='{"query": "trio"}'),
        ToolCall(id="3", name="get_wether", arguments='{"city": "Oslo"}'),
    ]
    async with open_runtime([get_weather, search_docs]) as rt:  # tracing=True: the global provider
        with tracer.start_as_current_span("agent turn"):
            for result in await rt.call_many(calls):
                print(f"{result.call_id}: {result.content}", file=sys.stderr)
    print(draw(list(memory.get_finished_spans())))


if __name__ == "__main__":
    trio.run(main)
