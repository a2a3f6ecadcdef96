"""The supervisor: owns the actors' nursery, starts them in order, stops them in reverse.

Restarts are one_for_one (each actor restarts alone, see `ToolActor.supervise`); shutdown is
graceful then brutal: an actor stops taking calls, its running calls get `shutdown_timeout`
seconds to finish, then they are cancelled (and fail UNAVAILABLE). Work that ignores even
that (a tool that shields itself from cancellation) is abandoned after `KILL_GRACE`: its
calls are answered, it is logged and counted, and shutdown goes on without it. Tool sources
(MCP connections) run here too, and are stopped first.

The nursery lives in a trio system task (`Host`), not in the opener's task: that is what
lets `open_runtime` return within its grace period even when some tool's code never stops.

The registry actor (`RegistryActor`) is the one owner of the routing table (name -> tool
actor): register and unregister requests go through its mailbox and are applied one at a time;
after each it publishes a new immutable snapshot. Callers read the current snapshot (a dict
lookup, no hop), so routing costs nothing on the hot path.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Sequence
from typing import Any

import trio

from ..exceptions import RuntimeClosed, ToolDefinitionError
from ..registry import ToolRegistry, duplicate_message
from ..tools import ToolBase, ToolOptions
from ..tools.lowlevel import check_tool_name
from ._actor import Settings, ToolActor, may_suspend, starts_on_demand
from ._call import KILL_GRACE, KILL_TURN
from ._options import RestartPolicy
from ._source import ToolSource
from ._stats import ToolCounters, ToolStatistics

__all__ = ["Host", "RegistryActor", "Supervisor"]

log = logging.getLogger("runtime.engine")


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
        self._sources: list[tuple[trio.CancelScope, trio.Event]] = []  # each source's scope, its end
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

    def start_soon(self, actor: ToolActor) -> None:
        """`start`, from code that cannot await (a call that starts its tool's actor on demand):
        the actor's task starts at the next turn; calls wait in its mailbox until it serves.

        Raises:
            RuntimeClosed: the runtime is shutting down.
        """
        if self._stopping:
            raise RuntimeClosed("the runtime is shutting down; no tool can be started")
        self._actors.append(actor)
        self._nursery.start_soon(self._supervise, actor)

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
            with trio.move_on_at(max(brutal, trio.current_time() + KILL_TURN)):
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
        scope, ended = trio.CancelScope(), trio.Event()

        async def run(*, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
            with scope:
                try:
                    await source.run(runtime, task_status=task_status)
                except Exception:  # never let it reach the host
                    log.exception("tool source %r failed", getattr(source, "name", source))
                finally:
                    ended.set()

        await self._nursery.start(run)
        self._sources.append((scope, ended))

    async def stop_all(self) -> None:
        """Stop the sources, then every actor in reverse start order, within one grace period.

        Each actor stops (graceful, then brutal) before the next one begins, as in OTP; the
        graceful part of all of them shares one `shutdown_timeout` and the brutal part one
        `KILL_GRACE`, so a runtime with many stuck tools still closes in about that long.
        """
        self._stopping = True
        deadline = trio.current_time() + self.shutdown_timeout
        brutal = deadline + KILL_GRACE
        sources, self._sources = self._sources[::-1], []
        for scope, _ in sources:
            scope.cancel()
        # A source's own shutdown is awaited, not raced (an MCP stdio connection waits for its
        # server to exit, then terminates it): what is left of it at `brutal` is abandoned.
        with trio.move_on_at(brutal):
            for _, ended in sources:
                await ended.wait()
        while self._actors:  # not a copy: an actor whose start was under way joins the list
            await self.stop(self._actors[-1], deadline=deadline, brutal=brutal)


def _idle_statistics(counters: ToolCounters | None, state: str) -> ToolStatistics:
    """The statistics of a tool whose actor is not running (it starts on its next call; `state`:
    "up", or "stopped" once the runtime closed)."""
    c = counters
    if c is None:
        return ToolStatistics(
            calls=0, succeeded=0, failures={}, in_flight=0, queued=0, restarts=0, state=state
        )
    return ToolStatistics(
        calls=c.calls,
        succeeded=c.succeeded,
        failures=dict(c.failures),
        in_flight=0,
        queued=0,
        restarts=c.restarts,
        state=state,
        abandoned=c.abandoned_late,
        retries=c.retries,
        type_mismatches=c.type_mismatches,
    )


class _Request:
    __slots__ = ("done", "error", "names", "replace", "started", "tools")

    def __init__(
        self, tools: Sequence[ToolBase[Any, Any]] = (), names: Sequence[str] = (), replace: bool = False
    ) -> None:
        self.tools = tools
        self.names = names
        self.replace = replace
        self.done = trio.Event()
        self.error: BaseException | None = None
        self.started: list[ToolActor] = []


class RegistryActor:
    """Owns `registry` (every tool) and `routes` (the actors that run); the registry is replaced,
    never mutated, on every change.

    A tool with nothing to set up, in this process (`starts_on_demand`), costs nothing until it is
    called: its actor starts on its first call (`actor`) and stops once it has been idle
    `stop_idle_after` seconds (`sweep_idle`), its counters kept for the next one. The others'
    actors start when they are registered (their `setup()` runs then). So registering, refreshing
    an MCP listing and closing are linear in the tools that run, not in all of them.
    """

    def __init__(self, supervisor: Supervisor, settings: Settings) -> None:
        self._supervisor = supervisor
        self.settings = settings
        self.routes: dict[str, ToolActor] = {}
        self.suspends = False  # some tool's policies yield awaitables: its calls need a trio task
        self.registry = ToolRegistry()
        self.version = 0
        self.changed = trio.Event()  # set (and replaced) at every publish
        self._send, self._recv = trio.open_memory_channel[_Request](64)
        self._on_demand: set[str] = set()  # tools whose actors start on their first call
        self._suspending: set[str] = set()  # those of them whose policies may suspend
        self._counters: dict[str, ToolCounters] = {}  # what each such tool counted, across its actors
        self._seen: dict[str, int] = {}  # calls each on-demand actor had at the last sweep
        self.closed = False

    def actor(self, name: str) -> ToolActor | None:
        """The actor of tool `name`, started now if it starts on demand; None: no such tool."""
        actor = self.routes.get(name)
        if actor is not None or name not in self._on_demand:
            return actor
        tool = self.registry.get_or_none(name)
        assert tool is not None  # on demand: registered
        counters = self._counters.get(name)
        if counters is None:
            counters = self._counters[name] = ToolCounters()
        actor = ToolActor(tool, self.settings, counters)
        self._supervisor.start_soon(actor)  # raises RuntimeClosed while the runtime shuts down
        actor.serve_on_demand()
        self.routes[name] = actor
        if actor.plan.suspends:
            self.suspends = True
        return actor

    def statistics(self) -> dict[str, ToolStatistics]:
        """Each tool's counters: its actor's, or, for one that is not running, what it counted."""
        stats: dict[str, ToolStatistics] = {}
        routes, counters = self.routes, self._counters
        for tool in self.registry:
            name = tool.name
            actor = routes.get(name)
            if actor is not None:
                stats[name] = actor.statistics()
            else:
                stats[name] = _idle_statistics(counters.get(name), "stopped" if self.closed else "up")
        return stats

    async def sweep_idle(self, after: float, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Stop the on-demand actors that had no call in the last `after` seconds (each checked
        every `after`: stopped between one and two periods after its last call)."""
        task_status.started()
        while True:
            await trio.sleep(after)
            seen, routes = self._seen, self.routes
            idle = []
            for name in self._on_demand:
                actor = routes.get(name)
                if actor is None:
                    continue
                calls = actor.counters.calls
                if seen.get(name) == calls and _idle(actor):
                    idle.append(actor)
                seen[name] = calls
            for actor in idle:  # each stop awaits: a call may reach the next one meanwhile
                if routes.get(actor.name) is actor and _idle(actor):
                    del routes[actor.name]  # a call from now on starts a new one
                    seen.pop(actor.name, None)
                    await self._supervisor.stop(actor)

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        async with self._recv:
            async for request in self._recv:
                try:
                    if request.tools:
                        request.started = await self._register(request.tools, request.replace)
                    else:
                        await self._unregister(request.names)
                except Exception as exc:
                    request.error = exc
                finally:
                    request.done.set()

    async def ask(self, request: _Request) -> None:
        await self._send.send(request)
        await request.done.wait()
        if request.error is not None:
            raise request.error

    async def register(
        self, tools: Sequence[ToolBase[Any, Any]], *, replace: bool = False
    ) -> list[ToolActor]:
        """Start an actor for each tool and route to it (ValueError on a name clash unless `replace`).

        Returns the new actors without waiting for their setup (see `ToolActor.ready`): one
        tool's slow `setup()` never holds up the routing table.
        """
        if not tools:
            return []
        request = _Request(tools=tools, replace=replace)
        await self.ask(request)
        return request.started

    async def unregister(self, names: Sequence[str]) -> None:
        """Stop routing to `names` and stop their actors (absent names are ignored)."""
        if names:
            await self.ask(_Request(names=names))

    def close(self) -> None:
        self.closed = True
        self._send.close()

    async def _register(self, tools: Sequence[ToolBase[Any, Any]], replace: bool) -> list[ToolActor]:
        seen: set[str] = set()
        options_of: dict[str, ToolOptions] = {}
        for t in tools:
            check_tool_name(t.name)
            if t.name in seen or (t.name in self.registry and not replace):
                raise ValueError(duplicate_message(t.name, running=t.name not in seen))
            seen.add(t.name)
            options = options_of[t.name] = t.options  # read once: a tool's options are built when read
            placement = options.placement
            in_process = placement is None or placement.in_process
            if options.loop == "asyncio" and in_process and self.settings.host_loop is None:
                raise ToolDefinitionError(
                    f"tool {t.name!r} is an asyncio tool (loop='asyncio'): it needs a runtime running "
                    "on an asyncio loop; open it with `runtime.embed.open_asyncio_runtime(...)` inside "
                    "that loop (a FastAPI/Starlette lifespan), or make the tool a trio or sync tool"
                )
            if placement is not None:  # e.g. a Subprocess tool that cannot be imported by reference
                placement.check(t)
        # The new actors start before the ones they replace stop, so that a call made meanwhile
        # reaches one or the other and is never told that the tool does not exist; an on-demand
        # tool's starts on its first call.
        started: dict[str, ToolActor] = {}
        for t in tools:
            options = options_of[t.name]
            if starts_on_demand(t, options):
                self._on_demand.add(t.name)
                if may_suspend(t, options, self.settings):
                    self._suspending.add(t.name)
                self._counters.pop(t.name, None)  # a new tool of that name counts afresh
                continue
            self._on_demand.discard(t.name)
            self._suspending.discard(t.name)
            actor = ToolActor(t, self.settings)
            await self._supervisor.start(actor)
            started[t.name] = actor
        names = [t.name for t in tools]
        replaced = [self.routes[name] for name in names if name in self.routes]
        routes = {n: a for n, a in self.routes.items() if n not in names}
        self._publish({**routes, **started}, {t.name: t for t in tools}, names)
        for actor in replaced:
            await self._supervisor.stop(actor)
        return list(started.values())

    async def _unregister(self, names: Sequence[str]) -> None:
        present = [n for n in names if n in self.registry]
        if not present:
            return
        drop = set(present)
        gone = [self.routes[n] for n in present if n in self.routes]
        for name in present:
            self._on_demand.discard(name)
            self._suspending.discard(name)
            self._counters.pop(name, None)
            self._seen.pop(name, None)
        self._publish({n: a for n, a in self.routes.items() if n not in drop}, {}, present, drop=drop)
        for actor in reversed(gone):
            await self._supervisor.stop(actor)

    def _publish(
        self,
        routes: dict[str, ToolActor],
        added: dict[str, Any],
        changed: list[str],
        drop: frozenset[str] | set[str] = frozenset(),
    ) -> None:
        """The new routing table and registry: the tools of the last one but `drop`, with `added`
        (whose search index, once one was built, is updated for the `changed` names alone)."""
        self.routes = routes
        tools = {t.name: added.get(t.name, t) for t in self.registry if t.name not in drop}  # in place
        tools.update(added)  # the new ones after the others
        self.registry = ToolRegistry._trusted(tools, previous=self.registry, changed=changed)
        self.version += 1
        self.suspends = bool(self._suspending) or any(a.plan.suspends for a in routes.values())
        published, self.changed = self.changed, trio.Event()
        published.set()


def _idle(actor: ToolActor) -> bool:
    """No call is on its way to `actor`, waits in its mailbox or runs in it."""
    return (
        not actor.plan.holding
        and not actor.counters.in_flight
        and not actor.mailbox.queued
        and not actor.plan.running
    )
