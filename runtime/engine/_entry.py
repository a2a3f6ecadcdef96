"""The one entry: how every call gets in, whoever makes it, and how a trio caller waits.

The steps every call takes (`Entry`), whoever makes it:

    prepare   route (a lookup in the registry actor's snapshot), the call's context (merged
              metadata), its deadline, and begin: bounds + decode, the call chain; what is wrong
              with the call itself settles it here (unknown tool, bad id, bad arguments)
    starting  the policies' before-halves (which may answer the call, rewrite it, send it to
              another tool or redact it for observers), then the features' `on_call_starting`
              hooks; driven here, or awaited if they may suspend
    admit     its gates, then its tool's mailbox starts it (eager calls run right here), queues
              it, or refuses it
    finish    the policies' after-halves, counted once, the features' finishing hooks

and how a trio caller waits for them:

    call      trio's `send` shape: a checkpoint, the attempt that needs no wait (a cache hit, an
              eager call, a call run here when it only awaits another process), then a park
    stream    the same, its reply slot a bounded channel of the tool's chunks
    batch     `call_many` / `as_completed`: admit every call, yield them as they finish (`Batch`:
              one trio task waits for the whole batch, and wakes at the earliest `expires`
              among them to lapse the ones due)
    cancelled the caller gave up: every call not answered ends CANCELLED, hooks included

A cache hit of a tool whose first policy is its cache is answered before all of them
(`_cached`). The asyncio embedding and `RuntimeThread` use the same steps; only how they wait
differs. Nothing here knows where a tool runs: that is its executor's.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import math
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypedDict, TypeVar, Unpack

import outcome
import sniffio
import trio

from .._flows import Flow, drive, drive_now
from ..exceptions import RuntimeClosed
from ..messages import ECHO_LIMIT, FailureKind, ToolCall, ToolResult, ToolSuccess, echo
from ..tools import CallContext
from ..tools.lowlevel import Asker
from ._actor import Settings
from ._call import CANCELLED_MESSAGE, DONE, HOOK_GRACE, QUEUED, REPORTED, RUNNING, Call
from ._plan import Nowhere, ToolPlan, call_chain
from ._policies import CallRequest, Policy, after, before, call_of, redacted
from ._resilience import Gate, Resilience
from ._scope import Scope
from ._supervisor import RegistryActor

__all__ = ["STREAM_BUFFER", "AsyncioDriver", "Batch", "CallSettings", "Entry", "lapse_due"]

T = TypeVar("T")

log = logging.getLogger("runtime.engine")

_Problem = tuple[FailureKind, str]
_EAGER_RUN = 128  # calls a batch admits in its caller's task between two checkpoints
_INF = math.inf  # the hot path's globals, one lookup each
_NOT_BEGUN: Any = ()  # `Call.notes` of a batch's call whose starting hooks have not run yet
_checkpoint_if_cancelled = trio.lowlevel.checkpoint_if_cancelled
_cancel_shielded_checkpoint = trio.lowlevel.cancel_shielded_checkpoint


class CallSettings(TypedDict, total=False):
    """A call's own settings: the keywords of every call method, on every runtime and view
    (declared once here).

    Attributes:
        metadata: the caller's metadata for the call (merged over the features', under the
            runtime's own keys); never sent to the model.
        timeout: seconds the call may take (its deadline is the sooner of this and its tool's own).
        principal: who the call runs for (an id, never a secret); a view's calls run for the
            view's principal unless a call names another.
    """

    metadata: Mapping[str, Any] | None
    timeout: float | None
    principal: str | None


STREAM_BUFFER = 8
"""Chunks of a streamed call that may wait for its reader before the tool waits too."""


class _Stream:
    """The reply slot of a call read as a stream (`Entry.stream`): once the call is settled, its
    chunks end (the reader drains what is buffered, then reads the result)."""

    __slots__ = ("send",)

    def __init__(self, send: trio.MemorySendChannel[str]) -> None:
        self.send = send

    def settled(self, call: Call[ToolPlan]) -> None:
        call.plan.sinks.pop(call, None)
        self.send.close()

    def expire_at(self, when: float) -> None:
        pass  # the reader waits until the call's `expires`, read each time it waits


class Entry:
    """The engine's way in (an internal port: `Runtime` and the embeddings use it)."""

    def __init__(self, routing: RegistryActor, settings: Settings, asking: Asker | None) -> None:
        self._routing = routing
        self._settings = settings
        pipeline = settings.pipeline
        self.pipeline = pipeline if pipeline.active else None
        self._hooks_wait = self.pipeline is not None and not pipeline.hooks_cannot_suspend
        """A feature's hook may suspend: every call's flows are awaited (see `waits`)."""
        self._observer = pipeline if pipeline.observes else None
        self._dormant = bool(pipeline.dormant)  # features that may turn on later (tracing, no SDK yet)
        self.asking = asking
        self.closed = False
        self.closing = False
        self.unknown = 0
        self._resilience = (
            settings.resilience if settings.resilience is not None else Resilience(settings.options)
        )
        budget = settings.options.budget
        self._batch_gates = budget is not None and budget.per_batch is not None
        self._principal_gates = budget is not None and budget.per_principal is not None
        if settings.resilience is not None:
            settings.resilience.readmit = self.readmit
        self.nowhere = Nowhere(
            tuple(p for p in settings.options.policies if type(p).applies is Policy.applies)
        )
        """The plan of a call that reaches no tool. What it meets (its tool is unknown, or hidden from its view):
        the runtime-wide policies that apply to every tool, so that a redaction holds and an
        audit hears it; one that picks its tools (overrides `applies`) picked none of these. A
        hidden tool's call meets the same as an unknown name's: nothing tells them apart. The
        call keeps its UNKNOWN_TOOL answer."""

    @property
    def direct(self) -> bool:
        """Whether callers that are not trio tasks may run the whole entry themselves (no
        feature hook and no tool's policy can suspend)."""
        pipeline = self.pipeline
        return (
            (pipeline is None or pipeline.hooks_cannot_suspend)
            and not self._routing.suspends
            and not self.nowhere.suspends
        )

    def store_health(self) -> dict[str, Any]:
        """The store's failures so far, and whether it fails now (for `statistics()`)."""
        resilience = self._settings.resilience
        if resilience is None or resilience.local:
            return {}
        return {"store_failures": resilience.store_failures, "store_degraded": resilience.store.degraded}  # type: ignore[attr-defined]

    def check_open(self) -> None:
        if self.closed:
            raise RuntimeClosed("the runtime is closed; open a new one with open_runtime()")
        if self._dormant:
            self._wake()

    def _wake(self) -> None:
        """A dormant feature may have turned on (a tracer provider set after opening): if so,
        its hooks join every call from now on."""
        pipeline = self._settings.pipeline
        if not pipeline.wake():
            return
        self._dormant = bool(pipeline.dormant)
        self.pipeline = pipeline if pipeline.active else None
        self._hooks_wait = self.pipeline is not None and not pipeline.hooks_cannot_suspend
        self._observer = pipeline if pipeline.observes else None
        for actor in self._routing.routes.values():
            actor.use_pipeline(pipeline)
        log.info("features turned on after the runtime opened: %s", ", ".join(map(repr, pipeline.features)))

    # -- the steps -----------------------------------------------------------------------

    def prepare(
        self,
        call: ToolCall,
        metadata: Mapping[str, Any] | None,
        deadline: float,
        limit: float | None,
        reply: Any = None,
        index: int = 0,
        principal: str | None = None,
        scope: Scope | None = None,
    ) -> Call[ToolPlan]:
        """Route, give a context and a deadline, and begin (decode): nothing here waits."""
        name = call.name
        problem: _Problem | None = None
        if type(name) is not str or type(call.id) is not str or len(name) > ECHO_LIMIT:
            call, problem = _sanitized(call)
            name = call.name
        routing = self._routing
        actor = routing.routes.get(name) if problem is None else None  # a malformed call reaches no tool
        if scope is not None:
            if principal is None:
                principal = scope.principal
            if (actor is not None or problem is None) and name not in scope.visible(
                routing.registry, routing.version
            ):
                actor = None  # hidden from this view: as if it did not exist
                problem = (
                    FailureKind.UNKNOWN_TOOL,
                    scope.visible(routing.registry, routing.version).missing_message(name),
                )
                self.unknown += 1
        if actor is None and problem is None and name in routing.registry:  # it starts on demand
            if self.closing:
                problem = (
                    FailureKind.UNAVAILABLE,
                    f"tool {name!r} is unavailable: the runtime is shutting down",
                )
            else:
                actor = routing.actor(name)
        ctx = None
        if self.pipeline is not None or (actor is not None and actor.needs_context):
            ctx = self.context(call, actor.tool if actor is not None else None, metadata, principal, scope)
        if actor is None:
            c: Call[ToolPlan] = Call(call, ctx, self.nowhere, deadline, limit, reply, index, principal)
            self.nowhere.holding += 1
            if problem is None:
                self.unknown += 1
                known = (
                    scope.visible(routing.registry, routing.version)
                    if scope is not None
                    else routing.registry
                )
                problem = (FailureKind.UNKNOWN_TOOL, known.missing_message(name))
            c.fail(*problem)
            return c
        plan = actor.plan
        c = Call(call, ctx, plan, deadline, limit, reply, index, principal)
        plan.holding += 1
        if ctx is None and plan.policies:
            c.metadata = metadata  # a policy that reads request.ctx gets one made then
        if self.closing:
            c.fail(FailureKind.UNAVAILABLE, f"tool {name!r} is unavailable: the runtime is shutting down")
        elif actor.mailbox.closed:  # down: that is what the model must hear, whatever its arguments
            actor.mailbox.admit(c)
        elif plan.chained and _waits_on_itself(c, actor.mailbox.capacity):
            pass
        elif plan.decode(c) and self._principal_gates:
            gate = self._settings.resilience.gates_for(principal)  # type: ignore[union-attr]  # budgets have one
            if gate is not None:
                c.gates = (gate,)
        if scope is not None and scope.batch and self._batch_gates and c.state is QUEUED:
            self._gate_scope(c, scope)
        return c

    def _gate_scope(self, c: Call[ToolPlan], scope: Scope) -> None:
        """A view whose calls are one batch (`Scope.batch`): each call takes a place in the
        batch's one `Budget(per_batch=N)` gate, as a `call_many`'s calls do (`gate_batch`)."""
        gate = scope.gate
        if gate is None:
            budget = self._settings.options.budget
            assert budget is not None  # `_batch_gates`: a per_batch budget
            assert budget.per_batch is not None
            gate = scope.gate = Gate(budget.per_batch, self.readmit)
        c.gates = (gate,) if c.gates is None else (gate, *c.gates)

    def context(
        self,
        call: ToolCall,
        tool: Any,
        metadata: Mapping[str, Any] | None,
        principal: str | None,
        scope: Scope | None = None,
    ) -> CallContext:
        """A call's CallContext: its merged metadata, the runtime's asking handlers and observer."""
        merged = self._settings.pipeline.merge_metadata(call, tool, metadata, principal)
        return CallContext(
            call.id,
            call.name,
            merged,
            None,
            tool,
            asking=self.asking,
            observer=self._observer,
            principal=principal,
            views=self,
            scope=scope,
        )

    def view_of(self, scope: Scope | None, principal: str | None) -> Any:
        """The view a call's tool calls other tools through (`CallContext.runtime`): the one
        its call came through, for the call's principal, waiting as the tool's code does (on
        trio, or on the host asyncio loop)."""
        driver: Any = self
        if self.asyncio_driver is not None and sniffio.current_async_library() == "asyncio":
            driver = self.asyncio_driver
        return self.views(driver, Scope(principal, parent=scope))

    views: Any = None
    """Makes a scoped view of the runtime from a driver and a `Scope` (set by `Runtime`)."""
    asyncio_driver: AsyncioDriver | None = None
    """The driver of asyncio callers, when the runtime is a guest of an asyncio loop."""
    durable: Any = None
    """The journal of detached and deferred calls (engine/_detached.py `Book`; set at opening)."""

    async def run(self, fn: Callable[[], Awaitable[T]], /) -> T:
        """`await fn()`: the runtime's own steps (a detached call's verbs), for a trio caller."""
        return await fn()

    def context_of(self, c: Call[ToolPlan]) -> CallContext:
        """`c`'s context, made the first time a policy asks for it (`CallRequest.ctx`)."""
        if c.ctx is None:
            c.ctx = self.context(c.call, c.plan.tool if c.plan.routed else None, c.metadata, c.principal)
        return c.ctx

    def prepare_all(
        self,
        calls: Sequence[ToolCall],
        metadata: Mapping[str, Any] | None,
        deadline: float,
        timeout: float | None,
        reply: Any,
        principal: str | None,
        scope: Scope | None,
    ) -> list[Call[ToolPlan]]:
        """`prepare` each call of a batch (`reply`: the batch's one reply slot), and its
        per-batch budget (`gate_batch`)."""
        prepare = self.prepare
        cs = [
            prepare(call, metadata, deadline, timeout, reply, i, principal, scope)
            for i, call in enumerate(calls)
        ]
        if self._batch_gates:
            self.gate_batch(cs)
        pipeline = self.pipeline
        if pipeline is not None and pipeline.has_starting:
            for c in cs:  # not begun: if its caller leaves before it is, it still hears it start
                c.notes = _NOT_BEGUN
        return cs

    def abandon_all(self, calls: Sequence[Call[ToolPlan]]) -> Sequence[Call[ToolPlan]]:
        """The caller stopped waiting (its cancellation, or it stopped reading): each call not
        answered yet is cancelled and answered CANCELLED now (a running call's work ends later,
        in the one end). Returns `calls`, whose finishing flows are the caller's to drive."""
        for c in calls:
            if not c.settled:
                c.abandon(FailureKind.CANCELLED, CANCELLED_MESSAGE)
                c.fail(FailureKind.CANCELLED, CANCELLED_MESSAGE)  # a running one: an orphan now
        return calls

    def admit(self, c: Call[ToolPlan], host: bool = False, here: bool = False) -> bool:
        """Its tool's mailbox starts it, queues it or refuses it; False: full (wait for room).

        `host`: the caller is asyncio code on the host loop (a `loop="any"` tool runs there).
        `here`: the caller is a trio task that runs the call itself if it may: a call with no
        gates that only awaits another process, a slot free now (`InCaller`; it is RUNNING on
        return and its caller awaits `plan.in_caller.run`).
        """
        plan = c.plan
        gates = c.gates
        if gates is not None:
            while c.passed < len(gates):  # its budgets first: it may wait in one
                if not gates[c.passed].enter(c, host):
                    return True  # admitted when a place is free (`readmit`)
                c.passed += 1
        elif here and plan.in_caller is not None and plan.mailbox.startable():
            return plan.mailbox.admit(c, plan.in_caller)  # starts it: nothing runs before `run`
        return plan.mailbox.admit(c, plan.host_executor if host else None)

    def readmit(self, c: Call[ToolPlan], host: bool = False) -> None:
        """Admit a call that waited outside its mailbox (in a budget's gate, or for a retry)."""
        if c.state is not QUEUED:
            return
        if not self.admit(c, host):
            c.plan.mailbox.wait_room_soon(lambda: self.readmit(c, host))

    def gate_batch(self, cs: Sequence[Call[ToolPlan]]) -> None:
        """`Budget(per_batch=N)`: at most N of one batch's calls run at once (the rest wait)."""
        budget = self._settings.options.budget
        if budget is None or budget.per_batch is None or len(cs) <= budget.per_batch:
            return
        gate = Gate(budget.per_batch, self.readmit)
        for c in cs:
            if c.state is QUEUED:
                c.gates = (gate,) if c.gates is None else (gate, *c.gates)

    def _cached(self, call: ToolCall, principal: str | None) -> ToolResult | None:
        """A cache hit answered at the entry: a call of a tool whose first policy is its `Cache`
        (on a MemoryStore), no feature to hear it, arguments as text seen before word for word.
        It is what the cache would answer at the start of begin, counted the same, without
        the decoding, hashing and policy steps in between (a hit costs under half a call)."""
        arguments, name, call_id = call.arguments, call.name, call.id
        if type(arguments) is not str or type(name) is not str or type(call_id) is not str:
            return None
        actor = self._routing.routes.get(name)
        if actor is None or self.closing or actor.mailbox.closed:
            return None
        plan = actor.plan
        cache = plan.cached
        if cache is None or (principal is not None and type(principal) is not str):
            return None
        hit = cache.hit_by_text(principal, arguments)
        if hit is None:
            return None
        counters = plan.counters
        counters.calls += 1
        counters.succeeded += 1
        return ToolSuccess(call_id=call_id, tool=name, content=hit.content, value=hit.value, parts=hit.parts)

    # -- the policies' and features' halves, driven here or awaited ---------------------

    def starting(self, c: Call[ToolPlan]) -> Flow[None]:
        """Begin's steps after `prepare`, as one flow: the policies' before-halves (a call
        answered already hears them too), then the features' starting hooks."""
        policies = c.plan.policies
        if policies:
            request = yield from before(c, policies, self.context_of, self._chain_of)
            if request is not None and (  # not as it came, or answered already: see to it
                request._redacted
                or request.arguments is not c.call.arguments
                or request.tool_name != c.call.name
                or c.state is not QUEUED
            ):
                self._let_through(c, request)
        # The features' starting hooks, once per call (`c.notes` None from here on), then the
        # policies' decisions kept until the call's span existed.
        notes, c.notes = c.notes, None
        pipeline = self.pipeline
        if pipeline is not None and pipeline.has_starting:
            yield from pipeline.starting(c.shown or c.call, c.ctx)  # type: ignore[arg-type]
        if notes:
            self._tell(c, notes)

    def _tell(self, c: Call[ToolPlan], notes: Any) -> None:
        """The policies' decisions, on the call's span now that it has one (from here on they
        go straight to it)."""
        ctx = c.ctx
        if notes and ctx is not None:
            for name, attributes in notes:
                ctx.add_event(name, attributes)

    def finishing(self, c: Call[ToolPlan]) -> Flow[None]:
        """End's steps on the caller's side, as one flow, once (a call reported already has
        none): the features' starting hooks if its caller left before they ran (while a policy
        awaited), the policies' after-halves, the count, the features' finishing hooks."""
        if c.state is REPORTED:
            return
        notes = c.notes
        if notes is not None:  # its caller left before its features heard it start: now they do,
            c.notes = None  # each as far as it can without waiting (its end is what waits now)
            pipeline = self.pipeline
            if pipeline is not None and pipeline.has_starting:
                drive_now(pipeline.starting(c.shown or c.call, c.ctx))  # type: ignore[arg-type]
            self._tell(c, notes)
        if c.flows is not None:
            yield from after(c)
        if not c.reported():
            return
        pipeline = self.pipeline
        if pipeline is not None:
            yield from pipeline.finishing(c.shown or c.call, c.result, c.ctx)  # type: ignore[arg-type]

    def waits(self, c: Call[ToolPlan]) -> bool:
        """Whether `c`'s starting and finishing flows may suspend (a policy of its tool that
        `suspends`, a feature's hook that can): they are awaited then, else driven here."""
        return c.plan.suspends or self._hooks_wait

    async def start(self, c: Call[ToolPlan]) -> None:
        """A trio caller's drive of `c`'s starting flow: awaited if it may suspend, else here."""
        if self.waits(c):
            await drive(self.starting(c))
        else:
            drive_now(self.starting(c))

    async def finish(self, c: Call[ToolPlan]) -> None:
        """A trio caller's drive of `c`'s finishing flow: awaited if it may suspend (a caller
        cancelled meanwhile still has every step finished, shielded, within `HOOK_GRACE`),
        else here."""
        if self.waits(c):
            await drive(self.finishing(c), finish_within=HOOK_GRACE)
        else:
            drive_now(self.finishing(c))

    def _chain_of(self, name: str) -> tuple[Policy, ...] | None:
        """The policies of the tool a policy sends a call to (None: there is no such tool)."""
        actor = None if self.closing else self._routing.actor(name)
        return actor.plan.policies if actor is not None else None

    def _let_through(self, c: Call[ToolPlan], request: CallRequest | None) -> None:
        """The call as its policies let it through: rewritten (decoded again), sent to another
        tool, or redacted for observers. None: a policy answered it. A call answered before
        its policies ran (its arguments did not decode, its tool is down) keeps its answer: of
        what they did, only their redaction applies."""
        if request is None:
            return
        if c.settled:
            if request._redacted:
                c.shown = ToolCall(
                    id=c.call.id, name=c.call.name, arguments=redacted(c.call.arguments, request._redacted)
                )
            return
        call = c.call
        if request.tool_name != call.name or request.arguments is not call.arguments:
            if request.tool_name != call.name:
                actor = None if self.closing else self._routing.actor(request.tool_name)
                if actor is None:
                    if request._redacted:
                        c.shown = ToolCall(
                            id=call.id, name=call.name, arguments=redacted(call.arguments, request._redacted)
                        )
                    c.fail(
                        FailureKind.UNKNOWN_TOOL,
                        f"a policy sent the call to tool {echo(request.tool_name)!r}, which does not exist",
                    )
                    return
                c.plan.holding -= 1
                c.plan = actor.plan
                actor.plan.holding += 1
                c.asked = call.name  # its result still answers the call the model made
                if c.ctx is not None:
                    c.ctx.tool = actor.tool
                    c.ctx.tool_name = actor.name
                c.call = call_of(request)
                if c.ctx is None and actor.needs_context:
                    self.context_of(c)  # the tool it was sent to takes one
            else:
                c.call = call_of(request)
            c.plan.decode(c)
        if request._redacted:
            c.shown = ToolCall(
                id=c.call.id, name=c.call.name, arguments=redacted(c.call.arguments, request._redacted)
            )

    # -- a trio caller -------------------------------------------------------------------

    async def call(
        self,
        call: ToolCall,
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        principal: str | None = None,
        scope: Scope | None = None,
    ) -> ToolResult:
        """One call from a trio task: always its one result (`Runtime.call`)."""
        if self.closed or self._dormant:
            self.check_open()
        if self._resilience.caches and self.pipeline is None and scope is None and metadata is None:
            result = self._cached(call, principal)
            if result is not None:
                await _checkpoint_if_cancelled()
                await _cancel_shielded_checkpoint()
                return result
        # A parked call keeps this frame: few locals (each costs every waiting call 8 bytes).
        c = self.prepare(
            call,
            metadata,
            _INF if timeout is None else trio.current_time() + timeout,
            timeout,
            principal=principal,
            scope=scope,
        )
        pipeline = self.pipeline
        suspended = False
        try:
            if pipeline is not None or c.plan.policies:
                if c.plan.suspends or self._hooks_wait:  # `waits`
                    await drive(self.starting(c))
                else:
                    drive_now(self.starting(c))  # nothing to await: no coroutine for it
            await _checkpoint_if_cancelled()  # trio's rule; a cancelled caller runs nothing
            plan = c.plan
            if c.state is QUEUED:
                if not (
                    plan.mailbox.admit(c, None)
                    if c.gates is None and plan.in_caller is None
                    else self.admit(c, here=True)
                ):
                    await self._wait_room(c)
                elif c.state is RUNNING and plan.in_caller is not None and c.executor is plan.in_caller:
                    suspended = await plan.in_caller.run(c)  # here, in this task: no hop to a worker
            if c.state is DONE:
                if not suspended:  # trio's rule: a schedule point, unless the tool's code gave one
                    await _cancel_shielded_checkpoint()
            elif c.expires == _INF and c.plan.untimed:  # no deadline: no scope
                await c.wait()
            else:
                await self._wait_timed(c)
        except BaseException:
            await self.cancelled([c])
            raise
        if pipeline is None and c.flows is None:
            c.reported()  # nothing to tell: no flow to drive
        elif c.plan.suspends or self._hooks_wait:  # `finish`, written out: a call less
            await drive(self.finishing(c), finish_within=HOOK_GRACE)
        else:
            drive_now(self.finishing(c))
        return c.result  # type: ignore[return-value]  # DONE

    async def stream(
        self,
        call: ToolCall,
        *,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        principal: str | None = None,
        scope: Scope | None = None,
        buffer: int = STREAM_BUFFER,
    ) -> AsyncGenerator[str | ToolResult, None]:
        """One call from a trio task, read as it goes: a streaming tool's chunks, then the one
        result (`Runtime.stream`). The call goes the way `call` takes it; only its reply slot
        differs: a bounded channel the tool's chunks go through, closed when it is settled."""
        if self.closed or self._dormant:
            self.check_open()
        deadline = math.inf if timeout is None else trio.current_time() + timeout
        send: trio.MemorySendChannel[str]
        receive: trio.MemoryReceiveChannel[str]
        send, receive = trio.open_memory_channel(buffer)  # not `[str]`: a generic alias costs ~10 us
        c = self.prepare(call, metadata, deadline, timeout, _Stream(send), 0, principal, scope)
        try:
            if self.pipeline is not None or c.plan.policies:
                await self.start(c)
            await trio.lowlevel.checkpoint_if_cancelled()  # trio's rule; a cancelled caller runs nothing
            plan = c.plan  # a policy may have sent it to another tool
            if c.state is QUEUED:
                if plan.streams:
                    plan.sinks[c] = send
                if not self.admit(c):
                    await self._wait_room(c)
            with receive:
                while (chunk := await self._next_chunk(c, receive)) is not None:
                    yield chunk  # outside every cancel scope: the reader's code runs here
        except BaseException:
            await self.cancelled([c])
            raise
        await self.finish(c)
        yield c.result  # type: ignore[misc]  # settled

    async def _next_chunk(self, c: Call[ToolPlan], receive: trio.MemoryReceiveChannel[str]) -> str | None:
        """The call's next chunk, or None once it is settled and its chunks are read; its deadline
        lapses meanwhile (as in `_wait_timed`)."""
        if c.expires == math.inf and c.plan.untimed:  # no deadline to keep
            try:
                return await receive.receive()
            except trio.EndOfChannel:
                return None
        while True:
            with trio.CancelScope(deadline=math.inf if c.settled else c.expires) as waiting:
                c.waiter = waiting
                try:
                    return await receive.receive()
                except trio.EndOfChannel:
                    return None
                finally:
                    c.waiter = None
            if not c.settled and c.expires <= trio.current_time():
                c.lapse()

    async def _wait_room(self, c: Call[ToolPlan]) -> None:
        """The call's mailbox is full: wait for room (backpressure), no longer than its deadline."""
        mailbox = c.plan.mailbox
        with trio.CancelScope(deadline=c.expires) as waiting:
            c.waiter = waiting
            while c.state is QUEUED and not self.admit(c):
                await mailbox.wait_room()
        c.waiter = None
        if c.state is QUEUED and waiting.cancelled_caught:
            c.lapse()

    async def _wait_timed(self, c: Call[ToolPlan]) -> None:
        """Wait, answering the call from this side once its deadline lapses."""
        while True:
            with trio.CancelScope(deadline=c.expires) as waiting:
                c.waiter = waiting
                if c.state is not DONE:
                    await c.wait()
            c.waiter = None
            if c.state is DONE:
                return
            if c.expires <= trio.current_time():  # not moved later meanwhile (a retry's next attempt)
                c.lapse()
            if c.state is DONE:
                return

    async def cancelled(self, calls: Sequence[Call[ToolPlan]]) -> None:
        """A trio caller was cancelled: every call not yet answered fails CANCELLED now. Their
        finishing flows run together, shielded, within one `HOOK_GRACE` (a batch of a thousand
        calls whose audit hook takes a tenth of a second each still ends in one); a call whose
        flow did not end by then is counted all the same, and logged."""
        waiting = []
        for c in self.abandon_all(calls):
            if c.state is REPORTED:
                continue
            if self.waits(c):
                waiting.append(c)
            else:
                drive_now(self.finishing(c))
        if not waiting:
            return
        with trio.CancelScope(shield=True):
            with trio.move_on_after(HOOK_GRACE):
                if len(waiting) == 1:
                    await drive(self.finishing(waiting[0]))
                else:
                    async with trio.open_nursery() as nursery:
                        for c in waiting:
                            nursery.start_soon(drive, self.finishing(c))
            stragglers = [c for c in waiting if c.reported()]
        if stragglers:
            log.warning(
                "%d cancelled call(s) (%s...) were counted without their finishing hooks, which "
                "did not end within %s s",
                len(stragglers),
                echo(stragglers[0].call.id),
                HOOK_GRACE,
            )

    async def call_many(
        self, calls: Sequence[ToolCall], *, scope: Scope | None = None, **settings: Unpack[CallSettings]
    ) -> list[ToolResult]:
        """A trio caller's `call_many`: its batch's results in the order of `calls`."""
        return await collected(self.batch(calls, scope=scope, **settings), len(calls))

    async def batch(
        self,
        calls: Sequence[ToolCall],
        *,
        scope: Scope | None = None,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        principal: str | None = None,
    ) -> AsyncGenerator[list[Call[ToolPlan]], None]:
        """A trio caller's batch: admit every call, then yield the finished ones in chunks, in
        the order they finish (a thousand calls finishing together cost one resume)."""
        self.check_open()
        deadline = math.inf if timeout is None else trio.current_time() + timeout
        batch = Batch(deadline)
        cs = self.prepare_all(calls, metadata, deadline, timeout, batch, principal, scope)
        plans = {c.plan for c in cs}  # most batches call a few tools: what each needs, once
        if not batch.timed:
            batch.timed = any(not plan.untimed for plan in plans)
        plain = self.pipeline is None and not any(plan.policies for plan in plans)
        finished = 0
        try:
            if not plain:
                await self._begin_batch(cs, plans)
            with trio.move_on_at(deadline):
                await trio.lowlevel.checkpoint()  # trio's rule; and a cancelled caller runs nothing
                admitted = 0
                for c in cs:
                    if c.state is not QUEUED:
                        continue
                    if not (c.plan.mailbox.admit(c, None) if c.gates is None else self.admit(c)):
                        mailbox = c.plan.mailbox
                        while c.state is QUEUED and not self.admit(c):
                            await mailbox.wait_room()  # a full mailbox: wait for room (backpressure)
                    admitted += 1
                    if admitted % _EAGER_RUN == 0:
                        await trio.lowlevel.checkpoint()  # a long batch lets others run too
            while finished < len(cs):
                while not batch.done:
                    await batch.wait()
                    if not batch.done:  # a call's deadline lapsed
                        batch.expires = lapse_due(cs, trio.current_time())
                chunk = list(batch.done)
                batch.done.clear()
                for c in chunk:
                    if plain:
                        c.reported()  # nothing to await: no coroutine for it
                    else:
                        await self.finish(c)
                finished += len(chunk)
                yield chunk
        except BaseException:
            await self.cancelled([c for c in cs if c.state is not REPORTED])
            raise

    async def _begin_batch(self, cs: list[Call[ToolPlan]], plans: set[Any]) -> None:
        """Begin's steps after `prepare` for a batch: its calls whose policies may suspend
        together (a policy that asks someone lets them through at once), then the others."""
        begun: set[Call[ToolPlan]] = set()
        if any(plan.suspends for plan in plans):
            suspending = [c for c in cs if c.plan.suspends and c.state is QUEUED]
            async with trio.open_nursery() as nursery:
                for c in suspending:
                    nursery.start_soon(self.start, c)
            begun.update(suspending)
        for c in cs:
            if c not in begun:
                await self.start(c)


class Batch:
    """The reply slot shared by a batch's calls."""

    __slots__ = ("_wakeup", "done", "expires", "timed", "waiter")

    def __init__(self, deadline: float) -> None:
        self.timed = deadline != math.inf  # or one of its tools has a timeout (set by the entry)
        self.done: collections.deque[Call[ToolPlan]] = collections.deque()
        self._wakeup = trio.Event()
        self.expires = deadline  # the earliest `expires` of its calls (a lower bound)
        self.waiter: trio.CancelScope | None = None

    def settled(self, call: Call[ToolPlan]) -> None:
        done = self.done
        done.append(call)
        if len(done) == 1:  # the waiter parks only with none done: the first one wakes it
            self._wakeup.set()

    def expire_at(self, when: float) -> None:
        if when < self.expires:
            self.expires = when
            waiter = self.waiter
            if waiter is not None and when < waiter.deadline:
                waiter.deadline = when

    async def wait(self) -> None:
        """Return when at least one settled call is waiting in `done`, or at `expires`."""
        if not self.timed:  # no deadline anywhere in the batch: no scope to enter
            while not self.done:
                self._wakeup = trio.Event()
                await self._wakeup.wait()
            return
        with trio.CancelScope(deadline=self.expires) as self.waiter:
            while not self.done:
                self._wakeup = trio.Event()
                await self._wakeup.wait()
        self.waiter = None


async def collected(chunks: AsyncGenerator[list[Call[Any]], None], n: int) -> list[ToolResult]:
    """A batch's `n` results in the order of its calls, from its chunks (`call_many`)."""
    results: list[Any] = [None] * n
    async with contextlib.aclosing(chunks):
        async for chunk in chunks:
            for c in chunk:
                results[c.index] = c.result
    return results


def lapse_due(calls: Sequence[Call[ToolPlan]], now: float) -> float:
    """Lapse every call of a batch whose `expires` has come; returns the next `expires`."""
    soonest = math.inf
    for call in calls:
        state = call.state
        if state is DONE or state is REPORTED:
            continue
        if call.expires <= now:
            call.lapse()
        state = call.state
        if state is not DONE and state is not REPORTED and call.expires < soonest:
            soonest = call.expires
    return soonest


def _waits_on_itself(c: Call[ToolPlan], capacity: float) -> bool:
    """A call from inside a tool with `max_concurrency` to itself, when every slot is held by
    its own call chain, would wait forever: OVERLOADED instead."""
    plan = c.plan
    running = call_chain.get()
    if not running or plan.counters not in running:
        return False
    held = running.count(plan.counters)
    if held < capacity:
        return False
    c.fail(
        FailureKind.OVERLOADED,
        f"tool {c.call.name!r} would wait on itself: all {held} of its slots "
        "(max_concurrency) are held by the chain of calls that makes this call",
    )
    return True


def _sanitized(call: ToolCall) -> tuple[ToolCall, _Problem | None]:
    """A copy of `call` safe to echo in results, spans and logs, and what was wrong with it."""
    name, call_id = call.name, call.id
    problem: _Problem | None = None
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


# -- an asyncio caller ----------------------------------------------------------------------------


class _Waiter:
    """The reply slot of an asyncio caller: its calls settle into `done` and wake it; its
    deadlines are a timer of the loop, which lapses the calls that are due."""

    __slots__ = ("_future", "_loop", "_timer", "_when", "calls", "done")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._future: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._when = math.inf
        self.calls: Sequence[Call[ToolPlan]] = ()
        self.done: collections.deque[Call[ToolPlan]] = collections.deque()

    def settled(self, call: Call[Any]) -> None:
        self.done.append(call)
        future = self._future
        if future is not None and not future.done():
            future.set_result(None)

    def expire_at(self, when: float) -> None:
        if when < self._when:
            self._arm(when)

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._when = when
        if when != math.inf:
            delay = max(0.0, when - trio.current_time())
            self._timer = self._loop.call_at(self._loop.time() + delay, self._lapse)

    def _lapse(self) -> None:
        self._timer = None
        self._when = math.inf
        self._arm(lapse_due(self.calls, trio.current_time()))

    async def wait(self, also: asyncio.Future[Any] | None = None) -> None:
        """Return once a call has settled into `done` (its deadlines lapse meanwhile), or `also` is done."""
        if self.done and also is None:  # (with `also`: a call settled before is not what it waits for)
            return
        if self._timer is None:
            self._arm(min((c.expires for c in self.calls if not c.settled), default=math.inf))
        future = self._future = self._loop.create_future()
        try:
            if also is None:
                await future
            else:
                await asyncio.wait((future, also), return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._future = None
            future.cancel()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class AsyncioDriver:
    """How asyncio code on the host loop of a guest trio run (`open_asyncio_runtime`) waits
    for the entry's steps: the same steps as a trio caller's, its waiting an asyncio future
    and a timer of the loop. A call that cannot suspend runs right there, a sync tool's thread
    reports to the loop, an asyncio tool's coroutine becomes a task of the loop, a trio tool's
    call is handed to a worker task of its actor. Only when a flow may suspend (a feature's hook,
    a policy that `suspends`), and for a stream, do the calls go through a trio task instead.

    Args:
        entry: the engine's entry.
        loop: the host loop (calls must come from its thread).
        nursery: where calls that go through trio run (the guest run's).
    """

    def __init__(self, entry: Entry, loop: asyncio.AbstractEventLoop, nursery: trio.Nursery) -> None:
        self._entry = entry
        self._loop = loop
        self._nursery = nursery
        self.closing = False

    @property
    def durable(self) -> Any:
        """The runtime's journal of detached and deferred calls (the entry's)."""
        return self._entry.durable

    def check(self) -> None:
        """Raise unless called from the runtime's loop while it is open."""
        if self.closing:
            raise RuntimeClosed("the asyncio runtime is closed; use it inside its `async with` block")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not self._loop:
            raise RuntimeError(
                "this runtime runs on another event loop (or thread); from other threads use "
                "runtime.embed.RuntimeThread"
            )

    async def call(
        self, call: ToolCall, *, scope: Scope | None = None, **settings: Unpack[CallSettings]
    ) -> ToolResult:
        (result,) = await self.call_many([call], scope=scope, **settings)
        return result

    def call_many(
        self, calls: Sequence[ToolCall], *, scope: Scope | None = None, **settings: Unpack[CallSettings]
    ) -> Awaitable[list[ToolResult]]:
        """The steps' coroutine itself (no coroutine around it: this is every guest call's path)."""
        self.check()
        entry = self._entry
        if not entry.direct:  # a flow may suspend: the calls go through a trio task
            pumped = self._pumped(lambda: entry.batch(calls, scope=scope, **settings))
            return collected(pumped, len(calls))
        return self._direct(calls, scope, settings, None)

    async def batch(
        self, calls: Sequence[ToolCall], *, scope: Scope | None = None, **settings: Unpack[CallSettings]
    ) -> AsyncGenerator[list[Call[ToolPlan]], None]:
        """The calls' chunks as they finish (as the trio `Entry.batch`), from this task: the steps
        run in a task of the loop (`_direct`) whose chunks come here; closing this cancels it."""
        self.check()
        entry = self._entry
        if not entry.direct:
            pumped = self._pumped(lambda: entry.batch(calls, scope=scope, **settings))
            async with contextlib.aclosing(pumped) as chunks:
                async for chunk in chunks:
                    yield chunk
            return
        queue: asyncio.Queue[list[Call[ToolPlan]]] = asyncio.Queue()
        run = self._loop.create_task(self._direct(calls, scope, settings, queue.put_nowait))
        got: asyncio.Task[list[Call[ToolPlan]]] | None = None
        try:
            finished = 0
            while finished < len(calls):
                got = self._loop.create_task(queue.get())
                await asyncio.wait((got, run), return_when=asyncio.FIRST_COMPLETED)
                if not got.done():  # the run ended without a chunk: its error (a closed runtime)
                    run.result()
                    return
                chunk = got.result()
                finished += len(chunk)
                yield chunk
        finally:
            if got is not None and not got.done():
                got.cancel()
            if not run.done():
                run.cancel()  # the calls not answered end CANCELLED there
            with contextlib.suppress(asyncio.CancelledError):
                await run

    async def _direct(
        self,
        calls: Sequence[ToolCall],
        scope: Scope | None,
        settings: CallSettings,
        chunk: Callable[[list[Call[ToolPlan]]], None] | None,
    ) -> list[ToolResult]:
        """The entry's steps for calls whose flows cannot suspend, waited for here: each chunk of
        calls that finished goes to `chunk` (once its finishing flow ran; None: nobody reads
        them as they come); returns the results in the order of `calls`."""
        await asyncio.sleep(0)  # the loop's other tasks get a turn, as trio's checkpoint gives them
        entry = self._entry
        entry.check_open()
        waiter = _Waiter(self._loop)
        timeout = settings.get("timeout")
        deadline = math.inf if timeout is None else trio.current_time() + timeout
        cs = entry.prepare_all(
            calls, settings.get("metadata"), deadline, timeout, waiter, settings.get("principal"), scope
        )
        waiter.calls = cs
        finished = 0
        plain = entry.pipeline is None  # no flow to drive
        if plain:
            for c in cs:
                if c.plan.policies:
                    plain = False
                    break
        try:
            if not plain:
                for c in cs:
                    drive_now(entry.starting(c))
            for admitted, c in enumerate(cs, 1):
                if c.state is QUEUED and not entry.admit(c, host=True):
                    await self._wait_room(c, waiter)
                if admitted % _EAGER_RUN == 0:
                    await asyncio.sleep(0)  # a long batch lets others run too
            while finished < len(cs):
                if not waiter.done:  # (a call that ran right here has settled already)
                    await waiter.wait()
                done = list(waiter.done)
                waiter.done.clear()
                for c in done:
                    if plain:
                        c.reported()
                    else:
                        drive_now(entry.finishing(c))
                finished += len(done)
                if chunk is not None:
                    chunk(done)
        except BaseException:  # cancelled: the calls not answered end CANCELLED
            for c in entry.abandon_all(cs):
                drive_now(entry.finishing(c))
            raise
        finally:
            waiter.close()
        return [c.result for c in cs]  # type: ignore[misc]  # each settled

    async def _wait_room(self, c: Call[ToolPlan], waiter: _Waiter) -> None:
        """The call's mailbox is full: wait for room (backpressure), no longer than its deadline."""
        plan = c.plan
        while c.state is QUEUED and not self._entry.admit(c, host=True):
            room: asyncio.Future[None] = self._loop.create_future()
            withdraw = plan.mailbox.wait_room_soon(functools.partial(_resolve, room))
            try:
                await waiter.wait(room)  # room, or the call settled meanwhile (its deadline)
            except BaseException:
                withdraw()  # it gives up: room it was given passes on to the next waiter
                room.cancel()
                raise
            if not room.done() or c.state is not QUEUED:
                withdraw()  # it leaves the line (room it was given passes on)
            room.cancel()

    def stream(
        self,
        call: ToolCall,
        *,
        scope: Scope | None = None,
        buffer: int = STREAM_BUFFER,
        **settings: Unpack[CallSettings],
    ) -> AsyncGenerator[str | ToolResult, None]:
        """`Entry.stream` in a trio task, each item passed here once the one before was taken
        (so the tool waits for this reader as it would for a trio one)."""
        self.check()
        entry = self._entry
        return self._pumped(lambda: entry.stream(call, scope=scope, buffer=buffer, **settings), paced=True)

    async def _pumped(
        self, items: Callable[[], AsyncGenerator[T, None]], paced: bool = False
    ) -> AsyncGenerator[T, None]:
        """What a trio async generator yields, passed here as it comes (`paced`: each only once
        the one before was taken)."""
        self.check()
        await asyncio.sleep(0)  # the loop's other tasks get a turn, as trio's checkpoint gives them
        queue: asyncio.Queue[Any] = asyncio.Queue()
        taken = trio.Semaphore(1)  # released by this side (the guest run's state is this thread's)

        async def pump() -> None:
            async with contextlib.aclosing(items()) as source:
                async for item in source:
                    if paced:
                        await taken.acquire()
                    queue.put_nowait(item)

        handle = self._spawn(pump)
        handle.ended.add_done_callback(lambda _: queue.put_nowait(_END))
        try:
            while True:
                item = await queue.get()
                if item is _END:
                    ended = handle.ended.result()
                    if ended is None:
                        raise RuntimeClosed("the asyncio runtime closed while these calls were running")
                    ended.unwrap()
                    return
                if paced:
                    taken.release()
                yield item
        finally:
            if not handle.ended.done():
                handle.cancel()
            await asyncio.shield(handle.ended)

    async def run(self, fn: Callable[[], Awaitable[T]], /) -> T:
        """`await fn()` in a trio task of the guest run (registering tools, a call whose flows
        may suspend); cancelling the asyncio caller cancels it there, and waits for it to end."""
        handle = self._spawn(fn)
        try:
            ended = await asyncio.shield(handle.ended)
        except asyncio.CancelledError:
            handle.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(handle.ended)
            raise
        if ended is None:
            raise RuntimeClosed("the asyncio runtime closed while this call was running")
        value: T = ended.unwrap()
        return value

    def _spawn(self, fn: Callable[[], Awaitable[Any]]) -> _Handle:
        """Start `fn` as a trio task in a copy of the caller's context; its outcome comes back
        through `handle.ended` (an asyncio future)."""
        self.check()
        handle = _Handle(self._loop.create_future())

        async def run() -> None:
            result: outcome.Outcome[Any] | None = None
            try:
                with handle.scope:
                    try:
                        result = outcome.Value(await fn())
                    except Exception as exc:
                        result = outcome.Error(exc)
            finally:
                if not handle.ended.done():
                    handle.ended.set_result(result)  # None: cancelled before it could end

        # start_soon from the host loop's thread: trio's run state is this thread's while the
        # guest run lasts, and the new task starts in a copy of the current (the caller's) context.
        self._nursery.start_soon(run)
        return handle


_END = object()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _Handle:
    __slots__ = ("ended", "scope")

    def __init__(self, ended: asyncio.Future[Any]) -> None:
        self.ended = ended
        self.scope = trio.CancelScope()

    def cancel(self) -> None:
        self.scope.cancel()
