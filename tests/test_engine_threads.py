"""A sync tool's own worker threads (runtime/engine/_threads.py), kept between its calls.

Real threads and real time here (a thread cannot run on trio's virtual clock); every wait is
bounded and short.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable

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


waits_for_last = threading.Event()


@tool
def chained(n: int, last: int) -> int:
    """Call 0 blocks until the last call of its batch has run (both in this tool's threads)."""
    if n == 0:
        assert waits_for_last.wait(5), "the last call never ran while the first one blocked"
    if n == last:
        waits_for_last.set()
    return n


async def test_a_call_that_blocks_never_holds_up_the_calls_queued_behind_it() -> None:
    waits_for_last.clear()
    async with open_runtime([chained]) as rt:
        calls = [_call("chained", f'{{"n": {i}, "last": 7}}', f"c{i}") for i in range(8)]
        with trio.fail_after(10):
            results = await rt.call_many(calls)
    assert [r.value for r in results] == list(range(8))  # type: ignore[union-attr]


class _NeverStarts:
    """A thread that never takes a job: the job stays queued (what a busy pool looks like)."""

    def __init__(self, pool: object, name: str) -> None:
        pass


async def test_a_job_dropped_while_queued_never_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    threads = _threads.KeptThreads("t")
    monkeypatch.setattr(_threads, "_Thread", _NeverStarts)
    done: list[object] = []

    job = threads.submit(
        contextvars.copy_context(), print, ("never",), lambda job, result: done.append(result)
    )
    assert len(threads._queue) == 1
    assert threads.drop(job) is True  # it was queued: it leaves the queue, never runs
    assert threads.drop(job) is False  # and only once
    assert (len(threads._queue), done) == (0, [])


async def test_a_call_cancelled_while_its_job_waits_for_a_thread_never_runs() -> None:
    """The tool's budget is one thread, blocked by the first call: the second waits in the
    mailbox, its caller gives up, and it never runs."""
    release = threading.Event()
    ran: list[int] = []
    token = trio.lowlevel.current_trio_token()
    running = trio.Event()

    @tool(max_concurrency=1)
    def one_at_a_time(n: int) -> int:
        ran.append(n)
        token.run_sync_soon(running.set)
        release.wait(5)
        return n

    async with open_runtime([one_at_a_time], tracing=False) as rt, trio.open_nursery() as nursery:
        first: list[object] = []

        async def blocker() -> None:
            first.append(await rt.call(ToolCall(id="a", name="one_at_a_time", arguments='{"n": 1}')))

        nursery.start_soon(blocker)
        await running.wait()
        with trio.move_on_after(0.05) as scope:
            await rt.call(ToolCall(id="b", name="one_at_a_time", arguments='{"n": 2}'))
        assert scope.cancelled_caught
        release.set()
    assert ran == [1]
    stats = rt.statistics().tools["one_at_a_time"]
    assert (stats.calls, stats.failures, stats.queued, stats.in_flight) == (2, {"cancelled": 1}, 0, 0)


class _Loop:
    """Stands for the host asyncio loop: what the threads send back is run here, on the trio thread."""

    def __init__(self) -> None:
        self.callbacks: list[Callable[[], object]] = []

    def call_soon_threadsafe(self, callback: Callable[[], object]) -> None:
        self.callbacks.append(callback)


async def test_the_thread_that_takes_a_queued_call_wakes_one_more_for_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Eight calls queued before any thread ran: the first blocks until the last has run, which
    only works if each thread that takes a call first wakes (or starts) another one."""
    loop, results, last_ran = _Loop(), [], threading.Event()
    threads = _threads.KeptThreads("t", loop)
    deferred: list[str] = []
    monkeypatch.setattr(_threads, "_Thread", lambda pool, name: deferred.append(name))

    def job(n: int) -> int:
        if n == 0 and not last_ran.wait(5):
            raise AssertionError("the last call never ran while the first one blocked")
        if n == 7:
            last_ran.set()
        return n

    for n in range(8):
        threads.submit(contextvars.copy_context(), job, (n,), lambda job, result: results.append(result))
    assert (deferred, len(threads._queue)) == (["tool t thread 1"], 8)  # one thread on its way
    monkeypatch.undo()
    _threads._Thread(threads, deferred[0])
    with trio.fail_after(10):
        while len(results) < 8:
            for callback in loop.callbacks[:]:
                loop.callbacks.remove(callback)
                callback()
            await trio.sleep(0.005)
    assert sorted(r.unwrap() for r in results) == list(range(8))
    threads.close()
