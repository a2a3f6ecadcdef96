"""The quick check of an MCP tool's arguments never accepts what the JSON Schema validator refuses.

`runtime.mcp._quick_schema` compiles the common subset of JSON Schema into plain tests so that a
call through the runtime does not walk `jsonschema`'s validator; it may only ever say yes where
the validator says yes (anything else goes to the validator, which decides and says why).
"""

from __future__ import annotations

from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import ToolCall, open_runtime
from runtime.mcp import JsonSchemaTool
from runtime.mcp._quick_schema import quick_check

NAMES = ("a", "b", "c")

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-5, max_value=5),
    st.sampled_from([0.0, 1.0, 2.5, -3.0, 1e300]),
    st.sampled_from(["", "x", "xy", "abc", "ab1", "é"]),
)
instances = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(NAMES), inner, max_size=3)
    ),
    max_leaves=8,
)

types = st.sampled_from(["string", "integer", "number", "boolean", "null", "object", "array"])


def _schemas(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    keyword = st.one_of(
        st.builds(lambda t: {"type": t}, st.one_of(types, st.lists(types, min_size=1, max_size=3))),
        st.builds(lambda p: {"properties": p}, st.dictionaries(st.sampled_from(NAMES), inner, max_size=3)),
        st.builds(lambda r: {"required": r}, st.lists(st.sampled_from(NAMES), max_size=3, unique=True)),
        st.builds(lambda a: {"additionalProperties": a}, st.one_of(st.booleans(), inner)),
        st.builds(lambda i: {"items": i}, st.one_of(st.booleans(), inner)),
        st.builds(
            lambda e: {"enum": e}, st.lists(st.sampled_from(["x", "xy", "abc"]), min_size=1, max_size=3)
        ),
        st.builds(lambda c: {"const": c}, st.sampled_from(["x", "abc"])),
        st.builds(
            lambda k, b: {k: b},
            st.sampled_from(["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]),
            st.sampled_from([-1, 0, 1, 2.5]),
        ),
        st.builds(
            lambda k, b: {k: b},
            st.sampled_from(["minLength", "maxLength", "minItems", "maxItems"]),
            st.integers(min_value=0, max_value=3),
        ),
        st.builds(lambda p: {"pattern": p}, st.sampled_from(["^a", "[0-9]", "y$"])),
        st.just({"description": "annotated", "format": "email", "title": "t"}),
    )
    return st.lists(keyword, min_size=1, max_size=4).map(
        lambda parts: {k: v for p in parts for k, v in p.items()}
    )


schemas = st.recursive(st.one_of(st.just({}), st.just(True)), _schemas, max_leaves=6)


@settings(max_examples=600, deadline=None)
@given(schemas, st.lists(instances, min_size=1, max_size=8))
def test_what_the_quick_check_accepts_the_validator_accepts(schema: Any, values: list[Any]) -> None:
    quick = quick_check(schema if isinstance(schema, dict) else {"allOf": [schema]})
    if quick is None:
        return
    validator = jsonschema.Draft202012Validator(schema)
    for value in values:
        if quick(value):
            assert validator.is_valid(value), (schema, value)


CORPUS: list[Any] = [
    None,
    True,
    False,
    -1,
    0,
    1,
    2,
    3,
    1.0,
    2.5,
    -3.0,
    1e300,
    "",
    "x",
    "xy",
    "abc",
    "ab1",
    "é",
    [],
    ["x"],
    [1, 2],
    [None, "x", 3],
    {},
    {"a": 1},
    {"a": "x", "b": 2},
    {"c": None},
]
KEYWORDS: list[dict[str, Any]] = [
    *({"type": t} for t in ("string", "integer", "number", "boolean", "null", "object", "array")),
    {"type": ["string", "null"]},
    *(
        {k: b}
        for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
        for b in (-1, 0, 1, 2.5)
    ),
    *({k: n} for k in ("minLength", "maxLength", "minItems", "maxItems") for n in (0, 1, 2, 3)),
    {"enum": ["x", "abc"]},
    {"const": "xy"},
    {"pattern": "^a"},
    {"pattern": "[0-9]"},
    {"required": ["a", "b"]},
    {"properties": {"a": {"type": "integer"}}},
    {"properties": {"a": {"type": "string"}}, "additionalProperties": False},
    {"additionalProperties": {"type": "integer"}},
    {"items": {"type": "string"}},
    {"items": False},
]


@pytest.mark.parametrize("schema", KEYWORDS, ids=lambda s: str(s))
def test_on_plain_json_one_keyword_says_just_what_the_validator_says(schema: dict[str, Any]) -> None:
    quick = quick_check(schema)
    assert quick is not None
    validator = jsonschema.Draft202012Validator(schema)
    for value in CORPUS:
        assert quick(value) == validator.is_valid(value), (schema, value)


def test_common_schemas_get_a_quick_check_and_what_it_cannot_know_does_not() -> None:
    flat = {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "minimum": 0},
            "q": {"type": "string", "maxLength": 10},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["x", "y"]}},
        },
        "required": ["a"],
        "additionalProperties": False,
        "$schema": "https://json-schema.org/draft/2020-12/schema",
    }
    quick = quick_check(flat)
    assert quick is not None
    assert quick({"a": 1, "q": "hi", "tags": ["x"]})
    assert quick({"a": 1.0})  # 1.0 is an integer in JSON Schema since draft 6
    assert not quick({"a": True})  # a boolean is not an integer
    assert not quick({"a": -1})
    assert not quick({"a": 1, "extra": 1})
    assert not quick({"q": "hi"})
    for unknown in (
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}, "$defs": {"A": {"type": "integer"}}},
        {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        {"type": "object", "patternProperties": {"^a": {"type": "integer"}}},
        {"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer"},
        {"type": "number", "exclusiveMinimum": True},
        {"enum": [1, 2]},
        {"type": "strng"},
        # a keyword present with a null value: the validator applies it (or refuses the schema)
        {"type": "object", "additionalProperties": None, "properties": {"a": {"type": "string"}}},
        {"type": "object", "properties": {"a": {"type": None}}},
        {"type": "array", "items": None},
        {"properties": None},
        {"required": None},
        {"$schema": None, "type": "object"},
    ):
        assert quick_check(unknown) is None, unknown
    assert quick_check({"type": "integer", "default": None, "description": None}) is not None  # annotations


def test_a_null_keyword_is_the_validators_to_judge_end_to_end() -> None:
    """`"additionalProperties": null` refuses extra keys in the validator; the quick check never
    says yes to them (a review found it taking the null for an absent keyword)."""
    from runtime.exceptions import InvalidArguments
    from runtime.mcp._schema_tool import decode_checked, schema_validator

    check = schema_validator(
        {"type": "object", "additionalProperties": None, "properties": {"a": {"type": "string"}}}
    )
    with pytest.raises(InvalidArguments):
        decode_checked(check, {"a": "x", "zzz": 1})


class _Decimalish(dict):  # type: ignore[type-arg]
    """Not a type JSON decodes to: the quick check never passes it, the validator decides."""


def test_a_value_of_another_type_goes_to_the_validator() -> None:
    quick = quick_check({"type": "object", "properties": {"a": {"minLength": 2}}})
    assert quick is not None
    assert quick({"a": "ab"})
    assert not quick({"a": _Decimalish()})  # not str: minLength does not apply, but it is not JSON


async def test_a_call_the_quick_check_refuses_is_answered_in_the_validators_words() -> None:
    async def run(arguments: dict[str, Any], ctx: Any) -> int:
        return int(arguments["a"]) + int(arguments.get("b", 0))

    adder = JsonSchemaTool(
        "adder",
        "adds",
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "maximum": 10}},
            "required": ["a"],
        },
        run,
    )
    async with open_runtime([adder], tracing=False) as rt:
        ok = await rt.call(ToolCall(id="1", name="adder", arguments='{"a": 1, "b": 2}'))
        over = await rt.call(ToolCall(id="2", name="adder", arguments='{"a": 1, "b": 11}'))
        wrong = await rt.call(ToolCall(id="3", name="adder", arguments='{"a": "one"}'))
        missing = await rt.call(ToolCall(id="4", name="adder", arguments='{"b": 1}'))
    assert ok.ok
    assert ok.value == 3
    for failure, path in ((over, "$.b"), (wrong, "$.a"), (missing, "a")):
        assert not failure.ok
        assert failure.kind.value == "invalid_arguments", failure
        assert path in failure.message, failure.message


@pytest.mark.parametrize("value", [{"a": 1}, {"a": 1, "b": None}])
def test_the_quick_check_sees_what_the_validator_would_after_nulls_are_dropped(value: dict[str, Any]) -> None:
    from runtime.mcp._schema_tool import decode_checked, schema_validator

    check = schema_validator(
        {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}
    )
    assert check.quick is not None
    assert decode_checked(check, value) == {"a": 1}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"a": 1, "b": null}', {"a": 1}),  # the null an OpenAI strict model sends for a left-out property
        (b'{"a": 1, "b": null}', {"a": 1}),
        ('{"a": 1, "s": "null and void"}', {"a": 1, "s": "null and void"}),  # the word in a string
        ('{"a": 1, "s": "x"}', {"a": 1, "s": "x"}),  # no "null" in the text: nothing to look for
        ('{"a": 1, "o": {"b": null}}', {"a": 1, "o": {}}),  # nested: dropped at every depth
        ("   ", {}),  # empty arguments: an empty object
    ],
)
def test_json_arguments_have_their_null_defaults_dropped_only_where_a_null_is(
    raw: str | bytes, expected: dict[str, Any]
) -> None:
    from runtime.mcp._schema_tool import decode_checked, schema_validator

    check = schema_validator(
        {
            "type": "object",
            "properties": {
                "a": {"type": "integer"},
                "b": {"type": "integer"},
                "s": {"type": "string"},
                "o": {"type": "object", "properties": {"b": {"type": "integer"}}},
            },
        }
    )
    assert decode_checked(check, raw) == expected
