"""The worker threads of one sync tool, kept between its calls.

`trio.to_thread.run_sync` hands each call to trio's process-wide thread cache: an async
limiter acquire, a fresh thread name set through ctypes, thread-local state for
`trio.from_thread`, and a result sent back through several layers. A sync tool's calls pay
that on every call. Here each sync tool keeps its own threads and a queue of its calls: a call
takes a token of the tool's budget, joins the queue and parks; a thread runs it in the call's
context (a copy of its caller's; the call's span is made current there) and reschedules the
parked task through the trio token (or, for a call from the host asyncio loop, through the
loop).

A thread that finishes a call takes the next queued one before it sleeps, and a new call wakes
a sleeping thread (or starts one) only when no thread is already on its way to the queue; the
thread that takes a call wakes one more if others still wait. So under load one thread runs
call after call while it holds the GIL, instead of each call waking a thread of its own (a
futex wake, a context switch and a fight for the GIL each: on a GIL-bound server that was a
quarter of the CPU), and a call that blocks still never holds up the others: the thread that
took it has woken the next one first.

The tool's `CapacityLimiter` stays the budget: a call holds one token from the moment it is
queued until its function returns, even if its caller gave up (the call is then abandoned,
counted by the caller, and its result dropped); a call whose caller gives up while it is still
queued leaves the queue and never runs. Threads never outnumber the tokens taken. Idle threads
exit after `IDLE_SECONDS`, and all of them once the tool stops and its queue is empty.
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
        self._lock = threading.Lock()  # guards everything below between the trio thread and the threads
        self._queue: collections.deque[_Job] = collections.deque()  # holding a token, not yet taken
        self._idle: dict[_Thread, None] = {}  # insertion order: the most recently idle last
        self._waking = 0  # threads woken (or started) for the queue that have not taken a job yet
        self._closed = False
        self._started = 0
        self._finished: list[tuple[_Job, outcome.Outcome[Any]]] = []
        self._wake_pending = False  # a `_deliver` is on its way to the trio thread
        self._host_finished: list[tuple[_Job, outcome.Outcome[Any]]] = []
        self._host_wake_pending = False  # a `_deliver_host` is on its way to the host loop
        self._waiting: collections.deque[_Job] = collections.deque()  # host jobs waiting for a token
        self.stuck = 0
        """Jobs still running whose callers stopped waiting (each holds a thread and a token)."""

    async def run(
        self, owner: object, context: contextvars.Context, fn: Callable[..., Any], *args: Any
    ) -> Any:
        """`context.run(fn, *args)` in one of the tool's threads; its value, or its exception raised here.

        `context` must not be entered anywhere else while the thread runs (a call's own copy).

        Cancelled while waiting for a token of the budget, or while queued: nothing runs.
        Cancelled while a thread runs it: the thread runs on (no thread can be interrupted) and
        keeps its token until it returns; `abandoned` is called and Cancelled is raised at once.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        job = _Job(context, fn, args, trio.lowlevel.current_trio_token())
        limiter = self.limiter
        try:
            limiter.acquire_on_behalf_of_nowait(job)
        except trio.WouldBlock:
            await limiter.acquire_on_behalf_of(job)  # every token of the budget is taken: wait
        job.task = trio.lowlevel.current_task()
        self._submit(job)

        def abort(_: object) -> trio.lowlevel.Abort:
            job.task = None  # what the thread returns is dropped
            if not self._unqueue(job):  # it runs already: abandoned
                self.stuck += 1
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
    ) -> _Job:
        """Start `context.run(fn, *args)` for a caller on the host asyncio `loop` (the runtime
        is its trio guest): queued now if a token of the budget is free, else once one is
        (after the trio callers already waiting for one), in order.

        `done(result)` is called on the loop's thread, reached with `loop.call_soon_threadsafe`
        rather than through trio (no wakeup of trio's guest run), unless `drop` came first.
        """
        job = _Job(context, fn, args, None)
        job.loop = loop
        job.done = done
        if self._waiting:
            self._waiting.append(job)  # behind the others
            return job
        try:
            self.limiter.acquire_on_behalf_of_nowait(job)
        except trio.WouldBlock:
            self._waiting.append(job)
            return job
        self._submit(job)
        return job

    def drop(self, job: _Job) -> bool:
        """The caller of a `start`ed job stopped waiting: its result is dropped. True if it had
        not started (it never runs, its token is back); False if it runs (the thread runs on
        and keeps its token until it returns)."""
        job.done = None
        try:
            self._waiting.remove(job)
        except ValueError:
            if self._unqueue(job):
                return True
            self.stuck += 1
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

    # -- on the trio (host loop) thread ------------------------------------------------

    def _submit(self, job: _Job) -> None:
        """Queue `job` (it holds its token); wake an idle thread, or start one, unless a thread
        is on its way to the queue already. If no thread can start, the job leaves the queue,
        its token is given back, and the error is raised."""
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
            self._unqueue(job)
            raise

    def _unqueue(self, job: _Job) -> bool:
        """Take `job` out of the queue if no thread took it yet (its token back): True if so."""
        with self._lock:
            try:
                self._queue.remove(job)
            except ValueError:
                return False
        self._release(job)
        return True

    def _release(self, job: _Job) -> None:
        """Give `job`'s token back: to a trio caller waiting for one, else to the next host job."""
        limiter = self.limiter
        limiter.release_on_behalf_of(job)
        waiting = self._waiting
        while waiting:
            try:
                limiter.acquire_on_behalf_of_nowait(waiting[0])
            except trio.WouldBlock:
                return
            job = waiting.popleft()
            try:
                self._submit(job)
            except Exception as exc:  # no thread can start: that call fails (its token is back)
                done = job.done
                if done is not None:
                    job.done = None
                    done(outcome.Error(exc))

    def _deliver(self) -> None:
        """On the trio thread: hand every finished job's result to its caller."""
        with self._lock:
            finished, self._finished = self._finished, []
            self._wake_pending = False
        for job, result in finished:
            self._release(job)
            task = job.task
            if task is None:  # abandoned while it ran: its thread is free again
                self.stuck -= 1
            else:
                job.task = None
                trio.lowlevel.reschedule(task, result)

    def _deliver_host(self) -> None:
        """On the host loop's thread (inside the guest run): hand back the `start`ed jobs' results."""
        with self._lock:
            finished, self._host_finished = self._host_finished, []
            self._host_wake_pending = False
        for job, result in finished:
            done = job.done
            if done is None:  # dropped while it ran: its thread is free again
                self.stuck -= 1
                self._release(job)
                continue
            job.done = None
            try:
                done(result)  # first: a crash it reports stops the calls waiting for its token
            finally:
                self._release(job)

    # -- in the threads --------------------------------------------------------------

    def _next(
        self, thread: _Thread, woken: bool, done: _Job | None, result: outcome.Outcome[Any] | None
    ) -> _Job | None:
        """In `thread`: hand back `done`'s result (if any), then take the next queued job, or
        go idle (None; `thread.leaving` if it should exit instead).

        Both under one lock: by the time the caller of `done` can give its token to a new
        call, this thread is idle or busy with the next one, never counted as neither. A
        result wakes the trio thread (or the host loop) unless a wake is on its way already,
        so under load many results share one.
        """
        loop = token = None
        helper: _Thread | None = None
        start = ""
        with self._lock:
            if woken:
                self._waking -= 1
            if done is not None:
                if done.loop is not None:
                    self._host_finished.append((done, result))  # type: ignore[arg-type]
                    if not self._host_wake_pending:
                        self._host_wake_pending = True
                        loop = done.loop
                else:
                    self._finished.append((done, result))  # type: ignore[arg-type]
                    if not self._wake_pending:
                        self._wake_pending = True
                        token = done.token
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
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
                loop.call_soon_threadsafe(self._deliver_host)
        if token is not None:
            with contextlib.suppress(trio.RunFinishedError):  # the run ended meanwhile: nobody waits
                token.run_sync_soon(self._deliver)
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
