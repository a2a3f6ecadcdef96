"""Python types -> IR: plain types directly, everything else through `msgspec.json.schema`."""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from ..exceptions import SchemaError, ToolDefinitionError
from ._from_jsonschema import descriptor_from_json_schema, parse_json_schema, union_of
from ._ir import (
    AnyValue,
    Array,
    Boolean,
    Enum,
    Integer,
    Null,
    Number,
    Object,
    String,
    ToolDescriptor,
    ToolParameter,
    TypeNode,
    without_null,
)

__all__ = ["descriptor_from_fields", "descriptor_from_type", "direct_node", "type_node"]


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


# -- the direct path -------------------------------------------------------------------------
#
# Most tool parameters are plain types (str, int, list[str], Literal[...], X | None). For
# those the IR is built straight from the Python type, without rendering a JSON Schema and
# parsing it back; anything else (Structs, dataclasses, enums, datetimes...) returns None and
# takes the msgspec path. tests/test_schema_direct.py checks both paths give the same IR.

_PRIMITIVES: dict[Any, TypeNode] = {
    str: String(),
    int: Integer(),
    float: Number(),
    bool: Boolean(),
    type(None): Null(),
    None: Null(),
    Any: AnyValue(),
}
_ARRAYS = {list: False, tuple: False, set: True, frozenset: True}
_META_ATTRIBUTES = tuple(a for a in dir(msgspec.Meta) if not a.startswith("_"))
_META_FIELDS = frozenset(
    {
        "description",
        "ge",
        "gt",
        "le",
        "lt",
        "multiple_of",
        "min_length",
        "max_length",
        "pattern",
        "title",
        "examples",
        "extra",
    }
)


def direct_node(tp: Any) -> TypeNode | None:
    """The IR of a plain Python type, or None when it needs the msgspec path."""
    node = _PRIMITIVES.get(tp) if _hashable(tp) else None
    if node is not None:
        return node
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        base, *metas = typing.get_args(tp)
        return _annotated(base, metas)
    args = typing.get_args(tp)
    if origin is typing.Union or origin is types.UnionType:
        return _direct_union(args)
    if origin is typing.Literal:
        if not all(a is None or isinstance(a, str | int) for a in args):
            return None
        return Enum(values=_sorted_literals(args))
    if origin in _ARRAYS:
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            return None
        items = direct_node(args[0]) if args else AnyValue()
        if items is None:
            return None
        return Array(items=items, unique_items=_ARRAYS[origin])
    if origin is dict:
        if not args:
            return Object(additional=True)
        if args[0] is not str:
            return None
        value = direct_node(args[1])
        if value is None:
            return None
        return Object(additional=True if value == AnyValue() else value)
    if tp in _ARRAYS:
        return Array(items=AnyValue(), unique_items=_ARRAYS[tp])
    if tp is dict:
        return Object(additional=True)
    return None


def _sorted_literals(values: tuple[Any, ...]) -> tuple[Any, ...]:
    # msgspec's order for enum values: by type name, then value.
    try:
        return tuple(sorted(values, key=lambda v: (type(v).__name__, v)))
    except TypeError:
        return values


def _hashable(tp: Any) -> bool:
    try:
        hash(tp)
    except TypeError:
        return False
    return True


def _direct_union(args: tuple[Any, ...]) -> TypeNode | None:
    options: list[TypeNode] = []
    has_none = False
    literals = 0
    for arg in args:
        if arg is type(None) or arg is None:
            has_none = True
            continue
        if typing.get_origin(arg) is typing.Literal:
            literals += 1
        node = direct_node(arg)
        if node is None or literals > 1:
            return None  # msgspec merges several Literals; leave that to it
        options.append(node)
    if has_none:
        options.append(Null())
    return union_of(tuple(options))


def _annotated(base: Any, metas: list[Any]) -> TypeNode | None:
    node = direct_node(base)
    if node is None:
        return None
    constraints: dict[str, Any] = {}
    description: str | None = None
    for meta in metas:
        if not isinstance(meta, msgspec.Meta):
            continue  # msgspec ignores foreign annotations too
        for name in _META_ATTRIBUTES:
            value = getattr(meta, name)
            if value is None:
                continue
            if name not in _META_FIELDS:
                return None  # tz, extra_json_schema...: the msgspec path knows them
            if name == "description":
                description = value
            elif name not in ("title", "examples", "extra"):
                constraints[name] = value
    if constraints:
        node = _constrain(node, constraints)
        if node is None:
            return None
    if description is not None:
        node = msgspec.structs.replace(node, description=description)
    return node


def _constrain(node: TypeNode, c: dict[str, Any]) -> TypeNode | None:
    if isinstance(node, Integer | Number) and c.keys() <= {"ge", "gt", "le", "lt", "multiple_of"}:
        return msgspec.structs.replace(
            node,
            minimum=c.get("ge"),
            maximum=c.get("le"),
            exclusive_minimum=c.get("gt"),
            exclusive_maximum=c.get("lt"),
            multiple_of=c.get("multiple_of"),
        )
    if isinstance(node, String) and c.keys() <= {"min_length", "max_length", "pattern"}:
        return msgspec.structs.replace(
            node, min_length=c.get("min_length"), max_length=c.get("max_length"), pattern=c.get("pattern")
        )
    if isinstance(node, Array) and c.keys() <= {"min_length", "max_length"}:
        return msgspec.structs.replace(node, min_items=c.get("min_length"), max_items=c.get("max_length"))
    return None


def descriptor_from_fields(
    fields: Sequence[tuple[str, Any, Any]],
    *,
    name: str,
    description: str,
    param_descriptions: Mapping[str, str] | None = None,
) -> ToolDescriptor | None:
    """A descriptor built straight from (name, type, default) triples, or None if a type needs msgspec.

    `default` is `msgspec.NODEFAULT` for a required parameter.
    """
    params: list[ToolParameter] = []
    docs = param_descriptions or {}
    for field_name, tp, default in fields:
        node = direct_node(tp)
        if node is None:
            return None
        required = default is msgspec.NODEFAULT
        if not required:
            try:
                default = msgspec.to_builtins(default)
            except (TypeError, ValueError):
                return None
        params.append(
            ToolParameter(
                name=field_name,
                description=node.description
                or without_null(node).description
                or docs.get(field_name)
                or None,
                type=node,
                required=required,
                default=msgspec.UNSET if required else default,
            )
        )
    return ToolDescriptor(name=name, description=description, parameters=tuple(params))
