"""IR -> a Gemini `FunctionDeclaration` whose `parameters` stay in Gemini's OpenAPI subset.

Gemini rejects JSON Schema keywords outside that subset with a 400, so this renderer never
emits `additionalProperties`, `$ref`/`$defs`, `const`, `oneOf`, `allOf`, `default`,
`exclusiveMinimum`/`exclusiveMaximum`, `multipleOf`, `uniqueItems`, `patternProperties`,
`prefixItems` or `title`, nor a `"type": "null"`. What the subset cannot say degrades, and the
description says so (the decoder still checks the real type):

- null: `"nullable": true` on the other type (never an `anyOf` member).
- Unions of several types: `anyOf` (google-genai's `Schema` has `any_of`).
- Enums: Gemini takes non-empty strings only. Other values keep their JSON type and list
  the allowed values in the description (`one of: 1, 2`); mixed enums become an `anyOf`
  per type.
- Recursive types are unrolled `MAX_UNROLL` times along a path; below that the object keeps
  only its fields that do not recurse, and says the deeper levels are cut.
- Maps (`dict[str, V]`) and objects with free-form keys: `"type": "object"` without
  properties (as google-genai renders a `dict` parameter), the value type in the description.
- Any JSON value: an `anyOf` of the scalar types, nullable.
- Formats other than `date-time`, patterns with lookaround, `multipleOf`, `uniqueItems`,
  `contentEncoding`, a tuple's positions (`prefixItems`), a float's exclusive bounds and
  defaults move into the description; an integer's
  exclusive bounds become inclusive ones.
- A tool without parameters has no `parameters` (google-genai leaves it unset).
"""

from __future__ import annotations

import math
from typing import Any

from ..exceptions import SchemaError
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
from ._notes import (
    default_note,
    describe,
    has_lookaround,
    json_type,
    shown,
    summary,
    tool_description,
    tuple_note,
)

__all__ = ["GEMINI_FORMATS", "MAX_UNROLL", "gemini_declaration"]

MAX_UNROLL = 3
"""How many times one recursive type is expanded along a path before it is cut."""

GEMINI_FORMATS = frozenset({"date-time", "enum"})
"""String formats Gemini accepts; any other format moves into the description."""


def gemini_declaration(descriptor: ToolDescriptor, strict: bool = False) -> dict[str, Any]:
    """A FunctionDeclaration as a dict: name, description, parameters (Gemini's subset).

    `strict` is ignored: Gemini has no strict flag for function declarations.
    """
    declaration: dict[str, Any] = {"name": descriptor.name, "description": tool_description(descriptor)}
    if descriptor.parameters:
        declaration["parameters"] = _Renderer(descriptor.definitions).object(descriptor.parameters, ())
    return declaration


class _Renderer:
    def __init__(self, definitions: dict[str, TypeNode]) -> None:
        self.definitions = definitions

    def object(self, properties: tuple[ToolParameter, ...], path: tuple[str, ...]) -> dict[str, Any]:
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {p.name: self.property(p, path) for p in properties},
        }
        required = [p.name for p in properties if p.required]
        if required:
            schema["required"] = required
        return schema

    def property(self, param: ToolParameter, path: tuple[str, ...]) -> dict[str, Any]:
        body, notes = self.body(param.type, path)
        note = default_note(param)
        if note:
            notes.append(note)
        return _described(body, param.description or self.description(param.type), notes)

    def node(self, node: TypeNode, path: tuple[str, ...]) -> dict[str, Any]:
        body, notes = self.body(node, path)
        return _described(body, self.description(node), notes)

    def description(self, node: TypeNode) -> str | None:
        """The description a node brings: a reference its definition's, `T | None` T's."""
        if node.description:
            return node.description
        if isinstance(node, Ref):
            target = self.definitions.get(node.name)
            return None if target is None else target.description
        if isinstance(node, Union):
            options = [o for o in node.options if not isinstance(o, Null)]
            return self.description(options[0]) if len(options) == 1 else None
        return None

    def body(self, node: TypeNode, path: tuple[str, ...]) -> tuple[dict[str, Any], list[str]]:
        """The schema of `node` without its description, and the notes for the description.

        `path` holds the recursive types being expanded, outermost first.
        """
        notes: list[str] = []
        schema: dict[str, Any]
        if isinstance(node, String):
            schema = {"type": "string"}
            if node.format is not None:
                if node.format in GEMINI_FORMATS:
                    schema["format"] = node.format
                else:
                    notes.append(f"format: {node.format}")
            if node.pattern is not None:
                if has_lookaround(node.pattern):
                    notes.append(f"pattern: {node.pattern}")
                else:
                    schema["pattern"] = node.pattern
            if node.min_length is not None:
                schema["minLength"] = node.min_length
            if node.max_length is not None:
                schema["maxLength"] = node.max_length
            if node.content_encoding is not None:
                notes.append(f"{node.content_encoding}-encoded")
        elif isinstance(node, Integer):
            schema = {"type": "integer"}
            low = _max(
                node.minimum,
                None if node.exclusive_minimum is None else math.floor(node.exclusive_minimum) + 1,
            )
            high = _min(
                node.maximum,
                None if node.exclusive_maximum is None else math.ceil(node.exclusive_maximum) - 1,
            )
            if low is not None:
                schema["minimum"] = low
            if high is not None:
                schema["maximum"] = high
            if node.multiple_of is not None:
                notes.append(f"a multiple of {node.multiple_of}")
        elif isinstance(node, Number):
            schema = {"type": "number"}
            if node.minimum is not None or node.exclusive_minimum is not None:
                schema["minimum"] = _max(node.minimum, node.exclusive_minimum)
            if node.maximum is not None or node.exclusive_maximum is not None:
                schema["maximum"] = _min(node.maximum, node.exclusive_maximum)
            if node.exclusive_minimum is not None:
                notes.append(f"greater than {node.exclusive_minimum}")
            if node.exclusive_maximum is not None:
                notes.append(f"less than {node.exclusive_maximum}")
            if node.multiple_of is not None:
                notes.append(f"a multiple of {node.multiple_of}")
        elif isinstance(node, Boolean):
            schema = {"type": "boolean"}
        elif isinstance(node, Null):
            schema = {"type": "string", "nullable": True}
            notes.append("always null")
        elif isinstance(node, AnyValue):
            schema = {
                "anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}],
                "nullable": True,
            }
            notes.append("any JSON value")
        elif isinstance(node, Array):
            schema = {"type": "array", "items": self.node(node.items, path)}
            if node.min_items is not None:
                schema["minItems"] = node.min_items
            if node.max_items is not None:
                schema["maxItems"] = node.max_items
            if node.unique_items:
                notes.append("items must be unique")
            if node.prefix_items is not None:
                notes.append(tuple_note(node.prefix_items))
        elif isinstance(node, Object):
            if node.properties:
                schema = self.object(node.properties, path)
                if node.additional is not True and node.additional is not False:
                    notes.append(f"other keys allowed, each {summary(node.additional)}")
            else:
                schema = {"type": "object"}
                if node.additional is False:
                    notes.append("an empty object")
                elif node.additional is True:
                    notes.append("a JSON object with any keys")
                else:
                    notes.append(f"a JSON object with any keys, each value {summary(node.additional)}")
        elif isinstance(node, Union):
            options = [o for o in node.options if not isinstance(o, Null)]
            if len(options) == 1:
                schema, notes = self.body(options[0], path)
            else:
                variants: list[dict[str, Any]] = []
                for option in options:
                    rendered = self.node(option, path)
                    variants.extend(rendered["anyOf"] if set(rendered) == {"anyOf"} else [rendered])
                schema = {"anyOf": variants}
            if len(options) < len(node.options):
                schema = {**schema, "nullable": True}
        elif isinstance(node, Enum):
            schema, notes = _enum(node.values)
        elif isinstance(node, Ref):
            return self.ref(node, path)
        else:  # pragma: no cover - the node set is closed
            raise TypeError(f"not a type node: {node!r}")
        return schema, notes

    def ref(self, node: Ref, path: tuple[str, ...]) -> tuple[dict[str, Any], list[str]]:
        target = self.definitions.get(node.name)
        if target is None:
            raise ValueError(f"reference to an unknown definition {node.name!r}")
        if path.count(node.name) < MAX_UNROLL:
            return self.body(target, (*path, node.name))
        # Cut: keep only what does not lead back into a recursive type.
        deeper = f"nested {MAX_UNROLL} levels deep"
        if isinstance(target, Object):
            if any(p.required and _recurses(p.type) for p in target.properties):
                raise SchemaError(
                    f"Gemini cannot express the recursive type {node.name!r}: a required field "
                    f"recurses, so it cannot be cut after {MAX_UNROLL} levels; make that field "
                    "optional or a list that may be empty"
                )
            kept = tuple(p for p in target.properties if not _recurses(p.type))
            cut = ", ".join(p.name for p in target.properties if _recurses(p.type))
            schema = self.object(kept, path) if kept else {"type": "object"}
            return schema, [f"{deeper}: {cut} cannot go deeper here and must be left out"]
        if isinstance(target, Union):
            rest = tuple(o for o in target.options if not _recurses(o))
            if rest:
                body, notes = self.body(rest[0] if len(rest) == 1 else Union(options=rest), path)
                return body, [*notes, f"{deeper}: only the non-recursive forms are allowed here"]
        raise SchemaError(
            f"Gemini cannot express the recursive type {node.name!r}: every form of it recurses, "
            f"so it cannot be cut after {MAX_UNROLL} levels; give it a form that ends (an optional "
            "field, a list that may be empty)"
        )


def _described(body: dict[str, Any], text: str | None, notes: list[str]) -> dict[str, Any]:
    description = describe(text, notes)
    if description is None:
        return body
    return {**body, "description": description}


def _enum(values: tuple[Any, ...]) -> tuple[dict[str, Any], list[str]]:
    nullable = None in values
    groups: dict[str, list[Any]] = {}
    for value in values:
        if value is not None:
            groups.setdefault(json_type(value), []).append(value)
    variants: list[tuple[dict[str, Any], list[str]]] = []
    for kind, members in groups.items():
        if kind == "string" and all(members):
            variants.append(({"type": "string", "enum": members}, []))
        else:
            # Gemini's enum holds non-empty strings only: keep the JSON type, list the values.
            listed = ", ".join(shown(v) for v in members)
            variants.append(({"type": kind}, [f"one of: {listed}"]))
    if not variants:  # only null
        return {"type": "string", "nullable": True}, ["always null"]
    if len(variants) == 1:
        schema, notes = variants[0]
    else:
        schema = {"anyOf": [_described(s, None, n) for s, n in variants]}
        notes = []
    if nullable:
        schema = {**schema, "nullable": True}
    return schema, notes


def _recurses(node: TypeNode | bool) -> bool:
    """True when `node` refers to a recursive type anywhere inside."""
    if isinstance(node, Ref):
        return True
    if isinstance(node, Array):
        return _recurses(node.items)
    if isinstance(node, Union):
        return any(_recurses(o) for o in node.options)
    if isinstance(node, Object):
        return any(_recurses(p.type) for p in node.properties) or (
            not isinstance(node.additional, bool) and _recurses(node.additional)
        )
    return False


def _max(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def _min(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)
