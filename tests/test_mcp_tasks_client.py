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
import sys
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

# The SDK's HTTP transport leaves httpx2's response iterators to the garbage collector when a
# stream (here: a task's subscriptions/listen) ends or is cancelled; trio closes them and warns.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Async generator 'httpx2\\.:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:Async generator 'httpcore2\\.:ResourceWarning"),
]

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


# -- status notifications, and what a server should not answer ---------------------------------

RAW_TASKS = ROOT / "tests" / "mcp_servers" / "raw_tasks.py"
SLOW_POLL = 30.0  # seconds: what the servers below tell us to wait between tasks/get


@pytest.fixture(scope="module")
def slow_url() -> Iterator[str]:
    """tests/mcp_servers/tasks.py telling its clients to poll every 30 s."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TASKS_POLL_INTERVAL", str(SLOW_POLL))
        with served(SERVER) as address:
            yield address


def raw(*args: str) -> Any:
    return mcp.stdio(sys.executable, [str(RAW_TASKS), *args], name="raw", mode="2026-07-28")


async def _seen(rt: Runtime) -> dict[str, Any]:
    result = await rt.call(call("seen"))
    assert isinstance(result, ToolSuccess), result
    seen: dict[str, Any] = json.loads(result.content)
    return seen


async def test_a_status_notification_wakes_the_poll_long_before_its_interval(
    slow_url: str, tmp_path: Path
) -> None:
    # the server says "poll every 30 s"; the task ends in 0.3 s and its notification says so
    with trio.fail_after(SLOW_POLL / 2):
        async for rt in _open(slow_url):
            started = trio.current_time()
            result = await rt.call(call("slow_write", path=str(tmp_path / "n.txt"), seconds=0.3))
            took = trio.current_time() - started
    assert isinstance(result, ToolSuccess), result
    assert result.content == "wrote n.txt"
    assert took < SLOW_POLL / 3


async def test_a_notification_is_a_hint_the_result_is_what_tasks_get_answers() -> None:
    # the server's notifications say "completed: lie"; its tasks/get says working, then "truth"
    with trio.fail_after(SLOW_POLL / 2):
        async with open_runtime(mcp_servers=[raw("--listen")], tracing=False) as rt:
            result = await rt.call(call("lying"))
            seen = await _seen(rt)
    assert isinstance(result, ToolSuccess), result
    assert result.content == "truth"
    assert seen["gets"] == {"lying-1": 2}  # woken twice, long before the 30 s interval
    assert seen["listens"] == [["lying-1"]]


async def test_without_notifications_the_task_is_polled_to_its_end() -> None:
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[raw()], tracing=False) as rt:  # listen refused: -32601
            result = await rt.call(call("polled"))
            seen = await _seen(rt)
    assert isinstance(result, ToolSuccess), result
    assert result.content == "polled"
    assert seen["gets"] == {"polled-1": 3}
    assert seen["listens"] == []


async def test_a_task_that_ends_at_once_is_not_kept_waiting_a_whole_poll_interval() -> None:
    # The server asks for polls 30 s apart (FastMCP's default is 5 s) of a task that is done on
    # the third tasks/get: the first polls come soon and back off to that interval (as FastMCP's
    # own client does), so the call is answered in well under a second, not in a minute.
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[raw()], tracing=False) as rt:
            started = trio.current_time()
            result = await rt.call(call("sleepy"))
            took = trio.current_time() - started
            seen = await _seen(rt)
    assert isinstance(result, ToolSuccess), result
    assert seen["gets"] == {"sleepy-1": 3}
    assert took < 20, took  # three 30 s polls before; ~0.35 s now (a loaded machine: seconds)


async def test_a_task_status_no_one_knows_is_an_error_naming_it_and_the_task_is_cancelled() -> None:
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[raw()], tracing=False) as rt:
            result = await rt.call(call("odd"))
            seen = await _seen(rt)
    assert isinstance(result, ToolFailure), result
    assert result.kind is FailureKind.ERROR
    assert "task odd-1 has status paused" in result.message
    assert seen["gets"] == {"odd-1": 1}  # at once: not polled on
    assert seen["cancels"] == ["odd-1"]


async def test_input_required_with_nothing_to_answer_is_given_up_after_a_few_polls() -> None:
    # no deadline on the call: before, it was polled for ever
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[raw()], tracing=False) as rt:
            result = await rt.call(call("mute"))
            seen = await _seen(rt)
    assert isinstance(result, ToolFailure), result
    assert result.kind is FailureKind.ERROR
    assert "input_required 10 times without an input request" in result.message
    assert seen["gets"] == {"mute-1": 10}
    assert len(seen["cancels"]) == 1


async def test_a_megabyte_task_id_is_refused_and_never_repeated() -> None:
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[raw()], tracing=False) as rt:
            result = await rt.call(call("huge"))
            seen = await _seen(rt)
    assert isinstance(result, ToolFailure), result
    assert result.kind is FailureKind.ERROR
    assert "an id this client refuses" in result.message
    assert len(result.message) < 1000
    assert seen["gets"] == {}  # never followed (nor sent back)
    assert seen["cancels"] == []
