"""runtime.integrations.langchain under LangChain's own fake chat model, and in a real LangGraph graph.

`GenericFakeChatModel` answers scripted AIMessages (tool calls, then text); the subclass below only
adds `bind_tools`, recording what was offered. With langgraph installed, a real `StateGraph` runs
the model node and our tool node (and langgraph's own `ToolNode` runs our tools).
"""

from __future__ import annotations

import asyncio
import threading
import warnings
from collections.abc import Sequence
from typing import Any, ClassVar

import pytest

pytest.importorskip("langchain_core")

from integrations_support import EVENTS, TOOLS, Otel, ran_in_parallel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool
from opentelemetry.trace import StatusCode

from runtime import FailureKind, ToolFailure, ToolSuccess
from runtime.embed import RuntimeThread, open_asyncio_runtime
from runtime.integrations.langchain import (
    OpenTelemetryCallbackHandler,
    RuntimeToolException,
    RuntimeToolNode,
    loaded,
    tools,
)


class FakeToolModel(GenericFakeChatModel):
    """LangChain's fake chat model, plus `bind_tools` (it records the tools offered)."""

    offered: ClassVar[list[list[str]]] = []

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[Any, BaseMessage]:
        FakeToolModel.offered.append(sorted(convert_to_openai_tool(t)["function"]["name"] for t in tools))
        return self


def model(*replies: AIMessage) -> FakeToolModel:
    return FakeToolModel(messages=iter(replies))


def tool_call(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"type": "tool_call", "name": name, "args": args, "id": call_id}


CALLS = [
    tool_call("overlap", {"label": "a"}, "c1"),
    tool_call("overlap", {"label": "b"}, "c2"),
    tool_call("add", {"a": 1, "b": 2}, "c3"),
    tool_call("boom", {}, "c4"),
    tool_call("positive", {"n": -1}, "c5"),
    tool_call("add", {"a": "one", "b": 2}, "c6"),
    tool_call("sleepy", {}, "c7"),
    tool_call("secret", {}, "c8"),
]


@pytest.fixture(autouse=True)
def _clear() -> None:
    EVENTS.clear()
    FakeToolModel.offered = []


def by_id(messages: Sequence[BaseMessage]) -> dict[str, ToolMessage]:
    found = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
    assert len(found) == len([m for m in messages if isinstance(m, ToolMessage)])
    return found


def check_answers(answers: dict[str, ToolMessage], hidden: bool = True) -> None:
    """The answers to CALLS: successes, our failures as status="error", the hidden tool refused."""
    assert ran_in_parallel("a", "b")
    assert [answers[c].content for c in ("c1", "c2", "c3")] == ["done a", "done b", "3"]
    assert {answers[c].status for c in ("c1", "c2", "c3")} == {"success"}
    assert isinstance(answers["c3"].artifact, ToolSuccess)
    assert answers["c3"].artifact.value == 3
    errors = ("c4", "c5", "c6", "c7") + (("c8",) if hidden else ())
    assert {answers[c].status for c in errors} == {"error"}
    assert answers["c4"].content == "Error: tool 'boom' raised ValueError: the backend is on fire"
    assert answers["c5"].content == "Error: n must be positive, got -1"
    assert "$.a" in str(answers["c6"].content)
    assert answers["c7"].content == "Error: tool 'sleepy' did not finish within 0.05s"
    if hidden:
        assert str(answers["c8"].content).startswith("Error: no tool named 'secret'")
        assert "secret ran" not in EVENTS


def test_langchain_tools_answer_tool_calls_with_tool_messages_and_failures_as_errors() -> None:
    async def main() -> dict[str, ToolMessage]:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            lc_tools = {t.name: t for t in tools(rt, exclude={"secret"})}
            chat = model(AIMessage(content="", tool_calls=CALLS[:-1])).bind_tools(list(lc_tools.values()))
            ai = await chat.ainvoke([HumanMessage("go")])
            assert isinstance(ai, AIMessage)
            answers = await asyncio.gather(*(lc_tools[c["name"]].ainvoke(c) for c in ai.tool_calls))
            return by_id(answers)

    answers = asyncio.run(main())
    assert FakeToolModel.offered == [["add", "boom", "overlap", "positive", "sleepy"]]
    check_answers(answers, hidden=False)
    assert answers["c4"].artifact is None  # a handled ToolException carries only its text


def test_a_tool_invoked_with_plain_arguments_returns_the_content_and_a_failure_raises_nothing() -> None:
    async def main() -> None:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            lc_tools = {t.name: t for t in tools(rt)}
            assert await lc_tools["add"].ainvoke({"a": 2, "b": 2}) == "4"
            assert await lc_tools["positive"].ainvoke({"n": 0}) == "Error: n must be positive, got 0"

    asyncio.run(main())


def test_handle_tool_error_gets_the_structured_failure() -> None:
    seen: list[FailureKind] = []

    def terse(error: Exception) -> str:
        assert isinstance(error, RuntimeToolException)
        seen.append(error.failure.kind)
        return f"failed: {error.failure.kind}"

    async def main() -> Any:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            (boom,) = tools(rt, only={"boom"}, handle_tool_error=terse)
            return await boom.ainvoke(tool_call("boom", {}, "x"))

    message = asyncio.run(main())
    assert isinstance(message, ToolMessage)
    assert message.status == "error"
    assert message.content == "failed: error"
    assert seen == [FailureKind.ERROR]


def test_the_node_runs_the_last_ai_message_calls_as_one_parallel_batch() -> None:
    async def main() -> None:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            node = RuntimeToolNode(rt, exclude={"secret"})
            ai = AIMessage(content="", tool_calls=CALLS)
            out = await node.ainvoke({"messages": [HumanMessage("go"), ai]})
            assert list(out) == ["messages"]
            assert [m.tool_call_id for m in out["messages"]] == [c["id"] for c in CALLS]
            check_answers(by_id(out["messages"]))
            assert isinstance(out["messages"][3].artifact, ToolFailure)
            assert out["messages"][7].artifact.kind is FailureKind.UNKNOWN_TOOL
            assert "secret" not in str(out["messages"][7].content).split(";", 1)[1]  # not among the offered
            assert rt.statistics().tools["secret"].calls == 0
            # ToolNode's other input shapes: a list of messages, a list of tool calls
            listed = await node.ainvoke([ai.model_copy(update={"tool_calls": CALLS[2:3]})])
            assert isinstance(listed, list)
            assert [m.content for m in listed] == ["3"]
            direct = await node.ainvoke([tool_call("add", {"a": 5, "b": 5}, "d1")])
            assert [m.content for m in direct["messages"]] == ["10"]
            with pytest.raises(ValueError, match="no AIMessage"):
                await node.ainvoke({"messages": [HumanMessage("hi")]})
            assert [t.name for t in node.tools()] == ["add", "overlap", "boom", "positive", "sleepy"]

    asyncio.run(main())


def test_a_tool_spans_nest_under_its_langchain_run_mirrored_as_opentelemetry() -> None:
    otel = Otel()
    handler = OpenTelemetryCallbackHandler(tracer_provider=otel.provider)

    async def main() -> None:
        async with open_asyncio_runtime(TOOLS, tracing=otel.tracing()) as rt:
            lc_tools = {t.name: t for t in tools(rt)}
            config: Any = {"callbacks": [handler]}
            await asyncio.gather(
                lc_tools["add"].ainvoke(tool_call("add", {"a": 1, "b": 1}, "t1"), config),
                lc_tools["boom"].ainvoke(tool_call("boom", {}, "t2"), config),
            )

    asyncio.run(main())
    add_span, boom_span = otel.one("execute_tool add"), otel.one("execute_tool boom")
    assert otel.ancestors(add_span) == ["tool add"]
    assert otel.ancestors(boom_span) == ["tool boom"]
    assert add_span.attributes is not None
    assert add_span.attributes["gen_ai.tool.call.id"] == "t1"
    assert otel.one("tool boom").status.status_code is StatusCode.ERROR  # status="error" answer
    assert otel.one("tool add").status.status_code is StatusCode.UNSET


def test_without_the_handler_our_spans_nest_under_the_current_opentelemetry_span() -> None:
    otel = Otel()

    async def main() -> None:
        async with open_asyncio_runtime(TOOLS, tracing=otel.tracing()) as rt:
            (add,) = tools(rt, only={"add"})
            with otel.provider.get_tracer("app").start_as_current_span("handle request"):
                await add.ainvoke(tool_call("add", {"a": 1, "b": 1}, "t1"))
                await RuntimeToolNode(rt).ainvoke([tool_call("add", {"a": 2, "b": 2}, "t2")])

    asyncio.run(main())
    assert [otel.ancestors(s) for s in otel.named("execute_tool add")] == [["handle request"]] * 2


def test_sync_invoke_runs_on_a_runtime_thread_and_is_refused_on_the_asyncio_runtime() -> None:
    with RuntimeThread(TOOLS, tracing=False) as rt:
        (add,) = tools(rt, only={"add"})
        message = add.invoke(tool_call("add", {"a": 3, "b": 4}, "s1"))
        assert isinstance(message, ToolMessage)
        assert message.content == "7"
        assert message.tool_call_id == "s1"
        out = RuntimeToolNode(rt).invoke({"messages": [AIMessage(content="", tool_calls=CALLS[:2])]})
        assert [m.content for m in out["messages"]] == ["done a", "done b"]
        assert ran_in_parallel("a", "b")

    async def main() -> None:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            (add,) = tools(rt, only={"add"})
            with pytest.raises(RuntimeError, match="needs a runtime that sync code can call"):
                await asyncio.to_thread(add.invoke, {"a": 1, "b": 1})

    asyncio.run(main())
    assert not [t for t in threading.enumerate() if t.name == "tool-runtime"]


# -- LangGraph -----------------------------------------------------------------------


def agent_graph(chat: Any, tool_node: Any) -> Any:
    langgraph_graph = pytest.importorskip("langgraph.graph")
    from langgraph.prebuilt import tools_condition

    async def call_model(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [await chat.ainvoke(state["messages"])]}

    graph = langgraph_graph.StateGraph(langgraph_graph.MessagesState)
    graph.add_node("agent", call_model)
    graph.add_node("tools", tool_node)
    graph.add_edge(langgraph_graph.START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile()


def test_a_langgraph_agent_runs_our_node_and_our_spans_nest_under_the_graph_runs() -> None:
    pytest.importorskip("langgraph")
    otel = Otel()
    handler = OpenTelemetryCallbackHandler(tracer_provider=otel.provider)

    async def main() -> list[BaseMessage]:
        async with open_asyncio_runtime(TOOLS, tracing=otel.tracing()) as rt:
            node = RuntimeToolNode(rt, exclude={"secret"})
            chat = model(AIMessage(content="", tool_calls=CALLS), AIMessage(content="all done")).bind_tools(
                node.tools()
            )
            app = agent_graph(chat, node)
            state = await app.ainvoke({"messages": [HumanMessage("go")]}, {"callbacks": [handler]})
            return list(state["messages"])

    messages = asyncio.run(main())
    assert messages[-1].content == "all done"
    check_answers(by_id(messages))
    ours = otel.ours()
    assert len(ours) == 7  # the hidden call never reached the runtime
    for span in ours:
        assert otel.ancestors(span) == ["tools", "LangGraph"]
    assert len({s.context.trace_id for s in otel.spans}) == 1
    assert "chat FakeToolModel" in [s.name for s in otel.spans]


def test_langgraph_own_tool_node_runs_our_tools() -> None:
    pytest.importorskip("langgraph")
    from langgraph.prebuilt import ToolNode

    async def main() -> list[BaseMessage]:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            lc_tools = tools(rt, exclude={"secret"})
            chat = model(AIMessage(content="", tool_calls=CALLS[:-1]), AIMessage(content="ok")).bind_tools(
                lc_tools
            )
            state = await agent_graph(chat, ToolNode(lc_tools)).ainvoke({"messages": [HumanMessage("go")]})
            return list(state["messages"])

    messages = asyncio.run(main())
    assert messages[-1].content == "ok"
    check_answers(by_id(messages), hidden=False)


def test_create_react_agent_takes_our_node_as_its_tool_node() -> None:
    # Issue 46, item 7: wherever LangGraph takes a ToolNode, ours goes (it is one, with LangGraph).
    pytest.importorskip("langgraph")
    from langgraph.prebuilt import ToolNode, create_react_agent
    from langgraph.warnings import LangGraphDeprecatedSinceV10

    async def main() -> list[BaseMessage]:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            node = RuntimeToolNode(rt, exclude={"secret"})
            assert isinstance(node, ToolNode)
            assert sorted(node.tools_by_name) == sorted(t.name for t in node.tools())
            chat = model(AIMessage(content="", tool_calls=CALLS), AIMessage(content="all done"))
            with warnings.catch_warnings():  # moved to `langchain.agents` in LangGraph 1.0, still there
                warnings.simplefilter("ignore", LangGraphDeprecatedSinceV10)
                agent = create_react_agent(chat, node)
            state = await agent.ainvoke({"messages": [HumanMessage("go")]})
            return list(state["messages"])

    messages = asyncio.run(main())
    assert messages[-1].content == "all done"
    check_answers(by_id(messages))
    assert FakeToolModel.offered == [sorted(n for n in ("overlap", "add", "boom", "positive", "sleepy"))]


# -- tool search ---------------------------------------------------------------------------


def test_a_langgraph_agent_searches_the_runtime_and_binds_the_tools_found_next_turn() -> None:
    pytest.importorskip("langgraph")
    from runtime.search import ToolSearch

    search = ToolSearch(threshold=2, always=["add"])
    chat = model(
        AIMessage(
            content="",
            tool_calls=[tool_call("search_tools", {"query": "accept only positive numbers"}, "s1")],
        ),
        AIMessage(
            content="",
            tool_calls=[tool_call("positive", {"n": 3}, "p1"), tool_call("search_tools", {}, "s2")],
        ),
        AIMessage(content="done"),
    )

    async def main() -> list[BaseMessage]:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            node = RuntimeToolNode(rt, exclude={"secret"}, search=search)

            async def call_model(state: dict[str, Any]) -> dict[str, Any]:
                bound = chat.bind_tools(node.tools(state["messages"]))  # what the searches loaded so far
                return {"messages": [await bound.ainvoke(state["messages"])]}

            from langgraph import graph as langgraph_graph
            from langgraph.prebuilt import tools_condition

            graph = langgraph_graph.StateGraph(langgraph_graph.MessagesState)
            graph.add_node("agent", call_model)
            graph.add_node("tools", node)
            graph.add_edge(langgraph_graph.START, "agent")
            graph.add_conditional_edges("agent", tools_condition)
            graph.add_edge("tools", "agent")
            state = await graph.compile().ainvoke({"messages": [HumanMessage("go")]})
            return list(state["messages"])

    messages = asyncio.run(main())
    assert messages[-1].content == "done"
    assert FakeToolModel.offered == [
        ["add", "search_tools"],
        ["add", "positive", "search_tools"],
        ["add", "positive", "search_tools"],
    ]
    answers = by_id(messages)
    assert answers["s1"].content.endswith(
        "- positive: Accept only positive numbers (a sync tool: it runs in a worker thread)."
    )
    assert answers["p1"].content == "3"
    assert answers["s2"].status == "error"
    assert "takes one argument, 'query'" in str(answers["s2"].content)
    assert loaded(messages, search) == ["positive"]


def test_the_search_tool_runs_under_langchain_invoke_and_its_artifact_says_what_it_loaded() -> None:
    from runtime.search import FoundTools, ToolSearch

    search = ToolSearch(threshold=2)

    async def main() -> tuple[list[str], ToolMessage, list[str]]:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            first = tools(rt, exclude={"secret"}, search=search)
            message = await first[0].ainvoke(tool_call("search_tools", {"query": "positive numbers"}, "s1"))
            later = tools(rt, exclude={"secret"}, search=search, messages=[message])
            return [t.name for t in first], message, [t.name for t in later]

    first, message, later = asyncio.run(main())
    assert first == ["search_tools"]
    assert isinstance(message, ToolMessage)
    assert isinstance(message.artifact, ToolSuccess)
    assert isinstance(message.artifact.value, FoundTools)
    assert [d.name for d in message.artifact.value.tools] == ["positive"]
    assert later == ["search_tools", "positive"]
