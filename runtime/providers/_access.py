"""Reading SDK objects and plain dicts alike, and the content of a result as parts."""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from ..messages import (
    ContentPart,
    ImagePart,
    ResourceLinkPart,
    TextPart,
    ToolResult,
    ToolSuccess,
    describe_part,
)

__all__ = ["b64", "data_url", "field", "has_parts", "items", "json_arguments", "parts_of"]

_encoder = msgspec.json.Encoder()


def field(obj: Any, *names: str) -> Any:
    """The first of `names` set on `obj` (a key of a mapping, else an attribute), or None."""
    for name in names:
        value = obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)
        if value is not None:
            return value
    return None


def items(value: Any) -> list[Any]:
    """`value` as a list of items: a list or tuple as it is, None as [], anything else as one item.

    SDK objects are pydantic models, which iterate over their fields: they count as one item.
    """
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return list(value)
    if isinstance(value, str | bytes | Mapping) or hasattr(value, "model_dump"):
        return [value]
    if isinstance(value, Iterable):
        return list(value)
    return [value]


def json_arguments(value: Any) -> str | dict[str, Any]:
    """Arguments as a ToolCall holds them: JSON text as sent, an object as a dict."""
    if value is None:
        return "{}"
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return dict(value)
    return _encoder.encode(value).decode()  # not an object: the decoder will say so


def parts_of(result: ToolResult) -> tuple[ContentPart, ...]:
    """A success's multimodal parts as a model reads them; otherwise one text part holding
    `content`.

    A link to an artifact (a piece kept whole by the runtime, `artifact://...`) follows the text
    that stands for it (its handle, its size, its start and end, how to read more): that text is
    what the model reads, and the link is left out. A link with no such text before it is read
    as a line of text naming the artifact.
    """
    if isinstance(result, ToolSuccess) and result.parts:
        return _read(result.parts)
    return (TextPart(text=result.content),)


def has_parts(result: ToolResult) -> bool:
    """True when the result carries multimodal parts of its own (more than the text that stands
    for an artifact, which `content` holds too)."""
    if not isinstance(result, ToolSuccess) or not result.parts:
        return False
    shown = _read(result.parts)
    return not (len(shown) == 1 and type(shown[0]) is TextPart and shown[0].text == result.content)


def _read(parts: tuple[ContentPart, ...]) -> tuple[ContentPart, ...]:
    shown: list[ContentPart] = []
    for part in parts:
        if isinstance(part, ResourceLinkPart) and part.uri.startswith("artifact://"):
            before = shown[-1] if shown else None
            if isinstance(before, TextPart) and part.name in before.text:
                continue  # the text before it shows it already
            shown.append(TextPart(text=describe_part(part)))
            continue
        shown.append(part)
    return tuple(shown)


def b64(data: bytes) -> str:
    """Bytes as base64 text."""
    return base64.b64encode(data).decode("ascii")


def data_url(image: ImagePart) -> str:
    """An image as a `data:` URL."""
    return f"data:{image.mime_type};base64,{b64(image.data)}"
