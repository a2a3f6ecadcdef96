"""open_asyncio_runtime serves calls that cannot wait on anything right in the asyncio task.

A call of a tool that cannot suspend (or one answered at once: an unknown tool, malformed
arguments) needs no trio task and no wakeup of trio's guest run; with features whose hooks
cannot suspend either (tracing's), it is served by `Runtime.call_now` in the caller's asyncio
task. Everything else goes through trio as before, in the same batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
import sniffio
import trio
import trio.lowlevel
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runtime import FailureKind, Feature, ToolCall, ToolDefinitionError, ToolSuccess, open_runtime, tool
from runtime.embed import RuntimeThread, open_asyncio_runtime
from runtime.tracing import Tracing

where: list[Any] = []


@tool
async def quick(n: int) -> int:
    where.append(asyncio.current_task())
    return n + 1


@tool
async def waits(n: int) -> int:
    await trio.lowlevel.checkpoint()
    return n * 10


@tool
def threaded(n: int) -> int:
    return -n


def _call(name: str, arguments: str = '{"n": 1}', call_id: str = "c1") -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


class _Spawns(trio.abc.Instrument):
    def __init__(self) -> None:
        self.names: list[str] = []

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        if task.name.endswith("Supervisor._supervise"):
            return  # a tool's actor starting on its first call (once): not a hop of the call
        self.names.append(task.name)


@contextlib.contextmanager
def trio_tasks_spawned() -> Iterator[list[str]]:
    """The names of the trio tasks spawned while the block runs (a trio instrument, added from
    asyncio code: the loop's thread holds trio's run state while the guest run lasts)."""
    spawns = _Spawns()
    trio.lowlevel.add_instrument(spawns)
    try:
        yield spawns.names
    finally:
        trio.lowlevel.remove_instrument(spawns)


def test_a_call_that_cannot_wait_runs_in_the_asyncio_task_that_makes_it() -> None:
    async def main() -> None:
        where.clear()
        async with open_asyncio_runtime([quick], tracing=False) as rt:
            result = await rt.call(_call("quick"))
            assert isinstance(result, ToolSuccess) and result.value == 2  # noqa: PT018
            assert where == [asyncio.current_task()]
            assert rt.statistics().tools["quick"].calls == 1

    asyncio.run(main())


def test_a_mixed_batch_keeps_its_order_and_one_result_per_call() -> None:
    calls = [
        _call("waits", call_id="w"),
        _call("quick", call_id="q"),
        _call("nope", call_id="unknown"),
        _call("quick", '{"n": "x"}', "bad"),
        _call("threaded", call_id="t"),
        _call("quick", '{"n": 5}', "q5"),
    ]

    async def main() -> None:
        async with open_asyncio_runtime([quick, waits, threaded], tracing=False) as rt:
            results = await rt.call_many(calls)
            assert [r.call_id for r in results] == [c.id for c in calls]
            assert [r.value if isinstance(r, ToolSuccess) else r.kind for r in results] == [  # type: ignore[union-attr]
                10,
                2,
                FailureKind.UNKNOWN_TOOL,
                FailureKind.INVALID_ARGUMENTS,
                -1,
                6,
            ]
            done = [r.call_id async for r in rt.as_completed(calls)]
            assert sorted(done) == sorted(c.id for c in calls)
            assert set(done[:4]) == {"q", "unknown", "bad", "q5"}  # answered at once: first
            stats = rt.statistics()
            assert stats.tools["quick"].calls == 6
            assert stats.tools["waits"].calls == stats.tools["threaded"].calls == 2

    asyncio.run(main())


def test_a_deadline_that_passed_times_out_and_runs_nothing() -> None:
    async def main() -> None:
        where.clear()
        async with open_asyncio_runtime([quick], tracing=False) as rt:
            result = await rt.call(_call("quick"), timeout=0)
            assert result.kind is FailureKind.TIMEOUT  # type: ignore[union-attr]
        assert where == []

    asyncio.run(main())


def test_traced_calls_served_directly_are_children_of_the_asyncio_callers_span() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")

    async def main() -> None:
        where.clear()
        async with open_asyncio_runtime([quick, waits], tracing=Tracing(tracer_provider=provider)) as rt:
            with tracer.start_as_current_span("request") as parent:
                results = await rt.call_many([_call("quick", call_id="a"), _call("waits", call_id="b")])
            assert all(r.ok for r in results)
            assert where == [asyncio.current_task()]  # tracing's hooks cannot suspend: served here
        spans = {s.name: s for s in exporter.get_finished_spans()}
        for name in ("execute_tool quick", "execute_tool waits"):
            assert spans[name].parent is not None
            assert spans[name].parent.span_id == parent.get_span_context().span_id

    asyncio.run(main())


class Slow(Feature):
    """A feature whose start hook awaits: calls must go through trio."""

    def __init__(self) -> None:
        self.started: list[str] = []

    async def on_call_starting(self, call: ToolCall, ctx: Any) -> None:
        await trio.lowlevel.checkpoint()
        self.started.append(call.id)


@pytest.mark.parametrize("method", ["call", "call_many"])
def test_a_feature_that_may_suspend_sends_every_call_through_trio(method: str) -> None:
    async def main() -> None:
        where.clear()
        slow = Slow()
        async with open_asyncio_runtime([quick], features=[slow], tracing=False) as rt:
            if method == "call":
                result = await rt.call(_call("quick"))
            else:
                (result,) = await rt.call_many([_call("quick")])
            assert result.ok
        assert slow.started == ["c1"]
        assert where == [None]  # run in trio (a callback of the loop), not in this asyncio task

    asyncio.run(main())


class Counting(Feature):
    """Counts its metadata collections (a feature with a side effect per call)."""

    def __init__(self) -> None:
        self.collected: list[str] = []

    def collect_metadata(self, call: ToolCall, tool: Any) -> dict[str, Any]:
        self.collected.append(call.id)
        return {}


def test_a_call_handed_to_trio_collects_its_metadata_once() -> None:
    async def main() -> None:
        counting = Counting()
        async with open_asyncio_runtime([quick, waits], features=[counting], tracing=False) as rt:
            await rt.call(_call("waits", call_id="one"))
            await rt.call_many([_call("waits", call_id="a"), _call("quick", call_id="b")])
        assert sorted(counting.collected) == ["a", "b", "one"]

    asyncio.run(main())


@tool(inline=True)
def blocks_the_loop(seconds: float) -> str:
    time.sleep(seconds)
    return "done"


@tool
async def naps(seconds: float) -> str:
    await trio.sleep(seconds)
    return "woke"


def test_a_batch_timeout_counts_the_time_spent_on_calls_served_directly() -> None:
    async def main() -> None:
        async with open_asyncio_runtime([blocks_the_loop, naps], tracing=False) as rt:
            results = await rt.call_many(
                [_call("blocks_the_loop", '{"seconds": 0.3}', "a"), _call("naps", '{"seconds": 0.25}', "b")],
                timeout=0.4,
            )
            assert results[0].ok
            assert results[1].kind is FailureKind.TIMEOUT  # type: ignore[union-attr]  # 0.3 + 0.25 > 0.4

    asyncio.run(main())


def test_direct_calls_give_the_loops_other_tasks_a_turn() -> None:
    async def main() -> None:
        turns = 0

        async def other() -> None:
            nonlocal turns
            while True:
                await asyncio.sleep(0)
                turns += 1

        async with open_asyncio_runtime([quick], tracing=False) as rt:
            task = asyncio.ensure_future(other())
            await asyncio.sleep(0)
            start = turns
            for _ in range(100):
                await rt.call(_call("quick"))
                await rt.call_many([_call("quick")])
            assert turns - start >= 100
            task.cancel()

    asyncio.run(main())


# -- sync tools from asyncio: their threads report to the loop, not to trio ------------------

gate = threading.Event()


@tool
def where_sync(n: int) -> str:
    return threading.current_thread().name


@tool(timeout=0.2)
def held(n: int) -> int:
    gate.wait(5)
    return n


@tool(max_concurrency=1)
def single(n: int) -> int:
    gate.wait(5)
    return n


@tool
def sync_raises(n: int) -> int:
    raise ValueError(f"bad {n}")


def test_a_sync_tool_called_from_asyncio_runs_in_its_thread_and_answers_without_trio() -> None:
    async def main() -> None:
        async with open_asyncio_runtime([where_sync, sync_raises], tracing=False) as rt:
            result = await rt.call(_call("where_sync"))
            assert isinstance(result, ToolSuccess)
            assert str(result.value).startswith("tool where_sync thread")
            failed = await rt.call(_call("sync_raises", '{"n": 3}'))
            assert failed.kind is FailureKind.ERROR  # type: ignore[union-attr]
            assert "bad 3" in failed.content  # type: ignore[union-attr]
            bad = await rt.call(_call("where_sync", '{"n": "x"}'))
            assert bad.kind is FailureKind.INVALID_ARGUMENTS  # type: ignore[union-attr]
            stats = rt.statistics().tools
            assert (stats["where_sync"].calls, stats["where_sync"].in_flight) == (2, 0)
            assert stats["sync_raises"].failures == {"error": 1}

    asyncio.run(main())


def test_a_sync_tool_past_its_deadline_is_answered_and_its_thread_counted_abandoned() -> None:
    async def main() -> None:
        gate.clear()
        async with open_asyncio_runtime([held], tracing=False) as rt:
            started = time.monotonic()
            result = await rt.call(_call("held"))
            assert result.kind is FailureKind.TIMEOUT  # type: ignore[union-attr]
            assert time.monotonic() - started < 2
            stats = rt.statistics().tools["held"]
            assert (stats.abandoned, stats.abandoned_running, stats.threads, stats.in_flight) == (1, 1, 1, 0)
            gate.set()
            for _ in range(500):
                if rt.statistics().tools["held"].threads == 0:
                    break
                await asyncio.sleep(0.01)
            assert rt.statistics().tools["held"].abandoned_running == 0
            again = await rt.call(_call("held", '{"n": 2}'))
            assert again.ok

    asyncio.run(main())


def test_a_cancelled_asyncio_caller_gets_its_sync_calls_cancelled_and_counted() -> None:
    async def main() -> None:
        gate.clear()
        async with open_asyncio_runtime([held, where_sync, waits], tracing=False) as rt:
            task = asyncio.ensure_future(
                rt.call_many(
                    [_call("held", call_id="h"), _call("waits", call_id="w"), _call("held", call_id="h2")]
                )
            )
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            stats = rt.statistics().tools["held"]
            assert stats.failures == {"cancelled": 2}
            assert stats.in_flight == 0
            gate.set()

    asyncio.run(main())


@tool
def gated(n: int) -> int:
    gate.wait(5)
    return n


@tool(timeout=0.1)
def gated_briefly(n: int) -> int:
    gate.wait(5)
    return n


def test_sync_calls_beyond_the_thread_budget_wait_on_the_loop_in_order_without_trio() -> None:
    async def main() -> None:
        gate.clear()
        async with open_asyncio_runtime([gated], tracing=False, thread_limit=2) as rt:
            with trio_tasks_spawned() as spawned:
                calls = [_call("gated", f'{{"n": {i}}}', f"g{i}") for i in range(6)]
                task = asyncio.ensure_future(rt.call_many(calls))
                await asyncio.sleep(0.05)
                stats = rt.statistics().tools["gated"]
                assert (stats.threads, stats.in_flight, stats.queued) == (
                    2,
                    2,
                    4,
                )  # two run, four wait their turn
                gate.set()
                assert [r.value for r in await task] == list(range(6))  # type: ignore[union-attr]
            assert spawned == []
            assert rt.statistics().tools["gated"].threads == 0

    asyncio.run(main())


def test_a_sync_call_waiting_for_a_thread_times_out_without_running_and_without_counting_abandoned() -> None:
    async def main() -> None:
        gate.clear()
        async with open_asyncio_runtime([gated_briefly], tracing=False, thread_limit=1) as rt:
            # The tool's own timeout counts from when its call starts; the caller's from the call.
            first, second = await rt.call_many(
                [_call("gated_briefly", '{"n": 1}', "a"), _call("gated_briefly", '{"n": 2}', "b")],
                timeout=0.3,
            )
            assert first.kind is second.kind is FailureKind.TIMEOUT  # type: ignore[union-attr]
            assert "within 0.1s" in first.content
            assert "within 0.3s" in second.content
            stats = rt.statistics().tools["gated_briefly"]
            # the first ran and is stuck in its thread; the second waited in the mailbox, never started
            assert (stats.abandoned, stats.abandoned_running, stats.threads, stats.in_flight) == (1, 1, 1, 0)
            overloaded = await rt.call(_call("gated_briefly", '{"n": 3}', "c"))
            assert overloaded.kind is FailureKind.OVERLOADED  # type: ignore[union-attr]
            assert "all 1 of its threads are still running" in overloaded.content  # type: ignore[union-attr]
            gate.set()
            for _ in range(500):
                if rt.statistics().tools["gated_briefly"].threads == 0:
                    break
                await asyncio.sleep(0.01)
            assert rt.statistics().tools["gated_briefly"].abandoned_running == 0
            assert (await rt.call(_call("gated_briefly", '{"n": 4}', "d"))).ok

    asyncio.run(main())


def test_a_sync_tool_with_max_concurrency_waits_through_trio_in_order() -> None:
    async def main() -> None:
        gate.clear()
        async with open_asyncio_runtime([single], tracing=False) as rt:
            calls = [_call("single", f'{{"n": {i}}}', f"s{i}") for i in range(3)]
            task = asyncio.ensure_future(rt.call_many(calls))
            await asyncio.sleep(0.05)
            gate.set()
            results = await task
            assert [r.value for r in results] == [0, 1, 2]  # type: ignore[union-attr]
            assert rt.statistics().tools["single"].calls == 3

    asyncio.run(main())


# -- asyncio tools from asyncio: their coroutine becomes a task of the loop, no trio -------------


@tool(loop="asyncio")
async def aio_sleep(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "slept"


class Stubborn:
    """What a test sees of a stubborn tool: when it got its cancellation and when it ended; it
    ignores its cancellation until the test sets `release`. Made inside the test's loop."""

    def __init__(self) -> None:
        self.cancelled = anyio.Event()
        self.release = anyio.Event()
        self.ended = anyio.Event()


stubborn: list[Stubborn] = []  # the running test's, last


async def settled(done: Any) -> None:
    """Let the loop run until `done()` (the runtime notices a task that ended a turn or two later)."""
    for _ in range(1000):
        if done():
            return
        await asyncio.sleep(0)
    assert done()


@tool(loop="asyncio", timeout=0.1)
async def aio_stubborn() -> str:
    state = stubborn[-1]
    try:
        await asyncio.sleep(5)
    except asyncio.CancelledError:
        state.cancelled.set()
        await state.release.wait()  # ignores its cancellation until the test lets it end
    finally:
        state.ended.set()
    return "late"


@tool(loop="asyncio")
async def aio_raises(kind: str) -> str:
    await asyncio.sleep(0)
    if kind == "cancelled":
        raise asyncio.CancelledError
    raise KeyError(kind)


def test_an_asyncio_tool_from_asyncio_needs_no_trio_task() -> None:
    async def main() -> None:
        async with open_asyncio_runtime([aio_sleep], tracing=False) as rt:
            with trio_tasks_spawned() as spawned:
                result = await rt.call(_call("aio_sleep", '{"seconds": 0}'))
                assert isinstance(result, ToolSuccess) and result.value == "slept"  # noqa: PT018
                batch = [_call("aio_sleep", '{"seconds": 0.01}', f"s{i}") for i in range(5)]
                results = await rt.call_many(batch)
                assert [r.value for r in results] == ["slept"] * 5  # type: ignore[union-attr]
            assert spawned == []
            timed = await rt.call(_call("aio_sleep", '{"seconds": 5}'), timeout=0.05)
            assert timed.kind is FailureKind.TIMEOUT  # type: ignore[union-attr]
            stats = rt.statistics().tools["aio_sleep"]
            assert (stats.calls, stats.in_flight, stats.failures) == (7, 0, {"timeout": 1})

    asyncio.run(main())


def test_an_asyncio_tool_that_ignores_its_cancellation_is_answered_a_grace_after_its_deadline() -> None:
    async def main() -> None:
        state = Stubborn()
        stubborn.append(state)
        async with open_asyncio_runtime([aio_stubborn], tracing=False) as rt:
            async with asyncio.timeout(10):  # not a measure: a runtime that waited for the tool hangs here
                result = await rt.call(_call("aio_stubborn", "{}"))
            assert result.kind is FailureKind.TIMEOUT  # type: ignore[union-attr]
            assert "did not stop when cancelled" in result.content  # type: ignore[union-attr]
            # answered after its deadline cancelled it, while it still ignores that: not when it ends
            assert (state.cancelled.is_set(), state.ended.is_set()) == (True, False)
            state.release.set()
            await state.ended.wait()
            await settled(lambda: rt.statistics().tools["aio_stubborn"].in_flight == 0)

    asyncio.run(main())


@pytest.mark.parametrize("kind", ["cancelled", "key"])
def test_whatever_an_asyncio_tool_raises_is_that_calls_error(kind: str) -> None:
    async def main() -> None:
        async with open_asyncio_runtime([aio_raises, aio_sleep], tracing=False) as rt:
            result = await rt.call(_call("aio_raises", f'{{"kind": "{kind}"}}'))
            assert result.kind is FailureKind.ERROR  # type: ignore[union-attr]
            assert (await rt.call(_call("aio_sleep", '{"seconds": 0}'))).ok

    asyncio.run(main())


# -- tools for either loop (loop="any"): their caller's loop runs them ---------------------------


@tool(loop="any")
async def any_sleep(seconds: float) -> str:
    await anyio.sleep(seconds)
    return sniffio.current_async_library()


@tool(loop="any", timeout=0.1)
async def any_stubborn() -> str:
    state = stubborn[-1]
    try:
        await anyio.sleep(5)
    except anyio.get_cancelled_exc_class():
        state.cancelled.set()
        await state.release.wait()  # ignores its cancellation until the test lets it end
    finally:
        state.ended.set()
    return "late"


def test_a_tool_for_either_loop_called_from_asyncio_runs_as_a_task_of_the_loop() -> None:
    async def main() -> None:
        async with open_asyncio_runtime([any_sleep], tracing=False) as rt:
            with trio_tasks_spawned() as spawned:
                result = await rt.call(_call("any_sleep", '{"seconds": 0}'))
                assert isinstance(result, ToolSuccess) and result.value == "asyncio"  # noqa: PT018
                batch = [_call("any_sleep", '{"seconds": 0.01}', f"s{i}") for i in range(5)]
                assert [r.value for r in await rt.call_many(batch)] == ["asyncio"] * 5  # type: ignore[union-attr]
                got = [r.value async for r in rt.as_completed(batch)]  # type: ignore[union-attr]
                assert got == ["asyncio"] * 5
            assert spawned == []  # no trio task for any of them
            timed = await rt.call(_call("any_sleep", '{"seconds": 5}'), timeout=0.05)
            assert timed.kind is FailureKind.TIMEOUT  # type: ignore[union-attr]
            task = asyncio.ensure_future(rt.call(_call("any_sleep", '{"seconds": 5}')))
            await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            stats = rt.statistics().tools["any_sleep"]
            assert (stats.calls, stats.in_flight) == (13, 0)
            assert stats.failures == {"timeout": 1, "cancelled": 1}

    asyncio.run(main())


def test_a_tool_for_either_loop_runs_on_trio_when_trio_calls_it() -> None:
    async def trio_main() -> str:
        async with open_runtime([any_sleep], tracing=False) as rt:
            result = await rt.call(_call("any_sleep", '{"seconds": 0.001}'))
            assert isinstance(result, ToolSuccess)
            return str(result.value)

    assert trio.run(trio_main) == "trio"  # no asyncio host: nothing refused, trio runs it
    with RuntimeThread([any_sleep], tracing=False) as thread:
        assert thread.call(_call("any_sleep", '{"seconds": 0.001}')).value == "trio"  # type: ignore[union-attr]

    async def guest() -> None:  # a feature whose hooks may suspend sends the call through trio
        async with open_asyncio_runtime([any_sleep], tracing=False, features=[Slow()]) as rt:
            result = await rt.call(_call("any_sleep", '{"seconds": 0.001}'))
            assert isinstance(result, ToolSuccess) and result.value == "trio"  # noqa: PT018

    asyncio.run(guest())


def test_a_tool_for_either_loop_that_ignores_its_cancellation_is_answered_after_the_grace() -> None:
    async def main() -> None:
        state = Stubborn()
        stubborn.append(state)
        async with open_asyncio_runtime([any_stubborn], tracing=False) as rt:
            async with asyncio.timeout(10):  # not a measure: a runtime that waited for the tool hangs here
                result = await rt.call(_call("any_stubborn", "{}"))
            assert result.kind is FailureKind.TIMEOUT  # type: ignore[union-attr]
            assert "did not stop when cancelled" in result.content  # type: ignore[union-attr]
            # answered after its deadline cancelled it, while it still ignores that: not when it ends
            assert (state.cancelled.is_set(), state.ended.is_set()) == (True, False)
            state.release.set()
            await state.ended.wait()
            await settled(lambda: rt.statistics().tools["any_stubborn"].in_flight == 0)

    asyncio.run(main())


def test_a_sync_function_cannot_be_a_tool_for_either_loop() -> None:
    with pytest.raises(ToolDefinitionError, match="loop='any' says which event loop"):

        @tool(loop="any")
        def sync_tool() -> None: ...


@pytest.mark.parametrize("name", ["aio_sleep", "any_sleep"])
def test_a_cancelled_batch_of_loop_tasks_ends_each_call_cancelled_and_leaks_no_task(name: str) -> None:
    async def main() -> None:
        async with open_asyncio_runtime([aio_sleep, any_sleep], tracing=False) as rt:
            before = len(asyncio.all_tasks())
            calls = [_call(name, '{"seconds": 5}', f"c{i}") for i in range(3)]
            batch = asyncio.ensure_future(rt.call_many(calls))
            await asyncio.sleep(0.02)
            batch.cancel()
            with pytest.raises(asyncio.CancelledError):
                await batch
            stats = rt.statistics().tools[name]
            assert (stats.calls, stats.in_flight, stats.failures) == (3, 0, {"cancelled": 3})
            await asyncio.sleep(0)  # the cancelled tasks' last step
            assert len(asyncio.all_tasks()) == before

    asyncio.run(main())


def test_as_completed_closed_before_waiting_ends_its_loop_tasks_cancelled() -> None:
    async def main() -> None:
        async with open_asyncio_runtime([quick, any_sleep], tracing=False) as rt:
            calls = [_call("quick", '{"n": 1}', "fast")] + [
                _call("any_sleep", '{"seconds": 5}', f"slow{i}") for i in range(3)
            ]
            async with contextlib.aclosing(rt.as_completed(calls)) as results:
                async for first in results:
                    assert first.call_id == "fast"  # served at once: yielded before any waiting
                    break
            stats = rt.statistics().tools["any_sleep"]
            assert (stats.calls, stats.in_flight, stats.failures) == (3, 0, {"cancelled": 3})

    asyncio.run(main())


# -- closing the runtime with calls from the host loop still running ----------------------------

ran: list[int] = []


@tool
def counted(n: int) -> int:
    ran.append(n)
    gate.wait(5)
    return n


stop_ignoring = threading.Event()


@tool(loop="asyncio")
async def aio_ignores_cancel() -> str:
    while not stop_ignoring.is_set():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(5)
    return "ended"


def _kinds(results: list[Any]) -> dict[str, FailureKind | str]:
    return {r.call_id: getattr(r, "kind", "ok") for r in results}


def test_closing_gives_host_calls_the_shutdown_grace_then_answers_them_unavailable() -> None:
    async def main() -> None:
        gate.clear()
        ran.clear()
        before = len(asyncio.all_tasks())
        started = time.monotonic()
        async with open_asyncio_runtime(
            [counted, aio_sleep], tracing=False, thread_limit=1, shutdown_timeout=0.2
        ) as rt:
            calls = [_call("counted", f'{{"n": {i}}}', f"s{i}") for i in range(3)]
            calls.append(_call("aio_sleep", '{"seconds": 30}', "a"))
            pending = [asyncio.ensure_future(rt.call(c)) for c in calls]
            await asyncio.sleep(0.05)  # one sync call runs, two wait for the thread's token
            closing = time.monotonic()
        took = time.monotonic() - closing
        results = await asyncio.wait_for(asyncio.gather(*pending), 5)
        assert set(_kinds(results).values()) == {FailureKind.UNAVAILABLE}, _kinds(results)
        assert all("shutting down" in r.content for r in results)  # type: ignore[union-attr]
        assert ran == [0]  # the two waiting for a token never ran, not even after the close
        assert 0.2 <= took < 3, took  # the grace was given, and the close did not wait for the tools
        gate.set()
        await asyncio.sleep(0)
        assert len(asyncio.all_tasks()) == before
        assert time.monotonic() - started < 5

    asyncio.run(main())


def test_running_host_calls_that_end_within_the_shutdown_grace_keep_their_results() -> None:
    """Closing is `open_runtime`'s: calls still waiting for a thread fail at once (UNAVAILABLE),
    running ones get `shutdown_timeout` to finish."""

    async def main() -> None:
        gate.clear()
        ran.clear()
        async with open_asyncio_runtime([counted, aio_sleep], tracing=False, thread_limit=1) as rt:
            calls = [_call("counted", f'{{"n": {i}}}', f"s{i}") for i in range(3)]
            calls.append(_call("aio_sleep", '{"seconds": 0.1}', "a"))
            pending = [asyncio.ensure_future(rt.call(c)) for c in calls]
            await asyncio.sleep(0.05)
            asyncio.get_running_loop().call_later(0.1, gate.set)
        results = await asyncio.wait_for(asyncio.gather(*pending), 5)
        assert _kinds(results) == {"s0": "ok", "s1": "unavailable", "s2": "unavailable", "a": "ok"}
        assert ran == [0]

    asyncio.run(main())


def test_an_asyncio_tool_that_ignores_cancellation_at_close_is_answered_and_the_close_ends() -> None:
    async def main() -> None:
        stop_ignoring.clear()
        async with open_asyncio_runtime([aio_ignores_cancel], tracing=False, shutdown_timeout=0.05) as rt:
            pending = asyncio.ensure_future(rt.call(_call("aio_ignores_cancel", "{}")))
            await asyncio.sleep(0.02)
            closing = time.monotonic()
        assert time.monotonic() - closing < 3
        result = await asyncio.wait_for(pending, 1)
        assert result.kind is FailureKind.UNAVAILABLE  # type: ignore[union-attr]
        assert "did not stop when cancelled" in result.content  # type: ignore[union-attr]
        stop_ignoring.set()
        for task in asyncio.all_tasks() - {asyncio.current_task()}:
            task.cancel()  # the abandoned tool's task: now it ends

    asyncio.run(main())


_released = threading.Event()
_returned = threading.Event()


@tool(max_concurrency=4)
async def trio_second(i: int) -> int:
    """One second of trio work."""
    await trio.sleep(1)
    return i


@tool
async def trio_never_stops() -> str:
    """Trio work that shields itself from every cancellation until the test releases it."""
    with trio.CancelScope(shield=True):
        await trio.to_thread.run_sync(_released.wait)
    _returned.set()
    return "released"


@pytest.mark.leaks(
    "by design: work whose code ignores cancellation is abandoned at close and runs on, on trio "
    "(as it would keep `trio.run` going); the test releases it after the close"
)
def test_closing_with_calls_queued_for_trio_and_one_that_never_stops_ends_within_the_grace() -> None:
    """Issue 28 point 4: the asyncio close has open_runtime's grace-then-UNAVAILABLE, also for calls
    handed to trio: queued calls are answered at once, running ones get `shutdown_timeout` and
    the kill grace, and one that never stops is abandoned instead of holding the close."""

    async def main() -> None:
        _released.clear()
        _returned.clear()
        async with open_asyncio_runtime(
            [trio_second, trio_never_stops], tracing=False, shutdown_timeout=0.5
        ) as rt:
            queued = [
                asyncio.ensure_future(rt.call(_call("trio_second", f'{{"i": {i}}}', str(i))))
                for i in range(40)
            ]
            stuck = asyncio.ensure_future(rt.call(_call("trio_never_stops", "{}")))
            await asyncio.sleep(0.1)
            closing = time.monotonic()
        took = time.monotonic() - closing
        _released.set()
        assert took < 0.5 + 0.5 + 0.5  # shutdown_timeout + the kill grace, with room; not 10 s, not never
        results = [await call for call in queued]
        assert sum(r.ok for r in results) <= 4  # at most the four that were running finished
        assert {r.kind for r in results if not r.ok} == {FailureKind.UNAVAILABLE}  # type: ignore[union-attr]
        never = await stuck
        assert never.kind is FailureKind.UNAVAILABLE  # type: ignore[union-attr]
        assert "did not stop when cancelled" in never.content  # type: ignore[union-attr]
        async with asyncio.timeout(5):  # the abandoned work ends once released, and the guest run with it
            while not _returned.is_set():  # noqa: ASYNC110 - set on trio's side
                await asyncio.sleep(0.01)
            for _ in range(50):
                await asyncio.sleep(0)  # the guest run's last turns

    asyncio.run(main())


class ConnectionBroken(Exception):
    pass


@tool(restart_on=(ConnectionBroken,))
def flaky(n: int) -> int:
    if n < 0:
        for _ in range(5000):  # once two other calls run
            if len(ran) >= 2:
                break
            time.sleep(0.001)
        raise ConnectionBroken("connection lost")
    ran.append(n)
    gate.wait(5)
    return n


def test_a_crash_answers_the_running_host_calls_at_once_and_the_waiting_ones_run_after_the_restart() -> None:
    async def main() -> None:
        gate.clear()
        ran.clear()
        async with open_asyncio_runtime([flaky], tracing=False, thread_limit=3) as rt:
            calls = [_call("flaky", f'{{"n": {i}}}', f"c{i}") for i in (-1, 1, 2, 3, 4)]
            # -1, 1 and 2 run; 3 and 4 wait in the mailbox; -1 crashes the tool once 1 and 2 run
            pending = asyncio.ensure_future(rt.call_many(calls))
            for _ in range(500):
                if rt.statistics().tools["flaky"].restarts:
                    break
                await asyncio.sleep(0.01)
            assert (
                not pending.done()
            )  # 3 and 4 wait for the next incarnation (the OTP way: queued calls wait)
            gate.set()
            results = await asyncio.wait_for(pending, 5)
            kinds = _kinds(results)
            assert (kinds.pop("c-1"), kinds.pop("c1"), kinds.pop("c2")) == (
                FailureKind.ERROR,
                FailureKind.UNAVAILABLE,
                FailureKind.UNAVAILABLE,
            )
            assert kinds == {"c3": "ok", "c4": "ok"}
            assert all("crashed while serving this call" in r.content for r in results[1:3])  # type: ignore[union-attr]
            assert (await rt.call(_call("flaky", '{"n": 9}', "after"))).ok
            stats = rt.statistics().tools["flaky"]
            assert (stats.restarts, stats.abandoned, stats.in_flight) == (1, 2, 0)

    asyncio.run(main())
