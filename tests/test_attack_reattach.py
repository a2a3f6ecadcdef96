"""Hostile tests of a remote MCP task followed again after its connection drops, and of
`ctx.checkpoint` / `ctx.handed_over` (issue 43, attack 5). Written from docs/how-to/mcp-client.md
("A server's tasks") and docs/how-to/detached-calls.md, not from the features' own tests.

The remote server is a real process (tests/mcp_servers/tasks.py: `serve_http`, its tasks polled
every 0.1 s), reached through a TCP proxy this test cuts (tests/tcp_proxy.py). Real time: the
server runs on the wall clock, so these tests wait a few seconds each.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import Client, MCPError
from served import served
from tcp_proxy import Proxy

from runtime import Durable, FailureKind, ToolCall, ToolFailure, mcp, open_runtime
from runtime.engine._journal import count_key
from runtime.mcp._client_tasks import TasksExtension, _GetTask, _send, _TaskIdParams
from runtime.stores import SQLiteStore

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "tests" / "mcp_servers" / "tasks.py"
LIMIT = 60  # seconds a test may take on a loaded machine


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with served(SERVER) as address:
        yield address


def remote(url: str) -> Any:
    return mcp.http(
        url,
        headers={"Authorization": "Bearer tok-alice"},
        name="tasks",
        mode="2026-07-28",
        backoff=0.05,
        max_backoff=0.2,
    )


class _Tasks(logging.Handler):
    """The ids of the remote tasks our calls became (the client's debug log says each)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.ids: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "the call became task " in message:
            self.ids.append(message.rsplit(" ", 1)[1])


@pytest.fixture
def tasks() -> Iterator[_Tasks]:
    logger = logging.getLogger("runtime.mcp")
    handler = _Tasks()
    level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@asynccontextmanager
async def proxied(url: str) -> AsyncIterator[Proxy]:
    host, _, rest = url.removeprefix("http://").partition(":")
    port = int(rest.split("/", 1)[0])
    async with trio.open_nursery() as nursery:
        proxy = Proxy((host, port))
        await nursery.start(proxy.run)
        try:
            yield proxy
        finally:
            nursery.cancel_scope.cancel()


async def remote_status(url: str, task_id: str) -> str:
    """The remote task's status as its server tells it now (alice's own session, not proxied)."""
    async with Client(remote(url).transport(), mode="2026-07-28", extensions=[TasksExtension()]) as client:
        try:
            task = await _send(client.session, _GetTask(params=_TaskIdParams(task_id=task_id)))
        except MCPError as exc:
            return f"error: {exc.error.message}"
    return str(task.get("status"))


async def settled_status(url: str, task_id: str) -> str:
    """The remote task's status once it has ended (polled)."""
    while (status := await remote_status(url, task_id)) in ("working", "input_required"):  # noqa: ASYNC110
        await trio.sleep(0.1)
    return status


async def started(path: Path) -> None:
    while not await trio.Path(str(path) + ".started").exists():  # noqa: ASYNC110
        await trio.sleep(0.02)


# -- a call that ends while its task waits for the connection to come back -----------------------


async def test_a_detached_call_cancelled_while_its_task_waits_for_the_connection_cancels_the_task(
    url: str, tasks: _Tasks, tmp_path: Path
) -> None:
    """mcp-client.md: "A call that ends first (cancelled by its caller, past its deadline,
    `handle.cancel()`) sends `tasks/cancel`, so the remote work stops with it." The same holds
    when the cancel comes while the call waits for its lost connection: once the connection is
    back (within the cancel's own bound), the task is cancelled, not left to do its work."""
    path = tmp_path / "out.txt"
    with trio.fail_after(LIMIT):
        async with (
            proxied(url) as proxy,
            open_runtime(
                mcp_servers=[remote(proxy.url)], tracing=False, durable=Durable(poll_interval=0.1)
            ) as rt,
        ):
            handle = await rt.detach(
                ToolCall(id="c1", name="slow_write", arguments={"path": str(path), "seconds": 2.0})
            )
            await started(path)
            (task_id,) = tasks.ids
            proxy.cut()
            await trio.sleep(0.3)  # the next tasks/get finds the connection gone
            await handle.cancel()
            result = await handle.result()
            assert isinstance(result, ToolFailure)
            assert result.kind is FailureKind.CANCELLED
            proxy.restore()
            assert await settled_status(url, task_id) == "cancelled"
    assert not path.exists()  # the remote side effect was not done after our cancel


async def test_a_deadline_passing_while_the_task_waits_for_the_connection_cancels_the_task(
    url: str, tasks: _Tasks, tmp_path: Path
) -> None:
    """The same for the caller's deadline: TIMEOUT, and the remote task is cancelled once the
    connection is back, not left running after the call was answered."""
    path = tmp_path / "out.txt"
    with trio.fail_after(LIMIT):
        async with proxied(url) as proxy, open_runtime(mcp_servers=[remote(proxy.url)], tracing=False) as rt:

            async def cut_then_restore() -> None:
                await started(path)
                proxy.cut()
                await trio.sleep(1.2)  # past the call's deadline
                proxy.restore()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(cut_then_restore)
                result = await rt.call(
                    ToolCall(id="c1", name="slow_write", arguments={"path": str(path), "seconds": 2.5}),
                    timeout=1.0,
                )
            assert isinstance(result, ToolFailure), result
            assert result.kind is FailureKind.TIMEOUT, result
            (task_id,) = tasks.ids
            assert await settled_status(url, task_id) == "cancelled"
    assert not path.exists()


# -- kill -9 between the steps of a task_from="background" start ----------------------------------

KILLING = ROOT / "tests" / "attack_reattach_server.py"


@contextmanager
def killing_server(*args: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, str(KILLING), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("http://"), f"the server did not start: {line!r}"
        yield line.strip(), process
    finally:
        process.kill()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


@pytest.mark.parametrize(
    ("step", "runs"),
    [("incr", 0), ("set", 0), ("add", 0), ("swap", 1)],
    ids=["before-its-count", "before-its-marker", "before-its-record", "before-its-started-mark"],
)
async def test_a_background_start_killed_between_its_steps_runs_at_most_once_and_leaves_no_count(
    tmp_path: Path, step: str, runs: int
) -> None:
    """detached-calls.md / the issue: a call journaled before its process was killed is run by
    the restart (it had not started), one that was not journaled never runs, and nothing is left
    counted against the principal's bound. The server dies (SIGKILL) right before one write of
    the detach a `ctx.background()` makes (count, live marker, record, started mark)."""
    db, log = str(tmp_path / "calls.db"), tmp_path / "onboarded.txt"
    with trio.fail_after(LIMIT):
        with killing_server("--db", db, "--log", str(log), "--kill-at", step) as (first, process):
            spec = mcp.http(first, headers={"Authorization": "Bearer tok-alice"}, name="s", mode="2026-07-28")
            async with open_runtime(mcp_servers=[spec], tracing=False) as rt:
                result = await rt.call(ToolCall(id="c1", name="onboard", arguments={"name": "ann"}))
            assert isinstance(result, ToolFailure), result
            assert result.kind is FailureKind.UNAVAILABLE, result
            while process.poll() is None:  # noqa: ASYNC110
                await trio.sleep(0.05)
            assert process.returncode == -signal.SIGKILL
        assert not log.exists()  # it died before the task's part ran
        with killing_server("--db", db, "--log", str(log)):  # its restart (the same node)
            if runs:
                while not await trio.Path(log).exists():  # noqa: ASYNC110
                    await trio.sleep(0.05)
            await trio.sleep(1.0)  # a run more would show by now
            count = await SQLiteStore(db).get(count_key("alice"))
        lines = log.read_text().splitlines() if log.exists() else []
        assert lines == ["ann"] * runs
        assert count in (None, b"0"), count
