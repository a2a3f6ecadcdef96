"""Calls that cannot suspend run in their caller's task (the eager path, issue 14's speed).

An `async def` tool with no `await` in its code, or an `inline=True` sync tool, runs to its
end in one step wherever it runs; the runtime serves such a call in the caller's task after a
checkpoint, instead of through the mailbox. Everything else about the call stays the same:
one result, the failure mapping, supervision, spans, cancellation before it starts.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
import trio
import trio.testing
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from runtime import (
    CallContext,
    FailureKind,
    Feature,
    RestartPolicy,
    Tool,
    ToolCall,
    ToolResult,
    ToolSuccess,
    open_runtime,
    tool,
)
from runtime.tracing import Tracing

seen: list[Any] = []  # what the tools saw: the task that ran them


class NoArgs(msgspec.Struct):
    pass


def _current() -> object:
    return trio.lowlevel.current_task()


@tool
async def quick(n: int) -> int:
    seen.append(_current())
    return n + 1


@tool
async def pausing(n: int) -> int:
    seen.append(_current())
    await trio.lowlevel.checkpoint()
    return n + 1


@tool(inline=True)
def inline_add(n: int) -> int:
    seen.append(_current())
    return n + 1


@tool
def threaded(n: int) -> int:
    return n + 1


@tool(max_concurrency=2)
async def limited(n: int) -> int:
    seen.append(_current())
    return n + 1


@tool(requires_approval=True)
async def guarded(n: int) -> int:
    seen.append(_current())
    return n + 1


@tool
async def with_context(n: int, ctx: CallContext) -> float | None:
    seen.append(_current())
    return ctx.deadline


class QuickClass(Tool[NoArgs, int]):
    """A class tool whose execute does not await."""

    name = "quick_class"

    async def execute(self, args: NoArgs) -> int:
        seen.append(_current())
        return 7


class CustomDispatch(Tool[NoArgs, int]):
    """dispatch overridden: the engine cannot know what it runs, so it takes the mailbox."""

    name = "custom_dispatch"

    async def execute(self, args: NoArgs) -> int:
        seen.append(_current())
        return 8

    def dispatch(self, args: NoArgs, ctx: CallContext | None) -> Any:
        return self.execute(args)


def _call(name: str, arguments: str = '{"n": 1}', call_id: str = "c1") -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


@pytest.mark.parametrize(
    ("name", "arguments", "here"),
    [
        ("quick", '{"n": 1}', True),
        ("inline_add", '{"n": 1}', True),
        ("quick_class", "{}", True),
        ("with_context", '{"n": 1}', True),
        ("pausing", '{"n": 1}', False),  # it awaits: a worker serves it
        ("limited", '{"n": 1}', False),  # max_concurrency is kept by the actor
        ("custom_dispatch", "{}", False),
    ],
)
async def test_only_calls_that_cannot_suspend_run_in_the_callers_task(
    name: str, arguments: str, here: bool
) -> None:
    seen.clear()
    async with open_runtime(
        [quick, pausing, inline_add, limited, with_context, QuickClass(), CustomDispatch()]
    ) as rt:
        result = await rt.call(_call(name, arguments))
        assert result.ok, result
        assert (seen == [_current()]) is here


async def test_an_approved_call_is_asked_first_and_not_run_eagerly() -> None:
    from runtime import Answer

    seen.clear()

    async def yes(question: Any) -> Answer:
        return Answer(action="accept", content={})

    async with open_runtime([guarded], on_elicit=yes) as rt:
        result = await rt.call(_call("guarded"))
    assert result.ok, result
    assert seen
    assert seen[0] is not _current()


async def test_a_call_with_a_deadline_tells_the_tool_its_deadline(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime([with_context]) as rt:
        result = await rt.call(_call("with_context"), timeout=5)
        assert isinstance(result, ToolSuccess)
        assert result.value == pytest.approx(trio.current_time() + 5)
        untimed = await rt.call(_call("with_context"))
        assert isinstance(untimed, ToolSuccess)
        assert untimed.value is None


async def test_a_call_whose_deadline_passed_before_it_ran_times_out_without_running() -> None:
    seen.clear()
    async with open_runtime([quick]) as rt:
        result = await rt.call(_call("quick"), timeout=0)
        assert result.kind is FailureKind.TIMEOUT  # type: ignore[union-attr]
        results = await rt.call_many([_call("quick", call_id=f"t{i}") for i in range(3)], timeout=0)
        assert [r.kind for r in results] == [FailureKind.TIMEOUT] * 3  # type: ignore[union-attr]
    assert seen == []


async def test_a_cancelled_caller_runs_nothing_and_its_calls_are_cancelled() -> None:
    seen.clear()
    async with open_runtime([quick]) as rt:
        with trio.CancelScope() as scope:
            scope.cancel()
            await rt.call(_call("quick"))
        with trio.CancelScope() as scope:
            scope.cancel()
            await rt.call_many([_call("quick", call_id=f"b{i}") for i in range(3)])
        stats = rt.statistics().tools["quick"]
    assert seen == []
    assert stats.calls == 4
    assert stats.failures == {FailureKind.CANCELLED.value: 4}


async def test_every_call_gets_its_own_result_through_call_many_and_as_completed() -> None:
    calls = [_call("quick", f'{{"n": {i}}}', f"q{i}") for i in range(300)]
    calls += [_call("pausing", f'{{"n": {i}}}', f"p{i}") for i in range(300)]
    calls.insert(7, _call("quick", '{"n": "seven"}', "bad"))
    async with open_runtime([quick, pausing]) as rt:
        results = await rt.call_many(calls)
        assert [r.call_id for r in results] == [c.id for c in calls]
        assert results[7].kind is FailureKind.INVALID_ARGUMENTS  # type: ignore[union-attr]
        assert all(r.ok for i, r in enumerate(results) if i != 7)
        completed = [r.call_id async for r in rt.as_completed(calls)]
        assert sorted(completed) == sorted(c.id for c in calls)


class Ticker:
    """Another task that counts its turns: how often a caller let others run."""

    def __init__(self) -> None:
        self.ticks = 0

    async def run(self) -> None:
        while True:
            await trio.lowlevel.checkpoint()
            self.ticks += 1


@contextlib.asynccontextmanager
async def ticking() -> AsyncIterator[Ticker]:
    ticker = Ticker()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker.run)
        await trio.lowlevel.checkpoint()
        yield ticker
        nursery.cancel_scope.cancel()


async def test_sequential_calls_let_other_tasks_run() -> None:
    async with open_runtime([quick]) as rt, ticking() as ticker:
        start = ticker.ticks
        for _ in range(500):
            await rt.call(_call("quick"))
        assert ticker.ticks - start >= 250  # a checkpoint per call: the ticker ran between them
        start = ticker.ticks
        await rt.call_many([_call("quick", call_id=f"m{i}") for i in range(2000)])
        assert ticker.ticks - start >= 5  # a long batch checkpoints as it goes


marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="unset")


@tool
async def reads_and_sets() -> str:
    seen_value = marker.get()
    marker.set("set by the tool")
    return seen_value


async def test_the_tool_sees_its_callers_contextvars_and_cannot_change_them() -> None:
    async with open_runtime([reads_and_sets]) as rt:
        marker.set("caller")  # after opening: the runtime's own tasks do not have it
        result = await rt.call(_call("reads_and_sets", "{}"))
    assert isinstance(result, ToolSuccess)
    assert result.value == "caller"
    assert marker.get() == "caller"


class Flaky(Tool[NoArgs, int]):
    """Raises its restart_on exception on its first call."""

    name = "flaky"
    restart_on = (ConnectionError,)

    def __init__(self) -> None:
        self.setups = 0
        self.calls = 0

    async def setup(self) -> None:
        self.setups += 1

    async def execute(self, args: NoArgs) -> int:
        self.calls += 1
        if self.calls == 1:
            raise ConnectionError("lost the connection")
        return self.setups


async def test_a_restart_on_exception_restarts_the_actor(autojump_clock: trio.abc.Clock) -> None:
    flaky = Flaky()
    async with open_runtime([flaky], restart=RestartPolicy(backoff=0.1)) as rt:
        first = await rt.call(_call("flaky", "{}"))
        assert first.kind is FailureKind.ERROR  # type: ignore[union-attr]
        second = await rt.call(_call("flaky", "{}"))  # waits in the mailbox for the new incarnation
        assert isinstance(second, ToolSuccess)
        assert second.value == 2
        assert rt.statistics().tools["flaky"].restarts == 1


@tool
async def raises_anything(kind: str) -> str:
    if kind == "cancelled":
        raise trio.Cancelled._create()  # type: ignore[attr-defined]
    if kind == "interrupt":
        raise KeyboardInterrupt
    raise ValueError("bad value")


@pytest.mark.parametrize("kind", ["cancelled", "interrupt", "value"])
async def test_whatever_an_eager_tool_raises_is_that_calls_error(kind: str) -> None:
    async with open_runtime([raises_anything, quick]) as rt:
        result = await rt.call(_call("raises_anything", f'{{"kind": "{kind}"}}'))
        assert result.kind is FailureKind.ERROR  # type: ignore[union-attr]
        assert (await rt.call(_call("quick"))).ok


async def test_a_function_replaced_after_opening_is_served_by_its_actor_and_crashes_nothing() -> None:
    async def replacement(n: int) -> int:
        await trio.lowlevel.checkpoint()
        return n * 100

    async def original(n: int) -> int:
        return n

    changing = tool(original, restart_on=(RuntimeError,))  # an engine error here would restart it
    async with open_runtime([changing]) as rt:
        assert (await rt.call(_call("original", '{"n": 3}'))).value == 3  # type: ignore[union-attr]
        changing.fn = replacement  # as a test patching the tool would
        assert (await rt.call(_call("original", '{"n": 3}'))).value == 300  # type: ignore[union-attr]
        batch = await rt.call_many([_call("original", '{"n": 4}', "b")])
        assert batch[0].value == 400  # type: ignore[union-attr]
        assert rt.statistics().tools["original"].restarts == 0


async def test_a_call_served_in_the_callers_task_counts_as_in_flight_while_it_runs() -> None:
    @tool(inline=True)
    def count_myself() -> int:
        return rt.statistics().tools["count_myself"].in_flight

    async with open_runtime([count_myself]) as rt:
        result = await rt.call(_call("count_myself", "{}"))
        assert isinstance(result, ToolSuccess)
        assert result.value == 1
        assert rt.statistics().tools["count_myself"].in_flight == 0


async def test_small_batches_are_checkpoints_too() -> None:
    async with open_runtime([quick]) as rt, ticking() as ticker:
        start = ticker.ticks
        calls = [_call("quick", call_id=f"s{i}") for i in range(3)]
        for _ in range(200):
            await rt.call_many(calls)
        async with contextlib.aclosing(rt.as_completed(calls)) as results:
            async for _ in results:
                pass
        assert ticker.ticks - start >= 100  # the ticker ran between the batches
        with trio.move_on_after(0.2) as scope:  # a deadline is noticed by a loop of batches
            for _ in range(1_000_000):
                await rt.call_many(calls)
        assert scope.cancelled_caught


async def test_eager_calls_are_traced_under_the_callers_span() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    async with open_runtime([quick, raises_anything], tracing=Tracing(tracer_provider=provider)) as rt:
        with tracer.start_as_current_span("agent turn") as parent:
            assert (await rt.call(_call("quick"))).ok
            await rt.call(_call("raises_anything", '{"kind": "value"}'))
    spans = {s.name: s for s in exporter.get_finished_spans()}
    ok, failed = spans["execute_tool quick"], spans["execute_tool raises_anything"]
    for span in (ok, failed):
        assert span.parent is not None
        assert span.parent.span_id == parent.get_span_context().span_id
    assert ok.status.status_code is not StatusCode.ERROR
    assert failed.status.status_code is StatusCode.ERROR


class ShutdownBegan(Tool[NoArgs, int]):
    """Its teardown says that shutdown is under way: the tools listed after it have stopped."""

    name = "shutdown_began"

    def __init__(self) -> None:
        self.began = trio.Event()

    async def teardown(self) -> None:
        self.began.set()

    async def execute(self, args: NoArgs) -> int:
        return 0


async def test_a_call_admitted_before_shutdown_whose_tool_stopped_meanwhile_is_unavailable_not_run() -> None:
    seen.clear()
    shutdown = ShutdownBegan()

    class HoldsTheCall(Feature):
        async def on_call_starting(self, call: ToolCall, ctx: CallContext) -> None:
            if call.name == "quick":
                await shutdown.began.wait()  # the call goes on once its tool has stopped

    results: list[ToolResult] = []
    async with (
        trio.open_nursery() as nursery,  # the caller outlives the runtime's block
        open_runtime([shutdown, quick], features=[HoldsTheCall()], tracing=False) as rt,
    ):

        async def caller() -> None:
            results.append(await rt.call(_call("quick")))

        nursery.start_soon(caller)
        await trio.testing.wait_all_tasks_blocked()  # the call waits in the feature's hook
    (result,) = results
    assert result.kind is FailureKind.UNAVAILABLE  # type: ignore[union-attr]
    assert seen == []


async def test_many_cancelled_and_finished_calls_leave_no_task_behind() -> None:
    def live() -> int:
        count, stack = 0, [trio.lowlevel.current_root_task()]
        while stack:
            task = stack.pop()
            count += 1
            for nursery in task.child_nurseries:  # type: ignore[union-attr]
                stack.extend(nursery.child_tasks)
        return count

    async with open_runtime([quick, pausing]) as rt:
        await rt.call(_call("pausing"))
        baseline = live()
        for i in range(200):
            with trio.CancelScope() as scope:
                if i % 2:
                    scope.cancel()
                await rt.call_many([_call("quick", call_id=f"a{i}"), _call("pausing", call_id=f"b{i}")])
        for _ in range(10):
            await trio.lowlevel.checkpoint()
        assert live() <= baseline + 4  # the async pool keeps at most a few idle workers
