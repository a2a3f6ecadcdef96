"""A runtime's deferred calls under openai-agents' approvals (issue 43, frameworks).

A call the runtime defers for approval (`ToolPending`) is the SDK's own interruption
(`result.interruptions`), and the SDK's own API resumes it: `state.approve(item)` runs the
journal's call exactly once (however many times the state is resumed), `state.reject(item,
rejection_message=...)` denies it with that message, and a `RunState` serialized with
`to_json` resumes after the runtime restarted on its SQLite journal. The turn's other call ran
once in the first run and is not run again. The model is the SDK's own `ScriptedModel`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, Runner, RunState, set_trace_processors
from agents.testing import ScriptedModel, assistant_message, function_call
from integrations_deferred import RAN, TOOLS

from runtime import DetachedState, Durable, FailureKind, ToolFailure
from runtime.embed import AsyncioRuntime, open_asyncio_runtime
from runtime.integrations.openai_agents import function_tools
from runtime.stores import SQLiteStore


@pytest.fixture(autouse=True)
def _clear() -> Iterator[None]:
    RAN.clear()
    set_trace_processors([])  # the SDK's default processor exports to OpenAI's backend: never in tests
    yield
    set_trace_processors([])


def pay_and_note() -> list[Any]:
    """The model's first turn: a payment (waits for approval) and a note, at once."""
    return [
        function_call("pay", {"amount": 900, "to": "Bob"}, call_id="p1"),
        function_call("note", {"text": "hi"}, call_id="n1"),
    ]


def agent_of(rt: AsyncioRuntime, model: ScriptedModel) -> Agent[None]:
    return Agent(name="assistant", model=model, tools=function_tools(rt))


def outputs(model: ScriptedModel, turn: int) -> dict[str, str]:
    """The tool outputs the model read on `turn`, by call id."""
    return {
        item["call_id"]: item["output"]
        for item in model.calls[turn].input
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }


def test_a_call_that_needs_approval_is_an_interruption_and_runs_once_approved() -> None:
    async def main() -> None:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            model = ScriptedModel([pay_and_note(), [assistant_message("done")], [assistant_message("again")]])
            agent = agent_of(rt, model)
            first = await Runner.run(agent, "pay Bob and note it")
            assert [(i.tool_name, i.call_id) for i in first.interruptions] == [("pay", "p1")]
            (waiting,) = await rt.pending()
            assert (waiting.tool, waiting.call_id, waiting.waiting_for) == ("pay", "p1", "approval")
            assert RAN == {"note hi": 1}

            state = first.to_state()
            saved = state.to_json()
            state.approve(first.interruptions[0])
            done = await Runner.run(agent, state)
            assert done.final_output == "done"
            assert outputs(model, 1) == {"n1": "noted hi", "p1": "paid 900 EUR to Bob"}
            assert (await rt.detached(waiting.id).status()).state is DetachedState.COMPLETED

            # the same approval resumed again: the journal's call, not a second payment
            again_state = await RunState.from_json(agent, saved)
            again_state.approve(again_state.get_interruptions()[0])
            again = await Runner.run(agent, again_state)
            assert again.final_output == "again"
            assert outputs(model, 2) == {"n1": "noted hi", "p1": "paid 900 EUR to Bob"}

    asyncio.run(main())
    assert RAN == {"note hi": 1, "pay 900 Bob": 1}


def test_a_rejection_with_a_message_denies_the_journals_call_and_the_model_reads_it() -> None:
    async def main() -> None:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            model = ScriptedModel([pay_and_note(), [assistant_message("ok, not paid")]])
            agent = agent_of(rt, model)
            first = await Runner.run(agent, "pay Bob and note it")
            state = first.to_state()
            state.reject(first.interruptions[0], rejection_message="not to Bob")
            done = await Runner.run(agent, state)
            assert done.final_output == "ok, not paid"
            assert outputs(model, 1) == {"n1": "noted hi", "p1": "not to Bob"}
            (entry,) = await rt.detached_calls()
            assert entry.state is DetachedState.FAILED
            assert isinstance(entry.result, ToolFailure)
            assert entry.result.kind is FailureKind.REJECTED
            assert "not to Bob" in entry.result.message
            assert await rt.pending() == []

    asyncio.run(main())
    assert RAN == {"note hi": 1}


def test_an_approval_resumes_after_the_runtime_restarted_on_its_sqlite_journal(tmp_path: Path) -> None:
    journal = tmp_path / "calls.db"

    def runtime() -> Any:
        return open_asyncio_runtime(
            TOOLS, tracing=False, store=SQLiteStore(journal), durable=Durable(node="server-1")
        )

    async def before() -> str:
        async with runtime() as rt:
            first = await Runner.run(agent_of(rt, ScriptedModel([pay_and_note()])), "pay Bob and note it")
            assert len(first.interruptions) == 1
            return first.to_state().to_string()

    async def after(saved: str) -> None:
        async with runtime() as rt:
            (waiting,) = await rt.pending()
            assert (waiting.tool, waiting.call_id) == ("pay", "p1")
            model = ScriptedModel([[assistant_message("done")]])
            agent = agent_of(rt, model)
            state = await RunState.from_string(agent, saved)
            (item,) = state.get_interruptions()
            state.approve(item)
            done = await Runner.run(agent, state)
            assert done.final_output == "done"
            assert outputs(model, 0) == {"n1": "noted hi", "p1": "paid 900 EUR to Bob"}
            assert (await rt.detached(waiting.id).status()).state is DetachedState.COMPLETED

    saved = asyncio.run(before())
    assert RAN == {"note hi": 1}
    asyncio.run(after(saved))
    assert RAN == {"note hi": 1, "pay 900 Bob": 1}


def test_always_approve_approves_the_tools_later_calls_in_the_runtime_too() -> None:
    async def main() -> None:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            later = [function_call("pay", {"amount": 50, "to": "Ann"}, call_id="p2")]
            model = ScriptedModel([pay_and_note(), later, [assistant_message("done")]])
            agent = agent_of(rt, model)
            first = await Runner.run(agent, "pay Bob and note it")
            state = first.to_state()
            state.approve(first.interruptions[0], always_approve=True)
            done = await Runner.run(agent, state)
            assert done.interruptions == []
            assert done.final_output == "done"
            assert outputs(model, 2)["p2"] == "paid 50 EUR to Ann"
            assert await rt.pending() == []

    asyncio.run(main())
    assert RAN == {"note hi": 1, "pay 900 Bob": 1, "pay 50 Ann": 1}
