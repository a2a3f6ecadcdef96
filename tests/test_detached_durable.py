"""Detached and deferred calls survive their process (DESIGN.md 3.14, issue 43): real server
processes (tests/detached_server.py) on a SQLite file and on a real redis-server, killed with
SIGKILL and restarted. Completed results and pending approvals are there after a restart; a call
that was running is run again only when its tool is idempotent, and otherwise answered
UNAVAILABLE (it may have run), never run twice; on Redis a cancel and an approval reach a call
from another process. Side effects are counted from the tools' log (tests/detached_harness.py).
The randomized version, hundreds of kills, is the crash harness (tests/test_detached_crash.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
from detached_harness import Server, side_effects
from redis_server import RedisServer


@pytest.fixture(scope="module", params=["sqlite", "redis"])
def backend(request: pytest.FixtureRequest) -> RedisServer | None:
    """The session's redis-server for the Redis runs, asked for before any test's leak check
    begins (a fixture of a wider scope), so it is not a process a test left behind."""
    if request.param == "sqlite":
        return None
    redis: RedisServer = request.getfixturevalue("redis_server")
    return redis


@pytest.fixture
def store(backend: RedisServer | None, tmp_path: Path) -> str:
    if backend is None:
        return f"sqlite:{tmp_path / 'journal.db'}"
    backend.flush()
    return f"redis:{backend.url}"


@contextlib.asynccontextmanager
async def server(store: str, log: Path, node: str = "n1") -> AsyncIterator[Server]:
    started = await Server.start(store, log, node=node)
    try:
        yield started
    finally:
        await started.stop()


async def test_a_result_and_a_pending_approval_are_there_after_a_kill(store: str, tmp_path: Path) -> None:
    log = tmp_path / "effects.log"
    first = await Server.start(store, log, node="n1")
    try:
        done = await first.ask(op="detach", tool="pay", key="k1", id="job-1", principal="ann")
        result = await first.ask(op="result", id=done["detached"], principal="ann")
        pending = (await first.ask(op="defer", key="k2", principal="ann"))["pending"]
    finally:
        await first.kill()
    async with server(store, log) as second:
        again = await second.ask(op="result", id="job-1", principal="ann")
        assert again == result
        assert again["result"]["content"] == "paid k1"
        assert (await second.ask(op="pending", principal="ann"))["pending"] == [pending]
        approved = await second.ask(op="approve", id=pending, principal="ann")
        assert approved["status"]["state"] == "working"
        paid = await second.ask(op="result", id=pending, principal="ann")
        assert paid["result"]["content"] == "paid k2"
    assert side_effects(log) == {
        ("begin", "k1"): 1,
        ("effect", "k1"): 1,
        ("begin", "k2"): 1,
        ("effect", "k2"): 1,
    }


@pytest.mark.parametrize("tool", ["pay", "put"])
async def test_a_call_killed_while_it_ran_is_run_again_only_when_idempotent(
    store: str, tmp_path: Path, tool: str
) -> None:
    log = tmp_path / "effects.log"
    first = await Server.start(store, log, node="n1")
    try:
        await first.ask(op="detach", tool=tool, key="k", id="job", die="during", principal="ann")
        assert await first.dead()  # the tool killed its process between begin and effect
    finally:
        await first.kill()
    async with server(store, log) as second:
        answer = await second.ask(op="result", id="job", principal="ann")
    result = answer["result"]
    effects = side_effects(log)
    if tool == "put":  # idempotent: run again, to its end
        assert result["content"] == "paid k"
        assert effects == {("begin", "k"): 2, ("effect", "k"): 1}
    else:  # not idempotent: answered, never run again
        assert result["kind"] == "unavailable"
        assert "it may have run, and it is not run again" in result["message"]
        assert effects == {("begin", "k"): 1}


async def test_a_call_killed_before_it_started_runs_once_after_the_restart(
    store: str, tmp_path: Path
) -> None:
    log = tmp_path / "effects.log"
    first = await Server.start(store, log, node="n1")
    try:
        pending = (await first.ask(op="defer", key="k", principal="ann", die="before"))["pending"]
        await first.send(op="approve", id=pending, principal="ann")
        assert await first.dead()  # approved, started, killed before its side effect
    finally:
        await first.kill()
    async with server(store, log) as second:
        answer = await second.ask(op="result", id=pending, principal="ann")
    assert answer["result"]["kind"] == "unavailable"  # its started mark was written: it may have run
    assert side_effects(log) == {}


async def test_on_redis_a_cancel_and_an_approval_reach_a_call_from_another_process(
    redis: RedisServer, tmp_path: Path
) -> None:
    store = f"redis:{redis.url}"
    log = tmp_path / "effects.log"
    async with server(store, log, node="a") as a, server(store, log, node="b") as b:
        long = (await a.ask(op="detach", tool="pay", key="long", hold=3600, principal="ann"))["detached"]
        requested = await b.ask(op="cancel", id=long, principal="ann")
        assert requested["status"]["cancel_requested"]
        cancelled = await a.ask(op="result", id=long, principal="ann")
        assert cancelled["result"]["kind"] == "cancelled"
        pending = (await a.ask(op="defer", key="twice", principal="ann"))["pending"]
        both = [
            await a.send(op="approve", id=pending, principal="ann"),
            await b.send(op="approve", id=pending, principal="ann"),
        ]
        answers: list[dict[str, Any]] = [await a.answer(both[0]), await b.answer(both[1])]
        assert all("status" in answer for answer in answers)  # each: the approval, or it as it is
        for each in (a, b):
            paid = await each.ask(op="result", id=pending, principal="ann")
            assert paid["result"]["content"] == "paid twice"
        assert (await b.ask(op="status", id=pending, principal="mallory"))["error"] == "CallNotFound"
    effects = side_effects(log)
    # the cancel may reach "long" before its tool began (another process, on Redis): at most once
    assert effects.pop(("begin", "long"), 0) <= 1
    assert effects == {("begin", "twice"): 1, ("effect", "twice"): 1}


async def test_a_process_that_shuts_down_leaves_its_running_call_to_the_next(
    store: str, tmp_path: Path
) -> None:
    log = tmp_path / "effects.log"
    async with server(store, log) as first:
        await first.ask(op="detach", tool="put", key="k", id="job", hold=60, principal="ann")
        await trio.sleep(0.5)
    async with server(store, log) as second:  # its shutdown cancelled it; idempotent: run again
        status = await second.ask(op="status", id="job", principal="ann")
        assert status["status"]["state"] == "working"
        assert status["status"]["attempts"] == 2
