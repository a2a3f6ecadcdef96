"""MCP Tasks (SEP-2663, `io.modelcontextprotocol/tasks`) between FastMCP 4 and us, both ways,
with real processes: FastMCP's server and client run from their own virtualenv
(`.venv-fastmcp`, tests/fastmcp_venv.py: fastmcp-slim and fastmcp-tasks 4.1.4, mcp 2.3.0).

- Our client against FastMCP's `task=True` tools (tests/fastmcp_side/server.py over stdio; the
  version is asked for, 2026-07-28 is what both speak). FastMCP's listing says nothing of a
  tool's task support at 2026-07-28, so a "required" tool is learned from its -32021, and a
  call detached here offers the server a task because the server declared the extension.
- FastMCP's client (tests/fastmcp_side/client.py, one process per step, printing what it saw as
  JSON) against our served tasks (tests/mcp_servers/tasks.py over streamable HTTP).

Real processes and sockets, so real time; each test is bounded by `fail_after(LIMIT)`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from fastmcp_venv import ensure
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
SIDE = ROOT / "tests" / "fastmcp_side"
OURS = ROOT / "tests" / "mcp_servers" / "tasks.py"
LIMIT = 60  # seconds a test may take on a loaded machine


@pytest.fixture(scope="module")
def fastmcp_python() -> Path:
    return ensure()


def call(name: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=f"c-{name}", name=name, arguments=json.dumps(arguments))


class User:
    """Our side's `on_elicit`: answers with `reply`, and keeps what it was asked."""

    def __init__(self, reply: Answer) -> None:
        self.reply = reply
        self.asked: list[Elicitation] = []

    async def on_elicit(self, question: Elicitation) -> Answer:
        self.asked.append(question)
        return self.reply


async def _ours_against_fastmcp(python: Path, user: User | None = None) -> AsyncIterator[Runtime]:
    # FastMCP takes ~2.5 s to import; a loaded machine took over the default 10 s to answer
    server = mcp.stdio(str(python), [str(SIDE / "server.py")], name="fastmcp", connect_timeout=45)
    on_elicit = user.on_elicit if user is not None else None
    async with open_runtime(mcp_servers=[server], on_elicit=on_elicit, tracing=False) as rt:
        yield rt


def _logged(caplog: pytest.LogCaptureFixture, words: str) -> int:
    return sum(words in r.getMessage() for r in caplog.records)


# -- our client, FastMCP's server ----------------------------------------------------------------


async def test_a_fastmcp_task_only_tool_is_called_as_a_task_and_returns_its_result(
    fastmcp_python: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="runtime.mcp")
    with trio.fail_after(LIMIT):
        async for rt in _ours_against_fastmcp(fastmcp_python):
            first = await rt.call(call("slow_write", path=str(tmp_path / "a.txt"), seconds=0.5))
            second = await rt.call(call("slow_write", path=str(tmp_path / "b.txt"), seconds=0))
    assert isinstance(first, ToolSuccess), first
    assert first.content == "wrote a.txt"
    assert isinstance(second, ToolSuccess), second
    assert (tmp_path / "a.txt").read_text() == (tmp_path / "b.txt").read_text() == "written"
    assert (tmp_path / "a.txt.started").read_text() == "started\n"  # refused first, then run once
    assert _logged(caplog, "became task") == 2
    assert _logged(caplog, "only as a task") == 1  # learned from the first call's -32021


async def test_a_fastmcp_tasks_failure_is_our_calls_failure_with_its_message(fastmcp_python: Path) -> None:
    with trio.fail_after(LIMIT):
        async for rt in _ours_against_fastmcp(fastmcp_python):
            result = await rt.call(call("failing_job", reason="the disk is full"))
    assert isinstance(result, ToolFailure), result
    assert result.kind is FailureKind.REJECTED
    assert "the disk is full" in result.message


@pytest.mark.parametrize(
    ("reply", "expected"),
    [(Answer.accept({"confirm": True}), "deleted c.txt"), (Answer(action="decline"), "kept c.txt")],
)
async def test_a_fastmcp_tasks_question_is_answered_by_our_on_elicit(
    fastmcp_python: Path, reply: Answer, expected: str
) -> None:
    user = User(reply)
    with trio.fail_after(LIMIT):
        async for rt in _ours_against_fastmcp(fastmcp_python, user):
            result = await rt.call(call("confirm_delete", filename="c.txt"))
    assert isinstance(result, ToolSuccess), result
    assert result.content == expected
    assert [q.message for q in user.asked] == ["Delete c.txt?"]


async def test_our_deadline_cancels_the_fastmcp_task_and_its_side_effect_is_not_done(
    fastmcp_python: Path, tmp_path: Path
) -> None:
    target = tmp_path / "never.txt"
    with trio.fail_after(LIMIT):
        async for rt in _ours_against_fastmcp(fastmcp_python):
            result = await rt.call(call("slow_write", path=str(target), seconds=3), timeout=1.5)
            assert isinstance(result, ToolFailure)
            assert result.kind is FailureKind.TIMEOUT
            assert (tmp_path / "never.txt.started").exists()  # it did start over there
            await trio.sleep(3)  # past the time FastMCP's tool would have written it
    assert not target.exists()


async def test_a_call_detached_here_makes_an_optional_fastmcp_tool_a_task(
    fastmcp_python: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="runtime.mcp")
    with trio.fail_after(LIMIT):
        async for rt in _ours_against_fastmcp(fastmcp_python):
            plain = await rt.call(call("add", a=1, b=2))
            assert _logged(caplog, "became task") == 0
            handle = await rt.detach(call("add", a=2, b=3))
            detached = await handle.result()
            status = await handle.status()
    assert isinstance(plain, ToolSuccess)
    assert plain.value == 3
    assert isinstance(detached, ToolSuccess), detached
    assert detached.value == 5
    assert status.state is DetachedState.COMPLETED
    assert _logged(caplog, "became task") == 1


# -- FastMCP's client, our server ----------------------------------------------------------------


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with served(OURS) as address:
        yield address


async def _fastmcp_client(python: Path, url: str, step: str, **args: Any) -> dict[str, Any]:
    """Run one step of FastMCP's client against `url`; what it printed (its last JSON line)."""
    done = await trio.run_process(
        [str(python), str(SIDE / "client.py"), url, step, json.dumps(args)],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    said: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return said


async def test_fastmcps_client_follows_our_task_to_its_result(fastmcp_python: Path, url: str) -> None:
    with trio.fail_after(LIMIT):
        listed = await _fastmcp_client(fastmcp_python, url, "list")
        plain = await _fastmcp_client(fastmcp_python, url, "call", tool="report", seconds=0.3)
        handle = await _fastmcp_client(fastmcp_python, url, "handle", tool="report", seconds=0.5)
    assert listed["protocol"] == "2026-07-28"
    assert {"report", "slow_write", "confirm_delete"} <= set(listed["tools"])
    assert plain == {"ok": True, "text": "report after 0.3 s", "asked": []}
    assert handle["first"] == "working"  # a task, its id at once, polled to the end
    assert handle["poll_ms"] == 100
    assert handle["ttl_ms"] > 0
    assert handle["text"] == "report after 0.5 s"


@pytest.mark.parametrize(
    ("tool", "arguments", "action", "expected"),
    [
        ("confirm_delete", {"filename": "c.txt"}, "accept", (True, "deleted c.txt")),
        ("transfer", {"amount": 5}, "accept", (True, "transferred 5")),
        ("transfer", {"amount": 5}, "decline", (False, "denied")),
    ],
)
async def test_fastmcps_client_answers_our_tasks_question_and_approval(
    fastmcp_python: Path,
    url: str,
    tool: str,
    arguments: dict[str, Any],
    action: str,
    expected: tuple[bool, str],
) -> None:
    reply = {"action": action, "content": {"confirm": True}} if action == "accept" else {"action": action}
    with trio.fail_after(LIMIT):
        said = await _fastmcp_client(fastmcp_python, url, "call", tool=tool, reply=reply, **arguments)
    ok, words = expected
    assert said["ok"] is ok, said
    assert words in (said.get("text") or said.get("error") or "")
    assert len(said["asked"]) == 1  # asked through tasks/get's inputRequests, answered by tasks/update


async def test_fastmcps_client_answers_questions_before_the_task_and_several_at_once(
    fastmcp_python: Path, url: str, tmp_path: Path
) -> None:
    reply = {"action": "accept", "content": {"name": "ann"}}
    path = tmp_path / "onboarded.txt"
    with trio.fail_after(LIMIT):
        before = await _fastmcp_client(
            fastmcp_python, url, "call", tool="onboard", path=str(path), reply=reply
        )
        both = await _fastmcp_client(fastmcp_python, url, "call", tool="two_names", reply=reply)
    assert before == {"ok": True, "text": "welcome, ann", "asked": ["Your name?"]}
    assert path.read_text() == "ann\n"  # the part after ctx.background() ran once
    assert both["text"] == "first=ann second=ann"
    assert sorted(both["asked"]) == ["Name first?", "Name second?"]


async def test_fastmcps_client_cancels_our_task_and_its_side_effect_is_not_done(
    fastmcp_python: Path, url: str, tmp_path: Path
) -> None:
    target = tmp_path / "cancelled.txt"
    with trio.fail_after(LIMIT):
        said = await _fastmcp_client(
            fastmcp_python, url, "cancel", tool="slow_write", path=str(target), seconds=2
        )
        await trio.sleep(2.5)  # past the time the tool would have written it
    assert said["final"] == "cancelled"
    assert not target.exists()


async def test_fastmcps_client_cannot_tell_another_principals_task_from_an_unknown_one(
    fastmcp_python: Path, url: str
) -> None:
    with trio.fail_after(LIMIT):
        alices = await _fastmcp_client(fastmcp_python, url, "handle", tool="report", seconds=0)
        by_bob = await _fastmcp_client(fastmcp_python, url, "get", task_id=alices["task_id"], token="tok-bob")
        unknown = await _fastmcp_client(fastmcp_python, url, "get", task_id="no-such-task")
        by_alice = await _fastmcp_client(fastmcp_python, url, "get", task_id=alices["task_id"])
    assert by_alice == {"ok": True, "status": "completed"}
    assert by_bob["ok"] is False
    assert unknown["ok"] is False
    assert by_bob["error"].replace(alices["task_id"], "ID") == unknown["error"].replace("no-such-task", "ID")
