"""A runtime's tools as openai-agents `FunctionTool`s (the `openai-agents` extra).

    async with open_asyncio_runtime(registry) as rt:
        agent = Agent(name="assistant", tools=function_tools(rt, exclude={"drop_table"}))
        result = await Runner.run(agent, "...")

Each tool's `on_invoke_tool` sends the model's JSON arguments, as the model wrote them, to the
runtime (`rt.call`), which decodes and validates them, runs the tool and answers with one result.
The parameters are the runtime's "openai" dialect, strict by default like `FunctionTool`'s own
(`strict_json_schema` follows it: a tool strict mode cannot describe is sent non-strict).

Failures: a tool never raises into the SDK. A `ToolFailure` becomes the text the model reads, the
way the SDK's `failure_error_function` makes one: by default the failure's own text ("Error:
tool 'x' timed out after 5s"); pass `failure_error_function=` to say something else (it gets a
`ToolCallFailed` carrying the `ToolFailure`). As the SDK does for a tool error it handled, the
failure is set on the SDK's `function` span (`SpanError`, with the failure kind), so its traces
show the call failed.

Spans: the runtime's `execute_tool` span is a child of the OpenTelemetry context current when
the SDK invokes the tool (an application span around `Runner.run`, for instance). The SDK's own
traces are not OpenTelemetry; with `OpenTelemetryTracingProcessor` registered
(`agents.add_trace_processor(...)`) they are mirrored as OTel spans (trace -> agent -> function),
and the runtime's `execute_tool` span nests under the mirror of the SDK's `function` span.

Tool search: with `search=ToolSearch(threshold=N, always=[...])`, past N tools the agent is
offered a `search_tools` tool and the always-loaded ones; the tools a search finds are enabled
(`FunctionTool.is_enabled`) from the agent's next turn on. What the list's searches found is
the list's: make one list per conversation (`Agent.clone(tools=function_tools(...))`). The
SDK's hosted `ToolSearchTool` is OpenAI's server-side search; this one is the runtime's, on any
model the SDK drives.

`runtime` is an `AsyncioRuntime` (on the agent's event loop), a `RuntimeThread`, or any
`Caller` (see `runtime.integrations`).
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

from agents import FunctionTool, RunContextWrapper
from agents.tool_context import ToolContext
from agents.tracing import Span, SpanError, Trace, TracingProcessor, get_current_span
from opentelemetry.trace import TracerProvider

from ..messages import ToolCall, ToolFailure
from ..schema import render_tool
from ..search import ToolSearch, found_tools
from ._caller import Caller, RuntimeLike, Selection, ToolCallFailed, caller_of, new_call_id
from ._mirror import SpanMirror, attributes_of, parent_context
from ._search import Finder

__all__ = ["OpenTelemetryTracingProcessor", "ToolCallFailed", "failure_text", "function_tools"]

FailureErrorFunction = Callable[[RunContextWrapper[Any], Exception], str | Awaitable[str]]
"""The SDK's `ToolErrorFunction`: the text the model reads for a failed call."""


def failure_text(ctx: RunContextWrapper[Any], error: Exception) -> str:
    """The default `failure_error_function`: the failure's own text ("Error: ...")."""
    return str(error)


def function_tools(
    runtime: RuntimeLike,
    *,
    only: Collection[str] | None = None,
    exclude: Collection[str] = (),
    strict: bool = True,
    metadata: Mapping[str, Any] | None = None,
    timeout: float | None = None,
    failure_error_function: FailureErrorFunction = failure_text,
    search: ToolSearch | None = None,
) -> list[FunctionTool]:
    """The runtime's tools (those it has now) as `FunctionTool`s that call it.

    Args:
        runtime: an `AsyncioRuntime`, a `RuntimeThread` or any `Caller`.
        only: show only these tools (None: all).
        exclude: hide these tools (the model never sees them; the SDK refuses calls of them).
        strict: the "openai" dialect's strict mode (the SDK's `strict_json_schema`).
        metadata: given to every call (never to the model).
        timeout: a deadline per call, in seconds (besides the tools' and the runtime's own).
        failure_error_function: the text the model reads for a failed call, from a
            `ToolCallFailed`; by default the failure's own text.
        search: past `search.threshold` tools, offer a search tool and `search.always`; the
            tools found are enabled from the next turn on.

    Raises:
        ValueError: `only` names a tool the runtime does not have.
        TypeError: `runtime` is not one of the above (a trio `Runtime`, say).
    """
    caller = caller_of(runtime)
    selection = Selection(only, exclude)
    registry = caller.registry
    selection.check(registry)
    visible = selection.visible(registry)
    finder = None if search is None else Finder(caller, search, selection)
    deferred = frozenset(finder.deferred(registry) or ()) if finder is not None else frozenset()
    found: set[str] = set()  # what this list's searches found
    tools: list[FunctionTool] = []
    if finder is not None and deferred:
        tools.append(_search_tool(finder, found, strict, failure_error_function))
    for schema in visible.schemas("openai", strict=strict):
        function = copy.deepcopy(schema["function"])  # the registry's copy is cached: never handed out
        name = function["name"]
        tools.append(
            FunctionTool(
                name=name,
                description=function.get("description") or "",
                params_json_schema=function["parameters"],
                on_invoke_tool=_invoker(caller, name, metadata, timeout, failure_error_function),
                strict_json_schema=bool(function.get("strict", False)),
                is_enabled=_once_found(name, found) if name in deferred else True,
            )
        )
    return tools


def _once_found(name: str, found: set[str]) -> Callable[[RunContextWrapper[Any], Any], bool]:
    def is_enabled(ctx: RunContextWrapper[Any], agent: Any) -> bool:
        return name in found

    return is_enabled


def _search_tool(
    finder: Finder, found: set[str], strict: bool, failure_error_function: FailureErrorFunction
) -> FunctionTool:
    """The search tool: the runtime's search, answered here; what it finds joins `found`."""
    search = finder.search
    schema = render_tool(search.descriptor(), "openai", strict=strict)["function"]

    async def on_invoke_tool(ctx: ToolContext[Any], arguments: str) -> str:
        call_id = getattr(ctx, "tool_call_id", None) or new_call_id("agents")
        result = finder.answer(ToolCall(id=call_id, name=search.name, arguments=arguments or "{}"))
        if isinstance(result, ToolFailure):
            return await _failed(ctx, get_current_span(), result, failure_error_function)
        found.update(d.name for d in found_tools(result))
        return result.content

    return FunctionTool(
        name=search.name,
        description=search.description,
        params_json_schema=copy.deepcopy(schema["parameters"]),
        on_invoke_tool=on_invoke_tool,
        strict_json_schema=bool(schema.get("strict", False)),
    )


def _invoker(
    caller: Caller,
    name: str,
    metadata: Mapping[str, Any] | None,
    timeout: float | None,
    failure_error_function: FailureErrorFunction,
) -> Callable[[ToolContext[Any], str], Awaitable[str]]:
    async def on_invoke_tool(ctx: ToolContext[Any], arguments: str) -> str:
        call_id = getattr(ctx, "tool_call_id", None) or new_call_id("agents")
        # Empty arguments mean none, as for the SDK's own tools (models send "" for a tool without any).
        call = ToolCall(id=call_id, name=name, arguments=arguments or "{}")
        span = get_current_span()  # the SDK's `function` span of this call
        with parent_context(_key(span.span_id) if span is not None else None):
            result = await caller.call(call, metadata=metadata, timeout=timeout)
        if isinstance(result, ToolFailure):
            return await _failed(ctx, span, result, failure_error_function)
        return result.content

    return on_invoke_tool


async def _failed(
    ctx: ToolContext[Any],
    span: Span[Any] | None,
    failure: ToolFailure,
    failure_error_function: FailureErrorFunction,
) -> str:
    if span is not None:
        run_config = getattr(ctx, "run_config", None)
        sensitive = run_config is None or run_config.trace_include_sensitive_data
        span.set_error(
            SpanError(
                message="Error running tool (non-fatal)",
                data={
                    "tool_name": failure.tool,
                    "kind": str(failure.kind),
                    "error": failure.content if sensitive else "",
                },
            )
        )
    text = failure_error_function(ctx, ToolCallFailed(failure))
    if inspect.isawaitable(text):
        text = await text
    return text


def _key(agents_id: str) -> tuple[str, str]:
    return ("openai-agents", agents_id)


class OpenTelemetryTracingProcessor(TracingProcessor):
    """Mirrors the SDK's traces as OpenTelemetry spans, so the runtime's spans nest in them.

    Register it with `agents.add_trace_processor(...)` (beside the SDK's exporter) or
    `agents.set_trace_processors([...])` (instead of it). Each SDK trace becomes a root span
    (under the OTel span current when the trace starts), each SDK span a child of its parent's
    mirror, named `"{type} {name}"` ("agent assistant", "function add", "response"), with the
    SDK's ids as `openai_agents.*` attributes and status ERROR when the SDK span has an error.
    While a tool of `function_tools` runs, the mirror of its `function` span is the current
    OTel span, so the runtime's `execute_tool` span is its child.

    Args:
        tracer_provider: where the mirrored spans go (default: the global provider).
    """

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        self._mirror = SpanMirror("tool-runtime.integrations.openai_agents", tracer_provider)

    def on_trace_start(self, trace: Trace) -> None:
        self._mirror.start(
            _key(trace.trace_id),
            None,
            trace.name or "agents trace",
            {"openai_agents.trace_id": trace.trace_id},
        )

    def on_trace_end(self, trace: Trace) -> None:
        self._mirror.end(_key(trace.trace_id))

    def on_span_start(self, span: Span[Any]) -> None:
        data = span.span_data
        name = getattr(data, "name", None)
        if name is None and isinstance(getattr(data, "turn", None), int):
            name = str(data.turn)  # a turn of the agent loop: "turn 1"
        attributes = {
            "openai_agents.trace_id": span.trace_id,
            "openai_agents.span_id": span.span_id,
            "openai_agents.span.type": data.type,
        }
        if isinstance(name, str):
            attributes["openai_agents.span.name"] = name
        self._mirror.start(
            _key(span.span_id),
            _key(span.parent_id or span.trace_id),
            f"{data.type} {name}" if isinstance(name, str) and name else data.type,
            attributes_of(attributes),
        )

    def on_span_end(self, span: Span[Any]) -> None:
        error = span.error
        self._mirror.end(_key(span.span_id), error=error["message"] if error else None)

    def shutdown(self) -> None:
        self._mirror.close()

    def force_flush(self) -> None:
        pass
