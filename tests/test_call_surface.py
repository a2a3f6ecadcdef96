"""One call surface: `call`, `call_many`, `as_completed`, `stream`, `invoke` and `scoped`, with the
same keywords, on a trio `Runtime`, its views, the asyncio runtime, a `RuntimeThread` (blocking,
and its asyncio face `aio`) and their views; `invoke` ids unique in the process."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
from typing import Any

import pytest
import trio

from runtime import CallContext, ToolCall, ToolResult, open_runtime, tool
from runtime.embed import RuntimeThread, open_asyncio_runtime
from runtime.engine.lowlevel import Calls
from runtime.exceptions import RuntimeClosed

SURFACE = ("call", "call_many", "as_completed", "stream", "invoke", "scoped")


@tool
async def echo(text: str) -> str:
    """Echo the text."""
    return text


@tool
def shout(text: str) -> str:
    """Shout the text (a sync tool)."""
    return text.upper()


@tool
async def seen_by(ctx: CallContext) -> str:
    """Who the call runs for."""
    return str(ctx.principal)


def call(call_id: str, name: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=json.dumps(arguments))


def keywords(method: Any) -> dict[str, Any]:
    """A method's keyword parameters: keyword-only ones with their defaults, and its **settings
    with their annotation (the call's settings, `Unpack[CallSettings]`)."""
    found: dict[str, Any] = {}
    for name, p in inspect.signature(method).parameters.items():
        if p.kind is inspect.Parameter.KEYWORD_ONLY:
            found[name] = p.default
        elif p.kind is inspect.Parameter.VAR_KEYWORD:
            found[f"**{name}"] = str(p.annotation)
    return found


def test_every_surface_declares_the_same_methods_with_the_same_keywords() -> None:
    from runtime.embed import AsyncioRuntime, ThreadScopedRuntime
    from runtime.engine import Runtime, ScopedRuntime
    from runtime.engine.lowlevel import Calls as Surface

    reference = {name: keywords(getattr(Surface, name)) for name in SURFACE}
    for cls in (Runtime, ScopedRuntime, AsyncioRuntime, RuntimeThread, ThreadScopedRuntime):
        for name in SURFACE:
            assert keywords(getattr(cls, name)) == reference[name], (cls.__name__, name)
    assert reference["call"] == {"**settings": "Unpack[CallSettings]"}
    from runtime.engine import CallSettings

    assert set(CallSettings.__annotations__) == {"metadata", "timeout", "principal"}
    assert reference["scoped"] == {
        "principal": None,
        "only": None,
        "exclude": (),
        "tags": None,
        "prepare": None,
    }


async def test_a_trio_runtime_and_nested_views_share_the_surface() -> None:
    async with open_runtime([echo, shout, seen_by], tracing=False) as rt:
        assert isinstance(rt, Calls)
        with (
            rt.scoped(principal="ann", exclude=["shout"]) as view,
            view.scoped(only=["seen_by", "shout"]) as inner,
        ):
            assert [t.name for t in inner.registry] == ["seen_by"]  # both views' rules hold
            assert (await inner.invoke("seen_by")).content == "ann"  # the outer view's principal
            assert (await inner.invoke("seen_by", _principal="bob")).content == "bob"  # a call's own
            hidden = await inner.call(call("h", "shout", text="x"))
            assert not hidden.ok
            assert hidden.kind.value == "unknown_tool"  # type: ignore[union-attr]
            results = [r.content async for r in inner.as_completed([call("a", "seen_by")])]
            assert results == ["ann"]
            streamed = [item async for item in inner.stream(call("s", "seen_by"))]
            assert [r.content for r in streamed] == ["ann"]  # type: ignore[union-attr]
        with pytest.raises(RuntimeClosed):
            await inner.call(call("late", "seen_by"))


async def test_invoke_ids_are_unique_across_runtimes_and_views() -> None:
    ids: list[str] = []

    @tool
    async def record(ctx: CallContext) -> str:
        """Record the call's id."""
        ids.append(ctx.call_id)
        return ctx.call_id

    async with open_runtime([record], tracing=False) as a, open_runtime([record], tracing=False) as b:
        for surface in (a, b, a.scoped(principal="x"), b.scoped(principal="y")):
            for _ in range(3):
                assert (await surface.invoke("record")).ok
    assert len(ids) == 12
    assert len(set(ids)) == 12


def test_the_asyncio_runtime_has_the_whole_surface() -> None:
    async def main() -> tuple[Any, ...]:
        async with open_asyncio_runtime([echo, shout, seen_by], tracing=False) as rt:
            one = await rt.call(call("1", "echo", text="hi"), principal="p")
            many = await rt.call_many([call("2", "shout", text="a"), call("3", "seen_by")], principal="q")
            async with contextlib.aclosing(rt.as_completed([call("4", "echo", text="x")])) as results:
                done = [r.content async for r in results]
            streamed = [item async for item in rt.stream(call("5", "echo", text="s"))]
            invoked = await rt.invoke(echo, text="typed")
            with rt.scoped(principal="ann") as view:
                mine = await view.invoke("seen_by")
            return (
                one.content,
                [r.content for r in many],
                done,
                streamed[-1].content,
                invoked.content,
                mine.content,
            )  # type: ignore[union-attr]

    assert asyncio.run(main()) == ("hi", ["A", "q"], ["x"], "s", "typed", "ann")


def test_a_runtime_thread_has_the_whole_surface_blocking_and_from_asyncio() -> None:
    with RuntimeThread([echo, shout, seen_by], tracing=False) as rt:
        assert rt.call(call("1", "echo", text="hi")).content == "hi"
        assert [r.content for r in rt.call_many([call("2", "shout", text="a")], principal="p")] == ["A"]
        assert [
            r.content
            for r in rt.as_completed([call("3", "echo", text="x"), call("4", "seen_by")], principal="z")
        ] in (
            ["x", "z"],
            ["z", "x"],
        )
        items = list(rt.stream(call("5", "echo", text="s")))
        assert items[-1].content == "s"  # type: ignore[union-attr]
        assert rt.invoke(echo, text="typed").content == "typed"
        with rt.scoped(principal="ann") as view:
            assert view.invoke("seen_by").content == "ann"
            assert [r.content for r in view.as_completed([call("6", "seen_by")])] == ["ann"]

            async def from_asyncio() -> list[str]:
                results: list[ToolResult] = [await view.aio.call(call("7", "seen_by"))]
                results += await rt.aio.call_many([call("8", "seen_by")], principal="bob")
                results.append(await rt.acall(call("9", "echo", text="old name")))
                async with contextlib.aclosing(rt.aio.as_completed([call("10", "echo", text="y")])) as done:
                    results += [r async for r in done]
                return [r.content for r in results]

            assert asyncio.run(from_asyncio()) == ["ann", "bob", "old name", "y"]


async def test_the_tools_own_calls_go_through_the_view_of_their_loop() -> None:
    """`ctx.runtime` waits as the tool's code does: trio for a trio tool (checked elsewhere),
    the host loop for an asyncio tool of the asyncio runtime."""

    @tool(loop="asyncio")
    async def asks_echo(ctx: CallContext) -> str:
        """Call echo from asyncio code."""
        await asyncio.sleep(0)
        result = await ctx.runtime.call(ToolCall(id="inner", name="echo", arguments={"text": "deep"}))
        return str(result.content)

    async def main() -> str:
        async with open_asyncio_runtime([echo, asks_echo], tracing=False) as rt:
            return str((await rt.invoke("asks_echo")).content)

    assert await trio.to_thread.run_sync(asyncio.run, main()) == "deep"
