"""JSON Schema -> IR.

One parser serves both directions of the project: Python types reach the IR through
`msgspec.json.schema` and then this parser, and MCP servers' `inputSchema`s come through
it too. It understands what real servers send: local `$ref` into `$defs` / `definitions`,
type arrays, `anyOf` / `oneOf` (also beside the object they constrain), `allOf` over
objects, `enum` with or without `type`, `const`, `nullable` (OpenAPI), draft-04 boolean
`exclusiveMinimum` / `exclusiveMaximum`, nested objects and arrays, tuples (`prefixItems`), and
every `additionalProperties` form. Recursive references become `Ref` nodes plus one definition;
a depth limit, counted along the path and never reset inside a branch, stops anything else.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import msgspec

from ..exceptions import SchemaError
from ._constraints import CONSTRAINT_KEYS, constraint_notes, has_shape, shape_notes
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

__all__ = ["DEFAULT_MAX_DEPTH", "descriptor_from_json_schema", "parse_json_schema", "union_of"]

DEFAULT_MAX_DEPTH = 32

_ANNOTATION_ONLY = frozenset({"description", "title", "default", "examples", "$comment", "deprecated"})
_REF_SIBLINGS_IGNORED = frozenset(
    {
        "$ref",
        "description",
        "title",
        "default",
        "examples",
        "$comment",
        "deprecated",
        "$defs",
        "definitions",
        "$schema",
        "$id",
        "$anchor",
        "$dynamicAnchor",
        "nullable",
    }
)
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]+")
_NUMERIC = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")


def parse_json_schema(
    schema: Any, *, max_depth: int = DEFAULT_MAX_DEPTH
) -> tuple[TypeNode, dict[str, TypeNode]]:
    """Parse a JSON Schema into a type node and the definitions its `Ref`s point to.

    Raises:
        SchemaError: the schema is malformed, uses a non-local `$ref`, or nests deeper
            than `max_depth`.
    """
    parser = _Parser(schema, max_depth)
    node = parser.node(schema, 0)
    return node, parser.definitions


def descriptor_from_json_schema(
    name: str,
    description: str,
    schema: Mapping[str, Any] | None,
    *,
    max_depth: int = DEFAULT_MAX_DEPTH,
    **extra: Any,
) -> ToolDescriptor:
    """A ToolDescriptor whose parameters are the properties of an object schema.

    Raises:
        SchemaError: the schema does not describe an object, or cannot be parsed.
    """
    if schema is None or schema == {}:
        return ToolDescriptor(name=name, description=description, additional=True, **extra)
    parser = _Parser(schema, max_depth)
    parser.root_target = _root_target(schema)
    node = parser.node(schema, 0)
    definitions = parser.definitions
    notes = list(parser.root_notes)
    if isinstance(node, Ref):
        node = definitions[node.name]
    if isinstance(node, Union):
        merged = _merged_objects(node, definitions)
        if merged is not None:
            notes.extend(shape_notes(node, definitions))
            node = merged
    if not isinstance(node, Object):
        raise SchemaError(
            f"the parameters of tool {name!r} must be a JSON object schema, not {type(node).__name__.lower()}"
        )
    desc = description or node.description or ""
    return ToolDescriptor(
        name=name,
        description=desc,
        parameters=node.properties,
        definitions=definitions,
        additional=node.additional,
        notes=tuple(dict.fromkeys(notes)),
        **extra,
    )


class _Parser:
    def __init__(self, root: Any, max_depth: int) -> None:
        self.root = root
        self.max_depth = max_depth
        self.definitions: dict[str, TypeNode] = {}
        self.root_target: Any = None  # the schema whose constraints are the tool's (its notes)
        self.root_notes: list[str] = []
        self._anchors: dict[str, Any] | None = None
        self._resolving: list[str] = []  # refs on the current path
        self._cyclic: set[str] = set()
        self._done: dict[str, TypeNode] = {}  # ref -> parsed node (non-recursive)
        self._names: dict[str, str] = {}  # ref -> definition name

    # -- references -------------------------------------------------------------------

    def _target(self, ref: str) -> Any:
        if not ref.startswith("#"):
            raise SchemaError(f"only local references are supported, not {ref!r}")
        if len(ref) > 1 and not ref.startswith("#/"):  # `#name`: a `$anchor` (or `$dynamicAnchor`)
            if self._anchors is None:
                self._anchors = _anchors(self.root)
            found = self._anchors.get(ref[1:])
            if found is None:
                raise SchemaError(f"reference {ref!r} points nowhere (no such $anchor)")
            return found
        node: Any = self.root
        for raw in ref[1:].split("/")[1:] if ref != "#" else []:
            key = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, Mapping) and key in node:
                node = node[key]
            elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
                node = node[int(key)]
            else:
                raise SchemaError(f"reference {ref!r} points nowhere")
        return node

    def _name(self, ref: str) -> str:
        name = self._names.get(ref)
        if name is None:
            # A definition name is rendered back into a `$ref` pointer: keep it to safe characters
            # ("#" alone, "a~1b" escapes, spaces would not point back at the definition).
            base = _UNSAFE_NAME.sub("_", ref.rsplit("/", 1)[-1].lstrip("#")).strip("_") or "Root"
            name, n = base, 2
            taken = set(self._names.values())
            while name in taken:
                name, n = f"{base}{n}", n + 1
            self._names[ref] = name
        return name

    def _ref(self, ref: str, depth: int) -> TypeNode:
        if ref in self._done:
            return self._done[ref]
        name = self._name(ref)
        if ref in self._resolving:
            self._cyclic.add(ref)
            return Ref(name=name)
        self._resolving.append(ref)
        try:
            node = self.node(self._target(ref), depth + 1)
        finally:
            self._resolving.pop()
        if ref in self._cyclic:
            if isinstance(node, Ref):
                raise SchemaError(f"reference {ref!r} refers only to itself; it describes no value")
            self.definitions[name] = node
            node = Ref(name=name)
        self._done[ref] = node
        return node

    # -- nodes ------------------------------------------------------------------------

    def node(self, schema: Any, depth: int) -> TypeNode:
        if depth > self.max_depth:
            raise SchemaError(f"schema nests deeper than {self.max_depth} levels")
        if schema is True:
            return AnyValue()
        if not isinstance(schema, Mapping):
            raise SchemaError(f"expected a schema object, got {type(schema).__name__}: {schema!r:.60}")
        desc = schema.get("description")
        if desc is not None and not isinstance(desc, str):
            raise SchemaError("'description' must be a string")
        node = self._node(schema, depth)
        if schema.get("nullable") is True:
            node = union_of((node, Null()))
        notes = constraint_notes(schema) if not CONSTRAINT_KEYS.isdisjoint(schema) else []
        if notes and schema is self.root_target:
            self.root_notes.extend(notes)  # the tool's own: the dialects add them to its description
            notes = []
        if notes and isinstance(node, Object | Union):
            desc = " ".join([desc, *notes]) if desc else " ".join(notes)
        if desc and node.description != desc:
            node = msgspec.structs.replace(node, description=desc)
        return node

    def _node(self, schema: Mapping[str, Any], depth: int) -> TypeNode:
        if "$ref" in schema:
            ref = schema["$ref"]
            if not isinstance(ref, str):
                raise SchemaError("'$ref' must be a string")
            rest = {k: v for k, v in schema.items() if k not in _REF_SIBLINGS_IGNORED}
            if has_shape(rest) or "required" in rest:
                # 2020-12: keywords beside `$ref` apply too (`{"$ref": "#/$defs/Base", "properties": ...}`)
                return self._all_of({"allOf": [{"$ref": ref}, rest]}, depth)
            return self._ref(ref, depth)
        for key in ("anyOf", "oneOf"):
            if key in schema:
                return self._any_of(schema, key, depth)
        if "allOf" in schema:
            return self._all_of(schema, depth)
        if "const" in schema:
            return Enum(values=(_scalar(schema["const"]),))
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                raise SchemaError("'enum' must be a non-empty list")
            return Enum(values=tuple(_scalar(v) for v in values))
        kind = schema.get("type")
        if isinstance(kind, list):
            if not kind:
                raise SchemaError("'type' must not be an empty list")
            return union_of(tuple(self._typed(schema, k, depth) for k in kind))
        if kind is None:
            if "properties" in schema or "additionalProperties" in schema:
                kind = "object"
            elif "items" in schema or "prefixItems" in schema:
                kind = "array"
            else:
                unknown = (
                    set(schema) - _ANNOTATION_ONLY - {"nullable", "$defs", "definitions", "$schema", "$id"}
                )
                if unknown - {"format", "pattern"}:
                    return AnyValue()
                return String(format=schema.get("format")) if "format" in schema else AnyValue()
        return self._typed(schema, kind, depth)

    def _list(self, value: Any, key: str, depth: int) -> tuple[TypeNode, ...]:
        if not isinstance(value, list) or not value:
            raise SchemaError(f"'{key}' must be a non-empty list")
        return tuple(self.node(s, depth + 1) for s in value)

    def _any_of(self, schema: Mapping[str, Any], key: str, depth: int) -> TypeNode:
        options = schema[key]
        base = {k: v for k, v in schema.items() if k != key}
        if not has_shape(base):
            return union_of(self._list(options, key, depth))
        # `{"type": "object", "properties": ..., "anyOf": [...]}`: the options refine the object
        # beside them. Options that only constrain (`{"required": ["a"]}`) leave its shape as it
        # is (the server checks them); options with a shape of their own are merged into it.
        if not isinstance(options, list) or not options:
            raise SchemaError(f"'{key}' must be a non-empty list")
        if not any(has_shape(o) for o in options):
            return self.node(base, depth + 1)
        return union_of(tuple(self.node(_merge(base, o), depth + 1) for o in options))

    def _all_of(self, schema: Mapping[str, Any], depth: int) -> TypeNode:
        raw = schema["allOf"]
        if not isinstance(raw, list) or not raw:
            raise SchemaError("'allOf' must be a non-empty list")
        base = {k: v for k, v in schema.items() if k != "allOf"}
        shaped = [s for s in raw if has_shape(s) or not isinstance(s, Mapping | bool)]
        if has_shape(base):
            shaped.insert(0, base)
        # Parts without a shape only constrain: their `required` names still count.
        required = {r for s in raw if isinstance(s, Mapping) and not has_shape(s) for r in _names(s)}
        parts = tuple(self.node(s, depth + 1) for s in shaped)
        if not parts:
            return AnyValue()
        if len(parts) == 1 and not required:
            return parts[0]
        resolved = [self.definitions.get(p.name) if isinstance(p, Ref) else p for p in parts]
        if not all(isinstance(p, Object) for p in resolved):
            raise SchemaError("'allOf' is only supported over object schemas (not over a recursive one)")
        props: dict[str, ToolParameter] = {}
        additional: TypeNode | bool = True
        for p in resolved:
            assert isinstance(p, Object)
            for prop in p.properties:
                props[prop.name] = prop
            if p.additional is False:
                additional = False
        for name in required:
            known = props.get(name)
            props[name] = (
                ToolParameter(name=name, type=AnyValue())
                if known is None
                else msgspec.structs.replace(known, required=True)
            )
        return Object(properties=tuple(props.values()), additional=additional)

    def _typed(self, schema: Mapping[str, Any], kind: Any, depth: int) -> TypeNode:
        if kind == "string":
            return String(
                format=_opt(schema, "format", str),
                pattern=_opt(schema, "pattern", str),
                min_length=_opt(schema, "minLength", int),
                max_length=_opt(schema, "maxLength", int),
                content_encoding=_opt(schema, "contentEncoding", str),
            )
        if kind == "integer" or kind == "number":
            bounds = _bounds(schema)
            cls = Integer if kind == "integer" else Number
            return cls(
                minimum=bounds["minimum"],
                maximum=bounds["maximum"],
                exclusive_minimum=bounds["exclusiveMinimum"],
                exclusive_maximum=bounds["exclusiveMaximum"],
                multiple_of=bounds["multipleOf"],
            )
        if kind == "boolean":
            return Boolean()
        if kind == "null":
            return Null()
        if kind == "array":
            return self._array(schema, depth)
        if kind == "object":
            return self._object(schema, depth)
        raise SchemaError(f"unknown type {kind!r}")

    def _array(self, schema: Mapping[str, Any], depth: int) -> Array:
        prefix = schema.get("prefixItems")
        items_schema = schema.get("items", True)
        positions: tuple[TypeNode, ...] | None = None
        if prefix is not None:
            options = list(self._list(prefix, "prefixItems", depth))
            if items_schema is False:
                positions = tuple(options)  # a closed tuple: one type per position
            if items_schema not in (False, True, None) and isinstance(items_schema, Mapping):
                options.append(self.node(items_schema, depth + 1))
            items = union_of(tuple(options))
        elif isinstance(items_schema, list):  # draft-04 tuple form
            items = union_of(self._list(items_schema, "items", depth))
        elif items_schema is False:
            raise SchemaError("an array whose 'items' is false can hold nothing")
        else:
            items = self.node(items_schema, depth + 1)
        return Array(
            items=items,
            prefix_items=positions,
            min_items=_opt(schema, "minItems", int),
            max_items=_opt(schema, "maxItems", int),
            unique_items=schema.get("uniqueItems") is True,
        )

    def _object(self, schema: Mapping[str, Any], depth: int) -> Object:
        raw_props = schema.get("properties", {})
        if not isinstance(raw_props, Mapping):
            raise SchemaError("'properties' must be an object")
        required = _names(schema)
        props = []
        for name, prop_schema in raw_props.items():
            node = self.node(prop_schema, depth + 1)
            default = (
                prop_schema.get("default", msgspec.UNSET)
                if isinstance(prop_schema, Mapping)
                else msgspec.UNSET
            )
            header = prop_schema.get("x-mcp-header") if isinstance(prop_schema, Mapping) else None
            props.append(
                ToolParameter(
                    name=name,
                    description=node.description,
                    type=node,
                    required=name in required,
                    default=default,
                    header=header if isinstance(header, str) else None,
                )
            )
        # A required name the properties do not describe may hold any value.
        props.extend(
            ToolParameter(name=r, type=AnyValue()) for r in dict.fromkeys(required) if r not in raw_props
        )
        additional: TypeNode | bool
        extra = schema.get("additionalProperties", True)
        additional = extra if isinstance(extra, bool) else self.node(extra, depth + 1)
        if additional == AnyValue():
            additional = True  # `additionalProperties: {}` says what `true` says
        patterns = schema.get("patternProperties")
        if isinstance(patterns, Mapping) and patterns and additional is True:
            additional = union_of(tuple(self.node(s, depth + 1) for s in patterns.values()))
        title = schema.get("title")
        return Object(
            properties=tuple(props), additional=additional, name=title if isinstance(title, str) else None
        )


def union_of(options: tuple[TypeNode, ...]) -> TypeNode:
    """A union of `options`: nested unions flattened, duplicates dropped, Any absorbing all."""
    flat: list[TypeNode] = []
    description: str | None = None  # a flattened union's description is kept
    for option in options:
        if isinstance(option, Union):
            description = description or option.description
        for o in option.options if isinstance(option, Union) else (option,):
            if isinstance(o, AnyValue):
                return AnyValue(description=option.description)
            if o not in flat:
                flat.append(o)
    if len(flat) == 1:
        only = flat[0]
        return (
            msgspec.structs.replace(only, description=description)
            if description and not only.description
            else only
        )
    return Union(options=tuple(flat), description=description)


def _merged_objects(node: Union, definitions: Mapping[str, TypeNode]) -> Object | None:
    """One object standing for a union of objects (a tool whose arguments take several shapes).

    The model is shown every property; one is required when every shape requires it, and a
    property that several shapes type differently gets the union of their types. The server
    still checks which combinations it accepts. None when an option is not an object.
    """
    options = [definitions.get(o.name) if isinstance(o, Ref) else o for o in node.options]
    objects = [o for o in options if not isinstance(o, Null)]
    if not objects or not all(isinstance(o, Object) for o in objects):
        return None
    props: dict[str, ToolParameter] = {}
    always: dict[str, int] = {}  # in how many shapes a property is required
    for obj in objects:
        assert isinstance(obj, Object)
        for prop in obj.properties:
            always[prop.name] = always.get(prop.name, 0) + prop.required
            known = props.get(prop.name)
            props[prop.name] = (
                prop if known is None else msgspec.structs.replace(known, type=_joined(known.type, prop.type))
            )
    merged = tuple(
        msgspec.structs.replace(p, required=always[p.name] == len(objects)) for p in props.values()
    )
    closed = all(isinstance(o, Object) and o.additional is False for o in objects)
    return Object(properties=merged, additional=not closed, description=node.description)


def _joined(a: TypeNode, b: TypeNode) -> TypeNode:
    if isinstance(a, Enum) and isinstance(
        b, Enum
    ):  # a discriminator: `kind` is "a" in one shape, "b" in another
        return Enum(values=tuple(dict.fromkeys((*a.values, *b.values))), description=a.description)
    return a if a == b else union_of((a, b))


def _root_target(schema: Any) -> Any:
    """The schema the tool's arguments are: the root, or what a root that is only a `$ref` points to."""
    seen = 0
    node = schema
    while isinstance(node, Mapping) and isinstance(node.get("$ref"), str) and seen < 8:
        rest = set(node) - _REF_SIBLINGS_IGNORED - {"$ref"}
        if rest:
            return node
        try:
            node = _Parser(schema, DEFAULT_MAX_DEPTH)._target(node["$ref"])
        except SchemaError:
            return schema
        seen += 1
    return node


def _anchors(root: Any) -> dict[str, Any]:
    """Every `$anchor` / `$dynamicAnchor` name in a schema document, and the schema it names."""
    found: dict[str, Any] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            for key in ("$anchor", "$dynamicAnchor"):
                name = node.get(key)
                if isinstance(name, str):
                    found.setdefault(name, node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _merge(base: Mapping[str, Any], option: Any) -> Any:
    """`base` refined by one `anyOf` / `oneOf` option: properties and required names add up."""
    if not isinstance(option, Mapping):
        return option  # parsing it reports what is wrong with it
    merged = {**base, **option}
    props_a, props_b = base.get("properties"), option.get("properties")
    if isinstance(props_a, Mapping) and isinstance(props_b, Mapping):
        merged["properties"] = {**props_a, **props_b}
    req_a, req_b = base.get("required"), option.get("required")
    if isinstance(req_a, list) and isinstance(req_b, list):
        merged["required"] = [*req_a, *(r for r in req_b if r not in req_a)]
    return merged


def _names(schema: Mapping[str, Any]) -> list[str]:
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise SchemaError("'required' must be a list of property names")
    return required


def _bounds(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Numeric bounds; draft-04's boolean `exclusiveMinimum` / `exclusiveMaximum` turn their bound exclusive."""
    bounds: dict[str, Any] = {}
    for key in _NUMERIC:
        value = schema.get(key)
        if isinstance(value, bool) and key in ("exclusiveMinimum", "exclusiveMaximum"):
            continue
        bounds[key] = _opt(schema, key, (int, float))
    for key, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if schema.get(key) is True and bounds[plain] is not None:
            bounds[key], bounds[plain] = bounds[plain], None
    return {k: bounds.get(k) for k in _NUMERIC}


def _scalar(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise SchemaError(f"only scalar enum values are supported, not {value!r:.60}")


def _opt(schema: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = schema.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, kind):
        raise SchemaError(f"{key!r} has the wrong type: {value!r:.60}")
    return value
