"""Python types -> IR, through `msgspec.json.schema` and the JSON Schema parser."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from ..exceptions import SchemaError, ToolDefinitionError
from ._from_jsonschema import descriptor_from_json_schema, parse_json_schema
from ._ir import ToolDescriptor, ToolParameter, TypeNode, without_null

__all__ = ["descriptor_from_type", "type_node"]


def descriptor_from_type(
    args_type: type,
    *,
    name: str,
    description: str,
    param_descriptions: Mapping[str, str] | None = None,
    **extra: Any,
) -> ToolDescriptor:
    """Describe a tool whose arguments are `args_type` (a Struct, dataclass or TypedDict).

    Descriptions come from the type itself (`msgspec.Meta(description=)`, which is what
    `Description(...)` makes); `param_descriptions` (from a docstring) fill the gaps.

    Raises:
        ToolDefinitionError: msgspec cannot describe a field's type.
    """
    try:
        schema = msgspec.json.schema(args_type)
        descriptor = descriptor_from_json_schema(name, description, schema, **extra)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ToolDefinitionError):
            raise
        raise ToolDefinitionError(
            f"tool {name!r}: its arguments cannot be described as JSON ({exc}); use types msgspec "
            "supports (str, int, float, bool, list, dict, Literal, Enum, Struct, dataclass, TypedDict...)"
        ) from exc
    docs = param_descriptions or {}
    params = tuple(_described(p, docs) for p in descriptor.parameters)
    if params != descriptor.parameters:
        descriptor = msgspec.structs.replace(descriptor, parameters=params)
    return descriptor


def _described(param: ToolParameter, docs: Mapping[str, str]) -> ToolParameter:
    # `Annotated[T, Description(...)] | None` puts the description on T, inside the union:
    # it is still the parameter's own description, and beats the docstring's.
    text = param.description or without_null(param.type).description or docs.get(param.name) or None
    return param if text == param.description else msgspec.structs.replace(param, description=text)


def type_node(tp: Any) -> tuple[TypeNode, dict[str, TypeNode]] | None:
    """The IR of any Python type msgspec can describe (a tool's result type), or None."""
    try:
        return parse_json_schema(msgspec.json.schema(tp))
    except (TypeError, ValueError, SchemaError):
        return None
