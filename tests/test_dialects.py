"""Provider dialects: every tool definition is checked against the provider's own SDK types.

A corpus of tool signatures covers every IR node; each dialect's output for each of them is
validated with the official SDK (openai, anthropic, google-genai, mcp) and with recursive
rules over the whole schema tree: OpenAI strict objects are closed and fully required at
every depth, and the Gemini dialect never holds a keyword Gemini rejects. Random IR trees
(hypothesis) go through the same checks.
"""

import dataclasses
import datetime
import enum
import functools
import json
import string
from collections.abc import Iterator
from typing import Annotated, Any, Literal, NotRequired, TypedDict

import jsonschema
import mcp_types
import msgspec
import pydantic
import pytest
from anthropic.types import ToolParam
from google.genai import types as genai_types
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionToolParam
from openai.types.responses import FunctionToolParam

from runtime import Description, SimpleTool, Tool, ToolCall, ToolRegistry, open_runtime, tool
from runtime.schema import (
    DIALECTS,
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
    descriptor_from_json_schema,
    render_tool,
    strict_fallback_reason,
)
from runtime.schema._gemini import MAX_UNROLL, gemini_declaration
from runtime.schema._openai import STRICT_FORMATS
from runtime.schema._to_jsonschema import parameters_schema

# -- the corpus ----------------------------------------------------------------------------


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"
    BLUE = "blue"


class Priority(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Point(TypedDict):
    x: float
    y: float
    label: NotRequired[str]


@dataclasses.dataclass
class Style:
    """How a shape is drawn."""

    bold: bool = False
    size: Annotated[int, msgspec.Meta(ge=6, le=72)] = 12


class Node(msgspec.Struct):
    """A tree node."""

    value: int
    children: list["Node"] = []


class Folder(msgspec.Struct):
    name: str
    files: list["File"] = []


class File(msgspec.Struct):
    name: str
    parent: Folder | None = None


@tool
def search(query: Annotated[str, Description("What to look for")], limit: int = 10) -> str:
    """Search the index."""
    return f"{query}:{limit}"


@tool
def create_account(
    email: Annotated[str, msgspec.Meta(extra_json_schema={"format": "email"})],
    username: Annotated[str, msgspec.Meta(min_length=3, max_length=20, pattern="^[a-z]+$")],
    homepage: Annotated[str, msgspec.Meta(extra_json_schema={"format": "uri"})] = "",
    born: datetime.date | None = None,
) -> str:
    """Create an account: strings with formats, patterns and lengths."""
    return username


@tool
def resize(
    factor: Annotated[float, msgspec.Meta(gt=0, le=10)],
    steps: Annotated[int, msgspec.Meta(ge=0, lt=100, multiple_of=5)] = 5,
) -> float:
    """Numbers with inclusive and exclusive bounds."""
    return factor * steps


@tool
def toggle(flag: bool, reason: None = None) -> bool:
    """A boolean, and a parameter that can only be null."""
    return not flag


@tool
def store(key: str, value: Any) -> str:
    """Any JSON value."""
    return key


@tool
def tag(tags: list[str], pair: tuple[int, str], ids: frozenset[int] = frozenset()) -> int:
    """Lists, a tuple, a set (unique items)."""
    return len(tags)


@tool
def count(counts: dict[str, int]) -> int:
    """A map with typed values."""
    return sum(counts.values())


@tool
def annotate(meta: dict[str, Any], labels: dict[str, list[str]] | None = None) -> int:
    """A free-form object and a nullable map."""
    return len(meta)


@tool
def draw(origin: Point, style: Style, border: Style | None = None) -> str:
    """Nested TypedDict and dataclass objects, with defaults inside."""
    return "ok"


@tool
def walk(tree: Node, depth: int = 2) -> int:
    """A recursive Struct."""
    return tree.value


@tool
def browse(root: Folder) -> str:
    """Mutually recursive Structs."""
    return root.name


@tool
def paint(
    color: Color, shade: Literal["light", "dark"] = "light", separator: Literal["", ",", ";"] = ","
) -> str:
    """A string enum, a Literal, a Literal holding an empty string."""
    return color.value


@tool
def prioritize(
    levels: list[Priority],
    fallback: Priority = Priority.LOW,
    mode: Literal["auto", 0, 1, None] = "auto",
) -> int:
    """An int enum, enums in a list, a mixed Literal with null."""
    return len(levels)


@tool
def lookup(
    key: int | str,
    hint: str | None,
    fallback: float | None = None,
    fmt: int | str | bool = 0,
) -> str:
    """Unions of several types; `X | None` with and without a default."""
    return str(key)


@tool
def ping() -> str:
    """No parameters at all."""
    return "pong"


@tool
def matrix(rows: list[list[float]], grid: dict[str, list[Point]] | None = None) -> int:
    """Nested lists, and a map of lists of objects."""
    return len(rows)


class Section(msgspec.Struct):
    title: str
    body: str = ""
    level: Annotated[int, msgspec.Meta(ge=1, le=6)] = 2


class ReportArgs(msgspec.Struct):
    """Args of the report tool.

    Attributes:
        title: the report's title.
        sections: its sections, in order.
    """

    title: str
    sections: list[Section]
    draft: bool = True


class Report(Tool[ReportArgs, str]):
    """Write a report (a class tool with a Struct of nested Structs)."""

    async def execute(self, args: ReportArgs) -> str:
        return args.title


class NoteArgs(TypedDict):
    text: str
    pinned: NotRequired[bool]


class Note(SimpleTool[NoteArgs]):
    """Take a note (a TypedDict args class with a NotRequired key)."""

    async def execute(self, args: NoteArgs) -> str:
        return args["text"]


MCP_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "url": {"type": "string", "format": "uri", "description": "What to fetch"},
        "method": {"const": "GET"},
        "retries": {"type": "integer", "exclusiveMinimum": 0, "default": 3},
        "timeout": {"type": "number", "nullable": True},
        "headers": {"type": "object", "patternProperties": {"^x-": {"type": "string"}}},
        "body": {"oneOf": [{"type": "string"}, {"type": "object", "properties": {"json": {}}}]},
        "query": {"$ref": "#/$defs/Query"},
    },
    "required": ["url"],
    "$defs": {
        "Query": {
            "type": "object",
            "properties": {
                "field": {"type": "string"},
                "and": {"type": "array", "items": {"$ref": "#/$defs/Query"}},
            },
            "required": ["field"],
        }
    },
}

MCP_FETCH = descriptor_from_json_schema(
    "mcp_fetch",
    "Fetch a URL (an MCP tool's inputSchema).",
    MCP_SCHEMA,
    title="Fetch",
    annotations={"readOnlyHint": True, "openWorldHint": True},
    cache_control={"type": "ephemeral"},
    output=Object(
        properties=(
            ToolParameter(name="status", type=Integer()),
            ToolParameter(name="text", type=String(), required=False),
        ),
        additional=False,
    ),
)

FUNCTION_TOOLS = [
    search,
    create_account,
    resize,
    toggle,
    store,
    tag,
    count,
    annotate,
    draw,
    walk,
    browse,
    paint,
    prioritize,
    lookup,
    ping,
    matrix,
]
CORPUS: list[ToolDescriptor] = [
    *(t.descriptor for t in FUNCTION_TOOLS),
    Report().descriptor,
    Note().descriptor,
    MCP_FETCH,
]
IDS = [d.name for d in CORPUS]

# Tools strict mode cannot express (any JSON value, free-form keys): sent non-strict.
NOT_STRICT = {"store", "count", "annotate", "matrix", "mcp_fetch"}


# -- walking schemas -----------------------------------------------------------------------


def walk_schemas(schema: Any, path: str = "$") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every subschema of a JSON Schema (or Gemini Schema) dict, with its path."""
    if not isinstance(schema, dict):
        return
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from walk_schemas(sub, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            yield from walk_schemas(schema[key], f"{path}.{key}")
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        for i, sub in enumerate(schema.get(key, [])):
            yield from walk_schemas(sub, f"{path}.{key}[{i}]")
    for name, sub in schema.get("$defs", {}).items():
        yield from walk_schemas(sub, f"{path}.$defs.{name}")


def node_kinds(descriptor: ToolDescriptor) -> set[str]:
    kinds: set[str] = set()

    def visit(node: TypeNode | bool) -> None:
        if isinstance(node, bool):
            return
        kinds.add(type(node).__name__)
        if isinstance(node, Array):
            visit(node.items)
        elif isinstance(node, Object):
            for p in node.properties:
                visit(p.type)
            visit(node.additional)
        elif isinstance(node, Union):
            for o in node.options:
                visit(o)

    for p in descriptor.parameters:
        visit(p.type)
    for node in descriptor.definitions.values():
        visit(node)
    return kinds


STRICT_KEYWORDS = {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "anyOf",
    "enum",
    "description",
    "$ref",
    "$defs",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minItems",
    "maxItems",
}


def strict_problems(parameters: dict[str, Any]) -> list[str]:
    """Where a schema breaks OpenAI strict mode's rules (empty when it keeps them)."""
    problems = []
    for path, s in walk_schemas(parameters):
        kind = s.get("type")
        kinds = kind if isinstance(kind, list) else [kind]
        if "object" in kinds:
            if s.get("additionalProperties") is not False:
                problems.append(f"{path}: object not closed")
            if "properties" not in s or set(s.get("required", [])) != set(s["properties"]):
                problems.append(f"{path}: not every property is required")
        if not set(s) <= STRICT_KEYWORDS:
            problems.append(f"{path}: keywords strict mode rejects: {sorted(set(s) - STRICT_KEYWORDS)}")
        if "$ref" in s and len(s) > 1:
            problems.append(f"{path}: $ref with siblings")
        if "format" in s and s["format"] not in STRICT_FORMATS:
            problems.append(f"{path}: format {s['format']!r}")
        if not ({"type", "anyOf", "$ref", "enum"} & set(s)):
            problems.append(f"{path}: no type")
    return problems


GEMINI_REJECTS = {
    "additionalProperties",
    "$ref",
    "$defs",
    "ref",
    "defs",
    "const",
    "oneOf",
    "allOf",
    "not",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "uniqueItems",
    "patternProperties",
    "propertyNames",
    "prefixItems",
    "title",
    "default",
    "examples",
    "$schema",
}


def gemini_problems(parameters: dict[str, Any]) -> list[str]:
    """Where a Gemini `parameters` schema holds something Gemini rejects."""
    problems = []
    for path, s in walk_schemas(parameters):
        if bad := set(s) & GEMINI_REJECTS:
            problems.append(f"{path}: rejected keywords {sorted(bad)}")
        kind = s.get("type")
        if kind is None and "anyOf" not in s:
            problems.append(f"{path}: no type")
        if kind is not None and kind not in {"string", "integer", "number", "boolean", "array", "object"}:
            problems.append(f"{path}: type {kind!r}")
        for i, option in enumerate(s.get("anyOf", [])):
            if option.get("type") == "null":
                problems.append(f"{path}.anyOf[{i}]: null in anyOf")
        if "enum" in s and (kind != "string" or not all(isinstance(v, str) and v for v in s["enum"])):
            problems.append(f"{path}: enum of non-strings or empty strings {s['enum']!r}")
        if "format" in s and (kind != "string" or s["format"] not in {"date-time", "enum"}):
            problems.append(f"{path}: format {s['format']!r}")
        if kind == "array" and "items" not in s:
            problems.append(f"{path}: array without items")
        if ("properties" in s or "required" in s) and kind != "object":
            problems.append(f"{path}: properties on a {kind}")
        if "properties" in s and not s["properties"]:
            problems.append(f"{path}: empty properties")
        if not set(s.get("required", [])) <= set(s.get("properties", {})):
            problems.append(f"{path}: required names a missing property")
    return problems


# -- SDK validation ------------------------------------------------------------------------


def materialize(value: Any) -> Any:
    """Consume the lazy iterators pydantic returns for `Iterable` fields (so they validate)."""
    if isinstance(value, dict):
        return {k: materialize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [materialize(v) for v in value]
    if isinstance(value, str | bytes | int | float | bool) or value is None:
        return value
    if hasattr(value, "__iter__") and not hasattr(value, "model_dump"):
        return [materialize(v) for v in value]
    return value


@functools.cache
def adapter(param_type: Any) -> pydantic.TypeAdapter[Any]:
    return pydantic.TypeAdapter(param_type)


def validate_typed_dict(param_type: Any, value: dict[str, Any]) -> None:
    """Validate with the SDK's TypedDict and check that no key was dropped as unknown."""
    validated = materialize(adapter(param_type).validate_python(value, strict=True))
    assert validated == value


def check_sdk(provider: str, tool_def: dict[str, Any], *, meta: bool = True) -> None:
    """Validate with the provider's SDK; `meta` also checks the JSON Schema against its metaschema."""
    check_schema = jsonschema.Draft202012Validator.check_schema if meta else (lambda _: None)
    if provider == "openai":
        validate_typed_dict(ChatCompletionToolParam, tool_def)
        check_schema(tool_def["function"]["parameters"])
    elif provider == "openai-responses":
        validate_typed_dict(FunctionToolParam, tool_def)
        check_schema(tool_def["parameters"])
    elif provider == "anthropic":
        validate_typed_dict(ToolParam, tool_def)
        check_schema(tool_def["input_schema"])
    elif provider == "gemini":
        declaration = genai_types.FunctionDeclaration.model_validate(tool_def)  # extra="forbid"
        assert declaration.name == tool_def["name"]
        if "parameters" in tool_def:
            assert gemini_problems(tool_def["parameters"]) == []
        genai_types.Tool.model_validate({"function_declarations": [tool_def]})
    elif provider == "mcp":
        mcp_tool = mcp_types.Tool.model_validate(tool_def)
        assert mcp_tool.model_dump(by_alias=True, exclude_none=True) == tool_def  # nothing ignored
        check_schema(tool_def["inputSchema"])
    else:
        check_schema(tool_def["parameters"])


def strict_parameters(provider: str, tool_def: dict[str, Any]) -> dict[str, Any]:
    return tool_def["function"]["parameters"] if provider == "openai" else tool_def["parameters"]


def strict_flag(provider: str, tool_def: dict[str, Any]) -> Any:
    return tool_def["function"].get("strict") if provider == "openai" else tool_def["strict"]


# -- tests ---------------------------------------------------------------------------------


def test_the_corpus_covers_every_ir_node() -> None:
    covered = set().union(*(node_kinds(d) for d in CORPUS))
    every = {
        c.__name__
        for c in (String, Integer, Number, Boolean, Null, AnyValue, Array, Object, Union, Enum, Ref)
    }
    assert covered == every
    assert len(CORPUS) >= 15


def test_every_provider_of_the_contract_has_a_dialect() -> None:
    assert set(DIALECTS) == {"openai", "openai-responses", "anthropic", "gemini", "mcp", "jsonschema"}


@pytest.mark.parametrize("strict", [False, True], ids=["loose", "strict"])
@pytest.mark.parametrize("provider", sorted(DIALECTS))
@pytest.mark.parametrize("descriptor", CORPUS, ids=IDS)
def test_every_dialect_is_accepted_by_the_providers_sdk(
    descriptor: ToolDescriptor, provider: str, strict: bool
) -> None:
    check_sdk(provider, render_tool(descriptor, provider, strict=strict))


@pytest.mark.parametrize("provider", ["openai", "openai-responses"])
@pytest.mark.parametrize("descriptor", CORPUS, ids=IDS)
def test_openai_strict_objects_are_closed_and_fully_required_at_every_depth(
    descriptor: ToolDescriptor, provider: str
) -> None:
    tool_def = render_tool(descriptor, provider, strict=True)
    parameters = strict_parameters(provider, tool_def)
    if descriptor.name in NOT_STRICT:
        # Documented degradation: that one tool goes non-strict, with the plain schema.
        assert strict_flag(provider, tool_def) is False
        assert parameters == parameters_schema(descriptor)
        assert strict_fallback_reason(descriptor)
    else:
        assert strict_flag(provider, tool_def) is True
        assert strict_fallback_reason(descriptor) is None
        assert strict_problems(parameters) == []


def test_strict_fallback_names_the_parameter_and_the_reason() -> None:
    assert strict_fallback_reason(store.descriptor) == (
        "$.value accepts any JSON value, which strict mode cannot describe"
    )
    assert strict_fallback_reason(count.descriptor) == (
        "$.counts is a map with free-form keys, which strict mode cannot describe"
    )


@pytest.mark.parametrize("descriptor", CORPUS, ids=IDS)
def test_non_strict_openai_tools_send_the_plain_schema(descriptor: ToolDescriptor) -> None:
    chat = render_tool(descriptor, "openai")
    assert chat == {
        "type": "function",
        "function": {
            "name": descriptor.name,
            "description": descriptor.description,
            "parameters": parameters_schema(descriptor),
        },
    }
    responses = render_tool(descriptor, "openai-responses")
    assert responses["strict"] is False  # the Responses API reads a missing flag as strict
    assert responses["parameters"] == parameters_schema(descriptor)


def test_strict_mode_keeps_defaults_in_the_schema() -> None:
    params = render_tool(search.descriptor, "openai", strict=True)["function"]["parameters"]
    assert params["required"] == ["query", "limit"]
    assert params["properties"]["limit"] == {"type": ["integer", "null"], "description": "(default: 10)"}
    assert params["properties"]["query"] == {"type": "string", "description": "What to look for"}
    jsonschema.validate({"query": "tea", "limit": None}, params)
    jsonschema.validate({"query": "tea", "limit": 3}, params)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"query": "tea"}, params)


async def test_a_null_for_a_defaulted_parameter_decodes_to_its_default() -> None:
    async with open_runtime(ToolRegistry([search]), tracing=False) as rt:
        defaulted, given_ = await rt.call_many(
            [
                ToolCall(id="c1", name="search", arguments='{"query": "tea", "limit": null}'),
                ToolCall(id="c2", name="search", arguments='{"query": "tea", "limit": 3}'),
            ]
        )
    assert defaulted.ok
    assert defaulted.content == "tea:10"
    assert given_.ok
    assert given_.content == "tea:3"


def test_strict_mode_offers_null_for_a_key_without_default_and_null_leaves_it_out() -> None:
    # A NotRequired key has no default: strict mode makes it required, so null must mean "not sent"
    # (issue 25, point 2), or the model would have to invent a value.
    note = Note()
    params = render_tool(note.descriptor, "openai", strict=True)["function"]["parameters"]
    assert params["properties"]["pinned"] == {"type": ["boolean", "null"]}
    assert params["required"] == ["text", "pinned"]
    assert note.decode_args('{"text": "hi", "pinned": false}') == {"text": "hi", "pinned": False}
    assert note.decode_args('{"text": "hi", "pinned": null}') == {"text": "hi"}


def test_strict_mode_makes_nested_defaulted_fields_nullable_and_states_their_defaults() -> None:
    # One level down the rule is the top level's: required, nullable, the default in words
    # (before, `bold` was a required non-null boolean: the model had to pick a value).
    params = render_tool(draw.descriptor, "openai", strict=True)["function"]["parameters"]
    style = params["properties"]["style"]
    assert style["required"] == ["bold", "size"]
    assert style["properties"]["bold"] == {"type": ["boolean", "null"], "description": "(default: false)"}
    assert style["properties"]["size"] == {
        "type": ["integer", "null"],
        "minimum": 6,
        "maximum": 72,
        "description": "(default: 12)",
    }
    border = params["properties"]["border"]  # top level, nullable already: null is a value
    assert border["anyOf"][-1] == {"type": "null"}
    assert border["description"].endswith("(default: null)")


def test_strict_mode_moves_rejected_keywords_into_the_description() -> None:
    params = render_tool(create_account.descriptor, "openai", strict=True)["function"]["parameters"]
    props = params["properties"]
    assert props["email"] == {"type": "string", "format": "email"}
    assert props["username"] == {
        "type": "string",
        "pattern": "^[a-z]+$",
        "description": "(minLength: 3) (maxLength: 20)",
    }
    assert props["homepage"] == {"type": ["string", "null"], "description": '(format: uri) (default: "")'}
    tag_params = render_tool(tag.descriptor, "openai", strict=True)["function"]["parameters"]
    assert "items must be unique" in tag_params["properties"]["ids"]["description"]


def test_strict_mode_splits_mixed_enums_by_type() -> None:
    params = render_tool(prioritize.descriptor, "openai", strict=True)["function"]["parameters"]
    mode = params["properties"]["mode"]
    assert {"type": "string", "enum": ["auto"]} in mode["anyOf"]
    assert {"type": "integer", "enum": [0, 1]} in mode["anyOf"]
    assert {"type": "null"} in mode["anyOf"]
    assert params["properties"]["levels"]["items"] == {"type": "integer", "enum": [1, 2]}


def test_strict_mode_keeps_recursive_types_as_closed_definitions() -> None:
    params = render_tool(walk.descriptor, "openai", strict=True)["function"]["parameters"]
    node = params["$defs"]["Node"]
    assert node["additionalProperties"] is False
    assert node["required"] == ["value", "children"]
    children = node["properties"]["children"]  # defaulted, so nullable (null: the default applies)
    assert children["anyOf"] == [{"type": "array", "items": {"$ref": "#/$defs/Node"}}, {"type": "null"}]


def test_registry_schemas_are_rendered_once_per_provider_and_flag() -> None:
    registry = ToolRegistry([search, ping])
    first = registry.schemas("openai", strict=True)
    assert registry.schemas("openai", strict=True) is first
    assert registry.schemas("openai") is not first
    assert [t["function"]["name"] for t in first] == ["search", "ping"]


# -- gemini --------------------------------------------------------------------------------


def test_gemini_uses_nullable_instead_of_null() -> None:
    params = gemini_declaration(lookup.descriptor)["parameters"]
    assert params["properties"]["hint"] == {"type": "string", "nullable": True}
    assert params["properties"]["fallback"] == {
        "type": "number",
        "nullable": True,
        "description": "(default: null)",
    }
    assert params["required"] == ["key", "hint"]


def test_gemini_renders_unions_of_several_types_as_any_of() -> None:
    params = gemini_declaration(lookup.descriptor)["parameters"]
    assert params["properties"]["key"] == {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    # google-genai's own Schema model has any_of:
    assert genai_types.Schema.model_validate(params["properties"]["key"]).any_of is not None


def test_gemini_degrades_enums_that_are_not_non_empty_strings() -> None:
    params = gemini_declaration(prioritize.descriptor)["parameters"]["properties"]
    assert params["levels"]["items"] == {"type": "integer", "description": "(one of: 1, 2)"}
    mode = params["mode"]
    assert mode["nullable"] is True
    assert {"type": "string", "enum": ["auto"]} in mode["anyOf"]
    assert {"type": "integer", "description": "(one of: 0, 1)"} in mode["anyOf"]
    separator = gemini_declaration(paint.descriptor)["parameters"]["properties"]["separator"]
    assert separator == {"type": "string", "description": '(one of: "", ",", ";") (default: ",")'}


def test_gemini_unrolls_recursive_types_then_cuts_them_with_a_note() -> None:
    tree = gemini_declaration(walk.descriptor)["parameters"]["properties"]["tree"]
    levels = 0
    node = tree
    while "children" in node["properties"]:
        levels += 1
        node = node["properties"]["children"]["items"]
    assert levels == MAX_UNROLL
    assert node["properties"] == {"value": {"type": "integer"}}
    assert "cannot go deeper" in node["description"]


def test_gemini_cuts_mutual_recursion_too() -> None:
    params = gemini_declaration(browse.descriptor)["parameters"]
    assert gemini_problems(params) == []
    assert "cannot go deeper" in json.dumps(params)


def test_gemini_turns_integer_exclusive_bounds_into_inclusive_ones() -> None:
    params = gemini_declaration(resize.descriptor)["parameters"]["properties"]
    assert params["steps"] == {
        "type": "integer",
        "minimum": 0,
        "maximum": 99,
        "description": "(a multiple of 5) (default: 5)",
    }
    assert params["factor"] == {
        "type": "number",
        "minimum": 0,
        "maximum": 10,
        "description": "(greater than 0)",
    }


def test_gemini_describes_maps_and_any_values_it_cannot_type() -> None:
    props = gemini_declaration(count.descriptor)["parameters"]["properties"]
    assert props["counts"] == {
        "type": "object",
        "description": "(a JSON object with any keys, each value integer)",
    }
    value = gemini_declaration(store.descriptor)["parameters"]["properties"]["value"]
    assert value["nullable"] is True
    assert [o["type"] for o in value["anyOf"]] == ["string", "number", "boolean"]


def test_gemini_keeps_date_time_and_describes_other_formats() -> None:
    props = gemini_declaration(create_account.descriptor)["parameters"]["properties"]
    assert props["email"] == {"type": "string", "description": "(format: email)"}
    assert props["username"] == {"type": "string", "pattern": "^[a-z]+$", "minLength": 3, "maxLength": 20}


def test_gemini_omits_parameters_for_a_tool_without_any() -> None:
    assert gemini_declaration(ping.descriptor) == {"name": "ping", "description": "No parameters at all."}


# -- anthropic and mcp ---------------------------------------------------------------------


def test_anthropic_tool_carries_cache_control_when_asked() -> None:
    tool_def = render_tool(MCP_FETCH, "anthropic")
    assert tool_def["cache_control"] == {"type": "ephemeral"}
    assert tool_def["input_schema"] == parameters_schema(MCP_FETCH)
    assert "cache_control" not in render_tool(search.descriptor, "anthropic")


def test_mcp_tool_carries_title_annotations_and_an_object_output_schema() -> None:
    tool_def = render_tool(MCP_FETCH, "mcp")
    assert tool_def["title"] == "Fetch"
    assert tool_def["annotations"] == {"readOnlyHint": True, "openWorldHint": True}
    assert tool_def["outputSchema"]["type"] == "object"
    assert tool_def["outputSchema"]["required"] == ["status"]
    parsed = mcp_types.Tool.model_validate(tool_def)
    assert parsed.annotations is not None
    assert parsed.annotations.read_only_hint is True
    plain = render_tool(search.descriptor, "mcp")
    assert set(plain) == {"name", "description", "inputSchema"}


def test_mcp_output_schema_wraps_a_result_that_is_not_an_object() -> None:
    descriptor = ToolDescriptor(name="n", output=Integer())
    assert render_tool(descriptor, "mcp")["outputSchema"] == {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"result": {"type": "integer"}},
        "required": ["result"],
        "x-fastmcp-wrap-result": True,
    }


# -- random IR trees -----------------------------------------------------------------------

_NAMES = st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=6)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.floats(-5, 5, allow_nan=False).filter(lambda f: not f.is_integer()),
    st.text(alphabet="ab ", max_size=3),
)
_BOUND = st.none() | st.integers(-10, 10)


def _leaves() -> st.SearchStrategy[TypeNode]:
    return st.one_of(
        st.builds(
            String,
            format=st.sampled_from([None, "email", "uri", "date-time", "uuid"]),
            pattern=st.sampled_from([None, "^a", "(?=x)"]),
            min_length=st.none() | st.integers(0, 3),
            max_length=st.none() | st.integers(3, 9),
        ),
        st.builds(
            Integer,
            minimum=_BOUND,
            maximum=_BOUND,
            exclusive_minimum=_BOUND,
            exclusive_maximum=_BOUND,
            multiple_of=st.none() | st.integers(1, 4),
        ),
        st.builds(Number, minimum=_BOUND, exclusive_maximum=_BOUND),
        st.just(Boolean()),
        st.just(Null()),
        st.just(AnyValue()),
        st.lists(_SCALARS, min_size=1, max_size=4, unique_by=lambda v: (type(v), v)).map(
            lambda vs: Enum(values=tuple(vs))
        ),
        st.just(Ref(name="Node")),
    )


def _params(children: st.SearchStrategy[TypeNode]) -> st.SearchStrategy[tuple[ToolParameter, ...]]:
    param = st.builds(
        ToolParameter,
        name=_NAMES,
        type=children,
        required=st.booleans(),
        description=st.none() | st.just("about it"),
    )
    return st.lists(param, max_size=3, unique_by=lambda p: p.name).map(tuple)


def _union(options: list[TypeNode]) -> TypeNode:
    flat: list[TypeNode] = []
    for o in options:
        if isinstance(o, AnyValue):
            return o
        for x in o.options if isinstance(o, Union) else (o,):
            if x not in flat:
                flat.append(x)
    return flat[0] if len(flat) == 1 else Union(options=tuple(flat))


_TYPES = st.recursive(
    _leaves(),
    lambda children: st.one_of(
        st.builds(Array, items=children, min_items=st.none() | st.integers(0, 2), unique_items=st.booleans()),
        st.builds(
            Object,
            properties=_params(children),
            additional=st.booleans() | children,
            description=st.none() | st.just("a thing"),
        ),
        st.lists(children, min_size=2, max_size=3).map(_union),
    ),
    max_leaves=10,
)

_NODE_DEFINITION = Object(
    properties=(
        ToolParameter(name="value", type=Integer()),
        ToolParameter(name="children", type=Array(items=Ref(name="Node")), required=False, default=[]),
    ),
    additional=True,
)

_DESCRIPTORS = _params(_TYPES).map(
    lambda params: ToolDescriptor(
        name="random", description="random", parameters=params, definitions={"Node": _NODE_DEFINITION}
    )
)


@pytest.mark.filterwarnings("ignore:Generating overly large repr")  # IR trees have long reprs
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(descriptor=_DESCRIPTORS)
def test_random_ir_trees_render_to_what_every_provider_accepts(descriptor: ToolDescriptor) -> None:
    for provider in DIALECTS:
        for strict in (False, True):
            tool_def = render_tool(descriptor, provider, strict=strict)
            check_sdk(provider, tool_def, meta=False)  # the metaschema check is slow; the corpus has it
            if strict and provider.startswith("openai") and strict_flag(provider, tool_def):
                assert strict_problems(strict_parameters(provider, tool_def)) == []
