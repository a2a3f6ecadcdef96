"""Python types -> IR, from the types themselves and msgspec's type information.

msgspec decides what a type means on the wire (which classes are objects, their JSON field
names, which fields are required, their defaults, tags); `msgspec.inspect` says so and is
read here. What it normalises away is taken from the annotation itself: the declaration
order of `Literal` and `Enum` members (msgspec sorts them), descriptions and constraints in
`Annotated` metadata from other libraries (see `_annotations`), and attribute docstrings.
Nothing is rendered to JSON Schema and parsed back.

| Python | IR |
|---|---|
| str, int, float, bool, None, Any | String, Integer, Number, Boolean, Null, AnyValue |
| bytes, bytearray, memoryview | String(content_encoding="base64") |
| datetime, date, time, timedelta, UUID, Decimal | String(format="date-time" / "date" / "time" / "duration" / "uuid" / "decimal") |
| Literal[...], Enum | Enum, members in declaration order |
| list, set, frozenset, tuple[T, ...] | Array (unique items for sets) |
| tuple[A, B], NamedTuple | Array with `prefix_items` |
| dict[str, V], Mapping | Object(additional=V) |
| Struct, dataclass, TypedDict (attrs too) | Object named after the class; a recursive one a Ref + definition |
| X | Y, Optional[X] | Union |
| Annotated[T, ...] | T with its description and constraints |
"""

from __future__ import annotations

import collections.abc as cabc
import dataclasses
import datetime
import decimal
import enum
import types
import typing
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from ..exceptions import SchemaError, ToolDefinitionError
from ._annotations import collect
from ._docstring import attribute_docs, parse_docstring
from ._from_jsonschema import parse_json_schema, union_of
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
from ._pydantic import is_model, json_schema

__all__ = ["descriptor_from_fields", "descriptor_from_type", "output_type", "shown_default", "type_node"]

_LEAVES: dict[Any, TypeNode] = {
    str: String(),
    int: Integer(),
    float: Number(),
    bool: Boolean(),
    type(None): Null(),
    None: Null(),
    Any: AnyValue(),
    object: AnyValue(),
    bytes: String(content_encoding="base64"),
    bytearray: String(content_encoding="base64"),
    memoryview: String(content_encoding="base64"),
    datetime.datetime: String(format="date-time"),
    datetime.date: String(format="date"),
    datetime.time: String(format="time"),
    datetime.timedelta: String(format="duration"),
    uuid.UUID: String(format="uuid"),
    decimal.Decimal: String(format="decimal"),
    msgspec.Raw: AnyValue(),
}
_ARRAYS: dict[Any, bool] = {
    list: False,
    tuple: False,
    set: True,
    frozenset: True,
    cabc.Sequence: False,
    cabc.MutableSequence: False,
    cabc.Collection: False,
    cabc.Set: True,
    cabc.MutableSet: True,
}
_MAPS = frozenset({dict, cabc.Mapping, cabc.MutableMapping})
_NO_OUTPUT: tuple[Any, ...] = (None, type(None), str, Any)
_UNIONS = (typing.Union, types.UnionType)
_QUALIFIERS = (typing.NotRequired, typing.Required, typing.Final, typing.ClassVar)

Field = tuple[str, Any, Any]
"""(JSON name, Python type, default): `msgspec.NODEFAULT` for a required field, `msgspec.UNSET`
for one that may be left out without a known default (a TypedDict `NotRequired` key)."""


def descriptor_from_fields(
    fields: Sequence[Field],
    *,
    name: str,
    description: str,
    param_descriptions: Mapping[str, str] | None = None,
    output: Any = None,
) -> ToolDescriptor:
    """The descriptor of a tool whose parameters are `fields` (see `Field`).

    A parameter's description is its own (`Annotated` metadata), else the docstring's
    (`param_descriptions`); the docstring of the parameter's type stays on the type.
    `output` is the tool's result type; its IR becomes `ToolDescriptor.output` unless it
    says nothing structured (None, str, Any).

    Raises:
        ToolDefinitionError: a type that cannot be described, or a constraint in a class's
            field that the decoder would not enforce.
    """
    builder = _Builder(f"tool {name!r}")
    docs = param_descriptions or {}
    params = tuple(builder.parameter(f, docs, f"tool {name!r}: parameter {f[0]!r}") for f in fields)
    out = _output(builder, output, name)
    return ToolDescriptor(
        name=name,
        description=description,
        parameters=params,
        definitions=builder.definitions,
        output=out,
    )


def descriptor_from_type(
    args_type: type,
    *,
    name: str,
    description: str,
    param_descriptions: Mapping[str, str] | None = None,
    **extra: Any,
) -> ToolDescriptor:
    """Describe a tool whose arguments are `args_type` (a Struct, dataclass or TypedDict).

    Field descriptions come from the field's `Annotated` metadata, its attribute
    docstring, the class docstring's Attributes section, then `param_descriptions`.

    Raises:
        ToolDefinitionError: `args_type` is not an object type, or cannot be described.
    """
    builder = _Builder(f"tool {name!r}")
    node = builder.node(args_type, f"tool {name!r}")
    if isinstance(node, Ref):
        node = builder.definitions[node.name]
    if not isinstance(node, Object):
        raise ToolDefinitionError(f"tool {name!r}: its arguments must be an object, not {args_type!r}")
    params = node.properties
    if param_descriptions:
        params = tuple(
            p
            if p.description or p.name not in param_descriptions
            else msgspec.structs.replace(p, description=param_descriptions[p.name])
            for p in params
        )
    out = _output(builder, extra.pop("output", None), name)
    return ToolDescriptor(
        name=name,
        description=description,
        parameters=params,
        definitions=builder.definitions,
        additional=node.additional,
        output=out,
        **extra,
    )


def _output(builder: _Builder, output: Any, name: str) -> TypeNode | None:
    """The IR of a tool's result type, or None when it says nothing structured or has no JSON form."""
    if output_type(output) is None:
        return None
    builder.mode = "serialization"  # a pydantic result is described as it is written
    try:
        return builder.node(output, f"tool {name!r}: its result")
    except ToolDefinitionError:
        return None  # no structured output: its text is what goes back
    finally:
        builder.mode = "validation"


def type_node(tp: Any) -> tuple[TypeNode, dict[str, TypeNode]] | None:
    """The IR of a Python type (a tool's result type) and its definitions, or None if it has none."""
    builder = _Builder("type")
    builder.mode = "serialization"
    try:
        return builder.node(tp, "type"), builder.definitions
    except (ToolDefinitionError, SchemaError, TypeError, ValueError):
        return None


def output_type(result_type: Any) -> Any:
    """`result_type` if a result of it has a structured form (not None, str or Any), else None."""
    try:
        if result_type in _NO_OUTPUT:
            return None
    except TypeError:  # an unhashable, uncomparable annotation
        pass
    return result_type


class _Builder:
    """Builds the nodes of one descriptor; classes met twice on one path become definitions."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.definitions: dict[str, TypeNode] = {}
        self._path: list[Any] = []
        self._recursive: set[Any] = set()
        self._done: dict[Any, TypeNode] = {}
        self._names: dict[Any, str] = {}
        self.mode = "validation"  # how a pydantic model is described: as it is read (or written)

    # -- parameters --------------------------------------------------------------------

    def parameter(self, field: Field, docs: Mapping[str, str], where: str) -> ToolParameter:
        name, tp, default = field
        node = self.node(tp, where)
        required = default is msgspec.NODEFAULT
        if required:
            shown = msgspec.UNSET
        elif type(default) in _JSON_SCALARS:
            shown = default
        else:
            shown = shown_default(default)
        return ToolParameter(
            name=name,
            description=_own_description(tp, node) or docs.get(name) or None,
            type=node,
            required=required,
            default=shown,
            header=_header(tp),
        )

    # -- types -------------------------------------------------------------------------

    def node(self, tp: Any, where: str) -> TypeNode:
        try:
            leaf = _LEAVES.get(tp)
        except TypeError:  # an unhashable annotation
            leaf = None
        if leaf is not None:
            return leaf
        origin = typing.get_origin(tp)
        if origin is None:
            return self._plain(tp, where)
        args = typing.get_args(tp)
        if origin is typing.Annotated:
            return self._annotated(args[0], args[1:], where)
        if origin in _QUALIFIERS or getattr(origin, "_name", None) == "ReadOnly":
            return self.node(args[0], where)  # a TypedDict key's NotRequired[T] is a T
        if origin in _UNIONS:
            return union_of(tuple(self.node(a, where) for a in args))
        if origin is typing.Literal:
            return Enum(values=tuple(_literal_values(args, where)))
        if origin in _ARRAYS:
            if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
                return self._tuple(tuple(self.node(a, where) for a in args))
            items = self.node(args[0], where) if args else AnyValue()
            return Array(items=items, unique_items=_ARRAYS[origin])
        if origin in _MAPS:
            if not args:
                return Object(additional=True)
            value = self.node(args[1], where)
            return Object(additional=True if isinstance(value, AnyValue) else value)
        if isinstance(origin, type) and _is_class_type(origin):
            return self._class(tp, where)  # a generic Struct or dataclass: Box[int]
        return self._msgspec(tp, where)

    def _plain(self, tp: Any, where: str) -> TypeNode:
        if tp in _ARRAYS:
            return Array(items=AnyValue(), unique_items=_ARRAYS[tp])
        if tp in _MAPS:
            return Object(additional=True)
        if isinstance(tp, type):
            if issubclass(tp, enum.Enum):
                return self._enum(tp, where)
            if _is_class_type(tp):
                return self._class(tp, where)
            if is_model(tp):
                return self._pydantic(tp, where)
        supertype = getattr(tp, "__supertype__", None)  # typing.NewType
        if supertype is not None:
            return self.node(supertype, where)
        value = getattr(tp, "__value__", None)  # a `type X = ...` alias
        if value is not None and type(tp).__name__ == "TypeAliasType":
            return self.node(value, where)
        return self._msgspec(tp, where)

    def _annotated(self, base: Any, metas: tuple[Any, ...], where: str) -> TypeNode:
        node = self.node(base, where)
        found = collect(metas, where)
        if found.foreign and self._path:
            raise ToolDefinitionError(
                f"{where}: constraints from annotated_types or pydantic on a field of "
                f"{self._path[-1].__name__} are not enforced by msgspec when it decodes the class; "
                "use msgspec.Meta(...) there"
            )
        for meta in metas:
            if isinstance(meta, msgspec.Meta) and meta.extra_json_schema:
                fmt = meta.extra_json_schema.get("format")
                if isinstance(fmt, str) and isinstance(node, String):
                    node = msgspec.structs.replace(node, format=fmt)
        if found.constraints:
            node = _constrain(node, found.constraints, where)
        if found.description is not None:
            node = msgspec.structs.replace(node, description=found.description)
        return node

    def _pydantic(self, tp: type, where: str) -> TypeNode:
        """A pydantic model: the IR of the JSON Schema pydantic gives it (pydantic validates it too)."""
        try:
            node, definitions = parse_json_schema(json_schema(tp, mode=self.mode))
        except Exception as exc:
            raise ToolDefinitionError(
                f"{where}: the JSON Schema pydantic makes for {tp.__name__} cannot be read ({exc})"
            ) from exc
        for name, definition in definitions.items():
            known = self.definitions.setdefault(name, definition)
            if known != definition:
                raise ToolDefinitionError(
                    f"{where}: two recursive types are both called {name!r}; rename one of them"
                )
        return node

    def _tuple(self, positions: tuple[TypeNode, ...]) -> Array:
        items = union_of(positions) if positions else AnyValue()
        n = len(positions)
        return Array(items=items, prefix_items=positions, min_items=n, max_items=n)

    def _enum(self, cls: type[enum.Enum], where: str) -> TypeNode:
        values = tuple(m.value for m in cls)
        for v in values:
            if not (v is None or isinstance(v, str | int)):
                raise ToolDefinitionError(
                    f"{where}: enum {cls.__name__} has a member of type {type(v).__name__}; "
                    "enum values must be str or int"
                )
        return Enum(values=values, description=_class_doc(cls))

    def _msgspec(self, tp: Any, where: str) -> TypeNode:
        """A type this module does not know by name: read what msgspec makes of it."""
        try:
            info = msgspec.inspect.type_info(tp)
        except (TypeError, ValueError) as exc:
            raise ToolDefinitionError(
                f"{where}: {tp!r} cannot be described as JSON ({exc}); use types msgspec supports "
                "(str, int, float, bool, list, dict, Literal, Enum, Struct, dataclass, TypedDict...)"
            ) from exc
        return _from_info(info, where)

    # -- classes -----------------------------------------------------------------------

    def _class(self, tp: Any, where: str) -> TypeNode:
        done = self._done.get(tp)
        if done is not None:
            return done
        name = self._name(tp)
        if tp in self._path:
            self._recursive.add(tp)
            return Ref(name=name)
        self._path.append(tp)
        try:
            node = self._object(tp, where)
        finally:
            self._path.pop()
        if tp in self._recursive:
            self.definitions[name] = node
            node = Ref(name=name)
        self._done[tp] = node
        return node

    def _name(self, tp: Any) -> str:
        name = self._names.get(tp)
        if name is None:
            cls = typing.get_origin(tp) or tp
            base = getattr(cls, "__name__", "Type")
            name, n = base, 2
            taken = set(self._names.values())
            while name in taken:
                name, n = f"{base}{n}", n + 1
            self._names[tp] = name
        return name

    def _object(self, tp: Any, where: str) -> TypeNode:
        cls = typing.get_origin(tp) or tp
        info: Any
        try:
            if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
                info, hints = _struct_info(tp)  # one pass over its annotations, not two
            else:
                info = msgspec.inspect.type_info(tp)
                hints = typing.get_type_hints(cls, include_extras=True)
        except Exception as exc:
            raise ToolDefinitionError(
                f"{where}: {getattr(cls, '__name__', tp)!r} cannot be described ({exc}); define the "
                "types it names at module level"
            ) from exc
        if isinstance(info, msgspec.inspect.Metadata):
            info = info.type
        params = _type_params(tp)
        doc = parse_docstring(cls.__doc__) if own_doc(cls) else None
        attr_docs = attribute_docs(cls)
        fields = getattr(info, "fields", None)
        if fields is None:
            return _from_info(info, where)
        properties: list[ToolParameter] = []
        tag_field = getattr(info, "tag_field", None)
        if tag_field is not None:
            properties.append(ToolParameter(name=tag_field, type=Enum(values=(getattr(info, "tag", None),))))
        for f in fields:
            hint = hints.get(f.name, Any)
            if params:
                hint = _substitute(hint, params)
            field_where = f"{where}: field {f.name!r} of {cls.__name__}"
            node = self.node(hint, field_where)
            text = (
                _own_description(hint, node)
                or attr_docs.get(f.name)
                or (doc.params.get(f.name) if doc is not None else None)
            )
            default: Any = msgspec.UNSET
            if not f.required:
                default = shown_default(f.default, f.default_factory)
            properties.append(
                ToolParameter(
                    name=f.encode_name,
                    description=text or None,
                    type=node,
                    required=f.required,
                    default=default,
                    header=_header(hint),
                )
            )
        description = doc.description or None if doc is not None else None
        if isinstance(info, msgspec.inspect.NamedTupleType) or getattr(info, "array_like", False):
            positions = tuple(p.type for p in properties)
            array = self._tuple(positions)
            required = sum(1 for p in properties if p.required)
            return msgspec.structs.replace(array, min_items=required, description=description)
        closed = bool(getattr(info, "forbid_unknown_fields", False))
        return Object(
            properties=tuple(properties),
            additional=not closed,
            name=cls.__name__,
            description=description,
        )


class _StructField(typing.NamedTuple):
    name: str
    encode_name: str
    required: bool
    default: Any
    default_factory: Any


class _StructInfo(typing.NamedTuple):
    """What `_object` reads of `msgspec.inspect.type_info` for a Struct class."""

    fields: list[_StructField]
    tag_field: str | None
    tag: Any
    array_like: bool
    forbid_unknown_fields: bool


def _struct_info(cls: type[msgspec.Struct]) -> tuple[_StructInfo, dict[str, Any]]:
    """A Struct class's fields and config, and its fields' annotations, from one reading of them.

    `msgspec.inspect.type_info` and `typing.get_type_hints` would each evaluate every string
    annotation of the class again (under `from __future__ import annotations`, most of a
    class's share of a tool's build); `msgspec.structs.fields` gives both at once.
    """
    config = cls.__struct_config__
    infos = msgspec.structs.fields(cls)
    fields = [
        _StructField(
            f.name,
            f.encode_name,
            f.default is msgspec.NODEFAULT and f.default_factory is msgspec.NODEFAULT,
            f.default,
            f.default_factory,
        )
        for f in infos
    ]
    info = _StructInfo(fields, config.tag_field, config.tag, config.array_like, config.forbid_unknown_fields)
    return info, {f.name: f.type for f in infos}


def shown_default(default: Any, factory: Any = msgspec.NODEFAULT) -> Any:
    """A field's default as JSON (a factory's value, made once here), or UNSET when it has none that JSON can show."""
    if type(default) in _JSON_SCALARS:
        return default
    try:
        if default is msgspec.NODEFAULT or default is msgspec.UNSET:
            if factory is msgspec.NODEFAULT or factory is None:
                return msgspec.UNSET
            default = factory()  # `list`, `dict`, a lambda: what an omitted field gets
        return msgspec.to_builtins(default, enc_hook=_model_dump)
    except Exception:  # a factory that fails or a value with no JSON form: not shown
        return msgspec.UNSET


_JSON_SCALARS = frozenset({int, float, str, bool, type(None)})


def _model_dump(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)  # a pydantic model as a default
    if callable(dump):
        return dump(mode="json")
    raise TypeError(f"{type(value).__name__} has no JSON form")


def _header(tp: Any) -> str | None:
    """SEP-2243: the `x-mcp-header` an `Annotated[T, msgspec.Meta(extra_json_schema=...)]` names."""
    if typing.get_origin(tp) is not typing.Annotated:
        return None
    for meta in typing.get_args(tp)[1:]:
        if isinstance(meta, msgspec.Meta) and meta.extra_json_schema:
            header = meta.extra_json_schema.get("x-mcp-header")
            if isinstance(header, str):
                return header
    return None


def _is_class_type(tp: type) -> bool:
    return (
        (isinstance(tp, type) and issubclass(tp, msgspec.Struct))
        or dataclasses.is_dataclass(tp)
        or typing.is_typeddict(tp)
        or (isinstance(tp, type) and issubclass(tp, tuple) and hasattr(tp, "_fields"))
        or hasattr(tp, "__attrs_attrs__")
    )


def _type_params(tp: Any) -> dict[Any, Any]:
    origin = typing.get_origin(tp)
    if origin is None:
        return {}
    names = getattr(origin, "__parameters__", ())
    return dict(zip(names, typing.get_args(tp), strict=False))


def _substitute(hint: Any, params: dict[Any, Any]) -> Any:
    if hint in params:
        return params[hint]
    args = typing.get_args(hint)
    if not args or typing.get_origin(hint) is typing.Literal:
        return hint
    try:
        return hint[tuple(params.get(a, a) for a in getattr(hint, "__parameters__", ()))]
    except TypeError:
        return hint


def own_doc(cls: Any) -> bool:
    """Whether `cls.__doc__` was written by a person (not a dataclass's generated signature)."""
    if not isinstance(cls, type):
        return False
    doc = cls.__dict__.get("__doc__")
    if not doc:
        return False
    return not (dataclasses.is_dataclass(cls) and doc.startswith(f"{cls.__name__}("))


def _class_doc(cls: type) -> str | None:
    return (parse_docstring(cls.__doc__).description or None) if own_doc(cls) else None


def _own_description(tp: Any, node: TypeNode) -> str | None:
    """The description an annotation gives its value (`Annotated[T, "..."]`, also inside `| None`).

    `node` is the IR of `tp`; it holds that description already unless it is the type's own
    (a class docstring), which is not the parameter's.
    """
    if type(tp) is type or (not node.description and not isinstance(node, Union)):
        return None  # a plain class, or nothing said
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        inner = typing.get_args(tp)[0]
        if type(inner) is type and not _is_class_type(inner) and not issubclass(inner, enum.Enum):
            return node.description  # `Annotated[int, ...]`: a plain type has no words of its own
        found = collect(typing.get_args(tp)[1:], "")
        return found.description or _own_description(inner, node)
    if origin in _UNIONS:
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(options) == 1:
            inner_node = node
            if isinstance(node, Union):
                rest = [o for o in node.options if not isinstance(o, Null)]
                inner_node = rest[0] if len(rest) == 1 else node
            return _own_description(options[0], inner_node)
    return None


def _literal_values(args: tuple[Any, ...], where: str) -> list[Any]:
    values: list[Any] = []
    for a in args:
        if typing.get_origin(a) is typing.Literal:
            values.extend(v for v in _literal_values(typing.get_args(a), where) if v not in values)
        elif isinstance(a, enum.Enum):
            values.append(a.value)
        elif a is None or isinstance(a, str | int):
            if a not in values:
                values.append(a)
        else:
            raise ToolDefinitionError(f"{where}: Literal values must be str, int, bool or None, not {a!r}")
    return values


def _constrain(node: TypeNode, c: dict[str, Any], where: str) -> TypeNode:
    if isinstance(node, Union):  # `Annotated[int | None, Gt(0)]`: the bound is on the int
        return msgspec.structs.replace(
            node, options=tuple(o if isinstance(o, Null) else _constrain(o, c, where) for o in node.options)
        )
    if isinstance(node, Integer | Number) and c.keys() <= {"ge", "gt", "le", "lt", "multiple_of"}:
        return msgspec.structs.replace(
            node,
            minimum=c.get("ge", node.minimum),
            maximum=c.get("le", node.maximum),
            exclusive_minimum=c.get("gt", node.exclusive_minimum),
            exclusive_maximum=c.get("lt", node.exclusive_maximum),
            multiple_of=c.get("multiple_of", node.multiple_of),
        )
    if isinstance(node, String) and c.keys() <= {"min_length", "max_length", "pattern"}:
        return msgspec.structs.replace(
            node,
            min_length=c.get("min_length", node.min_length),
            max_length=c.get("max_length", node.max_length),
            pattern=c.get("pattern", node.pattern),
        )
    if isinstance(node, Array) and c.keys() <= {"min_length", "max_length"}:
        return msgspec.structs.replace(
            node, min_items=c.get("min_length", node.min_items), max_items=c.get("max_length", node.max_items)
        )
    if isinstance(node, Object) and c.keys() <= {"min_length", "max_length"}:
        return node  # msgspec checks a map's size; the IR has no keyword for it
    raise ToolDefinitionError(
        f"{where}: the constraint(s) {', '.join(sorted(c))} do not apply to {type(node).__name__.lower()}"
    )


def _from_info(info: Any, where: str) -> TypeNode:
    """IR from msgspec's own type information (types this module does not walk itself)."""
    mi = msgspec.inspect
    if isinstance(info, mi.Metadata):
        node = _from_info(info.type, where)
        extra = info.extra_json_schema or {}
        if isinstance(extra.get("description"), str):
            node = msgspec.structs.replace(node, description=extra["description"])
        return node
    if isinstance(info, mi.StrType):
        return String(min_length=info.min_length, max_length=info.max_length, pattern=info.pattern)
    if isinstance(info, mi.IntType | mi.FloatType):
        cls = Integer if isinstance(info, mi.IntType) else Number
        return cls(
            minimum=info.ge,
            maximum=info.le,
            exclusive_minimum=info.gt,
            exclusive_maximum=info.lt,
            multiple_of=info.multiple_of,
        )
    if isinstance(info, mi.BoolType):
        return Boolean()
    if isinstance(info, mi.NoneType):
        return Null()
    if isinstance(info, mi.AnyType | mi.RawType):
        return AnyValue()
    if isinstance(info, mi.BytesType | mi.ByteArrayType | mi.MemoryViewType):
        return String(content_encoding="base64", min_length=None, max_length=None)
    for kind, fmt in (
        (mi.DateTimeType, "date-time"),
        (mi.DateType, "date"),
        (mi.TimeType, "time"),
        (mi.TimeDeltaType, "duration"),
        (mi.UUIDType, "uuid"),
        (mi.DecimalType, "decimal"),
    ):
        if isinstance(info, kind):
            return String(format=fmt)
    if isinstance(info, mi.LiteralType):
        return Enum(values=tuple(info.values))
    if isinstance(info, mi.EnumType):
        return Enum(values=tuple(m.value for m in info.cls))
    if isinstance(info, mi.UnionType):
        return union_of(tuple(_from_info(t, where) for t in info.types))
    if isinstance(info, mi.ListType | mi.VarTupleType | mi.SetType | mi.FrozenSetType):
        return Array(
            items=_from_info(info.item_type, where),
            min_items=info.min_length,
            max_items=info.max_length,
            unique_items=isinstance(info, mi.SetType | mi.FrozenSetType),
        )
    if isinstance(info, mi.TupleType):
        positions = tuple(_from_info(t, where) for t in info.item_types)
        n = len(positions)
        return Array(
            items=union_of(positions) if positions else AnyValue(),
            prefix_items=positions,
            min_items=n,
            max_items=n,
        )
    if isinstance(info, mi.DictType):
        value = _from_info(info.value_type, where)
        return Object(additional=True if isinstance(value, AnyValue) else value)
    raise ToolDefinitionError(f"{where}: {info!r} cannot be described as JSON")
