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
the other workers. An incarnation runs the tool's `setup()` (or opens its placement and starts its workers) within
`setup_timeout`, then serves: its executors run in its nursery until it is stopped (once no call
runs), crashes (a `restart_on` exception: `_end_incarnation`) or goes down; then what still runs
outside its nursery is killed, calls that ignore that get a grace and are answered UNAVAILABLE,
and `teardown()` runs, within `shutdown_timeout`. What comes next is the actor's decision
(`supervise`): restart, down, rest, stop. The restart intensity (OTP) is a `RestartWindow`.

What an actor serves with: its plan (engine/_plan.py), its executors (engine/_executors.py), its
mailbox, and its interceptors in order (`arm_policies`: the runtime's, the tool's own, then the
resilience options').
"""

from __future__ import annotations

import collections
import enum
import logging
import math
from collections.abc import Sequence
from typing import Any, cast

import msgspec
import trio

from .._flows import drive
from ..exceptions import ToolDefinitionError
from ..features import FeaturePipeline
from ..messages import FailureKind
from ..tools import ToolBase, ToolOptions
from ..tools.lowlevel import PlacementHost, is_cancellation
from ._artifacts import Keeper
from ._call import ABANDON_GRACE
from ._executors import Executors
from ._mailbox import Mailbox
from ._options import RestartPolicy, RuntimeOptions
from ._outcome import describe_error
from ._plan import ToolPlan
from ._policies import Policy
from ._resilience import BreakerPolicy, CachePolicy, Resilience, resilience_counts
from ._stats import ToolCounters, ToolStatistics

__all__ = [
    "ActorState",
    "RestartWindow",
    "Settings",
    "ToolActor",
    "arm_policies",
    "policies_of",
    "may_suspend",
    "starts_on_demand",
]

log = logging.getLogger("runtime.engine")


class ActorState(enum.StrEnum):
    """Where an actor is in its life."""

    STARTING = "starting"
    UP = "up"
    RESTARTING = "restarting"
    DOWN = "down"
    STOPPED = "stopped"


class _Timeout:
    """`_bounded`: the step did not finish within its limit."""


class _Stopped:
    """`_bounded`: the actor was stopped while the step ran."""


class RestartWindow:
    """The recent restarts of one actor."""

    __slots__ = ("_recent", "policy")

    def __init__(self, policy: RestartPolicy) -> None:
        self.policy = policy
        self._recent: collections.deque[float] = collections.deque()

    def record(self) -> float | None:
        """Count a restart now: the backoff before it, or None if this one is over the intensity."""
        now = trio.current_time()
        recent = self._recent
        recent.append(now)
        while recent and recent[0] < now - self.policy.within:
            recent.popleft()
        if len(recent) > self.policy.max_restarts:
            return None
        return self.policy.delay(len(recent))

    def clear(self) -> None:
        """Forget the restarts (a tool that was down starts again with a fresh window)."""
        self._recent.clear()

    @property
    def recent(self) -> int:
        """Restarts within the period (as of the last `record`)."""
        return len(self._recent)


class Settings:
    """What every part of one runtime reads: its options, its features, its host loop."""

    __slots__ = ("host_loop", "keeper", "options", "pipeline", "resilience")

    def __init__(
        self,
        options: RuntimeOptions,
        pipeline: FeaturePipeline,
        host_loop: Any = None,
        resilience: Resilience | None = None,
        keeper: Keeper | None = None,
    ) -> None:
        self.options = options
        self.pipeline = pipeline
        self.host_loop = host_loop
        """The asyncio loop this trio run is a guest of (`open_asyncio_runtime`), else None."""
        self.resilience = resilience
        """The store, breakers and budgets the resilience policies share (None: none at all)."""
        self.keeper = keeper
        """What keeps results over their limits whole (`RuntimeOptions.artifacts`); None: cut."""


def policies_of(tool: ToolBase[Any, Any], runtime: Sequence[Any], own: Sequence[Any]) -> tuple[Policy, ...]:
    """A tool's interceptors, outermost first: the runtime's that apply to it, then its own.

    Raises:
        ToolDefinitionError: one of its own is not a `runtime.Policy`.
    """
    for p in own:
        if not isinstance(p, Policy):
            raise ToolDefinitionError(
                f"tool {tool.name!r}: policies must be runtime.Policy instances, not {p!r}"
            )
    return (*(p for p in runtime if p.applies(tool)), *own)


def arm_policies(plan: ToolPlan, tool: ToolBase[Any, Any], settings: Settings) -> None:
    """Give `plan` its interceptors (the runtime's, the tool's, then the resilience options'),
    its breaker, its cache (when nothing steps in before it) and its retry."""
    runtime_options, options = settings.options, plan.options
    plan.policies = policies_of(tool, runtime_options.policies, options.policies)
    resilience = settings.resilience
    if resilience is not None:
        own = resilience.policies_for(tool, options)
        plan.policies = (*plan.policies, *own)
        plan.breaker = next((p.b for p in own if isinstance(p, BreakerPolicy)), None)
        first = plan.policies[0] if plan.policies else None
        if isinstance(first, CachePolicy) and resilience.local:  # nothing steps in before it
            plan.cached = first
        retry = options.retry or (runtime_options.retry if options.repeatable else None)
        if retry is not None:
            plan.retry = retry
            plan.retry_later = resilience.retry_later
    plan.suspends = any(p.suspends for p in plan.policies)


def starts_on_demand(tool: ToolBase[Any, Any], options: ToolOptions) -> bool:
    """Whether a tool's actor may start on its first call and stop when idle: it has no
    `setup()` / `teardown()` (nothing to prepare, nothing an idle stop would throw away) and runs
    in this process (a placement's workers start with the runtime). `options`: the tool's."""
    cls = type(tool)
    placement = options.placement
    return (
        cls.setup is ToolBase.setup
        and cls.teardown is ToolBase.teardown
        and (placement is None or placement.in_process)
    )


def may_suspend(tool: ToolBase[Any, Any], options: ToolOptions, settings: Settings) -> bool:
    """Whether a tool's policies may suspend (the ones `arm_policies` gives it), known before
    its actor exists: asyncio callers then take a trio task for its calls from the first one."""
    runtime = settings.options
    if any(p.suspends for p in runtime.policies if p.applies(tool)) or any(
        getattr(p, "suspends", False) for p in options.policies
    ):
        return True
    resilience = settings.resilience
    if resilience is None:
        return False
    budget = runtime.budget
    limited = options.rate_limit is not None or (budget is not None and budget.rate is not None)
    if limited and (
        (options.rate_limit is not None and options.rate_limit.wait)
        or (budget is not None and budget.rate is not None and budget.rate.wait)
    ):
        return True
    guarded = (
        options.cache is not None
        or options.dedupe is not None
        or options.requires_approval is not False  # a deferral writes the journal (ApprovalPolicy)
        or options.breaker is not None
        or runtime.breaker is not None
        or limited
    )
    return guarded and not resilience.local


class ToolActor:
    """Serves one tool. Callers `admit` calls through its mailbox; the supervisor runs `supervise`.

    Attributes:
        plan: how its calls are served (decode, outcome mapping, what executors run).
        mailbox: its admission point.
        ready: set once the first setup attempt has ended (however it ended).
        stopped: set once the actor has stopped for good.
    """

    def __init__(
        self, tool: ToolBase[Any, Any], settings: Settings, counters: ToolCounters | None = None
    ) -> None:
        self.tool = tool
        self.name = tool.name
        self.settings = settings
        runtime_options = settings.options
        options = tool.options  # read once: the actor serves with these
        self.options = options
        self.state = ActorState.STARTING
        self.down_reason: str | None = None
        self.counters = counters if counters is not None else ToolCounters()  # a tool's, kept across actors
        plan = self.plan = ToolPlan(
            tool,
            options,
            settings.pipeline,
            self.counters,
            max_bytes=runtime_options.max_argument_bytes,
            max_depth=runtime_options.max_argument_depth,
            max_chars=runtime_options.max_result_chars,
            default_timeout=runtime_options.default_timeout,
            crashed=self._end_incarnation,
            why_unavailable=self._unavailable,
        )
        plan.host_loop = settings.host_loop
        plan.keeper = settings.keeper
        arm_policies(plan, tool, settings)
        executors = self._executors = Executors(
            tool, plan, thread_limit=runtime_options.thread_limit, host_loop=settings.host_loop
        )
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

    def serve_on_demand(self) -> None:
        """An actor started by a call (`starts_on_demand`: nothing to set up) serves at once: that
        call, and those after it, start before the actor's task has first run (a call that cannot
        suspend runs right in its caller's task, as on a running actor); a worker task starts
        once the incarnation's nursery is there."""
        self.state = ActorState.UP
        self.ready.set()
        self.mailbox.resume()

    def statistics(self) -> ToolStatistics:
        """A snapshot of this tool's counters."""
        c = self.counters
        stuck = c.stuck_orphans(trio.current_time()) if c.orphans else 0
        threads = self._executors.threads
        return ToolStatistics(
            calls=c.calls,
            succeeded=c.succeeded,
            failures=dict(c.failures),
            in_flight=c.in_flight,
            queued=self.mailbox.queued,
            restarts=c.restarts,
            state=self.state.value,
            abandoned=c.abandoned_late + stuck,
            abandoned_running=stuck,  # a stuck thread's call is an orphan too
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

    # -- one incarnation: setup(), serve, teardown() ------------------------------------

    async def _incarnation(self) -> str | None:
        """One incarnation; the reason it crashed, or None (stopped, or down)."""
        crash, self._crash = self._crash, None
        if crash is not None:  # an on-demand actor's call crashed it before its task first ran
            self.mailbox.pause()
            return crash
        self.plan.crash_reason = None
        if self._has_setup:
            outcome = await self._bounded(self.tool.setup)
            if outcome is not None:
                self.ready.set()
                await self._teardown()
                return self._setup_failed(outcome, "its setup() did not finish", "setup failed")
        if self.placement is not None:
            async with self.placement.open(self.tool, cast(PlacementHost, self)) as placed:  # the actor
                outcome = await self._bounded(placed.start)
                if outcome is not None:
                    self.ready.set()
                    return self._setup_failed(
                        outcome, "its workers did not start (setup)", "its workers failed to start"
                    )
                if self.state is ActorState.DOWN or self._stopping:
                    return None
                self.plan.placed = placed
                return await self._serve()
        return await self._serve()

    async def _bounded(self, step: Any) -> BaseException | type[_Timeout] | type[_Stopped] | None:
        """Run `step()` within `setup_timeout` (and `kill`'s reach): None if it finished, else
        what it raised, `_Timeout`, or `_Stopped`."""
        limit = self.options.setup_timeout
        scope = self._setup_scope = trio.CancelScope()
        timer = trio.CancelScope(deadline=trio.current_time() + limit if limit is not None else math.inf)
        try:
            with scope, timer:
                await step()
        except BaseException as exc:
            if not timer.cancelled_caught and not scope.cancelled_caught:
                if is_cancellation(exc):
                    raise
                return exc
        finally:
            self._setup_scope = None
        if timer.cancelled_caught:
            return _Timeout
        if scope.cancelled_caught:
            return _Stopped
        return None

    def _setup_failed(self, outcome: Any, timed_out: str, failed: str) -> str | None:
        if outcome is _Timeout:
            self._go_down(f"{timed_out} within {self.options.setup_timeout:g}s")
            return None
        if outcome is _Stopped:
            return None
        log.warning("tool %r: %s", self.name, failed, exc_info=outcome)
        return f"{failed}: {describe_error(outcome)[1]}"

    async def _serve(self) -> str | None:
        self.state = ActorState.UP
        self._trying = False
        self.ready.set()
        plan = self.plan
        self._drain_event = trio.Event()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._executors.serve(nursery)
                self.mailbox.resume()
                if not (self._stopping and not plan.running):
                    await self._drain_event.wait()  # set once stopping and no call runs; a crash cancels it
                nursery.cancel_scope.cancel()  # the idle workers
        finally:
            self.mailbox.pause()
            self._nursery = None
            self._executors.serve(None)
            self._executors.kill()
            if plan.running:  # calls of the host loop, cancelled just now: a grace to end
                with trio.CancelScope(shield=True), trio.move_on_after(ABANDON_GRACE):
                    await self._wait_drained()
                for call in list(plan.running):
                    call.give_up(
                        FailureKind.UNAVAILABLE,
                        f"{plan.unavailable_message()}; the call did not stop when cancelled",
                    )
            plan.placed = None
            await self._teardown()
        crash, self._crash = self._crash, None
        return crash

    async def _wait_drained(self) -> None:
        plan = self.plan
        if plan.running:
            self._drain_event = drained = trio.Event()
            draining, plan.draining = plan.draining, True
            try:
                await drained.wait()
            finally:
                plan.draining = draining

    def _drained(self) -> None:
        """No call runs any more, and the actor waits for that (stopping, or a grace)."""
        if self._drain_event is not None:
            self._drain_event.set()

    def _end_incarnation(self, reason: str) -> None:
        """The tool raised a `restart_on` exception: end this incarnation (its calls fail)."""
        self._crash = reason
        self.mailbox.pause()
        self._executors.kill()
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    async def _teardown(self) -> None:
        if not self._has_teardown:
            return
        with trio.CancelScope(shield=True), trio.move_on_after(self.settings.options.shutdown_timeout):
            try:
                await self.tool.teardown()
            except BaseException as exc:
                if is_cancellation(exc):
                    raise
                log.warning("teardown of tool %r failed", self.name, exc_info=True)

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
