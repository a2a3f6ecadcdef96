"""Call policies (DESIGN.md 3.11): principals, per-request views, and interceptors that refuse,
rewrite, answer, wrap or transform a call, on every caller (trio, asyncio, a RuntimeThread)."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import msgspec
import pytest
import trio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runtime import (
    CallContext,
    CallRequest,
    FailureKind,
    Policy,
    ToolCall,
    ToolResult,
    ToolSuccess,
    open_runtime,
    tool,
)
from runtime.embed import RuntimeThread, open_asyncio_runtime
from runtime.exceptions import RuntimeClosed
from runtime.schema import ToolDescriptor
from runtime.tracing import GEN_AI_TOOL_CALL_ARGUMENTS, PRINCIPAL, Tracing

ran: Counter[str] = Counter()


def call(call_id: str, name: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=json.dumps(arguments))


@tool(tags=["money"])
async def pay(amount: int, ctx: CallContext) -> str:
    """Pay an amount."""
    ran["pay"] += 1
    await trio.lowlevel.checkpoint()
    return f"paid {amount} for {ctx.principal}"


@tool(tags=["money"])
async def pay_v2(amount: int, ctx: CallContext) -> str:
    """Pay an amount (the new version)."""
    ran["pay_v2"] += 1
    return f"v2 paid {amount} for {ctx.principal}"


@tool
def lookup(key: str) -> str:
    """Look a key up (a sync tool)."""
    ran["lookup"] += 1
    return key.upper()


@tool
async def login(user: str, password: str) -> str:
    """Sign in."""
    ran["login"] += 1
    return f"hello {user} ({len(password)})"


@tool(timeout=0.5)
async def hang() -> None:
    """Never returns."""
    await trio.sleep_forever()


TOOLS = [pay, pay_v2, lookup, login, hang]


@pytest.fixture(autouse=True)
def _count() -> None:
    ran.clear()


# -- policies used below ----------------------------------------------------------------------


class DenyEve(Policy):
    def intercept(self, request: CallRequest) -> Any:
        if request.principal == "eve":
            return request.reject("eve may not call tools")
        result = yield request
        return result


class Double(Policy):
    """Rewrites `amount` (the tool decodes the new arguments)."""

    def intercept(self, request: CallRequest) -> Any:
        if request.tool_name != "pay":
            return (yield request)
        result = yield request.replace(arguments={"amount": request.args.amount * 2})
        return result


class Recorder(Policy):
    """Wraps every call: sees what it was and how it ended."""

    def __init__(self, label: str, log: list[tuple[str, str, str]]) -> None:
        self.label = label
        self.log = log

    @property
    def name(self) -> str:
        return self.label

    def intercept(self, request: CallRequest) -> Any:
        self.log.append((self.label, "before", request.id))
        result: ToolResult = yield request
        self.log.append((self.label, "after", "ok" if result.ok else result.kind.value))
        return result


class Suspending(Policy):
    """Awaits before and after the call (a store, a person): its calls go through a trio task."""

    suspends = True

    def intercept(self, request: CallRequest) -> Any:
        yield trio.lowlevel.checkpoint()  # noqa: ASYNC105 - the engine awaits what a flow yields
        result: ToolResult = yield request
        yield trio.lowlevel.checkpoint()  # noqa: ASYNC105
        return result


# -- interceptors on the trio runtime -----------------------------------------------------------


async def test_a_policy_refuses_a_principal_and_the_tool_never_runs() -> None:
    async with open_runtime(TOOLS, policies=[DenyEve()], tracing=False) as rt:
        refused = await rt.call(call("1", "pay", amount=3), principal="eve")
        allowed = await rt.call(call("2", "pay", amount=3), principal="bob")
    assert refused.kind is FailureKind.REJECTED
    assert refused.message == "eve may not call tools"
    assert (refused.call_id, refused.tool) == ("1", "pay")
    assert allowed.ok
    assert allowed.value == "paid 3 for bob"
    assert ran["pay"] == 1


async def test_rewritten_arguments_are_decoded_again_and_a_bad_rewrite_is_invalid_arguments() -> None:
    class Breaks(Policy):
        def intercept(self, request: CallRequest) -> Any:
            return (yield request.replace(arguments='{"amount": "lots"}'))

    async with open_runtime(TOOLS, policies=[Double()], tracing=False) as rt:
        doubled = await rt.call(call("1", "pay", amount=3), principal="bob")
    async with open_runtime(TOOLS, policies=[Breaks()], tracing=False) as rt:
        broken = await rt.call(call("2", "pay", amount=3))
    assert doubled.ok
    assert doubled.value == "paid 6 for bob"
    assert broken.kind is FailureKind.INVALID_ARGUMENTS
    assert "amount" in broken.message
    assert ran["pay"] == 1


async def test_a_policy_routes_a_principal_to_another_version_of_a_tool() -> None:
    class Canary(Policy):
        def intercept(self, request: CallRequest) -> Any:
            if request.tool_name == "pay" and request.principal in {"beta-1", "beta-2"}:
                request = request.replace(tool="pay_v2")
            return (yield request)

    async with open_runtime(TOOLS, policies=[Canary()], tracing=False) as rt:
        beta = await rt.call(call("1", "pay", amount=1), principal="beta-1")
        other = await rt.call(call("2", "pay", amount=1), principal="gamma")
    assert beta.ok
    assert beta.value == "v2 paid 1 for beta-1"
    assert beta.tool == "pay"  # the model's call keeps its name: it asked for `pay`
    assert other.ok
    assert other.value == "paid 1 for gamma"
    assert (ran["pay"], ran["pay_v2"]) == (1, 1)


async def test_a_policy_answers_a_call_without_running_its_tool() -> None:
    class Fixture(Policy):
        def intercept(self, request: CallRequest) -> Any:
            if request.tool_name == "lookup":
                return request.answer(f"fixture for {request.args.key}")
            return (yield request)

    async with open_runtime(TOOLS, policies=[Fixture()], tracing=False) as rt:
        answered = await rt.call(call("1", "lookup", key="k"))
        many = await rt.call_many([call(f"m{i}", "lookup", key=str(i)) for i in range(5)])
    assert answered.ok
    assert answered.value == "fixture for k"
    assert answered.content == "fixture for k"
    assert [r.value for r in many] == [f"fixture for {i}" for i in range(5)]
    assert ran["lookup"] == 0


async def test_policies_wrap_outermost_first_and_see_every_outcome_once(
    autojump_clock: trio.abc.Clock,
) -> None:
    log: list[tuple[str, str, str]] = []
    outer, inner = Recorder("outer", log), Recorder("inner", log)
    own = Recorder("own", log)
    wrapped = tool(hang.fn, name="hang", timeout=0.2, policies=[own])
    async with open_runtime([pay, wrapped], policies=[outer, inner], tracing=False) as rt:
        ok = await rt.call(call("1", "pay", amount=1))
        timed_out = await rt.call(call("2", "hang"))
    assert ok.ok
    assert timed_out.kind is FailureKind.TIMEOUT
    assert log == [
        ("outer", "before", "1"),
        ("inner", "before", "1"),
        ("inner", "after", "ok"),
        ("outer", "after", "ok"),
        ("outer", "before", "2"),
        ("inner", "before", "2"),
        ("own", "before", "2"),  # the tool's own policies run inside the runtime's
        ("own", "after", "timeout"),
        ("inner", "after", "timeout"),
        ("outer", "after", "timeout"),
    ]


async def test_a_policy_transforms_a_result_and_applies_only_where_it_says() -> None:
    class Shout(Policy):
        def applies(self, tool: Any) -> bool:
            return tool.name == "lookup"

        def intercept(self, request: CallRequest) -> Any:
            result: ToolResult = yield request
            if result.ok:
                return request.answer(f"{result.value}!")
            return result

    async with open_runtime(TOOLS, policies=[Shout()], tracing=False) as rt:
        shouted = await rt.call(call("1", "lookup", key="a"))
        plain = await rt.call(call("2", "pay", amount=1))
    assert shouted.ok
    assert shouted.value == "A!"
    assert plain.ok
    assert plain.value == "paid 1 for None"


@pytest.mark.parametrize(
    ("flow", "words"),
    [
        ("raise", "policy Broken raised RuntimeError: no"),
        ("twice", "yielded the call again"),
        ("not_a_result", "returned int, not a ToolResult"),
        ("answer_not_a_result", "answered str, not a ToolResult"),
    ],
)
async def test_a_broken_policy_is_that_calls_error_and_nothing_else(flow: str, words: str) -> None:
    class Broken(Policy):
        def intercept(self, request: CallRequest) -> Any:
            if request.id != "bad":
                return (yield request)
            if flow == "raise":
                raise RuntimeError("no")
            if flow == "answer_not_a_result":
                return "a string"
            yield request
            if flow == "twice":
                yield request
            return 42

    async with open_runtime(TOOLS, policies=[Broken()], tracing=False) as rt:
        results = await rt.call_many([call("good", "lookup", key="a"), call("bad", "lookup", key="b")])
        after = await rt.call(call("later", "lookup", key="c"))
    good, bad = results
    assert good.ok
    assert good.value == "A"
    assert bad.kind is FailureKind.ERROR
    assert words in bad.message
    assert (bad.call_id, bad.tool) == ("bad", "lookup")
    assert after.ok


async def test_a_suspending_policy_awaits_and_a_batch_runs_its_calls_concurrently() -> None:
    started: list[str] = []
    gate = trio.Event()

    class Approval(Policy):
        suspends = True

        def intercept(self, request: CallRequest) -> Any:
            started.append(request.id)
            if len(started) == 3:
                gate.set()
            yield gate.wait()  # each call waits for all three: only concurrent flows get past it
            return (yield request)

    async with open_runtime(TOOLS, policies=[Approval()], tracing=False) as rt:
        with trio.fail_after(10):
            results = await rt.call_many([call(str(i), "lookup", key=str(i)) for i in range(3)])
    assert [r.value for r in results] == ["0", "1", "2"]


async def test_an_error_an_awaited_step_raises_is_thrown_into_the_flow() -> None:
    async def refuses() -> None:
        raise PermissionError("approver said no")

    class Approval(Policy):
        suspends = True

        def intercept(self, request: CallRequest) -> Any:
            try:
                yield refuses()
            except PermissionError as exc:
                return request.reject(str(exc))
            return (yield request)

    async with open_runtime(TOOLS, policies=[Approval()], tracing=False) as rt:
        result = await rt.call(call("1", "pay", amount=5))
    assert result.kind is FailureKind.REJECTED
    assert result.message == "approver said no"
    assert ran["pay"] == 0


async def test_every_call_of_a_batch_passes_each_policy_exactly_once() -> None:
    log: list[tuple[str, str, str]] = []
    async with open_runtime(TOOLS, policies=[Recorder("r", log), Suspending()], tracing=False) as rt:
        calls = [
            call(f"c{i}", "lookup", key="k") if i % 2 else call(f"c{i}", "pay", amount=i) for i in range(40)
        ]
        results = await rt.call_many(calls)
        streamed = [r async for r in rt.as_completed([call(f"s{i}", "lookup", key="k") for i in range(10)])]
    assert len(results) == 40
    assert all(r.ok for r in results)
    assert len(streamed) == 10
    assert all(r.ok for r in streamed)
    befores = Counter(i for _, when, i in log if when == "before")
    assert set(befores.values()) == {1}
    assert len(befores) == 50
    assert sum(1 for _, when, _ in log if when == "after") == 50


async def test_a_cancelled_caller_still_closes_every_policy_flow(autojump_clock: trio.abc.Clock) -> None:
    closed: list[str] = []

    class Watch(Policy):
        suspends = True

        def intercept(self, request: CallRequest) -> Any:
            yield trio.lowlevel.checkpoint()  # noqa: ASYNC105 - the engine awaits what a flow yields
            result: ToolResult = yield request
            closed.append(f"{request.id} {result.kind.value}")  # type: ignore[union-attr]
            return result

    async with open_runtime(TOOLS, policies=[Watch()], tracing=False) as rt:
        with trio.move_on_after(0.2) as scope:
            await rt.call_many([call(f"h{i}", "hang") for i in range(5)])
        assert scope.cancelled_caught
        await trio.sleep(1)  # virtual time: the calls' tasks wind down
    assert sorted(closed) == [f"h{i} cancelled" for i in range(5)]  # each flow saw how its call ended


# -- principals, spans ----------------------------------------------------------------------------


async def test_the_principal_reaches_the_tool_and_the_span_and_redacted_fields_stay_off_it() -> None:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))

    class Hide(Policy):
        def intercept(self, request: CallRequest) -> Any:
            return (yield request.redact("password"))

    tracing = Tracing(tracer_provider=provider, record_arguments=True)
    async with open_runtime(TOOLS, policies=[Hide(), DenyEve()], tracing=tracing) as rt:
        signed_in = await rt.call(call("1", "login", user="ann", password="hunter2"), principal="ann")
        refused = await rt.call(call("2", "pay", amount=1), principal="eve")
    assert signed_in.ok
    assert signed_in.value == "hello ann (7)"  # the tool had the password
    assert refused.kind is FailureKind.REJECTED
    by_id = {s.attributes["gen_ai.tool.call.id"]: s for s in spans.get_finished_spans()}  # type: ignore[index]
    login_span, pay_span = by_id["1"], by_id["2"]
    assert login_span.attributes[PRINCIPAL] == "ann"  # type: ignore[index]
    arguments = json.loads(login_span.attributes[GEN_AI_TOOL_CALL_ARGUMENTS])  # type: ignore[arg-type, index]
    assert arguments == {"user": "ann", "password": "[redacted]"}
    assert "hunter2" not in repr([s.to_json() for s in spans.get_finished_spans()])
    decisions = [(e.name, dict(e.attributes or {})) for e in login_span.events]
    assert ("tool.policy", {"tool.policy.name": "Hide", "tool.policy.decision": "redacted"}) in decisions
    pay_events = [dict(e.attributes or {}) for e in pay_span.events if e.name == "tool.policy"]
    assert {"tool.policy.name": "DenyEve", "tool.policy.decision": "refused"} in pay_events
    assert pay_span.attributes[PRINCIPAL] == "eve"  # type: ignore[index]


async def test_decisions_after_the_call_reach_the_span_when_nothing_was_decided_before() -> None:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))

    class Shout(Policy):
        def intercept(self, request: CallRequest) -> Any:
            result: ToolResult = yield request
            if isinstance(result, ToolSuccess):
                return request.answer(str(result.value).upper())
            return result

    class Broken(Policy):
        def intercept(self, request: CallRequest) -> Any:
            yield request
            raise RuntimeError("after-half bug")

    tracing = Tracing(tracer_provider=provider)
    async with open_runtime(TOOLS, policies=[Shout()], tracing=tracing) as rt:
        shouted = await rt.call(call("1", "login", user="ann", password="x"))
        async with trio.open_nursery() as nursery:  # and on a task of its own (the mailbox route)
            nursery.start_soon(rt.call_many, [call("2", "login", user="bo", password="y")])
    async with open_runtime(TOOLS, policies=[Broken()], tracing=tracing) as rt:
        broken = await rt.call(call("3", "login", user="cy", password="z"))
    assert shouted.ok
    assert shouted.value == "HELLO ANN (1)"
    assert broken.kind is FailureKind.ERROR
    by_id = {s.attributes["gen_ai.tool.call.id"]: s for s in spans.get_finished_spans()}  # type: ignore[index]
    for call_id, name, decision in (
        ("1", "Shout", "transformed"),
        ("2", "Shout", "transformed"),
        ("3", "Broken", "failed"),
    ):
        events = [dict(e.attributes or {}) for e in by_id[call_id].events if e.name == "tool.policy"]
        assert events == [{"tool.policy.name": name, "tool.policy.decision": decision}], call_id


async def test_a_principal_must_be_a_string() -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        with pytest.raises(TypeError, match="principal"):
            rt.scoped(principal=42)  # type: ignore[arg-type]


# -- per-request views ------------------------------------------------------------------------


async def test_a_view_shows_and_calls_only_what_its_request_may_see() -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        with rt.scoped(principal="u1", exclude=["pay*"]) as view:
            names = [s["function"]["name"] for s in view.schemas("openai")]
            hidden = await view.call(call("1", "pay", amount=1))
            shown = await view.call(call("2", "lookup", key="x"))
            batch = await view.call_many(
                [call("3", "pay_v2", amount=1), call("4", "login", user="a", password="b")]
            )
        with rt.scoped(only=["pay*"], tags=["money"]) as money:
            money_names = sorted(t.name for t in money.registry)
        with rt.scoped(tags=["nothing-has-this"]) as none:
            assert list(none.registry) == []
    assert names == ["lookup", "login", "hang"]
    assert hidden.kind is FailureKind.UNKNOWN_TOOL
    assert "lookup" in hidden.message  # it suggests visible tools only
    assert "pay_v2" not in hidden.message
    assert shown.ok
    assert [r.ok for r in batch] == [False, True]
    assert money_names == ["pay", "pay_v2"]
    assert ran["pay"] == ran["pay_v2"] == 0
    with pytest.raises(RuntimeClosed, match="view is closed"):
        await view.call(call("5", "lookup", key="x"))


async def test_prepare_re_describes_or_hides_a_tool_for_one_request() -> None:
    def prepare(view: Any, descriptor: ToolDescriptor) -> ToolDescriptor | None:
        if descriptor.name == "hang":
            return None
        if view.principal == "fr" and descriptor.name == "lookup":
            return msgspec.structs.replace(descriptor, description="Chercher une clé.")
        return descriptor

    async with open_runtime(TOOLS, tracing=False) as rt:
        with rt.scoped(principal="fr", prepare=prepare) as view:
            shown = {s["function"]["name"]: s["function"]["description"] for s in view.schemas("openai")}
            refused = await view.call(call("1", "hang"))
            looked = await view.call(call("2", "lookup", key="k"))
        assert "hang" in [t.name for t in rt.registry]
    assert "hang" not in shown
    assert shown["lookup"] == "Chercher une clé."
    assert refused.kind is FailureKind.UNKNOWN_TOOL
    assert looked.ok
    assert looked.value == "K"


async def test_a_view_follows_the_registry_as_it_changes() -> None:
    @tool
    async def added(n: int) -> int:
        """Added later."""
        return n

    async with open_runtime([lookup], tracing=False) as rt:
        with rt.scoped(exclude=["secret_*"]) as view:
            assert [t.name for t in view.registry] == ["lookup"]
            await rt.register(added)
            assert sorted(t.name for t in view.registry) == ["added", "lookup"]
            result = await view.call(call("1", "added", n=4))
    assert result.ok
    assert result.value == 4


# -- the same policies from asyncio and from threads ------------------------------------------


def _check_embedded(results: dict[str, ToolResult]) -> None:
    assert results["refused"].kind is FailureKind.REJECTED
    assert results["doubled"].ok
    assert results["doubled"].value == "paid 4 for bob"
    assert results["suspended"].ok
    assert results["suspended"].value == "K"
    assert results["hidden"].kind is FailureKind.UNKNOWN_TOOL
    assert results["viewed"].ok
    assert results["viewed"].value == "paid 2 for viewer"


def test_policies_and_views_from_asyncio() -> None:
    async def main() -> dict[str, ToolResult]:
        async with open_asyncio_runtime(TOOLS, policies=[DenyEve(), Double()], tracing=False) as rt:
            out = {
                "refused": await rt.call(call("1", "pay", amount=2), principal="eve"),
                "doubled": (await rt.call_many([call("2", "pay", amount=2)], principal="bob"))[0],
            }
        async with open_asyncio_runtime(TOOLS, policies=[Suspending()], tracing=False) as rt:
            out["suspended"] = await rt.call(call("3", "lookup", key="k"))  # a trio task runs it
        async with open_asyncio_runtime(TOOLS, policies=[Double()], tracing=False) as rt:
            with rt.scoped(principal="viewer", only=["pay"]) as view:
                out["hidden"] = await view.call(call("4", "lookup", key="k"))
                out["viewed"] = await anext(aiter(view.as_completed([call("5", "pay", amount=1)])))
        return out

    _check_embedded(asyncio.run(main()))


def test_policies_and_views_from_a_runtime_thread() -> None:
    out: dict[str, ToolResult] = {}
    with RuntimeThread(TOOLS, policies=[DenyEve(), Double()], tracing=False) as rt:
        out["refused"] = rt.call(call("1", "pay", amount=2), principal="eve")
        out["doubled"] = rt.call_many([call("2", "pay", amount=2)], principal="bob")[0]
        with rt.scoped(principal="viewer", only=["pay"]) as view:
            out["hidden"] = view.call(call("4", "lookup", key="k"))
            out["viewed"] = asyncio.run(view.acall(call("5", "pay", amount=1)))
    with RuntimeThread(TOOLS, policies=[Suspending()], tracing=False) as rt:
        out["suspended"] = rt.call(call("3", "lookup", key="k"))
    _check_embedded(out)


async def test_a_policy_reads_the_calls_context_and_metadata_even_when_its_tool_takes_none() -> None:
    seen: list[tuple[Any, ...]] = []

    class Reads(Policy):
        def intercept(self, request: CallRequest) -> Any:
            ctx = request.ctx
            assert ctx is not None
            seen.append((ctx.principal, ctx.call_id, request.metadata.get("runtime.principal")))
            seen.append(request.metadata.get("tenant"))
            return (yield request)

    async with open_runtime(TOOLS, policies=[Reads()], tracing=False) as rt:
        result = await rt.call(call("1", "lookup", key="k"), principal="p1", metadata={"tenant": "t9"})
    assert result.ok
    assert seen == [("p1", "1", "p1"), "t9"]


async def test_a_call_sent_from_a_tool_without_context_to_one_with_it_gets_its_context() -> None:
    """The context is made lazily; a call a policy routes to a tool that takes one still gets it."""

    class ToPay(Policy):
        def intercept(self, request: CallRequest) -> Any:
            return (yield request.replace(tool="pay", arguments='{"amount": 3}'))

    async with open_runtime([lookup, pay], policies=[ToPay()], tracing=False) as rt:
        result = await rt.call(call("1", "lookup", key="k"), principal="ann")
    assert result.ok, result
    assert result.value == "paid 3 for ann"


async def nap() -> None:
    await trio.lowlevel.checkpoint()


class ForgotToSuspend(Policy):
    """Awaits something (before the call or after it) without saying `suspends = True`."""

    def __init__(self, where: str) -> None:
        self.where = where

    def intercept(self, request: CallRequest) -> Any:
        if self.where == "before":
            yield nap()
        result = yield request
        if self.where == "after":
            yield nap()
        return result


def _check_forgot(results: list[ToolResult]) -> None:
    before, after, fine = results
    assert before.kind is FailureKind.ERROR
    assert before.message == (
        "policy ForgotToSuspend yielded coroutine to await; a policy that awaits says suspends = True"
    )
    assert after.kind is FailureKind.ERROR  # the tool ran; the policy's own fault is that call's ERROR
    assert fine.ok  # the runtime goes on


@pytest.mark.filterwarnings("error::RuntimeWarning")  # the coroutine nobody awaits is closed, not leaked
async def test_a_policy_that_awaits_without_saying_it_suspends_fails_its_call_alone_from_trio() -> None:
    results = []
    for where in ("before", "after", "nowhere"):
        async with open_runtime(TOOLS, policies=[ForgotToSuspend(where)], tracing=False) as rt:
            results.append(await rt.call(call("1", "lookup", key="k")))
    _check_forgot(results)


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_a_policy_that_awaits_without_saying_it_suspends_fails_its_call_alone_from_asyncio_and_a_thread() -> (
    None
):
    async def main() -> list[ToolResult]:
        out = []
        for where in ("before", "after", "nowhere"):
            async with open_asyncio_runtime(TOOLS, policies=[ForgotToSuspend(where)], tracing=False) as rt:
                out.append(await rt.call(call("1", "lookup", key="k")))
        return out

    _check_forgot(asyncio.run(main()))
    threaded = []
    for where in ("before", "after", "nowhere"):
        with RuntimeThread(TOOLS, policies=[ForgotToSuspend(where)], tracing=False) as rt:
            threaded.append(rt.call(call("1", "lookup", key="k")))
    _check_forgot(threaded)
