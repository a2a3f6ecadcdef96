"""Tools that ask back, served by `python -m runtime serve tests.mcp_asking_fixtures:registry`
in tests/test_mcp_asking.py."""

from __future__ import annotations

import enum

import msgspec
import trio

from runtime import CallContext, Elicited, ToolRegistry, tool


class Tier(enum.Enum):
    FREE = "free"
    PRO = "pro"


class Signup(msgspec.Struct, frozen=True):
    name: str
    tier: Tier = Tier.FREE
    seats: int = 1


@tool
async def sign_up(ctx: CallContext, team: str) -> str:
    """Ask the user for their sign-up details."""
    answer = await ctx.elicit(f"Sign up to {team}", Signup)
    if answer.value is None:
        return f"not signed up ({answer.action})"
    return f"{answer.value.name} on {answer.value.tier.value} with {answer.value.seats} seats"


@tool(requires_approval=True)
async def wipe(path: str) -> str:
    """Wipe a folder (pretend); the user approves each call."""
    return f"wiped {path}"


@tool
async def haiku(ctx: CallContext, topic: str) -> str:
    """Ask the client's model for a haiku."""
    reply = await ctx.sample(f"A haiku about {topic}", max_tokens=50, model_hints=["small"])
    return f"{reply.model} wrote: {reply.text}"


@tool
async def where(ctx: CallContext) -> list[str]:
    """The client's roots."""
    return [f"{r.name}={r.uri}" for r in await ctx.list_roots()]


@tool
async def everything(ctx: CallContext) -> str:
    """Ask the user, the model and the roots at once."""
    got: dict[str, str] = {}

    async def who() -> None:
        answer: Elicited[Signup] = await ctx.elicit("Who are you?", Signup)
        got["name"] = answer.value.name if answer.value is not None else answer.action

    async def model() -> None:
        got["model"] = (await ctx.sample("Say hi", max_tokens=5)).text

    async def roots() -> None:
        got["roots"] = ",".join(r.uri for r in await ctx.list_roots())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(who)
        nursery.start_soon(model)
        nursery.start_soon(roots)
    return f"{got['name']} / {got['model']} / {got['roots']}"


registry = ToolRegistry([sign_up, wipe, haiku, where, everything])
