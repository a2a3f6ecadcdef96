"""Anthropic: `tool_use` blocks in, `tool_result` blocks out (Messages API).

```python
from runtime.providers import anthropic as adapter

results = await rt.call_many(adapter.calls_from_content(message.content))
messages += [
    {"role": "assistant", "content": message.content},
    adapter.result_message(results),          # {"role": "user", "content": result_blocks}
]
```

Failures carry `"is_error": true` and their "Error: ..." text. Images go into the
`tool_result` as base64 `image` blocks (JPEG, PNG, GIF and WebP, what Anthropic accepts;
another image type is replaced by a note saying so).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..messages import ImagePart, ResourcePart, TextPart, ToolCall, ToolFailure, ToolResult, describe_part
from ..search import SEARCH_TOOL, SearchActivity, SearchRequest, found_tools
from ._access import b64, field, has_parts, items, json_arguments, parts_of

__all__ = ["IMAGE_TYPES", "calls_from_content", "result_blocks", "result_message", "tool_searches"]

IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
"""Image media types a `tool_result` may hold."""


def calls_from_content(content: Any) -> list[ToolCall]:
    """The `tool_use` blocks of an assistant turn as calls, in order; `input` stays a dict.

    Args:
        content: a `Message` (its content is read), its content blocks, or the same as dicts.
    """
    blocks = content if isinstance(content, list | tuple) else field(content, "content")
    if blocks is None or isinstance(blocks, str):
        return []
    calls: list[ToolCall] = []
    for block in items(blocks):
        if field(block, "type") != "tool_use":
            continue  # text, thinking, server tools (run by Anthropic, not here)
        calls.append(
            ToolCall(
                id=str(field(block, "id") or ""),
                name=str(field(block, "name") or ""),
                arguments=json_arguments(field(block, "input") or {}),
            )
        )
    return calls


def result_blocks(results: Iterable[ToolResult]) -> list[dict[str, Any]]:
    """One `tool_result` block per result, in order; `is_error` is set on failures.

    A tool search's result (`search_tools`, `ToolSearch`'s client execution) holds one
    `tool_reference` block per tool found: Anthropic then loads those deferred tools.
    """
    blocks: list[dict[str, Any]] = []
    for result in results:
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": result.call_id}
        found = found_tools(result)
        content = (
            [{"type": "tool_reference", "tool_name": d.name} for d in found] if found else _content(result)
        )
        if content:
            block["content"] = content
        if isinstance(result, ToolFailure):  # a pending result is not an error: its result comes later
            block["is_error"] = True
        blocks.append(block)
    return blocks


def result_message(results: Iterable[ToolResult]) -> dict[str, Any]:
    """The `user` message that answers the tool calls: `{"role": "user", "content": blocks}`."""
    return {"role": "user", "content": result_blocks(results)}


def _content(result: ToolResult) -> str | list[dict[str, Any]]:
    if not has_parts(result):
        return result.content
    content: list[dict[str, Any]] = []
    for part in parts_of(result):
        if isinstance(part, ImagePart):
            if part.mime_type in IMAGE_TYPES:
                source = {"type": "base64", "media_type": part.mime_type, "data": b64(part.data)}
                content.append({"type": "image", "source": source})
            else:
                note = (
                    f"[an image of type {part.mime_type} was left out: Anthropic does not accept that type]"
                )
                content.append({"type": "text", "text": note})
        elif isinstance(part, ResourcePart) and part.blob is not None and part.mime_type == "application/pdf":
            source = {"type": "base64", "media_type": "application/pdf", "data": b64(part.blob)}
            content.append({"type": "document", "source": source})
        else:  # text; audio, other resources and links as a line of text (Anthropic takes no audio)
            text = part.text if isinstance(part, TextPart) else describe_part(part)
            if text:  # Anthropic rejects empty text blocks
                content.append({"type": "text", "text": text})
    return content


def tool_searches(content: Any, *, search_tool: str = SEARCH_TOOL) -> SearchActivity:
    """The tool searches in Anthropic's blocks: what was searched for, and what was loaded.

    Reads Anthropic's own search (`server_tool_use` of a `tool_search_tool_*`, and its
    `tool_search_tool_result` blocks) and ours (`tool_use` of `search_tool`, and the
    `tool_reference` blocks of its `tool_result`).

    Args:
        content: a `Message`, its content blocks, a message dict, or a list of messages (a
            whole conversation), as SDK objects or dicts.
    """
    requests: list[SearchRequest] = []
    loaded: dict[str, None] = {}
    for block in _blocks(content):
        kind = field(block, "type")
        name = str(field(block, "name") or "")
        if kind == "server_tool_use" and name.startswith("tool_search_tool"):
            given = field(block, "input") or {}
            query = field(given, "query", "pattern") or ""
            requests.append(
                SearchRequest(id=str(field(block, "id") or ""), query=str(query), execution="server")
            )
        elif kind == "tool_use" and name == search_tool:
            query = field(field(block, "input") or {}, "query") or ""
            requests.append(
                SearchRequest(id=str(field(block, "id") or ""), query=str(query), execution="client")
            )
        elif kind == "tool_search_tool_result":
            inner = field(block, "content")
            for ref in items(field(inner, "tool_references") if inner is not None else None):
                loaded[str(field(ref, "tool_name") or "")] = None
        elif kind == "tool_result":
            for part in (
                items(field(block, "content")) if not isinstance(field(block, "content"), str) else ()
            ):
                if field(part, "type") == "tool_reference":
                    loaded[str(field(part, "tool_name") or "")] = None
    loaded.pop("", None)
    return SearchActivity(requests=tuple(requests), loaded=tuple(loaded))


def _blocks(content: Any) -> list[Any]:
    """Content blocks, from a message, its blocks, or a list of messages."""
    out: list[Any] = []
    for item in items(content if isinstance(content, list | tuple) else [content]):
        if field(item, "role") is not None or (
            field(item, "content") is not None and field(item, "type") is None
        ):
            inner = field(item, "content")
            if not isinstance(inner, str):
                out.extend(items(inner))
        else:
            out.append(item)
    return out
