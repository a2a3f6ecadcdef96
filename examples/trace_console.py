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
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runtime import ToolCall, open_runtime, tool
from runtime.demo import span_tree

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
    print(span_tree(memory.get_finished_spans()))


if __name__ == "__main__":
    trio.run(main)
