"""One program's sandbox: a session of monty's sync worker pool, driven from trio step by step.

monty runs a program in a worker process and stops it at each thing only the host can answer
(a tool call, an OS call, a name it does not know, futures it waits for); each answer is a
blocking turn on the worker's pipe (`feed_start`, then `snapshot.resume(...)`). A turn runs in
one of trio's kept threads (its thread cache: no thread is made per turn once warm), and the
trio task waits on it as `trio.to_thread.run_sync` would, with one difference: cancelling the
task (the code call's deadline, its caller gone) kills the worker process, which ends the turn
at once (`MontyCrashedError`), whatever the program was doing (spinning, allocating, sleeping).
The pool replaces a killed worker.

A program's first turn also checks a session out of the pool, and the turn in which it ends
(its value, or its error) gives the session back; a sandbox closed in the middle (cancelled, or
the host gave up on it) kills its worker first, so no worker goes back to the pool with a
program suspended in it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import outcome
import trio

__all__ = ["Sandbox", "SandboxKilled"]

T = TypeVar("T")

CLOSE_GRACE = 5.0
"""Seconds closing a sandbox may take (giving its session back), even when cancelled."""


class SandboxKilled(Exception):
    """The sandbox's worker was killed before the program started (it was cancelled first)."""


class Sandbox:
    """One checked-out monty session and its worker process, stepped from a trio task.

    Args:
        pool: a `pydantic_monty.Monty` pool, entered.
        checkout: keywords of `pool.checkout(...)` (limits, OS policy, script name).
        counters: the code tool's statistics, whose `sandbox_waits` this keeps.
        advance: called in the turn's thread with each turn's snapshot; it answers what it can
            there (more steps of the same turn) and returns what the turn gives back to trio.
    """

    __slots__ = ("_advance", "_checkout", "_counters", "_lock", "_pid", "_pool", "_session", "killed")

    def __init__(
        self, pool: Any, checkout: dict[str, Any], counters: Any, advance: Callable[[Any], Any]
    ) -> None:
        self._pool = pool
        self._advance = advance
        self._checkout = checkout
        self._counters = counters
        self._lock = threading.Lock()
        self._session: Any = None
        self._pid: int | None = None
        self.killed = False

    # -- turns -----------------------------------------------------------------------

    async def start(self, code: str, printed: Any) -> Any:
        """Check a session out and feed it `code`: `advance` of the first snapshot."""

        def begin() -> Any:
            session = self._pool.checkout(**self._checkout)
            session.__enter__()
            with self._lock:
                self._session = session
                self._pid = session.worker_pid
                killed = self.killed
            if killed:  # cancelled while the checkout waited: nothing of the program ran
                raise SandboxKilled("the program was stopped before it started")
            return self._ended_if_done(lambda: session.feed_start(code, print_callback=printed))

        return await self._turn(begin)

    async def resume(self, step: Callable[[], Any]) -> Any:
        """`step()` (a snapshot's `resume`, with its answer): `advance` of the next snapshot."""
        return await self._turn(lambda: self._ended_if_done(step))

    def _ended_if_done(self, turn: Callable[[], Any]) -> Any:
        """`advance(turn())` in the turn's thread; a program that ended gives its session back there."""
        try:
            advanced = self._advance(turn())
        except BaseException:
            self._give_back()
            raise
        if type(advanced[0]).__name__ == "MontyComplete":
            self._give_back()
        return advanced

    async def _turn(self, work: Callable[[], T]) -> T:
        """`work()` in a kept thread; cancelled meanwhile, the worker is killed, the turn
        ends, and then the cancellation goes on."""
        await trio.lowlevel.checkpoint_if_cancelled()
        task = trio.lowlevel.current_task()
        token = trio.lowlevel.current_trio_token()

        def deliver(result: outcome.Outcome[T]) -> None:
            token.run_sync_soon(trio.lowlevel.reschedule, task, result)

        def abort(_: Any) -> trio.lowlevel.Abort:
            self.kill()
            return trio.lowlevel.Abort.FAILED  # the turn's thread still answers (at once, now)

        counters = self._counters
        counters.sandbox_waits += 1
        try:
            trio.lowlevel.start_thread_soon(work, deliver, name="runtime.code sandbox turn")
            try:
                result: T = await trio.lowlevel.wait_task_rescheduled(abort)
            except BaseException:
                if self.killed:
                    await trio.lowlevel.checkpoint()  # the cancellation that killed it, if any
                raise
        finally:
            counters.sandbox_waits -= 1
        if self.killed:
            await trio.lowlevel.checkpoint()
        return result

    # -- the end ---------------------------------------------------------------------

    def kill(self) -> None:
        """Kill the worker (SIGKILL): a turn in progress ends at once. Safe from any thread."""
        with self._lock:
            if self.killed:
                return
            self.killed = True
            pid = self._pid if self._session is not None else None
        if pid is not None:
            self._counters.workers_killed += 1
            _kill_child(pid)

    async def close(self) -> None:
        """Give the session back; one left in the middle of a program is killed first.

        Runs even when cancelled (shielded, at most `CLOSE_GRACE` seconds).
        """
        with self._lock:
            session = self._session
        if session is None:
            return
        self.kill()
        counters = self._counters
        counters.sandbox_waits += 1
        try:
            with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_GRACE):
                await trio.to_thread.run_sync(self._give_back)
        finally:
            counters.sandbox_waits -= 1

    def _give_back(self) -> None:
        with self._lock:
            session, self._session = self._session, None
        if session is not None:
            with contextlib.suppress(Exception):  # a killed worker's session only says it died
                session.__exit__(None, None, None)


def _kill_child(pid: int) -> None:
    """SIGKILL `pid` if it is still this process's child (the pool's worker, not yet reaped)."""
    if sys.platform.startswith("linux"):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
            parent = int(stat[stat.rindex(b")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            return  # gone already
        if parent != os.getpid():
            return  # reaped and its number reused: not ours to kill
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)
