"""The crash harness of detached and deferred calls (issue 43): real server processes
(tests/detached_server.py) on SQLite and on Redis, each run killed with SIGKILL at a random
point, restarted, and driven to the end. Slow (a few hundred process starts): `pytest -m slow`,
or `python tests/test_detached_crash.py --runs 200 [--store sqlite|redis]` for the figures.

Each run takes one scenario at random:

    before / during / after   a detached call of `pay` (not idempotent) or `put` (idempotent)
                              whose tool kills its process before its side effect, between its
                              start and its side effect, or after it (its result not journaled)
    anywhere                  a detached call, the process killed 0-40 ms after it was asked for
                              (before, during or after the journal's writes); the client, not
                              knowing, asks again with the same id
    completed                 a call whose result was read, the process killed 0-20 ms later
    approval                  a deferred call (`guarded`, not idempotent), approved, the process
                              killed 0-40 ms into the approval (maybe with its tool dying too)
    cancel                    a running call, cancelled, the process killed 0-40 ms into the cancel
    pending                   a deferred call, the process killed while it waits for approval

then restarts the server (the same node: it recovers at once) and drives every call of the run to
its end: approves what waits for approval (again: idempotent), cancels again what it cancelled,
asks again (same id) for a call it never heard of, and reads each result; a server that dies
again (a tool's kill point reached only now) is restarted too. What must hold, counted over all
runs: no side effect of a non-idempotent tool twice (`begin` once at most), no approval lost (a
deferred call found and ended after the restart), no completed result lost or changed, every
call ended; a non-idempotent call that was running when killed is answered (UNAVAILABLE: it may
have run), never run again.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from detached_harness import Server, ServerGone, side_effects

RUNS = 200
NOT_IDEMPOTENT = ("pay", "guarded")
SCENARIOS = ("before", "during", "after", "anywhere", "completed", "approval", "cancel", "pending")


class Tracked:
    """One call of a run: what the harness asked for and what it saw."""

    def __init__(self, key: str, tool: str, scenario: str, request: dict[str, Any]) -> None:
        self.key = key
        self.tool = tool
        self.scenario = scenario
        self.request = request  # how to ask for it again (a client's retry)
        self.id: str | None = request.get("id")
        self.completed: dict[str, Any] | None = None  # a result read before the kill
        self.pending = False  # it was deferred (an approval it waits for)
        self.approved = False
        self.cancelled = False
        self.final: dict[str, Any] | None = None


class Harness:
    def __init__(self, store: str, directory: Path, seed: int) -> None:
        self.store = store
        self.log = directory / "effects.log"
        self.random = random.Random(seed)
        self.server: Server | None = None
        self.figures: collections.Counter[str] = collections.Counter()
        self.problems: list[str] = []

    async def restart(self) -> Server:
        if self.server is not None:
            await self.server.kill()
        self.server = await Server.start(self.store, self.log, node="n1", lease=2.0)
        self.figures["restarts"] += 1
        return self.server

    async def kill_after(self, seconds: float) -> None:
        assert self.server is not None
        await trio.sleep(seconds)
        await self.server.kill()
        self.figures["kills"] += 1

    async def run(self, i: int) -> None:
        scenario = self.random.choice(SCENARIOS)
        self.figures[f"scenario {scenario}"] += 1
        server = self.server or await self.restart()
        calls: list[Tracked] = []
        key = f"r{i}"
        # within the first writes of what was asked (a few ms), or anywhere in the next 40 ms
        delay = (
            self.random.uniform(0.0, 0.003) if self.random.random() < 0.5 else self.random.uniform(0.0, 0.04)
        )
        try:
            if scenario in ("before", "during", "after", "anywhere"):
                tool = self.random.choice(("pay", "put"))
                die = scenario if scenario != "anywhere" else ""
                request = {
                    "op": "detach",
                    "tool": tool,
                    "key": key,
                    "id": key,
                    "principal": "ann",
                    "die": die,
                }
                if die == "during":
                    request["hold"] = 0.05
                calls.append(Tracked(key, tool, scenario, request))
                if scenario == "anywhere":
                    await server.send(**request)
                    await self.kill_after(delay)
                else:
                    await server.ask(**request)
                    if not await server.dead():
                        self.problems.append(f"{key}: its tool did not kill its process")
                    self.figures["kills"] += 1
            elif scenario == "completed":
                request = {"op": "detach", "tool": "pay", "key": key, "id": key, "principal": "ann"}
                tracked = Tracked(key, "pay", scenario, request)
                calls.append(tracked)
                await server.ask(**request)
                tracked.completed = (await server.ask(op="result", id=key, principal="ann"))["result"]
                await self.kill_after(delay / 2)
            elif scenario in ("approval", "pending"):
                die = (
                    self.random.choice(("", "", "before", "during", "after"))
                    if scenario == "approval"
                    else ""
                )
                request = {"op": "defer", "key": key, "principal": "ann", "die": die}
                answer = await server.ask(**request)
                tracked = Tracked(key, "guarded", scenario, request)
                tracked.id = answer["pending"]
                tracked.pending = True
                calls.append(tracked)
                if scenario == "approval":
                    tracked.approved = True
                    await server.send(op="approve", id=tracked.id, principal="ann")
                    await self.kill_after(delay)
                else:
                    await self.kill_after(0.0)
            else:  # cancel
                request = {
                    "op": "detach",
                    "tool": "pay",
                    "key": key,
                    "id": key,
                    "principal": "ann",
                    "hold": 0.03,
                }
                tracked = Tracked(key, "pay", scenario, request)
                calls.append(tracked)
                await server.ask(**request)
                tracked.cancelled = True
                await server.send(op="cancel", id=key, principal="ann")
                await self.kill_after(delay)
        except ServerGone:
            self.figures["kills"] += 1  # it died while asked (a tool's kill point)
        await self.drive(calls)
        self.check(calls)

    async def drive(self, calls: list[Tracked]) -> None:
        """Restart, and bring each call to its end (restarting again if a server dies)."""
        for _attempt in range(6):
            try:
                server = await self.restart()  # it may die before it is ready: recovering, a
                # call it takes over reaches its tool's kill point
                for tracked in calls:
                    if tracked.final is None:
                        tracked.final = await self.settle(server, tracked)
                return
            except ServerGone:
                self.figures["kills"] += 1
                continue
        self.problems.append(f"calls {[c.key for c in calls]} did not end after 6 restarts")

    async def settle(self, server: Server, tracked: Tracked) -> dict[str, Any]:
        while True:
            assert tracked.id is not None
            answer = await server.ask(op="status", id=tracked.id, principal="ann")
            if "error" in answer:
                if tracked.pending or tracked.completed is not None:
                    self.figures["lost"] += 1
                    self.problems.append(f"{tracked.key}: {answer['text']} after the restart")
                    return {"kind": "lost"}
                await server.ask(**{**tracked.request, "die": ""})  # the client asks again: same id
                self.figures["asked again"] += 1
                continue
            status = answer["status"]
            if status["state"] == "input_required":
                await server.ask(op="approve", id=tracked.id, principal="ann")
                self.figures["approved after the restart"] += 1
            elif tracked.cancelled and status["state"] == "working":
                await server.ask(op="cancel", id=tracked.id, principal="ann")
            result: dict[str, Any] = (await server.ask(op="result", id=tracked.id, principal="ann"))["result"]
            return result

    def check(self, calls: list[Tracked]) -> None:
        effects = side_effects(self.log)
        for tracked in calls:
            begins, done = effects[("begin", tracked.key)], effects[("effect", tracked.key)]
            final = tracked.final or {"kind": "never ended"}
            self.figures["calls"] += 1
            if tracked.tool in NOT_IDEMPOTENT:
                if begins > 1 or done > 1:
                    self.figures["duplicated side effects"] += 1
                    self.problems.append(f"{tracked.key} ({tracked.tool}) ran {begins} times")
            elif begins > 1:
                self.figures["idempotent calls run again"] += 1
            if tracked.completed is not None and final != tracked.completed:
                self.figures["lost completed results"] += 1
                self.problems.append(f"{tracked.key}: completed {tracked.completed}, then {final}")
            if tracked.pending and final.get("kind") == "lost":
                self.figures["lost approvals"] += 1
            kind = final.get("type")
            if kind == "success":
                self.figures["ended: success"] += 1
                if done < 1:
                    self.problems.append(f"{tracked.key}: a success without its side effect")
            elif kind == "failure":
                self.figures[f"ended: {final['kind']}"] += 1
                if final["kind"] == "unavailable":
                    if "it may have run" not in final["message"]:
                        self.problems.append(
                            f"{tracked.key}: unavailable for another reason: {final['message']}"
                        )
                    elif tracked.tool in NOT_IDEMPOTENT:
                        self.figures["non-idempotent running calls answered, not run again"] += 1
                elif final["kind"] not in ("cancelled",):
                    self.problems.append(f"{tracked.key}: ended {final['kind']}: {final['message']}")
            else:
                self.figures["never ended"] += 1
                self.problems.append(f"{tracked.key}: never ended ({final})")

    async def close(self) -> None:
        if self.server is not None:
            await self.server.stop()


async def crash_runs(store: str, directory: Path, runs: int, seed: int) -> tuple[dict[str, int], list[str]]:
    harness = Harness(store, directory, seed)
    try:
        for i in range(runs):
            await harness.run(i)
    finally:
        with trio.CancelScope(shield=True):
            await harness.close()
    return dict(sorted(harness.figures.items())), harness.problems


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("backend", ["sqlite", "redis"])
async def test_hundreds_of_kills_lose_nothing_and_run_nothing_twice(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if backend == "sqlite":
        store = f"sqlite:{tmp_path / 'journal.db'}"
    else:
        redis = request.getfixturevalue("redis")
        store = f"redis:{redis.url}"
    figures, problems = await crash_runs(store, tmp_path, RUNS, seed=43)
    print(f"\n{backend}: {json.dumps(figures, indent=1)}")
    assert problems == []
    assert figures["calls"] == RUNS
    for zero in (
        "duplicated side effects",
        "lost approvals",
        "lost completed results",
        "never ended",
        "lost",
    ):
        assert figures.get(zero, 0) == 0, zero
    assert figures["non-idempotent running calls answered, not run again"] > 0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--store", choices=["sqlite", "redis", "both"], default="both")
    parser.add_argument("--seed", type=int, default=43)
    args = parser.parse_args()
    import tempfile

    sys.path.insert(0, str(Path(__file__).parent))
    from redis_server import running_redis

    async def each(kind: str) -> None:
        with tempfile.TemporaryDirectory() as directory:
            if kind == "sqlite":
                figures, problems = await crash_runs(
                    f"sqlite:{directory}/journal.db", Path(directory), args.runs, args.seed
                )
            else:
                with running_redis() as redis:
                    figures, problems = await crash_runs(
                        f"redis:{redis.url}", Path(directory), args.runs, args.seed
                    )
        print(json.dumps({"store": kind, "runs": args.runs, **figures, "problems": problems}, indent=1))

    for kind in ("sqlite", "redis") if args.store == "both" else (args.store,):
        trio.run(each, kind)


if __name__ == "__main__":
    main()
