"""Descriptions that carry what a provider's schema keywords cannot.

When a dialect drops a keyword its provider rejects (a default, a length bound, a format),
the model still reads the constraint in the description, and the decoder still enforces it.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ._ir import AnyValue, Array, Enum, Object, Ref, String, ToolDescriptor, ToolParameter, TypeNode, Union

__all__ = [
    "default_note",
    "describe",
    "has_lookaround",
    "json_type",
    "shown",
    "summary",
    "tool_description",
    "tuple_note",
]

_MAX_SHOWN = 120  # characters of a default shown in a description

_encoder = msgspec.json.Encoder()
_LOOKAROUND = ("(?=", "(?!", "(?<=", "(?<!")


def describe(text: str | None, notes: list[str] | tuple[str, ...] = ()) -> str | None:
    """`text` followed by each note in parentheses: `Max results (default: 10)`."""
    parts = [text] if text else []
    parts.extend(f"({note})" for note in notes)
    return " ".join(parts) or None


def default_note(param: ToolParameter) -> str | None:
    """`default: 10` for a parameter with a known default, else None."""
    if not param.has_default:
        return None
    try:
        shown = _encoder.encode(param.default).decode()
    except (TypeError, ValueError):
        shown = repr(param.default)
    if len(shown) > _MAX_SHOWN:
        shown = shown[: _MAX_SHOWN - 3] + "..."
    return f"default: {shown}"


def json_type(value: Any) -> str:
    """The JSON Schema type name of a JSON value (anything else counts as a string)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "string"


def has_lookaround(pattern: str) -> bool:
    """True for a regex with lookahead or lookbehind, which RE2-style engines reject."""
    return any(token in pattern for token in _LOOKAROUND)


def shown(value: Any) -> str:
    """A JSON scalar as the model would write it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if value is None:
        return "null"
    return str(value)


def summary(node: TypeNode | bool) -> str:
    """A few words for a type, for a description."""
    if node is True or isinstance(node, AnyValue):
        return "any JSON value"
    if node is False:
        return "nothing"
    if isinstance(node, Union):
        return " or ".join(summary(o) for o in node.options)
    if isinstance(node, Enum):
        return "one of " + ", ".join(shown(v) for v in node.values)
    if isinstance(node, Array):
        if node.prefix_items is not None:
            return "a list of " + ", ".join(summary(i) for i in node.prefix_items)
        return f"a list of {summary(node.items)}"
    if isinstance(node, Object):
        return node.name or "an object"
    if isinstance(node, Ref):
        return node.name
    if isinstance(node, String):
        if node.content_encoding:
            return f"{node.content_encoding} text"
        if node.format:
            return f"{node.format} text"
    return type(node).__name__.lower()


def tuple_note(prefix_items: tuple[TypeNode, ...]) -> str:
    """The positions of a tuple in words, for dialects without `prefixItems`."""
    if not prefix_items:
        return "exactly 0 items"
    positions = "; ".join(f"{i}: {summary(node)}" for i, node in enumerate(prefix_items, 1))
    return f"exactly {len(prefix_items)} items, by position {positions}"


def tool_description(descriptor: ToolDescriptor) -> str:
    """The tool's description with what its schema requires and the IR cannot say (`notes`)."""
    if not descriptor.notes:
        return descriptor.description
    text = descriptor.description.rstrip()
    if text and not text.endswith((".", "!", "?", ":")):
        text += "."
    return " ".join([text, *descriptor.notes]) if text else " ".join(descriptor.notes)
