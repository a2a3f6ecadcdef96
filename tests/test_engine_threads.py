"""A sync tool's own worker threads (runtime/engine/_threads.py), kept between its calls.

Real threads and real time here (a thread cannot run on trio's virtual clock); every wait is
bounded and short.
"""

from __future__ import annotations

import threading
import time

import pytest
import trio

from runtime import FailureKind, ToolCall, ToolSuccess, open_runtime, tool
from runtime.engine import _threads


def _tool_threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(f"tool {name} thread")]


@tool
def which_thread() -> int:
    """The identity of the thread that runs the call."""
    return threading.get_ident()


release = threading.Event()


@tool(max_concurrency=2)
def blocked(n: int) -> int:
    release.wait(10)
    return n


@tool(timeout=0.2)
def stuck(n: int) -> int:
    release.wait(10)
    return n


@tool
def raises(kind: str) -> str:
    if kind == "interrupt":
        raise KeyboardInterrupt
    if kind == "exit":
        raise SystemExit(3)
    raise ValueError("no")


def _call(name: str, arguments: str = "{}", call_id: str = "c1") -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


async def test_sequential_calls_reuse_one_kept_thread() -> None:
    async with open_runtime([which_thread]) as rt:
        results = [await rt.call(_call("which_thread")) for _ in range(20)]
        idents = {r.value for r in results if isinstance(r, ToolSuccess)}
        assert len(idents) == 1
        assert threading.get_ident() not in idents
        assert len(_tool_threads("which_thread")) == 1


async def test_concurrent_calls_take_at_most_the_tools_budget() -> None:
    release.clear()
    async with open_runtime([blocked]) as rt, trio.open_nursery() as nursery:
        results: list[object] = []

        async def one(i: int) -> None:
            results.append(await rt.call(_call("blocked", f'{{"n": {i}}}', f"b{i}")))

        for i in range(5):
            nursery.start_soon(one, i)
        with trio.fail_after(5):
            while rt.statistics().tools["blocked"].threads < 2:  # noqa: ASYNC110 - real threads, no event
                await trio.sleep(0.01)
        await trio.sleep(0.05)
        stats = rt.statistics().tools["blocked"]
        assert stats.threads == 2  # the budget (max_concurrency=2), not five
        assert len(_tool_threads("blocked")) == 2
        release.set()
    assert sorted(r.value for r in results) == [0, 1, 2, 3, 4]  # type: ignore[attr-defined]


async def test_an_abandoned_thread_keeps_its_slot_until_it_returns_then_serves_again() -> None:
    release.clear()
    async with open_runtime([stuck]) as rt:
        result = await rt.call(_call("stuck", '{"n": 1}'))
        assert result.kind is FailureKind.TIMEOUT  # type: ignore[union-attr]
        stats = rt.statistics().tools["stuck"]
        assert (stats.threads, stats.abandoned_running, stats.abandoned) == (1, 1, 1)
        release.set()
        with trio.fail_after(5):
            while rt.statistics().tools["stuck"].threads:  # noqa: ASYNC110 - real threads, no event
                await trio.sleep(0.01)
        assert rt.statistics().tools["stuck"].abandoned_running == 0
        release.clear()
        again = await rt.call(_call("stuck", '{"n": 2}'))  # the same thread, free again, times out again
        assert again.kind is FailureKind.TIMEOUT  # type: ignore[union-attr]
        assert len(_tool_threads("stuck")) == 1
        release.set()


@pytest.mark.parametrize("kind", ["value", "interrupt", "exit"])
async def test_whatever_a_thread_raises_is_that_calls_error(kind: str) -> None:
    async with open_runtime([raises, which_thread]) as rt:
        result = await rt.call(_call("raises", f'{{"kind": "{kind}"}}'))
        assert result.kind is FailureKind.ERROR  # type: ignore[union-attr]
        assert (await rt.call(_call("which_thread"))).ok


async def test_the_threads_exit_when_the_runtime_closes() -> None:
    async with open_runtime([which_thread]) as rt:
        await rt.call_many([_call("which_thread", call_id=f"c{i}") for i in range(8)])
        threads = _tool_threads("which_thread")
        assert threads
    for thread in threads:
        thread.join(timeout=5)
        assert not thread.is_alive()


async def test_an_idle_thread_exits_after_a_while_and_a_new_one_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_threads, "IDLE_SECONDS", 0.05)
    async with open_runtime([which_thread]) as rt:
        first = await rt.call(_call("which_thread"))
        (thread,) = _tool_threads("which_thread")
        deadline = time.monotonic() + 5
        while thread.is_alive() and time.monotonic() < deadline:  # noqa: ASYNC110 - a real thread
            await trio.sleep(0.02)
        assert not thread.is_alive()
        second = await rt.call(_call("which_thread"))
        assert second.ok
        assert first.ok
        assert len(_tool_threads("which_thread")) == 1
