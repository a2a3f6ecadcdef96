"""The steps every call takes on its way in, whoever makes it (`Steps`; `Entry` adds the trio
caller's waiting to them).

    prepare   route (a lookup in the registry actor's snapshot), the call's context (merged
              metadata), its deadline, and begin: bounds + decode, the call chain; what is wrong
              with the call itself settles it here (unknown tool, bad id, bad arguments)
    starting  the policies' before-halves and the features' `on_call_starting` hooks (`Hooks`,
              engine/_hooks.py: driven here, or awaited if they may suspend)
    admit     its gates, then its tool's mailbox starts it (eager calls run right here), queues
              it, or refuses it
    finish    the policies' after-halves, counted once, the features' finishing hooks (`Hooks`)

A cache hit of a tool whose first policy is its cache is answered before all of them
(`_cached`). Nothing here knows where a tool runs, nor how a caller waits.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from ..exceptions import RuntimeClosed
from ..messages import ECHO_LIMIT, FailureKind, ToolCall, ToolResult, ToolSuccess, echo
from ..tools import Asker, CallContext
from ._call import Call
from ._code import call_chain
from ._hooks import Hooks
from ._options import Settings
from ._resilience import Gate, Resilience
from ._routing import RegistryActor
from ._scope import Scope
from ._states import QUEUED

__all__ = ["Steps"]

log = logging.getLogger("runtime.engine")

_Problem = tuple[FailureKind, str]


class Steps(Hooks):
    """The engine's way in, without the waiting (an internal port: `Entry` is the whole of it)."""

    def __init__(self, routing: RegistryActor, settings: Settings, asking: Asker | None) -> None:
        self._routing = routing
        self._settings = settings
        pipeline = settings.pipeline
        self.pipeline = pipeline if pipeline.active else None
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

    @property
    def direct(self) -> bool:
        """Whether callers that are not trio tasks may run the whole entry themselves (no
        feature hook and no tool's policy can suspend)."""
        pipeline = self.pipeline
        return (pipeline is None or pipeline.hooks_cannot_suspend) and not self._routing.suspends

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
    ) -> Call:
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
            if actor is not None and name not in scope.visible(routing.registry, routing.version):
                actor = None  # hidden from this view: as if it did not exist
        ctx = None
        if self.pipeline is not None or (actor is not None and actor.needs_context):
            ctx = self.context(call, actor.tool if actor is not None else None, metadata, principal, scope)
        if actor is None:
            c = Call(call, ctx, None, deadline, limit, reply, index, principal)
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
        return c

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
        its call came through, or the runtime's for its principal."""
        return self.views(scope if scope is not None else Scope(principal))

    views: Any = None
    """Makes a scoped view of the runtime from a `Scope` (set by `Runtime`)."""

    def context_of(self, c: Call) -> CallContext:
        """`c`'s context, made the first time a policy asks for it (`CallRequest.ctx`)."""
        if c.ctx is None:
            c.ctx = self.context(c.call, c.plan.tool if c.plan is not None else None, c.metadata, c.principal)
        return c.ctx

    def admit_all(self, calls: Sequence[Call], host: bool = False) -> Call | None:
        """Admit each call in turn; the first whose mailbox is full, if any (the caller waits for
        room, then goes on from it)."""
        for c in calls:
            if c.state is QUEUED and not self.admit(c, host):
                return c
        return None

    def admit(self, c: Call, host: bool = False, here: bool = False) -> bool:
        """Its tool's mailbox starts it, queues it or refuses it; False: full (wait for room).

        `host`: the caller is asyncio code on the host loop (a `loop="any"` tool runs there).
        `here`: the caller is a trio task that runs the call itself if it may: a call with no
        gates that only awaits another process, a slot free now (`InCaller`; it is RUNNING on
        return and its caller awaits `plan.in_caller.run`).
        """
        plan = c.plan
        assert plan is not None
        gates = c.gates
        if gates is not None:
            while c.passed < len(gates):  # its budgets first: it may wait in one
                if not gates[c.passed].enter(c, host):
                    return True  # admitted when a place is free (`readmit`)
                c.passed += 1
        elif here and plan.in_caller is not None and plan.mailbox.startable():
            return plan.mailbox.admit(c, plan.in_caller)  # starts it: nothing runs before `run`
        return plan.mailbox.admit(c, plan.host_executor if host else None)

    def readmit(self, c: Call, host: bool = False) -> None:
        """Admit a call that waited outside its mailbox (in a budget's gate, or for a retry)."""
        if c.state is not QUEUED:
            return
        if not self.admit(c, host):
            c.plan.mailbox.wait_room_soon(lambda: self.readmit(c, host))  # type: ignore[union-attr]

    def gate_batch(self, cs: Sequence[Call]) -> None:
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
        hit = cache.hit_now(principal, arguments)
        if hit is None:
            return None
        counters = plan.counters
        counters.calls += 1
        counters.succeeded += 1
        return ToolSuccess(call_id=call_id, tool=name, content=hit.content, value=hit.value, parts=hit.parts)


def _waits_on_itself(c: Call, capacity: float) -> bool:
    """A call from inside a tool with `max_concurrency` to itself, when every slot is held by
    its own call chain, would wait forever: OVERLOADED instead."""
    plan = c.plan
    assert plan is not None
    chain = call_chain.get()
    if not chain or plan.counters not in chain:
        return False
    held = chain.count(plan.counters)
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
