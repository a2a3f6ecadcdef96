"""Tools served by `python -m runtime serve tests.mcp_fixtures:registry` in tests/test_mcp_server.py."""

from __future__ import annotations

import msgspec

from runtime import ToolRegistry, tool, validate


class Forecast(msgspec.Struct, frozen=True):
    """The weather of one day."""

    city: str
    celsius: float
    sunny: bool


@tool(title="Add two integers", annotations={"readOnlyHint": True, "idempotentHint": True})
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(title="Weather forecast", annotations={"readOnlyHint": True, "openWorldHint": False})
async def forecast(city: str, days: int = 1) -> Forecast:
    """Forecast the weather of a city.

    Args:
        city: the city's name.
        days: how many days ahead.
    """
    validate(days >= 1, "days must be at least 1")
    return Forecast(city=city, celsius=21.5 + days, sunny=city != "London")


@tool
def search(query: str, limit: int = 3) -> list[str]:
    """Search the index; at most `limit` hits.

    Args:
        query: what to look for.
        limit: how many hits at most.
    """
    return [f"{query} #{i}" for i in range(1, limit + 1)]


@tool
def shout(text: str) -> str:
    """Repeat a text in capitals."""
    return text.upper()


registry = ToolRegistry([add, forecast, search, shout])
