"""A runtime's deferred calls under LangGraph's interrupts (issue 43, frameworks).

In a graph with a checkpointer, `RuntimeToolNode` turns its batch's deferred calls into one
`interrupt` (LangChain's human-in-the-loop request: `action_requests`, `review_configs`), and
`Command(resume={"decisions": [...]})` takes each decision to the journal's call: approve or
edit runs it exactly once, reject denies it with its message, respond supplies an outside
result. The batch runs as a LangGraph task, so the node that runs again to resume gets the
other calls' results from the checkpoint: they are not run again. The model is LangChain's
`GenericFakeChatModel`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph")

from integrations_deferred import RAN, TOOLS
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition
from langgraph.types import Command

from runtime import DetachedState, Durable, FailureKind, ToolFailure, ToolPending
from runtime.embed import open_asyncio_runtime
from runtime.integrations.langchain import RuntimeToolNode
from runtime.stores import SQLiteStore


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


PAY_AND_NOTE = [
    {"name": "pay", "args": {"amount": 900, "to": "Bob"}, "id": "p1"},
    {"name": "note", "args": {"text": "hi"}, "id": "n1"},
]
THREAD = {"configurable": {"thread_id": "t1"}}


def graph(rt: Any, calls: list[dict[str, Any]], checkpointer: Any) -> Any:
    """model -> tools -> model: the model asks for `calls` at once, then says "done"."""
    chat = GenericFakeChatModel(
        messages=iter([AIMessage(content="", tool_calls=calls), AIMessage(content="done")])
    )

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await chat.ainvoke(state["messages"])]}

    built = StateGraph(MessagesState)
    built.add_node("agent", agent)
    built.add_node("tools", RuntimeToolNode(rt))
    built.add_edge(START, "agent")
    built.add_conditional_edges("agent", tools_condition)
    built.add_edge("tools", "agent")
    return built.compile(checkpointer=checkpointer)


def answers(state: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {m.tool_call_id: (m.status, m.content) for m in state["messages"] if isinstance(m, ToolMessage)}


async def interrupted(app: Any) -> dict[str, Any]:
    state = await app.ainvoke({"messages": [HumanMessage("pay Bob and note it")]}, THREAD)
    (paused,) = state["__interrupt__"]
    value: dict[str, Any] = paused.value
    return value


def test_a_call_that_needs_approval_interrupts_the_graph_and_runs_once_approved() -> None:
    async def main() -> None:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            app = graph(rt, PAY_AND_NOTE, InMemorySaver())
            review = await interrupted(app)
            (request,) = review["action_requests"]
            (waiting,) = await rt.pending()
            assert request["name"] == "pay"
            assert request["args"] == {"amount": 900, "to": "Bob"}
            assert (request["id"], request["detached_id"], request["reason"]) == (
                "p1",
                waiting.id,
                "approval",
            )
            assert review["review_configs"] == [
                {"action_name": "pay", "allowed_decisions": ["approve", "edit", "reject"]}
            ]
            assert RAN == {"note hi": 1}

            state = await app.ainvoke(Command(resume={"decisions": [{"type": "approve"}]}), THREAD)
            assert answers(state) == {
                "p1": ("success", "paid 900 EUR to Bob"),
                "n1": ("success", "noted hi"),
            }
            assert state["messages"][-1].content == "done"
            assert (await rt.detached(waiting.id).status()).state is DetachedState.COMPLETED

    asyncio.run(main())
    assert RAN == {"note hi": 1, "pay 900 Bob": 1}


def test_an_edit_decision_runs_the_call_with_the_edited_arguments() -> None:
    async def main() -> None:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            app = graph(rt, PAY_AND_NOTE, InMemorySaver())
            await interrupted(app)
            edit = {"type": "edit", "edited_action": {"name": "pay", "args": {"amount": 800, "to": "Bob"}}}
            state = await app.ainvoke(Command(resume={"decisions": [edit]}), THREAD)
            assert answers(state)["p1"] == ("success", "paid 800 EUR to Bob")

    asyncio.run(main())
    assert RAN == {"note hi": 1, "pay 800 Bob": 1}


def test_a_reject_decision_denies_the_journals_call_with_its_message() -> None:
    async def main() -> None:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            app = graph(rt, PAY_AND_NOTE, InMemorySaver())
            await interrupted(app)
            reject = {"type": "reject", "message": "Bob is not a known payee"}
            state = await app.ainvoke(Command(resume={"decisions": [reject]}), THREAD)
            status, content = answers(state)["p1"]
            assert status == "error"
            assert "Bob is not a known payee" in content
            (entry,) = await rt.detached_calls()
            assert isinstance(entry.result, ToolFailure)
            assert entry.result.kind is FailureKind.REJECTED

    asyncio.run(main())
    assert RAN == {"note hi": 1}


def test_an_approval_resumes_the_graph_after_the_runtime_restarted_on_its_sqlite_journal(
    tmp_path: Path,
) -> None:
    checkpointer = InMemorySaver()  # the graph's own state, kept by the application

    def durable() -> dict[str, Any]:
        return {"store": SQLiteStore(tmp_path / "calls.db"), "durable": Durable(node="server-1")}

    async def before() -> None:
        async with open_asyncio_runtime(TOOLS, tracing=False, **durable()) as rt:
            await interrupted(graph(rt, PAY_AND_NOTE, checkpointer))

    async def after() -> None:
        async with open_asyncio_runtime(TOOLS, tracing=False, **durable()) as rt:
            (waiting,) = await rt.pending()
            app = graph(rt, [], checkpointer)  # a new process: its model's next turn
            state = await app.ainvoke(Command(resume={"decisions": [{"type": "approve"}]}), THREAD)
            assert answers(state) == {
                "p1": ("success", "paid 900 EUR to Bob"),
                "n1": ("success", "noted hi"),
            }
            assert (await rt.detached(waiting.id).status()).state is DetachedState.COMPLETED

    asyncio.run(before())
    assert RAN == {"note hi": 1}
    asyncio.run(after())
    assert RAN == {"note hi": 1, "pay 900 Bob": 1}


def test_an_outside_result_interrupts_and_a_respond_decision_supplies_it() -> None:
    calls = [{"name": "read_selection", "args": {"tab": 3}, "id": "r1"}, PAY_AND_NOTE[1]]

    async def main() -> None:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            app = graph(rt, calls, InMemorySaver())
            review = await interrupted(app)
            assert review["action_requests"][0]["reason"] == "outside"
            assert review["review_configs"][0]["allowed_decisions"] == ["respond", "reject"]
            respond = {"type": "respond", "result": {"text": "Call me Ishmael.", "words": 3}}
            state = await app.ainvoke(Command(resume={"decisions": [respond]}), THREAD)
            assert answers(state)["r1"] == ("success", '{"text":"Call me Ishmael.","words":3}')

    asyncio.run(main())
    assert RAN == {"note hi": 1, "read_selection 3": 1}


def test_without_a_checkpointer_a_deferred_call_is_its_pending_tool_message() -> None:
    async def main() -> None:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            node = RuntimeToolNode(rt)
            out = await node.ainvoke({"messages": [AIMessage(content="", tool_calls=PAY_AND_NOTE)]})
            pending, noted = out["messages"]
            assert isinstance(pending.artifact, ToolPending)
            assert pending.status == "success"
            assert "waits for one" in pending.content
            assert noted.content == "noted hi"

    asyncio.run(main())
