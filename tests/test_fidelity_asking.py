"""Issue 25, point 13: asking back under MCP, with the SDK's client and our own, in real sessions.

- 2026-07-28: a question a tool asks ends the round; it never reaches the tool as CannotAsk,
  so a tool that catches CannotAsk to go on does its side effect once, confirmed, after the
  answer (a side-effect counter says so), and no round logs a traceback.
- The questions our client hands to `on_elicit` / `on_sample` / `on_roots` say which server
  asked and for which of our calls.
- A 2026-07-28 server's -32021 (the client lacks a capability) is UNAVAILABLE naming the
  handler to give, not ERROR "raised MCPError".
- In `mode="auto"`, a 403 `insufficient_scope` is what the failed connection is reported as.
"""

from __future__ import annotations

import functools
import logging
import socket
import sys
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
import trio
from mcp import Client
from mcp.client._memory import InMemoryTransport
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from pydantic import AnyHttpUrl

from runtime import (
    Answer,
    CallContext,
    CannotAsk,
    Elicitation,
    FailureKind,
    Root,
    RootsRequest,
    Sampled,
    Sampling,
    ToolCall,
    ToolRegistry,
    open_runtime,
    tool,
)
from runtime import mcp as rmcp
from runtime.mcp import serve_http
from runtime.mcp._server import ServedRuntime

ROOT = Path(__file__).resolve().parent.parent
ERAS = [pytest.param("legacy", id="2025-11-25"), pytest.param("2026-07-28", id="2026-07-28")]
LIMIT = 30

# -- a tool that catches CannotAsk to go on, with a side effect after the question ----------------

LEDGER: list[tuple[int, bool]] = []


@tool
async def transfer(ctx: CallContext, amount: int) -> str:
    """Move money, once the user confirms (without anyone to ask, unconfirmed)."""
    try:
        confirmed = (await ctx.elicit(f"Transfer {amount}?")).accepted
    except CannotAsk:
        confirmed = False
    LEDGER.append((amount, confirmed))  # the side effect
    return f"moved {amount}" if confirmed else f"held {amount}"


async def test_a_question_ends_the_round_and_the_side_effect_happens_once_after_the_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    LEDGER.clear()
    asked: list[str] = []

    async def confirm(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={})

    caplog.set_level(logging.DEBUG, logger="runtime")
    with trio.fail_after(LIMIT):
        async with open_runtime(ToolRegistry([transfer]), tracing=False) as rt:
            served = ServedRuntime(rt)
            async with Client(
                InMemoryTransport(served.server), mode="2026-07-28", elicitation_callback=confirm
            ) as client:
                # Round by round, as the SDK's own driver does it: the first round only asks.
                first = await client.session.call_tool("transfer", {"amount": 5}, allow_input_required=True)
                assert isinstance(first, types.InputRequiredResult)
                assert LEDGER == []  # nothing was done unconfirmed
                result = await client.call_tool("transfer", {"amount": 7})  # the driver: ask, call again
    assert (result.is_error, result.content[0].text) == (False, "moved 7")  # type: ignore[union-attr]
    assert LEDGER == [(7, True)]  # once, confirmed, after the answer
    assert asked == ["Transfer 7?"]
    noisy = [r for r in caplog.records if r.exc_info is not None or r.levelno >= logging.WARNING]
    assert noisy == []  # a round ends without a traceback


async def test_without_anyone_to_ask_the_tool_goes_on_as_it_chose() -> None:
    LEDGER.clear()
    async with open_runtime(ToolRegistry([transfer]), tracing=False) as rt:
        result = await rt.call(ToolCall(id="1", name="transfer", arguments='{"amount": 3}'))
    assert result.content == "held 3"
    assert LEDGER == [(3, False)]


# -- who asked: the server, and our call ----------------------------------------------------------


def served(mode: str) -> rmcp.ServerSpec:
    return rmcp.stdio(
        sys.executable,
        args=["-m", "runtime", "serve", "tests.mcp_asking_fixtures:registry"],
        cwd=str(ROOT),
        mode=mode,
        name="asker",
        connect_timeout=LIMIT,
        call_timeout=LIMIT,
    )


@pytest.mark.parametrize("mode", ERAS)
async def test_questions_from_a_server_say_which_server_asked_and_for_which_call(mode: str) -> None:
    questions: list[Elicitation] = []
    prompts: list[Sampling] = []
    roots: list[RootsRequest] = []

    async def on_elicit(q: Elicitation) -> Answer:
        questions.append(q)
        return Answer.accept({"name": "Ada"})

    async def on_sample(r: Sampling) -> Sampled:
        prompts.append(r)
        return Sampled(text="ok")

    async def on_roots(r: RootsRequest) -> list[Root]:
        roots.append(r)
        return [Root(uri="file:///work")]

    with trio.fail_after(LIMIT * 2):
        async with open_runtime(
            mcp_servers=[served(mode)],
            on_elicit=on_elicit,
            on_sample=on_sample,
            on_roots=on_roots,
            tracing=False,
        ) as rt:
            signed = await rt.call(ToolCall(id="call-7", name="sign_up", arguments='{"team": "core"}'))
            wrote = await rt.call(ToolCall(id="call-8", name="haiku", arguments='{"topic": "tea"}'))
            found = await rt.call(ToolCall(id="call-9", name="where"))
    assert signed.ok, signed.content
    assert wrote.ok, wrote.content
    assert found.ok, found.content
    (q,) = questions
    assert (q.server, q.tool_name, q.call_id) == ("asker", "sign_up", "call-7")
    (p,) = prompts
    assert (p.server, p.tool_name, p.call_id) == ("asker", "haiku", "call-8")
    assert [(r.server, r.tool_name, r.call_id) for r in roots] == [("asker", "where", "call-9")]


# -- -32021: the client lacks a capability --------------------------------------------------------


async def test_a_missing_client_capability_is_unavailable_and_names_the_handler_to_give() -> None:
    with trio.fail_after(LIMIT * 2):
        async with open_runtime(mcp_servers=[served("2026-07-28")], tracing=False) as rt:
            result = await rt.call(ToolCall(id="1", name="sign_up", arguments='{"team": "core"}'))
    assert result.kind is FailureKind.UNAVAILABLE
    assert "MCP server 'asker' needs elicitation from this client, which did not declare it" in result.message
    assert "give open_runtime(on_elicit=...) a handler" in result.message
    assert "MCPError" not in result.message


# -- a 403 insufficient_scope at discovery ---------------------------------------------------------


class TokenWithoutScope:
    """Accepts the bearer token, with none of the scopes the server requires."""

    async def verify_token(self, token: str) -> AccessToken | None:
        if token != "tok":
            return None
        return AccessToken(token=token, client_id="c", scopes=["read"])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@tool
def secret() -> str:
    return "s"


async def test_an_insufficient_scope_is_what_a_failed_auto_connection_reports(
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = _free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    settings = AuthSettings(
        issuer_url=AnyHttpUrl("http://127.0.0.1:1"),
        resource_server_url=AnyHttpUrl(url),
        required_scopes=["tools:call"],
        validate_token_resource=False,
    )
    caplog.set_level(logging.ERROR, logger="runtime.mcp")
    with trio.fail_after(LIMIT):
        async with open_runtime([secret], tracing=False) as server_rt, trio.open_nursery() as nursery:
            await nursery.start(
                functools.partial(
                    serve_http, server_rt, port=port, token_verifier=TokenWithoutScope(), auth=settings
                )
            )
            spec = rmcp.http(
                url, headers={"Authorization": "Bearer tok"}, mode="auto", connect_timeout=10, name="scoped"
            )
            async with open_runtime(mcp_servers=[spec], tracing=False) as rt:
                assert "secret" not in rt.registry
            nursery.cancel_scope.cancel()
    (record,) = [r for r in caplog.records if "did not start" in r.getMessage()]
    message = record.getMessage()
    # What started it (the SDK reports only its fallback handshake's "Server returned an error response").
    assert (
        "the server refused the request: HTTP 403 insufficient_scope: Required scope: tools:call" in message
    )
