"""Options as a careless or hostile configuration writes them (issue 42, item 9 and `Retry(on=...)`):
a bad option is a ToolDefinitionError where it is made, never a surprise mid-call; no value can
stop the supervisor or stall the loop; and `Retry(on=...)` takes exception types and a predicate
as well as failure kinds, as tenacity and LangChain's tool-retry middleware do."""

from __future__ import annotations

import json
import math
import sys
from collections import Counter
from typing import Any

import msgspec
import pytest
import trio

from runtime import (
    Budget,
    Cache,
    CircuitBreaker,
    Dedupe,
    FailureKind,
    RateLimit,
    RestartPolicy,
    Retry,
    ToolCall,
    ToolFailure,
    ToolSuccess,
    open_runtime,
    tool,
)
from runtime.engine._artifacts import Artifacts
from runtime.engine._fair import FairQueue
from runtime.exceptions import ToolDefinitionError, ToolUnavailable

ran: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _reset() -> None:
    ran.clear()


def call(call_id: str, name: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=json.dumps(arguments))


# -- a bad option is refused where it is made ---------------------------------------------------

BAD = [
    (Retry, {"backoff": -1}, "backoff"),
    (Retry, {"attempts": 0}, "attempts"),
    (Retry, {"max_backoff": math.inf}, "max_backoff"),
    (Retry, {"jitter": math.nan}, "jitter"),
    (RateLimit, {"rate": -1}, "rate"),
    (RateLimit, {"rate": 0}, "rate"),
    (RateLimit, {"rate": 1, "burst": math.inf}, "burst"),
    (Cache, {"max_entries": 0}, "max_entries"),
    (Cache, {"ttl": math.nan}, "ttl"),
    (Cache, {"ttl": math.inf}, "ttl"),
    (Cache, {"max_entries": 1.5}, "max_entries"),
    (Dedupe, {"claim": 0}, "claim"),
    (Dedupe, {"ttl": -5}, "ttl"),
    (CircuitBreaker, {"failures": 0}, "failures"),
    (CircuitBreaker, {"cool_down": math.nan}, "cool_down"),
    (Budget, {"per_principal": 0}, "per_principal"),
    (Budget, {"per_batch": -3}, "per_batch"),
    (Budget, {"per_principal": True}, "per_principal"),
    (RestartPolicy, {"backoff": -1}, "backoff"),
    (RestartPolicy, {"within": 0}, "within"),
    (Artifacts, {"ttl": math.nan}, "ttl"),
    (Artifacts, {"max_bytes": 0}, "max_bytes"),
]


@pytest.mark.parametrize(
    ("kind", "values", "field"), BAD, ids=[f"{k.__name__}-{f}-{v[f]}" for k, v, f in BAD]
)
def test_a_bad_option_value_is_a_tool_definition_error_when_it_is_made(
    kind: type[Any], values: dict[str, Any], field: str
) -> None:
    with pytest.raises(ToolDefinitionError, match=rf"{kind.__name__}: {field}="):
        kind(**values)


def test_a_bad_option_cannot_be_slipped_in_by_replace() -> None:
    with pytest.raises(ToolDefinitionError, match="backoff"):
        msgspec.structs.replace(Retry(), backoff=-0.5)


def test_good_options_are_unchanged() -> None:
    assert Retry(backoff=0, attempts=2, jitter=1).backoff == 0.0
    assert RateLimit(rate=0.5).capacity == 1.0
    assert Cache(ttl=1, max_entries=1).ttl == 1.0
    assert Budget(rate=RateLimit(rate=3)).rate == RateLimit(rate=3)


@pytest.mark.parametrize("weight", [1e-7, 0.0, -1.0, math.inf, math.nan, 1e9])
async def test_a_fair_weight_that_would_stall_or_jump_every_queue_is_refused_when_the_runtime_opens(
    weight: float,
) -> None:
    with pytest.raises(TypeError, match="weights"):
        async with open_runtime([], fair=True, weights={"trial": weight}, tracing=False):
            pass  # pragma: no cover - refused


def test_fair_queue_pops_in_work_bounded_by_its_lanes_whatever_the_weights() -> None:
    """A lane of weight w used to be turned 1/w times before it was served (1e-7: the loop
    stalled 2-3 s a call). The queue now skips the empty rounds at once: the work of a pop is
    bounded by its lanes, counted as the weight lookups it makes."""
    lanes = 50
    weights = {f"p{i}": 1e-3 for i in range(lanes)}
    queue: FairQueue[tuple[str, int]] = FairQueue(lambda item: item[0], weights)
    for i in range(lanes):
        for n in range(3):
            queue.append((f"p{i}", n))
    lookups = 0

    def count(frame: Any, event: str, arg: Any) -> None:
        nonlocal lookups
        if event == "c_call" and getattr(arg, "__name__", "") == "get":
            lookups += 1

    served: list[tuple[str, int]] = []
    sys.setprofile(count)
    try:
        while queue:
            served.append(queue.popleft())
    finally:
        sys.setprofile(None)
    assert len(served) == 3 * lanes
    assert sorted(served) == sorted((f"p{i}", n) for i in range(lanes) for n in range(3))
    assert lookups <= 20 * len(served), lookups  # was about 1/w = 1000 a pop per lane


def test_fair_queue_keeps_its_order_and_shares_with_small_weights() -> None:
    """The skip changes no order: a weight 0.5 lane gets one turn for the others' two."""
    queue: FairQueue[tuple[str, int]] = FairQueue(lambda item: item[0], {"half": 0.5})
    for n in range(6):
        queue.append(("one", n))
        queue.append(("half", n))
    order = [queue.popleft()[0] for _ in range(6)]
    assert order.count("one") == 4
    assert order.count("half") == 2


# -- no option value stops the supervisor ---------------------------------------------------------


async def test_a_retry_whose_wait_cannot_be_slept_still_gives_the_call_one_result(
    autojump_clock: trio.abc.Clock,
) -> None:
    """`Retry(backoff=-1)` was accepted, and its first retry's `trio.sleep(-1)` raised in the
    runtime's nursery: the supervisor stopped and the caller got no result at all. The values
    are refused now; and were one forced in, the wait is no longer one the runtime can die of."""
    retry = Retry(attempts=3, backoff=0.1, jitter=0)
    msgspec.structs.force_setattr(retry, "backoff", -1.0)  # what a constructor no longer allows

    @tool(idempotent=True, retry=retry)
    async def flaky() -> str:
        """Down once."""
        ran["flaky"] += 1
        if ran["flaky"] == 1:
            raise ToolUnavailable("restarting")
        return "ok"

    @tool
    async def other() -> str:
        """Another tool."""
        return "served"

    async with open_runtime([flaky, other], tracing=False) as rt:
        with trio.fail_after(5):
            result = await rt.call(call("1", "flaky"))
        assert isinstance(result, ToolSuccess), result
        assert ran["flaky"] == 2
        assert (await rt.call(call("2", "other"))).ok


# -- Retry(on=...) as users write it --------------------------------------------------------------


class RowLocked(Exception):
    """A database's transient error."""


@tool(idempotent=True, retry=Retry(attempts=3, backoff=0.1, jitter=0, on=(ConnectionError,)))
async def fetch(mode: str) -> str:
    """Fails with `mode` until its second attempt."""
    ran[mode] += 1
    if ran[mode] < 3:
        if mode == "refused":
            raise ConnectionRefusedError("connection refused")  # a ConnectionError subclass
        if mode == "bad":
            raise ValueError("bad row")
        if mode == "down":
            raise ToolUnavailable("down")
    return f"{mode} ok"


def _is_locked(exc: BaseException) -> bool:
    return isinstance(exc, RowLocked) and "locked" in str(exc)


@tool(idempotent=True, retry=Retry(attempts=4, backoff=0.1, jitter=0, on=_is_locked))
async def write_row(row: int) -> str:
    """Locked twice, then written."""
    ran["write_row"] += 1
    if ran["write_row"] <= 2:
        raise RowLocked("row is locked")
    if row < 0:
        raise RowLocked("no such row")
    return "written"


@tool(idempotent=True, retry=Retry(attempts=3, backoff=0.1, jitter=0, on=(ConnectionError, "timeout")))
async def mixed(mode: str) -> str:
    """Hangs or refuses until its third attempt."""
    ran[mode] += 1
    if ran[mode] < 3:
        if mode == "hang":
            await trio.sleep(10)
        raise ConnectionResetError("reset")
    return "ok"


def _raises(exc: BaseException) -> bool:
    raise RuntimeError("a predicate with a bug")


@tool(idempotent=True, retry=Retry(attempts=3, backoff=0.1, jitter=0, on=_raises))
async def judged_badly() -> str:
    """Always fails; its predicate raises."""
    ran["judged_badly"] += 1
    raise RowLocked("locked")


async def test_retry_on_an_exception_type_retries_that_exception_and_its_subclasses_only(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with open_runtime([fetch], tracing=False) as rt:
        refused = await rt.call(call("1", "fetch", mode="refused"))
        assert isinstance(refused, ToolSuccess), refused
        assert ran["refused"] == 3
        bad = await rt.call(call("2", "fetch", mode="bad"))
        assert isinstance(bad, ToolFailure)
        assert bad.kind is FailureKind.ERROR
        assert ran["bad"] == 1  # a ValueError is its answer: not retried
        down = await rt.call(call("3", "fetch", mode="down"))
        assert isinstance(down, ToolFailure)
        assert down.kind is FailureKind.UNAVAILABLE
        assert ran["down"] == 1  # `on` names only ConnectionError now
        assert rt.statistics().tools["fetch"].retries == 2


async def test_retry_on_a_predicate_decides_from_the_exception(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime([write_row], tracing=False) as rt:
        assert (await rt.call(call("1", "write_row", row=1))).ok
        assert ran["write_row"] == 3
        ran.clear()
        failed = await rt.call(call("2", "write_row", row=-1))
        assert isinstance(failed, ToolFailure)
        assert "no such row" in failed.message
        assert ran["write_row"] == 3  # two locked attempts retried, "no such row" not


async def test_retry_on_mixes_exception_types_and_failure_kinds(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime([mixed], tracing=False) as rt:
        result = await rt.call(call("1", "mixed", mode="hang"), timeout=60)
        assert result.ok, result
        result = await rt.call(call("2", "mixed", mode="reset"))
        assert result.ok, result
        assert ran == Counter({"hang": 3, "reset": 3})


async def test_a_retry_predicate_that_raises_is_no_retry_and_the_runtime_serves_on(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with open_runtime([judged_badly, fetch], tracing=False) as rt:
        result = await rt.call(call("1", "judged_badly"))
        assert isinstance(result, ToolFailure)
        assert result.kind is FailureKind.ERROR
        assert ran["judged_badly"] == 1
        assert (await rt.call(call("2", "fetch", mode="refused"))).ok


def test_retry_on_takes_a_single_type_a_kind_name_or_a_predicate() -> None:
    assert ConnectionError in Retry(on=ConnectionError).on
    assert FailureKind.TIMEOUT in Retry(on="timeout").on
    assert _is_locked in Retry(on=_is_locked).on
    assert Retry(on=[FailureKind.UNAVAILABLE, TimeoutError]).on == {FailureKind.UNAVAILABLE, TimeoutError}


@pytest.mark.parametrize("on", [(int,), ("no such kind",), (42,), ("rejected",), (FailureKind.CANCELLED,)])
def test_retry_on_refuses_what_is_neither_a_kind_an_exception_type_nor_a_predicate(on: Any) -> None:
    with pytest.raises(ToolDefinitionError, match=r"Retry: on="):
        Retry(on=on)
