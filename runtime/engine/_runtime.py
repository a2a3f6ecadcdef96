"""`open_runtime` and `Runtime`: where a caller's tool calls enter the actor system.

The caller's task does the routing (a lookup in the registry actor's snapshot), merges
metadata, runs the features' hooks, sends one envelope to the tool's mailbox and waits on
its reply slot. Parallel calls (`call_many`, `as_completed`) are sent from the caller's task
in one go and collected as they settle; the tool actors supply the concurrency.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping, Sequence
from typing import Any

import trio

from ..exceptions import RuntimeClosed
from ..features import Feature, FeaturePipeline
from ..messages import ECHO_LIMIT, FailureKind, ToolCall, ToolResult, echo
from ..registry import ToolLike, ToolRegistry
from ..tools import Asker, CallContext, ElicitHandler, RootsHandler, SampleHandler, ToolBase
from ._actor import ToolActor
from ._config import EngineConfig, RestartPolicy
from ._envelope import DONE, QUEUED, Batch, BatchEnvelope, CallEnvelope, Envelope, HostEnvelope
from ._routing import RegistryActor
from ._source import ToolSource
from ._stats import RuntimeStatistics, ToolStatistics
from ._supervisor import Host, Supervisor
from ._worker import call_chain

__all__ = ["Runtime", "RuntimeStatistics", "ToolStatistics", "open_runtime"]

log = logging.getLogger("runtime.engine")

_CANCELLED = "the call was cancelled by its caller"
_HOOK_GRACE = 1.0  # seconds the shielded failure hooks of a cancelled call may take
_HOST_GRACE = 1.0  # seconds the host's last tasks may take to end once everything has stopped
_EAGER_RUN = 128  # calls a batch runs in its caller's task between two checkpoints


class Runtime:
    """A running tool system; get one from `open_runtime`."""

    def __init__(
        self, routing: RegistryActor, config: EngineConfig, pipeline: FeaturePipeline, supervisor: Supervisor
    ) -> None:
        self._routing = routing
        self._config = config
        self._pipeline = pipeline if pipeline.active else None
        self._dormant = pipeline.dormant  # features that may turn on later (tracing=True, no SDK yet)
        self._supervisor = supervisor
        self._closed = False
        self._closing = False
        self._unknown = 0
        self._ids = itertools.count(1)
        self._asking: Asker | None = None  # open_runtime(on_elicit=..., on_sample=..., on_roots=...)

    # -- introspection ---------------------------------------------------------------

    @property
    def registry(self) -> ToolRegistry:
        """The tools callable now (a snapshot, MCP tools included)."""
        return self._routing.registry

    @property
    def registry_version(self) -> int:
        """Increases every time the set of tools changes (tools registered or removed)."""
        return self._routing.version

    async def wait_registry_changed(self, version: int) -> int:
        """Wait until `registry_version` differs from `version`; returns the new version.

        For edges that must tell their clients (MCP's `notifications/tools/list_changed`).
        """
        while self._routing.version == version:
            await self._routing.changed.wait()
        return self._routing.version

    @property
    def asking(self) -> Asker | None:
        """Who answers the tools' questions (`open_runtime(on_elicit=..., ...)`); None: no one.

        MCP connections answer their servers' elicitation, sampling and roots requests with these.
        """
        return self._asking

    @property
    def max_result_chars(self) -> int:
        """Every text that goes back to a model is cut at this many characters (edges honour it too)."""
        return self._config.max_result_chars

    @property
    def features(self) -> tuple[Feature, ...]:
        return self._pipeline.features if self._pipeline is not None else ()

    def statistics(self) -> RuntimeStatistics:
        """Per-tool counters: calls, failures by kind, in flight, queued, restarts, state,
        abandoned work (calls answered while their code ran on). `.to_dict()` for JSON."""
        return RuntimeStatistics(
            tools={name: a.statistics() for name, a in self._routing.routes.items()},
            unknown_tool_calls=self._unknown,
        )

    # -- run-time registration -------------------------------------------------------

    async def register(self, *tools: ToolLike, replace: bool = False) -> None:
        """Add tools while running (each gets a supervised actor); returns once each tool's
        first `setup()` attempt has ended (bounded by its `setup_timeout`).

        Raises:
            ValueError: a name is taken and `replace` is False.
            RuntimeClosed: the runtime is closed or shutting down.
        """
        self._check_not_closing()
        for actor in await self._routing.register(list(ToolRegistry(tools)), replace=replace):
            await actor.ready.wait()

    async def unregister(self, *names: str) -> None:
        """Remove tools while running; their queued calls fail UNAVAILABLE.

        Raises:
            RuntimeClosed: the runtime is closed or shutting down.
        """
        self._check_not_closing()
        await self._routing.unregister(names)

    # -- calling ---------------------------------------------------------------------

    async def call(
        self, call: ToolCall, *, metadata: Mapping[str, Any] | None = None, timeout: float | None = None
    ) -> ToolResult:
        """Run one tool call; always returns its result (a ToolSuccess or a ToolFailure).

        The result arrives by the call's deadline (its `timeout`, its tool's, the runtime's
        default), even from a tool that ignores cancellation.

        Raises:
            RuntimeClosed: the runtime is closed (the only exception this raises, besides
                the caller's own cancellation).
        """
        if self._closed:
            self._check_open()
        if self._dormant:
            self._wake()
        deadline = math.inf if timeout is None else trio.current_time() + timeout
        call, ctx, actor, problem = self._route(call, metadata)
        env = CallEnvelope(call, ctx, deadline, timeout)
        actor = self._admit(env, actor, problem)
        try:
            if self._pipeline is not None:  # a hook may await: a cancel there must still finish the call
                await self._pipeline.starting(env.call, env.ctx)  # type: ignore[arg-type]  # a pipeline makes a ctx
            if actor is not None and env.state == QUEUED and actor.pool.eager:
                # A call that cannot suspend runs here, after a checkpoint (trio's rule), unless
                # the actor stopped serving meanwhile.
                await trio.lowlevel.checkpoint()
            if (
                actor is not None
                and env.state == QUEUED
                and not (actor.pool.eager and actor.pool.serve_now(env))
            ):
                if deadline == math.inf and actor.untimed:  # no deadline anywhere: no scope to enter
                    if not actor.submit_nowait(env):
                        await actor.submit(env)
                    if env.state != DONE:
                        await env.wait()
                else:
                    await self._wait_timed(env, actor)
        except BaseException:
            await self._cancelled([env])
            raise
        if self._pipeline is None and env.counters is not None:  # `_finish` without hooks, inlined
            env.reported = True
            env.counters.record(env.result)  # type: ignore[arg-type]  # settled: DONE
        else:
            await self._finish(env)
        return env.result  # type: ignore[return-value]  # settled: DONE

    def call_now(
        self, call: ToolCall, *, metadata: Mapping[str, Any] | None = None, timeout: float | None = None
    ) -> ToolResult | None:
        """Serve `call` here and now if nothing in it can wait; None if it must go through `call`.

        For callers on the runtime's thread that are not trio tasks (`open_asyncio_runtime`'s
        asyncio code, between trio's ticks): a call of a tool that cannot suspend (see
        `WorkerPool.serve_now`), or one answered at once (an unknown tool, a malformed call),
        with features whose start and finish hooks cannot suspend either (tracing's cannot),
        needs no trio task and no wakeup of trio. The result is the one `call` would give;
        nothing here awaits, so this is not a checkpoint.
        """
        direct, target = self._direct(call)
        if not direct or (target is not None and not target.pool.eager):
            return None  # before `_route`: its metadata is collected once, by `call`
        pipeline = self._pipeline
        deadline = math.inf if timeout is None else trio.current_time() + timeout
        routed, ctx, actor, problem = self._route(call, metadata)
        env = CallEnvelope(routed, ctx, deadline, timeout)
        actor = self._admit(env, actor, problem)
        if pipeline is not None:
            pipeline.starting_now(env.call, ctx)  # type: ignore[arg-type]  # a pipeline makes a ctx
        if actor is not None and env.state == QUEUED and not actor.pool.serve_now(env):
            env.fail(
                FailureKind.UNAVAILABLE, f"tool {env.call.name!r} changed its code while served; call again"
            )
        self.finish_now(env)
        return env.result

    def start_on_host(
        self,
        call: ToolCall,
        future: Any,
        loop: Any,
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> HostEnvelope | None:
        """Start a sync or asyncio tool's call for a caller on the host asyncio `loop` (trio its
        guest): a sync tool's thread reports to the loop, an asyncio (or `loop="any"`) tool's
        coroutine becomes a task of the loop, so neither the call nor its result wakes trio; the
        caller waits on `future` until the envelope's `expires` and then calls `give_up_on_host`,
        and finally `finish_now`. A sync tool's call waits for a token of its budget on the
        loop's side. None: the call must go through `call` (a trio tool, a tool with
        `max_concurrency` or approval, features whose hooks may suspend, ...): nothing happened yet.
        """
        direct, target = self._direct(call)
        if not direct or target is None or not target.pool.host_ready:
            return None
        pipeline = self._pipeline
        deadline = math.inf if timeout is None else trio.current_time() + timeout
        routed, ctx, actor, problem = self._route(call, metadata)
        env = HostEnvelope(routed, ctx, deadline, timeout, future)
        actor = self._admit(env, actor, problem)
        if pipeline is not None:
            pipeline.starting_now(env.call, ctx)  # type: ignore[arg-type]  # a pipeline makes a ctx
        if actor is not None and env.state == QUEUED and not actor.pool.start_on_host(env, loop):
            env.fail(FailureKind.UNAVAILABLE, f"tool {env.call.name!r} stopped serving; call again")
        return env

    def _direct(self, call: ToolCall) -> tuple[bool, ToolActor | None]:
        """For the direct paths: whether one may serve `call` (False: features' hooks may
        suspend), and the actor its name routes to (None: unknown, or not a string)."""
        if self._closed:
            self._check_open()
        if self._dormant:
            self._wake()
        pipeline = self._pipeline
        if pipeline is not None and not pipeline.hooks_cannot_suspend:
            return False, None
        name = call.name
        return True, self._routing.routes.get(name) if type(name) is str else None

    def give_up_on_host(self, env: HostEnvelope, cancelled: bool) -> bool:
        """The caller of `start_on_host` stops waiting: its deadline passed, or it was cancelled.

        A sync tool's call is answered now (its thread runs on, abandoned). An asyncio tool's
        task is cancelled, and True says so: the caller waits up to `ABANDON_GRACE` for it to
        end, then calls `abandon_on_host`.
        """
        if env.state == DONE:
            return False
        kind = FailureKind.CANCELLED if cancelled else FailureKind.TIMEOUT
        message = _CANCELLED if cancelled else env.timeout_message()
        if env.pool is None:
            env.fail(kind, message)
        elif isinstance(env.job, asyncio.Future):
            env.pool.interrupt_task(env, cancelled)
            return True
        else:
            env.pool.drop_host(env, kind, message)
        return False

    def abandon_on_host(self, env: HostEnvelope) -> None:
        """An asyncio tool's task did not end within the grace after its cancellation."""
        if env.state == DONE:
            return
        kind = FailureKind.CANCELLED if env.cancelled else FailureKind.TIMEOUT
        message = _CANCELLED if env.cancelled else env.timeout_message()
        env.give_up(kind, f"{message}; it did not stop when cancelled and was abandoned")

    def finish_now(self, env: Envelope) -> None:
        """Count a settled call and run the finishing hooks (which cannot suspend), once."""
        if env.reported:
            return
        env.reported = True
        result = env.result
        assert result is not None
        if env.counters is not None:
            env.counters.record(result)
        if self._pipeline is not None:
            self._pipeline.finished_now(env.call, result, env.ctx)  # type: ignore[arg-type]

    async def call_many(
        self,
        calls: Iterable[ToolCall],
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> list[ToolResult]:
        """Run calls concurrently; results in the order of `calls`, one per call."""
        results: list[ToolResult | None] = []
        async with contextlib.aclosing(self._run_batch(calls, metadata, timeout, results)) as chunks:
            async for chunk in chunks:
                for env in chunk:
                    results[env.index] = env.result
        return results  # type: ignore[return-value]  # every slot is filled

    async def as_completed(
        self,
        calls: Iterable[ToolCall],
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> AsyncIterator[ToolResult]:
        """Run calls concurrently and yield each result as it finishes (fastest first).

        Stopping early cancels the calls still running (each still gets its CANCELLED result
        reported to the features). Python closes an async generator left by `break` only when
        it is garbage-collected, so close it yourself to cancel at once::

            async with contextlib.aclosing(rt.as_completed(calls)) as results:
                async for result in results:
                    ...
        """
        # aclosing: a consumer that stops early closes this generator, and that must close the
        # batch too (cancelling its calls now), not leave it to the garbage collector.
        async with contextlib.aclosing(self._run_batch(calls, metadata, timeout, None)) as chunks:
            async for chunk in chunks:
                for env in chunk:
                    yield env.result  # type: ignore[misc]  # settled: DONE

    async def invoke(
        self,
        tool: ToolBase[Any, Any] | str,
        /,
        *,
        _metadata: Mapping[str, Any] | None = None,
        _timeout: float | None = None,
        **arguments: Any,
    ) -> ToolResult:
        """Call a tool from code, with keyword arguments, through the same pipeline.

        `await rt.invoke(add, a=1, b=2)`; the arguments are validated like a model's (a value
        that is not JSON, such as `object()`, is INVALID_ARGUMENTS for this call alone).
        """
        name = tool if isinstance(tool, str) else tool.name
        call = ToolCall(id=f"invoke-{next(self._ids)}", name=name, arguments=arguments)
        return await self.call(call, metadata=_metadata, timeout=_timeout)

    # -- internals -------------------------------------------------------------------

    def _wake(self) -> None:
        """A dormant feature may have turned on (a tracer provider set after opening): if so,
        its hooks join every call from now on, in the callers and in the tool actors."""
        pipeline = self._config.pipeline
        if not pipeline.wake():
            return
        self._dormant = pipeline.dormant
        self._pipeline = pipeline if pipeline.active else None
        for actor in self._routing.routes.values():
            actor.pool.use_pipeline(pipeline)
        log.info("features turned on after the runtime opened: %s", ", ".join(map(repr, pipeline.features)))

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeClosed("the runtime is closed; open a new one with open_runtime()")

    def _check_not_closing(self) -> None:
        self._check_open()
        if self._closing:
            raise RuntimeClosed("the runtime is shutting down; no tool can be added or removed")

    def _route(
        self, call: ToolCall, metadata: Mapping[str, Any] | None
    ) -> tuple[ToolCall, CallContext | None, ToolActor | None, _Problem | None]:
        """The call (made safe to echo if the model sent odd fields), its context, its actor,
        and what is wrong with the call itself, if anything."""
        name = call.name
        problem: _Problem | None = None
        if type(name) is not str or type(call.id) is not str or len(name) > ECHO_LIMIT:
            call, problem = _sanitized(call)
            name = call.name
        actor = self._routing.routes.get(name)
        tool = actor.tool if actor is not None else None
        if (
            self._pipeline is not None
            or (tool is not None and tool.takes_context)
            or (actor is not None and actor.asks)
        ):
            merged = self._config.pipeline.merge_metadata(call, tool, metadata)
            return call, CallContext(call.id, name, merged, None, tool, asking=self._asking), actor, problem
        return call, None, actor, problem

    def _admit(self, env: Envelope, actor: ToolActor | None, problem: _Problem | None) -> ToolActor | None:
        """`actor` if it may serve `env`, else None with `env` settled (unknown tool, malformed,
        shutting down, a call that would wait on itself)."""
        call = env.call
        if problem is not None:
            env.fail(*problem)
            return None
        if actor is None:
            self._unknown += 1
            env.fail(FailureKind.UNKNOWN_TOOL, self._routing.registry.missing_message(call.name))
            return None
        env.counters = actor.counters
        if self._closing:
            env.fail(
                FailureKind.UNAVAILABLE, f"tool {call.name!r} is unavailable: the runtime is shutting down"
            )
            return None
        chain = call_chain.get()
        if chain and actor.counters in chain:
            held = chain.count(actor.counters)
            if held >= actor.pool.capacity:
                env.fail(
                    FailureKind.OVERLOADED,
                    f"tool {call.name!r} would wait on itself: all {held} of its slots "
                    "(max_concurrency) are held by the chain of calls that makes this call",
                )
                return None
        return actor

    async def _wait_timed(self, env: CallEnvelope, actor: ToolActor) -> None:
        """Submit and wait, answering the call from this side once its deadline lapses."""
        submitted = False
        while True:
            with trio.CancelScope(deadline=env.expires) as waiting:
                env.waiter = waiting
                if not submitted:
                    submitted = True
                    if not actor.submit_nowait(env):
                        await actor.submit(env)  # a full mailbox: wait for room (backpressure)
                if env.state != DONE:
                    await env.wait()
            env.waiter = None
            if env.state == DONE:
                return
            env.lapse()
            if env.state == DONE:
                return

    async def _run_batch(
        self,
        calls: Iterable[ToolCall],
        metadata: Mapping[str, Any] | None,
        timeout: float | None,
        results: list[ToolResult | None] | None,
    ) -> AsyncGenerator[list[BatchEnvelope], None]:
        """Send every call, then yield the finished envelopes in chunks, in completion order.

        Chunks, not single envelopes: a thousand calls finishing together cost one resume of
        this generator, not a thousand.
        """
        self._check_open()
        if self._dormant:
            self._wake()
        calls = calls if isinstance(calls, Sequence) else list(calls)
        if results is not None:
            results.extend(None for _ in calls)
        deadline = math.inf if timeout is None else trio.current_time() + timeout
        batch = Batch(len(calls), deadline)
        envs: list[BatchEnvelope] = []
        actors: list[ToolActor | None] = []
        for i, c in enumerate(calls):
            routed, ctx, actor, problem = self._route(c, metadata)
            env = BatchEnvelope(routed, ctx, deadline, timeout, batch, i)
            envs.append(env)
            actor = self._admit(env, actor, problem)
            actors.append(actor)
            if actor is not None and not actor.untimed:
                batch.timed = True
        pipeline = self._pipeline
        finished = 0
        try:
            if pipeline is not None:
                for env in envs:
                    await pipeline.starting(env.call, env.ctx)  # type: ignore[arg-type]  # a pipeline makes a ctx
            with trio.move_on_at(deadline):
                await trio.lowlevel.checkpoint()  # trio's rule; and a cancelled caller runs nothing
                ran = 0
                for env, actor in zip(envs, actors, strict=True):
                    if env.state != QUEUED or actor is None:
                        continue
                    if actor.pool.eager and actor.pool.serve_now(env):  # cannot suspend: run now
                        ran += 1
                        if ran % _EAGER_RUN == 0:
                            await trio.lowlevel.checkpoint()  # a long batch lets others run too
                    elif not actor.submit_nowait(env):
                        await actor.submit(env)  # a full mailbox: wait for room (backpressure)
            while finished < len(envs):
                while not batch.done:
                    await batch.wait()
                    if not batch.done:  # an envelope's deadline lapsed
                        _lapse(envs, batch)
                chunk: list[BatchEnvelope] = list(batch.done)  # type: ignore[arg-type]  # a batch holds its own
                batch.done.clear()
                for env in chunk:
                    await self._finish(env)
                finished += len(chunk)
                yield chunk
        except BaseException:
            await self._cancelled([e for e in envs if not e.reported])
            raise

    async def _finish(self, env: Envelope) -> None:
        """Count the call and run the finishing hooks, exactly once per call (all paths)."""
        if env.reported:
            return
        env.reported = True
        result = env.result
        assert result is not None
        if env.counters is not None:
            env.counters.record(result)
        if self._pipeline is not None:
            await self._pipeline.finished(env.call, result, env.ctx)  # type: ignore[arg-type]  # a pipeline makes a ctx

    async def _cancelled(self, envs: Sequence[Envelope]) -> None:
        """The caller was cancelled: every call not yet finished fails CANCELLED, hooks included."""
        for env in envs:
            if env.state != DONE:
                env.abandon(FailureKind.CANCELLED, _CANCELLED)
                env.fail(FailureKind.CANCELLED, _CANCELLED)  # a running call: its worker's answer is dropped
        with trio.CancelScope(shield=True), trio.move_on_after(_HOOK_GRACE):
            for env in envs:
                await self._finish(env)

    async def _close(self) -> None:
        self._closing = True
        await self._supervisor.stop_all()
        self._routing.close()
        self._closed = True


def _lapse(envs: Sequence[Envelope], batch: Batch) -> None:
    """The batch woke at its earliest expiry: lapse every envelope due, find the next expiry."""
    now = trio.current_time()
    batch.expires = math.inf
    for env in envs:
        if env.state != DONE:
            if env.expires <= now:
                env.lapse()
            if env.state != DONE and env.expires < batch.expires:
                batch.expires = env.expires


_Problem = tuple[FailureKind, str]


def _sanitized(call: ToolCall) -> tuple[ToolCall, _Problem | None]:
    """A copy of `call` safe to echo in results, spans and logs, and what was wrong with it."""
    name, call_id = call.name, call.id
    problem: tuple[FailureKind, str] | None = None
    if type(call_id) is not str:
        problem = (
            FailureKind.INVALID_ARGUMENTS,
            f"the tool call's id must be a string, not {type(call_id).__name__}",
        )
        call_id = "" if call_id is None else echo(call_id)
    if type(name) is not str:
        problem = (FailureKind.UNKNOWN_TOOL, f"a tool name must be a string, not {type(name).__name__}")
        name = echo(name)
    elif len(name) > ECHO_LIMIT:
        name = echo(name)  # no tool has such a name: routing fails, and says so briefly
    return ToolCall(id=call_id, name=name, arguments=call.arguments), problem


@contextlib.asynccontextmanager
async def open_runtime(
    registry: ToolRegistry | Iterable[ToolLike] = (),
    *,
    features: Iterable[Feature] = (),
    tracing: bool | Feature = True,
    default_timeout: float | None = None,
    restart: RestartPolicy | None = None,
    mcp_servers: Iterable[ToolSource] = (),
    max_argument_bytes: int = 1 << 20,
    max_argument_depth: int = 64,
    max_result_chars: int = 100_000,
    thread_limit: int = 40,
    shutdown_timeout: float = 5.0,
    asyncio_loop: asyncio.AbstractEventLoop | None = None,
    on_elicit: ElicitHandler | None = None,
    on_sample: SampleHandler | None = None,
    on_roots: RootsHandler | None = None,
) -> AsyncIterator[Runtime]:
    """Start a runtime for `registry`; on exit, stop it (queued calls fail, none are dropped).

    Args:
        registry: the tools (a ToolRegistry, or tools / ToolSets / functions).
        features: call hooks, in order.
        tracing: True for OpenTelemetry spans and metrics through the global providers,
            False for none, or a configured `runtime.tracing.Tracing`.
        default_timeout: seconds a call may run when neither its tool nor its caller says.
        restart: how crashed actors are restarted.
        mcp_servers: tool sources (`runtime.mcp.stdio(...)` ...); waits for their first listing.
        max_argument_bytes: larger arguments are INVALID_ARGUMENTS before decoding.
        max_argument_depth: arguments nested deeper are INVALID_ARGUMENTS before decoding.
        max_result_chars: longer texts going back (content, text parts, failures) are cut, with a marker.
        thread_limit: worker threads of each sync tool that sets no `max_concurrency` (each
            sync tool has its own budget, so one tool's stuck threads never starve another).
        shutdown_timeout: seconds running calls get to finish at shutdown before they are
            cancelled; work that ignores cancellation is abandoned half a second later.
        asyncio_loop: the asyncio loop this trio run is a guest of, where tools declared
            `loop="asyncio"` run. Set by `runtime.embed.open_asyncio_runtime`; not for
            other uses (the loop must be running on this thread).
        on_elicit: answers the tools' `ctx.elicit` and `requires_approval` questions
            (`async def on_elicit(q: Elicitation) -> Answer`), and MCP servers' elicitation
            requests to this runtime's connections. Without it a tool that asks fails UNAVAILABLE.
        on_sample: answers `ctx.sample` and MCP servers' sampling requests
            (`async def on_sample(r: Sampling) -> Sampled`), e.g. with the agent's own model.
        on_roots: answers `ctx.list_roots` and MCP servers' roots requests
            (`async def on_roots(r: RootsRequest) -> list[Root]`).
    """
    if not isinstance(registry, ToolRegistry):
        registry = ToolRegistry(registry)
    feature_list = list(features)
    tracing_feature = _tracing_feature(tracing)
    if tracing_feature is not None:
        feature_list.insert(0, tracing_feature)
    pipeline = FeaturePipeline(feature_list)
    config = EngineConfig(
        pipeline=pipeline,
        default_timeout=default_timeout,
        max_argument_bytes=max_argument_bytes,
        max_argument_depth=max_argument_depth,
        max_result_chars=max_result_chars,
        shutdown_timeout=shutdown_timeout,
        thread_limit=thread_limit,
        asyncio_loop=asyncio_loop,
    )
    host = await Host.open()
    supervisor = Supervisor(host, restart or RestartPolicy(), shutdown_timeout)
    try:
        routing = RegistryActor(supervisor, config)
        await host.nursery.start(routing.run)
        rt = Runtime(routing, config, pipeline, supervisor)
        asker = Asker(on_elicit, on_sample, on_roots)
        rt._asking = None if asker.empty else asker
        try:
            for actor in await routing.register(list(registry)):
                await actor.ready.wait()  # each setup is bounded by its tool's setup_timeout
            sources = list(mcp_servers)
            if sources:  # started together: each may take seconds to spawn, connect and list
                async with trio.open_nursery() as starting:
                    for source in sources:
                        starting.start_soon(supervisor.start_source, source, rt)
            yield rt
        finally:
            with trio.CancelScope(shield=True):
                await rt._close()
    finally:
        host.close()  # what still runs there (code that ignores cancellation) is abandoned
        if not supervisor.abandoned:  # everything stopped: let the host's tasks end with us
            with trio.CancelScope(shield=True), trio.move_on_after(_HOST_GRACE):
                await host.done.wait()


def _tracing_feature(tracing: bool | Feature) -> Feature | None:
    if tracing is True:
        from ..tracing import Tracing

        return Tracing()
    if tracing is False:
        return None
    if isinstance(tracing, Feature):
        return tracing
    raise TypeError(f"tracing must be True, False or a Tracing instance, not {tracing!r}")
