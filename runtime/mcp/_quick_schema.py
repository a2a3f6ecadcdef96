"""A fast yes for the arguments most MCP tools take; anything else goes to the JSON Schema validator.

A server's input schema is checked on every call (`_schema_tool.decode_checked`), and the
`jsonschema` validator walks it keyword by keyword through several layers of calls: most of
what a call through the runtime costs over the SDK's own client. Most schemas are a flat object
of typed properties, so `quick_check` compiles such a schema once into plain Python tests.

It only ever says yes. Its tests are the 2020-12 meaning of the keywords it knows (`type`,
`properties`, `required`, `additionalProperties`, `items`, string `enum` / `const`, the numeric
and length bounds, `pattern`) and of the annotations it may pass over; a schema with any other
keyword (`$ref`, `anyOf`, `format` assertions...) or another draft's meaning gets no quick check.
An instance it does not accept goes to the validator, which decides and says why.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["quick_check"]

Check = Callable[[Any], bool]

# Annotations (no assertion in 2020-12; `format` only annotates unless a format checker is given,
# and the runtime's validator has none).
_ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
        "format",
    }
)
# Drafts in which every keyword here means what it means in 2020-12 (1.0 is an integer since draft 6).
_DRAFTS = ("2020-12", "2019-09", "draft-07", "draft-06")
_NUMERIC = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}
_LENGTHS = {"minLength", "maxLength"}
_COUNTS = {"minItems", "maxItems"}
_KNOWN = frozenset(
    {"type", "properties", "required", "additionalProperties", "items", "enum", "const", "pattern"}
    | _NUMERIC
    | _LENGTHS
    | _COUNTS
    | _ANNOTATIONS
)


_PLAIN = frozenset({str, int, float, bool, list, dict, type(None)})
"""The types JSON decodes to: a keyword that does not apply to one of these passes it; any other
type (a subclass, a Decimal from code) is never passed here, the validator decides."""


def _is_integer(x: Any) -> bool:
    t = type(x)
    return t is int or (t is float and x.is_integer())


def _is_number(x: Any) -> bool:
    t = type(x)
    return t is int or t is float


_TYPES: dict[str, Check] = {
    "string": lambda x: type(x) is str,
    "integer": _is_integer,
    "number": _is_number,
    "boolean": lambda x: type(x) is bool,
    "null": lambda x: x is None,
    "object": lambda x: type(x) is dict,
    "array": lambda x: type(x) is list,
}


def quick_check(schema: Mapping[str, Any]) -> Check | None:
    """A test that says True only for instances `schema` accepts, or None when the schema uses
    anything it does not know (then every call goes to the validator)."""
    draft = schema.get("$schema")
    if "$schema" in schema and not (isinstance(draft, str) and any(d in draft for d in _DRAFTS)):
        return None
    if _refers(schema):
        return None  # references are the validator's to resolve
    rest = {k: v for k, v in schema.items() if k not in ("$schema", "$defs", "definitions")}
    try:
        return _compile(rest)
    except _Unknown:
        return None


class _Unknown(Exception):
    """The schema uses what `quick_check` does not know."""


def _refers(schema: Any) -> bool:
    """Whether a `$ref` (or `$dynamicRef`) is anywhere in `schema`."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if "$ref" in node or "$dynamicRef" in node:
                return True
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def _compile(schema: Any) -> Check:
    if schema is True or schema == {}:
        return lambda x: True
    if not isinstance(schema, dict) or not set(schema) <= _KNOWN:
        raise _Unknown
    if any(value is None and key not in _ANNOTATIONS for key, value in schema.items()):
        raise _Unknown  # `"additionalProperties": null` and the like: the validator's to judge
    tests: list[Check] = []
    kind = schema.get("type")
    strict = kind == "object" or kind == ["object"]  # the object test says no to anything else
    if kind is not None and not strict:
        kinds = [kind] if isinstance(kind, str) else kind
        if not isinstance(kinds, list) or not kinds or any(k not in _TYPES for k in kinds):
            raise _Unknown
        if len(kinds) == 1:
            tests.append(_TYPES[kinds[0]])
        else:
            each = [_TYPES[k] for k in kinds]
            tests.append(lambda x: any(t(x) for t in each))
    whole = _object_test(schema, strict)
    if whole is not None:
        tests.append(whole)
    tests.extend(_array_tests(schema))
    tests.extend(_value_tests(schema))
    if not tests:
        return lambda x: True
    if len(tests) == 1:
        return tests[0]

    def every(x: Any) -> bool:
        for test in tests:  # noqa: SIM110  # a loop: no generator a call
            if not test(x):
                return False
        return True

    return every


def _object_test(schema: dict[str, Any], strict: bool) -> Check | None:
    """One test for the object keywords (`properties`, `required`, `additionalProperties`), and
    for `type: object` itself when `strict`; None when there is nothing to test. A most MCP
    tools' schema is this alone, so it is one function of plain loops (no generator a call)."""
    properties = schema.get("properties")
    if properties is not None and not isinstance(properties, dict):
        raise _Unknown
    checks = tuple((name, _compile(sub)) for name, sub in (properties or {}).items())
    required = schema.get("required")
    if required is not None and (
        not isinstance(required, list) or not all(isinstance(r, str) for r in required)
    ):
        raise _Unknown
    needed = tuple(required or ())
    additional = schema.get("additionalProperties")
    closed = additional is False
    extra = None if additional is None or additional is True or closed else _compile(additional)
    known = frozenset(properties or ())
    if not (strict or checks or needed or closed or extra is not None):
        return None

    def test(x: Any) -> bool:
        if type(x) is not dict:
            return not strict and type(x) in _PLAIN  # the keywords pass what is not an object
        for name in needed:
            if name not in x:
                return False
        for name, check in checks:
            if name in x and not check(x[name]):
                return False
        if closed:
            for key in x:
                if key not in known:
                    return False
        elif extra is not None:
            for key, value in x.items():
                if key not in known and not extra(value):
                    return False
        return True

    return test


def _array_tests(schema: dict[str, Any]) -> list[Check]:
    items = schema.get("items")
    if items is None:
        return []
    if not isinstance(items, dict | bool):
        raise _Unknown  # an array of schemas: tuple validation, another draft's
    item = _compile(items) if items is not False else (lambda x: False)
    return [lambda x: all(item(v) for v in x) if type(x) is list else type(x) in _PLAIN]


def _value_tests(schema: dict[str, Any]) -> list[Check]:
    tests: list[Check] = []
    if "enum" in schema:
        allowed = schema["enum"]
        if not isinstance(allowed, list) or not all(isinstance(v, str) for v in allowed):
            raise _Unknown  # equality of numbers and containers is the validator's
        strings = frozenset(allowed)
        tests.append(lambda x: type(x) is str and x in strings)
    if "const" in schema:
        const = schema["const"]
        if not isinstance(const, str):
            raise _Unknown
        tests.append(lambda x: type(x) is str and x == const)
    for key in _NUMERIC & set(schema):
        bound = schema[key]
        if type(bound) not in (int, float):
            raise _Unknown  # draft 4's boolean exclusive bounds
        tests.append(_numeric(key, bound))
    for key in _LENGTHS & set(schema):
        tests.append(_sized(key, schema[key], str))
    for key in _COUNTS & set(schema):
        tests.append(_sized(key, schema[key], list))
    if "pattern" in schema:
        pattern = schema["pattern"]
        if not isinstance(pattern, str):
            raise _Unknown
        try:
            search = re.compile(pattern).search
        except re.error:
            raise _Unknown from None  # the validator says what is wrong with it
        tests.append(lambda x: search(x) is not None if type(x) is str else type(x) in _PLAIN)
    return tests


def _numeric(key: str, bound: float) -> Check:
    if key == "minimum":
        return lambda x: x >= bound if _is_number(x) else type(x) in _PLAIN
    if key == "maximum":
        return lambda x: x <= bound if _is_number(x) else type(x) in _PLAIN
    if key == "exclusiveMinimum":
        return lambda x: x > bound if _is_number(x) else type(x) in _PLAIN
    return lambda x: x < bound if _is_number(x) else type(x) in _PLAIN


def _sized(key: str, bound: Any, kind: type[str] | type[list[Any]]) -> Check:
    if type(bound) is not int or bound < 0:
        raise _Unknown
    if key.startswith("min"):
        return lambda x: len(x) >= bound if type(x) is kind else type(x) in _PLAIN
    return lambda x: len(x) <= bound if type(x) is kind else type(x) in _PLAIN
