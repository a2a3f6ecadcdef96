"""The supervisor: owns the actors' nursery, starts them in order, stops them in reverse.

Restarts are one_for_one (each actor restarts alone, see `ToolActor.supervise`); shutdown is
graceful then brutal: an actor stops taking calls, its running calls get `shutdown_timeout`
seconds to finish, then they are cancelled (and fail UNAVAILABLE). Tool sources (MCP
connections) run here too, and are stopped first.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio

from ..exceptions import RuntimeClosed
from ._actor import RestartPolicy, ToolActor

if TYPE_CHECKING:
    from ._source import ToolSource

__all__ = ["Supervisor"]

log = logging.getLogger("runtime.engine")


class Supervisor:
    """Starts and stops actors and sources inside one nursery."""

    def __init__(self, nursery: trio.Nursery, policy: RestartPolicy, shutdown_timeout: float) -> None:
        self._nursery = nursery
        self.policy = policy
        self.shutdown_timeout = shutdown_timeout
        self._actors: list[ToolActor] = []
        self._stopping = False
        self._sources: list[tuple[ToolSource, trio.CancelScope]] = []

    async def start(self, actor: ToolActor) -> None:
        """Start `actor`; returns after its first setup attempt (it may be restarting).

        Raises:
            RuntimeClosed: the supervisor is stopping every actor (the runtime is shutting down).
        """
        if self._stopping:
            raise RuntimeClosed("the runtime is shutting down; no tool can be added")
        self._actors.append(actor)  # before its setup: a shutdown that begins meanwhile stops it too
        await self._nursery.start(self._supervise, actor)

    async def _supervise(self, actor: ToolActor, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        await actor.supervise(self.policy, task_status=task_status)

    async def stop(self, actor: ToolActor, *, deadline: float | None = None) -> None:
        """Stop one actor: graceful for `shutdown_timeout` seconds (or until `deadline`), then brutal."""
        actor.begin_stop()
        with trio.move_on_at(trio.current_time() + self.shutdown_timeout if deadline is None else deadline):
            await actor.stopped.wait()
        if not actor.stopped.is_set():
            log.warning(
                "tool %r did not stop within %gs; cancelling its calls", actor.name, self.shutdown_timeout
            )
            actor.kill()
            await actor.stopped.wait()
        if actor in self._actors:
            self._actors.remove(actor)

    async def start_source(self, source: ToolSource, runtime: Any) -> None:
        """Run a tool source; returns once it reports its first tool listing (or gives up)."""
        scope = trio.CancelScope()

        async def run(*, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
            with scope:
                await source.run(runtime, task_status=task_status)

        await self._nursery.start(run)
        self._sources.append((source, scope))

    async def stop_all(self) -> None:
        """Stop the sources, then every actor in reverse start order, within one grace period.

        Each actor stops (graceful, then brutal) before the next one begins, as in OTP; the
        graceful part of all of them shares one `shutdown_timeout`, so a runtime with many
        stuck tools still closes in `shutdown_timeout`, not that much per tool.
        """
        self._stopping = True
        for _, scope in reversed(self._sources):
            scope.cancel()
        self._sources.clear()
        deadline = trio.current_time() + self.shutdown_timeout
        while self._actors:  # not a copy: an actor whose start was under way joins the list
            await self.stop(self._actors[-1], deadline=deadline)
