"""Dedupe: identical calls run once (they join at admission), and a replay gets the stored result."""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING

import msgspec
import trio

from ..._flows import now
from ...messages import FailureKind, ToolFailure, ToolResult, ToolSuccess
from ...tools import ToolOptions
from .._policies import CallRequest, Policy, PolicyFlow, note, passes
from ._common import Shared, _decode, _event, _result_codec, key_of

if TYPE_CHECKING:
    from .._call import Call
    from .._plan import ToolPlan


class Flight:
    """Identical calls in flight, as one gate: the first admitted runs (`runner`), the others wait
    here, outside any mailbox, and are settled with its result when it settles (`leave`). A
    runner whose own caller gives up while others wait is not cancelled: its work goes on for
    them (`keeps`), and is cancelled only once they have all ended too (`unwanted`); on a
    shared store, whose claim and journal its caller's flow keeps, it is cancelled with its
    caller. A run that stopped anyway (its deadline, shutdown) hands the run to the next
    waiting call. Joining never waits inside a policy, so identical calls of one batch join too.

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
        self.runner: Call[ToolPlan] | None = None
        self.result: ToolResult | None = None
        self.decision = "joined"  # how its result came: this process's run, or the journal's
        self.recorded = False
        self.claimed = claimed
        self.elsewhere = elsewhere
        self.members = 0  # calls that joined it and have not ended
        self.waiting: collections.deque[tuple[Call[ToolPlan], bool]] = collections.deque()

    def enter(self, call: Call[ToolPlan], host: bool) -> bool:
        result = self.result
        if result is not None:  # it ended while this call was on its way: the same answer
            self._answer(call, result, self.decision)
            return False
        if self.runner is None and not self.elsewhere:
            self.runner = call
            return True
        self.waiting.append((call, host))
        return False

    def keeps(self, call: Call[ToolPlan]) -> bool:
        """The runner's caller gives up while identical calls wait for its work: it runs on for
        them (it is theirs as much as its caller's), unless they all leave too (`unwanted`)."""
        return call is self.runner and self.result is None and self.owner.r.local and self._wanted()

    def _wanted(self) -> bool:
        return any(follower.state.value == "queued" for follower, _ in self.waiting)

    def unwanted(self) -> None:
        """A waiting call ended: if it was the last one a handed-over run was going on for,
        that run stops."""
        runner = self.runner
        if runner is not None and runner.handed and self.result is None and not self._wanted():
            runner.stop_handed()

    def given_up(self, call: Call[ToolPlan], result: ToolResult) -> None:
        """The runtime stops and a handed-over run does not: the calls waiting for it are
        answered with what its caller would have been (UNAVAILABLE), now."""
        if call is self.runner and self.result is None:
            self._answer_all(result)

    def answered(self, call: Call[ToolPlan]) -> None:
        """The runner was answered while its work goes on: a deadline or the runtime's answer
        is every waiting call's too; a caller that gave up (`cancelled`) is its own business,
        and the work's end decides (`leave`)."""
        if call is self.runner and not _gave_up(call) and self.result is None:
            assert call.result is not None
            self._answer_all(call.result)

    def leave(self, call: Call[ToolPlan], result: ToolResult) -> None:
        """The runner's work is over, with `result`: its answer, or, when it was answered first,
        what the work ended with afterwards (a late result: what it did happened, so the
        journal hears it, and a replay does not run it again)."""
        if call is not self.runner:
            return
        if call.result is not result and not self.recorded and _final(result):
            self._journal(result)  # the work ended after its answer: its flow could not say
        if self.result is not None:
            return
        gave_up = _gave_up(call)
        if gave_up and type(result) is ToolFailure and _run_again(call, result):
            # its caller gave up and the work stopped with it, or failed in a way its Retry would
            # have run again had its caller still waited: the next waiting call runs it
            self.runner = None
            if not self._run_next():
                self.owner.forget(self)
            return
        self._answer_all(result)

    def _journal(self, result: ToolResult) -> None:
        """Journal what the run ended with after its caller's flow was over, and let go of the
        claim that flow kept while the work ran on."""
        self.recorded = True
        owner = self.owner
        store, ttl = owner.r.store, owner.dedupe.ttl
        journal, claim = f"journal:{self.key}", f"claim:{self.key}"
        if owner.r.local:
            if ttl:
                now(store.set(journal, _result_codec.encode(result), ttl))
            return
        claimed, self.claimed = self.claimed, False

        async def write() -> None:
            if ttl:
                await store.set(journal, _result_codec.encode(result), ttl)
            if claimed:
                await store.delete(claim)

        if owner.r.nursery is not None:
            owner.r.nursery.start_soon(write)

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

    def _answer(self, call: Call[ToolPlan], result: ToolResult, decision: str = "joined") -> None:
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

    def __init__(self, resilience: Shared, tool: str, options: ToolOptions) -> None:
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
        if request.answered is not None:  # answered before it ran: nothing to keep, join or count
            return (yield from passes(request))
        key = key_of(request, self.tool)
        call = request._call
        flight = self.flights.get(key)
        store, step = self.r.store_for(request), self.r.step
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
        # first of its gates: a call that waits for an identical run holds no budget meanwhile
        call.gates = (flight,) if call.gates is None else (flight, *call.gates)
        result: ToolResult = yield request
        flight.members -= 1
        if flight.runner is not call:
            flight.unwanted()
        working = request.running  # answered while its work runs on: `leave` journals its end
        if flight.runner is call and not flight.recorded and not call.handed and not working:
            flight.recorded = True  # it ran it: the journal's (a handed-over run's: `leave`)
            if self.dedupe.ttl and flight.result is not None and _final(result):
                yield from step(store.set(journal, _result_codec.encode(result), self.dedupe.ttl))
        if (flight.runner is call and not working) or (flight.runner is None and not flight.members):
            if flight.claimed:  # the run ended, or every call that could run it did: let it go
                flight.claimed = False
                yield from step(store.delete(claim))
            if flight.runner is None and not flight.elsewhere:
                self.forget(flight)
        return result


def _final(result: ToolResult) -> bool:
    """Worth replaying: a success or the tool's own failure (not one of getting it to run)."""
    return type(result) is ToolSuccess or (
        type(result) is ToolFailure and result.kind in (FailureKind.ERROR, FailureKind.REJECTED)
    )


def _run_again(call: Call[ToolPlan], result: ToolFailure) -> bool:
    """The run of a call whose caller gave up ended with `result`: is that no answer for the
    calls waiting for it? Cancelled with its caller (it stopped), or a failure its Retry would
    have tried again. A handed-over run that reached its deadline is their answer, as it is
    when its caller still waits (`answered`): the tool is not run a second time."""
    return result.kind is FailureKind.CANCELLED or call.retried(result)


def _gave_up(call: Call[ToolPlan]) -> bool:
    """Its caller stopped waiting (CANCELLED is only ever the caller's doing): its answer is not
    the other waiting calls' answer."""
    result = call.result
    return call.cancelled or (type(result) is ToolFailure and result.kind is FailureKind.CANCELLED)
