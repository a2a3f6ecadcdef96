"""Shared fixtures: tests are trio tests (pytest-trio, trio_mode) by default.

Every test is checked for what it leaves behind (`no_leaks`, rules in tests/leakcheck.py): a
trio task, a thread or a child process that outlives it fails it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

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


@pytest.fixture(scope="session")
def local_ray() -> Iterator[None]:
    """One local Ray for every test that asks for it, started on the main thread (as Ray requires).

    Its processes and threads are a process-wide pool that lives for the session: they exist
    before the tests that use it, so the leak check allows them (it checks Ray's actors instead).
    """
    ray = pytest.importorskip("ray")
    from runtime.placement.ray import ensure_ray

    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_USAGE_STATS_ENABLED")}
    os.environ["RAY_AUTH_MODE"] = "disabled"
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    ensure_ray(num_cpus=2, include_dashboard=False)
    yield
    ray.shutdown()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


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
