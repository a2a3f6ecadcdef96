"""runtime.integrations' common part: which runtimes an adapter takes, and how tools are hidden."""

from __future__ import annotations

import subprocess
import sys

import pytest
from integrations_support import TOOLS

import runtime.integrations
from runtime import FailureKind, ToolCall, ToolRegistry, open_runtime
from runtime.embed import RuntimeThread
from runtime.integrations import BlockingCaller, Caller, Selection, caller_of


async def test_a_trio_runtime_is_refused_with_the_two_ways_to_embed_it() -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        with pytest.raises(TypeError, match=r"open_asyncio_runtime\(\.\.\.\).*RuntimeThread"):
            caller_of(rt)


def test_something_else_is_refused() -> None:
    with pytest.raises(TypeError, match="got ToolRegistry"):
        caller_of(ToolRegistry(TOOLS))  # type: ignore[arg-type]


def test_a_runtime_thread_is_a_blocking_caller_with_the_live_registry() -> None:
    with RuntimeThread(TOOLS, tracing=False) as rt:
        caller = caller_of(rt)
        assert isinstance(caller, Caller)
        assert isinstance(caller, BlockingCaller)
        assert caller.registry.names() == [t.name for t in TOOLS]
        (result,) = caller.call_many_blocking([ToolCall(id="1", name="add", arguments='{"a":1,"b":2}')])
        assert result.content == "3"


def test_a_selection_shows_only_minus_exclude_in_registry_order() -> None:
    registry = ToolRegistry(TOOLS)
    assert Selection().visible(registry) is registry
    assert Selection(exclude={"secret", "boom"}).visible(registry).names() == [
        "add",
        "overlap",
        "positive",
        "sleepy",
    ]
    assert Selection(only={"boom", "add", "later"}, exclude={"boom"}).visible(registry).names() == ["add"]
    with pytest.raises(TypeError, match="not one string"):
        Selection(only="add")


def test_a_hidden_or_unknown_call_is_answered_here_naming_only_visible_tools() -> None:
    registry = ToolRegistry(TOOLS)
    selection = Selection(only={"add", "boom"})
    calls = [
        ToolCall(id="1", name="add"),
        ToolCall(id="2", name="secret"),
        ToolCall(id="3", name="nope"),
        ToolCall(id="4", name="boom"),
    ]
    sent, answered = selection.partition(calls, registry)
    assert [c.id for c in sent] == ["1", "4"]
    assert sorted(answered) == [1, 2]
    assert {f.kind for f in answered.values()} == {FailureKind.UNKNOWN_TOOL}
    assert answered[1].message == "no tool named 'secret'; available tools: add, boom"
    assert answered[2].call_id == "3"
    # with nothing hidden, unknown names go to the runtime, whose answer is the same
    sent, answered = Selection().partition(calls, registry)
    assert len(sent) == 4
    assert not answered


def test_only_is_checked_against_the_registry_by_the_adapters_that_list_once() -> None:
    registry = ToolRegistry(TOOLS)
    Selection(only={"add"}).check(registry)
    with pytest.raises(ValueError, match="no tool named 'secrett'; did you mean 'secret'"):
        Selection(only={"add", "secrett"}).check(registry)


def test_the_package_imports_no_framework() -> None:
    code = (
        "import sys, runtime.integrations; "
        "print(sorted(m for m in ('agents', 'pydantic_ai', 'langchain_core', 'langgraph') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"
    assert runtime.integrations.__all__ == sorted(runtime.integrations.__all__)


def test_each_adapter_exports_what_users_need_and_nothing_else() -> None:
    import importlib

    surfaces = {
        "runtime.integrations": [
            "BlockingCaller",
            "Caller",
            "RuntimeLike",
            "Selection",
            "ToolCallFailed",
            "caller_of",
        ],
        "runtime.integrations.openai_agents": [
            "OpenTelemetryTracingProcessor",
            "ToolCallFailed",
            "failure_text",
            "function_tools",
        ],
        "runtime.integrations.pydantic_ai": ["RETRY_ON", "RuntimeDecisions", "RuntimeToolset"],
        "runtime.integrations.langchain": [
            "OpenTelemetryCallbackHandler",
            "RuntimeSearchTool",
            "RuntimeTool",
            "RuntimeToolException",
            "RuntimeToolNode",
            "loaded",
            "tools",
        ],
    }
    for name, expected in surfaces.items():
        module = importlib.import_module(name)
        assert sorted(module.__all__) == expected, name
        assert all(getattr(module, n, None) is not None for n in expected), name
