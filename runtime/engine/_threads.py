"""The worker threads of one sync tool, kept between its calls.

`trio.to_thread.run_sync` hands each call to trio's process-wide thread cache: an async
limiter acquire, a fresh thread name set through ctypes, thread-local state for
`trio.from_thread`, and a result sent back through several layers. A sync tool's calls pay
that on every call. Here each sync tool keeps its own threads: a call takes an idle one (or
starts one, within the tool's budget), hands it the job through the thread's own lock, and
parks; the thread runs the function in the call's context (a copy of its caller's; the
call's span is made current there) and reschedules the parked task through the trio token. Fewer steps that release the
GIL in the thread also matter under load, where each one may wait for the loop's thread.

The tool's `CapacityLimiter` stays the budget: a thread holds one token from the moment it
takes a job until the function returns, even if its caller gave up (the call is then
abandoned, counted by the caller, and its result dropped). Idle threads exit after
`IDLE_SECONDS`, and all of them once the tool stops.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable
from typing import Any

import outcome
import trio

__all__ = ["IDLE_SECONDS", "KeptThreads"]

IDLE_SECONDS = 10.0
"""An idle thread exits after this long without a call (trio's own thread cache does the same)."""


class _Job:
    __slots__ = ("args", "context", "done", "fn", "loop", "task", "token")

    def __init__(
        self,
        context: contextvars.Context,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        token: trio.lowlevel.TrioToken | None,
    ) -> None:
        self.fn = fn
        self.args = args
        self.context = context
        self.token = token
        self.task: trio.lowlevel.Task | None = None  # None once its caller stopped waiting
        self.loop: Any = None  # a host loop's job (`start`): its result goes back through the loop
        self.done: Callable[[outcome.Outcome[Any]], None] | None = None  # None: dropped


class KeptThreads:
    """The threads of one sync tool.

    Args:
        name: the tool's name (the threads are named after it).
        limiter: the tool's thread budget.
        abandoned: called (on the trio thread) with a job's `owner` when its caller stops
            waiting for it while it runs.
    """

    def __init__(self, name: str, limiter: trio.CapacityLimiter, abandoned: Callable[[Any], None]) -> None:
        self.name = name
        self.limiter = limiter
        self._abandoned = abandoned
        self._lock = threading.Lock()  # guards `_idle` and `_closed` between the trio thread and the threads
        self._idle: dict[_Thread, None] = {}  # insertion order: the most recently idle last
        self._closed = False
        self._started = 0
        self._finished: list[tuple[_Job, outcome.Outcome[Any]]] = []  # guarded by `_lock`
        self._wake_pending = False  # a `_deliver` is on its way to the trio thread
        self._host_finished: list[tuple[_Job, outcome.Outcome[Any]]] = []  # guarded by `_lock`
        self._host_wake_pending = False  # a `_deliver_host` is on its way to the host loop

    async def run(
        self, owner: object, context: contextvars.Context, fn: Callable[..., Any], *args: Any
    ) -> Any:
        """`context.run(fn, *args)` in one of the tool's threads; its value, or its exception raised here.

        `context` must not be entered anywhere else while the thread runs (a call's own copy).

        Cancelled while waiting for a token of the budget: nothing runs. Cancelled while the
        thread runs it: the thread runs on (no thread can be interrupted) and keeps its token
        until it returns; `abandoned` is called and Cancelled is raised at once.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        job = _Job(context, fn, args, trio.lowlevel.current_trio_token())
        limiter = self.limiter
        try:
            limiter.acquire_on_behalf_of_nowait(job)
        except trio.WouldBlock:
            await limiter.acquire_on_behalf_of(job)  # every thread of the budget is busy: wait
        thread = self._thread(job)
        job.task = trio.lowlevel.current_task()
        thread.give(job)

        def abort(_: object) -> trio.lowlevel.Abort:
            job.task = None  # what the thread returns is dropped
            self._abandoned(owner)
            return trio.lowlevel.Abort.SUCCEEDED

        return await trio.lowlevel.wait_task_rescheduled(abort)

    def start(
        self,
        context: contextvars.Context,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        loop: Any,
        done: Callable[[outcome.Outcome[Any]], None],
    ) -> _Job | None:
        """Start `context.run(fn, *args)` for a caller on the host asyncio `loop` (the runtime
        is its trio guest), if a token of the budget is free now; None if none is.

        `done(result)` is called on the loop's thread, reached with `loop.call_soon_threadsafe`
        rather than through trio (no wakeup of trio's guest run), unless `drop` came first.
        """
        job = _Job(context, fn, args, None)
        job.loop = loop
        job.done = done
        try:
            self.limiter.acquire_on_behalf_of_nowait(job)
        except trio.WouldBlock:
            return None
        self._thread(job).give(job)
        return job

    @staticmethod
    def drop(job: _Job) -> None:
        """The caller of a `start`ed job stopped waiting: its result is dropped (the thread runs
        on and keeps its token until it returns)."""
        job.done = None

    def _thread(self, job: _Job) -> _Thread:
        """An idle thread, or a new one; the job's token is given back if none can start."""
        try:
            with self._lock:
                thread = self._idle.popitem()[0] if self._idle else None
            if thread is None:
                self._started += 1
                thread = _Thread(self, f"tool {self.name} thread {self._started}")
        except BaseException:
            self.limiter.release_on_behalf_of(job)
            raise
        return thread

    def close(self) -> None:
        """Let every thread exit: idle ones now, busy ones when their function returns."""
        with self._lock:
            self._closed = True
            idle = list(self._idle)
            self._idle.clear()
        for thread in idle:
            thread.give(None)

    @property
    def idle(self) -> int:
        return len(self._idle)

    # -- called by the threads -------------------------------------------------------

    def _finish(self, job: _Job, result: outcome.Outcome[Any]) -> None:
        """In the thread: queue the result; wake the trio thread unless a wake is on its way.

        Under load many results share one `run_sync_soon` (one write to trio's wakeup socket,
        one trip through its lock), instead of one each.
        """
        if job.loop is not None:
            with self._lock:
                self._host_finished.append((job, result))
                if self._host_wake_pending:
                    return
                self._host_wake_pending = True
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
                job.loop.call_soon_threadsafe(self._deliver_host)
            return
        with self._lock:
            self._finished.append((job, result))
            if self._wake_pending:
                return
            self._wake_pending = True
        assert job.token is not None
        with contextlib.suppress(trio.RunFinishedError):  # the run ended meanwhile: nobody waits
            job.token.run_sync_soon(self._deliver)

    def _deliver(self) -> None:
        """On the trio thread: hand every finished job's result to its caller."""
        with self._lock:
            finished, self._finished = self._finished, []
            self._wake_pending = False
        for job, result in finished:
            self.limiter.release_on_behalf_of(job)
            task = job.task
            if task is not None:
                job.task = None
                trio.lowlevel.reschedule(task, result)

    def _deliver_host(self) -> None:
        """On the host loop's thread (inside the guest run): hand back the `start`ed jobs' results."""
        with self._lock:
            finished, self._host_finished = self._host_finished, []
            self._host_wake_pending = False
        for job, result in finished:
            self.limiter.release_on_behalf_of(job)
            done = job.done
            if done is not None:
                job.done = None
                done(result)

    def _park(self, thread: _Thread) -> bool:
        """The thread is free: keep it (True), or let it exit if the tool stopped (False)."""
        with self._lock:
            if self._closed:
                return False
            self._idle[thread] = None
            return True

    def _retire(self, thread: _Thread) -> bool:
        """An idle thread timed out: True if it may exit (no job is being handed to it)."""
        with self._lock:
            return self._idle.pop(thread, False) is None


class _Thread:
    """One kept thread: it waits on its own lock for the next job."""

    __slots__ = ("_go", "_job", "_pool")

    def __init__(self, pool: KeptThreads, name: str) -> None:
        self._pool = pool
        self._go = threading.Lock()
        self._go.acquire()
        self._job: _Job | None = None
        threading.Thread(target=self._serve, name=name, daemon=True).start()

    def give(self, job: _Job | None) -> None:
        """Hand over the next job (None: exit)."""
        self._job = job
        self._go.release()

    def _serve(self) -> None:
        pool = self._pool
        while True:
            if not self._go.acquire(timeout=IDLE_SECONDS):
                if pool._retire(self):
                    return
                self._go.acquire()  # a job is being handed over right now
            job = self._job
            self._job = None
            if job is None:
                return
            result = outcome.capture(job.context.run, job.fn, *job.args)
            job.fn = job.args = None  # type: ignore[assignment]  # drop references before waiting again
            keep = pool._park(self)
            pool._finish(job, result)
            del job, result
            if not keep:
                return
