"""The supervisor: owns the actors' nursery, starts them in order, stops them in reverse.

Restarts are one_for_one (each actor restarts alone, see `ToolActor.supervise`); shutdown is
graceful then brutal: an actor stops taking calls, its running calls get `shutdown_timeout`
seconds to finish, then they are cancelled (and fail UNAVAILABLE). Work that ignores even
that (a tool that shields itself from cancellation) is abandoned after `KILL_GRACE`: its
calls are answered, it is logged and counted, and shutdown goes on without it. Tool sources
(MCP connections) run here too, and are stopped first.

The nursery lives in a trio system task (`Host`), not in the opener's task: that is what
lets `open_runtime` return within its grace period even when some tool's code never stops.
"""

from __future__ import annotations

import contextvars
import logging
from typing import TYPE_CHECKING, Any

import trio

from ..exceptions import RuntimeClosed
from ._actor import ToolActor
from ._options import RestartPolicy

if TYPE_CHECKING:
    from ._source import ToolSource

__all__ = ["KILL_GRACE", "Host", "Supervisor"]

log = logging.getLogger("runtime.engine")

KILL_GRACE = 0.5
"""Seconds cancelled calls get to end at shutdown before they are abandoned."""
_KILL_TURN = 0.01


class Host:
    """A nursery in a trio system task, so that what runs in it can outlive its opener.

    Nothing may escape a system task (trio would stop everything), so the host logs what
    reaches it instead of raising: the actors and sources it runs catch their own errors.
    """

    def __init__(self) -> None:
        self._scope = trio.CancelScope()
        self._ready = trio.Event()
        self.done = trio.Event()
        self._nursery: trio.Nursery | None = None

    @classmethod
    async def open(cls, name: str = "runtime") -> Host:
        """Start a host (its tasks see the opener's context variables)."""
        host = cls()
        trio.lowlevel.spawn_system_task(host._run, name=f"{name} host", context=contextvars.copy_context())
        await host._ready.wait()
        return host

    @property
    def nursery(self) -> trio.Nursery:
        assert self._nursery is not None
        return self._nursery

    async def _run(self) -> None:
        try:
            with self._scope:
                async with trio.open_nursery() as nursery:
                    self._nursery = nursery
                    self._ready.set()
                    await trio.sleep_forever()
        except BaseException as exc:
            if not _only_cancelled(exc):  # trio cancels system tasks when its run ends: not an error
                log.exception("the runtime's supervisor stopped with an error")
        finally:
            self._ready.set()
            self.done.set()

    def close(self) -> None:
        """Cancel everything still running in the host; does not wait for it."""
        self._scope.cancel()


def _only_cancelled(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(_only_cancelled(e) for e in exc.exceptions)
    return isinstance(exc, trio.Cancelled)


class Supervisor:
    """Starts and stops actors and sources inside the host's nursery."""

    def __init__(self, host: Host, policy: RestartPolicy, shutdown_timeout: float) -> None:
        self._nursery = host.nursery
        self.policy = policy
        self.shutdown_timeout = shutdown_timeout
        self._actors: list[ToolActor] = []
        self._stopping = False
        self._sources: list[tuple[ToolSource, trio.CancelScope]] = []
        self.abandoned = 0  # calls abandoned at shutdown: their work may still run in the host

    async def start(self, actor: ToolActor) -> None:
        """Start `actor`; returns at once (its setup runs on; `actor.ready` tells when it ended).

        Raises:
            RuntimeClosed: the supervisor is stopping every actor (the runtime is shutting down).
        """
        if self._stopping:
            raise RuntimeClosed("the runtime is shutting down; no tool can be added")
        self._actors.append(actor)  # before its setup: a shutdown that begins meanwhile stops it too
        await self._nursery.start(self._supervise, actor)

    async def _supervise(self, actor: ToolActor, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await actor.supervise(self.policy, task_status=task_status)
        except Exception:  # a bug in the actor itself: never let it reach the host
            log.exception("tool %r: its supervisor task failed", actor.name)

    async def stop(
        self, actor: ToolActor, *, deadline: float | None = None, brutal: float | None = None
    ) -> None:
        """Stop one actor: graceful until `deadline` (default: `shutdown_timeout` from now),
        then brutal until `brutal` (default: `KILL_GRACE` later), then abandoned."""
        if deadline is None:
            deadline = trio.current_time() + self.shutdown_timeout
        if brutal is None:
            brutal = deadline + KILL_GRACE
        actor.begin_stop()
        with trio.move_on_at(deadline):
            await actor.stopped.wait()
        if not actor.stopped.is_set():
            log.warning(
                "tool %r did not stop within %gs; cancelling its calls", actor.name, self.shutdown_timeout
            )
            actor.kill()
            # At least a moment: an actor that does stop when cancelled needs a turn to do it.
            with trio.move_on_at(max(brutal, trio.current_time() + _KILL_TURN)):
                await actor.stopped.wait()
            if not actor.stopped.is_set():
                abandoned = actor.abandon()
                self.abandoned += max(1, abandoned)
                log.error(
                    "tool %r did not stop when cancelled; %d running call(s) abandoned "
                    "(its code ignores cancellation); shutdown goes on without it",
                    actor.name,
                    abandoned,
                )
        if actor in self._actors:
            self._actors.remove(actor)

    async def start_source(self, source: ToolSource, runtime: Any) -> None:
        """Run a tool source; returns once it reports its first tool listing (or gives up)."""
        scope = trio.CancelScope()

        async def run(*, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
            with scope:
                try:
                    await source.run(runtime, task_status=task_status)
                except Exception:  # never let it reach the host
                    log.exception("tool source %r failed", getattr(source, "name", source))

        await self._nursery.start(run)
        self._sources.append((source, scope))

    async def stop_all(self) -> None:
        """Stop the sources, then every actor in reverse start order, within one grace period.

        Each actor stops (graceful, then brutal) before the next one begins, as in OTP; the
        graceful part of all of them shares one `shutdown_timeout` and the brutal part one
        `KILL_GRACE`, so a runtime with many stuck tools still closes in about that long.
        """
        self._stopping = True
        for _, scope in reversed(self._sources):
            scope.cancel()
        self._sources.clear()
        deadline = trio.current_time() + self.shutdown_timeout
        brutal = deadline + KILL_GRACE
        while self._actors:  # not a copy: an actor whose start was under way joins the list
            await self.stop(self._actors[-1], deadline=deadline, brutal=brutal)
