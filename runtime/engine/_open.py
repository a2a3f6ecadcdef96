"""`open_runtime`: build an engine (features, policies' stores, artifacts, the host, the
supervisor, the registry actor, the entry, the journal of detached calls), start its tools and
MCP sources, and close it."""

from __future__ import annotations

import contextlib
import logging
import math
import sys
from collections.abc import AsyncIterator, Iterable
from typing import Any

import trio

from ..exceptions import ToolDefinitionError
from ..features import Feature, FeaturePipeline
from ..registry import ToolLike, ToolRegistry
from ..stores import DegradingStore
from ..tools.lowlevel import Asker
from ._actor import Settings
from ._artifact_tools import READ_TOOLS, artifact_tools
from ._artifacts import Artifacts, Keeper
from ._call import HOST_GRACE
from ._detached import Book
from ._entry import Entry
from ._options import RuntimeOptions, settings_keywords
from ._resilience import Resilience
from ._runtime import Runtime
from ._supervisor import Host, RegistryActor, Supervisor

__all__ = ["open_engine", "open_runtime"]

log = logging.getLogger("runtime.engine")


@settings_keywords(RuntimeOptions)
@contextlib.asynccontextmanager
async def open_runtime(
    registry: ToolRegistry | Iterable[ToolLike], options: RuntimeOptions
) -> AsyncIterator[Runtime]:
    """Start a runtime for `registry`; on exit, stop it (waiting calls fail, none are dropped).

    `open_runtime(registry, **settings)`: the tools (a ToolRegistry, or tools / ToolSets /
    functions), then any field of `RuntimeOptions` as a keyword (features, tracing,
    default_timeout, restart, mcp_servers, max_argument_bytes, max_argument_depth,
    max_result_chars, thread_limit, shutdown_timeout, on_elicit, on_sample, on_roots, policies,
    long_call_warning, store, retry, breaker, budget, fair, weights, artifacts, durable).

    Raises:
        TypeError: an unknown setting, or one of the wrong type.
    """
    async with open_engine(registry, options) as (rt, _):
        yield rt


async def _watch_long_calls(routing: RegistryActor, after: float, scope: trio.CancelScope) -> None:
    """Log each call with no deadline that has run `after` seconds (once per call): a sync tool
    blocked for ever is otherwise silent. Looks every `after / 4` seconds (at least 1 s), so a
    call is told of between `after` and `after` + two looks later; calls cost nothing for it."""
    every = max(1.0, after / 4)
    seen: dict[Any, float] = {}  # running calls with no deadline -> when first seen running
    told: set[Any] = set()
    with scope:
        while True:
            await trio.sleep(every)
            now = trio.current_time()
            running: dict[Any, float] = {}
            for actor in list(routing.routes.values()):
                for c in actor.plan.running:
                    if c.deadline == math.inf:
                        since = running[c] = seen.get(c, now)
                        if now - since >= after and c not in told:
                            told.add(c)
                            log.warning(
                                "tool %r: call %s has run over %.0f s with no deadline; give the "
                                "tool timeout=, or the runtime default_timeout=, to bound such calls",
                                actor.name,
                                c.call.id,
                                now - since,
                            )
            seen = running
            told &= running.keys()


async def _sweeping(routing: RegistryActor, after: float, scope: trio.CancelScope) -> None:
    """Stop the on-demand actors that have been idle `after` seconds, until the runtime closes."""
    with scope:
        await routing.sweep_idle(after)


def _check_trio() -> None:
    """A clear line for a runtime opened outside trio (asyncio.run, most often)."""
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        asyncio = sys.modules.get("asyncio")
        under_asyncio = False
        if asyncio is not None:
            try:
                asyncio.get_running_loop()
                under_asyncio = True
            except RuntimeError:
                pass
        where = "asyncio code (asyncio.run)" if under_asyncio else "code that trio does not run"
        raise RuntimeError(
            f"open_runtime needs trio (trio.run(main)) and was called from {where}: from asyncio use "
            "runtime.embed.open_asyncio_runtime, from sync code runtime.embed.RuntimeThread"
        ) from None


@contextlib.asynccontextmanager
async def open_engine(
    registry: ToolRegistry | Iterable[ToolLike], options: RuntimeOptions, *, host_loop: Any = None
) -> AsyncIterator[tuple[Runtime, Entry]]:
    """`open_runtime`, also giving the entry (the port the embeddings call through).

    `host_loop`: the asyncio loop this trio run is a guest of (`open_asyncio_runtime`), where
    tools declared `loop="asyncio"` run; it must be running on this thread.
    """
    _check_trio()
    if not isinstance(registry, ToolRegistry):
        registry = ToolRegistry(registry)
    feature_list = list(options.features)
    tracing_feature = _tracing_feature(options.tracing)
    if tracing_feature is not None:
        feature_list.insert(0, tracing_feature)
    resilience = Resilience(options)
    keeper: Keeper | None = None
    artifacts = options.artifacts if isinstance(options.artifacts, Artifacts) else None  # True: built
    if artifacts is not None:
        keeper = Keeper(artifacts, artifacts.open())
        if artifacts.tools:
            taken = [name for name in READ_TOOLS if name in registry]
            if taken:
                raise ToolDefinitionError(
                    f"a tool is named {taken[0]!r}, as a tool that Artifacts(tools=True) adds; rename "
                    "it, or open the runtime with Artifacts(tools=False)"
                )
            registry = registry.with_tools(*artifact_tools(keeper.store, options.max_result_chars))
    settings = Settings(options, FeaturePipeline(feature_list), host_loop, resilience, keeper)
    asker = Asker(options.on_elicit, options.on_sample, options.on_roots)
    host = await Host.open()
    resilience.nursery = host.nursery
    if keeper is not None:
        keeper.nursery = host.nursery
    supervisor = Supervisor(host, options.restart, options.shutdown_timeout)
    try:
        routing = RegistryActor(supervisor, settings)
        await host.nursery.start(routing.run)
        watching = trio.CancelScope()
        if options.long_call_warning is not None:
            host.nursery.start_soon(_watch_long_calls, routing, options.long_call_warning, watching)
        sweeping = trio.CancelScope()
        if options.stop_idle_after is not None:
            host.nursery.start_soon(_sweeping, routing, options.stop_idle_after, sweeping)
        entry = Entry(routing, settings, None if asker.empty else asker)
        book = entry.durable = _book(entry, routing, resilience, options)
        rt: Runtime = Runtime._create(routing, entry, supervisor)
        try:
            for actor in await routing.register(list(registry)):
                await actor.ready.wait()  # each setup is bounded by its tool's setup_timeout
            sources = list(options.mcp_servers)
            if sources:  # started together: each may take seconds to spawn, connect and list
                async with trio.open_nursery() as starting:
                    for source in sources:
                        starting.start_soon(supervisor.start_source, source, rt)
            await host.nursery.start(book.serve)  # the tools are there: what it recovers can run
            yield rt, entry
        finally:
            watching.cancel()
            sweeping.cancel()
            book.close()  # what ends as the runtime stops is left to recovery, not journaled as ended
            with trio.CancelScope(shield=True):
                await rt._close()
                await book.aclose()
                with trio.move_on_after(HOST_GRACE):
                    await resilience.store.aclose()
                    if keeper is not None:
                        await keeper.store.store.aclose()
    finally:
        host.close()  # what still runs there (code that ignores cancellation) is abandoned
        if not supervisor.abandoned:  # everything stopped: let the host's tasks end with us
            with trio.CancelScope(shield=True), trio.move_on_after(HOST_GRACE):
                await host.done.wait()


def _book(entry: Entry, routing: RegistryActor, resilience: Resilience, options: RuntimeOptions) -> Book:
    """The journal of detached and deferred calls, on the runtime's store (never degraded to
    memory: a record another process cannot see is no record)."""
    store = resilience.store
    if isinstance(store, DegradingStore):
        store = store.primary
    return Book(entry, routing, store, options.durable, local=resilience.local)


def _tracing_feature(tracing: bool | Feature) -> Feature | None:
    if tracing is True:
        from ..tracing import Tracing

        return Tracing()
    if tracing is False:
        return None
    return tracing
