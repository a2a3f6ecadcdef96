"""Issue 25, points 1, 2 and 6: what a model may write under the schema it was shown is what the tool accepts."""

from __future__ import annotations

import functools
from typing import Any, NotRequired, TypedDict

import jsonschema
import msgspec
import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionToolParam

from runtime import FailureKind, Tool, ToolCall, ToolRegistry, open_runtime, tool
from runtime.mcp._schema_tool import JsonSchemaTool
from runtime.schema import render_tool


class Box(msgspec.Struct):
    width: int
    height: float = 1.0


@tool
def place(count: int, sizes: list[int], by_name: dict[str, int], box: Box, code: int | str = 0) -> str:
    """Place boxes."""
    return f"{count!r} {sizes!r} {by_name!r} {box.width!r} {box.height!r} {code!r}"


async def _content(t: Any, arguments: str | dict[str, Any]) -> Any:
    async with open_runtime(ToolRegistry([t]), tracing=False) as rt:
        return await rt.call(ToolCall(id="c1", name=t.name, arguments=arguments))


# -- 1. an integral float is an integer, as JSON Schema says --------------------------------------


INTEGRAL = '{"count": 5.0, "sizes": [1.0, 2, 3e0], "by_name": {"a": 2.0, "b": 3}, "box": {"width": 4.0, "height": 2.0}, "code": 7.0}'


async def test_an_int_parameter_accepts_an_integral_float_at_every_depth() -> None:
    result = await _content(place, INTEGRAL)
    assert result.ok, result.content
    assert result.content == "5 [1, 2, 3] {'a': 2, 'b': 3} 4 2.0 7"  # ints where ints were declared


async def test_an_integral_float_is_accepted_in_already_parsed_arguments_too() -> None:
    arguments = msgspec.json.decode(INTEGRAL)  # Anthropic and Gemini send an object
    result = await _content(place, arguments)
    assert result.ok, result.content
    assert result.content == "5 [1, 2, 3] {'a': 2, 'b': 3} 4 2.0 7"
    assert arguments["count"] == 5.0
    assert type(arguments["count"]) is float


@pytest.mark.parametrize(
    ("arguments", "path"),
    [
        ('{"count": 5.5, "sizes": [], "by_name": {}, "box": {"width": 1}}', "$.count"),
        ('{"count": 5, "sizes": [1.0, 2.5], "by_name": {}, "box": {"width": 1}}', "$.sizes[1]"),
        ('{"count": 5, "sizes": [], "by_name": {}, "box": {"width": 1.25}}', "$.box.width"),
    ],
)
async def test_a_float_with_a_fraction_is_still_refused_with_its_path(arguments: str, path: str) -> None:
    result = await _content(place, arguments)
    assert result.kind is FailureKind.INVALID_ARGUMENTS
    assert f"`{path}`: Expected `int`, got `float`" in result.content


async def test_a_numeric_string_is_not_an_integer() -> None:
    # JSON Schema's integer is a number: "5" stays refused (msgspec's lax mode would take it).
    result = await _content(place, '{"count": "5", "sizes": [], "by_name": {}, "box": {"width": 1}}')
    assert result.kind is FailureKind.INVALID_ARGUMENTS
    assert "`$.count`: Expected `int`, got `str`" in result.content


async def _echo(arguments: dict[str, Any], ctx: Any) -> str:
    return repr(sorted(arguments.items()))


async def test_typed_and_json_schema_tools_agree_on_integral_floats() -> None:
    schema = render_tool(place.descriptor, "jsonschema")["parameters"]
    as_schema = JsonSchemaTool("place", "Place boxes.", schema, _echo)
    jsonschema.validate(msgspec.json.decode(INTEGRAL), schema)  # what the model was shown allows it
    typed, untyped = await _content(place, INTEGRAL), await _content(as_schema, INTEGRAL)
    assert typed.ok
    assert untyped.ok


@tool
def repeat(times: int) -> int:
    return times


@given(st.integers(min_value=-(2**53), max_value=2**53))
def test_any_integral_float_decodes_to_the_same_int(n: int) -> None:
    args = repeat.decode_args(f'{{"times": {float(n)!r}}}')
    assert args.times == n
    assert type(args.times) is int


# -- 2. OpenAI strict mode: an optional parameter without a default is nullable, null = omitted ----


NOTES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "text": {"type": "string"},
        "tag": {"type": "string", "description": "a label"},
        "priority": {"type": "integer"},
    },
    "required": ["text"],
}


async def _keys(arguments: dict[str, Any], ctx: Any) -> str:
    return ",".join(sorted(arguments))


class NoteArgs(TypedDict):
    text: str
    tag: NotRequired[str]
    priority: NotRequired[int]


class TypedNote(Tool[NoteArgs, str]):
    name = "note"

    async def execute(self, args: NoteArgs) -> str:
        return ",".join(sorted(args))


@functools.cache
def _openai_tool() -> pydantic.TypeAdapter[Any]:
    return pydantic.TypeAdapter(ChatCompletionToolParam)


@pytest.mark.parametrize("kind", ["json-schema", "typed"])
async def test_strict_mode_never_makes_the_model_invent_an_optional_value(kind: str) -> None:
    t: Any = (
        JsonSchemaTool("note", "Take a note.", NOTES_SCHEMA, _keys) if kind == "json-schema" else TypedNote()
    )
    rendered = render_tool(t.descriptor, "openai", strict=True)
    _openai_tool().validate_python(rendered, strict=True)  # the SDK's own type
    assert rendered["function"]["strict"] is True
    params = rendered["function"]["parameters"]
    assert params["required"] == ["text", "tag", "priority"]  # strict: every property required
    assert params["properties"]["tag"]["type"] == ["string", "null"]
    assert params["properties"]["priority"]["type"] == ["integer", "null"]
    # A ground-truth call that leaves the optional parameters out, as strict mode has the model write it:
    call = {"text": "buy tea", "tag": None, "priority": None}
    jsonschema.validate(call, params)
    result = await _content(t, msgspec.json.encode(call).decode())
    assert result.ok, result.content
    assert result.content == "text"  # null is "not sent": the tool never sees the key
    given_ = await _content(t, '{"text": "buy tea", "tag": "home", "priority": 2}')
    assert given_.content == "priority,tag,text"


async def test_a_nullable_optional_parameter_keeps_its_null() -> None:
    schema = {"type": "object", "properties": {"tag": {"type": ["string", "null"]}}}
    t = JsonSchemaTool("tagged", "Tag.", schema, _echo)
    params = render_tool(t.descriptor, "openai", strict=True)["function"]["parameters"]
    assert params["properties"]["tag"]["type"] == ["string", "null"]
    result = await _content(t, '{"tag": null}')
    assert result.content == "[('tag', None)]"  # null is a value here, not "omitted"


# -- 6. a non-empty mutable default -------------------------------------------------------------


@tool
def label(names: list[str] = ["a", "b"], weights: dict[str, int] = {"a": 1}) -> str:  # noqa: B006 - the point
    """Label things."""
    names.append("changed")  # a call that mutates its default must not change the next call's
    weights["z"] = 0
    return f"{names} {sorted(weights)}"


async def test_a_non_empty_list_default_is_accepted_and_copied_per_call() -> None:
    params = render_tool(label.descriptor, "jsonschema")["parameters"]["properties"]
    assert params["names"]["default"] == ["a", "b"]
    assert params["weights"]["default"] == {"a": 1}
    async with open_runtime(ToolRegistry([label]), tracing=False) as rt:
        first, second, null = await rt.call_many(
            [
                ToolCall(id="c1", name="label", arguments="{}"),
                ToolCall(id="c2", name="label", arguments="{}"),
                ToolCall(id="c3", name="label", arguments='{"names": null, "weights": null}'),
            ]
        )
    assert first.content == second.content == null.content == "['a', 'b', 'changed'] ['a', 'z']"


def test_a_mutable_struct_default_is_copied_per_call() -> None:
    @tool
    def sized(box: Box = Box(width=1)) -> int:  # noqa: B008 - the point
        box.width += 1
        return box.width

    assert sized.decode_args("{}").box == Box(width=1)
    sized.decode_args("{}").box.width = 99
    assert sized.decode_args("{}").box == Box(width=1)
