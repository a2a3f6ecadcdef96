"""MCP `inputSchema`s -> the IR -> the Python types that check a call's arguments before sending.

Every JSON Schema form MCP servers send, as pydantic (Python SDK), zod (TypeScript SDK) and
hand-written servers write them: local `$ref` into `$defs` / `definitions`, type arrays,
`anyOf` / `oneOf` (alone and beside properties), `enum` with and without `type`, nested objects
and arrays, every `additionalProperties` form, cycles, and a depth limit that a branch does
not reset. Malformed input is a SchemaError, never another exception.
"""

from __future__ import annotations

import contextlib
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import InvalidArguments, SchemaError, ToolDescriptor, ToolParameter
from runtime.schema import (
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
    Union,
    descriptor_from_json_schema,
    parse_json_schema,
)
from runtime.schema._from_jsonschema import DEFAULT_MAX_DEPTH
from runtime.schema._to_python import arguments_struct, python_type
from runtime.tools.lowlevel import ArgsCodec


def parse(schema: Any) -> Any:
    return parse_json_schema(schema)[0]


def codec_for(schema: dict[str, Any]) -> ArgsCodec:
    """The argument check the MCP client builds for a tool with this inputSchema."""
    struct, loosened = arguments_struct(descriptor_from_json_schema("t", "", schema))
    return ArgsCodec(struct, fill=[(n, msgspec.UNSET, None) for n in loosened])


def sent(schema: dict[str, Any], arguments: str) -> Any:
    """What the client would send for `arguments` (absent optional fields left out)."""
    return msgspec.to_builtins(codec_for(schema).decode(arguments))


def rejected(schema: dict[str, Any], arguments: str) -> InvalidArguments:
    with pytest.raises(InvalidArguments) as info:
        codec_for(schema).decode(arguments)
    return info.value


# -- what real servers send ------------------------------------------------------------------

PYDANTIC = {  # mcp.server.mcpserver for `def search(query: str, limit: int = 10, filters: Filters | None = None)`
    "type": "object",
    "title": "searchArguments",
    "properties": {
        "query": {"title": "Query", "type": "string"},
        "limit": {"default": 10, "title": "Limit", "type": "integer"},
        "filters": {"anyOf": [{"$ref": "#/$defs/Filters"}, {"type": "null"}], "default": None},
    },
    "required": ["query"],
    "$defs": {
        "Filters": {
            "title": "Filters",
            "type": "object",
            "properties": {
                "lang": {"enum": ["en", "fr"], "title": "Lang", "type": "string"},
                "max_age": {"default": 30, "minimum": 0, "title": "Max Age", "type": "integer"},
            },
            "required": ["lang"],
        }
    },
}

ZOD = {  # zod-to-json-schema, as the TypeScript SDK sends it
    "type": "object",
    "properties": {
        "url": {"type": "string", "format": "uri"},
        "max_length": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1000000},
        "raw": {"type": "boolean", "default": False},
        "headers": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "required": ["url"],
    "additionalProperties": False,
    "$schema": "http://json-schema.org/draft-07/schema#",
}


def test_a_pydantic_schema() -> None:
    d = descriptor_from_json_schema("search", "Search.", PYDANTIC)
    assert [(p.name, p.required, p.default) for p in d.parameters] == [
        ("query", True, msgspec.UNSET),
        ("limit", False, 10),
        ("filters", False, None),
    ]
    filters = d.parameter("filters").type
    assert isinstance(filters, Union)
    assert filters.options[1] == Null()
    lang = filters.options[0]
    assert isinstance(lang, Object)
    assert lang.properties[0].type == Enum(values=("en", "fr"))
    assert sent(PYDANTIC, '{"query": "q", "filters": {"lang": "en"}}') == {
        "query": "q",
        "filters": {"lang": "en"},
    }
    assert sent(PYDANTIC, '{"query": "q", "limit": null}') == {"query": "q"}  # null: the default applies
    assert sent(PYDANTIC, '{"query": "q", "filters": null}') == {"query": "q", "filters": None}
    assert (
        rejected(PYDANTIC, '{"query": "q", "filters": {"lang": "en", "max_age": -1}}').path
        == "$.filters.max_age"
    )


def test_a_zod_schema() -> None:
    d = descriptor_from_json_schema("fetch", "", ZOD)
    assert d.parameter("max_length").type == Number(exclusive_minimum=0, exclusive_maximum=1000000)
    assert d.parameter("headers").type == Object(additional=String())
    assert sent(ZOD, '{"url": "u", "max_length": 5, "headers": {"a": "b"}}') == {
        "url": "u",
        "max_length": 5,  # an integral number stays an integer
        "headers": {"a": "b"},
    }
    assert rejected(ZOD, '{"url": "u", "max_length": 0}').path == "$.max_length"
    assert rejected(ZOD, '{"url": "u", "headers": {"a": 1}}').path == "$.headers[...]"  # msgspec names no key


# -- each form -------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["$defs", "definitions"])
def test_local_refs_into_defs_and_definitions(where: str) -> None:
    schema = {
        "type": "object",
        "properties": {"point": {"$ref": f"#/{where}/Point"}, "again": {"$ref": f"#/{where}/Point"}},
        where: {"Point": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}},
    }
    d = descriptor_from_json_schema("t", "", schema)
    point = Object(properties=(ToolParameter(name="x", type=Number()),))
    assert d.parameter("point").type == point == d.parameter("again").type
    assert d.definitions == {}  # not recursive: inlined
    assert rejected(schema, '{"point": {"x": "1"}}').path == "$.point.x"


def test_a_ref_to_a_property_of_the_schema_itself() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"$ref": "#/properties/a"}}}
    assert descriptor_from_json_schema("t", "", schema).parameter("b").type == Integer()


@pytest.mark.parametrize(
    ("types_", "expected"),
    [
        (["string", "null"], Union(options=(String(), Null()))),
        (["integer", "string"], Union(options=(Integer(), String()))),
        (["number"], Number()),
    ],
)
def test_type_arrays(types_: list[str], expected: Any) -> None:
    assert parse({"type": types_}) == expected


def test_type_arrays_check_each_type() -> None:
    schema = {"type": "object", "properties": {"v": {"type": ["integer", "string", "null"]}}}
    for value in ("1", '"a"', "null"):
        assert sent(schema, f'{{"v": {value}}}') == {"v": msgspec.json.decode(value)}
    assert rejected(schema, '{"v": 1.5}').path == "$.v"


@pytest.mark.parametrize("key", ["anyOf", "oneOf"])
def test_any_of_and_one_of(key: str) -> None:
    schema = {
        "type": "object",
        "properties": {"v": {key: [{"type": "boolean"}, {"type": "array", "items": {}}]}},
    }
    assert parse(schema["properties"]["v"]) == Union(options=(Boolean(), Array()))
    assert sent(schema, '{"v": [1, "x"]}') == {"v": [1, "x"]}
    assert rejected(schema, '{"v": "no"}').path == "$.v"


def test_any_of_beside_properties_only_constrains_them() -> None:
    schema = {
        "type": "object",
        "properties": {"id": {"type": "string"}, "url": {"type": "string"}},
        "anyOf": [{"required": ["id"]}, {"required": ["url"]}],
    }
    d = descriptor_from_json_schema("t", "", schema)
    assert [(p.name, p.required) for p in d.parameters] == [("id", False), ("url", False)]


def test_one_of_shapes_of_the_arguments_merge_into_one_object() -> None:
    schema = {
        "type": "object",
        "properties": {"kind": {"type": "string"}},
        "required": ["kind"],
        "oneOf": [
            {"properties": {"kind": {"const": "circle"}, "r": {"type": "number"}}, "required": ["r"]},
            {"properties": {"kind": {"const": "square"}, "side": {"type": "number"}}, "required": ["side"]},
        ],
    }
    d = descriptor_from_json_schema("t", "", schema)
    assert [(p.name, p.required) for p in d.parameters] == [("kind", True), ("r", False), ("side", False)]
    assert d.parameter("kind").type == Enum(values=("circle", "square"))
    assert rejected(schema, '{"kind": "triangle"}').path == "$.kind"


def test_all_of_with_properties_beside_it_and_a_required_only_part() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "allOf": [{"$ref": "#/$defs/B"}, {"required": ["b"]}],
        "$defs": {"B": {"type": "object", "properties": {"b": {"type": "integer"}}}},
    }
    d = descriptor_from_json_schema("t", "", schema)
    assert [(p.name, p.type, p.required) for p in d.parameters] == [
        ("a", String(), False),
        ("b", Integer(), True),
    ]


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"enum": ["a", "b"]}, Enum(values=("a", "b"))),
        ({"type": "string", "enum": ["a", "b"]}, Enum(values=("a", "b"))),
        ({"enum": ["a", 1, None, True]}, Enum(values=("a", 1, None, True))),
        ({"const": 3}, Enum(values=(3,))),
        ({"type": "string", "enum": ["a"], "nullable": True}, Union(options=(Enum(values=("a",)), Null()))),
    ],
)
def test_enums_with_and_without_type(schema: dict[str, Any], expected: Any) -> None:
    assert parse(schema) == expected


def test_enum_values_are_checked() -> None:
    schema = {"type": "object", "properties": {"mode": {"enum": ["fast", 2, None]}, "x": {"enum": [0.5, 1]}}}
    assert sent(schema, '{"mode": 2, "x": 0.5}') == {"mode": 2, "x": 0.5}
    assert "Invalid enum value 'slow'" in rejected(schema, '{"mode": "slow"}').expected
    assert rejected(schema, '{"x": "a"}').path == "$.x"  # floats: checked as numbers


def test_nested_objects_and_arrays() -> None:
    schema = {
        "type": "object",
        "properties": {
            "rows": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "properties": {"cells": {"type": "array", "items": {"type": "integer", "maximum": 9}}},
                    "required": ["cells"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["rows"],
    }
    assert sent(schema, '{"rows": [{"cells": [1, 2]}]}') == {"rows": [{"cells": [1, 2]}]}
    assert rejected(schema, '{"rows": [{"cells": [1, 10]}]}').path == "$.rows[0].cells[1]"
    assert rejected(schema, '{"rows": [{"cells": [], "x": 1}]}').path == "$.rows[0].x"
    assert rejected(schema, '{"rows": []}').path == "$.rows"


@pytest.mark.parametrize(
    ("additional", "node", "good", "bad"),
    [
        (None, True, '{"o": {"k": 1, "z": "x"}}', '{"o": {"k": "x"}}'),  # absent: open
        (True, True, '{"o": {"k": 1, "z": "x"}}', '{"o": {"k": "x"}}'),
        ({}, True, '{"o": {"k": 1, "z": "x"}}', '{"o": {"k": "x"}}'),
        (False, False, '{"o": {"k": 1}}', '{"o": {"k": 1, "z": "x"}}'),
        ({"type": "integer"}, Integer(), '{"o": {"k": 1}}', '{"o": {"k": "x"}}'),
    ],
)
def test_additional_properties_forms(additional: Any, node: Any, good: str, bad: str) -> None:
    inner: dict[str, Any] = {"type": "object", "properties": {"k": {"type": "integer"}}}
    if additional is not None:
        inner["additionalProperties"] = additional
    schema = {"type": "object", "properties": {"o": inner}}
    parsed = parse(inner)
    assert isinstance(parsed, Object)
    assert parsed.additional == node
    codec_for(schema).decode(good)
    assert rejected(schema, bad).path.startswith("$.o")


def test_a_map_without_properties() -> None:
    schema = {
        "type": "object",
        "properties": {"m": {"type": "object", "additionalProperties": {"type": "boolean"}}},
    }
    assert sent(schema, '{"m": {"a": true}}') == {"m": {"a": True}}
    assert rejected(schema, '{"m": {"a": 1}}').path == "$.m[...]"
    free = {"type": "object", "properties": {"m": {"type": "object"}}}
    assert sent(free, '{"m": {"a": [1]}}') == {"m": {"a": [1]}}


def test_pattern_properties_type_the_extra_keys() -> None:
    node = parse({"type": "object", "patternProperties": {"^x-": {"type": "string"}}})
    assert node == Object(additional=String())


def test_draft_04_boolean_exclusive_bounds() -> None:
    assert parse({"type": "number", "minimum": 0, "exclusiveMinimum": True}) == Number(exclusive_minimum=0)
    assert parse({"type": "integer", "maximum": 5, "exclusiveMaximum": False}) == Integer(maximum=5)
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 0, "exclusiveMinimum": True}},
    }
    assert rejected(schema, '{"n": 0}').path == "$.n"


def test_a_required_name_without_a_property_may_hold_anything() -> None:
    d = descriptor_from_json_schema("t", "", {"type": "object", "required": ["x"]})
    assert d.parameters == (ToolParameter(name="x", type=AnyValue()),)


def test_property_names_that_are_not_python_names() -> None:
    schema = {
        "type": "object",
        "properties": {"from": {"type": "string"}, "a-b": {"type": "integer"}, "_x": {"type": "boolean"}},
        "required": ["from"],
    }
    assert sent(schema, '{"from": "f", "a-b": 1, "_x": true}') == {"from": "f", "a-b": 1, "_x": True}
    assert rejected(schema, '{"from": "f", "a-b": "1"}').path == "$.a-b"


# -- cycles and depth ------------------------------------------------------------------------

TREE = {
    "type": "object",
    "properties": {"root": {"$ref": "#/$defs/Node"}},
    "$defs": {
        "Node": {
            "type": "object",
            "properties": {
                "value": {"type": "integer"},
                "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
            },
            "required": ["value"],
        }
    },
}


def test_a_recursive_schema_becomes_one_definition_and_refs() -> None:
    d = descriptor_from_json_schema("t", "", TREE)
    assert d.parameter("root").type == Ref(name="Node")
    node = d.definitions["Node"]
    assert isinstance(node, Object)
    assert node.properties[1].type == Array(items=Ref(name="Node"))


def test_a_recursive_schema_is_checked_one_level_deep_and_sent_whole() -> None:
    deep = '{"root": {"value": 1, "children": [{"value": 2, "children": [{"value": "three"}]}]}}'
    assert sent(TREE, deep) == msgspec.json.decode(deep)  # deeper levels go to the server as they are
    assert rejected(TREE, '{"root": {"value": "one"}}').path == "$.root.value"


def test_mutual_and_root_recursion() -> None:
    mutual = {
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/A"}},
        "$defs": {
            "A": {"type": "object", "properties": {"b": {"$ref": "#/$defs/B"}}},
            "B": {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}},
        },
    }
    assert set(descriptor_from_json_schema("t", "", mutual).definitions) == {"A"}
    assert sent(mutual, '{"a": {"b": {"a": {"b": {}}}}}') == {"a": {"b": {"a": {"b": {}}}}}
    root = {"type": "object", "properties": {"next": {"$ref": "#"}, "n": {"type": "integer"}}}
    d = descriptor_from_json_schema("t", "", root)
    assert d.parameter("next").type == Ref(name="Root")
    assert rejected(root, '{"next": {"n": "x"}}').path == "$.next.n"


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#"},
        {"$ref": "#/$defs/A", "$defs": {"A": {"$ref": "#/$defs/A"}}},
        {"$ref": "#/$defs/A", "$defs": {"A": {"anyOf": [{"$ref": "#/$defs/A"}]}}},
    ],
)
def test_a_cycle_that_describes_no_value_is_a_schema_error(schema: Any) -> None:
    with pytest.raises(SchemaError, match="refers only to itself"):
        parse_json_schema(schema)


def _arrays(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "array", "items": schema}
    return schema


def test_the_depth_limit() -> None:
    parse_json_schema(_arrays(DEFAULT_MAX_DEPTH))
    with pytest.raises(SchemaError, match=f"deeper than {DEFAULT_MAX_DEPTH} levels"):
        parse_json_schema(_arrays(DEFAULT_MAX_DEPTH + 1))


@pytest.mark.parametrize(
    "branch",
    [
        lambda s: {"anyOf": [s, {"type": "null"}]},
        lambda s: {"oneOf": [{"type": "null"}, s]},
        lambda s: {"type": ["array", "null"], "items": s},
        lambda s: {"allOf": [s]},
        lambda s: {
            "type": "object",
            "properties": {"x": {"type": "string"}},
            "anyOf": [{"properties": {"y": s}}],
        },
        lambda s: {"$ref": "#/$defs/D", "$defs": {"D": s}},
    ],
    ids=["anyOf", "oneOf", "type-array", "allOf", "anyOf-beside-properties", "ref"],
)
def test_a_branch_does_not_reset_the_depth(branch: Any) -> None:
    # At the limit on its own; one level more inside any branch.
    parse_json_schema(_arrays(DEFAULT_MAX_DEPTH))
    with pytest.raises(SchemaError, match="deeper than"):
        parse_json_schema(branch(_arrays(DEFAULT_MAX_DEPTH)))


def test_a_deep_cycle_of_branches_ends_in_a_schema_error_not_a_recursion_error() -> None:
    defs = {f"D{i}": {"anyOf": [{"$ref": f"#/$defs/D{i + 1}"}, {"type": "null"}]} for i in range(2000)}
    defs["D2000"] = {"type": "string"}
    with pytest.raises(SchemaError, match="deeper than"):
        parse_json_schema({"$ref": "#/$defs/D0", "$defs": defs})


# -- malformed -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "object", "properties": {"x": {"type": "strng"}}}, "unknown type 'strng'"),
        ({"type": "object", "properties": {"x": {"$ref": "#/$defs/Nope"}}}, "points nowhere"),
        ({"type": "object", "properties": {"x": {"$ref": "https://example.com/s"}}}, "only local references"),
        ({"type": "object", "properties": ["x"]}, "'properties' must be an object"),
        ({"type": "object", "required": "x"}, "'required' must be a list of property names"),
        ({"type": "object", "properties": {"x": {"enum": []}}}, "'enum' must be a non-empty list"),
        ({"type": "object", "properties": {"x": {"anyOf": "x"}}}, "'anyOf' must be a non-empty list"),
        (
            {"type": "object", "properties": {"x": {"type": "string"}}, "oneOf": []},
            "'oneOf' must be a non-empty list",
        ),
        ({"type": "object", "allOf": {}}, "'allOf' must be a non-empty list"),
        (
            {"type": "object", "properties": {"x": {"type": "integer", "minimum": "0"}}},
            "'minimum' has the wrong type",
        ),
        ({"type": "object", "properties": {"x": 5}}, "expected a schema object, got int"),
        ({"type": "string"}, "must be a JSON object schema, not string"),
        ({"type": "array", "items": {"type": "string"}}, "must be a JSON object schema, not array"),
    ],
)
def test_malformed_input_schemas_are_schema_errors(schema: Any, message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        descriptor_from_json_schema("t", "", schema)


# -- IR -> Python types ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("node", "good", "bad"),
    [
        (String(min_length=2, pattern="^[a-z]+$"), ['"ab"'], ['"a"', '"AB"', "1"]),
        # Not read by Python's `re` as ECMA-262 means it: left to the server.
        (String(pattern="[[:alpha:]]+"), ['"anything"'], ["1"]),
        (Integer(minimum=0.5, exclusive_maximum=3), ["1", "2"], ["0", "3", "1.5", "true"]),
        (Integer(multiple_of=2), ["4"], ["3"]),
        (Number(minimum=0), ["0", "1.5", "7"], ["-0.1", '"1"']),
        (Boolean(), ["true"], ["1"]),
        (Null(), ["null"], ["0"]),
        (AnyValue(), ["[1, {}]", "null"], []),
        (Array(items=Integer(), max_items=1), ["[1]"], ["[1, 2]", '["a"]']),
        (
            Union(options=(Object(properties=(ToolParameter(name="a", type=Integer()),)), Array())),
            ['{"a": 1}', "[1]"],
            ["1"],
        ),
        (Enum(values=("a", 1, None)), ['"a"', "1", "null"], ['"b"', "2"]),
    ],
)
def test_python_types_check_what_the_node_says(node: Any, good: list[str], bad: list[str]) -> None:
    decoder = msgspec.json.Decoder(python_type(node))
    for text in good:
        decoder.decode(text)
    for text in bad:
        with pytest.raises(msgspec.ValidationError):
            decoder.decode(text)


def test_a_union_msgspec_cannot_tell_apart_is_loosened_not_refused() -> None:
    two_objects = Union(
        options=(
            Object(properties=(ToolParameter(name="a", type=Integer()),), additional=False),
            Object(properties=(ToolParameter(name="b", type=String()),), additional=False),
            Array(items=String()),
            Array(items=Integer()),
            Null(),
        )
    )
    decoder = msgspec.json.Decoder(python_type(two_objects))
    for text in ('{"a": 1}', '{"b": "x"}', '["x"]', "[1]", "null"):
        decoder.decode(text)
    with pytest.raises(msgspec.ValidationError):
        decoder.decode('"neither"')


def test_optional_parameters_are_left_out_when_absent() -> None:
    d = ToolDescriptor(
        name="t",
        parameters=(
            ToolParameter(name="a", type=Integer()),
            ToolParameter(name="b", type=Integer(), required=False),
            ToolParameter(name="c", type=Integer(), required=False, default=3),
            ToolParameter(name="d", type=Union(options=(Integer(), Null())), required=False, default=None),
        ),
    )
    struct, loosened = arguments_struct(d)
    assert loosened == ("c",)  # a default, and null not otherwise allowed
    codec = ArgsCodec(struct, fill=[(n, msgspec.UNSET, None) for n in loosened])
    assert msgspec.to_builtins(codec.decode('{"a": 1}')) == {"a": 1}
    assert msgspec.to_builtins(codec.decode('{"a": 1, "c": null, "d": null}')) == {"a": 1, "d": None}
    with pytest.raises(InvalidArguments, match="Expected `int`, got `null`"):
        codec.decode('{"a": 1, "b": null}')  # no default: null is not a value of `b`


# -- anything that parses can be checked -----------------------------------------------------

_leaf = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["string", "integer", "number", "boolean", "null", "array", "object"])
        | st.lists(st.sampled_from(["string", "integer", "null", "object"]), min_size=1, max_size=3),
        "enum": st.lists(
            st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=3),
            min_size=1,
            max_size=3,
        ),
        "minimum": st.integers(-3, 3) | st.floats(-3, 3),
        "exclusiveMaximum": st.integers(-3, 3) | st.booleans(),
        "multipleOf": st.sampled_from([1, 2, 0.5]),
        "minLength": st.integers(0, 3),
        "pattern": st.sampled_from(["^a", "(?<=x)", "[", "\\p{L}"]),
        "nullable": st.booleans(),
        "default": st.none() | st.integers(),
    },
)


def _with(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    names = st.sampled_from(["a", "b", "from", "a-b", "_c"])
    return st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(["object", "array"]),
            "properties": st.dictionaries(names, children, max_size=3),
            "required": st.lists(names, max_size=2),
            "additionalProperties": st.booleans() | children,
            "items": children,
            "anyOf": st.lists(children, min_size=1, max_size=3),
            "oneOf": st.lists(children, min_size=1, max_size=2),
            "allOf": st.lists(children, min_size=1, max_size=2),
            "$ref": st.sampled_from(["#", "#/$defs/A", "#/properties/a"]),
        },
    )


_schemas = st.recursive(_leaf, _with, max_leaves=10)


@settings(max_examples=150, deadline=None)
@given(body=_schemas, definition=_schemas)
def test_every_schema_that_parses_gets_an_argument_check(body: Any, definition: Any) -> None:
    schema = {**body, "type": "object", "$defs": {"A": definition}}
    try:
        descriptor = descriptor_from_json_schema("t", "", schema)
    except SchemaError:
        return
    struct, loosened = arguments_struct(descriptor)
    codec = ArgsCodec(struct, fill=[(n, msgspec.UNSET, None) for n in loosened])
    with contextlib.suppress(InvalidArguments):
        codec.decode("{}")
