"""A tool actor: one tool behind a bounded mailbox, its lifecycle, and its supervision.

Life of an actor (each turn of the loop is one incarnation, Erlang/OTP one_for_one):

    setup() ──ok──▶ serve: workers take envelopes from the mailbox ──stop──▶ teardown() ─▶ stopped
       │                 │ a `restart_on` exception, or the actor's own failure:
       │ fails           ▼   in-flight calls fail, queued ones wait
       └──────────▶ teardown() ─▶ backoff ─▶ setup() again ...
                    more than `max_restarts` within `within` seconds ─▶ down: every call UNAVAILABLE
    setup() longer than `setup_timeout` ─▶ down

Only the tool's own exceptions while it executes count toward a restart; invalid
arguments, rejections, timeouts and cancellations never do. Serving calls is `WorkerPool`'s.

A tool placed in other processes (`Subprocess`, `Ray`) runs `setup()` there, in each worker:
an incarnation opens the placement (bounded by `setup_timeout`) and closes it at the end. A
worker that dies on its own is replaced by the placement and counts toward the restart
intensity like a crash (`worker_lost`), without failing the calls of the other workers.
"""

from __future__ import annotations

import collections
import enum
import logging
from typing import Any

import trio

from ..messages import FailureKind
from ..tools import PlacedTool, Placement, ToolBase
from ._config import EngineConfig, RestartPolicy
from ._envelope import ABANDON_GRACE, Envelope
from ._outcome import describe_error
from ._stats import ToolCounters, ToolStatistics
from ._worker import WorkerPool, escapes

__all__ = ["ActorState", "ToolActor"]

log = logging.getLogger("runtime.engine")


class ActorState(enum.StrEnum):
    """Where an actor is in its life."""

    STARTING = "starting"
    UP = "up"
    RESTARTING = "restarting"
    DOWN = "down"
    STOPPED = "stopped"


class _Crash(Exception):
    """Why an incarnation ended early (kept apart from exceptions in the tool's own code)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ToolActor:
    """Serves one tool. Callers `submit` envelopes; the supervisor runs `supervise`.

    Attributes:
        ready: set once the first setup attempt has ended (however it ended).
        stopped: set once the actor has stopped for good.
    """

    def __init__(self, tool: ToolBase[Any, Any], config: EngineConfig) -> None:
        self.tool = tool
        self.name = tool.name
        self.config = config
        options = tool.options  # read once: the actor serves with these
        self.options = options
        self._send, recv = trio.open_memory_channel[Envelope](options.mailbox_size)
        self._recv = recv
        self.state = ActorState.STARTING
        self.down_reason: str | None = None
        self.reject_when_full = options.on_full == "reject"
        self.counters = ToolCounters()
        self.pool = WorkerPool(tool, options, config, self.counters, recv, self._crash_now, self._unavailable)
        self.untimed = options.timeout is None and config.default_timeout is None
        self.asks = options.requires_approval is not False  # its calls need a CallContext
        placement = options.placement
        self.placement: Placement | None = (
            placement if placement is not None and not placement.in_process else None
        )
        cls = type(tool)
        self._has_setup = cls.setup is not ToolBase.setup and self.placement is None
        self._has_teardown = cls.teardown is not ToolBase.teardown and self.placement is None
        self._policy = RestartPolicy()
        self._recent: collections.deque[float] = collections.deque()  # recent restarts (intensity)
        self._nursery: trio.Nursery | None = None
        self._crash: _Crash | None = None
        self._stopping = False
        self._stop_scope: trio.CancelScope | None = None
        self._setup_scope: trio.CancelScope | None = None
        self.ready = trio.Event()
        self.stopped = trio.Event()

    # -- the caller's side -------------------------------------------------------------

    def submit_nowait(self, env: Envelope) -> bool:
        """Queue `env`, or settle it if the tool cannot take it; False: the caller must wait."""
        if self.state is ActorState.DOWN or self._stopping:
            env.fail(FailureKind.UNAVAILABLE, self._unavailable())
            return True
        try:
            self._send.send_nowait(env)
        except trio.WouldBlock:
            if self.reject_when_full:
                env.fail(
                    FailureKind.OVERLOADED,
                    f"tool {self.name!r} is overloaded ({self.options.mailbox_size} calls waiting); "
                    "try again later",
                )
                return True
            return False
        except trio.ClosedResourceError:
            env.fail(FailureKind.UNAVAILABLE, self._unavailable())
        return True

    async def submit(self, env: Envelope) -> None:
        """Queue `env`, waiting for room in the mailbox (backpressure) if it is full."""
        if self.submit_nowait(env):
            return
        try:
            await self._send.send(env)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            env.fail(FailureKind.UNAVAILABLE, self._unavailable())

    def statistics(self) -> ToolStatistics:
        """A snapshot of this tool's counters."""
        c = self.counters
        stuck = c.stuck_orphans(trio.current_time()) if c.orphans else 0
        stuck_threads = self.pool.stuck_threads()
        limiter = self.pool.limiter
        return ToolStatistics(
            calls=c.calls,
            succeeded=c.succeeded,
            failures=dict(c.failures),
            in_flight=c.in_flight,
            queued=self._send.statistics().current_buffer_used,
            restarts=c.restarts,
            state=self.state.value,
            abandoned=c.abandoned_late + stuck + c.abandoned_threads,
            abandoned_running=stuck + stuck_threads,
            threads=limiter.borrowed_tokens if limiter is not None else 0,
            down_reason=self.down_reason,
        )

    def _unavailable(self) -> str:
        if self.state is ActorState.DOWN:
            return f"tool {self.name!r} is down: {self.down_reason}"
        if self._stopping:
            return f"tool {self.name!r} is unavailable: the runtime is shutting down"
        return f"tool {self.name!r} is unavailable: its actor stopped unexpectedly and is restarting"

    # -- supervision -------------------------------------------------------------------

    async def supervise(self, policy: RestartPolicy, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Run incarnations until stopped or down. Reports `started()` at once; `ready` after
        the first setup attempt (so that nobody who starts an actor waits on its setup)."""
        task_status.started()
        self._policy = policy
        recent = self._recent
        try:
            while not self._stopping:
                try:
                    crash = await self._incarnation()
                except Exception as exc:  # the actor's own failure: supervised like a crash
                    log.exception("tool %r: its actor failed", self.name)
                    crash = _Crash(f"its actor failed: {describe_error(exc)[1]}")
                self.ready.set()
                if crash is None or self._stopping or self.state is ActorState.DOWN:
                    break
                now = trio.current_time()
                recent.append(now)
                while recent and recent[0] < now - policy.within:
                    recent.popleft()
                if len(recent) > policy.max_restarts:
                    self._go_down(
                        f"it crashed {len(recent)} times within {policy.within:g}s (last: {crash.reason})"
                    )
                    return
                self.counters.restarts += 1
                self.state = ActorState.RESTARTING
                log.warning("tool %r crashed (%s); restarting", self.name, crash.reason)
                self.config.pipeline.supervisor_event(self.name, "restart", crash.reason)
                with trio.CancelScope() as self._stop_scope:
                    await trio.sleep(policy.delay(len(recent)))
                self._stop_scope = None
        finally:
            if self.pool.threads is not None:
                self.pool.threads.close()
            self.ready.set()
            if self.state is not ActorState.DOWN:
                self.state = ActorState.STOPPED
            self._fail_queued(self._unavailable())
            self.stopped.set()

    async def _incarnation(self) -> _Crash | None:
        self._crash = None
        if self._has_setup:
            limit = self.options.setup_timeout
            scope = self._setup_scope = trio.CancelScope()  # kill() cancels a setup that hangs
            timer = trio.CancelScope(
                deadline=trio.current_time() + limit if limit is not None else float("inf")
            )
            try:
                with scope, timer:
                    await self.tool.setup()
            except BaseException as exc:
                if escapes(exc) and not timer.cancelled_caught:
                    raise
                log.warning("setup of tool %r failed", self.name, exc_info=True)
                self.ready.set()
                await self._teardown()
                return _Crash(f"setup failed: {describe_error(exc)[1]}")
            finally:
                self._setup_scope = None
            if timer.cancelled_caught:
                self.ready.set()
                await self._teardown()
                self._go_down(f"its setup() did not finish within {limit:g}s")
                return None
            if scope.cancelled_caught:  # stopped while setting up
                self.ready.set()
                await self._teardown()
                return None
        if self.placement is not None:
            async with self.placement.open(self.tool, self) as placed:
                crash = await self._start_placed(placed)
                if crash is not None or self.state is ActorState.DOWN or self._stopping:
                    return crash
                self.pool.placed = placed
                return await self._serve()
        return await self._serve()

    async def _serve(self) -> _Crash | None:
        self.state = ActorState.UP
        self.ready.set()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self.pool.start(nursery)
            await self._end_host_calls()
        finally:
            self.pool.stop_fast_paths()
            self.pool.kill_hosts()  # cancelled while waiting for them: answered now
            self.pool.give_up_hosts()
            self._nursery = None
            self.pool.placed = None
            await self._teardown()
        return self._crash

    async def _end_host_calls(self) -> None:
        """The workers ended; calls started from the host loop have no worker, so wait for them
        here. Stopping: as long as the supervisor's grace (its kill and abandonment reach them
        through `kill` and `abandon`). Crashed or down (`kill_hosts` cancelled them): a grace,
        then `_serve`'s finally answers the ones still running anyway."""
        if self._stopping:
            await self.pool.hosts_ended()
            return
        with trio.move_on_after(ABANDON_GRACE):
            await self.pool.hosts_ended()

    async def _start_placed(self, placed: PlacedTool) -> _Crash | None:
        """Start the tool's workers (each runs setup()), bounded by `setup_timeout`."""
        limit = self.options.setup_timeout
        scope = self._setup_scope = trio.CancelScope()
        timer = trio.CancelScope(deadline=trio.current_time() + limit if limit is not None else float("inf"))
        try:
            with scope, timer:
                await placed.start()
        except BaseException as exc:
            if escapes(exc) and not timer.cancelled_caught and not scope.cancelled_caught:
                raise
            if not timer.cancelled_caught and not scope.cancelled_caught:
                log.warning("tool %r: its workers failed to start", self.name, exc_info=True)
                self.ready.set()
                return _Crash(f"its workers failed to start: {describe_error(exc)[1]}")
        finally:
            self._setup_scope = None
        if timer.cancelled_caught:
            self.ready.set()
            self._go_down(f"its workers did not start (setup) within {limit:g}s")
        elif scope.cancelled_caught:
            self.ready.set()
        return None

    def worker_lost(self, reason: str) -> float | None:
        """A worker of the tool's placement died on its own: count it as a restart.

        Returns the backoff before it is replaced, or None if the tool is now down.
        """
        if self._stopping or self.state is ActorState.DOWN:
            return None
        policy = self._policy
        now = trio.current_time()
        recent = self._recent
        recent.append(now)
        while recent and recent[0] < now - policy.within:
            recent.popleft()
        if len(recent) > policy.max_restarts:
            self._go_down(f"its workers died {len(recent)} times within {policy.within:g}s (last: {reason})")
            if self._nursery is not None:
                self._nursery.cancel_scope.cancel()
            return None
        self.counters.restarts += 1
        log.warning("tool %r: %s; replacing it", self.name, reason)
        self.config.pipeline.supervisor_event(self.name, "restart", reason)
        return policy.delay(len(recent))

    def _crash_now(self, reason: str) -> None:
        """The tool raised a `restart_on` exception: end this incarnation (its calls fail)."""
        self._crash = _Crash(reason)
        self.pool.stop_fast_paths()
        self.pool.kill_hosts()
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    async def _teardown(self) -> None:
        if not self._has_teardown:
            return
        with trio.CancelScope(shield=True), trio.move_on_after(self.config.shutdown_timeout):
            try:
                await self.tool.teardown()
            except BaseException as exc:
                if escapes(exc):
                    raise
                log.warning("teardown of tool %r failed", self.name, exc_info=True)

    def _go_down(self, reason: str) -> None:
        self.state = ActorState.DOWN
        self.pool.stop_fast_paths()
        self.pool.kill_hosts()
        self.down_reason = reason
        log.error("tool %r is down: %s", self.name, reason)
        self.config.pipeline.supervisor_event(self.name, "down", reason)
        self._send.close()
        self._fail_queued(self._unavailable())

    def _fail_queued(self, message: str) -> None:
        while True:
            try:
                env = self._recv.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                return
            env.fail(FailureKind.UNAVAILABLE, message)

    def begin_stop(self) -> None:
        """Stop taking calls; queued calls fail, running ones may finish (graceful)."""
        self._stopping = True
        self.pool.stopping = True
        self.pool.stop_fast_paths()
        self._send.close()
        self._fail_queued(self._unavailable())  # now, not once a busy worker gets to them
        if self._stop_scope is not None:
            self._stop_scope.cancel()

    def kill(self) -> None:
        """Cancel the running calls (they fail UNAVAILABLE) and a setup still running (brutal)."""
        self.begin_stop()
        self.pool.kill_hosts()
        if self._setup_scope is not None:
            self._setup_scope.cancel()
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    def abandon(self) -> int:
        """After a kill that did not stop them: answer the calls still running; returns how many.

        Their work runs on where it is (it ignores cancellation, or blocks the thread it is
        in); it is counted as abandoned, and its results are dropped.
        """
        running = list(self.pool.running)
        for env in running:
            env.give_up(
                FailureKind.UNAVAILABLE,
                f"tool {self.name!r} is unavailable: the runtime shut down while this call ran, "
                "and the call did not stop when cancelled",
            )
        return len(running)
