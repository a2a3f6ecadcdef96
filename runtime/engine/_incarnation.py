"""One incarnation of a tool actor: setup(), serve, teardown() (see engine/_actor.py).

An incarnation runs the tool's `setup()` (or opens its placement and starts its workers) within
`setup_timeout`, then serves: its executors run in its nursery until it is stopped (once no call
runs), crashes (a `restart_on` exception: `_crash_now`) or goes down; then what still runs
outside its nursery is killed, calls that ignore that get a grace and are answered UNAVAILABLE,
and `teardown()` runs, within `shutdown_timeout`. What comes next is the actor's decision.
"""

from __future__ import annotations

import enum
import logging
import math
from typing import TYPE_CHECKING, Any, cast

import trio

from ..messages import FailureKind
from ..tools import Placement, PlacementHost, ToolBase, ToolOptions, is_cancellation
from ._outcome import describe_error
from ._states import ABANDON_GRACE

if TYPE_CHECKING:
    from ._mailbox import Mailbox
    from ._options import Settings
    from ._plan import ToolPlan
    from ._wiring import Executors

__all__ = ["ActorState", "Incarnation"]

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


class Incarnation:
    """The incarnation half of `ToolActor` (its state is the actor's)."""

    tool: ToolBase[Any, Any]
    name: str
    state: ActorState
    _trying: bool
    settings: Settings
    options: ToolOptions
    placement: Placement | None
    plan: ToolPlan
    mailbox: Mailbox
    ready: trio.Event
    _executors: Executors
    _has_setup: bool
    _has_teardown: bool
    _stopping: bool
    _nursery: trio.Nursery | None
    _crash: str | None
    _setup_scope: trio.CancelScope | None
    _drain_event: trio.Event | None

    def _go_down(self, reason: str) -> None:
        raise NotImplementedError  # the actor's decision (`ToolActor._go_down`)

    async def _incarnation(self) -> str | None:
        """One incarnation; the reason it crashed, or None (stopped, or down)."""
        self._crash = None
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
        return self._crash

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

    def _crash_now(self, reason: str) -> None:
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
