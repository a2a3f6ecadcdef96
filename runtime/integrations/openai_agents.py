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

Approvals: a call the runtime defers for approval (`ToolPending`, reason "approval": a
`requires_approval` tool, or a policy's `request.defer`) is the SDK's own approval interruption
(`result.interruptions`), resumed through the SDK's own API (`state.approve(item)` /
`state.reject(item, rejection_message=...)`, `RunState.to_json()` / `from_json` across a
restart on the runtime's SQLite or Redis journal). For the tools that may be deferred, the
tool's `needs_approval` runs the call through the runtime: a deferral answers True (the SDK
interrupts the run), any other result is kept and is what `on_invoke_tool` returns. An approved
call's `on_invoke_tool` approves the journal's entry (found by the model's call id, so after a
restart too) and waits for its one result: it runs exactly once, however many times the state
is resumed; a sibling call of the same turn ran in the first run and the SDK does not run it
again. A rejection never calls tool code in the SDK: the tools' `is_enabled` (asked at each
turn) denies the journal's entries the run state rejects, with the rejection message. A call
whose result comes from outside (reason "outside") has no counterpart in the SDK: the model
reads its pending text and the application supplies the result to the journal.

`runtime` is an `AsyncioRuntime` (on the agent's event loop), a `RuntimeThread`, or any
`Caller` (see `runtime.integrations`).
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
import weakref
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

from agents import FunctionTool, RunContextWrapper
from agents.tool_context import ToolContext
from agents.tracing import Span, SpanError, Trace, TracingProcessor, get_current_span
from opentelemetry.trace import TracerProvider

from ..engine import DetachedStatus
from ..messages import ToolCall, ToolFailure, ToolPending, ToolResult
from ..registry import ToolRegistry
from ..schema import render_tool
from ..search import ToolSearch, found_tools
from ._caller import (
    Caller,
    Journaled,
    RuntimeLike,
    Selection,
    ToolCallFailed,
    approved_result,
    caller_of,
    denied,
    find_deferred,
    new_call_id,
)
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
    approvals: bool | None = None,
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
        approvals: which tools' deferred calls are the SDK's approval interruptions: None
            (default) the `requires_approval` tools, True every tool (a policy defers any
            call), False none (a deferred call's pending text is the tool's output). For
            these tools the call runs when the SDK asks `needs_approval`, so before the SDK's
            tool input guardrails and `on_tool_start` hooks.

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
    asked = {
        name for name in visible.names() if approvals or (approvals is None and _may_ask(registry, name))
    }
    book = _Approvals(caller, asked)
    tools: list[FunctionTool] = []
    if finder is not None and deferred:
        tools.append(_search_tool(finder, found, strict, failure_error_function))
    for schema in visible.schemas("openai", strict=strict):
        function = copy.deepcopy(schema["function"])  # the registry's copy is cached: never handed out
        name = function["name"]
        approving = book if name in asked else None
        tools.append(
            FunctionTool(
                name=name,
                description=function.get("description") or "",
                params_json_schema=function["parameters"],
                on_invoke_tool=_invoker(caller, name, metadata, timeout, failure_error_function, approving),
                strict_json_schema=bool(function.get("strict", False)),
                is_enabled=_enabled(name, found if name in deferred else None, approving),
                needs_approval=False
                if approving is None
                else approving.needs_approval(name, metadata, timeout),
            )
        )
    return tools


def _may_ask(registry: ToolRegistry, name: str) -> bool:
    options = getattr(registry.get(name), "options", None)
    return getattr(options, "requires_approval", False) is not False


def _enabled(
    name: str, found: set[str] | None, approving: _Approvals | None
) -> bool | Callable[[RunContextWrapper[Any], Any], Awaitable[bool]]:
    """The tool's `is_enabled`: a searchable tool once found; a tool whose calls may wait for
    an approval first takes the run state's rejections to the journal."""
    if found is None and approving is None:
        return True

    async def is_enabled(ctx: RunContextWrapper[Any], agent: Any) -> bool:
        if approving is not None:
            await approving.reconcile(ctx)
        return found is None or name in found

    return is_enabled


class _Approvals:
    """A tool list's approvals: what `needs_approval` ran, what waits, what the state rejected.

    `ran`: results of calls `needs_approval` ran that did not wait, for `on_invoke_tool` to
    return; `waiting`: the journal id of a call that waits for approval (found again by call id
    and arguments after a restart); both by tool, call id and arguments (one list serves many
    conversations, whose models may give their calls the same ids). `seen`: per run context, the rejections already
    taken to the journal (a turn asks every tool's `is_enabled` at once: one journal scan).
    """

    def __init__(self, caller: Caller, tools: Collection[str]) -> None:
        self.caller = caller
        self.tools = frozenset(tools)
        self.ran: dict[tuple[str, str, str], ToolResult] = {}
        self.waiting: dict[tuple[str, str, str], str] = {}
        self.seen: weakref.WeakKeyDictionary[RunContextWrapper[Any], frozenset[str]] = (
            weakref.WeakKeyDictionary()
        )
        self.lock: asyncio.Lock | None = None

    def needs_approval(
        self, name: str, metadata: Mapping[str, Any] | None, timeout: float | None
    ) -> Callable[[RunContextWrapper[Any], dict[str, Any], str], Awaitable[bool]]:
        async def needs_approval(ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str) -> bool:
            arguments = json.dumps(params)
            call = ToolCall(id=call_id, name=name, arguments=arguments)
            span = get_current_span()  # the SDK's `function` span of this call
            with parent_context(_key(span.span_id) if span is not None else None):
                result = await self.caller.call(call, metadata=metadata, timeout=timeout)
            if isinstance(result, ToolPending) and result.reason == "approval":
                self.waiting[(name, call_id, _canonical(arguments))] = result.detached_id
                return True
            self.ran[(name, call_id, _canonical(arguments))] = result
            return False

        return needs_approval

    async def approved(
        self, ctx: ToolContext[Any], name: str, call_id: str, arguments: str
    ) -> ToolResult | None:
        """The result of a call the run state approved that waits in the journal (it runs
        now, once), or None: not such a call."""
        journal = self.caller
        if ctx.is_tool_approved(name, call_id) is not True or not isinstance(journal, Journaled):
            return None
        detached_id = self.waiting.pop((name, call_id, _canonical(arguments)), None)
        handle = (
            journal.detached(detached_id)
            if detached_id is not None
            else await find_deferred(self.caller, call_id, name, arguments)
        )
        return None if handle is None else await approved_result(handle)

    async def reconcile(self, ctx: RunContextWrapper[Any]) -> None:
        """Deny the journal's waiting calls of this run that its state rejected."""
        journal = self.caller
        if not isinstance(journal, Journaled) or not _rejects(ctx):
            return
        if self.lock is None:
            self.lock = asyncio.Lock()
        async with self.lock:
            waiting = [
                s
                for s in await journal.detached_calls()
                if s.waiting_for == "approval" and s.tool in self.tools and _this_runs(ctx, s)
            ]
            rejected = frozenset(s.id for s in waiting if ctx.is_tool_approved(s.tool, s.call_id) is False)
            if rejected <= self.seen.get(ctx, frozenset()):
                return
            for s in waiting:
                if s.id in rejected:
                    message = ctx.get_rejection_message(s.tool, s.call_id) or _REJECTED
                    await denied(journal.detached(s.id), message)
                    self.waiting.pop((s.tool, s.call_id, _canonical(s.arguments)), None)
            self.seen[ctx] = self.seen.get(ctx, frozenset()) | rejected


def _this_runs(ctx: RunContextWrapper[Any], status: DetachedStatus) -> bool:
    """Whether the journal's waiting call `status` is one of this run's: its call id is, and
    with the same arguments (another conversation on the same tool list, whose model gave
    its call the same id, waits with others). The run state keeps each of its calls' SDK
    fingerprint (its arguments among them), in its JSON too: the journal's call is
    fingerprinted the same way. An SDK that keeps no calls: by call id alone."""
    mine: Mapping[str, Any] | None = getattr(ctx, "_tool_invocations", None)
    if mine is None:
        return True
    record = mine.get(status.call_id)
    if record is None:
        return False
    kept = getattr(record, "fingerprint", None)
    if not isinstance(kept, str):
        return True
    return kept == _fingerprint(status)


def _fingerprint(status: DetachedStatus) -> str | None:
    """The SDK's fingerprint of a function call with `status`'s tool, call id and arguments."""
    try:
        from agents._tool_invocation import tool_invocation_identity_and_scope

        identity = tool_invocation_identity_and_scope(
            {
                "type": "function_call",
                "call_id": status.call_id,
                "name": status.tool,
                "arguments": status.arguments,
            }
        )
    except Exception:  # an SDK without it: nothing matches on it
        return None
    return identity[3] if identity is not None else None


def _canonical(arguments: str) -> str:
    """A call's JSON arguments as one text (key order and spacing aside)."""
    try:
        return json.dumps(json.loads(arguments or "{}"), sort_keys=True, separators=(",", ":"))
    except ValueError:
        return arguments


_REJECTED = "the call was rejected"
"""The journal's denial message when the run state rejected a call without one."""


def _rejects(ctx: RunContextWrapper[Any]) -> bool:
    """Whether the run state may have rejected a call (cheap: no journal read when it has not)."""
    approvals = getattr(ctx, "_approvals", None)
    if not isinstance(approvals, dict):
        return True  # an SDK that keeps them elsewhere: ask the journal
    return any(getattr(record, "rejected", True) for record in approvals.values())


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
    approving: _Approvals | None = None,
) -> Callable[[ToolContext[Any], str], Awaitable[str]]:
    async def on_invoke_tool(ctx: ToolContext[Any], arguments: str) -> str:
        call_id = getattr(ctx, "tool_call_id", None) or new_call_id("agents")
        # Empty arguments mean none, as for the SDK's own tools (models send "" for a tool without any).
        call = ToolCall(id=call_id, name=name, arguments=arguments or "{}")
        span = get_current_span()  # the SDK's `function` span of this call
        with parent_context(_key(span.span_id) if span is not None else None):
            canonical = _canonical(arguments or "{}") if approving is not None else ""
            result = None if approving is None else approving.ran.pop((name, call_id, canonical), None)
            if result is None and approving is not None:
                result = await approving.approved(ctx, name, call_id, arguments or "{}")
            if result is None:
                result = await caller.call(call, metadata=metadata, timeout=timeout)
            if (
                approving is not None
                and isinstance(result, ToolPending)
                and result.reason == "approval"
                and ctx.is_tool_approved(name, call_id) is True
                and isinstance(caller, Journaled)
            ):
                # approved before it was asked (`always_approve`): the SDK's approval is the runtime's
                result = await approved_result(caller.detached(result.detached_id))
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
