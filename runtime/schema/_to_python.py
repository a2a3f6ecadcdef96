"""IR -> Python types that msgspec decodes: the argument check of a tool known only by its schema.

A tool written in Python decodes its arguments into the Struct made from its signature. A
tool that arrives as a JSON Schema (an MCP server's tool) has no Python type, so one is made
from its IR, once per tool, and the runtime checks a call's arguments with it before they
leave the process:

| IR | Python type |
|---|---|
| String / Integer / Number | `str` / `int` / `int | float`, with `msgspec.Meta` constraints |
| Boolean, Null, AnyValue | `bool`, `None`, `Any` |
| Array | `list[T]` (with its length bounds); a tuple (`prefix_items`) `tuple[A, B]` |
| Object with properties | a Struct from `defstruct`; closed objects forbid unknown fields |
| Object without properties | `dict[str, V]` (`V` from `additional`) |
| Union | `Union[...]`; options msgspec cannot tell apart (two object types) become one loose type |
| Enum | `Literal[...]` |
| Ref (a recursive type) | its definition, once; deeper, a loose `dict` / `list` / `Any` |

Optional properties default to `msgspec.UNSET`, so `msgspec.to_builtins` leaves out what the
model did not send. Where the IR says more than msgspec can check (a string `format`,
`uniqueItems`, a pattern Python's `re` cannot compile), the type is looser and the server
has the last word.
"""

from __future__ import annotations

import keyword
import math
import re
import typing
import warnings
from typing import Annotated, Any, Literal

import msgspec

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

__all__ = ["arguments_struct", "python_type"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_]+")


def python_type(
    node: TypeNode, definitions: dict[str, TypeNode] | None = None, *, name: str = "Value"
) -> Any:
    """The Python type msgspec decodes values of `node` into (see the module's table).

    Args:
        node: the type node.
        definitions: what `Ref` nodes point to (`ToolDescriptor.definitions`).
        name: the base name of the Structs made for objects.
    """
    return _Builder(definitions or {}, name).of(node, name)


def arguments_struct(
    descriptor: ToolDescriptor, *, name: str | None = None
) -> tuple[type[msgspec.Struct], tuple[str, ...]]:
    """The Struct a tool's arguments decode into, and the fields whose null means "absent".

    The Struct is closed (unknown fields are rejected, as the model was shown a closed
    object). An optional parameter defaults to `msgspec.UNSET`. One with a default whose type
    does not admit null also accepts null, which stands for "not sent" (OpenAI strict mode
    sends null for a parameter the model leaves at its default); the names of those fields
    (as attributes of the Struct) are returned so that the decoder can turn that null into UNSET.
    """
    builder = _Builder(descriptor.definitions, _safe(name or descriptor.name) or "Args")
    loosened = frozenset(
        p.name for p in descriptor.parameters if not p.required and p.has_default and not is_nullable(p.type)
    )
    struct = builder.struct(descriptor.parameters, builder.base, closed=True, loosened=loosened)
    encoded = dict(zip(struct.__struct_encode_fields__, struct.__struct_fields__, strict=True))
    return struct, tuple(encoded[n] for n in struct.__struct_encode_fields__ if n in loosened)


class _Builder:
    def __init__(self, definitions: dict[str, TypeNode], base: str) -> None:
        self.definitions = definitions
        self.base = base
        self._expanding: list[str] = []  # recursive definitions being expanded on the current path

    def of(self, node: TypeNode, path: str) -> Any:
        if isinstance(node, String):
            return _constrained(str, _string_meta(node))
        if isinstance(node, Integer):
            return _constrained(int, _int_meta(node))
        if isinstance(node, Number):
            as_int, as_float = _constrained(int, _int_meta(node)), _constrained(float, _float_meta(node))
            number: Any = typing.Union[as_int, as_float]  # noqa: UP007 - runtime values; 3 stays 3, not 3.0
            return number
        if isinstance(node, Boolean):
            return bool
        if isinstance(node, Null):
            return None
        if isinstance(node, AnyValue):
            return Any
        if isinstance(node, Array):
            if node.prefix_items is not None:
                positions = tuple(self.of(t, f"{path}_{i}") for i, t in enumerate(node.prefix_items))
                return tuple[positions] if positions else tuple[()]  # type: ignore[valid-type]
            items = self.of(node.items, f"{path}_item")
            bounds = {"min_length": node.min_items, "max_length": node.max_items}
            return _constrained(list[items], {k: v for k, v in bounds.items() if v is not None})  # type: ignore[valid-type]
        if isinstance(node, Object):
            return self._object(node, path)
        if isinstance(node, Union):
            return self._union(node, path)
        if isinstance(node, Enum):
            return _literal(node.values)
        if isinstance(node, Ref):
            return self._ref(node, path)
        raise TypeError(f"not a type node: {node!r}")  # pragma: no cover - the node set is closed

    def struct(
        self,
        properties: tuple[ToolParameter, ...],
        name: str,
        *,
        closed: bool,
        loosened: frozenset[str] = frozenset(),
    ) -> type[msgspec.Struct]:
        fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
        rename: dict[str, str] = {}
        taken = {p.name for p in properties}
        for i, prop in enumerate(properties):
            attr = prop.name
            if not _usable(attr):
                attr = f"field_{i}"
                while attr in taken:
                    attr += "_"
                taken.add(attr)
                rename[attr] = prop.name
            tp = self.of(prop.type, f"{name}_{_safe(prop.name)}")
            if prop.required:
                fields.append((attr, tp))
            elif prop.name in loosened:
                fields.append((attr, typing.Optional[tp], msgspec.UNSET))  # noqa: UP045 - tp is a runtime value
            else:
                fields.append((attr, tp, msgspec.UNSET))
        return msgspec.defstruct(
            name, fields, kw_only=True, forbid_unknown_fields=closed, rename=rename or None
        )

    def _object(self, node: Object, path: str) -> Any:
        additional = node.additional
        if node.properties and not isinstance(additional, bool):
            # Named properties plus typed extra keys: msgspec has no such Struct. Every value must
            # be one of the named types or the extra type (which one, by key, the server checks).
            named = [self.of(p.type, f"{path}_{_safe(p.name)}") for p in node.properties]
            value = _decodable(list(dict.fromkeys([*named, self.of(additional, f"{path}_value")])))
            return dict[str, Any] if value is None else dict[str, value]  # type: ignore[valid-type]
        if node.properties or additional is False:
            name = _safe(node.name) if node.name else path
            return self.struct(node.properties, name or path, closed=additional is False)
        if additional is True:
            return dict[str, Any]
        return dict[str, self.of(additional, f"{path}_value")]  # type: ignore[misc]

    def _union(self, node: Union, path: str) -> Any:
        options = node.options
        types = [self.of(o, f"{path}_{i}") for i, o in enumerate(options)]
        found = _decodable(types)
        if found is not None:
            return found
        # msgspec tells union members apart by JSON kind: at most one object-like and one
        # array-like type. Several object (or array) shapes become one loose object (array).
        loose: list[Any] = []
        for option, tp in zip(options, types, strict=True):
            kind = self._kind(option)
            if kind == "object":
                tp = dict[str, Any]
            elif kind == "array":
                tp = list[Any]
            if tp not in loose:
                loose.append(tp)
        found = _decodable(loose)
        return Any if found is None else found

    def _ref(self, node: Ref, path: str) -> Any:
        target = self.definitions.get(node.name)
        if target is None:
            return Any
        if node.name in self._expanding:  # recursion: stop checking at the second level
            kind = self._kind(target)
            return dict[str, Any] if kind == "object" else list[Any] if kind == "array" else Any
        self._expanding.append(node.name)
        try:
            return self.of(target, f"{path}_{_safe(node.name)}")
        finally:
            self._expanding.pop()

    def _kind(self, node: TypeNode) -> str | None:
        if isinstance(node, Ref):
            target = self.definitions.get(node.name)
            return None if target is None or isinstance(target, Ref) else self._kind(target)
        if isinstance(node, Object):
            return "object"
        if isinstance(node, Array):
            return "array"
        return None


def _decodable(types: list[Any]) -> Any:
    """`Union[types]` if msgspec can decode it, else None."""
    if Any in types:
        return Any
    union: Any = typing.Union[tuple(types)]  # noqa: UP007 - built from runtime values
    try:
        msgspec.json.Decoder(union)
    except TypeError:
        return None
    return union


_INT64 = range(-(2**63), 2**63)  # msgspec's Literal takes no integer beyond int64


def _literal(values: tuple[Any, ...]) -> Any:
    if all(
        v is None or isinstance(v, str) or (isinstance(v, int) and v in _INT64) for v in values
    ):  # bool is an int
        return Literal[values]
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return typing.Union[int, float]  # noqa: UP007 - msgspec's Literal takes no floats
    return Any


def _constrained(tp: Any, meta: dict[str, Any]) -> Any:
    return Annotated[tp, msgspec.Meta(**meta)] if meta else tp


def _string_meta(node: String) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    if node.pattern is not None and _python_pattern(node.pattern):
        meta["pattern"] = node.pattern
    if node.min_length is not None:
        meta["min_length"] = node.min_length
    if node.max_length is not None:
        meta["max_length"] = node.max_length
    return meta


def _python_pattern(pattern: str) -> bool:
    """Whether Python's `re` reads `pattern` as JSON Schema's ECMA-262 dialect means it (near enough).

    A pattern it refuses or warns about (`[[:alpha:]]`, `\\p{L}`) is left to the server.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            re.compile(pattern)
        except (re.error, Warning):
            return False
    return True


def _int_meta(node: Integer | Number) -> dict[str, Any]:
    """Bounds for an int: a fractional bound becomes the nearest integer one that means the same."""
    meta: dict[str, Any] = {}
    if node.minimum is not None:
        meta["ge"] = math.ceil(node.minimum)
    if node.exclusive_minimum is not None:
        low = math.floor(node.exclusive_minimum) + 1
        meta["ge"] = max(meta.get("ge", low), low)
    if node.maximum is not None:
        meta["le"] = math.floor(node.maximum)
    if node.exclusive_maximum is not None:
        high = math.ceil(node.exclusive_maximum) - 1
        meta["le"] = min(meta.get("le", high), high)
    multiple = node.multiple_of
    if multiple is not None and float(multiple).is_integer() and multiple > 0:
        meta["multiple_of"] = int(multiple)
    return meta


def _float_meta(node: Integer | Number) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for attr, key in (
        ("minimum", "ge"),
        ("maximum", "le"),
        ("exclusive_minimum", "gt"),
        ("exclusive_maximum", "lt"),
    ):
        value = getattr(node, attr)
        if value is not None:
            meta[key] = float(value)
    multiple = node.multiple_of
    if multiple is not None and float(multiple).is_integer() and multiple > 0:
        meta["multiple_of"] = float(multiple)  # a fractional step is left to the server (float rounding)
    return meta


def _usable(name: str) -> bool:
    """Whether a JSON property name can be the Struct field's own name."""
    return name.isidentifier() and not keyword.iskeyword(name) and not name.startswith("_")


def _safe(name: str) -> str:
    return _UNSAFE.sub("_", name).strip("_")
