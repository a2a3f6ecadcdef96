"""Attacks on the shared-server promises (issue 42): a hostile tenant and failing stores. Each
test names a promise a hostile try broke on main; each was a strict xfail until it held."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
import trio
import trio.testing
from redis_server import running_redis

from runtime import (
    Artifacts,
    Cache,
    CircuitBreaker,
    Dedupe,
    FailureKind,
    ResourceLinkPart,
    ToolCall,
    ToolFailure,
    ToolSuccess,
    mcp,
    open_runtime,
    tool,
)
from runtime.stores import DegradingStore, RedisStore, SQLiteStore

ROOT = Path(__file__).resolve().parent.parent


def C(call_id: str, name: str, arguments: str) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


# -- fair admission: one principal's burst cannot starve another's calls ------------------------


async def test_fair_admission_holds_when_one_principal_fills_the_mailbox(
    autojump_clock: trio.abc.Clock,
) -> None:
    served: list[str] = []

    @tool(max_concurrency=1, mailbox_size=4)
    async def work(who: str, i: int) -> str:
        await trio.sleep(1)
        served.append(who)
        return who

    async with open_runtime([work], fair=True) as rt, trio.open_nursery() as nursery:
        for i in range(40):  # eve's burst: 40 concurrent requests, 4 fit the mailbox
            call = C(f"e{i}", "work", f'{{"who":"eve","i":{i}}}')
            nursery.start_soon(lambda call=call: rt.call(call, principal="eve"))
        await trio.sleep(0.5)
        result = await rt.call(C("b", "work", '{"who":"bob","i":0}'), principal="bob")
        assert result.ok
        nursery.cancel_scope.cancel()
    # deficit round robin: bob's call is served within a few turns, not after eve's whole burst
    assert served.index("bob") <= 6, served.index("bob")


# -- idempotency keys: a tenant's key names its own calls, never another's ----------------------


async def test_a_shared_cache_never_answers_a_call_with_another_tenants_result_for_other_arguments() -> None:
    @tool(cache=Cache(ttl=60, shared=True), read_only=True)
    def price(item: str) -> str:
        return f"price of {item}: 10"

    async with open_runtime([price]) as rt:
        # eve's request carries a key bob's client also uses (a request id, a guessable counter)
        await rt.call(
            C("e1", "price", '{"item":"evil"}'), principal="eve", metadata={"idempotency_key": "req-42"}
        )
        result = await rt.call(
            C("b1", "price", '{"item":"apples"}'), principal="bob", metadata={"idempotency_key": "req-42"}
        )
    assert result.content == "price of apples: 10"


async def test_two_tenants_with_the_same_idempotency_key_get_their_own_results_from_an_mcp_server() -> None:
    server = mcp.stdio(
        sys.executable, ["-m", "runtime", "serve", "tests.attack_servers:registry"], cwd=str(ROOT)
    )
    results = {}
    async with open_runtime([], mcp_servers=[server]) as rt:
        for who in ("alice", "bob"):  # each tenant's own checkout numbering
            call = ToolCall(id=who, name="charge", arguments={"order": f"{who}-order-1", "amount": 5})
            results[who] = await rt.call(call, principal=who, metadata={"idempotency_key": "checkout-1"})
    assert results["alice"].content == "charged 5 for alice-order-1"
    assert results["bob"].content == "charged 5 for bob-order-1"  # not alice's journaled result


# -- a hung store never costs a call its result: artifacts too ----------------------------------


@tool
def report(n: int) -> str:
    return "x" * n


async def test_a_hung_redis_artifact_store_never_costs_a_call_its_result() -> None:
    with running_redis() as server:
        assert server.process is not None
        async with open_runtime([report], artifacts=Artifacts(store=RedisStore(server.url))) as rt:
            warm = await rt.call(C("w", "report", '{"n":200000}'), timeout=5)
            assert warm.ok
            os.kill(server.process.pid, signal.SIGSTOP)  # the store hangs: every step waits
            try:
                result = await rt.call(C("c", "report", '{"n":300000}'), timeout=1.0)
            finally:
                os.kill(server.process.pid, signal.SIGCONT)
    # kept in memory in the store's stead, as when the store fails (its Redis step waited out
    # the whole 1 s)
    assert result.ok, result


async def test_a_locked_sqlite_artifact_store_never_costs_a_call_its_result(tmp_path: Path) -> None:
    path = tmp_path / "artifacts.db"
    async with open_runtime([report], artifacts=Artifacts(store=SQLiteStore(path))) as rt:
        warm = await rt.call(C("w", "report", '{"n":200000}'), timeout=5)
        assert warm.ok
        holder = sqlite3.connect(path, timeout=0, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")  # another process's long transaction
        try:
            result = await rt.call(C("c", "report", '{"n":300000}'), timeout=1.5)
        finally:
            holder.close()
        await trio.sleep(0.5)  # the store's thread ends once the file is free
    assert result.ok, result  # kept in memory, as when the store fails; not TIMEOUT after 5 s of busy wait


# -- exactly once across processes: a journal written during an outage reaches the shared store --


async def test_a_charge_made_during_a_redis_outage_is_not_run_again_by_another_process() -> None:
    charged: list[str] = []

    @tool(dedupe=Dedupe(ttl=600))
    def charge(order: str) -> str:
        charged.append(order)
        return f"charged {order}"

    with running_redis() as server:
        async with (
            open_runtime([charge], store=RedisStore(server.url)) as a,
            open_runtime([charge], store=RedisStore(server.url)) as b,
        ):  # two server processes behind one load balancer
            await a.call(C("w", "charge", '{"order":"warm"}'), principal="alice")
            server.stop()  # Redis goes away
            during = await a.call(C("c1", "charge", '{"order":"o-1"}'), principal="alice")
            assert during.ok  # served from memory, the journal kept there
            server.start()  # Redis is back
            await trio.sleep(1)
            replay = await b.call(
                C("c2", "charge", '{"order":"o-1"}'), principal="alice"
            )  # the client retries
    assert replay.ok
    assert charged == ["warm", "o-1"]


# -- streams: nothing piles up -------------------------------------------------------------------


async def test_a_long_stream_is_never_held_whole_in_memory() -> None:
    @tool
    async def feed(n: int) -> AsyncIterator[str]:
        for i in range(n):
            yield chr(97 + i % 26) * (1 << 20)  # 1 MiB a chunk

    async with open_runtime([feed]) as rt:
        tracemalloc.start()
        try:
            async with contextlib.aclosing(rt.stream(C("s", "feed", '{"n":64}'))) as items:
                async for item in items:
                    last = item  # the reader drops each chunk as it comes
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert isinstance(last, ToolSuccess)
    assert len(last.content) < 101_000  # cut to max_result_chars, as it should be
    assert peak < 16 << 20, f"{peak / 2**20:.0f} MiB held for a result cut to 100,000 characters"


# -- breakers open only when the server is down ---------------------------------------------------


async def test_one_tenants_crashing_input_does_not_open_the_breaker_for_everyone(
    autojump_clock: trio.abc.Clock,
) -> None:
    class Corrupt(Exception):
        pass

    @tool(restart_on=(Corrupt,), breaker=CircuitBreaker(failures=3, cool_down=30))
    async def parse(doc: str) -> str:
        if doc == "evil":
            raise Corrupt("parser state corrupt")  # the tool's own error: it restarts
        await trio.sleep(1)
        return doc

    async with open_runtime([parse]) as rt:
        async with trio.open_nursery() as nursery:
            for i in range(3):  # bob's calls in flight when the actor restarts
                call = C(f"b{i}", "parse", '{"doc":"ok"}')
                nursery.start_soon(lambda call=call: rt.call(call, principal="bob"))
            await trio.sleep(0.1)
            evil = await rt.call(C("e", "parse", '{"doc":"evil"}'), principal="eve")
        assert isinstance(evil, ToolFailure)
        assert evil.kind is FailureKind.ERROR
        await trio.sleep(2)  # restarted, serving again
        later = await rt.call(C("b9", "parse", '{"doc":"ok"}'), principal="bob")
    assert later.ok, later  # not UNAVAILABLE "circuit open" for 30 s


async def test_a_cache_invalidated_after_a_redis_outage_stays_invalidated() -> None:
    now = ["10"]

    @tool(cache=Cache(ttl=600), read_only=True)
    def price(item: str) -> str:
        return f"{item}: {now[0]}"

    with running_redis() as server:

        def store() -> DegradingStore:
            return DegradingStore(RedisStore(server.url), retry_after=0.2)

        async with open_runtime([price], store=store()) as a, open_runtime([price], store=store()) as b:
            await a.call(C("w", "price", '{"item":"warm"}'), principal="p")
            server.stop()
            during = await a.call(C("c1", "price", '{"item":"apples"}'), principal="p")  # kept in a's memory
            assert during.content == "apples: 10"
            server.start()
            now[0] = "12"  # the price changes, and the cache is told (on the shared store)
            await b.invalidate("price")
            await trio.sleep(0.5)
            await a.call(C("c2", "price", '{"item":"pears"}'), principal="p")  # a's next step copies back
            after = await b.call(C("c3", "price", '{"item":"apples"}'), principal="p")
    assert after.content == "apples: 12"


# -- per-principal isolation: one tenant never evicts another's artifacts or cache entries ---------


async def test_one_tenants_artifacts_never_evict_anothers(mock_clock: trio.testing.MockClock) -> None:
    # A clock that stands still: the artifacts are written to disk in threads, and while a thread
    # works on a loaded machine an autojump clock ran on past their ttl (3600 s: "expired")
    @tool
    async def export(who: str, n: int) -> str:
        return (who + "-") * (n // 4)

    async with open_runtime([export], artifacts=Artifacts(max_bytes=1 << 20, tools=True)) as rt:
        kept = await rt.call(C("b1", "export", '{"who":"bob","n":300000}'), principal="bob")
        handle = next(p.name for p in kept.parts if isinstance(p, ResourceLinkPart))
        for i in range(4):  # eve's own large results, over the store's cap together
            await rt.call(C(f"e{i}", "export", f'{{"who":"eve{i}","n":300000}}'), principal="eve")
        page = await rt.call(C("b2", "read_artifact", {"handle": handle, "length": 10}), principal="bob")
    assert page.ok, page.content


async def test_one_tenants_distinct_calls_never_evict_anothers_cache_entries(
    autojump_clock: trio.abc.Clock,
) -> None:
    ran: list[str] = []

    # async: a thread's real time would let the autojump clock run past the ttl (60 s a call)
    @tool(cache=Cache(ttl=600, max_entries=100), read_only=True)
    async def quote(item: str) -> str:
        ran.append(item)
        return item

    async with open_runtime([quote]) as rt:
        await rt.call(C("b1", "quote", '{"item":"bobs"}'), principal="bob")
        for i in range(200):  # eve's flood of distinct calls
            await rt.call(C(f"e{i}", "quote", f'{{"item":"e{i}"}}'), principal="eve")
        await rt.call(C("b2", "quote", '{"item":"bobs"}'), principal="bob")
    assert ran.count("bobs") == 1  # bob's second call is a hit


# -- MCP serving: a client's notifications hold nothing for good ----------------------------------


def test_a_client_repeating_initialized_does_not_grow_the_servers_memory() -> None:
    server = subprocess.Popen(
        [sys.executable, "-m", "runtime", "serve", "tests.mcp_fixtures:registry"],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert server.stdin is not None
    assert server.stdout is not None

    def send(message: dict[str, Any]) -> None:
        assert server.stdin is not None
        server.stdin.write((json.dumps(message) + "\n").encode())
        server.stdin.flush()

    def listed(request_id: int) -> None:  # a round trip: everything sent before is handled
        send({"jsonrpc": "2.0", "id": request_id, "method": "tools/list"})
        assert server.stdout is not None
        assert b'"tools"' in server.stdout.readline()

    try:
        send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "eve", "version": "1"},
                },
            }
        )
        assert b'"result"' in server.stdout.readline()
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        listed(2)
        before = psutil.Process(server.pid).memory_info().rss
        for _ in range(4_000):  # a hostile client's notifications (each held ~1.5 KB)
            send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        listed(3)
        grown = psutil.Process(server.pid).memory_info().rss - before
    finally:
        server.stdin.close()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        server.stdout.close()
    assert grown < 2 << 20, f"the server grew {grown / 2**20:.0f} MiB"
