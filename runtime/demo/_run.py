"""A few tools, their schemas, as the model would be shown them."""

from __future__ import annotations

import json
from typing import Annotated, Literal

from ..registry import ToolRegistry
from ..tools import Description, tool

__all__ = ["demo_registry", "run_demo"]


@tool
def get_weather(
    city: Annotated[str, Description("City name, e.g. 'Paris'")],
    unit: Literal["celsius", "fahrenheit"] = "celsius",
) -> dict[str, object]:
    """Current weather for a city."""
    temperature = 21 if unit == "celsius" else 70
    return {"city": city, "temperature": temperature, "unit": unit}


@tool
async def search_docs(query: str, limit: int = 3) -> list[str]:
    """Search the documentation.

    Args:
        query: words to look for.
        limit: how many hits to return.
    """
    return [f"{query} #{i}" for i in range(limit)]


def demo_registry() -> ToolRegistry:
    """The demo's tools."""
    return ToolRegistry([get_weather, search_docs])


def run_demo() -> int:
    """Print the demo tools' schemas."""
    registry = demo_registry()
    print(json.dumps(registry.schemas("jsonschema"), indent=2))
    return 0
