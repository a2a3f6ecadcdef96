"""A pydantic-ai toolset backed by the runtime (the `pydantic-ai` extra).

    async with open_asyncio_runtime(registry) as rt:
        agent = Agent(model, toolsets=[RuntimeToolset(rt, exclude={"drop_table"})])
        result = await agent.run("...")

`RuntimeToolset` is an `AbstractToolset`: at every run step it lists the runtime's tools (the
live registry, so tools registered later and MCP tools show up) with the runtime's plain JSON
Schema, and `call_tool` runs each call through the runtime. pydantic-ai's own argument
validation is a pass-through: the runtime decodes and validates the arguments (strict, typed,
one pass), so a wrong argument comes back as our INVALID_ARGUMENTS.

Failures become pydantic-ai's two tool-error forms; the tool never raises anything else:

| our failure | pydantic-ai | what the model gets |
|---|---|---|
| INVALID_ARGUMENTS, REJECTED, UNKNOWN_TOOL (`retry_on`) | `ModelRetry(message)` | a retry prompt; counts against the tool's `max_retries` (past it, the run ends with pydantic-ai's `UnexpectedModelBehavior`, as for its own tools) |
| ERROR, TIMEOUT, CANCELLED, UNAVAILABLE, OVERLOADED | `ToolFailed(message)` | a failed tool result (native where the provider has one); no retry budget spent |

The model should fix its arguments after the first kind; after the second, calling again with
the same arguments would not help (or must wait), so the model sees the failure and adapts.

Deferred calls (a `ToolPending`: an approval, an outside result) are pydantic-ai's deferred
tools: `ApprovalRequired` / `CallDeferred` with the pending result as metadata, so the run ends
with `DeferredToolRequests`. Its `DeferredToolResults` resume them: an approval (edited
arguments too) runs the journal's call once (`call_tool` with `ctx.tool_call_approved`), and
the `decisions()` capability takes a `ToolDenied` or an external result to the journal.

Spans: with the agent instrumented (the `Instrumentation` capability, or
`Agent.instrument_all()`),
pydantic-ai's `execute_tool {name}` span is the current OpenTelemetry span while `call_tool`
runs, so the runtime's own `execute_tool {name}` span is its child (the same trace, one level
down).

Tool search: with `search=ToolSearch(threshold=N, always=[...])`, past N tools the deferred
ones are listed with `defer_loading=True` (pydantic-ai hides them until a search reveals them),
and `toolset.tool_search()` is the `ToolSearch` capability whose strategy is the runtime's
search (on providers with client-executed search, the same function answers their form):

    toolset = RuntimeToolset(rt, search=ToolSearch(always=["get_time"]))
    agent = Agent(model, toolsets=[toolset], capabilities=[toolset.tool_search()])

`runtime` is an `AsyncioRuntime` (on the agent's event loop), a `RuntimeThread`, or any
`Caller` (see `runtime.integrations`).
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from pydantic_ai import (
    ApprovalRequired,
    CallDeferred,
    CallToolsNode,
    ModelRetry,
    RunContext,
    ToolDenied,
    ToolFailed,
    ToolReturn,
)
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.capabilities import ToolSearch as PydanticToolSearch
from pydantic_ai.capabilities.abstract import AgentNode
from pydantic_ai.tools import AgentDepsT, ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool
from pydantic_core import SchemaValidator, core_schema

from ..engine import DetachedCall
from ..messages import FailureKind, ToolCall, ToolFailure, ToolPending, ToolResult
from ..registry import ToolRegistry
from ..search import ToolSearch
from ._caller import (
    RuntimeLike,
    Selection,
    approved_result,
    caller_of,
    denied,
    find_deferred,
    journal_of,
    new_call_id,
    pending_metadata,
)
from ._search import Finder

__all__ = ["RETRY_ON", "RuntimeDecisions", "RuntimeToolset"]

RETRY_ON: frozenset[FailureKind] = frozenset(
    {FailureKind.INVALID_ARGUMENTS, FailureKind.REJECTED, FailureKind.UNKNOWN_TOOL}
)
"""The failures the model can fix by calling again differently: raised as `ModelRetry`."""

# The runtime validates the arguments: pydantic-ai only parses them (JSON text -> Python).
_PASS_THROUGH = SchemaValidator(core_schema.any_schema())


class RuntimeToolset(AbstractToolset[AgentDepsT]):
    """The runtime's tools as a pydantic-ai toolset; calls run through the runtime.

    Args:
        runtime: an `AsyncioRuntime`, a `RuntimeThread` or any `Caller`.
        only: show only these tools (None: all); names the runtime does not have are ignored
            (tools may come later: MCP servers, `register`).
        exclude: hide these tools; a call of a hidden tool never reaches the runtime.
        id: the toolset's id (pydantic-ai needs one for durable execution).
        max_retries: each tool's retry budget for `ModelRetry` (default: the agent's).
        retry_on: the failure kinds raised as `ModelRetry`; the others are `ToolFailed`.
        strict: pydantic-ai's `ToolDefinition.strict` (None: the model's default).
        metadata: given to every call (never to the model).
        timeout: a deadline per call, in seconds (besides the tools' and the runtime's own).
        search: past `search.threshold` tools, the tools not in `search.always` are deferred
            (`defer_loading`): found by the search of `tool_search()`.
    """

    def __init__(
        self,
        runtime: RuntimeLike,
        *,
        only: Collection[str] | None = None,
        exclude: Collection[str] = (),
        id: str | None = None,
        max_retries: int | None = None,
        retry_on: Collection[FailureKind] = RETRY_ON,
        strict: bool | None = None,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        search: ToolSearch | None = None,
    ) -> None:
        self._caller = caller_of(runtime)
        self._selection = Selection(only, exclude)
        self._finder = None if search is None else Finder(self._caller, search, self._selection)
        self._id = id
        self._max_retries = max_retries
        self._retry_on = frozenset(retry_on)
        self._strict = strict
        self._metadata = metadata
        self._timeout = timeout
        self._listed: tuple[ToolRegistry, dict[str, ToolDefinition]] | None = None

    @property
    def id(self) -> str | None:
        return self._id

    @property
    def label(self) -> str:
        return f"RuntimeToolset {self._id!r}" if self._id else "RuntimeToolset"

    def _definitions(self) -> dict[str, ToolDefinition]:
        """The visible tools' definitions, made once per registry snapshot."""
        registry = self._caller.registry
        if self._listed is not None and self._listed[0] is registry:
            return self._listed[1]
        definitions: dict[str, ToolDefinition] = {}
        deferred = frozenset(self._finder.deferred(registry) or ()) if self._finder is not None else ()
        for schema in self._selection.visible(registry).schemas("jsonschema"):
            parameters = copy.deepcopy(schema["parameters"])  # the registry's copy is cached
            parameters.pop("$schema", None)
            definitions[schema["name"]] = ToolDefinition(
                name=schema["name"],
                description=schema.get("description") or None,
                parameters_json_schema=parameters,
                strict=self._strict,
                defer_loading=schema["name"] in deferred,
            )
        self._listed = (registry, definitions)
        return definitions

    def tool_search(self) -> PydanticToolSearch[AgentDepsT]:
        """pydantic-ai's `ToolSearch` capability, searching with the runtime's search.

        Raises:
            ValueError: the toolset was made without `search=`.
        """
        finder = self._finder
        if finder is None:
            raise ValueError("RuntimeToolset.tool_search() needs RuntimeToolset(..., search=ToolSearch(...))")

        def strategy(
            ctx: RunContext[AgentDepsT], queries: Sequence[str], tools: Sequence[ToolDefinition]
        ) -> list[str]:
            # Each query a sentence: several asks find tools for each (ToolIndex's asks).
            query = ". ".join(q.strip().rstrip(".") for q in queries if q.strip())
            return [d.name for d in finder.find(query, among={t.name for t in tools}).tools]

        search = finder.search
        return PydanticToolSearch(
            strategy=strategy, max_results=search.limit, tool_description=search.description
        )

    async def get_tools(self, ctx: RunContext[AgentDepsT]) -> dict[str, ToolsetTool[AgentDepsT]]:
        max_retries = self._max_retries if self._max_retries is not None else ctx.max_retries
        return {
            name: ToolsetTool(
                toolset=self, tool_def=definition, max_retries=max_retries, args_validator=_PASS_THROUGH
            )
            for name, definition in self._definitions().items()
        }

    def decisions(self) -> RuntimeDecisions[AgentDepsT]:
        """The capability that takes a resumed run's `DeferredToolResults` to the runtime's
        journal: a `ToolDenied` denies the deferred call (with its message), an external
        result is supplied to it (checked against the tool's result type). Approvals need no
        capability: pydantic-ai calls the tool again, and the toolset approves the call.

            agent = Agent(model, toolsets=[toolset], capabilities=[toolset.decisions()],
                          output_type=[str, DeferredToolRequests])
        """
        return RuntimeDecisions(self)

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[AgentDepsT], tool: ToolsetTool[AgentDepsT]
    ) -> Any:
        """Run the call through the runtime: its content, or `ModelRetry` / `ToolFailed`; a
        deferred call raises `ApprovalRequired` / `CallDeferred` (its `ToolPending` as metadata),
        and once approved (`ctx.tool_call_approved`) runs as that approval of it, exactly once."""
        call = ToolCall(id=ctx.tool_call_id or new_call_id("pydantic-ai"), name=name, arguments=tool_args)
        registry = self._caller.registry
        result: ToolResult | None = None
        if not self._selection.sends(name, registry):
            # pydantic-ai calls only listed tools, but a hidden one must never reach the runtime
            result = self._selection.hidden(call, registry)
        elif ctx.tool_call_approved:
            handle = await self._deferred(ctx, name)
            if handle is not None:  # else approved by pydantic-ai's own means: not ours to journal
                result = await approved_result(handle, tool_args)
        if result is None:
            result = await self._caller.call(call, metadata=self._metadata, timeout=self._timeout)
        return self._content(result)

    def _content(self, result: ToolResult) -> Any:
        if isinstance(result, ToolPending):
            if result.reason == "approval":
                raise ApprovalRequired(pending_metadata(result))
            raise CallDeferred(pending_metadata(result))
        if isinstance(result, ToolFailure):
            if result.kind in self._retry_on:
                raise ModelRetry(result.message)
            raise ToolFailed(result.message)
        return result.content

    def _shows(self, name: str) -> bool:
        return self._selection.sends(name, self._caller.registry)

    async def _deferred(self, ctx: RunContext[AgentDepsT], name: str) -> DetachedCall | None:
        """The journal's entry of the deferred call `ctx` resumes: by the `detached_id` of its
        metadata when the application passed it back, else by the model's call id."""
        metadata = ctx.tool_call_metadata
        if isinstance(metadata, Mapping) and isinstance(metadata.get("detached_id"), str):
            return journal_of(self._caller).detached(metadata["detached_id"])
        if ctx.tool_call_id is None:
            return None
        return await find_deferred(self._caller, ctx.tool_call_id, name)


class RuntimeDecisions(AbstractCapability[AgentDepsT]):
    """Takes the application's decisions on a `RuntimeToolset`'s deferred calls to the runtime's
    journal when a run resumes (made by `RuntimeToolset.decisions()`).

    pydantic-ai answers a denied or externally-run call itself, without calling the toolset:
    before it does, this capability denies the journal's entry (`ToolDenied`'s message is what
    the model reads) or supplies the external result to it (a `ToolReturn` value is checked
    against the tool's declared result type, and the model reads it as the tool's own result;
    `ToolFailed` / `ModelRetry` end it with an ERROR of that message). A value of the wrong
    type raises `ResultTypeError` out of the run, the call still pending.
    """

    def __init__(self, toolset: RuntimeToolset[AgentDepsT]) -> None:
        self._toolset = toolset

    async def before_node_run(
        self, ctx: RunContext[AgentDepsT], *, node: AgentNode[AgentDepsT]
    ) -> AgentNode[AgentDepsT]:
        if not isinstance(node, CallToolsNode) or not node.tool_call_results:
            return node
        results = node.tool_call_results
        metadata = node.tool_call_metadata or {}
        toolset = self._toolset
        for part in node.model_response.tool_calls:
            decision = results.get(part.tool_call_id)
            if decision is None or decision == "skip" or not toolset._shows(part.tool_name):
                continue
            if isinstance(decision, ToolDenied | ToolReturn | ToolFailed | ModelRetry):
                handle = await self._handle(
                    part.tool_call_id, part.tool_name, metadata.get(part.tool_call_id)
                )
                if handle is None:
                    continue
                if isinstance(decision, ToolDenied):
                    await denied(handle, decision.message)
                    continue
                status = await handle.status()
                if status.waiting_for != "outside":
                    continue
                if isinstance(decision, ToolReturn):
                    await handle.supply(decision.return_value)
                    supplied = await handle.result()
                    results[part.tool_call_id] = (
                        ToolFailed(supplied.message)
                        if isinstance(supplied, ToolFailure)
                        else ToolReturn(supplied.content)
                    )
                else:
                    await handle.supply(error=decision.message)
        return node

    async def _handle(self, call_id: str, tool: str, metadata: Any) -> DetachedCall | None:
        caller = self._toolset._caller
        if isinstance(metadata, Mapping) and isinstance(metadata.get("detached_id"), str):
            return journal_of(caller).detached(metadata["detached_id"])
        return await find_deferred(caller, call_id, tool)
