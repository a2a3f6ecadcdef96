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
        self._sources: list[tuple[ToolSource, trio.CancelScope]] = []

    async def start(self, actor: ToolActor) -> None:
        """Start `actor`; returns after its first setup attempt (it may be restarting)."""
        await self._nursery.start(self._supervise, actor)
        self._actors.append(actor)

    async def _supervise(self, actor: ToolActor, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        await actor.supervise(self.policy, task_status=task_status)

    async def stop(self, actor: ToolActor) -> None:
        """Stop one actor: graceful for `shutdown_timeout` seconds, then brutal."""
        actor.begin_stop()
        with trio.move_on_after(self.shutdown_timeout):
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
        """Stop the sources, then every actor in reverse start order."""
        for _, scope in reversed(self._sources):
            scope.cancel()
        self._sources.clear()
        for actor in reversed(list(self._actors)):
            await self.stop(actor)
