"""IR -> provider dialects: one pure function per provider, looked up by name.

Each dialect takes a descriptor and the strict flag and returns the tool definition the
provider's API accepts. Results are cached by the tool and the registry, not here.

| provider           | function                | shape                                                      |
|--------------------|-------------------------|------------------------------------------------------------|
| `openai`           | `openai_chat_tool`      | `{"type": "function", "function": {name, description, parameters, strict?}}` |
| `openai-responses` | `openai_responses_tool` | `{"type": "function", name, description, parameters, strict}` |
| `anthropic`        | `anthropic_tool`        | `{name, description, input_schema, cache_control?}`        |
| `gemini`           | `gemini_declaration`    | a FunctionDeclaration: `{name, description, parameters?}` (OpenAPI subset) |
| `mcp`              | `mcp_tool`              | an MCP Tool: `{name, title?, description, inputSchema, outputSchema?, annotations?}` |
| `jsonschema`       | (plain)                 | `{name, description, parameters}` (a 2020-12 document: `$schema`, shared types in `$defs`) |
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._anthropic import anthropic_tool
from ._gemini import gemini_declaration
from ._ir import ToolDescriptor
from ._mcp import mcp_tool
from ._openai import openai_chat_tool, openai_responses_tool
from ._to_jsonschema import document_schema

__all__ = ["DIALECTS", "Dialect", "render_tool"]

Dialect = Callable[[ToolDescriptor, bool], dict[str, Any]]


def _plain(descriptor: ToolDescriptor, strict: bool) -> dict[str, Any]:
    return {
        "name": descriptor.name,
        "description": descriptor.description,
        "parameters": document_schema(descriptor),
    }


DIALECTS: dict[str, Dialect] = {
    "openai": openai_chat_tool,
    "openai-responses": openai_responses_tool,
    "anthropic": anthropic_tool,
    "gemini": gemini_declaration,
    "mcp": mcp_tool,
    "jsonschema": _plain,
}


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
