"""IR -> plain JSON Schema (draft 2020-12), the base every provider dialect starts from."""

from __future__ import annotations

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
    """The JSON Schema of a tool's arguments: a closed object, `$defs` for recursive types."""
    return _Renderer({}).parameters(descriptor)


def document_schema(descriptor: ToolDescriptor) -> dict[str, Any]:
    """The arguments as a JSON Schema 2020-12 document (MCP `inputSchema`, plain JSON Schema).

    It names its dialect (`$schema`), and every class type used more than once (a shared
    type) is written once under `$defs` and referred to by `$ref`, as recursive types are.
    """
    renderer = _Renderer(_shared(descriptor))
    schema = {"$schema": JSON_SCHEMA_DIALECT, **renderer.parameters(descriptor)}
    return schema


def output_document(descriptor: ToolDescriptor) -> tuple[dict[str, Any], bool] | None:
    """The result type as a JSON Schema document whose root is an object, and whether it is wrapped.

    MCP wants an object at the root of `outputSchema`: any other result type is wrapped as
    `{"result": value}` (FastMCP's convention). None when the descriptor has no output type.
    """
    output = descriptor.output
    if output is None:
        return None
    renderer = _Renderer(_shared(descriptor))
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
    return _Renderer({}).property(param)


def node_schema(node: TypeNode) -> dict[str, Any]:
    """The JSON Schema of one type node."""
    return _Renderer({}).node(node)


def _shared(descriptor: ToolDescriptor) -> dict[str, Object]:
    """Named object types that occur more than once (same name, same shape)."""
    seen: dict[str, list[Object]] = {}

    def walk(node: TypeNode | bool) -> None:
        if isinstance(node, Object):
            if node.name:
                seen.setdefault(node.name, []).append(node)
            for p in node.properties:
                walk(p.type)
            walk(node.additional)
        elif isinstance(node, Array):
            for item in (node.items,) if node.prefix_items is None else node.prefix_items:
                walk(item)
        elif isinstance(node, Union):
            for o in node.options:
                walk(o)

    for p in descriptor.parameters:
        walk(p.type)
    for d in descriptor.definitions.values():
        walk(d)
    if descriptor.output is not None:
        walk(descriptor.output)
    shared: dict[str, Object] = {}
    for name, nodes in seen.items():
        if len(nodes) > 1 and name not in descriptor.definitions and all(n == nodes[0] for n in nodes):
            shared[name] = nodes[0]
    return shared


class _Renderer:
    def __init__(self, shared: dict[str, Object]) -> None:
        self.shared = shared

    def parameters(self, descriptor: ToolDescriptor) -> dict[str, Any]:
        schema = self.object(descriptor.parameters, False)
        defs = self.definitions(descriptor)
        if defs:
            schema["$defs"] = defs
        return schema

    def definitions(self, descriptor: ToolDescriptor) -> dict[str, Any]:
        defs = {name: self.node(node, top=True) for name, node in descriptor.definitions.items()}
        defs.update({name: self.node(node, top=True) for name, node in self.shared.items()})
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
            if not top and node.name and self.shared.get(node.name) == node:
                schema = {"$ref": f"#/$defs/{node.name}"}
                return schema  # the definition carries the type's own description
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
