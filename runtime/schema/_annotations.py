"""`Annotated` metadata from other libraries -> `msgspec.Meta`, so the decoder enforces what the schema says.

A parameter may carry its description and constraints in the forms langchain, fastmcp and
pydantic accept: a plain string (`Annotated[int, "the count"]`), `typing_extensions.Doc`,
`annotated_types` constraints (`Gt`, `Ge`, `Lt`, `Le`, `MultipleOf`, `MinLen`, `MaxLen`,
`Len`, `Interval`) and `pydantic.Field(...)`. msgspec ignores all of them, so `normalize`
rewrites each into one `msgspec.Meta` before the argument Struct is made: the same type
then renders the schema and checks the call. What cannot be enforced is refused at
definition with a ToolDefinitionError naming it; nothing is dropped quietly. pydantic is
never imported here: a `pydantic.Field` can only exist once the user has imported it.
"""

from __future__ import annotations

import types
import typing
from typing import Any

import msgspec

from ..exceptions import ToolDefinitionError

__all__ = ["Collected", "collect", "field_default", "normalize"]

# annotated_types class name -> msgspec.Meta keyword
_CONSTRAINTS = {
    "Gt": ("gt",),
    "Ge": ("ge",),
    "Lt": ("lt",),
    "Le": ("le",),
    "MultipleOf": ("multiple_of",),
    "MinLen": ("min_length",),
    "MaxLen": ("max_length",),
}
# pydantic's general metadata keys msgspec can enforce
_PYDANTIC_KEYS = frozenset({"pattern"})
# pydantic.Field attributes that only annotate (shown nowhere, enforced nowhere)
_UNION_ORIGINS = (typing.Union, types.UnionType)


class Collected:
    """What the metadata of one `Annotated` says, sorted by who can enforce it."""

    __slots__ = ("constraints", "description", "foreign")

    def __init__(self) -> None:
        self.description: str | None = None
        self.constraints: dict[str, Any] = {}  # msgspec.Meta keywords
        self.foreign = False  # some came from outside msgspec (msgspec alone would not enforce them)


def collect(metas: typing.Iterable[Any], where: str) -> Collected:
    """Read descriptions and constraints from `Annotated` metadata, in order (the last word wins).

    Raises:
        ToolDefinitionError: a constraint that msgspec cannot enforce (a predicate, a
            timezone, a pydantic option other than the bounds, lengths and pattern).
    """
    found = Collected()
    for meta in metas:
        _read(meta, found, where)
    return found


def _read(meta: Any, found: Collected, where: str) -> None:
    if isinstance(meta, msgspec.Meta):
        for key in ("gt", "ge", "lt", "le", "multiple_of", "min_length", "max_length", "pattern"):
            value = getattr(meta, key)
            if value is not None:
                found.constraints[key] = value
        if meta.description is not None:
            found.description = meta.description
        return
    if isinstance(meta, str):
        found.description = meta
        return
    cls = type(meta)
    module = cls.__module__
    if module == "annotated_types":
        _annotated_types(meta, found, where)
    elif module.startswith("pydantic"):
        _pydantic(meta, found, where)
    elif cls.__name__ in ("Doc", "DocInfo") and isinstance(getattr(meta, "documentation", None), str):
        found.description = meta.documentation  # typing_extensions.Doc
    # Anything else is someone else's metadata (a CLI option, a dependency marker): not ours.


def _annotated_types(meta: Any, found: Collected, where: str) -> None:
    name = type(meta).__name__
    keys = _CONSTRAINTS.get(name)
    if keys is not None:
        found.constraints[keys[0]] = getattr(meta, keys[0])
        found.foreign = True
    elif name in ("Len", "Interval"):  # grouped: each part is one of the above
        for part in meta:
            _annotated_types(part, found, where)
    elif name == "DocInfo":
        found.description = meta.documentation
    else:
        raise ToolDefinitionError(
            f"{where}: the constraint {meta!r} cannot be checked when the arguments are decoded; "
            "use bounds, lengths or a pattern (annotated_types Gt/Ge/Lt/Le/MultipleOf/MinLen/MaxLen "
            "or msgspec.Meta), or check it in the tool and raise ToolRejected"
        )


def _pydantic(meta: Any, found: Collected, where: str) -> None:
    if type(meta).__name__ == "FieldInfo":
        default = getattr(meta, "default", None)
        if default is not Ellipsis and type(default).__name__ != "PydanticUndefinedType":
            raise ToolDefinitionError(
                f"{where}: pydantic.Field(default=...) inside Annotated is not read; "
                "give the default in the signature (`x: Annotated[int, Field(...)] = 3`)"
            )
        if default_factory := getattr(meta, "default_factory", None):
            raise ToolDefinitionError(
                f"{where}: pydantic.Field(default_factory={default_factory!r}) inside Annotated "
                "is not read; give the default in the signature"
            )
        alias = getattr(meta, "alias", None)
        if alias is not None:
            raise ToolDefinitionError(
                f"{where}: pydantic.Field(alias={alias!r}) is not supported; name the parameter "
                "as the model should send it"
            )
        for part in getattr(meta, "metadata", ()):
            _read(part, found, where)
        if meta.description is not None:
            found.description = meta.description
        return
    # pydantic's own constraint objects (`_PydanticGeneralMetadata(pattern=...)`, `Strict()`...)
    settings = {k: v for k, v in vars(meta).items() if v is not None}
    unknown = set(settings) - _PYDANTIC_KEYS
    if unknown:
        raise ToolDefinitionError(
            f"{where}: the pydantic option(s) {', '.join(sorted(unknown))} cannot be checked when the "
            "arguments are decoded; use bounds, lengths or a pattern"
        )
    for key, value in settings.items():
        found.constraints[key] = value
        found.foreign = True


def field_default(default: Any, where: str) -> tuple[Any, Any, tuple[Any, ...]] | None:
    """A `pydantic.Field(...)` given as a parameter's default (`x: int = Field(..., gt=10)`, as
    openai-agents and FastAPI read it): (the real default or `msgspec.NODEFAULT`, its
    default_factory or None, the constraints and description as `Annotated` metadata).

    None for any other default. The metadata goes through `normalize`, so the decoder
    enforces the constraints the schema shows.

    Raises:
        ToolDefinitionError: the Field says what a tool parameter cannot do (an alias).
    """
    if type(default).__name__ != "FieldInfo" or not type(default).__module__.startswith("pydantic"):
        return None
    alias = getattr(default, "alias", None)
    if alias is not None:
        raise ToolDefinitionError(
            f"{where}: pydantic.Field(alias={alias!r}) is not supported; name the parameter "
            "as the model should send it"
        )
    value = getattr(default, "default", None)
    if value is Ellipsis or type(value).__name__ == "PydanticUndefinedType":
        value = msgspec.NODEFAULT
    factory = getattr(default, "default_factory", None)
    metas: list[Any] = list(getattr(default, "metadata", ()))
    if default.description is not None:
        metas.append(msgspec.Meta(description=default.description))
    return (msgspec.NODEFAULT if factory is not None else value), factory, tuple(metas)


def normalize(tp: Any, where: str) -> Any:
    """`tp` with every `Annotated` rewritten into one `msgspec.Meta` (and `tp` itself when nothing changes).

    Descends into unions, lists, dicts and tuples; classes (Structs, dataclasses) are left
    as they are and checked where their fields are described.

    Raises:
        ToolDefinitionError: a constraint that cannot be enforced (see `collect`).
    """
    origin = typing.get_origin(tp)
    if origin is None or origin is typing.Literal:
        return tp
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        base, *metas = args
        new_base = normalize(base, where)
        if all(isinstance(m, msgspec.Meta) for m in metas) and new_base is base:
            return tp
        found = collect(metas, where)
        kept = [m for m in metas if isinstance(m, msgspec.Meta) and _has_extras(m)]
        meta: dict[str, Any] = dict(found.constraints)
        if found.description is not None:
            meta["description"] = found.description
        if meta:
            kept.append(msgspec.Meta(**meta))
        return typing.Annotated[(new_base, *kept)] if kept else new_base
    new_args = tuple(normalize(a, where) if a is not Ellipsis else a for a in args)
    if all(a is b for a, b in zip(new_args, args, strict=True)):
        return tp
    if origin in _UNION_ORIGINS:
        return typing.Union[new_args]  # noqa: UP007 - built from runtime values
    if isinstance(tp, types.GenericAlias):
        return types.GenericAlias(origin, new_args)
    copy_with = getattr(tp, "copy_with", None)
    if copy_with is None:  # pragma: no cover - every generic alias in typing has it
        return tp
    return copy_with(new_args)


def _has_extras(meta: msgspec.Meta) -> bool:
    """True for a Meta that says more than a description and the constraints `collect` reads."""
    return any(
        getattr(meta, key) is not None for key in ("tz", "title", "examples", "extra_json_schema", "extra")
    )
