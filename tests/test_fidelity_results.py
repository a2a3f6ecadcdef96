"""Issue 25, points 5 and 9: what comes back is what was declared, and a call that ran is not lost.

5: a result msgspec cannot encode goes through the tool's encoder hook, else each object's
`str()`: a success, never an ERROR after the side effects were done. 9: a result is checked
against the declared return type; for a tool declared `strict_result=True` a mismatch is ERROR
naming both, so an MCP client (the official SDK's, which validates `structuredContent` against
`outputSchema`) never gets a structured result that disagrees with the schema it was given.
(By default such a value reaches the model as returned: tests/test_loose_results.py.)
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Any

import msgspec
import pydantic
import pytest
import trio
from mcp import Client
from mcp.client._memory import InMemoryTransport

from runtime import (
    FailureKind,
    SimpleTool,
    Tool,
    ToolCall,
    ToolRegistry,
    ToolSet,
    open_runtime,
    tool,
)
from runtime.mcp._server import ServedRuntime
from runtime.schema import render_tool
from tests.fidelity_placed import Reading, measure, miscounted

LIMIT = 20


async def _call(t: Any, arguments: str = "{}") -> Any:
    async with open_runtime(ToolRegistry([t]), tracing=False) as rt:
        return await rt.call(ToolCall(id="c1", name=t.name, arguments=arguments))


# -- 5. a result msgspec cannot encode ------------------------------------------------------------


class Meter:
    def __init__(self) -> None:
        self.calls = 0


meter = Meter()


@tool
def read_meter() -> dict[str, Any]:
    """Read the meter (a side effect: the count goes up)."""
    meter.calls += 1
    return {"reading": Reading(2.5), "ratio": Fraction(1, 3), "more": ..., "count": meter.calls}


async def test_an_unencodable_result_is_a_success_made_of_each_objects_text() -> None:
    before = meter.calls
    result = await _call(read_meter)
    assert result.ok, result.content
    assert meter.calls == before + 1  # it ran once, and its result was not thrown away
    assert msgspec.json.decode(result.content) == {
        "reading": "reading 2.5",
        "ratio": "1/3",
        "more": "Ellipsis",
        "count": before + 1,
    }
    assert result.value == msgspec.json.decode(result.content)  # the value is that JSON form too
    msgspec.msgpack.encode(result)  # so the result crosses a process boundary


@tool(encoder=lambda obj: obj.value if isinstance(obj, Reading) else float(obj))
def read_precisely() -> dict[str, Any]:
    """Read the meter, numbers as numbers."""
    return {"reading": Reading(2.5), "ratio": Fraction(1, 4)}


async def test_the_tools_encoder_hook_gives_objects_their_json_form() -> None:
    result = await _call(read_precisely)
    assert result.content == '{"reading":2.5,"ratio":0.25}'
    assert result.value == {"reading": 2.5, "ratio": 0.25}


def _only_readings(obj: Any) -> Any:
    if isinstance(obj, Reading):
        return {"value": obj.value}
    raise NotImplementedError  # anything else: its str()


class Meters(ToolSet):
    @tool(encoder=_only_readings)
    def both(self) -> list[Any]:
        """A reading and a fraction."""
        return [Reading(1.0), Fraction(2, 3)]


@dataclasses.dataclass
class NoArgs:
    pass


class GaugeTool(Tool[NoArgs, list[Any]]):
    """A class tool with an encoder method."""

    name = "gauge"

    def encoder(self, obj: Any) -> Any:
        return f"<{type(obj).__name__}>"

    async def execute(self, args: NoArgs) -> list[Any]:
        return [Reading(1.0)]


async def test_an_encoder_that_declines_leaves_the_object_to_its_str() -> None:
    (both,) = Meters().tools()
    assert (await _call(both)).content == '[{"value":1.0},"2/3"]'
    assert (await _call(GaugeTool())).content == '["<Reading>"]'


async def test_an_unencodable_result_made_in_a_worker_process_comes_back_as_a_success() -> None:
    with trio.fail_after(LIMIT):
        result = await _call(measure)
    assert result.ok, result.content
    assert msgspec.json.decode(result.content) == {
        "reading": "reading 2.5",
        "ratio": "1/3",
        "more": "Ellipsis",
    }


# -- 9. a result is checked against the declared return type --------------------------------------


@tool(strict_result=True)
async def search(query: str, limit: int = 10) -> list[str]:
    """Search the documentation (the README's first example, with its `...` body)."""
    ...


class Forecast(msgspec.Struct):
    city: str
    celsius: float


@tool(strict_result=True)
def forecast(city: str, broken: bool = False) -> Forecast:
    """The weather."""
    return Forecast(city=city, celsius="warm" if broken else 21.5)  # type: ignore[arg-type]


class Hit(pydantic.BaseModel):
    title: str
    score: float


@tool(strict_result=True)
def best(query: str, broken: bool = False) -> Hit:
    """The best hit, a pydantic model."""
    if broken:
        return {"title": query}  # type: ignore[return-value]
    return Hit(title=query, score=0.9)


@tool
def count(words: str) -> int:
    return len(words.split())


@pytest.mark.parametrize(
    ("t", "arguments", "message"),
    [
        (
            search,
            '{"query": "trio"}',
            "tool 'search' returned None, which is not its declared result type `list[str]` (Expected `array`, got `null`)",
        ),
        (
            forecast,
            '{"city": "Oslo", "broken": true}',
            "tool 'forecast' returned a value of type `Forecast`, which is not its declared result type `Forecast` (Expected `float`, got `str` - at `$.celsius`)",
        ),
        (
            best,
            '{"query": "q", "broken": true}',
            "tool 'best' returned a value of type `dict`, which is not its declared result type `Hit` (required field is missing - at `$.score`)",
        ),
    ],
)
async def test_under_strict_result_a_result_not_of_its_declared_type_is_an_error_naming_both(
    t: Any, arguments: str, message: str
) -> None:
    result = await _call(t, arguments)
    assert result.kind is FailureKind.ERROR
    assert result.message == message
    assert result.error_type == "runtime.exceptions.ResultTypeError"


async def test_results_of_their_declared_type_pass_as_they_are() -> None:
    fine = await _call(forecast, '{"city": "Oslo"}')
    assert fine.value == Forecast(city="Oslo", celsius=21.5)  # the value itself, not a copy
    hit = await _call(best, '{"query": "q"}')
    assert hit.value == Hit(title="q", score=0.9)
    assert hit.content == '{"title":"q","score":0.9}'
    assert (await _call(count, '{"words": "a b c"}')).content == "3"


async def test_under_strict_result_a_mismatch_made_in_a_worker_process_is_an_error_naming_it() -> None:
    with trio.fail_after(LIMIT):
        result = await _call(miscounted)
    assert result.kind is FailureKind.ERROR
    assert (
        "not its declared result type `list[int]` (Expected `int`, got `str` - at `$[0]`)" in result.content
    )


async def test_a_simple_tool_still_gives_any_result_as_its_text() -> None:
    class Echo(SimpleTool[NoArgs]):
        name = "echo"

        async def execute(self, args: NoArgs) -> str:
            return 42  # type: ignore[return-value]

    assert (await _call(Echo())).content == "42"


async def test_over_mcp_the_official_client_gets_the_mismatch_as_a_tool_error_never_bad_structured_content() -> (
    None
):
    with trio.fail_after(LIMIT):
        async with open_runtime([search, forecast, best], tracing=False) as rt:
            served = ServedRuntime(rt)
            async with Client(InMemoryTransport(served.server), mode="legacy") as client:
                listed = {t.name: t for t in (await client.list_tools()).tools}
                assert listed["search"].output_schema is not None
                assert listed["best"].output_schema == render_tool(best.descriptor, "mcp")["outputSchema"]
                # The SDK client checks structuredContent against outputSchema and raises when they
                # disagree ("Invalid structured content"): these calls must not make it raise.
                broken = await client.call_tool("search", {"query": "trio"})
                assert broken.is_error is True
                assert broken.structured_content is None
                assert "declared result type `list[str]`" in broken.content[0].text  # type: ignore[union-attr]
                wrong = await client.call_tool("forecast", {"city": "Oslo", "broken": True})
                assert wrong.is_error is True
                good = await client.call_tool("forecast", {"city": "Oslo"})
                assert (good.is_error, good.structured_content) == (False, {"city": "Oslo", "celsius": 21.5})
                model = await client.call_tool("best", {"query": "q"})
                assert (model.is_error, model.structured_content) == (False, {"title": "q", "score": 0.9})
