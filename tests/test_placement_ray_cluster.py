"""Ray placement on a real multi-node cluster on this machine (Ray's own `ray.cluster_utils.Cluster`:
a head and two worker nodes, each its own raylet; tests/conftest.py `ray_cluster`).

What each test shows: replicas go where the scheduling options say (spread, custom resources,
node affinity); a node removed while 4,000 calls run costs only the calls on it (UNAVAILABLE, or
retried for an idempotent tool), every call is answered once, and the lost replicas come back on
the nodes left; a pool that autoscales grows under load and shrinks when idle; `max_queued`
refuses with OVERLOADED past its bound; a slow call of an idempotent tool is hedged and the losing
attempt cancelled on its replica; a driver in another process connects to the running cluster
with `address="auto"` and ships the tool's code with `runtime_env`. No timing is asserted: where
something happens in its own time (a replica starting), the test waits for it within a bound.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.usefixtures("ray_cluster")

import cluster_tools as ct  # noqa: E402

from runtime import FailureKind, Retry, ToolCall, ToolResult, open_runtime, tool  # noqa: E402
from runtime.placement.ray import Autoscaling, Hedge, NodeAffinity, Ray  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def node_with(resource: str) -> str:
    """The id of the live node that declares `resource`."""
    (node,) = [n["NodeID"] for n in ray.nodes() if n["Alive"] and resource in n["Resources"]]
    return str(node)


def calls(name: str, n: int, arguments: dict[str, Any], prefix: str = "c") -> list[ToolCall]:
    text = json.dumps(arguments)
    return [ToolCall(id=f"{prefix}{i}", name=name, arguments=text) for i in range(n)]


async def until(check: Callable[[], bool], within: float = 60.0) -> None:
    """Wait until `check()` holds (replicas start in other processes: no event to wait on)."""
    with trio.fail_after(within):
        while not check():  # noqa: ASYNC110
            await trio.sleep(0.05)


async def test_spread_puts_each_replica_on_another_node(ray_cluster: Any) -> None:
    spread = tool(ct.where, name="spread", placement=Ray(replicas=3, num_cpus=0.5, scheduling="spread"))
    async with open_runtime([spread], tracing=False) as rt:
        results = await rt.call_many(calls("spread", 30, {"seconds": 0.02}))
        placement = rt.statistics().tools["spread"].placement
    assert placement is not None
    nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert sorted(placement.nodes.values()) == [1, 1, 1]  # three replicas, three nodes
    assert set(placement.nodes) == nodes
    assert all(r.ok for r in results)
    assert {r.value["node"] for r in results} <= nodes


async def test_custom_resources_and_node_affinity_choose_the_node(ray_cluster: Any) -> None:
    zone_a, zone_b = node_with("zone_a"), node_with("zone_b")
    in_b = tool(ct.where, name="in_b", placement=Ray(replicas=2, num_cpus=0, resources={"zone_b": 1}))
    on_a = tool(ct.where, name="on_a", placement=Ray(replicas=2, num_cpus=0, scheduling=NodeAffinity(zone_a)))
    async with open_runtime([in_b, on_a], tracing=False) as rt:
        b = await rt.call_many(calls("in_b", 10, {}))
        a = await rt.call_many(calls("on_a", 10, {}))
        stats = rt.statistics().tools
    assert {r.value["node"] for r in b} == {zone_b}
    assert {r.value["node"] for r in a} == {zone_a}
    assert stats["in_b"].placement is not None
    assert stats["in_b"].placement.nodes == {zone_b: 2}
    assert stats["on_a"].placement is not None
    assert stats["on_a"].placement.nodes == {zone_a: 2}


async def test_a_node_removed_during_4000_calls_costs_only_its_calls_and_its_replicas_come_back(
    ray_cluster: Any,
) -> None:
    # Two tools on the same three nodes (one replica on each), 2,000 calls each: one plain (its
    # calls on the lost node fail UNAVAILABLE), one idempotent with Retry (they run again on a
    # replica that is left). The node leaves the way a drained machine does (its raylet gets
    # SIGTERM): Ray says at once that its actors died with it.
    doomed = ray_cluster.add_node(num_cpus=2, resources={"doomed": 8})
    ray_cluster.wait_for_nodes()
    nodes = (node_with("zone_a"), node_with("zone_b"), doomed.node_id)
    placement = Ray(replicas=3, num_cpus=0, scheduling=NodeAffinity(*nodes))  # one replica on each
    plain = tool(ct.nap, name="plain", max_concurrency=4, placement=placement)
    retried = tool(
        ct.nap,
        name="retried",
        max_concurrency=4,
        idempotent=True,
        retry=Retry(attempts=5, backoff=0.05),
        placement=placement,
    )
    batches = {
        "plain": calls("plain", 2000, {"seconds": 0.02}, "p"),
        "retried": calls("retried", 2000, {"seconds": 0.02}, "r"),
    }
    answers: dict[str, list[ToolResult]] = {}
    removed = trio.Event()
    async with open_runtime([plain, retried], tracing=False) as rt:
        before = {name: rt.statistics().tools[name].placement for name in batches}
        assert all(p is not None and doomed.node_id in p.nodes for p in before.values())

        async def drive(name: str) -> None:
            async for result in rt.as_completed(batches[name]):
                answers.setdefault(result.call_id, []).append(result)
                if len(answers) == 1200:
                    removed.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(drive, "plain")
            nursery.start_soon(drive, "retried")
            await removed.wait()
            began = time.monotonic()
            await trio.to_thread.run_sync(ray_cluster.remove_node, doomed)

        def whole_again() -> bool:
            for name in batches:
                p = rt.statistics().tools[name].placement
                if p is None or p.workers != 3 or doomed.node_id in p.nodes:
                    return False
            return True

        await until(whole_again)
        back_in = time.monotonic() - began
        after = await rt.call_many(calls("plain", 60, {"seconds": 0}, "a"))
        stats = rt.statistics().tools

    every = [c.id for batch in batches.values() for c in batch]
    assert sorted(answers) == sorted(every)  # every call answered ...
    assert all(len(found) == 1 for found in answers.values())  # ... exactly once
    plain_failed = [r for c in batches["plain"] for r in answers[c.id] if not r.ok]
    assert plain_failed  # the calls that were running on the lost node
    assert {r.kind for r in plain_failed} == {FailureKind.UNAVAILABLE}
    assert all("lost with its node" in r.message for r in plain_failed)
    assert all(answers[c.id][0].ok for c in batches["retried"])
    assert stats["retried"].retries >= 1
    for name in batches:
        placement_now = stats[name].placement
        assert placement_now is not None
        assert placement_now.lost_with_node == 1
        assert stats[name].restarts == 0  # a node loss is not the tool's crash
        assert set(placement_now.nodes) == set(nodes[:2])
    assert all(r.ok for r in after)
    assert {r.value["node"] for r in after} <= set(nodes[:2])
    print(
        f"node removed under load: {len(plain_failed)} of 2,000 plain calls UNAVAILABLE, "
        f"{stats['retried'].retries} retries made the idempotent tool's 2,000 all succeed; "
        f"both tools back to 3 replicas {back_in:.1f} s after the removal began"
    )


@pytest.mark.slow
async def test_a_node_that_crashes_during_2000_calls_of_an_idempotent_tool_costs_no_call(
    ray_cluster: Any,
) -> None:
    # The node dies without a word (its raylet and workers SIGKILLed): calls on it hang up
    # (ActorUnavailableError) before Ray's health checks declare the node dead (5 x 1 s here).
    doomed = ray_cluster.add_node(num_cpus=2, resources={"doomed": 8})
    ray_cluster.wait_for_nodes()
    nodes = (node_with("zone_a"), node_with("zone_b"), doomed.node_id)
    retried = tool(
        ct.nap,
        name="crash_retried",
        max_concurrency=4,
        idempotent=True,
        retry=Retry(attempts=6, backoff=0.05),
        placement=Ray(replicas=3, num_cpus=0, scheduling=NodeAffinity(*nodes)),
    )
    batch = calls("crash_retried", 2000, {"seconds": 0.02})
    answers: dict[str, list[ToolResult]] = {}
    crashed = trio.Event()
    async with open_runtime([retried], tracing=False) as rt:
        async with trio.open_nursery() as nursery:

            async def drive() -> None:
                async for result in rt.as_completed(batch):
                    answers.setdefault(result.call_id, []).append(result)
                    if len(answers) == 600:
                        crashed.set()

            nursery.start_soon(drive)
            await crashed.wait()
            began = time.monotonic()
            await trio.to_thread.run_sync(lambda: ray_cluster.remove_node(doomed, allow_graceful=False))

        def whole_again() -> bool:
            p = rt.statistics().tools["crash_retried"].placement
            return p is not None and p.workers == 3 and doomed.node_id not in p.nodes

        await until(whole_again)
        back_in = time.monotonic() - began
        stats = rt.statistics().tools["crash_retried"]
    assert sorted(answers) == sorted(c.id for c in batch)
    assert all(len(found) == 1 and found[0].ok for found in answers.values())
    assert stats.placement is not None
    assert stats.placement.lost_with_node == 1
    assert stats.restarts == 0
    print(
        f"node crash: {stats.retries} retries, no call lost; 3 replicas again {back_in:.1f} s after the kill"
    )


async def test_max_queued_refuses_past_its_bound_with_overloaded(tmp_path: Path) -> None:
    gate, started = tmp_path / "gate", tmp_path / "started"
    started.mkdir()
    held = tool(ct.hold, name="held", placement=Ray(replicas=1, num_cpus=0, max_queued=2))
    results: list[ToolResult] = []
    async with open_runtime([held], tracing=False) as rt:
        batch = calls("held", 10, {"gate": str(gate), "started": str(started)})
        async for result in rt.as_completed(batch):
            results.append(result)
            if len(results) == 7:  # the refused ones come back at once; then let the rest go
                gate.touch()
        placement = rt.statistics().tools["held"].placement
    refused = [r for r in results if not r.ok]
    assert len(refused) == 7  # one running, two waiting (max_queued=2 x 1 replica), seven refused
    assert {r.kind for r in refused} == {FailureKind.OVERLOADED}
    assert all("max_queued=2 per replica" in r.message for r in refused)
    assert sum(r.ok for r in results) == 3
    assert placement is not None
    assert placement.overloaded == 7


async def test_a_slow_call_is_hedged_on_another_replica_and_the_loser_cancelled_there(
    tmp_path: Path,
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    hedged = tool(
        ct.slow_once,
        name="hedged",
        idempotent=True,
        placement=Ray(replicas=2, num_cpus=0, hedge=Hedge(after=0.5)),
    )
    async with open_runtime([hedged], tracing=False) as rt:
        warm = await rt.call_many(calls("hedged", 4, {}))  # both replicas up and answering
        arguments = {"marker": str(tmp_path / "marker"), "notes": str(notes)}
        result = await rt.call(ToolCall(id="h", name="hedged", arguments=json.dumps(arguments)))
        with trio.fail_after(30):  # the losing attempt is cancelled in its replica, after the answer
            while not (notes / "cancelled").exists():  # noqa: ASYNC110
                await trio.sleep(0.02)
        placement = rt.statistics().tools["hedged"].placement
    assert all(r.ok for r in warm)
    assert result.ok
    assert result.value == "fast"  # the attempt that did not sleep answered
    assert (notes / "cancelled").read_text() == (notes / "slow").read_text()
    assert placement is not None
    assert (placement.hedged, placement.hedges_cancelled) == (1, 1)
    assert placement.hedge_wins in (0, 1)  # 1 unless the hedge reached its replica first


@pytest.mark.slow
async def test_the_hedge_delay_follows_the_observed_p95(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    hedged = tool(
        ct.slow_once,
        name="hedged_p95",
        idempotent=True,
        placement=Ray(replicas=2, num_cpus=0, hedge=Hedge(min_samples=20)),
    )
    async with open_runtime([hedged], tracing=False) as rt:
        quick = [await rt.call(ToolCall(id=f"q{i}", name="hedged_p95")) for i in range(20)]
        before = rt.statistics().tools["hedged_p95"].placement
        arguments = {"marker": str(tmp_path / "marker"), "notes": str(notes)}
        result = await rt.call(ToolCall(id="h", name="hedged_p95", arguments=json.dumps(arguments)))
        with trio.fail_after(30):
            while not (notes / "cancelled").exists():  # noqa: ASYNC110
                await trio.sleep(0.02)
        after = rt.statistics().tools["hedged_p95"].placement
    assert all(r.ok for r in quick)
    assert before is not None
    assert before.hedged == 0  # quick calls answer within their own p95 (or are too few yet)
    assert result.ok
    assert result.value == "fast"
    assert after is not None
    assert (after.hedged, after.hedges_cancelled) == (1, 1)


async def test_autoscaling_grows_under_load_and_shrinks_when_idle() -> None:
    policy = Autoscaling(interval=0.2, upscale_delay=0.4, downscale_delay=1.0)
    scaled = tool(
        ct.nap,
        name="scaled",
        placement=Ray(min_replicas=1, max_replicas=3, num_cpus=0, autoscaling=policy),
    )
    peak = 0
    async with open_runtime([scaled], tracing=False) as rt:

        def placement() -> Any:
            return rt.statistics().tools["scaled"].placement

        assert placement().workers == 1
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                nonlocal peak
                while True:
                    peak = max(peak, placement().workers)
                    await trio.sleep(0.05)

            nursery.start_soon(watch)
            loaded = await rt.call_many(calls("scaled", 80, {"seconds": 0.1}))
            nursery.cancel_scope.cancel()
        grown = placement()
        await until(lambda: placement().workers == 1 and placement().starting == 0)
        shrunk = placement()
    assert all(r.ok for r in loaded)
    assert peak == 3
    assert grown.scaled_up == 2
    assert len({r.value["pid"] for r in loaded}) == 3  # the new replicas took calls
    assert (shrunk.target, shrunk.scaled_down) == (1, 2)


DRIVER = """
import json, os, sys

import runtime
import shipped
import trio
from runtime import ToolCall, open_runtime, tool
from runtime.placement.ray import Ray

# The cluster is already running; this process joins it as a driver. Its workers import
# nothing from this machine's paths: the tool's package (and here the runtime too) travel
# in the runtime_env.
placement = Ray(
    replicas=2, num_cpus=0, address=os.environ["ADDRESS"], runtime_env={"py_modules": [runtime, shipped]}
)
# setup_timeout: workers that unpack the runtime_env start in seconds, but a loaded machine once
# took over the default 30 s
remote = tool(shipped.where, name="remote", placement=placement, setup_timeout=180)


async def main():
    async with open_runtime([remote], tracing=False) as rt:
        results = await rt.call_many([ToolCall(id=str(i), name="remote") for i in range(8)])
    assert all(r.ok for r in results), [r for r in results if not r.ok]
    print(json.dumps([r.value for r in results]))


trio.run(main)
"""

SHIPPED = """
import os


def where():
    import ray

    return {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id(), "file": __file__}
"""


@pytest.mark.parametrize(
    "address",
    [
        "auto",  # the cluster this machine belongs to: RAY_ADDRESS here
        pytest.param("ray://", marks=pytest.mark.slow),  # Ray Client, through the head's proxy
    ],
)
def test_a_driver_in_another_process_connects_and_ships_the_code(
    ray_cluster: Any, tmp_path: Path, address: str
) -> None:
    package = tmp_path / "src" / "shipped"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(textwrap.dedent(SHIPPED))
    driver = tmp_path / "driver"
    driver.mkdir()
    (driver / "main.py").write_text(textwrap.dedent(DRIVER))
    env = {
        **os.environ,
        "RAY_ADDRESS": ray_cluster.address,  # what address="auto" reads
        "ADDRESS": ray_cluster.client_address if address == "ray://" else address,
        "PYTHONPATH": f"{tmp_path / 'src'}{os.pathsep}{ROOT}",  # the driver's own imports only
    }
    done = subprocess.run(
        [sys.executable, "main.py"], cwd=driver, env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
    values = json.loads(done.stdout.strip().splitlines()[-1])
    nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert len(values) == 8
    assert {v["node"] for v in values} <= nodes
    assert all(v["pid"] != os.getpid() for v in values)
    # imported from the package Ray unpacked for the job, not from where the driver found it
    assert all(not v["file"].startswith(str(tmp_path)) for v in values)
