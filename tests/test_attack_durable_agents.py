"""Hostile tests of openai-agents approvals over the runtime's journal (issue 43), written from
docs/how-to/integrations.md: one tool list serves many conversations, as an agent server's does.

Each test is named by the promise it checks; each failed on the code before its fix."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("agents")

from agents import Agent, Runner, set_trace_processors
from agents.testing import ScriptedModel, assistant_message, function_call

from runtime import tool
from runtime.embed import open_asyncio_runtime
from runtime.integrations.openai_agents import function_tools

paid: list[tuple[int, str]] = []


@tool(requires_approval=lambda args: args.amount > 100)
async def pay(amount: int, to: str) -> str:
    """Pay someone."""
    paid.append((amount, to))
    return f"paid {amount} EUR to {to}"


def _cashier(tools: list, amount: int, to: str) -> Agent:
    """A conversation whose model pays once, with the call id its provider gives every first call."""
    model = ScriptedModel(
        [[function_call("pay", {"amount": amount, "to": to}, call_id="call_0")], [assistant_message("done")]]
    )
    return Agent(name="cashier", model=model, tools=tools)


def test_approving_one_conversations_call_runs_that_call_not_anothers_with_the_same_call_id() -> None:
    """The docs: "An approved call runs the journal's call, exactly once". Two conversations on
    one tool list (an agent server's) whose models gave their calls the same id: approving the
    first conversation's payment (900 to Bob) ran the second's (5000 to Mallory)."""
    paid.clear()

    async def main() -> None:
        async with open_asyncio_runtime([pay]) as rt:
            tools = function_tools(rt)
            bob, mallory = _cashier(tools, 900, "Bob"), _cashier(tools, 5000, "Mallory")
            first = await Runner.run(bob, "pay Bob")
            await Runner.run(mallory, "pay Mallory")
            assert paid == []
            state = first.to_state()
            (item,) = state.get_interruptions()
            state.approve(item)
            await Runner.run(bob, state)
            assert paid == [(900, "Bob")]
            waiting = {s.arguments: s.state.value for s in await rt.detached_calls()}
            assert list(waiting.values()).count("input_required") == 1  # Mallory's still waits

    set_trace_processors([])
    asyncio.run(main())


def test_two_conversations_calls_with_the_same_id_each_run_once_and_each_reads_its_own_result() -> None:
    """A tool that may wait for an approval runs its call in the SDK's `needs_approval`, and its
    result is kept for `on_invoke_tool`. Two conversations at once on one tool list, whose
    models gave the same call id, each paying under the approval threshold: one read the
    other's result, and the other's call ran a second time (a payment made twice)."""
    paid.clear()

    async def main() -> None:
        async with open_asyncio_runtime([pay]) as rt:
            tools = function_tools(rt)
            ann, eve = _cashier(tools, 20, "Ann"), _cashier(tools, 30, "Eve")
            a, e = await asyncio.gather(Runner.run(ann, "pay Ann"), Runner.run(eve, "pay Eve"))
            outputs = [[i.output for i in r.new_items if i.type == "tool_call_output_item"] for r in (a, e)]
            assert outputs == [["paid 20 EUR to Ann"], ["paid 30 EUR to Eve"]]
            assert sorted(paid) == [(20, "Ann"), (30, "Eve")]

    set_trace_processors([])
    asyncio.run(main())


def test_rejecting_one_conversations_call_denies_that_call_not_anothers_with_the_same_call_id() -> None:
    """Two conversations on one tool list whose models gave their calls the same id both wait
    for an approval; the first conversation's state rejects its call (900 to Bob). Before,
    the journal's entries were matched by tool and call id alone: Mallory's waiting call was
    denied with Bob's rejection message too. After a restart of the run state (to_json /
    from_json) as well."""
    paid.clear()

    async def main() -> None:
        async with open_asyncio_runtime([pay]) as rt:
            tools = function_tools(rt)
            bob, mallory = _cashier(tools, 900, "Bob"), _cashier(tools, 5000, "Mallory")
            first = await Runner.run(bob, "pay Bob")
            await Runner.run(mallory, "pay Mallory")
            state = first.to_state()
            (item,) = state.get_interruptions()
            state.reject(item, rejection_message="not Bob")
            restored = await type(state).from_json(bob, state.to_json())
            await Runner.run(bob, restored)
            assert paid == []
            calls = {s.arguments: s for s in await rt.detached_calls()}
            by_whom = {json.loads(arguments)["to"]: s for arguments, s in calls.items()}
            assert by_whom["Bob"].state.value == "failed"  # denied: its result is the rejection
            assert "not Bob" in str(by_whom["Bob"].result)
            assert by_whom["Mallory"].state.value == "input_required"  # still waits for its own answer

    set_trace_processors([])
    asyncio.run(main())
