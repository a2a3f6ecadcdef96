"""Tools that ask back over MCP: our server <-> our client in real processes, both eras.

2025-11-25: the server sends `elicitation/create`, `sampling/createMessage`, `roots/list`
requests on the call's stream; 2026-07-28: the call is answered with an `InputRequiredResult`
and our client (the SDK's driver) calls again with the answers. Either way the client's
answers come from the handlers given to its `open_runtime`.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import mcp_types as types
import pytest
from mcp import Client, MCPError
from mcp.client._memory import InMemoryTransport

from runtime import (
    Answer,
    Elicitation,
    FailureKind,
    Root,
    RootsRequest,
    Sampled,
    Sampling,
    ToolCall,
    ToolFailure,
    open_runtime,
)
from runtime import mcp as rmcp
from runtime.mcp._asking import with_defaults
from runtime.mcp._server import ServedRuntime
from tests.mcp_asking_fixtures import registry

ROOT = Path(__file__).resolve().parent.parent
ERAS = [pytest.param("legacy", id="2025-11-25"), pytest.param("2026-07-28", id="2026-07-28")]


def served(mode: str) -> rmcp.ServerSpec:
    return rmcp.stdio(
        sys.executable,
        args=["-m", "runtime", "serve", "tests.mcp_asking_fixtures:registry"],
        cwd=str(ROOT),
        mode=mode,
        connect_timeout=30,
        call_timeout=30,
    )


class User:
    """A user at the client: answers questions and records them."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.questions: list[Elicitation] = []
        self.prompts: list[Sampling] = []

    async def on_elicit(self, q: Elicitation) -> Answer:
        self.questions.append(q)
        return self.answer

    async def on_sample(self, r: Sampling) -> Sampled:
        self.prompts.append(r)
        return Sampled(text=f"{len(self.prompts)}: {r.messages[0].text.upper()}", model="local-7b")

    async def on_roots(self, r: RootsRequest) -> list[Root]:
        return [Root(uri="file:///work", name="work")]


@pytest.mark.parametrize("mode", ERAS)
async def test_elicitation_end_to_end_through_our_server_and_our_client(mode: str) -> None:
    user = User(Answer.accept({"name": "Ada", "tier": "pro", "seats": 3}))
    async with open_runtime(mcp_servers=[served(mode)], on_elicit=user.on_elicit, tracing=False) as rt:
        result = await rt.call(ToolCall(id="1", name="sign_up", arguments='{"team": "core"}'))
    assert result.ok, result.content
    assert result.content == "Ada on pro with 3 seats"
    (q,) = user.questions
    assert q.message == "Sign up to core"
    assert q.schema == {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "tier": {"type": "string", "enum": ["free", "pro"], "default": "free"},
            "seats": {"type": "integer", "default": 1},
        },
        "required": ["name"],
    }


@pytest.mark.parametrize("mode", ERAS)
async def test_an_approval_denied_at_the_client_is_rejected_by_the_server(mode: str) -> None:
    user = User(Answer.decline())
    async with open_runtime(mcp_servers=[served(mode)], on_elicit=user.on_elicit, tracing=False) as rt:
        denied = await rt.call(ToolCall(id="1", name="wipe", arguments='{"path": "/data"}'))
        user.answer = Answer.accept()
        granted = await rt.call(ToolCall(id="2", name="wipe", arguments='{"path": "/data"}'))
    assert isinstance(denied, ToolFailure)
    assert denied.kind is FailureKind.REJECTED
    assert "declined running tool 'wipe'" in denied.message
    assert granted.content == "wiped /data"
    assert "/data" in user.questions[0].message


@pytest.mark.parametrize("mode", ERAS)
async def test_sampling_and_roots_are_answered_by_the_client_handlers(mode: str) -> None:
    user = User(Answer.cancel())
    async with open_runtime(
        mcp_servers=[served(mode)], on_sample=user.on_sample, on_roots=user.on_roots, tracing=False
    ) as rt:
        poem = await rt.call(ToolCall(id="1", name="haiku", arguments='{"topic": "trio"}'))
        roots = await rt.call(ToolCall(id="2", name="where"))
    assert poem.content == "local-7b wrote: 1: A HAIKU ABOUT TRIO"
    (prompt,) = user.prompts
    assert prompt.max_tokens == 50
    assert prompt.model_hints == ("small",)
    assert roots.ok
    assert roots.content == '["work=file:///work"]'


@pytest.mark.parametrize("mode", ERAS)
async def test_a_capability_the_client_did_not_announce_fails_clearly(mode: str) -> None:
    async with open_runtime(mcp_servers=[served(mode)], tracing=False) as rt:
        results = await rt.call_many(
            [
                ToolCall(id="1", name="sign_up", arguments='{"team": "core"}'),
                ToolCall(id="2", name="haiku", arguments='{"topic": "x"}'),
                ToolCall(id="3", name="where"),
            ]
        )
    # 2025-11-25: the tool's failure (an isError result); 2026-07-28: the server's -32021 error,
    # which says this client lacks a capability: UNAVAILABLE, naming the handler (issue 25, point 13)
    kind = FailureKind.REJECTED if mode == "legacy" else FailureKind.UNAVAILABLE
    for result, capability in zip(results, ["elicitation", "sampling", "roots"], strict=True):
        assert isinstance(result, ToolFailure)
        assert result.kind is kind
        assert re.search(
            f"did not (announce|declare) the {capability}|did not declare .*: {capability}", result.message
        )


async def test_questions_asked_at_once_go_out_in_one_round() -> None:
    user = User(Answer.accept({"name": "Ada"}))
    async with open_runtime(
        mcp_servers=[served("2026-07-28")],
        on_elicit=user.on_elicit,
        on_sample=user.on_sample,
        on_roots=user.on_roots,
        tracing=False,
    ) as rt:
        result = await rt.call(ToolCall(id="1", name="everything"))
    assert result.content == "Ada / 1: SAY HI / file:///work"
    assert len(user.questions) == 1
    assert len(user.prompts) == 1  # one round answered all three; the replay asked no one


async def test_a_tampered_request_state_is_refused() -> None:
    async with open_runtime(registry, tracing=False) as rt:
        server = ServedRuntime(rt)

        async def never(context: object, params: object) -> types.ElicitResult:
            raise AssertionError("the rounds are driven by hand here")

        async with Client(
            InMemoryTransport(server.server), mode="2026-07-28", elicitation_callback=never
        ) as client:
            first = await client.session.call_tool("sign_up", {"team": "core"}, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult)
            assert first.request_state
            (key,) = first.input_requests or {}
            tampered = first.request_state[:-4] + (
                "AAAA" if not first.request_state.endswith("AAAA") else "BBBB"
            )
            with pytest.raises(MCPError, match="Invalid or expired requestState"):
                await client.session.call_tool(
                    "sign_up",
                    {"team": "core"},
                    allow_input_required=True,
                    request_state=tampered,
                    input_responses={key: types.ElicitResult(action="accept", content={"name": "Eve"})},
                )


def test_our_client_fills_in_the_defaults_a_user_left_out() -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "default": "John Doe"},
            "age": {"type": "integer", "default": 30},
            "email": {"type": "string"},
        },
    }
    assert with_defaults({"age": 41}, schema) == {"age": 41, "name": "John Doe"}
    assert with_defaults({}, {"type": "object"}) == {}


async def test_an_mcp_servers_tools_can_require_approval_too() -> None:
    questions: list[Elicitation] = []

    async def on_elicit(q: Elicitation) -> Answer:
        questions.append(q)
        return Answer.decline("too big") if "100" in (q.arguments or "") else Answer.accept()

    spec = rmcp.stdio(
        sys.executable,
        args=["-m", "runtime", "serve", "tests.mcp_fixtures:registry"],
        cwd=str(ROOT),
        connect_timeout=30,
        requires_approval=lambda args: args.get("a", 0) > 1,
    )
    async with open_runtime(mcp_servers=[spec], on_elicit=on_elicit, tracing=False) as rt:
        small = await rt.call(ToolCall(id="1", name="add", arguments='{"a": 1, "b": 2}'))
        allowed = await rt.call(ToolCall(id="2", name="add", arguments='{"a": 2, "b": 2}'))
        denied = await rt.call(ToolCall(id="3", name="add", arguments='{"a": 100, "b": 2}'))
    assert small.content == "3"
    assert allowed.content == "4"
    assert isinstance(denied, ToolFailure)
    assert denied.kind is FailureKind.REJECTED
    assert denied.message == "the user declined running tool 'add': too big; it did not run"
    assert [q.call_id for q in questions] == ["2", "3"]
