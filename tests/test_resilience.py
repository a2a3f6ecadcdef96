"""Resilience on the one call path (DESIGN.md 3.11): retries, dedupe and replay, caching,
budgets and rate limits, fair admission, circuit breakers; in one process on a MemoryStore
(the shared stores are tests/test_resilience_shared.py). Timelines run on trio's MockClock."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections import Counter
from functools import partial
from typing import Any

import pytest
import trio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runtime import (
    Budget,
    Cache,
    CallRequest,
    CircuitBreaker,
    Dedupe,
    FailureKind,
    Policy,
    RateLimit,
    Retry,
    ToolCall,
    ToolFailure,
    ToolResult,
    ToolSuccess,
    open_runtime,
    tool,
)
from runtime.embed import open_asyncio_runtime
from runtime.exceptions import ToolDefinitionError, ToolUnavailable
from runtime.tracing import Tracing

ran: Counter[str] = Counter()
flaky_left: Counter[str] = Counter()  # failures still to come, per tool


@pytest.fixture(autouse=True)
def _reset() -> None:
    ran.clear()
    flaky_left.clear()


def call(call_id: str, name: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=json.dumps(arguments))


# -- tools ------------------------------------------------------------------------------------


@tool(idempotent=True, retry=Retry(attempts=3, backoff=0.5, jitter=0), timeout=1.0)
async def slow_then_fast(x: int) -> int:
    """Times out until its failures run out."""
    ran["slow_then_fast"] += 1
    if flaky_left["slow_then_fast"] > 0:
        flaky_left["slow_then_fast"] -= 1
        await trio.sleep(10)
    return x * 2


@tool(idempotent=True, retry=Retry(attempts=4, backoff=0.1, jitter=0))
async def gone_then_back() -> str:
    """UNAVAILABLE until its failures run out."""
    ran["gone_then_back"] += 1
    if flaky_left["gone_then_back"] > 0:
        flaky_left["gone_then_back"] -= 1
        raise ToolUnavailable("the backend is restarting")
    return "back"


@tool(idempotent=True, retry=Retry(attempts=3, backoff=0.1, jitter=0))
async def raises() -> str:
    """Its own ERROR: not retried unless `on` names it."""
    ran["raises"] += 1
    raise RuntimeError("no such row")


@tool(idempotent=True, retry=Retry(attempts=3, backoff=0.1, jitter=0, on={"error"}))
async def raises_retried() -> str:
    """ERROR, retried because `on` says so."""
    ran["raises_retried"] += 1
    if flaky_left["raises_retried"] > 0:
        flaky_left["raises_retried"] -= 1
        raise RuntimeError("flaky")
    return "ok"


@tool(read_only=True, cache=Cache(ttl=10, max_entries=3))
async def weather(city: str) -> str:
    """Cached per principal."""
    ran["weather"] += 1
    await trio.lowlevel.checkpoint()
    return f"sunny in {city} ({ran['weather']})"


@tool(read_only=True, cache=Cache(ttl=10))
async def forecast(city: str) -> str:
    """Cached per principal, with room for every entry of a test."""
    ran["forecast"] += 1
    return f"rain in {city} ({ran['forecast']})"


@tool(read_only=True, cache=Cache(ttl=10, shared=True))
def rates(currency: str = "EUR") -> str:
    """Cached for everyone (a sync tool)."""
    ran["rates"] += 1
    return f"{currency}: {ran['rates']}"


@tool(read_only=True, cache=Cache(ttl=10))
async def sometimes_fails(x: int) -> int:
    """A failure is never cached."""
    ran["sometimes_fails"] += 1
    if flaky_left["sometimes_fails"] > 0:
        flaky_left["sometimes_fails"] -= 1
        raise RuntimeError("oops")
    return x


@tool(idempotent=True, dedupe=Dedupe(ttl=60))
async def charge(order: str, amount: int) -> str:
    """A side effect that must happen once."""
    ran["charge"] += 1
    await trio.sleep(1)
    return f"charged {amount} for {order} (#{ran['charge']})"


@tool(idempotent=True, dedupe=Dedupe(ttl=0))
async def join_only(x: int) -> int:
    """Joins calls in flight, keeps nothing after."""
    ran["join_only"] += 1
    await trio.sleep(1)
    return x


@tool(rate_limit=RateLimit(rate=2, burst=5))
async def limited() -> str:
    """Five at once, then two a second."""
    ran["limited"] += 1
    return "ok"


@tool(rate_limit=RateLimit(rate=2, burst=1, wait=True))
async def limited_waits() -> str:
    """Waits for its token."""
    ran["limited_waits"] += 1
    return "ok"


@tool(timeout=1.0)
async def backend(mode: str) -> str:
    """Its mode decides how it fails: 'down', 'hang', 'error', 'ok'."""
    ran["backend"] += 1
    if mode == "down":
        raise ToolUnavailable("connection refused")
    if mode == "hang":
        await trio.sleep(10)
    if mode == "error":
        raise ValueError("bad row")
    return "ok"


@tool
async def work(seconds: float) -> str:
    """Runs `seconds`."""
    ran["work"] += 1
    await trio.sleep(seconds)
    return "done"


TOOLS = [
    slow_then_fast,
    gone_then_back,
    raises,
    raises_retried,
    weather,
    forecast,
    rates,
    sometimes_fails,
    charge,
    join_only,
    limited,
    limited_waits,
    backend,
    work,
]


# -- options refused at definition ------------------------------------------------------------


def test_retry_is_refused_for_a_tool_that_is_not_idempotent() -> None:
    with pytest.raises(TypeError, match="idempotent"):

        @tool(retry=Retry())
        async def pay(amount: int) -> str:
            """Not safe to run twice."""
            return "paid"


def test_cache_is_refused_for_a_tool_that_is_not_read_only() -> None:
    with pytest.raises(TypeError, match="read_only"):

        @tool(cache=Cache())
        async def write(text: str) -> str:
            """Writes."""
            return text


@pytest.mark.parametrize("kind", ["invalid_arguments", "rejected", "unknown_tool", "cancelled"])
def test_retry_refuses_kinds_another_attempt_cannot_change(kind: str) -> None:
    with pytest.raises(ToolDefinitionError, match="cannot retry"):
        Retry(on={kind})  # type: ignore[arg-type]


# -- retries ----------------------------------------------------------------------------------


async def test_a_timed_out_attempt_is_retried_and_the_caller_sees_one_result(
    autojump_clock: trio.abc.Clock,
) -> None:
    flaky_left["slow_then_fast"] = 2
    async with open_runtime(TOOLS, tracing=False) as rt:
        start = trio.current_time()
        result = await rt.call(call("1", "slow_then_fast", x=21))
        elapsed = trio.current_time() - start
        assert isinstance(result, ToolSuccess)
        assert result.value == 42
        assert ran["slow_then_fast"] == 3
        # two 1 s timeouts, backoffs of 0.5 and 1.0 s
        assert elapsed == pytest.approx(3.5, abs=0.01)
        stats = rt.statistics().tools["slow_then_fast"]
        assert stats.retries == 2
        assert stats.calls == 1
        assert stats.succeeded == 1


async def test_retries_stop_at_attempts_and_the_model_reads_the_last_failure(
    autojump_clock: trio.abc.Clock,
) -> None:
    flaky_left["gone_then_back"] = 10
    async with open_runtime(TOOLS, tracing=False) as rt:
        result = await rt.call(call("1", "gone_then_back"))
        assert isinstance(result, ToolFailure)
        assert result.kind is FailureKind.UNAVAILABLE
        assert "restarting" in result.message
        assert ran["gone_then_back"] == 4


async def test_an_error_is_not_retried_unless_on_names_it(autojump_clock: trio.abc.Clock) -> None:
    flaky_left["raises_retried"] = 2
    async with open_runtime(TOOLS, tracing=False) as rt:
        plain = await rt.call(call("1", "raises"))
        assert isinstance(plain, ToolFailure)
        assert plain.kind is FailureKind.ERROR
        assert ran["raises"] == 1
        named = await rt.call(call("2", "raises_retried"))
        assert isinstance(named, ToolSuccess)
        assert ran["raises_retried"] == 3


async def test_bad_arguments_are_never_retried(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        result = await rt.call(call("1", "slow_then_fast", x="not a number"))
        assert isinstance(result, ToolFailure)
        assert result.kind is FailureKind.INVALID_ARGUMENTS
        assert ran["slow_then_fast"] == 0
        assert rt.statistics().tools["slow_then_fast"].retries == 0


async def test_retries_stay_inside_the_callers_deadline(autojump_clock: trio.abc.Clock) -> None:
    flaky_left["slow_then_fast"] = 5
    async with open_runtime(TOOLS, tracing=False) as rt:
        start = trio.current_time()
        result = await rt.call(call("1", "slow_then_fast", x=1), timeout=2.0)
        elapsed = trio.current_time() - start
        assert isinstance(result, ToolFailure)
        assert result.kind is FailureKind.TIMEOUT
        assert elapsed <= 2.0 + 1e-6
        # 1 s attempt, 0.5 s backoff, then a second attempt cut by the caller's deadline
        assert ran["slow_then_fast"] == 2


async def test_a_runtime_default_retry_applies_to_idempotent_tools_only(
    autojump_clock: trio.abc.Clock,
) -> None:
    @tool(idempotent=True)
    async def fetch() -> str:
        """Idempotent."""
        ran["fetch"] += 1
        if ran["fetch"] < 3:
            raise ToolUnavailable("down")
        return "ok"

    @tool
    async def send() -> str:
        """Not idempotent."""
        ran["send"] += 1
        raise ToolUnavailable("down")

    async with open_runtime([fetch, send], retry=Retry(attempts=3, backoff=0.1), tracing=False) as rt:
        assert (await rt.call(call("1", "fetch"))).ok
        assert ran["fetch"] == 3
        sent = await rt.call(call("2", "send"))
        assert not sent.ok
        assert ran["send"] == 1


async def test_each_attempt_is_a_span_event_with_its_outcome(autojump_clock: trio.abc.Clock) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    flaky_left["gone_then_back"] = 2
    async with open_runtime(TOOLS, tracing=Tracing(tracer_provider=provider)) as rt:
        assert (await rt.call(call("1", "gone_then_back"))).ok
    (span,) = [s for s in exporter.get_finished_spans() if "gone_then_back" in s.name]
    retries = [e for e in span.events if e.name == "tool.retry"]
    assert [e.attributes["tool.retry.attempt"] for e in retries] == [1, 2]  # type: ignore[index]
    assert {e.attributes["tool.retry.outcome"] for e in retries} == {"unavailable"}  # type: ignore[index]


async def test_a_cancelled_caller_stops_the_retries(autojump_clock: trio.abc.Clock) -> None:
    flaky_left["slow_then_fast"] = 5
    async with open_runtime(TOOLS, tracing=False) as rt:
        with trio.move_on_after(1.2):
            await rt.call(call("1", "slow_then_fast", x=1))
        await trio.sleep(30)
        assert ran["slow_then_fast"] == 1
        assert rt.statistics().tools["slow_then_fast"].in_flight == 0


async def test_retries_on_the_asyncio_embedding() -> None:
    flaky_left["gone_then_back"] = 2

    async def main() -> Any:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            return await rt.call(call("1", "gone_then_back"))

    result = await trio.to_thread.run_sync(asyncio.run, main())
    assert isinstance(result, ToolSuccess)
    assert result.value == "back"
    assert ran["gone_then_back"] == 3


# -- cache ------------------------------------------------------------------------------------


async def test_a_cached_result_is_per_principal_and_counted(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        a1 = await rt.call(call("1", "weather", city="Oslo"), principal="alice")
        a2 = await rt.call(call("2", "weather", city="Oslo"), principal="alice")
        b1 = await rt.call(call("3", "weather", city="Oslo"), principal="bob")
        assert isinstance(a1, ToolSuccess)
        assert isinstance(a2, ToolSuccess)
        assert isinstance(b1, ToolSuccess)
        assert a1.value == a2.value
        assert b1.value != a1.value
        assert a2.call_id == "2"  # the hit answers its own call
        assert ran["weather"] == 2
        stats = rt.statistics().tools["weather"]
        assert (stats.cache_hits, stats.cache_misses) == (1, 2)


async def test_a_shared_cache_serves_every_principal_and_argument_order_does_not_matter(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        first = await rt.call(call("1", "rates", currency="EUR"), principal="alice")
        again = await rt.call(call("2", "rates"), principal="bob")  # the default is EUR too
        assert first.value == again.value  # type: ignore[union-attr]
        assert ran["rates"] == 1


async def test_a_cached_result_expires_and_the_cache_is_bounded(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        await rt.call(call("1", "weather", city="Oslo"))
        await trio.sleep(11)
        await rt.call(call("2", "weather", city="Oslo"))
        assert ran["weather"] == 2  # expired
        for i, city in enumerate(["A", "B", "C", "D"]):
            await rt.call(call(f"c{i}", "weather", city=city))
        assert ran["weather"] == 6
        await rt.call(call("x", "weather", city="Oslo"))  # evicted: max_entries=3
        await rt.call(call("y", "weather", city="D"))  # still there
        assert ran["weather"] == 7


async def test_a_cache_hit_does_not_depend_on_the_callers_idempotency_key(
    autojump_clock: trio.abc.Clock,
) -> None:
    # a key names an operation its caller may retry (MCP clients send a fresh one per call):
    # the cache answers by the arguments, whatever key each call carries
    async with open_runtime(TOOLS, tracing=False) as rt:
        for i in range(3):
            result = await rt.call(
                call(f"{i}", "forecast", city="Oslo"),
                principal="alice",
                metadata={"idempotency_key": f"k{i}"},
            )
            assert result.ok
        other = await rt.call(
            call("r", "forecast", city="Rome"), principal="alice", metadata={"idempotency_key": "k0"}
        )
        assert other.content == "rain in Rome (2)"  # the same key, other arguments: not Oslo's result
        assert ran["forecast"] == 2


async def test_a_shared_caches_entries_are_made_room_for_in_the_principal_that_wrote_most(
    autojump_clock: trio.abc.Clock,
) -> None:
    @tool(read_only=True, cache=Cache(ttl=600, max_entries=10, shared=True))
    async def lookup(item: str) -> str:
        """Look an item up."""
        ran[item] += 1
        return item

    async with open_runtime([lookup], tracing=False) as rt:
        await rt.call(call("b", "lookup", item="bobs"), principal="bob")
        for i in range(50):  # eve's flood of distinct calls evicts her own entries
            await rt.call(call(f"e{i}", "lookup", item=f"e{i}"), principal="eve")
        await rt.call(call("a", "lookup", item="bobs"), principal="alice")  # shared: bob's result
        assert ran["bobs"] == 1
        await rt.call(call("e", "lookup", item="e0"), principal="eve")
        assert ran["e0"] == 2  # her oldest went first


async def test_failures_are_not_cached(autojump_clock: trio.abc.Clock) -> None:
    flaky_left["sometimes_fails"] = 1
    async with open_runtime(TOOLS, tracing=False) as rt:
        assert not (await rt.call(call("1", "sometimes_fails", x=1))).ok
        assert (await rt.call(call("2", "sometimes_fails", x=1))).ok
        assert (await rt.call(call("3", "sometimes_fails", x=1))).ok
        assert ran["sometimes_fails"] == 2


async def test_invalidate_forgets_a_tools_results_by_call_principal_or_all(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        for who in ("alice", "bob"):
            for city in ("Oslo", "Rome"):
                await rt.call(call("w", "forecast", city=city), principal=who)
        assert ran["forecast"] == 4
        assert await rt.invalidate("forecast", {"city": "Oslo"}, principal="alice") == 1
        await rt.call(call("w", "forecast", city="Oslo"), principal="alice")
        await rt.call(call("w", "forecast", city="Rome"), principal="alice")
        assert ran["forecast"] == 5
        assert await rt.invalidate("forecast", principal="bob") == 2
        assert await rt.invalidate("forecast") == 2
        assert await rt.invalidate("work") == 0  # no cache
        with pytest.raises(KeyError):
            await rt.invalidate("nope")
        with pytest.raises(ValueError, match="do not decode"):
            await rt.invalidate("forecast", {"city": 3})


async def test_a_cache_hit_is_on_the_span(autojump_clock: trio.abc.Clock) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with open_runtime(TOOLS, tracing=Tracing(tracer_provider=provider)) as rt:
        await rt.call(call("1", "weather", city="Oslo"))
        await rt.call(call("2", "weather", city="Oslo"))
    spans = [s for s in exporter.get_finished_spans() if "weather" in s.name]
    hits = [[e.attributes["tool.cache.hit"] for e in s.events if e.name == "tool.cache"] for s in spans]  # type: ignore[index]
    assert hits == [[False], [True]]


# -- dedupe and replay ------------------------------------------------------------------------


async def test_a_hundred_identical_calls_in_flight_run_once(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        results = await rt.call_many([call(str(i), "charge", order="A1", amount=5) for i in range(100)])
        assert ran["charge"] == 1
        assert {r.value for r in results} == {"charged 5 for A1 (#1)"}  # type: ignore[union-attr]
        assert [r.call_id for r in results] == [str(i) for i in range(100)]
        stats = rt.statistics().tools["charge"]
        assert stats.joined == 99


async def test_a_replay_within_ttl_gets_the_stored_result(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        first = await rt.call(call("1", "charge", order="A1", amount=5))
        replay = await rt.call(call("2", "charge", order="A1", amount=5))
        other = await rt.call(call("3", "charge", order="A2", amount=5))
        assert first.value == replay.value != other.value  # type: ignore[union-attr]
        assert ran["charge"] == 2
        await trio.sleep(61)
        await rt.call(call("4", "charge", order="A1", amount=5))
        assert ran["charge"] == 3
        assert rt.statistics().tools["charge"].replayed == 1


async def test_the_callers_idempotency_key_decides_what_is_the_same_call(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        a = await rt.call(call("1", "charge", order="A1", amount=5), metadata={"idempotency_key": "turn-7"})
        b = await rt.call(call("2", "charge", order="A1", amount=6), metadata={"idempotency_key": "turn-7"})
        c = await rt.call(call("3", "charge", order="A1", amount=5), metadata={"idempotency_key": "turn-8"})
        assert a.value == b.value != c.value  # type: ignore[union-attr]
        assert ran["charge"] == 2


async def test_dedupe_is_per_principal(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        await rt.call_many([call("1", "charge", order="A1", amount=5)], principal="alice")
        await rt.call_many([call("2", "charge", order="A1", amount=5)], principal="bob")
        assert ran["charge"] == 2


async def test_ttl_zero_joins_calls_in_flight_and_keeps_nothing(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        await rt.call_many([call(str(i), "join_only", x=1) for i in range(10)])
        assert ran["join_only"] == 1
        await rt.call(call("again", "join_only", x=1))
        assert ran["join_only"] == 2


async def test_a_cancelled_leader_leaves_every_joiner_one_result(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        results: dict[str, Any] = {}

        async def leader() -> None:
            with trio.move_on_after(0.5):
                results["leader"] = await rt.call(call("L", "charge", order="Z", amount=1))

        async def joiner(i: int) -> None:
            await trio.sleep(0.1)
            results[str(i)] = await rt.call(call(str(i), "charge", order="Z", amount=1))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(leader)
            for i in range(5):
                nursery.start_soon(joiner, i)
        assert "leader" not in results
        assert len(results) == 5
        assert all(isinstance(r, ToolFailure | ToolSuccess) for r in results.values())
        assert rt.statistics().tools["charge"].in_flight == 0


# -- rate limits and budgets --------------------------------------------------------------------


async def test_a_rate_limit_admits_its_burst_exactly_then_says_when(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        results = await rt.call_many([call(str(i), "limited") for i in range(20)])
        assert sum(r.ok for r in results) == 5
        assert ran["limited"] == 5
        refused = [r for r in results if isinstance(r, ToolFailure)]
        assert {r.kind for r in refused} == {FailureKind.OVERLOADED}
        assert "retry after 0.5s" in refused[0].message
        await trio.sleep(1.0)  # two tokens back
        again = await rt.call_many([call(str(i), "limited") for i in range(5)])
        assert sum(r.ok for r in again) == 2


async def test_a_rate_limit_with_wait_paces_the_calls(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        start = trio.current_time()
        results = await rt.call_many([call(str(i), "limited_waits") for i in range(5)])
        assert all(r.ok for r in results)
        assert trio.current_time() - start == pytest.approx(2.0, abs=0.01)  # 1 at once, then 2/s
        late = await rt.call_many([call(str(i), "limited_waits") for i in range(5)], timeout=1.2)
        # the bucket is empty at 2.0 s: tokens at 2.5 and 3.0 s; the rest would wait past 3.2 s
        assert sum(r.ok for r in late) == 2
        assert {r.kind for r in late if isinstance(r, ToolFailure)} == {FailureKind.OVERLOADED}


async def test_a_principal_rate_is_shared_by_its_tools(autojump_clock: trio.abc.Clock) -> None:
    budget = Budget(rate=RateLimit(rate=1, burst=3))
    async with open_runtime(TOOLS, budget=budget, tracing=False) as rt:
        mixed = [
            call("1", "work", seconds=0),
            call("2", "backend", mode="ok"),
            call("3", "work", seconds=0),
            call("4", "backend", mode="ok"),
        ]
        alice = await rt.call_many(mixed, principal="alice")
        bob = await rt.call_many(mixed, principal="bob")
        assert sum(r.ok for r in alice) == 3
        assert sum(r.ok for r in bob) == 3
        refused = next(r for r in alice if isinstance(r, ToolFailure))
        assert "principal 'alice'" in refused.message
        assert "retry after" in refused.message


async def test_per_principal_concurrency_fails_fast_without_wait(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime(TOOLS, budget=Budget(per_principal=3), tracing=False) as rt:
        results = await rt.call_many([call(str(i), "work", seconds=1) for i in range(10)], principal="alice")
        assert sum(r.ok for r in results) == 3
        assert {r.kind for r in results if isinstance(r, ToolFailure)} == {FailureKind.OVERLOADED}
        other = await rt.call_many([call(str(i), "work", seconds=1) for i in range(3)], principal="bob")
        assert all(r.ok for r in other)


async def test_per_principal_budget_never_over_admits_under_a_thousand_racers(
    autojump_clock: trio.abc.Clock,
) -> None:
    peak: Counter[str] = Counter()
    now_running: Counter[str] = Counter()

    @tool
    async def measured(who: str) -> str:
        """Counts how many of one principal run at once."""
        now_running[who] += 1
        peak[who] = max(peak[who], now_running[who])
        await trio.sleep(0.01)
        now_running[who] -= 1
        return who

    async with open_runtime([measured], budget=Budget(per_principal=4, wait=True), tracing=False) as rt:
        async with trio.open_nursery() as nursery:
            for i in range(1000):
                who = f"p{i % 3}"
                nursery.start_soon(partial(rt.call, call(str(i), "measured", who=who), principal=who))
        assert dict(peak) == {"p0": 4, "p1": 4, "p2": 4}
        stats = rt.statistics().tools["measured"]
        assert stats.succeeded == 1000
        assert stats.in_flight == 0


async def test_per_batch_budget_caps_one_turns_concurrency(autojump_clock: trio.abc.Clock) -> None:
    running = 0
    peak = 0

    @tool
    async def step(i: int) -> int:
        """One of a turn's many calls."""
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await trio.sleep(1)
        running -= 1
        return i

    async with open_runtime([step], budget=Budget(per_batch=8), tracing=False) as rt:
        start = trio.current_time()
        results = await rt.call_many([call(str(i), "step", i=i) for i in range(800)])
        assert [r.value for r in results] == list(range(800))  # type: ignore[union-attr]
        assert peak == 8
        assert trio.current_time() - start == pytest.approx(100, abs=0.1)
        # two turns at once each get their own 8
        peak = 0
        async with trio.open_nursery() as nursery:
            for _ in range(2):
                nursery.start_soon(rt.call_many, [call(str(i), "step", i=i) for i in range(16)])
        assert peak == 16


async def test_budgets_on_the_asyncio_embedding() -> None:
    peak = 0
    running = 0

    @tool(loop="asyncio")
    async def step(i: int) -> int:
        """Counts concurrency."""
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1
        return i

    async def main() -> list[Any]:
        async with open_asyncio_runtime([step], budget=Budget(per_batch=4, per_principal=6, wait=True)) as rt:
            one = await rt.call_many([call(str(i), "step", i=i) for i in range(40)], principal="a")
            many = await asyncio.gather(
                *(rt.call(call(str(i), "step", i=i), principal="b") for i in range(40))
            )
            return [*one, *many]

    results = await trio.to_thread.run_sync(asyncio.run, main())
    assert all(r.ok for r in results)
    assert len(results) == 80
    assert peak <= 6


# -- fair admission ---------------------------------------------------------------------------


async def test_fair_admission_serves_principals_in_turn_with_weights(autojump_clock: trio.abc.Clock) -> None:
    order: list[str] = []

    @tool(max_concurrency=1, mailbox_size=1000)
    async def one_at_a_time(who: str) -> str:
        """Serialised."""
        order.append(who)
        await trio.sleep(0.1)
        return who

    async with open_runtime([one_at_a_time], fair=True, weights={"gold": 2.0}, tracing=False) as rt:
        async with trio.open_nursery() as nursery:
            for i in range(30):  # a burst from bulk first
                nursery.start_soon(
                    partial(rt.call, call(f"b{i}", "one_at_a_time", who="bulk"), principal="bulk")
                )
            await trio.sleep(0.05)
            for i in range(4):
                nursery.start_soon(
                    partial(rt.call, call(f"a{i}", "one_at_a_time", who="alice"), principal="alice")
                )
            for i in range(4):
                nursery.start_soon(
                    partial(rt.call, call(f"g{i}", "one_at_a_time", who="gold"), principal="gold")
                )
        # alice's and gold's 8 calls are done within the first few turns, not after bulk's 30
        last_small = max(i for i, who in enumerate(order) if who != "bulk")
        assert last_small <= 12
        # gold (weight 2) gets two turns for alice's one while all three wait
        window = [w for w in order[1:10] if w != "bulk"]
        assert window.count("gold") >= window.count("alice")
        assert len(order) == 38


async def test_without_fair_admission_a_burst_is_served_first(autojump_clock: trio.abc.Clock) -> None:
    order: list[str] = []

    @tool(max_concurrency=1, mailbox_size=1000)
    async def one_at_a_time(who: str) -> str:
        """Serialised."""
        order.append(who)
        await trio.sleep(0.1)
        return who

    async with open_runtime([one_at_a_time], tracing=False) as rt:
        async with trio.open_nursery() as nursery:
            for i in range(30):
                nursery.start_soon(
                    partial(rt.call, call(f"b{i}", "one_at_a_time", who="bulk"), principal="bulk")
                )
            await trio.sleep(0.05)
            nursery.start_soon(partial(rt.call, call("a", "one_at_a_time", who="alice"), principal="alice"))
        assert order.index("alice") == 30


# -- circuit breakers ---------------------------------------------------------------------------


async def test_a_breaker_opens_on_transport_failures_and_says_when_to_retry(
    autojump_clock: trio.abc.Clock,
) -> None:
    breaker = CircuitBreaker(failures=3, window=10, cool_down=5)
    async with open_runtime(TOOLS, breaker=breaker, tracing=False) as rt:
        for i, mode in enumerate(["down", "hang", "down"]):
            result = await rt.call(call(str(i), "backend", mode=mode))
            assert not result.ok
        assert ran["backend"] == 3
        refused = await rt.call(call("x", "backend", mode="ok"))
        assert isinstance(refused, ToolFailure)
        assert refused.kind is FailureKind.UNAVAILABLE
        assert "circuit open" in refused.message
        assert "retry after 5s" in refused.message
        assert ran["backend"] == 3
        assert rt.statistics().tools["backend"].breaker == "open"
        await trio.sleep(5)
        probe = await rt.call(call("p", "backend", mode="ok"))  # half-open: one goes through
        assert probe.ok
        assert rt.statistics().tools["backend"].breaker == "closed"


async def test_a_breaker_never_opens_on_the_tools_own_errors(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime(TOOLS, breaker=CircuitBreaker(failures=2), tracing=False) as rt:
        for i in range(10):
            result = await rt.call(call(str(i), "backend", mode="error"))
            assert isinstance(result, ToolFailure)
            assert result.kind is FailureKind.ERROR
        bad = await rt.call(call("b", "backend", mode=5))
        assert isinstance(bad, ToolFailure)
        assert bad.kind is FailureKind.INVALID_ARGUMENTS
        assert (await rt.call(call("ok", "backend", mode="ok"))).ok
        assert rt.statistics().tools["backend"].breaker == "closed"


async def test_a_failed_probe_opens_the_breaker_again(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime(TOOLS, breaker=CircuitBreaker(failures=1, cool_down=5), tracing=False) as rt:
        await rt.call(call("1", "backend", mode="down"))
        await trio.sleep(5)
        results = await rt.call_many([call("p", "backend", mode="down"), call("q", "backend", mode="ok")])
        assert ran["backend"] == 2  # the probe ran; the call beside it was refused while it probed
        assert all(isinstance(r, ToolFailure) and r.kind is FailureKind.UNAVAILABLE for r in results)
        after = await rt.call(call("r", "backend", mode="ok"))
        assert isinstance(after, ToolFailure)
        assert "retry after 5s" in after.message


async def test_retries_and_a_breaker_together_stop_a_storm(autojump_clock: trio.abc.Clock) -> None:
    @tool(idempotent=True)
    async def dead() -> str:
        """Always down."""
        ran["dead"] += 1
        raise ToolUnavailable("connection refused")

    async with open_runtime(
        [dead], retry=Retry(attempts=3, backoff=0.1), breaker=CircuitBreaker(failures=5), tracing=False
    ) as rt:
        results = await rt.call_many([call(str(i), "dead") for i in range(30)])
        assert all(not r.ok for r in results)
        # the fifth failure opens it: the other 25 calls and every retry are refused (was 30 x 3 = 90)
        assert ran["dead"] == 5


# -- a caller that gives up while the work goes on ----------------------------------------------


async def test_a_leader_whose_caller_gives_up_keeps_running_for_the_calls_that_joined_it(
    autojump_clock: trio.abc.Clock,
) -> None:
    """The work of a run its own caller left goes on (it ignores its cancellation here); the
    calls that joined it get what it ends with, and no second run overlaps it."""
    runs = {"started": 0, "running": 0, "peak": 0}

    @tool(idempotent=True, dedupe=Dedupe())
    async def pay(order: str) -> str:
        """Ignores its cancellation for 1 s."""
        runs["started"] += 1
        runs["running"] += 1
        runs["peak"] = max(runs["peak"], runs["running"])
        try:
            with trio.CancelScope(shield=True):
                await trio.sleep(1)
        finally:
            runs["running"] -= 1
        return f"paid {order}"

    async with open_runtime([pay], tracing=False) as rt, trio.open_nursery() as nursery:

        async def gives_up() -> None:
            with trio.move_on_after(0.5):
                await rt.call(call("a", "pay", order="A1"))

        nursery.start_soon(gives_up)
        await trio.sleep(0.1)
        joined = await rt.call(call("b", "pay", order="A1"))
        assert isinstance(joined, ToolSuccess)
        assert joined.value == "paid A1"
        assert trio.current_time() == pytest.approx(1.0)
        assert runs == {"started": 1, "running": 0, "peak": 1}


async def test_a_leaders_work_goes_on_for_the_calls_that_joined_it_when_its_caller_gives_up(
    autojump_clock: trio.abc.Clock,
) -> None:
    """The first caller leaves mid-run: its work is not cancelled while an identical call waits
    for it, so the tool runs once and the joined call gets its result (it ran twice before)."""
    ran.clear()
    async with open_runtime(TOOLS, tracing=False) as rt, trio.open_nursery() as nursery:
        left: list[ToolResult] = []

        async def gives_up() -> None:
            with trio.move_on_after(0.5):
                left.append(await rt.call(call("a", "charge", order="Z", amount=1)))

        nursery.start_soon(gives_up)
        await trio.sleep(0.1)
        joined = await rt.call(call("b", "charge", order="Z", amount=1))
        assert isinstance(joined, ToolSuccess)
        assert joined.value == "charged 1 for Z (#1)"
        assert ran["charge"] == 1
        assert trio.current_time() == pytest.approx(1.0)  # the first run's end, not a second run's
        assert left == []  # the caller that left was not answered by it
        stats = rt.statistics().tools["charge"]
        assert stats.abandoned == 0  # its work was handed over, not abandoned


@pytest.mark.parametrize("sync", [False, True])
async def test_a_handed_over_run_stops_once_every_call_waiting_for_it_has_left(
    sync: bool, autojump_clock: trio.abc.Clock
) -> None:
    """The first caller leaves, then the one that joined it times out: nobody waits for the run
    any more, so it is cancelled then (an async tool stops; a sync one's thread is let go)."""
    seen = {"started": 0, "cancelled": 0, "finished": 0}

    @tool(idempotent=True, dedupe=Dedupe())
    async def slow_async(order: str) -> str:
        """Ten seconds of work."""
        seen["started"] += 1
        try:
            await trio.sleep(10)
        except trio.Cancelled:
            seen["cancelled"] += 1
            raise
        seen["finished"] += 1
        return order

    @tool(idempotent=True, dedupe=Dedupe())
    def slow_sync(order: str) -> str:
        """Work that ends when told."""
        seen["started"] += 1
        release.wait(5)
        seen["finished"] += 1
        done.set()
        return order

    release, done = threading.Event(), threading.Event()
    name = "slow_sync" if sync else "slow_async"
    async with open_runtime([slow_async, slow_sync], tracing=False) as rt, trio.open_nursery() as nursery:

        async def gives_up() -> None:
            with trio.move_on_after(0.5):
                await rt.call(call("a", name, order="Q"))

        nursery.start_soon(gives_up)
        await trio.sleep(0.1)
        joined = await rt.call(call("b", name, order="Q"), timeout=1.0)
        assert isinstance(joined, ToolFailure)
        assert joined.kind is FailureKind.TIMEOUT
        await trio.sleep(0.1)
        if sync:
            stats = rt.statistics().tools[name]
            assert (stats.abandoned, stats.abandoned_running) == (1, 1)  # its thread runs on: counted
            release.set()
            assert await trio.to_thread.run_sync(done.wait, 5)  # real time: the thread's own
        else:
            assert seen == {"started": 1, "cancelled": 1, "finished": 0}
        assert seen["started"] == 1


@pytest.mark.parametrize("wait", [True, False])
async def test_a_budget_place_is_held_until_the_work_ends_not_until_its_caller_leaves(
    wait: bool, autojump_clock: trio.abc.Clock
) -> None:
    running = peak = 0

    @tool
    async def stubborn(x: int) -> int:
        """Ignores its cancellation for 1 s."""
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        try:
            with trio.CancelScope(shield=True):
                await trio.sleep(1)
        finally:
            running -= 1
        return x

    async with open_runtime([stubborn], budget=Budget(per_principal=1, wait=wait), tracing=False) as rt:
        with trio.move_on_after(0.1):
            await rt.call(call("1", "stubborn", x=1), principal="p")
        second = await rt.call(call("2", "stubborn", x=2), principal="p")
        assert peak == 1
        if wait:
            assert second.ok
            assert trio.current_time() == pytest.approx(2.0)  # it waited for the first's work to end
        else:
            assert isinstance(second, ToolFailure)
            assert second.kind is FailureKind.OVERLOADED


async def test_a_policy_before_the_cache_still_sees_every_call_hits_included(
    autojump_clock: trio.abc.Clock,
) -> None:
    """A hit may be answered at the entry only when nothing steps in before the cache."""
    seen: list[str] = []

    class Audit(Policy):
        def intercept(self, request: CallRequest) -> Any:
            seen.append(request.id)
            return (yield request)

    async with open_runtime(TOOLS, policies=[Audit()], tracing=False) as rt:
        for i in range(3):
            assert (await rt.call(call(str(i), "weather", city="Oslo"))).ok
        assert seen == ["0", "1", "2"]
        assert ran["weather"] == 1
        stats = rt.statistics().tools["weather"]
        assert (stats.calls, stats.succeeded, stats.cache_hits, stats.cache_misses) == (3, 3, 2, 1)


async def test_a_hit_answers_with_its_own_call_id_and_counts_like_any_call(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        first = await rt.call(call("a", "weather", city="Rome"), principal="ann")
        again = await rt.call(call("b", "weather", city="Rome"), principal="ann")
        assert isinstance(again, ToolSuccess)
        assert (again.call_id, again.tool, again.content) == ("b", "weather", first.content)
        other = await rt.call(call("c", "weather", city="Rome"), principal="bo")  # not ann's result
        assert other.content != first.content
        stats = rt.statistics().tools["weather"]
        assert (stats.calls, stats.succeeded, stats.cache_hits) == (3, 3, 1)


# -- a handed-over run, with the other policies and the runtime's end --------------------------

handed: Counter[str] = Counter()


@tool(idempotent=True, dedupe=Dedupe(ttl=0), retry=Retry(attempts=3, backoff=0.1, jitter=0))
async def blips_once(order: str) -> str:
    """UNAVAILABLE on its first run, then fine."""
    handed["blips_once"] += 1
    await trio.sleep(1)
    if handed["blips_once"] == 1:
        raise ToolUnavailable("backend blip")
    return f"ok {order} on run {handed['blips_once']}"


@tool(idempotent=True, dedupe=Dedupe(ttl=60))
async def journaled(order: str) -> str:
    """A side effect whose result is kept for replays."""
    handed["journaled"] += 1
    await trio.sleep(1)
    return f"done {order} #{handed['journaled']}"


@tool(idempotent=True, dedupe=Dedupe(ttl=0))
async def stubborn_run(order: str) -> str:
    """Ignores its cancellation for 10 s."""
    handed["stubborn_run"] += 1
    with trio.CancelScope(shield=True):
        await trio.sleep(10)
    return "done"


HANDED = [blips_once, journaled, stubborn_run, charge]


async def _leaves_at(rt: Any, c: ToolCall, after: float, timeout: float | None = None) -> None:
    with trio.move_on_after(after):
        await rt.call(c, timeout=timeout)


async def test_a_handed_over_run_that_fails_as_retry_would_retry_runs_again_for_the_waiting_call(
    autojump_clock: trio.abc.Clock,
) -> None:
    handed.clear()
    async with open_runtime(HANDED, tracing=False) as rt, trio.open_nursery() as nursery:
        nursery.start_soon(_leaves_at, rt, call("a", "blips_once", order="Z"), 0.5)
        await trio.sleep(0.1)
        joined = await rt.call(call("b", "blips_once", order="Z"))
        assert isinstance(joined, ToolSuccess), joined  # was the first run's UNAVAILABLE
        assert joined.value == "ok Z on run 2"


async def test_a_handed_over_run_keeps_its_deadline_and_its_timeout_is_the_waiting_calls_answer(
    autojump_clock: trio.abc.Clock,
) -> None:
    """The first caller (timeout 0.8 s) leaves at 0.5 s; its run goes on for the joined call until
    its deadline, whose TIMEOUT is the joined call's answer too (as when the first caller still
    waits): the side effect is not made a second time."""
    ran.clear()
    async with open_runtime(HANDED, tracing=False) as rt, trio.open_nursery() as nursery:
        nursery.start_soon(_leaves_at, rt, call("a", "charge", order="D", amount=1), 0.5, 0.8)
        await trio.sleep(0.1)
        joined = await rt.call(call("b", "charge", order="D", amount=1))
        assert isinstance(joined, ToolFailure)
        assert joined.kind is FailureKind.TIMEOUT
        assert trio.current_time() == pytest.approx(0.8)
        assert ran["charge"] == 1


async def test_a_handed_over_runs_result_is_journaled_for_replays(autojump_clock: trio.abc.Clock) -> None:
    handed.clear()
    async with open_runtime(HANDED, tracing=False) as rt, trio.open_nursery() as nursery:
        nursery.start_soon(_leaves_at, rt, call("a", "journaled", order="J"), 0.5)
        await trio.sleep(0.1)
        joined = await rt.call(call("b", "journaled", order="J"))
        await trio.sleep(2)
        replay = await rt.call(call("c", "journaled", order="J"))
        assert isinstance(joined, ToolSuccess)
        assert isinstance(replay, ToolSuccess)
        assert joined.value == replay.value == "done J #1"
        assert handed["journaled"] == 1
        assert rt.statistics().tools["journaled"].replayed == 1


async def test_a_handed_over_run_that_ignores_its_cancellation_is_counted_as_abandoned(
    autojump_clock: trio.abc.Clock,
) -> None:
    handed.clear()
    async with open_runtime(HANDED, tracing=False) as rt, trio.open_nursery() as nursery:
        nursery.start_soon(_leaves_at, rt, call("a", "stubborn_run", order="S"), 0.5)
        await trio.sleep(0.1)
        joined = await rt.call(call("b", "stubborn_run", order="S"), timeout=1.0)
        assert isinstance(joined, ToolFailure)
        assert joined.kind is FailureKind.TIMEOUT
        await trio.sleep(2)  # the run was cancelled when the joined call left, and runs on
        stats = rt.statistics().tools["stubborn_run"]
        assert (stats.abandoned, stats.abandoned_running) == (1, 1)
        await trio.sleep(10)
        assert rt.statistics().tools["stubborn_run"].abandoned_running == 0


async def test_closing_the_runtime_answers_the_calls_waiting_for_a_handed_over_run_that_runs_on(
    autojump_clock: trio.abc.Clock,
) -> None:
    handed.clear()
    answered: list[tuple[float, ToolResult]] = []
    async with trio.open_nursery() as nursery:
        async with open_runtime(HANDED, tracing=False, shutdown_timeout=1.0) as rt:

            async def waits() -> None:
                result = await rt.call(call("b", "stubborn_run", order="C"))
                answered.append((trio.current_time(), result))

            nursery.start_soon(_leaves_at, rt, call("a", "stubborn_run", order="C"), 0.5)
            await trio.sleep(0.1)
            nursery.start_soon(waits)
            await trio.sleep(1)
        closed = trio.current_time()
        assert len(answered) == 1
        at, result = answered[0]
        assert at <= closed  # answered as the runtime closed, not when the run ends (t=10.1)
        assert isinstance(result, ToolFailure)
        assert result.kind is FailureKind.UNAVAILABLE
        await trio.sleep(10)  # the abandoned run ends on its own: nothing of it is left after


async def test_an_asyncio_caller_that_gives_up_on_a_run_others_wait_for_is_answered_at_once() -> None:
    """From asyncio code: the first caller cancels; it is answered CANCELLED without waiting for
    the run it handed over (which goes on for 0.8 s more), and the joined call gets its result;
    the tool runs once."""
    ran.clear()

    async def main() -> tuple[float, Any]:
        loop = asyncio.get_running_loop()
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            first = asyncio.ensure_future(rt.call(call("a", "charge", order="AS", amount=1)))
            await asyncio.sleep(0.1)
            second = asyncio.ensure_future(rt.call(call("b", "charge", order="AS", amount=1)))
            await asyncio.sleep(0.1)
            first.cancel()
            started = loop.time()
            with contextlib.suppress(asyncio.CancelledError):
                await first
            left_after = loop.time() - started
            return left_after, await second

    left_after, joined = await trio.to_thread.run_sync(asyncio.run, main())
    assert left_after < 0.5  # the run it left ends 0.8 s later: it did not wait for that
    assert isinstance(joined, ToolSuccess)
    assert joined.value == "charged 1 for AS (#1)"
    assert ran["charge"] == 1
