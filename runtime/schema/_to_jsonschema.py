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

__all__ = ["node_schema", "parameters_schema", "property_schema"]

_NUMERIC_KEYS = (
    ("minimum", "minimum"),
    ("maximum", "maximum"),
    ("exclusive_minimum", "exclusiveMinimum"),
    ("exclusive_maximum", "exclusiveMaximum"),
    ("multiple_of", "multipleOf"),
)


def parameters_schema(descriptor: ToolDescriptor) -> dict[str, Any]:
    """The JSON Schema of a tool's arguments: a closed object, `$defs` for recursive types."""
    schema = _object_schema(descriptor.parameters, False)
    if descriptor.definitions:
        schema["$defs"] = {name: node_schema(node) for name, node in descriptor.definitions.items()}
    return schema


def property_schema(param: ToolParameter) -> dict[str, Any]:
    """One property: its type's schema, the parameter's description and default."""
    schema = node_schema(param.type)
    if param.description:
        schema["description"] = param.description
    if param.has_default:
        schema["default"] = param.default
    return schema


def node_schema(node: TypeNode) -> dict[str, Any]:
    """The JSON Schema of one type node."""
    schema: dict[str, Any]
    if isinstance(node, String):
        schema = {"type": "string"}
        for key, value in (
            ("format", node.format),
            ("pattern", node.pattern),
            ("minLength", node.min_length),
            ("maxLength", node.max_length),
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
        schema = {"type": "array", "items": node_schema(node.items)}
        if node.min_items is not None:
            schema["minItems"] = node.min_items
        if node.max_items is not None:
            schema["maxItems"] = node.max_items
        if node.unique_items:
            schema["uniqueItems"] = True
    elif isinstance(node, Object):
        schema = _object_schema(node.properties, node.additional)
    elif isinstance(node, Union):
        schema = {"anyOf": [node_schema(o) for o in node.options]}
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


def _object_schema(properties: tuple[ToolParameter, ...], additional: TypeNode | bool) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {p.name: property_schema(p) for p in properties},
    }
    required = [p.name for p in properties if p.required]
    if required:
        schema["required"] = required
    if additional is False:
        schema["additionalProperties"] = False
    elif additional is not True:
        schema["additionalProperties"] = node_schema(additional)
    return schema
