"""Containment: no argument, tool or caller can hurt another call (issue 10, points 1-7).

Each point is shown through `open_runtime` (virtual time) and through `RuntimeThread`
(the runtime on its own thread, called from this one).
"""

from __future__ import annotations

import json
import threading
from typing import Any

import msgspec
import pytest
import trio

from runtime import (
    CallContext,
    FailureKind,
    TextPart,
    Tool,
    ToolCall,
    ToolDefinitionError,
    ToolFailure,
    ToolRejected,
    ToolResult,
    ToolSuccess,
    open_runtime,
    tool,
)
from runtime.embed import RuntimeThread

# -- tools ---------------------------------------------------------------------------


@tool
async def add(a: int, b: int) -> int:
    return a + b


@tool
def add_sync(a: int, b: int) -> int:
    return a + b


@tool
async def anything(value: Any = None) -> str:
    return "ok"


@tool(timeout=0.3)
async def shielded(seconds: float = 8.0) -> str:
    with trio.CancelScope(shield=True):
        await trio.sleep(seconds)
    return "finished late"


@tool(restart_on=(ValueError,))
async def strict(n: int) -> int:
    return n


class Job(msgspec.Struct):
    n: int = 0


def deep_text(depth: int) -> str:
    return '{"value": ' + "[" * depth + "]" * depth + "}"


def deep_dict(depth: int) -> dict[str, Any]:
    inner: list[Any] = []
    root = {"value": inner}
    for _ in range(depth - 1):
        nxt: list[Any] = []
        inner.append(nxt)
        inner = nxt
    return root


def call(name: Any, arguments: Any = "{}", call_id: Any = "c1") -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


def failure(result: ToolResult) -> ToolFailure:
    assert isinstance(result, ToolFailure), result
    return result


def count_tasks() -> int:
    """Live trio tasks, from the root task down (system tasks included)."""

    def walk(task: trio.lowlevel.Task) -> int:
        return 1 + sum(walk(child) for nursery in task.child_nurseries for child in nursery.child_tasks)

    return walk(trio.lowlevel.current_root_task())


# -- 1. one call's arguments never stop the runtime -----------------------------------------


HOSTILE_ARGUMENTS: list[tuple[str, Any, str]] = [
    ("json text 1,000 deep", deep_text(1000), "nested deeper than the limit of 64 levels"),
    ("parsed dict 1,000 deep", deep_dict(1000), "nested deeper than the limit of 64 levels"),
    ("short text, lone surrogate", '{"value": "a\ud800"}', "not valid Unicode"),
    (
        "300,000 characters with a lone surrogate",
        '{"value": "' + "x" * 300_000 + '\ud800"}',
        "not valid Unicode",
    ),
    ("an object that is not JSON", {"value": object()}, "not JSON"),
    ("a list, not an object", [1, 2], "must be a JSON object"),
]


@pytest.mark.parametrize(
    ("label", "arguments", "expected"), HOSTILE_ARGUMENTS, ids=[h[0] for h in HOSTILE_ARGUMENTS]
)
async def test_hostile_arguments_are_invalid_for_that_call_only(
    label: str, arguments: Any, expected: str
) -> None:
    async with open_runtime([anything, add], tracing=False) as rt:
        bad, good = await rt.call_many([call("anything", arguments), call("add", '{"a": 1, "b": 2}', "c2")])
        again = await rt.call(call("anything", '{"value": 1}'))
    assert failure(bad).kind is FailureKind.INVALID_ARGUMENTS, label
    assert expected in bad.content
    assert good == ToolSuccess(call_id="c2", tool="add", content="3", value=3)
    assert again.ok


async def test_invoke_with_a_value_that_is_not_json_is_invalid_arguments() -> None:
    async with open_runtime([add], tracing=False) as rt:
        bad = await rt.invoke(add, a=object(), b=1)
        good = await rt.invoke(add, a=1, b=1)
    assert failure(bad).kind is FailureKind.INVALID_ARGUMENTS
    assert "not JSON" in bad.message
    assert good.ok
    assert good.value == 2


async def test_a_lone_surrogate_is_refused_with_its_json_path() -> None:
    async with open_runtime([anything], tracing=False) as rt:
        result = await rt.call(call("anything", '{"value": {"items": [1, "ok", "bad\ud800"]}}'))
    assert failure(result).kind is FailureKind.INVALID_ARGUMENTS
    assert "`$.value.items[2]`" in result.message


def test_hostile_arguments_through_runtime_thread_leave_it_serving() -> None:
    with RuntimeThread([anything, add], tracing=False) as rt:
        results = rt.call_many(
            [call("anything", args, f"c{i}") for i, (_, args, _) in enumerate(HOSTILE_ARGUMENTS)]
        )
        assert [failure(r).kind for r in results] == [FailureKind.INVALID_ARGUMENTS] * len(HOSTILE_ARGUMENTS)
        assert rt.call(call("add", '{"a": 2, "b": 2}')).ok


# -- 2. timeouts and cancellations give their worker back ------------------------------------


async def test_timeouts_and_cancellations_leave_no_task_behind(autojump_clock: trio.abc.Clock) -> None:
    @tool
    async def slow(seconds: float) -> str:
        await trio.sleep(seconds)
        return "done"

    before = count_tasks()
    async with open_runtime([slow], tracing=False) as rt:
        await rt.call(call("slow", '{"seconds": 0}'))
        baseline = count_tasks()
        for i in range(300):  # per-call timeouts
            result = await rt.call(call("slow", '{"seconds": 10}', f"t{i}"), timeout=1)
            assert failure(result).kind is FailureKind.TIMEOUT
        async with trio.open_nursery() as nursery:  # caller cancellations
            for i in range(300):
                nursery.start_soon(rt.call, call("slow", '{"seconds": 10}', f"x{i}"))
            await trio.sleep(1)
            nursery.cancel_scope.cancel()
        results = await rt.call_many(
            [call("slow", '{"seconds": 10}', f"m{i}") for i in range(300)], timeout=1
        )
        assert {failure(r).kind for r in results} == {FailureKind.TIMEOUT}
        await trio.sleep(1)  # idle workers retire
        assert count_tasks() <= baseline + 4  # at most the idle workers an actor keeps
        stats = rt.statistics().tools["slow"]
        assert stats.in_flight == 0
        assert stats.abandoned == 0  # every one of them stopped when cancelled
    assert count_tasks() == before


def test_timeouts_through_runtime_thread_leave_the_runtime_serving() -> None:
    @tool
    async def slow(seconds: float) -> str:
        await trio.sleep(seconds)
        return "done"

    with RuntimeThread([slow], tracing=False) as rt:
        results = rt.call_many([call("slow", '{"seconds": 5}', f"t{i}") for i in range(200)], timeout=0.05)
        assert {failure(r).kind for r in results} == {FailureKind.TIMEOUT}
        assert rt.call(call("slow", '{"seconds": 0}')).ok
        assert rt.statistics().tools["slow"].in_flight == 0


# -- 3. a stray trio.Cancelled is the tool's error ------------------------------------------


def stale_cancelled_tool() -> Any:
    stash: list[BaseException] = []

    @tool
    async def stale(n: int = 0) -> str:
        if not stash:
            with trio.CancelScope() as scope:
                scope.cancel()
                try:
                    await trio.lowlevel.checkpoint()
                except trio.Cancelled as exc:
                    stash.append(exc)
                    raise
        raise stash[0]

    return stale


async def test_a_stale_cancelled_raised_by_a_tool_is_error_and_the_actor_serves_on() -> None:
    stale = stale_cancelled_tool()
    async with open_runtime([stale], tracing=False) as rt:
        first = await rt.call(call("stale"))
        second = await rt.call(call("stale"), timeout=5)
        stats = rt.statistics().tools["stale"]
    assert failure(first).kind is FailureKind.ERROR  # caught in its own scope, raised outside it
    assert failure(second).kind is FailureKind.ERROR
    assert "Cancelled" in second.message
    assert stats.state == "up"


def test_a_stale_cancelled_through_runtime_thread() -> None:
    stale = stale_cancelled_tool()
    with RuntimeThread([stale, add], tracing=False) as rt:
        assert failure(rt.call(call("stale"))).kind is FailureKind.ERROR
        assert failure(rt.call(call("stale"))).kind is FailureKind.ERROR
        assert rt.call(call("add", '{"a": 1, "b": 1}')).ok


async def test_keyboard_interrupt_and_system_exit_from_a_tool_are_its_errors() -> None:
    @tool
    async def interrupts(kind: str) -> str:
        raise KeyboardInterrupt if kind == "ki" else SystemExit(3)

    async with open_runtime([interrupts], tracing=False) as rt:
        ki, exit_ = await rt.call_many(
            [call("interrupts", '{"kind": "ki"}'), call("interrupts", '{"kind": "x"}')]
        )
    assert failure(ki).kind is FailureKind.ERROR
    assert "KeyboardInterrupt" in ki.message
    assert failure(exit_).kind is FailureKind.ERROR
    assert "SystemExit" in exit_.message


# -- 4. a tool's stuck threads never starve another tool -------------------------------------


def stuck_tool(release: threading.Event) -> Any:
    @tool(max_concurrency=2)
    def stuck(n: int = 0) -> str:
        release.wait(30)  # blocked in a call no thread can interrupt
        return "released"

    return stuck


async def test_stuck_threads_count_against_their_own_tool_only(autojump_clock: trio.abc.Clock) -> None:
    release = threading.Event()
    stuck = stuck_tool(release)
    try:
        async with open_runtime([stuck, add_sync], tracing=False, thread_limit=2) as rt:
            timed_out = await rt.call_many([call("stuck", "{}", f"s{i}") for i in range(2)], timeout=1)
            assert [failure(r).kind for r in timed_out] == [FailureKind.TIMEOUT] * 2
            others = await rt.call_many([call("add_sync", '{"a": 1, "b": 2}', f"a{i}") for i in range(10)])
            assert all(r.ok for r in others)
            refused = await rt.call(call("stuck"), timeout=1)
            assert failure(refused).kind is FailureKind.OVERLOADED
            assert "all 2 of its threads are still running calls that timed out" in refused.message
            stats = rt.statistics().tools["stuck"]
            assert (stats.threads, stats.abandoned_running, stats.abandoned) == (2, 2, 2)
            release.set()
            while rt.statistics().tools["stuck"].threads:  # noqa: ASYNC110 - real threads, no event to wait on
                await trio.sleep(0.01)  # the threads end on their own and give their slots back
            assert (await rt.call(call("stuck"))).ok
            assert rt.statistics().tools["stuck"].abandoned_running == 0
    finally:
        release.set()


def test_stuck_threads_through_runtime_thread() -> None:
    release = threading.Event()
    stuck = stuck_tool(release)
    try:
        with RuntimeThread([stuck, add_sync], tracing=False) as rt:
            rt.call_many([call("stuck", "{}", f"s{i}") for i in range(2)], timeout=0.05)
            assert rt.call(call("add_sync", '{"a": 1, "b": 2}')).ok
            assert failure(rt.call(call("stuck"), timeout=1)).kind is FailureKind.OVERLOADED
            release.set()
    finally:
        release.set()


# -- 5. model input never restarts a tool ---------------------------------------------------


async def test_invalid_arguments_never_count_toward_restart_on() -> None:
    async with open_runtime([strict], tracing=False) as rt:
        results = await rt.call_many([call("strict", '{"n": "not a number"}', f"c{i}") for i in range(20)])
        ok = await rt.call(call("strict", '{"n": 4}'))
        stats = rt.statistics().tools["strict"]
    assert {failure(r).kind for r in results} == {FailureKind.INVALID_ARGUMENTS}
    assert ok.ok
    assert (stats.restarts, stats.state) == (0, "up")


def test_invalid_arguments_never_restart_through_runtime_thread() -> None:
    with RuntimeThread([strict], tracing=False) as rt:
        rt.call_many([call("strict", "[]", f"c{i}") for i in range(20)])
        stats = rt.statistics().tools["strict"]
        assert (stats.restarts, stats.state) == (0, "up")


# -- 6. a tool that ignores cancellation cannot defeat its deadline or shutdown ---------------


async def test_a_shielded_tool_is_answered_at_its_deadline_and_counted(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with open_runtime([shielded, add], tracing=False) as rt:
        result = await rt.call(call("shielded"))
        answered_at = trio.current_time()
        stats = rt.statistics().tools["shielded"]
        assert (await rt.call(call("add", '{"a": 1, "b": 1}'))).ok
        await trio.sleep(10)  # the shielded work ends on its own; its result is dropped
        later = rt.statistics().tools["shielded"]
    assert failure(result).kind is FailureKind.TIMEOUT
    assert "did not stop when cancelled and was abandoned" in result.message
    assert answered_at == pytest.approx(0.35)  # its timeout plus the abandon grace
    assert (stats.abandoned, stats.abandoned_running) == (1, 1)
    assert (later.abandoned, later.abandoned_running) == (1, 0)


async def test_a_shielded_tool_cannot_hold_up_shutdown(autojump_clock: trio.abc.Clock) -> None:
    async with trio.open_nursery() as nursery:
        async with open_runtime([shielded], tracing=False, shutdown_timeout=0.5) as rt:
            results: list[ToolResult] = []

            async def caller() -> None:
                results.append(await rt.call(call("shielded", '{"seconds": 100}')))

            nursery.start_soon(caller)
            await trio.sleep(0.1)  # the call is running (its deadline is 0.3s away)
        closed_at = trio.current_time()
    assert closed_at <= 0.1 + 0.5 + 0.5 + 0.05  # graceful + kill grace, not the 100 s of work
    assert len(results) == 1
    assert not results[0].ok
    await trio.sleep(100)  # the abandoned work ends on its own (else its task outlives the test)


def test_a_shielded_tool_through_runtime_thread() -> None:
    with RuntimeThread([shielded], tracing=False, shutdown_timeout=0.2) as rt:
        result = rt.call(call("shielded", '{"seconds": 1}'))
        assert failure(result).kind is FailureKind.TIMEOUT
        assert rt.statistics().tools["shielded"].abandoned == 1


def test_inline_with_a_timeout_is_refused_at_definition() -> None:
    with pytest.raises(
        ToolDefinitionError, match="inline tool runs on the event loop and cannot be interrupted"
    ):

        @tool(inline=True, timeout=1)
        def fast(n: int) -> int:
            return n


class HangingSetup(Tool[Job, int]):
    setup_timeout = 2.0

    async def setup(self) -> None:
        await trio.sleep_forever()

    async def execute(self, args: Job) -> int:
        return args.n


async def test_a_setup_that_hangs_makes_only_that_tool_down(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime([HangingSetup(), add], tracing=False) as rt:
        opened_at = trio.current_time()
        hanging, good = await rt.call_many([call("hanging_setup"), call("add", '{"a": 1, "b": 2}', "c2")])
        stats = rt.statistics().tools["hanging_setup"]
    assert opened_at == 2.0
    assert failure(hanging).kind is FailureKind.UNAVAILABLE
    assert "setup() did not finish within 2s" in hanging.message
    assert good.ok
    assert stats.state == "down"


async def test_setup_timeout_defaults_to_30_seconds(autojump_clock: trio.abc.Clock) -> None:
    class Default(HangingSetup):
        setup_timeout = 30.0

    assert Default().options.setup_timeout == 30.0
    async with open_runtime([Default()], tracing=False):
        assert trio.current_time() == 30.0


def test_a_setup_that_hangs_through_runtime_thread() -> None:
    class Quick(HangingSetup):
        setup_timeout = 0.1

    with RuntimeThread([Quick(), add], tracing=False) as rt:
        assert failure(rt.call(call("hanging_setup"))).kind is FailureKind.UNAVAILABLE
        assert rt.call(call("add", '{"a": 1, "b": 1}')).ok


# -- 7. limits ------------------------------------------------------------------------------


async def test_a_ten_megabyte_tool_name_gets_a_short_failure() -> None:
    async with open_runtime([add], tracing=False) as rt:
        result = await rt.call(call("x" * 10_000_000))
    assert failure(result).kind is FailureKind.UNKNOWN_TOOL
    assert len(result.content) < 400
    assert "(10000000 characters)" in result.content
    assert len(result.tool) < 200


@pytest.mark.parametrize("name", [None, 123, ["add"]])
async def test_a_tool_name_that_is_not_a_string_fails_that_call_only(name: Any) -> None:
    async with open_runtime([add], tracing=False) as rt:
        good, bad, good2 = await rt.call_many(
            [
                call("add", '{"a": 1, "b": 1}', "g1"),
                call(name, "{}", "b1"),
                call("add", '{"a": 2, "b": 2}', "g2"),
            ]
        )
        single = await rt.call(call(name))
    assert (good.ok, good2.ok) == (True, True)
    for result in (bad, single):
        assert failure(result).kind is FailureKind.UNKNOWN_TOOL
        assert "a tool name must be a string" in result.message
    assert msgspec.json.encode(bad)  # safe to send on


async def test_a_call_id_that_is_not_a_string_fails() -> None:
    async with open_runtime([add], tracing=False) as rt:
        result = await rt.call(call("add", '{"a": 1, "b": 1}', None))
    assert failure(result).kind is FailureKind.INVALID_ARGUMENTS
    assert result.call_id == ""
    assert "id must be a string" in result.message


def test_malformed_calls_through_runtime_thread() -> None:
    with RuntimeThread([add], tracing=False) as rt:
        results = rt.call_many(
            [call(None), call("add", '{"a": 1, "b": 1}', None), call("add", '{"a": 1, "b": 1}')]
        )
        assert [r.ok for r in results] == [False, False, True]


async def test_max_result_chars_bounds_text_parts_and_failures() -> None:
    class Parts(Tool[Job, str]):
        def result_to_parts(self, result: str) -> list[Any]:
            return [TextPart(text=result), TextPart(text="short")]

        async def execute(self, args: Job) -> str:
            return "p" * 5000

    @tool
    async def raises_long(n: int = 0) -> str:
        raise ValueError("v" * 5000)

    @tool
    async def rejects_long(n: int = 0) -> str:
        raise ToolRejected("r" * 5000)

    async with open_runtime([Parts(), raises_long, rejects_long], tracing=False, max_result_chars=100) as rt:
        parts, raised, rejected = await rt.call_many(
            [call("parts"), call("raises_long"), call("rejects_long")]
        )
    assert isinstance(parts, ToolSuccess)
    long_part, short_part = parts.parts
    assert isinstance(long_part, TextPart)
    assert long_part.text.startswith("p" * 100)
    assert "[truncated" in long_part.text
    assert len(long_part.text) < 200
    assert short_part == TextPart(text="short")
    for result in (raised, rejected):
        assert len(failure(result).message) < 200
        assert "[truncated" in result.message


async def test_a_tool_calling_itself_at_full_capacity_fails_fast_instead_of_waiting(
    autojump_clock: trio.abc.Clock,
) -> None:
    holder: dict[str, Any] = {}

    @tool(max_concurrency=1, timeout=60)
    async def recurse(depth: int) -> str:
        if depth == 0:
            return "bottom"
        inner = await holder["rt"].call(call("recurse", json.dumps({"depth": depth - 1}), f"d{depth}"))
        return inner.content

    async with open_runtime([recurse], tracing=False) as rt:
        holder["rt"] = rt
        result = await rt.call(call("recurse", '{"depth": 1}'))
    assert result.ok
    assert "would wait on itself" in result.content
    assert trio.current_time() == 0.0  # not the 60 s timeout


async def test_registering_a_tool_whose_setup_hangs_never_blocks_the_registry(
    autojump_clock: trio.abc.Clock,
) -> None:
    events: list[tuple[str, float]] = []
    async with open_runtime([add], tracing=False) as rt, trio.open_nursery() as nursery:

        async def register_hanging() -> None:
            await rt.register(HangingSetup())
            events.append(("hanging registered", trio.current_time()))

        nursery.start_soon(register_hanging)
        await trio.sleep(0.5)
        await rt.register(add_sync)
        events.append(("add_sync registered", trio.current_time()))
        await rt.unregister("add_sync")
        events.append(("add_sync unregistered", trio.current_time()))
    assert events == [
        ("add_sync registered", 0.5),
        ("add_sync unregistered", 0.5),
        ("hanging registered", 2.0),
    ]


# -- abandoned work is visible on the span ----------------------------------------------------


async def test_an_abandoned_call_is_marked_on_its_span(autojump_clock: trio.abc.Clock) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from runtime.tracing import CALL_ABANDONED, Tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with open_runtime([shielded], tracing=Tracing(tracer_provider=provider)) as rt:
        await rt.call(call("shielded"))
    await trio.sleep(8)  # the abandoned work ends on its own (else its task outlives the test)
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "execute_tool shielded"]
    assert span.attributes is not None
    assert span.attributes[CALL_ABANDONED] is True


def test_callcontext_has_no_abandoned_flag_by_default() -> None:
    assert CallContext("c", "t").abandoned is False
