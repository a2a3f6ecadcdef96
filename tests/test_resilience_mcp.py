"""Resilience against a real MCP server process (tests/mcp_servers/demo.py over streamable HTTP):
the server's tool hints choose what may be retried and cached, and one circuit breaker per
server is opened by the server being unreachable, never by a tool's own `isError`."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
import trio
from test_mcp_client import DEMO, HttpServer, call, failed, ok, until_ok

from runtime import Cache, CircuitBreaker, FailureKind, Retry, mcp, open_runtime

pytestmark = [
    pytest.mark.filterwarnings("ignore:Async generator 'httpx2:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:Async generator 'httpcore2:ResourceWarning"),
]

LIMIT = 30  # seconds a test may take: it starts a server process twice (about 1.5 s each)


@pytest.fixture
def server() -> Iterator[HttpServer]:
    own = HttpServer()
    try:
        yield own.start()
    finally:
        own.stop()


async def test_the_servers_hints_say_what_may_be_retried_and_cached() -> None:
    spec = mcp.stdio(sys.executable, [DEMO])
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[spec], retry=Retry(attempts=2), tracing=False) as rt:
            add, echo = rt.registry.get("add"), rt.registry.get("echo")
            # `add` says readOnlyHint and idempotentHint; `echo` says neither
            assert (add.options.read_only, add.options.idempotent) == (True, True)
            assert (echo.options.read_only, echo.options.idempotent) == (False, False)
            routing: Any = rt._routing  # the runtime-wide Retry reaches the idempotent one only
            assert routing.actor("add").plan.retry is not None  # (its actor starts on demand)
            assert routing.actor("echo").plan.retry is None


async def test_one_breaker_per_server_opens_when_it_is_unreachable_never_on_is_error(
    server: HttpServer,
) -> None:
    spec = mcp.http(server.url, backoff=0.05, max_backoff=0.2)
    breaker = CircuitBreaker(failures=2, cool_down=1.0)
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[spec], breaker=breaker, tracing=False) as rt:
            # the server's own errors (isError) are answers: they never open it
            for i in range(5):
                failed(await rt.call(call("refuse", {"reason": "no"}, id=f"r{i}")), FailureKind.REJECTED)
            assert rt.statistics().tools["refuse"].breaker == "closed"
            server.stop()
            for i in range(2):  # the server cannot be reached: transport failures
                down = failed(await rt.call(call("add", {"a": 1}, id=f"d{i}")), FailureKind.UNAVAILABLE)
                assert "retry after" not in down.message
            # open for every tool of that server, the one that never failed included
            refused = failed(await rt.call(call("echo", {"text": "hi"})), FailureKind.UNAVAILABLE)
            assert "circuit open" in refused.message
            assert "retry after 1s" in refused.message
            stats = rt.statistics().tools
            assert stats["echo"].breaker == stats["add"].breaker == "open"
            await trio.to_thread.run_sync(server.start)
            await trio.sleep(1.0)  # the cool-down: one probe goes through and closes it
            assert (await until_ok(rt, call("add", {"a": 5}))).value == {"total": 7}
            assert rt.statistics().tools["echo"].breaker == "closed"
            assert ok(await rt.call(call("echo", {"text": "back"}))).content == "back"


async def test_a_read_only_servers_tool_is_cached_per_principal(server: HttpServer) -> None:
    spec = mcp.http(server.url)
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[spec], tracing=False) as rt:
            before = ok(await rt.call(call("stats"))).value["calls"]
            for principal in ("alice", "alice", "bob"):
                ok(await rt.call(call("add", {"a": 1}), principal=principal))
            assert ok(await rt.call(call("stats"))).value["calls"] == before + 3  # no cache asked for
    # asked for every tool of the server: only the read-only ones get it (`add`, not `echo`)
    cached = mcp.http(server.url, options={"cache": Cache(ttl=60)})
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[cached], tracing=False) as rt:
            before = ok(await rt.call(call("stats"))).value["calls"]
            for principal in ("alice", "alice", "bob"):
                ok(await rt.call(call("add", {"a": 1}), principal=principal))
            assert ok(await rt.call(call("stats"))).value["calls"] == before + 2  # alice's second: a hit
            assert rt.statistics().tools["add"].cache_hits == 1
            assert rt.registry.get("echo").options.cache is None


def test_server_options_are_checked_as_tool_options() -> None:
    with pytest.raises(ValueError, match="cache"):
        mcp.http("http://127.0.0.1:1/mcp", options={"cache": 60})
    with pytest.raises(ValueError, match="did you mean 'retry'"):
        mcp.stdio(sys.executable, [DEMO], options={"retyr": Retry()})
