"""Shared fixtures: tests are trio tests (pytest-trio, trio_mode) by default.

Every test is checked for what it leaves behind (`no_leaks`, rules in tests/leakcheck.py): a
trio task, a thread or a child process that outlives it fails it.
"""

from __future__ import annotations

import gc
import os
import socket
import warnings
from collections.abc import Iterator
from typing import Any

import leakcheck
import pytest
from redis_server import RedisServer, running_redis

leakcheck.install()  # before collection: pytest-trio looks `trio.run` up when it marks the tests


@pytest.fixture(autouse=True)
def no_leaks(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the test if it leaves a trio task, a thread, a child process or a Ray actor behind.

    Skipped for a test marked `@pytest.mark.leaks("why")` (a known leak, reported as a bug).
    """
    with leakcheck.scope() as scope:
        yield
    if request.node.get_closest_marker("leaks") is not None:
        return
    left = scope.leaks()
    if left:
        pytest.fail("the test left behind:\n  " + "\n  ".join(left), pytrace=False)


# Node deaths noticed within about 5 s (Ray's default is 15 s or more): a node removed without a
# goodbye (its raylet SIGKILLed) is declared dead after 5 missed health checks, 1 s apart.
RAY_HEALTH_CHECKS = {"health_check_period_ms": 1000, "health_check_failure_threshold": 5}


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """One Ray cluster on this machine for every test that uses Ray: Ray's own
    `ray.cluster_utils.Cluster` with a head and two worker nodes, each its own raylet, connected
    to on the main thread (as Ray requires). The head has 2 CPUs; the workers 2 each and a custom
    resource naming their zone (`zone_a`, `zone_b`: 8 of it), for scheduling tests. Its head
    serves Ray Client too (`cluster.client_address`, "ray://127.0.0.1:PORT").

    Its processes and threads are a process-wide pool that lives for the session: they exist
    before the tests that use it, so the leak check allows them (it checks Ray's actors instead).
    A test may add a node of its own (and must remove it).
    """
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    from runtime.placement.ray import ensure_ray

    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_USAGE_STATS_ENABLED")}
    os.environ["RAY_AUTH_MODE"] = "disabled"
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    with socket.socket() as probe:  # a free port for the head's Ray Client server (ray://)
        probe.bind(("127.0.0.1", 0))
        client_port = probe.getsockname()[1]
    with warnings.catch_warnings():
        # Ray leaves the files it opens for its Ray Client server's log unclosed (a ResourceWarning
        # when they are collected): theirs, not ours to fix; collected here, not in a test.
        warnings.simplefilter("ignore", ResourceWarning)
        cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": 2,
                "include_dashboard": False,
                "ray_client_server_port": client_port,
                "_system_config": RAY_HEALTH_CHECKS,
            },
        )
        gc.collect()
    cluster.client_address = f"ray://127.0.0.1:{client_port}"
    try:
        for zone in ("zone_a", "zone_b"):
            cluster.add_node(num_cpus=2, resources={zone: 8})
        cluster.wait_for_nodes()
        ensure_ray(cluster.address)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="session")
def local_ray(ray_cluster: Any) -> None:
    """Ray for a test that does not care how many nodes it has: the session's cluster."""


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One real redis-server (tests/redis_server.py) for the session's Redis tests.

    Started before the first test that asks for it and stopped, reaped, when the session ends:
    it is there before each test begins, so the leak check allows it. A test that stops or
    restarts a server (an outage) starts its own with `running_redis()` instead.
    """
    with running_redis() as server:
        yield server


@pytest.fixture
def redis(redis_server: RedisServer) -> RedisServer:
    """The session's redis-server, emptied for this test."""
    redis_server.flush()
    return redis_server


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`make test` runs two workers), the tests of the session's Ray cluster
    all go to one worker (`--dist loadgroup`): one cluster per run, not one per worker."""
    for item in items:
        if {"ray_cluster", "local_ray"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group("ray"))


class _GroupIds:
    """`--dist loadgroup` sends a test by the `@group` that pytest-xdist's worker appends to its
    node id; pytest-xdist 3.8 writes it to `item._nodeid`, which pytest 9.2 no longer reads (a
    node's id is `item._id`), so no test was grouped: each worker started a Ray cluster of its
    own (pytest-dev/pytest-xdist#1386). Appended here where it is missing, after xdist's hook."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        if not getattr(config.option, "loadgroup", False):  # set on xdist's workers for loadgroup
            return
        from _pytest.nodeid import NodeId

        for item in items:
            groups = sorted(
                {
                    str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                    for m in item.iter_markers("xdist_group")
                }
            )
            suffix = "@" + "_".join(groups)
            if groups and not item.nodeid.endswith(suffix) and hasattr(item, "_id"):
                item._id = NodeId.parse(item.nodeid + suffix)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_GroupIds(), "group ids")
