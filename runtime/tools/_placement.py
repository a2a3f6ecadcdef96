"""Placement: where a tool's calls run. The protocol a tool option refers to, and `InProcess`.

A tool says where it runs with `@tool(placement=...)` or a `placement` class attribute. The
engine knows placements only through this protocol (it never imports an edge):

    at open     placement.check(tool)              refuse a tool it cannot place (ToolDefinitionError)
    each        async with placement.open(tool, host) as placed:
    incarnation     await placed.start()             start the workers (each runs setup())
                    ...                              closing stops them (each runs teardown())
    each call   await placed.call(call, arguments, ctx, timeout) -> ToolSuccess
                (a tool's exception arrives rebuilt: ToolRejected, InvalidArguments,
                 ToolUnavailable, RemoteToolError; a dead worker is WorkerLost; a worker lost
                 with its machine is ToolUnavailable; a full queue is ToolOverloaded)
    statistics  placed.statistics() -> PlacementStatistics (in the tool's `ToolStatistics`)
    stop        placed.stop(task)                  only where `stops_calls`: end the call `task` runs
                                                   now (its `call` raises CallStopped)

Everything else (decoding and bounding the arguments, deadlines, features and spans, the
failure mapping, statistics, restarts) stays in the engine, the same for every placement.
The implementations live in `runtime.placement` (`Subprocess`) and `runtime.placement.ray` (`Ray`).
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import msgspec

from ..messages import ToolCall, ToolSuccess
from ._context import CallContext

PlacedToolT = Any
"""A `ToolBase` (spelled `Any` here: the tool classes import this module through their options)."""

__all__ = ["InProcess", "PlacedTool", "Placement", "PlacementHost", "PlacementStatistics"]


class PlacementStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """What a placed tool's workers are doing (a snapshot, `ToolStatistics.placement`).

    A count a placement does not keep is 0 (a Subprocess pool neither scales nor hedges).

    Attributes:
        workers: workers (processes, Ray replicas) serving now.
        target: workers it aims to have (a fixed count, or the autoscaler's choice).
        starting: workers being started (a replacement, a scale-up).
        queued: calls waiting inside the placement for a worker's slot.
        nodes: workers serving now, per Ray node id (empty for other placements).
        lost: workers that died on their own (counted toward the restart intensity).
        lost_with_node: workers lost because their machine left the cluster (not counted:
            the tool did nothing wrong; their calls were UNAVAILABLE).
        overloaded: calls refused (OVERLOADED) because `max_queued` per worker were waiting.
        scaled_up: workers added by the autoscaler.
        scaled_down: workers removed by the autoscaler (after their calls finished).
        hedged: second attempts sent for calls slower than the hedge delay.
        hedge_wins: hedges that answered first.
        hedges_cancelled: attempts cancelled because the other attempt of their call answered.
    """

    workers: int
    target: int
    starting: int = 0
    queued: int = 0
    nodes: dict[str, int] = {}
    lost: int = 0
    lost_with_node: int = 0
    overloaded: int = 0
    scaled_up: int = 0
    scaled_down: int = 0
    hedged: int = 0
    hedge_wins: int = 0
    hedges_cancelled: int = 0


class PlacementHost(Protocol):
    """What a placement may tell the actor that owns it."""

    def worker_lost(self, reason: str) -> float | None:
        """A worker died on its own (a signal, an exit): it counts toward the restart intensity.

        Returns:
            seconds to wait before replacing it (the restart backoff), or None if the tool
            is now down (too many losses within the policy's period): replace nothing.
        """
        ...

    def start_delay(self, previous: float) -> float:
        """A new worker could not start for want of a resource of this process (file
        descriptors, memory, processes): not a crash, so not counted. Seconds to wait before
        trying again, `previous` the wait before this try (0.0 the first time): capped
        exponential, from the restart policy's `backoff` to its `max_backoff`."""
        ...


class PlacedTool(Protocol):
    """One tool, opened in its placement for one incarnation of its actor.

    A placement whose `stops_calls` is True gives its placed tools one more method,
    `stop(task: trio.lowlevel.Task) -> None`: end the call that `task` is running in this
    placed tool now, for real (Subprocess kills the worker serving it), so that its `call`
    raises `CallStopped`; nothing if `task` runs no call there. The engine then runs a call
    that has no deadline in its caller's task without a cancel scope of its own, and asks
    `stop` when the call must end early (its caller abandoned it at shutdown, or the
    incarnation ended under it).
    """

    async def start(self) -> None:
        """Start the workers; each loads the tool and runs its `setup()` (the engine bounds this).

        Raises:
            whatever kept a worker from starting (its setup's exception, rebuilt).
        """
        ...

    async def call(
        self, call: ToolCall, arguments: bytes, ctx: CallContext | None, timeout: float | None
    ) -> ToolSuccess[Any]:
        """Serve one call whose arguments the engine has already checked.

        Args:
            call: the call (its id and tool name travel).
            arguments: the call's arguments as JSON bytes; decoded again where the tool runs.
            ctx: the call's context (metadata travels; the tool sees a plain copy), or None.
            timeout: seconds left before the call's deadline (None: no deadline).

        Returns:
            the success as built where the tool ran (its value decoded back to builtins).

        Raises:
            the tool's exception as rebuilt here; `WorkerLost` if its worker died. When
            cancelled (deadline, caller) the work is stopped for real before this returns.
        """
        ...

    def statistics(self) -> PlacementStatistics:
        """What its workers are doing now."""
        ...


class Placement:
    """Where a tool's calls run; subclass it to add a placement. See the module docstring.

    Attributes:
        in_process: the engine serves the tool itself (no `open`, no worker).
        in_caller: a call's code only awaits the worker and stops at once when cancelled, so
            a trio caller's `rt.call` may run it in the caller's own task (no hop to a worker
            task and back).
        stops_calls: its placed tools have `stop(task)`, which ends a call without cancelling
            the task that runs it; a call with no deadline, run in its caller's task, then
            needs no cancel scope of its own (one costs as much as a whole in-process call).
    """

    in_process: bool = False
    in_caller: bool = False
    stops_calls: bool = False

    def check(self, tool: PlacedToolT) -> None:
        """Raise `ToolDefinitionError` (naming the tool) if this placement cannot run `tool`."""

    def capacity(self, tool: PlacedToolT) -> float:
        """How many calls of `tool` the engine may hand this placement at once (it sends no more;
        `math.inf`: the placement bounds its calls itself, refusing with ToolOverloaded)."""
        raise NotImplementedError

    def open(self, tool: PlacedToolT, host: PlacementHost) -> AbstractAsyncContextManager[PlacedTool]:
        """A context for serving `tool`: `start()` its workers inside; leaving it stops them."""
        raise NotImplementedError


class InProcess(Placement):
    """The default: the tool runs in this process, in the actor's tasks or worker threads."""

    in_process = True

    def __repr__(self) -> str:
        return "InProcess()"

    def __eq__(self, other: object) -> bool:
        return type(other) is InProcess

    def __hash__(self) -> int:
        return hash(InProcess)
