"""The worker threads of one sync tool, kept between its calls.

`trio.to_thread.run_sync` hands each call to trio's process-wide thread cache: an async
limiter acquire, a fresh thread name set through ctypes, thread-local state for
`trio.from_thread`, and a result sent back through several layers. A sync tool's calls pay
that on every call. Here each sync tool keeps its own threads and a queue of its jobs: a job
joins the queue; a thread runs it in the call's context (a copy of its caller's; the call's
span is made current there) and its result goes back to the runtime's thread (through the
trio token, or through the host asyncio loop when the runtime is its guest), where the job's
`done` callback gets it.

A thread that finishes a job takes the next queued one before it sleeps, and a new job wakes
a sleeping thread (or starts one) only when no thread is already on its way to the queue; the
thread that takes a job wakes one more if others still wait. So under load one thread runs
job after job while it holds the GIL, instead of each job waking a thread of its own (a
futex wake, a context switch and a fight for the GIL each: on a GIL-bound server that was a
quarter of the CPU), and a job that blocks still never holds up the others: the thread that
took it has woken the next one first.

How many jobs run at once is the tool's mailbox's business (its capacity is the tool's thread
budget); a job dropped while still queued leaves the queue and never runs. Idle threads exit
after `IDLE_SECONDS`, and all of them once the tool stops and its queue is empty.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import threading
from collections.abc import Callable
from typing import Any

import outcome
import trio

__all__ = ["IDLE_SECONDS", "Job", "KeptThreads"]

IDLE_SECONDS = 10.0
"""An idle thread exits after this long without a call (trio's own thread cache does the same)."""


class Job:
    """One call for a thread: `context.run(fn, *args)`, its outcome to `done` (on the runtime's thread)."""

    __slots__ = ("args", "context", "done", "fn")

    def __init__(
        self,
        context: contextvars.Context,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        done: Callable[[Job, outcome.Outcome[Any]], None],
    ) -> None:
        self.fn = fn
        self.args = args
        self.context = context
        self.done = done


class KeptThreads:
    """The threads of one sync tool.

    Args:
        name: the tool's name (the threads are named after it).
        loop: the host asyncio loop when the runtime is its guest (results go back through it,
            which wakes nothing else); None: through the trio token of the current run.
    """

    def __init__(self, name: str, loop: Any = None) -> None:
        self.name = name
        self._loop = loop
        self._token = trio.lowlevel.current_trio_token() if loop is None else None
        self._lock = threading.Lock()  # guards everything below between the runtime's thread and the threads
        self._queue: collections.deque[Job] = collections.deque()  # not yet taken by a thread
        self._idle: dict[_Thread, None] = {}  # insertion order: the most recently idle last
        self._waking = 0  # threads woken (or started) for the queue that have not taken a job yet
        self._closed = False
        self._started = 0
        self._finished: list[tuple[Job, outcome.Outcome[Any]]] = []
        self._wake_pending = False  # a `_deliver` is on its way to the runtime's thread

    def submit(
        self,
        context: contextvars.Context,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        done: Callable[[Job, outcome.Outcome[Any]], None],
    ) -> Job:
        """Run `context.run(fn, *args)` in one of the tool's threads; `done(job, outcome)` is
        called on the runtime's thread when it returns (dropped or not).

        `context` must not be entered anywhere else while the thread runs (a call's own copy).

        Raises:
            RuntimeError: no thread could be started (the job is not queued).
        """
        job = Job(context, fn, args, done)
        self._submit(job)
        return job

    def drop(self, job: Job) -> bool:
        """Take `job` out of the queue if no thread took it yet: True if so (it never runs, and
        `done` is never called); False if it runs already."""
        with self._lock:
            try:
                self._queue.remove(job)
            except ValueError:
                return False
        return True

    def close(self) -> None:
        """Let every thread exit: idle ones now, busy ones once the queue is empty."""
        with self._lock:
            self._closed = True
            idle = list(self._idle)
            self._idle.clear()
        for thread in idle:
            thread.leave()

    @property
    def idle(self) -> int:
        return len(self._idle)

    # -- on the runtime's thread ---------------------------------------------------------

    def _submit(self, job: Job) -> None:
        """Queue `job`; wake an idle thread, or start one, unless a thread is on its way to the
        queue already. If no thread can start, the job leaves the queue and the error is raised."""
        with self._lock:
            self._queue.append(job)
            if self._waking:
                return
            self._waking = 1
            thread = self._idle.popitem()[0] if self._idle else None
            if thread is None:
                self._started += 1
                name = f"tool {self.name} thread {self._started}"
        if thread is not None:
            thread.wake()
            return
        try:
            _Thread(self, name)
        except BaseException:
            with self._lock:
                self._waking -= 1
            self.drop(job)
            raise

    def _deliver(self) -> None:
        """On the runtime's thread: hand every finished job's outcome to its `done`."""
        with self._lock:
            finished, self._finished = self._finished, []
            self._wake_pending = False
        for job, result in finished:
            job.done(job, result)

    # -- in the threads --------------------------------------------------------------

    def _next(
        self, thread: _Thread, woken: bool, done: Job | None, result: outcome.Outcome[Any] | None
    ) -> Job | None:
        """In `thread`: hand back `done`'s result (if any), then take the next queued job, or
        go idle (None; `thread.leaving` if it should exit instead).

        Both under one lock: by the time `done`'s slot can go to a new call, this thread is
        idle or busy with the next one, never counted as neither. A result wakes the runtime's
        thread unless a wake is on its way already, so under load many results share one.
        """
        wake = False
        helper: _Thread | None = None
        start = ""
        with self._lock:
            if woken:
                self._waking -= 1
            if done is not None:
                self._finished.append((done, result))  # type: ignore[arg-type]
                if not self._wake_pending:
                    self._wake_pending = wake = True
            queue = self._queue
            job = queue.popleft() if queue else None
            if job is not None:
                if queue and not self._waking:  # others wait: one more thread on its way
                    self._waking = 1
                    if self._idle:
                        helper = self._idle.popitem()[0]
                    else:
                        self._started += 1
                        start = f"tool {self.name} thread {self._started}"
            elif self._closed:
                thread.leaving = True
            else:
                self._idle[thread] = None
        if wake:
            if self._loop is not None:
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
                    self._loop.call_soon_threadsafe(self._deliver)
            else:
                assert self._token is not None
                with contextlib.suppress(trio.RunFinishedError):  # the run ended meanwhile: nobody waits
                    self._token.run_sync_soon(self._deliver)
        if helper is not None:
            helper.wake()
        elif start:
            try:
                _Thread(self, start)
            except BaseException:  # no thread can start now: this one takes the queue in turn
                with self._lock:
                    self._waking -= 1
        return job

    def _retire(self, thread: _Thread) -> bool:
        """An idle thread timed out: True if it may exit (no wake is being given to it)."""
        with self._lock:
            return self._idle.pop(thread, False) is None


class _Thread:
    """One kept thread: it runs queued jobs, and sleeps on its own lock when there are none."""

    __slots__ = ("_go", "_pool", "leaving")

    def __init__(self, pool: KeptThreads, name: str) -> None:
        self._pool = pool
        self._go = threading.Lock()
        self._go.acquire()
        self.leaving = False
        threading.Thread(target=self._serve, name=name, daemon=True).start()

    def wake(self) -> None:
        """Take from the queue (the thread was idle)."""
        self._go.release()

    def leave(self) -> None:
        """Exit (the thread was idle)."""
        self.leaving = True
        self._go.release()

    def _serve(self) -> None:
        pool = self._pool
        job = pool._next(self, True, None, None)  # started for the queue
        while True:
            if job is None:  # idle: wait to be woken
                if self.leaving:
                    return
                if not self._go.acquire(timeout=IDLE_SECONDS):
                    if pool._retire(self):
                        return
                    self._go.acquire()  # a wake (or leave) is being given right now
                if self.leaving:
                    return
                job = pool._next(self, True, None, None)
                continue
            result = outcome.capture(job.context.run, job.fn, *job.args)
            job.fn = job.args = None  # type: ignore[assignment]  # drop references before waiting again
            job = pool._next(self, False, job, result)
            del result
