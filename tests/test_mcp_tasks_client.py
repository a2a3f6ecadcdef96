"""MCP Tasks used as a client (SEP-2663): the runtime calls a remote server's task-augmented
tools through `open_runtime(mcp_servers=[...])`, against our own served tasks in a real server
process (tests/mcp_servers/tasks.py, `serve_http`, the stateless 2026-07-28 wire; it tells
clients to poll every 0.1 s): a "required" tool's call is a task followed to its result; a long
one is polled until it ends; our call's deadline cancels the remote task (its side effect is
not done); the task's questions are answered by our `on_elicit`; an "optional" tool is a task
only when the call is detached here.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import pytest
import trio
from served import served

from runtime import (
    Answer,
    DetachedState,
    Elicitation,
    FailureKind,
    Runtime,
    ToolCall,
    ToolFailure,
    ToolSuccess,
    mcp,
    open_runtime,
)

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "tests" / "mcp_servers" / "tasks.py"
LIMIT = 60  # seconds a test may take on a loaded machine


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with served(SERVER) as address:
        yield address


class User:
    """Our side's `on_elicit`: answers with `reply`, and keeps what it was asked."""

    def __init__(self, reply: Answer) -> None:
        self.reply = reply
        self.asked: list[Elicitation] = []

    async def on_elicit(self, question: Elicitation) -> Answer:
        self.asked.append(question)
        return self.reply


def remote(url: str) -> Any:
    return mcp.http(url, headers={"Authorization": "Bearer tok-alice"}, name="tasks", mode="2026-07-28")


def call(name: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=f"c-{name}", name=name, arguments=json.dumps(arguments))


async def _open(url: str, user: User | None = None) -> AsyncIterator[Runtime]:
    on_elicit = user.on_elicit if user is not None else None
    async with open_runtime(mcp_servers=[remote(url)], on_elicit=on_elicit, tracing=False) as rt:
        yield rt


async def _until_exists(path: Path) -> None:
    for _ in range(LIMIT * 20):
        if await trio.Path(path).exists():
            return
        await trio.sleep(0.05)


async def test_a_required_task_tool_returns_its_result(url: str, tmp_path: Path) -> None:
    with trio.fail_after(LIMIT):
        async for rt in _open(url):
            result = await rt.call(call("slow_write", path=str(tmp_path / "a.txt"), seconds=0))
    assert isinstance(result, ToolSuccess), result
    assert result.content == "wrote a.txt"
    assert (tmp_path / "a.txt").read_text() == "written"


async def test_a_long_task_behind_a_short_poll_completes(
    url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="runtime.mcp")
    with trio.fail_after(LIMIT):
        async for rt in _open(url):
            # 1.5 s of work behind a 0.1 s poll: many tasks/get rounds, one result
            result = await rt.call(call("slow_write", path=str(tmp_path / "long.txt"), seconds=1.5))
    assert isinstance(result, ToolSuccess), result
    assert result.content == "wrote long.txt"
    assert sum("became task" in r.getMessage() for r in caplog.records) == 1


async def test_our_deadline_cancels_the_remote_task_and_its_side_effect_is_not_done(
    url: str, tmp_path: Path
) -> None:
    target = tmp_path / "never.txt"
    with trio.fail_after(LIMIT):
        async for rt in _open(url):
            result = await rt.call(call("slow_write", path=str(target), seconds=3), timeout=1.0)
            assert isinstance(result, ToolFailure)
            assert result.kind is FailureKind.TIMEOUT
            assert (tmp_path / "never.txt.started").exists()  # it did start remotely
            await trio.sleep(3.5)  # past the time the remote tool would have written it
    assert not target.exists()


async def test_cancelling_our_call_cancels_the_remote_task(url: str, tmp_path: Path) -> None:
    target = tmp_path / "cancelled.txt"
    started = tmp_path / "cancelled.txt.started"
    with trio.fail_after(LIMIT):
        async for rt in _open(url):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(rt.call, call("slow_write", path=str(target), seconds=3))
                await _until_exists(started)
                nursery.cancel_scope.cancel()
            await trio.sleep(3.5)
    assert not target.exists()


async def test_a_tasks_question_is_answered_by_our_on_elicit(url: str) -> None:
    user = User(Answer.accept({"confirm": True}))
    with trio.fail_after(LIMIT):
        async for rt in _open(url, user):
            result = await rt.call(call("confirm_delete", filename="a.txt"))
    assert isinstance(result, ToolSuccess), result
    assert result.content == "deleted a.txt"
    assert [q.message for q in user.asked] == ["Delete a.txt?"]


async def test_a_remote_approval_is_given_or_refused_by_our_on_elicit(url: str) -> None:
    yes, no = User(Answer.accept({})), User(Answer.decline())
    with trio.fail_after(LIMIT):
        async for rt in _open(url, yes):
            approved = await rt.call(call("transfer", amount=5))
        async for rt in _open(url, no):
            refused = await rt.call(call("transfer", amount=6))
    assert isinstance(approved, ToolSuccess), approved
    assert approved.content == "transferred 5"
    assert len(yes.asked) == 1
    assert "transfer" in yes.asked[0].message
    assert isinstance(refused, ToolFailure)
    assert refused.kind is FailureKind.REJECTED


async def test_a_question_no_one_here_can_answer_fails_the_call_and_cancels_the_task(url: str) -> None:
    with trio.fail_after(LIMIT):
        async for rt in _open(url):  # no on_elicit
            result = await rt.call(call("confirm_delete", filename="b.txt"))
    assert isinstance(result, ToolFailure)
    assert result.kind is FailureKind.UNAVAILABLE
    assert "no one can answer" in result.message  # the task's question reached us (not -32021)


async def test_an_optional_task_tool_is_a_task_only_when_detached_here(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="runtime.mcp")
    with trio.fail_after(LIMIT):
        async for rt in _open(url):
            plain = await rt.call(call("report", seconds=0.5))
            assert not any("became task" in r.getMessage() for r in caplog.records)
            handle = await rt.detach(call("report", seconds=0.3))
            detached = await handle.result()
            status = await handle.status()
    assert isinstance(plain, ToolSuccess)
    assert plain.content == "report after 0.5 s"
    assert isinstance(detached, ToolSuccess), detached
    assert detached.content == "report after 0.3 s"
    assert status.state is DetachedState.COMPLETED
    assert sum("became task" in r.getMessage() for r in caplog.records) == 1


async def test_a_detached_calls_remote_question_waits_in_our_journal_for_its_answer(url: str) -> None:
    with trio.fail_after(LIMIT):
        async for rt in _open(url):  # no on_elicit: the detached call's journal holds the question
            handle = await rt.detach(call("confirm_delete", filename="c.txt"))
            async with aclosing(handle.watch()) as statuses:
                async for status in statuses:
                    if status.state is not DetachedState.WORKING:
                        break
            assert status.state is DetachedState.INPUT_REQUIRED
            assert isinstance(status.question, Elicitation)
            assert status.question.message == "Delete c.txt?"
            await handle.answer(Answer.accept({"confirm": True}))
            result = await handle.result()
    assert isinstance(result, ToolSuccess), result
    assert result.content == "deleted c.txt"
