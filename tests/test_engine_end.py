"""One end: every way a call finishes passes one place, which tells the policies' after-halves
(redaction included), the breaker, the dedupe journal, the counters and the features, exactly
once each (DESIGN.md section 1, "One end").

The exits: settled before it runs (bad arguments), returned, raised, timed out, cancelled by its
caller, abandoned (its code ignores cancellation), late after its caller left, and a retry's
failed attempt. A late result is still late (the caller has its answer), but what its work did
happened: the breaker and the journal hear it.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter
from typing import Any

import pytest
import trio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runtime import (
    CallContext,
    CallRequest,
    CircuitBreaker,
    Dedupe,
    FailureKind,
    Feature,
    Policy,
    RateLimit,
    Retry,
    ToolCall,
    ToolFailure,
    ToolSuccess,
    open_runtime,
    tool,
)
from runtime.exceptions import ToolUnavailable
from runtime.tracing import Tracing

heard: Counter[tuple[str, str]] = Counter()
ran: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _fresh() -> None:
    heard.clear()
    ran.clear()


def call(call_id: str, name: str, arguments: Any = None) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=json.dumps(arguments or {}))


class Counting(Policy):
    """Counts its before-half and its after-half per call id."""

    def intercept(self, request: CallRequest) -> Any:
        heard["before", request.id] += 1
        result = yield request
        heard["after", request.id] += 1
        return result


class Hearing(Feature):
    """Counts the features' hooks per call id."""

    async def on_call_starting(self, call: ToolCall, ctx: CallContext) -> None:
        heard["starting", call.id] += 1

    async def on_call_completed(self, call: ToolCall, result: ToolSuccess[Any], ctx: CallContext) -> None:
        heard["finished", call.id] += 1

    async def on_call_failed(self, call: ToolCall, failure: ToolFailure, ctx: CallContext) -> None:
        heard["finished", call.id] += 1


@tool
async def plain(n: int) -> int:
    """Return n."""
    await trio.lowlevel.checkpoint()
    if n < 0:
        raise ValueError("negative")
    return n


@tool(timeout=1.0)
async def slow() -> str:
    """Sleep past its timeout."""
    await trio.sleep(10)
    return "never"


@tool
async def stubborn() -> str:
    """Ignores its cancellation for a while."""
    with trio.CancelScope(shield=True):
        await trio.sleep(2)
    return "late"


attempts: Counter[str] = Counter()


@tool(idempotent=True, retry=Retry(attempts=2, backoff=0.1, jitter=0, on=("unavailable",)))
async def flaky() -> str:
    """Fails its first attempt."""
    attempts["flaky"] += 1
    await trio.lowlevel.checkpoint()
    if attempts["flaky"] == 1:
        raise ToolUnavailable("first attempt")
    return "second"


EXITS: dict[str, tuple[ToolCall, float | None, str]] = {
    "settled before it runs": (call("bad", "plain", {"n": "x"}), None, "invalid_arguments"),
    "returned": (call("ok", "plain", {"n": 1}), None, "ok"),
    "raised": (call("err", "plain", {"n": -1}), None, "error"),
    "timed out": (call("slow", "slow"), None, "timeout"),
    "abandoned": (call("stub", "stubborn"), 0.5, "timeout"),
    "a retry's failed attempt": (call("flaky", "flaky"), None, "ok"),
}


@pytest.mark.parametrize("exit", list(EXITS))
async def test_each_exit_is_heard_once_by_the_policies_the_features_and_the_counters(
    exit: str, autojump_clock: trio.abc.Clock
) -> None:
    attempts.clear()
    the_call, timeout, outcome = EXITS[exit]
    async with open_runtime(
        [plain, slow, stubborn, flaky], policies=[Counting()], features=[Hearing()], tracing=False
    ) as rt:
        result = await rt.call(the_call, timeout=timeout)
        assert ("ok" if result.ok else result.kind.value) == outcome
        await trio.sleep(5)  # virtual time: whatever still ran has ended
        stats = rt.statistics().tools[the_call.name]
    assert heard == Counter(
        {
            ("before", the_call.id): 1,
            ("after", the_call.id): 1,
            ("starting", the_call.id): 1,
            ("finished", the_call.id): 1,
        }
    )
    assert stats.calls == 1
    assert stats.in_flight == 0


async def test_a_cancelled_caller_is_heard_once_by_every_hook(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime([slow], policies=[Counting()], features=[Hearing()], tracing=False) as rt:
        with trio.move_on_after(0.3):
            await rt.call(call("c", "slow"))
        await trio.sleep(5)
        stats = rt.statistics().tools["slow"]
    assert set(heard.values()) == {1}
    assert len(heard) == 4
    assert (stats.calls, stats.failures) == (1, {"cancelled": 1})


# -- redaction on every exit ----------------------------------------------------------------------


@tool
async def login(user: str, api_key: str) -> str:
    """Sign in."""
    return f"hello {user}"


class HideKey(Policy):
    def intercept(self, request: CallRequest) -> Any:
        return (yield request.redact("api_key"))


BAD_ARGUMENTS = {
    "a wrong-typed other field": json.dumps({"user": 5, "api_key": "hunter2-secret"}),
    "an unknown field": json.dumps({"user": "ann", "api_key": "hunter2-secret", "extra": 1}),
    "truncated JSON": '{"user": "ann", "api_key": "hunter2-secret"',
    "a missing field": json.dumps({"api_key": "hunter2-secret"}),
}


@pytest.mark.parametrize("case", list(BAD_ARGUMENTS))
async def test_a_redacted_field_stays_off_the_span_of_a_call_with_bad_arguments(case: str) -> None:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    tracing = Tracing(tracer_provider=provider, record_arguments=True, record_results=True)
    async with open_runtime([login], policies=[HideKey()], tracing=tracing) as rt:
        result = await rt.call(ToolCall(id="1", name="login", arguments=BAD_ARGUMENTS[case]))
        good = await rt.call(call("2", "login", {"user": "ann", "api_key": "hunter2-secret"}))
    assert isinstance(result, ToolFailure)
    assert result.kind is FailureKind.INVALID_ARGUMENTS
    assert good.ok
    finished = spans.get_finished_spans()
    assert len(finished) == 2
    assert "hunter2" not in repr([s.to_json() for s in finished])


# -- the breaker hears every attempt, late ones and ones that never ran --------------------------

backend_mode = {"mode": "ok"}


@tool(breaker=CircuitBreaker(failures=1, cool_down=5))
async def backend() -> str:
    """A backend that can be down or hang."""
    ran["backend"] += 1
    mode = backend_mode["mode"]
    if mode == "down":
        raise ToolUnavailable("connection refused")
    if mode == "hang":
        await trio.sleep(100)
    return "fine"


async def test_a_half_open_probe_whose_caller_gives_up_lets_the_next_call_probe(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with open_runtime([backend], tracing=False) as rt:
        backend_mode["mode"] = "down"
        assert not (await rt.call(call("1", "backend"))).ok
        assert rt.statistics().tools["backend"].breaker == "open"
        await trio.sleep(5)  # its cool-down: the next call probes
        backend_mode["mode"] = "hang"
        with trio.move_on_after(1):
            await rt.call(call("probe", "backend"))  # its caller gives up
        backend_mode["mode"] = "ok"
        results = []
        for i in range(8):  # one cool-down after another: some call gets to probe
            results.append(await rt.call(call(f"after{i}", "backend")))
            if results[-1].ok:
                break
            await trio.sleep(5)
        assert results[-1].ok, results
        assert rt.statistics().tools["backend"].breaker == "closed"


@tool(breaker=CircuitBreaker(failures=1, cool_down=5), rate_limit=RateLimit(rate=0.1, burst=1))
async def limited_backend() -> str:
    """A backend behind a rate limit (inside the breaker)."""
    ran["limited"] += 1
    if backend_mode["mode"] == "down":
        raise ToolUnavailable("connection refused")
    return "fine"


async def test_a_probe_refused_by_a_rate_limit_inside_the_breaker_gives_its_turn_back(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with open_runtime([limited_backend], tracing=False) as rt:
        backend_mode["mode"] = "down"
        assert not (await rt.call(call("1", "limited_backend"))).ok  # takes the one token
        await trio.sleep(5)  # the breaker's cool-down, not the rate limit's 10 s
        backend_mode["mode"] = "ok"
        refused = await rt.call(call("probe", "limited_backend"))
        assert isinstance(refused, ToolFailure)
        assert refused.kind is FailureKind.OVERLOADED  # the rate limit answered the probe
        await trio.sleep(6)  # a token again
        after = await rt.call(call("after", "limited_backend"))
        assert after.ok, after  # the breaker let another call probe
        assert rt.statistics().tools["limited_backend"].breaker == "closed"


# -- a late success is journaled: a replay does not run the tool again ----------------------------

release = threading.Event()
charged: list[str] = []


@tool(timeout=0.2, idempotent=True, dedupe=Dedupe(ttl=60))
def charge(order: str) -> str:
    """Charge an order (a sync tool that outlives its timeout)."""
    release.wait(10)
    charged.append(order)
    return f"charged {order}"


async def test_a_late_success_is_journaled_and_a_replay_does_not_run_again() -> None:
    release.clear()
    charged.clear()
    async with open_runtime([charge], tracing=False) as rt:
        first = await rt.call(call("1", "charge", {"order": "A"}))
        assert isinstance(first, ToolFailure)
        assert first.kind is FailureKind.TIMEOUT
        release.set()
        with trio.fail_after(10):
            while not charged or rt.statistics().tools["charge"].abandoned_running:  # noqa: ASYNC110
                await trio.sleep(0.01)  # real time: the thread's own
        await trio.sleep(0.05)
        replay = await rt.call(call("2", "charge", {"order": "A"}))
    assert charged == ["A"]  # the side effect ran once
    assert isinstance(replay, ToolSuccess), replay
    assert replay.value == "charged A"


async def test_a_cancelled_batch_whose_hooks_hang_is_counted_within_one_hook_grace(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """A policy's after-half and a failure hook that never end (an audit sink that hangs) cost
    the cancelled caller one HOOK_GRACE for the whole batch, and each call is counted all the
    same."""
    from runtime.engine.lowlevel import HOOK_GRACE

    class Hang(Feature):
        async def on_call_failed(self, call: ToolCall, failure: Any, ctx: Any) -> None:
            await trio.sleep_forever()

    class HangAfter(Policy):
        """Writes each outcome to a store that stopped answering."""

        suspends = True

        def intercept(self, request: CallRequest) -> Any:
            result = yield request
            yield trio.sleep_forever()  # noqa: ASYNC105 - the flow yields it; the engine awaits it
            return result

    @tool
    async def slow() -> int:
        await trio.sleep(100)
        return 1

    caplog.set_level(logging.WARNING, logger="runtime.engine")
    async with open_runtime([slow], features=[Hang()], policies=[HangAfter()]) as rt:
        with trio.move_on_after(0.5):
            await rt.call_many([ToolCall(id=f"c{i}", name="slow", arguments="{}") for i in range(20)])
        cancelled_at = trio.current_time()
        stats = rt.statistics().tools["slow"]
    assert cancelled_at - 0.5 <= HOOK_GRACE + 0.01
    assert stats.calls == 20
    assert stats.failures == {"cancelled": 20}
    assert stats.in_flight == 0
    assert "20 cancelled call(s)" in caplog.text


class Fallback(Policy):
    """Answers every failed call with a value of its own (a runtime-wide fallback)."""

    def intercept(self, request: CallRequest) -> Any:
        result = yield request
        if isinstance(result, ToolFailure):
            return request.answer(0)
        return result


async def test_a_call_to_no_tool_keeps_its_answer_when_a_policy_answers_it(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    # A call that reaches no tool has a plan too (`Nowhere`): a runtime-wide policy that answers
    # its failure with a value of its own meets no tool to shape that value, so the call keeps its
    # UNKNOWN_TOOL answer, and nothing in the engine breaks (it was an assertion before).
    async with open_runtime([plain], policies=[Fallback()]) as rt:
        typo = await rt.call(call("typo", "plian", {"n": 1}))
        fell_back = await rt.call(call("err", "plain", {"n": -1}))
    assert isinstance(typo, ToolFailure)
    assert typo.kind is FailureKind.UNKNOWN_TOOL
    assert "plain" in typo.message  # the closest name, as always
    assert isinstance(fell_back, ToolSuccess)
    assert fell_back.value == 0
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
