"""Descriptions that carry what a provider's schema keywords cannot.

When a dialect drops a keyword its provider rejects (a default, a length bound, a format),
the model still reads the constraint in the description, and the decoder still enforces it.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ._ir import ToolParameter

__all__ = ["default_note", "describe", "has_lookaround", "json_type"]

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
    """The JSON Schema type name of a scalar value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "string"


def has_lookaround(pattern: str) -> bool:
    """True for a regex with lookahead or lookbehind, which RE2-style engines reject."""
    return any(token in pattern for token in _LOOKAROUND)
