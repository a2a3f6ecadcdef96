"""Resilience state shared by real server processes (DESIGN.md 3.11, issue 23): a server killed
mid-turn and restarted on one `SQLiteStore` replays what had finished without running it again;
two servers on one `RedisStore` (a real redis-server) share a rate limit, a dedupe key and a
circuit breaker. The servers are tests/resilience_server.py; their tools append a line to a log
file each time they run, which is how executions are counted across processes and restarts.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
from redis_server import RedisServer

from runtime import (
    Dedupe,
    FailureKind,
    Runtime,
    ToolCall,
    ToolFailure,
    ToolResult,
    ToolSuccess,
    open_runtime,
    tool,
)
from runtime.stores import RedisStore

HERE = Path(__file__).parent
SERVER = HERE / "resilience_server.py"
READ_TIMEOUT = 30.0  # seconds a server has to say its next line
_started = itertools.count()  # names the servers' stderr files


class Server:
    """One server process: requests go to its stdin, its answers come from its stdout."""

    def __init__(self, process: trio.Process, stderr: Path) -> None:
        self.process = process
        self.stderr = stderr
        self.pid = process.pid
        self._buffer = bytearray()

    async def send(self, request: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send_all(json.dumps(request).encode() + b"\n")

    async def read(self) -> dict[str, Any]:
        """Its next line (failing, with its stderr, if it ends or says nothing in time)."""
        assert self.process.stdout is not None
        with trio.move_on_after(READ_TIMEOUT):
            while b"\n" not in self._buffer:
                data = await self.process.stdout.receive_some()
                if not data:
                    break
                self._buffer += data
        if b"\n" not in self._buffer:
            raise AssertionError(
                f"server {self.pid} said nothing more; its stderr:\n{self.stderr.read_text()}"
            )
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer[:] = rest
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def turn(self, calls: list[dict[str, str]]) -> dict[str, dict[str, Any]]:
        """Send a turn and read its results (by call id) up to its end."""
        await self.send({"turn": calls})
        return await self.results()

    async def results(self) -> dict[str, dict[str, Any]]:
        results: dict[str, dict[str, Any]] = {}
        while "done" not in (answer := await self.read()):
            results[answer["id"]] = answer
        return results


@contextlib.asynccontextmanager
async def serving(tmp_path: Path, *arg_lists: list[str]) -> AsyncIterator[list[Server]]:
    """A server per argument list, started together; each ready (its runtime open) when this
    yields. On exit each is told to stop (its stdin closed) and waited for; killed if it does not."""
    servers: list[Server] = []
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    try:
        for args in arg_lists:
            stderr = tmp_path / f"server-{next(_started)}.stderr"
            with stderr.open("wb") as err:
                process = await trio.lowlevel.open_process(
                    [sys.executable, str(SERVER), *args],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=err,
                    env=env,
                )
            servers.append(Server(process, stderr))
        for server in servers:
            assert "ready" in await server.read()
        yield servers
    finally:
        with trio.CancelScope(shield=True):
            for server in servers:
                assert server.process.stdin is not None
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await server.process.stdin.aclose()
            for server in servers:
                with trio.move_on_after(10):
                    await server.process.wait()
                if server.process.returncode is None:
                    server.process.kill()
                    await server.process.wait()


def call(call_id: str, name: str, **arguments: Any) -> dict[str, str]:
    return {"id": call_id, "name": name, "arguments": json.dumps(arguments)}


def executions(log: Path) -> Counter[tuple[str, str, int]]:
    """(tool, argument, pid) -> how many times it ran."""
    found: Counter[tuple[str, str, int]] = Counter()
    if log.exists():
        for line in log.read_text().splitlines():
            name, arg, pid = line.split()
            found[name, arg, int(pid)] += 1
    return found


# -- SQLite: a restart ------------------------------------------------------------------------


async def test_a_server_killed_mid_turn_replays_what_finished_after_a_restart_on_sqlite(
    tmp_path: Path,
) -> None:
    """Calls 0-4 finish and 5-9 run when the server is SIGKILLed; restarted on the same file,
    the same turn gets 0-4's stored results (the first run's, not run again) and runs 5-9 once
    (their claims, held by the dead process, run out after `claim` seconds)."""
    db, log = tmp_path / "state.db", tmp_path / "ran.log"
    args = ["--store", f"sqlite:{db}", "--log", str(log), "--claim", "1"]
    turn = [call(f"c{i}", "work", n=i) for i in range(10)]

    async with serving(tmp_path, [*args, "--hang", "5", "6", "7", "8", "9"]) as [first]:
        await first.send({"turn": turn})
        finished = [await first.read() for _ in range(5)]
        with trio.fail_after(10):  # the other five are running (each logs when it starts)
            while True:
                if sum(executions(log).values()) == 10:
                    break
                await trio.sleep(0.01)
        first.process.kill()
        await first.process.wait()
    assert first.process.returncode == -signal.SIGKILL
    assert sorted(r["id"] for r in finished) == ["c0", "c1", "c2", "c3", "c4"]
    assert all(r["ok"] for r in finished)

    async with serving(tmp_path, args) as [second]:
        replayed = await second.turn(turn)
        await second.send({"stats": True})
        stats = await second.read()

    assert all(r["ok"] for r in replayed.values()), replayed
    for r in finished:  # the stored results: made by the first run
        assert replayed[r["id"]]["value"] == r["value"]
    first_run = finished[0]["value"].rsplit(" ", 1)[1]
    for i in range(5, 10):  # run now, by the second run
        assert replayed[f"c{i}"]["value"].startswith(f"work {i} by run ")
        assert not replayed[f"c{i}"]["value"].endswith(first_run)
    ran = executions(log)
    assert ran == Counter(
        {
            **{("work", str(i), first.pid): 1 for i in range(10)},  # 5-9 killed while they ran
            **{("work", str(i), second.pid): 1 for i in range(5, 10)},  # 0-4 not again
        }
    )
    assert stats["tools"]["work"]["replayed"] == 5


# -- Redis: two servers -----------------------------------------------------------------------


def redis_args(redis: RedisServer, log: Path, *more: str) -> list[str]:
    return ["--store", f"redis:{redis.url}", "--log", str(log), *more]


@pytest.mark.parametrize("scope", ["tool", "principal"])
async def test_two_servers_share_a_rate_limit_on_redis(
    redis: RedisServer, tmp_path: Path, scope: str
) -> None:
    """Both servers call as fast as they can for 1.5 s against one bucket (burst 200, 100/s):
    together they get what the bucket holds over that window, never more (and not far less)."""
    rate, burst, seconds = 100.0, 200.0, 1.5
    log = tmp_path / "ran.log"
    args = redis_args(redis, log, "--rate", str(rate), "--burst", str(burst))
    if scope == "principal":
        args.append("--budget")  # Budget(rate=RateLimit(...)): the principal's, not the tool's
    async with serving(tmp_path, args, args) as [a, b]:
        for server in (a, b):
            await server.send({"hammer": seconds, "tasks": 2})
        counts = [await a.read(), await b.read()]
    admitted = sum(c["admitted"] for c in counts)
    window = max(c["last"] for c in counts) - min(c["first"] for c in counts)
    bucket = burst + rate * window
    print(
        f"\n{scope} rate limit shared by two processes: admitted {admitted} of a bucket of "
        f"{bucket:.1f} ({admitted / bucket:.2%}) over {window:.3f}s; per process "
        f"{[c['admitted'] for c in counts]}, refused {[c['refused'] for c in counts]}"
    )
    assert admitted <= bucket
    # Shared, not per process (each alone would take the whole bucket: twice it, over the bound
    # above). The closeness (within 1%: 99.6-99.8% here) is measured in `make bench`; a test on a
    # loaded CI machine only asks that the limiter is not far too strict.
    assert admitted >= 0.95 * bucket
    assert all(c["admitted"] > 0 and c["refused"] > 0 for c in counts)  # both drew on it
    assert sum(n for (name, _, _), n in executions(log).items() if name == "ping") == admitted


@pytest.mark.parametrize("hold", [0.0, 0.3])
async def test_an_identical_call_from_two_servers_at_once_runs_once_on_redis(
    redis: RedisServer, tmp_path: Path, hold: float
) -> None:
    """The same turn of 30 calls sent to both servers at once: each call runs once, in one of
    them, and both answer it with that execution's result (quick tools, and ones that take
    0.3 s, so the other server's call waits for the claim)."""
    log = tmp_path / "ran.log"
    args = redis_args(redis, log, "--hold", str(hold))
    turn = [call(f"c{i}", "work", n=i) for i in range(30)]
    results: list[dict[str, dict[str, Any]]] = [{}, {}]
    async with serving(tmp_path, args, args) as servers:
        for server in servers:
            await server.send({"turn": turn})

        async def collect(i: int) -> None:
            results[i] = await servers[i].results()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(collect, 0)
            nursery.start_soon(collect, 1)
    ran = executions(log)
    assert sorted(int(arg) for (_, arg, _) in ran.elements()) == list(range(30)), ran
    assert {pid for (_, _, pid) in ran} <= {s.pid for s in servers}
    for c in turn:
        a, b = results[0][c["id"]], results[1][c["id"]]
        assert a["ok"], a
        assert b["ok"], b
        assert a["value"] == b["value"]


done: list[tuple[str, int]] = []


@tool(dedupe=Dedupe(ttl=60, claim=30))
async def slow_work(n: int) -> int:
    """Takes a while, so identical calls overlap."""
    done.append(("ran", n))
    await trio.sleep(0.1)
    return n


async def test_two_runtimes_given_the_same_batch_do_not_wait_on_each_others_claims(
    redis: RedisServer,
) -> None:
    """Two runtimes on one Redis (as two servers would be) given the same batch at once: each
    claims some keys and finds the other's claim on the rest. Every call ends as soon as the
    run it waits for does, not when the claims run out (30 s): a call waiting for another
    process's run waits at admission, not in its policy, where it held up the runs of its own
    batch that the other process waited for in turn."""
    done.clear()
    calls = [ToolCall(id=f"c{i}", name="slow_work", arguments=json.dumps({"n": i})) for i in range(10)]
    results: list[list[ToolResult]] = [[], []]
    async with (
        open_runtime([slow_work], store=RedisStore(redis.url)) as a,
        open_runtime([slow_work], store=RedisStore(redis.url)) as b,
    ):

        async def batch(i: int, rt: Runtime) -> None:
            results[i] = await rt.call_many(calls)

        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(batch, 0, a)
                nursery.start_soon(batch, 1, b)
        stats = [rt.statistics().tools["slow_work"] for rt in (a, b)]
    assert sorted(done) == [("ran", i) for i in range(10)]
    assert [[r.value for r in rs] for rs in results] == [list(range(10))] * 2  # type: ignore[union-attr]
    assert sum(s.replayed for s in stats) == 10  # each call the other runtime ran: from the journal


async def test_a_call_waiting_for_another_process_gets_its_journal_its_claim_or_its_deadline(
    redis: RedisServer,
) -> None:
    """Another process (a second store on the same Redis) holds the key of a call: the call
    waits, and ends with that run's journaled result; or runs once the claim runs out; or, with
    a timeout shorter than that, times out without running. Closing the runtime ends a wait."""
    done.clear()
    other = RedisStore(redis.url)
    call = ToolCall(id="mine", name="slow_work", arguments='{"n": 7}')
    key = "slow_work\x00\x00k:"  # (tool, principal, the caller's idempotency key)
    stored = ToolSuccess(call_id="theirs", tool="slow_work", content="700", value=700)
    try:
        async with open_runtime([slow_work], store=RedisStore(redis.url)) as rt:

            async def journal_later() -> None:
                await trio.sleep(0.3)
                await other.set(f"journal:{key}journaled", msgspec.json.encode(stored), 60)
                await other.delete(f"claim:{key}journaled")

            await other.add(f"claim:{key}journaled", b"1", 30)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(journal_later)
                answered = await rt.call(call, metadata={"idempotency_key": "journaled"})
            assert answered == ToolSuccess(call_id="mine", tool="slow_work", content="700", value=700)

            await other.add(f"claim:{key}abandoned", b"1", 0.5)  # its process died
            start = trio.current_time()
            ran = await rt.call(call, metadata={"idempotency_key": "abandoned"})
            assert ran == ToolSuccess(call_id="mine", tool="slow_work", content="7", value=7)
            assert 0.4 < trio.current_time() - start < 2.0

            await other.add(f"claim:{key}busy", b"1", 30)
            timed_out = await rt.call(call, metadata={"idempotency_key": "busy"}, timeout=0.3)
            assert type(timed_out) is ToolFailure
            assert timed_out.kind is FailureKind.TIMEOUT
            assert done == [("ran", 7)]  # only the call whose claim ran out ran
            assert rt.statistics().tools["slow_work"].replayed == 1

        ended: list[ToolResult] = []  # the runtime closes while a call waits for another's run
        async with (
            trio.open_nursery() as nursery,
            open_runtime([slow_work], store=RedisStore(redis.url)) as rt,
        ):

            async def wait_busy() -> None:
                ended.append(await rt.call(call, metadata={"idempotency_key": "busy"}))

            nursery.start_soon(wait_busy)
            await trio.sleep(0.2)
        assert [(type(r), getattr(r, "message", None)) for r in ended] == [
            (ToolFailure, "tool 'slow_work': the runtime shut down while an identical call ran elsewhere")
        ]
        assert done == [("ran", 7)]
    finally:
        await other.aclose()


async def test_a_breaker_opened_by_one_server_refuses_the_others_calls_on_redis(
    redis: RedisServer, tmp_path: Path
) -> None:
    """Server A's three transport failures open the breaker (failures=3, cool_down=30); B's
    next call is refused UNAVAILABLE "retry after Ns" at once, and its tool does not run."""
    log = tmp_path / "ran.log"
    args = redis_args(redis, log, "--cool-down", "30")
    async with serving(tmp_path, args, args) as [a, b]:
        before = await b.turn([call("b1", "remote", fail=False)])
        failed = [await a.turn([call(f"a{i}", "remote", fail=True)]) for i in range(3)]
        refused_a = await a.turn([call("a4", "remote", fail=False)])
        refused_b = await b.turn([call("b2", "remote", fail=False)])
        await b.send({"stats": True})
        stats_b = await b.read()

    assert before["b1"] == {"id": "b1", "ok": True, "value": "answered"}
    for f in failed:
        assert [(r["kind"], r["message"]) for r in f.values()] == [
            ("unavailable", "tool 'remote' is unavailable: the backend does not answer")
        ]
    for refused in (refused_a["a4"], refused_b["b2"]):
        assert refused["kind"] == "unavailable"
        assert refused["message"].startswith(
            "tool 'remote' is failing (circuit open after 3 transport failures); retry after "
        )
        wait = int(refused["message"].rsplit(" ", 1)[1].rstrip("s"))
        assert 28 <= wait <= 30
    assert executions(log) == Counter({("remote", "False", b.pid): 1, ("remote", "True", a.pid): 3})
    assert stats_b["tools"]["remote"]["breaker"] == "open"
