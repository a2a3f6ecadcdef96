"""Attacks on detached, deferred and durable calls (issue 43): each test names a promise of
docs/how-to/detached-calls.md, DESIGN.md 3.14 or the API note that a hostile try broke (a
hostile tenant or model, a store that stalls, a call that ends at a bad moment).

Each is written from the promise, not from the feature's own tests, with real components (a
real redis-server from tests/redis_server.py, SQLite files, trio's MockClock for time). Each
failed on the code it was written against (attack-3) and passes since its fix.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest
import trio
from redis_server import RedisServer, running_redis

from runtime import (
    Durable,
    InvalidArguments,
    ToolCall,
    ToolFailure,
    ToolPending,
    open_runtime,
    tool,
)
from runtime.stores import RedisStore, StoreError

# -- tools ---------------------------------------------------------------------------------------

PAID: list[int] = []


@tool(requires_approval=True)
def pay(amount: int) -> str:
    """Pay an amount (it needs an approval)."""
    PAID.append(amount)
    return f"paid {amount}"


REPORTS: list[str] = []


@tool
async def report(region: str) -> str:
    """Build a report (a side effect per run)."""
    REPORTS.append(region)
    await trio.sleep(0.01)
    return f"report for {region}"


@pytest.fixture(autouse=True)
def fresh_effects() -> Iterator[None]:
    PAID.clear()
    REPORTS.clear()
    yield
    PAID.clear()
    REPORTS.clear()


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A redis-server of this test's own (it is stopped with SIGSTOP: not the session's)."""
    with running_redis() as server:
        yield server


class StallingRedis(RedisStore):
    """A real RedisStore whose server is frozen (SIGSTOP) for the one step whose new value holds
    `stall_on`, and thawed (SIGCONT) once the client gave up on it: the step was sent, the client
    timed out (StoreError), and the server then carries it out, as a Redis paused by a long
    fork, a failover or a network stall does."""

    def __init__(self, server: RedisServer, stall_on: bytes, *, step: str = "swap") -> None:
        super().__init__(server.url, timeout=0.5)
        self.server = server
        self.stall_on = stall_on
        self.step = step
        self.armed = False
        self.stalled = 0

    async def _stalled(self, step: str, value: bytes | None, do: Any) -> Any:
        process = self.server.process
        if not (self.armed and step == self.step and value is not None and self.stall_on in value):
            return await do()
        assert process is not None
        self.armed = False
        self.stalled += 1
        os.kill(process.pid, signal.SIGSTOP)
        try:
            return await do()
        finally:
            os.kill(process.pid, signal.SIGCONT)

    async def swap(self, key: str, old: bytes | None, new: bytes | None, ttl: float | None = None) -> bool:
        done: bool = await self._stalled(
            "swap", new, lambda: super(StallingRedis, self).swap(key, old, new, ttl)
        )
        return done

    async def add(self, key: str, value: bytes, ttl: float | None = None) -> bool:
        done: bool = await self._stalled(
            "add", value, lambda: super(StallingRedis, self).add(key, value, ttl)
        )
        return done


# -- a hostile model -----------------------------------------------------------------------------


async def test_a_hostile_call_id_does_not_take_the_principals_slots(autojump_clock: Any) -> None:
    logging.disable(logging.CRITICAL)
    try:
        async with open_runtime([pay], durable=Durable(max_per_principal=2)) as rt:
            for i in range(2):  # the model's own call ids: text it chose, not valid Unicode
                bad = await rt.call(
                    ToolCall(id=f"call_{i}\udc80", name="pay", arguments={"amount": 1}), principal="u1"
                )
                assert isinstance(bad, ToolFailure)
            await trio.sleep(3600)  # an hour later: nothing of theirs is live
            assert await rt.pending(principal="u1") == []
            honest = await rt.call(
                ToolCall(id="call_ok", name="pay", arguments={"amount": 7}), principal="u1"
            )
            assert isinstance(honest, ToolPending), honest.content
    finally:
        logging.disable(logging.NOTSET)


# -- a store that stalls -------------------------------------------------------------------------


async def test_an_approval_redis_stalled_on_still_runs_once(own_redis: RedisServer) -> None:
    store = StallingRedis(own_redis, b'"decision":"approved"')
    durable = Durable(lease=1.5, poll_interval=0.1)
    async with open_runtime([pay], store=store, durable=durable) as rt:
        pending = await rt.call(ToolCall(id="c1", name="pay", arguments={"amount": 5}), principal="u1")
        assert isinstance(pending, ToolPending)
        handle = rt.detached(pending.detached_id, principal="u1")
        store.armed = True
        with pytest.raises(StoreError):  # allowed: the journal did not answer in time
            await handle.approve()
        assert store.stalled == 1
        await handle.approve()  # the application retries: the status as it is
        result: Any = None
        with trio.move_on_after(10):  # several leases and sweeps
            result = await handle.result()
        assert result is not None, f"the approved call never ran: {await handle.status()}"
        assert result.content == "paid 5"
        assert PAID == [5]


async def test_a_detach_retried_after_a_redis_stall_runs_once(own_redis: RedisServer) -> None:
    store = StallingRedis(own_redis, b'"id":"report-eu"', step="add")
    durable = Durable(lease=1.5, poll_interval=0.1)
    call = ToolCall(id="c1", name="report", arguments={"region": "EU"})
    async with open_runtime([report], store=store, durable=durable) as rt:
        await rt.call(ToolCall(id="c0", name="report", arguments={"region": "warm"}))  # the actor is up
        store.armed = True
        with pytest.raises(StoreError):  # allowed: nothing answered in time
            await rt.detach(call, principal="u1", id="report-eu")
        assert store.stalled == 1
        handle = await rt.detach(call, principal="u1", id="report-eu")  # the client retries
        result: Any = None
        with trio.move_on_after(10):
            result = await handle.result()
        assert result is not None, f"the detached call never ran: {await handle.status()}"
        assert result.content == "report for EU"
        assert REPORTS == ["warm", "EU"]


# -- a hostile tenant ----------------------------------------------------------------------------


async def test_the_empty_principal_is_not_the_anonymous_one(autojump_clock: Any) -> None:
    async with open_runtime([report]) as rt:
        anonymous = await rt.detach(ToolCall(id="c1", name="report", arguments={"region": "EU"}), id="r-1")
        tenant = await rt.detach(
            ToolCall(id="c2", name="report", arguments={"region": "US"}), id="r-1", principal=""
        )
        assert (await anonymous.result()).content == "report for EU"
        assert (await tenant.result()).content == "report for US"
        assert sorted(REPORTS) == ["EU", "US"]


async def test_edited_arguments_of_a_wrong_type_are_invalid_arguments(autojump_clock: Any) -> None:
    async with open_runtime([pay]) as rt:
        pending = await rt.call(ToolCall(id="c1", name="pay", arguments={"amount": 5}), principal="u1")
        assert isinstance(pending, ToolPending)
        handle = rt.detached(pending.detached_id, principal="u1")
        hostile: Any
        for hostile in ([5], 5):
            with pytest.raises(InvalidArguments) as raised:
                await handle.approve(arguments=hostile)
            assert raised.value.path == "$"
        assert (await handle.status()).waiting_for == "approval"
        assert PAID == []


# -- a hostile model's arguments -----------------------------------------------------------------


def _nested(depth: int) -> dict[str, Any]:
    top: dict[str, Any] = {}
    inner = top
    for _ in range(depth):
        inner["n"] = {}
        inner = inner["n"]
    return top


async def test_a_detached_call_with_deeply_nested_arguments_is_invalid_arguments(autojump_clock: Any) -> None:
    deep = _nested(3000)
    async with open_runtime([report]) as rt:
        plain = await rt.call(ToolCall(id="c0", name="report", arguments=deep), principal="u1")
        assert isinstance(plain, ToolFailure)
        assert plain.kind.value == "invalid_arguments"
        handle = await rt.detach(ToolCall(id="c1", name="report", arguments=deep), principal="u1")
        result = await handle.result()
        assert isinstance(result, ToolFailure)
        assert result.kind.value == "invalid_arguments"
        assert REPORTS == []
