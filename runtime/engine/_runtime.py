"""`open_runtime` and `Runtime`: where a caller's tool calls enter the actor system.

The caller's task does the routing (a lookup in the registry actor's snapshot), merges
metadata, runs the features' hooks, sends one envelope to the tool's mailbox and waits on
its reply slot. Parallel calls (`call_many`, `as_completed`) are sent from the caller's task
in one go and collected as they settle; the tool actors supply the concurrency.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping, Sequence
from typing import Any

import msgspec
import trio

from ..exceptions import RuntimeClosed
from ..features import Feature, FeaturePipeline
from ..messages import FailureKind, ToolCall, ToolResult
from ..registry import ToolLike, ToolRegistry
from ..tools import CallContext, ToolBase
from ._actor import EngineConfig, RestartPolicy
from ._envelope import DONE, QUEUED, Batch, Envelope
from ._routing import RegistryActor
from ._source import ToolSource
from ._supervisor import Supervisor

__all__ = ["Runtime", "RuntimeStatistics", "ToolStatistics", "open_runtime"]

log = logging.getLogger("runtime.engine")

_CANCELLED = "the call was cancelled by its caller"
_HOOK_GRACE = 1.0  # seconds the shielded failure hooks of a cancelled call may take


class ToolStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """Counters of one tool (a snapshot).

    Attributes:
        calls: calls answered.
        succeeded: calls that returned.
        failures: failed calls by FailureKind value.
        in_flight: calls running now.
        queued: calls waiting in the mailbox now.
        restarts: times the actor was restarted.
        state: "starting", "up", "restarting", "down" or "stopped".
    """

    calls: int
    succeeded: int
    failures: dict[str, int]
    in_flight: int
    queued: int
    restarts: int
    state: str


class RuntimeStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """Counters of a runtime (a snapshot): per tool, and calls to tools it does not have."""

    tools: dict[str, ToolStatistics]
    unknown_tool_calls: int

    @property
    def in_flight(self) -> int:
        return sum(t.in_flight for t in self.tools.values())


class Runtime:
    """A running tool system; get one from `open_runtime`."""

    def __init__(
        self, routing: RegistryActor, config: EngineConfig, pipeline: FeaturePipeline, supervisor: Supervisor
    ) -> None:
        self._routing = routing
        self._config = config
        self._pipeline = pipeline if pipeline.active else None
        self._supervisor = supervisor
        self._closed = False
        self._closing = False
        self._unknown = 0
        self._ids = itertools.count(1)

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
    def features(self) -> tuple[Feature, ...]:
        return self._pipeline.features if self._pipeline is not None else ()

    def statistics(self) -> RuntimeStatistics:
        """Per-tool counters: calls, failures by kind, in flight, queued, restarts, state."""
        return RuntimeStatistics(
            tools={
                name: ToolStatistics(
                    calls=a.calls,
                    succeeded=a.succeeded,
                    failures=dict(a.failures),
                    in_flight=a.in_flight,
                    queued=a.queued(),
                    restarts=a.restarts,
                    state=a.state.value,
                )
                for name, a in self._routing.routes.items()
            },
            unknown_tool_calls=self._unknown,
        )

    # -- run-time registration -------------------------------------------------------

    async def register(self, *tools: ToolLike, replace: bool = False) -> None:
        """Add tools while running (each gets a supervised actor).

        Raises:
            ValueError: a name is taken and `replace` is False.
            RuntimeClosed: the runtime is closed or shutting down.
        """
        self._check_not_closing()
        await self._routing.register(list(ToolRegistry(tools)), replace=replace)

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

        Raises:
            RuntimeClosed: the runtime is closed (the only exception this raises, besides
                the caller's own cancellation).
        """
        if self._closed:
            self._check_open()
        deadline = math.inf if timeout is None else trio.current_time() + timeout
        env = self._envelope(call, metadata, deadline, timeout, None, 0)
        pipeline = self._pipeline
        actor = env.actor
        try:
            if pipeline is not None:  # a hook may await: a cancel there must still finish the call
                await pipeline.starting(call, env.ctx)  # type: ignore[arg-type]
            if actor is not None and env.state == QUEUED:
                if deadline == math.inf:
                    if not actor.submit_nowait(env):
                        await actor.submit(env)
                    if env.state != DONE:
                        await env.event.wait()  # type: ignore[union-attr]  # a single call has its event
                else:
                    with trio.move_on_at(deadline):
                        await actor.submit(env)
                        if env.state != DONE:
                            await env.wait()
                    if env.state != DONE:
                        env.abandon(FailureKind.TIMEOUT, env.timeout_message())
                        if env.state != DONE:
                            await env.wait()  # running: its worker has the same deadline
        except BaseException:
            await self._cancelled([env])
            raise
        result = env.result
        assert result is not None
        if actor is not None:
            actor.calls += 1
            if result.ok:
                actor.succeeded += 1
            else:
                actor.record_failure(result)  # type: ignore[arg-type]
        if pipeline is not None:
            await pipeline.finished(call, result, env.ctx)  # type: ignore[arg-type]
        return result

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
                    assert env.result is not None
                    yield env.result

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

        `await rt.invoke(add, a=1, b=2)`; the arguments are validated like a model's.
        """
        name = tool if isinstance(tool, str) else tool.name
        call = ToolCall(id=f"invoke-{next(self._ids)}", name=name, arguments=arguments)
        return await self.call(call, metadata=_metadata, timeout=_timeout)

    # -- internals -------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeClosed("the runtime is closed; open a new one with open_runtime()")

    def _check_not_closing(self) -> None:
        self._check_open()
        if self._closing:
            raise RuntimeClosed("the runtime is shutting down; no tool can be added or removed")

    def _envelope(
        self,
        call: ToolCall,
        metadata: Mapping[str, Any] | None,
        deadline: float,
        limit: float | None,
        batch: Batch | None,
        index: int,
    ) -> Envelope:
        actor = self._routing.routes.get(call.name)
        tool = actor.tool if actor is not None else None
        ctx: CallContext | None = None
        if self._pipeline is not None or (tool is not None and tool.takes_context):
            merged = self._config.pipeline.merge_metadata(call, tool, metadata)
            ctx = CallContext(call.id, call.name, merged, None, tool)
        env = Envelope(call, ctx, deadline, limit, batch, index)
        if actor is None:
            self._unknown += 1
            env.fail(FailureKind.UNKNOWN_TOOL, self._routing.registry.missing_message(call.name))
        elif self._closing:
            env.fail(
                FailureKind.UNAVAILABLE, f"tool {call.name!r} is unavailable: the runtime is shutting down"
            )
        else:
            env.actor = actor
        return env

    async def _run_batch(
        self,
        calls: Iterable[ToolCall],
        metadata: Mapping[str, Any] | None,
        timeout: float | None,
        results: list[ToolResult | None] | None,
    ) -> AsyncGenerator[list[Envelope], None]:
        """Send every call, then yield the finished envelopes in chunks, in completion order.

        Chunks, not single envelopes: a thousand calls finishing together cost one resume of
        this generator, not a thousand.
        """
        self._check_open()
        calls = calls if isinstance(calls, Sequence) else list(calls)
        if results is not None:
            results.extend(None for _ in calls)
        deadline = math.inf if timeout is None else trio.current_time() + timeout
        batch = Batch(len(calls))
        envs = [self._envelope(c, metadata, deadline, timeout, batch, i) for i, c in enumerate(calls)]
        pipeline = self._pipeline
        finished = 0
        try:
            if pipeline is not None:
                for env in envs:
                    await pipeline.starting(env.call, env.ctx)  # type: ignore[arg-type]
            if deadline == math.inf:
                await self._submit_all(envs)
            else:
                with trio.move_on_at(deadline):
                    await self._submit_all(envs)
            while finished < len(envs):
                if not batch.done:
                    if deadline == math.inf:
                        await batch.wait()
                    else:
                        with trio.move_on_at(deadline):
                            await batch.wait()
                        if not batch.done:  # the deadline passed
                            for env in envs:
                                env.abandon(FailureKind.TIMEOUT, env.timeout_message())
                            await batch.wait()  # running calls time out by their own deadline
                chunk = list(batch.done)
                batch.done.clear()
                for env in chunk:
                    await self._finish(env)
                finished += len(chunk)
                yield chunk
        except BaseException:
            await self._cancelled([e for e in envs if not e.reported])
            raise

    @staticmethod
    async def _submit_all(envs: list[Envelope]) -> None:
        for env in envs:
            actor = env.actor
            if env.state == QUEUED and actor is not None and not actor.submit_nowait(env):
                await actor.submit(env)  # a full mailbox: wait for room (backpressure)

    async def _finish(self, env: Envelope) -> None:
        """Count the call and run the finishing hooks, exactly once per call."""
        if env.reported:
            return
        env.reported = True
        result = env.result
        assert result is not None
        if env.actor is not None:
            env.actor.record(result)
        if self._pipeline is not None:
            await self._pipeline.finished(env.call, result, env.ctx)  # type: ignore[arg-type]

    async def _cancelled(self, envs: list[Envelope]) -> None:
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
    max_result_chars: int = 100_000,
    thread_limit: int = 40,
    shutdown_timeout: float = 5.0,
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
        max_result_chars: longer result texts are cut, with a marker.
        thread_limit: worker threads shared by all sync tools.
        shutdown_timeout: seconds running calls get to finish at shutdown before they are cancelled.
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
        max_result_chars=max_result_chars,
        shutdown_timeout=shutdown_timeout,
        thread_limiter=trio.CapacityLimiter(thread_limit),
    )
    body_error: Exception | None = None
    async with trio.open_nursery() as nursery:
        supervisor = Supervisor(nursery, restart or RestartPolicy(), shutdown_timeout)
        routing = RegistryActor(supervisor, config)
        await nursery.start(routing.run)
        rt = Runtime(routing, config, pipeline, supervisor)
        try:
            await routing.register(list(registry))
            sources = list(mcp_servers)
            if sources:  # started together: each may take seconds to spawn, connect and list
                async with trio.open_nursery() as starting:
                    for source in sources:
                        starting.start_soon(supervisor.start_source, source, rt)
            try:
                yield rt
            except Exception as exc:
                # Re-raised below, outside the nursery, so the caller gets its own exception
                # back as it raised it rather than wrapped in an ExceptionGroup.
                body_error = exc
        finally:
            with trio.CancelScope(shield=True):
                await rt._close()
    if body_error is not None:
        raise body_error


def _tracing_feature(tracing: bool | Feature) -> Feature | None:
    if tracing is True:
        from ..tracing import Tracing

        return Tracing()
    if tracing is False:
        return None
    if isinstance(tracing, Feature):
        return tracing
    raise TypeError(f"tracing must be True, False or a Tracing instance, not {tracing!r}")
