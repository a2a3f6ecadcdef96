"""The tool IR: a provider-neutral description of a tool and its parameter types.

Three sources meet here (Python signatures, typed classes, MCP JSON Schemas) and every
provider dialect is rendered from it. The type nodes are a closed set; unions are native.
A recursive type appears once in `ToolDescriptor.definitions` and is referred to by `Ref`.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = [
    "AnyValue",
    "Array",
    "Boolean",
    "Enum",
    "Integer",
    "Null",
    "Number",
    "Object",
    "Ref",
    "String",
    "ToolDescriptor",
    "ToolParameter",
    "TypeNode",
    "Union",
    "is_nullable",
    "without_null",
]

JsonScalar = str | int | float | bool | None


class _Node(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind"):
    description: str | None = None


class String(_Node, frozen=True, kw_only=True, tag="string"):
    """A string, with its optional constraints.

    `content_encoding` is "base64" for bytes; `format` names what the text holds
    ("date-time", "date", "time", "duration", "uuid", ...).
    """

    format: str | None = None
    pattern: str | None = None
    min_length: int | None = None
    max_length: int | None = None
    content_encoding: str | None = None


class Integer(_Node, frozen=True, kw_only=True, tag="integer"):
    """An integer, with its optional bounds."""

    minimum: int | float | None = None
    maximum: int | float | None = None
    exclusive_minimum: int | float | None = None
    exclusive_maximum: int | float | None = None
    multiple_of: int | float | None = None


class Number(_Node, frozen=True, kw_only=True, tag="number"):
    """A number (float), with its optional bounds."""

    minimum: int | float | None = None
    maximum: int | float | None = None
    exclusive_minimum: int | float | None = None
    exclusive_maximum: int | float | None = None
    multiple_of: int | float | None = None


class Boolean(_Node, frozen=True, kw_only=True, tag="boolean"):
    """true or false."""


class Null(_Node, frozen=True, kw_only=True, tag="null"):
    """JSON null; a member of a union for nullable values."""


class AnyValue(_Node, frozen=True, kw_only=True, tag="any"):
    """Any JSON value (a parameter typed `Any`, or the empty schema `{}`)."""


class Array(_Node, frozen=True, kw_only=True, tag="array"):
    """A list whose items all have one type, or a tuple with one type per position.

    For a tuple, `prefix_items` holds the type of each position (the array has exactly that
    many items) and `items` is the union of them, for readers that ignore positions.
    """

    items: TypeNode = AnyValue()
    prefix_items: tuple[TypeNode, ...] | None = None
    min_items: int | None = None
    max_items: int | None = None
    unique_items: bool = False


class Object(_Node, frozen=True, kw_only=True, tag="object"):
    """An object with named properties; `additional` types the keys not named (a map).

    `additional` is False for a closed object (the args of a tool), True for an open one,
    or a type node for `dict[str, V]`. `name` is the type's name, when it has one.
    """

    properties: tuple[ToolParameter, ...] = ()
    additional: TypeNode | bool = True
    name: str | None = None

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.properties if p.required)


class Union(_Node, frozen=True, kw_only=True, tag="union"):
    """One of several types (never nested, never of one option)."""

    options: tuple[TypeNode, ...] = ()


class Enum(_Node, frozen=True, kw_only=True, tag="enum"):
    """One of a fixed set of JSON values (Python `Literal` and `enum.Enum`)."""

    values: tuple[JsonScalar, ...] = ()


class Ref(_Node, frozen=True, kw_only=True, tag="ref"):
    """A reference to `ToolDescriptor.definitions[name]`; only used for recursive types."""

    name: str = ""


TypeNode = String | Integer | Number | Boolean | Null | AnyValue | Array | Object | Union | Enum | Ref


class ToolParameter(msgspec.Struct, frozen=True, kw_only=True):
    """One named parameter (or object property).

    Attributes:
        name: the JSON property name.
        description: what the model reads about it.
        type: its type node.
        required: False when the model may omit it.
        default: the value used when omitted; `msgspec.UNSET` when there is none.
        header: the HTTP header an MCP client mirrors this argument into (SEP-2243's
            `x-mcp-header`; served in the MCP schema only, as `Mcp-Param-<header>`).
    """

    name: str
    description: str | None = None
    type: TypeNode = AnyValue()
    required: bool = True
    default: Any = msgspec.UNSET
    header: str | None = None

    @property
    def has_default(self) -> bool:
        return self.default is not msgspec.UNSET


class ToolDescriptor(msgspec.Struct, frozen=True, kw_only=True):
    """What the model is told about one tool, independent of any provider.

    Attributes:
        name: the tool's name (`^[a-zA-Z0-9_-]{1,64}$`).
        description: what the tool does, for the model.
        parameters: the arguments, in signature order.
        definitions: recursive types, referred to by `Ref` nodes.
        title: a human-readable title (MCP).
        output: the type of a structured result, when known (MCP outputSchema).
        annotations: behaviour hints passed through to MCP (readOnlyHint, ...).
        cache_control: provider prompt-cache marker (Anthropic), when asked for.
        additional: what the arguments may hold beyond `parameters`, as `Object.additional`
            says it: False (closed: unknown fields are refused, the default of every tool
            written in Python), True (open: they pass), or the type of their values.
        input_schema: the arguments' JSON Schema exactly as the tool was given it (an MCP
            server's `inputSchema`, a `JsonSchemaTool`'s), when the tool checks calls against
            it: the `mcp` and `jsonschema` dialects serve it as it is.
        output_schema: the result's JSON Schema as given (an MCP server's `outputSchema`).
        notes: what the given schema requires that the IR has no form for (`anyOf` of
            required names, `if`/`then`, `dependentRequired`...), in words: the dialects
            rendered from the IR add them to the description, so the model still reads them.
    """

    name: str
    description: str = ""
    parameters: tuple[ToolParameter, ...] = ()
    definitions: dict[str, TypeNode] = msgspec.field(default_factory=dict)
    title: str | None = None
    output: TypeNode | None = None
    annotations: dict[str, Any] | None = None
    cache_control: dict[str, Any] | None = None
    additional: TypeNode | bool = False
    input_schema: dict[str, Any] | None = None
    output_schema: dict[str, Any] | None = None
    notes: tuple[str, ...] = ()

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parameters if p.required)

    def parameter(self, name: str) -> ToolParameter:
        """The parameter called `name` (KeyError if there is none)."""
        for p in self.parameters:
            if p.name == name:
                return p
        raise KeyError(name)


def is_nullable(node: TypeNode) -> bool:
    """True when null is an allowed value of `node`."""
    if isinstance(node, Null | AnyValue):
        return True
    if isinstance(node, Union):
        return any(is_nullable(o) for o in node.options)
    if isinstance(node, Enum):
        return None in node.values
    return False


def without_null(node: TypeNode) -> TypeNode:
    """`node` with null removed from its options (`T | None` -> `T`)."""
    if isinstance(node, Union):
        rest = tuple(o for o in node.options if not isinstance(o, Null))
        if len(rest) == len(node.options):
            return node
        if len(rest) == 1:
            only = rest[0]
            if node.description and not only.description:
                return msgspec.structs.replace(only, description=node.description)
            return only
        return msgspec.structs.replace(node, options=rest)
    if isinstance(node, Enum) and None in node.values:
        return msgspec.structs.replace(node, values=tuple(v for v in node.values if v is not None))
    return node
