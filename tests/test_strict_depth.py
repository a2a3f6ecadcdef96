"""OpenAI strict mode at every depth (issue 46): a property the model may leave out is rendered
required and nullable one, two and three levels down (objects, arrays of objects, union options,
`$ref`/`$defs`), for typed tools and remote JSON Schemas alike; the OpenAI SDK's own strict rules
leave the schema as it is; and a null sent there is read as "not sent", so the default applies
(or the key stays out), before the tool or the MCP server sees the arguments.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import jsonschema
import msgspec
import pydantic
import pytest
import trio
from openai.lib._parsing._completions import validate_input_tools
from openai.lib._pydantic import _ensure_strict_json_schema
from openai.types.chat import ChatCompletionFunctionToolParam
from openai.types.responses import FunctionToolParam

from runtime import ToolCall, ToolRegistry, open_runtime, tool
from runtime import mcp as rmcp
from runtime.exceptions import InvalidArguments
from runtime.mcp import JsonSchemaTool
from runtime.schema import render_tool

SERVERS = Path(__file__).parent / "mcp_servers"
LIMIT = 30


# -- a typed tool: optional fields at depths 1, 2 and 3 --------------------------------------


class Leaf(msgspec.Struct):
    """Depth 3 (inside an array of objects inside an object inside a TypedDict)."""

    id: int
    note: str = "none"


@dataclasses.dataclass
class Mid:
    """Depth 2."""

    leaves: list[Leaf]
    size: int = 2


class Top(TypedDict):
    """Depth 1: a key without a default (left out when null)."""

    mid: Mid
    label: NotRequired[str]


class Tree(msgspec.Struct):
    """A recursive type: rendered once in `$defs`, referred to by `$ref`."""

    name: str
    tag: str = "-"
    kids: list[Tree] = []


class Choice(pydantic.BaseModel):
    """A pydantic model below the top level (validated by pydantic)."""

    kind: str
    weight: float = 1.0


@tool
def nest(top: Top, either: Leaf | str, tree: Tree, choice: Choice | None = None, top_level: int = 9) -> str:
    """Report what the arguments decoded to."""
    return repr((top, either, tree, choice, top_level))


ALL_NULL = {
    "top": {"mid": {"leaves": [{"id": 1, "note": None}], "size": None}, "label": None},
    "either": {"id": 2, "note": None},
    "tree": {"name": "root", "tag": None, "kids": [{"name": "kid", "tag": None, "kids": None}]},
    "choice": {"kind": "k", "weight": None},
    "top_level": None,
}
DEFAULTS = (
    {"mid": Mid(leaves=[Leaf(id=1, note="none")], size=2)},
    Leaf(id=2, note="none"),
    Tree(name="root", tag="-", kids=[Tree(name="kid", tag="-", kids=[])]),
    Choice(kind="k", weight=1.0),
    9,
)


# -- a remote JSON Schema: the same shapes, as a server writes them ---------------------------

NEST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "$defs": {
        "leaf": {
            "type": "object",
            "properties": {"id": {"type": "integer"}, "note": {"type": "string"}},
            "required": ["id"],
        },
        "tree": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "tag": {"type": "string"},
                "kids": {"type": "array", "items": {"$ref": "#/$defs/tree"}},
            },
            "required": ["name"],
        },
    },
    "properties": {
        "top": {
            "type": "object",
            "properties": {
                "label": {"type": "string"},
                "mid": {
                    "type": "object",
                    "properties": {
                        "size": {"type": "integer", "default": 2},
                        "leaves": {"type": "array", "items": {"$ref": "#/$defs/leaf"}},
                    },
                    "required": ["leaves"],
                },
            },
            "required": ["mid"],
        },
        "either": {"anyOf": [{"$ref": "#/$defs/leaf"}, {"type": "string"}]},
        "tree": {"$ref": "#/$defs/tree"},
        "top_level": {"type": "integer"},
    },
    "required": ["top", "either", "tree"],
}
REMOTE_NULL = {k: v for k, v in ALL_NULL.items() if k != "choice"}
REMOTE_SENT = {
    "top": {"mid": {"leaves": [{"id": 1}]}},
    "either": {"id": 2},
    "tree": {"name": "root", "kids": [{"name": "kid"}]},
}

# (path, what is there) of every property that may be left out, in the strict schemas below:
# the depth is the number of objects above it.
TYPED_OPTIONAL = [
    ("properties.top.properties.label", 2),
    ("properties.top.properties.mid.properties.size", 3),
    ("properties.top.properties.mid.properties.leaves.items.properties.note", 4),
    ("properties.either.anyOf.0.properties.note", 2),
    ("$defs.Tree.properties.tag", 2),
    ("$defs.Tree.properties.kids", 2),
    ("properties.choice.anyOf.0.properties.weight", 2),
    ("properties.top_level", 1),
]
REMOTE_OPTIONAL = [
    ("properties.top.properties.label", 2),
    ("properties.top.properties.mid.properties.size", 3),
    ("properties.top.properties.mid.properties.leaves.items.properties.note", 4),
    ("properties.either.anyOf.0.properties.note", 2),
    ("$defs.tree.properties.tag", 2),
    ("$defs.tree.properties.kids", 2),
    ("properties.top_level", 1),
]


def remote_tool() -> JsonSchemaTool:
    async def run(arguments: dict[str, Any], ctx: Any) -> str:
        return json.dumps(arguments, sort_keys=True)

    return JsonSchemaTool("nest", "Report the arguments.", NEST_SCHEMA, run)


def at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    node: Any = schema
    for part in path.split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def parent_object(schema: dict[str, Any], path: str) -> dict[str, Any]:
    parent = ".".join(path.split(".")[:-2])  # drop "properties.<name>"
    return at(schema, parent) if parent else schema


def admits_null(node: dict[str, Any]) -> bool:
    kind = node.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    return any(admits_null(o) for o in node.get("anyOf", []))


def strict_tool(descriptor: Any, provider: str = "openai") -> dict[str, Any]:
    return render_tool(descriptor, provider, strict=True)


# -- rendering -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "optional"),
    [(lambda: nest, TYPED_OPTIONAL), (remote_tool, REMOTE_OPTIONAL)],
    ids=["typed", "remote"],
)
def test_optional_properties_at_every_depth_are_required_and_nullable(make: Any, optional: Any) -> None:
    parameters = strict_tool(make().descriptor)["function"]["parameters"]
    depths = set()
    for path, depth in optional:
        node = at(parameters, path)
        name = path.rsplit(".", 1)[1]
        assert admits_null(node), f"{path} is not nullable: {node}"
        assert name in parent_object(parameters, path)["required"], f"{path} is not required"
        depths.add(depth)
    assert {2, 3, 4} <= depths  # one, two and three levels below the arguments
    assert "$ref" in json.dumps(parameters)  # the recursive type stays a reference


@pytest.mark.parametrize("make", [lambda: nest, remote_tool], ids=["typed", "remote"])
@pytest.mark.parametrize("provider", ["openai", "openai-responses"])
def test_the_openai_sdk_strict_rules_accept_the_schema_as_it_is(make: Any, provider: str) -> None:
    rendered = strict_tool(make().descriptor, provider)
    if provider == "openai":
        assert rendered["function"]["strict"] is True
        validate_input_tools([rendered])  # the SDK's check before it parses strict tool calls
        pydantic.TypeAdapter(ChatCompletionFunctionToolParam).validate_python(rendered, strict=True)
        parameters = rendered["function"]["parameters"]
    else:
        assert rendered["strict"] is True
        pydantic.TypeAdapter(FunctionToolParam).validate_python(rendered, strict=True)
        parameters = rendered["parameters"]
    # What the SDK does to a schema to make it strict changes nothing: it already is.
    again = copy.deepcopy(parameters)
    assert _ensure_strict_json_schema(again, path=(), root=again) == parameters
    jsonschema.Draft202012Validator.check_schema(parameters)


@pytest.mark.parametrize(
    ("make", "arguments"), [(lambda: nest, ALL_NULL), (remote_tool, REMOTE_NULL)], ids=["typed", "remote"]
)
def test_the_strict_schema_accepts_a_null_for_every_optional_property(make: Any, arguments: Any) -> None:
    parameters = strict_tool(make().descriptor)["function"]["parameters"]
    jsonschema.validate(arguments, parameters)


# -- decoding --------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["text", "mapping"])
def test_typed_tool_reads_nulls_at_every_depth_as_not_sent(form: str) -> None:
    raw: Any = json.dumps(ALL_NULL) if form == "text" else copy.deepcopy(ALL_NULL)
    args = nest.decode_args(raw)
    assert (args.top, args.either, args.tree, args.choice, args.top_level) == DEFAULTS
    assert "label" not in args.top  # a key without a default stays out
    if form == "mapping":
        assert raw == ALL_NULL  # the caller's mapping is left as it was


def test_a_null_where_the_type_admits_it_stays_a_value_and_a_required_one_is_refused() -> None:
    args = nest.decode_args({**ALL_NULL, "choice": None})
    assert args.choice is None  # `Choice | None`: null is a value
    wrong = copy.deepcopy(ALL_NULL)
    wrong["top"]["mid"]["leaves"][0]["id"] = None  # required: not "not sent"
    with pytest.raises(Exception, match=r"Expected `int`, got `null` - at `\$\.top\.mid\.leaves\[0\]\.id`"):
        nest.decode_args(json.dumps(wrong))


async def test_a_typed_tool_called_with_strict_nulls_runs_with_its_defaults() -> None:
    async with open_runtime(ToolRegistry([nest]), tracing=False) as rt:
        result = await rt.call(ToolCall(id="c1", name="nest", arguments=json.dumps(ALL_NULL)))
    assert result.ok, result.content
    assert result.value == repr(DEFAULTS)


async def test_a_schema_tool_drops_strict_nulls_at_every_depth() -> None:
    async with open_runtime(ToolRegistry([remote_tool()]), tracing=False) as rt:
        result = await rt.call(ToolCall(id="c1", name="nest", arguments=json.dumps(REMOTE_NULL)))
    assert result.ok, result.content
    assert json.loads(result.value) == REMOTE_SENT


@pytest.fixture
def nest_server(tmp_path: Path) -> rmcp.ServerSpec:
    listing = tmp_path / "tools.json"
    listing.write_text(json.dumps([{"name": "nest", "description": "Nest.", "inputSchema": NEST_SCHEMA}]))
    return rmcp.stdio(sys.executable, [str(SERVERS / "mutable.py"), str(listing)], mode="legacy", name="m")


async def test_an_mcp_tool_is_rendered_strict_at_every_depth_and_its_server_never_sees_the_nulls(
    nest_server: rmcp.ServerSpec,
) -> None:
    with trio.fail_after(LIMIT):
        async with open_runtime(mcp_servers=[nest_server], tracing=False) as rt:
            (rendered,) = [
                t for t in rt.registry.schemas("openai", strict=True) if t["function"]["name"] == "nest"
            ]
            parameters = rendered["function"]["parameters"]
            for path, _ in REMOTE_OPTIONAL:
                assert admits_null(at(parameters, path)), path
            jsonschema.validate(REMOTE_NULL, parameters)
            result = await rt.call(ToolCall(id="c1", name="nest", arguments=json.dumps(REMOTE_NULL)))
    assert result.ok, result.content
    assert result.value == {"tool": "nest", "arguments": REMOTE_SENT}


# -- a union whose options a value fits alike: no branch is guessed ---------------------------


def _union_tool(*options: dict[str, Any]) -> JsonSchemaTool:
    schema = {"type": "object", "properties": {"p": {"anyOf": list(options)}}, "required": ["p"]}
    return JsonSchemaTool("pick", "Pick.", schema, _echo)


async def _echo(arguments: dict[str, Any], ctx: Any) -> str:
    return json.dumps(arguments)


X_INT = {"type": "object", "properties": {"x": {"type": "integer"}}}
Y_INT = {"type": "object", "properties": {"y": {"type": "integer"}}}


def test_a_strict_null_is_dropped_where_two_open_options_fit_and_only_one_names_it() -> None:
    assert _union_tool(X_INT, Y_INT).decode_args('{"p": {"x": null}}') == {"p": {}}
    assert _union_tool(Y_INT, X_INT).decode_args('{"p": {"x": null}}') == {"p": {}}  # order is no matter


def test_a_null_stays_where_any_fitting_option_lets_the_property_be_null() -> None:
    nullable = {"type": "object", "properties": {"x": {"type": ["integer", "null"]}}}
    assert _union_tool(X_INT, nullable).decode_args('{"p": {"x": null}}') == {"p": {"x": None}}


def test_a_null_stays_where_every_option_naming_the_property_requires_it() -> None:
    one = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    other = {"type": "object", "properties": {"x": {"type": "integer"}, "y": {}}, "required": ["x"]}
    with pytest.raises(InvalidArguments, match=r"is not valid under any of the given schemas - at `\$\.p`"):
        _union_tool(one, other).decode_args('{"p": {"x": null}}')  # a null, not "not sent": refused


def test_options_that_fit_alike_are_read_together_one_level_further_down() -> None:
    deep_a = {
        "type": "object",
        "properties": {"q": {"type": "object", "properties": {"a": {"type": "integer"}}}},
    }
    deep_b = {
        "type": "object",
        "properties": {"q": {"type": "object", "properties": {"b": {"type": "string"}}}},
    }
    tool = _union_tool(deep_a, deep_b)
    assert tool.decode_args('{"p": {"q": {"a": null, "b": null}}}') == {"p": {"q": {}}}
    assert tool.decode_args('{"p": {"q": {"a": 1, "b": null}}}') == {"p": {"q": {"a": 1}}}


def test_a_tag_still_picks_the_one_option_a_value_is() -> None:
    cat = {"type": "object", "properties": {"kind": {"const": "cat"}, "x": {"type": "integer"}}}
    dog = {"type": "object", "properties": {"kind": {"const": "dog"}, "x": {"type": ["integer", "null"]}}}
    tool = _union_tool(cat, dog)
    assert tool.decode_args('{"p": {"kind": "cat", "x": null}}') == {"p": {"kind": "cat"}}
    assert tool.decode_args('{"p": {"kind": "dog", "x": null}}') == {"p": {"kind": "dog", "x": None}}


def test_arrays_of_two_kinds_of_open_object_drop_the_strict_nulls_of_their_items() -> None:
    tool = _union_tool({"type": "array", "items": X_INT}, {"type": "array", "items": Y_INT})
    assert tool.decode_args('{"p": [{"x": null}, {"y": 2, "x": null}]}') == {"p": [{}, {"y": 2}]}
