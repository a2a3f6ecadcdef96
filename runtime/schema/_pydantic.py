"""pydantic models, where the user's code already has them: their schema, their validation, our words.

A parameter, an args type or a result typed with a pydantic model (or a type made of them,
`list[Query]`, `Query | None`) is described by the model's own JSON Schema (`TypeAdapter(...)
.json_schema()`, parsed into the IR like any other schema) and validated by pydantic itself,
from the JSON text, as the model's own config says (its `extra`, `strict`, validators). A
refusal is reported as msgspec's are: the JSON path of the value and what was expected there
(`Expected `int`, got `str``, `required field is missing`, `unknown field`), so a model reads
the same kind of failure whichever library checked its call.

pydantic is never imported here until a type that is a pydantic model is met: a model class
can only exist once the user's code has imported pydantic.
"""

from __future__ import annotations

import functools
import sys
import typing
from typing import Any

from ..exceptions import InvalidArguments

__all__ = ["adapter", "invalid", "is_model", "json_schema", "mentions_model"]

_EXPECTED = {
    "int_type": "int",
    "int_parsing": "int",
    "int_from_float": "int",
    "float_type": "float",
    "float_parsing": "float",
    "string_type": "str",
    "bool_type": "bool",
    "bool_parsing": "bool",
    "list_type": "array",
    "tuple_type": "array",
    "set_type": "array",
    "dict_type": "object",
    "model_type": "object",
    "model_attributes_type": "object",
    "dataclass_type": "object",
    "none_required": "null",
}


def is_model(tp: Any) -> bool:
    """True for a pydantic model class (a `BaseModel` subclass), without importing pydantic."""
    if not isinstance(tp, type) or "pydantic" not in sys.modules:
        return False
    base = getattr(sys.modules.get("pydantic"), "BaseModel", None)
    return base is not None and issubclass(tp, base) and tp is not base


def mentions_model(tp: Any) -> bool:
    """True when `tp` is a pydantic model or is made of one (`list[Query]`, `Annotated[Query | None, ...]`).

    Asked for every parameter of every tool built, once pydantic is imported (the MCP SDK
    imports it): the answer is remembered per type.
    """
    if "pydantic" not in sys.modules:
        return False
    try:
        return _MENTIONS[tp]
    except KeyError:
        pass
    except TypeError:  # an unhashable annotation
        return _mentions(tp)
    found = _mentions(tp)
    if len(_MENTIONS) >= 4096:
        _MENTIONS.clear()
        _MENTIONS.update(_PLAIN)
    _MENTIONS[tp] = found
    return found


_PLAIN = dict.fromkeys(
    (str, int, float, bool, bytes, type(None), None, typing.Any, object, dict, list), False
)
_MENTIONS: dict[Any, bool] = dict(_PLAIN)


def _mentions(tp: Any) -> bool:
    if is_model(tp):
        return True
    if typing.get_origin(tp) is typing.Literal:
        return False
    return any(mentions_model(a) for a in typing.get_args(tp))


@functools.lru_cache(maxsize=1024)
def adapter(tp: Any) -> Any:
    """A cached `pydantic.TypeAdapter` for `tp`."""
    import pydantic  # the user's code has imported it: a model type exists

    return pydantic.TypeAdapter(tp)


def json_schema(tp: Any, *, mode: str = "validation") -> dict[str, Any]:
    """The JSON Schema pydantic gives values of `tp` (`mode="serialization"` for results)."""
    schema: dict[str, Any] = adapter(tp).json_schema(mode=mode)
    return schema


def invalid(exc: Any, path: str = "$") -> InvalidArguments:
    """A pydantic `ValidationError` as the runtime's InvalidArguments (its first error, under `path`)."""
    errors = exc.errors(include_url=False)
    if not errors:
        return InvalidArguments(str(exc), path)
    error = errors[0]
    where = path
    for part in error.get("loc", ()):
        where += f"[{part}]" if isinstance(part, int) else f".{part}"
    kind = error.get("type", "")
    if kind == "missing":
        return InvalidArguments("required field is missing", where)
    if kind == "extra_forbidden":
        return InvalidArguments("unknown field", where)
    expected = _EXPECTED.get(kind)
    if expected is not None:
        return InvalidArguments(f"Expected `{expected}`, got `{_json_kind(error.get('input'))}`", where)
    bound = _bound(kind, error.get("ctx") or {}, error.get("input"))
    if bound is not None:
        return InvalidArguments(bound, where)
    return InvalidArguments(str(error.get("msg") or kind), where)


_BOUNDS = {
    "greater_than": ("gt", ">"),
    "greater_than_equal": ("ge", ">="),
    "less_than": ("lt", "<"),
    "less_than_equal": ("le", "<="),
}
_LENGTHS = {
    "string_too_short": ("str", "min_length", ">="),
    "string_too_long": ("str", "max_length", "<="),
    "too_short": ("array", "min_length", ">="),
    "too_long": ("array", "max_length", "<="),
}


def _bound(kind: str, ctx: dict[str, Any], value: Any) -> str | None:
    """A constraint error in msgspec's words (`Expected `int` >= 1`), or None."""
    if kind in _BOUNDS:
        key, sign = _BOUNDS[kind]
        return f"Expected `{_json_kind(value)}` {sign} {ctx.get(key)}"
    if kind in _LENGTHS:
        what, key, sign = _LENGTHS[kind]
        if what == "array" and isinstance(value, dict):
            what = "object"
        return f"Expected `{what}` of length {sign} {ctx.get(key)}"
    if kind == "multiple_of":
        return f"Expected `{_json_kind(value)}` that's a multiple of {ctx.get('multiple_of')}"
    if kind == "string_pattern_mismatch":
        return f"Expected `str` matching regex {ctx.get('pattern')!r}"
    return None


def _json_kind(value: Any) -> str:
    """The kind msgspec names in its errors for a JSON value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list | tuple):
        return "array"
    return "object"
