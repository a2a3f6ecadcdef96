"""The resilience policies, on the one call path: cache, dedupe and replay, circuit breakers,
rate limits, per-principal and per-batch budgets (retries are the call state machine's own).

Each is a `Policy` the actor puts inside the user's (`policies_for`), outermost first:

    Cache       a read-only tool's earlier success, per principal unless shared   answers
    Dedupe      identical calls in flight join one; a replay gets the stored one  answers / joins
    Breaker     a tool or MCP server that cannot be reached is not called         refuses (UNAVAILABLE)
    Limits      the tool's rate, the principal's rate and concurrency             refuses (OVERLOADED)

so an answer that costs nothing (a hit, a replay) spends no budget. What outlives a call lives
in the runtime's store (`runtime.stores`): a `MemoryStore` is used in place (its steps never
suspend, so these policies do not either); any other store is wrapped in a `DegradingStore`
(down: memory, logged and counted) and its policies suspend (their calls go through a trio task).
Waiting for a budget (`wait=True`) happens at admission, in a `Gate`, never inside a policy: a
batch lets its calls through their policies together, and a policy that waited there for a call
of its own batch to end would wait for ever.
"""

from __future__ import annotations

import collections
import hashlib
import logging
import math
import time
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from ..messages import FailureKind, ToolFailure, ToolResult, ToolSuccess
from ..stores import DegradingStore, MemoryStore, Store
from ..tools import TRANSPORT, Budget, CircuitBreaker, ToolBase, ToolOptions
from ._policy import CallRequest, Policy, PolicyFlow, note

if TYPE_CHECKING:
    from ._call import Call
    from ._options import RuntimeOptions

__all__ = ["Gate", "Resilience", "resilience_counts"]

log = logging.getLogger("runtime.engine")

_result_codec = msgspec.json.Encoder(order="sorted")
_results = msgspec.json.Decoder(ToolSuccess | ToolFailure)


def _decode(data: bytes) -> ToolResult:
    result: ToolResult = _results.decode(data)
    return result


_canonical = msgspec.json.Encoder(order="sorted")
_json = msgspec.json.Decoder()


def run_now(step: Any) -> Any:
    """The value of a store coroutine that cannot suspend (a MemoryStore's)."""
    try:
        step.send(None)
    except StopIteration as stop:
        return stop.value
    step.close()
    raise RuntimeError("a MemoryStore step suspended")  # pragma: no cover - a bug in the store


class Resilience:
    """One runtime's resilience state: its store, breakers, budgets, and where retries wait."""

    def __init__(self, options: RuntimeOptions) -> None:
        store = options.store if options.store is not None else MemoryStore()
        self.local = isinstance(store, MemoryStore)  # its steps never suspend
        self.store: Store = store if self.local else DegradingStore(store)
        self.options = options
        self.breakers: dict[str, BreakerState] = {}
        self.running: collections.Counter[str | None] = collections.Counter()  # per principal
        self.principal_gates: dict[str | None, Gate] = {}
        self.nursery: trio.Nursery | None = None  # retries wait here (set when the runtime opens)
        self.readmit: Callable[[Call, bool], None] = _nothing  # the entry's admission, for a retried call

    @property
    def store_failures(self) -> int:
        store = self.store
        return store.failures if isinstance(store, DegradingStore) else 0

    def step(self, coro: Any) -> Generator[Any, Any, Any]:
        """A store step inside a policy flow: run in place (memory) or yielded to be awaited."""
        if self.local:
            return run_now(coro)
        return (yield coro)

    def policies_for(self, tool: ToolBase[Any, Any], options: ToolOptions) -> tuple[Policy, ...]:
        """The resilience policies of `tool`, outermost first (none unless asked for)."""
        runtime = self.options
        policies: list[Policy] = []
        if options.cache is not None:
            policies.append(CachePolicy(self, tool.name, options))
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
        if budget is not None and budget.per_principal is not None and not budget.wait:
            policies.append(ConcurrencyPolicy(self, budget.per_principal))
        return tuple(policies)

    def gates_for(self, principal: str | None) -> Gate | None:
        """The gate a principal's calls wait in for `Budget(per_principal=, wait=True)`."""
        budget = self.options.budget
        if budget is None or budget.per_principal is None or not budget.wait:
            return None
        gate = self.principal_gates.get(principal)
        if gate is None:
            gate = self.principal_gates[principal] = Gate(budget.per_principal, self.readmit)
        return gate

    def retry_later(self, delay: float, call: Call) -> None:
        """Admit `call` again after `delay` seconds (a retry's backoff)."""
        nursery = self.nursery
        if nursery is None:  # pragma: no cover - retries only happen while the runtime is open
            call.fail(FailureKind.UNAVAILABLE, "the runtime is shutting down")
            return
        nursery.start_soon(self._after, delay, call)

    async def _after(self, delay: float, call: Call) -> None:
        try:
            await trio.sleep(delay)
        except trio.Cancelled:
            call.fail(
                FailureKind.UNAVAILABLE, f"tool {call.call.name!r}: the runtime shut down before a retry"
            )
            raise
        if call.state.value == "queued":
            plan = call.plan
            self.readmit(call, plan is not None and call.executor is plan.host_executor is not None)


def _nothing(call: Call, host: bool) -> None:  # pragma: no cover - replaced when the runtime opens
    pass


class Gate:
    """At most `limit` calls through at once; the others wait in order (`Budget(..., wait=True)`,
    `per_batch`). A call takes its gates in order when admitted and leaves them when settled."""

    __slots__ = ("held", "limit", "readmit", "waiting")

    def __init__(self, limit: int, readmit: Callable[[Call, bool], None]) -> None:
        self.limit = limit
        self.held = 0
        self.readmit = readmit
        self.waiting: collections.deque[tuple[Call, bool]] = collections.deque()

    def enter(self, call: Call, host: bool) -> bool:
        """Take a place, or wait for one (False: it is admitted when a place is free)."""
        if self.held >= self.limit:
            self.waiting.append((call, host))
            return False
        self.held += 1
        return True

    def leave(self, call: Call) -> None:
        self.held -= 1
        waiting = self.waiting
        while waiting and self.held < self.limit:
            call, host = waiting.popleft()
            if call.state.value == "queued":
                self.readmit(call, host)


def key_of(request: CallRequest, tool: str, shared: bool = False) -> str:
    """(tool, canonical arguments, principal) as a short key; the caller's `idempotency_key`
    (in the call's metadata) instead, when it gives one."""
    principal = "" if shared else (request.principal or "")
    given = request._call.metadata.get("idempotency_key") if request._call.metadata else None
    if given is None and request._call.ctx is not None:
        given = request._call.ctx.metadata.get("idempotency_key")
    if isinstance(given, str) and given:
        return f"{tool}\x00{principal}\x00k:{given}"
    args = request.args
    if args is None:
        raw = request.arguments
        args = _json.decode(raw) if isinstance(raw, str | bytes) else raw
    return args_key(tool, principal, args)


def args_key(tool: str, principal: str, args: Any) -> str:
    """The key of decoded arguments (a Struct: its defaults count, its field order does not)."""
    digest = hashlib.blake2b(_canonical.encode(args), digest_size=16).hexdigest()
    return f"{tool}\x00{principal}\x00{digest}"


def _event(request: CallRequest, name: str, attributes: dict[str, Any]) -> None:
    note(request._call, name, attributes)


# -- cache ------------------------------------------------------------------------------------


class CachePolicy(Policy):
    """A read-only tool's successes, served again for `ttl` (per principal unless `shared`)."""

    def __init__(self, resilience: Resilience, tool: str, options: ToolOptions) -> None:
        assert options.cache is not None
        self.r = resilience
        self.tool = tool
        self.cache = options.cache
        self.suspends = not resilience.local  # type: ignore[misc]
        self.entries: collections.OrderedDict[str, tuple[float, ToolSuccess[Any]]] = collections.OrderedDict()
        self.hits = 0
        self.misses = 0

    @property
    def name(self) -> str:
        return "Cache"

    def intercept(self, request: CallRequest) -> PolicyFlow:
        key = key_of(request, self.tool, self.cache.shared)
        hit = yield from self._get(key)
        if hit is not None:
            self.hits += 1
            _event(request, "tool.cache", {"tool.cache.hit": True})
            return hit
        self.misses += 1
        _event(request, "tool.cache", {"tool.cache.hit": False})
        result: ToolResult = yield request
        if type(result) is ToolSuccess:
            yield from self._put(key, result)
        return result

    def _get(self, key: str) -> Generator[Any, Any, ToolSuccess[Any] | None]:
        if self.r.local:
            entry = self.entries.get(key)
            if entry is None:
                return None
            if entry[0] <= trio.current_time():
                del self.entries[key]
                return None
            self.entries.move_to_end(key)
            return entry[1]
        data = yield from self.r.step(self.r.store.get(f"cache:{key}"))
        if data is None:
            return None
        found = _decode(data)
        return found if type(found) is ToolSuccess else None

    def _put(self, key: str, result: ToolSuccess[Any]) -> Generator[Any, Any, None]:
        if self.r.local:
            entries = self.entries
            entries[key] = (trio.current_time() + self.cache.ttl, result)
            entries.move_to_end(key)
            while len(entries) > self.cache.max_entries:
                entries.popitem(last=False)
            return
        yield from self.r.step(self.r.store.set(f"cache:{key}", _result_codec.encode(result), self.cache.ttl))

    def invalidate(self, principal: str | None, args: Any) -> Generator[Any, Any, int]:
        """Forget this tool's results: all, a principal's (`principal`), or one call's (`args`:
        its decoded arguments, with `principal`). How many were forgotten."""
        shared = self.cache.shared
        who = "" if shared else (principal or "")
        if args is not None:
            key = args_key(self.tool, who, args)
            if self.r.local:
                return 1 if self.entries.pop(key, None) is not None else 0
            deleted: bool = yield from self.r.step(self.r.store.delete(f"cache:{key}"))
            return int(deleted)
        prefix = f"{self.tool}\x00" if shared or principal is None else f"{self.tool}\x00{who}\x00"
        if self.r.local:
            doomed = [k for k in self.entries if k.startswith(prefix)]
            for k in doomed:
                del self.entries[k]
            return len(doomed)
        count: int = yield from self.r.step(self.r.store.delete_prefix(f"cache:{prefix}"))
        return count


# -- dedupe and replay --------------------------------------------------------------------------


class Flight:
    """Identical calls in flight, as one gate: the first admitted runs (`runner`), the others wait
    here, outside any mailbox, and are settled with its result when it settles (`leave`). A
    runner whose own caller gave up hands the run to the next waiting call. Joining never waits
    inside a policy, so identical calls of one batch join too.

    On a shared store the run holds the key's claim (`claimed`) for other processes. While
    another process holds it (`elsewhere`), every call here waits in this gate and a task
    watches the store (`watch`): the other run's journaled result answers them all, or, its
    claim let go, the claim is taken and the first of them runs. Waiting for it inside the
    policy instead held up the batch's other calls, whose claims the other process waited on
    in turn when it was given the same turn: both waited until the claims ran out.
    """

    __slots__ = (
        "claimed",
        "decision",
        "elsewhere",
        "key",
        "members",
        "owner",
        "recorded",
        "result",
        "runner",
        "waiting",
    )

    def __init__(
        self, owner: DedupePolicy, key: str, *, claimed: bool = False, elsewhere: bool = False
    ) -> None:
        self.owner = owner
        self.key = key
        self.runner: Call | None = None
        self.result: ToolResult | None = None
        self.decision = "joined"  # how its result came: this process's run, or the journal's
        self.recorded = False
        self.claimed = claimed
        self.elsewhere = elsewhere
        self.members = 0  # calls that joined it and have not ended
        self.waiting: collections.deque[tuple[Call, bool]] = collections.deque()

    def enter(self, call: Call, host: bool) -> bool:
        result = self.result
        if result is not None:  # it ended while this call was on its way: the same answer
            self._answer(call, result, self.decision)
            return False
        if self.runner is None and not self.elsewhere:
            self.runner = call
            return True
        self.waiting.append((call, host))
        return False

    def leave(self, call: Call) -> None:
        """The runner settled (its result is `call.result`)."""
        if call is not self.runner:
            return
        result = call.result
        assert result is not None
        if call.cancelled:  # its caller gave up, not the tool: the next waiting call runs it
            self.runner = None
            if not self._run_next():
                self.owner.forget(self)
            return
        self._answer_all(result)

    def take_over(self) -> None:
        """This process holds the claim now: the first call waiting here runs."""
        self.elsewhere = False
        self.claimed = True
        if self.runner is None:
            self._run_next()

    def _run_next(self) -> bool:
        waiting = self.waiting
        while waiting:
            follower, host = waiting.popleft()
            if follower.state.value == "queued":
                self.owner.r.readmit(follower, host)
                return True
        return False

    def _answer_all(self, result: ToolResult, decision: str = "joined") -> None:
        self.result = result
        self.decision = decision
        self.owner.forget(self)
        waiting, self.waiting = self.waiting, collections.deque()
        for follower, _ in waiting:
            if follower.state.value == "queued":
                self._answer(follower, result, decision)

    def _answer(self, call: Call, result: ToolResult, decision: str = "joined") -> None:
        if decision == "joined":
            self.owner.joined += 1
        else:
            self.owner.replayed += 1
        note(call, "tool.dedupe", {"tool.dedupe.decision": decision})
        call.settle(msgspec.structs.replace(result, call_id=call.call.id, tool=call.call.name))

    async def watch(self) -> None:
        """While another process runs this key and calls here wait for it: its result from the
        journal, or its claim once let go (then a call here runs)."""
        owner = self.owner
        store, dedupe = owner.r.store, owner.dedupe
        journal, claim = f"journal:{self.key}", f"claim:{self.key}"
        try:
            while self.elsewhere and self.members:
                await trio.sleep(_WATCH_EVERY)
                if not self.elsewhere:  # a call here took the claim meanwhile
                    return
                stored = await store.get(journal) if dedupe.ttl else None
                if stored is None and await store.add(claim, b"1", dedupe.claim):
                    stored = await store.get(journal) if dedupe.ttl else None  # ended just before?
                    if stored is None:
                        self.take_over()
                        if not self.members:  # the calls that waited for it ended meanwhile
                            self.claimed = False
                            owner.forget(self)
                            await store.delete(claim)
                        return
                    await store.delete(claim)
                if stored is not None:
                    self.elsewhere = False
                    self._answer_all(_decode(stored), "replayed")
                    return
            if self.elsewhere:  # every call that waited for it has ended
                self.elsewhere = False
                owner.forget(self)
        except trio.Cancelled:
            for follower, _ in self.waiting:
                if follower.state.value == "queued":
                    follower.fail(
                        FailureKind.UNAVAILABLE,
                        f"tool {owner.tool!r}: the runtime shut down while an identical call ran elsewhere",
                    )
            raise


_WATCH_EVERY = 0.05  # seconds between looks at the store for another process's run


class DedupePolicy(Policy):
    """Identical calls in flight run once (the others get its result); a finished call's result
    answers a replay of its key for `ttl`, from the store (which may outlive this process)."""

    def __init__(self, resilience: Resilience, tool: str, options: ToolOptions) -> None:
        assert options.dedupe is not None
        self.r = resilience
        self.tool = tool
        self.dedupe = options.dedupe
        self.suspends = not resilience.local  # type: ignore[misc]
        self.flights: dict[str, Flight] = {}
        self.replayed = 0
        self.joined = 0

    @property
    def name(self) -> str:
        return "Dedupe"

    def forget(self, flight: Flight) -> None:
        if self.flights.get(flight.key) is flight:
            del self.flights[flight.key]

    def _replay(self, request: CallRequest, stored: bytes) -> ToolResult:
        self.replayed += 1
        _event(request, "tool.dedupe", {"tool.dedupe.decision": "replayed"})
        return _decode(stored)

    def intercept(self, request: CallRequest) -> PolicyFlow:
        key = key_of(request, self.tool)
        call = request._call
        flight = self.flights.get(key)
        store, step = self.r.store, self.r.step
        journal, claim = f"journal:{key}", f"claim:{key}"
        if flight is None:  # nothing identical runs here: a replay, or another process's run?
            if self.dedupe.ttl:
                stored = yield from step(store.get(journal))
                if stored is not None:
                    return self._replay(request, stored)
            claimed = False
            if not self.r.local:  # the claim says whether another process runs it now
                claimed = yield from step(store.add(claim, b"1", self.dedupe.claim))
                if claimed and self.dedupe.ttl:  # a run elsewhere may have ended since the read
                    stored = yield from step(store.get(journal))
                    if stored is not None:
                        yield from step(store.delete(claim))
                        return self._replay(request, stored)
            flight = self.flights.get(key)  # one may have started while this call read the store
            if flight is None:
                elsewhere = not self.r.local and not claimed
                flight = self.flights[key] = Flight(self, key, claimed=claimed, elsewhere=elsewhere)
                if elsewhere:
                    assert self.r.nursery is not None  # calls run only while the runtime is open
                    self.r.nursery.start_soon(flight.watch)
            elif claimed:
                flight.take_over()
        flight.members += 1
        call.gates = (flight,) if call.gates is None else (*call.gates, flight)
        result: ToolResult = yield request
        flight.members -= 1
        if flight.runner is call and not flight.recorded:  # this call ran it: the journal's
            flight.recorded = True
            if self.dedupe.ttl and flight.result is not None and _final(result):
                yield from step(store.set(journal, _result_codec.encode(result), self.dedupe.ttl))
        if flight.runner is call or (flight.runner is None and not flight.members):
            if flight.claimed:  # the run ended, or every call that could run it did: let it go
                flight.claimed = False
                yield from step(store.delete(claim))
            if flight.runner is None and not flight.elsewhere:
                self.forget(flight)
        return result


def _final(result: ToolResult) -> bool:
    """Worth replaying: a success or the tool's own failure (not one of getting it to run)."""
    return type(result) is ToolSuccess or result.kind in (FailureKind.ERROR, FailureKind.REJECTED)  # type: ignore[union-attr]


# -- circuit breakers ---------------------------------------------------------------------------


class BreakerState:
    """One breaker (a tool's, or an MCP server's shared by its tools), here and in the store.

    It hears every attempt's outcome from the call state machine (`heard`), retries included, so
    a storm of retried calls opens it as soon as their first attempts fail, and a retry waits for
    nothing while it is open (`allows_retry`)."""

    __slots__ = ("config", "failures", "key", "open_until", "probe", "state")

    def __init__(self, key: str, config: CircuitBreaker) -> None:
        self.key = key
        self.config = config
        self.failures: collections.deque[float] = collections.deque()
        self.open_until = 0.0
        self.probe: Call | None = None  # the one call let through while half-open
        self.state = "closed"

    def refusal(self, now: float, call: Call) -> str | None:
        """Why `call` may not go through now (None: it may; once the cool-down is over, the first
        call to ask goes through as the probe, and the others wait for its outcome)."""
        if self.state == "closed":
            return None
        if now < self.open_until or self.probe is not None:
            wait = max(1, math.ceil(self.open_until - now))
            return (
                f"{_what(self.key)} is failing (circuit open after {self.config.failures} transport "
                f"failures); retry after {wait}s"
            )
        self.state = "half_open"
        self.probe = call
        return None

    def allows_retry(self) -> bool:
        return self.state == "closed"

    def heard(self, call: Call, result: ToolResult) -> None:
        """An attempt of `call` ended with `result` (from `Call._end`)."""
        probe = self.probe is call
        if probe:
            self.probe = None
        if type(result) is ToolFailure and result.kind in TRANSPORT and not call.cancelled:
            now = trio.current_time()
            failures = self.failures
            failures.append(now)
            while failures and failures[0] <= now - self.config.window:
                failures.popleft()
            if self.state == "open":
                return  # calls that were already running when it opened
            if probe or self.state == "half_open" or len(failures) >= self.config.failures:
                self.state, self.open_until = "open", now + self.config.cool_down
                failures.clear()
                note(call, "tool.breaker", {"tool.breaker.state": "opened"})
                log.warning("%s: circuit opened for %gs", _what(self.key), self.config.cool_down)
        elif probe and not call.cancelled:  # any answer but a transport failure: it is reachable
            self.state = "closed"
            self.failures.clear()
            note(call, "tool.breaker", {"tool.breaker.state": "closed"})
            log.info("%s: circuit closed (a probe call got through)", _what(self.key))


class BreakerPolicy(Policy):
    """Refuse calls at once while the tool (or its MCP server) cannot be reached; with a shared
    store, read and publish the breaker's state for other processes."""

    def __init__(self, resilience: Resilience, state: BreakerState) -> None:
        self.r = resilience
        self.b = state
        self.suspends = not resilience.local  # type: ignore[misc]

    @property
    def name(self) -> str:
        return "CircuitBreaker"

    def intercept(self, request: CallRequest) -> PolicyFlow:
        b, now = self.b, trio.current_time()
        local = self.r.local
        if not local and b.state == "closed":  # another process may have opened it
            shared = yield from self.r.step(self.r.store.get(f"breaker:{b.key}"))
            if shared is not None:
                b.state, b.open_until = "open", now + max(0.0, float(shared) - _wall())
        refused = b.refusal(now, request._call)
        if refused is not None:
            _event(request, "tool.breaker", {"tool.breaker.state": "open"})
            return request.fail(FailureKind.UNAVAILABLE, refused)
        probing = b.probe is request._call
        seen = b.open_until
        result: ToolResult = yield request
        if not local:  # tell the other processes what this call's attempts decided
            if b.state == "open" and b.open_until != seen:
                until = str(_wall() + (b.open_until - trio.current_time())).encode()
                yield from self.r.step(self.r.store.set(f"breaker:{b.key}", until, b.config.cool_down))
            elif probing and b.state == "closed":
                yield from self.r.step(self.r.store.delete(f"breaker:{b.key}"))
        return result


def _what(key: str) -> str:
    kind, _, name = key.partition(":")
    return f"MCP server {name!r}" if kind == "mcp" else f"tool {name!r}"


def _wall() -> float:
    return time.time()


# -- budgets and rate limits ------------------------------------------------------------------


class LimitPolicy(Policy):
    """The tool's own rate limit and the principal's (`Budget.rate`): OVERLOADED with the
    seconds to wait, or a wait for the token within the call's deadline (`wait=True`)."""

    def __init__(
        self, resilience: Resilience, tool: str, options: ToolOptions, budget: Budget | None
    ) -> None:
        self.r = resilience
        self.tool = tool
        self.limits = [
            (limit, scope)
            for limit, scope in ((options.rate_limit, "tool"), (budget.rate if budget else None, "principal"))
            if limit is not None
        ]
        self.suspends = not resilience.local or any(limit.wait for limit, _ in self.limits)  # type: ignore[misc]

    @property
    def name(self) -> str:
        return "RateLimit"

    def intercept(self, request: CallRequest) -> PolicyFlow:
        for limit, scope in self.limits:
            key = f"rate:tool:{self.tool}" if scope == "tool" else f"rate:principal:{request.principal or ''}"
            while True:
                wait = yield from self.r.step(self.r.store.take(key, limit.rate, limit.capacity))
                if not wait:
                    break
                if not limit.wait or trio.current_time() + wait >= request._call.deadline:
                    who = f"tool {self.tool!r}" if scope == "tool" else f"principal {request.principal!r}"
                    return request.fail(
                        FailureKind.OVERLOADED,
                        f"{who} is over its rate limit ({limit.rate:g} calls/s); retry after {wait:.2g}s",
                    )
                yield trio.sleep(wait)  # noqa: ASYNC105 - the flow yields it; drive() awaits it
        result: ToolResult = yield request
        return result


class ConcurrencyPolicy(Policy):
    """`Budget(per_principal=N)` without waiting: a principal's call beyond N running fails
    OVERLOADED at once (with `wait=True` the call waits in the principal's `Gate` instead)."""

    def __init__(self, resilience: Resilience, limit: int) -> None:
        self.running = resilience.running
        self.limit = limit

    @property
    def name(self) -> str:
        return "Budget"

    def intercept(self, request: CallRequest) -> PolicyFlow:
        principal = request.principal
        running = self.running
        if running[principal] >= self.limit:
            return request.fail(
                FailureKind.OVERLOADED,
                f"principal {principal!r} already runs {self.limit} calls (its budget); retry when one ends",
            )
        running[principal] += 1
        try:
            result: ToolResult = yield request
        finally:
            running[principal] -= 1
            if not running[principal]:
                del running[principal]
        return result


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
