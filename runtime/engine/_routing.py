"""The registry actor: the one owner of the routing table (name -> tool actor).

Register and unregister requests go through its mailbox and are applied one at a time;
after each it publishes a new immutable snapshot. Callers read the current snapshot (a
dict lookup, no hop), so routing costs nothing on the hot path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import trio

from ..exceptions import ToolDefinitionError
from ..registry import ToolRegistry, duplicate_message
from ..tools import ToolBase, check_tool_name
from ._actor import ToolActor
from ._options import Settings
from ._supervisor import Supervisor

__all__ = ["RegistryActor"]


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
    """Owns `routes` and `registry`; both are replaced, never mutated, on every change."""

    def __init__(self, supervisor: Supervisor, settings: Settings) -> None:
        self._supervisor = supervisor
        self.settings = settings
        self.routes: dict[str, ToolActor] = {}
        self.suspends = False  # some tool's policies yield awaitables: its calls need a trio task
        self.registry = ToolRegistry()
        self.version = 0
        self.changed = trio.Event()  # set (and replaced) at every publish
        self._send, self._recv = trio.open_memory_channel[_Request](64)

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
        self._send.close()

    async def _register(self, tools: Sequence[ToolBase[Any, Any]], replace: bool) -> list[ToolActor]:
        seen: set[str] = set()
        for t in tools:
            check_tool_name(t.name)
            if t.name in seen or (t.name in self.routes and not replace):
                raise ValueError(duplicate_message(t.name, running=t.name not in seen))
            seen.add(t.name)
            options = t.options
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
        # reaches one or the other and is never told that the tool does not exist.
        started: dict[str, ToolActor] = {}
        for t in tools:
            actor = ToolActor(t, self.settings)
            await self._supervisor.start(actor)
            started[t.name] = actor
        replaced = [self.routes[name] for name in started if name in self.routes]
        self._publish({**self.routes, **started})
        for actor in replaced:
            await self._supervisor.stop(actor)
        return list(started.values())

    async def _unregister(self, names: Sequence[str]) -> None:
        gone = [self.routes[n] for n in names if n in self.routes]
        if not gone:
            return
        drop = set(names)
        self._publish({n: a for n, a in self.routes.items() if n not in drop})
        for actor in reversed(gone):
            await self._supervisor.stop(actor)

    def _publish(self, routes: dict[str, ToolActor]) -> None:
        self.routes = routes
        self.registry = ToolRegistry._trusted({n: a.tool for n, a in routes.items()})
        self.version += 1
        self.suspends = any(a.plan.suspends for a in routes.values())
        changed, self.changed = self.changed, trio.Event()
        changed.set()
