"""RuntimeThread: the runtime on its own trio thread, called from threads and from asyncio."""

from __future__ import annotations

import asyncio
import threading

import pytest
import trio

from runtime import FailureKind, RuntimeClosed, ToolCall, ToolFailure, ToolSuccess, tool
from runtime.embed import RuntimeThread

GATE = threading.Event()  # releases `gated` from the test's thread
ENDED = threading.Event()  # set when `forever` stops
SEEN: list[str] = []


@tool
async def add(a: int, b: int) -> int:
    return a + b


@tool
async def gated(tag: str) -> str:
    try:
        await trio.to_thread.run_sync(GATE.wait)
    except trio.Cancelled:
        SEEN.append(f"cancelled {tag}")
        raise
    return tag


@tool
async def forever() -> None:
    try:
        await trio.sleep_forever()
    finally:
        SEEN.append("forever ended")
        ENDED.set()


def add_call(i: int) -> ToolCall:
    return ToolCall(id=f"c{i}", name="add", arguments=f'{{"a": {i}, "b": 1}}')


@pytest.fixture(autouse=True)
def _reset() -> None:
    GATE.clear()
    ENDED.clear()
    SEEN.clear()


def test_calls_from_sync_code_and_from_many_threads_at_once() -> None:
    with RuntimeThread([add], tracing=False) as rt:
        assert rt.call(add_call(1)).content == "2"
        assert [r.content for r in rt.call_many([add_call(i) for i in range(5)])] == ["1", "2", "3", "4", "5"]
        out: dict[int, str] = {}

        def worker(i: int) -> None:
            out[i] = rt.call(add_call(i)).content

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert out == {i: str(i + 1) for i in range(16)}


def test_asyncio_callers_are_served_concurrently_without_blocking_their_loop() -> None:
    async def main(rt: RuntimeThread) -> tuple[list[str], list[str]]:
        ticks: list[str] = []
        busy = asyncio.Event()

        async def ticker() -> None:
            while not GATE.is_set():
                ticks.append("tick")
                if len(ticks) == 50:
                    busy.set()
                await asyncio.sleep(0)

        tick_task = asyncio.create_task(ticker())
        pending = [
            asyncio.create_task(rt.acall(ToolCall(id=t, name="gated", arguments={"tag": t}))) for t in "abc"
        ]
        await busy.wait()  # the loop keeps running while the calls wait on the trio thread
        assert not any(p.done() for p in pending)
        GATE.set()
        results = await asyncio.gather(*pending)
        await tick_task
        many = await rt.acall_many([add_call(1), ToolCall(id="x", name="nope")])
        return [r.content for r in results], [r.content for r in many]

    with RuntimeThread([gated, add], tracing=False) as rt:
        gated_out, many_out = asyncio.run(main(rt))
    assert gated_out == ["a", "b", "c"]
    assert many_out[0] == "2"
    assert many_out[1].startswith("Error: no tool named 'nope'")


def test_cancelling_the_asyncio_task_cancels_the_call_on_the_trio_side() -> None:
    async def main(rt: RuntimeThread) -> None:
        task = asyncio.create_task(rt.acall(ToolCall(id="f", name="forever")))
        while rt.statistics().tools["forever"].in_flight == 0:  # noqa: ASYNC110 - state of another thread
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with RuntimeThread([forever], tracing=False) as rt:
        asyncio.run(main(rt))
        assert ENDED.wait(10)
        assert rt.statistics().tools["forever"].failures == {"cancelled": 1}
    assert SEEN == ["forever ended"]


def test_tool_failures_come_back_as_results_and_closed_use_raises() -> None:
    with RuntimeThread([add], tracing=False) as rt:
        result = rt.call(ToolCall(id="1", name="add", arguments='{"a": "x", "b": 1}'))
        assert isinstance(result, ToolFailure)
        assert result.kind is FailureKind.INVALID_ARGUMENTS
    with pytest.raises(RuntimeClosed):
        rt.call(add_call(1))
    with pytest.raises(RuntimeClosed):
        asyncio.run(rt.acall(add_call(1)))


def test_a_bad_registry_fails_at_start_in_the_callers_thread() -> None:
    with (
        pytest.raises(ValueError, match="Tool 'add' is already defined"),
        RuntimeThread([add, add], tracing=False),
    ):
        pass


def test_closing_lets_calls_already_handed_over_finish() -> None:
    rt = RuntimeThread([gated], tracing=False)
    rt.start()
    results: list[object] = []
    t = threading.Thread(
        target=lambda: results.append(rt.call(ToolCall(id="g", name="gated", arguments={"tag": "g"})))
    )
    t.start()
    while rt.statistics().tools["gated"].in_flight == 0:
        threading.Event().wait(0.001)  # another thread's call: no virtual clock reaches it
    closer = threading.Thread(target=rt.close)
    closer.start()
    GATE.set()
    closer.join()
    t.join()
    assert len(results) == 1
    assert isinstance(results[0], ToolSuccess)
    assert results[0].content == "g"
