"""Hostile tests of calls that outlive a request (issue 43), written from the docs and the code:
MCP Tasks served (several questions answered by key, `task_from="background"`), MCP Tasks used
as a client (a remote task followed here), and what a hostile client or a failing server sends.

Each test is named by the promise it checks; each failed on the code before its fix."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

import mcp_types as types
import msgspec
import pytest
import trio
from mcp import Client
from mcp.client._memory import InMemoryTransport
from mcp.client.extension import ClientExtension, ResultClaim

from runtime import Answer, CallContext, ToolCall, open_runtime, tool
from runtime import mcp as rmcp
from runtime.mcp._client_tasks import (
    TASKS,
    TaskCreated,
    _GetTask,
    _send,
    _TaskIdParams,
    _TaskUpdateParams,
    _UpdateTask,
)
from runtime.mcp._server import ServedRuntime
from runtime.messages import FailureKind, ToolFailure

ROOT = Path(__file__).resolve().parent.parent


class _Takes(ClientExtension):
    """A client that declares the tasks extension and drives its tasks by hand (the test's)."""

    identifier = TASKS

    def claims(self) -> tuple[ResultClaim[Any], ...]:
        async def resolve(created: TaskCreated, claim: Any) -> types.CallToolResult:
            raise AssertionError("the test reads CreateTaskResults itself (allow_claimed=True)")

        return (ResultClaim(result_type="task", model=TaskCreated, resolve=resolve),)


async def _never(context: object, params: object) -> types.ElicitResult:
    raise AssertionError("the rounds are driven by hand here")


async def _task(session: Any, task_id: str) -> dict[str, Any]:
    return await _send(session, _GetTask(params=_TaskIdParams(task_id=task_id)))


async def _update(session: Any, task_id: str, responses: dict[str, Any]) -> dict[str, Any]:
    return await _send(
        session, _UpdateTask(params=_TaskUpdateParams(task_id=task_id, input_responses=responses))
    )


async def _ended(session: Any, task_id: str) -> dict[str, Any]:
    while True:
        task = await _task(session, task_id)
        if task.get("status") not in ("working", "input_required") or task.get("inputRequests"):
            return task
        await trio.sleep(0.1)


class Named(msgspec.Struct):
    name: str = ""


# -- task_from="background": the questions asked in the request, answered again in the task ----


@tool(task="required", task_from="background")
async def name_items(ctx: CallContext) -> str:
    """Ask a name for each of two items (the same key each time), then go on as a task."""
    names = []
    for i in range(2):
        answer = await ctx.elicit(f"Name of item {i}?", Named, key="name")
        names.append(answer.value.name if answer.value is not None else answer.action)
    await ctx.background()
    return ", ".join(names)


async def test_a_question_asked_twice_before_background_gets_each_answer_in_the_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The docs: at `ctx.background()` the detached call runs the tool again and "its earlier
    questions are answered from those answers (by key) without being asked". A tool that asks
    under the same key twice (a loop) got the second answer for its first question, and its
    second question asked again in the task."""
    async with open_runtime([name_items], tracing=False) as rt:
        server = ServedRuntime(rt)
        async with Client(
            InMemoryTransport(server.server),
            mode="2026-07-28",
            elicitation_callback=_never,
            extensions=[_Takes()],
        ) as client:
            session = client.session
            reply: Any = await session.call_tool(
                "name_items", {}, allow_input_required=True, allow_claimed=True
            )
            given: dict[str, types.ElicitResult] = {}
            while isinstance(reply, types.InputRequiredResult):
                for key, request in (reply.input_requests or {}).items():
                    item = request.params.message.split()[-1].rstrip("?")  # type: ignore[union-attr]
                    given[key] = types.ElicitResult(action="accept", content={"name": f"item-{item}"})
                reply = await session.call_tool(
                    "name_items",
                    {},
                    allow_input_required=True,
                    allow_claimed=True,
                    request_state=reply.request_state,
                    input_responses=given,
                )
            assert isinstance(reply, TaskCreated)
            task = await _ended(session, reply.task_id)
            assert task.get("inputRequests") is None, "a question answered in the request is asked again"
            assert task["status"] == "completed"
            assert task["result"]["content"][0]["text"] == "item-0, item-1"


# -- MCP Tasks as a client: a remote task followed here -----------------------------------------


async def test_a_remote_task_forgotten_while_its_question_was_answered_is_unavailable_not_rejected() -> None:
    """The docs (mcp-client.md): "a task the server cancelled or forgot `UNAVAILABLE`". A task
    the server forgot while our user answered its question (the server's tasks/update: -32602,
    "no task") was REJECTED, the kind that tells the model to fix its arguments."""

    async def slow_user(question: Any) -> Answer:
        await trio.sleep(1.5)  # the remote task gave up after 0.5 s and was forgotten 0.2 s later
        return Answer.accept({"go": True})

    server = rmcp.stdio(
        sys.executable,
        args=[str(ROOT / "tests" / "attack_durable_server.py")],
        cwd=str(ROOT),
        mode="2026-07-28",
        connect_timeout=30,
        call_timeout=30,
    )
    async with open_runtime(mcp_servers=[server], on_elicit=slow_user, tracing=False) as rt:
        result = await rt.call(ToolCall(id="c1", name="impatient", arguments={}))
    assert isinstance(result, ToolFailure)
    assert result.kind is FailureKind.UNAVAILABLE, result


# -- answers a journal cannot keep (text with a lone surrogate: JSON's "\ud800") --------------


@tool(task="required")
async def ask_name(ctx: CallContext) -> str:
    """Ask a name, as a task."""
    answer = await ctx.elicit("Name?", Named, key="name")
    return f"hello {answer.value.name if answer.value is not None else answer.action}"


async def test_an_answer_the_journal_cannot_keep_is_refused_as_such_and_the_task_still_asks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Bad input gets a clear answer and changes nothing. A tasks/update whose answer cannot be
    journaled was answered -32602 "no task 'dc_...'": the client is told its task does not exist
    (and drops it), while it waits on."""
    from mcp import MCPError

    async with open_runtime([ask_name], tracing=False) as rt:
        server = ServedRuntime(rt)
        async with Client(
            InMemoryTransport(server.server),
            mode="2026-07-28",
            elicitation_callback=_never,
            extensions=[_Takes()],
        ) as client:
            session = client.session
            created: Any = await session.call_tool(
                "ask_name", {}, allow_input_required=True, allow_claimed=True
            )
            task = await _ended(session, created.task_id)
            assert set(task["inputRequests"]) == {"name"}
            with pytest.raises(MCPError) as refused:
                await _update(
                    session, created.task_id, {"name": {"action": "accept", "content": {"name": "\ud800"}}}
                )
            assert refused.value.error.code == types.INVALID_PARAMS
            assert "no task" not in refused.value.error.message, refused.value.error.message
            assert "name" in refused.value.error.message
            task = await _task(session, created.task_id)
            assert task["status"] == "input_required"
            await _update(
                session, created.task_id, {"name": {"action": "accept", "content": {"name": "Ada"}}}
            )
            task = await _ended(session, created.task_id)
            assert task["result"]["content"][0]["text"] == "hello Ada"


@tool(task="required", task_from="background")
async def onboard(ctx: CallContext) -> str:
    """Ask a name in the request, then go on as a task."""
    answer = await ctx.elicit("Your name?", Named, key="user_name")
    await ctx.background()
    return f"welcome, {answer.value.name if answer.value is not None else answer.action}"


async def test_a_background_start_whose_answers_cannot_be_journaled_is_a_tool_error() -> None:
    """Bad input gets a typed failure. A `task_from="background"` call whose client answered
    with text the journal cannot keep raised out of the server's handler (the client got
    -32603 "Internal server error", the server logged a traceback)."""
    async with open_runtime([onboard], tracing=False) as rt:
        server = ServedRuntime(rt)
        async with Client(
            InMemoryTransport(server.server),
            mode="2026-07-28",
            elicitation_callback=_never,
            extensions=[_Takes()],
        ) as client:
            session = client.session
            first: Any = await session.call_tool("onboard", {}, allow_input_required=True, allow_claimed=True)
            assert isinstance(first, types.InputRequiredResult)
            reply = await session.call_tool(
                "onboard",
                {},
                allow_input_required=True,
                allow_claimed=True,
                request_state=first.request_state,
                input_responses={
                    "user_name": types.ElicitResult(action="accept", content={"name": "\ud800"})
                },
            )
            assert isinstance(reply, types.CallToolResult)
            assert reply.is_error
            assert await rt.detached_calls() == []  # nothing was started


# -- promises that held (kept as tests) ---------------------------------------------------------


@tool(task=True)
async def two_names(ctx: CallContext) -> str:
    """Ask two names at once."""
    got: dict[str, str] = {}

    async def ask(key: str) -> None:
        answer = await ctx.elicit(f"Name {key}?", Named, key=key)
        got[key] = answer.value.name if answer.value is not None else answer.action

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask, "first")
        nursery.start_soon(ask, "second")
    return f"first={got['first']} second={got['second']}"


async def _open_questions(handle: Any, n: int) -> Any:
    async with contextlib.aclosing(handle.watch()) as statuses:
        async for status in statuses:
            if len(status.questions) >= n:
                return status
    raise AssertionError("it ended without asking")


async def test_one_key_answered_at_once_from_two_runtimes_on_one_store_takes_one_answer(
    tmp_path: Path,
) -> None:
    """Two server processes (two runtimes on one SQLite journal) answer the same question at
    once: one answer is taken, the other is refused (CallStateError), the other question
    stays open, and the tool sees exactly the answer that was taken."""
    from runtime import Durable
    from runtime.exceptions import CallStateError
    from runtime.stores import SQLiteStore

    fast = Durable(poll_interval=0.05, lease=5)
    async with (
        open_runtime([two_names], store=SQLiteStore(tmp_path / "j.db"), durable=fast, tracing=False) as a,
        open_runtime([two_names], store=SQLiteStore(tmp_path / "j.db"), durable=fast, tracing=False) as b,
    ):
        handle = await a.detach(ToolCall(id="c1", name="two_names", arguments={}), principal="p")
        await _open_questions(handle, 2)
        outcomes: list[str] = []

        async def answer(rt: Any, name: str) -> None:
            try:
                await rt.detached(handle.id, principal="p").answer(Answer.accept({"name": name}), key="first")
                outcomes.append(name)
            except CallStateError:
                outcomes.append("refused")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(answer, a, "from-a")
            nursery.start_soon(answer, b, "from-b")
        assert sorted(outcomes)[-1] == "refused"
        assert len([o for o in outcomes if o != "refused"]) == 1
        (taken,) = [o for o in outcomes if o != "refused"]
        status = await handle.status()
        assert set(status.questions) == {"second"}
        await b.detached(handle.id, principal="p").answer(Answer.accept({"name": "Bo"}), key="second")
        with trio.fail_after(10):
            result = await handle.result()
        assert result.content == f"first={taken} second=Bo"


async def test_a_cancel_while_questions_are_open_ends_the_call_cancelled_and_answers_are_refused(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from runtime.exceptions import CallStateError

    async with open_runtime([two_names], tracing=False) as rt:
        handle = await rt.detach(ToolCall(id="c1", name="two_names", arguments={}))
        await _open_questions(handle, 2)
        status = await handle.cancel()
        assert status.done
        assert status.state.value == "cancelled"
        assert status.questions == {}
        with pytest.raises(CallStateError):
            await handle.answer(Answer.accept({"name": "late"}), key="first")
        assert (await handle.cancel()).state.value == "cancelled"  # idempotent


async def test_a_deadline_passing_while_questions_are_open_ends_the_call_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime([two_names], tracing=False) as rt:
        handle = await rt.detach(ToolCall(id="c1", name="two_names", arguments={}), timeout=30)
        await _open_questions(handle, 2)
        await handle.answer(Answer.accept({"name": "Ann"}), key="first")
        result = await handle.result()
        assert isinstance(result, ToolFailure)
        assert result.kind is FailureKind.TIMEOUT
        assert (await handle.status()).questions == {}


async def test_tasks_update_answers_for_keys_never_asked_change_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_runtime([two_names], tracing=False) as rt:
        server = ServedRuntime(rt)
        async with Client(
            InMemoryTransport(server.server),
            mode="2026-07-28",
            elicitation_callback=_never,
            extensions=[_Takes()],
        ) as client:
            session = client.session
            created: Any = await session.call_tool(
                "two_names", {}, allow_input_required=True, allow_claimed=True
            )
            await _open_questions(rt.detached(created.task_id), 2)
            accept = {"action": "accept", "content": {"name": "x"}}
            await _update(session, created.task_id, {"approval": accept, "third": accept, "first-2": accept})
            task = await _task(session, created.task_id)
            assert set(task["inputRequests"]) == {"first", "second"}
            await _update(session, created.task_id, {"first": accept, "second": {"action": "decline"}})
            task = await _ended(session, created.task_id)
            assert task["result"]["content"][0]["text"] == "first=x second=decline"
