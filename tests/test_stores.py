"""The stores (`runtime.stores`, DESIGN.md 3.11): one contract, kept by `MemoryStore`,
`SQLiteStore` (a file under tmp_path) and `RedisStore` (a real redis-server,
tests/redis_server.py); and `DegradingStore`, which answers from memory while its store is down.

MemoryStore's TTLs run on trio's clock, so its tests run on a MockClock and assert exact times;
SQLite's and Redis's run on the wall clock (and Redis's on the server's), so theirs use small
real TTLs and assert bounds. The racers are exact everywhere: 1,000 concurrent steps split over
two handles on the same state (two connections; for memory, the one store).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import psutil
import pytest
import trio
from redis_server import RedisServer, running_redis
from trio.testing import MockClock

from runtime import Cache, Dedupe, RateLimit, Runtime, ToolCall, ToolSuccess, open_runtime, tool
from runtime.stores import DegradingStore, MemoryStore, RedisStore, SQLiteStore, Store, StoreError

TTL = 0.3  # seconds: virtual on memory, real on SQLite and Redis


def _slack(clock: MockClock | None) -> float:
    """How long past a TTL a real store may still hold the key (Redis expires by the ms)."""
    return 0.0 if clock is not None else 0.03


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["memory", "sqlite", "redis"])
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture(scope="module")
def server(backend: str, request: pytest.FixtureRequest) -> RedisServer | None:
    """The session's redis-server for the Redis runs, asked for before any test's leak check
    begins (a fixture of a wider scope), so it is not a process the test left behind."""
    if backend != "redis":
        return None
    redis: RedisServer = request.getfixturevalue("redis_server")
    return redis


@pytest.fixture
def clock(backend: str) -> MockClock | None:
    """Trio's virtual clock for the store that runs on it; the wall clock for the others."""
    return MockClock(autojump_threshold=0) if backend == "memory" else None


@pytest.fixture
async def opener(
    backend: str, server: RedisServer | None, tmp_path: Path
) -> AsyncIterator[Callable[[], Store]]:
    """Opens handles on one state: for SQLite and Redis each is its own connection (as another
    process's would be); for memory, the one store of this process. All closed at the end."""
    opened: list[Store] = []
    memory = MemoryStore()
    if server is not None:
        server.flush()

    def open_store() -> Store:
        store: Store
        if backend == "memory":
            store = memory
        elif backend == "sqlite":
            store = SQLiteStore(tmp_path / "state.db")
        else:
            assert server is not None
            # The contract is not about speed: a step's own deadline (1 s by default, the wait
            # for a pooled connection included) is tested below with stores of its own. Here
            # 1,000 racers queue for 16 connections, which a loaded machine serves slower than that.
            store = RedisStore(server.url, timeout=30.0)
        opened.append(store)
        return store

    yield open_store
    for store in opened:
        await store.aclose()


@pytest.fixture
def store(opener: Callable[[], Store]) -> Store:
    return opener()


# -- the contract -----------------------------------------------------------------------------


async def test_set_get_replace_and_delete(store: Store, clock: MockClock | None) -> None:
    assert await store.get("k") is None
    await store.set("k", b"one")
    assert await store.get("k") == b"one"
    await store.set("k", b"two")
    assert await store.get("k") == b"two"
    assert await store.delete("k") is True
    assert await store.get("k") is None
    assert await store.delete("k") is False


async def test_values_are_bytes_kept_exactly(store: Store, clock: MockClock | None) -> None:
    values = {
        "empty": b"",
        "resp": b"$-1\r\n*2\r\n+OK\r\n-ERR\r\n:1\r\n",
        "all": bytes(range(256)),
        "big": os.urandom(1 << 20),
    }
    for key, value in values.items():
        await store.set(key, value)
    for key, value in values.items():
        got = await store.get(key)
        assert type(got) is bytes
        assert got == value


async def test_a_key_lives_for_its_ttl(store: Store, clock: MockClock | None) -> None:
    """get, add, delete, keys and incr all see a key whose TTL passed as gone.

    On a real clock the steps before the TTL must take less than it: a loaded machine may hold
    them up longer, and then the round is tried again (three times at most) on fresh keys."""
    now = trio.current_time if clock is not None else time.monotonic
    for round_ in range(3):
        p = f"ttl{round_}:"
        began = now()
        await store.set(p + "set", b"v", ttl=TTL)
        assert await store.add(p + "add", b"v", ttl=TTL)
        assert await store.incr(p + "count", 5, ttl=TTL) == 5
        await store.set(p + "forever", b"v")
        await store.set(p + "gone", b"v", ttl=TTL)
        await trio.sleep(TTL / 2)
        halfway = await store.get(p + "set")
        count = await store.incr(p + "count", 1, ttl=100)  # a TTL applies only on creation
        keys = sorted(await store.keys(p))
        if now() - began < TTL:
            break
        assert clock is None  # on trio's clock no time passes but the sleeps
    else:
        raise AssertionError("three rounds in a row took longer than the TTL")
    assert (halfway, count) == (b"v", 6)
    assert keys == [p + k for k in ("add", "count", "forever", "gone", "set")]
    await trio.sleep(TTL / 2 + _slack(clock))
    assert await store.get(p + "set") is None
    assert await store.keys(p) == [p + "forever"]
    assert await store.delete(p + "gone") is False  # expired: it held nothing
    assert await store.add(p + "add", b"again")  # the claim ran out: a new one is taken
    assert await store.incr(p + "count") == 1  # a new window
    assert await store.get(p + "forever") == b"v"


async def test_memory_ttl_is_exact_on_trio_clock(autojump_clock: MockClock) -> None:
    store = MemoryStore()
    await store.set("k", b"v", ttl=2.0)
    await trio.sleep(2.0 - 1e-9)
    assert await store.get("k") == b"v"
    await trio.sleep(1e-9)
    assert await store.get("k") is None
    assert trio.current_time() == 2.0


async def test_add_claims_a_key_once(store: Store, clock: MockClock | None) -> None:
    assert await store.add("claim", b"first") is True
    assert await store.add("claim", b"second") is False
    assert await store.get("claim") == b"first"
    assert await store.delete("claim") is True
    assert await store.add("claim", b"third") is True
    assert await store.get("claim") == b"third"


async def test_swap_replaces_only_what_was_read(store: Store, clock: MockClock | None) -> None:
    """The compare-and-set the journal of detached calls is made of (issue 43)."""
    assert await store.swap("s", None, b"one") is True  # absent -> one
    assert await store.swap("s", None, b"two") is False  # it holds something now
    assert await store.swap("s", b"zero", b"two") is False  # not what it holds
    assert await store.get("s") == b"one"
    assert await store.swap("s", b"one", b"two", ttl=TTL) is True
    assert await store.get("s") == b"two"
    assert await store.swap("s", b"two", None) is True  # remove it
    assert await store.get("s") is None
    assert await store.swap("s", b"two", None) is False
    await store.set("t", b"v", ttl=TTL)
    await trio.sleep(TTL + _slack(clock))
    assert await store.swap("t", b"v", b"w") is False  # expired: it holds nothing
    assert await store.swap("t", None, b"w") is True
    await store.incr("n")
    assert await store.swap("n", None, b"x") is False  # a counter is something


async def test_racing_swaps_make_each_change_once(opener: Callable[[], Store]) -> None:
    """Read-modify-swap loops from two handles: every increment lands, none twice."""
    handles = [opener(), opener()]
    await handles[0].set("cas", b"0")

    async def bump(store: Store) -> None:
        while True:
            old = await store.get("cas")
            assert old is not None
            if await store.swap("cas", old, str(int(old) + 1).encode()):
                return

    async with trio.open_nursery() as nursery:
        for i in range(200):
            nursery.start_soon(bump, handles[i % 2])
    assert await handles[1].get("cas") == b"200"


async def test_incr_counts_from_zero_and_refuses_a_non_integer(store: Store, clock: MockClock | None) -> None:
    assert await store.incr("n") == 1
    assert await store.incr("n", 41) == 42
    assert await store.incr("n", -50) == -8
    assert await store.get("n") == b"-8"
    await store.set("text", b"not a number")
    with pytest.raises(ValueError, match="does not hold an integer"):
        await store.incr("text")
    assert await store.get("text") == b"not a number"


async def test_keys_and_delete_prefix_take_glob_characters_literally(
    store: Store, clock: MockClock | None
) -> None:
    names = ["a*", "a?", "a[b]", "a\\z", "ab", "a\x00b", "a\x00c", "é*", "b"]
    for name in names:
        await store.set(name, name.encode())
    assert sorted(await store.keys("a")) == sorted(n for n in names if n.startswith("a"))
    assert await store.keys("a*") == ["a*"]
    assert await store.keys("a?") == ["a?"]
    assert await store.keys("a[") == ["a[b]"]
    assert await store.keys("a\\") == ["a\\z"]
    assert sorted(await store.keys("a\x00")) == ["a\x00b", "a\x00c"]
    assert await store.keys("é") == ["é*"]
    assert await store.keys("zzz") == []
    assert sorted(await store.keys("")) == sorted(names)
    assert await store.delete_prefix("a\x00") == 2
    assert await store.delete_prefix("a[") == 1
    assert await store.delete_prefix("a*") == 1
    assert await store.delete_prefix("nothing") == 0
    assert sorted(await store.keys("")) == ["a?", "a\\z", "ab", "b", "é*"]


async def test_take_is_a_token_bucket(store: Store, clock: MockClock | None) -> None:
    """On trio's clock (memory) every wait is exact. On a real clock (SQLite's, Redis's) a token
    comes every 0.2 s, and the steps meant to follow each other with no token coming between
    must take less than that: a loaded machine may hold them up longer (the bucket then rightly
    refilled meanwhile), and the round is tried again (three times at most) on a fresh bucket."""
    rate, burst = (20.0, 3.0) if clock is not None else (5.0, 3.0)  # a token every 0.05 s / 0.2 s
    token = 1 / rate
    now = trio.current_time if clock is not None else time.monotonic
    for round_ in range(3):
        bucket = f"bucket{round_}"
        slow = False
        began = now()
        first = [await store.take(bucket, rate, burst) for _ in range(4)]
        slow |= now() - began >= token
        await trio.sleep(first[3])
        began = now()
        refilled = [await store.take(bucket, rate, burst) for _ in range(2)]
        slow |= now() - began >= token
        await trio.sleep(burst * token * 2)  # a long quiet spell fills it to `burst`, not beyond
        began = now()
        full = [await store.take(bucket, rate, burst) for _ in range(4)]
        wait = await store.take(bucket, rate, burst, cost=2.0)  # a bigger cost waits for its tokens
        slow |= now() - began >= token
        if not slow:
            break
        assert clock is None  # on trio's clock no time passes but the sleeps
    else:
        raise AssertionError("three rounds in a row were held up longer than a token takes")
    assert first[:3] == [0.0, 0.0, 0.0]
    assert 0.0 < first[3] <= token
    if clock is not None:
        assert first[3] == token  # exact on trio's clock: no time passed
    assert refilled[0] == 0.0
    assert refilled[1] > 0.0
    assert full[:3] == [0.0, 0.0, 0.0]
    assert full[3] > 0.0
    assert token < wait <= 2 * token  # and took none meanwhile
    await trio.sleep(wait + _slack(clock))
    assert await store.take(bucket, rate, burst, cost=2.0) == 0.0
    # buckets are independent
    assert await store.take("other", rate, burst) == 0.0


async def test_a_thousand_racers_never_over_admit(
    opener: Callable[[], Store], clock: MockClock | None
) -> None:
    """1,000 concurrent `take`s, `add`s and `incr`s over two handles: exactly what there is."""
    handles = [opener(), opener()]
    taken: list[float] = []
    claimed: list[bool] = []
    counted: list[int] = []

    async def racer(i: int) -> None:
        s = handles[i % 2]
        taken.append(await s.take("race:bucket", 0.001, 100.0))
        claimed.append(await s.add("race:claim", str(i).encode(), ttl=60))
        counted.append(await s.incr("race:count"))

    async with trio.open_nursery() as nursery:
        for i in range(1000):
            nursery.start_soon(racer, i)
    assert taken.count(0.0) == 100
    assert all(w > 0 for w in taken if w != 0.0)
    assert claimed.count(True) == 1
    assert sorted(counted) == list(range(1, 1001))
    assert await handles[0].get("race:count") == b"1000"


async def test_aclose_can_be_called_twice(store: Store, clock: MockClock | None) -> None:
    await store.set("k", b"v")
    await store.aclose()
    await store.aclose()


# -- each store's own promises ----------------------------------------------------------------


async def test_memory_keeps_its_data_after_aclose_and_is_bounded() -> None:
    store = MemoryStore(max_keys=3)
    for i in range(5):
        await store.set(f"k{i}", b"v")
    assert sorted(await store.keys("k")) == ["k2", "k3", "k4"]  # the least recently written went
    await store.aclose()
    assert await store.get("k4") == b"v"  # it outlives a runtime that borrowed it


async def test_sqlite_state_survives_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    first = SQLiteStore(path)
    await first.set("journal", b"result")
    await first.set("short", b"v", ttl=0.1)
    assert await first.take("bucket", 0.001, 2.0) == 0.0
    await first.aclose()
    assert not _holds(path)  # aclose let go of the file
    second = SQLiteStore(path)
    try:
        assert await second.get("journal") == b"result"
        assert await second.take("bucket", 0.001, 2.0) == 0.0
        assert await second.take("bucket", 0.001, 2.0) > 0.0  # the bucket was kept too
        await trio.sleep(0.1)
        assert await second.get("short") is None  # TTLs are wall-clock: they ran while closed
    finally:
        await second.aclose()


def _holds(path: Path) -> bool:
    return any(f.path.startswith(str(path)) for f in psutil.Process().open_files())


async def test_sqlite_unreadable_file_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "not.db"
    path.write_bytes(b"this is not a database" * 100)
    store = SQLiteStore(path)
    with pytest.raises(StoreError, match=r"not\.db"):
        await store.get("k")
    await store.aclose()


async def test_redis_prefix_and_db_keep_deployments_apart(redis: RedisServer) -> None:
    a = RedisStore(redis.url, prefix="a:")
    b = RedisStore(redis.url, prefix="b:")
    other_db = RedisStore(f"redis://127.0.0.1:{redis.port}/3", prefix="a:")
    try:
        await a.set("k", b"from a")
        assert await b.get("k") is None
        assert await other_db.get("k") is None
        await b.set("k", b"from b")
        assert await b.delete_prefix("") == 1
        assert await a.keys("") == ["k"]
    finally:
        for s in (a, b, other_db):
            await s.aclose()


async def test_redis_aclose_closes_its_connections(redis: RedisServer) -> None:
    store = RedisStore(redis.url)
    await store.set("k", b"v")
    async with trio.open_nursery() as nursery:  # several at once: several pooled connections
        for _ in range(5):
            nursery.start_soon(store.get, "k")
    assert await _clients(redis) > 1
    await store.aclose()
    with trio.fail_after(5):  # the server sees the closes on its own time
        while True:
            if await _clients(redis) == 1:  # the one asking
                break
            await trio.sleep(0.01)
    with pytest.raises(StoreError, match="closed"):
        await store.get("k")


async def _clients(redis: RedisServer) -> int:
    probe = RedisStore(redis.url)
    try:
        info = await probe._do("INFO", "clients")
    finally:
        await probe.aclose()
    for line in info.decode().splitlines():
        if line.startswith("connected_clients:"):
            return int(line.split(":")[1])
    raise AssertionError(info)


async def test_redis_that_does_not_answer_is_a_store_error_and_its_return_is_seen() -> None:
    with running_redis() as server:
        store = RedisStore(server.url, timeout=0.3)
        try:
            await store.set("k", b"v")
            assert server.process is not None
            os.kill(server.process.pid, signal.SIGSTOP)  # up, but answering nobody
            try:
                with pytest.raises(StoreError, match=r"did not answer in 0\.3s"):
                    await store.get("k")
            finally:
                os.kill(server.process.pid, signal.SIGCONT)
            assert await store.get("k") == b"v"
        finally:
            await store.aclose()


async def test_redis_restarted_is_used_again_at_once() -> None:
    """Pooled connections the server closed (it stopped) are not used: while it is down every
    step is a StoreError, and once it is back the next step gets a new connection, instead of
    failing on a dead one (which made the runtime degrade for a Redis that was back)."""
    with running_redis() as server:
        store = RedisStore(server.url, timeout=0.5)
        try:
            async with trio.open_nursery() as nursery:  # several pooled connections
                for _ in range(4):
                    nursery.start_soon(store.set, "k", b"v")
            await trio.to_thread.run_sync(server.stop)
            for _ in range(6):
                with pytest.raises(StoreError, match=r"redis at 127\.0\.0\.1"):
                    await store.get("k")
            await trio.to_thread.run_sync(server.start)
            assert await store.get("k") is None  # no persistence: it came back empty
            async with trio.open_nursery() as nursery:
                for _ in range(4):
                    nursery.start_soon(store.set, "k", b"v")
            await trio.to_thread.run_sync(server.restart)
            assert await store.get("k") is None  # not "redis closed the connection"
        finally:
            await store.aclose()


async def test_redis_killed_mid_send_is_a_store_error() -> None:
    """A connection reset while a command is being sent is trio's BrokenResourceError: the
    store raises it as a StoreError, which the runtime degrades on (it escaped before)."""
    with running_redis() as server:
        store = RedisStore(server.url, timeout=5.0)
        try:
            await store.set("k", b"v")
            assert server.process is not None
            process = server.process
            os.kill(process.pid, signal.SIGSTOP)

            async def kill_while_sending() -> None:
                await trio.sleep(0.2)  # the socket's buffers are full: the send waits
                process.kill()  # its unread data makes the kernel reset the connection

            async with trio.open_nursery() as nursery:
                nursery.start_soon(kill_while_sending)
                with pytest.raises(StoreError, match=r"(?i)connection reset|closed the connection"):
                    await store.set("big", os.urandom(32 << 20))
        finally:
            await trio.to_thread.run_sync(server.stop)
            await store.aclose()


# -- DegradingStore ---------------------------------------------------------------------------


def _outage_lines(caplog: pytest.LogCaptureFixture) -> tuple[int, int]:
    records = [r for r in caplog.records if r.name == "runtime.stores"]
    return (
        sum("using memory for now" in r.getMessage() for r in records),
        sum("answers again" in r.getMessage() for r in records),
    )


async def test_degrading_store_on_a_dead_port_answers_every_step_from_memory(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "runtime.stores")
    with running_redis() as server:
        dead = server.url
    store = DegradingStore(RedisStore(dead), retry_after=60)
    try:
        await store.set("k", b"v", ttl=60)
        assert store.degraded
        assert await store.get("k") == b"v"
        assert await store.add("claim", b"1") is True
        assert await store.add("claim", b"1") is False
        assert await store.incr("n", 2) == 2
        assert await store.take("bucket", 1.0, 2.0) == 0.0
        assert await store.keys("k") == ["k"]
        assert await store.delete("k") is True
        assert await store.delete_prefix("claim") == 1
        assert store.failures == 1  # the first step found it down; the others did not ask it
        assert _outage_lines(caplog) == (1, 0)
    finally:
        await store.aclose()


async def test_degrading_store_counts_an_outage_once_and_returns_to_the_primary(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "runtime.stores")
    with running_redis() as server:
        direct = RedisStore(server.url)
        store = DegradingStore(RedisStore(server.url, timeout=0.5), retry_after=0.2)
        try:
            await store.set("before", b"in redis")
            assert await direct.get("before") == b"in redis"
            assert not store.degraded

            await trio.to_thread.run_sync(server.stop)
            await store.set("during", b"in memory")  # answered, from memory
            assert store.degraded
            assert await store.get("during") == b"in memory"
            assert await store.incr("n") == 1
            failures = store.failures
            assert failures >= 1
            await trio.sleep(0.25)  # past retry_after: the primary is asked again, still down
            assert await store.incr("n") == 2
            assert store.failures > failures
            assert _outage_lines(caplog) == (1, 0)  # one line for the whole outage

            await trio.to_thread.run_sync(server.start)
            await trio.sleep(0.25)
            await store.set("after", b"in redis again")  # the primary answers: used again
            assert not store.degraded
            assert await direct.get("after") == b"in redis again"
            # what memory wrote meanwhile was copied back before the step (the counter was not)
            assert await store.get("during") == b"in memory"
            assert await direct.get("during") == b"in memory"
            assert await direct.get("n") is None
            assert store.copied == 1
            assert _outage_lines(caplog) == (1, 1)
        finally:
            await store.aclose()
            await direct.aclose()


# -- through the runtime ----------------------------------------------------------------------

ran: list[int] = []


@tool(dedupe=Dedupe(ttl=60), rate_limit=RateLimit(rate=1000, burst=1000))
async def record(n: int) -> int:
    """Dedupe and a rate limit: both keep their state in the store."""
    ran.append(n)
    await trio.sleep(0.01)
    return n * 10


async def test_runtime_keeps_answering_when_redis_stops_mid_way() -> None:
    ran.clear()
    with running_redis() as server:
        async with open_runtime([record], store=RedisStore(server.url, timeout=0.5)) as rt:
            calls = [ToolCall(id=f"c{i}", name="record", arguments=f'{{"n": {i}}}') for i in range(40)]
            first = await rt.call_many(calls[:20])
            stats = rt.statistics()
            assert (stats.store_failures, stats.store_degraded) == (0, False)

            async with trio.open_nursery() as nursery:  # the server goes while calls run
                nursery.start_soon(trio.to_thread.run_sync, server.stop)
                second = await rt.call_many(calls[20:])
            replayed = await rt.call_many(calls[:5])  # the journal is gone with Redis: they run

            results = [*first, *second]
            assert [r.call_id for r in results] == [c.id for c in calls]
            assert all(type(r) is ToolSuccess for r in results), [
                r for r in results if type(r) is not ToolSuccess
            ]
            assert [r.value for r in results] == [i * 10 for i in range(40)]  # type: ignore[union-attr]
            assert [type(r) for r in replayed] == [ToolSuccess] * 5
            stats = rt.statistics()
            assert stats.store_failures > 0
            assert stats.store_degraded is True
            assert sorted(ran) == sorted([*range(40), *range(5)])


@tool(read_only=True, cache=Cache(ttl=60))
def lookup(city: str) -> str:
    """A cached read-only tool."""
    ran.append(len(ran))
    return f"{city}: {len(ran)}"


async def test_sqlite_cache_survives_a_restart_and_is_invalidated(tmp_path: Path) -> None:
    """The cache on SQLite outlives the runtime, and `invalidate` forgets a tool's entries (its
    keys hold NULs: a text prefix match found none of them, so nothing was ever forgotten)."""
    ran.clear()
    path = tmp_path / "state.db"

    async def value(rt: Runtime, who: str) -> object:
        result = await rt.invoke(lookup, city="Oslo", _principal=who)
        assert type(result) is ToolSuccess
        return result.value

    async with open_runtime([lookup], store=SQLiteStore(path)) as rt:
        assert [await value(rt, "alice"), await value(rt, "alice"), await value(rt, "bob")] == [
            "Oslo: 1",
            "Oslo: 1",
            "Oslo: 2",
        ]
    async with open_runtime([lookup], store=SQLiteStore(path)) as rt:  # a restart
        assert [await value(rt, "alice"), await value(rt, "bob")] == ["Oslo: 1", "Oslo: 2"]
        assert len(ran) == 2  # both answered from the file
        assert await rt.invalidate("lookup", principal="alice") == 1
        assert await value(rt, "alice") == "Oslo: 3"
        assert await value(rt, "bob") == "Oslo: 2"
        assert await rt.invalidate("lookup") == 2
        assert await value(rt, "bob") == "Oslo: 4"
        assert rt.statistics().tools["lookup"].cache_hits == 3
