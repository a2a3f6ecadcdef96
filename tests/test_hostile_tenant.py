"""One shared runtime, several tenants, one of them hostile (issue 42): what one principal does
never costs another its breaker, its replay journal or its cached answers."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
import trio

from runtime import (
    CircuitBreaker,
    Dedupe,
    FailureKind,
    ToolCall,
    ToolFailure,
    ToolSuccess,
    open_runtime,
    tool,
)
from runtime.stores import MemoryStore

ran: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _reset() -> None:
    ran.clear()


def call(call_id: str, name: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=json.dumps(arguments))


# -- item 7: a breaker opens only when the server is down -----------------------------------------


@tool(timeout=2.0)
async def healthy(x: int) -> int:
    """Answers in 50 ms, well within its own 2 s."""
    ran["healthy"] += 1
    await trio.sleep(0.05)
    return x


@tool
async def untimed(x: int) -> int:
    """No timeout of its own; answers in 50 ms."""
    await trio.sleep(0.05)
    return x


async def test_a_callers_own_short_deadline_never_opens_the_breaker_for_everyone(
    autojump_clock: trio.abc.Clock,
) -> None:
    """Mallory's 5 calls with timeout=0.01 used to open the breaker (her deadline counted as a
    transport timeout), and Bob was refused UNAVAILABLE "circuit open" by a healthy tool."""
    async with open_runtime([healthy, untimed], breaker=CircuitBreaker(failures=5), tracing=False) as rt:
        for i in range(5):
            for name in ("healthy", "untimed"):
                mine = await rt.call(call(f"m{i}", name, x=i), timeout=0.01, principal="mallory")
                assert isinstance(mine, ToolFailure)
                assert mine.kind is FailureKind.TIMEOUT
        for name in ("healthy", "untimed"):
            bobs = await rt.call(call("b", name, x=7), principal="bob")
            assert isinstance(bobs, ToolSuccess), bobs
            assert rt.statistics().tools[name].breaker == "closed"


@tool(timeout=0.1)
async def hangs(x: int) -> int:
    """Never answers within its own timeout."""
    await trio.sleep(10)
    return x


async def test_the_tools_own_timeout_still_opens_the_breaker(autojump_clock: trio.abc.Clock) -> None:
    async with open_runtime([hangs], breaker=CircuitBreaker(failures=3), tracing=False) as rt:
        for i in range(3):  # its own 0.1 s, inside the caller's longer deadline
            result = await rt.call(call(str(i), "hangs", x=i), timeout=5)
            assert isinstance(result, ToolFailure)
            assert result.kind is FailureKind.TIMEOUT
        refused = await rt.call(call("x", "hangs", x=0))
        assert isinstance(refused, ToolFailure)
        assert "circuit open" in refused.message


# -- item 4: one tenant cannot evict another's replay journal -------------------------------------


@tool(idempotent=True, dedupe=Dedupe(ttl=3600))
async def pay(order: str) -> str:
    """A charge that must happen once per order."""
    ran[order] += 1
    return f"paid {order}"


async def test_another_principals_flood_of_dedupe_calls_never_evicts_a_journal_entry(
    autojump_clock: trio.abc.Clock,
) -> None:
    """Another principal made 100,001 distinct dedupe calls (the default MemoryStore holds
    100,000 keys, shared by every tool and principal, least recently written first out) and
    Bob's replay ran his charge again. The store now makes room in the principal that holds the
    most: Mallory's flood evicts Mallory's own oldest entries; Bob's stays. (At a tenth of the
    size: the same store, 1,000 keys.)"""
    async with open_runtime([pay], store=MemoryStore(max_keys=1000), tracing=False) as rt:
        first = await rt.call(call("b1", "pay", order="bob-1"), principal="bob")
        assert first.ok
        for start in range(0, 1500, 250):
            batch = [call(f"m{i}", "pay", order=f"m-{i}") for i in range(start, start + 250)]
            assert all(r.ok for r in await rt.call_many(batch, principal="mallory"))
        replay = await rt.call(call("b2", "pay", order="bob-1"), principal="bob")
        assert isinstance(replay, ToolSuccess)
        assert replay.value == "paid bob-1"
        assert ran["bob-1"] == 1, "Bob was charged twice"
        # Mallory's newest are kept, her oldest made room
        assert (await rt.call(call("m-new", "pay", order="m-1499"), principal="mallory")).ok
        assert ran["m-1499"] == 1
        assert (await rt.call(call("m-old", "pay", order="m-0"), principal="mallory")).ok
        assert ran["m-0"] == 2


async def test_a_full_memory_store_makes_room_in_the_group_that_holds_the_most() -> None:
    store = MemoryStore(max_keys=10)
    await store.set("journal:pay\x00bob\x00a", b"bob's")
    await store.set("journal:pay\x00carol\x00a", b"carol's")
    for i in range(50):
        await store.set(f"journal:pay\x00mallory\x00{i}", b"hers")
    assert len(store) == 10
    assert await store.get("journal:pay\x00bob\x00a") == b"bob's"
    assert await store.get("journal:pay\x00carol\x00a") == b"carol's"
    assert await store.keys("journal:pay\x00mallory\x00") == [
        f"journal:pay\x00mallory\x00{i}" for i in range(42, 50)
    ]
    # new groups of one key each: room is made in Mallory's until she is no larger than them
    for i in range(7):
        await store.set(f"journal:pay\x00p{i}\x00a", b"v")
    assert len(store) == 10
    assert await store.keys("journal:pay\x00mallory\x00") == ["journal:pay\x00mallory\x0049"]
    assert await store.get("journal:pay\x00bob\x00a") == b"bob's"
    assert await store.get("journal:pay\x00carol\x00a") == b"carol's"
