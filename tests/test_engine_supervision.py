"""Supervision and shutdown (docs/ARCHITECTURE.md 3.5): restarts with backoff, restart intensity, tools
going down while the others serve, calls in flight on a crash, and an orderly shutdown."""

import json
import threading
from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from runtime import (
    FailureKind,
    Feature,
    RestartPolicy,
    RuntimeClosed,
    Tool,
    ToolCall,
    ToolFailure,
    ToolResult,
    ToolSuccess,
    open_runtime,
    tool,
)


def call(call_id: str, name: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=json.dumps(arguments))


@tool
async def echo(text: str) -> str:
    """Say it back."""
    return text


class LinkLost(ConnectionError):
    pass


class Job(msgspec.Struct):
    crash: bool = False
    seconds: float = 0.0


class Flaky(Tool[Job, str]):
    """Connects in setup; a lost link (LinkLost) restarts it."""

    name = "flaky"
    restart_on = (ConnectionError,)

    def __init__(self, *, failing_setups: int = 0, max_concurrency: int | None = None) -> None:
        self.log: list[tuple[str, float]] = []
        self.failing_setups = failing_setups
        self.max_concurrency = max_concurrency
        self.cancelled: list[float] = []

    async def setup(self) -> None:
        self.log.append(("setup", trio.current_time()))
        if self.failing_setups:
            self.failing_setups -= 1
            raise OSError("database unreachable")

    async def teardown(self) -> None:
        self.log.append(("teardown", trio.current_time()))

    async def execute(self, args: Job) -> str:
        try:
            await trio.sleep(args.seconds)
        except trio.Cancelled:
            self.cancelled.append(trio.current_time())
            raise
        if args.crash:
            raise LinkLost("link lost")
        return "ok"

    def times(self, event: str) -> list[float]:
        return [t for e, t in self.log if e == event]


class Events(Feature):
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def on_supervisor_event(self, tool_name: str, event: str, reason: str) -> None:
        self.events.append((tool_name, event, reason))


def crash(call_id: str, seconds: float = 0) -> ToolCall:
    return call(call_id, "flaky", crash=True, seconds=seconds)


def work(call_id: str, seconds: float = 0) -> ToolCall:
    return call(call_id, "flaky", seconds=seconds)


def kinds(results: list[ToolResult]) -> list[str]:
    return [r.kind.value if isinstance(r, ToolFailure) else "ok" for r in results]


# -- restarts --------------------------------------------------------------------------------------


async def test_a_restart_on_exception_restarts_the_tool_with_teardown_then_setup(
    autojump_clock: trio.abc.Clock,
) -> None:
    flaky = Flaky()
    events = Events()
    policy = RestartPolicy(max_restarts=3, within=5, backoff=0.5)
    async with open_runtime([flaky, echo], tracing=False, restart=policy, features=[events]) as rt:
        crashed = await rt.call(crash("c1"))
        await trio.testing.wait_all_tasks_blocked()
        assert trio.current_time() == 0.0
        stats = rt.statistics().tools["flaky"]
        assert (stats.state, stats.restarts) == ("restarting", 1)
        after = await rt.call(work("c2"))
        assert trio.current_time() == 0.5  # waited in the mailbox through the backoff
        stats = rt.statistics().tools["flaky"]
    assert isinstance(crashed, ToolFailure)
    assert crashed.kind is FailureKind.ERROR
    assert crashed.content == "Error: tool 'flaky' raised LinkLost: link lost"
    assert after == ToolSuccess(call_id="c2", tool="flaky", content="ok", value="ok")
    assert flaky.log == [("setup", 0.0), ("teardown", 0.0), ("setup", 0.5), ("teardown", 0.5)]
    assert (stats.state, stats.restarts, stats.calls, stats.failures) == ("up", 1, 2, {"error": 1})
    assert events.events == [("flaky", "restart", "LinkLost: link lost")]


async def test_other_exceptions_do_not_restart_the_tool() -> None:
    @tool(restart_on=[ConnectionError])
    async def picky(kind: str) -> str:
        raise {"value": ValueError, "key": KeyError}[kind]("no")

    async with open_runtime([picky], tracing=False) as rt:
        results = await rt.call_many([call("a", "picky", kind="value"), call("b", "picky", kind="key")])
        stats = rt.statistics().tools["picky"]
    assert kinds(results) == ["error", "error"]
    assert (stats.restarts, stats.state) == (0, "up")


async def test_backoff_between_restarts_doubles_up_to_max_backoff(autojump_clock: trio.abc.Clock) -> None:
    flaky = Flaky(max_concurrency=1)
    policy = RestartPolicy(max_restarts=10, within=100, backoff=1, max_backoff=3)
    async with open_runtime([flaky], tracing=False, restart=policy) as rt:
        results = await rt.call_many([crash(f"c{i}") for i in range(5)] + [work("last")])
        assert trio.current_time() == 12.0
        stats = rt.statistics().tools["flaky"]
    assert kinds(results) == ["error"] * 5 + ["ok"]
    # one crash per incarnation; waits of 1, 2, 4 -> 3 (capped), 3, 3
    assert flaky.times("setup") == [0.0, 1.0, 3.0, 6.0, 9.0, 12.0]
    assert flaky.times("teardown") == [0.0, 1.0, 3.0, 6.0, 9.0, 12.0]
    assert stats.restarts == 5


def test_restart_policy_delay_doubles_from_backoff_and_is_capped() -> None:
    policy = RestartPolicy(backoff=0.25, max_backoff=1.5)
    assert [policy.delay(n) for n in range(6)] == [0.25, 0.25, 0.5, 1.0, 1.5, 1.5]
    assert RestartPolicy() == RestartPolicy(
        max_restarts=3, within=5.0, backoff=0.1, max_backoff=5.0, cool_down=30.0, max_cool_down=600.0
    )
    cooling = RestartPolicy(cool_down=10, max_cool_down=50)
    assert [cooling.rest(n) for n in range(1, 6)] == [10.0, 20.0, 40.0, 50.0, 50.0]
    assert RestartPolicy(cool_down=None).rest(1) is None


async def test_too_many_restarts_within_the_period_mark_the_tool_down_while_others_serve(
    autojump_clock: trio.abc.Clock,
) -> None:
    flaky = Flaky(max_concurrency=1)
    events = Events()
    policy = RestartPolicy(max_restarts=2, within=10, backoff=1)
    async with open_runtime([flaky, echo], tracing=False, restart=policy, features=[events]) as rt:
        results = await rt.call_many(
            [crash("c1"), crash("c2"), crash("c3"), work("queued-1"), work("queued-2")]
        )
        assert trio.current_time() == 3.0
        later = await rt.call(work("later"))
        other = await rt.call(call("other", "echo", text="still here"))
        stats = rt.statistics()
    reason = "it crashed 3 times within 10s (last: LinkLost: link lost)"
    assert kinds(results) == ["error", "error", "error", "unavailable", "unavailable"]
    for result in [*results[3:], later]:
        assert isinstance(result, ToolFailure)
        assert result.kind is FailureKind.UNAVAILABLE
        # what the model reads: why, and when it is worth asking again (the default cool-down)
        assert result.content == f"Error: tool 'flaky' is down: {reason}; it is tried again in 30s"
    assert other.ok
    assert (stats.tools["flaky"].state, stats.tools["flaky"].restarts) == ("down", 2)
    assert stats.tools["flaky"].failures == {"error": 3, "unavailable": 3}
    assert stats.tools["echo"].state == "up"
    assert flaky.times("setup") == [0.0, 1.0, 3.0]
    assert flaky.times("teardown") == [0.0, 1.0, 3.0]  # a tool that goes down is torn down once more
    assert events.events == [
        ("flaky", "restart", "LinkLost: link lost"),
        ("flaky", "restart", "LinkLost: link lost"),
        ("flaky", "down", reason),
    ]


async def test_crashes_spread_wider_than_the_period_never_take_the_tool_down(
    autojump_clock: trio.abc.Clock,
) -> None:
    flaky = Flaky()
    policy = RestartPolicy(max_restarts=1, within=5, backoff=0.5)
    async with open_runtime([flaky], tracing=False, restart=policy) as rt:
        for i in range(4):
            assert kinds([await rt.call(crash(f"c{i}"))]) == ["error"]
            await trio.sleep(6)
        assert rt.statistics().tools["flaky"].state == "up"
        crashes_close_together = [await rt.call(crash("d1")), await rt.call(crash("d2"))]
        await trio.testing.wait_all_tasks_blocked()
        stats = rt.statistics().tools["flaky"]
    assert kinds(crashes_close_together) == ["error", "error"]
    assert (stats.state, stats.restarts) == ("down", 5)


async def test_a_failing_setup_counts_as_a_crash_and_queued_calls_wait_for_the_restart(
    autojump_clock: trio.abc.Clock,
) -> None:
    flaky = Flaky(failing_setups=2)
    events = Events()
    policy = RestartPolicy(max_restarts=3, within=10, backoff=1)
    async with open_runtime([flaky], tracing=False, restart=policy, features=[events]) as rt:
        assert rt.statistics().tools["flaky"].state == "restarting"
        result = await rt.call(work("c1"))
        assert trio.current_time() == 3.0
        stats = rt.statistics().tools["flaky"]
    assert result.ok
    assert flaky.times("setup") == [0.0, 1.0, 3.0]
    assert flaky.times("teardown") == [0.0, 1.0, 3.0]
    assert (stats.state, stats.restarts) == ("up", 2)
    assert [e[1:] for e in events.events] == [("restart", "setup failed: OSError: database unreachable")] * 2


async def test_a_setup_that_always_fails_marks_the_tool_down_and_the_runtime_still_opens(
    autojump_clock: trio.abc.Clock,
) -> None:
    flaky = Flaky(failing_setups=100)
    policy = RestartPolicy(max_restarts=2, within=10, backoff=0.5)
    async with open_runtime([echo, flaky], tracing=False, restart=policy) as rt:
        opened_at = trio.current_time()
        waiting = await rt.call(work("c1"))
        failed_at = trio.current_time()
        later = await rt.call(work("c2"))
        other = await rt.call(call("c3", "echo", text="fine"))
        stats = rt.statistics().tools["flaky"]
    assert (opened_at, failed_at) == (0.0, 1.5)
    reason = "it crashed 3 times within 10s (last: setup failed: OSError: database unreachable)"
    for result in (waiting, later):
        assert isinstance(result, ToolFailure)
        assert result.kind is FailureKind.UNAVAILABLE
        assert result.message == f"tool 'flaky' is down: {reason}; it is tried again in 30s"
    assert other.ok
    assert (stats.state, stats.restarts) == ("down", 2)
    assert flaky.times("setup") == [0.0, 0.5, 1.5]


async def test_a_setup_or_teardown_that_raises_system_exit_is_a_crash_not_the_end_of_the_runtime(
    autojump_clock: trio.abc.Clock,
) -> None:
    class Exiting(Flaky):
        name = "exiting"

        async def setup(self) -> None:
            await super().setup()
            if len(self.times("setup")) == 1:
                raise SystemExit("setup gave up")

        async def teardown(self) -> None:
            await super().teardown()
            raise SystemExit("teardown gave up")

    exiting = Exiting()
    async with open_runtime([exiting, echo], tracing=False, restart=RestartPolicy(backoff=1)) as rt:
        result = await rt.call(call("c1", "exiting"))
        assert trio.current_time() == 1.0
        other = await rt.call(call("c2", "echo", text="x"))
        stats = rt.statistics().tools["exiting"]
    assert result.ok
    assert other.ok
    assert (stats.restarts, stats.state) == (1, "up")
    assert exiting.times("setup") == [0.0, 1.0]


async def test_calls_in_flight_on_a_crashing_tool_fail_unavailable_not_silently(
    autojump_clock: trio.abc.Clock,
) -> None:
    flaky = Flaky()
    policy = RestartPolicy(max_restarts=3, within=10, backoff=0.5)
    async with open_runtime([flaky], tracing=False, restart=policy) as rt:
        results = await rt.call_many(
            [work("slow-1", 10), crash("crash", 2), work("slow-2", 10), work("quick", 1)]
        )
        assert trio.current_time() == 2.0
        after = await rt.call(work("after", 1))
    quick, slow = results[3], results[0]
    assert quick.ok
    assert kinds(results) == ["unavailable", "error", "unavailable", "ok"]
    assert isinstance(slow, ToolFailure)
    assert slow.content == (
        "Error: tool 'flaky' crashed while serving this call (LinkLost: link lost) and is restarting"
    )
    assert flaky.cancelled == [2.0, 2.0]  # the tool's code saw the cancellation
    assert after.ok


async def test_a_crash_answers_a_call_running_in_a_thread_without_waiting_for_the_thread() -> None:
    gate = threading.Event()
    started = threading.Event()

    @tool(restart_on=[LinkLost])
    def blocking(crash: bool) -> str:
        if crash:
            raise LinkLost("gone")
        started.set()
        gate.wait(timeout=30)  # a bound, in case the test failed before opening the gate
        return "released"

    try:
        async with open_runtime([blocking], tracing=False) as rt, trio.open_nursery() as nursery:
            answered: list[ToolResult] = []
            done = trio.Event()

            async def call_blocking() -> None:
                answered.append(await rt.call(call("in-thread", "blocking", crash=False)))
                done.set()

            nursery.start_soon(call_blocking)
            await trio.to_thread.run_sync(started.wait, 30)
            crashed = await rt.call(call("crash", "blocking", crash=True))
            with trio.fail_after(30):  # the thread is still blocked: the answer cannot come from it
                await done.wait()
            assert not gate.is_set()
    finally:
        gate.set()
    assert kinds([crashed]) == ["error"]
    (result,) = answered
    assert isinstance(result, ToolFailure)
    assert (
        result.content
        == "Error: tool 'blocking' crashed while serving this call (LinkLost: gone) and is restarting"
    )


# -- shutdown --------------------------------------------------------------------------------------


async def test_leaving_the_runtime_fails_queued_calls_unavailable_and_lets_running_ones_finish(
    autojump_clock: trio.abc.Clock,
) -> None:
    @tool(max_concurrency=1)
    async def serial(i: int) -> int:
        await trio.sleep(2)
        return i

    answered: dict[str, tuple[float, ToolResult]] = {}

    async def caller(rt: Any, cid: str) -> None:
        result = await rt.call(call(cid, "serial", i=1))
        answered[cid] = (trio.current_time(), result)

    async with trio.open_nursery() as nursery:
        async with open_runtime([serial], tracing=False, shutdown_timeout=5) as rt:
            for cid in ("running", "queued-1", "queued-2"):
                nursery.start_soon(caller, rt, cid)
                await trio.testing.wait_all_tasks_blocked()
            assert rt.statistics().tools["serial"].queued == 2
        closed_at = trio.current_time()
    assert closed_at == 2.0
    assert answered["running"] == (2.0, ToolSuccess(call_id="running", tool="serial", content="1", value=1))
    for cid in ("queued-1", "queued-2"):
        when, result = answered[cid]
        assert when == 0.0
        assert result == ToolFailure(
            call_id=cid,
            tool="serial",
            kind=FailureKind.UNAVAILABLE,
            message="tool 'serial' is unavailable: the runtime is shutting down",
        )


async def test_shutdown_cancels_calls_still_running_after_shutdown_timeout(
    autojump_clock: trio.abc.Clock,
) -> None:
    flaky = Flaky()
    answered: list[tuple[float, ToolResult]] = []

    async def caller(rt: Any) -> None:
        result = await rt.call(work("long", 60))
        answered.append((trio.current_time(), result))

    async with trio.open_nursery() as nursery:
        async with open_runtime([flaky], tracing=False, shutdown_timeout=3) as rt:
            nursery.start_soon(caller, rt)
            await trio.testing.wait_all_tasks_blocked()
        assert trio.current_time() == 3.0
        stats = rt.statistics().tools["flaky"]
    assert flaky.cancelled == [3.0]
    assert answered == [
        (
            3.0,
            ToolFailure(
                call_id="long",
                tool="flaky",
                kind=FailureKind.UNAVAILABLE,
                message="tool 'flaky' is unavailable: the runtime is shutting down",
            ),
        )
    ]
    assert flaky.log == [("setup", 0.0), ("teardown", 3.0)]
    assert (stats.state, stats.in_flight) == ("stopped", 0)


async def test_calls_made_while_the_runtime_shuts_down_fail_unavailable(
    autojump_clock: trio.abc.Clock,
) -> None:
    answered: list[tuple[float, ToolResult]] = []

    async def late_caller(rt: Any) -> None:
        await trio.sleep(1)  # the runtime is draining a running call by now
        answered.append((trio.current_time(), await rt.call(call("late", "echo", text="hi"))))

    flaky = Flaky()
    async with trio.open_nursery() as nursery, open_runtime([echo, flaky], tracing=False) as rt:
        nursery.start_soon(rt.call, work("draining", 2))
        nursery.start_soon(late_caller, rt)
        await trio.testing.wait_all_tasks_blocked()
    ((when, result),) = answered
    assert when == 1.0
    assert result == ToolFailure(
        call_id="late",
        tool="echo",
        kind=FailureKind.UNAVAILABLE,
        message="tool 'echo' is unavailable: the runtime is shutting down",
    )


async def test_shutdown_does_not_wait_out_a_restart_backoff(autojump_clock: trio.abc.Clock) -> None:
    flaky = Flaky(failing_setups=1)
    answered: list[tuple[float, ToolResult]] = []

    async def caller(rt: Any) -> None:
        result = await rt.call(work("waiting"))
        answered.append((trio.current_time(), result))

    async with trio.open_nursery() as nursery:
        async with open_runtime(
            [flaky], tracing=False, restart=RestartPolicy(backoff=30, max_backoff=30)
        ) as rt:
            nursery.start_soon(caller, rt)
            await trio.testing.wait_all_tasks_blocked()
        assert trio.current_time() == 0.0
    ((when, result),) = answered
    assert when == 0.0
    assert isinstance(result, ToolFailure)
    assert result.kind is FailureKind.UNAVAILABLE
    assert flaky.times("setup") == [0.0]


class Sticky(Flaky):
    """Its setup hangs on a restart (a connection attempt without a timeout)."""

    name = "sticky"

    async def setup(self) -> None:
        await super().setup()
        if len(self.times("setup")) > 1:
            await trio.sleep_forever()


async def test_shutdown_cancels_a_restart_whose_setup_hangs(autojump_clock: trio.abc.Clock) -> None:
    sticky = Sticky()
    with trio.move_on_after(60):  # a hang would be a failure, not a stuck test
        await run_sticky(sticky)
    assert sticky.log == [("setup", 0.0), ("teardown", 0.0), ("setup", 0.1), ("teardown", 7.0)]


async def run_sticky(sticky: Sticky) -> None:
    async with open_runtime([sticky, echo], tracing=False, shutdown_timeout=2) as rt:
        assert kinds([await rt.call(call("c1", "sticky", crash=True))]) == ["error"]
        with trio.move_on_after(5):
            await rt.call(call("c2", "sticky"))  # waits for a restart that never finishes
        assert rt.statistics().tools["sticky"].state == "restarting"
        assert (await rt.call(call("c3", "echo", text="others serve"))).ok
        leaving = trio.current_time()
    assert trio.current_time() - leaving == 2.0
    assert rt.statistics().tools["sticky"].state == "stopped"


async def test_a_teardown_that_hangs_is_bounded_by_shutdown_timeout(autojump_clock: trio.abc.Clock) -> None:
    class Stuck(Flaky):
        name = "stuck"

        async def teardown(self) -> None:
            await super().teardown()
            await trio.sleep_forever()

    async with open_runtime([Stuck(), echo], tracing=False, shutdown_timeout=3) as rt:
        assert (await rt.call(call("c1", "stuck"))).ok
    assert trio.current_time() == 3.0


async def test_a_tool_that_is_down_can_be_replaced_while_running(autojump_clock: trio.abc.Clock) -> None:
    broken = Flaky(failing_setups=100)
    async with open_runtime([broken], tracing=False, restart=RestartPolicy(max_restarts=0)) as rt:
        down = await rt.call(work("c1"))
        assert rt.statistics().tools["flaky"].state == "down"
        fixed = Flaky()
        await rt.register(fixed, replace=True)
        up = await rt.call(work("c2"))
        stats = rt.statistics().tools["flaky"]
    assert kinds([down, up]) == ["unavailable", "ok"]
    assert (stats.state, stats.restarts, stats.calls) == ("up", 0, 1)
    assert fixed.times("setup") == [0.0]


async def test_tools_added_while_the_runtime_shuts_down_are_refused_or_stopped_too(
    autojump_clock: trio.abc.Clock,
) -> None:
    class SlowStart(Flaky):
        async def setup(self) -> None:
            await super().setup()
            await trio.sleep(2)

    def slow_start(name: str) -> SlowStart:
        t = SlowStart()
        t.name = name
        return t

    first, queued, late = slow_start("first"), slow_start("queued"), slow_start("late")
    outcomes: dict[str, str] = {}

    async def register(rt: Any, t: SlowStart, after: float) -> None:
        await trio.sleep(after)
        try:
            await rt.register(t)
        except RuntimeClosed as exc:
            outcomes[t.name] = f"refused at {trio.current_time():g}: {exc}"
        else:
            outcomes[t.name] = f"registered at {trio.current_time():g}"

    with trio.move_on_after(60):  # a shutdown that never ends would be a failure, not a stuck test
        async with trio.open_nursery() as nursery:
            async with open_runtime([echo], tracing=False) as rt:
                nursery.start_soon(register, rt, first, 0)  # its setup is under way at shutdown
                nursery.start_soon(register, rt, queued, 0.5)  # the registry is not held up by a setup
                nursery.start_soon(register, rt, late, 1.5)  # asks once the shutdown has begun
                await trio.sleep(1)
            closed_at = trio.current_time()
    assert closed_at == 2.5  # shutdown lets both setups under way finish (gracefully), then stops them
    assert outcomes == {
        "first": "registered at 2",
        "queued": "registered at 2.5",
        "late": "refused at 1.5: the runtime is shutting down; no tool can be added or removed",
    }
    assert queued.log == [("setup", 0.5), ("teardown", 2.5)]
    assert first.log == [("setup", 0.0), ("teardown", 2.5)]  # stopped after `queued`: reverse order
    assert late.log == []


async def test_actors_stop_in_reverse_start_order() -> None:
    order: list[str] = []

    class Ordered(Tool[Job, str]):
        def __init__(self, name: str) -> None:
            self.name = name

        async def setup(self) -> None:
            order.append(f"setup {self.name}")

        async def teardown(self) -> None:
            order.append(f"teardown {self.name}")

        async def execute(self, args: Job) -> str:
            return self.name

    async with open_runtime([Ordered("a"), Ordered("b"), Ordered("c")], tracing=False) as rt:
        await rt.register(Ordered("d"))
        await rt.register(Ordered("b"), replace=True)
        assert (await rt.call(ToolCall(id="c1", name="b"))).ok
        order.append("closing")
    assert order == [
        "setup a",
        "setup b",
        "setup c",
        "setup d",
        "setup b",  # a replacement starts before the tool it replaces stops
        "teardown b",
        "closing",
        "teardown b",
        "teardown d",
        "teardown c",
        "teardown a",
    ]


async def test_a_closed_runtime_raises_runtime_closed_and_keeps_its_last_statistics() -> None:
    async with open_runtime([echo], tracing=False) as rt:
        assert (await rt.call(call("c1", "echo", text="x"))).ok
    with pytest.raises(RuntimeClosed, match="the runtime is closed"):
        await rt.call(call("c2", "echo", text="x"))
    with pytest.raises(RuntimeClosed, match="the runtime is closed"):
        await rt.call_many([call("c3", "echo", text="x")])
    with pytest.raises(RuntimeClosed, match="the runtime is closed"):
        async for _ in rt.as_completed([call("c4", "echo", text="x")]):
            pass
    with pytest.raises(RuntimeClosed, match="the runtime is closed"):
        await rt.invoke(echo, text="x")
    with pytest.raises(RuntimeClosed, match="the runtime is closed"):
        await rt.register(tool(name="other")(echo.fn))
    with pytest.raises(RuntimeClosed, match="the runtime is closed"):
        await rt.unregister("echo")
    stats = rt.statistics().tools["echo"]
    assert (stats.calls, stats.succeeded, stats.state) == (1, 1, "stopped")


async def test_an_exception_in_the_callers_block_still_shuts_the_runtime_down(
    autojump_clock: trio.abc.Clock,
) -> None:
    flaky = Flaky()
    with pytest.RaisesGroup(
        pytest.RaisesExc(KeyError, match="mine"), allow_unwrapped=True, flatten_subgroups=True
    ):
        async with open_runtime([flaky], tracing=False) as rt:
            assert (await rt.call(work("c1"))).ok
            raise KeyError("mine")
    assert flaky.times("teardown") == [0.0]
    assert rt.statistics().tools["flaky"].state == "stopped"


async def test_stuck_tools_share_one_grace_period_at_shutdown(autojump_clock: trio.abc.Clock) -> None:
    def stuck_tool(name: str) -> Any:
        @tool(name=name)
        async def hang() -> None:
            await trio.sleep_forever()

        return hang

    results: list[ToolResult] = []
    tools = [stuck_tool("a"), stuck_tool("b"), stuck_tool("c")]
    start = trio.current_time()
    async with trio.open_nursery() as nursery, open_runtime(tools, tracing=False, shutdown_timeout=5) as rt:

        async def call(name: str) -> None:
            results.append(await rt.call(ToolCall(id=name, name=name)))

        for name in "abc":
            nursery.start_soon(call, name)
        await trio.testing.wait_all_tasks_blocked()
    assert trio.current_time() - start == 5  # one grace period for all three, not 5 s each
    assert sorted(r.call_id for r in results) == ["a", "b", "c"]
    assert all(isinstance(r, ToolFailure) and r.kind is FailureKind.UNAVAILABLE for r in results)


async def test_tool_sources_start_together(autojump_clock: trio.abc.Clock) -> None:
    class SlowSource:
        def __init__(self, name: str) -> None:
            self.name = name

        async def run(self, registrar: Any, *, task_status: Any) -> None:
            await trio.sleep(1)  # connecting and listing

            @tool(name=f"{self.name}_ping")
            async def ping() -> str:
                return "pong"

            await registrar.register(ping)
            task_status.started()
            await trio.sleep_forever()

    start = trio.current_time()
    async with open_runtime([], tracing=False, mcp_servers=[SlowSource("x"), SlowSource("y")]) as rt:
        assert trio.current_time() - start == 1
        assert sorted(rt.registry.names()) == ["x_ping", "y_ping"]


# -- a down tool comes back: cool-down, one try (half-open), then it serves ---------------


class SlowSetup(Flaky):
    """Flaky whose setup takes `setup_seconds`."""

    setup_seconds = 0.0

    async def setup(self) -> None:
        await super().setup()
        await trio.sleep(self.setup_seconds)


async def test_a_down_tool_is_tried_again_after_its_cool_down_and_serves_again(
    autojump_clock: trio.abc.Clock,
) -> None:
    flaky = SlowSetup()
    events = Events()
    policy = RestartPolicy(max_restarts=1, within=10, backoff=1, cool_down=20)
    async with open_runtime([flaky], tracing=False, restart=policy, features=[events]) as rt:
        await rt.call(crash("c1"))
        await trio.sleep_until(1.5)  # restarted at 1
        await rt.call(crash("c2"))  # the second crash within 10 s: down at 1.5, tried again at 21.5
        down = await rt.call(work("w1"))
        await trio.sleep_until(11.5)
        still_down = await rt.call(work("w2"))
        state_down = rt.statistics().tools["flaky"].state
        flaky.setup_seconds = 2.0
        await trio.sleep_until(22.0)  # the try began at 21.5; its setup ends at 23.5
        during_try = await rt.call(work("w3"))  # waits for the try, as a call waits for a restart
        answered_at = trio.current_time()
        stats = rt.statistics().tools["flaky"]
    reason = "it crashed 2 times within 10s (last: LinkLost: link lost)"
    assert down.kind is FailureKind.UNAVAILABLE
    assert down.message == f"tool 'flaky' is down: {reason}; it is tried again in 20s"
    assert still_down.message == f"tool 'flaky' is down: {reason}; it is tried again in 10s"
    assert state_down == "down"
    assert during_try.ok
    assert answered_at == 23.5
    assert (stats.state, stats.down_reason) == ("up", None)
    assert flaky.times("setup") == [0.0, 1.0, 21.5]
    assert ("flaky", "retry", "tried again after 20s down") in events.events


async def test_a_try_that_fails_rests_twice_as_long_until_the_tool_answers_a_call(
    autojump_clock: trio.abc.Clock,
) -> None:
    flaky = Flaky(failing_setups=3)  # setup fails at 0 (down), 10 and 30 (the tries); works at 55
    policy = RestartPolicy(max_restarts=0, within=10, backoff=1, cool_down=10, max_cool_down=25)
    async with open_runtime([flaky], tracing=False, restart=policy) as rt:
        messages = []
        for when in (5, 15, 40):
            await trio.sleep_until(when)
            messages.append((await rt.call(work(f"w{when}"))).message)
        await trio.sleep_until(56)
        served = await rt.call(work("w56"))
        gone = await rt.call(crash("c57"))  # down again, after a call it answered: 10 s again
        again = await rt.call(work("w57"))
    failed_try = (
        "tool 'flaky' is down: it was tried again after its cool-down and failed: "
        "setup failed: OSError: database unreachable"
    )
    assert messages == [
        "tool 'flaky' is down: it crashed 1 times within 10s (last: setup failed: OSError: database "
        "unreachable); it is tried again in 5s",
        f"{failed_try}; it is tried again in 15s",  # failed at 10: 20 s
        f"{failed_try}; it is tried again in 15s",  # failed at 30: 25 s (the cap)
    ]
    assert flaky.times("setup") == [0.0, 10.0, 30.0, 55.0]
    assert served.ok
    assert gone.kind is FailureKind.ERROR
    assert again.message.endswith("; it is tried again in 10s")


async def test_with_no_cool_down_a_down_tool_stays_down(autojump_clock: trio.abc.Clock) -> None:
    flaky = Flaky()
    policy = RestartPolicy(max_restarts=0, cool_down=None)
    async with open_runtime([flaky], tracing=False, restart=policy) as rt:
        await rt.call(crash("c1"))
        await trio.sleep(3600)
        later = await rt.call(work("w1"))
        stats = rt.statistics().tools["flaky"]
    assert later.message == "tool 'flaky' is down: it crashed 1 times within 5s (last: LinkLost: link lost)"
    assert stats.state == "down"
    assert flaky.times("setup") == [0.0]


async def test_closing_while_a_tool_rests_does_not_wait_for_its_cool_down(
    autojump_clock: trio.abc.Clock,
) -> None:
    flaky = Flaky()
    async with open_runtime(
        [flaky], tracing=False, restart=RestartPolicy(max_restarts=0, cool_down=500)
    ) as rt:
        await rt.call(crash("c1"))
        await trio.sleep(0.1)  # the supervisor takes it down after the call is answered
        assert rt.statistics().tools["flaky"].state == "down"
    assert trio.current_time() < 1.0  # an autojump clock would have jumped 500 s for a sleep
    assert flaky.times("setup") == [0.0]
