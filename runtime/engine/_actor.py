"""A tool actor: one tool behind its mailbox, its executors, its lifecycle and its supervision.

Life of an actor (each turn of the loop is one incarnation, Erlang/OTP one_for_one):

    setup() ──ok──▶ serve: the mailbox starts calls on the executors ──stop──▶ teardown() ─▶ stopped
       │                 │ a `restart_on` exception, or the actor's own failure:
       │ fails           ▼   running calls fail UNAVAILABLE, waiting ones wait
       └──────────▶ teardown() ─▶ backoff ─▶ setup() again ...
                    more than `max_restarts` within `within` seconds ─▶ down: every call UNAVAILABLE
    setup() longer than `setup_timeout` ─▶ down

    down ─▶ cool-down ─▶ one try (half-open: setup, or the placement's start) ──starts──▶ serve
                              └──fails──▶ down again, the next cool-down twice as long

Only the tool's own exceptions while it executes count toward a restart; invalid arguments,
rejections, timeouts and cancellations never do. A tool placed in other processes (`Subprocess`,
`Ray`) runs `setup()` there, in each worker: an incarnation opens the placement (bounded by
`setup_timeout`) and closes it at the end; a worker that dies on its own is replaced by the
placement and counts in the same restart window (`worker_lost`), without failing the calls of
the other workers. This module decides what comes after each incarnation (restart, down, rest,
stop); one incarnation's own steps are engine/_incarnation.py.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import msgspec
import trio

from ..messages import FailureKind
from ..tools import ToolBase
from ._chain import drive
from ._incarnation import ActorState, Incarnation
from ._mailbox import Mailbox
from ._options import RestartPolicy, Settings
from ._outcome import describe_error
from ._plan import ToolPlan
from ._resilience import CachePolicy, resilience_counts
from ._restart import RestartWindow
from ._stats import ToolCounters, ToolStatistics
from ._wiring import Executors, arm_policies

__all__ = ["ActorState", "ToolActor"]

log = logging.getLogger("runtime.engine")


class ToolActor(Incarnation):
    """Serves one tool. Callers `admit` calls through its mailbox; the supervisor runs `supervise`.

    Attributes:
        plan: how its calls are served (decode, outcome mapping, what executors run).
        mailbox: its admission point.
        ready: set once the first setup attempt has ended (however it ended).
        stopped: set once the actor has stopped for good.
    """

    def __init__(self, tool: ToolBase[Any, Any], settings: Settings) -> None:
        self.tool = tool
        self.name = tool.name
        self.settings = settings
        runtime_options = settings.options
        options = tool.options  # read once: the actor serves with these
        self.options = options
        self.state = ActorState.STARTING
        self.down_reason: str | None = None
        self.counters = ToolCounters()
        plan = self.plan = ToolPlan(
            tool,
            options,
            settings.pipeline,
            self.counters,
            max_bytes=runtime_options.max_argument_bytes,
            max_depth=runtime_options.max_argument_depth,
            max_chars=runtime_options.max_result_chars,
            default_timeout=runtime_options.default_timeout,
            crashed=self._crash_now,
            why_unavailable=self._unavailable,
        )
        plan.host_loop = settings.host_loop
        plan.keeper = settings.keeper
        arm_policies(plan, tool, settings)
        executors = self._executors = Executors(tool, settings, plan)
        self.placement = executors.placement
        self.needs_context = executors.needs_context
        self.mailbox = plan.mailbox = Mailbox(
            tool.name,
            executors.capacity,
            options.mailbox_size,
            options.on_full == "reject",
            executors.executor,
            self._unavailable,
            runtime_options.weights if runtime_options.fair else None,
        )
        cls = type(tool)
        self._has_setup = cls.setup is not ToolBase.setup and self.placement is None
        self._has_teardown = cls.teardown is not ToolBase.teardown and self.placement is None
        self._window = RestartWindow(RestartPolicy())
        self._nursery: trio.Nursery | None = None
        self._crash: str | None = None
        self._stopping = False
        self._stop_scope: trio.CancelScope | None = None
        self._trying = False  # the one try after a cool-down, until it serves
        self._downs = 0  # times down in a row without a successful call in between
        self._succeeded_at_try = -1  # counters.succeeded when it was last tried again
        self._back_at: float | None = None  # when a down tool is tried again
        self._setup_scope: trio.CancelScope | None = None
        self._drain_event: trio.Event | None = None
        plan.drained = self._drained
        self.ready = trio.Event()
        self.stopped = trio.Event()

    def statistics(self) -> ToolStatistics:
        """A snapshot of this tool's counters."""
        c = self.counters
        stuck = c.stuck_orphans(trio.current_time()) if c.orphans else 0
        threads = self._executors.threads
        stuck_threads = threads.stuck if threads is not None else 0
        return ToolStatistics(
            calls=c.calls,
            succeeded=c.succeeded,
            failures=dict(c.failures),
            in_flight=c.in_flight,
            queued=self.mailbox.queued,
            restarts=c.restarts,
            state=self.state.value,
            abandoned=c.abandoned_late + stuck + c.abandoned_threads,
            abandoned_running=stuck + stuck_threads,
            threads=self.mailbox.running if threads is not None else 0,
            down_reason=self.down_reason,
            retries=c.retries,
            type_mismatches=c.type_mismatches,
            placement=self.plan.placed.statistics() if self.plan.placed is not None else None,
            **resilience_counts(self.plan.policies),
        )

    async def invalidate(self, arguments: Any, principal: str | None) -> int:
        """Forget this tool's cached results (see `Runtime.invalidate`)."""
        caches = [p for p in self.plan.policies if isinstance(p, CachePolicy)]
        if not caches:
            return 0
        args = None
        if arguments is not None:
            raw = arguments if isinstance(arguments, str | bytes) else msgspec.json.encode(arguments)
            try:
                args = self.plan._decode(raw)
            except Exception as exc:  # whatever the tool's decoder raises
                raise ValueError(f"arguments for tool {self.name!r} do not decode: {exc}") from None
        forgotten = 0
        for cache in caches:
            forgotten += await drive(cache.invalidate(principal, args))
        return forgotten

    def _unavailable(self) -> str:
        if self.state is ActorState.DOWN:
            back_at = self._back_at
            if back_at is None:
                return f"tool {self.name!r} is down: {self.down_reason}"
            wait = max(1, math.ceil(back_at - trio.current_time()))
            return f"tool {self.name!r} is down: {self.down_reason}; it is tried again in {wait}s"
        if self._stopping:
            return f"tool {self.name!r} is unavailable: the runtime is shutting down"
        return f"tool {self.name!r} is unavailable: its actor stopped unexpectedly and is restarting"

    def use_pipeline(self, pipeline: Any) -> None:
        """The features changed (one turned on after the runtime opened)."""
        self.plan.use_pipeline(pipeline)

    # -- supervision -------------------------------------------------------------------

    async def supervise(self, policy: RestartPolicy, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Run incarnations until stopped (or down with no cool-down). Reports `started()` at
        once; `ready` after the first setup attempt (so that nobody who starts an actor waits on
        its setup)."""
        task_status.started()
        self._window = window = RestartWindow(policy)
        try:
            while not self._stopping:
                try:
                    crash = await self._incarnation()
                except Exception as exc:  # the actor's own failure: supervised like a crash
                    log.exception("tool %r: its actor failed", self.name)
                    crash = f"its actor failed: {describe_error(exc)[1]}"
                self.ready.set()
                if self._stopping:
                    break
                if self.state is not ActorState.DOWN:
                    if crash is None:
                        break
                    if self._trying:  # the try after a cool-down: one failure and it rests again
                        self._go_down(f"it was tried again after its cool-down and failed: {crash}")
                    elif (delay := window.record()) is None:
                        self._go_down(
                            f"it crashed {window.recent} times within {policy.within:g}s (last: {crash})"
                        )
                if self.state is ActorState.DOWN:
                    if not await self._rest(policy):
                        return
                    continue
                assert crash is not None
                assert delay is not None
                self.counters.restarts += 1
                self.state = ActorState.RESTARTING
                log.warning("tool %r crashed (%s); restarting", self.name, crash)
                self.settings.pipeline.supervisor_event(self.name, "restart", crash)
                with trio.CancelScope() as self._stop_scope:
                    await trio.sleep(delay)
                self._stop_scope = None
        finally:
            if self.plan.threads is not None:
                self.plan.threads.close()
            self.ready.set()
            if self.state is not ActorState.DOWN:
                self.state = ActorState.STOPPED
            self.mailbox.close()
            self.stopped.set()

    async def _rest(self, policy: RestartPolicy) -> bool:
        """Down: wait out the cool-down, then let the tool be tried once more (calls wait for
        that try as they wait for a restart). False: it stays down (no cool-down, or stopping)."""
        back_at = self._back_at
        if back_at is None or self._stopping:
            return False
        rest = policy.rest(self._downs)
        with trio.CancelScope() as self._stop_scope:
            await trio.sleep_until(back_at)
        self._stop_scope = None
        self._back_at = None
        if self._stopping:
            return False
        self._window.clear()
        self._succeeded_at_try = self.counters.succeeded
        self._trying = True
        self.state = ActorState.RESTARTING
        self.down_reason = None
        self.mailbox.reopen()
        log.warning("tool %r: trying it again after %gs down", self.name, rest)
        self.settings.pipeline.supervisor_event(self.name, "retry", f"tried again after {rest:g}s down")
        return True

    def worker_lost(self, reason: str) -> float | None:
        """A worker of the tool's placement died on its own: count it as a restart.

        Returns the backoff before it is replaced, or None if the tool is now down.
        """
        if self._stopping or self.state is ActorState.DOWN:
            return None
        window = self._window
        delay = window.record()
        if delay is None:
            self._go_down(
                f"its workers died {window.recent} times within {window.policy.within:g}s (last: {reason})"
            )
            return None
        self.counters.restarts += 1
        log.warning("tool %r: %s; replacing it", self.name, reason)
        self.settings.pipeline.supervisor_event(self.name, "restart", reason)
        return delay

    def start_delay(self, previous: float) -> float:
        policy = self._window.policy
        return float(min(policy.max_backoff, max(policy.backoff, 0.05, previous * 2)))

    def _go_down(self, reason: str) -> None:
        self.state = ActorState.DOWN
        self.down_reason = reason
        if self.counters.succeeded == self._succeeded_at_try:
            self._downs += 1  # down again before it answered a call: rest longer
        else:
            self._downs = 1
        rest = self._window.policy.rest(self._downs)
        self._back_at = None if rest is None or self._stopping else trio.current_time() + rest
        log.error(
            "tool %r is down: %s%s", self.name, reason, "" if rest is None else f"; tried again in {rest:g}s"
        )
        self.settings.pipeline.supervisor_event(self.name, "down", reason)
        self.mailbox.close()
        self._executors.kill()
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    # -- stopping ------------------------------------------------------------------------

    def begin_stop(self) -> None:
        """Stop taking calls; waiting calls fail now, running ones may finish (graceful)."""
        self._stopping = True
        self.mailbox.close()
        plan = self.plan
        plan.draining = True
        if not plan.running:
            self._drained()
        if self._stop_scope is not None:
            self._stop_scope.cancel()

    def kill(self) -> None:
        """Cancel the running calls (they fail UNAVAILABLE) and a setup still running (brutal)."""
        self.begin_stop()
        self._executors.kill()
        if self._setup_scope is not None:
            self._setup_scope.cancel()
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    def abandon(self) -> int:
        """After a kill that did not stop them: answer the calls still running; returns how many.

        Their work runs on where it is (it ignores cancellation, or blocks the thread it is
        in); it is counted as abandoned, and its results are dropped.
        """
        running = list(self.plan.running)
        for call in running:
            call.give_up(
                FailureKind.UNAVAILABLE,
                f"tool {self.name!r} is unavailable: the runtime shut down while this call ran, "
                "and the call did not stop when cancelled",
            )
        return len(running)
