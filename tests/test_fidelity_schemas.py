"""Issue 25, points 7, 8, 10, 12 and 14: what the model is shown is what the tool accepts.

7: building a tool reads only its classes' own source, and a JSON-Schema tool makes no
metaschema pass; 8: open objects are shown open and accept extra keys, closed ones refuse them
at every depth; 10: `pydantic.Field` as a default, and nested defaults shown; 12: a schema
given as JSON Schema is kept as given and its constraints reach the model; 14: types are
written where they are used (no `$ref` for what does not recurse).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import sys
from pathlib import Path
from typing import Any

import jsonschema
import msgspec
import pydantic
import pytest

from runtime import FailureKind, SchemaError, ToolCall, ToolDefinitionError, ToolRegistry, open_runtime, tool
from runtime.mcp._schema_tool import JsonSchemaTool
from runtime.schema import Object, descriptor_from_json_schema, render_tool
from runtime.schema import _docstring as docstring_module

NON_STRICT = ("openai", "openai-responses", "anthropic", "jsonschema", "mcp")


def _parameters(descriptor: Any, provider: str, strict: bool = False) -> dict[str, Any]:
    rendered = render_tool(descriptor, provider, strict=strict)
    if provider == "openai":
        return rendered["function"]["parameters"]  # type: ignore[no-any-return]
    if provider == "anthropic":
        return rendered["input_schema"]  # type: ignore[no-any-return]
    if provider == "mcp":
        return rendered["inputSchema"]  # type: ignore[no-any-return]
    return rendered["parameters"]  # type: ignore[no-any-return]


async def _call(t: Any, arguments: str | dict[str, Any]) -> Any:
    async with open_runtime(ToolRegistry([t]), tracing=False) as rt:
        return await rt.call(ToolCall(id="c1", name=t.name, arguments=arguments))


async def _echo(arguments: dict[str, Any], ctx: Any) -> str:
    return msgspec.json.encode(arguments).decode()


# -- 7. a tool's build reads its own classes, not their whole module ------------------------------


def _big_module(tmp_path: Path, lines: int = 4000) -> Any:
    out = ['"""A generated API module."""', "from __future__ import annotations", "import msgspec", ""]
    n = 0
    while len(out) < lines:
        out += [
            f"class Model{n}(msgspec.Struct):",
            f'    """Model {n}."""',
            "    name: str",
            '    """Its name."""',
            "",
        ]
        n += 1
    out += [
        "class Query(msgspec.Struct):",
        '    """What to search."""',
        "",
        "    text: str",
        '    """Words to look for."""',
        "    limit: int = 10",
        '    """How many hits."""',
        "",
        "    class Options(msgspec.Struct):",
        "        fuzzy: bool = False",
        '        """Allow typos."""',
        "",
        "    options: Query.Options | None = None",
        "",
    ]
    path = tmp_path / "big_generated_api.py"
    path.write_text("\n".join(out) + "\n")
    spec = importlib.util.spec_from_file_location("big_generated_api", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["big_generated_api"] = module
    spec.loader.exec_module(module)
    return module


def test_a_parameter_class_in_a_big_module_is_read_without_parsing_the_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = _big_module(tmp_path)
    assert Path(module.__file__).read_text().count("\n") >= 4000
    parsed: list[int] = []
    real_parse = ast.parse

    def parse(source: Any, *args: Any, **kwargs: Any) -> Any:
        parsed.append(len(source))
        return real_parse(source, *args, **kwargs)

    def getsource(obj: Any) -> str:  # the whole-module path must not be taken
        raise AssertionError(f"inspect.getsource({obj!r}) parses the whole module")

    monkeypatch.setattr(docstring_module.ast, "parse", parse)
    monkeypatch.setattr(docstring_module.inspect, "getsource", getsource)
    try:

        def search(query: Any, options: Any = None) -> list[str]:
            """Search."""
            return []

        search.__annotations__ = {"query": module.Query, "options": module.Query.Options | None}
        t = tool(search)
    finally:
        del sys.modules["big_generated_api"]
    query = t.descriptor.parameters[0].type
    assert {p.name: p.description for p in query.properties}["text"] == "Words to look for."
    options = t.descriptor.parameters[1].type.options[0]
    assert options.properties[0].description == "Allow typos."  # a nested class, found by its qualname
    assert parsed  # the classes were read ...
    assert max(parsed) < 1000  # ... each from its own few lines, never the 4,000-line module


def test_a_class_whose_source_cannot_be_placed_is_read_the_slow_way() -> None:
    def make() -> type:
        class Local(msgspec.Struct):
            value: int
            """The value."""

        return Local

    local = make()

    def use(x: Any) -> int:
        return 1

    use.__annotations__ = {"x": local, "return": int}  # a class made in a function has no module-level name
    use = tool(use)
    assert use.descriptor.parameters[0].type.properties[0].description == "The value."
    assert "<locals>" in local.__qualname__


class MarginDoc(msgspec.Struct):
    text: str
    """What to say.
This line of the docstring sits at the margin."""
    loud: bool = False
    """Shout it."""


def test_a_class_whose_text_sits_at_the_margin_is_still_read() -> None:
    @tool
    def say(what: MarginDoc) -> str:
        return what.text

    fields = {p.name: p.description for p in say.descriptor.parameters[0].type.properties}
    assert fields == {
        "text": "What to say. This line of the docstring sits at the margin.",
        "loud": "Shout it.",
    }


def test_a_module_with_an_encoding_cookie_is_read_in_its_encoding(tmp_path: Path) -> None:
    path = tmp_path / "latin_api.py"
    path.write_bytes(
        b"# -*- coding: latin-1 -*-\nimport msgspec\n\nclass Caf\xe9Query(msgspec.Struct):\n"
        b'    name: str\n    """The caf\xe9\'s name."""\n'
    )
    spec = importlib.util.spec_from_file_location("latin_api", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["latin_api"] = module
    try:
        spec.loader.exec_module(module)
        assert docstring_module.attribute_docs(module.CaféQuery) == {"name": "The café's name."}
    finally:
        del sys.modules["latin_api"]


def test_a_json_schema_tool_is_built_without_a_metaschema_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[Any] = []
    monkeypatch.setattr(
        jsonschema.Draft202012Validator, "check_schema", classmethod(lambda cls, s: checked.append(s))
    )
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    JsonSchemaTool("find", "Find.", schema, _echo)
    assert checked == []


def test_a_malformed_schema_is_still_refused_when_the_tool_is_made() -> None:
    with pytest.raises(SchemaError, match=r"unknown type 'strng'"):
        JsonSchemaTool("find", "Find.", {"type": "object", "properties": {"q": {"type": "strng"}}}, _echo)


async def test_a_schema_the_validator_cannot_use_fails_the_call_naming_the_problem() -> None:
    broken = JsonSchemaTool("find", "Find.", {"type": "object", "properties": {"q": {"pattern": "("}}}, _echo)
    result = await _call(broken, '{"q": "x"}')
    assert result.kind is FailureKind.REJECTED
    assert (
        "the tool's own input schema cannot be used to check a call: not a valid JSON Schema"
        in result.content
    )


# -- 8. open is shown open and accepts, closed refuses at every depth -----------------------------


OPEN_SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
CLOSED_SCHEMA = {
    "type": "object",
    "properties": {
        "q": {"type": "string"},
        "filter": {
            "type": "object",
            "properties": {"lang": {"type": "string"}},
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}


@pytest.mark.parametrize("provider", NON_STRICT)
async def test_an_open_json_schema_is_shown_open_and_its_tool_accepts_extra_keys(provider: str) -> None:
    t = JsonSchemaTool("find", "Find.", OPEN_SCHEMA, _echo)
    params = _parameters(t.descriptor, provider)
    assert "additionalProperties" not in params
    jsonschema.validate({"q": "tea", "lang": "en"}, params)
    result = await _call(t, '{"q": "tea", "lang": "en"}')
    assert result.ok
    assert msgspec.json.decode(result.content) == {"q": "tea", "lang": "en"}  # passed on, not dropped


@pytest.mark.parametrize("provider", NON_STRICT)
async def test_a_closed_json_schema_is_shown_closed_and_refuses_unknown_keys_at_every_depth(
    provider: str,
) -> None:
    t = JsonSchemaTool("find", "Find.", CLOSED_SCHEMA, _echo)
    params = _parameters(t.descriptor, provider)
    assert params["additionalProperties"] is False
    assert params["properties"]["filter"]["additionalProperties"] is False
    top = await _call(t, '{"q": "tea", "lang": "en"}')
    deep = await _call(t, '{"q": "tea", "filter": {"lang": "en", "year": 2020}}')
    assert "`$.lang`: unknown field" in top.content
    assert "`$.filter.year`: unknown field" in deep.content


class Closed(msgspec.Struct, forbid_unknown_fields=True):
    lang: str


class Open(msgspec.Struct):
    lang: str


@dataclasses.dataclass
class OpenDataclass:
    lang: str


@tool
def typed(closed: Closed, open_: Open, loose: OpenDataclass) -> str:
    """Find."""
    return f"{closed.lang} {open_.lang} {loose.lang}"


@pytest.mark.parametrize("provider", ["openai", "openai-responses", "anthropic", "jsonschema", "mcp"])
async def test_typed_objects_say_what_their_decoder_does_at_every_depth(provider: str) -> None:
    params = _parameters(typed.descriptor, provider)
    assert params["additionalProperties"] is False  # the arguments themselves are always closed
    assert params["properties"]["closed"]["additionalProperties"] is False
    assert "additionalProperties" not in params["properties"]["open_"]  # msgspec accepts extra keys
    assert "additionalProperties" not in params["properties"]["loose"]
    extra = '{"closed": {"lang": "en"}, "open_": {"lang": "de", "x": 1}, "loose": {"lang": "fr", "y": 2}}'
    jsonschema.validate(msgspec.json.decode(extra), params)
    assert (await _call(typed, extra)).content == "en de fr"
    refused = await _call(
        typed, '{"closed": {"lang": "en", "x": 1}, "open_": {"lang": "de"}, "loose": {"lang": "fr"}}'
    )
    assert refused.kind is FailureKind.INVALID_ARGUMENTS
    assert "`$.closed.x`: unknown field" in refused.content
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(
            {"closed": {"lang": "en", "x": 1}, "open_": {"lang": "de"}, "loose": {"lang": "fr"}}, params
        )


async def test_strict_mode_closes_every_object_and_everything_it_lets_the_model_send_is_accepted() -> None:
    # Strict mode has no open objects: the model can send only the declared keys, all of which
    # every tool accepts. What it can send is a subset of what the tool accepts, never more.
    for t in (typed, JsonSchemaTool("find", "Find.", OPEN_SCHEMA, _echo)):
        params = _parameters(t.descriptor, "openai", strict=True)
        assert params["additionalProperties"] is False
    params = _parameters(typed.descriptor, "openai", strict=True)
    sent = {"closed": {"lang": "en"}, "open_": {"lang": "de"}, "loose": {"lang": "fr"}}
    jsonschema.validate(sent, params)
    assert (await _call(typed, sent)).ok


class Loose(pydantic.BaseModel):
    q: str


class Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    q: str


@tool
def find(a: Loose, b: Strict) -> str:
    return ""


def test_a_pydantic_args_model_is_open_or_closed_as_its_config_says() -> None:
    params = _parameters(find.descriptor, "jsonschema")
    assert "additionalProperties" not in params["properties"]["a"]
    assert params["properties"]["b"]["additionalProperties"] is False
    find.decode_args('{"a": {"q": "x", "extra": 1}, "b": {"q": "y"}}')  # pydantic ignores it, as shown
    with pytest.raises(Exception, match=r"unknown field - at `\$\.b\.extra`"):
        find.decode_args('{"a": {"q": "x"}, "b": {"q": "y", "extra": 1}}')


# -- 10. pydantic.Field as a default; nested defaults ---------------------------------------------


@tool
def book(
    guests: int = pydantic.Field(..., gt=0, description="how many people"),
    nights: int = pydantic.Field(1, ge=1, le=30),
    notes: list[str] = pydantic.Field(default_factory=list, max_length=3),  # noqa: B008 - the point
) -> str:
    """Book a room."""
    return f"{guests} {nights} {notes}"


def test_a_pydantic_field_default_is_read_as_openai_agents_reads_it() -> None:
    params = _parameters(book.descriptor, "jsonschema")
    assert params["required"] == ["guests"]  # Field(...) is required, not a default of FieldInfo
    assert params["properties"]["guests"] == {
        "type": "integer",
        "exclusiveMinimum": 0,
        "description": "how many people",
    }
    assert params["properties"]["nights"] == {"type": "integer", "minimum": 1, "maximum": 30, "default": 1}
    assert params["properties"]["notes"]["default"] == []
    assert params["properties"]["notes"]["maxItems"] == 3


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"guests": 2}', "2 1 []"),
        ('{"guests": 2, "nights": 3, "notes": ["quiet"]}', "2 3 ['quiet']"),
        ("{}", "`$.guests`: required field is missing"),
        ('{"guests": 0}', "`$.guests`: Expected `int` >= 1"),
        ('{"guests": 1, "nights": 31}', "`$.nights`: Expected `int` <= 30"),
        ('{"guests": 1, "notes": ["a", "b", "c", "d"]}', "`$.notes`: Expected `array` of length <= 3"),
    ],
)
async def test_a_pydantic_field_defaults_constraints_are_enforced(arguments: str, expected: str) -> None:
    result = await _call(book, arguments)
    assert expected in result.content


def test_a_pydantic_field_alias_is_refused_at_definition() -> None:
    with pytest.raises(ToolDefinitionError, match=r"pydantic.Field\(alias='q'\) is not supported"):

        @tool
        def find(query: str = pydantic.Field(..., alias="q")) -> str:
            return query


class Page(msgspec.Struct):
    size: int = 20
    tags: list[str] = msgspec.field(default_factory=lambda: ["new"])


@dataclasses.dataclass
class Window:
    days: int = 7
    hours: list[int] = dataclasses.field(default_factory=lambda: [9, 17])


@tool
def browse(page: Page, window: Window) -> str:
    return ""


@pytest.mark.parametrize("provider", ["jsonschema", "openai-strict", "gemini", "anthropic"])
def test_the_defaults_of_nested_fields_are_shown(provider: str) -> None:
    strict = provider == "openai-strict"
    params = _parameters(browse.descriptor, "openai" if strict else provider, strict)
    page, window = params["properties"]["page"], params["properties"]["window"]
    if provider in ("jsonschema", "anthropic"):
        assert page["properties"]["size"]["default"] == 20
        assert page["properties"]["tags"]["default"] == ["new"]  # a default_factory's value
        assert window["properties"]["hours"]["default"] == [9, 17]
    else:  # no `default` keyword there: the description says it
        assert "(default: 20)" in page["properties"]["size"]["description"]
        assert '(default: ["new"])' in page["properties"]["tags"]["description"]
        assert "(default: [9,17])" in window["properties"]["hours"]["description"]


# -- 12. a schema given as JSON Schema -----------------------------------------------------------


EITHER = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "url": {"type": "string"},
        "depth": {"type": "integer"},
    },
    "required": ["depth"],
    "allOf": [{"anyOf": [{"required": ["path"]}, {"required": ["url"]}]}],
}


def test_an_any_of_of_required_names_inside_all_of_is_a_valid_schema_and_is_read() -> None:
    jsonschema.Draft202012Validator.check_schema(EITHER)
    d = descriptor_from_json_schema("fetch", "Fetch a page.", EITHER)
    assert [(p.name, p.required) for p in d.parameters] == [("path", False), ("url", False), ("depth", True)]
    assert d.notes == ("Requires `path` or `url`.",)


def test_required_names_stated_in_all_of_parts_are_kept() -> None:
    schema = {
        "type": "object",
        "properties": {"path": {"type": "string"}, "url": {"type": "string"}, "depth": {"type": "integer"}},
        "allOf": [{"required": ["depth"]}, {"oneOf": [{"required": ["path"]}, {"required": ["url"]}]}],
    }
    d = descriptor_from_json_schema("fetch", "Fetch.", schema)
    assert d.required == ("depth",)
    assert d.notes == ("Requires exactly one of `path` or `url`.",)
    rendered = render_tool(d, "anthropic")
    assert rendered["input_schema"]["required"] == ["depth"]


@pytest.mark.parametrize("provider", ["openai", "openai-responses", "anthropic", "gemini"])
def test_providers_shown_the_ir_keep_required_and_read_the_either_or_in_the_description(
    provider: str,
) -> None:
    t = JsonSchemaTool("fetch", "Fetch a page", EITHER, _echo)
    rendered = render_tool(t.descriptor, provider)
    function = rendered.get("function", rendered)
    assert function["description"] == "Fetch a page. Requires `path` or `url`."
    assert _parameters(t.descriptor, provider)["required"] == ["depth"]


@pytest.mark.parametrize("provider", ["mcp", "jsonschema"])
def test_mcp_and_jsonschema_are_the_schema_as_given(provider: str) -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {"point": {"$anchor": "pt", "type": "object", "properties": {"x": {"type": "number"}}}},
        "properties": {"at": {"$ref": "#pt"}, "near": {"$ref": "#/$defs/point", "description": "close by"}},
        "if": {"properties": {"at": {"type": "object"}}, "required": ["at"]},
        "then": {"required": ["near"]},
        **{k: v for k, v in EITHER.items() if k == "allOf"},
    }
    t = JsonSchemaTool("locate", "Locate.", schema, _echo)
    assert _parameters(t.descriptor, provider) == schema
    at, near = t.descriptor.parameters
    assert isinstance(at.type, Object)  # the IR followed the `$anchor` reference ...
    assert [p.name for p in at.type.properties] == ["x"]
    assert near.description == "close by"  # ... and kept the words beside a `$ref`


def test_keywords_beside_a_ref_apply_too() -> None:
    schema = {
        "$defs": {"base": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}},
        "$ref": "#/$defs/base",
        "properties": {"limit": {"type": "integer"}},
        "required": ["limit"],
    }
    d = descriptor_from_json_schema("list", "List.", schema)
    assert [(p.name, p.required) for p in d.parameters] == [("id", True), ("limit", True)]


def test_if_then_else_reaches_the_model_in_words() -> None:
    from conformance.server import SCHEMA_2020_12

    d = descriptor_from_json_schema("contact", "Contact someone.", SCHEMA_2020_12)
    assert d.notes == (
        "Requires `phone` or `email`.",
        'When `contactMethod` is "phone", `phone` is required. Otherwise, `email` is required.',
    )


async def test_strict_mode_lets_a_schema_tool_leave_out_optional_fields_at_every_depth() -> None:
    schema = {
        "type": "object",
        "properties": {"q": {"type": "string"}, "filter": {"$ref": "#/$defs/f"}},
        "required": ["q"],
        "$defs": {
            "f": {"type": "object", "properties": {"lang": {"type": "string"}, "year": {"type": "integer"}}}
        },
    }
    t = JsonSchemaTool("find", "Find.", schema, _echo)
    params = _parameters(t.descriptor, "openai", strict=True)
    sent = {"q": "tea", "filter": {"lang": None, "year": 2020}}
    jsonschema.validate(sent, params)  # strict mode lets the model say "not sent" deeper down too
    result = await _call(t, msgspec.json.encode(sent).decode())
    assert msgspec.json.decode(result.content) == {"q": "tea", "filter": {"year": 2020}}


# -- 14. what does not recurse is written where it is used ----------------------------------------


class Point(msgspec.Struct):
    x: int
    y: int


class Segment(msgspec.Struct):
    start: Point
    end: Point


class Tree(msgspec.Struct):
    value: int
    children: list[Tree] = []


@tool
def draw(segment: Segment, origin: Point, tree: Tree | None = None) -> str:
    return ""


@pytest.mark.parametrize("provider", ["mcp", "jsonschema", "openai", "anthropic"])
def test_only_recursive_types_are_references(provider: str) -> None:
    params = _parameters(draw.descriptor, provider)
    assert params["properties"]["origin"]["type"] == "object"  # used three times, written three times
    assert params["properties"]["segment"]["properties"]["start"]["type"] == "object"
    assert set(params["$defs"]) == {"Tree"}  # only what recurses is a definition
    text = msgspec.json.encode(params).decode()
    assert text.count('"$ref"') == 2  # the parameter and Tree.children
