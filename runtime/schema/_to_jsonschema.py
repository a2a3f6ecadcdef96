"""IR -> plain JSON Schema (draft 2020-12), the base every provider dialect starts from."""

from __future__ import annotations

import copy
from typing import Any

from ._ir import (
    AnyValue,
    Array,
    Boolean,
    Enum,
    Integer,
    Null,
    Number,
    Object,
    Ref,
    String,
    ToolDescriptor,
    ToolParameter,
    TypeNode,
    Union,
)
from ._notes import json_type

__all__ = [
    "JSON_SCHEMA_DIALECT",
    "WRAP_MARKER",
    "document_schema",
    "node_schema",
    "output_document",
    "parameters_schema",
    "property_schema",
]

_NUMERIC_KEYS = (
    ("minimum", "minimum"),
    ("maximum", "maximum"),
    ("exclusive_minimum", "exclusiveMinimum"),
    ("exclusive_maximum", "exclusiveMaximum"),
    ("multiple_of", "multipleOf"),
)


JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
WRAP_MARKER = "x-fastmcp-wrap-result"
"""Marks an outputSchema whose results are wrapped as `{"result": value}` (FastMCP's convention)."""


def parameters_schema(descriptor: ToolDescriptor) -> dict[str, Any]:
    """The JSON Schema of a tool's arguments: an object, closed unless the tool accepts more
    (`ToolDescriptor.additional`), with `$defs` for recursive types only."""
    return _Renderer().parameters(descriptor)


def document_schema(descriptor: ToolDescriptor) -> dict[str, Any]:
    """The arguments as a JSON Schema 2020-12 document (MCP `inputSchema`, plain JSON Schema).

    A schema the tool was given (and checks calls against) is served as it was given
    (`ToolDescriptor.input_schema`). Otherwise the document names its dialect (`$schema`) and
    writes every type where it is used: only a recursive type is under `$defs`, referred to by
    `$ref`, since many clients (the MCP Inspector among them) do not follow references.
    """
    if descriptor.input_schema is not None:
        return copy.deepcopy(descriptor.input_schema)
    return {"$schema": JSON_SCHEMA_DIALECT, **_Renderer().parameters(descriptor)}


def output_document(descriptor: ToolDescriptor) -> tuple[dict[str, Any], bool] | None:
    """The result type as a JSON Schema document whose root is an object, and whether it is wrapped.

    MCP wants an object at the root of `outputSchema`: any other result type is wrapped as
    `{"result": value}` (FastMCP's convention). None when the descriptor has no output type.
    An outputSchema the tool was given (an MCP server's) is served as it was given.
    """
    if descriptor.output_schema is not None:
        given = copy.deepcopy(descriptor.output_schema)
        return given, bool(given.get(WRAP_MARKER))
    output = descriptor.output
    if output is None:
        return None
    renderer = _Renderer()
    root = descriptor.definitions.get(output.name) if isinstance(output, Ref) else output
    if isinstance(root, Object):
        body, wrapped = renderer.node(root, top=True), False
    else:
        body = {
            "type": "object",
            "properties": {"result": renderer.node(output)},
            "required": ["result"],
            WRAP_MARKER: True,
        }
        wrapped = True
    defs = renderer.definitions(descriptor)
    if defs:
        body["$defs"] = defs
    return {"$schema": JSON_SCHEMA_DIALECT, **body}, wrapped


def property_schema(param: ToolParameter) -> dict[str, Any]:
    """One property: its type's schema, the parameter's description and default."""
    return _Renderer().property(param)


def node_schema(node: TypeNode) -> dict[str, Any]:
    """The JSON Schema of one type node."""
    return _Renderer().node(node)


class _Renderer:
    def parameters(self, descriptor: ToolDescriptor) -> dict[str, Any]:
        schema = self.object(descriptor.parameters, descriptor.additional)
        defs = self.definitions(descriptor)
        if defs:
            schema["$defs"] = defs
        return schema

    def definitions(self, descriptor: ToolDescriptor) -> dict[str, Any]:
        defs = {name: self.node(node, top=True) for name, node in descriptor.definitions.items()}
        return defs

    def property(self, param: ToolParameter) -> dict[str, Any]:
        schema = self.node(param.type)
        if param.description:
            schema["description"] = param.description
        if param.has_default:
            schema["default"] = param.default
        return schema

    def node(self, node: TypeNode, *, top: bool = False) -> dict[str, Any]:
        schema: dict[str, Any]
        if isinstance(node, String):
            schema = {"type": "string"}
            for key, value in (
                ("format", node.format),
                ("pattern", node.pattern),
                ("minLength", node.min_length),
                ("maxLength", node.max_length),
                ("contentEncoding", node.content_encoding),
            ):
                if value is not None:
                    schema[key] = value
        elif isinstance(node, Integer | Number):
            schema = {"type": "integer" if isinstance(node, Integer) else "number"}
            for attr, key in _NUMERIC_KEYS:
                value = getattr(node, attr)
                if value is not None:
                    schema[key] = value
        elif isinstance(node, Boolean):
            schema = {"type": "boolean"}
        elif isinstance(node, Null):
            schema = {"type": "null"}
        elif isinstance(node, AnyValue):
            schema = {}
        elif isinstance(node, Array):
            schema = {"type": "array"}
            if node.prefix_items is not None:
                schema["prefixItems"] = [self.node(i) for i in node.prefix_items]
                schema["items"] = False
            else:
                schema["items"] = self.node(node.items)
            if node.min_items is not None:
                schema["minItems"] = node.min_items
            if node.max_items is not None:
                schema["maxItems"] = node.max_items
            if node.unique_items:
                schema["uniqueItems"] = True
        elif isinstance(node, Object):
            schema = self.object(node.properties, node.additional)
            if top and node.name:
                schema["title"] = node.name  # a definition names its type (and parses back to it)
        elif isinstance(node, Union):
            schema = {"anyOf": [self.node(o) for o in node.options]}
        elif isinstance(node, Enum):
            schema = {"enum": list(node.values)}
            kinds = {json_type(v) for v in node.values}
            if len(kinds) == 1:
                schema["type"] = kinds.pop()
        elif isinstance(node, Ref):
            schema = {"$ref": f"#/$defs/{node.name}"}
        else:  # pragma: no cover - the node set is closed
            raise TypeError(f"not a type node: {node!r}")
        if node.description:
            schema["description"] = node.description
        return schema

    def object(self, properties: tuple[ToolParameter, ...], additional: TypeNode | bool) -> dict[str, Any]:
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {p.name: self.property(p) for p in properties},
        }
        required = [p.name for p in properties if p.required]
        if required:
            schema["required"] = required
        if additional is False:
            schema["additionalProperties"] = False
        elif additional is not True:
            schema["additionalProperties"] = self.node(additional)
        return schema
