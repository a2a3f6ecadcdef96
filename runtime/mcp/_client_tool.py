"""An MCP server's tool as a runtime tool: `McpTool`, its name here, and what its results become.

The runtime checks a call's arguments against the tool's `inputSchema` before anything is
sent (a msgspec Struct made from the IR once per tool, so a bad field is named by its JSON
path and the server never sees the call). The result of `tools/call` becomes:

| the server sent | the runtime reports |
|---|---|
| `isError: true` | REJECTED, with the server's text verbatim |
| `structuredContent` | a success whose `value` is that content |
| text blocks | the text the model reads (joined by newlines); the `value` when nothing is structured |
| image blocks | `ImagePart`s beside the text (`ToolSuccess.parts`) |
| audio, resources | a one-line note in the text (an embedded text resource: its text) |
| `_meta` (on the result or a block) | nothing: the model never reads it |
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import mcp_types as types
import msgspec

from ..exceptions import ToolRejected
from ..messages import ContentPart, ImagePart, TextPart
from ..schema import ToolDescriptor
from ..tools import CallContext, ToolBase
from ..tools._codec import ArgsCodec

__all__ = ["McpResult", "McpTool", "local_name", "read_result"]

log = logging.getLogger("runtime.mcp")

_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]+")
_json = msgspec.json.Encoder()


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
    """

    tool_type: ClassVar[str] = "extension"
    takes_context: ClassVar[bool] = True

    def __init__(
        self,
        *,
        name: str,
        remote_name: str,
        server: str,
        descriptor: ToolDescriptor,
        codec: ArgsCodec,
        caller: Caller,
        timeout: float | None = None,
    ) -> None:
        self.name = name
        self.remote_name = remote_name
        self.server = server
        self.descriptor = descriptor
        self.description = descriptor.description
        self._codec = codec
        self.args_type = codec.struct_type
        self.timeout = timeout
        self._caller = caller

    async def execute(self, args: Any, ctx: CallContext) -> McpResult:
        """Send the checked arguments to the server; see the module's table for the result."""
        value, text, parts = read_result(await self._caller(self, args, ctx))
        return McpResult(value, text, parts)

    def result_to_text(self, result: McpResult) -> str:
        return result.text

    def result_to_parts(self, result: McpResult) -> list[ContentPart]:
        return list(result.parts)  # empty for a text-only reply: the model reads the text

    def result_value(self, result: McpResult) -> Any:
        return result.value

    def __repr__(self) -> str:
        return f"<McpTool {self.name!r} of {self.server!r}>"


def read_result(result: types.CallToolResult) -> tuple[Any, str, tuple[ContentPart, ...]]:
    """(value, text for the model, multimodal parts or `()`) of a `tools/call` result.

    Raises:
        ToolRejected: the server reported `isError`; its text, verbatim.
    """
    texts: list[str] = []
    parts: list[ContentPart] = []
    images = False
    for block in result.content:
        text: str | None = None
        if isinstance(block, types.TextContent):
            text = block.text
        elif isinstance(block, types.ImageContent):
            try:
                parts.append(
                    ImagePart(data=base64.b64decode(block.data, validate=True), mime_type=block.mime_type)
                )
                images = True
            except (binascii.Error, ValueError):
                text = f"[an image ({block.mime_type}) that was not valid base64]"
        elif isinstance(block, types.AudioContent):
            text = f"[audio ({block.mime_type})]"
        elif isinstance(block, types.EmbeddedResource):
            resource = block.resource
            if isinstance(resource, types.TextResourceContents):
                text = resource.text
            else:
                text = f"[binary resource {resource.uri} ({resource.mime_type or 'unknown type'})]"
        elif isinstance(block, types.ResourceLink):
            text = f"[resource {block.name}: {block.uri}]"
        if text is not None:
            texts.append(text)
            parts.append(TextPart(text=text))
    text = "\n".join(texts)
    if result.is_error:
        raise ToolRejected(text or "the MCP server reported an error and gave no text")
    structured = result.structured_content
    if structured is not None:
        if not texts:
            text = _json.encode(structured).decode()
            parts.insert(0, TextPart(text=text))
        return structured, text, tuple(parts) if images else ()
    return text, text, tuple(parts) if images else ()


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
