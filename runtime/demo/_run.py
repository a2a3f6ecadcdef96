"""`make demo`: one scripted model turn with parallel tool calls, failures included, offline.

A model (scripted here: no network) answers with seven parallel tool calls in OpenAI's
format. The runtime runs them concurrently, each as a call to a supervised tool actor, and
traces them with the OpenTelemetry SDK. The demo prints what the model is told about the
tools, a table of results (what goes back to the model) and the span tree.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Literal

import trio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ..engine import open_runtime
from ..providers import openai
from ..registry import ToolRegistry
from ..tools import Description, tool, validate
from ..tracing import Tracing
from ._tree import span_tree

__all__ = ["demo_registry", "run_demo", "scripted_turn"]


@tool
def get_weather(
    city: Annotated[str, Description("City name, e.g. 'Paris'")],
    unit: Literal["celsius", "fahrenheit"] = "celsius",
) -> dict[str, object]:
    """Current weather for a city."""
    temperature = 21 if unit == "celsius" else 70
    return {"city": city, "temperature": temperature, "unit": unit}


@tool
async def search_docs(query: str, limit: int = 3) -> list[str]:
    """Search the documentation.

    Args:
        query: words to look for.
        limit: how many hits to return.
    """
    await trio.sleep(0.01)
    return [f"{query}: result {i + 1}" for i in range(limit)]


@tool
def convert_currency(amount: float, source: str, target: str) -> float:
    """Convert an amount between two currencies (ISO codes)."""
    validate(source != target, f"source and target are both {source}; pick two different currencies")
    return round(amount * 1.08, 2)


@tool
async def check_inventory(sku: str) -> int:
    """Units in stock for a product."""
    raise ConnectionError("inventory service refused the connection")


@tool(timeout=0.2)
async def quarterly_report(topic: str) -> str:
    """Write a long report (slow: it will not finish within its 0.2 s timeout)."""
    await trio.sleep(5)
    return f"report on {topic}"


def demo_registry() -> ToolRegistry:
    """The demo's tools."""
    return ToolRegistry([get_weather, search_docs, convert_currency, check_inventory, quarterly_report])


def scripted_turn() -> dict[str, object]:
    """The assistant message a model might send: seven parallel tool calls, in OpenAI's shape."""

    def call(id: str, name: str, arguments: dict[str, object] | str) -> dict[str, object]:
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        return {"id": id, "type": "function", "function": {"name": name, "arguments": text}}

    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            call("call_1", "get_weather", {"city": "Paris"}),
            call("call_2", "search_docs", {"query": "supervision", "limit": 2}),
            call("call_3", "convert_currency", {"amount": 20, "source": "EUR", "target": "EUR"}),
            call("call_4", "get_wether", {"city": "Oslo"}),
            call("call_5", "search_docs", {"query": "timeouts", "limit": "ten"}),
            call("call_6", "check_inventory", {"sku": "A-42"}),
            call("call_7", "quarterly_report", {"topic": "latency"}),
        ],
    }


def _table(rows: list[tuple[str, str, str, str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    out = []
    for i, row in enumerate(rows):
        out.append("  ".join(cell.ljust(widths[j]) for j, cell in enumerate(row[:3])) + "  " + row[3])
        if i == 0:
            out.append("  ".join("-" * w for w in widths) + "  " + "-" * 7)
    return "\n".join(out)


async def _main() -> None:
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("demo.agent")
    registry = demo_registry()

    print("Tools, as the model is told about them (OpenAI strict mode):")
    for schema in registry.schemas("openai", strict=True):
        function = schema["function"]
        print(
            f"  {function['name']}({', '.join(function['parameters']['properties'])}): {function['description']}"
        )

    message = scripted_turn()
    calls = openai.calls_from_message(message)
    print(f"\nThe model asks for {len(calls)} tool calls at once; they run in parallel.\n")
    async with open_runtime(registry, tracing=Tracing(tracer_provider=provider)) as rt:
        with tracer.start_as_current_span("agent turn"):
            results = await rt.call_many(calls)
        stats = rt.statistics()

    rows = [("call", "tool", "outcome", "what the model reads")]
    for call, result in zip(calls, results, strict=True):
        outcome = "ok" if result.ok else getattr(result, "kind", "pending")
        text = result.content if len(result.content) <= 90 else result.content[:87] + "..."
        rows.append((call.id, call.name, outcome, text))
    print(_table(rows))
    replies = openai.result_messages(results)
    print(f"\n{len(replies)} tool messages go back to the model, in call order.")
    print(f"Calls per tool: { {name: t.calls for name, t in stats.tools.items()} }")
    print("\nSpans (OpenTelemetry SDK, in-memory exporter):")
    print(span_tree(exporter.get_finished_spans()))


def run_demo() -> int:
    """Run the demo; returns the exit status."""
    trio.run(_main)
    sys.stdout.flush()
    return 0
