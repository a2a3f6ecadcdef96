"""Ray placement against a real local Ray (one cluster for the session; skipped without the extra)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
import trio

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.usefixtures("local_ray")  # tests/conftest.py: one local Ray for the session

import placement_tools as pt  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from runtime import FailureKind, RestartPolicy, ToolCall, ToolResult, open_runtime  # noqa: E402
from runtime.tracing import Tracing  # noqa: E402


def call(name: str, arguments: str = "{}", id: str = "c1") -> ToolCall:
    return ToolCall(id=id, name=name, arguments=arguments)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def wait_for_file(path: Path) -> int:
    """The pid a tool wrote to `path` (from another process: there is no event to wait on)."""
    file = trio.Path(path)
    with trio.fail_after(30):
        while True:
            if await file.exists() and (text := await file.read_text()):
                return int(text)
            await trio.sleep(0.01)


async def test_call_many_runs_on_the_replicas_and_comes_back_in_order() -> None:
    calls = [call("ray_add", f'{{"a": {i}, "b": 1}}', id=f"c{i}") for i in range(20)]
    async with open_runtime([pt.ray_add], tracing=False) as rt:
        results = await rt.call_many(calls)
        assert [r.value["sum"] for r in results] == [i + 1 for i in range(20)]
        assert [r.call_id for r in results] == [c.id for c in calls]
        pids = {r.value["pid"] for r in results}
        assert len(pids) == 2
        assert os.getpid() not in pids


async def test_a_replica_killed_mid_call_fails_that_call_and_is_recreated(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    async with open_runtime([pt.ray_sleep], tracing=False) as rt:
        results = []

        async def slow() -> None:
            results.append(await rt.call(call("ray_sleep", f'{{"seconds": 60, "pid_file": "{pid_file}"}}')))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow)
            pid = await wait_for_file(pid_file)
            (name,) = [n for n in ray.util.list_named_actors() if n.startswith("ray_sleep-")]
            ray.kill(ray.get_actor(name))
        (result,) = results
        assert result.kind is FailureKind.ERROR
        assert "died while serving this call" in result.message
        after = await rt.call(call("ray_sleep", '{"seconds": 0}'))
        assert after.ok
        assert after.value != pid
        stats = rt.statistics().tools["ray_sleep"]
        assert stats.restarts == 1
        assert stats.state == "up"


async def test_a_timeout_kills_the_replica_and_recreates_it(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    async with open_runtime([pt.ray_stuck], tracing=False) as rt:
        for _ in range(3):  # on a loaded machine the call may not reach the replica within 1 s
            result = await rt.call(call("ray_stuck", f'{{"pid_file": "{pid_file}"}}'))
            assert result.kind is FailureKind.TIMEOUT
            if await trio.Path(pid_file).exists():
                break
        pid = await wait_for_file(pid_file)
        with trio.fail_after(30):
            while alive(pid):  # noqa: ASYNC110 - Ray kills the process; no event to wait on
                await trio.sleep(0.01)
        pid_file.unlink()
        # A new replica (a Ray worker process importing the tool) may take longer than the
        # tool's 1 s timeout to come up; calls made meanwhile wait for it within their deadline.
        with trio.fail_after(60):
            while not (
                after := await rt.call(call("ray_stuck", f'{{"pid_file": "{pid_file}", "seconds": 0}}'))
            ).ok:
                assert after.kind is FailureKind.TIMEOUT
        assert after.ok
        assert after.value != pid
        assert rt.statistics().tools["ray_stuck"].restarts == 0  # a timeout is not a crash


async def test_the_calls_span_is_the_parent_of_the_work_on_the_ray_side() -> None:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    async with open_runtime([pt.ray_span_parent], tracing=Tracing(tracer_provider=provider)) as rt:
        result = await rt.call(call("ray_span_parent", '{"n": 1}'))
        rejected = await rt.call(call("ray_span_parent", '{"n": -1}'))
    (span, _) = [s for s in spans.get_finished_spans() if s.name == "execute_tool ray_span_parent"]
    assert result.value == f"{span.context.trace_id:032x}-{span.context.span_id:016x}"
    assert rejected.kind is FailureKind.REJECTED
    assert rejected.message == "n must not be negative"


async def test_a_200_mb_result_from_a_replica_does_not_stall_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The replica hands a large reply to Ray out of band (no copy on the way) and the runtime
    # puts it together piece by piece (tests/test_placement_heavy.py has the Subprocess side).
    # What is asserted is structural: other tasks run between the pieces while the reply is put
    # together (decoded in one step, they would run about once). The CPU the loop spends per
    # step is printed, not asserted: it is a timing figure, and a loaded machine moves it.
    import runtime.placement._ray_pool as placed_on_ray

    turns = 0
    during: list[int] = []
    real = placed_on_ray.reply_from_frames

    async def counted(data: Any) -> Any:
        before = turns
        try:
            return await real(data)
        finally:
            during.append(turns - before)

    monkeypatch.setattr(placed_on_ray, "reply_from_frames", counted)
    async with open_runtime([pt.ray_big_text], tracing=False) as rt:
        assert (await rt.call(call("ray_big_text", '{"megabytes": 0}'))).ok
        busiest = 0.0
        async with trio.open_nursery() as nursery:

            async def other_task() -> None:
                nonlocal busiest, turns
                last_cpu = time.thread_time()
                while True:
                    await trio.lowlevel.checkpoint()
                    turns += 1
                    now_cpu = time.thread_time()
                    busiest = max(busiest, now_cpu - last_cpu)
                    last_cpu = now_cpu

            nursery.start_soon(other_task)
            result = await rt.call(call("ray_big_text", '{"megabytes": 200}'))
            nursery.cancel_scope.cancel()
    print(
        f"200 MB from Ray: {during[-1]} turns of another task while it was put together; "
        f"loop busy at most {busiest * 1000:.1f} ms in one step"
    )
    assert result.ok
    assert len(result.value) == 200 << 20
    assert len(result.content) < 101_000
    assert during[-1] >= 200  # 800 pieces of 256 KiB; one decode would let the other task in once or twice


async def test_one_callers_timeout_or_cancellation_stops_its_call_alone(tmp_path: Path) -> None:
    # Before: the replica was killed, and its other calls failed ("killed to stop another call").
    timed, gone = tmp_path / "timed", tmp_path / "gone"
    timed.mkdir()
    gone.mkdir()
    async with open_runtime([pt.ray_nap], tracing=False) as rt:
        pid = (await rt.call(call("ray_nap", '{"seconds": 0}'))).value  # the replica is up
        siblings: list[ToolResult] = []
        async with trio.open_nursery() as nursery:

            async def sibling(i: int) -> None:
                siblings.append(await rt.call(call("ray_nap", '{"seconds": 4}', id=f"s{i}")))

            nursery.start_soon(sibling, 1)
            nursery.start_soon(sibling, 2)
            # A call cut by its own deadline...
            cut = await rt.call(
                call("ray_nap", f'{{"seconds": 60, "notes": "{timed}"}}', id="t"), timeout=1.5
            )
            # ... and one whose caller goes away once it runs.
            with trio.CancelScope() as scope:

                async def leave() -> None:
                    await wait_for_file(gone / "started")
                    scope.cancel()

                nursery.start_soon(leave)
                await rt.call(call("ray_nap", f'{{"seconds": 60, "notes": "{gone}"}}', id="g"))
            assert scope.cancelled_caught
        assert cut.kind is FailureKind.TIMEOUT
        assert [r.ok for r in siblings] == [True, True]
        assert {r.value for r in siblings} == {pid}  # the same replica served them to the end
        for notes in (timed, gone):  # each cancelled call was cancelled in the replica
            if (notes / "started").exists():
                assert await wait_for_file(notes / "cancelled") == pid
        assert (await rt.call(call("ray_nap", '{"seconds": 0}'))).value == pid
        stats = rt.statistics().tools["ray_nap"]
        assert stats.restarts == 0
        assert stats.state == "up"


async def test_a_cancelled_sync_call_that_ends_within_the_grace_keeps_its_replica() -> None:
    # A thread cannot be stopped: the replica waits for it, and is killed only past cancel_grace
    # (test_a_timeout_kills_the_replica_and_recreates_it has the one that never ends).
    async with open_runtime([pt.ray_sleep], tracing=False) as rt:
        pid = (await rt.call(call("ray_sleep", '{"seconds": 0}'))).value
        cut = await rt.call(call("ray_sleep", '{"seconds": 0.5}'), timeout=0.1)
        assert cut.kind is FailureKind.TIMEOUT
        after = await rt.call(call("ray_sleep", '{"seconds": 0}'))  # waits for the slot to free
        assert after.value == pid
        assert rt.statistics().tools["ray_sleep"].restarts == 0


async def test_a_ray_tool_taken_down_by_replica_deaths_serves_again_after_its_cool_down() -> None:
    # Before: 442 of 500 calls UNAVAILABLE after a few replica deaths, down until the process restarted.
    policy = RestartPolicy(max_restarts=0, cool_down=1.0)
    async with open_runtime([pt.ray_crashy], tracing=False, restart=policy) as rt:
        first = await rt.call(call("ray_crashy"))
        assert first.ok
        died = await rt.call(call("ray_crashy", '{"exit": true}'))
        with trio.fail_after(30):
            while True:  # its replica is another process: no event to wait on
                if rt.statistics().tools["ray_crashy"].state == "down":
                    break
                await trio.sleep(0.05)
        down = await rt.call(call("ray_crashy"))
        start = trio.current_time()
        with trio.fail_after(60):
            while True:
                if (again := await rt.call(call("ray_crashy"))).ok:
                    break
                await trio.sleep(0.05)
        back_in = trio.current_time() - start
        stats = rt.statistics().tools["ray_crashy"]
    print(f"Ray tool down -> serving again in {back_in:.2f} s (cool-down 1 s, a replica's start included)")
    assert died.kind is FailureKind.ERROR
    assert down.kind is FailureKind.UNAVAILABLE
    assert "it is tried again in 1s" in down.message
    assert again.value != first.value  # a new replica
    assert (stats.state, stats.down_reason) == ("up", None)
