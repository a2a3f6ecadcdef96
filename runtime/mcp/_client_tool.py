"""An MCP server's tool as a runtime tool: `McpTool`, its name here, and what its results become.

The runtime checks a call's arguments against the tool's `inputSchema` before anything is
sent (a msgspec Struct made from the IR once per tool, so a bad field is named by its JSON
path and the server never sees the call). The result of `tools/call` becomes:

| the server sent | the runtime reports |
|---|---|
| `isError: true` | REJECTED, with the server's text verbatim (one leading "Error: " dropped) |
| `structuredContent` | a success whose `value` is that content (unwrapped when the outputSchema says it wraps) |
| text blocks | the text the model reads (joined by newlines); the `value` when nothing is structured |
| image, audio blocks | `ImagePart`s, `AudioPart`s beside the text (`ToolSuccess.parts`), a note in the text |
| embedded resources | `ResourcePart`s; a text resource's text is in the text, a blob is a note |
| resource links | read (`resources/read`, bounded: `max_links`, `max_link_bytes`) into embedded resources; else `ResourceLinkPart`s and a note |
| `_meta` (on the result or a block) | nothing: the model never reads it |

The arguments are checked against the `inputSchema` as the server gave it (`JsonSchemaTool`):
an open schema stays open, so arguments it does not name are passed on.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar

import mcp_types as types
import msgspec

from ..exceptions import ToolRejected
from ..messages import (
    AudioPart,
    ContentPart,
    ImagePart,
    ResourceLinkPart,
    ResourcePart,
    TextPart,
    describe_part,
)
from ..schema import ToolDescriptor
from ..tools import CallContext, ToolBase
from ._schema_tool import decode_checked

__all__ = ["McpResult", "McpTool", "local_name", "read_result"]

log = logging.getLogger("runtime.mcp")

_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]+")
_json = msgspec.json.Encoder()
MAX_MEDIA_BYTES = 20 * 1024 * 1024  # image, audio and blob bytes kept from one result; the rest is a note
WRAP_MARKER = "x-fastmcp-wrap-result"  # outputSchema marker: results are `{"result": value}`


class McpResult(msgspec.Struct, frozen=True):
    """One `tools/call` reply, read: the value, the text for the model, multimodal parts."""

    value: Any
    text: str
    parts: tuple[ContentPart, ...] = ()


Caller = Callable[["McpTool", Any, "CallContext | None"], Awaitable[types.CallToolResult]]


class McpTool(ToolBase[Any, Any], dynamic=True):
    """A tool of an MCP server, called through its connection (`gen_ai.tool.type` "extension").

    Attributes:
        name: the name the model calls it by (the server's name, prefixed and made safe).
        remote_name: the name the server knows it by.
        server: the name of the MCP server it comes from.
        descriptor: its parameters, title, annotations and output type, from the server's listing.
        remote_task: its task support on the server (SEP-2663 `taskSupport`: "required",
            "optional", or None): a call sent as a task is followed to its end (`_client_tasks`).
    """

    in_caller = True  # its calls await the server (the SDK stops one at once when cancelled)

    tool_type: ClassVar[str] = "extension"
    takes_context: ClassVar[bool] = True

    def __init__(
        self,
        *,
        name: str,
        remote_name: str,
        server: str,
        descriptor: ToolDescriptor,
        json_schema: dict[str, Any],
        validator: Any,
        caller: Caller,
        timeout: float | None = None,
        wrapped: bool = False,
        requires_approval: Any = False,
        idempotent: bool = False,
        read_only: bool = False,
        remote_task: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.remote_name = remote_name
        self.server = server
        self.descriptor = descriptor
        self.description = descriptor.description
        self.json_schema = json_schema
        self._validator = validator
        self.args_type = dict[str, Any]
        self.timeout = timeout
        self.requires_approval = requires_approval
        self.idempotent = idempotent  # the server's idempotentHint: retries and dedupe may act
        self.read_only = read_only  # its readOnlyHint: a Cache may serve its results
        self.remote_task = remote_task  # its taskSupport there: "required", "optional" or None
        self._caller = caller
        self._wrapped = wrapped
        for option, value in (options or {}).items():  # the spec's, for each of its tools
            if option == "cache" and not read_only:
                continue  # the server does not say it is read-only: never served from a cache
            if option == "retry" and not (idempotent or read_only):
                continue  # nor idempotent: never run twice
            setattr(self, option, value)

    def decode_args(self, raw: str | bytes | Mapping[str, Any]) -> Any:
        return decode_checked(self._validator, raw)

    async def execute(self, args: Any, ctx: CallContext) -> McpResult:
        """Send the checked arguments to the server; see the module's table for the result."""
        value, text, parts = read_result(await self._caller(self, args, ctx), wrapped=self._wrapped)
        return McpResult(value, text, parts)

    def result_to_text(self, result: McpResult) -> str:
        return result.text

    def result_to_parts(self, result: McpResult) -> list[ContentPart]:
        return list(result.parts)  # empty for a text-only reply: the model reads the text

    def result_value(self, result: McpResult) -> Any:
        return result.value

    def __repr__(self) -> str:
        return f"<McpTool {self.name!r} of {self.server!r}>"


def read_result(
    result: types.CallToolResult, *, wrapped: bool = False
) -> tuple[Any, str, tuple[ContentPart, ...]]:
    """(value, text for the model, multimodal parts or `()`) of a `tools/call` result.

    Args:
        wrapped: the tool's outputSchema says results are `{"result": value}`: the value is unwrapped.

    Raises:
        ToolRejected: the server reported `isError`; its text, verbatim.
    """
    content = result.content
    if len(content) == 1 and type(block := content[0]) is types.TextContent and not result.is_error:
        only = block.text  # one text block (nearly every result): nothing else to look at
        structured = result.structured_content
        return (only if structured is None else _value(structured, wrapped)), only, ()
    texts: list[str] = []
    parts: list[ContentPart] = []
    media = False
    media_bytes = 0
    for block in result.content:
        text: str | None = None
        part: ContentPart | None = None
        if isinstance(block, types.TextContent):
            text = block.text
        elif isinstance(block, types.ImageContent | types.AudioContent):
            kind = "image" if isinstance(block, types.ImageContent) else "audio"
            try:
                data = base64.b64decode(block.data, validate=True)
            except (binascii.Error, ValueError):
                text = f"[{'an' if kind == 'image' else ''} {kind} ({block.mime_type}) that was not valid base64]"
            else:
                if kind == "image":
                    part = ImagePart(data=data, mime_type=block.mime_type)
                else:
                    part = AudioPart(data=data, mime_type=block.mime_type)
                    text = f"[audio ({block.mime_type}, {len(data)} bytes)]"
        elif isinstance(block, types.EmbeddedResource):
            resource = block.resource
            if isinstance(resource, types.TextResourceContents):
                text = resource.text
                part = ResourcePart(uri=str(resource.uri), mime_type=resource.mime_type, text=resource.text)
            else:
                try:
                    blob = base64.b64decode(resource.blob, validate=True)
                except (binascii.Error, ValueError):
                    text = f"[binary resource {resource.uri} that was not valid base64]"
                else:
                    part = ResourcePart(uri=str(resource.uri), mime_type=resource.mime_type, blob=blob)
                    text = f"[binary resource {resource.uri} ({resource.mime_type or 'unknown type'}, {len(blob)} bytes)]"
        elif isinstance(block, types.ResourceLink):
            about = f": {block.description}" if block.description else ""
            text = f"[resource {block.name}: {block.uri}{about}]"
            part = ResourceLinkPart(
                uri=str(block.uri),
                name=block.name,
                mime_type=block.mime_type,
                description=block.description,
                size=block.size,
            )
        if part is not None and not isinstance(part, TextPart | ResourceLinkPart):
            size = _media_size(part)
            if media_bytes + size > MAX_MEDIA_BYTES:
                log.warning(
                    "an MCP result's media exceed %d bytes: a part of %d bytes is left out",
                    MAX_MEDIA_BYTES,
                    size,
                )
                text = (
                    f"[{describe_part(part)} left out: the result's media are over {MAX_MEDIA_BYTES} bytes]"
                )
                part = None
            else:
                media_bytes += size
        if text is None and part is not None and not isinstance(part, ImagePart):
            text = describe_part(part)
        if text is not None:
            texts.append(text)
        if (
            part is not None
        ):  # it stands for itself in the parts (a provider that cannot take it is told `text`)
            media = True
            parts.append(part)
        elif text is not None:
            parts.append(TextPart(text=text))
    text = "\n".join(texts)
    if result.is_error:
        text = text.removeprefix("Error: ")  # another runtime's failure text: said once, not twice
        raise ToolRejected(text or "the MCP server reported an error and gave no text")
    structured = result.structured_content
    if structured is not None:
        if not texts:
            text = _json.encode(structured).decode()
            parts.insert(0, TextPart(text=text))
        return _value(structured, wrapped), text, tuple(parts) if media else ()
    return text, text, tuple(parts) if media else ()


def _value(structured: Any, wrapped: bool) -> Any:
    """A result's value: its structured content, unwrapped when the tool's outputSchema says
    results are `{"result": value}`."""
    if wrapped and isinstance(structured, dict) and set(structured) == {"result"}:
        return structured["result"]
    return structured


def _media_size(part: ContentPart) -> int:
    if isinstance(part, ImagePart | AudioPart):
        return len(part.data)
    if isinstance(part, ResourcePart):
        return len(part.blob or b"") + len(part.text or "")
    return 0


def local_name(remote: str, prefix: str | None) -> str | None:
    """The name a server's tool gets here: `{prefix}_{remote}`, made to fit `^[a-zA-Z0-9_-]{1,64}$`.

    Characters outside the set become `_`; a name still longer than 64 characters keeps its
    first 55 and ends with 8 hex digits of a hash of the whole, so that it stays unique.
    None when nothing usable is left.
    """
    full = f"{prefix}_{remote}" if prefix else remote
    if _NAME.fullmatch(full):
        return full
    safe = _UNSAFE.sub("_", full)
    if not safe.strip("_"):
        return None
    if len(safe) > 64:
        digest = hashlib.sha256(full.encode()).hexdigest()[:8]
        safe = f"{safe[:55]}_{digest}"
    return safe
