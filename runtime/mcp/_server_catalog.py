"""What a served runtime tells MCP clients: its tools as MCP `Tool`s, and results as `CallToolResult`s.

The listing is rebuilt only when the runtime's tool set changes (`registry_version`), and a
tool's entry only when the tool itself changed. A tool whose result type is known gets an
`outputSchema` and its results a `structuredContent`; MCP wants an object there, so any other
result type is wrapped as `{"result": value}` with a matching schema (FastMCP's convention).
A `str` result is the text itself and gets neither. A value that is not of its declared type
(`ToolSuccess.type_mismatch`) is sent as text only: its structured part is left out rather than
sent wrong.
"""

from __future__ import annotations

import base64
import logging
from typing import Any

import mcp_types as types
import msgspec

from ..engine import Runtime
from ..messages import (
    AudioPart,
    ImagePart,
    ResourceLinkPart,
    ResourcePart,
    TextPart,
    ToolFailure,
    ToolPending,
    ToolResult,
    ToolSuccess,
)
from ..schema import ToolDescriptor, render_tool, type_node
from ..schema.lowlevel import output_document, output_type
from ..tools import ToolBase

__all__ = ["Catalog", "ServedTool", "error_result", "pending_result", "plain_result"]

log = logging.getLogger("runtime.mcp")

_WRAP_KEY = "result"
_TASKS = "io.modelcontextprotocol/tasks"


class ServedTool:
    """One tool as it is served: its MCP listing and how its results are shaped."""

    __slots__ = ("listing", "structured", "tool", "wrap")

    def __init__(self, tool: ToolBase[Any, Any]) -> None:
        self.tool = tool
        # The listing is `registry.schemas("mcp")`'s; a tool whose descriptor does not know
        # its result type (a ToolBase subclass that builds its own) gets it from result_type.
        descriptor = tool.descriptor
        if descriptor.output is None:
            descriptor = _with_output(tool)
        listed = dict(render_tool(descriptor, "mcp"))
        given = getattr(tool, "json_schema", None)
        if isinstance(given, dict):  # a schema that came as JSON Schema is served as it was given
            listed["inputSchema"] = given
        support = tool.options.task_support  # MCP Tasks (SEP-2663): see _server_tasks
        if support != "forbidden":  # 2025-11-25's field; 2026-07-28 lists it in `_meta` (no field)
            listed["execution"] = {"taskSupport": support}
            listed["_meta"] = {**(listed.get("_meta") or {}), _TASKS: {"taskSupport": support}}
        output = output_document(descriptor)
        self.wrap = output is not None and output[1]
        self.structured = "outputSchema" in listed
        self.listing = types.Tool.model_validate(listed)

    @property
    def input_schema(self) -> dict[str, Any]:
        return self.listing.input_schema

    def result(self, result: ToolResult, max_chars: int | None = None) -> types.CallToolResult:
        """The MCP result of one call of this tool (`structuredContent` bounded by `max_chars`)."""
        if isinstance(result, ToolFailure):
            return error_result(result.content)
        if isinstance(result, ToolPending):  # an outputSchema's structuredContent it cannot give
            return pending_result(result, is_error=self.structured)
        content = _content(result)
        if not self.structured or result.type_mismatch is not None:
            # A value that is not of the declared type does not fit the outputSchema promised for
            # it: the client gets it as text, never a structuredContent it would have to refuse.
            return types.CallToolResult(content=content)
        try:
            encoded = self.tool.encode_result(result.value)
            if max_chars is not None and len(encoded) > max_chars:
                # Cut JSON is not JSON, and the outputSchema promises a whole value: say so instead
                # (with its preview and the link, when it was kept whole as an artifact).
                refusal = error_result(
                    f"Error: tool {self.tool.name!r} returned a structured result of {len(encoded)} "
                    f"bytes, over the limit of {max_chars} characters"
                )
                if any(isinstance(block, types.ResourceLink) for block in content):
                    refusal.content.extend(content)
                return refusal
            value = msgspec.json.decode(encoded)
        except Exception as exc:  # the text was made; a structured copy of the value could not be
            log.warning("tool %r: its result has no JSON form for structuredContent: %s", self.tool.name, exc)
            return error_result(f"Error: tool {self.tool.name!r} returned a result that could not be encoded")
        return types.CallToolResult(
            content=content, structured_content={_WRAP_KEY: value} if self.wrap else value
        )


class Catalog:
    """The served listing of a runtime's tools, kept current with its registry."""

    def __init__(self, rt: Runtime) -> None:
        self._rt = rt
        self._version = -1
        self._tools: dict[str, ServedTool] = {}
        self._listing = types.ListToolsResult(tools=[])

    def _refresh(self) -> None:
        version = self._rt.registry_version
        if version == self._version:
            return
        tools: dict[str, ServedTool] = {}
        for tool in self._rt.registry:
            served = self._tools.get(tool.name)
            if served is None or served.tool is not tool:
                try:
                    served = ServedTool(tool)
                except Exception:
                    log.exception("tool %r cannot be described to MCP clients; it is not listed", tool.name)
                    continue
            tools[tool.name] = served
        self._tools = tools
        self._listing = types.ListToolsResult(tools=[s.listing for s in tools.values()])
        self._version = version

    def listing(self) -> types.ListToolsResult:
        """Every tool, in one page."""
        self._refresh()
        return self._listing

    def get(self, name: str) -> ServedTool | None:
        """The served tool called `name`, or None."""
        self._refresh()
        return self._tools.get(name)

    def input_schema(self, name: str) -> dict[str, Any] | None:
        """The tool's inputSchema (for the SDK's `Mcp-Param-*` header checks), or None."""
        served = self.get(name)
        return served.input_schema if served is not None else None


def error_result(text: str) -> types.CallToolResult:
    """A tool-level error: the model reads `text` and may correct itself."""
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def pending_result(result: ToolPending, *, is_error: bool = False) -> types.CallToolResult:
    """A call that ended its turn pending (an approval, an outside result), as text the model
    reads: not an error, unless the tool promises structured content (which it cannot have yet)."""
    return types.CallToolResult(content=[types.TextContent(text=result.content)], is_error=is_error)


def plain_result(result: ToolResult) -> types.CallToolResult:
    """The MCP result of a call to a tool that is not (or no longer) listed."""
    if isinstance(result, ToolFailure):
        return error_result(result.content)
    if isinstance(result, ToolPending):
        return pending_result(result)
    return types.CallToolResult(content=_content(result))


def _content(result: ToolSuccess[Any]) -> list[types.ContentBlock]:
    if not result.parts:
        return [types.TextContent(text=result.content)]
    return [_block(part) for part in result.parts]


def _block(part: Any) -> types.ContentBlock:
    """One content part as an MCP content block."""
    if isinstance(part, ImagePart):
        return types.ImageContent(data=_b64(part.data), mime_type=part.mime_type)
    if isinstance(part, AudioPart):
        return types.AudioContent(data=_b64(part.data), mime_type=part.mime_type)
    if isinstance(part, ResourcePart):
        resource: types.TextResourceContents | types.BlobResourceContents
        if part.text is not None:
            resource = types.TextResourceContents(uri=part.uri, mime_type=part.mime_type, text=part.text)
        else:
            resource = types.BlobResourceContents(
                uri=part.uri, mime_type=part.mime_type, blob=_b64(part.blob or b"")
            )
        return types.EmbeddedResource(resource=resource)
    if isinstance(part, ResourceLinkPart):
        return types.ResourceLink(
            uri=part.uri,
            name=part.name,
            mime_type=part.mime_type,
            description=part.description,
            size=part.size,
        )
    assert isinstance(part, TextPart)
    return types.TextContent(text=part.text)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _with_output(tool: ToolBase[Any, Any]) -> ToolDescriptor:
    """The tool's descriptor with its `result_type` as its output type, when that has one."""
    result_type = output_type(tool.result_type)
    found = None if result_type is None else type_node(result_type)
    if found is None:
        return tool.descriptor
    node, definitions = found
    if set(definitions) & set(tool.descriptor.definitions):
        return tool.descriptor
    return msgspec.structs.replace(
        tool.descriptor, output=node, definitions={**tool.descriptor.definitions, **definitions}
    )
