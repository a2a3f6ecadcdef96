"""IR -> an Anthropic Messages API tool: `{name, description, input_schema, cache_control?}`.

Anthropic takes JSON Schema (draft 2020-12) as it is, `$defs`/`$ref` and `anyOf` included,
so `input_schema` is the plain schema. `cache_control` is copied from the descriptor when it
asks for a prompt-cache breakpoint. `strict` is ignored: Anthropic's strict tool use has
rules of its own, and the plain schema is what every Claude model accepts.
"""

from __future__ import annotations

from typing import Any

from ._ir import ToolDescriptor
from ._notes import tool_description
from ._to_jsonschema import parameters_schema

__all__ = ["anthropic_tool"]


def anthropic_tool(descriptor: ToolDescriptor, strict: bool = False) -> dict[str, Any]:
    """The tool definition for Anthropic's `tools=[...]`."""
    tool: dict[str, Any] = {
        "name": descriptor.name,
        "description": tool_description(descriptor),
        "input_schema": parameters_schema(descriptor),
    }
    if descriptor.cache_control:
        tool["cache_control"] = dict(descriptor.cache_control)
    return tool
