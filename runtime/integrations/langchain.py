"""A runtime's tools as LangChain tools, and a LangGraph-compatible tool node (the `langchain` extra).

    async with open_asyncio_runtime(registry) as rt:
        model = chat_model.bind_tools(tools(rt))              # LangChain tools: BaseTool
        graph.add_node("tools", RuntimeToolNode(rt))          # in place of langgraph's ToolNode

`tools(rt)` gives one `RuntimeTool` (a `BaseTool`) per runtime tool, its `args_schema` the
runtime's plain JSON Schema; invoked with a model's tool call it answers a `ToolMessage`, its
`artifact` the runtime's `ToolSuccess`. `RuntimeToolNode` takes what `langgraph.prebuilt.ToolNode`
takes (a state dict or object with `messages`, a list of messages, or a list of tool calls) and
returns what it returns (`{"messages": [ToolMessage, ...]}`, or a list for a list of messages),
but runs all the tool calls of the last AIMessage as one batch through `rt.call_many`, so they
run in parallel on the runtime; each `ToolMessage.artifact` is the call's `ToolResult`. The node
needs only langchain-core; LangGraph runs it as any node.

Failures: a tool never raises into LangChain. A `ToolFailure` becomes `ToolMessage(status="error")`
with the failure's text: `RuntimeTool` raises a `RuntimeToolException` (a `ToolException`
carrying the `ToolFailure`) that its `handle_tool_error` turns into that message, LangChain's own
path for a handled tool error; the node builds the message itself. A call of a hidden tool never
reaches the runtime: it is answered UNKNOWN_TOOL naming only the visible tools.

Deferred calls: in a graph with a checkpointer, the node's deferred calls (`ToolPending`) are one
LangGraph `interrupt` (LangChain's human-in-the-loop request), and `Command(resume={"decisions":
[...]})` approves, edits, rejects or supplies each in the journal; the batch runs as a LangGraph
task, so the node run again to resume does not run its other calls again.

Spans: LangChain traces with callbacks (its run tree), not OpenTelemetry. The runtime's
`execute_tool` spans are children of the OpenTelemetry context current when the tool or node
runs; with `OpenTelemetryCallbackHandler` among the run's callbacks, LangChain's runs are mirrored
as OTel spans (graph -> node -> tool, model calls too) and the runtime's span of a `RuntimeTool`
call nests under the mirror of its tool run, the spans of a node's batch under the mirror of the
node's run.

Tool search: with `search=ToolSearch(threshold=N, always=[...])`, past N tools `tools(rt,
search=..., messages=...)` gives a `search_tools` tool, the always-loaded ones, and the tools
that the searches among `messages` found (their `ToolMessage.artifact`), in the order found: bind
that list to the model on each turn (LangGraph: in the model node, from the state's messages).
`RuntimeToolNode(rt, search=...)` answers the search calls with the runtime's search; a
`RuntimeSearchTool` does the same under LangGraph's own `ToolNode`.

`runtime` is an `AsyncioRuntime` (on the agent's event loop), a `RuntimeThread` (which also serves
LangChain's sync `invoke`), or any `Caller` (see `runtime.integrations`).
"""

from __future__ import annotations

import contextvars
import copy
from collections.abc import Awaitable, Callable, Collection, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal
from uuid import UUID

import msgspec
from langchain_core.callbacks import BaseCallbackHandler, BaseCallbackManager
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.messages import ToolCall as LangChainToolCall
from langchain_core.runnables import Runnable, RunnableConfig, ensure_config
from langchain_core.tools import BaseTool, ToolException
from opentelemetry.trace import TracerProvider
from pydantic import PrivateAttr

from ..engine import DetachedCall
from ..messages import ToolCall, ToolFailure, ToolPending, ToolResult
from ..registry import ToolRegistry
from ..schema import render_tool
from ..search import ToolSearch, found_tools
from ._caller import (
    BlockingCaller,
    Caller,
    RuntimeLike,
    Selection,
    approved_result,
    caller_of,
    denied,
    journal_of,
    merge,
    new_call_id,
)
from ._mirror import SpanMirror, parent_context
from ._search import Finder

if TYPE_CHECKING:
    from langgraph.prebuilt import ToolNode as _NodeBase
else:
    try:  # with LangGraph, the node is one of its ToolNodes (create_react_agent takes it as one)
        from langgraph.prebuilt import ToolNode as _NodeBase
    except ImportError:  # without it, a plain Runnable: the node needs only langchain-core
        _NodeBase = Runnable
_LANGGRAPH = _NodeBase.__module__.startswith("langgraph")

_Batch = Callable[[], Awaitable[list[str]]]
if _LANGGRAPH:
    from langgraph.constants import CONFIG_KEY_CHECKPOINTER
    from langgraph.func import task
    from langgraph.types import interrupt

    async def _run_batch(run: _Batch) -> list[str]:
        """The node's batch as a LangGraph task: its results (JSON) are in the checkpoint, so a
        node run again to resume an interrupt gets them back instead of running the calls again."""
        return await run()

    _as_task: Any = task(name="tool_runtime_batch")  # its overloads are more than mypy can pick from
    _checkpointed_batch: Callable[[_Batch], Awaitable[list[str]]] = _as_task(_run_batch)


def _checkpointed(config: RunnableConfig | None) -> bool:
    """The node runs in a LangGraph graph with a checkpointer (what `interrupt` needs)."""
    if not _LANGGRAPH or config is None:
        return False
    return config.get("configurable", {}).get(CONFIG_KEY_CHECKPOINTER) is not None


__all__ = [
    "OpenTelemetryCallbackHandler",
    "RuntimeSearchTool",
    "RuntimeTool",
    "RuntimeToolException",
    "RuntimeToolNode",
    "loaded",
    "tools",
]

_TOOL_CALL_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "tool_runtime_lc_call_id", default=None
)


class RuntimeToolException(ToolException):
    """A runtime call ended in a `ToolFailure`; `str()` is the text the model reads.

    Attributes:
        failure: the structured failure (`kind`, `message`, `call_id`, `tool`).
    """

    def __init__(self, failure: ToolFailure) -> None:
        self.failure = failure
        super().__init__(failure.content)


def _failure_text(error: ToolException) -> str:
    return str(error)


def tools(
    runtime: RuntimeLike,
    *,
    only: Collection[str] | None = None,
    exclude: Collection[str] = (),
    metadata: Mapping[str, Any] | None = None,
    timeout: float | None = None,
    handle_tool_error: Callable[[ToolException], str] = _failure_text,
    search: ToolSearch | None = None,
    messages: Sequence[BaseMessage] = (),
) -> list[BaseTool]:
    """The runtime's tools (those it has now) as LangChain tools that call it.

    Args:
        runtime: an `AsyncioRuntime`, a `RuntimeThread` or any `Caller`.
        only: show only these tools (None: all).
        exclude: hide these tools.
        metadata: given to every call (never to the model).
        timeout: a deadline per call, in seconds (besides the tools' and the runtime's own).
        handle_tool_error: the text of a failed call's `ToolMessage(status="error")`, from a
            `RuntimeToolException`; by default the failure's own text.
        search: past `search.threshold` tools, give a search tool, `search.always` and the
            tools the searches among `messages` found, instead of every tool.
        messages: the conversation so far (with `search`).

    Raises:
        ValueError: `only` names a tool the runtime does not have.
        TypeError: `runtime` is not one of the above (a trio `Runtime`, say).
    """
    caller = caller_of(runtime)
    selection = Selection(only, exclude)
    registry = caller.registry
    selection.check(registry)
    made: list[BaseTool] = []
    visible = selection.visible(registry)
    if search is not None:
        finder = Finder(caller, search, selection)
        deferred = finder.deferred(registry)
        if deferred is not None:
            made.append(RuntimeSearchTool.of(finder, handle_tool_error))
            hidden = set(deferred)
            shown = [t.name for t in visible if t.name not in hidden]
            shown += [n for n in loaded(messages, search) if n in hidden]
            visible = ToolRegistry([registry.get(n) for n in shown])
    for schema in visible.schemas("jsonschema"):
        parameters = copy.deepcopy(schema["parameters"])  # the registry's copy is cached
        parameters.pop("$schema", None)
        tool = RuntimeTool(
            name=schema["name"],
            description=schema.get("description") or "",
            args_schema=parameters,
            handle_tool_error=handle_tool_error,
            response_format="content_and_artifact",
        )
        tool._bind(caller, metadata, timeout)
        made.append(tool)
    return made


class _CallIdTool(BaseTool):
    """A LangChain tool whose runtime call carries the model's tool-call id. The id reaches neither
    `_run` nor `_arun`: it rides a context variable from `invoke` / `ainvoke` (`_call_id`)."""

    def invoke(
        self,
        input: str | dict[str, Any] | LangChainToolCall,
        config: RunnableConfig | None = None,
        **kwargs: Any,
    ) -> Any:
        token = _TOOL_CALL_ID.set(_call_id_of(input))
        try:
            return super().invoke(input, config, **kwargs)
        finally:
            _TOOL_CALL_ID.reset(token)

    async def ainvoke(
        self,
        input: str | dict[str, Any] | LangChainToolCall,
        config: RunnableConfig | None = None,
        **kwargs: Any,
    ) -> Any:
        token = _TOOL_CALL_ID.set(_call_id_of(input))
        try:
            return await super().ainvoke(input, config, **kwargs)
        finally:
            _TOOL_CALL_ID.reset(token)

    @staticmethod
    def _call_id() -> str:
        return _TOOL_CALL_ID.get() or new_call_id("langchain")


class RuntimeTool(_CallIdTool):
    """One runtime tool as a LangChain `BaseTool` (made by `tools()`).

    The model's arguments go to the runtime as they are (LangChain does not validate them
    against a JSON-Schema `args_schema`; the runtime does). Returns `(content, ToolSuccess)`
    (`response_format="content_and_artifact"`), so a tool call's `ToolMessage` carries the
    runtime's result as its artifact; a failure raises `RuntimeToolException`, handled into
    `ToolMessage(status="error")`.
    """

    _caller: Caller = PrivateAttr()
    _metadata: Mapping[str, Any] | None = PrivateAttr(default=None)
    _timeout: float | None = PrivateAttr(default=None)

    def _bind(self, caller: Caller, metadata: Mapping[str, Any] | None, timeout: float | None) -> None:
        self._caller = caller
        self._metadata = metadata
        self._timeout = timeout

    def _call(self, arguments: dict[str, Any]) -> ToolCall:
        return ToolCall(id=self._call_id(), name=self.name, arguments=arguments)

    async def _arun(self, *args: Any, **kwargs: Any) -> tuple[str, ToolResult]:
        call = self._call(kwargs)
        with parent_context(_key(_current_run())):
            result = await self._caller.call(call, metadata=self._metadata, timeout=self._timeout)
        return _content(result)

    def _run(self, *args: Any, **kwargs: Any) -> tuple[str, ToolResult]:
        call = self._call(kwargs)
        with parent_context(_key(_current_run())):
            (result,) = _blocking(self._caller).call_many_blocking(
                [call], metadata=self._metadata, timeout=self._timeout
            )
        return _content(result)


class RuntimeSearchTool(_CallIdTool):
    """The search tool as a LangChain tool (made by `tools(..., search=)`): the runtime's search,
    answered here. Its `ToolMessage.artifact` is the search's `ToolSuccess` (its value a
    `FoundTools`), which is how `loaded` finds what it loaded."""

    _finder: Finder = PrivateAttr()

    @classmethod
    def of(cls, finder: Finder, handle_tool_error: Callable[[ToolException], str]) -> RuntimeSearchTool:
        search = finder.search
        parameters = render_tool(search.descriptor(), "jsonschema")["parameters"]
        made = cls(
            name=search.name,
            description=search.description,
            args_schema={k: v for k, v in parameters.items() if k != "$schema"},
            handle_tool_error=handle_tool_error,
            response_format="content_and_artifact",
        )
        made._finder = finder
        return made

    def _run(self, *args: Any, **kwargs: Any) -> tuple[str, ToolResult]:
        call = ToolCall(id=self._call_id(), name=self.name, arguments=kwargs)
        return _content(self._finder.answer(call))

    async def _arun(self, *args: Any, **kwargs: Any) -> tuple[str, ToolResult]:
        return self._run(*args, **kwargs)


def loaded(messages: Sequence[BaseMessage], search: ToolSearch) -> list[str]:
    """The names of the tools the searches among `messages` found, in the order found, each once
    (from the `ToolMessage.artifact` of each `search.name` call)."""
    names: dict[str, None] = {}
    for message in messages:
        if isinstance(message, ToolMessage) and message.name == search.name:
            names.update(dict.fromkeys(d.name for d in found_tools(message.artifact)))
    return list(names)


def _content(result: ToolResult) -> tuple[str, ToolResult]:
    if isinstance(result, ToolFailure):
        raise RuntimeToolException(result)
    return result.content, result


def _call_id_of(input: Any) -> str | None:
    if isinstance(input, dict) and input.get("type") == "tool_call":
        call_id = input.get("id")
        return call_id if isinstance(call_id, str) else None
    return None


def _current_run(config: RunnableConfig | None = None) -> UUID | None:
    """The id of the LangChain run this code runs in (a tool's run, a graph node's run)."""
    callbacks = ensure_config(config).get("callbacks")
    return callbacks.parent_run_id if isinstance(callbacks, BaseCallbackManager) else None


def _blocking(caller: Caller) -> BlockingCaller:
    if not isinstance(caller, BlockingCaller):
        raise RuntimeError(
            "a sync LangChain call (invoke) needs a runtime that sync code can call: a "
            "runtime.embed.RuntimeThread; with open_asyncio_runtime use ainvoke / astream"
        )
    return caller


class RuntimeToolNode(_NodeBase):
    """A LangGraph tool node backed by the runtime: the last AIMessage's tool calls, run as one batch.

    Input and output are those of `langgraph.prebuilt.ToolNode`: a state dict (or object)
    with `messages_key` -> `{messages_key: [ToolMessage, ...]}`; a list of messages -> a list
    of ToolMessages; a list of tool calls (or LangGraph's `Send` payload with a `tool_call`)
    -> `{messages_key: [...]}`. One ToolMessage per tool call, in the calls' order, each with
    `status` "success" or "error" and the `ToolResult` as `artifact`.

    With LangGraph installed it is a `ToolNode` (a subclass), so it goes wherever LangGraph
    takes one: `create_react_agent(model, RuntimeToolNode(rt))` binds its `tools_by_name`
    (the runtime's tools visible to it when it was made) to the model. Without LangGraph it is a
    plain `Runnable`.

    Args:
        runtime: an `AsyncioRuntime`, a `RuntimeThread` (also for sync `invoke`) or any `Caller`.
        only: the tools the node runs (None: all); others are answered UNKNOWN_TOOL here.
        exclude: tools the node refuses the same way.
        messages_key: the state's key (or attribute) holding the messages.
        metadata: given to every call (never to the model).
        timeout: a deadline for the whole batch, in seconds.
        name: the node's name.
        search: the node answers calls of `search.name` with the runtime's search (and
            `tools(messages)` gives what `tools(..., search=, messages=)` gives).
    """

    def __init__(
        self,
        runtime: RuntimeLike,
        *,
        only: Collection[str] | None = None,
        exclude: Collection[str] = (),
        messages_key: str = "messages",
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        name: str = "tools",
        search: ToolSearch | None = None,
    ) -> None:
        self._caller = caller_of(runtime)
        self._selection = Selection(only, exclude)
        self._metadata = metadata
        self._timeout = timeout
        self._search = search
        self._finder = None if search is None else Finder(self._caller, search, self._selection)
        if _LANGGRAPH:  # LangGraph's ToolNode: its tools, name and messages key
            super().__init__(self.tools(), name=name, messages_key=messages_key)
        self._messages_key = messages_key
        self.name = name

    def tools(self, messages: Sequence[BaseMessage] = ()) -> list[BaseTool]:
        """The node's tools as LangChain tools, to bind to the chat model (`bind_tools`); with
        `search`, the search tool, the always-loaded tools and those found in `messages`."""
        visible = self._selection.visible(self._caller.registry)
        return tools(
            self._caller,
            only=visible.names(),
            metadata=self._metadata,
            timeout=self._timeout,
            search=self._search,
            messages=messages,
        )

    def _searched(
        self, calls: Sequence[ToolCall], registry: ToolRegistry
    ) -> tuple[list[ToolCall], dict[int, ToolResult]]:
        """The calls for the runtime, and the answers (by position) given here: search calls
        answered by the search, hidden tools refused."""
        finder = self._finder
        if finder is None:
            sent, refused = self._selection.partition(calls, registry)
            return sent, dict(refused)
        others = [(i, c) for i, c in enumerate(calls) if c.name != finder.search.name]
        sent, refused = self._selection.partition([c for _, c in others], registry)
        answered: dict[int, ToolResult] = {others[i][0]: r for i, r in refused.items()}
        for i, call in enumerate(calls):
            if call.name == finder.search.name:
                answered[i] = finder.answer(call)
        return sent, answered

    # Like ToolNode, the node makes no run of its own: in a graph its run is the graph's node run
    # (whose child config it is given), and its calls' spans nest under that run's mirror.
    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        calls, shape = self._parse(input)
        caller = _blocking(self._caller)
        sent, answered = self._searched(calls, caller.registry)
        served: list[ToolResult] = []
        if sent:
            with parent_context(_key(_current_run(config))):
                served = caller.call_many_blocking(sent, metadata=self._metadata, timeout=self._timeout)
        return self._shape(calls, merge(served, answered, len(calls)), shape, portable=_checkpointed(config))

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        calls, shape = self._parse(input)
        sent, answered = self._searched(calls, self._caller.registry)
        served: list[ToolResult] = []
        checkpointed = _checkpointed(config)
        if sent:
            with parent_context(_key(_current_run(config))):
                if checkpointed:
                    served = await self._replayable(sent)
                else:
                    served = await self._caller.call_many(
                        sent, metadata=self._metadata, timeout=self._timeout
                    )
        results = merge(served, answered, len(calls))
        if checkpointed and any(isinstance(r, ToolPending) for r in results):
            results = await self._decided(calls, results)
        return self._shape(calls, results, shape, portable=checkpointed)

    async def _replayable(self, sent: list[ToolCall]) -> list[ToolResult]:
        """The batch run as a LangGraph task: run once, replayed from the checkpoint when the
        node runs again to resume (its other calls are not run again)."""

        async def run() -> list[str]:
            results = await self._caller.call_many(sent, metadata=self._metadata, timeout=self._timeout)
            return [_RESULT_ENCODER.encode(r).decode() for r in results]

        encoded = await _checkpointed_batch(run)
        return [_RESULT_DECODER.decode(r) for r in encoded]

    async def _decided(self, calls: Sequence[ToolCall], results: list[ToolResult]) -> list[ToolResult]:
        """Interrupt for the batch's deferred calls (one `interrupt`, their requests in the
        batch's order); resumed, each decision goes to the journal's call and its result takes
        the pending one's place."""
        waiting = [(i, r) for i, r in enumerate(results) if isinstance(r, ToolPending)]
        answer = interrupt(_review(calls, waiting))
        decisions = answer.get("decisions") if isinstance(answer, Mapping) else answer
        if (
            not isinstance(decisions, Sequence)
            or isinstance(decisions, str)
            or len(decisions) != len(waiting)
        ):
            raise ValueError(
                f"resume the tool node with {{'decisions': [...]}}, one decision per action request "
                f"({len(waiting)}), in their order; got {answer!r}"
            )
        journal = journal_of(self._caller)
        decided = list(results)
        for (i, pending), decision in zip(waiting, decisions, strict=True):
            assert isinstance(pending, ToolPending)
            decided[i] = await _decide(journal.detached(pending.detached_id), pending, decision)
        return decided

    def _parse(self, input: Any) -> tuple[list[ToolCall], Literal["list", "dict"]]:
        """The runtime calls for `input`'s tool calls, and the output's shape (as ToolNode does)."""
        shape: Literal["list", "dict"] = "dict"
        key = self._messages_key
        if (
            isinstance(input, list)
            and input
            and isinstance(input[-1], dict)
            and input[-1].get("type") == "tool_call"
        ):
            return [_runtime_call(c) for c in input], shape
        if isinstance(input, dict) and input.get("__type") == "tool_call_with_context":
            return [_runtime_call(input["tool_call"])], shape
        if isinstance(input, list):
            shape, messages = "list", input
        elif isinstance(input, dict):
            messages = input.get(key) or []
        else:
            messages = getattr(input, key, None) or []
        last = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
        if last is None:
            raise ValueError(f"no AIMessage in the node's input (looked in {key!r})")
        return [_runtime_call(c) for c in last.tool_calls], shape

    def _shape(
        self,
        calls: Sequence[ToolCall],
        results: Sequence[ToolResult],
        shape: Literal["list", "dict"],
        *,
        portable: bool = False,
    ) -> Any:
        # A checkpointer stores the messages with its own serializer, which knows no msgspec
        # struct: there the artifact is the result's JSON form (a dict, "type" its kind).
        messages: list[BaseMessage] = [
            ToolMessage(
                content=result.content,
                tool_call_id=call.id,
                name=call.name,
                status="error" if isinstance(result, ToolFailure) else "success",
                artifact=msgspec.to_builtins(result) if portable else result,
            )
            for call, result in zip(calls, results, strict=True)
        ]
        return messages if shape == "list" else {self._messages_key: messages}


_RESULT_ENCODER = msgspec.json.Encoder()
_RESULT_DECODER = msgspec.json.Decoder(ToolResult)


def _review(calls: Sequence[ToolCall], waiting: Sequence[tuple[int, ToolResult]]) -> dict[str, Any]:
    """The interrupt's value: LangChain's human-in-the-loop request (`action_requests`,
    `review_configs`), each request with the runtime's `ToolPending` (`id`, `detached_id`,
    `reason`, `expires_at`)."""
    requests: list[dict[str, Any]] = []
    configs: list[dict[str, Any]] = []
    for i, pending in waiting:
        assert isinstance(pending, ToolPending)
        call = calls[i]
        arguments = (
            call.arguments if isinstance(call.arguments, Mapping) else msgspec.json.decode(call.arguments)
        )
        requests.append(
            {
                "name": call.name,
                "args": dict(arguments),
                "description": pending.message,
                "id": call.id,
                "detached_id": pending.detached_id,
                "reason": pending.reason,
                "expires_at": pending.expires_at,
            }
        )
        allowed = ["approve", "edit", "reject"] if pending.reason == "approval" else ["respond", "reject"]
        configs.append({"action_name": call.name, "allowed_decisions": allowed})
    return {"action_requests": requests, "review_configs": configs}


async def _decide(handle: DetachedCall, pending: ToolPending, decision: Any) -> ToolResult:
    """One decision of the resume value, taken to the journal's call: its result.

    approve / edit (`edited_action.args`) run an approval's call once; reject denies it (its
    `message` is what the model reads); respond (`result`) supplies an outside result, reject an
    outside error.
    """
    kind = decision.get("type") if isinstance(decision, Mapping) else None
    if pending.reason == "approval" and kind == "approve":
        return await approved_result(handle)
    if pending.reason == "approval" and kind == "edit":
        edited = decision.get("edited_action")
        arguments = edited.get("args") if isinstance(edited, Mapping) else None
        if not isinstance(arguments, Mapping):
            raise ValueError(f"an edit decision needs edited_action.args (an object); got {decision!r}")
        return await approved_result(handle, arguments)
    message = decision.get("message") if isinstance(decision, Mapping) else None
    if kind == "reject":
        text = message if isinstance(message, str) and message else "The call was rejected."
        if pending.reason == "approval":
            await denied(handle, text)
        else:
            await handle.supply(error=text)
        return await handle.result()
    if (
        pending.reason == "outside"
        and kind == "respond"
        and isinstance(decision, Mapping)
        and "result" in decision
    ):
        await handle.supply(decision["result"])
        return await handle.result()
    allowed = "approve, edit, reject" if pending.reason == "approval" else "respond (with result), reject"
    raise ValueError(
        f"a decision for {pending.tool!r} ({pending.reason}) is one of: {allowed}; got {decision!r}"
    )


def _runtime_call(tool_call: Mapping[str, Any]) -> ToolCall:
    call_id = tool_call.get("id")
    return ToolCall(
        id=call_id if isinstance(call_id, str) and call_id else new_call_id("langchain"),
        name=str(tool_call.get("name") or ""),
        arguments=tool_call.get("args") or {},
    )


def _key(run_id: UUID | None) -> Hashable | None:
    return None if run_id is None else ("langchain", run_id)


class OpenTelemetryCallbackHandler(BaseCallbackHandler):
    """Mirrors LangChain's runs as OpenTelemetry spans, so the runtime's spans nest in them.

    Give it as a callback (`config={"callbacks": [handler]}`, or `with_config`). Each run becomes
    a span, a child of its parent run's (the outermost under the OTel span current when it
    starts): chains and LangGraph nodes by their name, `"tool {name}"`, `"chat {name}"`,
    `"llm {name}"`, `"retriever {name}"`; status ERROR when the run raised or a tool answered
    `status="error"`. Runs LangChain marks hidden (`langsmith:hidden`) are not mirrored; their
    children go to the nearest mirrored parent.

    Args:
        tracer_provider: where the mirrored spans go (default: the global provider).
    """

    run_inline = True  # called in the run's own task, in order: a run's span exists before its code runs

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        self._mirror = SpanMirror("tool-runtime.integrations.langchain", tracer_provider)

    def _start(
        self, name: str, run_id: UUID, parent_run_id: UUID | None, tags: list[str] | None, kind: str
    ) -> None:
        if tags and "langsmith:hidden" in tags:
            self._mirror.alias(_key(run_id), _key(parent_run_id))
            return
        attributes = {"langchain.run_id": str(run_id), "langchain.run_type": kind}
        self._mirror.start(_key(run_id), _key(parent_run_id), name, attributes)

    def _end(self, run_id: UUID, error: str | None = None) -> None:
        self._mirror.end(_key(run_id), error=error)

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        self._start(_name(serialized, kwargs, "chain"), run_id, parent_run_id, tags, "chain")

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, _error(error))

    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        self._start(f"tool {_name(serialized, kwargs, 'tool')}", run_id, parent_run_id, tags, "tool")

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        failed = isinstance(output, ToolMessage) and output.status == "error"
        self._end(run_id, str(output.content) if failed else None)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, _error(error))

    def on_chat_model_start(
        self,
        serialized: dict[str, Any] | None,
        messages: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        self._start(f"chat {_name(serialized, kwargs, 'model')}", run_id, parent_run_id, tags, "llm")

    def on_llm_start(
        self,
        serialized: dict[str, Any] | None,
        prompts: list[str],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        self._start(f"llm {_name(serialized, kwargs, 'model')}", run_id, parent_run_id, tags, "llm")

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, _error(error))

    def on_retriever_start(
        self,
        serialized: dict[str, Any] | None,
        query: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        self._start(
            f"retriever {_name(serialized, kwargs, 'retriever')}", run_id, parent_run_id, tags, "retriever"
        )

    def on_retriever_end(self, documents: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id)

    def on_retriever_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, _error(error))


def _name(serialized: Mapping[str, Any] | None, kwargs: Mapping[str, Any], default: str) -> str:
    name = kwargs.get("name") or (serialized or {}).get("name")
    if not name and serialized and isinstance(serialized.get("id"), list) and serialized["id"]:
        name = serialized["id"][-1]
    return str(name or default)


def _error(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"
