"""MCP serving under a hostile tenant (issue 42, items 6, 13, 15, 17): idempotency keys read and
sent, artifacts kept within their session, reads bounded, per-principal state bounded. Real
servers: our `serve_http` in this process (talked to by the official SDK client over loopback
HTTP), a server process for memory figures, and a raw stdio server that writes down the `_meta`
it receives.
"""

from __future__ import annotations

import functools
import gc
import json
import os
import subprocess
import sys
import weakref
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
import trio
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.shared._httpx_utils import create_mcp_http_client

from runtime import Artifacts, Dedupe, Retry, Runtime, ToolCall, mcp, open_runtime, tool
from runtime.mcp import serve_http
from runtime.mcp._client import scoped_key
from runtime.mcp._server import ServedRuntime

pytestmark = [
    pytest.mark.filterwarnings("ignore:Async generator 'httpx2\\.:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:Async generator 'httpcore2\\.:ResourceWarning"),
]

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 60  # seconds any one exchange may take on a loaded machine
ran: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _reset() -> None:
    ran.clear()


@asynccontextmanager
async def serving(rt: Runtime, **options: Any) -> AsyncIterator[str]:
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(functools.partial(serve_http, rt, port=0, **options))
        yield f"http://{host}:{port}/mcp"
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def client(url: str, token: str | None = None, mode: str = "legacy") -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with (
        create_mcp_http_client(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http, max_sse_event_size=None), mode=mode) as session,
    ):
        yield session


def text(result: types.CallToolResult) -> str:
    assert not result.is_error, result
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


# -- item 6: idempotency keys -------------------------------------------------------------------


@tool(idempotent=True, dedupe=Dedupe(ttl=600))
async def charge(order: str, note: str = "") -> str:
    """Charge an order once (a retried request may carry a new note: its key says it is the same)."""
    ran[order] += 1
    return f"charged {order} (run {ran[order]})"


async def test_two_tools_calls_with_one_idempotency_key_run_the_tool_once() -> None:
    """Two `tools/call` with the same `_meta` idempotency key ran the tool twice: the server
    passed on only the trace context. The key is the call's now (within its principal)."""
    tokens = {"tok-alice": "alice", "tok-bob": "bob"}
    with trio.fail_after(LIMIT):
        async with open_runtime([charge], tracing=False) as rt, serving(rt, tokens=tokens) as url:
            async with client(url, "tok-alice") as alice:
                first = await alice.call_tool(
                    "charge", {"order": "A", "note": "try 1"}, meta={"idempotency_key": "k-1"}
                )
                again = await alice.call_tool(
                    "charge", {"order": "A", "note": "try 2"}, meta={"idempotency_key": "k-1"}
                )
                camel = await alice.call_tool(
                    "charge", {"order": "A", "note": "try 3"}, meta={"idempotencyKey": "k-1"}
                )
                other = await alice.call_tool(
                    "charge", {"order": "A", "note": "x"}, meta={"idempotency_key": "k-2"}
                )
            async with client(url, "tok-bob") as bob:  # another principal's key is another key
                bobs = await bob.call_tool(
                    "charge", {"order": "A", "note": "try 1"}, meta={"idempotency_key": "k-1"}
                )
    assert text(first) == text(again) == text(camel) == "charged A (run 1)"
    assert text(other) == "charged A (run 2)"
    assert text(bobs) == "charged A (run 3)"
    assert ran["A"] == 3


async def test_the_runtime_as_an_mcp_client_sends_one_idempotency_key_per_call_across_its_retries(
    tmp_path: Path,
) -> None:
    """The runtime as an MCP client sent no key, so a server could not tell a retry from a new
    call. Each call of a tool its server says is idempotent (the only ones retried) now sends
    one, the same for all its attempts; a caller's own key is sent scoped to its principal."""
    log = tmp_path / "calls.jsonl"
    spec = mcp.stdio(
        sys.executable,
        [str(ROOT / "tests" / "mcp_servers" / "keys.py"), str(log)],
        mode="legacy",
        options={"retry": Retry(attempts=2, backoff=0.05, jitter=0), "timeout": 1.0},
    )
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[spec], tracing=False) as rt:
            retried = await rt.call(ToolCall(id="1", name="charge", arguments={"order": "A", "hang": True}))
            plain = await rt.call(ToolCall(id="2", name="charge", arguments={"order": "B"}))
            given = await rt.call(
                ToolCall(id="3", name="charge", arguments={"order": "C"}),
                metadata={"idempotency_key": "mine"},
            )
            for who in ("alice", "bob"):  # two tenants whose keys are alike
                mine = await rt.call(
                    ToolCall(id="4", name="charge", arguments={"order": f"C-{who}"}),
                    metadata={"idempotency_key": "mine"},
                    principal=who,
                )
                assert mine.ok
            read = await rt.call(ToolCall(id="5", name="quote", arguments={"order": "D", "hang": True}))
    assert retried.ok, retried
    assert plain.ok
    assert given.ok
    assert read.ok, read
    seen = [json.loads(line) for line in log.read_text().splitlines()]
    keys = {
        order: [s["meta"].get("idempotency_key") for s in seen if s["order"] == order]
        for order in ("A", "B", "C", "C-alice", "C-bob", "D")
    }
    assert len(keys["A"]) == 2  # the attempt that timed out, and its retry
    assert keys["A"][0]
    assert keys["A"][0] == keys["A"][1]
    assert keys["B"][0]
    assert keys["B"][0] != keys["A"][0]
    # a caller's key is sent scoped to its principal: the same in every process, never as it is
    assert keys["C"] == [scoped_key(None, "mine")]
    assert keys["C-alice"] == [scoped_key("alice", "mine")]
    assert keys["C-bob"] == [scoped_key("bob", "mine")]
    assert len({keys["C"][0], keys["C-alice"][0], keys["C-bob"][0], "mine"}) == 4
    # a read-only call is retried without a key: run again, it changes nothing, and a fresh key
    # for each would keep the server from joining (or caching) identical calls
    assert keys["D"] == [None, None]


# -- item 13: an anonymous session's artifacts are its own --------------------------------------

SECRET = "line of a secret report\n" * 200


@tool
async def secret_report(who: str) -> str:
    """A report too long to send whole: kept as an artifact."""
    await trio.lowlevel.checkpoint()
    return f"{who}'s report\n" + SECRET


def handle_of(result: types.CallToolResult) -> str:
    links = [b for b in result.content if isinstance(b, types.ResourceLink)]
    assert links, result
    return str(links[0].uri).removeprefix("artifact://")


async def test_an_anonymous_session_reads_only_its_own_artifacts_through_the_read_tools_too() -> None:
    """The read tools ran for principal None, so any anonymous session of the handshake era read
    another's artifact by handle (only `resources/*` were guarded). Now both are."""
    with trio.fail_after(LIMIT):
        async with (
            open_runtime([secret_report], tracing=False, max_result_chars=1000, artifacts=Artifacts()) as rt,
            serving(rt) as url,
            client(url) as alice,
            client(url) as mallory,
        ):
            handle = handle_of(await alice.call_tool("secret_report", {"who": "alice"}))
            own = await alice.call_tool("read_artifact", {"handle": handle})
            assert "alice's report" in text(own)
            for tool_name, arguments in (
                ("read_artifact", {"handle": handle}),
                ("grep_artifact", {"handle": handle, "pattern": "secret"}),
            ):
                stolen = await mallory.call_tool(tool_name, arguments)
                assert stolen.is_error, stolen
                block = stolen.content[0]
                assert isinstance(block, types.TextContent)
                assert "secret" not in block.text
                assert f"no artifact {handle} was made in this session" in block.text
            with pytest.raises(MCPError, match="Resource not found"):
                await mallory.read_resource(f"artifact://{handle}")


async def test_a_stateless_anonymous_request_lists_no_sessions_artifacts() -> None:
    """A 2026-07-28 request with no session and no token listed every session's artifacts."""
    with trio.fail_after(LIMIT):
        async with (
            open_runtime([secret_report], tracing=False, max_result_chars=1000, artifacts=Artifacts()) as rt,
            serving(rt) as url,
        ):
            async with client(url) as alice:
                handle = handle_of(await alice.call_tool("secret_report", {"who": "alice"}))
            async with client(url, mode="auto") as stranger:
                listed = await stranger.list_resources()
                assert listed.resources == []
                # the handle a result gave is what reads it (a capability, as the resource link is)
                read = await stranger.read_resource(f"artifact://{handle}")
                content = read.contents[0]
                assert isinstance(content, types.TextResourceContents)
                assert content.text.startswith("alice's report")


# -- item 17: per-principal state is bounded ------------------------------------------------------


def _as(principal: str) -> Any:
    token = AccessToken(token=f"tok-{principal}", client_id="client", scopes=[], subject=principal)
    return auth_context_var.set(AuthenticatedUser(token))


async def test_eight_hundred_principals_hold_at_most_max_views_and_idle_ones_go(
    autojump_clock: trio.abc.Clock,
) -> None:
    """800 principals through the token verifier held 800 views for good (100k: +76 MiB). The
    views are an LRU now, bounded by `max_views`, and an unused one goes after `view_idle`."""
    made: list[weakref.ref[Any]] = []
    async with open_runtime([charge], tracing=False) as rt:

        def view_of(principal: str | None) -> Any:
            view = rt.scoped(principal=principal)
            made.append(weakref.ref(view))
            return view

        served = ServedRuntime(rt, view_of=view_of, max_views=64, view_idle=60.0)
        for i in range(800):
            reset = _as(f"p{i}")
            try:
                assert served._view().principal == f"p{i}"
            finally:
                auth_context_var.reset(reset)
        gc.collect()
        assert len(made) == 800
        assert sum(ref() is not None for ref in made) <= 64
        reset = _as("p799")  # a recent one is kept: the same view
        try:
            assert served._view() is made[799]()
        finally:
            auth_context_var.reset(reset)
        await trio.sleep(61)
        reset = _as("late")
        try:
            served._view()
        finally:
            auth_context_var.reset(reset)
        gc.collect()
        assert sum(ref() is not None for ref in made) == 1  # only the late one's


# -- item 15: reads are bounded --------------------------------------------------------------------


def _peak(pid: int) -> int:
    """The process's peak resident memory, bytes (Linux)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.fixture(scope="module")
def artifacts_server() -> Iterator[tuple[str, int]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    server = ROOT / "tests" / "mcp_servers" / "artifacts.py"
    process = subprocess.Popen(
        [sys.executable, str(server)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("http://"), f"the server did not start: {line!r}"
        yield line.strip(), process.pid
    finally:
        process.kill()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads VmHWM from /proc (Linux)")
@pytest.mark.timeout(300)
async def test_six_concurrent_reads_of_a_large_artifact_grow_the_server_by_a_bounded_amount(
    artifacts_server: tuple[str, int],
) -> None:
    """6 concurrent `resources/read` of one 40 MiB artifact grew the server by 480-900 MiB: each
    joined it whole, the SDK encoded each, and the resumable-stream store kept every response
    (10,000 events of any size). Now the bytes being served at once are bounded (a read waits
    for the last one to be written) and the store of recent events is bounded in bytes: the
    server grows by what two or three reads hold, however many readers come."""
    url, pid = artifacts_server
    megabytes = 20
    with trio.fail_after(240):
        async with client(url, "tok-alice") as alice:
            result = await alice.call_tool("report", {"megabytes": megabytes})
            uri = next(b.uri for b in result.content if isinstance(b, types.ResourceLink))
            await alice.read_resource(uri)  # one read, alone: its own peak
        base = _peak(pid)

        async def read() -> None:
            async with client(url, "tok-alice") as reader:
                got = await reader.read_resource(uri)
                content = got.contents[0]
                assert isinstance(content, types.TextResourceContents)
                assert len(content.text) == megabytes * 1_000_000

        async with trio.open_nursery() as nursery:
            for _ in range(6):
                nursery.start_soon(read)
    grown = _peak(pid) - base
    assert grown < 8 * megabytes * 1_000_000, f"the server's peak grew by {grown / 1e6:.0f} MB"
