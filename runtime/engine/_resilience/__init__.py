"""The resilience policies, on the one call path: cache, dedupe and replay, circuit breakers,
rate limits, per-principal and per-batch budgets (retries are the call state machine's own).

Each is a `Policy` the actor puts inside the user's (`policies_for`), outermost first:

    Approval    a `requires_approval` call no one can approve now is deferred    answers (pending)
    Cache       a read-only tool's earlier success, per principal unless shared   answers
    Dedupe      identical calls in flight join one; a replay gets the stored one  answers / joins
    Breaker     a tool or MCP server that cannot be reached is not called         refuses (UNAVAILABLE)
    Limits      the tool's rate, the principal's rate and concurrency             refuses (OVERLOADED)

so an answer that costs nothing (a hit, a replay) spends no budget. What outlives a call lives
in the runtime's store (`runtime.stores`): a `MemoryStore` is used in place (its steps never
suspend, so these policies do not either); any other store is wrapped in a `DegradingStore`
(down: memory, logged and counted) and its policies suspend (their calls go through a trio task);
each call's steps run within its deadline (`store_for`): a store that does not answer in time is
down for that call, never waited out.
Waiting for a budget (`wait=True`) happens at admission, in a `Gate`, never inside a policy: a
batch lets its calls through their policies together, and a policy that waited there for a call
of its own batch to end would wait for ever.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

import trio

from ..._flows import now
from ...messages import FailureKind
from ...stores import DegradingStore, MemoryStore, Store
from ...tools import ToolBase, ToolOptions
from .._policies import CallRequest, Policy
from ._approval import ApprovalPolicy
from ._breaker import BreakerPolicy, BreakerState
from ._cache import CachePolicy
from ._common import Gate, args_key, key_of, log
from ._dedupe import DedupePolicy, Flight
from ._limits import LimitPolicy

if TYPE_CHECKING:
    from .._call import Call
    from .._options import RuntimeOptions
    from .._plan import ToolPlan

__all__ = [
    "ApprovalPolicy",
    "BreakerPolicy",
    "BreakerState",
    "CachePolicy",
    "DedupePolicy",
    "Flight",
    "Gate",
    "LimitPolicy",
    "Resilience",
    "args_key",
    "key_of",
    "resilience_counts",
]


class Resilience:
    """One runtime's resilience state: its store, breakers, budgets, and where retries wait."""

    def __init__(self, options: RuntimeOptions) -> None:
        store = options.store if options.store is not None else MemoryStore()
        self.local = isinstance(store, MemoryStore)  # its steps never suspend
        self.store: Store = (
            store if self.local or isinstance(store, DegradingStore) else DegradingStore(store)
        )
        self.options = options
        self.breakers: dict[str, BreakerState] = {}
        self.caches = 0  # cache policies made (the entry looks for hits only when there are some)
        self.principal_gates: weakref.WeakValueDictionary[str | None, Gate] = weakref.WeakValueDictionary()
        self._nursery: trio.Nursery | None = None
        self.readmit: Callable[[Call[ToolPlan], bool], None] = (
            _nothing  # the entry's admission, for a retried call
        )

    @property
    def nursery(self) -> trio.Nursery | None:
        """Where retries wait, and what a store wrote to memory during an outage is copied back
        from (`DegradingStore.copy_back_in`): the runtime's, set when it opens."""
        return self._nursery

    @nursery.setter
    def nursery(self, nursery: trio.Nursery | None) -> None:
        self._nursery = nursery
        if isinstance(self.store, DegradingStore):
            self.store.copy_back_in(nursery)

    @property
    def store_failures(self) -> int:
        store = self.store
        return store.failures if isinstance(store, DegradingStore) else 0

    def store_for(self, request: CallRequest) -> Store:
        """The store as the steps of one call use it: a MemoryStore as it is; any other within
        the call's deadline (a step never waits out a store that does not answer: it is
        answered from memory, counted, `DegradingStore.within`)."""
        store = self.store
        if isinstance(store, DegradingStore):
            return store.within(request.deadline)
        return store

    def step(self, coro: Any) -> Generator[Any, Any, Any]:
        """A store step inside a policy flow: run in place (memory) or yielded to be awaited."""
        if self.local:
            return now(coro)
        return (yield coro)

    def policies_for(self, tool: ToolBase[Any, Any], options: ToolOptions) -> tuple[Policy, ...]:
        """The resilience policies of `tool`, outermost first (none unless asked for)."""
        runtime = self.options
        policies: list[Policy] = []
        if options.requires_approval is not False:
            policies.append(ApprovalPolicy(self, tool.name, options.requires_approval))
        if options.cache is not None:
            policies.append(CachePolicy(self, tool.name, options))
            self.caches += 1
        if options.dedupe is not None:
            policies.append(DedupePolicy(self, tool.name, options))
        breaker = options.breaker or runtime.breaker
        if breaker is not None:
            server = getattr(tool, "server", None)
            key = f"mcp:{server}" if isinstance(server, str) else f"tool:{tool.name}"
            state = self.breakers.get(key)
            if state is None:
                state = self.breakers[key] = BreakerState(key, breaker)
            policies.append(BreakerPolicy(self, state))
        budget = runtime.budget
        if options.rate_limit is not None or (budget is not None and budget.rate is not None):
            policies.append(LimitPolicy(self, tool.name, options, budget))
        return tuple(policies)

    def gates_for(self, principal: str | None) -> Gate | None:
        """The gate of a principal's calls for `Budget(per_principal=)`: they wait in it for room
        (`wait=True`), or are refused OVERLOADED beyond the budget. Kept while a call holds it
        (a weak mapping: a principal seen once costs nothing for ever)."""
        budget = self.options.budget
        if budget is None or budget.per_principal is None:
            return None
        gate = self.principal_gates.get(principal)
        if gate is None:
            limit = budget.per_principal
            refusal = (
                None
                if budget.wait
                else f"principal {principal!r} already runs {limit} calls (its budget); retry when one ends"
            )
            gate = self.principal_gates[principal] = Gate(limit, self.readmit, refusal)
        return gate

    def retry_later(self, delay: float, call: Call[ToolPlan]) -> None:
        """Admit `call` again after `delay` seconds (a retry's backoff)."""
        nursery = self.nursery
        if nursery is None:  # pragma: no cover - retries only happen while the runtime is open
            call.fail(FailureKind.UNAVAILABLE, "the runtime is shutting down")
            return
        nursery.start_soon(self._after, delay, call)

    async def _after(self, delay: float, call: Call[ToolPlan]) -> None:
        """A retry's wait, in the runtime's nursery: nothing here may raise (it would stop the
        runtime), so the wait is never negative (nor nan) and a failure is the call's."""
        try:
            await trio.sleep(max(0.0, delay))
        except trio.Cancelled:
            call.fail(
                FailureKind.UNAVAILABLE, f"tool {call.call.name!r}: the runtime shut down before a retry"
            )
            raise
        if call.state.value == "queued":
            plan = call.plan
            try:
                self.readmit(call, call.executor is plan.host_executor is not None)
            except Exception as exc:  # pragma: no cover - a bug of admission: this call's, not the runtime's
                log.exception("call %s could not be admitted for its retry", call.call.id)
                call.fail(FailureKind.ERROR, f"the call could not be retried: {type(exc).__name__}: {exc}")


def _nothing(call: Call[ToolPlan], host: bool) -> None:  # pragma: no cover - replaced when the runtime opens
    pass


def resilience_counts(policies: tuple[Policy, ...]) -> dict[str, Any]:
    """What a tool's resilience policies counted, for its `ToolStatistics`."""
    counts: dict[str, Any] = {}
    for p in policies:
        if isinstance(p, CachePolicy):
            counts["cache_hits"], counts["cache_misses"] = p.hits, p.misses
        elif isinstance(p, DedupePolicy):
            counts["replayed"], counts["joined"] = p.replayed, p.joined
        elif isinstance(p, BreakerPolicy):
            counts["breaker"] = p.b.state
    return counts
