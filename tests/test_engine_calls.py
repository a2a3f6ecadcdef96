"""The engine's call path (docs/ARCHITECTURE.md sections 1, 3.5, 3.10): calls, fan-out, deadlines,
cancellation, the failure mapping, limits, features, mailboxes, workers, registration."""

import argparse
import contextlib
import functools
import io
import json
import logging
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from runtime import (
    CallContext,
    FailureKind,
    Feature,
    InvalidArguments,
    Tool,
    ToolBase,
    ToolCall,
    ToolFailure,
    ToolRejected,
    ToolResult,
    ToolSuccess,
    fail,
    open_runtime,
    tool,
    validate,
)


def call(call_id: str, name: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=json.dumps(arguments))


def kind_of(result: ToolResult) -> str:
    return result.kind.value if isinstance(result, ToolFailure) else "ok"


@tool
async def nap(seconds: float) -> float:
    """Sleep, then return how long."""
    await trio.sleep(seconds)
    return seconds


@tool
async def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


class Recorder(Feature):
    """Records every call hook with the call id, the virtual time and what it saw."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.results: dict[str, list[ToolResult]] = {}
        self.metadata: dict[str, list[dict[str, Any]]] = {}
        self.times: dict[str, float] = {}

    def collect_metadata(self, call: ToolCall, tool: ToolBase[Any, Any] | None) -> Mapping[str, Any]:
        self.events.append(("collect", call.id))
        return {}

    async def on_call_starting(self, call: ToolCall, ctx: CallContext) -> None:
        self.events.append(("starting", call.id))
        self.metadata.setdefault(call.id, []).append(dict(ctx.metadata))

    async def on_call_completed(self, call: ToolCall, result: ToolSuccess, ctx: CallContext) -> None:
        self._finished("completed", call, result, ctx)

    async def on_call_failed(self, call: ToolCall, failure: ToolFailure, ctx: CallContext) -> None:
        self._finished("failed", call, failure, ctx)

    def _finished(self, hook: str, call: ToolCall, result: ToolResult, ctx: CallContext) -> None:
        self.events.append((hook, call.id))
        self.results.setdefault(call.id, []).append(result)
        self.metadata.setdefault(call.id, []).append(dict(ctx.metadata))
        self.times[call.id] = trio.current_time()

    def hooks_of(self, call_id: str) -> list[str]:
        return [hook for hook, cid in self.events if cid == call_id]


# -- calls and fan-out -----------------------------------------------------------------------------


async def test_a_call_returns_the_tools_value_and_its_text_under_the_call_id() -> None:
    async with open_runtime([add], tracing=False) as rt:
        result = await rt.call(ToolCall(id="c1", name="add", arguments='{"a": 1, "b": 2}'))
    assert result == ToolSuccess(call_id="c1", tool="add", content="3", value=3)


async def test_invoke_calls_a_tool_from_code_with_keyword_arguments_validated_like_a_models() -> None:
    async with open_runtime([add], tracing=False) as rt:
        by_tool = await rt.invoke(add, a=1, b=2)
        by_name = await rt.invoke("add", a=40, b=2)
        wrong = await rt.invoke(add, a=1, b="two")
    assert isinstance(by_tool, ToolSuccess)
    assert by_tool.value == 3
    assert by_tool.call_id.startswith("invoke-")
    assert isinstance(by_name, ToolSuccess)
    assert by_name.value == 42
    assert by_name.call_id != by_tool.call_id
    assert isinstance(wrong, ToolFailure)
    assert wrong.kind is FailureKind.INVALID_ARGUMENTS
    assert "`$.b`" in wrong.message


async def test_fifty_one_second_calls_finish_in_one_virtual_second(autojump_clock: trio.abc.Clock) -> None:
    running = 0
    peak = 0

    @tool
    async def second(i: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await trio.sleep(1)
        running -= 1
        return i

    async with open_runtime([second], tracing=False) as rt:
        start = trio.current_time()
        results = await rt.call_many([call(f"c{i}", "second", i=i) for i in range(50)])
        elapsed = trio.current_time() - start
    assert elapsed == 1.0
    assert peak == 50
    assert [r.value for r in results if isinstance(r, ToolSuccess)] == list(range(50))


async def test_call_many_returns_results_in_input_order_with_their_call_ids(
    autojump_clock: trio.abc.Clock,
) -> None:
    calls = [
        call("slowest", "nap", seconds=3),
        ToolCall(id="unknown", name="napp"),
        call("fastest", "nap", seconds=1),
        call("bad", "nap", seconds="long"),
        call("middle", "nap", seconds=2),
    ]
    async with open_runtime([nap], tracing=False) as rt:
        results = await rt.call_many(calls)
    assert [r.call_id for r in results] == ["slowest", "unknown", "fastest", "bad", "middle"]
    assert [r.tool for r in results] == ["nap", "napp", "nap", "nap", "nap"]
    assert [r.value for r in results if isinstance(r, ToolSuccess)] == [3, 1, 2]
    assert [r.kind for r in results if isinstance(r, ToolFailure)] == [
        FailureKind.UNKNOWN_TOOL,
        FailureKind.INVALID_ARGUMENTS,
    ]


async def test_call_many_of_nothing_returns_nothing() -> None:
    async with open_runtime([nap], tracing=False) as rt:
        assert await rt.call_many([]) == []
        assert [r async for r in rt.as_completed([])] == []


async def test_call_many_accepts_any_iterable_of_calls(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime([nap], tracing=False) as rt:
        results = await rt.call_many(call(f"c{i}", "nap", seconds=i) for i in range(3))
    assert [r.call_id for r in results] == ["c0", "c1", "c2"]


async def test_as_completed_yields_the_fastest_first(autojump_clock: trio.abc.Clock) -> None:
    @tool(inline=True)
    def instant(x: int) -> int:
        return x

    calls = [
        call("three", "nap", seconds=3),
        call("one", "nap", seconds=1),
        call("two", "nap", seconds=2),
        call("zero", "instant", x=0),
    ]
    seen: list[tuple[str, float]] = []
    async with open_runtime([nap, instant], tracing=False) as rt:
        async for result in rt.as_completed(calls):
            assert result.ok
            seen.append((result.call_id, trio.current_time()))
    assert seen == [("zero", 0.0), ("one", 1.0), ("two", 2.0), ("three", 3.0)]


async def test_breaking_out_of_as_completed_cancels_the_remaining_calls(
    autojump_clock: trio.abc.Clock,
) -> None:
    cancelled: list[tuple[float, float]] = []

    @tool
    async def sleepy(seconds: float) -> float:
        try:
            await trio.sleep(seconds)
        except trio.Cancelled:
            cancelled.append((seconds, trio.current_time()))
            raise
        return seconds

    recorder = Recorder()
    calls = [
        call("long", "sleepy", seconds=10),
        call("short", "sleepy", seconds=1),
        call("longer", "sleepy", seconds=20),
    ]
    async with open_runtime([sleepy], tracing=False, features=[recorder]) as rt:
        async with contextlib.aclosing(rt.as_completed(calls)) as results:
            async for result in results:
                assert result.call_id == "short"
                break
        assert trio.current_time() == 1.0
        await trio.testing.wait_all_tasks_blocked()
        assert sorted(cancelled) == [(10, 1.0), (20, 1.0)]
        for cid in ("long", "longer"):
            assert recorder.hooks_of(cid) == ["collect", "starting", "failed"]
            (failure,) = recorder.results[cid]
            assert isinstance(failure, ToolFailure)
            assert failure.kind is FailureKind.CANCELLED
        assert recorder.hooks_of("short") == ["collect", "starting", "completed"]
        after = await rt.call(call("after", "sleepy", seconds=1))
        stats = rt.statistics().tools["sleepy"]
    assert after.ok
    assert (stats.calls, stats.succeeded, stats.failures, stats.in_flight) == (4, 2, {"cancelled": 2}, 0)


# -- deadlines -------------------------------------------------------------------------------------


async def test_tool_timeout_fails_the_call_with_timeout_naming_the_limit(
    autojump_clock: trio.abc.Clock,
) -> None:
    deadlines: list[float | None] = []
    cancelled_at: list[float] = []

    @tool(timeout=2)
    async def bounded(ctx: CallContext) -> str:
        deadlines.append(ctx.deadline)
        try:
            await trio.sleep_forever()
        finally:
            cancelled_at.append(trio.current_time())

    async with open_runtime([bounded], tracing=False) as rt:
        result = await rt.call(ToolCall(id="c1", name="bounded"))
        assert trio.current_time() == 2.0
    assert isinstance(result, ToolFailure)
    assert result.kind is FailureKind.TIMEOUT
    assert result.content == "Error: tool 'bounded' did not finish within 2s"
    assert deadlines == [2.0]
    assert cancelled_at == [2.0]


async def test_call_timeout_fails_the_call_with_timeout_naming_the_limit(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with open_runtime([nap], tracing=False) as rt:
        result = await rt.call(call("c1", "nap", seconds=10), timeout=1.5)
        assert trio.current_time() == 1.5
    assert isinstance(result, ToolFailure)
    assert result.kind is FailureKind.TIMEOUT
    assert result.content == "Error: tool 'nap' did not finish within 1.5s"


async def test_call_many_timeout_fails_only_the_calls_still_running_at_the_limit(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with open_runtime([nap], tracing=False) as rt:
        results = await rt.call_many(
            [
                call("quick", "nap", seconds=1),
                call("slow", "nap", seconds=10),
                call("slower", "nap", seconds=20),
            ],
            timeout=3,
        )
        assert trio.current_time() == 3.0
    quick, slow, slower = results
    assert quick == ToolSuccess(call_id="quick", tool="nap", content="1.0", value=1.0)
    for result in (slow, slower):
        assert isinstance(result, ToolFailure)
        assert result.kind is FailureKind.TIMEOUT
        assert result.content == "Error: tool 'nap' did not finish within 3s"


async def test_as_completed_timeout_yields_the_timed_out_calls_last(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime([nap], tracing=False) as rt:
        seen = [
            (r.call_id, r.ok, trio.current_time())
            async for r in rt.as_completed(
                [call("slow", "nap", seconds=9), call("quick", "nap", seconds=1)], timeout=2
            )
        ]
    assert seen == [("quick", True, 1.0), ("slow", False, 2.0)]


async def test_default_timeout_fails_the_call_with_timeout_naming_the_limit(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with open_runtime([nap], tracing=False, default_timeout=4) as rt:
        result = await rt.call(call("c1", "nap", seconds=10))
        assert trio.current_time() == 4.0
        quick = await rt.call(call("c2", "nap", seconds=3))
    assert isinstance(result, ToolFailure)
    assert result.kind is FailureKind.TIMEOUT
    assert result.content == "Error: tool 'nap' did not finish within 4s"
    assert quick.ok


@pytest.mark.parametrize(
    ("tool_timeout", "call_timeout", "default_timeout", "limit"),
    [
        pytest.param(2, 5, None, 2, id="tool-under-call"),
        pytest.param(5, 2, None, 2, id="call-under-tool"),
        pytest.param(3, 3, None, 3, id="tool-equals-call"),
        pytest.param(2, None, 4, 2, id="tool-under-default"),
        pytest.param(None, 1, 4, 1, id="call-under-default"),
        pytest.param(1, 3, 2, 1, id="tool-under-call-and-default"),
        pytest.param(None, None, 4, 4, id="default-alone"),
        pytest.param(6, None, 4, 6, id="tool-over-default-replaces-it"),
        pytest.param(None, 6, 4, 6, id="call-over-default-replaces-it"),
    ],
)
async def test_the_smallest_limit_wins_and_the_default_applies_only_when_none_is_given(
    autojump_clock: trio.abc.Clock,
    tool_timeout: float | None,
    call_timeout: float | None,
    default_timeout: float | None,
    limit: float,
) -> None:
    @tool(timeout=tool_timeout)
    async def sleeper() -> None:
        await trio.sleep(100)

    async with open_runtime([sleeper], tracing=False, default_timeout=default_timeout) as rt:
        single = await rt.call(ToolCall(id="c1", name="sleeper"), timeout=call_timeout)
        assert trio.current_time() == limit
        (batched,) = await rt.call_many([ToolCall(id="c2", name="sleeper")], timeout=call_timeout)
        assert trio.current_time() == 2 * limit
    for result in (single, batched):
        assert isinstance(result, ToolFailure)
        assert result.kind is FailureKind.TIMEOUT
        assert result.message == f"tool 'sleeper' did not finish within {limit:g}s"


async def test_a_call_that_times_out_while_queued_never_runs(autojump_clock: trio.abc.Clock) -> None:
    ran: list[float] = []

    @tool(max_concurrency=1)
    async def serial(seconds: float) -> float:
        ran.append(seconds)
        await trio.sleep(seconds)
        return seconds

    async with open_runtime([serial], tracing=False) as rt, trio.open_nursery() as nursery:
        nursery.start_soon(rt.call, call("busy", "serial", seconds=5))
        await trio.testing.wait_all_tasks_blocked()
        result = await rt.call(call("waiting", "serial", seconds=1), timeout=2)
        assert trio.current_time() == 2.0
    assert isinstance(result, ToolFailure)
    assert result.kind is FailureKind.TIMEOUT
    assert result.message == "tool 'serial' did not finish within 2s"
    assert ran == [5]


async def test_a_tool_that_turns_its_timeout_into_an_error_still_times_out(
    autojump_clock: trio.abc.Clock,
) -> None:
    @tool(timeout=1)
    async def swallow() -> str:
        try:
            await trio.sleep(5)
        except trio.Cancelled:
            raise RuntimeError("interrupted") from None
        return "done"

    async with open_runtime([swallow], tracing=False) as rt:
        result = await rt.call(ToolCall(id="c1", name="swallow"))
        again = await rt.call(ToolCall(id="c2", name="swallow"))
    for r in (result, again):
        assert isinstance(r, ToolFailure)
        assert r.kind is FailureKind.TIMEOUT
        assert r.message == "tool 'swallow' did not finish within 1s"


# -- cancellation ----------------------------------------------------------------------------------


async def test_cancelling_the_caller_cancels_the_tool_and_the_runtime_keeps_serving(
    autojump_clock: trio.abc.Clock,
) -> None:
    cancelled_at: list[float] = []

    @tool
    async def maybe_hang(hang: bool) -> str:
        if hang:
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                cancelled_at.append(trio.current_time())
                raise
        return "done"

    recorder = Recorder()
    async with open_runtime([maybe_hang, add], tracing=False, features=[recorder]) as rt:
        with trio.move_on_after(2) as scope:
            await rt.call(call("c1", "maybe_hang", hang=True))
        assert scope.cancelled_caught
        await trio.testing.wait_all_tasks_blocked()
        assert cancelled_at == [2.0]
        (failure,) = recorder.results["c1"]
        assert isinstance(failure, ToolFailure)
        assert failure.kind is FailureKind.CANCELLED
        assert failure.content == "Error: the call was cancelled by its caller"
        assert recorder.times["c1"] == 2.0
        same_tool = await rt.call(call("c2", "maybe_hang", hang=False))
        other_tool = await rt.call(call("c3", "add", a=2, b=3))
        with trio.move_on_after(1):
            await rt.call(call("c4", "maybe_hang", hang=True))
        last = await rt.call(call("c5", "maybe_hang", hang=False))
        stats = rt.statistics().tools["maybe_hang"]
    assert same_tool == ToolSuccess(call_id="c2", tool="maybe_hang", content="done", value="done")
    assert other_tool.ok
    assert last.ok
    assert cancelled_at == [2.0, 3.0]
    assert (stats.calls, stats.succeeded, stats.failures, stats.in_flight) == (4, 2, {"cancelled": 2}, 0)


async def test_cancelling_call_many_cancels_every_running_call(autojump_clock: trio.abc.Clock) -> None:
    cancelled: list[str] = []

    @tool
    async def hang(tag: str) -> None:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            cancelled.append(tag)
            raise

    recorder = Recorder()
    async with open_runtime([hang, add], tracing=False, features=[recorder]) as rt:
        with trio.move_on_after(1):
            await rt.call_many(
                [call("a", "hang", tag="a"), call("sum", "add", a=1, b=1), call("b", "hang", tag="b")]
            )
        await trio.testing.wait_all_tasks_blocked()
        assert rt.statistics().in_flight == 0
    assert sorted(cancelled) == ["a", "b"]
    assert [kind_of(r) for c in ("a", "b") for r in recorder.results[c]] == ["cancelled", "cancelled"]
    assert recorder.hooks_of("sum") == ["collect", "starting", "completed"]


async def test_a_call_cancelled_while_queued_never_runs(autojump_clock: trio.abc.Clock) -> None:
    ran: list[str] = []

    @tool(max_concurrency=1)
    async def serial(tag: str) -> str:
        ran.append(tag)
        await trio.sleep(5)
        return tag

    recorder = Recorder()
    async with (
        open_runtime([serial], tracing=False, features=[recorder]) as rt,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(rt.call, call("first", "serial", tag="first"))
        await trio.testing.wait_all_tasks_blocked()
        with trio.move_on_after(1):
            await rt.call(call("second", "serial", tag="second"))
    assert ran == ["first"]
    (second,) = recorder.results["second"]
    assert isinstance(second, ToolFailure)
    assert second.kind is FailureKind.CANCELLED
    assert recorder.results["first"][0].ok


# -- the failure mapping of docs/ARCHITECTURE.md 3.5 ----------------------------------------------------------


@tool
async def search(query: str) -> str:
    """Search."""
    return query


@tool
async def fetch(url: str) -> str:
    """Fetch."""
    return url


@tool
async def page(limit: int, offset: int = 0) -> list[int]:
    """A page of numbers."""
    return list(range(offset, offset + limit))


async def test_unknown_tool_names_the_closest_match() -> None:
    async with open_runtime([search, fetch, page], tracing=False) as rt:
        result = await rt.call(ToolCall(id="c1", name="search_web", arguments='{"query": "x"}'))
        typo = await rt.call(ToolCall(id="c2", name="serch"))
        stats = rt.statistics()
    assert result == ToolFailure(
        call_id="c1",
        tool="search_web",
        kind=FailureKind.UNKNOWN_TOOL,
        message="no tool named 'search_web'; did you mean 'search'?",
    )
    assert result.content == "Error: no tool named 'search_web'; did you mean 'search'?"
    assert typo.content == "Error: no tool named 'serch'; did you mean 'search' or 'fetch'?"  # closest first
    assert stats.unknown_tool_calls == 2
    assert set(stats.tools) == {"search", "fetch", "page"}


async def test_unknown_tool_lists_the_available_tools_when_none_is_close() -> None:
    async with open_runtime([search, fetch, page], tracing=False) as rt:
        result = await rt.call(ToolCall(id="c1", name="translate"))
    assert isinstance(result, ToolFailure)
    assert result.kind is FailureKind.UNKNOWN_TOOL
    assert result.content == "Error: no tool named 'translate'; available tools: search, fetch, page"


@pytest.mark.parametrize(
    ("arguments", "path", "expected"),
    [
        pytest.param('{"limit": "ten"}', "$.limit", "Expected `int`, got `str`", id="wrong-type"),
        pytest.param('{"offset": 1}', "$.limit", "required field is missing", id="missing"),
        pytest.param(
            '{"limit": 1, "lmit": 2}',
            "$.lmit",
            "unknown field; the parameters are: limit, offset",
            id="unknown-field",
        ),
        pytest.param("[1, 2]", "$", "Expected `object`, got `array`", id="not-an-object"),
        pytest.param('{"limit": 1', "$", "arguments are not valid JSON", id="not-json"),
        pytest.param({"limit": 1.5}, "$.limit", "Expected `int`, got `float`", id="parsed-object"),
    ],
)
async def test_invalid_arguments_name_the_json_path_and_what_was_expected(
    arguments: str | dict[str, Any], path: str, expected: str
) -> None:
    async with open_runtime([page], tracing=False) as rt:
        result = await rt.call(ToolCall(id="c1", name="page", arguments=arguments))
    assert isinstance(result, ToolFailure)
    assert result.kind is FailureKind.INVALID_ARGUMENTS
    assert result.content.startswith(f"Error: invalid arguments for tool 'page': `{path}`: {expected}")


async def test_invalid_arguments_raised_by_a_tool_name_the_path_it_gives() -> None:
    @tool
    async def strict(limit: int) -> int:
        if limit > 100:
            raise InvalidArguments("at most 100", "$.limit")
        return limit

    async with open_runtime([strict], tracing=False) as rt:
        result = await rt.call(call("c1", "strict", limit=500))
    assert isinstance(result, ToolFailure)
    assert result.kind is FailureKind.INVALID_ARGUMENTS
    assert result.content == "Error: invalid arguments for tool 'strict': `$.limit`: at most 100"


async def test_a_tool_that_refuses_its_input_is_rejected_with_its_own_message() -> None:
    @tool
    async def by_exception(n: int) -> int:
        raise ToolRejected("n must be even")

    @tool
    def by_validate(n: int) -> int:
        validate(n >= 0, "n must not be negative")
        return n

    @tool(inline=True)
    def by_fail(n: int) -> int:
        fail(f"{n} is not allowed here")

    async with open_runtime([by_exception, by_validate, by_fail], tracing=False) as rt:
        results = await rt.call_many(
            [call("a", "by_exception", n=3), call("b", "by_validate", n=-1), call("c", "by_fail", n=7)]
        )
    assert results == [
        ToolFailure(call_id="a", tool="by_exception", kind=FailureKind.REJECTED, message="n must be even"),
        ToolFailure(
            call_id="b", tool="by_validate", kind=FailureKind.REJECTED, message="n must not be negative"
        ),
        ToolFailure(call_id="c", tool="by_fail", kind=FailureKind.REJECTED, message="7 is not allowed here"),
    ]
    assert [r.content for r in results] == [
        "Error: n must be even",
        "Error: n must not be negative",
        "Error: 7 is not allowed here",
    ]


class QuotaExceeded(Exception):
    pass


async def test_a_tool_that_raises_is_an_error_with_the_type_and_message_and_no_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def deep(n: int) -> int:
        if n == 0:
            raise QuotaExceeded("quota of 10 calls used up")
        return deep(n - 1)

    @tool
    async def boom(n: int) -> int:
        return deep(n)

    @tool
    def sync_boom(key: str) -> int:
        return {"a": 1}[key]

    @tool
    async def silent() -> None:
        raise RuntimeError

    caplog.set_level(logging.INFO, logger="runtime.engine")
    async with open_runtime([boom, sync_boom, silent], tracing=False) as rt:
        results = await rt.call_many(
            [call("a", "boom", n=5), call("b", "sync_boom", key="zz"), ToolCall(id="c", name="silent")]
        )
        stats = rt.statistics()
    assert results == [
        ToolFailure(
            call_id="a",
            tool="boom",
            kind=FailureKind.ERROR,
            message="tool 'boom' raised QuotaExceeded: quota of 10 calls used up",
            error_type=f"{__name__}.QuotaExceeded",
        ),
        ToolFailure(
            call_id="b",
            tool="sync_boom",
            kind=FailureKind.ERROR,
            message="tool 'sync_boom' raised KeyError: 'zz'",
            error_type="KeyError",
        ),
        ToolFailure(
            call_id="c",
            tool="silent",
            kind=FailureKind.ERROR,
            message="tool 'silent' raised RuntimeError",
            error_type="RuntimeError",
        ),
    ]
    for result in results:
        assert "Traceback" not in result.content
        assert "line " not in result.content
    assert stats.tools["boom"].restarts == 0
    assert stats.tools["boom"].state == "up"
    # the traceback goes to the log
    logged = [r for r in caplog.records if r.name == "runtime.engine" and r.exc_info]
    assert {r.exc_info[0] for r in logged if r.exc_info} == {QuotaExceeded, KeyError, RuntimeError}


class Abort(BaseException):
    """A BaseException that is not trio's cancellation."""


async def test_a_tool_that_raises_a_base_exception_is_an_error_and_never_stops_the_runtime() -> None:
    @tool
    def cli(argv: list[str]) -> int:
        parser = argparse.ArgumentParser(prog="cli", exit_on_error=False)
        parser.add_argument("--n", type=int, required=True)
        return int(parser.parse_args(argv).n)  # exits (SystemExit) on what it cannot parse

    @tool
    async def aborts() -> None:
        raise Abort("stop everything")

    @tool(restart_on=[Abort])
    async def aborts_and_restarts() -> None:
        raise Abort("restart me")

    async with open_runtime([cli, aborts, aborts_and_restarts, add], tracing=False) as rt:
        with contextlib.redirect_stderr(io.StringIO()):  # argparse prints its usage
            results = await rt.call_many(
                [
                    call("parsed", "cli", argv=["--n", "3"]),
                    call("exited", "cli", argv=["--m"]),
                    ToolCall(id="aborted", name="aborts"),
                    ToolCall(id="restarted", name="aborts_and_restarts"),
                ]
            )
        alive = await rt.call(call("alive", "add", a=1, b=1))
        await trio.testing.wait_all_tasks_blocked()
        stats = rt.statistics().tools
    parsed, exited, aborted, restarted = results
    assert parsed.value == 3
    assert exited == ToolFailure(
        call_id="exited",
        tool="cli",
        kind=FailureKind.ERROR,
        message="tool 'cli' raised SystemExit: 2",
        error_type="SystemExit",
    )
    assert aborted == ToolFailure(
        call_id="aborted",
        tool="aborts",
        kind=FailureKind.ERROR,
        message="tool 'aborts' raised Abort: stop everything",
        error_type=f"{__name__}.Abort",
    )
    assert kind_of(restarted) == "error"
    assert alive.ok
    assert (stats["aborts"].state, stats["aborts"].restarts) == ("up", 0)
    assert stats["aborts_and_restarts"].restarts == 1


async def test_a_result_msgspec_cannot_encode_is_its_text_not_an_error() -> None:
    # The call ran (its side effects are done): its result is not lost (issue 25, point 5).
    @tool
    async def opaque() -> object:
        return object()

    async with open_runtime([opaque], tracing=False) as rt:
        result = await rt.call(ToolCall(id="c1", name="opaque"))
    assert isinstance(result, ToolSuccess)
    assert result.content.startswith('"<object object at 0x')


async def test_a_result_hook_that_fails_is_an_error() -> None:
    class Opaque(Tool[Text, str]):
        async def execute(self, args: Text) -> str:
            return args.text

        def result_to_text(self, result: str) -> str:
            raise ValueError(f"cannot show {result!r}")

    async with open_runtime([Opaque()], tracing=False) as rt:
        result = await rt.call(ToolCall(id="c1", name="opaque", arguments='{"text": "x"}'))
    assert isinstance(result, ToolFailure)
    assert result.kind is FailureKind.ERROR
    assert (
        result.message
        == "tool 'opaque' returned a result that could not be encoded: ValueError: cannot show 'x'"
    )


async def test_every_kind_of_failure_reads_as_an_error_to_the_model(autojump_clock: trio.abc.Clock) -> None:
    @tool(timeout=1)
    async def late() -> None:
        await trio.sleep(2)

    @tool(max_concurrency=1, mailbox_size=1, on_full="reject")
    async def narrow() -> None:
        await trio.sleep(1)

    @tool
    async def hang() -> None:
        await trio.sleep_forever()

    @tool
    async def refuse() -> None:
        fail("no")

    @tool
    async def crash() -> None:
        raise ValueError("bad")

    recorder = Recorder()
    async with open_runtime(
        [late, narrow, hang, refuse, crash, page], tracing=False, features=[recorder]
    ) as rt:
        results = await rt.call_many(
            [
                ToolCall(id="unknown", name="nope"),
                ToolCall(id="invalid", name="page", arguments="{}"),
                ToolCall(id="rejected", name="refuse"),
                ToolCall(id="error", name="crash"),
                ToolCall(id="timeout", name="late"),
                ToolCall(id="n1", name="narrow"),
                ToolCall(id="n2", name="narrow"),
                ToolCall(id="overloaded", name="narrow"),
            ]
        )
        with trio.move_on_after(1):
            await rt.call(ToolCall(id="cancelled", name="hang"))
    failures = {r.call_id: r for r in results if isinstance(r, ToolFailure)}
    cancelled = recorder.results["cancelled"][0]
    assert isinstance(cancelled, ToolFailure)
    failures["cancelled"] = cancelled
    assert {cid: f.kind for cid, f in failures.items()} == {
        "unknown": FailureKind.UNKNOWN_TOOL,
        "invalid": FailureKind.INVALID_ARGUMENTS,
        "rejected": FailureKind.REJECTED,
        "error": FailureKind.ERROR,
        "timeout": FailureKind.TIMEOUT,
        "overloaded": FailureKind.OVERLOADED,
        "cancelled": FailureKind.CANCELLED,
    }
    for f in failures.values():
        assert f.content == f"Error: {f.message}"
        assert f.message


# -- limits of docs/ARCHITECTURE.md 3.10 ----------------------------------------------------------------------


class Text(msgspec.Struct, forbid_unknown_fields=True):
    text: str


class CountingDecode(Tool[Text, int]):
    """Counts how often its arguments are decoded."""

    name = "counting"
    decoded = 0

    def decode_args(self, raw: Any) -> Text:
        type(self).decoded += 1
        return super().decode_args(raw)

    async def execute(self, args: Text) -> int:
        return len(args.text)


async def test_arguments_over_max_argument_bytes_are_invalid_before_decoding() -> None:
    overhead = len('{"text": ""}')
    counting = CountingDecode()
    async with open_runtime([counting], tracing=False, max_argument_bytes=64) as rt:
        at_limit = await rt.call(
            ToolCall(id="c1", name="counting", arguments=json.dumps({"text": "x" * (64 - overhead)}))
        )
        over = await rt.call(
            ToolCall(id="c2", name="counting", arguments=json.dumps({"text": "x" * (65 - overhead)}))
        )
        garbage = await rt.call(ToolCall(id="c3", name="counting", arguments="not json " * 10))
        wide = await rt.call(ToolCall(id="c4", name="counting", arguments='{"text": "' + "é" * 30 + '"}'))
    assert at_limit == ToolSuccess(
        call_id="c1", tool="counting", content=str(64 - overhead), value=64 - overhead
    )
    assert isinstance(over, ToolFailure)
    assert over.kind is FailureKind.INVALID_ARGUMENTS
    assert over.content == "Error: invalid arguments for tool 'counting': 65 bytes, over the limit of 64"
    assert isinstance(garbage, ToolFailure)
    assert garbage.content == "Error: invalid arguments for tool 'counting': 90 bytes, over the limit of 64"
    assert isinstance(wide, ToolFailure)
    assert wide.message.endswith(
        "72 bytes, over the limit of 64"
    )  # 30 two-byte characters: bytes, not characters
    assert CountingDecode.decoded == 1


async def test_result_text_over_max_result_chars_is_cut_with_a_marker() -> None:
    @tool
    async def long_text(n: int) -> str:
        return "a" * n

    async with open_runtime([long_text], tracing=False, max_result_chars=10) as rt:
        exact, over = await rt.call_many([call("c1", "long_text", n=10), call("c2", "long_text", n=25)])
    assert isinstance(exact, ToolSuccess)
    assert exact.content == "a" * 10
    assert isinstance(over, ToolSuccess)
    assert over.content == "a" * 10 + "\n[truncated: the result had 25 characters; showing the first 10]"
    assert over.value == "a" * 25  # only the model's text is cut


async def test_the_model_cannot_set_an_injected_call_context() -> None:
    @tool
    async def whoami(ctx: CallContext, greeting: str = "hi") -> str:
        return f"{greeting} {ctx.call_id}"

    assert [p.name for p in whoami.descriptor.parameters] == ["greeting"]
    async with open_runtime([whoami], tracing=False) as rt:
        forged = await rt.call(ToolCall(id="c1", name="whoami", arguments='{"ctx": {"call_id": "forged"}}'))
        honest = await rt.call(ToolCall(id="c2", name="whoami"))
    assert isinstance(forged, ToolFailure)
    assert forged.kind is FailureKind.INVALID_ARGUMENTS
    assert (
        forged.content
        == "Error: invalid arguments for tool 'whoami': `$.ctx`: unknown field; the parameters are: greeting"
    )
    assert honest.value == "hi c2"


# -- metadata and features -------------------------------------------------------------------------


class Collects(Feature):
    def __init__(self, metadata: Mapping[str, Any]) -> None:
        self._metadata = metadata

    def collect_metadata(self, call: ToolCall, tool: ToolBase[Any, Any] | None) -> Mapping[str, Any]:
        return self._metadata


@tool
async def whoami(ctx: CallContext) -> dict[str, Any]:
    """Return the call's merged metadata."""
    return dict(ctx.metadata)


async def test_metadata_merges_features_then_caller_then_runtime_keys() -> None:
    recorder = Recorder()
    first = Collects({"tenant": "first", "region": "eu", "trace": "t1", "runtime.call_id": "forged"})
    second = Collects({"trace": "t2", "runtime.tool_name": "forged"})
    caller = {"tenant": "caller", "request": "r9", "runtime.call_id": "forged-by-caller"}
    async with open_runtime([whoami], tracing=False, features=[first, second, recorder]) as rt:
        result = await rt.call(ToolCall(id="c7", name="whoami"), metadata=caller)
        many = await rt.call_many(
            [ToolCall(id="m1", name="whoami"), ToolCall(id="m2", name="whoami")], metadata=caller
        )
    expected = {
        "tenant": "caller",
        "region": "eu",
        "trace": "t2",
        "request": "r9",
        "runtime.call_id": "c7",
        "runtime.tool_name": "whoami",
    }
    assert result.value == expected
    assert recorder.metadata["c7"] == [expected, expected]  # starting, completed
    assert [r.value for r in many] == [
        {**expected, "runtime.call_id": "m1"},
        {**expected, "runtime.call_id": "m2"},
    ]
    assert caller == {"tenant": "caller", "request": "r9", "runtime.call_id": "forged-by-caller"}


async def test_metadata_without_features_is_the_callers_plus_the_runtime_keys() -> None:
    async with open_runtime([whoami], tracing=False) as rt:
        bare = await rt.call(ToolCall(id="c1", name="whoami"))
        given = await rt.call(
            ToolCall(id="c2", name="whoami"), metadata={"tenant": "t", "runtime.tool_name": "x"}
        )
    assert bare.value == {"runtime.call_id": "c1", "runtime.tool_name": "whoami"}
    assert given.value == {"tenant": "t", "runtime.call_id": "c2", "runtime.tool_name": "whoami"}


async def test_feature_hooks_see_the_runtime_keys_of_an_unknown_tool() -> None:
    recorder = Recorder()
    async with open_runtime([whoami], tracing=False, features=[recorder]) as rt:
        await rt.call(ToolCall(id="c1", name="who"), metadata={"tenant": "t"})
    assert (
        recorder.metadata["c1"] == [{"tenant": "t", "runtime.call_id": "c1", "runtime.tool_name": "who"}] * 2
    )


async def test_each_feature_hook_is_called_exactly_once_per_call(autojump_clock: trio.abc.Clock) -> None:
    @tool(timeout=1)
    async def late() -> None:
        await trio.sleep(2)

    @tool
    async def crash() -> None:
        raise ValueError("bad")

    @tool
    async def hang() -> None:
        await trio.sleep_forever()

    recorder = Recorder()
    async with open_runtime([page, late, crash, hang], tracing=False, features=[recorder]) as rt:
        await rt.call(call("single", "page", limit=1))
        await rt.call(ToolCall(id="single-unknown", name="pag"))
        await rt.call_many(
            [
                call("ok", "page", limit=2),
                ToolCall(id="unknown", name="paeg"),
                ToolCall(id="invalid", name="page", arguments="{"),
                ToolCall(id="error", name="crash"),
                ToolCall(id="timeout", name="late"),
                ToolCall(id="batch-timeout", name="hang"),
            ],
            timeout=1.5,
        )
        async with contextlib.aclosing(
            rt.as_completed([call("first", "page", limit=1), ToolCall(id="dropped", name="hang")])
        ) as stream:
            async for _ in stream:
                break
        with trio.move_on_after(1):
            await rt.call(ToolCall(id="cancelled", name="hang"))
    expected = {
        "single": "completed",
        "single-unknown": "failed",
        "ok": "completed",
        "unknown": "failed",
        "invalid": "failed",
        "error": "failed",
        "timeout": "failed",
        "batch-timeout": "failed",
        "first": "completed",
        "dropped": "failed",
        "cancelled": "failed",
    }
    for call_id, outcome in expected.items():
        assert recorder.hooks_of(call_id) == ["collect", "starting", outcome], call_id
        assert len(recorder.results[call_id]) == 1
    assert {cid for _, cid in recorder.events} == set(expected)


class Throttle(Feature):
    """Awaits in its hooks, as a quota or an audit log would."""

    def __init__(self, *, starting: float = 0, finishing: float = 0) -> None:
        self.starting = starting
        self.finishing = finishing

    async def on_call_starting(self, call: ToolCall, ctx: CallContext) -> None:
        await trio.sleep(self.starting)

    async def on_call_completed(self, call: ToolCall, result: ToolSuccess, ctx: CallContext) -> None:
        await trio.sleep(self.finishing)

    async def on_call_failed(self, call: ToolCall, failure: ToolFailure, ctx: CallContext) -> None:
        await trio.sleep(self.finishing)


async def test_a_caller_cancelled_in_a_starting_hook_still_finishes_the_call_in_every_feature(
    autojump_clock: trio.abc.Clock,
) -> None:
    before, after = Recorder(), Recorder()
    async with open_runtime([page], tracing=False, features=[before, Throttle(starting=1), after]) as rt:
        with trio.move_on_after(0.5):
            await rt.call(call("single", "page", limit=1))
        with trio.move_on_after(0.5):
            await rt.call_many([call("a", "page", limit=1), call("b", "page", limit=1)])
        with trio.move_on_after(1.5):  # c has started in every feature, d is in the throttle
            await rt.call_many([call("c", "page", limit=1), call("d", "page", limit=1)])
        assert rt.statistics().tools["page"].failures == {"cancelled": 5}
    for recorder in (before, after):
        for call_id in ("single", "a", "b", "c", "d"):
            (failure,) = recorder.results[call_id]
            assert isinstance(failure, ToolFailure)
            assert failure.kind is FailureKind.CANCELLED
            assert recorder.hooks_of(call_id)[-1] == "failed"
    # every feature hears each call start once and end once, wherever its caller left: in a
    # feature's starting hook (those after it hear it then, as far as they can without
    # waiting), or before the call began (b: they hear it start as it ends)
    for recorder in (before, after):
        for call_id in ("single", "a", "b", "c", "d"):
            assert recorder.hooks_of(call_id)[1:-1] == ["starting"], call_id


async def test_a_caller_cancelled_in_a_finishing_hook_still_finishes_the_call_in_every_feature(
    autojump_clock: trio.abc.Clock,
) -> None:
    after = Recorder()
    async with open_runtime([page], tracing=False, features=[Throttle(finishing=0.75), after]) as rt:
        with trio.move_on_after(0.5):
            await rt.call(call("single", "page", limit=1))
        with trio.move_on_after(0.5):
            await rt.call_many([call("a", "page", limit=1), call("b", "page", limit=1)])
        stats = rt.statistics().tools["page"]
    for call_id in ("single", "a", "b"):
        assert after.hooks_of(call_id) == ["collect", "starting", "completed"], call_id
    assert (stats.calls, stats.succeeded) == (3, 3)


class Broken(Feature):
    """Raises in every hook it has."""

    def collect_metadata(self, call: ToolCall, tool: ToolBase[Any, Any] | None) -> Mapping[str, Any]:
        raise RuntimeError("collect_metadata broke")

    async def on_call_starting(self, call: ToolCall, ctx: CallContext) -> None:
        raise RuntimeError("on_call_starting broke")

    async def on_call_completed(self, call: ToolCall, result: ToolSuccess, ctx: CallContext) -> None:
        raise RuntimeError("on_call_completed broke")

    async def on_call_failed(self, call: ToolCall, failure: ToolFailure, ctx: CallContext) -> None:
        raise RuntimeError("on_call_failed broke")

    def around_call(self, ctx: CallContext) -> contextlib.AbstractContextManager[None] | None:
        raise RuntimeError("around_call broke")


class BrokenOnExit(Feature):
    """Its around_call context manager raises when the tool's code is done."""

    @contextlib.contextmanager
    def _around(self) -> Iterator[None]:
        yield
        raise RuntimeError("around_call broke on exit")

    def around_call(self, ctx: CallContext) -> contextlib.AbstractContextManager[None] | None:
        return self._around()


@pytest.mark.parametrize("broken", [Broken(), BrokenOnExit()], ids=["every-hook", "around-exit"])
async def test_a_feature_that_raises_is_logged_and_never_breaks_a_call(
    broken: Feature, caplog: pytest.LogCaptureFixture
) -> None:
    @tool
    async def crash() -> None:
        raise ValueError("bad")

    recorder = Recorder()
    async with open_runtime([page, whoami, crash], tracing=False, features=[broken, recorder]) as rt:
        ok, failed, unknown, meta = await rt.call_many(
            [
                call("ok", "page", limit=2),
                ToolCall(id="failed", name="crash"),
                ToolCall(id="unknown", name="nothing"),
                ToolCall(id="meta", name="whoami"),
            ],
            metadata={"tenant": "t"},
        )
        single = await rt.call(call("single", "page", limit=1))
    assert ok == ToolSuccess(call_id="ok", tool="page", content="[0,1]", value=[0, 1])
    assert single.ok
    assert isinstance(failed, ToolFailure)
    assert failed.kind is FailureKind.ERROR
    assert failed.message == "tool 'crash' raised ValueError: bad"
    assert isinstance(unknown, ToolFailure)
    assert unknown.kind is FailureKind.UNKNOWN_TOOL
    assert meta.value == {"tenant": "t", "runtime.call_id": "meta", "runtime.tool_name": "whoami"}
    for call_id in ("ok", "failed", "unknown", "meta", "single"):
        assert len(recorder.hooks_of(call_id)) == 3  # the feature after the broken one still runs
    broke = [r for r in caplog.records if r.name == "runtime.features"]
    assert broke
    assert all(r.levelno == logging.ERROR and r.exc_info for r in broke)
    if isinstance(broken, Broken):
        hooks = {r.getMessage().split(" failed in ")[1].split(" ")[0] for r in broke}
        assert hooks == {
            "collect_metadata",
            "on_call_starting",
            "on_call_completed",
            "on_call_failed",
            "around_call",
        }


# -- mailboxes and workers -------------------------------------------------------------------------


async def test_a_full_mailbox_makes_callers_wait(autojump_clock: trio.abc.Clock) -> None:
    @tool(max_concurrency=1, mailbox_size=1)
    async def serial(i: int) -> int:
        await trio.sleep(1)
        return i

    finished: dict[int, tuple[float, ToolResult]] = {}

    async def caller(rt: Any, i: int) -> None:
        result = await rt.call(call(f"c{i}", "serial", i=i))
        finished[i] = (trio.current_time(), result)

    async with open_runtime([serial], tracing=False) as rt, trio.open_nursery() as nursery:
        for i in range(4):
            nursery.start_soon(caller, rt, i)
            await trio.testing.wait_all_tasks_blocked()
        stats = rt.statistics().tools["serial"]
        assert (stats.in_flight, stats.queued) == (1, 1)  # two more callers wait for room
    assert {i: (t, r.ok) for i, (t, r) in finished.items()} == {
        0: (1.0, True),
        1: (2.0, True),
        2: (3.0, True),
        3: (4.0, True),
    }


async def test_a_full_mailbox_rejects_calls_as_overloaded_when_on_full_is_reject(
    autojump_clock: trio.abc.Clock,
) -> None:
    @tool(max_concurrency=1, mailbox_size=1, on_full="reject")
    async def shedding(i: int) -> int:
        await trio.sleep(1)
        return i

    async with open_runtime([shedding], tracing=False) as rt:
        results = await rt.call_many([call(f"c{i}", "shedding", i=i) for i in range(4)])
        assert trio.current_time() == 2.0
        later = await rt.call(call("later", "shedding", i=9))
        stats = rt.statistics().tools["shedding"]
    assert [r.ok for r in results] == [True, True, False, False]
    for result in results[2:]:
        assert isinstance(result, ToolFailure)
        assert result.kind is FailureKind.OVERLOADED
        assert result.content == "Error: tool 'shedding' is overloaded (1 calls waiting); try again later"
    assert later.ok
    assert stats.failures == {"overloaded": 2}


@pytest.mark.parametrize("limit", [1, 3, 7])
async def test_max_concurrency_limits_concurrent_executions(
    autojump_clock: trio.abc.Clock, limit: int
) -> None:
    running = 0
    peak = 0

    @tool(max_concurrency=limit)
    async def limited(i: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await trio.sleep(1)
        running -= 1
        return i

    async with open_runtime([limited], tracing=False) as rt:
        results = await rt.call_many([call(f"c{i}", "limited", i=i) for i in range(20)])
        elapsed = trio.current_time()
    assert peak == limit
    assert elapsed == -(-20 // limit)
    assert [r.value for r in results] == list(range(20))


async def test_sync_tools_run_in_threads_and_do_not_block_the_trio_loop() -> None:
    trio_thread = threading.get_ident()
    gate = threading.Event()
    ran_in: list[int] = []

    @tool
    def blocking() -> str:
        ran_in.append(threading.get_ident())
        if not gate.wait(timeout=30):  # a bound, in case the loop were blocked
            return "gate never opened"
        return "opened"

    async with open_runtime([blocking, add], tracing=False) as rt, trio.open_nursery() as nursery:
        results: list[ToolResult] = []

        async def call_blocking() -> None:
            results.append(await rt.call(ToolCall(id="b", name="blocking")))

        nursery.start_soon(call_blocking)
        # the blocked thread does not stop other calls on the loop
        for i in range(3):
            assert (await rt.call(call(f"a{i}", "add", a=i, b=1))).ok
        assert results == []
        gate.set()
    assert results == [ToolSuccess(call_id="b", tool="blocking", content="opened", value="opened")]
    assert len(ran_in) == 1
    assert ran_in[0] != trio_thread


async def test_inline_sync_tools_run_on_the_trio_thread() -> None:
    seen: list[tuple[int, bool]] = []

    @tool(inline=True)
    def quick(x: int) -> int:
        seen.append((threading.get_ident(), trio.lowlevel.current_task() is not None))
        return x * 2

    async with open_runtime([quick], tracing=False) as rt:
        results = await rt.call_many([call(f"c{i}", "quick", x=i) for i in range(3)])
    assert [r.value for r in results] == [0, 2, 4]
    assert seen == [(threading.get_ident(), True)] * 3


# -- registration at run time ----------------------------------------------------------------------


async def test_tools_can_be_registered_and_unregistered_while_running() -> None:
    @tool
    async def late_comer(x: int) -> int:
        return x + 1

    async with open_runtime([add], tracing=False) as rt:
        before = await rt.call(call("c1", "late_comer", x=1))
        await rt.register(late_comer)
        assert rt.registry.names() == ["add", "late_comer"]
        added = await rt.call(call("c2", "late_comer", x=1))
        await rt.unregister("late_comer", "never-registered")
        assert rt.registry.names() == ["add"]
        removed = await rt.call(call("c3", "late_comer", x=1))
        still = await rt.call(call("c4", "add", a=1, b=1))
    assert isinstance(before, ToolFailure)
    assert before.kind is FailureKind.UNKNOWN_TOOL
    assert added == ToolSuccess(call_id="c2", tool="late_comer", content="2", value=2)
    assert isinstance(removed, ToolFailure)
    assert removed.kind is FailureKind.UNKNOWN_TOOL
    assert removed.content == "Error: no tool named 'late_comer'; available tools: add"
    assert still.ok


async def test_registering_a_taken_name_raises_unless_replace_is_given() -> None:
    torn_down: list[str] = []

    class Version(Tool[Text, str]):
        name = "version"

        def __init__(self, tag: str) -> None:
            self.tag = tag

        async def execute(self, args: Text) -> str:
            return f"{self.tag}:{args.text}"

        async def teardown(self) -> None:
            torn_down.append(self.tag)

    async with open_runtime([Version("v1")], tracing=False) as rt:
        with pytest.raises(ValueError, match="Tool 'version' is already defined"):
            await rt.register(Version("v2"))
        first = await rt.call(call("c1", "version", text="x"))
        await rt.register(Version("v2"), replace=True)
        assert torn_down == ["v1"]
        second = await rt.call(call("c2", "version", text="x"))
        with pytest.raises(ValueError, match="Tool 'twice' is already defined"):
            await rt.register(search, tool(name="twice")(lambda: 1), tool(name="twice")(lambda: 2))
        assert "search" not in rt.registry
    assert torn_down == ["v1", "v2"]
    assert first.value == "v1:x"
    assert second.value == "v2:x"


async def test_replacing_a_tool_while_it_serves_a_call_never_makes_it_unknown(
    autojump_clock: trio.abc.Clock,
) -> None:
    def version(tag: str) -> Any:
        @tool(name="service")
        async def service(seconds: float) -> str:
            await trio.sleep(seconds)
            return tag

        return service

    answered: dict[str, ToolResult] = {}

    async def caller(rt: Any, cid: str, seconds: float) -> None:
        answered[cid] = await rt.call(call(cid, "service", seconds=seconds))

    async with open_runtime([version("v1"), add], tracing=False) as rt, trio.open_nursery() as nursery:
        nursery.start_soon(caller, rt, "running", 2)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(functools.partial(rt.register, version("v2"), replace=True))
        await trio.sleep(1)  # the old version is still finishing its call
        await caller(rt, "meanwhile", 0)
        assert rt.registry.names() == ["service", "add"]
    assert answered["running"].value == "v1"  # the running call was let finish on the old version
    assert answered["meanwhile"].value == "v2"


async def test_unregistering_a_tool_fails_its_queued_calls_as_unavailable(
    autojump_clock: trio.abc.Clock,
) -> None:
    @tool(max_concurrency=1)
    async def serial(i: int) -> int:
        await trio.sleep(1)
        return i

    results: dict[str, tuple[float, ToolResult]] = {}

    async def caller(rt: Any, cid: str) -> None:
        result = await rt.call(call(cid, "serial", i=0))
        results[cid] = (trio.current_time(), result)

    async with open_runtime([serial], tracing=False) as rt, trio.open_nursery() as nursery:
        for cid in ("running", "queued"):
            nursery.start_soon(caller, rt, cid)
            await trio.testing.wait_all_tasks_blocked()
        await rt.unregister("serial")
        assert trio.current_time() == 1.0  # the running call was let finish
    assert results["running"][1].ok
    when, queued = results["queued"]
    assert when == 0.0
    assert isinstance(queued, ToolFailure)
    assert queued.kind is FailureKind.UNAVAILABLE


# -- statistics ------------------------------------------------------------------------------------


async def test_statistics_count_calls_outcomes_and_load_per_tool(autojump_clock: trio.abc.Clock) -> None:
    @tool(max_concurrency=2)
    async def work(seconds: float) -> float:
        if seconds < 0:
            raise ValueError("negative")
        await trio.sleep(seconds)
        return seconds

    async with open_runtime([work, page], tracing=False) as rt:
        fresh = rt.statistics()
        assert fresh.tools["work"].state == "up"
        assert (fresh.tools["work"].calls, fresh.tools["work"].failures, fresh.in_flight) == (0, {}, 0)
        await rt.call_many(
            [
                call("a", "work", seconds=1),
                call("b", "work", seconds=-1),
                call("c", "work", seconds="x"),
                call("d", "work", seconds=5),
                call("e", "page", limit=1),
                ToolCall(id="f", name="wrk"),
                ToolCall(id="g", name="wok"),
            ],
            timeout=2,
        )
        async with trio.open_nursery() as nursery:
            for i in range(5):
                nursery.start_soon(rt.call, call(f"load{i}", "work", seconds=1))
            await trio.testing.wait_all_tasks_blocked()
            busy = rt.statistics()
        done = rt.statistics()
    assert (busy.tools["work"].in_flight, busy.tools["work"].queued, busy.in_flight) == (2, 3, 2)
    work_stats = done.tools["work"]
    assert work_stats.calls == 9
    assert work_stats.succeeded == 6
    assert work_stats.failures == {"error": 1, "invalid_arguments": 1, "timeout": 1}
    assert (work_stats.in_flight, work_stats.queued, work_stats.restarts, work_stats.state) == (0, 0, 0, "up")
    assert (done.tools["page"].calls, done.tools["page"].succeeded) == (1, 1)
    assert done.unknown_tool_calls == 2


async def test_an_exception_raised_in_the_runtime_block_comes_out_unwrapped() -> None:
    class Oops(Exception):
        pass

    with pytest.raises(Oops, match=r"^mine$"):
        async with open_runtime([], tracing=False):
            raise Oops("mine")


async def test_a_tool_whose_backend_is_gone_reports_unavailable_with_the_reason() -> None:
    from runtime import ToolUnavailable

    @tool
    async def remote() -> None:
        raise ToolUnavailable("the server closed the connection")

    async with open_runtime([remote], tracing=False) as rt:
        result = await rt.call(ToolCall(id="1", name="remote"))
    assert isinstance(result, ToolFailure)
    assert result.kind is FailureKind.UNAVAILABLE
    assert result.message == "tool 'remote' is unavailable: the server closed the connection"


async def test_registry_changes_are_counted_and_can_be_awaited() -> None:
    @tool
    async def late() -> int:
        return 1

    async with open_runtime([], tracing=False) as rt, trio.open_nursery() as nursery:
        start = rt.registry_version
        seen: list[int] = []

        async def watch() -> None:
            seen.append(await rt.wait_registry_changed(start))

        nursery.start_soon(watch)
        await trio.testing.wait_all_tasks_blocked()
        assert seen == []
        await rt.register(late)
        await trio.testing.wait_all_tasks_blocked()
        assert seen == [start + 1]
        assert "late" in rt.registry
        await rt.unregister("late")
        assert rt.registry_version == start + 2


async def test_already_parsed_arguments_are_held_to_the_same_byte_limit() -> None:
    counting = CountingDecode()
    CountingDecode.decoded = 0
    async with open_runtime([counting], tracing=False, max_argument_bytes=64) as rt:
        small = await rt.call(ToolCall(id="d1", name="counting", arguments={"text": "hi"}))
        big = await rt.call(ToolCall(id="d2", name="counting", arguments={"text": "x" * 100}))
    assert small.ok
    assert isinstance(big, ToolFailure)
    assert big.message == "invalid arguments for tool 'counting': 111 bytes, over the limit of 64"
    assert CountingDecode.decoded == 1


async def test_an_in_caller_tool_runs_in_its_trio_callers_own_task_and_still_meets_its_deadline(
    autojump_clock: trio.abc.Clock,
) -> None:
    from runtime import FailureKind

    seen: list[object] = []

    @tool(in_caller=True)
    async def here(wait: float) -> str:
        """Runs where its caller is."""
        seen.append(trio.lowlevel.current_task())
        await trio.sleep(wait)
        return "done"

    @tool
    async def elsewhere() -> str:
        """Runs on a worker task (the default)."""
        seen.append(trio.lowlevel.current_task())
        await trio.lowlevel.checkpoint()
        return "done"

    async with open_runtime([here, elsewhere], tracing=False) as rt:
        me = trio.lowlevel.current_task()
        assert (await rt.call(ToolCall(id="1", name="here", arguments='{"wait": 0.1}'))).ok
        assert seen[-1] is me
        assert (await rt.call(ToolCall(id="2", name="elsewhere"))).ok
        assert seen[-1] is not me
        late = await rt.call(ToolCall(id="3", name="here", arguments='{"wait": 10}'), timeout=1)
        assert not late.ok
        assert late.kind is FailureKind.TIMEOUT  # type: ignore[union-attr]
        assert trio.current_time() < 1.5
        stats = rt.statistics().tools["here"]
        assert (stats.calls, stats.in_flight) == (2, 0)
