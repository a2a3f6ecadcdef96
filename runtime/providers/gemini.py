"""Gemini (google-genai): `function_call` parts in, `function_response` parts out.

```python
from runtime.providers import gemini as adapter

results = await rt.call_many(adapter.calls_from_parts(response))
contents += [response.candidates[0].content, adapter.result_content(results)]
```

Older Gemini responses carry no call id: a call without one gets `f"{name}-{index}"`
(its position among the function calls of the turn), and its response is sent without an
id. Gemini writes integral numbers as floats (`5.0`); they are turned into ints before the
call is decoded, since a strict decoder refuses 5.0 for an int and takes 5 for a float.
Images go back as `inline_data` parts of the `function_response` (raw bytes, as the SDK
takes them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ..messages import (
    AudioPart,
    ImagePart,
    ResourcePart,
    TextPart,
    ToolCall,
    ToolFailure,
    ToolResult,
    describe_part,
)
from ._access import field, has_parts, items, json_arguments, parts_of

__all__ = ["calls_from_parts", "integral_floats_to_int", "result_content", "result_parts"]


def calls_from_parts(parts: Any) -> list[ToolCall]:
    """The function calls of a model turn, in order; `args` stay a dict.

    Args:
        parts: a `GenerateContentResponse` (its first candidate is read), a `Content`, its
            parts, or the same as dicts (snake_case or the REST API's camelCase).
    """
    candidates = field(parts, "candidates")
    if candidates:
        parts = field(items(candidates)[0], "content")
    if not isinstance(parts, list | tuple):
        parts = field(parts, "parts")
    calls: list[ToolCall] = []
    for part in items(parts):
        call = field(part, "function_call", "functionCall")
        if call is None:
            continue
        name = str(field(call, "name") or "")
        args = field(call, "args")
        calls.append(
            ToolCall(
                id=str(field(call, "id") or f"{name}-{len(calls)}"),
                name=name,
                arguments=json_arguments(integral_floats_to_int(args) if args is not None else {}),
            )
        )
    return calls


def result_parts(results: Iterable[ToolResult]) -> list[dict[str, Any]]:
    """One `{"function_response": {...}}` part per result, in order.

    `response` is `{"output": text}` for a success and `{"error": "Error: ..."}` for a failure.
    """
    out: list[dict[str, Any]] = []
    for result in results:
        response: dict[str, Any]
        function_response: dict[str, Any] = {"name": result.tool}
        if not _generated_id(result):
            function_response["id"] = result.call_id
        if isinstance(result, ToolFailure):  # a pending result is an output: its result comes later
            response = {"error": result.content}
        elif has_parts(result):
            texts: list[str] = []
            media: list[dict[str, Any]] = []
            for p in parts_of(result):
                if isinstance(p, ImagePart | AudioPart):  # Gemini takes image and audio bytes inline
                    media.append({"inline_data": {"mime_type": p.mime_type, "data": p.data}})
                elif isinstance(p, ResourcePart) and p.blob is not None and p.mime_type == "application/pdf":
                    media.append({"inline_data": {"mime_type": p.mime_type, "data": p.blob}})
                else:
                    texts.append(p.text if isinstance(p, TextPart) else describe_part(p))
            response = {"output": "\n\n".join(texts)}
            if media:
                function_response["parts"] = media
        else:
            response = {"output": result.content}
        function_response["response"] = response
        out.append({"function_response": function_response})
    return out


def result_content(results: Iterable[ToolResult]) -> dict[str, Any]:
    """The turn that answers the calls: `{"role": "user", "parts": result_parts(results)}`."""
    return {"role": "user", "parts": result_parts(results)}


def integral_floats_to_int(value: Any) -> Any:
    """`value` with every float that holds an integer (`5.0`) turned into an int, recursively."""
    if isinstance(value, float):
        return int(value) if value.is_integer() else value
    if isinstance(value, Mapping):
        return {k: integral_floats_to_int(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [integral_floats_to_int(v) for v in value]
    return value


def _generated_id(result: ToolResult) -> bool:
    """True for an id `calls_from_parts` made up (Gemini sent none, so none goes back)."""
    return re.fullmatch(re.escape(result.tool) + r"-\d+", result.call_id) is not None
