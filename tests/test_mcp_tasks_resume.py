"""MCP Tasks used as a client (SEP-2663) survive what ends a connection or a process: a remote
task whose connection drops while we poll it is followed again over the next connection (the
same taskId, never a second tools/call), within the call's own deadline; a task the server no
longer knows ends the call UNAVAILABLE naming it; a detached call journals its remote task's
id, so a runtime that recovers the call after a kill -9 follows that task instead of calling
the tool again.

Real processes: the task server tests/mcp_servers/tasks.py (`serve_http`, polled every 0.1 s)
behind a TCP proxy in the test's own loop (tests/tcp_proxy.py) that cuts the connection on
purpose; the killed client is tests/mcp_task_client.py. Real sockets: real time, every wait
bounded by fail_after.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from served import served
from tcp_proxy import Proxy

from runtime import (
    DetachedState,
    Durable,
    FailureKind,
    Runtime,
    ToolCall,
    ToolFailure,
    ToolSuccess,
    mcp,
    open_runtime,
)
from runtime.stores import SQLiteStore

# The SDK's HTTP transport leaves httpx2's response iterators to the garbage collector when a
# stream (here: a task's subscriptions/listen) ends or is cancelled; trio closes them and warns.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Async generator 'httpx2\\.:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:Async generator 'httpcore2\\.:ResourceWarning"),
]

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "tests" / "mcp_servers" / "tasks.py"
CLIENT = ROOT / "tests" / "mcp_task_client.py"
LIMIT = 60  # seconds a test may take on a loaded machine
TOKENS = {"alice": "tok-alice"}


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with served(SERVER) as address:
        yield address


def address(url: str) -> tuple[str, int]:
    host, port = url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
    return host, int(port)


def remote(url: str, *, pooled: bool = False) -> Any:
    if pooled:  # each principal's calls go over its own session (runtime.mcp._client_pool)
        return mcp.http(
            url,
            headers={"Authorization": "Bearer tok-bob"},  # the service's own: the listing
            name="tasks",
            mode="2026-07-28",
            credentials=lambda principal: {"Authorization": f"Bearer {TOKENS[principal]}"},
            backoff=0.05,
            max_backoff=0.2,
        )
    return mcp.http(
        url,
        headers={"Authorization": "Bearer tok-alice"},
        name="tasks",
        mode="2026-07-28",
        backoff=0.05,
        max_backoff=0.2,
    )


def write(path: Path, seconds: float) -> ToolCall:
    return ToolCall(
        id="c-1", name="slow_write", arguments=json.dumps({"path": str(path), "seconds": seconds})
    )


@asynccontextmanager
async def proxied(url: str, *, pooled: bool = False) -> AsyncIterator[tuple[Runtime, Proxy]]:
    proxy = Proxy(address(url))
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.run)
        async with open_runtime(mcp_servers=[remote(proxy.url, pooled=pooled)], tracing=False) as rt:
            yield rt, proxy
        nursery.cancel_scope.cancel()


async def _until_exists(path: Path) -> None:
    for _ in range(LIMIT * 50):
        if await trio.Path(path).exists():
            return
        await trio.sleep(0.02)


def _tasks_made(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage().rsplit(" ", 1)[1] for r in caplog.records if "became task" in r.getMessage()]


@pytest.mark.parametrize("pooled", [False, True], ids=["shared-session", "principal-session"])
async def test_a_task_whose_connection_drops_is_followed_again_to_its_result(
    url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture, pooled: bool
) -> None:
    caplog.set_level(logging.DEBUG, logger="runtime.mcp")
    target = tmp_path / "a.txt"
    with trio.fail_after(LIMIT):
        async with proxied(url, pooled=pooled) as (rt, proxy), trio.open_nursery() as nursery:
            results: list[Any] = []

            async def calling() -> None:
                results.append(await rt.call(write(target, 1.5), principal="alice"))

            nursery.start_soon(calling)
            await _until_exists(tmp_path / "a.txt.started")  # the task runs remotely
            proxy.cut()  # every connection breaks, new ones are refused...
            await trio.sleep(0.5)
            proxy.restore()  # ...then the server is reachable again (it never stopped)
    [result] = results
    assert isinstance(result, ToolSuccess), result
    assert result.content == "wrote a.txt"
    assert len(_tasks_made(caplog)) == 1  # one tools/call, one task, followed over two connections
    assert (tmp_path / "a.txt.started").read_text() == "started\n"  # the remote tool ran once
    assert any("following task" in r.getMessage() for r in caplog.records)


async def test_a_task_the_server_no_longer_knows_ends_the_call_unavailable_naming_it(
    url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="runtime.mcp")
    # the server "restarts" without its tasks: another process, behind the same address
    with served(SERVER) as restarted, trio.fail_after(LIMIT):
        async with proxied(url) as (rt, proxy), trio.open_nursery() as nursery:
            results: list[Any] = []

            async def calling() -> None:
                results.append(await rt.call(write(tmp_path / "b.txt", 3)))

            nursery.start_soon(calling)
            await _until_exists(tmp_path / "b.txt.started")
            proxy.cut()
            await trio.sleep(0.5)  # the connection is lost (and the call, before this fix)
            proxy.restore(address(restarted))
    [result] = results
    [task_id] = _tasks_made(caplog)
    assert isinstance(result, ToolFailure), result
    assert result.kind is FailureKind.UNAVAILABLE
    assert f"no longer knows task {task_id}" in result.message
    assert any("following task" in r.getMessage() for r in caplog.records)  # after a reconnect


async def test_the_calls_deadline_holds_while_its_tasks_connection_is_down(url: str, tmp_path: Path) -> None:
    with trio.fail_after(LIMIT):
        async with proxied(url) as (rt, proxy), trio.open_nursery() as nursery:
            results: list[Any] = []

            async def calling() -> None:
                results.append(await rt.call(write(tmp_path / "c.txt", 3), timeout=2.0))

            nursery.start_soon(calling)
            await _until_exists(tmp_path / "c.txt.started")
            proxy.cut()  # and never restored
    [result] = results
    assert isinstance(result, ToolFailure), result
    assert result.kind is FailureKind.TIMEOUT, result


class _Lines:
    """A child process's stdout, one JSON object a line."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.buffer = b""

    async def next(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        while b"\n" not in self.buffer:
            chunk = await self.process.stdout.receive_some()
            assert chunk, "the client process ended"
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        found: dict[str, Any] = json.loads(line)
        return found


async def test_a_detached_calls_remote_task_is_followed_again_after_our_process_is_killed(
    url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="runtime.mcp")
    db, target = tmp_path / "journal.db", tmp_path / "d.txt"
    arguments = json.dumps({"path": str(target), "seconds": 2})
    with trio.fail_after(LIMIT):
        process = await trio.lowlevel.open_process(
            [sys.executable, str(CLIENT), url, str(db), "node-a", "slow_write", arguments],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        try:
            lines = _Lines(process)
            detached_id = (await lines.next())["id"]
            task_id = (await lines.next())["journaled"]
            process.send_signal(signal.SIGKILL)  # the remote task runs on; its follower is gone
            await process.wait()
        finally:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
                if process.stdout is not None:
                    await process.stdout.aclose()
        assert not target.exists()  # killed before the remote tool finished
        async with open_runtime(
            mcp_servers=[remote(url)],
            store=SQLiteStore(str(db)),
            durable=Durable(node="node-a", poll_interval=0.1),  # its restart: recovered at once
            tracing=False,
        ) as rt:
            handle = rt.detached(detached_id)
            result = await handle.result()
            status = await handle.status()
    assert isinstance(result, ToolSuccess), result
    assert result.content == "wrote d.txt"
    assert status.state is DetachedState.COMPLETED
    assert target.read_text() == "written"
    assert (tmp_path / "d.txt.started").read_text() == "started\n"  # the remote tool ran once
    assert _tasks_made(caplog) == []  # no new tools/call here: the journaled task was followed
    assert any(f"journaled task {task_id}" in r.getMessage() for r in caplog.records)


async def test_a_runtime_that_shuts_down_leaves_its_detached_calls_remote_task_to_the_next(
    url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="runtime.mcp")
    db, target = str(tmp_path / "journal.db"), tmp_path / "e.txt"

    def opened() -> Any:
        return open_runtime(
            mcp_servers=[remote(url)],
            store=SQLiteStore(db),
            durable=Durable(node="node-b", poll_interval=0.1),
            shutdown_timeout=0.2,  # the call is cut short, not waited for
            tracing=False,
        )

    with trio.fail_after(LIMIT):
        async with opened() as rt:
            handle = await rt.detach(write(target, 2))
            for _ in range(LIMIT * 50):
                if any("journaled for detached call" in r.getMessage() for r in caplog.records):
                    break
                await trio.sleep(0.02)
        assert not target.exists()  # it was still running remotely when we stopped
        async with opened() as rt:
            result = await rt.detached(handle.id).result()
    assert isinstance(result, ToolSuccess), result  # not cancelled remotely: the next runtime follows it
    assert target.read_text() == "written"
    assert (tmp_path / "e.txt.started").read_text() == "started\n"
    assert len(_tasks_made(caplog)) == 1
