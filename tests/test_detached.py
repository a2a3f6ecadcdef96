"""Calls that outlive a request (DESIGN.md 3.14, issue 43): detached calls, deferred calls
(approvals, outside results), their journal, on virtual time (MockClock) and a MemoryStore.

Each state transition and each way a detached call ends has a test of its own; durability across
real processes (SQLite, Redis, kill -9) is tests/test_detached_durable.py and the crash harness
tests/test_detached_crash.py.
"""

from __future__ import annotations

import contextlib
import json
import math
from typing import Any

import msgspec
import pytest
import trio

from runtime import (
    Answer,
    CallContext,
    CallNotFound,
    CallStateError,
    DetachedState,
    DetachedStatus,
    Durable,
    FailureKind,
    InvalidArguments,
    Policy,
    ToolCall,
    ToolFailure,
    ToolOverloaded,
    ToolPending,
    ToolSuccess,
    open_runtime,
    tool,
)
from runtime.engine import CallRequest
from runtime.engine._journal import marker_key, record_key
from runtime.exceptions import ResultTypeError
from runtime.stores import MemoryStore

ran: list[str] = []


@pytest.fixture(autouse=True)
def _clear() -> None:
    ran.clear()


@tool
async def report(minutes: int) -> str:
    """Make a report that takes a while."""
    await trio.sleep(minutes * 60)
    ran.append(f"report {minutes}")
    return f"report of {minutes} minutes"


@tool
async def crash(why: str) -> str:
    """Raise."""
    raise ValueError(why)


@tool
async def stubborn(seconds: float) -> str:
    """Sleep, and go on sleeping when cancelled (its code ignores cancellation)."""
    with trio.CancelScope(shield=True):
        await trio.sleep(seconds)
    return "done"


@tool(requires_approval=True)
async def pay(amount: int, to: str) -> str:
    """Pay someone."""
    ran.append(f"pay {amount} {to}")
    return f"paid {amount} to {to}"


@tool
async def confirm(item: str, ctx: CallContext) -> str:
    """Ask the user before doing it."""
    answer = await ctx.elicit(f"Really {item}?", None)
    ran.append(f"confirm {item} {answer.action}")
    return f"{item}: {answer.action}"


class Named(msgspec.Struct, frozen=True):
    name: str = ""


@tool
async def two_names(ctx: CallContext) -> str:
    """Ask two questions at once (a nursery): both wait together."""
    got: dict[str, str] = {}

    async def ask(key: str) -> None:
        answer = await ctx.elicit(f"Name {key}?", Named, key=key)
        got[key] = answer.value.name if answer.value is not None else answer.action
        ran.append(f"got {key}")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask, "first")
        nursery.start_soon(ask, "second")
    return f"first={got['first']} second={got['second']}"


class Page(msgspec.Struct):
    title: str
    words: int


@tool
async def open_page(url: str, ctx: CallContext) -> Page:
    """Open a page in the user's browser (it runs there; its result comes back later)."""
    await ctx.defer("the page opens in the user's browser")
    raise AssertionError("never reached")


@tool
async def quick(n: int) -> int:
    """Answer at once."""
    ran.append(f"quick {n}")
    return n + 1


def call(name: str, call_id: str = "c1", **arguments: Any) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=json.dumps(arguments))


async def beyond_working(handle: Any) -> DetachedStatus:
    """Its status once it is no longer working (it waits, or it ended)."""
    async with contextlib.aclosing(handle.watch()) as statuses:
        async for status in statuses:
            if status.state is not DetachedState.WORKING:
                return status
    raise AssertionError("it ended without a last status")


TOOLS = [report, crash, stubborn, pay, confirm, open_page, quick, two_names]


# -- detached calls: working -> completed / failed / cancelled ---------------------------------


async def test_a_detached_call_answers_with_a_handle_at_once_and_its_result_when_done(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        start = trio.current_time()
        handle = await rt.detach(call("report", minutes=2), principal="ann")
        assert trio.current_time() == start  # a handle at once
        status = await handle.status()
        assert status.state is DetachedState.WORKING
        assert (status.tool, status.call_id, status.principal) == ("report", "c1", "ann")
        result = await handle.result()
        assert trio.current_time() - start == 120
        assert isinstance(result, ToolSuccess)
        assert result.content == "report of 2 minutes"
        done = await handle.status()
        assert done.state is DetachedState.COMPLETED
        assert done.result == result
        assert done.attempts == 1
        assert done.expires_at == pytest.approx(done.updated_at + 3600)


async def test_a_15_minute_tool_behind_a_60_second_client_timeout_completes(
    autojump_clock: trio.abc.Clock,
) -> None:
    """An MCP client gives up on a request after 60 s: each request here starts or polls the
    call within that, and the 15-minute report completes over 16 of them."""
    async with open_runtime(TOOLS, tracing=False) as rt:
        requests = 0
        start = trio.current_time()
        with trio.fail_after(60):  # the first request: start it
            handle = await rt.detach(call("report", minutes=15), principal="ann")
        requests += 1
        result = None
        while result is None:
            with trio.move_on_after(60):  # each later request waits at most 60 s
                result = await rt.detached(handle.id, principal="ann").result()
            requests += 1
        assert result.content == "report of 15 minutes"
        assert trio.current_time() - start == 900  # it ended when its work did, not a poll later
        assert requests in (16, 17)  # the 16th ends at 900 s, with the call or a moment before it
        assert ran == ["report 15"]


async def test_a_detached_call_whose_tool_raises_fails_with_its_error(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        handle = await rt.detach(call("crash", why="no disk"))
        result = await handle.result()
        assert isinstance(result, ToolFailure)
        assert result.kind is FailureKind.ERROR
        assert "no disk" in result.message
        assert (await handle.status()).state is DetachedState.FAILED


async def test_a_detached_call_past_its_deadline_fails_timeout(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        handle = await rt.detach(call("report", minutes=10), timeout=30)
        result = await handle.result()
        assert isinstance(result, ToolFailure)
        assert result.kind is FailureKind.TIMEOUT
        assert "30s" in result.message
        assert ran == []


async def test_a_detached_call_whose_code_ignores_cancellation_is_answered_at_its_deadline(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        start = trio.current_time()
        handle = await rt.detach(call("stubborn", seconds=100), timeout=10)
        result = await handle.result()
        assert result.kind is FailureKind.TIMEOUT  # type: ignore[union-attr]
        assert "abandoned" in result.content
        assert trio.current_time() - start < 11  # answered a grace after its deadline
        await trio.sleep(100)  # its code ends later; the journal keeps the one result
        assert (await handle.status()).result == result


async def test_cancelling_a_running_detached_call_stops_its_tool_and_ends_it_cancelled(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        handle = await rt.detach(call("report", minutes=10))
        await trio.sleep(5)
        status = await handle.cancel()
        assert status.state is DetachedState.CANCELLED
        assert status.result.kind is FailureKind.CANCELLED  # type: ignore[union-attr]
        assert trio.current_time() < 6
        assert ran == []
        assert await handle.cancel() == status  # a second cancel: the status as it is
        await trio.sleep(1000)
        assert ran == []


async def test_cancel_after_the_end_keeps_the_result(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        handle = await rt.detach(call("quick", n=1))
        result = await handle.result()
        status = await handle.cancel()
        assert status.state is DetachedState.COMPLETED
        assert status.result == result


async def test_watch_yields_each_status_until_the_end(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        handle = await rt.detach(call("report", minutes=1))
        seen = [s.state async for s in handle.watch()]
        assert seen[0] is DetachedState.WORKING
        assert seen[-1] is DetachedState.COMPLETED


async def test_detaching_twice_with_one_id_starts_one_call(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        first = await rt.detach(call("quick", n=1), id="job-1", principal="ann")
        second = await rt.detach(call("quick", n=2), id="job-1", principal="ann")
        assert first.id == second.id == "job-1"
        assert (await second.result()).content == "2"
        other = await rt.detach(call("quick", n=3), id="job-1", principal="bob")  # bob's own job-1
        assert (await other.result()).content == "4"
        assert ran == ["quick 1", "quick 3"]


async def test_a_detached_call_of_an_unknown_tool_is_answered_unknown_tool(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        handle = await rt.detach(call("nope"))
        result = await handle.result()
        assert result.kind is FailureKind.UNKNOWN_TOOL  # type: ignore[union-attr]
        with rt.scoped(principal="ann", exclude=["quick"]) as view:
            hidden = await view.detach(call("quick", n=1))
            assert (await hidden.result()).kind is FailureKind.UNKNOWN_TOOL  # type: ignore[union-attr]
        assert ran == []


# -- questions: working -> input_required -> working ------------------------------------------


async def test_a_question_waits_in_input_required_until_answered(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        handle = await rt.detach(call("confirm", item="deploy"), principal="ann")
        await trio.sleep(3600)  # nobody answers for an hour: it waits
        status = await handle.status()
        assert status.state is DetachedState.INPUT_REQUIRED
        assert status.waiting_for == "answer"
        assert status.question is not None
        assert status.question.message == "Really deploy?"  # type: ignore[union-attr]
        assert [s.id for s in await rt.pending(principal="ann")] == [handle.id]
        with pytest.raises(TypeError, match="Answer"):
            await handle.answer(["not", "an", "answer"])  # type: ignore[arg-type]
        resumed = await handle.answer(Answer.accept())
        assert resumed.state is DetachedState.WORKING
        result = await handle.result()
        assert result.content == "deploy: accept"
        with pytest.raises(CallStateError, match="has ended"):
            await handle.answer(Answer.accept())
        assert ran == ["confirm deploy accept"]


async def test_questions_asked_at_once_wait_together_and_each_is_answered_on_its_own(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        handle = await rt.detach(call("two_names"), principal="ann")
        await trio.sleep(1)
        both = await handle.status()
        assert both.state is DetachedState.INPUT_REQUIRED
        assert sorted(both.questions) == ["first", "second"]
        assert both.question == next(iter(both.questions.values()))  # the first asked
        with pytest.raises(CallStateError, match="asks 2 questions at once"):
            await handle.answer(Answer.accept({"name": "Ann"}))  # which one?
        with pytest.raises(CallStateError, match="asks no question 'third'"):
            await handle.answer(Answer.accept({"name": "Ann"}), key="third")
        partial = await handle.answer(Answer.accept({"name": "Ann"}), key="first")
        assert partial.state is DetachedState.INPUT_REQUIRED  # the other is still open
        assert list(partial.questions) == ["second"]
        await trio.sleep(1)
        assert ran == ["got first"]  # the answered branch went on; the other waits
        still = await handle.status()
        assert still.state is DetachedState.INPUT_REQUIRED
        assert list(still.questions) == ["second"]
        with pytest.raises(CallStateError, match="asks no question 'first'"):
            await handle.answer(Answer.accept({"name": "again"}), key="first")  # answered already
        last = await handle.answer(Answer.accept({"name": "Bo"}))  # the one it asks now
        assert last.state is DetachedState.WORKING
        assert last.questions == {}
        result = await handle.result()
    assert result.content == "first=Ann second=Bo"
    assert ran == ["got first", "got second"]


async def test_a_question_answered_from_another_runtime_leaves_the_others_open(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = MemoryStore()
    settings: dict[str, Any] = {"tracing": False, "store": store, "durable": Durable(poll_interval=0.5)}
    async with open_runtime(TOOLS, **settings) as here, open_runtime(TOOLS, **settings) as there:
        handle = await here.detach(call("two_names"), principal="ann")
        await trio.sleep(1)
        far = there.detached(handle.id, principal="ann")
        await far.answer(Answer.accept({"name": "Cy"}), key="second")
        await trio.sleep(2)  # the run hears of it on its next look
        assert ran == ["got second"]
        assert list((await far.status()).questions) == ["first"]
        await far.answer(Answer.decline(), key="first")
        assert (await handle.result()).content == "first=decline second=Cy"


async def test_a_record_journaled_with_one_question_reads_as_that_question_under_its_key(
    autojump_clock: trio.abc.Clock,
) -> None:
    """A record written before questions were keyed (`question_kind`, `question`) still reads."""
    store = MemoryStore()
    async with open_runtime(TOOLS, tracing=False, store=store) as rt:
        book = rt._entry.durable
        old = {
            "id": "dc_old",
            "principal": "ann",
            "tool": "confirm",
            "call_id": "c1",
            "arguments": '{"item": "ship"}',
            "phase": "waiting",
            "waiting": "answer",
            "question_kind": "elicitation",
            "question": {"message": "Really ship?", "schema": {"type": "object"}, "key": "sure"},
            "owner": book.owner,
            "started": True,
            "created": 1.0,
            "updated": 1.0,
        }
        await store.set(record_key("ann", "dc_old"), json.dumps(old).encode())
        status = await rt.detached("dc_old", principal="ann").status()
        assert status.state is DetachedState.INPUT_REQUIRED
        assert list(status.questions) == ["sure"]
        assert status.question is not None
        assert status.question.message == "Really ship?"  # type: ignore[union-attr]
        unkeyed = {**old, "id": "dc_older", "question": {"message": "Ship?", "schema": {}}}
        await store.set(record_key("ann", "dc_older"), json.dumps(unkeyed).encode())
        (key,) = (await rt.detached("dc_older", principal="ann").status()).questions
        assert key.startswith("elicitation-")


async def test_ctx_background_returns_at_once_in_a_plain_call_and_in_a_detached_one(
    autojump_clock: trio.abc.Clock,
) -> None:
    @tool(task=True, task_from="background")
    async def later(ctx: CallContext, n: int) -> int:
        """Go on in the background (served over MCP, a task from here)."""
        await ctx.background()
        ran.append(f"later {n}")
        return n

    async with open_runtime([later], tracing=False) as rt:
        assert (await rt.call(call("later", n=1))).content == "1"
        assert (await (await rt.detach(call("later", n=2))).result()).content == "2"
    assert ran == ["later 1", "later 2"]
    with pytest.raises(TypeError, match="task_from='background' says where a call becomes its MCP task"):

        @tool(task_from="background")
        async def never(n: int) -> int:
            """Never a task."""
            return n


async def test_cancelling_a_call_that_waits_for_an_answer_ends_it(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        handle = await rt.detach(call("confirm", item="deploy"))
        await trio.sleep(1)
        status = await handle.cancel()
        assert status.state is DetachedState.CANCELLED
        assert ran == []


# -- approvals: input_required(approval) -> working / failed / cancelled ----------------------


async def test_a_deferred_call_ends_its_turn_pending_and_runs_once_approved(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        results = await rt.call_many(
            [call("pay", "p1", amount=5, to="bob"), call("quick", "q1", n=1)], principal="ann"
        )
        pending, sibling = results
        assert isinstance(pending, ToolPending)
        assert pending.reason == "approval"
        assert pending.call_id == "p1"
        assert not pending.ok
        assert "Do not call it again" in pending.content
        assert sibling.content == "2"
        (waiting,) = await rt.pending(principal="ann")
        assert waiting.id == pending.detached_id
        assert waiting.state is DetachedState.INPUT_REQUIRED
        assert waiting.waiting_for == "approval"
        assert waiting.question.approval  # type: ignore[union-attr]
        assert waiting.arguments == '{"amount": 5, "to": "bob"}'
        handle = rt.detached(pending.detached_id, principal="ann")
        approved = await handle.approve()
        assert approved.state is DetachedState.WORKING
        result = await handle.result()
        assert result.content == "paid 5 to bob"
        assert result.call_id == "p1"
        assert await handle.approve() == await handle.status()  # a second approval: as it is
        assert ran == ["quick 1", "pay 5 bob"]  # the sibling ran once, the payment once
        assert await rt.pending(principal="ann") == []


async def test_a_detached_call_that_needs_approval_waits_for_it_then_runs(
    autojump_clock: trio.abc.Clock,
) -> None:
    async def on_elicit(question: Any) -> Answer:  # someone can answer now, but a detached call's
        raise AssertionError("a detached call's approval is kept, not asked of the request")

    async with open_runtime(TOOLS, tracing=False, on_elicit=on_elicit) as rt:
        handle = await rt.detach(call("pay", amount=7, to="carl"))
        status = await beyond_working(handle)
        assert status.state is DetachedState.INPUT_REQUIRED
        assert status.waiting_for == "approval"
        answered = await handle.answer(Answer.accept())  # an approval answered as a question
        assert answered.state is DetachedState.WORKING
        assert (await handle.result()).content == "paid 7 to carl"


async def test_a_denied_call_is_rejected_with_the_message_and_never_runs(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        pending = await rt.call(call("pay", amount=500, to="eve"))
        handle = rt.detached(pending.detached_id)  # type: ignore[union-attr]
        status = await handle.deny("not to eve")
        assert status.state is DetachedState.FAILED
        result = status.result
        assert result.kind is FailureKind.REJECTED  # type: ignore[union-attr]
        assert result.message == "running tool 'pay' was denied: not to eve; it did not run"  # type: ignore[union-attr]
        assert await handle.deny("again") == status  # idempotent
        with pytest.raises(CallStateError, match="was denied") as refused:
            await handle.approve()
        assert refused.value.status == status
        assert ran == []


async def test_an_approval_expires(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime(TOOLS, tracing=False, durable=Durable(expires=3600)) as rt:
        pending = await rt.call(call("pay", amount=5, to="bob"))
        assert isinstance(pending, ToolPending)
        assert pending.expires_at is not None
        handle = rt.detached(pending.detached_id)
        await trio.sleep(3599)
        assert (await handle.status()).state is DetachedState.INPUT_REQUIRED
        await trio.sleep(1)
        status = await handle.status()
        assert status.state is DetachedState.FAILED
        assert status.result.kind is FailureKind.TIMEOUT  # type: ignore[union-attr]
        assert "did not come in time" in status.result.content  # type: ignore[union-attr]
        with pytest.raises(CallStateError, match="expired"):
            await handle.approve()
        assert await rt.pending() == []
        assert ran == []


async def test_an_expiry_is_journaled_by_the_sweep_without_anyone_looking(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = MemoryStore()
    async with open_runtime(TOOLS, tracing=False, store=store, durable=Durable(expires=60, lease=10)) as rt:
        pending = await rt.call(call("pay", amount=5, to="bob"))
        await trio.sleep(70)
        raw = await store.get(record_key(None, pending.detached_id))  # type: ignore[union-attr]
        assert raw is not None
        assert json.loads(raw)["phase"] == "done"


async def test_expire_withdraws_a_pending_call_now(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        pending = await rt.call(call("pay", amount=5, to="bob"))
        handle = rt.detached(pending.detached_id)  # type: ignore[union-attr]
        status = await handle.expire()
        assert status.result.kind is FailureKind.TIMEOUT  # type: ignore[union-attr]
        assert await handle.expire() == status
        with pytest.raises(CallStateError):
            await handle.deny("too late")
        assert ran == []


async def test_cancelling_a_pending_call_ends_it_cancelled(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        pending = await rt.call(call("pay", amount=5, to="bob"))
        handle = rt.detached(pending.detached_id)  # type: ignore[union-attr]
        status = await handle.cancel()
        assert status.state is DetachedState.CANCELLED
        assert "before it ran" in status.result.content  # type: ignore[union-attr]
        assert await handle.cancel() == status
        with pytest.raises(CallStateError, match="was cancelled"):
            await handle.approve()
        assert ran == []


async def test_edited_arguments_run_and_bad_ones_name_the_path_and_keep_it_pending(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        pending = await rt.call(call("pay", amount=5000, to="bob"))
        handle = rt.detached(pending.detached_id)  # type: ignore[union-attr]
        with pytest.raises(InvalidArguments, match=r"\$\.amount") as bad:
            await handle.approve(arguments={"amount": "fifty", "to": "bob"})
        assert bad.value.path == "$.amount"
        status = await handle.status()
        assert status.state is DetachedState.INPUT_REQUIRED
        assert status.arguments == '{"amount": 5000, "to": "bob"}'
        await handle.approve(arguments={"amount": 50, "to": "bob"})
        assert (await handle.result()).content == "paid 50 to bob"
        assert (await handle.status()).arguments == '{"amount":50,"to":"bob"}'
        assert ran == ["pay 50 bob"]


async def test_a_policy_defers_calls_and_lets_them_through_once_approved(
    autojump_clock: trio.abc.Clock,
) -> None:
    class LargeOrders(Policy):
        """Orders over 100 wait for a manager."""

        def intercept(self, request: CallRequest) -> Any:
            if request.tool_name == "quick" and request.args.n > 100 and not request.approved:
                return (yield from request.defer("a manager approves orders over 100"))
            return (yield request)

    async with open_runtime(TOOLS, tracing=False, policies=[LargeOrders()]) as rt:
        small, large = await rt.call_many([call("quick", "a", n=1), call("quick", "b", n=500)])
        assert small.content == "2"
        assert isinstance(large, ToolPending)
        assert large.content == "a manager approves orders over 100"
        handle = rt.detached(large.detached_id)
        await handle.approve()
        assert (await handle.result()).content == "501"
        assert ran == ["quick 1", "quick 500"]


# -- outside results: input_required(outside) -> completed / failed ---------------------------


async def test_an_outside_result_is_supplied_and_checked_against_the_tools_type(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        pending = await rt.call(call("open_page", url="https://example.org"), principal="ann")
        assert isinstance(pending, ToolPending)
        assert pending.reason == "outside"
        assert pending.content == "the page opens in the user's browser"
        handle = rt.detached(pending.detached_id, principal="ann")
        status = await handle.status()
        assert status.waiting_for == "outside"
        assert status.arguments == '{"url": "https://example.org"}'
        with pytest.raises(ResultTypeError):
            await handle.supply({"title": "Example"})  # no `words`
        assert (await handle.status()).state is DetachedState.INPUT_REQUIRED
        with pytest.raises(CallStateError, match="from outside"):
            await handle.approve()
        done = await handle.supply(Page(title="Example", words=120))
        assert done.state is DetachedState.COMPLETED
        result = await handle.result()
        assert isinstance(result, ToolSuccess)
        assert json.loads(result.content) == {"title": "Example", "words": 120}
        assert await handle.supply(Page(title="Again", words=1)) == done  # idempotent


async def test_an_outside_error_is_the_calls_failure(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        pending = await rt.call(call("open_page", url="https://example.org"))
        handle = rt.detached(pending.detached_id)  # type: ignore[union-attr]
        status = await handle.supply(error="the page did not load")
        assert status.state is DetachedState.FAILED
        assert status.result.kind is FailureKind.ERROR  # type: ignore[union-attr]
        assert "the page did not load" in status.result.content  # type: ignore[union-attr]


# -- bad input changes nothing -------------------------------------------------------------------


async def test_an_unknown_id_and_another_principals_id_get_the_same_answer(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        pending = await rt.call(call("pay", amount=5, to="bob"), principal="ann")
        theirs = rt.detached(pending.detached_id, principal="mallory")  # type: ignore[union-attr]
        unknown = rt.detached("dc_doesnotexist", principal="mallory")
        answers = []
        for handle in (theirs, unknown):
            with pytest.raises(CallNotFound) as nope:
                await handle.approve()
            answers.append(str(nope.value).replace(handle.id, "ID"))
        assert answers[0] == answers[1] == "no detached call 'ID' for this principal"
        for bad in ("a\x00b", "x" * 200, "", "../dc"):
            with pytest.raises(CallNotFound):
                await rt.detached(bad).status()
        with pytest.raises(CallNotFound):
            await rt.detached(pending.detached_id, principal="ann\x00").status()  # type: ignore[union-attr]
        assert await rt.pending(principal="mallory") == []
        assert (await rt.detached(pending.detached_id, principal="ann").status()).state is (  # type: ignore[union-attr]
            DetachedState.INPUT_REQUIRED
        )
        assert ran == []


async def test_a_principal_is_bounded_and_a_deferral_past_it_is_overloaded(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with open_runtime(TOOLS, tracing=False, durable=Durable(max_per_principal=2)) as rt:
        first = await rt.detach(call("report", minutes=1), principal="ann")
        await rt.call(call("pay", amount=1, to="bob"), principal="ann")
        with pytest.raises(ToolOverloaded, match="bound"):
            await rt.detach(call("report", minutes=1), principal="ann")
        refused = await rt.call(call("pay", amount=2, to="bob"), principal="ann")
        assert refused.kind is FailureKind.OVERLOADED  # type: ignore[union-attr]
        other = await rt.detach(call("quick", n=1), principal="bob")  # another principal's room
        await other.result()
        await first.result()  # one ended: room again
        again = await rt.detach(call("quick", n=2), principal="ann")
        assert (await again.result()).content == "3"


async def test_finished_entries_are_forgotten_after_their_ttl(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime(TOOLS, tracing=False, durable=Durable(ttl=600)) as rt:
        handle = await rt.detach(call("quick", n=1))
        await handle.result()
        await trio.sleep(599)
        assert (await handle.status()).state is DetachedState.COMPLETED
        await trio.sleep(2)
        with pytest.raises(CallNotFound):
            await handle.status()
        assert await rt.detached_calls() == []


async def test_bad_detach_settings_are_refused(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime(TOOLS, tracing=False) as rt:
        with pytest.raises(ValueError, match="id"):
            await rt.detach(call("quick", n=1), id="no spaces")
        with pytest.raises(ValueError, match="timeout"):
            await rt.detach(call("quick", n=1), timeout=-1)
        with pytest.raises(ValueError, match="NUL"):
            await rt.detach(call("quick", n=1), principal="a\x00b")
        assert await rt.detached_calls() == []


def test_durable_settings_are_checked_where_the_runtime_is_opened() -> None:
    with pytest.raises(Exception, match="max_per_principal"):
        Durable(max_per_principal=0)
    with pytest.raises(ValueError, match="node"):
        Durable(node="a/b")


# -- a restart, and two processes on one store (virtual time, MemoryStore) ----------------------


@tool(idempotent=True)
async def fetch(key: str) -> str:
    """Fetch (idempotent: safe to run again)."""
    ran.append(f"fetch {key}")
    await trio.sleep(100)
    return f"fetched {key}"


@tool
async def charge(key: str) -> str:
    """Charge a card (not idempotent)."""
    ran.append(f"charge {key}")
    await trio.sleep(100)
    return f"charged {key}"


async def test_a_restart_reruns_only_idempotent_calls_and_keeps_pending_approvals(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = MemoryStore()
    settings: dict[str, Any] = {
        "tracing": False,
        "store": store,
        "shutdown_timeout": 1.0,
        "durable": Durable(node="server-1"),
    }
    async with open_runtime([fetch, charge, pay], **settings) as rt:
        fetching = await rt.detach(call("fetch", key="a"), principal="ann")
        charging = await rt.detach(call("charge", key="b"), principal="ann")
        pending = await rt.call(call("pay", amount=5, to="bob"), principal="ann")
        await trio.sleep(10)  # both run; then the server stops
    assert sorted(ran) == ["charge b", "fetch a"]
    async with open_runtime([fetch, charge, pay], **settings) as rt:
        again = await rt.detached(fetching.id, principal="ann").result()
        assert again.content == "fetched a"
        lost = await rt.detached(charging.id, principal="ann").result()
        assert lost.kind is FailureKind.UNAVAILABLE  # type: ignore[union-attr]
        assert "it may have run, and it is not run again" in lost.content
        (waiting,) = await rt.pending(principal="ann")
        assert waiting.id == pending.detached_id  # type: ignore[union-attr]
        handle = rt.detached(waiting.id, principal="ann")
        await handle.approve()
        assert (await handle.result()).content == "paid 5 to bob"
    assert sorted(ran) == ["charge b", "fetch a", "fetch a", "pay 5 bob"]  # charge ran once


async def test_a_call_queued_when_its_process_died_runs_after_the_lease(
    autojump_clock: trio.abc.Clock,
) -> None:
    """A process that never gave its lease back (killed): its calls wait out the lease, then
    another process takes them over; one that had not started runs (never twice)."""
    store = MemoryStore()
    async with open_runtime([charge], tracing=False, store=store, durable=Durable(lease=15)) as first:
        book = first._entry.durable
        record = book._record(
            call("charge", key="z"), "ann", None, "dc_orphan", phase="queued", owner="dead/1"
        )
        assert await book.journal.create(record) is not None
        await store.set(marker_key("ann", "dc_orphan"), b"")
        await store.set("dco:dead/1", b"1", 15)  # its lease, never renewed
        handle = first.detached("dc_orphan", principal="ann")
        await trio.sleep(10)
        assert (await handle.status()).state is DetachedState.WORKING
        assert ran == []
        result = await handle.result()  # the lease runs out: taken over, run here
        assert result.content == "charged z"
        assert ran == ["charge z"]


async def test_a_cancel_an_answer_and_an_approval_reach_a_call_from_another_runtime(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = MemoryStore()
    settings: dict[str, Any] = {"tracing": False, "store": store, "durable": Durable(poll_interval=0.5)}
    async with (
        open_runtime(TOOLS, **settings) as here,
        open_runtime(TOOLS, **settings) as there,
    ):
        running = await here.detach(call("report", minutes=10), principal="ann")
        asking = await here.detach(call("confirm", item="ship"), principal="ann")
        await trio.sleep(1)
        far = there.detached(running.id, principal="ann")
        requested = await far.cancel()
        assert requested.cancel_requested
        assert requested.state is DetachedState.WORKING
        result = await far.result()
        assert result.kind is FailureKind.CANCELLED  # type: ignore[union-attr]
        await there.detached(asking.id, principal="ann").answer(Answer.decline())
        assert (await asking.result()).content == "ship: decline"
        pending = await here.call(call("pay", amount=3, to="dan"), principal="ann")
        approved = there.detached(pending.detached_id, principal="ann")  # type: ignore[union-attr]
        await approved.approve()
        assert (await here.detached(approved.id, principal="ann").result()).content == "paid 3 to dan"
        assert ran == ["confirm ship decline", "pay 3 dan"]


async def test_closing_the_runtime_leaves_a_running_call_to_recovery(autojump_clock: trio.abc.Clock) -> None:
    store = MemoryStore()
    async with open_runtime([charge], tracing=False, store=store, shutdown_timeout=0.5) as rt:
        handle = await rt.detach(call("charge", key="x"))
        await trio.sleep(1)
    raw = await store.get(record_key(None, handle.id))
    assert raw is not None
    record = json.loads(raw)
    assert record["phase"] == "running"  # not "done" with the runtime's "shutting down"
    assert record["started"] is True


# -- checkpoints -----------------------------------------------------------------------------------

handed: list[bool] = []


@tool
async def job(ctx: CallContext, key: str) -> str:
    """A job that is not idempotent and journals where it is (`ctx.checkpoint`)."""
    resumed = ctx.resumed.get("job")
    if resumed is None:
        ran.append(f"job {key}")
        assert await ctx.checkpoint("job", {"step": 1})
    else:
        ran.append(f"job {key} resumed from step {resumed['step']}")
    try:
        await trio.sleep(60)
    finally:
        handed.append(ctx.handed_over)
    return f"job {key} done"


async def test_a_checkpointed_call_is_resumed_after_a_restart_though_not_idempotent(
    autojump_clock: trio.abc.Clock,
) -> None:
    handed.clear()
    store = MemoryStore()
    settings: dict[str, Any] = {
        "tracing": False,
        "store": store,
        "shutdown_timeout": 1.0,
        "durable": Durable(node="server-1"),
    }
    async with open_runtime([job], **settings) as rt:
        handle = await rt.detach(call("job", key="a"), principal="ann")
        await trio.sleep(10)  # it runs and checkpoints; then the server stops
    assert handed == [True]  # its run was cut short by the shutdown: its work is left to the next
    async with open_runtime([job], **settings) as rt:
        result = await rt.detached(handle.id, principal="ann").result()
        status = await rt.detached(handle.id, principal="ann").status()
    assert result.content == "job a done"
    assert ran == ["job a", "job a resumed from step 1"]  # resumed, never started over
    assert status.attempts == 2


async def test_a_checkpoint_is_kept_only_for_a_detached_call_and_only_json(
    autojump_clock: trio.abc.Clock,
) -> None:
    seen: list[Any] = []

    @tool
    async def keeper(ctx: CallContext) -> str:
        """Checkpoint twice."""
        seen.append(await ctx.checkpoint("k", 1))
        with pytest.raises(TypeError):
            await ctx.checkpoint("k", object())
        return "ok"

    async with open_runtime([keeper], tracing=False) as rt:
        await rt.call(call("keeper"))  # a plain call: nothing to keep it in
        await (await rt.detach(call("keeper"))).result()
    assert seen == [False, True]


async def test_a_callers_metadata_cannot_pose_as_a_checkpoint(autojump_clock: trio.abc.Clock) -> None:
    # A checkpoint is what a run before this one journaled (`ctx.resumed`), never a key of the
    # caller's metadata (a detached call keeps its scalar values): a caller that passes "job"
    # does not make the job "resume" (nor an MCP client's call follow a task the caller names).
    async with open_runtime([job], tracing=False, shutdown_timeout=1.0) as rt:
        handle = await rt.detach(call("job", key="m"), principal="ann", metadata={"job": "step 7"})
        await trio.sleep(1)
        await handle.cancel()
    assert ran == ["job m"]  # started from the beginning, and checkpointed its own step


async def test_a_run_cancelled_by_its_caller_is_not_handed_over_one_taken_over_is(
    autojump_clock: trio.abc.Clock,
) -> None:
    handed.clear()
    store = MemoryStore()
    async with open_runtime([job], tracing=False, store=store, durable=Durable(poll_interval=0.5)) as rt:
        cancelled = await rt.detach(call("job", key="c"), principal="ann")
        taken = await rt.detach(call("job", key="t"), principal="ann")
        await trio.sleep(1)
        await cancelled.cancel()
        assert (await cancelled.result()).kind is FailureKind.CANCELLED  # type: ignore[union-attr]
        await trio.sleep(1)
        assert handed == [False]  # its own end: what it started elsewhere is cancelled with it
        book = rt._entry.durable

        def elsewhere(r: Any) -> Any:  # another process takes it over (this one was taken for gone)
            return msgspec.structs.replace(r, owner="other-node/1")

        await book.journal.change(record_key("ann", taken.id), elsewhere, 3600.0)
        await trio.sleep(2)  # this process's watch sees it
        assert handed == [False, True]


# -- spans ---------------------------------------------------------------------------------------


async def test_a_detached_calls_span_links_to_its_starters_and_a_deferred_one_ends_pending(
    autojump_clock: trio.abc.Clock,
) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from runtime.tracing import Tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    async with open_runtime(TOOLS, tracing=Tracing(tracer_provider=provider)) as rt:
        with tracer.start_as_current_span("request") as request:
            handle = await rt.detach(call("quick", n=1))
            pending = await rt.call(call("pay", "p1", amount=1, to="bob"))
        await handle.result()
        approved = rt.detached(pending.detached_id)  # type: ignore[union-attr]
        await approved.approve()
        await approved.result()
    spans = {s.name: s for s in exporter.get_finished_spans() if s.name != "execute_tool pay"}
    detached = spans["execute_tool quick"]
    starter = request.get_span_context()
    assert detached.parent is None  # a trace of its own: it outlives the request
    assert [link.context.span_id for link in detached.links] == [starter.span_id]
    pays = [s for s in exporter.get_finished_spans() if s.name == "execute_tool pay"]
    deferred, ran_span = pays
    assert deferred.parent.span_id == starter.span_id  # type: ignore[union-attr]
    assert deferred.attributes["tool_runtime.outcome"] == "pending"
    assert deferred.attributes["tool_runtime.detached.id"] == pending.detached_id  # type: ignore[union-attr]
    assert [link.context.span_id for link in ran_span.links] == [starter.span_id]


# -- the status -----------------------------------------------------------------------------------


def test_a_status_encodes_to_json() -> None:
    status = DetachedStatus(
        id="dc_1",
        principal="ann",
        tool="quick",
        call_id="c1",
        arguments="{}",
        state=DetachedState.COMPLETED,
        result=ToolSuccess(call_id="c1", tool="quick", content="2", value=2),
        created_at=1.0,
        updated_at=2.0,
        ttl=3600.0,
        poll_interval=1.0,
    )
    data = json.loads(msgspec.json.encode(status))
    assert data["state"] == "completed"
    assert data["result"]["type"] == "success"
    assert status.done
    assert math.isclose(data["updated_at"], 2.0)


# -- every caller kind ---------------------------------------------------------------------------


def test_the_asyncio_runtime_detaches_defers_and_approves() -> None:
    import asyncio

    from runtime.embed import open_asyncio_runtime

    async def main() -> tuple[str, str, str, list[str]]:
        async with open_asyncio_runtime(TOOLS, tracing=False) as rt:
            handle = await rt.detach(call("quick", n=1), principal="ann")
            first = (await handle.result()).content
            pending = await rt.call(call("pay", amount=2, to="bob"), principal="ann")
            assert isinstance(pending, ToolPending)
            with rt.scoped(principal="ann") as view:
                waiting = [s.id for s in await view.pending()]
                approval = view.detached(pending.detached_id)
                await approval.approve()
                paid = (await approval.result()).content
            states = [s.state.value async for s in handle.watch()]
            return first, paid, states[-1], waiting

    first, paid, last, waiting = asyncio.run(main())
    assert (first, paid, last) == ("2", "paid 2 to bob", "completed")
    assert len(waiting) == 1


def test_a_runtime_thread_detaches_blocking_and_from_asyncio() -> None:
    import asyncio

    from runtime.embed import RuntimeThread

    with RuntimeThread(TOOLS, tracing=False) as rt:
        handle = rt.detach(call("quick", n=1), principal="ann")
        assert handle.result().content == "2"
        assert [s.state for s in handle.watch()][-1] is DetachedState.COMPLETED
        pending = rt.call(call("pay", amount=3, to="bob"), principal="ann")
        assert isinstance(pending, ToolPending)
        with rt.scoped(principal="ann") as view:
            (waiting,) = view.pending()
            approval = view.detached(waiting.id)
            assert approval.approve().state is DetachedState.WORKING
            assert approval.result().content == "paid 3 to bob"
            assert len(view.detached_calls()) == 2
        with pytest.raises(CallNotFound):
            rt.detached(waiting.id, principal="bob").status()

        async def from_asyncio() -> str:
            aio = rt.aio
            far = await aio.detach(call("quick", n=41), principal="ann")
            return (await far.result()).content

        assert asyncio.run(from_asyncio()) == "42"


async def test_a_detached_calls_policies_hold_a_refusal_ends_it_rejected(
    autojump_clock: trio.abc.Clock,
) -> None:
    class NoBob(Policy):
        def intercept(self, request: CallRequest) -> Any:
            if request.principal == "bob":
                return request.reject("bob may not")
            return (yield request)

    async with open_runtime(TOOLS, tracing=False, policies=[NoBob()]) as rt:
        refused = await rt.detach(call("quick", n=1), principal="bob")
        result = await refused.result()
        assert result.kind is FailureKind.REJECTED  # type: ignore[union-attr]
        assert result.content == "Error: bob may not"
        allowed = await rt.detach(call("quick", n=1), principal="ann")
        assert (await allowed.result()).content == "2"
        assert ran == ["quick 1"]


@tool(requires_approval=True)
async def slow_pay(seconds: int) -> str:
    """Pay, slowly, once approved."""
    await trio.sleep(seconds)
    return f"paid after {seconds}s"


async def test_a_deferred_calls_timeout_counts_from_its_approval(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime([slow_pay], tracing=False) as rt:
        quick, slow = await rt.call_many(
            [call("slow_pay", "a", seconds=20), call("slow_pay", "b", seconds=40)], timeout=30
        )
        await trio.sleep(3600)  # approved an hour later: its 30 s start then
        first, second = rt.detached(quick.detached_id), rt.detached(slow.detached_id)  # type: ignore[union-attr]
        await first.approve()
        await second.approve()
        assert (await first.result()).content == "paid after 20s"
        late = await second.result()
        assert late.kind is FailureKind.TIMEOUT  # type: ignore[union-attr]
        assert "30s" in late.content


async def test_a_journaled_call_links_to_the_trace_its_metadata_names(autojump_clock: trio.abc.Clock) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from runtime.tracing import Tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"  # an MCP request's
    async with open_runtime(TOOLS, tracing=Tracing(tracer_provider=provider)) as rt:
        handle = await rt.detach(call("quick", n=1), metadata={"traceparent": traceparent, "tenant": "t1"})
        await handle.result()
    (span,) = exporter.get_finished_spans()
    assert span.parent is None
    (link,) = span.links
    assert f"{link.context.trace_id:032x}" == "0af7651916cd43dd8448eb211c80319c"
    assert f"{link.context.span_id:016x}" == "b7ad6b7169203331"


def test_every_edge_renders_a_pending_result_as_an_answer_not_an_error() -> None:
    from runtime.mcp._server_catalog import plain_result
    from runtime.providers import anthropic, gemini, openai

    pending = ToolPending(call_id="p1", tool="pay", detached_id="dc_1", reason="approval", message="it waits")
    assert openai.result_messages([pending]) == [
        {"role": "tool", "tool_call_id": "p1", "content": "it waits"}
    ]
    assert anthropic.result_blocks([pending]) == [
        {"type": "tool_result", "tool_use_id": "p1", "content": "it waits"}
    ]
    (part,) = gemini.result_parts([pending])
    assert part["function_response"]["response"] == {"output": "it waits"}
    served = plain_result(pending)
    assert not served.is_error
    assert served.content[0].text == "it waits"  # type: ignore[union-attr]


async def test_a_program_in_code_mode_gets_a_permission_error_for_a_deferred_call() -> None:
    pytest.importorskip("pydantic_monty")
    from runtime.code import PENDING_RAISES, ProgramResult, code_mode

    run_code = code_mode()
    program = (
        "try:\n    r = await pay(amount=5, to='bob')\n"
        f"except {PENDING_RAISES} as e:\n    r = 'waits: ' + str(e)\nr"
    )
    async with open_runtime([pay, run_code], tracing=False) as rt:
        result = await rt.call(ToolCall(id="prog", name="run_code", arguments={"code": program}))
        assert isinstance(result, ToolSuccess)
        assert isinstance(result.value, ProgramResult)
        assert result.value.result.startswith("waits: Tool 'pay' needs an approval")
        assert len(await rt.pending()) == 1
    assert ran == []


async def test_a_store_without_compare_and_set_says_so_and_changes_nothing(
    autojump_clock: trio.abc.Clock,
) -> None:
    class OldStore(MemoryStore):
        """A store of the protocol before issue 43 (no `swap`)."""

        swap = None  # type: ignore[assignment]

    async with open_runtime(TOOLS, tracing=False, store=OldStore()) as rt:
        with pytest.raises(TypeError, match="no swap"):
            await rt.detach(call("quick", n=1))
        refused = await rt.call(call("pay", amount=1, to="bob"))
        assert refused.kind is FailureKind.UNAVAILABLE  # type: ignore[union-attr]
        assert "no swap" in refused.content
        assert (await rt.call(call("quick", n=1))).content == "2"  # plain calls are untouched
    assert ran == ["quick 1"]
