"""IR -> an MCP `Tool` (as `tools/list` returns it): name, title, description, schemas, annotations."""

from __future__ import annotations

from typing import Any

from ._ir import ToolDescriptor
from ._to_jsonschema import document_schema, output_document

__all__ = ["mcp_tool"]


def mcp_tool(descriptor: ToolDescriptor, strict: bool = False) -> dict[str, Any]:
    """The MCP Tool dict: `inputSchema` is the arguments' JSON Schema 2020-12 document.

    `outputSchema` is set when the tool's result type is known: an object type as it is,
    any other type wrapped as `{"result": value}` (MCP requires an object at its root; the
    served results are wrapped the same way). `annotations` (readOnlyHint, ...) pass through
    as given. `strict` is ignored.
    """
    tool: dict[str, Any] = {"name": descriptor.name}
    if descriptor.title:
        tool["title"] = descriptor.title
    if descriptor.description:
        tool["description"] = descriptor.description
    tool["inputSchema"] = schema = document_schema(descriptor)
    for param in descriptor.parameters:  # SEP-2243: MCP clients mirror these into headers
        if param.header is not None and param.name in schema.get("properties", {}):
            schema["properties"][param.name]["x-mcp-header"] = param.header
    output = output_document(descriptor)
    if output is not None:
        tool["outputSchema"] = output[0]
    if descriptor.annotations:
        tool["annotations"] = dict(descriptor.annotations)
    return tool
