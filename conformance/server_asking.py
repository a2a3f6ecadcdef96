"""The conformance suite's tools that ask back (sampling, elicitation, roots; SEP-1034 and
SEP-1330 forms; the 2026-07-28 input-required scenarios), written as a user of the runtime
writes them: `ctx.elicit`, `ctx.sample`, `ctx.list_roots`. Added to conformance/server.py's
registry.

At 2025-11-25 the questions are requests to the client; at 2026-07-28 the same code answers
with input-required results (the runtime's MCP server does that), keyed by the names the
scenarios expect (`key=`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
import trio

from runtime import CallContext, CannotAsk, ToolRegistry, tool
from runtime.mcp import Header


class Name(msgspec.Struct, frozen=True):
    name: str


class Color(msgspec.Struct, frozen=True):
    color: str


class Confirm(msgspec.Struct, frozen=True):
    ok: bool


CONTACT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "username": {"type": "string", "description": "User's response"},
        "email": {"type": "string", "description": "User's email address"},
    },
    "required": ["username", "email"],
}


class Defaults(msgspec.Struct, frozen=True):
    """SEP-1034: every primitive type with a default."""

    name: str = "John Doe"
    age: int = 30
    score: float = 95.5
    status: Literal["active", "inactive", "pending"] = "active"
    verified: bool = True


ENUMS_SCHEMA: dict[str, Any] = {  # SEP-1330: the five enum forms, as the scenario gives them
    "type": "object",
    "properties": {
        "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
        "titledSingle": {
            "type": "string",
            "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"},
            ],
        },
        "legacyEnum": {
            "type": "string",
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
        "untitledMulti": {
            "type": "array",
            "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
        },
        "titledMulti": {
            "type": "array",
            "items": {
                "anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"},
                ]
            },
        },
    },
}


@tool
async def test_sampling(ctx: CallContext, prompt: str) -> str:
    """Ask the client's model to complete `prompt`."""
    reply = await ctx.sample(prompt, max_tokens=100)
    return f"LLM response: {reply.text}"


@tool
async def test_elicitation(ctx: CallContext, message: str) -> str:
    """Ask the user for a username and an email."""
    answer = await ctx.elicit(message, CONTACT_SCHEMA)
    return f"User response: action={answer.action}, content={answer.value}"


@tool
async def test_elicitation_sep1034_defaults(ctx: CallContext) -> str:
    """Ask with a default for every primitive type (SEP-1034)."""
    answer = await ctx.elicit("Please review your details", Defaults)
    content = msgspec.to_builtins(answer.value) if answer.value is not None else None
    return f"Elicitation completed: action={answer.action}, content={content}"


@tool
async def test_elicitation_sep1330_enums(ctx: CallContext) -> str:
    """Ask with every enum form (SEP-1330)."""
    answer = await ctx.elicit("Please pick your options", ENUMS_SCHEMA)
    return f"Elicitation completed: action={answer.action}, content={answer.value}"


@tool
async def test_input_required_result_elicitation(ctx: CallContext) -> str:
    """Ask the user's name."""
    answer = await ctx.elicit("What is your name?", Name, key="user_name")
    return f"Hello, {answer.value.name}!" if answer.value is not None else f"No name ({answer.action})"


@tool
async def test_input_required_result_tampered_state(ctx: CallContext) -> str:
    """Ask the user's name (the request state is sealed; a tampered one is refused)."""
    answer = await ctx.elicit("What is your name?", Name, key="user_name")
    return f"Hello, {answer.value.name}!" if answer.value is not None else f"No name ({answer.action})"


@tool
async def test_input_required_result_sampling(ctx: CallContext) -> str:
    """Ask the client's model a question."""
    reply = await ctx.sample("What is the capital of France?", max_tokens=100, key="capital_question")
    return f"The model says: {reply.text}"


@tool
async def test_input_required_result_list_roots(ctx: CallContext) -> str:
    """List the client's roots."""
    roots = await ctx.list_roots(key="client_roots")
    return "Roots: " + ", ".join(f"{r.name or ''} <{r.uri}>" for r in roots)


@tool
async def test_input_required_result_request_state(ctx: CallContext) -> str:
    """Ask for a confirmation; the round's request state is verified by the server on return."""
    answer = await ctx.elicit("Please confirm", Confirm, key="confirm")
    # Reached only once the answer arrived with a request state the server could verify
    # (a tampered or foreign one is refused before the tool runs).
    return f"state-ok: confirmed={answer.value.ok if answer.value is not None else answer.action}"


@tool
async def test_input_required_result_multiple_inputs(ctx: CallContext) -> str:
    """Ask the user, the model and the roots at once."""
    got: dict[str, str] = {}

    async def name() -> None:
        answer = await ctx.elicit("What is your name?", Name, key="user_name")
        got["name"] = answer.value.name if answer.value is not None else answer.action

    async def greeting() -> None:
        got["greeting"] = (await ctx.sample("Generate a greeting", max_tokens=50, key="greeting")).text

    async def roots() -> None:
        got["roots"] = ", ".join(r.uri for r in await ctx.list_roots(key="client_roots"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(name)
        nursery.start_soon(greeting)
        nursery.start_soon(roots)
    return f"{got['greeting']} {got['name']} (roots: {got['roots']})"


@tool
async def test_input_required_result_multi_round(ctx: CallContext) -> str:
    """Ask two questions, one after the other."""
    first = await ctx.elicit("Step 1: What is your name?", Name, key="step1")
    second = await ctx.elicit("Step 2: What is your favorite color?", Color, key="step2")
    name = first.value.name if first.value is not None else "?"
    color = second.value.color if second.value is not None else "?"
    return f"{name} likes {color}"


@tool
async def test_input_required_result_capabilities(ctx: CallContext) -> str:
    """Ask the user and the model; only what the client supports is asked."""
    got: list[str] = []

    async def user() -> None:
        try:
            answer = await ctx.elicit("What is your name?", Name, key="user_name")
        except CannotAsk:  # the client does not do elicitation: go on without a name
            got.append("(no name)")
        else:
            got.append(answer.value.name if answer.value is not None else answer.action)

    async def model() -> None:
        try:
            got.append((await ctx.sample("Generate a greeting", max_tokens=50, key="greeting")).text)
        except CannotAsk:
            got.append("(no greeting)")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(user)
        nursery.start_soon(model)
    return "; ".join(got)


ASKING = ToolRegistry(
    [
        test_sampling,
        test_elicitation,
        test_elicitation_sep1034_defaults,
        test_elicitation_sep1330_enums,
        test_input_required_result_elicitation,
        test_input_required_result_tampered_state,
        test_input_required_result_sampling,
        test_input_required_result_list_roots,
        test_input_required_result_request_state,
        test_input_required_result_multiple_inputs,
        test_input_required_result_multi_round,
        test_input_required_result_capabilities,
    ]
)


@tool
async def test_missing_capability(ctx: CallContext) -> str:
    """Needs sampling: a client that did not declare it gets -32021 (2026-07-28)."""
    reply = await ctx.sample("Say something", max_tokens=10)
    return reply.text


@tool
async def test_streaming_elicitation(ctx: CallContext) -> str:
    """Asks the user; at 2026-07-28 the answer comes back as an input-required result."""
    answer = await ctx.elicit("Continue?", Confirm)
    return f"answered: {answer.action}"


ASKING = ASKING.with_tools(test_missing_capability, test_streaming_elicitation)


@tool
def test_header_parameter(region: Annotated[str, Header("Region")], query: str) -> str:
    """Echo a header parameter (SEP-2243: also sent as the `Mcp-Param-Region` header)."""
    return f"region={region} query={query}"


ASKING = ASKING.with_tools(test_header_parameter)
