"""Ray placement on a multi-node cluster on this machine (Ray's `ray.cluster_utils.Cluster`):
how calls/s and p99 of a CPU-bound tool scale with replicas spread over nodes, and how long a
tool takes to serve again after its node is lost. Run by `bench_placement` (the placement
report), after its local Ray is shut down; the figures go to `placement.json` ("cluster").

Cluster: a head that takes no replica (0 CPUs) and 4 worker nodes of 1 CPU each, every one
its own raylet. `Ray(replicas=N, num_cpus=1, scheduling="spread")` puts each replica on its own
node. The machine has 2 cores for all of them (and for this driver): past 2 busy replicas the
nodes share cores, so the 4-replica figure shows the machine's bound, not Ray's or ours.

- scaling: N closed-loop clients (one per replica), each making sequential calls of `spin`
  (20 ms of CPU in the replica); calls/s and p50/p99 of the caller's latency, for N = 1, 2, 4,
  as ratios to N = 1 (linear: 2x and 4x calls/s, 1x latency). The three pools are open at
  once and measured in interleaved rounds; the load average of the machine before and after
  is recorded (other programs on it take cores too).
- failover: a tool with one replica serving 4 clients; its node is removed (drained: SIGTERM
  to its raylet; crashed: SIGKILL, noticed by Ray's health checks, 5 missed 1 s apart here).
  Serving again = from the removal to the first answer from the new replica. The calls that
  were on the lost node fail UNAVAILABLE; those made meanwhile wait for the new replica.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import time
from typing import Any

import trio

from runtime import ToolCall, open_runtime, tool
from runtime.placement.ray import Ray, ensure_ray

HEALTH_CHECKS = {"health_check_period_ms": 1000, "health_check_failure_threshold": 5}
SPIN_MS = 20.0
REPLICAS = (1, 2, 4)


def burn(ms: float) -> None:
    """The same work as `spin`, in a plain process (the machine's own bound, no Ray)."""
    end = time.thread_time() + ms / 1000
    while time.thread_time() < end:
        pass


def _plain_rate(pool: Any, workers: int, per_worker: int) -> float:
    """Tasks/s of `workers` plain processes burning SPIN_MS each, `per_worker` tasks apiece."""
    began = time.perf_counter()
    pool.map(burn, [SPIN_MS] * (workers * per_worker), chunksize=1)
    return workers * per_worker / (time.perf_counter() - began)


def spin(ms: float) -> str:
    """Burn `ms` milliseconds of this thread's CPU (a CPU-bound tool); says on which node."""
    import ray

    end = time.thread_time() + ms / 1000
    while time.thread_time() < end:
        pass
    node: str = ray.get_runtime_context().get_node_id()
    return node


# A quarter CPU each: the three pools fit on the 4 nodes at once (measured side by side), and
# "spread" still gives each replica of a pool a node of its own (asserted).
SPREAD = {
    n: tool(
        spin,
        name=f"spin{n}",
        setup_timeout=300,  # seven Ray workers starting at once on a busy 2-core machine
        placement=Ray(replicas=n, num_cpus=0.25, scheduling="spread"),
    )
    for n in REPLICAS
}
ALONE = tool(spin, name="alone", setup_timeout=300, placement=Ray(replicas=1, num_cpus=1))


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


async def _closed_loop(rt: Any, name: str, clients: int, per_client: int) -> tuple[float, list[float]]:
    """(calls/s, latencies in s) of `clients` callers making `per_client` sequential calls each."""
    call = ToolCall(id="s", name=name, arguments={"ms": SPIN_MS})
    latencies: list[float] = []

    async def client() -> None:
        for _ in range(per_client):
            began = time.perf_counter()
            result = await rt.call(call)
            latencies.append(time.perf_counter() - began)
            assert result.ok, result

    began = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(clients):
            nursery.start_soon(client)
    return clients * per_client / (time.perf_counter() - began), latencies


async def _scaling(per_client: int, rounds: int) -> dict[str, Any]:
    """The three pools side by side, measured in interleaved rounds (drift and the other
    processes on the machine hit them alike), each round also with N plain processes doing the
    same work (the floor: what the machine gives N CPU-bound workers now); medians of the
    rounds' rates, pooled latencies."""
    rates: dict[int, list[float]] = {n: [] for n in REPLICAS}
    plain: dict[int, list[float]] = {n: [] for n in REPLICAS}
    latencies: dict[int, list[float]] = {n: [] for n in REPLICAS}
    spawn = multiprocessing.get_context("spawn")  # no fork of a process with Ray's threads
    pools = {n: spawn.Pool(n) for n in REPLICAS}
    try:
        async with open_runtime(list(SPREAD.values()), tracing=False) as rt:
            nodes = {}
            for n in REPLICAS:
                placement = rt.statistics().tools[f"spin{n}"].placement
                assert placement is not None
                assert sorted(placement.nodes.values()) == [1] * n, placement  # one replica per node
                nodes[n] = len(placement.nodes)
                await _closed_loop(rt, f"spin{n}", n, 5)  # warm
                _plain_rate(pools[n], n, 2)
            for i in range(rounds):
                for n in REPLICAS if i % 2 == 0 else tuple(reversed(REPLICAS)):
                    rate, times = await _closed_loop(rt, f"spin{n}", n, per_client)
                    rates[n].append(rate)
                    latencies[n].extend(times)
                    plain[n].append(_plain_rate(pools[n], n, per_client))  # blocks the loop: nothing runs
    finally:
        for pool in pools.values():
            pool.terminate()
            pool.join()
    rows = [
        {
            "replicas": n,
            "nodes": nodes[n],
            "calls_per_s": statistics.median(rates[n]),
            "plain_per_s": statistics.median(plain[n]),
            "p50_ms": _percentile(latencies[n], 0.50) * 1000,
            "p99_ms": _percentile(latencies[n], 0.99) * 1000,
        }
        for n in REPLICAS
    ]
    base = rows[0]
    for row in rows:
        row["calls_x1"] = row["calls_per_s"] / base["calls_per_s"]
        row["plain_x1"] = row["plain_per_s"] / base["plain_per_s"]
        row["of_machine"] = row["calls_x1"] / row["plain_x1"]
        row["p99_x1"] = row["p99_ms"] / base["p99_ms"]
    return {"spin_ms": SPIN_MS, "cores": os.cpu_count(), "rounds": rounds, "rows": rows}


async def _failover(cluster: Any, graceful: bool) -> dict[str, Any]:
    async with open_runtime([ALONE], tracing=False) as rt:
        call = ToolCall(id="f", name="alone", arguments={"ms": 2.0})
        first = await rt.call(call)
        assert first.ok, first
        lost_node = first.value
        (node,) = [n for n in cluster.worker_nodes if n.node_id == lost_node]
        answers: list[tuple[float, bool, str]] = []  # (ended at, ok, node or kind)
        stop = trio.Event()

        async def client() -> None:
            while not stop.is_set():
                result = await rt.call(call)
                answers.append(
                    (time.perf_counter(), result.ok, result.value if result.ok else result.kind.value)
                )

        async with trio.open_nursery() as nursery:
            for _ in range(4):
                nursery.start_soon(client)
            await trio.sleep(1.0)
            began = time.perf_counter()
            await trio.to_thread.run_sync(lambda: cluster.remove_node(node, allow_graceful=graceful))
            removed = time.perf_counter() - began
            with trio.fail_after(120):
                while not any(ok and where != lost_node for _, ok, where in answers):
                    await trio.sleep(0.01)
            stop.set()
        back = min(t for t, ok, where in answers if ok and where != lost_node) - began
        failed = [(t, kind) for t, ok, kind in answers if not ok]
        placement = rt.statistics().tools["alone"].placement
        assert placement is not None
        cluster.add_node(num_cpus=1)  # the next measurement has as many nodes
        cluster.wait_for_nodes()
    return {
        "how": "drained (SIGTERM)" if graceful else "crashed (SIGKILL)",
        "removal_s": removed,
        "serving_again_s": back,
        "unavailable_calls": sum(1 for _, kind in failed if kind == "unavailable"),
        "other_failures": sum(1 for _, kind in failed if kind != "unavailable"),
        "calls": len(answers),
        "lost_with_node": placement.lost_with_node,
    }


def measure(quick: bool = False) -> dict[str, Any]:
    """Start the cluster, measure, shut it down; the figures for placement.json."""
    import ray
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "include_dashboard": False, "_system_config": HEALTH_CHECKS},
    )
    try:
        for _ in range(4):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ensure_ray(cluster.address)
        load_before = os.getloadavg()[0]
        scaling = trio.run(_scaling, 10 if quick else 40, 3 if quick else 5)
        scaling["load_average"] = [load_before, os.getloadavg()[0]]
        failover = [trio.run(_failover, cluster, graceful) for graceful in (True, False)]
    finally:
        ray.shutdown()
        cluster.shutdown()
    return {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "nodes": "head (0 CPUs) + 4 worker nodes of 1 CPU, each its own raylet",
        "health_checks": HEALTH_CHECKS,
        "scaling": scaling,
        "failover": failover,
    }


def lines(cluster: dict[str, Any]) -> list[str]:
    """The figures as table lines (for the printed report)."""
    scaling = cluster["scaling"]
    out = [
        f"cluster scaling, spin {scaling['spin_ms']:g} ms CPU per call, {scaling['cores']} cores, "
        f"load average {scaling['load_average'][0]:.1f} -> {scaling['load_average'][1]:.1f}:"
    ]
    for row in scaling["rows"]:
        out.append(
            f"  {row['replicas']} replica(s) on {row['nodes']} node(s): {row['calls_per_s']:.1f} calls/s "
            f"({row['calls_x1']:.2f}x; plain processes {row['plain_x1']:.2f}x, so {row['of_machine']:.2f} of what "
            f"the machine gives), p50 {row['p50_ms']:.1f} ms, p99 {row['p99_ms']:.1f} ms ({row['p99_x1']:.2f}x)"
        )
    for f in cluster["failover"]:
        out.append(
            f"  failover, node {f['how']}: serving again {f['serving_again_s']:.2f} s after the removal began "
            f"(removal itself {f['removal_s']:.2f} s), {f['unavailable_calls']} calls UNAVAILABLE of {f['calls']}"
        )
    return out


if __name__ == "__main__":
    print("\n".join(lines(measure())))
