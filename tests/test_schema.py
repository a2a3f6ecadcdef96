"""The contract layer: Python types -> IR (through tools), JSON Schema -> IR, IR -> plain JSON Schema."""

import dataclasses
import enum
import json
from typing import Annotated, Any, Literal

import jsonschema
import msgspec
import pytest

from runtime import Description, SchemaError, Tool, ToolDescriptor, ToolParameter, ToolRegistry, tool
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
from runtime.schema._to_jsonschema import document_schema, parameters_schema

# -- types used by the tools below (module level, so annotations resolve) ------------------


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Priority(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Point(msgspec.Struct):
    x: int
    y: Annotated[int, msgspec.Meta(description="vertical position")]


@dataclasses.dataclass
class Box:
    label: str
    corner: Point
    depth: int = 1


class Tree(msgspec.Struct):
    value: int
    children: list["Tree"] = []


class Ping(msgspec.Struct):
    pong: "Pong | None" = None


class Pong(msgspec.Struct):
    ping: "Ping | None" = None


def _params(t: Any) -> dict[str, ToolParameter]:
    return {p.name: p for p in t.descriptor.parameters}


def _jsonschema(t: Any) -> dict[str, Any]:
    (rendered,) = ToolRegistry([t]).schemas("jsonschema")
    return rendered


# -- required / optional / nullable ------------------------------------------------------


@tool
def optionality(a: int | None, b: int = 3, c: int | None = None) -> None:
    """Three kinds of optional."""


def test_nullable_without_default_is_required_and_nullable() -> None:
    a = _params(optionality)["a"]
    assert a.required is True
    assert not a.has_default
    assert a.type == Union(options=(Integer(), Null()))


def test_default_makes_a_parameter_optional_with_its_declared_type() -> None:
    b = _params(optionality)["b"]
    assert b.required is False
    assert b.default == 3
    assert b.type == Integer()  # the decoder also accepts null (strict mode); the schema does not say so


def test_nullable_with_none_default_is_optional_and_nullable() -> None:
    c = _params(optionality)["c"]
    assert c.required is False
    assert c.has_default
    assert c.default is None
    assert c.type == Union(options=(Integer(), Null()))


def test_optionality_in_plain_json_schema() -> None:
    parameters = _jsonschema(optionality)["parameters"]
    assert parameters["required"] == ["a"]
    assert parameters["properties"] == {
        "a": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "b": {"type": "integer", "default": 3},
        "c": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
    }
    assert parameters["additionalProperties"] is False


# -- enums ---------------------------------------------------------------------------------


@tool
def enums(
    color: Color,
    priority: Priority,
    mode: Literal["fast", "slow"],
    level: Literal[1, 2, 3],
    maybe: Literal["x", None],
    colors: list[Color],
    modes: list[Literal["a", "b"]],
) -> None:
    """Enums everywhere."""


def test_enum_class_becomes_an_enum_of_its_values() -> None:
    color = _params(enums)["color"].type
    assert isinstance(color, Enum)
    assert sorted(color.values) == ["green", "red"]  # type: ignore[type-var]
    assert _params(enums)["priority"].type == Enum(values=(1, 2))


def test_literal_becomes_an_enum() -> None:
    assert _params(enums)["mode"].type == Enum(values=("fast", "slow"))
    assert _params(enums)["level"].type == Enum(values=(1, 2, 3))


def test_literal_with_none_is_a_nullable_enum() -> None:
    maybe = _params(enums)["maybe"].type
    assert isinstance(maybe, Enum)
    assert set(maybe.values) == {"x", None}


def test_enums_in_lists() -> None:
    colors = _params(enums)["colors"].type
    assert isinstance(colors, Array)
    assert isinstance(colors.items, Enum)
    assert sorted(colors.items.values) == ["green", "red"]  # type: ignore[type-var]
    assert _params(enums)["modes"].type == Array(items=Enum(values=("a", "b")))


def test_enums_in_plain_json_schema_carry_their_type() -> None:
    props = _jsonschema(enums)["parameters"]["properties"]
    assert props["mode"] == {"enum": ["fast", "slow"], "type": "string"}
    assert props["level"] == {"enum": [1, 2, 3], "type": "integer"}
    assert props["modes"] == {"type": "array", "items": {"enum": ["a", "b"], "type": "string"}}
    assert "type" not in props["maybe"]  # values of two JSON types: no single type


# -- nested objects ------------------------------------------------------------------------


@tool
def nested(point: Point, box: Box | None = None) -> None:
    """Nested objects."""


def test_nested_struct_becomes_an_object_with_its_fields() -> None:
    point = _params(nested)["point"].type
    assert point == Object(
        name="Point",
        properties=(
            ToolParameter(name="x", type=Integer()),
            ToolParameter(
                name="y",
                description="vertical position",
                type=Integer(description="vertical position"),
            ),
        ),
    )
    assert point.required == ("x", "y")


def test_nested_dataclass_becomes_an_object_and_keeps_field_defaults() -> None:
    box = _params(nested)["box"].type
    assert isinstance(box, Union)
    obj, null = box.options
    assert null == Null()
    assert isinstance(obj, Object)
    assert obj.name == "Box"
    assert obj.required == ("label", "corner")
    fields = {p.name: p for p in obj.properties}
    assert fields["label"].type == String()
    assert isinstance(fields["corner"].type, Object)
    assert fields["corner"].type.name == "Point"
    assert fields["depth"].default == 1
    assert fields["depth"].required is False


def test_nested_objects_without_recursion_need_no_definitions_and_a_shared_one_is_inlined() -> None:
    assert nested.descriptor.definitions == {}
    params = _jsonschema(nested)["parameters"]
    # Point is used twice (a parameter and Box.corner): it is written at both places, since many
    # clients (the MCP Inspector among them) do not follow `$ref` (issue 25, point 14).
    assert params["properties"]["point"]["type"] == "object"
    assert set(params["properties"]["point"]["properties"]) == {"x", "y"}
    assert "$defs" not in params
    assert "$defs" not in parameters_schema(nested.descriptor)


# -- recursive types -----------------------------------------------------------------------


@tool
def grow(tree: Tree) -> int:
    """Count a tree's nodes."""
    return 1


@tool
def bounce(ping: Ping) -> None:
    """Mutually recursive types."""


def test_recursive_struct_is_a_ref_and_one_definition() -> None:
    descriptor = grow.descriptor
    assert descriptor.parameter("tree").type == Ref(name="Tree")
    assert list(descriptor.definitions) == ["Tree"]
    definition = descriptor.definitions["Tree"]
    assert isinstance(definition, Object)
    children = {p.name: p for p in definition.properties}["children"]
    assert children.type == Array(items=Ref(name="Tree"))
    assert children.required is False


def test_mutually_recursive_structs_do_not_loop() -> None:
    descriptor = bounce.descriptor
    assert descriptor.parameter("ping").type == Ref(name="Ping")
    ping = descriptor.definitions["Ping"]
    assert isinstance(ping, Object)
    pong_option = ping.properties[0].type
    assert isinstance(pong_option, Union)
    pong = pong_option.options[0]
    assert isinstance(pong, Object)
    assert pong.name == "Pong"
    assert pong.properties[0].type == Union(options=(Ref(name="Ping"), Null()))


def test_recursive_type_renders_defs_and_refs_that_resolve() -> None:
    parameters = _jsonschema(grow)["parameters"]
    assert parameters["properties"]["tree"] == {"$ref": "#/$defs/Tree"}
    assert set(parameters["$defs"]) == {"Tree"}
    assert parameters["$defs"]["Tree"]["properties"]["children"]["items"] == {"$ref": "#/$defs/Tree"}
    json.dumps(parameters)  # finite: no loop, no shared cycles
    jsonschema.Draft202012Validator.check_schema(parameters)
    validator = jsonschema.Draft202012Validator(parameters)
    good = {"tree": {"value": 1, "children": [{"value": 2, "children": [{"value": 3}]}]}}
    assert validator.is_valid(good)
    bad = {"tree": {"value": 1, "children": [{"value": "two"}]}}
    assert not validator.is_valid(bad)


# -- maps, unions, tuples, other types --------------------------------------------------------


@tool
def shapes(
    scores: dict[str, float],
    key: int | str,
    either: int | str | None,
    pair: tuple[int, str],
    many: tuple[int, ...],
    tags: set[str],
    flag: bool,
    ratio: float,
    anything: Any,
) -> None:
    """Containers and unions."""


def test_dict_becomes_an_object_with_typed_additional_properties() -> None:
    scores = _params(shapes)["scores"].type
    assert scores == Object(properties=(), additional=Number())
    assert _jsonschema(shapes)["parameters"]["properties"]["scores"] == {
        "type": "object",
        "properties": {},
        "additionalProperties": {"type": "number"},
    }


def test_union_is_native() -> None:
    assert _params(shapes)["key"].type == Union(options=(Integer(), String()))
    assert _params(shapes)["either"].type == Union(options=(Integer(), String(), Null()))
    assert _jsonschema(shapes)["parameters"]["properties"]["key"] == {
        "anyOf": [{"type": "integer"}, {"type": "string"}]
    }


def test_fixed_tuple_is_an_array_of_the_union_with_its_length() -> None:
    assert _params(shapes)["pair"].type == Array(
        items=Union(options=(Integer(), String())),
        prefix_items=(Integer(), String()),
        min_items=2,
        max_items=2,
    )


def test_variadic_tuple_and_set_are_arrays() -> None:
    assert _params(shapes)["many"].type == Array(items=Integer())
    assert _params(shapes)["tags"].type == Array(items=String(), unique_items=True)


def test_scalars_and_any() -> None:
    params = _params(shapes)
    assert params["flag"].type == Boolean()
    assert params["ratio"].type == Number()
    assert params["anything"].type == AnyValue()
    assert _jsonschema(shapes)["parameters"]["properties"]["anything"] == {}


# -- descriptions and constraints ----------------------------------------------------------


@tool
def described(
    query: Annotated[str, Description("what to look for")],
    limit: Annotated[int, msgspec.Meta(description="page size", ge=1, le=50)] = 10,
    ratio: Annotated[float, msgspec.Meta(gt=0, lt=1.5, multiple_of=0.5)] = 0.5,
    code: Annotated[str, msgspec.Meta(min_length=2, max_length=8, pattern="^[A-Z]+$")] = "AB",
    page: int = 1,
    owner: Annotated[str, Description("the owner")] = "me",
    group: Annotated[str, Description("the group")] | None = None,
) -> None:
    """Search things.

    Args:
        query: docstring text that Description beats.
        page: which page, from 1.
        owner: docstring text that Description beats too.
        group: and this one.
    """


def test_annotated_description_describes_the_parameter() -> None:
    assert _params(described)["query"].description == "what to look for"


def test_meta_constraints_become_bounds() -> None:
    limit = _params(described)["limit"]
    assert limit.description == "page size"
    assert limit.type == Integer(description="page size", minimum=1, maximum=50)
    assert _params(described)["ratio"].type == Number(
        exclusive_minimum=0, exclusive_maximum=1.5, multiple_of=0.5
    )
    assert _params(described)["code"].type == String(min_length=2, max_length=8, pattern="^[A-Z]+$")


def test_constraints_in_plain_json_schema() -> None:
    props = _jsonschema(described)["parameters"]["properties"]
    assert props["limit"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 50,
        "description": "page size",
        "default": 10,
    }
    assert props["ratio"] == {
        "type": "number",
        "exclusiveMinimum": 0,
        "exclusiveMaximum": 1.5,
        "multipleOf": 0.5,
        "default": 0.5,
    }
    assert props["code"] == {
        "type": "string",
        "pattern": "^[A-Z]+$",
        "minLength": 2,
        "maxLength": 8,
        "default": "AB",
    }


def test_docstring_args_describe_parameters_without_a_description() -> None:
    assert _params(described)["page"].description == "which page, from 1."
    assert described.descriptor.description == "Search things."


def test_description_beats_the_docstring() -> None:
    params = _params(described)
    assert params["query"].description == "what to look for"
    assert params["owner"].description == "the owner"
    assert params["group"].description == "the group"
    props = _jsonschema(described)["parameters"]["properties"]
    assert props["owner"]["description"] == "the owner"
    assert props["group"]["description"] == "the group"


class SearchArgs(msgspec.Struct):
    """Arguments of a search.

    Args:
        query: the query, from the args docstring.
        limit: not shown: Meta wins.
    """

    query: str
    limit: Annotated[int, msgspec.Meta(description="max hits", ge=1)] = 5
    where: Point | None = None


class ClassSearch(Tool[SearchArgs, list[str]]):
    """Search with a class."""

    async def execute(self, args: SearchArgs) -> list[str]:
        return []


def test_class_tool_args_type_gives_the_same_ir() -> None:
    params = {p.name: p for p in ClassSearch.descriptor.parameters}
    assert params["query"] == ToolParameter(
        name="query", description="the query, from the args docstring.", type=String()
    )
    assert params["limit"] == ToolParameter(
        name="limit",
        description="max hits",
        type=Integer(description="max hits", minimum=1),
        required=False,
        default=5,
    )
    where = params["where"].type
    assert isinstance(where, Union)
    assert isinstance(where.options[0], Object)
    assert where.options[0].name == "Point"


# -- JSON Schema -> IR ---------------------------------------------------------------------


def test_local_ref_into_defs_and_definitions_is_inlined() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/A"}, "b": {"$ref": "#/definitions/B"}},
        "required": ["a"],
        "$defs": {"A": {"type": "string", "format": "email"}},
        "definitions": {"B": {"type": "integer", "minimum": 0}},
    }
    node, definitions = parse_json_schema(schema)
    assert definitions == {}
    assert node == Object(
        properties=(
            ToolParameter(name="a", type=String(format="email"), required=True),
            ToolParameter(name="b", type=Integer(minimum=0), required=False),
        )
    )


def test_ref_keeps_the_description_of_the_referring_schema() -> None:
    node, _ = parse_json_schema(
        {"$ref": "#/$defs/A", "description": "an a", "$defs": {"A": {"type": "string"}}}
    )
    assert node == String(description="an a")


def test_type_array_with_null_is_a_nullable_union() -> None:
    node, _ = parse_json_schema({"type": ["string", "null"]})
    assert node == Union(options=(String(), Null()))


def test_type_array_keeps_the_constraints_of_each_type() -> None:
    node, _ = parse_json_schema({"type": ["integer", "string"], "minimum": 1, "maxLength": 3})
    assert node == Union(options=(Integer(minimum=1), String(max_length=3)))


@pytest.mark.parametrize("key", ["anyOf", "oneOf"])
def test_any_of_and_one_of_are_unions(key: str) -> None:
    node, _ = parse_json_schema({key: [{"type": "string"}, {"type": "integer"}, {"type": "null"}]})
    assert node == Union(options=(String(), Integer(), Null()))


def test_nested_unions_are_flattened_and_deduplicated() -> None:
    node, _ = parse_json_schema(
        {"anyOf": [{"type": "string"}, {"anyOf": [{"type": "string"}, {"type": "boolean"}]}]}
    )
    assert node == Union(options=(String(), Boolean()))


def test_single_option_union_is_that_option() -> None:
    assert parse_json_schema({"anyOf": [{"type": "boolean"}]})[0] == Boolean()


def test_union_with_an_empty_schema_accepts_anything() -> None:
    assert parse_json_schema({"anyOf": [{"type": "string"}, {}]})[0] == AnyValue()


def test_enum_with_type() -> None:
    assert parse_json_schema({"type": "string", "enum": ["a", "b"]})[0] == Enum(values=("a", "b"))


def test_enum_without_type_keeps_mixed_values() -> None:
    assert parse_json_schema({"enum": ["a", 1, 2.5, True, None]})[0] == Enum(values=("a", 1, 2.5, True, None))


def test_const_is_a_one_value_enum() -> None:
    assert parse_json_schema({"const": "fixed"})[0] == Enum(values=("fixed",))
    assert parse_json_schema({"const": None})[0] == Enum(values=(None,))


def test_openapi_nullable_adds_null() -> None:
    assert parse_json_schema({"type": "string", "nullable": True})[0] == Union(options=(String(), Null()))


def test_nested_objects_and_arrays() -> None:
    schema = {
        "type": "object",
        "properties": {
            "rows": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "title": "Row",
                    "properties": {"cells": {"type": "array", "items": {"type": "number"}}},
                    "required": ["cells"],
                },
            }
        },
    }
    node, _ = parse_json_schema(schema)
    row = Object(name="Row", properties=(ToolParameter(name="cells", type=Array(items=Number())),))
    assert node == Object(
        properties=(ToolParameter(name="rows", type=Array(items=row, min_items=1), required=False),)
    )


def test_type_is_inferred_from_properties_and_items() -> None:
    assert isinstance(parse_json_schema({"properties": {"a": {"type": "string"}}})[0], Object)
    assert parse_json_schema({"items": {"type": "string"}})[0] == Array(items=String())


def test_prefix_items_tuple_is_an_array_of_the_union() -> None:
    node, _ = parse_json_schema({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]})
    assert node == Array(items=Union(options=(String(), Integer())))


def test_empty_schema_and_true_accept_anything() -> None:
    assert parse_json_schema({})[0] == AnyValue()
    assert parse_json_schema(True)[0] == AnyValue()
    assert parse_json_schema({"description": "whatever"})[0] == AnyValue(description="whatever")


@pytest.mark.parametrize(
    ("additional", "expected"),
    [
        (True, True),
        (False, False),
        ({"type": "integer"}, Integer()),
        ({}, True),  # an empty schema allows any value: the same as true
    ],
)
def test_additional_properties_forms(additional: Any, expected: Any) -> None:
    node, _ = parse_json_schema({"type": "object", "additionalProperties": additional})
    assert isinstance(node, Object)
    assert node.additional == expected


def test_missing_additional_properties_means_open() -> None:
    node, _ = parse_json_schema({"type": "object"})
    assert node == Object(properties=(), additional=True)


def test_property_default_is_kept() -> None:
    node, _ = parse_json_schema({"type": "object", "properties": {"n": {"type": "integer", "default": 7}}})
    assert isinstance(node, Object)
    assert node.properties[0].default == 7
    assert node.properties[0].has_default


def test_mutual_recursion_becomes_one_definition_and_refs() -> None:
    schema = {
        "$ref": "#/$defs/A",
        "$defs": {
            "A": {"type": "object", "properties": {"b": {"$ref": "#/$defs/B"}}},
            "B": {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}},
        },
    }
    node, definitions = parse_json_schema(schema)
    assert node == Ref(name="A")
    b = Object(properties=(ToolParameter(name="a", type=Ref(name="A"), required=False),))
    assert definitions == {"A": Object(properties=(ToolParameter(name="b", type=b, required=False),))}


def test_root_recursion_is_named_root_and_renders_a_resolvable_ref() -> None:
    schema = {"type": "object", "properties": {"child": {"$ref": "#"}, "n": {"type": "integer"}}}
    descriptor = descriptor_from_json_schema("nest", "nested", schema)
    assert descriptor.parameter("child").type == Ref(name="Root")
    assert set(descriptor.definitions) == {"Root"}
    rendered = parameters_schema(descriptor)
    assert rendered["properties"]["child"] == {"$ref": "#/$defs/Root"}
    validator = jsonschema.Draft202012Validator(rendered)
    assert validator.is_valid({"child": {"child": {"n": 1}}})
    assert not validator.is_valid({"child": {"child": {"n": "x"}}})


def test_definition_names_are_safe_to_render_as_refs() -> None:
    schema = {
        "$ref": "#/$defs/a~1b c",
        "$defs": {"a/b c": {"type": "object", "properties": {"next": {"$ref": "#/$defs/a~1b c"}}}},
    }
    node, definitions = parse_json_schema(schema)
    assert isinstance(node, Ref)
    assert set(definitions) == {node.name}
    assert node.name.replace("_", "").isalnum()
    descriptor = ToolDescriptor(
        name="t", parameters=(ToolParameter(name="x", type=node),), definitions=definitions
    )
    validator = jsonschema.Draft202012Validator(parameters_schema(descriptor))
    assert validator.is_valid({"x": {"next": {"next": {}}}})


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#"},
        {"$ref": "#/$defs/A", "$defs": {"A": {"$ref": "#/$defs/A"}}},
        {"$ref": "#/$defs/A", "$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}}},
        {"$ref": "#/$defs/A", "$defs": {"A": {"anyOf": [{"$ref": "#/$defs/A"}]}}},
    ],
    ids=["root", "self", "pair", "single-union"],
)
def test_a_reference_that_only_refers_to_itself_is_a_schema_error(schema: Any) -> None:
    with pytest.raises(SchemaError, match="refers only to itself"):
        parse_json_schema(schema)


def _nested_arrays(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "array", "items": schema}
    return schema


def test_depth_limit_stops_deep_nesting() -> None:
    parse_json_schema(_nested_arrays(DEFAULT_MAX_DEPTH))
    with pytest.raises(SchemaError, match=f"deeper than {DEFAULT_MAX_DEPTH} levels"):
        parse_json_schema(_nested_arrays(DEFAULT_MAX_DEPTH + 1))
    with pytest.raises(SchemaError, match="deeper than 3 levels"):
        parse_json_schema(_nested_arrays(4), max_depth=3)


def test_depth_limit_counts_through_references() -> None:
    defs = {f"D{i}": {"type": "array", "items": {"$ref": f"#/$defs/D{i + 1}"}} for i in range(40)}
    defs["D40"] = {"type": "string"}
    with pytest.raises(SchemaError, match="deeper than"):
        parse_json_schema({"$ref": "#/$defs/D0", "$defs": defs})


def test_very_deep_nesting_is_a_schema_error_not_a_recursion_error() -> None:
    with pytest.raises(SchemaError, match="deeper than"):
        parse_json_schema(_nested_arrays(5000))


@pytest.mark.parametrize(
    "ref",
    ["http://example.com/schema.json", "other.json#/$defs/A", "urn:uuid:1234"],
)
def test_non_local_ref_is_rejected(ref: str) -> None:
    with pytest.raises(SchemaError, match="only local references are supported"):
        parse_json_schema({"type": "object", "properties": {"a": {"$ref": ref}}})


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (None, "expected a schema object, got NoneType"),
        ([1, 2], "expected a schema object, got list"),
        ("string", "expected a schema object, got str"),
        (False, "expected a schema object, got bool"),
        ({"type": "strng"}, "unknown type 'strng'"),
        ({"type": []}, "'type' must not be an empty list"),
        ({"type": [1]}, "unknown type 1"),
        ({"type": "object", "properties": [1]}, "'properties' must be an object"),
        ({"type": "object", "properties": {"a": 3}}, "expected a schema object, got int"),
        ({"type": "object", "required": "a"}, "'required' must be a list of property names"),
        ({"type": "object", "additionalProperties": 3}, "expected a schema object, got int"),
        ({"enum": []}, "'enum' must be a non-empty list"),
        ({"enum": "ab"}, "'enum' must be a non-empty list"),
        ({"enum": [{"a": 1}]}, "only scalar enum values"),
        ({"const": [1]}, "only scalar enum values"),
        ({"anyOf": []}, "'anyOf' must be a non-empty list"),
        ({"oneOf": {"type": "string"}}, "'oneOf' must be a non-empty list"),
        (
            {"allOf": [{"type": "string"}, {"type": "integer"}]},
            "'allOf' is only supported over object schemas",
        ),
        ({"type": "array", "items": False}, "can hold nothing"),
        ({"type": "array", "items": []}, "'items' must be a non-empty list"),
        ({"$ref": 3}, "'\\$ref' must be a string"),
        ({"$ref": "#/$defs/Missing"}, "points nowhere"),
        ({"$ref": "#/required", "required": ["a"]}, "expected a schema object, got list"),
        ({"type": "string", "description": 3}, "'description' must be a string"),
        ({"type": "string", "minLength": "3"}, "'minLength' has the wrong type"),
        ({"type": "integer", "maximum": True}, "'maximum' has the wrong type"),
        (
            {
                "$ref": "#/$defs/A",
                "$defs": {
                    "A": {
                        "type": "object",
                        "properties": {"x": {"allOf": [{"$ref": "#/$defs/A"}, {"type": "object"}]}},
                    }
                },
            },
            "'allOf' is only supported over object schemas",
        ),
    ],
)
def test_malformed_schema_is_a_schema_error(schema: Any, message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        parse_json_schema(schema)


def test_schema_error_is_a_value_error() -> None:
    assert issubclass(SchemaError, ValueError)


def test_all_of_over_objects_merges_their_properties() -> None:
    schema = {
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
            {"type": "object", "properties": {"b": {"type": "integer"}}, "additionalProperties": False},
        ]
    }
    node, _ = parse_json_schema(schema)
    assert node == Object(
        properties=(
            ToolParameter(name="a", type=String(), required=True),
            ToolParameter(name="b", type=Integer(), required=False),
        ),
        additional=False,
    )


# -- descriptor_from_json_schema (what MCP tools go through) ----------------------------------


def test_descriptor_from_an_mcp_input_schema() -> None:
    schema = {
        "type": "object",
        "description": "fallback description",
        "properties": {
            "path": {"type": "string", "description": "file to read"},
            "encoding": {"type": ["string", "null"], "default": "utf-8"},
        },
        "required": ["path"],
    }
    descriptor = descriptor_from_json_schema("read_file", "", schema)
    assert descriptor.name == "read_file"
    assert descriptor.description == "fallback description"
    assert descriptor.required == ("path",)
    assert descriptor.parameter("path") == ToolParameter(
        name="path", description="file to read", type=String(description="file to read")
    )
    encoding = descriptor.parameter("encoding")
    assert encoding.type == Union(options=(String(), Null()))
    assert encoding.default == "utf-8"
    assert encoding.required is False


def test_descriptor_description_argument_beats_the_schema_description() -> None:
    schema = {"type": "object", "description": "from schema", "properties": {}}
    assert descriptor_from_json_schema("t", "given", schema).description == "given"


@pytest.mark.parametrize("schema", [None, {}])
def test_descriptor_from_an_empty_schema_has_no_parameters(schema: Any) -> None:
    descriptor = descriptor_from_json_schema("ping", "Ping.", schema)
    assert descriptor.parameters == ()
    assert descriptor.definitions == {}


def test_descriptor_from_a_root_ref_resolves_the_object() -> None:
    schema = {
        "$ref": "#/$defs/Args",
        "$defs": {"Args": {"type": "object", "properties": {"q": {"type": "string"}}}},
    }
    assert [p.name for p in descriptor_from_json_schema("t", "", schema).parameters] == ["q"]


def test_descriptor_from_a_non_object_schema_is_a_schema_error() -> None:
    with pytest.raises(SchemaError, match="must be a JSON object schema, not string"):
        descriptor_from_json_schema("t", "", {"type": "string"})


# -- IR -> plain JSON Schema -----------------------------------------------------------------


def test_plain_jsonschema_rendering_of_a_tool() -> None:
    rendered = _jsonschema(optionality)
    assert rendered == {
        "name": "optionality",
        "description": "Three kinds of optional.",
        "parameters": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "a": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                "b": {"type": "integer", "default": 3},
                "c": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
            },
            "required": ["a"],
            "additionalProperties": False,
        },
    }


def test_tool_without_parameters_renders_an_empty_closed_object() -> None:
    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    assert _jsonschema(ping)["parameters"] == {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }


@pytest.mark.parametrize(
    "t", [optionality, enums, nested, grow, bounce, shapes, described, ClassSearch()], ids=repr
)
def test_rendered_schema_is_valid_json_schema_and_parses_back_to_itself(t: Any) -> None:
    parameters = _jsonschema(t)["parameters"]
    jsonschema.Draft202012Validator.check_schema(parameters)
    node, definitions = parse_json_schema(parameters)
    assert isinstance(node, Object)
    again = ToolDescriptor(name=t.name, parameters=node.properties, definitions=definitions)
    assert document_schema(again) == parameters
