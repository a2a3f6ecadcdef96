"""OpenAI: tool calls in, results out, for Chat Completions and the Responses API.

```python
from runtime.providers import openai as adapter

msg = completion.choices[0].message
results = await rt.call_many(adapter.calls_from_message(msg))
messages += [msg, *adapter.result_messages(results)]

# Responses API
results = await rt.call_many(adapter.calls_from_response(response))
next_input = [*response.output, *adapter.result_items(results)]
```

Chat Completions `tool` messages take text only. A result with images gets a text
placeholder in its tool message, and one `user` message after all the tool messages carries
the images (`image_url` data URLs). The Responses API takes images in a
`function_call_output` directly (`input_image`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import msgspec

from ..messages import ImagePart, TextPart, ToolCall, ToolResult, ToolSuccess, describe_part
from ..search import SEARCH_TOOL, FoundTools, SearchActivity, SearchRequest, tool_search_output
from ._access import data_url, field, has_parts, items, json_arguments, parts_of

__all__ = ["calls_from_message", "calls_from_response", "result_items", "result_messages", "tool_searches"]


def calls_from_message(message: Any) -> list[ToolCall]:
    """The tool calls of an assistant message, in order; arguments stay JSON text.

    Args:
        message: a `ChatCompletionMessage`, a `ChatCompletion` (its first choice is read),
            or the same as a dict.
    """
    choices = field(message, "choices")
    if choices:
        message = field(items(choices)[0], "message")
    calls: list[ToolCall] = []
    for index, call in enumerate(items(field(message, "tool_calls"))):
        if field(call, "type") == "custom":
            body = field(call, "custom")
            arguments = field(body, "input")
        else:
            body = field(call, "function")
            arguments = field(body, "arguments")
        name = str(field(body, "name") or "")
        calls.append(
            ToolCall(
                id=str(field(call, "id") or f"{name}-{index}"),
                name=name,
                arguments=json_arguments(arguments),
            )
        )
    return calls


def result_messages(results: Iterable[ToolResult]) -> list[dict[str, Any]]:
    """One `{"role": "tool", "tool_call_id", "content"}` message per result, in order.

    A failure's content starts with "Error: ". If any result has images, one `user` message
    with them follows the tool messages (tool messages take text only).
    """
    messages: list[dict[str, Any]] = []
    images: list[dict[str, Any]] = []
    for result in results:
        content: str | list[dict[str, Any]] = result.content
        if has_parts(result):
            content = []
            for part in parts_of(result):
                if isinstance(part, ImagePart):
                    images.append({"type": "text", "text": f"Image from tool call {result.call_id}:"})
                    images.append({"type": "image_url", "image_url": {"url": data_url(part)}})
                    content.append({"type": "text", "text": _placeholder(part)})
                else:  # text; audio, resources and links as a line of text
                    text = part.text if isinstance(part, TextPart) else describe_part(part)
                    content.append({"type": "text", "text": text})
        messages.append({"role": "tool", "tool_call_id": result.call_id, "content": content})
    if images:
        messages.append({"role": "user", "content": images})
    return messages


def calls_from_response(response: Any, *, search_tool: str = SEARCH_TOOL) -> list[ToolCall]:
    """The function calls of a Responses API response, in order (ids are the `call_id`s).

    A `tool_search_call` the client executes (`ToolSearch`'s client execution) is a call of
    `search_tool`, run through the runtime like the others; `result_items` answers it with a
    `tool_search_output` item.

    Args:
        response: a `Response`, its `output` list, or the same as dicts.
    """
    output = field(response, "output")
    calls: list[ToolCall] = []
    for item in items(output if output is not None else response):
        kind = field(item, "type")
        name = str(field(item, "name") or "")
        if kind == "function_call":
            arguments = field(item, "arguments")
        elif kind == "custom_tool_call":
            arguments = field(item, "input")
        elif kind == "tool_search_call" and field(item, "execution") == "client":
            name, arguments = search_tool, field(item, "arguments")
        else:
            continue
        calls.append(
            ToolCall(
                id=str(field(item, "call_id") or field(item, "id") or f"{name}-{len(calls)}"),
                name=name,
                arguments=json_arguments(arguments),
            )
        )
    return calls


def result_items(results: Iterable[ToolResult], *, strict: bool = False) -> list[dict[str, Any]]:
    """One `function_call_output` input item per result, in order.

    `output` is the result's text, or a list of `input_text` / `input_image` parts when the
    result is multimodal. A tool search's result is a `tool_search_output` item holding the
    tools found, rendered as `registry.schemas("openai-responses", strict=strict)` would.
    """
    out: list[dict[str, Any]] = []
    for result in results:
        if isinstance(result, ToolSuccess) and isinstance(result.value, FoundTools):
            out.append(tool_search_output(result.call_id, result.value.tools, strict=strict))
            continue
        output: str | list[dict[str, Any]] = result.content
        if has_parts(result):
            output = [
                {"type": "input_image", "image_url": data_url(part)}
                if isinstance(part, ImagePart)
                else {
                    "type": "input_text",
                    "text": part.text if isinstance(part, TextPart) else describe_part(part),
                }
                for part in parts_of(result)
            ]
        out.append({"type": "function_call_output", "call_id": result.call_id, "output": output})
    return out


def tool_searches(response: Any, *, search_tool: str = SEARCH_TOOL) -> SearchActivity:
    """The tool searches of Responses API items: what was searched for, and what was loaded.

    Reads `tool_search_call` items (server or client executed), `tool_search_output` items
    (their `tools`, functions or namespaces of functions), and function calls of `search_tool`.

    Args:
        response: a `Response`, its `output` list, an `input` list, or the same as dicts.
    """
    output = field(response, "output")
    requests: list[SearchRequest] = []
    loaded: dict[str, None] = {}
    for item in items(output if output is not None else response):
        kind = field(item, "type")
        if kind == "tool_search_call" or (kind == "function_call" and field(item, "name") == search_tool):
            arguments = field(item, "arguments")
            if isinstance(arguments, str):
                try:
                    arguments = _decoder.decode(arguments)
                except msgspec.DecodeError:
                    arguments = {}
            query = field(arguments, "query", "paths") if arguments is not None else None
            if isinstance(query, list):
                query = " ".join(str(q) for q in query)
            server = kind == "tool_search_call" and field(item, "execution") != "client"
            execution: Literal["client", "server"] = "server" if server else "client"
            requests.append(
                SearchRequest(
                    id=str(field(item, "call_id") or field(item, "id") or ""),
                    query=str(query or ""),
                    execution=execution,
                )
            )
        elif kind == "tool_search_output":
            for tool in items(field(item, "tools")):
                if field(tool, "type") == "namespace":
                    for inner in items(field(tool, "tools")):
                        loaded[str(field(inner, "name") or "")] = None
                else:
                    loaded[str(field(tool, "name") or "")] = None
    loaded.pop("", None)
    return SearchActivity(requests=tuple(requests), loaded=tuple(loaded))


_decoder = msgspec.json.Decoder()


def _placeholder(image: ImagePart) -> str:
    return f"[image ({image.mime_type}, {len(image.data)} bytes): shown in the next user message]"
