"""IR -> OpenAI function tools (Chat Completions and Responses), strict mode included.

Strict mode (Structured Outputs) accepts a subset of JSON Schema and asks more of it:
every object closed (`additionalProperties: false`) and every property required, at every
depth. The strict renderer meets that from the IR instead of patching a finished schema:

- A property the model may omit becomes required, at every depth (the arguments, the fields of
  a nested object, of an array's items, of a union's options, of a `$defs` entry). Its
  description says the default, `(default: 10)`, and the `default` keyword is left out (strict
  mode rejects it). Where its type has no null it also admits null, which the decoders read as
  "not sent" at every depth: the default is used, and a property without a known default
  (every optional property of a JSON-Schema or MCP tool, a TypedDict `NotRequired` key) is left
  out, so the model never has to invent a value (`runtime.schema._nulls`,
  `runtime.mcp._schema_tool`).
- Keywords strict mode rejects (minLength, maxLength, uniqueItems, formats outside its
  list, patterns with lookaround, contentEncoding, a tuple's prefixItems) move into the
  description; the decoder still enforces them.
- `$ref` takes no siblings in strict mode: a described reference becomes `anyOf: [{$ref}]`.
- Enums whose values have several JSON types become an `anyOf` of one enum per type.
- What strict mode cannot describe at all (a value of any JSON type, an object with
  free-form keys such as `dict[str, V]`) sends that one tool non-strict: `"strict": false`
  with the plain schema, which the API accepts. `strict_fallback_reason` says why.
"""

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
    is_nullable,
)
from ._notes import default_note, describe, has_lookaround, json_type, tool_description, tuple_note
from ._to_jsonschema import node_schema, parameters_schema

__all__ = [
    "STRICT_FORMATS",
    "openai_chat_tool",
    "openai_responses_tool",
    "strict_fallback_reason",
    "strict_parameters_schema",
]

STRICT_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
)
"""String formats OpenAI strict mode accepts; any other format moves into the description."""

_SCALAR_TYPES = frozenset({"string", "integer", "number", "boolean"})
_NULL: dict[str, Any] = {"type": "null"}


class _NotStrict(Exception):
    """Strict mode cannot express this schema (the message says where and why)."""


def openai_chat_tool(descriptor: ToolDescriptor, strict: bool = False) -> dict[str, Any]:
    """A Chat Completions tool: `{"type": "function", "function": {...}}`.

    With `strict`, the parameters follow strict mode and `"strict": true` is set; a tool
    strict mode cannot express is sent with `"strict": false` and the plain schema.
    """
    function: dict[str, Any] = {"name": descriptor.name, "description": tool_description(descriptor)}
    if strict:
        params = _strict_or_none(descriptor)
        function["parameters"] = params if params is not None else parameters_schema(descriptor)
        function["strict"] = params is not None
    else:
        function["parameters"] = parameters_schema(descriptor)
    return {"type": "function", "function": function}


def openai_responses_tool(descriptor: ToolDescriptor, strict: bool = False) -> dict[str, Any]:
    """A Responses API function tool: `{"type": "function", "name", ..., "strict"}`.

    `strict` is always sent: the Responses API treats a missing flag as strict.
    """
    params = _strict_or_none(descriptor) if strict else None
    return {
        "type": "function",
        "name": descriptor.name,
        "description": tool_description(descriptor),
        "parameters": params if params is not None else parameters_schema(descriptor),
        "strict": params is not None,
    }


def strict_parameters_schema(descriptor: ToolDescriptor) -> dict[str, Any] | None:
    """The parameters in OpenAI strict form, or None when strict mode cannot express them."""
    return _strict_or_none(descriptor)


def strict_fallback_reason(descriptor: ToolDescriptor) -> str | None:
    """Why the tool is sent non-strict when strict mode is asked for, or None if it is not."""
    try:
        _strict_parameters(descriptor)
    except _NotStrict as exc:
        return str(exc)
    return None


# -- rendering ---------------------------------------------------------------------------


def _strict_or_none(descriptor: ToolDescriptor) -> dict[str, Any] | None:
    try:
        return _strict_parameters(descriptor)
    except _NotStrict:
        return None


def _strict_parameters(descriptor: ToolDescriptor) -> dict[str, Any]:
    schema = _closed_object(descriptor.parameters, "$")
    if descriptor.definitions:
        schema["$defs"] = {
            name: _node(node, f"$defs.{name}") for name, node in descriptor.definitions.items()
        }
    return schema


def _closed_object(properties: tuple[ToolParameter, ...], path: str) -> dict[str, Any]:
    props = {p.name: _property(p, f"{path}.{p.name}") for p in properties}
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def _property(param: ToolParameter, path: str) -> dict[str, Any]:
    body, notes = _body(param.type, path)
    if not param.required and not is_nullable(param.type):
        body = _nullable(body)  # a null the decoders read as "not sent", at every depth
    note = default_note(param)
    if note:
        notes.append(note)
    return _described(body, param.description or _text(param.type), notes)


def _node(node: TypeNode, path: str) -> dict[str, Any]:
    body, notes = _body(node, path)
    return _described(body, _text(node), notes)


def _text(node: TypeNode) -> str | None:
    """The description a node brings; `T | None` brings T's."""
    if node.description or not isinstance(node, Union):
        return node.description
    options = [o for o in node.options if not isinstance(o, Null)]
    return _text(options[0]) if len(options) == 1 else None


def _described(body: dict[str, Any], text: str | None, notes: list[str]) -> dict[str, Any]:
    description = describe(text, notes)
    if description is None:
        return body
    if "$ref" in body:
        return {"anyOf": [body], "description": description}
    return {**body, "description": description}


def _body(node: TypeNode, path: str) -> tuple[dict[str, Any], list[str]]:
    """The schema of `node` without its description, and the notes for the description."""
    notes: list[str] = []
    if isinstance(node, String):
        schema: dict[str, Any] = {"type": "string"}
        if node.format is not None:
            if node.format in STRICT_FORMATS:
                schema["format"] = node.format
            else:
                notes.append(f"format: {node.format}")
        if node.pattern is not None:
            if has_lookaround(node.pattern):
                notes.append(f"pattern: {node.pattern}")
            else:
                schema["pattern"] = node.pattern
        if node.min_length is not None:
            notes.append(f"minLength: {node.min_length}")
        if node.max_length is not None:
            notes.append(f"maxLength: {node.max_length}")
        if node.content_encoding is not None:
            notes.append(f"{node.content_encoding}-encoded")
        return schema, notes
    if isinstance(node, Integer | Number | Boolean | Null):
        schema = node_schema(node)  # every numeric keyword is allowed in strict mode
        schema.pop("description", None)
        return schema, notes
    if isinstance(node, AnyValue):
        raise _NotStrict(f"{path} accepts any JSON value, which strict mode cannot describe")
    if isinstance(node, Array):
        schema = {"type": "array", "items": _node(node.items, f"{path}[]")}
        if node.min_items is not None:
            schema["minItems"] = node.min_items
        if node.max_items is not None:
            schema["maxItems"] = node.max_items
        if node.unique_items:
            notes.append("items must be unique")
        if node.prefix_items is not None:
            notes.append(tuple_note(node.prefix_items))  # strict mode has no prefixItems
        return schema, notes
    if isinstance(node, Object):
        if node.additional is not True and node.additional is not False:
            raise _NotStrict(f"{path} is a map with free-form keys, which strict mode cannot describe")
        if node.additional is True and not node.properties:
            raise _NotStrict(f"{path} is an object with free-form keys, which strict mode cannot describe")
        return _closed_object(node.properties, path), notes
    if isinstance(node, Union):
        options = [o for o in node.options if not isinstance(o, Null)]
        has_null = len(options) < len(node.options)
        if len(options) == 1:
            body, notes = _body(options[0], path)
            return (_nullable(body) if has_null else body), notes
        variants: list[dict[str, Any]] = []
        for option in options:
            schema = _node(option, path)
            variants.extend(schema["anyOf"] if set(schema) == {"anyOf"} else [schema])
        if has_null and _NULL not in variants:
            variants.append(dict(_NULL))
        return {"anyOf": variants}, notes
    if isinstance(node, Enum):
        return _enum(node.values), notes
    if isinstance(node, Ref):
        return {"$ref": f"#/$defs/{node.name}"}, notes
    raise TypeError(f"not a type node: {node!r}")  # pragma: no cover - the node set is closed


def _enum(values: tuple[Any, ...]) -> dict[str, Any]:
    groups: dict[str, list[Any]] = {}
    for value in values:
        groups.setdefault(json_type(value), []).append(value)
    variants = [dict(_NULL) if kind == "null" else {"type": kind, "enum": vs} for kind, vs in groups.items()]
    return variants[0] if len(variants) == 1 else {"anyOf": variants}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` that also admits null: a type list for a plain scalar, else an anyOf."""
    kind = schema.get("type")
    if isinstance(kind, str) and kind in _SCALAR_TYPES and "enum" not in schema:
        return {**schema, "type": [kind, "null"]}
    if set(schema) == {"anyOf"}:
        return {"anyOf": [*schema["anyOf"], dict(_NULL)]}
    return {"anyOf": [schema, dict(_NULL)]}
