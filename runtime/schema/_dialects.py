"""IR -> provider dialects: one pure function per provider, looked up by name.

Each dialect takes a descriptor and the strict flag and returns the tool definition the
provider's API accepts. Results are cached by the tool and the registry, not here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._ir import ToolDescriptor
from ._to_jsonschema import parameters_schema

__all__ = ["DIALECTS", "render_tool"]

Dialect = Callable[[ToolDescriptor, bool], dict[str, Any]]


def _plain(descriptor: ToolDescriptor, strict: bool) -> dict[str, Any]:
    return {
        "name": descriptor.name,
        "description": descriptor.description,
        "parameters": parameters_schema(descriptor),
    }


DIALECTS: dict[str, Dialect] = {"jsonschema": _plain}


def render_tool(descriptor: ToolDescriptor, provider: str, *, strict: bool = False) -> dict[str, Any]:
    """The tool definition for `provider`.

    Raises:
        ValueError: the provider is not one the runtime knows.
    """
    try:
        dialect = DIALECTS[provider]
    except KeyError:
        raise ValueError(f"unknown provider {provider!r}; known: {', '.join(sorted(DIALECTS))}") from None
    return dialect(descriptor, strict)
