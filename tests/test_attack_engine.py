"""Attacks on the engine's one end (issue 41) and what it promises every exit: each test here
names a promise that a hostile try broke on main (each failed before its fix).

Each was written from the promise (DESIGN.md sections 1, 3.5, 3.11), not from the code's own
tests: the redaction that must hold on every exit, the features' hooks and the counters that
hear every call exactly once, a view of a view, a breaker that opens for a hung server and
never stays half-open for good.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Iterator
from typing import Any

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
    Feature,
    Policy,
    RateLimit,
    ToolCall,
    ToolFailure,
    open_runtime,
    tool,
)
from runtime.tracing import GEN_AI_TOOL_CALL_ARGUMENTS, Tracing

SECRET = "sk-live-SEKRIT"


# -- helpers -------------------------------------------------------------------------------------


class Spans:
    """The real OpenTelemetry SDK, spans kept in memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def tracing(self) -> Tracing:
        return Tracing(self.provider, record_arguments=True, record_results=True)

    def arguments(self) -> list[str]:
        return [
            str(s.attributes.get(GEN_AI_TOOL_CALL_ARGUMENTS))
            for s in self.exporter.get_finished_spans()
            if s.attributes is not None and GEN_AI_TOOL_CALL_ARGUMENTS in s.attributes
        ]

    def leaked(self) -> list[str]:
        return [a for a in self.arguments() if SECRET in a]


class Redact(Policy):
    """Keeps `api_key` off every span: the runtime-wide, outermost policy."""

    def intercept(self, request: CallRequest) -> Iterator[Any]:
        result = yield request.redact("api_key")
        return result


class Refuse(Policy):
    """Refuses every call (an allow-list, an auth check), inside the redaction."""

    def intercept(self, request: CallRequest) -> Iterator[Any]:
        return request.reject("not allowed")
        yield  # a generator


class Hear(Feature):
    """Counts each hook per call id."""

    def __init__(self) -> None:
        self.starting: collections.Counter[str] = collections.Counter()
        self.ended: collections.Counter[str] = collections.Counter()

    async def on_call_starting(self, call: ToolCall, ctx: Any) -> None:
        self.starting[call.id] += 1

    async def on_call_completed(self, call: ToolCall, result: Any, ctx: Any) -> None:
        self.ended[call.id] += 1

    async def on_call_failed(self, call: ToolCall, failure: Any, ctx: Any) -> None:
        self.ended[call.id] += 1


class Count(Policy):
    """Counts each half per call id."""

    def __init__(self) -> None:
        self.before: collections.Counter[str] = collections.Counter()
        self.after: collections.Counter[str] = collections.Counter()

    def intercept(self, request: CallRequest) -> Iterator[Any]:
        self.before[request.id] += 1
        result = yield request
        self.after[request.id] += 1
        return result


def C(call_id: str, name: str, arguments: str) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


# -- redaction on every exit ---------------------------------------------------------------------


@tool
def login(user: str, api_key: str) -> str:
    return user


@tool(cache=Cache(ttl=60), read_only=True)
def lookup(q: str, api_key: str) -> str:
    return q


@tool(dedupe=Dedupe(ttl=60))
def charge(amount: int, api_key: str) -> int:
    return amount


async def test_a_redacted_field_stays_off_the_span_when_an_inner_policy_refuses_the_call() -> None:
    spans = Spans()
    async with open_runtime([login], policies=[Redact(), Refuse()], tracing=spans.tracing()) as rt:
        result = await rt.call(C("c1", "login", f'{{"user":"bob","api_key":"{SECRET}"}}'))
    assert isinstance(result, ToolFailure)
    assert result.kind is FailureKind.REJECTED
    assert spans.arguments(), "the call has a span with its arguments"
    assert spans.leaked() == []


async def test_a_redacted_field_stays_off_the_span_of_a_cache_hit() -> None:
    spans = Spans()
    async with open_runtime([lookup], policies=[Redact()], tracing=spans.tracing()) as rt:
        for i in range(2):  # the second is a hit
            result = await rt.call(C(f"c{i}", "lookup", f'{{"q":"x","api_key":"{SECRET}"}}'))
            assert result.ok
        assert rt.statistics().tools["lookup"].cache_hits == 1
    assert len(spans.arguments()) == 2
    assert spans.leaked() == []


async def test_a_redacted_field_stays_off_the_span_of_a_dedupe_replay() -> None:
    spans = Spans()
    async with open_runtime([charge], policies=[Redact()], tracing=spans.tracing()) as rt:
        for i in range(2):  # the second is replayed from the journal
            result = await rt.call(C(f"c{i}", "charge", f'{{"amount":5,"api_key":"{SECRET}"}}'))
            assert result.ok
        assert rt.statistics().tools["charge"].replayed == 1
    assert len(spans.arguments()) == 2
    assert spans.leaked() == []


async def test_a_redacted_field_stays_off_the_span_of_a_call_over_its_rate_limit() -> None:
    spans = Spans()
    async with open_runtime(
        [login],
        policies=[Redact()],
        budget=Budget(rate=RateLimit(rate=0.001, burst=1)),
        tracing=spans.tracing(),
    ) as rt:
        results = [
            await rt.call(C(f"c{i}", "login", f'{{"user":"bob","api_key":"{SECRET}"}}'), principal="eve")
            for i in range(2)
        ]
    assert results[0].ok
    assert isinstance(results[1], ToolFailure)
    assert results[1].kind is FailureKind.OVERLOADED
    assert len(spans.arguments()) == 2
    assert spans.leaked() == []


async def test_a_redacted_field_stays_off_the_span_when_the_call_is_sent_to_a_missing_tool() -> None:
    class RedactAndSend(Policy):
        def intercept(self, request: CallRequest) -> Iterator[Any]:
            result = yield request.redact("api_key").replace(tool="login_v2")
            return result

    spans = Spans()
    async with open_runtime([login], policies=[RedactAndSend()], tracing=spans.tracing()) as rt:
        result = await rt.call(C("c1", "login", f'{{"user":"bob","api_key":"{SECRET}"}}'))
    assert isinstance(result, ToolFailure)
    assert result.kind is FailureKind.UNKNOWN_TOOL
    assert spans.arguments()
    assert spans.leaked() == []


# -- views -------------------------------------------------------------------------------------


@tool
def add(a: int, b: int) -> int:
    return a + b


async def test_a_view_of_a_principal_only_view_answers_its_calls_and_lists_its_tools() -> None:
    async with open_runtime([add]) as rt:
        with rt.scoped(principal="alice") as request, request.scoped(exclude=["delete_*"]) as narrowed:
            assert [s["function"]["name"] for s in narrowed.schemas("openai")] == ["add"]
            result = await narrowed.call(C("c1", "add", '{"a":1,"b":2}'))
    assert result.ok
    assert result.value == 3


# -- every exit heard once: counters, policies' after-halves, features --------------------------


@tool
async def wait_long(n: float) -> int:
    await trio.sleep(n)
    return 1


async def test_every_call_of_a_cancelled_batch_is_counted_and_heard_by_its_policies(
    autojump_clock: trio.abc.Clock,
) -> None:
    class Audit(Feature):
        """An audit log over the network: each failure takes a tenth of a second to send."""

        async def on_call_failed(self, call: ToolCall, failure: Any, ctx: Any) -> None:
            await trio.sleep(0.1)

    count = Count()
    async with open_runtime([wait_long], features=[Audit()], policies=[count]) as rt:
        with trio.move_on_after(0.5):
            await rt.call_many([C(f"c{i}", "wait_long", '{"n":10}') for i in range(30)])
        await trio.sleep(5)
        stats = rt.statistics().tools["wait_long"]
    assert stats.in_flight == 0
    assert stats.failures == {"cancelled": 30}
    assert stats.calls == 30
    assert sum(count.after.values()) == 30


async def test_a_call_cancelled_while_its_policy_awaits_is_heard_starting_and_ending_once(
    autojump_clock: trio.abc.Clock,
) -> None:
    class Approve(Policy):
        """Asks someone before the call goes on (an approval, a store read)."""

        suspends = True

        def intercept(self, request: CallRequest) -> Iterator[Any]:
            yield trio.sleep(1)  # noqa: ASYNC105 - the flow yields it; the engine awaits it
            result = yield request
            return result

    hear = Hear()
    async with open_runtime([wait_long], features=[hear], policies=[Approve()]) as rt:
        with trio.move_on_after(0.5):
            await rt.call(C("c1", "wait_long", '{"n":0}'))
        with trio.move_on_after(0.5):
            await rt.call_many([C("c2", "wait_long", '{"n":0}'), C("c3", "wait_long", '{"n":0}')])
        assert rt.statistics().tools["wait_long"].failures == {"cancelled": 3}
    assert dict(hear.ended) == {"c1": 1, "c2": 1, "c3": 1}
    assert dict(hear.starting) == {"c1": 1, "c2": 1, "c3": 1}


# -- breakers: opened by a hung server, never half-open for good ---------------------------------


async def test_a_sync_tool_that_hangs_past_its_own_timeout_opens_its_breaker(
    autojump_clock: trio.abc.Clock,
) -> None:
    hung = threading.Event()

    @tool(timeout=0.5, breaker=CircuitBreaker(failures=2, cool_down=5))
    def fetch(n: int) -> int:
        hung.wait(60)  # a server that accepted the connection and never answers
        return n

    try:
        async with open_runtime([fetch]) as rt:
            results = [await rt.call(C(f"c{i}", "fetch", '{"n":1}')) for i in range(4)]
            kinds = [r.kind for r in results if isinstance(r, ToolFailure)]
            threads = rt.statistics().tools["fetch"].threads
            hung.set()
    finally:
        hung.set()
    assert kinds[:2] == [FailureKind.TIMEOUT, FailureKind.TIMEOUT]
    # the breaker opened after two timeouts: the next calls are refused at once, no thread taken
    assert kinds[2:] == [FailureKind.UNAVAILABLE, FailureKind.UNAVAILABLE]
    assert threads == 2


async def test_a_breaker_whose_probe_hangs_probes_again_after_its_cool_down(
    autojump_clock: trio.abc.Clock,
) -> None:
    from runtime import ToolUnavailable

    answers = trio.Event()
    server = ["down"]

    @tool(timeout=0.5, breaker=CircuitBreaker(failures=2, cool_down=1))
    async def fetch(n: int) -> int:
        if server[0] == "down":
            raise ToolUnavailable("connection refused")
        if server[0] == "hung":
            with trio.CancelScope(shield=True):  # a client library that does not stop when cancelled
                await answers.wait()
        return n

    async with open_runtime([fetch]) as rt:
        try:
            for i in range(2):
                await rt.call(C(f"c{i}", "fetch", '{"n":1}'))
            assert rt.statistics().tools["fetch"].breaker == "open"
            await trio.sleep(1.1)
            server[0] = "hung"
            probe = await rt.call(C("probe", "fetch", '{"n":1}'))  # answered TIMEOUT; its work hangs
            assert isinstance(probe, ToolFailure)
            assert probe.kind is FailureKind.TIMEOUT
            server[0] = "up"  # the server is back
            later = []
            for i in range(4):
                await trio.sleep(1.1)  # a cool-down each time
                later.append(await rt.call(C(f"d{i}", "fetch", '{"n":1}')))
        finally:
            answers.set()
    assert any(r.ok for r in later), [getattr(r, "message", "") for r in later]


# -- callers: a RuntimeThread serves every thread, whatever one caller's loop does ---------------


def test_a_runtime_thread_outlives_asyncio_callers_that_give_up_and_close_their_loop() -> None:
    import asyncio

    from runtime.embed import RuntimeThread

    async def handler(rt: RuntimeThread) -> None:
        """A sync web handler's bit of async code (`asyncio.run` per request): it gives up."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(rt.aio.call_many([C("s1", "wait_long", '{"n":5}')]), 0.05)

    with RuntimeThread([wait_long, add]) as rt:
        for _ in range(20):
            asyncio.run(handler(rt))  # the loop closes right after the caller gave up (a race: 20 tries)
        result = rt.call(C("c1", "add", '{"a":1,"b":2}'))
    assert result.ok


# -- a call sent to another tool by a policy meets that tool's own policies ----------------------


async def test_a_call_a_policy_sends_to_another_tool_meets_that_tools_own_policies() -> None:
    class Route(Policy):
        """A versioning shim: `login` is served by `login_v2` now."""

        def intercept(self, request: CallRequest) -> Iterator[Any]:
            if request.tool_name == "login":
                return (yield request.replace(tool="login_v2"))
            return (yield request)

    ran: list[str] = []

    @tool(policies=[Redact()], rate_limit=RateLimit(rate=0.001, burst=1))
    def login_v2(user: str, api_key: str) -> str:
        ran.append(user)
        return user

    spans = Spans()
    async with open_runtime([login, login_v2], policies=[Route()], tracing=spans.tracing()) as rt:
        results = [
            await rt.call(C(f"c{i}", "login", f'{{"user":"u{i}","api_key":"{SECRET}"}}')) for i in range(2)
        ]
    assert spans.leaked() == []  # login_v2's own redaction
    assert ran == ["u0"]  # login_v2's own rate limit: one call, then OVERLOADED
    assert isinstance(results[1], ToolFailure)
    assert results[1].kind is FailureKind.OVERLOADED


# -- a late result is journaled whatever ran the tool --------------------------------------------


async def test_a_late_charge_of_a_tool_that_asks_approval_is_journaled_and_replayed_without_running() -> None:
    from runtime import Answer

    provider_answers = threading.Event()
    finished = threading.Event()
    charged: list[str] = []

    @tool(dedupe=Dedupe(ttl=600), requires_approval=True, timeout=0.2)
    def pay(order: str) -> str:
        provider_answers.wait(10)  # the payment provider is slow today
        charged.append(order)
        finished.set()
        return f"charged {order}"

    async def approve(question: Any) -> Answer:
        return Answer.accept()

    try:
        async with open_runtime([pay], on_elicit=approve) as rt:
            first = await rt.call(C("c1", "pay", '{"order":"o-1"}'), principal="alice")
            assert isinstance(first, ToolFailure)
            assert first.kind is FailureKind.TIMEOUT
            provider_answers.set()  # its thread completes the charge after all
            await trio.to_thread.run_sync(finished.wait, 10)
            await trio.sleep(0.1)
            replay = await rt.call(C("c2", "pay", '{"order":"o-1"}'), principal="alice")  # the model retries
            await trio.sleep(0.1)
    finally:
        provider_answers.set()
    assert charged == ["o-1"]
    assert replay.ok
    assert replay.content == "charged o-1"


async def test_a_redacted_field_stays_off_the_span_of_a_call_to_an_unknown_or_hidden_tool() -> None:
    spans = Spans()
    async with open_runtime([login], policies=[Redact()], tracing=spans.tracing()) as rt:
        typo = await rt.call(C("c1", "logn", f'{{"user":"bob","api_key":"{SECRET}"}}'))  # the model's typo
        with rt.scoped(principal="bob", exclude=["login"]) as view:
            hidden = await view.call(C("c2", "login", f'{{"user":"bob","api_key":"{SECRET}"}}'))
    assert isinstance(typo, ToolFailure)
    assert typo.kind is FailureKind.UNKNOWN_TOOL
    assert isinstance(hidden, ToolFailure)
    assert hidden.kind is FailureKind.UNKNOWN_TOOL
    assert len(spans.arguments()) == 2
    assert spans.leaked() == []
