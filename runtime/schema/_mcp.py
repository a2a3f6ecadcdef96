"""IR -> an MCP `Tool` (as `tools/list` returns it): name, title, description, schemas, annotations."""

from __future__ import annotations

from typing import Any

from ._ir import Object, Ref, ToolDescriptor, TypeNode
from ._to_jsonschema import node_schema, parameters_schema

__all__ = ["mcp_tool"]


def mcp_tool(descriptor: ToolDescriptor, strict: bool = False) -> dict[str, Any]:
    """The MCP Tool dict: `inputSchema` is the plain JSON Schema of the arguments.

    `outputSchema` is set when the tool's result type is an object (MCP requires an object
    at its root); `annotations` (readOnlyHint, ...) pass through as given. `strict` is ignored.
    """
    tool: dict[str, Any] = {"name": descriptor.name}
    if descriptor.title:
        tool["title"] = descriptor.title
    if descriptor.description:
        tool["description"] = descriptor.description
    tool["inputSchema"] = schema = parameters_schema(descriptor)
    for param in descriptor.parameters:  # SEP-2243: MCP clients mirror these into headers
        if param.header is not None and param.name in schema.get("properties", {}):
            schema["properties"][param.name]["x-mcp-header"] = param.header
    output = _output_schema(descriptor.output, descriptor.definitions)
    if output is not None:
        tool["outputSchema"] = output
    if descriptor.annotations:
        tool["annotations"] = dict(descriptor.annotations)
    return tool


def _output_schema(output: TypeNode | None, definitions: dict[str, TypeNode]) -> dict[str, Any] | None:
    if isinstance(output, Ref):
        output = definitions.get(output.name)
    if not isinstance(output, Object):
        return None
    schema = node_schema(output)
    if definitions:
        schema["$defs"] = {name: node_schema(node) for name, node in definitions.items()}
    return schema
