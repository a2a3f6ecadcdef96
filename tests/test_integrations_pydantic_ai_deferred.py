"""A runtime's deferred calls under pydantic-ai's deferred tools (issue 43, frameworks).

A call the runtime defers (`ToolPending`) ends the agent's run with pydantic-ai's own
`DeferredToolRequests` (an approval: `approvals`; an outside result: `calls`), and the
application's `DeferredToolResults` resume it: an approval (with edited arguments or not) runs
the journal's call exactly once, a `ToolDenied` denies it with its message, an external value is
supplied to it. The batch's other call ran once in the first run and is not run again. The
models are pydantic-ai's `FunctionModel`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from integrations_deferred import RAN, TOOLS
from pydantic_ai import (
    Agent,
    DeferredToolRequests,
    DeferredToolResults,
    ModelMessagesTypeAdapter,
    ToolApproved,
    ToolDenied,
)
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from runtime import DetachedState, Durable, FailureKind, ToolFailure, ToolSuccess
from runtime.embed import AsyncioRuntime, open_asyncio_runtime
from runtime.exceptions import ResultTypeError
from runtime.integrations.pydantic_ai import RuntimeToolset
from runtime.stores import SQLiteStore


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


def model(*calls: ToolCallPart) -> FunctionModel:
    """The model: first `calls` at once, then a text of what each call answered (by tool name)."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=list(calls))
        returns = [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
        answers = sorted(f"{p.tool_name}: {p.content}" for p in returns)
        return ModelResponse(parts=[TextPart(" | ".join(answers))])

    return FunctionModel(respond)


PAY_AND_NOTE = (
    ToolCallPart("pay", {"amount": 900, "to": "Bob"}, tool_call_id="p1"),
    ToolCallPart("note", {"text": "hi"}, tool_call_id="n1"),
)


def agent_of(rt: Any, *calls: ToolCallPart) -> Agent[None, str | DeferredToolRequests]:
    toolset = RuntimeToolset(rt)
    return Agent(
        model(*calls),
        toolsets=[toolset],
        capabilities=[toolset.decisions()],
        output_type=[str, DeferredToolRequests],  # type: ignore[arg-type]
    )


async def first_turn(rt: AsyncioRuntime) -> tuple[DeferredToolRequests, list[ModelMessage]]:
    run = await agent_of(rt, *PAY_AND_NOTE).run("pay Bob and note it")
    requests = run.output
    assert isinstance(requests, DeferredToolRequests)
    return requests, run.all_messages()


def test_a_call_that_needs_approval_is_a_deferred_tool_request_and_runs_once_approved() -> None:
    async def main() -> None:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            requests, history = await first_turn(rt)
            assert [c.tool_call_id for c in requests.approvals] == ["p1"]
            assert requests.calls == []
            (waiting,) = await rt.pending()
            assert requests.metadata["p1"]["detached_id"] == waiting.id
            assert requests.metadata["p1"]["reason"] == "approval"
            assert RAN == {"note hi": 1}

            results = requests.build_results(approvals={"p1": True})
            run = await agent_of(rt, *PAY_AND_NOTE).run(
                message_history=history, deferred_tool_results=results
            )
            assert run.output == "note: noted hi | pay: paid 900 EUR to Bob"
            status = await rt.detached(waiting.id).status()
            assert status.state is DetachedState.COMPLETED
            # resuming the same history again: the journal's call, not a second payment
            again = await agent_of(rt, *PAY_AND_NOTE).run(
                message_history=history, deferred_tool_results=results
            )
            assert again.output == run.output

    asyncio.run(main())
    assert RAN == {"note hi": 1, "pay 900 Bob": 1}


def test_approved_with_edited_arguments_runs_with_them() -> None:
    async def main() -> None:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            _, history = await first_turn(rt)
            edited = ToolApproved(override_args={"amount": 800, "to": "Bob"})
            results = DeferredToolResults(approvals={"p1": edited})
            run = await agent_of(rt, *PAY_AND_NOTE).run(
                message_history=history, deferred_tool_results=results
            )
            assert run.output == "note: noted hi | pay: paid 800 EUR to Bob"
            (entry,) = await rt.detached_calls()
            assert entry.arguments == '{"amount":800,"to":"Bob"}'

    asyncio.run(main())
    assert RAN == {"note hi": 1, "pay 800 Bob": 1}


def test_a_denial_with_a_message_denies_the_journals_call_and_the_model_reads_it() -> None:
    async def main() -> None:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            _, history = await first_turn(rt)
            results = DeferredToolResults(approvals={"p1": ToolDenied("not to Bob")})
            run = await agent_of(rt, *PAY_AND_NOTE).run(
                message_history=history, deferred_tool_results=results
            )
            assert run.output == "note: noted hi | pay: not to Bob"
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

    async def before() -> tuple[bytes, bytes]:
        async with open_asyncio_runtime(
            TOOLS, tracing=False, store=SQLiteStore(journal), durable=Durable(node="server-1")
        ) as rt:
            requests, history = await first_turn(rt)
            return ModelMessagesTypeAdapter.dump_json(history), requests.approvals[0].tool_call_id.encode()

    async def after(saved: bytes, call_id: str) -> None:
        async with open_asyncio_runtime(
            TOOLS, tracing=False, store=SQLiteStore(journal), durable=Durable(node="server-1")
        ) as rt:
            (waiting,) = await rt.pending()
            assert (waiting.tool, waiting.call_id) == ("pay", call_id)
            history = ModelMessagesTypeAdapter.validate_json(saved)
            # only the call id comes back (no metadata): the toolset finds the journal's call by it
            results = DeferredToolResults(approvals={call_id: True})
            run = await agent_of(rt, *PAY_AND_NOTE).run(
                message_history=history, deferred_tool_results=results
            )
            assert run.output == "note: noted hi | pay: paid 900 EUR to Bob"
            assert (await rt.detached(waiting.id).status()).state is DetachedState.COMPLETED

    saved, call_id = asyncio.run(before())
    assert RAN == {"note hi": 1}
    asyncio.run(after(saved, call_id.decode()))
    assert RAN == {"note hi": 1, "pay 900 Bob": 1}


BROWSER_AND_NOTE = (
    ToolCallPart("read_selection", {"tab": 3}, tool_call_id="r1"),
    ToolCallPart("note", {"text": "hi"}, tool_call_id="n1"),
)


def test_an_outside_result_is_a_deferred_call_and_the_external_value_is_supplied_to_the_journal() -> None:
    async def main() -> None:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            run = await agent_of(rt, *BROWSER_AND_NOTE).run("read tab 3")
            requests = run.output
            assert isinstance(requests, DeferredToolRequests)
            assert [c.tool_call_id for c in requests.calls] == ["r1"]
            assert requests.kind("r1") == "external"
            assert requests.metadata["r1"]["reason"] == "outside"
            history = run.all_messages()

            wrong = DeferredToolResults(calls={"r1": {"text": "Call me Ishmael."}})
            with pytest.raises(ResultTypeError):
                await agent_of(rt, *BROWSER_AND_NOTE).run(
                    message_history=history, deferred_tool_results=wrong
                )
            (still,) = await rt.pending()
            assert still.waiting_for == "outside"

            right = DeferredToolResults(calls={"r1": {"text": "Call me Ishmael.", "words": 3}})
            done = await agent_of(rt, *BROWSER_AND_NOTE).run(
                message_history=history, deferred_tool_results=right
            )
            assert done.output == 'note: noted hi | read_selection: {"text":"Call me Ishmael.","words":3}'
            (entry,) = await rt.detached_calls()
            assert isinstance(entry.result, ToolSuccess)
            assert entry.result.value == {"text": "Call me Ishmael.", "words": 3}

    asyncio.run(main())
    assert RAN == {"note hi": 1, "read_selection 3": 1}
