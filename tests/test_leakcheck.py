"""The leak check itself (tests/leakcheck.py): it sees each kind of leftover, and allows what it says."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import leakcheck
import pytest
import trio


@pytest.fixture(autouse=True)
def short_graces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(leakcheck, "THREAD_GRACE", 0.2)
    monkeypatch.setattr(leakcheck, "PROCESS_GRACE", 0.2)


def test_a_system_task_left_running_is_a_leak_and_one_that_ends_is_not() -> None:
    async def lingers() -> None:
        await trio.sleep_forever()

    async def ends() -> None:
        await trio.lowlevel.checkpoint()

    async def main() -> None:
        trio.lowlevel.spawn_system_task(lingers)
        trio.lowlevel.spawn_system_task(ends)

    with leakcheck.scope() as scope:
        trio.run(main)
    (left,) = scope.leaks()
    assert left.startswith("trio task 'test_leakcheck.test_a_system_task_left_running")
    assert "lingers" in left


def test_tasks_left_by_a_guest_run_are_seen_too() -> None:
    import asyncio

    async def main() -> None:
        trio.lowlevel.spawn_system_task(trio.sleep_forever)

    async def host() -> None:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        trio.lowlevel.start_guest_run(
            main,
            run_sync_soon_threadsafe=loop.call_soon_threadsafe,
            done_callback=done.set_result,
        )
        (await done).unwrap()

    with leakcheck.scope() as scope:
        asyncio.run(host())
    assert [left.split(" at ")[0] for left in scope.leaks()] == ["trio task 'trio.sleep_forever'"]


def test_a_thread_left_running_is_a_leak_and_one_that_exits_within_the_grace_is_not() -> None:
    release = threading.Event()
    with leakcheck.scope() as scope:
        threading.Thread(target=release.wait, name="stays", daemon=True).start()
        threading.Thread(target=time.sleep, args=(0.05,), name="exits", daemon=True).start()
    try:
        assert [left.split(" at ")[0] for left in scope.leaks()] == ["thread 'stays'"]
    finally:
        release.set()


async def test_an_idle_worker_of_trios_thread_cache_is_allowed_a_busy_one_is_not() -> None:
    release = threading.Event()
    with leakcheck.scope() as idle:
        await trio.to_thread.run_sync(time.sleep, 0)
    assert idle.leaks() == []
    with leakcheck.scope() as busy:
        with trio.move_on_after(0.01):
            await trio.to_thread.run_sync(release.wait, abandon_on_cancel=True)
    try:
        (left,) = busy.leaks()
        assert left.startswith("""thread "wait from <test 'test_an_idle_worker_of_trios""")
    finally:
        release.set()


def test_a_child_process_left_running_is_a_leak_and_a_zombie_too() -> None:
    with leakcheck.scope() as scope:
        running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        zombie = subprocess.Popen([sys.executable, "-c", "pass"])
        reaped = subprocess.Popen([sys.executable, "-c", "pass"])
        reaped.wait()
        while leakcheck.psutil.Process(zombie.pid).status() != "zombie":  # exited, not waited for
            time.sleep(0.01)
    try:
        assert sorted(scope.leaked_processes()) == sorted(
            [
                f"process {running.pid} (sleeping): {sys.executable} -c import time; time.sleep(30)",
                f"process {zombie.pid} (zombie): {leakcheck.psutil.Process(zombie.pid).name()}",
            ]
        )
    finally:
        running.kill()
        running.wait()
        zombie.wait()


def test_threads_a_wider_scope_keeps_are_allowed_until_it_closes() -> None:
    release = threading.Event()
    seen: list[list[str]] = []
    with (  # noqa: PT012
        pytest.raises(AssertionError, match="the fixture left behind:\n  thread 'tool kept thread 1'"),
        leakcheck.keeps_threads("tool kept thread "),
    ):
        with leakcheck.scope() as test:
            threading.Thread(target=release.wait, name="tool kept thread 1", daemon=True).start()
        seen.append(test.leaks())
    release.set()
    assert seen == [[]]  # the fixture's runtime still ran: its thread could outlive the test
