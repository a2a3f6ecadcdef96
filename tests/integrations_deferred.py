"""Tools and a counter shared by the frameworks' deferred-call tests
(tests/test_integrations_*_deferred.py): a payment that needs an approval, a sibling with a
side effect of its own, and a tool whose result comes from outside (a browser)."""

from __future__ import annotations

import collections

import msgspec

from runtime import CallContext, tool

RAN: collections.Counter[str] = collections.Counter()
"""How many times each side effect happened, by tool and argument ("pay 900 Bob", "note hi")."""


@tool(requires_approval=True)
async def pay(amount: int, to: str) -> str:
    """Pay someone (needs an approval)."""
    RAN[f"pay {amount} {to}"] += 1
    return f"paid {amount} EUR to {to}"


@tool
async def note(text: str) -> str:
    """Write a note (runs at once)."""
    RAN[f"note {text}"] += 1
    return f"noted {text}"


class Selection(msgspec.Struct):
    text: str
    words: int


@tool
async def read_selection(tab: int, ctx: CallContext) -> Selection:
    """Read the text the user selected in a browser tab (the browser answers)."""
    RAN[f"read_selection {tab}"] += 1
    await ctx.defer("the browser reads the selection")
    raise AssertionError("ctx.defer never returns")


TOOLS = [pay, note, read_selection]
