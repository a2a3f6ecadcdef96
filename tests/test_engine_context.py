"""A call's code runs in a copy of its caller's contextvars, on every path.

Whether the tool runs in its caller's task (it cannot suspend), in a worker task, in a worker
thread, as an asyncio task of the host loop, from `call_many`, from a RuntimeThread or from
asyncio code: it reads what the caller set, and what it sets stays in that call.
"""

from __future__ import annotations

import asyncio
import contextvars

import pytest
import trio

from runtime import CallContext, ToolCall, ToolSuccess, open_runtime, tool
from runtime.embed import RuntimeThread, open_asyncio_runtime

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="none")


def _swap() -> str:
    seen = request_id.get()
    request_id.set(f"changed by the tool (saw {seen})")
    return seen


@tool
async def eager_reads() -> str:
    return _swap()


@tool
async def awaiting_reads() -> str:
    await trio.lowlevel.checkpoint()
    seen = _swap()
    await trio.lowlevel.checkpoint()
    assert request_id.get().startswith("changed")  # its own set holds across its awaits
    return seen


@tool
def thread_reads() -> str:
    return _swap()


@tool(inline=True, max_concurrency=1)
def inline_limited_reads() -> str:
    return _swap()


@tool(max_concurrency=3)
async def limited_reads() -> str:
    await trio.lowlevel.checkpoint()
    return _swap()


@tool(loop="asyncio")
async def asyncio_reads() -> str:
    await asyncio.sleep(0)
    return _swap()


TOOLS = [eager_reads, awaiting_reads, thread_reads, inline_limited_reads, limited_reads]
NAMES = [t.name for t in TOOLS]


def _calls(names: list[str]) -> list[ToolCall]:
    return [ToolCall(id=f"c{i}", name=name, arguments="{}") for i, name in enumerate(names)]


def _values(results: list[object]) -> list[object]:
    return [r.value if isinstance(r, ToolSuccess) else r for r in results]


@pytest.mark.parametrize("name", NAMES)
async def test_each_kind_of_tool_reads_its_callers_value_and_cannot_change_it(name: str) -> None:
    async with open_runtime(TOOLS) as rt:
        token = request_id.set("req-1")  # after opening: the runtime's own tasks never saw it
        (result,) = [await rt.call(c) for c in _calls([name])]
        assert isinstance(result, ToolSuccess), result
        assert result.value == "req-1"
        assert request_id.get() == "req-1"
        request_id.reset(token)


async def test_calls_of_one_batch_each_get_their_own_copy() -> None:
    async with open_runtime(TOOLS) as rt:
        request_id.set("batch")
        results = await rt.call_many(_calls(NAMES * 3))
        assert _values(results) == ["batch"] * len(NAMES) * 3
        assert request_id.get() == "batch"
        done = [r async for r in rt.as_completed(_calls(NAMES))]
        assert sorted(_values(done)) == ["batch"] * len(NAMES)  # type: ignore[type-var]


async def test_a_tool_calling_a_tool_passes_its_context_on() -> None:
    @tool
    async def outer() -> str:
        request_id.set("set by outer")
        inner = await rt.call(ToolCall(id="inner", name="awaiting_reads", arguments="{}"))
        assert isinstance(inner, ToolSuccess)
        return str(inner.value)

    async with open_runtime([*TOOLS, outer]) as rt:
        request_id.set("caller")
        result = await rt.call(ToolCall(id="o", name="outer", arguments="{}"))
        assert isinstance(result, ToolSuccess) and result.value == "set by outer"  # noqa: PT018
        assert request_id.get() == "caller"


def test_through_a_runtime_thread() -> None:
    with RuntimeThread(TOOLS, tracing=False) as rt:
        token = request_id.set("from a thread")
        try:
            results = rt.call_many(_calls(NAMES))
            assert _values(results) == ["from a thread"] * len(NAMES)
            assert request_id.get() == "from a thread"
        finally:
            request_id.reset(token)


def test_from_asyncio_code_on_the_guest_runtime() -> None:
    async def main() -> list[object]:
        async with open_asyncio_runtime([*TOOLS, asyncio_reads], tracing=False) as rt:
            request_id.set("asyncio request")
            results = await rt.call_many(_calls([*NAMES, "asyncio_reads"]))
            assert request_id.get() == "asyncio request"
            return _values(results)

    assert asyncio.run(main()) == ["asyncio request"] * (len(NAMES) + 1)


@tool
async def doubled(x: int) -> int:
    """Double x."""
    return 2 * x


@tool
async def through_ctx(x: int, ctx: CallContext) -> str:
    """Call `doubled` through the caller's view of the runtime."""
    result = await ctx.runtime.call(ToolCall(id=f"{ctx.call_id}-inner", name="doubled", arguments={"x": x}))
    outcome = result.content if result.ok else result.kind.value
    return f"{ctx.runtime.principal}:{outcome}"


async def test_a_tool_calls_other_tools_through_its_callers_view() -> None:
    async with open_runtime([doubled, through_ctx], tracing=False) as rt:
        plain = await rt.call(ToolCall(id="a", name="through_ctx", arguments='{"x": 3}'), principal="bob")
        with rt.scoped(principal="eve", exclude=["doubled"]) as view:
            hidden = await view.call(ToolCall(id="b", name="through_ctx", arguments='{"x": 3}'))
    assert plain.content == "bob:6"
    assert hidden.content == "eve:unknown_tool"  # the view's rules hold for the tool's own calls
