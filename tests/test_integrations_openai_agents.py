"""runtime.integrations.openai_agents under the SDK's own agent loop and its own test model.

`agents.testing.ScriptedModel` (a `Model` that answers scripted turns, no network) asks for the
tool calls; `Runner.run` invokes our `FunctionTool`s, which run them through the runtime.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, RunConfig, Runner, default_tool_error_function, set_trace_processors, trace
from agents.strict_schema import ensure_strict_json_schema
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.tool_context import ToolContext
from integrations_support import EVENTS, TOOLS, Otel, names, ran_in_parallel
from opentelemetry.trace import StatusCode

from runtime import FailureKind, ToolCall
from runtime.embed import RuntimeThread, open_asyncio_runtime
from runtime.integrations.openai_agents import OpenTelemetryTracingProcessor, ToolCallFailed, function_tools


@pytest.fixture(autouse=True)
def _no_sdk_exporter() -> Iterator[None]:
    """The SDK's default processor exports to OpenAI's backend: never in tests."""
    EVENTS.clear()
    set_trace_processors([])
    yield
    set_trace_processors([])


def outputs(model: ScriptedModel, turn: int = 1) -> dict[str, str]:
    """The tool outputs the model read on `turn`, by call id."""
    call = model.calls[turn]
    return {
        item["call_id"]: item["output"]
        for item in call.input
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }


def offered(model: ScriptedModel) -> list[str]:
    return sorted(t.name for t in model.calls[0].tools)


def test_an_agent_runs_parallel_calls_and_reads_our_failures_as_tool_errors() -> None:
    otel = Otel()

    async def main() -> tuple[ScriptedModel, Any]:
        async with open_asyncio_runtime(TOOLS, tracing=otel.tracing()) as rt:
            model = ScriptedModel(
                [
                    [
                        function_call("overlap", {"label": "a"}, call_id="c1"),
                        function_call("overlap", {"label": "b"}, call_id="c2"),
                        function_call("add", '{"a": 1, "b": 2}', call_id="c3"),
                        function_call("boom", {}, call_id="c4"),
                        function_call("positive", {"n": -1}, call_id="c5"),
                        function_call("add", {"a": "one", "b": 2}, call_id="c6"),
                        function_call("sleepy", {}, call_id="c7"),
                    ],
                    [assistant_message("all done")],
                ]
            )
            agent = Agent(name="assistant", model=model, tools=function_tools(rt, exclude={"secret"}))
            result = await Runner.run(agent, "go")
            return model, result

    model, result = asyncio.run(main())
    assert result.final_output == "all done"
    assert offered(model) == ["add", "boom", "overlap", "positive", "sleepy"]
    read = outputs(model)
    assert read["c1"] == "done a"
    assert read["c2"] == "done b"
    assert ran_in_parallel("a", "b")
    assert read["c3"] == "3"
    assert read["c4"] == "Error: tool 'boom' raised ValueError: the backend is on fire"
    assert read["c5"] == "Error: n must be positive, got -1"
    assert read["c6"].startswith("Error: ")
    assert "$.a" in read["c6"]
    assert read["c7"] == "Error: tool 'sleepy' did not finish within 0.05s"
    # the runtime's spans carry the SDK's call ids
    ours = {s.attributes["gen_ai.tool.call.id"]: s for s in otel.ours() if s.attributes}
    assert sorted(ours) == ["c1", "c2", "c3", "c4", "c5", "c6", "c7"]
    assert ours["c4"].status.status_code is StatusCode.ERROR


def test_a_hidden_tool_is_not_offered_and_its_call_never_reaches_the_runtime() -> None:
    async def main() -> tuple[ScriptedModel, Any]:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            model = ScriptedModel([[function_call("secret", {}, call_id="s1")], [assistant_message("fine")]])
            agent = Agent(name="assistant", model=model, tools=function_tools(rt, only={"add", "boom"}))
            config = RunConfig(tool_not_found_behavior="return_error_to_model")
            result = await Runner.run(agent, "go", run_config=config)
            assert rt.statistics().tools["secret"].calls == 0
            return model, result

    model, result = asyncio.run(main())
    assert offered(model) == ["add", "boom"]
    assert outputs(model)["s1"] == "Tool 'secret' not found."
    assert result.final_output == "fine"
    assert "secret ran" not in EVENTS


def test_only_must_name_tools_the_runtime_has() -> None:
    async def main() -> None:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            with pytest.raises(ValueError, match="no tool named 'ad'; did you mean 'add'"):
                function_tools(rt, only={"ad"})

    asyncio.run(main())


def test_our_spans_nest_under_the_sdk_trace_mirrored_as_opentelemetry() -> None:
    otel = Otel()
    set_trace_processors([OpenTelemetryTracingProcessor(tracer_provider=otel.provider)])

    async def main() -> None:
        async with open_asyncio_runtime(TOOLS, tracing=otel.tracing()) as rt:
            model = ScriptedModel(
                [
                    [
                        function_call("add", {"a": 2, "b": 3}, call_id="c1"),
                        function_call("boom", {}, call_id="c2"),
                    ],
                    [assistant_message("done")],
                ]
            )
            agent = Agent(name="assistant", model=model, tools=function_tools(rt))
            with trace("checkout workflow"):
                await Runner.run(agent, "go")

    asyncio.run(main())
    add_span, boom_span = otel.one("execute_tool add"), otel.one("execute_tool boom")
    assert otel.ancestors(add_span) == [
        "function add",
        "turn 1",
        "agent assistant",
        "task Agent workflow",
        "checkout workflow",
    ]
    assert otel.ancestors(boom_span) == [
        "function boom",
        "turn 1",
        "agent assistant",
        "task Agent workflow",
        "checkout workflow",
    ]
    assert len({s.context.trace_id for s in otel.spans}) == 1
    # the SDK's function span of the failed call carries the failure, as it does for its own errors
    function_boom = otel.one("function boom")
    assert function_boom.status.status_code is StatusCode.ERROR
    assert otel.one("function add").status.status_code is StatusCode.UNSET


def test_without_the_processor_our_spans_nest_under_the_current_opentelemetry_span() -> None:
    otel = Otel()
    tracer = otel.provider.get_tracer("app")

    async def main() -> None:
        async with open_asyncio_runtime(TOOLS, tracing=otel.tracing()) as rt:
            model = ScriptedModel(
                [[function_call("add", {"a": 2, "b": 3}, call_id="c1")], [assistant_message("done")]]
            )
            agent = Agent(name="assistant", model=model, tools=function_tools(rt))
            with tracer.start_as_current_span("handle request"):
                await Runner.run(agent, "go")

    asyncio.run(main())
    assert otel.ancestors(otel.one("execute_tool add")) == ["handle request"]
    assert names(otel.spans) == ["execute_tool add", "handle request"]


def test_a_failure_error_function_chooses_the_text_the_model_reads() -> None:
    seen: list[ToolCallFailed] = []
    chosen: list[str] = []

    def hide_details(ctx: Any, error: Exception) -> str:
        assert isinstance(error, ToolCallFailed)
        seen.append(error)
        chosen.append(default_tool_error_function(ctx, error))  # the SDK's own words (they change)
        return chosen[-1]

    async def main() -> ScriptedModel:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            model = ScriptedModel([[function_call("boom", {}, call_id="c1")], [assistant_message("ok")]])
            tools = function_tools(rt, failure_error_function=hide_details)
            await Runner.run(Agent(name="assistant", model=model, tools=tools), "go")
            return model

    model = asyncio.run(main())
    assert outputs(model)["c1"] == chosen[0]
    assert chosen[0].startswith("An error occurred while running the tool")  # not the failure's text
    assert [e.failure.kind for e in seen] == [FailureKind.ERROR]
    assert seen[0].failure.call_id == "c1"


def test_the_schema_is_our_openai_dialect_and_the_sdk_keeps_it_as_it_is() -> None:
    async def main() -> None:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            for strict in (True, False):
                tools = {t.name: t for t in function_tools(rt, strict=strict)}
                for schema in rt.registry.schemas("openai", strict=strict):
                    function = schema["function"]
                    made = tools[function["name"]]
                    assert made.params_json_schema == function["parameters"]
                    assert made.strict_json_schema is bool(function.get("strict", False))
                    if made.strict_json_schema:
                        assert (
                            ensure_strict_json_schema(json.loads(json.dumps(function["parameters"])))
                            == (function["parameters"])
                        )

    asyncio.run(main())


def test_a_runtime_thread_serves_the_agent_too() -> None:
    with RuntimeThread(TOOLS, tracing=False) as rt:

        async def main() -> ScriptedModel:
            model = ScriptedModel(
                [
                    [
                        function_call("overlap", {"label": "x"}, call_id="c1"),
                        function_call("overlap", {"label": "y"}, call_id="c2"),
                        function_call("positive", {"n": 0}, call_id="c3"),
                    ],
                    [assistant_message("ok")],
                ]
            )
            await Runner.run(Agent(name="assistant", model=model, tools=function_tools(rt)), "go")
            return model

        model = asyncio.run(main())
    read = outputs(model)
    assert read == {"c1": "done x", "c2": "done y", "c3": "Error: n must be positive, got 0"}
    assert ran_in_parallel("x", "y")


def test_on_invoke_tool_called_directly_passes_the_arguments_as_they_are() -> None:
    async def main() -> None:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            (add_tool,) = function_tools(rt, only={"add"})
            ctx = ToolContext(
                context=None, tool_name="add", tool_call_id="x1", tool_arguments='{"a":4,"b":5}'
            )
            assert await add_tool.on_invoke_tool(ctx, '{"a":4,"b":5}') == "9"
            (boom_tool,) = function_tools(rt, only={"boom"})
            assert await boom_tool.on_invoke_tool(ctx, "") == (
                "Error: tool 'boom' raised ValueError: the backend is on fire"
            )  # empty arguments are no arguments, as for the SDK's own tools
            text = await add_tool.on_invoke_tool(ctx, "{not json")
            assert text.startswith("Error: ")
            assert "JSON" in text
            assert (await rt.call(ToolCall(id="d", name="add", arguments='{"a":1,"b":1}'))).content == "2"

    asyncio.run(main())


# -- tool search ---------------------------------------------------------------------------


def test_an_agent_searches_the_runtime_and_the_tools_found_are_enabled_next_turn() -> None:
    from runtime.search import ToolSearch

    async def main() -> tuple[ScriptedModel, Any]:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            model = ScriptedModel(
                [
                    [function_call("search_tools", {"query": "accept only positive numbers"}, call_id="s1")],
                    [function_call("search_tools", {"limit": 3}, call_id="s2")],
                    [function_call("positive", {"n": 3}, call_id="p1")],
                    [assistant_message("done")],
                ]
            )
            found = function_tools(rt, exclude={"secret"}, search=ToolSearch(threshold=2, always=["add"]))
            agent = Agent(name="assistant", model=model, tools=found)
            return model, await Runner.run(agent, "go")

    model, result = asyncio.run(main())
    assert result.final_output == "done"
    turns = [[t.name for t in call.tools] for call in model.calls]
    assert turns[0] == ["search_tools", "add"]
    assert turns[1] == turns[2] == ["search_tools", "add", "positive"]
    read = outputs(model, 3)
    assert read["s1"].splitlines() == [
        "Found 1 tool; they are loaded, call them by name:",
        "- positive: Accept only positive numbers (a sync tool: it runs in a worker thread).",
    ]
    assert read["s2"].startswith("Error: search_tools takes one argument, 'query'")
    assert read["p1"] == "3"


def test_a_search_finds_no_tool_the_list_hides() -> None:
    from runtime.search import ToolSearch

    async def main() -> ScriptedModel:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            model = ScriptedModel(
                [
                    [function_call("search_tools", {"query": "launch codes secret"}, call_id="s1")],
                    [assistant_message("done")],
                ]
            )
            hidden = function_tools(rt, exclude={"secret"}, search=ToolSearch(threshold=2))
            await Runner.run(Agent(name="assistant", model=model, tools=hidden), "go")
            return model

    model = asyncio.run(main())
    assert outputs(model)["s1"] == "No tool matches 'launch codes secret'; search again with other words."
    assert "secret" not in [t.name for t in model.calls[1].tools]
