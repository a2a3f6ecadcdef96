"""Principals over MCP (DESIGN.md 3.11), against a real server process that checks each
credential (tests/mcp_servers/principals.py: `serve_http(tokens=..., view_of=...)`):

- the server serves each session its token's principal: its calls run for it, and it lists
  and may call only what that principal's view holds;
- a client spec with `credentials=` opens one session per principal with that principal's own
  credential, pooled (bounded, closed when idle); one principal's session never serves
  another's call.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from served import served

from runtime import FailureKind, ToolCall, ToolResult, mcp, open_runtime

pytestmark = [
    pytest.mark.filterwarnings("ignore:Async generator 'httpx2\\.:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:Async generator 'httpcore2\\.:ResourceWarning"),
]

SERVER = Path(__file__).resolve().parent / "mcp_servers" / "principals.py"
LIMIT = 30


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with served(SERVER) as address:
        yield address


def whoami(call_id: str) -> ToolCall:
    return ToolCall(id=call_id, name="whoami", arguments="{}")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def text(result: ToolResult) -> str:
    assert result.ok, result
    return result.content


# -- the server: a session's principal and its view ----------------------------------------------


async def test_the_server_serves_each_token_its_principals_view(url: str) -> None:
    alice = mcp.http(url, headers=bearer("tok-alice"), name="as-alice", prefix="a", mode="legacy")
    bob = mcp.http(url, headers=bearer("tok-bob"), name="as-bob", prefix="b")
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[alice, bob], tracing=False) as rt:
            names = sorted(t.name for t in rt.registry)
            as_alice = text(await rt.call(ToolCall(id="1", name="a_whoami", arguments="{}")))
            as_bob = text(await rt.call(ToolCall(id="2", name="b_whoami", arguments="{}")))
            reset = await rt.call(ToolCall(id="3", name="a_admin_reset", arguments="{}"))
    assert names == ["a_admin_reset", "a_whoami", "b_whoami"]  # bob's view has no admin_* tool
    assert (as_alice, as_bob) == ("alice", "bob")
    assert text(reset) == "reset"


# -- the client: one session per principal, with its own credential ------------------------------


def spec(url: str, **options: Any) -> mcp.HttpServer:
    return mcp.http(
        url,
        headers=bearer("tok-service"),  # lists the tools: the service's own view
        credentials=lambda principal: None if principal == "stranger" else bearer(f"tok-{principal}"),
        **options,
    )


async def test_each_principals_calls_go_over_its_own_session(url: str) -> None:
    seen: dict[str, list[str]] = {"alice": [], "bob": [], "carol": []}
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[spec(url)], tracing=False) as rt:
            listed = sorted(t.name for t in rt.registry)

            async def calls(principal: str) -> None:
                results = await rt.call_many(
                    [whoami(f"{principal}-{i}") for i in range(10)], principal=principal
                )
                seen[principal] = [text(r) for r in results]

            async with trio.open_nursery() as nursery:
                for principal in seen:
                    nursery.start_soon(calls, principal)
            nobody = await rt.call(whoami("nobody"))
            stranger = await rt.call(whoami("stranger"), principal="stranger")
            refused = await rt.call(whoami("mallory"), principal="mallory")  # the server refuses tok-mallory
    assert listed == ["whoami"]  # the service's view: no admin_* tool
    assert seen == {p: [p] * 10 for p in seen}  # every call ran for its own principal
    assert nobody.kind is FailureKind.REJECTED
    assert "for a principal only" in nobody.message
    assert stranger.kind is FailureKind.REJECTED
    assert "no credentials for principal 'stranger'" in stranger.message
    assert refused.kind is FailureKind.UNAVAILABLE
    assert "no session for principal 'mallory'" in refused.message


async def test_principals_sessions_are_bounded_and_closed_when_idle(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="runtime.mcp")
    bounded = spec(url, max_principal_sessions=2, principal_idle_timeout=0.5)
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[bounded], tracing=False) as rt:
            for principal in ("alice", "bob", "carol"):  # the third closes the idlest (alice's)
                assert text(await rt.call(whoami(principal), principal=principal)) == principal
            closed = [r.getMessage() for r in caplog.records if "to make room" in r.getMessage()]
            assert closed == [
                "MCP server "
                + repr(bounded.name)
                + ": closing the idle session of principal 'alice' to make room"
            ]
            assert text(await rt.call(whoami("again"), principal="alice")) == "alice"  # opened again
            await trio.sleep(1.5)  # longer than the idle timeout: every session closes
            ended = {r.getMessage() for r in caplog.records if "was closed: idle" in r.getMessage()}
    assert any("'carol'" in line for line in ended)
    assert any("'alice'" in line for line in ended)
