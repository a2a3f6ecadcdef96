"""Tools that ask back, run locally: `ctx.elicit`, `ctx.sample`, `ctx.list_roots` answered by the
handlers given to `open_runtime` (or an `asking(...)` block), and `requires_approval`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Annotated, Literal

import msgspec
import pytest
import trio

from runtime import (
    Answer,
    CallContext,
    Elicitation,
    FailureKind,
    Root,
    RootsRequest,
    Sampled,
    Sampling,
    ToolCall,
    ToolFailure,
    ToolPending,
    ToolSuccess,
    asking,
    open_runtime,
    tool,
)
from runtime.exceptions import ToolDefinitionError
from runtime.tools.lowlevel import elicitation_schema


class Size(enum.Enum):
    SMALL = "small"
    LARGE = "large"


class Order(msgspec.Struct, frozen=True):
    """What to order."""

    item: Annotated[str, msgspec.Meta(description="what to order", min_length=1)]
    size: Size = Size.SMALL
    count: int = 1
    gift: bool = False
    extras: list[Literal["sauce", "napkins"]] = []
    note: str | None = None


@tool
async def order(ctx: CallContext, shop: str) -> str:
    """Ask the user what to order at `shop`."""
    answer = await ctx.elicit(f"What would you like from {shop}?", Order)
    if not answer.accepted:
        return f"nothing ({answer.action}: {answer.reason})"
    value = answer.value
    assert value is not None
    return f"{value.count} {value.size.value} {value.item} gift={value.gift} extras={value.extras}"


@tool
async def summarize(ctx: CallContext, text: str) -> str:
    """Summarize with the caller's model."""
    reply = await ctx.sample(text, system_prompt="Be brief.", max_tokens=20)
    return f"{reply.model}: {reply.text}"


@tool
async def workspace(ctx: CallContext) -> list[str]:
    """List the caller's roots."""
    return [r.uri for r in await ctx.list_roots()]


async def test_elicit_returns_the_answer_decoded_into_the_type() -> None:
    seen: list[Elicitation] = []

    async def on_elicit(q: Elicitation) -> Answer:
        seen.append(q)
        return Answer.accept({"item": "pizza", "size": "large", "count": 2, "extras": ["sauce"]})

    async with open_runtime([order], on_elicit=on_elicit, tracing=False) as rt:
        result = await rt.invoke(order, shop="Luigi's")
    assert isinstance(result, ToolSuccess)
    assert result.content == "2 large pizza gift=False extras=['sauce']"
    (q,) = seen
    assert q.message == "What would you like from Luigi's?"
    assert q.tool_name == "order"
    assert q.call_id == result.call_id
    assert not q.approval
    assert q.schema["required"] == ["item"]
    assert q.schema["properties"]["size"] == {
        "type": "string",
        "enum": ["large", "small"],
        "default": "small",
    }
    assert q.schema["properties"]["item"] == {
        "type": "string",
        "description": "what to order",
        "minLength": 1,
    }
    assert q.schema["properties"]["extras"]["items"] == {"type": "string", "enum": ["napkins", "sauce"]}


@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_elicit_decline_and_cancel_reach_the_tool(action: Literal["decline", "cancel"]) -> None:
    async def on_elicit(q: Elicitation) -> Answer:
        return Answer(action=action, reason="not hungry")

    async with open_runtime([order], on_elicit=on_elicit, tracing=False) as rt:
        result = await rt.invoke(order, shop="x")
    assert result.content == f"nothing ({action}: not hungry)"


async def test_an_answer_that_does_not_fit_the_type_is_rejected() -> None:
    async def on_elicit(q: Elicitation) -> Answer:
        return Answer.accept({"item": "pizza", "count": "many"})

    async with open_runtime([order], on_elicit=on_elicit, tracing=False) as rt:
        result = await rt.invoke(order, shop="x")
    assert isinstance(result, ToolFailure)
    assert result.kind is FailureKind.REJECTED
    assert "does not fit the question" in result.message
    assert "$.count" in result.message


async def test_with_no_handler_a_tool_that_asks_fails_unavailable_and_says_why() -> None:
    async with open_runtime([order, summarize, workspace], tracing=False) as rt:
        results = await rt.call_many(
            [
                ToolCall(id="1", name="order", arguments='{"shop": "x"}'),
                ToolCall(id="2", name="summarize", arguments='{"text": "x"}'),
                ToolCall(id="3", name="workspace"),
            ]
        )
    kinds = {r.kind for r in results if isinstance(r, ToolFailure)}
    assert kinds == {FailureKind.UNAVAILABLE}
    assert "open_runtime(on_elicit=...)" in results[0].content
    assert "sampling" in results[1].content
    assert "on_sample" in results[1].content
    assert "roots" in results[2].content
    assert "on_roots" in results[2].content


async def test_sample_and_list_roots_go_to_their_handlers() -> None:
    requests: list[Sampling] = []

    async def on_sample(r: Sampling) -> Sampled:
        requests.append(r)
        return Sampled(text=f"{len(r.messages[0].text)} chars", model="local-model")

    async def on_roots(r: RootsRequest) -> list[Root]:
        assert r.tool_name == "workspace"
        return [Root(uri="file:///work", name="work"), Root(uri="file:///tmp")]

    async with open_runtime(
        [summarize, workspace], on_sample=on_sample, on_roots=on_roots, tracing=False
    ) as rt:
        summary = await rt.invoke(summarize, text="hello world")
        roots = await rt.invoke(workspace)
    assert summary.content == "local-model: 11 chars"
    (r,) = requests
    assert r.system_prompt == "Be brief."
    assert r.max_tokens == 20
    assert r.messages[0].role == "user"
    assert isinstance(roots, ToolSuccess)
    assert roots.value == ["file:///work", "file:///tmp"]


async def test_an_asking_block_answers_before_the_runtime_handler() -> None:
    async def runtime_side(q: Elicitation) -> Answer:
        return Answer.decline("runtime")

    async def block_side(q: Elicitation) -> Answer:
        return Answer.decline("block")

    async with open_runtime([order], on_elicit=runtime_side, tracing=False) as rt:
        with asking(on_elicit=block_side):
            inside = await rt.invoke(order, shop="x")
        outside = await rt.invoke(order, shop="x")
    assert inside.content == "nothing (decline: block)"
    assert outside.content == "nothing (decline: runtime)"


async def test_a_handler_that_fails_is_unavailable_with_its_error() -> None:
    async def on_sample(r: Sampling) -> Sampled:
        raise ConnectionError("model is down")

    async with open_runtime([summarize], on_sample=on_sample, tracing=False) as rt:
        result = await rt.invoke(summarize, text="x")
    assert isinstance(result, ToolFailure)
    assert result.kind is FailureKind.UNAVAILABLE
    assert "ConnectionError: model is down" in result.message


async def test_a_handler_that_never_answers_is_bounded_by_the_call_deadline(
    autojump_clock: trio.abc.Clock,
) -> None:
    async def on_elicit(q: Elicitation) -> Answer:
        await trio.sleep_forever()
        raise AssertionError

    async with open_runtime([order], on_elicit=on_elicit, tracing=False) as rt:
        start = trio.current_time()
        result = await rt.call(ToolCall(id="1", name="order", arguments='{"shop":"x"}'), timeout=30)
    assert result.kind is FailureKind.TIMEOUT
    assert trio.current_time() - start == pytest.approx(30)


@dataclass
class Confirm:
    ok: bool
    why: str = "because"


class Nested(msgspec.Struct):
    inner: Confirm


def test_elicitation_schemas_are_flat_forms() -> None:
    assert elicitation_schema(Confirm) == {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}, "why": {"type": "string", "default": "because"}},
        "required": ["ok"],
    }
    assert elicitation_schema(None) == {"type": "object", "properties": {}}

    with pytest.raises(TypeError, match="field 'inner'"):
        elicitation_schema(Nested)
    with pytest.raises(TypeError, match="object type"):
        elicitation_schema(int)


# -- requires_approval ------------------------------------------------------------------

ran: list[str] = []


@tool(requires_approval=True)
def delete_file(path: str) -> str:
    """Delete a file (pretend)."""
    ran.append(path)
    return f"deleted {path}"


@tool(requires_approval=lambda args: args.path.startswith("/etc"))
async def delete_some(path: str) -> str:
    """Delete a file; only system files need approval."""
    ran.append(path)
    return f"deleted {path}"


@pytest.fixture(autouse=True)
def _clear_ran() -> None:
    ran.clear()


async def test_an_approval_that_is_denied_is_rejected_and_the_tool_never_ran() -> None:
    questions: list[Elicitation] = []

    async def on_elicit(q: Elicitation) -> Answer:
        questions.append(q)
        return Answer.decline("not that file")

    async with open_runtime([delete_file], on_elicit=on_elicit, tracing=False) as rt:
        result = await rt.call(ToolCall(id="d1", name="delete_file", arguments='{"path": "/home/a"}'))
    assert isinstance(result, ToolFailure)
    assert result.kind is FailureKind.REJECTED
    assert result.message == "the user declined running tool 'delete_file': not that file; it did not run"
    assert ran == []
    (q,) = questions
    assert q.approval
    assert q.tool_name == "delete_file"
    assert q.call_id == "d1"
    assert q.arguments == '{"path": "/home/a"}'
    assert "/home/a" in q.message


async def test_an_approval_that_is_granted_runs_the_tool_once() -> None:
    async def on_elicit(q: Elicitation) -> Answer:
        return Answer.accept()

    async with open_runtime([delete_file], on_elicit=on_elicit, tracing=False) as rt:
        result = await rt.invoke(delete_file, path="/home/a")
    assert result.content == "deleted /home/a"
    assert ran == ["/home/a"]


async def test_a_predicate_asks_only_for_the_calls_it_picks() -> None:
    asked: list[str | None] = []

    async def on_elicit(q: Elicitation) -> Answer:
        asked.append(q.arguments)
        return Answer.cancel()

    async with open_runtime([delete_some], on_elicit=on_elicit, tracing=False) as rt:
        home = await rt.invoke(delete_some, path="/home/a")
        etc = await rt.invoke(delete_some, path="/etc/passwd")
    assert home.ok
    assert etc.kind is FailureKind.REJECTED
    assert "cancelled" in etc.content
    assert ran == ["/home/a"]
    assert asked == ['{"path":"/etc/passwd"}']


async def test_approval_with_no_one_to_ask_defers_the_call_and_does_not_run_the_tool() -> None:
    # No one can approve now: the call waits for an approval in the journal (issue 43) and its
    # caller reads a pending result; before, it was UNAVAILABLE and could never run.
    async with open_runtime([delete_file], tracing=False) as rt:
        result = await rt.invoke(delete_file, path="/home/a")
        assert isinstance(result, ToolPending)
        assert result.reason == "approval"
        assert "needs an approval" in result.content
        (waiting,) = await rt.pending()
        assert waiting.id == result.detached_id
    assert ran == []


def test_requires_approval_is_checked_at_definition() -> None:
    with pytest.raises(ToolDefinitionError, match="requires_approval"):
        tool(name="bad", requires_approval="yes")(lambda: None)  # type: ignore[call-overload]


async def test_each_question_is_an_event_on_the_call_span() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from runtime.tracing import Tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    async def on_elicit(q: Elicitation) -> Answer:
        return Answer.decline()

    async def on_sample(r: Sampling) -> Sampled:
        raise ConnectionError("down")

    async with open_runtime(
        [order, summarize],
        on_elicit=on_elicit,
        on_sample=on_sample,
        tracing=Tracing(tracer_provider=provider),
    ) as rt:
        await rt.invoke(order, shop="x")
        await rt.invoke(summarize, text="x")
    events = {
        span.name: [(e.name, dict(e.attributes or {})) for e in span.events]
        for span in exporter.get_finished_spans()
    }
    assert events["execute_tool order"] == [
        ("tool.ask", {"tool.ask.kind": "elicitation", "tool.ask.outcome": "decline"})
    ]
    assert events["execute_tool summarize"][0] == (
        "tool.ask",
        {"tool.ask.kind": "sampling", "tool.ask.outcome": "failed: ConnectionError"},
    )
