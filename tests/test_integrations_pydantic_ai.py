"""runtime.integrations.pydantic_ai under pydantic-ai's own agent and its own test models.

`FunctionModel` scripts the model's turns (parallel tool calls, then an answer that reads what
came back); `TestModel` calls every tool with arguments it makes from our schemas.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from integrations_support import EVENTS, TOOLS, Otel, ran_in_parallel
from opentelemetry.trace import StatusCode
from pydantic_ai import Agent, InstrumentationSettings
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.exceptions import UnexpectedModelBehavior
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from runtime import FailureKind
from runtime.embed import RuntimeThread, open_asyncio_runtime
from runtime.integrations.pydantic_ai import RuntimeToolset


@pytest.fixture(autouse=True)
def _clear() -> None:
    EVENTS.clear()


class Script:
    """A FunctionModel's function: the first turn asks for `calls`, the next answers "done"."""

    def __init__(self, *calls: ToolCallPart) -> None:
        self.calls = calls
        self.seen: list[list[ModelMessage]] = []
        self.offered: list[str] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.seen.append(list(messages))
        if len(self.seen) == 1:
            self.offered = sorted(t.name for t in info.function_tools)
            return ModelResponse(parts=list(self.calls))
        return ModelResponse(parts=[TextPart("done")])

    def answers(self) -> dict[str, Any]:
        """What the model read back on its second turn, by call id: returns and retry prompts."""
        last = self.seen[1][-1]
        assert isinstance(last, ModelRequest)
        return {
            part.tool_call_id: part
            for part in last.parts
            if isinstance(part, ToolReturnPart | RetryPromptPart)
        }


def test_an_agent_runs_parallel_calls_and_our_failures_are_its_tool_errors() -> None:
    script = Script(
        ToolCallPart("overlap", {"label": "a"}, tool_call_id="c1"),
        ToolCallPart("overlap", {"label": "b"}, tool_call_id="c2"),
        ToolCallPart("add", '{"a": 1, "b": 2}', tool_call_id="c3"),
        ToolCallPart("boom", {}, tool_call_id="c4"),
        ToolCallPart("positive", {"n": -1}, tool_call_id="c5"),
        ToolCallPart("add", {"a": "one", "b": 2}, tool_call_id="c6"),
        ToolCallPart("sleepy", {}, tool_call_id="c7"),
    )

    async def main() -> str:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            agent = Agent(FunctionModel(script), toolsets=[RuntimeToolset(rt, exclude={"secret"})])
            return (await agent.run("go")).output

    assert asyncio.run(main()) == "done"
    assert script.offered == ["add", "boom", "overlap", "positive", "sleepy"]
    answers = script.answers()
    assert ran_in_parallel("a", "b")
    assert [answers[c].content for c in ("c1", "c2", "c3")] == ["done a", "done b", "3"]
    for c in ("c1", "c2", "c3"):
        assert isinstance(answers[c], ToolReturnPart)
        assert answers[c].outcome == "success"
    # ERROR and TIMEOUT: failed tool results (ToolFailed), no retry
    boom, sleepy = answers["c4"], answers["c7"]
    assert isinstance(boom, ToolReturnPart)
    assert boom.outcome == "failed"
    assert boom.content == "tool 'boom' raised ValueError: the backend is on fire"
    assert isinstance(sleepy, ToolReturnPart)
    assert sleepy.outcome == "failed"
    assert sleepy.content == "tool 'sleepy' did not finish within 0.05s"
    # REJECTED and INVALID_ARGUMENTS: retry prompts (ModelRetry), the model should fix its call
    rejected, invalid = answers["c5"], answers["c6"]
    assert isinstance(rejected, ToolReturnPart)
    assert rejected.outcome == "retried"
    assert rejected.content == "n must be positive, got -1"
    assert rejected.retry is not None
    assert rejected.retry.cause == "model_retry"
    assert isinstance(invalid, ToolReturnPart)
    assert invalid.outcome == "retried"
    assert "$.a" in str(invalid.content)


def test_a_retry_the_model_does_not_fix_ends_the_run_the_way_pydantic_ai_does() -> None:
    def stubborn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("positive", {"n": 0})])

    async def main() -> None:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            agent = Agent(FunctionModel(stubborn), toolsets=[RuntimeToolset(rt, max_retries=2)])
            with pytest.raises(UnexpectedModelBehavior, match="exceeded max retries count of 2"):
                await agent.run("go")
            assert rt.statistics().tools["positive"].calls == 3

    asyncio.run(main())


def test_retry_on_chooses_which_failures_are_retried() -> None:
    script = Script(ToolCallPart("positive", {"n": -5}, tool_call_id="c1"))

    async def main() -> None:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            toolset = RuntimeToolset(rt, retry_on={FailureKind.INVALID_ARGUMENTS})
            await Agent(FunctionModel(script), toolsets=[toolset]).run("go")

    asyncio.run(main())
    answer = script.answers()["c1"]
    assert isinstance(answer, ToolReturnPart)
    assert answer.outcome == "failed"


def test_a_hidden_tool_is_not_offered_and_never_reaches_the_runtime() -> None:
    script = Script(ToolCallPart("secret", {}, tool_call_id="s1"))

    async def main() -> None:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            toolset = RuntimeToolset(rt, only={"add", "boom", "not-yet-registered"})
            assert (await Agent(FunctionModel(script), toolsets=[toolset]).run("go")).output == "done"
            assert rt.statistics().tools["secret"].calls == 0

    asyncio.run(main())
    assert script.offered == ["add", "boom"]
    answer = script.answers()["s1"]
    assert isinstance(answer, ToolReturnPart)
    assert answer.outcome == "retried"
    assert "secret" in str(answer.content)
    assert "launch codes" not in str(answer.content)
    assert "secret ran" not in EVENTS


def test_tools_registered_later_are_listed_at_the_next_run_step() -> None:
    from runtime import tool

    @tool
    async def late(x: int) -> int:
        return x * 10

    script = Script(ToolCallPart("late", {"x": 4}, tool_call_id="l1"))

    async def main() -> None:
        async with open_asyncio_runtime([TOOLS[0]], tracing=False) as rt:
            toolset = RuntimeToolset(rt)
            agent = Agent(FunctionModel(script), toolsets=[toolset])
            await rt.register(late)
            await agent.run("go")

    asyncio.run(main())
    assert script.offered == ["add", "late"]
    assert script.answers()["l1"].content == "40"


def test_our_spans_nest_under_pydantic_ai_spans() -> None:
    otel = Otel()
    script = Script(
        ToolCallPart("add", {"a": 2, "b": 3}, tool_call_id="c1"),
        ToolCallPart("boom", {}, tool_call_id="c2"),
    )

    async def main() -> None:
        async with open_asyncio_runtime(TOOLS, tracing=otel.tracing()) as rt:
            agent = Agent(
                FunctionModel(script),
                name="assistant",
                toolsets=[RuntimeToolset(rt)],
                capabilities=[
                    Instrumentation(settings=InstrumentationSettings(tracer_provider=otel.provider))
                ],
            )
            await agent.run("go")

    asyncio.run(main())
    ours = {s.attributes["gen_ai.tool.call.id"]: s for s in otel.ours() if s.attributes}
    assert sorted(ours) == ["c1", "c2"]
    for call_id, name in (("c1", "add"), ("c2", "boom")):
        span = ours[call_id]
        parent = otel.parent_of(span)
        assert parent.instrumentation_scope is not None
        assert parent.instrumentation_scope.name == "pydantic-ai"
        assert parent.name == f"execute_tool {name}"
        assert parent.attributes is not None
        assert parent.attributes["gen_ai.tool.call.id"] == call_id
        assert "invoke_agent assistant" in otel.ancestors(span)
    assert ours["c2"].status.status_code is StatusCode.ERROR
    assert otel.parent_of(ours["c2"]).status.status_code is StatusCode.ERROR  # its span shows ToolFailed
    assert otel.parent_of(ours["c1"]).status.status_code is StatusCode.UNSET
    assert len({s.context.trace_id for s in otel.spans}) == 1


def test_pydantic_ai_test_model_calls_every_tool_with_arguments_from_our_schemas() -> None:
    async def main() -> str:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            toolset = RuntimeToolset(rt, only={"add", "overlap", "boom", "sleepy"})
            agent = Agent(TestModel(), toolsets=[toolset])
            return (await agent.run("go")).output

    output = asyncio.run(main())
    # TestModel answers with what each tool returned; ours include the failures as text
    assert '"add":' in output
    assert '"overlap":"done ' in output
    assert "the backend is on fire" in output
    assert "did not finish within 0.05s" in output


def test_a_runtime_thread_backs_the_toolset_too() -> None:
    script = Script(
        ToolCallPart("overlap", {"label": "x"}, tool_call_id="c1"),
        ToolCallPart("overlap", {"label": "y"}, tool_call_id="c2"),
    )
    with RuntimeThread(TOOLS, tracing=False) as rt:

        async def main() -> None:
            await Agent(FunctionModel(script), toolsets=[RuntimeToolset(rt)]).run("go")

        asyncio.run(main())
    assert [script.answers()[c].content for c in ("c1", "c2")] == ["done x", "done y"]
    assert ran_in_parallel("x", "y")


# -- tool search ---------------------------------------------------------------------------


def test_an_agent_searches_the_runtime_and_calls_the_tools_its_search_loaded() -> None:
    from pydantic_ai.messages import ToolSearchReturnPart

    from runtime.search import ToolSearch

    offered: list[list[str]] = []
    found: list[Any] = []

    def agent_turns(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        offered.append(sorted(t.name for t in info.function_tools))
        if len(offered) == 1:  # two asks in one search: each finds its tool
            return ModelResponse(
                parts=[
                    ToolCallPart(
                        "search_tools",
                        {"queries": ["accept only positive numbers", "run two calls in parallel, overlap"]},
                        tool_call_id="s1",
                    )
                ]
            )
        if len(offered) == 2:
            last = messages[-1]
            assert isinstance(last, ModelRequest)
            found.extend(p.content for p in last.parts if isinstance(p, ToolSearchReturnPart))
            return ModelResponse(parts=[ToolCallPart("positive", {"n": 3}, tool_call_id="p1")])
        return ModelResponse(parts=[TextPart("done")])

    async def main() -> str:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            toolset = RuntimeToolset(rt, exclude={"secret"}, search=ToolSearch(threshold=2, always=["add"]))
            agent = Agent(
                FunctionModel(agent_turns), toolsets=[toolset], capabilities=[toolset.tool_search()]
            )
            return (await agent.run("go")).output

    assert asyncio.run(main()) == "done"
    assert offered[0] == ["add", "search_tools"]  # the rest is deferred: found by searching
    assert sorted(m["name"] for m in found[0]["discovered_tools"]) == ["overlap", "positive"]
    assert offered[1] == ["add", "overlap", "positive", "search_tools"]


def test_within_the_threshold_every_tool_is_offered_and_tool_search_needs_search() -> None:
    from runtime.search import ToolSearch

    script = Script()

    async def main() -> None:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            toolset = RuntimeToolset(rt, search=ToolSearch(threshold=10))
            await Agent(FunctionModel(script), toolsets=[toolset], capabilities=[toolset.tool_search()]).run(
                "go"
            )
            with pytest.raises(ValueError, match="search=ToolSearch"):
                RuntimeToolset(rt).tool_search()

    asyncio.run(main())
    assert script.offered == sorted(t.name for t in TOOLS)
