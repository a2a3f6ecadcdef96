"""What a test may leave behind when it ends: nothing. The rules of `tests/conftest.py::no_leaks`.

Three kinds of leftovers fail a test:

- **a trio task**: every trio run started during the test (the pytest-trio run, `trio.run` in
  a test or a `RuntimeThread`, the guest run of `open_asyncio_runtime`) is checked when its main
  function returns, i.e. after the test's body and its trio fixtures: any task then left in the
  run's tree but trio's own (the root task, the run_sync_soon task and the main task itself) is
  a leak. Only system tasks can be there (every other task lives in a nursery of the main
  task's tree, closed by then), so a leak is a system task the runtime left running, such as a
  runtime's host still running abandoned work. Tasks get a few scheduling turns to finish first.
- **a thread**: a thread alive after the test that was not alive before it, once threads that
  are exiting have had `THREAD_GRACE` seconds to do so; and a worker of trio's thread cache busy
  with a job at the end that was not busy at the start (a job abandoned by
  `trio.to_thread.run_sync(abandon_on_cancel=True)`). Allowed: threads alive before the test
  (process-wide pools that other tests or session fixtures started: Ray's driver threads, a
  shared server's), idle workers of trio's process-wide thread cache (trio keeps each for
  `IDLE_TIMEOUT`, 10 s, after its last job, by design; one is idle when it is parked in
  `_thread_cache.py::_work` waiting for a job), foreign threads (`threading._DummyThread`:
  started outside Python by a library's own pool, such as Ray's core worker threads that run its
  callbacks, and only seen by `threading` once they run Python code), and the threads of a
  runtime that a fixture of a wider scope keeps open across tests (`keeps_threads`; checked when
  that fixture closes).
- **a child process**: a direct child of this process that was not there before the test,
  still alive (zombies included: a child nobody waited for) once exiting ones have had
  `PROCESS_GRACE` seconds. Processes under a child that existed before the test are not looked
  at (Ray's raylet spawns and reaps its worker processes on its own schedule); for Ray the check
  is on its actors instead: no named actor created during the test may be alive.

A test that leaks because of a bug in the runtime is marked `@pytest.mark.leaks("why")`; the
checks are skipped for it, and the bug is reported.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psutil
import trio
import trio.lowlevel

__all__ = ["PROCESS_GRACE", "THREAD_GRACE", "Scope", "install", "keeps_threads", "scope"]

THREAD_GRACE = 2.0
"""Seconds a thread that outlives its test gets to exit (kept threads exit once their tool stops,
asynchronously; a RuntimeThread's thread once its run ends)."""

PROCESS_GRACE = 5.0
"""Seconds a child process that outlives its test gets to exit (a worker told to stop exits
on its own, and a killed one must still be reaped)."""

_TASK_TURNS = 20  # scheduling turns the other tasks get to finish once a run's main function returns

_TRIO_DIR = os.path.dirname(trio.__file__)
_TRIO_CACHE_FILE = os.path.join(_TRIO_DIR, "_core", "_thread_cache.py")
_TRIO_RUN_SYNC_SOON = "<TrioToken.run_sync_soon task>"
_original_run = trio.run
_original_guest_run = trio.lowlevel.start_guest_run

_lock = threading.Lock()
_open: list[Scope] = []  # the scopes open now, innermost last
_kept: list[tuple[str, ...]] = []  # thread name prefixes that fixtures of wider scopes keep


# -- trio tasks -------------------------------------------------------------------------------


def _describe_task(task: trio.lowlevel.Task) -> str:
    """The task, and the innermost place outside trio where it waits."""
    where = ""
    for frame, lineno in task.iter_await_frames():
        if not frame.f_code.co_filename.startswith(_TRIO_DIR):
            where = f" at {frame.f_code.co_filename}:{lineno} in {frame.f_code.co_name}"
    return f"trio task {task.name!r}{where}"


def _tasks(root: trio.lowlevel.Task) -> Iterator[trio.lowlevel.Task]:
    stack = [root]
    while stack:
        task = stack.pop()
        yield task
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)


async def _left_behind() -> list[str]:
    """In a run's main task, once its function returned: the tasks left running besides trio's own."""
    me = trio.lowlevel.current_task()
    root = trio.lowlevel.current_root_task()
    assert root is not None
    left: list[trio.lowlevel.Task] = []
    with trio.CancelScope(shield=True):
        for _ in range(_TASK_TURNS):
            left = [t for t in _tasks(root) if t not in (me, root) and t.name != _TRIO_RUN_SYNC_SOON]
            if not left:
                return []
            await trio.lowlevel.checkpoint()
    return [_describe_task(t) for t in left]


def _checked(async_fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """`async_fn` as a run's main function that reports the tasks left behind to the scope that
    was innermost when the run started (a run that ends after its scope closed reports nothing;
    that scope's thread check saw the run's thread, if it had one)."""
    with _lock:
        owner = _open[-1] if _open else None

    @functools.wraps(async_fn)
    async def main(*args: Any) -> Any:
        value = await async_fn(*args)
        left = await _left_behind()
        if left and owner is not None:
            with _lock:
                if owner in _open:
                    owner.tasks.extend(left)
        return value

    return main


def _run(async_fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
    return _original_run(_checked(async_fn), *args, **kwargs)


def _start_guest_run(async_fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> None:
    _original_guest_run(_checked(async_fn), *args, **kwargs)


def install() -> None:
    """Check every trio run of this process (`trio.run` and `trio.lowlevel.start_guest_run`).

    Patched on the module, before collection, so that pytest-trio (which looks `trio.run` up when
    it marks the tests), `RuntimeThread` and `open_asyncio_runtime` all run through the check.
    """
    trio.run = _run  # type: ignore[assignment]
    trio.lowlevel.start_guest_run = _start_guest_run  # type: ignore[assignment]


# -- threads and processes --------------------------------------------------------------------


def _frame(thread: threading.Thread) -> Any:
    return sys._current_frames().get(thread.ident or -1)


def _idle_in_trio_cache(thread: threading.Thread) -> bool:
    """A worker of trio's thread cache parked waiting for its next job."""
    frame = _frame(thread)
    return (
        thread.name.startswith("Trio thread ")
        and frame is not None
        and frame.f_code.co_filename == _TRIO_CACHE_FILE
        and frame.f_code.co_name == "_work"
    )


def _busy_in_trio_cache(thread: threading.Thread) -> bool:
    """A worker of trio's thread cache that runs a job (its name is the job's while it does)."""
    frame = _frame(thread)
    files = set()
    while frame is not None:
        files.add(frame.f_code.co_filename)
        frame = frame.f_back
    return _TRIO_CACHE_FILE in files and not _idle_in_trio_cache(thread)


def _ours(thread: threading.Thread) -> bool:
    """A thread this process's Python code started and must stop: not an idle worker of trio's
    cache, and not a foreign thread (`threading._DummyThread`: started outside Python, by a
    library's own C++ pool such as Ray's core worker, and seen by `threading` once it runs a
    Python callback; no Python code can stop or join it)."""
    return not _idle_in_trio_cache(thread) and not isinstance(thread, threading._DummyThread)


def _kept_by_a_wider_scope(thread: threading.Thread) -> bool:
    return any(thread.name.startswith(prefix) for prefixes in _kept for prefix in prefixes)


def _describe_thread(thread: threading.Thread) -> str:
    """The thread, and the innermost place outside trio and threading where it runs."""
    frame = _frame(thread)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_TRIO_DIR) and name != threading.__file__:
            return f"thread {thread.name!r} at {name}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    return f"thread {thread.name!r}"


def _children() -> list[psutil.Process]:
    try:
        return psutil.Process().children()
    except psutil.Error:
        return []


def _key(p: psutil.Process) -> tuple[int, float]:
    try:
        return (p.pid, p.create_time())
    except psutil.Error:
        return (p.pid, 0.0)


def _alive(p: psutil.Process) -> bool:
    """Still there: running, or a zombie nobody waited for."""
    try:
        return p.is_running()
    except psutil.Error:
        return False


def _describe_process(p: psutil.Process) -> str:
    try:
        status = p.status()
    except psutil.Error:
        return f"process {p.pid}"
    try:
        command = " ".join(p.cmdline())[:160]
    except psutil.Error:  # a zombie has no command line any more
        command = p.name()
    return f"process {p.pid} ({status}): {command}"


def _ray_actors() -> set[str]:
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return set()
    return {f"{a['namespace']}/{a['name']}" for a in ray.util.list_named_actors(all_namespaces=True)}


@dataclass(eq=False)
class Scope:
    """What ran when a scope (a test) began, and the tasks its trio runs left behind."""

    threads: set[threading.Thread] = field(default_factory=set)
    busy: set[threading.Thread] = field(default_factory=set)  # trio cache workers busy already
    children: set[tuple[int, float]] = field(default_factory=set)
    actors: set[str] = field(default_factory=set)
    tasks: list[str] = field(default_factory=list)

    def leaks(self) -> list[str]:
        """What was left behind since the scope began, after the graces (empty: nothing)."""
        with _lock:
            tasks, self.tasks = self.tasks, []
        return tasks + self.leaked_threads() + self.leaked_processes() + self.leaked_actors()

    def leaked_threads(self) -> list[str]:
        deadline = time.monotonic() + THREAD_GRACE
        while True:
            left = [
                t
                for t in threading.enumerate()
                if (t not in self.threads and _ours(t) and not _kept_by_a_wider_scope(t))
                or (t not in self.busy and _busy_in_trio_cache(t))
            ]
            if not left or time.monotonic() >= deadline:
                return [_describe_thread(t) for t in left]
            time.sleep(0.01)

    def leaked_processes(self) -> list[str]:
        deadline = time.monotonic() + PROCESS_GRACE
        while True:
            left = [p for p in _children() if _key(p) not in self.children and _alive(p)]
            if not left or time.monotonic() >= deadline:
                return [_describe_process(p) for p in left]
            time.sleep(0.02)

    def leaked_actors(self) -> list[str]:
        deadline = time.monotonic() + PROCESS_GRACE
        while True:
            left = _ray_actors() - self.actors
            if not left or time.monotonic() >= deadline:
                return [f"Ray actor {name!r}" for name in sorted(left)]
            time.sleep(0.05)


@contextlib.contextmanager
def scope() -> Iterator[Scope]:
    """A test (or an example of a property test): what it leaves behind is `scope.leaks()`,
    asked once the scope has ended (the trio runs started inside it report their tasks to it)."""
    threads = set(threading.enumerate())
    s = Scope(
        threads=threads,
        busy={t for t in threads if _busy_in_trio_cache(t)},
        children={_key(p) for p in _children()},
        actors=_ray_actors(),
    )
    with _lock:
        _open.append(s)
    try:
        yield s
    finally:
        with _lock:
            _open.remove(s)


@contextlib.contextmanager
def keeps_threads(*prefixes: str) -> Iterator[None]:
    """For a fixture that keeps a runtime open across tests (module scope): threads whose names
    start with one of `prefixes` (its tools' kept threads, "tool NAME thread ") may outlive each
    test; on exit (the runtime closed by then) everything the fixture left is checked.

    Raises:
        AssertionError: the fixture left something behind.
    """
    with scope() as s:
        with _lock:
            _kept.append(prefixes)
        try:
            yield
        finally:
            with _lock:
                _kept.remove(prefixes)
    left = s.leaks()
    if left:
        raise AssertionError("the fixture left behind:\n  " + "\n  ".join(left))
